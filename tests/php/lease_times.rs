//! The times `Selfheal\Lease` writes, read back by the real `selfheal` binary, and tables
//! whose start or heartbeat column is declared `ON UPDATE CURRENT_TIMESTAMP` — with php-cli,
//! real processes and real databases (MariaDB, PostgreSQL and SQLite files):
//! - a worker whose PDO connection runs `SET time_zone = '-05:00'` (or `'+08:00'`) claims
//!   and beats, and `selfheal check` (a real run) judges its rows `alive` (by the heartbeat
//!   column) or `starting` (by the start alone) and writes nothing, for DATETIME, TIMESTAMP
//!   and integer time columns; a row selfheal sent back to the queue waits for its
//!   `retry_at` whatever the worker's zone, and is claimable once it is due; the same on
//!   PostgreSQL (`SET TIME ZONE` in the worker's session, the server's TimeZone another
//!   zone still), for timestamp, timestamptz and integer columns;
//! - the specification's `timezone` (a zone name, with no time zone tables on the server,
//!   or `±HH:MM`) read by selfheal configured with the same `[database] timezone`, on
//!   MariaDB and SQLite, where times are UTC text without it; a bad `timezone` is an
//!   exception with a sentence;
//! - on a table whose start and heartbeat move on every `UPDATE` (`ON UPDATE
//!   CURRENT_TIMESTAMP`): the lease claims, beats across seconds, finishes and retries with
//!   no `LeaseLost`; selfheal's compare-and-set (one row, a group, a person's `resolve`)
//!   marks rows and leaves their start and heartbeat as they were; `doctor` names the
//!   columns and the `ALTER TABLE` that drops the clause, which works when run.
//!
//! Skipped outside CI when php, its PDO driver or a MariaDB server is missing; fails in CI.

use std::path::PathBuf;

use crate::common::*;
use crate::php::lease_harness::*;
use serde_json::{Value, json};

/// A watch over `sync_log` that acts at once (confirm = 1), stale after `stale_after`,
/// plus `extra`.
fn watch(stale_after: &str, extra: &str) -> String {
    format!(
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         stale_after = \"{stale_after}\"\nmax_age = \"1h\"\nconfirm = 1\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n{extra}"
    )
}

/// The watch judging by the start alone: its heartbeat is a file no lease worker touches
/// (in a directory that exists), so a row is `starting` until `stale_after`.
fn no_beat(env: &Env) -> String {
    watch(
        "1m",
        &format!("heartbeat_file = \"{}\"", env.sb.heartbeat_template()),
    )
}

/// selfheal's configuration for `env`, with `timezone` in `[database]` when given.
fn config(env: &Env, timezone: Option<&str>, watch: &str) -> PathBuf {
    let zone = timezone.map_or(String::new(), |tz| format!("\ntimezone = \"{tz}\""));
    let database = format!("url = \"{}\"{zone}", env.url());
    env.sb.config_with(&database, "", watch)
}

/// A real `selfheal check --format json` (not a dry run): every one of `ids` judged
/// `verdict` with action `none`, exit 0, and the table as it was.
#[track_caller]
fn judged(env: &mut Env, cfg: &std::path::Path, ids: &[i64], verdict: &str, what: &str) {
    let before = env.dump();
    let o = check(cfg, &["--format", "json"]);
    if o.stdout.is_empty() {
        assert_exit(&o, 0);
    }
    let (rows, _) = json_lines(&o);
    for &id in ids {
        let r = row(&rows, id);
        assert_eq!(
            (&r["verdict"], &r["action"]),
            (&Value::from(verdict), &Value::from("none")),
            "{what}: row {id}: {r}"
        );
    }
    assert_exit(&o, 0);
    assert_eq!(env.dump(), before, "{what}: check wrote nothing");
}

/// Seconds from `UTC_TIMESTAMP()` (or SQLite's UTC now) to the naive text of `col` in row
/// `id`: the zone the value was written in, give or take the seconds since.
fn written_offset(env: &mut Env, col: &str, id: i64) -> i64 {
    let sql = if env.is_mysql() {
        format!(
            "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), {col}) FROM sync_log WHERE id = {id}"
        )
    } else {
        format!(
            "SELECT CAST(strftime('%s', {col}) AS INTEGER) - CAST(strftime('%s', 'now') AS \
             INTEGER) FROM sync_log WHERE id = {id}"
        )
    };
    env.int(&sql)
}

