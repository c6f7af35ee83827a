//! The row's heartbeat: a file's mtime on the host clock, and the heartbeat column on the
//! database's, the freshest of the two winning ([`HeartbeatSource`]).
//!
//! I/O: one `stat(2)` per file (no open, so the file's own permissions do not matter, only
//! the directories'), and one of its directory when the file is not there. ENOENT is
//! `Missing` when the directory exists; a directory that does not exist, or that the
//! running user cannot search (EACCES), makes the file `Unusable` — neutral evidence, so
//! that a typo in `heartbeat_file` never reads as every job dying at once; any other error
//! is `Unreadable`. The column is read with the row; a file is read again just before a
//! write.

use std::io::ErrorKind;
use std::path::Path;
use std::time::SystemTime;

use crate::clock::{Clocks, age_on_db_clock, epoch, plausible_age};
use crate::config::Watch;
use crate::decide::{Ahead, Basis, Evidence, Heartbeat, Owner, Thresholds, Verdict, WorkerProof};
use crate::host::Host;
use crate::message;
use crate::store::RunningRow;

use super::times::future_by;
use super::{Human, Item, Reading, Rendered, Source, Value, widest_secs};

/// The row's heartbeat ([`Evidence::heartbeat`], whose it is, and what its column alone
/// says).
pub struct HeartbeatSource;

impl Source for HeartbeatSource {
    /// The column, on the database clock. It is all there is of another host's row: its
    /// heartbeat file is that host's.
    fn read_row(&self, at: &Reading<'_>, e: &mut Evidence) {
        let (column, ahead_by) = column_heartbeat(at.row, at.scene.clocks);
        if let Some(by_s) = ahead_by {
            let by_s = e.ahead.map_or(by_s, |a| a.by_s.max(by_s));
            e.ahead = Some(Ahead { by_s, seen_s: 0 });
        }
        // A heartbeat column in the future beside a start in the future is as
        // untrustworthy as the start: neither says how old anything is.
        let column = match column {
            Some(Heartbeat::Unreadable(why)) if ahead_by.is_some() => {
                Some(Heartbeat::Unusable(why))
            }
            c => c,
        };
        e.heartbeat = column.clone().unwrap_or(Heartbeat::Missing);
        if at.w.heartbeat_file.is_none() && at.w.heartbeat_column.is_none() {
            e.heartbeat = Heartbeat::NotConfigured;
        }
        e.heartbeat_own = true;
        e.heartbeat_column = column;
    }

    /// The file, on the host clock, beside the column: the freshest beat, whether it is the
    /// row's own, and whether the owner pid that looks reused touched it.
    fn read_now(&self, at: &Reading<'_>, e: &mut Evidence) {
        let Reading { w, scene, .. } = at;
        let file_own = w
            .heartbeat_file
            .as_ref()
            .is_none_or(|t| t.has_id() || scene.local_rows <= 1);
        let from_file = w.heartbeat_file.as_ref().map(|t| match t.render(at.id()) {
            Ok(p) => file_heartbeat(&p, scene.host_now),
            Err(why) => Heartbeat::Unreadable(format!("heartbeat_file: {why}")),
        });
        if let Owner::Reused { pid, proof, .. } = &mut e.owner {
            let touched_since = file_own
                && from_file
                    .as_ref()
                    .is_some_and(|h| beat_since_start_of(h, scene.host, *pid, scene.host_now));
            *proof = touched_since.then_some(WorkerProof::BeatSinceStart);
        }
        if w.heartbeat_file.is_none() && w.heartbeat_column.is_none() {
            (e.heartbeat, e.heartbeat_own) = (Heartbeat::NotConfigured, true);
            return;
        }
        let (heartbeat, own) = freshest(from_file, e.heartbeat_column.clone(), file_own);
        e.heartbeat = match (heartbeat, &e.total_age) {
            // Older than the row itself, beyond the tolerance between the two clocks: a
            // beat of an earlier row with the same id.
            (Heartbeat::Age(a), Ok(t)) if a > t.saturating_add(scene.clocks.tolerance_s) => {
                Heartbeat::BeforeRow(a)
            }
            (h, _) => h,
        };
        e.heartbeat_own = own;
    }

    fn render(&self, e: &Evidence, out: &mut Rendered) {
        let (value, human) = match &e.heartbeat {
            Heartbeat::NotConfigured => (Value::Word("none"), Human::Same),
            Heartbeat::Age(a) => (Value::Secs(*a), Human::Ago(*a)),
            Heartbeat::Missing => (Value::Word("missing"), Human::Same),
            // Missing as far as this row goes: the message and `stats` never read it as a
            // silence of this run.
            Heartbeat::BeforeRow(a) => (Value::Word("missing"), Human::BeforeRow(*a)),
            Heartbeat::Unusable(_) => (
                Value::Word("unusable"),
                Human::Words("unusable (its directory is missing or cannot be searched)"),
            ),
            Heartbeat::Unreadable(_) => (Value::Word("unreadable"), Human::Same),
        };
        out.record.heartbeat_age_s = match e.heartbeat {
            Heartbeat::Age(a) => Some(a),
            _ => None,
        };
        out.record.heartbeat = match &e.heartbeat {
            Heartbeat::Age(_) => "present".into(),
            Heartbeat::NotConfigured => "none".into(),
            Heartbeat::Missing => "missing".into(),
            Heartbeat::BeforeRow(_) => "before_row".into(),
            Heartbeat::Unusable(why) => format!("unusable: {why}").into(),
            Heartbeat::Unreadable(why) => format!("unreadable: {why}").into(),
        };
        out.items.push(Item {
            key: "heartbeat_age",
            value,
            word: "heartbeat",
            human,
            aside: None,
        });
    }

