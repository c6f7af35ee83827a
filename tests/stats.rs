//! `selfheal stats` and the `max_age` warning of `check`, end to end on a real MariaDB and
//! real SQLite files: exact percentiles over thousands of finished rows of known durations,
//! selfheal's own false positives found through its message and through its journal, and the
//! configuration of the seed incident (a 30-minute cap over 2-hour runs) called out.

use std::path::Path;
use std::process::Output;

use serde_json::json;

use crate::common::*;

fn stats(cfg: &Path, args: &[&str]) -> Output {
    selfheal()
        .arg("stats")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .expect("run selfheal stats")
}

/// The per-watch objects and the summary of `stats --format json`.
fn stats_json(cfg: &Path, code: i32) -> (Vec<serde_json::Value>, serde_json::Value) {
    let o = stats(cfg, &["--format", "json"]);
    assert_exit(&o, code);
    json_lines(&o)
}

/// Durations 60, 62, …, 6058 s (3000 runs), inserted in a scrambled order.
fn known_durations() -> Vec<u64> {
    let n = 3000u64;
    (0..n).map(|i| 60 + 2 * ((i * 7) % n)).collect()
}

// Nearest rank over 60 + 2k, k = 0..2999: p50 is the 1500th value, p95 the 2850th, p99 the
// 2970th.
const P50: u64 = 60 + 2 * 1499;
const P95: u64 = 60 + 2 * 2849;
const P99: u64 = 60 + 2 * 2969;
const MAX: u64 = 60 + 2 * 2999;

#[test]
fn thousands_of_finished_rows_give_exact_percentiles_mariadb() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let mut values = Vec::new();
    for (i, d) in known_durations().into_iter().enumerate() {
        values.push(format!(
            "('done', '2026-01-01' + INTERVAL {i} MINUTE, '2026-01-01' + INTERVAL {i} MINUTE + INTERVAL {d} SECOND)"
        ));
    }
    // Rows that must not count: the job's own failures (not a success value here), rows
    // selfheal marked dead, rows still running or queued, rows with no end.
    for i in 0..200 {
        values.push(format!(
            "('failed', '2026-02-01' + INTERVAL {i} MINUTE, '2026-02-01' + INTERVAL {i} MINUTE + INTERVAL 9 HOUR)"
        ));
        values.push(format!(
            "('error', '2026-02-01' + INTERVAL {i} MINUTE, '2026-02-01' + INTERVAL {i} MINUTE + INTERVAL 8 HOUR)"
        ));
    }
    for i in 0..30 {
        values.push(format!("('running', NOW() - INTERVAL {i} MINUTE, NULL)"));
        values.push("('pending', NULL, NULL)".to_string());
        values.push(format!(
            "('done', '2026-03-01' + INTERVAL {i} MINUTE, NULL)"
        ));
    }
    for chunk in values.chunks(1000) {
        db.exec(&format!(
            "INSERT INTO sync_log (status, start_time, end_time) VALUES {}",
            chunk.join(", ")
        ));
    }
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &sb.watch("success_values = [\"done\"]\n"));
    let before = db.dump();
    let (watches, summary) = stats_json(&cfg, 0);
    assert_eq!(watches.len(), 1);
    let w = &watches[0];
    assert_eq!(w["watch"], "full-sync");
    assert_eq!(w["finished"], 3400, "not running, start and end set: {w}");
    assert_eq!(w["successful"], 3000);
    let rt = &w["runtime_s"];
    assert_eq!(rt["p50"], P50, "{rt}");
    assert_eq!(rt["p95"], P95, "{rt}");
    assert_eq!(rt["p99"], P99, "{rt}");
    assert_eq!(rt["max"], MAX, "{rt}");
    assert_eq!(rt["min"], 60, "{rt}");
    assert_eq!(w["false_positives"], 0);
    assert_eq!(w["max_age_too_low"], false, "4h is above 1.5 x 1h40m58s");
    // 1.5 x 6058 = 9087 s; 2 x p99 (5998) = 11996 s → rounded up to 3h30m.
    assert_eq!(w["suggested_max_age"]["secs"], 12_600, "{w}");
    assert_eq!(w["suggested_max_age"]["value"], "3h 30m");
    assert_eq!(w["suggested_stale_after"]["secs"], 300);
    assert_eq!(summary["false_positives"], 0);
    assert_eq!(db.dump(), before, "stats writes nothing");

    let o = stats(&cfg, &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for part in [
        "watch full-sync (table sync_log, stale_after 5m, max_age 4h)",
        "finished rows     3400 (3000 ended well: done 3000)",
        "p50 50m58s  p95 1h35m  p99 1h39m  max 1h40m (id=",
        "max_age = \"3h 30m\"",
        "stale_after = \"5m\"",
    ] {
        assert!(out.contains(part), "{part:?} in\n{out}");
    }
    assert!(!sb.state_dir().exists(), "stats writes no state either");
}

