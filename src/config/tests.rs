//! Configuration table tests: every rule of docs/design.md#configuration and every error names the file, the
//! key and what is expected.

use super::*;
use std::fmt::Write as _;

const FILE: &str = "/etc/selfheal/selfheal.toml";

const BASE: &str = r#"
[database]
url = "mysql://app@localhost/appdb?socket=/run/mysqld/mysqld.sock"

[[watch]]
name = "full-sync"
table = "sync_log"
started_column = "start_time"
heartbeat_file = "/var/www/app/runtime/progress.json"
stale_after = "5m"
max_age = "4h"
"#;

fn parse(text: &str) -> Result<Config> {
    from_str(text, Path::new(FILE), &Overrides::default(), &[])
}

fn with(extra: &str) -> Result<Config> {
    parse(&format!("{BASE}{extra}\n"))
}

/// The config error's key and message, or a panic naming what came instead.
fn config_err(r: Result<Config>) -> (Origin, String, String) {
    match r {
        Err(Error::Config {
            origin,
            key,
            message,
            ..
        }) => (origin, key, message),
        Err(other) => panic!("expected a config error, got {other:?}"),
        Ok(c) => panic!("expected a config error, got {c:?}"),
    }
}

#[test]
fn the_spec_example_parses_with_defaults() {
    let c = parse(BASE).expect("valid");
    let w = &c.watches[0];
    assert_eq!(w.name, "full-sync");
    assert_eq!(w.id_column.name(), "id");
    assert_eq!(w.status_column.name(), "status");
    assert_eq!(w.running_value, "running");
    assert_eq!(w.dead_value, "error");
    assert_eq!(w.stale_after, Duration::from_secs(300));
    assert_eq!(w.max_age, Duration::from_secs(14_400));
    assert_eq!(w.overtime, Overtime::MarkDead);
    assert_eq!(w.release_lock, ReleaseLock::Never);
    assert!(w.retry.is_none());
    assert_eq!(c.run.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    assert_eq!(c.run.lock_file, c.run.state_dir.join(RUN_LOCK_NAME));
    assert_eq!(c.run.clock_tolerance, Duration::from_secs(60));
    assert!(matches!(
        c.database.as_ref().map(|d| &d.url),
        Some(DbUrl::Mysql(_))
    ));
}

#[test]
fn every_spec_key_is_accepted() {
    let c = parse(
        r#"
[database]
url = "sqlite:///var/lib/app/app.db"
password_file = "/etc/selfheal/db-password"
timezone = "Asia/Shanghai"

[run]
lock_file = "/run/lock/selfheal.lock"
state_dir = "/var/lib/selfheal"
metrics_file = "/var/lib/prometheus/node-exporter/selfheal.prom"
clock_tolerance = "2m"

[[watch]]
name = "full-sync"
host = "web1"
table = "appdb.sync_log"
id_column = "id"
status_column = "status"
running_value = "running"
started_column = "start_time"
heartbeat_file = "/var/www/app/runtime/progress-{id}.json"
heartbeat_column = "heartbeat_at"
stale_after = "5m"
max_age = "4h"
dead_value = "error"
ended_column = "end_time"
message_column = "error_msg"
lock_file = "/var/www/app/runtime/sync.lock"
owner_column = "worker"
manual_value = "wait_manual"
retry_value = "pending"
attempts_column = "attempts"
max_attempts = 3
overtime = "manual"
release_lock = "if_free"
"#,
    )
    .expect("valid");
    let w = &c.watches[0];
    assert_eq!(w.table.schema(), Some("appdb"));
    assert_eq!(
        w.retry,
        Some(Retry {
            value: "pending".into(),
            attempts_column: Ident::column("attempts").expect("ident"),
            max_attempts: 3
        })
    );
    assert_eq!(w.overtime, Overtime::Manual);
    assert_eq!(w.release_lock, ReleaseLock::IfFree);
    assert_eq!(
        c.database.as_ref().and_then(|d| d.timezone),
        crate::zone::Zone::named("Asia/Shanghai")
    );
    assert_eq!(c.run.clock_tolerance, Duration::from_secs(120));
}

#[test]
fn unknown_keys_name_the_key_and_the_choices() {
    let (origin, key, msg) = config_err(with("stale_aftr = \"5m\""));
    assert_eq!(origin, Origin::File(PathBuf::from(FILE)));
    assert!(key.contains("stale_aftr"), "{key}");
    assert!(
        msg.contains("unknown key `stale_aftr`; did you mean `stale_after`?"),
        "{msg}"
    );
    // Far from every key: the keys the table takes, listed.
    let (_, _, msg) = config_err(with("zz_not_a_key = 1"));
    assert!(
        msg.starts_with("unknown key `zz_not_a_key`; this table takes `name`, "),
        "{msg}"
    );
    let (_, key, _) = config_err(parse("[databse]\nurl = \"sqlite:///x\"\n"));
    assert!(key.contains("databse"), "{key}");
}

#[test]
fn bad_values_are_named() {
    let cases: &[(&str, &str, &str)] = &[
        ("sync_log", "sync_log; DROP TABLE x", "table"),
        ("\"start_time\"", "\"start time\"", "started_column"),
        ("\"5m\"", "\"5 minutes please\"", "stale_after"),
        ("\"4h\"", "\"0s\"", "max_age"),
        ("\"4h\"", "\"4m\"", "max_age"),
        ("\"4h\"", "\"5m\"", "max_age"),
        (
            "\"/var/www/app/runtime/progress.json\"",
            "\"runtime/progress.json\"",
            "heartbeat_file",
        ),
        (
            "\"/var/www/app/runtime/progress.json\"",
            "\"/x/{name}.json\"",
            "heartbeat_file",
        ),
        ("\"full-sync\"", "\"full sync\"", "name"),
    ];
    for (from, to, key) in cases {
        let text = BASE.replacen(from, to, 1);
        assert_ne!(text, BASE, "{from} not in BASE");
        let (origin, k, msg) = config_err(parse(&text));
        assert_eq!(origin, Origin::File(PathBuf::from(FILE)), "{to}");
        let name = if *key == "name" {
            "full sync"
        } else {
            "full-sync"
        };
        assert_eq!(k, format!("watch '{name}': {key}"), "{to}: {msg}");
        assert!(
            msg.contains("expected") || msg.contains("must"),
            "{to}: {msg}"
        );
    }
}

#[test]
fn max_age_must_exceed_stale_after() {
    let text = BASE.replace("max_age = \"4h\"", "max_age = \"5m\"");
    let (_, key, msg) = config_err(parse(&text));
    assert_eq!(key, "watch 'full-sync': max_age");
    assert!(msg.contains("greater than stale_after (5m)"), "{msg}");
}

#[test]
fn a_heartbeat_source_is_required() {
    let text = BASE.replace(
        "heartbeat_file = \"/var/www/app/runtime/progress.json\"\n",
        "",
    );
    let (_, key, msg) = config_err(parse(&text));
    assert_eq!(key, "watch 'full-sync': heartbeat_file");
    assert!(msg.contains("no heartbeat source"), "{msg}");
    // A column alone is enough.
    assert!(parse(&format!("{text}heartbeat_column = \"heartbeat_at\"\n")).is_ok());
}

#[test]
fn value_rules() {
    let (_, key, _) = config_err(with("dead_value = \"running\""));
    assert_eq!(key, "watch 'full-sync': dead_value");
    let (_, key, msg) = config_err(with("retry_value = \"pending\""));
    assert_eq!(key, "watch 'full-sync': retry_value");
    assert!(msg.contains("attempts_column, max_attempts"), "{msg}");
    let (_, key, _) = config_err(with(
        "retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 0",
    ));
    assert_eq!(key, "watch 'full-sync': max_attempts");
    let (_, key, _) = config_err(with("overtime = \"kill\""));
    assert_eq!(key, "watch 'full-sync': overtime");
    let (_, _, msg) = config_err(with("overtime = \"manual\""));
    assert!(msg.contains("manual_value"), "{msg}");
    let (_, key, _) = config_err(with("release_lock = \"always\""));
    assert_eq!(key, "watch 'full-sync': release_lock");
    let (_, _, msg) = config_err(with("release_lock = \"if_free\""));
    assert!(msg.contains("needs lock_file"), "{msg}");
    let (_, key, _) = config_err(with("running_value = \"\""));
    assert_eq!(key, "watch 'full-sync': running_value");
}

#[test]
fn database_rules() {
    let (_, key, msg) = config_err(parse(
        &BASE.replace("mysql://app@localhost", "oracle://app@localhost"),
    ));
    assert_eq!(key, "database.url");
    assert!(msg.contains("sqlite://, mysql:// or postgres://"), "{msg}");
    let (_, key, _) = config_err(parse(&BASE.replace(
        "[database]\nurl = \"mysql://app@localhost/appdb?socket=/run/mysqld/mysqld.sock\"\n",
        "",
    )));
    assert_eq!(key, "database.url");
    let (_, key, msg) = config_err(with("[run]\nclock_tolerance = \"soon\""));
    assert_eq!(key, "run.clock_tolerance");
    assert!(msg.contains("expected a duration"), "{msg}");
    let (_, key, _) = config_err(parse(
        &BASE.replace("[database]\n", "[database]\ntimezone = \"Mars/Olympus\"\n"),
    ));
    assert_eq!(key, "database.timezone");
    let (_, key, _) = config_err(with("[run]\nstate_dir = \"state\""));
    assert_eq!(key, "run.state_dir");
    // mariadb:// is an alias.
    let c = parse(&BASE.replace("mysql://", "mariadb://")).expect("alias");
    assert!(
        matches!(c.database.map(|d| d.url), Some(DbUrl::Mysql(u)) if u.starts_with("mysql://"))
    );
}

#[test]
fn a_config_without_watches_needs_no_database() {
    let c = parse("# every watch commented out\n[run]\nstate_dir = \"/var/lib/selfheal\"\n")
        .expect("valid");
    assert!(c.watches.is_empty());
    assert!(c.database.is_none());
}

#[test]
fn watch_names_are_unique_and_required() {
    let text = format!("{BASE}{}", &BASE[BASE.find("[[watch]]").expect("watch")..]);
    let (_, key, msg) = config_err(parse(&text));
    assert_eq!(key, "watch 'full-sync'");
    assert!(msg.contains("share this name"), "{msg}");
    let (_, key, msg) = config_err(parse(&BASE.replace("name = \"full-sync\"\n", "")));
    assert!(key.contains("1st [[watch]]"), "{key}");
    assert!(msg.contains("name"), "{msg}");
}

/// Watch flags: the given keys and values.
fn raw(pairs: &[(&str, &str)]) -> RawWatch {
    let mut w = RawWatch::default();
    for (k, v) in pairs {
        w.set(k, *v).expect("a watch key");
    }
    w
}

fn flags(pairs: &[(&str, &str)]) -> Overrides {
    Overrides {
        watch: raw(pairs),
        ..Overrides::default()
    }
}

#[test]
fn flags_override_the_file_and_errors_name_the_flag() {
    let o = flags(&[("max_age", "6h")]);
    let c = from_str(BASE, Path::new(FILE), &o, &[]).expect("valid");
    assert_eq!(c.watches[0].max_age, Duration::from_secs(21_600));

    let o = flags(&[("stale_after", "often")]);
    let (origin, key, _) = config_err(from_str(BASE, Path::new(FILE), &o, &[]));
    assert_eq!(
        (origin, key.as_str()),
        (Origin::CommandLine, "--stale-after")
    );

    let o = flags(&[("table", "x; DROP TABLE y")]);
    let (_, key, _) = config_err(from_str(BASE, Path::new(FILE), &o, &[]));
    assert_eq!(key, "--table");
}

#[test]
fn a_watch_entirely_from_flags() {
    let o = Overrides {
        db_url: Some("sqlite:///tmp/app.db".into()),
        timezone: None,
        watch: raw(&[
            ("table", "sync_log"),
            ("started_column", "start_time"),
            ("heartbeat_file", "/tmp/hb-{id}"),
            ("stale_after", "5m"),
            ("max_age", "4h"),
        ]),
    };
    let c = build(RawConfig::default(), &Origin::CommandLine, None, &o, &[]).expect("valid");
    assert_eq!(c.watches[0].name, "sync_log");
    assert_eq!(
        c.database.map(|d| d.url),
        Some(DbUrl::Sqlite(PathBuf::from("/tmp/app.db")))
    );

    // Missing keys name the flag to add.
    let mut partial = o.clone();
    partial.watch.remove("max_age");
    let (origin, key, msg) = config_err(build(
        RawConfig::default(),
        &Origin::CommandLine,
        None,
        &partial,
        &[],
    ));
    assert_eq!(origin, Origin::CommandLine);
    assert!(key.contains("max_age"), "{key}");
    assert!(msg.contains("--max-age"), "{msg}");

    // A password on the command line is refused.
    let mut pw = o.clone();
    pw.db_url = Some("mysql://app:hunter2@localhost/appdb".into());
    let (_, key, msg) = config_err(build(
        RawConfig::default(),
        &Origin::CommandLine,
        None,
        &pw,
        &[],
    ));
    assert_eq!(key, "--db");
    assert!(msg.contains("ps") && !msg.contains("hunter2"), "{msg}");
}

#[test]
fn selecting_watches() {
    let two = format!(
        "{BASE}{}",
        BASE[BASE.find("[[watch]]").expect("watch")..]
            .replace("full-sync", "report")
            .replace("sync_log", "report_log")
    );
    let c = from_str(
        &two,
        Path::new(FILE),
        &Overrides::default(),
        &["report".into()],
    )
    .expect("valid");
    assert_eq!(c.watches.len(), 1);
    assert_eq!(c.watches[0].name, "report");
    match from_str(
        &two,
        Path::new(FILE),
        &Overrides::default(),
        &["nope".into()],
    ) {
        Err(Error::Usage(m)) => assert!(m.to_string().contains("full-sync, report"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Flags with two watches selected: ambiguous.
    let o = flags(&[("max_age", "6h")]);
    assert!(matches!(
        from_str(&two, Path::new(FILE), &o, &[]),
        Err(Error::Usage(_))
    ));
    assert!(from_str(&two, Path::new(FILE), &o, &["report".into()]).is_ok());
}

#[test]
fn mysql_urls_may_leave_the_host_to_the_option_file() {
    assert_eq!(
        with_host("mysql:///appdb"),
        ("mysql://localhost/appdb".into(), false)
    );
    assert_eq!(
        with_host("mysql://app@/appdb?socket=/s"),
        ("mysql://app@localhost/appdb?socket=/s".into(), false)
    );
    assert_eq!(with_host("mysql://"), ("mysql://localhost/".into(), false));
    assert_eq!(
        with_host("mysql://app@db1:3307/x"),
        ("mysql://app@db1:3307/x".into(), true)
    );
    assert!(DbUrl::parse("mysql:///appdb").is_ok());
    assert!(DbUrl::parse("mariadb://app@/appdb").is_ok());
}

#[test]
fn urls_are_redacted() {
    assert_eq!(
        redact_url("mysql://app:secret@db:3306/x"),
        "mysql://app:***@db:3306/x"
    );
    assert_eq!(redact_url("mysql://app@db/x"), "mysql://app@db/x");
    assert_eq!(
        redact_url("mysql://app:pa/ss@w?rd@db:3306/x?socket=/s"),
        "mysql://app:***@db:3306/x?socket=/s"
    );
    assert_eq!(redact_url("mysql://db:3306/x"), "mysql://db:3306/x");
    assert_eq!(redact_url("mysql:///x"), "mysql:///x");
    assert_eq!(redact_url("sqlite:///x.db"), "sqlite:///x.db");
}

#[test]
fn success_values_default_to_every_status_selfheal_does_not_write() {
    let c = with(
        "manual_value = \"wait_manual\"\nretry_value = \"pending\"\n\
         attempts_column = \"attempts\"\nmax_attempts = 3",
    )
    .expect("valid");
    let w = &c.watches[0];
    assert_eq!(w.success_values, None);
    for (status, ok) in [
        ("done", true),
        ("finished", true),
        ("failed", true),
        ("running", false),
        ("error", false),
        ("wait_manual", false),
        ("pending", false),
    ] {
        assert_eq!(w.is_success(status), ok, "{status}");
    }
    let c = with("success_values = [\"done\", \"ok\"]").expect("valid");
    let w = &c.watches[0];
    assert!(w.is_success("done") && w.is_success("ok"));
    assert!(!w.is_success("failed"));
}

#[test]
fn success_values_are_validated() {
    for (extra, needle) in [
        ("success_values = []", "at least one status"),
        ("success_values = [\"done\", \"\"]", "non-empty"),
        (
            "success_values = [\"done\", \"error\"]",
            "\"error\" is the dead_value",
        ),
        ("success_values = [\"running\"]", "is the running_value"),
        (
            "manual_value = \"wait_manual\"\nsuccess_values = [\"wait_manual\"]",
            "is the manual_value",
        ),
    ] {
        let (origin, key, msg) = config_err(with(extra));
        assert_eq!(origin, Origin::File(PathBuf::from(FILE)), "{extra}");
        assert_eq!(key, "watch 'full-sync': success_values", "{extra}");
        assert!(msg.contains(needle), "{extra}: {msg}");
    }
    let (_, key, msg) = config_err(with("success_values = \"done\""));
    assert!(
        key.contains("success_values") || msg.contains("sequence"),
        "{key}: {msg}"
    );
}

/// A valid value for every watch key; adding a key to the table fails
/// `every_key_reads_the_same_from_the_file_and_from_flags` until it has one here.
fn samples() -> Vec<(&'static str, Raw)> {
    let t = |s: &str| Raw::Text(s.into());
    vec![
        ("name", t("full-sync")),
        ("host", t("web1")),
        ("table", t("appdb.sync_log")),
        (
            "match",
            Raw::Map(std::collections::BTreeMap::from([
                ("job".to_string(), t("full-sync")),
                ("shard".to_string(), t("3")),
            ])),
        ),
        ("id_column", t("job_id")),
        ("status_column", t("state")),
        ("running_value", t("busy")),
        ("started_column", t("start_time")),
        (
            "heartbeat_file",
            t("/var/www/app/runtime/progress-{id}.json"),
        ),
        ("heartbeat_column", t("heartbeat_at")),
        ("stale_after", t("5m")),
        ("max_age", t("4h")),
        ("dead_value", t("failed")),
        ("ended_column", t("end_time")),
        ("message_column", t("error_msg")),
        ("lock_file", t("/var/www/app/runtime/sync-{id}.lock")),
        ("owner_column", t("worker")),
        ("owner_host_column", t("host")),
        ("owner_pid_column", t("pid")),
        (
            "db_lock",
            Raw::List(vec![
                t("{database}|CRON_{md5:default_{job_code}}"),
                t("{database}|CRON_{md5:index_{job_code}}"),
            ]),
        ),
        ("manual_value", t("wait_manual")),
        ("retry_value", t("pending")),
        ("attempts_column", t("attempts")),
        ("max_attempts", Raw::Int(3)),
        ("retry_at_column", t("retry_at")),
        ("retry_backoff", t("30s")),
        ("retry_backoff_max", t("10m")),
        (
            "report_file",
            t("/var/www/app/runtime/sync-{id}.report.json"),
        ),
        ("overtime", t("manual")),
        ("release_lock", t("if_free")),
        ("confirm", Raw::Int(3)),
        ("success_values", Raw::List(vec![t("done"), t("ok")])),
    ]
}

#[test]
fn every_key_reads_the_same_from_the_file_and_from_flags() {
    let samples = samples();
    let names: Vec<&str> = samples.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, keys::WATCH_KEY_NAMES, "one sample per key, in order");

    // The owner in two columns stands instead of owner_column: read on its own below.
    let split = |k: &str| k == "owner_host_column" || k == "owner_pid_column";
    let db = "[database]\nurl = \"mysql://app@localhost/appdb\"\n\n[[watch]]\n";
    let lines = |keep: &dyn Fn(&keys::Key) -> bool| -> String {
        samples
            .iter()
            .filter(|(k, _)| !split(k) && keys::watch_key(k).is_some_and(keep))
            .fold(String::new(), |mut s, (k, v)| {
                let _ = writeln!(s, "{k} = {v}");
                s
            })
    };
    let from_file = parse(&format!("{db}{}", lines(&|_| true))).expect("valid");

    // The file keeps only what has no flag (and the name it is selected by); flags give
    // the rest.
    let file_only = lines(&|k| k.flag.is_none() || k.name == "name");
    let mut o = Overrides::default();
    for (k, v) in &samples {
        if !split(k) && keys::watch_key(k).is_some_and(|k| k.flag.is_some()) {
            o.watch.set(k, v.clone()).expect("a watch key");
        }
    }
    let from_flags =
        from_str(&format!("{db}{file_only}"), Path::new(FILE), &o, &[]).expect("valid");
    assert_eq!(
        format!("{:?}", from_flags.watches),
        format!("{:?}", from_file.watches)
    );
    let w = &from_file.watches[0];
    assert_eq!(w.host.as_deref(), Some("web1"));
    assert_eq!(
        w.matches
            .iter()
            .map(|(c, v)| format!("{c}={v}"))
            .collect::<Vec<_>>(),
        ["job=full-sync", "shard=3"]
    );
    assert_eq!(w.id_column.name(), "job_id");
    assert_eq!(w.running_value, "busy");
    assert_eq!(w.dead_value, "failed");
    assert_eq!(w.owner_column.as_ref().map(Ident::name), Some("worker"));
    assert_eq!(
        w.db_lock
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "{database}|CRON_{md5:default_{job_code}}",
            "{database}|CRON_{md5:index_{job_code}}"
        ]
    );
    assert_eq!(
        w.lock_columns()
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>(),
        ["job_code"]
    );
    assert_eq!(w.retry.as_ref().map(|r| r.max_attempts), Some(3));
    assert_eq!(w.overtime, Overtime::Manual);
    assert_eq!(w.release_lock, ReleaseLock::IfFree);
    assert_eq!(
        w.success_values,
        Some(vec!["done".to_string(), "ok".to_string()])
    );
}

/// A value of the key's shape that its check rejects.
fn bad_value(kind: &keys::Kind) -> Raw {
    match kind {
        keys::Kind::Int { min, .. } => Raw::Int(min - 1),
        keys::Kind::List { item, .. } => Raw::List(vec![bad_value(item)]),
        _ => Raw::Text(String::new()),
    }
}

#[test]
fn a_bad_flag_value_names_its_flag() {
    for key in keys::WATCH_KEYS {
        let Some(flag) = key.flag else { continue };
        let mut o = Overrides::default();
        o.watch
            .set(key.name, bad_value(&key.kind))
            .expect("a watch key");
        let (origin, k, msg) = config_err(from_str(BASE, Path::new(FILE), &o, &[]));
        assert_eq!(
            (origin, k.as_str()),
            (Origin::CommandLine, format!("--{}", flag.long).as_str()),
            "{}: {msg}",
            key.name
        );
        assert!(msg.starts_with("expected"), "{}: {msg}", key.name);
    }
    // A list's flag is named once per item.
    let mut o = Overrides::default();
    o.watch
        .set("success_values", Raw::List(vec!["running".into()]))
        .expect("a watch key");
    let (_, k, msg) = config_err(from_str(BASE, Path::new(FILE), &o, &[]));
    assert_eq!(k, "--success-value", "{msg}");
}

#[test]
fn toml_type_errors_point_at_the_line_and_the_value() {
    for (extra, needle) in [
        (
            "max_attempts = \"3\"",
            "invalid type: string \"3\", expected i64",
        ),
        (
            "overtime = 1",
            "invalid type: integer `1`, expected a string",
        ),
        (
            "success_values = [\"done\", 2]",
            "invalid type: integer `2`, expected a string",
        ),
        (
            "success_values = \"done\"",
            "invalid type: string \"done\", expected a sequence",
        ),
    ] {
        let (origin, key, msg) = config_err(with(extra));
        assert_eq!(origin, Origin::File(PathBuf::from(FILE)), "{extra}");
        assert!(key.starts_with("line 12: "), "{extra}: {key}");
        assert_eq!(msg, needle, "{extra}");
    }
    let (_, key, msg) = config_err(with(
        "success_values = [\"done\"]\nsuccess_values = [\"ok\"]",
    ));
    assert!(key.starts_with("line 13"), "{key}: {msg}");
}

#[test]
fn a_duration_below_one_second_is_an_error_naming_its_key() {
    // Every duration key of a watch, in the file and as a flag, and [run]'s.
    for key in keys::WATCH_KEYS
        .iter()
        .filter(|k| k.kind == keys::Kind::Duration)
    {
        // A key the base sets is given 300ms instead; one it leaves to its default, too.
        let text = if BASE.contains(&format!("\n{} = \"", key.name)) {
            BASE.replace(
                &format!("{} = \"", key.name),
                &format!("{} = \"300ms\" # was \"", key.name),
            )
        } else {
            format!("{BASE}{} = \"300ms\"\n", key.name)
        };
        let (_, k, msg) = config_err(parse(&text));
        assert_eq!(k, format!("watch 'full-sync': {}", key.name), "{msg}");
        assert!(
            msg.contains("at least one second") && msg.contains("\"300ms\""),
            "{}: {msg}",
            key.name
        );
        let mut o = Overrides::default();
        o.watch.set(key.name, "300ms").expect("a watch key");
        let (origin, k, msg) = config_err(from_str(BASE, Path::new(FILE), &o, &[]));
        assert_eq!(origin, Origin::CommandLine);
        assert_eq!(k, key.flag_spelling(), "{msg}");
        assert!(msg.contains("at least one second"), "{msg}");
    }
    let (_, key, msg) = config_err(with("[run]\nclock_tolerance = \"500ms\""));
    assert_eq!(key, "run.clock_tolerance");
    assert!(msg.contains("at least one second"), "{msg}");
    // One second is the least, in any spelling.
    let c = parse(&BASE.replace("\"5m\"", "\"1000ms\"")).expect("one second");
    assert_eq!(c.watches[0].stale_after, Duration::from_secs(1));
}

#[test]
fn confirm_defaults_to_two_and_takes_a_positive_count() {
    assert_eq!(parse(BASE).expect("valid").watches[0].confirm, 2);
    assert_eq!(with("confirm = 1").expect("valid").watches[0].confirm, 1);
    assert_eq!(with("confirm = 5").expect("valid").watches[0].confirm, 5);
    for bad in ["confirm = 0", "confirm = -1", "confirm = 1001"] {
        let (_, key, msg) = config_err(with(bad));
        assert_eq!(key, "watch 'full-sync': confirm", "{bad}");
        assert!(msg.contains("from 1 to 1000"), "{bad}: {msg}");
    }
    let (_, key, msg) = config_err(with("confirm = \"2\""));
    assert!(key.starts_with("line "), "{key}: {msg}");
}

#[test]
fn each_configuration_gets_its_own_state_directory_and_run_lock_by_default() {
    let dir = |p: Option<&str>| default_state_dir(p.map(Path::new));
    assert_eq!(dir(None), Ok(PathBuf::from("/var/lib/selfheal")));
    assert_eq!(
        dir(Some("/etc/selfheal/selfheal.toml")),
        Ok(PathBuf::from("/var/lib/selfheal"))
    );
    assert_eq!(
        dir(Some("/etc/selfheal/shop.toml")),
        Ok(PathBuf::from("/var/lib/selfheal/shop"))
    );
    assert_eq!(
        dir(Some("/srv/blog/selfheal-blog.toml")),
        Ok(PathBuf::from("/var/lib/selfheal/selfheal-blog"))
    );
    for bad in [
        "/etc/selfheal/...toml",
        "/etc/selfheal/.toml",
        "/etc/selfheal/a b.toml",
    ] {
        let m = dir(Some(bad)).expect_err(bad);
        assert!(m.contains("set state_dir"), "{bad}: {m}");
    }
    let shop = from_str(
        BASE,
        Path::new("/etc/selfheal/shop.toml"),
        &Overrides::default(),
        &[],
    )
    .expect("valid");
    assert_eq!(shop.run.state_dir, PathBuf::from("/var/lib/selfheal/shop"));
    assert_eq!(
        shop.run.lock_file,
        PathBuf::from("/var/lib/selfheal/shop/run.lock")
    );
}

#[test]
fn host_names_are_whole_names_with_one_placeholder() {
    let c =
        with("[run]\nhost_names = [\"{hostname}.dc1.example.com\", \"10.0.0.2\"]").expect("valid");
    assert_eq!(c.run.host_names, ["{hostname}.dc1.example.com", "10.0.0.2"]);
    assert!(parse(BASE).expect("valid").run.host_names.is_empty());
    for (bad, expect) in [
        ("\"\"", "empty"),
        ("\"web 1\"", "no spaces"),
        ("\"web1:80\"", "no spaces, no `:`"),
        (
            "\"{host}.example.com\"",
            "the only placeholder is {hostname}",
        ),
    ] {
        let (_, key, msg) = config_err(with(&format!("[run]\nhost_names = [\"web1\", {bad}]")));
        assert_eq!(key, "run.host_names[1]", "{bad}");
        assert!(msg.contains(expect), "{bad}: {msg}");
    }
    let (_, _, msg) = config_err(with("[run]\nhost_names = \"web1\""));
    assert!(msg.contains("sequence"), "{msg}");
}

#[test]
fn match_takes_validated_columns_and_values_bound_later() {
    let c = with("match = { job = \"full-sync\", Shard = \"3\" }").expect("valid");
    let m: Vec<(String, String)> = c.watches[0]
        .matches
        .iter()
        .map(|(c, v)| (c.to_string(), v.clone()))
        .collect();
    assert_eq!(
        m,
        [
            ("Shard".to_string(), "3".to_string()),
            ("job".to_string(), "full-sync".to_string())
        ]
    );
    assert!(parse(BASE).expect("valid").watches[0].matches.is_empty());
    for (bad, key, expect) in [
        ("match = {}", "match", "at least one column"),
        (
            "match = { \"job kind\" = \"x\" }",
            "match",
            "plain column name",
        ),
        ("match = { job = \"\" }", "match", "non-empty"),
        (
            "match = { status = \"running\" }",
            "match",
            "is the status_column",
        ),
        (
            "match = { job = \"a\", JOB = \"b\" }",
            "match",
            "named twice",
        ),
    ] {
        let (_, k, msg) = config_err(with(bad));
        assert_eq!(k, format!("watch 'full-sync': {key}"), "{bad}");
        assert!(msg.contains(expect), "{bad}: {msg}");
    }
    // A value's quotes are the value's: nothing reaches SQL but a bound parameter.
    let c = with("match = { job = \"x' OR '1'='1\" }").expect("any text is a value");
    assert_eq!(c.watches[0].matches[0].1, "x' OR '1'='1");
}

/// The base file with a second watch on `table`, with the given extra keys, and the
/// first watch's extra keys.
fn two_watches(first: &str, table: &str, second: &str) -> String {
    format!(
        "{BASE}{first}\n\n[[watch]]\nname = \"report\"\ntable = \"{table}\"\n\
         started_column = \"start_time\"\nheartbeat_file = \"/var/www/app/runtime/r.json\"\n\
         stale_after = \"1m\"\nmax_age = \"10m\"\n{second}\n"
    )
}

#[test]
fn watches_whose_rows_can_overlap_are_refused() {
    let overlap = [
        ("", "sync_log", ""),
        ("", "appdb.sync_log", ""),
        ("", "SYNC_LOG", ""),
        ("match = { job = \"full\" }", "sync_log", ""),
        (
            "match = { job = \"full\" }",
            "sync_log",
            "match = { kind = \"report\" }",
        ),
        (
            "match = { job = \"full\" }",
            "sync_log",
            "match = { job = \"FULL \" }",
        ),
        (
            "match = { job = \"full\" }",
            "sync_log",
            "match = { job = \"full\", shard = \"2\" }",
        ),
        ("", "sync_log", "running_value = \"RUNNING\""),
        // One value to MariaDB's default utf8mb4_general_ci: accents, any case, a
        // decomposed accent, a compatibility form (the ﬁ ligature).
        (
            "match = { job = \"full-sync\" }",
            "sync_log",
            "match = { job = \"fúll-sync\" }",
        ),
        (
            "match = { job = \"full-sync\" }",
            "sync_log",
            "match = { job = \"FÜLL-SYNC\" }",
        ),
        (
            "match = { job = \"fu\\u0301ll-sync\" }",
            "sync_log",
            "match = { job = \"fúll-sync\" }",
        ),
        (
            "match = { job = \"ﬁle\" }",
            "sync_log",
            "match = { job = \"file\" }",
        ),
    ];
    for (first, table, second) in overlap {
        let text = two_watches(first, table, second);
        let (origin, key, msg) = config_err(parse(&text));
        assert_eq!(origin, Origin::File(PathBuf::from(FILE)), "{text}");
        assert_eq!(key, "watch 'report': match", "{text}");
        assert!(
            msg.contains("watch 'full-sync'") && msg.contains("judged twice"),
            "{text}: {msg}"
        );
        // Selecting one of them does not hide the other.
        let only = from_str(
            &text,
            Path::new(FILE),
            &Overrides::default(),
            &["report".into()],
        );
        assert!(only.is_err(), "{text}");
    }
    let apart = [
        ("", "report_log", ""),
        (
            "match = { job = \"full\" }",
            "sync_log",
            "match = { job = \"report\" }",
        ),
        (
            "match = { job = \"full\", shard = \"1\" }",
            "sync_log",
            "match = { shard = \"2\" }",
        ),
        ("", "sync_log", "running_value = \"reporting\""),
        (
            "match = { job = \"full-sync\" }",
            "sync_log",
            "match = { job = \"full_sync\" }",
        ),
    ];
    for (first, table, second) in apart {
        let text = two_watches(first, table, second);
        let c = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(c.watches.len(), 2);
    }
    // Two databases on one server: two tables.
    let text = two_watches("", "other_db.sync_log", "").replacen(
        "table = \"sync_log\"",
        "table = \"appdb.sync_log\"",
        1,
    );
    assert_eq!(parse(&text).expect("two tables").watches.len(), 2);
    // A watch left out of this run that does not validate is its own run's error.
    let text = two_watches("", "sync_log", "overtime = \"sometimes\"");
    let c = from_str(
        &text,
        Path::new(FILE),
        &Overrides::default(),
        &["full-sync".into()],
    );
    assert!(c.is_ok(), "{c:?}");
}

#[test]
fn the_nearest_key_is_a_near_one_or_none() {
    let known: Vec<String> = crate::config::keys::WATCH_KEY_NAMES
        .iter()
        .map(ToString::to_string)
        .collect();
    let near = |typo| crate::config::nearest(typo, &known);
    assert_eq!(near("stale_afer"), Some("stale_after"));
    assert_eq!(near("stael_after"), Some("stale_after"));
    assert_eq!(near("max-age"), Some("max_age"));
    assert_eq!(near("MAX_AGE"), Some("max_age"));
    assert_eq!(
        near("heartbeat"),
        None,
        "two keys start so: neither is meant"
    );
    assert_eq!(near("timeout"), None);
    assert_eq!(near("x"), None);
}

#[test]
fn retries_wait_longer_each_attempt_up_to_the_cap() {
    let retry = "retry_value = \"pending\"\nattempts_column = \"attempts\"\nmax_attempts = 9";
    // The defaults: 1m doubled per attempt, at most 1h.
    let c = with(&format!("{retry}\nretry_at_column = \"retry_at\"")).expect("valid");
    let w = &c.watches[0];
    assert_eq!(
        w.retry_at_column.as_ref().map(Ident::name),
        Some("retry_at")
    );
    let delays: Vec<u64> = [
        None,
        Some(0),
        Some(1),
        Some(2),
        Some(3),
        Some(6),
        Some(7),
        Some(99),
        Some(i64::MAX),
    ]
    .into_iter()
    .map(|a| w.retry_delay(a))
    .collect();
    assert_eq!(delays, [60, 60, 60, 120, 240, 1920, 3600, 3600, 3600]);
    let c = with(&format!(
        "{retry}\nretry_backoff = \"30s\"\nretry_backoff_max = \"2m\""
    ))
    .expect("valid");
    let w = &c.watches[0];
    assert_eq!(
        (
            w.retry_delay(Some(1)),
            w.retry_delay(Some(2)),
            w.retry_delay(Some(3)),
            w.retry_delay(Some(4))
        ),
        (30, 60, 120, 120)
    );
    // The column needs somewhere to send rows; the cap is at least the base.
    let (_, key, msg) = config_err(with("retry_at_column = \"retry_at\""));
    assert_eq!(key, "watch 'full-sync': retry_at_column");
    assert!(msg.contains("needs retry_value"), "{msg}");
    let (_, key, msg) = config_err(with(&format!(
        "{retry}\nretry_backoff = \"10m\"\nretry_backoff_max = \"5m\""
    )));
    assert_eq!(key, "watch 'full-sync': retry_backoff_max");
    assert!(msg.contains("at least retry_backoff (10m)"), "{msg}");
}

/// A duration written as a bare number (`stale_after = 600`) is read as the text "600":
/// refused for its missing unit, with the readings it may have meant as the fix, in a watch
/// and in `[run]` alike — not a type error without one.
#[test]
fn a_duration_written_as_a_number_gets_the_fix_a_text_without_unit_gets() {
    let watch = BASE.replace("stale_after = \"5m\"", "stale_after = 600");
    let e = parse(&watch).expect_err("no unit");
    assert_eq!(
        e.fix().as_deref(),
        Some("write stale_after = \"600s\": a number needs its unit"),
        "{e:?}"
    );
    let (_, key, msg) = config_err(parse(&watch));
    assert_eq!(key, "watch 'full-sync': stale_after");
    assert!(msg.contains("\"600\" has no unit"), "{msg}");
    let e = parse(&format!("{BASE}\n[run]\nremind_every = 30\n")).expect_err("no unit");
    assert_eq!(
        e.fix().as_deref(),
        Some(
            "write remind_every = \"30s\" (or \"30m\" or \"30h\") in [run]: a number needs its unit"
        ),
        "{e:?}"
    );
    // A fraction is no duration at all: a type error that says what is expected.
    let (_, _, msg) = config_err(parse(
        &BASE.replace("stale_after = \"5m\"", "stale_after = 1.5"),
    ));
    assert!(
        msg.contains("expected a duration with its unit, as text"),
        "{msg}"
    );
}

const CRON: &str = "[database]\nurl = \"mysql://app@localhost/magento\"\n\n[[watch]]\nname = \"cron\"\n\
                    table = \"cron_schedule\"\nid_column = \"schedule_id\"\n\
                    started_column = \"executed_at\"\nstale_after = \"5m\"\nmax_age = \"1d\"\n";

#[test]
fn a_named_lock_alone_is_a_source_of_liveness() {
    let c = parse(&format!(
        "{CRON}db_lock = \"{{database}}|CRON_{{md5:index_{{job_code}}}}\"\n"
    ))
    .expect("valid");
    assert_eq!(c.watches[0].db_lock.len(), 1);
    assert!(c.watches[0].heartbeat_file.is_none());
    // So is a lock file the job holds for its whole run.
    let c = parse(&format!("{CRON}lock_file = \"/var/lock/cron.lock\"\n")).expect("valid");
    assert!(c.watches[0].lock_file.is_some());
    // Without either, nothing says whether a worker lives.
    let (_, key, msg) = config_err(parse(CRON));
    assert!(
        key.contains("heartbeat_file") && msg.contains("db_lock"),
        "{key}: {msg}"
    );
}

#[test]
fn bad_named_lock_templates_are_configuration_errors() {
    let long = "x".repeat(40);
    for (value, says) in [
        (format!("\"{long}{{md5:{{job_code}}}}\""), "72 characters"),
        ("\"job_{job-code}\"".to_string(), "placeholder"),
        ("[]".to_string(), "at least one lock name"),
        ("\"job_{md5:x\"".to_string(), "not closed"),
    ] {
        let (_, key, msg) = config_err(parse(&format!("{CRON}db_lock = {value}\n")));
        assert_eq!(key, "watch 'cron': db_lock", "{value}: {msg}");
        assert!(msg.contains(says), "{value}: {msg}");
    }
}

#[test]
fn a_named_lock_on_sqlite_is_refused_naming_the_watch() {
    let toml = CRON.replace("mysql://app@localhost/magento", "sqlite:///var/lib/app.db");
    let (_, key, msg) = config_err(parse(&format!("{toml}db_lock = \"job_{{job_code}}\"\n")));
    assert_eq!(key, "watch 'cron': db_lock", "{msg}");
    assert!(msg.contains("SQLite"), "{msg}");
}

#[test]
fn the_owner_in_two_columns_needs_both_and_not_owner_column() {
    let base = format!("{CRON}db_lock = \"job_{{job_code}}\"\n");
    let c = parse(&format!(
        "{base}owner_host_column = \"host\"\nowner_pid_column = \"pid\"\n"
    ))
    .expect("valid");
    let (h, p) = c.watches[0].owner_split.clone().expect("both");
    assert_eq!((h.name(), p.name()), ("host", "pid"));
    assert!(c.watches[0].has_owner());
    for (extra, key) in [
        ("owner_host_column = \"host\"\n", "owner_host_column"),
        ("owner_pid_column = \"pid\"\n", "owner_pid_column"),
        (
            "owner_host_column = \"host\"\nowner_pid_column = \"pid\"\nowner_column = \"w\"\n",
            "owner_host_column",
        ),
    ] {
        let (_, k, msg) = config_err(parse(&format!("{base}{extra}")));
        assert_eq!(k, format!("watch 'cron': {key}"), "{extra}: {msg}");
    }
}
