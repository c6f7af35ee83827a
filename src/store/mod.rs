//! The database behind selfheal: one driver per database, chosen by the URL's scheme, and
//! the job table written once above the drivers. It reads running rows, describes the
//! schema, and applies one compare-and-set per row; it never prints and never decides.
//!
//! Three traits, one per concern, bundled for callers as [`Store`] (what [`open`] returns;
//! every method is callable on a `&mut dyn Store` with only `Store` in scope):
//! - [`JobTable`]: running rows (and parked rows, or one row by id, read the same way:
//!   [`Select`]), the compare-and-set — the one statement through which selfheal writes a
//!   row, from whatever status it was observed in —, finished rows, a row as it is now and
//!   every column of it, the rows parked in `manual_value`, groups of writes, the database
//!   clock (`check`, recovery, `stats`, `doctor`, `show`, `resolve`);
//! - [`Introspect`]: the server, how it was reached, the schema, the plan of the running-rows
//!   query, the session's time zone (`doctor`; `check` reads the schema);
//! - [`Coordination`]: server sessions of stopped runs, the per-watch advisory lock
//!   (`GET_LOCK` on MySQL, `pg_try_advisory_lock` on PostgreSQL).
//!
//! The layers: a [`driver::Driver`] connects, runs a query and hands over its rows cell by
//! cell, runs a write and says what became of it, and classifies its errors;
//! [`table::SqlStore`] implements [`JobTable`] once over any driver — each statement built
//! by [`sql`] in the driver's [`Dialect`], each row decoded into the store's types there.
//! What a column's type means and the schema checks are in [`types`]. A database's
//! [`Introspect`] and [`Coordination`] (`GET_LOCK`, `EXPLAIN`, …) are implemented for
//! `SqlStore<ItsDriver>` next to its driver.
//!
//! A new database goes in exactly these places, nothing else (PostgreSQL, the third, is
//! the example: [`postgres`]):
//! 1. a driver file `store/<name>.rs` (with `pub mod <name>;` here): its `DIALECT` const
//!    (its SQL, placeholders, clock and schema statements, [`sql::SchemaSql`]); a type
//!    implementing [`driver::Driver`]; [`Introspect`] and [`Coordination`] for
//!    `SqlStore<ThatType>`; `impl DbCause` for its driver's error type; its column types
//!    (a [`Column`] built there, or names in [`types`]); its credentials where they are
//!    not MySQL's; its [`survey::SurveySql`] (and its line `survey_with!` in [`survey`]);
//! 2. its URL scheme (config): a variant of [`DbUrl`], its parsing in `DbUrl::parse`, and
//!    its arm in `DbUrl`'s `whereabouts` (a file or a server: what its identity and label
//!    are made from) — and an arm wherever a URL is written back (`init`'s `url_text`);
//! 3. its dispatch: an arm where a URL's scheme picks its driver (`driver_for`);
//! 4. its driver crate: a dependency in `Cargo.toml` (rustls, never OpenSSL; glibc 2.17:
//!    docs/design.md#packaging).
//!
//! What a person is shown in SQL (`doctor`'s `ALTER`/`CREATE INDEX`/`ANALYZE`, the holder
//! of a busy watch's lock) is MySQL's by default; a database whose SQL differs says its
//! own through the optional methods of [`Introspect`] and [`Coordination`], in its driver
//! file. A driver whose server writes naive times in a zone it knows says so
//! ([`driver::Driver::naive_zone`]).
//!
//! Guarantee shared by every database: [`JobTable::compare_and_set`] changes at most one
//! row, and only if it still has the status (the running status for `check`), the start,
//! owner and heartbeat-column values selfheal observed (docs/design.md#writes; an un-park leaves the
//! heartbeat column out, since it is made because the row beats again), and never moves a
//! start, heartbeat, end or retry time the watch names that the table declares `ON UPDATE
//! CURRENT_TIMESTAMP` (read by [`Introspect::schema`]) unless it sets it. Values are always
//! bound parameters; identifiers are validated [`Ident`](crate::config::Ident)s.
//!
//! I/O: the drivers talk to their database (and `credentials` reads password and option
//! files); this module, [`sql`], [`table`] (but through its driver) and [`types`] do none.

