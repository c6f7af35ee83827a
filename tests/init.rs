//! `selfheal init` through the real binary against real schemas on MariaDB and SQLite:
//! Magento 2's `cron_schedule` with its own column types, Magento 1/OpenMage's with and
//! without Aoe_Scheduler's `host`, `pid` and `last_seen`, the seed's `sync_log` and a
//! `Selfheal\Lease` queue. Each proposal is written with `--write`, loads as TOML as
//! printed, and is then fed to `selfheal check --explain` and `selfheal doctor`, which
//! accept it (no configuration error); what init says about today's running rows is what
//! check says. A table without a start column and a missing table are refused in words
//! (exit 2, the job tables named, a fix to paste); `--write` never replaces a file;
//! nothing is written without it, and a large table without a status index is counted in
//! a bounded sample and said so.

use std::path::{Path, PathBuf};
use std::process::Output;

use selfheal::person::shell_word;

use crate::common::*;

/// Runs `selfheal init` with `args`.
fn init(args: &[&str]) -> Output {
    selfheal()
        .arg("init")
        .args(args)
        .output()
        .expect("run selfheal init")
}

/// A proposal for `table` written to `NAME.toml` in the sandbox: init exits 0, its whole
/// output loads as TOML and starts with the file's text. Returns the output and the file.
fn proposed(sb: &Sandbox, url: &str, table: &str, name: &str) -> (String, PathBuf) {
    let file = sb.path(&format!("{name}.toml"));
    let o = init(&[
        "--url",
        url,
        "--table",
        table,
        "--write",
        file.to_str().expect("utf-8 path"),
    ]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "", "init says everything on stdout");
    let out = stdout(&o);
    let written = std::fs::read_to_string(&file).expect("the --write file");
    assert!(
        out.starts_with(&written),
        "stdout is the file, then comments:\n{out}"
    );
    let rest = &out[written.len()..];
    assert!(
        rest.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "after the file, comments only:\n{rest}"
    );
    toml::from_str::<toml::Table>(&out).unwrap_or_else(|e| panic!("not TOML ({e}):\n{out}"));
    (out, file)
}

/// `check --explain` and `doctor` on the written file: neither finds a configuration
/// error; check exits `check_exit`. Returns both outputs.
fn accepted(file: &Path, check_exit: i32) -> (Output, Output) {
    let c = check(file, &["--explain"]);
    assert_exit(&c, check_exit);
    let d = doctor(file);
    assert!(
        matches!(d.status.code(), Some(0 | 1)),
        "doctor accepts it (0 or 1, not 2 or 3):\n{}{}",
        stdout(&d),
        stderr(&d)
    );
    assert!(
        stdout(&d)
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("✓ configuration: ")),
        "{}",
        stdout(&d)
    );
    (c, d)
}

/// The `--explain` line of row `id` (`  id=2    dead …`).
fn row_line(out: &str, id: i64) -> String {
    out.lines()
        .find(|l| {
            l.trim_start_matches('#')
                .trim_start()
                .starts_with(&format!("id={id} "))
        })
        .unwrap_or_else(|| panic!("no row {id} in\n{out}"))
        .to_string()
}

/// The comments of `out` as one line of words (comments wrap), to find a sentence in.
fn prose(out: &str) -> String {
    out.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `key = value` line of `key` as written (uncommented), if there is one.
fn setting<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(&format!("{key} = ")))
}

// ---------------------------------------------------------------------------------------
// MariaDB

