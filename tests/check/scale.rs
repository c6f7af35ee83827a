//! Backlogs: hundreds of thousands of running rows judged in bounded memory and output
//! (docs/design.md#paging, docs/design.md#output), and rows that finish while a run pages through them.
//! Not timed: speed and memory figures are `scripts/bench --only scale`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use mysql::prelude::Queryable;

/// The address space `check` gets for 200,000 rows: a build that reads every running row
/// at once (before paging) needs more than 128 MiB of it for these rows and aborts; a
/// paged run needs under 48.
const ADDRESS_SPACE_KIB: u64 = 96 * 1024;

/// `selfheal check --config CFG` with at most `kib` KiB of address space (`ulimit -v`).
fn check_within(cfg: &Path, kib: u64) -> Output {
    run_within(cfg, kib, &["check"])
}

/// `selfheal ARGS… --config CFG` with at most `kib` KiB of address space.
fn run_within(cfg: &Path, kib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .arg("--config")
        .arg(cfg)
        .output()
        .expect("run selfheal under ulimit")
}

/// The watch of these tests: the heartbeat and owner columns, no files (a backlog of rows,
/// not of files), an end time and a message.
fn watch() -> String {
    "name = \"backlog\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
     heartbeat_column = \"heartbeat_at\"\nowner_column = \"worker\"\n\
     ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
     stale_after = \"5m\"\nmax_age = \"6h\"\n"
        .to_string()
}

/// Ids (applied changes) the journal has, each with how many times.
fn journaled(sb: &Sandbox) -> BTreeMap<i64, usize> {
    let mut ids = BTreeMap::new();
    for e in sb.journal() {
        if e["applied"] == true {
            *ids.entry(e["id"].as_i64().expect("id")).or_default() += 1;
        }
    }
    ids
}

#[test]
fn two_hundred_thousand_running_rows_are_judged_in_a_small_address_space() {
    const ROWS: i64 = 200_000;
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = format!("{}:{}", hostname(), exited_pid());
    // Every 100th row's worker is gone (its pid, on this host) and its heartbeat 15 minutes
    // old: dead, conclusively, acted on at once. Every 4,000th (not a 100th) beat 15
    // minutes ago with no other sign: inferred, it waits for its confirmation. The rest
    // beat 10 seconds ago.
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         SELECT i, 'running', datetime('now', '-20 minutes'),
                CASE WHEN i % 100 = 0 OR i % 4000 = 50 THEN datetime('now', '-15 minutes')
                     ELSE datetime('now', '-10 seconds') END,
                CASE WHEN i % 100 = 0 THEN '{gone}' END
         FROM n"
    ));
    let cfg = sb.config(&db.url(), &watch());
    let o = check_within(&cfg, ADDRESS_SPACE_KIB);
    assert_exit(&o, 0);
    let marked: BTreeSet<i64> = db
        .conn()
        .prepare("SELECT id FROM sync_log WHERE status = 'error'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .map(|r| r.expect("id"))
        .collect();
    let dead: BTreeSet<i64> = (1..=ROWS).filter(|i| i % 100 == 0).collect();
    assert_eq!(marked, dead, "exactly the rows whose worker is gone");
    let running: i64 = db
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM sync_log WHERE status = 'running'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(running, ROWS - 2_000);
    let once: BTreeMap<i64, usize> = dead.iter().map(|i| (*i, 1)).collect();
    assert_eq!(journaled(&sb), once, "each dead row journaled once");
    // The cron text: 50 rows, then one line for the rest.
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 51, "{out}");
    assert!(
        lines[50]
            .starts_with("… and 1950 more rows not listed here (1950 changed, 0 need a person)"),
        "{}",
        lines[50]
    );
    // A cron period later, the same bound: the 50 inferred deaths confirmed and marked;
    // nothing marked twice.
    next_cron_run(&sb);
    let o = check_within(&cfg, ADDRESS_SPACE_KIB);
    assert_exit(&o, 0);
    let later: BTreeSet<i64> = (1..=ROWS).filter(|i| i % 4000 == 50).collect();
    let mut all = dead.clone();
    all.extend(&later);
    let twice: BTreeMap<i64, usize> = all.iter().map(|i| (*i, 1)).collect();
    assert_eq!(journaled(&sb), twice);
    assert_eq!(stdout(&o).lines().count(), 50, "{}", stdout(&o));
}

