//! The confirmation counts of SPEC §5: how many consecutive real runs judged a row the same
//! inferred verdict (`dead` on heartbeat silence alone, or `hung`). Such a verdict acts only
//! once the count reaches the watch's `confirm` ([`crate::decide::confirm`]), so a stall
//! shorter than a cron period (a GC pause, a stopped process, a slow NFS server) never parks
//! or kills a job.
//!
//! A [`Tally`] is one run's view: the counts the last real run left ([`Counts`], the state
//! file `state_dir/confirmations.json`), and what this run saw. A row is keyed by database,
//! watch, id and start value (a retried row that started again is a new row). Judging a
//! row ([`Tally::count`]) gives its count this run: one more than the last run's for the
//! same inferred verdict, else 1; a row judged otherwise has no entry any more (its count
//! is reset). What is written back ([`Tally::into_counts`]) is this run's entries, every
//! entry of a watch this run did not check (not selected, another host's, busy) and of
//! another database, less those not seen for twice their watch's `max_age`.
//!
//! Dry runs and `--explain` count the same way to show what a real run would do now, but
//! never write ([`crate::check`] decides). Pure, except [`load`] and [`save`], which read
//! and replace the state file (through [`crate::state`] and [`crate::fsafe`]: no link
//! planted at its name is followed; not flushed to disk: losing the counts only delays an
//! action by a run).

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::{Database, DbUrl, Watch};
use crate::decide::{Confirmation, Decision, Verdict};
use crate::error::{Error, Result};
use crate::state::{self, StateFile};

/// `confirmations.json`.
pub const FILE: StateFile = StateFile {
    name: "confirmations.json",
    opening: "opening confirmations.json",
    reading: "reading the confirmation counts",
    writing: "writing the confirmation counts",
    creating: "creating a temporary file for the confirmation counts",
};

/// The state file: every row with an inferred verdict, as the last real run left them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub entries: Vec<Entry>,
}

/// One row's count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Which database ([`database_key`]: scheme, host, database or file; never a user).
    pub database: String,
    pub watch: String,
    /// The row id, as the journal keys it.
    pub id: String,
    /// The start value as read: a row that started again is another row.
    pub started: String,
    pub verdict: Verdict,
    /// Consecutive real runs that judged the row so, the last one included.
    pub count: u32,
    /// When the last of them ran (unix seconds, host clock).
    pub seen: i64,
    /// The watch's `max_age` then: an entry not seen for twice that is dropped.
    pub max_age_s: u64,
}

/// The database part of a key: the scheme and where it is (host and database, or the
/// file), never a user or password.
pub fn database_key(db: &Database) -> String {
    match &db.url {
        DbUrl::Sqlite(p) => format!("sqlite://{}", p.display()),
        DbUrl::Mysql(u) => {
            let rest = u.strip_prefix("mysql://").unwrap_or(u);
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("mysql://{host}{tail}")
        }
    }
}

type Key = (String, String, String);

/// One run's counts: the last real run's, and this run's.
#[derive(Debug, Clone)]
pub struct Tally {
    database: String,
    /// The last real run's entries of this database, by watch, id and start.
    before: HashMap<Key, Entry>,
    /// Entries of other databases: kept as they are.
    others: Vec<Entry>,
    /// This run's entries.
    now: HashMap<Key, Entry>,
    /// The watches this run checked: their old entries are replaced by this run's.
    checked: HashSet<String>,
    /// The file existed, or this run has something to write.
    existed: bool,
}

impl Tally {
    /// A run's tally for `database`, from the counts read (empty for a first run).
    pub fn new(database: String, counts: Option<Counts>) -> Tally {
        let existed = counts.is_some();
        let mut before = HashMap::new();
        let mut others = Vec::new();
        for e in counts.unwrap_or_default().entries {
            if e.database == database {
                before.insert((e.watch.clone(), e.id.clone(), e.started.clone()), e);
            } else {
                others.push(e);
            }
        }
        Tally {
            database,
            before,
            others,
            now: HashMap::new(),
            checked: HashSet::new(),
            existed,
        }
    }

    /// Counts one row judged this run (`now`: unix seconds, host clock): its confirmation
    /// when the verdict is inferred — one more than the last run's for the same verdict,
    /// else 1 — and `None` (its count reset) when it is not.
    pub fn count(
        &mut self,
        w: &Watch,
        id: &str,
        started: &str,
        d: &Decision,
        now: i64,
    ) -> Option<Confirmation> {
        self.checked.insert(w.name.clone());
        let key = (w.name.clone(), id.to_string(), started.to_string());
        if !d.inferred() {
            self.now.remove(&key);
            return None;
        }
        let before = self
            .before
            .get(&key)
            .filter(|e| e.verdict == d.verdict)
            .map_or(0, |e| e.count);
        // Never more than the watch needs: the number stays meaningful if `confirm` is
        // lowered, and small.
        let count = before.saturating_add(1).min(w.confirm.max(1));
        self.now.insert(
            key,
            Entry {
                database: self.database.clone(),
                watch: w.name.clone(),
                id: id.to_string(),
                started: started.to_string(),
                verdict: d.verdict,
                count,
                seen: now,
                max_age_s: w.max_age.as_secs(),
            },
        );
        Some(Confirmation {
            count,
            confirm: w.confirm,
        })
    }

