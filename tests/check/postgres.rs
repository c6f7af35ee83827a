//! `selfheal check` end to end against a real PostgreSQL server (docs/design.md#commands): each test
//! creates its own database and drops it. Skipped outside CI when no server answers; fails
//! in CI. The same cases as on MariaDB (`check::mysql`), with PostgreSQL's column types,
//! its row locks, its advisory locks and real processes that hold them.

use std::process::Stdio;
use std::time::Duration;

use crate::common::*;

#[test]
fn a_dead_row_is_marked_with_status_database_end_time_and_reason() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(1, "running", 2 * 3600 + 10 * MIN);
    db.insert(2, "running", 50 * MIN);
    db.insert(3, "running", 30);
    db.insert(4, "done", 3 * 3600);
    let sb = Sandbox::new();
    sb.heartbeat(1, secs(20));
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch(""));
    // The first run finds row 2 silent and holds it for confirmation; the second acts.
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(
        (&row(&rows, 2)["verdict"], &row(&rows, 2)["held"]),
        (&serde_json::json!("dead"), &serde_json::json!("confirming"))
    );
    assert_eq!(summary["changed"], 0);
    assert_eq!(db.row(2).0, "running");
    next_cron_run(&sb);
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 1)["verdict"], "alive");
    assert_eq!(row(&rows, 2)["applied"], true);
    assert_eq!(row(&rows, 3)["verdict"], "starting");
    assert_eq!(summary["changed"], 1);
    let (status, ended, msg) = db.row(2);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(
        msg.starts_with("self-heal: dead: heartbeat stale, no sign of the worker (row 50m"),
        "{msg}"
    );
    // The end time is the database's now, not the host's.
    let gap = db
        .one("SELECT ABS(EXTRACT(EPOCH FROM end_time - LOCALTIMESTAMP))::int FROM sync_log WHERE id = 2")
        .and_then(|g| g.parse::<i64>().ok())
        .expect("a gap");
    assert!(gap < 30, "end_time is the database's now: off by {gap}s");
    assert_eq!(
        (db.row(1).0, db.row(3).0, db.row(4).0),
        ("running".into(), "running".into(), "done".into())
    );
}

#[test]
fn start_columns_of_every_type_are_judged_on_the_database_clock() {
    for (ty, insert) in [
        ("TIMESTAMP", "LOCALTIMESTAMP - INTERVAL '{age} seconds'"),
        ("TIMESTAMP(0)", "LOCALTIMESTAMP - INTERVAL '{age} seconds'"),
        ("TIMESTAMPTZ", "now() - INTERVAL '{age} seconds'"),
        ("INT", "FLOOR(EXTRACT(EPOCH FROM now()))::int - {age}"),
        ("BIGINT", "FLOOR(EXTRACT(EPOCH FROM now()))::bigint - {age}"),
        ("NUMERIC(16,3)", "EXTRACT(EPOCH FROM now()) - {age}"),
        (
            "VARCHAR(32)",
            "to_char(LOCALTIMESTAMP - INTERVAL '{age} seconds', 'YYYY-MM-DD HH24:MI:SS')",
        ),
        (
            "TEXT",
            "to_char(now() - INTERVAL '{age} seconds', 'YYYY-MM-DD\"T\"HH24:MI:SSOF:\"00\"')",
        ),
    ] {
        let mut db = pg_or_skip!();
        db.create_sync_log(ty);
        for (id, age) in [(1, 7_800u64), (2, 3_000)] {
            db.exec(&format!(
                "INSERT INTO sync_log (id, status, start_time) VALUES ({id}, 'running', {})",
                insert.replace("{age}", &age.to_string())
            ));
        }
        let sb = Sandbox::new();
        sb.heartbeat(1, secs(20));
        sb.heartbeat(2, secs(47 * MIN));
        let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let age = row(&rows, 1)["total_age_s"].as_u64().unwrap_or(0);
        assert!((7_799..7_810).contains(&age), "{ty}: total age {age}");
        assert_eq!(row(&rows, 1)["verdict"], "alive", "{ty}");
        assert_eq!(row(&rows, 2)["verdict"], "dead", "{ty}");
        assert_eq!(
            db.row(2).0,
            "error",
            "{ty}: the compare-and-set matched the observed start value"
        );
        assert_eq!(db.row(1).0, "running", "{ty}");
    }
}

