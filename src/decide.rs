//! The decision core: evidence about one running row plus the watch's policy in, a verdict
//! and the action a real run takes out. Pure — no I/O, no clock, no logging — so the whole
//! of selfheal's judgement is tested as a table (`decide/tests.rs`). The evidence is one
//! state per source ([`Evidence`], `decide/evidence.rs`); what of it says the worker lives
//! is asked of [`Evidence::life`] here as everywhere else.
//!
//! Precedence (docs/design.md#proof-means-proof), first match wins. Only a fact about *now* is proof — the owner
//! pid does not exist, the job's lock is free; anything that compares two clocks or two
//! time zones is an inference ("Proof means proof"):
//! 1. `unknown`: any evidence unreadable or implausible (permission denied, I/O error, a
//!    start of 0 or NULL, an owner that cannot be parsed).
//! 2. `remote`: the owner column names another host. That host's files, locks and pids are
//!    its own and never looked at here (a lock it holds is invisible from here, so not even
//!    a stale heartbeat column proves its worker dead); its selfheal judges the row. Only
//!    past `max_age`, or with a heartbeat (column) stale beyond `max_age`, is it reported
//!    for a person: the owning host may be gone for good. Never written.
//! 3. times in the future ([`Evidence::ahead`]: the start or the heartbeat column beyond
//!    the clock tolerance): nothing that rests on them acts; a gone pid or a free lock
//!    does, as a conclusive death, once selfheal's own first sighting of the row is
//!    `stale_after` old; the row's own lock held or own fresh heartbeat still wins;
//!    otherwise `unknown` ([`Basis::TimesAhead`]).
//! 4. an owner pid whose process started more than `stale_after` after its row (a
//!    dispatcher inserts the row, then starts the worker, so within `stale_after` it is the
//!    worker, never "reused"): when the row's own lock is held by that very pid, its own
//!    heartbeat is fresh, or its own heartbeat file was touched after that process started,
//!    the pid *is* the worker and the row's times are wrong — `unknown` at once
//!    ([`Basis::TimesWrong`]), before `overtime` and any contradiction; the row's own lock
//!    held by another pid overrules it (judged by the heartbeat); otherwise `dead`
//!    ([`Basis::OwnerReused`]) as an inference: confirmed, and counted by the breaker.
//! 5. conclusive death, once the row is at least `stale_after` old (a launcher may exit
//!    before its worker first beats; a worker takes its lock before it writes its row):
//!    the owner pid is dead; or the job's lock is free — confirmed by a try-lock that got
//!    it, not merely absent from `/proc/locks`, and in a directory nobody else can swap it
//!    in. A
//!    legacy lock that is only the file's existence (`Lock::Present`), a lock nobody was
//!    seen holding but not yet tried (`Lock::Unconfirmed`), a free lock in a directory
//!    others can write (`Lock::Untrusted`) and a pid this pid namespace cannot see
//!    (`Owner::NotVisible`) prove nothing either way; a free lock while the owner pid
//!    provably lives is `unknown`. **Life beats inference**: the row's *own* evidence of
//!    life overrules a death signal. Its own lock held (a template with `{id}`, or a
//!    holder that is the row's owner) overrules "owner pid gone": the row is judged by its
//!    heartbeat, with the death signal noted ([`Decision::overruled`]). Its own fresh
//!    heartbeat (its column, or a file no other running row shares) meeting a death
//!    signal is a contradiction ([`Basis::Contradicted`]): held quietly until the
//!    heartbeat goes stale (the death signal then acts at once) or, if it stays fresh for
//!    `stale_after`, `unknown` ([`persisting`]).
//! 6. `overtime`: total age beyond `max_age` — a backstop against a stuck heartbeat, and
//!    not a death signal: it acts on a beating row too.
//! 7. by heartbeat: `starting` (none yet, row younger than `stale_after`), `alive`
//!    (fresh), `hung` (stale, but the lock is held or the owner lives), `unknown` (stale,
//!    and the lock the watch names cannot be trusted as free: [`Basis::StaleLockUntrusted`]),
//!    `dead` (stale or missing and nothing says the worker lives). A heartbeat older than
//!    the row itself (`Heartbeat::BeforeRow`: an earlier row's with the same id) counts as
//!    missing; one whose directory is missing or cannot be searched
//!    (`Heartbeat::Unusable`: a typo in `heartbeat_file` looks exactly like this) proves
//!    nothing: `unknown`, naming the path.
//!
//! After the verdict, [`plan`] chooses the action (an `overtime` whose worker provably
//! lives is never marked dead), [`confirm`] holds an inferred verdict (dead on heartbeat
//! silence or a pid that looks reused, hung) until the same row got it in `confirm` consecutive runs, a
//! contradiction is held ([`Hold::Contradicted`]), and [`hold`] applies what holds the
//! watch as a whole (the clocks disagree, the breaker, no heartbeat at all, no named lock
//! held under a template never seen held, a mass overtime) to the rows each of them is
//! about ([`Hold::applies_to`]). The counting itself is the caller's (a state file); here
//! it is an input.

