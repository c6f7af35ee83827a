//! A person's side (docs/design.md#person, docs/design.md#retry), through the real binary on real SQLite
//! files, a real MariaDB and a real PostgreSQL: `selfheal show` lists what needs a person and nothing else and
//! shows one row's whole record (with its journal across a rotation); `selfheal resolve`
//! decides with one journaled compare-and-set (the actor from `SUDO_USER`, the metrics
//! counter), refuses a worker a real process proves alive (and, forced, never touches its
//! lock), refuses a row that finished, loses a race it must lose, writes nothing on
//! `--dry-run`, and wants `--yes` for more than 10 rows without a terminal; `check`
//! un-parks a row parked as hung whose real `flock(1)` holder resumes beating (and never
//! one parked for spent retries); a reclaim's `retry_at` follows the backoff on every
//! database, for date-time and integer columns.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use crate::common::*;
use mysql::prelude::Queryable;

// ---------------------------------------------------------------------------------------
// Both databases behind one face

/// The job table used here: the standard columns, plus `retry_at` (a date-time),
/// `retry_at_s` (unix seconds), `retry_at_ts` (a MariaDB TIMESTAMP) and `job` (two job
/// kinds in one table).
const SQLITE_TABLE: &str = "CREATE TABLE sync_log (
    id INTEGER PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    start_time TEXT,
    end_time TEXT,
    error_msg VARCHAR(255) NOT NULL DEFAULT '',
    heartbeat_at TEXT,
    worker TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    retry_at TEXT,
    retry_at_s INTEGER,
    retry_at_ts TEXT,
    job TEXT NOT NULL DEFAULT 'full-sync'
);
CREATE INDEX sync_log_status ON sync_log (status);";

const MYSQL_TABLE: &str = "CREATE TABLE sync_log (
    id INT PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    start_time DATETIME NULL,
    end_time DATETIME NULL,
    error_msg VARCHAR(255) NOT NULL DEFAULT '',
    heartbeat_at DATETIME NULL,
    worker VARCHAR(64) NULL,
    attempts INT NOT NULL DEFAULT 0,
    retry_at DATETIME NULL,
    retry_at_s BIGINT NULL,
    retry_at_ts TIMESTAMP NULL DEFAULT NULL,
    job VARCHAR(16) NOT NULL DEFAULT 'full-sync',
    KEY idx_status (status)
) ENGINE=InnoDB";

/// The same table on PostgreSQL: `retry_at_ts` a `timestamptz`.
const PG_TABLE: &str = "CREATE TABLE sync_log (
    id INT PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    start_time TIMESTAMP NULL,
    end_time TIMESTAMP NULL,
    error_msg VARCHAR(255) NOT NULL DEFAULT '',
    heartbeat_at TIMESTAMP NULL,
    worker VARCHAR(64) NULL,
    attempts INT NOT NULL DEFAULT 0,
    retry_at TIMESTAMP NULL,
    retry_at_s BIGINT NULL,
    retry_at_ts TIMESTAMPTZ NULL,
    job VARCHAR(16) NOT NULL DEFAULT 'full-sync'
);
CREATE INDEX idx_status ON sync_log (status, id)";

enum Db {
    Lite(SqliteDb),
    My(MysqlDb),
    Pg(PgDb),
}

impl Db {
    fn sqlite(sb: &Sandbox) -> Db {
        Db::Lite(SqliteDb::with_schema(sb, SQLITE_TABLE))
    }

    /// `None`: no server (skipped outside CI; in CI the helper fails the test).
    fn mysql() -> Option<Db> {
        let mut db = MysqlDb::new()?;
        db.exec(MYSQL_TABLE);
        Some(Db::My(db))
    }

    /// `None`: no server (skipped outside CI; in CI the helper fails the test).
    fn postgres() -> Option<Db> {
        let mut db = PgDb::new()?;
        db.exec(PG_TABLE);
        Some(Db::Pg(db))
    }

    fn url(&self) -> String {
        match self {
            Db::Lite(d) => d.url(),
            Db::My(d) => d.url.clone(),
            Db::Pg(d) => d.url.clone(),
        }
    }

    fn exec(&mut self, sql: &str) {
        match self {
            Db::Lite(d) => d.exec(sql),
            Db::My(d) => d.exec(sql),
            Db::Pg(d) => d.exec(sql),
        }
    }

    /// The database's now minus `secs`, as SQL.
    fn ago(&self, secs: u64) -> String {
        match self {
            Db::Lite(_) => format!("datetime('now', '-{secs} seconds')"),
            Db::My(_) => format!("NOW() - INTERVAL {secs} SECOND"),
            Db::Pg(_) => format!("LOCALTIMESTAMP - INTERVAL '{secs} seconds'"),
        }
    }

    /// Unix seconds of a date-time column, as SQL.
    fn epoch_of(&self, col: &str) -> String {
        match self {
            Db::Lite(_) => format!("CAST(strftime('%s', {col}) AS INTEGER)"),
            Db::My(_) => format!("UNIX_TIMESTAMP({col})"),
            Db::Pg(_) => format!("EXTRACT(EPOCH FROM {col})::bigint"),
        }
    }

    /// A row of `job`, started `age` seconds ago on the database clock.
    fn insert(&mut self, id: i64, status: &str, age: u64, job: &str) {
        let at = self.ago(age);
        self.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time, job) VALUES ({id}, '{status}', {at}, '{job}')"
        ));
    }

    /// The first column of the first row of `sql`, as text (`None` for NULL or no row).
    fn one(&mut self, sql: &str) -> Option<String> {
        match self {
            Db::Lite(d) => d
                .conn()
                .query_row(sql, [], |r| {
                    Ok(match r.get_ref(0)? {
                        rusqlite::types::ValueRef::Null => None,
                        rusqlite::types::ValueRef::Integer(i) => Some(i.to_string()),
                        rusqlite::types::ValueRef::Real(f) => Some(f.to_string()),
                        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                            Some(String::from_utf8_lossy(t).into_owned())
                        }
                    })
                })
                .ok()
                .flatten(),
            Db::My(d) => {
                let rows: Vec<mysql::Row> = d.query(sql);
                rows.into_iter()
                    .next()
                    .and_then(|r| match r.unwrap().into_iter().next() {
                        None | Some(mysql::Value::NULL) => None,
                        Some(mysql::Value::Bytes(b)) => {
                            Some(String::from_utf8_lossy(&b).into_owned())
                        }
                        Some(v) => Some(v.as_sql(true).trim_matches('\'').to_string()),
                    })
            }
            Db::Pg(d) => d.one(sql),
        }
    }

    fn status(&mut self, id: i64) -> String {
        self.one(&format!("SELECT status FROM sync_log WHERE id = {id}"))
            .unwrap_or_else(|| panic!("no row {id}"))
    }

    fn int(&mut self, sql: &str) -> i64 {
        self.one(sql)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("not a number: {sql}"))
    }

    /// Every column of every row, as text, for comparing before and after.
    fn dump(&mut self) -> String {
        match self {
            Db::Lite(d) => format!("{:?}", d.bytes()),
            Db::My(d) => format!("{:?}", d.dump()),
            Db::Pg(d) => format!("{:?}", d.dump()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Db::Lite(_) => "sqlite",
            Db::My(_) => "mariadb",
            Db::Pg(_) => "postgres",
        }
    }
}

