//! The evidence [`crate::decide::decide`] takes about one running row: one state per
//! source ([`Heartbeat`], [`Lock`], [`Owner`], the row's times), gathered by the sources of
//! [`crate::probe`]; built by hand (tests, the widest row message) through
//! [`Evidence::new`] and its `with_*` steps. [`Evidence::life`] is what of it says the
//! worker lives, sign by sign, for every rule that asks (docs/design.md#life-beats-inference, "Life beats inference").
//! Pure: no I/O.

use crate::holder_line::HolderLine;
pub use crate::holder_line::NamedHolder;

use super::{Thresholds, WorkerProof};

/// Heartbeat evidence: the freshest of the file mtime (host clock) and the column (database
/// clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heartbeat {
    /// The watch names no heartbeat (a `db_lock` or `lock_file` watch): judged by its
    /// locks, its owner and the age cap (`docs/design.md#named-lock`).
    NotConfigured,
    /// Seconds since the last beat.
    Age(u64),
    /// No beat at all (no file, or the column is NULL).
    Missing,
    /// The last beat (seconds ago) is older than the row's own start, beyond the clock
    /// tolerance: an earlier row's with the same id (ids reused after a `TRUNCATE` or an
    /// auto-increment reset). Counts as [`Heartbeat::Missing`].
    BeforeRow(u64),
    /// The file's directory does not exist or cannot be searched by the running user (the
    /// path, and why): unusable evidence, like an absent lock file — neutral, never
    /// "missing" (a typo in `heartbeat_file` must never reclaim live jobs).
    Unusable(String),
    /// Could not be read; never taken as `Missing` (EACCES on the file is not ENOENT).
    Unreadable(String),
}

impl Heartbeat {
    /// A beat of this row was seen (fresh or stale): anything but missing, an earlier
    /// row's, unusable or unreadable.
    pub fn beats(&self) -> bool {
        matches!(self, Heartbeat::Age(_))
    }
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
    /// The file exists and nobody was seen holding it, but it lies in a directory that
    /// users other than root, the running user and the file's owner can write, without the
    /// sticky bit: anyone there could have replaced the inode the job holds with a new,
    /// unlocked file (who can write it, in words). Neutral, never conclusive (docs/design.md#verdicts).
    Untrusted(String),
    /// The file does not exist (neutral: proves nothing either way).
    Absent,
    Unreadable(String),
}

