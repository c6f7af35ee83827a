//! `check` and `doctor` name the holder of a job's lock from the `HOST:PID START` line
//! `selfheal run` (and the PHP helper, see `php::helper`) writes into the lock file,
//! through the real binary: a real `selfheal run --lock F -- sleep 30` holds the lock, and
//! `check --explain`, `--format json`, the cron text and the row's message column name its
//! command's host, pid and start beside the wrapper's pid from `/proc/locks`; `doctor`
//! names it for an `{id}` pattern. What another user can write there is untrusted: a
//! garbage, overlong or control-character line names nobody and never reaches the output
//! raw; a host too long to print is cut; a FIFO planted at the lock file's name never hangs
//! `check` or `doctor`. None of it changes a verdict.
//!
//! Nothing asserts a duration: waits are polls with generous timeouts as safety nets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use selfheal::run::holder::{HolderLine, parse_line};

/// The holder line in a lock file, once there is one.
fn wait_for_line(lock: &Path) -> HolderLine {
    let mut line = None;
    wait_until("the holder line is written", secs(30), || {
        line = std::fs::read_to_string(lock)
            .ok()
            .and_then(|t| parse_line(&t));
        line.is_some()
    });
    line.expect("line")
}

/// Kills a process that is not our child (the wrapped command) when dropped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(
            Pid::from_raw(i32::try_from(self.0).expect("a pid")),
            Signal::SIGKILL,
        );
    }
}

/// Row 1 of `sync_log`, running for 10 minutes, its heartbeat 8 minutes old (stale:
/// `stale_after` is 5m), under the standard watch with `lock_file` = the sandbox's
/// `lock-{id}`, parked in `wait_manual` by a real run (`confirm = 1`: at once).
fn stale_row(sb: &Sandbox) -> (SqliteDb, PathBuf) {
    let db = SqliteDb::new(sb);
    db.insert(1, "running", 600);
    sb.heartbeat(1, secs(8 * 60));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nmanual_value = \"wait_manual\"\nconfirm = 1\n",
            sb.lock_template()
        )),
    );
    (db, cfg)
}

/// `check ARGS`, which must end within a minute (a hang is a failure, not a stuck test).
fn check_within(cfg: &Path, args: &[&str]) -> Output {
    let mut c = selfheal();
    c.arg("check").arg("--config").arg(cfg).args(args);
    within(c, "check")
}

fn doctor_within(cfg: &Path) -> Output {
    let mut c = selfheal();
    c.arg("doctor").arg("--config").arg(cfg);
    within(c, "doctor")
}

fn within(mut c: Command, what: &str) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn selfheal");
    let deadline = Instant::now() + secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung: still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// What a program gets for row 1 from a dry run.
fn json_row(cfg: &Path) -> serde_json::Value {
    let o = check_within(cfg, &["--format", "json", "--dry-run"]);
    let (rows, _) = json_lines(&o);
    row(&rows, 1).clone()
}

/// The row message a person would read: no raw control character of the file's.
#[track_caller]
fn no_control_chars(text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "a control character reached the output: {text:?}"
    );
}

#[test]
fn a_wrapped_jobs_lock_is_named_by_its_command_in_explain_json_the_cron_text_and_the_row() {
    let sb = Sandbox::new();
    let (db, cfg) = stale_row(&sb);
    let lock = sb.lock_path(1);
    let wrapper = Proc::spawn(
        selfheal()
            .arg("run")
            .arg("--lock")
            .arg(&lock)
            .args(["--", "sleep", "30"]),
    );
    let line = wait_for_line(&lock);
    let _command = KillOnDrop(line.pid);
    assert_ne!(line.pid, wrapper.pid(), "the line names the command");
    assert_eq!(line.host, hostname());
    let since = line.since_text();

    // --explain: /proc/locks' pid (the wrapper that took the lock), and who the file names.
    let o = check_within(&cfg, &["--explain"]);
    let out = stdout(&o);
    let want = format!(
        "lock held:{} (the file names {} since {since})",
        wrapper.pid(),
        line.named()
    );
    assert!(out.contains(&want), "{want}\n{out}");
    assert!(
        out.contains("  id=1    hung "),
        "naming changes no verdict:\n{out}"
    );

    // JSON: lock_pid as before, lock_holder from the line.
    let r = json_row(&cfg);
    assert_eq!(r["verdict"], "hung", "{r}");
    assert_eq!(r["lock"], "held", "{r}");
    assert_eq!(r["lock_pid"], wrapper.pid(), "{r}");
    assert_eq!(
        r["lock_holder"],
        serde_json::json!({"host": line.host, "pid": line.pid, "since": since}),
        "{r}"
    );
    let in_message = format!("holder {} since {since}", line.named_within(32));
    assert!(
        r["reason"]
            .as_str()
            .is_some_and(|m| m.contains(&in_message)),
        "{r}"
    );

    // The real run parks the row: the cron text and the row's message name the holder.
    let o = check_within(&cfg, &[]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("id=1: set status to 'wait_manual'") && out.contains(&in_message),
        "{out}"
    );
    let message: String = db
        .conn()
        .query_row("SELECT error_msg FROM sync_log WHERE id = 1", [], |r| {
            r.get(0)
        })
        .expect("row 1");
    assert_eq!(db.status(1), "wait_manual");
    assert!(message.contains(&in_message), "{message}");
}

