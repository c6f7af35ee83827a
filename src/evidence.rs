//! One running row's evidence: gathered from the probes ([`gather`], the probe seam) and
//! rendered, once, as name/value pairs ([`render`]) that `--explain`, the JSON row and the
//! journal entry take their part of, and in words for the row message ([`row_message`]:
//! the deciding evidence in words, then the figures; through it the text line, the event
//! log and `stats`).
//!
//! A new evidence source is a new file in `probe/` (it only looks, never writes) plus
//! three small edits: its field in [`crate::decide::Evidence`] (whose rules then say what
//! it proves), one line in [`gather`], and its entry in the renderings — a block in
//! [`render`] with its field in [`Record`] (the JSON row and the journal carry that as it
//! is), its words for the row message, and its widest form in `widest_messages`.
//!
//! I/O: [`gather`] reads what the watch's probes read (a heartbeat file's mtime, the job's
//! lock, the owner's `/proc` entry) — except for a row whose owner is another host, of
//! which only the database's values are read (its files, locks and pids are that host's);
//! [`confirm_lock`] tries the job's lock (a non-blocking try-lock, released at once), called
//! only for a row about to be written on the strength of a free lock; rendering is pure.

use std::borrow::Cow;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::clock::{
    Clocks, FUTURE_TOLERANCE_S, age_on_db_clock, epoch, human, implausible_start, instant,
    plausible_age,
};
use crate::config::{ReleaseLock, Watch};
use crate::decide::{
    Ahead, Basis, Decision, Evidence, Heartbeat, Lock, Owner, Sign, Signal, Thresholds, Verdict,
};
use crate::holder_line::HolderLine;
use crate::host::Host;
use crate::message;
use crate::probe::{self, LockTable};
use crate::store::RunningRow;

/// The watch's thresholds, in seconds, as the decision takes them.
pub fn thresholds(w: &Watch) -> Thresholds {
    Thresholds {
        stale_after: w.stale_after.as_secs(),
        max_age: w.max_age.as_secs(),
    }
}

/// What the evidence of every row of one sweep is read against.
#[derive(Debug, Clone, Copy)]
pub struct Scene<'a> {
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// The host clock, for file mtimes.
    pub host_now: SystemTime,
    /// A snapshot of `/proc/locks` (`None`: the try-lock fallback).
    pub locks: Option<&'a LockTable>,
    /// How many running rows of the watch belong to this host: a heartbeat file without
    /// `{id}` is the row's own only when no other of them shares it.
    pub local_rows: usize,
}

impl<'a> Scene<'a> {
    /// The scene of one row judged outside a sweep (an un-park, a person's `resolve` or
    /// `show`), now: the other running rows are not counted, so a heartbeat file other
    /// rows may share is never taken for the row's own.
    pub fn of_one_row(clocks: &'a Clocks, host: &'a Host, locks: Option<&'a LockTable>) -> Self {
        Scene {
            clocks,
            host,
            host_now: SystemTime::now(),
            locks,
            local_rows: usize::MAX,
        }
    }
}

/// Gathers the evidence for one row. A row whose times lie in the future gets
/// [`Evidence::ahead`] with `seen_s` 0: the caller that keeps selfheal's own sightings
/// across runs fills it in ([`crate::check::confirmations::Tally::sighting`]).
pub fn gather(w: &Watch, row: &RunningRow, scene: &Scene<'_>) -> Evidence {
    let Scene {
        clocks,
        host,
        host_now,
        locks,
        local_rows,
    } = *scene;
    let (total_age, start_ahead) = total_age(w, row, clocks);
    let (column, column_ahead) = column_heartbeat(row, clocks);
    let ahead = start_ahead
        .max(column_ahead)
        .map(|by_s| Ahead { by_s, seen_s: 0 });
    // A heartbeat column in the future beside a start in the future is as untrustworthy
    // as the start: neither says how old anything is.
    let column = match (column, &ahead) {
        (Some(Heartbeat::Unreadable(why)), Some(_)) if column_ahead.is_some() => {
            Some(Heartbeat::Unusable(why))
        }
        (c, _) => c,
    };
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
            probe::probe_owner(host, row.owner.as_deref(), started, w.stale_after.as_secs())
        }
    };
    if matches!(owner, Owner::NotLocal { .. }) {
        // Another host's row: its heartbeat file, lock and pid live on that host, and
        // whatever this host has under the same names is not them. Only what the
        // database holds is the row's own evidence.
        return Evidence {
            total_age,
            ahead,
            heartbeat: column.unwrap_or(Heartbeat::Missing),
            heartbeat_own: true,
            lock: Lock::NotConfigured,
            lock_own: false,
            lock_holder: None,
            owner,
        };
    }
    let id = row.id.to_string();
    let file_own = w
        .heartbeat_file
        .as_ref()
        .is_none_or(|t| t.has_id() || local_rows <= 1);
    let from_file = w.heartbeat_file.as_ref().map(|t| match t.render(&id) {
        Ok(p) => probe::file_heartbeat(&p, host_now),
        Err(why) => Heartbeat::Unreadable(format!("heartbeat_file: {why}")),
    });
    let owner = match owner {
        Owner::Reused { pid, after_s, .. } => Owner::Reused {
            pid,
            after_s,
            beat_since_start: file_own
                && from_file
                    .as_ref()
                    .is_some_and(|h| beat_since_start(h, host, pid, host_now)),
        },
        o => o,
    };
    let (heartbeat, heartbeat_own) = match (heartbeat(from_file, column, file_own), &total_age) {
        // Older than the row itself, beyond the tolerance between the two clocks: a beat
        // of an earlier row with the same id.
        ((Heartbeat::Age(a), own), Ok(t)) if a > t.saturating_add(clocks.tolerance_s) => {
            (Heartbeat::BeforeRow(a), own)
        }
        (h, _) => h,
    };
    let (lock, lock_holder, lock_own) = match &w.lock_file {
        None => (Lock::NotConfigured, None, false),
        Some(t) => match t.render(&id) {
            Ok(p) => {
                let lock = trusted(w, &p, probe::probe_lock(&p, locks));
                let holder = holder_named(&lock, &p);
                let own = own_lock(t.has_id(), &lock, holder.as_ref(), &owner, host);
                (lock, holder, own)
            }
            Err(why) => (Lock::Unreadable(format!("lock_file: {why}")), None, false),
        },
    };
    Evidence {
        total_age,
        ahead,
        heartbeat,
        heartbeat_own,
        lock,
        lock_own,
        lock_holder,
        owner,
    }
}