/// A server whose `TimeZone` is not UTC: `now()` writes a `timestamp` in it, and selfheal
/// reads it there without `[database] timezone` (as MySQL's `UNIX_TIMESTAMP()` places a
/// DATETIME on the session's clock); a `timestamptz` is an instant whatever the zone; the
/// end time goes into each as the application's own `now()` would write it.
#[test]
fn naive_timestamps_are_read_in_the_sessions_time_zone() {
    let mut db = pg_or_skip!();
    db.exec(&format!(
        "ALTER DATABASE \"{}\" SET TimeZone = 'Asia/Shanghai'",
        db.name
    ));
    let mut app = db.conn();
    app.batch_execute(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status TEXT NOT NULL, \
         start_time TIMESTAMP, end_time TIMESTAMPTZ, error_msg TEXT NOT NULL DEFAULT '');
         INSERT INTO sync_log VALUES (1, 'running', now() - INTERVAL '7800 seconds', NULL, ''),
                                     (2, 'running', now() - INTERVAL '3000 seconds', NULL, '')",
    )
    .expect("fixture");
    let sb = Sandbox::new();
    sb.heartbeat(1, secs(20));
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let age = row(&rows, 1)["total_age_s"].as_u64().unwrap_or(0);
    assert!((7_799..7_810).contains(&age), "total age {age}");
    assert_eq!(row(&rows, 2)["verdict"], "dead");
    let gap = pg_rows(
        &mut app,
        "SELECT ABS(EXTRACT(EPOCH FROM end_time - now()))::int FROM sync_log WHERE id = 2",
    );
    let gap: i64 = gap[0][0]
        .as_deref()
        .and_then(|g| g.parse().ok())
        .expect("gap");
    assert!(gap < 30, "the end time is the server's now: off by {gap}s");
    let o = doctor(&cfg);
    assert!(
        finding(&o, "clock").contains("session time zone Asia/Shanghai, UTC+08:00 now"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_enum_status_column_is_read_and_written_and_a_status_it_lacks_is_refused() {
    let mut db = pg_or_skip!();
    db.exec(
        "CREATE TYPE job_status AS ENUM ('running', 'done', 'error');
         CREATE TABLE sync_log (id BIGINT PRIMARY KEY, status job_status NOT NULL,
             start_time TIMESTAMPTZ, end_time TIMESTAMPTZ, error_msg TEXT NOT NULL DEFAULT '');
         INSERT INTO sync_log VALUES (2, 'running', now() - INTERVAL '50 minutes', NULL, '')",
    );
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(2).0, "error");
    // `manual_value` the enum lacks: refused before anything is written.
    db.exec("UPDATE sync_log SET status = 'running', end_time = NULL WHERE id = 2");
    let cfg = sb.config(
        &db.url,
        &sb.watch("confirm = 1\nmanual_value = \"wait_manual\"\n"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("\"wait_manual\"") && stderr(&o).contains("running, done, error"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.row(2).0, "running");
}

#[test]
fn the_message_is_cut_to_the_column_length() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.exec("ALTER TABLE sync_log ALTER COLUMN error_msg TYPE VARCHAR(40)");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let (status, _, msg) = db.row(2);
    assert_eq!(status, "error");
    assert_eq!(msg, "self-heal: dead: heartbeat stale, no sig");
}

/// Holds row 2 with `SELECT … FOR UPDATE`, starts a real check that decides the row is
/// dead and blocks in its UPDATE, applies `change` in the holding transaction, commits,
/// and returns the check's output.
fn race(db: &mut PgDb, cfg: &std::path::Path, change: &str) -> std::process::Output {
    let mut holder = db.conn();
    holder
        .batch_execute("BEGIN; SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("for update");
    let child = selfheal()
        .args(["check", "--format", "json", "--config"])
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    if !db.wait_for_lock_wait() {
        holder.batch_execute("ROLLBACK").expect("rollback");
        let o = child.wait_with_output().expect("wait");
        panic!(
            "selfheal's UPDATE never waited on the row lock\n{}\n{}",
            stdout(&o),
            stderr(&o)
        );
    }
    holder.batch_execute(change).expect("change");
    holder.batch_execute("COMMIT").expect("commit");
    child.wait_with_output().expect("wait")
}

#[test]
fn a_row_restarted_with_a_new_start_time_while_the_update_waits_is_not_overwritten() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let o = race(
        &mut db,
        &cfg,
        "UPDATE sync_log SET start_time = LOCALTIMESTAMP WHERE id = 2",
    );
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "lost_race");
    assert_eq!(db.row(2), ("running".to_string(), false, String::new()));
}

#[test]
fn a_lease_that_beat_while_the_update_waits_is_not_overwritten() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES \
         (2, 'running', LOCALTIMESTAMP - INTERVAL '50 minutes', \
          LOCALTIMESTAMP - INTERVAL '47 minutes')",
    );
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
         confirm = 1\n",
    );
    let o = race(
        &mut db,
        &cfg,
        "UPDATE sync_log SET heartbeat_at = LOCALTIMESTAMP WHERE id = 2",
    );
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "lost_race");
    assert_eq!(db.row(2).0, "running");
}

