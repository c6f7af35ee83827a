//! The judgement of `selfheal stats`, pure: which finished rows are selfheal's false
//! positives, and what the runtimes say about `max_age` and `stale_after` (by the rule
//! `check` and `doctor` warn on, in [`crate::history`]). Inputs are plain values (journal
//! marks from [`crate::journal::JournalEntry`], row messages parsed by [`crate::message`]);
//! no I/O.
//!
//! A false positive is a row selfheal changed (its journal says so, or its message prefix
//! is still in the row) whose run then ended well anyway: the worker was alive. The journal
//! records the start value selfheal observed, so it tells the very run it marked from a
//! later run of the same row (a retry that succeeded is not a false positive). Where the
//! journal does not know the row (another host's journal, a lost one), the message decides,
//! unless the finished run is shorter than the run selfheal marked was already old — then it
//! must be a later run.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde_json::Value;

use super::histogram::Histogram;
use crate::clock::human;
use crate::config::fmt_duration;
use crate::history::{BadRuntime, friendly_ceil, id_key, max_age_too_low, scaled_ceil};
use crate::journal::JournalEntry;
use crate::message;

/// A runtime may exceed the age selfheal saw by clock noise before the message rule calls
/// it a later run.
const CLOCK_SLACK_S: i64 = 60;

/// How many false positives are listed (all are counted).
pub const MAX_LISTED: usize = 50;

/// How many distinct successful statuses are counted by name; the rest are summed.
pub const MAX_STATUSES: usize = 20;

/// The name the statuses beyond [`MAX_STATUSES`] are counted under.
pub const OTHER_STATUSES: &str = "(other)";

/// One change selfheal journaled for a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The start value selfheal observed (absent in entries that predate it).
    pub started: Option<String>,
    pub to: String,
    pub verdict: String,
    pub time: Option<String>,
    pub heartbeat_age_s: Option<u64>,
    /// How old the run was when it was marked.
    pub total_age_s: Option<u64>,
    /// Death proven by the host (pid gone, lock free) rather than inferred from a heartbeat.
    pub conclusive: bool,
    /// Which evidence decided, in words.
    pub basis: Option<String>,
}

impl Mark {
    /// The mark in a journal entry, with the watch it belongs to and the id key.
    pub fn from_entry(e: &JournalEntry) -> Option<(String, String, Mark)> {
        if e.watch.is_empty() {
            return None;
        }
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Some((
            e.watch.clone(),
            e.id.key(),
            Mark {
                started: e.started.clone(),
                to: e.to.clone(),
                verdict: e.verdict.as_str().to_string(),
                time: text(&e.time),
                heartbeat_age_s: e.evidence.heartbeat_age_s,
                total_age_s: e.evidence.total_age_s,
                conclusive: e.conclusive,
                basis: text(&e.basis_words()),
            },
        ))
    }
}

/// Every journaled change of one watch, by row id.
pub type Marks = HashMap<String, Vec<Mark>>;

/// Where a false positive was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Journal,
    Message,
}

/// A row selfheal changed whose run ended well anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FalsePositive {
    pub id: Value,
    pub status: String,
    pub runtime_s: Option<u64>,
    pub source: Source,
    pub verdict: String,
    /// When selfheal changed it (journal only).
    pub marked_at: Option<String>,
    /// The status selfheal set (journal only; the row shows the worker's status now).
    pub set_to: Option<String>,
    pub heartbeat_age_s: Option<u64>,
    /// How old the run was when selfheal marked it.
    pub total_age_s: Option<u64>,
    pub conclusive: bool,
    /// Which evidence decided (journal only).
    pub basis: Option<String>,
}

/// What one finished row is, for the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Nothing selfheal did.
    Plain,
    /// selfheal changed this very run, and it stayed that way.
    Marked,
    /// selfheal changed an earlier run of this row; this later run ended well.
    Rerun,
    FalsePositive(Box<FalsePositive>),
}

/// One finished row as the classification sees it.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    pub id: &'a Value,
    /// The start value as the adapter shows it (compared with the journal's).
    pub started: &'a str,
    pub status: &'a str,
    pub runtime_s: Option<i64>,
    /// The row's message when it carries selfheal's prefix.
    pub marked: Option<&'a str>,
    pub success: bool,
}

