//! What a value from a row or a host made selfheal print: a multi-byte database name cut
//! inside a character, characters that make a value read as this host's name. Through the
//! real binary.

use crate::common::*;
use crate::security::output::TEXT_ID_SCHEMA;
use mysql::prelude::Queryable;

/// Drops the database it names.
struct DropDatabase {
    conn: mysql::Conn,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let _ = self
            .conn
            .query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// A multi-byte database name cut inside a character for the advisory lock: exit 101.
#[test]
fn a_multibyte_database_name_is_cut_on_a_character_boundary_in_the_advisory_lock() {
    let helper = mysql_or_skip!();
    let watch = "full-sync";
    // The advisory-lock name is `selfheal/DB/WATCH`; past 64 bytes its readable head is
    // cut near byte 47. Pad with ASCII until that byte falls inside a character.
    let tail = "测试_数据库_多字节名称_检查";
    let name = (0..3)
        .map(|pad| format!("selfheal_{}_{}{tail}", std::process::id(), "x".repeat(pad)))
        .find(|db| {
            let lock = format!("selfheal/{db}/{watch}");
            lock.len() > 64 && !lock.is_char_boundary(47)
        })
        .expect("a name whose cut falls inside a character");
    let mut conn = helper.conn();
    conn.query_drop(format!("CREATE DATABASE `{name}`"))
        .expect("create a database with a multi-byte name");
    let _guard = DropDatabase {
        conn: helper.conn(),
        name: name.clone(),
    };
    conn.query_drop(format!(
        "CREATE TABLE `{name}`.sync_log (
            id INT PRIMARY KEY,
            status VARCHAR(16) NOT NULL,
            start_time DATETIME NULL,
            end_time DATETIME NULL,
            error_msg VARCHAR(255) NOT NULL DEFAULT '',
            KEY idx_status (status))"
    ))
    .expect("table");
    conn.query_drop(format!(
        "INSERT INTO `{name}`.sync_log (id, status, start_time) VALUES \
         (1, 'running', NOW() - INTERVAL 3000 SECOND)"
    ))
    .expect("row");

    let sb = Sandbox::new();
    sb.heartbeat(1, std::time::Duration::from_secs(2_820));
    let url = with_database(&MysqlDb::server_url(), &name);
    let cfg = sb.config(&url, &sb.watch("confirm = 1\n"));
    // A real run: only it takes the advisory lock.
    let o = check(&cfg, &[]);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).starts_with("full-sync id=1: set status to 'error' (mark_dead)"),
        "{}",
        stdout(&o)
    );
    let status: Option<String> = conn
        .query_first(format!("SELECT status FROM `{name}`.sync_log WHERE id = 1"))
        .expect("status");
    assert_eq!(status.as_deref(), Some("error"));
    // Twice in a row: the same lock name, taken and released again.
    let o = check(&cfg, &[]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "");
}

/// Zero-width and format characters went unescaped, so an owner could read as this host.
///
/// A value can read as this host. `web1\u{200b}` and `\u{feff}web1` look like `web1` on a
/// terminal and in cron mail; printed escaped they cannot pass for it (the bidirectional
/// overrides were escaped already, these were not).
#[test]
fn invisible_characters_in_an_owner_or_a_holder_line_are_escaped_so_no_value_reads_as_this_host() {
    let sb = Sandbox::new();
    let db = SqliteDb::with_schema(&sb, TEXT_ID_SCHEMA);
    let host = hostname();
    let zwsp = format!("{host}\u{200b}:4242");
    let bom = format!("\u{feff}{host}:4243");
    let c = db.conn();
    for (id, worker) in [("1", zwsp.as_str()), ("2", bom.as_str())] {
        c.execute(
            "INSERT INTO sync_log (id, status, start_time, worker) \
             VALUES (?1, 'running', datetime('now', '-3000 seconds'), ?2)",
            rusqlite::params![id, worker],
        )
        .expect("insert");
    }
    // Row 3's lock file names a holder whose host holds a zero-width joiner and a word
    // joiner.
    c.execute(
        "INSERT INTO sync_log (id, status, start_time) \
         VALUES ('3', 'running', datetime('now', '-3000 seconds'))",
        [],
    )
    .expect("insert");
    let lock = sb.path("3.lock");
    std::fs::write(
        &lock,
        format!("{host}\u{200d}\u{2060}:77 2035-03-14T15:09:26Z\n"),
    )
    .expect("holder line");
    let _holder = flock1_holder(&lock, false);
    let watch = format!(
        "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
         heartbeat_column = \"heartbeat_at\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
         owner_column = \"worker\"\nlock_file = \"{}\"\nconfirm = 1\n",
        sb.path("{id}.lock").display()
    );
    let cfg = sb.config(&db.url(), &watch);

    let o = check(&cfg, &["--explain"]);
    let out = stdout(&o);
    for raw in ['\u{200b}', '\u{feff}', '\u{200d}', '\u{2060}'] {
        assert!(
            !out.contains(raw),
            "U+{:04X} printed as it is:\n{out}",
            u32::from(raw)
        );
    }
    assert!(out.contains(&format!("{host}\\u{{200b}}")), "{out}");
    assert!(out.contains(&format!("\\u{{feff}}{host}")), "{out}");
    assert!(
        out.contains(&format!("{host}\\u{{200d}}\\u{{2060}}:77")),
        "{out}"
    );
    // Neither owner is this host's: another host's rows are never judged here.
    assert_eq!(out.matches(" remote ").count(), 2, "{out}");
}
