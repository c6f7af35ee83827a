//! `show WATCH ID`: one row's whole record, gathered — its columns as the table holds
//! them, the evidence and verdict now, what the next real run would do (from the dry run),
//! its history from the journal, the owner's process when it is a live one of this host,
//! and the job's last execution record when the watch names its `report_file`.
//!
//! I/O: the database (read-only where it can be), the evidence files, `/proc` (the
//! owner's start time and command line), the journal, the report file.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::clock::epoch;
use crate::config::{self, Config, Watch};
use crate::decide::{self, Action, Decision, Evidence, Owner, Verdict};
use crate::error::{Error, Result, Usage, exit};
use crate::escape::printable;
use crate::evidence::{Scene, Snapshot, gather, thresholds};
use crate::host::Host;
use crate::journal::RowId;
use crate::person;
use crate::report::{Format, RowReport};
use crate::resolve::parse_id;
use crate::store::{self, RunningRow, SqlValue};

use super::dry_run::{Keep, dry_check};
use super::history::{Event, read_journal_cut};
use super::render::{record_json, record_text};
use super::{by_hand, warn_all};

/// How many journal entries of one row its record shows (the latest).
pub const HISTORY_SHOWN: usize = 100;

/// The largest execution record read.
const MAX_REPORT: u64 = 64 << 10;

/// The largest command line read from `/proc`.
const MAX_CMDLINE: u64 = 4096;

/// The owner's process, when it is a live process of this host.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub pid: u32,
    /// When it started (unix seconds), from `/proc`.
    pub started: Option<i64>,
    /// Its command line (arguments joined by spaces), from `/proc`.
    pub command: Option<String>,
}

/// The command line of process `pid` (at most [`MAX_CMDLINE`] bytes), its arguments
/// joined by spaces.
fn command_line(pid: u32) -> Option<String> {
    let f = std::fs::File::open(format!("/proc/{pid}/cmdline")).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_CMDLINE).read_to_end(&mut bytes).ok()?;
    let args: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then(|| args.join(" "))
}

/// The job's execution record at `path` (`selfheal run --report`), as JSON; `Err` says
/// why there is none.
fn execution_record(path: &std::path::Path) -> std::result::Result<Value, String> {
    use crate::probe::lock::{NotOpened, open_regular};
    let f = match open_regular(path) {
        Ok(f) => f,
        Err(NotOpened::Absent) => {
            return Err("not there (the job has not run under selfheal run --report yet)".into());
        }
        Err(NotOpened::NotRegular(kind)) => {
            return Err(format!("{}, not a regular file", kind.describe()));
        }
        Err(NotOpened::Io(e)) => return Err(e.to_string()),
    };
    let mut bytes = Vec::new();
    f.take(MAX_REPORT)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| format!("not an execution record: {e}"))
        .and_then(|v| {
            if v.is_object() {
                Ok(v)
            } else {
                Err("not an execution record: not a JSON object".into())
            }
        })
}

/// One row's whole record.
pub(super) struct RowRecord {
    pub(super) w: Watch,
    pub(super) id: SqlValue,
    pub(super) status: String,
    pub(super) parked: bool,
    pub(super) running: bool,
    pub(super) columns: Vec<(String, SqlValue)>,
    pub(super) row: RunningRow,
    pub(super) evidence: Evidence,
    pub(super) decision: Decision,
    /// What the next real run does, in words.
    pub(super) next: String,
    /// The dry run's report of the row, when it is running.
    pub(super) report: Option<RowReport>,
    pub(super) process: Option<Process>,
    pub(super) heartbeat_file: Option<String>,
    pub(super) lock_file: Option<String>,
    pub(super) history: Vec<Event>,
    /// Entries before the ones shown.
    pub(super) earlier: usize,
    /// Older history was rotated out of the journal: since when it holds entries, in words.
    pub(super) history_cut: Option<String>,
    pub(super) report_file: Option<(String, std::result::Result<Value, String>)>,
    pub(super) resolve: Option<String>,
    pub(super) sql: Option<String>,
}

