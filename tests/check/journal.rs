//! The retry budget across runs, and what a run leaves in the state directory, end to end on
//! real SQLite files and a real MariaDB: pending → pending → manual (or dead) with the
//! attempts count surviving the worker's re-claims; every change journaled with its evidence;
//! a journal that cannot be written stops the run; dry runs leave no trace; damaged journal
//! lines are skipped and counted, and `stats` over a large damaged journal stays small; the
//! journal rotates, and a stopped run's record is found by change id in the rotated
//! generation.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use mysql::prelude::Queryable;

/// The retry budget; `confirm = 1`: these tests are about what happens once a row is
/// judged dead, not about when.
const RETRY: &str =
    "retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 2\nconfirm = 1\n";

fn sqlite_row(db: &SqliteDb, id: i64) -> (String, i64, String) {
    db.conn()
        .query_row(
            "SELECT status, attempts, error_msg FROM sync_log WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("row")
}

/// The worker takes the row again, as a queue does: running, with a new start time.
fn sqlite_reclaim(db: &SqliteDb, id: i64, age: u64) {
    db.conn()
        .execute(
            "UPDATE sync_log SET status = 'running', start_time = datetime('now', ?2), \
             end_time = NULL WHERE id = ?1",
            rusqlite::params![id, format!("-{age} seconds")],
        )
        .expect("reclaim");
}

#[test]
fn the_retry_budget_walks_pending_pending_manual_across_runs_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!("{RETRY}manual_value = \"wait_manual\"\n")),
    );

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("full-sync id=2: set status to 'pending' (mark_retry)"),
        "{}",
        stdout(&o)
    );
    let (status, attempts, msg) = sqlite_row(&db, 2);
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    assert!(msg.starts_with("self-heal: dead: "), "{msg}");

    // A worker claims it again and dies again: same row, new start, stale heartbeat.
    sqlite_reclaim(&db, 2, 40 * MIN);
    sb.heartbeat(2, secs(35 * MIN));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(
        sqlite_row(&db, 2).0,
        "pending",
        "attempts 1 < 2: back to the queue"
    );
    assert_eq!(
        sqlite_row(&db, 2).1,
        2,
        "the count survived the re-claim and rose by one"
    );

    sqlite_reclaim(&db, 2, 30 * MIN);
    sb.heartbeat(2, secs(25 * MIN));
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("set status to 'wait_manual' (mark_manual, a person must look)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        (sqlite_row(&db, 2).0.as_str(), sqlite_row(&db, 2).1),
        ("wait_manual", 2),
        "budget spent: to a person; a manual mark does not count as an attempt"
    );

    // One journal entry per change, each naming the run it matched.
    let j = sb.journal();
    let actions: Vec<&str> = j
        .iter()
        .map(|e| e["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(actions, ["mark_retry", "mark_retry", "mark_manual"]);
    let to: Vec<&str> = j.iter().map(|e| e["to"].as_str().unwrap_or("")).collect();
    assert_eq!(to, ["pending", "pending", "wait_manual"]);
    let attempts: Vec<i64> = j
        .iter()
        .map(|e| e["attempts"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(attempts, [0, 1, 2], "the count each change observed");
    let starts: Vec<&str> = j
        .iter()
        .map(|e| e["started"].as_str().unwrap_or(""))
        .collect();
    assert!(
        starts[0] != starts[1] && starts[1] != starts[2],
        "three different runs: {starts:?}"
    );
    let e = &j[0];
    for key in [
        "time",
        "watch",
        "table",
        "id",
        "from",
        "to",
        "verdict",
        "basis",
        "total_age_s",
        "heartbeat_age_s",
        "heartbeat",
        "lock",
        "owner",
        "stale_after_s",
        "max_age_s",
        "started",
        "attempts",
        "host",
    ] {
        assert!(
            e.get(key).is_some_and(|v| !v.is_null()),
            "journal entry has {key}: {e}"
        );
    }
    assert_eq!(e["watch"], "full-sync");
    assert_eq!(e["id"], 2);
    assert_eq!(e["from"], "running");
    // Figures, not prose: the deciding evidence as a code; the row holds its message.
    assert_eq!(e["basis"], "heartbeat_stale", "{e}");
    assert!(e.get("reason").is_none(), "{e}");
    assert!(
        chrono::DateTime::parse_from_rfc3339(e["time"].as_str().unwrap_or("")).is_ok(),
        "{e}"
    );

    // Nothing running any more: a silent run, which exits 1 while the row is parked.
    cron_check_is_quiet_while_parked(&cfg);
    assert_eq!(sb.journal().len(), 3);
}

#[test]
fn without_a_manual_state_a_spent_budget_marks_the_row_dead_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch(RETRY));
    for (run, (age, want, attempts)) in [
        (50 * MIN, "pending", 1),
        (40 * MIN, "pending", 2),
        (30 * MIN, "error", 2),
    ]
    .into_iter()
    .enumerate()
    {
        if run > 0 {
            sqlite_reclaim(&db, 2, age);
        }
        sb.heartbeat(2, secs(age - 3 * MIN));
        let o = check(&cfg, &[]);
        assert_exit(&o, 0);
        assert_eq!(
            (sqlite_row(&db, 2).0.as_str(), sqlite_row(&db, 2).1),
            (want, attempts),
            "{}",
            stdout(&o)
        );
    }
    let actions: Vec<String> = sb
        .journal()
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(actions, ["mark_retry", "mark_retry", "mark_dead"]);
}

#[test]
fn an_overtime_row_never_goes_back_to_the_queue_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(4, "running", 5 * 3600);
    sb.heartbeat(4, secs(10));
    let cfg = sb.config(&db.url(), &sb.watch(RETRY));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(sqlite_row(&db, 4).0, "error");
    assert_eq!(sqlite_row(&db, 4).1, 0);
}

