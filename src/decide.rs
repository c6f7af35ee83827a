//! The decision core: evidence about one running row plus the watch's policy in, a verdict
//! and the action a real run takes out. Pure — no I/O, no clock, no logging — so the whole
//! of selfheal's judgement is tested as a table (see the tests at the bottom).
//!
//! Precedence (SPEC §5), first match wins:
//! 1. `unknown`: any evidence unreadable or implausible (permission denied, I/O error, a
//!    timestamp in the future, a start of 0, an owner that cannot be parsed, a free lock
//!    while the owner pid provably lives).
//! 2. `remote`: the owner column names another host. That host's files, locks and pids are
//!    its own and never looked at here (a lock it holds is invisible from here, so not even
//!    a stale heartbeat column proves its worker dead); its selfheal judges the row. Only
//!    past `max_age`, or with a heartbeat (column) stale beyond `max_age`, is it reported
//!    for a person: the owning host may be gone for good. Never written.
//! 3. conclusive death: the owner pid is dead or was reused; or the job's lock is free —
//!    confirmed by a try-lock that got it, not merely absent from `/proc/locks` — although
//!    the row is at least `stale_after` old (a worker takes its lock before it writes its
//!    row, and holds it for the whole run). A legacy lock that is only the file's existence
//!    (`Lock::Present`), a lock nobody was seen holding but not yet tried
//!    (`Lock::Unconfirmed`) and a pid this pid namespace cannot see (`Owner::NotVisible`)
//!    prove nothing either way.
//! 4. `overtime`: total age beyond `max_age` — a backstop against a stuck heartbeat.
//! 5. by heartbeat: `starting` (none yet, row younger than `stale_after`), `alive`
//!    (fresh), `hung` (stale, but the lock is held or the owner lives), `dead` (stale or
//!    missing and nothing says the worker lives). A heartbeat older than the row itself
//!    (`Heartbeat::BeforeRow`: an earlier row's with the same id) counts as missing.
//!
//! After the verdict, [`plan`] chooses the action (an `overtime` whose worker provably
//! lives is never marked dead), [`confirm`] holds an inferred verdict (dead on heartbeat
//! silence alone, hung) until the same row got it in `confirm` consecutive runs, and
//! [`hold`] holds what is not conclusive when the breaker trips or the clocks disagree.
//! The counting itself is the caller's (a state file); here it is an input.

use serde::{Deserialize, Serialize};

use crate::holder_line::HolderLine;

use crate::config::Overtime;

/// Heartbeat evidence: the freshest of the file mtime (host clock) and the column (database
/// clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heartbeat {
    /// Seconds since the last beat.
    Age(u64),
    /// No beat at all (no file, or the column is NULL).
    Missing,
    /// The last beat (seconds ago) is older than the row's own start, beyond the clock
    /// tolerance: an earlier row's with the same id (ids reused after a `TRUNCATE` or an
    /// auto-increment reset). Counts as [`Heartbeat::Missing`].
    BeforeRow(u64),
    /// Could not be read; never taken as `Missing` (EACCES is not ENOENT).
    Unreadable(String),
}

/// The job's own kernel lock on its lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// The watch names no lock file.
    NotConfigured,
    /// Some process holds a lock on the file's inode (`pid: None`: a try-lock failed, the
    /// holder is not visible from here).
    Held {
        pid: Option<u32>,
    },
    /// The file exists and `/proc/locks` shows no holder, but that proves nothing yet: it
    /// lists only the holders of this pid namespace, and none over NFS. Neutral until a
    /// try-lock confirms it ([`Lock::Free`]) or fails ([`Lock::Held`]).
    Unconfirmed,
    /// The file exists and nobody holds a lock on it: a non-blocking try-lock got it (and
    /// released it at once).
    Free,
    /// The file exists and nobody holds a kernel lock on it, but the job locks by the
    /// file's mere existence (`release_lock = "if_free"`): for such a job "no kernel lock"
    /// is its normal state and proves nothing, so this is neutral, never conclusive.
    Present,
    /// The file does not exist (neutral: proves nothing either way).
    Absent,
    Unreadable(String),
}

