//! One row's record as lines of text and as one JSON object (which also carries the
//! statement a person would run by hand, where `resolve` would act).
//!
//! Pure: the current time is passed in.

use serde_json::{Value, json};

use crate::clock::human;
use crate::config::fmt_duration;
use crate::evidence;
use crate::journal::Outcome;
use crate::store::SqlValue;

use super::history::Event;
use super::record::RowRecord;

fn ago(now: i64, t: i64) -> String {
    human(u64::try_from(now.saturating_sub(t)).unwrap_or(0))
}

/// The record as lines of text; `now` (unix seconds, host clock) dates the owner process.
pub(super) fn record_text(r: &RowRecord, now: i64) -> Vec<String> {
    let w = &r.w;
    let mut out = vec![format!(
        "watch {}, table {}, row id={}: '{}'{}",
        w.name,
        w.table,
        r.id,
        r.status,
        if r.parked {
            " (parked: it waits for a person)"
        } else if r.running {
            " (running)"
        } else {
            " (neither running nor parked)"
        }
    )];
    out.push("  columns".into());
    let width = r
        .columns
        .iter()
        .map(|(c, _)| c.chars().count())
        .max()
        .unwrap_or(0);
    for (c, v) in &r.columns {
        match v {
            SqlValue::Text(t) if t.is_empty() => out.push(format!("    {c:<width$}  ''")),
            v => out.push(format!("    {c:<width$}  {v}")),
        }
    }
    out.push("  evidence now".into());
    let rendered = evidence::render(&r.evidence);
    let item = |key: &str| {
        rendered
            .items
            .iter()
            .find(|i| i.key == key)
            .map(evidence::Item::human)
            .unwrap_or_default()
    };
    let age = item("total_age");
    out.push(format!(
        "    age         {age} (max_age {})",
        fmt_duration(w.max_age)
    ));
    let mut beat_source = Vec::new();
    if let Some(f) = &r.heartbeat_file {
        beat_source.push(format!("file {f}"));
    }
    if let (Some(c), Some(v)) = (&w.heartbeat_column, &r.row.heartbeat) {
        beat_source.push(format!("column {c} = {}", v.raw));
    }
    out.push(format!(
        "    heartbeat   {} (stale_after {}; {})",
        item("heartbeat_age"),
        fmt_duration(w.stale_after),
        beat_source.join(", ")
    ));
    match &r.lock_file {
        Some(f) => out.push(format!("    lock        {} (file {f})", item("lock"))),
        None => out.push("    lock        none configured".into()),
    }
    let owner = match (&w.owner_column, &r.row.owner) {
        (None, _) => "none configured".to_string(),
        (Some(c), None) => format!("{} ({c} is empty)", item("owner")),
        (Some(c), Some(v)) => format!("{} ({c} = {v})", item("owner")),
    };
    out.push(format!("    owner       {owner}"));
    if let Some(p) = &r.process {
        out.push(format!(
            "    process     pid {}{}{}",
            p.pid,
            p.started
                .map(|s| format!(
                    ", started {} ({} ago)",
                    crate::holder_line::rfc3339(s),
                    ago(now, s)
                ))
                .unwrap_or_default(),
            p.command
                .as_deref()
                .map(|c| format!(", command: {c}"))
                .unwrap_or_default()
        ));
    }
    out.push(format!(
        "  verdict now   {}: {}{}",
        r.decision.verdict.as_str(),
        r.decision.basis.describe(),
        if r.running {
            String::new()
        } else {
            " (as if it were running)".to_string()
        }
    ));
    out.push(format!("  next real run {}", r.next));
    if let Some(c) = r.report.as_ref().and_then(|x| x.confirmation) {
        out.push(format!(
            "  confirmations the next real run would be run {} of the {} in a row that must \
             find it {} before it acts",
            c.count,
            c.confirm,
            r.decision.verdict.as_str()
        ));
    }
    if r.history.is_empty() {
        out.push("  history       none in the journal".into());
    } else {
        out.push(format!(
            "  history       {} journal entr{}{}",
            r.history.len(),
            if r.history.len() == 1 { "y" } else { "ies" },
            if r.earlier > 0 {
                format!(" (the latest; {} earlier not shown)", r.earlier)
            } else {
                String::new()
            }
        ));
        let started = r.row.started.raw.to_string();
        for e in &r.history {
            // A stopped run's change the next run could not tell as selfheal's is no change.
            let by = match e.outcome {
                Outcome::Applied => format!("by {}", e.by),
                o => format!("tried by {}, outcome {}", e.by, o.as_str()),
            };
            out.push(format!(
                "    {} {} {} '{}'→'{}' {by}{}{}",
                e.time,
                e.verdict.as_str(),
                e.action.as_str(),
                e.from,
                e.to,
                e.note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default(),
                if e.started.as_deref().is_some_and(|s| s != started) {
                    format!(
                        " (an earlier run, started {})",
                        e.started.as_deref().unwrap_or_default()
                    )
                } else {
                    String::new()
                }
            ));
            out.push(format!("      because {}", e.basis));
            if let Some(d) = &e.outcome_detail {
                out.push(format!("      found   {d}"));
            }
        }
    }
    match &r.report_file {
        None => {}
        Some((path, Err(why))) => out.push(format!("  last execution {path}: {why}")),
        Some((path, Ok(v))) => {
            let field = |k: &str| match v.get(k) {
                None | Some(Value::Null) => "-".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(x) => x.to_string(),
            };
            out.push(format!("  last execution {path}"));
            out.push(format!(
                "    state {}, exit status {}, started {}, ended {}, lock wait {} ms, pid {}, \
                 run {}",
                field("state"),
                field("exit_status"),
                field("start"),
                field("end"),
                field("lock_wait_ms"),
                field("pid"),
                field("run_id")
            ));
            if let Some(Value::Array(c)) = v.get("command") {
                let words: Vec<String> = c
                    .iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                    .collect();
                out.push(format!("    command {}", words.join(" ")));
            }
        }
    }
    if let Some(c) = &r.resolve {
        out.push(format!("  resolve       {c}"));
    }
    out
}

