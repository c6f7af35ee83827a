//! The worker named in a row's owner column (`HOST:PID` or `PID`) ([`OwnerSource`]):
//! whose row it is, and whether its pid lives.
//!
//! Checked only when the host is this host by [`Host::is_me`] — whole names, never a short
//! name's guess (a bare `PID` is taken as local): `kill(pid, 0)`
//! says whether the pid exists (EPERM means it does, under another user), and the process
//! start time from `/proc/PID/stat` tells a recycled pid (`reused`: started after the row)
//! from the worker itself; a zombie (killed, not yet reaped by its parent) is dead. Another
//! host's worker is [`Owner::NotLocal`] (shown as `remote`): its pid is never looked at.
//!
//! Pids are only as good as the namespace they are read in: `kill(pid, 0)` and `/proc`
//! answer for the reader's pid namespace. Outside the host's initial one
//! (`/proc/self/ns/pid` is not `pid:[4026531836]`: a container, `unshare --pid`), the
//! worker's pid means nothing here — absent, or another process — so every pid is
//! `not_visible` (neutral), never `dead` ([`PidNamespace`], read once per process).
//!
//! I/O: `kill(pid, 0)`, `/proc/PID/stat`, `/proc/PID/task`, and `/proc/self/ns/pid` once.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::clock::{epoch, human};
use crate::config::Watch;
use crate::decide::{Basis, Decision, Evidence, Owner, Signal, Thresholds, Verdict, WorkerProof};
use crate::host::Host;
use crate::message;
use crate::store::RunningRow;

use super::{Human, Item, Reading, Rendered, Source, Value, WIDEST_PID, widest_secs};

/// The worker the owner column names ([`Evidence::owner`]).
pub struct OwnerSource;

impl Source for OwnerSource {
    /// Whose the row is: an owner on another host makes it that host's, and nothing of
    /// this host is its evidence (no pid of it is looked at here).
    fn read_row(&self, at: &Reading<'_>, e: &mut Evidence) {
        if let Some(host) = other_host(at.w, at.row, at.scene.host) {
            e.owner = Owner::NotLocal {
                host: host.to_string(),
            };
        }
    }

    /// The pid on this host: alive, gone, or started after the row.
    fn read_now(&self, at: &Reading<'_>, e: &mut Evidence) {
        let Reading { w, row, scene, .. } = at;
        e.owner = match w.has_owner() {
            false => Owner::NotConfigured,
            true => {
                // The row's start on the host timeline: host now minus the row's age, so
                // a skewed database clock does not make a worker look younger than its
                // row. An age beyond i64 (never produced) would place the start at the
                // earliest time.
                let age = e
                    .total_age
                    .as_ref()
                    .map_or(0, |a| i64::try_from(*a).unwrap_or(i64::MAX));
                let started = epoch(scene.host_now).saturating_sub(age);
                probe_owner(
                    scene.host,
                    row.owner.as_deref(),
                    started,
                    w.stale_after.as_secs(),
                )
            }
        };
    }

    fn render(&self, e: &Evidence, out: &mut Rendered) {
        let (state, pid) = match &e.owner {
            Owner::NotConfigured => ("none", None),
            Owner::Empty => ("empty", None),
            Owner::Alive { pid } => ("alive", Some(*pid)),
            Owner::Dead { pid } => ("dead", Some(*pid)),
            Owner::Reused { pid, .. } => ("reused", Some(*pid)),
            Owner::NotLocal { .. } => ("remote", None),
            Owner::NotVisible { pid } => ("not_visible", Some(*pid)),
            Owner::Invalid(_) => ("invalid", None),
            Owner::Unreadable(_) => ("unreadable", None),
        };
        let value = match (&e.owner, pid) {
            (Owner::NotLocal { host }, _) => Value::Named(state, host.clone()),
            (_, Some(p)) => Value::Pid(state, p),
            (_, None) => Value::Word(state),
        };
        (out.record.owner, out.record.owner_pid) = (state.into(), pid);
        out.items.push(Item {
            key: "owner",
            value,
            word: "owner",
            human: Human::Same,
            aside: match e.owner {
                Owner::Reused { after_s, proof, .. } => Some(format!(
                    "started {} after the row{}",
                    human(after_s),
                    match proof {
                        Some(WorkerProof::BeatSinceStart) => {
                            "; the row's heartbeat file was touched since"
                        }
                        Some(WorkerProof::OwnLock) => "; the row's own lock is held by its child",
                        // Found by the decision itself, never by a source.
                        Some(WorkerProof::OwnHeartbeat) | None => "",
                    }
                )),
                _ => None,
            },
        });
    }

