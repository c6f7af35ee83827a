//! Configuration: the TOML file of docs/design.md#configuration, overlaid with command-line flags, turned into a
//! typed and validated [`Config`] before any database or file is touched.
//!
//! Reads exactly one file (the configuration itself); everything else is pure. Every error
//! names the file (or the command line), the key, and what was expected, and maps to exit
//! status 2.
//!
//! Here: the file, `[database]`, `[run]` and the choice of watches. Each `[[watch]]` key is
//! defined once in [`keys`] (TOML key, flag, default, per-key check); the typed [`Watch`]
//! and the rules between its keys are in `watch.rs`; the rule between watches (no two
//! may take the same rows) in `overlap.rs`; identifiers, durations and path templates in
//! `values.rs`; the database URL, its identity and its label in `dburl.rs`.

mod dburl;
pub mod keys;
mod lockname;
mod overlap;
mod values;
mod watch;

pub use dburl::{
    DbIdentity, DbUrl, Place, redact_url, unusable_mysql_url, unusable_postgres_url, with_host,
};
pub use keys::{Raw, RawWatch};
pub use lockname::{LockTemplate, MAX_LOCK_NAME, md5_hex};
pub(crate) use overlap::told_apart_by;
pub use values::{Ident, PathTemplate, fmt_duration, parse_duration};
pub use watch::{Overtime, ReleaseLock, Retry, Watch};

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Origin, Result, Usage};

/// Where the configuration is looked for when neither `--config` nor `$SELFHEAL_CONFIG`
/// names one.
pub const DEFAULT_CONFIG: &str = "/etc/selfheal/selfheal.toml";
pub use crate::runlock::RUN_LOCK_NAME;
/// Default directory for the journal and the last-run report of a configuration named
/// `selfheal.toml`; another configuration's is a directory in it (see
/// [`default_state_dir`]).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/selfheal";
/// Default tolerance between the database clock and the host clock.
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(60);
/// Default interval at which the cron text repeats an unchanged problem.
pub const DEFAULT_REMIND_EVERY: Duration = Duration::from_secs(24 * 3600);

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
    #[serde(default, deserialize_with = "keys::duration_text")]
    clock_tolerance: Option<String>,
    #[serde(default, deserialize_with = "keys::duration_text")]
    remind_every: Option<String>,
    host_names: Option<Vec<String>>,
}

/// Values given on the command line that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--db URL`.
    pub db_url: Option<String>,
    /// `--timezone`.
    pub timezone: Option<String>,
    /// Watch keys given as flags (`--table`, `--stale-after`, …), key → value, overlaid
    /// onto the file's watch.
    pub watch: RawWatch,
}

// ---------------------------------------------------------------------------------------
// Validated.

#[derive(Debug, Clone)]
pub struct Database {
    pub url: DbUrl,
    /// Where the URL was given (the file, or `--db`): the store checks what its driver
    /// makes of the URL's options, and says so as this configuration's error
    /// ([`Database::url_error`]).
    pub url_origin: Origin,
    /// A MySQL option file whose client groups (`[client]`, `[mysql]`, …) supply user,
    /// password, host, port and socket where the URL does not (see `store::credentials`).
    pub defaults_file: Option<PathBuf>,
    /// A file holding the password (first line).
    pub password_file: Option<PathBuf>,
    /// How naive DATETIME values were written. `None`: the database's own clock.
    pub timezone: Option<crate::zone::Zone>,
}

impl Database {
    /// An error in the URL, named as the configuration names it (`database.url` in the
    /// file, or `--db`), exit status 2.
    pub fn url_error(&self, message: impl Into<String>) -> Error {
        let key = key_name(&self.url_origin, "database.url", "--db");
        Error::config(&self.url_origin, key, message)
    }
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
    /// The cron text shows a problem when it first appears or changes, then at most this
    /// often (`state_dir/reminders.json` remembers when it last did). Default 24 h.
    pub remind_every: Duration,
    /// Other names this host goes by in owner columns and `host` pins, as written (each
    /// may hold `{hostname}`, this host's own name); compared whole, ignoring case.
    pub host_names: Vec<String>,
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
            let text = std::fs::read_to_string(p).map_err(|e| unreadable(p, Some(how), e))?;
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
            Err(e) => return Err(unreadable(p, None, e)),
        },
    };
    build(raw, &origin, source, overrides, only)
}

