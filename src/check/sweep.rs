//! One watch's running rows in, judged rows out, in two passes: the first judges every row
//! and keeps only what the watch as a whole comes to ([`census`], then [`holds`]: the
//! breaker, the no-heartbeat, no-named-lock and mass-overtime holds, their warnings;
//! [`named_lock_proven`] remembers a `db_lock` seen held), the second judges
//! each row again and plans it under those holds ([`judge_group`]). A row is judged by
//! [`judge`]; its contradiction is timed and its inferred verdict counted across runs
//! ([`crate::check::confirmations`]). Nothing is written here.
//!
//! I/O: the watch's running rows from the store, `/proc/locks` once per page, the probes
//! of [`crate::evidence::gather`], a try-lock for a row about to be written on a free lock
//! ([`crate::probe::lock::confirm`]), and for `release_lock = "if_free"` each dead row's
//! lock file, opened before the probes look and held open ([`crate::check::release::observe`]).

use std::time::SystemTime;

use crate::check::confirmations::Tally;
use crate::check::release::Seen;
use crate::clock::{Clocks, epoch};
use crate::config::{ReleaseLock, Watch};
use crate::decide::{self, ActionPolicy, Confirmation, Decision, Evidence, Hold, Plan, Verdict};
use crate::error::Result;
use crate::evidence::{Scene, gather, is_remote, owner_host, read_again, row_message, thresholds};
use crate::host::Host;
use crate::journal::RowId;
use crate::message::cut;
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
            let evidence = crate::probe::lock::confirm(w, row, host, evidence);
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

// At most PAGE running rows are read at once (keyset pages on the id), and held in
// memory: a backlog of a million rows costs what a few thousand do.
pub(super) use crate::store::{PAGE, pages};

/// A watch with at most this many running rows is judged once: the first pass keeps its
/// rows, judged (some 12 MiB at most), and the second neither reads nor probes them again.
/// Past it, the first pass keeps counts only.
const KEEP: usize = 20_000;

/// What a sweep needs besides the watch and the store.
pub(super) struct SweepCtx<'a> {
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// The run's hold (clock skew), if any.
    pub run_hold: Option<Hold>,
    pub force: bool,
}

/// A row the first pass judged, kept for the second (a watch of at most [`KEEP`] rows):
/// its evidence and decision, before the tally.
pub(super) struct KeptRow {
    row: RunningRow,
    evidence: Evidence,
    decision: Decision,
}

/// What the first pass over a watch's running rows found: counts, never rows (but for a
/// watch of at most [`KEEP`] rows, which the second pass then need not read again).
#[derive(Default)]
pub(super) struct Census {
    /// This host's running rows (not another host's): whose a heartbeat file without
    /// `{id}` is, and what the whole-watch holds are measured against.
    pub local: usize,
    /// Deaths drawn from the heartbeat alone that a run would write (the breaker).
    deaths: usize,
    /// Rows with a heartbeat, rows past stale_after, and the verdicts the no-heartbeat
    /// hold would hold.
    beating: usize,
    past_stale: usize,
    heartbeat_only_writes: usize,
    /// Overtimes a run would write (the mass-overtime hold).
    overtime_writes: usize,
    /// Rows whose `db_lock` name is held now, and the deaths on a free named lock alone a
    /// run would write (the no-named-lock hold).
    named_held: usize,
    named_free_writes: usize,
    /// The first row whose free lock lies where others could swap it, and how many more
    /// there are.
    untrusted: Option<Untrusted>,
    untrusted_more: usize,
    /// The first row whose named lock name cannot be made (why), and how many more.
    unusable_name: Option<(String, String)>,
    unusable_more: usize,
    /// Every row, judged, when there are at most [`KEEP`].
    kept: Option<Vec<KeptRow>>,
}

/// A row whose free lock lies in a directory others can write.
struct Untrusted {
    id: String,
    dir: String,
    /// Who can write it, in words.
    who: String,
}

/// The holds of a watch this run, decided over every running row before any is written.
pub(super) struct Holds {
    /// What holds back the rows each is about: the run's (clock skew) and the watch's
    /// (breaker, no heartbeat, mass overtime).
    pub holds: Vec<Hold>,
    /// The watch's own holds that tripped this run, held or (with `--force`) overridden.
    pub tripped: Vec<Hold>,
}

