//! The SQL selfheal runs, built once for every database from a [`Dialect`]: the `SELECT` of
//! running rows (and, read the same way, of the rows with another status or of one row by
//! id: [`rows_sql`]), of a row's every column, of finished rows, of the rows parked in
//! `manual_value` (and their count), and the compare-and-set `UPDATE` ([`cas_sql`]: the one
//! statement that writes a row, from whatever status it was observed in); and how that
//! statement reads for a person, its values written out as literals ([`for_a_person`]), and
//! the condition an application's picker must add for `retry_at_column`
//! ([`due_condition`]). The statements that differ more than a [`Dialect`]'s parts can say
//! — the clock, how a table is described ([`SchemaSql`]) — are the dialect's own.
//!
//! Each builder returns a [`Statement`]: the text and its bound values in order, so the
//! two can never drift apart. Identifiers are validated [`Ident`]s quoted with the
//! dialect's quote character (validation admits no quote characters); every value is a
//! bound parameter. Pure: no I/O, except that a compare-and-set that writes the end time
//! in a configured zone reads the zone's offset from the host clock.

use std::fmt::Write as _;

use crate::config::{Ident, Watch};
use crate::error::{Error, Result, SchemaProblem};

use super::driver::Row;
use super::types::Column;
use super::{Change, Ended, History, Schema, SqlValue};

/// How placeholders for bound values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `?` for every value (MySQL).
    Question,
    /// `?1`, `?2`, … in order (SQLite; the numbered form names each value).
    Numbered,
    /// `$1`, `$2`, … in order (PostgreSQL, which knows no `?`).
    Dollar,
}

impl Placeholder {
    /// The placeholder of the `n`th bound value (from 1).
    fn nth(self, n: usize) -> String {
        match self {
            Placeholder::Question => "?".into(),
            Placeholder::Numbered => format!("?{n}"),
            Placeholder::Dollar => format!("${n}"),
        }
    }

    /// The character a placeholder starts with.
    fn mark(self) -> char {
        match self {
            Placeholder::Question | Placeholder::Numbered => '?',
            Placeholder::Dollar => '$',
        }
    }
}

/// What differs between databases in the SQL selfheal runs. One `const` per backend,
/// next to its driver.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// Quotes identifiers.
    pub quote: char,
    pub placeholder: Placeholder,
    /// Equality that holds for two NULLs (`<=>`, `IS`): a start or heartbeat observed as
    /// NULL must still match NULL.
    pub null_safe_eq: &'static str,
    /// The database's current time, for an end column written as [`Ended::DbNow`].
    pub now: &'static str,
    /// The current unix seconds, for [`Ended::Epoch`].
    pub epoch_now: &'static str,
    /// The current UTC time shifted by a bound offset, for [`Ended::Zone`]: written as
    /// `zone_now.0`, the placeholder, `zone_now.1`.
    pub zone_now: (&'static str, &'static str),
    /// The bound value of that offset, from seconds east of UTC (also the bound value of
    /// `now_plus`).
    pub zone_offset: fn(i64) -> SqlValue,
    /// The database's current time plus a bound number of seconds, for a time written
    /// as [`Ended::DbNow`] ahead of now (`retry_at_column`): `now_plus.0`, the
    /// placeholder, `now_plus.1`.
    pub now_plus: (&'static str, &'static str),
    /// After the table name in the `UPDATE` when the id alone is the primary key, so the
    /// compare-and-set locks the row through it as the worker's own `UPDATE … WHERE id = ?`
    /// does ("" when the database needs no hint).
    pub force_primary: &'static str,
    /// How a page of running rows after the first names the status index it must be read
    /// through (`FORCE INDEX`): without it MySQL and MariaDB look up `status = ?` and
    /// filter `id > ?` on every row of the index before the page, so a backlog read in
    /// pages costs the square of its size. `None` where the planner needs no hint.
    pub force_index: Option<&'static str>,
    /// The database enforces declared column types (MySQL); SQLite's are declarations only.
    pub enforces_types: bool,
    /// The instant the server itself gives a stored time (`UNIX_TIMESTAMP(` col `)` on
    /// MySQL: a `TIMESTAMP` exactly, a naive `DATETIME` by the session zone's rules), read
    /// beside each time column; `None` where the server has no zone (SQLite).
    pub epoch_of: Option<(&'static str, &'static str)>,
    /// A text value as a string literal of this database, for SQL shown to a person (never
    /// run): quotes doubled, and what the database cannot read inside quotes escaped.
    pub text_literal: fn(&str) -> String,
    /// The `SELECT` of the database's clock: its current wall-clock time (a date-time, or
    /// its text `YYYY-MM-DD HH:MM:SS`) and unix seconds.
    pub clock: &'static str,
    /// How the database describes a table.
    pub schema: SchemaSql,
    /// How it answers who holds a named lock (`db_lock`, `docs/design.md#named-lock`);
    /// `None` where it has none (a configuration naming `db_lock` is refused first).
    pub named_locks: Option<NamedLockSql>,
}

/// The statements a database answers for named locks with: a page of names in, their
/// holders out (`JobTable::named_locks`).
#[derive(Debug, Clone, Copy)]
pub struct NamedLockSql {
    /// One row: for each bound name, in order, the session holding it (a whole number),
    /// or NULL when nobody does.
    pub holders: fn(&Dialect, &[String]) -> Statement,
    /// One row per listed session the account may see: its id, user, host and seconds in
    /// its current state.
    pub sessions: fn(&Dialect, &[u64]) -> Statement,
}

/// `?, ?, …` for `values`, bound in order: the body of an `IN (…)` or a `SELECT` list.
pub fn bound_list(d: &Dialect, values: Vec<SqlValue>, each: &str) -> Statement {
    let mut b = Binds::new(d);
    let sql = values
        .into_iter()
        .map(|v| each.replace("{}", &b.bind(v)))
        .collect::<Vec<_>>()
        .join(", ");
    b.finish(sql)
}

/// How a database describes a table: the statements a watch's schema is read with
/// (`SqlStore::schema`), and how their rows read.
#[derive(Debug, Clone, Copy)]
pub struct SchemaSql {
    /// One row per column of the watch's table; none when there is no such table.
    pub columns: fn(&Watch) -> Statement,
    /// A column's name and what it is, from its row of `columns`, and its place in the
    /// primary key (from 1; 0 when it is not in it, or the row does not say).
    pub column: fn(&mut dyn Row) -> (String, Column, u32),
    /// One row per column of each index of the table: the index's name, the column's place
    /// in it (from 1), the column's name, and 1 for the primary key. `None`: the primary
    /// key is read from `columns`, and no query names an index.
    pub indexes: Option<fn(&Watch) -> Statement>,
    /// The `SELECT` of the database a table is looked for in when the watch names none,
    /// to say where a table is missing. `None`: the database is a file.
    pub current_database: Option<&'static str>,
}

impl Dialect {
    /// `id` quoted for this database.
    pub fn quote(&self, id: &Ident) -> String {
        id.quoted(self.quote)
    }
}

/// A statement and its bound values, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<SqlValue>,
}

/// Placeholders numbered as they are handed out.
struct Binds<'d> {
    d: &'d Dialect,
    params: Vec<SqlValue>,
}

impl<'d> Binds<'d> {
    fn new(d: &'d Dialect) -> Self {
        Binds {
            d,
            params: Vec::new(),
        }
    }

    /// The placeholder for `v`, bound next.
    fn bind(&mut self, v: SqlValue) -> String {
        self.params.push(v);
        self.d.placeholder.nth(self.params.len())
    }

    /// Takes back the value bound last, whose placeholder was not used after all.
    fn unbind_last(&mut self) {
        self.params.pop();
    }

    fn finish(self, sql: String) -> Statement {
        Statement {
            sql,
            params: self.params,
        }
    }
}

/// A time column as selected: the column, then (where the dialect has one) the instant
/// the server gives it.
fn time_column(d: &Dialect, c: &Ident) -> String {
    match d.epoch_of {
        Some((open, close)) => format!("{q}, {open}{q}{close}", q = d.quote(c)),
        None => d.quote(c),
    }
}

/// The watch's `match` as conditions (`col = ?`, values bound), in column order; empty
/// without one.
fn match_conditions(d: &Dialect, w: &Watch, b: &mut Binds<'_>) -> Vec<String> {
    w.matches
        .iter()
        .map(|(col, v)| format!("{} = {}", d.quote(col), b.bind(SqlValue::Text(v.clone()))))
        .collect()
}

/// Which running rows to read: all of them, or a page of them — the first `limit` after
/// the id `after` (keyset paging on the id column: no `OFFSET`, so a page costs the same
/// wherever it is, and rows that come or go between pages shift nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Page<'a> {
    pub after: Option<&'a SqlValue>,
    pub limit: Option<usize>,
    /// An index whose first column is the status column, for a page after the first
    /// ([`Dialect::force_index`]).
    pub index: Option<&'a Ident>,
}

