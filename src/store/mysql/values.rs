//! MySQL's wire values as the store's and back: a bound [`SqlValue`] as the driver's
//! [`Value`], and a result row read cell by cell ([`Cells`]), each value with its column's
//! type where it tells how to read a time (`TIMESTAMP`, `DATETIME`, `DECIMAL`).

use mysql::Value;
use mysql::consts::ColumnType;

use crate::store::SqlValue;
use crate::store::driver::{Cell, Row};
use crate::store::types;

/// Bound values, as the driver takes them.
pub(super) fn values(params: &[SqlValue]) -> Vec<Value> {
    params.iter().map(to_value).collect()
}

pub(super) fn to_value(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::NULL,
        SqlValue::Int(i) => Value::Int(*i),
        SqlValue::UInt(u) => Value::UInt(*u),
        SqlValue::Float(f) => Value::Double(*f),
        SqlValue::Text(s) => Value::Bytes(s.as_bytes().to_vec()),
        SqlValue::Bytes(b) => Value::Bytes(b.clone()),
        SqlValue::DateTime(d) => {
            use chrono::{Datelike, Timelike};
            // chrono's month to second always fit a u8; a year outside 0-65535 (DATETIME
            // holds 1000-9999) goes as its text, which no stored date-time equals and strict
            // mode will not store, never as a wrapped year.
            match (
                u16::try_from(d.year()),
                u8::try_from(d.month()),
                u8::try_from(d.day()),
                u8::try_from(d.hour()),
                u8::try_from(d.minute()),
                u8::try_from(d.second()),
            ) {
                (Ok(year), Ok(month), Ok(day), Ok(hour), Ok(minute), Ok(second)) => {
                    let micros = d.nanosecond() / 1_000;
                    Value::Date(year, month, day, hour, minute, second, micros)
                }
                _ => Value::Bytes(d.to_string().into_bytes()),
            }
        }
    }
}

/// A result row, cell by cell: each value is moved out of the driver's row, never copied,
/// and read with its column's type (nothing is allocated per row).
pub(super) struct Cells {
    row: mysql::Row,
    at: usize,
}

impl Cells {
    pub(super) fn new(row: mysql::Row) -> Self {
        Cells { row, at: 0 }
    }

    /// Every cell's value, left to right.
    pub(super) fn values(mut self) -> Vec<SqlValue> {
        (0..self.row.len()).map(|_| self.cell().value).collect()
    }
}

impl Row for Cells {
    fn cell(&mut self) -> Cell {
        let i = self.at;
        self.at += 1;
        let ty = self
            .row
            .columns_ref()
            .get(i)
            .and_then(|c| time_type(c.column_type()));
        let value = self
            .row
            .take_opt::<Value, _>(i)
            .and_then(Result::ok)
            .map_or(SqlValue::Null, from_value);
        Cell { value, ty }
    }

    fn columns(&self) -> usize {
        self.row.len()
    }

    fn name(&self, i: usize) -> String {
        self.row
            .columns_ref()
            .get(i)
            .map(|c| c.name_str().into_owned())
            .unwrap_or_default()
    }
}

/// What a column's wire type says about reading a time in it: a TIMESTAMP is the server's
/// instant, a DATETIME a wall-clock time, a DECIMAL comes as its digits (unix seconds with
/// a fraction); anything else, the value decides.
fn time_type(wire: ColumnType) -> Option<types::ColumnType> {
    match wire {
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => {
            Some(types::ColumnType::Timestamp)
        }
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => {
            Some(types::ColumnType::DateTime)
        }
        ColumnType::MYSQL_TYPE_NEWDECIMAL | ColumnType::MYSQL_TYPE_DECIMAL => {
            Some(types::ColumnType::Decimal)
        }
        _ => None,
    }
}

pub(super) fn from_value(v: Value) -> SqlValue {
    match v {
        Value::NULL => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(i),
        Value::UInt(u) => SqlValue::UInt(u),
        Value::Float(f) => SqlValue::Float(f64::from(f)),
        Value::Double(f) => SqlValue::Float(f),
        Value::Bytes(b) => match String::from_utf8(b) {
            Ok(s) => SqlValue::Text(s),
            Err(e) => SqlValue::Bytes(e.into_bytes()),
        },
        Value::Date(y, mo, d, h, mi, s, us) => {
            chrono::NaiveDate::from_ymd_opt(y.into(), mo.into(), d.into())
                .and_then(|date| date.and_hms_micro_opt(h.into(), mi.into(), s.into(), us))
                .map_or_else(
                    || SqlValue::Text(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")),
                    SqlValue::DateTime,
                )
        }
        Value::Time(neg, d, h, m, s, _) => SqlValue::Text(format!(
            "{}{}:{m:02}:{s:02}",
            if neg { "-" } else { "" },
            d * 24 + u32::from(h)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TimeValue;
    use crate::store::table::{fake, time_cell};

    /// A time cell as the store reads it: with its wire type, then the server's instant.
    fn time_value(
        raw: SqlValue,
        wire: ColumnType,
        epoch: &SqlValue,
        tz: Option<crate::zone::Zone>,
    ) -> TimeValue {
        let mut row = fake::Cells::new(vec![
            Cell {
                value: raw,
                ty: time_type(wire),
            },
            Cell {
                value: epoch.clone(),
                ty: None,
            },
        ]);
        time_cell(&mut row, &super::super::DIALECT, tz)
    }

    #[test]
    fn values_round_trip() {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_micro_opt(10, 1, 2, 345))
            .map(SqlValue::DateTime)
            .expect("date");
        assert_eq!(from_value(to_value(&d)), d);
        // A year MySQL's u16 cannot carry is sent as text, never wrapped.
        let bc = chrono::NaiveDate::from_ymd_opt(-1, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .expect("date");
        assert!(matches!(to_value(&SqlValue::DateTime(bc)), Value::Bytes(_)));
        assert_eq!(
            from_value(Value::Date(0, 0, 0, 0, 0, 0, 0)),
            SqlValue::Text("0000-00-00 00:00:00".into())
        );
        assert!(
            time_value(
                SqlValue::Text("0000-00-00 00:00:00".into()),
                ColumnType::MYSQL_TYPE_DATETIME,
                &SqlValue::Int(0),
                None,
            )
            .stamp
            .is_err()
        );
        let t = time_value(
            d.clone(),
            ColumnType::MYSQL_TYPE_TIMESTAMP,
            &SqlValue::Text("1764406800.000345".into()),
            crate::zone::Zone::named("Asia/Shanghai"),
        );
        assert_eq!(t.stamp, Ok(Some(crate::clock::Stamp::Epoch(1_764_406_800))));
    }

    #[test]
    fn a_wire_type_tells_how_to_read_a_time() {
        use types::ColumnType as T;
        for (wire, ty) in [
            (ColumnType::MYSQL_TYPE_TIMESTAMP, Some(T::Timestamp)),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, Some(T::Timestamp)),
            (ColumnType::MYSQL_TYPE_DATETIME, Some(T::DateTime)),
            (ColumnType::MYSQL_TYPE_NEWDECIMAL, Some(T::Decimal)),
            (ColumnType::MYSQL_TYPE_LONGLONG, None),
            (ColumnType::MYSQL_TYPE_VAR_STRING, None),
        ] {
            assert_eq!(time_type(wire), ty, "{wire:?}");
        }
    }
}