/// The job's named database lock (`db_lock`, `docs/design.md#named-lock`): the
/// user-level lock its templates name for this row, as the server says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedLock {
    /// The watch names no `db_lock`.
    NotConfigured,
    /// A session holds one of the row's names: the worker lives. Only ever the row's own:
    /// a name several running rows share is evidence for the youngest of them alone.
    Held { name: String, holder: NamedHolder },
    /// Nobody holds any of the row's names: conclusive once the row is older than
    /// `stale_after` (a job takes its lock before it marks its row running).
    Free,
    /// A younger running row shares the name: whoever holds it is that row's worker, and
    /// a free name says nothing of this one. Neutral.
    Shared,
    /// A name could not be made (longer than the server's 64 characters, a column it
    /// reads is NULL): unusable evidence, neutral.
    Unusable(String),
    /// The server could not be asked.
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
    /// The pid runs, but its process started `after_s` seconds after the row, more than
    /// `stale_after` later: a recycled pid, or a worker whose row's times are wrong (a
    /// clock, a session time zone). Comparing the database's time with the host's process
    /// start is an inference, never proof (docs/design.md#proof-means-proof, "Proof means proof").
    Reused {
        pid: u32,
        after_s: u64,
        /// What the host shows of this process being the row's worker, found where the
        /// row was judged: the row's own lock held by one of its descendants (a shell
        /// worker's `flock` child), or the row's own heartbeat file touched after it
        /// started (both on the host clock: a recycled pid never touches the row's file).
        proof: Option<WorkerProof>,
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
    /// implausible (and when its times lie in the future: [`Evidence::ahead`]).
    pub total_age: Result<u64, String>,
    /// The row's start, or its heartbeat column, lies in the future beyond the clock
    /// tolerance: its times cannot be trusted, and it is judged by the facts about now
    /// alone (docs/design.md#proof-means-proof, "Proof means proof").
    pub ahead: Option<Ahead>,
    pub heartbeat: Heartbeat,
    /// What the heartbeat column alone says (`None`: the watch has none), as read with the
    /// row: a re-read just before a write weighs a file's new beat against it without
    /// reading the row again. The decision reads [`Evidence::heartbeat`].
    pub heartbeat_column: Option<Heartbeat>,
    /// The heartbeat is the row's own: its heartbeat column, or a file no other running
    /// row shares. Only the row's own beat can contradict a death signal.
    pub heartbeat_own: bool,
    pub lock: Lock,
    /// A held lock is the row's own: its `lock_file` template has `{id}`, or the holder
    /// (the pid `/proc/locks` gives, or the `HOST:PID` of the file's holder line) is the
    /// row's owner. A per-kind lock held by the next run of the same job proves nothing
    /// about an older row.
    pub lock_own: bool,
    /// Who the lock file names as its holder, when the lock is held and its first line is
    /// a `HOST:PID START` holder line (as `selfheal run` and the PHP helper write). It names
    /// the holder for a person; whether it is the row's owner is [`Evidence::lock_own`].
    pub lock_holder: Option<HolderLine>,
    pub owner: Owner,
    /// The job's named database lock (`db_lock`).
    pub named: NamedLock,
}

/// A row whose times lie in the future (a clock, or an application's session time zone
/// writing DATETIME values): how far, and how long selfheal itself has seen it running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    /// Seconds beyond the database's now of the row's start (or its heartbeat column).
    pub by_s: u64,
    /// Seconds since selfheal first saw this row (id and start value) running, by the host
    /// clock: what stands in for the row's age in "older than `stale_after`" (0 the first
    /// time, and where no state is kept).
    pub seen_s: u64,
}

impl Owner {
    /// The pid the owner column names on this host, whatever became of it (alive, gone,
    /// started after the row, not visible from here).
    pub fn pid(&self) -> Option<u32> {
        match self {
            Owner::Alive { pid }
            | Owner::Dead { pid }
            | Owner::Reused { pid, .. }
            | Owner::NotVisible { pid } => Some(*pid),
            _ => None,
        }
    }
}

impl Evidence {
    /// A row of this age (seconds on the database clock, or why it has none) of which
    /// nothing else is known: no beat (missing, and the row's own), no lock file, no owner
    /// column, its times not ahead. The `with_*` steps add the rest.
    pub fn new(total_age: Result<u64, String>) -> Evidence {
        Evidence {
            total_age,
            ahead: None,
            heartbeat: Heartbeat::Missing,
            heartbeat_column: None,
            heartbeat_own: true,
            lock: Lock::NotConfigured,
            lock_own: false,
            lock_holder: None,
            owner: Owner::NotConfigured,
            named: NamedLock::NotConfigured,
        }
    }

    /// [`Evidence::new`] for a row `total_age_s` seconds old.
    pub fn aged(total_age_s: u64) -> Evidence {
        Evidence::new(Ok(total_age_s))
    }

    #[must_use]
    pub fn with_ahead(self, ahead: Option<Ahead>) -> Evidence {
        Evidence { ahead, ..self }
    }

    #[must_use]
    pub fn with_heartbeat(self, heartbeat: Heartbeat) -> Evidence {
        Evidence { heartbeat, ..self }
    }

    #[must_use]
    pub fn with_heartbeat_own(self, heartbeat_own: bool) -> Evidence {
        Evidence {
            heartbeat_own,
            ..self
        }
    }

    #[must_use]
    pub fn with_lock(self, lock: Lock) -> Evidence {
        Evidence { lock, ..self }
    }