    // Its words in the row message are a figure of their own ([`figure`]).

    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[
            (Verdict::Dead, Basis::HeartbeatStale),
            (Verdict::Dead, Basis::HeartbeatMissing),
        ]
    }

    fn widest(&self, w: &Watch, _basis: &Basis, t: Thresholds, e: &mut Evidence) {
        e.heartbeat = if w.heartbeat_file.is_none() && w.heartbeat_column.is_none() {
            Heartbeat::NotConfigured
        } else {
            Heartbeat::Age(widest_secs(t))
        };
        e.heartbeat_own = true;
    }
}

/// The heartbeat as the row message's figure (`heartbeat 47m ago`, `no heartbeat`).
pub fn figure(h: &Heartbeat) -> message::Beat {
    match h {
        Heartbeat::Age(a) => message::Beat::Ago(*a),
        // An earlier row's beat: this row has none of its own.
        Heartbeat::Missing | Heartbeat::BeforeRow(_) => message::Beat::Missing,
        Heartbeat::Unusable(_) | Heartbeat::Unreadable(_) => message::Beat::Unreadable,
        Heartbeat::NotConfigured => message::Beat::NotConfigured,
    }
}

/// The heartbeat column's age on the database clock, where the watch has one, and how far
/// beyond the tolerance it lies in the future, if it does.
fn column_heartbeat(row: &RunningRow, clocks: &Clocks) -> (Option<Heartbeat>, Option<u64>) {
    let Some(tv) = row.heartbeat.as_ref() else {
        return (None, None);
    };
    match &tv.stamp {
        Ok(None) => (Some(Heartbeat::Missing), None),
        Ok(Some(s)) => match age_on_db_clock(*s, &clocks.db) {
            Ok(a) => (
                Some(
                    match plausible_age(a, &format!("heartbeat column ({})", tv.raw)) {
                        Ok(a) => Heartbeat::Age(a),
                        Err(why) => Heartbeat::Unreadable(why),
                    },
                ),
                future_by(a),
            ),
            Err(why) => (Some(Heartbeat::Unreadable(why)), None),
        },
        Err(why) => (
            Some(Heartbeat::Unreadable(format!("heartbeat column: {why}"))),
            None,
        ),
    }
}

/// The freshest of the heartbeat file (host clock) and the heartbeat column (database
/// clock), where the watch names them, and whether it is the row's own: the column always
/// is, the file when `file_own` (no other running row shares it).
fn freshest(
    from_file: Option<Heartbeat>,
    from_column: Option<Heartbeat>,
    file_own: bool,
) -> (Heartbeat, bool) {
    match (from_file, from_column) {
        (Some(a), Some(b)) => {
            // The column decides whose the beat is when it is at least as fresh.
            let column_freshest = match (&a, &b) {
                (Heartbeat::Age(x) | Heartbeat::BeforeRow(x), Heartbeat::Age(y)) => y <= x,
                (_, Heartbeat::Age(_)) => true,
                _ => false,
            };
            (combine(a, b), file_own || column_freshest)
        }
        (Some(a), None) => (a, file_own),
        (None, Some(b)) => (b, true),
        (None, None) => (Heartbeat::Missing, true),
    }
}

/// True when a heartbeat file's last beat (`h`, an age at `host_now`) came after process
/// `pid` started, both by the host clock: the process was alive when the file was touched,
/// so a pid recycled after the worker's death is never taken for it. The age is in whole
/// seconds (the beat may be up to a second older than it says), so a second is given up.
fn beat_since_start_of(h: &Heartbeat, host: &Host, pid: u32, host_now: SystemTime) -> bool {
    let Heartbeat::Age(age) = h else {
        return false;
    };
    let Some(started) = host.process_start(pid) else {
        return false;
    };
    let beat = epoch(host_now).saturating_sub(i64::try_from(*age).unwrap_or(i64::MAX));
    #[allow(clippy::cast_precision_loss)] // unix seconds, far below 2^53
    let beat = beat.saturating_sub(1) as f64;
    beat >= started
}

/// The heartbeat a file gives at `now` (host clock): the mtime of a regular file, looked
/// at without being opened ([`crate::fsafe::look`]). Anything else there — a FIFO, a device
/// (whose mtime anyone writing to it moves), a link another user could have planted — is
/// [`Heartbeat::Unreadable`]: it proves nothing either way (docs/design.md#file-safety).
pub fn file_heartbeat(path: &Path, now: SystemTime) -> Heartbeat {
    match crate::fsafe::look(path) {
        Ok(Ok(Some(st))) => {
            let age = match now.duration_since(st.modified) {
                Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
            };
            match plausible_age(age, &format!("mtime of {}", path.display())) {
                Ok(a) => Heartbeat::Age(a),
                Err(why) => Heartbeat::Unreadable(why),
            }
        }
        Ok(Ok(None)) => missing_or_unusable(path),
        Ok(Err(st)) => Heartbeat::Unreadable(format!(
            "{}: {}, not a regular file",
            path.display(),
            st.kind.describe()
        )),
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
        (NotConfigured, h) | (h, NotConfigured) => h,
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
