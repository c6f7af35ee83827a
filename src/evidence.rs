//! One running row's evidence: gathered from the probes ([`gather`], the probe seam) and
//! rendered, once, as name/value pairs ([`render`]) that every output takes its part of —
//! the `--explain` line, the row message, the JSON row, the journal entry (and through
//! them the text line, the event log and `stats`).
//!
//! A new evidence source is a new file in `probe/` (it only looks, never writes) plus
//! three small edits: its field in [`crate::decide::Evidence`] (whose rules then say what
//! it proves), one line in [`gather`], and its entry in the one rendering — a block in
//! [`render`] with its field in [`Record`] (the JSON row and the journal carry that as it
//! is), and its widest form in [`longest_message`].
//!
//! I/O: [`gather`] reads what the watch's probes read (a heartbeat file's mtime, the job's
//! lock, the owner's `/proc` entry) — except for a row whose owner is another host, of
//! which only the database's values are read (its files, locks and pids are that host's);
//! rendering is pure.

use std::borrow::Cow;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::clock::{Clocks, age_on_db_clock, epoch, human, plausible_age};
use crate::config::{ReleaseLock, Watch};
use crate::decide::{Basis, Decision, Evidence, Heartbeat, Lock, Owner, Thresholds, Verdict};
use crate::host::Host;
use crate::probe::{self, LockTable};
use crate::store::RunningRow;

/// The watch's thresholds, in seconds, as the decision takes them.
pub fn thresholds(w: &Watch) -> Thresholds {
    Thresholds {
        stale_after: w.stale_after.as_secs(),
        max_age: w.max_age.as_secs(),
    }
}

/// Gathers the evidence for one row. `locks` is a snapshot of `/proc/locks` (or `None`
/// for the try-lock fallback); `host_now` is the host clock for file mtimes.
pub fn gather(
    w: &Watch,
    row: &RunningRow,
    clocks: &Clocks,
    host: &Host,
    host_now: SystemTime,
    locks: Option<&LockTable>,
) -> Evidence {
    let total_age = total_age(w, row, clocks);
    let owner = match &w.owner_column {
        None => Owner::NotConfigured,
        Some(_) => {
            // The row's start on the host timeline: host now minus the row's age, so a
            // skewed database clock does not make a worker look younger than its row.
            // An age beyond i64 (never produced) would place the start at the earliest time.
            let age = total_age
                .as_ref()
                .map_or(0, |a| i64::try_from(*a).unwrap_or(i64::MAX));
            let started = epoch(host_now).saturating_sub(age);
            probe::probe_owner(host, row.owner.as_deref(), started)
        }
    };
    if matches!(owner, Owner::NotLocal { .. }) {
        // Another host's row: its heartbeat file, lock and pid live on that host, and
        // whatever this host has under the same names is not them. Only what the
        // database holds is the row's own evidence.
        return Evidence {
            total_age,
            heartbeat: column_heartbeat(row, clocks).unwrap_or(Heartbeat::Missing),
            lock: Lock::NotConfigured,
            owner,
        };
    }
    let id = row.id.to_string();
    let heartbeat = heartbeat(w, row, &id, clocks, host_now);
    let lock = match &w.lock_file {
        None => Lock::NotConfigured,
        Some(t) => match t.render(&id) {
            // A legacy existence lock is never kernel-locked: "free" is its normal state.
            Ok(p) => match probe::probe_lock(&p, locks) {
                Lock::Free if w.release_lock == ReleaseLock::IfFree => Lock::Present,
                l => l,
            },
            Err(why) => Lock::Unreadable(format!("lock_file: {why}")),
        },
    };
    Evidence {
        total_age,
        heartbeat,
        lock,
        owner,
    }
}

/// Seconds since the row started, on the database clock.
fn total_age(w: &Watch, row: &RunningRow, clocks: &Clocks) -> Result<u64, String> {
    match &row.started.stamp {
        Err(e) => Err(format!("{} = {}: {e}", w.started_column, row.started.raw)),
        Ok(None) => Err(format!("{} is NULL", w.started_column)),
        Ok(Some(s)) => age_on_db_clock(*s, &clocks.db, clocks.tz)
            .and_then(|a| plausible_age(a, &format!("{} ({})", w.started_column, row.started.raw))),
    }
}