/// The first pass: judges every running row of `w` (as the second will, the tally only
/// looked at) and keeps what the watch as a whole comes to; the rows themselves only when
/// there are at most [`KEEP`].
pub(super) fn census(
    w: &Watch,
    store: &mut dyn Store,
    ctx: &SweepCtx<'_>,
    tally: Option<&Tally>,
) -> Result<Census> {
    let t = thresholds(w);
    // Whose a shared heartbeat file is depends on how many of this host's rows share it:
    // counted first (no probe), for such a watch only.
    let shared = w.heartbeat_file.as_ref().is_some_and(|t| !t.has_id());
    let local_rows = if shared {
        let mut n = 0;
        pages(w, store, |_, page| {
            n += page.iter().filter(|r| !is_remote(w, r, ctx.host)).count();
            Ok(true)
        })?;
        n
    } else {
        0
    };
    // Kept judged while the watch has at most KEEP rows: then the second pass need not read
    // nor probe them again.
    let mut c = Census {
        kept: Some(Vec::new()),
        ..Census::default()
    };
    pages(w, store, |store, page| {
        let host_now = SystemTime::now();
        let now = epoch(host_now);
        let snapshot = crate::evidence::with_named(w, store, &page);
        let scene = Scene {
            clocks: ctx.clocks,
            host: ctx.host,
            host_now,
            snapshot: &snapshot,
            local_rows,
        };
        if let Some(kept) = &mut c.kept {
            if kept.len() + page.len() > KEEP {
                c.kept = None;
            } else {
                kept.reserve_exact(page.len());
            }
        }
        for row in page {
            let evidence = sighted(w, &row, gather(w, &row, &scene), now, tally, None);
            let (evidence, decision) = judge(w, &row, ctx.host, evidence);
            let (d, confirmation) = tallied(w, &row, decision.clone(), now, tally, None);
            let plan = plan_row(w, &d, &row, confirmation, &[]);
            c.count(w, t, &row, &evidence, &d, &plan);
            if let Some(kept) = &mut c.kept {
                kept.push(KeptRow {
                    row,
                    evidence,
                    decision,
                });
            }
        }
        Ok(true)
    })?;
    Ok(c)
}

impl Census {
    /// Counts one row of the first pass.
    fn count(
        &mut self,
        w: &Watch,
        t: crate::decide::Thresholds,
        row: &RunningRow,
        e: &Evidence,
        d: &Decision,
        p: &Plan,
    ) {
        if d.verdict == Verdict::Remote {
            return;
        }
        self.local += 1;
        self.deaths += usize::from(decide::inferred_death(d, p));
        self.beating += usize::from(e.heartbeat.beats());
        self.past_stale += usize::from(e.total_age.as_ref().is_ok_and(|a| *a >= t.stale_after));
        self.heartbeat_only_writes += usize::from(Hold::NoHeartbeat.applies_to(d) && p.writes());
        self.overtime_writes += usize::from(d.verdict == Verdict::Overtime && p.writes());
        self.named_held += usize::from(matches!(e.named, decide::NamedLock::Held { .. }));
        self.named_free_writes += usize::from(Hold::NoNamedLock.applies_to(d) && p.writes());
        if let decide::NamedLock::Unusable(why) = &e.named {
            if self.unusable_name.is_some() {
                self.unusable_more += 1;
            } else {
                self.unusable_name = Some((row.id.to_string(), why.clone()));
            }
        }
        if let decide::Lock::Untrusted(who) = &e.lock {
            if self.untrusted.is_some() {
                self.untrusted_more += 1;
            } else {
                let file = w
                    .lock_file
                    .as_ref()
                    .and_then(|t| t.render(&row.id.to_string()).ok());
                let dir = file
                    .as_deref()
                    .and_then(std::path::Path::parent)
                    .map_or_else(|| "its directory".into(), |d| d.display().to_string());
                self.untrusted = Some(Untrusted {
                    id: row.id.to_string(),
                    dir,
                    who: who.clone(),
                });
            }
        }
    }
}

