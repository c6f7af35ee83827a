//! What a real run remembers for the next about trouble that lasts across runs and would
//! otherwise be silent, or said on every run (docs/design.md#output): since when, and for how many runs
//! in a row, each watch has been skipped because its advisory lock was held elsewhere (a
//! silent "busy" for ever is a watchdog that watches nothing: someone can squat the
//! predictable `GET_LOCK` name); and since when `--log` could not reach its target, and
//! when a run last said so (`--quiet --log syslog` on a host without `/dev/log` says it
//! once, then per `remind_every`, not on every run). It also keeps each watch's latest read
//! of its recent runs for the `max_age` check ([`super::recent`]), so that the rows are read
//! at most once per [`super::recent::FRESH_FOR_S`], not on every run.
//!
//! The state is `state_dir/run-state.json` ([`RunState`], a typed state file written
//! through [`crate::state::save_typed`], so through [`crate::fsafe`]), keyed by the
//! database as the reminders name it. Every field has a default: a file written by an
//! older or newer release reads (what it lacks starts over), and a damaged or unreadable
//! file is read as empty — a streak counted again from this run, a log failure said once
//! more, never a silent problem (and the recent runs read again). Written only when a run
//! changed what it holds; not flushed to disk when only the recent runs changed (losing
//! them costs a read).
//!
//! A stored time later than now (a run under a wrong clock) is no time at all: a streak
//! "since" then is counted from now, a log failure "told" then is told again.
//!
//! Dry runs and `--explain` may use a fresh read of the recent runs ([`Streaks::read_only`]),
//! and never write the file.
//!
//! I/O: [`Streaks::load`] and [`Streaks::read_only`] read the file, [`Streaks::save`]
//! replaces it; the rest is pure, with the current time passed in.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::history::RecentRuns;
use crate::state::{self, StateFile};

use super::recent::{self, Entry, Key};

/// `state_dir/run-state.json`.
pub const RUN_STATE: StateFile = StateFile {
    name: "run-state.json",
    opening: "opening run-state.json",
    reading: "reading run-state.json",
    writing: "writing run-state.json",
    creating: "creating a temporary file for run-state.json",
};

/// A watch skipped as busy in consecutive real runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    pub database: String,
    pub watch: String,
    /// The first run of the streak (unix seconds, host clock).
    pub since: i64,
    /// Real runs in a row that skipped it, this one included.
    pub runs: u64,
}

/// `--log` could not reach its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFailure {
    /// `syslog` or `journald`.
    pub target: String,
    /// Why, as the last run that failed said it.
    pub error: String,
    /// The first run that failed (unix seconds, host clock).
    pub since: i64,
    /// When a run last said so.
    pub told: i64,
}

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunState {
    pub version: u32,
    pub busy: Vec<Busy>,
    pub log_failure: Option<LogFailure>,
    /// Each watch's latest read of its recent runs (files of older releases have none).
    pub recent: Vec<Entry>,
}

/// The state of one real run.
#[derive(Debug)]
pub struct Streaks {
    database: String,
    now: i64,
    before: RunState,
    after: RunState,
}

impl Streaks {
    /// Reads `state_dir/run-state.json`; one that cannot be read is taken as empty, with a
    /// warning to say why.
    pub fn load(state_dir: &Path, database: String, now: i64) -> (Streaks, Option<String>) {
        let (before, warning) = match state::load_typed::<RunState>(state_dir, &RUN_STATE) {
            Ok(s) => (s.unwrap_or_default(), None),
            Err(e) => (
                RunState::default(),
                Some(format!(
                    "{}; busy watches are counted from this run",
                    e.full_message()
                )),
            ),
        };
        (Streaks::new(before, database, now), warning)
    }

    /// What a dry run may use of the file: the same as a real run, never written (the
    /// caller never saves it). One that cannot be read is taken as empty, silently: the
    /// real run says why.
    pub fn read_only(state_dir: &Path, database: String, now: i64) -> Streaks {
        let before = state::load_typed::<RunState>(state_dir, &RUN_STATE)
            .ok()
            .flatten()
            .unwrap_or_default();
        Streaks::new(before, database, now)
    }

