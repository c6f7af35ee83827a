//! The operator's second day (issue 15), through the real binary with real SQLite files,
//! the real MariaDB (and a private one for a lenient server), real processes holding real
//! locks and a frozen host clock (libfaketime) where an exact age is asserted:
//!
//! - parked rows stay visible: counted every run (metrics, JSON, `last-run.json`), listed by
//!   `--explain` and `doctor` (with the `selfheal resolve` command for each), and the
//!   statement `show --format json` gives for doing it by hand really releases the row;
//! - `lock_file` in JSON and the journal is the path the lock probe looked at;
//! - the row message says what decided in words, then the figures, and `stats` reads it and
//!   the older form rows already carry;
//! - a status the column cannot hold is refused before anything is written, `doctor`'s
//!   `ALTER TABLE` makes room, writes run in strict mode even on a lenient server, and
//!   DECIMAL start columns are unix seconds;
//! - the cron text tells of a problem once, then once per `remind_every`.
//!
//! Deaths that must be written at once rest on conclusive evidence (a free lock, an owner
//! pid that exited), which no confirmation holds back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;
use mysql::prelude::Queryable;

/// The binary under a frozen clock showing `at` (`None`: [`FROZEN_AT`]); `None` when the
/// test should return (no faketime outside CI).
fn frozen(at: Option<&str>) -> Option<Command> {
    let mut c = selfheal();
    if !frozen_clock(&mut c) {
        return None;
    }
    if let Some(at) = at {
        c.env("FAKETIME", at);
    }
    Some(c)
}

/// `selfheal ARGS --config CFG` under a frozen clock showing `at`.
fn run_at(cfg: &Path, args: &[&str], at: Option<&str>) -> Option<Output> {
    let mut c = frozen(at)?;
    Some(
        c.args(args)
            .arg("--config")
            .arg(cfg)
            .output()
            .expect("run selfheal"),
    )
}

/// The `fix:` of the doctor line that starts with `prefix`, cut at `until` when given.
fn fix_of(out: &str, prefix: &str, until: Option<&str>) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in\n{out}"));
    let fix = line
        .split_once("; fix: ")
        .map_or_else(|| panic!("no fix in {line}"), |(_, f)| f);
    match until.and_then(|u| fix.split_once(u)) {
        Some((head, _)) => head.to_string(),
        None => fix.to_string(),
    }
}

/// The value of a metrics line (`name{labels} value`).
fn metric(path: &Path, line_start: &str) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

fn last_run(sb: &Sandbox) -> serde_json::Value {
    let text = std::fs::read_to_string(sb.state_dir().join("last-run.json")).expect("last-run");
    serde_json::from_str(&text).expect("json")
}

fn watch_with(sb: &Sandbox, extra: &str) -> String {
    sb.watch(&format!("lock_file = \"{}\"\n{extra}", sb.lock_template()))
}

// ---------------------------------------------------------------------------------------
// 1. Parked rows stay visible

/// Runs the cron form, a cron period apart, until row `id` leaves `running` (a
/// confirmation may hold an inferred verdict for a run or two), returning the run that
/// moved it.
fn check_until_moved(sb: &Sandbox, cfg: &Path, id: i64, status: impl Fn(i64) -> String) -> Output {
    for _ in 0..3 {
        next_cron_run(sb);
        let o = check(cfg, &[]);
        if status(id) != "running" {
            return o;
        }
    }
    panic!("row {id} is still running after three runs");
}

