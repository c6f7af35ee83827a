//! Settling what a stopped run left in `state_dir/pending.jsonl` (see [`crate::journal`]).
//!
//! A run puts the journal entry of every change it is about to try into the intents file,
//! on disk, before its first compare-and-set, and takes them out once every applied change
//! is journaled. A run killed in between (SIGKILL, a crash, a power cut, the database going
//! away) leaves intents behind. The next real run, before it changes anything, settles
//! those that are its own: of its configuration and database
//! ([`crate::journal::Origin`]) and of a watch
//! it checks. An intent whose change id the journal lists (in any generation) is done;
//! otherwise the row is read, and the intent is journaled by what it shows ([`Seen`]):
//! - the change, as selfheal's — the start value selfheal saw and selfheal's exact message
//!   in the message column, with the target status (or any status but the one the stopped
//!   run saw: the row moved on since, at the same start): journaled then, marked
//!   `recovered`;
//! - the change, but nothing tells it was selfheal's (the watch has no message column, and
//!   a job that failed may write that very status itself): journaled with
//!   `"outcome": "unknown"` and the row as found, never as a change selfheal made, and
//!   said in one warning per run;
//! - a row that no longer matches (gone, its start moved — started again, or a start column
//!   that moves on every write —, another status, another message): journaled with
//!   `"outcome": "unmatched"`, the reason and the row as found, and counted in one warning
//!   per run;
//! - the row as the stopped run saw it (its status then, the same start, not selfheal's
//!   message): the change was never made; nothing is journaled, and this run judges the
//!   row again like any other.
//!
//! So no intent of this run's is dropped unsaid, and none is journaled as selfheal's change
//! unless the row proves it. The settled intents are taken out of the
//! file; the rest stay as they are — those of watches this run did not select (`--watch`)
//! until a run that checks them, and those of another configuration sharing the state
//! directory until that configuration's next run. Only an intent of a watch its own
//! configuration no longer has is dropped, with a warning.
//!
//! On MySQL the stopped run's session may still be on the server, its last `UPDATE`
//! waiting on a row lock to apply later: before any row of its intents is read, unless
//! the server restarted since (then that session is gone, and its connection id may be
//! someone else's), that session is ended (`KILL`, allowed for one's own sessions) and
//! waited for, bounded. If it is still there, the run stops with an error (exit 3) and the
//! next run tries again.
//!
//! Damaged lines in the intents file (not UTF-8, cut short) are skipped, counted in one
//! warning naming the file, and dropped with the next rewrite: never fatal.
//!
//! I/O: reads the intents file (under its lock) and the journal's generations, reads one
//! row per unsettled intent, appends to the journal and flushes it, rewrites the intents
//! file. Uses the journal and the store only: intents and journal lines are
//! [`JournalEntry`] values.

use std::collections::HashSet;

use crate::clock::now_rfc3339;
use crate::config::{Config, Watch};
use crate::error::{Error, Result};
use crate::journal::{self, Found, JournalEntry, Left, Outcome, OutcomeBasis, Writer};
use crate::store::{SqlValue, Store};

/// What this run does with one intent a stopped run left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntentHandling {
    /// Another configuration's or database's, or of a watch this run did not select.
    Keep,
    /// This run settles it.
    Settle,
    /// Nothing can be done with it (no change id, or a watch no longer configured).
    Drop,
}

