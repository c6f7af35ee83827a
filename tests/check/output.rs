//! Output for cron: `--quiet` prints nothing but fatal errors; `--log syslog` and
//! `--log journald` send one line per change (and per row that needs a person) to the real
//! sockets' paths. The log sockets are this test's own, bound in a private mount namespace
//! over `/dev/log` and `/run/systemd/journal/socket`, so what selfheal sends is read back
//! exactly, and no host log is touched. A log that is not there is said once even with
//! `--quiet`, and in the metrics and by `doctor` every time.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// A row that dies (2) and a row that needs a person (5: its heartbeat stalled while its
/// lock is held — hung, and no manual_value).
fn scenario() -> (Sandbox, SqliteDb, std::path::PathBuf, std::process::Child) {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 3_000);
    sb.heartbeat(2, Duration::from_secs(2_820));
    db.insert(5, "running", 3_000);
    sb.heartbeat(5, Duration::from_secs(2_000));
    let lock = sb.path("job-5.lock");
    std::fs::write(&lock, "").expect("lock file");
    let holder = std::process::Command::new("flock")
        .arg("--no-fork")
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1)");
    // Wait until the kernel shows the lock.
    for _ in 0..100 {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        if locks.contains(&format!(" {} ", holder.id())) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let watch = sb.watch(&format!(
        "lock_file = \"{}/job-{{id}}.lock\"\nconfirm = 1\n",
        sb.dir.path().display()
    ));
    let cfg = sb.config(&db.url(), &watch);
    (sb, db, cfg, holder)
}