/// A worker finishing its rows while `check` pages through them, from the highest id down
/// (`check` goes up): each finish a compare-and-set of its own. Returns the ids it
/// finished; `stop` ends it.
fn finisher(
    dead: Vec<i64>,
    stop: Arc<AtomicBool>,
    mut finish: impl FnMut(i64) -> bool + Send + 'static,
) -> std::thread::JoinHandle<BTreeSet<i64>> {
    std::thread::spawn(move || {
        let mut won = BTreeSet::new();
        for id in dead.into_iter().rev() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if finish(id) {
                won.insert(id);
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        won
    })
}

/// What both databases check after the race: every row the worker finished is still
/// finished, as it wrote it; every row `check` marked is one the worker did not finish;
/// between them, every dead row; the living untouched.
fn after_the_race(
    won: &BTreeSet<i64>,
    rows: &BTreeMap<i64, (String, String)>,
    sb: &Sandbox,
    dead: &BTreeSet<i64>,
) {
    let marked: BTreeSet<i64> = journaled(sb).into_keys().collect();
    let lost = sb
        .journal()
        .iter()
        .filter(|e| e["action"] == "lost_race")
        .count();
    eprintln!(
        "the worker finished {}, check marked {}, and lost {} races",
        won.len(),
        marked.len(),
        lost
    );
    assert!(
        !won.is_empty() && !marked.is_empty(),
        "the worker finished {} rows and check marked {}: no race took place",
        won.len(),
        marked.len()
    );
    for id in won {
        assert_eq!(
            rows[id],
            ("done".to_string(), "finished".to_string()),
            "row {id}, finished by its worker, was overwritten"
        );
    }
    for id in &marked {
        assert!(!won.contains(id), "row {id}: finished, then marked");
        assert_eq!(rows[id].0, "error", "row {id}");
    }
    let both: BTreeSet<i64> = won.union(&marked).copied().collect();
    assert_eq!(&both, dead, "each dead row finished or marked");
    for (id, (status, _)) in rows {
        if !dead.contains(id) {
            assert_eq!(status, "running", "row {id} lives");
        }
    }
}

const RACE_ROWS: i64 = 30_000;

#[test]
fn rows_that_finish_while_check_pages_through_them_are_never_overwritten_sqlite() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = format!("{}:{}", hostname(), exited_pid());
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {RACE_ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         SELECT i, 'running', datetime('now', '-20 minutes'),
                CASE WHEN i % 10 = 0 THEN datetime('now', '-15 minutes')
                     ELSE datetime('now', '-10 seconds') END,
                CASE WHEN i % 10 = 0 THEN '{gone}' END
         FROM n"
    ));
    let dead: BTreeSet<i64> = (1..=RACE_ROWS).filter(|i| i % 10 == 0).collect();
    let cfg = sb.config(&db.url(), &watch());
    let stop = Arc::new(AtomicBool::new(false));
    let path = db.path.clone();
    let worker = finisher(dead.iter().copied().collect(), stop.clone(), move |id| {
        let c = rusqlite::Connection::open(&path).expect("open");
        c.busy_timeout(Duration::from_secs(30)).expect("busy");
        c.execute(
            "UPDATE sync_log SET status = 'done', error_msg = 'finished', \
             end_time = datetime('now') WHERE id = ?1 AND status = 'running'",
            [id],
        )
        .expect("finish")
            == 1
    });
    let o = check(&cfg, &[]);
    stop.store(true, Ordering::SeqCst);
    let won = worker.join().expect("worker");
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{o:?}"
    );
    let rows: BTreeMap<i64, (String, String)> = db
        .conn()
        .prepare("SELECT id, status, error_msg FROM sync_log")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .expect("query")
        .map(|r| r.expect("row"))
        .collect();
    after_the_race(&won, &rows, &sb, &dead);
}

