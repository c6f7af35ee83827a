//! Timestamps as databases store them, and ages measured as differences of instants.
//!
//! Every age is a difference of two absolute instants, each on the clock that wrote it: a
//! start or heartbeat column against the database's own `UNIX_TIMESTAMP()` (read once per
//! run), a heartbeat file's mtime against the host clock. A stored time becomes an instant
//! ([`Stamp`]) where it is read: integer unix seconds and text with an offset are instants
//! already; MySQL's `TIMESTAMP`, and a naive `DATETIME` read on the server's own clock,
//! are placed by the server itself (`UNIX_TIMESTAMP(col)`); SQLite's naive text is UTC (what
//! its `datetime('now')` writes). Only a naive value written in a configured `timezone`
//! is placed here ([`Stamp::Local`], [`instant`]), by that zone's rules: a local time the
//! autumn change repeats is the later of its two instants unless that one lies in the
//! future, a local time the spring change skips is shifted forward by the gap — never an
//! hour of error at a change.
//!
//! The clocks a run measures against ([`Clocks`]) are read once by the caller and passed
//! in; the skew between the database and the host is measured here once, for `check` and
//! `doctor` alike ([`clock_skew`], [`skew_text`]). Pure, except [`now_rfc3339`], which reads
//! the host clock.

use std::time::SystemTime;

use chrono::NaiveDateTime;

use crate::zone::{Local, Zone};

/// A stored time, as an instant or as what it takes to place one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// Seconds since the Unix epoch: integer columns, text with an explicit offset, values
    /// the database server placed itself (MySQL `UNIX_TIMESTAMP(col)`), SQLite's naive text
    /// (UTC).
    Epoch(i64),
    /// A naive wall-clock time the application wrote in the configured zone; placed by
    /// [`instant`].
    Local(NaiveDateTime, Zone),
}

/// The database clock, read once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbClock {
    /// `NOW()` in the session's time zone.
    pub now_naive: NaiveDateTime,
    /// `UNIX_TIMESTAMP()`.
    pub now_epoch: i64,
}

/// The clocks a run measures against, read once.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    pub db: DbClock,
    /// The zone naive DATETIME values were written in (`[database] timezone`).
    pub tz: Option<Zone>,
    /// How far two clocks (or two values written on different clocks) may disagree before
    /// it means something (`[run] clock_tolerance`), in seconds.
    pub tolerance_s: u64,
}

