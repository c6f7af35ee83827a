//! What a row or a host can make selfheal print, and what it must say about secrets, through
//! the real binary:
//! - row values holding newlines, carriage returns, escape sequences, NUL and other control
//!   characters (a TEXT id, an owner, a status): every line of the cron text, `--explain`,
//!   `doctor` and `stats` is one line selfheal wrote, with the value's escaped form in it;
//! - a database password in a file every user can read (`password_file`, `defaults_file`,
//!   a URL in the configuration file): `doctor` warns, `check` warns once in a run that
//!   prints anyway and stays silent otherwise; group-readable 640 is fine.

use std::path::Path;

use crate::common::*;

// ---------------------------------------------------------------------------------------
// A multi-byte database name

// ---------------------------------------------------------------------------------------
// Control characters in values from the database

/// The job table with a TEXT id, an owner and a heartbeat column.
pub(crate) const TEXT_ID_SCHEMA: &str = "CREATE TABLE sync_log (
    id TEXT PRIMARY KEY,
    status VARCHAR(32) NOT NULL,
    start_time TEXT,
    end_time TEXT,
    error_msg VARCHAR(255) NOT NULL DEFAULT '',
    heartbeat_at TEXT,
    worker TEXT
);
CREATE INDEX sync_log_status ON sync_log (status);";

/// Two ids that try to forge a line of cron mail, one that tries to repaint the terminal.
const FORGED: &str = "7\nfull-sync id=8: set status to 'error' (mark_dead) — forged";
const FORGED_SHOWN: &str = "7\\nfull-sync id=8: set status to 'error' (mark_dead) — forged";
const NOISY: &str = "9\r\u{1b}[2K\0\u{7f}\u{85}\u{2028}测试";
const NOISY_SHOWN: &str = "9\\r\\u{1b}[2K\\0\\u{7f}\\u{85}\\u{2028}测试";

fn text_id_rows(sb: &Sandbox) -> (SqliteDb, std::path::PathBuf) {
    let db = SqliteDb::with_schema(sb, TEXT_ID_SCHEMA);
    let c = db.conn();
    let insert = |id: &str, status: &str, worker: Option<&str>| {
        c.execute(
            "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) \
             VALUES (?1, ?2, datetime('now', '-3000 seconds'), datetime('now', '-2820 seconds'), ?3)",
            rusqlite::params![id, status, worker],
        )
        .expect("insert");
    };
    // Two dead rows (their heartbeat stale), one owned by another host, one parked.
    insert(FORGED, "running", None);
    insert(NOISY, "running", None);
    insert("r\nforged", "running", Some("web9\nforged:12"));
    insert("p\nforged", "wait_manual", None);
    let watch = "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                 ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
                 owner_column = \"worker\"\nmanual_value = \"wait_manual\"\nconfirm = 1\n";
    let cfg = sb.config(&db.url(), watch);
    (db, cfg)
}

#[track_caller]
fn every_line_starts_with(text: &str, starts: &[&str]) {
    for line in text.lines() {
        assert!(
            starts.iter().any(|s| line.starts_with(s)),
            "a line selfheal did not write: {line:?} in\n{text}"
        );
    }
}