/// The worker named in the row's owner column, checked on this host only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The watch names no owner column.
    NotConfigured,
    /// The column is NULL or empty (not claimed yet, or never written).
    Empty,
    /// The pid runs and started no later than the row.
    Alive {
        pid: u32,
    },
    /// No such process.
    Dead {
        pid: u32,
    },
    /// The pid runs but started after the row: a recycled pid, the worker is gone.
    Reused {
        pid: u32,
    },
    /// The worker runs on another host (whole names compared, never guessed): the row is
    /// that host's (verdict `remote`), shown as `remote:HOST`.
    NotLocal {
        host: String,
    },
    /// selfheal does not run in the host's initial pid namespace (a container, `unshare
    /// --pid`): `kill(pid, 0)` and `/proc` answer for another set of pids. Neutral.
    NotVisible {
        pid: u32,
    },
    /// The value is not `HOST:PID` or `PID`.
    Invalid(String),
    Unreadable(String),
}

/// Everything known about one running row at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// Seconds since the row started, on the database clock; `Err` when unreadable or
    /// implausible.
    pub total_age: Result<u64, String>,
    pub heartbeat: Heartbeat,
    pub lock: Lock,
    /// Who the lock file names as its holder, when the lock is held and its first line is
    /// a `HOST:PID START` holder line (as `selfheal run` and the PHP helper write). For
    /// naming the holder only: no verdict ever reads it.
    pub lock_holder: Option<HolderLine>,
    pub owner: Owner,
}

/// The thresholds of one watch, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub stale_after: u64,
    pub max_age: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Alive,
    Starting,
    Dead,
    Hung,
    Overtime,
    Unknown,
    /// Another host's row: that host's selfheal judges it; never written here.
    Remote,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Alive => "alive",
            Verdict::Starting => "starting",
            Verdict::Dead => "dead",
            Verdict::Hung => "hung",
            Verdict::Overtime => "overtime",
            Verdict::Unknown => "unknown",
            Verdict::Remote => "remote",
        }
    }
}

/// Which evidence decided the verdict (shown by `--explain` and in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Some evidence could not be read or is implausible; the text says which.
    Unreadable(String),
    OwnerDead,
    OwnerReused,
    LockFree,
    MaxAge,
    /// Beyond `max_age`, but the job's lock is held or the owner pid lives.
    MaxAgeWorkerLives,
    NoHeartbeatYet,
    HeartbeatFresh,
    /// Stale heartbeat, but the job's lock is held.
    StaleButLockHeld,
    /// Stale heartbeat, but the owner pid lives.
    StaleButOwnerAlive,
    HeartbeatStale,
    HeartbeatMissing,
    /// Another host (named) owns the row, and it is within `max_age`.
    OtherHost(String),
    /// Another host's row, past `max_age`.
    OtherHostPastMaxAge(String),
    /// Another host's row whose heartbeat column is stale beyond `max_age`.
    OtherHostSilent(String),
}

impl Basis {
    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Basis::Unreadable(why) => format!("evidence unreadable: {why}"),
            Basis::OwnerDead => "the owner pid no longer exists".into(),
            Basis::OwnerReused => "the owner pid belongs to a process started after the row".into(),
            Basis::LockFree => "nobody holds the job's lock (a try-lock got it), and the row \
                                is older than stale_after"
                .into(),
            Basis::MaxAge => "total age is beyond max_age".into(),
            Basis::MaxAgeWorkerLives => "total age is beyond max_age, but the worker provably \
                                         lives (its lock is held or its pid alive)"
                .into(),
            Basis::NoHeartbeatYet => {
                "no heartbeat yet, and the row is younger than stale_after".into()
            }
            Basis::HeartbeatFresh => "the heartbeat is fresh".into(),
            Basis::StaleButLockHeld => "the heartbeat is stale, but the job's lock is held".into(),
            Basis::StaleButOwnerAlive => {
                "the heartbeat is stale, but the owner pid is alive".into()
            }
            Basis::HeartbeatStale => {
                "the heartbeat is stale and nothing says the worker lives".into()
            }
            Basis::HeartbeatMissing => {
                "no heartbeat of this row at all, and the row is older than stale_after".into()
            }
            Basis::OtherHost(h) => format!(
                "host {h} owns the row: its files, locks and pids are not visible from here, \
                 so selfheal on {h} judges it"
            ),
            Basis::OtherHostPastMaxAge(h) => format!(
                "host {h} owns the row and it is past max_age: selfheal on {h} should have \
                 handled it; is {h} gone?"
            ),
            Basis::OtherHostSilent(h) => format!(
                "host {h} owns the row and its heartbeat column is stale beyond max_age: is \
                 {h} gone?"
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub basis: Basis,
}

impl Decision {
    /// Death proven by the host (pid gone, lock free), not inferred from a quiet heartbeat.
    /// The breaker and the clock check never hold these back.
    pub fn conclusive(&self) -> bool {
        matches!(
            self.basis,
            Basis::OwnerDead | Basis::OwnerReused | Basis::LockFree
        )
    }

