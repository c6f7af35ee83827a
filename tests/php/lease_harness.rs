//! The harness of the tests that run `Selfheal\Lease` (`php/Selfheal/Lease.php`) with
//! php-cli on real databases (`php::lease`, `php::lease_loop`, `php::lease_times`): a
//! `sync_log` job table on MariaDB, on PostgreSQL or in a SQLite file ([`Env`]), selfheal's configuration
//! for it, and `tests/php/lease_driver.php` workers in their own process groups ([`Php`])
//! answering one JSON command a line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::common::*;
use serde_json::{Value, json};

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn have_php(ext: &str) -> bool {
    have_tool(
        "php",
        &["-r", &format!("exit(extension_loaded('{ext}') ? 0 : 1);")],
        &format!("php-cli with {ext}"),
    )
}

// ---------------------------------------------------------------------------------------
// A job table on either database

pub enum Backend {
    Mysql(MysqlDb),
    Postgres(PgDb),
    Sqlite(SqliteDb),
}

/// A sandbox and a `sync_log` whose four time columns (start, heartbeat, end, retry_at)
/// have the type `time`.
pub struct Env {
    pub sb: Sandbox,
    pub db: Backend,
    pub time: &'static str,
}

impl Env {
    /// `None` (skipped) outside CI without a server or pdo_mysql.
    pub fn mysql(time: &'static str) -> Option<Env> {
        let mut db = MysqlDb::new()?;
        if !have_php("pdo_mysql") {
            return None;
        }
        db.exec(&format!(
            "CREATE TABLE sync_log (
                id INT PRIMARY KEY,
                status VARCHAR(16) NOT NULL,
                start_time {time} NULL,
                end_time {time} NULL,
                error_msg VARCHAR(255) NOT NULL DEFAULT '',
                heartbeat_at {time} NULL,
                worker VARCHAR(64) NULL,
                attempts INT NOT NULL DEFAULT 0,
                retry_at {time} NULL,
                KEY idx_status (status)
            ) ENGINE=InnoDB"
        ));
        Some(Env {
            sb: Sandbox::new(),
            db: Backend::Mysql(db),
            time,
        })
    }

    /// `None` (skipped) outside CI without a server or pdo_pgsql.
    pub fn postgres(time: &'static str) -> Option<Env> {
        let mut db = PgDb::new()?;
        if !have_php("pdo_pgsql") {
            return None;
        }
        db.exec(&format!(
            "CREATE TABLE sync_log (
                id INT PRIMARY KEY,
                status VARCHAR(16) NOT NULL,
                start_time {time} NULL,
                end_time {time} NULL,
                error_msg VARCHAR(255) NOT NULL DEFAULT '',
                heartbeat_at {time} NULL,
                worker VARCHAR(64) NULL,
                attempts INT NOT NULL DEFAULT 0,
                retry_at {time} NULL
            );
            CREATE INDEX idx_status ON sync_log (status, id)"
        ));
        Some(Env {
            sb: Sandbox::new(),
            db: Backend::Postgres(db),
            time,
        })
    }

    /// One of each kind of time column: MariaDB DATETIME, TIMESTAMP and unix seconds,
    /// PostgreSQL timestamp, timestamptz, text and unix seconds, SQLite text and unix
    /// seconds (those that can run here).
    pub fn every_time_column() -> Vec<Env> {
        [
            Env::mysql("DATETIME"),
            Env::mysql("TIMESTAMP"),
            Env::mysql("BIGINT"),
            Env::postgres("TIMESTAMP"),
            Env::postgres("TIMESTAMPTZ"),
            Env::postgres("TEXT"),
            Env::postgres("BIGINT"),
            Env::sqlite("TEXT"),
            Env::sqlite("INTEGER"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// `None` (skipped) outside CI without pdo_sqlite.
    pub fn sqlite(time: &'static str) -> Option<Env> {
        if !have_php("pdo_sqlite") {
            return None;
        }
        let sb = Sandbox::new();
        let db = SqliteDb::with_schema(
            &sb,
            &format!(
                "CREATE TABLE sync_log (
                    id INTEGER PRIMARY KEY,
                    status VARCHAR(16) NOT NULL,
                    start_time {time},
                    end_time {time},
                    error_msg VARCHAR(255) NOT NULL DEFAULT '',
                    heartbeat_at {time},
                    worker TEXT,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    retry_at {time}
                );
                CREATE INDEX sync_log_status ON sync_log (status);"
            ),
        );
        Some(Env {
            sb,
            db: Backend::Sqlite(db),
            time,
        })
    }

    /// The queue table of the job author's guide, made by its own `CREATE TABLE` for the
    /// database (`-- MySQL/MariaDB` or `-- SQLite` block of `docs/job-author.md`). `None`
    /// (skipped) as [`Env::mysql`] and [`Env::sqlite`].
    pub fn documented(mysql: bool) -> Option<Env> {
        const DOC: &str = "docs/job-author.md";
        if mysql {
            let mut db = MysqlDb::new()?;
            if !have_php("pdo_mysql") {
                return None;
            }
            db.exec(&doc_block(DOC, "sql", "-- MySQL/MariaDB"));
            Some(Env {
                sb: Sandbox::new(),
                db: Backend::Mysql(db),
                time: "DATETIME",
            })
        } else {
            if !have_php("pdo_sqlite") {
                return None;
            }
            let sb = Sandbox::new();
            let db = SqliteDb::with_schema(&sb, &doc_block(DOC, "sql", "-- SQLite"));
            Some(Env {
                sb,
                db: Backend::Sqlite(db),
                time: "TEXT",
            })
        }
    }

    pub fn name(&self) -> String {
        match self.db {
            Backend::Mysql(_) => format!("MariaDB, {}", self.time),
            Backend::Postgres(_) => format!("PostgreSQL, {}", self.time),
            Backend::Sqlite(_) => format!("SQLite, {}", self.time),
        }
    }

    pub fn is_mysql(&self) -> bool {
        matches!(self.db, Backend::Mysql(_))
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.db, Backend::Postgres(_))
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self.db, Backend::Sqlite(_))
    }

    pub fn integer_times(&self) -> bool {
        self.time.contains("INT")
    }

    pub fn exec(&mut self, sql: &str) {
        match &mut self.db {
            Backend::Mysql(db) => db.exec(sql),
            Backend::Postgres(db) => db.exec(sql),
            Backend::Sqlite(db) => db.exec(sql),
        }
    }

    /// Every cell as text (NULL as None).
    pub fn rows(&mut self, sql: &str) -> Vec<Vec<Option<String>>> {
        match &mut self.db {
            Backend::Mysql(db) => db
                .query::<mysql::Row>(sql)
                .into_iter()
                .map(|r| {
                    r.unwrap()
                        .into_iter()
                        .map(|v| match v {
                            mysql::Value::NULL => None,
                            mysql::Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into()),
                            v => Some(v.as_sql(true)),
                        })
                        .collect()
                })
                .collect(),
            Backend::Postgres(db) => db.rows(sql),
            Backend::Sqlite(db) => {
                let c = db.conn();
                let mut st = c.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
                let n = st.column_count();
                st.query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                rusqlite::types::ValueRef::Null => None,
                                rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                                rusqlite::types::ValueRef::Real(v) => Some(v.to_string()),
                                rusqlite::types::ValueRef::Text(t)
                                | rusqlite::types::ValueRef::Blob(t) => {
                                    Some(String::from_utf8_lossy(t).into())
                                }
                            })
                        })
                        .collect()
                })
                .expect("query")
                .map(|r| r.expect("row"))
                .collect()
            }
        }
    }

    /// The first cell of the first row.
    pub fn one(&mut self, sql: &str) -> Option<String> {
        self.rows(sql)
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
    }

    pub fn int(&mut self, sql: &str) -> i64 {
        self.one(sql)
            .and_then(|v| v.split('.').next().and_then(|i| i.parse().ok()))
            .unwrap_or_else(|| panic!("no integer from {sql}"))
    }

    /// The whole table, for "changed nothing" comparisons.
    pub fn dump(&mut self) -> Vec<Vec<Option<String>>> {
        self.rows("SELECT * FROM sync_log ORDER BY id")
    }

    /// `(status, worker, attempts, error_msg, end_time set)` of one row.
    pub fn row(&mut self, id: i64) -> (String, String, i64, String, bool) {
        let r = self
            .rows(&format!(
                "SELECT status, worker, attempts, error_msg, \
                 CASE WHEN end_time IS NOT NULL THEN 1 ELSE 0 END \
                 FROM sync_log WHERE id = {id}"
            ))
            .pop()
            .unwrap_or_else(|| panic!("no row {id}"));
        let text = |i: usize| r[i].clone().unwrap_or_default();
        (
            text(0),
            text(1),
            text(2).parse().expect("attempts"),
            text(3),
            text(4) == "1",
        )
    }

    pub fn insert_pending(&mut self, ids: std::ops::RangeInclusive<i64>) {
        let values: Vec<String> = ids.map(|i| format!("({i}, 'pending')")).collect();
        for chunk in values.chunks(200) {
            self.exec(&format!(
                "INSERT INTO sync_log (id, status) VALUES {}",
                chunk.join(", ")
            ));
        }
    }

    /// The database's unix seconds now.
    pub fn now_sql(&self) -> &'static str {
        match self.db {
            Backend::Mysql(_) => "UNIX_TIMESTAMP()",
            Backend::Postgres(_) => "FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP))::bigint",
            Backend::Sqlite(_) => "CAST(strftime('%s', 'now') AS INTEGER)",
        }
    }

    /// Unix seconds of a time column, as the database reads it (PostgreSQL: a naive
    /// timestamp, or its text, in the session's time zone).
    pub fn epoch_sql(&self, col: &str) -> String {
        match (self.integer_times(), &self.db) {
            (true, _) => col.to_string(),
            (false, Backend::Mysql(_)) => format!("UNIX_TIMESTAMP({col})"),
            (false, Backend::Postgres(_)) => {
                format!("FLOOR(EXTRACT(EPOCH FROM {col}::timestamptz))::bigint")
            }
            (false, Backend::Sqlite(_)) => format!("CAST(strftime('%s', {col}) AS INTEGER)"),
        }
    }

    /// The database's now `offset` seconds ahead, for a time column of this table.
    pub fn now_plus_sql(&self, offset: i64) -> String {
        match (self.integer_times(), &self.db) {
            (true, _) => format!("{} + ({offset})", self.now_sql()),
            (false, Backend::Mysql(_)) => format!("NOW() + INTERVAL ({offset}) SECOND"),
            (false, Backend::Postgres(_)) if self.time == "TEXT" => format!(
                "to_char(date_trunc('second', LOCALTIMESTAMP) + INTERVAL '{offset} seconds', \
                 'YYYY-MM-DD HH24:MI:SS')"
            ),
            (false, Backend::Postgres(_)) => {
                format!("date_trunc('second', LOCALTIMESTAMP) + INTERVAL '{offset} seconds'")
            }
            (false, Backend::Sqlite(_)) => format!("datetime('now', '{offset:+} seconds')"),
        }
    }

    /// Seconds from a time column of row `id` to the database's now (positive: past).
    pub fn age(&mut self, col: &str, id: i64) -> i64 {
        let sql = format!(
            "SELECT {} - {} FROM sync_log WHERE id = {id}",
            self.now_sql(),
            self.epoch_sql(col)
        );
        self.int(&sql)
    }

    /// PDO's DSN, user and password.
    pub fn dsn(&self) -> (String, String, String) {
        match &self.db {
            Backend::Mysql(db) => {
                let opts = mysql::Opts::from_url(&db.url).expect("url");
                let dsn = match opts.get_socket() {
                    Some(sock) => format!("mysql:unix_socket={sock};dbname={}", db.name),
                    None => format!(
                        "mysql:host={};port={};dbname={}",
                        opts.get_ip_or_hostname(),
                        opts.get_tcp_port(),
                        db.name
                    ),
                };
                (
                    dsn,
                    opts.get_user().unwrap_or("root").to_string(),
                    opts.get_pass().unwrap_or("").to_string(),
                )
            }
            Backend::Postgres(db) => {
                let c: postgres::Config = db.url.parse().expect("url");
                let host = match c.get_hosts().first() {
                    Some(postgres::config::Host::Unix(dir)) => dir.display().to_string(),
                    Some(postgres::config::Host::Tcp(h)) => h.clone(),
                    None => "/var/run/postgresql".into(),
                };
                let port = c.get_ports().first().copied().unwrap_or(5432);
                (
                    format!("pgsql:host={host};port={port};dbname={}", db.name),
                    c.get_user().unwrap_or("root").to_string(),
                    c.get_password()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .unwrap_or_default(),
                )
            }
            Backend::Sqlite(db) => (
                format!("sqlite:{}", db.path.display()),
                String::new(),
                String::new(),
            ),
        }
    }

    /// selfheal's URL of the database.
    pub fn url(&self) -> String {
        match &self.db {
            Backend::Mysql(db) => db.url.clone(),
            Backend::Postgres(db) => db.url.clone(),
            Backend::Sqlite(db) => db.url(),
        }
    }

    /// A selfheal configuration with one watch over `sync_log` judged by the heartbeat
    /// column the lease renews (stale after 2 s, acting at once), plus `extra`.
    pub fn config(&self, extra: &str) -> PathBuf {
        self.sb.config(
            &self.url(),
            &format!(
                "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_column = \"heartbeat_at\"\nstale_after = \"2s\"\nmax_age = \"1h\"\n\
                 retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 3\n\
                 confirm = 1\nended_column = \"end_time\"\nmessage_column = \"error_msg\"\n{extra}"
            ),
        )
    }

    /// Waits until row `id`'s heartbeat column is at least `s` seconds old on the
    /// database's clock.
    pub fn wait_stale(&mut self, id: i64, s: i64) {
        wait_until("the heartbeat goes stale", secs(60), || {
            self.age("heartbeat_at", id) >= s
        });
    }
}

