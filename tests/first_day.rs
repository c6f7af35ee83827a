//! The first day without friction, on the check and doctor side (issue 20), through the
//! real binary: a misspelt key names the key it meant and a number without a unit gets a
//! fix whose value every rule accepts (12); `doctor` passes a healthy single-host setup
//! with exit 0 and words a missing index by the table's size (9); `--quiet --log syslog`
//! on a host without `/dev/log` says so once, in the metrics and in `doctor` (13); a run as
//! `nobody` reads as sentences with a fix for such a user (14); `--dry-run` says which rows
//! wait for their next confirmation (16).

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

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

// ---------------------------------------------------------------------------------------
// 12. Hints that are right

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

// ---------------------------------------------------------------------------------------
// 9. doctor on a healthy single-host setup

fn doctor(cfg: &Path) -> Output {
    selfheal()
        .args(["doctor", "--config"])
        .arg(cfg)
        .output()
        .expect("run selfheal doctor")
}

/// The doctor line about `subject`.
fn finding(o: &Output, subject: &str) -> String {
    let out = stdout(o);
    out.lines()
        .find(|l| {
            l.split_once(' ')
                .is_some_and(|(_, r)| r.starts_with(&format!("{subject}: ")))
        })
        .unwrap_or_else(|| panic!("no {subject:?} line in:\n{out}{}", stderr(o)))
        .to_string()
}

#[test]
fn doctor_passes_a_healthy_single_host_setup_with_the_hosts_advice_and_exit_0() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 120);
    sb.heartbeat(1, std::time::Duration::from_secs(10));
    // Heartbeat files, no owner_column, no host: right on one host.
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = doctor(&cfg);
    let hosts = finding(&o, "watch full-sync: hosts");
    assert!(
        hosts.starts_with("i watch full-sync: hosts: heartbeat_file names files on this host"),
        "{hosts}"
    );
    assert!(
        hosts.contains("; advice: pin the watch to its one host (host = \""),
        "{hosts}"
    );
    assert!(
        stdout(&o)
            .lines()
            .all(|l| l.starts_with("✓ ") || l.starts_with("i ")),
        "{}",
        stdout(&o)
    );
    assert_exit(&o, 0);
}

#[test]
fn a_missing_index_is_worded_by_the_size_of_the_table() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.exec("DROP INDEX sync_log_status");
    for id in 1..=8 {
        db.insert(id, "done", 7200);
    }
    let cfg = sb.config(&db.url(), &sb.watch("owner_column = \"worker\"\n"));
    let o = doctor(&cfg);
    let index = finding(&o, "watch full-sync: index");
    assert!(
        index.starts_with(
            "! watch full-sync: index: no index covers status: every run reads the whole \
             table — ~8 rows now, which costs nothing yet"
        ),
        "{index}"
    );
    assert!(!index.contains("outage"), "{index}");
    assert!(
        index.ends_with("; fix: CREATE INDEX idx_sync_log_status ON sync_log (status)"),
        "{index}"
    );
    assert_exit(&o, 1);

    // A table of a few hundred thousand rows: it costs now.
    db.exec(
        "WITH RECURSIVE n(i) AS (SELECT 9 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) \
         INSERT INTO sync_log (id, status, start_time) SELECT i, 'done', '2026-01-01 00:00:00' FROM n",
    );
    let o = doctor(&cfg);
    let index = finding(&o, "watch full-sync: index");
    assert!(
        index.starts_with(
            "✗ watch full-sync: index: no index covers status: every run reads the whole \
             table, ~200000 rows now, on every run"
        ),
        "{index}"
    );
}