/// Rows 1 to 4 dead (5 to 9 alive) in one write group; row 3 is held by another transaction the whole
/// time: the group's one UPDATE gives up on it at once (a write group never waits), is
/// undone, each row is written on its own — 1, 2 and 4 marked, 3 tried alone once the
/// group is committed (and, still held past the lock wait, left for the next run) — and
/// nothing a group wrote is lost to the refused statement.
#[test]
fn a_row_another_transaction_holds_is_not_waited_for_inside_a_write_group() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    for id in 1..=9 {
        db.insert(id, "running", 50 * MIN);
    }
    let sb = Sandbox::new();
    // Rows 5 to 9 beat (a watch whose rows all died at once is held, not marked).
    for id in 1..=9 {
        sb.heartbeat(id, secs(if id <= 4 { 47 * MIN } else { 20 }));
    }
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let mut holder = db.conn();
    holder
        .batch_execute("BEGIN; SELECT * FROM sync_log WHERE id = 3 FOR UPDATE")
        .expect("for update");
    let started = std::time::Instant::now();
    let o = check(&cfg, &["--format", "json"]);
    holder.batch_execute("ROLLBACK").expect("rollback");
    let (rows, _) = json_lines(&o);
    assert_eq!(
        [1, 2, 4].map(|id| db.row(id).0),
        ["error", "error", "error"].map(String::from),
        "{}",
        stdout(&o)
    );
    assert_eq!(db.row(3).0, "running");
    assert_eq!(row(&rows, 3)["applied"], false, "{}", stdout(&o));
    // Only the row on its own waited (lock_timeout 10 s), once.
    assert!(started.elapsed() < Duration::from_secs(25));
    next_cron_run(&sb);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(3).0, "error");
}

#[test]
fn explain_and_dry_run_leave_the_table_identical() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(1, "running", 7_800);
    db.insert(2, "running", 50 * MIN);
    db.insert(3, "running", 5 * 3600);
    let sb = Sandbox::new();
    sb.heartbeat(1, secs(20));
    sb.heartbeat(2, secs(47 * MIN));
    sb.heartbeat(3, secs(5));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let before = db.dump();
    // The rows' physical versions: an UPDATE that wrote the same values would move them.
    let ctids = |db: &mut PgDb| db.rows("SELECT ctid::text, xmin::text FROM sync_log ORDER BY id");
    let versions = ctids(&mut db);
    for args in [
        &["--explain"][..],
        &["--dry-run"],
        &["--dry-run", "--format", "json"],
        &["--explain", "--format", "json"],
    ] {
        let o = check(&cfg, args);
        assert_exit(&o, 0);
        assert!(!stdout(&o).is_empty(), "{args:?} reports the rows");
        assert_eq!(db.dump(), before, "{args:?}");
        assert_eq!(ctids(&mut db), versions, "{args:?}");
    }
    assert!(!sb.state_dir().exists(), "no journal from a dry run");
}