/// `show WATCH ID`.
pub(super) fn one_row(
    cfg: &Config,
    watch: &str,
    given: &str,
    format: Format,
    out: &mut dyn Write,
) -> Result<u8> {
    let Some(w) = cfg.watches.iter().find(|w| w.name == watch) else {
        return Err(Error::Usage(Usage::Other(format!(
            "watch {watch:?}: no such watch"
        ))));
    };
    let Some(db) = cfg.database.as_ref() else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    let mut store = store::open(db, true)?;
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let schema = store.schema(w)?;
    let id = parse_id(w, &schema, given)?;
    let Some(columns) = store.row_columns(w, &id)? else {
        return Err(Error::Usage(Usage::Other(format!(
            "watch {}: no row with id {} in {} (selfheal show lists the rows that need a person)",
            w.name,
            printable(given),
            w.table
        ))));
    };
    let Some(stored) = store.row_by_id(w, &id)? else {
        return Err(Error::Usage(Usage::Other(format!(
            "watch {}: row id {} of {} is not one of its rows (its match: {})",
            w.name,
            printable(given),
            w.table,
            w.matches
                .iter()
                .map(|(c, v)| format!("{c} = {v:?}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ))));
    };
    let status = stored.status.to_string();
    let running = status == w.running_value;
    let parked = w.manual_value.as_deref() == Some(status.as_str());
    let host = Host::current().known_as(&cfg.run.host_names);
    let collected = dry_check(cfg, Keep::Row(w.name.clone(), id.clone()))?;
    let mut warnings = collected.warnings.clone();
    let report = collected
        .rows
        .iter()
        .find(|r| r.watch == w.name && r.id == id && running)
        .cloned();
    let (evidence, decision) = match &report {
        Some(r) => (r.evidence.clone(), r.decision.clone()),
        None => {
            let snapshot = Snapshot::read(w);
            let ev = gather(
                w,
                &stored.row,
                &Scene::of_one_row(&clocks, &host, &snapshot),
            );
            let d = decide::decide(&ev, thresholds(w));
            (ev, d)
        }
    };
    let unpark = collected
        .unparked
        .iter()
        .find(|u| u.watch == w.name && u.id == id);
    let next = match (&report, unpark) {
        (Some(r), _) => next_run(r),
        (None, Some(u)) => format!(
            "set status back to '{}' (recovered): it was parked as hung at {} and its own \
             heartbeat is fresh again since, while its worker lives",
            u.to, u.parked_at
        ),
        (None, None) if parked => format!(
            "nothing: it waits for a person in '{status}' (a parked row is un-parked only when \
             it was parked as hung and its own heartbeat beats again)"
        ),
        (None, None) if running => {
            "nothing this run: the dry run did not reach it (see the warnings)".to_string()
        }
        (None, None) => format!("nothing: '{status}' is not a status selfheal judges"),
    };
    let process = match evidence.owner {
        Owner::Alive { pid } | Owner::Reused { pid, .. } => Some(Process {
            pid,
            started: host.process_stat(pid).and_then(|(_, s)| s).map(|s| {
                #[allow(clippy::cast_possible_truncation)] // seconds since 1970 fit
                let s = s as i64;
                s
            }),
            command: command_line(pid),
        }),
        _ => None,
    };
    let id_text = id.to_string();
    let render = |t: &config::PathTemplate| match t.render(&id_text) {
        Ok(p) => p.display().to_string(),
        Err(why) => format!("{} ({why})", t.as_str()),
    };
    let key = RowId::from(&id).key();
    let mut history: VecDeque<Event> = VecDeque::new();
    let mut earlier = 0usize;
    let (said, history_cut) = read_journal_cut(cfg, &mut |e| {
        if e.watch == w.name && e.id.key() == key {
            history.push_back(Event::of(&e));
            if history.len() > HISTORY_SHOWN {
                history.pop_front();
                earlier += 1;
            }
        }
    });
    warnings.extend(said);
    let report_file = w.report_file.as_ref().map(|t| match t.render(&id_text) {
        Ok(p) => (p.display().to_string(), execution_record(&p)),
        Err(why) => (t.as_str().to_string(), Err(why)),
    });
    let resolve = (parked || running)
        .then(|| person::resolve_command(w, &id, parked, decision.verdict == Verdict::Remote));
    // Only where `resolve` itself would act without --force (docs/design.md#resolve).
    let sql = ((parked || running) && crate::resolve::would_refuse(w, &host, &evidence).is_none())
        .then(|| by_hand(store.as_ref(), w, &schema, &stored.row, &status));
    let rec = RowRecord {
        w: w.clone(),
        id,
        status,
        parked,
        running,
        columns,
        row: stored.row,
        heartbeat_file: w.heartbeat_file.as_ref().map(render),
        lock_file: w.lock_file.as_ref().map(render),
        evidence,
        decision,
        next,
        report,
        process,
        history: history.into(),
        earlier,
        history_cut,
        report_file,
        resolve,
        sql,
    };
    match format {
        Format::Text => {
            for l in record_text(&rec, epoch(SystemTime::now())) {
                let _ = writeln!(out, "{}", printable(&l));
            }
            warn_all(&warnings);
        }
        Format::Json => {
            let mut v = record_json(&rec);
            if let Some(o) = v.as_object_mut() {
                o.insert("warnings".into(), json!(warnings));
            }
            let _ = writeln!(out, "{v}");
        }
    }
    Ok(exit::OK)
}

/// What the next real run does with a running row, from the dry run's report.
fn next_run(r: &RowReport) -> String {
    use decide::Hold;
    match (r.plan.action, &r.plan.target, r.plan.hold) {
        (_, _, Some(Hold::Confirming)) => {
            let (count, confirm) = r.confirmation.map_or((1, 1), |c| (c.count, c.confirm));
            format!(
                "nothing yet: confirming, {count} of {confirm} runs in a row have found it {}; \
                 it acts once {confirm} have",
                r.decision.verdict.as_str()
            )
        }
        (_, _, Some(h @ (Hold::Contradicted | Hold::Person))) => {
            format!("leave it for now: {}", h.describe())
        }
        (_, _, Some(h)) => format!("leave it and report it ({})", h.describe()),
        (Action::None, _, _) if r.plan.attention => {
            "leave it and report it: a person must look".into()
        }
        (Action::None, _, _) => "leave it alone".into(),
        (a, Some(t), _) => format!("set status to '{t}' ({})", a.as_str()),
        (a, None, _) => a.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::{Confirmation, Heartbeat, Hold, Lock};
    use crate::show::fixtures::{evidence, report, watch};

    #[test]
    fn the_next_run_is_said_from_the_plan_and_its_hold() {
        let w = watch();
        let stale = || evidence(900, Heartbeat::Age(900), Lock::Absent, Owner::Empty);
        let unconfirmed = Confirmation {
            count: 1,
            confirm: 2,
        };
        assert_eq!(
            next_run(&report(&w, stale(), Some(unconfirmed))),
            "nothing yet: confirming, 1 of 2 runs in a row have found it dead; it acts once \
             2 have"
        );
        let dead = report(&w, stale(), None);
        assert_eq!(next_run(&dead), "set status to 'error' (mark_dead)");
        let mut breaker = dead.clone();
        breaker.plan = decide::hold(breaker.plan, &breaker.decision, Hold::Breaker);
        assert_eq!(
            next_run(&breaker),
            format!("leave it and report it ({})", Hold::Breaker.describe())
        );
        let mut person = dead;
        person.plan = decide::hold_by_person();
        assert_eq!(
            next_run(&person),
            format!("leave it for now: {}", Hold::Person.describe())
        );
        let hung = evidence(
            900,
            Heartbeat::Age(900),
            Lock::Held { pid: Some(4242) },
            Owner::Empty,
        );
        assert_eq!(
            next_run(&report(&w, hung, None)),
            "set status to 'wait_manual' (mark_manual)"
        );
        let unreadable = evidence(
            900,
            Heartbeat::Unreadable("EIO".into()),
            Lock::Absent,
            Owner::Empty,
        );
        assert_eq!(
            next_run(&report(&w, unreadable, None)),
            "leave it and report it: a person must look"
        );
        let fresh = evidence(900, Heartbeat::Age(5), Lock::Absent, Owner::Empty);
        assert_eq!(next_run(&report(&w, fresh, None)), "leave it alone");
    }

    #[test]
    fn an_execution_record_is_a_json_object_or_why_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            execution_record(&p)
        };
        assert_eq!(
            at("ok.json", r#"{"state": "succeeded", "exit_status": 0}"#),
            Ok(json!({"state": "succeeded", "exit_status": 0}))
        );
        assert_eq!(
            at("list.json", "[1, 2]"),
            Err("not an execution record: not a JSON object".to_string())
        );
        assert_eq!(
            at("cut.json", r#"{"state": "runn"#),
            Err("not an execution record: EOF while parsing a string at line 1 column 15".into())
        );
        // Read up to MAX_REPORT bytes: a longer file is cut, and so not a record.
        let long = format!(r#"{{"command": "{}"}}"#, "x".repeat(70_000));
        assert_eq!(
            at("long.json", &long),
            Err(
                "not an execution record: EOF while parsing a string at line 1 column 65536".into()
            )
        );
        assert_eq!(
            execution_record(&dir.path().join("absent.json")),
            Err("not there (the job has not run under selfheal run --report yet)".into())
        );
        assert_eq!(
            execution_record(dir.path()),
            Err("a directory, not a regular file".into())
        );
    }

    #[test]
    fn a_command_line_is_its_arguments_joined_by_spaces() {
        let args: Vec<String> = std::env::args().collect();
        assert_eq!(command_line(std::process::id()), Some(args.join(" ")));
        assert_eq!(command_line(0), None, "no process 0 in /proc");
    }
}
