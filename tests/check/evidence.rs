//! Whose evidence it is, and what an inference may do, through the real binary with real
//! processes, real locks and real files: a lock is the row's own by its `{id}` or by its
//! holder being the row's owner, and the next run's lock proves nothing about an older
//! row; a death signal beside the row's own fresh heartbeat waits, and goes to a person if
//! that heartbeat stays fresh for `stale_after`; a watch none of whose rows beats, and a
//! mass overtime, hold the whole watch (counted in the metrics); inferred verdicts wait for
//! their confirmation across runs, quietly (a dry run says which), and a run that cannot
//! keep the counts fails.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

// ---------------------------------------------------------------------------------------
// The owner column names a process that is gone, while the row's own lock is held

/// The same, with a per-kind lock (no `{id}`): the lock is the row's own when its holder is
/// the row's owner. flock(1) claimed the row with its pid, forked the job and died; the
/// job inherited the lock, whose holder `/proc/locks` still gives as flock(1)'s pid.
#[test]
fn a_per_kind_lock_held_under_the_owners_pid_is_the_rows_own() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.path("sync.lock");
    let mut flock = flock1_holder(&lock, true);
    let owner = flock.pid();
    let job = children(owner)[0];
    let _job = KillOnDrop(i64::from(job));
    flock.kill9();
    assert_eq!(
        lock_holders(&lock),
        [i64::from(owner)],
        "held under the dead pid"
    );
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &owner.to_string());
    sb.heartbeat(1, secs(40 * MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nowner_column = \"worker\"\nconfirm = 1\n",
            lock.display()
        )),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 1);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "hung", "{r}");
    assert_eq!(r["overruled"], "owner_dead", "{r}");
    assert_eq!(db.status(1), "running");
}

/// A per-kind lock held by someone else — the next run of the same job — proves nothing
/// about an older row whose worker is gone: that row is reclaimed at once, as before.
#[test]
fn the_next_runs_lock_proves_nothing_about_an_older_row() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.path("sync.lock");
    let _next_run = flock1_holder(&lock, false);
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &exited_pid().to_string());
    sb.heartbeat(1, secs(40 * MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nowner_column = \"worker\"\n",
            lock.display()
        )),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["basis"], &r["applied"]),
        (
            &serde_json::json!("dead"),
            &serde_json::json!("the owner pid no longer exists"),
            &serde_json::json!(true)
        ),
        "{r}"
    );
    assert_eq!(db.status(1), "error");
}

// ---------------------------------------------------------------------------------------
// A death signal beside the row's own fresh heartbeat

/// With nothing but the owner column and the row's own heartbeat file: the owner pid gone
/// while the heartbeat is fresh waits quietly (no mail, exit 0); once the heartbeat is
/// stale, the row is reclaimed at once. This is the change users see: a killed worker
/// whose heartbeat was fresh is reclaimed when that heartbeat goes stale, not on the very
/// next run.
#[test]
fn a_dead_owner_beside_a_fresh_heartbeat_waits_until_the_heartbeat_is_stale() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &exited_pid().to_string());
    beat_now(&sb, 1);
    let cfg = sb.config(&db.url(), &sb.watch("owner_column = \"worker\"\n"));

    for run in 0..2 {
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 0);
        let r = row(&rows, 1);
        assert_eq!(
            (&r["verdict"], &r["held"], &r["action"], &r["attention"]),
            (
                &serde_json::json!("dead"),
                &serde_json::json!("contradicted"),
                &serde_json::json!("none"),
                &serde_json::json!(false)
            ),
            "run {run}: {r}"
        );
        assert_eq!(db.status(1), "running", "run {run}");
    }
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(1), "running");

    // The heartbeat goes stale: the death acts at once, without a second run.
    sb.heartbeat(1, secs(6 * MIN));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("owner pid"), "{}", stdout(&o));
    assert_eq!(db.status(1), "error");
}

