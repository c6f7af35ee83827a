//! Files written, deleted or created through what another user planted: the real binary,
//! run as root (as cron often does) over directories the PHP user `www-data` owns, where
//! that user planted links, swapped a directory or took a lock.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::security::links::{
    WWW, as_www, chown, json, setup, state_of, victim, www_command, www_dir,
};

/// A `locks/` directory swapped for a link made root's `if_free` delete a root-only file.
///
/// With `lock_file = ".../runtime/locks/{id}"`, www-data replaced `locks/` with a link to a
/// root-only directory; root's run then removed the root-only file of the same name. The
/// walk to the lock file now refuses that link: the row is still marked (its worker is
/// dead), the release fails for a person to look, and the file stays.
#[test]
fn case1_a_locks_directory_swapped_for_a_link_never_leads_root_to_delete_there() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    let runtime = www_dir(&sb.path("runtime"));
    let target = victim(&sb, "7", "root's own file\n");
    let before = state_of(&target);
    as_www(&format!(
        "ln -s {} {}/locks",
        target.parent().expect("dir").display(),
        runtime.display()
    ));
    db.insert(7, "running", 50 * 60);
    sb.heartbeat(7, Duration::from_secs(47 * 60));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}/locks/{{id}}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            runtime.display()
        )),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    assert_eq!(state_of(&target), before, "the root-only file is untouched");
    let rows = json(&o);
    let r = row(&rows, 7);
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(r["lock_release"], "failed", "{r}");
    let detail = r["lock_release_detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("refused to follow") && detail.contains("www-data"),
        "{detail}"
    );
    assert_eq!(db.status(7), "error");
}

/// `if_free` removed a new worker's live lock, created while the row's write waited.
///
/// The row was judged with its lock file absent; while its compare-and-set waited on a row
/// lock, a new worker created the lock file and claimed its own row; the release then
/// removed that live lock. Staged exactly: the test holds the row `FOR UPDATE` until
/// selfheal's UPDATE waits on it, then creates the lock file, inserts the new worker's row
/// and commits. A file absent when the row was judged is never removed.
#[test]
fn case2_a_lock_file_absent_when_the_row_was_judged_is_never_removed() {
    use mysql::prelude::Queryable;
    let Some(sb) = setup() else { return };
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(1, "running", 50 * 60);
    sb.heartbeat(1, Duration::from_secs(47 * 60));
    let runtime = www_dir(&sb.path("runtime"));
    let lock = runtime.join("sync.lock");
    let cfg = sb.config(
        &db.url,
        &sb.watch(&format!(
            "lock_file = \"{}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            lock.display()
        )),
    );
    let mut holder = db.conn();
    holder.query_drop("START TRANSACTION").expect("begin");
    let _: Vec<i64> = holder
        .query("SELECT id FROM sync_log WHERE id = 1 FOR UPDATE")
        .expect("hold row 1");
    let run = std::thread::spawn({
        let cfg = cfg.clone();
        move || check(&cfg, &["--format", "json"])
    });
    assert!(
        db.wait_for_lock_wait(),
        "selfheal's compare-and-set never waited on row 1"
    );
    // The new worker: its lock file (www-data's, as the job's), then its row.
    as_www(&format!("echo > {}", lock.display()));
    holder
        .query_drop("INSERT INTO sync_log (id, status, start_time) VALUES (2, 'running', NOW())")
        .expect("new row");
    sb.heartbeat(2, Duration::from_secs(1));
    holder.query_drop("COMMIT").expect("commit");
    let o = run.join().expect("check");
    let rows = json(&o);
    let r = row(&rows, 1);
    assert_eq!(r["applied"], true, "{r}");
    assert_ne!(r["lock_release"], "removed", "{r}");
    assert!(lock.exists(), "the new worker's lock is still there: {r}");
    assert_eq!(db.row(2).0, "running");
}

/// Links www-data planted in its state directory had root truncate and append root's files.
///
/// The state directory: www-data owns it and planted `pending.jsonl` and `journal.jsonl` as
/// links to root's files; a root run truncated one and appended JSON to the other, even
/// with nothing to change. A state directory not private to the running user is now refused
/// (exit 3) before anything is opened in it, with the fix `runuser -u www-data -- selfheal
/// …`; the targets are untouched and no row is written.
#[test]
fn case3_links_in_a_state_directory_of_www_data_are_never_written_through() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    let state = www_dir(&sb.state_dir());
    chmod(&state, 0o750);
    let pending = victim(&sb, "pending-target", "{\"root\": \"data\"}\n");
    let journal = victim(&sb, "journal-target", "root's log\n");
    let before = (state_of(&pending), state_of(&journal));
    as_www(&format!(
        "ln -s {} {}/pending.jsonl && ln -s {} {}/journal.jsonl",
        pending.display(),
        state.display(),
        journal.display(),
        state.display()
    ));
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    // Nothing to change, then a dead row.
    for dead in [false, true] {
        if dead {
            db.insert(2, "running", 50 * 60);
            sb.heartbeat(2, Duration::from_secs(47 * 60));
        }
        let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
        let o = check(&cfg, &[]);
        assert_exit(&o, 3);
        let err = stderr(&o);
        assert!(
            err.contains("state directory (run.state_dir) is owned by www-data (uid 33)")
                && err.contains("selfheal: fix: run selfheal as www-data")
                && err.contains("runuser -u www-data -- selfheal check"),
            "{err}"
        );
        assert_eq!((state_of(&pending), state_of(&journal)), before);
        if dead {
            assert_eq!(db.status(2), "running", "nothing was written");
        }
    }
    // doctor says the same, with the same fix.
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    assert_exit(&o, 1);
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("✗ state_dir: "))
        .unwrap_or_else(|| panic!("no failed state_dir line:\n{}", stdout(&o)))
        .to_string();
    assert!(
        line.contains("owned by www-data (uid 33)")
            && line.contains("runuser -u www-data -- selfheal doctor"),
        "{line}"
    );
    assert_eq!((state_of(&pending), state_of(&journal)), before);
    // A state directory www-data can write, though root's: refused as well.
    chown(&state, 0);
    chmod(&state, 0o770);
    std::os::unix::fs::chown(&state, Some(0), Some(WWW)).expect("chgrp");
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("chmod go-w"), "{}", stderr(&o));
    assert_eq!((state_of(&pending), state_of(&journal)), before);
    assert_eq!(db.status(2), "running");
}

