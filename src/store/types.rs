//! What a column's type means to selfheal, in one place: the classification of a declared
//! type ([`ColumnType`]), whether a column can do the job its key gives it ([`Role`],
//! used by `doctor`), whether it can hold a status selfheal writes ([`Column::holds`],
//! [`check_values`]: `check` refuses to start, `doctor` shows the `ALTER TABLE`), how the
//! end time is written into it ([`ended_for`]), how a value read from a start, heartbeat
//! or end column is understood ([`time_value`]: DECIMAL unix seconds too), and the checks
//! every database's columns go through once they are read ([`schema`]).
//!
//! A dialect's schema statements only read what their database says about a column
//! (MySQL's `information_schema`, SQLite's declarations) and hand it to [`Column::mysql`]
//! or [`Column::declared`]. Pure: no I/O.

use std::collections::HashMap;

use crate::clock::{Stamp, TextTime, parse_text_stamp, whole_seconds};
use crate::config::{Ident, Watch};
use crate::error::{Error, Result, SchemaProblem};
use crate::zone::Zone;

use super::{Dialect, Ended, Schema, SqlValue, TimeValue};

/// A column's type as selfheal sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnType {
    /// DATETIME: a naive wall-clock time, as the application wrote it.
    DateTime,
    /// TIMESTAMP: MySQL stores UTC and reads it back in the session's time zone.
    Timestamp,
    /// DATE: no time of day.
    Date,
    /// TIME or YEAR: not a point in time.
    TimeOfDay,
    /// An integer type: unix seconds in a time column, a count in the attempts column.
    Integer,
    /// DECIMAL or NUMERIC.
    Decimal,
    /// FLOAT, DOUBLE or REAL.
    Float,
    /// Character data (CHAR, VARCHAR, TEXT, …).
    Text,
    /// ENUM and its members.
    Enum { members: Vec<String> },
    /// BLOB, BINARY, VARBINARY.
    Binary,
    /// No declared type (SQLite).
    Untyped,
    /// Anything else (JSON, SET, BIT, spatial types, …).
    Other,
}

/// One column as the database describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The type in the database's words, lowercase (MySQL's `DATA_TYPE` such as `varchar`,
    /// SQLite's declaration such as `varchar(255)`; empty when undeclared): what `doctor`
    /// shows.
    pub declared: String,
    pub ty: ColumnType,
    /// The longest value in characters, when the type says (`VARCHAR(255)`).
    pub length: Option<usize>,
    /// The database holds the column to its type (MySQL); SQLite's declarations are only
    /// affinities, and any value fits.
    pub enforced: bool,
    /// Declared `ON UPDATE CURRENT_TIMESTAMP` (MySQL's `EXTRA`): every `UPDATE` of the row
    /// that does not assign the column moves it to now.
    pub on_update_now: bool,
}

/// Classifies a type by its base name (lowercase, without length or options).
fn classify(base: &str, full: &str) -> ColumnType {
    match base {
        "" => ColumnType::Untyped,
        "datetime" => ColumnType::DateTime,
        "timestamp" => ColumnType::Timestamp,
        "date" => ColumnType::Date,
        "time" | "year" => ColumnType::TimeOfDay,
        // `int2`, `int8` and `unsigned big int` are SQLite's examples of integer types.
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "int2" | "int4"
        | "int8" | "unsigned" => ColumnType::Integer,
        "decimal" | "numeric" => ColumnType::Decimal,
        "real" | "double" | "float" => ColumnType::Float,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "character"
        | "nvarchar" | "nchar" | "clob" => ColumnType::Text,
        "enum" => ColumnType::Enum {
            members: enum_members(full),
        },
        b if b.ends_with("blob") || b == "binary" || b == "varbinary" => ColumnType::Binary,
        _ => ColumnType::Other,
    }
}

/// The base name of a declaration: `varchar(255)` → `varchar`, `int unsigned` → `int`.
fn base_of(decl: &str) -> &str {
    decl.split(['(', ' ']).next().unwrap_or("")
}

/// `varchar(255)` → 255, `decimal(10,2)` → 10.
fn declared_length(decl: &str) -> Option<usize> {
    let (_, args) = decl.split_once('(')?;
    let (args, _) = args.split_once(')')?;
    args.split(',').next()?.trim().parse().ok()
}

