//! `release_lock = "if_free"`: removing a legacy job's lock file after its row was marked —
//! the only place selfheal deletes anything.
//!
//! For jobs whose lock is the file's mere existence (`if (file_exists($lock)) exit;`), a
//! dead worker's file blocks every later run until someone removes it. The seed incident
//! is what happens when the wrong file goes: a job still running loses its lock and a
//! retry becomes a second writer. So the file is removed only when all of this holds:
//!
//! 1. it is the file the row was judged with. When the row is judged, the file is opened
//!    ([`observe`]) and held open until the release: identity is compared on that
//!    descriptor, never on a device and inode number noted earlier (ext4 gives a deleted
//!    file's inode number to the next file made in the same directory more often than
//!    not, so a file deleted and recreated in between would look the same), and while it
//!    is held its inode cannot be given to a new file. A file absent then is never removed,
//!    whatever appears at the name later (a new worker's lock).
//! 2. every directory on its path is reached through [`crate::fsafe`]: one component at a
//!    time, never through a symbolic link someone other than root or the running user
//!    could have planted (a `locks/` the PHP user swapped for a link to a root-only
//!    directory leads nowhere), and the file itself is a regular file, never a link;
//! 3. the row's change is committed, and no running row names the file any more, counted
//!    again after the write (by the caller: a new worker may have claimed a row since the
//!    rows were read);
//! 4. no process holds a kernel lock on it: `/proc/locks` by device and inode, then our
//!    own non-blocking `flock(LOCK_EX)` and POSIX read lock on the held descriptor, which
//!    we keep until the file is gone — so nobody can take a kernel lock on it between the
//!    check and the removal (a job that really uses kernel locks must not be configured
//!    with `if_free`); `/proc/locks` is read again while we hold them, and any lock not
//!    ours keeps the file;
//! 5. the pid written in it (its first line, `PID` or `HOST:PID`), if any, is dead, a
//!    zombie, or was recycled (the process started after the file was last written); a pid
//!    on another host keeps the file;
//! 6. the name still holds the held inode when it is removed ([`Dir::remove_if_same`]).
//!
//! **The window that remains.** `unlink(2)` takes a name, not a descriptor, so the name is
//! renamed aside to an unpredictable private name in the same directory (atomic: from then
//! on nobody reaches the file by its old name), the renamed entry is compared with the held
//! inode, and only a match is unlinked. Anything else — a file another process put at the
//! name in the microseconds between the last `fstatat` and the `rename` — is linked back
//! with `link(2)`, which never replaces a file, and kept: for those microseconds that file
//! is missing from its name (a job testing `file_exists()` just then sees no lock), and if
//! yet another file appeared there meanwhile, it stays under the private name, reported
//! for a person. Between the second check and the unlink, a user who can write the
//! directory could rename another entry of that same directory onto the private name: the
//! unlink then removes a name that user could remove anyway, never a file elsewhere. A run
//! that ends between the rename and the unlink leaves the checked file under the private
//! name `.NAME.selfheal-release.RANDOM`: the lock is released, as decided, and the leftover
//! is harmless.

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

use crate::decide::Owner;
use crate::fsafe::{self, Dir, FileId, Removal};
use crate::host::Host;
use crate::probe::LockTable;
use crate::probe::owner::{SAME_CLOCK_SLACK_S, judge_pid, parse_owner};

/// What became of a job's lock file: reported with its row ([`crate::report`]).
pub use crate::report::Release;