// ---------------------------------------------------------------------------------------
// MariaDB

fn mysql_row(db: &mut MysqlDb, id: i64) -> (String, Option<i64>) {
    let mut r: Vec<(String, Option<i64>)> = db.query(&format!(
        "SELECT status, attempts FROM sync_log WHERE id = {id}"
    ));
    r.pop().unwrap_or_else(|| panic!("no row {id}"))
}

#[test]
fn the_retry_budget_walks_pending_pending_manual_across_runs_mariadb() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    // A count that starts NULL (never claimed through the queue) reads as 0.
    db.exec("ALTER TABLE sync_log MODIFY attempts INT NULL DEFAULT NULL");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(
        &db.url,
        &sb.watch(&format!("{RETRY}manual_value = \"wait_manual\"\n")),
    );
    assert_eq!(mysql_row(&mut db, 2), ("running".into(), None));
    let mut starts = Vec::new();
    for (run, (want, attempts, exit)) in [
        ("pending", Some(1), 0),
        ("pending", Some(2), 0),
        ("wait_manual", Some(2), 1),
    ]
    .into_iter()
    .enumerate()
    {
        let s: Vec<String> = db.query("SELECT CAST(start_time AS CHAR) FROM sync_log WHERE id = 2");
        starts.push(s[0].clone());
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, exit);
        let (rows, summary) = json_lines(&o);
        assert_eq!(summary["changed"], 1, "run {run}");
        assert_eq!(row(&rows, 2)["target"], want, "run {run}");
        assert_eq!(
            mysql_row(&mut db, 2),
            (want.to_string(), attempts),
            "run {run}"
        );
        // The worker re-claims it with a new start and dies again.
        db.exec(&format!(
            "UPDATE sync_log SET status = 'running', end_time = NULL, \
             start_time = NOW() - INTERVAL {} MINUTE WHERE id = 2 AND status = 'pending'",
            40 - 10 * run
        ));
        sb.heartbeat(2, secs((35 - 10 * run as u64) * MIN));
    }
    let j = sb.journal();
    assert_eq!(j.len(), 3);
    let journaled: Vec<&str> = j
        .iter()
        .map(|e| e["started"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(journaled, starts, "each entry names the start it matched");
}

/// Waits until an UPDATE of sync_log from another session is on the server.
fn wait_for_update(db: &mut MysqlDb) -> bool {
    let deadline = Instant::now() + secs(8);
    loop {
        let n: Vec<i64> = db.query(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = '{}' AND INFO LIKE 'UPDATE%sync_log%'",
            db.name
        ));
        if n[0] > 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_reclaim_that_loses_the_race_raises_no_attempts_count_mariadb() {
    // The status change and the count's increment are one compare-and-set: when the worker
    // re-claims the row while selfheal's UPDATE waits, neither happens.
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch(RETRY));
    let mut holder = db.conn();
    holder.query_drop("BEGIN").expect("begin");
    holder
        .query_drop("SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("for update");
    let child = selfheal()
        .args(["check", "--format", "json", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let waited = wait_for_update(&mut db);
    holder
        .query_drop("UPDATE sync_log SET start_time = NOW() WHERE id = 2")
        .expect("reclaim");
    holder.query_drop("COMMIT").expect("commit");
    let o = child.wait_with_output().expect("wait");
    assert!(waited, "selfheal's UPDATE never waited on the row lock");
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "lost_race");
    assert_eq!(mysql_row(&mut db, 2), ("running".into(), Some(0)));
    assert!(sb.journal().is_empty(), "a lost race is not a change");
}

// ---------------------------------------------------------------------------------------
// The journal and last-run.json

#[test]
fn a_journal_line_cut_in_half_is_survived_by_writer_and_reader() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    // A crash in the middle of writing the entry: half a line, no newline.
    let path = sb.state_dir().join("journal.jsonl");
    let text = std::fs::read_to_string(&path).expect("journal");
    std::fs::write(&path, &text[..text.len() / 2]).expect("cut");

    db.insert(3, "running", 50 * MIN);
    sb.heartbeat(3, secs(47 * MIN));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.status(3), "error");
    let text = std::fs::read_to_string(&path).expect("journal");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        serde_json::from_str::<serde_json::Value>(lines[0]).is_err(),
        "the cut line stays cut"
    );
    let entry: serde_json::Value =
        serde_json::from_str(lines[1]).expect("the new entry is a whole line of its own");
    assert_eq!(entry["id"], 3);

    // Readers skip the damaged line with a warning and use the rest.
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["entries"], 1);
    assert_eq!(summary["journal"]["damaged_lines"], 1);
    assert!(
        summary["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("skipped 1 damaged line (line 1")),
        "{summary}"
    );
    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("selfheal: warning: ") && stderr(&o).contains("damaged line"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_journal_that_cannot_be_opened_fails_with_exit_3_before_any_row_changes() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    // The state directory's path is taken by a file: unusable even for root.
    std::fs::write(sb.state_dir(), "not a directory").expect("file");
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let before = db.bytes();
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.contains(&sb.state_dir().display().to_string()) && err.contains("state directory"),
        "{err}"
    );
    assert_eq!(db.status(2), "running");
    assert_eq!(db.bytes(), before, "not a byte changed");
}

#[test]
fn a_journal_write_that_fails_after_the_change_stops_the_run_with_exit_3_and_the_next_run_journals_it()
 {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in [2, 3] {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    // The journal opens but every write to it fails, as on a full disk: it is already
    // longer than the run may make any file (RLIMIT_FSIZE, with SIGXFSZ ignored: EFBIG),
    // while the intents, the database and the report stay below that.
    std::fs::create_dir(sb.state_dir()).expect("state dir");
    let journal = sb.state_dir().join("journal.jsonl");
    std::fs::write(&journal, "\n".repeat(70_000)).expect("journal");
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = Command::new("prlimit")
        .args([
            "--fsize=65536",
            "--",
            "sh",
            "-c",
            "trap '' XFSZ; exec \"$@\"",
            "sh",
        ])
        .arg(bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env("LC_ALL", "C")
        .output()
        .expect("prlimit");
    assert_exit(&o, 3);
    // SQLite commits a watch's writes together, then journals them: both changes were
    // made, and both are reported.
    for id in [2, 3] {
        assert!(
            stdout(&o).contains(&format!(
                "full-sync id={id}: set status to 'error' (mark_dead)"
            )),
            "the changes that were made are reported: {}",
            stdout(&o)
        );
        assert_eq!(db.status(id), "error", "the change itself is complete");
    }
    assert!(
        stderr(&o)
            .contains("row full-sync id=2 (now 'error') was changed but could not be journaled"),
        "{}",
        stderr(&o)
    );
    let last = sb.last_run();
    assert_eq!(last["exit_status"], 3);
    assert_eq!(last["changed"], 2);
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("could not be journaled")),
        "{last}"
    );
    // Their intents are on disk; once the journal can be written again, the next run
    // journals both, marked recovered, and changes nothing.
    let pending = std::fs::read_to_string(sb.state_dir().join("pending.jsonl")).expect("pending");
    assert_eq!(
        pending.lines().count(),
        3,
        "a header and two intents: {pending}"
    );
    std::fs::remove_file(&journal).expect("a journal that can be written again");
    let before = db.dump();
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("journaled 2 change(s) that a stopped run made without journaling"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.dump(), before);
    let entries = sb.journal();
    let ids: Vec<i64> = entries.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert_eq!(ids, [2, 3]);
    assert!(
        entries
            .iter()
            .all(|e| e["recovered"] == true && e["applied"] == true)
    );
    assert_eq!(
        std::fs::metadata(sb.state_dir().join("pending.jsonl"))
            .map(|m| m.len())
            .ok(),
        Some(0),
        "settled"
    );
    // And only once.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");
    assert_eq!(sb.journal().len(), 2);
}

#[test]
fn dry_runs_leave_no_journal_and_no_last_run() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    for args in [
        &["--dry-run"][..],
        &["--explain"],
        &["--dry-run", "--format", "json"],
    ] {
        let o = check(&cfg, args);
        assert_exit(&o, 0);
        assert!(!sb.state_dir().exists(), "{args:?}");
    }
    // Even where the directory exists already, nothing appears in it.
    std::fs::create_dir(sb.state_dir()).expect("dir");
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 0);
    assert_eq!(
        std::fs::read_dir(sb.state_dir()).expect("dir").count(),
        0,
        "no journal, no last-run.json, no temporary file"
    );
    assert_eq!(db.status(2), "running");
}