/// `selfheal ARGS --config CFG`.
fn run(cfg: &Path, args: &[&str]) -> Output {
    selfheal()
        .args(args)
        .arg("--config")
        .arg(cfg)
        .output()
        .expect("run selfheal")
}

/// `selfheal ARGS --config CFG` with `SUDO_USER` set.
fn run_as(cfg: &Path, sudo_user: &str, args: &[&str]) -> Output {
    selfheal()
        .args(args)
        .arg("--config")
        .arg(cfg)
        .env("SUDO_USER", sudo_user)
        .output()
        .expect("run selfheal")
}

/// The watch `full-sync` (this job kind of the table) with per-row heartbeat and lock files,
/// an owner column, a place for people, and `extra`.
fn full_sync(sb: &Sandbox, extra: &str) -> String {
    format!(
        "name = \"full-sync\"\ntable = \"sync_log\"\nmatch = {{ job = \"full-sync\" }}\n\
         started_column = \"start_time\"\nheartbeat_file = \"{}\"\nlock_file = \"{}\"\n\
         owner_column = \"worker\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
         manual_value = \"wait_manual\"\n{extra}",
        sb.heartbeat_template(),
        sb.lock_template()
    )
}

/// The same with a retry queue and `retry_at_column = COL`.
fn with_retry(sb: &Sandbox, col: &str, extra: &str) -> String {
    full_sync(
        sb,
        &format!(
            "retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 5\n\
             retry_at_column = \"{col}\"\n{extra}"
        ),
    )
}

/// The journal's entries (this generation).
fn journal(sb: &Sandbox) -> Vec<serde_json::Value> {
    sb.journal()
}

fn metrics(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path("selfheal.prom")).unwrap_or_default()
}

/// `[run] metrics_file` in the sandbox.
fn metrics_run(sb: &Sandbox) -> String {
    format!("metrics_file = \"{}\"", sb.path("selfheal.prom").display())
}

fn config(sb: &Sandbox, db: &Db, watch: &str) -> PathBuf {
    sb.config_with(&format!("url = \"{}\"", db.url()), &metrics_run(sb), watch)
}

// ---------------------------------------------------------------------------------------
// selfheal show

/// Rows in every state under two watches: what `show` must list is 5 (unknown), 6
/// (overtime left for review), 7 (another host's, past max_age) and 9 (parked) of
/// full-sync, and 11 (hung, nightly has no manual_value); nothing else — not the live,
/// the starting, the one a real run reclaims at once, the one still confirming its hung
/// verdict, another host's row within its cap, or a finished one.
fn show_fixture(db: &mut Db, sb: &Sandbox) -> (PathBuf, Vec<Proc>) {
    let host = hostname();
    let mut holders = Vec::new();
    db.insert(1, "running", 2 * 3600, "full-sync"); // alive
    sb.heartbeat(1, Duration::from_secs(20));
    db.insert(2, "running", 30, "full-sync"); // starting
    db.insert(3, "running", 20 * 60, "full-sync"); // dead: its lock file nobody holds
    sb.heartbeat(3, Duration::from_secs(100));
    std::fs::write(sb.lock_path(3), "").expect("lock file");
    db.insert(4, "running", 40 * 60, "full-sync"); // hung, first seen: confirming
    sb.heartbeat(4, Duration::from_secs(25 * 60));
    holders.push(flock1_holder(&sb.lock_path(4), false));
    db.insert(5, "running", 30 * 60, "full-sync"); // unknown: heartbeat a symlink loop
    std::os::unix::fs::symlink("hb-5", sb.path("hb-5")).expect("symlink loop");
    db.insert(6, "running", 5 * 3600, "full-sync"); // overtime, overtime = report
    sb.heartbeat(6, Duration::from_secs(10));
    db.insert(7, "running", 5 * 3600, "full-sync"); // remote past max_age
    db.insert(8, "running", 50 * 60, "full-sync"); // remote within max_age
    db.exec("UPDATE sync_log SET worker = 'web2.invalid:4242' WHERE id IN (7, 8)");
    db.insert(9, "wait_manual", 3 * 3600, "full-sync"); // parked by hand
    db.insert(10, "done", 3 * 3600, "full-sync");
    db.insert(11, "running", 40 * 60, "nightly"); // hung, no manual_value there
    sb.heartbeat(11, Duration::from_secs(25 * 60));
    holders.push(flock1_holder(&sb.lock_path(11), false));
    let nightly = format!(
        "\n[[watch]]\nname = \"nightly\"\ntable = \"sync_log\"\nmatch = {{ job = \"nightly\" }}\n\
         started_column = \"start_time\"\nheartbeat_file = \"{}\"\nlock_file = \"{}\"\n\
         stale_after = \"5m\"\nmax_age = \"4h\"\nconfirm = 1\n",
        sb.heartbeat_template(),
        sb.lock_template()
    );
    let _ = host;
    let cfg = config(
        sb,
        db,
        &format!("{}{nightly}", full_sync(sb, "overtime = \"report\"\n")),
    );
    (cfg, holders)
}

