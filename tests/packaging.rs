//! What the packages ship beside the binary, checked from the source tree (the built
//! packages are checked by `packaging/test-deb.sh` and `packaging/test-rpm.sh`):
//! `selfheal.service` runs the cron line's user and command with the hardening docs/design.md#packaging
//! names, `selfheal.timer` runs when the cron line does, `systemd-analyze verify` finds
//! nothing in either (nor in the operator's guide's `ProtectSystem=strict` drop-in), a real run writes
//! only where that drop-in lets it, and neither package enables the units.
//!
//! `systemd-analyze` comes with Debian's `systemd` package; without it the verification
//! fails when `CI` is set and is skipped (with a `SKIPPED` line) elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{Sandbox, root_or_skip};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `KEY=value` settings of one `[Section]` of a unit file, in order.
fn section(unit: &str, name: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for l in unit.lines().map(str::trim) {
        if l.starts_with('[') {
            inside = l == format!("[{name}]");
        } else if inside && !l.is_empty() && !l.starts_with('#') {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=value: {l}"));
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

fn setting(settings: &[(String, String)], key: &str) -> Option<String> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

/// The cron file's active line: (schedule, user, command after the `[ -x … ] &&` guard).
fn cron_line() -> (String, String, String) {
    let cron = read("packaging/selfheal.cron");
    let lines: Vec<&str> = cron
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains("/usr/bin/selfheal"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one selfheal line in the cron file: {lines:?}"
    );
    let fields: Vec<&str> = lines[0].splitn(7, ' ').collect();
    assert_eq!(fields.len(), 7, "{}", lines[0]);
    let command = fields[6]
        .strip_prefix("[ -x /usr/bin/selfheal ] && ")
        .unwrap_or_else(|| panic!("the cron command is guarded: {}", fields[6]));
    (
        fields[..5].join(" "),
        fields[5].to_string(),
        command.to_string(),
    )
}

#[test]
fn the_service_runs_the_cron_lines_user_and_command() {
    let (_, user, command) = cron_line();
    let service = section(&read("packaging/systemd/selfheal.service"), "Service");
    assert_eq!(setting(&service, "User"), Some(user), "{service:?}");
    assert_eq!(setting(&service, "ExecStart"), Some(command), "{service:?}");
}

#[test]
fn the_service_is_a_hardened_oneshot_that_sees_tmp() {
    let unit = read("packaging/systemd/selfheal.service");
    let service = section(&unit, "Service");
    for (k, v) in [
        ("Type", "oneshot"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "full"),
        ("ProtectHome", "read-only"),
        // Another run holds the run lock: the work is being done.
        ("SuccessExitStatus", "75"),
    ] {
        assert_eq!(
            setting(&service, k).as_deref(),
            Some(v),
            "{k} in {service:?}"
        );
    }
    // Heartbeat files under /tmp must stay visible.
    assert_eq!(setting(&service, "PrivateTmp"), None, "{service:?}");
    // Started by the timer only: nothing to enable the service itself with.
    assert!(
        section(&unit, "Install").is_empty(),
        "the service has an [Install] section"
    );
}

/// The timer fires exactly when the cron line does (every 10 minutes, on the minute), catches
/// up after downtime, and is what one enables.
#[test]
fn the_timer_runs_when_the_cron_line_does() {
    let (schedule, _, _) = cron_line();
    assert_eq!(schedule, "*/10 * * * *");
    let unit = read("packaging/systemd/selfheal.timer");
    let timer = section(&unit, "Timer");
    assert_eq!(setting(&timer, "Persistent").as_deref(), Some("true"));
    assert_eq!(
        setting(&timer, "Unit"),
        None,
        "the timer starts selfheal.service"
    );
    assert_eq!(
        setting(&section(&unit, "Install"), "WantedBy").as_deref(),
        Some("timers.target")
    );
    let calendar = setting(&timer, "OnCalendar").expect("OnCalendar");
    let Some(o) = systemd_analyze(&["calendar", "--iterations=7", &calendar]) else {
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // "Next elapse: Tue 2026-12-01 15:20:00 UTC", "Iter. #2: …": HH:MM:SS of each.
    let minutes: Vec<u32> = out
        .lines()
        .filter(|l| l.contains("Next elapse:") || l.contains("Iter. #"))
        .map(|l| {
            let time = l
                .split_whitespace()
                .find(|w| w.len() == 8 && w.as_bytes()[2] == b':')
                .unwrap_or_else(|| panic!("no time in {l}"));
            assert!(time.ends_with(":00"), "on the minute: {l}");
            let h: u32 = time[..2].parse().expect("hour");
            let m: u32 = time[3..5].parse().expect("minute");
            h * 60 + m
        })
        .collect();
    assert_eq!(minutes.len(), 7, "{out}");
    for w in minutes.windows(2) {
        assert_eq!(
            (w[1] + 24 * 60 - w[0]) % (24 * 60),
            10,
            "every 10 minutes: {out}"
        );
    }
    assert!(
        minutes.iter().all(|m| m % 10 == 0),
        "at :00, :10, … as cron's */10: {out}"
    );
}

/// Runs `systemd-analyze ARGS`: None (after saying so) where it is missing on a developer's
/// machine; a failure in CI.
fn systemd_analyze(args: &[&str]) -> Option<std::process::Output> {
    // UTC: no daylight-saving jump between two elapses.
    match Command::new("systemd-analyze")
        .args(args)
        .env("TZ", "UTC")
        .output()
    {
        Ok(o) => Some(o),
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have systemd-analyze (Debian package systemd): {e}"
            );
            eprintln!("SKIPPED: systemd-analyze: {e}");
            None
        }
    }
}

/// The operator's guide's drop-in for `ProtectSystem=strict`: the first ```ini block after
/// the line that names its path.
fn guide_drop_in() -> String {
    let guide = read("docs/operator.md");
    let at = guide
        .find("/etc/systemd/system/selfheal.service.d/strict.conf")
        .expect("the operator's guide shows the strict drop-in's path");
    let rest = &guide[at..];
    let start = rest.find("```ini\n").expect("an ini block after it") + "```ini\n".len();
    let len = rest[start..].find("```").expect("the block ends");
    rest[start..start + len].to_string()
}

/// `systemd-analyze verify` on both units (ExecStart pointed at the binary under test, which
/// it wants to exist) and on the service with the operator's guide's drop-in: no message at all.
#[test]
fn systemd_analyze_verify_finds_nothing_in_the_units_and_the_drop_in() {
    let drop_in = guide_drop_in();
    for k in ["ProtectSystem=strict", "ReadWritePaths="] {
        assert!(
            drop_in.contains(k),
            "the operator's guide's drop-in sets {k}:\n{drop_in}"
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin: PathBuf = assert_cmd::cargo::cargo_bin!("selfheal").to_path_buf();
    let service = read("packaging/systemd/selfheal.service").replace(
        "ExecStart=/usr/bin/selfheal ",
        &format!("ExecStart={} ", bin.display()),
    );
    assert!(
        service.contains(&bin.display().to_string()),
        "ExecStart replaced"
    );
    std::fs::write(dir.path().join("selfheal.service"), service).expect("write");
    std::fs::write(
        dir.path().join("selfheal.timer"),
        read("packaging/systemd/selfheal.timer"),
    )
    .expect("write");
    let verify = |what: &str| {
        let Some(o) = systemd_analyze(&[
            "verify",
            "--man=no",
            &dir.path().join("selfheal.service").display().to_string(),
            &dir.path().join("selfheal.timer").display().to_string(),
        ]) else {
            return;
        };
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // verify exits 0 on unknown keys; any message is a finding.
        assert!(
            o.status.success() && out.trim().is_empty(),
            "systemd-analyze verify ({what}):\n{out}"
        );
    };
    verify("the units as shipped");
    let d = dir.path().join("selfheal.service.d");
    std::fs::create_dir(&d).expect("dir");
    std::fs::write(d.join("strict.conf"), &drop_in).expect("write");
    verify("with the operator's guide's drop-in");
    // The check above can fail: a misspelt key in the drop-in is reported.
    std::fs::write(
        d.join("strict.conf"),
        drop_in.replace("ReadWritePaths=", "ReadWritePath="),
    )
    .expect("write");
    if let Some(o) = systemd_analyze(&[
        "verify",
        "--man=no",
        &dir.path().join("selfheal.service").display().to_string(),
    ]) {
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("ReadWritePath"),
            "systemd-analyze did not report a misspelt key: {o:?}"
        );
    }
}

/// Both packages install the units and leave them disabled: cargo-deb's systemd-units
/// setting (which would enable and start them) is not used, and no maintainer script or
/// scriptlet enables anything.
#[test]
fn neither_package_enables_the_units() {
    let cargo = read("Cargo.toml");
    let deb = &cargo[cargo.find("[package.metadata.deb]").expect("deb metadata")..];
    let deb = &deb[..deb[1..].find("\n[").map_or(deb.len(), |i| i + 1)];
    assert!(
        !deb.lines()
            .any(|l| l.trim_start().starts_with("systemd-units")),
        "cargo-deb's systemd-units would enable them"
    );
    for unit in ["selfheal.service", "selfheal.timer"] {
        assert!(
            deb.contains(&format!(
                "[\"packaging/systemd/{unit}\", \"lib/systemd/system/{unit}\", \"644\"]"
            )),
            "the .deb installs {unit}"
        );
    }
    let spec = read("packaging/rpm/selfheal.spec");
    let mut scripts = vec![("packaging/rpm/selfheal.spec".to_string(), spec)];
    for s in ["postinst", "postrm", "prerm"] {
        let p = format!("packaging/maintainer-scripts/{s}");
        scripts.push((p.clone(), read(&p)));
    }
    for (name, text) in &scripts {
        for l in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            assert!(
                !(l.contains("enable ")
                    && (l.contains("systemctl") || l.contains("deb-systemd-helper"))),
                "{name} enables a unit: {l}"
            );
        }
    }
}

/// The four kinds of directory the operator's guide's drop-in makes writable, in its order: the
/// comment above each `ReadWritePaths=` names what it is for.
const WRITABLE: [&str; 4] = ["state directory", "metrics_file", "SQLite", "if_free"];

/// The operator's guide's `ProtectSystem=strict` drop-in lists every place a run writes. A real
/// `check` (SQLite database, metrics file, an `if_free` lock release, the state directory)
/// runs with the whole file system read-only but one directory of each kind the drop-in
/// lists — what `ProtectSystem=strict` with `ReadWritePaths=` does, emulated with bind mounts
/// in a private mount namespace — and does all its work; left without the metrics directory,
/// the same run fails (exit 3), so the emulation does bite.
#[test]
fn a_run_under_protect_system_strict_writes_only_where_the_guides_drop_in_lets_it() {
    let drop_in = guide_drop_in();
    let lines: Vec<&str> = drop_in.lines().collect();
    let mut kinds = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("ReadWritePaths=") {
            let comment = lines[..i]
                .iter()
                .rev()
                .take_while(|c| c.starts_with('#'))
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            let kind = WRITABLE
                .iter()
                .find(|k| comment.contains(*k))
                .unwrap_or_else(|| panic!("no comment says what {l} is for:\n{drop_in}"));
            kinds.push(*kind);
        }
    }
    assert_eq!(
        kinds, WRITABLE,
        "the drop-in's ReadWritePaths=, in order:\n{drop_in}"
    );
    if !root_or_skip("the ProtectSystem=strict emulation (mount namespaces)") {
        return;
    }

    let run = |writable: &[&str]| {
        let sb = Sandbox::new();
        for d in ["state", "textfile", "db", "locks", "hb"] {
            std::fs::create_dir(sb.path(d)).expect("dir");
        }
        let db = sb.path("db/app.db");
        let conn = rusqlite::Connection::open(&db).expect("sqlite");
        conn.execute_batch(crate::common::SQLITE_SCHEMA)
            .expect("schema");
        conn.execute(
            "INSERT INTO sync_log (id, status, start_time) VALUES (2, 'running', datetime('now', '-3000 seconds'))",
            [],
        )
        .expect("insert");
        drop(conn);
        let hb = sb.path("hb/hb-2");
        std::fs::write(&hb, "").expect("heartbeat");
        std::fs::File::options()
            .append(true)
            .open(&hb)
            .and_then(|f| f.set_modified(std::time::SystemTime::now() - Duration::from_secs(2_820)))
            .expect("mtime");
        let lock = sb.path("locks/lock-2");
        std::fs::write(&lock, "").expect("lock file");
        let cfg = sb.file(
            "selfheal.toml",
            &format!(
                "[database]\nurl = \"sqlite://{db}\"\n\n[run]\nstate_dir = \"{state}\"\n\
                 metrics_file = \"{prom}\"\n\n[[watch]]\nname = \"full-sync\"\n\
                 table = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_file = \"{hb}/hb-{{id}}\"\nlock_file = \"{locks}/lock-{{id}}\"\n\
                 release_lock = \"if_free\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                 ended_column = \"end_time\"\nmessage_column = \"error_msg\"\nconfirm = 1\n",
                db = db.display(),
                state = sb.path("state").display(),
                prom = sb.path("textfile/selfheal.prom").display(),
                hb = sb.path("hb").display(),
                locks = sb.path("locks").display(),
            ),
            0o644,
        );
        let dirs: Vec<String> = writable
            .iter()
            .map(|k| {
                let d = match *k {
                    "state directory" => "state",
                    "metrics_file" => "textfile",
                    "SQLite" => "db",
                    "if_free" => "locks",
                    other => panic!("{other}"),
                };
                sb.path(d).display().to_string()
            })
            .collect();
        // Each writable directory bound onto itself (a mount of its own keeps its flags),
        // then / and the mount holding the sandbox made read-only: /dev, /proc and /sys,
        // mounts of their own, stay as they are, as under ProtectSystem=strict.
        let script = r#"
            bin=$1; cfg=$2; shift 2
            for d in "$@"; do mount --bind "$d" "$d" || exit 97; done
            mount -o remount,bind,ro / || exit 97
            m=$(findmnt -n -o TARGET --target "$cfg") || exit 97
            [ "$m" = / ] || mount -o remount,bind,ro "$m" || exit 97
            touch "${cfg%/*}/probe" 2>/dev/null && exit 98
            exec "$bin" check --config "$cfg"
        "#;
        let o = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(crate::common::bin())
            .arg(&cfg)
            .args(&dirs)
            .env_remove("SELFHEAL_CONFIG")
            .env_remove("SELFHEAL_DB_PASSWORD")
            .env_remove("MYSQL_PWD")
            .env("HOME", "/nonexistent/selfheal-test-home")
            .env("LC_ALL", "C")
            .output()
            .expect("unshare");
        assert_ne!(o.status.code(), Some(97), "setting up the mounts: {o:?}");
        assert_ne!(
            o.status.code(),
            Some(98),
            "the sandbox stayed writable: {o:?}"
        );
        let status: String = rusqlite::Connection::open(&db)
            .expect("sqlite")
            .query_row("SELECT status FROM sync_log WHERE id = 2", [], |r| r.get(0))
            .expect("row 2");
        (sb, o, status, lock)
    };

    let (sb, o, status, lock) = run(&WRITABLE);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(status, "error", "the dead row is marked");
    assert!(
        !lock.exists(),
        "release_lock = if_free removed the free lock file"
    );
    assert!(
        sb.path("textfile/selfheal.prom").exists(),
        "the metrics file"
    );
    for f in ["journal.jsonl", "last-run.json", "run.lock"] {
        assert!(sb.path("state").join(f).exists(), "state/{f}");
    }
    assert!(!sb.path("probe").exists());

    let (_sb, o, _, _) = run(&["state directory", "SQLite", "if_free"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "without the metrics directory writable: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
