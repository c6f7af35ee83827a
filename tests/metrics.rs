//! `run.metrics_file` end to end: what a run writes, that dry runs write nothing, that a
//! failed run keeps the last success (the dead man's switch), that a reader never sees a
//! partial file while many runs rewrite it, and that node_exporter's own textfile
//! collector reads it without error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;

fn setup() -> (Sandbox, SqliteDb, PathBuf, PathBuf) {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 2 * 3600);
    sb.heartbeat(1, Duration::from_secs(20));
    db.insert(2, "running", 3_000);
    sb.heartbeat(2, Duration::from_secs(2_820));
    std::fs::create_dir_all(sb.path("textfile")).expect("dir");
    let prom = sb.path("textfile/selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", prom.display()),
        &sb.watch("confirm = 1\n"),
    );
    (sb, db, cfg, prom)
}

/// `name{labels} value` lines as (series, value).
fn series(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                k.to_string(),
                v.parse().unwrap_or_else(|_| panic!("bad value {l:?}")),
            )
        })
        .collect()
}

fn value(text: &str, key: &str) -> Option<f64> {
    series(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

#[test]
fn a_run_writes_rows_by_verdict_changes_and_its_last_success() {
    let (_sb, db, cfg, prom) = setup();
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 0);
    assert!(!prom.exists(), "dry runs write no metrics");

    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(db.status(2), "error");
    let text = std::fs::read_to_string(&prom).expect("metrics");
    for (k, v) in [
        ("selfheal_rows{watch=\"full-sync\",verdict=\"alive\"}", 1.0),
        ("selfheal_rows{watch=\"full-sync\",verdict=\"dead\"}", 1.0),
        (
            "selfheal_rows{watch=\"full-sync\",verdict=\"unknown\"}",
            0.0,
        ),
        ("selfheal_attention_rows{watch=\"full-sync\"}", 0.0),
        (
            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_dead\"}",
            1.0,
        ),
        (
            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_retry\"}",
            0.0,
        ),
        ("selfheal_breaker_trips_total{watch=\"full-sync\"}", 0.0),
        ("selfheal_last_run_success{watch=\"full-sync\"}", 1.0),
        ("selfheal_last_run_exit_status", 0.0),
    ] {
        assert_eq!(value(&text, k), Some(v), "{k} in\n{text}");
    }
    let last = value(
        &text,
        "selfheal_last_success_timestamp_seconds{watch=\"full-sync\"}",
    )
    .expect("last success");
    assert!((now_s() - last).abs() < 30.0, "{last}");
    assert!(text.contains("# TYPE selfheal_changes_total counter"));
    assert!(text.contains("# TYPE selfheal_rows gauge"));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&prom).expect("stat").permissions(),
    );
    assert_eq!(mode & 0o777, 0o644, "node_exporter must read it");

    // A second run: the counter keeps its total; the dead row is gone.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&prom).expect("metrics");
    assert_eq!(
        value(
            &text,
            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_dead\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "selfheal_rows{watch=\"full-sync\",verdict=\"dead\"}"),
        Some(0.0)
    );

    // The database disappears: the run fails (exit 3), says so in the file, and keeps the
    // last success, so a "stale last success" alert fires.
    std::fs::rename(&db.path, db.path.with_extension("gone")).expect("hide db");
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    let failed = std::fs::read_to_string(&prom).expect("metrics");
    assert_eq!(
        value(&failed, "selfheal_last_run_success{watch=\"full-sync\"}"),
        Some(0.0)
    );
    assert_eq!(value(&failed, "selfheal_last_run_exit_status"), Some(3.0));
    assert_eq!(
        value(
            &failed,
            "selfheal_last_success_timestamp_seconds{watch=\"full-sync\"}"
        ),
        value(
            &text,
            "selfheal_last_success_timestamp_seconds{watch=\"full-sync\"}"
        )
    );
    assert_eq!(
        value(
            &failed,
            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_dead\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &failed,
            "selfheal_rows{watch=\"full-sync\",verdict=\"alive\"}"
        ),
        None
    );
}

#[test]
fn an_unwritable_metrics_directory_is_exit_3_after_the_work_is_done() {
    let (sb, db, _cfg, _prom) = setup();
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "metrics_file = \"/nonexistent/selfheal/selfheal.prom\"",
        &sb.watch("confirm = 1\n"),
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("/nonexistent/selfheal/selfheal.prom"),
        "{}",
        stderr(&o)
    );
    assert_eq!(db.status(2), "error", "the check itself was done");
}

/// Families every complete file has.
const FAMILIES: [&str; 8] = [
    "selfheal_rows{",
    "selfheal_attention_rows{",
    "selfheal_changes_total{",
    "selfheal_breaker_trips_total{",
    "selfheal_last_run_timestamp_seconds{",
    "selfheal_last_run_duration_seconds{",
    "selfheal_last_success_timestamp_seconds{",
    "selfheal_metrics_version 1\n",
];

fn complete(text: &str) -> bool {
    text.ends_with("selfheal_metrics_version 1\n") && FAMILIES.iter().all(|f| text.contains(f))
}

