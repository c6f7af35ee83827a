//! `selfheal show`: what needs a person, and one row's whole record (SPEC §13). Reads
//! only: no row, no state file, no lock is written or taken.
//!
//! `show [WATCH]` lists every row that needs a person, one line each with the reason in
//! words, since when, and the `selfheal resolve …` command for it: the running rows a
//! real run would leave for a person (`hung` without `manual_value`, `unknown`, `overtime`
//! left for review, another host's row past `max_age`, rows held back for a person), as a
//! dry run of `check` judges them — the very sweep, confirmations and holds a real run
//! uses, through [`crate::check::run`] — and the rows parked in `manual_value`, with why
//! and when the journal says they were parked. Exit 0 when nothing needs a person, 1
//! otherwise.
//!
//! `show WATCH ID` is one row's record: its columns as the table holds them, the evidence
//! now (heartbeat file or column and its age, the lock file, its state and holder line,
//! the owner and, when it is a live process of this host, its start time and command
//! line), the verdict now and what the next real run would do (from the same dry run:
//! with its confirmations so far, or the un-park a parked row is due), its history from
//! the journal (every generation: when, verdict, basis, action, by whom), and the job's
//! last execution record when the watch names its `report_file`. In JSON also the
//! statement that would release a parked row by hand (the SQL a person ran before
//! `resolve`).
//!
//! Values from the database and from files are printed with their control characters
//! escaped ([`crate::escape`]).
//!
//! I/O: the configuration, the database (read-only where it can be), the evidence files
//! and `/proc`, the journal's generations and the confirmation counts (read), the report
//! file.

use std::io::Write;
use std::path::PathBuf;

use crate::config::{self, ConfigPath, Overrides, Watch};
use crate::error::Result;
use crate::escape::printable;
use crate::report::Format;
use crate::resolve::load_watch;
use crate::store::{self, RunningRow, Schema, Store};

mod dry_run;
mod history;
mod listing;
mod record;
mod render;

use listing::listing;
use record::one_row;

/// How `selfheal show` runs (`app` fills this from the command line).
#[derive(Debug, Clone, Default)]
pub struct ShowOptions {
    pub config: Option<PathBuf>,
    pub watch: Option<String>,
    pub id: Option<String>,
    pub format: Format,
}

/// `selfheal show`, printing to `out` (warnings on stderr).
pub fn run(opts: &ShowOptions, out: &mut dyn Write) -> Result<u8> {
    let cfg = match &opts.watch {
        Some(w) => load_watch(opts.config.as_deref(), w)?,
        None => config::load(
            &ConfigPath::resolve(opts.config.as_deref()),
            &Overrides::default(),
            &[],
        )?,
    };
    match (&opts.watch, &opts.id) {
        (Some(w), Some(id)) => one_row(&cfg, w, id, opts.format, out),
        _ => listing(&cfg, opts.format, out),
    }
}

fn warn_all(warnings: &[String]) {
    let mut err = std::io::stderr();
    for w in warnings {
        let _ = writeln!(err, "selfheal: warning: {}", printable(w));
    }
}

/// The statement a person would have run by hand for a row observed in status `from`
/// (JSON only): a running row marked dead, a parked row sent back to the queue (or marked
/// dead without one) — the very compare-and-set `resolve` makes, without its message.
fn by_hand(store: &dyn Store, w: &Watch, schema: &Schema, r: &RunningRow, from: &str) -> String {
    let parked = from != w.running_value;
    let retry = parked && w.retry.is_some();
    let to = match &w.retry {
        Some(x) if retry => &x.value,
        _ => &w.dead_value,
    };
    let change = store::Change {
        row: r,
        from_status: from,
        new_status: to,
        message: None,
        bump_attempts: retry,
        set_ended: true,
        retry_at: retry.then_some(0),
        match_heartbeat: true,
    };
    let d = store.dialect();
    store::sql::for_a_person(d, &store::sql::cas_sql(d, w, schema, &change))
}
