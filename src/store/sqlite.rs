//! SQLite driver: the embedded default, for demos and small applications.
//!
//! Opens an existing database file only (never creates one: a typo in a path is an error,
//! not an empty database), never changes its journal mode, waits up to 5 s on a busy
//! database. "The database clock" is SQLite's `now`, which is the host clock in UTC; naive
//! text timestamps are read as UTC unless `timezone` says how they were written. A group
//! of writes is one `BEGIN IMMEDIATE` transaction; there is no advisory lock (a SQLite
//! database lives on one host, where selfheal's run lock already serialises runs).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::driver::{Cell, Driver, Refusal, Row};
use super::sql::{self, Dialect, Placeholder, SchemaSql, Statement};
use super::table::SqlStore;
use super::types::Column;
use super::{Coordination, Introspect, ScanPlan, Schema, SqlValue};
use crate::config::{Database, DbUrl, Watch};
use crate::error::{DbCause, DbErrorKind, Error, Result};

/// SQLite's SQL: `"` quotes, numbered placeholders, `IS` for null-safe equality, times
/// from `'now'` (UTC), the schema from `PRAGMA table_info`.
pub const DIALECT: Dialect = Dialect {
    quote: '"',
    placeholder: Placeholder::Numbered,
    null_safe_eq: "IS",
    now: "datetime('now')",
    epoch_now: "CAST(strftime('%s', 'now') AS INTEGER)",
    zone_now: ("datetime('now', ", ")"),
    zone_offset: zone_modifier,
    now_plus: ("datetime('now', ", ")"),
    force_index: None,
    force_primary: "",
    enforces_types: false,
    epoch_of: None,
    text_literal: sqlite_literal,
    clock: "SELECT strftime('%Y-%m-%d %H:%M:%S', 'now'), CAST(strftime('%s', 'now') AS INTEGER)",
    schema: SchemaSql {
        columns: table_info,
        column: table_info_column,
        indexes: None,
        current_database: None,
    },
    named_locks: None,
};

