//! `selfheal check`: read each watch's running rows, gather the evidence, decide, and apply
//! one compare-and-set per row that a verdict condemns.
//!
//! Order of work, so that bad input never causes a partial write: the configuration is
//! already validated; then the run lock (not for dry runs), the database clock, every
//! watch's schema; only then rows are judged and written. Just before each write the file
//! evidence (heartbeat mtime, lock, owner pid) is read again, and a row whose evidence
//! changed is left alone. The job's lock file is never deleted here, except by
//! `release_lock = "if_free"` after the row's compare-and-set applied (see [`crate::release`]).

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use serde_json::json;

use crate::clock::{Clocks, clock_skew, now_rfc3339, skew_text};
use crate::config::{Config, ReleaseLock, Watch};
use crate::decide::{self, Action, ActionPolicy, Decision, Evidence, Hold, Plan, Verdict};
use crate::error::{Error, Result, exit};
use crate::evidence::{gather, row_message, thresholds};
use crate::host::Host;
use crate::journal::{IntentsHeader, Journal, JournalEntry, Pending, RowId, RunId, Writer};
use crate::message::cut;
use crate::probe::LockTable;
use crate::release::{self, Release};
use crate::report::{Reporter, RowReport, Summary, WatchInfo, WatchRun, summary_json};
use crate::store::{self, CasOutcome, Change, RunningRow, Schema, Store};

/// How a check runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Decide everything, write nothing (no rows, no journal, no lock, no advisory lock).
    pub dry_run: bool,
    /// Act even when the breaker trips or the clocks disagree.
    pub force: bool,
}

/// The exit status for a finished run (SPEC §7).
pub fn exit_code(s: &Summary) -> u8 {
    if s.attention > 0 {
        exit::ATTENTION
    } else if !s.busy_watches.is_empty() {
        exit::BUSY
    } else {
        exit::OK
    }
}

pub fn action_policy(w: &Watch) -> ActionPolicy<'_> {
    ActionPolicy {
        dead_value: &w.dead_value,
        manual_value: w.manual_value.as_deref(),
        retry: w.retry.as_ref().map(|r| (r.value.as_str(), r.max_attempts)),
        overtime: w.overtime,
    }
}

/// The plan for one row under the watch's hold, if any.
fn plan_row(w: &Watch, d: &Decision, row: &RunningRow, hold: Option<Hold>) -> Plan {
    let p = decide::plan(d, row.attempts, &action_policy(w));
    match hold {
        Some(h) => decide::hold(p, d, h),
        None => p,
    }
}

/// True when a real run removes the row's legacy lock file after marking it: only for
/// `release_lock = "if_free"`, only for a dead worker (never `hung` or `overtime`: that
/// worker may still run), only when the row is written.
pub fn plans_release(w: &Watch, d: &Decision, p: &Plan) -> bool {
    w.release_lock == ReleaseLock::IfFree && d.verdict == Verdict::Dead && p.writes()
}

/// One running row, judged.
#[derive(Clone)]
struct Judged {
    row: RunningRow,
    evidence: Evidence,
    decision: Decision,
    plan: Plan,
}

/// The report of a judged row, before any write.
fn row_report(w: &Watch, schema: &Schema, j: Judged) -> RowReport {
    let t = thresholds(w);
    let reason = row_message(&j.decision, &j.evidence, t);
    let release_planned = plans_release(w, &j.decision, &j.plan);
    let lock_file = release_planned
        .then_some(w.lock_file.as_ref())
        .flatten()
        .and_then(|t| t.render(&j.row.id.to_string()).ok())
        .map(|p| p.display().to_string());
    RowReport {
        watch: w.name.clone(),
        id: j.row.id,
        evidence: j.evidence,
        thresholds: t,
        decision: j.decision,
        action: j.plan.action,
        applied: false,
        reason: cut(&reason, schema.message_max),
        note: None,
        target: j.plan.target.clone(),
        release_planned,
        lock_release: None,
        lock_file,
        plan: j.plan,
    }
}

