//! An exact histogram of whole-second runtimes, so percentiles are exact and memory does
//! not follow the number of rows: one dense counter per second for runtimes under a day
//! (grown only as far as the longest one seen: at most 0.7 MB), and a sorted map for the
//! rare runtimes of a day or more (one entry per distinct value). Pure.

use std::collections::BTreeMap;

/// Runtimes below this many seconds are counted in the dense array.
const DENSE_LIMIT: u64 = 86_400;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    dense: Vec<u64>,
    sparse: BTreeMap<u64, u64>,
    n: u64,
}

impl Histogram {
    pub fn add(&mut self, secs: u64) {
        if secs < DENSE_LIMIT
            && let Ok(i) = usize::try_from(secs)
        {
            if i >= self.dense.len() {
                self.dense.resize(i + 1, 0);
            }
            self.dense[i] += 1;
        } else {
            *self.sparse.entry(secs).or_insert(0) += 1;
        }
        self.n += 1;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Every distinct runtime with its count, shortest first.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(s, c)| (s as u64, *c))
            .chain(self.sparse.iter().map(|(s, c)| (*s, *c)))
    }

    /// Distinct durations held.
    pub fn distinct(&self) -> usize {
        self.iter().count()
    }

    pub fn max(&self) -> Option<u64> {
        self.sparse
            .keys()
            .next_back()
            .copied()
            .or_else(|| self.dense.iter().rposition(|c| *c > 0).map(|i| i as u64))
    }

    pub fn min(&self) -> Option<u64> {
        self.iter().next().map(|(s, _)| s)
    }

    /// How many runtimes fall in each bucket `[edges[i], edges[i+1])`, the last bucket
    /// open-ended; runtimes below the first edge are not counted. `edges` ascending.
    pub fn bucket_counts(&self, edges: &[u64]) -> Vec<u64> {
        let mut counts = vec![0u64; edges.len()];
        for (secs, c) in self.iter() {
            if let Some(i) = edges.partition_point(|e| *e <= secs).checked_sub(1) {
                counts[i] += c;
            }
        }
        counts
    }

    /// The nearest-rank percentile, `per_mille` in 1..=1000 (500 = median): the smallest
    /// runtime at or below which at least that share of the runs lie. Exact; `None` when
    /// empty.
    pub fn percentile(&self, per_mille: u64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let pm = u128::from(per_mille.clamp(1, 1000));
        // ceil(n * pm / 1000), at least 1, in u128 so no count can overflow it.
        let rank = ((u128::from(self.n) * pm).div_ceil(1000)).max(1);
        let mut seen: u128 = 0;
        for (secs, c) in self.iter() {
            seen += u128::from(c);
            if seen >= rank {
                return Some(secs);
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_are_exact() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(500), None);
        for s in 1..=4000 {
            h.add(s);
        }
        assert_eq!(h.count(), 4000);
        assert_eq!(h.percentile(500), Some(2000));
        assert_eq!(h.percentile(950), Some(3800));
        assert_eq!(h.percentile(990), Some(3960));
        assert_eq!(h.percentile(1000), Some(4000));
        assert_eq!(h.max(), Some(4000));
        assert_eq!(h.min(), Some(1));

        // Repeated values: 90 runs of 60s, 10 of 7200s.
        let mut h = Histogram::default();
        (0..90).for_each(|_| h.add(60));
        (0..10).for_each(|_| h.add(7200));
        assert_eq!(h.distinct(), 2);
        assert_eq!(h.percentile(500), Some(60));
        assert_eq!(h.percentile(900), Some(60));
        assert_eq!(h.percentile(901), Some(7200));
        assert_eq!(h.percentile(950), Some(7200));

        // Runtimes of a day and more, beside short ones, in order.
        let mut h = Histogram::default();
        for s in [10, 200_000, 86_399, 86_400, 90_000, 0] {
            h.add(s);
        }
        assert_eq!(h.min(), Some(0));
        assert_eq!(h.max(), Some(200_000));
        assert_eq!(h.distinct(), 6);
        let all: Vec<u64> = (1..=6)
            .map(|k| h.percentile(k * 1000 / 6 + 1).unwrap_or(0))
            .collect();
        assert_eq!(all, [10, 86_399, 86_400, 90_000, 200_000, 200_000]);
        assert_eq!(h.percentile(1), Some(0));
        let mut only_long = Histogram::default();
        only_long.add(100_000);
        assert_eq!(
            (only_long.min(), only_long.max()),
            (Some(100_000), Some(100_000))
        );

        // Bucketed: each runtime in the bucket that starts at or below it.
        let mut h = Histogram::default();
        for s in [0, 1, 59, 60, 61, 3600, 100_000] {
            h.add(s);
        }
        assert_eq!(h.bucket_counts(&[1, 60, 3600]), vec![2, 2, 2]);
        assert_eq!(h.bucket_counts(&[0, 86_400]), vec![6, 1]);

        // One value: every percentile is it.
        let mut h = Histogram::default();
        h.add(5);
        assert_eq!(
            (h.percentile(1), h.percentile(500), h.percentile(990)),
            (Some(5), Some(5), Some(5))
        );
    }
}
