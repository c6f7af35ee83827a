//! The recent-runs read of the `max_age` check (docs/design.md#error-rate), kept across
//! runs: what the latest [`crate::history::RECENT_ROWS`] rows of a watch said
//! ([`RecentRuns`]: how many runs ended well, the longest of them), not the warning. The
//! warning is made from the kept runs and the watch's `max_age` of this run, every run, so a
//! raised `max_age` silences it at once.
//!
//! An [`Entry`] per database (as the reminders name it) and watch, in
//! `state_dir/run-state.json` ([`super::streak`]). It holds the [`Key`] it was read under —
//! everything the read depends on besides the rows themselves — and when it was read
//! (`read_at`, host clock). It is used while it is fresh: the same key, read less than
//! [`FRESH_FOR_S`] ago and not "later" than now (a run under a wrong clock). Otherwise the
//! rows are read again. So the rows are read at most once per [`FRESH_FOR_S`] per watch, and
//! a run that ended well is seen by the warning at most that much later.
//!
//! Bounded: one entry per database and watch; an entry not read again for
//! [`KEEP_UNREAD_S`] (a watch no run checks any more) is dropped; at most [`KEPT`] entries in
//! all, the latest read kept; an id longer than [`ID_KEPT_AT_MOST`] characters of JSON is
//! never kept (its watch is read every run).
//!
//! Pure: the caller passes the current time in.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Watch;
use crate::history::RecentRuns;
use crate::store::Schema;

use super::room::within_cap;

/// How long a read of a watch's latest rows is used instead of reading them again: a few
/// cron periods, short beside the runs the warning is about (`max_age` is hours where it
/// matters). A run that ended well is seen at most this much later.
pub const FRESH_FOR_S: i64 = 15 * 60;

/// An entry not read again for this long (its watch is no longer checked) is dropped, as
/// reminders of watches not checked are.
pub const KEEP_UNREAD_S: i64 = super::remind::KEEP_UNSEEN_S;

/// At most this many entries in all, the latest read kept.
pub const KEPT: usize = 1_000;

/// The longest row id kept, as JSON text: a longer one is read again every run, so that an
/// entry's size is bounded.
pub const ID_KEPT_AT_MOST: usize = 1_024;

/// Everything the read of a watch's latest rows depends on besides the rows: where they
/// are and how they are read (the table, the id, start, end and status columns, the
/// declared types of start and end, the time zone naive times are placed in), which of them
/// are the watch's (`match`, `running_value`) and which ended well (`success_values`, or
/// without them the statuses selfheal writes). An entry read under another key is stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub table: String,
    pub id_column: String,
    pub started_column: String,
    pub ended_column: String,
    pub status_column: String,
    /// The declared types of the start and end columns, as the schema gives them.
    pub started_type: String,
    pub ended_type: String,
    /// `[database] timezone`, where naive times are placed by it.
    pub timezone: Option<String>,
    /// `match`: column and value, in order.
    pub matches: Vec<(String, String)>,
    pub running_value: String,
    pub success_values: Option<Vec<String>>,
    /// Without `success_values`: the statuses besides `running_value` that are no
    /// success (`dead_value`, `manual_value`, `retry_value`); empty with them.
    pub not_success: Vec<String>,
}

impl Key {
    /// The key of a read of `w`'s latest rows now: its configuration, the schema read this
    /// run, and the configured time zone.
    pub fn of(w: &Watch, schema: &Schema, timezone: Option<&str>) -> Key {
        let declared = |c: &crate::config::Ident| {
            schema
                .columns
                .get(&c.name().to_ascii_lowercase())
                .map(|c| c.declared.clone())
                .unwrap_or_default()
        };
        let not_success = match &w.success_values {
            Some(_) => Vec::new(),
            None => std::iter::once(w.dead_value.clone())
                .chain(w.manual_value.clone())
                .chain(w.retry.as_ref().map(|r| r.value.clone()))
                .collect(),
        };
        Key {
            table: w.table.to_string(),
            id_column: w.id_column.to_string(),
            started_column: w.started_column.to_string(),
            ended_column: w
                .ended_column
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            status_column: w.status_column.to_string(),
            started_type: declared(&w.started_column),
            ended_type: w.ended_column.as_ref().map(declared).unwrap_or_default(),
            timezone: timezone.map(str::to_string),
            matches: w
                .matches
                .iter()
                .map(|(c, v)| (c.to_string(), v.clone()))
                .collect(),
            running_value: w.running_value.clone(),
            success_values: w.success_values.clone(),
            not_success,
        }
    }
}