/// Seconds since the epoch of a host time (negative before 1970).
pub fn epoch(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// The database clock minus the host clock, in seconds (one measurement, shared by
/// `check` and `doctor`).
pub fn clock_skew(db: &DbClock, host_now: SystemTime) -> i64 {
    db.now_epoch.saturating_sub(epoch(host_now))
}

/// "the database clock is 5s ahead of the host clock (tolerance 60s)".
pub fn skew_text(skew: i64, tolerance_s: u64) -> String {
    format!(
        "the database clock is {}s {} the host clock (tolerance {tolerance_s}s)",
        skew.abs(),
        if skew >= 0 { "ahead of" } else { "behind" },
    )
}

/// The current time for the journal and the intents file: UTC, to the second.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Compact human duration: `47m`, `2h10m`, `20s`.
pub fn human(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, _, _) if h >= 48 => format!("{}d{}h", h / 24, h % 24),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// Tolerance for "in the future": beyond this, a timestamp is a clock or time-zone mismatch.
pub const FUTURE_TOLERANCE_S: i64 = 60;

/// The instant a naive local time in `tz` names, for a reader whose clock shows `now`
/// (unix seconds): the one instant where there is one; in the hour the autumn change
/// repeats, the later instant unless it lies in the future beyond [`FUTURE_TOLERANCE_S`]
/// (then the earlier: a value cannot have been written in the future); in the gap of the
/// spring change, the time shifted forward by the gap (the offset before the change, as a
/// clock that was not yet moved forward wrote it).
pub fn local_instant(n: NaiveDateTime, tz: Zone, now: i64) -> Result<i64, String> {
    match tz.local(n) {
        Some(Local::One(t)) => Ok(t),
        Some(Local::Repeated { earlier, later }) => {
            if later <= now.saturating_add(FUTURE_TOLERANCE_S) {
                Ok(later)
            } else {
                Ok(earlier)
            }
        }
        Some(Local::Skipped { before }) => Ok(before),
        None => Err(format!("{n} is outside the years time zone {tz} covers")),
    }
}

/// The instant (unix seconds) of a stored time, for a reader whose clock shows `now`.
pub fn instant(stamp: Stamp, now: i64) -> Result<i64, String> {
    match stamp {
        Stamp::Epoch(e) => Ok(e),
        Stamp::Local(n, tz) => local_instant(n, tz, now),
    }
}

/// Age in whole seconds of `stamp` on the database clock: the database's `NOW()` as an
/// instant minus the stamp's instant. Negative when in the future.
pub fn age_on_db_clock(stamp: Stamp, clock: &DbClock) -> Result<i64, String> {
    // Saturating: an integer column can hold any i64, and a hostile or broken value must
    // read as an absurd age (judged as such), never wrap around into a plausible one.
    Ok(clock
        .now_epoch
        .saturating_sub(instant(stamp, clock.now_epoch)?))
}

/// The instants a stamp may name, the preferred one first: two for a local time the
/// autumn change repeats (as [`local_instant`] prefers them), else one.
fn candidates(stamp: Stamp, now: i64) -> Result<Vec<i64>, String> {
    let first = instant(stamp, now)?;
    Ok(match stamp {
        Stamp::Local(n, tz) => match tz.local(n) {
            Some(Local::Repeated { earlier, later }) => {
                let other = if earlier == first { later } else { earlier };
                vec![first, other]
            }
            _ => vec![first],
        },
        Stamp::Epoch(_) => vec![first],
    })
}

/// Whole seconds from `start` to `end` of one finished row (a runtime): the difference of
/// their instants. Where a local time the autumn change repeats leaves a choice, the
/// preferred instants are taken unless they would make the run end before it started.
pub fn seconds_between(start: Stamp, end: Stamp, clock: &DbClock) -> Result<i64, String> {
    let now = clock.now_epoch;
    let (starts, ends) = (candidates(start, now)?, candidates(end, now)?);
    let preferred = ends[0].saturating_sub(starts[0]);
    if preferred >= 0 {
        return Ok(preferred);
    }
    Ok(starts
        .iter()
        .flat_map(|s| ends.iter().map(move |e| e.saturating_sub(*s)))
        .find(|d| *d >= 0)
        .unwrap_or(preferred))
}

/// The earliest instant a job row can plausibly have started: 2000-01-01 UTC. Anything
/// before it (an integer 0, the usual "unset", a negative or tiny number) is not a start.
pub const EARLIEST_PLAUSIBLE: i64 = 946_684_800;

/// Why an instant cannot be a job's start time, if it cannot.
pub fn implausible_start(at: i64) -> Option<String> {
    (at < EARLIEST_PLAUSIBLE).then(|| {
        if at == 0 {
            "not a start time (0 is how an unset value reads)".to_string()
        } else {
            "before 2000: not a start time".to_string()
        }
    })
}

/// Classifies a signed age: a value in the future by more than the tolerance is a
/// clock/time-zone mismatch; a little in the future is age 0 (clocks are never exact).
pub fn plausible_age(age: i64, what: &str) -> Result<u64, String> {
    if age < -FUTURE_TOLERANCE_S {
        Err(format!(
            "{what} is {}s in the future (clock or time-zone mismatch)",
            -age
        ))
    } else {
        // A little in the future (negative, within the tolerance) is age 0.
        Ok(u64::try_from(age).unwrap_or(0))
    }
}

/// Whole seconds (toward zero) of a fractional unix time; `None` for NaN, the infinities
/// and anything beyond `i64`, which are no point in time.
#[allow(clippy::cast_possible_truncation)] // `t` is integral and just checked to fit an i64
pub fn whole_seconds(f: f64) -> Option<i64> {
    let t = f.trunc();
    // -2^63 and 2^63 are exact as f64; every integral f64 between them is an i64.
    if (i64::MIN as f64..i64::MAX as f64).contains(&t) {
        Some(t as i64)
    } else {
        None
    }
}

/// The naive text forms [`parse_text_stamp`] accepts, as parsed format items.
static NAIVE_FORMATS: std::sync::LazyLock<Vec<Vec<chrono::format::Item<'static>>>> =
    std::sync::LazyLock::new(|| {
        [
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%dT%H:%M:%S%.f",
            "%Y-%m-%d %H:%M",
        ]
        .into_iter()
        .filter_map(|f| chrono::format::StrftimeItems::new(f).parse_to_owned().ok())
        .collect()
    });

/// A time written as text: naive (the reader places it) or an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextTime {
    Naive(NaiveDateTime),
    Epoch(i64),
}

