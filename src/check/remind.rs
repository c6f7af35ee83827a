//! Cron mail once per problem (docs/design.md#output): the cron text of `check` shows a row that needs a
//! person, or a run-level warning (`max_age` too low, clock skew, breaker, shared heartbeat
//! file), when it first appears or changes (its verdict or basis, never its figures), then
//! at most once per `[run] remind_every` (default 24 h): a hung row no longer sends 144
//! mails a day. Only the printing is spared: the exit status, the metrics, `--explain`,
//! JSON, `last-run.json` and `doctor` always show everything.
//!
//! The state is `state_dir/reminders.json` ([`Reminders`], through
//! [`crate::state::save_typed`]): per problem, what it was and when it was last shown,
//! keyed by database, watch, row id and start value (a restarted row is a new problem).
//! Problems of watches a run did not check are kept for [`KEEP_UNSEEN_S`]; one that went
//! away and comes back is news again. A damaged or unreadable file is read as empty: one
//! repeated mail, never a silent problem. Dry runs neither read nor write it.
//!
//! I/O: [`Reminder::load`] reads the file, [`Reminder::save`] replaces it when the run
//! changed it; the rest is pure, with the current time passed in.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::decide::{Basis, Hold, Verdict};
use crate::error::Result;
use crate::state::{self, StateFile};

use super::room::{Room, within_cap};

/// `state_dir/reminders.json`.
pub const REMINDERS: StateFile = StateFile {
    name: "reminders.json",
    opening: "opening reminders.json",
    reading: "reading reminders.json",
    writing: "writing reminders.json",
    creating: "creating a temporary file for reminders.json",
};

/// How long a problem of a watch that later runs did not check is remembered.
pub const KEEP_UNSEEN_S: i64 = 30 * 86_400;

/// What a problem is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    /// A running row that needs a person.
    Row {
        database: String,
        watch: String,
        id: String,
        /// The start value as read: another run of the same id is another problem.
        started: String,
    },
    /// A run-level warning (`max_age_too_low`, `clock_skew`, `breaker`,
    /// `shared_heartbeat_file`), of one watch or of the whole run.
    Warning {
        database: String,
        warning: String,
        watch: Option<String>,
    },
}

impl Subject {
    fn database(&self) -> &str {
        match self {
            Subject::Row { database, .. } | Subject::Warning { database, .. } => database,
        }
    }

    fn watch(&self) -> Option<&str> {
        match self {
            Subject::Row { watch, .. } => Some(watch),
            Subject::Warning { watch, .. } => watch.as_deref(),
        }
    }
}

/// A problem the cron text has shown, and when it last did (fields named as in the file).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShownProblem {
    pub subject: Subject,
    /// What the problem is, without figures: `hung/stale_but_lock_held`.
    pub what: String,
    /// When the cron text last showed it (unix seconds, host clock).
    pub told: i64,
}

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reminders {
    pub version: u32,
    pub told: Vec<ShownProblem>,
}

/// What makes a row's problem the same problem from run to run: the verdict, which
/// evidence decided (digits left out, so that a figure in an unreadable-evidence reason
/// never makes it new), the hold, and whether its write failed.
pub fn row_problem(verdict: Verdict, basis: &Basis, hold: Option<Hold>, failed: bool) -> String {
    let basis = serde_json::to_string(basis).unwrap_or_default();
    let hold = hold.map(|h| serde_json::to_string(&h).unwrap_or_default());
    let mut what = format!("{}/{}", verdict.as_str(), basis.trim_matches('"'));
    if let Some(h) = hold {
        let _ = write!(what, "/held:{}", h.trim_matches('"'));
    }
    if failed {
        what.push_str("/write_failed");
    }
    what.retain(|c| !c.is_ascii_digit());
    what
}

/// True when `then` (unix seconds, as stored) is at most `span` seconds before `now`, and
/// not after it: a stored time from the future (a run under a wrong clock) is never
/// "recent".
fn within(now: i64, then: i64, span: i64) -> bool {
    (0..span).contains(&now.saturating_sub(then))
}

/// The reminders of one real run of the cron text.
#[derive(Debug)]
pub struct Reminder {
    every_s: i64,
    now: i64,
    database: String,
    before: HashMap<Subject, ShownProblem>,
    seen: Vec<ShownProblem>,
    checked: HashSet<String>,
    /// Room for rows of this database in the file, by watch: at most [`ROWS_KEPT`] each,
    /// across runs.
    room: Room<Subject>,
}