/// The members of `enum('a','b''c')` (quotes doubled inside a member, as MySQL writes
/// them), in order.
fn enum_members(decl: &str) -> Vec<String> {
    let Some((_, list)) = decl.split_once('(') else {
        return Vec::new();
    };
    let mut members = Vec::new();
    let mut chars = list.chars().peekable();
    let mut current: Option<String> = None;
    while let Some(c) = chars.next() {
        match (&mut current, c) {
            (None, '\'') => current = Some(String::new()),
            (None, ')') => break,
            (None, _) => {}
            (Some(m), '\'') if chars.peek() == Some(&'\'') => {
                chars.next();
                m.push('\'');
            }
            (Some(_), '\'') => members.extend(current.take()),
            (Some(m), c) => m.push(c),
        }
    }
    members
}

impl Column {
    /// A column from its declaration as written (SQLite's `PRAGMA table_info`). SQLite
    /// gives any declaration containing `INT` integer affinity, so an unknown one that
    /// does counts as an integer.
    pub fn declared(decl: &str) -> Column {
        let declared = decl.trim().to_ascii_lowercase();
        let ty = match classify(base_of(&declared), &declared) {
            ColumnType::Other if declared.contains("int") => ColumnType::Integer,
            ty => ty,
        };
        Column {
            length: declared_length(&declared),
            ty,
            declared,
            enforced: false,
            on_update_now: false,
        }
    }

    /// A column from MySQL's `information_schema.COLUMNS`: `DATA_TYPE`, `COLUMN_TYPE` (for
    /// the members of an ENUM), `CHARACTER_MAXIMUM_LENGTH` and `EXTRA` (`on update
    /// current_timestamp()` on MariaDB, `DEFAULT_GENERATED on update CURRENT_TIMESTAMP` on
    /// MySQL 8).
    pub fn mysql(data_type: &str, column_type: &str, char_max: Option<u64>, extra: &str) -> Column {
        let declared = data_type.to_ascii_lowercase();
        Column {
            ty: classify(&declared, column_type),
            length: char_max.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            declared,
            enforced: true,
            on_update_now: extra.to_ascii_lowercase().contains("on update"),
        }
    }

    /// The type as the database would write it: `enum('running','done')`, `varchar(16)`.
    pub fn type_text(&self) -> String {
        match (&self.ty, self.length) {
            (ColumnType::Enum { members }, _) => enum_type(members.iter().map(String::as_str)),
            _ if self.declared.contains('(') => self.declared.clone(),
            (ColumnType::Text, Some(n)) if self.declared.ends_with("char") => {
                format!("{}({n})", self.declared)
            }
            _ => self.declared.clone(),
        }
    }

    /// Whether the database can store `value` in this column as it is: a member of an
    /// ENUM, no longer than the column's length, a whole number in an integer column.
    /// Always, where the database does not enforce types (SQLite).
    pub fn holds(&self, value: &str) -> Result<(), CannotStore> {
        if !self.enforced {
            return Ok(());
        }
        match (&self.ty, self.length) {
            (ColumnType::Enum { members }, _) if !members.iter().any(|m| m == value) => {
                Err(CannotStore::NotMember {
                    members: members.clone(),
                })
            }
            (ColumnType::Enum { .. }, _) => Ok(()),
            (ColumnType::Integer, _) if value.trim().parse::<i64>().is_err() => {
                Err(CannotStore::NotANumber)
            }
            (_, Some(n)) if value.chars().count() > n => Err(CannotStore::TooLong {
                length: n,
                chars: value.chars().count(),
            }),
            _ => Ok(()),
        }
    }

    /// The type widened to hold `values` as well, as the database writes types: an ENUM
    /// with the missing members added, a character column long enough. `None` when no
    /// wider type of the same kind would do (an integer column).
    pub fn widened(&self, values: &[&str]) -> Option<String> {
        match &self.ty {
            ColumnType::Enum { members } => {
                let mut all: Vec<&str> = members.iter().map(String::as_str).collect();
                for v in values {
                    if !all.contains(v) {
                        all.push(v);
                    }
                }
                Some(enum_type(all.into_iter()))
            }
            ColumnType::Text => {
                let need = values.iter().map(|v| v.chars().count()).max()?;
                let base = base_of(&self.declared);
                Some(if base.ends_with("char") {
                    format!("{base}({})", need.max(self.length.unwrap_or(0)).max(32))
                } else {
                    // TINYTEXT and its like: the next size up holds 65,535 bytes.
                    "text".into()
                })
            }
            _ => None,
        }
    }
}

