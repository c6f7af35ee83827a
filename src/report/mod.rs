//! What a run found and did, row by row and in total, and the [`Reporter`] that renders
//! it: [`text`] (the one-line text for cron, the `--explain` walk-through) and [`json`]
//! (docs/design.md#output). Rendering writes to the `Write`rs it is given; library code never prints on
//! its own. Totals are counted once, per watch ([`WatchRun::count`]); a run's are their sum
//! ([`Summary::totals`]).

pub mod json;
pub mod text;

use crate::decide::{Action, Confirmation, Decision, Evidence, Hold, Plan, Thresholds, Verdict};
use crate::store::SqlValue;

pub use json::{JsonReporter, row_json, summary_json};
pub use text::TextReporter;

/// The form of what a command prints: lines for a person, or JSON for a program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Everything about one running row.
#[derive(Debug, Clone)]
pub struct RowReport {
    pub watch: String,
    pub id: SqlValue,
    /// The host that judged the row (this host's name).
    pub host: String,
    /// The host the row belongs to (see [`crate::evidence::owner_host`]).
    pub owner_host: Option<String>,
    pub evidence: Evidence,
    pub thresholds: Thresholds,
    pub decision: Decision,
    /// What a real run does (after the breaker and the clock check).
    pub plan: Plan,
    /// What happened: the planned action, `lost_race`, or `none` when the write was
    /// skipped or failed.
    pub action: Action,
    pub applied: bool,
    /// The message written to (or that would be written to) the row.
    pub reason: String,
    /// Anything else worth saying: a failed write, evidence that changed before the write.
    pub note: Option<String>,
    /// The status the row was set to, or would be.
    pub target: Option<String>,
    /// A real run removes the legacy lock file after marking the row, if it is then free
    /// (`release_lock = "if_free"`).
    pub release_planned: bool,
    /// What became of the legacy lock file (only after an applied change).
    pub lock_release: Option<Release>,
    /// The row's lock file as the lock probe looked at it (the watch's `lock_file` with
    /// the row's id), whether or not a release is planned.
    pub lock_file: Option<String>,
    /// How far an inferred verdict is confirmed (consecutive runs, and how many it takes);
    /// `None` for a verdict that is not inferred.
    pub confirmation: Option<Confirmation>,
    /// The cron text already told a person of this very problem (the same row, verdict
    /// and basis) less than `remind_every` ago: it leaves the row out this time. The exit
    /// status, the metrics and JSON count it all the same.
    pub already_told: bool,
    /// For a row that needs a person: the `selfheal resolve …` command that decides it
    /// ([`crate::person::resolve_command`]), said beside it in the cron text, `--explain`
    /// and JSON.
    pub resolve: Option<String>,
}

impl RowReport {
    pub fn attention(&self) -> bool {
        self.plan.attention
            || self
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("write failed"))
            || self
                .lock_release
                .as_ref()
                .is_some_and(Release::needs_a_person)
    }
}

/// Per-watch facts for the explain header and the JSON summary.
#[derive(Debug, Clone, Default)]
pub struct WatchInfo {
    pub name: String,
    pub table: String,
    /// The watch's `match`, as `col = "value"` pairs; empty without one.
    pub matches: Vec<String>,
    /// The host that judges the watch's rows (this host's name).
    pub host: String,
    pub stale_after_s: u64,
    pub max_age_s: u64,
    /// Why the watch was not checked, if it was not.
    pub skipped: Option<String>,
}

/// Row counts: of one watch ([`WatchRun::totals`]), or of a whole run ([`Summary::totals`],
/// their sum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub rows: usize,
    /// Rows changed (in a dry run: rows a real run would change).
    pub changed: usize,
    pub attention: usize,
    pub lost_race: usize,
    /// Legacy lock files removed (`release_lock = "if_free"`).
    pub locks_released: usize,
}

impl Totals {
    fn add(mut self, o: &Totals) -> Totals {
        self.rows += o.rows;
        self.changed += o.changed;
        self.attention += o.attention;
        self.lost_race += o.lost_race;
        self.locks_released += o.locks_released;
        self
    }
}