#[test]
fn percentiles_and_the_default_success_rule_on_sqlite_with_epoch_times() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let mut c = db.conn();
    let tx = c.transaction().expect("tx");
    for (i, d) in known_durations().into_iter().enumerate() {
        // Successful statuses of the job's own: by default anything selfheal does not write.
        let status = if i % 2 == 0 { "done" } else { "skipped" };
        let (i, d) = (
            i64::try_from(i).expect("small"),
            i64::try_from(d).expect("small"),
        );
        let start = 1_767_225_600 + i * 60;
        tx.execute(
            "INSERT INTO sync_log (status, start_time, end_time) VALUES (?1, ?2, ?3)",
            rusqlite::params![status, start, start + d],
        )
        .expect("insert");
    }
    for (status, end) in [("error", 99_999i64), ("pending", 99_999), ("running", 0)] {
        tx.execute(
            "INSERT INTO sync_log (status, start_time, end_time) VALUES (?1, 1767225600, ?2)",
            rusqlite::params![status, 1_767_225_600 + end],
        )
        .expect("insert");
    }
    // Unreadable times are counted, not guessed.
    tx.execute(
        "INSERT INTO sync_log (status, start_time, end_time) VALUES ('done', 'soon', 1767225600)",
        [],
    )
    .expect("insert");
    tx.commit().expect("commit");
    drop(c);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 3\n"),
    );
    let (watches, _) = stats_json(&cfg, 0);
    let w = &watches[0];
    assert_eq!(w["successful"], 3000, "{w}");
    assert_eq!(
        w["successful_by_status"],
        serde_json::json!({"done": 1500, "skipped": 1500})
    );
    assert_eq!(w["success_values_default"], true);
    assert_eq!(w["finished"], 3003, "{w}");
    assert_eq!(w["unreadable"], 1, "{w}");
    assert!(
        w["unreadable_example"]
            .as_str()
            .is_some_and(|e| e.contains("soon")),
        "{w}"
    );
    let rt = &w["runtime_s"];
    assert_eq!(
        (
            rt["p50"].as_u64(),
            rt["p95"].as_u64(),
            rt["p99"].as_u64(),
            rt["max"].as_u64()
        ),
        (Some(P50), Some(P95), Some(P99), Some(MAX))
    );
}