use serde::{Deserialize, Serialize};

use crate::config::Overtime;

mod evidence;
pub use evidence::{
    Ahead, Evidence, Heartbeat, HeldLock, Life, Lock, NamedHolder, NamedLock, Owner, Running, Sign,
};

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

/// A death signal: host evidence that the worker is gone (docs/design.md#precedence, precedence 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    OwnerDead,
    OwnerReused,
    LockFree,
    /// Nobody holds the job's named database lock (`db_lock`).
    NamedLockFree,
}

impl Signal {
    /// In words: "the owner pid no longer exists".
    pub fn describe(self) -> &'static str {
        match self {
            Signal::OwnerDead => "the owner pid no longer exists",
            Signal::OwnerReused => "the owner pid belongs to a process started after the row",
            Signal::LockFree => "nobody holds the job's lock (a try-lock got it)",
            Signal::NamedLockFree => "nobody holds the job's named lock",
        }
    }

    /// The setting that names the evidence, for a person to check.
    pub fn setting(self) -> &'static str {
        match self {
            Signal::OwnerDead | Signal::OwnerReused => "owner_column",
            Signal::LockFree => "lock_file",
            Signal::NamedLockFree => "db_lock",
        }
    }

    /// The basis it is as a conclusive death.
    fn basis(self) -> Basis {
        match self {
            Signal::OwnerDead => Basis::OwnerDead,
            Signal::OwnerReused => Basis::OwnerReused,
            Signal::LockFree => Basis::LockFree,
            Signal::NamedLockFree => Basis::NamedLockFree,
        }
    }
}

/// What proves that an owner pid which started after its row is the row's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerProof {
    /// The row's own lock is held by that very pid (or a process it started).
    OwnLock,
    /// The row's own heartbeat is fresh.
    OwnHeartbeat,
    /// The row's own heartbeat file was touched after the process started.
    BeatSinceStart,
}

impl WorkerProof {
    /// In words: "its own lock is held by that pid".
    pub fn describe(self) -> &'static str {
        match self {
            WorkerProof::OwnLock => "the row's own lock is held by that pid",
            WorkerProof::OwnHeartbeat => "the row's own heartbeat is fresh",
            WorkerProof::BeatSinceStart => {
                "the row's own heartbeat file was touched after that process started"
            }
        }
    }
}