/// Magento 2's `cron_schedule` as its `db_schema.xml` declares it, and `setup_module`.
const MAGENTO2: &str = "
CREATE TABLE setup_module (
  module varchar(50) NOT NULL PRIMARY KEY,
  schema_version varchar(50) DEFAULT NULL,
  data_version varchar(50) DEFAULT NULL
) ENGINE=InnoDB;
CREATE TABLE cron_schedule (
  schedule_id int(10) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Schedule ID',
  job_code varchar(255) NOT NULL DEFAULT '0' COMMENT 'Job Code',
  status varchar(7) NOT NULL DEFAULT 'pending' COMMENT 'Status',
  messages text DEFAULT NULL COMMENT 'Messages',
  created_at timestamp NOT NULL DEFAULT current_timestamp() COMMENT 'Created At',
  scheduled_at timestamp NULL DEFAULT NULL COMMENT 'Scheduled At',
  executed_at timestamp NULL DEFAULT NULL COMMENT 'Executed At',
  finished_at timestamp NULL DEFAULT NULL COMMENT 'Finished At',
  PRIMARY KEY (schedule_id),
  KEY CRON_SCHEDULE_JOB_CODE_STATUS_SCHEDULED_AT (job_code,status,scheduled_at)
) ENGINE=InnoDB COMMENT='Cron Schedule'";

/// Magento 1 / OpenMage's `cron_schedule` (install-1.6.0.0), `core_resource`, and
/// Aoe_Scheduler's columns when `aoe`.
fn magento1(aoe: bool) -> String {
    format!(
        "CREATE TABLE core_resource (
           code varchar(50) NOT NULL PRIMARY KEY,
           version varchar(50) DEFAULT NULL,
           data_version varchar(50) DEFAULT NULL
         ) ENGINE=InnoDB;
         CREATE TABLE cron_schedule (
           schedule_id int(10) unsigned NOT NULL AUTO_INCREMENT,
           job_code varchar(255) NOT NULL DEFAULT '0',
           status varchar(7) NOT NULL DEFAULT 'pending',
           messages text,
           created_at timestamp NOT NULL DEFAULT current_timestamp(),
           scheduled_at timestamp NULL DEFAULT NULL,
           executed_at timestamp NULL DEFAULT NULL,
           finished_at timestamp NULL DEFAULT NULL,
           {}
           PRIMARY KEY (schedule_id),
           KEY IDX_CRON_SCHEDULE_JOB_CODE (job_code),
           KEY IDX_CRON_SCHEDULE_SCHEDULED_AT_STATUS (scheduled_at,status)
         ) ENGINE=InnoDB",
        if aoe {
            "parameters text NULL,
             eta timestamp NULL DEFAULT NULL,
             host varchar(255) NULL,
             pid varchar(255) NULL,
             progress_message text NULL,
             last_seen timestamp NULL DEFAULT NULL,
             kill_request timestamp NULL DEFAULT NULL,
             scheduled_by int(10) unsigned NULL,
             scheduled_reason varchar(256) NULL,"
        } else {
            ""
        }
    )
}

/// The pid of a process that has ended.
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

fn exec_all(db: &mut MysqlDb, sql: &str) {
    for st in sql.split(';').filter(|s| !s.trim().is_empty()) {
        db.exec(st);
    }
}

