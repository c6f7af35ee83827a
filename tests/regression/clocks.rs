//! Live jobs marked dead, parked or retried because a comparison of two clocks was taken as
//! proof: only a fact about now — the owner pid does not exist, the job's lock is free — is
//! conclusive. A worker a dispatcher starts seconds after inserting its row, a row an
//! application's session time zone wrote hours off (or into the future), a lock swapped in a
//! directory others can write beside a hung worker, a person's decision on a row that beats,
//! and a person's `--as running` the next run undid. Through the real binary with real
//! processes, real locks and real files.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use crate::common::*;

fn set_owner(db: &SqliteDb, id: i64, pid: u32) {
    db.conn()
        .execute(
            "UPDATE sync_log SET worker = ?1 WHERE id = ?2",
            rusqlite::params![format!("{}:{pid}", hostname()), id],
        )
        .expect("owner");
}

/// A row inserted `ahead` seconds in the future, as an application whose session time zone
/// is east of the database's writes `NOW()` into a DATETIME column.
fn insert_ahead(db: &SqliteDb, id: i64, ahead: u64) {
    db.insert_at(id, "running", SystemTime::now() + secs(ahead));
}

/// Busy loops on every core, until dropped: a dispatcher's exec under load.
fn load() -> Vec<Proc> {
    (0..2)
        .map(|_| Proc::spawn(Command::new("sh").arg("-c").arg("while :; do :; done")))
        .collect()
}

fn resolve(cfg: &Path, args: &[&str]) -> Output {
    selfheal()
        .arg("resolve")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .expect("resolve")
}

// ---------------------------------------------------------------------------------------
// A dispatcher: the row first, the worker seconds later

/// A worker started seconds after its row (a dispatcher under load) was taken as reused.
///
/// The app inserts the `running` row, then (under load) starts the worker, which writes its
/// own `HOST:PID` into the row: the process started seconds after its row, well within
/// `stale_after`. It is the row's worker, never a "reused" pid.
#[test]
fn a_worker_dispatched_seconds_after_its_row_is_its_worker() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 0);
    let worker = {
        let _busy = load();
        std::thread::sleep(secs(3));
        sleeper()
    };
    set_owner(&db, 1, worker.pid());
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nstale_after = \"1m\"\n")
            .replace("stale_after = \"5m\"\n", ""),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "starting", "{r}");
    assert_eq!(r["owner"], "alive", "{r}");
    assert_eq!(r["action"], "none", "{r}");
    cron_check_is_silent(&cfg);
    assert_eq!(db.status(1), "running");
}

/// A pid started after its row was proof of reuse, even beside the row's own fresh beat.
///
/// Past `stale_after`, a pid that started after its row is only an inference: with nothing
/// of the row's own for it, `dead` — held until confirmed, and counted by the breaker; with
/// the row's own fresh heartbeat beside it, the pid is the worker and the row's times are
/// wrong: `unknown`, never marked.
#[test]
fn a_pid_that_started_after_its_row_is_an_inference_that_the_rows_own_life_beats() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 8);
    db.insert(2, "running", 8);
    let (w1, w2) = (sleeper(), sleeper());
    set_owner(&db, 1, w1.pid());
    set_owner(&db, 2, w2.pid());
    beat_now(&sb, 2);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nstale_after = \"2s\"\nmax_age = \"1h\"\n")
            .replace("stale_after = \"5m\"\nmax_age = \"4h\"\n", ""),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    let r1 = row(&rows, 1);
    assert_eq!(r1["verdict"], "dead", "{r1}");
    assert!(
        r1["basis"]
            .as_str()
            .is_some_and(|b| b.contains("most likely a recycled pid")),
        "{r1}"
    );
    assert_eq!(r1["conclusive"], false, "{r1}");
    assert_eq!(r1["held"], "confirming", "{r1}");
    assert_eq!(r1["action"], "none", "{r1}");
    let r2 = row(&rows, 2);
    assert_eq!(r2["verdict"], "unknown", "{r2}");
    assert_eq!(r2["action"], "none", "{r2}");
    assert!(
        r2["reason"]
            .as_str()
            .is_some_and(|m| m.contains("row times wrong: owner pid")),
        "{r2}"
    );
    assert_exit(&o, 1);
    let explain = stdout(&check(&cfg, &["--explain"]));
    assert!(
        explain.contains("the row's own heartbeat is fresh: it is the row's worker, and the row's times are wrong"),
        "{explain}"
    );
    assert_eq!(db.status(1), "running");
    assert_eq!(db.status(2), "running");
}

