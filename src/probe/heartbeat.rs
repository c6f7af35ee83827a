//! Heartbeat files: the age of a file's mtime on the host clock.
//!
//! I/O: one `stat(2)` per file (no open, so the file's own permissions do not matter, only
//! the directories'). ENOENT is `Missing`; EACCES or any other error is `Unreadable`.

use std::io::ErrorKind;
use std::path::Path;
use std::time::SystemTime;

use crate::clock::plausible_age;
use crate::decide::Heartbeat;

/// The heartbeat a file gives at `now` (host clock).
pub fn file_heartbeat(path: &Path, now: SystemTime) -> Heartbeat {
    match std::fs::metadata(path) {
        Ok(m) => match m.modified() {
            Ok(mtime) => {
                let age = match now.duration_since(mtime) {
                    Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
                };
                match plausible_age(age, &format!("mtime of {}", path.display())) {
                    Ok(a) => Heartbeat::Age(a),
                    Err(why) => Heartbeat::Unreadable(why),
                }
            }
            Err(e) => Heartbeat::Unreadable(format!("{}: mtime: {e}", path.display())),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Heartbeat::Missing,
        Err(e) => Heartbeat::Unreadable(format!("{}: {e}", path.display())),
    }
}

/// Combines the file and column heartbeats of one row: the freshest known beat wins; with
/// no fresh-enough beat, anything unreadable makes the whole unreadable.
pub fn combine(a: Heartbeat, b: Heartbeat) -> Heartbeat {
    use Heartbeat::*;
    // A beat is a beat here; whether it belongs to this row is judged after combining.
    let plain = |h| match h {
        BeforeRow(x) => Age(x),
        h => h,
    };
    match (plain(a), plain(b)) {
        (Age(x), Age(y)) => Age(x.min(y)),
        (Unreadable(w), _) | (_, Unreadable(w)) => Unreadable(w),
        (Age(x), Missing) | (Missing, Age(x)) => Age(x),
        (Missing, Missing) => Missing,
        (BeforeRow(_), _) | (_, BeforeRow(_)) => Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn combining_sources() {
        use Heartbeat::*;
        assert_eq!(combine(Age(5), Age(500)), Age(5));
        assert_eq!(combine(Missing, Age(7)), Age(7));
        assert_eq!(combine(Missing, Missing), Missing);
        assert_eq!(
            combine(Unreadable("x".into()), Age(1)),
            Unreadable("x".into())
        );
        assert_eq!(
            combine(Missing, Unreadable("y".into())),
            Unreadable("y".into())
        );
    }

    #[test]
    fn file_ages_missing_and_future() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("hb");
        let now = SystemTime::now();
        assert_eq!(file_heartbeat(&p, now), Heartbeat::Missing);
        let f = std::fs::File::create(&p).expect("create");
        f.set_modified(now - Duration::from_secs(2_820))
            .expect("mtime");
        assert_eq!(file_heartbeat(&p, now), Heartbeat::Age(2_820));
        f.set_modified(now + Duration::from_secs(30))
            .expect("mtime");
        assert_eq!(file_heartbeat(&p, now), Heartbeat::Age(0));
        f.set_modified(now + Duration::from_secs(3_600))
            .expect("mtime");
        assert!(
            matches!(file_heartbeat(&p, now), Heartbeat::Unreadable(w) if w.contains("3600s in the future"))
        );
        // A missing parent directory is "missing", like a missing file.
        assert_eq!(
            file_heartbeat(&dir.path().join("nope/hb"), now),
            Heartbeat::Missing
        );
    }
}
