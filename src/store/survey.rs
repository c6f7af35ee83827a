//! What `selfheal init` reads of a database before any watch names a table: a table's
//! columns, indexes and size ([`Survey::table_info`]), how many rows hold each value of a
//! few columns ([`Survey::count_values`], bounded), and the database's tables with their
//! columns ([`Survey::tables`], to name the job tables when the one asked for is missing).
//!
//! Each database says how it describes a table in its [`SurveySql`] (MySQL's
//! `information_schema`, SQLite's pragmas); the count is one `GROUP BY` built here from the
//! [`Dialect`]. A database reached through [`super::Introspect::survey`] answers; one
//! without a `SurveySql` yet answers `None` there, and `init` says it cannot read it.
//!
//! Read-only: `SELECT`s and pragmas only. Identifiers are validated [`Ident`]s; values are
//! bound.

use super::driver::{Driver, Row};
use super::sql::{Dialect, Statement};
use super::table::SqlStore;
use super::types::Column;
use super::{SqlValue, mysql, sqlite};
use crate::config::Ident;
use crate::error::Result;

/// A table as `init` reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableInfo {
    /// Every column, in the table's order.
    pub columns: Vec<(String, Column)>,
    /// The primary key's columns, in order (empty: none).
    pub primary_key: Vec<String>,
    /// Every other index: its name, whether it is unique, its columns in order.
    pub indexes: Vec<Index>,
    /// About how many rows the table holds, when the database says (MySQL's estimate,
    /// SQLite's largest rowid).
    pub rows: Option<u64>,
}

/// One index of a table (not the primary key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub name: String,
    pub unique: bool,
    pub columns: Vec<String>,
}

/// Which rows [`Survey::count_values`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountScope<'a> {
    /// Every row (a table small enough to read whole).
    Table,
    /// Every row, read through this index, whose first columns are the counted ones
    /// (named to the database where its dialect can: [`Dialect::force_index`]).
    Index(&'a Ident),
    /// Only the latest `rows` rows by `key` (the primary key): a bounded sample of a large
    /// table without an index on the counted columns.
    Latest { key: &'a Ident, rows: u32 },
}

/// The database's tables, each with its columns' names in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    /// The database they are in (`None` for a SQLite file).
    pub database: Option<String>,
    pub tables: Vec<(String, Vec<String>)>,
}

/// What `init` asks of a database.
pub trait Survey {
    /// The table's columns, indexes and size; `None` when there is no such table.
    fn table_info(&mut self, table: &Ident) -> Result<Option<TableInfo>>;
    /// How many rows of `table` (in `scope`) hold each combination of values of `columns`,
    /// the most common first, at most `limit` combinations.
    fn count_values(
        &mut self,
        table: &Ident,
        columns: &[&Ident],
        scope: CountScope<'_>,
        limit: u32,
    ) -> Result<Vec<(Vec<SqlValue>, u64)>>;
    /// The tables of `database` (the connection's when `None`), at most `limit` columns
    /// in all.
    fn tables(&mut self, database: Option<&str>, limit: u32) -> Result<Tables>;
}