/// A lease worker whose connection runs `SET time_zone = zone`.
fn in_zone(env: &Env, zone: &str) -> Php {
    let mut w = Php::repl(env, &spec(&json!({})));
    ok(&w.send(&json!({"op": "sql", "sql": format!("SET time_zone = '{zone}'")})));
    w
}

#[track_caller]
fn near(got: i64, want: i64, what: &str) {
    assert!(
        (got - want).abs() <= 5,
        "{what}: {got} s, expected about {want} s"
    );
}

// ---------------------------------------------------------------------------------------
// Session time zones

/// A worker whose connection runs `SET time_zone = '-05:00'` (then one with `'+08:00'`)
/// claims two rows and beats across seconds: every start and heartbeat is within seconds
/// of now as the server's own zone reads it, and a real `selfheal check` judges both rows
/// `alive` by the heartbeat column and `starting` by the start alone, writing nothing —
/// for DATETIME, TIMESTAMP and integer time columns.
#[test]
fn a_worker_in_another_session_time_zone_is_judged_alive_and_left_alone() {
    for time in ["DATETIME", "TIMESTAMP", "BIGINT"] {
        for zone in ["-05:00", "+08:00"] {
            let Some(mut env) = Env::mysql(time) else {
                return;
            };
            let what = format!("{}, session {zone}", env.name());
            env.insert_pending(1..=2);
            let mut w = in_zone(&env, zone);
            ok(&w.send(&claim(1)));
            ok(&w.send(&json!({"op": "claimNext", "as": "b"})));
            for lease in ["a", "b"] {
                let beats = json!({"op": "beats", "n": 3, "pause_ms": 400, "as": lease});
                assert_eq!(ok(&w.send(&beats)), 3, "{what}");
            }
            let beating = config(
                &env,
                None,
                &watch("1m", "heartbeat_column = \"heartbeat_at\""),
            );
            judged(&mut env, &beating, &[1, 2], "alive", &what);
            let starting = config(&env, None, &no_beat(&env));
            judged(&mut env, &starting, &[1, 2], "starting", &what);
            for id in [1, 2] {
                for col in ["start_time", "heartbeat_at"] {
                    let age = env.age(col, id);
                    assert!((0..=5).contains(&age), "{what}: row {id} {col} {age} s old");
                }
            }
            ok(&w.send(&finish("done")));
            ok(&w.send(&json!({"op": "finish", "status": "done", "as": "b"})));
            assert_eq!(env.row(1).0, "done", "{what}");
        }
    }
}

/// A worker dies; selfheal sends its row back to the queue with `retry_at` one backoff
/// ahead, in its own session's zone. Workers whose sessions run at `+08:00` and `-05:00`
/// both leave the row alone until it is due, and take it once it is: the lease compares
/// `retry_at` in the zone it was written in, not the worker's.
#[test]
fn a_row_sent_back_waits_for_its_retry_at_whatever_the_workers_session_zone() {
    for time in ["DATETIME", "TIMESTAMP", "BIGINT"] {
        let Some(mut env) = Env::mysql(time) else {
            return;
        };
        let name = env.name();
        env.insert_pending(1..=1);
        let cfg = config(
            &env,
            None,
            &watch(
                "2s",
                "heartbeat_column = \"heartbeat_at\"\nretry_value = \"pending\"\n\
                 attempts_column = \"attempts\"\nmax_attempts = 3\n\
                 retry_at_column = \"retry_at\"\nretry_backoff = \"1m\"",
            ),
        );
        let mut dying = in_zone(&env, "-05:00");
        ok(&dying.send(&claim(1)));
        dying.kill9();
        env.wait_stale(1, 3);
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(
            (&r["verdict"], &r["action"], &r["applied"]),
            (&"dead".into(), &"mark_retry".into(), &true.into()),
            "{name}: {r}"
        );
        let wait = -env.age("retry_at", 1);
        assert!((55..=60).contains(&wait), "{name}: retry_at in {wait} s");

        let mut east = in_zone(&env, "+08:00");
        let mut west = in_zone(&env, "-05:00");
        assert_eq!(
            ok(&east.send(&claim(1))),
            Value::Null,
            "{name}: not due (+08:00)"
        );
        assert_eq!(
            ok(&west.send(&claim(1))),
            Value::Null,
            "{name}: not due (-05:00)"
        );
        assert_eq!(ok(&east.send(&op("claimNext"))), Value::Null, "{name}");

        let earlier = if env.integer_times() {
            "retry_at - 120"
        } else {
            "retry_at - INTERVAL 2 MINUTE"
        };
        env.exec(&format!(
            "UPDATE sync_log SET retry_at = {earlier} WHERE id = 1"
        ));
        let c = ok(&west.send(&op("claimNext")));
        assert_eq!(c["id"], "1", "{name}: due, claimed");
        ok(&west.send(&finish("done")));
        assert_eq!(env.row(1).0, "done", "{name}");
    }
}

