//! PostgreSQL driver (docs/design.md#commands): the third database, in this one file — its URL and where
//! its password comes from, its SQL ([`DIALECT`]), the [`Driver`], its values in and out,
//! how its failures read, what it says about a table and itself ([`Introspect`], and the
//! [`SURVEY`] of `selfheal init`), and how runs coordinate through it ([`Coordination`]).
//!
//! **Connecting.** `postgres://user@host:port/db` (also `postgresql://`), a unix socket
//! directory as `?host=/var/run/postgresql`; without a host, the first of the usual socket
//! directories that holds the server's socket. The synchronous `postgres` crate, TLS off
//! (`sslmode=require` is refused: reach the server over its socket or a trusted network).
//! The password, first found wins: the URL (configuration file only: the configuration
//! refuses one on the command line) → `password_file` → `$SELFHEAL_DB_PASSWORD` → the first
//! matching line of `$PGPASSFILE` or `~/.pgpass` (ignored, as psql ignores it, when group or
//! others may read it). It is never printed: messages show the URL without it and where it
//! came from ([`PgCreds::describe`]). Bounded waits: 5 s to connect, 10 s on a row lock
//! (`lock_timeout`; a write that runs out fails that row, not the run), TCP keepalives
//! after 30 s. (The crate has no read timeout: a server that takes the connection and then
//! never answers is waited for.)
//!
//! **Values.** Every value is bound (`$n`) and sent as text, which the server reads as the
//! type it inferred for the placeholder (an enum, `timestamp`, `numeric`, …): a value read
//! from a column goes back into it exactly. Cells come in binary and are decoded here: a
//! `timestamp` as a naive date-time, a `timestamptz` as UTC text with its offset (an
//! instant), `numeric` as its digits (unix seconds with a fraction in a time column). A
//! naive `timestamp` is placed in the session's `TimeZone` (what `now()` wrote it in)
//! unless `[database] timezone` says otherwise ([`Driver::naive_zone`]).
//!
//! **Writes.** A compare-and-set matches "rows matched", as on MySQL with
//! `CLIENT_FOUND_ROWS` (PostgreSQL counts every row it updated, changed or not). A group of
//! writes is one transaction whose row-lock waits end after 1 ms (`SET LOCAL lock_timeout`:
//! a locked row is [`Refusal::Busy`], never waited for); since an error aborts a whole
//! PostgreSQL transaction, the writes of a group after its first are each guarded by a
//! savepoint, so that a refused statement is undone alone, as MySQL undoes it.
//!
//! **Coordination.** The per-watch lock is `pg_try_advisory_lock(hashtextextended(name, 0))`
//! (`selfheal/SCHEMA/WATCH[@HOST]`), released by the server the moment the session ends;
//! who holds it comes from `pg_locks` joined with `pg_stat_activity`. A stopped run's
//! session is ended with `pg_terminate_backend`, only while the same server runs and only a
//! session named as selfheal's.
//!
//! Identifiers are validated and quoted with `"`: they are case-sensitive, as PostgreSQL's
//! quoted identifiers are (write them as the catalog shows them, usually lowercase).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::BytesMut;
use postgres::error::SqlState;
use postgres::types::{Format, FromSql, IsNull, Kind, ToSql, Type};
use postgres::{Client, NoTls};

use super::credentials::{Inputs, Setting, Source};
use super::driver::{Cell, Driver, Refusal, Row};
use super::sql::{self, Dialect, Placeholder, SchemaSql, Statement};
use super::survey::SurveySql;
use super::table::SqlStore;
use super::types::{Column, ColumnType};
use super::{AdvisoryLockHolder, Coordination, Introspect, ScanPlan, Schema, Session, SqlValue};
use crate::config::{Database, DbUrl, Ident, Watch, unusable_postgres_url, with_host};
use crate::error::{DbCause, DbErrorKind, Error, Result};
use crate::zone::Zone;

/// PostgreSQL's SQL: `"` quotes, `$n` placeholders, `IS NOT DISTINCT FROM` for null-safe
/// equality, the session's local time to the second as "now" (what a `timestamp`, a
/// `timestamptz` and a text column each read back as the session's now), the schema from
/// `pg_catalog`. No index hints: the planner takes none.
pub const DIALECT: Dialect = Dialect {
    quote: '"',
    placeholder: Placeholder::Dollar,
    null_safe_eq: "IS NOT DISTINCT FROM",
    now: "date_trunc('second', LOCALTIMESTAMP)",
    epoch_now: "FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP))::bigint",
    zone_now: (
        "date_trunc('second', CURRENT_TIMESTAMP AT TIME ZONE 'UTC') + ",
        " * INTERVAL '1 second'",
    ),
    zone_offset: SqlValue::Int,
    now_plus: (
        "date_trunc('second', LOCALTIMESTAMP) + ",
        " * INTERVAL '1 second'",
    ),
    force_index: None,
    force_primary: "",
    enforces_types: true,
    epoch_of: None,
    text_literal: pg_literal,
    clock: "SELECT date_trunc('second', LOCALTIMESTAMP), \
            FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP))::bigint",
    schema: SchemaSql {
        columns: |w| columns_of(&w.table),
        column: column_row,
        indexes: Some(|w| Statement {
            sql: "SELECT ic.relname, k.n, a.attname, i.indisprimary::int \
                  FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid \
                  CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
                  LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                  WHERE i.indrelid = to_regclass($1) ORDER BY ic.relname, k.n"
                .into(),
            params: vec![regclass(&w.table)],
        }),
        current_database: Some("SELECT current_database()"),
    },
    // `db_lock` on PostgreSQL: advisory locks (docs/design.md#named-lock).
    named_locks: Some(sql::NamedLockSql {
        holders: named_holders,
        sessions: named_sessions,
    }),
};

/// The advisory lock key of a `db_lock` name, as SQL over the parameter `$n`: a name that
/// is a whole number is the `bigint` key itself (`pg_advisory_lock(42)`), any other text is
/// keyed as `hashtextextended(text, 0)`, the usual way an application locks a name.
fn named_key(name: &str, n: usize) -> (String, SqlValue) {
    match name.trim().parse::<i64>() {
        Ok(k) if name.trim() == name => (format!("${n}::bigint"), SqlValue::Int(k)),
        _ => (
            format!("hashtextextended(${n}::text, 0)"),
            SqlValue::Text(name.to_string()),
        ),
    }
}

/// The condition on `pg_locks l` that it is a granted advisory lock of this database on
/// the `bigint` key `key` (SQL): such a key is held as two halves, `classid` the high 32
/// bits, `objid` the low, `objsubid` 1. The watch's own lock and a job's `db_lock` alike.
fn advisory_lock_on(key: &str) -> String {
    format!(
        "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND l.classid::bigint = ({key} >> 32) & 4294967295 \
         AND l.objid::bigint = ({key}) & 4294967295"
    )
}

/// `SELECT (the pid holding the first name's key), …`: one row, a cell per name, NULL where
/// nobody holds it ([`advisory_lock_on`]).
fn named_holders(_d: &Dialect, names: &[String]) -> Statement {
    let mut params = Vec::with_capacity(names.len());
    let cells: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (key, value) = named_key(name, i + 1);
            params.push(value);
            format!(
                "(SELECT l.pid FROM pg_locks l WHERE {} LIMIT 1)",
                advisory_lock_on(&key)
            )
        })
        .collect();
    Statement {
        sql: format!("SELECT {}", cells.join(", ")),
        params,
    }
}

/// The sessions holding named locks, as `pg_stat_activity` shows them to this account (all
/// of them with `pg_read_all_stats`): pid, user, where from (address or `local`, with the
/// application name), and seconds in its state.
fn named_sessions(_d: &Dialect, ids: &[u64]) -> Statement {
    let list: Vec<String> = (1..=ids.len()).map(|n| format!("${n}::int")).collect();
    Statement {
        sql: format!(
            "SELECT pid, usename, COALESCE(host(client_addr), 'local') || \
             CASE WHEN COALESCE(application_name, '') <> '' \
             THEN ' ' || application_name ELSE '' END, \
             EXTRACT(EPOCH FROM now() - state_change)::bigint \
             FROM pg_stat_activity WHERE pid IN ({})",
            list.join(", ")
        ),
        params: ids.iter().map(|i| SqlValue::UInt(*i)).collect(),
    }
}

