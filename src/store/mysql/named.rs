//! Named locks on MySQL/MariaDB (`db_lock`, `docs/design.md#named-lock`): who holds each
//! name of a page (`IS_USED_LOCK`, one round trip), and what the process list shows of
//! the holders. Statements only: they take no lock and change nothing.

use crate::store::SqlValue;
use crate::store::sql::{Dialect, Statement, bound_list};

/// `SELECT IS_USED_LOCK(?), IS_USED_LOCK(?), …`: the holder's connection id, or NULL.
pub fn holders(d: &Dialect, names: &[String]) -> Statement {
    let st = bound_list(
        d,
        names.iter().map(|n| SqlValue::Text(n.clone())).collect(),
        "IS_USED_LOCK({})",
    );
    Statement {
        sql: format!("SELECT {}", st.sql),
        params: st.params,
    }
}

/// The process list's rows of these connections, as far as the account may see them
/// (all with `PROCESS`, else its own).
pub fn sessions(d: &Dialect, ids: &[u64]) -> Statement {
    let st = bound_list(d, ids.iter().map(|i| SqlValue::UInt(*i)).collect(), "{}");
    Statement {
        sql: format!(
            "SELECT ID, USER, HOST, TIME FROM information_schema.PROCESSLIST WHERE ID IN ({})",
            st.sql
        ),
        params: st.params,
    }
}
