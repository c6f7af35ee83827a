//! Timestamps as databases store them, and ages measured against the clock that wrote them.
//!
//! selfheal never subtracts a database timestamp from the host clock: a start or heartbeat
//! column is compared with the database's own `NOW()` (read once per run), a heartbeat
//! file's mtime with the host clock. The clocks a run measures against ([`Clocks`]) are
//! read once by the caller and passed in; the skew between the database and the host is
//! measured here once, for `check` and `doctor` alike ([`clock_skew`], [`skew_text`]).
//! Pure, except [`now_rfc3339`], which reads the host clock.

use std::time::SystemTime;

use chrono::{NaiveDateTime, TimeZone};

/// What a stored time value means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A naive date-time as the application wrote it (MySQL DATETIME, SQLite text).
    /// Interpreted in the configured `timezone`, else on the database's own clock.
    Naive(NaiveDateTime),
    /// A naive date-time already in the database session's time zone (MySQL TIMESTAMP,
    /// which the server converts): always compared with the session's `NOW()`.
    Session(NaiveDateTime),
    /// Seconds since the Unix epoch (integer columns, text with an explicit offset).
    Epoch(i64),
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
    pub tz: Option<chrono_tz::Tz>,
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
    db.now_epoch - epoch(host_now)
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

/// Age in whole seconds of `stamp` on the database clock. Negative when in the future.
pub fn age_on_db_clock(
    stamp: Stamp,
    clock: &DbClock,
    tz: Option<chrono_tz::Tz>,
) -> Result<i64, String> {
    match (stamp, tz) {
        (Stamp::Epoch(e), _) => Ok(clock.now_epoch - e),
        (Stamp::Session(n), _) | (Stamp::Naive(n), None) => Ok((clock.now_naive - n).num_seconds()),
        (Stamp::Naive(n), Some(tz)) => match tz.from_local_datetime(&n).earliest() {
            Some(t) => Ok(clock.now_epoch - t.timestamp()),
            None => Err(format!("{n} does not exist in time zone {tz}")),
        },
    }
}

/// Seconds since the epoch of a stored time. Naive values are placed with the configured
/// zone, else with the database session's current offset (as [`age_on_db_clock`] does).
pub fn epoch_of(stamp: Stamp, clock: &DbClock, tz: Option<chrono_tz::Tz>) -> Result<i64, String> {
    let session_offset = (clock.now_naive.and_utc().timestamp()) - clock.now_epoch;
    match (stamp, tz) {
        (Stamp::Epoch(e), _) => Ok(e),
        (Stamp::Session(n), _) | (Stamp::Naive(n), None) => {
            Ok(n.and_utc().timestamp() - session_offset)
        }
        (Stamp::Naive(n), Some(tz)) => match tz.from_local_datetime(&n).earliest() {
            Some(t) => Ok(t.timestamp()),
            None => Err(format!("{n} does not exist in time zone {tz}")),
        },
    }
}

