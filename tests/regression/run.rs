//! `selfheal run` on files that were not its own: a script or data file given as the
//! lock, a shared lock another user holds, a heartbeat that cannot be made. Through the
//! real binary with real processes.

use std::process::Command;

use crate::common::*;
use crate::run::{refusal, report, run_with};
use selfheal::run::holder::parse_line;

/// `selfheal run --lock job.sh -- ./job.sh` cut the script to 0 bytes (exit 126).
///
/// `selfheal run --lock job.sh -- ./job.sh`, the `flock FILE cmd` idiom, and `--lock` on a
/// data file: the file is locked (a second run is refused, 75, naming the wrapper) and its
/// bytes and mode are left alone — also a file of another user's (root locks it read-only,
/// as flock(1) does). Before, the script was cut to 0 bytes and made 0644 (exit 126), and a
/// data file's content replaced by the holder line.
#[test]
fn the_flock_idiom_locks_a_script_or_a_data_file_and_leaves_its_bytes_and_mode_alone() {
    let Some((_sb, www)) = www_data_dir() else {
        return;
    };
    let script = www.join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"job ran\"\nexec sleep \"${1:-0}\"\n",
    )
    .expect("script");
    chmod(&script, 0o755);
    let db = www.join("data.db");
    std::fs::write(&db, b"SQLite format 3\0\x10\x00rows").expect("db");
    chmod(&db, 0o640);
    // www-data's own data, which root may lock but must not write.
    let theirs = www.join("theirs.db");
    std::fs::write(&theirs, "www-data's rows\n").expect("db");
    nix::unistd::chown(&theirs, Some(33.into()), Some(33.into())).expect("chown");
    chmod(&theirs, 0o660);
    let marker = www.join("ran");
    for file in [&script, &db, &theirs] {
        let before = bytes_and_mode(file);
        // The idiom: the command is the locked script itself.
        let o = if file == &script {
            run_with(&[("--lock", file)], &["--"]).arg(file).output()
        } else {
            run_with(&[("--lock", file)], &["--", "touch"])
                .arg(&marker)
                .output()
        }
        .expect("run");
        assert_exit(&o, 0);
        if file == &script {
            assert_eq!(stdout(&o), "job ran\n");
        }
        assert_eq!(bytes_and_mode(file), before, "{}", file.display());

        // Held while it runs: a second run is refused and names the wrapper, the process
        // that took the lock (the file names nobody).
        let first = Proc::spawn(
            run_with(&[("--lock", file)], &["--"])
                .arg(&script)
                .arg("600"),
        );
        let wrapper = i64::from(first.pid());
        wait_until("the first run holds the lock", secs(30), || {
            lock_holders(file).contains(&wrapper)
        });
        let o = run_with(&[("--lock", file)], &["--", "true"])
            .output()
            .expect("run");
        let err = refusal(&o);
        assert!(
            err.contains(&format!(
                "is held by pid {wrapper} (selfheal) (the file names no holder)"
            )),
            "{err}"
        );
        drop(first);
        assert_eq!(bytes_and_mode(file), before, "{}", file.display());
    }
}

/// A shared lock another user held was blamed on the gone job the lock file's line named.
///
/// A shared flock another user holds on root's lock makes every run exit 75: the refusal
/// names that process and its user, and does not blame the gone job the line names (before:
/// "which is gone: the lock is kept by what it left behind").
#[test]
fn a_shared_lock_another_user_holds_is_named_as_such_not_blamed_on_the_job() {
    let Some((sb, www)) = www_data_dir() else {
        return;
    };
    let lock = www.join("job.lock");
    let rep = sb.path("r.json");
    let o = run_with(&[("--lock", &lock)], &["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let line = parse_line(&std::fs::read_to_string(&lock).expect("lock")).expect("a line");
    // www-data can read the lock file (0644), so it can hold a shared lock on it.
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=33",
        "--regid=33",
        "--clear-groups",
        "--",
        "flock",
        "--shared",
        "--no-fork",
    ])
    .arg(&lock)
    .args(["sleep", "600"]);
    let reader = Proc::spawn(&mut c);
    let pid = reader.pid();
    wait_until("www-data holds its shared lock", secs(30), || {
        lock_holders(&lock).contains(&i64::from(pid))
    });
    let o = run_with(&[("--lock", &lock), ("--report", &rep)], &["--", "true"])
        .output()
        .expect("run");
    let err = refusal(&o);
    assert!(
        err.contains(&format!(
            "is held by pid {pid} (sleep) of user www-data (uid 33), with a shared lock (not a \
             run of this job, which locks exclusively); one try (--wait 0)"
        )),
        "{err}"
    );
    assert!(
        !err.contains("left behind") && !err.contains("gone"),
        "{err}"
    );
    let r = report(&rep);
    assert_eq!(
        r["lock_holder"]["shared_by"],
        serde_json::json!([{"pid": pid, "name": "sleep", "user": "www-data (uid 33)"}]),
        "{r}"
    );
    assert_eq!(
        r["lock_holder"]["pid"], line.pid,
        "the line is still reported as found"
    );
}

/// The command ran, with a warning and no heartbeat, when its heartbeat could not be made.
///
/// A heartbeat that cannot be created stops the run before the command starts, exit 3, as
/// an unusable lock file does (before: the command ran with a warning and no heartbeat).
#[test]
fn a_heartbeat_that_cannot_be_created_stops_the_run_before_it_starts() {
    if !root_or_skip("a full tmpfs in a mount namespace") {
        return;
    }
    let sb = Sandbox::new();
    let full = sb.path("full");
    std::fs::create_dir(&full).expect("dir");
    let marker = sb.path("ran");
    let rep = sb.path("r.json");
    // A tmpfs with one inode, its root directory's: no file can be made in it, though the
    // directory is writable.
    let o = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs -o size=64k,nr_inodes=1 none \"$FULL\" && exec \"$SELFHEAL\" run \
             --heartbeat \"$FULL/beat\" --report \"$REP\" -- touch \"$MARKER\"",
        )
        .env("SELFHEAL", bin())
        .env("FULL", &full)
        .env("REP", &rep)
        .env("MARKER", &marker)
        .env("LC_ALL", "C")
        .output()
        .expect("unshare");
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.starts_with("selfheal run: error: --heartbeat: ")
            && err.contains("No space left on device")
            && err.trim_end().ends_with("the command was not started"),
        "{err}"
    );
    assert!(!marker.exists(), "the command was not started");
    assert_eq!(report(&rep)["state"], "not_started");
}