/// The freshest of the heartbeat file (host clock) and the heartbeat column (database
/// clock), where the watch names them.
fn heartbeat(
    w: &Watch,
    row: &RunningRow,
    id: &str,
    clocks: &Clocks,
    host_now: SystemTime,
) -> Heartbeat {
    let from_file = w.heartbeat_file.as_ref().map(|t| match t.render(id) {
        Ok(p) => probe::file_heartbeat(&p, host_now),
        Err(why) => Heartbeat::Unreadable(format!("heartbeat_file: {why}")),
    });
    let from_column = column_heartbeat(row, clocks);
    match (from_file, from_column) {
        (Some(a), Some(b)) => probe::heartbeat::combine(a, b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => Heartbeat::Missing,
    }
}

/// The host a row belongs to: the `HOST` of a `HOST:PID` owner as the row writes it;
/// this host's name for a bare `PID`, an empty owner or a watch without `owner_column`
/// (such rows are judged as this host's); `None` for an owner that is not an owner.
pub fn owner_host(row: &RunningRow, e: &Evidence, host: &Host) -> Option<String> {
    match &e.owner {
        Owner::NotLocal { host } => Some(host.clone()),
        Owner::Invalid(_) | Owner::Unreadable(_) => None,
        _ => match row.owner.as_deref().and_then(probe::owner::parse_owner) {
            Some((Some(h), _)) => Some(h.to_string()),
            _ => Some(host.name.clone()),
        },
    }
}

/// The heartbeat column's age on the database clock, where the watch has one.
fn column_heartbeat(row: &RunningRow, clocks: &Clocks) -> Option<Heartbeat> {
    row.heartbeat.as_ref().map(|tv| match &tv.stamp {
        Ok(None) => Heartbeat::Missing,
        Ok(Some(s)) => match age_on_db_clock(*s, &clocks.db, clocks.tz)
            .and_then(|a| plausible_age(a, &format!("heartbeat column ({})", tv.raw)))
        {
            Ok(a) => Heartbeat::Age(a),
            Err(why) => Heartbeat::Unreadable(why),
        },
        Err(why) => Heartbeat::Unreadable(format!("heartbeat column: {why}")),
    })
}

/// The evidence as programs read it: flattened into the JSON row (SPEC §7) and into the
/// journal entry, under these names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    pub total_age_s: Option<u64>,
    pub heartbeat_age_s: Option<u64>,
    /// `present`, `missing`, or `unreadable: why`.
    pub heartbeat: Cow<'static, str>,
    /// `none`, `held`, `free`, `present`, `absent`, `unreadable`.
    pub lock: Cow<'static, str>,
    pub lock_pid: Option<u32>,
    /// `none`, `empty`, `alive`, `dead`, `reused`, `remote`, `invalid`, `unreadable`.
    pub owner: Cow<'static, str>,
    pub owner_pid: Option<u32>,
}

/// A value as the row message (and, mostly, `--explain`) writes it; formatted only where it
/// is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `missing`, `free`, `none`.
    Word(&'static str),
    /// Seconds: `2820s`.
    Secs(u64),
    /// A state and its pid: `held:4242`.
    Pid(&'static str, u32),
    /// A state and a name: `remote:web2`.
    Named(&'static str, String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Word(w) => f.write_str(w),
            Value::Secs(s) => write!(f, "{s}s"),
            Value::Pid(w, pid) => write!(f, "{w}:{pid}"),
            Value::Named(w, name) => write!(f, "{w}:{name}"),
        }
    }
}

/// How `--explain` writes a value; formatted only when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Human {
    /// As in the row message.
    Same,
    /// A duration: `47m`.
    Duration(u64),
    /// A duration before now: `47m ago`.
    Ago(u64),
}

/// One piece of evidence as people read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Its name in the row message: `heartbeat_age`, `lock`.
    pub key: &'static str,
    /// Its value there: `2820s`, `held:4242`, `missing`.
    pub value: Value,
    /// The threshold it is judged against (name, seconds), written right after it in the
    /// row message.
    pub limit: Option<(&'static str, Value)>,
    /// The row message shows it (an owner column that is not configured is left out).
    pub in_message: bool,
    /// Its word in `--explain` (`heartbeat`), and its value there.
    pub word: &'static str,
    pub human: Human,
    /// It opens the `--explain` line (the row's age: `running 47m`).
    pub leads: bool,
}

impl Item {
    /// Its value in `--explain`: `47m ago`, `held:4242`.
    pub fn human(&self) -> String {
        match self.human {
            Human::Same => self.value.to_string(),
            Human::Duration(a) => human(a),
            Human::Ago(a) => format!("{} ago", human(a)),
        }
    }
}

/// The one rendering of a row's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// In the row message's order.
    pub items: Vec<Item>,
    pub record: Record,
}

