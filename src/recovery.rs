//! Settling what a stopped run left in `state_dir/pending.jsonl` (see [`crate::journal`]).
//!
//! A run puts the journal entry of every change it is about to try into the intents file,
//! on disk, before its first compare-and-set, and empties the file once every applied
//! change is journaled. A run killed in between (SIGKILL, a crash, a power cut, the
//! database going away) leaves intents behind. The next real run, before it changes
//! anything, settles each of them: an intent whose change id the journal lists since the
//! intents were written is done; otherwise the row is read, and when it shows exactly that
//! change (the target status, the start value selfheal saw, and its message where the
//! watch has a message column) the entry is journaled then, marked `recovered`. Then the
//! file is emptied.
//!
//! On MySQL the stopped run's session may still be on the server, its last `UPDATE`
//! waiting on a row lock to apply later: unless the server restarted since (then that
//! session is gone, and its connection id may be someone else's), that session is ended
//! (`KILL`, allowed for one's own sessions) and waited for, bounded, before any row is
//! read. If it is still there, the run stops with an error (exit 3) and the next run tries
//! again.
//!
//! I/O: reads the intents file and the journal's tail, reads one row per unsettled intent,
//! appends to the journal and flushes it, truncates the intents file. Uses the journal and
//! the store only: intents and journal lines are [`JournalEntry`] values.

use std::collections::HashSet;

use crate::clock::now_rfc3339;
use crate::config::{Config, Watch};
use crate::error::{Error, Result};
use crate::journal::{self, JournalEntry, Writer};
use crate::store::{SqlValue, Store};

/// Settles the intents a stopped run left; returns warnings for the operator.
pub fn settle(cfg: &Config, store: &mut dyn Store, jw: &mut Writer) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let Some(left) = jw.pending.read()? else {
        return Ok(warnings);
    };
    let pending_path = jw.pending.path().display().to_string();
    if left.damaged > 0 {
        warnings.push(format!(
            "{pending_path}: skipped {} damaged line(s) of a stopped run's intents",
            left.damaged
        ));
    }
    if let Some(session) = &left.header.session
        && !store.end_session(session)?
    {
        let conn = session.connection;
        return Err(Error::database_kind(
            format!("{pending_path}: settling a stopped run's changes"),
            crate::error::DbErrorKind::TimedOut,
            format!(
                "its session (connection {conn}) is still running a statement on the server; \
                 the next run tries again"
            ),
        ));
    }
    let mut journaled = HashSet::new();
    journal::read_from(jw.journal.path(), left.header.journal_offset, &mut |e| {
        if !e.change.is_empty() {
            journaled.insert(e.change);
        }
    })?;
    let mut recovered = 0usize;
    for intent in left.intents {
        if intent.change.is_empty() || journaled.contains(&intent.change) {
            continue;
        }
        let Some(w) = cfg.watches.iter().find(|w| w.name == intent.watch) else {
            warnings.push(format!(
                "{pending_path}: change {} of watch '{}', which is no longer \
                 configured: cannot tell whether it was applied",
                intent.change, intent.watch
            ));
            continue;
        };
        let Some(id) = intent.id.to_sql() else {
            continue;
        };
        if applied(store, w, &id, &intent)? {
            let entry = JournalEntry {
                recovered: true,
                time: now_rfc3339(),
                ..intent
            };
            jw.journal.append(&entry)?;
            journaled.insert(entry.change);
            recovered += 1;
        }
    }
    jw.journal.sync()?;
    jw.pending.clear()?;
    if recovered > 0 {
        warnings.push(format!(
            "journaled {recovered} change(s) that a stopped run made without journaling them \
             (marked \"recovered\" in {})",
            jw.journal.path().display()
        ));
    }
    Ok(warnings)
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