/// PostgreSQL: a server whose TimeZone is Europe/Berlin (a database setting, so selfheal's
/// session and every session that sets none has it), and a worker whose session runs
/// `SET TIME ZONE` (as Laravel's pgsql connection does with its timezone set): the lease
/// writes naive timestamps in the server's zone, as selfheal reads them, for timestamp,
/// timestamptz and integer time columns.
fn pg_in_another_zone(time: &'static str) -> Option<Env> {
    let mut env = Env::postgres(time)?;
    let Backend::Postgres(db) = &mut env.db else {
        unreachable!()
    };
    let name = db.name.clone();
    db.exec(&format!(
        "ALTER DATABASE \"{name}\" SET TimeZone = 'Europe/Berlin'; \
         SET TimeZone = 'Europe/Berlin'"
    ));
    Some(env)
}

/// A lease worker whose PostgreSQL session runs `SET TIME ZONE zone`.
fn pg_in_zone(env: &Env, zone: &str) -> Php {
    let mut w = Php::repl(env, &spec(&json!({})));
    ok(&w.send(&json!({"op": "sql", "sql": format!("SET TIME ZONE '{zone}'")})));
    w
}

#[test]
fn a_worker_in_another_session_time_zone_is_judged_alive_and_left_alone_postgres() {
    for time in ["TIMESTAMP", "TIMESTAMPTZ", "BIGINT"] {
        for zone in ["America/New_York", "Asia/Shanghai"] {
            let Some(mut env) = pg_in_another_zone(time) else {
                return;
            };
            let what = format!("{}, session {zone}", env.name());
            env.insert_pending(1..=2);
            let mut w = pg_in_zone(&env, zone);
            ok(&w.send(&claim(1)));
            ok(&w.send(&json!({"op": "claimNext", "as": "b"})));
            for lease in ["a", "b"] {
                let beats = json!({"op": "beats", "n": 3, "pause_ms": 400, "as": lease});
                assert_eq!(ok(&w.send(&beats)), 3, "{what}");
            }
            let beating = config(
                &env,
                None,
                &watch("1m", "heartbeat_column = \"heartbeat_at\""),
            );
            judged(&mut env, &beating, &[1, 2], "alive", &what);
            let starting = config(&env, None, &no_beat(&env));
            judged(&mut env, &starting, &[1, 2], "starting", &what);
            for id in [1, 2] {
                for col in ["start_time", "heartbeat_at"] {
                    let age = env.age(col, id);
                    assert!((0..=5).contains(&age), "{what}: row {id} {col} {age} s old");
                }
            }
            if time == "TIMESTAMP" {
                // Written as Berlin's wall clock, not the worker's session's.
                let berlin = env.int(
                    "SELECT FLOOR(EXTRACT(EPOCH FROM start_time - \
                     (CURRENT_TIMESTAMP AT TIME ZONE 'Europe/Berlin')))::bigint \
                     FROM sync_log WHERE id = 1",
                );
                assert!((-5..=0).contains(&berlin), "{what}: {berlin} s");
            }
            ok(&w.send(&finish("done")));
            ok(&w.send(&json!({"op": "finish", "status": "done", "as": "b"})));
            assert_eq!(env.row(1).0, "done", "{what}");
        }
    }
}

