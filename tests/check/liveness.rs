//! Positive liveness evidence end to end, with real processes and no simulated evidence:
//! locks held by `flock(1)` and by children that took `flock(2)` or a POSIX lock
//! themselves, workers killed with SIGKILL, recycled pids, legacy existence locks released
//! with `release_lock = "if_free"`, and a tight `flock -n` loop beside the probe.
//! Real SQLite files and the real binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

fn json(o: &std::process::Output) -> (Vec<serde_json::Value>, serde_json::Value) {
    json_lines(o)
}

fn have_python() -> bool {
    have_tool("python3", &["-c", "import fcntl"], "python3")
}

#[test]
fn a_lock_held_by_flock1_or_by_a_child_s_own_lock_makes_a_stale_row_hung_never_dead() {
    type Holder = fn(&Path) -> Proc;
    if !have_python() {
        return;
    }
    let holders: [(&str, Holder); 4] = [
        ("flock(1) --no-fork running sleep", |p| {
            flock1_holder(p, false)
        }),
        ("flock(1) forking sleep", |p| flock1_holder(p, true)),
        ("a child that took flock(2) itself", |p| {
            python_holder(p, "flock")
        }),
        ("a child that took a POSIX lock itself", |p| {
            python_holder(p, "lockf")
        }),
    ];
    for (what, hold) in holders {
        for release in ["never", "if_free"] {
            for manual in [false, true] {
                let ctx = format!("{what}, release_lock = {release}, manual_value: {manual}");
                let sb = Sandbox::new();
                let db = SqliteDb::new(&sb);
                db.insert(2, "running", 50 * MIN);
                sb.heartbeat(2, secs(47 * MIN));
                let lock = sb.lock_path(2);
                std::fs::write(&lock, "job lock\n").expect("lock file");
                let holder = hold(&lock);
                let lock_pid = lock_holders(&lock)[0];
                let before = file_state(&lock);
                let extra = format!(
                    "release_lock = \"{release}\"\n{}",
                    if manual {
                        "manual_value = \"wait_manual\"\n"
                    } else {
                        ""
                    }
                );
                let cfg = sb.config(&db.url(), &watch_with_lock(&sb, &extra));

                // --explain shows the lock, its holder, and what decided — and, since no
                // real run counted it yet, that a real run would hold it to confirm.
                let o = check(&cfg, &["--explain"]);
                assert_exit(&o, 0);
                let out = stdout(&o);
                assert!(
                    out.lines().any(|l| l.contains("id=2")
                        && l.contains(" hung ")
                        && l.contains(&format!("lock held:{lock_pid}, owner none"))),
                    "{ctx}\n{out}"
                );
                assert!(
                    out.contains("because the heartbeat is stale, but the job's lock is held"),
                    "{ctx}\n{out}"
                );
                assert!(out.contains("confirming (1 of 2"), "{ctx}\n{out}");
                // Run 0 holds the hung row to confirm it (exit 0); run 1 acts on it; run 2
                // finds it parked (manual) or reports it again.
                for run in 0..4 {
                    next_cron_run(&sb);
                    let o = check(&cfg, &["--format", "json"]);
                    let parked = manual && run > 1;
                    // Exit 1 from the run that acts on, and while it stays parked.
                    assert_exit(&o, i32::from(run != 0));
                    let (rows, _) = json(&o);
                    if parked {
                        assert!(rows.is_empty(), "{ctx}: the row left 'running'");
                    } else {
                        let r = row(&rows, 2);
                        assert_eq!(r["verdict"], "hung", "{ctx}");
                        assert_eq!(r["lock"], "held", "{ctx}");
                        assert_eq!(r["lock_pid"], lock_pid, "{ctx}");
                        assert_eq!(r["conclusive"], false, "{ctx}");
                        assert_eq!(r["lock_release"], serde_json::Value::Null, "{ctx}");
                        let (action, held) = match (run, manual) {
                            (0, _) => ("none", serde_json::json!("confirming")),
                            (_, true) => ("mark_manual", serde_json::Value::Null),
                            (_, false) => ("none", serde_json::Value::Null),
                        };
                        assert_eq!(r["action"], action, "{ctx}: run {run}");
                        assert_eq!(r["held"], held, "{ctx}: run {run}");
                    }
                    assert_eq!(file_state(&lock), before, "{ctx}: run {run}");
                    assert!(lock_holders(&lock).contains(&lock_pid), "{ctx}");
                }
                assert_eq!(
                    db.status(2),
                    if manual { "wait_manual" } else { "running" },
                    "{ctx}"
                );
                drop(holder);
            }
        }
    }
}

