//! `selfheal init`: the first five minutes. Reads a job table no watch names yet — its
//! columns, types, indexes and the statuses its rows hold (counted, bounded) —,
//! recognises the recipes ([`recognise`]), proposes a configuration with every value's
//! origin beside it ([`plan`], [`render`]), and shows what `check --explain` says about
//! today's running rows under it: the real judgement, run here as a dry run.
//!
//! Everything printed on stdout is the configuration or comments, so the output loads as
//! it is. Nothing is written but `--write FILE`, which must not exist (created whole or
//! not at all, never over another file: [`crate::fsafe::Dir::write_new`]).
//!
//! I/O: the configuration named by `--config` (for its `[database]`), the database (read
//! only; the count of values is bounded: the whole of a small table, through an index
//! that starts with the status column, or else the latest rows by primary key), what a
//! dry run of `check` reads, and the `--write` file.

pub mod plan;
pub mod recognise;
pub mod render;

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::check::{self, CheckOptions};
use crate::clock::human;
use crate::config::{
    self, Config, ConfigPath, Database, DbUrl, Ident, Overrides, fmt_duration, keys,
};
use crate::error::{Error, Origin, Result, exit};
use crate::escape::printable;
use crate::history::{self, Recent};
use crate::person::shell_word;
use crate::report::TextReporter;
use crate::store::survey::{CountScope, Survey, TableInfo, Tables};
use crate::store::{self, SqlValue, Store};
use plan::{Ctx, Entry, NoWatch, Seen, Val, WatchPlan, count, thousands};
use recognise::{Mapping, Recipe, Unmappable};

/// `selfheal init`'s options.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// The database (no password: `--password-file`, `--defaults-file` or
    /// `$SELFHEAL_DB_PASSWORD` give it).
    pub url: Option<String>,
    /// The job table; without it, the one table that looks like a job table.
    pub table: Option<String>,
    /// Write the proposal here (a file that does not exist).
    pub write: Option<PathBuf>,
    /// A configuration whose `[database]` to use.
    pub config: Option<PathBuf>,
    pub defaults_file: Option<PathBuf>,
    pub password_file: Option<PathBuf>,
}

/// A table no larger than this is counted whole, without an index.
const COUNT_WHOLE_MAX: u64 = 100_000;
/// A larger one without an index on the status is counted in its latest rows only.
const SAMPLE_ROWS: u32 = 10_000;
/// At most this many (status, kind) combinations are counted.
const VALUES_MAX: u32 = 2_000;
/// At most this many columns, over all tables, are listed to find the job tables.
const TABLES_MAX: u32 = 50_000;
/// The dry run's text is cut after this many lines.
const EXPLAIN_LINES: usize = 60;

