//! What selfheal opens in a directory another user can write: only regular files. A FIFO,
//! a device node or a link to one planted by www-data (the attacker here, through
//! `setpriv`) where a heartbeat or lock file is expected is looked at through an `O_PATH`
//! descriptor and never opened — opening a tty or a watchdog device has side effects, a
//! FIFO could block — and the evidence it stands for proves nothing (`unreadable`: the row
//! is `unknown`, never written). The same when the file is swapped for a link to a device
//! between selfheal's look and its open, a window strace widens. strace's `-yy` names what
//! each `openat` returned (`</dev/null<char 1:3>>`), so the trace shows what was opened.
//!
//! Root only (switching users, `mknod`); skipped elsewhere, failed in CI when not root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::links::{WWW, as_www, chown, setup, www_command, www_dir};
use crate::common::*;

/// A watch whose heartbeat and lock files are www-data's, in `www`.
fn watch(www: &Path) -> String {
    format!(
        "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_file = \"{w}/hb-{{id}}\"\nlock_file = \"{w}/lock-{{id}}\"\n\
         stale_after = \"5m\"\nmax_age = \"4h\"\nended_column = \"end_time\"\n\
         message_column = \"error_msg\"\n",
        w = www.display()
    )
}

fn strace_or_skip() -> bool {
    have_tool("strace", &["-V"], "tracing what selfheal opens")
}

/// The `open` and `openat` calls of a trace that opened something (not `O_PATH`) in `www`, and
/// those that only looked there (`O_PATH`).
fn opens_in(trace: &Path, www: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(trace).expect("trace");
    let www = www.display().to_string();
    let (looked, opened): (Vec<String>, Vec<String>) = text
        .lines()
        .filter(|l| (l.contains(" open(") || l.contains(" openat(")) && !l.contains("resumed>"))
        .filter(|l| l.contains(&www) || l.contains("/dev/null"))
        .map(str::to_string)
        .partition(|l| l.contains("O_PATH"));
    (opened, looked)
}

/// A FIFO, a link to `/dev/null`, a link to a FIFO, and a device node, planted where the
/// heartbeat and lock files of three rows are expected: none is opened, each is unreadable
/// evidence, the rows are `unknown` and nothing is written.
#[test]
fn a_fifo_or_device_planted_as_evidence_is_never_opened_and_proves_nothing() {
    let Some(sb) = setup() else { return };
    if !strace_or_skip() {
        return;
    }
    let www = www_dir(&sb.path("www"));
    let db = SqliteDb::new(&sb);
    for id in 1..=3 {
        db.insert(id, "running", 20 * 60);
    }
    as_www(&format!(
        "cd {} && mkfifo hb-1 && ln -s /dev/null lock-1 && ln -s /dev/null hb-2 && \
         mkfifo lock-2 && mkfifo planted.fifo && ln -s planted.fifo hb-3",
        www.display()
    ));
    // An unprivileged user cannot make a device node: root's, given to www-data.
    let node = www.join("lock-3");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .expect("mknod");
    chown(&node, WWW);
    let cfg = sb.config(&db.url(), &watch(&www));
    let before = db.dump();
    let trace = sb.path("open.trace");
    let o = Command::new("strace")
        .args([
            "-f",
            "-yy",
            "-e",
            "trace=open,openat,creat,stat,lstat,statx,newfstatat",
            "-o",
        ])
        .arg(&trace)
        .arg(bin())
        .args(["check", "--format", "json", "--config"])
        .arg(&cfg)
        .env_remove("SELFHEAL_CONFIG")
        .output()
        .expect("strace");
    let (rows, _) = json_lines(&o);
    for (id, hb) in [(1, "a FIFO"), (2, "a character device"), (3, "a FIFO")] {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "unknown", "row {id}: {r}");
        assert!(
            r["heartbeat"]
                .as_str()
                .is_some_and(|h| h.starts_with("unreadable: ")
                    && h.contains(&format!("{hb}, not a regular file"))),
            "row {id}: {r}"
        );
        assert_eq!(r["lock"], "unreadable", "row {id}: {r}");
        assert_ne!(r["applied"], true, "row {id}: {r}");
    }
    assert_eq!(db.dump(), before, "nothing written");
    let (opened, looked) = opens_in(&trace, &www);
    assert!(opened.is_empty(), "opened:\n{}", opened.join("\n"));
    // A lock file is reached through O_PATH (a held one is opened through it); a heartbeat
    // file, whose status is all that counts, is only looked at: a stat, no descriptor.
    for name in ["lock-1", "lock-2", "lock-3"] {
        assert!(
            looked.iter().any(|l| l.contains(&format!("/{name}\""))),
            "{name} was looked at through O_PATH:\n{}",
            looked.join("\n")
        );
    }
    let text = std::fs::read_to_string(&trace).expect("trace");
    for name in ["hb-1", "hb-2", "hb-3"] {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("/{name}\"")) && l.contains("stat")),
            "{name} was looked at by a stat:\n{text}"
        );
    }
}