/// Renders evidence judged against `t`. Each source is one block here.
pub fn render(e: &Evidence, t: Thresholds) -> Rendered {
    let mut items = Vec::with_capacity(4);
    let mut record = Record::default();

    let (value, human_value) = match &e.heartbeat {
        Heartbeat::Age(a) => (Value::Secs(*a), Human::Ago(*a)),
        Heartbeat::Missing => (Value::Word("missing"), Human::Same),
        Heartbeat::Unreadable(_) => (Value::Word("unreadable"), Human::Same),
    };
    record.heartbeat_age_s = match e.heartbeat {
        Heartbeat::Age(a) => Some(a),
        _ => None,
    };
    record.heartbeat = match &e.heartbeat {
        Heartbeat::Age(_) => "present".into(),
        Heartbeat::Missing => "missing".into(),
        Heartbeat::Unreadable(why) => format!("unreadable: {why}").into(),
    };
    items.push(Item {
        key: "heartbeat_age",
        value,
        limit: Some(("stale_after", Value::Secs(t.stale_after))),
        in_message: true,
        word: "heartbeat",
        human: human_value,
        leads: false,
    });

    let (value, human_value) = match &e.total_age {
        Ok(a) => (Value::Secs(*a), Human::Duration(*a)),
        Err(_) => (Value::Word("unknown"), Human::Same),
    };
    record.total_age_s = e.total_age.as_ref().ok().copied();
    items.push(Item {
        key: "total_age",
        value,
        limit: Some(("max_age", Value::Secs(t.max_age))),
        in_message: true,
        word: "running",
        human: human_value,
        leads: true,
    });

    let (state, pid) = match &e.lock {
        Lock::NotConfigured => ("none", None),
        Lock::Held { pid } => ("held", *pid),
        Lock::Free => ("free", None),
        Lock::Present => ("present", None),
        Lock::Absent => ("absent", None),
        Lock::Unreadable(_) => ("unreadable", None),
    };
    (record.lock, record.lock_pid) = (state.into(), pid);
    items.push(Item {
        key: "lock",
        value: pid.map_or(Value::Word(state), |p| Value::Pid(state, p)),
        limit: None,
        in_message: true,
        word: "lock",
        human: Human::Same,
        leads: false,
    });

    let (state, pid) = match &e.owner {
        Owner::NotConfigured => ("none", None),
        Owner::Empty => ("empty", None),
        Owner::Alive { pid } => ("alive", Some(*pid)),
        Owner::Dead { pid } => ("dead", Some(*pid)),
        Owner::Reused { pid } => ("reused", Some(*pid)),
        Owner::NotLocal { .. } => ("remote", None),
        Owner::Invalid(_) => ("invalid", None),
        Owner::Unreadable(_) => ("unreadable", None),
    };
    let value = match (&e.owner, pid) {
        (Owner::NotLocal { host }, _) => Value::Named(state, host.clone()),
        (_, Some(p)) => Value::Pid(state, p),
        (_, None) => Value::Word(state),
    };
    (record.owner, record.owner_pid) = (state.into(), pid);
    items.push(Item {
        key: "owner",
        value,
        limit: None,
        in_message: e.owner != Owner::NotConfigured,
        word: "owner",
        human: Human::Same,
        leads: false,
    });

    Rendered { items, record }
}

impl Rendered {
    /// The row message's name/value pairs: each piece shown there, followed by the
    /// threshold it is judged against.
    pub fn message_pairs(&self) -> Vec<(&'static str, &Value)> {
        let mut pairs = Vec::with_capacity(self.items.len() + 2);
        for i in self.items.iter().filter(|i| i.in_message) {
            pairs.push((i.key, &i.value));
            if let Some((name, limit)) = &i.limit {
                pairs.push((name, limit));
            }
        }
        pairs
    }

