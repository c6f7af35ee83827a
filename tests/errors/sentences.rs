//! Every error a person reads is a sentence: the real binary is driven into every error it
//! can be provoked into — bad configurations of every kind, bad flags, a missing, refusing,
//! frozen (SIGSTOP) or locked database, access denied, an unknown database, table or
//! column, unreadable files of every kind, a bad state directory, a held run lock — and
//! each `check`, `doctor` and `stats` run must exit with its documented status, and print
//! no library debug form (`{ `, `Error {`, `MySqlError`, …) and no repeated segment
//! (`database: database:`, `…: X: X`).
//!
//! One test per backend and one for the frozen server (it waits the 60 s read timeout out);
//! each collects every transcript and fails once, listing every problem found. Runs as
//! `nobody` and in a private mount namespace need root (CI is root).

use std::borrow::BorrowMut;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;
use mysql::prelude::Queryable;

/// What no line a person reads may contain: the debug forms of the errors of std, the
/// mysql crate and rusqlite.
const DEBUG_FORMS: [&str; 12] = [
    "{ ",
    " }",
    "Error {",
    "Error(",
    "MySqlError",
    "DriverError",
    "CodecError",
    "IoError",
    "UrlError",
    "SqliteFailure",
    "Os {",
    "kind: ",
];

/// The problems of one line: a debug form, or a segment (between `: ` and `; `) repeated
/// next to itself or, when longer than a word, anywhere in the same part of the line (the
/// message, or its fix: a fix may name the file the message names).
fn line_problems(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for bad in DEBUG_FORMS {
        if line.contains(bad) {
            out.push(format!("debug form {bad:?}"));
        }
    }
    let mut body = line;
    for prefix in [
        "selfheal: error: ",
        "selfheal: fix: ",
        "selfheal: warning: ",
        "✓ ",
        "✗ ",
        "! ",
        "i ",
    ] {
        body = body.strip_prefix(prefix).unwrap_or(body);
    }
    let (message, fix) = body
        .split_once("; fix: ")
        .or_else(|| body.split_once("; advice: "))
        .unwrap_or((body, ""));
    for part in [message, fix] {
        let segs: Vec<&str> = part
            .split(": ")
            .flat_map(|s| s.split("; "))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        for w in segs.windows(2) {
            if w[0].eq_ignore_ascii_case(w[1]) {
                out.push(format!("repeated {:?}", w[0]));
            }
        }
        for (i, a) in segs.iter().enumerate() {
            if a.len() >= 12 && segs[i + 1..].iter().skip(1).any(|b| b == a) {
                out.push(format!("repeated {a:?}"));
            }
        }
    }
    out
}

/// Every run of a sweep, and what was wrong with them.
struct Sweep {
    runs: usize,
    problems: Vec<String>,
    transcript: String,
}

impl Sweep {
    fn new() -> Sweep {
        Sweep {
            runs: 0,
            problems: Vec::new(),
            transcript: String::new(),
        }
    }

    /// Records one run of `what`, which must exit `expect`.
    fn record(&mut self, what: &str, expect: i32, o: &Output) {
        self.runs += 1;
        let out = stdout(o);
        let err = stderr(o);
        let _ = writeln!(
            self.transcript,
            "# {what}: exit {:?}\n{out}{err}",
            o.status.code()
        );
        if o.status.code() != Some(expect) {
            self.problems.push(format!(
                "{what}: exit {:?}, expected {expect}\n{out}{err}",
                o.status.code()
            ));
        }
        if o.status.code() == Some(101) || err.contains("panicked") {
            self.problems.push(format!("{what}: a panic\n{err}"));
        }
        let mut seen: Vec<&str> = Vec::new();
        for line in out.lines().chain(err.lines()) {
            // JSON output is for programs, checked by its own tests.
            if line.starts_with('{') {
                continue;
            }
            for p in line_problems(line) {
                self.problems.push(format!("{what}: {p} in: {line}"));
            }
            if !line.is_empty() && seen.contains(&line) {
                self.problems
                    .push(format!("{what}: the same line twice: {line}"));
            }
            seen.push(line);
        }
    }

