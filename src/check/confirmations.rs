//! The confirmation counts of docs/design.md#confirmation: how many consecutive real runs judged a row the same
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
//! is reset). Confirmation needs time as well as runs: a run that comes less than
//! `stale_after / 2` after the run it follows in the count neither counts nor resets (an
//! operator's hand run a second after cron's confirms nothing); a count stored in the
//! future (a run under a wrong clock) starts over.
//!
//! The same file times contradictions ([`Tally::contradiction`]): when a death signal first
//! met the row's own fresh heartbeat, so that a contradiction still standing `stale_after`
//! later goes to a person ([`crate::decide::persisting`]). Its entry lives while the
//! contradiction does (also once it went to a person), and goes with it. What is written back ([`Tally::into_counts`]) is this run's entries, every
//! entry of a watch this run did not check (not selected, another host's, busy) and of
//! another database, less those not seen for twice their watch's `max_age`.
//!
//! The same file keeps which watches' named locks (`db_lock`) proved themselves
//! ([`Tally::prove`], [`Tally::proven`]): a real run that saw one running row's name held,
//! under the very templates the watch names now, is remembered (by database, watch and
//! template text) until no run has seen one held for twice the watch's `max_age`. A
//! template proven so may find every job of its watch dead at once (a deploy killed the
//! workers); one never seen held may not (docs/design.md#no-named-lock).
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

use crate::config::{Database, Watch};
use crate::decide::{Basis, Confirmation, Decision, Verdict};
use crate::error::{Error, Result};
use crate::state::{self, StateFile};

use super::room::{Room, within_cap};

/// `confirmations.json`.
pub const FILE: StateFile = StateFile {
    name: "confirmations.json",
    opening: "opening confirmations.json",
    reading: "reading the confirmation counts",
    writing: "writing the confirmation counts",
    creating: "creating a temporary file for the confirmation counts",
};

/// The state file: every row with an inferred verdict, as the last real run left them,
/// selfheal's own first sighting of every row whose times lie in the future, and the
/// watches whose named lock templates were seen held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub entries: Vec<Entry>,
    /// Files written before sightings were kept have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sightings: Vec<Sighting>,
    /// Files written before named locks were proven have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proven: Vec<Proof>,
}

/// A watch one of whose running rows' `db_lock` names a real run saw held, under these
/// very templates: they name locks the application takes (docs/design.md#no-named-lock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Which database ([`database_key`]).
    pub database: String,
    pub watch: String,
    /// The watch's `db_lock` templates as written: an edited template proves itself again.
    pub db_lock: Vec<String>,
    /// When a real run last saw a name held (unix seconds, host clock).
    pub seen: i64,
    /// The watch's `max_age` then: a proof not renewed for twice that lapses.
    pub max_age_s: u64,
}

impl Proof {
    /// Renewed within twice its `max_age` of `now`, and not "later" than now (a run under
    /// a wrong clock proves nothing).
    fn lasts(&self, now: i64) -> bool {
        (0..=i64::try_from(self.max_age_s.saturating_mul(2)).unwrap_or(i64::MAX))
            .contains(&now.saturating_sub(self.seen))
    }
}

/// A watch's `db_lock` templates as written (what a [`Proof`] is keyed by).
fn templates(w: &Watch) -> Vec<String> {
    w.db_lock.iter().map(ToString::to_string).collect()
}

/// When selfheal first saw a row whose times lie in the future (docs/design.md#proof-means-proof, "Proof means
/// proof"): what stands in for the row's age in "older than `stale_after`".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sighting {
    /// Which database ([`database_key`]).
    pub database: String,
    pub watch: String,
    /// The row id, as the journal keys it.
    pub id: String,
    /// The start value as read.
    pub started: String,
    /// When a real run first saw it (unix seconds, host clock).
    pub first: i64,
    /// When the last real run saw it: a sighting not renewed for twice `max_age` is dropped.
    pub seen: i64,
    pub max_age_s: u64,
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
    /// For a contradiction (a death signal beside the row's own fresh heartbeat), when it
    /// was first seen (unix seconds, host clock); `None` for a count. Files written before
    /// contradictions were timed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
}