#[test]
fn exit_2_for_missing_table_column_and_nothing_is_written() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let before = db.dump();
    for (watch, says) in [
        (
            sb.watch("confirm = 1\n").replace("sync_log", "sync_logs"),
            "table sync_logs does not exist in database",
        ),
        (
            sb.watch("confirm = 1\n")
                .replace("\"start_time\"", "\"started_at\""),
            "column started_at does not exist in table sync_log",
        ),
    ] {
        let cfg = sb.config(&db.url, &watch);
        let o = check(&cfg, &[]);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        assert_eq!(db.dump(), before);
    }
}

#[test]
fn exit_3_for_an_unreachable_server_and_a_password_is_never_printed() {
    let db = pg_or_skip!();
    let sb = Sandbox::new();
    // No server at that socket directory.
    let cfg = sb.config(
        "postgres://root@/appdb?host=/nonexistent/pg",
        &sb.watch("confirm = 1\n"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.contains("cannot connect to postgres://root@/appdb?host=/nonexistent/pg")
            && err.contains("no socket at /nonexistent/pg/.s.PGSQL.5432 (from the URL)"),
        "{err}"
    );
    // A password in the configuration file's URL is never printed, whatever happens.
    let cfg = sb.config(
        "postgres://root:hunter2secret@/nosuchdb_xyz?host=/var/run/postgresql",
        &sb.watch("confirm = 1\n"),
    );
    let o = check(&cfg, &[]);
    // A database the server does not have is named wrongly, as a table is (exit 2).
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("nosuchdb_xyz"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("postgres://root:***@/nosuchdb_xyz"),
        "{}",
        stderr(&o)
    );
    for o in [&o, &doctor(&cfg)] {
        assert!(
            !stdout(o).contains("hunter2") && !stderr(o).contains("hunter2"),
            "{}{}",
            stdout(o),
            stderr(o)
        );
    }
    drop(db);
}

#[test]
fn a_password_in_the_db_flag_is_refused_before_anything_happens() {
    let sb = Sandbox::new();
    let cfg = sb.config("sqlite:///nonexistent.db", &sb.watch(""));
    let o = selfheal()
        .args([
            "check",
            "--db",
            "postgresql://app:s3cret@/appdb",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("visible to every user"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("s3cret"));
}

/// `psql` as another selfheal run holding the watch's advisory lock: a run is turned away
/// (exit 75) while it lives; killed with SIGKILL, the server ends its session and releases
/// the lock, and the next run does the watch's work.
#[test]
fn a_run_holding_the_watchs_advisory_lock_turns_the_next_away_until_it_is_killed() {
    if !have_tool("psql", &["--version"], "psql") {
        return;
    }
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let mut holder = psql_holding(&db, "selfheal/public/full-sync");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 75);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["busy_watches"], serde_json::json!(["full-sync"]));
    assert_eq!(db.row(2).0, "running");
    kill_group(&mut holder);
    wait_until(
        "the server ends the killed session's lock",
        Duration::from_secs(10),
        || advisory_locks(&mut db) == 0,
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(2).0, "error");
}

/// The advisory locks held in the test's database.
fn advisory_locks(db: &mut PgDb) -> usize {
    // (Counted in the database's own rows of pg_locks.)
    let sql = format!(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = '{}')",
        db.name
    );
    db.one(&sql).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// SIGKILL to `p`'s whole process group (`psql` and its shell), then reaped.
fn kill_group(p: &mut Proc) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(p.pid()).expect("a pid"));
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    p.reap();
}