#[test]
fn magento_2s_cron_schedule_is_one_watch_judged_by_the_jobs_named_lock() {
    // A database name short enough for Magento's lock name to fit 64 characters.
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    exec_all(&mut db, MAGENTO2);
    db.exec(
        "INSERT INTO cron_schedule (job_code, status, scheduled_at, executed_at, finished_at) \
         VALUES ('indexer_reindex_all_invalid', 'success', NOW() - INTERVAL 3 HOUR, \
                 NOW() - INTERVAL 3 HOUR, NOW() - INTERVAL 170 MINUTE), \
                ('catalog_product_alert', 'error', NOW() - INTERVAL 2 HOUR, \
                 NOW() - INTERVAL 2 HOUR, NOW() - INTERVAL 119 MINUTE), \
                ('indexer_reindex_all_invalid', 'running', NOW() - INTERVAL 30 MINUTE, \
                 NOW() - INTERVAL 30 MINUTE, NULL), \
                ('sales_clean_quotes', 'pending', NOW() + INTERVAL 5 MINUTE, NULL, NULL)",
    );
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "cron_schedule", "magento");
    assert!(
        prose(&out).contains("Recognised: Magento 2 / Mage-OS cron_schedule"),
        "{out}"
    );
    assert!(
        out.contains("\"{database}|CRON_{md5:index_{job_code}}\""),
        "the lock of each cron group: {out}"
    );
    assert!(
        prose(&out).contains("One watch for every job_code"),
        "{out}"
    );
    assert!(
        out.contains("started_column = \"executed_at\"") && out.contains("overtime = \"report\""),
        "{out}"
    );
    if selfheal::config::keys::watch_key("db_lock").is_none() {
        // This selfheal does not read named locks: no evidence of life, no watch.
        assert!(out.contains("\n# [[watch]]\n"), "{out}");
        assert!(out.contains("\n# db_lock = ["), "{out}");
        assert!(prose(&out).contains("Nothing to judge"), "{out}");
        let (c, d) = accepted(&file, 0);
        assert!(
            stdout(&c).contains("0 running rows in 0 watches"),
            "{}",
            stdout(&c)
        );
        assert!(finding(&d, "watches").starts_with("! "), "{}", stdout(&d));
    } else {
        assert!(setting(&out, "db_lock").is_some(), "{out}");
        let (c, _) = accepted(&file, 0);
        assert!(
            row_line(&stdout(&c), 3).contains("running"),
            "{}",
            stdout(&c)
        );
    }
}

#[test]
fn magento_1s_cron_schedule_with_aoe_scheduler_is_judged_by_last_seen() {
    let mut db = mysql_or_skip!();
    exec_all(&mut db, &magento1(true));
    let host = hostname();
    let gone = gone_pid();
    db.exec(&format!(
        "INSERT INTO cron_schedule (schedule_id, job_code, status, scheduled_at, executed_at, \
         finished_at, host, pid, last_seen) VALUES \
         (1, 'catalog_product_index_price_reindex_all', 'success', NOW() - INTERVAL 3 HOUR, \
          NOW() - INTERVAL 3 HOUR, NOW() - INTERVAL 2 HOUR, '{host}', '101', \
          NOW() - INTERVAL 2 HOUR), \
         (2, 'core_email_queue_send_all', 'running', NOW() - INTERVAL 50 MINUTE, \
          NOW() - INTERVAL 50 MINUTE, NULL, '{host}', '{gone}', NOW() - INTERVAL 40 MINUTE), \
         (3, 'newsletter_send_all', 'running', NOW(), NOW(), NULL, '{host}', '{me}', NOW())",
        me = std::process::id()
    ));
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "cron_schedule", "openmage");
    assert!(
        prose(&out).contains("with Aoe_Scheduler's host, pid and last_seen"),
        "{out}"
    );
    assert!(setting(&out, "heartbeat_column").is_some_and(|l| l.contains("\"last_seen\"")));
    assert!(setting(&out, "stale_after").is_some_and(|l| l.contains("\"15m\"")));
    for key in ["owner_host_column", "owner_pid_column"] {
        let known = selfheal::config::keys::watch_key(key).is_some();
        assert_eq!(setting(&out, key).is_some(), known, "{key}: {out}");
        assert!(
            out.contains(&format!("{key} = \"")),
            "{key} proposed: {out}"
        );
    }
    assert_eq!(
        setting(&out, "db_lock"),
        None,
        "Magento 1 takes no named lock"
    );
    // What init says about the rows is what check says.
    assert!(row_line(&out, 2).contains("dead"), "{out}");
    assert!(row_line(&out, 3).contains("alive"), "{out}");
    let (c, _) = accepted(&file, 0);
    let c = stdout(&c);
    assert!(row_line(&c, 2).contains("dead"), "{c}");
    assert!(row_line(&c, 3).contains("alive"), "{c}");
}