/// The `SELECT` of running rows of the watch (its `match` too), ordered by id (and what
/// `doctor` explains): id, start (and its instant where the dialect gives one), then the
/// heartbeat column (likewise), owner and attempts columns the watch has — the order every
/// row is decoded in. With a [`Page`], only that page.
pub fn running_sql(d: &Dialect, w: &Watch) -> Statement {
    running_page_sql(d, w, Page::default())
}

/// [`running_sql`] for one [`Page`].
pub fn running_page_sql(d: &Dialect, w: &Watch, page: Page<'_>) -> Statement {
    rows_sql(d, w, super::Select::Running(page))
}

/// True when the `SELECT` of `sel` ends with the status column (every selection but the
/// running rows, whose status is known).
pub fn rows_have_status(sel: super::Select<'_>) -> bool {
    !matches!(sel, super::Select::Running(_))
}

/// The `SELECT` of the rows `sel` selects (the watch's `match` too), ordered by id: the
/// cells of [`running_sql`], then the status where [`rows_have_status`].
pub fn rows_sql(d: &Dialect, w: &Watch, sel: super::Select<'_>) -> Statement {
    use super::Select;
    let mut b = Binds::new(d);
    let mut cols = vec![d.quote(&w.id_column), time_column(d, &w.started_column)];
    cols.extend(w.heartbeat_column.as_ref().map(|c| time_column(d, c)));
    cols.extend(w.owner_column.as_ref().map(|c| d.quote(c)));
    if let Some((h, p)) = &w.owner_split {
        cols.extend([d.quote(h), d.quote(p)]);
    }
    cols.extend(w.retry.as_ref().map(|r| d.quote(&r.attempts_column)));
    cols.extend(w.lock_columns().into_iter().map(|c| d.quote(c)));
    if rows_have_status(sel) {
        cols.push(d.quote(&w.status_column));
    }
    let cols = cols.join(", ");
    let mut limit = String::new();
    let mut after = None;
    let mut hint = String::new();
    let first = match sel {
        Select::Running(page) => {
            after = page.after;
            if let (Some(_), Some(ix), Some(force)) = (page.after, page.index, d.force_index) {
                hint = format!(" {force} ({})", d.quote(ix));
            }
            if let Some(n) = page.limit {
                limit = format!(" LIMIT {n}");
            }
            let running = b.bind(SqlValue::Text(w.running_value.clone()));
            format!("{} = {running}", d.quote(&w.status_column))
        }
        Select::Status(status, n) => {
            limit = format!(" LIMIT {n}");
            let v = b.bind(SqlValue::Text(status.to_string()));
            format!("{} = {v}", d.quote(&w.status_column))
        }
        Select::Id(id) => format!("{} = {}", d.quote(&w.id_column), b.bind(id.clone())),
    };
    let mut cond = vec![first];
    cond.extend(match_conditions(d, w, &mut b));
    if let Some(after) = after {
        cond.push(format!(
            "{} > {}",
            d.quote(&w.id_column),
            b.bind(after.clone())
        ));
    }
    let sql = format!(
        "SELECT {cols} FROM {}{hint} WHERE {} ORDER BY {}{limit}",
        d.quote(&w.table),
        cond.join(" AND "),
        d.quote(&w.id_column),
    );
    b.finish(sql)
}

/// The `SELECT *` of one row by id, as the table holds it (for a person: `selfheal
/// show`). Not limited by the watch's `match`: the row is shown whatever job kind it is.
pub fn columns_sql(d: &Dialect, w: &Watch, id: &SqlValue) -> Statement {
    let mut b = Binds::new(d);
    let id = b.bind(id.clone());
    let sql = format!(
        "SELECT * FROM {} WHERE {} = {id}",
        d.quote(&w.table),
        d.quote(&w.id_column)
    );
    b.finish(sql)
}

/// True when the `SELECT` of finished rows for `scope` ends with a cell that says whether
/// the row is the watch's (`match`): [`History::Latest`] with a `match`, which reads the
/// latest rows of every kind and leaves the comparison to the database.
pub fn finished_has_match_cell(w: &Watch, scope: History) -> bool {
    matches!(scope, History::Latest(_)) && !w.matches.is_empty()
}

/// The `SELECT` of one row by id: status, start, message (`NULL` without a message
/// column).
pub fn current_sql(d: &Dialect, w: &Watch, id: &SqlValue) -> Statement {
    let mut b = Binds::new(d);
    let message = w
        .message_column
        .as_ref()
        .map_or("NULL".to_string(), |m| d.quote(m));
    let id = b.bind(id.clone());
    let sql = format!(
        "SELECT {}, {}, {message} FROM {} WHERE {} = {id}",
        d.quote(&w.status_column),
        d.quote(&w.started_column),
        d.quote(&w.table),
        d.quote(&w.id_column),
    );
    b.finish(sql)
}

/// The `SELECT` of finished rows: id, start, end (each followed by its instant where the
/// dialect gives one), status, and the message when it carries selfheal's prefix (`NULL`
/// otherwise, so ordinary messages never cross the wire). Needs `ended_column`.
///
/// [`History::All`] filters in the database (the `match` too) and streams.
/// [`History::Latest`] reads the latest rows through the id's index with no `WHERE` at all,
/// and the caller keeps the finished ones (`store::is_finished`): a `WHERE … ORDER BY id
/// DESC LIMIT n` would scan the whole table when few rows match, and a derived table is
/// materialised (measured: ~15 ms against ~1 ms for 1000 rows of a 1,000,000-row MariaDB
/// table). A `match` is then a last cell, `CASE WHEN … THEN 1 ELSE 0 END`, compared by the
/// database as its `WHERE` would compare it ([`finished_has_match_cell`]).
pub fn finished_sql(d: &Dialect, w: &Watch, scope: History) -> Result<Statement> {
    let Some(ended) = &w.ended_column else {
        return Err(Error::Schema {
            watch: w.name.clone(),
            problem: SchemaProblem::NotSet {
                key: "ended_column",
                why: "runtimes cannot be measured",
            },
        });
    };
    let mut b = Binds::new(d);
    let (id, st, s, e) = (
        d.quote(&w.id_column),
        d.quote(&w.status_column),
        d.quote(&w.started_column),
        d.quote(ended),
    );
    let pattern = b.bind(SqlValue::Text(super::marked_pattern()));
    let msg = match &w.message_column {
        Some(m) => format!(
            "CASE WHEN {} LIKE {pattern} THEN {} END",
            d.quote(m),
            d.quote(m)
        ),
        // Keeps the parameters the same either way.
        None => format!("CASE WHEN {pattern} IS NULL THEN NULL END"),
    };
    let times = format!(
        "{}, {}",
        time_column(d, &w.started_column),
        time_column(d, ended)
    );
    let matched = if finished_has_match_cell(w, scope) {
        format!(
            ", CASE WHEN {} THEN 1 ELSE 0 END",
            match_conditions(d, w, &mut b).join(" AND ")
        )
    } else {
        String::new()
    };
    let select = format!(
        "SELECT {id}, {times}, {st}, {msg}{matched} FROM {}",
        d.quote(&w.table)
    );
    let sql = match scope {
        History::All => {
            let running = b.bind(SqlValue::Text(w.running_value.clone()));
            let filters = match_conditions(d, w, &mut b)
                .iter()
                .fold(String::new(), |mut s, c| {
                    s.push_str(" AND ");
                    s.push_str(c);
                    s
                });
            format!(
                "{select} WHERE {st} <> {running} AND {s} IS NOT NULL AND {e} IS NOT NULL{filters}"
            )
        }
        History::Latest(n) => format!("{select} ORDER BY {id} DESC LIMIT {n}"),
    };
    Ok(b.finish(sql))
}

/// The watch's rows parked in `manual_value` (its `match` too), as conditions.
fn parked_conditions(d: &Dialect, w: &Watch, manual: &str, b: &mut Binds<'_>) -> String {
    let value = b.bind(SqlValue::Text(manual.to_string()));
    let mut cond = vec![format!("{} = {value}", d.quote(&w.status_column))];
    cond.extend(match_conditions(d, w, b));
    cond.join(" AND ")
}

/// The number of the watch's rows parked in `manual_value`: one `COUNT(*)` through the
/// status index, whose cost follows the parked rows, not the table.
pub fn parked_count_sql(d: &Dialect, w: &Watch, manual: &str) -> Statement {
    let mut b = Binds::new(d);
    let cond = parked_conditions(d, w, manual, &mut b);
    let sql = format!("SELECT COUNT(*) FROM {} WHERE {cond}", d.quote(&w.table));
    b.finish(sql)
}

