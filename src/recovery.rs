//! Settling what a stopped run left in `state_dir/pending.jsonl` (see [`crate::journal`]).
//!
//! A run puts the journal entry of every change it is about to try into the intents file,
//! on disk, before its first compare-and-set, and takes them out once every applied change
//! is journaled. A run killed in between (SIGKILL, a crash, a power cut, the database going
//! away) leaves intents behind. The next real run, before it changes anything, settles
//! those that are its own: of its configuration and database
//! ([`crate::journal::Origin`]) and of a watch
//! it checks. An intent whose change id the journal lists (in any generation) is done;
//! otherwise the row is read, and when it shows exactly that change (the target status,
//! the start value selfheal saw, and its message where the watch has a message column) the
//! entry is journaled then, marked `recovered`. The settled intents are taken out of the
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
use crate::journal::{self, JournalEntry, Left, Writer};
use crate::store::{SqlValue, Store};

/// What becomes of one intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
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
    let fates: Vec<Vec<Fate>> = left
        .groups
        .iter()
        .map(|g| {
            g.intents
                .iter()
                .map(|(intent, _)| {
                    if !origin.owns(&g.header, intent) {
                        Fate::Keep
                    } else if intent.change.is_empty() {
                        Fate::Drop
                    } else if selected.contains(intent.watch.as_str()) {
                        Fate::Settle
                    } else if configured.contains(intent.watch.as_str()) {
                        Fate::Keep
                    } else {
                        warnings.push(format!(
                            "{pending_path}: change {} of watch '{}', which is no longer \
                             configured: cannot tell whether it was applied",
                            intent.change, intent.watch
                        ));
                        Fate::Drop
                    }
                })
                .collect()
        })
        .collect();
    let wanted: HashSet<String> = intents_with(&left, &fates, Fate::Settle)
        .map(|(_, e)| e.change.clone())
        .collect();
    let journaled = journal::journaled(&cfg.run.state_dir, &wanted)?;

    // The sessions of the groups with an intent to look up, ended before any row is read.
    for (g, group) in left.groups.iter().enumerate() {
        let unsettled = group
            .intents
            .iter()
            .zip(&fates[g])
            .any(|((e, _), f)| *f == Fate::Settle && !journaled.contains(&e.change));
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
    let mut done = journaled;
    for (_, intent) in intents_with(&left, &fates, Fate::Settle) {
        if done.contains(&intent.change) {
            continue;
        }
        let Some(w) = cfg.watches.iter().find(|w| w.name == intent.watch) else {
            continue;
        };
        let Some(id) = intent.id.to_sql() else {
            continue;
        };
        if applied(store, w, &id, intent)? {
            let entry = JournalEntry {
                recovered: true,
                time: now_rfc3339(),
                database: Some(
                    intent
                        .database
                        .clone()
                        .unwrap_or_else(|| origin.database.clone()),
                ),
                ..intent.clone()
            };
            jw.journal.append(&entry)?;
            done.insert(entry.change);
            recovered += 1;
        }
    }
    jw.journal.sync()?;
    if left.damaged == 0 && fates.iter().flatten().all(|f| *f == Fate::Keep) {
        // Nothing of this run's: the file stays exactly as it is.
        jw.pending.unlock();
        return Ok(warnings);
    }
    for (group, fates) in left.groups.iter_mut().zip(&fates) {
        let mut f = fates.iter();
        group
            .intents
            .retain(|_| f.next().is_some_and(|f| *f == Fate::Keep));
    }
    jw.pending.rewrite(&Left::lines_of(&left.groups))?;
    if recovered > 0 {
        warnings.push(format!(
            "journaled {recovered} change(s) that a stopped run made without journaling them \
             (marked \"recovered\" in {})",
            jw.journal.path().display()
        ));
    }
    Ok(warnings)
}

/// The intents whose fate is `fate`, with their group's index.
fn intents_with<'a>(
    left: &'a Left,
    fates: &'a [Vec<Fate>],
    fate: Fate,
) -> impl Iterator<Item = (usize, &'a JournalEntry)> + 'a {
    left.groups.iter().enumerate().flat_map(move |(g, group)| {
        group
            .intents
            .iter()
            .zip(fates.get(g).into_iter().flatten())
            .filter(move |(_, f)| **f == fate)
            .map(move |((e, _), _)| (g, e))
    })
}

/// True when the row shows exactly the intended change.
fn applied(store: &mut dyn Store, w: &Watch, id: &SqlValue, intent: &JournalEntry) -> Result<bool> {
    let Some(now) = store.current_row(w, id)? else {
        return Ok(false);
    };
    let message_ok = match &now.message {
        None => true,
        Some(m) => m.to_string() == intent.reason,
    };
    Ok(now.status.to_string() == intent.to
        && Some(now.started.to_string()) == intent.started
        && message_ok)
}
