//! `Selfheal\Lease` (`php/Selfheal/Lease.php`), the job's side of the lease loop, with
//! php-cli, real processes and real databases (MariaDB and SQLite files), driven through
//! `tests/php/lease_driver.php`:
//! - two PHP processes claiming one row at the same moment (both spinning on a barrier
//!   file): exactly one wins, 200 rounds; eight workers with `claimNext` over 500 rows:
//!   every row claimed exactly once;
//! - a worker whose row is taken away — by a plain `UPDATE` as another tool makes it, by a
//!   successor's claim, by a real `selfheal check` that reclaimed it while the worker was
//!   stopped (its pid invisible to check: no owner column, or check in another pid
//!   namespace) — throws `LeaseLost` at its next `beat()`, and its late `finish('done')`
//!   changes nothing; a killed worker's row goes back to the queue and to the next worker;
//!   a worker parked as `hung` keeps its row: it beats and finishes;
//! - `retryLater` and `finish` on both databases with DATETIME, TIMESTAMP and integer
//!   time columns, every time from the database's clock, and `selfheal check` reading what
//!   the lease wrote as alive; beats within one second are not a lost lease on MySQL;
//! - errors are exceptions with a sentence (a killed connection with `ERRMODE_SILENT`, a
//!   bad specification, a claim inside a transaction), never a silent false;
//! - the job author's guide's worker runs as printed on the guide's own table (MariaDB and
//!   SQLite), which `selfheal init` recognises and the recipes' watch judges; the PHP files are PHP 7.0 (`php -l` and a scan
//!   for newer syntax with PHP-Parser, which is checked to find each construct).
//!
//! Skipped outside CI when php, its PDO driver, PHP-Parser or a MariaDB server is missing;
//! fails in CI.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::php::lease_harness::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Claims

/// Two processes spin on a barrier file, then claim the same pending row: exactly one
/// wins each round, and the row names it.
#[test]
fn two_workers_claiming_one_row_at_the_same_moment_exactly_one_wins() {
    const ROUNDS: usize = 200;
    for mut env in both() {
        env.insert_pending(1..=1);
        let dir = env.sb.path("barrier");
        std::fs::create_dir(&dir).expect("barrier dir");
        let args = [
            "--mode",
            "race",
            "--id",
            "1",
            "--rounds",
            &ROUNDS.to_string(),
            "--dir",
            dir.to_str().expect("utf-8"),
        ];
        let mut a = Php::spawn(&env, &spec(&json!({})), &args);
        let mut b = Php::spawn(&env, &spec(&json!({})), &args);
        let mut wins = [0, 0];
        for r in 1..=ROUNDS {
            assert_eq!(a.line(), format!("ready {r}"));
            assert_eq!(b.line(), format!("ready {r}"));
            std::fs::write(dir.join(format!("go-{r}")), "").expect("barrier");
            let results = [a.line(), b.line()];
            let won: Vec<usize> = (0..2)
                .filter(|&i| results[i] == format!("{r} won"))
                .collect();
            assert_eq!(won.len(), 1, "{}: round {r}: {results:?}", env.name());
            let other = 1 - won[0];
            assert_eq!(results[other], format!("{r} lost"), "{}", env.name());
            wins[won[0]] += 1;
            let winner = if won[0] == 0 { a.owner() } else { b.owner() };
            let (status, worker, ..) = env.row(1);
            assert_eq!((status.as_str(), worker), ("running", winner), "round {r}");
            env.exec("UPDATE sync_log SET status = 'pending', worker = NULL WHERE id = 1");
        }
        eprintln!("{}: {ROUNDS} rounds, wins {wins:?}", env.name());
    }
}

