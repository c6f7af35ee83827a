//! The demo's second part: a job wrapped in `selfheal run` next to a bare one. Both are
//! real processes (`sleep 3600` stands in for the job) with rows in a table of their own
//! (`cron_runs`, its own configuration `wrapped.toml`, so the first part stays as it was).
//! A second start of the wrapped job is refused with exit 75 and a line naming the holder;
//! the wrapper is killed -9 and `--explain` still finds its job alive (the lock outlives
//! the wrapper), while the bare job — alive too — leaves nothing to tell it from a dead
//! one; then the wrapped job itself is killed and, once the heartbeat its wrapper left is
//! stale, `--explain` finds it dead (a death beside the row's own fresh heartbeat waits for
//! it to go stale).
//!
//! I/O: starts this very binary as `selfheal run` and `sleep` as the bare job, and kills
//! all of them before returning, whatever happens; files in the sandbox only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use rusqlite::Connection;

use super::{io_err, run_check, sql_err};
use crate::decide::Lock;
use crate::error::{Error, Result};
use crate::probe::{LockTable, probe_lock};

/// How long the demo waits for a process it started to get somewhere (a safety net).
const PATIENCE: Duration = Duration::from_secs(20);

/// Every process of this part, killed when it ends.
#[derive(Default)]
struct Procs {
    children: Vec<Child>,
    /// The wrapped job, once known: not our child (the wrapper's).
    job: Option<u32>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        if let Some(p) = self.job.and_then(crate::host::pid_t) {
            let _ = kill(p, Signal::SIGKILL);
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn waited_too_long(what: &str) -> Error {
    Error::io(
        PathBuf::from("(demo)"),
        "waiting for a process it started",
        std::io::Error::other(format!("timed out after {}s: {what}", PATIENCE.as_secs())),
    )
}

/// Polls `f` until it holds, or gives up after [`PATIENCE`].
fn wait_for(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        if Instant::now() >= deadline {
            return Err(waited_too_long(what));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn selfheal_run(args: &[&std::ffi::OsStr]) -> Result<Command> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::io(PathBuf::from("/proc/self/exe"), "finding this program", e))?;
    let mut c = Command::new(exe);
    c.arg("run").args(args).stdin(Stdio::null());
    Ok(c)
}

/// The table, the rows and the configuration of this part; returns the configuration.
fn build(dir: &Path, run: &Path) -> Result<PathBuf> {
    let db = dir.join("app.db");
    let conn = Connection::open(&db).map_err(sql_err)?;
    conn.execute_batch(
        "CREATE TABLE cron_runs (
            id INTEGER PRIMARY KEY,
            job TEXT NOT NULL,
            status VARCHAR(16) NOT NULL,
            start_time TEXT NOT NULL,
            end_time TEXT,
            error_msg VARCHAR(255) NOT NULL DEFAULT ''
         );
         CREATE INDEX cron_runs_status ON cron_runs (status);
         INSERT INTO cron_runs (id, job, status, start_time) VALUES
            (8, 'nightly-export', 'running', datetime('now', '-600 seconds')),
            (9, 'nightly-import', 'running', datetime('now', '-600 seconds'));",
    )
    .map_err(sql_err)?;
    let cfg = dir.join("wrapped.toml");
    let text = format!(
        r#"# The demo's second configuration: one watch over cron_runs.
[database]
url = "sqlite://{db}"

[run]
lock_file = "{run}/selfheal.lock"
state_dir = "{state}"

[[watch]]
name = "cron"
table = "cron_runs"
started_column = "start_time"
heartbeat_file = "{run}/cron-{{id}}.heartbeat"
lock_file = "{run}/cron-{{id}}.lock"
stale_after = "5m"
max_age = "4h"
ended_column = "end_time"
message_column = "error_msg"
"#,
        db = db.display(),
        run = run.display(),
        state = dir.join("state").display(),
    );
    std::fs::write(&cfg, text).map_err(io_err(&cfg, "writing the demo configuration"))?;
    Ok(cfg)
}

/// Runs this part of the walkthrough in the sandbox `dir`.
pub(super) fn show(dir: &Path, out: &mut dyn Write) -> Result<()> {
    let run = dir.join("run");
    let cfg = build(dir, &run)?;
    let lock = run.join("cron-8.lock");
    let beat = run.join("cron-8.heartbeat");
    let record = run.join("cron-8.json");
    let again = run.join("cron-8-again.json");
    let mut procs = Procs::default();

    // Row 8's job, wrapped; row 9's, bare.
    let wrapper = selfheal_run(&[
        "--lock".as_ref(),
        lock.as_os_str(),
        "--heartbeat".as_ref(),
        beat.as_os_str(),
        "--report".as_ref(),
        record.as_os_str(),
        "--".as_ref(),
        "sleep".as_ref(),
        "3600".as_ref(),
    ])?
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map_err(|e| Error::io(&lock, "starting selfheal run for", e))?;
    let wrapper_pid = wrapper.id();
    procs.children.push(wrapper);
    let bare = Command::new("sleep")
        .arg("3600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(PathBuf::from("sleep"), "starting", e))?;
    procs.children.push(bare);
    let mut line = None;
    wait_for("selfheal run starts its job", || {
        line = crate::probe::lock::read_line_at(&lock);
        line.is_some() && beat.exists() && record.exists()
    })?;
    let job = line.map(|l| l.pid);
    procs.job = job;

    let _ = writeln!(
        out,
        "\nA job wrapped in selfheal run next to a bare one: rows 8 and 9 of table cron_runs \
         (config\n{}) started the same job 10 minutes ago; `sleep 3600` stands in for it.",
        cfg.display()
    );
    let _ = writeln!(
        out,
        "  row 8: selfheal run --lock {} --heartbeat {} --report {} -- sleep 3600",
        lock.display(),
        beat.display(),
        record.display()
    );
    let _ = writeln!(
        out,
        "  row 9: sleep 3600, straight from cron: no lock, no heartbeat"
    );

    // Cron starts row 8's job again while it runs.
    let _ = writeln!(
        out,
        "\n$ selfheal run --lock {} --report {} -- sleep 3600",
        lock.display(),
        again.display()
    );
    let second = selfheal_run(&[
        "--lock".as_ref(),
        lock.as_os_str(),
        "--report".as_ref(),
        again.as_os_str(),
        "--".as_ref(),
        "sleep".as_ref(),
        "3600".as_ref(),
    ])?
    .output()
    .map_err(|e| Error::io(&lock, "starting selfheal run for", e))?;
    let _ = out.write_all(&second.stderr);
    let _ = writeln!(
        out,
        "(exit status {}: the second start did nothing, and says so; `flock -n … || exit 0` \
         would say 0)",
        second
            .status
            .code()
            .map_or_else(|| "?".into(), |c| c.to_string())
    );

    // The wrapper killed: its job keeps the lock.
    if let Some(w) = procs.children.first_mut() {
        let _ = w.kill();
        let _ = w.wait();
    }
    let _ = writeln!(
        out,
        "\n$ kill -9 <row 8's wrapper>    # its job runs on and keeps the lock"
    );
    let _ = writeln!(out, "$ selfheal check --explain --config {}", cfg.display());
    run_check(&cfg, true, out)?;
    let _ = writeln!(
        out,
        "(row 8's lock was taken by its wrapper, pid {wrapper_pid}; its job holds on to it.\n\
         Row 9's job runs too, but left no evidence: nothing tells it from a dead one.)"
    );

    // The job killed: the lock is free at once.
    if let Some(p) = job.and_then(crate::host::pid_t) {
        let _ = kill(p, Signal::SIGKILL);
    }
    wait_for("row 8's job ends", || {
        matches!(
            probe_lock(&lock, LockTable::read().as_ref()),
            Lock::Free | Lock::Unconfirmed
        )
    })?;
    // Six minutes later, the heartbeat its wrapper touched last is stale.
    std::fs::File::options()
        .append(true)
        .open(&beat)
        .and_then(|f| f.set_modified(std::time::SystemTime::now() - Duration::from_secs(360)))
        .map_err(io_err(&beat, "setting a heartbeat mtime"))?;
    let _ = writeln!(
        out,
        "\n$ kill -9 <row 8's job>    # six minutes later, the heartbeat its wrapper touched \
         last is stale"
    );
    let _ = writeln!(out, "$ selfheal check --explain --config {}", cfg.display());
    run_check(&cfg, true, out)?;
    let _ = writeln!(
        out,
        "(while its heartbeat was fresh, the free lock waited for it: a killed job is \
         reclaimed once its\nlast heartbeat is stale, within stale_after and one run)"
    );

    let _ = writeln!(
        out,
        "\nThe execution records (--report) never say \"succeeded\" for a run that did not:"
    );
    for (name, path) in [("cron-8.json", &record), ("cron-8-again.json", &again)] {
        let v: serde_json::Value = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let holder = v["lock_holder"]["line"]
            .as_str()
            .map_or(String::new(), |l| {
                format!(", lock held by {}", l.split(' ').next().unwrap_or(l))
            });
        let _ = writeln!(
            out,
            "  {name}: state {}, exit_status {}, end {}{holder}",
            v["state"].as_str().unwrap_or("?"),
            v["exit_status"],
            v["end"].as_str().unwrap_or("none yet"),
        );
    }
    let _ = writeln!(
        out,
        "  (cron-8.json still says running: its wrapper was killed before the job ended)"
    );
    drop(procs);
    Ok(())
}