#[test]
fn rows_that_finish_while_check_pages_through_them_are_never_overwritten_mariadb() {
    let Some(mut db) = MysqlDb::new() else { return };
    db.create_sync_log("DATETIME");
    db.exec("SET SESSION max_recursive_iterations = 100000");
    let gone = format!("{}:{}", hostname(), exited_pid());
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {RACE_ROWS})
         SELECT i, 'running', NOW() - INTERVAL 20 MINUTE,
                IF(i % 10 = 0, NOW() - INTERVAL 15 MINUTE, NOW() - INTERVAL 10 SECOND),
                IF(i % 10 = 0, '{gone}', NULL)
         FROM n"
    ));
    let dead: BTreeSet<i64> = (1..=RACE_ROWS).filter(|i| i % 10 == 0).collect();
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &watch());
    let stop = Arc::new(AtomicBool::new(false));
    let mut conn = db.conn();
    let worker = finisher(dead.iter().copied().collect(), stop.clone(), move |id| {
        conn.exec_drop(
            "UPDATE sync_log SET status = 'done', error_msg = 'finished', end_time = NOW() \
             WHERE id = ? AND status = 'running'",
            (id,),
        )
        .expect("finish");
        conn.affected_rows() == 1
    });
    let o = check(&cfg, &[]);
    stop.store(true, Ordering::SeqCst);
    let won = worker.join().expect("worker");
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{o:?}"
    );
    let rows: BTreeMap<i64, (String, String)> = db
        .query::<(i64, String, String)>("SELECT id, status, error_msg FROM sync_log")
        .into_iter()
        .map(|(id, s, m)| (id, (s, m)))
        .collect();
    after_the_race(&won, &rows, &sb, &dead);
}

#[test]
fn rows_that_finish_while_check_pages_through_them_are_never_overwritten_postgres() {
    let Some(mut db) = PgDb::new() else { return };
    db.create_sync_log("TIMESTAMP");
    let gone = format!("{}:{}", hostname(), exited_pid());
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         SELECT i, 'running', LOCALTIMESTAMP - INTERVAL '20 minutes',
                CASE WHEN i % 10 = 0 THEN LOCALTIMESTAMP - INTERVAL '15 minutes'
                     ELSE LOCALTIMESTAMP - INTERVAL '10 seconds' END,
                CASE WHEN i % 10 = 0 THEN '{gone}' END
         FROM generate_series(1, {RACE_ROWS}) AS i;
         ANALYZE sync_log"
    ));
    let dead: BTreeSet<i64> = (1..=RACE_ROWS).filter(|i| i % 10 == 0).collect();
    let sb = Sandbox::new();
    let cfg = sb.config(&db.url, &watch());
    let stop = Arc::new(AtomicBool::new(false));
    let mut conn = db.conn();
    let finish = conn
        .prepare(
            "UPDATE sync_log SET status = 'done', error_msg = 'finished', \
             end_time = LOCALTIMESTAMP WHERE id = $1 AND status = 'running'",
        )
        .expect("prepare");
    let worker = finisher(dead.iter().copied().collect(), stop.clone(), move |id| {
        let id = i32::try_from(id).expect("an id");
        conn.execute(&finish, &[&id]).expect("finish") == 1
    });
    let o = check(&cfg, &[]);
    stop.store(true, Ordering::SeqCst);
    let won = worker.join().expect("worker");
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{o:?}"
    );
    let rows: BTreeMap<i64, (String, String)> = db
        .rows("SELECT id, status, error_msg FROM sync_log")
        .into_iter()
        .map(|r| {
            let cell = |i: usize| r[i].clone().unwrap_or_default();
            (cell(0).parse().expect("id"), (cell(1), cell(2)))
        })
        .collect();
    after_the_race(&won, &rows, &sb, &dead);
}

/// A watch of 12,000 running rows spans three pages but fits what the first pass keeps:
/// each heartbeat file is probed once (one `statx`, never opened), and once more just
/// before its row's write; every dead row is marked and journaled once.
#[test]
fn a_watch_of_a_few_pages_is_probed_once() {
    const ROWS: i64 = 12_000;
    if !have_tool("strace", &["-V"], "counting the probes of heartbeat files") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time)
         SELECT i, 'running', datetime('now', '-20 minutes') FROM n"
    ));
    let now = std::time::SystemTime::now();
    for id in 1..=ROWS {
        let age = if id % 100 == 0 { 15 * 60 } else { 10 };
        sb.heartbeat_at(id, now - Duration::from_secs(age));
    }
    // The dead rows' lock files are free: conclusive, acted on at once.
    for id in (100..=ROWS).step_by(100) {
        std::fs::write(sb.lock_path(id), "").expect("lock file");
    }
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!("lock_file = \"{}\"\n", sb.lock_template())),
    );
    let trace = sb.path("stat.trace");
    let o = Command::new("strace")
        .args([
            "-f",
            "-e",
            "trace=open,openat,stat,lstat,newfstatat,statx",
            "-o",
        ])
        .arg(&trace)
        .arg(bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .env_remove("SELFHEAL_CONFIG")
        .output()
        .expect("strace");
    assert_exit(&o, 0);
    let trace = std::fs::read_to_string(&trace).expect("trace");
    let probes = trace.lines().filter(|l| l.contains("/hb-")).count();
    assert_eq!(probes, 12_000 + 120, "one probe a row, one more a write");
    assert!(
        !trace
            .lines()
            .any(|l| l.contains("/hb-") && l.contains("open")),
        "a heartbeat file is looked at, never opened"
    );
    let once: BTreeMap<i64, usize> = (100..=ROWS).step_by(100).map(|i| (i, 1)).collect();
    assert_eq!(journaled(&sb), once);
}

