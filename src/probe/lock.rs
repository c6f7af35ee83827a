//! The job's own lock: does any process hold a kernel lock on the lock file's inode? As a
//! source of evidence ([`LockSource`]): held, free, or neither proven, whose it is, and
//! who its file names.
//!
//! Primary method, non-intrusive: read `/proc/locks` once and match the file's device and
//! inode (flock, POSIX and OFD locks; the holder's pid when the kernel gives one). The
//! probe takes no lock at all then, so a job starting at that instant never fails its own
//! `flock -n` because of selfheal. A lock found there is held; one not found is only
//! [`Lock::Unconfirmed`]: `/proc/locks` lists the holders of the reader's pid namespace
//! only (selfheal in a container or under `unshare --pid` sees none of the host's), and no
//! lock held over NFS from another machine. Before a row is written on the strength of a
//! free lock, [`try_lock`] confirms it: a non-blocking `flock` on a read-only descriptor
//! and a test for POSIX locks (`F_GETLK`, which takes nothing), released at once — both
//! answer for every holder, whatever its namespace, and NFS passes them to the server.
//! When `/proc/locks` cannot be read at all, [`try_lock`] is the probe.
//!
//! The file is never created, truncated or deleted here. Where the device number in
//! `/proc/locks` differs from `stat`'s (overlay file systems), a lock on the same inode
//! number still counts as held: the error is on the side of "alive".
//!
//! `/proc/locks` is a seq_file: each `read(2)` returns at most a page, and the next one
//! resumes by position, so a lock released between two reads shifts the list and can make
//! a record vanish from the text. A vanished record would read as "free" — conclusive death
//! for a job that holds its lock. So the table is read in several full passes whose read
//! boundaries alternate, until two consecutive passes agree, and every lock seen in any
//! pass counts (see [`LockTable::read`]).

use std::fs::{File, TryLockError};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::config::{ReleaseLock, Watch};
use crate::decide::{
    Basis, Decision, Evidence, Lock, Owner, Signal, Thresholds, Verdict, WorkerProof,
};
use crate::fsafe::{Kind, Opened, Reached};
use crate::holder_line::{self, HolderLine};
use crate::host::Host;
use crate::store::RunningRow;

use super::{Human, Item, LockHolder, Reading, Rendered, Source, Value, WIDEST_PID};

/// The job's own lock ([`Evidence::lock`], whose it is, and who its file names).
pub struct LockSource;

impl Source for LockSource {
    /// `/proc/locks` as the scene's snapshot has it (a lock not found there is only
    /// [`Lock::Unconfirmed`]), else a try-lock; then whether it can be trusted as free,
    /// who its file names when held, and whether it is the row's own (its holder the
    /// owner the sources before read). The row's own lock held by a descendant of an owner
    /// pid that started after the row, or held while that pid has its file open, proves
    /// that pid the worker, before its heartbeat file does.
    fn read_now(&self, at: &Reading<'_>, e: &mut Evidence) {
        let Some(t) = &at.w.lock_file else {
            (e.lock, e.lock_holder, e.lock_own) = (Lock::NotConfigured, None, false);
            return;
        };
        (e.lock, e.lock_holder, e.lock_own) = match t.render(at.id()) {
            Ok(p) => {
                let seen = probe_lock(&p, at.scene.snapshot.locks.as_ref());
                let weighed = weighed(at.w, t.has_id(), &p, seen, &e.owner, at.scene.host);
                if let Owner::Reused { pid, proof, .. } = &mut e.owner
                    && proves_worker(&weighed.0, weighed.2, *pid, &p, at.scene.host)
                {
                    *proof = Some(WorkerProof::OwnLock);
                }
                weighed
            }
            Err(why) => (Lock::Unreadable(format!("lock_file: {why}")), None, false),
        };
    }

