//! Live jobs marked dead (or parked) by evidence selfheal could not see or read wrongly: a
//! lock and an owner in another pid namespace, a heartbeat older than its row, daylight saving
//! time, a sub-second duration, a start of 0, a parked row given an end time, a provably
//! running worker past `max_age`, a stall shorter than a cron period, a job on another host
//! whose name shares a prefix. Each through the real binary with real processes, real files
//! and real databases (a private MariaDB whose session clock is faked through `init_connect`,
//! SQLite under libfaketime).

use std::process::{Command, Output};
use std::time::Duration;

use crate::check::hosts::{as_host, run};
use crate::common::*;

fn end_time(db: &SqliteDb, id: i64) -> Option<String> {
    db.conn()
        .query_row("SELECT end_time FROM sync_log WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .expect("end_time")
}

// ---------------------------------------------------------------------------------------
// Evidence selfheal cannot see

/// The real binary in a pid namespace of its own with its own `/proc`, as in a container:
/// `/proc/locks` lists none of the host's lock holders there, and `kill(pid, 0)` finds
/// none of the host's pids.
fn in_pid_namespace(args: &[&str]) -> Output {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(bin())
        .args(args)
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C")
        .output()
        .expect("unshare")
}

/// From another pid namespace a held lock read as free, a live owner as gone: marked dead.
#[test]
fn a_worker_that_holds_its_lock_is_never_marked_from_another_pid_namespace() {
    if !root_or_skip("unshare --pid") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // The worker takes its flock, then claims its row (a couple of seconds later, so that
    // it started before the row, as a worker does), writes its pid into it and beats. With
    // stale_after = "1s" the row is soon old enough for a free lock to be conclusive.
    let lock = sb.lock_path(1);
    let mut worker = flock1_holder(&lock, false);
    std::thread::sleep(Duration::from_millis(2_500));
    db.insert(1, "running", 2);
    set_owner(&db, 1, &format!("{}:{}", hostname(), worker.pid()));
    // A beat stamped a little ahead reads as "just now" (within the clock tolerance) for
    // the whole test, however loaded the machine.
    let beats = |sb: &Sandbox| sb.heartbeat_at(1, std::time::SystemTime::now() + secs(30));
    beats(&sb);
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nowner_column = \"worker\"\n",
            sb.lock_template()
        ))
        .replace("stale_after = \"5m\"", "stale_after = \"1s\""),
    );
    let cfg_s = cfg.to_str().expect("utf-8 path");
    let args = ["check", "--config", cfg_s, "--format", "json"];

    // On the host itself: the holder and the owner are plain to see.
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["lock"], &r["owner"]),
        (
            &serde_json::json!("alive"),
            &serde_json::json!("held"),
            &serde_json::json!("alive")
        ),
        "{r}"
    );

    // From another pid namespace, beating: no holder visible, and with the row's own fresh
    // heartbeat a free lock would only be a contradiction, so it is not even tried; the
    // pid says nothing. Never marked, run after run.
    for run in 0..3 {
        beats(&sb);
        let o = in_pid_namespace(&args);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "alive", "run {run}: {r}");
        assert_eq!(r["lock"], "free_unconfirmed", "run {run}: {r}");
        assert_eq!(r["lock_pid"], serde_json::Value::Null, "run {run}: {r}");
        assert_eq!(r["owner"], "not_visible", "run {run}: {r}");
        assert_eq!(r["action"], "none", "run {run}: {r}");
        assert_eq!(db.status(1), "running", "run {run}");
    }

    // Its heartbeat stalls while it lives: the lock is tried (held, holder not visible):
    // hung (held for a person), never dead.
    sb.heartbeat(1, secs(40));
    for run in 0..3 {
        next_cron_run(&sb);
        let o = in_pid_namespace(&args);
        assert_exit(&o, i32::from(run != 0));
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "hung", "run {run}: {r}");
        assert_eq!(
            r["basis"], "the heartbeat is stale, but the job's lock is held",
            "run {run}: {r}"
        );
        assert_eq!(r["action"], "none", "run {run}: {r}");
        assert_eq!(db.status(1), "running", "run {run}");
    }

    // doctor, run there, says why the pids prove nothing.
    let o = in_pid_namespace(&["doctor", "--config", cfg_s]);
    let out = stdout(&o);
    let ns = out
        .lines()
        .find(|l| l.contains("pid namespace"))
        .unwrap_or_else(|| panic!("no pid namespace finding:\n{out}"));
    assert!(
        ns.starts_with("! ") && ns.contains("not_visible") && ns.contains("pid:[4026531836]"),
        "{ns}"
    );

    // The worker is killed: its lock is free and a try-lock confirms it once its heartbeat
    // is stale, so the row is reclaimed at once then — from that namespace too.
    worker.kill9();
    wait_until("the dead worker's lock is gone", secs(10), || {
        lock_holders(&lock).is_empty()
    });
    sb.heartbeat(1, secs(5));
    let o = in_pid_namespace(&args);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["lock"], "free", "{r}");
    assert_eq!(r["conclusive"], true, "{r}");
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(db.status(1), "error");
    assert!(lock.exists(), "the job's lock file is never deleted");
}