/// A string literal as PostgreSQL reads it (`standard_conforming_strings`, the default
/// since 9.1): quotes doubled; with a control character, an `E'…'` literal with escapes
/// (the statement stays on one line). For SQL shown to a person, never run.
fn pg_literal(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return format!("'{}'", s.replace('\'', "''"));
    }
    let mut out = String::from("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A table as `to_regclass` reads it (quoted, so its case is kept), bound.
fn regclass(t: &Ident) -> SqlValue {
    SqlValue::Text(t.quoted('"'))
}

/// One row per column of a table, in order: name, `format_type`, the base type's name and
/// kind (`e` for an enum), its declared length (`varchar(n)`, `char(n)`), its enum labels
/// (a JSON array).
fn columns_of(t: &Ident) -> Statement {
    Statement {
        sql: "SELECT a.attname, format_type(a.atttypid, a.atttypmod), bt.typname, \
              bt.typtype::text, \
              CASE WHEN bt.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 \
                   THEN a.atttypmod - 4 END, \
              (SELECT json_agg(e.enumlabel ORDER BY e.enumsortorder)::text \
                 FROM pg_enum e WHERE e.enumtypid = bt.oid) \
              FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
              JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype \
                                               ELSE t.oid END \
              WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
              ORDER BY a.attnum"
            .into(),
        params: vec![regclass(t)],
    }
}

/// A row of [`columns_of`]: the column as the catalog describes it (the primary key is
/// read from the indexes).
fn column_row(r: &mut dyn Row) -> (String, Column, u32) {
    let name = r.cell().value.to_string();
    let declared = r.cell().value.to_string();
    let base = r.cell().value.to_string();
    let kind = r.cell().value.to_string();
    let length = match r.cell().value {
        SqlValue::Null => None,
        n => usize::try_from(n.into_count()).ok(),
    };
    let labels = r.cell().value.into_text();
    (
        name,
        pg_column(&declared, &base, &kind, length, labels.as_deref()),
        0,
    )
}

/// A column from its catalog entry: `declared` as `format_type` writes it, `base` the
/// (domain's base) type's name, `kind` its `typtype`, `labels` an enum's labels as JSON.
fn pg_column(
    declared: &str,
    base: &str,
    kind: &str,
    length: Option<usize>,
    labels: Option<&str>,
) -> Column {
    let ty = if kind == "e" {
        ColumnType::Enum {
            members: labels
                .and_then(|l| serde_json::from_str(l).ok())
                .unwrap_or_default(),
        }
    } else {
        match base {
            "timestamp" => ColumnType::DateTime,
            "timestamptz" => ColumnType::Timestamp,
            "date" => ColumnType::Date,
            "time" | "timetz" | "interval" => ColumnType::TimeOfDay,
            "int2" | "int4" | "int8" | "oid" => ColumnType::Integer,
            "numeric" => ColumnType::Decimal,
            "float4" | "float8" => ColumnType::Float,
            "varchar" | "bpchar" | "text" | "name" | "citext" => ColumnType::Text,
            "bytea" => ColumnType::Binary,
            _ => ColumnType::Other,
        }
    };
    Column {
        declared: declared.to_ascii_lowercase(),
        ty,
        length,
        enforced: true,
        on_update_now: false,
    }
}

// ---------------------------------------------------------------------------------------
// The URL and the credentials

/// The socket directories a PostgreSQL server of the usual distributions listens in
/// (Debian/Ubuntu, the same through the /run link, RHEL/source builds), the first holding
/// the server's socket taken where the URL names no host. A socket in one of them is what
/// `~/.pgpass` calls `localhost`.
pub const DEFAULT_SOCKET_DIRS: [&str; 3] = ["/var/run/postgresql", "/run/postgresql", "/tmp"];

/// The port of a URL that names none.
const DEFAULT_PORT: u16 = 5432;

/// Where the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgHost {
    /// A unix socket directory (`.s.PGSQL.PORT` in it).
    Socket(PathBuf),
    /// A host name or address, over TCP.
    Tcp(String),
}

/// What a PostgreSQL URL says, its options checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PgUrl {
    user: Option<String>,
    password: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    dbname: Option<String>,
    application_name: Option<String>,
    connect_timeout: Option<Duration>,
    options: Option<String>,
}

/// `%XX` escapes decoded (a URL's user, password and database name).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b.get(i), hex) {
            (Some(b'%'), Some(x)) => {
                out.push(x);
                i += 3;
            }
            (Some(c), _) => {
                out.push(*c);
                i += 1;
            }
            (None, _) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a `postgres://` URL and checks its options: `Err` in words a person reads.
fn parse_url(url: &str) -> std::result::Result<PgUrl, String> {
    let (filled, host_given) = with_host(url);
    let u = url::Url::parse(&filled).map_err(|e| e.to_string())?;
    let mut p = PgUrl {
        user: Some(percent_decoded(u.username())).filter(|s| !s.is_empty()),
        password: u.password().map(percent_decoded),
        host: match u.host() {
            Some(url::Host::Ipv6(a)) if host_given => Some(a.to_string()),
            Some(h) if host_given => Some(percent_decoded(&h.to_string())),
            _ => None,
        },
        port: u.port(),
        dbname: None,
        ..PgUrl::default()
    };
    let path = percent_decoded(u.path().trim_start_matches('/'));
    if path.contains('/') {
        return Err(format!("a database name has no '/': {path:?}"));
    }
    p.dbname = Some(path).filter(|s| !s.is_empty());
    for (k, v) in u.query_pairs() {
        let v = v.into_owned();
        match &*k {
            "host" if v.contains(',') => {
                return Err("one host only: selfheal connects to one server".into());
            }
            "host" => p.host = Some(v),
            "port" => {
                p.port = Some(
                    v.parse()
                        .map_err(|_| format!("port={v}: expected a port number"))?,
                );
            }
            "user" => p.user = Some(v),
            "dbname" => p.dbname = Some(v),
            "application_name" => p.application_name = Some(v),
            "options" => p.options = Some(v),
            "connect_timeout" => {
                let s: u64 = v
                    .parse()
                    .map_err(|_| format!("connect_timeout={v}: expected whole seconds"))?;
                p.connect_timeout = Some(Duration::from_secs(s.max(1)));
            }
            "sslmode" => match v.as_str() {
                "disable" | "allow" | "prefer" => {}
                _ => {
                    return Err(format!(
                        "sslmode={v}: selfheal talks to PostgreSQL without TLS; reach the \
                         server over its unix socket or a trusted network"
                    ));
                }
            },
            "password" => {
                return Err("a password in the URL's options: use password_file, \
                            $SELFHEAL_DB_PASSWORD or ~/.pgpass"
                    .into());
            }
            _ => return Err(format!("Unknown URL parameter `{k}'")),
        }
    }
    Ok(p)
}

/// The resolved connection settings of a PostgreSQL database: everything but the password
/// is shown ([`PgCreds::describe`]); the password never is, not even in `Debug`.
#[derive(Clone)]
pub struct PgCreds {
    pub user: Setting<String>,
    password: Option<Setting<String>>,
    pub host: Setting<PgHost>,
    pub port: Setting<u16>,
    pub dbname: Setting<String>,
    application_name: String,
    connect_timeout: Duration,
    options: Option<String>,
    /// What an operator should know (a `.pgpass` skipped), said by `doctor`.
    pub notes: Vec<String>,
}

impl std::fmt::Debug for PgCreds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgCreds({})", self.describe())
    }
}

impl PgCreds {
    /// Where the password came from, without the password.
    pub fn password_source(&self) -> Option<&Source> {
        self.password.as_ref().map(|p| &p.source)
    }

    /// `user app (from the URL), a password from …, socket /var/run/postgresql/.s.PGSQL.5432
    /// (from the URL), database appdb`: everything but the password.
    pub fn describe(&self) -> String {
        let pass = match &self.password {
            Some(p) => format!("a password from {}", p.source),
            None => "no password".into(),
        };
        let via = match &self.host.value {
            PgHost::Socket(d) => format!(
                "socket {} (from {})",
                socket_path(d, self.port.value).display(),
                self.host.source
            ),
            PgHost::Tcp(h) => format!(
                "tcp {h}:{} (host from {}, port from {})",
                self.port.value, self.host.source, self.port.source
            ),
        };
        format!(
            "user {} (from {}), {pass}, {via}, database {}",
            self.user.value, self.user.source, self.dbname.value
        )
    }

    /// The crate's connection settings: the resolved ones, TLS off.
    fn config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.user(&self.user.value)
            .dbname(&self.dbname.value)
            .port(self.port.value)
            .application_name(&self.application_name)
            .ssl_mode(postgres::config::SslMode::Disable)
            .connect_timeout(self.connect_timeout)
            .keepalives_idle(Duration::from_secs(30))
            .tcp_user_timeout(Duration::from_secs(60));
        match &self.host.value {
            PgHost::Socket(d) => c.host_path(d),
            PgHost::Tcp(h) => c.host(h),
        };
        if let Some(p) = &self.password {
            c.password(p.value.as_bytes());
        }
        if let Some(o) = &self.options {
            c.options(o);
        }
        c
    }
}

/// `DIR/.s.PGSQL.PORT`: the server's socket in a socket directory.
fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// The file of `.pgpass` lines: `$PGPASSFILE`, else `~/.pgpass`.
fn pgpass_file(inputs: &Inputs, env: Option<PathBuf>) -> Option<PathBuf> {
    env.filter(|p| !p.as_os_str().is_empty())
        .or_else(|| inputs.home.as_ref().map(|h| h.join(".pgpass")))
}

/// One `.pgpass` line's fields (`host:port:database:user:password`, `\:` and `\\`
/// escaped); `None` for a comment, a blank line or one of fewer than five fields.
fn pgpass_fields(line: &str) -> Option<[String; 5]> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let mut fields: Vec<String> = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(n);
                }
            }
            // The fifth field (the password) takes every `:` after it.
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    <[String; 5]>::try_from(fields).ok()
}

/// The password `.pgpass` holds for this connection: the first line whose host, port,
/// database and user match (`*` matches anything; a socket in a usual directory is also
/// `localhost`, as libpq reads it), with where it is. `notes` says why a file was skipped.
fn pgpass_password(
    file: &Path,
    host: &PgHost,
    port: u16,
    dbname: &str,
    user: &str,
    notes: &mut Vec<String>,
) -> Option<Setting<String>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.mode() & 0o077 != 0 {
        notes.push(format!(
            "{} is not used: group or others may read it (mode {:04o}), and psql ignores such \
             a file too; chmod 600 {0}",
            file.display(),
            meta.mode() & 0o7777
        ));
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let hosts: Vec<String> = match host {
        PgHost::Tcp(h) => vec![h.clone()],
        PgHost::Socket(d) => {
            let mut v = vec![d.display().to_string()];
            if DEFAULT_SOCKET_DIRS.iter().any(|x| Path::new(x) == d) {
                v.push("localhost".into());
            }
            v
        }
    };
    let port = port.to_string();
    for (n, line) in text.lines().enumerate() {
        let Some([h, p, d, u, pw]) = pgpass_fields(line) else {
            continue;
        };
        let is = |field: &str, value: &str| field == "*" || field == value;
        if (h == "*" || hosts.contains(&h)) && is(&p, &port) && is(&d, dbname) && is(&u, user) {
            return Some(Setting {
                value: pw,
                source: Source::OptionFile {
                    file: file.to_path_buf(),
                    line: n + 1,
                },
            });
        }
    }
    None
}

