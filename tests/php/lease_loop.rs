//! The lease loop end to end (docs/design.md#lease, docs/design.md#person): PHP workers holding rows with
//! `Selfheal\Lease` (php-cli, `tests/php/lease_driver.php`) and the real `selfheal` binary
//! (`check`, `resolve`, `doctor`) on one job table, on MariaDB and in a SQLite file:
//! - a person takes a row from a live lease holder: `resolve --as retry` is refused while
//!   the worker's owner pid lives, `--force` sends the row back to the queue (due at once),
//!   the worker finds out at its next `beat()` and its late `finish()` writes nothing, and
//!   the journal names the person;
//! - a worker stalled past `stale_after` (SIGSTOP: its pid lives, its heartbeat column goes
//!   stale) is parked as `hung` after its confirmations; it resumes and beats on the parked
//!   row (still its own), the next `check` un-parks it and its `finish()` succeeds;
//!   `resolve --as running` is a person's way to the same;
//! - a killed worker's row is reclaimed with `retry_at` = the database's now + a backoff
//!   that doubles with each reclaim; another worker's `claimNext` waits until it is due;
//!   with its attempts used up the row is parked;
//! - `Lease`'s claims admit exactly the rows the picker condition `doctor` prints admits.
//!
//! Skipped outside CI when php, its PDO driver or a MariaDB server is missing; fails in CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::*;
use crate::php::lease_harness::*;
use serde_json::{Value, json};

/// The watch over `sync_log` as the lease loop uses it: judged by the heartbeat column the
/// lease renews (stale after 2 s) and the owner column the claim writes, confirmations as
/// configured by default (2 runs), a retry queue of 2 attempts whose rows wait
/// `retry_at_column` out (backoff 3 s, doubling), a place for people; plus `extra`.
fn loop_config(env: &Env, extra: &str) -> PathBuf {
    env.sb.config(
        &env.url(),
        &format!(
            "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_column = \"heartbeat_at\"\nowner_column = \"worker\"\n\
             stale_after = \"2s\"\nmax_age = \"1h\"\n\
             retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 2\n\
             retry_at_column = \"retry_at\"\nretry_backoff = \"3s\"\n\
             manual_value = \"wait_manual\"\n\
             ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n{extra}"
        ),
    )
}

/// The lease specification of the same watch (its own key names), renewing at most every
/// 0.2 s.
fn loop_spec() -> Value {
    spec(&json!({"manual_value": "wait_manual", "max_attempts": 2, "every": 0.2}))
}

/// `selfheal ARGS --config CFG` with `SUDO_USER` set: the person who decides.
fn selfheal_as(cfg: &Path, who: &str, args: &[&str]) -> Output {
    selfheal()
        .args(args)
        .arg("--config")
        .arg(cfg)
        .env("SUDO_USER", who)
        .output()
        .expect("run selfheal")
}

/// `selfheal check --format json`: exit status, and the row object of `id`.
fn check_row(cfg: &Path, id: i64) -> (Option<i32>, Value) {
    let o = check(cfg, &["--format", "json"]);
    let (rows, _) = json_lines(&o);
    (o.status.code(), row(&rows, id).clone())
}

/// The `work` command: beat() every 20 ms until the gate file exists or the lease is lost.
fn work(gate: &Path) -> Value {
    json!({"op": "work", "gate": gate, "pause_ms": 20})
}

/// Stops a working worker (SIGSTOP). On SQLite it first ends its `work` command, so that
/// it stops between two statements: stopped inside a write it would hold the database's
/// write lock for the whole stop, and `check` could not read the table.
fn stall(env: &Env, w: &mut Php, gate: &Path) {
    // Past the first beat.
    std::thread::sleep(Duration::from_millis(300));
    if env.is_sqlite() {
        std::fs::write(gate, "").expect("gate");
        let done = ok(&w.answer());
        assert!(done["beats"].as_u64() > Some(0), "{done}");
        std::fs::remove_file(gate).expect("gate");
    }
    w.stop();
}

/// Resumes a stalled worker (SIGCONT) at its work.
fn resume(env: &Env, w: &mut Php, gate: &Path) {
    w.cont();
    if env.is_sqlite() {
        w.post(&work(gate));
    }
}

/// Ends a worker's `work` command by its gate: it answers with the beats it made (it was
/// never told its lease was lost).
fn end_work(w: &mut Php, gate: &Path) {
    std::fs::write(gate, "").expect("gate");
    let done = ok(&w.answer());
    assert!(done["beats"].as_u64() > Some(0), "{done}");
    std::fs::remove_file(gate).expect("gate");
}

