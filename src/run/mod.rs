//! `selfheal run`: wraps a job so that it leaves the evidence `check` judges by, and so
//! that a run that did nothing says so (docs/design.md#run-wrapper).
//!
//! ```text
//! selfheal run [--lock FILE] [--wait DURATION] [--heartbeat FILE] [--every DURATION]
//!              [--report FILE] -- COMMAND [ARG]...
//! ```
//!
//! In order: the durations were checked by clap ([`parse_wait`], [`parse_every`]: at most
//! [`LONGEST`], so that no addition to an instant can overflow); the signals are blocked
//! and read from a descriptor ([`signals`]); the report's and the heartbeat's directories
//! are reached and the lock file opened, all by the safe walk of [`crate::fsafe`]
//! ([`lock`], [`child::HeartbeatFile`], [`record::ReportFile`]) — any of them unusable: exit 3,
//! nothing started; the lock is taken with a bounded wait ([`lock::acquire`]) — not
//! obtained: one line on stderr naming the holder ([`holder`]), the record says `skipped`,
//! exit 75, never 0; a lock file that takes a holder line is emptied (any other file is
//! locked as it is and never written); the heartbeat is created or touched
//! ([`child::HeartbeatFile::start`]) — it cannot be: exit 3, nothing started; the command is
//! started with the locked descriptor inherited, the holder line `HOST:PID START` written
//! into the lock file (when it takes one), the record written (`running`); the wrapper then
//! waits for the command ([`child::supervise`]), touching the heartbeat, and writes the
//! record again when it ends. Its exit status is the command's (128+N when signal N ended
//! it); on success the wrapper prints nothing of its own.
//!
//! Exit statuses of the wrapper itself: 2 bad command line (from clap — a `--wait` or
//! `--every` over [`LONGEST`] among them — or two options naming the same file); 3 a file
//! cannot be used safely (lock, heartbeat or report: a missing or unwritable directory, a
//! planted link, another owner; a heartbeat that cannot be created) — the command is not
//! started; 75 the lock was not obtained within `--wait`; 126 the command cannot be
//! executed, 127 it was not found (a path with a slash is run as given: not found means the
//! file, or its `#!` interpreter, does not exist); 128+N a signal ended the wait for the
//! lock. A command may exit with any of these itself: the record (`state`, `skipped`)
//! tells them apart.

pub mod child;
pub mod holder;
pub mod lock;
pub mod record;
pub mod signals;

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::error::exit;
use crate::fsafe;
use crate::host::Host;
use child::HeartbeatFile;
use holder::Holder;
use lock::{Acquired, LockFile};
use record::{Record, ReportFile, State};
use signals::Signals;

/// The command cannot be executed (permission, not a program).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// Default interval of `--every`.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// The longest `--wait` or `--every`: 100 years. Longer durations are refused on the
/// command line (exit 2), before anything starts — beyond some length the clock cannot add
/// them to now at all (`--every 18446744073709551615s`) — and every addition to an instant
/// in this module is bounded by it (`later`), so none can overflow.
pub const LONGEST: Duration = Duration::from_secs(100 * 31_557_600);

/// `t + d`, with `d` bounded by [`LONGEST`]: never an overflow, whatever `d` is.
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d.min(LONGEST)).unwrap_or(t)
}

/// What `selfheal run` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub lock: Option<PathBuf>,
    pub wait: Duration,
    pub heartbeat: Option<PathBuf>,
    pub every: Duration,
    pub report: Option<PathBuf>,
    pub command: Vec<OsString>,
}

/// Parses `--wait`: a humantime duration, zero included (one try), at most [`LONGEST`].
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    parse(s, Duration::ZERO, "0 (one try), 30s, 3m")
}

/// Parses `--every`: a humantime duration of at least one second (heartbeat files are
/// judged in whole seconds), at most [`LONGEST`].
pub fn parse_every(s: &str) -> Result<Duration, String> {
    parse(s, Duration::from_secs(1), "10s, 1m")
}

fn parse(s: &str, at_least: Duration, examples: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("a duration cannot be negative, got {s:?}"));
    }
    let d = if t == "0" {
        Duration::ZERO
    } else {
        humantime::parse_duration(t)
            .map_err(|e| format!("expected a duration such as {examples}, got {s:?} ({e})"))?
    };
    if d < at_least {
        return Err(format!(
            "expected at least {}, got {s:?}",
            humantime::format_duration(at_least)
        ));
    }
    if d > LONGEST {
        return Err(format!(
            "expected at most {}, got {s:?}",
            humantime::format_duration(LONGEST)
        ));
    }
    Ok(d)
}

/// An absolute path for a relative one (against the working directory); fsafe then
/// refuses what is not plain.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Prints one line of the wrapper's own on stderr.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "selfheal run: {text}");
}

/// The files of one run, prepared before anything starts.
struct Files {
    lock: Option<LockFile>,
    heartbeat: Option<HeartbeatFile>,
    report: Option<ReportFile>,
}

/// Why the files could not be prepared: the exit status and the sentence.
struct Refusal(u8, String);