/// Marks rows 2 and 3 dead with real checks (two cron runs: the second confirms what the
/// first found); then their workers, alive after all, finish them: row 2 keeps selfheal's
/// message, row 3's worker clears it.
fn marked_then_done(db: &mut MysqlDb, sb: &Sandbox, cfg: &Path) {
    db.insert(2, "running", 50 * MIN);
    db.insert(3, "running", 50 * MIN);
    db.insert(4, "running", 10 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    sb.heartbeat(3, secs(40 * MIN));
    sb.heartbeat(4, secs(20));
    for _ in 0..2 {
        next_cron_run(sb);
        let o = check(cfg, &[]);
        assert_exit(&o, 0);
    }
    assert_eq!(db.row(2).0, "error");
    assert_eq!(db.row(3).0, "error");
    // Ends measured from the start, not from NOW(): a second that passes between the insert
    // and this update must not change the runtimes.
    db.exec(
        "UPDATE sync_log SET status = 'done', end_time = start_time + INTERVAL 55 MINUTE \
         WHERE id = 2",
    );
    db.exec(
        "UPDATE sync_log SET status = 'done', end_time = start_time + INTERVAL 59 MINUTE, \
         error_msg = '' WHERE id = 3",
    );
    // Row 4 was never touched and ends normally.
    db.exec("UPDATE sync_log SET status = 'done', end_time = NOW() WHERE id = 4");
}

#[test]
fn a_row_selfheal_marked_that_its_worker_then_finished_is_a_false_positive_mariadb() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &sb.watch(""));
    marked_then_done(&mut db, &sb, &cfg);

    // With the journal: both, each matched on the start value selfheal observed.
    let (watches, summary) = stats_json(&cfg, 1);
    let w = &watches[0];
    assert_eq!(w["false_positives"], 2, "{w}");
    assert_eq!(summary["false_positives"], 2);
    let rows = w["false_positive_rows"].as_array().expect("rows");
    let ids: Vec<i64> = rows.iter().filter_map(|r| r["id"].as_i64()).collect();
    assert_eq!(ids, [2, 3]);
    for r in rows {
        assert_eq!(r["source"], "journal", "{r}");
        assert_eq!(r["verdict"], "dead", "{r}");
        assert_eq!(r["set_to"], "error", "{r}");
        assert_eq!(r["status"], "done", "{r}");
        assert!(r["marked_at"].is_string(), "{r}");
    }
    assert_eq!(rows[0]["heartbeat_age_s"], 47 * MIN);
    assert_eq!(rows[0]["runtime_s"], 55 * MIN);
    // A live run went 47 minutes without a beat: twice that (1h34m), rounded up.
    assert_eq!(w["suggested_stale_after"]["secs"], 6300);
    assert!(
        w["suggested_stale_after"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("47m old finished anyway")),
        "{w}"
    );
    assert_eq!(w["false_positives_by_verdict"]["dead"], 2);

    let o = stats(&cfg, &[]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("false positives   2 rows selfheal marked finished anyway (dead: 2)"),
        "{out}"
    );
    assert!(
        out.contains("id=2 done after 55m: marked dead on a heartbeat 47m old at "),
        "{out}"
    );

    // Without the journal (lost, or another host's): the message prefix still finds row
    // 2; row 3's worker wiped the only trace.
    std::fs::remove_file(sb.state_dir().join("journal.jsonl")).expect("remove journal");
    let (watches, _) = stats_json(&cfg, 1);
    let w = &watches[0];
    assert_eq!(w["false_positives"], 1, "{w}");
    let r = &w["false_positive_rows"][0];
    assert_eq!(
        (r["id"].as_i64(), r["source"].as_str()),
        (Some(2), Some("message"))
    );
    assert_eq!(r["heartbeat_age_s"], 47 * MIN);
}

#[test]
fn a_retry_that_succeeded_is_not_a_false_positive_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(5, "running", 50 * MIN);
    sb.heartbeat(5, secs(47 * MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch("retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 3\n"),
    );
    // Two cron runs: the second confirms the silence the first found.
    for _ in 0..2 {
        next_cron_run(&sb);
        let o = check(&cfg, &[]);
        assert_exit(&o, 0);
    }
    assert_eq!(db.status(5), "pending");
    // The queue runs it again from the start; it takes 10 minutes and succeeds, without
    // clearing the message.
    db.conn()
        .execute(
            "UPDATE sync_log SET status = 'done', start_time = datetime('now', '-10 minutes'), \
             end_time = datetime('now') WHERE id = 5",
            [],
        )
        .expect("rerun");
    let (watches, _) = stats_json(&cfg, 0);
    let w = &watches[0];
    assert_eq!(
        (
            w["false_positives"].as_u64(),
            w["rerun_after_mark"].as_u64()
        ),
        (Some(0), Some(1)),
        "{w}"
    );
    // Without the journal the message alone tells: the run selfheal marked was already
    // 50 minutes old, this one took 10 — a later run.
    std::fs::remove_file(sb.state_dir().join("journal.jsonl")).expect("remove journal");
    let (watches, _) = stats_json(&cfg, 0);
    assert_eq!(watches[0]["false_positives"], 0, "{}", watches[0]);
    assert_eq!(watches[0]["rerun_after_mark"], 1);
}

