//! `selfheal check` end to end on real SQLite files, real heartbeat files with set mtimes,
//! and the real binary (the seed incidents' tests are in `regression::seed_incidents`).

use std::time::Duration;

use crate::common::*;

#[test]
fn a_dead_row_is_marked_with_status_end_time_and_a_reason_carrying_the_ages() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    // A death on heartbeat silence alone acts when a second run in a row finds it: the
    // first is silent and changes nothing.
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(2), "running");
    assert!(sb.journal().is_empty());
    next_cron_run(&sb);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("full-sync id=2: set status to 'error' (mark_dead)"),
        "{out}"
    );
    let (id, status, ended, msg) = db.dump().remove(0);
    assert_eq!((id, status.as_str(), ended), (2, "error", true));
    // The deciding evidence in words, then the figures (a second may pass meanwhile).
    assert!(
        msg.starts_with("self-heal: dead: heartbeat stale, no sign of the worker (row 50m"),
        "{msg}"
    );
    for part in [", heartbeat 47m", " ago, stale_after 5m)"] {
        assert!(msg.contains(part), "{part} in {msg}");
    }
    let journal = sb.journal();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0]["id"], 2);
    assert_eq!(journal[0]["from"], "running");
    assert_eq!(journal[0]["to"], "error");
    assert_eq!(journal[0]["verdict"], "dead");
    // A second run finds nothing to do and says nothing.
    cron_check_is_silent(&cfg);
    assert_eq!(sb.journal().len(), 1);
}

#[test]
fn a_row_started_30s_ago_without_heartbeat_is_starting() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(3, "running", 30);
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    let r = row(&rows, 3);
    assert_eq!(r["verdict"], "starting");
    assert_eq!(r["action"], "none");
    assert_eq!(r["heartbeat_age_s"], serde_json::Value::Null);
    assert_eq!(summary["changed"], 0);
    assert_eq!(db.status(3), "running");
}

/// Rows in every state, for the read-only and output tests.
fn mixed(sb: &Sandbox, db: &SqliteDb) {
    db.insert(1, "running", 2 * 3600 + 10 * MIN); // alive
    sb.heartbeat(1, secs(20));
    db.insert(2, "running", 50 * MIN); // dead
    sb.heartbeat(2, secs(47 * MIN));
    db.insert(3, "running", 30); // starting
    db.insert(4, "running", 5 * 3600); // overtime
    sb.heartbeat(4, secs(10));
    db.insert(5, "done", 3 * 3600);
}

