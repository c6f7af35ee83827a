//! selfheal's own guard against overlapping runs: a non-blocking `flock` on a file that is
//! created if missing and never deleted (deleting a lock file is how two holders end up
//! locking two different inodes). The lock dies with the process, however it ends.
//!
//! The file is reached through [`crate::fsafe`]: no symbolic link a less trusted user could
//! have planted is followed, on the way or at its name (a link planted at
//! `/run/lock/selfheal.lock` would have made root create a file wherever it pointed). It is
//! opened read-write, created mode 0600, and must be a regular file of the running user's
//! with no other name: a lock another user owns is refused ([`Error::Refused`], exit 3),
//! never locked through a read-only descriptor, because anyone who can open the file can
//! `flock` it and so make every run exit 75. By default it lives in `state_dir`, which
//! only the running user can write.

use std::fs::{File, TryLockError};
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsafe::Dir;

/// The run lock's name in the state directory, where it lives unless `run.lock_file` says
/// otherwise: one per state directory, so separate configurations never wait on each other.
pub const RUN_LOCK_NAME: &str = "run.lock";

/// The mode the run lock is created with; an existing one is narrowed to it.
pub const MODE: u32 = 0o600;

/// What the run lock is called in messages.
const OPENING: &str = "opening the run lock (run.lock_file)";

/// Held for as long as the value lives.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

/// Takes the run lock without waiting; `Error::Busy` (exit 75) when another run holds it.
pub fn acquire(path: &Path) -> Result<RunLock> {
    let file = Dir::open_parent(path)
        .and_then(|(dir, name)| dir.open_rw(&name, MODE))
        .map_err(|e| Error::fsafe(e, OPENING))?;
    match file.try_lock() {
        Ok(()) => Ok(RunLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(Error::Busy {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(Error::io(path, "locking the run lock", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_lock_is_created_private_and_excludes_a_second_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("run.lock");
        let held = acquire(&p).expect("first");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(acquire(&p), Err(Error::Busy { .. })));
        drop(held);
        acquire(&p).expect("free again");
    }

    #[test]
    fn a_link_at_the_name_is_refused_and_its_target_not_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("run.lock");
        let target = dir.path().join("created-through-the-link");
        std::os::unix::fs::symlink(&target, &p).expect("symlink");
        let e = acquire(&p).expect_err("a link");
        assert!(matches!(e, Error::Refused { .. }), "{e:?}");
        assert_eq!(e.exit_code(), crate::error::exit::FAILURE);
        assert!(!target.exists());
    }
}