/// Resolves the settings of `db` (a PostgreSQL database) by the precedence in the module
/// header. `pgpassfile` is `$PGPASSFILE`.
pub fn resolve(db: &Database, inputs: &Inputs, pgpassfile: Option<PathBuf>) -> Result<PgCreds> {
    let DbUrl::Postgres(raw) = &db.url else {
        return Err(Error::Usage("not a PostgreSQL URL".into()));
    };
    let p = parse_url(raw).map_err(|why| db.url_error(unusable_postgres_url(raw, &why)))?;
    let url = |v: String| Setting {
        value: v,
        source: Source::Url,
    };
    let Some(user) = p.user.clone().map(url).or_else(|| {
        inputs.os_user.clone().map(|u| Setting {
            value: u,
            source: Source::OsLogin,
        })
    }) else {
        return Err(db.url_error(
            "no user: name one in the URL (postgres://USER@host/database)".to_string(),
        ));
    };
    let dbname = match &p.dbname {
        Some(d) => url(d.clone()),
        // libpq's default: the database named as the user.
        None => Setting {
            value: user.value.clone(),
            source: Source::Default,
        },
    };
    let port = match p.port {
        Some(n) => Setting {
            value: n,
            source: Source::Url,
        },
        None => Setting {
            value: DEFAULT_PORT,
            source: Source::Default,
        },
    };
    let host = match &p.host {
        Some(h) if h.starts_with('/') => Setting {
            value: PgHost::Socket(PathBuf::from(h)),
            source: Source::Url,
        },
        Some(h) => Setting {
            value: PgHost::Tcp(h.clone()),
            source: Source::Url,
        },
        None => Setting {
            value: PgHost::Socket(PathBuf::from(
                DEFAULT_SOCKET_DIRS
                    .iter()
                    .find(|d| socket_path(Path::new(d), port.value).exists())
                    .unwrap_or(&DEFAULT_SOCKET_DIRS[0]),
            )),
            source: Source::Default,
        },
    };
    let mut notes = Vec::new();
    let mut password = p.password.clone().map(url);
    if password.is_none()
        && let Some(f) = &db.password_file
    {
        let text = std::fs::read_to_string(f)
            .map_err(|e| super::credentials::cannot_read("database.password_file", f, e))?;
        password = Some(Setting {
            value: text.lines().next().unwrap_or("").to_string(),
            source: Source::PasswordFile(f.clone()),
        });
    }
    if password.is_none()
        && let Some(pw) = &inputs.env_password
    {
        password = Some(Setting {
            value: pw.clone(),
            source: Source::Env,
        });
    }
    if password.is_none()
        && let Some(f) = pgpass_file(inputs, pgpassfile)
    {
        password = pgpass_password(
            &f,
            &host.value,
            port.value,
            &dbname.value,
            &user.value,
            &mut notes,
        );
    }
    Ok(PgCreds {
        user,
        password,
        host,
        port,
        dbname,
        application_name: p.application_name.unwrap_or_else(|| APPLICATION.into()),
        connect_timeout: p.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
        options: p.options,
        notes,
    })
}

// ---------------------------------------------------------------------------------------
// The driver

/// The `application_name` selfheal's sessions carry (unless the URL names another): how
/// `pg_stat_activity` tells them, and how a stopped run's session is recognised.
const APPLICATION: &str = "selfheal";
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a statement waits on a row lock, outside groups of writes.
const LOCK_WAIT_S: u32 = 10;
/// Statements whose value types are remembered per connection.
const STATEMENT_CACHE: usize = 256;

/// A connection to a PostgreSQL server.
pub struct Postgres {
    client: Client,
    /// The URL without any password, for messages.
    label: String,
    creds: PgCreds,
    /// The session's `TimeZone` as a zone, where it names one chrono knows.
    zone: Option<crate::zone::Zone>,
    /// Inside a group of writes ([`Driver::begin_writes`]).
    in_group: bool,
    /// The group has written a row: a failed statement must undo only itself, to the
    /// savepoint taken after the last write.
    group_wrote: bool,
    /// By statement: the values declared text (see [`Postgres::declared`]).
    text_params: HashMap<String, Vec<usize>>,
}

/// A query that failed: in the driver, or in what was done with a row.
enum Failed {
    Driver(postgres::Error),
    Each(Error),
}