/// Classifies a finished row; `marks` are the journal's changes of this row id.
pub fn classify(r: RowView<'_>, marks: Option<&[Mark]>) -> Judgement {
    let fp = |source, verdict: String, m: Option<&Mark>, hb, total, conclusive| {
        Judgement::FalsePositive(Box::new(FalsePositive {
            id: r.id.clone(),
            status: r.status.to_string(),
            runtime_s: r.runtime_s.and_then(|s| u64::try_from(s).ok()),
            source,
            verdict,
            marked_at: m.and_then(|m| m.time.clone()),
            set_to: m.map(|m| m.to.clone()),
            heartbeat_age_s: hb,
            total_age_s: total,
            conclusive,
            basis: m.and_then(|m| m.basis.clone()),
        }))
    };
    if let Some(marks) = marks.filter(|m| !m.is_empty()) {
        let this_run = marks
            .iter()
            .rev()
            .find(|m| m.started.as_deref().is_none_or(|s| s == r.started));
        return match (this_run, r.success) {
            (Some(m), true) => fp(
                Source::Journal,
                m.verdict.clone(),
                Some(m),
                m.heartbeat_age_s,
                m.total_age_s,
                m.conclusive,
            ),
            (Some(_), false) => Judgement::Marked,
            (None, true) => Judgement::Rerun,
            (None, false) if r.marked.is_some() => Judgement::Marked,
            (None, false) => Judgement::Plain,
        };
    }
    // A message that records an un-park or a person's decision is no verdict of selfheal.
    let Some(p) = r
        .marked
        .and_then(message::parse)
        .filter(message::is_verdict)
    else {
        return Judgement::Plain;
    };
    if !r.success {
        return Judgement::Marked;
    }
    if let (Some(age), Some(rt)) = (p.total_age_s, r.runtime_s)
        && rt + CLOCK_SLACK_S < i64::try_from(age).unwrap_or(i64::MAX)
    {
        // This run is shorter than the run selfheal marked was already old: a later run.
        return Judgement::Rerun;
    }
    fp(
        Source::Message,
        p.verdict,
        None,
        p.heartbeat_age_s,
        p.total_age_s,
        p.conclusive,
    )
}

/// Everything `stats` learns about one watch from its finished rows.
#[derive(Debug, Clone, Default)]
pub struct WatchStats {
    /// Rows not running, with a start and an end.
    pub finished: u64,
    /// Finished rows whose start or end cannot be read.
    pub unreadable: u64,
    pub unreadable_example: Option<String>,
    /// Finished rows whose times cannot be a real run (ends before it starts, starts at 0
    /// or before 2000, runs longer than a year): counted, left out of every figure.
    pub implausible: u64,
    pub implausible_example: Option<String>,
    /// Runtimes of the runs that ended well.
    pub runtimes: Histogram,
    /// Runs that ended well, by status (at most [`MAX_STATUSES`] names).
    pub by_status: BTreeMap<String, u64>,
    /// The id of the longest run that ended well.
    pub longest_id: Option<Value>,
    /// Rows selfheal changed that stayed changed.
    pub marked: u64,
    /// Rows whose earlier run selfheal changed, and whose later run ended well.
    pub rerun: u64,
    pub false_positives: u64,
    pub false_positives_by_verdict: BTreeMap<String, u64>,
    /// The first [`MAX_LISTED`] false positives.
    pub listed: Vec<FalsePositive>,
    /// The longest heartbeat silence of a live run that selfheal took for death.
    pub fp_heartbeat_max_s: Option<u64>,
    /// Silences of false positives longer than the run itself had lasted (a beat of an
    /// earlier row with the same id): impossible, so they suggest nothing.
    pub fp_heartbeat_impossible: u64,
    /// False positives that rested on evidence selfheal takes as proof (job lock free,
    /// owner pid gone): the watch's lock_file or owner_column does not describe the job.
    pub fp_conclusive: u64,
}

impl WatchStats {
    /// Counts one finished row. `runtime` is end minus start, or why it is left out.
    pub fn add(
        &mut self,
        id: &Value,
        status: &str,
        runtime: Result<i64, BadRuntime>,
        success: bool,
        j: Judgement,
    ) {
        self.finished += 1;
        match runtime {
            Ok(s) if s >= 0 => {
                if success {
                    let key = if self.by_status.contains_key(status)
                        || self.by_status.len() < MAX_STATUSES
                    {
                        status
                    } else {
                        OTHER_STATUSES
                    };
                    *self.by_status.entry(key.to_string()).or_insert(0) += 1;
                    let s = s.unsigned_abs(); // s >= 0
                    if self.runtimes.max().is_none_or(|m| s > m) {
                        self.longest_id = Some(id.clone());
                    }
                    self.runtimes.add(s);
                }
            }
            Ok(s) => self.implausible(id, &format!("ends {}s before it starts", s.unsigned_abs())),
            Err(BadRuntime::Implausible(why)) => self.implausible(id, &why),
            Err(BadRuntime::Unreadable(why)) => self.unreadable(id, &why),
        }
        match j {
            Judgement::Plain => {}
            Judgement::Marked => self.marked += 1,
            Judgement::Rerun => self.rerun += 1,
            Judgement::FalsePositive(fp) => {
                self.false_positives += 1;
                *self
                    .false_positives_by_verdict
                    .entry(fp.verdict.clone())
                    .or_insert(0) += 1;
                if fp.conclusive {
                    self.fp_conclusive += 1;
                } else if fp.verdict == "dead" {
                    match fp.heartbeat_age_s {
                        Some(gap) if !possible_silence(gap, &fp) => {
                            self.fp_heartbeat_impossible += 1;
                        }
                        gap => self.fp_heartbeat_max_s = self.fp_heartbeat_max_s.max(gap),
                    }
                }
                if self.listed.len() < MAX_LISTED {
                    self.listed.push(*fp);
                }
            }
        }
    }