fn show_lists_what_needs_a_person(mut db: Db) {
    let sb = Sandbox::new();
    let (cfg, _holders) = show_fixture(&mut db, &sb);
    let before = db.dump();
    let o = run(&cfg, &["show"]);
    assert_exit(&o, 1);
    let text = stdout(&o);
    let listed: Vec<String> = text
        .lines()
        .map(|l| l.split(':').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        listed,
        [
            "full-sync id=5",
            "full-sync id=6",
            "full-sync id=7",
            "full-sync id=9",
            "nightly id=11"
        ],
        "{}: {text}",
        db.name()
    );
    for (line, verdict, command) in [
        (0, "unknown", "selfheal resolve full-sync 5 --as dead"),
        (1, "overtime", "selfheal resolve full-sync 6 --as dead"),
        (
            2,
            "remote",
            "selfheal resolve full-sync 7 --as dead --force",
        ),
        (
            3,
            "parked",
            "selfheal resolve full-sync 9 --as dead|running",
        ),
        (4, "hung", "selfheal resolve nightly 11 --as dead"),
    ] {
        let l = text.lines().nth(line).expect("line");
        assert!(l.contains(&format!(": {verdict}")), "{l}");
        // With the --config it was given: a command that can be pasted.
        assert!(
            l.ends_with(&format!("fix: {command} --config {}", cfg.display())),
            "{l}"
        );
    }
    // The reason in words, and since when.
    let l6 = text.lines().nth(1).expect("row 6");
    assert!(
        l6.contains("overtime since 1h0m ago: total age is beyond max_age"),
        "{l6}"
    );
    // JSON says the same, with the statement a person would have run by hand.
    let o = run(&cfg, &["show", "--format", "json"]);
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    assert_eq!(summary["rows"], 5);
    let ids: Vec<(String, i64, String)> = rows
        .iter()
        .map(|r| {
            (
                r["watch"].as_str().unwrap_or_default().to_string(),
                r["id"].as_i64().unwrap_or(-1),
                r["verdict"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("full-sync".into(), 5, "unknown".into()),
            ("full-sync".into(), 6, "overtime".into()),
            ("full-sync".into(), 7, "remote".into()),
            ("full-sync".into(), 9, "parked".into()),
            ("nightly".into(), 11, "hung".into()),
        ]
    );
    let sql = rows[3]["sql"].as_str().expect("sql");
    assert!(
        sql.starts_with("UPDATE ") && sql.contains("'wait_manual'"),
        "{sql}"
    );
    // One watch only.
    let o = run(&cfg, &["show", "nightly"]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
    // It read only.
    assert_eq!(db.dump(), before, "show changed no row");
    assert!(!sb.state_dir().join("journal.jsonl").exists());
    assert!(!sb.path("selfheal.prom").exists());
}

#[test]
fn show_lists_parked_hung_unknown_overtime_and_remote_past_cap_rows_and_nothing_else_sqlite() {
    let sb = Sandbox::new();
    show_lists_what_needs_a_person(Db::sqlite(&sb));
}

#[test]
fn show_lists_parked_hung_unknown_overtime_and_remote_past_cap_rows_and_nothing_else_mariadb() {
    let Some(db) = Db::mysql() else { return };
    show_lists_what_needs_a_person(db);
}

#[test]
fn show_lists_parked_hung_unknown_overtime_and_remote_past_cap_rows_and_nothing_else_postgres() {
    let Some(db) = Db::postgres() else { return };
    show_lists_what_needs_a_person(db);
}

#[test]
fn show_says_when_nothing_needs_a_person() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    db.insert(1, "running", 600, "full-sync");
    sb.heartbeat(1, Duration::from_secs(5));
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let o = run(&cfg, &["show"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "nothing needs a person (1 watch)\n");
    // An unknown watch or row is a usage error.
    let o = run(&cfg, &["show", "full-sinc"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("full-sinc") && stderr(&o).contains("known: full-sync"));
    let o = run(&cfg, &["show", "full-sync", "99"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no row with id 99"), "{}", stderr(&o));
    let o = run(&cfg, &["show", "full-sync", "x7"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("is an integer column"),
        "{}",
        stderr(&o)
    );
}

/// Pads the journal to its rotation size with entries of another watch, so that the next
/// run that opens it rotates it.
fn pad_journal(sb: &Sandbox) {
    use std::io::Write as _;
    let path = sb.state_dir().join("journal.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("journal");
    let line = b"{\"watch\":\"elsewhere\",\"id\":1,\"verdict\":\"dead\",\"action\":\"mark_dead\",\"applied\":true}\n";
    let mut written = 0usize;
    let mut buf = Vec::with_capacity(1 << 20);
    while written < (8 << 20) {
        buf.extend_from_slice(line);
        written += line.len();
        if buf.len() >= (1 << 20) {
            f.write_all(&buf).expect("pad");
            buf.clear();
        }
    }
    f.write_all(&buf).expect("pad");
}

#[test]
fn show_one_row_has_its_columns_evidence_verdict_history_across_a_rotation_and_last_execution() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    let host = hostname();
    // Row 7's worker: a live process of this host that started before the row, named in
    // the owner column; its heartbeat has been silent for 30 s (stale_after 2s).
    let worker = sleeper();
    std::thread::sleep(Duration::from_millis(1200));
    db.insert(7, "running", 0, "full-sync");
    db.exec(&format!(
        "UPDATE sync_log SET worker = '{host}:{}' WHERE id = 7",
        worker.pid()
    ));
    sb.heartbeat(7, Duration::from_secs(30));
    // Its last execution, as `selfheal run --report` writes it.
    let report = sb.path("report-7.json");
    let o = selfheal()
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let cfg = config(
        &sb,
        &db,
        &full_sync(
            &sb,
            &format!(
                "confirm = 1\nreport_file = \"{}/report-{{id}}.json\"\n",
                sb.dir.path().display()
            ),
        )
        .replace("stale_after = \"5m\"", "stale_after = \"2s\""),
    );
    // A real check parks it (hung: its owner lives, its heartbeat is stale)…
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 1);
    assert_eq!(db.status(7), "wait_manual");
    // …the journal rotates (the park is now in journal.jsonl.1)…
    pad_journal(&sb);
    // …and a person puts it back to running, journaled in the new generation.
    let o = run_as(
        &cfg,
        "alice",
        &[
            "resolve",
            "full-sync",
            "7",
            "--as",
            "running",
            "--note",
            "it is fine",
        ],
    );
    assert_exit(&o, 0);
    assert!(sb.state_dir().join("journal.jsonl.1").exists(), "rotated");
    let current = journal(&sb);
    assert_eq!(
        current.len(),
        1,
        "only the resolution is in the new generation"
    );

    let o = run(&cfg, &["show", "full-sync", "7", "--format", "json"]);
    assert_exit(&o, 0);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    assert_eq!(v["status"], "running");
    assert_eq!(v["columns"]["worker"], format!("{host}:{}", worker.pid()));
    assert_eq!(
        v["columns"]["error_msg"],
        "self-heal: resolved as running by alice: it is fine"
    );
    let ev = &v["evidence"];
    assert_eq!(ev["owner"], "alive");
    assert_eq!(ev["process"]["pid"], worker.pid());
    assert!(
        ev["process"]["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sleep ")),
        "{ev}"
    );
    assert_eq!(ev["heartbeat_file"], sb.path("hb-7").display().to_string());
    assert!(ev["heartbeat_age_s"].as_u64().is_some_and(|a| a >= 30));
    assert_eq!(v["verdict"], "hung");
    // A person's decision sticks: the next real run does not park it again for the same
    // reason while its heartbeat has not beaten since (docs/design.md#person).
    assert_eq!(v["held"], "person", "{v}");
    assert!(
        v["next_run"]
            .as_str()
            .is_some_and(|n| n.contains("a person's decision holds the row")),
        "{v}"
    );
    let history = v["history"].as_array().expect("history");
    let what: Vec<(String, String, String)> = history
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default().to_string(),
                e["to"].as_str().unwrap_or_default().to_string(),
                e["by"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        what,
        [
            (
                "mark_manual".to_string(),
                "wait_manual".to_string(),
                format!("selfheal on {host}")
            ),
            (
                "recovered".to_string(),
                "running".to_string(),
                "alice".to_string()
            ),
        ],
        "both generations, oldest first: {history:?}"
    );
    assert_eq!(history[0]["verdict"], "hung");
    assert_eq!(history[1]["note"], "it is fine");
    assert_eq!(v["last_execution"]["state"], "succeeded");
    assert_eq!(v["last_execution"]["exit_status"], 0);
    assert_eq!(
        v["resolve"],
        format!(
            "selfheal resolve full-sync 7 --as dead --config {}",
            cfg.display()
        )
    );
    // The text form has the same parts.
    let o = run(&cfg, &["show", "full-sync", "7"]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    for part in [
        "  columns",
        "  evidence now",
        &format!("    process     pid {}", worker.pid()),
        "command: sleep 600",
        "  verdict now   hung: the heartbeat is stale, but the owner pid is alive",
        "  history       2 journal entries",
        "by alice: it is fine",
        "  last execution ",
        "    state succeeded, exit status 0",
        "  resolve       selfheal resolve full-sync 7 --as dead",
    ] {
        assert!(text.contains(part), "{part:?} in:\n{text}");
    }
}

// ---------------------------------------------------------------------------------------
// selfheal resolve

fn resolve_retry_of_a_parked_row(mut db: Db) {
    let sb = Sandbox::new();
    db.insert(1, "running", 600, "full-sync");
    sb.heartbeat(1, Duration::from_secs(5));
    db.insert(3, "wait_manual", 3 * 3600, "full-sync");
    db.exec("UPDATE sync_log SET attempts = 2 WHERE id = 3");
    let cfg = config(&sb, &db, &with_retry(&sb, "retry_at", ""));
    // A real check first: the metrics file has its lines, which resolve keeps (exit 1: a
    // row is parked).
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 1);
    assert!(metrics(&sb).contains("selfheal_parked_rows{watch=\"full-sync\"} 1"));
    let o = run_as(
        &cfg,
        "alice",
        &[
            "resolve",
            "full-sync",
            "3",
            "--as",
            "retry",
            "--note",
            "the API is back",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "full-sync id=3: set status to 'pending' (was 'wait_manual'): resolved as retry by alice\n"
    );
    // The row: back to the queue now, attempts raised, ended, the message naming who.
    assert_eq!(db.status(3), "pending");
    assert_eq!(db.int("SELECT attempts FROM sync_log WHERE id = 3"), 3);
    assert_eq!(
        db.one("SELECT error_msg FROM sync_log WHERE id = 3")
            .as_deref(),
        Some("self-heal: resolved as retry by alice: the API is back")
    );
    let (r, e) = (db.epoch_of("retry_at"), db.epoch_of("end_time"));
    assert_eq!(
        db.int(&format!("SELECT {r} - {e} FROM sync_log WHERE id = 3")),
        0,
        "a person's retry does not wait: retry_at is the database's now"
    );
    // The journal: who, why, from what.
    let j = journal(&sb);
    let e = j.last().expect("an entry");
    assert_eq!(e["action"], "mark_retry");
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["decision_note"], "the API is back");
    assert_eq!(
        (&e["from"], &e["to"]),
        (&"wait_manual".into(), &"pending".into())
    );
    assert_eq!(e["id"], 3);
    assert_eq!(e["applied"], true);
    // The metrics: the decision counted, every other line kept.
    let m = metrics(&sb);
    assert!(
        m.contains("selfheal_resolutions_total{watch=\"full-sync\",decision=\"retry\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("selfheal_parked_rows{watch=\"full-sync\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("selfheal_last_success_timestamp_seconds{watch=\"full-sync\"}"),
        "{m}"
    );
    // The next check carries the counter on.
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 0);
    let m = metrics(&sb);
    assert!(
        m.contains("selfheal_resolutions_total{watch=\"full-sync\",decision=\"retry\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("selfheal_parked_rows{watch=\"full-sync\"} 0"),
        "{m}"
    );
    // stats counts what people decided.
    let o = run(&cfg, &["stats", "--format", "json"]);
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().expect("a watch")).expect("json");
    assert_eq!(first["resolutions"]["retry"], 1, "{first}");
}

#[test]
fn resolve_retry_of_a_parked_row_sqlite() {
    let sb = Sandbox::new();
    resolve_retry_of_a_parked_row(Db::sqlite(&sb));
}

#[test]
fn resolve_retry_of_a_parked_row_mariadb() {
    let Some(db) = Db::mysql() else { return };
    resolve_retry_of_a_parked_row(db);
}

#[test]
fn resolve_retry_of_a_parked_row_postgres() {
    let Some(db) = Db::postgres() else { return };
    resolve_retry_of_a_parked_row(db);
}

#[test]
fn resolve_refuses_a_worker_whose_lock_a_real_process_holds_and_forced_never_touches_the_lock() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    db.insert(4, "running", 40 * 60, "full-sync");
    sb.heartbeat(4, Duration::from_secs(25 * 60));
    let holder = flock1_holder(&sb.lock_path(4), false);
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let lock = sb.lock_path(4);
    let lock_before = file_state(&lock);
    let before = db.dump();
    let o = run_as(&cfg, "bob", &["resolve", "full-sync", "4", "--as", "dead"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "full-sync id=4: refused: the worker provably lives: the job's lock is held by pid"
        ),
        "{out}"
    );
    assert!(out.contains("--force"), "{out}");
    assert_eq!(db.dump(), before, "nothing written");
    assert!(journal(&sb).is_empty());
    // Forced: the row is decided; the lock file and its holder are as they were.
    let o = run_as(
        &cfg,
        "bob",
        &["resolve", "full-sync", "4", "--as", "dead", "--force"],
    );
    assert_exit(&o, 0);
    assert_eq!(db.status(4), "error");
    assert_eq!(file_state(&lock), lock_before, "the lock file untouched");
    assert!(
        lock_holders(&lock).contains(&i64::from(holder.pid())),
        "still held"
    );
    let e = journal(&sb).pop().expect("journaled");
    assert_eq!(
        (&e["actor"], &e["action"]),
        (&"bob".into(), &"mark_dead".into())
    );
    assert_eq!(e["lock"], "held");
}

#[test]
fn resolve_refuses_a_row_that_finished_meanwhile_and_an_unknown_id_is_a_usage_error() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    db.insert(1, "wait_manual", 3600, "full-sync");
    db.insert(2, "done", 3600, "full-sync");
    db.insert(3, "running", 600, "full-sync");
    sb.heartbeat(3, Duration::from_secs(2));
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let before = db.dump();
    // An id with no row: nothing is written, not even for the rows that exist.
    let o = run(&cfg, &["resolve", "full-sync", "1", "99", "--as", "dead"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no row with id 99"), "{}", stderr(&o));
    assert_eq!(db.dump(), before);
    // A row that finished meanwhile is refused and left alone; the others are resolved.
    let o = run(&cfg, &["resolve", "full-sync", "2", "1", "--as", "dead"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains(
            "full-sync id=2: refused: its status is now 'done', neither 'running' nor 'wait_manual'"
        ),
        "{out}"
    );
    assert!(
        out.contains("full-sync id=1: set status to 'error' (was 'wait_manual')"),
        "{out}"
    );
    assert_eq!(db.status(2), "done");
    assert_eq!(db.status(1), "error");
    // --as running only from a parked row; --as retry needs retry_value.
    let o = run(&cfg, &["resolve", "full-sync", "3", "--as", "running"]);
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("--as running puts a row parked in 'wait_manual' back"));
    let o = run(&cfg, &["resolve", "full-sync", "3", "--as", "retry"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("has no retry_value"), "{}", stderr(&o));
    let o = run(&cfg, &["resolve", "nope", "3", "--as", "dead"]);
    assert_exit(&o, 2);
}

/// A self-asserted actor: `$SUDO_USER` is anyone's to set. What it and the note hold is
/// escaped in the message column, the journal, `resolve`'s line and `show` (text and JSON),
/// and the journal keeps the real uid and its login beside the claim.
#[test]
fn a_claimed_actor_and_its_note_are_escaped_and_the_real_uid_is_kept() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    db.insert(3, "wait_manual", 3600, "full-sync");
    db.insert(4, "wait_manual", 3600, "full-sync");
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let eve = "eve\u{1b}[2J\nselfheal: fake line";
    let note = "API back\u{202e}txet\n* * * * * root sh";
    let o = run_as(
        &cfg,
        eve,
        &["resolve", "full-sync", "3", "--as", "dead", "--note", note],
    );
    assert_exit(&o, 0);
    let (eve_escaped, note_escaped) = (
        "eve\\u{1b}[2J\\nselfheal: fake line",
        "API back\\u{202e}txet\\n* * * * * root sh",
    );
    assert_eq!(
        stdout(&o),
        format!(
            "full-sync id=3: set status to 'error' (was 'wait_manual'): resolved as dead by \
             {eve_escaped}\n"
        )
    );
    assert_eq!(
        db.one("SELECT error_msg FROM sync_log WHERE id = 3")
            .as_deref(),
        Some(format!("self-heal: resolved as dead by {eve_escaped}: {note_escaped}").as_str())
    );
    let e = journal(&sb).pop().expect("journaled");
    assert_eq!(e["actor"], eve_escaped);
    assert_eq!(e["decision_note"], note_escaped);
    assert_eq!(e["actor_claimed"], true);
    let uid = nix::unistd::getuid();
    assert_eq!(e["uid"], uid.as_raw());
    let login = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name);
    assert_eq!(e["login"].as_str(), login.as_deref(), "{e}");
    let raw = std::fs::read_to_string(sb.state_dir().join("journal.jsonl")).expect("journal");
    assert!(
        !raw.contains('\u{202e}') && !raw.contains('\u{1b}') && !raw.contains("\\u001b"),
        "{raw}"
    );
    // show: the row's history, as text and as JSON.
    for format in ["text", "json"] {
        let o = run(&cfg, &["show", "full-sync", "3", "--format", format]);
        let out = stdout(&o);
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{1b}') && !out.contains("\\u001b"),
            "{out}"
        );
        assert!(!out.contains("\nselfheal: fake line"), "{out}");
        assert!(out.contains("fake line"), "{out}");
    }
    // Without the claim: the login name of the real uid, not marked claimed.
    let o = selfheal()
        .args(["resolve", "full-sync", "4", "--as", "dead", "--config"])
        .arg(&cfg)
        .env_remove("SUDO_USER")
        .output()
        .expect("run selfheal");
    assert_exit(&o, 0);
    let e = journal(&sb).pop().expect("journaled");
    assert_eq!(e["actor"].as_str(), login.as_deref(), "{e}");
    assert_eq!(e["uid"], uid.as_raw());
    assert!(e.get("actor_claimed").is_none(), "{e}");
}

/// Ids compared as text: `" 1"`, `01` and `+1` are row 1 of an integer id column, resolved
/// once (not once, then refused twice); a word there is a usage error naming it and the
/// column, before anything is written.
fn ids_are_parsed_as_the_id_column_holds_them(mut db: Db) {
    let sb = Sandbox::new();
    db.insert(1, "wait_manual", 3600, "full-sync");
    db.insert(2, "wait_manual", 3600, "full-sync");
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let before = db.dump();
    let o = run(&cfg, &["resolve", "full-sync", "2", "1x", "--as", "dead"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("'1x' is not a row id of watch full-sync") && err.contains("id column id"),
        "{err}"
    );
    assert_eq!(db.dump(), before, "nothing written");
    let o = run_as(
        &cfg,
        "alice",
        &["resolve", "full-sync", " 1", "01", "+1", "--as", "dead"],
    );
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "full-sync id=1: set status to 'error' (was 'wait_manual'): resolved as dead by alice\n",
        "{}",
        db.name()
    );
    assert_eq!(db.status(1), "error");
    assert_eq!(db.status(2), "wait_manual");
    assert_eq!(journal(&sb).len(), 1);
}

#[test]
fn ids_are_parsed_as_the_id_column_holds_them_sqlite() {
    let sb = Sandbox::new();
    ids_are_parsed_as_the_id_column_holds_them(Db::sqlite(&sb));
}

#[test]
fn ids_are_parsed_as_the_id_column_holds_them_mariadb() {
    let Some(db) = Db::mysql() else { return };
    ids_are_parsed_as_the_id_column_holds_them(db);
}

/// `resolve` and another host's `check` interleaved: `resolve` took only the run lock
/// (this host's). It takes the watch's advisory lock `check` takes too: it waits briefly
/// for a check to let go, acts once it does, and else says who holds it (exit 75),
/// writing nothing.
#[test]
fn resolve_takes_the_watch_lock_check_takes_mariadb() {
    let Some(mut db) = Db::mysql() else { return };
    let Db::My(my) = &db else { unreachable!() };
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .to_string_lossy()
        .to_lowercase();
    // The watch has an owner column: each host's check locks the watch for its own rows.
    let name = format!("selfheal/{}/full-sync@{host}", my.name);
    let mut check = my.conn();
    let got: Vec<i64> = check
        .exec("SELECT GET_LOCK(?, 0)", (&name,))
        .expect("GET_LOCK");
    assert_eq!(got, [1]);
    let id: Vec<u64> = check.query("SELECT CONNECTION_ID()").expect("id");
    let sb = Sandbox::new();
    db.insert(3, "wait_manual", 3600, "full-sync");
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let before = db.dump();
    let t0 = std::time::Instant::now();
    let o = run_as(
        &cfg,
        "alice",
        &["resolve", "full-sync", "3", "--as", "dead"],
    );
    assert_exit(&o, 75);
    assert!(t0.elapsed() >= Duration::from_secs(4), "it waited");
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "watch full-sync: its advisory lock {name} is held by connection {}",
            id[0]
        )),
        "{err}"
    );
    assert!(err.contains("selfheal: fix: "), "{err}");
    assert_eq!(db.dump(), before, "nothing written");
    // Let go while resolve waits: it acts then.
    let mut waiting = selfheal();
    waiting
        .args(["resolve", "full-sync", "3", "--as", "dead", "--config"])
        .arg(&cfg)
        .env("SUDO_USER", "alice");
    let child = waiting
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("resolve");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(db.status(3), "wait_manual", "not while the check holds it");
    let _: Vec<i64> = check
        .exec("SELECT RELEASE_LOCK(?)", (&name,))
        .expect("RELEASE_LOCK");
    let o = child.wait_with_output().expect("wait");
    assert_exit(&o, 0);
    assert_eq!(db.status(3), "error");
}

#[test]
fn resolve_loses_the_race_to_a_worker_that_finishes_first_mariadb() {
    let Some(mut db) = Db::mysql() else { return };
    let sb = Sandbox::new();
    db.insert(1, "wait_manual", 3600, "full-sync");
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let Db::My(my) = &mut db else { unreachable!() };
    // The worker holds its row (as a transaction that is about to finish it)…
    let mut worker = my.conn();
    worker.query_drop("START TRANSACTION").expect("begin");
    worker
        .query_drop("SELECT * FROM sync_log WHERE id = 1 FOR UPDATE")
        .expect("lock the row");
    // …resolve reads the parked row and its compare-and-set waits on that lock…
    let child = selfheal()
        .args(["resolve", "full-sync", "1", "--as", "dead", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut watcher = my.conn();
    assert!(
        update_waiting(&mut watcher, &my.name),
        "resolve's UPDATE waits"
    );
    // …and the worker finishes first.
    worker
        .query_drop("UPDATE sync_log SET status = 'done' WHERE id = 1")
        .expect("finish");
    worker.query_drop("COMMIT").expect("commit");
    let o = child.wait_with_output().expect("resolve");
    assert_exit(&o, 1);
    assert_eq!(
        stdout(&o),
        "full-sync id=1: lost_race: the row moved on between the read and the write; left as it is\n"
    );
    assert_eq!(db.status(1), "done");
    assert!(journal(&sb).is_empty(), "a lost race is no change");
    assert!(
        !metrics(&sb).contains("selfheal_resolutions_total"),
        "nor a decision made"
    );
}

#[test]
fn resolve_loses_the_race_to_a_worker_that_finishes_first_postgres() {
    let Some(mut db) = Db::postgres() else { return };
    let sb = Sandbox::new();
    db.insert(1, "wait_manual", 3600, "full-sync");
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let Db::Pg(pg) = &mut db else { unreachable!() };
    // The worker holds its row (as a transaction that is about to finish it)…
    let mut worker = pg.conn();
    worker
        .batch_execute("BEGIN; SELECT * FROM sync_log WHERE id = 1 FOR UPDATE")
        .expect("lock the row");
    // …resolve reads the parked row and its compare-and-set waits on that lock…
    let child = selfheal()
        .args(["resolve", "full-sync", "1", "--as", "dead", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(pg.wait_for_lock_wait(), "resolve's UPDATE waits");
    // …and the worker finishes first.
    worker
        .batch_execute("UPDATE sync_log SET status = 'done' WHERE id = 1; COMMIT")
        .expect("finish");
    let o = child.wait_with_output().expect("resolve");
    assert_exit(&o, 1);
    assert_eq!(
        stdout(&o),
        "full-sync id=1: lost_race: the row moved on between the read and the write; left as it is\n"
    );
    assert_eq!(db.status(1), "done");
    assert!(journal(&sb).is_empty(), "a lost race is no change");
}

#[test]
fn resolve_dry_run_writes_nothing() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    db.insert(3, "wait_manual", 3 * 3600, "full-sync");
    let cfg = config(&sb, &db, &with_retry(&sb, "retry_at_s", ""));
    let before = db.dump();
    let o = run_as(
        &cfg,
        "carol",
        &["resolve", "full-sync", "3", "--as", "retry", "--dry-run"],
    );
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "full-sync id=3: would set status to 'pending' (now 'wait_manual'), resolved as retry by carol: UPDATE \"sync_log\" SET \"status\" = 'pending'"
        ),
        "{out}"
    );
    assert!(
        out.contains("\"retry_at_s\" = CAST(strftime('%s', 'now') AS INTEGER)"),
        "{out}"
    );
    assert_eq!(db.dump(), before, "no row");
    assert!(!sb.state_dir().exists(), "no journal, intents or run lock");
    assert!(!sb.path("selfheal.prom").exists(), "no metrics");
}

#[test]
fn more_than_ten_rows_without_a_terminal_need_yes() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    for id in 1..=11 {
        db.insert(id, "wait_manual", 3600, "full-sync");
    }
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let ids: Vec<String> = (1..=11).map(|i| i.to_string()).collect();
    let mut args: Vec<&str> = vec!["resolve", "full-sync"];
    args.extend(ids.iter().map(String::as_str));
    args.extend(["--as", "dead"]);
    let before = db.dump();
    let o = run(&cfg, &args);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("need --yes"), "{}", stderr(&o));
    assert_eq!(db.dump(), before);
    // Ten are fine without it; the eleventh with --yes.
    let o = run(
        &cfg,
        &args[..12]
            .iter()
            .chain(&["--as", "dead"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 10);
    args.push("--yes");
    let o = run(&cfg, &args);
    assert_exit(&o, 1);
    // The ten already resolved are refused now; the eleventh is resolved.
    assert!(
        stdout(&o).contains("full-sync id=11: set status to 'error'"),
        "{}",
        stdout(&o)
    );
    assert_eq!(db.status(11), "error");
    assert!(
        metrics(&sb)
            .contains("selfheal_resolutions_total{watch=\"full-sync\",decision=\"dead\"} 11")
    );
}

/// `selfheal ARGS` at a terminal (script(1) gives it one), answering `answer`.
fn at_a_terminal(cfg: &Path, args: &[&str], answer: &str) -> Output {
    use std::io::Write as _;
    // One shell line: every word single-quoted.
    let quote = |w: &str| format!("'{}'", w.replace('\'', "'\\''"));
    let mut words = vec![quote(&bin().display().to_string())];
    words.extend(args.iter().map(|a| quote(a)));
    words.extend(["--config".to_string(), quote(&cfg.display().to_string())]);
    let line = words.join(" ");
    let mut child = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script(1)");
    // The question comes first; the answer waits for it in the terminal's input.
    std::thread::sleep(Duration::from_millis(300));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answer.as_bytes())
        .expect("answer");
    child.wait_with_output().expect("script(1)")
}

#[test]
fn more_than_ten_rows_at_a_terminal_are_asked_about_once() {
    if !have_tool("script", &["--version"], "script(1) (util-linux)") {
        return;
    }
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    for id in 1..=11 {
        db.insert(id, "wait_manual", 3600, "full-sync");
    }
    let cfg = config(&sb, &db, &full_sync(&sb, ""));
    let ids: Vec<String> = (1..=11).map(|i| i.to_string()).collect();
    let mut args: Vec<&str> = vec!["resolve", "full-sync"];
    args.extend(ids.iter().map(String::as_str));
    args.extend(["--as", "dead"]);
    let before = db.dump();
    let o = at_a_terminal(&cfg, &args, "n\n");
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("resolve 11 rows of watch full-sync as dead? [y/N]"),
        "{out}"
    );
    assert!(out.contains("nothing resolved: not confirmed"), "{out}");
    assert_eq!(db.dump(), before);
    let o = at_a_terminal(&cfg, &args, "y\n");
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o).matches(": set status to 'error'").count(),
        11,
        "{}",
        stdout(&o)
    );
    assert_eq!(db.status(11), "error");
}

