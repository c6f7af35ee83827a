//! What concerns a whole run, said once and said every time, against a real MariaDB:
//! - a failure that hits every write of a run the same way — a revoked grant (on the shared
//!   server, an account of the test's own), a server set read-only (on a private server:
//!   `SET GLOBAL read_only` never touches the shared one) — is one run-level error, exit 3,
//!   on every run and in `last-run.json`, not one "write failed" line per row;
//! - a watch whose advisory lock another connection holds (`GET_LOCK` squatting, here a
//!   second connection of the test's own): said once it has been skipped for longer than 2
//!   × stale_after, naming the holder's connection id, user and host, then per
//!   remind_every; the `selfheal_watch_busy` gauge counts the runs every run.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;
use mysql::prelude::Queryable;

/// The standard watch with owners: a row whose worker is gone is dead on conclusive
/// evidence (no breaker holds it back).
fn watch(sb: &Sandbox) -> String {
    sb.watch("owner_column = \"worker\"\n")
}

/// `HOST:PID` of a worker that is gone.
fn gone_worker() -> String {
    format!("{}:{}", hostname(), exited_pid())
}

/// `selfheal check --config CFG ARGS`.
fn check_now(cfg: &Path, args: &[&str]) -> Output {
    check(cfg, args)
}

/// The URL of `db` for `user`, without a password.
fn url_for(db_url: &str, user: &str) -> String {
    let (scheme, rest) = db_url.split_once("://").expect("scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}@{host}")
}

/// A configuration for `user` (password in a file of its own) on `url`.
fn config_as(sb: &Sandbox, url: &str, password: &str) -> PathBuf {
    let pw = sb.file("db-password", &format!("{password}\n"), 0o600);
    sb.config_with(
        &format!("url = \"{url}\"\npassword_file = \"{}\"", pw.display()),
        "",
        &watch(sb),
    )
}

/// Asserts that a run failed once for the whole run: exit 3, no row line, one error line
/// naming the cause, a fix, and `last-run.json` saying so.
#[track_caller]
fn assert_one_run_level_error(o: &Output, sb: &Sandbox, cause: &str) {
    assert_exit(o, 3);
    assert_eq!(stdout(o), "", "no line per row");
    let err = stderr(o);
    assert!(!err.contains("write failed"), "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("selfheal: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains(cause), "{err}");
    assert!(err.contains("\nselfheal: fix: "), "{err}");
    let last = sb.last_run();
    assert_eq!(last["exit_status"], 3, "{last}");
    assert!(
        last["error"].as_str().is_some_and(|e| e.contains(cause)),
        "{last}"
    );
}

#[test]
fn a_revoked_grant_is_one_run_level_error_on_every_run_not_a_line_per_row() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, worker) \
         SELECT seq, 'running', NOW() - INTERVAL 3000 SECOND, '{}' FROM seq_1_to_300",
        gone_worker()
    ));
    let user = db.create_user("s3cret-pw");
    db.exec(&format!(
        "REVOKE UPDATE ON `{}`.* FROM '{user}'@'localhost'",
        db.name
    ));
    let sb = Sandbox::new();
    let cfg = config_as(&sb, &url_for(&db.url, &user), "s3cret-pw");
    let before = db.dump();
    for run in 0..2 {
        let o = check_now(&cfg, &[]);
        assert_one_run_level_error(&o, &sb, "UPDATE command denied");
        let fix = stderr(&o);
        assert!(
            fix.contains(&format!(
                "selfheal: fix: let the account write the table (as a database admin): GRANT \
                 SELECT, UPDATE ON `{}`.`sync_log` TO '{user}'@'localhost'",
                db.name
            )),
            "run {run}: {fix}"
        );
    }
    assert_eq!(db.dump(), before, "nothing was written");
    // The fix, applied: the next run marks every row.
    db.exec(&format!(
        "GRANT SELECT, UPDATE ON `{}`.`sync_log` TO '{user}'@'localhost'",
        db.name
    ));
    let o = check_now(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["changed"], 300, "{summary}");
}

