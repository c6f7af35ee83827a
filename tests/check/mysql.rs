//! `selfheal check` end to end against a real MariaDB/MySQL server: each test creates its
//! own database and drops it. Skipped outside CI when no server answers; fails in CI.

use std::process::Stdio;

use crate::common::*;
use mysql::prelude::Queryable;

#[test]
fn a_dead_row_is_marked_with_status_database_end_time_and_reason() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(1, "running", 2 * 3600 + 10 * MIN);
    sb_heartbeats_and_check(&mut db);
}

fn sb_heartbeats_and_check(db: &mut MysqlDb) {
    db.insert(2, "running", 50 * MIN);
    db.insert(3, "running", 30);
    db.insert(4, "done", 3 * 3600);
    let sb = Sandbox::new();
    sb.heartbeat(1, secs(20));
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch(""));
    // The first run finds row 2 silent and holds it for confirmation; the second acts.
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    let r = row(&rows, 2);
    assert_eq!(
        (
            &r["verdict"],
            &r["action"],
            &r["held"],
            &r["confirmations"],
            &r["confirm"]
        ),
        (
            &serde_json::json!("dead"),
            &serde_json::json!("none"),
            &serde_json::json!("confirming"),
            &serde_json::json!(1),
            &serde_json::json!(2)
        )
    );
    assert_eq!(summary["changed"], 0);
    assert_eq!(db.row(2).0, "running");
    next_cron_run(&sb);
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 1)["verdict"], "alive");
    assert_eq!(row(&rows, 2)["verdict"], "dead");
    assert_eq!(row(&rows, 2)["applied"], true);
    assert_eq!(row(&rows, 2)["confirmations"], 2);
    assert_eq!(row(&rows, 3)["verdict"], "starting");
    assert_eq!(summary["changed"], 1);
    let (status, ended, msg) = db.row(2);
    assert_eq!((status.as_str(), ended), ("error", true));
    // The deciding evidence in words, then the figures (a second may pass meanwhile).
    assert!(
        msg.starts_with("self-heal: dead: heartbeat stale, no sign of the worker (row 50m"),
        "{msg}"
    );
    assert!(
        msg.contains(", heartbeat 47m") && msg.ends_with(" ago, stale_after 5m)"),
        "{msg}"
    );
    // The end time is the database's NOW(), not the host's.
    let gap: Vec<i64> =
        db.query("SELECT ABS(TIMESTAMPDIFF(SECOND, end_time, NOW())) FROM sync_log WHERE id = 2");
    assert!(
        gap[0] < 30,
        "end_time is the database's NOW(): off by {}s",
        gap[0]
    );
    assert_eq!(db.row(1).0, "running");
    assert_eq!(db.row(3).0, "running");
    assert_eq!(db.row(4).0, "done");
}

#[test]
fn start_columns_of_every_type_are_judged_on_the_database_clock() {
    for (ty, insert) in [
        ("DATETIME", "NOW() - INTERVAL {age} SECOND"),
        ("DATETIME(6)", "NOW(6) - INTERVAL {age} SECOND"),
        ("TIMESTAMP", "NOW() - INTERVAL {age} SECOND"),
        ("INT", "UNIX_TIMESTAMP() - {age}"),
        ("BIGINT UNSIGNED", "UNIX_TIMESTAMP() - {age}"),
        (
            "VARCHAR(32)",
            "DATE_FORMAT(NOW() - INTERVAL {age} SECOND, '%Y-%m-%d %H:%i:%s')",
        ),
    ] {
        let mut db = mysql_or_skip!();
        db.create_sync_log(ty);
        for (id, age) in [(1, 7_800u64), (2, 3_000)] {
            db.exec(&format!(
                "INSERT INTO sync_log (id, status, start_time) VALUES ({id}, 'running', {})",
                insert.replace("{age}", &age.to_string())
            ));
        }
        let sb = Sandbox::new();
        sb.heartbeat(1, secs(20));
        sb.heartbeat(2, secs(47 * MIN));
        let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, _) = json_lines(&o);
        let age = row(&rows, 1)["total_age_s"].as_u64().unwrap_or(0);
        // DATETIME(6) starts carry microseconds; ages are whole seconds.
        assert!((7_799..7_810).contains(&age), "{ty}: total age {age}");
        assert_eq!(row(&rows, 1)["verdict"], "alive", "{ty}");
        assert_eq!(row(&rows, 2)["verdict"], "dead", "{ty}");
        assert_eq!(
            db.row(2).0,
            "error",
            "{ty}: the compare-and-set matched the observed start value"
        );
        assert_eq!(db.row(1).0, "running", "{ty}");
    }
}