// ---------------------------------------------------------------------------------------
// Un-parking

#[test]
fn a_parked_hung_row_whose_real_flock_holder_beats_again_goes_back_to_running_once() {
    let sb = Sandbox::new();
    let mut db = Db::sqlite(&sb);
    // Row 7's worker: flock(1) holds its lock and runs a job that is stalled (no beat)
    // until the test lets it go on, then beats every 200 ms.
    db.insert(7, "running", 30 * 60, "full-sync");
    sb.heartbeat(7, Duration::from_secs(20 * 60));
    let go = sb.path("go-7");
    let hb = sb.path("hb-7");
    let lock = sb.lock_path(7);
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; while :; do touch '{}'; sleep 0.2; done",
        go.display(),
        hb.display()
    );
    let holder = Proc::spawn(
        std::process::Command::new("flock")
            .arg("--no-fork")
            .arg(&lock)
            .args(["sh", "-c", &script]),
    );
    wait_until("flock holds row 7's lock", Duration::from_secs(10), || {
        lock_holders(&lock).contains(&i64::from(holder.pid()))
    });
    // Row 9: parked for spent retries (its worker gone), then something holds its lock and
    // beats its file: it stays parked.
    db.insert(9, "running", 30 * 60, "full-sync");
    db.exec("UPDATE sync_log SET attempts = 1 WHERE id = 9");
    sb.heartbeat(9, Duration::from_secs(20 * 60));
    let cfg = config(
        &sb,
        &db,
        &full_sync(
            &sb,
            "confirm = 1\nretry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 1\n",
        ),
    );
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 1);
    assert_eq!(db.status(7), "wait_manual", "{}", stdout(&o));
    assert_eq!(db.status(9), "wait_manual", "{}", stdout(&o));
    let parked = journal(&sb);
    assert_eq!(parked.iter().filter(|e| e["verdict"] == "hung").count(), 1);
    let other = flock1_holder(&sb.lock_path(9), false);
    // The worker resumes after the park (the journal's time has whole seconds).
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(&go, "").expect("go");
    wait_until("row 7 beats", Duration::from_secs(10), || {
        std::fs::metadata(&hb)
            .and_then(|m| m.modified())
            .is_ok_and(|t| {
                SystemTime::now().duration_since(t).unwrap_or_default() < Duration::from_secs(2)
            })
    });
    sb.heartbeat(9, Duration::from_secs(1));
    // A dry run says what a real run will do, and does nothing.
    let o = run(&cfg, &["check", "--explain"]);
    assert!(
        stdout(&o).contains("a real run would set status back to 'running' (recovered)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(db.status(7), "wait_manual");
    // The real run: back to running, said once.
    let o = run(&cfg, &["check"]);
    let out = stdout(&o);
    assert!(
        out.contains("full-sync id=7: set status back to 'running' (recovered) — self-heal: recovered: heartbeat fresh again after the park, lock held by pid"),
        "{out}"
    );
    assert!(!out.contains("id=9"), "{out}");
    assert_eq!(db.status(7), "running");
    assert_eq!(
        db.status(9),
        "wait_manual",
        "parked for spent retries: stays"
    );
    let e = journal(&sb).pop().expect("journaled");
    assert_eq!(e["action"], "recovered");
    assert_eq!(
        (&e["from"], &e["to"]),
        (&"wait_manual".into(), &"running".into())
    );
    assert!(e.get("actor").is_none(), "selfheal's own, not a person's");
    assert!(metrics(&sb).contains("selfheal_unparks_total{watch=\"full-sync\"} 1"));
    // The next run finds it alive: nothing to say about it.
    let o = run(&cfg, &["check"]);
    assert!(!stdout(&o).contains("id=7"), "{}", stdout(&o));
    assert_eq!(db.status(7), "running");
    // stats counts it as a false park.
    let o = run(&cfg, &["stats", "--format", "json"]);
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().expect("a watch")).expect("json");
    assert_eq!(first["unparks"], 1, "{first}");
    drop(other);
}