/// Which evidence decided the verdict (shown by `--explain` and in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Some evidence could not be read or is implausible; the text says which.
    Unreadable(String),
    OwnerDead,
    /// The owner pid lives but started more than `stale_after` after the row, and nothing
    /// of the row's own says it is the worker: an inference (two clocks compared), so
    /// `dead` only once confirmed, and counted by the breaker.
    OwnerReused,
    LockFree,
    /// Nobody holds any of the row's named database locks, and the row is older than
    /// `stale_after` (`docs/design.md#named-lock`).
    NamedLockFree,
    /// The owner pid started `after_s` seconds after the row, yet the row's own evidence
    /// proves it is the row's worker: the row's *times* are wrong (a clock, or an
    /// application's session time zone writing DATETIME values). Verdict `unknown`.
    TimesWrong {
        after_s: u64,
        proof: WorkerProof,
    },
    /// The row's start (or heartbeat column) lies `by_s` seconds in the future and no fact
    /// about now decides: verdict `unknown`.
    TimesAhead {
        by_s: u64,
    },
    /// The heartbeat is stale or missing, and the job's lock, which the watch names, lies
    /// where others could have swapped it, so "free" cannot be trusted: `hung` and `dead`
    /// cannot be told apart (verdict `unknown`).
    StaleLockUntrusted,
    /// A death signal met the row's own fresh heartbeat: held quietly until one of them
    /// gives way (verdict `dead`, action held as [`Hold::Contradicted`]).
    Contradicted(Signal),
    /// A death signal met the row's own heartbeat, which stayed fresh for `stale_after`:
    /// something alive beats for this row (verdict `unknown`, for a person).
    ContradictionPersists(Signal),
    MaxAge,
    /// Beyond `max_age`, but the job's lock is held or the owner pid lives.
    MaxAgeWorkerLives,
    NoHeartbeatYet,
    HeartbeatFresh,
    /// Stale heartbeat, but the job's lock is held.
    StaleButLockHeld,
    /// Stale or missing heartbeat, but the row's named lock is held.
    StaleButNamedLockHeld,
    /// No heartbeat is configured, and the row's named lock is held.
    NamedLockHeld,
    /// No heartbeat is configured, and the job's lock file is held or its owner pid lives.
    WorkerLives,
    /// No heartbeat is configured, and neither a lock nor an owner says whether the worker
    /// lives (a name another running row shares, or one that cannot be made).
    NothingDecides,
    /// Stale heartbeat, but the owner pid lives.
    StaleButOwnerAlive,
    HeartbeatStale,
    HeartbeatMissing,
    /// The heartbeat file cannot be used (its directory is missing or not searchable: the
    /// path and why), and nothing conclusive decides (verdict `unknown`).
    HeartbeatUnusable(String),
    /// Another host (named) owns the row, and it is within `max_age`.
    OtherHost(String),
    /// Another host's row, past `max_age`.
    OtherHostPastMaxAge(String),
    /// Another host's row whose heartbeat column is stale beyond `max_age`.
    OtherHostSilent(String),
}

impl Basis {
    /// Its code, as the journal keeps it: the variant's name (`heartbeat_stale`), with the
    /// death signal of a contradiction (`contradicted:owner_dead`); what a variant carries
    /// besides (a host, words) is left out.
    pub fn code(&self) -> String {
        let signal = |s: Signal| {
            serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
        };
        match self {
            Basis::Contradicted(s) => format!("contradicted:{}", signal(*s).unwrap_or_default()),
            Basis::ContradictionPersists(s) => {
                format!("contradiction_persists:{}", signal(*s).unwrap_or_default())
            }
            b => match serde_json::to_value(b) {
                Ok(serde_json::Value::String(s)) => s,
                Ok(serde_json::Value::Object(m)) => m.keys().next().cloned().unwrap_or_default(),
                _ => String::new(),
            },
        }
    }

    /// The words of a basis the journal kept as a code ([`Basis::code`]): a variant that
    /// carries nothing reads back from its code; any other code (one that names what its
    /// variant carries, or a basis an earlier release kept in words) is returned as it is.
    pub fn words_of(kept: &str) -> String {
        match serde_json::from_value::<Basis>(serde_json::Value::String(kept.to_string())) {
            Ok(b) => b.describe(),
            Err(_) => kept.to_string(),
        }
    }

    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Basis::Unreadable(why) => format!("evidence unreadable: {why}"),
            Basis::OwnerDead => "the owner pid no longer exists".into(),
            Basis::OwnerReused => "the owner pid belongs to a process started more than \
                                   stale_after after the row, and nothing of the row's own \
                                   says it is the worker: most likely a recycled pid (an \
                                   inference: confirmed before it acts)"
                .into(),
            Basis::TimesWrong { after_s, proof } => format!(
                "the owner pid started {} after the row, yet {}: it is the row's worker, and \
                 the row's times are wrong (a clock, or an application's session time_zone \
                 writing DATETIME values; set [database] timezone to the zone it writes in)",
                crate::clock::human(*after_s),
                proof.describe()
            ),
            Basis::TimesAhead { by_s } => format!(
                "the row's times are {} in the future (a clock, or an application's session \
                 time_zone writing DATETIME values), and no fact about now (a gone pid, a free \
                 lock) decides",
                crate::clock::human(*by_s)
            ),
            Basis::StaleLockUntrusted => "the heartbeat is stale or missing, and the job's lock \
                                          lies in a directory others can write, so a free \
                                          lock proves nothing: hung and dead cannot be told \
                                          apart"
                .into(),
            Basis::LockFree => "nobody holds the job's lock (a try-lock got it), and the row \
                                is older than stale_after"
                .into(),
            Basis::NamedLockFree => "nobody holds the job's named lock, and the row is older \
                                     than stale_after"
                .into(),
            Basis::StaleButNamedLockHeld => {
                "the heartbeat is stale or missing, but the job's named lock is held".into()
            }
            Basis::NamedLockHeld => "the job's named lock is held".into(),
            Basis::WorkerLives => "the job's lock is held or its owner pid lives".into(),
            Basis::NothingDecides => "no heartbeat is configured, and neither a lock nor an \
                                      owner says whether the worker lives (is db_lock right?)"
                .into(),
            Basis::Contradicted(sig) => format!(
                "{}, but the row's own heartbeat is fresh: waiting until the heartbeat goes \
                 stale (then the row is reclaimed) or stays fresh for stale_after (then a \
                 person decides)",
                sig.describe()
            ),
            Basis::ContradictionPersists(sig) => format!(
                "{}, yet the row's own heartbeat has stayed fresh for stale_after: something \
                 alive beats for this row (is {} right?)",
                sig.describe(),
                sig.setting()
            ),
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
            Basis::HeartbeatUnusable(why) => format!(
                "the heartbeat file cannot be used ({why}), and nothing else proves the \
                 worker dead (is heartbeat_file right?)"
            ),
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
    /// A death signal the row's own lock, held, overruled (the owner column names a
    /// process that is gone: a launcher that exited after starting the worker, a worker
    /// in another pid namespace that shares the host's name).
    pub overruled: Option<Signal>,
}

