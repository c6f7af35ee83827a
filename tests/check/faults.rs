//! Fault injection: real processes killed at chosen points, two runs racing, a database
//! server stopped mid-run, heartbeat files replaced while read, unreadable paths, lock
//! files on a read-only file system. Each asserts the two invariants — a row is changed
//! only by a compare-and-set on what selfheal saw, at most once; a lock that may be held is
//! never deleted — and that every applied change is journaled exactly once. A stopped run's
//! intents are journaled as selfheal's changes only where the row proves it (its own
//! message), else with their outcome (`unknown`, `unmatched`) and never dropped unsaid.
//!
//! Nothing here sleeps and hopes: kill points are syscall counts (strace's fault
//! injection, seeded; `SELFHEAL_FAULT_SEED` picks other seeds), a write is caught waiting
//! on a row lock through the server's process list (PostgreSQL: `pg_stat_activity`), and a race is two real processes
//! whose every possible interleaving satisfies the assertions.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;
use mysql::prelude::Queryable;

/// `selfheal check --config CFG ARGS`, not yet waited for.
fn spawn_check(cfg: &Path, args: &[&str]) -> std::process::Child {
    selfheal()
        .arg("check")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn selfheal")
}

/// The journal's entries in `state_dir`, and its row ids.
fn journal_ids(state_dir: &Path) -> Vec<i64> {
    let path = state_dir.join("journal.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("journal line"))
        .map(|e| e["id"].as_i64().expect("id"))
        .collect()
}

/// Asserts that the journal lists each of `ids` exactly once and nothing else, and that
/// no change id appears twice.
#[track_caller]
fn assert_journaled_once(state_dirs: &[&Path], ids: &BTreeSet<i64>) {
    let mut count: BTreeMap<i64, usize> = BTreeMap::new();
    let mut changes = BTreeSet::new();
    for d in state_dirs {
        for id in journal_ids(d) {
            *count.entry(id).or_default() += 1;
        }
        if let Ok(text) = std::fs::read_to_string(d.join("journal.jsonl")) {
            for l in text.lines() {
                let e: serde_json::Value = serde_json::from_str(l).expect("journal line");
                let c = e["change"].as_str().expect("change id").to_string();
                assert!(changes.insert(c.clone()), "change {c} journaled twice");
            }
        }
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "journaled more than once: {twice:?}");
    let got: BTreeSet<i64> = count.keys().copied().collect();
    let missing: Vec<_> = ids.difference(&got).collect();
    let extra: Vec<_> = got.difference(ids).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "journal: missing {missing:?}, not changed but journaled {extra:?}"
    );
}

fn pending_is_empty(state_dir: &Path) -> bool {
    std::fs::metadata(state_dir.join("pending.jsonl")).map_or(true, |m| m.len() == 0)
}

// ---------------------------------------------------------------------------------------
// Two runs at once

/// The ids the JSON output says were applied.
fn applied_ids(o: &Output) -> Vec<i64> {
    if o.stdout.is_empty() {
        return Vec::new();
    }
    let (rows, _) = json_lines(o);
    rows.iter()
        .filter(|r| r["applied"] == true)
        .filter_map(|r| r["id"].as_i64())
        .collect()
}

/// Asserts the outcome of two runs started together over the same `dead` rows: every
/// dead row changed exactly once in all, by one of them; the other exited 75 (busy) or
/// changed nothing (it lost every race, or found the rows already handled).
#[track_caller]
fn assert_one_winner(a: &Output, b: &Output, dead: &BTreeSet<i64>, round: usize) {
    for o in [a, b] {
        assert!(
            matches!(o.status.code(), Some(0 | 75)),
            "round {round}: exit {:?}\n{}\n{}",
            o.status,
            stdout(o),
            stderr(o)
        );
    }
    let (x, y) = (applied_ids(a), applied_ids(b));
    let (winner, loser, lo) = if x.len() >= y.len() {
        (x, y, b)
    } else {
        (y, x, a)
    };
    assert!(
        loser.is_empty(),
        "round {round}: both runs changed rows: {winner:?} and {loser:?}"
    );
    assert_eq!(
        winner.iter().copied().collect::<BTreeSet<_>>(),
        *dead,
        "round {round}"
    );
    if lo.status.code() == Some(0) && !lo.stdout.is_empty() {
        let (rows, _) = json_lines(lo);
        for r in rows.iter().filter(|r| r["verdict"] == "dead") {
            assert_eq!(r["action"], "lost_race", "round {round}: {r}");
        }
    }
}

/// One round of two checks started together (`--force --format json`): each dead row is
/// changed by exactly one of them, `check_table` passes on the table afterwards, and each
/// change is journaled once. Clears both state directories for the next round.
fn race_round(
    configs: [&Path; 2],
    hosts: [&Sandbox; 2],
    dead: &BTreeSet<i64>,
    round: usize,
    check_table: impl FnOnce(),
) {
    let args = ["--force", "--format", "json"];
    let (a, b) = (
        spawn_check(configs[0], &args),
        spawn_check(configs[1], &args),
    );
    let (a, b) = (
        a.wait_with_output().expect("a"),
        b.wait_with_output().expect("b"),
    );
    assert_one_winner(&a, &b, dead, round);
    check_table();
    assert_journaled_once(&[&hosts[0].state_dir(), &hosts[1].state_dir()], dead);
    for s in hosts {
        let _ = std::fs::remove_dir_all(s.state_dir());
    }
}

