//! Configuration: the TOML file of SPEC §4, overlaid with command-line flags, turned into a
//! typed and validated [`Config`] before any database or file is touched.
//!
//! Reads exactly one file (the configuration itself); everything else is pure. Every error
//! names the file (or the command line), the key, and what was expected, and maps to exit
//! status 2.

mod values;

pub use values::{Ident, PathTemplate, fmt_duration, parse_duration};

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Origin, Result, Usage};

/// Where the configuration is looked for when neither `--config` nor `$SELFHEAL_CONFIG`
/// names one.
pub const DEFAULT_CONFIG: &str = "/etc/selfheal/selfheal.toml";
/// Default run lock: `/run/lock` is world-writable with the sticky bit on Debian.
pub const DEFAULT_LOCK_FILE: &str = "/run/lock/selfheal.lock";
/// Default directory for the journal and the last-run report.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/selfheal";
/// Default tolerance between the database clock and the host clock.
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Raw, as written in the file (every field optional, unknown keys rejected).

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    database: Option<RawDatabase>,
    run: Option<RawRun>,
    #[serde(default)]
    watch: Vec<RawWatch>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Option<String>,
    defaults_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
    timezone: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    lock_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    metrics_file: Option<PathBuf>,
    clock_tolerance: Option<String>,
}

/// One `[[watch]]` table. Also the shape the watch flags of `check` are collected into.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatch {
    pub name: Option<String>,
    pub host: Option<String>,
    pub table: Option<String>,
    pub id_column: Option<String>,
    pub status_column: Option<String>,
    pub running_value: Option<String>,
    pub started_column: Option<String>,
    pub heartbeat_file: Option<String>,
    pub heartbeat_column: Option<String>,
    pub stale_after: Option<String>,
    pub max_age: Option<String>,
    pub dead_value: Option<String>,
    pub ended_column: Option<String>,
    pub message_column: Option<String>,
    pub lock_file: Option<String>,
    pub owner_column: Option<String>,
    pub manual_value: Option<String>,
    pub retry_value: Option<String>,
    pub attempts_column: Option<String>,
    pub max_attempts: Option<i64>,
    pub overtime: Option<String>,
    pub release_lock: Option<String>,
    pub success_values: Option<Vec<String>>,
}

/// Values given on the command line that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--db URL`.
    pub db_url: Option<String>,
    /// `--timezone`.
    pub timezone: Option<String>,
    /// Watch keys given as flags (`--table`, `--stale-after`, …).
    pub watch: RawWatch,
}

macro_rules! overlay_fields {
    ($dst:expr, $src:expr, $set:expr; $($f:ident),* $(,)?) => {
        $(
            if let Some(v) = $src.$f.clone() {
                $dst.$f = Some(v);
                $set.insert(stringify!($f));
            }
        )*
    };
}

impl RawWatch {
    /// Overlays the flags onto this watch; returns which keys came from the command line.
    fn overlay(&mut self, flags: &RawWatch) -> HashSet<&'static str> {
        let mut set = HashSet::new();
        overlay_fields!(self, flags, set;
            name, host, table, id_column, status_column, running_value, started_column,
            heartbeat_file, heartbeat_column, stale_after, max_age, dead_value, ended_column,
            message_column, lock_file, owner_column, manual_value, retry_value,
            attempts_column, max_attempts, overtime, release_lock, success_values);
        set
    }

    /// True when any watch key was given.
    pub fn is_empty(&self) -> bool {
        let mut probe = RawWatch::default();
        probe.overlay(self).is_empty()
    }
}

// ---------------------------------------------------------------------------------------
// Validated.

/// The database to talk to, chosen by the URL's scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbUrl {
    /// `sqlite:///abs/path.db` or `sqlite://relative.db`.
    Sqlite(PathBuf),
    /// `mysql://user@host:port/db?socket=…` (also `mariadb://`), stored normalised to
    /// the `mysql://` scheme.
    Mysql(String),
}

