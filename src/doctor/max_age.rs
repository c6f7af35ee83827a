//! doctor on `max_age` against what real runs take: below 1.5 times the longest of the
//! latest runs that ended well ([`crate::history`]), it would kill legitimate runs.
//!
//! Pure: the caller reads the finished runs.

use std::time::Duration;

use crate::config::{Watch, fmt_duration};
use crate::history::Recent;

use super::Finding;

pub(super) fn history_finding(w: &Watch, recent: crate::error::Result<Recent>) -> Finding {
    let subject = format!("watch {}: max_age", w.name);
    let cap = fmt_duration(w.max_age);
    let runs = match recent {
        Ok(Recent::Runs(r)) => r,
        Ok(Recent::NoEndedColumn) => {
            return Finding::pass(
                subject,
                format!("{cap}; no ended_column, so no finished runs to compare it with"),
            );
        }
        Ok(Recent::IdNotPrimary) => {
            return Finding::warn(
                subject,
                format!(
                    "{cap}; not compared with finished runs: {} is not the primary key, so \
                     the latest rows cannot be read cheaply",
                    w.id_column
                ),
                "see `selfheal stats` for the runtimes of every finished row",
            );
        }
        Err(e) => {
            return Finding::warn(
                subject,
                format!("cannot read finished runs: {e}"),
                "check the table",
            );
        }
    };
    let Some((longest, _)) = &runs.longest else {
        return Finding::pass(
            subject,
            format!("{cap}; no finished runs yet to compare it with"),
        );
    };
    let what = format!(
        "the longest of the last {} runs that ended well took {}",
        runs.runs,
        fmt_duration(Duration::from_secs(*longest))
    );
    match runs.max_age_warning(w) {
        Some(warn) => Finding::fail(
            subject,
            format!(
                "{cap} is below 1.5x what real runs take ({what}): it would kill legitimate runs"
            ),
            format!(
                "raise max_age to at least {}",
                fmt_duration(Duration::from_secs(warn.at_least_s))
            ),
        ),
        None => Finding::pass(
            subject,
            format!("{cap} is at least 1.5x what real runs take ({what})"),
        ),
    }
}