/// Parses a text timestamp as SQLite applications write them: `YYYY-MM-DD HH:MM:SS[.fff]`,
/// with `T` or a space, optionally with `Z` or a `±HH:MM` offset (then it is absolute).
pub fn parse_text_stamp(s: &str) -> Result<TextTime, String> {
    let t = s.trim();
    // Naive forms first: they are what SQLite writes, and a string with an offset can never
    // match them (chrono rejects trailing input), so the order changes no result. Their
    // format strings are parsed once: `stats` reads millions of these.
    for items in NAIVE_FORMATS.iter() {
        let mut parsed = chrono::format::Parsed::new();
        if chrono::format::parse(&mut parsed, t, items.iter()).is_ok()
            && let Ok(n) = parsed.to_naive_datetime_with_offset(0)
        {
            return Ok(TextTime::Naive(n));
        }
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(TextTime::Epoch(dt.timestamp()));
    }
    if let Ok(dt) = chrono::DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f%:z") {
        return Ok(TextTime::Epoch(dt.timestamp()));
    }
    if let Some(z) = t.strip_suffix('Z').or_else(|| t.strip_suffix(" UTC"))
        && let Ok(n) = NaiveDateTime::parse_from_str(z, "%Y-%m-%d %H:%M:%S%.f")
    {
        return Ok(TextTime::Epoch(n.and_utc().timestamp()));
    }
    if let Ok(n) = t.parse::<i64>() {
        return Ok(TextTime::Epoch(n));
    }
    Err(format!("{s:?} is not a date-time or unix timestamp"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn human_durations() {
        assert_eq!(human(20), "20s");
        assert_eq!(human(2_820), "47m");
        assert_eq!(human(3_000), "50m");
        assert_eq!(human(7_800), "2h10m");
        assert_eq!(human(14_400), "4h0m");
        assert_eq!(human(90), "1m30s");
        assert_eq!(human(200_000), "2d7h");
    }

    #[test]
    fn skew_is_the_database_clock_minus_the_host_clock() {
        let host = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let db = DbClock {
            now_naive: dt(0, 0, 0),
            now_epoch: 1_005,
        };
        assert_eq!(clock_skew(&db, host), 5);
        assert_eq!(
            skew_text(5, 60),
            "the database clock is 5s ahead of the host clock (tolerance 60s)"
        );
        assert_eq!(
            skew_text(-7, 60),
            "the database clock is 7s behind the host clock (tolerance 60s)"
        );
        assert_eq!(
            epoch(SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(3)),
            -3
        );
    }

    #[test]
    fn only_finite_floats_in_range_are_whole_seconds() {
        assert_eq!(whole_seconds(1_764_406_800.9), Some(1_764_406_800));
        assert_eq!(whole_seconds(-1.5), Some(-1));
        assert_eq!(whole_seconds(-9_223_372_036_854_775_808.0), Some(i64::MIN));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 9.3e18, -9.3e18] {
            assert_eq!(whole_seconds(bad), None, "{bad}");
        }
        assert_eq!(plausible_age(-60, "x"), Ok(0));
        assert!(plausible_age(-61, "x").is_err());
        assert_eq!(plausible_age(i64::MAX, "x"), Ok(i64::MAX.unsigned_abs()));
    }

    fn dt(h: u32, m: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_opt(h, m, s))
            .expect("valid")
    }

    fn berlin() -> Zone {
        Zone::named("Europe/Berlin").expect("tz")
    }

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_opt(h, mi, s))
            .expect("valid")
    }

    fn utc(n: NaiveDateTime) -> i64 {
        n.and_utc().timestamp()
    }

    #[test]
    fn ages_are_differences_of_instants() {
        // The database's NOW() as an instant: 02:00 UTC.
        let clock = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: utc(dt(2, 0, 0)),
        };
        assert_eq!(
            age_on_db_clock(Stamp::Epoch(utc(dt(1, 50, 0))), &clock),
            Ok(600)
        );
        // Naive values written in Asia/Shanghai: 09:30 there is 01:30 UTC.
        let tz = Zone::named("Asia/Shanghai").expect("tz");
        assert_eq!(
            age_on_db_clock(Stamp::Local(dt(9, 30, 0), tz), &clock),
            Ok(1800)
        );
        assert_eq!(
            age_on_db_clock(Stamp::Local(dt(1, 0, 0), Zone::utc()), &clock),
            Ok(3600)
        );
        assert_eq!(
            age_on_db_clock(Stamp::Epoch(utc(dt(2, 1, 0))), &clock),
            Ok(-60)
        );
    }

    #[test]
    fn integers_at_the_ends_of_i64_never_wrap_into_a_plausible_age() {
        // An integer start or heartbeat column can hold anything a client wrote.
        let clock = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: utc(dt(2, 0, 0)),
        };
        assert_eq!(
            age_on_db_clock(Stamp::Epoch(i64::MIN), &clock),
            Ok(i64::MAX)
        );
        assert_eq!(
            age_on_db_clock(Stamp::Epoch(i64::MAX), &clock),
            Ok(clock.now_epoch - i64::MAX)
        );
        assert!(plausible_age(clock.now_epoch - i64::MAX, "the heartbeat").is_err());
        assert_eq!(
            seconds_between(Stamp::Epoch(i64::MIN), Stamp::Epoch(i64::MAX), &clock),
            Ok(i64::MAX)
        );
        let db = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: i64::MIN,
        };
        assert_eq!(clock_skew(&db, SystemTime::now()), i64::MIN);
    }

    #[test]
    fn the_autumn_hour_that_repeats_is_read_as_the_later_instant_unless_that_is_ahead() {
        // Europe/Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:00-02:59 local
        // happen twice, first at 00:00-00:59 UTC, then at 01:00-01:59 UTC.
        let tz = berlin();
        let beat = at(2026, 10, 25, 2, 29, 0);
        // A heartbeat written a minute ago in the first pass (now 02:30 CEST = 00:30
        // UTC): the later instant (01:29 UTC) is ahead, so the earlier one it is.
        let now = utc(at(2026, 10, 25, 0, 30, 0));
        assert_eq!(
            local_instant(beat, tz, now),
            Ok(utc(at(2026, 10, 25, 0, 29, 0)))
        );
        let clock = DbClock {
            now_naive: at(2026, 10, 25, 2, 30, 0),
            now_epoch: now,
        };
        assert_eq!(age_on_db_clock(Stamp::Local(beat, tz), &clock), Ok(60));
        // The same wall-clock minute in the second pass (now 02:30 CET = 01:30 UTC): the
        // later instant, a minute ago — not 1 h 1 min.
        let now = utc(at(2026, 10, 25, 1, 30, 0));
        let clock = DbClock {
            now_naive: at(2026, 10, 25, 2, 30, 0),
            now_epoch: now,
        };
        assert_eq!(age_on_db_clock(Stamp::Local(beat, tz), &clock), Ok(60));
        // Long after: the later instant.
        let now = utc(at(2026, 10, 26, 12, 0, 0));
        assert_eq!(
            local_instant(beat, tz, now),
            Ok(utc(at(2026, 10, 25, 1, 29, 0)))
        );
    }

    #[test]
    fn a_spring_gap_time_is_shifted_forward() {
        // Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 local never
        // happens. Written by a clock not yet moved forward, it is 01:30 UTC (03:30 CEST).
        let tz = berlin();
        let gap = at(2026, 3, 29, 2, 30, 0);
        let now = utc(at(2026, 3, 29, 1, 32, 0));
        assert_eq!(
            local_instant(gap, tz, now),
            Ok(utc(at(2026, 3, 29, 1, 30, 0)))
        );
        let clock = DbClock {
            now_naive: at(2026, 3, 29, 3, 32, 0),
            now_epoch: now,
        };
        assert_eq!(age_on_db_clock(Stamp::Local(gap, tz), &clock), Ok(120));
        // Either side of the gap is one instant.
        assert_eq!(
            local_instant(at(2026, 3, 29, 1, 59, 0), tz, now),
            Ok(utc(at(2026, 3, 29, 0, 59, 0)))
        );
        assert_eq!(
            local_instant(at(2026, 3, 29, 3, 0, 0), tz, now),
            Ok(utc(at(2026, 3, 29, 1, 0, 0)))
        );
    }

    #[test]
    fn runtimes_between_stored_times() {
        let clock = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: utc(at(2026, 12, 1, 0, 0, 0)),
        };
        assert_eq!(
            seconds_between(Stamp::Epoch(100), Stamp::Epoch(160), &clock),
            Ok(60)
        );
        // Across the spring change in the configured zone: 01:30 CET to 03:30 CEST is one
        // hour.
        let tz = berlin();
        let l = |n| Stamp::Local(n, tz);
        assert_eq!(
            seconds_between(
                l(at(2026, 3, 29, 1, 30, 0)),
                l(at(2026, 3, 29, 3, 30, 0)),
                &clock
            ),
            Ok(3600)
        );
        // Across the autumn change: 01:30 CEST to 02:30 (later pass) CET is two hours.
        assert_eq!(
            seconds_between(
                l(at(2026, 10, 25, 1, 30, 0)),
                l(at(2026, 10, 25, 2, 30, 0)),
                &clock
            ),
            Ok(7200)
        );
        // Both in the repeated hour, the end earlier on the wall clock: the end is in the
        // second pass, the start in the first (50 minutes), never a negative run.
        assert_eq!(
            seconds_between(
                l(at(2026, 10, 25, 2, 40, 0)),
                l(at(2026, 10, 25, 2, 30, 0)),
                &clock
            ),
            Ok(3000)
        );
        // A start in the spring gap is shifted forward like an age.
        assert_eq!(
            seconds_between(
                l(at(2026, 3, 29, 2, 30, 0)),
                l(at(2026, 3, 29, 3, 45, 0)),
                &clock
            ),
            Ok(900)
        );
    }

    #[test]
    fn starts_before_2000_are_not_starts() {
        assert!(implausible_start(0).is_some_and(|w| w.contains("unset")));
        assert!(implausible_start(-5).is_some());
        assert!(implausible_start(86_400).is_some());
        assert!(implausible_start(EARLIEST_PLAUSIBLE - 1).is_some());
        assert_eq!(implausible_start(EARLIEST_PLAUSIBLE), None);
        assert_eq!(implausible_start(1_764_406_800), None);
    }

    #[test]
    fn future_boundary() {
        assert_eq!(plausible_age(100, "x"), Ok(100));
        assert_eq!(plausible_age(0, "x"), Ok(0));
        assert_eq!(plausible_age(-60, "x"), Ok(0));
        assert!(
            plausible_age(-61, "start")
                .unwrap_err()
                .contains("61s in the future")
        );
    }

    #[test]
    fn text_stamps() {
        assert_eq!(
            parse_text_stamp("2026-11-29 09:00:00"),
            Ok(TextTime::Naive(dt(9, 0, 0)))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29T09:00:00.250"),
            Ok(TextTime::Naive(
                NaiveDateTime::parse_from_str("2026-11-29 09:00:00.250", "%Y-%m-%d %H:%M:%S%.f")
                    .expect("p")
            ))
        );
        let utc9 = dt(9, 0, 0).and_utc().timestamp();
        assert_eq!(
            parse_text_stamp("2026-11-29T09:00:00Z"),
            Ok(TextTime::Epoch(utc9))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29 17:00:00+08:00"),
            Ok(TextTime::Epoch(utc9))
        );
        assert_eq!(
            parse_text_stamp("1764406800"),
            Ok(TextTime::Epoch(1_764_406_800))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29 09:00"),
            Ok(TextTime::Naive(dt(9, 0, 0)))
        );
        assert_eq!(
            parse_text_stamp(" 2026-11-29 09:00:00 "),
            Ok(TextTime::Naive(dt(9, 0, 0)))
        );
        assert!(parse_text_stamp("2026-11-29 25:00:00").is_err());
        assert!(parse_text_stamp("2026-11-29 09:00:00 junk").is_err());
        assert!(parse_text_stamp("yesterday").is_err());
        assert!(parse_text_stamp("").is_err());
    }
}