/// A run that changes more rows than the journal's generations hold (some 15,000 changes a
/// generation, 3 generations kept) rotates the journal several times as it goes: none of its
/// own changes is rotated away before it ends, so `show` finds the history of a row it
/// changed first; the next run that rotates brings the journal back to its bound and says
/// that older history was cut.
#[test]
fn a_run_of_seventy_thousand_changes_keeps_every_one_of_them_in_the_journal() {
    const ROWS: i64 = 70_000;
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = format!("{}:{}", hostname(), exited_pid());
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         SELECT i, 'running', datetime('now', '-20 minutes'), datetime('now', '-15 minutes'),
                '{gone}'
         FROM n"
    ));
    let cfg = sb.config(&db.url(), &watch());
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let generations = (1..)
        .take_while(|n| sb.state_dir().join(format!("journal.jsonl.{n}")).exists())
        .count();
    assert!(generations > 3, "the run rotated {generations} times");
    // Every generation's lines, ids of applied changes with how many times.
    let mut ids: BTreeMap<i64, usize> = BTreeMap::new();
    for n in 0..=generations {
        let name = if n == 0 {
            "journal.jsonl".to_string()
        } else {
            format!("journal.jsonl.{n}")
        };
        let text = std::fs::read_to_string(sb.state_dir().join(name)).expect("generation");
        for line in text.lines() {
            let e: serde_json::Value = serde_json::from_str(line).expect("journal line");
            if e["applied"] == true {
                *ids.entry(e["id"].as_i64().expect("id")).or_default() += 1;
            }
        }
    }
    assert_eq!(
        ids.len(),
        usize::try_from(ROWS).expect("rows"),
        "every change kept"
    );
    assert!(ids.values().all(|n| *n == 1));
    let shown = selfheal()
        .args(["show", "backlog", "1", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    let v: serde_json::Value = serde_json::from_str(stdout(&shown).trim()).expect("json");
    let history = v["history"].as_array().expect("history");
    assert!(
        history.iter().any(|e| e["action"] == "mark_dead"),
        "the first row's change is in its history: {v}"
    );
    assert_eq!(v["history_cut"], serde_json::Value::Null, "nothing cut yet");
    // The next run that opens the journal at its bound trims it back, and says so.
    std::fs::OpenOptions::new()
        .append(true)
        .open(sb.state_dir().join("journal.jsonl"))
        .and_then(|f| f.set_len(8 << 20))
        .expect("the journal at its bound");
    db.exec("UPDATE sync_log SET status = 'running', end_time = NULL WHERE id = 2");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        !sb.state_dir().join("journal.jsonl.4").exists(),
        "back to 3 generations"
    );
    let shown = selfheal()
        .args(["show", "backlog", "1", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    let text = stdout(&shown);
    assert!(
        text.lines().any(|l| l.starts_with(
            "  history       none in the journal: the journal \
                                            holds entries since "
        ) && l.contains("older ones were rotated away")),
        "{text}"
    );
}

/// The rows a state file holds for the watch of these tests, by its list's key.
fn state_rows(sb: &Sandbox, file: &str, list: &str) -> usize {
    let text = std::fs::read_to_string(sb.state_dir().join(file)).unwrap_or_default();
    if text.is_empty() {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_str(&text).expect(file);
    v[list].as_array().map_or(0, |a| {
        a.iter()
            .filter(|e| {
                e["watch"] == "backlog"
                    || (e["subject"]["kind"] == "row" && e["subject"]["watch"] == "backlog")
            })
            .count()
    })
}

/// The state grew run after run over a backlog that stayed: each run remembered another
/// 10,000 rows in `reminders.json` and counted another 10,000 in `confirmations.json`, so
/// the files, and the memory of the runs that read them, grew without bound.
///
/// Ten cron runs over 24,000 rows that stay: half need a person (their heartbeat a day in
/// the future: remembered for the cron text and sighted), half are silent under a
/// `confirm` they never reach (counted). Every run keeps each file at 10,000 rows of the
/// watch and runs in the same small address space.
#[test]
fn ten_runs_over_a_backlog_that_stays_keep_the_state_files_bounded() {
    const ROWS: i64 = 24_000;
    const CAP: usize = 10_000;
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at)
         SELECT i, 'running', datetime('now', '-20 minutes'),
                CASE WHEN i % 2 = 0 THEN datetime('now', '+1 day')
                     ELSE datetime('now', '-15 minutes') END
         FROM n"
    ));
    let cfg = sb.config(&db.url(), &format!("{}confirm = 50\n", watch()));
    for run in 1..=10 {
        let o = check_within(&cfg, ADDRESS_SPACE_KIB);
        assert_exit(&o, 1);
        let told = state_rows(&sb, "reminders.json", "told");
        let counted = state_rows(&sb, "confirmations.json", "entries");
        let sighted = state_rows(&sb, "confirmations.json", "sightings");
        assert_eq!(
            (told, counted, sighted),
            (CAP, CAP, CAP),
            "run {run}: reminders, counts, sightings"
        );
        next_cron_run(&sb);
    }
    let running: i64 = db
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM sync_log WHERE status = 'running'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(running, ROWS, "nothing acted on");
}

