//! The holder line: `HOST:PID START`, written into a lock file by whoever holds it —
//! `selfheal run` (the command's pid) and the PHP helper (`Selfheal\Job`, the PHP process's
//! pid) write the same line — and read back by a run that was refused, by `doctor`, and by
//! anyone who looks at the file.
//!
//! Format: one line, `HOST:PID START\n`. `HOST` is `gethostname()` whole, `PID` the
//! process that runs the job, `START` the moment it got the lock and started, in RFC 3339
//! UTC with whole seconds (`2026-03-14T15:09:26Z`; PHP: `gmdate('Y-m-d\TH:i:s\Z')`). The
//! `HOST:PID` part is the same value the PHP helper gives for a row's owner column.
//!
//! The line is written in place on the locked descriptor: `pwrite` at offset 0, then the
//! file cut to the line's length, so a reader that takes the first line sees the previous
//! holder's line or the new one (never a mix: the new line ends at its own newline). The
//! file is never replaced, which would give it a new inode and break the lock.
//!
//! Judging a holder (I/O: `kill(pid, 0)` and `/proc/PID/stat` through
//! [`crate::probe::owner`], `/proc/locks`, and — only when the named process is gone — a
//! scan of `/proc/*/fd` for processes that still have the file open): the line is only as
//! good as the process it names. A pid that is gone, or was reused by a process started
//! after the line, means someone else keeps the lock: typically a background process the
//! job left behind, which inherited the locked descriptor. That process is named when this
//! user can see it.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::clock::human;
use crate::decide::Owner;
use crate::escape::printable_cut;
use crate::fsafe::FileId;
use crate::host::Host;
use crate::probe::{LockTable, owner};

/// At most this much of a lock file is read: a holder line is short.
const MAX_READ: usize = 512;

/// A parsed `HOST:PID START` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderLine {
    pub host: String,
    pub pid: u32,
    /// Unix seconds.
    pub since: i64,
}

impl HolderLine {
    /// The `HOST:PID` part (an owner column's value).
    pub fn owner(&self) -> String {
        format!("{}:{}", self.host, self.pid)
    }

    /// `START` as written.
    pub fn since_text(&self) -> String {
        rfc3339(self.since)
    }

    /// `HOST:PID` made safe to print: the host comes from a file another user may write,
    /// so it is escaped and cut to [`MAX_HOST_SHOWN`] characters (`…` where cut; a host
    /// name is at most 64 bytes on Linux).
    pub fn named(&self) -> String {
        self.named_within(MAX_HOST_SHOWN)
    }

    /// [`HolderLine::named`] with the host cut to `max` characters.
    pub fn named_within(&self, max: usize) -> String {
        let mut host = printable_cut(&self.host, max);
        if self.host.chars().count() > max {
            host.push('…');
        }
        format!("{host}:{}", self.pid)
    }
}

/// At most this many characters of a holder line's host are printed ([`HolderLine::named`]).
pub const MAX_HOST_SHOWN: usize = 64;

/// An instant as the line writes it: RFC 3339, UTC, whole seconds.
pub fn rfc3339(unix: i64) -> String {
    DateTime::<Utc>::from_timestamp(unix, 0).map_or_else(
        || unix.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::Secs, true),
    )
}

/// Unix seconds of a `SystemTime` (negative before 1970).
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// The line for `host`, `pid`, started at `start`, newline included.
pub fn format_line(host: &str, pid: u32, start: SystemTime) -> String {
    format!("{host}:{pid} {}\n", rfc3339(unix_secs(start)))
}

/// Parses the first line of a lock file's content. `None` for anything that is not exactly
/// `HOST:PID START` (an empty file, a bare pid as legacy jobs write, garbage).
pub fn parse_line(text: &str) -> Option<HolderLine> {
    let line = text.lines().next()?.trim();
    let mut fields = line.split_whitespace();
    let (owner, start) = (fields.next()?, fields.next()?);
    if fields.next().is_some() {
        return None;
    }
    let (host, pid) = owner.rsplit_once(':')?;
    if host.is_empty() || host.contains(':') || host.chars().any(char::is_control) {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    if pid == 0 || pid > i32::MAX as u32 {
        return None;
    }
    let since = DateTime::parse_from_rfc3339(start).ok()?.timestamp();
    Some(HolderLine {
        host: host.to_string(),
        pid,
        since,
    })
}

/// The first bytes of an open lock file, as text (invalid UTF-8 replaced). Read with
/// `pread` from offset 0: the descriptor's own offset is neither used nor moved.
pub fn read_content(file: &File) -> String {
    let mut buf = vec![0u8; MAX_READ];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    buf.truncate(n);
    String::from_utf8_lossy(&buf).into_owned()
}

/// What became of the process a holder line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HolderState {
    /// It runs on this host (and started no later than the line says).
    Running,
    /// It is gone (or its pid now belongs to a newer process).
    Gone,
    /// It runs on another host: not judged here.
    OtherHost,
    /// No holder line, or its process cannot be judged.
    Unknown,
}