#[test]
fn naive_times_written_in_another_zone_need_the_timezone_key() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    // The application writes Asia/Shanghai wall-clock time; the session runs in UTC.
    db.exec("SET time_zone = '+00:00'");
    db.exec(
        "INSERT INTO sync_log (id, status, start_time) VALUES \
         (2, 'running', UTC_TIMESTAMP() + INTERVAL 8 HOUR - INTERVAL 50 MINUTE)",
    );
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let url = db.url.clone();
    // Without the zone: a start 7 h in the future is a mismatch, never a verdict.
    let cfg = sb.config(&url, &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["verdict"], "unknown");
    assert!(
        row(&rows, 2)["basis"]
            .as_str()
            .unwrap_or("")
            .contains("in the future"),
        "{}",
        row(&rows, 2)
    );
    assert_eq!(db.row(2).0, "running");
    // With it: 50 minutes old, heartbeat 47 minutes stale, dead.
    let text = std::fs::read_to_string(&cfg)
        .expect("config")
        .replace("[database]\n", "[database]\ntimezone = \"Asia/Shanghai\"\n");
    std::fs::write(&cfg, text).expect("config");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let age = row(&rows, 2)["total_age_s"].as_u64().unwrap_or(0);
    assert!((3_000..3_010).contains(&age), "total age {age}");
    assert_eq!(db.row(2).0, "error");
    // The end time is written the way the application writes it: Shanghai wall clock.
    let skew: Vec<i64> = db.query(
        "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP() + INTERVAL 8 HOUR, end_time) FROM sync_log WHERE id = 2",
    );
    assert!(skew[0].abs() < 30, "end_time off by {}s", skew[0]);
}

#[test]
fn the_message_is_cut_to_the_column_length_under_strict_mode() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("ALTER TABLE sync_log MODIFY error_msg VARCHAR(40) NOT NULL DEFAULT ''");
    // The server's default mode (STRICT_TRANS_TABLES on MariaDB ≥ 10.2.4 and MySQL ≥ 5.7)
    // rejects a longer value: prove it on this table, with the global mode untouched.
    db.insert(9, "done", 60);
    let mut c = db.conn();
    let long = "x".repeat(41);
    assert!(
        c.query_drop(format!(
            "UPDATE sync_log SET error_msg = '{long}' WHERE id = 9"
        ))
        .is_err(),
        "this server is not in a strict SQL mode; the test proves nothing here"
    );
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let (status, _, msg) = db.row(2);
    assert_eq!(status, "error");
    assert_eq!(msg.chars().count(), 40, "{msg}");
    // Cut from the end: the figures go first.
    assert_eq!(msg, "self-heal: dead: heartbeat stale, no sig");
}

/// Waits until selfheal's UPDATE waits on the row the test holds; false on timeout.
fn wait_for_lock_wait(db: &mut MysqlDb) -> bool {
    db.wait_for_lock_wait()
}

/// Holds row 2 with `SELECT … FOR UPDATE`, starts a real check that decides the row is
/// dead and blocks in its UPDATE, applies `change` in the holding transaction, commits,
/// and returns the check's output.
pub(crate) fn race(db: &mut MysqlDb, cfg: &std::path::Path, change: &str) -> std::process::Output {
    let mut holder = db.conn();
    holder.query_drop("BEGIN").expect("begin");
    holder
        .query_drop("SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("for update");
    let child = selfheal()
        .args(["check", "--format", "json", "--config"])
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    if !wait_for_lock_wait(db) {
        holder.query_drop("ROLLBACK").expect("rollback");
        let o = child.wait_with_output().expect("wait");
        panic!(
            "selfheal's UPDATE never waited on the row lock\n{}\n{}",
            stdout(&o),
            stderr(&o)
        );
    }
    holder.query_drop(change).expect("change");
    holder.query_drop("COMMIT").expect("commit");
    child.wait_with_output().expect("wait")
}

#[test]
fn a_row_restarted_with_a_new_start_time_while_the_update_waits_is_not_overwritten() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    // A retry claimed the same row again: still 'running', new start.
    let o = race(
        &mut db,
        &cfg,
        "UPDATE sync_log SET start_time = NOW() WHERE id = 2",
    );
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "lost_race");
    assert_eq!(db.row(2), ("running".to_string(), false, String::new()));
}

#[test]
fn a_lease_that_beat_while_the_update_waits_is_not_overwritten() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES \
         (2, 'running', NOW() - INTERVAL 50 MINUTE, NOW() - INTERVAL 47 MINUTE)",
    );
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
         confirm = 1\n",
    );
    let o = race(
        &mut db,
        &cfg,
        "UPDATE sync_log SET heartbeat_at = NOW() WHERE id = 2",
    );
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    assert_eq!(row(&rows, 2)["action"], "lost_race");
    assert_eq!(db.row(2).0, "running");
}