#[test]
fn the_metrics_file_is_always_complete_when_read_during_runs() {
    let (sb, db, cfg, prom) = setup();
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let prom = prom.clone();
        std::thread::spawn(move || {
            let (mut reads, mut bad) = (0u64, Vec::new());
            let mut last_changes = 0.0;
            while !stop.load(Ordering::Relaxed) {
                match std::fs::read_to_string(&prom) {
                    Ok(t) => {
                        reads += 1;
                        if !complete(&t) {
                            bad.push(t);
                            continue;
                        }
                        let c = value(
                            &t,
                            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_dead\"}",
                        )
                        .unwrap_or(-1.0);
                        if c < last_changes {
                            bad.push(format!("counter went back from {last_changes}: {t}"));
                        }
                        last_changes = c;
                    }
                    Err(e) => bad.push(format!("read failed: {e}")),
                }
            }
            (reads, bad)
        })
    };
    // Many runs, four at a time: the ones that find the run lock taken (exit 75) must not
    // write; the others rewrite the file while the reader reads it. Rows keep dying so
    // every run has something to count.
    let mut next_id = 100;
    let mut busy = 0;
    for _round in 0..15 {
        for _ in 0..2 {
            db.insert(next_id, "running", 3_000);
            sb.heartbeat(next_id, Duration::from_secs(2_820));
            next_id += 1;
        }
        let children: Vec<_> = (0..4)
            .map(|_| {
                selfheal()
                    .args(["check", "--quiet", "--config"])
                    .arg(&cfg)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for mut c in children {
            match c.wait().expect("wait").code() {
                Some(0) => {}
                Some(75) => busy += 1,
                other => panic!("exit {other:?}"),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (reads, bad) = reader.join().expect("reader");
    assert!(reads > 100, "the reader read often enough: {reads}");
    assert!(
        bad.is_empty(),
        "{} of {reads} reads were incomplete, e.g.:\n{}",
        bad.len(),
        bad[0]
    );
    let text = std::fs::read_to_string(&prom).expect("metrics");
    assert_eq!(
        value(
            &text,
            "selfheal_changes_total{watch=\"full-sync\",action=\"mark_dead\"}"
        ),
        Some(31.0),
        "every change counted once, none lost to a concurrent rewrite ({busy} runs were busy)"
    );
    let leftovers: Vec<_> = std::fs::read_dir(prom.parent().unwrap_or(Path::new("/")))
        .expect("ls")
        .filter_map(std::result::Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary files: {leftovers:?}");
}

/// node_exporter's textfile collector parses the file: our series appear and it reports
/// no scrape error.
#[test]
fn node_exporter_reads_the_file() {
    let exporter = ["prometheus-node-exporter", "node_exporter"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok()
        });
    let Some(exporter) = exporter else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have prometheus-node-exporter (scripts/test installs it)"
        );
        eprintln!("SKIPPED: prometheus-node-exporter is not installed");
        return;
    };
    let (_sb, _db, cfg, prom) = setup();
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let dir = prom.parent().expect("dir");
    let mut child = std::process::Command::new(exporter)
        .arg("--collector.disable-defaults")
        .arg("--collector.textfile")
        .arg(format!("--collector.textfile.directory={}", dir.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start node exporter");
    let mut body = String::new();
    for _ in 0..100 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
            body.clear();
            let _ = s.read_to_string(&mut body);
            if body.contains("node_textfile_scrape_error") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        body.contains("node_textfile_scrape_error 0"),
        "scrape error:\n{body}"
    );
    assert!(
        body.contains("selfheal_changes_total{action=\"mark_dead\",watch=\"full-sync\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("selfheal_last_success_timestamp_seconds{watch=\"full-sync\"}"),
        "{body}"
    );
}

#[test]
fn a_run_of_one_watch_keeps_the_other_watches_lines() {
    let (sb, db, _cfg, prom) = setup();
    // Two job kinds in one table, one watch each.
    db.exec(
        "ALTER TABLE sync_log ADD COLUMN job TEXT; \
         UPDATE sync_log SET job = CASE id WHEN 1 THEN 'full-sync' ELSE 'nightly' END;",
    );
    let second = sb
        .watch("match = { job = \"nightly\" }\nconfirm = 1\n")
        .replace("name = \"full-sync\"", "name = \"nightly\"");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", prom.display()),
        &format!(
            "{}\n\n[[watch]]\n{second}",
            sb.watch("match = { job = \"full-sync\" }\nconfirm = 1\n")
        ),
    );
    let o = check(&cfg, &["--watch", "nightly"]);
    assert_exit(&o, 0);
    let first = std::fs::read_to_string(&prom).expect("metrics");
    assert!(first.contains("watch=\"nightly\""), "{first}");
    assert!(
        !first.contains("watch=\"full-sync\""),
        "not run yet: {first}"
    );
    std::thread::sleep(Duration::from_millis(1_100));
    let o = check(&cfg, &["--watch", "full-sync"]);
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&prom).expect("metrics");
    let key = "selfheal_last_run_timestamp_seconds{watch=\"nightly\"}";
    assert_eq!(value(&text, key), value(&first, key), "kept as it was");
    assert_eq!(
        value(
            &text,
            "selfheal_changes_total{watch=\"nightly\",action=\"mark_dead\"}"
        ),
        Some(1.0)
    );
    assert!(text.contains("watch=\"full-sync\""), "{text}");
}