impl DbUrl {
    pub fn parse(s: &str) -> Result<DbUrl, String> {
        if let Some(rest) = s.strip_prefix("sqlite://") {
            if rest.is_empty() {
                return Err("expected sqlite:///path/to/file.db, got no path".into());
            }
            return Ok(DbUrl::Sqlite(PathBuf::from(rest)));
        }
        let norm = if let Some(rest) = s.strip_prefix("mariadb://") {
            format!("mysql://{rest}")
        } else if s.starts_with("mysql://") {
            s.to_string()
        } else {
            return Err(format!(
                "expected a URL starting with sqlite:// or mysql://, got {:?}",
                redact_url(s)
            ));
        };
        mysql::Opts::from_url(&with_host(&norm).0)
            .map_err(|e| format!("not a usable MySQL URL ({e}): {:?}", redact_url(s)))?;
        Ok(DbUrl::Mysql(norm))
    }

    /// True when the URL itself carries a password.
    pub fn has_password(&self) -> bool {
        match self {
            DbUrl::Sqlite(_) => false,
            DbUrl::Mysql(u) => mysql::Opts::from_url(&with_host(u).0)
                .map(|o| o.get_pass().is_some())
                .unwrap_or(false),
        }
    }
}

/// A MySQL URL that may leave its host out (`mysql:///appdb`, `mysql://app@/appdb`: host,
/// port and socket then come from the option file, else `localhost`) with `localhost`
/// filled in, and whether the URL named a host itself.
pub fn with_host(url: &str) -> (String, bool) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), true);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if !host.is_empty() {
        return (url.to_string(), true);
    }
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let tail = if tail.is_empty() { "/" } else { tail };
    (format!("{scheme}://{user}localhost{tail}"), false)
}

/// A URL with any password replaced by `***`, for messages. Errs on the side of hiding:
/// everything between the first `:` after the scheme and the last `@` goes, so a password
/// holding an unencoded `/`, `@` or `?` is hidden too.
pub fn redact_url(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    match (rest.find(':'), rest.rfind('@')) {
        (Some(c), Some(a)) if c < a => format!("{scheme}://{}:***{}", &rest[..c], &rest[a..]),
        _ => s.to_string(),
    }
}

#[derive(Debug, Clone)]
pub struct Database {
    pub url: DbUrl,
    /// A MySQL option file whose client groups (`[client]`, `[mysql]`, …) supply user,
    /// password, host, port and socket where the URL does not (see `store::credentials`).
    pub defaults_file: Option<PathBuf>,
    /// A file holding the password (first line).
    pub password_file: Option<PathBuf>,
    /// How naive DATETIME values were written. `None`: the database's own clock.
    pub timezone: Option<chrono_tz::Tz>,
}

#[derive(Debug, Clone)]
pub struct Run {
    /// selfheal's own guard against overlapping runs. Never deleted.
    pub lock_file: PathBuf,
    /// Journal (`journal.jsonl`) and last-run report.
    pub state_dir: PathBuf,
    /// Prometheus textfile-collector output.
    pub metrics_file: Option<PathBuf>,
    /// Allowed difference between the database clock and the host clock.
    pub clock_tolerance: Duration,
}

/// What to do with a row that ran past `max_age`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overtime {
    MarkDead,
    Manual,
    Report,
}

/// Whether selfheal may remove a job's lock file (never while it may be held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseLock {
    Never,
    IfFree,
}

/// The retry budget of a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub value: String,
    pub attempts_column: Ident,
    pub max_attempts: u32,
}