/// Runs `selfheal init`, printing to `out`.
pub fn run(opts: &InitOptions, out: &mut dyn Write) -> Result<u8> {
    let cmd = Command { opts };
    let target = match &opts.write {
        Some(p) => Some(write_target(p, &cmd)?),
        None => None,
    };
    let source = source(opts)?;
    let mut store = store::open(&source.db, true)?;
    let server = store.describe_server().ok();
    let label = source.db.url.label();
    let survey = store.survey().ok_or_else(|| {
        Error::Usage(
            format!(
                "selfheal init cannot read the tables of {label} yet; describe the watch \
                 by hand (selfheal(1), CONFIGURATION)"
            )
            .into(),
        )
    })?;
    let tables = survey.tables(None, TABLES_MAX)?;
    let (table, table_from) = choose_table(opts, &tables, &cmd)?;
    let Some(info) = survey.table_info(&table)? else {
        return Err(missing_table(&table, &tables, &label, &cmd));
    };
    let neighbours: Vec<String> = tables.tables.iter().map(|(t, _)| t.clone()).collect();
    let mapping = recognise::map_columns(&table.to_string(), &info, &neighbours)
        .map_err(|u| unmappable(&table, &info, &u, &tables, &cmd))?;
    let seen = count_values(survey, &table, &info, &mapping)?;
    let known = |k: &str| keys::watch_key(k).is_some();
    let table_text = table.to_string();
    let ctx = Ctx {
        table: &table_text,
        table_from: &table_from,
        known: &known,
    };
    let mut watches = plan::plan(&mapping, &seen, &ctx).map_err(|n| no_watch(&table, &n, &cmd))?;
    let file = target
        .clone()
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG));
    let mut database = source.entries.clone();
    if matches!(mapping.recipe, Recipe::Magento1 { .. })
        && mapping.started_is_naive
        && source.db.timezone.is_none()
    {
        database.push(
            Entry::new("timezone", Val::Text("UTC".into()), "Magento 1 writes UTC").about(
                "Magento 1 sets PHP's time zone to UTC and writes its times so, into \
                 DATETIME columns that carry no zone.",
            ),
        );
    }
    let run_entries = run_section(&file);
    let header = header(&mapping, &info, &seen, &label, server.as_deref(), &table);
    let doc = |watches: &[WatchPlan]| {
        render::render(&render::Document {
            header: &header,
            database: &database,
            run: &run_entries,
            watches,
        })
    };
    let mut cfg = loadable(&mut watches, &doc, &file)?;
    if !cfg.watches.is_empty() && raise_from_history(store.as_mut(), &source.db, &cfg, &mut watches)
    {
        cfg = loadable(&mut watches, &doc, &file)?;
    }
    let text = doc(&watches);
    write_text(out, &text)?;
    drop(store);
    // The dry run connects as this run did (a password the proposal leaves out).
    if let Some(d) = cfg.database.as_mut() {
        *d = Database {
            timezone: d.timezone,
            ..source.db.clone()
        };
    }
    let mut tail = Vec::new();
    tail.push(String::new());
    let file_arg = match &target {
        Some(p) => shell_word(&p.display().to_string()).into_owned(),
        None => "FILE".into(),
    };
    tail.extend(render::comment(&format!(
        "--- What selfheal check --explain --config {file_arg} says about today's running \
         rows under this configuration (judged here, as a dry run: nothing was written):"
    )));
    tail.push("#".into());
    tail.extend(explain(&cfg, &mapping, &info, &table, &file_arg));
    match &target {
        Some(path) => {
            write_file(path, &text, &cmd)?;
            tail.push(String::new());
            tail.extend(render::comment(&format!(
                "Written to {} (the configuration above, without this last part). Next: \
                 selfheal doctor --config {p}, then selfheal check --explain --config {p}.",
                path.display(),
                p = shell_word(&path.display().to_string())
            )));
        }
        None => {
            tail.push(String::new());
            tail.extend(render::comment(&format!(
                "Nothing was written. To write it: {} --write FILE (a file that does not \
                 exist yet); then selfheal doctor --config FILE.",
                cmd.line(None, None)
            )));
        }
    }
    write_text(out, &(tail.join("\n") + "\n"))?;
    Ok(exit::OK)
}

/// The command as it was given, for fixes a person can paste: with another table or
/// another file.
struct Command<'a> {
    opts: &'a InitOptions,
}

impl Command<'_> {
    fn line(&self, table: Option<&str>, write: Option<&Path>) -> String {
        let o = self.opts;
        let mut words = vec!["selfheal".to_string(), "init".to_string()];
        let mut add = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                words.push(flag.to_string());
                words.push(shell_word(&v).into_owned());
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        add("--config", path(&o.config));
        add("--url", o.url.clone());
        add("--defaults-file", path(&o.defaults_file));
        add("--password-file", path(&o.password_file));
        add(
            "--table",
            table.map(str::to_string).or_else(|| o.table.clone()),
        );
        add(
            "--write",
            write
                .map(|p| p.display().to_string())
                .or_else(|| path(&o.write)),
        );
        words.join(" ")
    }
}

fn write_text(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::Io {
            path: PathBuf::from("(standard output)"),
            action: "writing",
            source: e,
        })
}

// ---------------------------------------------------------------------------------------
// The database

/// The database to read, and its `[database]` lines.
struct Source {
    db: Database,
    entries: Vec<Entry>,
}