// ---------------------------------------------------------------------------------------
// The max_age warning of check

/// 20 runs of 2 hours that ended well (one, id 107, of 2h10m), and one live run 10
/// minutes in.
fn two_hour_history(db: &mut MysqlDb, sb: &Sandbox) {
    for i in 0..20 {
        db.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
             ({}, 'done', NOW() - INTERVAL {} HOUR, NOW() - INTERVAL {} HOUR + INTERVAL {} MINUTE)",
            100 + i,
            3 * i + 3,
            3 * i + 3,
            if i == 7 { 130 } else { 120 }
        ));
    }
    db.insert(200, "running", 10 * MIN);
    sb.heartbeat(200, secs(20));
}

#[test]
fn seed_incident_a_30_minute_max_age_over_2_hour_runs_is_called_out_mariadb() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    two_hour_history(&mut db, &sb);
    let cfg = sb.config(
        &db.url,
        &sb.watch("")
            .replace("max_age = \"4h\"", "max_age = \"30m\""),
    );
    let before = db.dump();

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "", "the rows themselves are fine");
    let err = stderr(&o);
    assert_eq!(
        err.matches("selfheal: warning: ").count(),
        1,
        "once per run: {err}"
    );
    assert!(
        err.contains(
            "watch full-sync: max_age 30m is below 1.5× the longest recent run that ended well \
             (2h10m, id=107)"
        ) && err.contains("at least 3h 15m"),
        "{err}"
    );
    assert_eq!(db.dump(), before);

    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert_eq!(
        summary["max_age_too_low"],
        serde_json::json!([{"watch": "full-sync", "max_age_s": 1800, "longest_run_s": 7800,
                            "longest_run_id": 107, "runs_seen": 20,
                            "max_age_at_least_s": 11700}])
    );
    let warnings = summary["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{summary}");

    // Dry runs and --explain say it too.
    for args in [&["--explain"][..], &["--dry-run"]] {
        let o = check(&cfg, args);
        assert_exit(&o, 0);
        assert_eq!(
            stderr(&o).matches("max_age 30m is below").count(),
            1,
            "{args:?}"
        );
    }

    // stats agrees, and exits 1: a person must change the configuration.
    let (watches, _) = stats_json(&cfg, 1);
    assert_eq!(watches[0]["max_age_too_low"], true);
    // 2x p99 (2h10m) = 4h20m, rounded up to 4h30m.
    assert_eq!(watches[0]["suggested_max_age"]["secs"], 16_200);

    // With a cap that lets 2-hour runs live: silence.
    let cfg = sb.config(&db.url, &sb.watch(""));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");
    let (watches, _) = stats_json(&cfg, 0);
    assert_eq!(watches[0]["max_age_too_low"], false);

    // A 3-hour run ends: the runs read less than 15 minutes ago are what the next run
    // measures; once that read is 15 minutes old, the rows are read again.
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (300, 'done', NOW() - INTERVAL 4 HOUR, NOW() - INTERVAL 1 HOUR)",
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "", "the kept read");
    sb.age_recent_reads(15 * 60);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains(
            "max_age 4h is below 1.5× the longest recent run that ended well (3h0m, id=300)"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_max_age_warning_looks_only_at_the_latest_rows_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let mut c = db.conn();
    let tx = c.transaction().expect("tx");
    // An old 3-hour run, then 1000 newer 10-minute runs: the old one is beyond the window.
    tx.execute(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (1, 'done', datetime('now', '-30 days'), datetime('now', '-30 days', '+3 hours'))",
        [],
    )
    .expect("insert");
    for i in 0..1000 {
        tx.execute(
            "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
             (?1, 'done', datetime('now', '-20 days'), datetime('now', '-20 days', '+10 minutes'))",
            [i + 2],
        )
        .expect("insert");
    }
    tx.commit().expect("commit");
    drop(c);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("").replace("max_age = \"4h\"", "max_age = \"1h\""),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(
        stderr(&o),
        "",
        "the 3-hour run is not among the latest 1000 rows"
    );
    // stats reads the whole history and sees it.
    let (watches, _) = stats_json(&cfg, 1);
    assert_eq!(watches[0]["runtime_s"]["max"], 3 * 3600);
    assert_eq!(watches[0]["max_age_too_low"], true);

    // One more long run among the latest rows: once the last read is 15 minutes old, check
    // reads them again and sees it.
    sb.age_recent_reads(15 * 60);
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
             (5000, 'done', datetime('now', '-1 days'), datetime('now', '-1 days', '+50 minutes'))",
            [],
        )
        .expect("insert");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains(
            "max_age 1h is below 1.5× the longest recent run that ended well (50m, id=5000)"
        ),
        "{}",
        stderr(&o)
    );
}

