//! The job table, behind one small trait with one implementation per database, chosen by
//! the URL's scheme. Adapters read running rows, describe the schema, and apply one
//! compare-and-set per row; they never print and never decide.
//!
//! Guarantee shared by every adapter: [`Store::compare_and_set`] changes at most one row,
//! and only if it still has the running status, the start value and the heartbeat-column
//! value selfheal observed (SPEC §6). Values are always bound parameters; identifiers are
//! validated [`Ident`](crate::config::Ident)s.

pub mod credentials;
pub mod mysql;
pub mod sqlite;

use std::collections::HashMap;
use std::fmt;

use chrono::NaiveDateTime;

use crate::clock::{DbClock, Stamp};
use crate::config::{Database, DbUrl, Watch};
use crate::error::Result;

/// A value as read from, and bound back to, the database.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
    DateTime(NaiveDateTime),
}

impl SqlValue {
    pub fn is_null(&self) -> bool {
        matches!(self, SqlValue::Null)
    }

    /// JSON form of an id: a number when it is one, else a string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            SqlValue::Int(i) => (*i).into(),
            SqlValue::UInt(u) => (*u).into(),
            SqlValue::Null => serde_json::Value::Null,
            other => other.to_string().into(),
        }
    }

    /// The owner column's text; NULL is no owner.
    pub fn into_text(self) -> Option<String> {
        match self {
            SqlValue::Null => None,
            other => Some(other.to_string()),
        }
    }

    /// The attempts column as a count: integers as they are, numeric text parsed, anything
    /// else (NULL, garbage) 0.
    pub fn into_count(self) -> i64 {
        match self {
            SqlValue::Int(i) => i,
            SqlValue::UInt(u) => i64::try_from(u).unwrap_or(i64::MAX),
            SqlValue::Text(t) => t.trim().parse().unwrap_or(0),
            _ => 0,
        }
    }
}

impl fmt::Display for SqlValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlValue::Null => f.write_str("NULL"),
            SqlValue::Int(i) => write!(f, "{i}"),
            SqlValue::UInt(u) => write!(f, "{u}"),
            SqlValue::Float(x) => write!(f, "{x}"),
            SqlValue::Text(s) => f.write_str(s),
            SqlValue::Bytes(b) => f.write_str(&String::from_utf8_lossy(b)),
            SqlValue::DateTime(d) => write!(f, "{}", d.format("%Y-%m-%d %H:%M:%S%.f")),
        }
    }
}

/// A time column's value: as read (for the compare-and-set) and as understood.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeValue {
    pub raw: SqlValue,
    /// `Ok(None)` for NULL; `Err` when the value is not a time at all.
    pub stamp: Result<Option<Stamp>, String>,
}

/// One row in the running state.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningRow {
    pub id: SqlValue,
    pub started: TimeValue,
    /// Present when the watch has a heartbeat column.
    pub heartbeat: Option<TimeValue>,
    /// The owner column's text, when configured and not NULL.
    pub owner: Option<String>,
    /// The attempts column (NULL reads as 0), when the watch has a retry budget.
    pub attempts: Option<i64>,
}

/// One finished row (not in the running state, start and end both set), for runtimes.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRow {
    pub id: SqlValue,
    pub started: TimeValue,
    pub ended: TimeValue,
    pub status: String,
    /// The message column, only when it starts with selfheal's prefix (the database
    /// filters, so ordinary messages never cross the wire).
    pub marked: Option<String>,
}

/// Which finished rows to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Every finished row: `selfheal stats`, which reads the table once, streaming.
    All,
    /// Among the latest `n` rows by id (whatever their status), the finished ones. Bounded
    /// work whatever the table's size, for the `max_age` warning of every `check`.
    Latest(u32),
}

/// How the end time is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The database's `NOW()` (or SQLite's `datetime('now')`, UTC).
    DbNow,
    /// Integer unix seconds.
    Epoch,
    /// Naive local time in the configured zone (the way the application writes it).
    Zone(chrono_tz::Tz),
}

/// What selfheal learned about a watch's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Longest message the message column accepts, in characters.
    pub message_max: Option<usize>,
    pub ended: Option<Ended>,
    /// Column name → lowercase declared/data type.
    pub types: HashMap<String, String>,
    /// The id column alone is the primary key: the compare-and-set is forced through it,
    /// so it locks the row the way the worker's own `UPDATE … WHERE id = ?` does and the
    /// two can never deadlock through the status index.
    pub id_is_primary: bool,
}

/// A row as it is now, for settling the intents of a stopped run.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentRow {
    pub status: SqlValue,
    pub started: SqlValue,
    /// The message column, when the watch has one.
    pub message: Option<SqlValue>,
}