impl Decision {
    pub fn new(verdict: Verdict, basis: Basis) -> Decision {
        Decision {
            verdict,
            basis,
            overruled: None,
        }
    }

    /// A death signal waits for the row's own fresh heartbeat ([`Basis::Contradicted`]).
    pub fn contradicted(&self) -> bool {
        matches!(self.basis, Basis::Contradicted(_))
    }

    /// A death inferred, not proven: the heartbeat stale or missing and nothing says the
    /// worker lives, or an owner pid that looks reused (two clocks compared). What the
    /// breaker counts.
    pub fn inferred_death(&self) -> bool {
        self.verdict == Verdict::Dead
            && matches!(
                self.basis,
                Basis::HeartbeatStale | Basis::HeartbeatMissing | Basis::OwnerReused
            )
    }

    /// Death proven by a fact about now (the owner pid does not exist, the job's lock is
    /// free), not inferred. The breaker and the clock check never hold these back; only a
    /// free named lock's waits, while its template has never been seen held
    /// ([`Hold::NoNamedLock`]).
    pub fn conclusive(&self) -> bool {
        matches!(
            self.basis,
            Basis::OwnerDead | Basis::LockFree | Basis::NamedLockFree
        )
    }

    /// A verdict inferred rather than proven: an inferred death ([`Decision::inferred_death`]),
    /// or `hung`. It acts only once confirmed by consecutive runs ([`confirm`]).
    pub fn inferred(&self) -> bool {
        matches!(self.verdict, Verdict::Hung) || self.inferred_death()
    }
}

fn decision(verdict: Verdict, basis: Basis) -> Decision {
    Decision::new(verdict, basis)
}