/// A run of `minutes` that ended well a day ago, in the SQLite table.
fn finished_run(db: &SqliteDb, id: i64, minutes: i64) {
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
             (?1, 'done', datetime('now', '-1 days'), datetime('now', '-1 days', ?2))",
            rusqlite::params![id, format!("+{minutes} minutes")],
        )
        .expect("insert");
}

/// The `max_age_too_low` objects of a `check --format json` (`args` added).
fn max_age_too_low(cfg: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let o = check(cfg, &all);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    summary["max_age_too_low"].clone()
}

/// The `longest_run_id` of the one `max_age_too_low` object.
fn longest_run_id(warnings: &serde_json::Value) -> i64 {
    let a = warnings.as_array().expect("array");
    assert_eq!(a.len(), 1, "{warnings}");
    a[0]["longest_run_id"].as_i64().expect("an id")
}

/// `run-state.json`, parsed.
fn run_state(sb: &Sandbox) -> serde_json::Value {
    let text = std::fs::read_to_string(sb.state_dir().join("run-state.json")).expect("read");
    serde_json::from_str(&text).expect("JSON")
}

/// The rows the `max_age` check reads are read at most once per 15 minutes: a real run keeps
/// what it found in `run-state.json`, and the runs within that window (dry runs too) warn
/// from it — the longest run as it was read — whatever the rows became since; the first run
/// after the window reads them again, and keeps that.
#[test]
fn the_max_age_check_reads_the_latest_rows_once_per_15_minutes_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for (id, minutes) in [(1, 20), (2, 130), (3, 25)] {
        finished_run(&db, id, minutes);
    }
    let cfg = sb.config(
        &db.url(),
        &sb.watch("").replace("max_age = \"4h\"", "max_age = \"1h\""),
    );
    let before = std::time::SystemTime::now();
    let w = max_age_too_low(&cfg, &[]);
    assert_eq!(
        (longest_run_id(&w), &w[0]["longest_run_s"]),
        (2, &json!(7_800))
    );
    let state = run_state(&sb);
    let kept = &state["recent"][0];
    assert_eq!(
        (&kept["watch"], &kept["runs"], &kept["longest"]),
        (
            &json!("full-sync"),
            &json!(3),
            &json!({"secs": 7_800, "id": 2})
        ),
        "{state}"
    );
    let read_at = kept["read_at"].as_i64().expect("read_at");
    let t0 = before
        .duration_since(std::time::UNIX_EPOCH)
        .expect("epoch")
        .as_secs();
    assert!(
        (i64::try_from(t0).expect("t0") - 1..=i64::try_from(t0).expect("t0") + 60)
            .contains(&read_at),
        "{read_at} {t0}"
    );
    let file = std::fs::read(sb.state_dir().join("run-state.json")).expect("read");

    // The 2h10m run turns out to have taken 10 minutes, and a 3-hour run ends.
    db.conn()
        .execute(
            "UPDATE sync_log SET end_time = datetime(start_time, '+10 minutes') WHERE id = 2",
            [],
        )
        .expect("update");
    finished_run(&db, 4, 180);
    // Within the window: the kept read, by real and dry runs alike; nothing written.
    let w = max_age_too_low(&cfg, &[]);
    assert_eq!((longest_run_id(&w), &w[0]["runs_seen"]), (2, &json!(3)));
    assert_eq!(longest_run_id(&max_age_too_low(&cfg, &["--dry-run"])), 2);
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("(2h10m, id=2)"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(sb.state_dir().join("run-state.json")).expect("read"),
        file,
        "a run that used the kept read leaves the file as it was"
    );

    // 15 minutes after the read: read again, and kept.
    sb.age_recent_reads(15 * 60);
    let w = max_age_too_low(&cfg, &[]);
    assert_eq!(
        (
            longest_run_id(&w),
            &w[0]["longest_run_s"],
            &w[0]["runs_seen"]
        ),
        (4, &json!(10_800), &json!(4))
    );
    let state = run_state(&sb);
    assert_eq!(state["recent"].as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(
        state["recent"][0]["longest"],
        json!({"secs": 10_800, "id": 4})
    );
    assert!(state["recent"][0]["read_at"].as_i64() >= Some(read_at));

    // A read kept "later" than now (a run under a wrong clock) is read again too.
    sb.age_recent_reads(-3_600);
    finished_run(&db, 5, 200);
    assert_eq!(longest_run_id(&max_age_too_low(&cfg, &[])), 5);
}