/// A process with the lock file open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenBy {
    pub pid: u32,
    pub name: String,
}

/// Who holds a lock, as far as this host can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// The file's first line, as found (`null` when empty).
    pub line: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// `START` of the line.
    pub since: Option<String>,
    pub state: HolderState,
    /// The pid `/proc/locks` gives for the lock (the process that took it, which for
    /// `selfheal run` is the wrapper).
    pub lock_pid: Option<u32>,
    /// Other processes that have the file open, looked for when the named process is gone
    /// or there is no line (a background process the job left behind, or a waiter).
    pub open_by: Vec<OpenBy>,
    #[serde(skip)]
    parsed: Option<HolderLine>,
}

impl Holder {
    /// Judges the holder of the lock on `file` (open on the lock file) from its content,
    /// the process table and `/proc/locks`.
    pub fn judge(file: &File, host: &Host) -> Holder {
        let content = read_content(file);
        let first = content
            .lines()
            .next()
            .map(str::trim)
            .filter(|l| !l.is_empty());
        let parsed = parse_line(&content);
        let id = FileId::of(file).ok();
        let state = match &parsed {
            None => HolderState::Unknown,
            Some(h) => match owner::probe_owner(host, Some(&h.owner()), h.since) {
                Owner::Alive { .. } => HolderState::Running,
                Owner::Dead { .. } | Owner::Reused { .. } => HolderState::Gone,
                Owner::NotLocal { .. } => HolderState::OtherHost,
                _ => HolderState::Unknown,
            },
        };
        let lock_pid =
            id.and_then(|id| LockTable::read().and_then(|t| t.holders(id.ino).flatten().next()));
        let open_by = match (state, id) {
            (HolderState::Gone | HolderState::Unknown, Some(id)) => open_by(id),
            _ => Vec::new(),
        };
        Holder {
            line: first.map(|l| printable_cut(l, 200)),
            host: parsed.as_ref().map(|h| h.host.clone()),
            pid: parsed.as_ref().map(|h| h.pid),
            since: parsed.as_ref().map(HolderLine::since_text),
            state,
            lock_pid,
            open_by,
            parsed,
        }
    }

    /// Who holds it, in words, e.g. `web1:4242 since 2026-03-14T15:09:26Z (3m ago)`;
    /// `now` for the age.
    pub fn describe(&self, now: SystemTime) -> String {
        let others = || {
            self.open_by
                .iter()
                .map(|p| format!("pid {} ({})", p.pid, p.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(h) = &self.parsed else {
            let named = match self.lock_pid {
                Some(p) if pid_exists(p) => format!("pid {p} ({})", comm(p)),
                _ if !self.open_by.is_empty() => format!("{}, which has it open,", others()),
                _ => {
                    return "an unknown process: the file names no holder (HOST:PID START), \
                             and none is visible to this user"
                        .into();
                }
            };
            return format!("{named} (the file names no holder: not a selfheal run lock?)");
        };
        let age = unix_secs(now).saturating_sub(h.since);
        let when = if age >= 0 {
            format!(
                "since {} ({} ago)",
                h.since_text(),
                human(age.unsigned_abs())
            )
        } else {
            format!("since {}", h.since_text())
        };
        let who = format!("{} {when}", h.named());
        match self.state {
            HolderState::Running => who,
            HolderState::OtherHost => format!("{who}, on another host"),
            HolderState::Unknown => format!("{who} (whether it still runs cannot be told)"),
            HolderState::Gone if !self.open_by.is_empty() => format!(
                "{who}, which is gone: the lock is kept by what it left behind: {} still \
                 has the file open",
                others()
            ),
            HolderState::Gone => format!(
                "{who}, which is gone: a process it left behind keeps the lock (not visible \
                 to this user)"
            ),
        }
    }
}

fn pid_exists(pid: u32) -> bool {
    use nix::errno::Errno;
    crate::host::pid_t(pid)
        .is_some_and(|p| matches!(nix::sys::signal::kill(p, None), Ok(()) | Err(Errno::EPERM)))
}

/// The command name of a process (`/proc/PID/comm`), or `?`.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".into(), |s| printable_cut(s.trim_end(), 32))
}

/// Processes (other than this one) with an open descriptor on the file `id`, from
/// `/proc/*/fd` — as many as this user can see (all of them as root).
pub fn open_by(id: FileId) -> Vec<OpenBy> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let has = fds.filter_map(Result::ok).any(|fd| {
            std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == id.dev && m.ino() == id.ino)
        });
        if has {
            out.push(OpenBy {
                pid,
                name: comm(pid),
            });
        }
    }
    out.sort_by_key(|o| o.pid);
    out
}