/// Judges one row. See the module documentation for the precedence.
pub fn decide(ev: &Evidence, t: Thresholds) -> Decision {
    // 1. unknown
    let unreadable = match (&ev.heartbeat, &ev.lock, &ev.owner) {
        _ if matches!(ev.named, NamedLock::Unreadable(_)) => match &ev.named {
            NamedLock::Unreadable(why) => Some(format!("db_lock: {why}")),
            _ => None,
        },
        (Heartbeat::Unreadable(why), ..) => Some(format!("heartbeat: {why}")),
        (_, Lock::Unreadable(why), _) => Some(format!("lock: {why}")),
        (.., Owner::Unreadable(why)) => Some(format!("owner: {why}")),
        (.., Owner::Invalid(v)) => Some(format!("owner: {v:?} is not HOST:PID or PID")),
        _ => None,
    };
    if let Some(why) = unreadable {
        return decision(Verdict::Unknown, Basis::Unreadable(why));
    }
    let total = match (&ev.total_age, ev.ahead) {
        (_, Some(_)) => None,
        (Ok(a), None) => Some(*a),
        (Err(why), None) => {
            return decision(
                Verdict::Unknown,
                Basis::Unreadable(format!("start time: {why}")),
            );
        }
    };

    // 2. remote: another host's row, never judged by this host's evidence
    if let Owner::NotLocal { host } = &ev.owner {
        return remote(host, total, &ev.heartbeat, t);
    }

    // 3. times in the future: the facts about now alone
    let Some(total) = total else {
        return by_facts_about_now(ev, t, ev.ahead.map_or(0, |a| a.seen_s));
    };
    let young = total < t.stale_after;
    let life = ev.life(t);
    let own_lock_held = life.own_lock_held();
    let own_fresh_beat = life.own_beat.is_some();

    // 4. an owner pid that started after its row: the worker (and the row's times are
    //    wrong) when the row's own evidence says so, else an inference
    let mut overruled = None;
    if let Owner::Reused {
        pid,
        after_s,
        proof: found,
    } = ev.owner
    {
        let proof = if own_lock_held && life.lock_held_by(pid) {
            Some(WorkerProof::OwnLock)
        } else if own_fresh_beat {
            Some(WorkerProof::OwnHeartbeat)
        } else {
            found
        };
        if let Some(proof) = proof {
            return decision(Verdict::Unknown, Basis::TimesWrong { after_s, proof });
        }
        if own_lock_held {
            // The row's own lock, held by another pid, is its worker: the owner column
            // names something else. Judged by its heartbeat.
            overruled = Some(Signal::OwnerReused);
        } else if (ev.lock == Lock::Free || ev.named == NamedLock::Free) && !young {
            // A fact about now decides below.
        } else if matches!(ev.lock, Lock::Untrusted(_)) {
            // The job may hold the inode someone swapped away: judged by its heartbeat,
            // never dead on an inference.
        } else {
            return decision(Verdict::Dead, Basis::OwnerReused);
        }
    }

    // 5. conclusive death, unless the row's own evidence of life contradicts it
    if let Some(basis) = locks_disagree(ev, &life, young, life.owner_alive()) {
        // The worker provably lives (in this very pid namespace, or by its other lock)
        // but nobody holds a lock it should: the configuration or the job is not what
        // selfheal was told. A person must look; never mark.
        return decision(Verdict::Unknown, basis);
    }
    match death_signal(ev, young) {
        // The row's own lock, held, is its worker: the owner column names something else
        // (a launcher that exited, a pid of another namespace). Judged by its heartbeat.
        Some(sig @ Signal::OwnerDead) if own_lock_held => {
            overruled = Some(sig);
        }
        // The cap is not a death signal: past it, a contradiction is an overtime.
        Some(sig) if own_fresh_beat && total <= t.max_age => {
            return decision(Verdict::Dead, Basis::Contradicted(sig));
        }
        Some(_) if own_fresh_beat => {}
        Some(sig) => return decision(Verdict::Dead, sig.basis()),
        None => {}
    }
    let d = judge_by_age_and_heartbeat(ev, t, total, young, &life);
    Decision { overruled, ..d }
}

/// A fact about now that says the worker is gone, once the row is at least `stale_after`
/// old: its pid does not exist (younger, it may be a launcher that exited before its
/// worker first beat), or its lock is free, confirmed and trusted (a worker takes its lock
/// before it writes its row). `young`: the row (or, for a row whose times cannot be
/// trusted, selfheal's own sighting of it) is younger than `stale_after`.
fn death_signal(ev: &Evidence, young: bool) -> Option<Signal> {
    match ev.owner {
        _ if young => None,
        Owner::Dead { .. } => Some(Signal::OwnerDead),
        _ if ev.lock == Lock::Free => Some(Signal::LockFree),
        _ if ev.named == NamedLock::Free => Some(Signal::NamedLockFree),
        _ => None,
    }
}

/// A lock that is free (or as good as, for a lock file not yet tried) while the worker
/// provably lives — its owner pid runs (`owner_runs`), or its other lock is held: the
/// evidence contradicts itself, and a person looks (`unknown`). `None` otherwise, or for
/// a row younger than `stale_after`.
fn locks_disagree(ev: &Evidence, life: &Life<'_>, young: bool, owner_runs: bool) -> Option<Basis> {
    if young {
        return None;
    }
    let file_free = matches!(ev.lock, Lock::Free | Lock::Unconfirmed);
    let named_free = ev.named == NamedLock::Free;
    let why = if file_free && owner_runs {
        "the job's lock is free, yet the owner pid is alive (is lock_file right?)"
    } else if named_free && owner_runs {
        "the job's named lock is free, yet the owner pid is alive (is db_lock right?)"
    } else if file_free && life.named.is_some() {
        "the job's lock file is free, yet its named lock is held (are lock_file and db_lock \
         the same job's?)"
    } else if named_free && life.lock.is_some() {
        "the job's named lock is free, yet its lock file is held (are lock_file and db_lock \
         the same job's?)"
    } else {
        return None;
    };
    Some(Basis::Unreadable(why.into()))
}