    fn run(&mut self, what: &str, expect: i32, mut cmd: impl BorrowMut<Command>) -> Output {
        let o = cmd.borrow_mut().output().expect("run selfheal");
        self.record(what, expect, &o);
        o
    }

    /// `check`, `doctor` (and `stats` when given) on one configuration.
    fn config(&mut self, what: &str, cfg: &Path, codes: Codes) {
        for (cmd, code) in [
            ("check", Some(codes.check)),
            ("doctor", Some(codes.doctor)),
            ("stats", codes.stats),
        ] {
            if let Some(code) = code {
                self.run(
                    &format!("{what} ({cmd})"),
                    code,
                    selfheal().arg(cmd).arg("--config").arg(cfg),
                );
            }
        }
    }

    fn finish(self, name: &str) {
        println!("{}", self.transcript);
        assert!(self.runs > 0, "{name}: nothing was run");
        assert!(
            self.problems.is_empty(),
            "{name}: {} problem(s) in {} runs:\n\n{}",
            self.problems.len(),
            self.runs,
            self.problems.join("\n\n")
        );
    }
}

/// The exit statuses one broken configuration must give.
#[derive(Clone, Copy)]
struct Codes {
    check: i32,
    doctor: i32,
    stats: Option<i32>,
}

/// A bad configuration: 2 everywhere.
const BAD_CONFIG: Codes = Codes {
    check: 2,
    doctor: 2,
    stats: Some(2),
};
/// The database cannot be used: 3 everywhere.
const DB_DOWN: Codes = Codes {
    check: 3,
    doctor: 3,
    stats: Some(3),
};

/// A configuration whose `[run]` table is `run` alone (the sandbox's writes its own).
fn config_run(sb: &Sandbox, name: &str, url: &str, run: &str, watch: &str) -> PathBuf {
    let p = sb.path(name);
    std::fs::write(
        &p,
        format!("[database]\nurl = \"{url}\"\n\n[run]\n{run}\n\n[[watch]]\n{watch}"),
    )
    .expect("write config");
    p
}

/// The sandbox's run lock and state directory as nobody's own, as they would be for a
/// configuration cron runs as nobody (selfheal refuses another user's).
fn give_nobody_its_run_files(sb: &Sandbox) {
    std::fs::create_dir_all(sb.state_dir()).expect("state");
    if !sb.run_lock().exists() {
        std::fs::write(sb.run_lock(), "").expect("lock");
    }
    for p in [sb.state_dir(), sb.run_lock()] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
    }
}

/// `selfheal ARGS` as nobody (`None`: not root, skipped outside CI).
fn nobody(args: &[&OsStr]) -> Option<Command> {
    let mut c = as_nobody()?;
    c.args(args);
    Some(c)
}