/// Runs a check over every watch of `cfg`.
///
/// A real run (not a dry run) holds selfheal's run lock throughout and, still holding it,
/// leaves its reports behind — `state_dir/last-run.json` and, with `run.metrics_file`, the
/// metrics — also after a failure, so that a stale "last success" tells on it. A run that
/// did not get the run lock writes nothing at all; a dry run writes nothing either.
pub fn run(cfg: &Config, opts: &CheckOptions, rep: &mut dyn Reporter) -> Result<Summary> {
    let mut summary = Summary {
        dry_run: opts.dry_run,
        ..Summary::default()
    };
    if cfg.watches.is_empty() {
        rep.finish(&summary);
        return Ok(summary);
    }
    let Some(db) = cfg.database.as_ref() else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    if opts.dry_run {
        run_watches(cfg, db, opts, rep, &mut summary)?;
        rep.finish(&summary);
        return Ok(summary);
    }
    let _run_lock = crate::runlock::acquire(&cfg.run.lock_file)?;
    let started = SystemTime::now();
    let began = Instant::now();
    let result = run_watches(cfg, db, opts, rep, &mut summary);
    let status = match &result {
        Ok(()) => exit_code(&summary),
        Err(e) => e.exit_code(),
    };

    // Failing to write the last-run report is not worth failing a run whose rows were
    // handled and journaled: it is a warning, which also tells the operator, before any row
    // needs it, that the state directory (and so the journal) is unusable.
    let mut body = summary_json(&summary, &summary.warnings);
    if let Some(o) = body.as_object_mut() {
        o.remove("summary");
        o.insert(
            "time".into(),
            json!(
                chrono::DateTime::<chrono::Utc>::from(started)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ),
        );
        o.insert(
            "duration_ms".into(),
            json!(u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX)),
        );
        o.insert("exit_status".into(), json!(status));
        o.insert(
            "error".into(),
            json!(result.as_ref().err().map(Error::full_message)),
        );
        o.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    }
    if let Err(e) = crate::state::write_last_run(&cfg.run.state_dir, &body)
        && result.is_ok()
    {
        let msg = format!(
            "cannot write the last-run report: {}; the journal needs this directory too, \
             so the next change would fail: fix run.state_dir",
            e.full_message()
        );
        summary.warnings.push(msg.clone());
        rep.warning(&msg);
    }

    let metrics = cfg.run.metrics_file.as_ref().map(|path| {
        let run = crate::metrics::Run {
            summary: result.is_ok().then_some(&summary),
            exit_status: status,
            started,
            duration: began.elapsed(),
        };
        crate::metrics::update(path, cfg, &Host::current(), &run)
    });
    result?;
    rep.finish(&summary);
    // An unwritable metrics file fails the run (exit 3), after the rows were handled.
    if let Some(m) = metrics {
        m?;
    }
    Ok(summary)
}

