//! The job table written once, over any [`Driver`]: running rows in keyset pages (and the
//! parked rows, one row by id, every column of one row), the compare-and-set and groups of
//! them, finished rows, the parked count, a row as it is now, the database clock, and the
//! schema — each statement built by [`sql`] in the driver's [`Dialect`], each row decoded
//! here into the store's types. A database's driver supplies the connection; its
//! [`Introspect`](super::Introspect) and [`Coordination`](super::Coordination) are
//! implemented for `SqlStore<ItsDriver>` next to it.
//!
//! Decoding is the read path of a million-row backlog: cells are moved out of the driver's
//! row, never copied, and nothing is allocated per row beyond the values themselves.

use std::collections::HashMap;

use crate::clock::DbClock;
use crate::config::{Database, DbIdentity, Ident, Place, Watch};
use crate::error::{DbErrorKind, Error, Result, SchemaProblem};
use crate::holder_line::NamedHolder;

use super::driver::{Cell, Driver, Refusal, Row};
use super::sql::{self, Dialect, Statement};
use super::types::{self, NaiveClock};
use super::{
    CasOutcome, Change, CurrentRow, FinishedRow, History, JobTable, ParkedRow, RunningRow, Schema,
    Select, SqlValue, StoredRow, TimeValue,
};

/// A store over one database's driver: the job table ([`JobTable`]) for every database;
/// what the database is and how runs coordinate on it, per database.
pub struct SqlStore<D> {
    pub(super) driver: D,
    /// The zone naive times are written in (`[database] timezone`, else the driver's
    /// [`Driver::naive_zone`]).
    pub(super) tz: Option<crate::zone::Zone>,
    /// Which database this is (a SQLite file's path, for messages).
    pub(super) identity: DbIdentity,
    /// By table: an index whose first column is the status column, found by
    /// [`SqlStore::read_schema`] where the dialect can name one, for the pages of a
    /// backlog ([`Dialect::force_index`]).
    status_index: HashMap<String, Ident>,
    /// A compare-and-set was made in the open group's transaction.
    wrote_in_group: bool,
}

impl<D: Driver> SqlStore<D> {
    /// Opens the database `db` names through driver `D`.
    pub fn open(db: &Database, read_only: bool) -> Result<Self> {
        let driver = D::open(db, read_only)?;
        Ok(SqlStore {
            tz: db.timezone.or_else(|| driver.naive_zone()),
            driver,
            identity: db.url.identity(),
            status_index: HashMap::new(),
            wrote_in_group: false,
        })
    }