/// A real `psql` session that takes the advisory lock of `name` (keyed as applications
/// key a name: `hashtextextended(name, 0)`) and sleeps in a shell; returns once the lock is
/// held. [`kill_group`] kills it.
fn psql_holding(db: &PgDb, name: &str) -> Proc {
    let before = {
        let mut c = db.conn();
        pg_rows(
            &mut c,
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )[0][0]
            .clone()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let p = Proc::spawn(
        std::process::Command::new("psql")
            .args(["-X", "-q", "-h", "/var/run/postgresql", "-d", &db.name])
            .args([
                "-c",
                &format!("SELECT pg_advisory_lock(hashtextextended('{name}', 0))"),
            ])
            // Idle in its session while the shell command runs, as a worker between two
            // statements is: a backend busy in a statement would notice its client gone
            // only when the statement ends (client_connection_check_interval is off).
            .args(["-c", "\\! sleep 600"]),
    );
    let mut c = db.conn();
    wait_until("psql takes its lock", Duration::from_secs(10), || {
        pg_rows(
            &mut c,
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )[0][0]
            .as_deref()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
            > before
    });
    p
}

/// A worker holding an advisory lock of its own, its row naming it (`HOST:PID` of the real
/// `psql` process, started before its row as a worker is): however far past `max_age` the
/// row, a live worker is never touched (it is reported, not marked); killed with SIGKILL,
/// the server ends its session and releases its lock, and the next run reclaims the row.
#[test]
fn a_worker_holding_an_advisory_lock_killed_with_sigkill_is_reclaimed_and_a_live_one_never_touched()
{
    if !have_tool("psql", &["--version"], "psql") {
        return;
    }
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    let mut worker = psql_holding(&db, "job/7");
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) \
         VALUES (7, 'running', LOCALTIMESTAMP, LOCALTIMESTAMP, '{}:{}')",
        hostname(),
        worker.pid()
    ));
    let sb = Sandbox::new();
    // The row outlives max_age several times over while the test waits.
    let cfg = sb.config(
        &db.url,
        "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nowner_column = \"worker\"\n\
         stale_after = \"1s\"\nmax_age = \"2s\"\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n",
    );
    std::thread::sleep(Duration::from_secs(5));
    let before = db.dump();
    for _ in 0..2 {
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 1);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 7);
        assert_eq!(
            (&r["verdict"], &r["owner"], &r["applied"]),
            (
                &serde_json::json!("overtime"),
                &serde_json::json!("alive"),
                &serde_json::json!(false)
            ),
            "{}",
            stdout(&o)
        );
        assert_eq!(db.dump(), before, "a live worker's row is never written");
        next_cron_run(&sb);
    }
    assert_eq!(advisory_locks(&mut db), 1);
    kill_group(&mut worker);
    wait_until(
        "the server releases the killed worker's lock",
        Duration::from_secs(10),
        || advisory_locks(&mut db) == 0,
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 7)["applied"], true, "{}", stdout(&o));
    let (status, ended, msg) = db.row(7);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(msg.starts_with("self-heal: dead: "), "{msg}");
}

#[test]
fn doctor_describes_the_server_the_connection_and_the_plan() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch(""));
    let o = doctor(&cfg);
    let database = finding(&o, "database");
    assert!(
        database.contains("postgresql 15") || database.contains("postgresql 1"),
        "{database}"
    );
    assert!(
        database.contains("socket /var/run/postgresql/.s.PGSQL.5432 (from the URL)"),
        "{database}"
    );
    let index = finding(&o, "watch full-sync: index");
    assert!(index.starts_with('✓'), "{index}");
    assert!(finding(&o, "watch full-sync: table sync_log").starts_with('✓'));
}