/// A string literal as SQLite reads it: quotes doubled; SQLite has no escapes, so a
/// control character is joined in as `char(N)` (the statement stays on one line).
fn sqlite_literal(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            c if c.is_control() => {
                let _ = write!(out, "' || char({}) || '", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The `datetime()` modifier that shifts UTC by `secs`.
fn zone_modifier(secs: i64) -> SqlValue {
    SqlValue::Text(format!("{secs:+} seconds"))
}

/// `PRAGMA table_info`: a row per column (cid, name, declared type, notnull, default, place
/// in the primary key).
fn table_info(w: &Watch) -> Statement {
    let sql = match w.table.schema() {
        Some(s) => format!("PRAGMA \"{s}\".table_info(\"{}\")", w.table.name()),
        None => format!("PRAGMA table_info(\"{}\")", w.table.name()),
    };
    Statement {
        sql,
        params: Vec::new(),
    }
}

/// A row of `PRAGMA table_info`: the column is what its declaration says.
fn table_info_column(r: &mut dyn Row) -> (String, Column, u32) {
    let _cid = r.cell();
    let name = r.cell().value.to_string();
    let declared = r.cell().value.into_text().unwrap_or_default();
    let (_not_null, _default) = (r.cell(), r.cell());
    let key = u32::try_from(r.cell().value.into_count()).unwrap_or(0);
    (name, Column::declared(&declared), key)
}

/// How long a statement waits for another process's lock on the database.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one SQLite file.
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
    in_group: bool,
}

impl Sqlite {
    /// Opens the file at `path`, which must exist.
    pub fn open_file(path: &Path, read_only: bool) -> Result<Self> {
        let base = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let flags = if read_only {
            base | OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            base | OpenFlags::SQLITE_OPEN_READ_WRITE
        };
        let context = || format!("cannot open sqlite://{}", path.display());
        if !path.exists() {
            return Err(Error::database_kind(
                context(),
                DbErrorKind::Unreachable,
                "no such file (selfheal never creates a database)",
            )
            .with_fix(Some(
                "correct [database] url (sqlite:///absolute/path/to/app.db); the file must \
                 exist"
                    .into(),
            )));
        }
        let conn = Connection::open_with_flags(path, flags).map_err(|e| {
            // The fix is for what a real check needs, even to a read-only opener (doctor):
            // the file, and its directory, where SQLite puts its journal.
            let fix =
                crate::fix::access_fix(path, crate::fix::Permission::ReadWrite).or_else(|| {
                    crate::fix::access_fix(
                        path.parent().unwrap_or(Path::new("/")),
                        crate::fix::Permission::Write,
                    )
                });
            Error::database(context(), e).with_fix(fix)
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| Error::database(context(), e))?;
        Ok(Sqlite {
            conn,
            path: path.to_path_buf(),
            in_group: false,
        })
    }

    /// Runs `st`, each row to `each`: the driver's failure as it is.
    fn rows(
        &mut self,
        st: &Statement,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> std::result::Result<(), Failed> {
        let mut stmt = self.conn.prepare(&st.sql).map_err(Failed::Driver)?;
        let mut rows = stmt
            .query(params_from_iter(st.params.iter().map(to_sql)))
            .map_err(Failed::Driver)?;
        while let Some(r) = rows.next().map_err(Failed::Driver)? {
            each(&mut Cells { row: r, at: 0 }).map_err(Failed::Each)?;
        }
        Ok(())
    }
}

/// A query that failed: in the driver, or in what was done with a row.
enum Failed {
    Driver(rusqlite::Error),
    Each(Error),
}

impl Driver for Sqlite {
    type Failure = rusqlite::Error;

    fn open(db: &Database, read_only: bool) -> Result<Self> {
        let DbUrl::Sqlite(path) = &db.url else {
            return Err(Error::Usage("not a SQLite URL".into()));
        };
        Sqlite::open_file(path, read_only)
    }

    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn context(&self, what: &str) -> String {
        format!("{what} in sqlite://{}", self.path.display())
    }

    fn query(
        &mut self,
        st: &Statement,
        what: &str,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> Result<()> {
        match self.rows(st, each) {
            Ok(()) => Ok(()),
            Err(Failed::Each(e)) => Err(e),
            Err(Failed::Driver(e)) => Err(self.failure(what, e)),
        }
    }

    fn execute(&mut self, st: &Statement, _w: &Watch) -> std::result::Result<u64, Refusal> {
        match self
            .conn
            .execute(&st.sql, params_from_iter(st.params.iter().map(to_sql)))
        {
            Ok(n) => Ok(n as u64),
            // Another process kept the database past the busy timeout, or a constraint
            // refused the value: this write failed.
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(
                        rusqlite::ErrorCode::DatabaseBusy
                            | rusqlite::ErrorCode::DatabaseLocked
                            | rusqlite::ErrorCode::ConstraintViolation
                    )
                ) && matches!(e, rusqlite::Error::SqliteFailure(..)) =>
            {
                Err(Refusal::Statement(e.to_string()))
            }
            Err(e) => Err(Refusal::Run(self.failure("writing", e))),
        }
    }

    fn begin_writes(&mut self) -> Result<bool> {
        // Takes the write lock now, waiting up to the busy timeout like any write; busy
        // after that: each compare-and-set tries on its own, as without a group.
        match self.conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                self.in_group = true;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.failure("beginning the writes", e)),
        }
    }

    fn in_writes(&self) -> bool {
        self.in_group
    }

    fn undo_writes(&mut self) -> Result<()> {
        self.conn
            .execute_batch("ROLLBACK; BEGIN IMMEDIATE")
            .map_err(|e| self.failure("writing", e))
    }

    fn commit_writes(&mut self) -> Result<()> {
        self.in_group = false;
        self.conn.execute_batch("COMMIT").map_err(|e| {
            // Whatever SQLite left open is rolled back, so that nothing half-done stays.
            let _ = self.conn.execute_batch("ROLLBACK");
            self.failure("committing the writes", e)
        })
    }
}

/// A result row, cell by cell.
struct Cells<'r, 's> {
    row: &'r rusqlite::Row<'s>,
    at: usize,
}

impl Row for Cells<'_, '_> {
    fn cell(&mut self) -> Cell {
        let value = self.row.get_ref(self.at).map_or(SqlValue::Null, from_sql);
        self.at += 1;
        Cell { value, ty: None }
    }

    fn columns(&self) -> usize {
        self.row.as_ref().column_count()
    }

    fn name(&self, i: usize) -> String {
        self.row
            .as_ref()
            .column_name(i)
            .map(str::to_string)
            .unwrap_or_default()
    }
}

impl DbCause for rusqlite::Error {
    fn kind(&self) -> DbErrorKind {
        use rusqlite::ErrorCode as C;
        let (code, msg) = match self {
            rusqlite::Error::SqliteFailure(e, msg) => (e.code, msg.as_deref()),
            // A statement that does not prepare, with the offending token's position.
            rusqlite::Error::SqlInputError { error, msg, .. } => (error.code, Some(msg.as_str())),
            _ => return DbErrorKind::Other,
        };
        match code {
            C::PermissionDenied | C::AuthorizationForStatementDenied | C::ReadOnly => {
                DbErrorKind::AccessDenied
            }
            C::CannotOpen => DbErrorKind::Unreachable,
            // After the busy timeout.
            C::DatabaseBusy | C::DatabaseLocked => DbErrorKind::TimedOut,
            // SQLite reports a missing table or column as the generic SQLITE_ERROR; only
            // its message tells them apart.
            C::Unknown
                if msg.is_some_and(|m| {
                    m.starts_with("no such table") || m.starts_with("no such column")
                }) =>
            {
                DbErrorKind::UnknownObject
            }
            _ => DbErrorKind::Other,
        }
    }

    fn fix(&self) -> Option<String> {
        match self.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => {
                Some("correct [database] url: it names a file that is no SQLite database".into())
            }
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => Some(
                "another process (the application, or a long transaction left open) holds \
                     the database's lock; fuser names it, and the next run tries again"
                    .into(),
            ),
            _ => None,
        }
    }

    fn into_source(self) -> crate::error::BoxError {
        Box::new(Failure(self))
    }
}

/// A SQLite failure in selfheal's words: a wait for another process's lock that ran out
/// says so, with its limit; the rest is SQLite's own message. (The driver's error stays
/// reachable as the source.)
#[derive(Debug)]
struct Failure(rusqlite::Error);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                write!(
                    f,
                    "another process holds the database's lock: timed out after {} s",
                    BUSY_TIMEOUT.as_secs()
                )
            }
            _ => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn to_sql(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::Null,
        SqlValue::Int(i) => Value::Integer(*i),
        SqlValue::UInt(u) => i64::try_from(*u).map_or(Value::Real(*u as f64), Value::Integer),
        SqlValue::Float(f) => Value::Real(*f),
        SqlValue::Text(s) => Value::Text(s.clone()),
        SqlValue::Bytes(b) => Value::Blob(b.clone()),
        SqlValue::DateTime(d) => Value::Text(d.format("%Y-%m-%d %H:%M:%S").to_string()),
    }
}

