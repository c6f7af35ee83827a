//! MySQL/MariaDB driver: the usual case on legacy PHP hosts, over a unix socket or TCP.
//!
//! Connects with bounded timeouts, never takes a password from the URL given on the
//! command line (the configuration layer refuses it), asks for `CLIENT_FOUND_ROWS` so
//! "rows affected" means "rows matched", and turns strict SQL mode on for its session (a
//! value a column cannot hold fails its statement; it is never stored mangled). A
//! statement that waits on a row lock gives up after 10 s (`innodb_lock_wait_timeout`),
//! which fails that row's write, not the run.
//!
//! Here: the connection and the [`Driver`]. Beside it: how its values read
//! (`values.rs`), how its failures read (`errors.rs`), groups of writes and the refusals
//! of a write (`writes.rs`), what it says about a table and itself (`schema.rs`:
//! [`Introspect`](crate::store::Introspect)), and how runs coordinate through it
//! (`coordination.rs`: `GET_LOCK`, the session of a stopped run). Where the user,
//! password and socket come from is `store::credentials`.

mod coordination;
mod errors;
mod named;
mod schema;
mod values;
mod writes;

use std::time::Duration;

use mysql::consts::CapabilityFlags;
use mysql::prelude::{Protocol, Queryable};
use mysql::{Conn, QueryResult};

use self::errors::{connect_fix, url_words};
use self::values::{Cells, values};
use super::SqlValue;
use super::credentials::{self, Credentials, Inputs};
use super::driver::{Driver, Refusal, Row};
use super::sql::{Dialect, NamedLockSql, Placeholder, SchemaSql, Statement};
use super::types;
use crate::config::{Database, DbUrl, Watch};
use crate::error::{DbCause, Error, Result};

/// MySQL's and MariaDB's SQL: `` ` `` quotes, `?` placeholders, `<=>` for null-safe
/// equality, the session's `NOW()`, the primary key forced for the compare-and-set, and
/// the schema from `information_schema`.
pub const DIALECT: Dialect = Dialect {
    quote: '`',
    placeholder: Placeholder::Question,
    null_safe_eq: "<=>",
    now: "NOW()",
    epoch_now: "UNIX_TIMESTAMP()",
    zone_now: ("UTC_TIMESTAMP() + INTERVAL ", " SECOND"),
    zone_offset: SqlValue::Int,
    now_plus: ("NOW() + INTERVAL ", " SECOND"),
    force_index: Some("FORCE INDEX"),
    force_primary: " FORCE INDEX (PRIMARY)",
    enforces_types: true,
    epoch_of: Some(("UNIX_TIMESTAMP(", ")")),
    text_literal: types::mysql_literal,
    clock: "SELECT NOW(), UNIX_TIMESTAMP()",
    schema: SchemaSql {
        columns: schema::columns,
        column: schema::column,
        indexes: Some(schema::indexes),
        current_database: Some("SELECT DATABASE()"),
    },
    named_locks: Some(NamedLockSql {
        holders: named::holders,
        sessions: named::sessions,
    }),
};

/// How long a statement waits on a row lock, outside groups of writes.
const LOCK_WAIT_S: u32 = 10;
/// ER_LOCK_WAIT_TIMEOUT and ER_LOCK_DEADLOCK.
const LOCK_WAIT_TIMEOUT: u16 = 1205;
const LOCK_DEADLOCK: u16 = 1213;

/// Strict mode for this session, whatever the server's default: a value the column cannot
/// hold fails the statement instead of being stored mangled (an unknown ENUM member as
/// `''`, a cut string, a number clamped), so no server setting lets a compare-and-set
/// write something the application never wrote. The session's other modes are kept.
const STRICT_SQL_MODE: &str =
    "sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_TRANS_TABLES')";

/// The largest packet the connection sends or takes: 64 MiB.
const MAX_PACKET: usize = 64 << 20;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read or write on the socket may take.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to a MySQL or MariaDB server.
pub struct Mysql {
    conn: Conn,
    /// The URL without any password, for messages.
    label: String,
    creds: Credentials,
    /// Inside a group of writes ([`Driver::begin_writes`]).
    in_group: bool,
}

/// A query that failed: in the driver (its error as it is, for the callers that look at
/// its code), or in what was done with a row.
enum Failed {
    Driver(mysql::Error),
    Each(Error),
}

