//! One watch's running rows in, judged rows out: each row's evidence gathered
//! ([`crate::evidence::gather`]) and judged ([`crate::decide`]) as it comes off the wire —
//! a lock `/proc/locks` shows free confirmed by a try-lock first when the row would be
//! written on the strength of it ([`judge`]), an inferred verdict counted across runs
//! ([`crate::confirmations`]) and held until confirmed — then what concerns the watch as a
//! whole: the shared-heartbeat warning, the breaker, a hold on everything not conclusive.
//! For `release_lock = "if_free"`, the identity of each row's lock file as the row was
//! judged ([`crate::release::observe`], noted before the probes look): only that inode may
//! be released later. Nothing is written here.
//!
//! I/O: streams the watch's running rows from the store; reads `/proc/locks` once when the
//! watch names a lock file; the probes of [`crate::evidence::gather`], and the try-lock of
//! [`crate::evidence::confirm_lock`] for a row about to be written on a free lock.

use std::time::SystemTime;

use crate::clock::{Clocks, epoch};
use crate::config::{ReleaseLock, Watch};
use crate::confirmations::Tally;
use crate::decide::{self, ActionPolicy, Confirmation, Decision, Evidence, Hold, Plan, Verdict};
use crate::error::Result;
use crate::evidence::{confirm_lock, gather, owner_host, row_message, thresholds};
use crate::host::Host;
use crate::journal::RowId;
use crate::message::cut;
use crate::probe::LockTable;
use crate::release::Seen;
use crate::report::RowReport;
use crate::store::{RunningRow, Schema, Store};

fn action_policy(w: &Watch) -> ActionPolicy<'_> {
    ActionPolicy {
        dead_value: &w.dead_value,
        manual_value: w.manual_value.as_deref(),
        retry: w.retry.as_ref().map(|r| (r.value.as_str(), r.max_attempts)),
        overtime: w.overtime,
    }
}

/// The plan for one row: held while its inferred verdict is not confirmed, then under
/// the watch's hold, if any.
pub(super) fn plan_row(
    w: &Watch,
    d: &Decision,
    row: &RunningRow,
    confirmation: Option<Confirmation>,
    hold: Option<Hold>,
) -> Plan {
    let p = decide::plan(d, row.attempts, &action_policy(w));
    let p = decide::confirm(p, d, confirmation);
    match hold {
        Some(h) => decide::hold(p, d, h),
        None => p,
    }
}

/// A row's evidence and verdict. A lock `/proc/locks` shows free proves nothing yet (it
/// lists the holders of this pid namespace only, and none over NFS): it is tried — a
/// non-blocking try-lock, released at once — when, and only when, the row would be written
/// on the strength of it, so that jobs in normal operation are never disturbed.
pub(super) fn judge(w: &Watch, row: &RunningRow, evidence: Evidence) -> (Evidence, Decision) {
    let t = thresholds(w);
    let decision = decide::decide(&evidence, t);
    if let Some(hypothesis) = decide::as_if_confirmed(&evidence) {
        let d = decide::decide(&hypothesis, t);
        if decide::plan(&d, row.attempts, &action_policy(w)).writes() {
            let evidence = confirm_lock(w, row, evidence);
            let decision = decide::decide(&evidence, t);
            return (evidence, decision);
        }
    }
    (evidence, decision)
}

/// The confirmation a row's verdict has on a watch that counts none this run (no tally):
/// with `confirm = 1` every inferred verdict is confirmed at once.
fn uncounted(w: &Watch, d: &Decision) -> Option<Confirmation> {
    d.inferred().then_some(Confirmation {
        count: 1,
        confirm: w.confirm,
    })
}

/// True when a real run removes the row's legacy lock file after marking it: only for
/// `release_lock = "if_free"`, only for a dead worker (never `hung` or `overtime`: that
/// worker may still run), only when the row is written.
fn plans_release(w: &Watch, d: &Decision, p: &Plan) -> bool {
    w.release_lock == ReleaseLock::IfFree && d.verdict == Verdict::Dead && p.writes()
}

/// One running row, judged.
#[derive(Clone)]
pub(super) struct Judged {
    pub row: RunningRow,
    /// The host the row belongs to.
    pub owner_host: Option<String>,
    pub evidence: Evidence,
    pub decision: Decision,
    /// How far its inferred verdict is confirmed (`None`: not inferred).
    pub confirmation: Option<Confirmation>,
    pub plan: Plan,
    /// The legacy lock file as the row was judged (`None`: no release is planned).
    pub lock_seen: Option<Seen>,
}

/// A watch's rows, judged, and what the watch as a whole came to.
pub(super) struct Swept {
    pub rows: Vec<Judged>,
    /// What holds back every row not proven dead: the run's (clock skew) or the breaker.
    pub hold: Option<Hold>,
    pub breaker_tripped: bool,
}

/// What a sweep needs besides the watch and the store.
pub(super) struct SweepCtx<'a> {
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// The run's hold (clock skew), if any.
    pub run_hold: Option<Hold>,
    pub force: bool,
}