/// A status the enum lacks and a message column too short: doctor's fixes are
/// PostgreSQL's own statements, and they work when run.
#[test]
fn doctors_fixes_are_postgresql_statements_that_work() {
    let mut db = pg_or_skip!();
    db.exec(
        "CREATE TYPE job_status AS ENUM ('running', 'done', 'error');
         CREATE TABLE sync_log (id INT PRIMARY KEY, status job_status NOT NULL,
             start_time TIMESTAMP, end_time TIMESTAMP, error_msg VARCHAR(24) NOT NULL DEFAULT '');
         CREATE INDEX idx_status ON sync_log (status, id)",
    );
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &sb.watch("manual_value = \"wait_manual\"\n"));
    let o = doctor(&cfg);
    let out = stdout(&o);
    let values = fix_of(&out, "✗ watch full-sync: status values", Some("; or "));
    assert_eq!(
        values, "ALTER TYPE job_status ADD VALUE 'wait_manual'",
        "{out}"
    );
    let message = fix_of(&out, "✗ watch full-sync: message", None);
    assert_eq!(
        message, "widen it: ALTER TABLE \"sync_log\" ALTER COLUMN \"error_msg\" TYPE text",
        "{out}"
    );
    db.exec(&values);
    db.exec(message.trim_start_matches("widen it: "));
    let o = doctor(&cfg);
    let out = stdout(&o);
    assert!(
        finding(&o, "watch full-sync: status values").starts_with('✓'),
        "{out}"
    );
    assert!(
        finding(&o, "watch full-sync: message").starts_with('✓'),
        "{out}"
    );
}

/// A watch busy for longer than twice its stale_after: the warning names the session that
/// holds its advisory lock (from pg_locks and pg_stat_activity) and how to see and end it
/// in PostgreSQL's words.
#[test]
fn a_watch_busy_for_long_names_the_session_that_holds_its_lock() {
    if !have_tool("psql", &["--version"], "psql") {
        return;
    }
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        &sb.watch("")
            .replace("stale_after = \"5m\"", "stale_after = \"1s\""),
    );
    let _holder = psql_holding(&db, "selfheal/public/full-sync");
    let pid = db
        .one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .expect("the holder's pid");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 75);
    std::thread::sleep(Duration::from_secs(3));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 75);
    let (_, summary) = json_lines(&o);
    let warning = summary["warnings"]
        .as_array()
        .and_then(|w| {
            w.iter()
                .filter_map(serde_json::Value::as_str)
                .find(|w| w.contains("not checked for"))
        })
        .unwrap_or_else(|| panic!("{summary}"))
        .to_string();
    assert!(
        warning.contains(&format!(
            "its advisory lock selfheal/public/full-sync is held by connection {pid} of root@local"
        )),
        "{warning}"
    );
    assert!(
        warning.contains(&format!("SELECT pg_terminate_backend({pid})")),
        "{warning}"
    );
}

/// Every SQL example of the documentation that names PostgreSQL on its first line
/// (`-- PostgreSQL`) runs there, in a database of its own (and in a transaction rolled back,
/// so that a role it creates does not outlive it); `docs/postgresql.md` has some, and its
/// table is one `init` reads.
#[test]
fn every_postgresql_sql_example_in_the_docs_runs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut blocks = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("doc");
        let mut inside: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            match (&mut inside, line.trim_start()) {
                (None, l) if l.starts_with("```sql") => inside = Some((n + 1, String::new())),
                (Some((at, code)), l) if l.starts_with("```") => {
                    if code.starts_with("-- PostgreSQL") {
                        blocks.push((format!("{}:{at}", f.display()), code.clone()));
                    }
                    inside = None;
                }
                (Some((_, code)), _) => {
                    code.push_str(line);
                    code.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert!(!blocks.is_empty(), "docs/postgresql.md has SQL examples");
    for (at, code) in &blocks {
        let mut db = pg_or_skip!();
        let mut c = db.conn();
        c.batch_execute(&format!("BEGIN;\n{code}\nROLLBACK;"))
            .unwrap_or_else(|e| panic!("{at}: {e}\n{code}"));
        db.exec(code.split("CREATE ROLE").next().unwrap_or_default());
    }
    // The guide's table is one init reads and judges.
    let (_, guide) = blocks
        .iter()
        .find(|(at, _)| at.contains("postgresql.md"))
        .expect("a table in docs/postgresql.md");
    let mut db = pg_or_skip!();
    db.exec(guide.split("CREATE ROLE").next().unwrap_or_default());
    let o = selfheal()
        .args(["init", "--url", &db.url, "--table", "sync_log"])
        .output()
        .expect("init");
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("[[watch]]"), "{}", stdout(&o));
}