#[test]
fn magento_1s_cron_schedule_without_aoe_scheduler_leaves_nothing_to_judge_by() {
    let mut db = mysql_or_skip!();
    exec_all(&mut db, &magento1(false));
    db.exec(
        "INSERT INTO cron_schedule (job_code, status, executed_at) \
         VALUES ('core_email_queue_send_all', 'running', NOW() - INTERVAL 50 MINUTE)",
    );
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "cron_schedule", "magento1");
    assert!(
        prose(&out).contains(
            "Magento 1 / OpenMage / Maho cron_schedule (the database has Magento 1's \
             core_resource), without Aoe_Scheduler"
        ),
        "{out}"
    );
    assert!(
        out.contains("\n# [[watch]]\n"),
        "commented out whole: {out}"
    );
    assert!(
        prose(&out).contains("an age rule is what selfheal exists to replace"),
        "{out}"
    );
    let (_, d) = accepted(&file, 0);
    assert_exit(&d, 1);
}

#[test]
fn a_lease_queue_is_judged_by_its_heartbeat_column_and_its_owner() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("ALTER TABLE sync_log ADD retry_at DATETIME NULL");
    let host = hostname();
    let gone = gone_pid();
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, end_time, heartbeat_at, worker) VALUES \
         (1, 'done', NOW() - INTERVAL 3 HOUR, NOW() - INTERVAL 2 HOUR, NOW() - INTERVAL 2 HOUR, \
          '{host}:1'), \
         (2, 'running', NOW(), NULL, NOW(), '{host}:{me}'), \
         (3, 'running', NOW() - INTERVAL 30 MINUTE, NULL, NOW() - INTERVAL 20 MINUTE, \
          '{host}:{gone}'), \
         (4, 'pending', NULL, NULL, NULL, NULL)",
        me = std::process::id()
    ));
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "sync_log", "lease");
    assert!(
        prose(&out).contains("as Selfheal\\Lease writes them"),
        "{out}"
    );
    for (key, value) in [
        ("heartbeat_column", "\"heartbeat_at\""),
        ("owner_column", "\"worker\""),
        ("retry_value", "\"pending\""),
        ("attempts_column", "\"attempts\""),
        ("retry_at_column", "\"retry_at\""),
        ("success_values", "[\"done\"]"),
    ] {
        assert!(
            setting(&out, key).is_some_and(|l| l.contains(value)),
            "{key} = {value}: {out}"
        );
    }
    assert!(row_line(&out, 2).contains("alive"), "{out}");
    assert!(row_line(&out, 3).contains("dead"), "{out}");
    let (c, d) = accepted(&file, 0);
    let c = stdout(&c);
    assert!(row_line(&c, 3).contains("owner dead"), "{c}");
    assert!(
        finding(&d, "watch sync_log: index").starts_with("✓ "),
        "{}",
        stdout(&d)
    );
}

#[test]
fn the_seeds_sync_log_on_mariadb_waits_for_its_heartbeat_file() {
    let mut db = mysql_or_skip!();
    db.exec(
        "CREATE TABLE sync_log (
            id INT AUTO_INCREMENT PRIMARY KEY,
            status VARCHAR(16) NOT NULL,
            start_time DATETIME NULL,
            end_time DATETIME NULL,
            error_msg VARCHAR(255) NOT NULL DEFAULT '',
            KEY idx_status (status)
        ) ENGINE=InnoDB",
    );
    db.insert(1, "running", 20 * MIN);
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "sync_log", "sync");
    assert!(
        prose(&out).contains("Recognised: the field reports' sync_log"),
        "{out}"
    );
    assert!(row_line(&out, 1).contains("unknown"), "{out}");
    let (_, d) = accepted(&file, 1);
    assert!(
        finding(&d, "watch sync_log: index").starts_with("✓ "),
        "{}",
        stdout(&d)
    );
    assert_eq!(db.row(1).0, "running", "nothing written");
}