#[test]
fn explain_and_dry_run_leave_the_database_byte_for_byte_identical() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    mixed(&sb, &db);
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let before = db.bytes();
    let mtime = std::fs::metadata(&db.path)
        .and_then(|m| m.modified())
        .expect("mtime");

    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for (id, verdict) in [(1, "alive"), (2, "dead"), (3, "starting"), (4, "overtime")] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("id={id} ")))
            .unwrap_or_else(|| panic!("row {id} in\n{out}"));
        assert!(line.contains(verdict), "{line}");
    }
    assert!(
        out.contains("a real run would set status to 'error' (mark_dead)"),
        "{out}"
    );
    assert!(out.contains("nothing was written"), "{out}");
    assert!(
        !out.contains("id=5 "),
        "finished rows are not listed: {out}"
    );

    let o = check(&cfg, &["--dry-run", "--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "mark_dead");
    assert_eq!(row(&rows, 2)["applied"], false);
    assert_eq!(summary["dry_run"], true);
    assert_eq!(summary["changed"], 2);

    assert_eq!(db.bytes(), before, "the database file changed");
    assert_eq!(
        std::fs::metadata(&db.path)
            .and_then(|m| m.modified())
            .expect("mtime"),
        mtime
    );
    assert!(!sb.state_dir().exists(), "a dry run writes no journal");
    assert!(!sb.run_lock().exists(), "a dry run takes no run lock");
}

#[test]
fn json_output_carries_every_field() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    mixed(&sb, &db);
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(rows.len(), 4, "one object per running row");
    for r in &rows {
        for f in [
            "watch",
            "id",
            "verdict",
            "action",
            "applied",
            "reason",
            "total_age_s",
            "heartbeat_age_s",
            "lock",
            "owner",
            "held",
            "confirmations",
            "confirm",
        ] {
            assert!(r.get(f).is_some(), "{f} missing in {r}");
        }
        assert_eq!(r["watch"], "full-sync");
        assert!(
            r["reason"]
                .as_str()
                .is_some_and(|s| s.starts_with("self-heal: ")),
            "{r}"
        );
        assert!(r["total_age_s"].is_u64(), "{r}");
        assert_eq!(r["lock"], "none");
        assert_eq!(r["owner"], "none");
    }
    let dead = row(&rows, 2);
    assert_eq!(
        (
            dead["verdict"].as_str(),
            dead["action"].as_str(),
            dead["applied"].as_bool()
        ),
        (Some("dead"), Some("mark_dead"), Some(true))
    );
    assert!(
        dead["heartbeat_age_s"]
            .as_u64()
            .is_some_and(|a| (2_820..2_830).contains(&a)),
        "{dead}"
    );
    assert_eq!(
        (dead["confirmations"].as_u64(), dead["confirm"].as_u64()),
        (Some(1), Some(1))
    );
    let ot = row(&rows, 4);
    assert_eq!(
        (ot["verdict"].as_str(), ot["action"].as_str()),
        (Some("overtime"), Some("mark_dead"))
    );
    assert_eq!(row(&rows, 1)["action"], "none");
    assert_eq!(summary["rows"], 4);
    assert_eq!(summary["changed"], 2);
    assert_eq!(summary["attention"], 0);
    assert_eq!(summary["dry_run"], false);
    assert_eq!(db.status(1), "running");
    assert_eq!(db.status(4), "error");
    assert_eq!(db.status(5), "done");
}

#[test]
fn exit_1_when_evidence_is_implausible_and_nothing_is_touched() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    // An mtime an hour in the future: a clock or NFS fault, not a heartbeat.
    let p = sb.heartbeat(1, secs(0));
    std::fs::File::options()
        .append(true)
        .open(&p)
        .and_then(|f| f.set_modified(std::time::SystemTime::now() + secs(3600)))
        .expect("future mtime");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("id=1: needs a person (unknown)") && out.contains("in the future"),
        "{out}"
    );
    assert_eq!(db.status(1), "running");
}