/// No index on the status column: doctor names the one that serves the running rows page
/// by page, `(status, id)`; run, it is found (or, on a table this small, named as the one
/// that could serve).
#[test]
fn doctor_names_the_status_and_id_index_and_finds_it_once_made() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.exec("DROP INDEX idx_status");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &sb.watch(""));
    let o = doctor(&cfg);
    let out = stdout(&o);
    let fix = fix_of(&out, "! watch full-sync: index", None);
    assert_eq!(
        fix, "CREATE INDEX \"idx_sync_log_status\" ON \"sync_log\" (\"status\", \"id\")",
        "{out}"
    );
    db.exec(&fix);
    let o = doctor(&cfg);
    let index = finding(&o, "watch full-sync: index");
    assert!(
        index.starts_with('✓') && index.contains("idx_sync_log_status"),
        "{index}"
    );
}

/// `stats` over finished rows, with a watch that has no message column (its statement
/// holds a value whose type only the server can be told: `$1 IS NULL`) and a `match`.
#[test]
fn stats_read_finished_rows_with_and_without_a_message_column() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMPTZ");
    db.exec(
        "ALTER TABLE sync_log ADD job TEXT NOT NULL DEFAULT 'full-sync';
         INSERT INTO sync_log (id, status, start_time, end_time)
         SELECT s, 'done', now() - s * INTERVAL '1 hour',
                now() - s * INTERVAL '1 hour' + INTERVAL '20 minutes'
         FROM generate_series(1, 20) AS s",
    );
    let sb = Sandbox::new();
    for watch in [
        sb.watch("match = { job = \"full-sync\" }\n"),
        sb.watch("").replace("message_column = \"error_msg\"\n", ""),
    ] {
        let cfg = sb.config(&db.url, &watch);
        let o = selfheal()
            .args(["stats", "--format", "json", "--config"])
            .arg(&cfg)
            .output()
            .expect("stats");
        assert_exit(&o, 0);
        let first: serde_json::Value =
            serde_json::from_str(stdout(&o).lines().next().expect("a watch")).expect("json");
        assert_eq!(first["finished"], 20, "{first}");
        assert_eq!(first["runtime_s"]["p50"], 1200, "{first}");
    }
}

/// `db_lock` on PostgreSQL: a job's advisory lock, held by a real `psql` session, keyed
/// as applications key a name (`hashtextextended(name, 0)`) or, for a name that is a whole
/// number, by that number itself. Held, the row lives however old it is (no heartbeat, no
/// owner: the lock alone); its holder's pid is shown. Killed with SIGKILL, the server frees
/// the lock and the next run reclaims the row at once (a free lock is a fact about now).
#[test]
fn a_jobs_advisory_lock_is_its_named_lock_held_alive_and_free_once_killed() {
    if !have_tool("psql", &["--version"], "psql") {
        return;
    }
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMPTZ");
    let mut by_name = psql_holding(&db, "job/7");
    let mut by_number = {
        let before = advisory_locks(&mut db);
        let p = Proc::spawn(
            std::process::Command::new("psql")
                .args(["-X", "-q", "-h", "/var/run/postgresql", "-d", &db.name])
                .args(["-c", "SELECT pg_advisory_lock(42)"])
                .args(["-c", "\\! sleep 600"]),
        );
        wait_until("psql takes lock 42", Duration::from_secs(10), || {
            advisory_locks(&mut db) > before
        });
        p
    };
    db.exec(
        "INSERT INTO sync_log (id, status, start_time) VALUES
           (7, 'running', now() - INTERVAL '1 hour'),
           (42, 'running', now() - INTERVAL '1 hour'),
           (9, 'running', now() - INTERVAL '1 hour')",
    );
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         db_lock = [\"job/{id}\", \"{id}\"]\n\
         stale_after = \"5m\"\nmax_age = \"4h\"\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n",
    );
    let (o, rows, _) = {
        let o = check(&cfg, &["--dry-run", "--format", "json"]);
        let (rows, summary) = json_lines(&o);
        (o, rows, summary)
    };
    for (id, pid) in [(7, by_name.pid()), (42, by_number.pid())] {
        let r = row(&rows, id);
        assert_eq!(
            (r["verdict"].as_str(), r["db_lock"].as_str()),
            (Some("alive"), Some("held")),
            "row {id}: {r}"
        );
        // The holder is the psql session's backend, not psql itself: a server pid.
        assert!(
            r["db_lock_holder"]["connection"]
                .as_u64()
                .is_some_and(|c| c > 0 && c != u64::from(pid)),
            "{r}"
        );
    }
    // Row 9's names nobody holds, and it is an hour old: conclusive.
    let r = row(&rows, 9);
    assert_eq!(
        (r["verdict"].as_str(), r["db_lock"].as_str()),
        (Some("dead"), Some("free")),
        "{r}"
    );
    let _ = o;
    let before = db.row(7);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(9).0, "error");
    assert_eq!(db.row(7), before, "a held lock's row is never written");
    assert_eq!(db.row(42).0, "running");

    kill_group(&mut by_name);
    kill_group(&mut by_number);
    wait_until(
        "the server releases the killed sessions' locks",
        Duration::from_secs(10),
        || advisory_locks(&mut db) == 0,
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    for id in [7, 42] {
        let (status, ended, msg) = db.row(id);
        assert_eq!(
            (status.as_str(), ended),
            ("error", true),
            "row {id}: {}",
            stdout(&o)
        );
        assert!(msg.starts_with("self-heal: dead: "), "{msg}");
    }
}