/// Eight workers take 500 pending rows with claimNext (each finishing its row): every row
/// is claimed exactly once, and finished by the worker that claimed it.
#[test]
fn eight_workers_with_claim_next_over_500_rows_claim_each_row_exactly_once() {
    const ROWS: i64 = 500;
    for mut env in both() {
        env.insert_pending(1..=ROWS);
        let dir = env.sb.path("barrier");
        std::fs::create_dir(&dir).expect("barrier dir");
        let args = ["--mode", "next", "--dir", dir.to_str().expect("utf-8")];
        let mut workers: Vec<Php> = (0..8)
            .map(|_| Php::spawn(&env, &spec(&json!({})), &args))
            .collect();
        for w in &mut workers {
            assert_eq!(w.line(), "ready");
        }
        std::fs::write(dir.join("go"), "").expect("barrier");
        let mut claimed_by: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for w in &mut workers {
            let mut n = 0;
            loop {
                let line = w.line();
                if let Some(id) = line.strip_prefix("claimed ") {
                    claimed_by
                        .entry(id.parse().expect("id"))
                        .or_default()
                        .push(w.owner());
                    n += 1;
                } else {
                    assert_eq!(line, format!("end {n}"), "{}", env.name());
                    break;
                }
            }
        }
        let twice: Vec<_> = claimed_by.iter().filter(|(_, o)| o.len() > 1).collect();
        assert!(twice.is_empty(), "{}: claimed twice: {twice:?}", env.name());
        assert_eq!(
            claimed_by.keys().copied().collect::<Vec<_>>(),
            (1..=ROWS).collect::<Vec<_>>(),
            "{}: every row claimed",
            env.name()
        );
        for (id, owners) in &claimed_by {
            let (status, worker, ..) = env.row(*id);
            assert_eq!((status.as_str(), &worker), ("done", &owners[0]), "row {id}");
        }
        let per_worker: Vec<usize> = workers
            .iter()
            .map(|w| claimed_by.values().filter(|o| o[0] == w.owner()).count())
            .collect();
        eprintln!("{}: rows per worker {per_worker:?}", env.name());
    }
}

// ---------------------------------------------------------------------------------------
// A row taken away

/// Another tool sets the row's status; then a successor claims it; then the same process
/// claims a row again within the second of its first claim. Each time the worker that lost
/// the row finds out at its next beat() and its late finish() writes nothing.
#[test]
fn a_row_taken_away_is_noticed_at_the_next_beat_and_the_late_finish_writes_nothing() {
    for mut env in both() {
        env.insert_pending(1..=2);
        let mut w = Php::repl(&env, &spec(&json!({})));
        let c = ok(&w.send(&claim(1)));
        assert_eq!(
            c["owner"],
            w.owner(),
            "HOST:PID as Selfheal\\Job::owner() gives it"
        );
        assert_eq!(ok(&w.send(&op("beat"))), true);
        assert_eq!(ok(&w.send(&op("stillMine"))), true);

        // A plain UPDATE of the status, as another tool (or a person in a SQL client) does.
        env.exec("UPDATE sync_log SET status = 'pending' WHERE id = 1");
        let before = env.dump();
        lost(&w.send(&op("beat")), "pending");
        lost(&w.send(&finish("done")), "pending");
        lost(
            &w.send(&json!({"op": "retryLater", "reason": "late", "seconds": 0})),
            "pending",
        );
        assert_eq!(ok(&w.send(&op("stillMine"))), false);
        assert_eq!(
            env.dump(),
            before,
            "{}: the lost worker wrote nothing",
            env.name()
        );

        // A successor claims the row: the old worker's late writes cannot touch its claim.
        let mut s = Php::repl(&env, &spec(&json!({})));
        ok(&s.send(&claim(1)));
        let before = env.dump();
        lost(&w.send(&finish("done")), "pending");
        assert_eq!(env.dump(), before, "{}", env.name());
        ok(&s.send(&finish("done")));
        let (status, worker, ..) = env.row(1);
        assert_eq!((status.as_str(), worker), ("done", s.owner()));

        // One process, one row, claimed twice: same owner, and on MySQL (the session's
        // clock frozen) the same start. The first lease is superseded by the second.
        let mut p = Php::repl(&env, &spec(&json!({})));
        if env.is_mysql() {
            ok(&p.send(&json!({"op": "sql", "sql": "SET timestamp = UNIX_TIMESTAMP()"})));
        }
        let first = ok(&p.send(&json!({"op": "claim", "id": 2, "as": "x"})));
        env.exec("UPDATE sync_log SET status = 'pending' WHERE id = 2");
        let second = ok(&p.send(&json!({"op": "claim", "id": 2, "as": "y"})));
        if env.is_mysql() {
            assert_eq!(first["started"], second["started"], "the same start");
        }
        let before = env.dump();
        lost(&p.send(&json!({"op": "beat", "as": "x"})), "running");
        lost(
            &p.send(&json!({"op": "finish", "status": "done", "as": "x"})),
            "running",
        );
        assert_eq!(env.dump(), before, "{}", env.name());
        assert_eq!(ok(&p.send(&json!({"op": "beat", "as": "y"}))), true);
        ok(&p.send(&json!({"op": "finish", "status": "done", "as": "y"})));
        assert_eq!(env.row(2).0, "done");
    }
}

