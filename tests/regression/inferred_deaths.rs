//! Live jobs marked dead on an inference that their own sign of life should have overruled:
//! an owner pid that was a launcher's or another pid namespace's, a misspelt heartbeat
//! directory, a lock swapped by another user, two runs a second apart, a legacy lock
//! recreated while selfheal looked away, two watches one row matched. Each through the
//! real binary with real processes, real locks and real files.

use std::path::Path;
use std::process::Command;

use crate::check::evidence::KillOnDrop;
use crate::common::*;

/// A launcher's exited pid in the owner column got its live worker's row marked dead.
///
/// A launcher claims the row with its own pid, starts the worker and exits; the worker
/// holds the row's own lock (`{id}` in the template) and beats. The owner pid is gone, the
/// job is not: never marked, and the note says why.
#[test]
fn a_worker_whose_owner_is_its_exited_launcher_is_judged_by_its_heartbeat() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.lock_path(1);
    // The launcher: a shell that starts the worker in the background and exits.
    let launcher = Command::new("sh")
        .arg("-c")
        .arg("flock --no-fork \"$1\" sleep 600 >/dev/null 2>&1 & echo $$")
        .arg("sh")
        .arg(&lock)
        .output()
        .expect("launcher");
    let launcher_pid: u32 = String::from_utf8_lossy(&launcher.stdout)
        .trim()
        .parse()
        .expect("launcher pid");
    wait_until("the worker takes its lock", secs(10), || {
        !lock_holders(&lock).is_empty()
    });
    let worker = lock_holders(&lock)[0];
    // The test owns the worker now (it was reparented away from the launcher).
    let _reaper = KillOnDrop(worker);
    assert!(
        !Path::new(&format!("/proc/{launcher_pid}")).exists(),
        "the launcher is gone"
    );
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &format!("{}:{launcher_pid}", hostname()));
    beat_now(&sb, 1);
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nowner_column = \"worker\"\n",
            sb.lock_template()
        )),
    );

    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "alive", "{r}");
    assert_eq!(r["owner"], "dead", "{r}");
    assert_eq!(r["lock"], "held", "{r}");
    assert_eq!(r["overruled"], "owner_dead", "{r}");
    assert_eq!(r["action"], "none", "{r}");
    let explain = check(&cfg, &["--explain"]);
    assert_exit(&explain, 0);
    assert!(
        stdout(&explain)
            .contains("overruled: the owner pid no longer exists, but the row's own lock is held"),
        "{}",
        stdout(&explain)
    );
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(1), "running");

    // Its heartbeat stalls while it holds its lock: hung, for a person; never dead.
    sb.heartbeat(1, secs(40 * MIN));
    for run in 0..3 {
        let (_, rows, _) = json_check(&cfg, &[]);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "hung", "run {run}: {r}");
        assert_eq!(r["overruled"], "owner_dead", "run {run}: {r}");
        assert_eq!(db.status(1), "running", "run {run}");
    }
}

/// A container's worker wrote a pid of its own namespace, gone on the host: marked dead.
///
/// A worker in a pid namespace of its own (a container sharing the host's name) writes a
/// pid of its namespace into the owner column: from the host that pid is gone (here it is
/// made one the host does not have), or some other process. The worker holds the row's own
/// lock and beats: never marked.
#[test]
fn a_worker_in_another_pid_namespace_is_never_marked_by_its_pid() {
    if !root_or_skip("unshare --pid") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.lock_path(1);
    let pidfile = sb.path("nspid");
    // A pid the host does not have now: the worker's pid in its own namespace.
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(32_768);
    let nspid = (max / 2..max)
        .rev()
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    let _worker = Proc::spawn(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c"])
            .arg(
                "echo $(($3 - 1)) > /proc/sys/kernel/ns_last_pid; \
                 sh -c 'echo $$ > \"$1\"; exec flock --no-fork \"$2\" sleep 600' sh \"$1\" \"$2\"",
            )
            .arg("sh")
            .arg(&pidfile)
            .arg(&lock)
            .arg(nspid.to_string()),
    );
    wait_until("the worker takes its lock", secs(10), || {
        !lock_holders(&lock).is_empty() && pidfile.exists()
    });
    let written = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .to_string();
    assert_eq!(
        written,
        nspid.to_string(),
        "the worker's pid in its namespace"
    );
    db.insert(1, "running", 20 * MIN);
    set_owner(&db, 1, &format!("{}:{nspid}", hostname()));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nowner_column = \"worker\"\n",
            sb.lock_template()
        )),
    );
    for run in 0..3 {
        beat_now(&sb, 1);
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 0);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "alive", "run {run} (owner pid {nspid}): {r}");
        assert_eq!(r["owner"], "dead", "run {run}: {r}");
        assert_eq!(r["lock"], "held", "run {run}: {r}");
        assert_eq!(db.status(1), "running", "run {run}");
    }
}

