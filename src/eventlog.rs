//! `check --log syslog|journald`: one line per change, per row that needs a person, per
//! warning and per fatal error, for hosts that collect logs.
//!
//! `syslog` sends an RFC 3164 datagram to `/dev/log` (facility daemon), as glibc's
//! `syslog(3)` does — rsyslog, syslog-ng and journald all read that socket. `journald`
//! sends the journal's native datagram to `/run/systemd/journal/socket`, with the row's
//! facts as fields (`SELFHEAL_WATCH`, `SELFHEAL_ID`, `SELFHEAL_FROM`, `SELFHEAL_TO`,
//! `SELFHEAL_ACTION`, `SELFHEAL_VERDICT`, `SELFHEAL_REASON`). Every line carries the
//! watch, the id, from→to and the reason.
//!
//! The message (syslog's line, journald's `MESSAGE`) has its control characters escaped
//! ([`crate::escape`]): a row id holding a newline cannot forge a log line. journald's
//! `SELFHEAL_*` fields keep the values exactly (a value holding a newline is sent in the
//! protocol's length-prefixed form).
//!
//! Logging never stops a run. The socket is connected when the log is opened, so a target
//! that is not there (a minimal host or container without `/dev/log`) is known before
//! the first line; that, or the first failure to send, is kept ([`EventLog::status`]) for
//! whoever owns the log: `check` says it once (then per `remind_every`, even with
//! `--quiet`), and keeps it in `last-run.json`, the metrics and for `doctor`.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use crate::escape::printable;
use crate::report::RowReport;

pub const SYSLOG_SOCKET: &str = "/dev/log";
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";
const IDENT: &str = "selfheal";
/// LOG_DAEMON.
const FACILITY: u8 = 3;

/// Where `--log` sends events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    /// The local syslog socket, `/dev/log` (journald reads it too).
    Syslog,
    /// The systemd journal's native socket, with structured fields.
    Journald,
}

/// Syslog severities used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Err = 3,
    Warning = 4,
    Notice = 5,
}

/// One event: a message and structured fields (journald keeps them; syslog gets the
/// message, which repeats what matters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub severity: Severity,
    pub message: String,
    pub fields: Vec<(&'static str, String)>,
}

/// The event for a reported row: a change (notice), a row that needs a person (warning),
/// or nothing.
pub fn row_event(r: &RowReport, running_value: &str) -> Option<Event> {
    let to = r.target.clone().unwrap_or_default();
    let mut fields = vec![
        ("SELFHEAL_WATCH", r.watch.clone()),
        ("SELFHEAL_ID", r.id.to_string()),
        ("SELFHEAL_VERDICT", r.decision.verdict.as_str().to_string()),
        ("SELFHEAL_ACTION", r.action.as_str().to_string()),
        ("SELFHEAL_REASON", r.reason.clone()),
    ];
    if r.applied {
        fields.push(("SELFHEAL_FROM", running_value.to_string()));
        fields.push(("SELFHEAL_TO", to.clone()));
        Some(Event {
            severity: if r.attention() {
                Severity::Warning
            } else {
                Severity::Notice
            },
            message: format!(
                "watch={} id={} {running_value}→{to} action={} verdict={} reason=\"{}\"",
                r.watch,
                r.id,
                r.action.as_str(),
                r.decision.verdict.as_str(),
                r.reason
            ),
            fields,
        })
    } else if r.attention() {
        let why = match (&r.note, r.plan.hold) {
            (Some(n), _) => n.clone(),
            (None, Some(h)) => h.describe().to_string(),
            (None, None) => r.decision.basis.describe(),
        };
        Some(Event {
            severity: Severity::Warning,
            message: format!(
                "watch={} id={} {running_value}→{running_value} needs a person: {why} \
                 verdict={} reason=\"{}\"",
                r.watch,
                r.id,
                r.decision.verdict.as_str(),
                r.reason
            ),
            fields,
        })
    } else {
        None
    }
}

/// RFC 3164 as glibc writes it: `<PRI>Mmm dd hh:mm:ss ident[pid]: message`.
pub fn syslog_datagram(e: &Event, now: chrono::DateTime<chrono::Local>, pid: u32) -> Vec<u8> {
    let pri = FACILITY * 8 + e.severity as u8;
    format!(
        "<{pri}>{} {IDENT}[{pid}]: {}",
        now.format("%b %e %H:%M:%S"),
        printable(&e.message)
    )
    .into_bytes()
}