/// What one run did for one watch: the per-watch part of the summary, of `last-run.json`
/// and of the metrics file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchRun {
    pub name: String,
    /// Why the watch was not checked, if it was not.
    pub skipped: Option<String>,
    /// The watch belongs to another host (`host =`): none of this host's business, so the
    /// metrics leave it out.
    pub other_host: bool,
    pub totals: Totals,
    /// Running rows by verdict.
    pub verdicts: Vec<(Verdict, usize)>,
    /// Applied changes (and lost races) by action.
    pub actions: Vec<(Action, usize)>,
    /// Running rows by the host they belong to (`?` for an owner that is not one).
    pub owners: OwnerCounts,
    pub breaker_tripped: bool,
    /// The whole-watch holds that tripped this run (breaker, no heartbeat, mass overtime),
    /// held or overridden by `--force`.
    pub holds: Vec<Hold>,
    /// Rows whose action was held, by hold.
    pub held: Vec<(Hold, usize)>,
    pub duration: std::time::Duration,
    /// Rows parked in `manual_value` after this run (`None`: the watch has none, or was
    /// not checked): a backlog a person owes, counted every run; the run exits 1 while
    /// there is one.
    pub parked: Option<u64>,
    /// Consecutive real runs, this one included, that skipped the watch because its
    /// advisory lock was held elsewhere; 0 when it was checked.
    pub busy_runs: u64,
    /// Parked rows this run put back to running (in a dry run: would put back), their
    /// own heartbeat fresh again after a park as `hung` ([`Unparked`]).
    pub unparked: usize,
}

impl WatchRun {
    fn bump<K: PartialEq>(v: &mut Vec<(K, usize)>, k: K) {
        match v.iter_mut().find(|(x, _)| *x == k) {
            Some((_, n)) => *n += 1,
            None => v.push((k, 1)),
        }
    }

    /// False when the watch was skipped (another host's, or another run held its lock).
    pub fn checked(&self) -> bool {
        self.skipped.is_none()
    }

    /// Counts one reported row: the only place rows are counted.
    pub fn count(&mut self, r: &RowReport, dry_run: bool) {
        let t = &mut self.totals;
        t.rows += 1;
        Self::bump(&mut self.verdicts, r.decision.verdict);
        self.owners.count(r.owner_host.as_deref().unwrap_or("?"));
        if r.applied || r.action == Action::LostRace {
            Self::bump(&mut self.actions, r.action);
        }
        if let Some(h) = r.plan.hold {
            Self::bump(&mut self.held, h);
        }
        if r.applied || (dry_run && r.plan.writes()) {
            t.changed += 1;
        }
        if r.action == Action::LostRace {
            t.lost_race += 1;
        }
        if r.attention() {
            t.attention += 1;
        }
        if matches!(r.lock_release, Some(Release::Removed(_))) {
            t.locks_released += 1;
        }
    }

    pub fn verdict_count(&self, v: Verdict) -> usize {
        self.verdicts
            .iter()
            .find(|(x, _)| *x == v)
            .map_or(0, |(_, n)| *n)
    }

    pub fn action_count(&self, a: Action) -> usize {
        self.actions
            .iter()
            .find(|(x, _)| *x == a)
            .map_or(0, |(_, n)| *n)
    }
}

/// Running rows by the host they belong to: counted in a hash map, so a run costs the same
/// whatever the number of distinct hosts (containers with unique names, one per row), up
/// to [`OwnerCounts::COUNTED`] hosts in a run (rows of hosts beyond are summed: a million unique
/// names must not cost a million entries), and shown for the busiest
/// [`OwnerCounts::SHOWN`] hosts, the rest summed as `other` (docs/design.md#paging).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerCounts {
    hosts: std::collections::HashMap<String, usize>,
    /// Rows of hosts first seen after `cap` others.
    uncounted: usize,
    /// How many distinct hosts are counted one by one.
    cap: usize,
}