#[test]
fn explain_and_dry_run_leave_the_table_identical() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(1, "running", 7_800);
    db.insert(2, "running", 50 * MIN);
    db.insert(3, "running", 5 * 3600);
    let sb = Sandbox::new();
    sb.heartbeat(1, secs(20));
    sb.heartbeat(2, secs(47 * MIN));
    sb.heartbeat(3, secs(5));
    let cfg = sb.config(&db.url, &sb.watch("confirm = 1\n"));
    let before = db.dump();
    let checksum =
        |db: &mut MysqlDb| -> Vec<(String, Option<u64>)> { db.query("CHECKSUM TABLE sync_log") };
    let sum = checksum(&mut db);
    for args in [
        &["--explain"][..],
        &["--dry-run"],
        &["--dry-run", "--format", "json"],
        &["--explain", "--format", "json"],
    ] {
        let o = check(&cfg, args);
        assert_exit(&o, 0);
        assert!(!stdout(&o).is_empty(), "{args:?} reports the rows");
        assert_eq!(db.dump(), before, "{args:?}");
        assert_eq!(checksum(&mut db), sum, "{args:?}");
    }
    assert!(!sb.state_dir().exists(), "no journal from a dry run");
}

/// docs/design.md#output: a table or column the database does not have is a bad configuration, like a
/// key typo: exit 2, nothing touched, and a fix beside it.
#[test]
fn exit_2_for_missing_table_column_and_nothing_is_written() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));
    let cfg = sb.config(&db.url, &sb.watch("").replace("sync_log", "missing_table"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(&format!(
            "table missing_table does not exist in database {}",
            db.name
        )),
        "{}",
        stderr(&o)
    );

    let cfg = sb.config(&db.url, &sb.watch("owner_column = \"wrker\"\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("owner_column: column wrker does not exist in table sync_log"),
        "{err}"
    );
    assert!(
        err.contains(
            "selfheal: fix: set owner_column in watch 'full-sync' to one of the columns listed"
        ),
        "{err}"
    );
    assert_eq!(db.row(2).0, "running");
}

#[test]
fn exit_3_for_an_unreachable_server_or_a_wrong_password_which_is_never_printed() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(2, "running", 50 * MIN);
    let sb = Sandbox::new();
    sb.heartbeat(2, secs(47 * MIN));

    let cfg = sb.config("mysql://root@127.0.0.1:1/nowhere", &sb.watch(""));
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("cannot connect to mysql://root@127.0.0.1:1/nowhere"),
        "{}",
        stderr(&o)
    );

    // A user with a password, made for this test.
    let user = format!("{}_u", db.name.chars().take(20).collect::<String>());
    db.exec(&format!(
        "CREATE USER '{user}'@'localhost' IDENTIFIED BY 'Right-pass-1'"
    ));
    db.exec(&format!(
        "CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'Right-pass-1'"
    ));
    db.exec(&format!(
        "GRANT ALL ON `{}`.* TO '{user}'@'localhost'",
        db.name
    ));
    db.exec(&format!(
        "GRANT ALL ON `{}`.* TO '{user}'@'127.0.0.1'",
        db.name
    ));
    let url = db.url.replacen("root@", &format!("{user}@"), 1);
    let cfg = sb.config(&url, &sb.watch("confirm = 1\n"));
    let o = selfheal()
        .env("SELFHEAL_DB_PASSWORD", "Wrong-pass-9")
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 3);
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("Access denied"), "{all}");
    assert!(!all.contains("Wrong-pass-9"), "the password leaked: {all}");
    assert_eq!(db.row(2).0, "running");

    // password_file is read, and the right password works.
    let pw = sb.path("db-password");
    std::fs::write(&pw, "Right-pass-1\n").expect("password file");
    let text = std::fs::read_to_string(&cfg).expect("config").replace(
        "[database]\n",
        &format!("[database]\npassword_file = \"{}\"\n", pw.display()),
    );
    std::fs::write(&cfg, text).expect("config");
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.row(2).0, "error");
    db.exec(&format!("DROP USER '{user}'@'localhost'"));
    db.exec(&format!("DROP USER '{user}'@'127.0.0.1'"));
}

#[test]
fn a_password_in_the_db_flag_is_refused_before_anything_happens() {
    let o = selfheal()
        .args([
            "check",
            "--db",
            "mysql://app:hunter2@localhost/appdb",
            "--table",
            "sync_log",
            "--started-column",
            "start_time",
            "--heartbeat-file",
            "/tmp/hb",
            "--stale-after",
            "5m",
            "--max-age",
            "4h",
        ])
        .output()
        .expect("run");
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--db") && !stderr(&o).contains("hunter2"),
        "{}",
        stderr(&o)
    );
}