/// A session on a database server: its connection id, and when the server started (unix
/// seconds), since connection ids start again from 1 when a server restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Session {
    pub connection: u64,
    pub server_started: i64,
}

/// One compare-and-set.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    pub row: &'a RunningRow,
    pub new_status: &'a str,
    /// Already cut to the column's length.
    pub message: Option<String>,
    /// Raise the attempts column by one (a reclaim to the retry queue).
    pub bump_attempts: bool,
}

/// Result of one compare-and-set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CasOutcome {
    Applied,
    /// 0 rows matched: the row finished, beat or restarted in the meantime.
    LostRace,
    /// The statement failed for this row (e.g. a lock wait timeout); the run goes on.
    Failed(String),
    /// Only inside a group of writes ([`Store::begin_writes`]): another transaction holds
    /// the row, and selfheal does not wait while it holds the group's rows. Nothing was
    /// done; the caller commits the group and tries the row on its own.
    Busy,
}

pub trait Store {
    /// `"mysql"`/`"mariadb"`/`"sqlite"` and a version.
    fn describe_server(&mut self) -> Result<String>;
    /// What was connected to and how (never a password), for `doctor` and messages.
    fn connection(&self) -> String;
    /// Things an operator should know about the connection (an option file skipped, …).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The database clock, read once per run.
    fn clock(&mut self) -> Result<DbClock>;
    /// Checks that the table and every configured column exist.
    fn schema(&mut self, w: &Watch) -> Result<Schema>;
    /// Streams every row in the running state, ordered by id, to `each`, one at a time as
    /// it comes off the wire: the adapter holds no more than one row. An error from `each`
    /// stops the stream and is returned.
    fn each_running_row(
        &mut self,
        w: &Watch,
        each: &mut dyn FnMut(RunningRow) -> Result<()>,
    ) -> Result<()>;
    /// Every row in the running state, ordered by id, in memory (for `doctor`).
    fn running_rows(&mut self, w: &Watch) -> Result<Vec<RunningRow>> {
        let mut out = Vec::new();
        self.each_running_row(w, &mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }
    /// How the database finds running rows: the plan of the very `SELECT` that
    /// [`Store::running_rows`] runs (for `doctor`).
    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan>;
    /// The session's time zone, in words (for `doctor`).
    fn session_time_zone(&mut self) -> Result<String>;
    /// One compare-and-set (SPEC §6). Connection-level failures are `Err`.
    fn compare_and_set(&mut self, w: &Watch, schema: &Schema, c: &Change<'_>)
    -> Result<CasOutcome>;
    /// Streams the watch's finished rows (`status <> running_value`, start and end column
    /// not NULL) to `each`, one at a time: memory does not grow with the table. Needs
    /// `ended_column`. An error from `each` stops the stream and is returned.
    fn finished_rows(
        &mut self,
        w: &Watch,
        scope: History,
        each: &mut dyn FnMut(FinishedRow) -> Result<()>,
    ) -> Result<()>;
    /// Opens a group of compare-and-sets that commit together: one commit (one sync of
    /// the database) instead of one per row. SQLite: `BEGIN IMMEDIATE`. MySQL: a
    /// transaction in which a compare-and-set never waits for a row lock (it answers
    /// [`CasOutcome::Busy`] instead), so that selfheal never waits while holding rows and
    /// can never deadlock with the application. `Ok(false)`: no group; each
    /// compare-and-set commits on its own.
    fn begin_writes(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// Commits the group [`Store::begin_writes`] opened; afterwards each compare-and-set
    /// commits on its own again, waiting for row locks as usual. `Err`: nothing of the
    /// group was applied.
    fn commit_writes(&mut self) -> Result<()> {
        Ok(())
    }
    /// The row with this id as it is now (`None`: no such row).
    fn current_row(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<CurrentRow>>;
    /// This connection on the server, recorded with a run's intents: a stopped run's last
    /// statement may still be running there.
    fn session(&mut self) -> Option<Session> {
        None
    }
    /// Ends server session `s` if it still exists (a statement of a stopped run may wait
    /// on a row lock and apply later) and waits, bounded, until it is gone. `false`: it is
    /// still there.
    fn end_session(&mut self, _s: &Session) -> Result<bool> {
        Ok(true)
    }
    /// Takes the per-watch advisory lock that keeps several hosts from acting on one watch
    /// at once (`GET_LOCK` on MySQL). `false`: another run holds it.
    fn try_watch_lock(&mut self, w: &Watch) -> Result<bool>;
}

/// Opens the store a URL names. `read_only` is a promise that nothing will be written
/// (dry runs); adapters may open accordingly.
pub fn open(db: &Database, read_only: bool) -> Result<Box<dyn Store>> {
    match &db.url {
        DbUrl::Sqlite(path) => Ok(Box::new(sqlite::SqliteStore::open(
            path,
            db.timezone,
            read_only,
        )?)),
        DbUrl::Mysql(_) => Ok(Box::new(mysql::MysqlStore::connect(db)?)),
    }
}

/// How a database reads the running rows of a watch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanPlan {
    /// The index used to find running rows, if any.
    pub index: Option<String>,
    /// Indexes the database could have used (MySQL `possible_keys`).
    pub candidates: Vec<String>,
    /// Rows the database expects to examine (MySQL), when it says.
    pub rows: Option<u64>,
    /// The plan in the database's own words.
    pub detail: String,
}

/// The `SELECT` of running rows both adapters run (and `doctor` explains): quoting and
/// the placeholder differ per database.
pub(crate) fn running_sql(w: &Watch, q: char, placeholder: &str) -> String {
    format!(
        "SELECT {} FROM {} WHERE {} = {placeholder} ORDER BY {}",
        select_columns(w)
            .iter()
            .map(|c| c.quoted(q))
            .collect::<Vec<_>>()
            .join(", "),
        w.table.quoted(q),
        w.status_column.quoted(q),
        w.id_column.quoted(q),
    )
}

/// The `SELECT` of one row by id for [`Store::current_row`]: status, start, message.
pub(crate) fn current_sql(w: &Watch, q: char, placeholder: &str) -> String {
    format!(
        "SELECT {}, {}, {} FROM {} WHERE {} = {placeholder}",
        w.status_column.quoted(q),
        w.started_column.quoted(q),
        w.message_column
            .as_ref()
            .map_or("NULL".to_string(), |m| m.quoted(q)),
        w.table.quoted(q),
        w.id_column.quoted(q),
    )
}

/// The column list every adapter selects, in order.
pub(crate) fn select_columns(w: &Watch) -> Vec<&crate::config::Ident> {
    let mut cols = vec![&w.id_column, &w.started_column];
    cols.extend(w.heartbeat_column.as_ref());
    cols.extend(w.owner_column.as_ref());
    cols.extend(w.retry.as_ref().map(|r| &r.attempts_column));
    cols
}

/// Every column a watch names, with the key that names it (for schema errors).
pub(crate) fn named_columns(w: &Watch) -> Vec<(&'static str, &crate::config::Ident)> {
    let mut v = vec![
        ("id_column", &w.id_column),
        ("status_column", &w.status_column),
        ("started_column", &w.started_column),
    ];
    let opt = [
        ("heartbeat_column", w.heartbeat_column.as_ref()),
        ("ended_column", w.ended_column.as_ref()),
        ("message_column", w.message_column.as_ref()),
        ("owner_column", w.owner_column.as_ref()),
        (
            "attempts_column",
            w.retry.as_ref().map(|r| &r.attempts_column),
        ),
    ];
    v.extend(opt.into_iter().filter_map(|(k, c)| c.map(|c| (k, c))));
    v
}

/// The `SELECT` of finished rows both adapters run: columns id, start, end, status and the
/// message when it carries selfheal's prefix (`NULL` otherwise).
pub(crate) struct FinishedSql {
    pub sql: String,
    /// Bind the running value after the prefix pattern (the `WHERE` of [`History::All`]).
    pub binds_running: bool,
}

/// [`History::All`] filters in the database and streams. [`History::Latest`] reads the
/// latest rows through the id's index with no `WHERE` at all, and the caller keeps the
/// finished ones ([`is_finished`]): a `WHERE … ORDER BY id DESC LIMIT n` would scan the
/// whole table when few rows match, and a derived table is materialised (measured: ~15 ms
/// against ~1 ms for 1000 rows of a 1,000,000-row MariaDB table).
pub(crate) fn finished_sql(w: &Watch, scope: History, q: char) -> Result<FinishedSql> {
    let Some(ended) = &w.ended_column else {
        return Err(crate::error::Error::Schema {
            watch: w.name.clone(),
            message: "ended_column is not set: runtimes cannot be measured".into(),
        });
    };
    let (id, st, s, e) = (
        w.id_column.quoted(q),
        w.status_column.quoted(q),
        w.started_column.quoted(q),
        ended.quoted(q),
    );
    let msg = match &w.message_column {
        Some(m) => format!("CASE WHEN {} LIKE ? THEN {} END", m.quoted(q), m.quoted(q)),
        // Keeps the parameters the same either way.
        None => "CASE WHEN ? IS NULL THEN NULL END".into(),
    };
    let select = format!(
        "SELECT {id}, {s}, {e}, {st}, {msg} FROM {}",
        w.table.quoted(q)
    );
    Ok(match scope {
        History::All => FinishedSql {
            sql: format!("{select} WHERE {st} <> ? AND {s} IS NOT NULL AND {e} IS NOT NULL"),
            binds_running: true,
        },
        History::Latest(n) => FinishedSql {
            sql: format!("{select} ORDER BY {id} DESC LIMIT {n}"),
            binds_running: false,
        },
    })
}

/// True for a row that is finished: not running, start and end both set.
pub(crate) fn is_finished(w: &Watch, r: &FinishedRow) -> bool {
    r.status != w.running_value && !r.started.raw.is_null() && !r.ended.raw.is_null()
}

/// The `LIKE` pattern for selfheal's message prefix.
pub(crate) fn marked_pattern() -> String {
    format!("{}%", crate::message::MESSAGE_PREFIX)
}

/// The `UPDATE` both adapters run, differing only in quoting, the null-safe equality
/// operator and the end-time expression.
pub(crate) struct CasSql {
    pub sql: String,
}

pub(crate) fn cas_sql(
    w: &Watch,
    c: &Change<'_>,
    q: char,
    null_safe_eq: &str,
    ended_expr: Option<&str>,
    index_hint: &str,
) -> CasSql {
    let mut set = vec![format!("{} = ?", w.status_column.quoted(q))];
    if let (Some(col), Some(expr)) = (&w.ended_column, ended_expr) {
        set.push(format!("{} = {expr}", col.quoted(q)));
    }
    if let (Some(col), Some(_)) = (&w.message_column, &c.message) {
        set.push(format!("{} = ?", col.quoted(q)));
    }
    if let (Some(r), true) = (&w.retry, c.bump_attempts) {
        let a = r.attempts_column.quoted(q);
        set.push(format!("{a} = COALESCE({a}, 0) + 1"));
    }
    let mut cond = vec![
        format!("{} = ?", w.id_column.quoted(q)),
        format!("{} = ?", w.status_column.quoted(q)),
        format!("{} {null_safe_eq} ?", w.started_column.quoted(q)),
    ];
    if let Some(hb) = &w.heartbeat_column {
        cond.push(format!("{} {null_safe_eq} ?", hb.quoted(q)));
    }
    CasSql {
        sql: format!(
            "UPDATE {}{index_hint} SET {} WHERE {}",
            w.table.quoted(q),
            set.join(", "),
            cond.join(" AND ")
        ),
    }
}

/// Bound parameters for [`cas_sql`], in order: SET values (status, ended offset, message),
/// then WHERE values (id, running status, observed start, observed heartbeat).
pub(crate) fn cas_params(
    w: &Watch,
    c: &Change<'_>,
    ended_param: Option<SqlValue>,
) -> Vec<SqlValue> {
    let mut p = vec![SqlValue::Text(c.new_status.to_string())];
    if w.ended_column.is_some()
        && let Some(v) = ended_param
    {
        p.push(v);
    }
    if let (Some(_), Some(m)) = (&w.message_column, &c.message) {
        p.push(SqlValue::Text(m.clone()));
    }
    p.push(c.row.id.clone());
    p.push(SqlValue::Text(w.running_value.clone()));
    p.push(c.row.started.raw.clone());
    if let Some(hb) = &c.row.heartbeat {
        p.push(hb.raw.clone());
    }
    p
}

/// Offset in seconds of `tz` from UTC right now, for writing naive local end times.
pub(crate) fn zone_offset_now(tz: chrono_tz::Tz) -> i64 {
    use chrono::Offset;
    let now = chrono::Utc::now().with_timezone(&tz);
    i64::from(now.offset().fix().local_minus_utc())
}

#[cfg(test)]
mod tests {
    use super::SqlValue;

    #[test]
    fn an_attempts_cell_reads_as_a_count() {
        assert_eq!(SqlValue::Int(3).into_count(), 3);
        assert_eq!(SqlValue::UInt(4).into_count(), 4);
        assert_eq!(SqlValue::UInt(u64::MAX).into_count(), i64::MAX);
        assert_eq!(SqlValue::Text(" 5 ".into()).into_count(), 5);
        assert_eq!(SqlValue::Text("five".into()).into_count(), 0);
        assert_eq!(SqlValue::Null.into_count(), 0);
        assert_eq!(SqlValue::Float(2.0).into_count(), 0);
    }

    #[test]
    fn an_owner_cell_reads_as_text_and_null_as_none() {
        assert_eq!(SqlValue::Null.into_text(), None);
        assert_eq!(
            SqlValue::Text("web1:42".into()).into_text().as_deref(),
            Some("web1:42")
        );
        assert_eq!(SqlValue::Int(42).into_text().as_deref(), Some("42"));
    }
}