/// How a database describes its tables.
pub struct SurveySql {
    /// One row per column of a table, in order: its name and what it is, and its place in
    /// the primary key (from 1; 0 when it is not in it or the row does not say).
    pub columns: fn(&Ident) -> Statement,
    pub column: fn(&mut dyn Row) -> (String, Column, u32),
    /// One row per column of each index: the index, the column's place in it (from 1), the
    /// column, 1 for a unique index, 1 for the primary key.
    pub indexes: fn(&Ident) -> Statement,
    /// One row, one cell: about how many rows the table holds.
    pub rows: fn(&Ident) -> Statement,
    /// The current database's name (`None`: a file).
    pub database: Option<&'static str>,
    /// One row per column of every table: the table, the column; `LIMIT` bound.
    pub tables: fn(Option<&str>, u32) -> Statement,
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// The table's database (the connection's when the name has none) and name, bound.
fn mysql_table(t: &Ident) -> Vec<SqlValue> {
    vec![t.schema().map_or(SqlValue::Null, text), text(t.name())]
}

/// MySQL and MariaDB: `information_schema`.
pub const MYSQL: SurveySql = SurveySql {
    columns: |t| Statement {
        sql: "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, EXTRA \
              FROM information_schema.COLUMNS \
              WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
              ORDER BY ORDINAL_POSITION"
            .into(),
        params: mysql_table(t),
    },
    column: |r| {
        let name = r.cell().value.to_string();
        let data_type = r.cell().value.to_string();
        let column_type = r.cell().value.to_string();
        let length = match r.cell().value {
            SqlValue::Null => None,
            n => Some(u64::try_from(n.into_count()).unwrap_or(0)),
        };
        let extra = r.cell().value.into_text().unwrap_or_default();
        (
            name,
            Column::mysql(&data_type, &column_type, length, &extra),
            0,
        )
    },
    indexes: |t| Statement {
        sql: "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE = 0, \
              INDEX_NAME = 'PRIMARY' \
              FROM information_schema.STATISTICS \
              WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
              ORDER BY INDEX_NAME, SEQ_IN_INDEX"
            .into(),
        params: mysql_table(t),
    },
    rows: |t| Statement {
        sql: "SELECT TABLE_ROWS FROM information_schema.TABLES \
              WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?"
            .into(),
        params: mysql_table(t),
    },
    database: Some("SELECT DATABASE()"),
    tables: |db, limit| Statement {
        sql: format!(
            "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) \
             ORDER BY TABLE_NAME, ORDINAL_POSITION LIMIT {limit}"
        ),
        params: vec![db.map_or(SqlValue::Null, text)],
    },
};

/// A SQLite pragma's arguments: the table, and its schema where the name has one.
fn sqlite_args(t: &Ident) -> String {
    match t.schema() {
        Some(s) => format!("'{}', '{s}'", t.name()),
        None => format!("'{}'", t.name()),
    }
}

/// SQLite: `PRAGMA table_info` and the pragma functions (validated names only: an
/// [`Ident`] holds no quote).
pub const SQLITE: SurveySql = SurveySql {
    columns: |t| Statement {
        sql: format!(
            "SELECT name, type, pk FROM pragma_table_info({})",
            sqlite_args(t)
        ),
        params: Vec::new(),
    },
    column: |r| {
        let name = r.cell().value.to_string();
        let declared = r.cell().value.into_text().unwrap_or_default();
        let key = u32::try_from(r.cell().value.into_count()).unwrap_or(0);
        (name, Column::declared(&declared), key)
    },
    indexes: |t| Statement {
        sql: format!(
            "SELECT il.name, ii.seqno + 1, ii.name, il.\"unique\", il.origin = 'pk' \
             FROM pragma_index_list({}) AS il, pragma_index_info(il.name) AS ii \
             ORDER BY il.name, ii.seqno",
            sqlite_args(t)
        ),
        params: Vec::new(),
    },
    rows: |t| Statement {
        sql: format!("SELECT MAX(rowid) FROM {}", t.quoted('"')),
        params: Vec::new(),
    },
    database: None,
    tables: |_, limit| Statement {
        sql: format!(
            "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p \
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             ORDER BY m.name, p.cid LIMIT {limit}"
        ),
        params: Vec::new(),
    },
};

/// The `SELECT` of [`Survey::count_values`]: the columns and `COUNT(*)`, grouped, the
/// most common first. Nothing is bound: every part is a validated identifier or a number.
pub fn count_sql(
    d: &Dialect,
    table: &Ident,
    columns: &[&Ident],
    scope: CountScope<'_>,
    limit: u32,
) -> Statement {
    let cols = columns
        .iter()
        .map(|c| d.quote(c))
        .collect::<Vec<_>>()
        .join(", ");
    let from = match scope {
        CountScope::Table => d.quote(table),
        CountScope::Index(ix) => match d.force_index {
            Some(force) => format!("{} {force} ({})", d.quote(table), d.quote(ix)),
            None => d.quote(table),
        },
        CountScope::Latest { key, rows } => format!(
            "(SELECT {cols} FROM {} ORDER BY {} DESC LIMIT {rows}) AS latest",
            d.quote(table),
            d.quote(key)
        ),
    };
    Statement {
        sql: format!(
            "SELECT {cols}, COUNT(*) AS n FROM {from} GROUP BY {cols} ORDER BY n DESC \
             LIMIT {limit}"
        ),
        params: Vec::new(),
    }
}

impl<D: Driver> SqlStore<D> {
    fn survey_table(&mut self, s: &SurveySql, table: &Ident) -> Result<Option<TableInfo>> {
        let mut info = TableInfo::default();
        let mut pk: Vec<(u32, String)> = Vec::new();
        self.driver.query(
            &(s.columns)(table),
            "reading the table's columns",
            &mut |r| {
                let (name, column, key) = (s.column)(r);
                if key > 0 {
                    pk.push((key, name.clone()));
                }
                info.columns.push((name, column));
                Ok(())
            },
        )?;
        if info.columns.is_empty() {
            return Ok(None);
        }
        let mut indexes: Vec<(Index, bool)> = Vec::new();
        self.driver.query(
            &(s.indexes)(table),
            "reading the table's indexes",
            &mut |r| {
                let name = r.cell().value.to_string();
                let _seq = r.cell();
                let column = r.cell().value.into_text();
                let unique = r.cell().value.into_count() == 1;
                let primary = r.cell().value.into_count() == 1;
                let at = match indexes.iter().position(|(ix, _)| ix.name == name) {
                    Some(at) => at,
                    None => {
                        indexes.push((
                            Index {
                                name,
                                unique,
                                columns: Vec::new(),
                            },
                            primary,
                        ));
                        indexes.len() - 1
                    }
                };
                // A functional key part has no column: the index is kept, unnamed there.
                if let Some((ix, _)) = indexes.get_mut(at) {
                    ix.columns.push(column.unwrap_or_default());
                }
                Ok(())
            },
        )?;
        pk.sort();
        info.primary_key = pk.into_iter().map(|(_, n)| n).collect();
        for (ix, primary) in indexes {
            if primary {
                if info.primary_key.is_empty() {
                    info.primary_key = ix.columns;
                }
            } else {
                info.indexes.push(ix);
            }
        }
        // The size is a hint: a table without a rowid, or a server that hides it, has none.
        info.rows = self
            .first_row(&(s.rows)(table), "reading the table's size")
            .ok()
            .flatten()
            .and_then(|cells| cells.into_iter().next())
            .filter(|v| !v.is_null())
            .and_then(|v| u64::try_from(v.into_count()).ok());
        Ok(Some(info))
    }

