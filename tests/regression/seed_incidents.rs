//! The incidents selfheal was made for, each kept from coming back: a healthy two-hour run
//! marked dead by a 30-minute cap, run after run; a watchdog that deleted a live job's
//! existence lock, so that a second copy started beside the first; a row its worker
//! finished while the watchdog's write waited, left `done` with the watchdog's error.

use crate::check::liveness::legacy_lock;
use crate::common::*;

/// A watchdog deleted a live job's existence lock, and a second copy of the job started.
#[test]
fn seed_incident_a_live_legacy_job_keeps_its_existence_lock_and_its_row() {
    // The two-hour run of the seed, locking by the file's existence: no kernel lock is its
    // normal state, so that is no evidence of death — and its lock file is not removed.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * 3600 + 10 * MIN);
    let worker = sleeper();
    let lock = legacy_lock(&sb, 1, worker.pid());
    let before = file_state(&lock);
    let cfg = sb.config(
        &db.url(),
        &watch_with_lock(&sb, "release_lock = \"if_free\"\n"),
    );
    for _ in 0..5 {
        sb.heartbeat(1, secs(20));
        cron_check_is_silent(&cfg);
        assert_eq!(file_state(&lock), before);
        assert_eq!(db.status(1), "running");
    }
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains("id=1") && l.contains(" alive ") && l.contains("lock present")),
        "{out}"
    );
}

mod sqlite {
    use crate::common::*;

    /// A 30-minute cap marked a healthy two-hour run dead, run after run (on SQLite).
    #[test]
    fn seed_incident_a_two_hour_run_is_never_touched_run_after_run() {
        let sb = Sandbox::new();
        let db = SqliteDb::new(&sb);
        db.insert(1, "running", 2 * 3600 + 10 * MIN);
        let cfg = sb.config(&db.url(), &sb.watch(""));
        let before = db.dump();
        for _ in 0..5 {
            sb.heartbeat(1, secs(20));
            let o = check(&cfg, &[]);
            assert_exit(&o, 0);
            assert_eq!(stdout(&o), "", "cron mails whatever is printed");
            assert_eq!(stderr(&o), "");
            assert_eq!(db.dump(), before);
        }
        assert!(sb.journal().is_empty());
    }
}

mod mariadb {
    use crate::check::mysql::race;
    use crate::common::*;

    /// A 30-minute cap marked a healthy two-hour run dead, run after run (on MariaDB).
    #[test]
    fn seed_incident_a_two_hour_run_is_never_touched_run_after_run() {
        let mut db = mysql_or_skip!();
        db.create_sync_log("DATETIME");
        db.insert(1, "running", 2 * 3600 + 10 * MIN);
        let sb = Sandbox::new();
        let cfg = sb.config(&db.url, &sb.watch(""));
        let before = db.dump();
        for _ in 0..5 {
            sb.heartbeat(1, secs(20));
            cron_check_is_silent(&cfg);
            assert_eq!(db.dump(), before);
        }
    }

    /// A row finished while the watchdog's UPDATE waited was left `done` with its error.
    #[test]
    fn a_row_finished_while_the_update_waits_is_not_overwritten() {
        let mut db = mysql_or_skip!();
        db.create_sync_log("DATETIME");
        db.insert(2, "running", 50 * MIN);
        let sb = Sandbox::new();
        sb.heartbeat(2, secs(47 * MIN));
        let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
        let o = race(
            &mut db,
            &cfg,
            "UPDATE sync_log SET status = 'done', end_time = NOW(), error_msg = '' WHERE id = 2",
        );
        assert_exit(&o, 0);
        let (rows, summary) = json_lines(&o);
        assert_eq!(row(&rows, 2)["verdict"], "dead");
        assert_eq!(row(&rows, 2)["action"], "lost_race");
        assert_eq!(row(&rows, 2)["applied"], false);
        assert_eq!(summary["changed"], 0);
        assert_eq!(db.row(2), ("done".to_string(), true, String::new()));
        assert!(sb.journal().is_empty(), "a lost race is not a change");
    }
}