#[test]
fn exit_75_when_another_run_holds_the_run_lock() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    // A real second holder: flock(1) in another process (--no-fork: the lock dies with it).
    let mut holder = std::process::Command::new("flock")
        .arg("--no-fork")
        .arg(sb.run_lock())
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1)");
    let deadline = std::time::Instant::now() + secs(10);
    // Wait until the lock is really taken (flock(1) creates the file, then locks it).
    let lock = sb.run_lock();
    let taken = || {
        std::fs::File::open(&lock)
            .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
    };
    while !taken() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(taken(), "flock(1) never took the lock");
    let o = check(&cfg, &[]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_exit(&o, 75);
    assert!(
        stderr(&o).contains("another selfheal run holds"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.status(2), "running", "nothing done");
    assert!(sb.run_lock().exists(), "the run lock is never deleted");
    // Once the holder is gone the same run goes through.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.status(2), "error");
}

/// docs/design.md#exit-status: a table or column the database lacks is a bad configuration (exit 2); a
/// database file that is not there is a file-system failure (exit 3).
#[test]
fn exit_2_for_a_missing_table_or_column_3_for_a_missing_file_and_nothing_written() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    // Two watches: the first fine with a dead row, the second naming a missing column.
    let cfg = sb.config(
        &db.url(),
        &format!(
            "{}\n[[watch]]\nname = \"other\"\ntable = \"sync_log\"\nrunning_value = \"syncing\"\n\
             started_column = \"start_time\"\nheartbeat_column = \"no_such_column\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\n",
            sb.watch("")
        ),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("watch 'other'")
            && err.contains("no_such_column")
            && err.contains("does not exist"),
        "{err}"
    );
    assert_eq!(
        db.status(2),
        "running",
        "no watch is handled before every schema is checked"
    );

    let cfg = sb.config(&db.url(), &sb.watch("").replace("sync_log", "sync_logs"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("table sync_logs does not exist"),
        "{}",
        stderr(&o)
    );

    let cfg = sb.config(
        &format!("sqlite://{}/typo.db", sb.dir.path().display()),
        &sb.watch(""),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("no such file (selfheal never creates a database)"),
        "{}",
        stderr(&o)
    );
    assert!(
        !sb.path("typo.db").exists(),
        "a typo in a path is never an empty new database"
    );
}

#[test]
fn a_heartbeat_column_and_an_epoch_start_column_work_too() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let c = db.conn();
    c.execute_batch(
        "ALTER TABLE sync_log ADD COLUMN started_epoch INTEGER;
         INSERT INTO sync_log (id, status, started_epoch, heartbeat_at) VALUES
           (1, 'running', CAST(strftime('%s','now') AS INTEGER) - 7800, datetime('now', '-20 seconds')),
           (2, 'running', CAST(strftime('%s','now') AS INTEGER) - 3000, datetime('now', '-2820 seconds')),
           (3, 'running', CAST(strftime('%s','now') AS INTEGER) - 30, NULL);",
    )
    .expect("rows");
    let cfg = sb.config(
        &db.url(),
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"started_epoch\"\n\
         heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\nmessage_column = \"error_msg\"\n\
         confirm = 1\n",
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 1)["verdict"], "alive");
    assert_eq!(row(&rows, 2)["verdict"], "dead");
    assert_eq!(row(&rows, 3)["verdict"], "starting");
    assert_eq!(
        row(&rows, 1)["total_age_s"].as_u64().map(|a| a / 10),
        Some(780)
    );
    assert_eq!(db.status(2), "error");
    assert_eq!(db.status(1), "running");
}

#[test]
fn a_watch_given_entirely_with_flags() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let o = selfheal()
        .args([
            "check",
            "--explain",
            "--config",
            "/nonexistent/selfheal.toml",
        ])
        .output()
        .expect("run");
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("/nonexistent/selfheal.toml"),
        "{}",
        stderr(&o)
    );

    let o = selfheal()
        .env("SELFHEAL_CONFIG", sb.path("absent.toml"))
        .args(["check", "--explain"])
        .output()
        .expect("run");
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("absent.toml"), "{}", stderr(&o));

    let url = db.url();
    let hb = sb.heartbeat_template();
    let args = [
        "check",
        "--explain",
        "--db",
        &url,
        "--table",
        "sync_log",
        "--started-column",
        "start_time",
        "--heartbeat-file",
        &hb,
        "--stale-after",
        "5m",
        "--max-age",
        "4h",
    ];
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = selfheal()
        .env("SELFHEAL_CONFIG", &cfg)
        .args(args)
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("id=2    dead"), "{}", stdout(&o));
    assert_eq!(db.status(2), "running");
}

#[test]
fn an_io_error_on_the_heartbeat_is_unknown_never_dead() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    // A path through a regular file: ENOTDIR, an I/O error rather than "no heartbeat".
    std::fs::write(sb.path("not-a-dir"), "").expect("file");
    let watch = sb.watch("").replace(
        &sb.heartbeat_template(),
        &format!("{}/not-a-dir/hb-{{id}}", sb.dir.path().display()),
    );
    let cfg = sb.config(&db.url(), &watch);
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 2)["verdict"], "unknown");
    assert_eq!(summary["attention"], 1);
    assert_eq!(db.status(2), "running");
}