#[test]
fn a_read_only_server_is_one_run_level_error_on_every_run_not_a_line_per_row() {
    let Some(server) = PrivateMariadb::start() else {
        return;
    };
    server
        .conn("")
        .query_drop("CREATE DATABASE appdb")
        .expect("database");
    let mut root = server.conn("appdb");
    root.query_drop(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, \
         error_msg VARCHAR(255) NOT NULL DEFAULT '', worker VARCHAR(64) NULL, \
         KEY idx_status (status))",
    )
    .expect("table");
    root.query_drop(format!(
        "INSERT INTO sync_log (id, status, start_time, worker) \
         SELECT seq, 'running', NOW() - INTERVAL 3000 SECOND, '{}' FROM seq_1_to_300",
        gone_worker()
    ))
    .expect("rows");
    // root may write a read-only server (SUPER): the application's account may not.
    root.query_drop("CREATE USER 'app'@'localhost' IDENTIFIED BY 's3cret-pw'")
        .expect("user");
    root.query_drop("GRANT ALL ON appdb.* TO 'app'@'localhost'")
        .expect("grant");
    root.query_drop("SET GLOBAL read_only = 1")
        .expect("read only");
    let sb = Sandbox::new();
    let url = format!(
        "mysql://app@localhost/appdb?socket={}",
        server.socket().display()
    );
    let cfg = config_as(&sb, &url, "s3cret-pw");
    for run in 0..2 {
        let o = check_now(&cfg, &[]);
        assert_one_run_level_error(&o, &sb, "--read-only");
        assert!(
            stderr(&o).contains("selfheal: fix: the server takes no writes (read_only"),
            "run {run}: {}",
            stderr(&o)
        );
    }
    let running: Vec<i64> = root
        .query("SELECT COUNT(*) FROM sync_log WHERE status = 'running'")
        .expect("count");
    assert_eq!(running, [300]);
    root.query_drop("SET GLOBAL read_only = 0")
        .expect("writable");
    let o = check_now(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["changed"], 300, "{summary}");
}

// ---------------------------------------------------------------------------------------
// 4. GET_LOCK squatting

/// `selfheal check ARGS` with the host clock moved by `offset` ("+20m").
fn check_later(cfg: &Path, offset: &'static str, args: &[&str]) -> Option<Output> {
    // From one instant taken once, the clock frozen at it plus `offset` ("+20m"): the real
    // clock moves on between the runs, and "20m" must not read "20m1s".
    static T0: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    let t0 = *T0.get_or_init(std::time::SystemTime::now);
    let minutes: u64 = offset
        .trim_start_matches('+')
        .trim_end_matches('m')
        .parse()
        .expect("an offset in minutes");
    let at = sql_datetime(t0 + std::time::Duration::from_secs(minutes * 60));
    let mut c = selfheal();
    if !frozen_clock_at(&mut c, Box::leak(at.into_boxed_str())) {
        return None;
    }
    Some(
        c.arg("check")
            .args(args)
            .arg("--config")
            .arg(cfg)
            .output()
            .expect("run selfheal check"),
    )
}

/// The `selfheal_watch_busy` sample of the metrics file.
fn busy_gauge(metrics: &Path) -> String {
    let text = std::fs::read_to_string(metrics).expect("metrics");
    text.lines()
        .find(|l| l.starts_with("selfheal_watch_busy{"))
        .unwrap_or_else(|| panic!("no selfheal_watch_busy in\n{text}"))
        .to_string()
}