/// Precedence 3: a row whose times lie in the future (docs/design.md#proof-means-proof, "Proof means proof").
/// Nothing that rests on its times acts (the cap, a heartbeat's age against its start); a
/// fact about now does — a gone pid, a free lock — once selfheal itself has seen the row
/// for `stale_after` (`seen_s`: a launcher may exit before its worker first beats), and the
/// row's own life still wins (its own lock held, its own fresh heartbeat). With no such
/// fact: `unknown`, with the offset.
fn by_facts_about_now(ev: &Evidence, t: Thresholds, seen_s: u64) -> Decision {
    let by_s = ev.ahead.map_or(0, |a| a.by_s);
    let young = seen_s < t.stale_after;
    let life = ev.life(t);
    // With no trustworthy times, a pid that started after the row runs all the same.
    let owner_runs = life.owner.is_some();
    if let Some(basis) = locks_disagree(ev, &life, young, owner_runs) {
        return decision(Verdict::Unknown, basis);
    }
    match death_signal(ev, young) {
        Some(sig) if life.own_lock_held() => Decision {
            overruled: Some(sig),
            ..decision(Verdict::Unknown, Basis::TimesAhead { by_s })
        },
        Some(sig) if !young && life.own_beat.is_some() => {
            decision(Verdict::Dead, Basis::Contradicted(sig))
        }
        Some(sig) if !young => decision(Verdict::Dead, sig.basis()),
        _ => decision(Verdict::Unknown, Basis::TimesAhead { by_s }),
    }
}

/// Precedence 6 and 7: the cap, then the heartbeat (a beat older than the row is an
/// earlier row's: missing).
fn judge_by_age_and_heartbeat(
    ev: &Evidence,
    t: Thresholds,
    total: u64,
    young: bool,
    life: &Life<'_>,
) -> Decision {
    // 6. overtime
    if total > t.max_age {
        if life.proven() {
            return decision(Verdict::Overtime, Basis::MaxAgeWorkerLives);
        }
        return decision(Verdict::Overtime, Basis::MaxAge);
    }

    // 7. by heartbeat; a watch with none by its locks and owner (docs/design.md#named-lock)
    if ev.heartbeat == Heartbeat::NotConfigured {
        return if life.named.is_some() {
            decision(Verdict::Alive, Basis::NamedLockHeld)
        } else if life.lock.is_some() || life.owner_alive() {
            decision(Verdict::Alive, Basis::WorkerLives)
        } else if young {
            decision(Verdict::Starting, Basis::NoHeartbeatYet)
        } else {
            decision(Verdict::Unknown, Basis::NothingDecides)
        };
    }
    let stale_basis = match &ev.heartbeat {
        Heartbeat::Missing | Heartbeat::BeforeRow(_) | Heartbeat::Unusable(_) if young => {
            return decision(Verdict::Starting, Basis::NoHeartbeatYet);
        }
        Heartbeat::Age(a) if *a <= t.stale_after => {
            return decision(Verdict::Alive, Basis::HeartbeatFresh);
        }
        // Evidence that cannot be used proves nothing, and nothing conclusive decided.
        Heartbeat::Unusable(why) => {
            return decision(Verdict::Unknown, Basis::HeartbeatUnusable(why.clone()));
        }
        Heartbeat::Missing | Heartbeat::BeforeRow(_) => Basis::HeartbeatMissing,
        Heartbeat::Age(_) | Heartbeat::Unreadable(_) | Heartbeat::NotConfigured => {
            Basis::HeartbeatStale
        }
    };
    if life.lock.is_some() {
        decision(Verdict::Hung, Basis::StaleButLockHeld)
    } else if life.named.is_some() {
        decision(Verdict::Hung, Basis::StaleButNamedLockHeld)
    } else if life.owner_alive() {
        decision(Verdict::Hung, Basis::StaleButOwnerAlive)
    } else if matches!(ev.lock, Lock::Untrusted(_)) {
        // The job is expected to hold this lock, and a free one here proves nothing: the
        // worker may be hung on the inode someone swapped away. Never dead on silence.
        decision(Verdict::Unknown, Basis::StaleLockUntrusted)
    } else {
        decision(Verdict::Dead, stale_basis)
    }
}

