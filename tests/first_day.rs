//! The first day without friction, on the check and doctor side (issue 20), through the
//! real binary: a misspelt key names the key it meant and a number without a unit gets a
//! fix whose value every rule accepts (12); `doctor` passes a healthy single-host setup
//! with exit 0 and words a missing index by the table's size (9); `--quiet --log syslog`
//! on a host without `/dev/log` says so once, in the metrics and in `doctor` (13); a run as
//! `nobody` reads as sentences with a fix for such a user (14); `--dry-run` says which rows
//! wait for their next confirmation (16).

use std::path::Path;
use std::process::Output;

use crate::common::*;

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

// ---------------------------------------------------------------------------------------
// 14. doctor as nobody

#[test]
fn doctor_as_nobody_reads_as_sentences_and_never_hands_nobody_anything() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    chmod(sb.dir.path(), 0o755);
    chmod(&db.path, 0o644);
    // The package's setup: the state directory (and the run lock in it) www-data's, the
    // configuration readable by www-data's group only.
    let state = sb.state_dir();
    std::fs::create_dir(&state).expect("state dir");
    std::fs::write(state.join("run.lock"), "").expect("run lock");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "",
        &sb.watch(&format!("host = \"{}\"\n", hostname())),
    );
    // state_dir holds the run lock: the default place.
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(
        &cfg,
        text.replace(
            &format!("lock_file = \"{}\"\n", sb.run_lock().display()),
            "",
        ),
    )
    .expect("config");
    let setup = format!(
        "set -e
        mkdir -p /etc/cron.d
        echo '*/10 * * * * www-data /usr/bin/selfheal check' >/etc/cron.d/selfheal
        chown -R www-data:www-data {state}
        chmod 750 {state}
        chown root:www-data {cfg}",
        state = state.display(),
        cfg = cfg.display()
    );
    let script = r#"
        doctor() { setpriv --reuid=65534 --regid=65534 --clear-groups "$SELFHEAL" doctor --config "$CFG"; }
        chmod 640 "$CFG"; doctor; echo "exit $?"
        echo ----
        chmod 644 "$CFG"; doctor; echo "exit $?"
    "#;
    let Some(mut c) = on_own_host(
        &["/etc"],
        &setup,
        &["sh".as_ref(), "-c".as_ref(), script.as_ref()],
    ) else {
        return;
    };
    let o = c.env("CFG", &cfg).output().expect("run");
    let out = stdout(&o);
    let (unreadable, readable) = out
        .split_once("----\n")
        .unwrap_or_else(|| panic!("{out}{}", stderr(&o)));
    let run_as = "fix: run selfheal as www-data, the user /etc/cron.d/selfheal runs it as: \
                  runuser -u www-data -- selfheal doctor; nobody stands for no user and is \
                  given nothing";
    // The configuration nobody may not read: exit 2, and whom to run as.
    assert!(unreadable.ends_with("exit 2\n"), "{unreadable}");
    let line = unreadable.lines().next().expect("a line");
    assert!(
        line.starts_with("✗ configuration: cannot read the configuration ")
            && line.contains("as nobody (uid 65534): Permission denied")
            && line.contains(run_as),
        "{line}"
    );
    // Readable: the run lock in www-data's directory is a sentence, with the same fix.
    let lock = readable
        .lines()
        .find(|l| l.starts_with("✗ run lock: "))
        .unwrap_or_else(|| panic!("{readable}"));
    assert!(
        lock.contains(&format!(
            "nobody (uid 65534) cannot open {}: it may not look inside {} (www-data:www-data, \
             mode 750); {run_as}",
            state.join("run.lock").display(),
            state.display()
        )),
        "{lock}"
    );
    for text in [unreadable, readable] {
        assert!(!text.contains("reading the status of:"), "{text}");
        for handed in [
            "adduser nobody",
            "chown -R nobody",
            "-o nobody",
            "setfacl -m u:nobody",
        ] {
            assert!(!text.contains(handed), "{handed}: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 13. --quiet --log syslog on a host without /dev/log

/// `selfheal ARGS` in a private mount namespace with an empty `/dev` (no `/dev/log`) or,
/// with `socket`, with that socket at `/dev/log`. `None`: skipped (not root; in CI a
/// failure).
fn without_dev_log(socket: Option<&Path>, args: &[&str]) -> Option<Output> {
    if !root_or_skip("a private mount namespace without /dev/log") {
        return None;
    }
    let script = "set -e; mount -t tmpfs selfheal-test /dev; \
                  if [ -n \"$SOCK\" ]; then touch /dev/log; mount --bind \"$SOCK\" /dev/log; fi; \
                  exec \"$@\"";
    Some(
        std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(bin())
            .args(args)
            .env("SOCK", socket.map(Path::as_os_str).unwrap_or_default())
            .env_remove("SELFHEAL_CONFIG")
            .env("LC_ALL", "C")
            .output()
            .expect("unshare"),
    )
}

#[test]
fn quiet_with_a_log_that_is_not_there_says_so_once_and_the_metrics_and_doctor_every_time() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &sb.watch(""),
    );
    let cfg_arg = cfg.to_str().expect("utf-8");
    let cron = ["check", "--quiet", "--log", "syslog", "--config", cfg_arg];
    let Some(o) = without_dev_log(None, &cron) else {
        return;
    };
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    let said = stderr(&o);
    assert!(
        said.starts_with(
            "selfheal: warning: --log syslog: cannot send there: /dev/log: No such file or \
             directory (os error 2); nothing is logged there until it is back"
        ) && said.contains("; fix: start the log daemon")
            && said.lines().count() == 1,
        "{said}"
    );
    // Quiet means quiet: the next runs say nothing.
    for _ in 0..2 {
        let o = without_dev_log(None, &cron).expect("root");
        assert_exit(&o, 0);
        assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    }
    // But the metrics, last-run.json and doctor say it every time.
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    assert!(
        text.contains("selfheal_log_up{target=\"syslog\"} 0\n"),
        "{text}"
    );
    let last: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sb.state_dir().join("last-run.json")).expect("last-run"),
    )
    .expect("json");
    assert_eq!(last["log"]["target"], "syslog", "{last}");
    assert!(
        last["log"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("/dev/log")),
        "{last}"
    );
    let o = doctor(&cfg);
    let log = finding(&o, "log");
    assert!(
        log.starts_with("! log: check --log syslog has not reached its target since ")
            && log.contains("/dev/log: No such file or directory")
            && log.contains("; fix: start the syslog daemon"),
        "{log}"
    );
    // The log is back: the metrics say so, and doctor no longer warns.
    let sock_path = sb.path("log.sock");
    let _sock = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("bind");
    let o = without_dev_log(Some(&sock_path), &cron).expect("root");
    assert_exit(&o, 0);
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("", ""));
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    assert!(
        text.contains("selfheal_log_up{target=\"syslog\"} 1\n"),
        "{text}"
    );
    let o = doctor(&cfg);
    assert!(!stdout(&o).contains("! log: "), "{}", stdout(&o));
}

// ---------------------------------------------------------------------------------------
// 16. --dry-run says which rows wait for their next confirmation

#[test]
fn a_dry_run_says_which_rows_wait_for_their_next_confirmation() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Dead on heartbeat silence alone: an inferred verdict, confirm = 2 by default.
    db.insert(1, "running", 3000);
    sb.heartbeat(1, std::time::Duration::from_secs(2400));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = check_with(&cfg, &["--dry-run"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "full-sync id=1: waits for its next confirmation (dead: 1 of the 2 runs in a row \
             it takes before a real run acts) — self-heal: dead: heartbeat stale"
        ),
        "{out}"
    );
    // The cron text, as ever, says nothing of it; a dry run a cron period after it would
    // act.
    let o = check_with(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    next_cron_run(&sb);
    let o = check_with(&cfg, &["--dry-run"]);
    assert!(
        stdout(&o).starts_with("full-sync id=1: would set status to 'error' (mark_dead)"),
        "{}",
        stdout(&o)
    );
}
