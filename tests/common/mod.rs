//! Test environment builder: a sandbox directory with heartbeat files of given ages, a real
//! SQLite file or a real MariaDB/MySQL or PostgreSQL database made for the test and dropped
//! after it, a
//! configuration file, and the real `selfheal` binary run with a scrubbed environment.
//!
//! MySQL: the server named by `SELFHEAL_TEST_MYSQL_URL`, else the local MariaDB on its
//! socket. PostgreSQL: the server named by `SELFHEAL_TEST_POSTGRES_URL`, else the local one
//! on `/var/run/postgresql` as root. Without a server the tests of its database are skipped
//! on a developer's machine and FAIL when `CI` is set (a test that returns early would be
//! reported as passed).

#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use mysql::prelude::Queryable;

/// The binary under test.
pub fn bin() -> &'static Path {
    assert_cmd::cargo::cargo_bin!("selfheal")
}

/// The real binary, with no configuration or secret leaking in from the developer's
/// environment.
pub fn selfheal() -> Command {
    let mut c = Command::new(bin());
    c.env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env_remove("MYSQL_PWD")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C");
    c
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Seconds in a minute and in an hour, for ages written as `50 * MIN`.
pub const MIN: u64 = 60;
pub const HOUR: u64 = 3600;

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// An instant `secs` before the frozen clock's now (see [`frozen_now`]).
pub fn ago(secs: u64) -> SystemTime {
    frozen_now() - Duration::from_secs(secs)
}

pub fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Runs `selfheal doctor --config CFG`.
pub fn doctor(cfg: &Path) -> Output {
    selfheal()
        .args(["doctor", "--config"])
        .arg(cfg)
        .output()
        .expect("run selfheal doctor")
}

/// The doctor line about `subject` (`✗ SUBJECT: …`, whatever its mark).
pub fn finding(o: &Output, subject: &str) -> String {
    let out = stdout(o);
    out.lines()
        .find(|l| {
            l.split_once(' ')
                .is_some_and(|(_, r)| r.starts_with(&format!("{subject}: ")))
        })
        .unwrap_or_else(|| panic!("no {subject:?} line in:\n{out}{}", stderr(o)))
        .to_string()
}

/// The `fix:` of the doctor line that starts with `prefix`, cut at `until` when given.
pub fn fix_of(out: &str, prefix: &str, until: Option<&str>) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in\n{out}"));
    let fix = line
        .split_once("; fix: ")
        .map_or_else(|| panic!("no fix in {line}"), |(_, f)| f);
    match until.and_then(|u| fix.split_once(u)) {
        Some((head, _)) => head.to_string(),
        None => fix.to_string(),
    }
}

/// Runs the binary as `nobody` (root only: CI runs as root; elsewhere it is skipped, and in
/// CI a non-root run fails instead of passing silently).
pub fn as_nobody() -> Option<Command> {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test as root"
        );
        eprintln!("SKIPPED: needs root to switch to an unprivileged user");
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(bin())
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env("HOME", "/nonexistent")
        .env("LC_ALL", "C");
    Some(c)
}

/// Runs the binary as www-data (uid 33), an ordinary unprivileged user that fixes may be
/// addressed to (`nobody` is given nothing: its fixes say whom to run as); root only,
/// like [`as_nobody`].
pub fn as_www_data() -> Option<Command> {
    // The same check: root, or skipped (outside CI).
    as_nobody()?;
    let mut w = Command::new("setpriv");
    w.args(["--reuid=33", "--regid=33", "--clear-groups", "--"])
        .arg(bin())
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env("HOME", "/nonexistent")
        .env("LC_ALL", "C");
    Some(w)
}

/// Asserts the exact exit status, printing both streams when it differs.
#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit status\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}

/// Parses `--format json` output: the row objects, then the summary.
pub fn json_lines(o: &Output) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut rows: Vec<serde_json::Value> = stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let summary = rows.pop().expect("a summary line");
    assert_eq!(
        summary["summary"], true,
        "last line is the summary: {summary}"
    );
    (rows, summary)
}

/// The row object for one id.
pub fn row(rows: &[serde_json::Value], id: i64) -> &serde_json::Value {
    rows.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row {id} in {rows:?}"))
}