/// The record as one JSON object.
pub(super) fn record_json(r: &RowRecord) -> Value {
    let rendered = evidence::render(&r.evidence);
    let mut ev = serde_json::to_value(&rendered.record).unwrap_or(Value::Null);
    if let Some(o) = ev.as_object_mut() {
        o.insert("lock_holder".into(), json!(rendered.lock_holder));
        o.insert("heartbeat_file".into(), json!(r.heartbeat_file));
        o.insert(
            "heartbeat_column".into(),
            json!(r.row.heartbeat.as_ref().map(|h| h.raw.to_string())),
        );
        o.insert("lock_file".into(), json!(r.lock_file));
        o.insert("owner_value".into(), json!(r.row.owner));
        o.insert(
            "process".into(),
            json!(r.process.as_ref().map(|p| json!({
                "pid": p.pid,
                "started": p.started.map(crate::holder_line::rfc3339),
                "command": p.command,
            }))),
        );
    }
    let columns: serde_json::Map<String, Value> = r
        .columns
        .iter()
        .map(|(c, v)| {
            (
                c.clone(),
                match v {
                    SqlValue::Null => Value::Null,
                    SqlValue::Int(i) => json!(i),
                    SqlValue::UInt(u) => json!(u),
                    SqlValue::Float(f) => json!(f),
                    other => json!(other.to_string()),
                },
            )
        })
        .collect();
    json!({
        "watch": r.w.name,
        "table": r.w.table.to_string(),
        "id": r.id.to_json(),
        "status": r.status,
        "parked": r.parked,
        "running": r.running,
        "columns": columns,
        "evidence": ev,
        "verdict": r.decision.verdict,
        "basis": r.decision.basis.describe(),
        "next_run": r.next,
        "action": r.report.as_ref().map(|x| x.plan.action),
        "held": r.report.as_ref().and_then(|x| x.plan.hold),
        "confirmations": r.report.as_ref().and_then(|x| x.confirmation).map(|c| c.count),
        "confirm": r.report.as_ref().and_then(|x| x.confirmation).map(|c| c.confirm),
        "history": r.history.iter().map(Event::to_json).collect::<Vec<_>>(),
        "history_earlier": r.earlier,
        "report_file": r.report_file.as_ref().map(|(p, _)| p),
        "last_execution": r.report_file.as_ref().and_then(|(_, v)| v.as_ref().ok()),
        "last_execution_error": r.report_file.as_ref().and_then(|(_, v)| v.as_ref().err()),
        "resolve": r.resolve,
        "sql": r.sql,
    })
}