/// The database part of a key: the scheme and where it is (host and database, or the
/// file), never a user or password ([`DbIdentity::key`](crate::config::DbIdentity::key)).
pub fn database_key(db: &Database) -> String {
    db.url.identity().key()
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
    /// Sightings of other databases: kept as they are.
    other_sightings: Vec<Sighting>,
    /// This run's entries.
    now: HashMap<Key, Entry>,
    /// The watches this run checked: their old entries are replaced by this run's.
    checked: HashSet<String>,
    /// The file existed, or this run has something to write.
    existed: bool,
    /// Room for rows in the file, by watch: at most [`CAP`] each, across runs.
    room: Room<Key>,
    /// Rows this run could not count, by watch.
    over_cap: HashMap<String, u64>,
    /// The last real run's sightings of this database, and this run's.
    sightings_before: HashMap<Key, Sighting>,
    sightings_now: HashMap<Key, Sighting>,
    /// Room for sightings in the file, by watch: at most [`CAP`] each, across runs.
    sightings_room: Room<Key>,
    /// The last real run's proofs of this database, by watch (one each), and this run's.
    proofs_before: HashMap<String, Proof>,
    proofs_now: HashMap<String, Proof>,
    /// Proofs of other databases: kept as they are.
    other_proofs: Vec<Proof>,
}

/// At most this many rows of a watch are counted, and as many sightings kept, across runs
/// ([`Room`]: rows the last run counted keep their place, a new row takes one while there
/// is one): the state file, and the memory that holds it, stay bounded whatever the
/// backlog and however many runs see it (docs/design.md#paging). A row beyond it waits,
/// held as confirming, for a run with room; a file holding more (an older release's) is
/// cut to it when read. So are the named lock proofs, one per database and watch, in all.
pub const CAP: usize = 10_000;

/// What judging a row does to its entry.
enum Effect {
    /// Kept as the last run left it (a run too soon after it).
    Keep(Entry),
    /// Set to this.
    Set(Entry),
    /// Dropped (the count starts over).
    Remove,
    /// Left as this run has it (a contradiction's, timed apart).
    None,
}

impl Tally {
    /// A run's tally for `database`, from the counts read (empty for a first run).
    pub fn new(database: String, counts: Option<Counts>) -> Tally {
        let existed = counts.is_some();
        let mut before = HashMap::new();
        let mut others = Vec::new();
        let counts = counts.unwrap_or_default();
        let by_watch = |database: &str, watch: &str| (database.to_string(), watch.to_string());
        let entries = within_cap(counts.entries, CAP, |e| by_watch(&e.database, &e.watch));
        let sightings = within_cap(counts.sightings, CAP, |s| by_watch(&s.database, &s.watch));
        let mut sightings_before = HashMap::new();
        let mut other_sightings = Vec::new();
        for s in sightings {
            if s.database == database {
                sightings_before.insert((s.watch.clone(), s.id.clone(), s.started.clone()), s);
            } else {
                other_sightings.push(s);
            }
        }
        for e in entries {
            if e.database == database {
                before.insert((e.watch.clone(), e.id.clone(), e.started.clone()), e);
            } else {
                others.push(e);
            }
        }
        let mut proofs_before = HashMap::new();
        let mut other_proofs = Vec::new();
        // One per database and watch (the first of any others: a file grown by hand), and
        // no more than a run writes.
        let proofs = within_cap(counts.proven, 1, |p| by_watch(&p.database, &p.watch));
        for p in proofs.into_iter().take(CAP) {
            if p.database == database {
                proofs_before.insert(p.watch.clone(), p);
            } else {
                other_proofs.push(p);
            }
        }
        let room = Room::new(CAP, before.keys().map(|k| (k.0.as_str(), k.clone())));
        let sightings_room = Room::new(
            CAP,
            sightings_before.keys().map(|k| (k.0.as_str(), k.clone())),
        );
        Tally {
            database,
            before,
            others,
            now: HashMap::new(),
            checked: HashSet::new(),
            existed,
            room,
            over_cap: HashMap::new(),
            sightings_before,
            sightings_now: HashMap::new(),
            sightings_room,
            other_sightings,
            proofs_before,
            proofs_now: HashMap::new(),
            other_proofs,
        }
    }

    /// Records that this run saw a running row of `w` hold its `db_lock` name (`now`: unix
    /// seconds, host clock): its templates, as written now, are proven.
    pub fn prove(&mut self, w: &Watch, now: i64) {
        self.proofs_now.insert(
            w.name.clone(),
            Proof {
                database: self.database.clone(),
                watch: w.name.clone(),
                db_lock: templates(w),
                seen: now,
                max_age_s: w.max_age.as_secs(),
            },
        );
    }

