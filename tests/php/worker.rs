//! A real PHP worker (php-cli with pdo_mysql, `tests/php/worker.php`) against a real
//! MariaDB `sync_log`: it flocks its lock file, inserts its `running` row with its owner
//! as HOST:PID, touches its heartbeat file every second, and sets `done` with an empty
//! message on success. selfheal must never touch it while it lives, reclaim its row at once
//! once it is killed (after which a second worker takes the same lock and completes), and
//! call it `hung` — never `dead` — when its heartbeat stalls while the process lives.
//!
//! Skipped outside CI when php or a MariaDB server is missing; fails in CI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command};
use std::time::{Duration, SystemTime};

use crate::common::*;

fn have_php() -> bool {
    have_tool(
        "php",
        &["-r", "exit(extension_loaded('pdo_mysql') ? 0 : 1);"],
        "php-cli with pdo_mysql",
    )
}

/// PDO's DSN, user and password for the test database.
fn pdo(db: &MysqlDb) -> (String, String, String) {
    let opts = mysql::Opts::from_url(&db.url).expect("url");
    let dsn = match opts.get_socket() {
        Some(sock) => format!("mysql:unix_socket={sock};dbname={}", db.name),
        None => format!(
            "mysql:host={};port={};dbname={}",
            opts.get_ip_or_hostname(),
            opts.get_tcp_port(),
            db.name
        ),
    };
    (
        dsn,
        opts.get_user().unwrap_or("root").to_string(),
        opts.get_pass().unwrap_or("").to_string(),
    )
}

struct Worker {
    proc: Proc,
    out: BufReader<ChildStdout>,
    id: i64,
}

impl Worker {
    /// Starts `tests/php/worker.php` and waits until its row is in.
    fn start(db: &MysqlDb, sb: &Sandbox, work: u64, stall_after: Option<u64>) -> Worker {
        let (dsn, user, pass) = pdo(db);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php/worker.php");
        let mut cmd = Command::new("php");
        cmd.arg(script)
            .args(["--dsn", &dsn, "--user", &user, "--lock"])
            .arg(lock_file(sb))
            .arg("--heartbeat")
            .arg(sb.heartbeat_template())
            .args(["--work", &work.to_string()])
            .env("DB_PASSWORD", pass);
        if let Some(n) = stall_after {
            cmd.args(["--stall-after", &n.to_string()]);
        }
        let mut proc = Proc::spawn_piped(&mut cmd);
        let mut out = BufReader::new(proc.child.stdout.take().expect("stdout"));
        let line = read_line(&mut out);
        let mut f = line.split_whitespace();
        assert_eq!(f.next(), Some("started"), "worker said {line:?}");
        let id: i64 = f.next().and_then(|v| v.parse().ok()).expect("id");
        let pid: u32 = f.next().and_then(|v| v.parse().ok()).expect("pid");
        assert_eq!(pid, proc.pid(), "php runs as the process we started");
        Worker { proc, out, id }
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    fn expect(&mut self, what: &str) {
        let line = read_line(&mut self.out);
        assert!(
            line.starts_with(what),
            "expected {what:?}, worker said {line:?}"
        );
    }

    /// Waits for the worker to finish on its own and checks it succeeded.
    fn finish(mut self) {
        self.expect("done");
        let status = self.proc.child.wait().expect("wait");
        self.proc.reap();
        assert!(status.success(), "worker exit status {status:?}");
    }
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("worker output");
    line.trim().to_string()
}

/// The job's one lock file, as legacy jobs have (`runtime/sync.lock`).
fn lock_file(sb: &Sandbox) -> PathBuf {
    sb.path("sync.lock")
}

fn config(db: &MysqlDb, sb: &Sandbox, extra: &str) -> PathBuf {
    sb.config(
        &db.url,
        &format!(
            "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nlock_file = \"{}\"\nowner_column = \"worker\"\n\
             stale_after = \"5s\"\nmax_age = \"1h\"\nended_column = \"end_time\"\n\
             message_column = \"error_msg\"\n{extra}",
            sb.heartbeat_template(),
            lock_file(sb).display()
        ),
    )
}

fn heartbeat_age(sb: &Sandbox, id: i64) -> Duration {
    std::fs::metadata(sb.path(&format!("hb-{id}")))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default()
}

#[test]
fn a_live_php_worker_is_never_touched_and_finishes_clean() {
    let mut db = mysql_or_skip!();
    if !have_php() {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = config(&db, &sb, "");
    let worker = Worker::start(&db, &sb, 7, None);
    let before = db.dump();
    for run in 0..4 {
        std::thread::sleep(Duration::from_millis(1_000));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, summary) = json_lines(&o);
        let r = row(&rows, worker.id);
        assert_eq!(r["verdict"], "alive", "run {run}: {r}");
        assert_eq!(r["lock"], "held", "{r}");
        assert_eq!(r["lock_pid"], worker.pid(), "{r}");
        assert_eq!(r["owner"], "alive", "{r}");
        assert_eq!(r["owner_pid"], worker.pid(), "{r}");
        assert_eq!(summary["changed"], 0);
        // The cron form says nothing.
        cron_check_is_silent(&cfg);
        assert_eq!(db.dump(), before, "run {run}");
    }
    let id = worker.id;
    worker.finish();
    assert_eq!(db.row(id), ("done".to_string(), true, String::new()));
    cron_check_is_silent(&cfg);
    assert!(sb.journal().is_empty(), "nothing was ever changed");
}

#[test]
fn a_killed_php_worker_is_reclaimed_and_the_next_worker_takes_the_lock_and_completes() {
    let mut db = mysql_or_skip!();
    if !have_php() {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = config(&db, &sb, "");
    let mut first = Worker::start(&db, &sb, 600, None);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let lock = file_state(&lock_file(&sb));

    first.proc.kill9();
    // Its heartbeat is still fresh; its row is seconds old. The pid is gone and the lock
    // free, but the row's own heartbeat is fresh: the death waits for it, quietly — alive
    // while the row is younger than stale_after (a gone pid then proves nothing yet),
    // contradicted after.
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, first.id);
    assert!(
        r["verdict"] == "alive" || (r["verdict"] == "dead" && r["held"] == "contradicted"),
        "{r}"
    );
    assert_eq!(r["action"], "none", "{r}");
    assert_eq!(db.row(first.id).0, "running");
    // Reclaimed on the first run after it went stale (stale_after 5 s).
    wait_until("the dead worker's heartbeat goes stale", secs(20), || {
        heartbeat_age(&sb, first.id) > secs(6)
    });
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, first.id);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["owner"], "dead", "{r}");
    assert_eq!(r["lock"], "free", "{r}");
    assert_eq!(r["basis"], "the owner pid no longer exists");
    assert_eq!(r["applied"], true);
    let (status, ended, msg) = db.row(first.id);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(msg.starts_with("self-heal: dead: "), "{msg}");
    assert!(
        msg.starts_with(&format!(
            "self-heal: dead: owner pid {} gone (",
            first.pid()
        )) && msg.contains(", lock free"),
        "{msg}"
    );
    assert_eq!(
        file_state(&lock_file(&sb)),
        lock,
        "the job's lock file is never deleted"
    );

    // A retry: the second worker takes the very same lock and completes.
    let second = Worker::start(&db, &sb, 2, None);
    assert_ne!(second.id, first.id);
    let id = second.id;
    second.finish();
    assert_eq!(db.row(id), ("done".to_string(), true, String::new()));
    assert_eq!(file_state(&lock_file(&sb)).1, lock.1, "one inode, one lock");
    cron_check_is_silent(&cfg);
    assert_eq!(db.row(first.id).0, "error");
    assert_eq!(sb.journal().len(), 1);
}

