//! Heartbeat files: the age of a file's mtime on the host clock.
//!
//! I/O: one `stat(2)` per file (no open, so the file's own permissions do not matter, only
//! the directories'), and one of its directory when the file is not there. ENOENT is
//! `Missing` when the directory exists; a directory that does not exist, or that the
//! running user cannot search (EACCES), makes the file `Unusable` — neutral evidence, so
//! that a typo in `heartbeat_file` never reads as every job dying at once; any other error
//! is `Unreadable`.

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
        Err(e) if e.kind() == ErrorKind::NotFound => missing_or_unusable(path),
        Err(e) if e.kind() == ErrorKind::NotADirectory => Heartbeat::Unusable(format!(
            "{}: a component of its directory is not a directory",
            path.display()
        )),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Heartbeat::Unusable(format!(
            "{}: the running user cannot search a directory on its path ({e})",
            path.display()
        )),
        Err(e) => Heartbeat::Unreadable(format!("{}: {e}", path.display())),
    }
}

/// A file that is not there: `Missing` when its directory is (the job has not beaten yet,
/// or is gone), `Unusable` when the directory itself is missing.
fn missing_or_unusable(path: &Path) -> Heartbeat {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Heartbeat::Missing;
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Heartbeat::Missing,
        Ok(_) => Heartbeat::Unusable(format!(
            "{}: {} is not a directory",
            path.display(),
            dir.display()
        )),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Heartbeat::Unusable(format!(
                "{}: its directory {} does not exist",
                path.display(),
                dir.display()
            ))
        }
        // The file's own stat said "not found", so its directory could be searched.
        Err(_) => Heartbeat::Missing,
    }
}

/// Combines the file and column heartbeats of one row: the freshest known beat wins; with
/// no fresh-enough beat, anything unreadable makes the whole unreadable; a source that
/// cannot be used counts for nothing beside one that can.
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
        (Age(x), Missing | Unusable(_)) | (Missing | Unusable(_), Age(x)) => Age(x),
        (Missing, Missing) => Missing,
        (Unusable(w), _) | (_, Unusable(w)) => Unusable(w),
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
        let u = || Unusable("nodir".into());
        assert_eq!(combine(u(), Age(3)), Age(3));
        assert_eq!(combine(Age(3), u()), Age(3));
        assert_eq!(combine(u(), Missing), u());
        assert_eq!(combine(Missing, u()), u());
        assert_eq!(combine(u(), Unreadable("z".into())), Unreadable("z".into()));
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
        // A missing directory is unusable evidence, not a missing beat (a typo in a path).
        assert!(matches!(
            file_heartbeat(&dir.path().join("nope/hb"), now),
            Heartbeat::Unusable(w) if w.contains("does not exist")
        ));
        assert!(matches!(
            file_heartbeat(&p.join("hb"), now),
            Heartbeat::Unusable(w) if w.contains("not a directory")
        ));
    }
}