/// A contradiction ([`Basis::Contradicted`]) first seen `for_s` seconds ago (by the state
/// the caller keeps): once the row's own heartbeat has stayed fresh for `stale_after`
/// beside the death signal, something alive beats for this row, and a person decides
/// (`unknown`, both named). Any other decision is returned as it is.
pub fn persisting(d: Decision, for_s: u64, t: Thresholds) -> Decision {
    match d.basis {
        Basis::Contradicted(sig) if for_s >= t.stale_after => {
            decision(Verdict::Unknown, Basis::ContradictionPersists(sig))
        }
        _ => d,
    }
}

/// What a row's lock would be if a try-lock confirmed what `/proc/locks` shows: the
/// evidence a real run acts on when it confirms ([`Lock::Unconfirmed`] becomes
/// [`Lock::Free`]). The caller tries the lock only when this evidence would have the row
/// written, so that jobs in normal operation are never disturbed.
pub fn as_if_confirmed(ev: &Evidence) -> Option<Evidence> {
    (ev.lock == Lock::Unconfirmed).then(|| ev.clone().with_lock(Lock::Free))
}

/// Another host's row: left to that host, and reported for a person only when the owning
/// host may be gone for good (past `max_age`, or a heartbeat column silent beyond it).
/// `heartbeat` is the row's heartbeat column alone: the owner's files are not looked at.
fn remote(host: &str, total: Option<u64>, heartbeat: &Heartbeat, t: Thresholds) -> Decision {
    let host = host.to_string();
    if total.is_some_and(|a| a > t.max_age) {
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
    /// or by a person (`selfheal resolve --as running`). Never a plan of [`plan`]. Said and
    /// journaled as `recovered` (docs/design.md#person).
    #[serde(rename = "recovered")]
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
            Action::Unpark => "recovered",
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
    /// A death signal met the row's own fresh heartbeat ([`Basis::Contradicted`]): waits
    /// quietly, not reported as needing a person.
    Contradicted,
    /// Not one running row of the watch has a heartbeat while one of them is past
    /// `stale_after`: a template that matches no file looks exactly like every job dying at
    /// once. Holds the verdicts drawn from the heartbeat alone.
    NoHeartbeat,
    /// More than half of the watch's rows (and at least 3) are past `max_age` at once: a
    /// wrong clock or time zone makes every row look ancient. Holds the overtime actions.
    MassOvertime,
    /// Not one running row of the watch holds its `db_lock` name, no real run has seen one
    /// held under this very template, and several rows would die on a free named lock
    /// alone: a template that names no lock the application takes looks exactly like
    /// every job dying at once ([`no_named_lock`]). Holds those deaths.
    NoNamedLock,
    /// A person put the row back to running (`selfheal resolve --as running`) for this very
    /// verdict and basis, and the evidence has not changed since: not parked again, not
    /// reported as needing a person.
    Person,
}

impl Hold {
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Confirming => "confirming",
            Hold::Breaker => "breaker",
            Hold::ClockSkew => "clock_skew",
            Hold::Contradicted => "contradicted",
            Hold::NoHeartbeat => "no_heartbeat",
            Hold::MassOvertime => "mass_overtime",
            Hold::NoNamedLock => "no_named_lock",
            Hold::Person => "person",
        }
    }

    /// True when this hold, on a watch as a whole, holds back the action a row was
    /// judged for: the breaker and the clocks anything not conclusive; no heartbeat at all
    /// the verdicts drawn from the heartbeat alone; a mass overtime the overtimes; no named
    /// lock held the deaths on a free named lock — the one conclusive basis a whole-watch
    /// hold is about, since a wrong template makes it true of every row at once.
    pub fn applies_to(self, d: &Decision) -> bool {
        match self {
            Hold::Breaker | Hold::ClockSkew => !d.conclusive(),
            Hold::NoHeartbeat => d.inferred(),
            Hold::MassOvertime => d.verdict == Verdict::Overtime,
            Hold::NoNamedLock => d.basis == Basis::NamedLockFree,
            Hold::Confirming | Hold::Contradicted | Hold::Person => false,
        }
    }

    /// Held rows are reported for a person, but for those still waiting on their own:
    /// an unconfirmed inferred verdict, a contradiction that may resolve itself.
    pub fn needs_a_person(self) -> bool {
        !matches!(self, Hold::Confirming | Hold::Contradicted | Hold::Person)
    }

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
            Hold::Contradicted => {
                "contradicted: a death signal met the row's own fresh heartbeat; it acts \
                 once the heartbeat is stale, and goes to a person if the heartbeat stays \
                 fresh for stale_after"
            }
            Hold::NoHeartbeat => {
                "held back: not one running row of this watch has a heartbeat (is \
                 heartbeat_file right?); only conclusive evidence is acted on until a row \
                 beats (--force overrides)"
            }
            Hold::MassOvertime => {
                "held back: most rows of this watch are past max_age at once, which is far \
                 more often a clock or time-zone fault (--force overrides)"
            }
            Hold::NoNamedLock => {
                "held back: no job of this watch holds its db_lock name, nor has a run seen \
                 one held under this template (does db_lock match the names the application \
                 takes?); a free named lock acts once a run sees one held (--force overrides)"
            }
            Hold::Person => {
                "a person's decision holds the row: it was put back to running (selfheal \
                 resolve --as running) for this very reason, and is judged again once its \
                 heartbeat goes stale again or another max_age has passed"
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

/// Applies a hold on the watch as a whole to a plan: what the hold is about
/// ([`Hold::applies_to`]) is left alone and reported instead.
pub fn hold(plan: Plan, d: &Decision, why: Hold) -> Plan {
    if plan.writes() && why.applies_to(d) {
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

/// Holds a row a person put back to running, for the reason they overruled
/// ([`Hold::Person`]): action `none`, no person needed.
pub fn hold_by_person() -> Plan {
    Plan {
        action: Action::None,
        target: None,
        attention: false,
        hold: Some(Hold::Person),
    }
}

/// Holds a contradiction ([`Basis::Contradicted`]) quietly: action `none`, no person needed
/// yet (no mail, exit 0). Anything else is returned as it is.
pub fn hold_contradiction(plan: Plan, d: &Decision) -> Plan {
    if d.contradicted() {
        Plan {
            action: Action::None,
            target: None,
            attention: false,
            hold: Some(Hold::Contradicted),
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

/// Holds an inferred verdict until it is confirmed (docs/design.md#confirmation): shown as judged, action
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

/// The breaker of docs/design.md#writes: trips when more than half of a watch's running rows, and at
/// least 3, would be marked dead on heartbeat staleness alone.
pub fn breaker_trips(inferred_deaths: usize, running_rows: usize) -> bool {
    inferred_deaths >= 3 && inferred_deaths * 2 > running_rows
}

/// True for a plan the breaker counts: an inferred death ([`Decision::inferred_death`])
/// that this run would write.
pub fn inferred_death(d: &Decision, p: &Plan) -> bool {
    d.inferred_death() && p.writes()
}

/// The mass-overtime hold of docs/design.md#whole-watch-holds: like the breaker, more than half of a watch's
/// running rows, and at least 3, would be written as overtime in one run.
pub fn mass_overtime(overtime_writes: usize, running_rows: usize) -> bool {
    breaker_trips(overtime_writes, running_rows)
}

/// The no-heartbeat hold of docs/design.md#whole-watch-holds: the watch has running rows, not one of them has a
/// heartbeat, and at least one is past `stale_after` (whatever the row count).
pub fn no_heartbeat(rows: usize, rows_beating: usize, rows_past_stale_after: usize) -> bool {
    rows > 0 && rows_beating == 0 && rows_past_stale_after > 0
}

/// Deaths on a free named lock the no-named-lock hold lets through however its template
/// stands: fewer than this is one job that died, today's behaviour.
pub const NAMED_LOCK_FREE_DEATHS: usize = 2;

/// The no-named-lock hold of docs/design.md#no-named-lock: a free `db_lock` name is a fact
/// about now only if the name is the one the job takes, and a template that names no lock
/// the application takes makes every name free. So deaths on a free named lock alone
/// (`named_free_deaths`: that a run would write) are held when there are at least
/// [`NAMED_LOCK_FREE_DEATHS`] of them, not one running row of the watch holds its name now
/// (`rows_held`), and the template is not `proven` (no real run saw one of its names held
/// lately). Not "more than half": rows too young to judge, or alive by their heartbeat,
/// would otherwise let a wrong template kill the rest.
pub fn no_named_lock(named_free_deaths: usize, rows_held: usize, proven: bool) -> bool {
    !proven && rows_held == 0 && named_free_deaths >= NAMED_LOCK_FREE_DEATHS
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_named;
