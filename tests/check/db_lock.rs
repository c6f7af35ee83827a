//! Named database locks (`db_lock`) end to end: a real MariaDB session holds the lock by
//! `GET_LOCK`, the real binary judges. Held is life, free is conclusive once the row is
//! older than `stale_after`, a name several running rows share counts for the youngest
//! only, a list is held if any name is, a name beyond 64 characters is neutral, and the
//! configuration errors are exit 2 naming the watch and the key. A template no running
//! job's lock matches holds the watch's deaths on a free name for a person, until a real
//! run has seen one of its names held (`docs/design.md#no-named-lock`).

use std::process::Command;
use std::time::Duration;

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

// ---------------------------------------------------------------------------------------
// No named lock held: a template that matches no lock the jobs take

/// A worker of its own: the `mariadb` client, in a process group of its own, takes `name`
/// with `GET_LOCK` and then sits idle in its session (a shell command of the client's runs
/// meanwhile), as a PHP job between two statements does. Returns once the server says the
/// name is held. SIGKILLed, its socket closes and the server frees the lock at once.
fn worker_holding(db: &mut MysqlDb, name: &str) -> Proc {
    let opts = mysql::Opts::from_url(&db.url).expect("url");
    let mut cmd = Command::new("mariadb");
    cmd.arg("--no-defaults")
        .args(["-N", "-u", opts.get_user().unwrap_or("root")]);
    match opts.get_socket() {
        Some(sock) => cmd.arg(format!("--socket={sock}")),
        None => cmd.args([
            "-h",
            &opts.get_ip_or_hostname(),
            "-P",
            &opts.get_tcp_port().to_string(),
        ]),
    };
    cmd.env("MYSQL_PWD", opts.get_pass().unwrap_or(""))
        .args(["-D", &db.name])
        .args([
            "-e",
            &format!("SELECT GET_LOCK('{name}', 0);\n\\! sleep 600"),
        ]);
    let p = Proc::spawn(&mut cmd);
    wait_until("the worker takes its lock", Duration::from_secs(10), || {
        is_used(db, name)
    });
    p
}

fn is_used(db: &mut MysqlDb, name: &str) -> bool {
    db.query::<Option<u64>>(&format!("SELECT IS_USED_LOCK('{name}')"))
        .pop()
        .flatten()
        .is_some()
}

/// SIGKILL to the worker's whole group (the client and its shell), as a deploy kills a
/// worker; returns once the server has freed `name`.
fn kill_worker(db: &mut MysqlDb, mut p: Proc, name: &str) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(p.pid()).expect("a pid"));
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    p.reap();
    wait_until(
        "the server frees the killed worker's lock",
        Duration::from_secs(10),
        || !is_used(db, name),
    );
}

/// The Magento shape: no heartbeat, one job code per row in `worker`, each job's lock
/// `<dbname>|CRON_<md5(GROUP_jobcode)>`; `group` is the cron group the template names.
fn magento_like(db: &MysqlDb, sb: &Sandbox, group: &str, run_extra: &str) -> std::path::PathBuf {
    sb.config_with(
        &format!("url = \"{}\"", db.url),
        run_extra,
        &format!(
            "name = \"jobs\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             stale_after = \"1m\"\nmax_age = \"4h\"\nmessage_column = \"error_msg\"\n\
             ended_column = \"end_time\"\ndb_lock = \"{{database}}|CRON_{{md5:{group}_{{worker}}}}\"\n"
        ),
    )
}

/// The name a job of `job` code in the `index` group holds.
fn job_lock(db: &MysqlDb, job: &str) -> String {
    format!(
        "{}|CRON_{}",
        db.name,
        selfheal::config::md5_hex(format!("index_{job}").as_bytes())
    )
}

/// Rows `ids`, running for 10 minutes, job code `job_ID` each.
fn running_jobs(db: &mut MysqlDb, ids: &[i64]) {
    for &id in ids {
        db.insert(id, "running", 600);
        set_job(db, id, &format!("job_{id}"));
    }
}

fn confirmations(sb: &Sandbox) -> serde_json::Value {
    std::fs::read_to_string(sb.state_dir().join("confirmations.json"))
        .map_or(serde_json::Value::Null, |t| {
            serde_json::from_str(&t).expect("confirmations.json is JSON")
        })
}