/// The evidence with selfheal's own sighting of a row whose times lie in the future
/// ([`crate::decide::Ahead::seen_s`]): with `record`, the tally records it (the second
/// pass); otherwise it only looks (the first); with no tally at all, the evidence is left
/// as it is (a row just gathered is seen for the first time, and so never acts on it).
fn sighted(
    w: &Watch,
    row: &RunningRow,
    mut ev: Evidence,
    now: i64,
    tally: Option<&Tally>,
    record: Option<&mut Tally>,
) -> Evidence {
    if let Some(a) = &mut ev.ahead {
        let id = RowId::from(&row.id).key();
        let started = row.started.raw.to_string();
        a.seen_s = match (record, tally) {
            (Some(t), _) => t.sighting(w, &id, &started, now),
            (None, Some(t)) => t.peek_sighting(w, &id, &started, now),
            (None, None) => a.seen_s,
        };
    }
    ev
}

/// A row's decision after the tally: a contradiction timed (and sent to a person once it
/// has stood for `stale_after`), an inferred verdict counted. With `record`, the tally
/// records it (the second pass); otherwise only looks (the first); with no tally at all
/// (it could not be read), every inferred verdict is a first run's.
fn tallied(
    w: &Watch,
    row: &RunningRow,
    decision: Decision,
    now: i64,
    tally: Option<&Tally>,
    record: Option<&mut Tally>,
) -> (Decision, Option<Confirmation>) {
    let t = thresholds(w);
    let id = RowId::from(&row.id).key();
    let started = row.started.raw.to_string();
    match (record, tally) {
        (Some(tally), _) => {
            let decision = match tally.contradiction(w, &id, &started, &decision, now) {
                Some(for_s) => decide::persisting(decision, for_s, t),
                None => decision,
            };
            let c = tally.count(w, &id, &started, &decision, now);
            (decision, c)
        }
        (None, Some(tally)) => {
            let decision = match tally.peek_contradiction(w, &id, &started, &decision, now) {
                Some(for_s) => decide::persisting(decision, for_s, t),
                None => decision,
            };
            let c = tally.peek_count(w, &id, &started, &decision, now);
            (decision, c)
        }
        (None, None) => {
            let c = uncounted(w, &decision);
            (decision, c)
        }
    }
}

/// Whether the watch's `db_lock` templates name locks the application takes
/// (docs/design.md#no-named-lock): a running row's name is held in this pass — then the
/// tally remembers it for later runs (`now`: unix seconds, host clock; only a real run's
/// tally is kept) — or a real run saw one held under these very templates lately. A watch
/// without `db_lock`, or with no tally (the counts could not be read), is not proven.
pub(super) fn named_lock_proven(
    w: &Watch,
    c: &Census,
    tally: Option<&mut Tally>,
    now: i64,
) -> bool {
    if w.db_lock.is_empty() {
        return false;
    }
    let Some(tally) = tally else {
        return c.named_held > 0;
    };
    if c.named_held > 0 {
        tally.prove(w, now);
    }
    tally.proven(w, now)
}

