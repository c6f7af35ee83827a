//! The job's own lock: does any process hold a kernel lock on the lock file's inode?
//!
//! Primary method, non-intrusive: read `/proc/locks` once and match the file's device and
//! inode (flock, POSIX and OFD locks; the holder's pid when the kernel gives one). The
//! probe takes no lock at all then, so a job starting at that instant never fails its own
//! `flock -n` because of selfheal. Only when `/proc/locks` cannot be read does it fall
//! back to a non-blocking `flock` on a read-only descriptor, released at once.
//!
//! The file is never created, truncated or deleted here. Where the device number in
//! `/proc/locks` differs from `stat`'s (overlay file systems), a lock on the same inode
//! number still counts as held: the error is on the side of "alive".
//!
//! `/proc/locks` is a seq_file: each `read(2)` returns at most a page, and the next one
//! resumes by position, so a lock released between two reads shifts the list and can make
//! a record vanish from the text. A vanished record would read as "free" — conclusive death
//! for a job that holds its lock. So "free" is only concluded from two consecutive full
//! passes with identical text; a table that never settles is `unsettled`, and a lock not
//! seen in it is unreadable (`unknown`), never free.

use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::decide::Lock;

/// One lock from `/proc/locks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLock {
    pub major: u64,
    pub minor: u64,
    pub inode: u64,
    /// `None` for OFD locks and where the kernel reports -1.
    pub pid: Option<u32>,
}

/// A snapshot of the kernel's lock table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTable {
    locks: Vec<KernelLock>,
    /// No two consecutive passes agreed: every lock seen is listed, but a lock not seen may
    /// have been skipped.
    unsettled: bool,
}

/// Full passes over `/proc/locks` before giving up on two that agree.
const MAX_PASSES: usize = 6;

/// One full pass over `/proc/locks`, in page-sized reads.
fn read_pass() -> Option<String> {
    use std::io::Read;
    let mut f = File::open("/proc/locks").ok()?;
    let mut text = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(text).ok()
}

impl LockTable {
    /// Reads `/proc/locks` until two consecutive passes agree; `None` when it is not
    /// available (then probes fall back to a try-lock).
    pub fn read() -> Option<LockTable> {
        LockTable::settle(read_pass)
    }

    /// The table from passes of `pass` (see [`LockTable::read`]): the first pass that equals
    /// the one before it, else the union of every pass, marked unsettled.
    pub fn settle(mut pass: impl FnMut() -> Option<String>) -> Option<LockTable> {
        let mut prev = pass()?;
        let mut seen = LockTable::parse(&prev).locks;
        for _ in 1..MAX_PASSES {
            let next = pass()?;
            if next == prev {
                return Some(LockTable::parse(&next));
            }
            for l in LockTable::parse(&next).locks {
                if !seen.contains(&l) {
                    seen.push(l);
                }
            }
            prev = next;
        }
        Some(LockTable {
            locks: seen,
            unsettled: true,
        })
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
                f.next()?; // READ | WRITE
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
                })
            })
            .collect();
        LockTable {
            locks,
            unsettled: false,
        }
    }

    /// The holder pid of every lock on this inode number, on any device (the safe side:
    /// an unrelated file with the same inode number elsewhere can only keep a file).
    pub fn holders(&self, inode: u64) -> impl Iterator<Item = Option<u32>> + '_ {
        self.locks
            .iter()
            .filter(move |l| l.inode == inode)
            .map(|l| l.pid)
    }

    /// The holder of a lock on this inode: exact device match first, then inode only.
    fn holder(&self, major: u64, minor: u64, inode: u64) -> Option<Option<u32>> {
        let on_inode = || self.locks.iter().filter(|l| l.inode == inode);
        on_inode()
            .find(|l| l.major == major && l.minor == minor)
            .or_else(|| on_inode().next())
            .map(|l| l.pid)
    }
}