    fn render(&self, e: &Evidence, out: &mut Rendered) {
        let (state, pid) = match &e.lock {
            Lock::NotConfigured => ("none", None),
            Lock::Held { pid } => ("held", *pid),
            Lock::Unconfirmed => ("free_unconfirmed", None),
            Lock::Free => ("free", None),
            Lock::Present => ("present", None),
            Lock::Untrusted(_) => ("free_untrusted", None),
            Lock::Absent => ("absent", None),
            Lock::Unreadable(_) => ("unreadable", None),
        };
        (out.record.lock, out.record.lock_pid) = (state.into(), pid);
        // Who the file names, beside what /proc/locks says: for `selfheal run` the wrapper
        // took the lock and the line names its command.
        let holder = match (&e.lock, &e.lock_holder) {
            (Lock::Held { .. }, Some(h)) => Some(h),
            _ => None,
        };
        out.lock_holder = holder.map(|h| LockHolder {
            host: h.host.clone(),
            pid: h.pid,
            since: h.since_text(),
        });
        out.items.push(Item {
            key: "lock",
            value: pid.map_or(Value::Word(state), |p| Value::Pid(state, p)),
            word: "lock",
            human: match (&e.lock, holder) {
                (Lock::Unconfirmed, _) => {
                    Human::Words("free as far as /proc/locks shows (not confirmed)")
                }
                (Lock::Free, _) => Human::Words("free (a try-lock got it)"),
                (Lock::Untrusted(_), _) => Human::Words(
                    "nobody seen holding it, but its directory others can write: not trusted as free",
                ),
                (Lock::Held { pid: None }, None) => {
                    Human::Words("held (a try-lock failed; holder not visible)")
                }
                _ => Human::Same,
            },
            aside: holder.map(|h| match pid {
                Some(p) if p == h.pid => format!("{} since {}", h.named(), h.since_text()),
                Some(_) => format!("the file names {} since {}", h.named(), h.since_text()),
                None => format!(
                    "a try-lock failed; the file names {} since {}",
                    h.named(),
                    h.since_text()
                ),
            }),
        });
    }

    /// The lock where the decision's words do not name it already, then who a held lock's
    /// file names: a figure, so a column too short for it loses it before the words.
    fn words(&self, e: &Evidence, d: &Decision, out: &mut Vec<String>) {
        let named = matches!(
            d.basis,
            Basis::LockFree
                | Basis::StaleButLockHeld
                | Basis::Contradicted(Signal::LockFree)
                | Basis::ContradictionPersists(Signal::LockFree)
        );
        if !named {
            out.extend(words(&e.lock));
        }
        if let (Lock::Held { .. }, Some(h)) = (&e.lock, &e.lock_holder) {
            out.push(format!(
                "holder {} since {}",
                h.named_within(HOLDER_HOST_IN_MESSAGE),
                h.since_text()
            ));
        }
    }

    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[
            (Verdict::Dead, Basis::LockFree),
            (Verdict::Hung, Basis::StaleButLockHeld),
        ]
    }

    /// Free where it decided so, else held, its file naming a holder whose host is longer
    /// than a message shows.
    fn widest(&self, w: &Watch, basis: &Basis, _t: Thresholds, e: &mut Evidence) {
        e.lock = match (&w.lock_file, basis) {
            (None, _) => Lock::NotConfigured,
            (Some(_), Basis::LockFree) => Lock::Free,
            (Some(_), _) => Lock::Held {
                pid: Some(WIDEST_PID),
            },
        };
        e.lock_own = false;
        e.lock_holder = matches!(e.lock, Lock::Held { .. }).then(|| HolderLine {
            host: "h".repeat(HOLDER_HOST_IN_MESSAGE + 1),
            pid: WIDEST_PID,
            since: 4_102_444_799, // 2099-12-31T23:59:59Z
        });
    }
}

/// At most this many characters of the host a lock file names go into a row message (a
/// message column is often 255 characters; `--explain` and JSON show more).
const HOLDER_HOST_IN_MESSAGE: usize = 32;

/// The job's lock in the row message's words, when the watch names one.
pub fn words(l: &Lock) -> Option<String> {
    Some(match l {
        Lock::NotConfigured => return None,
        Lock::Held { pid: Some(p) } => format!("lock held by pid {p}"),
        Lock::Held { pid: None } => "lock held".into(),
        Lock::Unconfirmed => "lock seen free, not tried".into(),
        Lock::Free => "lock free".into(),
        Lock::Present => "lock file present".into(),
        Lock::Untrusted(_) => "lock seen free in a directory others can write".into(),
        Lock::Absent => "no lock file".into(),
        Lock::Unreadable(_) => "lock unreadable".into(),
    })
}

