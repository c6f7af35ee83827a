//! Named database locks (`db_lock`) end to end: a real MariaDB session holds the lock by
//! `GET_LOCK`, the real binary judges. Held is life, free is conclusive once the row is
//! older than `stale_after`, a name several running rows share counts for the youngest
//! only, a list is held if any name is, a name beyond 64 characters is neutral, and the
//! configuration errors are exit 2 naming the watch and the key.

use mysql::prelude::Queryable;

use crate::common::*;

fn config(db: &MysqlDb, sb: &Sandbox, extra: &str) -> std::path::PathBuf {
    sb.config(
        &db.url,
        &format!(
            "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             stale_after = \"1m\"\nmax_age = \"4h\"\nmessage_column = \"error_msg\"\n\
             ended_column = \"end_time\"\n{extra}"
        ),
    )
}

/// A session holding `name` (`GET_LOCK`, as a PHP job does) until dropped.
fn hold(db: &MysqlDb, name: &str) -> mysql::Conn {
    let mut c = db.conn();
    let got: Option<i64> = c
        .exec_first("SELECT GET_LOCK(?, 0)", (name,))
        .expect("GET_LOCK");
    assert_eq!(got, Some(1), "{name} taken");
    c
}

fn set_job(db: &mut MysqlDb, id: i64, job: &str) {
    db.exec(&format!(
        "UPDATE sync_log SET worker = '{job}' WHERE id = {id}"
    ));
}

#[test]
fn held_is_life_free_is_death_and_a_shared_name_is_the_youngest_row_s() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    // The job's name in the owner-less `worker` column: one lock per job kind.
    let cfg = config(&db, &sb, "db_lock = \"{database}/job_{worker}\"");
    db.insert(1, "running", 3_600);
    db.insert(2, "running", 600);
    db.insert(3, "running", 600);
    set_job(&mut db, 1, "sync");
    set_job(&mut db, 2, "sync");
    set_job(&mut db, 3, "mail");
    let name = format!("{}/job_sync", db.name);
    let lock = hold(&db, &name);

    let (o, rows, _) = json_check(&cfg, &["--dry-run"]);
    // Row 2 is the youngest of the two sharing the name: the lock is its, and it lives.
    let r = row(&rows, 2);
    assert_eq!(
        (r["verdict"].as_str(), r["db_lock"].as_str()),
        (Some("alive"), Some("held")),
        "{r}"
    );
    let mine: u64 = db.query::<u64>("SELECT CONNECTION_ID()")[0];
    assert!(
        r["db_lock_holder"]["connection"]
            .as_u64()
            .is_some_and(|c| c != mine),
        "{r}"
    );
    // Row 1 shares it with a younger row: neutral, and nothing else decides.
    let r = row(&rows, 1);
    assert_eq!(
        (r["verdict"].as_str(), r["db_lock"].as_str()),
        (Some("unknown"), Some("shared")),
        "{r}"
    );
    // Row 3's name nobody holds, and it is older than stale_after: conclusive.
    let r = row(&rows, 3);
    assert_eq!(
        (r["verdict"].as_str(), r["db_lock"].as_str()),
        (Some("dead"), Some("free")),
        "{r}"
    );
    assert_exit(&o, 1);

    // --explain names the lock and its holder.
    let o = check(&cfg, &["--explain"]);
    let text = stdout(&o);
    let line = text.lines().find(|l| l.contains("id=2 ")).expect("row 2");
    assert!(line.contains("named lock held:connection "), "{line}");
    assert!(line.contains(&name), "{line}");

    // show names the lock and its holder too.
    let o = selfheal()
        .args(["show", "jobs", "2", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("named lock"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("held:connection ") && line.contains(&name),
        "{line}"
    );

    // The real run reclaims row 3 only; the job's session ends, and row 2 goes too.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(db.row(3).0, "error");
    assert_eq!(db.row(2).0, "running");
    assert_eq!(db.row(1).0, "running");
    drop(lock);
    let _ = check(&cfg, &[]);
    assert_eq!(db.row(2).0, "error");
    assert_eq!(
        db.row(1).0,
        "running",
        "still shared with row 2 when judged"
    );
}

#[test]
fn a_list_is_held_if_any_name_is_and_free_only_if_all_are() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = config(
        &db,
        &sb,
        "db_lock = [\"a_{md5:{worker}}_{id}\", \"b_{md5:{worker}}_{id}\"]",
    );
    db.insert(1, "running", 600);
    set_job(&mut db, 1, "sync");
    let md5 = selfheal::config::md5_hex(b"sync");
    let lock = hold(&db, &format!("b_{md5}_1"));
    let (_, rows, _) = json_check(&cfg, &["--dry-run"]);
    assert_eq!(row(&rows, 1)["db_lock"], "held");
    assert_eq!(row(&rows, 1)["verdict"], "alive");
    drop(lock);
    let (_, rows, _) = json_check(&cfg, &["--dry-run"]);
    assert_eq!(row(&rows, 1)["db_lock"], "free");
    assert_eq!(row(&rows, 1)["verdict"], "dead");
}

