//! What a column's type means to selfheal, in one place: the classification of a declared
//! type ([`ColumnType`]), whether a column can do the job its key gives it ([`Role`],
//! used by `doctor`), how the end time is written into it ([`ended_for`]), how a value read
//! from a start, heartbeat or end column is understood ([`time_value`]), and the checks
//! every adapter runs on a watch's columns once it has read them ([`schema`]).
//!
//! Adapters only read what their database says about a column (MySQL's
//! `information_schema`, SQLite's declarations) and hand it to [`Column::mysql`] or
//! [`Column::declared`]. Pure: no I/O.

use std::collections::HashMap;

use crate::clock::{Stamp, parse_text_stamp, whole_seconds};
use crate::config::{Ident, Watch};
use crate::error::{Error, Result, SchemaProblem};

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
        }
    }

    /// A column from MySQL's `information_schema.COLUMNS`: `DATA_TYPE`, `COLUMN_TYPE` (for
    /// the members of an ENUM) and `CHARACTER_MAXIMUM_LENGTH`.
    pub fn mysql(data_type: &str, column_type: &str, char_max: Option<u64>) -> Column {
        let declared = data_type.to_ascii_lowercase();
        Column {
            ty: classify(&declared, column_type),
            length: char_max.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            declared,
        }
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
        (
            "attempts_column",
            w.retry.as_ref().map(|r| &r.attempts_column),
            Role::Count,
        ),
    ];
    v.extend(opt.into_iter().filter_map(|(k, c, r)| c.map(|c| (k, c, r))));
    v.extend(w.matches.iter().map(|(c, _)| ("match", c, Role::Any)));
    v
}

/// How the end time is written into a column of type `ty`: unix seconds into an integer;
/// the configured zone's wall-clock time into a DATETIME (and, where types are only
/// declarations, into anything else), as the application writes it; else the database's
/// own current time (a TIMESTAMP converts it itself).
pub fn ended_for(ty: &ColumnType, tz: Option<chrono_tz::Tz>, enforces_types: bool) -> Ended {
    match (ty, tz) {
        (ColumnType::Integer, _) => Ended::Epoch,
        (ColumnType::DateTime, Some(tz)) => Ended::Zone(tz),
        (_, Some(tz)) if !enforces_types => Ended::Zone(tz),
        _ => Ended::DbNow,
    }
}

/// What a value read from a time column means. `ty` is the column's type when the driver
/// sends it with the value (MySQL); without it the value decides.
pub fn time_value(raw: SqlValue, ty: Option<&ColumnType>) -> TimeValue {
    let stamp = match &raw {
        SqlValue::Null => Ok(None),
        SqlValue::DateTime(d) if ty == Some(&ColumnType::Timestamp) => Ok(Some(Stamp::Session(*d))),
        SqlValue::DateTime(d) => Ok(Some(Stamp::Naive(*d))),
        SqlValue::Int(i) => Ok(Some(Stamp::Epoch(*i))),
        SqlValue::UInt(u) => i64::try_from(*u)
            .map(|i| Some(Stamp::Epoch(i)))
            .map_err(|_| format!("{u} is not a unix timestamp")),
        SqlValue::Float(f) => whole_seconds(*f)
            .map(|i| Some(Stamp::Epoch(i)))
            .ok_or_else(|| format!("{f} is not a unix timestamp")),
        SqlValue::Text(s) if s.starts_with("0000-00-00") => Err(format!("{s:?} is a zero date")),
        SqlValue::Text(s) => parse_text_stamp(s).map(Some),
        other @ SqlValue::Bytes(_) => Err(format!("{other} is not a date-time or unix timestamp")),
    };
    TimeValue { raw, stamp }
}

/// The checks every adapter runs once it has found the table and read its `columns`
/// (lowercase name → column): every column the watch names exists; the message column
/// holds text where the database enforces types, and its length; how the end time is
/// written.
pub fn schema(
    w: &Watch,
    d: &Dialect,
    tz: Option<chrono_tz::Tz>,
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
    Ok(Schema {
        message_max,
        ended,
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
    fn declared_lengths() {
        assert_eq!(declared_length("varchar(255)"), Some(255));
        assert_eq!(declared_length("character varying( 64 )"), Some(64));
        assert_eq!(declared_length("decimal(10,2)"), Some(10));
        assert_eq!(declared_length("text"), None);
    }

    #[test]
    fn mysql_columns() {
        let c = Column::mysql("VARCHAR", "varchar(64)", Some(64));
        assert_eq!(
            c,
            Column {
                declared: "varchar".into(),
                ty: ColumnType::Text,
                length: Some(64),
            }
        );
        assert_eq!(
            Column::mysql("enum", "enum('running','done')", Some(7)).ty,
            ColumnType::Enum {
                members: vec!["running".into(), "done".into()]
            }
        );
        // MySQL's own names are exact: a spatial POINT is no integer.
        assert_eq!(Column::mysql("point", "point", None).ty, ColumnType::Other);
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
        let tz = Some(chrono_tz::Asia::Shanghai);
        let zone = Ended::Zone(chrono_tz::Asia::Shanghai);
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
        assert_eq!(time_value(SqlValue::Null, None).stamp, Ok(None));
        assert_eq!(
            time_value(SqlValue::Int(5), None).stamp,
            Ok(Some(Stamp::Epoch(5)))
        );
        assert_eq!(
            time_value(SqlValue::DateTime(d), Some(&ColumnType::Timestamp)).stamp,
            Ok(Some(Stamp::Session(d)))
        );
        assert_eq!(
            time_value(SqlValue::DateTime(d), Some(&ColumnType::DateTime)).stamp,
            Ok(Some(Stamp::Naive(d)))
        );
        assert_eq!(
            time_value(SqlValue::Text("2026-11-29 10:00:00".into()), None).stamp,
            Ok(Some(Stamp::Naive(d)))
        );
        assert!(time_value(SqlValue::UInt(u64::MAX), None).stamp.is_err());
        assert_eq!(
            time_value(SqlValue::Float(1_764_406_800.5), None).stamp,
            Ok(Some(Stamp::Epoch(1_764_406_800)))
        );
        for f in [f64::NAN, f64::INFINITY, 1e30] {
            assert!(time_value(SqlValue::Float(f), None).stamp.is_err(), "{f}");
        }
        assert!(
            time_value(SqlValue::Text("soon".into()), None)
                .stamp
                .is_err()
        );
        assert!(time_value(SqlValue::Bytes(vec![1]), None).stamp.is_err());
        assert_eq!(
            time_value(SqlValue::Text("0000-00-00 00:00:00".into()), None).stamp,
            Err("\"0000-00-00 00:00:00\" is a zero date".into())
        );
    }
}