/// Settles the intents of this run's configuration and selected watches that a stopped
/// run left; returns warnings for the operator.
pub fn settle(cfg: &Config, store: &mut dyn Store, jw: &mut Writer) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let Some(mut left) = jw.pending.read_locked()? else {
        jw.pending.unlock();
        return Ok(warnings);
    };
    let pending_path = jw.pending.path().display().to_string();
    if left.damaged > 0 {
        warnings.push(format!(
            "{pending_path}: skipped {} damaged line{} (cut short by a crash, or not an \
             intent at all); the rest was settled",
            left.damaged,
            if left.damaged == 1 { "" } else { "s" }
        ));
    }
    let selected: HashSet<&str> = cfg.watches.iter().map(|w| w.name.as_str()).collect();
    let configured: HashSet<&str> = cfg.all_watches.iter().map(|(n, _)| n.as_str()).collect();
    let origin = &jw.origin;
    let handling: Vec<Vec<IntentHandling>> = left
        .groups
        .iter()
        .map(|g| {
            g.intents
                .iter()
                .map(|(intent, _)| {
                    if !origin.owns(&g.header, intent) {
                        IntentHandling::Keep
                    } else if intent.change.is_empty() {
                        IntentHandling::Drop
                    } else if selected.contains(intent.watch.as_str()) {
                        IntentHandling::Settle
                    } else if configured.contains(intent.watch.as_str()) {
                        IntentHandling::Keep
                    } else {
                        warnings.push(format!(
                            "{pending_path}: change {} of watch '{}', which is no longer \
                             configured: cannot tell whether it was applied",
                            intent.change, intent.watch
                        ));
                        IntentHandling::Drop
                    }
                })
                .collect()
        })
        .collect();
    let wanted: HashSet<String> = intents_with(&left, &handling, IntentHandling::Settle)
        .map(|(_, e)| e.change.clone())
        .collect();
    let journaled = journal::journaled(&cfg.run.state_dir, &wanted)?;

    // The sessions of the groups with an intent to look up, ended before any row is read.
    for (g, group) in left.groups.iter().enumerate() {
        let unsettled = group
            .intents
            .iter()
            .zip(&handling[g])
            .any(|((e, _), h)| *h == IntentHandling::Settle && !journaled.contains(&e.change));
        if let Some(session) = &group.header.session
            && unsettled
            && !store.end_session(session)?
        {
            let conn = session.connection;
            return Err(Error::database_kind(
                format!("{pending_path}: settling a stopped run's changes"),
                crate::error::DbErrorKind::TimedOut,
                format!(
                    "its session (connection {conn}) is still running a statement on the \
                     server; the next run tries again"
                ),
            ));
        }
    }

    let mut recovered = 0usize;
    let mut unknown: Vec<JournalEntry> = Vec::new();
    let mut unmatched: Vec<JournalEntry> = Vec::new();
    // Intents whose row is exactly as the stopped run found it: never made, judged again.
    let mut not_made = 0usize;
    let mut done = journaled;
    for (_, intent) in intents_with(&left, &handling, IntentHandling::Settle) {
        if done.contains(&intent.change) {
            continue;
        }
        let Some(w) = cfg.watches.iter().find(|w| w.name == intent.watch) else {
            continue;
        };
        let Some(id) = intent.id.to_sql() else {
            continue;
        };
        let entry = JournalEntry {
            time: now_rfc3339(),
            database: Some(
                intent
                    .database
                    .clone()
                    .unwrap_or_else(|| origin.database.clone()),
            ),
            ..intent.clone()
        };
        let entry = match seen(store, w, &id, intent)? {
            Seen::NotMade => {
                not_made += 1;
                continue;
            }
            Seen::Made => {
                recovered += 1;
                JournalEntry {
                    recovered: true,
                    ..entry
                }
            }
            Seen::Other(outcome, basis, found) => JournalEntry {
                applied: false,
                outcome,
                outcome_basis: Some(basis),
                found,
                ..entry
            },
        };
        jw.journal.append(&entry)?;
        match entry.outcome {
            Outcome::Applied => {}
            Outcome::Unknown => unknown.push(entry.clone()),
            Outcome::Unmatched => unmatched.push(entry.clone()),
        }
        done.insert(entry.change);
    }
    jw.journal.sync()?;
    if left.damaged == 0
        && handling
            .iter()
            .flatten()
            .all(|h| *h == IntentHandling::Keep)
    {
        // Nothing of this run's: the file stays exactly as it is.
        jw.pending.unlock();
        return Ok(warnings);
    }
    for (group, handling) in left.groups.iter_mut().zip(&handling) {
        let mut h = handling.iter();
        group
            .intents
            .retain(|_| h.next().is_some_and(|h| *h == IntentHandling::Keep));
    }
    jw.pending.rewrite(&Left::lines_of(&left.groups))?;
    if recovered > 0 {
        warnings.push(format!(
            "journaled {recovered} change(s) that a stopped run made without journaling them \
             (marked \"recovered\" in {})",
            jw.journal.path().display()
        ));
    }
    let journal_path = jw.journal.path().display().to_string();
    warnings.extend(unknown_warning(&unknown, &journal_path));
    warnings.extend(unmatched_warning(&unmatched, &journal_path));
    if not_made > 0 {
        // Not journaled (nothing was changed), but never dropped unsaid.
        warnings.push(format!(
            "{not_made} change{} a stopped run was about to make {} never made (the row{} \
             as it found {}): this run judges {} again",
            plural(not_made),
            if not_made == 1 { "was" } else { "were" },
            if not_made == 1 { " is" } else { "s are" },
            if not_made == 1 { "it" } else { "them" },
            if not_made == 1 { "it" } else { "them" },
        ));
    }
    Ok(warnings)
}