#[test]
fn a_row_id_holding_a_newline_cannot_forge_a_line_of_explain_or_of_cron_mail() {
    let sb = Sandbox::new();
    let (db, cfg) = text_id_rows(&sb);

    let o = check(&cfg, &["--explain"]);
    // A row is parked: exit 1.
    assert_exit(&o, 1);
    let out = stdout(&o);
    every_line_starts_with(
        &out,
        &[
            "watch full-sync (table sync_log",
            "  id=",
            "      because ",
            "      a real run would ",
            "      note: ",
            "  parked: ",
            "3 running rows in 1 watch",
        ],
    );
    assert_eq!(out.lines().filter(|l| l.starts_with("  id=")).count(), 3);
    assert_eq!(out.lines().count(), 1 + 3 * 3 + 1 + 1, "{out}");
    assert!(out.contains(&format!("  id={FORGED_SHOWN} dead ")), "{out}");
    assert!(out.contains(&format!("  id={NOISY_SHOWN} dead ")), "{out}");
    assert!(out.contains("  id=r\\nforged remote "), "{out}");
    assert!(out.contains("owner remote:web9\\nforged"), "{out}");
    assert!(out.contains("id=p\\nforged (started "), "{out}");
    assert!(!out.contains('\r') && !out.contains('\u{1b}') && !out.contains('\0'));
    assert_eq!(stderr(&o), "");

    // The cron text: one line per change, whatever the id holds.
    let o = check(&cfg, &[]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    every_line_starts_with(&out, &["full-sync id="]);
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "full-sync id={FORGED_SHOWN}: set status to 'error' (mark_dead) — self-heal: dead: "
        ))),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("full-sync id={NOISY_SHOWN}: set status"))),
        "{out}"
    );
    assert!(!out.contains('\r') && !out.contains('\u{1b}') && !out.contains('\0'));
    // The rows themselves were written: the compare-and-set bound the ids as they are.
    let c = db.conn();
    let status = |id: &str| -> String {
        c.query_row("SELECT status FROM sync_log WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .expect("status")
    };
    assert_eq!(status(FORGED), "error");
    assert_eq!(status(NOISY), "error");
    assert_eq!(status("r\nforged"), "running");
}

#[test]
fn doctor_and_stats_print_values_from_the_database_escaped() {
    let sb = Sandbox::new();
    let (db, cfg) = text_id_rows(&sb);
    // A row selfheal marked that later ended well anyway: a false positive stats lists,
    // with an id and a status that try to forge lines.
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, end_time, error_msg) VALUES \
             (?1, ?2, datetime('now', '-3000 seconds'), datetime('now', '-1000 seconds'), \
             'self-heal: dead: heartbeat stale, no sign of the worker (row 20m, heartbeat 10m \
             ago, stale_after 5m)')",
            rusqlite::params!["f\nforged", "ok\u{1b}[1m\r\nforged"],
        )
        .expect("finished row");

    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    let out = stdout(&o);
    every_line_starts_with(&out, &["✓ ", "! ", "✗ ", "i "]);
    assert!(
        out.contains("running rows by owner: web9\\nforged 1"),
        "{out}"
    );
    assert!(
        out.contains("! watch full-sync: parked row id=p\\nforged: "),
        "{out}"
    );

    let o = selfheal()
        .args(["stats", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 1);
    let out = stdout(&o);
    every_line_starts_with(&out, &["watch full-sync (table sync_log", "  "]);
    assert!(
        out.contains("    id=f\\nforged ok\\u{1b}[1m\\r\\nforged after 33m"),
        "{out}"
    );
    assert!(
        out.contains(": ok\\u{1b}[1m\\r\\nforged 1"),
        "the status census: {out}"
    );
    assert!(!out.contains('\r') && !out.contains('\u{1b}'));
}

// ---------------------------------------------------------------------------------------
// Secrets readable by every user

/// A MariaDB account with a password, its database holding the job table; a sandbox
/// others can search (as `/etc/selfheal` is), so its files' own modes decide.
pub(crate) fn account() -> Option<(Sandbox, MysqlDb, String, String)> {
    let mut db = MysqlDb::new()?;
    db.create_sync_log("DATETIME");
    let password = "s3cret-pw";
    let user = db.create_user(password);
    let sb = Sandbox::new();
    chmod(sb.dir.path(), 0o755);
    Some((sb, db, user, password.to_string()))
}

/// The server URL for `user` (no password) on `db`.
fn url_for(db: &MysqlDb, user: &str, password: Option<&str>) -> String {
    let url = db.url.clone();
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    match password {
        Some(p) => format!("{scheme}://{user}:{p}@{host}"),
        None => format!("{scheme}://{user}@{host}"),
    }
}

fn doctor(cfg: &Path) -> String {
    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(cfg)
        .output()
        .expect("doctor");
    assert!(
        !stdout(&o).contains("✗ database"),
        "the account logs in: {}",
        stdout(&o)
    );
    stdout(&o)
}

fn warnings_of_secrets(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("is readable by every user"))
        .collect()
}