    /// A verdict inferred rather than proven: `dead` on heartbeat silence alone, or `hung`.
    /// It acts only once confirmed by consecutive runs ([`confirm`]).
    pub fn inferred(&self) -> bool {
        matches!(self.verdict, Verdict::Hung)
            || (self.verdict == Verdict::Dead && !self.conclusive())
    }
}

fn decision(verdict: Verdict, basis: Basis) -> Decision {
    Decision { verdict, basis }
}

/// Judges one row. See the module documentation for the precedence.
pub fn decide(ev: &Evidence, t: Thresholds) -> Decision {
    // 1. unknown
    let total = match &ev.total_age {
        Ok(a) => *a,
        Err(why) => {
            return decision(
                Verdict::Unknown,
                Basis::Unreadable(format!("start time: {why}")),
            );
        }
    };
    let unreadable = match (&ev.heartbeat, &ev.lock, &ev.owner) {
        (Heartbeat::Unreadable(why), ..) => Some(format!("heartbeat: {why}")),
        (_, Lock::Unreadable(why), _) => Some(format!("lock: {why}")),
        (.., Owner::Unreadable(why)) => Some(format!("owner: {why}")),
        (.., Owner::Invalid(v)) => Some(format!("owner: {v:?} is not HOST:PID or PID")),
        _ => None,
    };
    if let Some(why) = unreadable {
        return decision(Verdict::Unknown, Basis::Unreadable(why));
    }

    // 2. remote: another host's row, never judged by this host's evidence
    if let Owner::NotLocal { host } = &ev.owner {
        return remote(host, total, &ev.heartbeat, t);
    }
    let young = total < t.stale_after;
    let owner_alive = matches!(ev.owner, Owner::Alive { .. });
    let lock_held = matches!(ev.lock, Lock::Held { .. });

    // 3. conclusive death
    match ev.owner {
        Owner::Dead { .. } => return decision(Verdict::Dead, Basis::OwnerDead),
        Owner::Reused { .. } => return decision(Verdict::Dead, Basis::OwnerReused),
        _ => {}
    }
    if matches!(ev.lock, Lock::Free | Lock::Unconfirmed) && !young && owner_alive {
        // The worker provably lives (in this very pid namespace) but nobody holds its
        // lock: the configuration or the job is not what selfheal was told. A person must
        // look; never mark.
        return decision(
            Verdict::Unknown,
            Basis::Unreadable(
                "the job's lock is free, yet the owner pid is alive (is lock_file right?)".into(),
            ),
        );
    }
    if ev.lock == Lock::Free && !young {
        return decision(Verdict::Dead, Basis::LockFree);
    }

    // 4. overtime
    if total > t.max_age {
        if lock_held || owner_alive {
            return decision(Verdict::Overtime, Basis::MaxAgeWorkerLives);
        }
        return decision(Verdict::Overtime, Basis::MaxAge);
    }

    // 5. by heartbeat (a beat older than the row is an earlier row's: missing)
    let stale_basis = match ev.heartbeat {
        Heartbeat::Missing | Heartbeat::BeforeRow(_) if young => {
            return decision(Verdict::Starting, Basis::NoHeartbeatYet);
        }
        Heartbeat::Age(a) if a <= t.stale_after => {
            return decision(Verdict::Alive, Basis::HeartbeatFresh);
        }
        Heartbeat::Missing | Heartbeat::BeforeRow(_) => Basis::HeartbeatMissing,
        _ => Basis::HeartbeatStale,
    };
    if lock_held {
        decision(Verdict::Hung, Basis::StaleButLockHeld)
    } else if owner_alive {
        decision(Verdict::Hung, Basis::StaleButOwnerAlive)
    } else {
        decision(Verdict::Dead, stale_basis)
    }
}

/// What a row's lock would be if a try-lock confirmed what `/proc/locks` shows: the
/// evidence a real run acts on when it confirms ([`Lock::Unconfirmed`] becomes
/// [`Lock::Free`]). The caller tries the lock only when this evidence would have the row
/// written, so that jobs in normal operation are never disturbed.
pub fn as_if_confirmed(ev: &Evidence) -> Option<Evidence> {
    (ev.lock == Lock::Unconfirmed).then(|| Evidence {
        lock: Lock::Free,
        ..ev.clone()
    })
}

/// Another host's row: left to that host, and reported for a person only when the owning
/// host may be gone for good (past `max_age`, or a heartbeat column silent beyond it).
/// `heartbeat` is the row's heartbeat column alone: the owner's files are not looked at.
fn remote(host: &str, total: u64, heartbeat: &Heartbeat, t: Thresholds) -> Decision {
    let host = host.to_string();
    if total > t.max_age {
        decision(Verdict::Remote, Basis::OtherHostPastMaxAge(host))
    } else if matches!(heartbeat, Heartbeat::Age(a) if *a > t.max_age) {
        decision(Verdict::Remote, Basis::OtherHostSilent(host))
    } else {
        decision(Verdict::Remote, Basis::OtherHost(host))
    }
}

// ---------------------------------------------------------------------------------------
// Actions

/// What a run does to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    None,
    MarkDead,
    MarkRetry,
    MarkManual,
    /// The compare-and-set matched nothing: the row moved on between read and write.
    LostRace,
    /// A parked row put back to `running_value`: by the next real run when its own
    /// heartbeat is fresh again after a park as `hung` (`crate::check`'s un-park step),
    /// or by a person (`selfheal resolve --as running`). Never a plan of [`plan`].
    Unpark,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::MarkDead => "mark_dead",
            Action::MarkRetry => "mark_retry",
            Action::MarkManual => "mark_manual",
            Action::LostRace => "lost_race",
            Action::Unpark => "unpark",
        }
    }
}