// ---------------------------------------------------------------------------------------
// A heartbeat older than the row

/// An earlier row's heartbeat file (ids reused) made a new row look hours silent: dead.
#[test]
fn a_heartbeat_older_than_its_row_is_an_earlier_rows_and_teaches_stats_nothing() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Ids reused after a TRUNCATE: the files of the earlier rows 12 and 13 are two hours
    // old; the new rows are seconds old, 13's worker holding its lock.
    for id in [12, 13] {
        db.insert(id, "running", 8);
        sb.heartbeat(id, secs(2 * HOUR + 9));
    }
    let _holder = flock1_holder(&sb.lock_path(13), false);
    // Row 14 is 10 minutes old and has never beaten itself: no heartbeat of its own.
    db.insert(14, "running", 10 * MIN);
    sb.heartbeat(14, secs(2 * HOUR));
    // Row 15 beats (a watch none of whose rows beats holds every heartbeat-only verdict).
    db.insert(15, "running", 10 * MIN);
    sb.heartbeat(15, secs(5));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!("lock_file = \"{}\"\n", sb.lock_template())),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in [12, 13] {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "starting", "{r}");
        assert_eq!(r["heartbeat"], "before_row", "{r}");
        assert_eq!(r["heartbeat_age_s"], serde_json::Value::Null, "{r}");
        assert_eq!(db.status(id), "running");
    }
    let r = row(&rows, 14);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(
        r["basis"],
        "no heartbeat of this row at all, and the row is older than stale_after"
    );
    // The next run confirms row 14's death; its message says "no heartbeat", not two
    // hours.
    next_cron_run(&sb);
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(row(&rows, 14)["applied"], true);
    let (_, status, _, msg) = db.dump().into_iter().find(|r| r.0 == 14).expect("row 14");
    assert_eq!(status, "error");
    assert!(msg.contains("no heartbeat") && !msg.contains("2h"), "{msg}");

    // stats: a row an earlier release marked on such a beat (7209 s of "silence" in an
    // 8-second-old row) that then finished well is a false positive, but its silence is
    // impossible and suggests nothing; the finished runs take 40 minutes.
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, end_time, error_msg) VALUES \
         (20, 'done', datetime('now', '-3 hours'), datetime('now', '-140 minutes'), \
          'self-heal: dead: heartbeat_age=7209s stale_after=300s total_age=8s max_age=14400s lock=none'), \
         (21, 'done', datetime('now', '-5 hours'), datetime('now', '-260 minutes'), '')",
    );
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    let (watches, _) = json_lines(&o);
    let w = &watches[0];
    assert_eq!(w["false_positives"], 1, "{w}");
    assert_eq!(w["false_positives_impossible_silence"], 1, "{w}");
    assert_eq!(
        w["suggested_stale_after"]["secs"], 300,
        "no suggestion beyond what the evidence can show: {w}"
    );
}