/// The lease specification the tests use (every = 1 ms: each beat() is due), with `extra`
/// merged in (a null value removes a key).
pub fn spec(extra: &Value) -> Value {
    let mut s = json!({
        "table": "sync_log", "started_column": "start_time", "owner_column": "worker",
        "heartbeat_column": "heartbeat_at", "ended_column": "end_time",
        "message_column": "error_msg", "retry_value": "pending", "attempts_column": "attempts",
        "retry_at_column": "retry_at", "every": 0.001,
    });
    if let (Some(s), Some(extra)) = (s.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if v.is_null() {
                s.remove(k);
            } else {
                s.insert(k.clone(), v.clone());
            }
        }
    }
    s
}

// ---------------------------------------------------------------------------------------
// PHP processes

/// A `lease_driver.php` process in its own process group, SIGKILLed with its group and
/// reaped when dropped.
pub struct Php {
    pub child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Php {
    pub fn spawn(env: &Env, spec: &Value, args: &[&str]) -> Php {
        let (dsn, user, pass) = env.dsn();
        let mut cmd = Command::new("php");
        cmd.arg(root().join("tests/php/lease_driver.php"))
            .args(["--dsn", &dsn, "--user", &user, "--spec", &spec.to_string()])
            .args(args)
            .env("DB_PASSWORD", pass)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("php");
        let stdin = child.stdin.take().expect("stdin");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Php { child, stdin, out }
    }

    /// A worker that takes commands (see lease_driver.php).
    pub fn repl(env: &Env, spec: &Value) -> Php {
        Php::spawn(env, spec, &["--mode", "repl"])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn owner(&self) -> String {
        format!("{}:{}", hostname(), self.pid())
    }

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("php output");
        assert!(
            !line.is_empty(),
            "php {} ended: {:?}",
            self.pid(),
            self.child.try_wait()
        );
        line.trim_end().to_string()
    }

    pub fn post(&mut self, cmd: &Value) {
        writeln!(self.stdin, "{cmd}").expect("php stdin");
        self.stdin.flush().expect("php stdin");
    }

    pub fn answer(&mut self) -> Value {
        let line = self.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    pub fn send(&mut self, cmd: &Value) -> Value {
        self.post(cmd);
        self.answer()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("pid"));
        nix::sys::signal::kill(pid, sig).expect("signal php");
    }

    /// SIGSTOP, and waits until the kernel says it is stopped.
    pub fn stop(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        let stat = format!("/proc/{}/stat", self.pid());
        wait_until("php stops", secs(10), || {
            std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    == Some("T")
            })
        });
    }

    pub fn cont(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Php {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait();
    }
}