    /// Forgets a row this run wrote (it is no longer running).
    pub fn forget(&mut self, w: &Watch, id: &str, started: &str) {
        self.now
            .remove(&(w.name.clone(), id.to_string(), started.to_string()));
    }

    /// Marks a watch as checked this run although it had no rows: its old entries go.
    pub fn checked(&mut self, w: &Watch) {
        self.checked.insert(w.name.clone());
    }

    /// True when there is anything to write: a file to keep up to date, or a first entry.
    pub fn worth_writing(&self) -> bool {
        self.existed || !self.now.is_empty()
    }

    /// What to write back (`now`: unix seconds, host clock): this run's entries, the old
    /// entries of watches it did not check and of other databases, less those not seen
    /// for twice their `max_age`; in a stable order.
    pub fn into_counts(self, now: i64) -> Counts {
        // An entry seen "later" than now was written under a wrong clock: not fresh (it
        // would be kept for ever); its row, if still there, counts again from 1.
        let fresh = |e: &Entry| {
            (0..=i64::try_from(e.max_age_s.saturating_mul(2)).unwrap_or(i64::MAX))
                .contains(&now.saturating_sub(e.seen))
        };
        let mut entries: Vec<Entry> = self
            .before
            .into_values()
            .filter(|e| !self.checked.contains(&e.watch))
            .chain(self.others)
            .chain(self.now.into_values())
            .filter(fresh)
            .collect();
        entries.sort_by(|a, b| {
            (&a.database, &a.watch, &a.id, &a.started).cmp(&(
                &b.database,
                &b.watch,
                &b.id,
                &b.started,
            ))
        });
        Counts { entries }
    }
}

/// Why the counts could not be read.
#[derive(Debug)]
pub enum Unread {
    /// The file is not a [`Counts`] (damaged): a run starts over, and its write mends it.
    Damaged(Error),
    /// It could not be read at all (permission denied, an I/O error).
    Failed(Error),
}

/// Reads `state_dir/confirmations.json`: `Ok(None)` when there is none yet.
pub fn load(state_dir: &Path) -> Result<Option<Counts>, Unread> {
    state::load_typed::<Counts>(state_dir, &FILE).map_err(|e| match &e {
        Error::Io { source, .. } if source.kind() == ErrorKind::InvalidData => Unread::Damaged(e),
        _ => Unread::Failed(e),
    })
}