fn from_sql(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Integer(i) => SqlValue::Int(i),
        ValueRef::Real(f) => SqlValue::Float(f),
        ValueRef::Text(t) => SqlValue::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => SqlValue::Bytes(b.to_vec()),
    }
}

/// Reads `EXPLAIN QUERY PLAN` details: `SEARCH t USING INDEX i (status=?)` finds running
/// rows through an index; `SCAN t` (even `SCAN t USING INDEX i`) reads every row.
fn plan_of(details: &[String]) -> ScanPlan {
    let index = details.iter().find_map(|d| {
        let rest = d.strip_prefix("SEARCH ")?;
        let after = rest
            .split_once("USING COVERING INDEX ")
            .or_else(|| rest.split_once("USING INDEX "))?
            .1;
        after.split_whitespace().next().map(str::to_string)
    });
    ScanPlan {
        index,
        candidates: Vec::new(),
        rows: None,
        detail: format!("EXPLAIN QUERY PLAN: {}", details.join("; ")),
    }
}

impl Introspect for SqlStore<Sqlite> {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn describe_server(&mut self) -> Result<String> {
        Ok(format!("sqlite {}", rusqlite::version()))
    }

    fn connection(&self) -> String {
        format!("sqlite://{}", self.driver.path.display())
    }

    fn schema(&mut self, w: &Watch) -> Result<Schema> {
        self.read_schema(w)
    }

    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan> {
        let st = sql::running_sql(&DIALECT, w);
        let explain = Statement {
            sql: format!("EXPLAIN QUERY PLAN {}", st.sql),
            params: st.params,
        };
        let mut details: Vec<String> = Vec::new();
        self.driver.query(
            &explain,
            "EXPLAIN QUERY PLAN of the running-rows query",
            &mut |r| {
                let (_id, _parent, _unused) = (r.cell(), r.cell(), r.cell());
                details.push(r.cell().value.to_string());
                Ok(())
            },
        )?;
        let mut plan = plan_of(&details);
        // A scan reads every row: about as many as the largest rowid (one look at the end
        // of the table's b-tree; none for a table WITHOUT ROWID), so doctor can word the
        // cost by the table's size.
        if plan.index.is_none() {
            let st = Statement {
                sql: format!("SELECT MAX(rowid) FROM {}", w.table.quoted('"')),
                params: Vec::new(),
            };
            plan.rows = self
                .first_row(&st, "reading the table's size")
                .ok()
                .map(|cells| {
                    let n = cells.and_then(|c| c.into_iter().next());
                    u64::try_from(n.map_or(0, SqlValue::into_count)).unwrap_or(0)
                });
        }
        Ok(plan)
    }