/// The result of a command that succeeded.
#[track_caller]
pub fn ok(v: &Value) -> Value {
    assert_eq!(v["ok"], true, "the command failed: {v}");
    v["result"].clone()
}

/// A command that threw `Selfheal\LeaseLost` (code 75), naming the row's status now.
#[track_caller]
pub fn lost(v: &Value, status_now: &str) {
    assert_eq!(v["class"], "Selfheal\\LeaseLost", "{v}");
    assert_eq!(v["code"], 75, "{v}");
    assert_eq!(v["status_now"], status_now, "{v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("is no longer this worker's") && msg.contains("stop working on it"),
        "{msg}"
    );
}

/// A command that threw `class` with a message containing `text`.
#[track_caller]
pub fn threw(v: &Value, class: &str, text: &str) {
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["class"], class, "{v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.contains(text), "expected {text:?} in {msg:?}");
}

pub fn op(name: &str) -> Value {
    json!({ "op": name })
}

pub fn finish(status: &str) -> Value {
    json!({ "op": "finish", "status": status })
}

pub fn claim(id: i64) -> Value {
    json!({ "op": "claim", "id": id })
}

/// Every database the lease supports, with a DATETIME-like start (skipped ones left out).
pub fn both() -> Vec<Env> {
    [
        Env::mysql("DATETIME"),
        Env::postgres("TIMESTAMP"),
        Env::sqlite("TEXT"),
    ]
    .into_iter()
    .flatten()
    .collect()
}
