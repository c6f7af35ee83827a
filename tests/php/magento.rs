//! The Magento recipes of `docs/recipes.md`, read from that file, against real runners
//! that follow the application's own order of steps on MariaDB's `cron_schedule`:
//! `magento2_cron.php` (Magento 2: the job's named lock, the pending → running
//! compare-and-set, `executed_at`, the work, the lock released, the final status) and
//! `openmage_cron.php` (Magento 1/OpenMage with Aoe_Scheduler's `host`/`pid`, under
//! `flock` as the recipe's crontab runs it). Killed runs are reclaimed by the next `check`,
//! live and hung ones never touched, and the next run of a job code a dead row blocked
//! starts once it is reclaimed.
//!
//! Skipped outside CI when php or a MariaDB server is missing; fails in CI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command};

use crate::common::*;

fn have_php() -> bool {
    have_tool(
        "php",
        &["-r", "exit(extension_loaded('pdo_mysql') ? 0 : 1);"],
        "php-cli with pdo_mysql",
    )
}

/// The TOML of the recipe marked `<!-- recipe: NAME -->` in `docs/recipes.md`.
fn recipe(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/recipes.md");
    let text = std::fs::read_to_string(&path).expect("docs/recipes.md");
    let marker = format!("<!-- recipe: {name} -->\n```toml\n");
    let start = text
        .find(&marker)
        .unwrap_or_else(|| panic!("no recipe {name}"))
        + marker.len();
    let len = text[start..].find("```").expect("the recipe's block ends");
    text[start..start + len].to_string()
}

/// The recipe as a configuration file for this test's database (and lock file).
fn config_of(sb: &Sandbox, db: &MysqlDb, name: &str, lock: Option<&Path>) -> PathBuf {
    let mut toml = recipe(name);
    let url_line = toml
        .lines()
        .find(|l| l.starts_with("url = "))
        .expect("a url")
        .to_string();
    toml = toml.replace(&url_line, &format!("url = \"{}\"", db.url));
    if let Some(lock) = lock {
        toml = toml.replace("/var/lock/magento-cron.lock", &lock.display().to_string());
    }
    toml = toml.replace(
        "[database]",
        &format!(
            "[run]\nstate_dir = \"{}\"\n\n[database]",
            sb.state_dir().display()
        ),
    );
    sb.file("selfheal.toml", &toml, 0o644)
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

/// Magento's `cron_schedule`, as its `db_schema.xml` declares it; with Aoe_Scheduler's
/// `host` and `pid` columns when `aoe`.
fn create_cron_schedule(db: &mut MysqlDb, aoe: bool) {
    let aoe = if aoe {
        "host VARCHAR(255) NULL, pid VARCHAR(255) NULL,"
    } else {
        ""
    };
    db.exec(&format!(
        "CREATE TABLE cron_schedule (
           schedule_id INT UNSIGNED NOT NULL AUTO_INCREMENT,
           job_code VARCHAR(255) NOT NULL DEFAULT '0',
           status VARCHAR(7) NOT NULL DEFAULT 'pending',
           messages TEXT NULL,
           created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
           scheduled_at TIMESTAMP NULL DEFAULT NULL,
           executed_at TIMESTAMP NULL DEFAULT NULL,
           finished_at TIMESTAMP NULL DEFAULT NULL,
           {aoe}
           PRIMARY KEY (schedule_id),
           KEY CRON_SCHEDULE_JOB_CODE_STATUS_SCHEDULED_AT (job_code, status, scheduled_at),
           KEY CRON_SCHEDULE_SCHEDULED_AT_STATUS (scheduled_at, status)
         ) ENGINE=InnoDB"
    ));
}

/// A pending run of `job` scheduled `ago_s` seconds ago, as Magento's schedule generation
/// writes it.
fn schedule(db: &mut MysqlDb, job: &str, ago_s: u64) {
    db.exec(&format!(
        "INSERT INTO cron_schedule (job_code, status, created_at, scheduled_at) VALUES \
         ('{job}', 'pending', UTC_TIMESTAMP() - INTERVAL {ago_s} SECOND, \
          UTC_TIMESTAMP() - INTERVAL {ago_s} SECOND)"
    ));
}

fn status_of(db: &mut MysqlDb, id: i64) -> (String, Option<String>) {
    let rows: Vec<(String, Option<String>)> = db.query(&format!(
        "SELECT status, messages FROM cron_schedule WHERE schedule_id = {id}"
    ));
    rows.into_iter().next().expect("the row")
}