pub mod credentials;
pub mod driver;
pub mod mycnf;
pub mod mysql;
pub mod postgres;
pub mod sql;
pub mod sqlite;
pub mod survey;
pub mod table;
pub mod types;

use std::collections::HashMap;
use std::fmt;

use chrono::NaiveDateTime;

use crate::clock::{DbClock, Stamp};
use crate::config::{Database, DbUrl, Ident, Watch};
use crate::error::{Error, Result};
use crate::holder_line::NamedHolder;

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
            SqlValue::DateTime(d) => write_datetime(f, d),
        }
    }
}

/// `d` as `%Y-%m-%d %H:%M:%S%.f` writes it (the fraction in 3, 6 or 9 digits, none when
/// whole), without the format string's parsing: every time cell of every row is written
/// so, for its key and its journal line.
fn write_datetime(f: &mut fmt::Formatter<'_>, d: &NaiveDateTime) -> fmt::Result {
    use chrono::{Datelike, Timelike};
    // A year of other than four digits, a leap second: as chrono writes them.
    if !(0..=9999).contains(&d.year()) || d.nanosecond() >= 1_000_000_000 {
        return write!(f, "{}", d.format("%Y-%m-%d %H:%M:%S%.f"));
    }
    // Digits into a buffer, not through the formatting machinery: this runs several times
    // for every running row.
    let mut buf = [0u8; 29];
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, d.year().unsigned_abs());
    put(5, 2, d.month());
    put(8, 2, d.day());
    put(11, 2, d.hour());
    put(14, 2, d.minute());
    put(17, 2, d.second());
    let len = match d.nanosecond() {
        0 => 19,
        n if n % 1_000_000 == 0 => {
            put(20, 3, n / 1_000_000);
            23
        }
        n if n % 1_000 == 0 => {
            put(20, 6, n / 1_000);
            26
        }
        n => {
            put(20, 9, n);
            29
        }
    };
    for (i, c) in [
        (4, b'-'),
        (7, b'-'),
        (10, b' '),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ] {
        buf[i] = c;
    }
    f.write_str(std::str::from_utf8(&buf[..len]).map_err(|_| fmt::Error)?)
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
    /// The owner column's value as read (NULL without one), for the compare-and-set.
    pub owner_raw: SqlValue,
    /// The attempts column (NULL reads as 0), when the watch has a retry budget.
    pub attempts: Option<i64>,
    /// The text of each column the `db_lock` templates read (`Watch::lock_columns`, in
    /// that order; `None`: NULL).
    pub lock_values: Vec<Option<String>>,
    /// The owner's host and pid columns as read (`owner_host_column`,
    /// `owner_pid_column`), for the compare-and-set.
    pub owner_split_raw: Option<(SqlValue, SqlValue)>,
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
    /// The row is the watch's (its `match`, as the database compared it); always true
    /// where the database filtered.
    pub matched: bool,
}

/// A row parked in `manual_value`: a person owes it a look.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedRow {
    pub id: SqlValue,
    pub started: TimeValue,
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
    Zone(crate::zone::Zone),
}

/// What selfheal learned about a watch's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Longest message the message column accepts, in characters.
    pub message_max: Option<usize>,
    pub ended: Option<Ended>,
    /// How `retry_at_column` is written, where the watch has one (as an end time is:
    /// [`types::ended_for`]).
    pub retry_at: Option<Ended>,
    /// Every column of the table, by lowercase name.
    pub columns: HashMap<String, Column>,
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

/// The server session that holds a watch's advisory lock (not the job's lock file, whose
/// holder is [`crate::evidence::LockHolder`]): the lock's name, the holder's connection id
/// (`IS_USED_LOCK`) and, where the server shows them to this account, its user and host
/// (`information_schema.PROCESSLIST`; without the PROCESS privilege an account sees only
/// its own connections).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvisoryLockHolder {
    pub lock: String,
    pub connection: u64,
    pub user: Option<String>,
    pub host: Option<String>,
}