// ---------------------------------------------------------------------------------------
// Time done right

/// `YYYY-MM-DD HH:MM:SS` UTC as unix seconds.
fn epoch_of(utc: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(utc, "%Y-%m-%d %H:%M:%S")
        .expect("time")
        .and_utc()
        .timestamp()
}

/// Ages on a server in Europe/Berlin were wall-clock differences, an hour off across DST.
#[test]
fn a_server_in_europe_berlin_is_read_in_instants_across_both_daylight_saving_changes() {
    let Some(mut server) = PrivateMariadb::start() else {
        return;
    };
    server.load_time_zones();
    server.restart_with(&["--default-time-zone=Europe/Berlin"]);
    let mut root = server.conn("");
    for sql in [
        "CREATE DATABASE app",
        // A TIMESTAMP table, and one the application writes naive DATETIME into on the
        // server's own clock (no timezone configured).
        "CREATE TABLE app.stamped (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time TIMESTAMP NULL, heartbeat_at TIMESTAMP NULL, KEY (status))",
        "CREATE TABLE app.naive (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, heartbeat_at DATETIME NULL, KEY (status))",
        "CREATE USER 'app'@'localhost' IDENTIFIED BY 'App-pass-12'",
        "GRANT ALL ON app.* TO 'app'@'localhost'",
    ] {
        mysql::prelude::Queryable::query_drop(&mut root, sql).expect(sql);
    }
    let sb = Sandbox::new();
    let url = format!(
        "mysql://app@localhost/app?socket={}",
        server.socket().display()
    );
    let watch = |name: &str| {
        format!(
            "name = \"{name}\"\ntable = \"{name}\"\nstarted_column = \"start_time\"\n\
             heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n"
        )
    };
    let cfg = sb.config(
        &url,
        &format!("{}\n[[watch]]\n{}", watch("stamped"), watch("naive")),
    );
    // (case, the server's NOW() in UTC, the row's start and its last beat in UTC, ages)
    for (case, now, start, beat, beat_age) in [
        // 03:01 CEST, the row started at 01:51 CET, it beat at 01:59 CET: 120 s ago, not
        // 1 h 2 min (naive subtraction across the spring change).
        (
            "spring",
            "2026-03-29 01:01:00",
            "2026-03-29 00:51:00",
            "2026-03-29 00:59:00",
            120,
        ),
        // 02:01 CET (the second 02:00-02:59), it beat at 02:59 CEST (the first): 120 s
        // ago, not 58 minutes in the future.
        (
            "autumn",
            "2026-10-25 01:01:00",
            "2026-10-25 00:51:00",
            "2026-10-25 00:59:00",
            120,
        ),
    ] {
        let q = |root: &mut mysql::Conn, sql: String| {
            mysql::prelude::Queryable::query_drop(root, &sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        };
        q(&mut root, "SET time_zone = '+00:00'".into());
        for t in ["stamped", "naive"] {
            q(&mut root, format!("DELETE FROM app.{t}"));
        }
        q(
            &mut root,
            format!("INSERT INTO app.stamped VALUES (1, 'running', '{start}', '{beat}')"),
        );
        // The naive table holds the wall-clock times of the server's zone.
        q(&mut root, "SET time_zone = 'Europe/Berlin'".into());
        q(
            &mut root,
            format!(
                "INSERT INTO app.naive VALUES (1, 'running', \
                 FROM_UNIXTIME({}), FROM_UNIXTIME({}))",
                epoch_of(start),
                epoch_of(beat)
            ),
        );
        // Every session of the application user now sees NOW() at `now`.
        q(
            &mut root,
            format!(
                "SET GLOBAL init_connect = 'SET timestamp = {}'",
                epoch_of(now)
            ),
        );
        let o = selfheal()
            .env("SELFHEAL_DB_PASSWORD", "App-pass-12")
            .args(["check", "--format", "json", "--config"])
            .arg(&cfg)
            .output()
            .expect("selfheal");
        // The faked NOW() is far from the host clock: a skew warning, and no write.
        assert_exit(&o, 0);
        let (rows, summary) = json_lines(&o);
        assert_eq!(summary["clock_skew_exceeded"], true, "{case}: {summary}");
        assert_eq!(rows.len(), 2, "{case}: {rows:?}");
        for r in &rows {
            assert_eq!(r["verdict"], "alive", "{case}: {r}");
            assert_eq!(r["heartbeat_age_s"], beat_age, "{case}: {r}");
            assert_eq!(
                r["total_age_s"].as_i64(),
                Some(epoch_of(now) - epoch_of(start)),
                "{case}: {r}"
            );
        }
    }
}

/// A SQLite job table whose naive times are Europe/Berlin wall clock, one running row, and
/// the real binary with its clock frozen at `now` (UTC).
fn berlin_sqlite(now: &'static str, start: &str, beat: &str) -> Option<Output> {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES (1, 'running', ?1, ?2)",
            [start, beat],
        )
        .expect("row");
    let cfg = sb.config_with(
        &format!("url = \"{}\"\ntimezone = \"Europe/Berlin\"", db.url()),
        "",
        "name = \"sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n",
    );
    let mut c = selfheal();
    if !frozen_clock_at(&mut c, now) {
        return None;
    }
    Some(
        c.args(["check", "--format", "json", "--config"])
            .arg(&cfg)
            .output()
            .expect("selfheal"),
    )
}