/// Everything after the run lock: connect, read the clocks and every schema, then judge
/// and handle each watch's rows.
fn run_watches(
    cfg: &Config,
    db: &crate::config::Database,
    opts: &CheckOptions,
    rep: &mut dyn Reporter,
    summary: &mut Summary,
) -> Result<()> {
    let mut store = store::open(db, opts.dry_run)?;
    for note in store.notes() {
        summary.warnings.push(note.clone());
        rep.warning(&note);
    }
    let host = Host::current();
    let clocks = Clocks {
        db: store.clock()?,
        tz: db.timezone,
    };
    let skew = clock_skew(&clocks.db, SystemTime::now());
    summary.clock_skew_s = Some(skew);
    if skew.unsigned_abs() > cfg.run.clock_tolerance.as_secs() {
        summary.clock_skew_exceeded = true;
        let msg = format!(
            "{}{}",
            skew_text(skew, cfg.run.clock_tolerance.as_secs()),
            if opts.force {
                "; --force: acting on all evidence anyway"
            } else {
                "; acting only on conclusive evidence (owner pid gone, lock free)"
            }
        );
        summary.warnings.push(msg.clone());
        rep.warning(&msg);
    }
    let run_hold = (summary.clock_skew_exceeded && !opts.force).then_some(Hold::ClockSkew);

    // Every schema first: a missing column in the last watch must not leave the first
    // watch's rows half-handled.
    let mut schemas: HashMap<&str, Schema> = HashMap::new();
    for w in &cfg.watches {
        schemas.insert(&w.name, store.schema(w)?);
    }

    let run = RunId::new(&host);
    let mut writer: Option<Writer> = None;
    if !opts.dry_run && Pending::left_behind(&cfg.run.state_dir) {
        let jw = writer.insert(Writer::open(&cfg.run.state_dir)?);
        for msg in crate::recovery::settle(cfg, store.as_mut(), jw)? {
            summary.warnings.push(msg.clone());
            rep.warning(&msg);
        }
    }
    for w in &cfg.watches {
        let t = thresholds(w);
        let mut info = WatchInfo {
            name: w.name.clone(),
            table: w.table.to_string(),
            stale_after_s: t.stale_after,
            max_age_s: t.max_age,
            skipped: None,
        };
        let mut counts = WatchRun {
            name: w.name.clone(),
            ..WatchRun::default()
        };
        if let Some(h) = &w.host
            && !host.is_me(h)
        {
            info.skipped = Some(format!("it runs on host {h}; this is {}", host.name));
            counts.skipped = info.skipped.clone();
            counts.other_host = true;
            summary.per_watch.push(counts);
            rep.watch(&info);
            continue;
        }
        let watch_t0 = std::time::Instant::now();
        if !opts.dry_run && !store.try_watch_lock(w)? {
            info.skipped =
                Some("another selfheal run (on this or another host) is checking it".into());
            counts.skipped = info.skipped.clone();
            counts.duration = watch_t0.elapsed();
            summary.per_watch.push(counts);
            summary.busy_watches.push(w.name.clone());
            rep.watch(&info);
            continue;
        }
        rep.watch(&info);
        summary.watches_checked += 1;
        let Some(schema) = schemas.remove(w.name.as_str()) else {
            continue;
        };
        // The configuration of the seed incident: a cap below the runs it must let live.
        // Bounded to the latest rows by primary key, so it costs the same on any table.
        match crate::history::recent_max_age_check(store.as_mut(), w, &schema, &clocks) {
            Ok(Some(warn)) => {
                let msg = warn.message();
                summary.warnings.push(msg.clone());
                rep.warning(&msg);
                summary.max_age_too_low.push(warn);
            }
            Ok(None) => {}
            Err(e) => {
                let msg = format!(
                    "watch {}: cannot read recent runtimes for the max_age check: {}",
                    w.name,
                    e.full_message()
                );
                summary.warnings.push(msg.clone());
                rep.warning(&msg);
            }
        }

        // Each row is judged as it comes off the wire; what is kept is its evidence and
        // verdict (the breaker needs every verdict of the watch before any write).
        let host_now = SystemTime::now();
        let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
        let mut rows: Vec<Judged> = Vec::new();
        store.each_running_row(w, &mut |row| {
            let evidence = gather(w, &row, &clocks, &host, host_now, locks.as_ref());
            let decision = decide::decide(&evidence, t);
            let plan = plan_row(w, &decision, &row, None);
            rows.push(Judged {
                row,
                evidence,
                decision,
                plan,
            });
            Ok(())
        })?;

        if let Some(tpl) = &w.heartbeat_file
            && !tpl.has_id()
            && rows.len() > 1
        {
            let msg = format!(
                "watch {}: {} running rows share one heartbeat file ({}): a dead row beside a \
                 live one looks alive; put {{id}} in heartbeat_file",
                w.name,
                rows.len(),
                tpl.as_str()
            );
            summary.warnings.push(msg.clone());
            rep.warning(&msg);
        }
        let deaths = rows
            .iter()
            .filter(|j| decide::heartbeat_only_death(&j.decision, &j.plan))
            .count();
        let mut hold = run_hold;
        if decide::breaker_trips(deaths, rows.len()) {
            let msg = format!(
                "watch {}: breaker: {deaths} of {} running rows would be marked dead on heartbeat \
                 staleness alone{}",
                w.name,
                rows.len(),
                if opts.force {
                    "; --force: marking them anyway"
                } else {
                    "; nothing is marked on heartbeat alone (check clocks, time zones, NFS; --force overrides)"
                }
            );
            summary.warnings.push(msg.clone());
            rep.warning(&msg);
            summary.breaker_tripped.push(w.name.clone());
            counts.breaker_tripped = true;
            if !opts.force {
                hold = hold.or(Some(Hold::Breaker));
            }
        }
        if hold.is_some() {
            for j in &mut rows {
                j.plan = plan_row(w, &j.decision, &j.row, hold);
            }
        }

        // A legacy lock file that several running rows name (no {id} in lock_file) may be
        // a live row's: it is never released on behalf of another row.
        let mut lock_users: HashMap<std::path::PathBuf, usize> = HashMap::new();
        if w.release_lock == ReleaseLock::IfFree
            && let Some(tpl) = &w.lock_file
        {
            for j in &rows {
                if let Ok(p) = tpl.render(&j.row.id.to_string()) {
                    *lock_users.entry(p).or_default() += 1;
                }
            }
        }

        // Reports are made as rows are output; only the rows to write get theirs first.
        let writes: Vec<usize> = (0..rows.len())
            .filter(|&i| !opts.dry_run && rows[i].plan.writes())
            .collect();
        let mut batch: Vec<(RunningRow, RowReport)> = writes
            .iter()
            .map(|&i| (rows[i].row.clone(), row_report(w, &schema, rows[i].clone())))
            .collect();
        let end = if batch.is_empty() {
            BatchEnd::default()
        } else {
            let ctx = WriteCtx {
                w,
                schema: &schema,
                cfg,
                clocks: &clocks,
                host: &host,
                hold,
                run: &run,
                lock_users: &lock_users,
            };
            let all: Vec<usize> = (0..batch.len()).collect();
            match write_batch(&ctx, &mut batch, &all, store.as_mut(), &mut writer) {
                Ok(end) => BatchEnd {
                    stopped_at: end.stopped_at.and_then(|k| writes.get(k).copied()),
                    error: end.error,
                },
                Err(e) => {
                    summary.per_watch.push(counts);
                    return Err(e);
                }
            }
        };

        let mut written = writes
            .into_iter()
            .zip(batch.into_iter().map(|(_, r)| r))
            .peekable();
        for (i, j) in rows.into_iter().enumerate() {
            // The row whose write failed the run, and the rows after it, are not reported.
            if end.stopped_at.is_some_and(|s| i >= s) {
                break;
            }
            let mut report = match written.next_if(|(k, _)| *k == i) {
                Some((_, r)) => r,
                None => row_report(w, &schema, j),
            };
            summary.rows += 1;
            if opts.dry_run {
                if report.plan.writes() {
                    summary.changed += 1;
                }
            } else if !report.plan.writes() {
                report.action = Action::None;
            } else {
                if report.applied {
                    summary.changed += 1;
                }
                if matches!(report.lock_release, Some(Release::Removed(_))) {
                    summary.locks_released += 1;
                }
                if report.action == Action::LostRace {
                    summary.lost_race += 1;
                }
            }
            if report.attention() {
                summary.attention += 1;
            }
            counts.count(&report, opts.dry_run);
            rep.row(&report);
        }
        if let Some(e) = end.error {
            summary.per_watch.push(counts);
            return Err(e);
        }
        counts.duration = watch_t0.elapsed();
        summary.per_watch.push(counts);
    }
    Ok(())
}

