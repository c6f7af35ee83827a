//! What the latest finished runs of a watch say, cheaply: the longest run that ended well
//! among the latest rows, and the rule of docs/design.md#error-rate on it — a `max_age` below 1.5× a real
//! run kills legitimate runs (the seed incident). `check` warns on it every run (from a read
//! it keeps for up to 15 minutes: [`crate::check::recent`]), `doctor` shows it, `stats`
//! applies the same rule to the whole history.
//!
//! I/O: reads the latest [`RECENT_ROWS`] rows of a watch through the store (by primary
//! key, so the cost does not grow with the table). The rule itself is pure.

use serde_json::{Value, json};

use crate::clock::{Clocks, human, implausible_start, instant, seconds_between};
use crate::config::{Watch, fmt_duration};
use crate::error::Result;
use crate::store::{FinishedRow, History, Schema, Store};

/// How many of the latest rows (by id) `check` looks at for the `max_age` warning: enough
/// to see the recent longest runs, few enough to cost well under a millisecond.
pub const RECENT_ROWS: u32 = 1000;

/// `max_age` below 1.5× the longest run that ended well among the latest rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxAgeWarning {
    pub watch: String,
    pub max_age_s: u64,
    pub longest_s: u64,
    pub longest_id: Value,
    /// Runs that ended well among the rows looked at.
    pub runs_seen: u64,
    /// The smallest cap the rule accepts, rounded up.
    pub at_least_s: u64,
}

impl MaxAgeWarning {
    pub fn message(&self) -> String {
        format!(
            "watch {}: max_age {} is below 1.5× the longest recent run that ended well ({}, \
             id={}): this cap kills legitimate runs; set max_age to at least {} (see selfheal \
             stats)",
            self.watch,
            fmt_duration(std::time::Duration::from_secs(self.max_age_s)),
            human(self.longest_s),
            id_key(&self.longest_id),
            fmt_duration(std::time::Duration::from_secs(self.at_least_s)),
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "watch": self.watch,
            "max_age_s": self.max_age_s,
            "longest_run_s": self.longest_s,
            "longest_run_id": self.longest_id,
            "runs_seen": self.runs_seen,
            "max_age_at_least_s": self.at_least_s,
        })
    }
}

/// The latest finished runs of a watch, as `check` and `doctor` see them.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentRuns {
    /// Runs that ended well among the rows looked at.
    pub runs: u64,
    /// The longest of them: seconds and row id.
    pub longest: Option<(u64, Value)>,
}

/// What the latest finished rows say, or why they cannot be read cheaply.
#[derive(Debug, Clone, PartialEq)]
pub enum Recent {
    Runs(RecentRuns),
    /// The watch has no `ended_column`: a run's length is unknown.
    NoEndedColumn,
    /// The id is not the primary key: "the latest rows" would cost a scan.
    IdNotPrimary,
}

/// Reads the latest [`RECENT_ROWS`] rows of the watch (by id, through the primary key, so
/// the cost does not grow with the table) and finds the longest run that ended well.
pub fn recent_runs(
    store: &mut dyn Store,
    w: &Watch,
    schema: &Schema,
    clocks: &Clocks,
) -> Result<Recent> {
    if let Some(why) = recent_unread(w, schema) {
        return Ok(why);
    }
    read_recent_runs(store, w, clocks).map(Recent::Runs)
}

/// Why the latest rows of the watch cannot be read cheaply, if they cannot (no I/O).
pub fn recent_unread(w: &Watch, schema: &Schema) -> Option<Recent> {
    if w.ended_column.is_none() {
        Some(Recent::NoEndedColumn)
    } else if !schema.id_is_primary {
        Some(Recent::IdNotPrimary)
    } else {
        None
    }
}

