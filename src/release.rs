//! `release_lock = "if_free"`: removing a legacy job's lock file after its row was marked —
//! the only place selfheal deletes anything.
//!
//! For jobs whose lock is the file's mere existence (`if (file_exists($lock)) exit;`), a
//! dead worker's file blocks every later run until someone removes it. The seed incident
//! is what happens when the wrong file goes: a job still running loses its lock and a
//! retry becomes a second writer. So the file is removed only when all of this holds,
//! checked on one open descriptor of the very inode that is removed:
//!
//! 1. it is a regular file (never a symbolic link: opened with `O_NOFOLLOW`, never created);
//! 2. no process holds a kernel lock on it: `/proc/locks` by device and inode, then our
//!    own non-blocking `flock(LOCK_EX)` and POSIX read lock, which we keep until the file
//!    is gone — so nobody can take a kernel lock on it between the check and the removal
//!    (a job that really uses kernel locks must not be configured with `if_free`);
//!    `/proc/locks` is read again while we hold them, and any lock not ours keeps the file;
//! 3. the pid written in it (its first line, `PID` or `HOST:PID`), if any, is dead, a
//!    zombie, or was recycled (the process started after the file was last written); a pid
//!    on another host keeps the file;
//! 4. its device and inode are unchanged between the check and the removal. `unlink(2)`
//!    takes a path, not an inode, so the path is first renamed to a private name beside it
//!    (atomic; afterwards no process can find it by the old path) and the renamed file is
//!    compared with the checked inode. Only a match is unlinked. Anything else — a file
//!    another process put at the path in the microseconds between the last `lstat` and
//!    the `rename` — is linked back to the path with `link(2)`, which never replaces an
//!    existing file, and the lock is kept. What remains: that replacement file is missing
//!    from its path for those microseconds; if yet another file appeared there meanwhile,
//!    the replacement is left under the private name and reported for a person.
//!
//! A run that ends between the rename and the unlink leaves the checked file under the
//! private name `.NAME.selfheal-release.PID`: the lock is released, as decided, and the
//! leftover is harmless.

use std::fs::{File, TryLockError};
use std::io::{ErrorKind, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

use crate::decide::Owner;
use crate::host::Host;
use crate::probe::LockTable;
use crate::probe::owner::{judge_pid, parse_owner};

/// What became of a job's lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Removed: the inode that was checked, and no other. The text says what was checked.
    Removed(String),
    /// There was no file to remove.
    Absent,
    /// Left in place on purpose, and why (a held lock, a live pid, a replaced file).
    Kept(String),
    /// Could not be checked or removed (permission denied, I/O error), and why.
    Failed(String),
}

impl Release {
    pub fn as_str(&self) -> &'static str {
        match self {
            Release::Removed(_) => "removed",
            Release::Absent => "absent",
            Release::Kept(_) => "kept",
            Release::Failed(_) => "failed",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            Release::Removed(d) | Release::Kept(d) | Release::Failed(d) => Some(d),
            Release::Absent => None,
        }
    }

    /// A file left behind blocks every later run of a legacy job: a person must look.
    pub fn needs_a_person(&self) -> bool {
        matches!(self, Release::Kept(_) | Release::Failed(_))
    }
}

type Ident = (u64, u64);

fn ident(m: &std::fs::Metadata) -> Ident {
    (m.dev(), m.ino())
}

/// The private name the file is renamed to before it is unlinked.
fn aside_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy();
    Some(path.with_file_name(format!(".{name}.selfheal-release.{}", std::process::id())))
}

/// Any kernel lock on the inode that is not this process's own, as the reason to keep it.
fn foreign_lock(table: &LockTable, id: Ident, me: u32) -> Option<String> {
    table
        .holders(id.1)
        .find(|pid| *pid != Some(me))
        .map(held_by)
}

fn held_by(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("a kernel lock on it is held by pid {p}"),
        None => "a kernel lock on it is held".into(),
    }
}