/// The lock file as it was when the row was judged.
#[derive(Debug)]
pub enum Seen {
    /// Nothing at the name: nothing is ever removed for this row.
    Absent,
    /// A regular file, opened when the row was judged and held open: this inode, and no
    /// other, may be removed.
    File(Held),
    /// Something else than a regular file (a link, a directory): never removed.
    NotAFile(&'static str),
    /// The walk to it was refused or failed (why).
    Unreachable(String),
}

/// Opens what is at `path` now, through [`crate::fsafe`] (no link followed that is not
/// trusted, none at the name; read-only, never creating it), and holds it: the file a
/// later release is held to.
pub fn observe(path: &Path) -> Seen {
    let opened = Dir::open_parent(path)
        .and_then(|(dir, name)| dir.open_read(&name).map(|file| Held { dir, name, file }));
    match opened {
        Ok(held) => Seen::File(held),
        Err(e) => match refused(&e) {
            Release::Absent => Seen::Absent,
            Release::Kept(_) => match e {
                fsafe::Error::NotRegular { kind, .. } => Seen::NotAFile(kind),
                _ => Seen::NotAFile("a symbolic link"),
            },
            other => Seen::Unreachable(other.detail().unwrap_or_default().to_string()),
        },
    }
}

/// The lock file opened when its row was judged, held open until the release.
#[derive(Debug)]
pub struct Held {
    dir: Dir,
    name: OsString,
    file: File,
}

/// The file held since the row was judged, if it is still the one at its name; otherwise
/// the outcome of the release already.
pub fn hold(seen: Seen) -> Result<Held, Release> {
    let held = match seen {
        Seen::Absent => return Err(Release::Absent),
        Seen::File(h) => h,
        Seen::NotAFile(kind) => {
            return Err(Release::Kept(format!("it is {kind}, not a regular file")));
        }
        Seen::Unreachable(why) => return Err(Release::Failed(why)),
    };
    let id = FileId::of(&held.file).map_err(|e| Release::Failed(e.to_string()))?;
    match held.dir.stat_at(&held.name) {
        Ok(Some(st)) if st.id == id => Ok(held),
        Ok(None) => Err(Release::Absent),
        Ok(Some(_)) => Err(Release::Kept(
            "it was replaced by another file since the row was judged".into(),
        )),
        Err(e) => Err(refused(&e)),
    }
}

/// What a refusal of the walk or the open means for the release.
fn refused(e: &fsafe::Error) -> Release {
    match e {
        _ if e.is_not_found() => Release::Absent,
        fsafe::Error::FinalSymlink { .. } => Release::Kept("it is a symbolic link".into()),
        fsafe::Error::NotRegular { kind, .. } => {
            Release::Kept(format!("it is {kind}, not a regular file"))
        }
        other => Release::Failed(other.to_string()),
    }
}

/// Any kernel lock on the inode that is not this process's own, as the reason to keep it.
fn foreign_lock(table: &LockTable, id: FileId, me: u32) -> Option<String> {
    table
        .holders(id.ino)
        .find(|pid| *pid != Some(me))
        .map(held_by)
}

fn held_by(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("a kernel lock on it is held by pid {p}"),
        None => "a kernel lock on it is held".into(),
    }
}

/// Removes the held lock file if, and only if, every condition in the module
/// documentation that is this module's holds (the caller has counted the running rows
/// after the write). Never creates or truncates anything.
pub fn release_held(held: Held, host: &Host) -> Release {
    let Held { dir, name, file } = held;
    let st = match rustix::fs::fstat(&file) {
        Ok(s) => fsafe::Stat::from(s),
        Err(e) => return Release::Failed(e.to_string()),
    };
    let checked = st.id;
    let me = std::process::id();

    // Kernel locks: look, then lock it ourselves until it is gone.
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

    // The pid written in it, if any.
    let mut head = Vec::with_capacity(64);
    if let Err(e) = (&file).take(4096).read_to_end(&mut head) {
        return Release::Failed(e.to_string());
    }
    let text = String::from_utf8_lossy(&head);
    let first = text.lines().next().unwrap_or("").trim();
    let written = st
        .modified
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let pid_note = match parse_owner(first) {
        None => "no pid in it".to_string(),
        Some((Some(h), pid)) if !host.is_me(h) => {
            return Release::Kept(format!(
                "it names pid {pid} on host {h}, which cannot be checked from here"
            ));
        }
        Some((_, pid)) => match judge_pid(host, pid, written, SAME_CLOCK_SLACK_S) {
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

    // The very inode held, renamed aside and unlinked.
    match dir.remove_if_same(&name, &file) {
        Ok(Removal::Removed) => {
            Release::Removed(format!("no kernel lock on it, {pid_note}, inode unchanged"))
        }
        Ok(Removal::Absent) => Release::Absent,
        Ok(Removal::Replaced) => {
            Release::Kept("it was replaced by another file since the row was judged".into())
        }
        Ok(Removal::PutBack) => Release::Kept(
            "it was replaced by another file during the release; that file was put back".into(),
        ),
        Err(e) => Release::Failed(e.to_string()),
    }
    // `file` closes here, releasing our locks on an inode nobody can reach any more.
}

#[cfg(test)]
mod tests;