impl Postgres {
    fn connect(db: &Database, read_only: bool) -> Result<Self> {
        let label = db.url.label();
        let pgpassfile = std::env::var_os("PGPASSFILE").map(PathBuf::from);
        let creds = resolve(db, &Inputs::from_env(), pgpassfile)?;
        let mut client = creds.config().connect(NoTls).map_err(|e| {
            // What was skipped on the way (a .pgpass others may read) is part of the fix.
            let fix = match (connect_fix(&creds, &e), creds.notes.is_empty()) {
                (fix, true) => fix,
                (Some(fix), false) => Some(format!("{}; {fix}", creds.notes.join("; "))),
                (None, false) => Some(creds.notes.join("; ")),
            };
            Error::database(
                format!("cannot connect to {label} ({})", creds.describe()),
                e,
            )
            .with_fix(fix)
        })?;
        let mut setup = format!("SET lock_timeout = '{LOCK_WAIT_S}s'; ");
        if read_only {
            // A promise that nothing is written, kept by the server.
            setup.push_str("SET default_transaction_read_only = on; ");
        }
        // The session's zone in the same round trip (the simple protocol: text values).
        setup.push_str(
            "SELECT current_setting('TimeZone'), EXTRACT(TIMEZONE FROM CURRENT_TIMESTAMP)::int",
        );
        let answer = client
            .simple_query(&setup)
            .map_err(|e| Error::database(format!("setting up the session on {label}"), e))?;
        let zone = answer.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                let offset = r.get(1).and_then(|o| o.parse().ok()).unwrap_or(0);
                zone_of(r.get(0).unwrap_or_default(), offset)
            }
            _ => None,
        });
        Ok(Postgres {
            client,
            label,
            creds,
            zone,
            in_group: false,
            group_wrote: false,
            text_params: HashMap::new(),
        })
    }

    fn err(&self, what: &str, e: impl DbCause) -> Error {
        Error::database(self.context(what), e)
    }

    /// The types declared for `st`'s values: none — the server infers each from the
    /// statement (an enum, a `timestamp`, …) —, but text for one whose type the statement
    /// does not tell (`CASE WHEN $1 IS NULL …`), as the server said once per statement.
    fn declared(&self, st: &Statement) -> Vec<Type> {
        let text = self.text_params.get(&st.sql);
        (1..=st.params.len())
            .map(|n| match text {
                Some(t) if t.contains(&n) => Type::TEXT,
                _ => Type::new("unspecified".into(), 0, Kind::Pseudo, "pg_catalog".into()),
            })
            .collect()
    }

    /// After `e`: whether it was the server asking for the type of a value of `st` (42P18,
    /// "could not determine data type of parameter $N"), now learnt: the statement is
    /// worth sending again. (Inside a group, the failed statement is undone first.)
    fn learnt_a_type(&mut self, st: &Statement, e: &postgres::Error) -> bool {
        if e.code() != Some(&SqlState::INDETERMINATE_DATATYPE) {
            return false;
        }
        let Some(n) = e
            .as_db_error()
            .and_then(|d| d.message().rsplit('$').next()?.trim().parse::<usize>().ok())
            .filter(|n| (1..=st.params.len()).contains(n))
        else {
            return false;
        };
        let known = self.text_params.entry(st.sql.clone()).or_default();
        if known.contains(&n) {
            return false;
        }
        known.push(n);
        if self.text_params.len() > STATEMENT_CACHE {
            self.text_params.clear();
        }
        !self.in_group || self.undo_statement().is_ok()
    }

    /// Runs `st`, each row to `each`, rows read off the socket one at a time. One round
    /// trip: the statement is parsed, bound and run in one message (unnamed).
    fn rows(
        &mut self,
        st: &Statement,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> std::result::Result<(), Failed> {
        let binds: Vec<Bind<'_>> = st.params.iter().map(Bind).collect();
        let types = self.declared(st);
        let params = binds.iter().map(|b| b as &dyn ToSql).zip(types);
        let e = match self.client.query_typed_raw(&st.sql, params) {
            Ok(mut it) => return stream(&mut it, each),
            Err(e) => e,
        };
        // Sent again, once per value the server could not type.
        if self.learnt_a_type(st, &e) {
            return self.rows(st, each);
        }
        Err(Failed::Driver(e))
    }

    /// The first row of `sql` (no values bound), every cell (`None`: no row).
    fn first(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        what: &str,
    ) -> Result<Option<Vec<SqlValue>>> {
        let st = Statement {
            sql: sql.to_string(),
            params: params.to_vec(),
        };
        let mut first = None;
        self.query(&st, what, &mut |r| {
            if first.is_none() {
                first = Some((0..r.columns()).map(|_| r.cell().value).collect());
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// The first cell of the first row of `sql`.
    fn one(&mut self, sql: &str, params: &[SqlValue], what: &str) -> Result<SqlValue> {
        Ok(self
            .first(sql, params, what)?
            .and_then(|c| c.into_iter().next())
            .unwrap_or(SqlValue::Null))
    }

    /// A statement of a group went wrong: undoes it alone — back to the savepoint after the
    /// group's last write, or, before any, the whole (so far empty) transaction, begun
    /// again — so that the group goes on, as MySQL undoes a refused statement alone.
    fn undo_statement(&mut self) -> std::result::Result<(), postgres::Error> {
        if self.group_wrote {
            self.client.batch_execute("ROLLBACK TO SAVEPOINT selfheal")
        } else {
            self.client
                .batch_execute("ROLLBACK; BEGIN; SET LOCAL lock_timeout = 1")
        }
    }

    /// A statement of a group wrote rows: what comes next can be undone back to here.
    fn mark_written(&mut self) -> std::result::Result<(), postgres::Error> {
        let sql = if self.group_wrote {
            "RELEASE SAVEPOINT selfheal; SAVEPOINT selfheal"
        } else {
            "SAVEPOINT selfheal"
        };
        self.client.batch_execute(sql)?;
        self.group_wrote = true;
        Ok(())
    }

    /// Runs a write: the rows it matched, or the driver's error as it is.
    fn write(&mut self, st: &Statement) -> std::result::Result<u64, postgres::Error> {
        let binds: Vec<Bind<'_>> = st.params.iter().map(Bind).collect();
        loop {
            let params: Vec<(&(dyn ToSql + Sync), Type)> = binds
                .iter()
                .map(|b| b as &(dyn ToSql + Sync))
                .zip(self.declared(st))
                .collect();
            match self.client.execute_typed(&st.sql, &params) {
                Err(e) if self.learnt_a_type(st, &e) => {}
                done => return done,
            }
        }
    }

    /// What a write's error means (see the module header): inside a group a locked row is
    /// `Busy` and a deadlock fails the run; the server refusing every write of the run
    /// (read-only, no privilege) fails the run once; anything else the server refused is
    /// this statement's alone; a broken connection fails the run.
    fn refusal(&mut self, w: &Watch, e: postgres::Error) -> Refusal {
        let Some(db) = e.as_db_error() else {
            return Refusal::Run(self.err("writing", e));
        };
        let code = db.code().clone();
        if self.in_group && code == SqlState::T_R_DEADLOCK_DETECTED {
            self.in_group = false;
            self.group_wrote = false;
            let _ = self.client.batch_execute("ROLLBACK");
            return Refusal::Run(self.err("writing", e));
        }
        if self.in_group && self.undo_statement().is_err() {
            self.in_group = false;
            return Refusal::Run(self.err("writing", e));
        }
        match kind_of(&code) {
            _ if self.in_group && code == SqlState::LOCK_NOT_AVAILABLE => Refusal::Busy,
            DbErrorKind::ReadOnly | DbErrorKind::AccessDenied => {
                Refusal::Run(self.write_refused(w, e))
            }
            DbErrorKind::Unreachable => Refusal::Run(self.err("writing", e)),
            _ => Refusal::Statement(Failure(e).to_string()),
        }
    }

    /// A write the server refuses as it will refuse every write of the run, with the GRANT
    /// that lets this very role write where it lacks the privilege.
    fn write_refused(&mut self, w: &Watch, e: postgres::Error) -> Error {
        let denied = e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE);
        let err = self.err(&format!("writing {}", w.table), e);
        if !denied {
            return err;
        }
        let who = self
            .one("SELECT current_user", &[], "reading the role")
            .ok()
            .and_then(SqlValue::into_text);
        err.with_fix(who.map(|role| {
            format!(
                "let the role write the table (as its owner or a superuser): GRANT SELECT, \
                 UPDATE ON {} TO \"{}\"",
                w.table.quoted('"'),
                role.replace('"', "\"\"")
            )
        }))
    }
}

/// Each row of `it` to `each`, as it comes off the socket.
fn stream(
    it: &mut postgres::RowIter<'_>,
    each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
) -> std::result::Result<(), Failed> {
    loop {
        match postgres::fallible_iterator::FallibleIterator::next(it) {
            Ok(Some(row)) => each(&mut Cells { row, at: 0 }).map_err(Failed::Each)?,
            Ok(None) => return Ok(()),
            Err(e) => return Err(Failed::Driver(e)),
        }
    }
}

/// The zone the session's `TimeZone` names (`Europe/Berlin`, `Etc/UTC`), else the fixed
/// zone of its offset now where it is whole hours (`Etc/GMT-3` is UTC+3), else none
/// (naive times then read as UTC; `doctor` says to set `[database] timezone`).
fn zone_of(name: &str, offset_s: i32) -> Option<Zone> {
    if let Some(tz) = Zone::named(name) {
        return Some(tz);
    }
    if name.eq_ignore_ascii_case("UTC") || name.eq_ignore_ascii_case("GMT") {
        return Some(Zone::utc());
    }
    if offset_s % 3600 != 0 {
        return None;
    }
    let hours = -offset_s / 3600;
    let fixed = if hours == 0 {
        "Etc/GMT".to_string()
    } else {
        format!("Etc/GMT{hours:+}")
    };
    Zone::named(&fixed)
}

impl Driver for Postgres {
    type Failure = postgres::Error;

    /// The URL's options, and what else the configuration says for this database.
    fn vet(db: &Database) -> std::result::Result<(), String> {
        let DbUrl::Postgres(url) = &db.url else {
            return Err("not a PostgreSQL URL".into());
        };
        parse_url(url).map_err(|why| unusable_postgres_url(url, &why))?;
        if db.defaults_file.is_some() {
            return Err(
                "database.defaults_file is a MySQL option file; a PostgreSQL password comes \
                 from password_file, $SELFHEAL_DB_PASSWORD or ~/.pgpass"
                    .into(),
            );
        }
        Ok(())
    }

    fn open(db: &Database, read_only: bool) -> Result<Self> {
        Postgres::connect(db, read_only)
    }

    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn context(&self, what: &str) -> String {
        format!("{what} on {}", self.label)
    }

    fn naive_zone(&self) -> Option<Zone> {
        self.zone
    }

    fn query(
        &mut self,
        st: &Statement,
        what: &str,
        each: &mut dyn FnMut(&mut dyn Row) -> Result<()>,
    ) -> Result<()> {
        match self.rows(st, each) {
            Ok(()) => Ok(()),
            Err(Failed::Each(e)) => Err(e),
            Err(Failed::Driver(e)) => {
                // A failed statement aborts a transaction: a group goes on without it.
                if self.in_group && self.undo_statement().is_err() {
                    self.in_group = false;
                }
                Err(self.failure(what, e))
            }
        }
    }

    fn execute(&mut self, st: &Statement, w: &Watch) -> std::result::Result<u64, Refusal> {
        match self.write(st) {
            Ok(n) if self.in_group && n > 0 => match self.mark_written() {
                Ok(()) => Ok(n),
                Err(e) => Err(Refusal::Run(self.err("writing", e))),
            },
            Ok(n) => Ok(n),
            Err(e) => Err(self.refusal(w, e)),
        }
    }

    fn groups_as_one_statement(&self) -> bool {
        true
    }

    fn begin_writes(&mut self) -> Result<bool> {
        self.client
            .batch_execute("BEGIN; SET LOCAL lock_timeout = 1")
            .map_err(|e| self.err("beginning the writes", e))?;
        self.in_group = true;
        self.group_wrote = false;
        Ok(true)
    }

    fn in_writes(&self) -> bool {
        self.in_group
    }

    fn undo_writes(&mut self) -> Result<()> {
        self.group_wrote = false;
        self.client
            .batch_execute("ROLLBACK; BEGIN; SET LOCAL lock_timeout = 1")
            .map_err(|e| self.err("writing", e))
    }

    fn commit_writes(&mut self) -> Result<()> {
        self.in_group = false;
        self.group_wrote = false;
        self.client.batch_execute("COMMIT").map_err(|e| {
            // Whatever is left open is rolled back, so that nothing half-done stays.
            let _ = self.client.batch_execute("ROLLBACK");
            self.err("committing the writes", e)
        })
    }
}

// ---------------------------------------------------------------------------------------
// Values in and out

/// A bound value, sent as text: the server reads it as the placeholder's inferred type, so
/// a value read from a column (an enum member, a `timestamp`, a `numeric`) goes back into
/// it exactly.
#[derive(Debug)]
struct Bind<'a>(&'a SqlValue);

impl ToSql for Bind<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let text = match self.0 {
            SqlValue::Null => return Ok(IsNull::Yes),
            // Bytes are read from a bytea only: its text form, whatever was declared.
            SqlValue::Bytes(b) => {
                let mut hex = String::with_capacity(2 + 2 * b.len());
                hex.push_str("\\x");
                for x in b {
                    let _ = write!(hex, "{x:02x}");
                }
                hex
            }
            SqlValue::Float(f) if f.is_infinite() => {
                if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            }
            other => other.to_string(),
        };
        out.extend_from_slice(text.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    postgres::types::to_sql_checked!();
}

/// A cell as the server sent it (binary), decoded ([`decode`]).
struct Raw(Cell);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(decode(ty, raw)))
    }

    fn from_sql_null(
        _: &Type,
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Cell {
            value: SqlValue::Null,
            ty: None,
        }))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// 2000-01-01 00:00:00 UTC, PostgreSQL's epoch, in unix seconds.
const PG_EPOCH: i64 = 946_684_800;

fn be<const N: usize>(raw: &[u8]) -> Option<[u8; N]> {
    raw.get(..N)?.try_into().ok()
}

/// A binary `timestamp`: microseconds since 2000-01-01 (`None` for ±infinity).
fn pg_datetime(raw: &[u8]) -> Option<chrono::NaiveDateTime> {
    let micros = i64::from_be_bytes(be(raw)?);
    if micros == i64::MAX || micros == i64::MIN {
        return None;
    }
    let secs = micros.div_euclid(1_000_000).checked_add(PG_EPOCH)?;
    let nanos = u32::try_from(micros.rem_euclid(1_000_000) * 1_000).ok()?;
    chrono::DateTime::from_timestamp(secs, nanos).map(|d| d.naive_utc())
}

/// Text for a value whose type selfheal does not read: its type's name, never bytes that
/// only look like text.
fn opaque(ty: &Type, raw: &[u8]) -> SqlValue {
    match std::str::from_utf8(raw) {
        Ok(s)
            if !s
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\t')) =>
        {
            SqlValue::Text(s.to_string())
        }
        _ => SqlValue::Text(format!("({} value)", ty.name())),
    }
}

