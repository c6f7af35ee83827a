//! The command line as an operator meets it: bad input gets exit 2 and a message naming
//! the file, the key and what is expected — before anything is touched; `--help` and the
//! demo work on a fresh machine.

use crate::common::*;

/// A valid configuration over a real SQLite file with one dead row, with `edit` applied.
fn bad_config(edit: impl Fn(&str) -> String) -> (Sandbox, SqliteDb, std::path::PathBuf) {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 3_000);
    sb.heartbeat(2, std::time::Duration::from_secs(2_820));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, edit(&text)).expect("config");
    (sb, db, cfg)
}

/// A named edit of a valid configuration and the phrases its error must contain.
type Case = (
    &'static str,
    Box<dyn Fn(&str) -> String>,
    &'static [&'static str],
);

#[test]
fn bad_configuration_is_exit_2_naming_file_key_and_expectation_and_touches_nothing() {
    let cases: Vec<Case> = vec![
        (
            "unknown key",
            Box::new(|t: &str| t.replace("stale_after", "stale_aftr")),
            &["stale_aftr", "unknown key", "did you mean `stale_after`?"],
        ),
        (
            "bad duration",
            Box::new(|t: &str| t.replace("\"5m\"", "\"five minutes\"")),
            &["watch 'full-sync': stale_after", "expected a duration"],
        ),
        (
            "injection in a table name",
            Box::new(|t: &str| t.replace("\"sync_log\"", "\"sync_log; DROP TABLE x\"")),
            &[
                "watch 'full-sync': table",
                "expected a plain table name",
                "sync_log; DROP TABLE x",
            ],
        ),
        (
            "quote in a column name",
            Box::new(|t: &str| t.replace("\"start_time\"", "\"start_time`\"")),
            &["watch 'full-sync': started_column", "plain column name"],
        ),
        (
            "max_age <= stale_after",
            Box::new(|t: &str| t.replace("\"4h\"", "\"5m\"")),
            &["watch 'full-sync': max_age", "greater than stale_after"],
        ),
        (
            "no heartbeat source",
            Box::new(|t: &str| {
                t.lines()
                    .filter(|l| !l.starts_with("heartbeat_file"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }),
            &["watch 'full-sync': heartbeat_file", "no heartbeat source"],
        ),
        (
            "not TOML",
            Box::new(|t: &str| format!("{t}\n[[watch]\n")),
            &["line"],
        ),
    ];
    for (name, edit, needles) in cases {
        let (_sb, db, cfg) = bad_config(edit);
        let before = db.bytes();
        let o = check(&cfg, &[]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains(&cfg.display().to_string()),
            "{name}: names the file: {err}"
        );
        for n in needles {
            assert!(err.contains(n), "{name}: {n:?} in {err}");
        }
        assert_eq!(stdout(&o), "", "{name}");
        assert_eq!(db.bytes(), before, "{name}: nothing touched");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn bad_flags_are_exit_2() {
    let o = selfheal()
        .args(["check", "--format", "yaml"])
        .output()
        .expect("run");
    assert_exit(&o, 2);
    let o = selfheal().args(["frobnicate"]).output().expect("run");
    assert_exit(&o, 2);
    let (_sb, _db, cfg) = bad_config(std::string::ToString::to_string);
    let o = check(&cfg, &["--stale-after", "soon"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("command line: --stale-after: expected a duration"),
        "{}",
        stderr(&o)
    );
    let o = check(&cfg, &["--watch", "nope"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--watch nope: no such watch") && stderr(&o).contains("full-sync"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn no_configuration_at_all_is_exit_2_with_a_way_forward() {
    // The default path does not exist on a test machine.
    if std::path::Path::new("/etc/selfheal/selfheal.toml").exists() {
        return;
    }
    let o = selfheal().arg("check").output().expect("run");
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("/etc/selfheal/selfheal.toml") && err.contains("--config"),
        "{err}"
    );
}

#[test]
fn a_config_without_watches_is_a_quiet_no_op() {
    let sb = Sandbox::new();
    let cfg = sb.path("empty.toml");
    std::fs::write(&cfg, "# [[watch]] tables are commented out\n").expect("config");
    let o = cron_check_is_silent(&cfg);
    assert_eq!(stderr(&o), "");
}

#[test]
fn help_and_version() {
    let o = selfheal().arg("--help").output().expect("run");
    assert_exit(&o, 0);
    for s in ["check", "demo", "Exit status"] {
        assert!(stdout(&o).contains(s), "{s}");
    }
    let o = selfheal().args(["check", "--help"]).output().expect("run");
    assert_exit(&o, 0);
    for s in [
        "--explain",
        "--dry-run",
        "--format",
        "--config",
        "--watch",
        "--stale-after",
        "--max-age",
        "--db",
    ] {
        assert!(stdout(&o).contains(s), "{s}");
    }
    let o = selfheal().arg("--version").output().expect("run");
    assert_exit(&o, 0);
    assert!(stdout(&o).starts_with("selfheal "), "{}", stdout(&o));
}

#[test]
fn the_demo_runs_the_real_check_on_a_sandbox() {
    let sb = Sandbox::new();
    let dir = sb.path("demo");
    let o = selfheal()
        .args(["demo", "--keep"])
        .arg(&dir)
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let out = stdout(&o);
    for s in [
        "$ selfheal check --explain",
        "$ selfheal check --config",
        "id=1    alive",
        "id=2    dead",
        "id=3    starting",
        "id=4    overtime",
        "id=5    hung",
        // Killed a moment ago: free lock, fresh heartbeat — it looks alive until the
        // heartbeat is stale, and cron's next run (ten minutes later) reclaims it.
        "id=6    alive",
        "# Ten minutes later",
        "jobs id=6: set status to 'error' (mark_dead) — self-heal: dead: lock free, worker gone",
        "Before:",
        "After:",
    ] {
        assert!(out.contains(s), "{s:?} in\n{out}");
    }
    // The real check changed exactly the condemned rows.
    let conn = rusqlite::Connection::open(dir.join("app.db")).expect("db");
    let statuses: Vec<(i64, String)> = conn
        .prepare("SELECT id, status FROM sync_log ORDER BY id")
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .expect("rows");
    let expect = [
        (1, "running"),
        (2, "error"),
        (3, "running"),
        (4, "error"),
        (5, "wait_manual"),
        (6, "error"),
        (7, "done"),
    ];
    assert_eq!(
        statuses,
        expect
            .iter()
            .map(|(i, s)| (*i, s.to_string()))
            .collect::<Vec<_>>()
    );
    for lock in ["1.lock", "5.lock", "6.lock"] {
        assert!(
            dir.join("run").join(lock).exists(),
            "{lock} is never deleted"
        );
    }
    let journal = std::fs::read_to_string(dir.join("state/journal.jsonl")).expect("journal");
    assert_eq!(journal.lines().count(), 4);
    // Without --keep, nothing is left behind.
    let o = selfheal()
        .arg("demo")
        .env("TMPDIR", sb.dir.path())
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let left: Vec<_> = std::fs::read_dir(sb.dir.path())
        .expect("ls")
        .filter_map(std::result::Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("selfheal-demo-")
        })
        .collect();
    assert!(left.is_empty(), "the temporary sandbox is removed");
}

#[test]
fn watch_flags_keep_their_shapes() {
    let (_sb, _db, cfg) = bad_config(std::string::ToString::to_string);
    // An integer flag is parsed by clap; a bad one is a usage error before anything runs.
    let o = check(&cfg, &["--max-attempts", "three"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("invalid value 'three' for '--max-attempts <N>'"),
        "{}",
        stderr(&o)
    );
    // A repeatable flag collects every value; an error names the flag as it is typed.
    let o = check(
        &cfg,
        &["--success-value", "done", "--success-value", "error"],
    );
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("command line: --success-value: \"error\" is the dead_value"),
        "{}",
        stderr(&o)
    );
    let o = check(&cfg, &["--table", "a", "--table", "b"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("'--table <TABLE>' cannot be used multiple times"),
        "{}",
        stderr(&o)
    );
}
