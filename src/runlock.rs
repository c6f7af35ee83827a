//! selfheal's own guard against overlapping runs: a non-blocking `flock` on a file that is
//! created if missing and never deleted (deleting a lock file is how two holders end up
//! locking two different inodes). The lock dies with the process, however it ends.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Held for as long as the value lives.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

/// Takes the run lock without waiting; `Error::Busy` (exit 75) when another run holds it.
pub fn acquire(path: &Path) -> Result<RunLock> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
    {
        Ok(f) => f,
        // Created by another user in a sticky directory: a read-only descriptor locks too.
        // When there is no such file, the cause is the directory refusing to create it.
        Err(denied) if denied.kind() == ErrorKind::PermissionDenied => {
            File::open(path).map_err(|e| {
                let cause = if e.kind() == ErrorKind::NotFound {
                    denied
                } else {
                    e
                };
                Error::io(path, "opening the run lock (run.lock_file)", cause)
            })?
        }
        Err(e) => return Err(Error::io(path, "opening the run lock (run.lock_file)", e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(RunLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(Error::Busy {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(Error::io(path, "locking the run lock", e)),
    }
}