#[test]
fn a_parked_row_is_counted_every_run_listed_by_doctor_and_released_by_its_statement() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 1: its heartbeat stalled while its worker holds the lock: hung, parked.
    db.insert(1, "running", 40 * MIN);
    sb.heartbeat(1, secs(25 * MIN));
    let mut holder = flock1_holder(&sb.lock_path(1), false);
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &watch_with(&sb, "manual_value = \"wait_manual\"\n"),
    );
    let parked = check_until_moved(&sb, &cfg, 1, |id| db.status(id));
    assert_exit(&parked, 1);
    assert!(
        stdout(&parked).contains("full-sync id=1: set status to 'wait_manual' (mark_manual"),
        "{}",
        stdout(&parked)
    );
    assert_eq!(db.status(1), "wait_manual");

    // The person was told; later runs say nothing and exit 0, but count the row.
    cron_check_is_silent(&cfg);
    let gauge = "selfheal_parked_rows{watch=\"full-sync\"}";
    assert_eq!(metric(&metrics, gauge), Some(1.0));
    assert_eq!(
        metric(&metrics, "selfheal_attention_rows{watch=\"full-sync\"}"),
        Some(0.0)
    );
    let last = last_run(&sb);
    assert_eq!(
        (last["parked"].as_u64(), last["exit_status"].as_u64()),
        (Some(1), Some(0))
    );
    let o = check(&cfg, &["--format", "json", "--dry-run"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["parked"], 1, "{summary}");
    assert_eq!(summary["per_watch"][0]["parked"], 1, "{summary}");
    let o = check(&cfg, &["--explain"]);
    assert!(
        stdout(&o)
            .contains("  parked: 1 row in 'wait_manual' waits for a person: id=1 (started 40m"),
        "{}",
        stdout(&o)
    );

    // doctor lists it, with when it was parked, and the command that decides it.
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("! watch full-sync: parked row id=1: parked "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains(", from the journal); its run started 40m"),
        "{line}"
    );
    assert_eq!(
        fix_of(&out, "! watch full-sync: parked row id=1:", None),
        "after looking (selfheal show full-sync 1): selfheal resolve full-sync 1 --as dead|running"
    );
    // The statement for doing it by hand stays available in show's JSON, where `resolve`
    // itself would act: not while the worker holds its lock, once it is gone.
    let shown = |cfg: &std::path::Path| {
        let o = selfheal()
            .args(["show", "full-sync", "1", "--format", "json", "--config"])
            .arg(cfg)
            .output()
            .expect("show");
        assert_exit(&o, 0);
        serde_json::from_str::<serde_json::Value>(stdout(&o).trim()).expect("json")
    };
    assert!(shown(&cfg)["sql"].is_null(), "the worker lives");
    holder.kill9();
    let o = selfheal()
        .args(["show", "full-sync", "1", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 0);
    let shown: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    let release = shown["sql"].as_str().expect("the statement").to_string();
    let release = release.as_str();
    assert!(release.starts_with("UPDATE \"sync_log\" SET"), "{release}");
    // A person runs it, as shown, after looking.
    let changed = db
        .conn()
        .execute(release, [])
        .expect("the release statement runs");
    assert_eq!(changed, 1);
    let (_, status, ended, _) = db.dump().remove(0);
    assert_eq!((status.as_str(), ended), ("error", true));
    // Once released: a compare-and-set, so running it twice changes nothing.
    assert_eq!(db.conn().execute(release, []).expect("runs"), 0);

    cron_check_is_silent(&cfg);
    assert_eq!(metric(&metrics, gauge), Some(0.0));
    let o = doctor(&cfg);
    assert!(
        stdout(&o).contains("✓ watch full-sync: parked rows: none in 'wait_manual'"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn doctors_release_statement_quotes_what_the_database_holds_mariadb() {
    let mut db = mysql_or_skip!();
    db.exec(
        "CREATE TABLE jobs (id VARCHAR(40) PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, KEY idx_status (status))",
    );
    // Parked by hand (no journal knows it), with an id no SQL should be spliced from.
    let id = "a'b\\c?;--";
    let mut c = db.conn();
    c.exec_drop(
        "INSERT INTO jobs VALUES (?, 'wait_manual', NOW() - INTERVAL 2 HOUR, NULL), \
         ('other', 'wait_manual', NOW() - INTERVAL 1 HOUR, NULL)",
        (id,),
    )
    .expect("insert");
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        &format!(
            "name = \"jobs\"\ntable = \"jobs\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
             ended_column = \"end_time\"\nmanual_value = \"wait_manual\"\n",
            sb.heartbeat_template()
        ),
    );
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("! watch jobs: parked rows: 2 rows in 'wait_manual' wait for a person"),
        "{out}"
    );
    let prefix = format!("! watch jobs: parked row id={id}: ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("parked at a time the journal does not know; its run started 2h"),
        "{line}"
    );
    // The command a person runs names the id as one shell word.
    assert_eq!(
        fix_of(&out, &prefix, None),
        format!(
            "after looking (selfheal show jobs 'a'\\''b\\c?;--'): selfheal resolve jobs \
             'a'\\''b\\c?;--' --as dead|running"
        )
    );
    // The statement for doing it by hand, from show's JSON, runs as shown.
    let o = selfheal()
        .args(["show", "jobs", id, "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 0);
    let shown: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    let release = shown["sql"].as_str().expect("the statement");
    c.query_drop(release).expect("the statement runs as shown");
    assert_eq!(c.affected_rows(), 1, "{release}");
    let rows: Vec<(String, String, bool)> = c
        .query("SELECT id, status, end_time IS NOT NULL FROM jobs ORDER BY id")
        .expect("rows");
    assert_eq!(
        rows,
        [
            (id.to_string(), "error".to_string(), true),
            ("other".to_string(), "wait_manual".to_string(), false)
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 8. lock_file is the path the probe looked at

#[test]
fn lock_file_in_json_and_the_journal_is_the_probed_path() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // 1 alive, its lock held; 2 dead: the lock file exists and nobody holds it, its
    // heartbeat stale (conclusive, written at once); 3 alive, no lock file at all.
    db.insert(1, "running", 40 * MIN);
    sb.heartbeat(1, secs(5));
    let _holder = flock1_holder(&sb.lock_path(1), false);
    db.insert(2, "running", 20 * MIN);
    sb.heartbeat(2, secs(6 * MIN));
    std::fs::write(sb.lock_path(2), "").expect("lock file");
    db.insert(3, "running", 10 * MIN);
    sb.heartbeat(3, secs(5));
    let cfg = sb.config(&db.url(), &watch_with(&sb, ""));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 1)["lock"], "held");
    for id in 1..=3 {
        assert_eq!(
            row(&rows, id)["lock_file"],
            sb.lock_path(id).display().to_string(),
            "{}",
            row(&rows, id)
        );
    }
    assert_eq!(row(&rows, 2)["lock"], "free");
    assert_eq!(row(&rows, 2)["applied"], true);
    let journal = sb.journal();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0]["id"], 2);
    assert_eq!(
        journal[0]["lock_file"],
        sb.lock_path(2).display().to_string()
    );
    assert_eq!(journal[0]["lock_release"], serde_json::Value::Null);
    assert!(
        sb.lock_path(2).exists(),
        "the job's lock file is never deleted"
    );
}

// ---------------------------------------------------------------------------------------
// 9. The row message, in words, and stats reading both forms

#[test]
fn the_row_message_says_what_decided_and_stats_reads_it_and_the_older_form() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 5: its lock file is free, its heartbeat 6m40s old: dead, conclusively. (With
    // its own heartbeat fresh, the free lock would wait for it.)
    db.insert_at(5, "running", ago(20 * MIN));
    sb.heartbeat_at(5, ago(400));
    std::fs::write(sb.lock_path(5), "").expect("lock file");
    let cfg = sb.config(&db.url(), &watch_with(&sb, ""));
    let Some(o) = run_at(&cfg, &["check"], None) else {
        return;
    };
    assert_exit(&o, 0);
    let want = "self-heal: dead: lock free, worker gone (row 20m, heartbeat 6m40s ago, \
                stale_after 5m)";
    let (_, status, _, msg) = db.dump().remove(0);
    assert_eq!((status.as_str(), msg.as_str()), ("error", want));
    assert!(stdout(&o).contains(want), "{}", stdout(&o));

    // Its worker was alive after all and finishes after 1h. Beside it, rows marked by
    // earlier releases and by another host (the journal knows none of them): the older
    // form, the new form, and a new form cut short by a narrow column.
    let end = |id: i64, runtime: u64| {
        db.conn()
            .execute(
                "UPDATE sync_log SET status = 'done', end_time = datetime(start_time, ?1) \
                 WHERE id = ?2",
                rusqlite::params![format!("+{runtime} seconds"), id],
            )
            .expect("finish");
    };
    end(5, HOUR);
    for (id, msg) in [
        (
            8,
            "self-heal: dead: heartbeat_age=400s stale_after=300s total_age=900s \
             max_age=14400s lock=none",
        ),
        (
            9,
            "self-heal: dead: heartbeat stale, no sign of the worker (row 15m, heartbeat \
             6m40s ago, stale_after 5m)",
        ),
        (
            10,
            "self-heal: dead: heartbeat stale, no sign of the worker (row 15m, heartbe",
        ),
    ] {
        db.insert_at(id, "running", ago(3 * HOUR));
        db.conn()
            .execute(
                "UPDATE sync_log SET error_msg = ?1 WHERE id = ?2",
                rusqlite::params![msg, id],
            )
            .expect("message");
        end(id, 40 * MIN);
    }
    std::fs::remove_file(sb.state_dir().join("journal.jsonl")).expect("no journal");
    let Some(o) = run_at(&cfg, &["stats", "--format", "json"], None) else {
        return;
    };
    assert_exit(&o, 1);
    let w: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().expect("a watch")).expect("json");
    assert_eq!(w["false_positives"], 4, "{w}");
    let fp: Vec<(i64, &str, Option<u64>, bool)> = w["false_positive_rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().expect("id"),
                r["source"].as_str().expect("source"),
                r["heartbeat_age_s"].as_u64(),
                r["conclusive"].as_bool().expect("conclusive"),
            )
        })
        .collect();
    assert_eq!(
        fp,
        [
            (5, "message", Some(400), true),
            (8, "message", Some(400), false),
            (9, "message", Some(400), false),
            // Cut inside the heartbeat: the figure is left out, never misread.
            (10, "message", None, false),
        ]
    );
    assert_eq!(w["false_positives_conclusive"], 1);
}