/// A contradiction still standing `stale_after` after it was first seen: something alive
/// beats for this row (a wrong owner_column looks exactly like this). A person decides:
/// `unknown`, both named, exit 1, said once.
#[test]
fn a_contradiction_that_stands_for_stale_after_goes_to_a_person() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &exited_pid().to_string());
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\n")
            .replace("stale_after = \"5m\"", "stale_after = \"2s\""),
    );
    beat_now(&sb, 1);
    cron_check_is_silent(&cfg);
    std::thread::sleep(secs(3));
    beat_now(&sb, 1);
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert!(text.contains("needs a person (unknown)"), "{text}");
    assert!(text.contains("owner pid no longer exists"), "{text}");
    assert!(text.contains("own heartbeat"), "{text}");
    assert!(text.contains("owner_column"), "{text}");
    // Said once; the exit status keeps saying it.
    beat_now(&sb, 1);
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "");
    assert_eq!(db.status(1), "running");
}

// ---------------------------------------------------------------------------------------
// The whole-watch holds

/// A template that matches no file (a misspelt name in a directory that exists): not one
/// running row beats. Every verdict drawn from the heartbeat alone is held — whatever the
/// row count, one row here — said once per remind_every, until any row beats.
#[test]
fn a_watch_none_of_whose_rows_beats_holds_heartbeat_only_verdicts() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 20 * MIN);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("confirm = 1\n")
            .replace("hb-{id}", "progres-{id}.json"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("not one of its 1 running row has a heartbeat"),
        "{err}"
    );
    assert!(err.contains("progres-{id}.json"), "{err}");
    assert_eq!(db.status(1), "running");
    // Said once; still held.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(!stderr(&o).contains("not one of"), "{}", stderr(&o));
    let (_, rows, _) = json_check(&cfg, &[]);
    assert_eq!(row(&rows, 1)["held"], "no_heartbeat");
    assert_eq!(db.status(1), "running");

    // A second row beats: the hold ends by itself, and the silent row is judged.
    db.insert(2, "running", 20 * MIN);
    std::fs::write(sb.path("progres-2.json"), "{}").expect("beat");
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(row(&rows, 1)["held"], serde_json::Value::Null);
    assert_eq!(db.status(1), "error");
    assert_eq!(db.status(2), "running");
}

/// A wrong clock or time zone makes every row look ancient: a mass overtime is held like
/// a mass heartbeat death, reported; `--force` acts on it.
#[test]
fn a_mass_overtime_is_held_back() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert(id, "running", 5 * 3600);
        beat_now(&sb, id);
    }
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let (o, rows, summary) = json_check(&cfg, &[]);
    assert_exit(&o, 1);
    for id in 1..=4 {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "overtime", "{r}");
        assert_eq!(r["held"], "mass_overtime", "{r}");
        assert_eq!(db.status(id), "running");
    }
    assert!(
        summary.to_string().contains("past max_age at once"),
        "{summary}"
    );
    let (o, rows, _) = json_check(&cfg, &["--force"]);
    assert_exit(&o, 0);
    assert_eq!(row(&rows, 1)["applied"], true);
    for id in 1..=4 {
        assert_eq!(db.status(id), "error");
    }
}

/// Kills a process by pid when dropped (one the test did not spawn itself).
pub(crate) struct KillOnDrop(pub(crate) i64);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Metrics of what was held

