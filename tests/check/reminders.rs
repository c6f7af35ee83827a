//! What the cron text tells a person, and when, under a frozen host clock (libfaketime): a
//! problem once, then once per `remind_every`; a damaged reminders file costs a repeated
//! mail, never a silent problem.

use std::path::PathBuf;

use crate::common::*;

pub(crate) const LATER: &str = "2035-03-15 16:09:26";

#[test]
fn the_cron_text_tells_of_a_problem_once_then_once_per_remind_every() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 1 cannot be judged: its heartbeat file is a symlink loop. A run that ended well
    // after 3h makes max_age 4h too low.
    db.insert_at(1, "running", ago(30 * MIN));
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    db.insert_at(3, "done", ago(26 * HOUR));
    db.conn()
        .execute(
            "UPDATE sync_log SET end_time = ?1 WHERE id = 3",
            [sql_datetime(ago(23 * HOUR))],
        )
        .expect("end");
    let watch = sb.watch("owner_column = \"worker\"\n");
    let cfg = sb.config(&db.url(), &watch);
    let reminders = sb.state_dir().join("reminders.json");
    let cron = |at: Option<&str>| run_at(&cfg, &["check"], at);

    let Some(o) = cron(None) else { return };
    assert_exit(&o, 1);
    let first = stdout(&o);
    assert_eq!(first.lines().count(), 1, "{first}");
    assert!(
        first.starts_with(
            "full-sync id=1: needs a person (unknown): evidence unreadable: heartbeat"
        ),
        "{first}"
    );
    assert!(
        stderr(&o).contains("max_age 4h is below 1.5×"),
        "{}",
        stderr(&o)
    );

    // Unchanged: nothing to mail, but the exit status and last-run.json still tell.
    let o = cron(None).expect("faketime");
    assert_exit(&o, 1);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    assert_eq!(sb.last_run()["attention"], 1);
    let told = std::fs::read(&reminders).expect("reminders.json");

    // Everything else always shows everything, and leaves the reminders alone.
    let o = run_at(&cfg, &["check", "--format", "json"], None).expect("faketime");
    assert_exit(&o, 1);
    let (rows, summary) = json_lines(&o);
    assert_eq!(row(&rows, 1)["attention"], true);
    assert!(
        summary["warnings"]
            .to_string()
            .contains("max_age 4h is below"),
        "{summary}"
    );
    let o = run_at(&cfg, &["check", "--dry-run"], None).expect("faketime");
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("full-sync id=1: needs a person (unknown)"));
    assert!(stderr(&o).contains("max_age 4h is below"));
    let o = run_at(&cfg, &["check", "--explain"], None).expect("faketime");
    assert!(stdout(&o).contains("id=1    unknown"), "{}", stdout(&o));
    assert_eq!(std::fs::read(&reminders).expect("reminders"), told);

    // The basis changes (the heartbeat reads again, but the owner column holds no pid):
    // told again, once.
    std::fs::remove_file(sb.path("hb-1")).expect("remove");
    sb.heartbeat_at(1, ago(10));
    db.conn()
        .execute("UPDATE sync_log SET worker = 'web-3' WHERE id = 1", [])
        .expect("an owner that is no pid");
    let o = cron(None).expect("faketime");
    assert_exit(&o, 1);
    assert!(
        stdout(&o).starts_with(
            "full-sync id=1: needs a person (unknown): evidence unreadable: owner: \"web-3\""
        ),
        "{}",
        stdout(&o)
    );
    assert_eq!(stderr(&o), "", "the warning is unchanged");
    let o = cron(None).expect("faketime");
    assert_eq!(stdout(&o), "");

    // A day later: told again.
    let o = cron(Some(LATER)).expect("faketime");
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("full-sync id=1: needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("max_age 4h is below"), "{}", stderr(&o));

    // remind_every, shorter: once an hour.
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "remind_every = \"1h\"",
        &watch,
    );
    let at = |t: &str| run_at(&cfg, &["check"], Some(t)).expect("faketime");
    assert_eq!(stdout(&at("2035-03-15 16:39:26")), "", "half an hour later");
    let o = at("2035-03-15 17:09:27");
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "an hour later: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("max_age 4h is below"));

    // A problem that went away and comes back is news.
    db.conn()
        .execute("UPDATE sync_log SET status = 'done' WHERE id = 1", [])
        .expect("finish");
    let o = at("2035-03-15 17:09:28");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    db.conn()
        .execute("UPDATE sync_log SET status = 'running' WHERE id = 1", [])
        .expect("again");
    let o = at("2035-03-15 17:09:29");
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_damaged_reminders_file_costs_a_repeated_mail_never_a_silent_problem() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 30 * MIN);
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_ne!(stdout(&o), "");
    let path: PathBuf = sb.state_dir().join("reminders.json");
    std::fs::write(&path, "{ not json").expect("damage");
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("reminders.json"), "{}", stderr(&o));
    // Rewritten whole: the next run is quiet again.
    let o = check(&cfg, &[]);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
}