#[test]
fn a_bad_id_in_a_path_template_is_unknown() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.conn()
        .execute_batch(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT, start_time TEXT);
             INSERT INTO jobs VALUES ('../../etc/passwd', 'running', datetime('now', '-50 minutes'));
             INSERT INTO jobs VALUES ('job-7.a', 'running', datetime('now', '-50 minutes'));",
        )
        .expect("rows");
    let cfg = sb.config(
        &db.url(),
        &format!(
            "name = \"jobs\"\ntable = \"jobs\"\nstarted_column = \"start_time\"\nheartbeat_file = \"{}\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\n",
            sb.heartbeat_template()
        ),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let bad = rows
        .iter()
        .find(|r| r["id"] == "../../etc/passwd")
        .expect("row");
    assert_eq!(bad["verdict"], "unknown");
    assert!(
        bad["basis"]
            .as_str()
            .unwrap_or("")
            .contains("cannot be used in the path template"),
        "{bad}"
    );
    let good = rows.iter().find(|r| r["id"] == "job-7.a").expect("row");
    assert_eq!(good["verdict"], "dead", "a safe text id works: {good}");
}

#[test]
fn permission_denied_on_the_heartbeat_is_unknown_never_dead() {
    let Some(mut cmd) = as_nobody() else { return };
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    let (private, cfg) = sb.private_heartbeat_config(&db, 0o755);
    std::fs::write(private.join("hb-2"), "").expect("heartbeat");
    let o = cmd
        .args(["check", "--explain", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 2);
    assert_eq!(r["verdict"], "unknown", "{r}");
    assert!(
        r["heartbeat"]
            .as_str()
            .unwrap_or("")
            .contains("Permission denied"),
        "{r}"
    );
}

/// A group's compare-and-sets after its first wait for the intents' flush: a statement the
/// database refuses may end the transaction (here a trigger's `RAISE(ROLLBACK)` on row 2),
/// and the next row's would then commit on its own. With the flush held up for two
/// seconds, another connection sees every row still running; row 3, committed on its own
/// after the flush, is journaled by the next run.
#[test]
fn a_write_after_a_refused_one_in_a_group_waits_for_the_intents_flush() {
    if !have_tool(
        "strace",
        &["-V"],
        "delaying the flush of selfheal's intents",
    ) {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = format!("{}:{}", hostname(), exited_pid());
    for id in 1..=3 {
        db.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) VALUES \
             ({id}, 'running', datetime('now', '-50 minutes'), datetime('now', '-47 minutes'), \
             '{gone}')"
        ));
    }
    db.exec(
        "CREATE TRIGGER guard BEFORE UPDATE ON sync_log WHEN OLD.id = 2 \
         BEGIN SELECT RAISE(ROLLBACK, 'row 2 is guarded'); END;",
    );
    let cfg = sb.config(
        &db.url(),
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nowner_column = \"worker\"\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
         stale_after = \"5m\"\nmax_age = \"4h\"\n",
    );
    let child = check_under_strace("inject=fdatasync:delay_enter=2000000:when=1", &cfg)
        .spawn()
        .expect("strace");
    wait_for_intents(&sb);
    std::thread::sleep(Duration::from_millis(700));
    for id in 1..=3 {
        assert_eq!(
            db.status(id),
            "running",
            "row {id} committed before its intent was flushed"
        );
    }
    let o = child.wait_with_output().expect("wait");
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(db.status(2), "running");
    // Whatever was committed is in the journal once the next run settled the intents.
    let _ = check(&cfg, &[]);
    let journal = sb.journal();
    for id in 1..=3 {
        let changed = db.status(id) == "error";
        let journaled = journal
            .iter()
            .any(|e| e["id"] == id && e["applied"] == true);
        assert_eq!(changed, journaled, "row {id}: {journal:?}");
    }
}