/// True when a heartbeat file's last beat (`h`, an age at `host_now`) came after process
/// `pid` started, both by the host clock: the process was alive when the file was touched,
/// so a pid recycled after the worker's death is never taken for it. The age is in whole
/// seconds (the beat may be up to a second older than it says), so a second is given up.
fn beat_since_start(h: &Heartbeat, host: &Host, pid: u32, host_now: SystemTime) -> bool {
    let Heartbeat::Age(age) = h else {
        return false;
    };
    let Some(started) = host.process_start(pid) else {
        return false;
    };
    let beat = epoch(host_now).saturating_sub(i64::try_from(*age).unwrap_or(i64::MAX));
    #[allow(clippy::cast_precision_loss)] // unix seconds, far below 2^53
    let beat = beat.saturating_sub(1) as f64;
    beat >= started
}

/// Whether a held lock is the row's own (SPEC §5): its file is the row's alone (`{id}` in
/// the template), or its holder is the row's owner — the pid `/proc/locks` gives for it,
/// or the `HOST:PID` of the holder line in the file (for `selfheal run`, `/proc/locks`
/// gives the wrapper and the line its command, which is what a job writes as its owner).
/// A per-kind lock held by someone else, the next run of the same job say, proves
/// nothing about this row.
fn own_lock(
    per_row: bool,
    lock: &Lock,
    holder: Option<&HolderLine>,
    owner: &Owner,
    host: &Host,
) -> bool {
    let Lock::Held { pid } = lock else {
        return false;
    };
    if per_row {
        return true;
    }
    let owner_pid = match owner {
        Owner::Alive { pid }
        | Owner::Dead { pid }
        | Owner::Reused { pid, .. }
        | Owner::NotVisible { pid } => *pid,
        _ => return false,
    };
    *pid == Some(owner_pid) || holder.is_some_and(|h| h.pid == owner_pid && host.is_me(&h.host))
}

/// A lock nobody was seen holding, in a directory where someone other than root, the
/// running user and the file's owner could have swapped the file for a new one, proves
/// nothing ([`Lock::Untrusted`]); a legacy existence lock is never kernel-locked, so
/// "free" is its normal state and proves nothing either ([`Lock::Present`]).
fn trusted(w: &Watch, path: &std::path::Path, l: Lock) -> Lock {
    match l {
        Lock::Free | Lock::Unconfirmed if w.release_lock == ReleaseLock::IfFree => Lock::Present,
        Lock::Free | Lock::Unconfirmed => match probe::lock::swappable_by(path) {
            Some(who) => Lock::Untrusted(who),
            None => l,
        },
        l => l,
    }
}

/// The holder the lock file names in its first line (`HOST:PID START`, as `selfheal run`
/// and the PHP helper write it), read only when the lock is held: a regular file only,
/// opened without blocking, its first 512 bytes at most ([`probe::lock::read_line_at`]). It
/// names the holder for a person; it decides nothing (a line outlives its writer).
fn holder_named(lock: &Lock, path: &std::path::Path) -> Option<HolderLine> {
    matches!(lock, Lock::Held { .. })
        .then(|| probe::lock::read_line_at(path))
        .flatten()
}

/// The evidence with a lock that `/proc/locks` showed free ([`Lock::Unconfirmed`]) tried:
/// a non-blocking try-lock on the file, released at once. Got it: [`Lock::Free`]; someone
/// holds it (a holder this pid namespace cannot see, or one over NFS): [`Lock::Held`].
/// Only for a row about to be written on the strength of it (SPEC §5), so a job in normal
/// operation is never disturbed; anything else is returned as it is.
pub fn confirm_lock(w: &Watch, row: &RunningRow, host: &Host, ev: Evidence) -> Evidence {
    if ev.lock != Lock::Unconfirmed {
        return ev;
    }
    let (lock, lock_holder, lock_own) = match &w.lock_file {
        Some(t) => match t.render(&row.id.to_string()) {
            Ok(p) => {
                let lock = trusted(w, &p, probe::lock::try_lock(&p));
                let holder = holder_named(&lock, &p);
                let own = own_lock(t.has_id(), &lock, holder.as_ref(), &ev.owner, host);
                (lock, holder, own)
            }
            Err(why) => (Lock::Unreadable(format!("lock_file: {why}")), None, false),
        },
        None => (Lock::NotConfigured, None, false),
    };
    Evidence {
        lock,
        lock_holder,
        lock_own,
        ..ev
    }
}