    /// The owner, where the decision's words do not name it already.
    fn words(&self, e: &Evidence, d: &Decision, out: &mut Vec<String>) {
        let named = matches!(
            d.basis,
            Basis::OwnerDead
                | Basis::OwnerReused
                | Basis::Contradicted(Signal::OwnerDead | Signal::OwnerReused)
                | Basis::ContradictionPersists(Signal::OwnerDead | Signal::OwnerReused)
                | Basis::StaleButOwnerAlive
                | Basis::OtherHost(_)
                | Basis::OtherHostPastMaxAge(_)
                | Basis::OtherHostSilent(_)
        );
        if !named {
            out.extend(words(&e.owner));
        }
    }

    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[
            (Verdict::Dead, Basis::OwnerDead),
            (Verdict::Dead, Basis::OwnerReused),
            (Verdict::Hung, Basis::StaleButOwnerAlive),
        ]
    }

    fn widest(&self, w: &Watch, basis: &Basis, t: Thresholds, e: &mut Evidence) {
        let pid = WIDEST_PID;
        e.owner = match (w.has_owner().then_some(()), basis) {
            (None, _) => Owner::NotConfigured,
            (Some(()), Basis::OwnerDead) => Owner::Dead { pid },
            (Some(()), Basis::StaleButOwnerAlive | Basis::MaxAgeWorkerLives) => {
                Owner::Alive { pid }
            }
            // A death on silence never stands beside a pid that looks reused (that is a
            // death of its own, or the worker): at its widest, a pid not visible.
            (Some(()), Basis::HeartbeatStale | Basis::HeartbeatMissing) => {
                Owner::NotVisible { pid }
            }
            (Some(()), _) => Owner::Reused {
                pid,
                after_s: widest_secs(t),
                proof: None,
            },
        };
    }
}

/// The owner in the row message's words, when the watch names an owner column.
pub fn words(o: &Owner) -> Option<String> {
    Some(match o {
        Owner::NotConfigured => return None,
        Owner::Empty => "no owner".into(),
        Owner::Alive { pid } => format!("owner pid {pid} alive"),
        Owner::Dead { pid } => format!("owner pid {pid} gone"),
        Owner::Reused { pid, after_s, .. } => {
            format!(
                "owner pid {pid} started {} after the row",
                message::duration(*after_s)
            )
        }
        Owner::NotLocal { host } => format!("owner on {host}"),
        Owner::NotVisible { pid } => format!("owner pid {pid} not visible here"),
        Owner::Invalid(_) => "owner invalid".into(),
        Owner::Unreadable(_) => "owner unreadable".into(),
    })
}

/// The other host the row's owner column names, if it names one (cheap: no probe, no
/// I/O): the row is that host's, and none of this host's files are its evidence.
fn other_host<'r>(w: &Watch, row: &'r RunningRow, host: &Host) -> Option<&'r str> {
    w.has_owner().then_some(())?;
    match row.owner.as_deref().and_then(parse_owner) {
        Some((Some(h), _)) if !host.is_me(h) => Some(h),
        _ => None,
    }
}

/// True when the row's owner column names another host: the row is that host's, and none
/// of this host's files (cheap: no probe, no I/O).
pub fn is_remote(w: &Watch, row: &RunningRow, host: &Host) -> bool {
    other_host(w, row, host).is_some()
}

/// The inode number of the initial pid namespace: a constant of the kernel
/// (`PROC_PID_INIT_INO`), the same on every host.
pub const INITIAL_PID_NS: &str = "pid:[4026531836]";

/// Where selfheal's pids live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidNamespace {
    /// The host's initial pid namespace: pids are the host's.
    Initial,
    /// Another one (`pid:[N]`, as `/proc/self/ns/pid` reads): pids of the host are not
    /// visible from here.
    Other(String),
    /// A kernel without `/proc/self/ns/pid` (before 3.8): taken as the initial one, there
    /// being no pid namespaces to speak of.
    Unknown(String),
}

