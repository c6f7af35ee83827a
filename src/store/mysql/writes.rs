//! Writes on MySQL: a compare-and-set and what the server's refusal of it means (this row's
//! write failed, or every write of the run will), and groups of writes — a transaction in
//! which no write waits for a row lock, so that selfheal never waits while it holds rows
//! and can never deadlock with the application.

use mysql::prelude::Queryable;

use super::errors::{ServerError, server_kind};
use super::values::values;
use super::{LOCK_DEADLOCK, LOCK_WAIT_S, LOCK_WAIT_TIMEOUT, Mysql};
use crate::config::Watch;
use crate::error::{DbErrorKind, Error, Result};
use crate::store::driver::Refusal;
use crate::store::sql::Statement;

impl Mysql {
    /// Runs a write of `w`'s table: the rows it matched (`CLIENT_FOUND_ROWS`), or why not.
    pub(super) fn write(&mut self, st: &Statement, w: &Watch) -> std::result::Result<u64, Refusal> {
        match self.conn.exec_drop(&st.sql, values(&st.params)) {
            Ok(()) => Ok(self.conn.affected_rows()),
            // Inside a group nothing waits: the row is someone else's for now.
            Err(mysql::Error::MySqlError(e)) if self.in_group && e.code == LOCK_WAIT_TIMEOUT => {
                Err(Refusal::Busy)
            }
            Err(e) => Err(self.refusal(w, e)),
        }
    }

    /// What a write's error means. The run fails ([`Refusal::Run`]) on a deadlock inside
    /// a group (the whole transaction is rolled back, a group lost that only the caller
    /// can account for; selfheal never waits inside a group, so this takes a server that
    /// waits anyway), on a refusal every write of the run meets the same way (the server
    /// takes no writes, the account may not UPDATE the table: the run fails once, exit 3,
    /// not each row with a line of its own), or on the connection. Anything else the
    /// server refused is this statement's alone (a lock wait timeout, strict mode, …):
    /// undone alone, the connection is fine.
    fn refusal(&mut self, w: &Watch, e: mysql::Error) -> Refusal {
        match e {
            mysql::Error::MySqlError(e) if self.in_group && e.code == LOCK_DEADLOCK => {
                self.in_group = false;
                let _ = self.conn.query_drop("ROLLBACK");
                let _ = self.conn.query_drop(format!(
                    "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}"
                ));
                Refusal::Run(self.err("writing", ServerError(e)))
            }
            mysql::Error::MySqlError(e)
                if matches!(
                    server_kind(e.code),
                    DbErrorKind::ReadOnly | DbErrorKind::AccessDenied
                ) =>
            {
                Refusal::Run(self.write_refused(w, e))
            }
            mysql::Error::MySqlError(e) => Refusal::Statement(ServerError(e).to_string()),
            e => Refusal::Run(self.err("writing", e)),
        }
    }

    /// A write the server refuses the way it will refuse every write of the run — it takes
    /// no writes, the account may not UPDATE the table — as one run-level error (exit 3),
    /// with the GRANT that lets this very account write, as the server names it.
    fn write_refused(&mut self, w: &Watch, e: mysql::MySqlError) -> Error {
        let denied = server_kind(e.code) == DbErrorKind::AccessDenied;
        let err = self.err(&format!("writing {}", w.table), ServerError(e));
        if !denied {
            return err;
        }
        let who = self
            .first("SELECT DATABASE(), CURRENT_USER()", None)
            .ok()
            .flatten()
            .map(Vec::into_iter);
        let fix = who.and_then(|mut cells| {
            let db = cells.next().and_then(crate::store::SqlValue::into_text);
            let account = cells.next()?.to_string();
            let (user, host) = account.rsplit_once('@')?;
            let table = match (w.table.schema(), db) {
                (Some(s), _) => format!("`{s}`.`{}`", w.table.name()),
                (None, Some(d)) => format!("`{d}`.`{}`", w.table.name()),
                (None, None) => format!("`{}`", w.table.name()),
            };
            Some(format!(
                "let the account write the table (as a database admin): GRANT SELECT, \
                 UPDATE ON {table} TO '{user}'@'{host}'"
            ))
        });
        err.with_fix(fix)
    }

    /// Opens a group: a transaction in which a locked row fails its statement at once
    /// (0 s: MariaDB ≥ 10.3; MySQL's least is 1 s, so there a locked row is given up after
    /// a second) instead of waiting.
    pub(super) fn begin_group(&mut self) -> Result<bool> {
        self.statements("SET SESSION innodb_lock_wait_timeout = 0; START TRANSACTION")
            .map_err(|(_, e)| self.err("beginning the writes", e))?;
        self.in_group = true;
        Ok(true)
    }

    /// Undoes what the group wrote, and goes on in a new transaction.
    pub(super) fn undo_group(&mut self) -> Result<()> {
        self.conn
            .query_drop("ROLLBACK")
            .and_then(|()| self.conn.query_drop("START TRANSACTION"))
            .map_err(|e| self.err("writing", e))
    }

    /// Commits the group; a write waits for row locks as usual again.
    pub(super) fn commit_group(&mut self) -> Result<()> {
        self.in_group = false;
        // In one round trip; the server runs the second statement only once the first
        // succeeded.
        match self.statements(&format!(
            "COMMIT; SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}"
        )) {
            Ok(_) => Ok(()),
            Err((0, e)) => Err(self.err("committing the writes", e)),
            // Committed. Should the rest fail, the connection is gone and the next
            // statement says so.
            Err(_) => Ok(()),
        }
    }
}
