//! Parked rows stay visible, through the real binary with real SQLite files, the real
//! MariaDB and real processes holding real locks: counted every run (metrics, JSON,
//! `last-run.json`), listed by `--explain` and `doctor` (with the `selfheal resolve`
//! command for each), and the statement `show --format json` gives for doing it by hand
//! really releases the row; `doctor`'s statement quotes what the database holds.
//!
//! Deaths that must be written at once rest on conclusive evidence (a free lock, an owner
//! pid that exited), which no confirmation holds back.

use std::path::Path;
use std::process::Output;

use crate::common::*;
use mysql::prelude::Queryable;

/// The value of a metrics line (`name{labels} value`).
fn metric(path: &Path, line_start: &str) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// Runs the cron form, a cron period apart, until row `id` leaves `running` (a
/// confirmation may hold an inferred verdict for a run or two), returning the run that
/// moved it.
fn check_until_moved(sb: &Sandbox, cfg: &Path, id: i64, status: impl Fn(i64) -> String) -> Output {
    for _ in 0..3 {
        next_cron_run(sb);
        let o = check(cfg, &[]);
        if status(id) != "running" {
            return o;
        }
    }
    panic!("row {id} is still running after three runs");
}

#[test]
fn a_parked_row_is_counted_every_run_listed_by_doctor_and_released_by_its_statement() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Row 1: its heartbeat stalled while its worker holds the lock: hung, parked.
    db.insert(1, "running", 40 * MIN);
    sb.heartbeat(1, secs(25 * MIN));
    let mut holder = flock1_holder(&sb.lock_path(1), false);
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &watch_with_lock(&sb, "manual_value = \"wait_manual\"\n"),
    );
    let parked = check_until_moved(&sb, &cfg, 1, |id| db.status(id));
    assert_exit(&parked, 1);
    assert!(
        stdout(&parked).contains("full-sync id=1: set status to 'wait_manual' (mark_manual"),
        "{}",
        stdout(&parked)
    );
    assert_eq!(db.status(1), "wait_manual");

    // The person was told; later runs say nothing, but count the row and exit 1 while it
    // waits for them.
    cron_check_is_quiet_while_parked(&cfg);
    let gauge = "selfheal_parked_rows{watch=\"full-sync\"}";
    assert_eq!(metric(&metrics, gauge), Some(1.0));
    assert_eq!(
        metric(&metrics, "selfheal_attention_rows{watch=\"full-sync\"}"),
        Some(0.0)
    );
    let last = sb.last_run();
    assert_eq!(
        (last["parked"].as_u64(), last["exit_status"].as_u64()),
        (Some(1), Some(1))
    );
    let o = check(&cfg, &["--format", "json", "--dry-run"]);
    assert_exit(&o, 1);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["parked"], 1, "{summary}");
    assert_eq!(summary["per_watch"][0]["parked"], 1, "{summary}");
    let o = check(&cfg, &["--explain"]);
    assert!(
        stdout(&o)
            .contains("  parked: 1 row in 'wait_manual' waits for a person: id=1 (started 40m"),
        "{}",
        stdout(&o)
    );

    // doctor lists it, with when it was parked, and the command that decides it.
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("! watch full-sync: parked row id=1: parked "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains(", from the journal); its run started 40m"),
        "{line}"
    );
    // Each command repeats the --config the run was given, so that it can be pasted.
    let c = cfg.display();
    assert_eq!(
        fix_of(&out, "! watch full-sync: parked row id=1:", None),
        format!(
            "after looking (selfheal show full-sync 1 --config {c}): selfheal resolve full-sync 1 \
             --as dead|running --config {c}"
        )
    );
    // The statement for doing it by hand stays available in show's JSON, where `resolve`
    // itself would act: not while the worker holds its lock, once it is gone.
    let shown = |cfg: &std::path::Path| {
        let o = selfheal()
            .args(["show", "full-sync", "1", "--format", "json", "--config"])
            .arg(cfg)
            .output()
            .expect("show");
        assert_exit(&o, 0);
        serde_json::from_str::<serde_json::Value>(stdout(&o).trim()).expect("json")
    };
    assert!(shown(&cfg)["sql"].is_null(), "the worker lives");
    holder.kill9();
    let o = selfheal()
        .args(["show", "full-sync", "1", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 0);
    let shown: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    let release = shown["sql"].as_str().expect("the statement").to_string();
    let release = release.as_str();
    assert!(release.starts_with("UPDATE \"sync_log\" SET"), "{release}");
    // A person runs it, as shown, after looking.
    let changed = db
        .conn()
        .execute(release, [])
        .expect("the release statement runs");
    assert_eq!(changed, 1);
    let (_, status, ended, _) = db.dump().remove(0);
    assert_eq!((status.as_str(), ended), ("error", true));
    // Once released: a compare-and-set, so running it twice changes nothing.
    assert_eq!(db.conn().execute(release, []).expect("runs"), 0);

    cron_check_is_silent(&cfg);
    assert_eq!(metric(&metrics, gauge), Some(0.0));
    let o = doctor(&cfg);
    assert!(
        stdout(&o).contains("✓ watch full-sync: parked rows: none in 'wait_manual'"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn doctors_release_statement_quotes_what_the_database_holds_mariadb() {
    let mut db = mysql_or_skip!();
    db.exec(
        "CREATE TABLE jobs (id VARCHAR(40) PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, KEY idx_status (status))",
    );
    // Parked by hand (no journal knows it), with an id no SQL should be spliced from.
    let id = "a'b\\c?;--";
    let mut c = db.conn();
    c.exec_drop(
        "INSERT INTO jobs VALUES (?, 'wait_manual', NOW() - INTERVAL 2 HOUR, NULL), \
         ('other', 'wait_manual', NOW() - INTERVAL 1 HOUR, NULL)",
        (id,),
    )
    .expect("insert");
    let sb = Sandbox::new();
    let cfg = sb.config(
        &db.url,
        &format!(
            "name = \"jobs\"\ntable = \"jobs\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
             ended_column = \"end_time\"\nmanual_value = \"wait_manual\"\n",
            sb.heartbeat_template()
        ),
    );
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("! watch jobs: parked rows: 2 rows in 'wait_manual' wait for a person"),
        "{out}"
    );
    let prefix = format!("! watch jobs: parked row id={id}: ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("parked at a time the journal does not know; its run started 2h"),
        "{line}"
    );
    // The command a person runs names the id as one shell word.
    assert_eq!(
        fix_of(&out, &prefix, None),
        format!(
            "after looking (selfheal show jobs 'a'\\''b\\c?;--' --config {c}): selfheal resolve \
             jobs 'a'\\''b\\c?;--' --as dead|running --config {c}",
            c = cfg.display()
        )
    );
    // The statement for doing it by hand, from show's JSON, runs as shown.
    let o = selfheal()
        .args(["show", "jobs", id, "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("show");
    assert_exit(&o, 0);
    let shown: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    let release = shown["sql"].as_str().expect("the statement");
    c.query_drop(release).expect("the statement runs as shown");
    assert_eq!(c.affected_rows(), 1, "{release}");
    let rows: Vec<(String, String, bool)> = c
        .query("SELECT id, status, end_time IS NOT NULL FROM jobs ORDER BY id")
        .expect("rows");
    assert_eq!(
        rows,
        [
            (id.to_string(), "error".to_string(), true),
            ("other".to_string(), "wait_manual".to_string(), false)
        ]
    );
}
