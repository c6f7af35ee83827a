//! An exact histogram of whole-second runtimes: one counter per distinct duration, so
//! memory follows the number of distinct runtimes (at most the longest run in seconds),
//! never the number of rows, and percentiles are exact. Pure.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: BTreeMap<u64, u64>,
    n: u64,
}

impl Histogram {
    pub fn add(&mut self, secs: u64) {
        *self.counts.entry(secs).or_insert(0) += 1;
        self.n += 1;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Distinct durations held (what the memory follows).
    pub fn distinct(&self) -> usize {
        self.counts.len()
    }

    pub fn max(&self) -> Option<u64> {
        self.counts.keys().next_back().copied()
    }

    pub fn min(&self) -> Option<u64> {
        self.counts.keys().next().copied()
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
        for (secs, c) in &self.counts {
            seen += u128::from(*c);
            if seen >= rank {
                return Some(*secs);
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

        // One value: every percentile is it.
        let mut h = Histogram::default();
        h.add(5);
        assert_eq!(
            (h.percentile(1), h.percentile(500), h.percentile(990)),
            (Some(5), Some(5), Some(5))
        );
    }
}