#[test]
fn doctor_warns_of_a_password_every_user_can_read_and_not_of_group_read() {
    let Some((sb, db, user, pw)) = account() else {
        return;
    };
    let pwfile = sb.file("db-password", &format!("{pw}\n"), 0o644);
    let cfg = sb.config_with(
        &format!(
            "url = \"{}\"\npassword_file = \"{}\"",
            url_for(&db, &user, None),
            pwfile.display()
        ),
        "",
        &sb.watch(""),
    );
    chmod(&cfg, 0o644);
    let p = pwfile.display();
    let out = doctor(&cfg);
    let w = warnings_of_secrets(&out);
    assert_eq!(w.len(), 1, "{out}");
    assert!(
        w[0].starts_with(&format!(
            "! database: password: database.password_file {p} is readable by every user \
             (mode 0644): anyone on this host can read the database password; fix: chmod o-r \
             {p} (chmod 640 {p} with owner root and group "
        )),
        "{out}"
    );
    // The recommended layout: root writes it, the group selfheal runs as reads it.
    let www = nix::unistd::Group::from_name("www-data")
        .expect("groups")
        .map_or(0, |g| g.gid.as_raw());
    std::os::unix::fs::chown(&pwfile, Some(0), Some(www)).expect("chown");
    chmod(&pwfile, 0o640);
    assert_eq!(warnings_of_secrets(&doctor(&cfg)), Vec::<&str>::new());
    // World-readable, but in a directory others cannot search: nobody else reaches it.
    chmod(&pwfile, 0o644);
    chmod(sb.dir.path(), 0o750);
    assert_eq!(warnings_of_secrets(&doctor(&cfg)), Vec::<&str>::new());
    chmod(sb.dir.path(), 0o755);

    // An option file with a password.
    chmod(&pwfile, 0o600);
    let socket = mysql::Opts::from_url(&db.url)
        .expect("url")
        .get_socket()
        .map(str::to_string);
    let cnf = sb.file(
        "app.cnf",
        &format!(
            "[client]\nuser = {user}\npassword = \"{pw}\"\n{}",
            socket
                .map(|s| format!("socket = {s}\n"))
                .unwrap_or_default()
        ),
        0o644,
    );
    let with_cnf = |extra: &str| {
        sb.config_with(
            &format!(
                "url = \"{}\"\ndefaults_file = \"{}\"{extra}",
                url_for(&db, &user, None),
                cnf.display()
            ),
            "",
            &sb.watch(""),
        )
    };
    let cfg = with_cnf("");
    let out = doctor(&cfg);
    let w = warnings_of_secrets(&out);
    assert_eq!(w.len(), 1, "{out}");
    assert!(
        w[0].starts_with(&format!(
            "! database: password: database.defaults_file {} holds a password and is readable \
             by every user (mode 0644)",
            cnf.display()
        )) && w[0].contains(&format!("fix: chmod o-r {}", cnf.display())),
        "{out}"
    );
    // An option file without a password (the password comes from a private file) is no
    // secret.
    std::fs::write(&cnf, format!("[client]\nuser = {user}\n")).expect("cnf");
    let cfg = with_cnf(&format!("\npassword_file = \"{}\"", pwfile.display()));
    assert_eq!(warnings_of_secrets(&doctor(&cfg)), Vec::<&str>::new());

    // A password in the configuration file's URL.
    let cfg = sb.config(&url_for(&db, &user, Some(&pw)), &sb.watch(""));
    chmod(&cfg, 0o644);
    let out = doctor(&cfg);
    let w = warnings_of_secrets(&out);
    assert_eq!(w.len(), 1, "{out}");
    assert!(
        w[0].starts_with(&format!(
            "! database: password: the configuration file {} holds a password in database.url \
             and is readable by every user (mode 0644)",
            cfg.display()
        )) && w[0].ends_with("; or move the password into database.password_file"),
        "{out}"
    );
    chmod(&cfg, 0o640);
    assert_eq!(warnings_of_secrets(&doctor(&cfg)), Vec::<&str>::new());
}