/// `'it''s'`: a string literal as MySQL reads it (quotes doubled, backslashes and control
/// characters escaped), for SQL shown to a person, never run.
pub fn mysql_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            '\x1a' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A column definition as `CREATE TABLE` writes it, split after its type: `enum('a','b''c')
/// NOT NULL` → (`enum('a','b''c')`, ` NOT NULL`). Quotes inside the type's parentheses are
/// respected.
pub fn split_type(definition: &str) -> (&str, &str) {
    let d = definition.trim_start();
    let name_end = d
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .unwrap_or(d.len());
    let Some((name, after)) = d.split_at_checked(name_end) else {
        return (d, "");
    };
    if !after.starts_with('(') {
        return (name, after);
    }
    let mut quoted = false;
    let mut chars = after.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (c, quoted) {
            ('\'', false) => quoted = true,
            ('\'', true) if chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
            }
            ('\'', true) => quoted = false,
            ('\\', true) => {
                chars.next();
            }
            (')', false) => return d.split_at_checked(name_end + i + 1).unwrap_or((d, "")),
            _ => {}
        }
    }
    (d, "")
}

/// A column definition as `CREATE TABLE` writes it (after the column's name) without its
/// `ON UPDATE …` clause: `timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE
/// current_timestamp() COMMENT 'x'` → `timestamp NOT NULL DEFAULT current_timestamp()
/// COMMENT 'x'`; `None` when it has none. Quoted text (a default, a comment) is skipped.
pub fn without_on_update(definition: &str) -> Option<String> {
    const CLAUSE: &str = " ON UPDATE ";
    let mut quote: Option<char> = None;
    let mut chars = definition.char_indices();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some(q) if c == '\\' && q != '`' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '\'' | '"' | '`') => quote = Some(c),
            None => {
                let (before, rest) = definition.split_at_checked(i)?;
                let is_clause = rest
                    .get(..CLAUSE.len())
                    .is_some_and(|h| h.eq_ignore_ascii_case(CLAUSE));
                if is_clause {
                    // The clause's value: one word, with its parentheses
                    // (`current_timestamp(3)`).
                    let value = rest.get(CLAUSE.len()..).unwrap_or("");
                    let after = value
                        .find(' ')
                        .map_or("", |end| value.get(end..).unwrap_or(""));
                    return Some(format!("{before}{after}"));
                }
            }
        }
    }
    None
}

/// `enum('a','b')` from its members.
fn enum_type<'a>(members: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = members.map(mysql_literal).collect();
    format!("enum({})", quoted.join(","))
}

/// Why a status selfheal would write cannot be stored in the status column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CannotStore {
    /// Not one of the ENUM's members.
    NotMember { members: Vec<String> },
    /// Longer than the column holds, in characters.
    TooLong { length: usize, chars: usize },
    /// Not a whole number, in an integer column.
    NotANumber,
}

impl std::fmt::Display for CannotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CannotStore::NotMember { members } => write!(
                f,
                "it is not one of the column's values ({})",
                members.join(", ")
            ),
            CannotStore::TooLong { length, chars } => write!(
                f,
                "it is {chars} characters long and the column holds {length}"
            ),
            CannotStore::NotANumber => f.write_str("the column holds whole numbers only"),
        }
    }
}

/// The statuses a watch can write, with the key that sets each: `retry_value` and
/// `manual_value` when set, and `dead_value` unless every path to it is taken by the
/// other two (a retry budget, a manual value and `overtime` other than `mark_dead`).
pub fn written_values(w: &Watch) -> Vec<(&'static str, &str)> {
    let mut v = Vec::with_capacity(3);
    let dead_unused = w.retry.is_some()
        && w.manual_value.is_some()
        && w.overtime != crate::config::Overtime::MarkDead;
    if !dead_unused {
        v.push(("dead_value", w.dead_value.as_str()));
    }
    v.extend(w.manual_value.as_deref().map(|m| ("manual_value", m)));
    v.extend(w.retry.as_ref().map(|r| ("retry_value", r.value.as_str())));
    v
}

/// Every status the watch can write that its status column cannot hold, with the key
/// that sets it and why.
pub fn misfits<'w>(w: &'w Watch, schema: &Schema) -> Vec<(&'static str, &'w str, CannotStore)> {
    let Some(col) = schema
        .columns
        .get(&w.status_column.name().to_ascii_lowercase())
    else {
        return Vec::new();
    };
    written_values(w)
        .into_iter()
        .filter_map(|(key, value)| col.holds(value).err().map(|m| (key, value, m)))
        .collect()
}