    /// A run's streaks over `before` (for tests: no I/O). The recent runs kept are
    /// bounded ([`recent::bounded`]) from the start.
    pub fn new(before: RunState, database: String, now: i64) -> Streaks {
        let mut after = before.clone();
        after.recent = recent::bounded(after.recent, now);
        Streaks {
            database,
            now,
            after,
            before,
        }
    }

    /// The recent runs of `watch` as a read under `key` found them, while that read is
    /// fresh ([`recent::fresh`]).
    pub fn recent_runs(&self, watch: &str, key: &Key) -> Option<RecentRuns> {
        recent::find(&self.after.recent, &self.database, watch, key, self.now)
    }

    /// `watch`'s recent runs were read this run, under `key`: kept for the next runs (in
    /// place of the watch's earlier read; not when its longest run's id is too long).
    pub fn read_recent_runs(&mut self, watch: &str, key: Key, runs: &RecentRuns) {
        if let Some(e) = Entry::new(&self.database, watch, key, self.now, runs) {
            recent::keep(&mut self.after.recent, e);
        }
    }

    /// `watch` was skipped as busy this run: its streak, one run longer (a new one from
    /// now when there was none, or when it began "later" than now).
    pub fn busy(&mut self, watch: &str) -> Busy {
        let (database, now) = (&self.database, self.now);
        let i = self
            .after
            .busy
            .iter()
            .position(|b| b.database == *database && b.watch == watch);
        let b = match i {
            Some(i) => &mut self.after.busy[i],
            None => {
                self.after.busy.push(Busy {
                    database: database.clone(),
                    watch: watch.to_string(),
                    since: now,
                    runs: 0,
                });
                let last = self.after.busy.len() - 1;
                &mut self.after.busy[last]
            }
        };
        if b.since > now {
            b.since = now;
        }
        b.runs = b.runs.saturating_add(1);
        b.clone()
    }

    /// `watch` was checked this run: its streak, if any, is over.
    pub fn checked(&mut self, watch: &str) {
        let database = &self.database;
        self.after
            .busy
            .retain(|b| !(b.database == *database && b.watch == watch));
    }

    /// `--log TARGET` failed this run (`error`: why): true when the run says so — the
    /// first run it fails, and then once per `every_s` seconds (or when a time "told" is
    /// later than now).
    pub fn log_failed(&mut self, target: &str, error: &str, every_s: i64) -> bool {
        let now = self.now;
        match &mut self.after.log_failure {
            Some(f) if f.target == target => {
                f.error = error.to_string();
                if f.since > now {
                    f.since = now;
                }
                let due = !(0..every_s).contains(&now.saturating_sub(f.told));
                if due {
                    f.told = now;
                }
                due
            }
            other => {
                *other = Some(LogFailure {
                    target: target.to_string(),
                    error: error.to_string(),
                    since: now,
                    told: now,
                });
                true
            }
        }
    }

    /// `--log` reached its target this run: a later failure is news again.
    pub fn log_worked(&mut self) {
        self.after.log_failure = None;
    }

    /// Replaces the file when this run changed what it holds: flushed to disk when a
    /// streak or the log failure changed, not when only the recent runs did (a lost read is
    /// read again).
    pub fn save(mut self, state_dir: &Path) -> Result<()> {
        let troubles_changed = (&self.after.busy, &self.after.log_failure)
            != (&self.before.busy, &self.before.log_failure);
        if !troubles_changed && self.after.recent == self.before.recent {
            return Ok(());
        }
        self.after.version = 1;
        if troubles_changed {
            state::save_typed(state_dir, &RUN_STATE, &self.after).map(|_| ())
        } else {
            state::save_typed_pretty_unsynced(state_dir, &RUN_STATE, &self.after).map(|_| ())
        }
    }
}

