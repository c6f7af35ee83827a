use super::*;
use crate::init::recognise::map_columns;
use crate::init::render::{Document, render};
use crate::store::survey::{Index, TableInfo};

fn mysql(name: &str, data_type: &str, column_type: &str) -> (String, Column) {
    let len = column_type
        .split_once('(')
        .and_then(|(_, r)| r.trim_end_matches(')').parse().ok());
    (name.into(), Column::mysql(data_type, column_type, len, ""))
}

fn cron_schedule(extra: &[(&str, &str, &str)]) -> TableInfo {
    let mut columns = vec![
        mysql("schedule_id", "int", "int(10) unsigned"),
        mysql("job_code", "varchar", "varchar(255)"),
        mysql("status", "varchar", "varchar(7)"),
        mysql("messages", "text", "text"),
        mysql("created_at", "timestamp", "timestamp"),
        mysql("scheduled_at", "timestamp", "timestamp"),
        mysql("executed_at", "timestamp", "timestamp"),
        mysql("finished_at", "timestamp", "timestamp"),
    ];
    columns.extend(extra.iter().map(|(n, d, c)| mysql(n, d, c)));
    TableInfo {
        columns,
        primary_key: vec!["schedule_id".into()],
        indexes: Vec::new(),
        rows: Some(40),
    }
}

fn sqlite(cols: &[(&str, &str)]) -> TableInfo {
    TableInfo {
        columns: cols
            .iter()
            .map(|(n, t)| ((*n).to_string(), Column::declared(t)))
            .collect(),
        primary_key: vec!["id".into()],
        indexes: vec![Index {
            name: "ix_status".into(),
            unique: false,
            columns: vec!["status".into()],
        }],
        rows: Some(3),
    }
}

fn seen(rows: &[(&str, Option<&str>, u64)]) -> Seen {
    Seen {
        rows: rows
            .iter()
            .map(|(s, k, n)| ((*s).to_string(), k.map(str::to_string), *n))
            .collect(),
        scope: "all rows".into(),
        whole: true,
    }
}

fn plan_with(
    table: &str,
    info: &TableInfo,
    neighbours: &[&str],
    seen: &Seen,
    known: &dyn Fn(&str) -> bool,
) -> Result<Vec<WatchPlan>, NoWatch> {
    let neighbours: Vec<String> = neighbours.iter().map(|s| (*s).to_string()).collect();
    let m = map_columns(table, info, &neighbours).expect("mapped");
    let ctx = Ctx {
        table,
        table_from: "from --table",
        known,
    };
    plan(&m, seen, &ctx)
}

fn today(key: &str) -> bool {
    crate::config::keys::watch_key(key).is_some()
}