/// A link planted at the metrics file's temporary name was written through with metrics.
///
/// The metrics file: its temporary name was `selfheal.prom.<pid>`, so a link planted there
/// by whoever can write node_exporter's textfile directory was written through with metrics
/// text. The link is planted under exactly the pid the run gets (the shell that plants it
/// becomes selfheal with `exec`), and another at the file's own name: neither target
/// changes, and the file is selfheal's own regular file.
#[test]
fn case3_planted_names_for_the_metrics_file_are_never_written_through() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    let textfile = www_dir(&sb.path("textfile"));
    let by_pid = victim(&sb, "by-pid", "root's config\n");
    let by_name = victim(&sb, "by-name", "root's other config\n");
    let before = (state_of(&by_pid), state_of(&by_name));
    as_www(&format!(
        "ln -s {} {}/selfheal.prom",
        by_name.display(),
        textfile.display()
    ));
    let prom = textfile.join("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", prom.display()),
        &sb.watch(""),
    );
    let o = Command::new("sh")
        .args([
            "-c",
            "setpriv --reuid=33 --regid=33 --clear-groups -- ln -s \"$VICTIM\" \"$DIR/selfheal.prom.$$\" \
             && exec \"$SELFHEAL\" check --config \"$CFG\"",
        ])
        .env("VICTIM", &by_pid)
        .env("DIR", &textfile)
        .env("SELFHEAL", bin())
        .env("CFG", &cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C")
        .output()
        .expect("sh");
    assert_exit(&o, 0);
    assert_eq!((state_of(&by_pid), state_of(&by_name)), before);
    let m = std::fs::symlink_metadata(&prom).expect("metrics file");
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(m.uid(), 0);
    assert!(
        std::fs::read_to_string(&prom)
            .expect("read")
            .contains("selfheal_last_run_exit_status 0")
    );
}

/// A link at the run lock made root create its target; another user's lock wedged runs.
///
/// The run lock: a link planted at a run lock in a directory another user can write made
/// root create the link's target; a run lock of another user's, which any user could also
/// `flock` through a read-only descriptor, made every run exit 75. The link is refused
/// (exit 3) and nothing is created; another user's lock is refused with the fix (exit 3),
/// never waited on; and the lock selfheal creates is 0600, so nobody else can open it to
/// hold it.
#[test]
fn case3_a_run_lock_planted_or_held_by_another_user_never_wedges_or_creates() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    let shared = www_dir(&sb.path("lock-dir"));
    let created = sb.path("root-only").join("created-by-root");
    victim(&sb, "placeholder", "");
    let config = |lock: &Path| {
        let p = sb.path("run-lock.toml");
        std::fs::write(
            &p,
            format!(
                "[database]\nurl = \"{}\"\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n\n[[watch]]\n{}",
                db.url(),
                lock.display(),
                sb.state_dir().display(),
                sb.watch("")
            ),
        )
        .expect("config");
        p
    };

    // A link at the name.
    let lock = shared.join("selfheal.lock");
    as_www(&format!("ln -s {} {}", created.display(), lock.display()));
    let o = check(&config(&lock), &[]);
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("is a symbolic link"), "{}", stderr(&o));
    assert!(!created.exists(), "root created nothing through the link");

    // Another user's lock, held by that user through a read-only descriptor.
    as_www(&format!("rm {0} && : > {0}", lock.display()));
    let mut held = Proc::spawn(&mut www_command(&format!(
        "exec flock --shared --no-fork {} sleep 600",
        lock.display()
    )));
    wait_until("www-data holds its lock", Duration::from_secs(10), || {
        lock_holders(&lock).contains(&i64::from(held.pid()))
    });
    let o = check(&config(&lock), &[]);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.contains("owned by www-data (uid 33), not by root (uid 0)")
            && err.contains("selfheal: fix:")
            && err.contains("leave run.lock_file unset"),
        "{err}"
    );
    held.kill9();

    // The lock selfheal creates itself: 0600, which www-data cannot open to hold.
    let own = sb.path("own-lock-dir");
    std::fs::create_dir(&own).expect("mkdir");
    chmod(&own, 0o755);
    let lock = own.join("selfheal.lock");
    // An old 0644 lock from before is narrowed too.
    std::fs::write(&lock, "").expect("old lock");
    chmod(&lock, 0o644);
    let cfg = config(&lock);
    assert_exit(&check(&cfg, &[]), 0);
    assert_eq!(
        std::fs::metadata(&lock).expect("lock").mode() & 0o777,
        0o600
    );
    let o = www_command(&format!(
        "flock --shared --nonblock {} true",
        lock.display()
    ))
    .output()
    .expect("flock");
    assert!(!o.status.success(), "www-data could open the run lock");
    assert_exit(&check(&cfg, &[]), 0);
}