#[test]
fn two_runs_started_together_on_mariadb_change_every_row_once() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sa = Sandbox::new();
    let sb = Sandbox::new();
    let dead: BTreeSet<i64> = (1..=30).collect();
    for id in 1..=40 {
        sa.heartbeat(id, if id <= 30 { secs(47 * MIN) } else { secs(20) });
    }
    // Two hosts: their own run locks and journals, the same table and heartbeat files; only
    // the database's advisory lock and the compare-and-set stand between them.
    let ca = sa.config(&db.url, &sa.watch("confirm = 1\n"));
    let cb = sb.config(&db.url, &sa.watch("confirm = 1\n"));
    for round in 0..12 {
        db.exec("DELETE FROM sync_log");
        for id in 1..=40 {
            db.insert(id, "running", 50 * MIN);
        }
        let before = db.dump();
        race_round([&ca, &cb], [&sa, &sb], &dead, round, || {
            let after = db.dump();
            for (i, (x, y)) in before.iter().zip(&after).enumerate() {
                let id = i64::try_from(i + 1).expect("a row id");
                if dead.contains(&id) {
                    assert_eq!(y[1].as_deref(), Some("'error'"), "row {id}");
                } else {
                    assert_eq!(x, y, "row {id} untouched");
                }
            }
        });
    }
    // On one host the run lock decides: the second run exits 75 or finds nothing to do.
    let cb = sb.config(&db.url, &sa.watch("confirm = 1\n"));
    let text = std::fs::read_to_string(&cb).expect("config").replace(
        &sb.run_lock().display().to_string(),
        &sa.run_lock().display().to_string(),
    );
    std::fs::write(&cb, text).expect("config");
    for round in 0..6 {
        db.exec("UPDATE sync_log SET status = 'running', end_time = NULL, error_msg = ''");
        race_round([&ca, &cb], [&sa, &sb], &dead, round, || {});
    }
}

/// PostgreSQL: two hosts' runs started together over the same rows; only the advisory
/// lock (`pg_try_advisory_lock`) and the compare-and-set stand between them.
#[test]
fn two_runs_started_together_on_postgres_change_every_row_once() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    let sa = Sandbox::new();
    let sb = Sandbox::new();
    let dead: BTreeSet<i64> = (1..=30).collect();
    for id in 1..=40 {
        sa.heartbeat(id, if id <= 30 { secs(47 * MIN) } else { secs(20) });
    }
    let ca = sa.config(&db.url, &sa.watch("confirm = 1\n"));
    let cb = sb.config(&db.url, &sa.watch("confirm = 1\n"));
    for round in 0..12 {
        db.exec("DELETE FROM sync_log");
        for id in 1..=40 {
            db.insert(id, "running", 50 * MIN);
        }
        let before = db.dump();
        race_round([&ca, &cb], [&sa, &sb], &dead, round, || {
            let after = db.dump();
            for (i, (x, y)) in before.iter().zip(&after).enumerate() {
                let id = i64::try_from(i + 1).expect("a row id");
                if dead.contains(&id) {
                    assert_eq!(y[1].as_deref(), Some("error"), "row {id}");
                } else {
                    assert_eq!(x, y, "row {id} untouched");
                }
            }
        });
    }
}