    fn survey_counts(
        &mut self,
        table: &Ident,
        columns: &[&Ident],
        scope: CountScope<'_>,
        limit: u32,
    ) -> Result<Vec<(Vec<SqlValue>, u64)>> {
        let st = count_sql(self.driver.dialect(), table, columns, scope, limit);
        let mut out = Vec::new();
        self.driver
            .query(&st, "counting the table's values", &mut |r| {
                let values = columns.iter().map(|_| r.cell().value).collect();
                let n = match r.cell().value {
                    SqlValue::UInt(u) => u,
                    other => u64::try_from(other.into_count()).unwrap_or(0),
                };
                out.push((values, n));
                Ok(())
            })?;
        Ok(out)
    }

    fn survey_tables(
        &mut self,
        s: &SurveySql,
        database: Option<&str>,
        limit: u32,
    ) -> Result<Tables> {
        let name = match (database, s.database) {
            (Some(db), _) => Some(db.to_string()),
            (None, Some(sql)) => {
                let st = Statement {
                    sql: sql.into(),
                    params: Vec::new(),
                };
                self.first_row(&st, "reading the database's name")?
                    .and_then(|cells| cells.into_iter().next())
                    .and_then(SqlValue::into_text)
            }
            (None, None) => None,
        };
        let mut out = Tables {
            database: name,
            tables: Vec::new(),
        };
        let tables = &mut out.tables;
        self.driver.query(
            &(s.tables)(database, limit),
            "listing the tables",
            &mut |r| {
                let table = r.cell().value.to_string();
                let column = r.cell().value.to_string();
                match tables.last_mut() {
                    Some((t, cols)) if *t == table => cols.push(column),
                    _ => tables.push((table, vec![column])),
                }
                Ok(())
            },
        )?;
        Ok(out)
    }
}

/// The one thing that differs between the databases' surveys: their [`SurveySql`].
macro_rules! survey_with {
    ($driver:ty, $sql:expr) => {
        impl Survey for SqlStore<$driver> {
            fn table_info(&mut self, table: &Ident) -> Result<Option<TableInfo>> {
                self.survey_table(&$sql, table)
            }
            fn count_values(
                &mut self,
                table: &Ident,
                columns: &[&Ident],
                scope: CountScope<'_>,
                limit: u32,
            ) -> Result<Vec<(Vec<SqlValue>, u64)>> {
                self.survey_counts(table, columns, scope, limit)
            }
            fn tables(&mut self, database: Option<&str>, limit: u32) -> Result<Tables> {
                self.survey_tables(&$sql, database, limit)
            }
        }
    };
}

survey_with!(mysql::Mysql, MYSQL);
survey_with!(sqlite::Sqlite, SQLITE);
survey_with!(super::postgres::Postgres, super::postgres::SURVEY);

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Ident {
        Ident::column(s).expect("a column")
    }

