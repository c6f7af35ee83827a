//! The one error type of selfheal and the exit status each kind of failure maps to.
//!
//! Per-row trouble (unreadable evidence, a failed write) is *not* an error here: it is
//! recorded in the row's report and raises the run's exit status to 1. These variants are
//! the failures that stop a run: bad input (exit 2, nothing touched), the database or the
//! file system failing (exit 3), or another run holding the run lock (exit 75).

use std::path::PathBuf;

/// Exit statuses of SPEC §7, in one place.
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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is wrong: names where, which key, and what is expected.
    #[error("{origin}: {key}: {message}")]
    Config {
        origin: Origin,
        key: String,
        message: String,
    },

    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),

    /// The database cannot be reached, refuses us, or fails mid-run.
    #[error("database: {context}: {message}")]
    Database { context: String, message: String },

    /// The table or a column a watch names does not exist, or has an unusable type.
    #[error("watch '{watch}': {message}")]
    Schema { watch: String, message: String },

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

    /// Another run holds selfheal's run lock.
    #[error("another selfheal run holds {}; nothing done", path.display())]
    Busy { path: PathBuf },
}

impl Error {
    /// The process exit status for this error (SPEC §7).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config { .. } | Error::Usage(_) => exit::USAGE,
            Error::Database { .. }
            | Error::Schema { .. }
            | Error::Io { .. }
            | Error::Journal { .. } => exit::FAILURE,
            Error::Busy { .. } => exit::BUSY,
        }
    }

    /// The message with every cause, on one line (what is printed on stderr).
    pub fn full_message(&self) -> String {
        let mut msg = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
        msg
    }

    pub fn config(origin: &Origin, key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            origin: origin.clone(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub fn database(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Error::Database {
            context: context.into(),
            message: message.to_string(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, action: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            action,
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
