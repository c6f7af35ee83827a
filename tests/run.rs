//! `selfheal run` through the real binary with real processes: a second run that waits and
//! then runs exactly once; a lock held past `--wait` (exit 75 and a line naming the holder,
//! never 0) — by another run, by flock(1), by a background process a finished job left;
//! the wrapper killed -9 while its command runs (the lock stays held and `check` judges the
//! row alive or hung, never dead, until the command itself is killed, and then reclaims it
//! at once); exit statuses and signals passed through; the heartbeat touched while the
//! command runs and not while it is stopped; the execution record never half-written when
//! the wrapper is killed at chosen system calls or at random moments, and never touched by
//! `check --explain` or `doctor`; symbolic links a less trusted user planted refused when
//! run as root; bad usage refused before the command starts; `doctor` recognising files
//! `selfheal run` writes.
//!
//! Nothing asserts a duration: waits are polls with generous timeouts as safety nets.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use crate::common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use selfheal::run::holder::{HolderLine, parse_line};

/// `selfheal run ARGS`.
pub(crate) fn run(args: &[&str]) -> Command {
    let mut c = selfheal();
    c.arg("run").args(args);
    c
}

/// `selfheal run` with path options (`--lock`, FILE, …) given as paths.
pub(crate) fn run_with(opts: &[(&str, &Path)], rest: &[&str]) -> Command {
    let mut c = selfheal();
    c.arg("run");
    for (flag, path) in opts {
        c.arg(flag).arg(path);
    }
    c.args(rest);
    c
}

/// The holder line in a lock file, once there is one naming a process other than `not`.
fn wait_for_line(lock: &Path, not: Option<u32>) -> HolderLine {
    let mut line = None;
    wait_until("the holder line is written", secs(30), || {
        line = std::fs::read_to_string(lock)
            .ok()
            .and_then(|t| parse_line(&t))
            .filter(|h| Some(h.pid) != not);
        line.is_some()
    });
    line.expect("line")
}

/// Kills a process that is not our child (an orphaned command) when dropped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(
            Pid::from_raw(i32::try_from(self.0).expect("a pid")),
            Signal::SIGKILL,
        );
    }
}

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(i32::try_from(pid).expect("a pid")), None).is_ok()
        && selfheal::run::child::state(pid).is_some_and(|s| s != 'Z')
}

/// True when process `pid` has the file `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|d| {
        d.filter_map(Result::ok).any(|fd| {
            std::fs::metadata(fd.path()).is_ok_and(|f| f.ino() == m.ino() && f.dev() == m.dev())
        })
    })
}

pub(crate) fn report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("report");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report is not JSON ({e}): {text}"))
}

/// The one line a refused run prints, checked to be exactly one line.
#[track_caller]
pub(crate) fn refusal(o: &Output) -> String {
    assert_exit(o, 75);
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("selfheal run: not started: "), "{err}");
    assert_eq!(stdout(o), "");
    err
}

// ---------------------------------------------------------------------------------------
// The lock

#[test]
fn a_second_run_waits_and_then_runs_exactly_once_after_the_first_releases() {
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let out = sb.path("out");
    let gate = sb.path("gate");
    let mut first = Proc::spawn(
        run_with(&[("--lock", &lock)], &["--", "sh", "-c"])
            .arg("echo first >> \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.05; done")
            .arg("sh")
            .arg(&out)
            .arg(&gate),
    );
    wait_until("the first run works", secs(30), || {
        std::fs::read_to_string(&out).is_ok_and(|t| t == "first\n")
    });
    let first_line = wait_for_line(&lock, None);
    let inode = std::fs::metadata(&lock).expect("lock").ino();

    let second_report = sb.path("second.json");
    let mut second = Proc::spawn(
        run_with(
            &[("--lock", &lock), ("--report", &second_report)],
            &[
                "--wait",
                "10m",
                "--",
                "sh",
                "-c",
                "echo second >> \"$1\"",
                "sh",
            ],
        )
        .arg(&out),
    );
    // The second has opened the lock file and is waiting for it.
    wait_until("the second run opens the lock file", secs(30), || {
        has_open(second.pid(), &lock)
    });
    assert!(second.child.try_wait().expect("wait").is_none(), "it waits");
    assert_eq!(std::fs::read_to_string(&out).expect("out"), "first\n");
    assert!(
        !second_report.exists(),
        "nothing started, nothing recorded yet"
    );

    std::fs::write(&gate, "").expect("gate");
    let status = first.child.wait().expect("first");
    first.reap();
    assert_eq!(status.code(), Some(0));
    let status = second.child.wait().expect("second");
    second.reap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        "first\nsecond\n",
        "the second ran exactly once, after the first"
    );
    let r = report(&second_report);
    assert_eq!(r["state"], "succeeded", "{r}");
    assert_eq!(r["skipped"], false);
    assert_eq!(r["exit_status"], 0);
    assert!(r["lock_wait_ms"].as_u64().expect("lock_wait_ms") > 0, "{r}");
    // One file, one inode, now naming the second command.
    assert_eq!(std::fs::metadata(&lock).expect("lock").ino(), inode);
    let second_line = parse_line(&std::fs::read_to_string(&lock).expect("lock")).expect("line");
    assert_eq!(Some(u64::from(second_line.pid)), r["pid"].as_u64());
    assert_ne!(second_line.pid, first_line.pid);
}