/// The evidence with a lock that `/proc/locks` showed free ([`Lock::Unconfirmed`]) tried:
/// a non-blocking try-lock on the file, released at once ([`try_lock`]). Got it:
/// [`Lock::Free`]; someone holds it (a holder this pid namespace cannot see, or one over
/// NFS): [`Lock::Held`]. Only for a row about to be written on the strength of it
/// (docs/design.md#free-means-free), so a job in normal operation is never disturbed; anything else is returned as it
/// is.
pub fn confirm(w: &Watch, row: &RunningRow, host: &Host, e: Evidence) -> Evidence {
    if e.lock != Lock::Unconfirmed {
        return e;
    }
    let (lock, lock_holder, lock_own) = match &w.lock_file {
        Some(t) => match t.render(&row.id.to_string()) {
            Ok(p) => weighed(w, t.has_id(), &p, try_lock(&p), &e.owner, host),
            Err(why) => (Lock::Unreadable(format!("lock_file: {why}")), None, false),
        },
        None => (Lock::NotConfigured, None, false),
    };
    Evidence {
        lock,
        lock_holder,
        lock_own,
        ..e
    }
}

/// What a lock `seen` on the file at `path` is worth: trusted as free or not
/// ([`trusted`]), who its file names when held, and whether it is the row's own.
fn weighed(
    w: &Watch,
    per_row: bool,
    path: &Path,
    seen: Lock,
    owner: &Owner,
    host: &Host,
) -> (Lock, Option<HolderLine>, bool) {
    let lock = trusted(w, path, seen);
    let holder = holder_named(&lock, path);
    let own = own_lock(per_row, &lock, holder.as_ref(), owner, host);
    (lock, holder, own)
}

/// The row's own lock (`own`), held by a process other than `owner_pid` (that very pid
/// [`crate::decide::decide`] weighs itself), proves `owner_pid` the row's worker when
/// the holder descends from it (a PHP worker's child), or when `owner_pid` has the lock
/// file at `path` open itself: a shell worker's `exec 9>>lock; flock -n 9` leaves the
/// lock taken by a `flock` child that has exited, on the descriptor the shell still
/// holds. Both by what `/proc` gives now; a process whose descriptors this user may not
/// read proves nothing.
fn proves_worker(lock: &Lock, own: bool, owner_pid: u32, path: &Path, host: &Host) -> bool {
    let Lock::Held { pid: Some(h) } = *lock else {
        return false;
    };
    if !own || h == owner_pid {
        return false;
    }
    host.is_descendant(h, owner_pid) || host.has_open(owner_pid, path)
}

/// Whether a held lock is the row's own (docs/design.md#verdicts): its file is the row's alone (`{id}` in
/// the template), or its holder is the row's owner — the pid `/proc/locks` gives for it,
/// or the `HOST:PID` of the holder line in the file (for `selfheal run`, `/proc/locks`
/// gives the wrapper and the line its command, which is what a job writes as its owner).
/// A per-kind lock held by someone else, the next run of the same job say, proves
/// nothing about this row.
fn own_lock(
    per_row: bool,
    lock: &Lock,
    holder: Option<&HolderLine>,
    owner: &Owner,
    host: &Host,
) -> bool {
    let Lock::Held { pid } = lock else {
        return false;
    };
    if per_row {
        return true;
    }
    let Some(owner_pid) = owner.pid() else {
        return false;
    };
    *pid == Some(owner_pid) || holder.is_some_and(|h| h.pid == owner_pid && host.is_me(&h.host))
}

/// A lock nobody was seen holding, in a directory where someone other than root, the
/// running user and the file's owner could have swapped the file for a new one, proves
/// nothing ([`Lock::Untrusted`]); a legacy existence lock is never kernel-locked, so
/// "free" is its normal state and proves nothing either ([`Lock::Present`]).
fn trusted(w: &Watch, path: &Path, l: Lock) -> Lock {
    match l {
        Lock::Free | Lock::Unconfirmed if w.release_lock == ReleaseLock::IfFree => Lock::Present,
        Lock::Free | Lock::Unconfirmed => match swappable_by(path) {
            Some(who) => Lock::Untrusted(who),
            None => l,
        },
        l => l,
    }
}

/// The holder the lock file names in its first line (`HOST:PID START`, as `selfheal run`
/// and the PHP helper write it), read only when the lock is held: a regular file only,
/// opened without blocking, its first 512 bytes at most ([`read_line_at`]). It names the
/// holder for a person; it decides nothing (a line outlives its writer).
fn holder_named(lock: &Lock, path: &Path) -> Option<HolderLine> {
    matches!(lock, Lock::Held { .. })
        .then(|| read_line_at(path))
        .flatten()
}

