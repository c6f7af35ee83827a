//! selfheal's tests through the real binary: one test executable, its modules grouped by
//! feature. Each drives `selfheal` against real SQLite files and a real MariaDB, real
//! processes, real locks and real files ([`common`] builds the scenario).
//!
//! - [`check`]: `selfheal check` — liveness evidence, verdicts and holds, writes, the
//!   journal, several hosts, backlogs, faults injected mid-run, what cron reads;
//! - [`run`]: `selfheal run`, the wrapper that makes a job leave that evidence;
//! - [`php`]: the PHP helper, the lease and real PHP workers;
//! - [`person`]: `selfheal show` and `selfheal resolve`;
//! - [`init`]: `selfheal init`, a first configuration from a table's shape;
//! - [`doctor`], [`stats`], [`metrics`], [`prometheus`], [`credentials`], [`cli`],
//!   [`errors`]: the other commands and what every command says;
//! - [`security`]: what another local user can plant, and what a value can print;
//! - [`snapshots`]: the human-facing output, pinned in `tests/snapshots/`;
//! - [`docs`], [`packaging`], [`upgrade`], [`structure`]: the man page, the README and docs/, the
//!   packages' units, state files an earlier release wrote, the layers of `src/`;
//! - [`regression`]: each test there is named for, and says in one line, what once broke.
//!
//! Run a part with a filter on the module path: `cargo test --test tests check::hosts`,
//! `cargo test --test tests regression::`. A test that needs something missing (MariaDB,
//! root, php, a tool) is skipped on a developer's machine and fails when `CI` is set.

mod common;

mod check;
mod cli;
mod credentials;
mod docs;
mod doctor;
mod errors;
mod init;
mod metrics;
mod packaging;
mod person;
mod php;
mod prometheus;
mod regression;
pub(crate) mod run;
mod security;
mod snapshots;
mod stats;
mod structure;
mod upgrade;