/// What holds the watch as a whole (docs/design.md#whole-watch-holds), from the first pass's counts, each said
/// with its warning (of its kind: the cron text shows each once per `remind_every`): the
/// shared heartbeat file, a lock others could swap, the breaker (more than half of the
/// rows, and at least 3, would die on heartbeat alone), no heartbeat at all (not one row
/// beats while one is past `stale_after`), no named lock held (not one row holds its
/// `db_lock` name, the template is not `named_proven`, and several rows would die on a
/// free one alone), a mass overtime (more than half, and at least 3, would be written as
/// overtime); and the run's hold. With `force`, said and not held.
pub(super) fn holds(
    w: &Watch,
    c: &Census,
    named_proven: bool,
    ctx: &SweepCtx<'_>,
    warn: &mut dyn FnMut(&'static str, String),
) -> Holds {
    let force = ctx.force;
    let n = c.local;
    if let Some(tpl) = &w.heartbeat_file
        && !tpl.has_id()
        && n > 1
    {
        warn(
            "shared_heartbeat_file",
            format!(
                "watch {}: {n} running rows share one heartbeat file ({}): a dead row \
                 beside a live one looks alive, and no row's beat is its own; put {{id}} in \
                 heartbeat_file",
                w.name,
                tpl.as_str()
            ),
        );
    }
    if let Some(Untrusted { id, dir, who }) = &c.untrusted {
        warn(
            "untrusted_lock",
            format!(
                "watch {}: the lock file of row {id}{} lies in {dir}, which {who} can write: \
                 anyone there could swap the file the job holds for an unlocked one, so a \
                 free lock there proves nothing and such rows are judged by their heartbeat \
                 alone; fix: chmod o-w,g-w {dir} (or chmod +t {dir}), or keep the job's \
                 locks in a directory only its owner can write",
                w.name,
                if c.untrusted_more > 0 {
                    format!(" (and {} more)", c.untrusted_more)
                } else {
                    String::new()
                },
            ),
        );
    }
    if let Some((id, why)) = &c.unusable_name {
        warn(
            "unusable_db_lock",
            format!(
                "watch {}: row {id}{} has no usable named lock ({why}): its db_lock is \
                 neutral evidence for it; fix: a shorter template (an {{md5:…}} of the long \
                 part), as the job builds its lock name",
                w.name,
                if c.unusable_more > 0 {
                    format!(" (and {} more)", c.unusable_more)
                } else {
                    String::new()
                },
            ),
        );
    }
    let anyway = |what: &str| {
        if force {
            format!("; --force: {what} anyway")
        } else {
            String::new()
        }
    };
    let mut tripped = Vec::new();
    let deaths = c.deaths;
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
        tripped.push(Hold::Breaker);
    }
    let (past_stale, held) = (c.past_stale, c.heartbeat_only_writes);
    // Only when it holds something back: rows that cannot be judged at all (an
    // unreadable heartbeat) are reported each on its own.
    if decide::no_heartbeat(n, c.beating, past_stale) && held > 0 {
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
        tripped.push(Hold::NoHeartbeat);
    }
    let deaths = c.named_free_writes;
    if decide::no_named_lock(deaths, c.named_held, named_proven) {
        let templates: Vec<String> = w
            .db_lock
            .iter()
            .map(|t| format!("{:?}", t.to_string()))
            .collect();
        warn(
            "no_named_lock",
            format!(
                "watch {}: no job of this watch holds its db_lock name: not one of its {n} \
                 running rows holds {}, and no run has seen one held under this template, so \
                 the {deaths} deaths on a free named lock alone {} (a template that names no \
                 lock the application takes looks exactly like every job dying at once); \
                 does the template match the names the application takes? selfheal doctor \
                 lists each row's names and who holds them{}",
                w.name,
                templates.join(" or "),
                if force {
                    "are acted on anyway (--force)"
                } else {
                    "are held until a real run sees a row's name held"
                },
                if force {
                    ""
                } else {
                    " (--force overrides; selfheal resolve decides a row)"
                },
            ),
        );
        tripped.push(Hold::NoNamedLock);
    }
    let overtime = c.overtime_writes;
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
        tripped.push(Hold::MassOvertime);
    }
    let mut holds: Vec<Hold> = ctx.run_hold.into_iter().collect();
    if !force {
        holds.extend(&tripped);
    }
    Holds { holds, tripped }
}

/// The second pass, for one group of rows (at most a write group): each row judged again
/// (or, for a watch of at most [`KEEP`] rows that releases no lock file, as the first
/// pass judged it), its contradiction timed and its inferred verdict counted in `tally`,
/// planned under the watch's `holds`; and for `release_lock = "if_free"`, each dead row's
/// lock file opened as the row is judged and held open (at most one group's files).
pub(super) fn judge_group(
    w: &Watch,
    rows: Vec<SecondPassRow>,
    ctx: &SweepCtx<'_>,
    scene: &Scene<'_>,
    mut tally: Option<&mut Tally>,
    holds: &[Hold],
) -> (Vec<Judged>, Vec<Option<Seen>>) {
    let now = epoch(scene.host_now);
    let mut out = Vec::with_capacity(rows.len());
    let mut lock_seen = Vec::with_capacity(rows.len());
    for r in rows {
        let (row, seen, evidence, decision) = match r {
            SecondPassRow::Kept(k) if w.release_lock != ReleaseLock::IfFree => {
                // Judged in the first pass on the sighting as it stood; recorded now.
                let evidence = sighted(w, &k.row, k.evidence, now, None, tally.as_deref_mut());
                (k.row, None, evidence, k.decision)
            }
            SecondPassRow::Kept(k) => judged_again(
                w,
                k.row,
                Some(&k.evidence),
                ctx,
                scene,
                now,
                tally.as_deref_mut(),
            ),
            SecondPassRow::Read(row) => {
                judged_again(w, row, None, ctx, scene, now, tally.as_deref_mut())
            }
        };
        let (decision, confirmation) = tallied(w, &row, decision, now, None, tally.as_deref_mut());
        let plan = plan_row(w, &decision, &row, confirmation, holds);
        // Only a dead row's file is ever released (and a file the probe found absent is
        // absent, whatever was seen a moment before).
        lock_seen.push(seen.filter(|_| decision.verdict == Verdict::Dead).map(|s| {
            match evidence.lock {
                decide::Lock::Absent => Seen::Absent,
                _ => s,
            }
        }));
        out.push(Judged {
            owner_host: owner_host(&row, &evidence, ctx.host),
            row,
            evidence,
            decision,
            confirmation,
            plan,
        });
    }
    (out, lock_seen)
}

