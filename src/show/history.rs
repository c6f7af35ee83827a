//! A row's history as a person reads it: its journal entries, every generation (when,
//! verdict, basis, action, by whom, and what a stopped run's change turned out to be).
//!
//! I/O: reads the journal.

use serde_json::{Value, json};

use crate::config::Config;
use crate::decide::{Action, Verdict};
use crate::escape::printable;
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
            // Escaped again: a line an earlier release wrote may hold them raw.
            by: match &e.actor {
                Some(a) => printable(a).into_owned(),
                None => format!("selfheal on {}", e.host),
            },
            note: e
                .decision_note
                .as_deref()
                .or(e.note.as_deref())
                .map(|n| printable(n).into_owned()),
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
    read_journal_cut(cfg, keep).0
}

/// [`read_journal`], and when older history was rotated away, that in words (`None`
/// when nothing was dropped).
pub(super) fn read_journal_cut(
    cfg: &Config,
    keep: &mut dyn FnMut(JournalEntry),
) -> (Vec<String>, Option<String>) {
    let Some(db) = &cfg.database else {
        return (Vec::new(), None);
    };
    match journal::read_all(&cfg.run.state_dir, &DatabaseId::of(db), keep) {
        Ok(read) => (read.warnings(), read.cut_words()),
        Err(e) => (
            vec![format!(
                "{}; the rows' history is not shown",
                e.full_message()
            )],
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Found, OutcomeBasis, RowId};

    fn parked_by_selfheal() -> JournalEntry {
        JournalEntry {
            time: "2026-03-05T11:00:00Z".into(),
            host: "web1".into(),
            watch: "sync".into(),
            id: RowId::Int(7),
            started: Some("2026-03-05 10:30:00".into()),
            from: "running".into(),
            to: "wait_manual".into(),
            verdict: Verdict::Hung,
            basis: "stale_but_lock_held".into(),
            action: Action::MarkManual,
            applied: true,
            reason: "self-heal: hung: lock held".into(),
            ..JournalEntry::default()
        }
    }

    #[test]
    fn an_entry_says_who_changed_what_and_why_in_words() {
        assert_eq!(
            Event::of(&parked_by_selfheal()).to_json(),
            json!({
                "time": "2026-03-05T11:00:00Z",
                "started": "2026-03-05 10:30:00",
                "verdict": "hung",
                "basis": "the heartbeat is stale, but the job's lock is held",
                "action": "mark_manual",
                "from": "running",
                "to": "wait_manual",
                "by": "selfheal on web1",
                "note": null,
                "reason": "self-heal: hung: lock held",
                "outcome": "applied",
                "outcome_detail": null,
            })
        );
    }

    #[test]
    fn a_persons_decision_is_by_them_with_their_note() {
        let e = JournalEntry {
            time: "2026-03-05T12:00:00Z".into(),
            from: "wait_manual".into(),
            to: "running".into(),
            action: Action::Unpark,
            reason: String::new(),
            note: Some("selfheal's own note".into()),
            actor: Some("alice".into()),
            decision_note: Some("worker restarted by hand".into()),
            ..parked_by_selfheal()
        };
        let v = Event::of(&e).to_json();
        assert_eq!(v["by"], "alice");
        assert_eq!(v["note"], "worker restarted by hand");
        assert_eq!(v["action"], "recovered");
        assert_eq!(v["reason"], Value::Null, "an empty message is none");
    }

    #[test]
    fn a_stopped_runs_change_says_what_was_found() {
        let e = JournalEntry {
            outcome: Outcome::Unmatched,
            outcome_basis: Some(OutcomeBasis::StartMoved),
            found: Some(Found {
                status: "running".into(),
                started: "2026-03-05 11:50:00".into(),
            }),
            ..parked_by_selfheal()
        };
        let v = Event::of(&e).to_json();
        assert_eq!(v["outcome"], "unmatched");
        assert_eq!(
            v["outcome_detail"],
            "the row's start moved from 2026-03-05 10:30:00 to 2026-03-05 11:50:00 (status \
             'running')"
        );
    }
}
