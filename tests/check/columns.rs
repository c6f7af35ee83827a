//! What a run writes into a row, through the real binary on real SQLite files, the real
//! MariaDB and a private one for a lenient server: the row message says what decided in
//! words, then the figures, and `stats` reads it and the older form rows already carry; a
//! status the column cannot hold is refused before anything is written, and `doctor`'s
//! `ALTER TABLE` makes room; writes run in strict mode even on a lenient server; DECIMAL
//! start columns are unix seconds.

use crate::common::*;
use mysql::prelude::Queryable;

#[test]
fn the_row_message_says_what_decided_and_stats_reads_it_and_the_older_form() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 5: its lock file is free, its heartbeat 6m40s old: dead, conclusively. (With
    // its own heartbeat fresh, the free lock would wait for it.)
    db.insert_at(5, "running", ago(20 * MIN));
    sb.heartbeat_at(5, ago(400));
    std::fs::write(sb.lock_path(5), "").expect("lock file");
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, ""));
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