/// One validated watch.
#[derive(Debug, Clone)]
pub struct Watch {
    pub name: String,
    /// Only act on this host (heartbeat files and pids are host-local).
    pub host: Option<String>,
    pub table: Ident,
    pub id_column: Ident,
    pub status_column: Ident,
    pub running_value: String,
    /// DATETIME/TIMESTAMP or integer unix seconds.
    pub started_column: Ident,
    pub heartbeat_file: Option<PathTemplate>,
    pub heartbeat_column: Option<Ident>,
    /// A heartbeat older than this is not beating.
    pub stale_after: Duration,
    /// Absolute cap on total runtime.
    pub max_age: Duration,
    pub dead_value: String,
    pub ended_column: Option<Ident>,
    pub message_column: Option<Ident>,
    /// The job's own lock: probed, never deleted (unless `release_lock = if_free`).
    pub lock_file: Option<PathTemplate>,
    /// `HOST:PID` or `PID` of the worker that claimed the row.
    pub owner_column: Option<Ident>,
    pub manual_value: Option<String>,
    pub retry: Option<Retry>,
    pub overtime: Overtime,
    pub release_lock: ReleaseLock,
    /// Statuses the job itself writes when a run ends well: their start-to-end times are
    /// the real runtimes `stats` and the `max_age` warning measure, and a row selfheal
    /// marked that later shows one of them was a false positive. `None`: every status but
    /// the running, dead, manual and retry values.
    pub success_values: Option<Vec<String>>,
}