#[test]
fn a_parked_hung_row_whose_lease_beats_again_goes_back_to_running_mariadb() {
    let Some(db) = Db::mysql() else { return };
    a_parked_hung_row_whose_lease_beats_again_goes_back_to_running(db);
}

fn a_parked_hung_row_whose_lease_beats_again_goes_back_to_running(mut db: Db) {
    let sb = Sandbox::new();
    // Row 7: a lease (heartbeat column) 20 minutes silent, its lock held by a real
    // flock(1); row 8 beside it, parked as hung the same way, stays silent.
    for id in [7, 8] {
        db.insert(id, "running", 30 * 60, "full-sync");
        let at = db.ago(20 * 60);
        db.exec(&format!(
            "UPDATE sync_log SET heartbeat_at = {at} WHERE id = {id}"
        ));
    }
    let holders = [
        flock1_holder(&sb.lock_path(7), false),
        flock1_holder(&sb.lock_path(8), false),
    ];
    let watch = full_sync(&sb, "confirm = 1\n").replace(
        &format!("heartbeat_file = \"{}\"\n", sb.heartbeat_template()),
        "heartbeat_column = \"heartbeat_at\"\n",
    );
    let cfg = config(&sb, &db, &watch);
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 1);
    assert_eq!(
        (db.status(7), db.status(8)),
        ("wait_manual".into(), "wait_manual".into())
    );
    // The worker renews its lease after the park (as Lease::beat() does on a parked row).
    std::thread::sleep(Duration::from_millis(1100));
    let now = db.ago(0);
    db.exec(&format!(
        "UPDATE sync_log SET heartbeat_at = {now} WHERE id = 7"
    ));
    let o = run(&cfg, &["check"]);
    assert!(
        stdout(&o).contains("full-sync id=7: set status back to 'running' (recovered)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        (db.status(7), db.status(8)),
        ("running".into(), "wait_manual".into())
    );
    let e = journal(&sb).pop().expect("journaled");
    assert_eq!((&e["action"], &e["id"]), (&"recovered".into(), &7.into()));
    drop(holders);
}

