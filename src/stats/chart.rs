//! `stats`' terminal histogram of a watch's runtimes: log-scaled buckets (a ladder of
//! durations an operator would write, each two to three times the last), the count of runs
//! in each as a bar, and marks on the buckets that hold the current `max_age`, the
//! suggested one and the longest run — choosing a cap is easier to see than to read.
//! ASCII only (cron mail, `LC_ALL=C` terminals). Pure.

use super::histogram::Histogram;
use crate::message::duration;

/// Bucket edges in seconds: 0, 1s, 2s, 5s, 10s, … 1h, 2h, 4h, 8h, 12h, 1d, 2d, 4d, 7d,
/// 14d, 30d, 60d, 180d, 365d; the last bucket is open-ended.
const EDGES: [u64; 27] = [
    0, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14_400, 28_800, 43_200,
    86_400, 172_800, 345_600, 604_800, 1_209_600, 2_592_000, 5_184_000, 15_552_000, 31_536_000,
];

/// The longest bar, in characters.
const BAR: u64 = 40;

/// The bucket a value falls in.
fn bucket(secs: u64) -> usize {
    EDGES.partition_point(|e| *e <= secs).saturating_sub(1)
}

/// The histogram's lines (without indentation): one per bucket from the shortest run's to
/// the one holding the largest of the runs and the `marks` (`(seconds, what)`), each
/// `FROM-TO | bar count  <- marks`.
pub fn lines(h: &Histogram, marks: &[(u64, String)]) -> Vec<String> {
    let (Some(min), Some(max)) = (h.min(), h.max()) else {
        return Vec::new();
    };
    let first = bucket(min);
    let last = marks
        .iter()
        .map(|(s, _)| bucket(*s))
        .chain([bucket(max)])
        .max()
        .unwrap_or(first);
    let first = marks
        .iter()
        .map(|(s, _)| bucket(*s))
        .fold(first, usize::min);
    let counts = h.bucket_counts(&EDGES);
    let most = counts[first..=last]
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let labels: Vec<String> = (first..=last)
        .map(|i| match EDGES.get(i + 1) {
            Some(hi) => format!("{}-{}", duration(EDGES[i]), duration(*hi)),
            None => format!("{} and more", duration(EDGES[i])),
        })
        .collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0);
    let digits = counts[first..=last]
        .iter()
        .map(|c| c.to_string().len())
        .max()
        .unwrap_or(1);
    (first..=last)
        .zip(labels)
        .map(|(i, label)| {
            let c = counts[i];
            // At least one mark for a bucket that holds a run, so no run is invisible.
            let len = if c == 0 { 0 } else { (c * BAR).div_ceil(most) };
            let bar = "#".repeat(usize::try_from(len).unwrap_or(0));
            let here: Vec<&str> = marks
                .iter()
                .filter(|(s, _)| bucket(*s) == i)
                .map(|(_, m)| m.as_str())
                .collect();
            let line = format!(
                "{label:>width$} |{bar:<bar_w$} {c:>digits$}",
                bar_w = usize::try_from(BAR).unwrap_or(40)
            );
            if here.is_empty() {
                line
            } else {
                format!("{line}  <- {}", here.join("; "))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_drawn_in_log_buckets_with_the_marks() {
        let mut h = Histogram::default();
        for s in [1200, 2100, 3000, 4200, 5100, 300] {
            h.add(s);
        }
        let got = lines(
            &h,
            &[
                (14_400, "max_age 4h".into()),
                (10_800, "suggested max_age 3h".into()),
                (5100, "longest run 1h25m".into()),
            ],
        );
        let want = [
            " 5m-10m |####################                     1",
            "10m-20m |                                         0",
            "20m-30m |####################                     1",
            " 30m-1h |######################################## 2",
            "  1h-2h |######################################## 2  <- longest run 1h25m",
            "  2h-4h |                                         0  <- suggested max_age 3h",
            "  4h-8h |                                         0  <- max_age 4h",
        ];
        assert_eq!(got, want);
        assert!(lines(&Histogram::default(), &[]).is_empty());
        // Far beyond the ladder: the last bucket is open-ended.
        let mut h = Histogram::default();
        h.add(40_000_000);
        let got = lines(&h, &[]);
        assert_eq!(
            got,
            ["365d and more |######################################## 1"]
        );
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(59), 6);
        assert_eq!(bucket(60), 7);
    }
}