#[test]
fn a_lock_held_past_wait_exits_75_and_names_the_holder_never_0() {
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let marker = sb.path("ran");
    let _holder = Proc::spawn(&mut run_with(&[("--lock", &lock)], &["--", "sleep", "600"]));
    let line = wait_for_line(&lock, None);
    assert_eq!(line.host, hostname());
    let since = line.since_text();

    for wait in ["0", "300ms"] {
        let rep = sb.path(&format!("skipped-{wait}.json"));
        let o = run_with(
            &[("--lock", &lock), ("--report", &rep)],
            &["--wait", wait, "--", "touch"],
        )
        .arg(&marker)
        .output()
        .expect("run");
        let err = refusal(&o);
        assert!(
            err.contains(&format!(
                "{} is held by {}:{} since {since} (",
                lock.display(),
                line.host,
                line.pid
            )),
            "{err}"
        );
        if wait == "0" {
            assert!(err.trim_end().ends_with("; one try (--wait 0)"), "{err}");
        } else {
            assert!(err.contains("; gave up after waiting "), "{err}");
        }
        assert!(!marker.exists(), "the command was not started");
        // The record says skipped, not succeeded.
        let r = report(&rep);
        assert_eq!(r["state"], "skipped", "{r}");
        assert_eq!(r["skipped"], true);
        assert_eq!(r["exit_status"], 75);
        assert_eq!(r["pid"], serde_json::Value::Null);
        assert_eq!(r["end"].as_str().map(str::len), Some(20), "{r}");
        assert_eq!(r["lock_holder"]["pid"], line.pid);
        assert_eq!(r["lock_holder"]["host"], line.host.as_str());
        assert_eq!(r["lock_holder"]["since"], since.as_str());
        assert_eq!(r["lock_holder"]["state"], "running");
        if wait == "300ms" {
            assert!(r["lock_wait_ms"].as_u64().expect("ms") >= 300, "{r}");
        }
    }
}

#[test]
fn a_lock_held_by_a_process_that_writes_no_line_is_named_from_proc_locks() {
    let sb = Sandbox::new();
    let lock = sb.path("legacy.lock");
    std::fs::write(&lock, "").expect("lock");
    // flock --no-fork: the lock's holder becomes the sleep.
    let holder = flock1_holder(&lock, false);
    let o = run_with(&[("--lock", &lock)], &["--", "true"])
        .output()
        .expect("run");
    let err = refusal(&o);
    assert!(
        err.contains(&format!(
            "is held by pid {} (sleep) (the file names no holder",
            holder.pid()
        )),
        "{err}"
    );
}

