//! The one error type of selfheal and the exit status each kind of failure maps to.
//!
//! Per-row trouble (unreadable evidence, a failed write) is *not* an error here: it is
//! recorded in the row's report and raises the run's exit status to 1. These variants are
//! the failures that stop a run: bad input (exit 2, nothing touched), the database or the
//! file system failing (exit 3), or another run holding the run lock (exit 75).
//!
//! Errors keep what callers match on as data, never only as text: a database failure
//! keeps the driver's error as its source and a [`DbErrorKind`] derived from the driver's
//! error codes (each store implements [`DbCause`] for its driver's error type); a schema
//! failure names the watch, the key and the column ([`SchemaProblem`]); a usage error says
//! which one it is ([`Usage`]). `doctor` picks its fixes by these, never by message text.
//!
//! Every message is a sentence for a person: what failed, the file, key or setting, and
//! the cause in words — a driver's error is shown through its store's wording (a server's
//! message and number, "timed out after 60 s"), never in a library's debug form, and no
//! cause is shown twice. [`Error::fix`] is the fix that fits the cause, where it can be
//! told without looking at the system; `crate::fix` adds the ones that need a look (file
//! owners and modes, the cron user). Pure: no I/O.

use std::path::PathBuf;

/// Exit statuses of docs/design.md#exit-status, in one place.
pub mod exit {
    /// Every running row was judged and handled.
    pub const OK: u8 = 0;
    /// Completed, but some rows need a person.
    pub const ATTENTION: u8 = 1;
    /// Bad command line or configuration; nothing touched.
    pub const USAGE: u8 = 2;
    /// Database or file-system failure; changes already made are complete.
    pub const FAILURE: u8 = 3;
    /// Another selfheal run holds the run lock; nothing done (EX_TEMPFAIL).
    pub const BUSY: u8 = 75;
}

/// Where a configuration value came from, so an error can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A key in a TOML file.
    File(PathBuf),
    /// A command-line flag.
    CommandLine,
    /// An environment variable.
    Env(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::CommandLine => f.write_str("command line"),
            Origin::Env(name) => write!(f, "environment variable {name}"),
        }
    }
}

/// What kind of database failure an [`Error::Database`] is, from the driver's error codes
/// (MySQL server error numbers, I/O error kinds, SQLite result codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbErrorKind {
    /// The server refused the account or its password, or a privilege is missing (MySQL
    /// 1044, 1045, 1142, 1143, 1227, 1370, 1698; SQLite `SQLITE_PERM`, `SQLITE_AUTH`,
    /// `SQLITE_READONLY`).
    AccessDenied,
    /// The database, table or column named does not exist (MySQL 1049, 1146, 1054; SQLite
    /// "no such table/column").
    UnknownObject,
    /// Nothing answers where the database should be: connection refused, no such socket,
    /// the connection lost, the server shutting down or out of connections, a SQLite file
    /// that cannot be opened.
    Unreachable,
    /// A bounded wait ran out: connecting, a socket read or write, a row lock (MySQL
    /// 1205), a statement's time limit, a busy SQLite database.
    TimedOut,
    /// The server takes no writes: `read_only` or `super_read_only` (MySQL 1290, 1836), a
    /// read-only transaction (1792), a table opened read-only (1036).
    ReadOnly,
    /// Anything else.
    Other,
}