impl Default for OwnerCounts {
    fn default() -> OwnerCounts {
        OwnerCounts::counting(OwnerCounts::COUNTED)
    }
}

impl OwnerCounts {
    /// How many hosts the metrics and the summary name one by one.
    pub const SHOWN: usize = 20;
    /// How many distinct hosts a run counts one by one.
    pub const COUNTED: usize = 10_000;

    /// Counts that keep at most `cap` host names; rows of further hosts are summed.
    pub fn counting(cap: usize) -> OwnerCounts {
        OwnerCounts {
            hosts: std::collections::HashMap::new(),
            uncounted: 0,
            cap,
        }
    }

    /// Counts one row of `host` (a copy of the name only for a host not seen before).
    pub fn count(&mut self, host: &str) {
        let room = self.hosts.len() < self.cap;
        match self.hosts.get_mut(host) {
            Some(n) => *n += 1,
            None if room => {
                self.hosts.insert(host.to_string(), 1);
            }
            None => self.uncounted += 1,
        }
    }

    /// The busiest [`OwnerCounts::SHOWN`] hosts, most rows first (then by name), and the
    /// rest summed.
    pub fn busiest(&self) -> Busiest<'_> {
        let mut all: Vec<(&str, usize)> =
            self.hosts.iter().map(|(h, n)| (h.as_str(), *n)).collect();
        let by_rows = |a: &(&str, usize), b: &(&str, usize)| b.1.cmp(&a.1).then(a.0.cmp(b.0));
        if all.len() > Self::SHOWN {
            all.select_nth_unstable_by(Self::SHOWN - 1, by_rows);
        }
        let rest: Vec<(&str, usize)> = all.split_off(all.len().min(Self::SHOWN));
        all.sort_unstable_by(by_rows);
        let other = (!rest.is_empty() || self.uncounted > 0).then(|| Other {
            hosts: rest.len(),
            rows: rest.iter().map(|(_, n)| n).sum::<usize>() + self.uncounted,
            more_hosts: self.uncounted > 0,
        });
        Busiest { shown: all, other }
    }
}

/// The busiest owner hosts ([`OwnerCounts::busiest`]).
pub struct Busiest<'a> {
    /// By name, most rows first.
    pub shown: Vec<(&'a str, usize)>,
    /// The rest, summed, when there are any.
    pub other: Option<Other>,
}

/// The owner hosts not shown by name, summed.
pub struct Other {
    /// The hosts counted one by one among them.
    pub hosts: usize,
    pub rows: usize,
    /// Rows of further hosts are among `rows` ([`OwnerCounts::COUNTED`] were counted).
    pub more_hosts: bool,
}

impl<const N: usize> From<[(&str, usize); N]> for OwnerCounts {
    fn from(v: [(&str, usize); N]) -> OwnerCounts {
        OwnerCounts {
            hosts: v.into_iter().map(|(h, n)| (h.to_string(), n)).collect(),
            ..OwnerCounts::default()
        }
    }
}

/// The end of a run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub dry_run: bool,
    /// The host that ran the check.
    pub host: String,
    /// Database clock minus host clock, seconds (MySQL only).
    pub clock_skew_s: Option<i64>,
    pub clock_skew_exceeded: bool,
    pub breaker_tripped: Vec<String>,
    /// Watches another run was checking (advisory lock).
    pub busy_watches: Vec<String>,
    pub watches_checked: usize,
    pub warnings: Vec<String>,
    /// Per watch, in configuration order.
    pub per_watch: Vec<WatchRun>,
    /// Watches whose `max_age` is below 1.5× a recent run that ended well.
    pub max_age_too_low: Vec<crate::history::MaxAgeWarning>,
    /// `--log`: its target, and why it could not be reached this run, if it could not.
    pub log: Option<LogStatus>,
}

/// Whether `--log` reached its target this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStatus {
    /// `syslog` or `journald`.
    pub target: &'static str,
    /// Why the lines could not be sent ("/dev/log: No such file or directory").
    pub error: Option<String>,
}