#[test]
fn the_lock_outlives_its_flock1_wrapper_while_the_job_it_started_runs() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let lock = sb.lock_path(2);
    let mut wrapper = flock1_holder(&lock, true);
    // The wrapper dies; the sleep it started still holds the lock through the inherited
    // descriptor.
    wrapper.kill9();
    assert!(!lock_holders(&lock).is_empty(), "the child keeps the lock");
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, "confirm = 1\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["verdict"], "hung");
    assert_eq!(db.status(2), "running");
    // Find and end the orphaned sleep that holds it.
    let holder = lock_holders(&lock)[0];
    let orphan = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|d| {
                d.filter_map(std::result::Result::ok)
                    .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == lock))
            })
        });
    let orphan =
        orphan.unwrap_or_else(|| panic!("nobody has {} open (holder {holder})", lock.display()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(orphan),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the orphan");
    wait_until("the orphan's lock is gone", secs(10), || {
        lock_holders(&lock).is_empty()
    });
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["verdict"], "dead");
    assert_eq!(
        row(&rows, 2)["basis"],
        "nobody holds the job's lock (a try-lock got it), and the row is older than stale_after"
    );
    assert!(lock.exists(), "release_lock = never: the lock file stays");
}

/// A job that starts over and over beside the probe, counting the starts that found its
/// lock taken. `flock1`: as cron starts it, `flock -n LOCK job` (exit 99 on conflict), a few
/// hundred starts a second. `tight`: a process calling `flock(LOCK_EX | LOCK_NB)` and
/// unlocking in a loop, about a million attempts a second — enough to catch even a
/// try-lock that holds the lock for microseconds. Both stop when `stop` exists.
fn job_loop(kind: &str, lock: &Path, stop: &Path) -> std::process::Child {
    let (cmd, script) = match kind {
        "flock1" => (
            "bash",
            "n=0; fail=0; while [ ! -e \"$2\" ]; do flock -n -E 99 \"$1\" true; \
             [ $? -eq 99 ] && fail=$((fail+1)); n=$((n+1)); done; echo \"$n $fail\"",
        ),
        _ => (
            "python3",
            "import fcntl, os, sys\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             n = fail = 0\n\
             while n % 1000 or not os.path.exists(sys.argv[2]):\n\
             \x20   try:\n\
             \x20       fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
             \x20       fcntl.flock(fd, fcntl.LOCK_UN)\n\
             \x20   except BlockingIOError:\n\
             \x20       fail += 1\n\
             \x20   n += 1\n\
             print(n, fail)\n",
        ),
    };
    let mut c = Command::new(cmd);
    if cmd == "bash" {
        c.arg("-c").arg(script).arg("job-loop");
    } else {
        c.arg("-c").arg(script);
    }
    c.arg(lock)
        .arg(stop)
        .stdout(Stdio::piped())
        .spawn()
        .expect("job loop")
}

/// Stops a job loop and returns `(attempts, failures)`.
fn stop_loop(child: std::process::Child, stop: &Path) -> (u64, u64) {
    std::fs::write(stop, "").expect("stop");
    let o = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("job loop said {text:?}"))
        })
        .collect();
    std::fs::remove_file(stop).expect("unstop");
    (v[0], v[1])
}