/// `--url` (with the other settings of `--config`, if given), else the `[database]` of
/// `--config`, `$SELFHEAL_CONFIG` or the default configuration.
fn source(opts: &InitOptions) -> Result<Source> {
    let cli = Origin::CommandLine;
    if let Some(url) = &opts.url {
        let parsed = DbUrl::parse(url).map_err(|m| Error::config(&cli, "--url", m))?;
        if parsed.has_password() {
            return Err(Error::config(
                &cli,
                "--url",
                "a password on the command line is visible to every user in `ps`",
            )
            .with_fix(Some(
                "give the URL without it, and the password in a file: --password-file FILE \
                 (or --defaults-file FILE, or $SELFHEAL_DB_PASSWORD)"
                    .into(),
            )));
        }
    }
    let path = match (&opts.config, &opts.url) {
        (Some(p), _) => Some(ConfigPath::Explicit(p.clone(), cli.clone())),
        (None, Some(_)) => None,
        (None, None) => match ConfigPath::resolve(None) {
            ConfigPath::Default(p) if !p.exists() => None,
            found => Some(found),
        },
    };
    let (mut db, file) = match path {
        Some(p) => {
            let file = match &p {
                ConfigPath::Explicit(f, _) | ConfigPath::Default(f) => f.clone(),
            };
            let overrides = Overrides {
                db_url: opts.url.clone(),
                ..Overrides::default()
            };
            match config::load(&p, &overrides, &[])?.database {
                Some(db) => (db, Some(file)),
                None => return Err(no_database(Some(&file))),
            }
        }
        None => {
            let Some(url) = &opts.url else {
                return Err(no_database(None));
            };
            let parsed = DbUrl::parse(url).map_err(|m| Error::config(&cli, "--url", m))?;
            let db = Database {
                url: parsed,
                url_origin: cli.clone(),
                defaults_file: None,
                password_file: None,
                timezone: None,
            };
            (db, None)
        }
    };
    for (flag, given, field) in [
        (
            "--defaults-file",
            &opts.defaults_file,
            &mut db.defaults_file,
        ),
        (
            "--password-file",
            &opts.password_file,
            &mut db.password_file,
        ),
    ] {
        if let Some(p) = given {
            if !p.is_absolute() {
                return Err(Error::config(
                    &cli,
                    flag,
                    format!("expected an absolute path, got {}", p.display()),
                ));
            }
            *field = Some(p.clone());
        }
    }
    let entries = database_entries(&db, opts, file.as_deref());
    Ok(Source { db, entries })
}

fn no_database(file: Option<&Path>) -> Error {
    let message = match file {
        Some(f) => format!("{} has no [database] url", f.display()),
        None => format!(
            "no database: {} does not exist and no --url was given",
            config::DEFAULT_CONFIG
        ),
    };
    Error::config(&Origin::CommandLine, "--url", message).with_fix(Some(
        "selfheal init --url mysql://USER@localhost/DATABASE?socket=/run/mysqld/mysqld.sock \
         (or sqlite:///path/to/app.db)"
            .into(),
    ))
}

/// The `[database]` lines: where each setting came from.
fn database_entries(db: &Database, opts: &InitOptions, file: Option<&Path>) -> Vec<Entry> {
    let from_file = |what: &str| match file {
        Some(f) => format!("from [database] {what} of {}", f.display()),
        None => String::new(),
    };
    let (url, stripped) = url_text(&db.url);
    let mut url_entry = Entry::new(
        "url",
        Val::Text(url),
        if opts.url.is_some() {
            "from --url".to_string()
        } else {
            from_file("url")
        },
    );
    if stripped {
        url_entry.about.push(
            "The password in the URL of the configuration read is left out here: give it with \
             password_file, defaults_file or $SELFHEAL_DB_PASSWORD."
                .into(),
        );
    }
    let mut out = vec![url_entry];
    for (key, value, flag, given) in [
        (
            "defaults_file",
            &db.defaults_file,
            "--defaults-file",
            &opts.defaults_file,
        ),
        (
            "password_file",
            &db.password_file,
            "--password-file",
            &opts.password_file,
        ),
    ] {
        if let Some(p) = value {
            let from = if given.is_some() {
                format!("from {flag}")
            } else {
                from_file(key)
            };
            out.push(Entry::new(key, Val::Text(p.display().to_string()), from));
        }
    }
    if let Some(tz) = db.timezone {
        out.push(Entry::new(
            "timezone",
            Val::Text(tz.name().to_string()),
            from_file("timezone"),
        ));
    }
    let server = matches!(db.url, DbUrl::Mysql(_));
    if server && db.defaults_file.is_none() && db.password_file.is_none() {
        let mut e = Entry::new(
            "password_file",
            Val::Text("/etc/selfheal/db-password".into()),
            "if the account needs a password",
        );
        e.on = false;
        e.about.push(
            "A password, where the account needs one: from this file (its first line), from \
             defaults_file (a MySQL option file) or $SELFHEAL_DB_PASSWORD; never in the URL."
                .into(),
        );
        out.push(e);
    }
    out
}

