//! `selfheal doctor` against real schemas: a healthy MariaDB table is all ✓ (exit 0); a
//! table with no status index, a missing column, an unreadable heartbeat directory (as an
//! unprivileged user), a heartbeat column written in the future and a `max_age` below the
//! runs the table shows are each one ✗ line with its fix (exit 1); a bad configuration is
//! exit 2 and an unreachable database exit 3. A healthy single-host setup passes with the
//! hosts advice (exit 0), a missing index is worded by the table's size, and a run as
//! `nobody` reads as sentences and hands nobody a fix.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::*;

/// The report's lines, each checked to be one mark, a subject and a detail.
fn lines(o: &std::process::Output) -> Vec<String> {
    let out = stdout(o);
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    for l in &lines {
        assert!(
            ["✓ ", "✗ ", "! ", "i "].iter().any(|m| l.starts_with(m)),
            "one mark per line: {l:?} in\n{out}"
        );
    }
    lines
}

/// The one line about `subject` (e.g. "watch full-sync: index").
fn line<'a>(lines: &'a [String], subject: &str) -> &'a str {
    let hits: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l[l.char_indices().nth(2).map_or(0, |(i, _)| i)..].starts_with(&format!("{subject}:"))
        })
        .collect();
    assert_eq!(hits.len(), 1, "one line for {subject:?} in {lines:#?}");
    hits[0]
}

fn metrics_run(sb: &Sandbox) -> String {
    std::fs::create_dir_all(sb.path("textfile")).expect("dir");
    format!(
        "metrics_file = \"{}\"",
        sb.path("textfile/selfheal.prom").display()
    )
}

#[test]
fn a_healthy_mariadb_schema_is_all_checks_passed() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (1, 'done', NOW() - INTERVAL 3 HOUR, NOW() - INTERVAL 2 HOUR), \
         (2, 'done', NOW() - INTERVAL 2 HOUR, NOW() - INTERVAL 90 MINUTE)",
    );
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES \
         (3, 'running', NOW() - INTERVAL 20 MINUTE, NOW() - INTERVAL 10 SECOND)",
    );
    let sb = Sandbox::new();
    sb.heartbeat(3, std::time::Duration::from_secs(5));
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url),
        &metrics_run(&sb),
        &sb.watch(&format!(
            "heartbeat_column = \"heartbeat_at\"\nlock_file = \"/run/lock/job-{{id}}.lock\"\n\
             host = \"{}\"",
            hostname()
        )),
    );
    let o = doctor(&cfg);
    let l = lines(&o);
    assert_exit(&o, 0);
    assert!(l.iter().all(|l| l.starts_with("✓ ")), "{l:#?}");
    assert!(line(&l, "database").contains("mariadb"), "{l:#?}");
    assert!(line(&l, "clock").contains("session time zone"), "{l:#?}");
    assert!(
        line(&l, "watch full-sync: index").contains("idx_status"),
        "{l:#?}"
    );
    assert!(
        line(&l, "watch full-sync: message").contains("error_msg holds 255 characters"),
        "{l:#?}"
    );
    assert!(
        line(&l, "watch full-sync: running rows").contains("1 alive"),
        "{l:#?}"
    );
    assert!(
        line(&l, "watch full-sync: max_age")
            .contains("the longest of the last 2 runs that ended well took 1h"),
        "{l:#?}"
    );
    for s in [
        "configuration",
        "watch full-sync: table sync_log",
        "watch full-sync: heartbeat_file",
        "watch full-sync: lock_file",
        "run lock",
        "state_dir",
        "metrics_file",
    ] {
        line(&l, s);
    }
    assert_eq!(stderr(&o), "");
}