#[test]
fn a_row_sent_back_waits_for_its_retry_at_whatever_the_workers_session_zone_postgres() {
    for time in ["TIMESTAMP", "TIMESTAMPTZ", "BIGINT"] {
        let Some(mut env) = pg_in_another_zone(time) else {
            return;
        };
        let name = env.name();
        env.insert_pending(1..=1);
        let cfg = config(
            &env,
            None,
            &watch(
                "2s",
                "heartbeat_column = \"heartbeat_at\"\nretry_value = \"pending\"\n\
                 attempts_column = \"attempts\"\nmax_attempts = 3\n\
                 retry_at_column = \"retry_at\"\nretry_backoff = \"1m\"",
            ),
        );
        let mut dying = pg_in_zone(&env, "America/New_York");
        ok(&dying.send(&claim(1)));
        dying.kill9();
        env.wait_stale(1, 3);
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(
            (&r["verdict"], &r["action"], &r["applied"]),
            (&"dead".into(), &"mark_retry".into(), &true.into()),
            "{name}: {r}"
        );
        let wait = -env.age("retry_at", 1);
        assert!((55..=60).contains(&wait), "{name}: retry_at in {wait} s");

        let mut east = pg_in_zone(&env, "Asia/Shanghai");
        let mut west = pg_in_zone(&env, "America/New_York");
        assert_eq!(ok(&east.send(&claim(1))), Value::Null, "{name}: not due");
        assert_eq!(ok(&west.send(&claim(1))), Value::Null, "{name}: not due");
        assert_eq!(ok(&east.send(&op("claimNext"))), Value::Null, "{name}");
        let earlier = if env.integer_times() {
            "retry_at - 120"
        } else {
            "retry_at - INTERVAL '2 minutes'"
        };
        env.exec(&format!(
            "UPDATE sync_log SET retry_at = {earlier} WHERE id = 1"
        ));
        let c = ok(&west.send(&op("claimNext")));
        assert_eq!(c["id"], "1", "{name}: due, claimed");
        ok(&west.send(&finish("done")));
        assert_eq!(env.row(1).0, "done", "{name}");
    }
}

// ---------------------------------------------------------------------------------------
// The specification's timezone

/// `timezone` names the zone DATETIME columns are written in, as selfheal's `[database]
/// timezone` does: a zone name (this server has no time zone tables, so CONVERT_TZ could
/// not convert to it) or a fixed offset, whatever the worker's session zone. selfheal
/// configured with the same zone judges the rows alive and leaves them alone.
#[test]
fn the_timezone_key_on_mariadb_matches_selfheals_database_timezone() {
    for (lease_tz, selfheal_tz, session, offset) in [
        ("Asia/Shanghai", "Asia/Shanghai", "-05:00", 8 * 3600),
        ("-05:00", "Etc/GMT+5", "+08:00", -5 * 3600),
        ("UTC", "UTC", "+08:00", 0),
    ] {
        let Some(mut env) = Env::mysql("DATETIME") else {
            return;
        };
        let what = format!("timezone {lease_tz}, session {session}");
        env.insert_pending(1..=2);
        let mut w = Php::repl(&env, &spec(&json!({"timezone": lease_tz})));
        ok(&w.send(&json!({"op": "sql", "sql": format!("SET time_zone = '{session}'")})));
        ok(&w.send(&claim(1)));
        ok(&w.send(&json!({"op": "claimNext", "as": "b"})));
        assert_eq!(
            ok(&w.send(&json!({"op": "beats", "n": 2, "pause_ms": 600}))),
            2
        );
        for col in ["start_time", "heartbeat_at"] {
            near(
                written_offset(&mut env, col, 1),
                offset,
                &format!("{what}: {col}"),
            );
        }
        let cfg = config(
            &env,
            Some(selfheal_tz),
            &watch("1m", "heartbeat_column = \"heartbeat_at\""),
        );
        judged(&mut env, &cfg, &[1, 2], "alive", &what);

        // retry_at in the same zone: not due for a minute, then due.
        assert_eq!(
            ok(&w.send(&json!({"op": "retryLater", "reason": "later", "seconds": 60}))),
            "pending"
        );
        near(written_offset(&mut env, "retry_at", 1), offset + 60, &what);
        assert_eq!(ok(&w.send(&claim(1))), Value::Null, "{what}: not due");
        env.exec("UPDATE sync_log SET retry_at = retry_at - INTERVAL 2 MINUTE WHERE id = 1");
        assert_eq!(ok(&w.send(&claim(1)))["id"], "1", "{what}: due");
        ok(&w.send(&finish("done")));
        near(written_offset(&mut env, "end_time", 1), offset, &what);
    }
}