/// Naive times in a configured zone went an hour wrong at both daylight saving changes.
#[test]
fn naive_times_in_a_configured_zone_follow_its_rules_across_both_daylight_saving_changes() {
    // (case, now in UTC, start and beat as Berlin wall clock, total age, heartbeat age)
    for (case, now, start, beat, total, beat_age) in [
        // 02:31 CEST, the first pass of the repeated hour: the later reading of 02:30 lies
        // ahead, so it is the earlier one.
        (
            "autumn, first pass",
            "2026-10-25 00:31:00",
            "2026-10-25 02:21:00",
            "2026-10-25 02:30:00",
            600,
            60,
        ),
        // 02:31 CET, the second pass: 02:30 a minute ago is the later instant, not 1 h 1
        // min ago.
        (
            "autumn, second pass",
            "2026-10-25 01:31:00",
            "2026-10-25 02:21:00",
            "2026-10-25 02:30:00",
            600,
            60,
        ),
        // 03:32 CEST: 02:30 never happened on a correct clock; written by one not yet
        // moved forward, it is 03:30 CEST.
        (
            "spring gap",
            "2026-03-29 01:32:00",
            "2026-03-29 01:50:00",
            "2026-03-29 02:30:00",
            2_520,
            120,
        ),
    ] {
        let Some(o) = berlin_sqlite(now, start, beat) else {
            return;
        };
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "alive", "{case}: {r}");
        assert_eq!(r["total_age_s"], total, "{case}: {r}");
        assert_eq!(r["heartbeat_age_s"], beat_age, "{case}: {r}");
    }
}

// ---------------------------------------------------------------------------------------
// Sub-second durations

