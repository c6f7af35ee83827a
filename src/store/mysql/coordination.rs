//! How runs coordinate through MySQL. The advisory lock is `GET_LOCK` (per watch, or per
//! watch and host when rows are owned), released when the connection closes. Its name is
//! predictable and needs no privilege: any account can take it first, so a run that did
//! not get it can ask who holds it (`IS_USED_LOCK`, and the holder's user and host where
//! `information_schema.PROCESSLIST` shows them). A stopped run's session — whose last
//! statement may still wait on a row lock and apply later — is ended with `KILL`, and
//! never on a server that restarted since (its connection ids start again from 1).

use std::time::Duration;

use mysql::prelude::Queryable;

use super::Mysql;
use crate::config::Watch;
use crate::error::Result;
use crate::store::table::SqlStore;
use crate::store::{AdvisoryLockHolder, Coordination, Session, SqlValue};

impl Mysql {
    /// When the server started, in unix seconds on its own clock (one round trip).
    fn server_started(&mut self) -> std::result::Result<i64, mysql::Error> {
        let mut firsts = self
            .statements("SELECT UNIX_TIMESTAMP(); SHOW GLOBAL STATUS LIKE 'Uptime'")
            .map_err(|(_, e)| e)?
            .into_iter();
        let now = firsts.next().flatten().and_then(|c| c.into_iter().next());
        let up = firsts.next().flatten().and_then(|c| c.into_iter().nth(1));
        Ok(now.map_or(0, SqlValue::into_count) - up.map_or(0, SqlValue::into_count))
    }

    /// The name of `w`'s advisory lock ([`advisory_name`]) in the database the watch's
    /// table is in.
    fn watch_lock_name(&mut self, w: &Watch, host: Option<&str>, what: &str) -> Result<String> {
        let db: Option<String> = match w.table.schema() {
            Some(s) => Some(s.to_string()),
            None => self
                .first("SELECT DATABASE()", None)
                .map_err(|e| self.err(what, e))?
                .and_then(|c| c.into_iter().next())
                .and_then(SqlValue::into_text),
        };
        Ok(advisory_name(db.as_deref().unwrap_or(""), &w.name, host))
    }
}

impl Coordination for SqlStore<Mysql> {
    fn session(&mut self) -> Option<Session> {
        Some(Session {
            connection: u64::from(self.driver.conn.connection_id()),
            server_started: self.driver.server_started().ok()?,
        })
    }