/// Judges every running row of `w`, counting inferred verdicts in `tally` (the run's
/// confirmation counts; `None` when no watch of the run needs them); warnings go to `warn`,
/// with their kind (`shared_heartbeat_file`, `breaker`): the cron text shows each once per
/// `remind_every`.
pub(super) fn sweep(
    w: &Watch,
    store: &mut dyn Store,
    ctx: &SweepCtx<'_>,
    tally: Option<&mut Tally>,
    warn: &mut dyn FnMut(&'static str, String),
) -> Result<Swept> {
    let mut rows = judge_rows(w, store, ctx, tally)?;
    // Another host's rows are none of this host's files (and never written here).
    let local = rows
        .iter()
        .filter(|j| j.decision.verdict != Verdict::Remote)
        .count();
    if let Some(tpl) = &w.heartbeat_file
        && !tpl.has_id()
        && local > 1
    {
        warn(
            "shared_heartbeat_file",
            format!(
                "watch {}: {local} running rows share one heartbeat file ({}): a dead row \
                 beside a live one looks alive; put {{id}} in heartbeat_file",
                w.name,
                tpl.as_str()
            ),
        );
    }
    let breaker_tripped = breaker(w, &rows, local, ctx.force, warn);
    let hold = match ctx.run_hold {
        None if breaker_tripped && !ctx.force => Some(Hold::Breaker),
        h => h,
    };
    if hold.is_some() {
        for j in &mut rows {
            j.plan = plan_row(w, &j.decision, &j.row, j.confirmation, hold);
        }
    }
    Ok(Swept {
        rows,
        hold,
        breaker_tripped,
    })
}

/// Each row is judged as it comes off the wire; what is kept is its evidence and verdict
/// (the breaker needs every verdict of the watch before any write).
fn judge_rows(
    w: &Watch,
    store: &mut dyn Store,
    ctx: &SweepCtx<'_>,
    mut tally: Option<&mut Tally>,
) -> Result<Vec<Judged>> {
    let host_now = SystemTime::now();
    let now = epoch(host_now);
    let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
    let mut rows: Vec<Judged> = Vec::new();
    if let Some(t) = tally.as_deref_mut() {
        t.checked(w);
    }
    store.each_running_row(w, &mut |row| {
        // Before the probes look: a file that appears after this is never the one judged.
        let seen = observed_lock(w, &row);
        let gathered = gather(w, &row, ctx.clocks, ctx.host, host_now, locks.as_ref());
        let (evidence, decision) = judge(w, &row, gathered);
        let confirmation = match tally.as_deref_mut() {
            Some(t) => {
                let id = RowId::from(&row.id).key();
                t.count(w, &id, &row.started.raw.to_string(), &decision, now)
            }
            None => uncounted(w, &decision),
        };
        let plan = plan_row(w, &decision, &row, confirmation, None);
        // Only a dead row's file is ever released (and a file the probe found absent is
        // absent, whatever was seen a moment before).
        let lock_seen = seen
            .filter(|_| decision.verdict == Verdict::Dead)
            .map(|s| match evidence.lock {
                decide::Lock::Absent => Seen::Absent,
                _ => s,
            });
        rows.push(Judged {
            owner_host: owner_host(&row, &evidence, ctx.host),
            row,
            evidence,
            decision,
            confirmation,
            plan,
            lock_seen,
        });
        Ok(())
    })?;
    Ok(rows)
}

/// The breaker of SPEC §6, over the `local` rows this host judges (another host's rows
/// are not this host's to count): true when it trips (with its warning said).
fn breaker(
    w: &Watch,
    rows: &[Judged],
    local: usize,
    force: bool,
    warn: &mut dyn FnMut(&'static str, String),
) -> bool {
    let deaths = rows
        .iter()
        .filter(|j| decide::heartbeat_only_death(&j.decision, &j.plan))
        .count();
    if !decide::breaker_trips(deaths, local) {
        return false;
    }
    warn(
        "breaker",
        format!(
            "watch {}: breaker: {deaths} of {local} running rows would be marked dead on \
             heartbeat staleness alone{}",
            w.name,
            if force {
                "; --force: marking them anyway"
            } else {
                "; nothing is marked on heartbeat alone (check clocks, time zones, NFS; --force overrides)"
            }
        ),
    );
    true
}

/// The row's legacy lock file as it is now, for `release_lock = "if_free"` only.
fn observed_lock(w: &Watch, row: &RunningRow) -> Option<Seen> {
    if w.release_lock != ReleaseLock::IfFree {
        return None;
    }
    let tpl = w.lock_file.as_ref()?;
    Some(match tpl.render(&row.id.to_string()) {
        Ok(p) => crate::release::observe(&p),
        Err(why) => Seen::Unreachable(format!("lock_file: {why}")),
    })
}

/// The report of a judged row on `host`, before any write.
pub(super) fn row_report(w: &Watch, schema: &Schema, host: &Host, j: Judged) -> RowReport {
    let t = thresholds(w);
    let reason = row_message(&j.decision, &j.evidence, t);
    let release_planned = plans_release(w, &j.decision, &j.plan);
    // The file the lock probe looked at, whether or not it is to be released (none for
    // another host's row: its lock is that host's, never probed here).
    // What a person runs for a row that needs one (SPEC §13).
    let resolve = j.plan.attention.then(|| {
        crate::person::resolve_command(
            w,
            &j.row.id,
            j.plan.action == decide::Action::MarkManual,
            j.decision.verdict == Verdict::Remote,
        )
    });
    let lock_file = w
        .lock_file
        .as_ref()
        .filter(|_| j.evidence.lock != decide::Lock::NotConfigured)
        .and_then(|t| t.render(&j.row.id.to_string()).ok())
        .map(|p| p.display().to_string());
    RowReport {
        watch: w.name.clone(),
        id: j.row.id,
        host: host.name.clone(),
        owner_host: j.owner_host,
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
        confirmation: j.confirmation,
        resolve,
        plan: j.plan,
        already_told: false,
    }
}