#[test]
fn two_runs_started_together_on_sqlite_change_every_row_once() {
    let sa = Sandbox::new();
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sa);
    let dead: BTreeSet<i64> = (1..=30).collect();
    for id in 1..=40 {
        sa.heartbeat(id, if id <= 30 { secs(47 * MIN) } else { secs(20) });
    }
    // Separate run locks: SQLite has no advisory lock, so the compare-and-set alone decides.
    let ca = sa.config(&db.url(), &sa.watch("confirm = 1\n"));
    let cb = sb.config(&db.url(), &sa.watch("confirm = 1\n"));
    for round in 0..15 {
        db.conn()
            .execute("DELETE FROM sync_log", [])
            .expect("delete");
        for id in 1..=40 {
            db.insert(id, "running", 50 * MIN);
        }
        let before = db.dump();
        race_round([&ca, &cb], [&sa, &sb], &dead, round, || {
            for (x, y) in before.iter().zip(db.dump()) {
                if dead.contains(&x.0) {
                    assert_eq!((y.1.as_str(), y.2), ("error", true), "row {}", x.0);
                } else {
                    assert_eq!(*x, y);
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// SIGKILL at chosen points

/// strace, or skipped (outside CI) / failed (in CI).
fn strace_or_skip() -> bool {
    let ok = Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have strace (scripts/test installs it)"
        );
        eprintln!("SKIPPED: no working strace");
    }
    ok
}

/// The seeds to run: `SELFHEAL_FAULT_SEED` (one), else a fixed set.
fn seeds() -> Vec<u64> {
    match std::env::var("SELFHEAL_FAULT_SEED") {
        Ok(s) => vec![s.parse().expect("SELFHEAL_FAULT_SEED is a number")],
        Err(_) => vec![1, 2, 3],
    }
}

/// Runs `check` under strace, which kills it with SIGKILL when it enters its `when`-th
/// `syscall`. Returns how it ended.
fn killed_at(cfg: &Path, syscall: &str, when: u64) -> Output {
    Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null"])
        .arg(format!("--trace={syscall}"))
        .arg(format!("--inject={syscall}:signal=KILL:when={when}"))
        .arg(bin())
        .args(["check", "--force", "--config"])
        .arg(cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        .output()
        .expect("strace")
}

/// Kills `check` three times at seeded points over `dead` rows, then lets it finish, and
/// checks that every dead row ended marked once, journaled once, and nothing else changed.
#[allow(clippy::too_many_arguments)]
fn kill_and_finish<D>(
    seed: u64,
    sb: &Sandbox,
    cfg: &Path,
    points: &[(&str, u64)],
    dead: &BTreeSet<i64>,
    dump: &mut dyn FnMut() -> Vec<D>,
    row_id: fn(&D) -> i64,
    marked: fn(&D) -> bool,
) where
    D: PartialEq + std::fmt::Debug,
{
    let before = dump();
    let mut rng = Rng(seed);
    let mut trail = Vec::new();
    for _ in 0..3 {
        let (syscall, most) =
            points[usize::try_from(rng.between(0, points.len() as u64 - 1)).expect("an index")];
        let when = rng.between(1, most);
        let o = killed_at(cfg, syscall, when);
        let how = match (o.status.code(), o.status.signal()) {
            (_, Some(9)) => "killed".to_string(),
            (Some(c), _) => format!("finished first, exit {c}"),
            other => format!("{other:?}"),
        };
        trail.push(format!("{syscall} #{when}: {how}"));
        assert!(
            o.status.signal() == Some(9) || o.status.code() == Some(0),
            "seed {seed}, {trail:?}: {}",
            stderr(&o)
        );
    }
    let o = check(cfg, &["--force"]);
    assert_exit(&o, 0);
    let recovered = std::fs::read_to_string(sb.state_dir().join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"recovered\":true"))
        .count();
    eprintln!("seed {seed}: {trail:?}; {recovered} change(s) journaled by a later run");
    let after = dump();
    assert_eq!(before.len(), after.len());
    for (x, y) in before.iter().zip(&after) {
        let id = row_id(x);
        if dead.contains(&id) {
            assert!(marked(y), "seed {seed}, {trail:?}: row {id} is {y:?}");
        } else {
            assert_eq!(x, y, "seed {seed}, {trail:?}: row {id} changed");
        }
    }
    assert_journaled_once(&[&sb.state_dir()], dead);
    assert!(pending_is_empty(&sb.state_dir()), "seed {seed}: {trail:?}");
    // And a further run changes nothing.
    let again = check(cfg, &["--force"]);
    assert_exit(&again, 0);
    assert_eq!(dump(), after, "seed {seed}");
    assert_journaled_once(&[&sb.state_dir()], dead);
}

#[test]
fn sigkill_anywhere_in_a_sqlite_run_over_1000_dead_rows_marks_and_journals_each_once() {
    if !strace_or_skip() {
        return;
    }
    for seed in seeds() {
        let sb = Sandbox::new();
        let db = SqliteDb::new(&sb);
        let mut c = db.conn();
        let tx = c.transaction().expect("tx");
        for id in 1..=1100i64 {
            let (status, age) = if id > 1050 {
                ("done", 3 * 3600)
            } else {
                ("running", 50 * MIN)
            };
            tx.execute(
                "INSERT INTO sync_log (id, status, start_time) VALUES (?1, ?2, datetime('now', ?3))",
                rusqlite::params![id, status, format!("-{age} seconds")],
            )
            .expect("insert");
        }
        tx.commit().expect("commit");
        for id in 1..=1050 {
            sb.heartbeat(id, if id <= 1000 { secs(47 * MIN) } else { secs(20) });
        }
        let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
        let dead: BTreeSet<i64> = (1..=1000).collect();
        // SQLite writes its pages with pwrite64 and syncs with fdatasync/fsync; the journal
        // and the intents are written with write and synced with fdatasync.
        let points = [
            ("pwrite64", 120),
            ("fdatasync", 40),
            ("fsync", 20),
            ("write", 1100),
            ("newfstatat,statx", 2200),
        ];
        kill_and_finish(
            seed,
            &sb,
            &cfg,
            &points,
            &dead,
            &mut || db.dump(),
            |r| r.0,
            |r| r.1 == "error" && r.2 && r.3.starts_with("self-heal: dead:"),
        );
    }
}

#[test]
fn sigkill_anywhere_in_a_mariadb_run_over_1000_dead_rows_marks_and_journals_each_once() {
    if !strace_or_skip() {
        return;
    }
    for seed in seeds() {
        let mut db = mysql_or_skip!();
        db.create_sync_log("DATETIME");
        db.exec(
            "INSERT INTO sync_log (id, status, start_time) \
             SELECT seq, IF(seq > 1050, 'done', 'running'), \
             NOW() - INTERVAL IF(seq > 1050, 10800, 3000) SECOND FROM seq_1_to_1100",
        );
        let sb = Sandbox::new();
        for id in 1..=1050 {
            sb.heartbeat(id, if id <= 1000 { secs(47 * MIN) } else { secs(20) });
        }
        let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
        let dead: BTreeSet<i64> = (1..=1000).collect();
        // A statement goes out with sendto and its answer comes back with recvfrom: a kill
        // there lands after the server applied a write and before selfheal saw it.
        let points = [
            ("sendto", 1040),
            ("recvfrom", 1040),
            ("write", 1100),
            ("fdatasync", 6),
        ];
        kill_and_finish(
            seed,
            &sb,
            &cfg,
            &points,
            &dead,
            &mut || db.dump(),
            |r| {
                r[0].as_deref()
                    .and_then(|v| v.trim_matches('\'').parse().ok())
                    .unwrap_or(-1)
            },
            |r| {
                r[1].as_deref() == Some("'error'")
                    && r[3].is_some()
                    && r[4]
                        .as_deref()
                        .is_some_and(|m| m.starts_with("'self-heal: dead:"))
            },
        );
    }
}

#[test]
fn sigkill_anywhere_in_a_postgres_run_over_1000_dead_rows_marks_and_journals_each_once() {
    if !strace_or_skip() {
        return;
    }
    for seed in seeds() {
        let mut db = pg_or_skip!();
        db.create_sync_log("TIMESTAMP");
        db.exec(
            "INSERT INTO sync_log (id, status, start_time) \
             SELECT s, CASE WHEN s > 1050 THEN 'done' ELSE 'running' END, \
             LOCALTIMESTAMP - CASE WHEN s > 1050 THEN 10800 ELSE 3000 END * INTERVAL '1 second' \
             FROM generate_series(1, 1100) AS s",
        );
        let sb = Sandbox::new();
        for id in 1..=1050 {
            sb.heartbeat(id, if id <= 1000 { secs(47 * MIN) } else { secs(20) });
        }
        let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
        let dead: BTreeSet<i64> = (1..=1000).collect();
        // As on MariaDB: a statement goes out with sendto, its answer comes with recvfrom
        // (a run here makes about 55 and 69 of them: groups of writes are one statement
        // each; 152 writes, 2 fdatasyncs).
        let points = [
            ("sendto", 55),
            ("recvfrom", 69),
            ("write", 152),
            ("fdatasync", 2),
        ];
        kill_and_finish(
            seed,
            &sb,
            &cfg,
            &points,
            &dead,
            &mut || db.dump(),
            |r| r[0].as_deref().and_then(|v| v.parse().ok()).unwrap_or(-1),
            |r| {
                r[1].as_deref() == Some("error")
                    && r[3].is_some()
                    && r[4]
                        .as_deref()
                        .is_some_and(|m| m.starts_with("self-heal: dead:"))
            },
        );
    }
}

/// PostgreSQL: a killed run's UPDATE waiting on a row lock stays on the server (its
/// backend notices the client gone only when the statement ends); the next run ends that
/// session (`pg_terminate_backend`) before it settles the stopped run's rows.
#[test]
fn a_killed_runs_update_still_waiting_on_postgres_is_ended_before_its_rows_are_settled() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    let sb = Sandbox::new();
    for id in 1..=3 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let mut holder = db.conn();
    holder
        .batch_execute("BEGIN; SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("for update");
    let mut first = spawn_check(&cfg, &["--force"]);
    assert!(
        db.wait_for_lock_wait(),
        "the first run never waited on row 2"
    );
    first.kill().expect("kill");
    first.wait().expect("wait");
    let pending = std::fs::read_to_string(sb.state_dir().join("pending.jsonl")).expect("pending");
    let header: serde_json::Value =
        serde_json::from_str(pending.lines().next().expect("header")).expect("json");
    let orphan = header["session"]["connection"]
        .as_u64()
        .expect("the session is recorded");
    let name = db.name.clone();
    let waiting = |db: &mut PgDb, other: bool| -> i64 {
        db.one(&format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{name}' \
             AND query LIKE 'UPDATE%sync_log%' AND state = 'active' AND pid {} {orphan}",
            if other { "<>" } else { "=" }
        ))
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
    };
    assert_eq!(
        waiting(&mut db, false),
        1,
        "the killed run's UPDATE still waits"
    );
    let second = spawn_check(&cfg, &["--force", "--format", "json"]);
    let deadline = std::time::Instant::now() + secs(10);
    while !(waiting(&mut db, false) == 0 && waiting(&mut db, true) == 1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stopped run's session was not ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    holder.batch_execute("COMMIT").expect("commit");
    let o = second.wait_with_output().expect("wait");
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    for id in [2, 3] {
        assert_eq!(row(&rows, id)["applied"], true, "{}", row(&rows, id));
    }
    for id in 1..=3 {
        assert_eq!(db.row(id).0, "error");
    }
    assert_journaled_once(&[&sb.state_dir()], &(1..=3).collect());
    assert!(pending_is_empty(&sb.state_dir()));
}

#[test]
fn a_killed_runs_update_still_waiting_on_the_server_is_ended_before_its_rows_are_settled() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    for id in 1..=3 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    // Row 2 is held: the first run marks row 1, then waits on row 2 — and is killed there.
    // Its UPDATE stays on the server, waiting, ready to apply when row 2 is let go.
    let mut holder = db.conn();
    holder.query_drop("BEGIN").expect("begin");
    holder
        .query_drop("SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("for update");
    let mut first = spawn_check(&cfg, &["--force"]);
    assert!(
        db.wait_for_lock_wait(),
        "the first run never waited on row 2"
    );
    first.kill().expect("kill");
    first.wait().expect("wait");
    let pending = std::fs::read_to_string(sb.state_dir().join("pending.jsonl")).expect("pending");
    let header: serde_json::Value =
        serde_json::from_str(pending.lines().next().expect("header")).expect("json");
    let orphan = header["session"]["connection"]
        .as_u64()
        .expect("the session is recorded");
    let waiting = |db: &mut MysqlDb, other: bool| -> i64 {
        db.query::<i64>(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{}' \
             AND INFO LIKE 'UPDATE%sync_log%' AND ID {} {orphan}",
            db.name,
            if other { "<>" } else { "=" }
        ))[0]
    };
    assert_eq!(
        waiting(&mut db, false),
        1,
        "the killed run's UPDATE still waits"
    );
    // The next run ends that session before it reads any row, then waits on row 2 itself.
    let second = spawn_check(&cfg, &["--force", "--format", "json"]);
    let deadline = std::time::Instant::now() + secs(10);
    while !(waiting(&mut db, false) == 0 && waiting(&mut db, true) == 1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stopped run's session was not ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    holder.query_drop("COMMIT").expect("commit");
    let o = second.wait_with_output().expect("wait");
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    for id in [2, 3] {
        assert_eq!(row(&rows, id)["applied"], true, "{}", row(&rows, id));
    }
    for id in 1..=3 {
        assert_eq!(db.row(id).0, "error");
    }
    // Row 1 was journaled by the killed run, rows 2 and 3 by this one: each once. Had the
    // old UPDATE applied row 2, this run would have lost that race and row 2's change would
    // be in no journal.
    assert_journaled_once(&[&sb.state_dir()], &(1..=3).collect());
    assert!(pending_is_empty(&sb.state_dir()));
}

// ---------------------------------------------------------------------------------------
// The database server stopped mid-run

#[test]
fn the_mariadb_server_stopped_mid_run_exits_3_with_every_earlier_change_complete_and_journaled() {
    let Some(mut server) = PrivateMariadb::start() else {
        return;
    };
    let mut admin = server.conn("");
    admin
        .query_drop("CREATE DATABASE app")
        .expect("create database");
    let mut c = server.conn("app");
    c.query_drop(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, \
         error_msg VARCHAR(255) NOT NULL DEFAULT '', KEY idx_status (status)) ENGINE=InnoDB",
    )
    .expect("table");
    c.query_drop(
        "INSERT INTO sync_log (id, status, start_time) \
         SELECT seq, 'running', NOW() - INTERVAL 50 MINUTE FROM seq_1_to_10",
    )
    .expect("rows");
    let sb = Sandbox::new();
    for id in 1..=10 {
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&server.url("app"), &sb.watch("confirm = 1\n"));

    // Rows 1-5 are written and committed; row 6 is held, so selfheal waits on it; then the
    // server goes down under it.
    let mut holder = server.conn("app");
    holder.query_drop("BEGIN").expect("begin");
    holder
        .query_drop("SELECT * FROM sync_log WHERE id = 6 FOR UPDATE")
        .expect("for update");
    let child = spawn_check(&cfg, &["--force", "--format", "json"]);
    // Rows 1-5 go in one group of writes, whose UPDATEs show in the process list too: wait
    // until the group is committed (visible from another session) and row 6's UPDATE,
    // retried on its own, waits on the held row.
    let deadline = std::time::Instant::now() + secs(10);
    loop {
        let done: Vec<i64> = admin
            .query("SELECT COUNT(*) FROM app.sync_log WHERE id <= 5 AND status = 'error'")
            .expect("count");
        if done[0] == 5 && update_waiting(&mut admin, "app") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rows 1-5 were never committed with selfheal's UPDATE waiting on row 6"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(admin);
    drop(c);
    server.stop();
    let o = child.wait_with_output().expect("wait");
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.starts_with("selfheal: error: writing on mysql://root@localhost/app?socket=")
            && err.contains(": the server closed the connection"),
        "a clear message: {err}"
    );
    assert_eq!(err.lines().count(), 2, "the error and its fix: {err}");
    // Reported: the five changes made before.
    let reported: BTreeSet<i64> = stdout(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["applied"] == true)
        .filter_map(|r| r["id"].as_i64())
        .collect();
    let first: BTreeSet<i64> = (1..=5).collect();
    assert_eq!(reported, first);
    // Journaled, complete, and nothing else.
    assert_journaled_once(&[&sb.state_dir()], &first);
    server.start_again();
    let mut c = server.conn("app");
    let rows: Vec<(i64, String, bool, String)> = c
        .query("SELECT id, status, end_time IS NOT NULL, error_msg FROM sync_log ORDER BY id")
        .expect("rows");
    for (id, status, ended, msg) in &rows {
        if *id <= 5 {
            assert!(
                status == "error" && *ended && msg.starts_with("self-heal: dead:"),
                "row {id}: {status} {ended} {msg}"
            );
        } else {
            assert_eq!(
                (status.as_str(), *ended, msg.as_str()),
                ("running", false, "")
            );
        }
    }
    // The next run settles the intents left behind and finishes the job, once.
    let o = check(&cfg, &["--force"]);
    assert_exit(&o, 0);
    assert_journaled_once(&[&sb.state_dir()], &(1..=10).collect());
    assert!(pending_is_empty(&sb.state_dir()));
    let n: Option<i64> = c
        .query_first("SELECT COUNT(*) FROM sync_log WHERE status = 'error'")
        .expect("count");
    assert_eq!(n, Some(10));
}

// ---------------------------------------------------------------------------------------
// Heartbeat files and lock files

#[test]
fn a_heartbeat_file_replaced_by_rename_while_read_is_always_seen_whole() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert(id, "running", 50 * MIN);
    }
    for id in 1..=4 {
        sb.heartbeat(id, if id <= 2 { secs(20) } else { secs(47 * MIN) });
    }
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dir = sb.dir.path().to_path_buf();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // As an atomic writer does: a new file beside it, renamed over it. Rows 1-2
            // beat (fresh files); rows 3-4 get stale files replaced by stale files.
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for id in 1..=4 {
                    let tmp = dir.join(format!(".hb-{id}.tmp"));
                    std::fs::write(&tmp, n.to_string()).expect("write");
                    let age = if id <= 2 { 1 } else { 47 * MIN };
                    std::fs::File::open(&tmp)
                        .and_then(|f| f.set_modified(std::time::SystemTime::now() - secs(age)))
                        .expect("mtime");
                    std::fs::rename(&tmp, dir.join(format!("hb-{id}"))).expect("rename");
                }
                n += 1;
            }
            n
        })
    };
    for _ in 0..40 {
        let o = check(&cfg, &["--dry-run", "--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        for id in 1..=2 {
            assert_eq!(row(&rows, id)["verdict"], "alive", "{}", row(&rows, id));
        }
        for id in 3..=4 {
            assert_eq!(row(&rows, id)["verdict"], "dead", "{}", row(&rows, id));
            assert_eq!(row(&rows, id)["heartbeat"], "present", "{}", row(&rows, id));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let replaced = writer.join().expect("writer");
    assert!(
        replaced > 10,
        "the files were replaced while read ({replaced} rounds)"
    );
    assert_eq!(db.status(1), "running");
}

#[test]
fn unreadable_evidence_paths_are_unknown_never_dead() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    db.insert(2, "running", 50 * MIN);
    // A symlink loop answers stat with ELOOP: an I/O-style failure any user gets, like a
    // hung or failing network mount. The heartbeat behind it is unreadable, not missing.
    let looped = sb.path("loop");
    std::os::unix::fs::symlink(&looped, &looped).expect("loop");
    let hb = format!("{}/hb-{{id}}", looped.display());
    // Row 2's heartbeat is readable and stale, but its lock file is behind the loop.
    sb.heartbeat(2, secs(47 * MIN));
    // Two configurations of the same rows, one after the other (two watches on one table
    // at once would be a configuration error).
    let a = format!(
        "name = \"a\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_file = \"{hb}\"\nstale_after = \"5m\"\nmax_age = \"4h\"\nconfirm = 1\n"
    );
    let b = format!(
        "name = \"b\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_file = \"{}\"\nlock_file = \"{}/job.lock\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
         confirm = 1\n",
        sb.heartbeat_template(),
        looped.display()
    );
    let before = db.dump();
    let cfg = sb.config(&db.url(), &a);
    let o = check(&cfg, &["--format", "json", "--watch", "a"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    for r in &rows {
        assert_eq!(r["verdict"], "unknown", "{r}");
        assert!(
            r["heartbeat"]
                .as_str()
                .is_some_and(|h| h.starts_with("unreadable:")),
            "{r}"
        );
    }
    let cfg = sb.config(&db.url(), &b);
    let o = check(&cfg, &["--format", "json", "--watch", "b"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["verdict"], "unknown", "{}", row(&rows, 2));
    assert_eq!(row(&rows, 2)["lock"], "unreadable", "{}", row(&rows, 2));
    assert_eq!(db.dump(), before, "nothing changed");
}

/// Runs `script` as root in a private mount namespace (its mounts vanish with it).
fn in_mount_namespace(script: &str, env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env_remove("SELFHEAL_CONFIG")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        .env("SELFHEAL", bin());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("unshare")
}

#[test]
fn lock_files_on_a_read_only_file_system_are_probed_and_never_touched() {
    if !root_or_skip("a read-only tmpfs in a mount namespace") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=3 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let locks = sb.path("locks");
    std::fs::create_dir(&locks).expect("locks dir");
    let watch = sb.watch(&format!(
        "lock_file = \"{}/job-{{id}}.lock\"\nmanual_value = \"wait_manual\"\nconfirm = 1\n",
        locks.display()
    ));
    let cfg = sb.config(&db.url(), &watch);
    // In the namespace: a tmpfs over the lock directory with two lock files, a worker
    // holding job-1's (flock), then the tmpfs remounted read-only, then a real check.
    // Row 1: lock held → hung (a person); row 2: lock free → dead; row 3: no lock file.
    let script = r#"set -e
        mount -t tmpfs selfheal-locks "$LOCKS"
        touch "$LOCKS/job-1.lock" "$LOCKS/job-2.lock"
        sh -c 'exec 9<"$LOCKS/job-1.lock"; flock 9; exec sleep 60' </dev/null >/dev/null 2>&1 &
        holder=$!
        while ! grep -q FLOCK /proc/locks || ! flock -n "$LOCKS/job-2.lock" true \
              || flock -n "$LOCKS/job-1.lock" true; do sleep 0.01; done
        mount -o remount,ro "$LOCKS"
        if touch "$LOCKS/probe" 2>/dev/null; then echo "not read-only" >&2; exit 9; fi
        set +e
        "$SELFHEAL" check --config "$CFG" --format json
        status=$?
        ls "$LOCKS" >&2
        kill "$holder"
        exit $status"#;
    let o = in_mount_namespace(script, &[("LOCKS", &locks), ("CFG", &cfg)]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 1)["verdict"], "hung", "{}", row(&rows, 1));
    assert_eq!(row(&rows, 1)["lock"], "held", "{}", row(&rows, 1));
    assert_eq!(row(&rows, 2)["verdict"], "dead", "{}", row(&rows, 2));
    assert_eq!(row(&rows, 2)["lock"], "free", "{}", row(&rows, 2));
    assert_eq!(row(&rows, 3)["lock"], "absent", "{}", row(&rows, 3));
    assert_eq!(
        stderr(&o).split_whitespace().collect::<Vec<_>>(),
        ["job-1.lock", "job-2.lock"],
        "both lock files are still there"
    );
    assert_eq!(db.status(1), "wait_manual");
    assert_eq!(db.status(2), "error");
}

// ---------------------------------------------------------------------------------------
// Settling a stopped run's intents: journaled as selfheal's only where the row proves it

/// Runs `check --force` under strace, which kills it with SIGKILL at its first `syscall` on
/// `file` (`-P`: only the syscalls that touch that file count), and asserts it died there.
#[track_caller]
fn killed_on_file(cfg: &Path, file: &Path, syscall: &str) {
    let o = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(file)
        .arg(format!("--inject={syscall}:signal=KILL:when=1"))
        .arg(bin())
        .args(["check", "--force", "--config"])
        .arg(cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        .output()
        .expect("strace");
    assert_eq!(
        o.status.signal(),
        Some(9),
        "not killed at its first {syscall} on {}: {}",
        file.display(),
        stderr(&o)
    );
}

/// A run killed with its intents on disk and no row written yet: at the flush of the
/// intents.
#[track_caller]
fn killed_before_its_writes(sb: &Sandbox, cfg: &Path) {
    killed_on_file(cfg, &sb.state_dir().join("pending.jsonl"), "fdatasync");
}

/// A run killed with its rows written and not one journal line: at its first write to the
/// journal.
#[track_caller]
fn killed_before_its_journal(sb: &Sandbox, cfg: &Path) {
    killed_on_file(cfg, &sb.state_dir().join("journal.jsonl"), "write");
}

/// The standard watch with `confirm = 1` and no message column: a row that shows the
/// target status cannot tell selfheal's write from the job's own.
fn watch_without_message(sb: &Sandbox) -> String {
    sb.watch("confirm = 1\n")
        .replace("message_column = \"error_msg\"\n", "")
}

fn sqlite_start(db: &SqliteDb, id: i64) -> String {
    db.conn()
        .query_row("SELECT start_time FROM sync_log WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .expect("start")
}

fn warnings(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("selfheal: warning: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_stopped_runs_change_the_job_made_itself_is_journaled_unknown_never_as_selfheals() {
    if !strace_or_skip() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=2 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&db.url(), &watch_without_message(&sb));
    killed_before_its_writes(&sb, &cfg);
    assert_eq!(
        (db.status(1), db.status(2)),
        ("running".into(), "running".into())
    );
    let started: Vec<String> = (1..=2).map(|id| sqlite_start(&db, id)).collect();
    // Before the next run, each job fails and writes the very status selfheal was about
    // to write, itself.
    db.exec("UPDATE sync_log SET status = 'error', end_time = datetime('now')");
    let before = db.dump();

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    let said = warnings(&o);
    assert_eq!(said.len(), 1, "said once for the run: {said:?}");
    assert!(
        said[0].contains("2 changes a stopped run was making show in their rows")
            && said[0].contains("watch 'full-sync' has no message_column")
            && said[0].contains("\"outcome\": \"unknown\""),
        "{said:?}"
    );
    assert_eq!(db.dump(), before, "nothing written");
    let j = sb.journal();
    assert_eq!(j.len(), 2, "{j:?}");
    for (e, (id, start)) in j.iter().zip((1..=2).zip(&started)) {
        assert_eq!(e["id"], id, "{e}");
        assert_eq!(
            (&e["outcome"], &e["outcome_basis"], &e["applied"]),
            (
                &"unknown".into(),
                &"no_message_column".into(),
                &false.into()
            ),
            "{e}"
        );
        assert!(e.get("recovered").is_none(), "not a recovered change: {e}");
        assert_eq!(
            e["found"],
            serde_json::json!({"status": "error", "started": start})
        );
        assert_eq!(e["started"], start.as_str());
    }
    assert!(pending_is_empty(&sb.state_dir()));

    // Not selfheal's as far as stats knows: two finished runs, none marked by selfheal.
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().expect("a watch")).expect("json");
    assert_eq!(
        (&first["finished"], &first["marked"]),
        (&2.into(), &0.into()),
        "{first}"
    );
    // show's history says what it was.
    let o = selfheal()
        .args(["show", "full-sync", "1", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.contains("'running'→'error' tried by selfheal on ")
            && text.contains(", outcome unknown\n")
            && text.contains(
                "found   the row showed 'error' at the same start, but the watch has no \
                 message_column"
            ),
        "{text}"
    );
    // Settled: the next run says nothing and journals nothing more.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");
    assert_eq!(sb.journal().len(), 2);
}

#[test]
fn a_stopped_runs_change_is_recovered_where_the_row_carries_selfheals_own_message() {
    if !strace_or_skip() {
        return;
    }
    // Killed between its writes and its journal: both rows carry selfheal's message.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=2 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    killed_before_its_journal(&sb, &cfg);
    assert_eq!(sb.journal().len(), 0);
    for (id, status, ended, msg) in db.dump() {
        assert!(
            status == "error" && ended && msg.starts_with("self-heal: dead:"),
            "row {id}: {status} {msg}"
        );
    }
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let said = warnings(&o);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("journaled 2 change(s) that a stopped run made without journaling"),
        "{said:?}"
    );
    let j = sb.journal();
    assert_eq!(j.len(), 2);
    for e in &j {
        assert_eq!(
            (&e["recovered"], &e["applied"]),
            (&true.into(), &true.into()),
            "{e}"
        );
        assert!(
            e.get("outcome").is_none() && e.get("found").is_none(),
            "a change made: {e}"
        );
    }

    // Killed before its write: the job then fails and writes 'error' with its own message.
    // The message column tells: not selfheal's.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    sb.heartbeat(1, secs(47 * MIN));
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    killed_before_its_writes(&sb, &cfg);
    db.exec(
        "UPDATE sync_log SET status = 'error', end_time = datetime('now'), \
         error_msg = 'worker: API down'",
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let said = warnings(&o);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(
            "1 change a stopped run was making no longer matches its row (e.g. watch \
             full-sync id=1: the row showed 'error' with another message than selfheal's)"
        ) && said[0].contains("\"outcome\": \"unmatched\""),
        "{said:?}"
    );
    let j = sb.journal();
    assert_eq!(j.len(), 1);
    assert_eq!(
        (&j[0]["outcome"], &j[0]["outcome_basis"], &j[0]["applied"]),
        (&"unmatched".into(), &"other_message".into(), &false.into()),
        "{}",
        j[0]
    );
    assert_eq!(
        db.dump()[0].3,
        "worker: API down",
        "the job's message stays"
    );
}

#[test]
fn a_stopped_runs_change_whose_row_moved_on_or_is_gone_is_journaled_unmatched_with_the_reason() {
    if !strace_or_skip() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(47 * MIN));
    }
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    killed_before_its_journal(&sb, &cfg);
    let started: Vec<String> = (1..=4).map(|id| sqlite_start(&db, id)).collect();
    // Before the next run: row 1 was retried and started again (a new start, beating);
    // row 2 was deleted; a person set row 3 to 'done' with a message of their own; row 4
    // is as selfheal left it.
    db.exec(
        "UPDATE sync_log SET status = 'running', start_time = datetime('now', '-10 seconds'), \
         end_time = NULL, error_msg = '' WHERE id = 1; \
         DELETE FROM sync_log WHERE id = 2; \
         UPDATE sync_log SET status = 'done', error_msg = 'finished by hand' WHERE id = 3;",
    );
    sb.heartbeat(1, secs(2));
    let restarted = sqlite_start(&db, 1);
    let before = db.dump();

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.dump(), before, "row 1 is alive, the rest not running");
    let said = warnings(&o);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said.iter()
            .any(|w| w.contains("journaled 1 change(s) that a stopped run made")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|w| w.contains(&format!(
            "3 changes a stopped run was making no longer match their rows (e.g. watch \
             full-sync id=1: the row's start moved from {} to {restarted} (status 'running'))",
            started[0]
        )) && w.contains("\"outcome\": \"unmatched\"")),
        "{said:?}"
    );
    let j = sb.journal();
    let by_id = |id: i64| {
        j.iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("row {id} not journaled: {j:?}"))
    };
    assert_eq!(j.len(), 4, "every intent journaled: {j:?}");
    let e = by_id(1);
    assert_eq!(
        (&e["outcome"], &e["outcome_basis"]),
        (&"unmatched".into(), &"start_moved".into()),
        "{e}"
    );
    assert_eq!(
        e["found"],
        serde_json::json!({"status": "running", "started": restarted})
    );
    assert_eq!(e["started"], started[0].as_str());
    let e = by_id(2);
    assert_eq!(
        (&e["outcome"], &e["outcome_basis"]),
        (&"unmatched".into(), &"row_gone".into()),
        "{e}"
    );
    assert!(e.get("found").is_none(), "{e}");
    let e = by_id(3);
    assert_eq!(
        (&e["outcome"], &e["outcome_basis"], &e["found"]["status"]),
        (&"unmatched".into(), &"status_moved".into(), &"done".into()),
        "{e}"
    );
    let e = by_id(4);
    assert_eq!(
        (&e["recovered"], &e["applied"]),
        (&true.into(), &true.into()),
        "{e}"
    );
    assert!(e.get("outcome").is_none(), "{e}");
    for e in &j {
        if e["id"] != 4 {
            assert_eq!(
                (&e["applied"], e.get("recovered")),
                (&false.into(), None),
                "{e}"
            );
        }
    }
    assert!(pending_is_empty(&sb.state_dir()));
}

