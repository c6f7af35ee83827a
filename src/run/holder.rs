//! Who holds a lock, from its holder line ([`crate::holder_line`]: `HOST:PID START`, whose
//! format lives apart from this writer and its readers).
//!
//! The line is written in place on the locked descriptor: `pwrite` at offset 0, then the
//! file cut to the line's length, so a reader that takes the first line sees the previous
//! holder's line or the new one (never a mix: the new line ends at its own newline). The
//! file is never replaced, which would give it a new inode and break the lock.
//!
//! Judging a holder (I/O: `kill(pid, 0)` and `/proc/PID/stat` through
//! [`crate::probe::owner`], `/proc/locks`, and — only when the named process is gone — a
//! scan of `/proc/*/fd` for processes that still have the file open): the line is only as
//! good as the process it names. A pid that is gone, or was reused by a process started
//! after the line, means someone else keeps the lock: typically a background process the
//! job left behind, which inherited the locked descriptor. That process is named when this
//! user can see it.
//!
//! A shared lock (`flock -s`, a read lock) is never a run of the job's: `selfheal run` and
//! the PHP helper lock exclusively. When every lock `/proc/locks` lists on the file is
//! shared, the holder is named as such — the process and the user it runs as — whatever
//! the file's line says (the line then names an earlier holder, who is not to blame).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

use serde::Serialize;

use crate::clock::human;
use crate::decide::Owner;
use crate::escape::printable_cut;
use crate::fsafe::FileId;
pub use crate::holder_line::{
    HolderLine, format_line, parse_line, read_content, rfc3339, unix_secs,
};
use crate::host::Host;
use crate::probe::{LockTable, owner};

/// What became of the process a holder line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HolderState {
    /// It runs on this host (and started no later than the line says).
    Running,
    /// It is gone (or its pid now belongs to a newer process).
    Gone,
    /// It runs on another host: not judged here.
    OtherHost,
    /// No holder line, or its process cannot be judged.
    Unknown,
}

/// A process with the lock file open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenBy {
    pub pid: u32,
    pub name: String,
}

/// A process holding a shared lock on the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SharedBy {
    /// `None` when the kernel gives no pid (an open file description lock).
    pub pid: Option<u32>,
    /// Its command name (`/proc/PID/comm`), `?` when unknown.
    pub name: String,
    /// The user it runs as (`www-data (uid 33)`), when visible.
    pub user: Option<String>,
}

impl SharedBy {
    fn of(pid: Option<u32>) -> SharedBy {
        let user = pid.and_then(|p| {
            std::fs::metadata(format!("/proc/{p}"))
                .ok()
                .map(|m| crate::fsafe::Who::of(m.uid()).to_string())
        });
        SharedBy {
            pid,
            name: pid.map_or_else(|| "?".into(), comm),
            user,
        }
    }

    fn describe(&self) -> String {
        match (self.pid, &self.user) {
            (Some(p), Some(u)) => format!("pid {p} ({}) of user {u}", self.name),
            (Some(p), None) => format!("pid {p} ({})", self.name),
            (None, _) => "a process this user cannot see".into(),
        }
    }
}

/// Who holds a lock, as far as this host can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// The file's first line, as found (`null` when empty).
    pub line: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// `START` of the line.
    pub since: Option<String>,
    pub state: HolderState,
    /// The pid `/proc/locks` gives for the lock (the process that took it, which for
    /// `selfheal run` is the wrapper).
    pub lock_pid: Option<u32>,
    /// Other processes that have the file open, looked for when the named process is gone
    /// or there is no line (a background process the job left behind, or a waiter).
    pub open_by: Vec<OpenBy>,
    /// The processes holding the lock when every lock on the file is shared (empty
    /// otherwise): not a run of the job's, whatever the line says.
    pub shared_by: Vec<SharedBy>,
    #[serde(skip)]
    parsed: Option<HolderLine>,
}