/// One run of a runner script, its output read line by line.
struct Run {
    proc: Proc,
    out: BufReader<ChildStdout>,
    /// The lock name the runner took (Magento 2).
    lock: Option<String>,
}

impl Run {
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("runner output");
        line.trim().to_string()
    }

    /// Waits for "running ID PID": the row is running and its work goes on.
    fn running(&mut self) -> i64 {
        let line = self.line();
        let mut f = line.split_whitespace();
        assert_eq!(f.next(), Some("running"), "runner said {line:?}");
        f.next().and_then(|v| v.parse().ok()).expect("id")
    }
}

/// Starts a Magento 2 cron run of `job` in `group`, working for `work` seconds.
fn magento2(db: &MysqlDb, group: &str, job: &str, work: u64) -> Run {
    let (dsn, user, pass) = pdo(db);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php/magento2_cron.php");
    let mut cmd = Command::new("php");
    cmd.arg(script)
        .args([
            "--dsn", &dsn, "--user", &user, "--group", group, "--job", job,
        ])
        .args(["--work", &work.to_string()])
        .env("DB_PASSWORD", pass);
    let mut proc = Proc::spawn_piped(&mut cmd);
    let mut run = Run {
        out: BufReader::new(proc.child.stdout.take().expect("stdout")),
        proc,
        lock: None,
    };
    let line = run.line();
    run.lock = line.strip_prefix("lock ").map(str::to_string);
    assert!(run.lock.is_some(), "runner said {line:?}");
    run
}

fn judged(cfg: &Path, real: bool) -> (Vec<serde_json::Value>, serde_json::Value, i32) {
    let args: &[&str] = if real {
        &["--format", "json"]
    } else {
        &["--format", "json", "--dry-run"]
    };
    let o = check(cfg, args);
    let code = o.status.code().unwrap_or(-1);
    let (rows, summary) = json_lines(&o);
    (rows, summary, code)
}

/// SIGKILL to the run's whole process group (`flock` and the `php` it started), then reaps.
fn kill_group(p: &mut Proc) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(p.pid()).expect("a pid"));
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    p.reap();
}

const JOB: &str = "indexer_reindex_all_invalid";

#[test]
fn magento2_a_killed_cron_run_is_reclaimed_and_the_blocked_job_code_runs_again() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() {
        return;
    }
    create_cron_schedule(&mut db, false);
    let sb = Sandbox::new();
    let cfg = config_of(&sb, &db, "magento2", None);
    schedule(&mut db, JOB, 600);
    let mut first = magento2(&db, "index", JOB, 600);
    let id = first.running();

    // Alive: its named lock is held, and the holder is named.
    let (rows, _, code) = judged(&cfg, true);
    assert_eq!(code, 0);
    let r = row(&rows, id);
    assert_eq!(r["verdict"], "alive", "{r}");
    assert_eq!(r["db_lock"], "held", "{r}");
    assert!(r["db_lock_holder"]["connection"].as_u64().is_some(), "{r}");

    first.proc.kill9();
    // ... ten minutes into its work.
    db.exec(&format!(
        "UPDATE cron_schedule SET executed_at = UTC_TIMESTAMP() - INTERVAL 10 MINUTE \
         WHERE schedule_id = {id}"
    ));
    // The dead row blocks its job code: Magento's next run of it cannot start.
    schedule(&mut db, JOB, 60);
    let mut blocked = magento2(&db, "index", JOB, 1);
    assert_eq!(blocked.line(), "blocked");
    blocked.proc.reap();

    // One check: the lock is free and the row older than stale_after — conclusive.
    let (rows, summary, code) = judged(&cfg, true);
    assert_eq!(code, 0, "{summary}");
    let r = row(&rows, id);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["db_lock"], "free", "{r}");
    assert_eq!(r["action"], "mark_dead", "{r}");
    let (status, messages) = status_of(&mut db, id);
    assert_eq!(status, "error");
    let messages = messages.unwrap_or_default();
    assert!(
        messages.starts_with("self-heal: dead: named lock free, worker gone"),
        "{messages}"
    );
    let journal = sb.journal();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0]["db_lock"], "free", "{}", journal[0]);

    // The job code runs again.
    let mut next = magento2(&db, "index", JOB, 1);
    let next_id = next.running();
    assert_ne!(next_id, id);
    assert_eq!(next.line(), format!("done {next_id}"));
    next.proc.reap();
    assert_eq!(status_of(&mut db, next_id).0, "success");
}