/// The state of the lock on `path`, using `table` when there is one.
pub fn probe_lock(path: &Path, table: Option<&LockTable>) -> Lock {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Lock::Absent,
        Err(e) => return Lock::Unreadable(format!("{}: {e}", path.display())),
    };
    if let Some(t) = table {
        let dev = meta.dev();
        return match t.holder(
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev),
            meta.ino(),
        ) {
            Some(pid) => Lock::Held { pid },
            None if t.unsettled => Lock::Unreadable(format!(
                "{}: /proc/locks changed under every read; whether the lock is held is not known",
                path.display()
            )),
            None => Lock::Free,
        };
    }
    if !meta.is_file() {
        return Lock::Unreadable(format!("{}: not a regular file", path.display()));
    }
    // Fallback: a try-lock on a read-only descriptor, released at once (drop closes it).
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Lock::Absent,
        Err(e) => return Lock::Unreadable(format!("{}: {e}", path.display())),
    };
    match f.try_lock() {
        Ok(()) => {
            let _ = f.unlock();
            Lock::Free
        }
        Err(TryLockError::WouldBlock) => Lock::Held { pid: None },
        Err(TryLockError::Error(e)) => Lock::Unreadable(format!("{}: flock: {e}", path.display())),
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
        assert_eq!(t.holder(8, 2, 1_234_567), Some(Some(1234)));
        assert_eq!(t.holder(0, 0x1f, 98_765), Some(Some(5678)));
        assert_eq!(t.holder(0, 5, 4242), Some(None));
        // Leases are not locks.
        assert_eq!(t.holder(0, 5, 31_337), None);
        assert_eq!(t.holders(98_765).collect::<Vec<_>>(), [Some(5678)]);
        assert_eq!(t.holders(4242).collect::<Vec<_>>(), [None]);
        assert_eq!(t.holders(31_337).count(), 0);
        // Same inode on another device: still held (the safe side).
        assert_eq!(t.holder(9, 9, 98_765), Some(Some(5678)));
        assert_eq!(t.holder(0, 0x1f, 1), None);
        assert_eq!(LockTable::parse(""), LockTable::default());
    }

    #[test]
    fn free_is_only_concluded_from_two_passes_that_agree() {
        let a = "1: FLOCK  ADVISORY  WRITE 5678 00:1f:98765 0 EOF\n";
        // A pass that skipped the job's record between two reads, then two that agree.
        let mut passes = vec!["", a, a].into_iter().map(str::to_string);
        let t = LockTable::settle(|| passes.next()).expect("table");
        assert!(!t.unsettled);
        assert_eq!(t.holder(0, 0x1f, 98_765), Some(Some(5678)));

        // Never two alike: every lock seen is kept, and the table is unsettled.
        let b = "1: FLOCK  ADVISORY  WRITE 77 00:1f:1 0 EOF\n";
        let mut n = 0;
        let t = LockTable::settle(|| {
            n += 1;
            Some(if n % 2 == 0 { a } else { b }.to_string())
        })
        .expect("table");
        assert!(t.unsettled);
        assert_eq!(n, MAX_PASSES);
        assert_eq!(t.holder(0, 0x1f, 98_765), Some(Some(5678)));
        assert_eq!(t.holder(0, 0x1f, 1), Some(Some(77)));

        // Unreadable on any pass: no table (the probe falls back to a try-lock).
        let mut passes = vec![Some(a.to_string()), None].into_iter();
        assert_eq!(LockTable::settle(|| passes.next().flatten()), None);
    }

    #[test]
    fn an_unsettled_table_never_says_free() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.lock");
        File::create(&p).expect("create");
        let unsettled = LockTable {
            locks: Vec::new(),
            unsettled: true,
        };
        assert!(
            matches!(probe_lock(&p, Some(&unsettled)), Lock::Unreadable(w) if w.contains("changed under every read"))
        );
        assert_eq!(probe_lock(&p, Some(&LockTable::default())), Lock::Free);
    }

    #[test]
    fn probes_a_real_flock_both_ways() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.lock");
        assert_eq!(probe_lock(&p, LockTable::read().as_ref()), Lock::Absent);
        assert_eq!(probe_lock(&p, None), Lock::Absent);
        let holder = File::create(&p).expect("create");
        assert_eq!(probe_lock(&p, LockTable::read().as_ref()), Lock::Free);
        assert_eq!(probe_lock(&p, None), Lock::Free);
        holder.lock().expect("lock");
        let me = std::process::id();
        assert_eq!(
            probe_lock(&p, LockTable::read().as_ref()),
            Lock::Held { pid: Some(me) }
        );
        assert_eq!(probe_lock(&p, None), Lock::Held { pid: None });
        holder.unlock().expect("unlock");
        assert_eq!(probe_lock(&p, LockTable::read().as_ref()), Lock::Free);
        assert!(p.exists(), "the probe never deletes the lock file");
    }
}
