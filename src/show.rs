//! `selfheal show`: what needs a person, and one row's whole record (SPEC §13). Reads
//! only: no row, no state file, no lock is written or taken.
//!
//! `show [WATCH]` lists every row that needs a person, one line each with the reason in
//! words, since when, and the `selfheal resolve …` command for it: the running rows a
//! real run would leave for a person (`hung` without `manual_value`, `unknown`, `overtime`
//! left for review, another host's row past `max_age`, rows held back for a person), as a
//! dry run of `check` judges them — the very sweep, confirmations and holds a real run
//! uses, through [`crate::check::run`] — and the rows parked in `manual_value`, with why
//! and when the journal says they were parked. Exit 0 when nothing needs a person, 1
//! otherwise.
//!
//! `show WATCH ID` is one row's record: its columns as the table holds them, the evidence
//! now (heartbeat file or column and its age, the lock file, its state and holder line,
//! the owner and, when it is a live process of this host, its start time and command
//! line), the verdict now and what the next real run would do (from the same dry run:
//! with its confirmations so far, or the un-park a parked row is due), its history from
//! the journal (every generation: when, verdict, basis, action, by whom), and the job's
//! last execution record when the watch names its `report_file`. In JSON also the
//! statement that would release a parked row by hand (the SQL a person ran before
//! `resolve`).
//!
//! Values from the database and from files are printed with their control characters
//! escaped ([`crate::escape`]).
//!
//! I/O: the configuration, the database (read-only where it can be), the evidence files
//! and `/proc`, the journal's generations and the confirmation counts (read), the report
//! file.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::check::{self, CheckOptions};
use crate::clock::{Clocks, age_on_db_clock, epoch, human};
use crate::config::{self, Config, ConfigPath, Overrides, Watch, fmt_duration};
use crate::decide::{self, Action, Decision, Evidence, Heartbeat, Owner, Verdict};
use crate::error::{Error, Result, Usage, exit};
use crate::escape::printable;
use crate::evidence::{self, Scene, Snapshot, gather, thresholds};
use crate::host::Host;
use crate::journal::{self, DatabaseId, JournalEntry, Outcome, RowId};
use crate::person;
use crate::report::{Format, Parked, Reporter, RowReport, Summary, Unparked, WatchInfo};
use crate::resolve::{load_watch, parse_id};
use crate::store::{self, RunningRow, Schema, Select, SqlValue, Store};

/// How many parked rows of a watch the list shows, by id.
pub const PARKED_SHOWN: u32 = 1000;

/// How many journal entries of one row its record shows (the latest).
pub const HISTORY_SHOWN: usize = 100;

/// The largest execution record read.
const MAX_REPORT: u64 = 64 << 10;

/// The largest command line read from `/proc`.
const MAX_CMDLINE: u64 = 4096;

/// How `selfheal show` runs (`app` fills this from the command line).
#[derive(Debug, Clone, Default)]
pub struct ShowOptions {
    pub config: Option<PathBuf>,
    pub watch: Option<String>,
    pub id: Option<String>,
    pub format: Format,
}

/// `selfheal show`, printing to `out` (warnings on stderr).
pub fn run(opts: &ShowOptions, out: &mut dyn Write) -> Result<u8> {
    let cfg = match &opts.watch {
        Some(w) => load_watch(opts.config.as_deref(), w)?,
        None => config::load(
            &ConfigPath::resolve(opts.config.as_deref()),
            &Overrides::default(),
            &[],
        )?,
    };
    match (&opts.watch, &opts.id) {
        (Some(w), Some(id)) => one_row(&cfg, w, id, opts.format, out),
        _ => listing(&cfg, opts.format, out),
    }
}

// ---------------------------------------------------------------------------------------
// A dry run of `check`, kept

/// What a dry run of `check` reported: every running row, the un-parks it would make,
/// the warnings.
struct Collected {
    /// Which judged rows to keep: a backlog of running rows is not held in memory.
    keep: Keep,
    rows: Vec<RowReport>,
    unparked: Vec<Unparked>,
    warnings: Vec<String>,
}

impl Reporter for Collected {
    fn watch(&mut self, w: &WatchInfo) {
        if let Some(why) = &w.skipped {
            self.warnings
                .push(format!("watch {}: skipped: {why}", w.name));
        }
    }