#[test]
fn a_table_without_a_status_index_gets_the_create_index_fix() {
    // MariaDB: EXPLAIN of the very query check runs says type ALL.
    let mut db = mysql_or_skip!();
    db.exec(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, \
         error_msg VARCHAR(255) NOT NULL DEFAULT '')",
    );
    let sb = Sandbox::new();
    let pinned = format!("host = \"{}\"", hostname());
    let cfg = sb.config(&db.url, &sb.watch(&pinned));
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let l = lines(&o);
    let idx = line(&l, "watch full-sync: index");
    // A table this small costs nothing yet: a warning (a big one is a cross: first_day.rs).
    assert!(idx.starts_with("! "), "{idx}");
    // A full scan either way: of the table (ALL) or of the whole primary key (index).
    assert!(
        idx.contains("EXPLAIN: type ALL") || idx.contains("EXPLAIN: type index"),
        "{idx}"
    );
    assert!(
        idx.ends_with("fix: CREATE INDEX idx_sync_log_status ON sync_log (status)"),
        "{idx}"
    );
    // Applying the fix turns it into a ✓.
    db.exec("CREATE INDEX idx_sync_log_status ON sync_log (status)");
    let o = doctor(&cfg);
    assert_exit(&o, 0);

    // SQLite: EXPLAIN QUERY PLAN says SCAN.
    let sb = Sandbox::new();
    let path = sb.path("plain.db");
    rusqlite::Connection::open(&path)
        .and_then(|c| {
            c.execute_batch(
                "CREATE TABLE sync_log (id INTEGER PRIMARY KEY, status TEXT, start_time TEXT, \
                 end_time TEXT, error_msg VARCHAR(255))",
            )
        })
        .expect("sqlite");
    let cfg = sb.config(&format!("sqlite://{}", path.display()), &sb.watch(&pinned));
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let l = lines(&o);
    let idx = line(&l, "watch full-sync: index");
    assert!(
        idx.starts_with("! ") && idx.contains("it is empty now") && idx.contains("SCAN sync_log"),
        "{idx}"
    );
    assert!(idx.contains("fix: CREATE INDEX"), "{idx}");
}

#[test]
fn a_missing_column_is_named_with_the_columns_there_are() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let cfg = sb.config(&db.url(), &sb.watch("heartbeat_column = \"beat_at\""));
    let o = doctor(&cfg);
    // A column the table lacks is a bad configuration, as for check (docs/design.md#output).
    assert_exit(&o, 2);
    let l = lines(&o);
    let t = line(&l, "watch full-sync: table");
    assert!(t.starts_with("✗ "), "{t}");
    assert!(
        t.contains("heartbeat_column: column beat_at does not exist in table sync_log"),
        "{t}"
    );
    assert!(t.contains("heartbeat_at"), "lists the real columns: {t}");
    assert!(
        t.contains("fix: set heartbeat_column in watch 'full-sync' to one of the columns listed"),
        "{t}"
    );
    // The host-side checks still ran.
    line(&l, "watch full-sync: heartbeat_file");
    line(&l, "run lock");
}

#[test]
fn an_unreadable_heartbeat_directory_as_an_unprivileged_user() {
    let Some(mut cmd) = as_www_data() else { return };
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let (private, cfg) = sb.private_heartbeat_config(&db, 0o777);
    let o = cmd
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 1);
    let l = lines(&o);
    let hb = line(&l, "watch full-sync: heartbeat_file");
    assert!(hb.starts_with("✗ "), "{hb}");
    assert!(
        hb.contains(&format!(
            "www-data (uid 33) cannot look inside {}",
            private.display()
        )),
        "{hb}"
    );
    // Root's own directory: root keeps it, www-data's group may look inside; never "run
    // selfheal as root".
    assert!(
        hb.contains(&format!(
            "fix: chgrp www-data {0} && chmod g+x {0}",
            private.display()
        )),
        "{hb}"
    );
    assert!(!hb.contains("as root"), "{hb}");
    // The same directory is fine for root (with the watch pinned to this host, the one
    // thing doctor would still warn about).
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(
        &cfg,
        text.replace(
            "name = \"full-sync\"",
            &format!("name = \"full-sync\"\nhost = \"{}\"", hostname()),
        ),
    )
    .expect("config");
    let o = doctor(&cfg);
    assert_exit(&o, 0);
}