#[test]
fn magento2_a_live_run_a_day_old_is_never_touched() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() {
        return;
    }
    create_cron_schedule(&mut db, false);
    let sb = Sandbox::new();
    let cfg = config_of(&sb, &db, "magento2", None);
    schedule(&mut db, JOB, 60);
    let mut run = magento2(&db, "index", JOB, 600);
    let id = run.running();
    // A 25-hour indexer: scheduled and started 25 hours ago, still working.
    db.exec(&format!(
        "UPDATE cron_schedule SET scheduled_at = UTC_TIMESTAMP() - INTERVAL 25 HOUR, \
         executed_at = UTC_TIMESTAMP() - INTERVAL 25 HOUR WHERE schedule_id = {id}"
    ));
    for _ in 0..3 {
        let (rows, _, code) = judged(&cfg, true);
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "overtime", "{r}");
        assert!(
            r["basis"]
                .as_str()
                .is_some_and(|b| b.contains("provably lives")),
            "{r}"
        );
        assert_eq!(r["action"], "none", "{r}");
        assert_eq!(code, 1, "overtime goes to a person");
        assert_eq!(status_of(&mut db, id), ("running".to_string(), None));
    }
    assert!(sb.journal().is_empty());
    run.proc.kill9();
}

#[test]
fn magento2_a_hung_run_holding_its_lock_is_never_dead() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() {
        return;
    }
    create_cron_schedule(&mut db, false);
    let sb = Sandbox::new();
    let cfg = config_of(&sb, &db, "magento2", None);
    schedule(&mut db, JOB, 3_600);
    // Stuck: it holds its lock and makes no progress at all, its row an hour old.
    let mut run = magento2(&db, "index", JOB, 3_600);
    let id = run.running();
    db.exec(&format!(
        "UPDATE cron_schedule SET executed_at = UTC_TIMESTAMP() - INTERVAL 1 HOUR \
         WHERE schedule_id = {id}"
    ));
    for _ in 0..3 {
        let (rows, _, code) = judged(&cfg, true);
        let r = row(&rows, id);
        assert_ne!(r["verdict"], "dead", "{r}");
        assert_eq!(r["action"], "none", "{r}");
        assert_eq!(code, 0, "{r}");
        assert_eq!(status_of(&mut db, id).0, "running");
    }
    run.proc.kill9();
}

#[test]
fn magento2_the_lock_name_is_the_one_magento_holds() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() {
        return;
    }
    create_cron_schedule(&mut db, false);
    let sb = Sandbox::new();
    let cfg = config_of(&sb, &db, "magento2", None);
    // One run per group the recipe names, each holding the lock Magento builds.
    let mut runs = Vec::new();
    for (group, job) in [
        ("default", "sales_clean_quotes"),
        ("index", JOB),
        ("consumers", "consumers_runner"),
    ] {
        schedule(&mut db, job, 600);
        let mut run = magento2(&db, group, job, 600);
        let id = run.running();
        let name = run.lock.clone().expect("a lock name");
        let md5 = selfheal::config::md5_hex(format!("{group}_{job}").as_bytes());
        assert_eq!(name, format!("{}|CRON_{md5}", db.name));
        runs.push((run, id, name));
    }
    let o = check(&cfg, &["--explain"]);
    let text = stdout(&o);
    for (_, id, name) in &runs {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("id={id} ")))
            .unwrap_or_else(|| panic!("row {id} in {text}"));
        assert!(line.contains("named lock held:connection "), "{line}");
        assert!(line.contains(name.as_str()), "{line}");
    }
    // doctor lists each running row's names and holders.
    let o = doctor(&cfg);
    let f = finding(&o, "watch 'magento-cron': named locks");
    for (_, id, name) in &runs {
        assert!(f.contains(&format!("row {id}: ")), "{f}");
        assert!(f.contains(&format!("{name} held by connection")), "{f}");
    }
    for (mut run, ..) in runs {
        run.proc.kill9();
    }
}