/// A `db_lock` template no running job's advisory lock matches (`jobs/{id}` for the jobs'
/// `job/{id}`): the two live jobs' rows are held for a person (`no_named_lock`), never
/// marked; the right template finds them alive and proves itself, so once both are killed
/// the next run marks them (docs/design.md#no-named-lock).
#[test]
fn a_template_no_advisory_lock_matches_is_held_until_a_name_is_seen_held() {
    if !have_tool("psql", &["--version"], "psql") {
        return;
    }
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMPTZ");
    let mut holders = vec![psql_holding(&db, "job/7"), psql_holding(&db, "job/8")];
    db.exec(
        "INSERT INTO sync_log (id, status, start_time) VALUES
           (7, 'running', now() - INTERVAL '1 hour'),
           (8, 'running', now() - INTERVAL '1 hour')",
    );
    let sb = Sandbox::new();
    let url = db.url.clone();
    let config = |template: &str| {
        sb.config(
            &url,
            &format!(
                "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 db_lock = \"{template}\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                 ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n"
            ),
        )
    };
    let wrong = config("jobs/{id}");
    let before = db.dump();
    let (o, rows, summary) = json_check(&wrong, &[]);
    assert_exit(&o, 1);
    for id in [7, 8] {
        let r = row(&rows, id);
        assert_eq!(
            (
                r["db_lock"].as_str(),
                r["held"].as_str(),
                r["action"].as_str()
            ),
            (Some("free"), Some("no_named_lock"), Some("none")),
            "{r}"
        );
    }
    let warned = summary["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .any(|w| {
            w.contains(
                "no job of this watch holds its db_lock name: not one of its 2 running rows \
                 holds \"jobs/{id}\"",
            )
        });
    assert!(warned, "{summary}");
    assert_eq!(db.dump(), before, "no live job is marked");

    let right = config("job/{id}");
    let (o, rows, _) = json_check(&right, &[]);
    assert_exit(&o, 0);
    for id in [7, 8] {
        assert_eq!(row(&rows, id)["verdict"], "alive", "{}", row(&rows, id));
    }
    for p in &mut holders {
        kill_group(p);
    }
    wait_until(
        "the server releases the killed sessions' locks",
        Duration::from_secs(10),
        || advisory_locks(&mut db) == 0,
    );
    let (o, rows, _) = json_check(&right, &[]);
    assert_exit(&o, 0);
    for id in [7, 8] {
        assert_eq!(row(&rows, id)["applied"], true, "{}", row(&rows, id));
        assert_eq!(db.row(id).0, "error");
    }
}