/// The answer to a `work` command that should end in LeaseLost. A worker that has not
/// noticed within 30 s has its gate opened and answers as one that never noticed (the
/// caller's assertion then fails), rather than the test waiting forever.
fn lost_at_work(w: &mut Php, gate: &Path) -> Value {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let gate = gate.to_path_buf();
    let opener = std::thread::spawn(move || {
        if rx.recv_timeout(secs(30)).is_err() {
            let _ = std::fs::write(&gate, "");
        }
    });
    let answer = w.answer();
    let _ = tx.send(());
    let _ = opener.join();
    answer
}

/// The journal's last line for row `id` with this action.
fn journaled(env: &Env, id: i64, action: &str) -> Value {
    env.sb
        .journal()
        .into_iter()
        .rev()
        .find(|e| e["id"] == id && e["action"] == action)
        .unwrap_or_else(|| panic!("no {action} of row {id} in {:?}", env.sb.journal()))
}

// ---------------------------------------------------------------------------------------
// A person takes a row from a live lease holder

/// A worker holds row 1 and beats. `selfheal resolve lease 1 --as retry` is refused: its
/// owner pid lives. With `--force` the row goes back to the queue (attempts + 1, due at
/// once: a person's retry does not wait), by alice. The worker finds out at its next beat
/// and stops; its late `finish('done')` writes nothing; a successor claims the row at once.
fn a_person_takes_a_row_from_a_live_lease_holder(mut env: Env) {
    let name = env.name();
    env.insert_pending(1..=1);
    let cfg = loop_config(&env, "");
    let mut w = Php::repl(&env, &loop_spec());
    ok(&w.send(&claim(1)));
    let gate = env.sb.path("gate");
    w.post(&work(&gate));
    // Past its first beats.
    std::thread::sleep(Duration::from_millis(500));

    let o = selfheal_as(
        &cfg,
        "alice",
        &[
            "resolve",
            "lease",
            "1",
            "--as",
            "retry",
            "--note",
            "stuck on the API",
        ],
    );
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains(&format!(
            "lease id=1: refused: the worker provably lives: its owner pid {} is alive",
            w.pid()
        )),
        "{name}: {}",
        stdout(&o)
    );
    assert_eq!(
        env.row(1),
        ("running".into(), w.owner(), 0, String::new(), false),
        "{name}: refused, so untouched"
    );

    // Forced. The compare-and-set matches the heartbeat it read, which the worker renews
    // every second: a beat between resolve's read and its write loses that race (exit 1,
    // lost_race), and the person runs it again.
    let mut tries = 0;
    let o = loop {
        tries += 1;
        let o = selfheal_as(
            &cfg,
            "alice",
            &[
                "resolve",
                "lease",
                "1",
                "--as",
                "retry",
                "--force",
                "--note",
                "stuck on the API",
            ],
        );
        if tries < 5 && o.status.code() == Some(1) && stdout(&o).contains("lost_race") {
            continue;
        }
        break o;
    };
    eprintln!("{name}: resolve --force made in {tries} tries");
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "lease id=1: set status to 'pending' (was 'running'): resolved as retry by alice\n",
        "{name}"
    );
    assert_eq!(
        env.row(1),
        (
            "pending".into(),
            w.owner(),
            1,
            "self-heal: resolved as retry by alice: stuck on the API".into(),
            true
        ),
        "{name}"
    );
    let due = env.age("retry_at", 1);
    assert!(
        (0..=5).contains(&due),
        "{name}: retry_at is the database's now (due {due} s ago)"
    );

    // The worker finds out at its next beat; its late finish writes nothing.
    lost(&lost_at_work(&mut w, &gate), "pending");
    let before = env.dump();
    lost(&w.send(&finish("done")), "pending");
    assert_eq!(env.dump(), before, "{name}: the late finish wrote nothing");

    // The person's decision, journaled with the actor and the note.
    let e = journaled(&env, 1, "mark_retry");
    assert_eq!(
        (&e["from"], &e["to"], &e["applied"]),
        (&"running".into(), &"pending".into(), &true.into()),
        "{name}: {e}"
    );
    assert_eq!(
        (&e["actor"], &e["decision_note"]),
        (&"alice".into(), &"stuck on the API".into()),
        "{name}: {e}"
    );
    assert!(
        e["note"].as_str().is_some_and(|n| n.contains("--force")),
        "{name}: {e}"
    );

    // Back in the queue, due at once: the next worker takes it.
    let mut next = Php::repl(&env, &loop_spec());
    assert_eq!(ok(&next.send(&op("claimNext")))["id"], "1", "{name}");
    ok(&next.send(&finish("done")));
    assert_eq!(
        env.row(1),
        ("done".into(), next.owner(), 1, String::new(), true),
        "{name}"
    );
}