#[test]
fn a_stopped_runs_change_whose_on_update_start_moved_is_journaled_unmatched_mariadb() {
    if !strace_or_skip() {
        return;
    }
    let mut db = mysql_or_skip!();
    // The first TIMESTAMP column of a table on older MySQL: a write to the row that does
    // not assign it moves it.
    db.create_sync_log("TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP");
    let sb = Sandbox::new();
    db.insert(1, "running", 50 * MIN);
    sb.heartbeat(1, secs(47 * MIN));
    let start = |db: &mut MysqlDb| -> String {
        db.query::<String>("SELECT CAST(start_time AS CHAR) FROM sync_log WHERE id = 1")[0].clone()
    };
    let seen = start(&mut db);
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    killed_before_its_journal(&sb, &cfg);
    assert_eq!(db.row(1).0, "error");
    // Whatever selfheal's own write did to it, the application's next write to the row
    // moves it.
    db.exec("UPDATE sync_log SET attempts = attempts + 1 WHERE id = 1");
    let now = start(&mut db);
    assert_ne!(seen, now, "the start column moved");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let said = warnings(&o);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(&format!(
            "1 change a stopped run was making no longer matches its row (e.g. watch \
             full-sync id=1: the row's start moved from {seen} to {now} (status 'error'))"
        )),
        "{said:?}"
    );
    let j = sb.journal();
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(
        (&j[0]["outcome"], &j[0]["outcome_basis"], &j[0]["applied"]),
        (&"unmatched".into(), &"start_moved".into(), &false.into()),
        "{}",
        j[0]
    );
    assert_eq!(
        j[0]["found"],
        serde_json::json!({"status": "error", "started": now})
    );
    assert!(pending_is_empty(&sb.state_dir()));
}