/// 200,000 running rows that need a person (their heartbeat a day in the future: the
/// documented time-zone mismatch): `show` streams them in the small address space `check`
/// has, the text lists 50 and counts the rest per watch and verdict, `--all` and JSON list
/// every one; `doctor` counts them, each once.
#[test]
fn show_and_doctor_over_two_hundred_thousand_rows_that_need_a_person_stay_small() {
    const ROWS: i64 = 200_000;
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at)
         SELECT i, 'running', datetime('now', '-20 minutes'), datetime('now', '+1 day')
         FROM n"
    ));
    let cfg = sb.config(&db.url(), &watch());

    let o = run_within(&cfg, ADDRESS_SPACE_KIB, &["show"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 51, "{}", lines.last().unwrap_or(&""));
    assert!(
        lines[0].starts_with("backlog id=1: 'running'"),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[50],
        "… and 199950 more rows that need a person (backlog: 199950 unknown); selfheal show \
         --all lists every one"
    );

    let o = run_within(&cfg, ADDRESS_SPACE_KIB, &["show", "--all"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 200_000);
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("backlog id=200000: "))
    );

    let o = run_within(&cfg, ADDRESS_SPACE_KIB, &["show", "--format", "json"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let mut n = 0u64;
    let mut summary = None;
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
        if v["summary"] == true {
            summary = Some(v);
        } else {
            n += 1;
            assert_eq!(v["verdict"], "unknown", "{v}");
        }
    }
    assert_eq!(n, 200_000);
    assert_eq!(summary.expect("a summary")["rows"], 200_000);

    let o = run_within(&cfg, ADDRESS_SPACE_KIB, &["doctor"]);
    let out = stdout(&o);
    assert!(
        out.contains("200000 of 200000 running rows carry times in the future"),
        "{out}"
    );
    assert!(out.contains("running rows: 200000 unknown"), "{out}");
}

/// 400,000 running rows, each owned by a host of its own (`pod-<id>:1`, as containers with
/// unique names write): a real run in 64 MiB of address space — owner hosts are counted one
/// by one up to a bound and the rest summed (counting every name took more than 72 MiB
/// here) — and what it writes about them stays small: the metrics name the 20 busiest and
/// `other`, `last-run.json` a few KiB.
#[test]
fn four_hundred_thousand_distinct_owner_hosts_stay_small() {
    const ROWS: i64 = 400_000;
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker)
         SELECT i, 'running', datetime('now', '-60 seconds'), datetime('now', '-10 seconds'),
                'pod-' || i || '.invalid:1'
         FROM n"
    ));
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &watch(),
    );
    let o = run_within(&cfg, 64 * 1024, &["check"]);
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("selfheal_owner_rows{"))
        .collect();
    assert_eq!(series.len(), 21, "{series:?}");
    assert!(
        series
            .iter()
            .any(|l| l.contains("owner_host=\"other\"") && l.ends_with(&format!(" {}", ROWS - 20))),
        "every row counted once: {series:?}"
    );
    let last_run = std::fs::read(sb.state_dir().join("last-run.json")).expect("last-run.json");
    assert!(
        last_run.len() < 16 * 1024,
        "last-run.json: {} bytes",
        last_run.len()
    );
}