/// `stale_after = "300ms"` became 0 s: every heartbeat stale, live jobs marked dead.
#[test]
fn a_duration_below_one_second_is_refused_naming_its_key() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 10 * MIN);
    sb.heartbeat(1, secs(3));
    let good = sb.watch("");
    let cfg = sb.config(
        &db.url(),
        &good.replace("stale_after = \"5m\"", "stale_after = \"300ms\""),
    );
    for cmd in ["check", "doctor"] {
        let o = selfheal()
            .args([cmd, "--config"])
            .arg(&cfg)
            .output()
            .expect("selfheal");
        assert_exit(&o, 2);
        let err = stderr(&o) + &stdout(&o);
        assert!(
            err.contains("watch 'full-sync': stale_after")
                && err.contains("\"300ms\"")
                && err.contains("at least one second"),
            "{cmd}: {err}"
        );
    }
    let cfg = sb.config(&db.url(), &good);
    let o = check(&cfg, &["--stale-after", "300ms"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--stale-after"), "{}", stderr(&o));
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "clock_tolerance = \"500ms\"",
        &good,
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("run.clock_tolerance") && stderr(&o).contains("at least one second"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.status(1), "running");
}

// ---------------------------------------------------------------------------------------
// Starts that are not starts, and history that cannot be a run

/// A start of 0 (an unset column) made a beating row decades old: overtime, marked dead.
#[test]
fn a_start_of_zero_is_unknown_and_impossible_history_stays_out_of_stats() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Beating rows whose start is "unset": 0, a day after 1970, a zero date.
    db.exec(
        "INSERT INTO sync_log (id, status, start_time) VALUES \
         (1, 'running', 0), (2, 'running', 86400), (3, 'running', '0000-00-00 00:00:00')",
    );
    for id in 1..=3 {
        sb.heartbeat(id, secs(5));
    }
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let (o, rows, summary) = json_check(&cfg, &[]);
    assert_exit(&o, 1);
    for id in 1..=3 {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "unknown", "{r}");
        assert_eq!(r["action"], "none", "{r}");
        assert_eq!(db.status(id), "running");
    }
    assert!(
        row(&rows, 1)["basis"]
            .as_str()
            .is_some_and(|b| b.contains("not a start time")),
        "{}",
        row(&rows, 1)
    );
    assert_eq!(summary["changed"], 0);

    // stats: runs of 20 to 29 minutes, and three rows that cannot be runs.
    db.exec("DELETE FROM sync_log");
    for i in 0..10 {
        db.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
             ({}, 'done', datetime('now', '-2 days'), datetime('now', '-2 days', '+{} minutes'))",
            10 + i,
            20 + i
        ));
    }
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (50, 'done', 0, datetime('now')), \
         (51, 'done', datetime('now', '-1 hours'), datetime('now', '-2 hours')), \
         (52, 'done', datetime('now', '-800 days'), datetime('now', '-10 days'))",
    );
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    let (watches, _) = json_lines(&o);
    let w = &watches[0];
    assert_eq!(w["implausible"], 3, "{w}");
    assert_eq!(w["successful"], 10, "{w}");
    assert_eq!(w["runtime_s"]["max"], 29 * MIN, "{w}");
    // 2 × p99 (29 minutes), rounded up: not years.
    assert_eq!(w["suggested_max_age"]["secs"], HOUR, "{w}");
}

// ---------------------------------------------------------------------------------------
// A row parked for a person keeps no end time

/// A hung row parked for a person was given an end time, so it looked finished.
#[test]
fn a_hung_row_parked_for_a_person_is_not_given_an_end_time() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    sb.heartbeat(1, secs(47 * MIN));
    let holder = flock1_holder(&sb.lock_path(1), false);
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
            sb.lock_template()
        )),
    );
    // Two cron runs: the second confirms the hung worker and parks its row.
    for _ in 0..2 {
        next_cron_run(&sb);
        let _ = check(&cfg, &[]);
    }
    assert_eq!(db.status(1), "wait_manual");
    assert_eq!(end_time(&db, 1), None, "its worker still runs: not ended");
    assert!(lock_holders(&sb.lock_path(1)).contains(&i64::from(holder.pid())));
    // stats does not count it as a finished run.
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    let (watches, _) = json_lines(&o);
    assert_eq!(watches[0]["finished"], 0, "{}", watches[0]);
}

// ---------------------------------------------------------------------------------------
// Past max_age, a worker that provably runs