#[test]
fn every_sqlite_and_file_error_is_a_sentence_with_its_documented_status() {
    let mut s = Sweep::new();
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(2, "running", 50 * 60);
    sb.heartbeat(2, Duration::from_secs(47 * 60));
    let good = sb.watch("");
    let cfg_of = |watch: &str| sb.config(&db.url(), watch);

    // Configurations broken one way at a time.
    let second = format!("{good}\n[[watch]]\n{}", good.replace("full-sync", "other"));
    for (what, watch) in [
        ("a TOML syntax error", "name = \"full-sync\nx".to_string()),
        (
            "a key with a typo",
            good.replace("stale_after", "stale_afer"),
        ),
        ("a bad duration", good.replace("\"5m\"", "\"5x\"")),
        (
            "a required key missing",
            good.replace("table = \"sync_log\"\n", ""),
        ),
        (
            "a table name that is no identifier",
            good.replace("\"sync_log\"", "\"sync_log; DROP TABLE x\""),
        ),
        (
            "max_age below stale_after",
            good.replace("\"4h\"", "\"1m\""),
        ),
        (
            "overtime = manual without manual_value",
            format!("{good}overtime = \"manual\"\n"),
        ),
        (
            "a watch without a name",
            good.replace("name = \"full-sync\"\n", ""),
        ),
        (
            "two watches of one name",
            second.replace("\"other\"", "\"full-sync\""),
        ),
        (
            "an unknown overtime",
            format!("{good}overtime = \"later\"\n"),
        ),
    ] {
        s.config(what, &cfg_of(&watch), BAD_CONFIG);
    }
    let w = good.clone();
    for (what, database, run) in [
        ("no database url", "# url = \"\"".to_string(), String::new()),
        (
            "a URL of no known scheme",
            "url = \"oracle://app@db/appdb\"".into(),
            String::new(),
        ),
        (
            "a MySQL URL with a bad port",
            "url = \"mysql://app@localhost:99999/appdb\"".into(),
            String::new(),
        ),
        (
            "a PostgreSQL URL with an option selfheal does not take",
            "url = \"postgres://app@/appdb?sslmode=require\"".into(),
            String::new(),
        ),
        (
            "a MySQL option file with a PostgreSQL URL",
            "url = \"postgres://app@/appdb\"\ndefaults_file = \"/etc/mysql/my.cnf\"".into(),
            String::new(),
        ),
        (
            "a relative defaults_file",
            format!(
                "url = \"{}\"\ndefaults_file = \"app.cnf\"",
                "mysql://app@localhost/appdb"
            ),
            String::new(),
        ),
        (
            "an unknown time zone",
            format!("url = \"{}\"\ntimezone = \"Mars/Olympus\"", db.url()),
            String::new(),
        ),
        (
            "a bad clock_tolerance",
            format!("url = \"{}\"", db.url()),
            "clock_tolerance = \"soon\"".into(),
        ),
        (
            "an unknown [run] key",
            format!("url = \"{}\"", db.url()),
            "lockfile = \"/tmp/x\"".into(),
        ),
    ] {
        s.config(what, &sb.config_with(&database, &run, &w), BAD_CONFIG);
    }
    // A relative state_dir ([run] is written by the sandbox; this one replaces it).
    let rel = sb.path("relative.toml");
    std::fs::write(
        &rel,
        format!(
            "[database]\nurl = \"{}\"\n\n[run]\nstate_dir = \"state\"\n\n[[watch]]\n{good}",
            db.url()
        ),
    )
    .expect("write");
    s.config("a relative state_dir", &rel, BAD_CONFIG);
    let odd = sb.path("...toml");
    std::fs::write(
        &odd,
        format!("[database]\nurl = \"{}\"\n\n[[watch]]\n{good}", db.url()),
    )
    .expect("write");
    s.config(
        "a file name that makes no state directory",
        &odd,
        BAD_CONFIG,
    );

    // The configuration file itself.
    s.config(
        "a configuration that does not exist",
        Path::new("/nonexistent/selfheal.toml"),
        BAD_CONFIG,
    );
    s.config("a directory for a configuration", sb.dir.path(), BAD_CONFIG);

    // Flags.
    let cfg = cfg_of(&good);
    for (what, args, code) in [
        ("an unknown flag", &["check", "--bogus"][..], 2),
        ("an unknown format", &["check", "--format", "yaml"], 2),
        (
            "a flag with a bad duration",
            &["check", "--stale-after", "5x"],
            2,
        ),
        ("an unknown --watch", &["check", "--watch", "nope"], 2),
        ("stats --watch unknown", &["stats", "--watch", "nope"], 2),
        ("an unknown subcommand", &["chek"], 2),
    ] {
        s.run(what, code, selfheal().args(args).arg("--config").arg(&cfg));
    }
    s.run(
        "a password on the command line",
        2,
        selfheal().args([
            "check",
            "--db",
            "mysql://app:secret@localhost/appdb",
            "--table",
            "t",
            "--started-column",
            "s",
            "--heartbeat-file",
            "/tmp/hb",
            "--stale-after",
            "5m",
            "--max-age",
            "4h",
        ]),
    );
    // selfheal run: a lock it cannot open, a program that does not exist, bad flags.
    for (what, args, code) in [
        (
            "run: a lock in a directory that does not exist",
            &["run", "--lock", "/nonexistent/dir/job.lock", "--", "true"][..],
            3,
        ),
        (
            "run: a program that does not exist",
            &["run", "--", "/nonexistent/job"],
            127,
        ),
        (
            "run: a wait that is no duration",
            &["run", "--wait", "5x", "--", "true"],
            2,
        ),
        ("run: no command", &["run"], 2),
    ] {
        s.run(what, code, selfheal().args(args));
    }
    let two = sb.config(&db.url(), &second);
    s.run(
        "watch flags with two watches",
        2,
        selfheal()
            .args(["check", "--stale-after", "9m", "--config"])
            .arg(&two),
    );

    // The database: missing, no database at all, a table or column it lacks, locked.
    s.config(
        "a database file that does not exist",
        &sb.config(
            &format!("sqlite://{}/typo.db", sb.dir.path().display()),
            &good,
        ),
        DB_DOWN,
    );
    let junk = sb.file("junk.db", &"x".repeat(4096), 0o644);
    s.config(
        "a file that is no database",
        &sb.config(&format!("sqlite://{}", junk.display()), &good),
        DB_DOWN,
    );
    s.config(
        "a table the database lacks",
        &cfg_of(&good.replace("sync_log", "sync_lg")),
        BAD_CONFIG,
    );
    s.config(
        "a column the table lacks",
        &cfg_of(&good.replace("\"start_time\"", "\"start_tme\"")),
        BAD_CONFIG,
    );
    // Another process holds the database's exclusive lock past the 5 s busy timeout.
    {
        let holder = db.conn();
        holder.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        let cfg = cfg_of(&good);
        let o = s.run(
            "a database locked by another process",
            3,
            selfheal().args(["check", "--config"]).arg(&cfg),
        );
        assert!(stderr(&o).contains("timed out after 5 s"), "{}", stderr(&o));
        holder.execute_batch("ROLLBACK").expect("unlock");
    }

    // State: a state_dir that is a file, a metrics directory that is missing, a held run
    // lock. A dead row makes the run need its journal.
    let file_state = sb.file("state-file", "", 0o644);
    let cfg = config_run(
        &sb,
        "file-state.toml",
        &db.url(),
        &format!("state_dir = \"{}\"", file_state.display()),
        &good,
    );
    s.run(
        "a state_dir that is a file",
        3,
        selfheal().args(["check", "--config"]).arg(&cfg),
    );
    s.run(
        "a state_dir that is a file (doctor)",
        1,
        selfheal().args(["doctor", "--config"]).arg(&cfg),
    );
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        "metrics_file = \"/nonexistent/textfile/selfheal.prom\"",
        &good,
    );
    s.run(
        "a metrics directory that does not exist (doctor)",
        1,
        selfheal().args(["doctor", "--config"]).arg(&cfg),
    );
    let cfg = cfg_of(&good);
    {
        let _holder = flock1_holder(&sb.run_lock(), false);
        s.run(
            "the run lock held by another run",
            75,
            selfheal().args(["check", "--config"]).arg(&cfg),
        );
    }
    s.run(
        "a real run that marks the dead row",
        0,
        selfheal().args(["check", "--config"]).arg(&cfg),
    );
    db.insert(3, "running", 50 * 60);
    s.run(
        "a metrics directory that does not exist (check)",
        3,
        selfheal().args(["check", "--config"]).arg(sb.config_with(
            &format!("url = \"{}\"", db.url()),
            "metrics_file = \"/nonexistent/textfile/selfheal.prom\"",
            &good,
        )),
    );

    // As an unprivileged user: the configuration, the database, the state and run lock
    // directories, heartbeat directories, the journal for stats.
    if let Some(mut c) = nobody(&[]) {
        let _ = &mut c;
        chmod(sb.dir.path(), 0o755);
        let locked = sb.file(
            "locked.toml",
            &std::fs::read_to_string(cfg_of(&good)).expect("read"),
            0o600,
        );
        for cmd in ["check", "doctor"] {
            s.run(
                &format!("an unreadable configuration, --config ({cmd})"),
                2,
                nobody(&[cmd.as_ref(), "--config".as_ref(), locked.as_os_str()]).expect("root"),
            );
            s.run(
                &format!("an unreadable configuration, $SELFHEAL_CONFIG ({cmd})"),
                2,
                nobody(&[cmd.as_ref()])
                    .expect("root")
                    .env("SELFHEAL_CONFIG", &locked),
            );
        }
        // The database file is root's (mode 600): nobody cannot open it.
        chmod(&db.path, 0o600);
        let cfg = cfg_of(&good);
        chmod(&cfg, 0o644);
        for (cmd, code) in [("check", 3), ("doctor", 3), ("stats", 3)] {
            s.run(
                &format!("a database file nobody may open ({cmd})"),
                code,
                nobody(&[cmd.as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
            );
        }
        chmod(&db.path, 0o666);
        // A dead row, and a state directory nobody cannot create: the journal fails.
        db.insert(4, "running", 50 * 60);
        let cfg = config_run(
            &sb,
            "root-only.toml",
            &db.url(),
            &format!("state_dir = \"{}\"", sb.path("root-only/state").display()),
            &good,
        );
        std::fs::create_dir(sb.path("root-only")).expect("dir");
        chmod(&sb.path("root-only"), 0o755);
        chmod(&cfg, 0o644);
        s.run(
            "a state directory nobody cannot create (check)",
            3,
            nobody(&["check".as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
        );
        s.run(
            "a state directory nobody cannot create (doctor)",
            1,
            nobody(&["doctor".as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
        );
        // A run lock set in a directory of root's.
        let cfg = config_run(
            &sb,
            "root-lock.toml",
            &db.url(),
            &format!(
                "lock_file = \"{}\"\nstate_dir = \"{}\"",
                sb.path("root-only/selfheal.lock").display(),
                sb.path("nobodys-state").display()
            ),
            &good,
        );
        chmod(&cfg, 0o644);
        chmod(sb.dir.path(), 0o777);
        let o = s.run(
            "a run lock nobody cannot create",
            3,
            nobody(&["check".as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
        );
        assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
        chmod(sb.dir.path(), 0o755);
        // Heartbeat files in a directory of root's: unknown rows, not an error.
        let (_private, cfg) = sb.private_heartbeat_config(&db, 0o777);
        give_nobody_its_run_files(&sb);
        for (cmd, code) in [("check", 1), ("doctor", 1)] {
            s.run(
                &format!("heartbeat files nobody cannot reach ({cmd})"),
                code,
                nobody(&[cmd.as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
            );
        }
        // stats with a journal nobody cannot read: a warning.
        let state = sb.state_dir();
        std::fs::create_dir_all(&state).expect("state");
        std::fs::write(state.join("journal.jsonl"), "").expect("journal");
        chmod(&state.join("journal.jsonl"), 0o600);
        chmod(&state, 0o755);
        s.run(
            "a journal nobody cannot read (stats)",
            0,
            nobody(&["stats".as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
        );
    }
    s.finish("sqlite and files");
}

/// The default configuration, unreadable or missing, on a host of its own (a private
/// mount namespace over /etc).
#[test]
fn the_default_configuration_missing_or_unreadable_is_a_sentence_naming_no_flag() {
    let mut s = Sweep::new();
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let text = std::fs::read_to_string(sb.config(&db.url(), &sb.watch(""))).expect("read");
    let setup = format!(
        "mkdir -p /etc/selfheal\ncat >/etc/selfheal/selfheal.toml <<'EOF'\n{text}EOF\n\
         chmod 600 /etc/selfheal/selfheal.toml"
    );
    for cmd in ["check", "doctor", "stats"] {
        let Some(mut c) = on_own_host(
            &["/etc"],
            &setup,
            &[
                "setpriv".as_ref(),
                "--reuid=65534".as_ref(),
                "--regid=65534".as_ref(),
                "--clear-groups".as_ref(),
                bin().as_os_str(),
                cmd.as_ref(),
            ],
        ) else {
            return;
        };
        let o = s.run(
            &format!("the default configuration, root's, mode 600 ({cmd})"),
            2,
            &mut c,
        );
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(
            all.contains(
                "cannot read the configuration /etc/selfheal/selfheal.toml (the default: no \
                 --config given) as nobody (uid 65534): Permission denied (os error 13)"
            ),
            "{all}"
        );
        assert!(!all.contains("--config:"), "no --config was given: {all}");
        // nobody is given nothing: whom to run as instead.
        assert!(
            all.contains(&format!(
                "-- selfheal {cmd}; nobody stands for no user and is given nothing"
            )) && !all.contains("chgrp nogroup"),
            "{all}"
        );
        let Some(mut c) = on_own_host(
            &["/etc"],
            "rm -rf /etc/selfheal",
            &[bin().as_os_str(), cmd.as_ref()],
        ) else {
            return;
        };
        s.run(&format!("no configuration at all ({cmd})"), 2, &mut c);
    }
    s.finish("the default configuration");
}

#[test]
fn every_mysql_error_is_a_sentence_with_its_documented_status() {
    let mut s = Sweep::new();
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(2, "running", 50 * 60);
    let sb = Sandbox::new();
    sb.heartbeat(2, Duration::from_secs(47 * 60));
    let good = sb.watch("");
    let base_url = db.url.clone();
    let url_as = |user: &str| {
        let (scheme, rest) = base_url.split_once("://").expect("scheme");
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        format!("{scheme}://{user}@{host}")
    };

    s.config(
        "no socket where the URL says",
        &sb.config(
            "mysql://app@localhost/appdb?socket=/nonexistent/mysqld.sock",
            &good,
        ),
        DB_DOWN,
    );
    s.config(
        "nothing listens on the port",
        &sb.config("mysql://app@127.0.0.1:1/appdb?prefer_socket=false", &good),
        DB_DOWN,
    );
    let user = db.create_user("the-right-password");
    let cfg = sb.config(&url_as(&user), &good);
    for cmd in ["check", "doctor", "stats"] {
        s.run(
            &format!("a wrong password ({cmd})"),
            3,
            selfheal()
                .args([cmd, "--config"])
                .arg(&cfg)
                .env("SELFHEAL_DB_PASSWORD", "a-wrong-password"),
        );
    }
    s.config("no password for an account that needs one", &cfg, DB_DOWN);
    s.config(
        "an account that does not exist",
        &sb.config(&url_as("no_such_account"), &good),
        DB_DOWN,
    );
    // An account with no rights on this database (ER_DBACCESS_DENIED_ERROR).
    let bare = format!("{user}b");
    db.exec(&format!(
        "CREATE USER '{bare}'@'localhost' IDENTIFIED BY 'pw'"
    ));
    let pw = sb.file("bare.pw", "pw\n", 0o600);
    let cfg = sb.config_with(
        &format!(
            "url = \"{}\"\npassword_file = \"{}\"",
            url_as(&bare),
            pw.display()
        ),
        "",
        &good,
    );
    s.config("an account without rights on the database", &cfg, DB_DOWN);
    db.exec(&format!("DROP USER '{bare}'@'localhost'"));

    s.config(
        "a database the server does not have",
        &sb.config(
            &with_database(&db.url, &format!("{}_missing", db.name)),
            &good,
        ),
        BAD_CONFIG,
    );
    s.config(
        "a table the database lacks",
        &sb.config(&db.url, &good.replace("sync_log", "sync_lg")),
        BAD_CONFIG,
    );
    s.config(
        "a column the table lacks",
        &sb.config(&db.url, &sb.watch("heartbeat_column = \"heartbeat\"\n")),
        BAD_CONFIG,
    );

    // Option and password files.
    let cnf = |name: &str, text: &str, mode: u32| sb.file(name, text, mode);
    let with_file = |key: &str, p: &Path| {
        sb.config_with(
            &format!("url = \"{}\"\n{key} = \"{}\"", url_as(&user), p.display()),
            "",
            &good,
        )
    };
    s.config(
        "a defaults_file that does not exist",
        &with_file("defaults_file", Path::new("/nonexistent/app.cnf")),
        BAD_CONFIG,
    );
    s.config(
        "a world-writable defaults_file",
        &with_file(
            "defaults_file",
            &cnf("ww.cnf", "[client]\npassword = x\n", 0o666),
        ),
        BAD_CONFIG,
    );
    s.config(
        "a defaults_file with an option before any group",
        &with_file(
            "defaults_file",
            &cnf("nogroup.cnf", "password = x\n", 0o600),
        ),
        BAD_CONFIG,
    );
    s.config(
        "a defaults_file with a bad port",
        &with_file(
            "defaults_file",
            &cnf("port.cnf", "[client]\nport = many\n", 0o600),
        ),
        BAD_CONFIG,
    );
    s.config(
        "a password_file that does not exist",
        &with_file("password_file", Path::new("/nonexistent/db-password")),
        BAD_CONFIG,
    );
    if nobody(&[]).is_some() {
        chmod(sb.dir.path(), 0o755);
        give_nobody_its_run_files(&sb);
        let secret = cnf(
            "secret.cnf",
            "[client]\npassword = the-right-password\n",
            0o600,
        );
        let pwf = cnf("secret.pw", "the-right-password\n", 0o600);
        for (what, key, p) in [
            (
                "a defaults_file only root may read",
                "defaults_file",
                &secret,
            ),
            ("a password_file only root may read", "password_file", &pwf),
        ] {
            let cfg = with_file(key, p);
            chmod(&cfg, 0o644);
            for cmd in ["check", "doctor"] {
                let o = s.run(
                    &format!("{what} ({cmd})"),
                    2,
                    nobody(&[cmd.as_ref(), "--config".as_ref(), cfg.as_os_str()]).expect("root"),
                );
                let all = format!("{}{}", stdout(&o), stderr(&o));
                assert!(!all.contains("is the server running"), "{all}");
            }
        }
    }
    s.finish("mysql");
}

/// A frozen server (SIGSTOP): its socket takes the connection and nothing answers. check
/// and doctor give up after the read timeout and say so, "timed out after 60 s" (run at
/// once, the two wait the minute out together).
#[test]
fn a_frozen_server_is_timed_out_after_60_s_in_words() {
    let Some(server) = PrivateMariadb::start() else {
        return;
    };
    let mut admin = server.conn("");
    admin.query_drop("CREATE DATABASE app").expect("create");
    let mut c = server.conn("app");
    c.query_drop(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         start_time DATETIME NULL, end_time DATETIME NULL, \
         error_msg VARCHAR(255) NOT NULL DEFAULT '', KEY idx_status (status))",
    )
    .expect("table");
    drop(c);
    drop(admin);
    let sb = Sandbox::new();
    let cfg = sb.config(&server.url("app"), &sb.watch(""));
    server.freeze();
    let runs: Vec<(String, Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["check", "doctor"]
            .map(|cmd| {
                let cfg: PathBuf = cfg.clone();
                scope.spawn(move || {
                    (
                        cmd.to_string(),
                        selfheal()
                            .args([cmd, "--config"])
                            .arg(&cfg)
                            .output()
                            .expect("run"),
                    )
                })
            })
            .into_iter()
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    server.thaw();
    let mut s = Sweep::new();
    for (cmd, o) in &runs {
        s.record(&format!("a frozen server ({cmd})"), 3, o);
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(
            all.contains("the server did not answer: timed out after 60 s"),
            "{all}"
        );
        assert!(
            all.contains("SIGSTOP"),
            "the fix names the likely cause: {all}"
        );
    }
    s.finish("a frozen server");
}

#[test]
fn the_sweep_catches_debug_forms_and_repeated_causes() {
    assert!(
        !line_problems(
            "selfheal: error: cannot connect to mysql://a@b/c: MySqlError { ERROR 1045 }"
        )
        .is_empty()
    );
    assert!(!line_problems("✗ database: database: cannot connect").is_empty());
    assert!(
        !line_problems(
            "selfheal: error: x: Permission denied (os error 13): Permission denied (os error 13)"
        )
        .is_empty()
    );
    assert!(
        !line_problems("selfheal: error: reading the schema: no such table: no such table")
            .is_empty()
    );
    assert!(line_problems(
        "✗ watch w: heartbeat_file: nobody (uid 65534) cannot look inside /x (Permission denied (os error 13)); fix: chgrp nogroup /x && chmod g+x /x"
    )
    .is_empty());
    assert!(
        line_problems("selfheal: error: watch 'w': heartbeat_file: template /run/{id}.hb")
            .is_empty()
    );
}
