//! doctor on a watch's table as the database declares it: the types of the columns the
//! watch names, a start or heartbeat column declared `ON UPDATE CURRENT_TIMESTAMP`, whether
//! the status column holds every status the watch writes, the index that finds running
//! rows (from the database's plan of `check`'s own query), the message column's width, and
//! `retry_at_column`. A failure carries the `ALTER TABLE`, `CREATE INDEX` or configuration
//! change that fixes it.
//!
//! I/O: reads column definitions through the store it is given; writes nothing.

use crate::config::{Watch, fmt_duration};
use crate::evidence;
use crate::store::{self, ScanPlan, Schema, Store};

use super::{Finding, Mark};

/// `retry_at_column` (docs/design.md#lease): the column exists (else the schema check failed) and what
/// it holds; and the condition the application's picker must add, in this database's SQL,
/// or rows sent back to the queue are picked again at once.
pub(super) fn retry_at_finding(w: &Watch, schema: &Schema, d: &store::Dialect) -> Option<Finding> {
    let col = w.retry_at_column.as_ref()?;
    let cond = store::sql::due_condition(d, w, schema)?;
    let declared = schema
        .columns
        .get(&col.name().to_ascii_lowercase())
        .map_or("", |c| c.declared.as_str());
    let how = match schema.retry_at {
        Some(store::Ended::Epoch) => "unix seconds",
        Some(store::Ended::Zone(_)) => "the configured timezone's wall-clock time",
        _ => "the database's NOW()",
    };
    let retry = w.retry.as_ref().map_or("", |r| r.value.as_str());
    Some(Finding::pass(
        format!("watch {}: retry_at_column", w.name),
        format!(
            "{col} ({}) is set to {how} plus {} × 2^(attempts − 1), at most {}, when a row goes \
             back to '{retry}'; the application's picker must wait for it: … WHERE {} = \
             '{retry}' AND {cond}",
            if declared.is_empty() {
                "untyped"
            } else {
                declared
            },
            fmt_duration(w.retry_backoff),
            fmt_duration(w.retry_backoff_max),
            w.status_column,
        ),
    ))
}

pub(super) fn columns_finding(w: &Watch, schema: &Schema) -> Finding {
    let mut seen = Vec::new();
    let mut bad = Vec::new();
    for (key, col, role) in store::types::named_columns(w) {
        let Some(c) = schema.columns.get(&col.name().to_ascii_lowercase()) else {
            continue;
        };
        let ty = &c.declared;
        seen.push(format!(
            "{col} {}",
            if ty.is_empty() { "(untyped)" } else { ty }
        ));
        if let Some(why) = c.ty.problem(role) {
            bad.push(format!("{key} {col} is {ty}: {why}"));
        }
    }
    let subject = format!("watch {}: table {}", w.name, w.table);
    if bad.is_empty() {
        Finding::pass(subject, format!("columns {}", seen.join(", ")))
    } else {
        Finding::fail(
            subject,
            bad.join("; "),
            "point the key at a column of a usable type (a start or heartbeat: DATETIME, \
             TIMESTAMP or integer unix seconds)",
        )
    }
}

/// A start or heartbeat column declared `ON UPDATE CURRENT_TIMESTAMP` (the default for the
/// first TIMESTAMP column of a table on older MySQL): every `UPDATE` of the row that does
/// not assign it moves it to now. selfheal's and the PHP helpers' writes assign it to
/// itself, but the application's own writes restart the row's age (a stuck job never
/// reaches `max_age`) or beat for it. Names each such column and the `ALTER TABLE` that
/// drops the clause, keeping the rest of its definition as the database writes it.
pub(super) fn on_update_finding(
    w: &Watch,
    schema: &Schema,
    store: &mut dyn Store,
) -> Option<Finding> {
    let roles = [
        (
            "started_column",
            Some(&w.started_column),
            "the row's age starts again, so max_age never ends a stuck job",
        ),
        (
            "heartbeat_column",
            w.heartbeat_column.as_ref(),
            "any write to the row looks like a heartbeat",
        ),
    ];
    let mut details = Vec::new();
    let mut fixes = Vec::new();
    for (key, col, harm) in roles {
        let Some(col) = col.filter(|c| {
            schema
                .columns
                .get(&c.name().to_ascii_lowercase())
                .is_some_and(|c| c.on_update_now)
        }) else {
            continue;
        };
        details.push(format!(
            "{key} {col} is declared ON UPDATE CURRENT_TIMESTAMP: every UPDATE of a row that \
             does not set it moves it to now ({harm})"
        ));
        let (table, column) = (w.table.quoted('`'), col.quoted('`'));
        let definition = store
            .column_definition(w, col)
            .ok()
            .flatten()
            .and_then(|d| store::types::without_on_update(&d));
        fixes.push(match definition {
            Some(d) => format!("ALTER TABLE {table} MODIFY {column} {d}"),
            None => format!(
                "ALTER TABLE {table} MODIFY {column} with its definition from SHOW CREATE TABLE \
                 {} without ON UPDATE CURRENT_TIMESTAMP",
                w.table
            ),
        });
    }
    if details.is_empty() {
        return None;
    }
    Some(Finding::warn(
        format!("watch {}: ON UPDATE", w.name),
        format!(
            "{}; selfheal's and Selfheal\\Lease's own writes keep it, the application's do not",
            details.join("; ")
        ),
        format!("drop the clause: {}", fixes.join("; ")),
    ))
}