    fn row(&mut self, r: &RowReport) {
        let wanted = match &self.keep {
            Keep::NeedingAPerson => r.attention() && !r.applied,
            Keep::Row(watch, id) => r.watch == *watch && r.id == *id,
        };
        if wanted {
            self.rows.push(r.clone());
        }
    }

    fn warning(&mut self, msg: &str) {
        if !self.warnings.iter().any(|w| w == msg) {
            self.warnings.push(msg.to_string());
        }
    }

    fn unparked(&mut self, u: &Unparked) {
        self.unparked.push(u.clone());
    }

    fn parked(&mut self, _p: &Parked) {}

    /// Nothing is printed by the dry run itself.
    fn spoke(&self) -> bool {
        false
    }

    fn finish(&mut self, _s: &Summary) {}
}

/// The dry run of `check` over `cfg`'s watches: what a real run would judge and do now.
/// The judged rows [`dry_check`] keeps.
enum Keep {
    /// Those that need a person (the list).
    NeedingAPerson,
    /// One row (watch, id).
    Row(String, crate::store::SqlValue),
}

fn dry_check(cfg: &Config, keep: Keep) -> Result<Collected> {
    let mut c = Collected {
        keep,
        rows: Vec::new(),
        unparked: Vec::new(),
        warnings: Vec::new(),
    };
    let opts = CheckOptions {
        dry_run: true,
        force: false,
        remind: false,
    };
    check::run(cfg, &opts, &mut c)?;
    Ok(c)
}

fn warn_all(warnings: &[String]) {
    let mut err = std::io::stderr();
    for w in warnings {
        let _ = writeln!(err, "selfheal: warning: {}", printable(w));
    }
}

// ---------------------------------------------------------------------------------------
// The journal, by row

/// One journal entry of a row, as a person reads it.
#[derive(Debug, Clone)]
pub struct Event {
    pub time: String,
    pub started: Option<String>,
    pub verdict: Verdict,
    pub basis: String,
    pub action: Action,
    pub from: String,
    pub to: String,
    /// `selfheal on HOST`, or the person who decided.
    pub by: String,
    pub note: Option<String>,
    /// The message written to the row, where the entry kept it (journal lines since the
    /// compaction do not: the row holds it).
    pub reason: Option<String>,
    /// `applied` for a change made; `unknown` or `unmatched` for a stopped run's change that
    /// the next run could not tell as selfheal's, with what it found in words.
    pub outcome: Outcome,
    pub outcome_detail: Option<String>,
}

impl Event {
    fn of(e: &JournalEntry) -> Event {
        Event {
            time: e.time.clone(),
            started: e.started.clone(),
            verdict: e.verdict,
            basis: e.basis_words(),
            action: e.action,
            from: e.from.clone(),
            to: e.to.clone(),
            by: match &e.actor {
                Some(a) => a.clone(),
                None => format!("selfheal on {}", e.host),
            },
            note: e.decision_note.clone().or_else(|| e.note.clone()),
            reason: Some(e.reason.clone()).filter(|r| !r.is_empty()),
            outcome: e.outcome,
            outcome_detail: e.outcome_words(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "time": self.time,
            "started": self.started,
            "verdict": self.verdict,
            "basis": self.basis,
            "action": self.action,
            "from": self.from,
            "to": self.to,
            "by": self.by,
            "note": self.note,
            "reason": self.reason,
            "outcome": self.outcome.as_str(),
            "outcome_detail": self.outcome_detail,
        })
    }
}

/// The journal of `cfg`'s database, every generation, read once: the entries `keep`
/// wants, warnings for damaged lines said.
fn read_journal(cfg: &Config, keep: &mut dyn FnMut(JournalEntry)) -> Vec<String> {
    let Some(db) = &cfg.database else {
        return Vec::new();
    };
    match journal::read_all(&cfg.run.state_dir, &DatabaseId::of(db), keep) {
        Ok(read) => read.warnings(),
        Err(e) => vec![format!(
            "{}; the rows' history is not shown",
            e.full_message()
        )],
    }
}

// ---------------------------------------------------------------------------------------
// `show [WATCH]`

/// One row that needs a person.
#[derive(Debug, Clone)]
pub struct Need {
    pub watch: String,
    pub id: SqlValue,
    pub status: String,
    /// Seconds since the row started, on the database clock.
    pub age_s: Option<u64>,
    /// `parked`, or the verdict of a running row.
    pub verdict: String,
    pub reason: String,
    /// Since when (unix seconds), and what happened then.
    pub since: Option<i64>,
    pub since_what: &'static str,
    pub resolve: String,
    /// JSON only: the statement that makes the same change by hand.
    pub sql: Option<String>,
}