    /// The evidence part of an `--explain` row: `running 47m, heartbeat 47m ago, lock
    /// free, owner none`.
    pub fn explain(&self) -> String {
        let lead = self.items.iter().filter(|i| i.leads);
        let rest = self.items.iter().filter(|i| !i.leads);
        lead.chain(rest)
            .map(|i| format!("{} {}", i.word, i.human()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The longest row message this watch can write (before cutting), in characters: every
/// figure at its widest, every source it names in its longest form.
pub fn longest_message(w: &Watch) -> usize {
    let t = thresholds(w);
    let big = t.max_age.saturating_mul(100);
    let ev = Evidence {
        total_age: Ok(big),
        heartbeat: Heartbeat::Age(big),
        lock: match w.lock_file {
            Some(_) => Lock::Held {
                pid: Some(4_194_304),
            },
            None => Lock::NotConfigured,
        },
        owner: match w.owner_column {
            Some(_) => Owner::Reused { pid: 4_194_304 },
            None => Owner::NotConfigured,
        },
    };
    let d = Decision {
        verdict: Verdict::Overtime,
        basis: Basis::MaxAge,
    };
    row_message(&d, &ev, t).chars().count()
}

/// The row message of SPEC §6 for a decision on this evidence, before it is cut.
pub fn row_message(d: &Decision, e: &Evidence, t: Thresholds) -> String {
    crate::message::build(d.verdict, &render(e, t).message_pairs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message;

    const T: Thresholds = Thresholds {
        stale_after: 300,
        max_age: 14_400,
    };

    fn ev(total: Result<u64, String>, heartbeat: Heartbeat, lock: Lock, owner: Owner) -> Evidence {
        Evidence {
            total_age: total,
            heartbeat,
            lock,
            owner,
        }
    }

    #[test]
    fn every_output_takes_its_part_of_one_rendering() {
        let e = ev(
            Ok(3_000),
            Heartbeat::Age(2_820),
            Lock::Held { pid: Some(42) },
            Owner::NotLocal {
                host: "web2".into(),
            },
        );
        let r = render(&e, T);
        assert_eq!(
            r.explain(),
            "running 50m, heartbeat 47m ago, lock held:42, owner remote:web2"
        );
        let d = Decision {
            verdict: Verdict::Hung,
            basis: Basis::MaxAge,
        };
        assert_eq!(
            row_message(&d, &e, T),
            "self-heal: hung: heartbeat_age=2820s stale_after=300s total_age=3000s \
             max_age=14400s lock=held:42 owner=remote:web2"
        );
        assert_eq!(
            serde_json::to_value(&r.record).expect("json"),
            serde_json::json!({
                "total_age_s": 3000, "heartbeat_age_s": 2820, "heartbeat": "present",
                "lock": "held", "lock_pid": 42, "owner": "remote", "owner_pid": null,
            })
        );

        let e = ev(
            Err("start_time is NULL".into()),
            Heartbeat::Unreadable("EACCES".into()),
            Lock::NotConfigured,
            Owner::NotConfigured,
        );
        let r = render(&e, T);
        assert_eq!(
            r.explain(),
            "running unknown, heartbeat unreadable, lock none, owner none"
        );
        assert_eq!(
            message::build(Verdict::Unknown, &r.message_pairs()),
            "self-heal: unknown: heartbeat_age=unreadable stale_after=300s total_age=unknown \
             max_age=14400s lock=none"
        );
        assert_eq!(r.record.heartbeat, "unreadable: EACCES");
        assert_eq!(
            (r.record.total_age_s, r.record.heartbeat_age_s),
            (None, None)
        );
    }

    #[test]
    fn the_row_message_of_any_evidence_parses_back_to_it() {
        let totals = [Ok(0), Ok(3_000), Err("bad".to_string())];
        let beats = [
            Heartbeat::Age(7),
            Heartbeat::Missing,
            Heartbeat::Unreadable("x".into()),
        ];
        let locks = [
            Lock::NotConfigured,
            Lock::Held { pid: Some(9) },
            Lock::Held { pid: None },
            Lock::Free,
            Lock::Present,
            Lock::Absent,
            Lock::Unreadable("x".into()),
        ];
        let owners = [
            Owner::NotConfigured,
            Owner::Empty,
            Owner::Alive { pid: 5 },
            Owner::Dead { pid: 5 },
            Owner::Reused { pid: 5 },
            Owner::NotLocal { host: "h".into() },
            Owner::Invalid("x".into()),
            Owner::Unreadable("x".into()),
        ];
        for total in &totals {
            for hb in &beats {
                for lock in &locks {
                    for owner in &owners {
                        let e = ev(total.clone(), hb.clone(), lock.clone(), owner.clone());
                        let d = Decision {
                            verdict: Verdict::Dead,
                            basis: Basis::MaxAge,
                        };
                        let m = row_message(&d, &e, T);
                        let p = message::parse(&m).expect("prefix");
                        assert_eq!(p.verdict, "dead", "{m}");
                        assert_eq!(p.total_age_s, total.as_ref().ok().copied(), "{m}");
                        let hb_age = match hb {
                            Heartbeat::Age(a) => Some(*a),
                            _ => None,
                        };
                        assert_eq!(p.heartbeat_age_s, hb_age, "{m}");
                        let conclusive = *lock == Lock::Free
                            || matches!(owner, Owner::Dead { .. } | Owner::Reused { .. });
                        assert_eq!(p.conclusive, conclusive, "{m}");
                    }
                }
            }
        }
    }
}
