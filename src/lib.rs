//! selfheal: a cron watchdog for job rows stuck in `running`.
//!
//! Data flow of `check`, one room each:
//!
//! 1. arguments: [`cli`] (clap, nothing else) → [`app`], which turns them into the
//!    library's options ([`check::CheckOptions`], [`stats::StatsOptions`],
//!    [`eventlog::LogTarget`]) and picks the reporter; no clap type goes further.
//! 2. configuration: [`config`], validated before anything is touched.
//! 3. evidence: [`evidence::gather`] reads each source of [`probe`] — the row's times and
//!    heartbeat column from the database ([`store`]) on the database's clock ([`clock`]), a
//!    heartbeat file, the job's lock and the owner pid on this [`host`].
//! 4. verdict: [`decide`], pure; per watch, the confirmation of inferred verdicts across
//!    runs ([`check::confirmations`]), the breaker and the holds ([`check`]'s sweep).
//! 5. writes: [`check`]'s batch — intents and journal ([`journal`]), one compare-and-set per
//!    row ([`store`]), the legacy lock release ([`check::release`]); a stopped run's intents are
//!    settled by [`check::recovery`] (journal and store only).
//! 6. report: [`report`] (cron text, `--explain`, JSON), `state_dir/last-run.json`
//!    ([`state`]), [`metrics`], [`eventlog`]; what the cron text already told a person
//!    ([`check::remind`]: once per problem, then once per `remind_every`), and trouble that
//!    lasts across runs ([`check::streak`]: a watch busy run after run, a log that cannot
//!    be reached).
//!
//! Beside `check`: [`run`] is `selfheal run`, the wrapper that makes a job leave that
//! evidence (a kernel lock, a heartbeat, an execution record); [`fsafe`] is how every file
//! selfheal writes is reached. A person's side (docs/design.md#person) is two commands over the same
//! rooms: [`show`] (what needs a person — a dry run of [`check`] — and one row's whole
//! record: the store's row reader, [`evidence::gather`], [`decide`], the journal) and
//! [`resolve`] (a person's decision: the same reader and probes, then one compare-and-set
//! through [`apply`], which `check`'s un-park step uses too); what a person is told to run,
//! and who that person is, in [`person`]. Every row is written by one statement, the
//! store's compare-and-set ([`store::JobTable::compare_and_set`]).
//!
//! Shared pieces are named for what they hold: the row message ([`message`], built and
//! parsed), recent runtimes and the `max_age` rule ([`history`], used by `check`, `doctor`
//! and `stats`), the state files ([`state`]; the confirmation counts in
//! [`check::confirmations`]), the fix that fits an error and the running user ([`fix`]), who cron
//! runs selfheal as ([`cron`]), the `HOST:PID START` line a lock's holder writes into it
//! ([`holder_line`]: written by [`run`] and the PHP helper, read by the probes), text from outside made safe to print on one line
//! ([`escape`]: every value from the database, wherever it is printed). [`doctor`] and
//! [`stats`] read through the same
//! pieces and write nothing. No module uses one that uses it back.
//!
//! Where new things go:
//! - a new kind of evidence: a new [`probe::Source`], as [`probe`] says step by step;
//! - a new database backend: a driver file in `store/` (its dialect, its
//!   [`store::driver::Driver`]), plus its URL scheme (in [`config`]), its dispatch in
//!   [`store::open`] and its dependency (see [`store`]);
//! - a new file for a later run to read: a [`state::StateFile`] and a serde type, through
//!   [`state::write_typed`] / [`state::read_typed`] (every path-based write of state goes
//!   through [`state`]);
//! - a new journal field: a field of [`journal::JournalEntry`] (older lines read it as
//!   empty).

// The library reports bad input as an error with its kind and exit status, never by a
// panic or an exit: those are left to `main` and to tests. Slicing text by byte index
// panics on a multi-byte character, so text is cut on character boundaries.
#![cfg_attr(
    not(test),
    warn(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::exit,
        clippy::string_slice
    )
)]

pub mod app;
pub mod apply;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cron;
pub mod decide;
pub mod demo;
pub mod doctor;
pub mod error;
pub mod escape;
pub mod eventlog;
pub mod evidence;
pub mod fix;
pub mod fsafe;
pub mod history;
pub mod holder_line;
pub mod host;
pub mod init;
pub mod journal;
pub mod message;
pub mod metrics;
pub mod person;
pub mod probe;
pub mod report;
pub mod resolve;
pub mod run;
pub mod runlock;
pub mod show;
pub mod state;
pub mod stats;
pub mod store;
pub mod zone;

pub use error::{Error, Result};