/// A misspelt heartbeat directory read as every heartbeat missing: live jobs reclaimed.
///
/// The heartbeat directory misspelt. Every heartbeat is unusable, not missing: rows that
/// nothing proves dead go to a person naming the path, run after run; a row whose owner pid
/// is gone (conclusive) is still reclaimed.
#[test]
fn a_misspelt_heartbeat_directory_never_reclaims_live_jobs() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert(id, "running", 20 * MIN);
    }
    set_owner(&db, 4, &exited_pid().to_string());
    let typo = format!("{}/nodir/progress-{{id}}.json", sb.dir.path().display());
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nconfirm = 1\n")
            .replace(&sb.heartbeat_template(), &typo),
    );
    for run in 0..3 {
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 1);
        for id in 1..=3 {
            let r = row(&rows, id);
            assert_eq!(r["verdict"], "unknown", "run {run}: {r}");
            assert!(
                r["basis"].as_str().expect("basis").contains("nodir"),
                "run {run}: {r}"
            );
            assert_eq!(
                r["heartbeat"].as_str().map(|h| h.starts_with("unusable")),
                Some(true)
            );
            assert_eq!(db.status(id), "running", "run {run}");
        }
        if run == 0 {
            let r = row(&rows, 4);
            assert_eq!(r["verdict"], "dead", "{r}");
            assert_eq!(r["applied"], true, "{r}");
        }
    }
    assert_eq!(db.status(4), "error");
    let explain = check(&cfg, &["--explain"]);
    assert!(stdout(&explain).contains("nodir"), "{}", stdout(&explain));
}

/// A lock file another user swapped in a 0777 directory read as free: a live job reclaimed.
///
/// `selfheal run --lock shared/lock-1` in a 0777 directory; another user moves the locked
/// file aside and puts a new one under its name. The new file is free, but in such a
/// directory a free lock proves nothing: judged by the heartbeat, which is fresh. Said
/// once, with the fix; `doctor` says it too.
#[test]
fn a_lock_swapped_in_a_directory_others_can_write_is_never_taken_as_free() {
    if !root_or_skip("another user swapping the lock file") {
        return;
    }
    let sb = Sandbox::new();
    chmod(sb.dir.path(), 0o755);
    let db = SqliteDb::new(&sb);
    let shared = sb.path("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o777);
    let lock = shared.join("lock-1");
    let _job = Proc::spawn(
        Command::new(bin())
            .arg("run")
            .arg("--lock")
            .arg(&lock)
            .args(["--", "sleep", "600"]),
    );
    wait_until("the wrapped job holds its lock", secs(10), || {
        !lock_holders(&lock).is_empty()
    });
    db.insert(1, "running", 20 * MIN);
    beat_now(&sb, 1);
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}/lock-{{id}}\"\nconfirm = 1\n",
            shared.display()
        )),
    );
    // The swap, as another user.
    let swapped = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ])
        .arg("-c")
        .arg("mv \"$1/lock-1\" \"$1/.x\" && touch \"$1/lock-1\"")
        .arg("sh")
        .arg(&shared)
        .output()
        .expect("swap");
    assert!(swapped.status.success(), "{swapped:?}");
    assert!(
        lock_holders(&lock).is_empty(),
        "the name now holds a free file"
    );

    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "alive", "{r}");
    assert_eq!(r["lock"], "free_untrusted", "{r}");
    assert_eq!(db.status(1), "running");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("every user can write"), "{err}");
    assert!(err.contains("chmod o-w,g-w"), "{err}");
    assert_eq!(db.status(1), "running");
    // Once per remind_every.
    let o = check(&cfg, &[]);
    assert_eq!(stderr(&o), "");
    let d = selfheal()
        .arg("doctor")
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("doctor");
    let text = stdout(&d);
    assert!(
        text.lines()
            .any(|l| l.starts_with("! watch full-sync: lock_file: ")
                && l.contains("every user")
                && l.contains("chmod o-w,g-w")
                && l.contains(&shared.display().to_string())),
        "{text}"
    );
    assert_exit(&d, 1);
}

/// An operator's run a second after cron's confirmed a death: a short stall became a kill.
///
/// Cron's run and an operator's hand run a second later confirm nothing; a run `stale_after
/// / 2` after the first does.
#[test]
fn two_runs_a_second_apart_confirm_nothing() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * MIN);
    sb.heartbeat(1, secs(MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch("")
            .replace("stale_after = \"5m\"", "stale_after = \"10s\""),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(row(&rows, 1)["confirmations"], 1);
    for run in 0..3 {
        std::thread::sleep(secs(1));
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 0);
        let r = row(&rows, 1);
        assert_eq!(r["held"], "confirming", "hand run {run}: {r}");
        assert_eq!(r["confirmations"], 1, "hand run {run}: {r}");
        assert_eq!(db.status(1), "running", "hand run {run}");
    }
    std::thread::sleep(secs(3));
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(db.status(1), "error");
}