/// The lock file the probe looked at for `row`, as a person reads its path (none where
/// the lock was not looked at: no `lock_file`, or another host's row).
pub fn file_looked_at(w: &Watch, row: &RunningRow, e: &Evidence) -> Option<String> {
    w.lock_file
        .as_ref()
        .filter(|_| e.lock != Lock::NotConfigured)
        .and_then(|t| t.render(&row.id.to_string()).ok())
        .map(|p| p.display().to_string())
}

/// One lock from `/proc/locks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLock {
    pub major: u64,
    pub minor: u64,
    pub inode: u64,
    /// `None` for OFD locks and where the kernel reports -1.
    pub pid: Option<u32>,
    /// A shared lock (`READ`: `flock -s`, a read lock), not an exclusive one.
    pub shared: bool,
}

/// A snapshot of the kernel's lock table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTable {
    locks: Vec<KernelLock>,
}

/// Full passes over `/proc/locks` at most, when no two consecutive ones agree.
const MAX_PASSES: usize = 6;

impl LockTable {
    /// Reads `/proc/locks`; `None` when it is not available (then probes fall back to a
    /// try-lock).
    ///
    /// The kernel generates this file at most a page per `read(2)` and resumes the next
    /// call by record index, so while other locks come and go a record at the boundary
    /// between two calls can be skipped — a held lock would read as free. (`read_to_string`
    /// is worst: its 32-byte first read makes every record a boundary; with a busy lock
    /// beside it, it missed a held lock in 2 % of reads here.) So passes are read in 64 KiB
    /// calls, every other pass starting with a half-page read so that its boundaries fall
    /// elsewhere; reading stops when two consecutive passes agree (nothing moved), else
    /// after [`MAX_PASSES`], and a lock seen in any pass counts as held — a lock released
    /// meanwhile errs on the side of "alive". Measured with two passes alone: 300 held locks
    /// beside a million lock/unlock calls a second, 600,000 look-ups: 3,919 misses with one
    /// pass, none with two.
    pub fn read() -> Option<LockTable> {
        let mut n = 0;
        LockTable::settle(|| {
            n += 1;
            read_pass(if n % 2 == 0 { 2048 } else { 0 })
        })
    }

    /// Every lock seen in passes of `pass`, until two consecutive passes agree or after
    /// [`MAX_PASSES`] (see [`LockTable::read`]). `None` when a pass cannot be read.
    pub fn settle(mut pass: impl FnMut() -> Option<String>) -> Option<LockTable> {
        let mut prev = pass()?;
        let mut seen = LockTable::parse(&prev).locks;
        for _ in 1..MAX_PASSES {
            let next = pass()?;
            let agreed = next == prev;
            for l in LockTable::parse(&next).locks {
                if !seen.contains(&l) {
                    seen.push(l);
                }
            }
            if agreed {
                break;
            }
            prev = next;
        }
        Some(LockTable { locks: seen })
    }

    /// Parses the text of `/proc/locks`. Lines it does not understand are skipped; blocked
    /// waiters (`->`) are not holders.
    pub fn parse(text: &str) -> LockTable {
        let locks = text
            .lines()
            .filter_map(|line| {
                let mut f = line.split_whitespace();
                f.next()?; // "N:"
                let mut kind = f.next()?;
                if kind == "->" {
                    return None;
                }
                if kind.is_empty() {
                    kind = f.next()?;
                }
                if !matches!(kind, "FLOCK" | "POSIX" | "OFDLCK") {
                    return None;
                }
                f.next()?; // ADVISORY | MANDATORY
                let shared = f.next()? == "READ";
                let pid = f.next()?.parse::<i64>().ok()?;
                let mut dev = f.next()?.split(':');
                let major = u64::from_str_radix(dev.next()?, 16).ok()?;
                let minor = u64::from_str_radix(dev.next()?, 16).ok()?;
                let inode = dev.next()?.parse::<u64>().ok()?;
                Some(KernelLock {
                    major,
                    minor,
                    inode,
                    pid: u32::try_from(pid).ok().filter(|p| *p > 0),
                    shared,
                })
            })
            .collect();
        LockTable { locks }
    }

