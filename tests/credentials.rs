//! MySQL credentials the way hosts keep them, against the real MariaDB: a password from
//! each source logs in, a wrong one is refused and never shown; an option file with
//! `!include`, quoting and comments; `~/.my.cnf`; root over the socket with no password,
//! as cron runs it. PostgreSQL the same way on a private server whose roles need their
//! password: password_file, $SELFHEAL_DB_PASSWORD, ~/.pgpass, $PGPASSFILE and the URL.

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

/// Holds `#`, both quotes, a space and `;`: everything an option file must quote.
const PW: &str = "Se#cr\"e t'9;x";
const WRONG: &str = "Wr0ng#pw\"x y";

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The server's connection as option-file lines (socket, or host and port).
fn where_lines(server: &str) -> String {
    let o = mysql::Opts::from_url(server).expect("server url");
    match o.get_socket() {
        Some(s) => format!("socket = {s}\n"),
        None => format!(
            "host = {}\nport = {}\n",
            o.get_ip_or_hostname(),
            o.get_tcp_port()
        ),
    }
}

/// `server` with the given user (and password) and database.
fn url_as(server: &str, db: &str, user: Option<&str>, pass: Option<&str>) -> String {
    let url = with_database(server, db);
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let auth = match (user, pass) {
        (Some(u), Some(p)) => format!("{u}:{}@", percent(p)),
        (Some(u), None) => format!("{u}@"),
        _ => String::new(),
    };
    format!("{scheme}://{auth}{host}")
}