#[test]
fn every_real_run_leaves_a_last_run_report() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * 3600);
    sb.heartbeat(1, secs(20));
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let last = sb.last_run();
    assert_eq!(last["exit_status"], 0);
    assert_eq!(
        (last["rows"].as_u64(), last["changed"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(last["dry_run"], false);
    assert_eq!(last["error"], serde_json::Value::Null);
    assert!(last["duration_ms"].as_u64().is_some(), "{last}");
    assert!(
        chrono::DateTime::parse_from_rfc3339(last["time"].as_str().unwrap_or("")).is_ok(),
        "{last}"
    );
    assert_eq!(
        last["per_watch"],
        serde_json::json!([{"watch": "full-sync", "rows": 2, "changed": 1, "attention": 0,
                            "lost_race": 0, "skipped": null, "parked": null, "busy_runs": 0,
                            "unparked": 0,
                            "owners": [{"host": hostname(), "rows": 2}]}])
    );
    assert_eq!(last["host"], hostname());
    // The journal names the host that judged the row and the host it belonged to.
    let j = sb.journal();
    assert_eq!(
        (j[0]["host"].as_str(), j[0]["owner_host"].as_str()),
        (Some(hostname().as_str()), Some(hostname().as_str()))
    );
    let first = last["time"].clone();

    // A run that changes nothing replaces it too: monitoring sees every run.
    std::thread::sleep(Duration::from_millis(1100));
    cron_check_is_silent(&cfg);
    let last = sb.last_run();
    assert_eq!(last["changed"], 0);
    assert_ne!(last["time"], first);
    let names: Vec<String> = std::fs::read_dir(sb.state_dir())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    // run-state.json: the recent runs the max_age check read.
    assert_eq!(
        names,
        [
            "journal.jsonl",
            "last-run.json",
            "pending.jsonl",
            "run-state.json"
        ]
    );
    assert_eq!(
        std::fs::metadata(sb.state_dir().join("pending.jsonl"))
            .map(|m| m.len())
            .ok(),
        Some(0),
        "no intent is left once the changes are journaled"
    );

    // A failed run says so in the report.
    let cfg = sb.config(
        &db.url(),
        &sb.watch("confirm = 1\n")
            .replace("sync_log", "no_such_table"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    let last = sb.last_run();
    assert_eq!(last["exit_status"], 2);
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("no_such_table")),
        "{last}"
    );
}

#[test]
fn an_unusable_state_dir_is_a_warning_when_nothing_needs_the_journal() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * 3600);
    sb.heartbeat(1, secs(20));
    std::fs::write(sb.state_dir(), "not a directory").expect("file");
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = cron_check_is_silent(&cfg);
    let err = stderr(&o);
    assert!(
        err.contains("selfheal: warning: cannot write the last-run report")
            && err.contains("the next change would fail; fix: ")
            && err.contains("is not a directory: point run.state_dir at a directory"),
        "{err}"
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert!(
        summary["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|x| x.as_str().is_some_and(|s| s.contains("last-run report")))),
        "{summary}"
    );
}

// ---------------------------------------------------------------------------------------
// The journal and the intents file, shared by configurations and databases, damaged and
// rotated

const STARTED: &str = "2026-11-30 10:00:00";

const MESSAGE: &str = "self-heal: dead: the heartbeat is stale";

/// A configuration file `name` over `db` with the state directory shared in the sandbox,
/// and the given watches (`name`, `table`) in the standard form.
pub(crate) fn config(sb: &Sandbox, name: &str, db: &Path, watches: &[(&str, &str)]) -> PathBuf {
    let mut text = format!(
        "[database]\nurl = \"sqlite://{}\"\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n",
        db.display(),
        sb.run_lock().display(),
        sb.state_dir().display()
    );
    for (watch, table) in watches {
        let body = sb
            .watch("confirm = 1\n")
            .replace("name = \"full-sync\"", &format!("name = \"{watch}\""))
            .replace("table = \"sync_log\"", &format!("table = \"{table}\""));
        text.push_str("\n[[watch]]\n");
        text.push_str(&body);
    }
    let p = sb.path(name);
    std::fs::write(&p, text).expect("write config");
    p
}

/// A SQLite file `name` with `sync_log` and `other_log`, both of the standard schema.
pub(crate) fn database(sb: &Sandbox, name: &str) -> PathBuf {
    let path = sb.path(name);
    let c = rusqlite::Connection::open(&path).expect("sqlite");
    c.execute_batch(SQLITE_SCHEMA).expect("schema");
    c.execute_batch(&SQLITE_SCHEMA.replace("sync_log", "other_log"))
        .expect("schema");
    path
}

pub(crate) fn exec(db: &Path, sql: &str) {
    rusqlite::Connection::open(db)
        .expect("sqlite")
        .execute_batch(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Row `id` of `table` as a stopped run left it: already given `error` with selfheal's
/// message, its change not journaled.
pub(crate) fn changed_row(db: &Path, table: &str, id: i64) {
    exec(
        db,
        &format!(
            "INSERT INTO {table} (id, status, start_time, end_time, error_msg) \
             VALUES ({id}, 'error', '{STARTED}', '{STARTED}', '{MESSAGE}')"
        ),
    );
}

/// The intent of that change, as a run writes it.
pub(crate) fn intent(change: &str, watch: &str, table: &str, id: i64) -> String {
    serde_json::json!({
        "action": "mark_dead", "applied": true, "basis": "the heartbeat is stale",
        "change": change, "from": "running", "host": "web1", "id": id,
        "reason": MESSAGE, "started": STARTED, "table": table, "time": "2026-11-30T10:50:00Z",
        "to": "error", "verdict": "dead", "watch": watch,
    })
    .to_string()
}

/// A header as the release before this one wrote it (no configuration, no database).
pub(crate) fn old_header(run: &str) -> String {
    format!(
        "{{\"journal_offset\":0,\"run\":\"{run}\",\"session\":null,\"time\":\"2026-11-30T10:50:00Z\"}}"
    )
}

pub(crate) fn pending_path(sb: &Sandbox) -> PathBuf {
    sb.state_dir().join("pending.jsonl")
}

pub(crate) fn write_pending(sb: &Sandbox, bytes: &[u8]) {
    std::fs::create_dir_all(sb.state_dir()).expect("state dir");
    std::fs::write(pending_path(sb), bytes).expect("pending");
}

/// Every journal line of every generation, oldest first.
pub(crate) fn journal_lines(sb: &Sandbox) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for name in [
        "journal.jsonl.3",
        "journal.jsonl.2",
        "journal.jsonl.1",
        "journal.jsonl",
    ] {
        let Ok(bytes) = std::fs::read(sb.state_dir().join(name)) else {
            continue;
        };
        for line in bytes.split(|b| *b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                out.push(v);
            }
        }
    }
    out
}

pub(crate) fn changes(sb: &Sandbox) -> Vec<(String, bool)> {
    journal_lines(sb)
        .iter()
        .filter_map(|v| {
            Some((
                v["change"].as_str()?.to_string(),
                v["recovered"].as_bool().unwrap_or(false),
            ))
        })
        .collect()
}

/// Runs `selfheal ARGS`, returning its output and its peak resident memory in KiB (the
/// child's own `ru_maxrss`, from `wait4`, which also reaps it).
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (std::process::Output, i64) {
    let mut child = selfheal()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).expect("stderr");
        v
    });
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut out).expect("stdout");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: a plain wait4 on our own child, with pointers to live locals.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    assert_eq!(r, pid, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let output = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(code << 8),
        stdout: out,
        stderr: err.join().expect("stderr thread"),
    };
    (output, usage.ru_maxrss)
}