/// On SQLite (no session zones) the lease writes UTC text, or the text of `timezone`'s
/// wall clock when it is set; selfheal with the same `[database] timezone` judges the rows
/// alive, and a row it sends back waits for its `retry_at` (written in that zone) before
/// the lease claims it again.
#[test]
fn the_lease_on_sqlite_writes_in_the_zone_selfheal_reads() {
    for (lease_tz, selfheal_tz) in [
        (None, None),
        (Some("Asia/Shanghai"), Some("Asia/Shanghai")),
        (Some("America/New_York"), Some("America/New_York")),
        (Some("-05:00"), Some("Etc/GMT+5")),
    ] {
        let Some(mut env) = Env::sqlite("TEXT") else {
            return;
        };
        let what = format!("timezone {lease_tz:?}");
        let offset = |tz: Option<&str>| match tz {
            None => 0,
            Some("-05:00") => -5 * 3600,
            Some(name) => {
                let tz = jiff::tz::TimeZone::get(name).expect("zone");
                i64::from(tz.to_offset(jiff::Timestamp::now()).seconds())
            }
        };
        let offset = offset(lease_tz);
        env.insert_pending(1..=2);
        let lease_spec = spec(&json!({"timezone": lease_tz}));
        let mut w = Php::repl(&env, &lease_spec);
        ok(&w.send(&claim(1)));
        ok(&w.send(&json!({"op": "claimNext", "as": "b"})));
        assert_eq!(
            ok(&w.send(&json!({"op": "beats", "n": 2, "pause_ms": 600}))),
            2
        );
        for col in ["start_time", "heartbeat_at"] {
            near(
                written_offset(&mut env, col, 1),
                offset,
                &format!("{what}: {col}"),
            );
        }
        let extra = "heartbeat_column = \"heartbeat_at\"\nretry_value = \"pending\"\n\
                     attempts_column = \"attempts\"\nmax_attempts = 3\n\
                     retry_at_column = \"retry_at\"\nretry_backoff = \"1m\"";
        let beating = config(&env, selfheal_tz, &watch("1m", extra));
        judged(&mut env, &beating, &[1, 2], "alive", &what);
        let starting = config(&env, selfheal_tz, &no_beat(&env));
        judged(&mut env, &starting, &[1, 2], "starting", &what);

        // The worker dies; selfheal sends row 1 back with retry_at a minute ahead.
        ok(&w.send(&json!({"op": "finish", "status": "done", "as": "b"})));
        w.kill9();
        let cfg = config(&env, selfheal_tz, &watch("2s", extra));
        // Text read as UTC: the zone's offset off its age.
        wait_until("the heartbeat goes stale", secs(60), || {
            env.age("heartbeat_at", 1) + offset >= 3
        });
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let r = row(&rows, 1);
        assert_eq!(
            (&r["verdict"], &r["action"], &r["applied"]),
            (&"dead".into(), &"mark_retry".into(), &true.into()),
            "{what}: {r}"
        );
        near(written_offset(&mut env, "retry_at", 1), offset + 60, &what);
        let mut next = Php::repl(&env, &lease_spec);
        assert_eq!(ok(&next.send(&claim(1))), Value::Null, "{what}: not due");
        assert_eq!(ok(&next.send(&op("claimNext"))), Value::Null, "{what}");
        env.exec("UPDATE sync_log SET retry_at = datetime(retry_at, '-120 seconds') WHERE id = 1");
        assert_eq!(ok(&next.send(&op("claimNext")))["id"], "1", "{what}: due");
        ok(&next.send(&finish("done")));
        near(written_offset(&mut env, "end_time", 1), offset, &what);
    }
}

