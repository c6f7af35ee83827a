//! A person's `selfheal resolve --as running` holds (docs/design.md#resolve): a row a person put back to
//! running is not parked again for the reason they overruled — the same verdict and basis
//! — until the evidence changes: its heartbeat goes stale again (it was fresh when they
//! decided and is stale now, or it beat after the decision and is stale now), or another
//! `max_age` passes after the decision. Without this, the very next run parks a row a
//! person just looked at, for the reason they looked at.
//!
//! The decisions are read from the journal (the last applied change of each row is the
//! person's), once per watch and only when a row of it would be parked or reported as
//! `hung` or `overtime`. Pure but [`load`], which reads the journal.

use std::collections::HashMap;

use crate::config::Watch;
use crate::decide::{Action, Decision, Evidence, Heartbeat, Thresholds, Verdict};
use crate::error::Result;
use crate::journal::DatabaseId;

/// How far apart (seconds) two readings of the same last beat may lie: ages are whole
/// seconds, read at two moments.
const SAME_BEAT_SLACK_S: i64 = 2;

/// A person's `--as running` for one row (id and start value), as the journal has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// Who decided.
    pub actor: String,
    /// When (unix seconds).
    pub at: i64,
    /// The verdict and basis (its code) the row had when the person decided.
    pub verdict: Verdict,
    pub basis: String,
    /// When the row's last beat was, as seen then (unix seconds), if it had one.
    pub beat_at: Option<i64>,
    /// Its heartbeat was fresh then.
    pub fresh_then: bool,
}

/// The key of a row: its id (as the journal keys it) and its start value.
pub type Key = (String, String);

/// The rows of watch `w` whose last applied change in the journal is a person's
/// `--as running` (of this database).
pub fn load(
    state_dir: &std::path::Path,
    db: &DatabaseId,
    w: &Watch,
) -> Result<HashMap<Key, Decided>> {
    let mut last: HashMap<Key, Option<Decided>> = HashMap::new();
    crate::journal::read_all(state_dir, db, &mut |e| {
        if e.watch != w.name || !e.applied {
            return;
        }
        let key = (e.id.key(), e.started.clone().unwrap_or_default());
        let decided = match (&e.actor, e.action) {
            (Some(actor), Action::Unpark) => chrono::DateTime::parse_from_rfc3339(&e.time)
                .ok()
                .map(|t| t.timestamp())
                .map(|at| Decided {
                    actor: crate::escape::printable(actor).into_owned(),
                    at,
                    verdict: e.verdict,
                    basis: e.basis.clone(),
                    beat_at: e
                        .evidence
                        .heartbeat_age_s
                        .and_then(|a| i64::try_from(a).ok())
                        .map(|a| at.saturating_sub(a)),
                    fresh_then: e
                        .evidence
                        .heartbeat_age_s
                        .is_some_and(|a| a <= e.stale_after_s),
                }),
            _ => None,
        };
        last.insert(key, decided);
    })?;
    Ok(last
        .into_iter()
        .filter_map(|(k, d)| d.map(|d| (k, d)))
        .collect())
}

/// True when a person's decision still holds the row against decision `d` on evidence
/// `ev` at `now` (unix seconds, host clock): the same verdict and basis as when they
/// decided, within `max_age` of the decision, and its heartbeat not stale again.
pub fn holds(p: &Decided, d: &Decision, ev: &Evidence, now: i64, t: Thresholds) -> bool {
    let same = p.verdict == d.verdict && p.basis == d.basis.code();
    let within = now.saturating_sub(p.at) < i64::try_from(t.max_age).unwrap_or(i64::MAX);
    let beat_now = match ev.heartbeat {
        Heartbeat::Age(a) => i64::try_from(a).ok().map(|a| now.saturating_sub(a)),
        _ => None,
    };
    let stale_now = !matches!(ev.heartbeat, Heartbeat::Age(a) if a <= t.stale_after);
    let beat_since = match (p.beat_at, beat_now) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(then), Some(now)) => now > then.saturating_add(SAME_BEAT_SLACK_S),
    };
    let stale_again = stale_now && (p.fresh_then || beat_since);
    same && within && !stale_again && matches!(d.verdict, Verdict::Hung | Verdict::Overtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Basis, Lock};

    fn ev(hb: Heartbeat) -> Evidence {
        Evidence::aged(20_000)
            .with_heartbeat(hb)
            .with_lock(Lock::Held { pid: Some(7) })
            .with_lock_own(true)
    }

    const T: Thresholds = Thresholds {
        stale_after: 300,
        max_age: 14_400,
    };

    #[test]
    fn a_persons_running_holds_until_the_evidence_changes() {
        let hung = Decision::new(Verdict::Hung, Basis::StaleButLockHeld);
        let overtime = Decision::new(Verdict::Overtime, Basis::MaxAgeWorkerLives);
        // A hung row, decided at 10,000 with its last beat 1,200 s before.
        let p = Decided {
            actor: "alice".into(),
            at: 10_000,
            verdict: Verdict::Hung,
            basis: hung.basis.code(),
            beat_at: Some(8_800),
            fresh_then: false,
        };
        // The same silence a run later: held.
        assert!(holds(&p, &hung, &ev(Heartbeat::Age(1_800)), 10_600, T));
        assert!(holds(&p, &hung, &ev(Heartbeat::Age(1_801)), 10_600, T));
        // It beat after the decision and is stale again: judged again.
        assert!(!holds(&p, &hung, &ev(Heartbeat::Age(400)), 10_600, T));
        // Another max_age after the decision: judged again.
        assert!(!holds(&p, &hung, &ev(Heartbeat::Age(15_600)), 24_400, T));
        // Another reason: judged as it is.
        assert!(!holds(&p, &overtime, &ev(Heartbeat::Age(1_800)), 10_600, T));
        // A beating overtime row the person put back: held while it beats, for another
        // max_age.
        let po = Decided {
            verdict: Verdict::Overtime,
            basis: overtime.basis.code(),
            beat_at: Some(9_999),
            fresh_then: true,
            ..p.clone()
        };
        assert!(holds(&po, &overtime, &ev(Heartbeat::Age(1)), 10_600, T));
        assert!(holds(&po, &overtime, &ev(Heartbeat::Age(300)), 20_000, T));
        assert!(!holds(&po, &overtime, &ev(Heartbeat::Age(1)), 24_400, T));
        // ...until its heartbeat goes stale.
        assert!(!holds(&po, &overtime, &ev(Heartbeat::Age(301)), 10_600, T));
        assert!(!holds(&po, &overtime, &ev(Heartbeat::Missing), 10_600, T));
        // A row with no beat then that beats now and is stale again changed.
        let none = Decided { beat_at: None, ..p };
        assert!(!holds(&none, &hung, &ev(Heartbeat::Age(900)), 10_600, T));
        assert!(holds(&none, &hung, &ev(Heartbeat::Missing), 10_600, T));
    }
}