    /// The holder pid of every lock on this inode number, on any device (the safe side:
    /// an unrelated file with the same inode number elsewhere can only keep a file).
    pub fn holders(&self, inode: u64) -> impl Iterator<Item = Option<u32>> + '_ {
        self.locks
            .iter()
            .filter(move |l| l.inode == inode)
            .map(|l| l.pid)
    }

    /// The holder pids of the locks on this inode number when there are some and every one
    /// of them is shared (nobody holds it exclusively); `None` otherwise.
    pub fn shared_holders(&self, inode: u64) -> Option<Vec<Option<u32>>> {
        let on: Vec<&KernelLock> = self.locks.iter().filter(|l| l.inode == inode).collect();
        (!on.is_empty() && on.iter().all(|l| l.shared)).then(|| on.iter().map(|l| l.pid).collect())
    }

    /// A lock on this inode: exact device match first, then inode only.
    fn holder(&self, major: u64, minor: u64, inode: u64) -> Option<&KernelLock> {
        let on_inode = || self.locks.iter().filter(|l| l.inode == inode);
        on_inode()
            .find(|l| l.major == major && l.minor == minor)
            .or_else(|| on_inode().next())
    }
}

/// One pass over `/proc/locks`: a first read of `first` bytes (0: none), then 64 KiB reads.
fn read_pass(first: usize) -> Option<String> {
    let mut f = File::open("/proc/locks").ok()?;
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut want = if first > 0 { first } else { chunk.len() };
    loop {
        match f.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        want = chunk.len();
    }
    String::from_utf8(text).ok()
}

/// The state of the lock on `path`, using `table` when there is one (then a lock with no
/// holder in it is [`Lock::Unconfirmed`]), else [`try_lock`]. The file is reached without
/// being opened ([`crate::fsafe::reach`]): anything but a regular file there (a FIFO, a
/// device, a link another user could have planted) is never opened, and is
/// [`Lock::Unreadable`] unless `/proc/locks` shows it held (held is held, whatever holds it).
pub fn probe_lock(path: &Path, table: Option<&LockTable>) -> Lock {
    let (st, regular) = match crate::fsafe::reach(path) {
        Ok(Reached::File(_, st)) => (st, true),
        Ok(Reached::Other(st)) => (st, false),
        Ok(Reached::Absent) => return Lock::Absent,
        Err(e) => return Lock::Unreadable(format!("{}: {e}", path.display())),
    };
    let Some(t) = table else {
        return if regular {
            try_lock(path)
        } else {
            not_regular(path, st.kind)
        };
    };
    let dev = st.id.dev;
    match t.holder(
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        st.id.ino,
    ) {
        Some(l) => Lock::Held { pid: l.pid },
        None if regular => Lock::Unconfirmed,
        None => not_regular(path, st.kind),
    }
}

fn not_regular(path: &Path, kind: Kind) -> Lock {
    Lock::Unreadable(format!(
        "{}: {}, not a regular file",
        path.display(),
        kind.describe()
    ))
}

/// Who, other than root, the running user and the file's owner, could have replaced the
/// lock file at `path` with a new, unlocked one — its directory is writable by them and
/// not sticky ([`crate::fsafe::swappable_by`]) — in words; `None` when nobody could, or
/// when the file or its directory cannot be looked at (then the probe itself says so).
/// A lock nobody holds in such a directory proves nothing (docs/design.md#whole-watch-holds).
pub fn swappable_by(path: &Path) -> Option<String> {
    let file = std::fs::metadata(path).ok()?;
    let dir = std::fs::metadata(path.parent()?).ok()?;
    crate::fsafe::swappable_by(dir.uid(), dir.gid(), dir.mode() & 0o7777, file.uid())
}

/// Why an evidence file could not be opened by [`open_regular`].
#[derive(Debug)]
pub enum NotOpened {
    /// Nothing at that name.
    Absent,
    /// Something that is not a regular file (a FIFO, a device, a directory, a link another
    /// user could have planted): never opened.
    NotRegular(Kind),
    /// Any other failure of the open or of the `fstat` after it.
    Io(std::io::Error),
}

/// Opens the evidence file `path` to read it, never blocking and never opening anything
/// but a regular file: the name is reached `O_PATH|O_NOFOLLOW`, its type checked on that
/// descriptor, and only a regular file is opened, through the descriptor
/// ([`crate::fsafe::open_evidence`]; a link is followed unless another user could have
/// planted it). A FIFO or device planted there, or swapped in after the look, is never
/// opened (docs/design.md#file-safety). Nothing is created or written.
pub fn open_regular(path: &Path) -> Result<File, NotOpened> {
    match crate::fsafe::open_evidence(path) {
        Ok(Opened::File(f)) => Ok(f),
        Ok(Opened::Absent) => Err(NotOpened::Absent),
        Ok(Opened::Other(kind)) => Err(NotOpened::NotRegular(kind)),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(NotOpened::Absent),
        Err(e) => Err(NotOpened::Io(e)),
    }
}