impl DbErrorKind {
    /// The fix for a failure of this kind when the store knows nothing more.
    pub fn fix(self) -> Option<&'static str> {
        match self {
            DbErrorKind::AccessDenied => Some(
                "give the database account the password it needs (password_file, \
                 defaults_file or $SELFHEAL_DB_PASSWORD) and the rights selfheal needs: \
                 SELECT, and UPDATE on the watched tables",
            ),
            DbErrorKind::UnknownObject => Some(
                "correct the name in the configuration ([database] url names the database, \
                 table and the *_column keys the rest)",
            ),
            DbErrorKind::Unreachable => {
                Some("is the server running, and are the host, port or socket right?")
            }
            DbErrorKind::TimedOut => Some(
                "the server is up but did not answer in time: is it stopped or frozen, \
                 overloaded, or is a long transaction holding the rows? (SHOW PROCESSLIST, \
                 the server's error log)",
            ),
            DbErrorKind::ReadOnly => Some(
                "the server takes no writes (read_only: a replica, or a primary set \
                 read-only for maintenance; SELECT @@read_only shows it): point [database] url \
                 at the writable server, or run selfheal again once it takes writes",
            ),
            DbErrorKind::Other => None,
        }
    }

    /// The kind of an I/O failure on the way to or from a database server.
    pub fn of_io(kind: std::io::ErrorKind) -> DbErrorKind {
        use std::io::ErrorKind as K;
        match kind {
            // A socket this user may not open is as unreachable as a missing one: the
            // server never saw the account, so it is no password problem.
            K::NotFound
            | K::PermissionDenied
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::AddrNotAvailable
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown => DbErrorKind::Unreachable,
            // A socket read timeout surfaces as EAGAIN (WouldBlock) on Linux.
            K::TimedOut | K::WouldBlock => DbErrorKind::TimedOut,
            _ => DbErrorKind::Other,
        }
    }
}

/// A database driver's error type: the source of an [`Error::Database`], and the kind of
/// failure it is. Each store implements it for its driver's errors, in its own file.
pub trait DbCause: std::error::Error + Send + Sync + 'static {
    fn kind(&self) -> DbErrorKind;

    /// The fix that fits this failure, where the driver's error says more than its kind.
    fn fix(&self) -> Option<String> {
        None
    }

    /// What an [`Error::Database`] keeps as its source, and shows: the driver's error as
    /// the store words it for a person (a store wraps a driver whose own `Display` is a
    /// debug form; the driver's error stays reachable as the wrapper's source).
    fn into_source(self) -> BoxError
    where
        Self: Sized,
    {
        Box::new(self)
    }
}

/// The boxed source of an [`Error::Database`]: the driver's error, or selfheal's own words.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What is wrong with a watch's table. Each names the configuration key (and the column)
/// involved, so that callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaProblem {
    /// The table does not exist where it was looked for (`place`: a database, a file).
    #[error("table {table} does not exist in {place}")]
    NoTable { table: String, place: String },
    /// A MySQL table named without a database, on a connection without one.
    #[error(
        "table {table}: no database selected; name it in the URL (mysql://user@host/DB) or write the table as db.table"
    )]
    NoDatabase { table: String },
    /// A column the watch names does not exist; `columns` are the ones that do.
    #[error("{key}: column {column} does not exist in table {table} (columns: {})", columns.join(", "))]
    NoColumn {
        key: &'static str,
        column: String,
        table: String,
        columns: Vec<String>,
    },
    /// A column's type cannot do its job (`declared`: its type as the database says).
    #[error("{key}: {column} is {declared}, not {wanted}")]
    WrongType {
        key: &'static str,
        column: String,
        declared: String,
        wanted: &'static str,
    },
    /// A key the operation needs is not set.
    #[error("{key} is not set: {why}")]
    NotSet {
        key: &'static str,
        why: &'static str,
    },
    /// A status the watch writes (`key`: `dead_value`, …) that the status column cannot
    /// hold (`why`: in words). Nothing is written: a lenient server would store a mangled
    /// value.
    #[error(
        "{key} {value:?} cannot be stored in the status column {column}: {why}; nothing was written"
    )]
    ValueDoesNotFit {
        key: &'static str,
        value: String,
        column: String,
        why: String,
    },
}

impl SchemaProblem {
    /// The fix, for the watch named `watch`.
    pub fn fix(&self, watch: &str) -> String {
        match self {
            SchemaProblem::NoTable { table, .. } => format!(
                "correct table in watch '{watch}' (or the database in [database] url); if \
                 {table} does exist, the database account cannot see it: grant it SELECT \
                 and UPDATE on that table"
            ),
            SchemaProblem::NoDatabase { .. } => format!(
                "name the database in [database] url (mysql://user@host/DB) or write table \
                 as db.table in watch '{watch}'"
            ),
            SchemaProblem::NoColumn { key, table, .. } => format!(
                "set {key} in watch '{watch}' to one of the columns listed, or add the \
                 column to {table}"
            ),
            SchemaProblem::WrongType { key, .. } => {
                format!("point {key} in watch '{watch}' at a column of a usable type")
            }
            SchemaProblem::NotSet { key, .. } => format!("set {key} in watch '{watch}'"),
            SchemaProblem::ValueDoesNotFit {
                key, value, column, ..
            } => format!(
                "make room for {value:?} in {column} (selfheal doctor shows the ALTER TABLE), \
                 or set {key} in watch '{watch}' to a status the column holds"
            ),
        }
    }

