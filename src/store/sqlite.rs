//! SQLite adapter: the embedded default, for demos and small applications.
//!
//! Opens an existing database file only (never creates one: a typo in a path is an error,
//! not an empty database), never changes its journal mode, waits up to 5 s on a busy
//! database. "The database clock" is SQLite's `now`, which is the host clock in UTC; naive
//! text timestamps are read as UTC unless `timezone` says how they were written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::sql::{self, Dialect, Placeholder};
use super::types::{self, Column};
use super::{
    CasOutcome, Change, Coordination, CurrentRow, FinishedRow, History, Introspect, JobTable,
    ParkedRow, RunningRow, ScanPlan, Schema, Select, SqlValue, StoredRow,
};
use crate::clock::DbClock;
use crate::config::Watch;
use crate::error::{DbCause, DbErrorKind, Error, Result, SchemaProblem};

/// SQLite's SQL: `"` quotes, numbered placeholders, `IS` for null-safe equality, times
/// from `'now'` (UTC).
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

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    tz: Option<chrono_tz::Tz>,
}

impl SqliteStore {
    pub fn open(path: &Path, tz: Option<chrono_tz::Tz>, read_only: bool) -> Result<Self> {
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
        Ok(SqliteStore {
            conn,
            path: path.to_path_buf(),
            tz,
        })
    }

    fn ctx(&self, what: &str) -> String {
        format!("{what} in sqlite://{}", self.path.display())
    }