/// A `timezone` that is neither a zone name nor `±HH:MM` is an exception with a sentence,
/// and nothing is claimed.
#[test]
fn a_bad_timezone_is_an_exception_with_a_sentence() {
    let Some(mut env) = Env::sqlite("TEXT") else {
        return;
    };
    env.insert_pending(1..=1);
    let before = env.dump();
    let mut w = Php::repl(&env, &spec(&json!({})));
    for bad in [
        json!("Mars/Olympus"),
        json!("europe/berlin"),
        json!("+15:00"),
        json!("+5:00"),
        json!("SYSTEM"),
        json!(""),
        json!(5),
    ] {
        ok(&w.send(&json!({"op": "spec", "spec": spec(&json!({"timezone": bad}))})));
        threw(
            &w.send(&claim(1)),
            "InvalidArgumentException",
            "'timezone' must be a time zone name (as selfheal's [database] timezone, e.g. \
             'Europe/Berlin') or an offset from UTC as +HH:MM or -HH:MM",
        );
    }
    assert_eq!(env.dump(), before);
    for good in [
        "Europe/Berlin",
        "Asia/Calcutta",
        "+05:30",
        "-00:00",
        "+14:00",
    ] {
        ok(&w.send(&json!({"op": "spec", "spec": spec(&json!({"timezone": good}))})));
        ok(&w.send(&claim(1)));
        ok(&w.send(&op("beat")));
        ok(&w.send(&finish("pending")));
    }
}

// ---------------------------------------------------------------------------------------
// ON UPDATE CURRENT_TIMESTAMP

/// A `sync_log` whose start (TIMESTAMP, as older MySQL declares the first TIMESTAMP column
/// of a table) and heartbeat (DATETIME) move to now on every UPDATE that does not set them.
fn on_update_env() -> Option<Env> {
    let mut db = MysqlDb::new()?;
    if !have_php("pdo_mysql") {
        return None;
    }
    db.exec(
        "CREATE TABLE sync_log (
            id INT PRIMARY KEY,
            status VARCHAR(16) NOT NULL,
            start_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
            end_time DATETIME NULL,
            error_msg VARCHAR(255) NOT NULL DEFAULT '',
            heartbeat_at DATETIME NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP,
            worker VARCHAR(64) NULL,
            attempts INT NOT NULL DEFAULT 0,
            retry_at DATETIME NULL,
            KEY idx_status (status)
        ) ENGINE=InnoDB",
    );
    Some(Env {
        sb: Sandbox::new(),
        db: Backend::Mysql(db),
        time: "TIMESTAMP ON UPDATE",
    })
}

/// `(start_time, heartbeat_at)` of row `id` as text.
fn times(env: &mut Env, id: i64) -> (Option<String>, Option<String>) {
    let r = env
        .rows(&format!(
            "SELECT start_time, heartbeat_at FROM sync_log WHERE id = {id}"
        ))
        .pop()
        .unwrap_or_else(|| panic!("no row {id}"));
    (r[0].clone(), r[1].clone())
}

/// The lease on a table whose start moves on every UPDATE: it claims, beats several times
/// across seconds, and finishes (and, on a second row, retries) with no LeaseLost; the
/// start stays what the claim wrote; selfheal judges the beating row alive meanwhile.
#[test]
fn the_lease_keeps_a_start_declared_on_update_current_timestamp() {
    let Some(mut env) = on_update_env() else {
        return;
    };
    env.insert_pending(1..=2);
    let mut w = Php::repl(&env, &spec(&json!({})));
    let started = ok(&w.send(&claim(1)))["started"].clone();
    let (start, _) = times(&mut env, 1);
    assert_eq!(
        Some(started.as_str().unwrap_or_default().to_string()),
        start
    );
    for _ in 0..3 {
        assert_eq!(
            ok(&w.send(&json!({"op": "beats", "n": 2, "pause_ms": 600}))),
            2
        );
        assert_eq!(times(&mut env, 1).0, start, "the start stays");
    }
    assert!(env.age("heartbeat_at", 1) <= 1, "the heartbeat moves on");
    assert!(env.age("start_time", 1) >= 3, "beats spanned seconds");
    let cfg = config(
        &env,
        None,
        &watch("1m", "heartbeat_column = \"heartbeat_at\""),
    );
    judged(&mut env, &cfg, &[1], "alive", "ON UPDATE");
    assert_eq!(ok(&w.send(&op("stillMine"))), true);
    ok(&w.send(&finish("done")));
    assert_eq!(env.row(1).0, "done");
    assert_eq!(times(&mut env, 1).0, start, "finish keeps the start");

    ok(&w.send(&claim(2)));
    let (start, _) = times(&mut env, 2);
    assert_eq!(
        ok(&w.send(&json!({"op": "beats", "n": 3, "pause_ms": 600}))),
        3
    );
    assert_eq!(
        ok(&w.send(&json!({"op": "retryLater", "reason": "api 503", "seconds": 0}))),
        "pending"
    );
    assert_eq!(times(&mut env, 2).0, start, "retryLater keeps the start");
    assert_eq!(env.row(2).2, 1);
}