/// Seconds since the row started, on the database clock, and how far beyond the
/// tolerance its start lies in the future, if it does. A start that is not a plausible
/// start (0, a zero date, before 2000) is as good as none.
fn total_age(w: &Watch, row: &RunningRow, clocks: &Clocks) -> (Result<u64, String>, Option<u64>) {
    let col = &w.started_column;
    let raw = &row.started.raw;
    match &row.started.stamp {
        Err(e) => (Err(format!("{col} = {raw}: {e}")), None),
        Ok(None) => (Err(format!("{col} is NULL")), None),
        Ok(Some(s)) => {
            let at = match instant(*s, clocks.db.now_epoch) {
                Ok(at) => at,
                Err(why) => return (Err(why), None),
            };
            if let Some(why) = implausible_start(at) {
                return (Err(format!("{col} = {raw}: {why}")), None);
            }
            match age_on_db_clock(*s, &clocks.db) {
                Ok(a) => (plausible_age(a, &format!("{col} ({raw})")), future_by(a)),
                Err(why) => (Err(why), None),
            }
        }
    }
}

/// How far a signed age lies in the future beyond the tolerance, if it does.
fn future_by(age: i64) -> Option<u64> {
    (age < -FUTURE_TOLERANCE_S).then(|| age.unsigned_abs())
}

/// The freshest of the heartbeat file (host clock) and the heartbeat column (database
/// clock), where the watch names them, and whether it is the row's own: the column always
/// is, the file when `file_own` (no other running row shares it).
fn heartbeat(
    from_file: Option<Heartbeat>,
    from_column: Option<Heartbeat>,
    file_own: bool,
) -> (Heartbeat, bool) {
    match (from_file, from_column) {
        (Some(a), Some(b)) => {
            // The column decides whose the beat is when it is at least as fresh.
            let column_freshest = match (&a, &b) {
                (Heartbeat::Age(x) | Heartbeat::BeforeRow(x), Heartbeat::Age(y)) => y <= x,
                (_, Heartbeat::Age(_)) => true,
                _ => false,
            };
            (probe::heartbeat::combine(a, b), file_own || column_freshest)
        }
        (Some(a), None) => (a, file_own),
        (None, Some(b)) => (b, true),
        (None, None) => (Heartbeat::Missing, true),
    }
}

/// True when the row's owner column names another host: the row is that host's, and none
/// of this host's files (cheap: no probe, no I/O).
pub fn is_remote(w: &Watch, row: &RunningRow, host: &Host) -> bool {
    w.owner_column.is_some()
        && row
            .owner
            .as_deref()
            .and_then(probe::owner::parse_owner)
            .is_some_and(|(h, _)| h.is_some_and(|h| !host.is_me(h)))
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

/// The heartbeat column's age on the database clock, where the watch has one, and how far
/// beyond the tolerance it lies in the future, if it does.
fn column_heartbeat(row: &RunningRow, clocks: &Clocks) -> (Option<Heartbeat>, Option<u64>) {
    let Some(tv) = row.heartbeat.as_ref() else {
        return (None, None);
    };
    match &tv.stamp {
        Ok(None) => (Some(Heartbeat::Missing), None),
        Ok(Some(s)) => match age_on_db_clock(*s, &clocks.db) {
            Ok(a) => (
                Some(
                    match plausible_age(a, &format!("heartbeat column ({})", tv.raw)) {
                        Ok(a) => Heartbeat::Age(a),
                        Err(why) => Heartbeat::Unreadable(why),
                    },
                ),
                future_by(a),
            ),
            Err(why) => (Some(Heartbeat::Unreadable(why)), None),
        },
        Err(why) => (
            Some(Heartbeat::Unreadable(format!("heartbeat column: {why}"))),
            None,
        ),
    }
}

/// The evidence as programs read it: flattened into the JSON row (SPEC §7) and into the
/// journal entry, under these names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    pub total_age_s: Option<u64>,
    /// How far the row's times lie in the future, when they do (its age is then unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead_s: Option<u64>,
    pub heartbeat_age_s: Option<u64>,
    /// `present`, `missing`, `before_row` (only a beat older than the row: an earlier
    /// row's; counts as missing), or `unreadable: why`.
    pub heartbeat: Cow<'static, str>,
    /// `none`, `held`, `free` (a try-lock got it), `free_unconfirmed` (`/proc/locks`
    /// shows no holder), `present`, `absent`, `unreadable`.
    pub lock: Cow<'static, str>,
    pub lock_pid: Option<u32>,
    /// `none`, `empty`, `alive`, `dead`, `reused`, `remote`, `not_visible`, `invalid`,
    /// `unreadable`.
    pub owner: Cow<'static, str>,
    pub owner_pid: Option<u32>,
}

/// The holder a held lock's file names (its `HOST:PID START` line), as the JSON row gives
/// it (`lock_holder`, `null` without one): `host` as the file has it (JSON escapes it),
/// the process's `pid`, and `since`, RFC 3339 UTC. `pid` may differ from `lock_pid`: for
/// `selfheal run`, `/proc/locks` gives the wrapper that took the lock, the line its
/// command. The journal entry does not carry it (its row message names the holder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub host: String,
    pub pid: u32,
    pub since: String,
}

/// A value as `--explain` writes it (where it is not a duration); formatted only where it
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
    /// The [`Value`] as it is: `held:4242`.
    Same,
    /// A duration: `47m`.
    Duration(u64),
    /// A duration before now: `47m ago`.
    Ago(u64),
    /// A beat older than the row: `missing (last beat 2h0m ago, before this row started)`.
    BeforeRow(u64),
    /// Words of their own: `free (not confirmed)`.
    Words(&'static str),
    /// Times in the future: `unknown: its times are 8h0m in the future (seen for 2m)`.
    Ahead { by_s: u64, seen_s: u64 },
}

