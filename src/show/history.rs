//! A row's history as a person reads it: its journal entries, every generation (when,
//! verdict, basis, action, by whom, and what a stopped run's change turned out to be).
//!
//! I/O: reads the journal.

use serde_json::{Value, json};

use crate::config::Config;
use crate::decide::{Action, Verdict};
use crate::journal::{self, DatabaseId, JournalEntry, Outcome};

/// One journal entry of a row, as a person reads it.
#[derive(Debug, Clone)]
pub struct Event {
    pub time: String,
    pub started: Option<String>,
    pub verdict: Verdict,
    pub basis: String,
    pub action: Action,
    pub from: String,
    pub to: String,
    /// `selfheal on HOST`, or the person who decided.
    pub by: String,
    pub note: Option<String>,
    /// The message written to the row, where the entry kept it (journal lines since the
    /// compaction do not: the row holds it).
    pub reason: Option<String>,
    /// `applied` for a change made; `unknown` or `unmatched` for a stopped run's change that
    /// the next run could not tell as selfheal's, with what it found in words.
    pub outcome: Outcome,
    pub outcome_detail: Option<String>,
}

impl Event {
    pub(super) fn of(e: &JournalEntry) -> Event {
        Event {
            time: e.time.clone(),
            started: e.started.clone(),
            verdict: e.verdict,
            basis: e.basis_words(),
            action: e.action,
            from: e.from.clone(),
            to: e.to.clone(),
            by: match &e.actor {
                Some(a) => a.clone(),
                None => format!("selfheal on {}", e.host),
            },
            note: e.decision_note.clone().or_else(|| e.note.clone()),
            reason: Some(e.reason.clone()).filter(|r| !r.is_empty()),
            outcome: e.outcome,
            outcome_detail: e.outcome_words(),
        }
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "time": self.time,
            "started": self.started,
            "verdict": self.verdict,
            "basis": self.basis,
            "action": self.action,
            "from": self.from,
            "to": self.to,
            "by": self.by,
            "note": self.note,
            "reason": self.reason,
            "outcome": self.outcome.as_str(),
            "outcome_detail": self.outcome_detail,
        })
    }
}

/// The journal of `cfg`'s database, every generation, read once: the entries `keep`
/// wants, warnings for damaged lines said.
pub(super) fn read_journal(cfg: &Config, keep: &mut dyn FnMut(JournalEntry)) -> Vec<String> {
    let Some(db) = &cfg.database else {
        return Vec::new();
    };
    match journal::read_all(&cfg.run.state_dir, &DatabaseId::of(db), keep) {
        Ok(read) => read.warnings(),
        Err(e) => vec![format!(
            "{}; the rows' history is not shown",
            e.full_message()
        )],
    }
}
