//! What MySQL says about a watch's table and about itself: the dialect's statements for
//! the schema (`information_schema.COLUMNS` and `STATISTICS`, read by the job table), and
//! [`Introspect`] — the server and how it was reached, the plan of the running-rows query,
//! a column's definition and collation, the session's time zone, and whether `GET_LOCK`
//! reaches every host (`wsrep_on`: a Galera cluster's lock is node-local).

use super::{DIALECT, Mysql};
use crate::config::{Ident, Watch};
use crate::error::Result;
use crate::store::driver::{Driver, Row};
use crate::store::sql::{self, Dialect, Statement};
use crate::store::table::SqlStore;
use crate::store::types::Column;
use crate::store::{Introspect, ScanPlan, Schema, SqlValue};

/// The table's database (the watch's, else the connection's) and name, bound.
fn table_params(w: &Watch) -> Vec<SqlValue> {
    vec![
        w.table
            .schema()
            .map_or(SqlValue::Null, |s| SqlValue::Text(s.to_string())),
        SqlValue::Text(w.table.name().to_string()),
    ]
}

/// A row per column of the watch's table: name, `DATA_TYPE`, `COLUMN_TYPE`,
/// `CHARACTER_MAXIMUM_LENGTH`, `EXTRA`.
pub(super) fn columns(w: &Watch) -> Statement {
    Statement {
        sql: "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, EXTRA \
              FROM information_schema.COLUMNS \
              WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?"
            .into(),
        params: table_params(w),
    }
}

/// A row of [`columns`]: the column as `information_schema` describes it (the primary key
/// is read from the indexes).
pub(super) fn column(r: &mut dyn Row) -> (String, Column, u32) {
    let name = r.cell().value.to_string();
    let data_type = r.cell().value.to_string();
    let column_type = r.cell().value.to_string();
    let length = match r.cell().value {
        SqlValue::Null => None,
        n => Some(u64::try_from(n.into_count()).unwrap_or(0)),
    };
    let extra = r.cell().value.into_text().unwrap_or_default();
    let column = Column::mysql(&data_type, &column_type, length, &extra);
    (name, column, 0)
}

/// A row per column of each index of the watch's table, in order: the index, the column's
/// place in it, the column (none for a functional key part), and whether it is the
/// primary key.
pub(super) fn indexes(w: &Watch) -> Statement {
    Statement {
        sql: "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, INDEX_NAME = 'PRIMARY' \
              FROM information_schema.STATISTICS \
              WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
              ORDER BY INDEX_NAME, SEQ_IN_INDEX"
            .into(),
        params: table_params(w),
    }
}

impl Introspect for SqlStore<Mysql> {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn describe_server(&mut self) -> Result<String> {
        let v = self
            .driver
            .first("SELECT VERSION()", None)
            .map_err(|e| self.driver.err("reading the version", e))?
            .and_then(|cells| cells.into_iter().next())
            .and_then(SqlValue::into_text)
            .unwrap_or_default();
        let kind = if v.to_ascii_lowercase().contains("mariadb") {
            "mariadb"
        } else {
            "mysql"
        };
        Ok(format!("{kind} {v}"))
    }

    fn connection(&self) -> String {
        format!("{} ({})", self.driver.label, self.driver.creds.describe())
    }

    fn notes(&self) -> Vec<String> {
        self.driver.creds.notes.clone()
    }

    fn schema(&mut self, w: &Watch) -> Result<Schema> {
        self.read_schema(w)
    }