#[test]
fn the_probe_never_makes_a_starting_job_fail_its_own_flock_n() {
    if !have_python() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // A young row with a fresh heartbeat: alive whether the lock is held or not, so the
    // runs only probe and never write.
    db.insert(1, "running", 60);
    sb.heartbeat(1, secs(1));
    let lock = sb.lock_path(1);
    std::fs::write(&lock, "").expect("lock file");
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, ""));
    let stop = sb.path("stop");

    for kind in ["tight", "flock1"] {
        let jobs = job_loop(kind, &lock, &stop);
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        for _ in 0..40 {
            let o = check(&cfg, &["--format", "json"]);
            assert_exit(&o, 0);
            let (rows, _) = json(&o);
            assert_eq!(row(&rows, 1)["verdict"], "alive");
            *seen
                .entry(row(&rows, 1)["lock"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
        }
        let (attempts, failures) = stop_loop(jobs, &stop);
        assert_eq!(
            failures, 0,
            "{kind}: {failures} of {attempts} job starts failed beside the probe"
        );
        assert!(
            attempts > 40,
            "{kind}: the job loop ran beside the probes: {attempts}"
        );
        // The probes really overlapped the job loop: some saw the lock taken.
        assert!(
            seen.get("held").copied().unwrap_or(0) > 0,
            "{kind}: no probe saw the job's lock held: {seen:?}"
        );
    }
    assert_eq!(db.status(1), "running");
    assert!(sb.journal().is_empty());

    // Control: the tight loop beside a prober that try-locks for a moment now and then
    // (what a probe without /proc/locks does) fails, so the counts above could have caught
    // one. A round can miss when the two are seldom on the CPU together (a loaded machine
    // with two cores), so up to five rounds run, and one of them must show a failure.
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let jobs = job_loop("tight", &lock, &stop);
        let prober = Command::new("python3")
            .arg("-c")
            .arg(
                "import fcntl, os, sys, time\n\
                 for _ in range(200):\n\
                 \x20   fd = os.open(sys.argv[1], os.O_RDONLY)\n\
                 \x20   try:\n\
                 \x20       fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n\
                 \x20   except BlockingIOError:\n\
                 \x20       pass\n\
                 \x20   os.close(fd)\n\
                 \x20   time.sleep(0.002)\n",
            )
            .arg(&lock)
            .status()
            .expect("prober");
        assert!(prober.success());
        let (attempts, failures) = stop_loop(jobs, &stop);
        rounds.push((attempts, failures));
        if failures > 0 {
            break;
        }
    }
    assert!(
        rounds.iter().any(|&(_, failures)| failures > 0),
        "a try-lock prober never made the job fail ((attempts, failures) per round: \
         {rounds:?}): the count proves nothing"
    );
}

/// A killed worker whose lock is free is reclaimed once its heartbeat is stale: while the
/// row's own heartbeat is fresh, a free lock beside it is a contradiction that waits (a
/// wrong lock_file looks exactly like this), quietly, without even a try-lock; from the
/// first run that finds the heartbeat stale, the free lock acts at once — no confirming
/// run, no waiting for a second silence.
#[test]
fn a_worker_killed_with_sigkill_is_reclaimed_once_its_heartbeat_is_stale_and_its_lock_free() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 10 * MIN);
    let lock = sb.lock_path(2);
    let mut worker = flock1_holder(&lock, false);
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, ""));
    sb.heartbeat(2, secs(2));
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(2), "running");

    let before = file_state(&lock);
    worker.kill9();
    wait_until("the dead worker's lock is gone", secs(10), || {
        lock_holders(&lock).is_empty()
    });
    // Its heartbeat is still fresh: the free lock waits for it, quietly.
    sb.heartbeat(2, secs(3));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    let r = row(&rows, 2);
    assert_eq!(
        r["verdict"], "alive",
        "not even tried beside a fresh beat: {r}"
    );
    assert_eq!(r["lock"], "free_unconfirmed", "{r}");
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(2), "running");

    // The heartbeat goes stale: the very next run confirms the free lock and acts.
    sb.heartbeat(2, secs(5 * MIN + 30));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    let r = row(&rows, 2);
    assert_eq!(r["verdict"], "dead");
    assert_eq!(r["lock"], "free");
    assert_eq!(r["conclusive"], true);
    assert_eq!(r["applied"], true);
    let (_, status, ended, msg) = db.dump().remove(0);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(
        msg.starts_with("self-heal: dead: lock free, worker gone ("),
        "{msg}"
    );
    assert_eq!(file_state(&lock), before, "the lock file is never deleted");
}