fn fs_refusal(what: &str, e: &fsafe::Error) -> Refusal {
    Refusal(
        exit::FAILURE,
        format!("error: {what}: {e}; the command was not started"),
    )
}

fn prepare(o: &Options) -> (Option<ReportFile>, Result<Files, Refusal>) {
    let lock_path = o.lock.as_deref().map(absolute);
    let hb_path = o.heartbeat.as_deref().map(absolute);
    let report_path = o.report.as_deref().map(absolute);
    let report = match report_path.as_deref().map(ReportFile::prepare) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => return (None, Err(fs_refusal("--report", &e))),
    };
    let same = |a: &Option<PathBuf>, b: &Option<PathBuf>| a.is_some() && a == b;
    for (a, b, x, y) in [
        (&lock_path, &hb_path, "--lock", "--heartbeat"),
        (&lock_path, &report_path, "--lock", "--report"),
        (&hb_path, &report_path, "--heartbeat", "--report"),
    ] {
        if same(a, b) {
            // No record either: it would replace the other file.
            let msg = format!("error: {x} and {y} name the same file; give each its own");
            return (None, Err(Refusal(exit::USAGE, msg)));
        }
    }
    let heartbeat = match hb_path
        .as_deref()
        .map(|p| HeartbeatFile::prepare(p, o.every))
    {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => return (report, Err(fs_refusal("--heartbeat", &e))),
    };
    let lock = match lock_path.as_deref().map(lock::open) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => return (report, Err(fs_refusal("--lock", &e))),
    };
    // The same file under two names (a link, a trusted symlink on the way): replacing
    // the report or touching the heartbeat would be done to the lock file.
    if let Some(l) = &lock {
        let is_lock = |dir: &fsafe::Dir, name: &std::ffi::OsStr| {
            let found = dir.stat_at(name);
            matches!(found, Ok(Some(st)) if st.id == l.id)
        };
        let clash = match (&heartbeat, &report) {
            (Some(h), _) if is_lock(h.dir(), h.name()) => Some("--heartbeat"),
            (_, Some(r)) if is_lock(&r.dir, r.name()) => Some("--report"),
            _ => None,
        };
        if let Some(x) = clash {
            let msg = format!("error: --lock and {x} name the same file; give each its own");
            return (None, Err(Refusal(exit::USAGE, msg)));
        }
    }
    (
        None,
        Ok(Files {
            lock,
            heartbeat,
            report,
        }),
    )
}

/// Writes the record; a failure is said on stderr. Returns whether it was written.
fn write_record(report: Option<&ReportFile>, rec: &Record) -> bool {
    let Some(r) = report else {
        return true;
    };
    match r.write(rec) {
        Ok(()) => true,
        Err(e) => {
            say(&format!("error: the execution record was not written: {e}"));
            false
        }
    }
}