// ---------------------------------------------------------------------------------------
// retry_at follows the backoff

fn retry_at_follows_the_backoff(mut db: Db, col: &str) {
    let sb = Sandbox::new();
    // Three dead rows (their lock files nobody holds: conclusive, acted on at once) with
    // 0, 1 and 3 reclaims behind them: the next waits 1m, 2m, and 8m capped to 3m. Their
    // heartbeats are stale too (a fresh beat of its own would contradict a free lock).
    for (id, attempts) in [(1, 0), (2, 1), (3, 3)] {
        db.insert(id, "running", 20 * 60, "full-sync");
        db.exec(&format!(
            "UPDATE sync_log SET attempts = {attempts} WHERE id = {id}"
        ));
        sb.heartbeat(id, Duration::from_secs(10 * 60));
        std::fs::write(sb.lock_path(id), "").expect("lock file");
    }
    db.insert(4, "wait_manual", 3600, "full-sync");
    let cfg = config(
        &sb,
        &db,
        &with_retry(
            &sb,
            col,
            "retry_backoff = \"1m\"\nretry_backoff_max = \"3m\"\n",
        ),
    );
    let o = run(&cfg, &["check"]);
    // Row 4 stays parked: exit 1.
    assert_exit(&o, 1);
    let end = db.epoch_of("end_time");
    let at = if col.ends_with("_s") {
        col.to_string()
    } else {
        db.epoch_of(col)
    };
    for (id, attempts, wait) in [(1, 1, 60), (2, 2, 120), (3, 4, 180)] {
        assert_eq!(db.status(id), "pending", "{}", stdout(&o));
        assert_eq!(
            db.int(&format!("SELECT attempts FROM sync_log WHERE id = {id}")),
            attempts
        );
        assert_eq!(
            db.int(&format!(
                "SELECT {at} - {end} FROM sync_log WHERE id = {id}"
            )),
            wait,
            "{} {col}: row {id} waits {wait}s after the database's now",
            db.name()
        );
    }
    // A person's retry does not wait.
    let o = run(&cfg, &["resolve", "full-sync", "4", "--as", "retry"]);
    assert_exit(&o, 0);
    assert_eq!(
        db.int(&format!("SELECT {at} - {end} FROM sync_log WHERE id = 4")),
        0
    );
    // doctor shows the picker's condition, in this database's SQL for this column.
    let cond = match (&db, col.ends_with("_s")) {
        (Db::Lite(_), false) => format!("(\"{col}\" IS NULL OR \"{col}\" <= datetime('now'))"),
        (Db::Lite(_), true) => {
            format!("(\"{col}\" IS NULL OR \"{col}\" <= CAST(strftime('%s', 'now') AS INTEGER))")
        }
        (Db::My(_), false) => format!("(`{col}` IS NULL OR `{col}` <= NOW())"),
        (Db::My(_), true) => format!("(`{col}` IS NULL OR `{col}` <= UNIX_TIMESTAMP())"),
        (Db::Pg(_), false) => {
            format!("(\"{col}\" IS NULL OR \"{col}\" <= date_trunc('second', LOCALTIMESTAMP))")
        }
        (Db::Pg(_), true) => format!(
            "(\"{col}\" IS NULL OR \"{col}\" <= \
             FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP))::bigint)"
        ),
    };
    let o = run(&cfg, &["doctor"]);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("✓ watch full-sync: retry_at_column: ")
                && l.ends_with(&format!("WHERE status = 'pending' AND {cond}"))),
        "{out}"
    );
}