#[test]
fn a_heartbeat_file_template_that_matches_no_running_rows_file_is_named_with_the_files_there() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // The job writes run/sync_{id}.hb; the configuration says run/sync-{id}.hb.
    let dir = sb.path("run");
    std::fs::create_dir(&dir).expect("dir");
    for id in 1..=4 {
        db.insert(id, "running", 50 * 60);
        std::fs::write(dir.join(format!("sync_{id}.hb")), "").expect("heartbeat");
    }
    // A row not yet past stale_after, and a file that looks nothing like the template.
    db.insert(5, "running", 60);
    std::fs::write(dir.join("deploy.log"), "").expect("file");
    let with = |template: &str| {
        sb.config(
            &db.url(),
            &sb.watch(&format!("host = \"{}\"\n", hostname()))
                .replace(&sb.heartbeat_template(), template),
        )
    };
    let typo = format!("{}/sync-{{id}}.hb", dir.display());
    let o = doctor(&with(&typo));
    assert_exit(&o, 1);
    let l = lines(&o);
    let f = line(&l, "watch full-sync: heartbeat files");
    assert!(f.starts_with("! "), "{f}");
    assert!(
        f.contains(&format!(
            "not one of this host's 4 running rows past stale_after (5m) has its heartbeat \
             file (e.g. row 1: {}/sync-1.hb does not exist), while {} exists: {typo} seems to \
             name no file the job writes (a typo?)",
            dir.display(),
            dir.display()
        )),
        "{f}"
    );
    // A hint of a few names that look like it, not the whole directory.
    assert!(
        f.contains(&format!(
            "{} holds 'sync_1.hb', 'sync_2.hb', 'sync_3.hb'; fix: correct heartbeat_file \
             (now {typo})",
            dir.display()
        )),
        "{f}"
    );
    assert!(!f.contains("deploy.log"), "{f}");
    // The directory itself is fine, and says so.
    let d = line(&l, "watch full-sync: heartbeat_file");
    assert!(d.starts_with("✓ "), "{d}");

    // The template the job writes: no such finding.
    let o = doctor(&with(&format!("{}/sync_{{id}}.hb", dir.display())));
    assert_exit(&o, 0);
    assert!(
        !lines(&o)
            .iter()
            .any(|l| l.contains("full-sync: heartbeat files:")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_heartbeat_column_written_in_the_future_is_a_clock_or_zone_mismatch() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES \
         (7, 'running', NOW() - INTERVAL 10 MINUTE, NOW() + INTERVAL 8 HOUR + INTERVAL 30 SECOND)",
    );
    let sb = Sandbox::new();
    let watch = sb.watch("heartbeat_column = \"heartbeat_at\"");
    let cfg = sb.config(&db.url, &watch);
    // (30 s more than 8 h, so that the second that passes before doctor reads the clock
    // leaves it 8h0m ahead.)
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let l = lines(&o);
    let t = line(&l, "watch full-sync: times");
    assert!(t.starts_with("✗ "), "{t}");
    assert!(t.contains("row 7: heartbeat_at"), "{t}");
    assert!(t.contains("8h0m ahead"), "{t}");
    assert!(t.contains("+8h off the session's zone"), "{t}");
    assert!(t.contains("set [database] timezone"), "{t}");
}

#[test]
fn max_age_below_one_and_a_half_times_the_longest_run_is_named() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let c = db.conn();
    c.execute_batch(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (1, 'done', datetime('now', '-5 hours'), datetime('now', '-2 hours')), \
         (2, 'done', datetime('now', '-2 hours'), datetime('now', '-1 hours'));
         INSERT INTO sync_log (id, status, start_time, end_time, error_msg) VALUES \
         (3, 'error', datetime('now', '-20 hours'), datetime('now', '-10 hours'), \
          'self-heal: overtime: …');",
    )
    .expect("rows");
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let l = lines(&o);
    let m = line(&l, "watch full-sync: max_age");
    assert!(m.starts_with("✗ "), "{m}");
    assert!(
        m.contains("the longest of the last 2 runs that ended well took 3h"),
        "selfheal's own marks are not runs: {m}"
    );
    assert!(m.ends_with("fix: raise max_age to at least 4h 30m"), "{m}");
}