#[test]
fn held_rows_and_whole_watch_holds_are_counted_in_the_metrics() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert(id, "running", 5 * 3600);
        beat_now(&sb, id);
    }
    db.insert(5, "running", 20 * MIN);
    set_owner(&db, 5, &exited_pid().to_string());
    beat_now(&sb, 5);
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &sb.watch("owner_column = \"worker\"\n"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    for line in [
        "selfheal_held_rows{watch=\"full-sync\",hold=\"mass_overtime\"} 4",
        "selfheal_held_rows{watch=\"full-sync\",hold=\"contradicted\"} 1",
        "selfheal_held_rows{watch=\"full-sync\",hold=\"breaker\"} 0",
        "selfheal_watch_held{watch=\"full-sync\",hold=\"mass_overtime\"} 1",
        "selfheal_watch_held{watch=\"full-sync\",hold=\"no_heartbeat\"} 0",
        "selfheal_watch_held{watch=\"full-sync\",hold=\"breaker\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

// ---------------------------------------------------------------------------------------
// Confirmations: rows that wait for theirs are held quietly (a dry run says which), and
// counts that cannot be kept fail the run

#[test]
fn a_dry_run_says_which_rows_wait_for_their_next_confirmation() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Dead on heartbeat silence alone: an inferred verdict, confirm = 2 by default.
    db.insert(1, "running", 3000);
    sb.heartbeat(1, std::time::Duration::from_secs(2400));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "full-sync id=1: waits for its next confirmation (dead: 1 of the 2 runs in a row \
             it takes before a real run acts) — self-heal: dead: heartbeat stale"
        ),
        "{out}"
    );
    // The cron text, as ever, says nothing of it; a dry run a cron period after it would
    // act.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    next_cron_run(&sb);
    let o = check(&cfg, &["--dry-run"]);
    assert!(
        stdout(&o).starts_with("full-sync id=1: would set status to 'error' (mark_dead)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn confirming_rows_neither_trip_the_breaker_nor_mail_anyone() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // A mass "death": four rows whose heartbeats all read 2 h old.
    for id in 1..=4 {
        db.insert(id, "running", 3 * HOUR);
        sb.heartbeat(id, secs(2 * HOUR));
    }
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = cron_check_is_silent(&cfg);
    assert_eq!(stderr(&o), "", "no breaker yet: nothing would be marked");
    // Confirmed by the next run: now the breaker holds them all.
    next_cron_run(&sb);
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("breaker: 4 of 4"), "{}", stderr(&o));
    assert!(db.dump().iter().all(|r| r.1 == "running"));
}

/// `script` as root in a private mount namespace, with `SELFHEAL` and the named paths in
/// its environment.
fn in_mount_namespace(script: &str, env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("SELFHEAL", bin())
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("unshare --mount")
}

#[test]
fn counts_that_cannot_be_kept_fail_the_run_and_an_explain_that_cannot_read_them_says_so() {
    if !root_or_skip("a read-only state_dir in a mount namespace") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    sb.heartbeat(1, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    std::fs::create_dir(sb.state_dir()).expect("state_dir");
    // A state_dir that cannot be written: the run cannot count, so it fails (exit 3)
    // rather than hold the row for ever without a word.
    let o = in_mount_namespace(
        r#"set -e
           mount -t tmpfs -o mode=0750 selfheal-state "$STATE"
           mount -o remount,ro "$STATE"
           set +e
           "$SELFHEAL" check --config "$CFG""#,
        &[("STATE", &sb.state_dir()), ("CFG", &cfg)],
    );
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("confirmations.json") && stderr(&o).contains("confirmation counts"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.status(1), "running");

    // A real run counts once; --explain as root sees the count (a cron period later), as
    // nobody (who cannot read root's state_dir) it says so and shows what a first run
    // would do.
    cron_check_is_silent(&cfg);
    next_cron_run(&sb);
    let o = check(&cfg, &["--explain"]);
    assert!(
        stdout(&o).contains("a real run would set status to 'error' (mark_dead)"),
        "{}",
        stdout(&o)
    );
    let set = |p: &Path, mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    set(sb.dir.path(), 0o755);
    set(&db.path, 0o644);
    set(&cfg, 0o644);
    set(&sb.state_dir(), 0o700);
    let Some(mut c) = as_nobody() else {
        return;
    };
    let o = c
        .args(["check", "--explain", "--config"])
        .arg(&cfg)
        .output()
        .expect("selfheal as nobody");
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("cannot read the confirmation counts")
            && stderr(&o).contains("showing what a first run would do"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("confirming (1 of 2"), "{}", stdout(&o));
}