#[test]
fn damaged_journal_lines_are_skipped_and_counted_and_stats_stays_small() {
    // stats's peak memory is read from its `ru_maxrss`, which counts this process's peak.
    if !in_a_process_of_its_own(
        module_path!(),
        "damaged_journal_lines_are_skipped_and_counted_and_stats_stays_small",
    ) {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    db.insert(1, "running", 50 * 60);
    sb.heartbeat(1, Duration::from_secs(47 * 60));
    // A journal damaged in every way: bytes that are not UTF-8, a line cut short, a 2 MiB
    // line, then 3,000,000 short lines of garbage (33 MB).
    std::fs::create_dir_all(sb.state_dir()).expect("state");
    let mut bytes = Vec::with_capacity(36 << 20);
    bytes.extend_from_slice(b"{\"watch\": \"full-sync\", \"id\": \"caf\xe9\"}\n{\"watch\": \"fu\n");
    bytes.extend(std::iter::repeat_n(b'x', 2 << 20));
    bytes.push(b'\n');
    for _ in 0..3_000_000 {
        bytes.extend_from_slice(b"{\"id\":\xff}\n");
    }
    let journal = sb.state_dir().join("journal.jsonl");
    std::fs::write(&journal, &bytes).expect("journal");
    drop(bytes);

    let cfg_arg = cfg.display().to_string();
    let (o, kib) = run_measured(&["stats", "--config", &cfg_arg, "--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert!(
        summary["journal"]["damaged_lines"].as_u64().unwrap_or(0) > 1_000_000,
        "{summary}"
    );
    let warnings = summary["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "one warning for the file: {warnings:?}");
    let w = warnings[0].as_str().unwrap_or_default();
    assert!(
        w.starts_with(&format!("{}: skipped ", journal.display())),
        "{w}"
    );
    assert!(
        kib < 64 * 1024,
        "stats held {kib} KiB over a 33 MB damaged journal"
    );

    // The journal stays usable: the next change is appended and read back.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.status(1), "error");
    let o = selfheal()
        .args(["stats", "--config", &cfg_arg, "--format", "json"])
        .output()
        .expect("stats");
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["entries"], 1, "{summary}");
}

#[test]
fn the_journal_rotates_and_a_stopped_runs_record_is_found_by_change_id() {
    let sb = Sandbox::new();
    let db = database(&sb, "app.db");
    let cfg = config(&sb, "selfheal.toml", &db, &[("a", "sync_log")]);
    changed_row(&db, "sync_log", 1);
    changed_row(&db, "sync_log", 2);
    // An 8 MiB journal whose last line is the stopped run's first change; its second
    // change was applied and not journaled.
    std::fs::create_dir_all(sb.state_dir()).expect("state");
    let mut bytes = Vec::new();
    let filler = serde_json::json!({"watch": "a", "id": 99, "change": "older/1"}).to_string();
    while bytes.len() < 8 << 20 {
        bytes.extend_from_slice(filler.as_bytes());
        bytes.push(b'\n');
    }
    let offset = bytes.len();
    bytes.extend_from_slice(intent("web1:1:1/1", "a", "sync_log", 1).as_bytes());
    bytes.push(b'\n');
    std::fs::write(sb.state_dir().join("journal.jsonl"), &bytes).expect("journal");
    let left = format!(
        "{}\n{}\n{}\n",
        old_header("web1:1:1").replace(
            "\"journal_offset\":0",
            &format!("\"journal_offset\":{offset}")
        ),
        intent("web1:1:1/1", "a", "sync_log", 1),
        intent("web1:1:1/2", "a", "sync_log", 2)
    );
    write_pending(&sb, left.as_bytes());

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        sb.state_dir().join("journal.jsonl.1").exists(),
        "the journal was rotated"
    );
    assert!(
        std::fs::metadata(sb.state_dir().join("journal.jsonl"))
            .expect("meta")
            .len()
            < 4096
    );
    let ours: Vec<(String, bool)> = changes(&sb)
        .into_iter()
        .filter(|(c, _)| c.starts_with("web1:"))
        .collect();
    assert_eq!(
        ours,
        [
            ("web1:1:1/1".to_string(), false),
            ("web1:1:1/2".to_string(), true)
        ],
        "each change once: the first found in the rotated journal, the second journaled now"
    );
    assert!(
        stderr(&o).contains("journaled 1 change(s)"),
        "{}",
        stderr(&o)
    );

    // stats reads every generation.
    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&cfg)
        .args(["--format", "json"])
        .output()
        .expect("stats");
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["files"], 2, "{summary}");
    assert!(
        summary["journal"]["entries"].as_u64().unwrap_or(0) > 100_000,
        "{summary}"
    );
}
