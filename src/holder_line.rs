//! The holder line: `HOST:PID START`, written into a lock file by whoever holds it —
//! `selfheal run` (the command's pid, [`crate::run`]) and the PHP helper (`Selfheal\Job`, the
//! PHP process's pid) write the same line — and read back ([`crate::probe::lock::read_line_at`])
//! by a run that was refused, by `check` (which lock is a row's own: docs/design.md#verdicts), by `doctor`,
//! and by anyone who looks at the file. The format lives here, apart from both its writer
//! and its readers, so that neither imports the other.
//!
//! Here too: who holds a named database lock ([`NamedHolder`]), as the store reads it and
//! the decision core weighs it, for the same reason.
//!
//! Format: one line, `HOST:PID START\n`. `HOST` is `gethostname()` whole, `PID` the
//! process that runs the job, `START` the moment it got the lock and started, in RFC 3339
//! UTC with whole seconds (`2026-03-14T15:09:26Z`; PHP: `gmdate('Y-m-d\TH:i:s\Z')`). The
//! `HOST:PID` part is the same value the PHP helper gives for a row's owner column.
//!
//! Pure, but for [`read_content`], which reads the first bytes of an open file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::escape::printable_cut;

/// At most this much of a lock file is read: a holder line is short.
pub const MAX_READ: usize = 512;

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

/// Whether a lock file may take a holder line: it is empty, or it holds one already — its
/// first line is a holder line and the file is no longer than [`MAX_READ`] (a writer killed
/// between writing a shorter line over a longer one and cutting the file leaves the end of
/// the longer line after it). `head` is the file's first bytes ([`read_content`]), `len`
/// its size. Anything else is somebody's content — a script locked with the `flock FILE
/// cmd` idiom, a database — and is locked as it is, never written (docs/design.md#run-wrapper).
pub fn takes_a_line(head: &str, len: u64) -> bool {
    len == 0 || (len <= MAX_READ as u64 && parse_line(head).is_some())
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

/// Who holds a named database lock (`db_lock`), as the server says: the server's connection id, and where the account may see
/// the process list, its user, host and seconds in its current state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NamedHolder {
    pub connection: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_s: Option<u64>,
}

impl NamedHolder {
    /// In words: `connection 42 (app@localhost, 3m in its state)`.
    pub fn describe(&self) -> String {
        let mut s = format!("connection {}", self.connection);
        let who = match (&self.user, &self.host) {
            (Some(u), Some(h)) => Some(format!("{u}@{h}")),
            (Some(u), None) => Some(u.clone()),
            (None, Some(h)) => Some(h.clone()),
            (None, None) => None,
        };
        let time = self
            .time_s
            .map(|t| format!("{} in its state", crate::clock::human(t)));
        let aside: Vec<String> = who.into_iter().chain(time).collect();
        if !aside.is_empty() {
            s = format!("{s} ({})", aside.join(", "));
        }
        s
    }
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

    #[test]
    fn only_an_empty_file_or_one_holding_a_line_takes_a_line() {
        let line = "web1:7 2035-03-14T15:09:26Z\n";
        assert!(takes_a_line("", 0));
        assert!(takes_a_line(line, line.len() as u64));
        // A killed writer's leftover after its shorter line.
        assert!(takes_a_line("web1:7 2035-03-14T15:09:26Z\n6Z\n", 31));
        for (head, len) in [
            ("#!/bin/sh\necho hi\n", 19),
            ("SQLite format 3\0", 4096),
            ("4242\n", 5),
            ("\n", 1),
            // A holder line at the top of a long file is still that file's content.
            (line, 4096),
        ] {
            assert!(!takes_a_line(head, len), "{head:?} {len}");
        }
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