/// One way of handing selfheal the password: a `[database]` body, environment variables.
struct Source {
    name: &'static str,
    database: String,
    env: Vec<(&'static str, String)>,
}

fn sources(sb: &Sandbox, db: &MysqlDb, user: &str, pw: &str) -> Vec<Source> {
    let server = MysqlDb::server_url();
    let url_user = url_as(&server, &db.name, Some(user), None);
    let no_user = url_as(&server, &db.name, None, None);
    let home = sb.path("home");
    std::fs::create_dir_all(&home).expect("home");
    let quoted = pw.replace('\\', "\\\\").replace('"', "\\\"");
    std::fs::write(
        home.join(".my.cnf"),
        format!("[client]\nuser = {user}\npassword = \"{quoted}\"\n"),
    )
    .expect("my.cnf");
    // Kept from other users, as a file holding a password must be (else check warns).
    std::fs::set_permissions(home.join(".my.cnf"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let pwfile = sb.file("db-password", &format!("{pw}\n"), 0o600);
    sb.file(
        "secret.cnf",
        &format!(
            "; kept apart from the rest, mode 0600\n[client]\n\
             password = \"{quoted}\"   # quoted: it holds a # and both quotes\n{}",
            where_lines(&server)
        ),
        0o600,
    );
    let defaults = sb.file(
        "app.cnf",
        &format!(
            "# the application's account\n[mysqld]\npassword = not-this-one\n\n\
             [client]\nuser = {user}   # comment after a value\n!include {}\n",
            sb.path("secret.cnf").display()
        ),
        0o600,
    );
    vec![
        Source {
            name: "the URL in the configuration file",
            database: format!(
                "url = \"{}\"",
                url_as(&server, &db.name, Some(user), Some(pw))
            ),
            env: vec![],
        },
        Source {
            name: "password_file",
            database: format!(
                "url = \"{url_user}\"\npassword_file = \"{}\"",
                pwfile.display()
            ),
            env: vec![],
        },
        Source {
            name: "$SELFHEAL_DB_PASSWORD",
            database: format!("url = \"{url_user}\""),
            env: vec![("SELFHEAL_DB_PASSWORD", pw.to_string())],
        },
        Source {
            name: "defaults_file with !include, quotes and comments",
            database: format!(
                "url = \"mysql:///{}\"\ndefaults_file = \"{}\"",
                db.name,
                defaults.display()
            ),
            env: vec![],
        },
        Source {
            name: "~/.my.cnf",
            database: format!("url = \"{no_user}\""),
            env: vec![("HOME", home.display().to_string())],
        },
    ]
}

fn run(sb: &Sandbox, src: &Source, args: &[&str]) -> std::process::Output {
    // Workers write HOST:PID: the standard multi-host setup, nothing for doctor to warn of.
    let cfg = sb.config_with(&src.database, "", &sb.watch("owner_column = \"worker\""));
    // One source is a password in the URL: the file is kept from other users.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut c = selfheal();
    c.args(args).arg("--config").arg(&cfg);
    for (k, v) in &src.env {
        c.env(k, v);
    }
    c.output().expect("run selfheal")
}

#[test]
fn a_password_from_each_source_logs_in() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let user = db.create_user(PW);
    let sb = Sandbox::new();
    for src in sources(&sb, &db, &user, PW) {
        let o = run(&sb, &src, &["check", "--explain"]);
        assert_exit(&o, 0);
        assert!(
            stdout(&o).contains("0 running rows in 1 watch"),
            "{}: {}",
            src.name,
            stdout(&o)
        );
        assert_eq!(stderr(&o), "", "{}", src.name);
        // doctor says where each setting came from, never the password.
        let o = run(&sb, &src, &["doctor"]);
        assert_exit(&o, 0);
        let db_line = stdout(&o)
            .lines()
            .find(|l| l.starts_with("✓ database: "))
            .map(str::to_string)
            .unwrap_or_default();
        assert!(
            db_line.contains(&format!("user {user} (from ")),
            "{}: {db_line}",
            src.name
        );
        assert!(
            db_line.contains("a password from "),
            "{}: {db_line}",
            src.name
        );
        assert!(!stdout(&o).contains(PW), "{}", src.name);
    }
}

#[test]
fn a_wrong_password_from_each_source_is_refused_and_never_shown() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let user = db.create_user(PW);
    let sb = Sandbox::new();
    for src in sources(&sb, &db, &user, WRONG) {
        for args in [
            &["check"][..],
            &["check", "--explain", "--format", "json"],
            &["doctor"],
        ] {
            let o = run(&sb, &src, args);
            assert_exit(&o, 3);
            let all = format!("{}{}", stdout(&o), stderr(&o));
            assert!(all.contains("Access denied"), "{}: {all}", src.name);
            assert!(all.contains(&user), "{}: names the user: {all}", src.name);
            for secret in [WRONG, &percent(WRONG), "Wr0ng", "0ng%23"] {
                assert!(
                    !all.contains(secret),
                    "{}: shows {secret:?}: {all}",
                    src.name
                );
            }
        }
    }
}

#[test]
fn root_over_the_socket_needs_no_password_as_from_cron() {
    let mut db = mysql_or_skip!();
    let server = MysqlDb::server_url();
    let socket = mysql::Opts::from_url(&server)
        .ok()
        .and_then(|o| o.get_socket().map(str::to_string));
    let (Some(socket), true) = (socket, nix::unistd::geteuid().is_root()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root against the local MariaDB over its socket"
        );
        eprintln!("SKIPPED: needs root and a server on a local socket");
        return;
    };
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    // No user, no password, no socket: the login name (root) over the usual socket.
    let plain = Source {
        name: "a bare URL",
        database: format!("url = \"mysql://localhost/{}\"", db.name),
        env: vec![],
    };
    // Debian's /etc/mysql/debian.cnf: only a user, an empty password and the socket.
    let debian = sb.file(
        "debian.cnf",
        &format!("# Automatically generated\n[client]\nhost     = localhost\nuser     = root\npassword = \nsocket   = {socket}\n[mysql_upgrade]\nuser = root\n"),
        0o600,
    );
    let debian = Source {
        name: "a debian.cnf",
        database: format!(
            "url = \"mysql:///{}\"\ndefaults_file = \"{}\"",
            db.name,
            debian.display()
        ),
        env: vec![],
    };
    for src in [plain, debian] {
        let o = run(&sb, &src, &["check", "--explain"]);
        assert_exit(&o, 0);
        assert_eq!(stderr(&o), "", "{}", src.name);
    }
}