/// The read of [`recent_runs`] proper, for a watch [`recent_unread`] lets through: one
/// query for the latest [`RECENT_ROWS`] rows.
pub fn read_recent_runs(store: &mut dyn Store, w: &Watch, clocks: &Clocks) -> Result<RecentRuns> {
    let mut longest: Option<(u64, Value)> = None;
    let mut runs = 0u64;
    store.finished_rows(w, History::Latest(RECENT_ROWS), &mut |r: FinishedRow| {
        if !w.is_success(&r.status) {
            return Ok(());
        }
        if let Some(secs) = runtime(&r, clocks).ok().and_then(|s| u64::try_from(s).ok()) {
            runs += 1;
            if longest.as_ref().is_none_or(|(l, _)| secs > *l) {
                longest = Some((secs, r.id.to_json()));
            }
        }
        Ok(())
    })?;
    Ok(RecentRuns { runs, longest })
}

impl RecentRuns {
    /// The warning of docs/design.md#error-rate when `max_age` is below 1.5× the longest run.
    pub fn max_age_warning(&self, w: &Watch) -> Option<MaxAgeWarning> {
        let max_age_s = w.max_age.as_secs();
        match &self.longest {
            Some((longest_s, longest_id)) if max_age_too_low(max_age_s, *longest_s) => {
                Some(MaxAgeWarning {
                    watch: w.name.clone(),
                    max_age_s,
                    longest_s: *longest_s,
                    longest_id: longest_id.clone(),
                    runs_seen: self.runs,
                    at_least_s: max_age_floor(*longest_s),
                })
            }
            _ => None,
        }
    }
}

/// No job runs this long: a runtime beyond it is bad history, not a run (docs/design.md#error-rate).
pub const LONGEST_PLAUSIBLE_RUN_S: i64 = 366 * 86_400;

/// Why a finished row's runtime is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRuntime {
    /// Its start or end cannot be read as a time.
    Unreadable(String),
    /// Times that cannot be a real run: it ends before it starts, starts at 0 or before
    /// 2000, or runs longer than a year.
    Implausible(String),
}

impl From<&str> for BadRuntime {
    fn from(s: &str) -> BadRuntime {
        BadRuntime::Unreadable(s.to_string())
    }
}

/// End minus start of a finished row, in whole seconds, when it can be a real run.
pub fn runtime(r: &FinishedRow, clocks: &Clocks) -> Result<i64, BadRuntime> {
    let unreadable = BadRuntime::Unreadable;
    let start = match &r.started.stamp {
        Ok(Some(s)) => *s,
        Ok(None) => return Err(unreadable("no start".into())),
        Err(e) => return Err(unreadable(format!("start {}: {e}", r.started.raw))),
    };
    let end = match &r.ended.stamp {
        Ok(Some(s)) => *s,
        Ok(None) => return Err(unreadable("no end".into())),
        Err(e) => return Err(unreadable(format!("end {}: {e}", r.ended.raw))),
    };
    let at = instant(start, clocks.db.now_epoch).map_err(unreadable)?;
    if let Some(why) = implausible_start(at) {
        return Err(BadRuntime::Implausible(format!(
            "start {}: {why}",
            r.started.raw
        )));
    }
    match seconds_between(start, end, &clocks.db).map_err(unreadable)? {
        s if s < 0 => Err(BadRuntime::Implausible(format!(
            "ends {}s before it starts",
            -s
        ))),
        s if s > LONGEST_PLAUSIBLE_RUN_S => Err(BadRuntime::Implausible(format!(
            "runs {}, longer than a year",
            human(s.unsigned_abs())
        ))),
        s => Ok(s),
    }
}

/// The key a row id is matched by: numbers as digits, strings as they are.
pub fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rounds up to a value an operator would write: whole minutes up to 10 minutes, then
/// 5 minutes up to an hour, 15 minutes up to 6 hours, 30 minutes up to a day, then hours.
pub fn friendly_ceil(secs: u64) -> u64 {
    let step = match secs {
        0..=600 => 60,
        601..=3_600 => 300,
        3_601..=21_600 => 900,
        21_601..=86_400 => 1_800,
        _ => 3_600,
    };
    // Saturating: a value within a step of u64::MAX rounds to u64::MAX, never wraps to a
    // small one (a suggestion below the longest run is the incident this tool prevents).
    secs.max(1).div_ceil(step).saturating_mul(step)
}

