//! One watch's running rows in, judged rows out: each row's evidence gathered
//! ([`crate::evidence::gather`]) and judged ([`crate::decide`]) — a lock `/proc/locks` shows
//! free confirmed by a try-lock first when the row would be written on the strength of it
//! ([`judge`]), a contradiction between a death signal and the row's own fresh heartbeat
//! timed across runs, an inferred verdict counted across runs ([`crate::confirmations`]) and
//! held until confirmed — then what concerns the watch as a whole, decided over every
//! running row before any is written: the shared-heartbeat and untrusted-lock warnings,
//! the breaker, the no-heartbeat hold, the mass-overtime hold, and the run's hold (clock
//! skew). For `release_lock = "if_free"`, each dead row's lock file is opened as the row is
//! judged ([`crate::release::observe`], before the probes look) and held open: only that
//! inode may be released later. Nothing is written here.
//!
//! I/O: reads the watch's running rows from the store; reads `/proc/locks` once when the
//! watch names a lock file; the probes of [`crate::evidence::gather`], and the try-lock of
//! [`crate::evidence::confirm_lock`] for a row about to be written on a free lock.

use std::time::SystemTime;

use crate::clock::{Clocks, epoch};
use crate::config::{ReleaseLock, Watch};
use crate::confirmations::Tally;
use crate::decide::{self, ActionPolicy, Confirmation, Decision, Evidence, Hold, Plan, Verdict};
use crate::error::Result;
use crate::evidence::{
    Scene, confirm_lock, gather, is_remote, owner_host, row_message, thresholds,
};
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

/// The plan for one row: held while its inferred verdict is not confirmed, held quietly
/// while a death signal meets its own fresh heartbeat, then under the first of the
/// watch's `holds` that is about it ([`Hold::applies_to`]).
pub(super) fn plan_row(
    w: &Watch,
    d: &Decision,
    row: &RunningRow,
    confirmation: Option<Confirmation>,
    holds: &[Hold],
) -> Plan {
    let p = decide::plan(d, row.attempts, &action_policy(w));
    let p = decide::confirm(p, d, confirmation);
    let p = decide::hold_contradiction(p, d);
    match holds.iter().find(|h| h.applies_to(d)) {
        Some(h) => decide::hold(p, d, *h),
        None => p,
    }
}