/// A temporary directory holding heartbeat files, lock files, state and the config.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::Builder::new()
                .prefix("selfheal-test-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Template for per-row heartbeat files.
    pub fn heartbeat_template(&self) -> String {
        format!("{}/hb-{{id}}", self.dir.path().display())
    }

    /// Template for per-row job lock files.
    pub fn lock_template(&self) -> String {
        format!("{}/lock-{{id}}", self.dir.path().display())
    }

    /// Row `id`'s job lock file (not created).
    pub fn lock_path(&self, id: i64) -> PathBuf {
        self.path(&format!("lock-{id}"))
    }

    /// Creates (or touches) row `id`'s heartbeat file with an mtime `age` ago.
    pub fn heartbeat(&self, id: i64, age: Duration) -> PathBuf {
        self.heartbeat_at(id, SystemTime::now() - age)
    }

    /// Creates (or touches) row `id`'s heartbeat file with the mtime `at` (for a binary run
    /// under [`frozen_clock`]: an instant relative to [`frozen_now`]).
    pub fn heartbeat_at(&self, id: i64, at: SystemTime) -> PathBuf {
        let p = self.path(&format!("hb-{id}"));
        let f = File::options()
            .create(true)
            .append(true)
            .open(&p)
            .expect("heartbeat file");
        f.set_modified(at).expect("set mtime");
        p
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    pub fn run_lock(&self) -> PathBuf {
        self.path("selfheal.lock")
    }

    /// Writes a configuration: `[database]` with `url`, `[run]` inside the sandbox, and
    /// the given `[[watch]]` body.
    pub fn config(&self, url: &str, watch: &str) -> PathBuf {
        let p = self.path("selfheal.toml");
        std::fs::write(
            &p,
            format!(
                "[database]\nurl = \"{url}\"\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n\n[[watch]]\n{watch}\n",
                self.run_lock().display(),
                self.state_dir().display()
            ),
        )
        .expect("write config");
        p
    }

    /// Writes a configuration with the given `[database]` body (`url = …`, `defaults_file
    /// = …`, …), `[run]` inside the sandbox plus `run_extra`, and the `[[watch]]` body.
    pub fn config_with(&self, database: &str, run_extra: &str, watch: &str) -> PathBuf {
        let p = self.path("selfheal.toml");
        std::fs::write(
            &p,
            format!(
                "[database]\n{database}\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n{run_extra}\n\n[[watch]]\n{watch}\n",
                self.run_lock().display(),
                self.state_dir().display()
            ),
        )
        .expect("write config");
        p
    }

    /// Writes `name` in the sandbox with the given mode.
    pub fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    /// The standard watch body over `sync_log`, with heartbeat files in the sandbox.
    pub fn watch(&self, extra: &str) -> String {
        format!(
            "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
             ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n{extra}",
            self.heartbeat_template()
        )
    }

    /// For runs as `nobody`: makes the sandbox `sandbox_mode`, the SQLite file and the
    /// config readable, and points the standard watch's heartbeat files into `private/`,
    /// a directory of root's that nobody cannot look inside. Returns (private, config).
    pub fn private_heartbeat_config(&self, db: &SqliteDb, sandbox_mode: u32) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let private = self.path("private");
        std::fs::create_dir(&private).expect("dir");
        let set = |p: &Path, mode| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        set(self.dir.path(), sandbox_mode);
        set(&db.path, 0o644);
        set(&private, 0o700);
        let watch = self.watch("").replace(
            &self.heartbeat_template(),
            &format!("{}/hb-{{id}}", private.display()),
        );
        let cfg = self.config(&db.url(), &watch);
        set(&cfg, 0o644);
        (private, cfg)
    }

    /// `state_dir/last-run.json`, the last real run's report.
    pub fn last_run(&self) -> serde_json::Value {
        let p = self.state_dir().join("last-run.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_json::from_str(&text).expect("last-run.json is JSON")
    }

    /// Moves every read of recent runs that `run-state.json` keeps for the `max_age` check
    /// `secs` into the past, as if it had been read that long ago.
    pub fn age_recent_reads(&self, secs: i64) {
        let p = self.state_dir().join("run-state.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut state: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let reads = state["recent"].as_array_mut().expect("recent runs kept");
        assert!(!reads.is_empty(), "{text}");
        for r in reads {
            let at = r["read_at"].as_i64().expect("read_at");
            r["read_at"] = serde_json::json!(at - secs);
        }
        std::fs::write(&p, state.to_string()).expect("write run-state.json");
    }

    pub fn journal(&self) -> Vec<serde_json::Value> {
        match std::fs::read_to_string(self.state_dir().join("journal.jsonl")) {
            Ok(t) => t
                .lines()
                .map(|l| serde_json::from_str(l).expect("journal line"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Sets row `id`'s owner column (`worker`) to `owner`.
pub fn set_owner(db: &SqliteDb, id: i64, owner: &str) {
    db.conn()
        .execute(
            "UPDATE sync_log SET worker = ?1 WHERE id = ?2",
            rusqlite::params![owner, id],
        )
        .expect("owner");
}

/// The standard watch with per-row lock files in the sandbox, plus `extra`.
pub fn watch_with_lock(sb: &Sandbox, extra: &str) -> String {
    sb.watch(&format!("lock_file = \"{}\"\n{extra}", sb.lock_template()))
}

/// Runs `selfheal check --config CFG` plus `args`.
pub fn check(cfg: &Path, args: &[&str]) -> Output {
    selfheal()
        .arg("check")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .expect("run selfheal")
}

/// Runs `selfheal check --format json --config CFG` plus `args`: the run, its row objects
/// and its summary.
pub fn json_check(
    cfg: &Path,
    args: &[&str],
) -> (Output, Vec<serde_json::Value>, serde_json::Value) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let o = check(cfg, &all);
    let (rows, summary) = json_lines(&o);
    (o, rows, summary)
}

/// A heartbeat stamped a little ahead reads as "just now" (within the clock tolerance)
/// for the whole test, however loaded the machine.
pub fn beat_now(sb: &Sandbox, id: i64) {
    sb.heartbeat_at(id, SystemTime::now() + secs(30));
}

/// Runs the cron form (`selfheal check --config CFG`, no flags) with rows parked for a
/// person: it prints nothing (they were told of) and exits 1 (they still need one).
#[track_caller]
pub fn cron_check_is_quiet_while_parked(cfg: &Path) -> Output {
    let o = check(cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "", "the cron form says nothing");
    o
}

/// Runs the cron form (`selfheal check --config CFG`, no flags) and asserts that it exits
/// 0 and prints nothing.
#[track_caller]
pub fn cron_check_is_silent(cfg: &Path) -> Output {
    let o = check(cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "", "the cron form says nothing");
    o
}

// ---------------------------------------------------------------------------------------
// SQLite

pub const SQLITE_SCHEMA: &str = "CREATE TABLE sync_log (
    id INTEGER PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    start_time TEXT,
    end_time TEXT,
    error_msg VARCHAR(255) NOT NULL DEFAULT '',
    heartbeat_at TEXT,
    worker TEXT,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sync_log_status ON sync_log (status);";

pub struct SqliteDb {
    pub path: PathBuf,
}

impl SqliteDb {
    pub fn new(sb: &Sandbox) -> SqliteDb {
        SqliteDb::with_schema(sb, SQLITE_SCHEMA)
    }

    /// `app.db` in the sandbox, made with `schema` (e.g. [`SQLITE_SCHEMA`] altered).
    pub fn with_schema(sb: &Sandbox, schema: &str) -> SqliteDb {
        let path = sb.path("app.db");
        let c = rusqlite::Connection::open(&path).expect("sqlite");
        c.execute_batch(schema).expect("schema");
        SqliteDb { path }
    }

    /// Runs statements (fixtures).
    pub fn exec(&self, sql: &str) {
        self.conn()
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Inserts a row with the given status that started at `start` (written as SQLite's
    /// `datetime()` writes it, UTC); for runs under [`frozen_clock`].
    pub fn insert_at(&self, id: i64, status: &str, start: SystemTime) {
        self.conn()
            .execute(
                "INSERT INTO sync_log (id, status, start_time) VALUES (?1, ?2, ?3)",
                rusqlite::params![id, status, sql_datetime(start)],
            )
            .expect("insert");
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    pub fn conn(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.path).expect("sqlite")
    }

    /// Inserts a row with the given status, started `age` seconds ago.
    pub fn insert(&self, id: i64, status: &str, age: u64) {
        self.conn()
            .execute(
                "INSERT INTO sync_log (id, status, start_time) VALUES (?1, ?2, datetime('now', ?3))",
                rusqlite::params![id, status, format!("-{age} seconds")],
            )
            .expect("insert");
    }

    /// `(id, status, end_time is set, error_msg)` for every row.
    pub fn dump(&self) -> Vec<(i64, String, bool, String)> {
        let c = self.conn();
        let mut s = c
            .prepare("SELECT id, status, end_time IS NOT NULL, error_msg FROM sync_log ORDER BY id")
            .expect("prepare");
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    }

    pub fn status(&self, id: i64) -> String {
        self.conn()
            .query_row("SELECT status FROM sync_log WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .expect("status")
    }

    pub fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("read db")
    }
}

// ---------------------------------------------------------------------------------------
// MySQL / MariaDB

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The server URL tests use, without a database name.
fn server_url() -> String {
    std::env::var("SELFHEAL_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@localhost/?socket=/run/mysqld/mysqld.sock".into())
}

/// `url` with its database path replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (authority, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let query = tail.split_once('?').map(|(_, q)| q);
    match query {
        Some(q) => format!("{scheme}://{authority}/{db}?{q}"),
        None => format!("{scheme}://{authority}/{db}"),
    }
}

/// A database created for one test and dropped when the value is dropped.
pub struct MysqlDb {
    pub name: String,
    pub url: String,
    admin: mysql::Conn,
    users: Vec<String>,
}

impl MysqlDb {
    /// `None` (test skipped) only outside CI; in CI a missing server fails the test.
    pub fn new() -> Option<MysqlDb> {
        Self::new_named(|n, nanos| format!("selfheal_t{}_{n}_{nanos}", std::process::id()))
    }

    /// [`MysqlDb::new`] with a name of at most 20 characters, for names built from it that
    /// must fit somewhere (a MySQL lock name holds 64).
    pub fn new_short() -> Option<MysqlDb> {
        Self::new_named(|n, nanos| format!("sh{}_{n}_{}", std::process::id(), nanos % 10_000))
    }

    fn new_named(name_of: impl Fn(usize, u32) -> String) -> Option<MysqlDb> {
        let server = server_url();
        let mut admin = match mysql::Conn::new(
            mysql::Opts::from_url(&server).expect("SELFHEAL_TEST_MYSQL_URL is not a MySQL URL"),
        ) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set and no MySQL/MariaDB server answers at {server}: {e}"
                );
                eprintln!("SKIPPED: no MySQL/MariaDB server at {server}: {e}");
                return None;
            }
        };
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = name_of(COUNTER.fetch_add(1, Ordering::SeqCst), nanos);
        admin
            .query_drop(format!("CREATE DATABASE `{name}`"))
            .expect("create database");
        admin.query_drop(format!("USE `{name}`")).expect("use");
        let url = with_database(&server, &name);
        Some(MysqlDb {
            name,
            url,
            admin,
            users: Vec::new(),
        })
    }

    /// A fresh connection to this database (for concurrent work).
    pub fn conn(&self) -> mysql::Conn {
        mysql::Conn::new(mysql::Opts::from_url(&self.url).expect("url")).expect("connect")
    }

    pub fn exec(&mut self, sql: &str) {
        self.admin
            .query_drop(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The standard job table with a DATETIME start (as PHP's `date('Y-m-d H:i:s')`).
    pub fn create_sync_log(&mut self, started_type: &str) {
        self.exec(&format!(
            "CREATE TABLE sync_log (
                id INT AUTO_INCREMENT PRIMARY KEY,
                status VARCHAR(16) NOT NULL,
                start_time {started_type} NULL,
                end_time DATETIME NULL,
                error_msg VARCHAR(255) NOT NULL DEFAULT '',
                heartbeat_at DATETIME NULL,
                worker VARCHAR(64) NULL,
                attempts INT NOT NULL DEFAULT 0,
                KEY idx_status (status)
            ) ENGINE=InnoDB"
        ));
    }

    /// Inserts a row started `age` seconds ago on the database clock.
    pub fn insert(&mut self, id: i64, status: &str, age: u64) {
        self.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time) VALUES ({id}, '{status}', NOW() - INTERVAL {age} SECOND)"
        ));
    }

    pub fn query<T: mysql::prelude::FromRow>(&mut self, sql: &str) -> Vec<T> {
        self.admin
            .query(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Every column of every row, as text, for byte-for-byte comparisons.
    pub fn dump(&mut self) -> Vec<Vec<Option<String>>> {
        let rows: Vec<mysql::Row> = self.query("SELECT * FROM sync_log ORDER BY id");
        rows.into_iter()
            .map(|r| {
                r.unwrap()
                    .into_iter()
                    .map(|v| match v {
                        mysql::Value::NULL => None,
                        v => Some(v.as_sql(true)),
                    })
                    .collect()
            })
            .collect()
    }

    /// `(status, end_time set, error_msg)` of one row.
    pub fn row(&mut self, id: i64) -> (String, bool, String) {
        let mut r: Vec<(String, bool, String)> = self.query(&format!(
            "SELECT status, end_time IS NOT NULL, error_msg FROM sync_log WHERE id = {id}"
        ));
        r.pop().unwrap_or_else(|| panic!("no row {id}"))
    }
}

/// Waits until an `UPDATE` of `sync_log` in database `db` is on the server (as seen through
/// `conn`'s process list); false after 8 s. Once it is, and the test holds the row `FOR
/// UPDATE`, that statement cannot pass the row before the test commits. (MariaDB does not
/// always list such a waiter in INNODB_TRX when it came through a secondary index, so the
/// process list is the reliable signal.)
pub fn update_waiting(conn: &mut mysql::Conn, db: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    loop {
        let n: Vec<i64> = conn
            .query(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = '{db}' AND INFO LIKE 'UPDATE%sync_log%'"
            ))
            .expect("process list");
        if n[0] > 0 {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl MysqlDb {
    /// [`update_waiting`] on this database.
    pub fn wait_for_lock_wait(&mut self) -> bool {
        let name = self.name.clone();
        update_waiting(&mut self.admin, &name)
    }

    /// The server URL this database lives on, e.g. to tell a socket from TCP.
    pub fn server_url() -> String {
        server_url()
    }

    /// Creates an account `name@localhost` with `password`, allowed everything on this
    /// database only; dropped with the database.
    pub fn create_user(&mut self, password: &str) -> String {
        let user = format!("sh_{}", &self.name[self.name.len().saturating_sub(20)..]);
        let lit = password.replace('\\', "\\\\").replace('\'', "\\'");
        self.exec(&format!(
            "CREATE USER '{user}'@'localhost' IDENTIFIED BY '{lit}'"
        ));
        self.users.push(user.clone());
        self.exec(&format!(
            "GRANT ALL ON `{}`.* TO '{user}'@'localhost'",
            self.name
        ));
        user
    }
}

impl Drop for MysqlDb {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = self
                .admin
                .query_drop(format!("DROP USER IF EXISTS '{u}'@'localhost'"));
        }
        let _ = self
            .admin
            .query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// Skips (outside CI) or fails (in CI) when there is no server.
macro_rules! mysql_or_skip {
    () => {
        match $crate::common::MysqlDb::new() {
            Some(db) => db,
            None => return,
        }
    };
}
pub(crate) use mysql_or_skip;

// ---------------------------------------------------------------------------------------
// PostgreSQL

/// The PostgreSQL server tests use (`SELFHEAL_TEST_POSTGRES_URL`, else the local server on
/// its socket as root), with the database `postgres` to create the tests' own in.
fn pg_server_url() -> String {
    std::env::var("SELFHEAL_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://root@/postgres?host=/var/run/postgresql".into())
}

/// A connection to `url` (the `postgres` crate reads `postgres://` URLs itself).
pub fn pg_connect(url: &str) -> Result<postgres::Client, postgres::Error> {
    url.parse::<postgres::Config>()?.connect(postgres::NoTls)
}

/// A database created for one test and dropped when the value is dropped.
pub struct PgDb {
    pub name: String,
    pub url: String,
    /// Boxed: a client is large, and this value sits in enums beside small ones.
    admin: Box<postgres::Client>,
    roles: Vec<String>,
}

impl PgDb {
    /// `None` (test skipped) only outside CI; in CI a missing server fails the test.
    pub fn new() -> Option<PgDb> {
        let server = pg_server_url();
        let mut root = match pg_connect(&server) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set and no PostgreSQL server answers at {server}: {e}"
                );
                eprintln!("SKIPPED: no PostgreSQL server at {server}: {e}");
                return None;
            }
        };
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "selfheal_t{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        root.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("create database");
        let url = with_database(&server, &name);
        let admin = Box::new(pg_connect(&url).expect("connect to the test's database"));
        Some(PgDb {
            name,
            url,
            admin,
            roles: Vec::new(),
        })
    }

    /// The server URL the databases live on.
    pub fn server_url() -> String {
        pg_server_url()
    }

    /// A fresh connection to this database (for concurrent work).
    pub fn conn(&self) -> postgres::Client {
        pg_connect(&self.url).expect("connect")
    }

    pub fn exec(&mut self, sql: &str) {
        self.admin
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Every cell of every row of `sql`, as PostgreSQL writes it as text (NULL: `None`).
    pub fn rows(&mut self, sql: &str) -> Vec<Vec<Option<String>>> {
        pg_rows(&mut self.admin, sql)
    }

    /// The first cell of the first row.
    pub fn one(&mut self, sql: &str) -> Option<String> {
        self.rows(sql)
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
    }

    /// The standard job table, its start column of type `started_type`.
    pub fn create_sync_log(&mut self, started_type: &str) {
        self.exec(&format!(
            "CREATE TABLE sync_log (
                id INT PRIMARY KEY,
                status VARCHAR(16) NOT NULL,
                start_time {started_type} NULL,
                end_time TIMESTAMP NULL,
                error_msg VARCHAR(255) NOT NULL DEFAULT '',
                heartbeat_at TIMESTAMP NULL,
                worker VARCHAR(64) NULL,
                attempts INT NOT NULL DEFAULT 0
            );
            CREATE INDEX idx_status ON sync_log (status, id)"
        ));
    }

    /// Inserts a row started `age` seconds ago on the database clock.
    pub fn insert(&mut self, id: i64, status: &str, age: u64) {
        self.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time) \
             VALUES ({id}, '{status}', LOCALTIMESTAMP - INTERVAL '{age} seconds')"
        ));
    }

    /// Every column of every row, as text, for byte-for-byte comparisons.
    pub fn dump(&mut self) -> Vec<Vec<Option<String>>> {
        self.rows("SELECT * FROM sync_log ORDER BY id")
    }

    /// `(status, end_time set, error_msg)` of one row.
    pub fn row(&mut self, id: i64) -> (String, bool, String) {
        let r = self.rows(&format!(
            "SELECT status::text, (end_time IS NOT NULL)::text, error_msg FROM sync_log \
             WHERE id = {id}"
        ));
        let r = r
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no row {id}"));
        let cell = |i: usize| r[i].clone().unwrap_or_default();
        (cell(0), cell(1) == "true", cell(2))
    }

    /// Whether a statement of `selfheal` (its `application_name`) waits on a lock in this
    /// database: once it does, and the test holds the row, it cannot pass it before the
    /// test commits. Only a wait of more than 50 ms counts: a write group's try (its
    /// `lock_timeout` is 1 ms) gives up at once and the run then waits row by row, so
    /// catching the try would let a test act before the wait it means. False after 8 s.
    pub fn wait_for_lock_wait(&mut self) -> bool {
        let sql = format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{}' \
             AND application_name = 'selfheal' AND wait_event_type = 'Lock' \
             AND now() - query_start > INTERVAL '50 milliseconds'",
            self.name
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(8);
        loop {
            if self.one(&sql).as_deref() != Some("0") {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Creates a login role with `password`, allowed everything on this database; dropped
    /// with the database.
    pub fn create_role(&mut self, password: &str) -> String {
        let role = format!("sh_{}", &self.name[self.name.len().saturating_sub(20)..]);
        let lit = password.replace('\'', "''");
        self.exec(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD '{lit}'; \
             GRANT ALL ON SCHEMA public TO \"{role}\"; \
             GRANT ALL ON ALL TABLES IN SCHEMA public TO \"{role}\""
        ));
        self.roles.push(role.clone());
        role
    }
}

/// Every cell of every row of `sql` on `c`, as text (the simple protocol: PostgreSQL's own
/// text form of each value).
pub fn pg_rows(c: &mut postgres::Client, sql: &str) -> Vec<Vec<Option<String>>> {
    c.simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let server = pg_server_url();
        if let Ok(mut root) = pg_connect(&server) {
            let _ = root.batch_execute(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ));
            for r in &self.roles {
                let _ = root.batch_execute(&format!("DROP ROLE IF EXISTS \"{r}\""));
            }
        }
    }
}

/// Skips (outside CI) or fails (in CI) when there is no PostgreSQL server.
macro_rules! pg_or_skip {
    () => {
        match $crate::common::PgDb::new() {
            Some(db) => db,
            None => return,
        }
    };
}
pub(crate) use pg_or_skip;

// ---------------------------------------------------------------------------------------
// A private PostgreSQL server, for tests of passwords

/// A throw-away PostgreSQL server of its own (`initdb` into a temporary directory as the
/// `postgres` user, `postgres` on a socket in that directory, no network), where every
/// role logs in with a password (scram-sha-256): the superuser `postgres` with
/// [`PrivatePostgres::SUPERUSER_PASSWORD`]. Stopped and removed on drop. Never the shared
/// server.
pub struct PrivatePostgres {
    pub dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl PrivatePostgres {
    pub const SUPERUSER_PASSWORD: &'static str = "pg-super-Secret";

    /// `None` (skipped) outside CI when not root or without the server binaries.
    pub fn start() -> Option<PrivatePostgres> {
        if !root_or_skip("a private PostgreSQL server") {
            return None;
        }
        let bin = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .filter(|b| b.join("initdb").exists())
                .max()
        });
        let Some(bin) = bin else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have PostgreSQL's server binaries (/usr/lib/postgresql/*/bin)"
            );
            eprintln!("SKIPPED: no initdb/postgres");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("selfheal-postgres-")
            .tempdir()
            .expect("tempdir");
        let pw = dir.path().join("pw");
        std::fs::write(&pw, Self::SUPERUSER_PASSWORD).expect("pwfile");
        let uid = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .expect("a postgres user")
            .uid;
        for p in [dir.path(), pw.as_path()] {
            nix::unistd::chown(p, Some(uid), None).expect("chown");
        }
        let o = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["--auth=scram-sha-256", "--username=postgres", "-E", "UTF8"])
            .arg(format!("--pwfile={}", pw.display()))
            .output()
            .expect("initdb");
        assert!(o.status.success(), "initdb: {}", stderr(&o));
        // setpriv execs the server itself: the child is the postmaster, signalled directly.
        let child = Command::new("setpriv")
            .args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(dir.path().join("data"))
            .arg("-k")
            .arg(dir.path())
            .args(["-c", "listen_addresses=", "-c", "fsync=off"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("postgres");
        let s = PrivatePostgres {
            dir,
            child: Some(child),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.superuser().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the private PostgreSQL did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(s)
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// A connection as the superuser, with its password.
    pub fn superuser(&self) -> Result<postgres::Client, postgres::Error> {
        postgres::Config::new()
            .user("postgres")
            .password(Self::SUPERUSER_PASSWORD)
            .dbname("postgres")
            .host_path(self.socket_dir())
            .connect(postgres::NoTls)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGINT: a fast shutdown, whatever sessions are still open.
            let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("a pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while c.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// A private MariaDB server, for tests that stop it

/// Root, or skipped (outside CI) / failed (in CI).
pub fn root_or_skip(what: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run {what} as root"
    );
    eprintln!("SKIPPED: {what} needs root");
    false
}

/// A throw-away MariaDB server of its own (`mariadb-install-db` into a temporary
/// directory, `mariadbd` on its own socket, no network), stopped and removed on drop. Root
/// logs in over its socket with no password. Never the shared server.
pub struct PrivateMariadb {
    pub dir: tempfile::TempDir,
    child: Option<std::process::Child>,
    /// Server options given on every start (`--default-time-zone=…`).
    extra: Vec<String>,
}

impl PrivateMariadb {
    /// `None` (skipped) outside CI when not root or without the server binaries.
    pub fn start() -> Option<PrivateMariadb> {
        if !root_or_skip("a private MariaDB server") {
            return None;
        }
        let found = |b: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b} || test -x /usr/sbin/{b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !found("mariadb-install-db") || !found("mariadbd") {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have mariadb-install-db and mariadbd"
            );
            eprintln!("SKIPPED: no mariadb-install-db/mariadbd");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("selfheal-mariadb-")
            .tempdir()
            .expect("tempdir");
        // Its own tmpdir: a starting mariadbd deletes every `#sql*` file in its tmpdir,
        // which in the default /tmp includes the shared server's live temporary tables.
        std::fs::create_dir(dir.path().join("tmp")).expect("tmpdir");
        let o = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg(format!("--tmpdir={}", dir.path().join("tmp").display()))
            .args([
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--user=root",
                "--innodb-log-file-size=8M",
            ])
            .output()
            .expect("mariadb-install-db");
        assert!(o.status.success(), "mariadb-install-db: {}", stderr(&o));
        let mut s = PrivateMariadb {
            dir,
            child: None,
            extra: Vec::new(),
        };
        s.start_again();
        Some(s)
    }

    /// Loads the host's time zone rules (`mariadb-tzinfo-to-sql /usr/share/zoneinfo`) into
    /// the server's `mysql` tables, so that named zones such as `Europe/Berlin` exist.
    pub fn load_time_zones(&mut self) {
        let sql = Command::new("mariadb-tzinfo-to-sql")
            .arg("/usr/share/zoneinfo")
            .stderr(std::process::Stdio::null())
            .output()
            .expect("mariadb-tzinfo-to-sql");
        assert!(sql.status.success(), "mariadb-tzinfo-to-sql failed");
        let mut client = Command::new("mariadb")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-u", "root", "mysql"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mariadb client");
        {
            use std::io::Write;
            let mut stdin = client.stdin.take().expect("stdin");
            stdin.write_all(&sql.stdout).expect("time zone rules");
        }
        let o = client.wait_with_output().expect("mariadb client");
        assert!(o.status.success(), "loading time zones: {}", stderr(&o));
    }

    /// Stops the server and starts it again with these server options on every later
    /// start (e.g. `--default-time-zone=Europe/Berlin`, after [`Self::load_time_zones`]).
    pub fn restart_with(&mut self, options: &[&str]) {
        self.stop();
        self.extra = options.iter().map(ToString::to_string).collect();
        self.start_again();
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("s.sock")
    }

    /// The URL of database `db` over the private socket.
    pub fn url(&self, db: &str) -> String {
        format!(
            "mysql://root@localhost/{db}?socket={}",
            self.socket().display()
        )
    }

    pub fn conn(&self, db: &str) -> mysql::Conn {
        let opts = mysql::OptsBuilder::new()
            .user(Some("root"))
            .socket(Some(self.socket().to_string_lossy()))
            .db_name((!db.is_empty()).then_some(db));
        mysql::Conn::new(opts).expect("connect to the private server")
    }

    /// Starts (again) on the same data directory and waits until it answers.
    pub fn start_again(&mut self) {
        let d = self.dir.path();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", d.join("pid").display()))
            .arg(format!("--log-error={}", d.join("error.log").display()))
            .arg(format!("--tmpdir={}", d.join("tmp").display()))
            .args([
                "--skip-networking",
                "--user=root",
                "--innodb-log-file-size=8M",
                "--innodb-buffer-pool-size=32M",
            ])
            .args(&self.extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("mariadbd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let opts = mysql::OptsBuilder::new()
                .user(Some("root"))
                .socket(Some(self.socket().to_string_lossy()));
            if mysql::Conn::new(opts).is_ok() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the private MariaDB did not start: {}",
                std::fs::read_to_string(d.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the server (SIGSTOP): its socket still accepts connections, nothing answers
    /// — a server swapping to death or stopped in a debugger, as a client sees it.
    pub fn freeze(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("a pid"));
            nix::sys::signal::kill(pid, sig).expect("signal mariadbd");
        }
    }

    /// Shuts the server down (SIGTERM, as `systemctl stop` does) and waits until it is gone.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("a pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            c.wait().expect("wait for mariadbd");
        }
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A small deterministic generator (splitmix64) for reproducible "random" choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

// ---------------------------------------------------------------------------------------
// Real processes holding real locks

/// Fails the test in CI, or skips it on a developer machine, when a tool is missing.
/// Returns false when the test should return early.
pub fn have_tool(cmd: &str, args: &[&str], what: &str) -> bool {
    let ok = Command::new(cmd)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and {what} is missing (scripts/test installs it)"
        );
        eprintln!("SKIPPED: {what} is missing (scripts/test installs it)");
    }
    ok
}

/// This host's name, as `HOST:PID` owner values carry it.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8 hostname")
}

/// One pass over `/proc/locks`: a first read of `first` bytes (0: none), then 64 KiB reads.
fn proc_locks_pass(first: usize) -> String {
    use std::io::Read;
    let mut f = File::open("/proc/locks").expect("/proc/locks");
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut want = if first > 0 { first } else { chunk.len() };
    loop {
        let n = f.read(&mut chunk[..want]).expect("read /proc/locks");
        if n == 0 {
            break;
        }
        text.extend_from_slice(&chunk[..n]);
        want = chunk.len();
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Pids of every kernel lock on `path`'s inode, from `/proc/locks` (takes no lock itself).
/// Two passes with different read boundaries: the kernel can skip a record at the boundary
/// between two reads while other locks come and go.
pub fn lock_holders(path: &Path) -> Vec<i64> {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = std::fs::metadata(path).map(|m| m.ino()) else {
        return Vec::new();
    };
    let mut pids: Vec<i64> = [proc_locks_pass(0), proc_locks_pass(2048)]
        .iter()
        .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.contains("->"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let on = f.get(5)?.rsplit(':').next()?.parse::<u64>().ok()?;
            (on == ino).then(|| f[4].parse::<i64>().ok()).flatten()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Runs the calling test again, alone, in a test process of its own (this test binary,
/// `--exact NAME --test-threads=1`), and returns true in that process: the test's body runs
/// there. In the calling process it returns false once the copy passed (and fails the test
/// with its output otherwise). `module` is the caller's `module_path!()`, `name` its
/// function's name.
///
/// For a test that must be alone in its process. One such: a child's `ru_maxrss` counts
/// the peak resident memory of the process that spawned it (Linux records the old address
/// space's high-water mark at `exec`, and a spawned child's old address space is its
/// parent's), so a child's peak measured from a test process that runs every other test
/// beside it would measure those tests too.
pub fn in_a_process_of_its_own(module: &str, name: &str) -> bool {
    const ALONE: &str = "SELFHEAL_TEST_ALONE";
    // The test's path as the harness names it: the module path without the crate's name.
    let test = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    };
    if std::env::var_os(ALONE).is_some_and(|v| v == test.as_str()) {
        return true;
    }
    let o = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", &test, "--test-threads=1", "--nocapture"])
        .env(ALONE, &test)
        .output()
        .expect("run the test in a process of its own");
    let text = format!("{}{}", stdout(&o), stderr(&o));
    print!("{text}");
    assert!(o.status.success(), "{test}, alone in its process:\n{text}");
    assert!(text.contains("1 passed"), "{test} ran alone: {text}");
    false
}

/// Polls `f` until it holds; panics with `what` after `timeout`.
#[track_caller]
/// Starts `cmd` with the signals a test sends at their default dispositions and none
/// blocked: a test run under `nohup` (SIGHUP ignored) or started with `&` from a script
/// (SIGINT and SIGQUIT ignored) passes those on to its children, and a child that
/// ignores the signal it is sent never ends.
pub fn with_default_signals(cmd: &mut Command) -> &mut Command {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls: signal(2) and
    // sigprocmask(2), on a child that runs no other code.
    unsafe {
        cmd.pre_exec(|| {
            for s in [
                Signal::SIGHUP,
                Signal::SIGINT,
                Signal::SIGQUIT,
                Signal::SIGTERM,
            ] {
                signal(s, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)
        })
    }
}

/// Waits for `child` to end, for at most `timeout`: a test that waits on a process that
/// never ends fails, it never hangs.
pub fn wait_at_most(
    child: &mut std::process::Child,
    timeout: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {} s: {what}", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `selfheal check --format json --config CFG` under `strace -f -e INJECT` (a syscall
/// delayed or failed), its stdout piped.
pub fn check_under_strace(inject: &str, cfg: &Path) -> Command {
    let mut c = Command::new("strace");
    c.args(["-f", "-o", "/dev/null", "-e", inject])
        .arg(bin())
        .args(["check", "--format", "json", "--config"])
        .arg(cfg)
        .stdout(std::process::Stdio::piped());
    c
}

/// Waits until the run has written its intents to the sandbox's `pending.jsonl`.
pub fn wait_for_intents(sb: &Sandbox) {
    let pending = sb.state_dir().join("pending.jsonl");
    wait_until("selfheal writes its intents", secs(20), || {
        std::fs::metadata(&pending).is_ok_and(|m| m.len() > 0)
    });
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A sandbox others can enter, with `www`: a directory www-data (uid 33) owns, as a PHP
/// application's runtime directory is. `None` when not root (skipped; CI fails).
pub fn www_data_dir() -> Option<(Sandbox, PathBuf)> {
    if !root_or_skip("a directory another user owns") {
        return None;
    }
    let sb = Sandbox::new();
    chmod(sb.dir.path(), 0o755);
    let www = sb.path("www");
    std::fs::create_dir(&www).expect("dir");
    nix::unistd::chown(&www, Some(33.into()), Some(33.into())).expect("chown");
    Some((sb, www))
}

/// A file's bytes, identity, mtime and mode.
pub fn bytes_and_mode(p: &Path) -> ((u64, u64, SystemTime, Vec<u8>), u32) {
    use std::os::unix::fs::MetadataExt;
    (
        file_state(p),
        std::fs::metadata(p).expect("file").mode() & 0o7777,
    )
}

/// Identity and content of a file: `(dev, inode, mtime, bytes)`.
pub fn file_state(path: &Path) -> (u64, u64, SystemTime, Vec<u8>) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).expect("lock file exists");
    (
        m.dev(),
        m.ino(),
        m.modified().expect("mtime"),
        std::fs::read(path).expect("read"),
    )
}

/// A child process in its own process group; the whole group is SIGKILLed and the child
/// reaped when dropped (so no grandchild outlives the test holding a lock or a pipe).
pub struct Proc {
    pub child: std::process::Child,
    reaped: bool,
}

impl Proc {
    pub fn spawn(cmd: &mut Command) -> Proc {
        Proc::spawn_with(cmd, std::process::Stdio::null())
    }

    /// Like `spawn`, with the child's stdout piped to the test.
    pub fn spawn_piped(cmd: &mut Command) -> Proc {
        Proc::spawn_with(cmd, std::process::Stdio::piped())
    }

    fn spawn_with(cmd: &mut Command, stdout: std::process::Stdio) -> Proc {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(stdout);
        Proc {
            child: cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
            reaped: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap (a real parent reaps its dead child).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reaped = true;
    }

    /// SIGKILL without reaping: the process stays a zombie until `reap`.
    pub fn kill9_no_reap(&mut self) {
        let _ = self.child.kill();
    }

    pub fn reap(&mut self) {
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // While the leader is not reaped its pid, and so the group id, is surely ours:
        // kill the group, grandchildren included.
        if !self.reaped {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid")),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.kill9();
    }
}

/// The pid of a process that ran, exited and was reaped: a worker that is gone.
pub fn exited_pid() -> u32 {
    let mut c = Command::new("true").spawn().expect("true");
    let pid = c.id();
    c.wait().expect("wait");
    pid
}

/// `sleep 600`, a process that lives until killed.
pub fn sleeper() -> Proc {
    Proc::spawn(Command::new("sleep").arg("600"))
}

/// `flock(1)` holding `path` while it runs `sleep` (it creates the file if needed). With
/// `fork = false` (`--no-fork`) flock becomes the sleep and the lock dies with it; with
/// `fork = true` the sleep child inherits the lock and keeps it after flock itself dies.
/// Returns once the kernel lists the lock (and, with `fork`, once the child exists: flock
/// takes the lock before it forks, so killing it earlier would take the lock along).
pub fn flock1_holder(path: &Path, fork: bool) -> Proc {
    let mut c = Command::new("flock");
    if !fork {
        c.arg("--no-fork");
    }
    c.arg(path).args(["sleep", "600"]);
    let p = Proc::spawn(&mut c);
    let pid = i64::from(p.pid());
    wait_until("flock(1) takes its lock", Duration::from_secs(10), || {
        lock_holders(path).contains(&pid)
    });
    if fork {
        wait_until("flock(1) starts its job", Duration::from_secs(10), || {
            !children(p.pid()).is_empty()
        });
    }
    p
}

/// The pids whose parent is `pid`, from /proc.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|c| {
                    std::fs::read_to_string(format!("/proc/{c}/stat")).is_ok_and(|st| {
                        st.rfind(')').and_then(|i| {
                            st[i + 1..].split_whitespace().nth(1)?.parse::<u32>().ok()
                        }) == Some(pid)
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A python3 child that opens `path` (without creating it) and takes a lock with `how`
/// (`flock` for flock(2), `lockf` for a POSIX lock) itself. Returns once it holds it.
pub fn python_holder(path: &Path, how: &str) -> Proc {
    let p = Proc::spawn(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import fcntl, sys, time\n\
                 f = open(sys.argv[1], 'r+')\n\
                 fcntl.{how}(f, fcntl.LOCK_EX)\n\
                 time.sleep(600)\n"
            ))
            .arg(path),
    );
    let pid = i64::from(p.pid());
    wait_until("python3 takes its lock", Duration::from_secs(10), || {
        lock_holders(path).contains(&pid)
    });
    p
}

// ---------------------------------------------------------------------------------------
// A frozen host clock (libfaketime), for output that must not drift by a second

/// The instant a [`frozen_clock`] shows, UTC. Far ahead of the real clock on purpose: the
/// owner probe compares a live pid's real start time (from /proc) with the row's start on
/// the host timeline (frozen now minus the row's age), so every process that runs now
/// looks started before any row of the last years, as a real worker is.
pub const FROZEN_AT: &str = "2035-03-14 15:09:26";

/// [`FROZEN_AT`] as a `SystemTime`. Fails once the real clock comes within a day of it
/// (move `FROZEN_AT` forward then).
pub fn frozen_now() -> SystemTime {
    let at = chrono::NaiveDateTime::parse_from_str(FROZEN_AT, "%Y-%m-%d %H:%M:%S")
        .expect("FROZEN_AT")
        .and_utc()
        .timestamp();
    let t = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(at).expect("FROZEN_AT is after 1970"));
    assert!(
        SystemTime::now() + Duration::from_secs(86_400) < t,
        "the real clock has caught up with FROZEN_AT ({FROZEN_AT}): move it forward"
    );
    t
}

/// `t` as SQLite's `datetime()` writes it: `YYYY-MM-DD HH:MM:SS`, UTC.
pub fn sql_datetime(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// The libfaketime library faketime(1) preloads (`None` without faketime).
fn libfaketime() -> Option<&'static str> {
    static LIB: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let o = Command::new("faketime")
            .args(["-f", "+0", "sh", "-c", "printf %s \"$LD_PRELOAD\""])
            .output()
            .ok()?;
        let lib = String::from_utf8(o.stdout).ok()?;
        (o.status.success() && lib.contains("faketime")).then_some(lib)
    })
    .as_deref()
}

/// The environment that freezes a process's host clock at [`FROZEN_AT`]: libfaketime
/// preloaded with an absolute date, which stops the clock rather than starting it there.
/// Bundled SQLite's `now` follows it; file times stay real (the test sets mtimes relative
/// to [`frozen_now`]) and so do monotonic timers. `None` when the test should return early
/// (no faketime outside CI; in CI that fails the test).
fn frozen_env() -> Option<[(&'static str, &'static str); 5]> {
    frozen_env_at(FROZEN_AT)
}

/// Freezes the host clock of the process `cmd` starts at `at` (UTC, `YYYY-MM-DD
/// HH:MM:SS`), as [`frozen_clock`] does at [`FROZEN_AT`]. False when the test should return
/// early.
pub fn frozen_clock_at(cmd: &mut Command, at: &'static str) -> bool {
    let Some(vars) = frozen_env_at(at) else {
        return false;
    };
    cmd.envs(vars).env_remove("FAKETIME_SHARED");
    true
}

fn frozen_env_at(at: &'static str) -> Option<[(&'static str, &'static str); 5]> {
    let Some(lib) = libfaketime() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and faketime (libfaketime) is missing (scripts/test installs it)"
        );
        eprintln!("SKIPPED: faketime (libfaketime) is missing (scripts/test installs it)");
        return None;
    };
    Some([
        ("LD_PRELOAD", lib),
        ("FAKETIME", at),
        ("TZ", "UTC"),
        ("NO_FAKE_STAT", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ])
}

/// Freezes the host clock of the process `cmd` starts (see [`frozen_env`]), preloading
/// libfaketime into that process itself, so that its pid is the binary's, not a wrapper's.
/// False when the test should return early.
pub fn frozen_clock(cmd: &mut Command) -> bool {
    let Some(vars) = frozen_env() else {
        return false;
    };
    cmd.envs(vars).env_remove("FAKETIME_SHARED");
    true
}

/// The binary under a frozen clock showing `at` (`None`: [`FROZEN_AT`]); `None` when the
/// test should return (no faketime outside CI).
pub fn frozen_at(at: Option<&str>) -> Option<Command> {
    let mut c = selfheal();
    if !frozen_clock(&mut c) {
        return None;
    }
    if let Some(at) = at {
        c.env("FAKETIME", at);
    }
    Some(c)
}

/// `selfheal ARGS --config CFG` under a frozen clock showing `at`.
pub fn run_at(cfg: &Path, args: &[&str], at: Option<&str>) -> Option<Output> {
    let mut c = frozen_at(at)?;
    Some(
        c.args(args)
            .arg("--config")
            .arg(cfg)
            .output()
            .expect("run selfheal"),
    )
}

/// [`as_nobody`] with the binary's clock frozen (see [`frozen_env`]). libfaketime is
/// preloaded after the switch to nobody (through env(1)), never into the root process
/// before it: one preloaded as root leaves shared memory nobody may open.
pub fn as_nobody_frozen() -> Option<Command> {
    as_nobody()?;
    let vars = frozen_env()?;
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        "env",
    ])
    .args(vars.iter().map(|(k, v)| format!("{k}={v}")))
    .arg(bin())
    .env_remove("SELFHEAL_CONFIG")
    .env_remove("SELFHEAL_DB_PASSWORD")
    .env_remove("FAKETIME_SHARED")
    .env("HOME", "/nonexistent")
    .env("LC_ALL", "C");
    Some(c)
}

// ---------------------------------------------------------------------------------------
// A host of its own: system directories overlaid in a private mount namespace

/// `args` run as root in a private mount namespace where each of `dirs` (say `/etc`,
/// `/var/lib`) is overlaid by an empty, writable layer, after the shell script `setup` ran
/// there: files a test puts in `/etc/cron.d` or `/etc/selfheal`, users it adds to
/// `/etc/passwd`, vanish with the namespace, and the host never sees them. `None` (skipped
/// outside CI; in CI a failure) when not root.
pub fn on_own_host(dirs: &[&str], setup: &str, args: &[&std::ffi::OsStr]) -> Option<Command> {
    if !root_or_skip("a private mount namespace with overlaid system directories") {
        return None;
    }
    let mut script = String::from(
        // The layers live on a tmpfs over /mnt, seen in this namespace only.
        "set -e\nlayers=/mnt\nmount -t tmpfs selfheal-layers \"$layers\"\n",
    );
    for (i, d) in dirs.iter().enumerate() {
        let layer = format!(
            "mkdir \"$layers/u{i}\" \"$layers/w{i}\"\n\
             mount -t overlay selfheal-overlay -o \"lowerdir={d},upperdir=$layers/u{i},workdir=$layers/w{i}\" {d}\n"
        );
        script.push_str(&layer);
    }
    script.push_str(setup);
    script.push_str("\nexec \"$@\"\n");
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .args(args)
    .env_remove("SELFHEAL_CONFIG")
    .env_remove("SELFHEAL_DB_PASSWORD")
    .env("HOME", "/nonexistent/selfheal-test-home")
    .env("LC_ALL", "C")
    .env("SELFHEAL", bin());
    Some(c)
}

/// Makes the last real run's confirmation counts a cron period old (their `seen` time moved
/// back `secs`): a run now counts toward `confirm` as the next cron run would. A run less
/// than `stale_after / 2` after the one it follows neither counts nor resets (docs/design.md#verdicts), so
/// a test that runs `check` twice in a row to confirm an inferred verdict lets the time of
/// a cron period pass in between this way. Does nothing without the state file.
pub fn a_cron_period_passes(sb: &Sandbox, secs: i64) {
    let p = sb.state_dir().join("confirmations.json");
    let Ok(text) = std::fs::read_to_string(&p) else {
        return;
    };
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("confirmations.json");
    if let Some(entries) = v["entries"].as_array_mut() {
        for e in entries {
            if let Some(seen) = e["seen"].as_i64() {
                e["seen"] = serde_json::json!(seen - secs);
            }
        }
    }
    std::fs::write(&p, v.to_string()).expect("write confirmations.json");
}

/// [`a_cron_period_passes`] with ten minutes, more than half of any `stale_after` the
/// tests use.
pub fn next_cron_run(sb: &Sandbox) {
    a_cron_period_passes(sb, 600);
}

/// The user documentation whose examples and links `docs` checks: the README, CONTRIBUTING
/// and every Markdown file of `docs/`, as paths relative to the repository.
pub fn doc_files() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A fenced code block of a Markdown file: its language (the word after the fence, `""`
/// for none), the line of its first code line (1-based) and its text.
#[derive(Debug, Clone)]
pub struct CodeBlock {
    pub lang: String,
    pub line: usize,
    pub code: String,
}

/// Every fenced (```) code block of `text`, in order.
pub fn code_blocks(text: &str) -> Vec<CodeBlock> {
    let mut out = Vec::new();
    let mut open: Option<CodeBlock> = None;
    for (i, l) in text.lines().enumerate() {
        match (&mut open, l.strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(CodeBlock {
                    lang: lang.trim().to_string(),
                    line: i + 2,
                    code: String::new(),
                });
            }
            (Some(_), Some("")) => out.extend(open.take()),
            (Some(b), _) => {
                b.code.push_str(l);
                b.code.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a code block is not closed: {open:?}");
    out
}

/// The one code block of `lang` in the repository file `file` whose first line starts with
/// `first` (a `-- SQLite` comment, a `<?php // worker.php` line).
pub fn doc_block(file: &str, lang: &str, first: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let found: Vec<CodeBlock> = code_blocks(&text)
        .into_iter()
        .filter(|b| b.lang == lang && b.code.starts_with(first))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{file}: one ```{lang} block starting with {first:?}"
    );
    found[0].code.clone()
}