    /// True when a real run (or this one) saw a running row of `w` hold its `db_lock` name
    /// under the templates `w` names now, within twice `max_age` of `now`.
    pub fn proven(&self, w: &Watch, now: i64) -> bool {
        self.proofs_now
            .get(&w.name)
            .or_else(|| self.proofs_before.get(&w.name))
            .is_some_and(|p| p.db_lock == templates(w) && p.lasts(now))
    }

    /// Records that a real run sees a row whose times lie in the future, running
    /// (`now`: unix seconds, host clock), and gives how long selfheal has seen it: since
    /// the first real run that did (0 for this one, and when that time lies in the future
    /// of `now`: a run under a wrong clock). A new row of a watch whose [`CAP`] sightings
    /// are taken is not kept (it stays at 0, so it never acts on its sighting).
    pub fn sighting(&mut self, w: &Watch, id: &str, started: &str, now: i64) -> u64 {
        self.checked(w);
        let key = (w.name.clone(), id.to_string(), started.to_string());
        let first = self.first_seen(&key, now);
        let had_place = self.sightings_room.seen(&w.name, &key);
        let known = self.sightings_now.contains_key(&key);
        if !known && !had_place && !self.sightings_room.has_room(&w.name) {
            return 0;
        }
        if !known {
            self.sightings_room.keep(&w.name);
        }
        self.sightings_now.insert(
            key,
            Sighting {
                database: self.database.clone(),
                watch: w.name.clone(),
                id: id.to_string(),
                started: started.to_string(),
                first,
                seen: now,
                max_age_s: w.max_age.as_secs(),
            },
        );
        now.saturating_sub(first).unsigned_abs()
    }

    /// What [`Tally::sighting`] would give, without recording (a first pass, a dry run).
    pub fn peek_sighting(&self, w: &Watch, id: &str, started: &str, now: i64) -> u64 {
        let key = (w.name.clone(), id.to_string(), started.to_string());
        now.saturating_sub(self.first_seen(&key, now))
            .unsigned_abs()
    }

    /// When a row was first seen by the last real runs (now when it was not, or when that
    /// time lies in the future).
    fn first_seen(&self, key: &Key, now: i64) -> i64 {
        self.sightings_now
            .get(key)
            .or_else(|| self.sightings_before.get(key))
            .map(|s| s.first)
            .filter(|f| *f <= now)
            .unwrap_or(now)
    }

    /// Counts one row judged this run (`now`: unix seconds, host clock): its confirmation
    /// when the verdict is inferred — one more than the last run's for the same inferred
    /// verdict, else 1 — and `None` (its count reset) when it is not. A run less than
    /// `stale_after / 2` after the one the count was last taken in neither counts nor
    /// resets: the entry stays as it was, and the row is shown with that count. A
    /// contradiction's entry ([`Tally::contradiction`]) stays while it stands. A watch with
    /// `confirm = 1` keeps no counts (every inferred verdict is confirmed at once); a new
    /// row of a watch whose [`CAP`] places are taken is not kept either, and so is held
    /// (confirming) until there is room.
    pub fn count(
        &mut self,
        w: &Watch,
        id: &str,
        started: &str,
        d: &Decision,
        now: i64,
    ) -> Option<Confirmation> {
        self.checked(w);
        let key = (w.name.clone(), id.to_string(), started.to_string());
        let (confirmation, effect) = self.counted(w, &key, d, now);
        let had_place = self.room.seen(&w.name, &key);
        match effect {
            Effect::Keep(e) | Effect::Set(e) => {
                if !self.put(w, key, e, had_place) {
                    *self.over_cap.entry(w.name.clone()).or_default() += 1;
                    return confirmation.map(|c| Confirmation { count: 1, ..c });
                }
            }
            Effect::Remove => self.take_out(w, &key),
            Effect::None => {}
        }
        confirmation
    }

    /// What [`Tally::count`] would give, without counting (a first pass over the rows).
    pub fn peek_count(
        &self,
        w: &Watch,
        id: &str,
        started: &str,
        d: &Decision,
        now: i64,
    ) -> Option<Confirmation> {
        let key = (w.name.clone(), id.to_string(), started.to_string());
        self.counted(w, &key, d, now).0
    }