/// A row past max_age whose worker held its lock was marked dead while the worker ran.
#[test]
fn past_max_age_a_worker_that_holds_its_lock_goes_to_a_person_never_to_dead_value() {
    for manual in [true, false] {
        let sb = Sandbox::new();
        let db = SqliteDb::new(&sb);
        // 5 h into a 4 h cap, beating: row 1's worker holds its flock, row 2 has no lock
        // file and no other sign of life (the backstop against a stuck heartbeat).
        for id in [1, 2] {
            db.insert(id, "running", 5 * HOUR);
            sb.heartbeat(id, secs(5));
        }
        let holder = flock1_holder(&sb.lock_path(1), false);
        let cfg = sb.config(
            &db.url(),
            &sb.watch(&format!(
                "lock_file = \"{}\"\n{}",
                sb.lock_template(),
                if manual {
                    "manual_value = \"wait_manual\"\n"
                } else {
                    ""
                }
            )),
        );
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 1);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "overtime", "{r}");
        assert_eq!(r["lock"], "held", "{r}");
        assert_eq!(r["attention"], true, "{r}");
        assert_eq!(
            r["action"],
            if manual { "mark_manual" } else { "none" },
            "{r}"
        );
        assert_eq!(
            db.status(1),
            if manual { "wait_manual" } else { "running" },
            "manual_value: {manual}"
        );
        assert_eq!(end_time(&db, 1), None);
        // The worker without any sign of life is still marked by the backstop.
        assert_eq!(row(&rows, 2)["action"], "mark_dead");
        assert_eq!(db.status(2), "error");
        if !manual {
            // Reported again by the next run, never marked.
            let (o, _, _) = json_check(&cfg, &[]);
            assert_exit(&o, 1);
            assert_eq!(db.status(1), "running");
        }
        assert!(lock_holders(&sb.lock_path(1)).contains(&i64::from(holder.pid())));
    }
}

// ---------------------------------------------------------------------------------------
// Confirmation

/// One run's look at a stall shorter than a cron period parked or killed a live job.
#[test]
fn a_stall_shorter_than_a_cron_period_never_parks_or_kills_a_job() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 1's worker stops beating (a GC pause, kill -STOP); row 2's stalls too while it
    // holds its lock.
    db.insert(1, "running", 50 * MIN);
    db.insert(2, "running", 50 * MIN);
    let _holder = flock1_holder(&sb.lock_path(2), false);
    let stall = |sb: &Sandbox| {
        sb.heartbeat(1, secs(10 * MIN));
        sb.heartbeat(2, secs(10 * MIN));
    };
    let beat = |sb: &Sandbox| {
        sb.heartbeat(1, secs(5));
        sb.heartbeat(2, secs(5));
    };
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
            sb.lock_template()
        )),
    );
    let unchanged = |db: &SqliteDb| {
        assert_eq!(
            (db.status(1), db.status(2)),
            ("running".into(), "running".into())
        );
    };

    // A cron run finds both stalled: held to confirm, silent, exit 0.
    stall(&sb);
    cron_check_is_silent(&cfg);
    unchanged(&db);
    let counts = std::fs::read_to_string(sb.state_dir().join("confirmations.json"))
        .expect("the counts are kept in state_dir");
    assert!(counts.contains("\"count\":1"), "{counts}");

    // They beat again before the next run: the counts start over.
    beat(&sb);
    next_cron_run(&sb);
    cron_check_is_silent(&cfg);
    unchanged(&db);

    // Stalled again: the first run in a row again, not the second.
    stall(&sb);
    next_cron_run(&sb);
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in [1, 2] {
        let r = row(&rows, id);
        assert_eq!(
            (&r["held"], &r["confirmations"], &r["confirm"], &r["action"]),
            (
                &serde_json::json!("confirming"),
                &serde_json::json!(1),
                &serde_json::json!(2),
                &serde_json::json!("none")
            ),
            "{r}"
        );
        assert_eq!(r["attention"], false, "{r}");
    }
    unchanged(&db);

    // But a run right after the last one neither counts nor resets: an operator's run a
    // second after cron's confirms nothing.
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in [1, 2] {
        assert_eq!(row(&rows, id)["held"], "confirming", "{}", row(&rows, id));
    }
    unchanged(&db);

    // Dry runs and --explain neither count nor reset; --explain shows what a real run
    // would do now: a cron period later, act.
    next_cron_run(&sb);
    for _ in 0..2 {
        let o = check(&cfg, &["--dry-run"]);
        assert_exit(&o, 1);
        let o = check(&cfg, &["--explain"]);
        assert_exit(&o, 1);
        let out = stdout(&o);
        assert!(
            out.contains("a real run would set status to 'error' (mark_dead)")
                && out.contains("a real run would set status to 'wait_manual' (mark_manual)"),
            "{out}"
        );
    }
    unchanged(&db);

    // The second real run in a row, a cron period after the first, acts: the silent one
    // is marked dead, the hung one parked for a person.
    next_cron_run(&sb);
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "error");
    assert_eq!(db.status(2), "wait_manual");
    let counts =
        std::fs::read_to_string(sb.state_dir().join("confirmations.json")).expect("counts");
    assert!(
        !counts.contains("\"id\""),
        "rows no longer running keep no count: {counts}"
    );
}