/// The command as a person reads it in a message.
fn command_text(cmd: &[OsString]) -> String {
    cmd.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `selfheal run`; returns the exit status.
pub fn main(o: &Options) -> u8 {
    let started = SystemTime::now();
    let host = Host::current();
    let mut rec = Record::new(
        &host.name,
        &o.command,
        o.lock.as_deref().map(absolute).as_deref(),
        o.heartbeat.as_deref().map(absolute).as_deref(),
        started,
    );
    let signals = match Signals::block() {
        Ok(s) => s,
        Err(e) => {
            say(&format!(
                "error: cannot set up signal handling: {e}; the command was not started"
            ));
            return exit::FAILURE;
        }
    };
    let mut files = match prepare(o) {
        (_, Ok(f)) => f,
        (report, Err(Refusal(code, msg))) => {
            say(&msg);
            rec.error = Some(msg.trim_start_matches("error: ").to_string());
            rec.ended(State::NotStarted, code);
            write_record(report.as_ref(), &rec);
            return code;
        }
    };

    // The lock.
    let mut line_goes_in = false;
    if let Some(l) = &files.lock {
        let waited = match lock::acquire(l, o.wait, &signals) {
            Ok(Acquired::Held(w)) => w,
            Ok(Acquired::Busy(w)) => {
                let holder = Holder::judge(&l.file, &host);
                let waited = if o.wait.is_zero() {
                    "one try (--wait 0)".to_string()
                } else {
                    format!("gave up after waiting {}", waited_text(w))
                };
                say(&format!(
                    "not started: {} is held by {}; {waited}",
                    l.path.display(),
                    holder.describe(SystemTime::now()),
                ));
                rec.lock_wait_ms = millis(w);
                rec.lock_holder = Some(holder);
                rec.ended(State::Skipped, exit::BUSY);
                write_record(files.report.as_ref(), &rec);
                return exit::BUSY;
            }
            Ok(Acquired::Interrupted(sig, w)) => {
                let code = 128 + sig as i32;
                let msg = format!(
                    "not started: {} while waiting for {}",
                    sig.as_str(),
                    l.path.display()
                );
                say(&msg);
                rec.lock_wait_ms = millis(w);
                rec.error = Some(msg);
                rec.ended(State::NotStarted, u8::try_from(code).unwrap_or(1));
                write_record(files.report.as_ref(), &rec);
                return u8::try_from(code).unwrap_or(1);
            }
            Err(e) => {
                let msg = format!(
                    "error: cannot lock {}: {e}; the command was not started",
                    l.path.display()
                );
                say(&msg);
                rec.error = Some(msg.trim_start_matches("error: ").to_string());
                rec.ended(State::NotStarted, exit::FAILURE);
                write_record(files.report.as_ref(), &rec);
                return exit::FAILURE;
            }
        };
        rec.lock_wait_ms = millis(waited);
        // Only a file that takes a holder line is emptied now, and written below; any
        // other file is locked as it is (docs/design.md#run-wrapper).
        match lock::clear_for_line(l) {
            Ok(ours) => line_goes_in = ours,
            Err(e) => say(&format!(
                "warning: {} was not emptied: {e}",
                l.path.display()
            )),
        }
    }

    // The heartbeat: created or touched now, before the command starts, so that a
    // heartbeat that cannot be kept stops the run as a lock that cannot be taken does.
    if let Some(h) = files.heartbeat.as_mut()
        && let Err(e) = h.start()
    {
        let Refusal(code, msg) = fs_refusal("--heartbeat", &e);
        say(&msg);
        rec.error = Some(msg.trim_start_matches("error: ").to_string());
        rec.ended(State::NotStarted, code);
        write_record(files.report.as_ref(), &rec);
        return code;
    }

    // The command.
    let command_start = SystemTime::now();
    let mut child = match child::spawn(&o.command, files.lock.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::NotFound => NOT_FOUND,
                _ => CANNOT_EXECUTE,
            };
            let msg = format!(
                "error: cannot run {}: {}",
                command_text(&o.command[..1]),
                io_sentence(
                    o.command
                        .first()
                        .map_or(std::ffi::OsStr::new(""), |c| c.as_os_str()),
                    &e
                )
            );
            say(&msg);
            rec.error = Some(msg.trim_start_matches("error: ").to_string());
            rec.ended(State::NotStarted, code);
            write_record(files.report.as_ref(), &rec);
            return code;
        }
    };
    let pid = child.id();
    rec.pid = Some(pid);
    rec.command_start = Some(holder::rfc3339(holder::unix_secs(command_start)));
    rec.state = State::Running;
    if let Some(l) = files.lock.as_ref().filter(|_| line_goes_in) {
        let line = holder::format_line(&host.name, pid, command_start);
        if let Err(e) = lock::write_holder(l, &line) {
            say(&format!(
                "warning: the holder line was not written into {}: {e}",
                l.path.display()
            ));
        }
    }
    write_record(files.report.as_ref(), &rec);

    let ended = match child::supervise(&mut child, &signals, files.heartbeat.as_mut()) {
        Ok(e) => e,
        Err(e) => {
            // The wrapper can no longer watch; the command keeps its lock and runs on.
            let msg = format!("error: lost track of the command (pid {pid}): {e}");
            say(&msg);
            rec.error = Some(msg.trim_start_matches("error: ").to_string());
            rec.ended(State::Failed, exit::FAILURE);
            write_record(files.report.as_ref(), &rec);
            return exit::FAILURE;
        }
    };
    let (code, signal) = child::exit_code(&ended.status);
    rec.signal = signal;
    rec.signal_name = signal.map(signals::name);
    rec.signals_forwarded = ended.forwarded;
    let state = match (code, signal) {
        (_, Some(_)) => State::Killed,
        (0, None) => State::Succeeded,
        _ => State::Failed,
    };
    rec.ended(state, code);
    if !write_record(files.report.as_ref(), &rec) && code == 0 {
        // The command succeeded, but what the record says (running) is not what happened:
        // no success without its record.
        return exit::FAILURE;
    }
    code
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `0s`, `3s`, `2m30s`, or `250ms` below a second.
fn waited_text(d: Duration) -> String {
    if d < Duration::from_secs(1) && !d.is_zero() {
        format!("{}ms", d.as_millis())
    } else {
        crate::clock::human(d.as_secs())
    }
}

/// Why `program` could not be started, as a sentence part (no "os error N"). A program
/// named with a slash is run as given, not looked up in PATH: not found means the file
/// does not exist — or, when it does, that the interpreter its `#!` line names (or a
/// library it needs) does not.
fn io_sentence(program: &std::ffi::OsStr, e: &std::io::Error) -> String {
    let has_slash = program.as_encoded_bytes().contains(&b'/');
    match e.kind() {
        ErrorKind::NotFound if has_slash && Path::new(program).metadata().is_ok() => {
            "it exists, but the interpreter its #! line names (or a library it needs) does \
             not"
            .into()
        }
        ErrorKind::NotFound if has_slash => {
            "it does not exist (a command with a slash is run as given, not looked up in \
             PATH)"
                .into()
        }
        ErrorKind::NotFound => "no such program (not found in PATH)".into(),
        ErrorKind::PermissionDenied => "permission denied (not executable?)".into(),
        _ => e.to_string(),
    }
}