#[test]
fn a_missing_table_is_refused_with_the_job_tables_the_database_has() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64))");
    let sb = Sandbox::new();
    let file = sb.path("app.toml");
    let o = init(&[
        "--url",
        &db.url,
        "--table",
        "sync_lg",
        "--write",
        file.to_str().expect("utf-8"),
    ]);
    assert_exit(&o, 2);
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "selfheal: error: command line: --table: no table sync_lg in database {}",
            db.name
        )),
        "{err}"
    );
    assert!(
        err.contains("tables there that look like job tables: sync_log (status, start_time)"),
        "{err}"
    );
    assert!(!err.contains("customers"), "{err}");
    assert!(
        err.contains(&format!(
            "selfheal: fix: selfheal init --url {} --table sync_log --write {}",
            shell_word(&db.url),
            file.display()
        )),
        "the command again, with the table: {err}"
    );
    assert!(!file.exists(), "nothing written");
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

#[test]
fn a_lease_queue_on_postgres_is_judged_by_its_heartbeat_column_and_its_owner() {
    let mut db = pg_or_skip!();
    let host = hostname();
    let gone = gone_pid();
    db.exec(&format!(
        "CREATE TYPE job_status AS ENUM ('pending', 'running', 'done', 'error');
         CREATE TABLE sync_log (
            id BIGINT PRIMARY KEY,
            status job_status NOT NULL,
            start_time TIMESTAMPTZ NULL,
            end_time TIMESTAMPTZ NULL,
            error_msg TEXT NOT NULL DEFAULT '',
            heartbeat_at TIMESTAMPTZ NULL,
            worker VARCHAR(64) NULL,
            attempts INT NOT NULL DEFAULT 0,
            retry_at TIMESTAMPTZ NULL
         );
         CREATE INDEX idx_status ON sync_log (status, id);
         INSERT INTO sync_log (id, status, start_time, end_time, heartbeat_at, worker) VALUES
         (1, 'done', now() - INTERVAL '3 hours', now() - INTERVAL '2 hours',
          now() - INTERVAL '2 hours', '{host}:1'),
         (2, 'running', now(), NULL, now(), '{host}:{me}'),
         (3, 'running', now() - INTERVAL '30 minutes', NULL, now() - INTERVAL '20 minutes',
          '{host}:{gone}'),
         (4, 'pending', NULL, NULL, NULL, NULL)",
        me = std::process::id()
    ));
    let sb = Sandbox::new();
    let (out, file) = proposed(&sb, &db.url, "sync_log", "lease");
    assert!(
        prose(&out).contains("as Selfheal\\Lease writes them"),
        "{out}"
    );
    for (key, value) in [
        ("heartbeat_column", "\"heartbeat_at\""),
        ("owner_column", "\"worker\""),
        ("retry_value", "\"pending\""),
        ("attempts_column", "\"attempts\""),
        ("retry_at_column", "\"retry_at\""),
        ("success_values", "[\"done\"]"),
    ] {
        assert!(
            setting(&out, key).is_some_and(|l| l.contains(value)),
            "{key} = {value}: {out}"
        );
    }
    assert!(prose(&out).contains("~/.pgpass"), "{out}");
    assert!(row_line(&out, 2).contains("alive"), "{out}");
    assert!(row_line(&out, 3).contains("dead"), "{out}");
    let (c, d) = accepted(&file, 0);
    let c = stdout(&c);
    assert!(row_line(&c, 3).contains("owner dead"), "{c}");
    assert!(
        finding(&d, "watch sync_log: index").starts_with("✓ "),
        "{}",
        stdout(&d)
    );
}

#[test]
fn a_missing_table_on_postgres_is_refused_with_the_job_tables_the_schema_has() {
    let mut db = pg_or_skip!();
    db.create_sync_log("TIMESTAMP");
    db.exec("CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64))");
    let sb = Sandbox::new();
    let file = sb.path("app.toml");
    let o = init(&[
        "--url",
        &db.url,
        "--table",
        "sync_lg",
        "--write",
        file.to_str().expect("utf-8"),
    ]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "selfheal: error: command line: --table: no table sync_lg in database public"
        ),
        "{err}"
    );
    assert!(
        err.contains("tables there that look like job tables: sync_log (status, start_time)"),
        "{err}"
    );
    assert!(!err.contains("customers"), "{err}");
    assert!(!file.exists(), "nothing written");
}