/// At most this many compare-and-sets commit together (where the store groups them): one
/// commit, and one sync of the database, for up to this many rows, while the rows (or
/// SQLite's write lock) are held for only a few milliseconds.
const WRITE_GROUP: usize = 100;

/// What a run needs to write a watch's rows.
struct WriteCtx<'a> {
    w: &'a Watch,
    schema: &'a Schema,
    cfg: &'a Config,
    clocks: &'a Clocks,
    host: &'a Host,
    hold: Option<Hold>,
    run: &'a RunId,
    /// How many running rows name each lock file (`release_lock = "if_free"` only).
    lock_users: &'a HashMap<std::path::PathBuf, usize>,
}

/// How a watch's writes ended.
#[derive(Default)]
struct BatchEnd {
    /// The row whose compare-and-set failed with an error that stops the run.
    stopped_at: Option<usize>,
    /// The error to stop the run with, once the rows before it are reported.
    error: Option<Error>,
}

impl BatchEnd {
    fn stopped(at: usize, e: Error) -> BatchEnd {
        BatchEnd {
            stopped_at: Some(at),
            error: Some(e),
        }
    }
}

/// The journal entry of one change.
fn journal_entry(
    ctx: &WriteCtx<'_>,
    row: &RunningRow,
    r: &RowReport,
    change: &str,
) -> JournalEntry {
    JournalEntry {
        change: change.to_string(),
        time: now_rfc3339(),
        host: ctx.host.name.clone(),
        watch: r.watch.clone(),
        table: ctx.w.table.to_string(),
        id: RowId::from(&r.id),
        // What the compare-and-set matched: tells this run of the row from a later run of
        // the same id (stats, false positives, settling a stopped run's intents).
        started: Some(row.started.raw.to_string()),
        attempts: row.attempts,
        from: ctx.w.running_value.clone(),
        to: r.plan.target.clone().unwrap_or_default(),
        verdict: r.decision.verdict,
        basis: r.decision.basis.describe(),
        conclusive: r.decision.conclusive(),
        action: r.action,
        applied: r.applied,
        attention: r.attention(),
        held: r.plan.hold,
        reason: r.reason.clone(),
        note: r.note.clone(),
        target: r.target.clone(),
        stale_after_s: r.thresholds.stale_after,
        max_age_s: r.thresholds.max_age,
        evidence: crate::evidence::render(&r.evidence, r.thresholds).record,
        lock_file: r.lock_file.clone(),
        lock_release: r.lock_release.as_ref().map(|l| l.as_str().to_string()),
        lock_release_detail: r
            .lock_release
            .as_ref()
            .and_then(|l| l.detail())
            .map(str::to_string),
        recovered: false,
    }
}