    /// Keeps a row's entry, when it may be kept: a row this run keeps already, one the
    /// last run counted (`had_place`: its place held for it until now), or a new one while
    /// its watch has room ([`Room`]). False when it is not kept.
    fn put(&mut self, w: &Watch, key: Key, e: Entry, had_place: bool) -> bool {
        if let Some(kept) = self.now.get_mut(&key) {
            *kept = e;
            return true;
        }
        if !had_place && !self.room.has_room(&w.name) {
            return false;
        }
        self.room.keep(&w.name);
        self.now.insert(key, e);
        true
    }

    /// Drops a row's entry this run kept, freeing its place.
    fn take_out(&mut self, w: &Watch, key: &Key) {
        if self.now.remove(key).is_some() {
            self.room.let_go(&w.name);
        }
    }

    /// The rows of watch `w` this run could not count (beyond [`CAP`]): held until there
    /// is room.
    pub fn over_cap(&self, w: &Watch) -> u64 {
        self.over_cap.get(&w.name).copied().unwrap_or(0)
    }

    /// The confirmation of a row judged `d` this run, and what that does to its entry.
    fn counted(
        &self,
        w: &Watch,
        key: &Key,
        d: &Decision,
        now: i64,
    ) -> (Option<Confirmation>, Effect) {
        let confirmation = |count| Confirmation {
            count,
            confirm: w.confirm,
        };
        // The count the last real run left, unless it is from the future (a wrong clock).
        let before = self
            .before
            .get(key)
            .filter(|e| e.since.is_none() && e.seen <= now);
        let half = i64::try_from(w.stale_after.as_secs() / 2).unwrap_or(i64::MAX);
        if let Some(e) = before.filter(|e| now - e.seen < half) {
            let count = if e.verdict == d.verdict { e.count } else { 1 };
            return (
                d.inferred().then_some(confirmation(count)),
                Effect::Keep(e.clone()),
            );
        }
        if !d.inferred() {
            let standing = matches!(
                d.basis,
                Basis::Contradicted(_) | Basis::ContradictionPersists(_)
            );
            return (
                None,
                if standing {
                    Effect::None
                } else {
                    Effect::Remove
                },
            );
        }
        if w.confirm <= 1 {
            return (Some(confirmation(1)), Effect::Remove);
        }
        let before = before
            .filter(|e| e.verdict == d.verdict)
            .map_or(0, |e| e.count);
        // Never more than the watch needs: the number stays meaningful if `confirm` is
        // lowered, and small.
        let count = before.saturating_add(1).min(w.confirm);
        (
            Some(confirmation(count)),
            Effect::Set(Entry {
                database: self.database.clone(),
                watch: w.name.clone(),
                id: key.1.clone(),
                started: key.2.clone(),
                verdict: d.verdict,
                count,
                seen: now,
                max_age_s: w.max_age.as_secs(),
                since: None,
            }),
        )
    }

    /// Times a contradiction ([`Basis::Contradicted`], or one already gone to a person as
    /// [`Basis::ContradictionPersists`]): how many seconds ago it was first seen, by the
    /// last real runs that saw it without a break (0 when this run is the first, or when
    /// the stored time is in the future); `None` for any other decision, whose timing then
    /// starts over.
    pub fn contradiction(
        &mut self,
        w: &Watch,
        id: &str,
        started: &str,
        d: &Decision,
        now: i64,
    ) -> Option<u64> {
        if !d.contradicted() {
            return None;
        }
        self.checked(w);
        let key = (w.name.clone(), id.to_string(), started.to_string());
        let since = self.since(&key, now);
        let had_place = self.room.seen(&w.name, &key);
        self.put(
            w,
            key,
            Entry {
                database: self.database.clone(),
                watch: w.name.clone(),
                id: id.to_string(),
                started: started.to_string(),
                verdict: d.verdict,
                count: 0,
                seen: now,
                max_age_s: w.max_age.as_secs(),
                since: Some(since),
            },
            had_place,
        );
        Some(now.saturating_sub(since).unsigned_abs())
    }

    /// What [`Tally::contradiction`] would give, without timing (a first pass).
    pub fn peek_contradiction(
        &self,
        w: &Watch,
        id: &str,
        started: &str,
        d: &Decision,
        now: i64,
    ) -> Option<u64> {
        d.contradicted().then(|| {
            let key = (w.name.clone(), id.to_string(), started.to_string());
            now.saturating_sub(self.since(&key, now)).unsigned_abs()
        })
    }