// ---------------------------------------------------------------------------------------
// 10. Values fit their columns

/// A running row on MariaDB whose owner pid has exited: conclusively dead.
fn dead_row_mariadb(db: &mut MysqlDb, id: i64) {
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, worker) VALUES ({id}, 'running', \
         NOW() - INTERVAL 1 HOUR, '{}:{}')",
        hostname(),
        exited_pid()
    ));
}

fn owner_watch(sb: &Sandbox, extra: &str) -> String {
    sb.watch(&format!("owner_column = \"worker\"\n{extra}"))
}

#[test]
fn a_status_the_enum_cannot_hold_is_refused_until_doctors_alter_table_makes_room() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(
        "ALTER TABLE sync_log MODIFY status ENUM('running','done','failed') NOT NULL \
         DEFAULT 'running' COMMENT 'job state'",
    );
    dead_row_mariadb(&mut db, 1);
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &owner_watch(&sb, ""));
    let before = db.dump();
    for args in [
        &[][..],
        &["--dry-run"],
        &["--explain"],
        &["--format", "json"],
    ] {
        let o = check(&cfg, args);
        assert_exit(&o, 2);
        assert!(
            stderr(&o).contains(
                "dead_value \"error\" cannot be stored in the status column status: it is not \
                 one of the column's values (running, done, failed); nothing was written"
            ),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert_eq!(db.dump(), before, "nothing written");
    assert!(sb.journal().is_empty());

    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("✗ watch full-sync: status values: dead_value \"error\" cannot be stored"),
        "{out}"
    );
    let alter = fix_of(
        &out,
        "✗ watch full-sync: status values:",
        Some("; or set dead_value"),
    );
    assert_eq!(
        alter,
        "ALTER TABLE `sync_log` MODIFY `status` enum('running','done','failed','error') NOT \
         NULL DEFAULT 'running' COMMENT 'job state'"
    );
    assert!(
        out.contains(
            "or set dead_value in watch 'full-sync' to one of the column's values the \
                      application means for it (done, failed)"
        ),
        "{out}"
    );
    // The person runs the statement doctor shows; the column keeps the rest.
    db.exec(&alter);
    let create: Vec<(String, String)> = db.query("SHOW CREATE TABLE sync_log");
    assert!(
        create[0].1.contains(
            "`status` enum('running','done','failed','error') NOT NULL DEFAULT 'running' \
             COMMENT 'job state'"
        ),
        "{}",
        create[0].1
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(1).0, "error");
    let o = doctor(&cfg);
    assert!(
        stdout(&o).contains(
            "✓ watch full-sync: status values: status enum('running','done','failed','error') \
             holds dead_value error"
        ),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_status_longer_than_its_column_is_refused_and_doctor_widens_it() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("ALTER TABLE sync_log MODIFY status VARCHAR(8) NOT NULL");
    dead_row_mariadb(&mut db, 1);
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        &owner_watch(&sb, "manual_value = \"wait_manual\"\n"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(
            "manual_value \"wait_manual\" cannot be stored in the status column status: it is \
             11 characters long and the column holds 8"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.row(1).0, "running");
    let o = doctor(&cfg);
    let alter = fix_of(
        &stdout(&o),
        "✗ watch full-sync: status values:",
        Some("; or set"),
    );
    assert_eq!(
        alter,
        "ALTER TABLE `sync_log` MODIFY `status` varchar(32) NOT NULL"
    );
    db.exec(&alter);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(1).0, "error");
}

#[test]
fn writes_run_in_strict_mode_even_on_a_lenient_server() {
    let Some(server) = PrivateMariadb::start() else {
        return;
    };
    let mut root = server.conn("");
    root.query_drop("SET GLOBAL sql_mode = ''")
        .expect("a lenient server");
    root.query_drop("CREATE DATABASE app").expect("database");
    let mut c = server.conn("app");
    assert_eq!(
        c.query_first::<String, _>("SELECT @@SESSION.sql_mode")
            .expect("mode"),
        Some(String::new()),
        "a new session of this server is lenient"
    );
    // An end column too small for unix seconds: a lenient server would store 32767.
    c.query_drop(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time SMALLINT NULL, error_msg VARCHAR(255) NOT NULL \
         DEFAULT '', worker VARCHAR(64) NULL, KEY idx_status (status))",
    )
    .expect("table");
    c.query_drop("INSERT INTO sync_log (id, status, start_time) VALUES (9, 'done', NOW())")
        .expect("row 9");
    c.query_drop("UPDATE sync_log SET end_time = UNIX_TIMESTAMP() WHERE id = 9")
        .expect("the lenient session stores it, mangled");
    let mangled: Option<i64> = c
        .query_first("SELECT end_time FROM sync_log WHERE id = 9")
        .expect("end");
    assert_eq!(
        mangled,
        Some(32767),
        "this server mangles values: the test proves something"
    );
    c.exec_drop(
        "INSERT INTO sync_log (id, status, start_time, worker) VALUES \
         (1, 'running', NOW() - INTERVAL 1 HOUR, ?)",
        (format!("{}:{}", hostname(), exited_pid()),),
    )
    .expect("row 1");
    let sb = Sandbox::new();
    let cfg = sb.config(&server.url("app"), &owner_watch(&sb, ""));
    let o = check(&cfg, &[]);
    // The write fails in selfheal's strict session; the row keeps what the application
    // wrote, and a person is told.
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("full-sync id=1: needs a person (dead): write failed: Out of range"),
        "{}",
        stdout(&o)
    );
    let row: Option<(String, Option<i64>, String)> = c
        .query_first("SELECT status, end_time, error_msg FROM sync_log WHERE id = 1")
        .expect("row 1");
    assert_eq!(row, Some(("running".into(), None, String::new())));
    assert!(
        sb.journal().is_empty(),
        "nothing applied, nothing journaled"
    );
}