/// The configuration file cannot be read: the error says how it was chosen (`--config`,
/// `$SELFHEAL_CONFIG`, or the default when `how` is `None`) and, when it is not this user's
/// to read, names the user. The command that lets that user read it takes a look at the
/// system, so it is chosen where the error is reported (`crate::fix::for_error`).
fn unreadable(p: &Path, how: Option<&Origin>, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    let chosen = match how {
        Some(Origin::CommandLine) => "given with --config".to_string(),
        Some(Origin::Env(name)) => format!("named by ${name}"),
        Some(Origin::File(_)) | None => "the default: no --config given".to_string(),
    };
    let fix = match e.kind() {
        K::NotFound => Some(match how {
            Some(Origin::Env(name)) => {
                format!("correct ${name}, or unset it to use {DEFAULT_CONFIG}")
            }
            _ => "correct the path given with --config".to_string(),
        }),
        K::IsADirectory => Some(format!(
            "name the file, e.g. {}",
            p.join("selfheal.toml").display()
        )),
        _ => None,
    };
    Error::CannotRead {
        what: format!("the configuration {} ({chosen})", p.display()),
        path: p.to_path_buf(),
        as_user: (e.kind() == K::PermissionDenied).then(|| crate::fsafe::Who::me().to_string()),
        source: e,
        fix,
    }
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
        let (message, fix) = match unknown_key(e.message()) {
            Some((typo, known)) => {
                let at = line.map_or_else(
                    || file.display().to_string(),
                    |l| format!("line {l} of {}", file.display()),
                );
                match nearest(&typo, &known) {
                    Some(near) => (
                        format!("unknown key `{typo}`; did you mean `{near}`?"),
                        Some(format!("rename {typo} to {near} ({at})")),
                    ),
                    None => (
                        format!(
                            "unknown key `{typo}`; this table takes {}",
                            known
                                .iter()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        Some(format!(
                            "remove {typo} ({at}), or write one of the keys listed \
                             (selfheal(1), CONFIGURATION)"
                        )),
                    ),
                }
            }
            None => (e.message().trim().to_string(), None),
        };
        Error::Config {
            origin: Origin::File(file.to_path_buf()),
            key: match line {
                Some(l) if !key.is_empty() => format!("line {l}: {key}"),
                Some(l) => format!("line {l}"),
                None => "TOML".into(),
            },
            message,
            fix,
        }
    })
}

/// A duration of `[run]`: at least one second, like every configured duration; a number
/// alone gets the fix that gives it its unit.
fn run_duration(origin: &Origin, key: &str, raw: Option<String>) -> Result<Option<Duration>> {
    let Some(s) = raw else { return Ok(None) };
    parse_duration(&s).map(Some).map_err(|m| {
        let readings: Vec<String> = values::unit_readings(&s)
            .into_iter()
            .map(|(text, _)| format!("\"{text}\""))
            .collect();
        let fix = readings.split_first().map(|(first, rest)| {
            format!(
                "write {key} = {first}{} in [run]: a number needs its unit",
                if rest.is_empty() {
                    String::new()
                } else {
                    format!(" (or {})", rest.join(" or "))
                }
            )
        });
        Error::config(origin, format!("run.{key}"), m).with_fix(fix)
    })
}

/// The key and the keys its table takes, from the TOML reader's "unknown field `X`,
/// expected one of `a`, `b`" (or "expected `a` or `b`", "expected `a`"; "there are no
/// fields" gives none).
fn unknown_key(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.trim().strip_prefix("unknown field `")?;
    let (typo, rest) = rest.split_once('`')?;
    let known = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((typo.to_string(), known))
}