/// At most this many rows of a watch are remembered, across runs ([`Room`]: rows told
/// before keep their place, a new row takes one while there is one): the file, and the
/// memory that holds it, stay bounded whatever the backlog and however many runs see it
/// (docs/design.md#paging). A file holding more (an older release's) is cut to it when
/// read.
pub const ROWS_KEPT: usize = 10_000;

impl Reminder {
    /// Reads `state_dir/reminders.json`. A file that cannot be read is taken as empty
    /// (everything is shown once more), with a warning to say why.
    pub fn load(
        state_dir: &Path,
        every: std::time::Duration,
        now: i64,
        database: String,
    ) -> (Reminder, Option<String>) {
        let (file, warning) = match state::load_typed::<Reminders>(state_dir, &REMINDERS) {
            Ok(r) => (r.unwrap_or_default(), None),
            Err(e) => (
                Reminders::default(),
                Some(format!(
                    "{}; every problem is shown again this run",
                    e.full_message()
                )),
            ),
        };
        (
            Reminder::new(
                file,
                i64::try_from(every.as_secs()).unwrap_or(i64::MAX),
                now,
                database,
            ),
            warning,
        )
    }

    /// A run's reminders from the file read (cut to [`ROWS_KEPT`] rows per watch).
    fn new(file: Reminders, every_s: i64, now: i64, database: String) -> Reminder {
        let told = within_cap(file.told, ROWS_KEPT, |t| match &t.subject {
            Subject::Row {
                database, watch, ..
            } => (database.clone(), Some(watch.clone())),
            Subject::Warning { database, .. } => (database.clone(), None),
        });
        let before: HashMap<Subject, ShownProblem> =
            told.into_iter().map(|t| (t.subject.clone(), t)).collect();
        let room = Room::new(
            ROWS_KEPT,
            before.keys().filter_map(|s| match s {
                Subject::Row {
                    database: d, watch, ..
                } if *d == database => Some((watch.as_str(), s.clone())),
                _ => None,
            }),
        );
        Reminder {
            every_s,
            now,
            database,
            before,
            seen: Vec::new(),
            checked: HashSet::new(),
            room,
        }
    }

    /// True when the cron text shows this problem now: it is new, it changed, or it was
    /// last shown `remind_every` ago or longer — or at a time still to come, which only a
    /// run under a wrong clock can have written (read as "shown less than remind_every
    /// ago", such a time would silence the problem until the clock caught up). Remembers
    /// it either way.
    fn due(&mut self, subject: Subject, what: String) -> bool {
        let told = match self.before.get(&subject) {
            Some(t) if t.what == what && within(self.now, t.told, self.every_s) => Some(t.told),
            _ => None,
        };
        self.seen.push(ShownProblem {
            subject,
            what,
            told: told.unwrap_or(self.now),
        });
        told.is_none()
    }

    /// A row that needs a person: is it shown in the cron text this run? At most
    /// [`ROWS_KEPT`] rows of a watch are remembered (rows told before keep their place): a
    /// row beyond that is due every run, and the cron text, which lists at most 50 rows,
    /// counts it in its summary line.
    pub fn row_due(&mut self, watch: &str, id: &str, started: &str, what: String) -> bool {
        let subject = Subject::Row {
            database: self.database.clone(),
            watch: watch.to_string(),
            id: id.to_string(),
            started: started.to_string(),
        };
        if !self.room.seen(watch, &subject) && !self.room.has_room(watch) {
            return true;
        }
        self.room.keep(watch);
        self.due(subject, what)
    }

    /// A run-level warning (`warning`: its kind), of one watch or of the run: is it shown
    /// this run?
    pub fn warning_due(&mut self, warning: &str, watch: Option<&str>) -> bool {
        let subject = Subject::Warning {
            database: self.database.clone(),
            warning: warning.to_string(),
            watch: watch.map(str::to_string),
        };
        self.due(subject, warning.to_string())
    }

    /// The watch was judged this run: its problems not seen this run are gone.
    pub fn checked(&mut self, watch: &str) {
        self.checked.insert(watch.to_string());
    }