/// The last `--log` failure a real run recorded in `state_dir` (for `doctor`); `None`
/// when there is none, or the file cannot be read.
pub fn last_log_failure(state_dir: &Path) -> Option<LogFailure> {
    state::load_typed::<RunState>(state_dir, &RUN_STATE)
        .ok()
        .flatten()
        .and_then(|s| s.log_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DB: &str = "mysql://localhost/appdb";

    #[test]
    fn a_busy_streak_counts_runs_from_its_first_and_ends_when_checked() {
        let mut s = Streaks::new(RunState::default(), DB.into(), 1_000);
        assert_eq!(s.busy("w").runs, 1);
        let file = s.after.clone();
        let mut s = Streaks::new(file, DB.into(), 1_600);
        let b = s.busy("w");
        assert_eq!((b.since, b.runs), (1_000, 2));
        // Another database's streak of the same name is another streak.
        let mut s = Streaks::new(s.after, "sqlite:///x.db".into(), 1_700);
        assert_eq!(s.busy("w").runs, 1);
        s.checked("w");
        assert_eq!(s.after.busy.len(), 1, "{:?}", s.after);
        assert_eq!(s.after.busy[0].database, DB);
    }

    #[test]
    fn a_time_from_the_future_starts_over_at_now() {
        let future = RunState {
            version: 1,
            busy: vec![Busy {
                database: DB.into(),
                watch: "w".into(),
                since: 9_000,
                runs: 4,
            }],
            log_failure: Some(LogFailure {
                target: "syslog".into(),
                error: "gone".into(),
                since: 9_000,
                told: 9_000,
            }),
            recent: Vec::new(),
        };
        let mut s = Streaks::new(future, DB.into(), 1_000);
        let b = s.busy("w");
        assert_eq!((b.since, b.runs), (1_000, 5));
        assert!(
            s.log_failed("syslog", "gone", 86_400),
            "told in the future: due"
        );
        assert!(!s.log_failed("syslog", "gone", 86_400), "told now");
    }

    #[test]
    fn a_log_failure_is_told_once_then_per_remind_every_and_forgotten_once_it_works() {
        let mut s = Streaks::new(RunState::default(), DB.into(), 0);
        assert!(s.log_failed("syslog", "/dev/log: No such file or directory", 3_600));
        let mut s = Streaks::new(s.after, DB.into(), 600);
        assert!(!s.log_failed("syslog", "/dev/log: No such file or directory", 3_600));
        let mut s = Streaks::new(s.after, DB.into(), 3_600);
        assert!(s.log_failed("syslog", "/dev/log: No such file or directory", 3_600));
        // Another target is news.
        assert!(s.log_failed("journald", "no socket", 3_600));
        s.log_worked();
        assert_eq!(s.after.log_failure, None);
    }

    #[test]
    fn an_older_or_newer_file_reads() {
        let old: RunState = serde_json::from_str("{\"version\": 1}").expect("no fields");
        assert_eq!(
            old,
            RunState {
                version: 1,
                ..RunState::default()
            }
        );
        let newer: RunState = serde_json::from_str(
            "{\"version\": 2, \"busy\": [], \"log_failure\": null, \"something\": 3}",
        )
        .expect("unknown fields");
        assert_eq!(newer.version, 2);
    }

    #[test]
    fn the_file_round_trips_and_is_written_only_on_change() {
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let (mut s, warning) = Streaks::load(&state, DB.into(), 100);
        assert_eq!(warning, None);
        s.checked("w");
        s.save(&state).expect("nothing to write");
        assert!(!state.join(RUN_STATE.name).exists());
        let (mut s, _) = Streaks::load(&state, DB.into(), 100);
        s.busy("w");
        s.save(&state).expect("save");
        let (mut s, _) = Streaks::load(&state, DB.into(), 200);
        assert_eq!(s.busy("w").runs, 2);
        std::fs::write(state.join(RUN_STATE.name), "{ damaged").expect("damage");
        let (mut s, warning) = Streaks::load(&state, DB.into(), 300);
        assert!(warning.is_some_and(|w| w.contains("run-state.json")));
        assert_eq!(s.busy("w").runs, 1);
    }

    fn key() -> Key {
        Key {
            table: "sync_log".into(),
            id_column: "id".into(),
            started_column: "start_time".into(),
            ended_column: "end_time".into(),
            status_column: "status".into(),
            started_type: "datetime".into(),
            ended_type: "datetime".into(),
            timezone: None,
            matches: Vec::new(),
            running_value: "running".into(),
            success_values: None,
            not_success: vec!["error".into()],
        }
    }

    fn runs(longest_id: i64) -> RecentRuns {
        RecentRuns {
            runs: 20,
            longest: Some((7_800, serde_json::json!(longest_id))),
        }
    }

    /// A read is used by later runs for 15 minutes, under the same key, then read again;
    /// a dry run's view uses it the same way.
    #[test]
    fn recent_runs_are_used_while_fresh_and_read_again_after() {
        let mut s = Streaks::new(RunState::default(), DB.into(), 1_000);
        assert_eq!(s.recent_runs("w", &key()), None, "never read");
        s.read_recent_runs("w", key(), &runs(107));
        let file = s.after.clone();
        let s = Streaks::new(file.clone(), DB.into(), 1_000 + recent::FRESH_FOR_S - 1);
        assert_eq!(s.recent_runs("w", &key()), Some(runs(107)));
        let edited = Key {
            success_values: Some(vec!["done".into()]),
            ..key()
        };
        assert_eq!(s.recent_runs("w", &edited), None, "another key");
        let mut s = Streaks::new(file.clone(), DB.into(), 1_000 + recent::FRESH_FOR_S);
        assert_eq!(s.recent_runs("w", &key()), None, "stale");
        s.read_recent_runs("w", key(), &runs(108));
        assert_eq!(s.after.recent.len(), 1, "in place of the stale read");
        assert_eq!(s.after.recent[0].read_at, 1_000 + recent::FRESH_FOR_S);
        let s = Streaks::new(file, DB.into(), 999);
        assert_eq!(s.recent_runs("w", &key()), None, "read 'later' than now");
    }

    /// A run that only used a fresh read writes nothing; one that read again writes the
    /// file; a dry run's view reads it and never writes.
    #[test]
    fn recent_runs_are_written_only_when_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let view = Streaks::read_only(&state, DB.into(), 100);
        assert_eq!(view.recent_runs("w", &key()), None);
        let (mut s, _) = Streaks::load(&state, DB.into(), 100);
        s.read_recent_runs("w", key(), &runs(107));
        s.save(&state).expect("save");
        let written = std::fs::read_to_string(state.join(RUN_STATE.name)).expect("written");
        assert!(written.contains("\"read_at\": 100"), "{written}");
        let (s, _) = Streaks::load(&state, DB.into(), 200);
        assert_eq!(s.recent_runs("w", &key()), Some(runs(107)));
        std::fs::remove_file(state.join(RUN_STATE.name)).expect("remove");
        s.save(&state).expect("nothing to write");
        assert!(
            !state.join(RUN_STATE.name).exists(),
            "unchanged: not written"
        );
        std::fs::write(state.join(RUN_STATE.name), &written).expect("put back");
        let view = Streaks::read_only(&state, DB.into(), 200);
        assert_eq!(view.recent_runs("w", &key()), Some(runs(107)));
        std::fs::write(state.join(RUN_STATE.name), "{ damaged").expect("damage");
        let view = Streaks::read_only(&state, DB.into(), 200);
        assert_eq!(view.recent_runs("w", &key()), None, "damaged: empty");
    }

    /// A read not used for 30 days is dropped from the file by the next real run.
    #[test]
    fn recent_runs_of_a_watch_not_checked_for_thirty_days_are_dropped() {
        let mut s = Streaks::new(RunState::default(), DB.into(), 1_000);
        s.read_recent_runs("gone", key(), &runs(1));
        let s = Streaks::new(s.after, DB.into(), 1_000 + recent::KEEP_UNREAD_S);
        assert!(s.after.recent.is_empty());
        assert_ne!(s.after, s.before, "a change: the next save writes it");
    }
}