/// The configuration text of `watches`, and what it loads as.
fn loaded(watches: &[WatchPlan]) -> (String, crate::config::Config) {
    let database = [Entry::new(
        "url",
        Val::Text("sqlite:///var/lib/app/app.db".into()),
        "from --url",
    )];
    let text = render(&Document {
        header: &["a proposal".to_string()],
        database: &database,
        run: &[],
        watches,
    });
    let cfg = crate::config::from_str(
        &text,
        std::path::Path::new("/etc/selfheal/app.toml"),
        &crate::config::Overrides::default(),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (text, cfg)
}

#[test]
fn magento_2_is_one_watch_by_the_named_lock_commented_out_until_the_key_is_read() {
    let s = seen(&[
        ("success", None, 30),
        ("running", None, 2),
        ("error", None, 1),
    ]);
    let without = |k: &str| k != "db_lock" && today(k);
    let w = plan_with(
        "cron_schedule",
        &cron_schedule(&[]),
        &["setup_module"],
        &s,
        &without,
    )
    .expect("planned");
    assert_eq!(w.len(), 1, "one watch for every job code");
    let w = &w[0];
    assert!(!w.active, "no evidence of life without db_lock");
    assert!(
        w.intro.iter().any(|p| p.contains("Uncomment it once")),
        "{w:?}"
    );
    let lock = w.entry("db_lock").expect("db_lock");
    assert!(!lock.on);
    assert_eq!(
        lock.value,
        Val::List(vec![
            "{database}|CRON_{md5:default_{job_code}}".into(),
            "{database}|CRON_{md5:index_{job_code}}".into(),
            "{database}|CRON_{md5:consumers_{job_code}}".into(),
        ])
    );
    assert_eq!(
        w.entry("started_column").map(|e| &e.value),
        Some(&Val::Text("executed_at".into()))
    );
    assert_eq!(
        w.entry("overtime").map(|e| &e.value),
        Some(&Val::Text("report".into()))
    );
    assert_eq!(w.entry("match"), None);
    let (text, cfg) = loaded(std::slice::from_ref(w));
    assert!(cfg.watches.is_empty(), "commented out whole:\n{text}");
    assert!(text.contains("\n# [[watch]]\n"), "{text}");

    // Once the key is read, the same watch is active and judged by the lock.
    let all = |_: &str| true;
    let w = plan_with(
        "cron_schedule",
        &cron_schedule(&[]),
        &["setup_module"],
        &s,
        &all,
    )
    .expect("planned");
    assert!(w[0].active);
    assert!(w[0].entry("db_lock").is_some_and(|e| e.on));
}

#[test]
fn magento_1_with_aoe_scheduler_is_judged_by_last_seen_and_loads_today() {
    let aoe = cron_schedule(&[
        ("host", "varchar", "varchar(255)"),
        ("pid", "varchar", "varchar(255)"),
        ("last_seen", "timestamp", "timestamp"),
    ]);
    let s = seen(&[("success", None, 30), ("running", None, 1)]);
    let w = plan_with("cron_schedule", &aoe, &[], &s, &today).expect("planned");
    let w = &w[0];
    assert!(w.active);
    assert_eq!(
        w.entry("heartbeat_column").map(|e| &e.value),
        Some(&Val::Text("last_seen".into()))
    );
    assert_eq!(w.entry("db_lock"), None, "Magento 1 takes no named lock");
    for key in ["owner_host_column", "owner_pid_column"] {
        let e = w.entry(key).expect(key);
        assert_eq!(
            e.on,
            today(key),
            "{key} on only where this selfheal reads it"
        );
    }
    let (text, cfg) = loaded(std::slice::from_ref(w));
    assert_eq!(cfg.watches.len(), 1, "{text}");
    assert_eq!(cfg.watches[0].name, "magento-cron");
    assert_eq!(
        cfg.watches[0].success_values,
        Some(vec!["success".to_string()])
    );

    // Without Aoe_Scheduler: nothing to judge a Magento 1 row by.
    let w = plan_with("cron_schedule", &cron_schedule(&[]), &[], &s, &today).expect("planned");
    assert!(!w[0].active);
    assert!(
        w[0].intro.iter().any(|p| p.contains("Aoe_Scheduler")),
        "{:?}",
        w[0].intro
    );
}

#[test]
fn the_seeds_sync_log_gets_a_placeholder_heartbeat_that_judges_nothing_until_set() {
    let info = sqlite(&[
        ("id", "INTEGER"),
        ("status", "VARCHAR(16)"),
        ("start_time", "TEXT"),
        ("end_time", "TEXT"),
        ("error_msg", "VARCHAR(255)"),
    ]);
    let s = seen(&[
        ("done", None, 40),
        ("failed", None, 2),
        ("running", None, 1),
    ]);
    let w = plan_with("sync_log", &info, &[], &s, &today).expect("planned");
    let w = &w[0];
    assert!(w.active);
    let hb = w.entry("heartbeat_file").expect("heartbeat_file");
    assert_eq!(
        hb.value,
        Val::Text(format!("{PLACEHOLDER_DIR}/sync_log-{{id}}.heartbeat"))
    );
    assert_eq!(
        w.entry("dead_value").map(|e| (&e.value, e.from.as_str())),
        Some((
            &Val::Text("failed".into()),
            "from the table's statuses: failed (2 rows)"
        )),
        "the table's own word for a failed run"
    );
    assert_eq!(
        w.entry("success_values").map(|e| &e.value),
        Some(&Val::List(vec!["done".into()]))
    );
    assert!(
        w.entry("stale_after")
            .is_some_and(|e| e.from.contains("guess"))
    );
    let (_, cfg) = loaded(std::slice::from_ref(w));
    assert_eq!(cfg.watches[0].dead_value, "failed");
}

#[test]
fn job_kinds_get_a_watch_each_when_each_touches_its_own_heartbeat_file() {
    let info = sqlite(&[
        ("id", "INTEGER"),
        ("job", "VARCHAR(32)"),
        ("status", "VARCHAR(16)"),
        ("start_time", "TEXT"),
    ]);
    let s = seen(&[
        ("done", Some("full-sync"), 10),
        ("running", Some("full-sync"), 1),
        ("done", Some("report daily"), 5),
    ]);
    let w = plan_with("sync_log", &info, &[], &s, &today).expect("planned");
    let names: Vec<&str> = w.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["full-sync", "report-daily"]);
    assert_eq!(
        w[1].entry("match").map(|e| &e.value),
        Some(&Val::Map(vec![("job".into(), "report daily".into())]))
    );
    assert!(matches!(
        w[1].entry("heartbeat_file").map(|e| &e.value),
        Some(Val::Text(p)) if p.ends_with("/report-daily-{id}.heartbeat")
    ));
    let (text, cfg) = loaded(&w);
    assert_eq!(cfg.watches.len(), 2, "told apart by match:\n{text}");

    // A heartbeat column in the row: one watch serves every kind.
    let mut with_beat = info.clone();
    with_beat
        .columns
        .push(("heartbeat_at".into(), Column::declared("TEXT")));
    let w = plan_with("sync_log", &with_beat, &[], &s, &today).expect("planned");
    assert_eq!(w.len(), 1);
}