/// A huge `retry_backoff_max` failed every reclaim's write ("datetime field overflow"):
/// the wait is capped to what the column can hold — the year 9999 for a date-time, 2038
/// for a TIMESTAMP — the rows go back to the queue, and the run says so once.
fn a_backoff_beyond_the_column_is_capped(mut db: Db, col: &str, year: &str) {
    let sb = Sandbox::new();
    for id in 1..=3 {
        db.insert(id, "running", 20 * 60, "full-sync");
        sb.heartbeat(id, Duration::from_secs(10 * 60));
        std::fs::write(sb.lock_path(id), "").expect("lock file");
    }
    let cfg = config(
        &sb,
        &db,
        &with_retry(
            &sb,
            col,
            "retry_backoff = \"10000000d\"\nretry_backoff_max = \"10000000d\"\n",
        ),
    );
    let o = run(&cfg, &["check"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_exit(&o, 0);
    assert_eq!(
        said.matches(&format!(
            "selfheal: warning: watch full-sync: retry_backoff_max 10000000d0h reaches beyond \
             what retry_at_column {col} can hold from now"
        ))
        .count(),
        1,
        "said once: {said}"
    );
    for id in 1..=3 {
        assert_eq!(db.status(id), "pending", "{} {col}: {said}", db.name());
        let at = db
            .one(&format!("SELECT {col} FROM sync_log WHERE id = {id}"))
            .unwrap_or_default();
        assert!(
            at.starts_with(year),
            "{} {col}: row {id} waits until {at}",
            db.name()
        );
    }
}

#[test]
fn a_backoff_beyond_the_column_is_capped_sqlite() {
    let sb = Sandbox::new();
    a_backoff_beyond_the_column_is_capped(Db::sqlite(&sb), "retry_at", "9999-");
}

#[test]
fn a_backoff_beyond_the_column_is_capped_mariadb_datetime() {
    let Some(db) = Db::mysql() else { return };
    a_backoff_beyond_the_column_is_capped(db, "retry_at", "9999-");
}

#[test]
fn a_backoff_beyond_the_column_is_capped_mariadb_timestamp() {
    let Some(db) = Db::mysql() else { return };
    a_backoff_beyond_the_column_is_capped(db, "retry_at_ts", "2038-");
}

#[test]
fn retry_at_follows_the_backoff_sqlite_datetime() {
    let sb = Sandbox::new();
    retry_at_follows_the_backoff(Db::sqlite(&sb), "retry_at");
}

#[test]
fn retry_at_follows_the_backoff_sqlite_unix_seconds() {
    let sb = Sandbox::new();
    retry_at_follows_the_backoff(Db::sqlite(&sb), "retry_at_s");
}

#[test]
fn retry_at_follows_the_backoff_mariadb_datetime() {
    let Some(db) = Db::mysql() else { return };
    retry_at_follows_the_backoff(db, "retry_at");
}

#[test]
fn retry_at_follows_the_backoff_mariadb_unix_seconds() {
    let Some(db) = Db::mysql() else { return };
    retry_at_follows_the_backoff(db, "retry_at_s");
}

#[test]
fn retry_at_follows_the_backoff_mariadb_timestamp() {
    let Some(db) = Db::mysql() else { return };
    retry_at_follows_the_backoff(db, "retry_at_ts");
}

#[test]
fn retry_at_follows_the_backoff_postgres_timestamp() {
    let Some(db) = Db::postgres() else { return };
    retry_at_follows_the_backoff(db, "retry_at");
}

#[test]
fn retry_at_follows_the_backoff_postgres_unix_seconds() {
    let Some(db) = Db::postgres() else { return };
    retry_at_follows_the_backoff(db, "retry_at_s");
}

#[test]
fn retry_at_follows_the_backoff_postgres_timestamptz() {
    let Some(db) = Db::postgres() else { return };
    retry_at_follows_the_backoff(db, "retry_at_ts");
}

#[test]
fn a_parked_hung_row_whose_lease_beats_again_goes_back_to_running_postgres() {
    let Some(db) = Db::postgres() else { return };
    a_parked_hung_row_whose_lease_beats_again_goes_back_to_running(db);
}

#[test]
fn doctor_fails_a_retry_at_column_the_table_lacks() {
    let sb = Sandbox::new();
    let db = Db::sqlite(&sb);
    let cfg = config(&sb, &db, &with_retry(&sb, "not_before", ""));
    let o = run(&cfg, &["doctor"]);
    assert_exit(&o, 2);
    assert!(stdout(&o).contains("not_before"), "{}", stdout(&o));
    let o = run(&cfg, &["check"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("retry_at_column"), "{}", stderr(&o));
}
