//! doctor on selfheal's own files: the run lock (reached as `check` reaches it), the state
//! directory, the metrics file's directory, and a `check --log` target the last real run
//! could not reach (from `state_dir/run-state.json`).
//!
//! I/O: stats paths and asks `access(2)`, opens an existing run lock read-write without
//! locking it, reads `run-state.json`; writes nothing.

use std::io::ErrorKind;
use std::path::Path;
use std::time::SystemTime;

use nix::unistd::{AccessFlags, access};

use crate::clock::human;
use crate::config;
use crate::error::Error;

use super::{Finding, me};

fn writable(p: &Path) -> bool {
    access(p, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
}

/// The nearest existing ancestor of `p` (itself included).
fn existing_ancestor(p: &Path) -> Option<&Path> {
    p.ancestors().find(|a| a.exists())
}

pub(super) fn run_lock_finding(path: &Path, state_dir: &Path) -> Finding {
    let subject = "run lock";
    // Reached as check reaches it (src/runlock.rs): a link at its name or on the way, or
    // another user's lock, is refused; an existing lock is opened read-write through the
    // same walk, never by following a link (doctor runs as root too).
    let found = crate::fsafe::Dir::open_parent(path).and_then(|(d, name)| {
        match d.stat_at(&name)? {
            Some(st) if st.kind == crate::fsafe::Kind::Symlink => {
                Err(crate::fsafe::Error::FinalSymlink {
                    path: path.to_path_buf(),
                })
            }
            Some(st) if st.uid != nix::unistd::geteuid().as_raw() => {
                Err(crate::fsafe::Error::NotOwned {
                    path: path.to_path_buf(),
                    owner: crate::fsafe::Who::of(st.uid),
                    me: crate::fsafe::Who::me(),
                })
            }
            // Read-write, as check opens it (a read-only descriptor is not enough any
            // more); the mode applies only if it vanished meanwhile, as check would
            // create it.
            Some(_) => d.open_rw(&name, 0o600).map(|_| true),
            None => Ok(false),
        }
    });
    match found {
        Ok(true) => return Finding::pass(subject, format!("{} is usable", path.display())),
        Err(e) if !e.is_not_found() && e.io_kind().is_none() => {
            return refused_finding(subject, e, "opening the run lock (run.lock_file)");
        }
        Err(e) if !e.is_not_found() => {
            // Shut out on the way: say where, in words, not the system call that failed.
            let why = match (e.io_kind(), crate::fix::shut_out_at(path)) {
                (Some(ErrorKind::PermissionDenied), Some(dir)) => {
                    format!("it may not look inside {}", crate::fix::describe_dir(dir))
                }
                _ => e.to_string(),
            };
            return Finding::fail(
                subject,
                format!("{} cannot open {}: {why}", me(), path.display()),
                lock_fix(path, state_dir),
            );
        }
        _ => {}
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    // The directory may not be there yet: a run creates the state directory first.
    match existing_ancestor(dir) {
        Some(a) if a.is_dir() && writable(a) => Finding::pass(
            subject,
            format!(
                "{} will be created in {} on the first run",
                path.display(),
                dir.display()
            ),
        ),
        _ => Finding::fail(
            subject,
            format!(
                "{} does not exist and {} cannot create it in {}",
                path.display(),
                me(),
                dir.display()
            ),
            lock_fix(path, state_dir),
        ),
    }
}

/// The fix for a run lock this user cannot create or open: as for the state directory
/// when it lives there (the default); a lock file set elsewhere is best left to the
/// default.
fn lock_fix(path: &Path, state_dir: &Path) -> String {
    if path.starts_with(state_dir) && state_dir.exists() && !state_dir.is_dir() {
        return format!(
            "{} is not a directory: point run.state_dir at a directory (or move that file \
             away)",
            state_dir.display()
        );
    }
    if path.starts_with(state_dir) {
        return crate::fix::state_dir_fix(state_dir, super::again());
    }
    format!(
        "remove run.lock_file from the configuration: the lock then lives in state_dir \
         ({}), which the run's user writes anyway",
        state_dir.join(config::RUN_LOCK_NAME).display()
    )
}

/// A state directory (or a run lock) selfheal would refuse, said as `check` says it, with
/// its fix.
fn refused_finding(subject: &str, e: crate::fsafe::Error, action: &'static str) -> Finding {
    let e = Error::fsafe(e, action);
    let fix = crate::fix::for_error(&e, super::again()).unwrap_or_default();
    Finding::fail(
        subject,
        format!("{}: check refuses it (exit 3)", e.full_message()),
        fix,
    )
}

pub(super) fn state_dir_finding(dir: &Path) -> Finding {
    let subject = "state_dir";
    if dir.is_dir() {
        // Reached as check reaches it; not private to this user: check refuses it.
        if let Err(e) =
            crate::fsafe::Dir::open(dir).and_then(|d| d.check_private(crate::state::DIR_WHAT))
            && !e.is_not_found()
        {
            return refused_finding(subject, e, "using the state directory (run.state_dir)");
        }
        let journal = dir.join(crate::journal::JOURNAL_FILE);
        let ok =
            writable(dir) && (!journal.exists() || access(&journal, AccessFlags::W_OK).is_ok());
        return if ok {
            Finding::pass(
                subject,
                format!(
                    "{} is writable (journal.jsonl of every change, last-run.json)",
                    dir.display()
                ),
            )
        } else {
            Finding::fail(
                subject,
                format!(
                    "{} cannot write the journal in {}: every run would warn, and the first change would fail (exit 3)",
                    me(),
                    dir.display()
                ),
                crate::fix::state_dir_fix(dir, super::again()),
            )
        };
    }
    if dir.exists() {
        return Finding::fail(
            subject,
            format!("{} is not a directory", dir.display()),
            "set run.state_dir to a directory",
        );
    }
    match existing_ancestor(dir) {
        Some(a) if a.is_dir() && writable(a) => Finding::pass(
            subject,
            format!(
                "{} will be created by the next run (in {})",
                dir.display(),
                a.display()
            ),
        ),
        _ => Finding::fail(
            subject,
            format!(
                "{} does not exist and {} cannot create it",
                dir.display(),
                me()
            ),
            crate::fix::state_dir_fix(dir, super::again()),
        ),
    }
}

/// A `check --log` that could not reach its target, as the last real run that tried left
/// it in `state_dir/run-state.json` (a quiet cron run says it only once).
pub(super) fn log_finding(state_dir: &Path) -> Option<Finding> {
    let f = crate::check::streak::last_log_failure(state_dir)?;
    let since = chrono::DateTime::from_timestamp(f.since, 0)
        .map_or_else(|| f.since.to_string(), |t| t.to_rfc3339());
    Some(Finding::warn(
        "log",
        format!(
            "check --log {} has not reached its target since {since}: {}; nothing is logged \
             there",
            f.target, f.error
        ),
        match f.target.as_str() {
            "journald" => "start systemd-journald (its socket is /run/systemd/journal/socket), \
                           or drop --log journald from the cron line"
                .to_string(),
            _ => "start the syslog daemon (rsyslog or syslog-ng: /dev/log), or drop --log \
                  syslog from the cron line"
                .to_string(),
        },
    ))
}

pub(super) fn metrics_finding(file: &Path) -> Finding {
    let subject = "metrics_file";
    let dir = file.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Finding::fail(
            subject,
            format!("directory {} does not exist", dir.display()),
            "create it, or point metrics_file at node_exporter's textfile directory",
        );
    }
    if !writable(dir) {
        return Finding::fail(
            subject,
            format!(
                "{} cannot write in {} (the file is written to a temporary file there, \
                 then renamed)",
                me(),
                dir.display()
            ),
            format!("let the user selfheal runs as write in {}", dir.display()),
        );
    }
    let age = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    Finding::pass(
        subject,
        match age {
            Some(a) => format!(
                "{} was last written {} ago",
                file.display(),
                human(a.as_secs())
            ),
            None => format!("{} will be written by the next run", file.display()),
        },
    )
}