    #[must_use]
    pub fn with_lock_own(self, lock_own: bool) -> Evidence {
        Evidence { lock_own, ..self }
    }

    #[must_use]
    pub fn with_lock_holder(self, holder: Option<HolderLine>) -> Evidence {
        Evidence {
            lock_holder: holder,
            ..self
        }
    }

    #[must_use]
    pub fn with_named(self, named: NamedLock) -> Evidence {
        Evidence { named, ..self }
    }

    #[must_use]
    pub fn with_owner(self, owner: Owner) -> Evidence {
        Evidence { owner, ..self }
    }

    /// True for another host's row (its owner names another host): nothing of this host
    /// is its evidence.
    pub fn is_remote(&self) -> bool {
        matches!(self.owner, Owner::NotLocal { .. })
    }

    /// What of this evidence says the row's worker lives now, sign by sign (`t`: whether
    /// its own beat is fresh). Every rule that asks reads it here and weighs it its own way.
    pub fn life(&self, t: Thresholds) -> Life<'_> {
        let owner = match self.owner {
            Owner::Alive { pid } => Some(Running { pid, later_s: None }),
            Owner::Reused { pid, after_s, .. } => Some(Running {
                pid,
                later_s: Some(after_s),
            }),
            _ => None,
        };
        let own_beat = match self.heartbeat {
            Heartbeat::Age(a) if self.heartbeat_own && a <= t.stale_after => Some(a),
            _ => None,
        };
        let lock = match self.lock {
            Lock::Held { pid } => {
                let holder = self.lock_holder.as_ref();
                let others = self
                    .owner
                    .pid()
                    .is_some_and(|o| pid != Some(o) && holder.is_none_or(|h| h.pid != o));
                Some(HeldLock {
                    pid,
                    holder,
                    own: self.lock_own,
                    another_runs: others,
                })
            }
            _ => None,
        };
        let named = match &self.named {
            NamedLock::Held { holder, .. } => Some(holder),
            _ => None,
        };
        Life {
            owner,
            own_beat,
            lock,
            named,
        }
    }
}

/// What in one row's evidence says its worker lives now (docs/design.md#life-beats-inference, "Life beats
/// inference"), each sign on its own. Three rules weigh them, each its own way, all here:
/// the verdicts ([`Life::proven`], and `decide`'s own-lock and own-beat steps), a
/// person's `resolve` ([`Life::for_a_person`]) and the un-park step
/// ([`Life::back_to_running`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life<'e> {
    /// The owner pid runs on this host.
    pub owner: Option<Running>,
    /// Seconds since the row's own heartbeat beat, when that is within `stale_after`.
    pub own_beat: Option<u64>,
    /// A process holds the job's lock.
    pub lock: Option<HeldLock<'e>>,
    /// A session holds the row's named lock (always the row's own).
    pub named: Option<&'e NamedHolder>,
}

/// An owner pid that runs on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    /// Its process started this long after the row, beyond `stale_after`
    /// ([`Owner::Reused`]): the row's worker with wrong times, or a recycled pid — which
    /// of the two is an inference. `None`: it started in time to be the row's worker.
    pub later_s: Option<u64>,
}

/// The job's lock, held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLock<'e> {
    /// The holder as the kernel gives it (`None`: a try-lock failed, or an OFD lock).
    pub pid: Option<u32>,
    /// Who the lock file names as its holder ([`Evidence::lock_holder`]).
    pub holder: Option<&'e HolderLine>,
    /// The row's own lock ([`Evidence::lock_own`]).
    pub own: bool,
    /// The owner column names a pid on this host that neither the kernel nor the lock
    /// file gives as the holder: a per-kind lock another run of the job holds.
    pub another_runs: bool,
}