    fn dialect(&self) -> &'static Dialect {
        self.driver.dialect()
    }

    /// The first row of `st`'s result, every cell (`None`: no row).
    pub(super) fn first_row(
        &mut self,
        st: &Statement,
        what: &str,
    ) -> Result<Option<Vec<SqlValue>>> {
        let mut first = None;
        self.driver.query(st, what, &mut |r| {
            if first.is_none() {
                first = Some((0..r.columns()).map(|_| r.cell().value).collect());
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// A failure in selfheal's own words (an answer that makes no sense).
    pub(super) fn odd(&self, what: &str, message: impl Into<String>) -> Error {
        Error::database_kind(
            self.driver.context(what),
            DbErrorKind::Other,
            message.into(),
        )
    }

    /// Reads what the database says about the watch's table through the dialect's
    /// statements ([`sql::SchemaSql`]): every column, the primary key and, where the
    /// dialect names indexes in queries, the status index; then the checks every database
    /// shares ([`types::schema`]).
    pub(super) fn read_schema(&mut self, w: &Watch) -> Result<Schema> {
        let d = self.dialect();
        let mut columns = HashMap::new();
        let mut primary: Vec<String> = Vec::new();
        self.driver
            .query(&(d.schema.columns)(w), "reading the schema", &mut |r| {
                let (name, column, key) = (d.schema.column)(r);
                if key > 0 {
                    primary.push(name.clone());
                }
                columns.insert(name.to_ascii_lowercase(), column);
                Ok(())
            })?;
        if columns.is_empty() {
            return Err(self.no_table(w)?);
        }
        let mut status_index = None;
        if let Some(indexes) = d.schema.indexes {
            // (index, place in it, column, primary key)
            let mut rows: Vec<(String, u32, String, bool)> = Vec::new();
            self.driver
                .query(&indexes(w), "reading the indexes", &mut |r| {
                    let name = r.cell().value.to_string();
                    let seq = u32::try_from(r.cell().value.into_count()).unwrap_or(0);
                    let column = r.cell().value.to_string();
                    let is_primary = r.cell().value.into_count() == 1;
                    rows.push((name, seq, column, is_primary));
                    Ok(())
                })?;
            primary.extend(rows.iter().filter(|r| r.3).map(|r| r.2.clone()));
            // The one with fewest columns that starts with the status column.
            let width = |name: &str| rows.iter().filter(|r| r.0 == name).count();
            status_index = rows
                .iter()
                .filter(|(_, seq, c, is_primary)| {
                    *seq == 1 && !is_primary && c.eq_ignore_ascii_case(w.status_column.name())
                })
                .min_by_key(|(n, ..)| width(n))
                .and_then(|(n, ..)| Ident::column(n).ok());
        }
        if d.force_index.is_some() {
            match status_index {
                Some(ix) => self.status_index.insert(w.table.to_string(), ix),
                None => self.status_index.remove(&w.table.to_string()),
            };
        }
        let id_is_primary =
            primary.len() == 1 && primary[0].eq_ignore_ascii_case(w.id_column.name());
        types::schema(w, d, self.tz, columns, id_is_primary)
    }

    /// The error for a watch whose table is not there, with where it was looked for.
    fn no_table(&mut self, w: &Watch) -> Result<Error> {
        let table = w.table.to_string();
        let problem = match (self.dialect().schema.current_database, &self.identity.place) {
            (None, Place::File(p)) => SchemaProblem::NoTable {
                table,
                place: p.display().to_string(),
            },
            (None, Place::Server { name, .. }) => SchemaProblem::NoTable {
                table,
                place: format!("database {name}"),
            },
            (Some(sql), _) => {
                let db = match w.table.schema() {
                    Some(s) => Some(s.to_string()),
                    None => {
                        let st = Statement {
                            sql: sql.to_string(),
                            params: Vec::new(),
                        };
                        self.first_row(&st, "reading the schema")?
                            .and_then(|cells| cells.into_iter().next())
                            .and_then(SqlValue::into_text)
                    }
                };
                match db {
                    Some(db) => SchemaProblem::NoTable {
                        table,
                        place: format!("database {db}"),
                    },
                    None => SchemaProblem::NoDatabase { table },
                }
            }
        };
        Ok(Error::Schema {
            watch: w.name.clone(),
            problem,
        })
    }
}

/// A time cell, understood: the value, its column type where the driver sends it, and,
/// where the dialect selects it in the next cell ([`Dialect::epoch_of`]), the instant the
/// server itself gives it (a naive time is placed on the server's clock by it).
pub(super) fn time_cell(r: &mut dyn Row, d: &Dialect, tz: Option<crate::zone::Zone>) -> TimeValue {
    let Cell { value, ty } = r.cell();
    let clock = match d.epoch_of {
        Some(_) => NaiveClock::Server(server_epoch(&r.cell().value)),
        None => NaiveClock::Utc,
    };
    types::time_value(value, ty.as_ref(), tz, clock)
}

/// The instant the server gave a time cell (`UNIX_TIMESTAMP(col)`): whole seconds of an
/// integer or a decimal (`DATETIME(6)` gives fractions); `None` for NULL (a value the
/// server cannot place) or anything else.
/// The owner of a row whose host and pid are two columns (`owner_host_column`,
/// `owner_pid_column`), as `owner_column` would hold it: `HOST:PID`, a bare `PID` when the
/// host is empty (this host), nothing when the pid is.
fn split_owner(host: SqlValue, pid: SqlValue) -> Option<String> {
    let pid = pid.into_text().filter(|p| !p.trim().is_empty())?;
    match host.into_text().filter(|h| !h.trim().is_empty()) {
        Some(h) => Some(format!("{}:{}", h.trim(), pid.trim())),
        None => Some(pid.trim().to_string()),
    }
}

fn server_epoch(v: &SqlValue) -> Option<i64> {
    match v {
        SqlValue::Int(i) => Some(*i),
        SqlValue::UInt(u) => i64::try_from(*u).ok(),
        SqlValue::Float(f) => crate::clock::whole_seconds(f.floor()),
        SqlValue::Text(t) => match t.split_once('.') {
            Some((whole, _)) => whole.trim().parse().ok(),
            None => t.trim().parse().ok(),
        },
        _ => None,
    }
}

/// A count cell (`COUNT(*)`) as a number: 0 for anything that is none.
fn count(v: SqlValue) -> u64 {
    match v {
        SqlValue::UInt(u) => u,
        other => u64::try_from(other.into_count()).unwrap_or(0),
    }
}

impl<D: Driver> JobTable for SqlStore<D> {
    fn clock(&mut self) -> Result<DbClock> {
        const WHAT: &str = "reading the clock";
        let st = Statement {
            sql: self.dialect().clock.to_string(),
            params: Vec::new(),
        };
        let Some(mut cells) = self.first_row(&st, WHAT)?.map(Vec::into_iter) else {
            return Err(self.odd(WHAT, "no row"));
        };
        let now = cells.next().unwrap_or(SqlValue::Null);
        let now_epoch = cells.next().map_or(0, SqlValue::into_count);
        let now_naive = match now {
            SqlValue::DateTime(d) => d,
            SqlValue::Text(t) => chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S")
                .map_err(|e| {
                    Error::database_kind(self.driver.context(WHAT), DbErrorKind::Other, e)
                })?,
            other => return Err(self.odd(WHAT, format!("its now reads {other}"))),
        };
        Ok(DbClock {
            now_naive,
            now_epoch,
        })
    }

    fn each_row(
        &mut self,
        w: &Watch,
        sel: Select<'_>,
        each: &mut dyn FnMut(StoredRow) -> Result<()>,
    ) -> Result<()> {
        let d = self.dialect();
        // A page after the first is read through the status index (see force_index).
        let index = match sel {
            Select::Running(page) if page.after.is_some() && d.force_index.is_some() => {
                self.status_index.get(&w.table.to_string()).cloned()
            }
            _ => None,
        };
        let sel = match sel {
            Select::Running(page) if index.is_some() => Select::Running(sql::Page {
                index: index.as_ref(),
                ..page
            }),
            other => other,
        };
        let st = sql::rows_sql(d, w, sel);
        let tz = self.tz;
        let with_status = sql::rows_have_status(sel);
        let what = format!("reading {} of {}", sel.what(), w.table);
        self.driver.query(&st, &what, &mut |r| {
            let id = r.cell().value;
            let started = time_cell(r, d, tz);
            let heartbeat = w.heartbeat_column.as_ref().map(|_| time_cell(r, d, tz));
            let owner_raw = match w.owner_column {
                Some(_) => r.cell().value,
                None => SqlValue::Null,
            };
            let mut owner = owner_raw.clone().into_text();
            let mut owner_split_raw = None;
            if w.owner_split.is_some() {
                let (host, pid) = (r.cell().value, r.cell().value);
                owner = split_owner(host.clone(), pid.clone());
                owner_split_raw = Some((host, pid));
            }
            let attempts = w.retry.as_ref().map(|_| r.cell().value.into_count());
            let lock_values = w
                .lock_columns()
                .iter()
                .map(|_| r.cell().value.into_text())
                .collect();
            let status = if with_status {
                r.cell().value
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
                    lock_values,
                    owner_split_raw,
                },
            })
        })
    }

    fn lock_database(&mut self) -> Result<String> {
        const WHAT: &str = "reading the database's name";
        let Some(sql) = self.dialect().schema.current_database else {
            return Err(super::no_named_locks());
        };
        let st = Statement {
            sql: sql.to_string(),
            params: Vec::new(),
        };
        let name = self
            .first_row(&st, WHAT)?
            .and_then(|r| r.into_iter().next());
        Ok(name.and_then(SqlValue::into_text).unwrap_or_default())
    }

    fn named_locks(&mut self, names: &[String]) -> Result<Vec<Option<NamedHolder>>> {
        /// Names asked in one statement: a page's, well within any server's bound values.
        const CHUNK: usize = 1000;
        let d = self.dialect();
        let Some(sql) = d.named_locks else {
            return Err(super::no_named_locks());
        };
        let mut ids: Vec<Option<u64>> = Vec::with_capacity(names.len());
        for chunk in names.chunks(CHUNK) {
            let st = (sql.holders)(d, chunk);
            let row = self.first_row(&st, "asking who holds the named locks")?;
            let row = row.unwrap_or_default();
            ids.extend((0..chunk.len()).map(|i| {
                row.get(i)
                    .cloned()
                    .and_then(|v| u64::try_from(v.into_count()).ok())
                    .filter(|id| *id > 0)
            }));
        }
        let mut held: Vec<u64> = ids.iter().flatten().copied().collect();
        held.sort_unstable();
        held.dedup();
        let mut seen: HashMap<u64, NamedHolder> = HashMap::new();
        for chunk in held.chunks(CHUNK) {
            let st = (sql.sessions)(d, chunk);
            self.driver
                .query(&st, "reading the named locks' holders", &mut |r| {
                    let id = u64::try_from(r.cell().value.into_count()).unwrap_or(0);
                    let user = r.cell().value.into_text();
                    let host = r.cell().value.into_text();
                    let time_s = u64::try_from(r.cell().value.into_count()).ok();
                    seen.insert(
                        id,
                        NamedHolder {
                            connection: id,
                            user,
                            host,
                            time_s,
                        },
                    );
                    Ok(())
                })?;
        }
        Ok(ids
            .into_iter()
            .map(|id| {
                id.map(|c| {
                    seen.get(&c).cloned().unwrap_or(NamedHolder {
                        connection: c,
                        user: None,
                        host: None,
                        time_s: None,
                    })
                })
            })
            .collect())
    }

    fn row_columns(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<Vec<(String, SqlValue)>>> {
        let st = sql::columns_sql(self.dialect(), w, id);
        let mut found = None;
        self.driver
            .query(&st, &format!("reading a row of {}", w.table), &mut |r| {
                if found.is_none() {
                    found = Some(
                        (0..r.columns())
                            .map(|i| (r.name(i), r.cell().value))
                            .collect(),
                    );
                }
                Ok(())
            })?;
        Ok(found)
    }

    fn compare_and_set(
        &mut self,
        w: &Watch,
        schema: &Schema,
        c: &Change<'_>,
    ) -> Result<CasOutcome> {
        let st = sql::cas_sql(self.dialect(), w, schema, c);
        self.wrote_in_group = self.driver.in_writes();
        match self.driver.execute(&st, w) {
            Ok(1) => Ok(CasOutcome::Applied),
            Ok(0) => Ok(CasOutcome::LostRace),
            Ok(n) => Ok(CasOutcome::Failed(format!(
                "the update matched {n} rows; {} is not unique",
                w.id_column
            ))),
            // Inside a group nothing waits: the row is someone else's for now.
            Err(Refusal::Busy) => Ok(CasOutcome::Busy),
            // This row's write failed (the statement alone is undone); the run goes on.
            Err(Refusal::Statement(why)) => Ok(CasOutcome::Failed(why)),
            Err(Refusal::Run(e)) => Err(e),
        }
    }

    fn compare_and_set_group(
        &mut self,
        w: &Watch,
        schema: &Schema,
        changes: &[Change<'_>],
    ) -> Result<Option<Vec<CasOutcome>>> {
        // Only at the start of a group (nothing else written in its transaction, so that
        // undoing it undoes only this), by the primary key. A group writes from the
        // running status, each row's heartbeat matched (what a sweep writes); anything
        // else goes on its own.
        let sweep_like = |c: &Change<'_>| c.from_status == w.running_value && c.match_heartbeat;
        if !self.driver.groups_as_one_statement()
            || !self.driver.in_writes()
            || self.wrote_in_group
            || !schema.id_is_primary
            || changes.len() < 2
            || !changes.iter().all(sweep_like)
        {
            return Ok(None);
        }
        let st = sql::cas_group_update_sql(self.dialect(), w, schema, changes);
        match self.driver.execute(&st, w) {
            Ok(n) if n == changes.len() as u64 => {
                self.wrote_in_group = true;
                Ok(Some(vec![CasOutcome::Applied; changes.len()]))
            }
            // A row moved on between the read and the write. Which one only the rows could
            // say, and a row written as selfheal would have written it may be its worker's:
            // the group is undone, and each row is written (or not) on its own.
            Ok(_) => {
                self.driver.undo_writes()?;
                Ok(None)
            }
            // A row someone else holds, or anything else the database refuses (a strict
            // mode, a trigger): the statement is undone alone (the transaction stays);
            // each row on its own, then, with its own outcome.
            Err(Refusal::Busy | Refusal::Statement(_)) => Ok(None),
            Err(Refusal::Run(e)) => Err(e),
        }
    }

    fn groups_compare_and_sets(&self) -> bool {
        self.driver.groups_as_one_statement()
    }

    fn finished_rows(
        &mut self,
        w: &Watch,
        scope: History,
        each: &mut dyn FnMut(FinishedRow) -> Result<()>,
    ) -> Result<()> {
        let d = self.dialect();
        let st = sql::finished_sql(d, w, scope)?;
        let tz = self.tz;
        let match_cell = sql::finished_has_match_cell(w, scope);
        let what = format!("reading finished rows of {}", w.table);
        // Streamed as the rows come: memory does not grow with the table.
        self.driver.query(&st, &what, &mut |r| {
            let row = FinishedRow {
                id: r.cell().value,
                started: time_cell(r, d, tz),
                ended: time_cell(r, d, tz),
                status: r.cell().value.to_string(),
                marked: r.cell().value.into_text(),
                matched: !match_cell || r.cell().value.into_count() == 1,
            };
            if super::is_finished(w, &row) {
                each(row)?;
            }
            Ok(())
        })
    }

    fn begin_writes(&mut self) -> Result<bool> {
        let open = self.driver.begin_writes()?;
        self.wrote_in_group = false;
        Ok(open)
    }

    fn commit_writes(&mut self) -> Result<()> {
        // A group the driver closed itself (the server rolled it back: a deadlock, a
        // statement that could not be undone alone) applied nothing. A COMMIT now would
        // succeed with nothing to commit, and the rows written in the group before would
        // be taken as applied and journaled.
        if !self.driver.in_writes() {
            return Err(Error::database_kind(
                self.driver.context("committing the writes"),
                DbErrorKind::Other,
                "the server rolled the write group back: nothing of it was applied",
            ));
        }
        self.driver.commit_writes()
    }

    fn abandon_writes(&mut self) -> Result<()> {
        // Rolled back, then the empty transaction the driver goes on in is closed.
        self.wrote_in_group = false;
        self.driver.undo_writes()?;
        self.driver.commit_writes()
    }

    fn count_parked(&mut self, w: &Watch, manual: &str) -> Result<u64> {
        let st = sql::parked_count_sql(self.dialect(), w, manual);
        let what = format!("counting parked rows of {}", w.table);
        let first = self.first_row(&st, &what)?;
        Ok(first
            .and_then(|cells| cells.into_iter().next())
            .map_or(0, count))
    }

    fn parked_rows(&mut self, w: &Watch, manual: &str, limit: u32) -> Result<Vec<ParkedRow>> {
        let d = self.dialect();
        let st = sql::parked_sql(d, w, manual, limit);
        let tz = self.tz;
        let mut rows = Vec::new();
        let what = format!("reading parked rows of {}", w.table);
        self.driver.query(&st, &what, &mut |r| {
            rows.push(ParkedRow {
                id: r.cell().value,
                started: time_cell(r, d, tz),
            });
            Ok(())
        })?;
        Ok(rows)
    }

    fn current_row(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<CurrentRow>> {
        let st = sql::current_sql(self.dialect(), w, id);
        let mut found = None;
        self.driver
            .query(&st, &format!("reading a row of {}", w.table), &mut |r| {
                if found.is_none() {
                    let status = r.cell().value;
                    let started = r.cell().value;
                    // NULL in the statement without a message column.
                    let message = r.cell().value;
                    found = Some(CurrentRow {
                        status,
                        started,
                        message: w.message_column.as_ref().map(|_| message),
                    });
                }
                Ok(())
            })?;
        Ok(found)
    }
}

/// A driver that answers from a script, for the tests of what is written once above the
/// drivers.
#[cfg(test)]
pub(super) mod fake {
    use std::collections::VecDeque;

    use super::*;

    /// A row of given cells.
    pub struct Cells {
        cells: std::vec::IntoIter<Cell>,
        names: Vec<String>,
    }

    impl Cells {
        pub fn new(cells: Vec<Cell>) -> Self {
            let names = (0..cells.len()).map(|i| format!("c{i}")).collect();
            Cells {
                cells: cells.into_iter(),
                names,
            }
        }
    }

    impl Row for Cells {
        fn cell(&mut self) -> Cell {
            self.cells.next().unwrap_or(Cell {
                value: SqlValue::Null,
                ty: None,
            })
        }

        fn columns(&self) -> usize {
            self.names.len()
        }

        fn name(&self, i: usize) -> String {
            self.names.get(i).cloned().unwrap_or_default()
        }
    }

    /// Answers each query with the next of `results` (rows of cells), each write with the
    /// next of `writes`; keeps every statement it was given.
    pub struct Fake {
        pub dialect: &'static Dialect,
        pub results: VecDeque<Vec<Vec<Cell>>>,
        pub writes: VecDeque<std::result::Result<u64, Refusal>>,
        pub statements: Vec<Statement>,
        pub grouping: bool,
        pub in_group: bool,
        pub undone: usize,
    }

    impl Fake {
        pub fn new(dialect: &'static Dialect) -> Self {
            Fake {
                dialect,
                results: VecDeque::new(),
                writes: VecDeque::new(),
                statements: Vec::new(),
                grouping: false,
                in_group: false,
                undone: 0,
            }
        }
    }

    impl Driver for Fake {
        type Failure = rusqlite::Error;

        fn open(_db: &Database, _read_only: bool) -> Result<Self> {
            Err(Error::Usage("a fake opens nothing".into()))
        }

        fn dialect(&self) -> &'static Dialect {
            self.dialect
        }

        fn context(&self, what: &str) -> String {
            format!("{what} in the fake")
        }

        fn query(
            &mut self,
            st: &Statement,
            _what: &str,
            each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
        ) -> Result<()> {
            self.statements.push(st.clone());
            for row in self.results.pop_front().unwrap_or_default() {
                each(&mut Cells::new(row))?;
            }
            Ok(())
        }

        fn execute(&mut self, st: &Statement, _w: &Watch) -> std::result::Result<u64, Refusal> {
            self.statements.push(st.clone());
            self.writes.pop_front().unwrap_or(Ok(0))
        }

        fn groups_as_one_statement(&self) -> bool {
            self.grouping
        }

        fn begin_writes(&mut self) -> Result<bool> {
            self.in_group = true;
            Ok(true)
        }

        fn in_writes(&self) -> bool {
            self.in_group
        }

        fn undo_writes(&mut self) -> Result<()> {
            self.undone += 1;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::NaiveDate;

    use super::fake::Fake;
    use super::*;
    use crate::clock::Stamp;
    use crate::store::types::ColumnType;
    use crate::store::{mysql, sqlite};

    fn watch(extra: &str) -> Watch {
        let text = format!(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"sync\"\n\
             table = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"/run/app/{{id}}.hb\"\nstale_after = \"5m\"\nmax_age = \"6h\"\n\
             {extra}\n"
        );
        crate::config::from_str(
            &text,
            Path::new("/etc/selfheal/selfheal.toml"),
            &crate::config::Overrides::default(),
            &[],
        )
        .expect("valid watch")
        .watches
        .remove(0)
    }

    fn store(driver: Fake, tz: Option<crate::zone::Zone>) -> SqlStore<Fake> {
        SqlStore {
            driver,
            tz,
            identity: crate::config::DbUrl::Sqlite("/var/lib/app.db".into()).identity(),
            status_index: HashMap::new(),
            wrote_in_group: false,
        }
    }

    fn cell(value: SqlValue) -> Cell {
        Cell { value, ty: None }
    }

    fn typed(value: SqlValue, ty: ColumnType) -> Cell {
        Cell {
            value,
            ty: Some(ty),
        }
    }

    fn at(h: u32) -> chrono::NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_opt(h, 0, 0))
            .expect("a time")
    }

    fn text(s: &str) -> SqlValue {
        SqlValue::Text(s.into())
    }

    fn schema(id_is_primary: bool) -> Schema {
        Schema {
            message_max: None,
            ended: None,
            retry_at: None,
            columns: HashMap::new(),
            id_is_primary,
        }
    }

    fn rows(s: &mut SqlStore<Fake>, w: &Watch, sel: Select<'_>) -> Vec<StoredRow> {
        let mut out = Vec::new();
        s.each_row(w, sel, &mut |r| {
            out.push(r);
            Ok(())
        })
        .expect("rows");
        out
    }

    #[test]
    fn a_running_row_is_decoded_in_the_order_its_select_names_the_cells() {
        let w = watch(
            "heartbeat_column = \"beat\"\nowner_column = \"worker\"\nretry_value = \"queued\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3",
        );
        // MySQL: each time cell followed by the server's instant for it.
        let mut f = Fake::new(&mysql::DIALECT);
        f.results.push_back(vec![vec![
            cell(SqlValue::Int(7)),
            typed(SqlValue::DateTime(at(10)), ColumnType::DateTime),
            cell(text("1764410400.000000")),
            typed(SqlValue::DateTime(at(11)), ColumnType::Timestamp),
            cell(SqlValue::Int(1_764_414_000)),
            cell(text("web1:42")),
            cell(text("2")),
        ]]);
        let mut s = store(f, None);
        let got = rows(&mut s, &w, Select::Running(sql::Page::default()));
        let row = &got[0].row;
        assert_eq!(got[0].status, text("running"));
        assert_eq!(row.id, SqlValue::Int(7));
        assert_eq!(row.started.raw, SqlValue::DateTime(at(10)));
        assert_eq!(row.started.stamp, Ok(Some(Stamp::Epoch(1_764_410_400))));
        let beat = row.heartbeat.as_ref().expect("a heartbeat column");
        assert_eq!(beat.stamp, Ok(Some(Stamp::Epoch(1_764_414_000))));
        assert_eq!(
            (row.owner.as_deref(), &row.owner_raw, row.attempts),
            (Some("web1:42"), &text("web1:42"), Some(2))
        );
        // A configured zone places a DATETIME in it, never a TIMESTAMP (an instant).
        let mut f = Fake::new(&mysql::DIALECT);
        f.results.push_back(vec![vec![
            cell(SqlValue::Int(7)),
            typed(SqlValue::DateTime(at(10)), ColumnType::DateTime),
            cell(SqlValue::Int(1)),
            typed(SqlValue::DateTime(at(11)), ColumnType::Timestamp),
            cell(SqlValue::Int(1_764_414_000)),
            cell(SqlValue::Null),
            cell(SqlValue::Null),
        ]]);
        let tz = crate::zone::Zone::named("Asia/Shanghai").expect("a zone");
        let mut s = store(f, Some(tz));
        let got = rows(&mut s, &w, Select::Running(sql::Page::default()));
        let row = &got[0].row;
        assert_eq!(row.started.stamp, Ok(Some(Stamp::Local(at(10), tz))));
        let beat = row.heartbeat.as_ref().expect("a heartbeat column");
        assert_eq!(beat.stamp, Ok(Some(Stamp::Epoch(1_764_414_000))));
        assert_eq!((&row.owner, row.attempts), (&None, Some(0)));

        // SQLite: no instant cells; a naive text time is UTC; the status read where asked.
        let w = watch("heartbeat_column = \"beat\"");
        let mut f = Fake::new(&sqlite::DIALECT);
        f.results.push_back(vec![vec![
            cell(text("a1")),
            cell(text("2026-11-29 10:00:00")),
            cell(SqlValue::Null),
            cell(text("wait_manual")),
        ]]);
        let mut s = store(f, None);
        let got = rows(&mut s, &w, Select::Id(&text("a1")));
        assert_eq!(got[0].status, text("wait_manual"));
        let row = &got[0].row;
        let ten = at(10).and_utc().timestamp();
        assert_eq!(row.started.stamp, Ok(Some(Stamp::Epoch(ten))));
        assert_eq!(row.heartbeat.as_ref().map(|h| &h.stamp), Some(&Ok(None)));
        assert_eq!((&row.owner_raw, row.attempts), (&SqlValue::Null, None));
    }

    #[test]
    fn the_server_gives_a_naive_time_its_instant() {
        assert_eq!(
            server_epoch(&SqlValue::Int(1_764_406_800)),
            Some(1_764_406_800)
        );
        assert_eq!(
            server_epoch(&SqlValue::Text("1764406800.250000".into())),
            Some(1_764_406_800)
        );
        assert_eq!(
            server_epoch(&SqlValue::Float(1_764_406_800.5)),
            Some(1_764_406_800)
        );
        assert_eq!(server_epoch(&SqlValue::Null), None);
        // None: the time cannot be placed, and says why.
        let mut row = fake::Cells::new(vec![
            typed(SqlValue::DateTime(at(10)), ColumnType::DateTime),
            cell(SqlValue::Null),
        ]);
        let t = time_cell(&mut row, &mysql::DIALECT, None);
        assert!(
            t.stamp
                .is_err_and(|e| e.contains("set [database] timezone"))
        );
    }

    #[test]
    fn pages_after_the_first_go_through_the_status_index_where_the_dialect_names_one() {
        let w = watch("");
        let index_rows = || {
            vec![
                vec![
                    cell(text("PRIMARY")),
                    cell(SqlValue::UInt(1)),
                    cell(text("id")),
                    cell(SqlValue::Int(1)),
                ],
                vec![
                    cell(text("by_status_job")),
                    cell(SqlValue::UInt(1)),
                    cell(text("status")),
                    cell(SqlValue::Int(0)),
                ],
                vec![
                    cell(text("by_status_job")),
                    cell(SqlValue::UInt(2)),
                    cell(text("job")),
                    cell(SqlValue::Int(0)),
                ],
                vec![
                    cell(text("by_status")),
                    cell(SqlValue::UInt(1)),
                    cell(text("Status")),
                    cell(SqlValue::Int(0)),
                ],
            ]
        };
        let column = |name: &str, ty: &str| {
            vec![
                cell(text(name)),
                cell(text(ty)),
                cell(text(ty)),
                cell(SqlValue::Null),
                cell(text("")),
            ]
        };
        let mut f = Fake::new(&mysql::DIALECT);
        f.results.push_back(vec![
            column("id", "int"),
            column("status", "varchar"),
            column("start_time", "datetime"),
        ]);
        f.results.push_back(index_rows());
        let mut s = store(f, None);
        let schema = s.read_schema(&w).expect("schema");
        assert!(schema.id_is_primary);
        let after = SqlValue::Int(5_000);
        let page = |after| {
            Select::Running(sql::Page {
                after,
                limit: Some(5_000),
                index: None,
            })
        };
        rows(&mut s, &w, page(None));
        rows(&mut s, &w, page(Some(&after)));
        let sqls: Vec<&str> = s
            .driver
            .statements
            .iter()
            .map(|st| st.sql.as_str())
            .collect();
        assert!(!sqls[2].contains("FORCE INDEX"), "{}", sqls[2]);
        assert!(
            sqls[3].contains("FROM `sync_log` FORCE INDEX (`by_status`) WHERE"),
            "{}",
            sqls[3]
        );
        // SQLite names no index, whatever it has.
        let mut f = Fake::new(&sqlite::DIALECT);
        f.results.push_back(vec![
            vec![
                cell(SqlValue::Int(0)),
                cell(text("id")),
                cell(text("INTEGER")),
                cell(SqlValue::Int(0)),
                cell(SqlValue::Null),
                cell(SqlValue::Int(1)),
            ],
            vec![
                cell(SqlValue::Int(1)),
                cell(text("status")),
                cell(text("TEXT")),
                cell(SqlValue::Int(0)),
                cell(SqlValue::Null),
                cell(SqlValue::Int(0)),
            ],
            vec![
                cell(SqlValue::Int(2)),
                cell(text("start_time")),
                cell(text("")),
                cell(SqlValue::Int(0)),
                cell(SqlValue::Null),
                cell(SqlValue::Int(0)),
            ],
        ]);
        let mut s = store(f, None);
        let schema = s.read_schema(&w).expect("schema");
        assert!(schema.id_is_primary);
        assert_eq!(schema.columns["start_time"].ty, ColumnType::Untyped);
        rows(&mut s, &w, page(Some(&after)));
        assert_eq!(s.driver.statements.len(), 2, "the columns, then the page");
        assert!(!s.driver.statements[1].sql.contains("INDEX"));
    }

    #[test]
    fn a_missing_table_says_where_it_was_looked_for() {
        let w = watch("");
        let no_table = |s: &mut SqlStore<Fake>| match s.read_schema(&w) {
            Err(Error::Schema { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        let mut s = store(Fake::new(&sqlite::DIALECT), None);
        assert_eq!(
            no_table(&mut s),
            SchemaProblem::NoTable {
                table: "sync_log".into(),
                place: "/var/lib/app.db".into()
            }
        );
        let mut f = Fake::new(&mysql::DIALECT);
        f.results.push_back(Vec::new());
        f.results.push_back(vec![vec![cell(text("appdb"))]]);
        let mut s = store(f, None);
        assert_eq!(
            no_table(&mut s),
            SchemaProblem::NoTable {
                table: "sync_log".into(),
                place: "database appdb".into()
            }
        );
        assert_eq!(s.driver.statements[1].sql, "SELECT DATABASE()");
        let mut f = Fake::new(&mysql::DIALECT);
        f.results.push_back(Vec::new());
        f.results.push_back(vec![vec![cell(SqlValue::Null)]]);
        let mut s = store(f, None);
        assert_eq!(
            no_table(&mut s),
            SchemaProblem::NoDatabase {
                table: "sync_log".into()
            }
        );
    }

    #[test]
    fn a_write_says_what_became_of_it() {
        let w = watch("");
        let r = RunningRow {
            id: SqlValue::Int(7),
            started: TimeValue {
                raw: SqlValue::DateTime(at(10)),
                stamp: Ok(None),
            },
            heartbeat: None,
            owner: None,
            owner_raw: SqlValue::Null,
            attempts: None,
            lock_values: Vec::new(),
            owner_split_raw: None,
        };
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "dead",
            message: None,
            bump_attempts: false,
            set_ended: false,
            retry_at: None,
            match_heartbeat: true,
        };
        let mut f = Fake::new(&sqlite::DIALECT);
        f.writes.extend([
            Ok(1),
            Ok(0),
            Ok(2),
            Err(Refusal::Busy),
            Err(Refusal::Statement("constraint".into())),
            Err(Refusal::Run(Error::Usage("gone".into()))),
        ]);
        let mut s = store(f, None);
        let mut cas = || s.compare_and_set(&w, &schema(true), &c);
        assert_eq!(cas().expect("applied"), CasOutcome::Applied);
        assert_eq!(cas().expect("lost"), CasOutcome::LostRace);
        assert!(matches!(cas(), Ok(CasOutcome::Failed(m)) if m.contains("id is not unique")));
        assert_eq!(cas().expect("busy"), CasOutcome::Busy);
        assert_eq!(
            cas().expect("failed"),
            CasOutcome::Failed("constraint".into())
        );
        assert!(cas().is_err());

        // A group as one statement: only where it saves round trips, at the start of a
        // group, by the primary key, two rows or more of a sweep.
        let changes = [c.clone(), c.clone()];
        let mut f = Fake::new(&mysql::DIALECT);
        f.grouping = true;
        f.writes.extend([Ok(2), Ok(1), Ok(1)]);
        let mut s = store(f, None);
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &changes).ok(),
            Some(None)
        );
        assert!(s.begin_writes().expect("begin"));
        assert_eq!(
            s.compare_and_set_group(&w, &schema(false), &changes).ok(),
            Some(None)
        );
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &changes[..1])
                .ok(),
            Some(None)
        );
        let unpark = [
            Change {
                match_heartbeat: false,
                ..c.clone()
            },
            c.clone(),
        ];
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &unpark).ok(),
            Some(None)
        );
        assert!(s.driver.statements.is_empty());
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &changes).ok(),
            Some(Some(vec![CasOutcome::Applied; 2]))
        );
        // Written in this group already: no second group statement in it.
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &changes).ok(),
            Some(None)
        );
        // A row moved on: the group is undone, each row goes on its own.
        assert!(s.begin_writes().expect("begin"));
        assert_eq!(
            s.compare_and_set_group(&w, &schema(true), &changes).ok(),
            Some(None)
        );
        assert_eq!(s.driver.undone, 1);
        assert!(
            s.driver.statements[1]
                .sql
                .contains("WHERE `id` IN (?, ?) AND")
        );
    }

    #[test]
    fn a_group_the_driver_closed_itself_does_not_commit_as_if_applied() {
        let mut s = store(Fake::new(&mysql::DIALECT), None);
        assert!(s.begin_writes().expect("begin"));
        assert!(s.commit_writes().is_ok());
        // The server rolled the group back (a deadlock): the driver left the group.
        assert!(s.begin_writes().expect("begin"));
        s.driver.in_group = false;
        let e = s
            .commit_writes()
            .expect_err("nothing of the group was applied");
        assert!(
            e.full_message().contains("rolled the write group back"),
            "{}",
            e.full_message()
        );
    }

    #[test]
    fn finished_rows_keep_only_the_watchs_finished_ones() {
        let w = watch("ended_column = \"end_time\"\nmatch = { job = \"full-sync\" }");
        let row = |id, status: &str, ended: SqlValue, matched| {
            vec![
                cell(SqlValue::Int(id)),
                cell(text("2026-11-29 10:00:00")),
                cell(ended),
                cell(text(status)),
                cell(text("self-heal: dead: lock free")),
                cell(SqlValue::Int(matched)),
            ]
        };
        let mut f = Fake::new(&sqlite::DIALECT);
        f.results.push_back(vec![
            row(1, "done", text("2026-11-29 10:05:00"), 1),
            row(2, "running", text("2026-11-29 10:05:00"), 1),
            row(3, "done", SqlValue::Null, 1),
            row(4, "done", text("2026-11-29 10:05:00"), 0),
        ]);
        let mut s = store(f, None);
        let mut got = Vec::new();
        s.finished_rows(&w, History::Latest(10), &mut |r| {
            got.push(r);
            Ok(())
        })
        .expect("rows");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, SqlValue::Int(1));
        let five_past = at(10).and_utc().timestamp() + 300;
        assert_eq!(got[0].ended.stamp, Ok(Some(Stamp::Epoch(five_past))));
        assert_eq!(got[0].marked.as_deref(), Some("self-heal: dead: lock free"));
    }

    #[test]
    fn the_clock_counts_and_rows_by_id() {
        let w = watch("message_column = \"error_msg\"");
        let mut f = Fake::new(&sqlite::DIALECT);
        f.results.push_back(vec![vec![
            cell(text("2026-11-29 10:00:00")),
            cell(SqlValue::Int(1_764_410_400)),
        ]]);
        f.results.push_back(vec![vec![
            cell(SqlValue::DateTime(at(11))),
            cell(text("9")),
        ]]);
        f.results.push_back(vec![vec![cell(SqlValue::Float(1.5))]]);
        f.results.push_back(vec![vec![cell(SqlValue::UInt(12))]]);
        f.results.push_back(vec![vec![
            cell(text("dead")),
            cell(text("2026-11-29 10:00:00")),
            cell(text("self-heal: dead")),
        ]]);
        f.results
            .push_back(vec![vec![cell(SqlValue::Int(7)), cell(text("x"))]]);
        f.results.push_back(Vec::new());
        let mut s = store(f, None);
        let c = s.clock().expect("clock");
        assert_eq!((c.now_naive, c.now_epoch), (at(10), 1_764_410_400));
        let c = s.clock().expect("clock");
        assert_eq!((c.now_naive, c.now_epoch), (at(11), 9));
        assert!(s.clock().is_err_and(|e| e.to_string().contains("1.5")));
        assert_eq!(s.count_parked(&w, "wait_manual").expect("count"), 12);
        let row = s.current_row(&w, &SqlValue::Int(7)).expect("row");
        assert_eq!(row.and_then(|r| r.message), Some(text("self-heal: dead")));
        let all = s.row_columns(&w, &SqlValue::Int(7)).expect("row");
        assert_eq!(
            all,
            Some(vec![
                ("c0".into(), SqlValue::Int(7)),
                ("c1".into(), text("x"))
            ])
        );
        assert_eq!(s.row_columns(&w, &SqlValue::Int(8)).expect("no row"), None);
    }
}
