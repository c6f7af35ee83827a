//! The sources of evidence about a running row, one per file: the row's times
//! ([`times`]), its heartbeat — file and column — ([`heartbeat`]), the job's kernel lock
//! ([`lock`]), the owner pid ([`owner`]). Each is a [`Source`]: what it reads, and how it is
//! shown (its `--explain` item, its fields of the JSON row and the journal entry, its words
//! in the row message). [`crate::evidence`] gathers, renders and words a row by looping
//! over them; what the evidence proves is [`crate::decide`]'s alone.
//!
//! Every probe only looks: it never creates, truncates, touches or deletes a file, and it
//! takes no lock when `/proc/locks` can answer. Unreadable evidence is reported as such,
//! never as "missing" or "free". Another host's row is read from the database alone: its
//! files, locks and pids are that host's ([`Source::read_now`] is not asked).
//!
//! # A new kind of evidence
//!
//! Say, a pid file whose pid lives. The compiler points at the places marked (c) once the
//! first steps are made; the others are this list's to remember.
//! 1. The watch key that names it: its entry in `config/keys.rs` (`WATCH_KEYS`: name, kind,
//!    need, flag, help), its field of `Watch` and the line that reads it
//!    (`config/watch.rs`), a sample in `config/tests.rs` (`samples`); in `man/selfheal.1`
//!    (CONFIGURATION `[[watch]]`, where `tests/docs.rs` looks for it, and its JSON fields
//!    under OPTIONS, `check`'s `--format json`) and `packaging/selfheal.toml` (a commented
//!    line, checked too).
//! 2. `decide/evidence.rs`: its state (an enum with `NotConfigured`, and `Unreadable` where
//!    reading can fail), its field of `Evidence`, set in `Evidence::new` (c), and a `with_*`
//!    step. If it can say the worker lives: its field of `Life`, set in `Evidence::life`, and
//!    its place in each rule that weighs the signs — `Life::proven` (the verdicts),
//!    `for_a_person` (`resolve`'s refusal), `back_to_running` (the un-park) — with its
//!    `Sign` (c: `Sign::describe`; `evidence::sign_words`). If it can prove that an owner
//!    pid started long after the row is the row's worker: a `WorkerProof` in `decide.rs`
//!    (c: `describe`), set on `Owner::Reused`'s `proof` by its `read_now` (placed in
//!    [`READ`] after the proofs it outranks, as the lock's comes after the heartbeat's), and
//!    its words in the owner's `--explain` aside (c: `OwnerSource::render`).
//! 3. `decide.rs`: what it proves, in `decide()`'s numbered steps: unknown when unreadable
//!    (step 1); a death signal (`Signal` (c: `describe`, `setting`, `basis`) and
//!    `death_signal`); `hung` rather than `dead` where it says the worker lives
//!    (`judge_by_age_and_heartbeat`). The `Basis` variants that name it (c: `describe`),
//!    and `Decision::conclusive` for a proof of death. `decide/tests.rs`: its named cases,
//!    and its states in the exhaustive sweep.
//! 4. `probe/NAME.rs`: its probe and its [`Source`] — `read_row` (columns of the row
//!    query) or `read_now` (a fact about now: read again just before a write), `render`
//!    (c: required; its [`Item`], and its fields of [`Record`] in `probe/shown.rs`),
//!    `words`, `deciding` and `widest`.
//! 5. Here: `pub mod NAME`, and the source in [`READ`] (after the sources it reads from)
//!    and in [`SHOWN`]; a table read once for many rows (as `/proc/locks` is) in
//!    [`Snapshot`]. One the database server answers (as the named locks of a page are)
//!    is asked through the store (`crate::evidence::with_named`) wherever rows are judged:
//!    the sweep's pages, the second pass, the re-read before a write, the un-park,
//!    `resolve`, `show` and `doctor`. A source only some watches can have says so in
//!    [`Source::applies`].
//! 6. `evidence.rs`: the words of its `Basis` variants (c: `decision_words`).
//! 7. `tests/check/`: what it proves end to end, with the real binary and real processes
//!    and files (`liveness.rs`, `evidence.rs`).
//!
//! Evidence from a file on this host adds doctor's look at it: its directory as the user
//! selfheal runs as (`doctor/files.rs`, called per watch from `doctor/mod.rs`), and its key
//! among the host's files of a watch that says neither `owner_column` nor `host`
//! (`doctor/hosts.rs`, `host_local_finding`). Evidence from a column of the row query adds
//! its field of `store::RunningRow` (`store/mod.rs`), the column in the row query
//! (`store/sql.rs`, `rows_sql`) and its decoding, written once for every driver
//! (`store/table.rs`, `each_row`), and, where its change must stop a write, its match in
//! the compare-and-set (`store/sql.rs`, `cas_sql`).

use std::cell::OnceCell;
use std::time::SystemTime;

use crate::clock::Clocks;
use crate::config::Watch;
use crate::decide::{Basis, Decision, Evidence, Thresholds, Verdict};
use crate::host::Host;
use crate::store::RunningRow;

pub mod heartbeat;
pub mod lock;
pub mod named;
pub mod owner;
pub mod shown;
pub mod times;

pub use heartbeat::file_heartbeat;
pub use lock::{LockTable, probe_lock};
pub use owner::probe_owner;
pub use shown::{Human, Item, LockHolder, Record, Rendered, Value};

