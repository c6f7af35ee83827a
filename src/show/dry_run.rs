//! The dry run of `check` that both `show` commands read: the very sweep, confirmations
//! and holds a real run uses ([`crate::check::run`], dry), kept instead of printed — only
//! the rows asked for, with the un-parks it would make and its warnings.
//!
//! I/O: that of a dry run of `check`: it reads, and writes nothing.

use crate::check::{self, CheckOptions};
use crate::config::Config;
use crate::error::Result;
use crate::report::{Parked, Reporter, RowReport, Summary, Unparked, WatchInfo};

/// What a dry run of `check` reported: every running row, the un-parks it would make,
/// the warnings.
pub(super) struct Collected {
    /// Which judged rows to keep: a backlog of running rows is not held in memory.
    pub(super) keep: Keep,
    pub(super) rows: Vec<RowReport>,
    pub(super) unparked: Vec<Unparked>,
    pub(super) warnings: Vec<String>,
}

impl Reporter for Collected {
    fn watch(&mut self, w: &WatchInfo) {
        if let Some(why) = &w.skipped {
            self.warnings
                .push(format!("watch {}: skipped: {why}", w.name));
        }
    }

    fn row(&mut self, r: &RowReport) {
        let Keep::Row(watch, id) = &self.keep;
        let wanted = r.watch == *watch && r.id == *id;
        if wanted {
            self.rows.push(r.clone());
        }
    }

    fn warning(&mut self, msg: &str) {
        if !self.warnings.iter().any(|w| w == msg) {
            self.warnings.push(msg.to_string());
        }
    }

    fn unparked(&mut self, u: &Unparked) {
        self.unparked.push(u.clone());
    }

    fn parked(&mut self, _p: &Parked) {}

    /// Nothing is printed by the dry run itself.
    fn spoke(&self) -> bool {
        false
    }

    fn finish(&mut self, _s: &Summary) {}
}

/// The judged rows [`dry_check`] keeps.
pub(super) enum Keep {
    /// One row (watch, id).
    Row(String, crate::store::SqlValue),
}

/// The dry run of `check` over `cfg`'s watches: what a real run would judge and do now.
pub(super) fn dry_check(cfg: &Config, keep: Keep) -> Result<Collected> {
    let mut c = Collected {
        keep,
        rows: Vec::new(),
        unparked: Vec::new(),
        warnings: Vec::new(),
    };
    let opts = CheckOptions {
        dry_run: true,
        force: false,
        remind: false,
    };
    check::run(cfg, &opts, &mut c)?;
    Ok(c)
}