/// Refuses a watch that would write a status its column cannot hold: a lenient server
/// (no strict SQL mode) would store a mangled value (`''` for an unknown ENUM member, a
/// cut string, 0), and the row would vanish from every status the application knows.
/// `check` runs this for every watch before anything is written.
pub fn check_values(w: &Watch, schema: &Schema) -> Result<()> {
    match misfits(w, schema).into_iter().next() {
        None => Ok(()),
        Some((key, value, misfit)) => Err(Error::Schema {
            watch: w.name.clone(),
            problem: SchemaProblem::ValueDoesNotFit {
                key,
                value: value.to_string(),
                column: w.status_column.to_string(),
                why: misfit.to_string(),
            },
        }),
    }
}

/// What a column must hold, by the key that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `status_column`: text (or a numeric code).
    Status,
    /// `started_column`, `heartbeat_column`, `ended_column`: a point in time.
    Time,
    /// `message_column`, `owner_column`.
    Text,
    /// `attempts_column`.
    Count,
    /// `id_column`: anything but binary.
    Any,
}

impl ColumnType {
    /// Why a column of this type cannot do the job of `role`, if it cannot. The same rules
    /// for every database: on SQLite a declaration is all there is to go by.
    pub fn problem(&self, role: Role) -> Option<&'static str> {
        use ColumnType as T;
        match (self, role) {
            (T::Binary, _) => Some("a binary type"),
            (_, Role::Any) => None,
            (T::Date, Role::Time) => Some("a DATE has no time of day"),
            (T::TimeOfDay, Role::Time) => Some("not a point in time"),
            (T::Other, Role::Time) => Some("not a date-time, unix seconds or text"),
            (_, Role::Time) => None,
            (T::Text | T::Enum { .. } | T::Untyped | T::Integer, Role::Status | Role::Text) => None,
            (_, Role::Status | Role::Text) => Some("not a text column"),
            (T::Integer | T::Decimal | T::Untyped, Role::Count) => None,
            (_, Role::Count) => Some("not an integer column"),
        }
    }
}

/// Every column a watch names, with the key that names it and the job it does.
pub fn named_columns(w: &Watch) -> Vec<(&'static str, &Ident, Role)> {
    let mut v = vec![
        ("id_column", &w.id_column, Role::Any),
        ("status_column", &w.status_column, Role::Status),
        ("started_column", &w.started_column, Role::Time),
    ];
    let opt = [
        ("heartbeat_column", w.heartbeat_column.as_ref(), Role::Time),
        ("ended_column", w.ended_column.as_ref(), Role::Time),
        ("message_column", w.message_column.as_ref(), Role::Text),
        ("owner_column", w.owner_column.as_ref(), Role::Text),
        ("retry_at_column", w.retry_at_column.as_ref(), Role::Time),
        (
            "attempts_column",
            w.retry.as_ref().map(|r| &r.attempts_column),
            Role::Count,
        ),
    ];
    v.extend(opt.into_iter().filter_map(|(k, c, r)| c.map(|c| (k, c, r))));
    if let Some((h, p)) = &w.owner_split {
        v.extend([
            ("owner_host_column", h, Role::Any),
            ("owner_pid_column", p, Role::Any),
        ]);
    }
    v.extend(w.matches.iter().map(|(c, _)| ("match", c, Role::Any)));
    v.extend(
        w.lock_columns()
            .into_iter()
            .map(|c| ("db_lock", c, Role::Any)),
    );
    v
}

/// How the end time is written into a column of type `ty`: unix seconds into a number;
/// the configured zone's wall-clock time into a DATETIME (and, where types are only
/// declarations, into anything else), as the application writes it; else the database's
/// own current time (a TIMESTAMP converts it itself).
pub fn ended_for(ty: &ColumnType, tz: Option<Zone>, enforces_types: bool) -> Ended {
    match (ty, tz) {
        (ColumnType::Integer | ColumnType::Decimal | ColumnType::Float, _) => Ended::Epoch,
        (ColumnType::DateTime, Some(tz)) => Ended::Zone(tz),
        (_, Some(tz)) if !enforces_types => Ended::Zone(tz),
        _ => Ended::DbNow,
    }
}

/// How a database places a naive date-time that no `timezone` is configured for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NaiveClock {
    /// UTC: SQLite, whose `datetime('now')` writes UTC.
    Utc,
    /// As the server placed it on its own clock: `UNIX_TIMESTAMP(col)`, read beside the
    /// value (MySQL/MariaDB; `None` when the server gave no instant for it).
    Server(Option<i64>),
}

