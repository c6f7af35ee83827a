//! This host, as selfheal needs to know it: its names (to tell its own watches and workers
//! from another host's), its boot time and clock tick (to place a pid's start on the
//! clock), and what `/proc` says about one pid.
//!
//! Identity (docs/design.md#host-identity): a name is this host's only when it equals, whole and ignoring ASCII
//! case, the name `gethostname` returns or one of `[run] host_names` (with `{hostname}`
//! filled in). Nothing is guessed: `vm` is not `vm.dc2.example.com`, and a short name never
//! matches a qualified one, since another domain may have a host of the same short name.
//! Owners in the job table and a watch's `host` pin are both judged by [`Host::is_me`].
//!
//! I/O: [`Host::current`] reads `/proc/stat` and the host name once per run;
//! [`Host::process_stat`] reads `/proc/PID/stat`, [`Host::has_open`] `/proc/PID/fd`.
//! Nothing is written.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Facts about this host needed to judge pids, read once per run.
#[derive(Debug, Clone)]
pub struct Host {
    /// What `gethostname` returns.
    pub name: String,
    /// Every name this host goes by, in lowercase: `name` and `[run] host_names`.
    names: Vec<String>,
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
            names: vec![name.to_ascii_lowercase()],
            name,
            boot_time,
            ticks: ticks.max(1),
        }
    }

    /// This host, also known by `aliases` (`[run] host_names`; `{hostname}` stands for
    /// this host's own name).
    pub fn known_as(mut self, aliases: &[String]) -> Host {
        for a in aliases {
            let n = expand_host_name(a, &self.name).to_ascii_lowercase();
            if !n.is_empty() && !self.names.contains(&n) {
                self.names.push(n);
            }
        }
        self
    }

    /// True when `other` names this host: equal, whole and ignoring ASCII case, to its
    /// own name or one of its configured names. Never by a part of a name.
    pub fn is_me(&self, other: &str) -> bool {
        !other.is_empty() && self.names.iter().any(|n| n.eq_ignore_ascii_case(other))
    }

    /// This host's own name in lowercase: how it names itself to other runs (the
    /// advisory lock of a watch whose rows are owned).
    pub fn own_name(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }

    /// Every name this host goes by (lowercase), its own first.
    pub fn names(&self) -> &[String] {
        &self.names
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

    /// True when process `pid` descends from `ancestor` (its parent, or its parent's, …),
    /// by the parent pids `/proc` gives now (a chain of at most 64).
    pub fn is_descendant(&self, pid: u32, ancestor: u32) -> bool {
        let mut p = pid;
        for _ in 0..64 {
            let Some(parent) = parent_pid(p) else {
                return false;
            };
            if parent == ancestor {
                return true;
            }
            if parent <= 1 {
                return false;
            }
            p = parent;
        }
        false
    }

    /// True when process `pid` has the file at `path` open: a descriptor in
    /// `/proc/PID/fd` whose link names `path` (as given or with its links resolved) and
    /// whose target has `path`'s device and inode now. The links are read first and only
    /// a match is `stat`ed, so a descriptor on a hung network mount is never touched;
    /// nothing is opened. False when the descriptors cannot be read: another user's
    /// process, for a selfheal that runs neither as root nor as that user. At most 65,536
    /// descriptors are looked at.
    pub fn has_open(&self, pid: u32, path: &Path) -> bool {
        let Ok(file) = std::fs::metadata(path) else {
            return false;
        };
        let resolved = std::fs::canonicalize(path).ok();
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.take(65_536).flatten().any(|fd| {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                return false;
            };
            (link == path || resolved.as_ref() == Some(&link))
                && std::fs::metadata(fd.path())
                    .is_ok_and(|m| m.dev() == file.dev() && m.ino() == file.ino())
        })
    }

    /// Start time of a process in unix seconds, if /proc tells.
    pub fn process_start(&self, pid: u32) -> Option<f64> {
        self.process_stat(pid).and_then(|(_, start)| start)
    }
}