/// `n × num / den`, rounded up, without overflow: saturates at `u64::MAX`.
pub fn scaled_ceil(n: u64, num: u64, den: u64) -> u64 {
    let v = (u128::from(n) * u128::from(num)).div_ceil(u128::from(den.max(1)));
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The rule of docs/design.md#error-rate: a cap below 1.5× the longest run that ended well kills legitimate
/// runs — the incident this tool exists to prevent.
pub fn max_age_too_low(max_age_s: u64, longest_s: u64) -> bool {
    u128::from(max_age_s) * 2 < u128::from(longest_s) * 3
}

/// The smallest `max_age` the rule accepts for this longest run, rounded up.
pub fn max_age_floor(longest_s: u64) -> u64 {
    friendly_ceil(scaled_ceil(longest_s, 3, 2))
}

#[cfg(test)]
mod tests {
    /// Figures near the top of u64 saturate: never a wrapped, small suggestion or floor.
    #[test]
    fn huge_durations_saturate_never_wrap() {
        for secs in [u64::MAX, u64::MAX - 1, u64::MAX - 3_599, u64::MAX / 2 + 1] {
            assert!(friendly_ceil(secs) >= secs, "{secs}");
            assert!(max_age_floor(secs) >= secs, "{secs}");
            assert!(!max_age_too_low(max_age_floor(secs), secs) || secs > u64::MAX / 3 * 2);
        }
        assert_eq!(scaled_ceil(u64::MAX, 3, 2), u64::MAX);
        assert_eq!(scaled_ceil(3, 3, 2), 5);
        assert_eq!(friendly_ceil(61), 120);
    }

    use super::*;

    #[test]
    fn the_warning_names_the_run_and_the_floor() {
        let w = MaxAgeWarning {
            watch: "full-sync".into(),
            max_age_s: 1_800,
            longest_s: 7_200,
            longest_id: json!(42),
            runs_seen: 12,
            at_least_s: max_age_floor(7_200),
        };
        assert_eq!(
            w.message(),
            "watch full-sync: max_age 30m is below 1.5× the longest recent run that ended \
             well (2h0m, id=42): this cap kills legitimate runs; set max_age to at least 3h \
             (see selfheal stats)"
        );
        assert_eq!(w.to_json()["max_age_at_least_s"], 10_800);
        assert_eq!(id_key(&json!("a-7")), "a-7");
        assert_eq!(id_key(&json!(7)), "7");
    }

    #[test]
    fn friendly_rounding() {
        for (secs, want) in [
            (0, 60),
            (1, 60),
            (60, 60),
            (61, 120),
            (600, 600),
            (601, 900),
            (3_600, 3_600),
            (3_601, 4_500),
            (10_800, 10_800),
            (10_801, 11_700),
            (21_601, 23_400),
            (86_401, 90_000),
        ] {
            assert_eq!(friendly_ceil(secs), want, "{secs}");
        }
    }

    #[test]
    fn the_max_age_rule_and_its_floor() {
        // The seed incident: a 30-minute cap against 2-hour runs.
        assert!(max_age_too_low(1_800, 7_200));
        assert!(max_age_too_low(10_799, 7_200));
        assert!(!max_age_too_low(10_800, 7_200), "exactly 1.5x is enough");
        assert!(!max_age_too_low(14_400, 7_200));
        assert!(!max_age_too_low(60, 0));
        assert!(max_age_too_low(u64::MAX / 2, u64::MAX / 2), "no overflow");
        assert_eq!(max_age_floor(7_200), 10_800);
        assert_eq!(max_age_floor(7_801), 12_600);
    }
}