/// What a value read from a time column means: an instant, or a naive time to place in
/// the configured zone. `ty` is the column's type when the driver sends it with the value
/// (MySQL); without it the value decides. A `TIMESTAMP` is always the server's instant
/// (stored as UTC, whatever the session's zone); a naive `DATETIME` or text is placed in
/// `tz` when one is configured, else by `clock`.
pub fn time_value(
    raw: SqlValue,
    ty: Option<&ColumnType>,
    tz: Option<Zone>,
    clock: NaiveClock,
) -> TimeValue {
    let naive = |n: chrono::NaiveDateTime, zone: Option<Zone>| match (zone, clock) {
        (Some(tz), _) => Ok(Some(Stamp::Local(n, tz))),
        (None, NaiveClock::Utc) => Ok(Some(Stamp::Epoch(n.and_utc().timestamp()))),
        (None, NaiveClock::Server(Some(e))) => Ok(Some(Stamp::Epoch(e))),
        (None, NaiveClock::Server(None)) => Err(format!(
            "{} cannot be placed on the server's clock (UNIX_TIMESTAMP gives none; it is \
             outside the range of a TIMESTAMP); set [database] timezone",
            n.format("%Y-%m-%d %H:%M:%S")
        )),
    };
    let stamp = match &raw {
        SqlValue::Null => Ok(None),
        SqlValue::DateTime(d) if ty == Some(&ColumnType::Timestamp) => naive(*d, None),
        SqlValue::DateTime(d) => naive(*d, tz),
        SqlValue::Int(i) => Ok(Some(Stamp::Epoch(*i))),
        SqlValue::UInt(u) => i64::try_from(*u)
            .map(|i| Some(Stamp::Epoch(i)))
            .map_err(|_| format!("{u} is not a unix timestamp")),
        SqlValue::Float(f) => whole_seconds(*f)
            .map(|i| Some(Stamp::Epoch(i)))
            .ok_or_else(|| format!("{f} is not a unix timestamp")),
        // MySQL sends a DECIMAL as its digits: unix seconds, the fraction dropped.
        SqlValue::Text(s) if ty == Some(&ColumnType::Decimal) => decimal_seconds(s).map(Some),
        SqlValue::Text(s) if s.starts_with("0000-00-00") => Err(format!("{s:?} is a zero date")),
        SqlValue::Text(s) => match parse_text_stamp(s) {
            Ok(TextTime::Epoch(e)) => Ok(Some(Stamp::Epoch(e))),
            Ok(TextTime::Naive(n)) if ty == Some(&ColumnType::Timestamp) => naive(n, None),
            Ok(TextTime::Naive(n)) => naive(n, tz),
            Err(e) => Err(e),
        },
        other @ SqlValue::Bytes(_) => Err(format!("{other} is not a date-time or unix timestamp")),
    };
    TimeValue { raw, stamp }
}

/// Unix seconds from a DECIMAL's digits (`1796042168.250` → 1796042168).
fn decimal_seconds(s: &str) -> Result<Stamp, String> {
    let t = s.trim();
    let whole = t.split_once('.').map_or(t, |(w, _)| w);
    match whole {
        "" | "-" => Ok(Stamp::Epoch(0)),
        w => w
            .parse::<i64>()
            .map(Stamp::Epoch)
            .map_err(|_| format!("{s:?} is not a unix timestamp")),
    }
}