/// A killed worker whose pid is gone is reclaimed once its heartbeat is stale: while the
/// row's own heartbeat is fresh the death waits (held as `contradicted`, quietly); the
/// first run that finds it stale acts at once. (With `stale_after = "2s"`: a gone pid
/// proves something only once the row is that old.)
#[test]
fn a_worker_killed_with_sigkill_is_reclaimed_once_its_pid_is_gone_and_its_heartbeat_stale() {
    let host = hostname();
    for (owner_form, reap) in [("HOST:PID", true), ("PID", true), ("HOST:PID", false)] {
        let ctx = format!("{owner_form}, reaped: {reap}");
        let sb = Sandbox::new();
        let db = SqliteDb::new(&sb);
        let mut worker = sleeper();
        // The worker claims its row after it started, as a worker does.
        std::thread::sleep(Duration::from_millis(50));
        db.insert(2, "running", 0);
        let owner = match owner_form {
            "PID" => worker.pid().to_string(),
            _ => format!("{host}:{}", worker.pid()),
        };
        set_owner(&db, 2, &owner);
        sb.heartbeat(2, secs(1));
        let cfg = sb.config(
            &db.url(),
            &sb.watch("owner_column = \"worker\"\n")
                .replace("stale_after = \"5m\"", "stale_after = \"2s\""),
        );
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json(&o);
        assert_eq!(row(&rows, 2)["verdict"], "alive", "{ctx}");
        assert_eq!(row(&rows, 2)["owner"], "alive", "{ctx}");
        assert_eq!(row(&rows, 2)["owner_pid"], worker.pid(), "{ctx}");

        if reap {
            worker.kill9();
        } else {
            // Killed, but its parent has not reaped it yet: a zombie is dead too.
            worker.kill9_no_reap();
            let pid = worker.pid();
            wait_until("the worker is a zombie", secs(10), || {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            });
        }
        // The row stale_after old, its own heartbeat fresh: the pid gone waits for it.
        std::thread::sleep(Duration::from_millis(2_200));
        sb.heartbeat(2, secs(0));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json(&o);
        let r = row(&rows, 2);
        assert_eq!(r["verdict"], "dead", "{ctx}: {r}");
        assert_eq!(r["owner"], "dead", "{ctx}");
        assert_eq!(r["held"], "contradicted", "{ctx}: {r}");
        assert_eq!(r["applied"], false, "{ctx}");
        assert_eq!(db.status(2), "running", "{ctx}");
        // Stale: only the pid says it is dead, and that acts at once.
        sb.heartbeat(2, secs(30));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json(&o);
        let r = row(&rows, 2);
        assert_eq!(r["verdict"], "dead", "{ctx}: {r}");
        assert_eq!(r["basis"], "the owner pid no longer exists", "{ctx}");
        assert_eq!(r["applied"], true, "{ctx}");
        assert!(r["total_age_s"].as_u64().unwrap_or(999) < 60, "{ctx}: {r}");
        assert_eq!(db.status(2), "error", "{ctx}");
        worker.reap();
    }
}

/// A live worker whose heartbeat stalled, for a watch with `stale_after = "1s"`: it starts
/// before its row (a worker claims its row after it started) and beat when it claimed it,
/// then not again. A worker cannot have beaten before its row started: a heartbeat older
/// than the row is an earlier row's (missing), so the row is two seconds old.
fn stalled_live_worker(sb: &Sandbox, db: &SqliteDb, id: i64) -> Proc {
    let worker = sleeper();
    std::thread::sleep(Duration::from_millis(2_500));
    db.insert(id, "running", 2);
    set_owner(db, id, &worker.pid().to_string());
    sb.heartbeat(id, secs(2));
    worker
}

#[test]
fn an_owner_pid_recycled_by_a_process_started_after_the_row_is_reused_not_alive() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // The row started an hour ago; its pid now belongs to a process started just now.
    db.insert(2, "running", 3_600);
    let recycled = sleeper();
    set_owner(&db, 2, &format!("{}:{}", hostname(), recycled.pid()));
    sb.heartbeat(2, secs(20));
    // And a worker that started before its row, whose heartbeat stalled: alive, so hung.
    let worker = stalled_live_worker(&sb, &db, 3);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nmanual_value = \"wait_manual\"\nconfirm = 1\n")
            .replace("stale_after = \"5m\"", "stale_after = \"1s\""),
    );

    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("owner reused:{}", recycled.pid())),
        "{out}"
    );
    assert!(
        out.contains(
            "because the owner pid belongs to a process started more than stale_after after \
             the row"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!("owner alive:{}", worker.pid())),
        "{out}"
    );
    assert!(
        out.contains("because the heartbeat is stale, but the owner pid is alive"),
        "{out}"
    );

    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json(&o);
    let r = row(&rows, 2);
    assert_eq!(
        (r["verdict"].as_str(), r["owner"].as_str()),
        (Some("dead"), Some("reused"))
    );
    assert_eq!(r["owner_pid"], recycled.pid());
    // Two clocks compared: an inference (here confirmed at once, confirm = 1).
    assert_eq!(r["conclusive"], false);
    assert_eq!(db.status(2), "error");
    let r = row(&rows, 3);
    assert_eq!(
        (r["verdict"].as_str(), r["owner"].as_str()),
        (Some("hung"), Some("alive"))
    );
    assert_eq!(r["action"], "mark_manual");
    assert_eq!(db.status(3), "wait_manual");
}