/// Starts a Magento 1/OpenMage cron run of `job` as the recipe's crontab does (under
/// `flock -n` on `lock`), with Aoe_Scheduler's `host` and `pid`.
fn openmage(db: &MysqlDb, lock: &Path, job: &str, work: u64) -> Run {
    let (dsn, user, pass) = pdo(db);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php/openmage_cron.php");
    let mut cmd = Command::new("flock");
    cmd.arg("-n")
        .arg(lock)
        .arg("php")
        .arg(script)
        .args(["--dsn", &dsn, "--user", &user, "--job", job])
        .args(["--work", &work.to_string()])
        .env("DB_PASSWORD", pass);
    let mut proc = Proc::spawn_piped(&mut cmd);
    Run {
        out: BufReader::new(proc.child.stdout.take().expect("stdout")),
        proc,
        lock: None,
    }
}

#[test]
fn openmage_with_aoe_a_killed_run_is_reclaimed_and_a_live_one_never_touched_by_its_pid() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() || !have_tool("flock", &["--version"], "flock(1)") {
        return;
    }
    create_cron_schedule(&mut db, true);
    let sb = Sandbox::new();
    let lock = sb.path("magento-cron.lock");
    let cfg = config_of(&sb, &db, "openmage-aoe", Some(&lock));
    schedule(&mut db, "catalog_product_index_price_reindex_all", 600);
    let mut run = openmage(&db, &lock, "catalog_product_index_price_reindex_all", 600);
    let id = run.running();
    let (rows, _, code) = judged(&cfg, true);
    let r = row(&rows, id);
    assert_eq!(r["verdict"], "alive", "{r}");
    assert_eq!(r["owner"], "alive", "{r}");
    assert_eq!(code, 0);

    // Live: checked again and again, never touched. (A row a day old cannot be faked
    // here: its owner pid started now, and a pid that started a day after its row is
    // taken as recycled; the Magento 2 test covers a run past max_age.)
    for _ in 0..3 {
        let (rows, _, code) = judged(&cfg, true);
        let r = row(&rows, id);
        assert_eq!(r["verdict"], "alive", "{r}");
        assert_eq!(code, 0, "{r}");
        assert_eq!(status_of(&mut db, id), ("running".to_string(), None));
    }
    assert!(sb.journal().is_empty());

    // Killed (php and the flock holding the lock for it): reclaimed by the next check.
    kill_group(&mut run.proc);
    // ... ten minutes into its work (a dead pid's start is never compared).
    db.exec(&format!(
        "UPDATE cron_schedule SET executed_at = UTC_TIMESTAMP() - INTERVAL 10 MINUTE \
         WHERE schedule_id = {id}"
    ));
    let (rows, summary, code) = judged(&cfg, true);
    let r = row(&rows, id);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["action"], "mark_dead", "{r}");
    assert_eq!(code, 0, "{summary}");
    assert_eq!(status_of(&mut db, id).0, "error");

    // The next cron run of the job code starts.
    schedule(&mut db, "catalog_product_index_price_reindex_all", 60);
    let mut next = openmage(&db, &lock, "catalog_product_index_price_reindex_all", 1);
    let next_id = next.running();
    assert_eq!(next.line(), format!("done {next_id}"));
    next.proc.reap();
}

#[test]
fn openmage_without_aoe_is_judged_by_the_cron_process_lock() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_php() || !have_tool("flock", &["--version"], "flock(1)") {
        return;
    }
    // (The runner writes Aoe's columns; this recipe reads none of them.)
    create_cron_schedule(&mut db, true);
    let sb = Sandbox::new();
    let lock = sb.path("magento-cron.lock");
    let cfg = config_of(&sb, &db, "openmage", Some(&lock));
    let code_of_job = "core_email_queue_send_all";
    schedule(&mut db, code_of_job, 600);
    let mut run = openmage(&db, &lock, code_of_job, 600);
    let id = run.running();
    for _ in 0..2 {
        let (rows, _, code) = judged(&cfg, true);
        let r = row(&rows, id);
        assert_eq!(
            (r["verdict"].as_str(), r["lock"].as_str()),
            (Some("alive"), Some("held")),
            "{r}"
        );
        assert_eq!(code, 0, "{r}");
    }
    // The cron process killed: its lock is free, the row older than stale_after.
    kill_group(&mut run.proc);
    let (rows, summary, code) = judged(&cfg, true);
    let r = row(&rows, id);
    assert_eq!(
        (r["verdict"].as_str(), r["lock"].as_str()),
        (Some("dead"), Some("free")),
        "{r}"
    );
    assert_eq!(code, 0, "{summary}");
    assert_eq!(status_of(&mut db, id).0, "error");
}