    /// When a row's contradiction was first seen, by the last real run (now when it was
    /// not, or when that time is in the future).
    fn since(&self, key: &Key, now: i64) -> i64 {
        self.before
            .get(key)
            .and_then(|e| e.since)
            .filter(|s| *s <= now)
            .unwrap_or(now)
    }

    /// Forgets a row this run wrote (it is no longer running).
    pub fn forget(&mut self, w: &Watch, id: &str, started: &str) {
        self.take_out(w, &(w.name.clone(), id.to_string(), started.to_string()));
    }

    /// Marks a watch as checked this run (its old entries are replaced by this run's; also
    /// for a watch that had no rows), without a copy of its name for every row.
    pub fn checked(&mut self, w: &Watch) {
        if !self.checked.contains(&w.name) {
            self.checked.insert(w.name.clone());
        }
    }

    /// True when there is anything to write: a file to keep up to date, or a first entry.
    pub fn worth_writing(&self) -> bool {
        self.existed
            || !self.now.is_empty()
            || !self.sightings_now.is_empty()
            || !self.proofs_now.is_empty()
    }

    /// What to write back (`now`: unix seconds, host clock): this run's entries, the old
    /// entries of watches it did not check and of other databases, less those not seen
    /// for twice their `max_age`; the proofs this run renewed, and the others until they
    /// lapse (twice `max_age`: a watch not seen holding a name for that long proves itself
    /// again); in a stable order.
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
        let seen_lately = |s: &Sighting| {
            (0..=i64::try_from(s.max_age_s.saturating_mul(2)).unwrap_or(i64::MAX))
                .contains(&now.saturating_sub(s.seen))
        };
        let mut sightings: Vec<Sighting> = self
            .sightings_before
            .into_values()
            .filter(|s| !self.checked.contains(&s.watch))
            .chain(self.other_sightings)
            .chain(self.sightings_now.into_values())
            .filter(seen_lately)
            .collect();
        sightings.sort_by(|a, b| {
            (&a.database, &a.watch, &a.id, &a.started).cmp(&(
                &b.database,
                &b.watch,
                &b.id,
                &b.started,
            ))
        });
        entries.sort_by(|a, b| {
            (&a.database, &a.watch, &a.id, &a.started).cmp(&(
                &b.database,
                &b.watch,
                &b.id,
                &b.started,
            ))
        });
        let mut by_watch = self.proofs_before;
        by_watch.extend(self.proofs_now);
        let mut proofs: Vec<Proof> = by_watch
            .into_values()
            .chain(self.other_proofs)
            .filter(|p| p.lasts(now))
            .collect();
        // The latest renewed first, and no more than the file keeps.
        proofs.sort_by_key(|p| std::cmp::Reverse(p.seen));
        proofs.truncate(CAP);
        proofs.sort_by(|a, b| (&a.database, &a.watch).cmp(&(&b.database, &b.watch)));
        Counts {
            entries,
            sightings,
            proven: proofs,
        }
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
    use crate::config::{DbUrl, Overrides, from_str};
    use crate::decide::{Basis, Signal};

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
        Decision::new(verdict, basis)
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

    /// docs/design.md#verdicts: a run less than `stale_after / 2` (here 150 s) after the run it follows
    /// in the count neither counts nor resets — cron plus an operator's hand run a second
    /// later confirm nothing — and a count stored in the future starts over.
    #[test]
    fn confirmation_needs_time_as_well_as_runs() {
        let w = watch("sync", 2);
        let silent = d(Verdict::Dead, Basis::HeartbeatStale);
        let alive = d(Verdict::Alive, Basis::HeartbeatFresh);
        let hung = d(Verdict::Hung, Basis::StaleButLockHeld);
        let c = |count| Some(Confirmation { count, confirm: 2 });
        let run = |counts: Option<Counts>, dd: &Decision, now| {
            let mut t = Tally::new(DB.into(), counts);
            let got = t.count(&w, "7", "100", dd, now);
            (got, t.into_counts(now))
        };

        let (got, first) = run(None, &silent, 1_000);
        assert_eq!(got, c(1));
        // One second later: not counted.
        let (got, early) = run(Some(first.clone()), &silent, 1_001);
        assert_eq!(got, c(1));
        assert_eq!(early, first, "the entry stays as it was");
        // Just under half of stale_after: still not counted.
        let (got, _) = run(Some(first.clone()), &silent, 1_149);
        assert_eq!(got, c(1));
        // From half of stale_after on: counted.
        let (got, _) = run(Some(first.clone()), &silent, 1_150);
        assert_eq!(got, c(2));
        // An early run that sees it alive does not reset it, nor does another verdict.
        let (got, after_alive) = run(Some(first.clone()), &alive, 1_010);
        assert_eq!(got, None);
        assert_eq!(after_alive, first);
        let (got, after_hung) = run(Some(first.clone()), &hung, 1_020);
        assert_eq!(got, c(1));
        assert_eq!(after_hung, first);
        let (got, _) = run(Some(after_hung), &silent, 1_300);
        assert_eq!(got, c(2), "the run 300 s after the first counts");
        // Many quick runs in a row never confirm it.
        let mut counts = first.clone();
        for now in 1_001..1_100 {
            let (got, next) = run(Some(counts), &silent, now);
            assert_eq!(got, c(1), "at {now}");
            counts = next;
        }
        // A count stored in the future (a run under a wrong clock) starts over.
        let (got, _) = run(Some(first), &silent, 900);
        assert_eq!(got, c(1));
    }