/// One piece of evidence as people read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Its name: `heartbeat_age`, `lock`.
    pub key: &'static str,
    /// Its value: `2820s`, `held:4242`, `missing`.
    pub value: Value,
    /// Its word in `--explain` (`heartbeat`), and its value there.
    pub word: &'static str,
    pub human: Human,
    /// It opens the `--explain` line (the row's age: `running 47m`).
    pub leads: bool,
    /// Said after the value in `--explain`, in parentheses: who the lock file names.
    pub aside: Option<String>,
}

impl Item {
    /// Its value in `--explain`: `47m ago`, `held:4242`.
    pub fn human(&self) -> String {
        let value = self.value_human();
        match &self.aside {
            Some(a) => format!("{value} ({a})"),
            None => value,
        }
    }

    fn value_human(&self) -> String {
        match self.human {
            Human::Same => self.value.to_string(),
            Human::Duration(a) => human(a),
            Human::Ago(a) => format!("{} ago", human(a)),
            Human::BeforeRow(a) => format!(
                "missing (last beat {} ago, before this row started: an earlier row's)",
                human(a)
            ),
            Human::Words(w) => w.to_string(),
            Human::Ahead { by_s, seen_s } => format!(
                "unknown: its times are {} in the future (seen running for {})",
                human(by_s),
                human(seen_s)
            ),
        }
    }
}

/// The one rendering of a row's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// In the row message's order.
    pub items: Vec<Item>,
    pub record: Record,
    pub lock_holder: Option<LockHolder>,
}

/// Renders evidence. Each source is one block here.
pub fn render(e: &Evidence) -> Rendered {
    let mut items = Vec::with_capacity(4);
    let mut record = Record::default();

    let (value, human_value) = match &e.heartbeat {
        Heartbeat::Age(a) => (Value::Secs(*a), Human::Ago(*a)),
        Heartbeat::Missing => (Value::Word("missing"), Human::Same),
        // Missing as far as this row goes: the message and `stats` never read it as a
        // silence of this run.
        Heartbeat::BeforeRow(a) => (Value::Word("missing"), Human::BeforeRow(*a)),
        Heartbeat::Unusable(_) => (
            Value::Word("unusable"),
            Human::Words("unusable (its directory is missing or cannot be searched)"),
        ),
        Heartbeat::Unreadable(_) => (Value::Word("unreadable"), Human::Same),
    };
    record.heartbeat_age_s = match e.heartbeat {
        Heartbeat::Age(a) => Some(a),
        _ => None,
    };
    record.heartbeat = match &e.heartbeat {
        Heartbeat::Age(_) => "present".into(),
        Heartbeat::Missing => "missing".into(),
        Heartbeat::BeforeRow(_) => "before_row".into(),
        Heartbeat::Unusable(why) => format!("unusable: {why}").into(),
        Heartbeat::Unreadable(why) => format!("unreadable: {why}").into(),
    };
    items.push(Item {
        key: "heartbeat_age",
        value,
        word: "heartbeat",
        human: human_value,
        leads: false,
        aside: None,
    });

    let (value, human_value) = match (&e.total_age, e.ahead) {
        (_, Some(a)) => (
            Value::Word("ahead"),
            Human::Ahead {
                by_s: a.by_s,
                seen_s: a.seen_s,
            },
        ),
        (Ok(a), None) => (Value::Secs(*a), Human::Duration(*a)),
        (Err(_), None) => (Value::Word("unknown"), Human::Same),
    };
    record.total_age_s = e.total_age.as_ref().ok().copied();
    record.ahead_s = e.ahead.map(|a| a.by_s);
    items.push(Item {
        key: "total_age",
        value,
        word: "running",
        human: human_value,
        leads: true,
        aside: None,
    });

    let (state, pid) = match &e.lock {
        Lock::NotConfigured => ("none", None),
        Lock::Held { pid } => ("held", *pid),
        Lock::Unconfirmed => ("free_unconfirmed", None),
        Lock::Free => ("free", None),
        Lock::Present => ("present", None),
        Lock::Untrusted(_) => ("free_untrusted", None),
        Lock::Absent => ("absent", None),
        Lock::Unreadable(_) => ("unreadable", None),
    };
    (record.lock, record.lock_pid) = (state.into(), pid);
    // Who the file names, beside what /proc/locks says: for `selfheal run` the wrapper
    // took the lock and the line names its command.
    let holder = match (&e.lock, &e.lock_holder) {
        (Lock::Held { .. }, Some(h)) => Some(h),
        _ => None,
    };
    let lock_holder = holder.map(|h| LockHolder {
        host: h.host.clone(),
        pid: h.pid,
        since: h.since_text(),
    });
    items.push(Item {
        key: "lock",
        value: pid.map_or(Value::Word(state), |p| Value::Pid(state, p)),
        word: "lock",
        human: match (&e.lock, holder) {
            (Lock::Unconfirmed, _) => {
                Human::Words("free as far as /proc/locks shows (not confirmed)")
            }
            (Lock::Free, _) => Human::Words("free (a try-lock got it)"),
            (Lock::Untrusted(_), _) => Human::Words(
                "nobody seen holding it, but its directory others can write: not trusted as free",
            ),
            (Lock::Held { pid: None }, None) => {
                Human::Words("held (a try-lock failed; holder not visible)")
            }
            _ => Human::Same,
        },
        leads: false,
        aside: holder.map(|h| match pid {
            Some(p) if p == h.pid => format!("{} since {}", h.named(), h.since_text()),
            Some(_) => format!("the file names {} since {}", h.named(), h.since_text()),
            None => format!(
                "a try-lock failed; the file names {} since {}",
                h.named(),
                h.since_text()
            ),
        }),
    });

    let (state, pid) = match &e.owner {
        Owner::NotConfigured => ("none", None),
        Owner::Empty => ("empty", None),
        Owner::Alive { pid } => ("alive", Some(*pid)),
        Owner::Dead { pid } => ("dead", Some(*pid)),
        Owner::Reused { pid, .. } => ("reused", Some(*pid)),
        Owner::NotLocal { .. } => ("remote", None),
        Owner::NotVisible { pid } => ("not_visible", Some(*pid)),
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
        word: "owner",
        human: Human::Same,
        leads: false,
        aside: match e.owner {
            Owner::Reused {
                after_s,
                beat_since_start,
                ..
            } => Some(format!(
                "started {} after the row{}",
                human(after_s),
                if beat_since_start {
                    "; the row's heartbeat file was touched since"
                } else {
                    ""
                }
            )),
            _ => None,
        },
    });

    Rendered {
        items,
        record,
        lock_holder,
    }
}