/// Whether the status column can hold every status the watch writes; when it cannot, the
/// `ALTER TABLE` that makes room (keeping the rest of the column's definition as the
/// database writes it) and the configuration change that avoids it.
pub(super) fn values_finding(w: &Watch, schema: &Schema, store: &mut dyn Store) -> Finding {
    let subject = format!("watch {}: status values", w.name);
    let Some(col) = schema
        .columns
        .get(&w.status_column.name().to_ascii_lowercase())
    else {
        return Finding::pass(subject, "no status column to check");
    };
    let values = store::types::written_values(w);
    let listed = values
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let misfits = store::types::misfits(w, schema);
    let ty = col.type_text();
    if misfits.is_empty() {
        return Finding::pass(
            subject,
            if col.enforced {
                format!("{} {ty} holds {listed}", w.status_column)
            } else {
                format!(
                    "{} ({}) holds {listed} (SQLite stores any value)",
                    w.status_column,
                    if ty.is_empty() { "untyped" } else { &ty }
                )
            },
        );
    }
    let detail = misfits
        .iter()
        .map(|(k, v, m)| {
            format!(
                "{k} {v:?} cannot be stored in {} {ty}: {m}",
                w.status_column
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut fixes = Vec::new();
    let bad: Vec<&str> = misfits.iter().map(|(_, v, _)| *v).collect();
    if let Some(sql) = store.widen_sql(w, &w.status_column, col, &bad) {
        fixes.push(sql);
    } else if let Some(wider) = col.widened(&bad) {
        let rest = store
            .column_definition(w, &w.status_column)
            .ok()
            .flatten()
            .map(|d| store::types::split_type(&d).1.to_string());
        fixes.push(match rest {
            Some(rest) => format!(
                "ALTER TABLE {} MODIFY {} {wider}{rest}",
                w.table.quoted('`'),
                w.status_column.quoted('`')
            ),
            None => format!(
                "ALTER TABLE {} MODIFY {} {wider} (keep its NULL, DEFAULT, character set \
                 and comment: SHOW CREATE TABLE {} shows them)",
                w.table.quoted('`'),
                w.status_column.quoted('`'),
                w.table
            ),
        });
    }
    for (key, _, m) in &misfits {
        fixes.push(match m {
            store::types::CannotStore::NotMember { members } => {
                let others: Vec<&str> = members
                    .iter()
                    .map(String::as_str)
                    .filter(|m| *m != w.running_value)
                    .collect();
                format!(
                    "set {key} in watch '{}' to one of the column's values the application \
                     means for it ({})",
                    w.name,
                    others.join(", ")
                )
            }
            store::types::CannotStore::TooLong { length, .. } => format!(
                "set {key} in watch '{}' to a value of at most {length} characters",
                w.name
            ),
            store::types::CannotStore::NotANumber => format!(
                "set {key} in watch '{}' to the number the application uses for that state",
                w.name
            ),
        });
    }
    Finding::fail(
        subject,
        format!(
            "{detail}: a strict server refuses every such change, a lenient one (sql_mode \
             without STRICT_TRANS_TABLES) would store a mangled value and the row would \
             vanish from every status the application knows; selfheal check refuses to \
             start (exit 2) until it fits"
        ),
        fixes.join("; or "),
    )
}

/// Below this many expected rows a full scan is no outage (MySQL picks one on small tables
/// even when an index exists).
const SMALL_TABLE_ROWS: u64 = 10_000;

/// The fixes in the database's own SQL where it has them
/// ([`store::Introspect::status_index_sql`], [`store::Introspect::analyze_sql`]).
pub(super) fn index_finding(w: &Watch, plan: &ScanPlan, store: &dyn Store) -> Finding {
    let subject = format!("watch {}: index", w.name);
    let create = store.status_index_sql(w).unwrap_or_else(|| {
        format!(
            "CREATE INDEX idx_{}_{} ON {} ({})",
            w.table.name(),
            w.status_column.name(),
            w.table,
            w.status_column
        )
    });
    match (&plan.index, plan.candidates.is_empty(), plan.rows) {
        (Some(i), _, _) => Finding::pass(
            subject,
            format!("running rows are found through index {i} ({})", plan.detail),
        ),
        (None, false, Some(r)) if r >= SMALL_TABLE_ROWS => Finding::warn(
            subject,
            format!(
                "the database reads ~{r} rows although {} could serve (most rows running, or \
                 stale statistics?) ({})",
                plan.candidates.join(", "),
                plan.detail
            ),
            store
                .analyze_sql(w)
                .unwrap_or_else(|| format!("ANALYZE TABLE {}", w.table)),
        ),
        (None, false, _) => Finding::pass(
            subject,
            format!(
                "{} can find running rows; on a table this small the database reads it \
                 whole ({})",
                plan.candidates.join(", "),
                plan.detail
            ),
        ),
        (None, true, rows) => {
            let (mark, cost) = scan_cost(rows);
            Finding {
                mark,
                subject,
                detail: format!(
                    "no index covers {}: every run reads the whole table{cost} ({})",
                    w.status_column, plan.detail
                ),
                fix: Some(create),
            }
        }
    }
}

/// From this many rows on, a scan on every run is felt by the application's own queries.
const BIG_TABLE_ROWS: u64 = 1_000_000;

/// What a scan of the whole table on every run costs, in words scaled to the rows it
/// reads (`None`: the database does not say), and how much it matters: a table of a few
/// rows costs nothing yet, so it is a warning; one that already costs is a failure.
fn scan_cost(rows: Option<u64>) -> (Mark, String) {
    match rows {
        Some(r) if r < SMALL_TABLE_ROWS => (
            Mark::Warn,
            format!(
                " — {} now, which costs nothing yet, but a job log grows, and each run \
                 then reads all of it",
                rows_words(r)
            ),
        ),
        Some(r) if r < BIG_TABLE_ROWS => (Mark::Fail, format!(", ~{r} rows now, on every run")),
        Some(r) => (
            Mark::Fail,
            format!(
                ", ~{r} rows now, on every run: a scan that size every few minutes slows \
                 the application's own queries"
            ),
        ),
        None => (
            Mark::Fail,
            ", and each run costs more as the table grows".to_string(),
        ),
    }
}

fn rows_words(r: u64) -> String {
    match r {
        0 => "it is empty".into(),
        1 => "1 row".into(),
        _ => format!("~{r} rows"),
    }
}

pub(super) fn message_finding(w: &Watch, schema: &Schema, store: &dyn Store) -> Finding {
    let subject = format!("watch {}: message", w.name);
    let Some(col) = &w.message_column else {
        return Finding::pass(
            subject,
            "no message_column: the reason for a change goes to the journal only",
        );
    };
    let need = evidence::longest_message(w);
    let words = evidence::longest_words(w);
    let longest = "x".repeat(need.max(255));
    let widen = match schema
        .columns
        .get(&col.name().to_ascii_lowercase())
        .and_then(|c| store.widen_sql(w, col, c, &[&longest]))
    {
        Some(sql) => format!("widen it: {sql}"),
        None => format!(
            "widen it, e.g. ALTER TABLE {} MODIFY {col} VARCHAR({}) (keep its NULL and DEFAULT)",
            w.table,
            need.max(255)
        ),
    };
    match schema.message_max {
        None => Finding::pass(subject, format!("{col} holds any length")),
        Some(n) if n >= need => Finding::pass(
            subject,
            format!("{col} holds {n} characters; a reason needs at most {need}"),
        ),
        Some(n) if n >= words => Finding::warn(
            subject,
            format!(
                "{col} holds {n} characters; reasons of up to {need} will be cut (the \
                 figures in parentheses go first, the words stay)"
            ),
            widen,
        ),
        Some(n) => Finding::fail(
            subject,
            format!(
                "{col} holds {n} characters, too few for the words of a reason (up to \
                 {words}, e.g. \"self-heal: dead: lock free, worker gone\"): a person \
                 reading the row would not learn why it was changed"
            ),
            widen,
        ),
    }
}