#[test]
fn a_person_takes_a_row_from_a_live_lease_holder_mariadb() {
    if let Some(env) = Env::mysql("DATETIME") {
        a_person_takes_a_row_from_a_live_lease_holder(env);
    }
}

#[test]
fn a_person_takes_a_row_from_a_live_lease_holder_postgres() {
    if let Some(env) = Env::postgres("TIMESTAMP") {
        a_person_takes_a_row_from_a_live_lease_holder(env);
    }
}

#[test]
fn a_person_takes_a_row_from_a_live_lease_holder_sqlite() {
    if let Some(env) = Env::sqlite("TEXT") {
        a_person_takes_a_row_from_a_live_lease_holder(env);
    }
}

// ---------------------------------------------------------------------------------------
// Un-parking a lease

/// Two workers stall (SIGSTOP) past stale_after: their pids live, so `check` judges both
/// rows hung, and parks them in `manual_value` on its second run a cron period later (the
/// first only counts). Worker 1 resumes and beats on its parked row (still its own: no
/// LeaseLost); the next `check` un-parks it (journaled `recovered`) and its `finish('done')`
/// succeeds. Worker 2 resumes too, and a person puts its row back to running with
/// `resolve --as running` before any check does; it finishes as well.
fn a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again(mut env: Env) {
    let name = env.name();
    env.insert_pending(1..=2);
    let cfg = loop_config(&env, "");
    let gates = [env.sb.path("gate-1"), env.sb.path("gate-2")];
    let mut ws = [Php::repl(&env, &loop_spec()), Php::repl(&env, &loop_spec())];
    for ((id, w), gate) in (1..).zip(ws.iter_mut()).zip(&gates) {
        ok(&w.send(&claim(id)));
        w.post(&work(gate));
    }
    let (status, _) = check_row(&cfg, 1);
    assert_eq!(status, Some(0), "{name}: beating workers are left alone");
    for (w, gate) in ws.iter_mut().zip(&gates) {
        stall(&env, w, gate);
    }
    env.wait_stale(1, 3);
    env.wait_stale(2, 3);

    // The first run only counts; the next, a cron period later, parks both.
    let (status, r) = check_row(&cfg, 1);
    assert_eq!(
        (
            status,
            &r["verdict"],
            &r["owner"],
            &r["held"],
            &r["applied"]
        ),
        (
            Some(0),
            &"hung".into(),
            &"alive".into(),
            &"confirming".into(),
            &false.into()
        ),
        "{name}: {r}"
    );
    assert_eq!(env.row(1).0, "running", "{name}");
    next_cron_run(&env.sb);
    let (status, r) = check_row(&cfg, 1);
    assert_eq!(
        (status, &r["verdict"], &r["action"], &r["applied"]),
        (Some(1), &"hung".into(), &"mark_manual".into(), &true.into()),
        "{name}: {r}"
    );
    for (id, w) in (1..).zip(&ws) {
        let (status, worker, attempts, msg, ended) = env.row(id);
        assert_eq!(
            (status.as_str(), worker, attempts, ended),
            ("wait_manual", w.owner(), 0, false),
            "{name}: row {id} parked, still its worker's"
        );
        assert!(msg.starts_with("self-heal: hung: "), "{name}: {msg}");
    }

    // Worker 1 resumes after the park (the journal keeps whole seconds) and beats on its
    // parked row: renewed, no LeaseLost.
    std::thread::sleep(Duration::from_millis(1100));
    resume(&env, &mut ws[0], &gates[0]);
    wait_until("worker 1 beats on its parked row", secs(30), || {
        env.age("heartbeat_at", 1) <= 1
    });
    assert_eq!(env.row(1).0, "wait_manual", "{name}");

    // The next check un-parks it, says so once, and journals it.
    let o = check(&cfg, &[]);
    assert!(
        stdout(&o).contains(&format!(
            "lease id=1: set status back to 'running' (recovered) — self-heal: recovered: \
             heartbeat fresh again after the park, owner pid {} alive",
            ws[0].pid()
        )),
        "{name}: {}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("id=2: set"), "{name}: {}", stdout(&o));
    assert_eq!(
        (env.row(1).0, env.row(2).0),
        ("running".into(), "wait_manual".into()),
        "{name}: row 2 is still stalled"
    );
    let e = journaled(&env, 1, "recovered");
    assert_eq!(
        (&e["from"], &e["to"], &e["applied"]),
        (&"wait_manual".into(), &"running".into(), &true.into()),
        "{name}: {e}"
    );
    assert!(e.get("actor").is_none(), "{name}: selfheal's own: {e}");

    // Worker 1 ends its work and finishes: its lease held throughout.
    end_work(&mut ws[0], &gates[0]);
    ok(&ws[0].send(&finish("done")));
    assert_eq!(
        env.row(1),
        ("done".into(), ws[0].owner(), 0, String::new(), true),
        "{name}"
    );

    // Worker 2 resumes; a person who looked puts its row back to running.
    resume(&env, &mut ws[1], &gates[1]);
    wait_until("worker 2 beats on its parked row", secs(30), || {
        env.age("heartbeat_at", 2) <= 1
    });
    let o = selfheal_as(
        &cfg,
        "bob",
        &[
            "resolve",
            "lease",
            "2",
            "--as",
            "running",
            "--note",
            "it was swapping",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "lease id=2: set status to 'running' (was 'wait_manual'): resolved as running by bob\n",
        "{name}"
    );
    let e = journaled(&env, 2, "recovered");
    assert_eq!(
        (&e["from"], &e["to"], &e["actor"]),
        (&"wait_manual".into(), &"running".into(), &"bob".into()),
        "{name}: {e}"
    );
    end_work(&mut ws[1], &gates[1]);
    ok(&ws[1].send(&finish("done")));
    assert_eq!(
        env.row(2),
        ("done".into(), ws[1].owner(), 0, String::new(), true),
        "{name}"
    );
}

#[test]
fn a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again_mariadb() {
    if let Some(env) = Env::mysql("DATETIME") {
        a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again(env);
    }
}

#[test]
fn a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again_postgres() {
    if let Some(env) = Env::postgres("TIMESTAMP") {
        a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again(env);
    }
}

#[test]
fn a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again_sqlite() {
    if let Some(env) = Env::sqlite("TEXT") {
        a_stalled_lease_holder_parked_as_hung_is_unparked_when_it_beats_again(env);
    }
}

// ---------------------------------------------------------------------------------------
// Backoff and the picker

/// Row 1's worker is killed (SIGKILL) while it beats; once its heartbeat is stale, `check`
/// reclaims the row to the queue with `retry_at` = the database's now + 3 s (attempts 0 →
/// 1). Another worker's `claimNext` does not take it while `retry_at` is ahead, and does
/// once it is due. Killed again: the wait doubles (6 s, attempts 2). Killed a third time,
/// its attempts used up (max_attempts 2): parked in `manual_value`, claimed by no one.
fn a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked(mut env: Env) {
    let name = env.name();
    env.insert_pending(1..=1);
    let cfg = loop_config(&env, "");
    let gate = env.sb.path("gate");
    let mut w = Php::repl(&env, &loop_spec());
    ok(&w.send(&claim(1)));
    let waited = format!(
        "SELECT {} - {} FROM sync_log WHERE id = 1",
        env.epoch_sql("retry_at"),
        env.epoch_sql("end_time")
    );
    for (attempts, backoff) in [(1, 3), (2, 6)] {
        w.post(&work(&gate));
        std::thread::sleep(Duration::from_millis(300));
        w.kill9();
        env.wait_stale(1, 3);
        let (status, r) = check_row(&cfg, 1);
        assert_eq!(
            (
                status,
                &r["verdict"],
                &r["owner"],
                &r["action"],
                &r["applied"]
            ),
            (
                Some(0),
                &"dead".into(),
                &"dead".into(),
                &"mark_retry".into(),
                &true.into()
            ),
            "{name}: {r}"
        );
        let (status, _, n, msg, ended) = env.row(1);
        assert_eq!(
            (status.as_str(), n, ended),
            ("pending", attempts, true),
            "{name}"
        );
        assert!(msg.starts_with("self-heal: dead: "), "{name}: {msg}");
        // retry_at and the end time are the same statement's database now: the difference
        // is the backoff, doubled per reclaim.
        assert_eq!(
            env.int(&waited),
            backoff,
            "{name}: reclaim {attempts} waits {backoff} s"
        );

        // Not claimed before it is due…
        let mut next = Php::repl(&env, &loop_spec());
        assert!(env.age("retry_at", 1) < 0, "{name}: due in the future");
        assert_eq!(
            ok(&next.send(&op("claimNext"))),
            Value::Null,
            "{name}: claimNext leaves a row that is not due"
        );
        assert_eq!(ok(&next.send(&claim(1))), Value::Null, "{name}");
        assert!(
            env.age("retry_at", 1) < 0,
            "{name}: still not due after the claims (the machine stalled for seconds?)"
        );
        assert_eq!(env.row(1).0, "pending", "{name}");
        // …and claimed once it is.
        wait_until("retry_at is due", secs(30), || env.age("retry_at", 1) >= 0);
        let c = ok(&next.send(&op("claimNext")));
        assert_eq!(c["id"], "1", "{name}");
        assert_eq!(
            env.row(1),
            (
                "running".into(),
                next.owner(),
                attempts,
                String::new(),
                false
            ),
            "{name}"
        );
        w = next;
    }

    // Attempts used up: parked for a person, and no claim takes it.
    w.post(&work(&gate));
    std::thread::sleep(Duration::from_millis(300));
    w.kill9();
    env.wait_stale(1, 3);
    let (_, r) = check_row(&cfg, 1);
    assert_eq!(
        (&r["verdict"], &r["action"], &r["applied"]),
        (&"dead".into(), &"mark_manual".into(), &true.into()),
        "{name}: {r}"
    );
    assert_eq!(env.row(1).0, "wait_manual", "{name}");
    let mut next = Php::repl(&env, &loop_spec());
    assert_eq!(ok(&next.send(&op("claimNext"))), Value::Null, "{name}");
    assert_eq!(env.row(1).0, "wait_manual", "{name}");
}

#[test]
fn a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked_mariadb() {
    if let Some(env) = Env::mysql("DATETIME") {
        a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked(env);
    }
}

#[test]
fn a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked_postgres() {
    if let Some(env) = Env::postgres("TIMESTAMP") {
        a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked(env);
    }
}

#[test]
fn a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked_sqlite() {
    if let Some(env) = Env::sqlite("TEXT") {
        a_killed_lease_holders_row_waits_a_doubling_backoff_then_is_parked(env);
    }
}

// ---------------------------------------------------------------------------------------
// doctor's picker condition

/// `doctor` prints the condition an application's picker must add for `retry_at_column`;
/// over rows whose `retry_at` is NULL, past and ahead (and a row of another status),
/// `Lease`'s claims take exactly the rows that condition selects: NULL and past, on each
/// kind of time column.
#[test]
fn lease_claims_exactly_the_rows_doctors_picker_condition_admits() {
    for mut env in Env::every_time_column() {
        // A PostgreSQL text column holds its times as text, which PostgreSQL compares with
        // no timestamp: the condition doctor prints is for timestamp and integer columns.
        if env.is_postgres() && env.time == "TEXT" {
            continue;
        }
        let name = env.name();
        env.insert_pending(1..=4);
        let at = |offset: i64| env.now_plus_sql(offset);
        let (past, ahead) = (at(-60), at(3600));
        env.exec(&format!(
            "UPDATE sync_log SET retry_at = {past} WHERE id = 2"
        ));
        env.exec(&format!(
            "UPDATE sync_log SET retry_at = {ahead} WHERE id = 3"
        ));
        env.exec("UPDATE sync_log SET status = 'cancelled' WHERE id = 4");
        let cfg = loop_config(&env, "");
        let o = selfheal()
            .arg("doctor")
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("doctor");
        let out = stdout(&o);
        let line = out
            .lines()
            .find(|l| l.starts_with("✓ watch lease: retry_at_column: "))
            .unwrap_or_else(|| panic!("{name}: doctor names the picker condition: {out}"));
        let (_, picker) = line
            .split_once("the application's picker must wait for it: … WHERE ")
            .unwrap_or_else(|| panic!("{name}: {line}"));
        let picked: BTreeSet<String> = env
            .rows(&format!("SELECT id FROM sync_log WHERE {picker}"))
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        let due: BTreeSet<String> = ["1", "2"].into_iter().map(String::from).collect();
        assert_eq!(picked, due, "{name}: doctor's condition {picker:?}");

        let mut w = Php::repl(&env, &loop_spec());
        assert_eq!(
            ok(&w.send(&claim(3))),
            Value::Null,
            "{name}: row 3 is not due"
        );
        let mut claimed = BTreeSet::new();
        for n in 0.. {
            let c = ok(&w.send(&json!({"op": "claimNext", "as": format!("l{n}")})));
            if c.is_null() {
                break;
            }
            claimed.insert(c["id"].as_str().expect("id").to_string());
        }
        assert_eq!(
            claimed, picked,
            "{name}: Lease claims what the picker picks"
        );
    }
}