// ---------------------------------------------------------------------------------------
// Times an application's session time zone wrote

/// A worker whose session time zone wrote its row five hours off was judged overtime.
///
/// A worker whose connection ran `SET time_zone = '-05:00'` wrote its row's start five
/// hours "earlier" than selfheal reads it; its process then looks started five hours after
/// the row, and the row far past `max_age`. Its own heartbeat file beats: it is the worker,
/// the row's times are wrong — `unknown` with the offset, never `overtime`.
#[test]
fn a_worker_whose_session_time_zone_wrote_its_row_hours_off_is_never_overtime() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 5 * HOUR + 3);
    let worker = sleeper();
    set_owner(&db, 1, worker.pid());
    beat_now(&sb, 1);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nconfirm = 1\n"),
    );
    for _ in 0..2 {
        let (o, rows, _) = json_check(&cfg, &[]);
        assert_exit(&o, 1);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "unknown", "{r}");
        assert_eq!(r["action"], "none", "{r}");
        assert_eq!(r["owner"], "reused", "{r}");
        let o = check(&cfg, &[]);
        assert_exit(&o, 1);
        assert_eq!(db.status(1), "running");
    }
    let d = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    let text = stdout(&d);
    assert!(
        text.lines().any(|l| l.contains("watch full-sync: times")
            && l.contains("older than its worker")
            && l.contains("row 1")),
        "{text}"
    );
    assert!(text.contains("session time_zone"), "{text}");
}

/// A hung worker whose row looked older than its process was marked dead as a reused pid.
///
/// A hung worker of such a row (alive, its heartbeat stale) is the row's worker too: its
/// own heartbeat file was touched after its process started, which a recycled pid never
/// does. `unknown`, never dead.
#[test]
fn a_hung_worker_whose_row_looks_older_than_it_is_never_dead() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 5 * HOUR);
    let worker = sleeper();
    set_owner(&db, 1, worker.pid());
    // It beat a moment after it started, then stopped beating.
    std::thread::sleep(Duration::from_millis(1_500));
    sb.heartbeat_at(1, SystemTime::now());
    std::thread::sleep(Duration::from_millis(3_500));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(
            "owner_column = \"worker\"\nstale_after = \"2s\"\nmax_age = \"1h\"\nconfirm = 1\n",
        )
        .replace("stale_after = \"5m\"\nmax_age = \"4h\"\n", ""),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "unknown", "{r}");
    assert_eq!(r["action"], "none", "{r}");
    assert_exit(&o, 1);
    assert_exit(&check(&cfg, &[]), 1);
    assert_eq!(db.status(1), "running");
}

/// A row a session time zone wrote hours ahead was judged by those times, not by now.
///
/// A row written eight hours into the future (a `+08:00` session) is judged by the facts
/// about now alone: a live worker's row is `unknown` with the offset (never overtime, never
/// dead); a killed worker's row is reclaimed once selfheal itself has seen it for
/// `stale_after` — not left `unknown` forever.
#[test]
fn a_row_whose_times_lie_in_the_future_is_judged_by_the_facts_about_now() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    insert_ahead(&db, 1, 8 * HOUR);
    insert_ahead(&db, 2, 8 * HOUR);
    let live = sleeper();
    set_owner(&db, 1, live.pid());
    set_owner(&db, 2, exited_pid());
    let cfg = sb.config(
        &db.url(),
        &sb.watch("owner_column = \"worker\"\nstale_after = \"2s\"\nmax_age = \"1h\"\n")
            .replace("stale_after = \"5m\"\nmax_age = \"4h\"\n", ""),
    );
    // The first sighting: neither acts yet.
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 1);
    for id in [1, 2] {
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "unknown", "{r}");
        assert!(r["ahead_s"].as_u64().is_some_and(|a| a > 7 * HOUR), "{r}");
    }
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(2), "running", "seen for the first time");
    std::thread::sleep(secs(3));
    let o = check(&cfg, &[]);
    let out = stdout(&o);
    assert!(out.contains("id=2"), "{out}");
    assert_eq!(
        db.status(2),
        "error",
        "the gone pid acts once seen for stale_after"
    );
    assert_eq!(db.status(1), "running", "the live one is never touched");
    let j = sb.journal();
    let e = j.iter().find(|e| e["id"] == 2).expect("journaled");
    assert_eq!(e["basis"], "owner_dead", "{e}");
    assert_eq!(e["conclusive"], true, "{e}");
    let explain = stdout(&check(&cfg, &["--explain"]));
    assert!(
        explain.contains("in the future") && explain.contains("no fact about now"),
        "{explain}"
    );
}