    fn explain_running(&mut self, w: &Watch) -> Result<ScanPlan> {
        const WHAT: &str = "EXPLAIN of the running-rows query";
        let st = sql::running_sql(&DIALECT, w);
        let explain = Statement {
            sql: format!("EXPLAIN {}", st.sql),
            params: st.params,
        };
        // Each row of the plan, its cells by name.
        let mut rows: Vec<Vec<(String, SqlValue)>> = Vec::new();
        self.driver.query(&explain, WHAT, &mut |r| {
            rows.push(
                (0..r.columns())
                    .map(|i| (r.name(i), r.cell().value))
                    .collect(),
            );
            Ok(())
        })?;
        let text = |r: &[(String, SqlValue)], col: &str| -> Option<String> {
            r.iter()
                .find(|(name, _)| name == col)
                .and_then(|(_, v)| v.clone().into_text())
        };
        let table = w.table.name();
        let row = rows
            .iter()
            .find(|r| text(r, "table").as_deref() == Some(table))
            .or(rows.first())
            .ok_or_else(|| self.odd(WHAT, "no plan"))?;
        // `ALL` reads the table, `index` the whole of an index (e.g. PRIMARY for the ORDER
        // BY): both are full scans whatever `key` says.
        let access = text(row, "type").unwrap_or_default();
        let full_scan = access.eq_ignore_ascii_case("ALL") || access.eq_ignore_ascii_case("index");
        let index = text(row, "key").filter(|_| !full_scan);
        let candidates = text(row, "possible_keys")
            .map(|k| k.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        let rows_estimate = text(row, "rows").and_then(|r| r.parse().ok());
        let detail = format!(
            "EXPLAIN: type {access}, key {}, rows {}{}",
            text(row, "key").as_deref().unwrap_or("NULL"),
            rows_estimate.map_or("?".into(), |r: u64| r.to_string()),
            text(row, "Extra")
                .filter(|e| !e.is_empty())
                .map(|e| format!(", {e}"))
                .unwrap_or_default()
        );
        Ok(ScanPlan {
            index,
            candidates,
            rows: rows_estimate,
            detail,
        })
    }

    fn column_definition(&mut self, w: &Watch, column: &Ident) -> Result<Option<String>> {
        let create = self
            .driver
            .first(
                &format!("SHOW CREATE TABLE {}", DIALECT.quote(&w.table)),
                None,
            )
            .map_err(|e| self.driver.err("SHOW CREATE TABLE", e))?
            .and_then(|cells| cells.into_iter().nth(1));
        Ok(match create {
            Some(SqlValue::Text(c)) => definition_in(&c, column.name()),
            _ => None,
        })
    }

    fn equal_under_collation(
        &mut self,
        w: &Watch,
        column: &Ident,
        a: &str,
        b: &str,
    ) -> Result<Option<String>> {
        let mut params = table_params(w);
        params.push(SqlValue::Text(column.name().to_string()));
        let found = self
            .driver
            .first(
                "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                 AND COLUMN_NAME = ?",
                Some(&params),
            )
            .map_err(|e| self.driver.err("reading a column's collation", e))?;
        // Names from the server go into the statement: only plain ones do.
        let plain =
            |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let mut found = found
            .unwrap_or_default()
            .into_iter()
            .map(SqlValue::into_text);
        let (Some(Some(charset)), Some(Some(collation))) = (found.next(), found.next()) else {
            return Ok(None);
        };
        if !plain(&charset) || !plain(&collation) {
            return Ok(None);
        }
        let equal = self
            .driver
            .first(
                &format!(
                    "SELECT CONVERT(? USING {charset}) COLLATE {collation} = \
                     CONVERT(? USING {charset}) COLLATE {collation}"
                ),
                Some(&[SqlValue::Text(a.to_string()), SqlValue::Text(b.to_string())]),
            )
            .map_err(|e| {
                self.driver
                    .err("comparing match values under the column's collation", e)
            })?
            .and_then(|cells| cells.into_iter().next());
        Ok((equal.map(SqlValue::into_count) == Some(1)).then_some(collation))
    }

    fn survey(&mut self) -> Option<&mut dyn crate::store::survey::Survey> {
        Some(self)
    }

    fn advisory_lock_gap(&mut self) -> Result<Option<String>> {
        match self.driver.first("SELECT @@GLOBAL.wsrep_on", None) {
            Ok(cells) => Ok(wsrep_gap(cells.and_then(|c| c.into_iter().next()).as_ref())),
            // ER_UNKNOWN_SYSTEM_VARIABLE: a server built without Galera.
            Err(mysql::Error::MySqlError(e)) if e.code == 1193 => Ok(None),
            Err(e) => Err(self.driver.err("reading wsrep_on", e)),
        }
    }

    fn session_time_zone(&mut self) -> Result<String> {
        const WHAT: &str = "reading the session time zone";
        let row = self
            .driver
            .first(
                "SELECT @@session.time_zone, @@system_time_zone, \
                 TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i')",
                None,
            )
            .map_err(|e| self.driver.err(WHAT, e))?;
        let Some([session, system, offset]) = row.and_then(|r| <[SqlValue; 3]>::try_from(r).ok())
        else {
            return Err(self.odd(WHAT, "no row"));
        };
        let (session, system, offset) =
            (session.to_string(), system.to_string(), offset.to_string());
        let offset = if offset.starts_with('-') {
            offset
        } else {
            format!("+{offset}")
        };
        Ok(if session.eq_ignore_ascii_case("SYSTEM") {
            format!("SYSTEM (the server's {system}), UTC{offset} now")
        } else {
            format!("{session}, UTC{offset} now")
        })
    }
}

/// The definition of `column` in a `CREATE TABLE` statement as MySQL writes it (one
/// column a line, names in backquotes): what follows the name, without the comma.
fn definition_in(create: &str, column: &str) -> Option<String> {
    let name = format!("`{column}` ");
    create.lines().map(str::trim).find_map(|l| {
        let (head, rest) = l.split_at_checked(name.len())?;
        head.eq_ignore_ascii_case(&name)
            .then(|| rest.trim_end_matches(',').to_string())
    })
}

/// What `@@GLOBAL.wsrep_on` says about `GET_LOCK`: with Galera replication on, the lock is
/// held on one node only, so hosts connected to different nodes do not see each other's.
fn wsrep_gap(wsrep_on: Option<&SqlValue>) -> Option<String> {
    let on = match wsrep_on? {
        SqlValue::Int(n) => *n != 0,
        SqlValue::UInt(n) => *n != 0,
        SqlValue::Text(t) => t.eq_ignore_ascii_case("ON") || t == "1",
        _ => false,
    };
    on.then(|| {
        "wsrep_on is ON (a Galera cluster): GET_LOCK is held on one node only, so runs \
         connected to different nodes do not turn each other away"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_columns_definition_is_read_from_create_table() {
        let create = "CREATE TABLE `sync_log` (\n  `id` int(11) NOT NULL,\n  `Status` \
                      enum('running','done') NOT NULL DEFAULT 'running' COMMENT 'it''s',\n  \
                      `status_at` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) \
                      ENGINE=InnoDB";
        assert_eq!(
            definition_in(create, "status").as_deref(),
            Some("enum('running','done') NOT NULL DEFAULT 'running' COMMENT 'it''s'")
        );
        assert_eq!(
            definition_in(create, "status_at").as_deref(),
            Some("datetime DEFAULT NULL")
        );
        assert_eq!(definition_in(create, "nope"), None);
    }

    #[test]
    fn galera_makes_the_advisory_lock_node_local() {
        for on in [
            SqlValue::Int(1),
            SqlValue::UInt(1),
            SqlValue::Text("ON".into()),
        ] {
            assert!(wsrep_gap(Some(&on)).is_some_and(|g| g.contains("one node only")));
        }
        for off in [
            SqlValue::Int(0),
            SqlValue::Text("OFF".into()),
            SqlValue::Null,
        ] {
            assert_eq!(wsrep_gap(Some(&off)), None);
        }
        assert_eq!(wsrep_gap(None), None);
    }
}