/// The one warning of a run for the changes a stopped run tried that the rows show, but
/// that nothing tells as selfheal's.
fn unknown_warning(unknown: &[JournalEntry], journal: &str) -> Option<String> {
    let first = unknown.first()?;
    let mut watches: Vec<&str> = unknown.iter().map(|e| e.watch.as_str()).collect();
    watches.sort_unstable();
    watches.dedup();
    let n = unknown.len();
    Some(format!(
        "{n} change{} a stopped run was making show{} in {} row{} (e.g. watch {} id={} is \
         '{}'), but watch{} {} {} no message_column to tell selfheal's write from the job's \
         own: journaled with \"outcome\": \"unknown\" in {journal}, not as selfheal's \
         changes; a message_column lets a later run tell them apart",
        plural(n),
        if n == 1 { "s" } else { "" },
        if n == 1 { "its" } else { "their" },
        plural(n),
        first.watch,
        first.id.key(),
        first.to,
        plural(watches.len()),
        watches
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(", "),
        if watches.len() == 1 { "has" } else { "have" },
    ))
}

/// The one warning of a run for the intents of a stopped run that no longer match their
/// rows.
fn unmatched_warning(unmatched: &[JournalEntry], journal: &str) -> Option<String> {
    let first = unmatched.first()?;
    let n = unmatched.len();
    Some(format!(
        "{n} change{} a stopped run was making no longer match{} {} row{} (e.g. watch {} \
         id={}: {}): journaled with \"outcome\": \"unmatched\" in {journal}; whether \
         selfheal made {} cannot be told",
        plural(n),
        if n == 1 { "es" } else { "" },
        if n == 1 { "its" } else { "their" },
        plural(n),
        first.watch,
        first.id.key(),
        first.outcome_words().unwrap_or_default(),
        if n == 1 { "it" } else { "them" },
    ))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The intents to be handled as `how`, with their group's index.
fn intents_with<'a>(
    left: &'a Left,
    handling: &'a [Vec<IntentHandling>],
    how: IntentHandling,
) -> impl Iterator<Item = (usize, &'a JournalEntry)> + 'a {
    left.groups.iter().enumerate().flat_map(move |(g, group)| {
        group
            .intents
            .iter()
            .zip(handling.get(g).into_iter().flatten())
            .filter(move |(_, h)| **h == how)
            .map(move |((e, _), _)| (g, e))
    })
}

/// What the row shows of an intent's change (see the module documentation).
#[derive(Debug)]
enum Seen {
    /// The change, as selfheal's.
    Made,
    /// The row as the stopped run saw it: the change was never made.
    NotMade,
    /// Anything else: journaled with this outcome, why, and the row as found.
    Other(Outcome, OutcomeBasis, Option<Found>),
}

/// Reads the row of `intent` and tells what it shows ([`Seen`]).
fn seen(store: &mut dyn Store, w: &Watch, id: &SqlValue, intent: &JournalEntry) -> Result<Seen> {
    let Some(now) = store.current_row(w, id)? else {
        return Ok(Seen::Other(Outcome::Unmatched, OutcomeBasis::RowGone, None));
    };
    let found = Found {
        status: now.status.to_string(),
        started: now.started.to_string(),
    };
    // Only selfheal writes its own message, word for word (it carries the row's figures).
    let message = now.message.as_ref().map(|m| m.to_string() == intent.reason);
    let other = |outcome, basis, found| Ok(Seen::Other(outcome, basis, Some(found)));
    if intent.started.as_deref() != Some(found.started.as_str()) {
        return other(Outcome::Unmatched, OutcomeBasis::StartMoved, found);
    }
    if found.status != intent.to {
        return Ok(match message {
            // Made, then moved on at the same start (a retry claimed again within the
            // start column's resolution).
            Some(true) => Seen::Made,
            _ if found.status == intent.from => Seen::NotMade,
            _ => Seen::Other(Outcome::Unmatched, OutcomeBasis::StatusMoved, Some(found)),
        });
    }
    match message {
        Some(true) => Ok(Seen::Made),
        Some(false) => other(Outcome::Unmatched, OutcomeBasis::OtherMessage, found),
        None => other(Outcome::Unknown, OutcomeBasis::NoMessageColumn, found),
    }
}