impl PidNamespace {
    /// This process's pid namespace (read once; it never changes).
    pub fn current() -> &'static PidNamespace {
        static NS: std::sync::OnceLock<PidNamespace> = std::sync::OnceLock::new();
        NS.get_or_init(|| PidNamespace::of(std::fs::read_link("/proc/self/ns/pid")))
    }

    /// Judges what `/proc/self/ns/pid` reads as.
    pub fn of(link: std::io::Result<std::path::PathBuf>) -> PidNamespace {
        match link {
            Ok(p) if p.as_os_str() == INITIAL_PID_NS => PidNamespace::Initial,
            Ok(p) => PidNamespace::Other(p.display().to_string()),
            Err(e) => PidNamespace::Unknown(e.to_string()),
        }
    }

    /// True when a pid read here is a pid of the host.
    pub fn sees_host_pids(&self) -> bool {
        !matches!(self, PidNamespace::Other(_))
    }
}

/// A process that started more than this many seconds after something it wrote, by the
/// host clock alone (a lock file's mtime, a holder line's start), cannot have written it:
/// one-second resolution, and a little margin.
pub const SAME_CLOCK_SLACK_S: u64 = 2;

/// Splits an owner value into its host (if any) and pid.
pub fn parse_owner(v: &str) -> Option<(Option<&str>, u32)> {
    let v = v.trim();
    let (host, pid) = match v.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => (Some(h), p),
        Some(_) => return None,
        None => (None, v),
    };
    let pid: u32 = pid.trim().parse().ok()?;
    if pid == 0 || pid > i32::MAX as u32 {
        return None;
    }
    Some((host, pid))
}

/// Judges the owner column's value. `row_started` is the row's start in unix seconds on
/// the host's timeline (host now minus the row's age), so clock skew does not matter.
/// `slack_s`: how long after its row a process may have started and still be its worker —
/// `stale_after` for a row's owner (a dispatcher inserts the row and then starts the
/// worker; under load that exec takes seconds, and the row's time is the database's,
/// written in the application's session), [`SAME_CLOCK_SLACK_S`] where both times are the
/// host's.
pub fn probe_owner(host: &Host, value: Option<&str>, row_started: i64, slack_s: u64) -> Owner {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Owner::Empty;
    };
    let Some((h, pid)) = parse_owner(v) else {
        return Owner::Invalid(v.to_string());
    };
    if let Some(h) = h
        && !host.is_me(h)
    {
        return Owner::NotLocal {
            host: h.to_string(),
        };
    }
    judge_pid(host, pid, row_started as f64, slack_s)
}

/// A zombie whose threads are all gone. (When only the main thread of a threaded process
/// exits, it shows as a zombie while its other threads work on: that process lives.)
fn only_leader_left(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() <= 1)
}

/// Judges a pid on this host as the writer of some evidence that existed at `written`
/// (unix seconds, host timeline): `Alive`, `Dead` (no such process, or a zombie that only
/// waits for its parent to reap it), or `Reused` (the process started more than `slack_s`
/// after `written`, so it looks as if it cannot be the one that wrote it).
pub fn judge_pid(host: &Host, pid: u32, written: f64, slack_s: u64) -> Owner {
    judge_pid_in(PidNamespace::current(), host, pid, written, slack_s)
}