// ---------------------------------------------------------------------------------------
// A job on another host

/// On host `vm`, owner `vm.dc2.example.com:4242` was taken as local: pid 4242 gone, dead.
///
/// It is another machine's job: a short host name never matches a qualified name of another
/// domain.
#[test]
fn a_short_host_name_never_matches_a_qualified_name_of_another_domain() {
    if !root_or_skip("running as another host") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = exited_pid();
    let rows = [
        (1, format!("vm.dc2.example.com:{gone}")),
        (2, format!("VM:{gone}")),
        (3, format!("vm.dc1.example.com:{gone}")),
        (4, format!("vm2:{gone}")),
    ];
    for (id, owner) in &rows {
        db.insert(*id, "running", 50 * MIN);
        db.conn()
            .execute(
                "UPDATE sync_log SET worker = ?1 WHERE id = ?2",
                rusqlite::params![owner, id],
            )
            .expect("owner");
        // Stale: the owner pid gone beside the row's own fresh heartbeat would wait for it.
        sb.heartbeat(*id, Duration::from_secs(10 * MIN));
    }
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "host_names = [\"{hostname}.dc1.example.com\"]",
        &sb.watch("owner_column = \"worker\"\n"),
    );
    let cfg = cfg.to_str().expect("utf-8");
    let o = run(&mut as_host(
        "vm",
        None,
        &["check", "--config", cfg, "--format", "json"],
    ));
    assert_exit(&o, 0);
    let (json, summary) = json_lines(&o);
    assert_eq!(summary["host"], "vm");
    let verdict = |id| row(&json, id)["verdict"].as_str().map(str::to_string);
    // Another domain's `vm`, and `vm2`: other machines, never judged by local pids.
    for (id, owner_host) in [(1, "vm.dc2.example.com"), (4, "vm2")] {
        assert_eq!(verdict(id).as_deref(), Some("remote"), "{id}");
        assert_eq!(row(&json, id)["owner"], "remote");
        assert_eq!(row(&json, id)["owner_host"], owner_host);
        assert_eq!(row(&json, id)["host"], "vm");
        assert_eq!(db.status(id), "running");
    }
    // This host, by its own name in any case, or by [run] host_names with {hostname}.
    for id in [2, 3] {
        assert_eq!(verdict(id).as_deref(), Some("dead"), "{id}");
        assert_eq!(row(&json, id)["owner"], "dead");
        assert_eq!(db.status(id), "error");
    }
    assert_eq!(row(&json, 3)["owner_host"], "vm.dc1.example.com");

    // The same rows seen from `vm.dc2.example.com`, which row 1 names: its own.
    let o = run(&mut as_host(
        "vm.dc2.example.com",
        None,
        &["check", "--config", cfg, "--format", "json", "--dry-run"],
    ));
    assert_exit(&o, 0);
    let (json, _) = json_lines(&o);
    assert_eq!(row(&json, 1)["verdict"], "dead");
}