/// One compare-and-set: every write selfheal makes to a row, whoever asks for it — a
/// reclaim or a park by `check`, an un-park, a person's decision (`selfheal resolve`).
#[derive(Debug, Clone)]
pub struct Change<'a> {
    pub row: &'a RunningRow,
    /// The status the row was observed in, which it must still have: `running_value`
    /// for `check`'s reclaims and parks, `manual_value` for an un-park, either for a
    /// person's decision.
    pub from_status: &'a str,
    pub new_status: &'a str,
    /// Already cut to the column's length.
    pub message: Option<String>,
    /// Raise the attempts column by one (a reclaim to the retry queue).
    pub bump_attempts: bool,
    /// Set `ended_column`: the row is marked dead or retried. Never for a row parked in
    /// `manual_value` (docs/design.md#writes): its worker may still be running, and `stats` would count
    /// it as finished.
    pub set_ended: bool,
    /// Set `retry_at_column` (where the watch has one) to the database's now plus this
    /// many seconds: the backoff of a reclaim, 0 for a person's retry (docs/design.md#lease).
    pub retry_at: Option<u64>,
    /// Also match the heartbeat column's observed value (every change but an un-park,
    /// which is made because the row beats again: its heartbeat moves on by design).
    pub match_heartbeat: bool,
}

/// Which of a watch's rows a read selects (its `match` always applies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Select<'a> {
    /// The running rows, by id (what `check` judges), or a page of them.
    Running(sql::Page<'a>),
    /// The first `limit` rows with this status, by id (the rows parked in `manual_value`).
    Status(&'a str, u32),
    /// The row with this id, whatever its status.
    Id(&'a SqlValue),
}

impl Select<'_> {
    /// What is read, for messages ("reading parked rows of sync_log").
    pub fn what(&self) -> &'static str {
        match self {
            Select::Running(_) => "running rows",
            Select::Status(..) => "parked rows",
            Select::Id(_) => "a row",
        }
    }
}

/// How many running rows a page holds: what a command keeps of a backlog at once
/// (docs/design.md#paging).
pub const PAGE: usize = 5_000;

/// Reads the watch's running rows a page at a time (keyset on the id), each page read to
/// its end before `each` gets it, so that `each` may write between pages; stops when
/// `each` says so.
pub fn pages(
    w: &Watch,
    store: &mut dyn Store,
    mut each: impl FnMut(&mut dyn Store, Vec<RunningRow>) -> Result<bool>,
) -> Result<()> {
    let mut after: Option<SqlValue> = None;
    loop {
        let mut page = Vec::with_capacity(PAGE.min(1_024));
        store.each_running_row_in(
            w,
            sql::Page {
                after: after.as_ref(),
                limit: Some(PAGE),
                index: None,
            },
            &mut |row| {
                page.push(row);
                Ok(())
            },
        )?;
        let full = page.len() == PAGE;
        after = page.last().map(|r| r.id.clone());
        if page.is_empty() || !each(store, page)? || !full {
            return Ok(());
        }
    }
}

/// A row as [`JobTable::each_row`] reads it: the columns a running row is judged by,
/// and its status.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRow {
    pub status: SqlValue,
    pub row: RunningRow,
}

/// Result of one compare-and-set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CasOutcome {
    Applied,
    /// 0 rows matched: the row finished, beat or restarted in the meantime.
    LostRace,
    /// The statement failed for this row (e.g. a lock wait timeout); the run goes on.
    Failed(String),
    /// Only inside a group of writes ([`JobTable::begin_writes`]): another transaction holds
    /// the row, and selfheal does not wait while it holds the group's rows. Nothing was
    /// done; the caller commits the group and tries the row on its own.
    Busy,
}

/// The refusal of a database that has no named locks (a configuration naming `db_lock`
/// on it is refused before this is reached).
fn no_named_locks() -> Error {
    Error::Usage(crate::error::Usage::Other(
        "db_lock: this database has no named locks (MySQL/MariaDB's GET_LOCK)".into(),
    ))
}

