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
use std::time::SystemTime;

use serde_json::json;

use crate::clock::{DbClock, age_on_db_clock, plausible_age};
use crate::config::{Config, ReleaseLock, Watch};
use crate::decide::{
    self, Action, ActionPolicy, Decision, Evidence, Heartbeat, Hold, Lock, Owner, Plan, Thresholds,
    Verdict,
};
use crate::error::{Error, Result, exit};
use crate::journal::Journal;
use crate::probe::{self, Host, LockTable};
use crate::release::{self, Release};
use crate::report::{Reporter, RowReport, Summary, WatchInfo, cut, message, row_json};
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

pub fn thresholds(w: &Watch) -> Thresholds {
    Thresholds {
        stale_after: w.stale_after.as_secs(),
        max_age: w.max_age.as_secs(),
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

/// The clocks a run measures against, read once.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    pub db: DbClock,
    pub tz: Option<chrono_tz::Tz>,
}

/// Seconds since the epoch of a host time (negative before 1970).
fn epoch(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// Gathers the evidence for one row. `locks` is a snapshot of `/proc/locks` (or `None`
/// for the try-lock fallback); `host_now` is the host clock for file mtimes.
pub fn gather(
    w: &Watch,
    row: &RunningRow,
    clocks: &Clocks,
    host: &Host,
    host_now: SystemTime,
    locks: Option<&LockTable>,
) -> Evidence {
    let total_age = match &row.started.stamp {
        Err(e) => Err(format!("{} = {}: {e}", w.started_column, row.started.raw)),
        Ok(None) => Err(format!("{} is NULL", w.started_column)),
        Ok(Some(s)) => age_on_db_clock(*s, &clocks.db, clocks.tz)
            .and_then(|a| plausible_age(a, &format!("{} ({})", w.started_column, row.started.raw))),
    };
    let id = row.id.to_string();
    let from_file = w.heartbeat_file.as_ref().map(|t| match t.render(&id) {
        Ok(p) => probe::file_heartbeat(&p, host_now),
        Err(why) => Heartbeat::Unreadable(format!("heartbeat_file: {why}")),
    });
    let from_column = row.heartbeat.as_ref().map(|tv| match &tv.stamp {
        Ok(None) => Heartbeat::Missing,
        Ok(Some(s)) => match age_on_db_clock(*s, &clocks.db, clocks.tz)
            .and_then(|a| plausible_age(a, &format!("heartbeat column ({})", tv.raw)))
        {
            Ok(a) => Heartbeat::Age(a),
            Err(why) => Heartbeat::Unreadable(why),
        },
        Err(why) => Heartbeat::Unreadable(format!("heartbeat column: {why}")),
    });
    let heartbeat = match (from_file, from_column) {
        (Some(a), Some(b)) => probe::heartbeat::combine(a, b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => Heartbeat::Missing,
    };
    let lock = match &w.lock_file {
        None => Lock::NotConfigured,
        Some(t) => match t.render(&id) {
            // A legacy existence lock is never kernel-locked: "free" is its normal state.
            Ok(p) => match probe::probe_lock(&p, locks) {
                Lock::Free if w.release_lock == ReleaseLock::IfFree => Lock::Present,
                l => l,
            },
            Err(why) => Lock::Unreadable(format!("lock_file: {why}")),
        },
    };
    let owner = match &w.owner_column {
        None => Owner::NotConfigured,
        Some(_) => {
            // The row's start on the host timeline: host now minus the row's age, so a
            // skewed database clock does not make a worker look younger than its row.
            let started = epoch(host_now) - total_age.as_ref().map_or(0, |a| *a as i64);
            probe::probe_owner(host, row.owner.as_deref(), started)
        }
    };
    Evidence {
        total_age,
        heartbeat,
        lock,
        owner,
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

struct Judged {
    row: RunningRow,
    evidence: Evidence,
    decision: Decision,
    plan: Plan,
}

/// Runs a check over every watch of `cfg`.
pub fn run(cfg: &Config, opts: &CheckOptions, rep: &mut dyn Reporter) -> Result<Summary> {
    let mut summary = Summary {
        dry_run: opts.dry_run,
        ..Summary::default()
    };
    if cfg.watches.is_empty() {
        rep.finish(&summary);
        return Ok(summary);
    }
    let Some(db) = &cfg.database else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    let _run_lock = if opts.dry_run {
        None
    } else {
        Some(crate::runlock::acquire(&cfg.run.lock_file)?)
    };
    let mut store = store::open(db, opts.dry_run)?;
    let host = Host::current();
    let clocks = Clocks {
        db: store.clock()?,
        tz: db.timezone,
    };
    let skew = clocks.db.now_epoch - epoch(SystemTime::now());
    summary.clock_skew_s = Some(skew);
    if skew.unsigned_abs() > cfg.run.clock_tolerance.as_secs() {
        summary.clock_skew_exceeded = true;
        let msg = format!(
            "the database clock is {}s {} the host clock (tolerance {}s){}",
            skew.abs(),
            if skew > 0 { "ahead of" } else { "behind" },
            cfg.run.clock_tolerance.as_secs(),
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

    let mut journal: Option<Journal> = None;
    for w in &cfg.watches {
        let t = thresholds(w);
        let mut info = WatchInfo {
            name: w.name.clone(),
            table: w.table.to_string(),
            stale_after_s: t.stale_after,
            max_age_s: t.max_age,
            skipped: None,
        };
        if let Some(h) = &w.host
            && !host.is_me(h)
        {
            info.skipped = Some(format!("it runs on host {h}; this is {}", host.name));
            rep.watch(&info);
            continue;
        }
        if !opts.dry_run && !store.try_watch_lock(w)? {
            info.skipped =
                Some("another selfheal run (on this or another host) is checking it".into());
            summary.busy_watches.push(w.name.clone());
            rep.watch(&info);
            continue;
        }
        rep.watch(&info);
        summary.watches_checked += 1;
        let Some(schema) = schemas.remove(w.name.as_str()) else {
            continue;
        };

        let rows = store.running_rows(w)?;
        let host_now = SystemTime::now();
        let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
        let mut judged: Vec<Judged> = rows
            .into_iter()
            .map(|row| {
                let evidence = gather(w, &row, &clocks, &host, host_now, locks.as_ref());
                let decision = decide::decide(&evidence, t);
                let plan = plan_row(w, &decision, &row, None);
                Judged {
                    row,
                    evidence,
                    decision,
                    plan,
                }
            })
            .collect();

        if let Some(tpl) = &w.heartbeat_file
            && !tpl.has_id()
            && judged.len() > 1
        {
            let msg = format!(
                "watch {}: {} running rows share one heartbeat file ({}): a dead row beside a \
                 live one looks alive; put {{id}} in heartbeat_file",
                w.name,
                judged.len(),
                tpl.as_str()
            );
            summary.warnings.push(msg.clone());
            rep.warning(&msg);
        }
        let deaths = judged
            .iter()
            .filter(|j| decide::heartbeat_only_death(&j.decision, &j.plan))
            .count();
        let mut hold = run_hold;
        if decide::breaker_trips(deaths, judged.len()) {
            let msg = format!(
                "watch {}: breaker: {deaths} of {} running rows would be marked dead on heartbeat \
                 staleness alone{}",
                w.name,
                judged.len(),
                if opts.force {
                    "; --force: marking them anyway"
                } else {
                    "; nothing is marked on heartbeat alone (check clocks, time zones, NFS; --force overrides)"
                }
            );
            summary.warnings.push(msg.clone());
            rep.warning(&msg);
            summary.breaker_tripped.push(w.name.clone());
            if !opts.force {
                hold = hold.or(Some(Hold::Breaker));
            }
        }
        if hold.is_some() {
            for j in &mut judged {
                j.plan = plan_row(w, &j.decision, &j.row, hold);
            }
        }

        // A legacy lock file that several running rows name (no {id} in lock_file) may be
        // a live row's: it is never released on behalf of another row.
        let mut lock_users: HashMap<std::path::PathBuf, usize> = HashMap::new();
        if w.release_lock == ReleaseLock::IfFree
            && let Some(tpl) = &w.lock_file
        {
            for j in &judged {
                if let Ok(p) = tpl.render(&j.row.id.to_string()) {
                    *lock_users.entry(p).or_default() += 1;
                }
            }
        }

        for j in judged {
            let reason = message(&j.decision, &j.evidence, t);
            let release_planned = plans_release(w, &j.decision, &j.plan);
            let mut report = RowReport {
                watch: w.name.clone(),
                id: j.row.id.clone(),
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
                lock_file: release_planned
                    .then_some(w.lock_file.as_ref())
                    .flatten()
                    .and_then(|t| t.render(&j.row.id.to_string()).ok())
                    .map(|p| p.display().to_string()),
                plan: j.plan,
            };
            summary.rows += 1;
            if opts.dry_run || !report.plan.writes() {
                if !opts.dry_run {
                    report.action = Action::None;
                } else if report.plan.writes() {
                    summary.changed += 1;
                }
            } else {
                apply(
                    w,
                    &schema,
                    &j.row,
                    &mut report,
                    store.as_mut(),
                    &mut journal,
                    cfg,
                    &clocks,
                    &host,
                    hold,
                    &lock_users,
                )?;
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
            rep.row(&report);
        }
    }
    rep.finish(&summary);
    Ok(summary)
}

/// Re-reads the file evidence, then applies the row's compare-and-set and journals it.
#[allow(clippy::too_many_arguments)]
fn apply(
    w: &Watch,
    schema: &Schema,
    row: &RunningRow,
    report: &mut RowReport,
    store: &mut dyn Store,
    journal: &mut Option<Journal>,
    cfg: &Config,
    clocks: &Clocks,
    host: &Host,
    hold: Option<Hold>,
    lock_users: &HashMap<std::path::PathBuf, usize>,
) -> Result<()> {
    // Just before the write: did the row beat, or the worker show up, in between?
    let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
    let again = gather(w, row, clocks, host, SystemTime::now(), locks.as_ref());
    let d2 = decide::decide(&again, report.thresholds);
    let p2 = plan_row(w, &d2, row, hold);
    if (p2.action, &p2.target) != (report.plan.action, &report.plan.target) {
        report.action = Action::None;
        report.note = Some(format!(
            "left alone: the evidence changed before the write (now {}: {})",
            d2.verdict.as_str(),
            d2.basis.describe()
        ));
        return Ok(());
    }
    // The journal must be writable before the first change is made.
    if journal.is_none() {
        *journal = Some(Journal::open(&cfg.run.state_dir)?);
    }
    let target = report.plan.target.clone().unwrap_or_default();
    let change = Change {
        row,
        new_status: &target,
        message: w.message_column.as_ref().map(|_| report.reason.clone()),
        bump_attempts: report.plan.action == Action::MarkRetry,
    };
    match store.compare_and_set(w, schema, &change)? {
        CasOutcome::Applied => {
            report.applied = true;
            // Only now, with the row marked, may a legacy lock file go.
            if report.release_planned {
                report.lock_release = Some(release_lock(w, row, host, lock_users));
            }
            if let Some(j) = journal.as_mut() {
                let mut entry = row_json(report);
                if let Some(obj) = entry.as_object_mut() {
                    obj.insert("time".into(), json!(chrono::Utc::now().to_rfc3339()));
                    obj.insert("table".into(), json!(w.table.to_string()));
                    obj.insert("from".into(), json!(w.running_value));
                    obj.insert("to".into(), json!(target));
                }
                j.append(&entry).map_err(|e| match e {
                    Error::Io { path, source, .. } => Error::Journal {
                        path,
                        row: format!("{} id={} (now '{target}')", w.name, row.id),
                        source,
                    },
                    other => other,
                })?;
            }
        }
        CasOutcome::LostRace => {
            report.action = Action::LostRace;
            report.note =
                Some("the row moved on between the read and the write; left as it is".into());
        }
        CasOutcome::Failed(why) => {
            report.action = Action::None;
            report.note = Some(format!("write failed: {why}"));
        }
    }
    Ok(())
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