/// The man page's example — a database account of selfheal's own,
/// allowed SELECT and UPDATE on the job table only, its password in an option file mode
/// 640 root:www-data, `url = "mysql:///DB"` with `defaults_file` — works as written, for
/// doctor and a real check run as www-data; and the example no longer logs in as the
/// database's root through debian.cnf.
#[test]
fn the_man_pages_example_account_and_option_file_work_as_www_data() {
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/selfheal.1"))
        .expect("man page");
    let examples = man.split(".SH EXAMPLES").nth(1).expect("EXAMPLES");
    for written in [
        "GRANT SELECT, UPDATE ON appdb.sync_log TO 'selfheal'@'localhost'",
        "install \\-m 640 \\-o root \\-g www\\-data /dev/null /etc/selfheal/app.cnf",
        "url = \"mysql:///appdb\"\ndefaults_file = \"/etc/selfheal/app.cnf\"",
    ] {
        assert!(examples.contains(written), "the example shows {written:?}");
    }
    assert!(
        !examples.contains("debian.cnf"),
        "no root login in the example"
    );
    let server = MysqlDb::server_url();
    if !server.contains("socket=/run/mysqld/mysqld.sock") {
        // The example relies on the server's default socket.
        eprintln!("SKIPPED: the example needs the local server on its default socket");
        return;
    }
    if !root_or_skip("runs as www-data") {
        return;
    }
    let as_www = || {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", "www-data", "--"])
            .arg(bin())
            .env_remove("SELFHEAL_CONFIG")
            .env_remove("SELFHEAL_DB_PASSWORD")
            .env("HOME", "/nonexistent")
            .env("LC_ALL", "C");
        c
    };
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(1, "done", 3 * 3600);
    db.exec("UPDATE sync_log SET end_time = NOW() - INTERVAL 2 HOUR WHERE id = 1");
    db.insert(2, "running", 50 * 60);
    // The account with exactly the example's rights (its own name, dropped with the
    // database).
    let user = db.create_user("a-long-random-password");
    db.exec(&format!(
        "REVOKE ALL PRIVILEGES ON `{}`.* FROM '{user}'@'localhost'",
        db.name
    ));
    db.exec(&format!(
        "GRANT SELECT, UPDATE ON `{}`.sync_log TO '{user}'@'localhost'",
        db.name
    ));
    let sb = Sandbox::new();
    sb.heartbeat(2, std::time::Duration::from_secs(47 * 60));
    let cnf = sb.file(
        "app.cnf",
        &format!("[client]\nuser = {user}\npassword = a-long-random-password\n"),
        0o640,
    );
    let chown = std::process::Command::new("chown")
        .arg("root:www-data")
        .arg(&cnf)
        .status()
        .expect("chown");
    assert!(chown.success());
    let cfg = sb.config_with(
        &format!(
            "url = \"mysql:///{}\"\ndefaults_file = \"{}\"",
            db.name,
            cnf.display()
        ),
        "",
        // Pinned to this host: the one thing doctor would still warn about. (confirm = 1:
        // this is about credentials, the dead row is marked by the first run.)
        &sb.watch(&format!("host = \"{}\"\nconfirm = 1\n", hostname())),
    );
    std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    let o = as_www()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    let out = stdout(&o);
    // The dead row waiting for the run is advice (the next real run marks it): exit 0.
    assert_exit(&o, 0);
    assert!(out.contains("i watch full-sync: running rows: "), "{out}");
    assert!(
        out.contains(&format!(
            "(user {user} (from {0}:2), a password from {0}:3, socket /run/mysqld/mysqld.sock (from default))",
            cnf.display()
        )),
        "{out}"
    );
    let o = as_www()
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("check");
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("full-sync id=2: set status to 'error'"),
        "{}",
        stdout(&o)
    );
    assert_eq!(db.row(2).0, "error");
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

/// Holds what a `.pgpass` line must escape (`:` and `\`) and what a URL must encode.
const PG_PW: &str = "Se#cr:e t\\'9;x";
const PG_WRONG: &str = "Wr0ng:pw\\x y";

/// A `.pgpass` field: `:` and `\` escaped.
fn pgpass_field(s: &str) -> String {
    s.replace('\\', "\\\\").replace(':', "\\:")
}

/// The ways of handing selfheal a PostgreSQL password for role `app` on the private
/// server: `password_file`, `$SELFHEAL_DB_PASSWORD`, `~/.pgpass`, `$PGPASSFILE` (matched by
/// the socket directory), and the configuration file's URL.
fn pg_sources(sb: &Sandbox, dir: &std::path::Path, pw: &str) -> Vec<Source> {
    let url = format!("postgres://app@/appdb?host={}", dir.display());
    let line = format!("{}:5432:appdb:app:{}\n", dir.display(), pgpass_field(pw));
    let pwfile = sb.file("pg-password", &format!("{pw}\n"), 0o600);
    let home = sb.path("pghome");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join(".pgpass"), format!("other:5432:*:*:nope\n{line}")).expect("pgpass");
    chmod(&home.join(".pgpass"), 0o600);
    let elsewhere = sb.file("pgpass-elsewhere", &line, 0o600);
    vec![
        Source {
            name: "password_file",
            database: format!("url = \"{url}\"\npassword_file = \"{}\"", pwfile.display()),
            env: vec![],
        },
        Source {
            name: "$SELFHEAL_DB_PASSWORD",
            database: format!("url = \"{url}\""),
            env: vec![("SELFHEAL_DB_PASSWORD", pw.to_string())],
        },
        Source {
            name: "~/.pgpass",
            database: format!("url = \"{url}\""),
            env: vec![("HOME", home.display().to_string())],
        },
        Source {
            name: "$PGPASSFILE",
            database: format!("url = \"{url}\""),
            env: vec![("PGPASSFILE", elsewhere.display().to_string())],
        },
        Source {
            name: "the configuration's URL",
            database: format!(
                "url = \"postgres://app:{}@/appdb?host={}\"",
                percent(pw),
                dir.display()
            ),
            env: vec![],
        },
    ]
}