/// A row's evidence and verdict. A lock `/proc/locks` shows free proves nothing yet (it
/// lists the holders of this pid namespace only, and none over NFS): it is tried — a
/// non-blocking try-lock, released at once — when, and only when, the row would be written
/// on the strength of it, so that jobs in normal operation are never disturbed (a row whose
/// own fresh heartbeat would contradict a free lock is not written, so its lock is not
/// tried).
pub(super) fn judge(
    w: &Watch,
    row: &RunningRow,
    host: &Host,
    evidence: Evidence,
) -> (Evidence, Decision) {
    let t = thresholds(w);
    let decision = decide::decide(&evidence, t);
    if let Some(hypothesis) = decide::as_if_confirmed(&evidence) {
        let d = decide::decide(&hypothesis, t);
        let p = decide::plan(&d, row.attempts, &action_policy(w));
        if decide::hold_contradiction(p, &d).writes() {
            let evidence = confirm_lock(w, row, host, evidence);
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
}

/// A watch's rows, judged, and what the watch as a whole came to.
pub(super) struct Swept {
    pub rows: Vec<Judged>,
    /// Per row (as `rows`): its legacy lock file as the row was judged, held open, where a
    /// release may follow (`None`: no release is planned).
    pub lock_seen: Vec<Option<Seen>>,
    /// What holds back the rows each is about: the run's (clock skew) and the watch's
    /// (breaker, no heartbeat, mass overtime).
    pub holds: Vec<Hold>,
    /// The watch's own holds that tripped this run, held or (with `--force`) overridden.
    pub tripped: Vec<Hold>,
    /// This host's rows among them (not another host's).
    pub local_rows: usize,
}

/// What a sweep needs besides the watch and the store.
pub(super) struct SweepCtx<'a> {
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// The run's hold (clock skew), if any.
    pub run_hold: Option<Hold>,
    pub force: bool,
}

/// Judges every running row of `w`, counting inferred verdicts and timing contradictions
/// in `tally` (the run's state; `None` when it could not be read at all: every row is seen
/// as a first run would see it); warnings go to `warn`, with their kind
/// (`shared_heartbeat_file`, `untrusted_lock`, `breaker`, `no_heartbeat`,
/// `mass_overtime`): the cron text shows each once per `remind_every`.
pub(super) fn sweep(
    w: &Watch,
    store: &mut dyn Store,
    ctx: &SweepCtx<'_>,
    tally: Option<&mut Tally>,
    warn: &mut dyn FnMut(&'static str, String),
) -> Result<Swept> {
    let (mut rows, lock_seen) = judge_rows(w, store, ctx, tally)?;
    // Another host's rows are none of this host's files (and never written here).
    let local: Vec<&Judged> = rows
        .iter()
        .filter(|j| j.decision.verdict != Verdict::Remote)
        .collect();
    if let Some(tpl) = &w.heartbeat_file
        && !tpl.has_id()
        && local.len() > 1
    {
        warn(
            "shared_heartbeat_file",
            format!(
                "watch {}: {} running rows share one heartbeat file ({}): a dead row \
                 beside a live one looks alive, and no row's beat is its own; put {{id}} in \
                 heartbeat_file",
                w.name,
                local.len(),
                tpl.as_str()
            ),
        );
    }
    let local_rows = local.len();
    untrusted_locks(w, &local, warn);
    let tripped = watch_holds(w, &local, ctx.force, warn);
    let mut holds: Vec<Hold> = ctx.run_hold.into_iter().collect();
    if !ctx.force {
        holds.extend(&tripped);
    }
    if !holds.is_empty() {
        for j in &mut rows {
            j.plan = plan_row(w, &j.decision, &j.row, j.confirmation, &holds);
        }
    }
    Ok(Swept {
        rows,
        lock_seen,
        holds,
        tripped,
        local_rows,
    })
}

/// The rows of `w`, each judged: first all of them read (whether a heartbeat file
/// without `{id}` is a row's own depends on how many of this host's rows share it), then
/// each row's evidence gathered and judged; a contradiction is timed and an inferred
/// verdict counted in `tally`.
fn judge_rows(
    w: &Watch,
    store: &mut dyn Store,
    ctx: &SweepCtx<'_>,
    mut tally: Option<&mut Tally>,
) -> Result<(Vec<Judged>, Vec<Option<Seen>>)> {
    let t = thresholds(w);
    let host_now = SystemTime::now();
    let now = epoch(host_now);
    let locks = w.lock_file.as_ref().and_then(|_| LockTable::read());
    let mut read: Vec<RunningRow> = Vec::new();
    store.each_running_row(w, &mut |row| {
        read.push(row);
        Ok(())
    })?;
    let scene = Scene {
        clocks: ctx.clocks,
        host: ctx.host,
        host_now,
        locks: locks.as_ref(),
        local_rows: read.iter().filter(|r| !is_remote(w, r, ctx.host)).count(),
    };
    if let Some(t) = tally.as_deref_mut() {
        t.checked(w);
    }
    let mut rows: Vec<Judged> = Vec::with_capacity(read.len());
    let mut lock_seen = Vec::with_capacity(read.len());
    for row in read {
        // Before the probes look: a file that appears after this is never the one judged.
        let seen = observed_lock(w, &row);
        let gathered = gather(w, &row, &scene);
        let (evidence, decision) = judge(w, &row, ctx.host, gathered);
        let id = RowId::from(&row.id).key();
        let started = row.started.raw.to_string();
        let (decision, confirmation) = match tally.as_deref_mut() {
            Some(tally) => {
                let decision = match tally.contradiction(w, &id, &started, &decision, now) {
                    Some(for_s) => decide::persisting(decision, for_s, t),
                    None => decision,
                };
                let c = tally.count(w, &id, &started, &decision, now);
                (decision, c)
            }
            None => {
                let c = uncounted(w, &decision);
                (decision, c)
            }
        };
        let plan = plan_row(w, &decision, &row, confirmation, &[]);
        // Only a dead row's file is ever released (and a file the probe found absent is
        // absent, whatever was seen a moment before).
        lock_seen.push(seen.filter(|_| decision.verdict == Verdict::Dead).map(|s| {
            match evidence.lock {
                decide::Lock::Absent => Seen::Absent,
                _ => s,
            }
        }));
        rows.push(Judged {
            owner_host: owner_host(&row, &evidence, ctx.host),
            row,
            evidence,
            decision,
            confirmation,
            plan,
        });
    }
    Ok((rows, lock_seen))
}

/// A free lock in a directory others can write proves nothing (SPEC §5): said once per
/// `remind_every`, with the fix, when a row's lock is so.
fn untrusted_locks(w: &Watch, local: &[&Judged], warn: &mut dyn FnMut(&'static str, String)) {
    let mut untrusted = local.iter().filter_map(|j| match &j.evidence.lock {
        decide::Lock::Untrusted(who) => Some((j, who)),
        _ => None,
    });
    let Some((first, who)) = untrusted.next() else {
        return;
    };
    let more = untrusted.count();
    let file = w
        .lock_file
        .as_ref()
        .and_then(|t| t.render(&first.row.id.to_string()).ok());
    let dir = file
        .as_deref()
        .and_then(std::path::Path::parent)
        .map_or_else(|| "its directory".into(), |d| d.display().to_string());
    warn(
        "untrusted_lock",
        format!(
            "watch {}: the lock file of row {}{} lies in {dir}, which {who} can write: anyone \
             there could swap the file the job holds for an unlocked one, so a free lock \
             there proves nothing and such rows are judged by their heartbeat alone; fix: \
             chmod o-w,g-w {dir} (or chmod +t {dir}), or keep the job's locks in a directory \
             only its owner can write",
            w.name,
            first.row.id,
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            },
        ),
    );
}

/// What holds the watch as a whole (SPEC §5, §6), decided over every running row of this
/// host before any is written, each said with its warning: the breaker (more than half
/// of the rows, and at least 3, would die on heartbeat alone), no heartbeat at all (not
/// one row beats while one is past `stale_after`), a mass overtime (more than half, and at
/// least 3, would be written as overtime). With `force`, said and not held.
fn watch_holds(
    w: &Watch,
    local: &[&Judged],
    force: bool,
    warn: &mut dyn FnMut(&'static str, String),
) -> Vec<Hold> {
    let t = thresholds(w);
    let n = local.len();
    let anyway = |what: &str| {
        if force {
            format!("; --force: {what} anyway")
        } else {
            String::new()
        }
    };
    let mut holds = Vec::new();
    let deaths = local
        .iter()
        .filter(|j| decide::heartbeat_only_death(&j.decision, &j.plan))
        .count();
    if decide::breaker_trips(deaths, n) {
        warn(
            "breaker",
            format!(
                "watch {}: breaker: {deaths} of {n} running rows would be marked dead on \
                 heartbeat staleness alone{}",
                w.name,
                if force {
                    anyway("marking them")
                } else {
                    "; nothing is marked on heartbeat alone (check clocks, time zones, NFS; \
                     --force overrides)"
                        .into()
                }
            ),
        );
        holds.push(Hold::Breaker);
    }
    let beating = local
        .iter()
        .filter(|j| j.evidence.heartbeat.beats())
        .count();
    let past_stale = local
        .iter()
        .filter(|j| {
            j.evidence
                .total_age
                .as_ref()
                .is_ok_and(|a| *a >= t.stale_after)
        })
        .count();
    let held = local
        .iter()
        .filter(|j| Hold::NoHeartbeat.applies_to(&j.decision) && j.plan.writes())
        .count();
    // Only when it holds something back: rows that cannot be judged at all (an
    // unreadable heartbeat) are reported each on its own.
    if decide::no_heartbeat(n, beating, past_stale) && held > 0 {
        warn(
            "no_heartbeat",
            format!(
                "watch {}: not one of its {n} running row{} has a heartbeat{}, while {past_stale} \
                 {} past stale_after: a heartbeat_file that matches no file looks exactly like \
                 every job dying at once; {held} verdict{} drawn from the heartbeat alone {} \
                 {}; it ends by itself once any row beats (check heartbeat_file, or decide \
                 each row with selfheal resolve)",
                w.name,
                if n == 1 { "" } else { "s" },
                w.heartbeat_file
                    .as_ref()
                    .map(|t| format!(" ({})", t.as_str()))
                    .unwrap_or_default(),
                if past_stale == 1 { "is" } else { "are" },
                if held == 1 { "" } else { "s" },
                if held == 1 { "is" } else { "are" },
                if force {
                    "acted on anyway (--force)"
                } else {
                    "held"
                },
            ),
        );
        holds.push(Hold::NoHeartbeat);
    }
    let overtime = local
        .iter()
        .filter(|j| j.decision.verdict == Verdict::Overtime && j.plan.writes())
        .count();
    if decide::mass_overtime(overtime, n) {
        warn(
            "mass_overtime",
            format!(
                "watch {}: {overtime} of {n} running rows are past max_age at once, which is \
                 far more often a wrong clock or time zone than real runaway jobs{}",
                w.name,
                if force {
                    anyway("writing them")
                } else {
                    "; none of them is written (check clocks and time zones; --force \
                     overrides)"
                        .into()
                }
            ),
        );
        holds.push(Hold::MassOvertime);
    }
    holds
}

/// The row's legacy lock file, opened now and held, for `release_lock = "if_free"` only.
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
        plan: j.plan,
        already_told: false,
    }
}