impl Summary {
    /// The run's row counts: the sum of its watches'.
    pub fn totals(&self) -> Totals {
        self.per_watch
            .iter()
            .fold(Totals::default(), |sum, w| sum.add(&w.totals))
    }

    /// Rows parked in `manual_value` across the watches that have one.
    pub fn parked(&self) -> u64 {
        self.per_watch.iter().filter_map(|w| w.parked).sum()
    }
}

/// A watch's rows parked in `manual_value`: how many, and the first few with their age.
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    pub watch: String,
    /// The watch's `manual_value`.
    pub value: String,
    pub count: u64,
    /// The first rows by id, each with the seconds since it started (`None`: its start
    /// cannot be read). Listed in dry runs only (`--explain`): a real run counts.
    pub rows: Vec<(SqlValue, Option<u64>)>,
    /// The decisions `selfheal resolve --as` can make for a parked row of the watch
    /// (`dead|retry|running`: [`crate::person::choices`]).
    pub choices: String,
}

/// A row parked as `hung` whose own heartbeat is fresh again after the park, while its
/// worker provably lives and it is within `max_age` (docs/design.md#person): put back to
/// `running_value` by a real run, or what a dry run would do.
#[derive(Debug, Clone)]
pub struct Unparked {
    pub watch: String,
    pub id: SqlValue,
    /// `manual_value`, and `running_value`.
    pub from: String,
    pub to: String,
    /// `unpark`; `lost_race` when the row moved on before the write; `none` when the
    /// evidence changed before it (with a note).
    pub action: Action,
    pub applied: bool,
    /// When the journal says the row was parked (RFC 3339).
    pub parked_at: String,
    /// The evidence and verdict now.
    pub evidence: Evidence,
    pub decision: Decision,
    pub thresholds: Thresholds,
    /// The message written to (or that would be written to) the row.
    pub reason: String,
    pub note: Option<String>,
}

/// Renders a run. Text mode is silent unless something changed or needs a person.
pub trait Reporter {
    fn watch(&mut self, w: &WatchInfo);
    fn row(&mut self, r: &RowReport);
    fn warning(&mut self, msg: &str);
    /// A run-level warning the cron text already showed less than `remind_every` ago:
    /// every output but the cron text takes it as any warning.
    fn warning_already_told(&mut self, msg: &str) {
        self.warning(msg);
    }
    /// The rows a watch has parked in `manual_value` (after its rows).
    fn parked(&mut self, _p: &Parked) {}
    /// A parked row put back to running (or that a dry run would put back), after the
    /// watch's rows and before its parked rows.
    fn unparked(&mut self, _u: &Unparked) {}
    /// Whether this run has printed anything yet. A warning a run gives only when it
    /// prints anyway (a secret readable by every user) asks this, so that the silent cron
    /// run stays silent. JSON always prints.
    fn spoke(&self) -> bool {
        true
    }
    /// `--log`: its target and whether it could be reached so far this run; `None` for a
    /// reporter that does not log.
    fn log_status(&self) -> Option<LogStatus> {
        None
    }
    /// Says that `--log` cannot reach its target: said once, then per `remind_every`,
    /// even by a `--quiet` run, which leaves everything else to that log.
    fn log_failure(&mut self, msg: &str) {
        self.warning(msg);
    }
    fn finish(&mut self, s: &Summary);
}

/// What became of a job's lock file (`release_lock = "if_free"`, [`crate::check::release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Removed: the inode that was checked, and no other. The text says what was checked.
    Removed(String),
    /// There was no file to remove (none when the row was judged, or none any more).
    Absent,
    /// Left in place on purpose, and why (a held lock, a live pid, a replaced file).
    Kept(String),
    /// Could not be checked or removed (permission denied, a link on the way that is not
    /// trusted, an I/O error), and why.
    Failed(String),
}