/// The first `limit` of the watch's rows parked in `manual_value`, by id: id and start
/// (and its instant where the dialect gives one).
pub fn parked_sql(d: &Dialect, w: &Watch, manual: &str, limit: u32) -> Statement {
    let mut b = Binds::new(d);
    let cond = parked_conditions(d, w, manual, &mut b);
    let sql = format!(
        "SELECT {}, {} FROM {} WHERE {cond} ORDER BY {} LIMIT {limit}",
        d.quote(&w.id_column),
        time_column(d, &w.started_column),
        d.quote(&w.table),
        d.quote(&w.id_column),
    );
    b.finish(sql)
}

/// A value as a literal of this database: numbers as they are, `NULL`, text and times
/// quoted, bytes in hex.
pub fn literal(d: &Dialect, v: &SqlValue) -> String {
    match v {
        SqlValue::Null => "NULL".into(),
        SqlValue::Int(i) => i.to_string(),
        SqlValue::UInt(u) => u.to_string(),
        SqlValue::Float(f) if f.is_finite() => format!("{f:?}"),
        SqlValue::Bytes(b) => {
            let mut hex = String::with_capacity(3 + 2 * b.len());
            hex.push_str("X'");
            for x in b {
                let _ = write!(hex, "{x:02x}");
            }
            hex.push('\'');
            hex
        }
        other => (d.text_literal)(&other.to_string()),
    }
}

/// A statement with its bound values written in as literals ([`literal`]): SQL a person
/// can read and run by hand. Never run by selfheal, which binds every value. Placeholders
/// are found in the statement's own text, which holds no quoted `?` or `$` (identifiers
/// are validated, selfheal's SQL has none), and values are put in one pass, so a `?` or
/// `$1` inside a value is never taken for a placeholder.
pub fn for_a_person(d: &Dialect, st: &Statement) -> String {
    let mut out = String::with_capacity(st.sql.len() + 32);
    let mark = d.placeholder.mark();
    let mut next = 0usize;
    let mut chars = st.sql.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != mark {
            out.push(c);
            continue;
        }
        let mut end = at + c.len_utf8();
        let index = match d.placeholder {
            Placeholder::Question => {
                next += 1;
                next
            }
            Placeholder::Numbered | Placeholder::Dollar => {
                let mut n = 0usize;
                while let Some((i, x)) = chars.next_if(|(_, x)| x.is_ascii_digit()) {
                    n = n
                        .saturating_mul(10)
                        .saturating_add(x as usize - '0' as usize);
                    end = i + 1;
                }
                n
            }
        };
        match index.checked_sub(1).and_then(|i| st.params.get(i)) {
            Some(v) => out.push_str(&literal(d, v)),
            // No value bound to it: left as written.
            None => out.push_str(st.sql.get(at..end).unwrap_or_default()),
        }
    }
    out
}

/// The end time's expression for a column of the watch (see [`super::Ended`]).
fn ended_expr(d: &Dialect, schema: &Schema, b: &mut Binds<'_>) -> String {
    time_expr(d, schema.ended, 0, b)
}

/// The database's current time plus `ahead` seconds, written the way `how` says (see
/// [`super::Ended`]; `None` as the database's own now).
fn time_expr(d: &Dialect, how: Option<Ended>, ahead: u64, b: &mut Binds<'_>) -> String {
    let ahead = i64::try_from(ahead).unwrap_or(i64::MAX);
    match how {
        None | Some(Ended::DbNow) if ahead == 0 => d.now.to_string(),
        None | Some(Ended::DbNow) => {
            let secs = b.bind((d.zone_offset)(ahead));
            format!("{}{secs}{}", d.now_plus.0, d.now_plus.1)
        }
        Some(Ended::Epoch) if ahead == 0 => d.epoch_now.to_string(),
        Some(Ended::Epoch) => format!("{} + {}", d.epoch_now, b.bind(SqlValue::Int(ahead))),
        Some(Ended::Zone(tz)) => {
            let offset = super::zone_offset_now(tz).saturating_add(ahead);
            let offset = b.bind((d.zone_offset)(offset));
            format!("{}{offset}{}", d.zone_now.0, d.zone_now.1)
        }
    }
}

/// The condition an application's picker must add so that a row sent back to the queue
/// waits until its `retry_at_column` is due (docs/design.md#lease), for a person to copy: `None`
/// without the column. Written in this database's SQL for the column's type.
pub fn due_condition(d: &Dialect, w: &Watch, schema: &Schema) -> Option<String> {
    let col = d.quote(w.retry_at_column.as_ref()?);
    let now = match schema.retry_at {
        None | Some(Ended::DbNow) => d.now.to_string(),
        Some(Ended::Epoch) => d.epoch_now.to_string(),
        // The wall-clock time of the zone the application writes in: its own session's
        // NOW() when the session runs in that zone.
        Some(Ended::Zone(_)) => d.now.to_string(),
    };
    Some(format!("({col} IS NULL OR {col} <= {now})"))
}

/// The compare-and-set `UPDATE` of docs/design.md#cas — the one statement through which selfheal
/// writes a row: sets the new status, the end time (unless the row is parked for a person
/// or put back to running), the message, the attempts and the "not before" time the watch
/// has; matches the row only while it still has the id, the status it was observed in,
/// the start, heartbeat (but for an un-park) and owner values selfheal observed, and the
/// watch's `match`: a row another host claimed, or that another watch's job kind took
/// over, in the meantime is never written. A time column the watch names that is declared
/// `ON UPDATE CURRENT_TIMESTAMP` is assigned to itself where the statement sets nothing
/// else in it ([`kept_columns`]).
pub fn cas_sql(d: &Dialect, w: &Watch, schema: &Schema, c: &Change<'_>) -> Statement {
    let mut b = Binds::new(d);
    let mut set = vec![format!(
        "{} = {}",
        d.quote(&w.status_column),
        b.bind(SqlValue::Text(c.new_status.to_string()))
    )];
    if let Some(col) = w.ended_column.as_ref().filter(|_| c.set_ended) {
        let expr = ended_expr(d, schema, &mut b);
        set.push(format!("{} = {expr}", d.quote(col)));
    }
    if let (Some(col), Some(m)) = (&w.message_column, &c.message) {
        set.push(format!(
            "{} = {}",
            d.quote(col),
            b.bind(SqlValue::Text(m.clone()))
        ));
    }
    if let (Some(r), true) = (&w.retry, c.bump_attempts) {
        let a = d.quote(&r.attempts_column);
        set.push(format!("{a} = COALESCE({a}, 0) + 1"));
    }
    if let (Some(col), Some(ahead)) = (&w.retry_at_column, c.retry_at) {
        let expr = time_expr(d, schema.retry_at, ahead, &mut b);
        set.push(format!("{} = {expr}", d.quote(col)));
    }
    let assigned = [
        w.ended_column.as_ref().filter(|_| c.set_ended),
        w.retry_at_column.as_ref().filter(|_| c.retry_at.is_some()),
    ];
    set.extend(kept_columns(d, w, schema, &assigned));
    let cond = cas_conditions(d, w, c, &mut b);
    let sql = format!(
        "UPDATE {}{} SET {} WHERE {}",
        d.quote(&w.table),
        primary_hint(d, schema),
        set.join(", "),
        cond.join(" AND ")
    );
    b.finish(sql)
}

/// The conditions of one row's compare-and-set: its id, the status it was observed in, the
/// start (heartbeat column, but for an un-park, and owner) value observed, and the watch's
/// `match`.
fn cas_conditions(d: &Dialect, w: &Watch, c: &Change<'_>, b: &mut Binds<'_>) -> Vec<String> {
    let mut cond = vec![
        format!("{} = {}", d.quote(&w.id_column), b.bind(c.row.id.clone())),
        from_status_condition(d, w, c.from_status, b),
    ];
    cond.extend(row_conditions(d, w, c, b));
    cond.extend(match_conditions(d, w, b));
    cond
}

fn from_status_condition(d: &Dialect, w: &Watch, from: &str, b: &mut Binds<'_>) -> String {
    format!(
        "{} = {}",
        d.quote(&w.status_column),
        b.bind(SqlValue::Text(from.to_string()))
    )
}

/// The conditions of a compare-and-set that are the row's own: the start, heartbeat and
/// owner it was judged with, each matched NULL-safely.
fn row_conditions(d: &Dialect, w: &Watch, c: &Change<'_>, b: &mut Binds<'_>) -> Vec<String> {
    let eq = d.null_safe_eq;
    let mut cond = vec![format!(
        "{} {eq} {}",
        d.quote(&w.started_column),
        b.bind(c.row.started.raw.clone())
    )];
    if let (Some(col), Some(hb), true) = (&w.heartbeat_column, &c.row.heartbeat, c.match_heartbeat)
    {
        cond.push(format!("{} {eq} {}", d.quote(col), b.bind(hb.raw.clone())));
    }
    if let Some(col) = &w.owner_column {
        cond.push(format!(
            "{} {eq} {}",
            d.quote(col),
            b.bind(c.row.owner_raw.clone())
        ));
    }
    if let (Some((h, p)), Some((hv, pv))) = (&w.owner_split, &c.row.owner_split_raw) {
        cond.push(format!("{} {eq} {}", d.quote(h), b.bind(hv.clone())));
        cond.push(format!("{} {eq} {}", d.quote(p), b.bind(pv.clone())));
    }
    cond
}

