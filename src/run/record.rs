//! The execution record of `selfheal run --report FILE`: what one invocation did, as one
//! JSON object — written when the command has started (`"state": "running"`, no end
//! yet), and again when it ended, or once when nothing was started (`"skipped"`: the lock
//! was held; `"not_started"`: a file could not be used, the command could not be executed,
//! or a signal ended the wait). A run that was skipped or killed therefore never leaves the
//! previous run's success in place: the record says what happened to the latest
//! invocation that got as far as writing it.
//!
//! I/O: through [`crate::fsafe`]: a new temporary file with an unpredictable name in the
//! report's directory (reached without following a planted link), written, `fsync`ed,
//! renamed over FILE, and the directory `fsync`ed — a reader sees the previous record or
//! the new one, never a part, whenever the wrapper is killed (a wrapper killed between
//! creating the temporary file and the rename leaves that `.NAME.RANDOM.tmp` beside the
//! record). Mode 0644: monitoring reads it. The final record is written while the lock is
//! still held, so the next run that gets the lock writes after it; a run that is refused
//! writes its `skipped` record at once, over whatever is there — the record is that of the
//! latest invocation to write one.
//!
//! It records executions only: audits (`selfheal check --explain`, `selfheal doctor`)
//! never read or write it, so a health check cannot pass for a run (seed 001: keep "last
//! execution" and "last audit" apart).
//!
//! Fields: `run_id` (128 random bits, hex), `host`, `wrapper_pid`, `pid` (the command's;
//! null when not started), `command`, `lock_file`, `heartbeat_file`, `start` (the
//! invocation), `command_start`, `end` (null while running), `state` (`running`,
//! `succeeded`, `failed`, `killed`, `skipped`, `not_started`), `skipped`, `exit_status`
//! (the wrapper's, as cron sees it; null while running), `signal` and `signal_name` (what
//! ended the command), `lock_wait_ms`, `lock_holder` (who held the lock, when skipped),
//! `signals_forwarded`, `error`. Times are RFC 3339 UTC.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use super::holder::{Holder, rfc3339, unix_secs};
use crate::fsafe::{self, Dir};

/// The report's mode: readable by monitoring.
pub const REPORT_MODE: u32 = 0o644;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    Succeeded,
    Failed,
    Killed,
    Skipped,
    NotStarted,
}

/// One invocation's record.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub run_id: String,
    pub host: String,
    pub wrapper_pid: u32,
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub lock_file: Option<String>,
    pub heartbeat_file: Option<String>,
    pub start: String,
    pub command_start: Option<String>,
    pub end: Option<String>,
    pub state: State,
    pub skipped: bool,
    pub exit_status: Option<u8>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    pub lock_wait_ms: u64,
    pub lock_holder: Option<Holder>,
    pub signals_forwarded: Vec<String>,
    pub error: Option<String>,
}

/// 128 random bits in hex.
fn run_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // Only a label: a time and the pid still tell runs apart.
        return format!(
            "{:x}-{}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            std::process::id()
        );
    }
    b.iter().fold(String::with_capacity(32), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

impl Record {
    pub fn new(
        host: &str,
        command: &[OsString],
        lock: Option<&Path>,
        heartbeat: Option<&Path>,
        start: SystemTime,
    ) -> Record {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        Record {
            run_id: run_id(),
            host: host.to_string(),
            wrapper_pid: std::process::id(),
            pid: None,
            command: command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            lock_file: lock.map(text),
            heartbeat_file: heartbeat.map(text),
            start: rfc3339(unix_secs(start)),
            command_start: None,
            end: None,
            state: State::NotStarted,
            skipped: false,
            exit_status: None,
            signal: None,
            signal_name: None,
            lock_wait_ms: 0,
            lock_holder: None,
            signals_forwarded: Vec::new(),
            error: None,
        }
    }

    /// Marks the end now.
    pub fn ended(&mut self, state: State, exit_status: u8) {
        self.state = state;
        self.skipped = state == State::Skipped;
        self.exit_status = Some(exit_status);
        self.end = Some(rfc3339(unix_secs(SystemTime::now())));
    }
}

/// Refuses a directory this user cannot create a file in (write and search permission,
/// as the effective user; a read-only file system counts), naming `path`, the file that
/// was to be made there.
pub(super) fn can_create_in(dir: &Dir, path: &Path) -> fsafe::Result<()> {
    rustix::fs::accessat(
        dir,
        ".",
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        rustix::fs::AtFlags::EACCESS,
    )
    .map_err(|e| fsafe::Error::Io {
        path: path.to_path_buf(),
        component: Some(dir.path().to_path_buf()),
        action: "creating a file in",
        source: e.into(),
    })
}

/// Where the record goes: its directory, reached once by the safe walk before anything
/// starts, and the file's name in it.
#[derive(Debug)]
pub struct ReportFile {
    pub path: PathBuf,
    pub dir: Dir,
    pub name: OsString,
}

impl ReportFile {
    /// Reaches the report's directory and checks that this user can create a file in it,
    /// so that a run whose record could not be written is refused before it starts.
    pub fn prepare(path: &Path) -> fsafe::Result<ReportFile> {
        let (dir, name) = Dir::open_parent(path)?;
        // The rename would replace a link or whatever else is there without following
        // it; still, a report path that is not a plain file is somebody's mistake or
        // somebody's trap, and is refused.
        match dir.stat_at(&name)? {
            Some(st) if st.kind == fsafe::Kind::Symlink => {
                return Err(fsafe::Error::FinalSymlink {
                    path: path.to_path_buf(),
                });
            }
            Some(st) if st.kind != fsafe::Kind::File => {
                return Err(fsafe::Error::NotRegular {
                    path: path.to_path_buf(),
                    kind: st.kind.describe(),
                });
            }
            _ => {}
        }
        can_create_in(&dir, path)?;
        Ok(ReportFile {
            path: path.to_path_buf(),
            dir,
            name,
        })
    }

    /// Replaces the record atomically.
    pub fn write(&self, record: &Record) -> fsafe::Result<()> {
        let mut bytes = serde_json::to_vec(record).map_err(|e| fsafe::Error::Io {
            path: self.path.clone(),
            component: None,
            action: "serialising the record for",
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        self.dir.replace(&self.name, REPORT_MODE, |f| {
            std::io::Write::write_all(f, &bytes)
        })
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }
}