impl Holder {
    /// Judges the holder of the lock on `file` (open on the lock file) from its content,
    /// the process table and `/proc/locks`.
    pub fn judge(file: &File, host: &Host) -> Holder {
        let content = read_content(file);
        let first = content
            .lines()
            .next()
            .map(str::trim)
            .filter(|l| !l.is_empty());
        let parsed = parse_line(&content);
        let id = FileId::of(file).ok();
        let state = match &parsed {
            None => HolderState::Unknown,
            Some(h) => {
                match owner::probe_owner(host, Some(&h.owner()), h.since, owner::SAME_CLOCK_SLACK_S)
                {
                    Owner::Alive { .. } => HolderState::Running,
                    Owner::Dead { .. } | Owner::Reused { .. } => HolderState::Gone,
                    Owner::NotLocal { .. } => HolderState::OtherHost,
                    _ => HolderState::Unknown,
                }
            }
        };
        let table = id.and_then(|_| LockTable::read());
        let ino = id.map(|id| id.ino);
        let lock_pid = table
            .as_ref()
            .zip(ino)
            .and_then(|(t, ino)| t.holders(ino).flatten().next());
        let shared_by: Vec<SharedBy> = table
            .as_ref()
            .zip(ino)
            .and_then(|(t, ino)| t.shared_holders(ino))
            .unwrap_or_default()
            .into_iter()
            .map(SharedBy::of)
            .collect();
        let open_by = match (state, id) {
            (HolderState::Gone | HolderState::Unknown, Some(id)) if shared_by.is_empty() => {
                open_by(id)
            }
            _ => Vec::new(),
        };
        Holder {
            line: first.map(|l| printable_cut(l, 200)),
            host: parsed.as_ref().map(|h| h.host.clone()),
            pid: parsed.as_ref().map(|h| h.pid),
            since: parsed.as_ref().map(HolderLine::since_text),
            state,
            lock_pid,
            open_by,
            shared_by,
            parsed,
        }
    }

    /// Who holds it, in words, e.g. `web1:4242 since 2026-03-14T15:09:26Z (3m ago)`;
    /// `now` for the age.
    pub fn describe(&self, now: SystemTime) -> String {
        if !self.shared_by.is_empty() {
            let who = self
                .shared_by
                .iter()
                .map(SharedBy::describe)
                .collect::<Vec<_>>()
                .join(", ");
            return format!(
                "{who}, with a shared lock (not a run of this job, which locks exclusively)"
            );
        }
        let others = || {
            self.open_by
                .iter()
                .map(|p| format!("pid {} ({})", p.pid, p.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(h) = &self.parsed else {
            let named = match self.lock_pid {
                Some(p) if pid_exists(p) => format!("pid {p} ({})", comm(p)),
                _ if !self.open_by.is_empty() => format!("{}, which has it open,", others()),
                _ => {
                    return "an unknown process: the file names no holder (HOST:PID START), \
                             and none is visible to this user"
                        .into();
                }
            };
            return format!("{named} (the file names no holder)");
        };
        let age = unix_secs(now).saturating_sub(h.since);
        let when = if age >= 0 {
            format!(
                "since {} ({} ago)",
                h.since_text(),
                human(age.unsigned_abs())
            )
        } else {
            format!("since {}", h.since_text())
        };
        let who = format!("{} {when}", h.named());
        match self.state {
            HolderState::Running => who,
            HolderState::OtherHost => format!("{who}, on another host"),
            HolderState::Unknown => format!("{who} (whether it still runs cannot be told)"),
            HolderState::Gone if !self.open_by.is_empty() => format!(
                "{who}, which is gone: the lock is kept by what it left behind: {} still \
                 has the file open",
                others()
            ),
            HolderState::Gone => format!(
                "{who}, which is gone: a process it left behind keeps the lock (not visible \
                 to this user)"
            ),
        }
    }
}

fn pid_exists(pid: u32) -> bool {
    use nix::errno::Errno;
    crate::host::pid_t(pid)
        .is_some_and(|p| matches!(nix::sys::signal::kill(p, None), Ok(()) | Err(Errno::EPERM)))
}

/// The command name of a process (`/proc/PID/comm`), or `?`.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".into(), |s| printable_cut(s.trim_end(), 32))
}

/// Processes (other than this one) with an open descriptor on the file `id`, from
/// `/proc/*/fd` — as many as this user can see (all of them as root).
pub fn open_by(id: FileId) -> Vec<OpenBy> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let has = fds.filter_map(Result::ok).any(|fd| {
            std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == id.dev && m.ino() == id.ino)
        });
        if has {
            out.push(OpenBy {
                pid,
                name: comm(pid),
            });
        }
    }
    out.sort_by_key(|o| o.pid);
    out
}