// ---------------------------------------------------------------------------------------
// A swapped lock beside a hung worker

/// A lock swapped in a 0777 directory turned a hung job into a retry: a second copy ran.
///
/// A hung worker holds its lock in a 0777 directory, its heartbeat 20 minutes old; another
/// user moves the locked file aside and touches a new one. The new file is free, but a free
/// lock there proves nothing — and a stale heartbeat alone cannot tell `hung` from `dead`:
/// `unknown`, never a retry that starts a second copy beside the first.
#[test]
fn a_swapped_lock_never_turns_a_hung_job_into_a_retry() {
    if !root_or_skip("another user swapping the lock file") {
        return;
    }
    let sb = Sandbox::new();
    std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let db = SqliteDb::new(&sb);
    let shared = sb.path("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let lock = shared.join("sync-1.lock");
    let _job = flock1_holder(&lock, false);
    db.insert(1, "running", 40 * MIN);
    sb.heartbeat(1, secs(20 * MIN));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}/sync-{{id}}.lock\"\nconfirm = 1\nretry_value = \"pending\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3\n",
            shared.display()
        )),
    );
    let (_, rows, _) = json_check(&cfg, &[]);
    assert_eq!(row(&rows, 1)["verdict"], "hung");
    let swapped = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ])
        .arg("-c")
        .arg("mv \"$1/sync-1.lock\" \"$1/.old\" && touch \"$1/sync-1.lock\"")
        .arg("sh")
        .arg(&shared)
        .output()
        .expect("swap");
    assert!(swapped.status.success(), "{swapped:?}");
    for _ in 0..2 {
        let (o, rows, _) = json_check(&cfg, &[]);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "unknown", "{r}");
        assert!(
            r["basis"]
                .as_str()
                .is_some_and(|b| b.contains("hung and dead cannot be told apart")),
            "{r}"
        );
        assert_eq!(r["action"], "none", "{r}");
        assert_exit(&o, 1);
        assert_exit(&check(&cfg, &[]), 1);
        assert_eq!(db.status(1), "running");
    }
}

// ---------------------------------------------------------------------------------------
// A person's side

/// `resolve --as dead` sent a row whose own heartbeat column still beat to be retried.
///
/// `resolve --as dead` on a row whose own heartbeat column beats (no lock, no owner) is
/// refused: a typo'd id must not retry a beating job. `--force` overrides.
#[test]
fn resolve_refuses_to_mark_a_row_that_beats() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 20 * MIN);
    db.exec("UPDATE sync_log SET heartbeat_at = datetime('now') WHERE id = 1");
    let cfg = sb.config(
        &db.url(),
        &sb.watch("heartbeat_column = \"heartbeat_at\"\nmanual_value = \"wait_manual\"\n"),
    );
    let o = resolve(&cfg, &["full-sync", "1", "--as", "dead"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("refused") && out.contains("its own heartbeat is fresh"),
        "{out}"
    );
    assert_eq!(db.status(1), "running");
    let o = resolve(&cfg, &["full-sync", "1", "--as", "dead", "--force"]);
    assert_exit(&o, 0);
    assert_eq!(db.status(1), "error");
}

/// `show --format json` offered a hand-run UPDATE for a beating row resolve would refuse.
///
/// `show --format json` offers the statement a person would run by hand only where
/// `resolve` itself would act without `--force`: not for a row that beats.
#[test]
fn show_offers_sql_only_where_resolve_would_act() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 5 * HOUR);
    db.insert(2, "running", 5 * HOUR);
    beat_now(&sb, 1);
    sb.heartbeat(2, secs(2 * HOUR));
    let cfg = sb.config(&db.url(), &sb.watch("overtime = \"report\"\n"));
    let o = selfheal()
        .args(["show", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    let beating = row(&rows, 1);
    assert_eq!(beating["verdict"], "overtime", "{beating}");
    assert!(beating["sql"].is_null(), "{beating}");
    let silent = row(&rows, 2);
    assert!(
        silent["sql"]
            .as_str()
            .is_some_and(|s| s.starts_with("UPDATE")),
        "{silent}"
    );
}

/// The next run parked again an overtime row a person had just resolved `--as running`.
///
/// A person's `--as running` on a row parked for `overtime` sticks: the next runs do not
/// park it again for that reason while its heartbeat beats; once the heartbeat is stale, it
/// is judged again (and parked again).
#[test]
fn a_persons_running_sticks_until_the_evidence_changes() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let lock = sb.lock_path(1);
    let _job = flock1_holder(&lock, false);
    db.insert(1, "running", 5 * HOUR);
    beat_now(&sb, 1);
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
            sb.lock_template()
        )),
    );
    // The lock is held: an overtime with its worker alive goes to a person.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "wait_manual");
    let o = resolve(
        &cfg,
        &[
            "full-sync",
            "1",
            "--as",
            "running",
            "--note",
            "a long import",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(db.status(1), "running");
    for _ in 0..2 {
        let (o, rows, _) = json_check(&cfg, &[]);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "overtime", "{r}");
        assert_eq!(r["held"], "person", "{r}");
        assert_eq!(r["action"], "none", "{r}");
        assert_exit(&o, 0);
        cron_check_is_silent(&cfg);
        assert_eq!(db.status(1), "running");
    }
    let explain = stdout(&check(&cfg, &["--explain"]));
    assert!(
        explain.contains("a person's decision holds the row"),
        "{explain}"
    );
    // Its heartbeat goes stale: the evidence changed, and it goes to a person again.
    sb.heartbeat(1, secs(20 * MIN));
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "wait_manual");
}