/// The warning is made every run from the kept runs and the `max_age` of this run: raising
/// `max_age` silences it at once, even while the read is fresh (and though a longer run
/// ended since, which only the next read will see).
#[test]
fn raising_max_age_silences_the_warning_at_once_with_a_fresh_read_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for (id, minutes) in [(1, 20), (2, 130)] {
        finished_run(&db, id, minutes);
    }
    let low = || {
        sb.config(
            &db.url(),
            &sb.watch("").replace("max_age = \"4h\"", "max_age = \"1h\""),
        )
    };
    let raised = || sb.config(&db.url(), &sb.watch(""));
    let o = check(&low(), &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("max_age 1h is below 1.5× the longest recent run that ended well"),
        "{}",
        stderr(&o)
    );
    // 4h lets the 2h10m run live (3h15m), not a 3-hour one (4h30m).
    finished_run(&db, 3, 180);
    let cfg = raised();
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    assert_eq!(max_age_too_low(&cfg, &[]), json!([]));
    assert_eq!(max_age_too_low(&cfg, &["--dry-run"]), json!([]));
    // Lowered again: said again, from the same kept read.
    assert_eq!(longest_run_id(&max_age_too_low(&low(), &[])), 2);
    // Once read again, the 3-hour run is what 4h is measured against.
    sb.age_recent_reads(15 * 60);
    assert_eq!(longest_run_id(&max_age_too_low(&raised(), &[])), 3);
}