/// A binary cell as the store's value, with the column type where it tells how to read a
/// time: a `timestamp` is naive, a `timestamptz` an instant (UTC text with its offset),
/// a `numeric` its digits.
fn decode(ty: &Type, raw: &[u8]) -> Cell {
    let cell = |value, ty| Cell { value, ty };
    let text = |raw: &[u8]| SqlValue::Text(String::from_utf8_lossy(raw).into_owned());
    if let Kind::Domain(base) = ty.kind() {
        return decode(base, raw);
    }
    if let Kind::Enum(_) = ty.kind() {
        return cell(text(raw), None);
    }
    let int = |v: Option<i64>| v.map_or(SqlValue::Null, SqlValue::Int);
    let value = match *ty {
        Type::BOOL => SqlValue::Text(
            if raw.first() == Some(&1) {
                "true"
            } else {
                "false"
            }
            .into(),
        ),
        Type::INT2 => int(be(raw).map(|b| i64::from(i16::from_be_bytes(b)))),
        Type::INT4 => int(be(raw).map(|b| i64::from(i32::from_be_bytes(b)))),
        Type::INT8 => int(be(raw).map(i64::from_be_bytes)),
        Type::OID => int(be(raw).map(|b| i64::from(u32::from_be_bytes(b)))),
        Type::FLOAT4 => be(raw).map_or(SqlValue::Null, |b| {
            SqlValue::Float(f64::from(f32::from_be_bytes(b)))
        }),
        Type::FLOAT8 => be(raw).map_or(SqlValue::Null, |b| SqlValue::Float(f64::from_be_bytes(b))),
        Type::NUMERIC => {
            return cell(SqlValue::Text(numeric_text(raw)), Some(ColumnType::Decimal));
        }
        Type::TIMESTAMP => {
            return cell(
                pg_datetime(raw).map_or_else(|| infinity(raw), SqlValue::DateTime),
                Some(ColumnType::DateTime),
            );
        }
        Type::TIMESTAMPTZ => {
            let v = pg_datetime(raw).map_or_else(
                || infinity(raw),
                |d| SqlValue::Text(format!("{}+00:00", SqlValue::DateTime(d))),
            );
            return cell(v, Some(ColumnType::Timestamp));
        }
        Type::DATE => be(raw).map_or(SqlValue::Null, |b| {
            let days = i64::from(i32::from_be_bytes(b));
            chrono::DateTime::from_timestamp(PG_EPOCH + days * 86_400, 0).map_or_else(
                || SqlValue::Text("infinity".into()),
                |d| SqlValue::Text(d.format("%Y-%m-%d").to_string()),
            )
        }),
        Type::TIME => be(raw).map_or(SqlValue::Null, |b| {
            let us = i64::from_be_bytes(b);
            let s = us / 1_000_000;
            SqlValue::Text(format!(
                "{:02}:{:02}:{:02}",
                s / 3600,
                s % 3600 / 60,
                s % 60
            ))
        }),
        Type::UUID => match be::<16>(raw) {
            Some(b) => {
                let h = b.iter().fold(String::new(), |mut h, x| {
                    let _ = write!(h, "{x:02x}");
                    h
                });
                let part = |a: usize, z: usize| h.get(a..z).unwrap_or_default().to_string();
                SqlValue::Text(format!(
                    "{}-{}-{}-{}-{}",
                    part(0, 8),
                    part(8, 12),
                    part(12, 16),
                    part(16, 20),
                    part(20, 32)
                ))
            }
            None => SqlValue::Null,
        },
        Type::BYTEA => SqlValue::Bytes(raw.to_vec()),
        Type::TEXT
        | Type::VARCHAR
        | Type::BPCHAR
        | Type::NAME
        | Type::JSON
        | Type::XML
        | Type::UNKNOWN
        | Type::CHAR => text(raw),
        // A version byte, then the text.
        Type::JSONB => text(raw.get(1..).unwrap_or_default()),
        _ => opaque(ty, raw),
    };
    cell(value, None)
}

/// `infinity` or `-infinity`, the time values that are no instant.
fn infinity(raw: &[u8]) -> SqlValue {
    let neg = be::<8>(raw).is_some_and(|b| i64::from_be_bytes(b) < 0);
    SqlValue::Text(if neg { "-infinity" } else { "infinity" }.into())
}

/// A binary `numeric` as its digits: base-10000 groups, a weight, a sign, a scale.
fn numeric_text(raw: &[u8]) -> String {
    let word = |i: usize| raw.get(i..i + 2).and_then(be::<2>).map(i16::from_be_bytes);
    let (Some(ndigits), Some(weight), Some(sign), Some(dscale)) =
        (word(0), word(2), word(4), word(6))
    else {
        return String::new();
    };
    // The sign word is unsigned on the wire.
    match sign.cast_unsigned() {
        0xC000 => return "NaN".into(),
        0xD000 => return "Infinity".into(),
        0xF000 => return "-Infinity".into(),
        _ => {}
    }
    let digit = |i: i32| -> i16 {
        usize::try_from(i)
            .ok()
            .filter(|i| *i < usize::try_from(ndigits).unwrap_or(0))
            .and_then(|i| word(8 + 2 * i))
            .unwrap_or(0)
    };
    let weight = i32::from(weight);
    let mut s = String::new();
    if sign.cast_unsigned() == 0x4000 {
        s.push('-');
    }
    if weight < 0 {
        s.push('0');
    } else {
        for i in 0..=weight {
            if i == 0 {
                let _ = write!(s, "{}", digit(i));
            } else {
                let _ = write!(s, "{:04}", digit(i));
            }
        }
    }
    let scale = usize::try_from(dscale).unwrap_or(0);
    if scale > 0 {
        let groups = i32::try_from(scale.div_ceil(4)).unwrap_or(0);
        let mut frac = String::new();
        for i in weight + 1..weight + 1 + groups {
            let _ = write!(frac, "{:04}", digit(i));
        }
        frac.truncate(scale);
        s.push('.');
        s.push_str(&frac);
    }
    s
}

/// A result row, cell by cell.
struct Cells {
    row: postgres::Row,
    at: usize,
}

impl Row for Cells {
    fn cell(&mut self) -> Cell {
        let i = self.at;
        self.at += 1;
        self.row.try_get::<_, Raw>(i).map_or(
            Cell {
                value: SqlValue::Null,
                ty: None,
            },
            |r| r.0,
        )
    }

    fn columns(&self) -> usize {
        self.row.len()
    }

    fn name(&self, i: usize) -> String {
        self.row
            .columns()
            .get(i)
            .map(|c| c.name().to_string())
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------
// Failures

/// The kind of a server error, by its SQLSTATE.
fn kind_of(code: &SqlState) -> DbErrorKind {
    let c = code.code();
    match c {
        // invalid_password, invalid_authorization_specification, insufficient_privilege.
        _ if c.starts_with("28") || c == "42501" => DbErrorKind::AccessDenied,
        // invalid_catalog_name, undefined_table, undefined_column, invalid_schema_name,
        // undefined_object.
        "3D000" | "42P01" | "42703" | "3F000" | "42704" => DbErrorKind::UnknownObject,
        // connection exceptions, too_many_connections, admin/crash shutdown,
        // cannot_connect_now.
        _ if c.starts_with("08") => DbErrorKind::Unreachable,
        "53300" | "57P01" | "57P02" | "57P03" => DbErrorKind::Unreachable,
        // lock_not_available, query_canceled (statement_timeout).
        "55P03" | "57014" => DbErrorKind::TimedOut,
        // read_only_sql_transaction.
        "25006" => DbErrorKind::ReadOnly,
        _ => DbErrorKind::Other,
    }
}

/// The server asked for a password and none was given (the crate's own error).
fn password_missing(e: &postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.to_string() == "password missing")
}

/// The I/O error under a driver error, if that is what it is.
fn io_error(e: &postgres::Error) -> Option<&std::io::Error> {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>())
}

impl DbCause for postgres::Error {
    fn kind(&self) -> DbErrorKind {
        if let Some(code) = self.code() {
            return kind_of(code);
        }
        if let Some(io) = io_error(self) {
            return DbErrorKind::of_io(io.kind());
        }
        if self.is_closed() {
            return DbErrorKind::Unreachable;
        }
        if password_missing(self) {
            return DbErrorKind::AccessDenied;
        }
        DbErrorKind::Other
    }

    fn into_source(self) -> crate::error::BoxError {
        Box::new(Failure(self))
    }
}