/// Opens the lock file at `path` to read it ([`crate::probe::lock::open_regular`]:
/// following links as reading evidence does, never blocking): `None` unless it is a
/// regular file. Nothing is created or written.
pub fn open_regular(path: &Path) -> Option<File> {
    crate::probe::lock::open_regular(path).ok()
}

/// Reads the holder line of the lock file at `path` ([`open_regular`]: following links,
/// never blocking, regular files only; at most the first 512 bytes): `None` when the file
/// cannot be read, names no holder, or its first line does not end within what is read.
pub fn read_line_at(path: &Path) -> Option<HolderLine> {
    let f = open_regular(path)?;
    let text = read_content(&f);
    if text.len() >= MAX_READ && !text.contains('\n') {
        return None;
    }
    parse_line(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2_057_497_766);
        let line = format_line("web1.example.com", 4242, t);
        assert_eq!(line, "web1.example.com:4242 2035-03-14T15:09:26Z\n");
        let h = parse_line(&line).expect("parses");
        assert_eq!(h.host, "web1.example.com");
        assert_eq!(h.pid, 4242);
        assert_eq!(h.since, 2_057_497_766);
        assert_eq!(h.owner(), "web1.example.com:4242");
        assert_eq!(h.since_text(), "2035-03-14T15:09:26Z");
        // What a reader may see while a shorter line replaces a longer one: the first line.
        assert_eq!(
            parse_line("web1:7 2035-03-14T15:09:26Z\n26Z\n"),
            Some(HolderLine {
                host: "web1".into(),
                pid: 7,
                since: 2_057_497_766
            })
        );
        // An offset is accepted (the instant counts).
        assert_eq!(
            parse_line("h:1 2035-03-14T23:09:26+08:00").map(|h| h.since),
            Some(2_057_497_766)
        );
    }

    #[test]
    fn anything_else_names_no_holder() {
        for bad in [
            "",
            "\n",
            "4242",
            "4242\n",
            "web1:4242",
            "web1:4242 yesterday",
            ":4242 2035-03-14T15:09:26Z",
            "web1:0 2035-03-14T15:09:26Z",
            "web1:-1 2035-03-14T15:09:26Z",
            "web1:99999999999 2035-03-14T15:09:26Z",
            "web1:12 2035-03-14T15:09:26Z extra",
            "a:b:12 2035-03-14T15:09:26Z",
            "we\u{1b}b:12 2035-03-14T15:09:26Z",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
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
        assert!(open_regular(&fifo).is_none());
        assert!(open_regular(Path::new("/dev/null")).is_none());
        assert!(open_regular(dir.path()).is_none());
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

    #[test]
    fn a_hosts_name_is_printed_escaped_and_cut() {
        let h = |host: &str| HolderLine {
            host: host.into(),
            pid: 7,
            since: 0,
        };
        assert_eq!(h("web1").named(), "web1:7");
        assert_eq!(
            h(&"w".repeat(65)).named(),
            format!("{}…:7", "w".repeat(MAX_HOST_SHOWN))
        );
        assert_eq!(h("a\u{7f}b").named(), "a\\u{7f}b:7");
        // parse_line refuses control characters in a host, not a bidirectional override.
        assert_eq!(
            parse_line("a\u{202e}b:7 2035-03-14T15:09:26Z").map(|l| l.named()),
            Some("a\\u{202e}b:7".into())
        );
    }
}