/// The parent pid of a process, from `/proc/PID/stat` (field 4, after the command name).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A pid as the kernel's signed `pid_t`: `None` above `i32::MAX`, which names no process
/// (pid_max is at most 2^22), so that a wrapped value can never signal another process.
pub fn pid_t(pid: u32) -> Option<nix::unistd::Pid> {
    i32::try_from(pid).ok().map(nix::unistd::Pid::from_raw)
}

/// A `[run] host_names` entry with `{hostname}` replaced by `hostname`.
pub fn expand_host_name(template: &str, hostname: &str) -> String {
    template.replace(HOSTNAME_PLACEHOLDER, hostname)
}

/// The placeholder `[run] host_names` entries may hold.
pub const HOSTNAME_PLACEHOLDER: &str = "{hostname}";

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell's child and grandchild descend from it (and from this process); the shell
    /// does not descend from its child, nor an unrelated process from the shell.
    #[test]
    fn descendants_by_the_parent_pids_proc_gives() {
        let mut sh = std::process::Command::new("sh")
            .arg("-c")
            .arg("sh -c 'sleep 600' & wait")
            .spawn()
            .expect("sh");
        let host = Host::current();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let grandchild = loop {
            let sleep = std::fs::read_dir("/proc")
                .expect("/proc")
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| c.starts_with("sleep\x00600"))
                        && host.is_descendant(*p, sh.id())
                });
            if let Some(p) = sleep {
                break p;
            }
            assert!(std::time::Instant::now() < deadline, "no sleep under sh");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(host.is_descendant(grandchild, std::process::id()));
        assert!(!host.is_descendant(sh.id(), grandchild));
        let mut other = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("sleep");
        assert!(!host.is_descendant(other.id(), sh.id()));
        let _ = other.kill();
        let _ = other.wait();
        let _ = std::process::Command::new("kill")
            .arg(grandchild.to_string())
            .status();
        let _ = sh.kill();
        let _ = sh.wait();
    }

    fn named(name: &str, aliases: &[&str]) -> Host {
        Host {
            name: name.into(),
            names: vec![name.to_ascii_lowercase()],
            boot_time: None,
            ticks: 100,
        }
        .known_as(&aliases.iter().map(ToString::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn a_host_is_known_by_whole_names_only() {
        let vm = named("vm", &[]);
        assert!(vm.is_me("vm") && vm.is_me("VM"));
        // The short name of another domain's host is not this host, nor the other way round.
        for other in ["vm.dc2.example.com", "vm.", "v", "vm2", "", "web1"] {
            assert!(!vm.is_me(other), "{other}");
        }
        let fq = named("web1.dc1.example.com", &[]);
        assert!(fq.is_me("WEB1.dc1.example.com"));
        assert!(!fq.is_me("web1"), "no short-name guess");
        assert!(!fq.is_me("web1.dc2.example.com"));
        // Configured names, with {hostname} standing for this host's own.
        let web2 = named(
            "web2",
            &["{hostname}.dc1.example.com", "10.0.0.2", "App-Web2"],
        );
        for me in [
            "web2",
            "web2.dc1.example.com",
            "WEB2.DC1.example.com",
            "10.0.0.2",
            "app-web2",
        ] {
            assert!(web2.is_me(me), "{me}");
        }
        for other in [
            "web2.dc2.example.com",
            "web1.dc1.example.com",
            "dc1.example.com",
            "10.0.0.20",
        ] {
            assert!(!web2.is_me(other), "{other}");
        }
        assert_eq!(
            web2.names(),
            ["web2", "web2.dc1.example.com", "10.0.0.2", "app-web2"]
        );
    }

    #[test]
    fn names_and_processes() {
        let host = Host::current();
        assert!(host.is_me(&host.name));
        assert!(host.is_me(&host.name.to_ascii_uppercase()));
        assert!(!host.is_me("elsewhere.invalid"));
        assert!(!host.is_me(&format!("{}.elsewhere.invalid", host.name)));
        let (state, start) = host.process_stat(std::process::id()).expect("own stat");
        assert!(state == 'R' || state == 'S', "{state}");
        assert!(start.is_some_and(|s| s > 0.0));
    }
}