impl Need {
    fn line(&self, now: i64) -> String {
        let since = match self.since {
            Some(t) => format!(
                " since {} ago",
                human(u64::try_from(now.saturating_sub(t)).unwrap_or(0))
            ),
            None => String::new(),
        };
        let age = self.age_s.map_or_else(
            || "start unknown".to_string(),
            |a| format!("started {} ago", human(a)),
        );
        format!(
            "{} id={}: '{}', {age}: {}{since}: {}; fix: {}",
            self.watch, self.id, self.status, self.verdict, self.reason, self.resolve
        )
    }

    fn to_json(&self) -> Value {
        json!({
            "watch": self.watch,
            "id": self.id.to_json(),
            "status": self.status,
            "age_s": self.age_s,
            "verdict": self.verdict,
            "reason": self.reason,
            "since": self.since.map(crate::holder_line::rfc3339),
            "since_what": self.since.map(|_| self.since_what),
            "resolve": self.resolve,
            "sql": self.sql,
        })
    }
}

/// Since when a running row needs a person, from its evidence (unix seconds, host
/// clock), and what happened then.
fn since(r: &RowReport, now: i64) -> (Option<i64>, &'static str) {
    let ago = |s: u64| now.saturating_sub(i64::try_from(s).unwrap_or(i64::MAX));
    let total = r.evidence.total_age.as_ref().ok().copied();
    let beat = match r.evidence.heartbeat {
        Heartbeat::Age(a) => Some(a),
        _ => None,
    };
    let max = r.thresholds.max_age;
    match (&r.decision.basis, total, beat) {
        (
            decide::Basis::MaxAge
            | decide::Basis::MaxAgeWorkerLives
            | decide::Basis::OtherHostPastMaxAge(_),
            Some(t),
            _,
        ) => (Some(ago(t.saturating_sub(max))), "past max_age"),
        (decide::Basis::OtherHostSilent(_), _, Some(b)) => {
            (Some(ago(b.saturating_sub(max))), "silent beyond max_age")
        }
        (_, _, Some(b)) if r.decision.verdict != Verdict::Unknown => {
            (Some(ago(b)), "last heartbeat")
        }
        (_, Some(t), _) => (Some(ago(t)), "started"),
        _ => (None, ""),
    }
}

/// The reason in words of a running row that needs a person, as the cron text says it.
fn running_reason(r: &RowReport) -> String {
    let why = match (&r.note, r.plan.hold) {
        (Some(n), _) => n.clone(),
        (None, Some(h)) => h.describe().to_string(),
        (None, None) => r.decision.basis.describe(),
    };
    match (&r.plan.target, r.plan.action) {
        (Some(t), Action::MarkManual) => format!("{why}; the next run parks it in '{t}'"),
        _ => why,
    }
}

/// The statement a person would have run by hand for a row observed in status `from`
/// (JSON only): a running row marked dead, a parked row sent back to the queue (or marked
/// dead without one) — the very compare-and-set `resolve` makes, without its message.
fn by_hand(store: &dyn Store, w: &Watch, schema: &Schema, r: &RunningRow, from: &str) -> String {
    let parked = from != w.running_value;
    let retry = parked && w.retry.is_some();
    let to = match &w.retry {
        Some(x) if retry => &x.value,
        _ => &w.dead_value,
    };
    let change = store::Change {
        row: r,
        from_status: from,
        new_status: to,
        message: None,
        bump_attempts: retry,
        set_ended: true,
        retry_at: retry.then_some(0),
        match_heartbeat: true,
    };
    let d = store.dialect();
    store::sql::for_a_person(d, &store::sql::cas_sql(d, w, schema, &change))
}

