//! The command line as an operator meets it: bad input gets exit 2 and a message naming
//! the file, the key and what is expected — before anything is touched, a misspelt key the
//! key it meant, a number without a unit a fix whose value every rule accepts; `--help` and
//! the demo work on a fresh machine.

use std::path::Path;
use std::process::Output;

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

// ---------------------------------------------------------------------------------------
// Hints that are right: a misspelt key names the key it meant, a number without a unit
// gets a fix whose value every rule accepts

/// `selfheal check ARGS --config CFG`.
fn check_with(cfg: &Path, args: &[&str]) -> Output {
    selfheal()
        .arg("check")
        .args(args)
        .arg("--config")
        .arg(cfg)
        .output()
        .expect("run selfheal check")
}

/// The text of the `selfheal: fix: ` line of a run.
fn fix_line(o: &Output) -> String {
    let err = stderr(o);
    err.lines()
        .find_map(|l| l.strip_prefix("selfheal: fix: "))
        .unwrap_or_else(|| panic!("no fix line in:\n{err}"))
        .to_string()
}

/// The first `"…"` in `text`.
fn first_quoted(text: &str) -> String {
    text.split('"').nth(1).expect("a quoted value").to_string()
}

#[test]
fn a_misspelt_key_names_the_key_it_meant_and_the_fix_works() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let typo = sb.watch("").replace("stale_after", "stale_afer");
    let cfg = sb.config(&db.url(), &typo);
    let o = check_with(&cfg, &[]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("unknown key `stale_afer`; did you mean `stale_after`?"),
        "{err}"
    );
    let fix = fix_line(&o);
    assert!(
        fix.starts_with("rename stale_afer to stale_after (line "),
        "{fix}"
    );
    // So in [run] too.
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "remind_evry = \"1h\"",
        &sb.watch(""),
    );
    let o = check_with(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        fix_line(&o).starts_with("rename remind_evry to remind_every"),
        "{}",
        stderr(&o)
    );
    // Applying the fix is all it takes.
    let cfg = sb.config(&db.url(), &typo.replace("stale_afer", "stale_after"));
    assert_exit(&check_with(&cfg, &[]), 0);
}

#[test]
fn a_number_without_a_unit_gets_a_fix_whose_value_the_rules_accept() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let good = sb.watch("");
    // (what is written, the value the fix must offer first)
    let cases = [
        // 90 s and 90 ms are below stale_after (5m): never offered.
        (good.replace("max_age = \"4h\"", "max_age = \"90\""), "90m"),
        (
            good.replace("stale_after = \"5m\"", "stale_after = \"3\""),
            "3s",
        ),
        // stale_after 1h: of 2 s, 2 min and 2 h, only 2 h is above it.
        (
            good.replace("stale_after = \"5m\"", "stale_after = \"1h\"")
                .replace("max_age = \"4h\"", "max_age = \"2\""),
            "2h",
        ),
    ];
    for (watch, offered) in cases {
        let cfg = sb.config(&db.url(), &watch);
        let o = check_with(&cfg, &[]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains("has no unit"), "{err}");
        assert!(!err.contains("ms"), "a value the rules reject: {err}");
        let fix = fix_line(&o);
        let value = first_quoted(&fix);
        assert_eq!(value, offered, "{fix}");
        // The fix, applied: accepted.
        let fixed = watch
            .lines()
            .map(|l| match l.split_once(" = ") {
                Some((k, v)) if first_quoted(v).bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{k} = \"{value}\"")
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = sb.config(&db.url(), &format!("{fixed}\n"));
        let o = check_with(&cfg, &["--dry-run"]);
        assert_exit(&o, 0);
    }
    // A number no unit can save gets the rule instead of a value.
    let watch = good
        .replace("stale_after = \"5m\"", "stale_after = \"3h\"")
        .replace("max_age = \"4h\"", "max_age = \"2\"");
    let o = check_with(&sb.config(&db.url(), &watch), &[]);
    assert_exit(&o, 2);
    assert_eq!(
        fix_line(&o),
        "give max_age a unit (s, m, h or d) and a value above stale_after (3h)"
    );
    // On the command line, and in [run].
    let cfg = sb.config(&db.url(), &good);
    let o = check_with(&cfg, &["--max-age", "90"]);
    assert_exit(&o, 2);
    assert_eq!(
        fix_line(&o),
        "write --max-age 90m (or 90h), whichever you meant: a number needs its unit"
    );
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "remind_every = \"24\"",
        &good,
    );
    let o = check_with(&cfg, &[]);
    assert_exit(&o, 2);
    assert!(
        fix_line(&o).starts_with("write remind_every = \"24s\""),
        "{}",
        stderr(&o)
    );
}