/// Why an action a verdict calls for is not taken this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// An inferred verdict not yet held for `confirm` consecutive real runs: shown as
    /// judged, not acted on, not reported as needing a person.
    Confirming,
    /// More than half of the watch's rows (and at least 3) would die on heartbeat alone.
    Breaker,
    /// The database and host clocks disagree beyond the tolerance.
    ClockSkew,
}

impl Hold {
    pub fn describe(self) -> &'static str {
        match self {
            Hold::Confirming => {
                "confirming: an inferred verdict (a silent heartbeat, a hung worker) acts \
                 only once consecutive runs find the same (confirm)"
            }
            Hold::Breaker => {
                "held back by the breaker: most rows of this watch would die on heartbeat \
                 alone, which is far more often a clock, time-zone or NFS fault (--force \
                 overrides)"
            }
            Hold::ClockSkew => {
                "held back: the database and host clocks disagree, so only conclusive \
                 evidence is acted on (--force overrides)"
            }
        }
    }
}

/// The part of a watch's configuration that chooses actions.
#[derive(Debug, Clone, Copy)]
pub struct ActionPolicy<'a> {
    pub dead_value: &'a str,
    pub manual_value: Option<&'a str>,
    /// `(retry_value, max_attempts)`.
    pub retry: Option<(&'a str, u32)>,
    pub overtime: Overtime,
}

/// What a real run would do with a row, before any hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub action: Action,
    /// The status written, when the action writes one.
    pub target: Option<String>,
    /// A person needs to look at this row.
    pub attention: bool,
    pub hold: Option<Hold>,
}

impl Plan {
    fn none(attention: bool) -> Plan {
        Plan {
            action: Action::None,
            target: None,
            attention,
            hold: None,
        }
    }