#[test]
fn a_lease_queue_gets_its_owner_and_its_retries() {
    let info = sqlite(&[
        ("id", "INTEGER"),
        ("status", "VARCHAR(16)"),
        ("start_time", "TEXT"),
        ("worker", "VARCHAR(64)"),
        ("heartbeat_at", "TEXT"),
        ("attempts", "INTEGER"),
        ("retry_at", "TEXT"),
        ("error_msg", "VARCHAR(255)"),
    ]);
    let s = seen(&[
        ("queued", None, 4),
        ("running", None, 2),
        ("wait_manual", None, 1),
    ]);
    let w = plan_with("jobs", &info, &[], &s, &today).expect("planned");
    let w = &w[0];
    assert!(w.entry("owner_column").is_some_and(|e| e.on));
    for (key, value) in [
        ("retry_value", Val::Text("queued".into())),
        ("attempts_column", Val::Text("attempts".into())),
        ("max_attempts", Val::Int(3)),
        ("retry_at_column", Val::Text("retry_at".into())),
        ("manual_value", Val::Text("wait_manual".into())),
        ("stale_after", Val::Text("1m".into())),
    ] {
        assert_eq!(w.entry(key).map(|e| &e.value), Some(&value), "{key}");
    }
    let (_, cfg) = loaded(std::slice::from_ref(w));
    assert!(cfg.watches[0].retry.is_some());
}

#[test]
fn a_status_column_that_cannot_say_running_or_failed_is_refused() {
    let codes = sqlite(&[
        ("id", "INTEGER"),
        ("status", "INTEGER"),
        ("start_time", "TEXT"),
    ]);
    assert!(matches!(
        plan_with(
            "t",
            &codes,
            &[],
            &seen(&[("0", None, 3), ("1", None, 2)]),
            &today
        ),
        Err(NoWatch::NoRunningValue { .. })
    ));
    let info = |ty: &str| TableInfo {
        columns: vec![
            mysql("id", "int", "int(11)"),
            mysql("status", "enum", ty),
            mysql("start_time", "datetime", "datetime"),
        ],
        primary_key: vec!["id".into()],
        indexes: Vec::new(),
        rows: Some(0),
    };
    let none = seen(&[]);
    assert!(matches!(
        plan_with("t", &info("enum('new','done')"), &[], &none, &today),
        Err(NoWatch::NoRunningValue { .. })
    ));
    match plan_with(
        "t",
        &info("enum('new','running','done')"),
        &[],
        &none,
        &today,
    ) {
        Err(NoWatch::NoDeadValue { widened, .. }) => assert_eq!(
            widened.as_deref(),
            Some("enum('new','running','done','error')")
        ),
        other => panic!("{other:?}"),
    }
    let w = plan_with(
        "t",
        &info("enum('new','running','done','failed')"),
        &[],
        &none,
        &today,
    )
    .expect("planned");
    assert_eq!(
        w[0].entry("running_value").map(|e| e.from.as_str()),
        Some("a value of the column's ENUM")
    );
    assert_eq!(
        w[0].entry("dead_value").map(|e| &e.value),
        Some(&Val::Text("failed".into()))
    );
}

#[test]
fn counts_read_as_a_person_writes_them() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(4_182_230), "4,182,230");
    assert_eq!(count(1, "row"), "1 row");
    assert_eq!(count(1_204, "row"), "1,204 rows");
}