/// Three dead rows (their owner pid gone on this host), one write group, and the config
/// that writes them; the tests below delay or fail the flush of the intents.
fn three_dead_rows(db: &mut MysqlDb) -> (Sandbox, std::path::PathBuf) {
    db.create_sync_log("DATETIME");
    let gone = format!("{}:{}", hostname(), exited_pid());
    for id in 1..=3 {
        db.exec(&format!(
            "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) VALUES \
             ({id}, 'running', NOW() - INTERVAL 50 MINUTE, NOW() - INTERVAL 47 MINUTE, '{gone}')"
        ));
    }
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        "name = \"lease\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nowner_column = \"worker\"\n\
         ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
         stale_after = \"5m\"\nmax_age = \"4h\"\n",
    );
    (sb, cfg)
}

/// The intents are flushed while the database writes the group, but nothing of the group
/// is committed before they are on disk: with their flush held up for two seconds, another
/// session sees every row still running after the intents are written, and all three
/// marked once the run ends.
#[test]
fn a_write_group_commits_only_once_its_intents_are_on_disk() {
    let mut db = mysql_or_skip!();
    if !have_tool(
        "strace",
        &["-V"],
        "delaying the flush of selfheal's intents",
    ) {
        return;
    }
    let (sb, cfg) = three_dead_rows(&mut db);
    let child = check_under_strace("inject=fdatasync:delay_enter=2000000:when=1", &cfg)
        .spawn()
        .expect("strace");
    wait_for_intents(&sb);
    // The group's UPDATE may have run by now; it is not committed.
    std::thread::sleep(std::time::Duration::from_millis(700));
    for id in 1..=3 {
        assert_eq!(
            db.row(id).0,
            "running",
            "row {id} changed before its intent was flushed"
        );
    }
    let o = child.wait_with_output().expect("wait");
    assert_exit(&o, 0);
    for id in 1..=3 {
        assert_eq!(db.row(id).0, "error");
    }
    let journaled = sb.journal().iter().filter(|e| e["applied"] == true).count();
    assert_eq!(journaled, 3);
}

/// When the intents cannot be flushed, the group written meanwhile is undone: no row
/// changes, no change is journaled, the run fails and says so.
#[test]
fn a_write_group_whose_intents_cannot_be_flushed_is_undone() {
    let mut db = mysql_or_skip!();
    if !have_tool("strace", &["-V"], "failing the flush of selfheal's intents") {
        return;
    }
    let (sb, cfg) = three_dead_rows(&mut db);
    let o = check_under_strace("inject=fdatasync:error=EIO:when=1", &cfg)
        .output()
        .expect("strace");
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("pending"), "{}", stderr(&o));
    for id in 1..=3 {
        assert_eq!(db.row(id).0, "running");
    }
    assert!(sb.journal().iter().all(|e| e["applied"] != true));
    // The next run writes them.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in 1..=3 {
        assert_eq!(db.row(id).0, "error");
    }
}

/// Rows 1, 2 and 3 dead (their owner pid gone on this host, their heartbeats stale): one
/// write group. Once selfheal has written its intents (as it unlocks pending.jsonl, its
/// third flock after the run lock and the pending lock, delayed by strace), row 2's worker
/// finishes it. The group's single UPDATE then changes two rows of three: it is undone,
/// and each row is written on its own — rows 1 and 3 marked, row 2 left as its worker
/// wrote it, a lost race.
#[test]
fn a_row_finished_while_its_write_group_is_prepared_is_not_overwritten_and_the_rest_are_marked() {
    let mut db = mysql_or_skip!();
    if !have_tool("strace", &["-V"], "delaying selfheal after its intents") {
        return;
    }
    let (sb, cfg) = three_dead_rows(&mut db);
    let child = check_under_strace("inject=flock:delay_exit=1500000:when=3", &cfg)
        .spawn()
        .expect("strace");
    let pending = sb.state_dir().join("pending.jsonl");
    wait_until("selfheal writes its intents", secs(20), || pending.exists());
    db.exec(
        "UPDATE sync_log SET status = 'done', end_time = NOW(), error_msg = 'finished' \
         WHERE id = 2",
    );
    let o = child.wait_with_output().expect("wait");
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    for id in [1, 3] {
        assert_eq!(row(&rows, id)["action"], "mark_dead", "{}", row(&rows, id));
        assert_eq!(row(&rows, id)["applied"], true);
        let (status, ended, msg) = db.row(id);
        assert_eq!((status.as_str(), ended), ("error", true));
        assert!(msg.starts_with("self-heal: dead: owner pid"), "{msg}");
    }
    assert_eq!(row(&rows, 2)["action"], "lost_race", "{}", row(&rows, 2));
    assert_eq!(row(&rows, 2)["applied"], false);
    assert_eq!(
        db.row(2),
        ("done".to_string(), true, "finished".to_string())
    );
    assert_eq!(summary["changed"], 2);
    let journaled: Vec<i64> = sb
        .journal()
        .iter()
        .filter(|e| e["applied"] == true)
        .map(|e| e["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(journaled, [1, 3]);
}