    fn end_session(&mut self, old: &Session) -> Result<bool> {
        const WHAT: &str = "looking for a stopped run's session";
        let m = &mut self.driver;
        // A restarted server has ended every session of before, and may have given the
        // old connection id to someone else since: never touch that one.
        let started = m.server_started().map_err(|e| m.err(WHAT, e))?;
        if (started - old.server_started).abs() > 5 {
            return Ok(true);
        }
        // A statement waits on a row lock for at most innodb_lock_wait_timeout (10 s, set
        // at connect); KILL ends it at once where the account may (its own sessions).
        let id = old.connection;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut killed = false;
        loop {
            let n = m
                .first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                    Some(&[SqlValue::UInt(id)]),
                )
                .map_err(|e| m.err(WHAT, e))?
                .and_then(|c| c.into_iter().next());
            if n.map_or(0, SqlValue::into_count) == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() > deadline {
                return Ok(false);
            }
            if !killed {
                killed = true;
                // Refused (another account's session): wait for it instead.
                let _ = m.conn.query_drop(format!("KILL {id}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_watch_lock(&mut self, w: &Watch, host: Option<&str>) -> Result<bool> {
        let m = &mut self.driver;
        let name = m.watch_lock_name(w, host, "GET_LOCK")?;
        let got = m
            .first("SELECT GET_LOCK(?, 0)", Some(&[SqlValue::Text(name)]))
            .map_err(|e| m.err("GET_LOCK", e))?
            .and_then(|c| c.into_iter().next());
        // 1: taken; 0: another session holds it; NULL: an error.
        Ok(got.map(SqlValue::into_count) == Some(1))
    }

    fn watch_lock_holder(
        &mut self,
        w: &Watch,
        host: Option<&str>,
    ) -> Result<Option<AdvisoryLockHolder>> {
        const WHAT: &str = "asking who holds the advisory lock";
        let m = &mut self.driver;
        let lock = m.watch_lock_name(w, host, WHAT)?;
        let id = m
            .first(
                "SELECT IS_USED_LOCK(?)",
                Some(&[SqlValue::Text(lock.clone())]),
            )
            .map_err(|e| m.err(WHAT, e))?
            .and_then(|c| c.into_iter().next());
        let connection = match id {
            None | Some(SqlValue::Null) => return Ok(None),
            Some(v) => u64::try_from(v.into_count()).unwrap_or(0),
        };
        // Only the connections this account may see (all of them with PROCESS).
        let who = m
            .first(
                "SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = ?",
                Some(&[SqlValue::UInt(connection)]),
            )
            .map_err(|e| m.err(WHAT, e))?
            .unwrap_or_default();
        let mut who = who.into_iter().map(SqlValue::into_text);
        let (user, host) = (who.next().flatten(), who.next().flatten());
        Ok(Some(AdvisoryLockHolder {
            lock,
            connection,
            user,
            host,
        }))
    }
}

/// A `GET_LOCK` name at most 64 characters long: `selfheal/DB/WATCH`, the same on every
/// host for one watch, or `selfheal/DB/WATCH@HOST` when each host judges its own rows.
fn advisory_name(db: &str, watch: &str, host: Option<&str>) -> String {
    let name = match host {
        Some(h) => format!("selfheal/{db}/{watch}@{h}"),
        None => format!("selfheal/{db}/{watch}"),
    };
    if name.len() <= 64 {
        return name;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // The longest head of at most 47 bytes that ends on a character boundary (`get` is
    // `None` inside a multi-byte character).
    let head = (0..=64 - 17)
        .rev()
        .find_map(|n| name.get(..n))
        .unwrap_or_default();
    format!("{head}#{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_names_fit() {
        assert_eq!(
            advisory_name("appdb", "full-sync", None),
            "selfheal/appdb/full-sync"
        );
        assert_eq!(
            advisory_name("appdb", "full-sync", Some("web2.dc1.example.com")),
            "selfheal/appdb/full-sync@web2.dc1.example.com"
        );
        let long = advisory_name(&"d".repeat(64), &"w".repeat(64), None);
        assert_eq!(long.len(), 64);
        assert_ne!(long, advisory_name(&"d".repeat(64), &"x".repeat(64), None));
        // Cut to fit, two hosts still take two locks.
        let (a, b) = (
            advisory_name("appdb", &"w".repeat(60), Some("web1")),
            advisory_name("appdb", &"w".repeat(60), Some("web2")),
        );
        assert_eq!((a.len(), b.len()), (64, 64));
        assert_ne!(a, b);
        // A multi-byte database name is cut on a character boundary, never inside one.
        for pad in 0..4 {
            let db = format!("{}{}", "d".repeat(pad), "数据库".repeat(8));
            let name = advisory_name(&db, "sync", None);
            assert!(name.len() <= 64 && name.len() > 64 - 4, "{name}");
            assert!(name.starts_with("selfheal/d") || name.starts_with("selfheal/数"));
        }
        // Cut inside a character at byte 47 (`名` spans 45..48): the head stops before it,
        // the name stays the same run after run, and two databases that share the head
        // still take two locks.
        let db = "selfheal_x测试_数据库_多字节名称";
        assert!(!format!("selfheal/{db}/full-sync-nightly").is_char_boundary(47));
        let name = advisory_name(db, "full-sync-nightly", None);
        assert_eq!(name, advisory_name(db, "full-sync-nightly", None));
        assert!(
            name.starts_with("selfheal/selfheal_x测试_数据库_多字节#"),
            "{name}"
        );
        assert!(name.len() <= 64 && name.chars().count() <= 64);
        assert_ne!(
            name,
            advisory_name(&format!("{db}2"), "full-sync-nightly", None)
        );
    }
}