/// The checks every database's schema goes through once the table's `columns` are read
/// (lowercase name → column): every column the watch names exists; the message column
/// holds text where the database enforces types, and its length; how the end time is
/// written.
pub fn schema(
    w: &Watch,
    d: &Dialect,
    tz: Option<Zone>,
    columns: HashMap<String, Column>,
    id_is_primary: bool,
) -> Result<Schema> {
    let fail = |problem| {
        Err(Error::Schema {
            watch: w.name.clone(),
            problem,
        })
    };
    for (key, col, _) in named_columns(w) {
        if !columns.contains_key(&col.name().to_ascii_lowercase()) {
            let mut known: Vec<String> = columns.keys().cloned().collect();
            known.sort_unstable();
            return fail(SchemaProblem::NoColumn {
                key,
                column: col.to_string(),
                table: w.table.to_string(),
                columns: known,
            });
        }
    }
    let get = |c: &Ident| columns.get(&c.name().to_ascii_lowercase());
    let message_max = match w.message_column.as_ref().and_then(|c| Some((c, get(c)?))) {
        None => None,
        Some((c, col)) if d.enforces_types && col.ty != ColumnType::Text => {
            return fail(SchemaProblem::WrongType {
                key: "message_column",
                column: c.to_string(),
                declared: col.declared.clone(),
                wanted: "a text column",
            });
        }
        Some((_, col)) => col.length,
    };
    let ended = w
        .ended_column
        .as_ref()
        .and_then(get)
        .map(|col| ended_for(&col.ty, tz, d.enforces_types));
    let retry_at = w
        .retry_at_column
        .as_ref()
        .and_then(get)
        .map(|col| ended_for(&col.ty, tz, d.enforces_types));
    Ok(Schema {
        message_max,
        ended,
        retry_at,
        columns,
        id_is_primary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(decl: &str) -> ColumnType {
        Column::declared(decl).ty
    }

    #[test]
    fn declarations_are_classified() {
        assert_eq!(ty("DATETIME"), ColumnType::DateTime);
        assert_eq!(ty("timestamp"), ColumnType::Timestamp);
        assert_eq!(ty("INTEGER"), ColumnType::Integer);
        assert_eq!(ty("int(11) unsigned"), ColumnType::Integer);
        assert_eq!(ty("UNSIGNED BIG INT"), ColumnType::Integer);
        assert_eq!(ty("INT8"), ColumnType::Integer);
        assert_eq!(ty("varchar(255)"), ColumnType::Text);
        assert_eq!(ty("character varying(64)"), ColumnType::Text);
        assert_eq!(ty(""), ColumnType::Untyped);
        assert_eq!(ty("longblob"), ColumnType::Binary);
        assert_eq!(ty("json"), ColumnType::Other);
        assert_eq!(ty("decimal(10,2)"), ColumnType::Decimal);
        assert_eq!(ty("double precision"), ColumnType::Float);
        assert_eq!(
            ty("enum('running','done','it''s')"),
            ColumnType::Enum {
                members: vec!["running".into(), "done".into(), "it's".into()]
            }
        );
        let c = Column::declared("VARCHAR(255)");
        assert_eq!((c.declared.as_str(), c.length), ("varchar(255)", Some(255)));
    }

    #[test]
    fn statuses_fit_their_column_or_say_why() {
        let e = Column::mysql("enum", "enum('running','done','failed')", Some(7), "");
        assert_eq!(e.holds("done"), Ok(()));
        assert_eq!(
            e.holds("error"),
            Err(CannotStore::NotMember {
                members: vec!["running".into(), "done".into(), "failed".into()]
            })
        );
        assert_eq!(e.type_text(), "enum('running','done','failed')");
        assert_eq!(
            e.widened(&["error", "it's"]).as_deref(),
            Some("enum('running','done','failed','error','it''s')")
        );
        let v = Column::mysql("varchar", "varchar(8)", Some(8), "");
        assert_eq!(v.holds("wait_man"), Ok(()));
        assert_eq!(
            v.holds("wait_manual"),
            Err(CannotStore::TooLong {
                length: 8,
                chars: 11
            })
        );
        assert_eq!(v.holds("ééééééé"), Ok(()), "characters, not bytes");
        assert_eq!(v.type_text(), "varchar(8)");
        assert_eq!(v.widened(&["wait_manual"]).as_deref(), Some("varchar(32)"));
        let n = Column::mysql("tinyint", "tinyint(4)", None, "");
        assert_eq!(n.holds("3"), Ok(()));
        assert_eq!(n.holds("error"), Err(CannotStore::NotANumber));
        assert_eq!(n.widened(&["error"]), None);
        // SQLite stores anything anywhere.
        let s = Column::declared("VARCHAR(4)");
        assert_eq!(s.holds("wait_manual"), Ok(()));
        assert_eq!(
            CannotStore::NotMember {
                members: vec!["a".into(), "b".into()]
            }
            .to_string(),
            "it is not one of the column's values (a, b)"
        );
    }

    #[test]
    fn literals_and_definitions_for_people() {
        assert_eq!(mysql_literal("it's"), "'it''s'");
        assert_eq!(mysql_literal("a\\b\nc"), "'a\\\\b\\nc'");
        assert_eq!(
            split_type("enum('a)','b''c') NOT NULL DEFAULT 'a)'"),
            ("enum('a)','b''c')", " NOT NULL DEFAULT 'a)'")
        );
        assert_eq!(
            split_type("varchar(16) CHARACTER SET latin1 NOT NULL"),
            ("varchar(16)", " CHARACTER SET latin1 NOT NULL")
        );
        assert_eq!(split_type("tinytext NOT NULL"), ("tinytext", " NOT NULL"));
        assert_eq!(
            without_on_update(
                "timestamp NOT NULL DEFAULT current_timestamp() ON UPDATE current_timestamp()"
            )
            .as_deref(),
            Some("timestamp NOT NULL DEFAULT current_timestamp()")
        );
        assert_eq!(
            without_on_update(
                "timestamp(3) NULL DEFAULT NULL on update CURRENT_TIMESTAMP(3) COMMENT 'a '' \\' \
                 ON UPDATE x'"
            )
            .as_deref(),
            Some("timestamp(3) NULL DEFAULT NULL COMMENT 'a '' \\' ON UPDATE x'")
        );
        assert_eq!(
            without_on_update("datetime DEFAULT NULL COMMENT ' ON UPDATE now()'"),
            None
        );
        assert_eq!(without_on_update("datetime DEFAULT NULL"), None);
        assert_eq!(split_type("text"), ("text", ""));
    }

    #[test]
    fn decimal_unix_seconds() {
        let dec = Some(&ColumnType::Decimal);
        assert_eq!(
            time_value(
                SqlValue::Text("1796042168.250".into()),
                dec,
                None,
                NaiveClock::Utc
            )
            .stamp,
            Ok(Some(Stamp::Epoch(1_796_042_168)))
        );
        assert_eq!(
            time_value(
                SqlValue::Text("1796042168".into()),
                dec,
                None,
                NaiveClock::Utc
            )
            .stamp,
            Ok(Some(Stamp::Epoch(1_796_042_168)))
        );
        assert!(
            time_value(SqlValue::Text("x.5".into()), dec, None, NaiveClock::Utc)
                .stamp
                .is_err()
        );
        assert_eq!(
            ended_for(&ColumnType::Decimal, None, true),
            Ended::Epoch,
            "a DECIMAL end column gets unix seconds, not NOW()'s digits"
        );
    }

    #[test]
    fn declared_lengths() {
        assert_eq!(declared_length("varchar(255)"), Some(255));
        assert_eq!(declared_length("character varying( 64 )"), Some(64));
        assert_eq!(declared_length("decimal(10,2)"), Some(10));
        assert_eq!(declared_length("text"), None);
    }

    #[test]
    fn mysql_columns() {
        let c = Column::mysql("VARCHAR", "varchar(64)", Some(64), "");
        assert_eq!(
            c,
            Column {
                declared: "varchar".into(),
                ty: ColumnType::Text,
                length: Some(64),
                enforced: true,
                on_update_now: false,
            }
        );
        // The clause as MariaDB and MySQL 8 write it in EXTRA.
        for extra in [
            "on update current_timestamp()",
            "DEFAULT_GENERATED on update CURRENT_TIMESTAMP",
            "on update current_timestamp(3)",
        ] {
            assert!(Column::mysql("timestamp", "timestamp", None, extra).on_update_now);
        }
        assert!(!Column::mysql("timestamp", "timestamp", None, "DEFAULT_GENERATED").on_update_now);
        assert_eq!(
            Column::mysql("enum", "enum('running','done')", Some(7), "").ty,
            ColumnType::Enum {
                members: vec!["running".into(), "done".into()]
            }
        );
        // MySQL's own names are exact: a spatial POINT is no integer.
        assert_eq!(
            Column::mysql("point", "point", None, "").ty,
            ColumnType::Other
        );
    }

    #[test]
    fn column_types_for_their_roles() {
        let problem = |role, decl: &str| ty(decl).problem(role);
        assert_eq!(problem(Role::Time, "datetime"), None);
        assert_eq!(problem(Role::Time, "timestamp"), None);
        assert_eq!(problem(Role::Time, "int"), None);
        assert_eq!(problem(Role::Time, "bigint"), None);
        assert_eq!(problem(Role::Time, "text"), None);
        assert_eq!(problem(Role::Time, ""), None, "SQLite: untyped");
        assert!(problem(Role::Time, "date").is_some());
        assert!(problem(Role::Time, "time").is_some());
        assert!(problem(Role::Time, "blob").is_some());
        assert!(problem(Role::Time, "json").is_some());
        assert_eq!(problem(Role::Status, "varchar(16)"), None);
        assert_eq!(problem(Role::Status, "enum"), None);
        assert_eq!(problem(Role::Status, "tinyint"), None);
        assert!(problem(Role::Status, "datetime").is_some());
        assert_eq!(problem(Role::Count, "int"), None);
        assert_eq!(problem(Role::Count, "decimal"), None);
        assert!(problem(Role::Count, "double").is_some());
        assert!(problem(Role::Count, "varchar").is_some());
        assert!(problem(Role::Text, "longblob").is_some());
        assert!(problem(Role::Any, "varbinary").is_some());
        assert_eq!(problem(Role::Any, "json"), None);
    }

    #[test]
    fn end_times_follow_the_column() {
        let tz = Zone::named("Asia/Shanghai");
        let zone = Ended::Zone(Zone::named("Asia/Shanghai").expect("a zone"));
        // MySQL: a DATETIME in the zone; a TIMESTAMP converts NOW() itself.
        assert_eq!(ended_for(&ColumnType::Integer, tz, true), Ended::Epoch);
        assert_eq!(ended_for(&ColumnType::DateTime, tz, true), zone);
        assert_eq!(ended_for(&ColumnType::Timestamp, tz, true), Ended::DbNow);
        assert_eq!(ended_for(&ColumnType::Text, tz, true), Ended::DbNow);
        assert_eq!(ended_for(&ColumnType::DateTime, None, true), Ended::DbNow);
        // SQLite: declarations only; text in the zone the application writes in.
        assert_eq!(ended_for(&ColumnType::Integer, tz, false), Ended::Epoch);
        assert_eq!(ended_for(&ColumnType::Text, tz, false), zone);
        assert_eq!(ended_for(&ColumnType::Timestamp, tz, false), zone);
        assert_eq!(ended_for(&ColumnType::Untyped, None, false), Ended::DbNow);
    }

    #[test]
    fn time_values() {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_opt(10, 0, 0))
            .expect("date");
        let utc = NaiveClock::Utc;
        let server = NaiveClock::Server(Some(1_764_406_800));
        let berlin = Zone::named("Europe/Berlin").expect("a zone");
        let tz = Some(berlin);
        assert_eq!(time_value(SqlValue::Null, None, tz, utc).stamp, Ok(None));
        assert_eq!(
            time_value(SqlValue::Int(5), None, None, utc).stamp,
            Ok(Some(Stamp::Epoch(5)))
        );
        // A TIMESTAMP is the server's instant, whatever zone is configured.
        for zone in [None, tz] {
            assert_eq!(
                time_value(
                    SqlValue::DateTime(d),
                    Some(&ColumnType::Timestamp),
                    zone,
                    server
                )
                .stamp,
                Ok(Some(Stamp::Epoch(1_764_406_800)))
            );
        }
        // A DATETIME: in the configured zone, else as the server places it.
        assert_eq!(
            time_value(
                SqlValue::DateTime(d),
                Some(&ColumnType::DateTime),
                tz,
                server
            )
            .stamp,
            Ok(Some(Stamp::Local(d, berlin)))
        );
        assert_eq!(
            time_value(
                SqlValue::DateTime(d),
                Some(&ColumnType::DateTime),
                None,
                server
            )
            .stamp,
            Ok(Some(Stamp::Epoch(1_764_406_800)))
        );
        let far = time_value(
            SqlValue::DateTime(d),
            Some(&ColumnType::DateTime),
            None,
            NaiveClock::Server(None),
        );
        assert_eq!(
            time_value(SqlValue::Float(1_764_406_800.5), None, None, utc).stamp,
            Ok(Some(Stamp::Epoch(1_764_406_800)))
        );
        for f in [f64::NAN, f64::INFINITY, 1e30] {
            assert!(
                time_value(SqlValue::Float(f), None, None, utc)
                    .stamp
                    .is_err(),
                "{f}"
            );
        }
        assert!(
            far.stamp
                .is_err_and(|e| e.contains("set [database] timezone"))
        );
        // SQLite's naive text is UTC unless a zone is configured.
        assert_eq!(
            time_value(
                SqlValue::Text("2026-11-29 10:00:00".into()),
                None,
                None,
                utc
            )
            .stamp,
            Ok(Some(Stamp::Epoch(d.and_utc().timestamp())))
        );
        assert_eq!(
            time_value(SqlValue::Text("2026-11-29 10:00:00".into()), None, tz, utc).stamp,
            Ok(Some(Stamp::Local(d, berlin)))
        );
        assert!(
            time_value(SqlValue::UInt(u64::MAX), None, None, utc)
                .stamp
                .is_err()
        );
        assert!(
            time_value(SqlValue::Text("soon".into()), None, None, utc)
                .stamp
                .is_err()
        );
        assert!(
            time_value(SqlValue::Bytes(vec![1]), None, None, utc)
                .stamp
                .is_err()
        );
        assert_eq!(
            time_value(
                SqlValue::Text("0000-00-00 00:00:00".into()),
                None,
                None,
                utc
            )
            .stamp,
            Err("\"0000-00-00 00:00:00\" is a zero date".into())
        );
    }
}
