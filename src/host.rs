//! This host, as selfheal needs to know it: its name (to tell its own watches and workers
//! from another host's), its boot time and clock tick (to place a pid's start on the
//! clock), and what `/proc` says about one pid.
//!
//! I/O: [`Host::current`] reads `/proc/stat` and the host name once per run;
//! [`Host::process_stat`] reads `/proc/PID/stat`. Nothing is written.

/// Facts about this host needed to judge pids, read once per run.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    /// Boot time, unix seconds (`btime` in /proc/stat).
    boot_time: Option<i64>,
    /// Clock ticks per second (for /proc/PID/stat start times).
    ticks: std::ffi::c_long,
}

impl Host {
    pub fn current() -> Host {
        let name = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse().ok())
        });
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100);
        Host {
            name,
            boot_time,
            ticks: ticks.max(1),
        }
    }

    /// True when `other` names this host (full or short name, case-insensitive).
    pub fn is_me(&self, other: &str) -> bool {
        let short = |s: &str| s.split('.').next().unwrap_or(s).to_ascii_lowercase();
        other.eq_ignore_ascii_case(&self.name) || short(other) == short(&self.name)
    }

    /// State letter and start time (unix seconds) of a process, from `/proc/PID/stat`.
    pub fn process_stat(&self, pid: u32) -> Option<(char, Option<f64>)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may contain spaces and parentheses: fields resume after the
        // last ')'. The state is field 3, starttime field 22.
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
        let state = rest.next()?.chars().next()?;
        let start = rest
            .nth(18)
            .and_then(|t| t.parse::<u64>().ok())
            .and_then(|ticks| Some(self.boot_time? as f64 + ticks as f64 / self.ticks as f64));
        Some((state, start))
    }

    /// Start time of a process in unix seconds, if /proc tells.
    #[cfg(test)]
    pub(crate) fn process_start(&self, pid: u32) -> Option<f64> {
        self.process_stat(pid).and_then(|(_, start)| start)
    }
}

/// A pid as the kernel's signed `pid_t`: `None` above `i32::MAX`, which names no process
/// (pid_max is at most 2^22), so that a wrapped value can never signal another process.
pub fn pid_t(pid: u32) -> Option<nix::unistd::Pid> {
    i32::try_from(pid).ok().map(nix::unistd::Pid::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_processes() {
        let host = Host::current();
        assert!(host.is_me(&host.name));
        assert!(host.is_me(&host.name.to_ascii_uppercase()));
        assert!(!host.is_me("elsewhere.invalid"));
        let (state, start) = host.process_stat(std::process::id()).expect("own stat");
        assert!(state == 'R' || state == 'S', "{state}");
        assert!(start.is_some_and(|s| s > 0.0));
    }
}