/// The lock file www-data holds is swapped for a link to `/dev/null` while selfheal looks
/// at it (every stat of it delayed 0.7 s by strace, the swap made after the second): the
/// device is never opened — the file is opened, if at all, through the descriptor that
/// was looked at — and the row, whose lock was seen held, is not written.
#[test]
fn a_device_swapped_in_between_the_look_and_the_open_is_never_opened() {
    let Some(sb) = setup() else { return };
    if !strace_or_skip() {
        return;
    }
    let www = www_dir(&sb.path("www"));
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 20 * 60);
    let lock: PathBuf = www.join("lock-1");
    as_www(&format!(
        "cd {} && touch hb-1 && printf 'web1:4242 1796000000\\n' > lock-1",
        www.display()
    ));
    let mut holder = www_command(&format!(
        "exec flock --no-fork {} sleep 600",
        lock.display()
    ));
    let _holder = Proc::spawn(&mut holder);
    wait_until("www-data holds its lock", Duration::from_secs(10), || {
        !lock_holders(&lock).is_empty()
    });
    let cfg = sb.config(&db.url(), &watch(&www));
    let before = db.dump();
    let trace = sb.path("swap.trace");
    let child = Command::new("strace")
        .args(["-f", "-yy", "-o"])
        .arg(&trace)
        .arg("-P")
        .arg(&lock)
        .args([
            "-e",
            "trace=open,openat,stat,lstat,statx,newfstatat,fstat",
            "-e",
            "inject=stat,lstat,statx,newfstatat,fstat:delay_exit=700000",
        ])
        .arg(bin())
        .args(["check", "--format", "json", "--config"])
        .arg(&cfg)
        .env_remove("SELFHEAL_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace");
    // strace writes a call's line when it returns, then holds the caller: once the second
    // look (the one before the holder line is read) is written, the open is next.
    wait_until(
        "selfheal's second look at the lock file",
        Duration::from_secs(30),
        || std::fs::read_to_string(&trace).is_ok_and(|t| t.matches("(DELAYED)").count() >= 2),
    );
    as_www(&format!(
        "cd {} && ln -s /dev/null .swap && mv -fT .swap lock-1",
        www.display()
    ));
    let o = child.wait_with_output().expect("wait");
    let text = std::fs::read_to_string(&trace).expect("trace");
    assert!(
        std::fs::symlink_metadata(&lock).is_ok_and(|m| m.file_type().is_symlink()),
        "swapped"
    );
    let (opened, looked) = opens_in(&trace, &www);
    assert!(
        opened.iter().all(|l| !l.contains("/dev/null")),
        "the device was opened:\n{text}"
    );
    assert!(!looked.is_empty(), "the lock file was looked at:\n{text}");
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_ne!(r["verdict"], "dead", "{r}");
    assert_ne!(r["applied"], true, "{r}");
    assert_eq!(db.dump(), before, "nothing written");
}
