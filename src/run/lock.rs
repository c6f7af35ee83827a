//! The job's lock for `selfheal run --lock FILE`: an exclusive `flock` on FILE, with a
//! bounded wait measured on the monotonic clock.
//!
//! I/O: the file is reached through [`crate::fsafe`] (no symbolic link a less trusted user
//! could have planted, on the way or at the name) and opened read-write, created with mode
//! 0644 (less the umask) if missing; an existing file must be a regular file of the running
//! user's with no other name, and a group or other write bit on it is cleared (0644: only
//! its owner writes the holder line; anyone who can read it can still lock it, and read
//! who holds it). It is never truncated when opened, never deleted and never replaced: two
//! holders of two inodes would not exclude each other.
//!
//! Waiting: one non-blocking try, then tries spaced 10 ms growing to 100 ms until
//! `--wait` has passed on the monotonic clock (`Instant`: a clock step cannot stretch or
//! cut the wait); `--wait 0` is exactly one try. Between tries the wrapper waits on its
//! signals, so SIGTERM, SIGINT or SIGHUP end the wait at once (nothing is started).
//!
//! Once held, [`write_holder`] puts `HOST:PID START` into the file in place
//! (see [`super::holder`]).

use std::fs::{File, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::signals::{FORWARDED, Signals};
use crate::fsafe::{self, Dir, FileId};

/// The mode a new lock file is created with (less the umask), and the most an existing
/// one keeps.
pub const LOCK_MODE: u32 = 0o644;

/// The first pause between two tries, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// The lock file, open and not yet locked.
#[derive(Debug)]
pub struct LockFile {
    pub path: PathBuf,
    pub file: File,
    pub id: FileId,
}

/// How waiting for the lock ended.
#[derive(Debug)]
pub enum Acquired {
    /// Held after this long.
    Held(Duration),
    /// Not obtained within the wait.
    Busy(Duration),
    /// A signal ended the wait.
    Interrupted(Signal, Duration),
}

/// Opens (creating if missing) the lock file by the safe walk.
pub fn open(path: &Path) -> fsafe::Result<LockFile> {
    let (dir, name) = Dir::open_parent(path)?;
    let file = dir.open_rw(&name, LOCK_MODE)?;
    let id = FileId::of(&file).map_err(|e| fsafe::Error::Io {
        path: path.to_path_buf(),
        component: None,
        action: "reading the status of",
        source: e,
    })?;
    Ok(LockFile {
        path: path.to_path_buf(),
        file,
        id,
    })
}

/// Takes the exclusive lock, waiting at most `wait`.
pub fn acquire(lock: &LockFile, wait: Duration, signals: &Signals) -> std::io::Result<Acquired> {
    let start = Instant::now();
    let deadline = start + wait;
    let mut pause = FIRST_PAUSE;
    loop {
        match lock.file.try_lock() {
            Ok(()) => return Ok(Acquired::Held(start.elapsed())),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Acquired::Busy(now - start));
        }
        let nap = pause.min(deadline - now);
        pause = (pause * 2).min(LONGEST_PAUSE);
        let arrived = signals.wait(Some(nap)).map_err(std::io::Error::from)?;
        if let Some(a) = arrived.iter().find(|a| FORWARDED.contains(&a.signal)) {
            return Ok(Acquired::Interrupted(a.signal, start.elapsed()));
        }
    }
}

/// Writes `line` into the held lock file in place: at offset 0, then the file cut to the
/// line's length (a reader taking the first line sees the old line or the new one).
pub fn write_holder(lock: &LockFile, line: &str) -> std::io::Result<()> {
    lock.file.write_all_at(line.as_bytes(), 0)?;
    lock.file.set_len(line.len() as u64)
}