/// A worker stops (SIGSTOP) with nothing telling check it lives (no owner column, no lock):
/// its heartbeat column goes stale, a real `selfheal check` reclaims the row to
/// `retry_value`; the worker resumes, its next beat() throws LeaseLost and its finish()
/// changes nothing; the row is back in the queue for the next worker. Before the stop,
/// check leaves the beating worker alone for longer than stale_after.
#[test]
fn a_stopped_worker_check_reclaimed_notices_at_its_next_beat_and_writes_nothing() {
    for mut env in both() {
        env.insert_pending(1..=1);
        let cfg = env.config("");
        let mut w = Php::repl(&env, &spec(&json!({"every": 0.2})));
        ok(&w.send(&claim(1)));
        let gate = env.sb.path("gate");
        let work = json!({"op": "work", "gate": gate, "pause_ms": 20});
        w.post(&work);

        let before = env.dump();
        let started = Instant::now();
        let mut runs = 0;
        while runs < 3 || started.elapsed() < secs(4) {
            let o = check(&cfg, &["--format", "json"]);
            assert_exit(&o, 0);
            let (rows, _) = json_lines(&o);
            assert_eq!(row(&rows, 1)["verdict"], "alive", "{}", env.name());
            runs += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
        assert_eq!(env.row(1).0, "running");
        assert_eq!(
            env.dump()[0][..3],
            before[0][..3],
            "id, status, start unchanged"
        );

        // On SQLite the worker stops between two beats, never inside a write (which would
        // hold the database's write lock for the whole stop); on a server wherever it is.
        if env.is_sqlite() {
            std::fs::write(&gate, "").expect("gate");
            assert!(ok(&w.answer())["beats"].as_u64() > Some(0));
            std::fs::remove_file(&gate).expect("gate");
        }
        w.stop();
        env.wait_stale(1, 3);
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(
            (&r["verdict"], &r["action"], &r["applied"]),
            (&"dead".into(), &"mark_retry".into(), &true.into()),
            "{}: {r}",
            env.name()
        );
        let (status, _, attempts, msg, _) = env.row(1);
        assert_eq!((status.as_str(), attempts), ("pending", 1));
        assert!(msg.starts_with("self-heal: dead: "), "{msg}");

        let before = env.dump();
        w.cont();
        if env.is_sqlite() {
            w.post(&work);
        }
        lost(&w.answer(), "pending");
        lost(&w.send(&finish("done")), "pending");
        assert_eq!(
            env.dump(),
            before,
            "{}: the late finish wrote nothing",
            env.name()
        );

        // The next worker takes the row: attempts kept, end and message cleared.
        let mut next = Php::repl(&env, &spec(&json!({})));
        let c = ok(&next.send(&op("claimNext")));
        assert_eq!(c["id"], "1");
        assert_eq!(
            env.row(1),
            ("running".into(), next.owner(), 1, String::new(), false)
        );
        ok(&next.send(&finish("done")));
        assert_eq!(
            env.row(1),
            ("done".into(), next.owner(), 1, String::new(), true)
        );
    }
}

/// With an owner column, a stopped worker on this host is alive to check; seen from
/// another pid namespace (a container, a check run elsewhere) its pid is invisible and
/// the stale heartbeat reclaims the row. The worker resumes and notices.
#[test]
fn a_stopped_worker_whose_pid_check_cannot_see_is_reclaimed_and_notices() {
    if !root_or_skip("check in its own pid namespace (unshare --pid)") {
        return;
    }
    let Some(mut env) = Env::mysql("DATETIME") else {
        return;
    };
    env.insert_pending(1..=1);
    let cfg = env.config("owner_column = \"worker\"\n");
    let mut w = Php::repl(&env, &spec(&json!({"every": 0.2})));
    ok(&w.send(&claim(1)));
    let gate = env.sb.path("gate");
    w.post(&json!({"op": "work", "gate": gate, "pause_ms": 20}));
    std::thread::sleep(Duration::from_millis(500));
    w.stop();
    env.wait_stale(1, 3);

    // From the host's namespace: the owner lives, so the row is hung (no manual_value:
    // reported, not written).
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["owner"]),
        (&"hung".into(), &"alive".into()),
        "{r}"
    );
    assert_eq!(env.row(1).0, "running");

    let o = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .args(["--format", "json"])
        .env_remove("SELFHEAL_CONFIG")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        .output()
        .expect("unshare");
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["owner"], &r["action"], &r["applied"]),
        (
            &"dead".into(),
            &"not_visible".into(),
            &"mark_retry".into(),
            &true.into()
        ),
        "{r}"
    );
    let before = env.dump();
    w.cont();
    lost(&w.answer(), "pending");
    lost(&w.send(&finish("done")), "pending");
    assert_eq!(env.dump(), before);
}