#[test]
fn a_php_worker_whose_heartbeat_stalls_while_it_lives_is_hung_never_dead() {
    let mut db = mysql_or_skip!();
    if !have_php() {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let mut worker = Worker::start(&db, &sb, 600, Some(1));
    worker.expect("stalled");
    wait_until("the heartbeat goes stale", secs(20), || {
        heartbeat_age(&sb, worker.id) > secs(6)
    });
    let lock = file_state(&lock_file(&sb));

    // Without manual_value: the first run holds the verdict to confirm it (a stall shorter
    // than a cron period must not mail anyone), exit 0.
    let cfg = config(&db, &sb, "");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    let r = row(&rows, worker.id);
    assert_eq!(
        (&r["verdict"], &r["action"], &r["held"]),
        (
            &serde_json::json!("hung"),
            &serde_json::json!("none"),
            &serde_json::json!("confirming")
        ),
        "{r}"
    );
    assert_eq!(summary["attention"], 0);
    // Confirmed by the next runs: reported, exit 1, the row left alone.
    for _ in 0..2 {
        next_cron_run(&sb);
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 1);
        let (rows, summary) = json_lines(&o);
        let r = row(&rows, worker.id);
        assert_eq!(r["verdict"], "hung", "{r}");
        assert_eq!(
            r["basis"],
            "the heartbeat is stale, but the job's lock is held"
        );
        assert_eq!(r["lock_pid"], worker.pid());
        assert_eq!(r["owner"], "alive");
        assert_eq!(r["action"], "none");
        assert_eq!(summary["attention"], 1);
        assert_eq!(db.row(worker.id).0, "running");
    }
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains(&format!(
            "full-sync id={}: needs a person (hung)",
            worker.id
        )),
        "{}",
        stdout(&o)
    );

    // With manual_value: moved there for a person, still exit 1.
    let cfg = config(&db, &sb, "manual_value = \"wait_manual\"\n");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, worker.id)["action"], "mark_manual");
    let (status, ended, msg) = db.row(worker.id);
    assert_eq!(status, "wait_manual");
    assert!(
        !ended,
        "a row parked for a person is not ended: its worker still runs"
    );
    assert!(msg.starts_with("self-heal: hung: "), "{msg}");

    // The worker lives on, still holding its untouched lock.
    assert!(lock_holders(&lock_file(&sb)).contains(&i64::from(worker.pid())));
    assert_eq!(file_state(&lock_file(&sb)), lock);
}
