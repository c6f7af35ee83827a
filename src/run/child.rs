//! The command under `selfheal run`: started with the lock's descriptor inherited, watched
//! until it ends, its heartbeat touched meanwhile, and SIGTERM, SIGINT and SIGHUP passed
//! on to it.
//!
//! **The lock outlives the wrapper.** Close-on-exec is cleared on the locked descriptor in
//! the child only, between `fork` and `exec`; every other descriptor selfheal opens is
//! close-on-exec. The command therefore shares the lock's open file description:
//! the `flock` stays held until the last process holding it ends — the command, or a
//! background process the command left behind with the descriptor (later runs then exit
//! 75 naming that process). `/proc/locks` names the process that took the lock, i.e. the
//! wrapper, even after the wrapper was killed; the holder line names the command.
//!
//! **Heartbeat.** With `--heartbeat FILE`, the file is touched just before the command
//! starts ([`HeartbeatFile::start`]: a file that cannot be created or touched then stops the
//! run, exit 3, as an unusable lock file does) and then every `--every`, each time reached
//! again by the safe walk's directory handle (created 0644 if missing; its mtime set to the
//! host clock's now; the same checks as the lock file's), but only while the
//! command's own process is not stopped (`T` or `t` in `/proc/PID/stat`: a stopped job
//! must not look alive) and not a zombie. It proves the process exists, not that it makes
//! progress; a job that can should touch it from its own loop (the PHP helper's `beat()`).
//! A touch that fails is reported once on stderr per distinct error, and the command runs
//! on.
//!
//! **Signals.** The command starts with no signal blocked (the wrapper's own mask, which
//! holds back the signals it reads synchronously, is emptied in the child before `exec`).
//! SIGTERM, SIGINT and SIGHUP sent to the wrapper are sent on to the command's
//! process. One the kernel sent to the whole foreground process group (the terminal's
//! Ctrl-C or hangup) already reached the command when it shares the wrapper's group, and is
//! not sent twice.

use std::ffi::{OsStr, OsString};
use std::fs::FileTimes;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{SigSet, kill};

use super::lock::LockFile;
use super::signals::{FORWARDED, Signals};
use crate::fsafe::{self, Dir};

/// The mode a new heartbeat file is created with (less the umask), and the most an
/// existing one keeps.
pub const HEARTBEAT_MODE: u32 = 0o644;

/// Starts the command, with the lock's descriptor (if any) inherited and no signal
/// blocked.
pub fn spawn(command: &[OsString], lock: Option<&LockFile>) -> std::io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let lock_fd = lock.map(|l| l.file.as_raw_fd());
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (fcntl, sigprocmask), allocating nothing. `lock_fd`
    // stays open in the parent until `spawn` returns, so it is valid in the child.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = lock_fd {
                // Close-on-exec cleared in the child only: the command inherits the lock.
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            // The wrapper blocks the signals it reads synchronously; the mask would be
            // inherited across exec, and a command that cannot receive SIGTERM cannot be
            // stopped.
            SigSet::empty().thread_set_mask()?;
            Ok(())
        });
    }
    cmd.spawn()
}

/// The file `selfheal run --heartbeat` touches: its directory reached once by the safe
/// walk, the name in it, and when it is next due.
#[derive(Debug)]
pub struct HeartbeatFile {
    pub path: PathBuf,
    dir: Dir,
    name: OsString,
    every: Duration,
    next: Instant,
    /// The last touch error reported, so that a lasting problem is told once.
    last_error: Option<String>,
}