    /// A contradiction is timed from the first real run that saw it, across runs, while it
    /// stands (also once it went to a person); any other verdict ends it, and a time in the
    /// future starts it over.
    #[test]
    fn a_contradiction_is_timed_while_it_stands() {
        let w = watch("sync", 2);
        let contradicted = d(Verdict::Dead, Basis::Contradicted(Signal::OwnerDead));
        let persists = d(
            Verdict::Unknown,
            Basis::ContradictionPersists(Signal::OwnerDead),
        );
        let dead = d(Verdict::Dead, Basis::OwnerDead);
        let step = |counts: Option<Counts>, dd: &Decision, now| {
            let mut t = Tally::new(DB.into(), counts);
            let since = t.contradiction(&w, "7", "100", dd, now);
            assert_eq!(t.count(&w, "7", "100", dd, now), None);
            (since, t.into_counts(now))
        };
        let (since, c1) = step(None, &contradicted, 1_000);
        assert_eq!(since, Some(0));
        assert_eq!(c1.entries.len(), 1);
        let (since, c2) = step(Some(c1.clone()), &contradicted, 1_200);
        assert_eq!(since, Some(200));
        let (since, c3) = step(Some(c2), &contradicted, 1_300);
        assert_eq!(since, Some(300));
        // Gone to a person: still timed from the start, still kept.
        let mut t = Tally::new(DB.into(), Some(c3));
        assert_eq!(
            t.contradiction(&w, "7", "100", &contradicted, 1_400),
            Some(400)
        );
        assert_eq!(t.count(&w, "7", "100", &persists, 1_400), None);
        let c4 = t.into_counts(1_400);
        assert_eq!(c4.entries.len(), 1);
        // The heartbeat went stale: a conclusive death; the timing ends with it.
        let (since, c5) = step(Some(c4), &dead, 1_500);
        assert_eq!(since, None);
        assert!(c5.entries.is_empty());
        // A time in the future starts over.
        let (since, _) = step(Some(c1), &contradicted, 900);
        assert_eq!(since, Some(0));
    }

