//! doctor on each watch's evidence files on this host: the heartbeat and lock directories
//! as the user selfheal runs as (can it look inside; could others swap a lock there), a
//! fixed heartbeat file's last beat, and a heartbeat template that matches no running row's
//! file while its directory is there (a typo in the file name).
//!
//! I/O: stats directories and files and lists a template's directory (bounded); reads no
//! file's content and creates nothing.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use crate::clock::{Clocks, age_on_db_clock, human};
use crate::config::{PathTemplate, Watch, fmt_duration};
use crate::decide::Heartbeat;
use crate::evidence;
use crate::host::Host;
use crate::store;

use super::{Finding, me};

/// Whether this user can look inside `dir` (stat files there) — exactly what a heartbeat or
/// lock probe needs.
#[derive(Debug, PartialEq, Eq)]
enum DirAccess {
    Ok,
    Missing,
    NotDir,
    Denied(String),
    Other(String),
}

fn probe_dir(dir: &Path) -> DirAccess {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => DirAccess::Missing,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => DirAccess::Denied(e.to_string()),
        Err(e) => DirAccess::Other(e.to_string()),
        Ok(m) if !m.is_dir() => DirAccess::NotDir,
        Ok(_) => match std::fs::metadata(dir.join(".selfheal-doctor-probe")) {
            Ok(_) => DirAccess::Ok,
            Err(e) if e.kind() == ErrorKind::NotFound => DirAccess::Ok,
            Err(e) if e.kind() == ErrorKind::PermissionDenied => DirAccess::Denied(e.to_string()),
            Err(e) => DirAccess::Other(e.to_string()),
        },
    }
}

/// The directory a template's files live in: the part before the first component holding
/// `{id}`; and the file itself when the template has no `{id}`.
pub(super) fn template_dir(t: &PathTemplate) -> (PathBuf, Option<PathBuf>) {
    let p = Path::new(t.as_str());
    if !t.has_id() {
        return (
            p.parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
            Some(p.to_path_buf()),
        );
    }
    let mut dir = PathBuf::new();
    for c in p.components() {
        if let Component::Normal(s) = c
            && s.to_string_lossy().contains("{id}")
        {
            break;
        }
        dir.push(c);
    }
    (dir, None)
}

/// The command that lets this user look inside `dir` (or the directory above it that
/// shuts it out), for the owner, group and mode found there.
fn denied_fix(dir: &Path) -> String {
    crate::fix::access_fix_in(dir, crate::fix::Permission::Search, super::again()).unwrap_or_else(
        || {
            format!(
                "give {} search (x) permission on {} and every directory above it",
                crate::fix::RunningUser::current().name,
                dir.display()
            )
        },
    )
}

pub(super) fn heartbeat_finding(w: &Watch, t: &PathTemplate) -> Finding {
    let subject = format!("watch {}: heartbeat_file", w.name);
    let (dir, file) = template_dir(t);
    match probe_dir(&dir) {
        DirAccess::Ok => {}
        DirAccess::Missing => {
            return Finding::fail(
                subject,
                format!(
                    "directory {} does not exist: no row can be judged by its heartbeat \
                     (every row older than stale_after is unknown, for a person, unless its \
                     owner pid or lock proves it dead)",
                    dir.display()
                ),
                format!("correct heartbeat_file (now {})", t.as_str()),
            );
        }
        DirAccess::NotDir => {
            return Finding::fail(
                subject,
                format!("{} is not a directory", dir.display()),
                format!("correct heartbeat_file (now {})", t.as_str()),
            );
        }
        DirAccess::Denied(e) => {
            return Finding::fail(
                subject,
                format!(
                    "{} cannot look inside {} ({e}): every heartbeat would be unreadable and \
                     every row unknown",
                    me(),
                    dir.display()
                ),
                denied_fix(&dir),
            );
        }
        DirAccess::Other(e) => {
            return Finding::fail(
                subject,
                format!("{}: {e}", dir.display()),
                "check the file system (NFS mount?)",
            );
        }
    }
    match file {
        None => Finding::pass(
            subject,
            format!("{} can read the heartbeat files in {}", me(), dir.display()),
        ),
        Some(f) => match crate::probe::file_heartbeat(&f, SystemTime::now()) {
            Heartbeat::Age(a) | Heartbeat::BeforeRow(a) => Finding::pass(
                subject,
                format!("{} is readable; it last beat {} ago", f.display(), human(a)),
            ),
            Heartbeat::Missing | Heartbeat::NotConfigured => Finding::pass(
                subject,
                format!(
                    "{} does not exist now (no job running?); its directory is readable",
                    f.display()
                ),
            ),
            Heartbeat::Unusable(why) | Heartbeat::Unreadable(why) => {
                Finding::fail(subject, why, denied_fix(&dir))
            }
        },
    }
}