/// selfheal's real run marks dead rows of such a table — one alone, then two in one
/// group of writes — and their start and heartbeat stay as the compare-and-set matched
/// them, as they do through a person's `selfheal resolve` of a parked row; `doctor` names
/// both columns and the ALTER TABLE that drops the clause, which, run, leaves the columns
/// otherwise as they were and ends the finding.
#[test]
fn selfheal_keeps_on_update_columns_and_doctor_shows_the_alter_table() {
    let Some(mut env) = on_update_env() else {
        return;
    };
    let cfg = config(
        &env,
        None,
        &watch(
            "1m",
            "heartbeat_column = \"heartbeat_at\"\nmanual_value = \"wait_manual\"",
        ),
    );
    let dead = |env: &mut Env, ids: &[i64]| {
        for id in ids {
            env.exec(&format!(
                "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES ({id}, \
                 'running', NOW() - INTERVAL 10 MINUTE, NOW() - INTERVAL 9 MINUTE)"
            ));
        }
    };
    for ids in [&[1][..], &[2, 3][..]] {
        dead(&mut env, ids);
        let before: Vec<_> = ids.iter().map(|&id| times(&mut env, id)).collect();
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        for (i, &id) in ids.iter().enumerate() {
            let r = row(&rows, id);
            assert_eq!(
                (&r["verdict"], &r["action"], &r["applied"]),
                (&"dead".into(), &"mark_dead".into(), &true.into()),
                "{r}"
            );
            let (status, _, _, msg, ended) = env.row(id);
            assert_eq!((status.as_str(), ended), ("error", true), "row {id}");
            assert!(msg.starts_with("self-heal: dead: "), "{msg}");
            assert_eq!(
                times(&mut env, id),
                before[i],
                "row {id}: start and heartbeat as they were"
            );
        }
    }

    // A person's decisions on a parked row: back to running, then dead.
    env.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES (4, 'wait_manual', \
         NOW() - INTERVAL 10 MINUTE, NOW() - INTERVAL 9 MINUTE)",
    );
    let before = times(&mut env, 4);
    for (to, status) in [("running", "running"), ("dead", "error")] {
        let o = selfheal()
            .args(["resolve", "--config"])
            .arg(&cfg)
            .args(["lease", "4", "--as", to])
            .output()
            .expect("resolve");
        assert_exit(&o, 0);
        assert_eq!(env.row(4).0, status);
        assert_eq!(
            times(&mut env, 4),
            before,
            "resolve --as {to}: times as they were"
        );
    }

    let doctor = || {
        selfheal()
            .args(["doctor", "--config"])
            .arg(&cfg)
            .output()
            .expect("doctor")
    };
    let o = doctor();
    assert_exit(&o, 1);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("! watch lease: ON UPDATE: "))
        .unwrap_or_else(|| panic!("no ON UPDATE finding:\n{out}"));
    assert!(
        line.contains(
            "started_column start_time is declared ON UPDATE CURRENT_TIMESTAMP: every UPDATE \
             of a row that does not set it moves it to now"
        ) && line.contains("heartbeat_column heartbeat_at is declared ON UPDATE"),
        "{line}"
    );
    let (_, fix) = line
        .split_once("; fix: drop the clause: ")
        .unwrap_or_else(|| panic!("{line}"));
    let alters: Vec<&str> = fix.split("; ").collect();
    // As the server writes the definitions (MySQL: CURRENT_TIMESTAMP, no parentheses).
    let plain = |a: &&str| a.to_ascii_lowercase().replace("()", "");
    assert_eq!(
        alters.iter().map(plain).collect::<Vec<_>>(),
        [
            "alter table `sync_log` modify `start_time` timestamp not null default \
             current_timestamp",
            "alter table `sync_log` modify `heartbeat_at` datetime default null",
        ],
        "{line}"
    );
    for a in &alters {
        env.exec(a);
    }
    // The clause is gone; type, NULL and the start's default are kept.
    let cols = env.rows(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, EXTRA, \
         COALESCE(LOWER(COLUMN_DEFAULT) LIKE 'current_timestamp%', 0) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME = 'sync_log' AND COLUMN_NAME IN ('start_time', 'heartbeat_at') \
         ORDER BY COLUMN_NAME",
    );
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        cols,
        [
            [
                some("heartbeat_at"),
                some("datetime"),
                some("YES"),
                some(""),
                some("0")
            ],
            [
                some("start_time"),
                some("timestamp"),
                some("NO"),
                some(""),
                some("1")
            ],
        ]
    );
    let out = stdout(&doctor());
    assert!(!out.contains("ON UPDATE"), "{out}");
}