/// One sign of life, as a rule picked it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign<'e> {
    Owner(Running),
    OwnBeat(u64),
    Lock(HeldLock<'e>),
    NamedLock(&'e NamedHolder),
}

impl<'e> Life<'e> {
    /// The owner pid is alive (started in time to be the row's worker).
    pub fn owner_alive(&self) -> bool {
        matches!(self.owner, Some(Running { later_s: None, .. }))
    }

    /// The row's own lock is held.
    pub fn own_lock(&self) -> Option<HeldLock<'e>> {
        self.lock.filter(|l| l.own)
    }

    /// The row's own lock file or its named lock is held.
    pub fn own_lock_held(&self) -> bool {
        self.own_lock().is_some() || self.named.is_some()
    }

    /// The held lock's holder is `pid`: the pid the kernel gives, or the one the lock file
    /// names.
    pub fn lock_held_by(&self, pid: u32) -> bool {
        self.lock
            .is_some_and(|l| l.pid == Some(pid) || l.holder.is_some_and(|h| h.pid == pid))
    }

    /// The worker provably lives, as the verdicts weigh it: the job's lock is held (by
    /// anyone: a held lock is never free), or the owner pid is alive. A stale heartbeat is
    /// then `hung`, never `dead`, and an `overtime` is never marked dead.
    pub fn proven(&self) -> bool {
        self.lock.is_some() || self.named.is_some() || self.owner_alive()
    }

    /// The first sign that refuses a person's `resolve --as dead|retry` (docs/design.md#resolve), where
    /// erring towards "alive" costs a look and the other way a second writer: the owner
    /// pid runs (also one that started after the row: that it is another process is an
    /// inference), the row's own heartbeat is fresh, or the job's lock is held — unless
    /// the owner column names another pid than its holder (a later run's per-kind lock).
    pub fn for_a_person(&self) -> Option<Sign<'e>> {
        if let Some(o) = self.owner {
            return Some(Sign::Owner(o));
        }
        if let Some(a) = self.own_beat {
            return Some(Sign::OwnBeat(a));
        }
        if let Some(h) = self.named {
            return Some(Sign::NamedLock(h));
        }
        self.lock.filter(|l| !l.another_runs).map(Sign::Lock)
    }

    /// What puts a parked row back to running (the un-park step, docs/design.md#unpark): its own beat
    /// fresh, and its worker provably alive — the row's own lock held, or its owner pid
    /// alive.
    pub fn back_to_running(&self) -> Option<Sign<'e>> {
        self.own_beat?;
        if let Some(l) = self.own_lock() {
            return Some(Sign::Lock(l));
        }
        if let Some(h) = self.named {
            return Some(Sign::NamedLock(h));
        }
        self.owner.filter(|_| self.owner_alive()).map(Sign::Owner)
    }
}

impl Sign<'_> {
    /// In words for a person (why `resolve` refuses): `its owner pid 4242 is alive`, `its
    /// own heartbeat is fresh (5s ago)`, `the job's lock is held by pid 4242`.
    pub fn describe(&self) -> String {
        match self {
            Sign::Owner(Running { pid, later_s: None }) => format!("its owner pid {pid} is alive"),
            Sign::Owner(Running {
                pid,
                later_s: Some(after_s),
            }) => format!(
                "its owner pid {pid} is alive (it started {} after the row, which may be the \
                 row's times being wrong rather than another process)",
                crate::clock::human(*after_s)
            ),
            Sign::OwnBeat(a) => format!(
                "its own heartbeat is fresh ({} ago)",
                crate::clock::human(*a)
            ),
            Sign::Lock(l) => {
                let by = match (l.pid, l.holder) {
                    (_, Some(h)) => format!(" ({} since {})", h.named(), h.since_text()),
                    (Some(p), None) => format!(" by pid {p}"),
                    (None, None) => {
                        " (a try-lock failed; the holder is not visible from here)".into()
                    }
                };
                format!("the job's lock is held{by}")
            }
            Sign::NamedLock(h) => format!("the job's named lock is held by {}", h.describe()),
        }
    }
}