/// `col = col` for each time column the watch names (start, heartbeat, end, retry_at)
/// that is declared `ON UPDATE CURRENT_TIMESTAMP` and not among `assigned` (what the
/// statement sets otherwise): such a column moves to now on any `UPDATE` that does not
/// assign it, and one that assigns it to itself keeps it. So a write keeps the start and
/// heartbeat it matched (and the worker's lease fence on the start), and a park leaves
/// the end time alone (docs/design.md#writes).
fn kept_columns(
    d: &Dialect,
    w: &Watch,
    schema: &Schema,
    assigned: &[Option<&Ident>],
) -> Vec<String> {
    let named = [
        Some(&w.started_column),
        w.heartbeat_column.as_ref(),
        w.ended_column.as_ref(),
        w.retry_at_column.as_ref(),
    ];
    let same = |a: &Ident, b: &Ident| a.name().eq_ignore_ascii_case(b.name());
    let mut kept: Vec<&Ident> = Vec::new();
    for col in named.into_iter().flatten() {
        let moves = schema
            .columns
            .get(&col.name().to_ascii_lowercase())
            .is_some_and(|c| c.on_update_now);
        if moves
            && !assigned.iter().flatten().any(|a| same(a, col))
            && !kept.iter().any(|k| same(k, col))
        {
            kept.push(col);
        }
    }
    kept.into_iter()
        .map(|col| format!("{q} = {q}", q = d.quote(col)))
        .collect()
}

fn primary_hint(d: &Dialect, schema: &Schema) -> &'static str {
    if schema.id_is_primary {
        d.force_primary
    } else {
        ""
    }
}