/// Removes the legacy lock file at `path` if, and only if, every condition in the module
/// documentation holds. Never creates or truncates anything.
pub fn release_if_free(path: &Path, host: &Host) -> Release {
    let file = match File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Release::Absent,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Release::Kept("it is a symbolic link".into());
        }
        Err(e) => return Release::Failed(e.to_string()),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Release::Failed(e.to_string()),
    };
    if !meta.is_file() {
        return Release::Kept("it is not a regular file".into());
    }
    let checked = ident(&meta);
    let me = std::process::id();

    // 2. Kernel locks: look, then lock it ourselves until it is gone.
    if let Some(t) = LockTable::read()
        && let Some(why) = foreign_lock(&t, checked, me)
    {
        return Release::Kept(why);
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Release::Kept(held_by(None)),
        Err(TryLockError::Error(e)) => return Release::Failed(format!("flock: {e}")),
    }
    #[allow(clippy::cast_possible_truncation)] // F_RDLCK and SEEK_SET are 0 and 0
    let whole_file = libc::flock {
        l_type: libc::F_RDLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    match fcntl(file.as_fd(), FcntlArg::F_SETLK(&whole_file)) {
        Ok(_) => {}
        Err(Errno::EAGAIN | Errno::EACCES) => {
            return Release::Kept("a POSIX lock on it is held".into());
        }
        Err(e) => return Release::Failed(format!("fcntl(F_SETLK): {e}")),
    }
    if let Some(t) = LockTable::read()
        && let Some(why) = foreign_lock(&t, checked, me)
    {
        return Release::Kept(why);
    }

    // 3. The pid written in it, if any.
    let mut head = Vec::with_capacity(64);
    if let Err(e) = (&file).take(4096).read_to_end(&mut head) {
        return Release::Failed(e.to_string());
    }
    let text = String::from_utf8_lossy(&head);
    let first = text.lines().next().unwrap_or("").trim();
    let written = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let pid_note = match parse_owner(first) {
        None => "no pid in it".to_string(),
        Some((Some(h), pid)) if !host.is_me(h) => {
            return Release::Kept(format!(
                "it names pid {pid} on host {h}, which cannot be checked from here"
            ));
        }
        Some((_, pid)) => match judge_pid(host, pid, written) {
            Owner::Dead { .. } => format!("pid {pid} in it is gone"),
            Owner::Reused { .. } => {
                format!("pid {pid} in it now belongs to a process started after it was written")
            }
            Owner::Alive { .. } => {
                return Release::Kept(format!("pid {pid} written in it is alive"));
            }
            Owner::NotVisible { .. } => {
                return Release::Kept(format!(
                    "pid {pid} written in it cannot be checked from this pid namespace"
                ));
            }
            Owner::Unreadable(why) => return Release::Failed(why),
            other => return Release::Failed(format!("pid {pid} written in it: {other:?}")),
        },
    };

    // 4. Same inode between the check and the unlink.
    remove_checked(path, checked, &format!("no kernel lock on it, {pid_note}"))
    // `file` closes here, releasing our locks on an inode nobody can reach any more.
}

/// Removes the file at `path` if it is still the inode `checked`: a last `lstat`, then
/// [`rename_aside_and_unlink`].
fn remove_checked(path: &Path, checked: Ident, checks: &str) -> Release {
    match std::fs::symlink_metadata(path) {
        Ok(m) if ident(&m) == checked => {}
        Ok(_) => {
            return Release::Kept("it was replaced by another file since the check".into());
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Release::Absent,
        Err(e) => return Release::Failed(e.to_string()),
    }
    let Some(aside) = aside_path(path) else {
        return Release::Failed("the path has no file name".into());
    };
    rename_aside_and_unlink(path, &aside, checked, checks)
}

/// Renames `path` to `aside` (atomic: from now on nobody finds it by its path), then
/// unlinks it only if it is the inode `checked`; anything else is linked back to `path`
/// without replacing whatever may be there by then.
fn rename_aside_and_unlink(path: &Path, aside: &Path, checked: Ident, checks: &str) -> Release {
    if let Err(e) = std::fs::rename(path, aside) {
        return match e.kind() {
            ErrorKind::NotFound => Release::Absent,
            _ => Release::Failed(format!("renaming it aside: {e}")),
        };
    }
    match std::fs::symlink_metadata(aside) {
        Ok(m) if ident(&m) == checked => match std::fs::remove_file(aside) {
            Ok(()) => Release::Removed(format!("{checks}, inode unchanged")),
            Err(e) => Release::Failed(format!(
                "it was renamed to {} but could not be removed: {e}",
                aside.display()
            )),
        },
        Ok(_) => match std::fs::hard_link(aside, path) {
            Ok(()) => match std::fs::remove_file(aside) {
                Ok(()) => Release::Kept(
                    "it was replaced by another file during the release; that file was put back"
                        .into(),
                ),
                Err(e) => Release::Failed(format!(
                    "it was replaced by another file during the release; that file was put \
                     back, but its second name {} could not be removed: {e}",
                    aside.display()
                )),
            },
            Err(e) => Release::Failed(format!(
                "it was replaced by another file during the release, and that file could \
                 not be put back ({e}); it is now at {}",
                aside.display()
            )),
        },
        Err(e) => Release::Failed(format!("renamed to {}, then: {e}", aside.display())),
    }
}

#[cfg(test)]
mod tests;