impl HeartbeatFile {
    /// Reaches the directory and checks this user may write the file there; creates and
    /// touches nothing yet (a run that is skipped must not freshen the heartbeat).
    pub fn prepare(path: &Path, every: Duration) -> fsafe::Result<HeartbeatFile> {
        let (dir, name) = Dir::open_parent(path)?;
        // An existing file is checked now (a link, a FIFO, another owner, hard links) by
        // opening it as a touch would, which changes neither its content nor its mtime; a
        // missing one is only known to be creatable.
        match dir.stat_at(&name)? {
            Some(st) if st.kind == fsafe::Kind::Symlink => {
                return Err(fsafe::Error::FinalSymlink {
                    path: path.to_path_buf(),
                });
            }
            Some(_) => drop(dir.open_rw(&name, HEARTBEAT_MODE)?),
            None => super::record::can_create_in(&dir, path)?,
        }
        Ok(HeartbeatFile {
            path: path.to_path_buf(),
            dir,
            name,
            every,
            next: Instant::now(),
            last_error: None,
        })
    }

    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Creates or touches the file before the command starts (after the lock was taken):
    /// an error here stops the run as an unusable lock file does. The next touch is due
    /// `--every` later.
    pub fn start(&mut self) -> fsafe::Result<()> {
        self.touch()?;
        self.next = super::later(Instant::now(), self.every);
        Ok(())
    }

    /// Sets the file's mtime (and atime) to now, creating it if needed.
    pub fn touch(&self) -> fsafe::Result<()> {
        let f = self.dir.open_rw(&self.name, HEARTBEAT_MODE)?;
        let now = SystemTime::now();
        f.set_times(FileTimes::new().set_accessed(now).set_modified(now))
            .map_err(|e| fsafe::Error::Io {
                path: self.path.clone(),
                component: None,
                action: "setting the modification time of",
                source: e,
            })
    }

    /// Touches the file if it is due and the command's process `pid` runs; reports a
    /// failure once. Returns the time left until the next tick.
    fn tick(&mut self, pid: u32) -> Duration {
        let now = Instant::now();
        if now >= self.next {
            if runs(pid) {
                match self.touch() {
                    Ok(()) => self.last_error = None,
                    Err(e) => {
                        let text = e.to_string();
                        if self.last_error.as_deref() != Some(text.as_str()) {
                            eprintln!("selfheal run: warning: heartbeat not touched: {text}");
                            self.last_error = Some(text);
                        }
                    }
                }
            }
            // The next tick keeps the rhythm; after a long stall it starts afresh.
            self.next = super::later(self.next, self.every);
            if self.next <= now {
                self.next = super::later(now, self.every);
            }
        }
        self.next.saturating_duration_since(Instant::now())
    }
}

/// The state letter of a process (`/proc/PID/stat`, field 3).
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the state follows the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// True when the process is neither stopped (`T`, `t`) nor dead (`Z`, `X`).
fn runs(pid: u32) -> bool {
    !matches!(state(pid), Some('T' | 't' | 'Z' | 'X') | None)
}

/// How the command ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    /// The signals passed on to it, by name.
    pub forwarded: Vec<String>,
}

/// Waits for the command to end, touching the heartbeat and passing signals on.
pub fn supervise(
    child: &mut Child,
    signals: &Signals,
    mut heartbeat: Option<&mut HeartbeatFile>,
) -> std::io::Result<Ended> {
    let pid = child.id();
    let mut forwarded = Vec::new();
    loop {
        // Reaped only here: until then the pid cannot be reused, so a signal passed on
        // below always reaches the command.
        if let Some(status) = child.try_wait()? {
            return Ok(Ended { status, forwarded });
        }
        let timeout = heartbeat.as_deref_mut().map(|h| h.tick(pid));
        for a in signals.wait(timeout).map_err(std::io::Error::from)? {
            if !FORWARDED.contains(&a.signal) {
                continue;
            }
            if a.from_kernel && same_group(pid) {
                continue;
            }
            // ESRCH: it has just ended; the next try_wait sees it.
            if let Some(p) = crate::host::pid_t(pid) {
                let _ = kill(p, a.signal);
            }
            forwarded.push(a.signal.as_str().to_string());
        }
    }
}

/// True when the process `pid` is in this process's process group.
fn same_group(pid: u32) -> bool {
    crate::host::pid_t(pid).and_then(|p| nix::unistd::getpgid(Some(p)).ok())
        == Some(nix::unistd::getpgrp())
}

/// The exit status cron sees for the command's: its own code, or 128+N when signal N
/// ended it.
pub fn exit_code(status: &ExitStatus) -> (u8, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (u8::try_from(c & 0xff).unwrap_or(1), None),
        (None, Some(n)) => (u8::try_from((128 + n) & 0xff).unwrap_or(1), Some(n)),
        (None, None) => (1, None),
    }
}
