//! The Prometheus alerting rules both packages install
//! (`/usr/share/selfheal/prometheus/selfheal-rules.yml`), checked with Prometheus's own
//! `promtool`: the rules load (`check rules`), each alert fires and stays quiet on the
//! series of `selfheal-rules.test.yml` (`test rules`), and a metrics file a real
//! `selfheal check` wrote passes `check metrics` and has every metric the rules read.
//!
//! `promtool` comes with Debian's `prometheus` package (`scripts/test` installs it). Without
//! it these tests fail when `CI` is set and are skipped (with a `SKIPPED` line) elsewhere.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus")
}

fn rules_text() -> String {
    std::fs::read_to_string(rules_dir().join("selfheal-rules.yml")).expect("selfheal-rules.yml")
}

/// True when promtool runs here; false (after saying so) on a developer's machine without
/// it; a failure in CI.
fn have_promtool() -> bool {
    if Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must have promtool (Debian package prometheus; scripts/test installs it)"
    );
    eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
    false
}

fn promtool(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(rules_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(bytes) = stdin {
        input.write_all(bytes).expect("write to promtool");
    }
    drop(input);
    child.wait_with_output().expect("promtool output")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The alert names of the rules file, in order.
fn alerts() -> Vec<String> {
    rules_text()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().to_string())
        .collect()
}

/// Every metric name (`selfheal_…`) an expression of the rules file reads.
fn metrics_the_rules_read() -> Vec<String> {
    let mut names: Vec<String> = rules_text()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .flat_map(|expr| {
            expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("selfheal_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_rules_load_in_promtool() {
    if !have_promtool() {
        return;
    }
    let o = promtool(&["check", "rules", "selfheal-rules.yml"], None);
    let out = text(&o);
    assert!(o.status.success(), "promtool check rules:\n{out}");
    let n = alerts().len();
    assert!(
        out.contains(&format!("SUCCESS: {n} rules found")),
        "{n} alerts in the file; promtool says:\n{out}"
    );
    // The six conditions of docs/design.md#packaging, by name.
    for a in [
        "SelfhealNotSucceeding",
        "SelfhealNeverSucceeded",
        "SelfhealRowsNeedAPerson",
        "SelfhealParkedBacklog",
        "SelfhealBreakerTripped",
        "SelfhealClockSkew",
        "SelfhealWatchBusy",
        "SelfhealMetricsAbsent",
    ] {
        assert!(
            alerts().iter().any(|x| x == a),
            "no alert {a}: {:?}",
            alerts()
        );
    }
}

/// Every alert has at least one evaluation where it fires and one where it does not, and
/// promtool passes them all.
#[test]
fn each_alert_fires_and_stays_quiet_on_its_series() {
    let tests = std::fs::read_to_string(rules_dir().join("selfheal-rules.test.yml"))
        .expect("selfheal-rules.test.yml");
    // (alert, fires) for every `alertname:` with the `exp_alerts:` after it.
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut cases = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(name) = l.strip_prefix("alertname:") {
            let exp = lines[i + 1..]
                .iter()
                .find(|l| l.starts_with("exp_alerts:"))
                .expect("exp_alerts after alertname");
            cases.push((name.trim().to_string(), *exp != "exp_alerts: []"));
        }
    }
    for a in alerts() {
        for fires in [true, false] {
            assert!(
                cases.contains(&(a.clone(), fires)),
                "selfheal-rules.test.yml has no case where {a} {}",
                if fires { "fires" } else { "stays quiet" }
            );
        }
    }
    if !have_promtool() {
        return;
    }
    let o = promtool(&["test", "rules", "selfheal-rules.test.yml"], None);
    assert!(o.status.success(), "promtool test rules:\n{}", text(&o));
    assert!(text(&o).contains("SUCCESS"), "{}", text(&o));
}

/// A metrics file a real `selfheal check` wrote (a dead row marked, a parked row) passes
/// `promtool check metrics` without a finding, and has every metric the rules read, so a
/// renamed metric cannot leave an alert watching nothing.
#[test]
fn a_real_runs_metrics_file_passes_promtool_and_has_what_the_rules_read() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * 3600);
    sb.heartbeat(1, Duration::from_secs(20));
    db.insert(2, "running", 3_000);
    sb.heartbeat(2, Duration::from_secs(2_820));
    db.insert(3, "wait_manual", 5 * 3600);
    std::fs::create_dir_all(sb.path("textfile")).expect("dir");
    let prom = sb.path("textfile/selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", prom.display()),
        &sb.watch("confirm = 1\nmanual_value = \"wait_manual\"\n"),
    );
    let o = check(&cfg, &[]);
    // Row 3 is parked: exit 1.
    assert_exit(&o, 1);
    assert_eq!(db.status(2), "error", "the run marked the dead row");
    let file = std::fs::read_to_string(&prom).expect("metrics file");
    assert!(
        file.contains("selfheal_parked_rows{watch=\"full-sync\"} 1"),
        "{file}"
    );

    let written: Vec<&str> = file
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for name in metrics_the_rules_read() {
        assert!(
            written.contains(&name.as_str()),
            "the rules read {name}, which a run does not write (it writes {written:?})"
        );
    }

    if !have_promtool() {
        return;
    }
    let o = promtool(&["check", "metrics"], Some(file.as_bytes()));
    assert!(
        o.status.success() && text(&o).trim().is_empty(),
        "promtool check metrics on the file a run wrote (exit {:?}):\n{}\n--- the file:\n{file}",
        o.status.code(),
        text(&o)
    );
}

/// The check above can fail: promtool finds a counter without `_total` in a file shaped
/// like selfheal's.
#[test]
fn promtool_check_metrics_finds_a_bad_name() {
    if !have_promtool() {
        return;
    }
    let bad = "# HELP selfheal_changes Rows changed.\n# TYPE selfheal_changes counter\n\
               selfheal_changes{watch=\"a\",action=\"mark_dead\"} 1\n";
    let o = promtool(&["check", "metrics"], Some(bad.as_bytes()));
    assert!(!o.status.success(), "promtool accepted: {}", text(&o));
    assert!(text(&o).contains("_total"), "{}", text(&o));
}