// ---------------------------------------------------------------------------------------
// A specification the lease cannot use

/// `Selfheal\Lease::claim` on `env`'s row 1 with `spec` (JSON), `every` replaced by the PHP
/// constant `every` when given (`NAN`, `INF`: no JSON for them): what it says.
fn claim_once(env: &Env, spec: &Value, every: Option<&str>) -> String {
    let (dsn, user, pass) = env.dsn();
    let code = r#"require getenv('LEASE');
        $pdo = new PDO(getenv('DSN'), getenv('DBUSER'), getenv('DBPASS'),
            array(PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION));
        $spec = json_decode(getenv('SPEC'), true);
        if (getenv('EVERY') !== false) { $spec['every'] = constant(getenv('EVERY')); }
        try {
            $l = Selfheal\Lease::claim($pdo, $spec, 1);
            echo $l === null ? 'none' : 'claimed';
        } catch (InvalidArgumentException $e) {
            echo 'refused: ' . $e->getMessage();
        }"#;
    let mut cmd = std::process::Command::new("php");
    cmd.arg("-r")
        .arg(code)
        .env("LEASE", root().join("php/Selfheal/Lease.php"))
        .env("DSN", dsn)
        .env("DBUSER", user)
        .env("DBPASS", pass)
        .env("SPEC", spec.to_string());
    if let Some(e) = every {
        cmd.env("EVERY", e);
    }
    let o = cmd.output().expect("php");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A floating-point or decimal time column cannot hold the exact time every write is fenced
/// by (a FLOAT rounds a unix time by minutes: the lease would be lost at its first beat),
/// and an `every` that is no finite number would make every `beat()` write: both are
/// refused with a sentence, and nothing is written.
#[test]
fn a_time_column_or_an_interval_the_lease_cannot_use_is_refused() {
    let mut envs: Vec<Env> = ["FLOAT", "DOUBLE", "DECIMAL(14,3)"]
        .into_iter()
        .filter_map(Env::mysql)
        .collect();
    envs.extend(Env::sqlite("REAL"));
    for mut env in envs {
        env.insert_pending(1..=1);
        let before = env.dump();
        let said = claim_once(&env, &spec(&json!({})), None);
        assert!(
            said.starts_with("refused: Selfheal\\Lease: column start_time ('started_column') is ")
                && said.contains("expected DATETIME, TIMESTAMP or an integer of unix seconds"),
            "{}: {said}",
            env.time
        );
        assert_eq!(env.dump(), before, "{}", env.time);
    }
    let Some(mut env) = Env::sqlite("INTEGER") else {
        return;
    };
    env.insert_pending(1..=1);
    let before = env.dump();
    for every in ["NAN", "INF"] {
        let said = claim_once(&env, &spec(&json!({})), Some(every));
        assert!(
            said.starts_with("refused: Selfheal\\Lease: 'every' must be between 0.001 and 86400"),
            "{every}: {said}"
        );
    }
    assert_eq!(env.dump(), before);
    assert_eq!(claim_once(&env, &spec(&json!({})), None), "claimed");
}