/// The journal's native protocol: `KEY=value\n`, or for a value holding a newline
/// `KEY\n` + 64-bit little-endian length + value + `\n`.
pub fn journal_datagram(e: &Event, pid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |k: &str, v: &str| {
        if v.contains('\n') {
            out.extend_from_slice(k.as_bytes());
            out.push(b'\n');
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            out.extend_from_slice(v.as_bytes());
            out.push(b'\n');
        } else {
            out.extend_from_slice(format!("{k}={v}\n").as_bytes());
        }
    };
    field("MESSAGE", &printable(&e.message));
    field("PRIORITY", &(e.severity as u8).to_string());
    field("SYSLOG_IDENTIFIER", IDENT);
    field("SYSLOG_FACILITY", &FACILITY.to_string());
    field("SYSLOG_PID", &pid.to_string());
    for (k, v) in &e.fields {
        field(k, v);
    }
    out
}

impl LogTarget {
    /// `syslog`, `journald`: as `--log` names it.
    pub fn name(self) -> &'static str {
        match self {
            LogTarget::Syslog => "syslog",
            LogTarget::Journald => "journald",
        }
    }

    /// The socket it sends to.
    pub fn socket(self) -> &'static str {
        match self {
            LogTarget::Syslog => SYSLOG_SOCKET,
            LogTarget::Journald => JOURNAL_SOCKET,
        }
    }
}

/// An open log. Sending never fails a run; the first error is kept.
pub struct EventLog {
    target: LogTarget,
    /// Connected to the target's socket; `None` when it could not be.
    socket: Option<UnixDatagram>,
    path: PathBuf,
    error: Option<String>,
}

impl EventLog {
    /// Connects to the target's socket: one that is not there is known at once.
    pub fn open(target: LogTarget) -> EventLog {
        let path = PathBuf::from(target.socket());
        let (socket, error) = match UnixDatagram::unbound().and_then(|s| {
            s.connect(&path)?;
            Ok(s)
        }) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(format!("{}: {e}", path.display()))),
        };
        EventLog {
            target,
            socket,
            path,
            error,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn send(&mut self, e: &Event) {
        let pid = std::process::id();
        let bytes = match self.target {
            LogTarget::Syslog => syslog_datagram(e, chrono::Local::now(), pid),
            LogTarget::Journald => journal_datagram(e, pid),
        };
        if let Some(s) = &self.socket
            && let Err(err) = s.send(&bytes)
            && self.error.is_none()
        {
            self.error = Some(format!("{}: {err}", self.path.display()));
        }
    }

    /// The target and, when it could not be reached so far, why
    /// ("/dev/log: No such file or directory (os error 2)").
    pub fn status(&self) -> crate::report::LogStatus {
        crate::report::LogStatus {
            target: self.target.name(),
            error: self.error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            severity: Severity::Notice,
            message: "watch=w id=2 running→error".into(),
            fields: vec![
                ("SELFHEAL_WATCH", "w".into()),
                ("SELFHEAL_REASON", "a\nb".into()),
            ],
        }
    }

    #[test]
    fn syslog_lines_are_rfc3164() {
        use chrono::TimeZone;
        let t = chrono::Local
            .with_ymd_and_hms(2026, 3, 5, 9, 4, 7)
            .single()
            .expect("time");
        assert_eq!(
            String::from_utf8(syslog_datagram(&event(), t, 42)).expect("utf8"),
            "<29>Mar  5 09:04:07 selfheal[42]: watch=w id=2 running→error"
        );
    }

    #[test]
    fn a_value_cannot_forge_a_log_line() {
        let mut e = event();
        e.message = "watch=w id=7\n<29>Mar  5 09:04:07 selfheal[1]: forged\u{1b}[2J".into();
        let line = String::from_utf8(syslog_datagram(&e, chrono::Local::now(), 42)).expect("utf8");
        assert!(
            line.ends_with("]: watch=w id=7\\n<29>Mar  5 09:04:07 selfheal[1]: forged\\u{1b}[2J"),
            "{line}"
        );
        let d = String::from_utf8(journal_datagram(&e, 7)).expect("utf8");
        assert!(
            d.starts_with(
                "MESSAGE=watch=w id=7\\n<29>Mar  5 09:04:07 selfheal[1]: forged\\u{1b}[2J\n"
            ),
            "{d}"
        );
    }

    #[test]
    fn journal_fields_and_binary_values() {
        let d = journal_datagram(&event(), 7);
        let mut want = b"MESSAGE=watch=w id=2 running\xe2\x86\x92error\nPRIORITY=5\n\
SYSLOG_IDENTIFIER=selfheal\nSYSLOG_FACILITY=3\nSYSLOG_PID=7\nSELFHEAL_WATCH=w\nSELFHEAL_REASON\n"
            .to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"a\nb\n");
        assert_eq!(d, want);
    }
}
