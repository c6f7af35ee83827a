//! MySQL/MariaDB adapter: the usual case on legacy PHP hosts, over a unix socket or TCP.
//!
//! Connects with bounded timeouts, never takes a password from the URL given on the
//! command line (the configuration layer refuses it), asks for `CLIENT_FOUND_ROWS` so
//! "rows affected" means "rows matched", and turns strict SQL mode on for its session (a
//! value a column cannot hold fails its statement; it is never stored mangled). A statement that waits on a row lock gives up
//! after 10 s (`innodb_lock_wait_timeout`), which fails that row's write, not the run.
//! The advisory lock is `GET_LOCK` (per watch, or per watch and host when rows are owned),
//! released when the connection closes; `doctor` learns from `wsrep_on` whether it reaches
//! every host. Its name is predictable and needs no privilege: any account can take it
//! first, so a run that did not get it can ask who holds it (`IS_USED_LOCK`, and the
//! holder's user and host where `information_schema.PROCESSLIST` shows them).

use std::collections::HashMap;
use std::time::Duration;

use mysql::consts::{CapabilityFlags, ColumnType};
use mysql::prelude::Queryable;
use mysql::{Conn, Value};

use super::credentials::{self, Credentials, Inputs};
use super::sql::{self, Dialect, Placeholder};
use super::types::{self, Column};
use super::{
    AdvisoryLockHolder, CasOutcome, Change, Coordination, CurrentRow, FinishedRow, History,
    Introspect, JobTable, ParkedRow, RunningRow, ScanPlan, Schema, Select, Session, SqlValue,
    StoredRow, TimeValue,
};
use crate::clock::DbClock;
use crate::config::{Database, DbUrl, Ident, Watch, redact_url};
use crate::error::{DbCause, DbErrorKind, Error, Result, SchemaProblem};

/// MySQL's and MariaDB's SQL: `` ` `` quotes, `?` placeholders, `<=>` for null-safe
/// equality, the session's `NOW()`, and the primary key forced for the compare-and-set.
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
};

pub struct MysqlStore {
    conn: Conn,
    /// The URL without any password, for messages.
    label: String,
    creds: Credentials,
    tz: Option<chrono_tz::Tz>,
    /// Inside a group of writes ([`JobTable::begin_writes`]).
    in_group: bool,
    /// A compare-and-set was made in this group's transaction.
    wrote_in_group: bool,
    /// By table: an index whose first column is the status column, found by
    /// [`Introspect::schema`], for the pages of a backlog ([`sql::Dialect::force_index`]).
    status_index: HashMap<String, Ident>,
}

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

impl MysqlStore {
    /// A compare-and-set's error that fails the run, as `Err`: a deadlock inside a group
    /// (the whole transaction is rolled back, a group lost that only the caller can
    /// account for; selfheal never waits inside a group, so this takes a server that
    /// waits anyway), a refusal every write of the run meets the same way (the server
    /// takes no writes, the account may not UPDATE the table: the run fails once, exit 3,
    /// not each row with a line of its own), or the connection. `Ok`: the server refused
    /// this statement alone (undone alone), for the caller to take as it will.
    fn write_error(
        &mut self,
        w: &Watch,
        e: mysql::Error,
    ) -> std::result::Result<mysql::MySqlError, Error> {
        match e {
            mysql::Error::MySqlError(e) if self.in_group && e.code == LOCK_DEADLOCK => {
                self.in_group = false;
                let _ = self.conn.query_drop("ROLLBACK");
                let _ = self.conn.query_drop(format!(
                    "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}"
                ));
                Err(self.err("writing", ServerError(e)))
            }
            mysql::Error::MySqlError(e)
                if matches!(
                    server_kind(e.code),
                    DbErrorKind::ReadOnly | DbErrorKind::AccessDenied
                ) =>
            {
                Err(self.write_refused(w, e))
            }
            mysql::Error::MySqlError(e) => Ok(e),
            e => Err(self.err("writing", e)),
        }
    }