/// A driver failure in selfheal's words: the server's message and SQLSTATE, the socket or
/// address that does not answer, a closed connection. (The driver's error stays reachable
/// as the source.)
#[derive(Debug)]
struct Failure(postgres::Error);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(f, "{} (SQLSTATE {})", db.message(), db.code().code())?;
            if let Some(d) = db.detail() {
                write!(f, ": {d}")?;
            }
            return Ok(());
        }
        if let Some(io) = io_error(&self.0) {
            use std::io::ErrorKind as K;
            return match io.kind() {
                K::TimedOut | K::WouldBlock => write!(
                    f,
                    "no answer to the connection attempt: timed out after {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
                K::UnexpectedEof | K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted => f
                    .write_str(
                        "the server closed the connection (stopped, restarted, or it ended \
                         this session)",
                    ),
                _ => write!(f, "{io}"),
            };
        }
        if password_missing(&self.0) {
            return f.write_str("the server asks for a password and none was given");
        }
        if self.0.is_closed() {
            return f.write_str(
                "the server closed the connection (stopped, restarted, or it ended this \
                 session)",
            );
        }
        match std::error::Error::source(&self.0) {
            Some(s) => write!(f, "{s}"),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The fix for a connection that failed, from the server's SQLSTATE or how the socket or
/// address failed, and the settings that were used (never the password).
fn connect_fix(creds: &PgCreds, e: &postgres::Error) -> Option<String> {
    use std::io::ErrorKind as K;
    let user = &creds.user.value;
    let me = crate::fix::RunningUser::current();
    if let Some(db) = e.as_db_error() {
        return match db.code().code() {
            "28P01" => Some(match creds.password_source() {
                Some(src) => format!(
                    "the server refused {user} with the password from {src}: correct it \
                     there, or set the role's password on the server (ALTER ROLE \"{user}\" \
                     PASSWORD '…')"
                ),
                None => format!(
                    "{user} needs a password: write it into a file only selfheal's user can \
                     read and name that file as database.password_file (or a ~/.pgpass line \
                     of that user, mode 600)"
                ),
            }),
            "28000" => Some(format!(
                "the server does not let {user} in this way ({}): does the role exist \
                 (CREATE ROLE \"{user}\" LOGIN), and does pg_hba.conf allow it from here? \
                 peer authentication over the socket takes only the system user of the same \
                 name, and selfheal runs as {}",
                db.message(),
                me.name
            )),
            "3D000" => Some(format!(
                "correct the database name in [database] url (psql -l lists the ones {user} \
                 may see)"
            )),
            "53300" => Some(
                "the server has no connection left (max_connections): see pg_stat_activity; \
                 the next run tries again"
                    .into(),
            ),
            _ => None,
        };
    }
    if e.kind() == DbErrorKind::AccessDenied {
        return Some(format!(
            "the server asks {user} for a password and none was found: write it into a file \
             only selfheal's user can read and name that file as database.password_file (or \
             a ~/.pgpass line of that user, mode 600)"
        ));
    }
    let io = io_error(e)?;
    match (&creds.host.value, io.kind()) {
        (PgHost::Socket(d), K::NotFound) => Some(format!(
            "no socket at {} (from {}): is the server running (systemctl status \
             postgresql)? If it is, SHOW unix_socket_directories names its directory: set it \
             as ?host= in [database] url",
            socket_path(d, creds.port.value).display(),
            creds.host.source
        )),
        (PgHost::Socket(d), K::ConnectionRefused) => Some(format!(
            "{} is there but no server listens on it: the server is stopped or crashed \
             (systemctl status postgresql)",
            socket_path(d, creds.port.value).display()
        )),
        (PgHost::Socket(d), K::PermissionDenied) => crate::fix::access_fix(
            &socket_path(d, creds.port.value),
            crate::fix::Permission::ReadWrite,
        ),
        (PgHost::Tcp(h), K::ConnectionRefused) => Some(format!(
            "nothing listens on {h}:{}: is the server running, and does it listen there \
             (listen_addresses, port)?",
            creds.port.value
        )),
        (PgHost::Tcp(h), K::TimedOut) => Some(format!(
            "no answer from {h}:{} within {} s: is the host up, and does a firewall drop the \
             packets?",
            creds.port.value,
            creds.connect_timeout.as_secs()
        )),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// What the database says about a table and itself

/// Reads `EXPLAIN`'s text: the index that finds the watch's running rows — one whose scan
/// of `table` has an `Index Cond` on the status column (an index scan, or a bitmap index
/// scan under a bitmap heap scan of the table), never a whole index read in order with
/// the status filtered (`sync_log_pkey` for the `ORDER BY`) — and the estimate of the node
/// that reads the table.
fn plan_of(lines: &[String], table: &str, status: &str) -> ScanPlan {
    let on_table =
        |l: &str| l.contains(&format!(" on {table} ")) || l.contains(&format!(" on \"{table}\" "));
    let first_word = |rest: &str| {
        rest.split_whitespace()
            .next()
            .map(|s| s.trim_matches('"').to_string())
    };
    let on_status = |l: &str| {
        l.contains(&format!("({status} "))
            || l.contains(&format!("(({status})"))
            || l.contains(&format!("\"{status}\""))
            || l.contains(&format!("({status})"))
    };
    let mut index = None;
    let mut rows = None;
    // The index node being read, and whether it is a scan of the table itself.
    let mut node: Option<String> = None;
    for l in lines {
        let l = l.trim_start().trim_start_matches("->").trim_start();
        if let Some(rest) = l.strip_prefix("Bitmap Index Scan on ") {
            node = first_word(rest);
        } else if (l.starts_with("Index Scan using ") || l.starts_with("Index Only Scan using "))
            && on_table(l)
        {
            node = l.split_once(" using ").and_then(|(_, r)| first_word(r));
            rows = rows.or_else(|| estimate(l));
        } else if l.starts_with("Seq Scan on ") || l.starts_with("Bitmap Heap Scan on ") {
            node = None;
            if on_table(l) {
                rows = rows.or_else(|| estimate(l));
            }
        } else if let Some(cond) = l.strip_prefix("Index Cond: ") {
            if on_status(cond) {
                index = index.or_else(|| node.clone());
            }
        } else if !l.contains(':') {
            node = None;
        }
    }
    ScanPlan {
        index,
        candidates: Vec::new(),
        rows,
        detail: format!(
            "EXPLAIN: {}",
            lines
                .iter()
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// `rows=N` of a plan node.
fn estimate(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once("rows=")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Introspect for SqlStore<Postgres> {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn describe_server(&mut self) -> Result<String> {
        let v = self
            .driver
            .one("SHOW server_version", &[], "reading the version")?
            .to_string();
        Ok(format!("postgresql {v}"))
    }

    fn connection(&self) -> String {
        format!("{} ({})", self.driver.label, self.driver.creds.describe())
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.driver.creds.notes.clone();
        if self.driver.zone.is_none() && self.tz.is_none() {
            notes.push(
                "the session's TimeZone names no zone selfheal knows: naive timestamp values \
                 are read as UTC; set [database] timezone to the zone they are written in"
                    .into(),
            );
        }
        notes
    }

    fn schema(&mut self, w: &Watch) -> Result<Schema> {
        self.read_schema(w)
    }

    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan> {
        const WHAT: &str = "EXPLAIN of the running-rows query";
        let st = sql::running_sql(&DIALECT, w);
        let explain = Statement {
            sql: format!("EXPLAIN {}", st.sql),
            params: st.params,
        };
        let mut lines: Vec<String> = Vec::new();
        self.driver.query(&explain, WHAT, &mut |r| {
            lines.push(r.cell().value.to_string());
            Ok(())
        })?;
        let mut plan = plan_of(&lines, w.table.name(), w.status_column.name());
        // The indexes that could find them: those whose first column is the status column.
        let mut candidates = Vec::new();
        self.driver.query(
            &Statement {
                sql: "SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid \
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                      WHERE i.indrelid = to_regclass($1) AND a.attname = $2 ORDER BY 1"
                    .into(),
                params: vec![
                    regclass(&w.table),
                    SqlValue::Text(w.status_column.name().to_string()),
                ],
            },
            WHAT,
            &mut |r| {
                candidates.push(r.cell().value.to_string());
                Ok(())
            },
        )?;
        plan.candidates = candidates;
        // A sequential scan reads every row: as many as the table holds (the planner's
        // count, once it has one).
        if plan.index.is_none() {
            plan.rows = match self.driver.one(
                "SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples::bigint END \
                 FROM pg_class WHERE oid = to_regclass($1)",
                &[regclass(&w.table)],
                "reading the table's size",
            )? {
                SqlValue::Null => plan.rows,
                n => u64::try_from(n.into_count()).ok(),
            };
        }
        Ok(plan)
    }

    fn session_time_zone(&mut self) -> Result<String> {
        let row = self.driver.first(
            "SELECT current_setting('TimeZone'), \
             to_char(CURRENT_TIMESTAMP, 'OF'), \
             EXTRACT(TIMEZONE_MINUTE FROM CURRENT_TIMESTAMP)::int",
            &[],
            "reading the session time zone",
        )?;
        let mut cells = row.unwrap_or_default().into_iter();
        let zone = cells.next().map(|v| v.to_string()).unwrap_or_default();
        let hours = cells.next().map(|v| v.to_string()).unwrap_or_default();
        let minutes = cells.next().map_or(0, SqlValue::into_count).abs();
        Ok(format!("{zone}, UTC{hours}:{minutes:02} now"))
    }

    fn equal_under_collation(
        &mut self,
        w: &Watch,
        column: &Ident,
        a: &str,
        b: &str,
    ) -> Result<Option<String>> {
        // A deterministic collation (every one but ICU's with `deterministic = false`)
        // takes two strings for one only when they are the same bytes.
        let found = self.driver.one(
            "SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation \
             WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT c.collisdeterministic",
            &[
                regclass(&w.table),
                SqlValue::Text(column.name().to_string()),
            ],
            "reading a column's collation",
        )?;
        let Some(collation) = found.into_text() else {
            return Ok(None);
        };
        let quoted = format!("\"{}\"", collation.replace('"', "\"\""));
        let equal = self.driver.one(
            &format!("SELECT ($1::text COLLATE {quoted}) = ($2::text COLLATE {quoted})"),
            &[SqlValue::Text(a.to_string()), SqlValue::Text(b.to_string())],
            "comparing match values under the column's collation",
        )?;
        Ok((equal == SqlValue::Text("true".into())).then_some(collation))
    }

    fn survey(&mut self) -> Option<&mut dyn super::survey::Survey> {
        Some(self)
    }

    /// On `(status, id)`: a page of running rows (`status = $1 AND id > $2 ORDER BY id
    /// LIMIT n`) is then one range of the index, in order; on `(status)` alone every page
    /// sorts every running row (PostgreSQL's index entries of one status are in the
    /// table's order, not the id's).
    fn status_index_sql(&self, w: &Watch) -> Option<String> {
        Some(format!(
            "CREATE INDEX {} ON {} ({}, {})",
            Ident::column(&format!(
                "idx_{}_{}",
                w.table.name(),
                w.status_column.name()
            ))
            .map_or_else(|_| "\"idx_status_id\"".to_string(), |i| i.quoted('"')),
            w.table.quoted('"'),
            w.status_column.quoted('"'),
            w.id_column.quoted('"')
        ))
    }

    fn analyze_sql(&self, w: &Watch) -> Option<String> {
        Some(format!("ANALYZE {}", w.table.quoted('"')))
    }

    /// An enum gets the labels it lacks (`ALTER TYPE … ADD VALUE`, each at the end); any
    /// other column a wider type (`ALTER COLUMN … TYPE`, which keeps its NULL and DEFAULT).
    fn widen_sql(
        &self,
        w: &Watch,
        column: &Ident,
        col: &Column,
        values: &[&str],
    ) -> Option<String> {
        match &col.ty {
            ColumnType::Enum { members } => {
                let adds: Vec<String> = values
                    .iter()
                    .filter(|v| !members.iter().any(|m| m == *v))
                    .map(|v| format!("ALTER TYPE {} ADD VALUE {}", col.declared, pg_literal(v)))
                    .collect();
                (!adds.is_empty()).then(|| adds.join("; "))
            }
            _ => col.widened(values).map(|ty| {
                format!(
                    "ALTER TABLE {} ALTER COLUMN {} TYPE {ty}",
                    w.table.quoted('"'),
                    column.quoted('"')
                )
            }),
        }
    }
}

/// What `selfheal init` reads: `pg_catalog`, the schema a table name gives or the
/// session's `search_path`.
pub const SURVEY: SurveySql = SurveySql {
    columns: columns_of,
    column: column_row,
    indexes: |t| Statement {
        sql: "SELECT ic.relname, k.n, a.attname, i.indisunique::int, i.indisprimary::int \
              FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid \
              CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
              LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
              WHERE i.indrelid = to_regclass($1) ORDER BY ic.relname, k.n"
            .into(),
        params: vec![regclass(t)],
    },
    rows: |t| Statement {
        sql: "SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples::bigint END \
              FROM pg_class WHERE oid = to_regclass($1)"
            .into(),
        params: vec![regclass(t)],
    },
    database: Some("SELECT current_schema()"),
    tables: |schema, limit| Statement {
        sql: format!(
            "SELECT c.relname, a.attname FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             WHERE c.relkind IN ('r', 'p') AND n.nspname = COALESCE($1, current_schema()) \
             ORDER BY c.relname, a.attnum LIMIT {limit}"
        ),
        params: vec![schema.map_or(SqlValue::Null, |s| SqlValue::Text(s.to_string()))],
    },
};

// ---------------------------------------------------------------------------------------
// How runs coordinate

/// The advisory lock's key of a name, as PostgreSQL computes it: the usual way an
/// application locks a name (`hashtextextended(text, 0)`, a `bigint`).
const KEY: &str = "hashtextextended($1, 0)";

impl Postgres {
    /// The name of `w`'s advisory lock: `selfheal/SCHEMA/WATCH`, the same on every host for
    /// one watch, or `selfheal/SCHEMA/WATCH@HOST` when each host judges its own rows (an
    /// advisory lock is the database's: another database's lock of the same name is
    /// another lock).
    fn watch_lock_name(&mut self, w: &Watch, host: Option<&str>, what: &str) -> Result<String> {
        let schema = match w.table.schema() {
            Some(s) => s.to_string(),
            None => self
                .one("SELECT current_schema()", &[], what)?
                .into_text()
                .unwrap_or_default(),
        };
        Ok(match host {
            Some(h) => format!("selfheal/{schema}/{}@{h}", w.name),
            None => format!("selfheal/{schema}/{}", w.name),
        })
    }

    /// When the server started, in unix seconds on its own clock.
    fn server_started(&mut self, what: &str) -> Result<i64> {
        Ok(self
            .one(
                "SELECT FLOOR(EXTRACT(EPOCH FROM pg_postmaster_start_time()))::bigint",
                &[],
                what,
            )?
            .into_count())
    }
}

impl Coordination for SqlStore<Postgres> {
    fn session(&mut self) -> Option<Session> {
        let cells = self
            .driver
            .first(
                "SELECT pg_backend_pid(), \
                 FLOOR(EXTRACT(EPOCH FROM pg_postmaster_start_time()))::bigint",
                &[],
                "reading the session",
            )
            .ok()??;
        let mut cells = cells.into_iter().map(SqlValue::into_count);
        Some(Session {
            connection: u64::try_from(cells.next()?).ok()?,
            server_started: cells.next()?,
        })
    }

    fn end_session(&mut self, old: &Session) -> Result<bool> {
        const WHAT: &str = "looking for a stopped run's session";
        let pg = &mut self.driver;
        // A restarted server has ended every session of before, and its pids may be
        // anyone's now: never touch one.
        if (pg.server_started(WHAT)? - old.server_started).abs() > 5 {
            return Ok(true);
        }
        let params = [
            SqlValue::Int(i64::try_from(old.connection).unwrap_or(0)),
            SqlValue::Text(pg.creds.application_name.clone()),
        ];
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut ended = false;
        loop {
            let n = pg
                .one(
                    "SELECT COUNT(*) FROM pg_stat_activity \
                     WHERE pid = $1 AND application_name = $2 AND pid <> pg_backend_pid()",
                    &params,
                    WHAT,
                )?
                .into_count();
            if n == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() > deadline {
                return Ok(false);
            }
            if !ended {
                ended = true;
                // Refused (another role's session, without pg_signal_backend): wait for
                // it instead.
                let _ = pg.one(
                    "SELECT pg_terminate_backend($1) FROM pg_stat_activity \
                     WHERE pid = $1 AND application_name = $2",
                    &params,
                    WHAT,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_watch_lock(&mut self, w: &Watch, host: Option<&str>) -> Result<bool> {
        let pg = &mut self.driver;
        let name = pg.watch_lock_name(w, host, "pg_try_advisory_lock")?;
        let got = pg.one(
            &format!("SELECT pg_try_advisory_lock({KEY})::int"),
            &[SqlValue::Text(name)],
            "pg_try_advisory_lock",
        )?;
        Ok(got.into_count() == 1)
    }

    fn lock_holder_fix(&self, connection: Option<u64>) -> String {
        match connection {
            Some(pid) => format!(
                "see what session {pid} is (SELECT * FROM pg_stat_activity WHERE pid = {pid}), \
                 and if it is no selfheal run, end it (SELECT pg_terminate_backend({pid})) and \
                 find out why that role holds the lock"
            ),
            None => "see which session holds the lock (SELECT pid FROM pg_locks WHERE \
                     locktype = 'advisory' AND granted, then pg_stat_activity for that pid; \
                     the lock's key is hashtextextended('selfheal/SCHEMA/WATCH', 0))"
                .to_string(),
        }
    }

    fn watch_lock_holder(
        &mut self,
        w: &Watch,
        host: Option<&str>,
    ) -> Result<Option<AdvisoryLockHolder>> {
        const WHAT: &str = "asking who holds the advisory lock";
        let pg = &mut self.driver;
        let lock = pg.watch_lock_name(w, host, WHAT)?;
        let found = pg.first(
            &format!(
                "SELECT l.pid, s.usename, COALESCE(host(s.client_addr), \
                 CASE WHEN s.pid IS NOT NULL THEN 'local' END) \
                 FROM (SELECT {KEY} AS k) AS key, pg_locks l \
                 LEFT JOIN pg_stat_activity s ON s.pid = l.pid \
                 WHERE {} LIMIT 1",
                advisory_lock_on("key.k")
            ),
            &[SqlValue::Text(lock.clone())],
            WHAT,
        )?;
        let Some(cells) = found else {
            return Ok(None);
        };
        let mut cells = cells.into_iter();
        let connection = u64::try_from(cells.next().map_or(0, SqlValue::into_count)).unwrap_or(0);
        let user = cells.next().and_then(SqlValue::into_text);
        let host = cells.next().and_then(SqlValue::into_text);
        Ok(Some(AdvisoryLockHolder {
            lock,
            connection,
            user,
            host,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(url: &str, pwfile: Option<&Path>) -> Database {
        Database {
            url: DbUrl::parse(url).expect("url"),
            url_origin: crate::error::Origin::CommandLine,
            defaults_file: None,
            password_file: pwfile.map(Path::to_path_buf),
            timezone: None,
        }
    }

    fn inputs(home: &Path) -> Inputs {
        Inputs {
            env_password: None,
            home: Some(home.to_path_buf()),
            os_user: Some("www-data".into()),
        }
    }

    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    fn pw(c: &PgCreds) -> Option<(&str, &Source)> {
        c.password.as_ref().map(|p| (p.value.as_str(), &p.source))
    }

    #[test]
    fn a_url_names_the_socket_directory_or_a_host_and_its_options_are_checked() {
        let p = parse_url("postgres://app@/appdb?host=/var/run/postgresql").expect("url");
        assert_eq!(
            (p.user.as_deref(), p.host.as_deref(), p.dbname.as_deref()),
            (Some("app"), Some("/var/run/postgresql"), Some("appdb"))
        );
        let p = parse_url("postgres://a%40b:p%3Ass@[::1]:5433/my%20db").expect("url");
        assert_eq!(
            (
                p.user.as_deref(),
                p.password.as_deref(),
                p.host.as_deref(),
                p.port,
                p.dbname.as_deref()
            ),
            (
                Some("a@b"),
                Some("p:ss"),
                Some("::1"),
                Some(5433),
                Some("my db")
            )
        );
        assert_eq!(parse_url("postgres:///appdb").expect("url").host, None);
        for (bad, says) in [
            ("postgres://app@/appdb?sslmode=require", "without TLS"),
            (
                "postgres://app@/appdb?sockt=/x",
                "Unknown URL parameter `sockt'",
            ),
            ("postgres://app@/appdb?port=many", "expected a port number"),
            ("postgres://app@/appdb?password=x", "password_file"),
            ("postgres://app@/a/b", "no '/'"),
            ("postgres://app@/appdb?host=/a,/b", "one host only"),
        ] {
            let e = parse_url(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        // The driver's check says so as the configuration's error.
        let e = Postgres::vet(&db("postgres://app@/appdb?sslmode=verify-full", None))
            .expect_err("refused");
        assert!(
            e.starts_with("not a usable PostgreSQL URL (sslmode=verify-full"),
            "{e}"
        );
        let mut d = db("postgres://app@/appdb", None);
        d.defaults_file = Some("/etc/mysql/my.cnf".into());
        assert!(Postgres::vet(&d).is_err_and(|e| e.contains("MySQL option file")));
    }

    #[test]
    fn the_password_comes_from_the_file_the_environment_or_pgpass_and_is_never_shown() {
        let dir = tempfile::tempdir().expect("tmp");
        let pgpass = write(
            dir.path(),
            ".pgpass",
            "# comment\nother:5432:*:app:nope\n\
             localhost:5432:appdb:app:pa\\:ss\\\\word\n*:*:*:*:fallback\n",
            0o600,
        );
        let socket = "postgres://app@/appdb?host=/var/run/postgresql";
        let c = resolve(&db(socket, None), &inputs(dir.path()), None).expect("resolve");
        assert_eq!(
            pw(&c),
            Some((
                "pa:ss\\word",
                &Source::OptionFile {
                    file: pgpass.clone(),
                    line: 3
                }
            ))
        );
        assert!(!format!("{c:?}").contains("pa:ss") && !c.describe().contains("pa:ss"));
        assert_eq!(
            c.describe(),
            format!(
                "user app (from the URL), a password from {}:3, socket \
                 /var/run/postgresql/.s.PGSQL.5432 (from the URL), database appdb",
                pgpass.display()
            )
        );
        // A socket outside the usual directories is not `localhost`; a wildcard line is.
        let c = resolve(
            &db("postgres://app@/appdb?host=/srv/pg", None),
            &inputs(dir.path()),
            None,
        )
        .expect("resolve");
        assert_eq!(pw(&c).map(|p| p.0), Some("fallback"));
        // password_file beats the environment, which beats .pgpass; $PGPASSFILE is read
        // instead of ~/.pgpass.
        let pwfile = write(dir.path(), "pw", "fromfile\nignored\n", 0o600);
        let mut i = inputs(dir.path());
        i.env_password = Some("fromenv".into());
        let c = resolve(&db(socket, Some(&pwfile)), &i, None).expect("resolve");
        assert_eq!(
            pw(&c),
            Some(("fromfile", &Source::PasswordFile(pwfile.clone())))
        );
        let c = resolve(&db(socket, None), &i, None).expect("resolve");
        assert_eq!(pw(&c), Some(("fromenv", &Source::Env)));
        let other = write(dir.path(), "pgpass2", "*:*:appdb:app:elsewhere\n", 0o600);
        let c = resolve(&db(socket, None), &inputs(dir.path()), Some(other)).expect("resolve");
        assert_eq!(pw(&c).map(|p| p.0), Some("elsewhere"));
        // A .pgpass others may read is not used, and said so.
        write(dir.path(), ".pgpass", "*:*:*:*:open\n", 0o644);
        let c = resolve(&db(socket, None), &inputs(dir.path()), None).expect("resolve");
        assert_eq!(pw(&c), None);
        assert!(c.notes[0].contains("chmod 600"), "{:?}", c.notes);
        // No user in the URL: the login name, and the database named after it.
        let c = resolve(&db("postgres://db1", None), &inputs(dir.path()), None).expect("resolve");
        assert_eq!(
            (
                c.user.value.as_str(),
                &c.user.source,
                c.dbname.value.as_str()
            ),
            ("www-data", &Source::OsLogin, "www-data")
        );
        assert_eq!(
            (&c.host.value, c.port.value),
            (&PgHost::Tcp("db1".into()), 5432)
        );
    }

    #[test]
    fn binary_cells_are_read_as_the_store_reads_times_and_numbers() {
        let ts = |micros: i64| decode(&Type::TIMESTAMP, &micros.to_be_bytes());
        let c = ts(0);
        assert_eq!(c.ty, Some(ColumnType::DateTime));
        assert_eq!(c.value.to_string(), "2000-01-01 00:00:00");
        assert_eq!(ts(-1).value.to_string(), "1999-12-31 23:59:59.999999");
        assert_eq!(ts(i64::MAX).value, SqlValue::Text("infinity".into()));
        let tz = decode(
            &Type::TIMESTAMPTZ,
            &(86_400_000_000_i64 + 500_000).to_be_bytes(),
        );
        assert_eq!(
            tz.value,
            SqlValue::Text("2000-01-02 00:00:00.500+00:00".into())
        );
        assert_eq!(
            crate::clock::parse_text_stamp(&tz.value.to_string()),
            Ok(crate::clock::TextTime::Epoch(PG_EPOCH + 86_400))
        );
        assert_eq!(
            decode(&Type::INT4, &7_i32.to_be_bytes()).value,
            SqlValue::Int(7)
        );
        assert_eq!(
            decode(&Type::INT8, &(-7_i64).to_be_bytes()).value,
            SqlValue::Int(-7)
        );
        assert_eq!(
            decode(&Type::BOOL, &[1]).value,
            SqlValue::Text("true".into())
        );
        assert_eq!(
            decode(&Type::DATE, &1_i32.to_be_bytes()).value,
            SqlValue::Text("2000-01-02".into())
        );
        // numeric: ndigits, weight, sign, dscale, then base-10000 digits.
        let numeric = |w: &[i16]| -> String {
            let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
            numeric_text(&bytes)
        };
        assert_eq!(numeric(&[3, 2, 0, 0, 17, 6404, 2168]), "1764042168");
        assert_eq!(numeric(&[3, 2, 0x4000, 2, 1, 0, 5000]), "-100005000.00");
        assert_eq!(numeric(&[1, 2, 0x4000, 2, 1]), "-100000000.00");
        assert_eq!(
            numeric(&[4, 2, 0, 3, 17, 6404, 2168, 2500]),
            "1764042168.250"
        );
        assert_eq!(numeric(&[1, -2, 0, 8, 1234]), "0.00001234");
        assert_eq!(numeric(&[0, 0, 0, 0]), "0");
        assert_eq!(numeric(&[0, 0, 0xC000_u16.cast_signed(), 0]), "NaN");
        let n = decode(&Type::NUMERIC, &[0, 1, 0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!(
            (n.value, n.ty),
            (SqlValue::Text("42".into()), Some(ColumnType::Decimal))
        );
        assert_eq!(
            decode(&Type::UUID, &[0xab; 16]).value.to_string(),
            "abababab-abab-abab-abab-abababababab"
        );
        assert_eq!(
            decode(&Type::INT4_ARRAY, &[0, 0, 0, 1, 0, 0, 0, 0]).value,
            SqlValue::Text("(_int4 value)".into())
        );
    }

    #[test]
    fn column_types_are_mapped() {
        let c = |base: &str| pg_column(base, base, "b", None, None).ty;
        assert_eq!(c("timestamp"), ColumnType::DateTime);
        assert_eq!(c("timestamptz"), ColumnType::Timestamp);
        assert_eq!(c("int8"), ColumnType::Integer);
        assert_eq!(c("numeric"), ColumnType::Decimal);
        assert_eq!(c("text"), ColumnType::Text);
        assert_eq!(c("jsonb"), ColumnType::Other);
        let e = pg_column(
            "job_status",
            "job_status",
            "e",
            None,
            Some(r#"["running","it's"]"#),
        );
        assert_eq!(
            e.ty,
            ColumnType::Enum {
                members: vec!["running".into(), "it's".into()]
            }
        );
        let v = pg_column("character varying(16)", "varchar", "b", Some(16), None);
        assert_eq!(
            (v.ty, v.length, v.enforced),
            (ColumnType::Text, Some(16), true)
        );
    }

    #[test]
    fn literals_zones_and_plans() {
        assert_eq!(pg_literal("it's"), "'it''s'");
        assert_eq!(pg_literal("a\\b"), "'a\\b'");
        assert_eq!(pg_literal("a\nb'"), "E'a\\nb'''");
        assert_eq!(zone_of("Europe/Berlin", 3600), Zone::named("Europe/Berlin"));
        assert_eq!(zone_of("UTC", 0), Some(Zone::utc()));
        assert_eq!(zone_of("<+03>-03", 10_800), Zone::named("Etc/GMT-3"));
        assert_eq!(zone_of("<+0530>-0530", 19_800), None);
        let plan = plan_of(
            &[
                "Sort  (cost=8.17..8.18 rows=1 width=44)".into(),
                "  ->  Bitmap Heap Scan on sync_log  (cost=4.17..8.16 rows=3 width=44)".into(),
                "        Recheck Cond: ((status)::text = 'running'::text)".into(),
                "        ->  Bitmap Index Scan on idx_status  (cost=0.00..4.17 rows=3 width=0)"
                    .into(),
                "              Index Cond: ((status)::text = 'running'::text)".into(),
            ],
            "sync_log",
            "status",
        );
        assert_eq!(
            (plan.index.as_deref(), plan.rows),
            (Some("idx_status"), Some(3))
        );
        let plan = plan_of(
            &[
                "Index Scan using idx_status_id on sync_log  (cost=0.42..16597 rows=100533 width=12)"
                    .into(),
                "  Index Cond: ((status)::text = 'running'::text)".into(),
            ],
            "sync_log",
            "status",
        );
        assert_eq!(
            (plan.index.as_deref(), plan.rows),
            (Some("idx_status_id"), Some(100_533))
        );
        // The primary key read whole for the ORDER BY, the status filtered: no index finds
        // the running rows.
        let plan = plan_of(
            &[
                "Index Scan using sync_log_pkey on sync_log  (cost=0.42..35836 rows=100533 width=12)"
                    .into(),
                "  Filter: ((status)::text = 'running'::text)".into(),
            ],
            "sync_log",
            "status",
        );
        assert_eq!((plan.index, plan.rows), (None, Some(100_533)));
        let plan = plan_of(
            &["Seq Scan on sync_log  (cost=0.00..1.05 rows=2 width=44)".into()],
            "sync_log",
            "status",
        );
        assert_eq!((plan.index, plan.rows), (None, Some(2)));
    }

    #[test]
    fn failures_have_kinds() {
        for (code, kind) in [
            ("28P01", DbErrorKind::AccessDenied),
            ("42501", DbErrorKind::AccessDenied),
            ("42P01", DbErrorKind::UnknownObject),
            ("3D000", DbErrorKind::UnknownObject),
            ("57P01", DbErrorKind::Unreachable),
            ("55P03", DbErrorKind::TimedOut),
            ("25006", DbErrorKind::ReadOnly),
            ("23505", DbErrorKind::Other),
        ] {
            assert_eq!(kind_of(&SqlState::from_code(code)), kind, "{code}");
        }
    }
}