#[test]
fn a_background_process_a_finished_job_left_keeps_the_lock_and_is_named() {
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let bg_pid = sb.path("bg.pid");
    // The job ends at once, leaving a sleep behind with the locked descriptor.
    let o = run_with(&[("--lock", &lock)], &["--", "sh", "-c"])
        .arg("sleep 600 >/dev/null 2>&1 & echo $! > \"$1\"")
        .arg("sh")
        .arg(&bg_pid)
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");
    let bg: u32 = std::fs::read_to_string(&bg_pid)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    let _bg = KillOnDrop(bg);
    let line = parse_line(&std::fs::read_to_string(&lock).expect("lock")).expect("line");
    assert!(!alive(line.pid), "the job itself ended");

    let o = run_with(&[("--lock", &lock)], &["--", "true"])
        .output()
        .expect("run");
    let err = refusal(&o);
    assert!(
        err.contains(&format!(
            "is held by {}:{} since {}",
            line.host,
            line.pid,
            line.since_text()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "which is gone: the lock is kept by what it left behind: pid {bg} (sleep) still \
             has the file open"
        )),
        "{err}"
    );

    // Once it ends, the lock is free again.
    kill(
        Pid::from_raw(i32::try_from(bg).expect("a pid")),
        Signal::SIGKILL,
    )
    .expect("kill");
    wait_until("the background process ends", secs(30), || {
        lock_holders(&lock).is_empty()
    });
    let o = run_with(&[("--lock", &lock)], &["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
}

#[test]
fn the_lock_file_is_never_deleted_or_replaced() {
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let rep = sb.path("r.json");
    let mut inode = None;
    for _ in 0..3 {
        let o = run_with(&[("--lock", &lock), ("--report", &rep)], &["--", "true"])
            .output()
            .expect("run");
        assert_exit(&o, 0);
        let m = std::fs::metadata(&lock).expect("the lock file stays");
        assert_eq!(*inode.get_or_insert(m.ino()), m.ino(), "one inode");
        assert_eq!(m.mode() & 0o777, 0o644, "mode");
        let line = parse_line(&std::fs::read_to_string(&lock).expect("lock")).expect("line");
        let r = report(&rep);
        assert_eq!(Some(u64::from(line.pid)), r["pid"].as_u64());
        assert_eq!(
            Some(line.since_text().as_str()),
            r["command_start"].as_str()
        );
    }
    // A group- or world-writable lock file of ours is tightened, never widened.
    std::fs::set_permissions(&lock, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod");
    let o = run_with(&[("--lock", &lock)], &["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert_eq!(
        std::fs::metadata(&lock).expect("lock").mode() & 0o777,
        0o644
    );
}

// ---------------------------------------------------------------------------------------
// Files that are not a lock's own, and locks that are not a run's, as root over a directory
// another user owns (docs/design.md#run-wrapper)

// ---------------------------------------------------------------------------------------
// The wrapper killed: the lock outlives it, check never calls the row dead

#[test]
fn the_wrapper_killed_9_leaves_the_lock_held_until_the_command_ends_and_check_never_says_dead() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.path("job.lock");
    let beat = sb.path("job.heartbeat");
    // The job's row, as the job writes it when it starts: ten minutes ago.
    db.insert(1, "running", 600);
    let cfg = sb.config(
        &db.url(),
        &format!(
            "name = \"nightly\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nlock_file = \"{}\"\nstale_after = \"5m\"\n\
             max_age = \"4h\"\nended_column = \"end_time\"\nmessage_column = \"error_msg\"\n",
            beat.display(),
            lock.display()
        ),
    );
    let mut wrapper = Proc::spawn(&mut run_with(
        &[("--lock", &lock), ("--heartbeat", &beat)],
        &["--every", "1s", "--", "sleep", "600"],
    ));
    let line = wait_for_line(&lock, None);
    let _command = KillOnDrop(line.pid);
    wait_until("the heartbeat is touched", secs(30), || beat.exists());
    let judge = || {
        let o = check(&cfg, &["--format", "json"]);
        let (rows, _) = json_lines(&o);
        (o, row(&rows, 1).clone())
    };
    let (o, r) = judge();
    assert_exit(&o, 0);
    assert_eq!(r["verdict"], "alive", "{r}");
    assert_eq!(r["lock"], "held", "{r}");
    assert_eq!(
        r["lock_pid"],
        wrapper.pid(),
        "/proc/locks names who took it: {r}"
    );

    wrapper.kill9();
    assert!(alive(line.pid), "the command runs on");
    assert!(
        !lock_holders(&lock).is_empty(),
        "the lock outlives the wrapper"
    );
    for _ in 0..3 {
        let (o, r) = judge();
        assert_exit(&o, 0);
        assert_eq!(r["verdict"], "alive", "{r}");
        assert_eq!(r["lock"], "held", "{r}");
        assert_eq!(db.status(1), "running");
    }
    // Much later, nobody touched the heartbeat (the wrapper is gone): hung, never dead.
    let f = std::fs::File::options()
        .append(true)
        .open(&beat)
        .expect("beat");
    // (Eight minutes: the row is ten minutes old, and a beat older than its row would be
    // an earlier row's.) The first run holds the verdict to confirm it; then reported.
    f.set_modified(SystemTime::now() - secs(8 * 60))
        .expect("mtime");
    for run in 0..3 {
        next_cron_run(&sb);
        let (o, r) = judge();
        assert_exit(&o, i32::from(run != 0));
        assert_eq!(r["verdict"], "hung", "{r}");
        assert_eq!(
            r["basis"],
            "the heartbeat is stale, but the job's lock is held"
        );
        assert_eq!(db.status(1), "running");
    }

    // The command itself killed: the lock is free, the row is reclaimed at once.
    kill(
        Pid::from_raw(i32::try_from(line.pid).expect("a pid")),
        Signal::SIGKILL,
    )
    .expect("kill");
    wait_until("the command is gone and the lock free", secs(30), || {
        lock_holders(&lock).is_empty()
    });
    let (o, r) = judge();
    assert_exit(&o, 0);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["lock"], "free", "{r}");
    assert_eq!(
        r["basis"],
        "nobody holds the job's lock (a try-lock got it), and the row is older than stale_after"
    );
    assert_eq!(r["applied"], true);
    assert_eq!(db.status(1), "error");
    assert!(lock.exists(), "the lock file stays");
}

// ---------------------------------------------------------------------------------------
// Exit statuses and signals

#[test]
fn exit_statuses_pass_through_and_the_wrapper_says_nothing_of_its_own() {
    for (script, code) in [
        ("exit 0", 0),
        ("exit 1", 1),
        ("exit 42", 42),
        ("kill -9 $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let sb = Sandbox::new();
        let rep = sb.path("r.json");
        let o = run_with(
            &[("--lock", &sb.path("l")), ("--report", &rep)],
            &["--", "sh", "-c", script],
        )
        .output()
        .expect("run");
        assert_exit(&o, code);
        assert_eq!(stdout(&o), "", "{script}");
        assert_eq!(stderr(&o), "", "{script}");
        let r = report(&rep);
        assert_eq!(r["exit_status"], code, "{r}");
        let (state, signal) = match code {
            0 => ("succeeded", None),
            137 => ("killed", Some(9)),
            143 => ("killed", Some(15)),
            _ => ("failed", None),
        };
        assert_eq!(r["state"], state, "{r}");
        assert_eq!(r["signal"].as_i64(), signal, "{r}");
    }
    // The command's own output is its own.
    let o = run(&["--", "sh", "-c", "echo out; echo err >&2"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert_eq!(
        (stdout(&o).as_str(), stderr(&o).as_str()),
        ("out\n", "err\n")
    );
}

#[test]
fn sigterm_sigint_and_sighup_to_the_wrapper_reach_the_command() {
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let sb = Sandbox::new();
        let lock = sb.path("l");
        let rep = sb.path("r.json");
        let got = sb.path("got");
        let ready = sb.path("ready");
        // A command that handles the signal: its own exit status comes through.
        let mut p = Proc::spawn(
            with_default_signals(&mut run_with(
                &[("--lock", &lock), ("--report", &rep)],
                &["--", "sh", "-c"],
            ))
            .arg(format!(
                "trap 'echo {} > \"$1\"; exit 7' {}; : > \"$2\"; \
                 while :; do sleep 0.05; done",
                sig.as_str(),
                &sig.as_str()[3..]
            ))
            .arg("sh")
            .arg(&got)
            .arg(&ready),
        );
        wait_until("the command is ready", secs(30), || ready.exists());
        kill(Pid::from_raw(i32::try_from(p.pid()).expect("a pid")), sig)
            .expect("signal the wrapper");
        let status = wait_at_most(&mut p.child, secs(30), "the wrapper ends on the signal");
        p.reap();
        assert_eq!(status.code(), Some(7), "{sig}");
        assert_eq!(
            std::fs::read_to_string(&got).expect("got").trim(),
            sig.as_str()
        );
        let r = report(&rep);
        assert_eq!(r["signals_forwarded"], serde_json::json!([sig.as_str()]));
        assert_eq!(r["state"], "failed");

        // A command that does not: it ends by the signal, 128+N.
        let before = wait_for_line(&lock, None).pid;
        let mut p = Proc::spawn(with_default_signals(&mut run_with(
            &[("--lock", &lock), ("--report", &rep)],
            &["--", "sleep", "600"],
        )));
        let line = wait_for_line(&lock, Some(before));
        kill(Pid::from_raw(i32::try_from(p.pid()).expect("a pid")), sig)
            .expect("signal the wrapper");
        let status = wait_at_most(&mut p.child, secs(30), "the command ends by the signal");
        p.reap();
        assert_eq!(status.code(), Some(128 + sig as i32), "{sig}");
        assert!(status.signal().is_none());
        assert!(!alive(line.pid));
        let r = report(&rep);
        assert_eq!(r["state"], "killed");
        assert_eq!(r["signal"], sig as i32);
        assert_eq!(r["signal_name"], sig.as_str());
    }
}

#[test]
fn a_signal_while_waiting_for_the_lock_starts_nothing() {
    let sb = Sandbox::new();
    let lock = sb.path("l");
    let marker = sb.path("ran");
    let rep = sb.path("r.json");
    let _holder = Proc::spawn(&mut run_with(&[("--lock", &lock)], &["--", "sleep", "600"]));
    wait_for_line(&lock, None);
    let mut waiter = Proc::spawn(
        run_with(
            &[("--lock", &lock), ("--report", &rep)],
            &["--wait", "10m", "--", "touch"],
        )
        .arg(&marker),
    );
    wait_until("the waiter opens the lock file", secs(30), || {
        has_open(waiter.pid(), &lock)
    });
    kill(
        Pid::from_raw(i32::try_from(waiter.pid()).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("kill");
    let status = waiter.child.wait().expect("wait");
    waiter.reap();
    assert_eq!(status.code(), Some(143));
    assert!(!marker.exists());
    let r = report(&rep);
    assert_eq!(r["state"], "not_started", "{r}");
    assert_eq!(r["exit_status"], 143);
}

// ---------------------------------------------------------------------------------------
// The heartbeat

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p)
        .expect("mtime")
        .modified()
        .expect("mtime")
}

fn set_mtime(p: &Path, t: SystemTime) {
    std::fs::File::options()
        .append(true)
        .open(p)
        .expect("open")
        .set_modified(t)
        .expect("set mtime");
}

#[test]
fn the_heartbeat_is_touched_while_the_command_runs_and_not_while_it_is_stopped() {
    let sb = Sandbox::new();
    let lock = sb.path("l");
    let beat = sb.path("beat");
    let mut p = Proc::spawn(&mut run_with(
        &[("--lock", &lock), ("--heartbeat", &beat)],
        &["--every", "1s", "--", "sleep", "600"],
    ));
    let line = wait_for_line(&lock, None);
    let _command = KillOnDrop(line.pid);
    wait_until("the first touch", secs(30), || beat.exists());
    assert_eq!(
        std::fs::metadata(&beat).expect("beat").mode() & 0o777,
        0o644
    );
    let old = SystemTime::now() - secs(3600);
    set_mtime(&beat, old);
    wait_until("touched again", secs(30), || mtime(&beat) > old);

    // Stopped: not touched.
    let pid = Pid::from_raw(i32::try_from(line.pid).expect("a pid"));
    kill(pid, Signal::SIGSTOP).expect("stop");
    wait_until("the command is stopped", secs(30), || {
        selfheal::run::child::state(line.pid) == Some('T')
    });
    // Past any touch already under way, then three periods with nothing.
    std::thread::sleep(Duration::from_millis(1_200));
    set_mtime(&beat, old);
    std::thread::sleep(Duration::from_millis(3_500));
    assert_eq!(
        mtime(&beat),
        old,
        "a stopped command's heartbeat is not touched"
    );

    kill(pid, Signal::SIGCONT).expect("continue");
    wait_until("touched again once it runs", secs(30), || {
        mtime(&beat) > old
    });
    p.kill9();
}

// ---------------------------------------------------------------------------------------
// The execution record: never half-written, never touched by an audit

/// The record is absent, the previous one, or a complete record.
#[track_caller]
fn assert_whole(rep: &Path, previous: Option<&Vec<u8>>, trail: &str) -> Option<Vec<u8>> {
    let Ok(bytes) = std::fs::read(rep) else {
        assert!(previous.is_none(), "{trail}: a record vanished");
        return None;
    };
    if previous == Some(&bytes) {
        return Some(bytes);
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{trail}: a torn record ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    for key in [
        "run_id",
        "host",
        "pid",
        "command",
        "start",
        "end",
        "state",
        "skipped",
        "exit_status",
        "signal",
        "lock_wait_ms",
        "lock_holder",
    ] {
        assert!(v.get(key).is_some(), "{trail}: no {key} in {v}");
    }
    assert!(bytes.ends_with(b"}\n"), "{trail}");
    Some(bytes)
}

fn strace_or_skip() -> bool {
    have_tool("strace", &["-qq", "-o", "/dev/null", "true"], "strace")
}

#[test]
fn the_record_is_never_half_written_when_the_wrapper_is_killed_at_a_system_call() {
    if !strace_or_skip() {
        return;
    }
    let seed: u64 = std::env::var("SELFHEAL_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let mut rng = Rng(seed);
    let sb = Sandbox::new();
    let rep = sb.path("r.json");
    let lock = sb.path("l");
    let beat = sb.path("beat");
    let mut previous = None;
    let mut kills = 0;
    // The record's writes: the temporary file is created (openat), written (write),
    // flushed (fsync), renamed (renameat/rename), the directory flushed (fsync).
    let points = [
        ("write", 4),
        ("fsync", 4),
        ("rename,renameat,renameat2", 2),
        ("openat", 12),
    ];
    for round in 0..40 {
        let (syscall, most) =
            points[usize::try_from(rng.between(0, u64::try_from(points.len()).expect("len") - 1))
                .expect("index")];
        let when = rng.between(1, most);
        let o = Command::new("strace")
            .args(["-qq", "-o", "/dev/null"])
            .arg(format!("--trace={syscall}"))
            .arg(format!("--inject={syscall}:signal=KILL:when={when}"))
            .arg(bin())
            .arg("run")
            .arg("--lock")
            .arg(&lock)
            .arg("--heartbeat")
            .arg(&beat)
            .arg("--report")
            .arg(&rep)
            .args(["--", "true"])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .output()
            .expect("strace");
        let trail = format!("seed {seed} round {round}: {syscall} #{when}");
        assert!(
            o.status.signal() == Some(9) || o.status.code() == Some(0),
            "{trail}: {o:?}"
        );
        if o.status.signal() == Some(9) {
            kills += 1;
        }
        previous = assert_whole(&rep, previous.as_ref(), &trail);
    }
    assert!(kills >= 20, "most rounds killed the wrapper: {kills}");
    // A later run writes a whole record again.
    let o = run_with(&[("--lock", &lock), ("--report", &rep)], &["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert_eq!(report(&rep)["state"], "succeeded");
}

#[test]
fn the_record_is_never_half_written_when_the_wrapper_is_killed_at_random_moments() {
    let mut rng = Rng(1616);
    let sb = Sandbox::new();
    let rep = sb.path("r.json");
    let lock = sb.path("l");
    let mut previous = None;
    for round in 0..60 {
        let mut p = Proc::spawn(
            run_with(&[("--lock", &lock), ("--report", &rep)], &["--", "true"])
                .stderr(Stdio::null()),
        );
        std::thread::sleep(Duration::from_micros(rng.between(0, 8_000)));
        p.kill9();
        previous = assert_whole(&rep, previous.as_ref(), &format!("round {round}"));
    }
}

#[test]
fn check_explain_and_doctor_never_touch_the_record() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.path("job.lock");
    let beat = sb.path("job.heartbeat");
    let rep = sb.path("job.json");
    db.insert(1, "running", 30);
    let cfg = sb.config(
        &db.url(),
        &format!(
            "name = \"nightly\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nlock_file = \"{}\"\nstale_after = \"5m\"\n\
             max_age = \"4h\"\n",
            beat.display(),
            lock.display()
        ),
    );
    let o = run_with(
        &[
            ("--lock", &lock),
            ("--heartbeat", &beat),
            ("--report", &rep),
        ],
        &["--", "true"],
    )
    .output()
    .expect("run");
    assert_exit(&o, 0);
    let before = file_state(&rep);
    let _holder = Proc::spawn(&mut run_with(
        &[("--lock", &lock), ("--heartbeat", &beat)],
        &["--", "sleep", "600"],
    ));
    wait_for_line(
        &lock,
        Some(u32::try_from(report(&rep)["pid"].as_u64().expect("pid")).expect("a pid")),
    );
    std::thread::sleep(Duration::from_millis(1_100));
    for args in [&["check", "--explain"][..], &["doctor"], &["check"]] {
        let o = selfheal()
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("run");
        assert!(o.status.code().is_some_and(|c| c <= 1), "{args:?}: {o:?}");
        assert_eq!(file_state(&rep), before, "{args:?} touched the record");
    }
}

// ---------------------------------------------------------------------------------------
// Bad usage, and files that cannot be used: nothing started

#[test]
fn bad_usage_is_refused_with_exit_2_and_nothing_starts() {
    let sb = Sandbox::new();
    let marker = sb.path("ran");
    let lock = sb.path("l");
    let m = marker.to_str().expect("path");
    let l = lock.to_str().expect("path");
    let beat = sb.path("beat");
    let h = beat.to_str().expect("path");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![], "<COMMAND>"),
        (vec!["--lock", l], "<COMMAND>"),
        (vec!["--lock", l, "--wait", "5x", "--", "touch", m], "5x"),
        (
            vec!["--lock", l, "--wait", "-5s", "--", "touch", m],
            "cannot be negative",
        ),
        (
            vec!["--lock", l, "--wait=-1s", "--", "touch", m],
            "cannot be negative",
        ),
        (
            vec!["--heartbeat", l, "--every", "0", "--", "touch", m],
            "at least 1s",
        ),
        (vec!["--wait", "3s", "--", "touch", m], "--lock"),
        // Beyond what the clock can add (it panicked, exit 101: with --every after the
        // command had started), or merely absurd: refused before anything starts.
        (
            vec![
                "--lock",
                l,
                "--wait",
                "18446744073709551615s",
                "--",
                "touch",
                m,
            ],
            "expected at most 100years",
        ),
        (
            vec!["--lock", l, "--wait", "1000years", "--", "touch", m],
            "expected at most 100years",
        ),
        (
            vec![
                "--heartbeat",
                h,
                "--every",
                "18446744073709551615s",
                "--",
                "touch",
                m,
            ],
            "expected at most 100years",
        ),
        (
            vec!["--lock", l, "--report", l, "--", "touch", m],
            "--lock and --report name the same file",
        ),
        (
            vec!["--lock", l, "--heartbeat", l, "--", "touch", m],
            "--lock and --heartbeat name the same file",
        ),
    ];
    std::fs::write(&lock, "web1:1 2035-03-14T15:09:26Z\n").expect("lock");
    let before = file_state(&lock);
    for (args, says) in cases {
        let o = run(&args).output().expect("run");
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!marker.exists(), "{args:?} started the command");
        assert!(!beat.exists(), "{args:?} touched the heartbeat");
        assert_eq!(file_state(&lock), before, "{args:?} changed the lock file");
    }
    // The lock file with a second name (a hard link) is refused.
    let alias = sb.path("alias");
    std::fs::hard_link(&lock, &alias).expect("link");
    let o = run_with(&[("--lock", &alias)], &["--", "touch", m])
        .output()
        .expect("run");
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("hard links"), "{}", stderr(&o));
    assert!(!marker.exists());
}

#[test]
fn unusable_files_are_refused_with_exit_3_and_nothing_starts() {
    let sb = Sandbox::new();
    let marker = sb.path("ran");
    let rep = sb.path("r.json");
    let missing = sb.path("no/such/dir/f");
    for flag in ["--lock", "--heartbeat", "--report"] {
        let o = run_with(&[(flag, &missing)], &["--", "touch"])
            .arg(&marker)
            .output()
            .expect("run");
        assert_exit(&o, 3);
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("selfheal run: error: {flag}: "))
                && err.contains("No such file or directory")
                && err.trim_end().ends_with("the command was not started"),
            "{err}"
        );
        assert!(!marker.exists());
    }
    // The lock's directory missing: the record says why nothing ran.
    let o = run_with(&[("--lock", &missing), ("--report", &rep)], &["--", "true"])
        .output()
        .expect("run");
    assert_exit(&o, 3);
    let r = report(&rep);
    assert_eq!(r["state"], "not_started", "{r}");
    assert_eq!(r["exit_status"], 3);
    assert!(
        r["error"].as_str().is_some_and(|e| e.contains("--lock")),
        "{r}"
    );

    // A command that is not there: 127, recorded.
    let o = run_with(&[("--report", &rep)], &["--", "/nonexistent/job"])
        .output()
        .expect("run");
    assert_exit(&o, 127);
    assert!(
        stderr(&o).contains(
            "cannot run /nonexistent/job: it does not exist (a command with a slash is run as \
             given, not looked up in PATH)"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(report(&rep)["state"], "not_started");
    // One that exists, whose #! interpreter does not; and a name looked up in PATH.
    let script = sb.path("job.sh");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    for (cmd, says) in [
        (
            script.to_str().expect("path"),
            "it exists, but the interpreter its #! line names (or a library it needs) does not",
        ),
        (
            "selfheal-no-such-program",
            "no such program (not found in PATH)",
        ),
    ] {
        let o = run(&["--", cmd]).output().expect("run");
        assert_exit(&o, 127);
        assert!(
            stderr(&o).contains(&format!("cannot run {cmd}: {says}")),
            "{}",
            stderr(&o)
        );
    }

    // Directories this user cannot write (as nobody, in root's sandbox).
    if as_nobody().is_none() {
        return;
    }
    std::fs::set_permissions(
        sb.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    // Where nobody could run the command's touch, to see that it did not run.
    let open = sb.path("open");
    std::fs::create_dir(&open).expect("dir");
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let marker = open.join("ran");
    for flag in ["--lock", "--heartbeat", "--report"] {
        let o = as_nobody()
            .expect("root")
            .arg("run")
            .arg(flag)
            .arg(sb.path("f"))
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .expect("run");
        assert_exit(&o, 3);
        assert!(
            stderr(&o).contains("ermission denied"),
            "{flag}: {}",
            stderr(&o)
        );
        assert!(!marker.exists(), "{flag} started the command");
    }
    // The same as nobody in a directory it can write: the command runs (the test can
    // see one).
    let o = as_nobody()
        .expect("root")
        .arg("run")
        .arg("--lock")
        .arg(open.join("l"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .expect("run");
    assert_exit(&o, 0);
    assert!(marker.exists());
}

// ---------------------------------------------------------------------------------------
// Symbolic links planted by a less trusted user, refused when run as root

/// Runs `args` as www-data (uid 33).
fn as_www_data(args: &[&str]) {
    let o = Command::new("setpriv")
        .args(["--reuid=33", "--regid=33", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("setpriv");
    assert!(o.status.success(), "{args:?}: {o:?}");
}

#[test]
fn links_planted_by_an_unprivileged_user_are_refused_when_run_as_root() {
    if as_nobody().is_none() {
        return;
    }
    let sb = Sandbox::new();
    let chmod = |p: &Path, m| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m))
            .expect("chmod");
    };
    chmod(sb.dir.path(), 0o755);
    // www-data's own directory, as a PHP application's runtime directory is.
    let www = sb.path("www");
    std::fs::create_dir(&www).expect("dir");
    nix::unistd::chown(&www, Some(33.into()), Some(33.into())).expect("chown");
    // Root's files the links point at.
    let victim = sb.path("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    let victim_dir = sb.path("rootdir");
    std::fs::create_dir(&victim_dir).expect("dir");
    let marker = sb.path("ran");
    let s = |p: &Path| p.to_str().expect("path").to_string();
    as_www_data(&["ln", "-s", &s(&victim), &s(&www.join("link"))]);
    as_www_data(&["ln", "-s", &s(&victim_dir), &s(&www.join("sub"))]);
    let before = file_state(&victim);
    for flag in ["--lock", "--heartbeat", "--report"] {
        for (path, says) in [
            (www.join("link"), "is a symbolic link"),
            (www.join("sub/f"), "refused to follow"),
        ] {
            let o = selfheal()
                .arg("run")
                .arg(flag)
                .arg(&path)
                .args(["--", "touch"])
                .arg(&marker)
                .output()
                .expect("run");
            assert_exit(&o, 3);
            assert!(
                stderr(&o).contains(says),
                "{flag} {}: {}",
                path.display(),
                stderr(&o)
            );
            assert!(!marker.exists(), "{flag} started the command");
        }
    }
    assert_eq!(file_state(&victim), before, "the victim is untouched");
    assert_eq!(
        std::fs::read_dir(&victim_dir).expect("dir").count(),
        0,
        "nothing was created through the link"
    );
}

// ---------------------------------------------------------------------------------------
// doctor

#[test]
fn doctor_recognises_a_lock_file_selfheal_run_writes() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.path("job.lock");
    let beat = sb.path("job.heartbeat");
    let cfg = sb.config(
        &db.url(),
        &format!(
            "name = \"nightly\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nlock_file = \"{}\"\nstale_after = \"5m\"\n\
             max_age = \"4h\"\n",
            beat.display(),
            lock.display()
        ),
    );
    let doctor = || {
        let o = selfheal()
            .args(["doctor", "--config"])
            .arg(&cfg)
            .output()
            .expect("doctor");
        stdout(&o)
            .lines()
            .filter(|l| l.contains("watch nightly: written by selfheal run"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(doctor(), Vec::<String>::new(), "no such line without a run");

    let mut p = Proc::spawn(&mut run_with(
        &[("--lock", &lock), ("--heartbeat", &beat)],
        &["--", "sleep", "600"],
    ));
    let line = wait_for_line(&lock, None);
    let lines = doctor();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("✓ ")
            && lines[0].contains(&format!(
                "{} is held by {}:{} since {}",
                lock.display(),
                line.host,
                line.pid,
                line.since_text()
            ))
            && lines[0].contains("proves the process exists, not that it progresses"),
        "{lines:?}"
    );

    p.kill9();
    let _cmd = KillOnDrop(line.pid);
    kill(
        Pid::from_raw(i32::try_from(line.pid).expect("a pid")),
        Signal::SIGKILL,
    )
    .expect("kill");
    wait_until("the lock is free", secs(30), || {
        lock_holders(&lock).is_empty()
    });
    let lines = doctor();
    assert!(
        lines.len() == 1
            && lines[0].contains(&format!(
                "{} is free; it was last held by {}:{} from {}",
                lock.display(),
                line.host,
                line.pid,
                line.since_text()
            )),
        "{lines:?}"
    );
}