    /// The configuration key involved, if any.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            SchemaProblem::NoColumn { key, .. }
            | SchemaProblem::WrongType { key, .. }
            | SchemaProblem::NotSet { key, .. }
            | SchemaProblem::ValueDoesNotFit { key, .. } => Some(key),
            SchemaProblem::NoTable { .. } | SchemaProblem::NoDatabase { .. } => None,
        }
    }

    /// The column involved, if any.
    pub fn column(&self) -> Option<&str> {
        match self {
            SchemaProblem::NoColumn { column, .. }
            | SchemaProblem::WrongType { column, .. }
            | SchemaProblem::ValueDoesNotFit { column, .. } => Some(column),
            _ => None,
        }
    }
}

/// Which usage error: the cases a caller tells apart, and the rest in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Usage {
    /// No configuration file where the default one is looked for, and no watch described
    /// by flags.
    #[error(
        "no configuration: {} does not exist; give --config FILE, set SELFHEAL_CONFIG, or describe one watch with --db, --table, --started-column, --heartbeat-file, --stale-after and --max-age",
        path.display()
    )]
    NoConfig { path: PathBuf },
    /// `--watch NAME` names no watch of the configuration (`known`: the ones it has).
    #[error(
        "--watch {name}: no such watch in {origin} (known: {})",
        names_or_none(known)
    )]
    UnknownWatch {
        name: String,
        origin: Origin,
        known: Vec<String>,
    },
    /// Anything else the command line asks for that cannot be done.
    #[error("{0}")]
    Other(String),
}

fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl From<String> for Usage {
    fn from(s: String) -> Usage {
        Usage::Other(s)
    }
}