/// Writes one watch's rows: intents to `pending.jsonl` (on disk), then per row the
/// re-read of its evidence and its compare-and-set, with one journal line per applied
/// change (right after it, or after the commit where the store groups the writes), one
/// flush, and the intents cleared. `Err`: nothing was changed.
fn write_batch(
    ctx: &WriteCtx<'_>,
    rows: &mut [(RunningRow, RowReport)],
    writes: &[usize],
    store: &mut dyn Store,
    writer: &mut Option<Writer>,
) -> Result<BatchEnd> {
    // The journal must be writable before the first change is made.
    let jw = match writer {
        Some(jw) => jw,
        None => writer.insert(Writer::open(&ctx.cfg.run.state_dir)?),
    };
    let intents: Vec<(usize, String)> = writes.iter().map(|&i| (i, ctx.run.change())).collect();
    let header = IntentsHeader {
        run: ctx.run.as_str().to_string(),
        journal_offset: jw.journal.end_offset()?,
        session: store.session(),
        time: now_rfc3339(),
    };
    jw.pending.write(
        &header,
        &mut intents.iter().map(|(i, change)| {
            let (row, report) = &rows[*i];
            JournalEntry {
                applied: true,
                ..journal_entry(ctx, row, report, change)
            }
        }),
    )?;

    let mut end = BatchEnd::default();
    let mut journaled = Ok(());
    let mut k = 0;
    while k < intents.len() && end.error.is_none() && journaled.is_ok() {
        // A group pays for itself from two rows on.
        let grouped = match if intents.len() - k > 1 {
            store.begin_writes()
        } else {
            Ok(false)
        } {
            Ok(g) => g,
            Err(e) => {
                end = BatchEnd::stopped(intents[k].0, e);
                break;
            }
        };
        let first = k;
        let mut busy = false;
        while k < intents.len() && (!grouped || k - first < WRITE_GROUP) {
            let (i, change) = &intents[k];
            let (row, report) = &mut rows[*i];
            match cas_row(ctx, row, report, store) {
                Err(e) => {
                    end = BatchEnd::stopped(*i, e);
                    break;
                }
                // Locked by someone else: never wait inside a group. Commit the group,
                // then this row on its own (where it may wait).
                Ok(false) => {
                    busy = true;
                    break;
                }
                Ok(true) => {}
            }
            k += 1;
            // Each change committed on its own is journaled at once (one write(2),
            // flushed below): a run killed after it leaves the line. A failed journal
            // write stops the writes, so that no further change waits on its intent alone.
            if !grouped && report.applied {
                journaled = after_commit(ctx, &mut jw.journal, row, report, change);
                if journaled.is_err() {
                    break;
                }
            }
        }
        if grouped {
            if let Err(e) = store.commit_writes() {
                // Nothing of the group is applied. Its intents stay: the next run checks.
                for (i, _) in &intents[first..k] {
                    let report = &mut rows[*i].1;
                    if report.applied {
                        report.applied = false;
                        report.action = Action::None;
                        report.note = Some(format!("write failed: {}", e.full_message()));
                    }
                }
                end.stopped_at = end.stopped_at.or(intents.get(k).map(|x| x.0));
                end.error = Some(end.error.unwrap_or(e));
                break;
            }
            // Committed: now release what may be released, and journal the group's changes.
            for (i, change) in &intents[first..k] {
                let (row, report) = &mut rows[*i];
                if !report.applied {
                    continue;
                }
                journaled = after_commit(ctx, &mut jw.journal, row, report, change);
                if journaled.is_err() {
                    break;
                }
            }
        }
        if busy && end.error.is_none() && journaled.is_ok() {
            let (i, change) = &intents[k];
            let (row, report) = &mut rows[*i];
            match cas_row(ctx, row, report, store) {
                Err(e) => {
                    end = BatchEnd::stopped(*i, e);
                }
                Ok(_) => {
                    k += 1;
                    if report.applied {
                        journaled = after_commit(ctx, &mut jw.journal, row, report, change);
                    }
                }
            }
        }
    }
    // Then flush once.
    if journaled.is_ok()
        && let Some(first) = intents.iter().find(|(i, _)| rows[*i].1.applied)
        && let Err(e) = jw.journal.sync()
    {
        let (row, report) = &rows[first.0];
        journaled = Err(journal_error(e, ctx.w, row, report));
    }
    match journaled {
        // A change not journaled: its intent stays, for the next run to settle; stop so
        // that no further change goes unrecorded.
        Err(e) => end.error = Some(end.error.unwrap_or(e)),
        // Every change is journaled; a write that failed the run keeps the intents, since
        // its outcome is unknown.
        Ok(()) if end.error.is_none() => {
            // Harmless if it fails: the next run finds these changes in the journal.
            let _ = jw.pending.clear();
        }
        Ok(()) => {}
    }
    Ok(end)
}