    #[test]
    fn a_count_is_grouped_and_bounded_in_each_scope() {
        let t = Ident::table("cron_schedule").expect("a table");
        let (status, code, ix, key) = (id("status"), id("job_code"), id("ix_status"), id("id"));
        let my = &mysql::DIALECT;
        assert_eq!(
            count_sql(my, &t, &[&status], CountScope::Table, 50).sql,
            "SELECT `status`, COUNT(*) AS n FROM `cron_schedule` GROUP BY `status` \
             ORDER BY n DESC LIMIT 50"
        );
        assert_eq!(
            count_sql(my, &t, &[&status], CountScope::Index(&ix), 50).sql,
            "SELECT `status`, COUNT(*) AS n FROM `cron_schedule` FORCE INDEX (`ix_status`) \
             GROUP BY `status` ORDER BY n DESC LIMIT 50"
        );
        assert_eq!(
            count_sql(
                &sqlite::DIALECT,
                &t,
                &[&status, &code],
                CountScope::Latest {
                    key: &key,
                    rows: 10_000
                },
                50
            )
            .sql,
            "SELECT \"status\", \"job_code\", COUNT(*) AS n FROM (SELECT \"status\", \
             \"job_code\" FROM \"cron_schedule\" ORDER BY \"id\" DESC LIMIT 10000) AS latest \
             GROUP BY \"status\", \"job_code\" ORDER BY n DESC LIMIT 50"
        );
        // SQLite's planner picks the index itself.
        assert!(
            !count_sql(&sqlite::DIALECT, &t, &[&status], CountScope::Index(&ix), 5)
                .sql
                .contains("INDEX")
        );
    }

    #[test]
    fn sqlite_pragmas_name_the_schema_when_the_table_has_one() {
        let t = Ident::table("main.sync_log").expect("a table");
        assert_eq!(
            (SQLITE.columns)(&t).sql,
            "SELECT name, type, pk FROM pragma_table_info('sync_log', 'main')"
        );
    }
}
