//! The breaker and the database-vs-host clock check, end to end: a mass heartbeat-only
//! "death" (every heartbeat file's mtime set back two hours) is held back while conclusive
//! deaths go through; a host clock three hours off (the real binary under libfaketime,
//! against MariaDB's correct clock) holds heartbeat-only deaths; `--force` acts on both.

use std::process::{Command, Output};

use crate::common::*;

/// The watch with an owner column and per-row lock files. `confirm = 1`: the breaker and
/// the clock hold are about what a run does once it judges a row, not about when.
fn watch(sb: &Sandbox) -> String {
    sb.watch(&format!(
        "owner_column = \"worker\"\nlock_file = \"{}\"\nconfirm = 1\n",
        sb.lock_template()
    ))
}

/// Four rows 3 h into a 4 h cap whose heartbeat files all read 2 h old (a clock or NFS
/// fault, not four crashes), plus two conclusive deaths: row 5's owner pid is gone, row
/// 6's lock file is there and nobody holds it.
fn mass_death(sb: &Sandbox, db: &SqliteDb) {
    for id in 1..=6 {
        db.insert(id, "running", 3 * HOUR);
        sb.heartbeat(id, secs(2 * HOUR));
    }
    db.conn()
        .execute(
            "UPDATE sync_log SET worker = ?1 WHERE id = 5",
            [format!("{}:{}", hostname(), exited_pid())],
        )
        .expect("owner");
    std::fs::write(sb.lock_path(6), "").expect("lock file");
}