    /// The counts stay bounded whatever the backlog, across runs: at most [`CAP`] rows of a
    /// watch; the rest are held (count 1, never confirmed) and counted as over the cap,
    /// while a row the last run counted keeps its place. A first pass only peeks.
    #[test]
    fn a_backlog_is_counted_up_to_the_cap_and_the_rest_waits() {
        let w = watch("sync", 2);
        let silent = d(Verdict::Dead, Basis::HeartbeatStale);
        let mut t = Tally::new(DB.into(), None);
        let n = CAP + 5;
        for id in 0..n {
            assert_eq!(
                t.peek_count(&w, &id.to_string(), "s", &silent, 1_000),
                Some(Confirmation {
                    count: 1,
                    confirm: 2
                })
            );
            t.count(&w, &id.to_string(), "s", &silent, 1_000);
        }
        assert_eq!(t.over_cap(&w), 5);
        let first = t.into_counts(1_000);
        assert_eq!(first.entries.len(), CAP);
        // The same backlog, run after run, never written (a dry watch, say): the file
        // stays at the cap, the counted rows keep their places and their counts.
        let mut counts = first;
        for run in 1..=10 {
            let mut t = Tally::new(DB.into(), Some(counts));
            for id in (0..n).rev() {
                t.count(&w, &id.to_string(), "s", &silent, 1_000 + run * 300);
            }
            assert_eq!(t.over_cap(&w), 5, "run {run}");
            counts = t.into_counts(1_000 + run * 300);
            assert_eq!(counts.entries.len(), CAP, "run {run}");
            assert!(
                counts
                    .entries
                    .iter()
                    .all(|e| e.id.parse::<usize>().unwrap() < CAP)
            );
        }
        // Now the counted rows are confirmed and written: their places go to the five
        // that waited, in the same run.
        let mut t = Tally::new(DB.into(), Some(counts));
        for id in 0..CAP {
            let c = t.count(&w, &id.to_string(), "s", &silent, 5_000);
            assert_eq!(c.map(|c| c.count), Some(2));
            t.forget(&w, &id.to_string(), "s");
        }
        for id in CAP..n {
            t.count(&w, &id.to_string(), "s", &silent, 5_000);
        }
        assert_eq!(t.over_cap(&w), 0);
        // A peek changes nothing.
        let before = t.clone().into_counts(5_000);
        let _ = t.peek_count(&w, "new", "s", &silent, 5_000);
        assert_eq!(t.into_counts(5_000), before);
        assert_eq!(before.entries.len(), 5);
    }

    /// A file holding more than [`CAP`] rows of a watch (an older release kept more) is
    /// cut to it when read.
    #[test]
    fn a_file_over_the_cap_is_cut_when_read() {
        let w = watch("sync", 2);
        let silent = d(Verdict::Dead, Basis::HeartbeatStale);
        let mut t = Tally::new(DB.into(), None);
        for id in 0..CAP {
            t.count(&w, &id.to_string(), "s", &silent, 1_000);
        }
        let mut counts = t.into_counts(1_000);
        let more: Vec<Entry> = counts
            .entries
            .iter()
            .map(|e| Entry {
                id: format!("{}x", e.id),
                ..e.clone()
            })
            .collect();
        counts.entries.extend(more);
        let t = Tally::new(DB.into(), Some(counts));
        assert_eq!(t.into_counts(1_000).entries.len(), CAP);
    }