#[test]
fn quiet_prints_nothing_but_the_exit_status_tells() {
    let (_sb, db, cfg, mut holder) = scenario();
    let o = check(&cfg, &["--quiet"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "");
    assert_eq!(stderr(&o), "");
    assert_eq!(db.status(2), "error", "the work was done");
    assert_eq!(db.status(5), "running");
    // Without --quiet a run says what someone must read, one line per change: row 5's
    // worker is gone now (its lock is free) and row 6 never beat.
    db.insert(6, "running", 3_000);
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.lines()
            .all(|l| l.contains(": set status to 'error' (mark_dead)")),
        "{out}"
    );
    // Fatal errors are still printed.
    let o = check(Path::new("/nonexistent/selfheal.toml"), &["--quiet"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("/nonexistent/selfheal.toml"));
    // --quiet with --explain or --format is a contradiction.
    let o = check(&cfg, &["--quiet", "--explain"]);
    assert_exit(&o, 2);
}

/// Runs the binary in a private mount namespace where `target` (a socket path) is
/// `socket`, after mounting an empty tmpfs over `over`. Root only.
fn with_socket_at(over: &str, target: &str, socket: &Path, args: &[&str]) -> std::process::Output {
    let script = format!(
        "set -e; mount -t tmpfs selfheal-test {over}; mkdir -p \"$(dirname {target})\"; \
         touch {target}; mount --bind \"$SOCK\" {target}; exec \"$@\""
    );
    std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(bin())
        .args(args)
        .env("SOCK", socket)
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C")
        .output()
        .expect("unshare")
}

fn namespaces_or_skip() -> bool {
    let ok = nix::unistd::geteuid().is_root()
        && std::process::Command::new("unshare")
            .args(["--mount", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and can make a mount namespace"
        );
        eprintln!("SKIPPED: needs root and unshare --mount");
    }
    ok
}

fn received(sock: &UnixDatagram) -> Vec<Vec<u8>> {
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Ok(n) = sock.recv(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

#[test]
fn log_syslog_sends_one_line_per_change_and_per_row_that_needs_a_person() {
    if !namespaces_or_skip() {
        return;
    }
    let (sb, db, cfg, mut holder) = scenario();
    let sock_path = sb.path("log.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind");
    let cfg_s = cfg.display().to_string();
    let o = with_socket_at(
        "/dev",
        "/dev/log",
        &sock_path,
        &["check", "--quiet", "--log", "syslog", "--config", &cfg_s],
    );
    let _ = holder.kill();
    let _ = holder.wait();
    assert_exit(&o, 1);
    assert_eq!(stderr(&o), "");
    assert_eq!(db.status(2), "error");
    let lines: Vec<String> = received(&sock)
        .into_iter()
        .map(|d| String::from_utf8(d).expect("utf-8"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let change = &lines[0];
    // <daemon.notice>Mmm dd hh:mm:ss selfheal[pid]: …
    assert!(change.starts_with("<29>"), "{change}");
    assert!(change.contains(" selfheal["), "{change}");
    assert!(
        change.contains(
            "]: watch=full-sync id=2 running→error action=mark_dead verdict=dead \
             reason=\"self-heal: dead: heartbeat stale, no sign of the worker (row"
        ),
        "{change}"
    );
    let person = &lines[1];
    assert!(person.starts_with("<28>"), "daemon.warning: {person}");
    assert!(
        person.contains("watch=full-sync id=5 running→running needs a person"),
        "{person}"
    );
    assert!(person.contains("verdict=hung"), "{person}");

    // No syslog socket at all: one warning, the run itself unaffected.
    db.insert(7, "running", 3_000);
    let o = with_socket_at(
        "/dev",
        "/dev/null-not-log",
        &sock_path,
        &["check", "--log", "syslog", "--config", &cfg_s],
    );
    assert_exit(&o, 0);
    assert_eq!(db.status(7), "error");
    assert!(
        stderr(&o).contains(
            "warning: --log syslog: cannot send there: /dev/log: No such file or directory"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn log_journald_sends_structured_fields() {
    if !namespaces_or_skip() {
        return;
    }
    let (sb, _db, cfg, mut holder) = scenario();
    let sock_path = sb.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind");
    let cfg_s = cfg.display().to_string();
    let o = with_socket_at(
        "/run",
        "/run/systemd/journal/socket",
        &sock_path,
        &["check", "--log", "journald", "--config", &cfg_s],
    );
    let _ = holder.kill();
    let _ = holder.wait();
    assert_exit(&o, 1);
    let grams = received(&sock);
    assert_eq!(grams.len(), 2, "{grams:?}");
    let fields: Vec<String> = String::from_utf8(grams[0].clone())
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect();
    for want in [
        "PRIORITY=5",
        "SYSLOG_IDENTIFIER=selfheal",
        "SELFHEAL_WATCH=full-sync",
        "SELFHEAL_ID=2",
        "SELFHEAL_FROM=running",
        "SELFHEAL_TO=error",
        "SELFHEAL_ACTION=mark_dead",
        "SELFHEAL_VERDICT=dead",
    ] {
        assert!(fields.iter().any(|f| f == want), "{want} in {fields:#?}");
    }
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("MESSAGE=watch=full-sync id=2 running→error")),
        "{fields:#?}"
    );
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("SELFHEAL_REASON=self-heal: dead: ")),
        "{fields:#?}"
    );
}

#[test]
fn log_lines_escape_values_from_the_database() {
    if !namespaces_or_skip() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::with_schema(
        &sb,
        &SQLITE_SCHEMA.replace("id INTEGER PRIMARY KEY", "id TEXT PRIMARY KEY"),
    );
    let forged = "2\n<29>Mar  5 09:04:07 selfheal[1]: watch=full-sync id=3 forged\u{1b}[2J";
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, heartbeat_at) \
             VALUES (?1, 'running', datetime('now', '-3000 seconds'), datetime('now', '-2820 seconds'))",
            [forged],
        )
        .expect("insert");
    let watch = "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                 message_column = \"error_msg\"\nconfirm = 1\n";
    let cfg = sb.config(&db.url(), watch);
    let cfg_s = cfg.display().to_string();
    let sock_path = sb.path("log.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind");
    let o = with_socket_at(
        "/dev",
        "/dev/log",
        &sock_path,
        &["check", "--quiet", "--log", "syslog", "--config", &cfg_s],
    );
    assert_exit(&o, 0);
    let lines: Vec<String> = received(&sock)
        .into_iter()
        .map(|d| String::from_utf8(d).expect("utf-8"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains(
            "]: watch=full-sync id=2\\n<29>Mar  5 09:04:07 selfheal[1]: watch=full-sync id=3 \
             forged\\u{1b}[2J running→error action=mark_dead"
        ),
        "{}",
        lines[0]
    );
    assert!(!lines[0].contains('\n') && !lines[0].contains('\u{1b}'));
}

// ---------------------------------------------------------------------------------------
// --quiet --log syslog on a host without /dev/log

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