/// At most this many running rows are probed for their heartbeat file.
pub(super) const TEMPLATE_ROWS: usize = 100;
/// At most this many names of the template's directory are read for a hint.
const TEMPLATE_DIR_NAMES: usize = 1000;
/// At most this many names are given as a hint.
const TEMPLATE_HINTS: usize = 3;

/// A `heartbeat_file` that names no file the job writes while its directory is there: a
/// typo (`sync-{id}.hb` for the job's `sync_{id}.hb`) passes the directory check, and looks
/// to `check` like every job dying at once (held, for a person: docs/design.md#verdicts). Said when none
/// of this host's running rows past `stale_after` (the first [`TEMPLATE_ROWS`]) has its
/// file, with names in that directory that look like the template's as a hint.
pub(super) fn heartbeat_template_finding(
    w: &Watch,
    t: &PathTemplate,
    rows: &[store::RunningRow],
    clocks: &Clocks,
    host: &Host,
) -> Option<Finding> {
    let stale_after = i64::try_from(w.stale_after.as_secs()).unwrap_or(i64::MAX);
    let now = SystemTime::now();
    let mut looked = 0usize;
    let mut first: Option<(String, PathBuf)> = None;
    for r in rows.iter().filter(|r| !evidence::is_remote(w, r, host)) {
        let Ok(Some(s)) = &r.started.stamp else {
            continue;
        };
        if !age_on_db_clock(*s, &clocks.db).is_ok_and(|a| a > stale_after) {
            continue;
        }
        let id = r.id.to_string();
        let Ok(path) = t.render(&id) else {
            continue;
        };
        // Any file there (even a stale one, or an earlier row's) is the template matching.
        if crate::probe::file_heartbeat(&path, now) != Heartbeat::Missing {
            return None;
        }
        first.get_or_insert((id, path));
        looked += 1;
        if looked == TEMPLATE_ROWS {
            break;
        }
    }
    let (id, path) = first?;
    let (dir, file) = template_dir(t);
    if probe_dir(&dir) != DirAccess::Ok {
        // The directory's own finding says what is wrong with it.
        return None;
    }
    let file = file.as_deref().and_then(Path::file_name);
    // The name the files of `dir` should have: the component with `{id}`, or the file's.
    let components = Path::new(t.as_str()).components();
    let pattern = components
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .find(|s| s.contains("{id}"))
        .or_else(|| file.map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let hint = match similar_names(&dir, &pattern).as_slice() {
        [] => format!("nothing in {} looks like it", dir.display()),
        names => format!(
            "{} holds {}",
            dir.display(),
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Some(Finding::warn(
        format!("watch {}: heartbeat files", w.name),
        format!(
            "{} past stale_after ({}) {} (e.g. row {id}: {} does not exist), while {} exists: \
             {} seems to name no file the job writes (a typo?), which looks to check exactly \
             like every job dying at once; {hint}",
            match looked {
                1 => "this host's one running row".to_string(),
                TEMPLATE_ROWS =>
                    format!("not one of the first {looked} of this host's running rows"),
                n => format!("not one of this host's {n} running rows"),
            },
            fmt_duration(w.stale_after),
            if looked == 1 {
                "has no heartbeat file"
            } else {
                "has its heartbeat file"
            },
            path.display(),
            dir.display(),
            t.as_str(),
        ),
        format!(
            "correct heartbeat_file (now {}) to the file the job touches; selfheal check \
             --explain shows where each row's heartbeat was looked for",
            t.as_str()
        ),
    ))
}

/// Up to [`TEMPLATE_HINTS`] names in `dir` (of the first [`TEMPLATE_DIR_NAMES`] read) that
/// look like `pattern`, a template's file name (`sync-{id}.hb`): the same text before
/// `{id}`, the same extension, or the same leading word (`sync`), sorted.
fn similar_names(dir: &Path, pattern: &str) -> Vec<String> {
    let (before, after) = pattern.split_once("{id}").unwrap_or((pattern, ""));
    let extension = after
        .rsplit_once('.')
        .or_else(|| before.rsplit_once('.').filter(|_| after.is_empty()))
        .map(|(_, e)| format!(".{e}"))
        .filter(|e| e.len() > 1);
    let word: String = before
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .take(TEMPLATE_DIR_NAMES)
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            (!before.is_empty() && n.starts_with(before))
                || extension.as_deref().is_some_and(|e| n.ends_with(e))
                || (word.chars().count() >= 3 && n.starts_with(&word))
        })
        .collect();
    names.sort();
    names.truncate(TEMPLATE_HINTS);
    names
}

pub(super) fn lock_dir_finding(w: &Watch, t: &PathTemplate) -> Finding {
    let subject = format!("watch {}: lock_file", w.name);
    let (dir, _) = template_dir(t);
    match probe_dir(&dir) {
        DirAccess::Ok => match swappable_lock_dir(&dir) {
            Some(who) => Finding::warn(
                subject,
                format!(
                    "directory {} can be written by {who} (and is not sticky): anyone there \
                     could swap a lock file the job holds for an unlocked one, so a free lock \
                     there proves nothing and its rows are judged by their heartbeat alone",
                    dir.display()
                ),
                format!(
                    "chmod o-w,g-w {d} (or chmod +t {d}), or keep the job's locks in a \
                     directory only its user can write",
                    d = dir.display()
                ),
            ),
            None => Finding::pass(
                subject,
                format!(
                    "directory {} exists and {} can look inside (the lock is probed, never \
                     taken or deleted)",
                    dir.display(),
                    me()
                ),
            ),
        },
        DirAccess::Missing => Finding::fail(
            subject,
            format!(
                "directory {} does not exist: the lock will always be absent, which proves \
                 nothing",
                dir.display()
            ),
            format!("correct lock_file (now {})", t.as_str()),
        ),
        DirAccess::NotDir => Finding::fail(
            subject,
            format!("{} is not a directory", dir.display()),
            format!("correct lock_file (now {})", t.as_str()),
        ),
        DirAccess::Denied(e) => Finding::fail(
            subject,
            format!("{} cannot look inside {} ({e})", me(), dir.display()),
            denied_fix(&dir),
        ),
        DirAccess::Other(e) => Finding::fail(
            subject,
            format!("{}: {e}", dir.display()),
            "check the file system",
        ),
    }
}

/// Who could swap a lock file in `dir` (docs/design.md#verdicts), taking the directory's owner as the
/// lock files' (a job keeps its locks in a directory of its own); `None` when nobody but
/// root, this user and that owner can.
fn swappable_lock_dir(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    crate::fsafe::swappable_by(m.uid(), m.gid(), m.mode() & 0o7777, m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_directories() {
        let t = |s: &str| PathTemplate::parse(s).expect("template");
        assert_eq!(
            template_dir(&t("/var/www/run/progress-{id}.json")),
            (PathBuf::from("/var/www/run"), None)
        );
        assert_eq!(
            template_dir(&t("/var/www/run/{id}/hb")),
            (PathBuf::from("/var/www/run"), None)
        );
        assert_eq!(
            template_dir(&t("/var/www/run/progress.json")),
            (
                PathBuf::from("/var/www/run"),
                Some(PathBuf::from("/var/www/run/progress.json"))
            )
        );
    }

    #[test]
    fn names_like_a_template_are_a_few_with_its_prefix_extension_or_word() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in [
            "sync_1.hb",
            "sync_2.hb",
            "sync_10.hb",
            "sync_3.hb",
            "other.hb",
            "deploy.log",
            "synchro.lock",
        ] {
            std::fs::write(dir.path().join(n), "").expect("file");
        }
        // The same extension or leading word; a few, sorted.
        assert_eq!(
            similar_names(dir.path(), "sync-{id}.hb"),
            ["other.hb", "sync_1.hb", "sync_10.hb"]
        );
        assert_eq!(
            similar_names(dir.path(), "sync-{id}.beat"),
            ["sync_1.hb", "sync_10.hb", "sync_2.hb"]
        );
        assert!(similar_names(dir.path(), "hb-{id}").is_empty());
        assert_eq!(
            similar_names(dir.path(), "deploy.lock"),
            ["deploy.log", "synchro.lock"]
        );
    }
}