#[test]
fn check_warns_of_a_password_every_user_can_read_once_and_only_in_a_run_that_prints() {
    let Some((sb, mut db, user, pw)) = account() else {
        return;
    };
    let pwfile = sb.file("db-password", &format!("{pw}\n"), 0o644);
    let cfg = sb.config_with(
        &format!(
            "url = \"{}\"\npassword_file = \"{}\"",
            url_for(&db, &user, None),
            pwfile.display()
        ),
        "",
        &sb.watch("confirm = 1\n"),
    );
    let warning = format!(
        "selfheal: warning: database.password_file {} is readable by every user (mode 0644): \
         anyone on this host can read the database password; fix: chmod o-r {}",
        pwfile.display(),
        pwfile.display()
    );
    // Nothing to say: the cron run stays silent (cron would mail the warning every run).
    let o = cron_check_is_silent(&cfg);
    assert_eq!(stderr(&o), "");

    // A run that prints anyway says it, once.
    db.insert(1, "running", 3_000);
    db.insert(2, "running", 3_000);
    for id in [1, 2] {
        sb.heartbeat(id, std::time::Duration::from_secs(2_820));
    }
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&warning), "{err}");
    // --explain always prints: once too.
    db.insert(3, "running", 3_000);
    sb.heartbeat(3, std::time::Duration::from_secs(2_820));
    let o = check(&cfg, &["--explain"]);
    assert_exit(&o, 0);
    assert_eq!(stderr(&o).matches("is readable by every user").count(), 1);
    // JSON carries it in the summary's warnings (a real run: it marks row 3).
    let o = check(&cfg, &["--format", "json"]);
    let (_, summary) = json_lines(&o);
    assert!(
        summary["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.starts_with(&warning[19..]))),
        "{summary}"
    );

    // Group-readable: no warning, the change still printed.
    chmod(&pwfile, 0o640);
    db.insert(4, "running", 3_000);
    sb.heartbeat(4, std::time::Duration::from_secs(2_820));
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
    assert_eq!(stderr(&o), "");
}

/// Watches one to the server: `"ss"` and `"ß"` under `utf8mb4_unicode_ci`, and `"sync"`
/// and `"sy\u{200b}nc"` (a zero-width space the collation ignores), were accepted by
/// `check`, and one row was `dead` in one watch and `alive` in the other. `check` asks the
/// server once per run and refuses them (exit 2) before judging a row, naming both values
/// escaped; values the server tells apart pass.
#[test]
fn watches_one_to_the_columns_collation_are_refused_by_check() {
    let Some(mut db) = MysqlDb::new() else { return };
    db.create_sync_log("DATETIME");
    db.exec(
        "ALTER TABLE sync_log ADD COLUMN job VARCHAR(32) CHARACTER SET utf8mb4 \
         COLLATE utf8mb4_unicode_ci NOT NULL DEFAULT 'sync'",
    );
    // A row the first watch would mark dead at once: nothing may be written.
    db.insert(1, "running", 3000);
    let sb = Sandbox::new();
    let two = |a: &str, b: &str| {
        format!(
            "{}match = {{ job = \"{a}\" }}\n\n[[watch]]\nname = \"other\"\ntable = \"sync_log\"\n\
             started_column = \"start_time\"\nheartbeat_file = \"{}\"\nstale_after = \"1m\"\n\
             max_age = \"15m\"\nmatch = {{ job = \"{b}\" }}\n",
            sb.watch(""),
            sb.heartbeat_template()
        )
    };
    let before = db.dump();
    for (a, b, said) in [
        (
            "ss",
            "ß",
            "job = 'ss' and 'ß' are one value under utf8mb4_unicode_ci",
        ),
        (
            "sync",
            "sy\\u200bnc",
            "job = 'sync' and 'sy\\u{200b}nc' are one value under utf8mb4_unicode_ci",
        ),
    ] {
        let cfg = sb.config(&db.url, &two(a, b));
        for args in [&["--dry-run"][..], &[][..]] {
            let o = check(&cfg, args);
            assert_exit(&o, 2);
            let err = stderr(&o);
            assert!(
                err.contains(
                    "watch 'other': match: its rows can be those of watch 'full-sync' \
                              on the server"
                ) && err.contains(said),
                "{a} {b}: {err}"
            );
            assert!(!err.contains('\u{200b}'), "escaped: {err}");
            assert_eq!(stdout(&o), "", "no row judged");
        }
        assert_eq!(db.dump(), before, "nothing written");
    }
    let cfg = sb.config(&db.url, &two("sync", "async"));
    let o = check(&cfg, &["--dry-run"]);
    assert_exit(&o, 0);
}