/// The private server with role `app` (password [`PG_PW`]) owning database `appdb` and
/// its job table.
fn pg_with_app() -> Option<PrivatePostgres> {
    let server = PrivatePostgres::start()?;
    let mut su = server.superuser().expect("superuser");
    su.batch_execute(&format!(
        "CREATE ROLE app LOGIN PASSWORD '{}'",
        PG_PW.replace('\'', "''")
    ))
    .expect("role");
    su.batch_execute("CREATE DATABASE appdb OWNER app")
        .expect("database");
    let mut app = postgres::Config::new()
        .user("app")
        .password(PG_PW)
        .dbname("appdb")
        .host_path(server.socket_dir())
        .connect(postgres::NoTls)
        .expect("app logs in");
    app.batch_execute(
        "CREATE TABLE sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL,
             start_time TIMESTAMP, end_time TIMESTAMP, error_msg VARCHAR(255) NOT NULL DEFAULT '',
             worker VARCHAR(64));
         CREATE INDEX idx_status ON sync_log (status, id)",
    )
    .expect("table");
    Some(server)
}

#[test]
fn a_postgres_password_from_each_source_logs_in_and_a_wrong_one_is_refused_never_shown() {
    let Some(server) = pg_with_app() else { return };
    let sb = Sandbox::new();
    for src in pg_sources(&sb, &server.socket_dir(), PG_PW) {
        let o = run(&sb, &src, &["check", "--explain"]);
        assert_exit(&o, 0);
        assert!(
            stdout(&o).contains("0 running rows in 1 watch"),
            "{}: {}{}",
            src.name,
            stdout(&o),
            stderr(&o)
        );
        let o = run(&sb, &src, &["doctor"]);
        let db_line = finding(&o, "database");
        assert!(
            db_line.starts_with('✓')
                && db_line.contains("user app (from the URL), a password from "),
            "{}: {db_line}",
            src.name
        );
        assert!(!stdout(&o).contains("Se#cr"), "{}", src.name);
    }
    for src in pg_sources(&sb, &server.socket_dir(), PG_WRONG) {
        for args in [&["check"][..], &["doctor"]] {
            let o = run(&sb, &src, args);
            assert_exit(&o, 3);
            let all = format!("{}{}", stdout(&o), stderr(&o));
            assert!(
                all.contains("password authentication failed for user \"app\""),
                "{}: {all}",
                src.name
            );
            assert!(
                all.contains("the server refused app with the password from "),
                "{}: {all}",
                src.name
            );
            for secret in [
                PG_WRONG,
                &percent(PG_WRONG),
                "Wr0ng",
                &pgpass_field(PG_WRONG),
            ] {
                assert!(
                    !all.contains(secret),
                    "{}: shows {secret:?}: {all}",
                    src.name
                );
            }
        }
    }
}

/// A `.pgpass` others may read is not used (as psql does not use it), and doctor says
/// why; with no password anywhere the fix says where one goes.
#[test]
fn a_pgpass_others_may_read_is_not_used_and_doctor_says_so() {
    let Some(server) = pg_with_app() else { return };
    let sb = Sandbox::new();
    let src = pg_sources(&sb, &server.socket_dir(), PG_PW)
        .into_iter()
        .find(|s| s.name == "~/.pgpass")
        .expect("the ~/.pgpass source");
    let home = sb.path("pghome");
    chmod(&home.join(".pgpass"), 0o644);
    let o = run(&sb, &src, &["doctor"]);
    assert_exit(&o, 3);
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        out.contains(&format!(
            "{}/.pgpass is not used: group or others may read it (mode 0644)",
            home.display()
        )),
        "{out}"
    );
    assert!(out.contains("database.password_file"), "{out}");
    assert!(!out.contains("Se#cr"), "{out}");
}
