//! The journal and the intents file under damage, `--watch`, a second configuration and
//! rotation (issue 14, cases 4, 6 and 9), through the real binary over real SQLite files:
//! - `check --watch a` leaves the intents a stopped run left for watch `b` (no "no longer
//!   configured"), and a second configuration sharing the state directory leaves the
//!   first one's intents as they are;
//! - a byte that is not UTF-8 in `pending.jsonl` is a warning, not exit 3 on every run;
//!   damaged journal lines are skipped and counted, and `stats` over a large damaged
//!   journal stays small;
//! - every journal entry names its database, and `stats` of another database sharing the
//!   journal does not count a row of the same id as its own;
//! - the journal rotates, and a stopped run's record is found by change id in the rotated
//!   generation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check::reminders::LATER;
use crate::common::*;

const STARTED: &str = "2026-11-30 10:00:00";
const MESSAGE: &str = "self-heal: dead: the heartbeat is stale";

/// A configuration file `name` over `db` with the state directory shared in the sandbox,
/// and the given watches (`name`, `table`) in the standard form.
fn config(sb: &Sandbox, name: &str, db: &Path, watches: &[(&str, &str)]) -> PathBuf {
    let mut text = format!(
        "[database]\nurl = \"sqlite://{}\"\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n",
        db.display(),
        sb.run_lock().display(),
        sb.state_dir().display()
    );
    for (watch, table) in watches {
        let body = sb
            .watch("confirm = 1\n")
            .replace("name = \"full-sync\"", &format!("name = \"{watch}\""))
            .replace("table = \"sync_log\"", &format!("table = \"{table}\""));
        text.push_str("\n[[watch]]\n");
        text.push_str(&body);
    }
    let p = sb.path(name);
    std::fs::write(&p, text).expect("write config");
    p
}

/// A SQLite file `name` with `sync_log` and `other_log`, both of the standard schema.
fn database(sb: &Sandbox, name: &str) -> PathBuf {
    let path = sb.path(name);
    let c = rusqlite::Connection::open(&path).expect("sqlite");
    c.execute_batch(SQLITE_SCHEMA).expect("schema");
    c.execute_batch(&SQLITE_SCHEMA.replace("sync_log", "other_log"))
        .expect("schema");
    path
}

fn exec(db: &Path, sql: &str) {
    rusqlite::Connection::open(db)
        .expect("sqlite")
        .execute_batch(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Row `id` of `table` as a stopped run left it: already given `error` with selfheal's
/// message, its change not journaled.
fn changed_row(db: &Path, table: &str, id: i64) {
    exec(
        db,
        &format!(
            "INSERT INTO {table} (id, status, start_time, end_time, error_msg) \
             VALUES ({id}, 'error', '{STARTED}', '{STARTED}', '{MESSAGE}')"
        ),
    );
}

/// The intent of that change, as a run writes it.
fn intent(change: &str, watch: &str, table: &str, id: i64) -> String {
    serde_json::json!({
        "action": "mark_dead", "applied": true, "basis": "the heartbeat is stale",
        "change": change, "from": "running", "host": "web1", "id": id,
        "reason": MESSAGE, "started": STARTED, "table": table, "time": "2026-11-30T10:50:00Z",
        "to": "error", "verdict": "dead", "watch": watch,
    })
    .to_string()
}

/// A header as the release before this one wrote it (no configuration, no database).
fn old_header(run: &str) -> String {
    format!(
        "{{\"journal_offset\":0,\"run\":\"{run}\",\"session\":null,\"time\":\"2026-11-30T10:50:00Z\"}}"
    )
}

fn pending_path(sb: &Sandbox) -> PathBuf {
    sb.state_dir().join("pending.jsonl")
}

fn write_pending(sb: &Sandbox, bytes: &[u8]) {
    std::fs::create_dir_all(sb.state_dir()).expect("state dir");
    std::fs::write(pending_path(sb), bytes).expect("pending");
}

/// Every journal line of every generation, oldest first.
fn journal_lines(sb: &Sandbox) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for name in [
        "journal.jsonl.3",
        "journal.jsonl.2",
        "journal.jsonl.1",
        "journal.jsonl",
    ] {
        let Ok(bytes) = std::fs::read(sb.state_dir().join(name)) else {
            continue;
        };
        for line in bytes.split(|b| *b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                out.push(v);
            }
        }
    }
    out
}

fn changes(sb: &Sandbox) -> Vec<(String, bool)> {
    journal_lines(sb)
        .iter()
        .filter_map(|v| {
            Some((
                v["change"].as_str()?.to_string(),
                v["recovered"].as_bool().unwrap_or(false),
            ))
        })
        .collect()
}

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

/// Runs `selfheal ARGS`, returning its output and its peak resident memory in KiB (the
/// child's own `ru_maxrss`, from `wait4`, which also reaps it).
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (std::process::Output, i64) {
    let mut child = selfheal()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).expect("stderr");
        v
    });
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut out).expect("stdout");
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: a plain wait4 on our own child, with pointers to live locals.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    assert_eq!(r, pid, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let output = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(code << 8),
        stdout: out,
        stderr: err.join().expect("stderr thread"),
    };
    (output, usage.ru_maxrss)
}