/// The parked rows of `cfg`'s watches, with why and when the journal says they were
/// parked; warnings said as they come.
fn parked_needs(
    cfg: &Config,
    store: &mut dyn Store,
    clocks: &Clocks,
    host: &Host,
    unparking: &[Unparked],
    warnings: &mut Vec<String>,
) -> Result<Vec<Need>> {
    let mut rows: Vec<(&Watch, Schema, RunningRow, String)> = Vec::new();
    for w in &cfg.watches {
        let Some(manual) = &w.manual_value else {
            continue;
        };
        let schema = store.schema(w)?;
        let total = store.count_parked(w, manual)?;
        let mut n = 0u64;
        store.each_row(w, Select::Status(manual, PARKED_SHOWN), &mut |r| {
            n += 1;
            rows.push((w, schema.clone(), r.row, manual.clone()));
            Ok(())
        })?;
        if total > n {
            warnings.push(format!(
                "watch {}: {total} rows are parked in '{manual}'; the first {n} by id are listed",
                w.name
            ));
        }
    }
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // The last park of each (watch, id, start).
    let mut parks: HashMap<(String, String, String), JournalEntry> = HashMap::new();
    let wanted: std::collections::HashSet<(String, String, String)> = rows
        .iter()
        .map(|(w, _, r, _)| {
            (
                w.name.clone(),
                RowId::from(&r.id).key(),
                r.started.raw.to_string(),
            )
        })
        .collect();
    warnings.extend(read_journal(cfg, &mut |e| {
        let k = (
            e.watch.clone(),
            e.id.key(),
            e.started.clone().unwrap_or_default(),
        );
        if e.applied && e.made() && wanted.contains(&k) {
            parks.insert(k, e);
        }
    }));
    let mut out = Vec::with_capacity(rows.len());
    for (w, schema, r, manual) in rows {
        let k = (
            w.name.clone(),
            RowId::from(&r.id).key(),
            r.started.raw.to_string(),
        );
        let park = parks.get(&k).filter(|e| e.to == manual);
        let age_s = match &r.started.stamp {
            Ok(Some(s)) => age_on_db_clock(*s, &clocks.db)
                .ok()
                .and_then(|a| u64::try_from(a).ok()),
            _ => None,
        };
        let (verdict, mut reason, since) = match park {
            Some(e) if e.actor.is_none() => (
                format!("parked as {}", e.verdict.as_str()),
                e.basis_words(),
                chrono::DateTime::parse_from_rfc3339(&e.time)
                    .ok()
                    .map(|t| t.timestamp()),
            ),
            Some(e) => (
                "parked".to_string(),
                format!("put here by {}", e.actor.as_deref().unwrap_or_default()),
                chrono::DateTime::parse_from_rfc3339(&e.time)
                    .ok()
                    .map(|t| t.timestamp()),
            ),
            None => (
                "parked".to_string(),
                format!(
                    "in '{manual}'; the journal does not say why (parked by hand, by another \
                     configuration, or before the journal)"
                ),
                None,
            ),
        };
        if unparking.iter().any(|u| u.watch == w.name && u.id == r.id) {
            reason.push_str(
                "; its own heartbeat beats again since: the next run puts it back to running",
            );
        }
        // Only where `resolve` itself would act without --force (SPEC §13): the row's
        // evidence now, as `resolve` reads it.
        let snapshot = Snapshot::read(w);
        let ev = gather(w, &r, &Scene::of_one_row(clocks, host, &snapshot));
        let sql = crate::resolve::would_refuse(w, host, &ev)
            .is_none()
            .then(|| by_hand(store, w, &schema, &r, &manual));
        out.push(Need {
            watch: w.name.clone(),
            id: r.id.clone(),
            status: manual.clone(),
            age_s,
            verdict,
            reason,
            since,
            since_what: "parked",
            resolve: person::resolve_command(w, &r.id, true, false),
            sql,
        });
    }
    Ok(out)
}