/// A row judged in the second pass: its legacy lock file opened first (before the probes
/// look: a file that appears after this is never the one judged), then its evidence —
/// what can have changed since the first pass judged it (`kept`: the evidence it judged it
/// by, [`read_again`]), or all of it for a row read again from the store.
fn judged_again(
    w: &Watch,
    row: RunningRow,
    kept: Option<&Evidence>,
    ctx: &SweepCtx<'_>,
    scene: &Scene<'_>,
    now: i64,
    tally: Option<&mut Tally>,
) -> (RunningRow, Option<Seen>, Evidence, Decision) {
    let seen = observed_lock(w, &row);
    let evidence = match kept {
        Some(judged) => read_again(w, &row, scene, judged),
        None => gather(w, &row, scene),
    };
    let evidence = sighted(w, &row, evidence, now, None, tally);
    let (e, d) = judge(w, &row, ctx.host, evidence);
    (row, seen, e, d)
}

/// A row for the second pass: kept as the first pass judged it, or read again from the
/// store (a watch of more than [`KEEP`] rows), to be judged.
// Moved once per row, held in bulk for one page or at most KEEP rows: an allocation per row
// to even the variants out would cost more than the bytes it saves.
#[allow(clippy::large_enum_variant)]
pub(super) enum SecondPassRow {
    Kept(KeptRow),
    Read(RunningRow),
}

impl SecondPassRow {
    /// The row as read.
    pub fn row(&self) -> &RunningRow {
        match self {
            SecondPassRow::Kept(k) => &k.row,
            SecondPassRow::Read(r) => r,
        }
    }
}

impl Census {
    /// The rows the first pass kept (a watch of at most [`KEEP`] rows), for the second.
    pub fn take_kept(&mut self) -> Option<Vec<SecondPassRow>> {
        self.kept
            .take()
            .map(|k| k.into_iter().map(SecondPassRow::Kept).collect())
    }
}

/// The row's legacy lock file, opened now and held, for `release_lock = "if_free"` only.
fn observed_lock(w: &Watch, row: &RunningRow) -> Option<Seen> {
    if w.release_lock != ReleaseLock::IfFree {
        return None;
    }
    let tpl = w.lock_file.as_ref()?;
    Some(match tpl.render(&row.id.to_string()) {
        Ok(p) => crate::check::release::observe(&p),
        Err(why) => Seen::Unreachable(format!("lock_file: {why}")),
    })
}

/// The report of a judged row on `host`, before any write.
pub(super) fn row_report(w: &Watch, schema: &Schema, host: &Host, j: Judged) -> RowReport {
    let t = thresholds(w);
    let reason = row_message(&j.decision, &j.evidence, t);
    let release_planned = plans_release(w, &j.decision, &j.plan);
    // What a person runs for a row that needs one (docs/design.md#person).
    let resolve = j.plan.attention.then(|| {
        crate::person::resolve_command(
            w,
            &j.row.id,
            j.plan.action == decide::Action::MarkManual,
            j.decision.verdict == Verdict::Remote,
        )
    });
    // The file the lock probe looked at, whether or not it is to be released.
    let lock_file = crate::probe::lock::file_looked_at(w, &j.row, &j.evidence);
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

#[cfg(test)]
mod tests;