/// One kind of evidence about a running row: what it reads into [`Evidence`], and how it
/// is shown. Each method touches its own part of the evidence and of the rendering only.
pub trait Source: Sync {
    /// Reads what the row itself holds: columns of the row query, on the database's clock.
    /// Once per row read; a re-read before a write keeps it (the compare-and-set matches
    /// the row as read).
    fn read_row(&self, _at: &Reading<'_>, _e: &mut Evidence) {}

    /// Reads what is true now on this host (files, `/proc`, the kernel's locks), for a
    /// row of this host only: when the row is judged, and again just before it is
    /// written ([`crate::evidence::read_again`]). Sees what the sources before it in
    /// [`READ`] read.
    fn read_now(&self, _at: &Reading<'_>, _e: &mut Evidence) {}

    /// Its item of `--explain`, its fields of the [`Record`], and anything else it shows.
    fn render(&self, e: &Evidence, out: &mut Rendered);

    /// Its words among the figures of the row message, where the words of the decision
    /// `d` do not name it already.
    fn words(&self, _e: &Evidence, _d: &Decision, _out: &mut Vec<String>) {}

    /// The decisions it can bring about whose row message can be the longest: each is
    /// written with every source at its widest ([`Source::widest`]) to find the longest
    /// message a watch can write.
    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[]
    }

    /// Whether watch `w` can have this evidence at all (what its [`Source::deciding`]
    /// decisions count for); every watch, unless a source says otherwise.
    fn applies(&self, _w: &Watch) -> bool {
        true
    }

    /// Its evidence at its widest beside a decision on `basis` (every figure large, every
    /// pid seven digits), as watch `w` can have it.
    fn widest(&self, _w: &Watch, _basis: &Basis, _t: Thresholds, _e: &mut Evidence) {}
}

/// Every source, in the order they are read: the row's times first (every age rests on
/// them), then the owner (whose row it is, and which pid is its worker), then what is
/// judged against the owner (a heartbeat file touched since its process started, a lock
/// it holds).
pub static READ: [&dyn Source; 5] = [
    &times::TimesSource,
    &owner::OwnerSource,
    &heartbeat::HeartbeatSource,
    &lock::LockSource,
    &named::NamedLockSource,
];

/// Every source, in the order they are shown: `--explain` (`running 47m, heartbeat 47m
/// ago, lock free, owner none`), the record, the row message's figures.
pub static SHOWN: [&dyn Source; 5] = [
    &times::TimesSource,
    &heartbeat::HeartbeatSource,
    &lock::LockSource,
    &named::NamedLockSource,
    &owner::OwnerSource,
];

/// A pid at its widest, for [`Source::widest`]: seven digits (above the default
/// `pid_max`).
pub const WIDEST_PID: u32 = 4_194_304;

/// A duration at its widest for these thresholds, for [`Source::widest`].
pub fn widest_secs(t: Thresholds) -> u64 {
    t.max_age.saturating_mul(100)
}

/// What the host's shared tables say now, read once for many rows (a page of a sweep, a
/// group of writes, one row of `show` or `resolve`): `/proc/locks`, when the watch names
/// a lock file (`None` also where it cannot be read: the lock probe then tries the lock);
/// what the database server says of the page's named locks, when the watch names
/// `db_lock`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub locks: Option<LockTable>,
    pub named: Option<named::NamedTable>,
}

impl Snapshot {
    /// Reads what watch `w`'s sources look up on this host. A watch with `db_lock` asks
    /// the server too (`crate::evidence::with_named`).
    pub fn read(w: &Watch) -> Snapshot {
        Snapshot {
            locks: w.lock_file.as_ref().and_then(|_| LockTable::read()),
            named: None,
        }
    }
}

/// What the evidence of every row of one sweep is read against.
#[derive(Debug, Clone, Copy)]
pub struct Scene<'a> {
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// The host clock, for file mtimes.
    pub host_now: SystemTime,
    pub snapshot: &'a Snapshot,
    /// How many running rows of the watch belong to this host: a heartbeat file without
    /// `{id}` is the row's own only when no other of them shares it.
    pub local_rows: usize,
}

impl<'a> Scene<'a> {
    /// The scene of one row judged outside a sweep (an un-park, a person's `resolve` or
    /// `show`), now: the other running rows are not counted, so a heartbeat file other
    /// rows may share is never taken for the row's own.
    pub fn of_one_row(clocks: &'a Clocks, host: &'a Host, snapshot: &'a Snapshot) -> Self {
        Scene {
            clocks,
            host,
            host_now: SystemTime::now(),
            snapshot,
            local_rows: usize::MAX,
        }
    }
}

/// One reading of one row's evidence: the watch, the row, the scene.
pub struct Reading<'a> {
    pub w: &'a Watch,
    pub row: &'a RunningRow,
    pub scene: &'a Scene<'a>,
    /// The row's id as text, for the path templates (made once, when first asked).
    id: OnceCell<String>,
}

impl<'a> Reading<'a> {
    pub fn new(w: &'a Watch, row: &'a RunningRow, scene: &'a Scene<'a>) -> Self {
        Reading {
            w,
            row,
            scene,
            id: OnceCell::new(),
        }
    }

    /// The row's id as its path templates' `{id}` takes it.
    pub fn id(&self) -> &str {
        self.id.get_or_init(|| self.row.id.to_string())
    }
}