    /// A write the server refuses the way it will refuse every write of the run — it takes
    /// no writes, the account may not UPDATE the table — as one run-level error (exit 3),
    /// with the GRANT that lets this very account write, as the server names it.
    fn write_refused(&mut self, w: &Watch, e: mysql::error::MySqlError) -> Error {
        let denied = server_kind(e.code) == DbErrorKind::AccessDenied;
        let err = self.err(&format!("writing {}", w.table), ServerError(e));
        if !denied {
            return err;
        }
        let who: Option<(Option<String>, String)> = self
            .conn
            .query_first("SELECT DATABASE(), CURRENT_USER()")
            .ok()
            .flatten();
        let fix = who.and_then(|(db, account)| {
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
    /// Connects with the settings [`credentials::resolve`] finds. A failure names the URL
    /// (without password), the user, where the password came from and the socket or host,
    /// never the password itself.
    pub fn connect(db: &Database) -> Result<Self> {
        let DbUrl::Mysql(url) = &db.url else {
            return Err(Error::Usage("not a MySQL URL".into()));
        };
        let label = redact_url(url);
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
        Ok(MysqlStore {
            conn,
            label,
            creds,
            tz: db.timezone,
            in_group: false,
            wrote_in_group: false,
            status_index: HashMap::new(),
        })
    }

    /// When the server started, in unix seconds on its own clock.
    fn server_started(&mut self) -> std::result::Result<i64, mysql::Error> {
        let now: Option<i64> = self.conn.query_first("SELECT UNIX_TIMESTAMP()")?;
        let up: Option<(String, i64)> =
            self.conn.query_first("SHOW GLOBAL STATUS LIKE 'Uptime'")?;
        Ok(now.unwrap_or(0) - up.map_or(0, |u| u.1))
    }

    fn err(&self, what: &str, e: impl DbCause) -> Error {
        Error::database(format!("{what} on {}", self.label), e)
    }

    /// A failure in selfheal's own words (an answer that makes no sense).
    fn odd(&self, what: &str, message: impl Into<String>) -> Error {
        Error::database_kind(
            format!("{what} on {}", self.label),
            DbErrorKind::Other,
            message.into(),
        )
    }
}

/// What the driver makes of a MySQL URL's options (`?socket=`, `?prefer_socket=`, …):
/// `Err` says why it cannot use them, in its words (without its braces).
pub fn vet_url(url: &str) -> std::result::Result<(), String> {
    mysql::Opts::from_url(&crate::config::with_host(url).0)
        .map(drop)
        .map_err(|e| url_words(&e))
}

/// The kind of a server error, by its number.
fn server_kind(code: u16) -> DbErrorKind {
    match code {
        // ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR,
        // ER_COLUMNACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR,
        // ER_PROCACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR (MySQL).
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 | 1698 => DbErrorKind::AccessDenied,
        // ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR.
        1049 | 1146 | 1054 => DbErrorKind::UnknownObject,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED (MariaDB).
        1040 | 1053 | 1927 => DbErrorKind::Unreachable,
        // ER_LOCK_WAIT_TIMEOUT, ER_STATEMENT_TIMEOUT (MariaDB), ER_QUERY_TIMEOUT (MySQL).
        LOCK_WAIT_TIMEOUT | 1969 | 3024 => DbErrorKind::TimedOut,
        // ER_OPTION_PREVENTS_STATEMENT (--read-only), ER_READ_ONLY_MODE,
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_OPEN_AS_READONLY.
        1290 | 1836 | 1792 | 1036 => DbErrorKind::ReadOnly,
        _ => DbErrorKind::Other,
    }
}

impl DbCause for mysql::Error {
    fn kind(&self) -> DbErrorKind {
        use mysql::DriverError as D;
        match self {
            mysql::Error::MySqlError(e) => server_kind(e.code),
            mysql::Error::IoError(e) => DbErrorKind::of_io(e.kind()),
            // The codec's own type is not re-exported; its source is the I/O error.
            mysql::Error::CodecError(c) => {
                codec_io(c).map_or(DbErrorKind::Other, |e| DbErrorKind::of_io(e.kind()))
            }
            mysql::Error::DriverError(D::ConnectTimeout | D::Timeout) => DbErrorKind::TimedOut,
            mysql::Error::DriverError(D::CouldNotConnect(Some((_, _, kind)))) => {
                DbErrorKind::of_io(*kind)
            }
            mysql::Error::DriverError(D::CouldNotConnect(None)) => DbErrorKind::Unreachable,
            _ => DbErrorKind::Other,
        }
    }

    fn into_source(self) -> crate::error::BoxError {
        Box::new(Failure(self))
    }
}

/// The I/O error under a codec error, if that is what it is.
fn codec_io<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    c.source().and_then(|s| s.downcast_ref::<std::io::Error>())
}

/// A driver failure in selfheal's words: the server's own message and number, the socket
/// or address that does not answer, a timeout with its limit. (The driver's `Display` is
/// its debug form, `MySqlError { ERROR 1045 … }`; it stays reachable as the source.)
#[derive(Debug)]
struct Failure(mysql::Error);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use mysql::DriverError as D;
        match &self.0 {
            mysql::Error::MySqlError(e) => write!(f, "{} (error {})", e.message, e.code),
            mysql::Error::IoError(e) => f.write_str(&io_words(e)),
            mysql::Error::CodecError(c) => match codec_io(c) {
                Some(e) => f.write_str(&io_words(e)),
                None => write!(f, "{c}"),
            },
            mysql::Error::DriverError(D::ConnectTimeout) => write!(
                f,
                "no answer to the connection attempt: timed out after {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
            mysql::Error::DriverError(D::CouldNotConnect(Some((addr, desc, _)))) => {
                write!(f, "nothing answers at {addr}: {desc}")
            }
            mysql::Error::DriverError(D::CouldNotConnect(None)) => {
                f.write_str("no address to connect to")
            }
            mysql::Error::DriverError(D::Timeout) => f.write_str("timed out"),
            mysql::Error::DriverError(d) => write!(f, "{d}"),
            mysql::Error::UrlError(u) => write!(f, "a bad URL: {}", url_words(u)),
            mysql::Error::FromValueError(_) | mysql::Error::FromRowError(_) => {
                f.write_str("the server sent a value of an unexpected type")
            }
            mysql::Error::TlsError(t) => write!(f, "TLS: {t}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// An I/O failure on the connection, in words: a read or write that ran past its limit is
/// a timeout (Linux reports it as EAGAIN), a closed socket is a lost connection.
fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::WouldBlock | K::TimedOut => format!(
            "the server did not answer: timed out after {} s",
            IO_TIMEOUT.as_secs()
        ),
        K::UnexpectedEof | K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted => {
            "the server closed the connection (stopped, restarted, or it ended this session)".into()
        }
        _ => e.to_string(),
    }
}

/// A URL error without the driver's braces.
fn url_words(u: &mysql::UrlError) -> String {
    match u {
        mysql::UrlError::ParseError(p) => p.to_string(),
        other => other.to_string(),
    }
}

/// The fix for a connection that failed, from the server's error number or how the socket
/// or address failed, and the settings that were used (never the password).
fn connect_fix(creds: &Credentials, url: &str, e: &mysql::Error) -> Option<String> {
    use mysql::DriverError as D;
    use std::io::ErrorKind as K;
    let user = creds.user.as_ref().map_or("", |u| u.value.as_str());
    let me = crate::fix::Me::current();
    let account_host = if creds.socket.is_some() {
        "localhost"
    } else {
        "%"
    };
    let timed_out = || {
        format!(
            "the server took the connection but did not answer within {} s: it is stopped \
             (SIGSTOP), frozen or overloaded; look at its error log, and at SHOW \
             PROCESSLIST from another session",
            IO_TIMEOUT.as_secs()
        )
    };
    match e {
        mysql::Error::MySqlError(se) => match se.code {
            1045 => Some(match creds.password_source() {
                Some(src) => format!(
                    "the server refused {user} with the password from {src}: correct it \
                     there, or set the account's password on the server (ALTER USER \
                     '{user}'@'{account_host}' IDENTIFIED BY '…')"
                ),
                None => format!(
                    "{user} needs a password: write it into a file only selfheal's user \
                     can read and name that file as database.password_file (or put it in \
                     database.defaults_file)"
                ),
            }),
            1698 => Some(format!(
                "the server refused {user} without a password: the account does not exist, \
                 or it logs in only as the system user of the same name over the socket \
                 (unix_socket), and selfheal runs as {}; give selfheal a database account of \
                 its own with its password in an option file root and group {1} may read \
                 (database.defaults_file, mode 640, root:{1})",
                me.name,
                crate::fix::reader_group()
            )),
            1044 => {
                let db = mysql::Opts::from_url(&crate::config::with_host(url).0)
                    .ok()
                    .and_then(|o| o.get_db_name().map(str::to_string))
                    .unwrap_or_else(|| "DB".into());
                Some(format!(
                    "grant {user} the rights selfheal needs on that database: GRANT SELECT, \
                     UPDATE ON `{db}`.* TO '{user}'@'{account_host}'"
                ))
            }
            1049 => Some(format!(
                "correct the database name in [database] url (SHOW DATABASES lists the ones \
                 {user} may see)"
            )),
            1040 => Some(
                "the server has no connection left (max_connections): see SHOW PROCESSLIST; \
                 the next run tries again"
                    .into(),
            ),
            _ => None,
        },
        mysql::Error::DriverError(D::CouldNotConnect(Some((addr, _, kind)))) => {
            let socket = creds.socket.as_ref().filter(|s| s.value == *addr);
            match (kind, socket) {
                (K::NotFound, Some(s)) => Some(format!(
                    "no socket at {addr} (from {}): is the server running (systemctl status \
                     mariadb)? If it is, SHOW VARIABLES LIKE 'socket' names its socket: set \
                     it as ?socket= in [database] url",
                    s.source
                )),
                (K::ConnectionRefused, Some(_)) => Some(format!(
                    "{addr} is there but no server listens on it: the server is stopped or \
                     crashed (systemctl status mariadb)"
                )),
                (K::PermissionDenied, Some(_)) => {
                    crate::fix::access_fix(std::path::Path::new(addr), crate::fix::Need::ReadWrite)
                }
                (K::ConnectionRefused, None) => Some(format!(
                    "nothing listens on {addr}: is the server running, and does it listen \
                     there (port, bind-address)?"
                )),
                _ => None,
            }
        }
        mysql::Error::DriverError(D::ConnectTimeout) => Some(format!(
            "no answer from {}:{} within {} s: is the host up, and does a firewall drop the \
             packets?",
            creds.host.value,
            creds.port.value,
            CONNECT_TIMEOUT.as_secs()
        )),
        mysql::Error::IoError(io) if matches!(io.kind(), K::WouldBlock | K::TimedOut) => {
            Some(timed_out())
        }
        mysql::Error::CodecError(c)
            if codec_io(c).is_some_and(|io| matches!(io.kind(), K::WouldBlock | K::TimedOut)) =>
        {
            Some(timed_out())
        }
        _ => None,
    }
}

/// A server error as selfheal words it: `message (error code)`.
#[derive(Debug, thiserror::Error)]
#[error("{} (error {})", .0.message, .0.code)]
struct ServerError(mysql::MySqlError);

impl DbCause for ServerError {
    fn kind(&self) -> DbErrorKind {
        server_kind(self.0.code)
    }
}

/// A statement's bound values, as the driver takes them.
fn values(st: &sql::Statement) -> Vec<Value> {
    st.params.iter().map(to_value).collect()
}

fn to_value(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::NULL,
        SqlValue::Int(i) => Value::Int(*i),
        SqlValue::UInt(u) => Value::UInt(*u),
        SqlValue::Float(f) => Value::Double(*f),
        SqlValue::Text(s) => Value::Bytes(s.as_bytes().to_vec()),
        SqlValue::Bytes(b) => Value::Bytes(b.clone()),
        SqlValue::DateTime(d) => {
            use chrono::{Datelike, Timelike};
            // chrono's month to second always fit a u8; a year outside 0-65535 (DATETIME
            // holds 1000-9999) goes as its text, which no stored date-time equals and strict
            // mode will not store, never as a wrapped year.
            match (
                u16::try_from(d.year()),
                u8::try_from(d.month()),
                u8::try_from(d.day()),
                u8::try_from(d.hour()),
                u8::try_from(d.minute()),
                u8::try_from(d.second()),
            ) {
                (Ok(year), Ok(month), Ok(day), Ok(hour), Ok(minute), Ok(second)) => {
                    let micros = d.nanosecond() / 1_000;
                    Value::Date(year, month, day, hour, minute, second, micros)
                }
                _ => Value::Bytes(d.to_string().into_bytes()),
            }
        }
    }
}

/// A result row read cell by cell, left to right, each with its wire type (a missing
/// cell reads as NULL).
struct Cells(std::iter::Zip<std::vec::IntoIter<Value>, std::vec::IntoIter<ColumnType>>);

impl Cells {
    fn new(row: mysql::Row) -> Self {
        let types: Vec<ColumnType> = row
            .columns_ref()
            .iter()
            .map(mysql::Column::column_type)
            .collect();
        Cells(row.unwrap().into_iter().zip(types))
    }

    fn next_cell(&mut self) -> (SqlValue, ColumnType) {
        self.0
            .next()
            .map_or((SqlValue::Null, ColumnType::MYSQL_TYPE_NULL), |(v, t)| {
                (from_value(v), t)
            })
    }
}

fn from_value(v: Value) -> SqlValue {
    match v {
        Value::NULL => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(i),
        Value::UInt(u) => SqlValue::UInt(u),
        Value::Float(f) => SqlValue::Float(f64::from(f)),
        Value::Double(f) => SqlValue::Float(f),
        Value::Bytes(b) => match String::from_utf8(b) {
            Ok(s) => SqlValue::Text(s),
            Err(e) => SqlValue::Bytes(e.into_bytes()),
        },
        Value::Date(y, mo, d, h, mi, s, us) => {
            chrono::NaiveDate::from_ymd_opt(y.into(), mo.into(), d.into())
                .and_then(|date| date.and_hms_micro_opt(h.into(), mi.into(), s.into(), us))
                .map_or_else(
                    || SqlValue::Text(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")),
                    SqlValue::DateTime,
                )
        }
        Value::Time(neg, d, h, m, s, _) => SqlValue::Text(format!(
            "{}{}:{m:02}:{s:02}",
            if neg { "-" } else { "" },
            d * 24 + u32::from(h)
        )),
    }
}

/// The instant the server gave a time cell (`UNIX_TIMESTAMP(col)`): whole seconds of an
/// integer or a decimal (`DATETIME(6)` gives fractions); `None` for NULL (a value the
/// server cannot place) or anything else.
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

/// A time cell, understood by its wire type and the instant the server gave it (the cell
/// after it): a TIMESTAMP and a naive DATETIME with no `timezone` configured are the
/// server's own instants; a DATETIME with one is placed in that zone; a DECIMAL comes as
/// its digits.
fn time_value(
    raw: SqlValue,
    wire: ColumnType,
    epoch: &SqlValue,
    tz: Option<chrono_tz::Tz>,
) -> TimeValue {
    let ty = match wire {
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => {
            Some(types::ColumnType::Timestamp)
        }
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => {
            Some(types::ColumnType::DateTime)
        }
        // Sent as digits: unix seconds with a fraction.
        ColumnType::MYSQL_TYPE_NEWDECIMAL | ColumnType::MYSQL_TYPE_DECIMAL => {
            Some(types::ColumnType::Decimal)
        }
        _ => None,
    };
    let clock = types::NaiveClock::Server(server_epoch(epoch));
    types::time_value(raw, ty.as_ref(), tz, clock)
}

/// What `@@GLOBAL.wsrep_on` says about `GET_LOCK`: with Galera replication on, the lock is
/// held on one node only, so hosts connected to different nodes do not see each other's.
fn wsrep_gap(wsrep_on: Option<&SqlValue>) -> Option<String> {
    let on = match wsrep_on? {
        SqlValue::Int(n) => *n != 0,
        SqlValue::UInt(n) => *n != 0,
        SqlValue::Text(t) => t.eq_ignore_ascii_case("ON") || t == "1",
        _ => false,
    };
    on.then(|| {
        "wsrep_on is ON (a Galera cluster): GET_LOCK is held on one node only, so runs \
         connected to different nodes do not turn each other away"
            .to_string()
    })
}

/// A `GET_LOCK` name at most 64 characters long: `selfheal/DB/WATCH`, the same on every
/// host for one watch, or `selfheal/DB/WATCH@HOST` when each host judges its own rows.
fn advisory_name(db: &str, watch: &str, host: Option<&str>) -> String {
    let name = match host {
        Some(h) => format!("selfheal/{db}/{watch}@{h}"),
        None => format!("selfheal/{db}/{watch}"),
    };
    if name.len() <= 64 {
        return name;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // The longest head of at most 47 bytes that ends on a character boundary (`get` is
    // `None` inside a multi-byte character).
    let head = (0..=64 - 17)
        .rev()
        .find_map(|n| name.get(..n))
        .unwrap_or_default();
    format!("{head}#{h:016x}")
}

impl JobTable for MysqlStore {
    fn clock(&mut self) -> Result<DbClock> {
        // The binary protocol (exec) returns typed values; the text protocol would not.
        let row: Option<(Value, i64)> = self
            .conn
            .exec_first("SELECT NOW(), UNIX_TIMESTAMP()", ())
            .map_err(|e| self.err("reading the clock", e))?;
        let Some((now, epoch)) = row else {
            return Err(self.odd("reading the clock", "no row"));
        };
        match from_value(now) {
            SqlValue::DateTime(now_naive) => Ok(DbClock {
                now_naive,
                now_epoch: epoch,
            }),
            other => Err(self.odd("reading the clock", format!("NOW() returned {other}"))),
        }
    }

    fn each_row(
        &mut self,
        w: &Watch,
        sel: Select<'_>,
        each: &mut dyn FnMut(StoredRow) -> Result<()>,
    ) -> Result<()> {
        // A page after the first is read through the status index (see force_index).
        let index = self.status_index.get(&w.table.to_string()).cloned();
        let sel = match sel {
            Select::Running(page) if page.after.is_some() => Select::Running(sql::Page {
                index: index.as_ref(),
                ..page
            }),
            other => other,
        };
        let st = sql::rows_sql(&DIALECT, w, sel);
        let tz = self.tz;
        let label = self.label.clone();
        let what = sel.what();
        let ctx = |e: mysql::Error| {
            Error::database(format!("reading {what} of {} on {label}", w.table), e)
        };
        let result = self.conn.exec_iter(&st.sql, values(&st)).map_err(ctx)?;
        for row in result {
            let row = row.map_err(ctx)?;
            let mut cells = Cells::new(row);
            let mut next = || cells.next_cell();
            let (id, _) = next();
            let (s, st) = next();
            let started = time_value(s, st, &next().0, tz);
            let heartbeat = w.heartbeat_column.as_ref().map(|_| {
                let (v, t) = next();
                time_value(v, t, &next().0, tz)
            });
            let owner_raw = match w.owner_column {
                Some(_) => next().0,
                None => SqlValue::Null,
            };
            let owner = owner_raw.clone().into_text();
            let attempts = w.retry.as_ref().map(|_| next().0.into_count());
            let status = if sql::rows_have_status(sel) {
                next().0
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
        let row: Option<mysql::Row> = self
            .conn
            .exec_first(&st.sql, values(&st))
            .map_err(|e| self.err(&format!("reading a row of {}", w.table), e))?;
        Ok(row.map(|r| {
            let names: Vec<String> = r
                .columns_ref()
                .iter()
                .map(|c| c.name_str().into_owned())
                .collect();
            names
                .into_iter()
                .zip(r.unwrap().into_iter().map(from_value))
                .collect()
        }))
    }

    fn compare_and_set(
        &mut self,
        w: &Watch,
        schema: &Schema,
        c: &Change<'_>,
    ) -> Result<CasOutcome> {
        let st = sql::cas_sql(&DIALECT, w, schema, c);
        self.wrote_in_group = self.in_group;
        match self.conn.exec_drop(&st.sql, values(&st)) {
            Ok(()) => match self.conn.affected_rows() {
                1 => Ok(CasOutcome::Applied),
                0 => Ok(CasOutcome::LostRace),
                n => Ok(CasOutcome::Failed(format!(
                    "the update matched {n} rows; {} is not unique",
                    w.id_column
                ))),
            },
            // Inside a group nothing waits: the row is someone else's for now.
            Err(mysql::Error::MySqlError(e)) if self.in_group && e.code == LOCK_WAIT_TIMEOUT => {
                Ok(CasOutcome::Busy)
            }
            // The server refused this statement (lock wait timeout, strict mode, …): this
            // row's write failed (the statement alone is undone), the connection is fine.
            Err(e) => self
                .write_error(w, e)
                .map(|refused| CasOutcome::Failed(ServerError(refused).to_string())),
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
        let label = self.label.clone();
        let ctx = |e: mysql::Error| {
            Error::database(
                format!("reading finished rows of {} on {label}", w.table),
                e,
            )
        };
        // exec_iter reads the result set from the socket row by row: nothing is buffered.
        let result = self.conn.exec_iter(&st.sql, values(&st)).map_err(ctx)?;
        for row in result {
            let row = row.map_err(ctx)?;
            let mut cells = Cells::new(row);
            let mut next = || cells.next_cell();
            let (id, _) = next();
            let (s, st) = next();
            let started = time_value(s, st, &next().0, tz);
            let (e, et) = next();
            let ended = time_value(e, et, &next().0, tz);
            let status = next().0.to_string();
            let marked = next().0.into_text();
            let matched = !sql::finished_has_match_cell(w, scope) || next().0.into_count() == 1;
            let row = FinishedRow {
                id,
                started,
                ended,
                status,
                marked,
                matched,
            };
            if super::is_finished(w, &row) {
                each(row)?;
            }
        }
        Ok(())
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
        if !self.in_group
            || self.wrote_in_group
            || !schema.id_is_primary
            || changes.len() < 2
            || !changes.iter().all(sweep_like)
        {
            return Ok(None);
        }
        let st = sql::cas_group_update_sql(&DIALECT, w, schema, changes);
        match self.conn.exec_drop(&st.sql, values(&st)) {
            Ok(()) => {}
            // A row someone else holds (a lock wait timeout), or anything else the server
            // refuses (a strict mode, a trigger): the statement is undone alone (the
            // transaction stays); each row on its own, then, with its own outcome.
            Err(e) => {
                self.write_error(w, e)?;
                return Ok(None);
            }
        }
        let n = self.conn.affected_rows();
        if n == changes.len() as u64 {
            self.wrote_in_group = true;
            return Ok(Some(vec![CasOutcome::Applied; changes.len()]));
        }
        // A row moved on between the read and the write. Which one only the rows could
        // say, and a row written as selfheal would have written it may be its worker's:
        // the group is undone, and each row is written (or not) on its own.
        self.conn
            .query_drop("ROLLBACK")
            .and_then(|()| self.conn.query_drop("START TRANSACTION"))
            .map_err(|e| self.err("writing", e))?;
        Ok(None)
    }

    fn groups_compare_and_sets(&self) -> bool {
        true
    }

    fn begin_writes(&mut self) -> Result<bool> {
        // 0: a locked row fails the statement at once (MariaDB ≥ 10.3; MySQL's least is
        // 1 s, so there a locked row is given up after a second).
        self.conn
            .query_drop("SET SESSION innodb_lock_wait_timeout = 0")
            .and_then(|()| self.conn.query_drop("START TRANSACTION"))
            .map_err(|e| self.err("beginning the writes", e))?;
        self.in_group = true;
        self.wrote_in_group = false;
        Ok(true)
    }

    fn commit_writes(&mut self) -> Result<()> {
        self.in_group = false;
        self.conn
            .query_drop("COMMIT")
            .map_err(|e| self.err("committing the writes", e))?;
        // Committed. Should this fail, the connection is gone and the next statement
        // says so.
        let _ = self.conn.query_drop(format!(
            "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}"
        ));
        Ok(())
    }

    fn count_parked(&mut self, w: &Watch, manual: &str) -> Result<u64> {
        let st = sql::parked_count_sql(&DIALECT, w, manual);
        let n: Option<u64> = self
            .conn
            .exec_first(&st.sql, values(&st))
            .map_err(|e| self.err(&format!("counting parked rows of {}", w.table), e))?;
        Ok(n.unwrap_or(0))
    }

    fn parked_rows(&mut self, w: &Watch, manual: &str, limit: u32) -> Result<Vec<ParkedRow>> {
        let st = sql::parked_sql(&DIALECT, w, manual, limit);
        let tz = self.tz;
        let rows: Vec<mysql::Row> = self
            .conn
            .exec(&st.sql, values(&st))
            .map_err(|e| self.err(&format!("reading parked rows of {}", w.table), e))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut cells = Cells::new(r);
                let (id, _) = cells.next_cell();
                let (s, t) = cells.next_cell();
                let epoch = cells.next_cell().0;
                ParkedRow {
                    id,
                    started: time_value(s, t, &epoch, tz),
                }
            })
            .collect())
    }

    fn current_row(&mut self, w: &Watch, id: &SqlValue) -> Result<Option<CurrentRow>> {
        let st = sql::current_sql(&DIALECT, w, id);
        let label = self.label.clone();
        let ctx = |e: mysql::Error| {
            Error::database(format!("reading a row of {} on {label}", w.table), e)
        };
        let row: Option<mysql::Row> = self.conn.exec_first(&st.sql, values(&st)).map_err(ctx)?;
        Ok(row.map(|r| {
            let mut vals = r.unwrap().into_iter().map(from_value);
            let mut next = || vals.next().unwrap_or(SqlValue::Null);
            let status = next();
            let started = next();
            let message = next();
            CurrentRow {
                status,
                started,
                message: w.message_column.as_ref().map(|_| message),
            }
        }))
    }
}

impl Introspect for MysqlStore {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn describe_server(&mut self) -> Result<String> {
        let v: Option<String> = self
            .conn
            .query_first("SELECT VERSION()")
            .map_err(|e| self.err("reading the version", e))?;
        let v = v.unwrap_or_default();
        let kind = if v.to_ascii_lowercase().contains("mariadb") {
            "mariadb"
        } else {
            "mysql"
        };
        Ok(format!("{kind} {v}"))
    }

    fn connection(&self) -> String {
        format!("{} ({})", self.label, self.creds.describe())
    }

    fn notes(&self) -> Vec<String> {
        self.creds.notes.clone()
    }

    fn schema(&mut self, w: &Watch) -> Result<Schema> {
        let rows: Vec<(String, String, String, Option<u64>, String)> = self
            .conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, EXTRA \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
                (w.table.schema(), w.table.name()),
            )
            .map_err(|e| self.err("reading the schema", e))?;
        if rows.is_empty() {
            let db: Option<String> = if w.table.schema().is_none() {
                self.conn
                    .query_first::<Option<String>, _>("SELECT DATABASE()")
                    .map_err(|e| self.err("reading the schema", e))?
                    .flatten()
            } else {
                w.table.schema().map(str::to_string)
            };
            return Err(Error::Schema {
                watch: w.name.clone(),
                problem: match db {
                    Some(db) => SchemaProblem::NoTable {
                        table: w.table.to_string(),
                        place: format!("database {db}"),
                    },
                    None => SchemaProblem::NoDatabase {
                        table: w.table.to_string(),
                    },
                },
            });
        }
        let columns = rows
            .iter()
            .map(|(name, data_type, column_type, len, extra)| {
                (
                    name.to_ascii_lowercase(),
                    Column::mysql(data_type, column_type, *len, extra),
                )
            })
            .collect();
        // The indexes: the primary key, and one that starts with the status column (the
        // one with fewest columns) for the pages of a backlog.
        let indexes: Vec<(String, u32, String)> = self
            .conn
            .exec(
                "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                (w.table.schema(), w.table.name()),
            )
            .map_err(|e| self.err("reading the indexes", e))?;
        let width = |name: &str| indexes.iter().filter(|(n, _, _)| n == name).count();
        let primary: Vec<&String> = indexes
            .iter()
            .filter(|(n, _, _)| n == "PRIMARY")
            .map(|(_, _, c)| c)
            .collect();
        let id_is_primary =
            primary.len() == 1 && primary[0].eq_ignore_ascii_case(w.id_column.name());
        let status_index = indexes
            .iter()
            .filter(|(n, seq, c)| {
                *seq == 1 && n != "PRIMARY" && c.eq_ignore_ascii_case(w.status_column.name())
            })
            .min_by_key(|(n, _, _)| width(n))
            .and_then(|(n, _, _)| Ident::column(n).ok());
        match status_index {
            Some(ix) => self.status_index.insert(w.table.to_string(), ix),
            None => self.status_index.remove(&w.table.to_string()),
        };
        types::schema(w, &DIALECT, self.tz, columns, id_is_primary)
    }

    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan> {
        let st = sql::running_sql(&DIALECT, w);
        let rows: Vec<mysql::Row> = self
            .conn
            .exec(format!("EXPLAIN {}", st.sql), values(&st))
            .map_err(|e| self.err("EXPLAIN of the running-rows query", e))?;
        let text = |r: &mysql::Row, col: &str| -> Option<String> {
            match r.get_opt::<Value, _>(col)?.ok()? {
                Value::NULL => None,
                v => Some(from_value(v).to_string()),
            }
        };
        let table = w.table.name();
        let row = rows
            .iter()
            .find(|r| text(r, "table").as_deref() == Some(table))
            .or(rows.first())
            .ok_or_else(|| self.odd("EXPLAIN of the running-rows query", "no plan"))?;
        // `ALL` reads the table, `index` the whole of an index (e.g. PRIMARY for the ORDER
        // BY): both are full scans whatever `key` says.
        let access = text(row, "type").unwrap_or_default();
        let full_scan = access.eq_ignore_ascii_case("ALL") || access.eq_ignore_ascii_case("index");
        let index = text(row, "key").filter(|_| !full_scan);
        let candidates = text(row, "possible_keys")
            .map(|k| k.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        let rows_estimate = text(row, "rows").and_then(|r| r.parse().ok());
        let detail = format!(
            "EXPLAIN: type {access}, key {}, rows {}{}",
            text(row, "key").as_deref().unwrap_or("NULL"),
            rows_estimate.map_or("?".into(), |r: u64| r.to_string()),
            text(row, "Extra")
                .filter(|e| !e.is_empty())
                .map(|e| format!(", {e}"))
                .unwrap_or_default()
        );
        Ok(ScanPlan {
            index,
            candidates,
            rows: rows_estimate,
            detail,
        })
    }

    fn column_definition(&mut self, w: &Watch, column: &Ident) -> Result<Option<String>> {
        let row: Option<mysql::Row> = self
            .conn
            .query_first(format!("SHOW CREATE TABLE {}", DIALECT.quote(&w.table)))
            .map_err(|e| self.err("SHOW CREATE TABLE", e))?;
        let create = row.and_then(|r| match r.as_ref(1) {
            Some(Value::Bytes(b)) => String::from_utf8(b.clone()).ok(),
            _ => None,
        });
        Ok(create.and_then(|c| definition_in(&c, column.name())))
    }

    fn equal_under_collation(
        &mut self,
        w: &Watch,
        column: &Ident,
        a: &str,
        b: &str,
    ) -> Result<Option<String>> {
        let found: Option<(Option<String>, Option<String>)> = self
            .conn
            .exec_first(
                "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                 AND COLUMN_NAME = ?",
                (w.table.schema(), w.table.name(), column.name()),
            )
            .map_err(|e| self.err("reading a column's collation", e))?;
        // Names from the server go into the statement: only plain ones do.
        let plain =
            |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let Some((Some(charset), Some(collation))) = found else {
            return Ok(None);
        };
        if !plain(&charset) || !plain(&collation) {
            return Ok(None);
        }
        let equal: Option<i64> = self
            .conn
            .exec_first(
                format!(
                    "SELECT CONVERT(? USING {charset}) COLLATE {collation} = \
                     CONVERT(? USING {charset}) COLLATE {collation}"
                ),
                (a, b),
            )
            .map_err(|e| self.err("comparing match values under the column's collation", e))?;
        Ok((equal == Some(1)).then_some(collation))
    }

    fn advisory_lock_gap(&mut self) -> Result<Option<String>> {
        match self
            .conn
            .query_first::<Value, _>("SELECT @@GLOBAL.wsrep_on")
        {
            Ok(v) => Ok(wsrep_gap(v.map(from_value).as_ref())),
            // ER_UNKNOWN_SYSTEM_VARIABLE: a server built without Galera.
            Err(mysql::Error::MySqlError(e)) if e.code == 1193 => Ok(None),
            Err(e) => Err(self.err("reading wsrep_on", e)),
        }
    }

    fn session_time_zone(&mut self) -> Result<String> {
        let row: Option<(String, String, String)> = self
            .conn
            .query_first(
                "SELECT @@session.time_zone, @@system_time_zone, \
                 TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i')",
            )
            .map_err(|e| self.err("reading the session time zone", e))?;
        let Some((session, system, offset)) = row else {
            return Err(self.odd("reading the session time zone", "no row"));
        };
        let offset = if offset.starts_with('-') {
            offset
        } else {
            format!("+{offset}")
        };
        Ok(if session.eq_ignore_ascii_case("SYSTEM") {
            format!("SYSTEM (the server's {system}), UTC{offset} now")
        } else {
            format!("{session}, UTC{offset} now")
        })
    }
}

/// The definition of `column` in a `CREATE TABLE` statement as MySQL writes it (one
/// column a line, names in backquotes): what follows the name, without the comma.
fn definition_in(create: &str, column: &str) -> Option<String> {
    let name = format!("`{column}` ");
    create.lines().map(str::trim).find_map(|l| {
        let (head, rest) = l.split_at_checked(name.len())?;
        head.eq_ignore_ascii_case(&name)
            .then(|| rest.trim_end_matches(',').to_string())
    })
}

impl Coordination for MysqlStore {
    fn session(&mut self) -> Option<Session> {
        Some(Session {
            connection: u64::from(self.conn.connection_id()),
            server_started: self.server_started().ok()?,
        })
    }

    fn end_session(&mut self, old: &Session) -> Result<bool> {
        // A restarted server has ended every session of before, and may have given the
        // old connection id to someone else since: never touch that one.
        let started = self
            .server_started()
            .map_err(|e| self.err("looking for a stopped run's session", e))?;
        if (started - old.server_started).abs() > 5 {
            return Ok(true);
        }
        // A statement waits on a row lock for at most innodb_lock_wait_timeout (10 s, set
        // at connect); KILL ends it at once where the account may (its own sessions).
        let id = old.connection;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut killed = false;
        loop {
            let n: Option<i64> = self
                .conn
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                    (id,),
                )
                .map_err(|e| self.err("looking for a stopped run's session", e))?;
            if n.unwrap_or(0) == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() > deadline {
                return Ok(false);
            }
            if !killed {
                killed = true;
                // Refused (another account's session): wait for it instead.
                let _ = self.conn.query_drop(format!("KILL {id}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_watch_lock(&mut self, w: &Watch, host: Option<&str>) -> Result<bool> {
        let name = self.watch_lock_name(w, host, "GET_LOCK")?;
        let got: Option<Option<i64>> = self
            .conn
            .exec_first("SELECT GET_LOCK(?, 0)", (name,))
            .map_err(|e| self.err("GET_LOCK", e))?;
        Ok(got.flatten() == Some(1))
    }

    fn watch_lock_holder(
        &mut self,
        w: &Watch,
        host: Option<&str>,
    ) -> Result<Option<AdvisoryLockHolder>> {
        const WHAT: &str = "asking who holds the advisory lock";
        let lock = self.watch_lock_name(w, host, WHAT)?;
        let id: Option<Option<u64>> = self
            .conn
            .exec_first("SELECT IS_USED_LOCK(?)", (lock.as_str(),))
            .map_err(|e| self.err(WHAT, e))?;
        let Some(connection) = id.flatten() else {
            return Ok(None);
        };
        // Only the connections this account may see (all of them with PROCESS).
        let who: Option<(Option<String>, Option<String>)> = self
            .conn
            .exec_first(
                "SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = ?",
                (connection,),
            )
            .map_err(|e| self.err(WHAT, e))?;
        let (user, host) = who.unwrap_or((None, None));
        Ok(Some(AdvisoryLockHolder {
            lock,
            connection,
            user,
            host,
        }))
    }
}

impl MysqlStore {
    /// The name of `w`'s advisory lock ([`advisory_name`]) in the database the watch's
    /// table is in.
    fn watch_lock_name(&mut self, w: &Watch, host: Option<&str>, what: &str) -> Result<String> {
        let db: Option<String> = match w.table.schema() {
            Some(s) => Some(s.to_string()),
            None => self
                .conn
                .query_first::<Option<String>, _>("SELECT DATABASE()")
                .map_err(|e| self.err(what, e))?
                .flatten(),
        };
        Ok(advisory_name(db.as_deref().unwrap_or(""), &w.name, host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_failures_have_kinds() {
        let server = |code| {
            mysql::Error::MySqlError(mysql::MySqlError {
                state: "HY000".into(),
                message: String::new(),
                code,
            })
            .kind()
        };
        for code in [1044, 1045, 1698] {
            assert_eq!(server(code), DbErrorKind::AccessDenied, "{code}");
        }
        for code in [1049, 1146, 1054] {
            assert_eq!(server(code), DbErrorKind::UnknownObject, "{code}");
        }
        assert_eq!(server(1205), DbErrorKind::TimedOut);
        assert_eq!(server(1213), DbErrorKind::Other);
        let connect = |kind| {
            mysql::Error::DriverError(mysql::DriverError::CouldNotConnect(Some((
                "/run/mysqld/mysqld.sock".into(),
                String::new(),
                kind,
            ))))
            .kind()
        };
        assert_eq!(
            connect(std::io::ErrorKind::NotFound),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            connect(std::io::ErrorKind::ConnectionRefused),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            mysql::Error::DriverError(mysql::DriverError::ConnectTimeout).kind(),
            DbErrorKind::TimedOut
        );
        assert_eq!(
            mysql::Error::IoError(std::io::ErrorKind::UnexpectedEof.into()).kind(),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            ServerError(mysql::MySqlError {
                state: "40001".into(),
                message: "Deadlock found".into(),
                code: 1213,
            })
            .to_string(),
            "Deadlock found (error 1213)"
        );
    }

    #[test]
    fn driver_failures_are_worded_without_the_drivers_braces() {
        let words = |e: mysql::Error| Failure(e).to_string();
        assert_eq!(
            words(mysql::Error::MySqlError(mysql::MySqlError {
                state: "28000".into(),
                message: "Access denied for user 'app'@'localhost' (using password: YES)".into(),
                code: 1045,
            })),
            "Access denied for user 'app'@'localhost' (using password: YES) (error 1045)"
        );
        // A read past the socket timeout: Linux says EAGAIN.
        assert_eq!(
            words(mysql::Error::IoError(std::io::Error::from_raw_os_error(11))),
            "the server did not answer: timed out after 60 s"
        );
        assert_eq!(
            words(mysql::Error::DriverError(
                mysql::DriverError::CouldNotConnect(Some((
                    "/run/mysqld/mysqld.sock".into(),
                    "No such file or directory (os error 2)".into(),
                    std::io::ErrorKind::NotFound,
                )))
            )),
            "nothing answers at /run/mysqld/mysqld.sock: No such file or directory (os error 2)"
        );
        assert_eq!(
            words(mysql::Error::DriverError(
                mysql::DriverError::ConnectTimeout
            )),
            "no answer to the connection attempt: timed out after 5 s"
        );
        let e = Error::database(
            "cannot connect",
            mysql::Error::IoError(std::io::ErrorKind::UnexpectedEof.into()),
        );
        assert_eq!(
            e.full_message(),
            "cannot connect: the server closed the connection (stopped, restarted, or it \
             ended this session)"
        );
        // The driver's error stays reachable under the wording.
        assert!(
            std::error::Error::source(&e)
                .and_then(std::error::Error::source)
                .is_some_and(|s| s.downcast_ref::<mysql::Error>().is_some())
        );
    }

    #[test]
    fn a_columns_definition_is_read_from_create_table() {
        let create = "CREATE TABLE `sync_log` (\n  `id` int(11) NOT NULL,\n  `Status` \
                      enum('running','done') NOT NULL DEFAULT 'running' COMMENT 'it''s',\n  \
                      `status_at` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) \
                      ENGINE=InnoDB";
        assert_eq!(
            definition_in(create, "status").as_deref(),
            Some("enum('running','done') NOT NULL DEFAULT 'running' COMMENT 'it''s'")
        );
        assert_eq!(
            definition_in(create, "status_at").as_deref(),
            Some("datetime DEFAULT NULL")
        );
        assert_eq!(definition_in(create, "nope"), None);
    }

    #[test]
    fn galera_makes_the_advisory_lock_node_local() {
        for on in [
            SqlValue::Int(1),
            SqlValue::UInt(1),
            SqlValue::Text("ON".into()),
        ] {
            assert!(wsrep_gap(Some(&on)).is_some_and(|g| g.contains("one node only")));
        }
        for off in [
            SqlValue::Int(0),
            SqlValue::Text("OFF".into()),
            SqlValue::Null,
        ] {
            assert_eq!(wsrep_gap(Some(&off)), None);
        }
        assert_eq!(wsrep_gap(None), None);
    }

    #[test]
    fn advisory_names_fit() {
        assert_eq!(
            advisory_name("appdb", "full-sync", None),
            "selfheal/appdb/full-sync"
        );
        assert_eq!(
            advisory_name("appdb", "full-sync", Some("web2.dc1.example.com")),
            "selfheal/appdb/full-sync@web2.dc1.example.com"
        );
        let long = advisory_name(&"d".repeat(64), &"w".repeat(64), None);
        assert_eq!(long.len(), 64);
        assert_ne!(long, advisory_name(&"d".repeat(64), &"x".repeat(64), None));
        // Cut to fit, two hosts still take two locks.
        let (a, b) = (
            advisory_name("appdb", &"w".repeat(60), Some("web1")),
            advisory_name("appdb", &"w".repeat(60), Some("web2")),
        );
        assert_eq!((a.len(), b.len()), (64, 64));
        assert_ne!(a, b);
        // A multi-byte database name is cut on a character boundary, never inside one.
        for pad in 0..4 {
            let db = format!("{}{}", "d".repeat(pad), "数据库".repeat(8));
            let name = advisory_name(&db, "sync", None);
            assert!(name.len() <= 64 && name.len() > 64 - 4, "{name}");
            assert!(name.starts_with("selfheal/d") || name.starts_with("selfheal/数"));
        }
        // Cut inside a character at byte 47 (`名` spans 45..48): the head stops before it,
        // the name stays the same run after run, and two databases that share the head
        // still take two locks.
        let db = "selfheal_x测试_数据库_多字节名称";
        assert!(!format!("selfheal/{db}/full-sync-nightly").is_char_boundary(47));
        let name = advisory_name(db, "full-sync-nightly", None);
        assert_eq!(name, advisory_name(db, "full-sync-nightly", None));
        assert!(
            name.starts_with("selfheal/selfheal_x测试_数据库_多字节#"),
            "{name}"
        );
        assert!(name.len() <= 64 && name.chars().count() <= 64);
        assert_ne!(
            name,
            advisory_name(&format!("{db}2"), "full-sync-nightly", None)
        );
    }

    #[test]
    fn values_round_trip() {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_micro_opt(10, 1, 2, 345))
            .map(SqlValue::DateTime)
            .expect("date");
        assert_eq!(from_value(to_value(&d)), d);
        // A year MySQL's u16 cannot carry is sent as text, never wrapped.
        let bc = chrono::NaiveDate::from_ymd_opt(-1, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .expect("date");
        assert!(matches!(to_value(&SqlValue::DateTime(bc)), Value::Bytes(_)));
        assert_eq!(
            from_value(Value::Date(0, 0, 0, 0, 0, 0, 0)),
            SqlValue::Text("0000-00-00 00:00:00".into())
        );
        assert!(
            time_value(
                SqlValue::Text("0000-00-00 00:00:00".into()),
                ColumnType::MYSQL_TYPE_DATETIME,
                &SqlValue::Int(0),
                None,
            )
            .stamp
            .is_err()
        );
        // The server's instant: integers, decimals (DATETIME(6)), NULL.
        assert_eq!(
            server_epoch(&SqlValue::Int(1_764_406_800)),
            Some(1_764_406_800)
        );
        assert_eq!(
            server_epoch(&SqlValue::Text("1764406800.250000".into())),
            Some(1_764_406_800)
        );
        assert_eq!(server_epoch(&SqlValue::Null), None);
        let t = time_value(
            d.clone(),
            ColumnType::MYSQL_TYPE_TIMESTAMP,
            &SqlValue::Text("1764406800.000345".into()),
            Some(chrono_tz::Asia::Shanghai),
        );
        assert_eq!(t.stamp, Ok(Some(crate::clock::Stamp::Epoch(1_764_406_800))));
    }
}