#[test]
fn a_decimal_start_column_is_unix_seconds_mariadb() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DECIMAL(14,3)");
    db.exec("ALTER TABLE sync_log MODIFY end_time DECIMAL(14,3) NULL");
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, worker) VALUES \
         (1, 'running', UNIX_TIMESTAMP() - 3000.5, '{}:{}'), \
         (2, 'running', UNIX_TIMESTAMP() - 60, NULL)",
        hostname(),
        exited_pid()
    ));
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &owner_watch(&sb, ""));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r1 = row(&rows, 1);
    assert_eq!(
        (r1["verdict"].as_str(), r1["applied"].as_bool()),
        (Some("dead"), Some(true))
    );
    let age = r1["total_age_s"].as_u64().expect("an age, not unknown");
    assert!((3000..3100).contains(&age), "{r1}");
    assert_eq!(row(&rows, 2)["verdict"], "starting");
    // The end time is unix seconds too, not NOW()'s digits.
    let gap: Vec<Option<f64>> =
        db.query("SELECT ABS(end_time - UNIX_TIMESTAMP()) FROM sync_log WHERE id = 1");
    assert!(gap[0].is_some_and(|g| g < 100.0), "{gap:?}");
}

// ---------------------------------------------------------------------------------------
// 11. Cron mail once per problem