    /// What the file holds after this run: the problems it saw, and those of another
    /// database or of a watch it did not check (for a while).
    pub fn into_file(self) -> Reminders {
        let seen: HashSet<&Subject> = self.seen.iter().map(|t| &t.subject).collect();
        let mut kept: Vec<ShownProblem> = self
            .before
            .values()
            .filter(|t| !seen.contains(&t.subject))
            .filter(|t| {
                let elsewhere = t.subject.database() != self.database
                    || t.subject.watch().is_some_and(|w| !self.checked.contains(w));
                elsewhere && within(self.now, t.told, KEEP_UNSEEN_S)
            })
            .cloned()
            .collect();
        kept.extend(self.seen.iter().cloned());
        Reminders {
            version: 1,
            told: kept,
        }
    }

    /// Replaces `state_dir/reminders.json`, when this run changed what it holds (a run with
    /// nothing new to remember writes nothing).
    pub fn save(self, state_dir: &Path) -> Result<()> {
        let before: HashSet<ShownProblem> = self.before.values().cloned().collect();
        let file = self.into_file();
        if file.told.len() == before.len() && file.told.iter().all(|t| before.contains(t)) {
            return Ok(());
        }
        state::save_typed(state_dir, &REMINDERS, &file).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    fn reminder(before: Reminders, now: i64) -> Reminder {
        Reminder::new(before, DAY, now, "sqlite:///app.db".into())
    }

    /// At most ROWS_KEPT new rows of a watch are remembered a run; the rest are due every
    /// run (the cron text counts them in its summary line), rows told before always go on.
    #[test]
    fn a_backlog_of_rows_is_remembered_up_to_a_bound() {
        let mut r = reminder(Reminders::default(), 1_000);
        for id in 0..ROWS_KEPT + 3 {
            assert!(r.row_due("w", &id.to_string(), "s", "unknown/x".into()));
        }
        let file = r.into_file();
        assert_eq!(file.told.len(), ROWS_KEPT);
        let mut r = reminder(file, 1_060);
        assert!(
            !r.row_due("w", "0", "s", "unknown/x".into()),
            "told a minute ago"
        );
        assert!(r.row_due("w", &ROWS_KEPT.to_string(), "s", "unknown/x".into()));
        // The same backlog, run after run: the file stays at the bound.
        let mut file = Reminders::default();
        for run in 0..10 {
            let mut r = reminder(file, 1_000 + run * 60);
            for id in 0..ROWS_KEPT + 3 {
                r.row_due("w", &id.to_string(), "s", "unknown/x".into());
            }
            file = r.into_file();
            assert_eq!(file.told.len(), ROWS_KEPT, "run {run}");
        }
        // A row that left frees its place for a new one: in the next run (this one holds
        // it for a row it may still come to).
        for run in 0..2 {
            let mut r = reminder(file, 2_000 + run * 60);
            r.checked("w");
            for id in 1..ROWS_KEPT + 3 {
                r.row_due("w", &id.to_string(), "s", "unknown/x".into());
            }
            file = r.into_file();
        }
        assert_eq!(file.told.len(), ROWS_KEPT);
        assert!(file.told.iter().any(|t| matches!(&t.subject,
            Subject::Row { id, .. } if *id == ROWS_KEPT.to_string())));
    }

    /// A file over the bound (an older release kept more) is cut to it when read.
    #[test]
    fn a_file_over_the_bound_is_cut_when_read() {
        let mut r = reminder(Reminders::default(), 1_000);
        for id in 0..ROWS_KEPT {
            r.row_due("w", &id.to_string(), "s", "unknown/x".into());
        }
        let mut file = r.into_file();
        file.told.extend(file.told.clone().into_iter().map(|mut t| {
            if let Subject::Row { id, .. } = &mut t.subject {
                id.push('x');
            }
            t
        }));
        assert_eq!(file.told.len(), 2 * ROWS_KEPT);
        let r = reminder(file, 1_060);
        assert_eq!(r.into_file().told.len(), ROWS_KEPT);
    }

    fn hung() -> String {
        row_problem(Verdict::Hung, &Basis::StaleButLockHeld, None, false)
    }

    #[test]
    fn a_problem_is_shown_when_new_changed_or_due_again() {
        let t0 = 1_000_000;
        let mut r = reminder(Reminders::default(), t0);
        r.checked("w");
        assert!(r.row_due("w", "7", "2035-03-14 14:00:00", hung()), "new");
        assert!(r.warning_due("clock_skew", None), "new");
        let file = r.into_file();

        // An hour later: the same problem, not shown; the same row with another basis,
        // shown; the same id restarted (another start value), shown.
        let mut r = reminder(file.clone(), t0 + 3600);
        r.checked("w");
        assert!(!r.row_due("w", "7", "2035-03-14 14:00:00", hung()));
        assert!(!r.warning_due("clock_skew", None));
        let file2 = r.into_file();
        assert_eq!(file2.told.len(), 2);
        assert!(file2.told.iter().all(|t| t.told == t0), "still told at t0");
        let mut r = reminder(file.clone(), t0 + 3600);
        let owner = row_problem(Verdict::Hung, &Basis::StaleButOwnerAlive, None, false);
        assert!(r.row_due("w", "7", "2035-03-14 14:00:00", owner));
        assert!(r.row_due("w", "7", "2035-03-14 15:00:00", hung()));

        // A day later: shown again, and told anew.
        let mut r = reminder(file2, t0 + DAY);
        r.checked("w");
        assert!(r.row_due("w", "7", "2035-03-14 14:00:00", hung()));
        assert!(r.warning_due("clock_skew", None));
        assert!(r.into_file().told.iter().all(|t| t.told == t0 + DAY));
    }

    #[test]
    fn a_problem_that_went_away_is_news_when_it_comes_back() {
        let mut r = reminder(Reminders::default(), 0);
        r.checked("w");
        r.checked("other");
        assert!(r.row_due("w", "7", "s", hung()));
        assert!(r.row_due("other", "1", "s", hung()));
        assert!(r.warning_due("breaker", Some("w")));
        let file = r.into_file();
        // Watch w is checked and its problems are gone; watch other is not checked.
        let mut r = reminder(file, 60);
        r.checked("w");
        let file = r.into_file();
        let subjects: Vec<&Subject> = file.told.iter().map(|t| &t.subject).collect();
        assert_eq!(subjects.len(), 1);
        assert!(matches!(subjects[0], Subject::Row { watch, .. } if watch == "other"));
        let mut r = reminder(file.clone(), 120);
        r.checked("w");
        assert!(r.row_due("w", "7", "s", hung()), "back again: news");
        // Unchecked for a month: forgotten.
        let r = reminder(file, KEEP_UNSEEN_S + 1);
        assert!(r.into_file().told.is_empty());
    }

    #[test]
    fn a_time_from_the_future_is_never_recent() {
        let t0 = 1_000_000;
        let mut r = reminder(Reminders::default(), t0 + 10 * DAY);
        r.checked("w");
        assert!(r.row_due("w", "7", "s", hung()));
        assert!(r.warning_due("clock_skew", None));
        r.checked("other");
        assert!(r.row_due("other", "1", "s", hung()));
        let future = r.into_file();
        // The clock is set back ten days: every problem is due, and told anew at now.
        let mut r = reminder(future.clone(), t0);
        r.checked("w");
        assert!(r.row_due("w", "7", "s", hung()));
        assert!(r.warning_due("clock_skew", None));
        let file = r.into_file();
        assert!(file.told.iter().all(|t| t.told == t0), "{file:?}");
        // An unchecked watch's problem from the future is not kept for ever either.
        assert!(
            !file
                .told
                .iter()
                .any(|t| matches!(&t.subject, Subject::Row { watch, .. } if watch == "other")),
            "{file:?}"
        );
        let mut r = reminder(file, t0 + 60);
        r.checked("w");
        assert!(!r.row_due("w", "7", "s", hung()), "told a minute ago");
    }

    #[test]
    fn the_problem_leaves_figures_out() {
        let a = row_problem(
            Verdict::Unknown,
            &Basis::Unreadable(
                "start time: start_time (2035-03-14 17:09:26) is 7200s in the future".into(),
            ),
            None,
            false,
        );
        let b = row_problem(
            Verdict::Unknown,
            &Basis::Unreadable(
                "start time: start_time (2035-03-14 17:19:26) is 7800s in the future".into(),
            ),
            None,
            false,
        );
        assert_eq!(a, b);
        assert_ne!(
            row_problem(
                Verdict::Dead,
                &Basis::HeartbeatStale,
                Some(Hold::Breaker),
                false
            ),
            row_problem(Verdict::Dead, &Basis::HeartbeatStale, None, true)
        );
        assert_eq!(
            row_problem(
                Verdict::Dead,
                &Basis::HeartbeatStale,
                Some(Hold::Breaker),
                true
            ),
            "dead/heartbeat_stale/held:breaker/write_failed"
        );
    }
}