/// A template naming the wrong cron group: four live jobs hold their real names, and every
/// name the template makes is free. Nothing is marked; every row is held for a person
/// (JSON, --explain, the metrics), and the cron text says once what to check. --force
/// would act; the right template finds them alive and proves itself.
#[test]
fn a_template_no_live_job_holds_marks_nothing_and_says_what_to_check() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_tool("mariadb", &["--version"], "the mariadb client") {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let metrics = sb.path("selfheal.prom");
    let metrics_line = format!("metrics_file = \"{}\"", metrics.display());
    let wrong = magento_like(&db, &sb, "default", &metrics_line);
    let ids = [1, 2, 3, 4];
    running_jobs(&mut db, &ids);
    let names: Vec<String> = ids
        .iter()
        .map(|id| job_lock(&db, &format!("job_{id}")))
        .collect();
    let workers: Vec<Proc> = names.iter().map(|n| worker_holding(&mut db, n)).collect();
    let before = db.dump();

    // --explain: each row, what holds it, and the warning.
    let o = check(&wrong, &["--explain"]);
    assert_exit(&o, 1);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        err.contains("watch jobs: no job of this watch holds its db_lock name")
            && err.contains("does the template match the names the application takes?"),
        "{err}"
    );
    assert_eq!(
        out.matches(
            "a real run would leave it and report it (held back: no job of this watch holds \
             its db_lock name"
        )
        .count(),
        4,
        "{out}"
    );

    // The real run, as cron runs it: nothing marked, the hold said once.
    let o = check(&wrong, &[]);
    assert_exit(&o, 1);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        text.contains("not one of its 4 running rows holds")
            && text.contains("the 4 deaths on a free named lock alone are held"),
        "{text}"
    );
    assert_eq!(db.dump(), before, "no live job is marked");
    let o = check(&wrong, &[]);
    assert_exit(&o, 1);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        !text.contains("no job of this watch holds"),
        "said once: {text}"
    );
    let metrics_text = std::fs::read_to_string(&metrics).expect("metrics");
    for line in [
        "selfheal_held_rows{watch=\"jobs\",hold=\"no_named_lock\"} 4",
        "selfheal_watch_held{watch=\"jobs\",hold=\"no_named_lock\"} 1",
    ] {
        assert!(
            metrics_text.lines().any(|l| l == line),
            "{line} in\n{metrics_text}"
        );
    }

    // JSON: each row dead on a free named lock, held, for a person.
    let (o, rows, summary) = json_check(&wrong, &[]);
    assert_exit(&o, 1);
    for id in ids {
        let r = row(&rows, id);
        assert_eq!(
            (
                r["verdict"].as_str(),
                r["db_lock"].as_str(),
                r["held"].as_str(),
                r["action"].as_str(),
                r["attention"].as_bool()
            ),
            (
                Some("dead"),
                Some("free"),
                Some("no_named_lock"),
                Some("none"),
                Some(true)
            ),
            "{r}"
        );
        assert!(r["resolve"].as_str().is_some(), "{r}");
    }
    assert!(
        summary["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w
                .as_str()
                .is_some_and(|w| w.contains("no job of this watch holds its db_lock name")))),
        "{summary}"
    );
    assert_eq!(db.dump(), before);
    assert!(
        confirmations(&sb)["proven"].is_null(),
        "{}",
        confirmations(&sb)
    );

    // --force says it and acts (shown by a dry run: these jobs live).
    let (_, rows, _) = json_check(&wrong, &["--dry-run", "--force"]);
    for id in ids {
        assert_eq!(row(&rows, id)["action"], "mark_dead", "{}", row(&rows, id));
        assert_eq!(row(&rows, id)["held"], serde_json::Value::Null);
    }

    // The right template: every job alive, and the template proven.
    let right = magento_like(&db, &sb, "index", &metrics_line);
    let (o, rows, _) = json_check(&right, &[]);
    assert_exit(&o, 0);
    for id in ids {
        assert_eq!(row(&rows, id)["verdict"], "alive", "{}", row(&rows, id));
    }
    assert_eq!(db.dump(), before);
    let proven = &confirmations(&sb)["proven"];
    assert_eq!(proven[0]["watch"], "jobs", "{proven}");
    assert_eq!(
        proven[0]["db_lock"],
        serde_json::json!(["{database}|CRON_{md5:index_{worker}}"]),
        "{proven}"
    );
    drop(workers);
}

/// The right template: three live jobs hold their names and two died. The two are marked
/// at once, as before, and the run proves the template. Then a deploy kills every worker:
/// the next run marks all three — where no run ever saw a name held (another state
/// directory), the same rows are held.
#[test]
fn free_names_beside_held_ones_are_marked_and_once_proven_a_killed_fleet_is_too() {
    let Some(mut db) = MysqlDb::new_short() else {
        return;
    };
    if !have_tool("mariadb", &["--version"], "the mariadb client") {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let cfg = magento_like(&db, &sb, "index", "");
    running_jobs(&mut db, &[1, 2, 3, 4, 5]);
    let live: Vec<(String, Proc)> = [1, 3, 5]
        .iter()
        .map(|id| {
            let name = job_lock(&db, &format!("job_{id}"));
            let p = worker_holding(&mut db, &name);
            (name, p)
        })
        .collect();

    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in [2, 4] {
        let r = row(&rows, id);
        assert_eq!(
            (
                r["verdict"].as_str(),
                r["action"].as_str(),
                r["applied"].as_bool()
            ),
            (Some("dead"), Some("mark_dead"), Some(true)),
            "{r}"
        );
        assert_eq!(r["held"], serde_json::Value::Null, "{r}");
        assert_eq!(db.row(id).0, "error");
    }
    for id in [1, 3, 5] {
        assert_eq!(row(&rows, id)["verdict"], "alive", "{}", row(&rows, id));
        assert_eq!(db.row(id).0, "running");
    }
    assert_eq!(confirmations(&sb)["proven"][0]["watch"], "jobs");

    // A deploy kills every worker.
    for (name, p) in live {
        kill_worker(&mut db, p, &name);
    }
    // Never proven there: held.
    let elsewhere = Sandbox::new();
    let unproven = magento_like(&db, &elsewhere, "index", "");
    let (o, rows, _) = json_check(&unproven, &["--dry-run"]);
    assert_exit(&o, 1);
    for id in [1, 3, 5] {
        assert_eq!(
            row(&rows, id)["held"],
            "no_named_lock",
            "{}",
            row(&rows, id)
        );
    }
    // Proven here: all three marked.
    let (o, rows, _) = json_check(&cfg, &[]);
    assert_exit(&o, 0);
    for id in [1, 3, 5] {
        let r = row(&rows, id);
        assert_eq!(
            (r["action"].as_str(), r["applied"].as_bool()),
            (Some("mark_dead"), Some(true)),
            "{r}"
        );
        let (status, ended, msg) = db.row(id);
        assert_eq!((status.as_str(), ended), ("error", true));
        assert!(msg.starts_with("self-heal: dead: named lock free"), "{msg}");
    }
    assert_eq!(sb.journal().len(), 5);
}