/// `if_free` deleted a new worker's lock made where the dead one's was (its inode reused).
///
/// Under `release_lock = "if_free"`, the dead worker's lock file is deleted and a new
/// worker's made in its place while selfheal writes its intents (the first fdatasync,
/// delayed by strace). ext4 gives the new file the old inode number more often than not;
/// the file judged is held open, so its number is never given away and the new worker's
/// lock is kept.
#[test]
fn a_legacy_lock_recreated_after_the_judgement_is_kept() {
    if !have_tool("strace", &["-V"], "delaying selfheal's first fdatasync") {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 50 * MIN);
    sb.heartbeat(1, secs(40 * MIN));
    let lock = sb.lock_path(1);
    std::fs::write(&lock, "").expect("the dead worker's lock");
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            sb.lock_template()
        )),
    );
    let mut run = Command::new("strace");
    run.args([
        "-f",
        "-o",
        "/dev/null",
        "-e",
        "inject=fdatasync:delay_enter=1500000:when=1",
    ])
    .arg(bin())
    .arg("check")
    .arg("--config")
    .arg(&cfg)
    .args(["--format", "json"])
    .env_remove("SELFHEAL_CONFIG")
    .stdout(std::process::Stdio::piped());
    let child = run.spawn().expect("strace");
    // Once the intents are being written, the row was judged: a new worker starts.
    let pending = sb.state_dir().join("pending.jsonl");
    wait_until("selfheal writes its intents", secs(20), || pending.exists());
    std::fs::remove_file(&lock).expect("rm");
    std::fs::write(&lock, "").expect("the new worker's lock");
    let o = child.wait_with_output().expect("wait");
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(r["lock_release"], "kept", "{r}");
    assert!(
        r["lock_release_detail"]
            .as_str()
            .is_some_and(|d| d.contains("replaced by another file")),
        "{r}"
    );
    assert!(lock.exists(), "the new worker's lock is kept");
}

/// Two watches' `match` values, one value to MariaDB, judged a live row by the wrong cap.
///
/// Two watches whose `match` values differ only in case or accents are one value to
/// MariaDB's default `utf8mb4_general_ci`: a row would be judged by the wrong watch's rules
/// (the issue: a live row judged by the other watch's 15-minute max_age). The configuration
/// refuses them; `check` and `doctor` ask the server itself, under the column's collation,
/// for what no offline rule foresees (`straße` is `strase` there).
#[test]
fn match_values_one_to_the_database_are_an_overlap() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("ALTER TABLE sync_log ADD COLUMN job VARCHAR(32) NOT NULL DEFAULT 'full-sync'");
    let sb = Sandbox::new();
    let two = |a: &str, b: &str| {
        format!(
            "{}match = {{ job = \"{a}\" }}\n\n[[watch]]\nname = \"other\"\ntable = \"sync_log\"\n\
             started_column = \"start_time\"\nheartbeat_file = \"{}\"\nstale_after = \"1m\"\n\
             max_age = \"15m\"\nmatch = {{ job = \"{b}\" }}\n",
            sb.watch(""),
            sb.heartbeat_template()
        )
    };
    for (a, b) in [("full-sync", "fúll-sync"), ("full-sync", "FULL-SYNC")] {
        let cfg = sb.config(&db.url, &two(a, b));
        let o = check(&cfg, &["--dry-run"]);
        assert_exit(&o, 2);
        assert!(
            stderr(&o).contains("watch 'other': match") && stderr(&o).contains("judged twice"),
            "{a} {b}: {}",
            stderr(&o)
        );
    }
    // Apart to the configuration, one value to the server: check asks it too.
    let cfg = sb.config(&db.url, &two("straße", "strase"));
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("job = 'straße' and 'strase' are one value under"),
        "{}",
        stderr(&o)
    );
    let d = selfheal()
        .arg("doctor")
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("doctor");
    assert_exit(&d, 2);
    let text = stdout(&d);
    assert!(
        text.lines().any(|l| l.starts_with("✗ watch other: match")
            && l.contains("watch 'full-sync'")
            && l.contains("utf8mb4_general_ci")),
        "{text}"
    );
    // Values the server tells apart pass.
    let cfg = sb.config(&db.url, &two("full-sync", "full_sync"));
    let d = selfheal()
        .arg("doctor")
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("doctor");
    assert!(!stdout(&d).contains(": match"), "{}", stdout(&d));
}