#[test]
fn a_stale_heartbeat_with_the_named_lock_held_is_hung_never_dead() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = config(
        &db,
        &sb,
        "heartbeat_column = \"heartbeat_at\"\ndb_lock = \"job_{id}\"\nmanual_value = \"wait_manual\"",
    );
    db.insert(1, "running", 3_600);
    db.exec("UPDATE sync_log SET heartbeat_at = NOW() - INTERVAL 30 MINUTE WHERE id = 1");
    let _lock = hold(&db, "job_1");
    for _ in 0..2 {
        let (_, rows, _) = json_check(&cfg, &["--dry-run"]);
        let r = row(&rows, 1);
        assert_eq!(r["verdict"], "hung", "{r}");
        assert_eq!(
            r["basis"], "the heartbeat is stale or missing, but the job's named lock is held",
            "{r}"
        );
    }
    // Acted on: parked for a person, never marked dead.
    let (_, rows, _) = json_check(&cfg, &["--confirm", "1"]);
    assert_eq!(row(&rows, 1)["action"], "mark_manual");
    assert_eq!(db.row(1).0, "wait_manual");
}

#[test]
fn a_name_beyond_64_characters_is_unusable_for_its_row() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = config(&db, &sb, "db_lock = \"job_{worker}\"");
    db.insert(1, "running", 600);
    set_job(&mut db, 1, &"x".repeat(61));
    let (o, rows, _) = json_check(&cfg, &[]);
    let r = row(&rows, 1);
    assert_eq!(
        (r["verdict"].as_str(), r["db_lock"].as_str()),
        (Some("unknown"), Some("unusable")),
        "{r}"
    );
    assert_exit(&o, 1);
    assert_eq!(db.row(1).0, "running");
    let o = check(&cfg, &["--explain"]);
    assert!(
        stdout(&o).contains("65 characters, beyond the server's 64"),
        "{}",
        stdout(&o)
    );
    // Said once for the watch, however many rows: here two.
    db.insert(2, "running", 600);
    set_job(&mut db, 2, &"y".repeat(61));
    let o = check(&cfg, &[]);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        text.matches("has no usable named lock").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("row 1 (and 1 more) has no usable named lock"),
        "{text}"
    );
}

#[test]
fn named_lock_configuration_errors_exit_2_naming_the_watch_and_the_key() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    for (extra, says) in [
        (
            "db_lock = \"job_{job_code}\"",
            "column job_code does not exist",
        ),
        (
            "db_lock = \"a_very_long_fixed_prefix_that_alone_is_beyond_the_limit_{md5:{id}}\"",
            "characters",
        ),
    ] {
        let cfg = config(&db, &sb, extra);
        let o = check(&cfg, &["--dry-run"]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains("watch 'jobs'") && err.contains("db_lock"),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
    }
    let sq = SqliteDb::new(&sb);
    let cfg = sb.config(
        &sq.url(),
        "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         stale_after = \"1m\"\nmax_age = \"4h\"\ndb_lock = \"job_{id}\"",
    );
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("watch 'jobs': db_lock"),
        "{}",
        stderr(&o)
    );
}