/// The longest run that ended well among the rows read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Longest {
    pub secs: u64,
    pub id: Value,
}

/// One watch's read of its latest rows, as a real run kept it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The database as the reminders name it.
    pub database: String,
    pub watch: String,
    pub key: Key,
    /// When the rows were read (unix seconds, host clock).
    pub read_at: i64,
    /// Runs that ended well among them.
    pub runs: u64,
    /// The longest of them; `None` when none ended well.
    pub longest: Option<Longest>,
}

impl Entry {
    /// An entry for what a read at `now` found, unless its id is too long to keep.
    pub fn new(database: &str, watch: &str, key: Key, now: i64, r: &RecentRuns) -> Option<Entry> {
        let longest = match &r.longest {
            Some((_, id)) if id.to_string().len() > ID_KEPT_AT_MOST => return None,
            Some((secs, id)) => Some(Longest {
                secs: *secs,
                id: id.clone(),
            }),
            None => None,
        };
        Some(Entry {
            database: database.to_string(),
            watch: watch.to_string(),
            key,
            read_at: now,
            runs: r.runs,
            longest,
        })
    }

    /// What the read found.
    pub fn runs(&self) -> RecentRuns {
        RecentRuns {
            runs: self.runs,
            longest: self.longest.as_ref().map(|l| (l.secs, l.id.clone())),
        }
    }
}

/// True while a read at `read_at` may be used at `now`: less than [`FRESH_FOR_S`] ago,
/// and not "later" than now.
pub fn fresh(read_at: i64, now: i64) -> bool {
    (0..FRESH_FOR_S).contains(&now.saturating_sub(read_at))
}

/// The fresh read of `watch` of `database` under `key`, if there is one.
pub fn find(
    entries: &[Entry],
    database: &str,
    watch: &str,
    key: &Key,
    now: i64,
) -> Option<RecentRuns> {
    entries
        .iter()
        .find(|e| e.database == database && e.watch == watch)
        .filter(|e| e.key == *key && fresh(e.read_at, now))
        .map(Entry::runs)
}

/// Keeps `entry` in place of its watch's earlier one (at the end when there was none).
pub fn keep(entries: &mut Vec<Entry>, entry: Entry) {
    match entries
        .iter_mut()
        .find(|e| e.database == entry.database && e.watch == entry.watch)
    {
        Some(e) => *e = entry,
        None => entries.push(entry),
    }
}

