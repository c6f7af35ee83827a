//! The state directory shared and damaged: intents a stopped run left for another watch or
//! another configuration settled by the wrong run, a byte that is not UTF-8 in the intents,
//! `stats` of a database counting another's row, a reminder stored in the future. Through
//! the real binary over real SQLite files (the helpers are [`crate::check::journal`]'s).

use std::time::Duration;

use crate::check::journal::{
    changed_row, changes, config, database, exec, intent, journal_lines, old_header, pending_path,
    write_pending,
};
use crate::check::reminders::LATER;
use crate::common::*;

/// `check --watch a` settled watch b's intents, left by a stopped run, as unconfigured.
#[test]
fn check_watch_a_leaves_the_intents_a_stopped_run_left_for_watch_b() {
    let sb = Sandbox::new();
    let db = database(&sb, "app.db");
    let cfg = config(
        &sb,
        "selfheal.toml",
        &db,
        &[("a", "sync_log"), ("b", "other_log")],
    );
    changed_row(&db, "other_log", 7);
    let left = format!(
        "{}\n{}\n",
        old_header("web1:1:1"),
        intent("web1:1:1/1", "b", "other_log", 7)
    );
    write_pending(&sb, left.as_bytes());

    let o = check(&cfg, &["--watch", "a"]);
    assert_exit(&o, 0);
    assert!(
        !stderr(&o).contains("no longer configured"),
        "b is configured: {}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(pending_path(&sb)).expect("pending"),
        left,
        "b's intent waits, untouched, for a run that checks b"
    );
    assert_eq!(changes(&sb), []);

    // The run that checks b settles it: the change is journaled, once.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("journaled 1 change(s)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(changes(&sb), [("web1:1:1/1".to_string(), true)]);
    assert_eq!(std::fs::metadata(pending_path(&sb)).expect("meta").len(), 0);
    cron_check_is_silent(&cfg);
}

/// A second configuration sharing the state directory settled the first one's intents.
#[test]
fn a_second_configuration_sharing_the_state_directory_leaves_the_first_ones_intents() {
    let sb = Sandbox::new();
    let shop = database(&sb, "shop.db");
    let blog = database(&sb, "blog.db");
    let shop_cfg = config(&sb, "shop.toml", &shop, &[("b", "other_log")]);
    let blog_cfg = config(&sb, "blog.toml", &blog, &[("a", "sync_log")]);
    changed_row(&shop, "other_log", 7);
    // Written by the shop's run, as this release writes a group.
    let header = serde_json::json!({
        "run": "web1:1:1", "session": null, "time": "2026-11-30T10:50:00Z",
        "config": shop_cfg.canonicalize().expect("path").display().to_string(),
        "database": {"scheme": "sqlite", "path": shop.display().to_string()},
    });
    let left = format!("{header}\n{}\n", intent("web1:1:1/1", "b", "other_log", 7));
    write_pending(&sb, left.as_bytes());
    let inode = || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(pending_path(&sb)).expect("meta").ino()
    };
    let before = inode();

    let o = check(&blog_cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(
        stderr(&o),
        "",
        "nothing of the blog's to settle or warn about"
    );
    assert_eq!(inode(), before, "not even rewritten");
    assert_eq!(
        std::fs::read_to_string(pending_path(&sb)).expect("pending"),
        left,
        "the shop's intents are not the blog's to settle"
    );

    let o = check(&shop_cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("journaled 1 change(s)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(changes(&sb), [("web1:1:1/1".to_string(), true)]);
    let entry = &journal_lines(&sb)[0];
    assert_eq!(entry["database"]["path"], shop.display().to_string());
}

/// A byte that is not UTF-8 in `pending.jsonl` made every run exit 3.
#[test]
fn a_byte_that_is_not_utf8_in_the_intents_is_a_warning_not_exit_3_forever() {
    let sb = Sandbox::new();
    let db = database(&sb, "app.db");
    let cfg = config(&sb, "selfheal.toml", &db, &[("a", "sync_log")]);
    changed_row(&db, "sync_log", 3);
    let mut left = Vec::new();
    left.extend_from_slice(old_header("web1:1:1").as_bytes());
    left.extend_from_slice(b"\n");
    left.extend_from_slice(intent("web1:1:1/1", "a", "sync_log", 3).as_bytes());
    left.extend_from_slice(b"\n{\"watch\": \"a\", \"id\": 4, \"reason\": \"caf\xe9\"}\n{\"wat");
    write_pending(&sb, &left);

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{}: skipped 2 damaged lines",
            pending_path(&sb).display()
        )),
        "one warning names the file and the count: {err}"
    );
    assert_eq!(err.matches("damaged").count(), 1, "{err}");
    assert_eq!(changes(&sb), [("web1:1:1/1".to_string(), true)]);
    cron_check_is_silent(&cfg);
}