#[test]
fn a_bad_configuration_is_exit_2_and_an_unreachable_database_exit_3() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let cfg = sb.config(&db.url(), &sb.watch("stale_aftr = \"5m\""));
    let o = doctor(&cfg);
    assert_exit(&o, 2);
    let l = lines(&o);
    assert_eq!(l.len(), 1, "{l:#?}");
    assert!(
        l[0].starts_with("✗ configuration: ") && l[0].contains("stale_aftr"),
        "{l:?}"
    );

    let cfg = sb.config(
        "mysql://app@localhost/appdb?socket=/nonexistent/mysqld.sock",
        &sb.watch(""),
    );
    let o = doctor(&cfg);
    assert_exit(&o, 3);
    let l = lines(&o);
    let d = line(&l, "database");
    assert!(
        d.starts_with("✗ ") && d.contains("/nonexistent/mysqld.sock"),
        "{d}"
    );
    assert!(
        d.contains(
            "fix: no socket at /nonexistent/mysqld.sock (from the URL): is the server running"
        ),
        "{d}"
    );
    // What does not need the database is still checked.
    line(&l, "watch full-sync: heartbeat_file");
    line(&l, "state_dir");
}

/// `url` logging in as `user` (no password in the URL).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}@{host}")
}

#[test]
fn the_database_fix_follows_the_servers_error_code() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let user = db.create_user("the-right-password");
    let sb = Sandbox::new();

    // A refused login (ER_ACCESS_DENIED_ERROR): the password fix.
    let cfg = sb.config(&as_user(&db.url, &user), &sb.watch(""));
    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .env("SELFHEAL_DB_PASSWORD", "a-wrong-password")
        .output()
        .expect("run selfheal");
    assert_exit(&o, 3);
    let l = lines(&o);
    let d = line(&l, "database");
    assert!(
        d.starts_with("✗ ")
            && d.contains("Access denied")
            && d.contains(&format!(
                "fix: the server refused {user} with the password from $SELFHEAL_DB_PASSWORD: \
                 correct it there"
            )),
        "{d}"
    );
    // `check` prints the server's words once: the driver's error is the message's source
    // and is not repeated after it.
    let o = selfheal()
        .args(["check", "--config"])
        .arg(&cfg)
        .env("SELFHEAL_DB_PASSWORD", "a-wrong-password")
        .output()
        .expect("run selfheal");
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert_eq!(err.matches("Access denied").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 2, "the error and its fix: {err}");
    assert!(
        err.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("selfheal: fix: ")),
        "{err}"
    );

    // Logged in, but the database in the URL does not exist (ER_BAD_DB_ERROR): no
    // password problem, and a bad configuration (exit 2), as for check.
    let missing = format!("{}_missing", db.name);
    let cfg = sb.config(&with_database(&db.url, &missing), &sb.watch(""));
    let o = doctor(&cfg);
    assert_exit(&o, 2);
    let l = lines(&o);
    let d = line(&l, "database");
    assert!(
        d.starts_with("✗ ")
            && d.contains(&missing)
            && d.contains("fix: correct the database name in [database] url"),
        "{d}"
    );
    let o = check(&cfg, &[]);
    assert_exit(&o, 2);
}

/// The packaged configuration has no watch; the cron job then runs and
/// finds nothing, ever. doctor says so (exit 1) rather than passing everything.
#[test]
fn a_configuration_without_a_watch_is_a_warning_that_the_cron_job_does_nothing() {
    let sb = Sandbox::new();
    let cfg = sb.path("selfheal.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\n# url = \"mysql://app@localhost/appdb\"\n\n[run]\nstate_dir = \"{}\"\n",
            sb.state_dir().display()
        ),
    )
    .expect("write");
    let o = doctor(&cfg);
    assert_exit(&o, 1);
    let l = lines(&o);
    let w = line(&l, "watches");
    assert!(
        w.starts_with("! ")
            && w.contains(&format!(
                "{} has no [[watch]]: the cron job runs and checks nothing",
                cfg.display()
            ))
            && w.contains("fix: add a [[watch]] table"),
        "{w}"
    );
    // check itself stays a quiet no-op in cron.
    cron_check_is_silent(&cfg);
}

