//! Named time zones: the zone naive `DATETIME` values were written in (`[database]
//! timezone`, or a PostgreSQL session's `TimeZone`), by the rules of the IANA time zone
//! database built into selfheal (jiff's bundled copy): every host judges the same, with or
//! without tzdata.
//!
//! A [`Zone`] is a small copyable handle. Each name is loaded once per process and kept
//! for its life: a run meets a handful of names at most (the configuration's, a session's).
//! The database is one block of data, not a table of pointers: nothing of it is relocated
//! or copied when the process starts; only the zones a run names are read.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use chrono::NaiveDateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

/// A named time zone (copyable; compared by name).
#[derive(Clone, Copy)]
pub struct Zone(&'static Loaded);

struct Loaded {
    /// The name as the database spells it (`Asia/Shanghai`).
    name: &'static str,
    tz: TimeZone,
}

static UTC: Loaded = Loaded {
    name: "UTC",
    tz: TimeZone::UTC,
};

/// The zones loaded so far.
static LOADED: Mutex<Vec<&'static Loaded>> = Mutex::new(Vec::new());

/// What a wall-clock time names in a zone, as unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// One instant.
    One(i64),
    /// The hour an autumn change repeats: two instants.
    Repeated { earlier: i64, later: i64 },
    /// The hour a spring change skips: the time read with the offset in force before the
    /// change (as a clock that was not yet moved forward wrote it).
    Skipped { before: i64 },
}

impl Zone {
    /// The zone of the IANA name `name` (`Asia/Shanghai`, `Etc/GMT-3`, `UTC`; letter case
    /// as it comes), or `None` when the database has no such zone.
    pub fn named(name: &str) -> Option<Zone> {
        if name == UTC.name {
            return Some(Zone::utc());
        }
        let tz = TimeZone::get(name).ok()?;
        let canonical = tz.iana_name().unwrap_or(name);
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = loaded.iter().find(|l| l.name == canonical) {
            return Some(Zone(l));
        }
        let name: &'static str = Box::leak(canonical.to_string().into_boxed_str());
        let l: &'static Loaded = Box::leak(Box::new(Loaded { name, tz }));
        loaded.push(l);
        Some(Zone(l))
    }

    /// Coordinated Universal Time.
    pub fn utc() -> Zone {
        Zone(&UTC)
    }

    /// The zone's name as the database spells it.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The instant(s) the wall-clock time `n` names in this zone (whole seconds, as
    /// `n.and_utc().timestamp()` counts them); `None` for a year the database does not
    /// cover (before -9999 or after 9999).
    pub fn local(self, n: NaiveDateTime) -> Option<Local> {
        use chrono::{Datelike, Timelike};
        let civil = jiff::civil::DateTime::new(
            i16::try_from(n.year()).ok()?,
            i8::try_from(n.month()).ok()?,
            i8::try_from(n.day()).ok()?,
            i8::try_from(n.hour()).ok()?,
            i8::try_from(n.minute()).ok()?,
            i8::try_from(n.second()).ok()?,
            0,
        )
        .ok()?;
        let wall = n.and_utc().timestamp();
        let at = |offset: jiff::tz::Offset| wall - i64::from(offset.seconds());
        Some(match self.0.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => Local::One(at(offset)),
            AmbiguousOffset::Fold { before, after } => Local::Repeated {
                earlier: at(before),
                later: at(after),
            },
            AmbiguousOffset::Gap { before, .. } => Local::Skipped { before: at(before) },
        })
    }

    /// The zone's offset from UTC right now, in seconds.
    pub fn offset_now(self) -> i64 {
        i64::from(self.0.tz.to_offset(jiff::Timestamp::now()).seconds())
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Zone {}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zone({})", self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_opt(h, mi, 0))
            .expect("a valid date")
    }

    fn utc(n: NaiveDateTime) -> i64 {
        n.and_utc().timestamp()
    }

    #[test]
    fn names_are_the_databases_and_load_once() {
        let a = Zone::named("Asia/Shanghai").expect("a zone");
        let b = Zone::named("asia/shanghai").expect("the same zone");
        assert_eq!(a, b);
        assert_eq!(b.to_string(), "Asia/Shanghai");
        assert!(std::ptr::eq(a.0, b.0));
        assert_eq!(Zone::named("UTC"), Some(Zone::utc()));
        assert_eq!(Zone::named("Etc/GMT-3").map(Zone::name), Some("Etc/GMT-3"));
        assert_eq!(Zone::named("Mars/Olympus_Mons"), None);
        assert_eq!(Zone::named(""), None);
    }

    #[test]
    fn a_wall_clock_time_is_one_instant_two_or_one_skipped() {
        let berlin = Zone::named("Europe/Berlin").expect("a zone");
        // Winter (+01:00) and summer (+02:00).
        assert_eq!(
            berlin.local(at(2026, 1, 15, 12, 0)),
            Some(Local::One(utc(at(2026, 1, 15, 11, 0))))
        );
        assert_eq!(
            berlin.local(at(2026, 7, 15, 12, 0)),
            Some(Local::One(utc(at(2026, 7, 15, 10, 0))))
        );
        // 2026-10-25 02:30 happens twice: at 00:30 UTC (+02:00) and 01:30 UTC (+01:00).
        assert_eq!(
            berlin.local(at(2026, 10, 25, 2, 30)),
            Some(Local::Repeated {
                earlier: utc(at(2026, 10, 25, 0, 30)),
                later: utc(at(2026, 10, 25, 1, 30)),
            })
        );
        // 2026-03-29 02:30 never happens: read with +01:00, the offset before the change.
        assert_eq!(
            berlin.local(at(2026, 3, 29, 2, 30)),
            Some(Local::Skipped {
                before: utc(at(2026, 3, 29, 1, 30))
            })
        );
        let shanghai = Zone::named("Asia/Shanghai").expect("a zone");
        assert_eq!(
            shanghai.local(at(2026, 12, 1, 8, 0)),
            Some(Local::One(utc(at(2026, 12, 1, 0, 0))))
        );
        assert_eq!(
            Zone::utc().local(at(1999, 12, 31, 23, 59)),
            Some(Local::One(utc(at(1999, 12, 31, 23, 59))))
        );
        assert_eq!(Zone::utc().local(at(12_000, 1, 1, 0, 0)), None);
    }

    #[test]
    fn the_offset_now_is_the_zones() {
        assert_eq!(Zone::utc().offset_now(), 0);
        assert_eq!(
            Zone::named("Asia/Shanghai").map(Zone::offset_now),
            Some(8 * 3600)
        );
        assert_eq!(
            Zone::named("Etc/GMT+5").map(Zone::offset_now),
            Some(-5 * 3600)
        );
    }
}
