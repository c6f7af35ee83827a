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
    if !w.db_lock.is_empty() {
        out.push(format!("    named lock  {}", item("db_lock")));
    }
    let owner_col = w
        .owner_column
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| w.owner_split.as_ref().map(|(h, p)| format!("{h}:{p}")));
    let owner = match (&owner_col, &r.row.owner) {
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
        out.push(match &r.history_cut {
            Some(cut) => format!("  history       none in the journal: {cut}"),
            None => "  history       none in the journal".into(),
        });
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
        "history_cut": r.history_cut,
        "report_file": r.report_file.as_ref().map(|(p, _)| p),
        "last_execution": r.report_file.as_ref().and_then(|(_, v)| v.as_ref().ok()),
        "last_execution_error": r.report_file.as_ref().and_then(|(_, v)| v.as_ref().err()),
        "resolve": r.resolve,
        "sql": r.sql,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::{Action, Confirmation, Heartbeat, Lock, Owner, Verdict};
    use crate::journal::{JournalEntry, OutcomeBasis, RowId};
    use crate::show::fixtures::{NOW, evidence, report, row, watch};
    use crate::show::record::Process;

    /// Row 7 of watch sync, running and hung: its lock held and its owner alive on this
    /// host, its heartbeat 15 minutes old; parked once before in an earlier run, and an
    /// intent of a stopped run that could not be told.
    fn hung_row() -> RowRecord {
        let w = watch();
        let ev = evidence(
            5400,
            Heartbeat::Age(900),
            Lock::Held { pid: Some(4242) },
            Owner::Alive { pid: 4242 },
        );
        let confirmed = Confirmation {
            count: 2,
            confirm: 2,
        };
        let report = report(&w, ev.clone(), Some(confirmed));
        let earlier = JournalEntry {
            time: "2026-03-04T09:00:00Z".into(),
            host: "web1".into(),
            watch: "sync".into(),
            id: RowId::Int(7),
            started: Some("2026-03-04 08:00:00".into()),
            from: "running".into(),
            to: "wait_manual".into(),
            verdict: Verdict::Hung,
            basis: "stale_but_lock_held".into(),
            action: Action::MarkManual,
            applied: true,
            ..JournalEntry::default()
        };
        let untold = JournalEntry {
            time: "2026-03-05T11:40:00Z".into(),
            started: Some("2026-03-05 10:30:00".into()),
            to: "error".into(),
            verdict: Verdict::Dead,
            basis: "heartbeat_stale".into(),
            action: Action::MarkDead,
            outcome: Outcome::Unknown,
            outcome_basis: Some(OutcomeBasis::NoMessageColumn),
            found: Some(crate::journal::Found {
                status: "error".into(),
                started: "2026-03-05 10:30:00".into(),
            }),
            ..earlier.clone()
        };
        RowRecord {
            id: SqlValue::Int(7),
            status: "running".into(),
            parked: false,
            running: true,
            columns: vec![
                ("id".into(), SqlValue::Int(7)),
                ("status".into(), SqlValue::Text("running".into())),
                (
                    "start_time".into(),
                    SqlValue::Text("2026-03-05 10:30:00".into()),
                ),
                ("worker".into(), SqlValue::Text("web1:4242".into())),
                ("message".into(), SqlValue::Text(String::new())),
                ("ended".into(), SqlValue::Null),
            ],
            row: row(),
            evidence: ev,
            decision: report.decision.clone(),
            next: "set status to 'wait_manual' (mark_manual)".into(),
            report: Some(report),
            process: Some(Process {
                pid: 4242,
                started: Some(NOW - 5390),
                command: Some("php artisan sync:run --id=7".into()),
            }),
            heartbeat_file: Some("/run/app/7.hb".into()),
            lock_file: Some("/run/app/7.lock".into()),
            history: vec![Event::of(&earlier), Event::of(&untold)],
            earlier: 3,
            history_cut: None,
            report_file: Some((
                "/run/app/7.json".into(),
                Ok(json!({
                    "state": "running",
                    "exit_status": null,
                    "start": "2026-03-05T10:30:05Z",
                    "pid": 4242,
                    "run_id": "r-1",
                    "command": ["php", "artisan", "sync:run", 7],
                })),
            )),
            resolve: Some(crate::person::resolve_command(
                &w,
                &SqlValue::Int(7),
                false,
                false,
            )),
            sql: Some("UPDATE `app`.`sync_log` SET …".into()),
            w,
        }
    }

    /// The same row parked in `wait_manual`, with nothing in the journal, no owner, and
    /// no execution record yet.
    fn parked_row() -> RowRecord {
        let mut r = hung_row();
        r.status = "wait_manual".into();
        r.parked = true;
        r.running = false;
        r.row.owner = None;
        r.evidence.owner = Owner::Empty;
        r.next = "nothing: it waits for a person in 'wait_manual'".into();
        r.report = None;
        r.process = None;
        r.history = Vec::new();
        r.earlier = 0;
        r.report_file = Some((
            "/run/app/7.json".into(),
            Err("not there (the job has not run under selfheal run --report yet)".into()),
        ));
        r.resolve = Some(crate::person::resolve_command(&r.w, &r.id, true, false));
        r.sql = None;
        r
    }

    #[test]
    fn a_running_rows_record_reads_top_down() {
        assert_eq!(
            record_text(&hung_row(), NOW),
            [
                "watch sync, table app.sync_log, row id=7: 'running' (running)",
                "  columns",
                "    id          7",
                "    status      running",
                "    start_time  2026-03-05 10:30:00",
                "    worker      web1:4242",
                "    message     ''",
                "    ended       NULL",
                "  evidence now",
                "    age         1h30m (max_age 4h)",
                "    heartbeat   15m ago (stale_after 5m; file /run/app/7.hb)",
                "    lock        held:4242 (file /run/app/7.lock)",
                "    owner       alive:4242 (worker = web1:4242)",
                "    process     pid 4242, started 2026-03-05T10:30:10Z (1h29m ago), command: \
                 php artisan sync:run --id=7",
                "  verdict now   hung: the heartbeat is stale, but the job's lock is held",
                "  next real run set status to 'wait_manual' (mark_manual)",
                "  confirmations the next real run would be run 2 of the 2 in a row that must \
                 find it hung before it acts",
                "  history       2 journal entries (the latest; 3 earlier not shown)",
                "    2026-03-04T09:00:00Z hung mark_manual 'running'→'wait_manual' by selfheal \
                 on web1 (an earlier run, started 2026-03-04 08:00:00)",
                "      because the heartbeat is stale, but the job's lock is held",
                "    2026-03-05T11:40:00Z dead mark_dead 'running'→'error' tried by selfheal on \
                 web1, outcome unknown",
                "      because the heartbeat is stale and nothing says the worker lives",
                "      found   the row showed 'error' at the same start, but the watch has no \
                 message_column to tell selfheal's write from the job's own",
                "  last execution /run/app/7.json",
                "    state running, exit status -, started 2026-03-05T10:30:05Z, ended -, lock \
                 wait - ms, pid 4242, run r-1",
                "    command php artisan sync:run 7",
                "  resolve       selfheal resolve sync 7 --as dead",
            ]
        );
    }

    #[test]
    fn a_parked_rows_record_says_it_waits_and_judges_it_as_if_running() {
        let text = record_text(&parked_row(), NOW);
        let from = |prefix: &str| {
            text.iter()
                .find(|l| l.starts_with(prefix))
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            text[0],
            "watch sync, table app.sync_log, row id=7: 'wait_manual' (parked: it waits for a \
             person)"
        );
        assert_eq!(from("    owner"), "    owner       empty (worker is empty)");
        assert!(!text.iter().any(|l| l.starts_with("    process")));
        assert_eq!(
            from("  verdict now"),
            "  verdict now   hung: the heartbeat is stale, but the job's lock is held (as if it \
             were running)"
        );
        assert!(!text.iter().any(|l| l.starts_with("  confirmations")));
        assert_eq!(from("  history"), "  history       none in the journal");
        assert_eq!(
            from("  last execution"),
            "  last execution /run/app/7.json: not there (the job has not run under selfheal \
             run --report yet)"
        );
        assert_eq!(
            text.last().map(String::as_str),
            Some("  resolve       selfheal resolve sync 7 --as dead|running")
        );
    }

    /// A row with no history left in the journal, whose older generations were rotated
    /// away, says so instead of "none".
    #[test]
    fn a_history_the_journal_no_longer_holds_says_since_when() {
        let mut r = hung_row();
        r.history.clear();
        r.earlier = 0;
        let now = NOW;
        let history = |r: &RowRecord| {
            record_text(r, now)
                .into_iter()
                .find(|l| l.starts_with("  history"))
                .expect("a history line")
        };
        assert_eq!(history(&r), "  history       none in the journal");
        r.history_cut = Some(
            "the journal holds entries since 2026-03-05T11:00:00Z; older ones were rotated \
             away (last at 2026-03-05T11:30:00Z)"
                .into(),
        );
        assert_eq!(
            history(&r),
            "  history       none in the journal: the journal holds entries since \
             2026-03-05T11:00:00Z; older ones were rotated away (last at 2026-03-05T11:30:00Z)"
        );
        assert_eq!(
            record_json(&r)["history_cut"],
            json!(r.history_cut.as_deref())
        );
    }

    #[test]
    fn a_record_in_json_is_one_object_with_the_files_and_process_in_its_evidence() {
        let mut v = record_json(&hung_row());
        let evidence = v
            .as_object_mut()
            .and_then(|o| o.remove("evidence"))
            .unwrap_or_default();
        assert_eq!(
            v,
            json!({
                "watch": "sync",
                "table": "app.sync_log",
                "id": 7,
                "status": "running",
                "parked": false,
                "running": true,
                "columns": {
                    "id": 7,
                    "status": "running",
                    "start_time": "2026-03-05 10:30:00",
                    "worker": "web1:4242",
                    "message": "",
                    "ended": null,
                },
                "verdict": "hung",
                "basis": "the heartbeat is stale, but the job's lock is held",
                "next_run": "set status to 'wait_manual' (mark_manual)",
                "action": "mark_manual",
                "held": null,
                "confirmations": 2,
                "confirm": 2,
                "history": hung_row().history.iter().map(Event::to_json).collect::<Vec<_>>(),
                "history_earlier": 3,
                "history_cut": null,
                "report_file": "/run/app/7.json",
                "last_execution": {
                    "state": "running",
                    "exit_status": null,
                    "start": "2026-03-05T10:30:05Z",
                    "pid": 4242,
                    "run_id": "r-1",
                    "command": ["php", "artisan", "sync:run", 7],
                },
                "last_execution_error": null,
                "resolve": "selfheal resolve sync 7 --as dead",
                "sql": "UPDATE `app`.`sync_log` SET …",
            })
        );
        // Beside the evidence's own record: where its files are, the owner as the row holds
        // it, and the owner's process.
        for (key, value) in [
            ("heartbeat_file", json!("/run/app/7.hb")),
            ("heartbeat_column", json!(null)),
            ("lock_file", json!("/run/app/7.lock")),
            ("lock_holder", json!(null)),
            ("owner_value", json!("web1:4242")),
            (
                "process",
                json!({
                    "pid": 4242,
                    "started": "2026-03-05T10:30:10Z",
                    "command": "php artisan sync:run --id=7",
                }),
            ),
        ] {
            assert_eq!(evidence[key], value, "{key}");
        }
        let parked = record_json(&parked_row());
        assert_eq!(parked["parked"], true);
        assert_eq!(
            parked["action"],
            json!(null),
            "no dry-run report of a parked row"
        );
        assert_eq!(parked["last_execution"], json!(null));
        assert_eq!(
            parked["last_execution_error"],
            "not there (the job has not run under selfheal run --report yet)"
        );
    }
}