/// The cron line of `user` in /etc/cron.d/selfheal, as the package installs it.
fn cron_line(user: &str) -> String {
    format!(
        "MAILTO=root\\n*/10 * * * * {user} [ -x /usr/bin/selfheal ] && /usr/bin/selfheal check\\n"
    )
}

/// Root running check or doctor by hand while cron runs selfheal as
/// www-data is told so — what root creates in state_dir would be root's, and root sees
/// files www-data may not — with the runuser line that runs it as www-data. Not when cron
/// runs it as root too, nor for www-data itself.
#[test]
fn root_is_warned_when_cron_runs_selfheal_as_another_user() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    // Pinned to this host: doctor has nothing else to warn about.
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!("host = \"{}\"\n", hostname())),
    );
    // The sandbox and the database readable by www-data, for the run as www-data.
    std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::fs::set_permissions(&db.path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let run = |cron_user: &str, as_user: Option<&str>, args: &[&str]| {
        let setup = format!("printf '{}' > /etc/cron.d/selfheal", cron_line(cron_user));
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(u) = as_user {
            argv.extend(["runuser", "-u", u, "--"].map(Into::into));
        }
        argv.push(bin().into());
        argv.extend(args.iter().map(Into::into));
        argv.push("--config".into());
        argv.push(cfg.clone().into());
        let argv: Vec<&std::ffi::OsStr> = argv.iter().map(std::ffi::OsString::as_os_str).collect();
        on_own_host(&["/etc"], &setup, &argv).map(|mut c| c.output().expect("run"))
    };
    let Some(o) = run("www-data", None, &["doctor"]) else {
        return;
    };
    assert_exit(&o, 1);
    let l = lines(&o);
    let u = line(&l, "user");
    assert!(
        u.starts_with("! user: running as root, but /etc/cron.d/selfheal runs selfheal as www-data: root sees files www-data may not"),
        "{u}"
    );
    assert!(
        u.contains("would be root's")
            && u.contains(
                "fix: run it as www-data: runuser -u www-data -- selfheal doctor --config "
            ),
        "{u}"
    );

    // check: a warning on stderr (and in the JSON summary), the run itself as usual.
    let o = run("www-data", None, &["check"]).expect("root");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "selfheal: warning: running as root, but /etc/cron.d/selfheal runs selfheal as www-data"
        ) && err.contains(&format!(
            "fix: run it as www-data: runuser -u www-data -- selfheal check --config {}",
            cfg.display()
        )),
        "{err}"
    );
    let o = run("www-data", None, &["check", "--format", "json"]).expect("root");
    let (_, summary) = json_lines(&o);
    assert!(
        summary["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("running as root")),
        "{summary}"
    );

    // Cron runs it as root: nothing to say.
    let o = run("root", None, &["doctor"]).expect("root");
    assert_exit(&o, 0);
    assert!(!stdout(&o).contains("running as root"), "{}", stdout(&o));
    let o = run("root", None, &["check"]).expect("root");
    assert_exit(&o, 0);
    assert_eq!(stderr(&o), "");

    // www-data itself: nothing to say either.
    let o = run("www-data", Some("www-data"), &["check", "--explain"]).expect("root");
    assert_exit(&o, 0);
    assert!(!stderr(&o).contains("running as root"), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------
// A healthy single-host setup passes; a missing index is worded by the table's size; a
// run as nobody reads as sentences

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
    // The command as it was run, --config included: pasted, it runs the same doctor.
    let run_as = format!(
        "fix: run selfheal as www-data, the user /etc/cron.d/selfheal runs it as: runuser -u \
         www-data -- selfheal doctor --config {}; nobody stands for no user and is given \
         nothing",
        cfg.display()
    );
    // The configuration nobody may not read: exit 2, and whom to run as.
    assert!(unreadable.ends_with("exit 2\n"), "{unreadable}");
    let line = unreadable.lines().next().expect("a line");
    assert!(
        line.starts_with("✗ configuration: cannot read the configuration ")
            && line.contains("as nobody (uid 65534): Permission denied")
            && line.contains(&run_as),
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
