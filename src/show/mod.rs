//! `selfheal show`: what needs a person (`show [WATCH]`, in `listing`), and one row's
//! whole record (`show WATCH ID`: gathered in `record`, printed by `render`). Both read a
//! dry run of `check` (`dry_run`), so they say what a real run would do now.
//!
//! Reads only: no row, no state file, no lock is written or taken. Values from the
//! database and from files are printed with their control characters escaped
//! ([`crate::escape`]).

use std::io::Write;
use std::path::PathBuf;

use crate::config::{self, ConfigPath, Overrides, Watch};
use crate::error::Result;
use crate::escape::printable;
use crate::report::Format;
use crate::resolve::load_watch;
use crate::store::{self, RunningRow, Schema, Store};

mod dry_run;
#[cfg(test)]
mod fixtures;
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
    /// The text lists every row, not the first [`listing::TEXT_SHOWN`].
    pub all: bool,
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
        _ => listing(&cfg, opts.format, opts.all, out),
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