// ---------------------------------------------------------------------------------------
// SQLite

const SEED: &str = "CREATE TABLE sync_log (
    id INTEGER PRIMARY KEY,
    status VARCHAR(16) NOT NULL,
    start_time TEXT,
    end_time TEXT,
    error_msg VARCHAR(255) NOT NULL DEFAULT ''
);
CREATE INDEX sync_log_status ON sync_log (status);
CREATE TABLE log_entries (id INTEGER PRIMARY KEY, status TEXT, note TEXT);";

fn seed_db(sb: &Sandbox) -> SqliteDb {
    let db = SqliteDb::with_schema(sb, SEED);
    db.insert(1, "done", 3 * HOUR);
    db.exec("UPDATE sync_log SET end_time = datetime('now', '-1 hours') WHERE id = 1");
    db.insert(2, "running", 20 * MIN);
    db
}

#[test]
fn the_seeds_sync_log_waits_for_its_heartbeat_file_and_judges_nothing_until_then() {
    let sb = Sandbox::new();
    let db = seed_db(&sb);
    let (out, file) = proposed(&sb, &db.url(), "sync_log", "sync");
    assert!(
        prose(&out).contains("Recognised: the field reports' sync_log"),
        "{out}"
    );
    assert!(
        setting(&out, "heartbeat_file").is_some_and(|l| l.contains("/nonexistent/")),
        "{out}"
    );
    for key in ["stale_after", "max_age"] {
        let line = setting(&out, key).unwrap_or_else(|| panic!("{key}: {out}"));
        assert!(line.contains("# a guess"), "{line}");
    }
    assert!(
        prose(&out).contains("selfheal stats --config FILE"),
        "{out}"
    );
    // Until the path is set, the row is a person's, and nothing is written.
    assert!(row_line(&out, 2).contains("unknown"), "{out}");
    let (c, d) = accepted(&file, 1);
    assert!(row_line(&stdout(&c), 2).contains("unknown"));
    assert!(
        finding(&d, "watch sync_log: heartbeat_file").starts_with("✗ "),
        "{}",
        stdout(&d)
    );
    assert_eq!(db.status(2), "running");
    // Set, it judges by the heartbeat.
    let text = std::fs::read_to_string(&file).expect("read");
    let set = text.replace(
        "/nonexistent/selfheal-set-me/sync_log-{id}.heartbeat",
        &sb.heartbeat_template(),
    );
    assert_ne!(set, text);
    std::fs::write(&file, set).expect("write");
    beat_now(&sb, 2);
    let c = check(&file, &["--explain"]);
    assert_exit(&c, 0);
    assert!(row_line(&stdout(&c), 2).contains("alive"), "{}", stdout(&c));
}

#[test]
fn a_lease_queue_on_sqlite_is_judged_by_its_heartbeat_column_and_its_owner() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let host = hostname();
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) VALUES \
         (1, 'running', datetime('now'), datetime('now'), '{host}:{}'), \
         (2, 'running', datetime('now', '-30 minutes'), datetime('now', '-20 minutes'), \
          '{host}:{}'), \
         (3, 'pending', NULL, NULL, NULL)",
        std::process::id(),
        gone_pid()
    ));
    let (out, file) = proposed(&sb, &db.url(), "sync_log", "lease");
    assert!(
        prose(&out).contains("as Selfheal\\Lease writes them"),
        "{out}"
    );
    assert!(setting(&out, "owner_column").is_some(), "{out}");
    assert!(row_line(&out, 1).contains("alive"), "{out}");
    assert!(row_line(&out, 2).contains("dead"), "{out}");
    let (c, _) = accepted(&file, 0);
    assert!(
        row_line(&stdout(&c), 2).contains("owner dead"),
        "{}",
        stdout(&c)
    );
    assert_eq!(db.status(2), "running", "nothing written");
}