impl Watch {
    /// True when a finished row with this status ended the way its job meant it to.
    pub fn is_success(&self, status: &str) -> bool {
        match &self.success_values {
            Some(v) => v.iter().any(|s| s == status),
            None => {
                status != self.running_value
                    && status != self.dead_value
                    && self.manual_value.as_deref() != Some(status)
                    && self.retry.as_ref().map(|r| r.value.as_str()) != Some(status)
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this came from, if any.
    pub source: Option<PathBuf>,
    /// `None` when no watch needs a database (a config with no watches).
    pub database: Option<Database>,
    pub run: Run,
    /// The watches to check (all, or those `--watch` selected).
    pub watches: Vec<Watch>,
    /// Every watch the file names, selected or not, with its `host`: so that the metrics
    /// of a watch another `--watch` run checked are kept, and those of a removed one go.
    pub all_watches: Vec<(String, Option<String>)>,
}

/// Where to look for the configuration file.
#[derive(Debug, Clone)]
pub enum ConfigPath {
    /// `--config FILE` or `$SELFHEAL_CONFIG`: must exist.
    Explicit(PathBuf, Origin),
    /// The default path: may be absent when flags give a watch.
    Default(PathBuf),
}

impl ConfigPath {
    /// `--config`, then `$SELFHEAL_CONFIG`, then the default path.
    pub fn resolve(flag: Option<&Path>) -> ConfigPath {
        if let Some(p) = flag {
            return ConfigPath::Explicit(p.to_path_buf(), Origin::CommandLine);
        }
        match std::env::var_os("SELFHEAL_CONFIG") {
            Some(p) if !p.is_empty() => {
                ConfigPath::Explicit(PathBuf::from(p), Origin::Env("SELFHEAL_CONFIG"))
            }
            _ => ConfigPath::Default(PathBuf::from(DEFAULT_CONFIG)),
        }
    }
}

/// Loads the file (if any), applies the overrides, selects the watches named by
/// `only` (all when empty) and validates everything.
pub fn load(path: &ConfigPath, overrides: &Overrides, only: &[String]) -> Result<Config> {
    let (raw, origin, source) = match path {
        ConfigPath::Explicit(p, how) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                Error::config(
                    how,
                    "--config",
                    format!("cannot read configuration file {}: {e}", p.display()),
                )
            })?;
            (
                parse_toml(&text, p)?,
                Origin::File(p.clone()),
                Some(p.clone()),
            )
        }
        ConfigPath::Default(p) => match std::fs::read_to_string(p) {
            Ok(text) => (
                parse_toml(&text, p)?,
                Origin::File(p.clone()),
                Some(p.clone()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if overrides.watch.is_empty() {
                    return Err(Error::Usage(Usage::NoConfig { path: p.clone() }));
                }
                (RawConfig::default(), Origin::CommandLine, None)
            }
            Err(e) => {
                return Err(Error::config(
                    &Origin::File(p.clone()),
                    "--config",
                    format!("cannot read configuration file: {e}"),
                ));
            }
        },
    };
    build(raw, &origin, source, overrides, only)
}

/// Parses configuration text (used by `load` and by tests).
pub fn from_str(text: &str, file: &Path, overrides: &Overrides, only: &[String]) -> Result<Config> {
    let raw = parse_toml(text, file)?;
    build(
        raw,
        &Origin::File(file.to_path_buf()),
        Some(file.to_path_buf()),
        overrides,
        only,
    )
}

fn parse_toml(text: &str, file: &Path) -> Result<RawConfig> {
    toml::from_str(text).map_err(|e| {
        let key = e
            .span()
            .and_then(|s| text.get(s))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let line = e.span().map(|s| {
            text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1
        });
        Error::Config {
            origin: Origin::File(file.to_path_buf()),
            key: match line {
                Some(l) if !key.is_empty() => format!("line {l}: {key}"),
                Some(l) => format!("line {l}"),
                None => "TOML".into(),
            },
            message: e.message().trim().to_string(),
        }
    })
}

fn build(
    raw: RawConfig,
    origin: &Origin,
    source: Option<PathBuf>,
    overrides: &Overrides,
    only: &[String],
) -> Result<Config> {
    let cli = Origin::CommandLine;
    let rawdb = raw.database.unwrap_or_default();
    let rawrun = raw.run.unwrap_or_default();

    // Watches: select, then overlay the flags.
    let mut watches: Vec<(RawWatch, usize)> = raw
        .watch
        .into_iter()
        .enumerate()
        .map(|(i, w)| (w, i))
        .collect();
    for (w, i) in &watches {
        if w.name.is_none() {
            return Err(Error::config(
                origin,
                format!("watch #{} (the {} [[watch]] table)", i + 1, ordinal(i + 1)),
                "missing key `name`: every watch needs a name",
            ));
        }
    }
    let mut seen = HashSet::new();
    for (w, _) in &watches {
        let n = w.name.clone().unwrap_or_default();
        if !seen.insert(n.clone()) {
            return Err(Error::config(
                origin,
                format!("watch '{n}'"),
                "two watches share this name; names must be unique",
            ));
        }
    }
    let all_watches: Vec<(String, Option<String>)> = watches
        .iter()
        .map(|(w, _)| (w.name.clone().unwrap_or_default(), w.host.clone()))
        .collect();
    if !only.is_empty() {
        for name in only {
            if !watches.iter().any(|(w, _)| w.name.as_deref() == Some(name)) {
                if watches.is_empty() && overrides.watch.name.as_deref() == Some(name) {
                    continue;
                }
                return Err(Error::Usage(Usage::UnknownWatch {
                    name: name.clone(),
                    origin: origin.clone(),
                    known: watches.iter().filter_map(|(w, _)| w.name.clone()).collect(),
                }));
            }
        }
        watches.retain(|(w, _)| only.iter().any(|n| w.name.as_deref() == Some(n)));
    }
    let mut from_flags: Vec<HashSet<&'static str>> = vec![HashSet::new(); watches.len()];
    if !overrides.watch.is_empty() {
        match watches.len() {
            0 => {
                let mut w = RawWatch::default();
                let set = w.overlay(&overrides.watch);
                if w.name.is_none() {
                    w.name = w.table.clone();
                }
                watches.push((w, 0));
                from_flags.push(set);
            }
            1 => from_flags[0] = watches[0].0.overlay(&overrides.watch),
            _ => {
                return Err(Error::Usage(
                    format!(
                        "watch flags (--table, --stale-after, …) apply to one watch, but {} are \
                         selected ({}); pick one with --watch NAME",
                        watches.len(),
                        list_names(&watches)
                    )
                    .into(),
                ));
            }
        }
    }

    let mut out = Vec::with_capacity(watches.len());
    for ((w, _), flags) in watches.iter().zip(&from_flags) {
        out.push(validate_watch(w, origin, flags)?);
    }

    // Database: needed only when there is a watch to check.
    let url_origin = if overrides.db_url.is_some() {
        &cli
    } else {
        origin
    };
    let url = overrides.db_url.clone().or(rawdb.url);
    let tz_origin = if overrides.timezone.is_some() {
        &cli
    } else {
        origin
    };
    let tz = overrides.timezone.clone().or(rawdb.timezone);
    let timezone = match tz {
        None => None,
        Some(s) => Some(s.parse::<chrono_tz::Tz>().map_err(|_| {
            Error::config(
                tz_origin,
                key_name(tz_origin, "database.timezone", "--timezone"),
                format!("expected an IANA time zone name such as \"Asia/Shanghai\" or \"UTC\", got {s:?}"),
            )
        })?),
    };
    let database = match url {
        None if out.is_empty() => None,
        None => {
            return Err(Error::config(
                origin,
                "database.url",
                "missing: set [database] url = \"mysql://user@host/db\" or \"sqlite:///path.db\", or give --db URL",
            ));
        }
        Some(u) => {
            let key = key_name(url_origin, "database.url", "--db");
            let parsed = DbUrl::parse(&u).map_err(|m| Error::config(url_origin, &key, m))?;
            if *url_origin == Origin::CommandLine && parsed.has_password() {
                return Err(Error::config(
                    url_origin,
                    key,
                    "a password on the command line is visible to every user in `ps`; put it \
                     in database.password_file, database.defaults_file or $SELFHEAL_DB_PASSWORD",
                ));
            }
            for (k, p) in [
                ("database.defaults_file", &rawdb.defaults_file),
                ("database.password_file", &rawdb.password_file),
            ] {
                if let Some(p) = p
                    && !p.is_absolute()
                {
                    return Err(Error::config(
                        origin,
                        k,
                        format!("expected an absolute path, got {}", p.display()),
                    ));
                }
            }
            Some(Database {
                url: parsed,
                defaults_file: rawdb.defaults_file,
                password_file: rawdb.password_file,
                timezone,
            })
        }
    };

    let clock_tolerance = match rawrun.clock_tolerance {
        None => DEFAULT_CLOCK_TOLERANCE,
        Some(s) => {
            parse_duration(&s).map_err(|m| Error::config(origin, "run.clock_tolerance", m))?
        }
    };
    for (k, p) in [
        ("run.lock_file", &rawrun.lock_file),
        ("run.state_dir", &rawrun.state_dir),
        ("run.metrics_file", &rawrun.metrics_file),
    ] {
        if let Some(p) = p
            && !p.is_absolute()
        {
            return Err(Error::config(
                origin,
                k,
                format!("expected an absolute path, got {}", p.display()),
            ));
        }
    }
    Ok(Config {
        source,
        database,
        run: Run {
            lock_file: rawrun
                .lock_file
                .unwrap_or_else(|| PathBuf::from(DEFAULT_LOCK_FILE)),
            state_dir: rawrun
                .state_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            metrics_file: rawrun.metrics_file,
            clock_tolerance,
        },
        all_watches: if all_watches.is_empty() {
            out.iter()
                .map(|w| (w.name.clone(), w.host.clone()))
                .collect()
        } else {
            all_watches
        },
        watches: out,
    })
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn list_names(watches: &[(RawWatch, usize)]) -> String {
    if watches.is_empty() {
        return "none".into();
    }
    watches
        .iter()
        .filter_map(|(w, _)| w.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

fn key_name(origin: &Origin, file_key: &str, flag: &str) -> String {
    if *origin == Origin::CommandLine {
        flag.to_string()
    } else {
        file_key.to_string()
    }
}

/// Flag spelling of a watch key (`stale_after` → `--stale-after`).
fn flag_of(key: &str) -> String {
    match key {
        "table" => "--table".into(),
        "name" => "--name".into(),
        _ => format!("--{}", key.replace('_', "-")),
    }
}

fn validate_watch(w: &RawWatch, file: &Origin, flags: &HashSet<&'static str>) -> Result<Watch> {
    let name = w.name.clone().unwrap_or_default();
    let here = |key: &'static str| -> (Origin, String) {
        if flags.contains(key) {
            (Origin::CommandLine, flag_of(key))
        } else {
            (file.clone(), format!("watch '{name}': {key}"))
        }
    };
    let err = |key: &'static str, msg: String| -> Error {
        let (o, k) = here(key);
        Error::config(&o, k, msg)
    };
    let required = |key: &'static str, v: &Option<String>| -> Result<String> {
        v.clone().ok_or_else(|| {
            let (o, k) = here(key);
            let hint = if o == Origin::CommandLine || flags.contains("table") {
                format!(" (or {})", flag_of(key))
            } else {
                String::new()
            };
            Error::config(&o, k, format!("missing: this key is required{hint}"))
        })
    };
    let col =
        |key: &'static str, v: &Option<String>, default: Option<&str>| -> Result<Option<Ident>> {
            match v.as_deref().or(default) {
                None => Ok(None),
                Some(s) => Ident::column(s).map(Some).map_err(|m| err(key, m)),
            }
        };
    let col_or = |key: &'static str, v: &Option<String>, default: &str| -> Result<Ident> {
        Ident::column(v.as_deref().unwrap_or(default)).map_err(|m| err(key, m))
    };
    let value =
        |key: &'static str, v: &Option<String>, default: Option<&str>| -> Result<Option<String>> {
            match v.as_deref().or(default) {
                None => Ok(None),
                Some("") => Err(err(key, "expected a non-empty status value".into())),
                Some(s) if s.len() > 255 => Err(err(key, "expected at most 255 characters".into())),
                Some(s) => Ok(Some(s.to_string())),
            }
        };
    let dur = |key: &'static str, v: &Option<String>| -> Result<Duration> {
        parse_duration(&required(key, v)?).map_err(|m| err(key, m))
    };

    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(err(
            "name",
            format!("expected a name of letters, digits, _, - and . (at most 64), got {name:?}"),
        ));
    }
    let table = Ident::table(&required("table", &w.table)?).map_err(|m| err("table", m))?;
    let id_column = col_or("id_column", &w.id_column, "id")?;
    let status_column = col_or("status_column", &w.status_column, "status")?;
    let running_value = value("running_value", &w.running_value, Some("running"))?
        .unwrap_or_else(|| "running".into());
    let started_column = Ident::column(&required("started_column", &w.started_column)?)
        .map_err(|m| err("started_column", m))?;
    let heartbeat_file = match &w.heartbeat_file {
        None => None,
        Some(s) => Some(PathTemplate::parse(s).map_err(|m| err("heartbeat_file", m))?),
    };
    let heartbeat_column = col("heartbeat_column", &w.heartbeat_column, None)?;
    if heartbeat_file.is_none() && heartbeat_column.is_none() {
        return Err(err(
            "heartbeat_file",
            "no heartbeat source: set heartbeat_file (a file the job touches) or \
             heartbeat_column (a column it updates); age alone is not liveness"
                .into(),
        ));
    }
    let stale_after = dur("stale_after", &w.stale_after)?;
    let max_age = dur("max_age", &w.max_age)?;
    if max_age <= stale_after {
        return Err(err(
            "max_age",
            format!(
                "must be greater than stale_after ({}), got {}; max_age is a backstop well \
                 above the longest real run",
                fmt_duration(stale_after),
                fmt_duration(max_age)
            ),
        ));
    }
    let dead_value =
        value("dead_value", &w.dead_value, Some("error"))?.unwrap_or_else(|| "error".into());
    let manual_value = value("manual_value", &w.manual_value, None)?;
    let retry_value = value("retry_value", &w.retry_value, None)?;
    for (key, v) in [
        ("dead_value", Some(&dead_value)),
        ("manual_value", manual_value.as_ref()),
        ("retry_value", retry_value.as_ref()),
    ] {
        if v == Some(&running_value) {
            return Err(err(
                key,
                format!("must differ from running_value ({running_value:?})"),
            ));
        }
    }
    let attempts_column = col("attempts_column", &w.attempts_column, None)?;
    let retry = match (retry_value, attempts_column, w.max_attempts) {
        (None, None, None) => None,
        (Some(value), Some(attempts_column), Some(n)) => {
            if !(1..=1_000_000).contains(&n) {
                return Err(err(
                    "max_attempts",
                    format!("expected a whole number from 1 to 1000000, got {n}"),
                ));
            }
            Some(Retry {
                value,
                attempts_column,
                max_attempts: n as u32,
            })
        }
        (rv, ac, ma) => {
            let missing: Vec<&str> = [
                ("retry_value", rv.is_none()),
                ("attempts_column", ac.is_none()),
                ("max_attempts", ma.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(k, _)| *k)
            .collect();
            return Err(err(
                "retry_value",
                format!(
                    "retries need retry_value, attempts_column and max_attempts together; missing: {}",
                    missing.join(", ")
                ),
            ));
        }
    };
    let overtime = match w.overtime.as_deref() {
        None | Some("mark_dead") => Overtime::MarkDead,
        Some("manual") => Overtime::Manual,
        Some("report") => Overtime::Report,
        Some(other) => {
            return Err(err(
                "overtime",
                format!("expected one of mark_dead, manual, report; got {other:?}"),
            ));
        }
    };
    if overtime == Overtime::Manual && manual_value.is_none() {
        return Err(err(
            "overtime",
            "overtime = \"manual\" needs manual_value (the status a person looks for)".into(),
        ));
    }
    let lock_file = match &w.lock_file {
        None => None,
        Some(s) => Some(PathTemplate::parse(s).map_err(|m| err("lock_file", m))?),
    };
    let release_lock = match w.release_lock.as_deref() {
        None | Some("never") => ReleaseLock::Never,
        Some("if_free") => ReleaseLock::IfFree,
        Some(other) => {
            return Err(err(
                "release_lock",
                format!("expected \"never\" or \"if_free\", got {other:?}"),
            ));
        }
    };
    if release_lock == ReleaseLock::IfFree && lock_file.is_none() {
        return Err(err(
            "release_lock",
            "release_lock = \"if_free\" needs lock_file".into(),
        ));
    }
    let success_values = match &w.success_values {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(err(
                "success_values",
                "expected at least one status, e.g. [\"done\"]; leave the key out for the \
                 default (every status selfheal does not write itself)"
                    .into(),
            ));
        }
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for s in list {
                let own = [
                    ("running_value", Some(running_value.as_str())),
                    ("dead_value", Some(dead_value.as_str())),
                    ("manual_value", manual_value.as_deref()),
                    ("retry_value", retry.as_ref().map(|r| r.value.as_str())),
                ];
                if let Some((k, _)) = own.iter().find(|(_, v)| *v == Some(s.as_str())) {
                    return Err(err(
                        "success_values",
                        format!(
                            "{s:?} is the {k}: a row with it did not end well on its own \
                             (selfheal writes it, or it is still running)"
                        ),
                    ));
                }
                out.extend(value("success_values", &Some(s.clone()), None)?);
            }
            Some(out)
        }
    };
    let host = match &w.host {
        Some(h) if h.is_empty() || h.contains(char::is_whitespace) => {
            return Err(err("host", format!("expected a host name, got {h:?}")));
        }
        h => h.clone(),
    };
    Ok(Watch {
        name: name.clone(),
        host,
        table,
        id_column,
        status_column,
        running_value,
        started_column,
        heartbeat_file,
        heartbeat_column,
        stale_after,
        max_age,
        dead_value,
        ended_column: col("ended_column", &w.ended_column, None)?,
        message_column: col("message_column", &w.message_column, None)?,
        lock_file,
        owner_column: col("owner_column", &w.owner_column, None)?,
        manual_value,
        retry,
        overtime,
        release_lock,
        success_values,
    })
}

#[cfg(test)]
mod tests;