/// Replaces `state_dir/confirmations.json` with `counts` (renamed into place, not flushed).
/// An error fails the run like a journal failure: without the counts, no inferred verdict
/// would ever act.
pub fn save(state_dir: &Path, counts: &Counts) -> Result<()> {
    state::save_typed_unsynced(state_dir, &FILE, counts)
        .map(|_| ())
        .map_err(|e| match e {
            Error::Io { path, source, .. } => Error::Io {
                path,
                action: "keeping the confirmation counts, without which no inferred verdict \
                         could ever act (make run.state_dir writable for this user)",
                source,
            },
            other => other,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, from_str};
    use crate::decide::Basis;

    fn watch(name: &str, confirm: u32) -> Watch {
        let text = format!(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"{name}\"\n\
             table = \"t\"\nstarted_column = \"s\"\nheartbeat_file = \"/run/{{id}}\"\n\
             stale_after = \"5m\"\nmax_age = \"1h\"\nconfirm = {confirm}\n"
        );
        from_str(&text, Path::new("/x.toml"), &Overrides::default(), &[])
            .expect("valid")
            .watches
            .remove(0)
    }

    fn d(verdict: Verdict, basis: Basis) -> Decision {
        Decision { verdict, basis }
    }

    const DB: &str = "sqlite:///tmp/app.db";

    #[test]
    fn an_inferred_verdict_counts_up_in_consecutive_runs_and_resets_otherwise() {
        let w = watch("sync", 2);
        let silent = d(Verdict::Dead, Basis::HeartbeatStale);
        let hung = d(Verdict::Hung, Basis::StaleButLockHeld);
        let alive = d(Verdict::Alive, Basis::HeartbeatFresh);
        let conclusive = d(Verdict::Dead, Basis::LockFree);
        let c = |count| Some(Confirmation { count, confirm: 2 });

        let mut t = Tally::new(DB.into(), None);
        assert!(!t.worth_writing());
        assert_eq!(t.count(&w, "7", "100", &silent, 1_000), c(1));
        assert_eq!(t.count(&w, "8", "100", &hung, 1_000), c(1));
        assert_eq!(t.count(&w, "9", "100", &conclusive, 1_000), None);
        assert!(t.worth_writing());
        let run1 = t.into_counts(1_000);
        assert_eq!(run1.entries.len(), 2);

        // Run 2: 7 again (confirmed), 8 now dead (another verdict: 1), 9 gone.
        let mut t = Tally::new(DB.into(), Some(run1.clone()));
        assert_eq!(t.count(&w, "7", "100", &silent, 1_300), c(2));
        assert_eq!(t.count(&w, "8", "100", &silent, 1_300), c(1));
        let run2 = t.into_counts(1_300);
        let counts: Vec<(&str, u32)> = run2
            .entries
            .iter()
            .map(|e| (e.id.as_str(), e.count))
            .collect();
        assert_eq!(counts, [("7", 2), ("8", 1)]);

        // Run 3: 7 beats again (reset), 8 restarted (a new start value: a new row).
        let mut t = Tally::new(DB.into(), Some(run2));
        assert_eq!(t.count(&w, "7", "100", &alive, 1_600), None);
        assert_eq!(t.count(&w, "8", "200", &silent, 1_600), c(1));
        let run3 = t.into_counts(1_600);
        let keys: Vec<(&str, &str, u32)> = run3
            .entries
            .iter()
            .map(|e| (e.id.as_str(), e.started.as_str(), e.count))
            .collect();
        assert_eq!(keys, [("8", "200", 1)]);

        // The count never climbs past what the watch needs.
        let mut counts = run1;
        for now in [2_000, 2_300, 2_600] {
            let mut t = Tally::new(DB.into(), Some(counts));
            assert_eq!(t.count(&w, "7", "100", &silent, now), c(2));
            counts = t.into_counts(now);
        }
    }

    #[test]
    fn entries_of_unchecked_watches_and_other_databases_are_kept_until_stale() {
        let a = watch("a", 3);
        let b = watch("b", 3);
        let silent = d(Verdict::Dead, Basis::HeartbeatMissing);
        let mut t = Tally::new(DB.into(), None);
        t.count(&a, "1", "s", &silent, 0);
        t.count(&b, "1", "s", &silent, 0);
        let mut counts = t.into_counts(0);
        counts.entries.push(Entry {
            database: "mysql://db1/appdb".into(),
            ..counts.entries[0].clone()
        });
        // A run that checks only `a`, which has no rows any more: a's entry goes, b's and
        // the other database's stay.
        let mut t = Tally::new(DB.into(), Some(counts));
        t.checked(&a);
        let kept = t.into_counts(100);
        let names: Vec<(&str, &str)> = kept
            .entries
            .iter()
            .map(|e| (e.database.as_str(), e.watch.as_str()))
            .collect();
        assert_eq!(names, [("mysql://db1/appdb", "a"), (DB, "b")]);
        // Twice max_age (1 h) later, nothing is kept.
        let t = Tally::new(DB.into(), Some(kept.clone()));
        assert_eq!(t.into_counts(7_200).entries.len(), 2);
        let t = Tally::new(DB.into(), Some(kept.clone()));
        assert!(t.into_counts(7_201).entries.is_empty());
        // Seen "later" than now (a run under a wrong clock): not kept for ever.
        let t = Tally::new(DB.into(), Some(kept));
        assert!(t.into_counts(-1).entries.is_empty());
    }

    #[test]
    fn database_keys_name_no_user() {
        let db = |url: &str| Database {
            url: DbUrl::parse(url).expect("url"),
            defaults_file: None,
            password_file: None,
            timezone: None,
        };
        assert_eq!(
            database_key(&db(
                "mysql://app@db1:3306/appdb?socket=/run/mysqld/mysqld.sock"
            )),
            "mysql://db1:3306/appdb?socket=/run/mysqld/mysqld.sock"
        );
        assert_eq!(
            database_key(&db("mysql://localhost/appdb")),
            "mysql://localhost/appdb"
        );
        assert_eq!(
            database_key(&db("sqlite:///var/lib/app.db")),
            "sqlite:///var/lib/app.db"
        );
    }

    #[test]
    fn the_file_round_trips_and_damage_is_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(load(dir.path()), Ok(None)));
        let w = watch("sync", 2);
        let mut t = Tally::new(DB.into(), None);
        t.count(
            &w,
            "7",
            "100",
            &d(Verdict::Hung, Basis::StaleButOwnerAlive),
            5,
        );
        let counts = t.into_counts(5);
        save(dir.path(), &counts).expect("save");
        assert_eq!(load(dir.path()).expect("load"), Some(counts));
        std::fs::write(dir.path().join(FILE.name), "{\"entries\": 3}").expect("damage");
        assert!(matches!(load(dir.path()), Err(Unread::Damaged(_))));
        std::fs::remove_file(dir.path().join(FILE.name)).expect("rm");
        std::fs::create_dir(dir.path().join(FILE.name)).expect("a directory in the way");
        assert!(matches!(load(dir.path()), Err(Unread::Failed(_))));
    }
}