    /// `(name, declared type, position in the primary key or 0)` per column.
    fn table_info(&self, w: &Watch) -> Result<Vec<(String, String, i64)>> {
        let pragma = match w.table.schema() {
            Some(s) => format!("PRAGMA \"{s}\".table_info(\"{}\")", w.table.name()),
            None => format!("PRAGMA table_info(\"{}\")", w.table.name()),
        };
        let mut stmt = self
            .conn
            .prepare(&pragma)
            .map_err(|e| Error::database(self.ctx("reading the schema"), e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .map_err(|e| Error::database(self.ctx("reading the schema"), e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| Error::database(self.ctx("reading the schema"), e))
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

/// How long a statement waits for another process's lock on the database.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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

impl JobTable for SqliteStore {
    fn clock(&mut self) -> Result<DbClock> {
        let (naive, epoch): (String, i64) = self
            .conn
            .query_row(
                "SELECT strftime('%Y-%m-%d %H:%M:%S', 'now'), CAST(strftime('%s', 'now') AS INTEGER)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(|e| Error::database(self.ctx("reading the clock"), e))?;
        let now_naive = chrono::NaiveDateTime::parse_from_str(&naive, "%Y-%m-%d %H:%M:%S")
            .map_err(|e| {
                Error::database_kind(self.ctx("reading the clock"), DbErrorKind::Other, e)
            })?;
        Ok(DbClock {
            now_naive,
            now_epoch: epoch,
        })
    }

    fn each_row(
        &mut self,
        w: &Watch,
        sel: Select<'_>,
        each: &mut dyn FnMut(StoredRow) -> Result<()>,
    ) -> Result<()> {
        let st = sql::rows_sql(&DIALECT, w, sel);
        let tz = self.tz;
        let tz_time = |raw| types::time_value(raw, None, tz, types::NaiveClock::Utc);
        let what = sel.what();
        let ctx = || self.ctx(&format!("reading {what} of {}", w.table));
        let mut stmt = self
            .conn
            .prepare(&st.sql)
            .map_err(|e| Error::database(ctx(), e))?;
        let mut rows = stmt
            .query(params_from_iter(st.params.iter().map(to_sql)))
            .map_err(|e| Error::database(ctx(), e))?;
        while let Some(r) = rows.next().map_err(|e| Error::database(ctx(), e))? {
            let mut i = 0;
            let mut next = || {
                let v = r.get_ref(i).map(from_sql);
                i += 1;
                v
            };
            let id = next().map_err(|e| Error::database(ctx(), e))?;
            let started = tz_time(next().map_err(|e| Error::database(ctx(), e))?);
            let heartbeat = match w.heartbeat_column {
                Some(_) => Some(tz_time(next().map_err(|e| Error::database(ctx(), e))?)),
                None => None,
            };
            let owner_raw = match w.owner_column {
                Some(_) => next().map_err(|e| Error::database(ctx(), e))?,
                None => SqlValue::Null,
            };
            let owner = owner_raw.clone().into_text();
            let attempts = match w.retry {
                Some(_) => Some(next().map_err(|e| Error::database(ctx(), e))?.into_count()),
                None => None,
            };
            let status = if sql::rows_have_status(sel) {
                next().map_err(|e| Error::database(ctx(), e))?
            } else {
                SqlValue::Text(w.running_value.clone())
            };
            each(StoredRow {
                status,
                row: RunningRow {
                    id,
                    started,
                    heartbeat,
                    owner,
                    owner_raw,
                    attempts,
                },
            })?;
        }
        Ok(())
    }

    fn row_columns(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<Vec<(String, SqlValue)>>> {
        let st = sql::columns_sql(&DIALECT, w, id);
        let ctx = || self.ctx(&format!("reading a row of {}", w.table));
        let mut stmt = self
            .conn
            .prepare(&st.sql)
            .map_err(|e| Error::database(ctx(), e))?;
        let names: Vec<String> = stmt.column_names().map(str::to_string).collect();
        let mut rows = stmt
            .query(params_from_iter(st.params.iter().map(to_sql)))
            .map_err(|e| Error::database(ctx(), e))?;
        let Some(r) = rows.next().map_err(|e| Error::database(ctx(), e))? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(names.len());
        for (i, name) in names.into_iter().enumerate() {
            let v = r
                .get_ref(i)
                .map(from_sql)
                .map_err(|e| Error::database(ctx(), e))?;
            out.push((name, v));
        }
        Ok(Some(out))
    }

    fn compare_and_set(
        &mut self,
        w: &Watch,
        schema: &Schema,
        c: &Change<'_>,
    ) -> Result<CasOutcome> {
        let st = sql::cas_sql(&DIALECT, w, schema, c);
        match self
            .conn
            .execute(&st.sql, params_from_iter(st.params.iter().map(to_sql)))
        {
            Ok(1) => Ok(CasOutcome::Applied),
            Ok(0) => Ok(CasOutcome::LostRace),
            Ok(n) => Ok(CasOutcome::Failed(format!(
                "the update matched {n} rows; {} is not unique",
                w.id_column
            ))),
            Err(e @ rusqlite::Error::SqliteFailure(..)) => {
                let code = e.sqlite_error_code();
                match code {
                    Some(
                        rusqlite::ErrorCode::DatabaseBusy
                        | rusqlite::ErrorCode::DatabaseLocked
                        | rusqlite::ErrorCode::ConstraintViolation,
                    ) => Ok(CasOutcome::Failed(e.to_string())),
                    _ => Err(Error::database(self.ctx("writing"), e)),
                }
            }
            Err(e) => Err(Error::database(self.ctx("writing"), e)),
        }
    }

    fn finished_rows(
        &mut self,
        w: &Watch,
        scope: History,
        each: &mut dyn FnMut(FinishedRow) -> Result<()>,
    ) -> Result<()> {
        let st = sql::finished_sql(&DIALECT, w, scope)?;
        let tz = self.tz;
        let tz_time = |raw| types::time_value(raw, None, tz, types::NaiveClock::Utc);
        let ctx = self.ctx(&format!("reading finished rows of {}", w.table));
        let mut stmt = self
            .conn
            .prepare(&st.sql)
            .map_err(|e| Error::database(&ctx, e))?;
        let mut rows = stmt
            .query(params_from_iter(st.params.iter().map(to_sql)))
            .map_err(|e| Error::database(&ctx, e))?;
        while let Some(r) = rows.next().map_err(|e| Error::database(&ctx, e))? {
            let get = |i| {
                r.get_ref(i)
                    .map(from_sql)
                    .map_err(|e| Error::database(&ctx, e))
            };
            let row = FinishedRow {
                id: get(0)?,
                started: tz_time(get(1)?),
                ended: tz_time(get(2)?),
                status: get(3)?.to_string(),
                marked: get(4)?.into_text(),
                matched: !sql::finished_has_match_cell(w, scope) || get(5)?.into_count() == 1,
            };
            if super::is_finished(w, &row) {
                each(row)?;
            }
        }
        Ok(())
    }

    fn begin_writes(&mut self) -> Result<bool> {
        // Takes the write lock now, waiting up to the busy timeout like any write; busy
        // after that: each compare-and-set tries on its own, as without a group.
        match self.conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => Ok(true),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(Error::database(self.ctx("beginning the writes"), e)),
        }
    }

    fn commit_writes(&mut self) -> Result<()> {
        self.conn.execute_batch("COMMIT").map_err(|e| {
            // Whatever SQLite left open is rolled back, so that nothing half-done stays.
            let _ = self.conn.execute_batch("ROLLBACK");
            Error::database(self.ctx("committing the writes"), e)
        })
    }

    fn count_parked(&mut self, w: &Watch, manual: &str) -> Result<u64> {
        let st = sql::parked_count_sql(&DIALECT, w, manual);
        let n: i64 = self
            .conn
            .query_row(
                &st.sql,
                params_from_iter(st.params.iter().map(to_sql)),
                |r| r.get(0),
            )
            .map_err(|e| {
                Error::database(self.ctx(&format!("counting parked rows of {}", w.table)), e)
            })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn parked_rows(&mut self, w: &Watch, manual: &str, limit: u32) -> Result<Vec<ParkedRow>> {
        let st = sql::parked_sql(&DIALECT, w, manual, limit);
        let tz = self.tz;
        let ctx = self.ctx(&format!("reading parked rows of {}", w.table));
        let mut stmt = self
            .conn
            .prepare(&st.sql)
            .map_err(|e| Error::database(&ctx, e))?;
        let rows = stmt
            .query_map(params_from_iter(st.params.iter().map(to_sql)), |r| {
                Ok(ParkedRow {
                    id: from_sql(r.get_ref(0)?),
                    started: types::time_value(
                        from_sql(r.get_ref(1)?),
                        None,
                        tz,
                        types::NaiveClock::Utc,
                    ),
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| Error::database(&ctx, e))?;
        Ok(rows)
    }

    fn current_row(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<CurrentRow>> {
        let st = sql::current_sql(&DIALECT, w, id);
        let ctx = self.ctx(&format!("reading a row of {}", w.table));
        let mut stmt = self
            .conn
            .prepare(&st.sql)
            .map_err(|e| Error::database(&ctx, e))?;
        let mut rows = stmt
            .query(params_from_iter(st.params.iter().map(to_sql)))
            .map_err(|e| Error::database(&ctx, e))?;
        let Some(r) = rows.next().map_err(|e| Error::database(&ctx, e))? else {
            return Ok(None);
        };
        let get = |i| {
            r.get_ref(i)
                .map(from_sql)
                .map_err(|e| Error::database(&ctx, e))
        };
        Ok(Some(CurrentRow {
            status: get(0)?,
            started: get(1)?,
            message: w.message_column.as_ref().map(|_| get(2)).transpose()?,
        }))
    }
}

impl Introspect for SqliteStore {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn describe_server(&mut self) -> Result<String> {
        Ok(format!("sqlite {}", rusqlite::version()))
    }

    fn connection(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    fn schema(&mut self, w: &Watch) -> Result<Schema> {
        let info = self.table_info(w)?;
        if info.is_empty() {
            return Err(Error::Schema {
                watch: w.name.clone(),
                problem: SchemaProblem::NoTable {
                    table: w.table.to_string(),
                    place: self.path.display().to_string(),
                },
            });
        }
        let primary: Vec<&String> = info
            .iter()
            .filter(|(_, _, pk)| *pk > 0)
            .map(|(n, _, _)| n)
            .collect();
        let id_is_primary =
            primary.len() == 1 && primary[0].eq_ignore_ascii_case(w.id_column.name());
        let columns = info
            .iter()
            .map(|(n, t, _)| (n.to_ascii_lowercase(), Column::declared(t)))
            .collect();
        types::schema(w, &DIALECT, self.tz, columns, id_is_primary)
    }

    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan> {
        let st = sql::running_sql(&DIALECT, w);
        let ctx = || self.ctx("EXPLAIN QUERY PLAN of the running-rows query");
        let mut stmt = self
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", st.sql))
            .map_err(|e| Error::database(ctx(), e))?;
        let details: Vec<String> = stmt
            .query_map(params_from_iter(st.params.iter().map(to_sql)), |r| {
                r.get::<_, String>(3)
            })
            .and_then(|rows| rows.collect())
            .map_err(|e| Error::database(ctx(), e))?;
        let mut plan = plan_of(&details);
        // A scan reads every row: about as many as the largest rowid (one look at the end
        // of the table's b-tree; none for a table WITHOUT ROWID), so doctor can word the
        // cost by the table's size.
        if plan.index.is_none() {
            plan.rows = self
                .conn
                .query_row(
                    &format!("SELECT MAX(rowid) FROM {}", w.table.quoted('"')),
                    [],
                    |r| r.get::<_, Option<i64>>(0),
                )
                .ok()
                .map(|n| u64::try_from(n.unwrap_or(0)).unwrap_or(0));
        }
        Ok(plan)
    }

    fn session_time_zone(&mut self) -> Result<String> {
        Ok("UTC (SQLite's 'now')".into())
    }
}

impl Coordination for SqliteStore {
    fn try_watch_lock(&mut self, _w: &Watch, _host: Option<&str>) -> Result<bool> {
        // A SQLite database lives on one host; selfheal's run lock already serialises runs.
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut store = SqliteStore::open(&db, None, true).expect("open");
        let e = store
            .running_rows(&cfg.watches[0])
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
        let missing = SqliteStore::open(&dir.path().join("missing.db"), None, true)
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