/// The key of `known` that `typo` most likely meant: a transposition, a letter too many,
/// too few or wrong (at most one per three letters), or the same words in another case or
/// with `-` for `_`. `None` when no key is that near.
pub fn nearest<'a>(typo: &str, known: &'a [String]) -> Option<&'a str> {
    let plain = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let typo_plain = plain(typo);
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&typo_plain, &plain(k)), k))
        .filter(|(d, k)| *d <= (k.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
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
        if w.text("name").is_none() {
            return Err(Error::config(
                origin,
                format!("watch #{} (the {} [[watch]] table)", i + 1, ordinal(i + 1)),
                "missing key `name`: every watch needs a name",
            ));
        }
    }
    let mut seen = HashSet::new();
    for (w, _) in &watches {
        let n = w.text("name").unwrap_or_default().to_string();
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
        .map(|(w, _)| {
            (
                w.text("name").unwrap_or_default().to_string(),
                w.text("host").map(str::to_string),
            )
        })
        .collect();
    // Every watch of the file, selected or not: rows may overlap with any of them.
    let file_watches: Vec<RawWatch> = watches.iter().map(|(w, _)| w.clone()).collect();
    if !only.is_empty() {
        for name in only {
            if !watches.iter().any(|(w, _)| w.text("name") == Some(name)) {
                if watches.is_empty() && overrides.watch.text("name") == Some(name) {
                    continue;
                }
                return Err(Error::Usage(Usage::UnknownWatch {
                    name: name.clone(),
                    origin: origin.clone(),
                    known: watches
                        .iter()
                        .filter_map(|(w, _)| w.text("name").map(str::to_string))
                        .collect(),
                }));
            }
        }
        watches.retain(|(w, _)| only.iter().any(|n| w.text("name") == Some(n)));
    }
    let mut from_flags: Vec<HashSet<&'static str>> = vec![HashSet::new(); watches.len()];
    if !overrides.watch.is_empty() {
        match watches.len() {
            0 => {
                let mut w = RawWatch::default();
                let set = w.overlay(&overrides.watch);
                // The name defaults to the table (an empty name, rejected by the name's
                // check, when there is no table either).
                if w.get("name").is_none() {
                    let table = w.text("table").unwrap_or_default().to_string();
                    w.set("name", table).map_err(|m| Error::Usage(m.into()))?;
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
        out.push(watch::validate(w, origin, flags)?);
    }
    overlap::check(&file_watches, &out, origin)?;

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
        Some(s) => Some(crate::zone::Zone::named(&s).ok_or_else(|| {
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
            // Named locks are a database server's (docs/design.md#named-lock): MySQL's
            // GET_LOCK, PostgreSQL's advisory locks; a file database has none to hold.
            if let (DbUrl::Sqlite(_), Some(w)) =
                (&parsed, out.iter().find(|w| !w.db_lock.is_empty()))
            {
                return Err(Error::config(
                    origin,
                    format!("watch '{}': db_lock", w.name),
                    "a named lock (GET_LOCK, pg_advisory_lock) lives in a MySQL/MariaDB or \
                     PostgreSQL server; SQLite has none: leave db_lock out, or watch the job's \
                     heartbeat or lock_file",
                ));
            }
            Some(Database {
                url: parsed,
                url_origin: url_origin.clone(),
                defaults_file: rawdb.defaults_file,
                password_file: rawdb.password_file,
                timezone,
            })
        }
    };

    let clock_tolerance = run_duration(origin, "clock_tolerance", rawrun.clock_tolerance)?
        .unwrap_or(DEFAULT_CLOCK_TOLERANCE);
    let remind_every =
        run_duration(origin, "remind_every", rawrun.remind_every)?.unwrap_or(DEFAULT_REMIND_EVERY);
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
    let state_dir = match rawrun.state_dir {
        Some(d) => d,
        None => default_state_dir(source.as_deref())
            .map_err(|m| Error::config(origin, "run.state_dir", m))?,
    };
    let host_names = rawrun.host_names.unwrap_or_default();
    for (i, n) in host_names.iter().enumerate() {
        check_host_name(n).map_err(|m| Error::config(origin, format!("run.host_names[{i}]"), m))?;
    }
    Ok(Config {
        source,
        database,
        run: Run {
            lock_file: rawrun
                .lock_file
                .unwrap_or_else(|| state_dir.join(RUN_LOCK_NAME)),
            state_dir,
            metrics_file: rawrun.metrics_file,
            clock_tolerance,
            remind_every,
            host_names,
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

/// The state directory of a configuration that sets none: [`DEFAULT_STATE_DIR`] for one
/// named `selfheal.toml` (or for flags alone), `DEFAULT_STATE_DIR/NAME` for one named
/// `NAME.toml`. Several applications on one host, one configuration each, so keep their
/// journals and run locks apart without a setting; and the directory is one the package's
/// state directory holds, so the cron user can create it.
pub fn default_state_dir(config: Option<&Path>) -> Result<PathBuf, String> {
    let Some(file) = config else {
        return Ok(PathBuf::from(DEFAULT_STATE_DIR));
    };
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if stem == "selfheal" {
        return Ok(PathBuf::from(DEFAULT_STATE_DIR));
    }
    let usable = !stem.is_empty()
        && !stem.starts_with('.')
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !usable {
        return Err(format!(
            "not set, and the configuration's file name {:?} makes no directory name \
             (letters, digits, _, - and .): set state_dir = \"{DEFAULT_STATE_DIR}/NAME\"",
            file.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
    }
    Ok(Path::new(DEFAULT_STATE_DIR).join(stem))
}

/// A `[run] host_names` entry: a whole host name, which may hold `{hostname}`.
fn check_host_name(n: &str) -> std::result::Result<(), String> {
    let bare = n.replace(crate::host::HOSTNAME_PLACEHOLDER, "");
    if n.is_empty() {
        Err("expected a host name, got an empty string".into())
    } else if n.contains(char::is_whitespace) || n.contains(':') {
        Err(format!(
            "expected a host name as owner columns write it before `:PID` (no spaces, no \
             `:`), got {n:?}"
        ))
    } else if bare.contains(['{', '}']) {
        Err(format!(
            "expected a host name; the only placeholder is {{hostname}} (this host's own \
             name), got {n:?}"
        ))
    } else {
        Ok(())
    }
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
        .filter_map(|(w, _)| w.text("name"))
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

#[cfg(test)]
mod tests;