/// A shell worker takes its row's own lock through a child (`flock lock-1 …`): the lock is
/// held by that child, not by the owner pid itself. Its row looks five hours old (a session
/// time zone) and its heartbeat cannot be used (a misspelt directory): the lock held by the
/// owner's own child still proves the owner is the worker — `unknown` (the row's times are
/// wrong), never an overtime that parks it.
#[test]
fn a_shell_workers_lock_held_by_its_child_proves_it_is_the_worker() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 5 * HOUR + 10);
    let lock = sb.lock_path(1);
    let worker = Proc::spawn(
        Command::new("sh")
            .arg("-c")
            .arg("flock \"$1\" sleep 600; :")
            .arg("sh")
            .arg(&lock),
    );
    wait_until("the worker's child takes the lock", secs(10), || {
        !lock_holders(&lock).is_empty()
    });
    assert_ne!(
        lock_holders(&lock),
        [i64::from(worker.pid())],
        "a child holds it"
    );
    set_owner(&db, 1, worker.pid());
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "owner_column = \"worker\"\nlock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
            sb.lock_template()
        ))
        .replace(
            &sb.heartbeat_template(),
            "/nonexistent/selfheal-test/hb-{id}",
        ),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "unknown", "{r}");
    assert!(
        r["basis"]
            .as_str()
            .is_some_and(|b| b.contains("the row's own lock is held by that pid")),
        "{r}"
    );
    assert_eq!(r["action"], "none", "{r}");
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "running");
}

/// A shell worker takes its row's own lock on its own descriptor (`exec 9>>lock-1;
/// flock -n 9`): `/proc/locks` names the `flock` child that took it, which has exited,
/// while the shell keeps the lock through descriptor 9. Its row looks five hours old (a
/// session time zone) and its heartbeat cannot be used: the owner having the row's own held
/// lock file open proves it the worker — `unknown`, never an overtime that parks it.
#[test]
fn a_shell_worker_holding_its_lock_on_its_own_descriptor_is_the_worker() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 5 * HOUR + 10);
    let lock = sb.lock_path(1);
    let worker = Proc::spawn(
        Command::new("bash")
            .arg("-c")
            .arg("exec 9>>\"$1\"; flock -n 9 || exit 75; while :; do sleep 600 9>&-; done")
            .arg("bash")
            .arg(&lock),
    );
    wait_until("the worker's flock takes the lock", secs(10), || {
        !lock_holders(&lock).is_empty()
    });
    let holder = lock_holders(&lock)[0];
    assert_ne!(holder, i64::from(worker.pid()), "flock(1) took it");
    wait_until("the flock child exits", secs(10), || {
        !Path::new(&format!("/proc/{holder}")).exists()
    });
    set_owner(&db, 1, worker.pid());
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "owner_column = \"worker\"\nlock_file = \"{}\"\nmanual_value = \"wait_manual\"\n",
            sb.lock_template()
        ))
        .replace(
            &sb.heartbeat_template(),
            "/nonexistent/selfheal-test/hb-{id}",
        ),
    );
    let (o, rows, _) = json_check(&cfg, &[]);
    let r = row(&rows, 1);
    assert_eq!(r["verdict"], "unknown", "{r}");
    assert_eq!(r["lock"], "held", "{r}");
    assert!(
        r["basis"]
            .as_str()
            .is_some_and(|b| b.contains("the row's own lock is held by that pid")),
        "{r}"
    );
    assert_eq!(r["action"], "none", "{r}");
    assert_exit(&o, 1);
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.status(1), "running");
}
