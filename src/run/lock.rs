//! The job's lock for `selfheal run --lock FILE`: an exclusive `flock` on FILE, with a
//! bounded wait measured on the monotonic clock.
//!
//! I/O: the file is reached through [`crate::fsafe`] (no symbolic link a less trusted user
//! could have planted, on the way or at the name) and must be a regular file. What is done
//! with it depends on what it holds (docs/design.md#run-wrapper: `--lock` locks any file but writes only
//! into one that is its own):
//! - missing: created with mode 0644 (less the umask) and opened read-write;
//! - empty, or holding a holder line already ([`crate::holder_line::takes_a_line`]):
//!   opened read-write, and must then be a regular file of the running user's with no
//!   other name; a group or other write bit on it is cleared (0644: only its owner writes
//!   the holder line; anyone who can read it can still lock it, and read who holds it);
//! - anything else — the script of the `flock FILE cmd` idiom (`--lock job.sh --
//!   ./job.sh`), a database, another program's lock with its own content: opened
//!   read-only, whoever owns it, and locked as it is: its bytes and its mode are left
//!   alone, and no holder line is written (a read-only descriptor also lets the script be
//!   executed: a file open for writing cannot be, ETXTBSY).
//!
//! It is never truncated when opened, never deleted and never replaced: two holders of two
//! inodes would not exclude each other.
//!
//! Waiting: one non-blocking try, then tries spaced 10 ms growing to 100 ms until
//! `--wait` has passed on the monotonic clock (`Instant`: a clock step cannot stretch or
//! cut the wait); `--wait 0` is exactly one try. Between tries the wrapper waits on its
//! signals, so SIGTERM, SIGINT or SIGHUP end the wait at once (nothing is started).
//!
//! Once held, the content is judged again on the locked descriptor ([`clear_for_line`]):
//! only a file that still takes a line is emptied, and [`write_holder`] then puts
//! `HOST:PID START` into it in place, if it is still empty (see [`super::holder`]).

use std::fs::{File, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::signals::{FORWARDED, Signals};
use crate::fsafe::{self, Dir, FileId};
use crate::holder_line::{read_content, takes_a_line};

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
    /// Opened read-write: the file was missing, empty or held a holder line. A file
    /// opened read-only is locked and never written.
    pub writable: bool,
}

/// How often the file may change between being judged and being opened for writing
/// before the wrapper gives up (someone keeps replacing it).
const MAX_TRIES: usize = 5;

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

/// Opens (creating if missing) the lock file by the safe walk: read-write when it takes a
/// holder line, read-only otherwise (see the module documentation).
pub fn open(path: &Path) -> fsafe::Result<LockFile> {
    let (dir, name) = Dir::open_parent(path)?;
    let io = |action, e: std::io::Error| fsafe::Error::Io {
        path: path.to_path_buf(),
        component: None,
        action,
        source: e,
    };
    for _ in 0..MAX_TRIES {
        // Judged on a read-only descriptor first, so that a file that is not to be written
        // is never opened for writing (nor checked as one: any owner, any number of names).
        let judged = match dir.stat_at(&name)? {
            None => None,
            Some(_) => {
                let ro = dir.open_read(&name)?;
                if !takes_line(&ro).map_err(|e| io("reading", e))? {
                    return finish(path, ro, false);
                }
                Some(FileId::of(&ro).map_err(|e| io("reading the status of", e))?)
            }
        };
        // Missing (created now), or taking a line: read-write, with the checks of a file
        // the wrapper writes.
        let rw = dir.open_rw(&name, LOCK_MODE)?;
        let id = FileId::of(&rw).map_err(|e| io("reading the status of", e))?;
        if judged.is_none_or(|j| j == id) {
            return finish(path, rw, true);
        }
        // Replaced between the two opens: judge the new file from the start.
    }
    Err(io(
        "opening",
        std::io::Error::other("the file kept being replaced while it was opened"),
    ))
}

fn finish(path: &Path, file: File, writable: bool) -> fsafe::Result<LockFile> {
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
        writable,
    })
}

/// Whether the open file takes a holder line now (empty, or holding one).
fn takes_line(file: &File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    Ok(takes_a_line(&read_content(file), len))
}

/// Takes the exclusive lock, waiting at most `wait`.
pub fn acquire(lock: &LockFile, wait: Duration, signals: &Signals) -> std::io::Result<Acquired> {
    let start = Instant::now();
    let deadline = super::later(start, wait);
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

/// Once the lock is held: when the file was opened for writing and still takes a holder
/// line, empties it (the previous holder's line goes at once: until the command's is
/// written, the file names nobody rather than someone who no longer holds it) and returns
/// true; otherwise changes nothing and returns false.
pub fn clear_for_line(lock: &LockFile) -> std::io::Result<bool> {
    if !lock.writable || !takes_line(&lock.file)? {
        return Ok(false);
    }
    lock.file.set_len(0)?;
    Ok(true)
}

/// Writes `line` into the held lock file that [`clear_for_line`] emptied, in place: at
/// offset 0, then the file cut to the line's length. A file that is no longer empty (a
/// program that does not take the lock wrote into it meanwhile) is left alone: returns
/// false.
pub fn write_holder(lock: &LockFile, line: &str) -> std::io::Result<bool> {
    if lock.file.metadata()?.len() != 0 {
        return Ok(false);
    }
    lock.file.write_all_at(line.as_bytes(), 0)?;
    lock.file.set_len(line.len() as u64)?;
    Ok(true)
}