#[test]
fn a_squatted_advisory_lock_is_said_once_it_outlasts_twice_stale_after_naming_its_holder() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    // Any account can take the predictable name first; here the test's own connection.
    let mut squatter = db.conn();
    let got: Vec<i64> = squatter
        .query(format!(
            "SELECT GET_LOCK('selfheal/{}/full-sync', 0)",
            db.name
        ))
        .expect("GET_LOCK");
    assert_eq!(got, [1]);
    let id: Vec<u64> = squatter.query("SELECT CONNECTION_ID()").expect("id");
    let sb = Sandbox::new();
    let metrics = sb.path("selfheal.prom");
    // The clock moves by hours below: a day of tolerance keeps the clock check quiet.
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url),
        &format!(
            "metrics_file = \"{}\"\nremind_every = \"1h\"\nclock_tolerance = \"1d\"",
            metrics.display()
        ),
        &sb.watch(""),
    );
    let said = format!(
        "selfheal: warning: watch full-sync: not checked for 20m (3 runs in a row): its \
         advisory lock selfheal/{}/full-sync is held by connection {} of root@localhost; a \
         selfheal run holds it for seconds, so this is most likely not selfheal — the lock's \
         name is predictable and any account on the server can take it; fix: see what \
         connection {1} is (SHOW PROCESSLIST), and if it is no selfheal run, end it (KILL {1}) \
         and find out why that account holds the lock\n",
        db.name, id[0]
    );

    // Busy for less than 2 × stale_after (10m): exit 75 and silent, counted.
    let Some(o) = check_later(&cfg, "+0", &[]) else {
        return;
    };
    assert_exit(&o, 75);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    assert_eq!(
        busy_gauge(&metrics),
        "selfheal_watch_busy{watch=\"full-sync\"} 1"
    );
    let o = check_later(&cfg, "+5m", &[]).expect("faketime");
    assert_exit(&o, 75);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    // 20 minutes on: said, with the holder.
    let o = check_later(&cfg, "+20m", &[]).expect("faketime");
    assert_exit(&o, 75);
    assert_eq!(stdout(&o), "");
    assert_eq!(stderr(&o), said);
    assert_eq!(
        busy_gauge(&metrics),
        "selfheal_watch_busy{watch=\"full-sync\"} 3"
    );
    // Then per remind_every: not at +30m; the JSON and last-run.json say it every run.
    let o = check_later(&cfg, "+30m", &[]).expect("faketime");
    assert_exit(&o, 75);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    let last = sb.last_run();
    assert!(
        last["warnings"]
            .to_string()
            .contains("not checked for 30m (4 runs in a row)"),
        "{last}"
    );
    assert_eq!(last["per_watch"][0]["busy_runs"], 4, "{last}");
    let o = check_later(&cfg, "+35m", &["--format", "json"]).expect("faketime");
    assert_exit(&o, 75);
    let (_, summary) = json_lines(&o);
    assert!(
        summary["warnings"]
            .to_string()
            .contains(&format!("held by connection {}", id[0])),
        "{summary}"
    );
    let o = check_later(&cfg, "+85m", &[]).expect("faketime");
    assert!(
        stderr(&o).contains("not checked for 1h25m (6 runs in a row)"),
        "an hour after it was said: said again: {}{}",
        stderr(&o),
        std::fs::read_to_string(sb.state_dir().join("reminders.json")).unwrap_or_default()
    );
    // The squatter lets go: checked, the gauge back to 0, the streak over.
    drop(squatter);
    let o = check_later(&cfg, "+90m", &[]).expect("faketime");
    assert_exit(&o, 0);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    assert_eq!(
        busy_gauge(&metrics),
        "selfheal_watch_busy{watch=\"full-sync\"} 0"
    );
    let state = std::fs::read_to_string(sb.state_dir().join("run-state.json")).expect("state");
    let state: serde_json::Value = serde_json::from_str(&state).expect("json");
    assert_eq!(state["busy"], serde_json::json!([]), "{state}");
}

// ---------------------------------------------------------------------------------------
// 16. The journal names a database reached over the socket

#[test]
fn a_change_made_over_the_socket_journals_the_database_on_localhost() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, worker) VALUES \
         (1, 'running', NOW() - INTERVAL 3000 SECOND, '{}')",
        gone_worker()
    ));
    let server = MysqlDb::server_url();
    let Some((_, query)) = server.split_once('?') else {
        eprintln!("SKIPPED: the test server is not reached over a socket: {server}");
        return;
    };
    // A URL that names no host: the socket (or an option file) says where.
    let sb = Sandbox::new();
    let cfg = sb.config(&format!("mysql://root@/{}?{query}", db.name), &watch(&sb));
    let o = check_now(&cfg, &[]);
    assert_exit(&o, 0);
    let journal = sb.journal();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(
        journal[0]["database"],
        serde_json::json!({"scheme": "mysql", "host": "localhost", "name": db.name}),
        "{}",
        journal[0]
    );
}