const LATER: &str = "2035-03-15 16:09:26";

#[test]
fn the_cron_text_tells_of_a_problem_once_then_once_per_remind_every() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 1 cannot be judged: its heartbeat file is a symlink loop. A run that ended well
    // after 3h makes max_age 4h too low.
    db.insert_at(1, "running", ago(30 * MIN));
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    db.insert_at(3, "done", ago(26 * HOUR));
    db.conn()
        .execute(
            "UPDATE sync_log SET end_time = ?1 WHERE id = 3",
            [sql_datetime(ago(23 * HOUR))],
        )
        .expect("end");
    let watch = sb.watch("owner_column = \"worker\"\n");
    let cfg = sb.config(&db.url(), &watch);
    let reminders = sb.state_dir().join("reminders.json");
    let cron = |at: Option<&str>| run_at(&cfg, &["check"], at);

    let Some(o) = cron(None) else { return };
    assert_exit(&o, 1);
    let first = stdout(&o);
    assert_eq!(first.lines().count(), 1, "{first}");
    assert!(
        first.starts_with(
            "full-sync id=1: needs a person (unknown): evidence unreadable: heartbeat"
        ),
        "{first}"
    );
    assert!(
        stderr(&o).contains("max_age 4h is below 1.5×"),
        "{}",
        stderr(&o)
    );

    // Unchanged: nothing to mail, but the exit status and last-run.json still tell.
    let o = cron(None).expect("faketime");
    assert_exit(&o, 1);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    assert_eq!(last_run(&sb)["attention"], 1);
    let told = std::fs::read(&reminders).expect("reminders.json");

    // Everything else always shows everything, and leaves the reminders alone.
    let o = run_at(&cfg, &["check", "--format", "json"], None).expect("faketime");
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 1)["attention"], true);
    assert!(
        summary["warnings"]
            .to_string()
            .contains("max_age 4h is below"),
        "{summary}"
    );
    let o = run_at(&cfg, &["check", "--dry-run"], None).expect("faketime");
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("full-sync id=1: needs a person (unknown)"));
    assert!(stderr(&o).contains("max_age 4h is below"));
    let o = run_at(&cfg, &["check", "--explain"], None).expect("faketime");
    assert!(stdout(&o).contains("id=1    unknown"), "{}", stdout(&o));
    assert_eq!(std::fs::read(&reminders).expect("reminders"), told);

    // The basis changes (the heartbeat reads again, but the owner column holds no pid):
    // told again, once.
    std::fs::remove_file(sb.path("hb-1")).expect("remove");
    sb.heartbeat_at(1, ago(10));
    db.conn()
        .execute("UPDATE sync_log SET worker = 'web-3' WHERE id = 1", [])
        .expect("an owner that is no pid");
    let o = cron(None).expect("faketime");
    assert_exit(&o, 1);
    assert!(
        stdout(&o).starts_with(
            "full-sync id=1: needs a person (unknown): evidence unreadable: owner: \"web-3\""
        ),
        "{}",
        stdout(&o)
    );
    assert_eq!(stderr(&o), "", "the warning is unchanged");
    let o = cron(None).expect("faketime");
    assert_eq!(stdout(&o), "");

    // A day later: told again.
    let o = cron(Some(LATER)).expect("faketime");
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("full-sync id=1: needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("max_age 4h is below"), "{}", stderr(&o));

    // remind_every, shorter: once an hour.
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "remind_every = \"1h\"",
        &watch,
    );
    let at = |t: &str| run_at(&cfg, &["check"], Some(t)).expect("faketime");
    assert_eq!(stdout(&at("2035-03-15 16:39:26")), "", "half an hour later");
    let o = at("2035-03-15 17:09:27");
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "an hour later: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("max_age 4h is below"));

    // A problem that went away and comes back is news.
    db.conn()
        .execute("UPDATE sync_log SET status = 'done' WHERE id = 1", [])
        .expect("finish");
    let o = at("2035-03-15 17:09:28");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    db.conn()
        .execute("UPDATE sync_log SET status = 'running' WHERE id = 1", [])
        .expect("again");
    let o = at("2035-03-15 17:09:29");
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_damaged_reminders_file_costs_a_repeated_mail_never_a_silent_problem() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 30 * MIN);
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_ne!(stdout(&o), "");
    let path: PathBuf = sb.state_dir().join("reminders.json");
    std::fs::write(&path, "{ not json").expect("damage");
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("reminders.json"), "{}", stderr(&o));
    // Rewritten whole: the next run is quiet again.
    let o = check(&cfg, &[]);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
}

/// Issue 20, item 7: a run under a wrong clock (here 2035) stored its reminders in the
/// future. Read with the right clock, `now - told` is negative, which is "less than
/// remind_every" forever: the problem was never mailed again. A reminder from the future
/// is no reminder: the problem is told again, and remembered at the right time.
#[test]
fn a_reminder_stored_in_the_future_never_silences_a_problem() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 30 * MIN);
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let Some(o) = run_at(&cfg, &["check"], Some(LATER)) else {
        return;
    };
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    let reminders = std::fs::read_to_string(sb.state_dir().join("reminders.json")).expect("told");
    assert!(
        reminders.contains("\"told\": 20"),
        "told in 2035: {reminders}"
    );

    // The clock is right again: the problem is news, and told at the right time.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("full-sync id=1: needs a person (unknown)"),
        "a reminder from the future silenced it: {}",
        stdout(&o)
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "", "told now: quiet until remind_every");
}