impl Release {
    pub fn as_str(&self) -> &'static str {
        match self {
            Release::Removed(_) => "removed",
            Release::Absent => "absent",
            Release::Kept(_) => "kept",
            Release::Failed(_) => "failed",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            Release::Removed(d) | Release::Kept(d) | Release::Failed(d) => Some(d),
            Release::Absent => None,
        }
    }

    /// A file left behind blocks every later run of a legacy job: a person must look.
    pub fn needs_a_person(&self) -> bool {
        matches!(self, Release::Kept(_) | Release::Failed(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::Basis;

    #[test]
    fn owner_hosts_are_counted_up_to_a_bound_and_the_rest_summed() {
        let mut o = OwnerCounts::default();
        for _ in 0..3 {
            o.count("web1");
        }
        for i in 0..OwnerCounts::COUNTED + 500 {
            o.count(&format!("pod-{i}"));
        }
        assert_eq!(o.hosts.len(), OwnerCounts::COUNTED, "no more names kept");
        let b = o.busiest();
        assert_eq!(b.shown.len(), OwnerCounts::SHOWN);
        assert_eq!(b.shown[0], ("web1", 3));
        let other = b.other.expect("the rest");
        // Every row is counted once: the shown, the others counted by name, the rest.
        let shown: usize = b.shown.iter().map(|(_, n)| n).sum();
        assert_eq!(shown + other.rows, 3 + OwnerCounts::COUNTED + 500);
        assert_eq!(other.hosts, OwnerCounts::COUNTED - OwnerCounts::SHOWN);
        assert!(other.more_hosts);
        // Below the bound: exact, no "more".
        let small: OwnerCounts = [("a", 1), ("b", 2)].into();
        assert!(small.busiest().other.is_none());
    }

    fn report(action: Action, applied: bool, release: Option<Release>) -> RowReport {
        let writes = matches!(action, Action::MarkDead | Action::LostRace);
        RowReport {
            watch: "w".into(),
            id: SqlValue::Int(1),
            host: "web1".into(),
            owner_host: Some("web1".into()),
            evidence: Evidence::aged(600),
            thresholds: Thresholds {
                stale_after: 60,
                max_age: 3600,
            },
            decision: Decision::new(
                if writes {
                    Verdict::Dead
                } else {
                    Verdict::Alive
                },
                Basis::MaxAge,
            ),
            plan: Plan {
                action: if writes {
                    Action::MarkDead
                } else {
                    Action::None
                },
                target: writes.then(|| "error".to_string()),
                attention: false,
                hold: None,
            },
            action,
            applied,
            reason: String::new(),
            note: None,
            target: None,
            release_planned: release.is_some(),
            lock_release: release,
            lock_file: None,
            confirmation: None,
            already_told: false,
            resolve: None,
        }
    }

    #[test]
    fn a_runs_totals_are_the_sum_of_its_watches_counted_once() {
        let mut a = WatchRun::default();
        a.count(&report(Action::MarkDead, true, None), false);
        a.count(
            &report(Action::MarkDead, true, Some(Release::Removed("ok".into()))),
            false,
        );
        a.count(&report(Action::LostRace, false, None), false);
        a.count(&report(Action::None, false, None), false);
        let mut failed = report(Action::None, false, None);
        failed.note = Some("write failed: gone".into());
        a.count(&failed, false);
        // A dry run counts what a real run would change.
        let mut b = WatchRun::default();
        b.count(&report(Action::MarkDead, false, None), true);
        b.count(&report(Action::None, false, None), true);
        assert_eq!(
            a.totals,
            Totals {
                rows: 5,
                changed: 2,
                attention: 1,
                lost_race: 1,
                locks_released: 1
            }
        );
        assert_eq!(
            (
                a.action_count(Action::MarkDead),
                a.action_count(Action::LostRace)
            ),
            (2, 1)
        );
        assert_eq!(a.verdict_count(Verdict::Dead), 3);
        let s = Summary {
            per_watch: vec![a, b],
            ..Summary::default()
        };
        assert_eq!(
            s.totals(),
            Totals {
                rows: 7,
                changed: 3,
                attention: 1,
                lost_race: 1,
                locks_released: 1
            }
        );
    }
}