#[test]
fn the_breaker_holds_back_a_mass_heartbeat_only_death_and_lets_conclusive_deaths_through() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    mass_death(&sb, &db);
    let cfg = sb.config(&db.url(), &watch(&sb));

    // --explain: every row, the hold, and what decided.
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        stderr(&o).contains(
            "selfheal: warning: watch full-sync: breaker: 4 of 6 running rows would be marked \
             dead on heartbeat staleness alone; nothing is marked on heartbeat alone"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        out.matches("a real run would leave it and report it (held back by the breaker")
            .count(),
        4,
        "{out}"
    );
    assert!(
        out.contains("because the owner pid no longer exists"),
        "{out}"
    );
    assert!(
        out.contains(
            "because nobody holds the job's lock (a try-lock got it), and the row is older \
             than stale_after"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("a real run would set status to 'error' (mark_dead)")
            .count(),
        2,
        "{out}"
    );

    // JSON, dry run: the same, machine-readable.
    let o = check(&cfg, &["--dry-run", "--format", "json"]);
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    for id in 1..=4 {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "dead", "{r}");
        assert_eq!(r["conclusive"], false, "{r}");
        assert_eq!(r["held"], "breaker", "{r}");
        assert_eq!(r["action"], "none", "{r}");
        assert_eq!(r["attention"], true, "{r}");
    }
    for id in [5, 6] {
        let r = row(&rows, id);
        assert_eq!(r["conclusive"], true, "{r}");
        assert_eq!(r["held"], serde_json::Value::Null, "{r}");
        assert_eq!(r["action"], "mark_dead", "{r}");
    }
    assert_eq!(summary["breaker_tripped"], serde_json::json!(["full-sync"]));
    assert_eq!(summary["attention"], 4);

    // The real run: text for cron, the conclusive deaths marked, nothing else.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    for id in 1..=4 {
        assert!(
            out.contains(&format!(
                "full-sync id={id}: needs a person (dead): held back by the breaker"
            )),
            "{out}"
        );
    }
    for id in [5, 6] {
        assert!(
            out.contains(&format!(
                "full-sync id={id}: set status to 'error' (mark_dead)"
            )),
            "{out}"
        );
    }
    let statuses: Vec<String> = db.dump().into_iter().map(|r| r.1).collect();
    assert_eq!(
        statuses,
        ["running", "running", "running", "running", "error", "error"]
    );
    assert_eq!(sb.journal().len(), 2);
    assert!(sb.lock_path(6).exists(), "the job's lock file stays");

    // An operator who has looked: --force marks them.
    let o = check(&cfg, &["--force", "--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["applied"] == true), "{rows:?}");
    assert_eq!(summary["breaker_tripped"], serde_json::json!(["full-sync"]));
    assert!(
        summary["warnings"][0]
            .as_str()
            .unwrap_or("")
            .contains("--force: marking them anyway"),
        "{summary}"
    );
    assert!(db.dump().iter().all(|r| r.1 == "error"));
    assert_eq!(sb.journal().len(), 6);
}

#[test]
fn below_three_or_at_half_the_breaker_stays_quiet() {
    for (stale, fresh) in [(2, 0), (3, 3)] {
        let sb = Sandbox::new();
        let db = SqliteDb::new(&sb);
        for id in 1..=(stale + fresh) {
            db.insert(id, "running", 3 * HOUR);
            let age = if id <= stale { 2 * HOUR } else { 20 };
            sb.heartbeat(id, secs(age));
        }
        let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (_, summary) = json_lines(&o);
        assert_eq!(summary["breaker_tripped"], serde_json::json!([]));
        assert_eq!(summary["changed"], stale, "{stale} of {}", stale + fresh);
    }
}

// ---------------------------------------------------------------------------------------
// Database clock vs host clock

/// The real binary with its host clock three hours ahead (libfaketime): the database's
/// clock stays right, heartbeat file mtimes are real, so every heartbeat reads 3 h old.
fn check_3h_ahead(cfg: &std::path::Path, args: &[&str]) -> Output {
    let mut c = Command::new("faketime");
    c.args(["-f", "+3h"])
        .arg(bin())
        .arg("check")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env_remove("MYSQL_PWD")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        // Only the wall clock is off: file times and monotonic timers stay real.
        .env("NO_FAKE_STAT", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    c.output().expect("faketime")
}

#[test]
fn a_host_clock_hours_off_holds_heartbeat_only_deaths_but_not_conclusive_ones() {
    let mut db = mysql_or_skip!();
    if !have_tool("faketime", &["-f", "+0", "true"], "faketime (libfaketime)") {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    for id in 1..=3 {
        db.insert(id, "running", 600);
        sb.heartbeat(id, secs(5));
    }
    db.exec(&format!(
        "UPDATE sync_log SET worker = '{}:{}' WHERE id = 3",
        hostname(),
        exited_pid()
    ));
    std::fs::write(sb.lock_path(2), "").expect("lock file");
    let cfg = sb.config(&db.url, &watch(&sb));

    // With the right clock every row is judged on its own evidence.
    let o = check(&cfg, &["--dry-run", "--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(summary["clock_skew_exceeded"], false);
    assert_eq!(row(&rows, 1)["verdict"], "alive");

    // Three hours ahead: reported in text…
    let o = check_3h_ahead(&cfg, &["--explain"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    let skew: i64 = err
        .split("the database clock is ")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no skew in: {err}"));
    assert!((10_790..=10_810).contains(&skew), "{err}");
    assert!(
        err.contains("s behind the host clock (tolerance 60s); acting only on conclusive evidence"),
        "{err}"
    );
    let out = stdout(&o);
    assert!(
        out.contains("held back: the database and host clocks disagree"),
        "{out}"
    );

    // …and in JSON, and the real run marks only the conclusive deaths.
    let o = check_3h_ahead(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    assert_eq!(summary["clock_skew_exceeded"], true);
    let s = summary["clock_skew_s"].as_i64().unwrap_or(0);
    assert!((-10_810..=-10_790).contains(&s), "{summary}");
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "dead");
    // On the skewed host clock the file reads 3 h old, older than the 10-minute row: as
    // far as this row goes, it has no heartbeat at all.
    assert_eq!(r["heartbeat"], "before_row", "{r}");
    assert_eq!(r["heartbeat_age_s"], serde_json::Value::Null, "{r}");
    assert_eq!(r["held"], "clock_skew");
    assert_eq!(r["applied"], false);
    assert_eq!(r["attention"], true);
    assert_eq!(
        (
            row(&rows, 2)["lock"].as_str(),
            row(&rows, 2)["applied"].as_bool()
        ),
        (Some("free"), Some(true))
    );
    assert_eq!(
        (
            row(&rows, 3)["owner"].as_str(),
            row(&rows, 3)["applied"].as_bool()
        ),
        (Some("dead"), Some(true))
    );
    assert_eq!(db.row(1).0, "running");
    assert_eq!(db.row(2).0, "error");
    assert_eq!(db.row(3).0, "error");

    // --force: the operator has looked.
    let o = check_3h_ahead(&cfg, &["--force"]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("--force: acting on all evidence anyway"),
        "{}",
        stderr(&o)
    );
    let (status, ended, msg) = db.row(1);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(msg.contains(", no heartbeat"), "{msg}");
}