#[test]
fn an_owner_on_another_host_is_never_guessed() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 10 * MIN);
    // Pid 1 exists here, but the row names another host.
    set_owner(&db, 2, "web9.elsewhere.invalid:1");
    sb.heartbeat(2, secs(20));
    let cfg = sb.config(&db.url(), &sb.watch("owner_column = \"worker\"\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["owner"], "remote");
    assert_eq!(row(&rows, 2)["verdict"], "remote");
    assert_eq!(row(&rows, 2)["action"], "none");
}

// ---------------------------------------------------------------------------------------
// release_lock = "if_free": legacy jobs whose lock is the file's mere existence

/// A legacy job's lock file: created by the job, holding its pid, never kernel-locked.
pub(crate) fn legacy_lock(sb: &Sandbox, id: i64, pid: u32) -> std::path::PathBuf {
    let p = sb.lock_path(id);
    std::fs::write(&p, format!("{pid}\n")).expect("legacy lock");
    p
}

#[test]
fn a_dead_legacy_job_s_lock_file_is_removed_after_its_row_was_marked() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let gone = exited_pid();
    let lock = legacy_lock(&sb, 2, gone);
    let cfg = sb.config(
        &db.url(),
        &watch_with_lock(&sb, "release_lock = \"if_free\"\nconfirm = 1\n"),
    );

    // A dry run says what it would do and removes nothing.
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("lock present"), "{out}");
    assert!(
        out.contains("a real run would set status to 'error' (mark_dead), then remove the lock file if nobody holds it, the pid in it is dead and it is still the same file"),
        "{out}"
    );
    let o = check(&cfg, &["--dry-run", "--format", "json"]);
    assert_exit(&o, 0);
    assert_eq!(json(&o).0[0]["lock_release"], serde_json::Value::Null);
    assert!(lock.exists(), "a dry run removes nothing");
    assert_eq!(db.status(2), "running");

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("full-sync id=2: set status to 'error' (mark_dead)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "full-sync id=2: removed lock file {}: no kernel lock on it, pid {gone} in it is gone, inode unchanged",
            lock.display()
        )),
        "{out}"
    );
    assert!(!lock.exists());
    assert_eq!(db.status(2), "error");
    let journal = sb.journal();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0]["lock_release"], "removed");
    assert_eq!(journal[0]["lock_file"], lock.display().to_string());
    assert_eq!(journal[0]["to"], "error");
    // Nothing else in the directory went, and no private name is left behind.
    let mut left: Vec<String> = std::fs::read_dir(sb.dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["app.db", "hb-2", "selfheal.lock", "selfheal.toml", "state"]
    );
}

#[test]
fn a_legacy_lock_is_kept_and_reported_when_its_pid_lives_or_other_rows_share_it() {
    // A row marked dead on its heartbeat, while the pid in its lock file lives: the lock
    // stays and a person is told.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let worker = sleeper();
    let lock = legacy_lock(&sb, 2, worker.pid());
    let before = file_state(&lock);
    let cfg = sb.config(
        &db.url(),
        &watch_with_lock(&sb, "release_lock = \"if_free\"\nconfirm = 1\n"),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, summary) = json(&o);
    let r = row(&rows, 2);
    assert_eq!(r["applied"], true);
    assert_eq!(r["lock_release"], "kept");
    assert_eq!(
        r["lock_release_detail"],
        format!("pid {} written in it is alive", worker.pid())
    );
    assert_eq!(r["attention"], true);
    assert_eq!(summary["locks_released"], 0);
    assert_eq!(file_state(&lock), before);
    assert_eq!(sb.journal()[0]["lock_release"], "kept");

    // Text: the change, then the kept lock as a line for a person.
    db.conn()
        .execute("UPDATE sync_log SET status = 'running' WHERE id = 2", [])
        .expect("reset");
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains(&format!(
            "full-sync id=2: needs a person: lock file {} kept (pid {} written in it is alive); the job cannot start again while it is there",
            lock.display(),
            worker.pid()
        )),
        "{}",
        stdout(&o)
    );

    // One lock file named by two running rows (no {id}): never released for one of them.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    db.insert(3, "running", 60);
    sb.heartbeat(3, secs(5));
    let shared = sb.path("sync.lock");
    std::fs::write(&shared, "").expect("lock");
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            shared.display()
        )),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["lock_release"], "kept");
    assert!(
        row(&rows, 2)["lock_release_detail"]
            .as_str()
            .unwrap_or("")
            .contains("1 running row names it now (counted after the write)"),
        "{}",
        row(&rows, 2)
    );
    assert!(shared.exists());
    assert_eq!(db.status(3), "running");
}