#[test]
fn damaged_journal_lines_are_skipped_and_counted_and_stats_stays_small() {
    // stats's peak memory is read from its `ru_maxrss`, which counts this process's peak.
    if !in_a_process_of_its_own(
        module_path!(),
        "damaged_journal_lines_are_skipped_and_counted_and_stats_stays_small",
    ) {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    db.insert(1, "running", 50 * 60);
    sb.heartbeat(1, Duration::from_secs(47 * 60));
    // A journal damaged in every way: bytes that are not UTF-8, a line cut short, a 2 MiB
    // line, then 3,000,000 short lines of garbage (33 MB).
    std::fs::create_dir_all(sb.state_dir()).expect("state");
    let mut bytes = Vec::with_capacity(36 << 20);
    bytes.extend_from_slice(b"{\"watch\": \"full-sync\", \"id\": \"caf\xe9\"}\n{\"watch\": \"fu\n");
    bytes.extend(std::iter::repeat_n(b'x', 2 << 20));
    bytes.push(b'\n');
    for _ in 0..3_000_000 {
        bytes.extend_from_slice(b"{\"id\":\xff}\n");
    }
    let journal = sb.state_dir().join("journal.jsonl");
    std::fs::write(&journal, &bytes).expect("journal");
    drop(bytes);

    let cfg_arg = cfg.display().to_string();
    let (o, kib) = run_measured(&["stats", "--config", &cfg_arg, "--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    assert!(
        summary["journal"]["damaged_lines"].as_u64().unwrap_or(0) > 1_000_000,
        "{summary}"
    );
    let warnings = summary["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "one warning for the file: {warnings:?}");
    let w = warnings[0].as_str().unwrap_or_default();
    assert!(
        w.starts_with(&format!("{}: skipped ", journal.display())),
        "{w}"
    );
    assert!(
        kib < 64 * 1024,
        "stats held {kib} KiB over a 33 MB damaged journal"
    );

    // The journal stays usable: the next change is appended and read back.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.status(1), "error");
    let o = selfheal()
        .args(["stats", "--config", &cfg_arg, "--format", "json"])
        .output()
        .expect("stats");
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["entries"], 1, "{summary}");
}

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

#[test]
fn the_journal_rotates_and_a_stopped_runs_record_is_found_by_change_id() {
    let sb = Sandbox::new();
    let db = database(&sb, "app.db");
    let cfg = config(&sb, "selfheal.toml", &db, &[("a", "sync_log")]);
    changed_row(&db, "sync_log", 1);
    changed_row(&db, "sync_log", 2);
    // An 8 MiB journal whose last line is the stopped run's first change; its second
    // change was applied and not journaled.
    std::fs::create_dir_all(sb.state_dir()).expect("state");
    let mut bytes = Vec::new();
    let filler = serde_json::json!({"watch": "a", "id": 99, "change": "older/1"}).to_string();
    while bytes.len() < 8 << 20 {
        bytes.extend_from_slice(filler.as_bytes());
        bytes.push(b'\n');
    }
    let offset = bytes.len();
    bytes.extend_from_slice(intent("web1:1:1/1", "a", "sync_log", 1).as_bytes());
    bytes.push(b'\n');
    std::fs::write(sb.state_dir().join("journal.jsonl"), &bytes).expect("journal");
    let left = format!(
        "{}\n{}\n{}\n",
        old_header("web1:1:1").replace(
            "\"journal_offset\":0",
            &format!("\"journal_offset\":{offset}")
        ),
        intent("web1:1:1/1", "a", "sync_log", 1),
        intent("web1:1:1/2", "a", "sync_log", 2)
    );
    write_pending(&sb, left.as_bytes());

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert!(
        sb.state_dir().join("journal.jsonl.1").exists(),
        "the journal was rotated"
    );
    assert!(
        std::fs::metadata(sb.state_dir().join("journal.jsonl"))
            .expect("meta")
            .len()
            < 4096
    );
    let ours: Vec<(String, bool)> = changes(&sb)
        .into_iter()
        .filter(|(c, _)| c.starts_with("web1:"))
        .collect();
    assert_eq!(
        ours,
        [
            ("web1:1:1/1".to_string(), false),
            ("web1:1:1/2".to_string(), true)
        ],
        "each change once: the first found in the rotated journal, the second journaled now"
    );
    assert!(
        stderr(&o).contains("journaled 1 change(s)"),
        "{}",
        stderr(&o)
    );

    // stats reads every generation.
    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&cfg)
        .args(["--format", "json"])
        .output()
        .expect("stats");
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["journal"]["files"], 2, "{summary}");
    assert!(
        summary["journal"]["entries"].as_u64().unwrap_or(0) > 100_000,
        "{summary}"
    );
}

/// Issue 20, item 7: a run under a wrong clock (here 2035) stored its reminders in the
/// future. Read with the right clock, `now - told` is negative, which is "less than
/// remind_every" forever: the problem was never mailed again. A reminder from the future
/// is no reminder: the problem is told again, and remembered at the right time.
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