impl Rendered {
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

// ---------------------------------------------------------------------------------------
// The row message: the deciding evidence in words, then the figures (SPEC §6)

/// The words of the decision: `lock free, worker gone`, `heartbeat stale, lock held by
/// pid 4242`. What a PHP developer reads first, so no bare numbers.
fn decision_words(d: &Decision, e: &Evidence) -> String {
    let owner_pid = match e.owner {
        Owner::Alive { pid } | Owner::Dead { pid } | Owner::Reused { pid, .. } => Some(pid),
        _ => None,
    };
    let reused_after = match e.owner {
        Owner::Reused { after_s, .. } => after_s,
        _ => 0,
    };
    match &d.basis {
        // The detail is in the basis (JSON, the text line, the journal): the row message of
        // a row selfheal cannot judge is never written to the row.
        Basis::Unreadable(_) => "evidence unreadable".into(),
        Basis::OwnerDead => owner_pid.map_or("owner gone".into(), message::owner_gone),
        Basis::OwnerReused => owner_pid.map_or("owner pid likely reused".into(), |p| {
            message::owner_reused(p, reused_after)
        }),
        Basis::TimesWrong { after_s, .. } => format!(
            "row times wrong: owner pid {} is its worker, started {} after the row",
            owner_pid.unwrap_or_default(),
            message::duration(*after_s)
        ),
        Basis::TimesAhead { by_s } => format!(
            "row times {} in the future, no fact about now",
            message::duration(*by_s)
        ),
        Basis::StaleLockUntrusted => "heartbeat stale, lock not trusted as free".into(),
        Basis::LockFree => message::LOCK_FREE.into(),
        // Never the words of a conclusive death first: the row is not proven dead.
        Basis::Contradicted(sig) | Basis::ContradictionPersists(sig) => format!(
            "own heartbeat fresh, but {}",
            match (sig, owner_pid) {
                (Signal::OwnerDead, Some(p)) => message::owner_gone(p),
                (Signal::OwnerReused, Some(p)) => message::owner_reused(p, reused_after),
                (Signal::LockFree, _) => message::LOCK_FREE.into(),
                _ => "owner gone".into(),
            }
        ),
        Basis::HeartbeatUnusable(_) => "heartbeat file unusable".into(),
        Basis::MaxAge => "running past max_age".into(),
        Basis::MaxAgeWorkerLives => "running past max_age, worker alive".into(),
        Basis::NoHeartbeatYet => "starting, no heartbeat yet".into(),
        Basis::HeartbeatFresh => "heartbeat fresh".into(),
        Basis::StaleButLockHeld => format!(
            "heartbeat stale, {}",
            lock_words(&e.lock).unwrap_or_else(|| "lock held".into())
        ),
        Basis::StaleButOwnerAlive => format!(
            "heartbeat stale, {}",
            owner_words(&e.owner).unwrap_or_else(|| "owner alive".into())
        ),
        Basis::HeartbeatStale => "heartbeat stale, no sign of the worker".into(),
        Basis::HeartbeatMissing => "no heartbeat, no sign of the worker".into(),
        // Never written: another host's rows are that host's to write.
        Basis::OtherHost(h) => format!("owned by host {h}, judged there"),
        Basis::OtherHostPastMaxAge(h) => format!("owned by host {h}, past max_age"),
        Basis::OtherHostSilent(h) => {
            format!("owned by host {h}, its heartbeat silent beyond max_age")
        }
    }
}

/// The job's lock in words, when the watch names one.
fn lock_words(l: &Lock) -> Option<String> {
    Some(match l {
        Lock::NotConfigured => return None,
        Lock::Held { pid: Some(p) } => format!("lock held by pid {p}"),
        Lock::Held { pid: None } => "lock held".into(),
        Lock::Unconfirmed => "lock seen free, not tried".into(),
        Lock::Free => "lock free".into(),
        Lock::Present => "lock file present".into(),
        Lock::Untrusted(_) => "lock seen free in a directory others can write".into(),
        Lock::Absent => "no lock file".into(),
        Lock::Unreadable(_) => "lock unreadable".into(),
    })
}

/// A sign of life ([`crate::decide::Life`]) in the row message's words: `lock held by pid
/// 4242`, `owner pid 4242 alive`.
pub fn sign_words(s: &Sign<'_>) -> String {
    let words = match *s {
        Sign::Lock(l) => lock_words(&Lock::Held { pid: l.pid }),
        Sign::Owner(o) => owner_words(&match o.later_s {
            None => Owner::Alive { pid: o.pid },
            Some(after_s) => Owner::Reused {
                pid: o.pid,
                after_s,
                beat_since_start: false,
            },
        }),
        Sign::OwnBeat(_) => Some("own heartbeat fresh".into()),
    };
    words.unwrap_or_default()
}

/// At most this many characters of the host a lock file names go into a row message (a
/// message column is often 255 characters; `--explain` and JSON show more).
const HOLDER_HOST_IN_MESSAGE: usize = 32;

/// Who the held lock's file names, in words (`holder web1:4243 since
/// 2026-11-30T10:00:00Z`), when it names one: a figure, so a column too short for it loses
/// it before the words.
fn holder_words(e: &Evidence) -> Option<String> {
    match (&e.lock, &e.lock_holder) {
        (Lock::Held { .. }, Some(h)) => Some(format!(
            "holder {} since {}",
            h.named_within(HOLDER_HOST_IN_MESSAGE),
            h.since_text()
        )),
        _ => None,
    }
}

/// The owner in words, when the watch names an owner column.
fn owner_words(o: &Owner) -> Option<String> {
    Some(match o {
        Owner::NotConfigured => return None,
        Owner::Empty => "no owner".into(),
        Owner::Alive { pid } => format!("owner pid {pid} alive"),
        Owner::Dead { pid } => format!("owner pid {pid} gone"),
        Owner::Reused { pid, after_s, .. } => {
            format!(
                "owner pid {pid} started {} after the row",
                message::duration(*after_s)
            )
        }
        Owner::NotLocal { host } => format!("owner on {host}"),
        Owner::NotVisible { pid } => format!("owner pid {pid} not visible here"),
        Owner::Invalid(_) => "owner invalid".into(),
        Owner::Unreadable(_) => "owner unreadable".into(),
    })
}

/// The row message of SPEC §6 for a decision on this evidence, before it is cut: the
/// deciding evidence in words, then the row's age, its heartbeat, the threshold that
/// decided (`max_age` for an overtime, else `stale_after`), the lock where the words do not
/// already name it, who the held lock's file names, and the owner where the words do not
/// already name it.
pub fn row_message(d: &Decision, e: &Evidence, t: Thresholds) -> String {
    let beat = match &e.heartbeat {
        Heartbeat::Age(a) => message::Beat::Ago(*a),
        // An earlier row's beat: this row has none of its own.
        Heartbeat::Missing | Heartbeat::BeforeRow(_) => message::Beat::Missing,
        Heartbeat::Unusable(_) | Heartbeat::Unreadable(_) => message::Beat::Unreadable,
    };
    let mut more = Vec::with_capacity(3);
    more.push(match d.basis {
        Basis::MaxAge
        | Basis::MaxAgeWorkerLives
        | Basis::OtherHostPastMaxAge(_)
        | Basis::OtherHostSilent(_) => {
            format!("max_age {}", message::duration(t.max_age))
        }
        _ => format!("stale_after {}", message::duration(t.stale_after)),
    });
    // A row whose times lie in the future has no age to show: how far ahead instead.
    more.extend(
        e.ahead
            .map(|a| format!("times {} ahead", message::duration(a.by_s))),
    );
    if !matches!(
        d.basis,
        Basis::LockFree
            | Basis::StaleButLockHeld
            | Basis::Contradicted(Signal::LockFree)
            | Basis::ContradictionPersists(Signal::LockFree)
    ) {
        more.extend(lock_words(&e.lock));
    }
    more.extend(holder_words(e));
    if !matches!(
        d.basis,
        Basis::OwnerDead
            | Basis::OwnerReused
            | Basis::Contradicted(Signal::OwnerDead | Signal::OwnerReused)
            | Basis::ContradictionPersists(Signal::OwnerDead | Signal::OwnerReused)
            | Basis::StaleButOwnerAlive
            | Basis::OtherHost(_)
            | Basis::OtherHostPastMaxAge(_)
            | Basis::OtherHostSilent(_)
    ) {
        more.extend(owner_words(&e.owner));
    }
    message::build(
        d.verdict,
        &decision_words(d, e),
        e.total_age.as_ref().ok().copied(),
        beat,
        &more,
    )
}

/// Every row message this watch can write, each decision with its evidence at its widest
/// (every figure large, every pid seven digits, a held lock's file naming a holder whose
/// host is longer than a message shows).
fn widest_messages(w: &Watch) -> Vec<String> {
    let t = thresholds(w);
    let big = t.max_age.saturating_mul(100);
    let pid = 4_194_304;
    let decisions = [
        (Verdict::Dead, Basis::OwnerDead),
        (Verdict::Dead, Basis::OwnerReused),
        (Verdict::Dead, Basis::LockFree),
        (Verdict::Dead, Basis::HeartbeatStale),
        (Verdict::Dead, Basis::HeartbeatMissing),
        (Verdict::Hung, Basis::StaleButLockHeld),
        (Verdict::Hung, Basis::StaleButOwnerAlive),
        (Verdict::Overtime, Basis::MaxAge),
        (Verdict::Overtime, Basis::MaxAgeWorkerLives),
    ];
    // (A row whose times lie in the future writes "row age unknown, …, times … ahead": a
    // few characters more, for a row that is itself a fault; its figures are cut first.)
    decisions
        .into_iter()
        .map(|(verdict, basis)| {
            let lock = match (&w.lock_file, &basis) {
                (None, _) => Lock::NotConfigured,
                (Some(_), Basis::LockFree) => Lock::Free,
                (Some(_), _) => Lock::Held { pid: Some(pid) },
            };
            let owner = match (&w.owner_column, &basis) {
                (None, _) => Owner::NotConfigured,
                (Some(_), Basis::OwnerDead) => Owner::Dead { pid },
                (Some(_), Basis::StaleButOwnerAlive | Basis::MaxAgeWorkerLives) => {
                    Owner::Alive { pid }
                }
                // A death on silence never stands beside a pid that looks reused (that is
                // a death of its own, or the worker): at its widest, a pid not visible.
                (Some(_), Basis::HeartbeatStale | Basis::HeartbeatMissing) => {
                    Owner::NotVisible { pid }
                }
                (Some(_), _) => Owner::Reused {
                    pid,
                    after_s: big,
                    beat_since_start: false,
                },
            };
            let lock_holder = matches!(lock, Lock::Held { .. }).then(|| HolderLine {
                host: "h".repeat(HOLDER_HOST_IN_MESSAGE + 1),
                pid,
                since: 4_102_444_799, // 2099-12-31T23:59:59Z
            });
            let ev = Evidence {
                total_age: Ok(big),
                ahead: None,
                heartbeat: Heartbeat::Age(big),
                heartbeat_own: true,
                lock,
                lock_own: false,
                lock_holder,
                owner,
            };
            row_message(&Decision::new(verdict, basis), &ev, t)
        })
        .collect()
}

/// The longest row message this watch can write (before cutting), in characters.
pub fn longest_message(w: &Watch) -> usize {
    widest_messages(w)
        .iter()
        .map(|m| m.chars().count())
        .max()
        .unwrap_or(0)
}

/// The longest part before the figures (`self-heal: <verdict>: <words>`) of a row message
/// this watch can write, in characters: a message column shorter than this loses the
/// words, not just figures.
pub fn longest_words(w: &Watch) -> usize {
    widest_messages(w)
        .iter()
        .map(|m| message::head(m).chars().count())
        .max()
        .unwrap_or(0)
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
        Evidence::new(total)
            .with_heartbeat(heartbeat)
            .with_lock(lock)
            .with_owner(owner)
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
        let r = render(&e);
        assert_eq!(
            r.explain(),
            "running 50m, heartbeat 47m ago, lock held:42, owner remote:web2"
        );
        let d = Decision::new(Verdict::Hung, Basis::StaleButLockHeld);
        assert_eq!(
            row_message(&d, &e, T),
            "self-heal: hung: heartbeat stale, lock held by pid 42 (row 50m, heartbeat 47m \
             ago, stale_after 5m, owner on web2)"
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
        let r = render(&e);
        assert_eq!(
            r.explain(),
            "running unknown, heartbeat unreadable, lock none, owner none"
        );
        let d = Decision::new(
            Verdict::Unknown,
            Basis::Unreadable("heartbeat: EACCES".into()),
        );
        assert_eq!(
            row_message(&d, &e, T),
            "self-heal: unknown: evidence unreadable (row age unknown, heartbeat unreadable, \
             stale_after 5m)"
        );
        assert_eq!(r.record.heartbeat, "unreadable: EACCES");
        assert_eq!(
            (r.record.total_age_s, r.record.heartbeat_age_s),
            (None, None)
        );
    }

    /// The holder line names the holder in `--explain`, the row message and JSON, beside
    /// what `/proc/locks` says; it never changes the verdict.
    #[test]
    fn a_held_locks_file_names_its_holder_everywhere_and_decides_nothing() {
        let line = HolderLine {
            host: "web1".into(),
            pid: 4243,
            since: 1_796_032_800, // 2026-11-30T10:00:00Z
        };
        let held = |pid| {
            let mut e = ev(
                Ok(2_400),
                Heartbeat::Age(1_500),
                Lock::Held { pid },
                Owner::NotConfigured,
            );
            e.lock_holder = Some(line.clone());
            e
        };
        let cases = [
            (
                Some(4242),
                "lock held:4242 (the file names web1:4243 since 2026-11-30T10:00:00Z)",
            ),
            (
                Some(4243),
                "lock held:4243 (web1:4243 since 2026-11-30T10:00:00Z)",
            ),
            (
                None,
                "lock held (a try-lock failed; the file names web1:4243 since \
                 2026-11-30T10:00:00Z)",
            ),
        ];
        for (pid, want) in cases {
            let e = held(pid);
            let r = render(&e);
            assert!(r.explain().contains(want), "{}", r.explain());
            let d = crate::decide::decide(&e, T);
            let without = e.clone().with_lock_holder(None);
            assert_eq!(d, crate::decide::decide(&without, T), "naming only");
            assert_eq!(d.basis, Basis::StaleButLockHeld);
            let m = row_message(&d, &e, T);
            assert!(
                m.ends_with(", holder web1:4243 since 2026-11-30T10:00:00Z)"),
                "{m}"
            );
            assert_eq!(message::parse(&m).map(|p| p.total_age_s), Some(Some(2_400)));
            assert_eq!(
                serde_json::to_value(&r.lock_holder).expect("json"),
                serde_json::json!({"host": "web1", "pid": 4243, "since": "2026-11-30T10:00:00Z"})
            );
            assert_eq!(r.record.lock_pid, pid, "/proc/locks' pid stays as it was");
        }
        // A lock not held names nobody, whatever the file says.
        let mut e = held(None);
        e.lock = Lock::Free;
        let r = render(&e);
        assert_eq!(r.lock_holder, None);
        assert!(r.explain().contains("lock free (a try-lock got it),"));
        assert!(!row_message(&crate::decide::decide(&e, T), &e, T).contains("holder"));
        // A host from the file is printed cut (and escaped), never whole.
        let mut e = held(Some(1));
        e.lock_holder = Some(HolderLine {
            host: "x".repeat(300),
            ..line.clone()
        });
        let shown = render(&e).explain();
        assert!(
            shown.contains(&format!("names {}…:4243 since", "x".repeat(64))),
            "{shown}"
        );
    }

    #[test]
    fn the_message_says_what_decided_in_words_then_the_figures() {
        let d = |verdict, basis| Decision::new(verdict, basis);
        let cases = [
            (
                d(Verdict::Dead, Basis::LockFree),
                ev(
                    Ok(1200),
                    Heartbeat::Age(100),
                    Lock::Free,
                    Owner::NotConfigured,
                ),
                "self-heal: dead: lock free, worker gone (row 20m, heartbeat 1m40s ago, \
                 stale_after 5m)",
            ),
            (
                d(Verdict::Dead, Basis::OwnerDead),
                ev(
                    Ok(900),
                    Heartbeat::Age(10),
                    Lock::Absent,
                    Owner::Dead { pid: 4242 },
                ),
                "self-heal: dead: owner pid 4242 gone (row 15m, heartbeat 10s ago, \
                 stale_after 5m, no lock file)",
            ),
            (
                d(Verdict::Dead, Basis::HeartbeatMissing),
                ev(
                    Ok(3600),
                    Heartbeat::Missing,
                    Lock::NotConfigured,
                    Owner::Empty,
                ),
                "self-heal: dead: no heartbeat, no sign of the worker (row 1h, no heartbeat, \
                 stale_after 5m, no owner)",
            ),
            (
                d(Verdict::Hung, Basis::StaleButOwnerAlive),
                ev(
                    Ok(3000),
                    Heartbeat::Age(1800),
                    Lock::NotConfigured,
                    Owner::Alive { pid: 1 },
                ),
                "self-heal: hung: heartbeat stale, owner pid 1 alive (row 50m, heartbeat 30m \
                 ago, stale_after 5m)",
            ),
            (
                d(Verdict::Overtime, Basis::MaxAge),
                ev(
                    Ok(18_005),
                    Heartbeat::Age(10),
                    Lock::Held { pid: Some(77) },
                    Owner::NotConfigured,
                ),
                "self-heal: overtime: running past max_age (row 5h5s, heartbeat 10s ago, \
                 max_age 4h, lock held by pid 77)",
            ),
        ];
        for (d, e, want) in cases {
            assert_eq!(row_message(&d, &e, T), want);
        }
    }

    #[test]
    fn the_longest_message_is_the_widest_any_decision_writes() {
        let cfg = crate::config::from_str(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"w\"\n\
             table = \"t\"\nstarted_column = \"s\"\nheartbeat_file = \"/run/{id}\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\nlock_file = \"/run/{id}.lock\"\n\
             owner_column = \"o\"\n",
            std::path::Path::new("/etc/selfheal/selfheal.toml"),
            &crate::config::Overrides::default(),
            &[],
        )
        .expect("config");
        let w = &cfg.watches[0];
        let all = widest_messages(w);
        assert_eq!(
            longest_message(w),
            all.iter().map(|m| m.chars().count()).max().expect("some")
        );
        assert!(longest_words(w) < longest_message(w));
        // The reused owner's words are the longest.
        assert_eq!(
            longest_words(w),
            "self-heal: dead: owner pid 4194304 reused? started 16d16h after the row".len()
        );
    }

    #[test]
    fn the_row_message_of_any_evidence_parses_back_to_it() {
        let totals = [Ok(0), Ok(3_000), Err("bad".to_string())];
        let beats = [
            Heartbeat::Age(7),
            Heartbeat::Missing,
            Heartbeat::Unusable("x".into()),
            Heartbeat::Unreadable("x".into()),
        ];
        let locks = [
            Lock::NotConfigured,
            Lock::Held { pid: Some(9) },
            Lock::Held { pid: None },
            Lock::Free,
            Lock::Present,
            Lock::Untrusted("x".into()),
            Lock::Absent,
            Lock::Unreadable("x".into()),
        ];
        let owners = [
            Owner::NotConfigured,
            Owner::Empty,
            Owner::Alive { pid: 5 },
            Owner::Dead { pid: 5 },
            Owner::Reused {
                pid: 5,
                after_s: 60,
                beat_since_start: false,
            },
            Owner::NotLocal { host: "h".into() },
            Owner::Invalid("x".into()),
            Owner::Unreadable("x".into()),
        ];
        for total in &totals {
            for hb in &beats {
                for lock in &locks {
                    for (owner, own) in owners.iter().flat_map(|o| [(o, false), (o, true)]) {
                        let e = ev(total.clone(), hb.clone(), lock.clone(), owner.clone())
                            .with_heartbeat_own(own)
                            .with_lock_own(own);
                        let d = crate::decide::decide(&e, T);
                        let m = row_message(&d, &e, T);
                        let p = message::parse(&m).expect("prefix");
                        assert_eq!(p.verdict, d.verdict.as_str(), "{m}");
                        assert_eq!(p.total_age_s, total.as_ref().ok().copied(), "{m}");
                        let hb_age = match hb {
                            Heartbeat::Age(a) => Some(*a),
                            _ => None,
                        };
                        assert_eq!(p.heartbeat_age_s, hb_age, "{m}");
                        assert_eq!(p.conclusive, d.conclusive(), "{m}");
                    }
                }
            }
        }
    }
}