#[test]
fn a_park_a_stopped_run_cannot_tell_as_its_own_is_never_undone() {
    if !strace_or_skip() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 7: silent for 20 minutes while its worker holds its lock: hung, to be parked.
    db.insert(7, "running", 30 * MIN);
    sb.heartbeat(7, secs(20 * MIN));
    let holder = flock1_holder(&sb.lock_path(7), false);
    let watch = format!(
        "{}lock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
        watch_without_message(&sb),
        sb.lock_template()
    );
    let cfg = sb.config(&db.url(), &watch);
    killed_before_its_writes(&sb, &cfg);
    assert_eq!(db.status(7), "running");
    // Someone else parks it before the next run (a person by hand, the application's own
    // watchdog): the row shows what selfheal was about to write.
    db.exec("UPDATE sync_log SET status = 'wait_manual' WHERE id = 7");
    let o = check(&cfg, &[]);
    // Parked, it needs a person: exit 1.
    assert_exit(&o, 1);
    assert!(
        warnings(&o)
            .iter()
            .any(|w| w.contains("\"outcome\": \"unknown\"")),
        "{}",
        stderr(&o)
    );
    let j = sb.journal();
    assert_eq!(
        (j.len(), &j[0]["action"], &j[0]["outcome"]),
        (1, &"mark_manual".into(), &"unknown".into()),
        "{j:?}"
    );
    // The worker beats again after that: a park of selfheal's as hung would be undone now;
    // this one is not known to be selfheal's, and stays for a person.
    std::thread::sleep(Duration::from_millis(1100));
    sb.heartbeat(7, secs(0));
    let o = check(&cfg, &["--format", "json"]);
    assert_eq!(db.status(7), "wait_manual", "{}", stdout(&o));
    assert_eq!(sb.journal().len(), 1);
    drop(holder);
}