#[test]
fn a_table_without_a_start_time_is_refused_in_words() {
    let sb = Sandbox::new();
    let db = seed_db(&sb);
    let file = sb.path("log.toml");
    let o = init(&[
        "--url",
        &db.url(),
        "--table",
        "log_entries",
        "--write",
        file.to_str().expect("utf-8"),
    ]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "selfheal: error: command line: --table: table log_entries cannot be watched: it \
             has a status (status) but no column holds the time a run started"
        ),
        "{err}"
    );
    assert!(
        err.contains("It has id integer, status text, note text"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "selfheal: fix: selfheal init --url {} --table sync_log --write {}",
            db.url(),
            file.display()
        )),
        "{err}"
    );
    assert!(!file.exists());
}

#[test]
fn write_never_replaces_a_file_and_nothing_is_written_without_it() {
    let sb = Sandbox::new();
    let db = seed_db(&sb);
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(sb.dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = (listing(), db.bytes());
    // No --table: the one job table there.
    let o = selfheal()
        .current_dir(sb.dir.path())
        .args(["init", "--url", &db.url()])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains(
            "table = \"sync_log\"                  # the one table here with a status and a \
             start column"
        ),
        "{out}"
    );
    assert!(prose(&out).contains("Nothing was written."), "{out}");
    assert_eq!(
        (listing(), db.bytes()),
        before,
        "nothing written, the database as it was"
    );

    let file = sb.path("taken.toml");
    std::fs::write(&file, "# mine\n").expect("write");
    let o = init(&["--url", &db.url(), "--write", file.to_str().expect("utf-8")]);
    assert_exit(&o, 2);
    assert_eq!(stdout(&o), "");
    assert!(
        stderr(&o).starts_with(&format!(
            "selfheal: error: command line: --write: {} exists already: selfheal init never \
             overwrites a file\nselfheal: fix: selfheal init --url {} --write {}\n",
            file.display(),
            db.url(),
            sb.path("taken.new.toml").display()
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "# mine\n");
}

#[test]
fn a_large_table_without_a_status_index_is_counted_in_a_bounded_sample() {
    let sb = Sandbox::new();
    let db = SqliteDb::with_schema(
        &sb,
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT, started_at TEXT);",
    );
    db.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150000) \
         INSERT INTO jobs SELECT i, 'done', datetime('now', '-1 days') FROM n;
         UPDATE jobs SET status = 'running', started_at = datetime('now') WHERE id = 150000;",
    );
    let (out, _) = proposed(&sb, &db.url(), "jobs", "jobs");
    assert!(
        prose(&out).contains(
            "Statuses of the latest 10,000 rows by id only (the table holds about 150,000, and \
             no index starts with status: not counted whole): done 9,999, running 1."
        ),
        "{out}"
    );
    assert!(
        prose(&out).contains("Not judged here: check would read all of 150,000 rows of jobs"),
        "{out}"
    );
    assert!(
        prose(&out).contains("CREATE INDEX idx_jobs_status ON jobs (status)"),
        "{out}"
    );
}

#[test]
fn the_database_comes_from_a_configuration_and_a_password_never_from_argv() {
    let sb = Sandbox::new();
    let db = seed_db(&sb);
    let cfg = sb.file(
        "existing.toml",
        &format!("[database]\nurl = \"{}\"\n", db.url()),
        0o644,
    );
    let o = init(&[
        "--config",
        cfg.to_str().expect("utf-8"),
        "--table",
        "sync_log",
    ]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains(&format!("url = \"{}\"", db.url()))
            && stdout(&o).contains(&format!("# from [database] url of {}", cfg.display())),
        "{}",
        stdout(&o)
    );
    let o = init(&["--url", "mysql://app:s3cret@localhost/app", "--table", "t"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "selfheal: error: command line: --url: a password on the command line is visible \
             to every user in `ps`"
        ),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}