/// The entries a file holds, bounded: the first of each database and watch, none read
/// [`KEEP_UNREAD_S`] or more before `now` (nor "later" than now: a read under a wrong clock
/// is read again anyway), at most [`KEPT`], the latest read kept, in the order given.
pub fn bounded(entries: Vec<Entry>, now: i64) -> Vec<Entry> {
    let mut entries = within_cap(entries, 1, |e| (e.database.clone(), e.watch.clone()));
    entries.retain(|e| (0..KEEP_UNREAD_S).contains(&now.saturating_sub(e.read_at)));
    if entries.len() > KEPT {
        let mut reads: Vec<i64> = entries.iter().map(|e| e.read_at).collect();
        reads.sort_unstable_by(|a, b| b.cmp(a));
        let oldest_kept = reads[KEPT - 1];
        // Of reads at the oldest time kept, the first in the file.
        let mut at_oldest = KEPT
            - reads
                .iter()
                .take(KEPT)
                .filter(|r| **r > oldest_kept)
                .count();
        entries.retain(|e| {
            if e.read_at > oldest_kept {
                true
            } else if e.read_at == oldest_kept && at_oldest > 0 {
                at_oldest -= 1;
                true
            } else {
                false
            }
        });
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fmt::Write as _;

    const DB: &str = "mysql://app@db1/appdb";

    /// The watch of docs/design.md's example, with `extra` in place of the keys it names.
    fn watch(extra: &str) -> Watch {
        let mut text = String::from("[database]\nurl = \"sqlite:///x.db\"\n[[watch]]\n");
        for (k, v) in [
            ("name", "\"full-sync\""),
            ("table", "\"sync_log\""),
            ("id_column", "\"id\""),
            ("status_column", "\"status\""),
            ("running_value", "\"running\""),
            ("started_column", "\"start_time\""),
            ("ended_column", "\"end_time\""),
            ("heartbeat_column", "\"beat\""),
            ("stale_after", "\"5m\""),
            ("max_age", "\"4h\""),
            ("dead_value", "\"dead\""),
        ] {
            if !extra.lines().any(|l| l.starts_with(&format!("{k} "))) {
                let _ = writeln!(text, "{k} = {v}");
            }
        }
        text.push_str(extra);
        text.push('\n');
        let overrides = crate::config::Overrides::default();
        crate::config::from_str(&text, std::path::Path::new("/x.toml"), &overrides, &[])
            .unwrap_or_else(|e| panic!("{extra}: {e:?}"))
            .watches
            .remove(0)
    }

    fn schema() -> Schema {
        Schema {
            message_max: None,
            ended: None,
            retry_at: None,
            columns: std::collections::HashMap::new(),
            id_is_primary: true,
        }
    }

    fn key() -> Key {
        Key::of(&watch(""), &schema(), None)
    }

    fn entry(watch: &str, read_at: i64) -> Entry {
        let runs = RecentRuns {
            runs: 3,
            longest: Some((7_200, json!(42))),
        };
        Entry::new(DB, watch, key(), read_at, &runs).expect("kept")
    }

    #[test]
    fn a_read_is_fresh_for_fifteen_minutes_and_never_from_the_future() {
        assert_eq!(FRESH_FOR_S, 900);
        assert!(fresh(1_000, 1_000));
        assert!(fresh(1_000, 1_000 + FRESH_FOR_S - 1));
        assert!(
            !fresh(1_000, 1_000 + FRESH_FOR_S),
            "15 minutes on: read again"
        );
        assert!(!fresh(1_000, 999), "read 'later' than now: a wrong clock");
        assert!(!fresh(i64::MAX, i64::MIN), "no overflow");
        assert!(!fresh(i64::MIN, i64::MAX), "no overflow");
    }

    #[test]
    fn a_fresh_entry_under_the_same_key_is_found() {
        let entries = vec![entry("full-sync", 1_000)];
        let found = find(&entries, DB, "full-sync", &key(), 1_500).expect("fresh");
        assert_eq!(found.runs, 3);
        assert_eq!(found.longest, Some((7_200, json!(42))));
        assert_eq!(
            find(&entries, DB, "other", &key(), 1_500),
            None,
            "another watch"
        );
        assert_eq!(
            find(&entries, "sqlite:///x.db", "full-sync", &key(), 1_500),
            None,
            "another database"
        );
        let other = Key {
            table: "other_log".into(),
            ..key()
        };
        assert_eq!(
            find(&entries, DB, "full-sync", &other, 1_500),
            None,
            "another key"
        );
        assert_eq!(
            find(&entries, DB, "full-sync", &key(), 1_900),
            None,
            "stale"
        );
        assert_eq!(find(&entries, DB, "full-sync", &key(), 900), None, "future");
    }

    /// Every setting the read depends on changes the key; `max_age` and the other
    /// thresholds do not (the warning is made from them every run).
    #[test]
    fn the_key_is_what_the_read_depends_on() {
        let key = key();
        assert_eq!(key.not_success, ["dead"], "without success_values");
        for same in [
            "max_age = \"8h\"",
            "stale_after = \"10m\"",
            "confirm = 3",
            "message_column = \"msg\"",
            "overtime = \"report\"",
        ] {
            assert_eq!(Key::of(&watch(same), &schema(), None), key, "{same}");
        }
        for other in [
            "success_values = [\"done\"]",
            "dead_value = \"failed\"",
            "manual_value = \"wait_manual\"",
            "retry_value = \"queued\"\nattempts_column = \"attempts\"\nmax_attempts = 3",
            "match = { kind = \"full\" }",
            "ended_column = \"finished_at\"",
            "running_value = \"busy\"",
            "id_column = \"job_id\"",
            "started_column = \"begun\"",
            "status_column = \"state\"",
            "table = \"other_log\"",
        ] {
            assert_ne!(Key::of(&watch(other), &schema(), None), key, "{other}");
        }
        // With success_values, the statuses selfheal writes decide nothing.
        let listed = Key::of(&watch("success_values = [\"done\"]"), &schema(), None);
        let listed_other_dead = Key::of(
            &watch("success_values = [\"done\"]\ndead_value = \"failed\""),
            &schema(),
            None,
        );
        assert_eq!(listed, listed_other_dead);
        assert_ne!(Key::of(&watch(""), &schema(), Some("Asia/Shanghai")), key);
        let mut typed = schema();
        typed.columns.insert(
            "end_time".into(),
            crate::store::types::Column {
                declared: "int".into(),
                ty: crate::store::types::ColumnType::Integer,
                length: None,
                enforced: true,
                on_update_now: false,
            },
        );
        assert_ne!(
            Key::of(&watch(""), &typed, None),
            key,
            "the end column's type"
        );
    }

    #[test]
    fn one_entry_per_watch_replaced_by_the_next_read() {
        let mut entries = vec![entry("a", 100)];
        keep(&mut entries, entry("b", 200));
        keep(&mut entries, entry("a", 300));
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].watch.as_str(), entries[0].read_at), ("a", 300));
        // A file grown by hand: the first of each watch is kept.
        let mut twice = entries.clone();
        twice.push(entry("a", 350));
        assert_eq!(bounded(twice, 400), entries);
    }

    #[test]
    fn entries_not_read_for_thirty_days_or_from_the_future_are_dropped() {
        let now = 10_000_000;
        let entries = vec![
            entry("old", now - KEEP_UNREAD_S),
            entry("kept", now - KEEP_UNREAD_S + 1),
            entry("future", now + 1),
        ];
        let kept = bounded(entries, now);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].watch, "kept");
    }

    #[test]
    fn at_most_kept_entries_the_latest_read_kept_in_their_order() {
        let now = 10_000_000;
        // KEPT + 10 entries read a second apart, the oldest last; two read at the cut.
        let mut entries: Vec<Entry> = (0..KEPT + 10)
            .map(|i| entry(&format!("w{i}"), now - i64::try_from(i).expect("small")))
            .collect();
        entries[KEPT].read_at = entries[KEPT - 1].read_at;
        let kept = bounded(entries.clone(), now);
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[..], entries[..KEPT]);
        // Shuffled order is kept as it was.
        entries.reverse();
        let kept = bounded(entries.clone(), now);
        assert_eq!(kept.len(), KEPT);
        assert!(kept.iter().all(|e| e.read_at >= now - 999), "the latest");
        // Of the two read at the cut, the first in the file's order.
        assert_eq!(kept[0].watch, format!("w{KEPT}"));
        assert!(!kept.iter().any(|e| e.watch == format!("w{}", KEPT - 1)));
    }

    #[test]
    fn a_long_id_is_not_kept() {
        let long = RecentRuns {
            runs: 1,
            longest: Some((60, json!("x".repeat(ID_KEPT_AT_MOST)))),
        };
        assert_eq!(Entry::new(DB, "w", key(), 0, &long), None);
        let none = RecentRuns {
            runs: 0,
            longest: None,
        };
        let e = Entry::new(DB, "w", key(), 0, &none).expect("kept");
        assert_eq!(e.runs(), none);
    }
}