impl From<&str> for Usage {
    fn from(s: &str) -> Usage {
        Usage::Other(s.to_string())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is wrong: names where, which key, and what is expected.
    #[error("{origin}: {key}: {message}")]
    Config {
        origin: Origin,
        key: String,
        message: String,
        /// The fix, where the message alone does not make it plain (the key a typo meant,
        /// a value with the unit a number lacked).
        fix: Option<String>,
    },

    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(Usage),

    /// The database cannot be reached, refuses us, or fails mid-run. `context` says what
    /// was being done and names the database ("cannot connect to mysql://…").
    #[error("{context}: {source}")]
    Database {
        context: String,
        kind: DbErrorKind,
        #[source]
        source: BoxError,
        /// The fix, where the store knows better than the kind (which password, which
        /// socket, which grant).
        fix: Option<String>,
    },

    /// A file selfheal must read before it starts — the configuration itself, or a file
    /// it names (`defaults_file`, `password_file`) — cannot be read. `what` names it and
    /// says how it was chosen ("the configuration /etc/selfheal/selfheal.toml (the
    /// default: no --config given)").
    #[error("cannot read {what}{}: {source}", as_user.as_ref().map(|u| format!(" as {u}")).unwrap_or_default())]
    CannotRead {
        what: String,
        path: PathBuf,
        /// The user that was refused, for a permission failure ("www-data (uid 33)").
        as_user: Option<String>,
        #[source]
        source: std::io::Error,
        /// The command that lets that user read it, or the setting to correct.
        fix: Option<String>,
    },

    /// The table or a column a watch names does not exist, or has an unusable type.
    #[error("watch '{watch}': {problem}")]
    Schema {
        watch: String,
        problem: SchemaProblem,
    },

    /// A file selfheal itself needs (run lock, journal, state) cannot be used.
    #[error("{}: {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A row was changed but its journal entry could not be written.
    #[error("{}: row {row} was changed but could not be journaled: {source}", path.display())]
    Journal {
        path: PathBuf,
        row: String,
        #[source]
        source: std::io::Error,
    },

    /// A file or directory of selfheal's own that it refuses to use: reached through a
    /// symbolic link someone else could have planted, a link, FIFO or hard-linked file
    /// where its file should be, another user's file, or a state directory that is not
    /// private to the running user (docs/design.md#writes). Nothing was written through it.
    #[error("{}", refused_text(action, refused))]
    Refused {
        /// What was being done, naming the setting ("opening the run lock (run.lock_file)").
        action: &'static str,
        refused: Box<crate::fsafe::Error>,
    },

    /// Another run holds selfheal's run lock.
    #[error("another selfheal run holds {}; nothing done", path.display())]
    Busy { path: PathBuf },

    /// A watch's advisory lock stayed held while `resolve` waited for it: a `check` (on this
    /// or another host) is judging the watch, or someone else holds the lock.
    #[error("watch {watch}: {holder}; nothing more done")]
    WatchBusy {
        watch: String,
        /// Who holds it, in words.
        holder: String,
        fix: String,
    },
}

/// `PATH: ACTION: WHY`; a directory that is not private says what it is itself.
fn refused_text(action: &str, e: &crate::fsafe::Error) -> String {
    let path = e.path().display();
    match e {
        crate::fsafe::Error::NotPrivate { .. } => format!("{path}: {}", refused_reason(e)),
        _ => format!("{path}: {action}: {}", refused_reason(e)),
    }
}

/// Why [`crate::fsafe`] refused, in words, without the path (the message names it once)
/// and without advice (the fix line gives it: `crate::fix::for_error`).
fn refused_reason(e: &crate::fsafe::Error) -> String {
    use crate::fsafe::Error as F;
    match e {
        F::NotOwned { owner, me, .. } => format!(
            "owned by {owner}, not by {me} who runs selfheal; selfheal writes only to files \
             of its own"
        ),
        F::NotPrivate {
            what,
            owner,
            me,
            writers,
            ..
        } if owner.uid != me.uid => {
            let others = if writers.is_empty() {
                String::new()
            } else {
                format!(", and {} can write it", writers.join(", "))
            };
            format!("the {what} is owned by {owner}, not by {me} who runs selfheal{others}")
        }
        F::NotPrivate { what, writers, .. } => format!(
            "the {what} can be written by {}, not only by the user who runs selfheal",
            writers.join(", ")
        ),
        other => {
            let text = other.to_string();
            let prefix = format!("{}: ", other.path().display());
            text.strip_prefix(&prefix).unwrap_or(&text).to_string()
        }
    }
}

impl Error {
    /// The process exit status for this error (docs/design.md#exit-status).
    ///
    /// A table, column or database the configuration names and the server lacks is a
    /// bad configuration (2), like a key typo. Every schema is read before the first
    /// write, so nothing was touched; a database that is unknown fails at connect.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config { .. }
            | Error::Usage(_)
            | Error::CannotRead { .. }
            | Error::Schema { .. }
            | Error::Database {
                kind: DbErrorKind::UnknownObject,
                ..
            } => exit::USAGE,
            Error::Database { .. }
            | Error::Io { .. }
            | Error::Journal { .. }
            | Error::Refused { .. } => exit::FAILURE,
            Error::Busy { .. } | Error::WatchBusy { .. } => exit::BUSY,
        }
    }

    /// The fix that fits this error, where it can be told from the error alone (`None`
    /// where the message already says what is expected, or where only a look at the
    /// system can tell: see `crate::fix::for_error`).
    pub fn fix(&self) -> Option<String> {
        match self {
            Error::Database { fix: Some(f), .. }
            | Error::CannotRead { fix: Some(f), .. }
            | Error::Config { fix: Some(f), .. } => Some(f.clone()),
            Error::Database { kind, .. } => kind.fix().map(str::to_string),
            Error::Schema { watch, problem } => Some(problem.fix(watch)),
            Error::WatchBusy { fix, .. } => Some(fix.clone()),
            Error::Busy { path } => Some(format!(
                "none if another run of this configuration is still at work (lslocks shows \
                 the pid holding {}); if it happens on every run, a run takes longer than \
                 the cron interval; if a run of another configuration holds it, leave \
                 run.lock_file unset in both, so each locks in its own state_dir",
                path.display()
            )),
            Error::Config { fix: None, .. }
            | Error::Usage(_)
            | Error::CannotRead { fix: None, .. }
            | Error::Io { .. }
            | Error::Journal { .. }
            | Error::Refused { .. } => None,
        }
    }

    /// This error with `fix` as its fix (database failures, unreadable files and
    /// configuration errors; other errors are returned unchanged).
    pub fn with_fix(mut self, fix: Option<String>) -> Self {
        if let Error::Database { fix: f, .. }
        | Error::CannotRead { fix: f, .. }
        | Error::Config { fix: f, .. } = &mut self
            && fix.is_some()
        {
            *f = fix;
        }
        self
    }

    /// The message with every cause, on one line (what is printed on stderr). A cause the
    /// message already ends with (every variant shows its direct source) is not repeated,
    /// and ends the walk: the error that shows it chose how much of its own chain to show.
    pub fn full_message(&self) -> String {
        let mut msg = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(s) = src {
            let text = s.to_string();
            if msg.ends_with(&text) {
                break;
            }
            msg.push_str(": ");
            msg.push_str(&text);
            src = s.source();
        }
        msg
    }

    /// The kind of a database failure; `None` for every other error.
    pub fn db_kind(&self) -> Option<DbErrorKind> {
        match self {
            Error::Database { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    pub fn config(origin: &Origin, key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            origin: origin.clone(),
            key: key.into(),
            message: message.into(),
            fix: None,
        }
    }

    /// A database failure with the driver's error as its source, of the kind the driver's
    /// error code says.
    pub fn database(context: impl Into<String>, cause: impl DbCause) -> Self {
        Error::Database {
            context: context.into(),
            kind: cause.kind(),
            fix: cause.fix(),
            source: cause.into_source(),
        }
    }

    /// A database failure of a known kind: `cause` is another error, or selfheal's own
    /// words (a `&str` or `String`).
    pub fn database_kind(
        context: impl Into<String>,
        kind: DbErrorKind,
        cause: impl Into<BoxError>,
    ) -> Self {
        Error::Database {
            context: context.into(),
            kind,
            source: cause.into(),
            fix: None,
        }
    }

    pub fn io(path: impl Into<PathBuf>, action: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            action,
            source,
        }
    }

    /// A failure of [`crate::fsafe`] while `action` was being done: a system call's failure
    /// stays an [`Error::Io`] (its kind chooses the fix), a refusal is [`Error::Refused`].
    pub fn fsafe(e: crate::fsafe::Error, action: &'static str) -> Self {
        match e {
            crate::fsafe::Error::Io { path, source, .. } => Error::Io {
                path,
                action,
                source,
            },
            // Not a refusal: a path that cannot be used, as ENOTDIR says.
            crate::fsafe::Error::NotADirectory { component, .. } => Error::Io {
                path: component,
                action,
                source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
            },
            refused => Error::Refused {
                action,
                refused: Box::new(refused),
            },
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_shows_its_cause_once_and_keeps_it_as_source() {
        let e = Error::database_kind(
            "reading the clock on mysql://app@db/appdb",
            DbErrorKind::TimedOut,
            "no row",
        );
        assert_eq!(
            e.to_string(),
            "reading the clock on mysql://app@db/appdb: no row"
        );
        assert_eq!(e.full_message(), e.to_string());
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("no row".to_string())
        );
        assert_eq!(e.db_kind(), Some(DbErrorKind::TimedOut));
        assert_eq!(e.exit_code(), exit::FAILURE);
    }

    #[test]
    fn an_io_error_is_printed_with_its_cause_once() {
        let e = Error::io(
            "/var/lib/selfheal",
            "creating the state directory",
            std::io::Error::from_raw_os_error(20),
        );
        assert_eq!(
            e.full_message(),
            "/var/lib/selfheal: creating the state directory: Not a directory (os error 20)"
        );
    }

    #[test]
    fn a_shown_cause_ends_the_walk() {
        // As rusqlite's SqliteFailure shows SQLite's message and keeps the result code as
        // its own source: what the driver chose not to show stays out of the line.
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Error::database_kind(
            "x",
            DbErrorKind::Other,
            Outer(std::io::Error::other("inner")),
        );
        assert_eq!(e.full_message(), "x: outer");
    }

    #[test]
    fn what_the_configuration_names_wrongly_is_exit_2_and_gets_its_fix() {
        let schema = Error::Schema {
            watch: "full-sync".into(),
            problem: SchemaProblem::NoTable {
                table: "sync_lg".into(),
                place: "database appdb".into(),
            },
        };
        assert_eq!(schema.exit_code(), exit::USAGE);
        assert!(
            schema
                .fix()
                .is_some_and(|f| f.starts_with("correct table in watch 'full-sync'")),
            "{:?}",
            schema.fix()
        );
        let unknown_db = Error::database_kind(
            "cannot connect to mysql://app@localhost/nodb",
            DbErrorKind::UnknownObject,
            "Unknown database 'nodb' (error 1049)",
        );
        assert_eq!(unknown_db.exit_code(), exit::USAGE);
        let refused = Error::database_kind(
            "cannot connect to mysql://app@localhost/appdb",
            DbErrorKind::Unreachable,
            "nothing answers at /run/mysqld/mysqld.sock: No such file or directory (os error 2)",
        );
        assert_eq!(refused.exit_code(), exit::FAILURE);
        assert_eq!(refused.fix().as_deref(), DbErrorKind::Unreachable.fix());
        let told = refused.with_fix(Some("start the server".into()));
        assert_eq!(told.fix().as_deref(), Some("start the server"));
    }

    #[test]
    fn an_unreadable_file_names_the_user_and_is_exit_2() {
        let e = Error::CannotRead {
            what: "the configuration /etc/selfheal/selfheal.toml (the default: no --config \
                   given)"
                .into(),
            path: "/etc/selfheal/selfheal.toml".into(),
            as_user: Some("www-data (uid 33)".into()),
            source: std::io::Error::from_raw_os_error(13),
            fix: Some("chgrp www-data /etc/selfheal/selfheal.toml".into()),
        };
        assert_eq!(
            e.full_message(),
            "cannot read the configuration /etc/selfheal/selfheal.toml (the default: no \
             --config given) as www-data (uid 33): Permission denied (os error 13)"
        );
        assert_eq!(e.exit_code(), exit::USAGE);
        assert_eq!(
            e.fix().as_deref(),
            Some("chgrp www-data /etc/selfheal/selfheal.toml")
        );
    }

    #[test]
    fn io_kinds_on_the_way_to_a_server() {
        use std::io::ErrorKind as K;
        assert_eq!(DbErrorKind::of_io(K::NotFound), DbErrorKind::Unreachable);
        assert_eq!(
            DbErrorKind::of_io(K::ConnectionRefused),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            DbErrorKind::of_io(K::UnexpectedEof),
            DbErrorKind::Unreachable
        );
        assert_eq!(DbErrorKind::of_io(K::TimedOut), DbErrorKind::TimedOut);
        assert_eq!(DbErrorKind::of_io(K::WouldBlock), DbErrorKind::TimedOut);
        assert_eq!(DbErrorKind::of_io(K::InvalidData), DbErrorKind::Other);
    }

    #[test]
    fn schema_problems_name_the_key_and_the_column() {
        let p = SchemaProblem::NoColumn {
            key: "heartbeat_column",
            column: "beat_at".into(),
            table: "sync_log".into(),
            columns: vec!["heartbeat_at".into(), "id".into()],
        };
        assert_eq!(p.key(), Some("heartbeat_column"));
        assert_eq!(p.column(), Some("beat_at"));
        let e = Error::Schema {
            watch: "full-sync".into(),
            problem: p,
        };
        assert_eq!(
            e.to_string(),
            "watch 'full-sync': heartbeat_column: column beat_at does not exist in table \
             sync_log (columns: heartbeat_at, id)"
        );
    }

    #[test]
    fn usage_errors_read_as_before() {
        let e = Error::Usage(Usage::UnknownWatch {
            name: "nope".into(),
            origin: Origin::File("/etc/selfheal/selfheal.toml".into()),
            known: vec!["full-sync".into(), "report".into()],
        });
        assert_eq!(
            e.to_string(),
            "--watch nope: no such watch in /etc/selfheal/selfheal.toml (known: full-sync, report)"
        );
        assert_eq!(e.exit_code(), exit::USAGE);
        assert_eq!(
            Error::Usage("no [database] configured".into()).to_string(),
            "no [database] configured"
        );
    }
}