/// `show [WATCH]`: every row that needs a person.
fn listing(cfg: &Config, format: Format, out: &mut dyn Write) -> Result<u8> {
    if cfg.watches.is_empty() {
        let _ = match format {
            Format::Text => writeln!(out, "no watch is configured: nothing to show"),
            Format::Json => writeln!(out, "{}", json!({"summary": true, "rows": 0, "watches": 0})),
        };
        return Ok(exit::OK);
    }
    let Some(db) = cfg.database.as_ref() else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    let collected = dry_check(cfg, Keep::NeedingAPerson)?;
    let mut warnings = collected.warnings.clone();
    let mut store = store::open(db, true)?;
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let now = epoch(SystemTime::now());
    let host = Host::current().known_as(&cfg.run.host_names);
    let mut needs: Vec<Need> = Vec::new();
    for w in &cfg.watches {
        let schema = store.schema(w)?;
        for r in collected
            .rows
            .iter()
            .filter(|r| r.watch == w.name && r.attention() && !r.applied)
        {
            let (since, what) = since(r, now);
            let row = store.row_by_id(w, &r.id)?;
            needs.push(Need {
                watch: r.watch.clone(),
                id: r.id.clone(),
                status: w.running_value.clone(),
                age_s: r.evidence.total_age.as_ref().ok().copied(),
                verdict: r.decision.verdict.as_str().to_string(),
                reason: running_reason(r),
                since,
                since_what: what,
                // Still running now (a park the next run makes is not made yet).
                resolve: person::resolve_command(
                    w,
                    &r.id,
                    false,
                    r.decision.verdict == Verdict::Remote,
                ),
                // Only where `resolve` itself would act without --force (SPEC §13).
                sql: row
                    .filter(|_| crate::resolve::would_refuse(w, &host, &r.evidence).is_none())
                    .map(|s| by_hand(store.as_ref(), w, &schema, &s.row, &w.running_value)),
            });
        }
    }
    needs.extend(parked_needs(
        cfg,
        store.as_mut(),
        &clocks,
        &host,
        &collected.unparked,
        &mut warnings,
    )?);
    // In the configuration's order of watches, running rows before parked ones.
    let order = |n: &Need| cfg.watches.iter().position(|w| w.name == n.watch);
    needs.sort_by_key(|n| (order(n), n.status != n.watch_running(cfg)));
    match format {
        Format::Text => {
            for n in &needs {
                let _ = writeln!(out, "{}", printable(&n.line(now)));
            }
            if needs.is_empty() {
                let _ = writeln!(
                    out,
                    "nothing needs a person ({} watch{})",
                    cfg.watches.len(),
                    if cfg.watches.len() == 1 { "" } else { "es" }
                );
            }
            warn_all(&warnings);
        }
        Format::Json => {
            for n in &needs {
                let _ = writeln!(out, "{}", n.to_json());
            }
            let _ = writeln!(
                out,
                "{}",
                json!({
                    "summary": true,
                    "rows": needs.len(),
                    "watches": cfg.watches.len(),
                    "warnings": warnings,
                })
            );
        }
    }
    Ok(if needs.is_empty() {
        exit::OK
    } else {
        exit::ATTENTION
    })
}

impl Need {
    /// The running value of the need's watch (to sort running rows first).
    fn watch_running<'c>(&self, cfg: &'c Config) -> &'c str {
        cfg.watches
            .iter()
            .find(|w| w.name == self.watch)
            .map_or("", |w| w.running_value.as_str())
    }
}

// ---------------------------------------------------------------------------------------
// `show WATCH ID`

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
        Err(NotOpened::NotRegular) => return Err("not a regular file".into()),
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
struct RowRecord {
    w: Watch,
    id: SqlValue,
    status: String,
    parked: bool,
    running: bool,
    columns: Vec<(String, SqlValue)>,
    row: RunningRow,
    evidence: Evidence,
    decision: Decision,
    /// What the next real run does, in words.
    next: String,
    /// The dry run's report of the row, when it is running.
    report: Option<RowReport>,
    process: Option<Process>,
    heartbeat_file: Option<String>,
    lock_file: Option<String>,
    history: Vec<Event>,
    /// Entries before the ones shown.
    earlier: usize,
    report_file: Option<(String, std::result::Result<Value, String>)>,
    resolve: Option<String>,
    sql: Option<String>,
}

/// `show WATCH ID`.
fn one_row(
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
    warnings.extend(read_journal(cfg, &mut |e| {
        if e.watch == w.name && e.id.key() == key {
            history.push_back(Event::of(&e));
            if history.len() > HISTORY_SHOWN {
                history.pop_front();
                earlier += 1;
            }
        }
    }));
    let report_file = w.report_file.as_ref().map(|t| match t.render(&id_text) {
        Ok(p) => (p.display().to_string(), execution_record(&p)),
        Err(why) => (t.as_str().to_string(), Err(why)),
    });
    let resolve = (parked || running)
        .then(|| person::resolve_command(w, &id, parked, decision.verdict == Verdict::Remote));
    // Only where `resolve` itself would act without --force (SPEC §13).
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
        report_file,
        resolve,
        sql,
    };
    match format {
        Format::Text => {
            for l in record_text(&rec) {
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

fn ago(now: i64, t: i64) -> String {
    human(u64::try_from(now.saturating_sub(t)).unwrap_or(0))
}

/// The record as lines of text.
fn record_text(r: &RowRecord) -> Vec<String> {
    let now = epoch(SystemTime::now());
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
fn record_json(r: &RowRecord) -> Value {
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