#[test]
fn with_release_lock_never_or_for_hung_and_overtime_rows_the_lock_file_stays() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // overtime: beating, 5 h in.
    db.insert(4, "running", 5 * 3600);
    sb.heartbeat(4, secs(10));
    let lock4 = legacy_lock(&sb, 4, exited_pid());
    // hung: a live owner whose heartbeat stalled.
    let _worker = stalled_live_worker(&sb, &db, 5);
    let lock5 = legacy_lock(&sb, 5, exited_pid());
    let states = [file_state(&lock4), file_state(&lock5)];
    let cfg = sb.config(
        &db.url(),
        &watch_with_lock(
            &sb,
            "release_lock = \"if_free\"\nowner_column = \"worker\"\nmanual_value = \"wait_manual\"\n\
             confirm = 1\n",
        )
        .replace("stale_after = \"5m\"", "stale_after = \"1s\""),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 4)["verdict"], "overtime");
    assert_eq!(row(&rows, 4)["applied"], true);
    assert_eq!(row(&rows, 5)["verdict"], "hung");
    assert_eq!(row(&rows, 5)["applied"], true);
    for id in [4, 5] {
        assert_eq!(row(&rows, id)["lock_release"], serde_json::Value::Null);
    }
    assert_eq!([file_state(&lock4), file_state(&lock5)], states);
    assert_eq!(
        (db.status(4).as_str(), db.status(5).as_str()),
        ("error", "wait_manual")
    );

    // release_lock = "never" (the default): a dead row's file stays too.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let lock = legacy_lock(&sb, 2, exited_pid());
    let before = file_state(&lock);
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, "confirm = 1\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["applied"], true);
    assert_eq!(row(&rows, 2)["lock_release"], serde_json::Value::Null);
    assert_eq!(file_state(&lock), before);
}

#[test]
fn a_dead_legacy_job_whose_lock_file_is_already_gone_is_simply_marked() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * MIN);
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(
        &db.url(),
        &watch_with_lock(&sb, "release_lock = \"if_free\"\nconfirm = 1\n"),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json(&o);
    assert_eq!(row(&rows, 2)["lock"], "absent");
    assert_eq!(row(&rows, 2)["lock_release"], "absent");
    assert_eq!(row(&rows, 2)["attention"], false);
    assert!(!sb.lock_path(2).exists(), "nothing was created");
    db.conn()
        .execute("UPDATE sync_log SET status = 'running' WHERE id = 2", [])
        .expect("reset");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
}

// ---------------------------------------------------------------------------------------
// lock_file in JSON and the journal is the path the lock probe looked at

#[test]
fn lock_file_in_json_and_the_journal_is_the_probed_path() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // 1 alive, its lock held; 2 dead: the lock file exists and nobody holds it, its
    // heartbeat stale (conclusive, written at once); 3 alive, no lock file at all.
    db.insert(1, "running", 40 * MIN);
    sb.heartbeat(1, secs(5));
    let _holder = flock1_holder(&sb.lock_path(1), false);
    db.insert(2, "running", 20 * MIN);
    sb.heartbeat(2, secs(6 * MIN));
    std::fs::write(sb.lock_path(2), "").expect("lock file");
    db.insert(3, "running", 10 * MIN);
    sb.heartbeat(3, secs(5));
    let cfg = sb.config(&db.url(), &watch_with_lock(&sb, ""));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 1)["lock"], "held");
    for id in 1..=3 {
        assert_eq!(
            row(&rows, id)["lock_file"],
            sb.lock_path(id).display().to_string(),
            "{}",
            row(&rows, id)
        );
    }
    assert_eq!(row(&rows, 2)["lock"], "free");
    assert_eq!(row(&rows, 2)["applied"], true);
    let journal = sb.journal();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0]["id"], 2);
    assert_eq!(
        journal[0]["lock_file"],
        sb.lock_path(2).display().to_string()
    );
    assert_eq!(journal[0]["lock_release"], serde_json::Value::Null);
    assert!(
        sb.lock_path(2).exists(),
        "the job's lock file is never deleted"
    );
}
