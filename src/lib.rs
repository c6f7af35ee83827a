//! selfheal: a cron watchdog for job rows stuck in `running`.
//!
//! Data flow, one module each: command line ([`cli`]) → validated configuration
//! ([`config`]) → evidence from the database ([`store`]) and the host ([`probe`]) →
//! verdict and action ([`decide`], pure) → compare-and-set writes and journal ([`check`],
//! [`journal`]) → output ([`report`], and `state_dir/last-run.json` via [`state`]).
//! [`stats`] reads the history of finished rows and the journal back: runtimes, false
//! positives, suggested thresholds. [`app`] wires a parsed command line to these and
//! maps the outcome to an exit status. [`run`] is `selfheal run`, the wrapper that makes a
//! job leave that evidence (a kernel lock, a heartbeat, an execution record).

pub mod app;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod decide;
pub mod demo;
pub mod doctor;
pub mod error;
pub mod eventlog;
pub mod fsafe;
pub mod journal;
pub mod metrics;
pub mod mycnf;
pub mod probe;
pub mod recovery;
pub mod release;
pub mod report;
pub mod run;
pub mod runlock;
pub mod state;
pub mod stats;
pub mod store;

pub use error::{Error, Result};