    /// A state file written by the release before contradictions were timed (no `since`)
    /// is read as counts.
    #[test]
    fn a_file_without_contradictions_is_read() {
        let old = r#"{"entries":[{"database":"sqlite:///tmp/app.db","watch":"sync","id":"7","started":"100","verdict":"dead","count":1,"seen":1000,"max_age_s":3600}]}"#;
        let counts: Counts = serde_json::from_str(old).expect("old file");
        assert_eq!(counts.entries[0].since, None);
        let w = watch("sync", 2);
        let mut t = Tally::new(DB.into(), Some(counts));
        assert_eq!(
            t.count(
                &w,
                "7",
                "100",
                &d(Verdict::Dead, Basis::HeartbeatStale),
                1_300
            ),
            Some(Confirmation {
                count: 2,
                confirm: 2
            })
        );
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
            url_origin: crate::error::Origin::CommandLine,
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

    /// A watch naming `db_lock` (one template, or a list), `max_age` 1 h.
    fn named_watch(name: &str, db_lock: &str) -> Watch {
        let text = format!(
            "[database]\nurl = \"mysql://localhost/shop\"\n\n[[watch]]\nname = \"{name}\"\n\
             table = \"cron_schedule\"\nstarted_column = \"executed_at\"\n\
             db_lock = {db_lock}\nstale_after = \"2m\"\nmax_age = \"1h\"\n"
        );
        from_str(&text, Path::new("/x.toml"), &Overrides::default(), &[])
            .expect("valid")
            .watches
            .remove(0)
    }

    const SHOP: &str = "mysql://localhost/shop";

    /// docs/design.md#no-named-lock: a name seen held proves the watch's templates, as
    /// written, across runs — until no run has seen one held for twice `max_age` (here
    /// 2 h); an edited template proves itself again; a proof from the future is none.
    #[test]
    fn a_named_lock_seen_held_proves_its_template_until_it_lapses() {
        let w = named_watch("magento-cron", "\"{database}|CRON_{md5:index_{job_code}}\"");
        let t = Tally::new(SHOP.into(), None);
        assert!(!t.proven(&w, 1_000), "never seen held");
        assert!(!t.worth_writing());

        // Run 1 sees a name held: proven now, and kept.
        let mut t = Tally::new(SHOP.into(), None);
        t.prove(&w, 1_000);
        assert!(t.proven(&w, 1_000));
        assert!(t.worth_writing());
        let run1 = t.into_counts(1_000);
        assert_eq!(run1.proven.len(), 1);
        assert_eq!(
            run1.proven[0].db_lock,
            ["{database}|CRON_{md5:index_{job_code}}"]
        );

        // Later runs that see none held: proven while the last sighting is at most 2 h old.
        for now in [1_600, 4_000, 1_000 + 7_200] {
            let t = Tally::new(SHOP.into(), Some(run1.clone()));
            assert!(t.proven(&w, now), "at {now}");
            assert_eq!(t.into_counts(now).proven.len(), 1, "kept at {now}");
        }
        let t = Tally::new(SHOP.into(), Some(run1.clone()));
        assert!(!t.proven(&w, 1_000 + 7_201), "lapsed");
        assert!(t.into_counts(1_000 + 7_201).proven.is_empty(), "dropped");

        // A run that sees one held again renews it.
        let mut t = Tally::new(SHOP.into(), Some(run1.clone()));
        t.prove(&w, 5_000);
        let run2 = t.into_counts(5_000);
        assert_eq!(run2.proven.len(), 1);
        assert_eq!(run2.proven[0].seen, 5_000);
        assert!(Tally::new(SHOP.into(), Some(run2.clone())).proven(&w, 5_000 + 7_200));

        // An edited template is not proven by the old one's sighting; once seen held, it
        // takes the watch's place.
        let edited = named_watch(
            "magento-cron",
            "[\"{database}|CRON_{md5:index_{job_code}}\", \"{database}|CRON_{md5:default_{job_code}}\"]",
        );
        let mut t = Tally::new(SHOP.into(), Some(run2.clone()));
        assert!(!t.proven(&edited, 5_600));
        assert!(t.proven(&w, 5_600), "the old template, were it back");
        t.prove(&edited, 5_600);
        assert!(t.proven(&edited, 5_600));
        let run3 = t.into_counts(5_600);
        assert_eq!(run3.proven.len(), 1, "one per database and watch");
        assert_eq!(run3.proven[0].db_lock.len(), 2);

        // Another watch, another database: each its own.
        let other = named_watch("other", "\"job_{id}\"");
        assert!(!Tally::new(SHOP.into(), Some(run3.clone())).proven(&other, 5_600));
        let t = Tally::new("mysql://db2/shop".into(), Some(run3.clone()));
        assert!(!t.proven(&edited, 5_600), "another database's proof");
        assert_eq!(t.into_counts(5_600).proven, run3.proven, "kept as it is");

        // Seen "later" than now (a run under a wrong clock): no proof, and dropped.
        let t = Tally::new(SHOP.into(), Some(run3.clone()));
        assert!(!t.proven(&edited, 5_000));
        assert!(t.into_counts(5_000).proven.is_empty());
    }

    /// The proofs round trip through the file; a file without them (an earlier release's)
    /// reads as none; one holding several for one watch (grown by hand) keeps the first.
    #[test]
    fn proofs_round_trip_and_an_older_file_has_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = named_watch("magento-cron", "\"{database}|CRON_{md5:index_{job_code}}\"");
        let mut t = Tally::new(SHOP.into(), None);
        t.prove(&w, 100);
        let counts = t.into_counts(100);
        save(dir.path(), &counts).expect("save");
        let read = load(dir.path()).expect("load").expect("a file");
        assert_eq!(read, counts);
        assert!(Tally::new(SHOP.into(), Some(read)).proven(&w, 200));

        std::fs::write(dir.path().join(FILE.name), "{\"entries\": []}").expect("older");
        let read = load(dir.path()).expect("load").expect("a file");
        assert!(read.proven.is_empty());
        assert!(!Tally::new(SHOP.into(), Some(read)).proven(&w, 200));

        let mut twice = counts.clone();
        let mut stale = twice.proven[0].clone();
        stale.db_lock = vec!["wrong_{id}".into()];
        twice.proven.insert(0, stale);
        let t = Tally::new(SHOP.into(), Some(twice));
        assert!(!t.proven(&w, 200), "the first of the two is kept");
        assert_eq!(t.into_counts(200).proven.len(), 1);
    }
}