/// [`judge_pid`] for a process in pid namespace `ns`: outside the initial one, every pid is
/// [`Owner::NotVisible`].
pub fn judge_pid_in(ns: &PidNamespace, host: &Host, pid: u32, written: f64, slack_s: u64) -> Owner {
    if !ns.sees_host_pids() {
        return Owner::NotVisible { pid };
    }
    // Pids end at i32::MAX (pid_max is at most 2^22): a larger value names no process.
    let Ok(raw) = i32::try_from(pid) else {
        return Owner::Invalid(pid.to_string());
    };
    match kill(Pid::from_raw(raw), None) {
        Ok(()) | Err(Errno::EPERM) => match host.process_stat(pid) {
            Some(('Z' | 'X', _)) if only_leader_left(pid) => Owner::Dead { pid },
            Some((_, Some(start))) if start > written + slack_s as f64 => Owner::Reused {
                pid,
                after_s: crate::clock::whole_seconds(start - written)
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(u64::MAX),
                proof: None,
            },
            _ => Owner::Alive { pid },
        },
        Err(Errno::ESRCH) => Owner::Dead { pid },
        Err(e) => Owner::Unreadable(format!("kill({pid}, 0): {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::whole_seconds;

    #[test]
    fn owner_values() {
        assert_eq!(parse_owner("web1:1234"), Some((Some("web1"), 1234)));
        assert_eq!(parse_owner(" 77 "), Some((None, 77)));
        assert_eq!(
            parse_owner("web1.example.com:1"),
            Some((Some("web1.example.com"), 1))
        );
        for bad in [
            "",
            "web1",
            ":12",
            "web1:",
            "web1:0",
            "web1:-5",
            "1:2:x",
            "99999999999",
        ] {
            assert_eq!(parse_owner(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pids_outside_the_initial_namespace_are_not_visible() {
        use std::path::PathBuf;
        assert_eq!(
            PidNamespace::of(Ok(PathBuf::from("pid:[4026531836]"))),
            PidNamespace::Initial
        );
        let other = PidNamespace::of(Ok(PathBuf::from("pid:[4026532178]")));
        assert_eq!(other, PidNamespace::Other("pid:[4026532178]".into()));
        assert!(!other.sees_host_pids());
        let old = PidNamespace::of(Err(std::io::ErrorKind::NotFound.into()));
        assert!(old.sees_host_pids());
        let host = Host::current();
        let now = chrono::Utc::now().timestamp() as f64;
        // An exited pid is not "dead" from another namespace: it says nothing there.
        let gone = {
            let mut c = std::process::Command::new("true").spawn().expect("spawn");
            let pid = c.id();
            c.wait().expect("wait");
            pid
        };
        assert_eq!(
            judge_pid_in(&other, &host, gone, now, SAME_CLOCK_SLACK_S),
            Owner::NotVisible { pid: gone }
        );
        assert_eq!(
            judge_pid_in(&PidNamespace::Initial, &host, gone, now, SAME_CLOCK_SLACK_S),
            Owner::Dead { pid: gone }
        );
    }

    #[test]
    fn judges_real_processes() {
        let host = Host::current();
        let now = chrono::Utc::now().timestamp();
        let me = std::process::id();
        // This test process started before "now": alive.
        assert_eq!(
            probe_owner(&host, Some(&me.to_string()), now, 300),
            Owner::Alive { pid: me }
        );
        let local = format!("{}:{me}", host.name);
        assert_eq!(
            probe_owner(&host, Some(&local), now, 300),
            Owner::Alive { pid: me }
        );
        // A row that started an hour before this process: the pid looks reused (started
        // 3,600 s after the row, beyond the 300 s a dispatcher may take to start it).
        let started = whole_seconds(host.process_start(me).expect("start")).expect("a time");
        let early = started - 3_600;
        assert!(matches!(
            probe_owner(&host, Some(&me.to_string()), early, 300),
            Owner::Reused { pid, after_s: 3_599..=3_601, proof: None } if pid == me
        ));
        // Started within the slack after its row: a dispatched worker, the row's own.
        assert_eq!(
            probe_owner(&host, Some(&me.to_string()), started - 250, 300),
            Owner::Alive { pid: me }
        );
        assert!(matches!(
            probe_owner(&host, Some(&me.to_string()), started - 250, 2),
            Owner::Reused { .. }
        ));
        // A finished child's pid is dead.
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        assert_eq!(
            probe_owner(&host, Some(&pid.to_string()), now, 300),
            Owner::Dead { pid }
        );
        // A killed child its parent has not reaped yet is a zombie: dead, though
        // kill(pid, 0) still succeeds.
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("spawn");
        let pid = child.id();
        assert_eq!(
            probe_owner(&host, Some(&pid.to_string()), now, 300),
            Owner::Alive { pid }
        );
        child.kill().expect("kill");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while host.process_stat(pid).map(|(s, _)| s) != Some('Z') {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            kill(Pid::from_raw(i32::try_from(pid).expect("a pid")), None).is_ok(),
            "zombie exists"
        );
        assert_eq!(
            probe_owner(&host, Some(&pid.to_string()), now, 300),
            Owner::Dead { pid }
        );
        child.wait().expect("wait");
        assert_eq!(
            probe_owner(&host, Some("elsewhere.invalid:1"), now, 300),
            Owner::NotLocal {
                host: "elsewhere.invalid".into()
            }
        );
        // Same short name, another domain: another machine, whose pids are not ours.
        let gone = format!("{}.dc2.example.com:{pid}", host.name);
        assert_eq!(
            probe_owner(&host, Some(&gone), now, 300),
            Owner::NotLocal {
                host: format!("{}.dc2.example.com", host.name)
            }
        );
        assert_eq!(probe_owner(&host, None, now, 300), Owner::Empty);
        assert_eq!(probe_owner(&host, Some("  "), now, 300), Owner::Empty);
        assert_eq!(
            probe_owner(&host, Some("web-3"), now, 300),
            Owner::Invalid("web-3".into())
        );
    }
}