/// A killed worker (owner column: its pid is gone) is reclaimed by the first check after
/// its heartbeat went stale (before, its own fresh beat contradicts the death signal: the
/// row waits), and its row goes to the next worker's claimNext.
#[test]
fn a_killed_workers_row_is_reclaimed_at_once_and_goes_to_the_next_worker() {
    let Some(mut env) = Env::mysql("DATETIME") else {
        return;
    };
    env.insert_pending(1..=1);
    let cfg = env.config("owner_column = \"worker\"\n");
    let mut w = Php::repl(&env, &spec(&json!({"every": 0.2})));
    ok(&w.send(&claim(1)));
    w.post(&json!({"op": "work", "gate": env.sb.path("gate"), "pause_ms": 20}));
    std::thread::sleep(Duration::from_millis(300));
    w.kill9();

    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    // Its own beat is fresh: the row waits (alive while younger than stale_after, when a
    // gone pid proves nothing yet; contradicted after).
    let r = row(&rows, 1);
    assert!(
        r["held"] == "contradicted" || r["verdict"] == "alive",
        "{r}"
    );
    assert_eq!(r["action"], "none", "{r}");
    assert_eq!(env.row(1).0, "running");
    env.wait_stale(1, 3);
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["owner"], &r["action"], &r["applied"]),
        (
            &"dead".into(),
            &"dead".into(),
            &"mark_retry".into(),
            &true.into()
        ),
        "{r}"
    );
    assert_eq!(env.row(1).0, "pending");
    let mut next = Php::repl(&env, &spec(&json!({})));
    let c = ok(&next.send(&op("claimNext")));
    assert_eq!(c["id"], "1");
    assert_eq!(
        env.row(1),
        ("running".into(), next.owner(), 1, String::new(), false)
    );
    ok(&next.send(&finish("done")));
    assert_eq!(env.row(1).0, "done");
}

/// A worker stopped past stale_after on this host (its pid lives) is parked as hung in
/// manual_value. The row is still its own: when it resumes, beat() renews the heartbeat
/// (and touches its heartbeat file, through Selfheal\Job) without throwing, and finish()
/// succeeds and clears the park message.
#[test]
fn a_worker_parked_as_hung_keeps_its_row_beats_and_finishes() {
    let Some(mut env) = Env::mysql("DATETIME") else {
        return;
    };
    env.insert_pending(1..=1);
    let cfg = env.config("owner_column = \"worker\"\nmanual_value = \"wait_manual\"\n");
    let hb = env.sb.path("hb-1");
    let mut w = Php::repl(
        &env,
        &spec(&json!({
            "every": 0.2, "manual_value": "wait_manual",
            "heartbeat_file": env.sb.heartbeat_template(),
        })),
    );
    ok(&w.send(&claim(1)));
    assert!(hb.exists(), "the claim touched the heartbeat file");
    let gate = env.sb.path("gate");
    w.post(&json!({"op": "work", "gate": gate, "pause_ms": 20}));
    std::thread::sleep(Duration::from_millis(500));
    w.stop();
    env.wait_stale(1, 3);
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["action"], &r["applied"]),
        (&"hung".into(), &"mark_manual".into(), &true.into()),
        "{r}"
    );
    let (status, _, _, msg, ended) = env.row(1);
    assert_eq!((status.as_str(), ended), ("wait_manual", false));
    assert!(msg.starts_with("self-heal: hung: "), "{msg}");

    let file_before = std::fs::metadata(&hb)
        .and_then(|m| m.modified())
        .expect("mtime");
    w.cont();
    wait_until("the parked worker beats again", secs(30), || {
        env.age("heartbeat_at", 1) < 2
    });
    wait_until("the heartbeat file is touched again", secs(30), || {
        std::fs::metadata(&hb)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > file_before)
    });
    std::fs::write(&gate, "").expect("gate");
    let done = ok(&w.answer());
    assert!(done["beats"].as_u64() > Some(0), "{done}");
    assert_eq!(
        env.row(1).0,
        "wait_manual",
        "parked, and still this worker's"
    );
    ok(&w.send(&finish("done")));
    assert_eq!(
        env.row(1),
        ("done".into(), w.owner(), 0, String::new(), true)
    );
}

