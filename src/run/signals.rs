//! The wrapper's signals, read synchronously: SIGTERM, SIGINT, SIGHUP (to forward to the
//! command, or to give up waiting for the lock) and SIGCHLD (the command ended) are
//! blocked and read from a `signalfd`, polled with a timeout — the heartbeat's next tick
//! or the lock's next try. No handler runs asynchronously, so nothing is lost between a
//! check and a wait, and a signal that arrives while the command is being started waits
//! in the queue until the loop reads it.
//!
//! The command does not inherit the blocked mask: [`super::child::spawn`] empties it in
//! the child before `exec` (a mask survives `exec`, and std's `Command` leaves it as it
//! is); the `signalfd` is close-on-exec.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd, siginfo};

/// The signals forwarded to the command.
pub const FORWARDED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// `si_code` of a signal the kernel itself sent, e.g. the terminal's SIGINT on Ctrl-C,
/// which goes to the whole foreground process group — the command included.
const SI_KERNEL: i32 = 0x80;

/// One signal that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrived {
    pub signal: Signal,
    /// Sent by the kernel to a whole process group (a terminal), not by a process.
    pub from_kernel: bool,
}

impl Arrived {
    fn of(si: &siginfo) -> Option<Arrived> {
        Some(Arrived {
            signal: Signal::try_from(i32::try_from(si.ssi_signo).ok()?).ok()?,
            from_kernel: si.ssi_code == SI_KERNEL,
        })
    }
}

/// The blocked signals and the descriptor they are read from.
#[derive(Debug)]
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks the forwarded signals and SIGCHLD in this (single-threaded) process and opens
    /// the `signalfd` they are read from.
    pub fn block() -> nix::Result<Signals> {
        let mut set = SigSet::empty();
        for s in FORWARDED {
            set.add(s);
        }
        set.add(Signal::SIGCHLD);
        // A SIGCHLD inherited as ignored would make the kernel reap the command itself,
        // and its exit status would be lost.
        // SAFETY: SIG_DFL installs no handler code, so no async-signal-safety rule applies.
        unsafe { nix::sys::signal::signal(Signal::SIGCHLD, SigHandler::SigDfl) }?;
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Signals { fd })
    }

    /// Waits at most `timeout` (`None`: until a signal comes) and returns every signal
    /// that arrived, in order. Returns early, with an empty list, when interrupted.
    pub fn wait(&self, timeout: Option<Duration>) -> nix::Result<Vec<Arrived>> {
        let t = match timeout {
            None => PollTimeout::NONE,
            // Rounded up, so that a wait shorter than a millisecond is not a busy loop.
            Some(d) => {
                PollTimeout::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, t) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        let mut out = Vec::new();
        while let Some(si) = self.fd.read_signal()? {
            out.extend(Arrived::of(&si));
        }
        Ok(out)
    }
}

/// `SIGTERM`, … for a signal number; `signal N` for one nix does not know.
pub fn name(signo: i32) -> String {
    Signal::try_from(signo).map_or_else(|_| format!("signal {signo}"), |s| s.as_str().into())
}
