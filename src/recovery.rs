//! Settling what a stopped run left in `state_dir/pending.jsonl` (see [`crate::journal`]).
//!
//! A run puts the journal entry of every change it is about to try into the intents file,
//! on disk, before its first compare-and-set, and empties the file once every applied
//! change is journaled. A run killed in between (SIGKILL, a crash, a power cut, the
//! database going away) leaves intents behind. The next real run, before it changes
//! anything, settles each of them: an intent whose change id the journal lists since the
//! intents were written is done; otherwise the row is read, and when it shows exactly that
//! change (the target status, the start value selfheal saw, and its message where the
//! watch has a message column) the entry is journaled then, marked `recovered`. Then the
//! file is emptied.
//!
//! On MySQL the stopped run's session may still be on the server, its last `UPDATE`
//! waiting on a row lock to apply later: unless the server restarted since (then that
//! session is gone, and its connection id may be someone else's), that session is ended
//! (`KILL`, allowed for one's own sessions) and waited for, bounded, before any row is
//! read. If it is still there, the run stops with an error (exit 3) and the next run tries
//! again.
//!
//! I/O: reads the intents file and the journal's tail, reads one row per unsettled intent,
//! appends to the journal and flushes it, truncates the intents file.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::check::JournalWriter;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Session, SqlValue, Store};

/// Settles the intents a stopped run left; returns warnings for the operator.
pub fn settle(cfg: &Config, store: &mut dyn Store, jw: &mut JournalWriter) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let Some(left) = jw.pending.read()? else {
        return Ok(warnings);
    };
    let pending_path = jw.pending.path().display().to_string();
    if left.damaged > 0 {
        warnings.push(format!(
            "{pending_path}: skipped {} damaged line(s) of a stopped run's intents",
            left.damaged
        ));
    }
    if let Some(session) = left
        .header
        .get("session")
        .and_then(|v| serde_json::from_value::<Session>(v.clone()).ok())
        && !store.end_session(&session)?
    {
        let conn = session.connection;
        return Err(Error::Database {
            context: format!("{pending_path}: settling a stopped run's changes"),
            message: format!(
                "its session (connection {conn}) is still running a statement on the server; \
                 the next run tries again"
            ),
        });
    }
    let offset = left
        .header
        .get("journal_offset")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut journaled = HashSet::new();
    crate::journal::read_from(jw.journal.path(), offset, &mut |m| {
        if let Some(c) = m.get("change").and_then(Value::as_str) {
            journaled.insert(c.to_string());
        }
    })?;
    let mut recovered = 0usize;
    for intent in left.intents {
        let Some(change) = intent.get("change").and_then(Value::as_str) else {
            continue;
        };
        if journaled.contains(change) {
            continue;
        }
        let watch = intent.get("watch").and_then(Value::as_str).unwrap_or("");
        let Some(w) = cfg.watches.iter().find(|w| w.name == watch) else {
            warnings.push(format!(
                "{pending_path}: change {change} of watch '{watch}', which is no longer \
                 configured: cannot tell whether it was applied"
            ));
            continue;
        };
        let Some(id) = id_value(intent.get("id")) else {
            continue;
        };
        if applied(store, w, &id, &intent)? {
            let mut entry = intent.clone();
            entry.insert("recovered".into(), json!(true));
            entry.insert("time".into(), json!(crate::clock::now_rfc3339()));
            jw.journal.append(&Value::Object(entry))?;
            journaled.insert(change.to_string());
            recovered += 1;
        }
    }
    jw.journal.sync()?;
    jw.pending.clear()?;
    if recovered > 0 {
        warnings.push(format!(
            "journaled {recovered} change(s) that a stopped run made without journaling them \
             (marked \"recovered\" in {})",
            jw.journal.path().display()
        ));
    }
    Ok(warnings)
}

/// The id as the journal wrote it: a number or a string.
fn id_value(v: Option<&Value>) -> Option<SqlValue> {
    match v? {
        Value::Number(n) => n
            .as_i64()
            .map(SqlValue::Int)
            .or_else(|| n.as_u64().map(SqlValue::UInt)),
        Value::String(s) => Some(SqlValue::Text(s.clone())),
        _ => None,
    }
}

/// True when the row shows exactly the intended change.
fn applied(
    store: &mut dyn Store,
    w: &crate::config::Watch,
    id: &SqlValue,
    intent: &Map<String, Value>,
) -> Result<bool> {
    let Some(now) = store.current_row(w, id)? else {
        return Ok(false);
    };
    let text = |k: &str| intent.get(k).and_then(Value::as_str);
    let message_ok = match &now.message {
        None => true,
        Some(m) => Some(m.to_string().as_str()) == text("reason"),
    };
    Ok(Some(now.status.to_string().as_str()) == text("to")
        && Some(now.started.to_string().as_str()) == text("started")
        && message_ok)
}