/// Reads the holder line ([`crate::holder_line`]) of the lock file at `path`
/// ([`open_regular`]: following links as reading evidence does, never blocking, regular
/// files only; at most the first 512 bytes): `None` when the file cannot be read, names no
/// holder, or its first line does not end within what is read.
pub fn read_line_at(path: &Path) -> Option<HolderLine> {
    let f = open_regular(path).ok()?;
    let text = holder_line::read_content(&f);
    if text.len() >= holder_line::MAX_READ && !text.contains('\n') {
        return None;
    }
    holder_line::parse_line(&text)
}

/// Whether anyone holds a lock on `path`, asked of the kernel itself: a non-blocking
/// exclusive `flock` on a read-only descriptor (released at once: unlocked, and the
/// descriptor closed) and an `F_GETLK` test for a POSIX or OFD lock on the whole file.
/// Got the flock and no POSIX lock in the way: [`Lock::Free`]; either refused:
/// [`Lock::Held`] with no pid (the holder may not be visible from here). Never creates,
/// truncates or deletes the file, and never blocks ([`open_regular`]: anything but a
/// regular file is unreadable).
pub fn try_lock(path: &Path) -> Lock {
    let f = match open_regular(path) {
        Ok(f) => f,
        Err(NotOpened::Absent) => return Lock::Absent,
        Err(NotOpened::NotRegular(kind)) => return not_regular(path, kind),
        Err(NotOpened::Io(e)) => return Lock::Unreadable(format!("{}: {e}", path.display())),
    };
    match f.try_lock() {
        Ok(()) => {
            let _ = f.unlock();
        }
        Err(TryLockError::WouldBlock) => return Lock::Held { pid: None },
        Err(TryLockError::Error(e)) => {
            return Lock::Unreadable(format!("{}: flock: {e}", path.display()));
        }
    }
    posix_lock(&f, path)
}