    fn implausible(&mut self, id: &Value, why: &str) {
        self.implausible += 1;
        if self.implausible_example.is_none() {
            self.implausible_example = Some(format!("id={}: {why}", id_key(id)));
        }
    }

    fn unreadable(&mut self, id: &Value, why: &str) {
        self.unreadable += 1;
        if self.unreadable_example.is_none() {
            self.unreadable_example = Some(format!("id={}: {why}", id_key(id)));
        }
    }
}

/// A heartbeat silence a run can have had: no longer than the run was old when selfheal
/// saw it, nor than the whole run (beyond clock noise). A longer one was an earlier row's
/// beat (ids reused), not a pause of this run.
fn possible_silence(gap: u64, fp: &FalsePositive) -> bool {
    let slack = CLOCK_SLACK_S as u64;
    fp.total_age_s
        .is_none_or(|t| gap <= t.saturating_add(slack))
        && fp.runtime_s.is_none_or(|r| gap <= r.saturating_add(slack))
}

/// A suggested value and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    pub secs: u64,
    pub reason: String,
}

/// Fewer successful runs than this make a suggestion a first guess.
const FEW_RUNS: u64 = 20;

/// `max_age`: the larger of 1.5× the longest run and 2× p99 (runtimes grow with the
/// data), rounded up. `None` without a single run that ended well.
pub fn suggest_max_age(h: &Histogram, current_s: u64) -> Option<Suggestion> {
    let max = h.max()?;
    let p99 = h.percentile(990)?;
    let by_max = scaled_ceil(max, 3, 2);
    let by_p99 = p99.saturating_mul(2);
    let secs = friendly_ceil(by_max.max(by_p99));
    let mut reason = format!(
        "1.5× the longest run ({}) is {}; 2× p99 ({}) is {}; the larger, rounded up",
        human(max),
        human(by_max),
        human(p99),
        human(by_p99)
    );
    if max_age_too_low(current_s, max) {
        let _ = write!(
            reason,
            "; the current {} is below 1.5× the longest run: it kills legitimate runs",
            fmt_duration(std::time::Duration::from_secs(current_s))
        );
    }
    if h.count() < FEW_RUNS {
        let _ = write!(
            reason,
            "; only {} run{} ended well: a first guess",
            h.count(),
            if h.count() == 1 { "" } else { "s" }
        );
    }
    Some(Suggestion { secs, reason })
}

/// `stale_after`: only the false positives say anything about it — a live run that went
/// N seconds without a beat needs at least twice that. Without them, keep the current value
/// (stats sees runtimes, not the gaps between beats).
pub fn suggest_stale_after(s: &WatchStats, current_s: u64) -> Suggestion {
    match s.fp_heartbeat_max_s {
        Some(gap) if gap.saturating_mul(2) > current_s => Suggestion {
            secs: friendly_ceil(gap.saturating_mul(2)),
            reason: format!(
                "a run selfheal took for dead on a heartbeat {} old finished anyway: a live run \
                 can go that long without a beat; twice that, rounded up",
                human(gap)
            ),
        },
        Some(gap) => Suggestion {
            secs: current_s,
            reason: format!(
                "keep it: already more than twice the longest silence of a live run that \
                 selfheal took for dead ({})",
                human(gap)
            ),
        },
        None => Suggestion {
            secs: current_s,
            reason: "keep it: no run selfheal took for dead on its heartbeat finished anyway \
                     (it must exceed the longest pause between two beats of the job, which \
                     runtimes cannot show)"
                .into(),
        },
    }
}

/// Both suggestions, consistent with each other (`max_age` above `stale_after`).
pub fn suggestions(
    s: &WatchStats,
    stale_after_s: u64,
    max_age_s: u64,
) -> (Suggestion, Option<Suggestion>) {
    let stale = suggest_stale_after(s, stale_after_s);
    let max = suggest_max_age(&s.runtimes, max_age_s).map(|mut m| {
        if m.secs <= stale.secs {
            m.secs = friendly_ceil(stale.secs.saturating_mul(2));
            m.reason
                .push_str("; raised to twice stale_after, which it must exceed");
        }
        m
    });
    (stale, max)
}

#[cfg(test)]
mod tests;
