//! Room in a state file for one watch's rows, across runs (docs/design.md#paging): the
//! rows the last run kept that this run has not seen yet, plus the rows this run keeps,
//! are never more than a cap. A row the last run kept always keeps its place (it only
//! moves from the one side to the other); a new row takes a place only while there is
//! one. So a backlog that stays puts at most the cap in the file, however many runs see
//! it, and a row that leaves frees its place for the next run's new rows.
//!
//! Pure bookkeeping: the caller says what it keeps and drops, by watch name and key.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// One state file's room, per watch.
#[derive(Debug, Clone)]
pub struct Room<K> {
    cap: usize,
    /// Keys the last run kept and this run has not seen yet.
    unseen: HashSet<K>,
    /// How many of those per watch.
    unseen_by_watch: HashMap<String, usize>,
    /// How many rows this run keeps, per watch.
    kept: HashMap<String, usize>,
}

impl<K: Hash + Eq + Clone> Room<K> {
    /// The room left by the keys the last run kept, `(watch, key)`: each is taken as
    /// given (the caller trims a file holding more than `cap` of one watch first, with
    /// [`within_cap`]).
    pub fn new<'a>(cap: usize, before: impl IntoIterator<Item = (&'a str, K)>) -> Room<K> {
        let mut room = Room {
            cap,
            unseen: HashSet::new(),
            unseen_by_watch: HashMap::new(),
            kept: HashMap::new(),
        };
        for (watch, key) in before {
            if room.unseen.insert(key) {
                *room.unseen_by_watch.entry(watch.to_string()).or_default() += 1;
            }
        }
        room
    }

    /// This run has seen `key`: if the last run kept it, its place is no longer held
    /// for it (the caller [`Room::keep`]s it again or lets it go) and this says true —
    /// once: a key seen again, or one the last run did not keep, gives false.
    pub fn seen(&mut self, watch: &str, key: &K) -> bool {
        if !self.unseen.remove(key) {
            return false;
        }
        if let Some(n) = self.unseen_by_watch.get_mut(watch) {
            *n = n.saturating_sub(1);
        }
        true
    }

    /// Whether a new row of `watch` may take a place now.
    pub fn has_room(&self, watch: &str) -> bool {
        let unseen = self.unseen_by_watch.get(watch).copied().unwrap_or(0);
        let kept = self.kept.get(watch).copied().unwrap_or(0);
        unseen.saturating_add(kept) < self.cap
    }

    /// This run keeps one more row of `watch` (one the last run kept, once
    /// [`Room::seen`], or a new one there was room for).
    pub fn keep(&mut self, watch: &str) {
        *self.kept.entry(watch.to_string()).or_default() += 1;
    }

    /// This run lets go of a row of `watch` it kept.
    pub fn let_go(&mut self, watch: &str) {
        if let Some(n) = self.kept.get_mut(watch) {
            *n = n.saturating_sub(1);
        }
    }
}

/// The items of a state file, at most `cap` per (database, watch) as `group` gives it,
/// in the order given: what a file written by an older release, or grown by hand, is cut
/// to when it is read. Cutting only forgets: a count starts over, a reminder is shown
/// again, a sighting starts from now — each an action delayed, never one taken early.
pub fn within_cap<T, G: Hash + Eq>(items: Vec<T>, cap: usize, group: impl Fn(&T) -> G) -> Vec<T> {
    let mut seen: HashMap<G, usize> = HashMap::new();
    items
        .into_iter()
        .filter(|t| {
            let n = seen.entry(group(t)).or_default();
            *n += 1;
            *n <= cap
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backlog that stays fills the room once; a row that leaves frees its place for
    /// one new row; the last run's rows keep theirs whatever the order they are seen in.
    #[test]
    fn a_backlog_fills_the_room_once_and_a_row_that_leaves_frees_its_place() {
        let mut r: Room<u32> = Room::new(3, [("w", 1), ("w", 2), ("v", 9)]);
        assert!(r.has_room("w"), "two of three held");
        r.keep("w"); // a new row, 3
        assert!(!r.has_room("w"));
        assert!(r.has_room("v"), "per watch");
        // The next rows: 1 is seen and kept again, 2 has left (seen, not kept).
        assert!(r.seen("w", &1));
        r.keep("w");
        assert!(!r.has_room("w"));
        assert!(r.seen("w", &2));
        assert!(r.has_room("w"), "2 left: its place is free");
        r.keep("w");
        assert!(!r.has_room("w"));
        r.let_go("w");
        assert!(r.has_room("w"));
        // Seeing a key twice, or one the last run did not keep, frees nothing more.
        r.keep("w");
        assert!(!r.seen("w", &1));
        assert!(!r.seen("w", &7));
        assert!(!r.has_room("w"));
    }

    #[test]
    fn a_file_is_cut_to_the_cap_per_group_in_its_order() {
        let items = vec![("a", 1), ("a", 2), ("b", 3), ("a", 4), ("b", 5)];
        assert_eq!(
            within_cap(items, 2, |t| t.0),
            vec![("a", 1), ("a", 2), ("b", 3), ("b", 5)]
        );
    }
}