/// `F_GETLK` for a write lock on the whole file: takes nothing, reports a conflicting
/// POSIX or OFD lock of any process.
fn posix_lock(f: &File, path: &Path) -> Lock {
    use nix::fcntl::{FcntlArg, fcntl};
    #[allow(clippy::cast_possible_truncation)] // F_WRLCK, SEEK_SET and F_UNLCK are 1, 0, 2
    let mut query = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    match fcntl(f, FcntlArg::F_GETLK(&mut query)) {
        Ok(_) if i32::from(query.l_type) == libc::F_UNLCK => Lock::Free,
        Ok(_) => Lock::Held {
            pid: u32::try_from(query.l_pid).ok().filter(|p| *p > 0),
        },
        Err(e) => Lock::Unreadable(format!("{}: fcntl(F_GETLK): {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
1: POSIX  ADVISORY  WRITE 1234 08:02:1234567 0 EOF
2: FLOCK  ADVISORY  WRITE 5678 00:1f:98765 0 EOF
2: -> FLOCK  ADVISORY  WRITE 999 00:1f:98765 0 EOF
3: OFDLCK ADVISORY  READ  -1 00:05:4242 0 EOF
4: LEASE  ACTIVE    READ  77 00:05:31337 0 EOF
garbage line
5: FLOCK  ADVISORY  WRITE x 00:1f:1 0 EOF
";

    #[test]
    fn parses_holders_not_waiters() {
        let t = LockTable::parse(SAMPLE);
        assert_eq!(t.locks.len(), 3);
        assert_eq!(t.holder(8, 2, 1_234_567).map(|l| l.pid), Some(Some(1234)));
        assert_eq!(t.holder(0, 0x1f, 98_765).map(|l| l.pid), Some(Some(5678)));
        assert_eq!(t.holder(0, 5, 4242).map(|l| l.pid), Some(None));
        // Leases are not locks.
        assert_eq!(t.holder(0, 5, 31_337).map(|l| l.pid), None);
        assert_eq!(t.holders(98_765).collect::<Vec<_>>(), [Some(5678)]);
        assert_eq!(t.holders(4242).collect::<Vec<_>>(), [None]);
        assert_eq!(t.holders(31_337).count(), 0);
        // Same inode on another device: still held (the safe side).
        assert_eq!(t.holder(9, 9, 98_765).map(|l| l.pid), Some(Some(5678)));
        assert_eq!(t.holder(0, 0x1f, 1).map(|l| l.pid), None);
        assert_eq!(LockTable::parse(""), LockTable::default());
    }

    #[test]
    fn shared_holders_only_when_nobody_holds_it_exclusively() {
        let t = LockTable::parse(
            "1: FLOCK  ADVISORY  READ  11 00:1f:7 0 EOF\n\
             2: FLOCK  ADVISORY  READ  12 00:1f:7 0 EOF\n\
             3: FLOCK  ADVISORY  READ  13 00:1f:8 0 EOF\n\
             4: FLOCK  ADVISORY  WRITE 14 00:1f:8 0 EOF\n\
             5: -> FLOCK  ADVISORY  WRITE 15 00:1f:7 0 EOF\n",
        );
        assert_eq!(t.shared_holders(7), Some(vec![Some(11), Some(12)]));
        assert_eq!(t.shared_holders(8), None);
        assert_eq!(t.shared_holders(9), None);
        assert_eq!(
            LockTable::parse(SAMPLE).shared_holders(4242),
            Some(vec![None])
        );
        assert_eq!(LockTable::parse(SAMPLE).shared_holders(98_765), None);
    }

    /// Regression: a held lock must never read as free while other locks come and go.
    /// 300 locks held by one process, a million lock/unlock calls a second by another:
    /// every read of the table must list all 300.
    #[test]
    fn a_busy_lock_table_never_hides_a_held_lock() {
        use std::io::{BufRead, BufReader};
        use std::os::unix::fs::MetadataExt;
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().expect("tempdir");
        let spawn = |code: &str| {
            Command::new("python3")
                .arg("-c")
                .arg(code)
                .arg(dir.path())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3")
        };
        let mut holder = spawn(
            "import fcntl, os, sys, time\n\
             fs = []\n\
             for i in range(300):\n\
             \x20   f = open(os.path.join(sys.argv[1], str(i)), 'w')\n\
             \x20   fcntl.flock(f, fcntl.LOCK_EX)\n\
             \x20   fs.append(f)\n\
             print('ready', flush=True)\n\
             time.sleep(600)\n",
        );
        let mut busy = spawn(
            "import fcntl, os, sys\n\
             fd = os.open(os.path.join(sys.argv[1], 'busy'), os.O_RDWR | os.O_CREAT)\n\
             print('ready', flush=True)\n\
             while True:\n\
             \x20   fcntl.flock(fd, fcntl.LOCK_EX)\n\
             \x20   fcntl.flock(fd, fcntl.LOCK_UN)\n",
        );
        for p in [&mut holder, &mut busy] {
            let mut line = String::new();
            BufReader::new(p.stdout.as_mut().expect("stdout"))
                .read_line(&mut line)
                .expect("ready");
            assert_eq!(line.trim(), "ready");
        }
        let inodes: Vec<u64> = (0..300)
            .map(|i| {
                std::fs::metadata(dir.path().join(i.to_string()))
                    .expect("stat")
                    .ino()
            })
            .collect();
        let mut missed = 0;
        for _ in 0..200 {
            let t = LockTable::read().expect("/proc/locks");
            missed += inodes
                .iter()
                .filter(|i| t.holders(**i).count() == 0)
                .count();
        }
        for p in [&mut holder, &mut busy] {
            let _ = p.kill();
            let _ = p.wait();
        }
        assert_eq!(missed, 0, "held locks read as free in a busy lock table");
    }

    /// The try-lock answers for every kind of holder: a flock and a POSIX lock of another
    /// process, shared or exclusive (python3 children hold them).
    #[test]
    fn a_try_lock_sees_flock_and_posix_holders() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.lock");
        std::fs::write(&p, "").expect("create");
        for how in [
            "fcntl.flock(f, fcntl.LOCK_EX)",
            "fcntl.flock(f, fcntl.LOCK_SH)",
            "fcntl.lockf(f, fcntl.LOCK_EX)",
            "fcntl.lockf(f, fcntl.LOCK_SH)",
        ] {
            let mode = if how.contains("lockf(f, fcntl.LOCK_EX)") {
                "r+"
            } else {
                "r"
            };
            let mut holder = Command::new("python3")
                .arg("-c")
                .arg(format!(
                    "import fcntl, sys, time\nf = open(sys.argv[1], '{mode}')\n{how}\n\
                     print('ready', flush=True)\ntime.sleep(600)\n"
                ))
                .arg(&p)
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let mut line = String::new();
            BufReader::new(holder.stdout.as_mut().expect("stdout"))
                .read_line(&mut line)
                .expect("ready");
            assert_eq!(line.trim(), "ready", "{how}");
            let got = try_lock(&p);
            let _ = holder.kill();
            let _ = holder.wait();
            assert!(matches!(got, Lock::Held { .. }), "{how}: {got:?}");
        }
        assert_eq!(try_lock(&p), Lock::Free);
        assert_eq!(try_lock(&dir.path().join("none")), Lock::Absent);
        assert!(matches!(try_lock(dir.path()), Lock::Unreadable(_)));
    }

    #[test]
    fn passes_go_on_until_two_agree_and_every_lock_seen_counts() {
        let a = "1: FLOCK  ADVISORY  WRITE 5678 00:1f:98765 0 EOF\n";
        // A pass that skipped the job's record between two reads, then two that agree.
        let mut n = 0;
        let mut passes = vec!["", a, a, "never read"].into_iter().map(str::to_string);
        let t = LockTable::settle(|| {
            n += 1;
            passes.next()
        })
        .expect("table");
        assert_eq!(n, 3, "stops once two consecutive passes agree");
        assert_eq!(t.holder(0, 0x1f, 98_765).map(|l| l.pid), Some(Some(5678)));

        // Never two alike: MAX_PASSES passes, and every lock seen in one of them is held.
        let b = "1: FLOCK  ADVISORY  WRITE 77 00:1f:1 0 EOF\n";
        let mut n = 0;
        let t = LockTable::settle(|| {
            n += 1;
            Some(if n % 2 == 0 { a } else { b }.to_string())
        })
        .expect("table");
        assert_eq!(n, MAX_PASSES);
        assert_eq!(t.holder(0, 0x1f, 98_765).map(|l| l.pid), Some(Some(5678)));
        assert_eq!(t.holder(0, 0x1f, 1).map(|l| l.pid), Some(Some(77)));

        // Unreadable on any pass: no table (the probe falls back to a try-lock).
        let mut passes = vec![Some(a.to_string()), None].into_iter();
        assert_eq!(LockTable::settle(|| passes.next().flatten()), None);
    }

    #[test]
    fn probes_a_real_flock_both_ways() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.lock");
        assert_eq!(probe_lock(&p, LockTable::read().as_ref()), Lock::Absent);
        assert_eq!(probe_lock(&p, None), Lock::Absent);
        let holder = File::create(&p).expect("create");
        assert_eq!(
            probe_lock(&p, LockTable::read().as_ref()),
            Lock::Unconfirmed
        );
        assert_eq!(probe_lock(&p, None), Lock::Free);
        assert_eq!(try_lock(&p), Lock::Free);
        holder.lock().expect("lock");
        let me = std::process::id();
        assert_eq!(
            probe_lock(&p, LockTable::read().as_ref()),
            Lock::Held { pid: Some(me) }
        );
        assert_eq!(probe_lock(&p, None), Lock::Held { pid: None });
        assert_eq!(try_lock(&p), Lock::Held { pid: None });
        holder.unlock().expect("unlock");
        assert_eq!(
            probe_lock(&p, LockTable::read().as_ref()),
            Lock::Unconfirmed
        );
        assert_eq!(try_lock(&p), Lock::Free);
        assert!(p.exists(), "the probe never deletes the lock file");
    }

    /// What a lock file holds is another user's to write: a FIFO there must not block
    /// the reader, a device is not opened, and a first line that does not end within what
    /// is read is no holder line.
    #[test]
    fn the_line_is_read_without_blocking_from_regular_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.lock");
        std::fs::write(&p, "web1:4242 2035-03-14T15:09:26Z\n").expect("write");
        assert_eq!(read_line_at(&p).map(|h| h.pid), Some(4242));
        let link = dir.path().join("link.lock");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert_eq!(
            read_line_at(&link).map(|h| h.pid),
            Some(4242),
            "links are followed"
        );
        let fifo = dir.path().join("fifo.lock");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        assert_eq!(read_line_at(&fifo), None);
        assert!(open_regular(&fifo).is_err());
        assert!(open_regular(Path::new("/dev/null")).is_err());
        assert!(open_regular(dir.path()).is_err());
        std::fs::write(
            &p,
            format!("web1:4242 2035-03-14T15:09:26Z{}", " ".repeat(600)),
        )
        .expect("write");
        assert_eq!(
            read_line_at(&p),
            None,
            "a first line longer than what is read"
        );
        std::fs::write(&p, "garbage\u{1b}[2J\n").expect("write");
        assert_eq!(read_line_at(&p), None);
    }
}