/// Whole seconds from `start` to `end` of one finished row (a runtime). Two values of the
/// same naive kind are subtracted directly; anything else goes through the epoch.
pub fn seconds_between(
    start: Stamp,
    end: Stamp,
    clock: &DbClock,
    tz: Option<chrono_tz::Tz>,
) -> Result<i64, String> {
    match (start, end, tz) {
        (Stamp::Session(a), Stamp::Session(b), _) | (Stamp::Naive(a), Stamp::Naive(b), None) => {
            Ok((b - a).num_seconds())
        }
        (Stamp::Epoch(a), Stamp::Epoch(b), _) => Ok(b - a),
        _ => Ok(epoch_of(end, clock, tz)? - epoch_of(start, clock, tz)?),
    }
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

/// Parses a text timestamp as SQLite applications write them: `YYYY-MM-DD HH:MM:SS[.fff]`,
/// with `T` or a space, optionally with `Z` or a `±HH:MM` offset (then it is absolute).
pub fn parse_text_stamp(s: &str) -> Result<Stamp, String> {
    let t = s.trim();
    // Naive forms first: they are what SQLite writes, and a string with an offset can never
    // match them (chrono rejects trailing input), so the order changes no result. Their
    // format strings are parsed once: `stats` reads millions of these.
    for items in NAIVE_FORMATS.iter() {
        let mut parsed = chrono::format::Parsed::new();
        if chrono::format::parse(&mut parsed, t, items.iter()).is_ok()
            && let Ok(n) = parsed.to_naive_datetime_with_offset(0)
        {
            return Ok(Stamp::Naive(n));
        }
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(Stamp::Epoch(dt.timestamp()));
    }
    if let Ok(dt) = chrono::DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f%:z") {
        return Ok(Stamp::Epoch(dt.timestamp()));
    }
    if let Some(z) = t.strip_suffix('Z').or_else(|| t.strip_suffix(" UTC"))
        && let Ok(n) = NaiveDateTime::parse_from_str(z, "%Y-%m-%d %H:%M:%S%.f")
    {
        return Ok(Stamp::Epoch(n.and_utc().timestamp()));
    }
    if let Ok(n) = t.parse::<i64>() {
        return Ok(Stamp::Epoch(n));
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

    #[test]
    fn ages_use_the_clock_that_wrote_them() {
        // Database session clock at 10:00 local (UTC+8), i.e. 02:00 UTC.
        let clock = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: dt(2, 0, 0).and_utc().timestamp(),
        };
        assert_eq!(
            age_on_db_clock(Stamp::Naive(dt(9, 0, 0)), &clock, None),
            Ok(3600)
        );
        assert_eq!(
            age_on_db_clock(Stamp::Session(dt(9, 59, 0)), &clock, None),
            Ok(60)
        );
        let epoch = dt(1, 50, 0).and_utc().timestamp();
        assert_eq!(age_on_db_clock(Stamp::Epoch(epoch), &clock, None), Ok(600));
        // Naive values written in Asia/Shanghai: 09:30 there is 01:30 UTC.
        let tz: chrono_tz::Tz = "Asia/Shanghai".parse().expect("tz");
        assert_eq!(
            age_on_db_clock(Stamp::Naive(dt(9, 30, 0)), &clock, Some(tz)),
            Ok(1800)
        );
        // ...while TIMESTAMP (session) values ignore the configured zone.
        assert_eq!(
            age_on_db_clock(Stamp::Session(dt(9, 30, 0)), &clock, Some(tz)),
            Ok(1800)
        );
        // Written in UTC but configured as UTC: same as naive.
        let utc: chrono_tz::Tz = "UTC".parse().expect("tz");
        assert_eq!(
            age_on_db_clock(Stamp::Naive(dt(1, 0, 0)), &clock, Some(utc)),
            Ok(3600)
        );
    }

    #[test]
    fn runtimes_between_stored_times() {
        // Session clock UTC+8.
        let clock = DbClock {
            now_naive: dt(10, 0, 0),
            now_epoch: dt(2, 0, 0).and_utc().timestamp(),
        };
        let n = |h, m, s| Stamp::Naive(dt(h, m, s));
        assert_eq!(
            seconds_between(n(8, 0, 0), n(10, 0, 5), &clock, None),
            Ok(7205)
        );
        assert_eq!(
            seconds_between(Stamp::Epoch(100), Stamp::Epoch(160), &clock, None),
            Ok(60)
        );
        // A naive start on the session clock and an epoch end: 09:00 local is 01:00 UTC.
        let end = dt(1, 30, 0).and_utc().timestamp();
        assert_eq!(
            seconds_between(n(9, 0, 0), Stamp::Epoch(end), &clock, None),
            Ok(1800)
        );
        // Across a DST change in the configured zone: 01:30 CET to 03:30 CEST is 1 hour.
        let tz: chrono_tz::Tz = "Europe/Berlin".parse().expect("tz");
        let day = |h, m| {
            Stamp::Naive(
                chrono::NaiveDate::from_ymd_opt(2026, 3, 29)
                    .and_then(|d| d.and_hms_opt(h, m, 0))
                    .expect("valid"),
            )
        };
        assert_eq!(
            seconds_between(day(1, 30), day(3, 30), &clock, Some(tz)),
            Ok(3600)
        );
        assert_eq!(
            seconds_between(day(1, 30), day(3, 30), &clock, None),
            Ok(7200)
        );
        assert!(seconds_between(day(2, 30), day(3, 30), &clock, Some(tz)).is_err());
    }

    #[test]
    fn nonexistent_local_time_is_an_error() {
        let tz: chrono_tz::Tz = "Europe/Berlin".parse().expect("tz");
        let gap = NaiveDate::from_ymd_opt(2026, 3, 29)
            .and_then(|d| d.and_hms_opt(2, 30, 0))
            .expect("valid");
        let clock = DbClock {
            now_naive: gap,
            now_epoch: 0,
        };
        assert!(age_on_db_clock(Stamp::Naive(gap), &clock, Some(tz)).is_err());
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
            Ok(Stamp::Naive(dt(9, 0, 0)))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29T09:00:00.250"),
            Ok(Stamp::Naive(
                NaiveDateTime::parse_from_str("2026-11-29 09:00:00.250", "%Y-%m-%d %H:%M:%S%.f")
                    .expect("p")
            ))
        );
        let utc9 = dt(9, 0, 0).and_utc().timestamp();
        assert_eq!(
            parse_text_stamp("2026-11-29T09:00:00Z"),
            Ok(Stamp::Epoch(utc9))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29 17:00:00+08:00"),
            Ok(Stamp::Epoch(utc9))
        );
        assert_eq!(
            parse_text_stamp("1764406800"),
            Ok(Stamp::Epoch(1_764_406_800))
        );
        assert_eq!(
            parse_text_stamp("2026-11-29 09:00"),
            Ok(Stamp::Naive(dt(9, 0, 0)))
        );
        assert_eq!(
            parse_text_stamp(" 2026-11-29 09:00:00 "),
            Ok(Stamp::Naive(dt(9, 0, 0)))
        );
        assert!(parse_text_stamp("2026-11-29 25:00:00").is_err());
        assert!(parse_text_stamp("2026-11-29 09:00:00 junk").is_err());
        assert!(parse_text_stamp("yesterday").is_err());
        assert!(parse_text_stamp("").is_err());
    }
}
