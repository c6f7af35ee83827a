//! What `init` reads of the database: the table `--table` names (else the one table there
//! that looks like a job table), its shape, and the values its rows hold, counted bounded —
//! the whole of a small table, through an index that starts with the status column, else
//! the latest rows by primary key; never a scan of a large table. A table that is missing
//! or cannot be watched is the command line's error, with the job tables the database has.
//! I/O: the database, read only, through [`crate::store::survey`].

use std::fmt::Write as _;

use super::plan::{NoWatch, Seen, thousands};
use super::recognise::{self, Mapping, Unmappable};
use super::{Command, InitOptions};
use crate::config::{self, Ident};
use crate::error::{Error, Origin, Result};
use crate::escape::printable;
use crate::store::survey::{CountScope, Survey, TableInfo, Tables};
use crate::store::{SqlValue, Store};

/// A table no larger than this is counted whole, without an index.
pub(super) const COUNT_WHOLE_MAX: u64 = 100_000;
/// A larger one without an index on the status is counted in its latest rows only.
const SAMPLE_ROWS: u32 = 10_000;
/// At most this many (status, kind) combinations are counted.
const VALUES_MAX: u32 = 2_000;
/// At most this many columns, over all tables, are listed to find the job tables.
const TABLES_MAX: u32 = 50_000;

/// What was read of the database: the table, what it is, the values its rows hold.
pub(super) struct Read {
    pub(super) table: Ident,
    /// Where the table's name came from (`from --table`).
    pub(super) table_from: String,
    pub(super) info: TableInfo,
    pub(super) mapping: Mapping,
    pub(super) seen: Seen,
    /// The database as messages name it, and the server's version.
    pub(super) label: String,
    pub(super) server: Option<String>,
}

/// Reads the table (the one `--table` names, else the one job table there), its shape and
/// its values; a table that is missing or cannot be watched is the command line's error.
pub(super) fn read_table(
    store: &mut dyn Store,
    opts: &InitOptions,
    label: String,
    cmd: &Command<'_>,
) -> Result<Read> {
    let server = store.describe_server().ok();
    let survey = store.survey().ok_or_else(|| {
        Error::Usage(
            format!(
                "selfheal init cannot read the tables of {label} yet; describe the watch \
                 by hand (selfheal(1), CONFIGURATION)"
            )
            .into(),
        )
    })?;
    let given = match &opts.table {
        Some(t) => {
            Some(Ident::table(t).map_err(|m| Error::config(&Origin::CommandLine, "--table", m))?)
        }
        None => None,
    };
    // The tables of the database the table is in (`db.table`), else the connection's.
    let tables = survey.tables(given.as_ref().and_then(Ident::schema), TABLES_MAX)?;
    let (table, table_from) = choose_table(given, &tables, cmd)?;
    let Some(info) = survey.table_info(&table)? else {
        return Err(missing_table(&table, &tables, &label, cmd));
    };
    let neighbours: Vec<String> = tables.tables.iter().map(|(t, _)| t.clone()).collect();
    let mapping = recognise::map_columns(&table.to_string(), &info, &neighbours)
        .map_err(|u| unmappable(&table, &info, &u, &tables, cmd))?;
    let seen = count_values(survey, &table, &info, &mapping)?;
    Ok(Read {
        table,
        table_from,
        info,
        mapping,
        seen,
        label,
        server,
    })
}

/// The table asked for, or the one table of the database that looks like a job table.
pub(super) fn choose_table(
    given: Option<Ident>,
    tables: &Tables,
    cmd: &Command<'_>,
) -> Result<(Ident, String)> {
    let cli = Origin::CommandLine;
    if let Some(ident) = given {
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

pub(super) fn where_(tables: &Tables) -> String {
    match &tables.database {
        Some(db) => format!("database {db}"),
        None => "the database".into(),
    }
}

/// The tables whose columns make them look like job tables: the table, and its status
/// and start columns.
pub(super) fn job_tables(tables: &Tables) -> Vec<(String, String)> {
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
pub(super) fn listed(tables: &[(String, String)]) -> String {
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

pub(super) fn missing_table(
    table: &Ident,
    tables: &Tables,
    label: &str,
    cmd: &Command<'_>,
) -> Error {
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

pub(super) fn unmappable(
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

pub(super) fn no_watch(table: &Ident, n: &NoWatch) -> Error {
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

/// Counts the statuses (and, where job kinds may get a watch each, the kinds): the whole
/// of a small table; through an index that starts with the status column; else the latest
/// rows by the primary key. Never a scan of a large table.
pub(super) fn count_values(
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
    let id_is_primary = match (info.primary_key.as_slice(), &id) {
        ([pk], Some(i)) => pk.eq_ignore_ascii_case(i.name()),
        _ => false,
    };
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