/// The job table: reading running and finished rows, the compare-and-set, a row as it is
/// now, groups of writes, and the database clock. What `check`, recovery and `stats` use.
pub trait JobTable {
    /// The database clock, read once per run.
    fn clock(&mut self) -> Result<DbClock>;
    /// Streams the rows `sel` selects, ordered by id, to `each`, one at a time as they
    /// come off the wire: the store holds no more than one row. An error from `each`
    /// stops the stream and is returned. The status is read for [`Select::Status`] and
    /// [`Select::Id`]; for [`Select::Running`] it is the running value.
    fn each_row(
        &mut self,
        w: &Watch,
        sel: Select<'_>,
        each: &mut dyn FnMut(StoredRow) -> Result<()>,
    ) -> Result<()>;
    /// Streams every row in the running state, ordered by id, to `each`, one at a time as
    /// it comes off the wire: the store holds no more than one row. An error from `each`
    /// stops the stream and is returned.
    fn each_running_row(
        &mut self,
        w: &Watch,
        each: &mut dyn FnMut(RunningRow) -> Result<()>,
    ) -> Result<()> {
        self.each_running_row_in(w, sql::Page::default(), each)
    }
    /// [`JobTable::each_running_row`] for one page (keyset on the id: the first `limit`
    /// rows after an id). The statement is read to its end before this returns, so the
    /// connection is free for writes between pages.
    fn each_running_row_in(
        &mut self,
        w: &Watch,
        page: sql::Page<'_>,
        each: &mut dyn FnMut(RunningRow) -> Result<()>,
    ) -> Result<()> {
        self.each_row(w, Select::Running(page), &mut |r| each(r.row))
    }
    /// The row with this id as the watch sees it (its `match` applies), whatever its
    /// status; `None`: no such row.
    fn row_by_id(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<StoredRow>> {
        let mut found = None;
        self.each_row(w, Select::Id(id), &mut |r| {
            found.get_or_insert(r);
            Ok(())
        })?;
        Ok(found)
    }
    /// Every column of the row with this id, as the table holds them, in the table's
    /// order (`SELECT *`); `None`: no such row. For a person (`selfheal show`).
    fn row_columns(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<Vec<(String, SqlValue)>>>;
    /// The connection's database: what `{database}` fills in a `db_lock` template.
    fn lock_database(&mut self) -> Result<String> {
        Err(no_named_locks())
    }
    /// Who holds each of these named locks, in order (`None`: nobody), in one round trip
    /// per page of names (`docs/design.md#named-lock`). Takes no lock.
    fn named_locks(&mut self, _names: &[String]) -> Result<Vec<Option<NamedHolder>>> {
        Err(no_named_locks())
    }
    /// One compare-and-set (docs/design.md#cas). Connection-level failures are `Err`.
    fn compare_and_set(&mut self, w: &Watch, schema: &Schema, c: &Change<'_>)
    -> Result<CasOutcome>;
    /// Several compare-and-sets at the start of a group of writes
    /// ([`JobTable::begin_writes`]) made as one, each with its outcome, in order: on MySQL
    /// one `UPDATE` whose `WHERE` is every row's own compare-and-set, taken when it wrote
    /// every row, undone when it did not (a row moved on: which, only the rows could say),
    /// not one round trip per row. `Ok(None)`: nothing was written (a row moved on, one is
    /// locked by another transaction, or the database has no such thing) — the caller
    /// makes them one by one.
    fn compare_and_set_group(
        &mut self,
        _w: &Watch,
        _schema: &Schema,
        _changes: &[Change<'_>],
    ) -> Result<Option<Vec<CasOutcome>>> {
        Ok(None)
    }
    /// True when [`JobTable::compare_and_set_group`] is worth trying (it saves round trips
    /// to a server; SQLite's compare-and-sets cost no round trip).
    fn groups_compare_and_sets(&self) -> bool {
        false
    }
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
    /// Commits the group [`JobTable::begin_writes`] opened; afterwards each compare-and-set
    /// commits on its own again, waiting for row locks as usual. `Err`: nothing of the
    /// group was applied.
    fn commit_writes(&mut self) -> Result<()> {
        Ok(())
    }
    /// Undoes the group [`JobTable::begin_writes`] opened and closes it: nothing of it is
    /// applied; afterwards each compare-and-set commits on its own again.
    fn abandon_writes(&mut self) -> Result<()> {
        Ok(())
    }
    /// The row with this id as it is now (`None`: no such row).
    fn current_row(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<CurrentRow>>;
    /// How many rows have the status `manual` (the parked rows): one indexed count.
    fn count_parked(&mut self, w: &Watch, manual: &str) -> Result<u64>;
    /// The first `limit` rows with the status `manual`, by id.
    fn parked_rows(&mut self, w: &Watch, manual: &str, limit: u32) -> Result<Vec<ParkedRow>>;
}

/// What selfheal learns about the database and a watch's table: the server, how it was
/// reached, the schema, the plan of the running-rows query, the session's time zone.
/// `doctor` uses all of it; `check` reads the schema.
pub trait Introspect {
    /// `"mysql"`/`"mariadb"`/`"postgresql"`/`"sqlite"` and a version.
    fn describe_server(&mut self) -> Result<String>;
    /// What was connected to and how (never a password), for `doctor` and messages.
    fn connection(&self) -> String;
    /// Things an operator should know about the connection (an option file skipped, …).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Checks that the table and every configured column exist, and what their types mean
    /// ([`types::schema`]).
    fn schema(&mut self, w: &Watch) -> Result<Schema>;
    /// How the database finds running rows: the plan of the very `SELECT` that
    /// [`JobTable::running_rows`] runs (for `doctor`).
    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan>;
    /// The session's time zone, in words (for `doctor`).
    fn session_time_zone(&mut self) -> Result<String>;
    /// The SQL this database speaks (for statements `doctor` shows a person).
    fn dialect(&self) -> &'static Dialect;
    /// A column's definition after its name, as the database itself writes it in its
    /// table's `CREATE TABLE` (`enum('running','done') NOT NULL DEFAULT 'running'`), so that
    /// `doctor` can show an `ALTER TABLE … MODIFY` that keeps everything but the type.
    /// `None` where the database has no such statement or the column is not in it.
    fn column_definition(&mut self, _w: &Watch, _column: &Ident) -> Result<Option<String>> {
        Ok(None)
    }
    /// Whether the server takes `a` and `b` for one value of `column` of the watch's table,
    /// under the column's own collation: `Some(collation)` when it does, `None` when it does
    /// not or the database has no such thing to ask (SQLite's collations are the ones
    /// [`crate::config`] folds already). For `doctor`'s check of `match` values (docs/design.md#configuration):
    /// `utf8mb4_general_ci` takes `straße` for `strase`, which no offline rule foresees.
    fn equal_under_collation(
        &mut self,
        _w: &Watch,
        _column: &Ident,
        _a: &str,
        _b: &str,
    ) -> Result<Option<String>> {
        Ok(None)
    }
    /// Why the advisory lock ([`Coordination::try_watch_lock`]) does not coordinate hosts
    /// that reach this database through different servers (a Galera cluster's `GET_LOCK`
    /// is node-local), or `None` when it does or there is none to speak of (for `doctor`).
    fn advisory_lock_gap(&mut self) -> Result<Option<String>> {
        Ok(None)
    }
    /// What `selfheal init` reads of a table no watch names yet ([`survey`]); `None` where
    /// the database has no [`survey::SurveySql`] yet.
    fn survey(&mut self) -> Option<&mut dyn survey::Survey> {
        None
    }
    /// The `CREATE INDEX` that serves the running-rows query in pages, where the database
    /// needs another than one on the status column alone (`None`: that one, which `doctor`
    /// writes itself).
    fn status_index_sql(&self, _w: &Watch) -> Option<String> {
        None
    }
    /// The statement that renews the table's statistics (`None`: MySQL's `ANALYZE TABLE`).
    fn analyze_sql(&self, _w: &Watch) -> Option<String> {
        None
    }
    /// The statements, in this database's SQL, that let `column` (of type `col`) of the
    /// watch's table hold `values` as well, for `doctor` to show a person. `None`: MySQL's
    /// `ALTER TABLE … MODIFY`, which `doctor` writes itself from
    /// [`Introspect::column_definition`].
    fn widen_sql(
        &self,
        _w: &Watch,
        _column: &Ident,
        _col: &Column,
        _values: &[&str],
    ) -> Option<String> {
        None
    }
}

/// What keeps runs from acting on the same rows at once: across hosts (the advisory lock,
/// per watch, or per watch and host) and across a stopped run and the next (its server
/// session).
pub trait Coordination {
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
    /// Takes the advisory lock that keeps two runs from acting on the same rows at once
    /// (`GET_LOCK` on MySQL): per watch and `host` when each host judges only the rows it
    /// owns (`owner_column`), so hosts never turn one another away while a second run on
    /// the same host still does; per watch when `host` is `None`. `false`: another run
    /// holds it.
    fn try_watch_lock(&mut self, w: &Watch, host: Option<&str>) -> Result<bool>;
    /// Who holds the advisory lock [`Coordination::try_watch_lock`] did not get (the same
    /// `w` and `host`). `None` where the store has no such lock, or nobody holds it now.
    fn watch_lock_holder(
        &mut self,
        _w: &Watch,
        _host: Option<&str>,
    ) -> Result<Option<AdvisoryLockHolder>> {
        Ok(None)
    }
    /// What a person runs, in this database's SQL, about the advisory lock of a watch that
    /// stays busy: see and end the holder's session `Some(connection)`, or find who holds
    /// it (`None`). MySQL's (`SHOW PROCESSLIST`, `KILL`) unless the database says otherwise.
    fn lock_holder_fix(&self, connection: Option<u64>) -> String {
        match connection {
            Some(c) => format!(
                "see what connection {c} is (SHOW PROCESSLIST), and if it is no selfheal \
                 run, end it (KILL {c}) and find out why that account holds the lock"
            ),
            None => "see which connection holds the lock (SELECT IS_USED_LOCK(…) with the \
                     name selfheal/DATABASE/WATCH, then SHOW PROCESSLIST)"
                .to_string(),
        }
    }
}

/// One database, every concern: what [`open`] returns and callers hold. Implemented for
/// every type that implements the three parts; methods of all three are called on a
/// `&mut dyn Store` with only `Store` in scope.
pub trait Store: JobTable + Introspect + Coordination {}

impl<T: JobTable + Introspect + Coordination + ?Sized> Store for T {}

/// The clocks a run judges by: the database's now (one query), the zone naive times are
/// written in (`[database] timezone`) and how far clocks may disagree (`[run]
/// clock_tolerance`).
pub fn clocks(
    store: &mut dyn Store,
    db: &Database,
    tolerance: std::time::Duration,
) -> Result<crate::clock::Clocks> {
    Ok(crate::clock::Clocks {
        db: store.clock()?,
        tz: db.timezone,
        tolerance_s: tolerance.as_secs(),
    })
}

/// Checks what the driver makes of the URL (its options: `?socket=`, …), touching
/// nothing: a URL it cannot use is the configuration's error (exit 2). `check` asks
/// before it takes its run lock; [`open`] asks again.
pub fn vet(db: &Database) -> Result<()> {
    (driver_for(&db.url).vet)(db)
}

/// Opens the store a URL names. `read_only` is a promise that nothing will be written
/// (dry runs); drivers may open accordingly.
pub fn open(db: &Database, read_only: bool) -> Result<Box<dyn Store>> {
    let driver = driver_for(&db.url);
    (driver.vet)(db)?;
    (driver.open)(db, read_only)
}

/// The driver a URL's scheme picks: the one place a scheme is turned into a database.
fn driver_for(url: &DbUrl) -> Opener {
    match url {
        DbUrl::Sqlite(_) => Opener::of::<sqlite::Sqlite>(),
        DbUrl::Mysql(_) => Opener::of::<mysql::Mysql>(),
        DbUrl::Postgres(_) => Opener::of::<postgres::Postgres>(),
    }
}

/// What a driver does before anything is read: check the URL, open the store.
struct Opener {
    vet: fn(&Database) -> Result<()>,
    open: fn(&Database, bool) -> Result<Box<dyn Store>>,
}

impl Opener {
    fn of<D: driver::Driver + 'static>() -> Opener
    where
        SqlStore<D>: Store,
    {
        Opener {
            vet: |db| D::vet(db).map_err(|why| db.url_error(why)),
            open: |db, read_only| Ok(Box::new(SqlStore::<D>::open(db, read_only)?)),
        }
    }
}

pub use sql::{Dialect, Placeholder, Statement};
pub use table::SqlStore;
pub use types::{Column, ColumnType, Role};

/// How a database reads the running rows of a watch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanPlan {
    /// The index used to find running rows, if any.
    pub index: Option<String>,
    /// Indexes the database could have used (MySQL `possible_keys`).
    pub candidates: Vec<String>,
    /// Rows the database expects to examine (MySQL's estimate; SQLite's largest rowid
    /// when it scans the table), when it says.
    pub rows: Option<u64>,
    /// The plan in the database's own words.
    pub detail: String,
}

/// True for a row of the watch (its `match`) that is finished: not running, start and end
/// both set.
pub(crate) fn is_finished(w: &Watch, r: &FinishedRow) -> bool {
    r.matched && r.status != w.running_value && !r.started.raw.is_null() && !r.ended.raw.is_null()
}

/// The `LIKE` pattern for selfheal's message prefix.
pub(crate) fn marked_pattern() -> String {
    format!("{}%", crate::message::MESSAGE_PREFIX)
}

/// Offset in seconds of `tz` from UTC right now, for writing naive local end times.
pub(crate) fn zone_offset_now(tz: crate::zone::Zone) -> i64 {
    tz.offset_now()
}

#[cfg(test)]
mod tests {
    use super::SqlValue;

    #[test]
    fn a_datetime_reads_as_chronos_format_would_write_it() {
        use chrono::{NaiveDate, NaiveDateTime};
        let at = |y, mo, d, h, mi, s, nano| -> NaiveDateTime {
            NaiveDate::from_ymd_opt(y, mo, d)
                .and_then(|d| d.and_hms_nano_opt(h, mi, s, nano))
                .expect("a valid time")
        };
        for t in [
            at(2026, 12, 1, 15, 4, 5, 0),
            at(2026, 1, 9, 0, 0, 0, 120_000_000),
            at(2026, 1, 9, 0, 0, 0, 123_456_000),
            at(2026, 1, 9, 0, 0, 0, 1),
            at(999, 1, 1, 0, 0, 0, 0),
            at(1, 1, 1, 0, 0, 0, 0),
            at(9999, 12, 31, 23, 59, 59, 999_999_999),
            at(2016, 12, 31, 23, 59, 59, 1_500_000_000),
            at(-1, 1, 1, 0, 0, 0, 0),
            at(10_000, 1, 1, 0, 0, 0, 5_000),
        ] {
            assert_eq!(
                SqlValue::DateTime(t).to_string(),
                t.format("%Y-%m-%d %H:%M:%S%.f").to_string()
            );
        }
    }

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

    #[test]
    fn options_the_driver_cannot_use_are_the_configurations_error() {
        let cfg = |url: &str| {
            let text = format!(
                "[database]\nurl = \"{url}\"\n\n[[watch]]\nname = \"sync\"\n\
                 table = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_file = \"/run/app/{{id}}.hb\"\nstale_after = \"5m\"\nmax_age = \"6h\"\n"
            );
            crate::config::from_str(
                &text,
                std::path::Path::new("/etc/selfheal/selfheal.toml"),
                &crate::config::Overrides::default(),
                &[],
            )
            .expect("the URL's syntax is the configuration's")
            .database
            .expect("a database")
        };
        let db = cfg("mysql://app:s3cret@localhost/appdb?sockt=/run/mysqld/mysqld.sock");
        let e = super::vet(&db).expect_err("an option the driver does not know");
        assert_eq!(e.exit_code(), crate::error::exit::USAGE);
        assert_eq!(
            e.to_string(),
            "/etc/selfheal/selfheal.toml: database.url: not a usable MySQL URL (Unknown URL \
             parameter `sockt'): \"mysql://app:***@localhost/appdb?sockt=/run/mysqld/mysqld.sock\"; \
             expected mysql://user@host:port/database?socket=/path"
        );
        assert!(super::open(&db, true).is_err_and(|o| o.to_string() == e.to_string()));
        for fine in [
            "mysql://app@localhost/appdb?socket=/run/mysqld/mysqld.sock",
            "mysql:///appdb?prefer_socket=false",
            "sqlite:///var/lib/app.db",
        ] {
            assert!(super::vet(&cfg(fine)).is_ok(), "{fine}");
        }
    }
}
