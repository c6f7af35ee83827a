//! The shape of a database driver: what one database must provide for the job table to be
//! written once above it ([`super::table::SqlStore`]). A driver checks its URL's options,
//! opens a connection and sets up its session, runs a query and hands over its rows cell by cell ([`Row`]), runs a
//! write and says how many rows it matched — or whether the database refused the
//! statement alone or in a way that fails the run ([`Refusal`]) —, opens and commits a
//! group of writes, and classifies its errors into selfheal's kinds ([`DbCause`]). The SQL
//! it runs comes from its [`Dialect`] (placeholders `?`, `?N` or `$N` among it).
//!
//! A driver decodes each cell into a [`SqlValue`] and, where the database sends one with
//! the value, the column's type ([`Cell::ty`]: a `TIMESTAMP` is an instant, a `DATETIME`
//! is not); what a row's cells mean is decoded once, above the drivers.

use crate::config::{Database, Watch};
use crate::error::{DbCause, Error, Result};

use super::SqlValue;
use super::sql::{Dialect, Statement};
use super::types::ColumnType;

/// One database's connection, as the job table uses it. Not dyn-compatible on purpose:
/// [`super::table::SqlStore`] is generic over it, so a row's decoding is a direct call.
pub trait Driver: Sized {
    /// The driver's own error, classified by [`DbCause`] (its kind from the driver's error
    /// codes: access denied, unreachable, timed out, …).
    type Failure: DbCause;

    /// What the driver makes of `db`'s URL (its options), touching nothing: `Err` says,
    /// as a person reads it, why it cannot use it (the configuration's error).
    fn vet(_db: &Database) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Connects to the database `db` names and sets up the session. `read_only` is a
    /// promise that nothing will be written (dry runs).
    fn open(db: &Database, read_only: bool) -> Result<Self>;

    /// The SQL this database speaks.
    fn dialect(&self) -> &'static Dialect;

    /// The zone a naive date-time the database wrote is in, where the server says it and
    /// its dialect does not place such values itself ([`Dialect::epoch_of`]): PostgreSQL's
    /// session `TimeZone`, in which `now()` is written into a `timestamp`. `[database]
    /// timezone` overrides it.
    fn naive_zone(&self) -> Option<crate::zone::Zone> {
        None
    }

    /// A failure's context: `what` was being done, and on which database (`reading the
    /// clock on mysql://app@db1/appdb`), never a password.
    fn context(&self, what: &str) -> String;

    /// The driver's failure while doing `what`, as selfheal's error.
    fn failure(&self, what: &str, e: Self::Failure) -> Error {
        Error::database(self.context(what), e)
    }

    /// Runs a query and hands its rows to `each` one at a time, as they come off the wire:
    /// the driver holds no more than one row. The result is read to its end before this
    /// returns, so the connection is free for the next statement. An error from `each`
    /// stops the query and is returned as it is; the driver's own failures are worded with
    /// `what` ([`Driver::context`]).
    fn query(
        &mut self,
        st: &Statement,
        what: &str,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> Result<()>;

    /// Runs a statement that writes `w`'s table: how many rows it matched (not only those
    /// it changed). `Err` says whether the database refused this statement alone or in a
    /// way that fails the run.
    fn execute(&mut self, st: &Statement, w: &Watch) -> std::result::Result<u64, Refusal>;

    /// Whether a group of compare-and-sets is worth making as one statement: each
    /// statement is a round trip to a server (not so for SQLite, in the process).
    fn groups_as_one_statement(&self) -> bool {
        false
    }

    /// Opens a group of writes that commit together (see
    /// [`super::JobTable::begin_writes`]): a transaction in which, where the database can
    /// say so, a write never waits for another's row lock ([`Refusal::Busy`] instead).
    /// `Ok(false)`: no group; each write commits on its own.
    fn begin_writes(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Inside a group of writes.
    fn in_writes(&self) -> bool {
        false
    }

    /// Undoes what the open group wrote; the group stays open.
    fn undo_writes(&mut self) -> Result<()> {
        Ok(())
    }

    /// Commits the open group; afterwards each write commits on its own again. `Err`:
    /// nothing of the group was applied.
    fn commit_writes(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Why a write did not happen.
#[derive(Debug)]
pub enum Refusal {
    /// The database refused this statement alone (a lock wait that ran out, a value strict
    /// mode rejects, a constraint), in its words: the row's write failed, the connection
    /// is fine and the run goes on.
    Statement(String),
    /// Inside a group of writes, another transaction holds the row; nothing was done.
    Busy,
    /// A failure every write of the run meets (the connection is gone, the server takes
    /// no writes, the account may not write the table): the run fails.
    Run(Error),
}

/// One result row as a driver hands it over: its cells, read left to right.
pub trait Row {
    /// The next cell (NULL past the last).
    fn cell(&mut self) -> Cell;
    /// How many cells the row has.
    fn columns(&self) -> usize;
    /// The name of cell `i` as the result names it (`SELECT *`: the column's).
    fn name(&self, i: usize) -> String;
}

/// One cell of a result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub value: SqlValue,
    /// The column's type, where the driver sends it with the value and it tells how to
    /// read a time: [`ColumnType::Timestamp`] (an instant), [`ColumnType::DateTime`] (a
    /// wall-clock time) or [`ColumnType::Decimal`] (unix seconds as digits). `None`: the
    /// value decides (SQLite's values carry no column type).
    pub ty: Option<ColumnType>,
}