/// `stats` counted another database's row of the same id, in a shared journal, as a retry.
#[test]
fn stats_of_another_database_sharing_the_journal_does_not_count_its_row_as_a_retry() {
    let sb = Sandbox::new();
    let shop = database(&sb, "shop.db");
    let blog = database(&sb, "blog.db");
    let shop_cfg = config(&sb, "shop.toml", &shop, &[("full-sync", "sync_log")]);
    let blog_cfg = config(&sb, "blog.toml", &blog, &[("full-sync", "sync_log")]);
    // The shop's row 1 is dead and marked; the blog's row 1, another row, ended well.
    exec(
        &shop,
        "INSERT INTO sync_log (id, status, start_time) \
         VALUES (1, 'running', datetime('now', '-3000 seconds'))",
    );
    sb.heartbeat(1, Duration::from_secs(47 * 60));
    let o = check(&shop_cfg, &[]);
    assert_exit(&o, 0);
    let entry = journal_lines(&sb).pop().expect("the shop's change");
    assert_eq!(entry["id"], 1);
    exec(
        &blog,
        "INSERT INTO sync_log (id, status, start_time, end_time) \
         VALUES (1, 'done', datetime('now', '-600 seconds'), datetime('now', '-60 seconds'))",
    );

    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&blog_cfg)
        .args(["--format", "json"])
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    let (rows, summary) = json_lines(&o);
    let w = &rows[0];
    assert_eq!(
        (&w["rerun_after_mark"], &w["marked"], &w["false_positives"]),
        (
            &serde_json::json!(0),
            &serde_json::json!(0),
            &serde_json::json!(0)
        ),
        "the shop's mark is not the blog's: {w}"
    );
    assert_eq!(summary["journal"]["other_database_entries"], 1, "{summary}");

    // The shop's own stats still see it.
    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&shop_cfg)
        .args(["--format", "json"])
        .output()
        .expect("stats");
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["entries"], 1, "{summary}");
    assert_eq!(
        entry["database"],
        serde_json::json!({"scheme": "sqlite", "path": shop.display().to_string()}),
        "the entry names its database, never a user"
    );
}

/// A reminder stored under a wrong clock lay in the future and silenced its problem.
///
/// A run under a wrong clock (here 2035) stored its reminders in the future. Read with the
/// right clock, `now - told` is negative, which is "less than remind_every" forever: the
/// problem was never mailed again. A reminder from the future is no reminder: the problem
/// is told again, and remembered at the right time.
#[test]
fn a_reminder_stored_in_the_future_never_silences_a_problem() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 30 * MIN);
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let Some(o) = run_at(&cfg, &["check"], Some(LATER)) else {
        return;
    };
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("needs a person (unknown)"),
        "{}",
        stdout(&o)
    );
    let reminders = std::fs::read_to_string(sb.state_dir().join("reminders.json")).expect("told");
    assert!(
        reminders.contains("\"told\": 20"),
        "told in 2035: {reminders}"
    );

    // The clock is right again: the problem is news, and told at the right time.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("full-sync id=1: needs a person (unknown)"),
        "a reminder from the future silenced it: {}",
        stdout(&o)
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "", "told now: quiet until remind_every");
}