// ---------------------------------------------------------------------------------------
// retryLater, finish, column types, the database's clock

/// On MariaDB (DATETIME, TIMESTAMP, BIGINT) and SQLite (TEXT, INTEGER) time columns:
/// every time is the database's now; retryLater sends the row back with attempts + 1, the
/// reason and a retry_at claims honour; used-up attempts go to manual_value; finish sets
/// the status, the end time and the message (cut to the column on MySQL); and
/// `selfheal check` reads what the lease wrote as alive.
#[test]
fn retry_later_and_finish_on_both_databases_with_every_kind_of_time_column() {
    for mut env in Env::every_time_column() {
        let name = env.name();
        env.insert_pending(1..=3);
        let mut w = Php::repl(
            &env,
            &spec(&json!({"max_attempts": 2, "manual_value": "wait_manual"})),
        );
        ok(&w.send(&claim(1)));
        assert_eq!(
            env.row(1),
            ("running".into(), w.owner(), 0, String::new(), false)
        );
        for col in ["start_time", "heartbeat_at"] {
            let age = env.age(col, 1);
            assert!((0..=5).contains(&age), "{name}: {col} {age} s old");
        }
        if env.integer_times() && env.is_sqlite() {
            let start = env.one("SELECT typeof(start_time) FROM sync_log WHERE id = 1");
            assert_eq!(start.as_deref(), Some("integer"), "{name}: unix seconds");
        }

        // selfheal reads what the lease wrote.
        let cfg = env.config("");
        let o = check(&cfg, &["--format", "json", "--dry-run"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "alive", "{name}: {r}");
        assert!(r["total_age_s"].as_i64() < Some(10), "{name}: {r}");

        // retryLater: back to the queue for 60 s.
        assert_eq!(
            ok(&w.send(&json!({"op": "retryLater", "reason": "api 503", "seconds": 60}))),
            "pending"
        );
        assert_eq!(
            env.row(1),
            ("pending".into(), w.owner(), 1, "api 503".into(), true)
        );
        let wait = -env.age("retry_at", 1);
        assert!((55..=60).contains(&wait), "{name}: retry_at in {wait} s");
        let ended = env.age("end_time", 1);
        assert!((0..=5).contains(&ended), "{name}: end_time {ended} s ago");
        assert_eq!(
            ok(&w.send(&claim(1))),
            Value::Null,
            "{name}: not due before retry_at"
        );
        let c = ok(&w.send(&json!({"op": "claimNext", "as": "b"})));
        assert_ne!(c["id"], "1", "{name}: claimNext skips a row not due");
        ok(&w.send(&json!({"op": "finish", "status": "done", "as": "b"})));
        let other = if c["id"] == "2" { 3 } else { 2 };

        // Due again: claimed, the end and the message cleared; retried at once (0 s).
        env.exec("UPDATE sync_log SET retry_at = start_time WHERE id = 1");
        ok(&w.send(&claim(1)));
        assert_eq!(
            env.row(1),
            ("running".into(), w.owner(), 1, String::new(), false)
        );
        assert_eq!(
            ok(&w.send(&json!({"op": "retryLater", "reason": "again", "seconds": 0}))),
            "pending"
        );
        assert!(-env.age("retry_at", 1) <= 0, "{name}: due at once");
        ok(&w.send(&claim(1)));

        // Attempts used up (2 of max_attempts 2): to manual_value, not the queue.
        assert_eq!(
            ok(&w.send(&json!({"op": "retryLater", "reason": "third", "seconds": 0}))),
            "wait_manual"
        );
        let (status, _, attempts, msg, _) = env.row(1);
        assert_eq!(
            (status.as_str(), attempts, msg.as_str()),
            ("wait_manual", 3, "retries used up (2 of 2): third"),
            "{name}"
        );
        assert_eq!(ok(&w.send(&claim(1))), Value::Null, "{name}: a parked row");

        // finish: status, end time, message; a long message is cut to the column (MySQL).
        ok(&w.send(&claim(other)));
        let long = "é".repeat(300);
        ok(&w.send(&json!({"op": "finish", "status": "failed", "message": long})));
        let (status, _, _, msg, ended) = env.row(other);
        assert_eq!((status.as_str(), ended), ("failed", true), "{name}");
        let chars = msg.chars().count();
        assert_eq!(chars, if env.is_sqlite() { 300 } else { 255 }, "{name}");
        threw(
            &w.send(&finish("done")),
            "LogicException",
            "whose lease already ended",
        );
    }
}

/// MySQL reports 0 affected rows for an UPDATE that changed nothing: with the session's
/// clock frozen every beat writes the same heartbeat, and none of them is a lost lease.
#[test]
fn beats_within_one_second_are_not_a_lost_lease() {
    for mut env in both() {
        env.insert_pending(1..=1);
        let mut w = Php::repl(&env, &spec(&json!({})));
        if env.is_mysql() {
            ok(&w.send(&json!({"op": "sql", "sql": "SET timestamp = UNIX_TIMESTAMP()"})));
        }
        ok(&w.send(&claim(1)));
        let r = ok(&w.send(&json!({"op": "beats", "n": 30, "pause_ms": 2})));
        assert_eq!(r, 30, "{}: every beat renewed, none threw", env.name());
        ok(&w.send(&finish("done")));
        assert_eq!(env.row(1).0, "done");
    }
}

// ---------------------------------------------------------------------------------------
// Errors

/// A connection the server killed, on a PDO left in ERRMODE_SILENT (PHP 7's default): the
/// next beat is a RuntimeException that says what failed, and the mode is restored.
#[test]
fn a_database_error_is_an_exception_with_a_sentence_even_in_silent_mode() {
    let Some(mut env) = Env::mysql("DATETIME") else {
        return;
    };
    env.insert_pending(1..=1);
    let mut w = Php::spawn(
        &env,
        &spec(&json!({})),
        &["--mode", "repl", "--errmode", "silent"],
    );
    ok(&w.send(&claim(1)));
    let id = ok(&w.send(&op("connection_id")));
    env.exec(&format!("KILL {id}"));
    let r = w.send(&op("beat"));
    threw(
        &r,
        "RuntimeException",
        "Selfheal\\Lease: renewing the lease of row 1 of sync_log failed: SQLSTATE",
    );
    assert_eq!(r["previous"], "PDOException", "{r}");
    assert_eq!(
        ok(&w.send(&op("errmode"))),
        0,
        "PDO::ERRMODE_SILENT restored"
    );
}

/// A bad specification, a claim or a beat inside a transaction, a finish to the running
/// status, a wait without retry_at_column: each an exception with a sentence, and the table
/// untouched.
#[test]
fn misuse_is_an_exception_with_a_sentence_and_touches_nothing() {
    let Some(mut env) = Env::sqlite("TEXT") else {
        return;
    };
    env.insert_pending(1..=2);
    let before = env.dump();
    let mut w = Php::repl(&env, &spec(&json!({})));
    let bad = [
        (
            json!({"started_colum": "start_time"}),
            "unknown key 'started_colum' (did you mean 'started_column'?)",
        ),
        (
            json!({"table": "sync_log; DROP TABLE sync_log"}),
            "'table' must be a table name or database.table",
        ),
        (
            json!({"heartbeat_column": "heartbeat_at = NULL --"}),
            "'heartbeat_column' must be a plain column name",
        ),
        (
            json!({"heartbeat_column": "beat"}),
            "table sync_log has no column beat ('heartbeat_column')",
        ),
        (json!({"owner_column": null}), "'owner_column' is required"),
        (
            json!({"claimable_values": ["pending", "running"]}),
            "'claimable_values' holds 'running'",
        ),
        (
            json!({"every": 0}),
            "'every' must be between 0.001 and 86400",
        ),
        (
            json!({"heartbeat_file": "relative/{id}"}),
            "'heartbeat_file' must be an absolute path",
        ),
        (json!({"table": "nosuch"}), "there is no table nosuch"),
    ];
    for (extra, text) in bad {
        ok(&w.send(&json!({"op": "spec", "spec": spec(&extra)})));
        threw(&w.send(&claim(1)), "InvalidArgumentException", text);
    }
    ok(&w.send(&json!({"op": "spec", "spec": spec(&json!({"retry_at_column": null}))})));
    ok(&w.send(&op("begin")));
    threw(
        &w.send(&op("claimNext")),
        "LogicException",
        "inside an open transaction",
    );
    ok(&w.send(&op("rollback")));
    assert_eq!(env.dump(), before);

    ok(&w.send(&claim(1)));
    ok(&w.send(&op("begin")));
    threw(
        &w.send(&op("beat")),
        "LogicException",
        "beat() inside an open transaction",
    );
    ok(&w.send(&op("rollback")));
    threw(
        &w.send(&finish("running")),
        "InvalidArgumentException",
        "that is running_value",
    );
    threw(
        &w.send(&json!({"op": "retryLater", "reason": "x", "seconds": 60})),
        "InvalidArgumentException",
        "needs retry_at_column",
    );
    assert_eq!(env.row(1).0, "running", "still held after the refusals");
    ok(&w.send(&finish("done")));
}

// ---------------------------------------------------------------------------------------
// Documentation and PHP 7.0

/// The job author's guide's Lease worker (also the man page's), as printed (the require
/// path and the connection pointed at the test's), on the guide's own `CREATE TABLE` for
/// MariaDB and for SQLite, over six rows: one whose API is down goes back to the queue for 5
/// minutes, one taken away while it works is left alone, the rest are done. Then
/// `selfheal init` recognises the table as a Lease queue, and the recipes' watch for it
/// loads and judges it.
#[test]
fn the_job_authors_worker_runs_as_printed_on_its_own_table() {
    let code = doc_block("docs/job-author.md", "php", "<?php // worker.php");
    let lines = code.lines().count();
    assert!((15..=30).contains(&lines), "about 20 lines: {lines}");
    // The man page shows the same worker (its first line aside).
    let man = std::fs::read_to_string(root().join("man/selfheal.1"))
        .expect("man page")
        .replace("\\(aq", "'")
        .replace("\\-", "-")
        .replace("\\e", "\\");
    for l in code.lines().skip(1) {
        assert!(man.contains(l), "the man page's example has {l:?}");
    }
    let recipe = doc_block(
        "docs/recipes.md",
        "toml",
        "[[watch]]\nname = \"sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\nheartbeat_column",
    );
    let mut ran = 0;
    for env in [Env::documented(true), Env::documented(false)] {
        let Some(mut env) = env else { continue };
        worker_runs_as_printed(&mut env, &code);
        let o = selfheal()
            .args(["init", "--url", &env.url(), "--table", "sync_log"])
            .output()
            .expect("init");
        assert_exit(&o, 0);
        assert!(
            stdout(&o).contains("as Selfheal\\Lease writes them"),
            "{}: init recognises the queue: {}",
            env.name(),
            stdout(&o)
        );
        let watch = recipe.strip_prefix("[[watch]]\n").expect("a watch");
        let cfg = env.sb.config(&env.url(), watch);
        let o = check(&cfg, &["--explain"]);
        assert_exit(&o, 0);
        ran += 1;
    }
    assert!(
        ran == 2 || std::env::var_os("CI").is_none(),
        "both databases in CI"
    );
}

fn worker_runs_as_printed(env: &mut Env, code: &str) {
    let (dsn, user, _) = env.dsn();
    let mut replaced = 0;
    let code: String = code
        .lines()
        .map(|l| {
            if l.starts_with("require ") {
                replaced += 1;
                format!(
                    "require '{}';",
                    root().join("php/Selfheal/Lease.php").display()
                )
            } else if l.starts_with("$pdo = new PDO(") {
                replaced += 1;
                format!("$pdo = new PDO('{dsn}', '{user}', getenv('DB_PASSWORD') ?: null);")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(replaced, 2, "the require and the connection lines");
    // What the example leaves to the application: its batches, its work, its exception.
    let app = env.sb.file(
        "app.php",
        "<?php
        class ApiUnavailable extends Exception {}
        function batches_of($pdo, $id) { return [$id * 10, $id * 10 + 1]; }
        function sync($batch) {
            global $pdo;
            if ($batch === 20) { throw new ApiUnavailable('api 503'); }
            if ($batch === 41) {   // another tool takes row 4 away while it works
                $pdo->exec(\"UPDATE sync_log SET status = 'cancelled' WHERE id = 4\");
            }
        }",
        0o644,
    );
    let worker = env.sb.file("worker.php", &code, 0o644);
    env.insert_pending(1..=6);
    let o = Command::new("php")
        .arg("-d")
        .arg(format!("auto_prepend_file={}", app.display()))
        .arg(&worker)
        .env("DB_PASSWORD", env.dsn().2)
        .output()
        .expect("php");
    assert!(o.status.success(), "{}: {o:?}", env.name());
    let err = stderr(&o);
    assert!(
        err.contains("row 4 of sync_log is no longer this worker's"),
        "LeaseLost is logged: {err}"
    );
    for id in [1, 3, 5, 6] {
        assert_eq!(env.row(id).0, "done", "row {id}");
    }
    let (status, _, attempts, msg, _) = env.row(2);
    assert_eq!(
        (status.as_str(), attempts, msg.as_str()),
        ("pending", 1, "api 503")
    );
    let wait = -env.age("retry_at", 2);
    assert!((295..=300).contains(&wait), "retry_at in {wait} s");
    assert_eq!(
        env.row(4).0,
        "cancelled",
        "the lost row is left as the other tool set it"
    );
}

/// Every PHP file the package installs is PHP 7.0: `php -l`, and no syntax or call newer
/// than 7.0 (the scanner is first shown to find each such construct in a fixture).
#[test]
fn the_php_helpers_are_php_7_0() {
    if !have_tool(
        "php",
        &[
            "-r",
            "exit(is_file('/usr/share/php/PhpParser/autoload.php') ? 0 : 1);",
        ],
        "PHP-Parser (Debian's php-parser)",
    ) {
        return;
    }
    let scanner = root().join("tests/php/compat70.php");
    let fixture = root().join("tests/php/compat70_fixture.php");
    let o = Command::new("php")
        .arg(&scanner)
        .arg(&fixture)
        .output()
        .expect("php");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let mut found: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for l in stdout(&o).lines() {
        let rest = l
            .strip_prefix(&format!("{}:", fixture.display()))
            .unwrap_or_else(|| panic!("{l}"));
        let (line, what) = rest.split_once(": ").expect("LINE: WHAT");
        let what = what.rsplit_once(" (PHP ").expect("(PHP X.Y)").0;
        found
            .entry(line.parse().expect("line"))
            .or_default()
            .push(what.to_string());
    }
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    let mut expected: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        if let Some((_, marks)) = l.split_once("// finds: ") {
            expected
                .entry(i + 1)
                .or_default()
                .extend(marks.split(", ").map(str::to_string));
        }
    }
    for v in found.values_mut().chain(expected.values_mut()) {
        v.sort();
    }
    assert!(expected.len() >= 25, "{expected:?}");
    assert_eq!(
        found, expected,
        "the scanner finds each construct, and nothing else"
    );

    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("php/Selfheal"))
        .expect("php/Selfheal")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "php"))
        .collect();
    files.sort();
    for name in [
        "Job.php",
        "Lease.php",
        "LeaseLost.php",
        "LockNotObtained.php",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(name)),
            "{name} in php/Selfheal"
        );
    }
    for f in &files {
        let o = Command::new("php")
            .arg("-l")
            .arg(f)
            .output()
            .expect("php -l");
        assert!(o.status.success(), "php -l {}: {o:?}", f.display());
    }
    let o = Command::new("php")
        .arg(&scanner)
        .args(&files)
        .output()
        .expect("php");
    assert!(
        o.status.success(),
        "newer than PHP 7.0:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}