    fn session_time_zone(&mut self) -> Result<String> {
        Ok("UTC (SQLite's 'now')".into())
    }

    fn survey(&mut self) -> Option<&mut dyn super::survey::Survey> {
        Some(self)
    }
}

impl Coordination for SqlStore<Sqlite> {
    fn try_watch_lock(&mut self, _w: &Watch, _host: Option<&str>) -> Result<bool> {
        // A SQLite database lives on one host; selfheal's run lock already serialises runs.
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SchemaProblem;
    use crate::store::JobTable;

    #[test]
    fn query_plans() {
        let p = plan_of(&["SEARCH sync_log USING INDEX sync_log_status (status=?)".into()]);
        assert_eq!(p.index.as_deref(), Some("sync_log_status"));
        let p = plan_of(&[
            "SEARCH t USING COVERING INDEX t_status_id (status=?)".into(),
            "USE TEMP B-TREE FOR ORDER BY".into(),
        ]);
        assert_eq!(p.index.as_deref(), Some("t_status_id"));
        assert_eq!(plan_of(&["SCAN sync_log".into()]).index, None);
        assert_eq!(plan_of(&["SCAN t USING INDEX t_status".into()]).index, None);
        assert_eq!(
            plan_of(&["SEARCH t USING INTEGER PRIMARY KEY (rowid=?)".into()]).index,
            None
        );
    }

    #[test]
    fn a_failed_read_keeps_the_drivers_error_as_its_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("app.db");
        Connection::open(&db)
            .and_then(|c| c.execute_batch("CREATE TABLE other (id INTEGER PRIMARY KEY)"))
            .expect("create");
        let text = format!(
            "[database]\nurl = \"sqlite://{}\"\n\n[[watch]]\nname = \"sync\"\n\
             table = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"/run/app/{{id}}.hb\"\nstale_after = \"5m\"\nmax_age = \"6h\"\n",
            db.display()
        );
        let cfg = crate::config::from_str(
            &text,
            Path::new("/etc/selfheal/selfheal.toml"),
            &crate::config::Overrides::default(),
            &[],
        )
        .expect("config");
        let database = cfg.database.as_ref().expect("a database");
        let mut store = SqlStore::<Sqlite>::open(database, true).expect("open");
        let e = store
            .each_running_row(&cfg.watches[0], &mut |_| Ok(()))
            .expect_err("no such table");
        assert_eq!(e.db_kind(), Some(DbErrorKind::UnknownObject));
        let source = std::error::Error::source(&e)
            .and_then(std::error::Error::source)
            .expect("the driver's error, under selfheal's wording");
        assert!(source.downcast_ref::<rusqlite::Error>().is_some(), "{e}");
        assert!(e.to_string().contains("no such table: sync_log"), "{e}");
        // The schema check says the same structurally.
        match store.schema(&cfg.watches[0]) {
            Err(Error::Schema {
                problem: SchemaProblem::NoTable { table, .. },
                ..
            }) => assert_eq!(table, "sync_log"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sqlite_failures_have_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .expect("create");
        let kind = |sql: &str| {
            conn.execute_batch(sql)
                .map_err(|e| e.kind())
                .expect_err(sql)
        };
        assert_eq!(kind("SELECT * FROM nosuch"), DbErrorKind::UnknownObject);
        assert_eq!(kind("SELECT nosuch FROM t"), DbErrorKind::UnknownObject);
        assert_eq!(kind("SELEKT 1"), DbErrorKind::Other);
        let missing = Sqlite::open_file(&dir.path().join("missing.db"), true)
            .err()
            .and_then(|e| e.db_kind());
        assert_eq!(missing, Some(DbErrorKind::Unreachable));
        // A file that is no database at all.
        std::fs::write(dir.path().join("junk.db"), vec![b'x'; 4096]).expect("write");
        let junk = Connection::open(dir.path().join("junk.db")).expect("open");
        let e = junk
            .execute_batch("SELECT * FROM sqlite_master")
            .expect_err("not a database");
        assert_eq!(e.kind(), DbErrorKind::Other);
        // Another connection holds the write lock past the busy timeout.
        let holder = Connection::open(dir.path().join("t.db")).expect("open");
        holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
        conn.busy_timeout(Duration::ZERO).expect("timeout");
        assert_eq!(kind("INSERT INTO t (id) VALUES (1)"), DbErrorKind::TimedOut);
    }
}