/// The URL as the configuration writes it, without any password (true when one was left
/// out).
fn url_text(url: &DbUrl) -> (String, bool) {
    match url {
        DbUrl::Sqlite(p) => (format!("sqlite://{}", p.display()), false),
        DbUrl::Mysql(u) => {
            if !url.has_password() {
                return (u.clone(), false);
            }
            let Some((scheme, rest)) = u.split_once("://") else {
                return (u.clone(), false);
            };
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at_checked(end).unwrap_or((rest, ""));
            let authority = match authority.rsplit_once('@') {
                Some((user, host)) => {
                    let user = user.split_once(':').map_or(user, |(u, _)| u);
                    format!("{user}@{host}")
                }
                None => authority.to_string(),
            };
            (format!("{scheme}://{authority}{tail}"), true)
        }
    }
}

/// `[run]`: where the state goes, as the default for this file's name says.
fn run_section(file: &Path) -> Vec<Entry> {
    let Ok(dir) = config::default_state_dir(Some(file)) else {
        return Vec::new();
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut e = Entry::new(
        "state_dir",
        Val::Text(dir.display().to_string()),
        format!("the default for a file named {name}"),
    );
    e.on = false;
    vec![e]
}

// ---------------------------------------------------------------------------------------
// The table

/// The table asked for, or the one table of the database that looks like a job table.
fn choose_table(opts: &InitOptions, tables: &Tables, cmd: &Command<'_>) -> Result<(Ident, String)> {
    let cli = Origin::CommandLine;
    if let Some(t) = &opts.table {
        let ident = Ident::table(t).map_err(|m| Error::config(&cli, "--table", m))?;
        return Ok((ident, "from --table".into()));
    }
    let candidates = job_tables(tables);
    match candidates.as_slice() {
        [(only, _)] => {
            let ident = Ident::table(only).map_err(|m| Error::config(&cli, "--table", m))?;
            Ok((
                ident,
                "the one table here with a status and a start column".into(),
            ))
        }
        [] => Err(Error::config(
            &cli,
            "--table",
            format!(
                "no table of {} looks like a job table (a status column and a start \
                 column); name the table with --table TABLE",
                where_(tables)
            ),
        )),
        [(first, _), ..] => Err(Error::config(
            &cli,
            "--table",
            format!(
                "missing: {} tables of {} look like job tables ({}); name one",
                candidates.len(),
                where_(tables),
                listed(&candidates)
            ),
        )
        .with_fix(Some(cmd.line(Some(first), None)))),
    }
}

fn where_(tables: &Tables) -> String {
    match &tables.database {
        Some(db) => format!("database {db}"),
        None => "the database".into(),
    }
}

/// The tables whose columns make them look like job tables: the table, and its status
/// and start columns.
fn job_tables(tables: &Tables) -> Vec<(String, String)> {
    tables
        .tables
        .iter()
        .filter(|(t, _)| Ident::table(t).is_ok())
        .filter_map(|(t, cols)| {
            recognise::looks_like_job_table(cols).map(|(s, st)| (t.clone(), format!("{s}, {st}")))
        })
        .collect()
}

/// `sync_log (status, start_time), cron_schedule (status, executed_at)`, at most 10.
fn listed(tables: &[(String, String)]) -> String {
    let mut shown: Vec<String> = tables
        .iter()
        .take(10)
        .map(|(t, c)| format!("{} ({c})", printable(t)))
        .collect();
    if tables.len() > 10 {
        shown.push(format!("and {} more", tables.len() - 10));
    }
    shown.join(", ")
}

fn missing_table(table: &Ident, tables: &Tables, label: &str, cmd: &Command<'_>) -> Error {
    let candidates = job_tables(tables);
    let names: Vec<String> = tables.tables.iter().map(|(t, _)| t.clone()).collect();
    let near = config::nearest(table.name(), &names).map(str::to_string);
    let message = match (&near, candidates.is_empty()) {
        (_, false) => format!(
            "no table {table} in {} ({label}); tables there that look like job tables: {}",
            where_(tables),
            listed(&candidates)
        ),
        (Some(n), true) => format!(
            "no table {table} in {} ({label}); did you mean {n}? No table there looks like \
             a job table (a status column and a start column)",
            where_(tables)
        ),
        (None, true) => format!(
            "no table {table} in {} ({label}), and no table there looks like a job table \
             (a status column and a start column)",
            where_(tables)
        ),
    };
    let fix = near
        .filter(|n| candidates.iter().any(|(c, _)| c == n) || candidates.is_empty())
        .or_else(|| candidates.first().map(|(c, _)| c.clone()))
        .map(|t| cmd.line(Some(&t), None));
    Error::config(&Origin::CommandLine, "--table", message).with_fix(fix)
}

fn unmappable(
    table: &Ident,
    info: &TableInfo,
    why: &Unmappable,
    tables: &Tables,
    cmd: &Command<'_>,
) -> Error {
    let has: Vec<String> = info
        .columns
        .iter()
        .take(16)
        .map(|(n, c)| format!("{} {}", printable(n), recognise::type_words(c)))
        .collect();
    let more = info.columns.len().saturating_sub(16);
    let others: Vec<(String, String)> = job_tables(tables)
        .into_iter()
        .filter(|(t, _)| !t.eq_ignore_ascii_case(table.name()))
        .collect();
    let mut message = format!(
        "table {table} cannot be watched: {}. It has {}{}",
        why.what(),
        has.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    if !others.is_empty() {
        let _ = write!(
            message,
            "; tables that look like job tables: {}",
            listed(&others)
        );
    }
    Error::config(&Origin::CommandLine, "--table", message)
        .with_fix(others.first().map(|(t, _)| cmd.line(Some(t), None)))
}

fn no_watch(table: &Ident, n: &NoWatch, _cmd: &Command<'_>) -> Error {
    let message = match n {
        NoWatch::NoRunningValue { column, values } => format!(
            "table {table} cannot be watched: no value of its status column {column} says \
             running ({}), and which one means a running job only the application knows; \
             describe the watch by hand with running_value (selfheal(1), CONFIGURATION)",
            if values.is_empty() {
                "no row holds one".to_string()
            } else {
                values
                    .iter()
                    .take(12)
                    .map(|v| printable(v).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        NoWatch::NoDeadValue {
            column,
            ty,
            widened,
        } => format!(
            "table {table} cannot be watched: its status column {column} ({ty}) cannot hold \
             a status for a failed run (error){}",
            widened
                .as_ref()
                .map(|w| format!("; it could as {w}"))
                .unwrap_or_default()
        ),
    };
    Error::config(&Origin::CommandLine, "--table", message)
}

// ---------------------------------------------------------------------------------------
// The values the rows hold

/// Counts the statuses (and, where job kinds may get a watch each, the kinds): the whole
/// of a small table; through an index that starts with the status column; else the latest
/// rows by the primary key. Never a scan of a large table.
fn count_values(
    survey: &mut dyn Survey,
    table: &Ident,
    info: &TableInfo,
    m: &Mapping,
) -> Result<Seen> {
    let column = |p: &recognise::Pick| Ident::column(&p.column).ok();
    let status = column(&m.status).ok_or_else(|| Error::Usage("bad status column".into()))?;
    let kind = m
        .kind
        .as_ref()
        .filter(|_| !m.recipe.is_magento() && m.heartbeat.is_none())
        .and_then(column);
    let id = column(&m.id);
    let index = m
        .status_index
        .as_ref()
        .and_then(|ix| Ident::column(ix).ok());
    let about = info.rows.map_or_else(
        || "an unknown number of".to_string(),
        |n| format!("about {}", thousands(n)),
    );
    let small = info.rows.is_some_and(|n| n <= COUNT_WHOLE_MAX);
    let id_is_primary = info.primary_key.len() == 1
        && id
            .as_ref()
            .is_some_and(|i| info.primary_key[0].eq_ignore_ascii_case(i.name()));
    let (scope, columns, words): (CountScope<'_>, Vec<&Ident>, String) = match (small, &index, &id)
    {
        (true, _, _) => (
            CountScope::Table,
            [Some(&status), kind.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
            "all rows".into(),
        ),
        (false, Some(ix), _) => (
            CountScope::Index(ix),
            vec![&status],
            format!("all {about} rows, through the index {}", ix.name()),
        ),
        (false, None, Some(key)) if id_is_primary => (
            CountScope::Latest {
                key,
                rows: SAMPLE_ROWS,
            },
            [Some(&status), kind.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
            format!(
                "the latest {} rows by {} only (the table holds {about}, and no index \
                     starts with {}: not counted whole)",
                thousands(u64::from(SAMPLE_ROWS)),
                key.name(),
                status.name()
            ),
        ),
        (false, None, _) => {
            return Ok(Seen {
                rows: Vec::new(),
                scope: format!(
                    "not counted: the table holds {about} rows and neither an index on \
                         {} nor a primary key bounds the count",
                    status.name()
                ),
                whole: false,
            });
        }
    };
    let counted = survey.count_values(table, &columns, scope, VALUES_MAX)?;
    let whole = matches!(scope, CountScope::Table | CountScope::Index(_));
    let total: u64 = counted.iter().map(|(_, n)| n).sum();
    let words = match scope {
        CountScope::Table => format!("all {} rows", thousands(total)),
        _ => words,
    };
    let text = |v: &SqlValue| match v {
        SqlValue::Null => "NULL".to_string(),
        other => other.to_string(),
    };
    let rows = counted
        .into_iter()
        .map(|(values, n)| {
            let s = values.first().map(text).unwrap_or_default();
            let k = if columns.len() > 1 {
                values.get(1).map(text)
            } else {
                None
            };
            (s, k, n)
        })
        .collect::<Vec<_>>();
    let truncated = rows.len() >= VALUES_MAX as usize;
    Ok(Seen {
        rows,
        scope: if truncated {
            format!("{words}; the {VALUES_MAX} most common values only")
        } else {
            words
        },
        whole: whole && !truncated,
    })
}

// ---------------------------------------------------------------------------------------
// The proposal

/// The paragraphs at the top: what was read, what was recognised, what the values say.
fn header(
    m: &Mapping,
    info: &TableInfo,
    seen: &Seen,
    label: &str,
    server: Option<&str>,
    table: &Ident,
) -> Vec<String> {
    let mut out = vec![format!(
        "selfheal configuration proposed by selfheal init for table {table} of {label}{}. \
         Each setting says where its value came from.",
        server.map(|s| format!(" ({s})")).unwrap_or_default()
    )];
    out.push(if m.recognised.is_empty() {
        "Not a table selfheal has a recipe for: each column below was chosen by its name and \
         type."
            .to_string()
    } else {
        format!("Recognised: {}.", m.recognised)
    });
    let indexes: Vec<String> = info
        .indexes
        .iter()
        .map(|ix| format!("{} ({})", ix.name, ix.columns.join(", ")))
        .collect();
    let statuses: Vec<String> = seen
        .statuses()
        .iter()
        .take(12)
        .map(|(s, n)| format!("{s} {}", thousands(*n)))
        .collect();
    out.push(format!(
        "Read: {}; primary key {}; {}. Statuses of {}: {}.",
        count(info.columns.len() as u64, "column"),
        if info.primary_key.is_empty() {
            "none".to_string()
        } else {
            info.primary_key.join(", ")
        },
        match indexes.len() {
            0 => "no other index".to_string(),
            1 => format!("index {}", indexes.join(", ")),
            _ => format!("indexes {}", indexes.join(", ")),
        },
        seen.scope,
        if statuses.is_empty() {
            "none".to_string()
        } else {
            statuses.join(", ")
        }
    ));
    if m.status_index.is_none() {
        out.push(format!(
            "No index starts with {}: each check reads the whole table to find the running \
             rows{}. selfheal doctor shows the CREATE INDEX that avoids it.",
            m.status.column,
            info.rows
                .map(|n| format!(" (about {} now)", count(n, "row")))
                .unwrap_or_default()
        ));
    }
    out
}

/// Loads the rendered proposal as `check` would. A watch the configuration refuses (a key
/// this selfheal reads differently) is commented out, with the reason, and the rest loads.
fn loadable(
    watches: &mut [WatchPlan],
    doc: &dyn Fn(&[WatchPlan]) -> String,
    file: &Path,
) -> Result<Config> {
    let load = |text: &str| config::from_str(text, file, &Overrides::default(), &[]);
    match load(&doc(watches)) {
        Ok(cfg) => return Ok(cfg),
        Err(e) => {
            let message = e.to_string();
            let named: Vec<usize> = watches
                .iter()
                .enumerate()
                .filter(|(_, w)| w.active && message.contains(&format!("watch '{}'", w.name)))
                .map(|(i, _)| i)
                .collect();
            for (i, w) in watches.iter_mut().enumerate() {
                if w.active && (named.is_empty() || named.contains(&i)) {
                    w.active = false;
                    w.intro.push(format!(
                        "The watch is commented out: this selfheal does not load it ({}).",
                        message
                    ));
                }
            }
        }
    }
    load(&doc(watches)).map_err(|e| {
        Error::Usage(
            format!("the configuration selfheal init proposes does not load (a fault of selfheal init): {e}")
                .into(),
        )
    })
}

/// Raises a `max_age` guess below 1.5× the longest recent run that ended well (the rule
/// every `check` warns by), and says what the history showed. True when a value changed.
fn raise_from_history(
    store: &mut dyn Store,
    db: &Database,
    cfg: &Config,
    watches: &mut [WatchPlan],
) -> bool {
    let Ok(clocks) = store::clocks(store, db, config::DEFAULT_CLOCK_TOLERANCE) else {
        return false;
    };
    let mut changed = false;
    for w in &cfg.watches {
        let Some(plan) = watches.iter_mut().find(|p| p.name == w.name) else {
            continue;
        };
        let Ok(schema) = store.schema(w) else {
            continue;
        };
        let Ok(Recent::Runs(runs)) = history::recent_runs(store, w, &schema, &clocks) else {
            continue;
        };
        let Some((longest, id)) = &runs.longest else {
            continue;
        };
        let Some(entry) = plan.entry_mut("max_age") else {
            continue;
        };
        let guess = fmt_duration(w.max_age);
        let run = format!(
            "the longest recent run that ended well, {} (id={})",
            human(*longest),
            history::id_key(id)
        );
        if history::max_age_too_low(w.max_age.as_secs(), *longest) {
            let at_least = history::max_age_floor(*longest);
            entry.value = Val::Text(fmt_duration(std::time::Duration::from_secs(at_least)));
            entry.about.push(format!(
                "The guess was {guess}: raised to 1.5× {run}, as check would warn."
            ));
            entry.from = "1.5× the longest recent run".into();
        } else {
            entry.about.push(format!(
                "The longest recent run that ended well took {} (id={}): the guess is above \
                 1.5× that.",
                human(*longest),
                history::id_key(id)
            ));
        }
        changed = true;
    }
    changed
}

// ---------------------------------------------------------------------------------------
// The dry run

/// Lines a reporter writes, kept (at most [`EXPLAIN_LINES`]) and counted.
#[derive(Clone, Default)]
struct Captured(Rc<RefCell<(Vec<u8>, usize)>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut inner = self.0.borrow_mut();
        let (bytes, lines) = &mut *inner;
        for &b in buf {
            if *lines < EXPLAIN_LINES {
                bytes.push(b);
            }
            if b == b'\n' {
                *lines += 1;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `check --explain` says under the proposal, as comment lines; or why it was not
/// run here.
fn explain(cfg: &Config, m: &Mapping, info: &TableInfo, table: &Ident, file: &str) -> Vec<String> {
    let rerun = format!("selfheal check --explain --config {file}");
    if cfg.watches.is_empty() {
        return render::comment(
            "Nothing to judge: no watch above is active (each says why it is commented out).",
        );
    }
    if m.status_index.is_none() && info.rows.is_none_or(|n| n > COUNT_WHOLE_MAX) {
        return render::comment(&format!(
            "Not judged here: check would read all of {} rows of {table} to find the running \
             ones (no index starts with {}). Add the index first — CREATE INDEX \
             idx_{}_{} ON {table} ({}) — then run {rerun}.",
            info.rows
                .map_or_else(|| "an unknown number of".to_string(), thousands),
            m.status.column,
            table.name(),
            m.status.column,
            m.status.column
        ));
    }
    let captured = Captured::default();
    let mut rep = TextReporter {
        out: captured.clone(),
        err: captured.clone(),
        explain: true,
        dry_run: true,
        spoke: false,
        lines: crate::report::text::RowLines::default(),
    };
    let opts = CheckOptions {
        dry_run: true,
        force: false,
        remind: false,
    };
    let result = check::run(cfg, &opts, &mut rep);
    let (bytes, lines) = captured.0.borrow().clone();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.is_empty() {
                "#".to_string()
            } else {
                format!("# {l}")
            }
        })
        .collect();
    if lines > EXPLAIN_LINES {
        out.extend(render::comment(&format!(
            "… and {} more lines: {rerun} shows them all.",
            thousands((lines - EXPLAIN_LINES) as u64)
        )));
    }
    if let Err(e) = result {
        out.extend(render::comment(&format!(
            "check stopped: {}",
            printable(&e.full_message())
        )));
        if let Some(fix) = crate::fix::for_error(&e, "check --explain") {
            out.extend(render::comment(&format!("fix: {}", printable(&fix))));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// --write

/// The file `--write` names, absolute; refused at once when something is there already,
/// or its directory is missing (before the database is even opened).
fn write_target(p: &Path, cmd: &Command<'_>) -> Result<PathBuf> {
    let cli = Origin::CommandLine;
    let path = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::Io {
                path: p.to_path_buf(),
                action: "finding the current directory for",
                source: e,
            })?
            .join(p)
    };
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(exists(&path, cmd));
    }
    match path.parent() {
        Some(dir) if dir.is_dir() => Ok(path),
        _ => Err(Error::config(
            &cli,
            "--write",
            format!(
                "{}: its directory does not exist; selfheal init creates the file, not the \
                 directory",
                path.display()
            ),
        )),
    }
}

fn exists(path: &Path, cmd: &Command<'_>) -> Error {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|s| format!(".{}", s.to_string_lossy()))
        .unwrap_or_default();
    let free = (1..100)
        .map(|i| {
            let n = if i == 1 {
                format!("{stem}.new{ext}")
            } else {
                format!("{stem}.new{i}{ext}")
            };
            path.with_file_name(n)
        })
        .find(|p| std::fs::symlink_metadata(p).is_err());
    Error::config(
        &Origin::CommandLine,
        "--write",
        format!(
            "{} exists already: selfheal init never overwrites a file",
            path.display()
        ),
    )
    .with_fix(free.map(|p| cmd.line(None, Some(&p))))
}

/// Writes the proposal to `path`, which must still not exist.
fn write_file(path: &Path, text: &str, cmd: &Command<'_>) -> Result<()> {
    let refused = |e| Error::Refused {
        action: "writing the configuration (--write)",
        refused: Box::new(e),
    };
    let (dir, name) = crate::fsafe::Dir::open_parent(path).map_err(refused)?;
    let wrote = dir
        .write_new(&name, 0o644, |f| f.write_all(text.as_bytes()))
        .map_err(refused)?;
    if wrote {
        Ok(())
    } else {
        Err(exists(path, cmd))
    }
}

#[cfg(test)]
mod tests;