/// A group of compare-and-sets as one `UPDATE`: each of `changes` written as its own
/// compare-and-set would write it — its status, its message, its end time, attempts and
/// retry time where it sets them — where its own conditions hold ([`cas_sql`]'s, each row
/// its own, never one row's start against another's). The caller knows every row was
/// written only when as many rows changed as there are `changes`.
pub fn cas_group_update_sql(
    d: &Dialect,
    w: &Watch,
    schema: &Schema,
    changes: &[Change<'_>],
) -> Statement {
    // Each row's value (an expression, its values bound) where its own write sets one.
    type Value<'v> = dyn Fn(&Change<'_>, &mut Binds<'_>) -> Option<String> + 'v;
    let mut b = Binds::new(d);
    let id = d.quote(&w.id_column);
    // A value every row of the group gets is bound once, without a CASE: the statement
    // the server prepares (and describes back, a packet per value) stays small.
    let case = |b: &mut Binds<'_>, value: &Value<'_>, col: &str| {
        let alone = |c: &Change<'_>| {
            let mut own = Binds::new(d);
            value(c, &mut own).map(|text| (text, own.params))
        };
        if let [first, rest @ ..] = changes {
            let one = alone(first);
            if one.is_some()
                && rest.iter().all(|c| alone(c) == one)
                && let Some(v) = value(first, b)
            {
                return v;
            }
        }
        let mut arms = String::new();
        for c in changes {
            let i = b.bind(c.row.id.clone());
            if let Some(v) = value(c, b) {
                arms.push_str(" WHEN ");
                arms.push_str(&i);
                arms.push_str(" THEN ");
                arms.push_str(&v);
            } else {
                b.unbind_last();
            }
        }
        format!("CASE {id}{arms} ELSE {col} END")
    };
    let status = d.quote(&w.status_column);
    let mut set = vec![format!(
        "{status} = {}",
        case(
            &mut b,
            &|c, b| Some(b.bind(SqlValue::Text(c.new_status.to_string()))),
            &status
        )
    )];
    if let Some(col) = &w.ended_column {
        let ended: Vec<&Change<'_>> = changes.iter().filter(|c| c.set_ended).collect();
        if ended.len() == changes.len() {
            let col = d.quote(col);
            let now = ended_expr(d, schema, &mut b);
            set.push(format!("{col} = {now}"));
        } else if !ended.is_empty() {
            let col = d.quote(col);
            let now = ended_expr(d, schema, &mut b);
            let ids: Vec<String> = ended.iter().map(|c| b.bind(c.row.id.clone())).collect();
            set.push(format!(
                "{col} = CASE WHEN {id} IN ({}) THEN {now} ELSE {col} END",
                ids.join(", ")
            ));
        }
    }
    if let Some(col) = &w.message_column {
        let col = d.quote(col);
        let value = case(
            &mut b,
            &|c, b| c.message.clone().map(|m| b.bind(SqlValue::Text(m))),
            &col,
        );
        set.push(format!("{col} = {value}"));
    }
    if let Some(col) = &w.retry_at_column
        && changes.iter().any(|c| c.retry_at.is_some())
    {
        let col = d.quote(col);
        let at = schema.retry_at;
        let value = case(
            &mut b,
            &|c, b| c.retry_at.map(|ahead| time_expr(d, at, ahead, b)),
            &col,
        );
        set.push(format!("{col} = {value}"));
    }
    if let Some(r) = &w.retry {
        let bumped: Vec<&Change<'_>> = changes.iter().filter(|c| c.bump_attempts).collect();
        if bumped.len() == changes.len() {
            let a = d.quote(&r.attempts_column);
            set.push(format!("{a} = COALESCE({a}, 0) + 1"));
        } else if !bumped.is_empty() {
            let a = d.quote(&r.attempts_column);
            let ids: Vec<String> = bumped.iter().map(|c| b.bind(c.row.id.clone())).collect();
            set.push(format!(
                "{a} = CASE WHEN {id} IN ({}) THEN COALESCE({a}, 0) + 1 ELSE {a} END",
                ids.join(", ")
            ));
        }
    }
    // A column the group assigns for one row is assigned for every row (`ELSE col`).
    let assigned = [
        w.ended_column
            .as_ref()
            .filter(|_| changes.iter().any(|c| c.set_ended)),
        w.retry_at_column
            .as_ref()
            .filter(|_| changes.iter().any(|c| c.retry_at.is_some())),
    ];
    set.extend(kept_columns(d, w, schema, &assigned));
    let ids: Vec<String> = changes.iter().map(|c| b.bind(c.row.id.clone())).collect();
    // The status every row is written from, and the watch's `match`, once; then each row's
    // own conditions (by the caller, every row is written from the same status: a group
    // whose rows differ gets it per row).
    let mut shared = Vec::new();
    let one_status = changes
        .first()
        .filter(|first| changes.iter().all(|c| c.from_status == first.from_status));
    if let Some(first) = one_status {
        shared.push(from_status_condition(d, w, first.from_status, &mut b));
    }
    shared.extend(match_conditions(d, w, &mut b));
    let each: Vec<String> = changes
        .iter()
        .map(|c| {
            let mut cond = vec![format!("{id} = {}", b.bind(c.row.id.clone()))];
            if one_status.is_none() {
                cond.push(from_status_condition(d, w, c.from_status, &mut b));
            }
            cond.extend(row_conditions(d, w, c, &mut b));
            format!("({})", cond.join(" AND "))
        })
        .collect();
    let shared: String = shared.iter().fold(String::new(), |mut all, c| {
        all.push_str(" AND ");
        all.push_str(c);
        all
    });
    let sql = format!(
        "UPDATE {}{} SET {} WHERE {id} IN ({}){shared} AND ({})",
        d.quote(&w.table),
        primary_hint(d, schema),
        set.join(", "),
        ids.join(", "),
        each.join(" OR ")
    );
    b.finish(sql)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::config::{Overrides, from_str};
    use crate::store::{RunningRow, TimeValue, mysql, sqlite};

    const MYSQL: &Dialect = &mysql::DIALECT;
    const SQLITE: &Dialect = &sqlite::DIALECT;

    fn watch(extra: &str) -> Watch {
        let text = format!(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"sync\"\n\
             table = \"app.sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"/run/app/{{id}}.hb\"\nstale_after = \"5m\"\nmax_age = \"6h\"\n\
             {extra}\n"
        );
        let cfg = from_str(
            &text,
            Path::new("/etc/selfheal/selfheal.toml"),
            &Overrides::default(),
            &[],
        )
        .expect("valid watch");
        cfg.watches.into_iter().next().expect("one watch")
    }

    fn schema(ended: Option<Ended>, id_is_primary: bool) -> Schema {
        Schema {
            message_max: None,
            ended,
            retry_at: None,
            columns: HashMap::new(),
            id_is_primary,
        }
    }

    fn row(heartbeat: Option<SqlValue>) -> RunningRow {
        let tv = |raw| TimeValue {
            raw,
            stamp: Ok(None),
        };
        RunningRow {
            id: SqlValue::Int(7),
            started: tv(SqlValue::Text("2026-11-29 10:00:00".into())),
            heartbeat: heartbeat.map(tv),
            owner: None,
            owner_raw: SqlValue::Null,
            attempts: None,
            lock_values: Vec::new(),
            owner_split_raw: None,
        }
    }

    fn text(s: &str) -> SqlValue {
        SqlValue::Text(s.into())
    }

    #[test]
    fn running_rows() {
        let w = watch("heartbeat_column = \"beat\"\nowner_column = \"worker\"");
        assert_eq!(
            running_sql(MYSQL, &w),
            Statement {
                sql: "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`), `beat`, \
                      UNIX_TIMESTAMP(`beat`), `worker` FROM `app`.`sync_log` WHERE `status` = ? \
                      ORDER BY `id`"
                    .into(),
                params: vec![text("running")],
            }
        );
        assert_eq!(
            running_sql(SQLITE, &w).sql,
            "SELECT \"id\", \"start_time\", \"beat\", \"worker\" FROM \"app\".\"sync_log\" \
             WHERE \"status\" = ?1 ORDER BY \"id\""
        );
    }

    #[test]
    fn a_page_of_running_rows_is_read_after_an_id_without_offset() {
        let w = watch("");
        let after = SqlValue::Int(4_000);
        let st = running_page_sql(
            SQLITE,
            &w,
            Page {
                after: Some(&after),
                limit: Some(5_000),
                index: None,
            },
        );
        assert!(
            st.sql
                .ends_with("WHERE \"status\" = ?1 AND \"id\" > ?2 ORDER BY \"id\" LIMIT 5000"),
            "{}",
            st.sql
        );
        assert_eq!(st.params.len(), 2);
        assert!(!st.sql.contains("OFFSET"));
        // A page after the first is read through the status index where MySQL needs the
        // hint (never the first, never on SQLite).
        let ix = Ident::column("idx_status").expect("ident");
        let hinted = |d, after| {
            running_page_sql(
                d,
                &w,
                Page {
                    after,
                    limit: Some(5_000),
                    index: Some(&ix),
                },
            )
            .sql
        };
        assert!(
            hinted(MYSQL, Some(&after)).starts_with(
                "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`) FROM `app`.`sync_log` \
                 FORCE INDEX (`idx_status`) WHERE `status` = ? AND `id` > ?"
            ),
            "{}",
            hinted(MYSQL, Some(&after))
        );
        assert!(!hinted(MYSQL, None).contains("FORCE"));
        assert!(!hinted(SQLITE, Some(&after)).contains("INDEX"));
        let first = running_page_sql(
            MYSQL,
            &w,
            Page {
                after: None,
                limit: Some(10),
                index: None,
            },
        );
        assert!(
            first
                .sql
                .ends_with("WHERE `status` = ? ORDER BY `id` LIMIT 10"),
            "{}",
            first.sql
        );
    }

    #[test]
    fn a_match_filters_running_rows_with_bound_values() {
        let w = watch("match = { job = \"full-sync\", shard = \"3\" }");
        assert_eq!(
            running_sql(MYSQL, &w),
            Statement {
                sql: "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`) FROM \
                      `app`.`sync_log` WHERE `status` = ? AND `job` = ? AND `shard` = ? ORDER BY \
                      `id`"
                    .into(),
                params: vec![text("running"), text("full-sync"), text("3")],
            }
        );
        assert_eq!(
            running_sql(SQLITE, &w).sql,
            "SELECT \"id\", \"start_time\" FROM \"app\".\"sync_log\" WHERE \"status\" = ?1 \
             AND \"job\" = ?2 AND \"shard\" = ?3 ORDER BY \"id\""
        );
    }

    #[test]
    fn one_row_by_id() {
        let w = watch("");
        assert_eq!(
            current_sql(MYSQL, &w, &SqlValue::Int(7)),
            Statement {
                sql: "SELECT `status`, `start_time`, NULL FROM `app`.`sync_log` WHERE `id` = ?"
                    .into(),
                params: vec![SqlValue::Int(7)],
            }
        );
        let w = watch("message_column = \"error_msg\"");
        assert_eq!(
            current_sql(SQLITE, &w, &SqlValue::Int(7)).sql,
            "SELECT \"status\", \"start_time\", \"error_msg\" FROM \"app\".\"sync_log\" \
             WHERE \"id\" = ?1"
        );
    }

    #[test]
    fn finished_rows() {
        let w = watch("ended_column = \"end_time\"\nmessage_column = \"error_msg\"");
        assert_eq!(
            finished_sql(MYSQL, &w, History::All).expect("sql"),
            Statement {
                sql: "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`), `end_time`, \
                      UNIX_TIMESTAMP(`end_time`), `status`, CASE WHEN `error_msg` LIKE ? THEN \
                      `error_msg` END FROM `app`.`sync_log` WHERE `status` <> ? AND \
                      `start_time` IS NOT NULL AND `end_time` IS NOT NULL"
                    .into(),
                params: vec![text("self-heal:%"), text("running")],
            }
        );
        assert_eq!(
            finished_sql(SQLITE, &w, History::All).expect("sql").sql,
            "SELECT \"id\", \"start_time\", \"end_time\", \"status\", CASE WHEN \"error_msg\" \
             LIKE ?1 THEN \"error_msg\" END FROM \"app\".\"sync_log\" WHERE \"status\" <> ?2 \
             AND \"start_time\" IS NOT NULL AND \"end_time\" IS NOT NULL"
        );
        let w = watch("ended_column = \"end_time\"");
        assert_eq!(
            finished_sql(SQLITE, &w, History::Latest(1000)).expect("sql"),
            Statement {
                sql: "SELECT \"id\", \"start_time\", \"end_time\", \"status\", CASE WHEN ?1 IS \
                      NULL THEN NULL END FROM \"app\".\"sync_log\" ORDER BY \"id\" DESC LIMIT \
                      1000"
                    .into(),
                params: vec![text("self-heal:%")],
            }
        );
        assert_eq!(
            finished_sql(MYSQL, &w, History::Latest(5))
                .expect("sql")
                .sql,
            "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`), `end_time`, \
             UNIX_TIMESTAMP(`end_time`), `status`, CASE WHEN ? IS NULL THEN NULL END FROM \
             `app`.`sync_log` ORDER BY `id` DESC LIMIT 5"
        );
        // A match: filtered in the database for every finished row; for the latest rows
        // (no WHERE, so the primary key serves), a last cell the database computes.
        let w = watch("ended_column = \"end_time\"\nmatch = { job = \"full-sync\" }");
        assert_eq!(
            finished_sql(MYSQL, &w, History::All).expect("sql"),
            Statement {
                sql: "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`), `end_time`, \
                      UNIX_TIMESTAMP(`end_time`), `status`, CASE WHEN ? IS NULL THEN NULL END \
                      FROM `app`.`sync_log` WHERE `status` <> ? AND `start_time` IS NOT NULL AND \
                      `end_time` IS NOT NULL AND `job` = ?"
                    .into(),
                params: vec![text("self-heal:%"), text("running"), text("full-sync")],
            }
        );
        assert!(!finished_has_match_cell(&w, History::All));
        assert!(finished_has_match_cell(&w, History::Latest(5)));
        assert_eq!(
            finished_sql(SQLITE, &w, History::Latest(5)).expect("sql"),
            Statement {
                sql: "SELECT \"id\", \"start_time\", \"end_time\", \"status\", CASE WHEN ?1 IS \
                      NULL THEN NULL END, CASE WHEN \"job\" = ?2 THEN 1 ELSE 0 END FROM \
                      \"app\".\"sync_log\" ORDER BY \"id\" DESC LIMIT 5"
                    .into(),
                params: vec![text("self-heal:%"), text("full-sync")],
            }
        );
        let e = finished_sql(MYSQL, &watch(""), History::All).expect_err("no ended_column");
        assert_eq!(
            e.to_string(),
            "watch 'sync': ended_column is not set: runtimes cannot be measured"
        );
    }

    #[test]
    fn compare_and_set_with_everything() {
        let w = watch(
            "heartbeat_column = \"beat\"\nended_column = \"end_time\"\n\
             message_column = \"error_msg\"\nretry_value = \"queued\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3",
        );
        let r = row(Some(SqlValue::Null));
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "queued",
            message: Some("self-heal: dead".into()),
            bump_attempts: true,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
        };
        let params = vec![
            text("queued"),
            text("self-heal: dead"),
            SqlValue::Int(7),
            text("running"),
            text("2026-11-29 10:00:00"),
            SqlValue::Null,
        ];
        assert_eq!(
            cas_sql(MYSQL, &w, &schema(Some(Ended::DbNow), true), &c),
            Statement {
                sql: "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = ?, \
                      `end_time` = NOW(), `error_msg` = ?, `attempts` = COALESCE(`attempts`, 0) \
                      + 1 WHERE `id` = ? AND `status` = ? AND `start_time` <=> ? AND `beat` <=> ?"
                    .into(),
                params: params.clone(),
            }
        );
        assert_eq!(
            cas_sql(SQLITE, &w, &schema(Some(Ended::DbNow), true), &c),
            Statement {
                sql: "UPDATE \"app\".\"sync_log\" SET \"status\" = ?1, \"end_time\" = \
                      datetime('now'), \"error_msg\" = ?2, \"attempts\" = \
                      COALESCE(\"attempts\", 0) + 1 WHERE \"id\" = ?3 AND \"status\" = ?4 AND \
                      \"start_time\" IS ?5 AND \"beat\" IS ?6"
                    .into(),
                params,
            }
        );
    }

    #[test]
    fn columns_declared_on_update_current_timestamp_are_assigned_to_themselves() {
        let w = watch(
            "heartbeat_column = \"beat\"\nended_column = \"end_time\"\n\
             manual_value = \"wait_manual\"\nretry_value = \"queued\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3\nretry_at_column = \"retry_at\"",
        );
        let mut s = schema(Some(Ended::DbNow), false);
        s.retry_at = Some(Ended::DbNow);
        for (name, extra) in [
            ("start_time", "on update current_timestamp()"),
            ("beat", "DEFAULT_GENERATED on update CURRENT_TIMESTAMP"),
            ("end_time", "on update current_timestamp()"),
            ("retry_at", ""),
            ("updated_at", "on update current_timestamp()"),
        ] {
            s.columns.insert(
                name.into(),
                crate::store::Column::mysql("timestamp", "timestamp", None, extra),
            );
        }
        let r = row(Some(text("2026-11-29 10:30:00")));
        let park = Change {
            row: &r,
            from_status: "running",
            new_status: "wait_manual",
            message: None,
            bump_attempts: false,
            set_ended: false,
            retry_at: None,
            match_heartbeat: true,
        };
        // A park sets no end time: the start, the heartbeat and the end are kept; a column
        // the watch does not name (updated_at) moves as the application means it to.
        assert_eq!(
            cas_sql(MYSQL, &w, &s, &park).sql,
            "UPDATE `app`.`sync_log` SET `status` = ?, `start_time` = `start_time`, `beat` = \
             `beat`, `end_time` = `end_time` WHERE `id` = ? AND `status` = ? AND `start_time` \
             <=> ? AND `beat` <=> ?"
        );
        // A reclaim sets the end time itself.
        let dead = Change {
            new_status: "queued",
            bump_attempts: true,
            set_ended: true,
            retry_at: Some(60),
            ..park.clone()
        };
        assert_eq!(
            cas_sql(MYSQL, &w, &s, &dead).sql,
            "UPDATE `app`.`sync_log` SET `status` = ?, `end_time` = NOW(), `attempts` = \
             COALESCE(`attempts`, 0) + 1, `retry_at` = NOW() + INTERVAL ? SECOND, `start_time` \
             = `start_time`, `beat` = `beat` WHERE `id` = ? AND `status` = ? AND `start_time` \
             <=> ? AND `beat` <=> ?"
        );
        // A group: the end time is assigned for every row once one row sets it.
        let mut r2 = row(None);
        r2.id = SqlValue::Int(8);
        let parked = Change { row: &r2, ..park };
        let group = cas_group_update_sql(MYSQL, &w, &s, &[dead.clone(), parked.clone()]);
        assert!(
            group
                .sql
                .contains(", `start_time` = `start_time`, `beat` = `beat` WHERE "),
            "{}",
            group.sql
        );
        assert!(
            !group.sql.contains("`end_time` = `end_time`"),
            "{}",
            group.sql
        );
        let group = cas_group_update_sql(MYSQL, &w, &s, &[parked]);
        assert!(
            group.sql.contains(
                ", `start_time` = `start_time`, `beat` = `beat`, `end_time` = `end_time` WHERE "
            ),
            "{}",
            group.sql
        );
        // SQLite has no such clause: nothing is added.
        let lite = schema(Some(Ended::DbNow), false);
        assert!(
            !cas_sql(SQLITE, &w, &lite, &dead)
                .sql
                .contains("= \"start_time\"")
        );
    }

    #[test]
    fn a_group_of_compare_and_sets_is_one_update_with_each_rows_own_conditions() {
        let w = watch(
            "ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n\
             manual_value = \"wait_manual\"",
        );
        let a = row(None);
        let mut b = row(None);
        b.id = SqlValue::Int(8);
        b.started.raw = text("2026-11-29 11:00:00");
        let dead = Change {
            row: &a,
            new_status: "error",
            message: Some("self-heal: dead".into()),
            bump_attempts: false,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
            from_status: "running",
        };
        let parked = Change {
            row: &b,
            new_status: "wait_manual",
            message: None,
            bump_attempts: false,
            set_ended: false,
            retry_at: None,
            match_heartbeat: true,
            from_status: "running",
        };
        let changes = [dead.clone(), parked];
        let s = schema(Some(Ended::DbNow), true);
        // Each row written as its own compare-and-set would write it: the end time and the
        // message only where that row's own write sets them (a parked row keeps both);
        // each row's own conditions, never one row's start matched against another's.
        assert_eq!(
            cas_group_update_sql(MYSQL, &w, &s, &changes),
            Statement {
                sql: "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = CASE `id` \
                      WHEN ? THEN ? WHEN ? THEN ? ELSE `status` END, `end_time` = CASE WHEN `id` \
                      IN (?) THEN NOW() ELSE `end_time` END, `error_msg` = CASE `id` WHEN ? THEN \
                      ? ELSE `error_msg` END WHERE `id` IN (?, ?) AND `status` = ? AND ((`id` = ? \
                      AND `start_time` <=> ?) OR (`id` = ? AND `start_time` <=> ?))"
                    .into(),
                params: vec![
                    SqlValue::Int(7),
                    text("error"),
                    SqlValue::Int(8),
                    text("wait_manual"),
                    SqlValue::Int(7),
                    SqlValue::Int(7),
                    text("self-heal: dead"),
                    SqlValue::Int(7),
                    SqlValue::Int(8),
                    text("running"),
                    SqlValue::Int(7),
                    text("2026-11-29 10:00:00"),
                    SqlValue::Int(8),
                    text("2026-11-29 11:00:00"),
                ],
            }
        );
        // What every row of the group gets is bound once, without a CASE; what differs
        // (here the message) stays per row.
        let other = Change {
            message: Some("self-heal: dead, too".into()),
            row: &b,
            ..dead.clone()
        };
        let same = Change {
            row: &b,
            ..dead.clone()
        };
        assert_eq!(
            cas_group_update_sql(MYSQL, &w, &s, &[dead.clone(), other]).sql,
            "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = ?, `end_time` = \
             NOW(), `error_msg` = CASE `id` WHEN ? THEN ? WHEN ? THEN ? ELSE `error_msg` END \
             WHERE `id` IN (?, ?) AND `status` = ? AND ((`id` = ? AND `start_time` <=> ?) OR \
             (`id` = ? AND `start_time` <=> ?))"
        );
        let both = cas_group_update_sql(MYSQL, &w, &s, &[dead, same]);
        assert_eq!(
            both.sql,
            "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = ?, `end_time` = \
             NOW(), `error_msg` = ? WHERE `id` IN (?, ?) AND `status` = ? AND ((`id` = ? AND \
             `start_time` <=> ?) OR (`id` = ? AND `start_time` <=> ?))"
        );
        assert_eq!(
            both.params,
            vec![
                text("error"),
                text("self-heal: dead"),
                SqlValue::Int(7),
                SqlValue::Int(8),
                text("running"),
                SqlValue::Int(7),
                text("2026-11-29 10:00:00"),
                SqlValue::Int(8),
                text("2026-11-29 11:00:00"),
            ]
        );
    }

    #[test]
    fn parked_rows_and_the_compare_and_set_that_releases_one_as_a_person_reads_it() {
        let w = watch("ended_column = \"end_time\"\nmanual_value = \"wait_manual\"");
        assert_eq!(
            parked_count_sql(MYSQL, &w, "wait_manual"),
            Statement {
                sql: "SELECT COUNT(*) FROM `app`.`sync_log` WHERE `status` = ?".into(),
                params: vec![text("wait_manual")],
            }
        );
        assert_eq!(
            parked_sql(SQLITE, &w, "wait_manual", 10).sql,
            "SELECT \"id\", \"start_time\" FROM \"app\".\"sync_log\" WHERE \"status\" = ?1 \
             ORDER BY \"id\" LIMIT 10"
        );
        // The compare-and-set that releases a parked row, as a person reads it.
        let parked = |id, started| RunningRow {
            id,
            started: TimeValue {
                raw: started,
                stamp: Ok(None),
            },
            heartbeat: None,
            owner: None,
            owner_raw: SqlValue::Null,
            attempts: None,
            lock_values: Vec::new(),
            owner_split_raw: None,
        };
        let release = |r, to| Change {
            row: r,
            from_status: "wait_manual",
            new_status: to,
            message: None,
            bump_attempts: false,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
        };
        let r = parked(SqlValue::Int(7), text("2026-11-29 10:00:00"));
        let st = cas_sql(
            MYSQL,
            &w,
            &schema(Some(Ended::DbNow), false),
            &release(&r, "error"),
        );
        assert_eq!(
            for_a_person(MYSQL, &st),
            "UPDATE `app`.`sync_log` SET `status` = 'error', `end_time` = NOW() WHERE `id` = 7 \
             AND `status` = 'wait_manual' AND `start_time` <=> '2026-11-29 10:00:00'"
        );
        // Values from the database are written as literals, never spliced: a quote, a
        // backslash, a `?` and a newline in an id; a NULL start; an integer end column.
        let r = parked(text("a'b\\c?\nd"), SqlValue::Null);
        let st = cas_sql(
            SQLITE,
            &w,
            &schema(Some(Ended::Epoch), false),
            &release(&r, "pending"),
        );
        assert_eq!(
            for_a_person(SQLITE, &st),
            "UPDATE \"app\".\"sync_log\" SET \"status\" = 'pending', \"end_time\" = \
             CAST(strftime('%s', 'now') AS INTEGER) WHERE \"id\" = 'a''b\\c?' || char(10) || 'd' \
             AND \"status\" = 'wait_manual' AND \"start_time\" IS NULL"
        );
        let st = cas_sql(MYSQL, &w, &schema(None, false), &release(&r, "error"));
        assert_eq!(
            for_a_person(MYSQL, &st),
            "UPDATE `app`.`sync_log` SET `status` = 'error', `end_time` = NOW() WHERE `id` = \
             'a''b\\\\c?\\nd' AND `status` = 'wait_manual' AND `start_time` <=> NULL"
        );
        // A watch that is one job kind of a shared table counts and releases its own.
        let w = watch("manual_value = \"wait_manual\"\nmatch = { job = \"full-sync\" }");
        assert_eq!(
            parked_count_sql(MYSQL, &w, "wait_manual"),
            Statement {
                sql: "SELECT COUNT(*) FROM `app`.`sync_log` WHERE `status` = ? AND `job` = ?"
                    .into(),
                params: vec![text("wait_manual"), text("full-sync")],
            }
        );
        let r = parked(SqlValue::Int(7), text("2026-11-29 10:00:00"));
        let st = cas_sql(MYSQL, &w, &schema(None, true), &release(&r, "error"));
        assert!(
            for_a_person(MYSQL, &st).ends_with(" AND `job` = 'full-sync'"),
            "{st:?}"
        );
        assert_eq!(literal(MYSQL, &SqlValue::Bytes(vec![0, 255])), "X'00ff'");
        assert_eq!(
            literal(MYSQL, &SqlValue::UInt(u64::MAX)),
            "18446744073709551615"
        );
    }

    #[test]
    fn compare_and_set_matches_an_owner_in_two_columns() {
        // A row another worker claimed in the meantime (Aoe_Scheduler's host and pid) is
        // not the row that was judged.
        let w = watch("owner_host_column = \"host\"\nowner_pid_column = \"pid\"");
        let mut r = row(None);
        r.owner = Some("web1:4242".into());
        r.owner_split_raw = Some((text("web1"), text("4242")));
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "error",
            message: None,
            bump_attempts: false,
            set_ended: false,
            retry_at: None,
            match_heartbeat: true,
        };
        let st = cas_sql(MYSQL, &w, &schema(None, true), &c);
        assert!(
            st.sql.ends_with("AND `host` <=> ? AND `pid` <=> ?"),
            "{}",
            st.sql
        );
        assert_eq!(
            st.params[st.params.len() - 2..],
            [text("web1"), text("4242")]
        );
    }

    #[test]
    fn compare_and_set_matches_the_owner_and_the_match() {
        // A row another host claimed, or another job kind took, in the meantime is not
        // the row that was judged.
        let w = watch("owner_column = \"worker\"\nmatch = { job = \"full-sync\" }");
        let mut r = row(None);
        r.owner = Some("web1:4242".into());
        r.owner_raw = text("web1:4242");
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "error",
            message: None,
            bump_attempts: false,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
        };
        assert_eq!(
            cas_sql(MYSQL, &w, &schema(None, true), &c),
            Statement {
                sql: "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = ? WHERE `id` \
                      = ? AND `status` = ? AND `start_time` <=> ? AND `worker` <=> ? AND `job` = ?"
                    .into(),
                params: vec![
                    text("error"),
                    SqlValue::Int(7),
                    text("running"),
                    text("2026-11-29 10:00:00"),
                    text("web1:4242"),
                    text("full-sync"),
                ],
            }
        );
        // An owner read as NULL still matches only NULL.
        r.owner_raw = SqlValue::Null;
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "error",
            message: None,
            bump_attempts: false,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
        };
        assert_eq!(
            cas_sql(SQLITE, &w, &schema(None, true), &c).sql,
            "UPDATE \"app\".\"sync_log\" SET \"status\" = ?1 WHERE \"id\" = ?2 AND \"status\" = \
             ?3 AND \"start_time\" IS ?4 AND \"worker\" IS ?5 AND \"job\" = ?6"
        );
    }

    #[test]
    fn compare_and_set_from_another_status_with_a_retry_at() {
        let w = watch(
            "heartbeat_column = \"beat\"\nended_column = \"end_time\"\n\
             manual_value = \"wait_manual\"\nretry_value = \"queued\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3\nretry_at_column = \"retry_at\"",
        );
        let r = row(Some(text("2026-11-29 10:30:00")));
        // A person's retry of a parked row: from wait_manual, retry_at now.
        let c = Change {
            row: &r,
            from_status: "wait_manual",
            new_status: "queued",
            message: None,
            bump_attempts: true,
            set_ended: true,
            retry_at: Some(0),
            match_heartbeat: true,
        };
        let mut sc = schema(Some(Ended::DbNow), false);
        sc.retry_at = Some(Ended::DbNow);
        assert_eq!(
            cas_sql(MYSQL, &w, &sc, &c),
            Statement {
                sql: "UPDATE `app`.`sync_log` SET `status` = ?, `end_time` = NOW(), `attempts` = \
                      COALESCE(`attempts`, 0) + 1, `retry_at` = NOW() WHERE `id` = ? AND \
                      `status` = ? AND `start_time` <=> ? AND `beat` <=> ?"
                    .into(),
                params: vec![
                    text("queued"),
                    SqlValue::Int(7),
                    text("wait_manual"),
                    text("2026-11-29 10:00:00"),
                    text("2026-11-29 10:30:00"),
                ],
            }
        );
        // A reclaim's backoff: the database's now plus the delay, bound.
        let c = Change {
            from_status: "running",
            retry_at: Some(240),
            ..c
        };
        assert_eq!(
            cas_sql(MYSQL, &w, &sc, &c).sql,
            "UPDATE `app`.`sync_log` SET `status` = ?, `end_time` = NOW(), `attempts` = \
             COALESCE(`attempts`, 0) + 1, `retry_at` = NOW() + INTERVAL ? SECOND WHERE `id` = ? \
             AND `status` = ? AND `start_time` <=> ? AND `beat` <=> ?"
        );
        assert_eq!(cas_sql(MYSQL, &w, &sc, &c).params[1], SqlValue::Int(240));
        let lite = cas_sql(SQLITE, &w, &sc, &c);
        assert!(
            lite.sql.contains("\"retry_at\" = datetime('now', ?2)"),
            "{}",
            lite.sql
        );
        assert_eq!(lite.params[1], text("+240 seconds"));
        // Unix seconds, and a configured zone's wall clock (UTC: offset 0).
        sc.retry_at = Some(Ended::Epoch);
        let st = cas_sql(MYSQL, &w, &sc, &c);
        assert!(
            st.sql.contains("`retry_at` = UNIX_TIMESTAMP() + ?"),
            "{}",
            st.sql
        );
        assert_eq!(st.params[1], SqlValue::Int(240));
        let st = cas_sql(SQLITE, &w, &sc, &c);
        assert!(
            st.sql
                .contains("\"retry_at\" = CAST(strftime('%s', 'now') AS INTEGER) + ?2"),
            "{}",
            st.sql
        );
        sc.retry_at = Some(Ended::Zone(crate::zone::Zone::utc()));
        let st = cas_sql(MYSQL, &w, &sc, &c);
        assert!(
            st.sql
                .contains("`retry_at` = UTC_TIMESTAMP() + INTERVAL ? SECOND"),
            "{}",
            st.sql
        );
        assert_eq!(st.params[1], SqlValue::Int(240));
        // An un-park: from wait_manual to running, not matching the heartbeat column, no
        // end time, no retry.
        let c = Change {
            from_status: "wait_manual",
            new_status: "running",
            bump_attempts: false,
            set_ended: false,
            retry_at: None,
            match_heartbeat: false,
            ..c
        };
        assert_eq!(
            cas_sql(SQLITE, &w, &sc, &c).sql,
            "UPDATE \"app\".\"sync_log\" SET \"status\" = ?1 WHERE \"id\" = ?2 AND \"status\" = \
             ?3 AND \"start_time\" IS ?4"
        );
        // Without the column, nothing is set.
        let w = watch("retry_value = \"queued\"\nattempts_column = \"attempts\"\nmax_attempts = 3");
        let c = Change {
            retry_at: Some(60),
            ..c
        };
        assert!(!cas_sql(MYSQL, &w, &sc, &c).sql.contains("retry_at"));
    }

    #[test]
    fn rows_by_status_or_id_and_every_column_of_one() {
        let w = watch("owner_column = \"worker\"\nmatch = { job = \"full-sync\" }");
        assert_eq!(
            rows_sql(MYSQL, &w, crate::store::Select::Status("wait_manual", 1000)),
            Statement {
                sql: "SELECT `id`, `start_time`, UNIX_TIMESTAMP(`start_time`), `worker`, `status` \
                      FROM `app`.`sync_log` WHERE `status` = ? AND `job` = ? ORDER BY `id` LIMIT \
                      1000"
                    .into(),
                params: vec![text("wait_manual"), text("full-sync")],
            }
        );
        let id = SqlValue::Text("a'7".into());
        assert_eq!(
            rows_sql(SQLITE, &w, crate::store::Select::Id(&id)),
            Statement {
                sql: "SELECT \"id\", \"start_time\", \"worker\", \"status\" FROM \
                      \"app\".\"sync_log\" WHERE \"id\" = ?1 AND \"job\" = ?2 ORDER BY \"id\""
                    .into(),
                params: vec![id.clone(), text("full-sync")],
            }
        );
        assert_eq!(
            running_sql(MYSQL, &w),
            rows_sql(MYSQL, &w, crate::store::Select::Running(Page::default()))
        );
        assert_eq!(
            columns_sql(MYSQL, &w, &id),
            Statement {
                sql: "SELECT * FROM `app`.`sync_log` WHERE `id` = ?".into(),
                params: vec![id],
            }
        );
    }

    #[test]
    fn the_pickers_condition_follows_the_column() {
        let w = watch(
            "retry_value = \"queued\"\nattempts_column = \"attempts\"\nmax_attempts = 3\n\
             retry_at_column = \"retry_at\"",
        );
        let mut sc = schema(None, true);
        sc.retry_at = Some(Ended::DbNow);
        assert_eq!(
            due_condition(MYSQL, &w, &sc).as_deref(),
            Some("(`retry_at` IS NULL OR `retry_at` <= NOW())")
        );
        assert_eq!(
            due_condition(SQLITE, &w, &sc).as_deref(),
            Some("(\"retry_at\" IS NULL OR \"retry_at\" <= datetime('now'))")
        );
        sc.retry_at = Some(Ended::Epoch);
        assert_eq!(
            due_condition(MYSQL, &w, &sc).as_deref(),
            Some("(`retry_at` IS NULL OR `retry_at` <= UNIX_TIMESTAMP())")
        );
        assert_eq!(due_condition(MYSQL, &watch(""), &sc), None);
    }

    #[test]
    fn compare_and_set_end_times() {
        let w = watch("ended_column = \"end_time\"");
        let r = row(None);
        let c = Change {
            row: &r,
            from_status: "running",
            new_status: "error",
            message: None,
            bump_attempts: false,
            set_ended: true,
            retry_at: None,
            match_heartbeat: true,
        };
        let epoch = schema(Some(Ended::Epoch), false);
        assert_eq!(
            cas_sql(MYSQL, &w, &epoch, &c).sql,
            "UPDATE `app`.`sync_log` SET `status` = ?, `end_time` = UNIX_TIMESTAMP() WHERE \
             `id` = ? AND `status` = ? AND `start_time` <=> ?"
        );
        assert_eq!(
            cas_sql(SQLITE, &w, &epoch, &c).sql,
            "UPDATE \"app\".\"sync_log\" SET \"status\" = ?1, \"end_time\" = \
             CAST(strftime('%s', 'now') AS INTEGER) WHERE \"id\" = ?2 AND \"status\" = ?3 AND \
             \"start_time\" IS ?4"
        );
        // UTC: an offset of 0 whatever the date.
        let zone = schema(Some(Ended::Zone(crate::zone::Zone::utc())), false);
        assert_eq!(
            cas_sql(MYSQL, &w, &zone, &c),
            Statement {
                sql: "UPDATE `app`.`sync_log` SET `status` = ?, `end_time` = UTC_TIMESTAMP() + \
                      INTERVAL ? SECOND WHERE `id` = ? AND `status` = ? AND `start_time` <=> ?"
                    .into(),
                params: vec![
                    text("error"),
                    SqlValue::Int(0),
                    SqlValue::Int(7),
                    text("running"),
                    text("2026-11-29 10:00:00"),
                ],
            }
        );
        assert_eq!(
            cas_sql(SQLITE, &w, &zone, &c),
            Statement {
                sql: "UPDATE \"app\".\"sync_log\" SET \"status\" = ?1, \"end_time\" = \
                      datetime('now', ?2) WHERE \"id\" = ?3 AND \"status\" = ?4 AND \
                      \"start_time\" IS ?5"
                    .into(),
                params: vec![
                    text("error"),
                    text("+0 seconds"),
                    SqlValue::Int(7),
                    text("running"),
                    text("2026-11-29 10:00:00"),
                ],
            }
        );
        // A row parked for a person keeps no end time, even with an end column.
        let parked = Change {
            set_ended: false,
            ..c.clone()
        };
        assert_eq!(
            cas_sql(MYSQL, &w, &epoch, &parked).sql,
            "UPDATE `app`.`sync_log` SET `status` = ? WHERE `id` = ? AND `status` = ? AND \
             `start_time` <=> ?"
        );
        // No end column: nothing but the status is set.
        let w = watch("");
        assert_eq!(
            cas_sql(MYSQL, &w, &schema(None, true), &c).sql,
            "UPDATE `app`.`sync_log` FORCE INDEX (PRIMARY) SET `status` = ? WHERE `id` = ? AND \
             `status` = ? AND `start_time` <=> ?"
        );
    }

    #[test]
    fn dollar_placeholders_are_numbered_and_read_back_for_a_person() {
        // A dialect that binds as PostgreSQL does; everything else as SQLite's.
        const DOLLAR: &Dialect = &Dialect {
            placeholder: Placeholder::Dollar,
            ..sqlite::DIALECT
        };
        let w = watch(
            "match = { a = \"1\", b = \"2\", c = \"3\", d = \"4\", e = \"5\", f = \"6\", \
             g = \"7\", h = \"8\", i = \"9\", j = \"10\" }",
        );
        let after = SqlValue::Int(40);
        let st = running_page_sql(
            DOLLAR,
            &w,
            Page {
                after: Some(&after),
                limit: Some(5),
                index: None,
            },
        );
        assert!(
            st.sql.contains("WHERE \"status\" = $1 AND \"a\" = $2 AND")
                && st.sql.contains("\"j\" = $11 AND \"id\" > $12 ORDER BY"),
            "{}",
            st.sql
        );
        assert_eq!(st.params.len(), 12);
        // `$10` is the tenth value, not the first followed by a 0; a `$1` inside a value is
        // a value.
        let person = for_a_person(
            DOLLAR,
            &Statement {
                sql: "SELECT $1, $10, $2".into(),
                params: (1..=10).map(|i| text(&format!("${i}"))).collect(),
            },
        );
        assert_eq!(person, "SELECT '$1', '$10', '$2'");
        // A placeholder with no value stays as written.
        let unbound = Statement {
            sql: "SELECT $3, ?4, ?".into(),
            params: vec![SqlValue::Int(1)],
        };
        assert_eq!(for_a_person(DOLLAR, &unbound), "SELECT $3, ?4, ?");
        assert_eq!(for_a_person(SQLITE, &unbound), "SELECT $3, ?4, ?");
        // `?` alone is every placeholder of MySQL: the first takes the one value.
        assert_eq!(for_a_person(MYSQL, &unbound), "SELECT $3, 14, ?");
    }
}