#[test]
fn doctor_names_the_holders_of_an_id_patterns_held_lock_files() {
    let sb = Sandbox::new();
    let (_db, cfg) = stale_row(&sb);
    let lock = sb.lock_path(1);
    // A file of the pattern that names a holder nobody holds now: counted, not named.
    std::fs::write(sb.lock_path(2), "web9:12 2035-03-14T15:09:26Z\n").expect("lock-2");
    let _wrapper = Proc::spawn(
        selfheal()
            .arg("run")
            .arg("--lock")
            .arg(&lock)
            .args(["--", "sleep", "30"]),
    );
    let line = wait_for_line(&lock);
    let _command = KillOnDrop(line.pid);
    let o = doctor_within(&cfg);
    let out = stdout(&o);
    let found: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("written by selfheal run"))
        .collect();
    assert_eq!(found.len(), 1, "{out}");
    assert!(
        found[0].contains(&format!(
            "2 of the 2 lock files in {} carry the holder line selfheal run and the PHP helper \
             write (HOST:PID START), 1 held now (lock-1 by {} since {})",
            sb.dir.path().display(),
            line.named(),
            line.since_text()
        )),
        "{out}"
    );
}

#[test]
fn a_line_a_person_cannot_trust_names_nobody_or_is_cut_and_never_printed_raw() {
    let sb = Sandbox::new();
    let (_db, cfg) = stale_row(&sb);
    let lock = sb.lock_path(1);
    std::fs::write(&lock, "").expect("lock file");
    let holder = flock1_holder(&lock, false);
    let held = format!("lock held:{}", holder.pid());
    let long_host = "x".repeat(200);
    let nobody = [
        "garbage \u{1b}[2J\u{7}\n".to_string(),
        "we\u{1b}[2Jb:12 2035-03-14T15:09:26Z\n".into(),
        "web1:12 2035-03-14T15:09:26Z\u{1b}[2J\n".into(),
        "web1:12 2035-03-14T15:09:26Z extra\n".into(),
        // A first line that does not end within what is read (512 bytes).
        format!("{}:12 2035-03-14T15:09:26Z\n", "y".repeat(600)),
        "\u{0}\u{0}\u{0}".into(),
    ];
    for text in &nobody {
        std::fs::write(&lock, text).expect("write in place");
        let o = check_within(&cfg, &["--explain"]);
        let out = stdout(&o);
        no_control_chars(&out);
        assert!(
            out.contains(&format!("{held}, owner none")),
            "{text:?}:\n{out}"
        );
        assert!(!out.contains("names"), "{text:?}:\n{out}");
        let r = json_row(&cfg);
        assert_eq!(r["lock_holder"], serde_json::Value::Null, "{text:?}: {r}");
        assert_eq!(r["verdict"], "hung", "{r}");
    }

    // A well-formed line with a host too long to print: cut in the output, whole in JSON.
    std::fs::write(
        &lock,
        format!("{long_host}:12 2035-03-14T15:09:26Z\nmore\u{1b}]0;x\n"),
    )
    .expect("write in place");
    let o = check_within(&cfg, &["--explain"]);
    let out = stdout(&o);
    no_control_chars(&out);
    assert!(
        out.contains(&format!(
            "{held} (the file names {}…:12 since 2035-03-14T15:09:26Z)",
            "x".repeat(64)
        )),
        "{out}"
    );
    let r = json_row(&cfg);
    assert_eq!(r["lock_holder"]["host"], long_host.as_str(), "{r}");
    assert_eq!(r["lock_holder"]["pid"], 12, "{r}");
    let reason = r["reason"].as_str().expect("reason");
    assert!(
        reason.contains(&format!(
            "holder {}…:12 since 2035-03-14T15:09:26Z",
            "x".repeat(32)
        )),
        "{reason}"
    );
    assert_eq!(r["verdict"], "hung", "{r}");
}

#[test]
fn a_fifo_at_the_lock_files_name_never_hangs_check_or_doctor() {
    let sb = Sandbox::new();
    let (db, cfg) = stale_row(&sb);
    let lock = sb.lock_path(1);
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");

    // Nobody has it open (a plain open(2) to read it would wait for a writer forever), and
    // nobody holds a lock on it: the row would be written on a free lock, so it is tried.
    let o = check_within(&cfg, &["--explain"]);
    assert!(stdout(&o).contains("  id=1    unknown"), "{}", stdout(&o));
    let r = json_row(&cfg);
    assert_eq!(
        (&r["verdict"], &r["lock"]),
        (&"unknown".into(), &"unreadable".into()),
        "{r}"
    );
    assert!(
        r["basis"]
            .as_str()
            .is_some_and(|b| b.contains("not a regular file")),
        "{r}"
    );
    let o = check_within(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "running");
    doctor_within(&cfg);

    // Held (flock on a descriptor open for reading and writing): held, no holder named.
    let p = Proc::spawn(
        Command::new("python3")
            .arg("-c")
            .arg(
                "import fcntl, os, sys, time\n\
                 fd = os.open(sys.argv[1], os.O_RDWR)\n\
                 fcntl.flock(fd, fcntl.LOCK_EX)\n\
                 time.sleep(600)\n",
            )
            .arg(&lock),
    );
    let pid = i64::from(p.pid());
    wait_until("python3 takes its lock", secs(10), || {
        lock_holders(&lock).contains(&pid)
    });
    let r = json_row(&cfg);
    assert_eq!(
        (&r["lock"], &r["lock_pid"]),
        (&"held".into(), &pid.into()),
        "{r}"
    );
    assert_eq!(r["lock_holder"], serde_json::Value::Null, "{r}");
    check_within(&cfg, &["--explain"]);
    doctor_within(&cfg);
}