    fn set(action: Action, target: &str, attention: bool) -> Plan {
        Plan {
            action,
            target: Some(target.to_string()),
            attention,
            hold: None,
        }
    }

    /// True when the plan writes to the row.
    pub fn writes(&self) -> bool {
        matches!(
            self.action,
            Action::MarkDead | Action::MarkRetry | Action::MarkManual
        )
    }
}

/// Chooses the action for a decision. `attempts` is the row's attempts count (`None` when
/// the watch has no retry budget or the column is NULL, read as 0).
pub fn plan(d: &Decision, attempts: Option<i64>, p: &ActionPolicy<'_>) -> Plan {
    match d.verdict {
        Verdict::Alive | Verdict::Starting => Plan::none(false),
        Verdict::Unknown => Plan::none(true),
        // Never written here, whatever its state: another host's row.
        Verdict::Remote => Plan::none(!matches!(d.basis, Basis::OtherHost(_))),
        Verdict::Hung => match p.manual_value {
            Some(m) => Plan::set(Action::MarkManual, m, true),
            None => Plan::none(true),
        },
        Verdict::Overtime => match p.overtime {
            // The cap is a backstop against a stuck heartbeat, not a licence to mark a
            // process that provably runs: a person decides about that one.
            Overtime::MarkDead if d.basis == Basis::MaxAgeWorkerLives => match p.manual_value {
                Some(m) => Plan::set(Action::MarkManual, m, true),
                None => Plan::none(true),
            },
            // Never back to the queue: an overtime worker may still be running, and a
            // retry beside it is the second writer of the seed incident.
            Overtime::MarkDead => Plan::set(Action::MarkDead, p.dead_value, false),
            Overtime::Manual => match p.manual_value {
                Some(m) => Plan::set(Action::MarkManual, m, true),
                None => Plan::none(true),
            },
            Overtime::Report => Plan::none(true),
        },
        Verdict::Dead => match p.retry {
            Some((value, max)) if attempts.unwrap_or(0) < i64::from(max) => {
                Plan::set(Action::MarkRetry, value, false)
            }
            Some(_) => match p.manual_value {
                // Budget spent: a person decides.
                Some(m) => Plan::set(Action::MarkManual, m, true),
                None => Plan::set(Action::MarkDead, p.dead_value, false),
            },
            None => Plan::set(Action::MarkDead, p.dead_value, false),
        },
    }
}

/// Applies a hold to a plan: anything not proven by conclusive evidence is left alone and
/// reported instead.
pub fn hold(plan: Plan, d: &Decision, why: Hold) -> Plan {
    if plan.writes() && !d.conclusive() {
        Plan {
            action: Action::None,
            target: None,
            attention: true,
            hold: Some(why),
        }
    } else {
        plan
    }
}

/// How far a row's inferred verdict is confirmed: the consecutive real runs that judged
/// this row (same id and start value) so, this one included, and how many it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirmation {
    pub count: u32,
    pub confirm: u32,
}

impl Confirmation {
    pub fn confirmed(self) -> bool {
        self.count >= self.confirm
    }
}

/// Holds an inferred verdict until it is confirmed (SPEC §5): shown as judged, action
/// `none`, not needing a person yet. Conclusive deaths, `overtime` and `unknown` act at
/// once, as do plans for a row whose verdict is not inferred.
pub fn confirm(plan: Plan, d: &Decision, c: Option<Confirmation>) -> Plan {
    match c {
        Some(c) if d.inferred() && !c.confirmed() => Plan {
            action: Action::None,
            target: None,
            attention: false,
            hold: Some(Hold::Confirming),
        },
        _ => plan,
    }
}

/// The breaker of SPEC §6: trips when more than half of a watch's running rows, and at
/// least 3, would be marked dead on heartbeat staleness alone.
pub fn breaker_trips(heartbeat_only_deaths: usize, running_rows: usize) -> bool {
    heartbeat_only_deaths >= 3 && heartbeat_only_deaths * 2 > running_rows
}

/// True for a plan the breaker counts: a death inferred from the heartbeat alone.
pub fn heartbeat_only_death(d: &Decision, p: &Plan) -> bool {
    d.verdict == Verdict::Dead && !d.conclusive() && p.writes()
}

#[cfg(test)]
mod tests;