/// A change just committed: releases what may be released (the legacy lock file), then
/// appends its journal line.
fn after_commit(
    ctx: &WriteCtx<'_>,
    journal: &mut Journal,
    row: &RunningRow,
    report: &mut RowReport,
    change: &str,
) -> Result<()> {
    release_after_commit(ctx, row, report);
    journal
        .append(&journal_entry(ctx, row, report, change))
        .map_err(|e| journal_error(e, ctx.w, row, report))
}

fn journal_error(e: Error, w: &Watch, row: &RunningRow, report: &RowReport) -> Error {
    match e {
        Error::Io { path, source, .. } => Error::Journal {
            path,
            row: format!(
                "{} id={} (now '{}')",
                w.name,
                row.id,
                report.plan.target.clone().unwrap_or_default()
            ),
            source,
        },
        other => other,
    }
}

/// Re-reads the row's file evidence, then applies its compare-and-set. `Ok(false)`: in a
/// group of writes, the row is locked by another transaction; nothing was done.
fn cas_row(
    ctx: &WriteCtx<'_>,
    row: &RunningRow,
    report: &mut RowReport,
    store: &mut dyn Store,
) -> Result<bool> {
    let w = ctx.w;
    // Just before the write: did the row beat, or the worker show up, in between?
    let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
    let again = gather(
        w,
        row,
        ctx.clocks,
        ctx.host,
        SystemTime::now(),
        locks.as_ref(),
    );
    let d2 = decide::decide(&again, report.thresholds);
    let p2 = plan_row(w, &d2, row, ctx.hold);
    if (p2.action, &p2.target) != (report.plan.action, &report.plan.target) {
        report.action = Action::None;
        report.note = Some(format!(
            "left alone: the evidence changed before the write (now {}: {})",
            d2.verdict.as_str(),
            d2.basis.describe()
        ));
        return Ok(true);
    }
    let target = report.plan.target.clone().unwrap_or_default();
    let change = Change {
        row,
        new_status: &target,
        message: w.message_column.as_ref().map(|_| report.reason.clone()),
        bump_attempts: report.plan.action == Action::MarkRetry,
    };
    match store.compare_and_set(w, ctx.schema, &change)? {
        CasOutcome::Applied => report.applied = true,
        CasOutcome::LostRace => {
            report.action = Action::LostRace;
            report.note =
                Some("the row moved on between the read and the write; left as it is".into());
        }
        CasOutcome::Failed(why) => {
            report.action = Action::None;
            report.note = Some(format!("write failed: {why}"));
        }
        CasOutcome::Busy => return Ok(false),
    }
    Ok(true)
}

/// Once a row's change is committed (never before: the row must be marked first), removes
/// its legacy lock file where `release_lock = "if_free"` planned it and every condition of
/// [`release`] holds; the outcome goes into the row's report and journal entry.
fn release_after_commit(ctx: &WriteCtx<'_>, row: &RunningRow, report: &mut RowReport) {
    if report.applied && report.release_planned {
        report.lock_release = Some(release_lock(ctx.w, row, ctx.host, ctx.lock_users));
    }
}

/// Removes a marked row's legacy lock file when every condition of [`release`] holds.
fn release_lock(
    w: &Watch,
    row: &RunningRow,
    host: &Host,
    lock_users: &HashMap<std::path::PathBuf, usize>,
) -> Release {
    let Some(tpl) = &w.lock_file else {
        return Release::Absent;
    };
    let path = match tpl.render(&row.id.to_string()) {
        Ok(p) => p,
        Err(why) => return Release::Failed(format!("lock_file: {why}")),
    };
    let users = lock_users.get(&path).copied().unwrap_or(1);
    if users > 1 {
        return Release::Kept(format!(
            "it is named by {users} running rows; it may be another row's lock"
        ));
    }
    release::release_if_free(&path, host)
}