/// A run killed after its intents reached the disk and before any row was written: the
/// next run finds each row as the stopped one did. Nothing was changed, so nothing is
/// journaled for the intents — but they are not dropped unsaid: one warning says so, and
/// the rows are judged (and marked) again by the run itself, each journaled once.
#[test]
fn a_stopped_runs_changes_it_never_made_are_said_and_judged_again() {
    if !strace_or_skip() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Two silent rows beside three beating ones (not a mass death the breaker holds).
    for id in 1..=5 {
        db.insert(id, "running", 50 * MIN);
        sb.heartbeat(id, secs(if id <= 2 { 47 * MIN } else { 10 }));
    }
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    killed_before_its_writes(&sb, &cfg);
    assert!(
        (1..=2).all(|id| db.status(id) == "running"),
        "no row written"
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let said = warnings(&o);
    assert!(
        said.iter().any(|w| w.contains(
            "2 changes a stopped run was about to make were never made (the rows are as it \
             found them): this run judges them again"
        )),
        "{said:?}"
    );
    assert!((1..=2).all(|id| db.status(id) == "error"));
    assert!((3..=5).all(|id| db.status(id) == "running"));
    let j = sb.journal();
    assert_eq!(j.len(), 2, "each row journaled once, by this run: {j:?}");
    assert!(
        j.iter()
            .all(|e| e.get("outcome").is_none() && e.get("recovered").is_none())
    );
    assert!(pending_is_empty(&sb.state_dir()));
}