impl Mysql {
    /// Connects with the settings [`credentials::resolve`] finds. A failure names the URL
    /// (without password), the user, where the password came from and the socket or host,
    /// never the password itself.
    fn connect(db: &Database) -> Result<Self> {
        let DbUrl::Mysql(url) = &db.url else {
            return Err(Error::Usage("not a MySQL URL".into()));
        };
        let label = db.url.label();
        let creds = credentials::resolve(db, &Inputs::from_env())?;
        let mut b = creds
            .builder()?
            .tcp_connect_timeout(Some(CONNECT_TIMEOUT))
            .read_timeout(Some(IO_TIMEOUT))
            .write_timeout(Some(IO_TIMEOUT))
            .additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS)
            // The packet size the driver would otherwise ask the server for on every
            // connection (selfheal's statements are a few KiB, a row it reads as large as
            // the table's); one statement sets the session.
            .max_allowed_packet(Some(MAX_PACKET))
            .init(vec![format!(
                "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}, {STRICT_SQL_MODE}"
            )]);
        if creds.socket.is_some() {
            // Already on the socket: nothing to switch to (the driver would ask which).
            b = b.prefer_socket(false);
        }
        let conn = Conn::new(b).map_err(|e| {
            let fix = connect_fix(&creds, url, &e);
            Error::database(
                format!("cannot connect to {label} ({})", creds.describe()),
                e,
            )
            .with_fix(fix)
        })?;
        Ok(Mysql {
            conn,
            label,
            creds,
            in_group: false,
        })
    }

    fn err(&self, what: &str, e: impl DbCause) -> Error {
        Error::database(self.context(what), e)
    }

    /// Runs `sql` and hands each row to `each`: with its values bound (`params`: the binary
    /// protocol, typed values), or without (`None`: the text protocol, one round trip,
    /// every value as text).
    fn rows(
        &mut self,
        sql: &str,
        params: Option<&[SqlValue]>,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> std::result::Result<(), Failed> {
        // Read from the socket row by row: nothing is buffered.
        fn stream<P: Protocol>(
            result: QueryResult<'_, '_, '_, P>,
            each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
        ) -> std::result::Result<(), Failed> {
            for row in result {
                let row = row.map_err(Failed::Driver)?;
                each(&mut Cells::new(row)).map_err(Failed::Each)?;
            }
            Ok(())
        }
        match params {
            Some(p) => stream(
                self.conn
                    .exec_iter(sql, values(p))
                    .map_err(Failed::Driver)?,
                each,
            ),
            None => stream(self.conn.query_iter(sql).map_err(Failed::Driver)?, each),
        }
    }

    /// The first row of `sql`'s result, every cell (`None`: no row); `params` as for
    /// [`Mysql::rows`]. The driver's error as it is.
    fn first(
        &mut self,
        sql: &str,
        params: Option<&[SqlValue]>,
    ) -> std::result::Result<Option<Vec<SqlValue>>, mysql::Error> {
        let row: Option<mysql::Row> = match params {
            Some(p) => self.conn.exec_first(sql, values(p))?,
            None => self.conn.query_first(sql)?,
        };
        Ok(row.map(|r| Cells::new(r).values()))
    }

    /// Runs `sql`, statements separated by `;` and no values bound, in one round trip:
    /// the first row of each statement's result, or the failure and the statement's place
    /// (from 0). The server stops at a statement that fails.
    fn statements(
        &mut self,
        sql: &str,
    ) -> std::result::Result<Vec<Option<Vec<SqlValue>>>, (usize, mysql::Error)> {
        let mut result = self.conn.query_iter(sql).map_err(|e| (0, e))?;
        let mut firsts = Vec::new();
        while let Some(set) = result.iter() {
            let at = firsts.len();
            let mut first = None;
            for row in set {
                let row = row.map_err(|e| (at, e))?;
                if first.is_none() {
                    first = Some(Cells::new(row).values());
                }
            }
            firsts.push(first);
        }
        Ok(firsts)
    }
}

impl Driver for Mysql {
    type Failure = mysql::Error;

    /// What the mysql crate makes of the URL's options (`?socket=`, `?prefer_socket=`, …).
    fn vet(db: &Database) -> std::result::Result<(), String> {
        let DbUrl::Mysql(url) = &db.url else {
            return Err("not a MySQL URL".into());
        };
        mysql::Opts::from_url(&crate::config::with_host(url).0)
            .map(drop)
            .map_err(|e| crate::config::unusable_mysql_url(url, &url_words(&e)))
    }

    fn open(db: &Database, _read_only: bool) -> Result<Self> {
        Mysql::connect(db)
    }

    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn context(&self, what: &str) -> String {
        format!("{what} on {}", self.label)
    }

    fn query(
        &mut self,
        st: &Statement,
        what: &str,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> Result<()> {
        // The binary protocol: typed values (a DATETIME as a date-time, not as its text).
        match self.rows(&st.sql, Some(&st.params), each) {
            Ok(()) => Ok(()),
            Err(Failed::Each(e)) => Err(e),
            Err(Failed::Driver(e)) => Err(self.failure(what, e)),
        }
    }

    fn execute(&mut self, st: &Statement, w: &Watch) -> std::result::Result<u64, Refusal> {
        self.write(st, w)
    }

    fn groups_as_one_statement(&self) -> bool {
        true
    }

    fn begin_writes(&mut self) -> Result<bool> {
        self.begin_group()
    }

    fn in_writes(&self) -> bool {
        self.in_group
    }

    fn undo_writes(&mut self) -> Result<()> {
        self.undo_group()
    }

    fn commit_writes(&mut self) -> Result<()> {
        self.commit_group()
    }
}