/// Dry runs and `--explain` read the rows themselves when no fresh read is kept, and write
/// no `run-state.json` (docs/design.md: dry runs write nothing), nor change one a real run
/// left.
#[test]
fn a_dry_run_keeps_no_read_of_recent_runs_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    finished_run(&db, 1, 130);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("").replace("max_age = \"4h\"", "max_age = \"1h\""),
    );
    for args in [&["--dry-run"][..], &["--explain"]] {
        let o = check(&cfg, args);
        assert_exit(&o, 0);
        assert!(stderr(&o).contains("(2h10m, id=1)"), "{}", stderr(&o));
        assert!(!sb.state_dir().exists(), "{args:?}");
    }
    std::fs::create_dir(sb.state_dir()).expect("dir");
    assert_eq!(longest_run_id(&max_age_too_low(&cfg, &["--dry-run"])), 1);
    assert!(!sb.state_dir().join("run-state.json").exists());

    // A stale read a real run kept: a dry run reads the rows again and leaves the file be.
    assert_eq!(longest_run_id(&max_age_too_low(&cfg, &[])), 1);
    sb.age_recent_reads(15 * 60);
    let file = std::fs::read(sb.state_dir().join("run-state.json")).expect("read");
    finished_run(&db, 2, 150);
    for args in [&["--dry-run"][..], &["--explain"]] {
        assert_eq!(longest_run_id(&max_age_too_low(&cfg, args)), 2, "{args:?}");
        assert_eq!(
            std::fs::read(sb.state_dir().join("run-state.json")).expect("read"),
            file,
            "{args:?}"
        );
    }
}

#[test]
fn stats_command_line() {
    let o = selfheal().arg("--help").output().expect("run");
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("stats"), "{}", stdout(&o));
    let o = selfheal().args(["stats", "--help"]).output().expect("run");
    assert_exit(&o, 0);
    for s in ["--config", "--watch", "--format"] {
        assert!(stdout(&o).contains(s), "{s}");
    }

    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // A watch without ended_column cannot be measured: said so, not an error.
    let watch = sb.watch("").replace("ended_column = \"end_time\"\n", "");
    let cfg = sb.config(&db.url(), &watch);
    let o = stats(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("skipped: no ended_column"),
        "{}",
        stdout(&o)
    );
    let o = stats(&cfg, &["--watch", "nope"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--watch nope: no such watch"),
        "{}",
        stderr(&o)
    );
    let cfg = sb.config(&db.url(), &sb.watch("").replace("sync_log", "missing"));
    let o = stats(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("table missing does not exist"),
        "{}",
        stderr(&o)
    );
    // No finished row yet: nothing to suggest, no failure.
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = stats(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("no run ended well yet"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn success_values_decide_which_runs_the_max_age_check_counts() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // The job's own failures run 3 hours (they hang on a remote and give up); its
    // successes take 20 minutes.
    for (id, status, minutes) in [(1, "failed", 180), (2, "done", 20), (3, "done", 21)] {
        db.conn()
            .execute(
                "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
                 (?1, ?2, datetime('now', '-1 days'), datetime('now', '-1 days', ?3))",
                rusqlite::params![id, status, format!("+{minutes} minutes")],
            )
            .expect("insert");
    }
    let flags = |extra: &[&str]| {
        let mut c = selfheal();
        c.args(["check", "--db", &db.url(), "--table", "sync_log"])
            .args([
                "--started-column",
                "start_time",
                "--ended-column",
                "end_time",
            ])
            .args(["--heartbeat-file", &sb.heartbeat_template()])
            .args(["--stale-after", "5m", "--max-age", "1h"])
            .arg("--config")
            .arg(sb.path("absent.toml"))
            .args(extra);
        c
    };
    std::fs::write(
        sb.path("absent.toml"),
        format!(
            "[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n",
            sb.run_lock().display(),
            sb.state_dir().display()
        ),
    )
    .expect("config");
    // By default the 3-hour failures count as runs the cap must let live.
    let o = flags(&[]).output().expect("run");
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains(
            "max_age 1h is below 1.5× the longest recent run that ended well (3h0m, id=1)"
        ),
        "{}",
        stderr(&o)
    );
    // Told which status means success, the 21-minute runs are the measure: 1h is enough.
    let o = flags(&["--success-value", "done"]).output().expect("run");
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");
}
