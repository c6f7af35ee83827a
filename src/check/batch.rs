//! [`Batch`]: the writes of one watch's condemned rows, and everything that goes with a
//! write — the intents on disk first, the evidence read again just before each row's
//! compare-and-set, grouped commits where the store groups them, the legacy lock file
//! released only after its row's change is committed, one journal line per applied change,
//! one flush, and the intents cleared.
//!
//! Order, so that a run killed anywhere leaves something the next run can settle
//! ([`crate::check::recovery`]): intents (flushed) → compare-and-set (→ commit) → release →
//! journal line (one `write(2)`) … → one flush of the journal → intents cleared. A change
//! not journaled keeps its intent and stops the run.
//!
//! A legacy lock file (`release_lock = "if_free"`) is released only if it is the inode
//! seen when its row was judged: opened then and held open since, it is compared on that
//! descriptor with what its name holds at the re-read just before the compare-and-set,
//! and released only when no running row names it any more — counted again after the
//! commit, since a new worker may have claimed a row meanwhile ([`crate::check::release`]).
//!
//! I/O: `state_dir/pending.jsonl` and `state_dir/journal.jsonl` (opened on the first
//! batch of a run), the heartbeat, lock and owner probes again, one compare-and-set per
//! row, and the release of a legacy lock file ([`crate::check::release`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::check::release::{Held, Seen};
use std::time::SystemTime;

use super::sweep::{judge, plan_row};
use crate::check::release::Release;
use crate::clock::{Clocks, now_rfc3339};
use crate::config::Watch;
use crate::decide::{Action, Confirmation, Hold};
use crate::error::{Error, Result};
use crate::evidence::{self, Snapshot};
use crate::host::Host;
use crate::journal::{JournalEntry, Origin, RunId, Writer};
use crate::report::RowReport;
use crate::store::{CasOutcome, Change, RunningRow, Schema, SqlValue, Store};

/// At most this many compare-and-sets commit together (where the store groups them): one
/// commit, and one sync of the database, for up to this many rows, while the rows (or
/// SQLite's write lock) are held for only a few milliseconds.
pub(super) const WRITE_GROUP: usize = 100;

/// What writing a watch's rows needs to know.
pub(super) struct Ctx<'a> {
    pub w: &'a Watch,
    pub schema: &'a Schema,
    pub state_dir: &'a Path,
    pub clocks: &'a Clocks,
    pub host: &'a Host,
    /// What holds back the rows each is about (the run's and the watch's holds).
    pub holds: &'a [Hold],
    /// This host's running rows of the watch, as the sweep counted them (whose a heartbeat
    /// file without `{id}` is).
    pub local_rows: usize,
    pub run: &'a RunId,
    /// The configuration and database the entries and intents carry.
    pub origin: &'a Origin,
}

/// One watch's writes.
pub(super) struct Batch<'a> {
    pub ctx: Ctx<'a>,
    pub store: &'a mut dyn Store,
    /// The run's journal and intents file, opened by the run's first batch.
    pub writer: &'a mut Option<Writer>,
    /// Per row (as `rows` in [`Batch::write`]): its legacy lock file as it was judged, held
    /// open, where a release is planned.
    pub lock_seen: Vec<Option<Seen>>,
}

/// How a watch's writes ended.
#[derive(Default)]
pub(super) struct BatchEnd {
    /// The row whose compare-and-set failed with an error that stops the run.
    pub stopped_at: Option<usize>,
    /// The error to stop the run with, once the rows before it are reported.
    pub error: Option<Error>,
}

impl BatchEnd {
    fn stopped(at: usize, e: Error) -> BatchEnd {
        BatchEnd {
            stopped_at: Some(at),
            error: Some(e),
        }
    }
}

impl Batch<'_> {
    /// Writes the rows, each with the report made when it was judged: intents to
    /// `pending.jsonl` (on disk), then per row the re-read of its evidence and its
    /// compare-and-set, with one journal line per applied change (right after it, or after
    /// the commit where the store groups the writes), one flush, and the intents cleared.
    /// `Err`: nothing was changed.
    pub fn write(&mut self, rows: &mut [(RunningRow, RowReport)]) -> Result<BatchEnd> {
        let Batch {
            ctx,
            store,
            writer,
            lock_seen,
        } = self;
        // The journal must be writable before the first change is made.
        let jw = match writer {
            Some(jw) => jw,
            None => writer.insert(Writer::open(ctx.state_dir, ctx.origin.clone())?),
        };
        let intents: Vec<(usize, String)> =
            (0..rows.len()).map(|i| (i, ctx.run.change())).collect();
        let header = ctx
            .origin
            .header(ctx.run.as_str(), store.session(), now_rfc3339());
        jw.pending.begin_flushing(
            &header,
            &mut intents.iter().map(|(i, change)| {
                let (row, report) = &rows[*i];
                JournalEntry {
                    applied: true,
                    ..journal_entry(ctx, row, report, change)
                }
            }),
        )?;
        let mut pass = Pass {
            ctx,
            store: &mut **store,
            jw,
            held: rows.iter().map(|_| None).collect(),
            rows,
            lock_seen,
            intents,
            k: 0,
            end: BatchEnd::default(),
            journaled: Ok(()),
        };
        while pass.k < pass.intents.len() && pass.end.error.is_none() && pass.journaled.is_ok() {
            pass.group();
        }
        Ok(pass.finish())
    }
}

/// The writes under way.
struct Pass<'b, 'a> {
    ctx: &'b Ctx<'a>,
    store: &'b mut dyn Store,
    jw: &'b mut Writer,
    rows: &'b mut [(RunningRow, RowReport)],
    /// Per row: its legacy lock file as judged (taken when its write begins), and as
    /// checked again before its write.
    lock_seen: &'b mut [Option<Seen>],
    held: Vec<Option<Result<Held, Release>>>,
    /// Row index and change id, in writing order.
    intents: Vec<(usize, String)>,
    /// The next intent to write.
    k: usize,
    end: BatchEnd,
    /// A change not journaled stops the writes.
    journaled: Result<()>,
}

impl Pass<'_, '_> {
    /// Writes the next group of rows (one row where a group does not pay or the store
    /// does not group): a row locked by another transaction ends the group and is then
    /// written on its own, where it may wait.
    fn group(&mut self) {
        // A group pays for itself from two rows on.
        let begun = if self.intents.len() - self.k > 1 {
            self.store.begin_writes()
        } else {
            Ok(false)
        };
        let grouped = match begun {
            Ok(g) => g,
            Err(e) => {
                self.end = BatchEnd::stopped(self.intents[self.k].0, e);
                return;
            }
        };
        // Outside a group each compare-and-set commits on its own: the intents must be
        // on disk first. In a group they must be by the commit (see `commit`); the flush
        // runs while the database writes.
        if !grouped && let Err(e) = self.jw.pending.flushed() {
            self.end = BatchEnd::stopped(self.intents[self.k].0, e);
            return;
        }
        let first = self.k;
        let busy = self.cas_rows(grouped);
        if grouped && !self.commit(first) {
            return;
        }
        if busy && self.end.error.is_none() && self.journaled.is_ok() {
            let i = self.intents[self.k].0;
            match self.cas(i) {
                Err(e) => self.end = BatchEnd::stopped(i, e),
                Ok(_) => {
                    self.k += 1;
                    if self.rows[i].1.applied {
                        self.journaled = self.after_commit(&[i]).pop().unwrap_or(Ok(()));
                    }
                }
            }
        }
    }

    /// One compare-and-set per row, up to a group's size; each change committed on its own
    /// is journaled at once. True when a row was locked by someone else (never waited for
    /// inside a group).
    fn cas_rows(&mut self, grouped: bool) -> bool {
        let first = self.k;
        // Only the group's first statement runs while its intents are being flushed: a
        // statement the database refused may have ended the transaction (a trigger's
        // RAISE(ROLLBACK) on SQLite, a lock wait under innodb_rollback_on_timeout), and
        // the next one would then commit on its own.
        let mut stated = false;
        if grouped && self.store.groups_compare_and_sets() {
            stated = true;
            match self.cas_group() {
                Ok(true) => return false,
                Ok(false) => {}
                Err(stop) => {
                    let (i, e) = *stop;
                    self.end = BatchEnd::stopped(i, e);
                    return false;
                }
            }
        }
        while self.k < self.intents.len() && (!grouped || self.k - first < WRITE_GROUP) {
            let i = self.intents[self.k].0;
            if grouped
                && stated
                && let Err(e) = self.jw.pending.flushed()
            {
                self.end = BatchEnd::stopped(i, e);
                return false;
            }
            stated = true;
            match self.cas(i) {
                Err(e) => {
                    self.end = BatchEnd::stopped(i, e);
                    return false;
                }
                Ok(false) => return true,
                Ok(true) => {}
            }
            self.k += 1;
            // One write(2), flushed in `finish`: a run killed after it leaves the line. A
            // failed journal write stops the writes, so that no further change waits on
            // its intent alone.
            if !grouped && self.rows[i].1.applied {
                self.journaled = self.after_commit(&[i]).pop().unwrap_or(Ok(()));
                if self.journaled.is_err() {
                    return false;
                }
            }
        }
        false
    }

    /// The group's rows made as one ([`Store::compare_and_set_group`]): each read again
    /// (one `/proc/locks` snapshot for all), then the compare-and-sets of those still to be
    /// written in one go. `Ok(false)`: the store could not (a row locked by someone else):
    /// nothing was written, the caller goes row by row. `Err`: the row whose write failed
    /// the run, and why.
    fn cas_group(&mut self) -> std::result::Result<bool, Box<(usize, Error)>> {
        let w = self.ctx.w;
        let end = self.intents.len().min(self.k + WRITE_GROUP);
        let group: Vec<usize> = self.intents[self.k..end].iter().map(|(i, _)| *i).collect();
        let of_group: Vec<RunningRow> = if w.db_lock.is_empty() {
            Vec::new()
        } else {
            group.iter().map(|&i| self.rows[i].0.clone()).collect()
        };
        let snapshot = crate::evidence::with_named(w, self.store, &of_group);
        let mut to_write = Vec::with_capacity(group.len());
        for &i in &group {
            let seen = self.lock_seen.get_mut(i).and_then(Option::take);
            let (row, report) = &mut self.rows[i];
            if ready(self.ctx, row, report, seen, &mut self.held[i], &snapshot) {
                to_write.push(i);
            }
        }
        let targets: Vec<String> = to_write
            .iter()
            .map(|&i| self.rows[i].1.plan.target.clone().unwrap_or_default())
            .collect();
        let changes: Vec<Change<'_>> = to_write
            .iter()
            .zip(&targets)
            .map(|(&i, t)| change_of(self.ctx, &self.rows[i].0, &self.rows[i].1, t))
            .collect();
        let outcomes = match self
            .store
            .compare_and_set_group(w, self.ctx.schema, &changes)
        {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(false),
            Err(e) => return Err(Box::new((group[0], e))),
        };
        drop(changes);
        for (&i, o) in to_write.iter().zip(outcomes) {
            apply(&mut self.rows[i].1, o);
        }
        self.k = end;
        Ok(true)
    }

    /// Row `i`'s compare-and-set ([`cas_row`]), its legacy lock file opened again first
    /// where a release is planned.
    fn cas(&mut self, i: usize) -> Result<bool> {
        let (row, report) = &mut self.rows[i];
        let seen = self.lock_seen.get_mut(i).and_then(Option::take);
        cas_row(self.ctx, row, report, seen, &mut self.held[i], self.store)
    }

    /// Rows `done`, each just committed: their legacy lock files released where planned
    /// (the running rows that name them counted once, now, after the commit), then one
    /// journal line each, in order, up to the first that fails.
    fn after_commit(&mut self, done: &[usize]) -> Vec<Result<()>> {
        let wanted: Vec<(PathBuf, &SqlValue)> = done
            .iter()
            .filter(|&&i| self.rows[i].1.applied && self.rows[i].1.release_planned)
            .filter(|&&i| matches!(self.held[i], Some(Ok(_))))
            .filter_map(|&i| {
                let row = &self.rows[i].0;
                lock_path(self.ctx.w, row).ok().map(|p| (p, &row.id))
            })
            .collect();
        let users = if wanted.is_empty() {
            Ok(HashMap::new())
        } else {
            lock_users_now(self.ctx.w, &wanted, self.store)
        };
        let mut results = Vec::with_capacity(done.len());
        for &i in done {
            // The intents are made in row order, one per row: row i's is the i-th.
            let change = self.intents[i].1.clone();
            let held = self.held[i].take();
            let (row, report) = &mut self.rows[i];
            // Never before the commit: the row must be marked first. The outcome goes into
            // the row's report and journal entry.
            if report.applied && report.release_planned {
                report.lock_release = Some(release_lock(self.ctx, row, held, &users));
            }
            let r = self
                .jw
                .journal
                .append(&JournalEntry {
                    // The row holds its message; the intent kept it, for recovery.
                    reason: String::new(),
                    ..journal_entry(self.ctx, row, report, &change)
                })
                .map_err(|e| journal_error(e, self.ctx.w, row, report));
            let failed = r.is_err();
            results.push(r);
            if failed {
                break;
            }
        }
        results
    }

    /// Commits the group begun at `first`, then releases what may be released and
    /// journals its changes. False when the commit failed: nothing of the group is
    /// applied, and its intents stay for the next run to check.
    fn commit(&mut self, first: usize) -> bool {
        // Nothing of the group becomes durable before its intents are: if they cannot be
        // flushed, the group is undone.
        let committed = match self.jw.pending.flushed() {
            Ok(()) => self.store.commit_writes(),
            Err(e) => {
                let _ = self.store.abandon_writes();
                Err(e)
            }
        };
        if let Err(e) = committed {
            for (i, _) in &self.intents[first..self.k] {
                let report = &mut self.rows[*i].1;
                if report.applied {
                    report.applied = false;
                    report.action = Action::None;
                    report.note = Some(format!("write failed: {}", e.full_message()));
                }
            }
            let next = self.intents.get(self.k).map(|x| x.0);
            self.end.stopped_at = self.end.stopped_at.or(next);
            self.end.error = Some(self.end.error.take().unwrap_or(e));
            return false;
        }
        let done: Vec<usize> = self.intents[first..self.k]
            .iter()
            .map(|(i, _)| *i)
            .filter(|&i| self.rows[i].1.applied)
            .collect();
        self.journaled = self
            .after_commit(&done)
            .into_iter()
            .find(Result::is_err)
            .unwrap_or(Ok(()));
        true
    }

    /// Flushes the journal once, then clears the intents when every change is journaled
    /// and no write failed the run (a failed write's outcome is unknown: its intent stays).
    fn finish(mut self) -> BatchEnd {
        if self.journaled.is_ok()
            && let Some(first) = self.intents.iter().find(|(i, _)| self.rows[*i].1.applied)
            && let Err(e) = self.jw.journal.sync()
        {
            let (row, report) = &self.rows[first.0];
            self.journaled = Err(journal_error(e, self.ctx.w, row, report));
        }
        match self.journaled {
            // A change not journaled: its intent stays, for the next run to settle; stop so
            // that no further change goes unrecorded.
            Err(e) => self.end.error = Some(self.end.error.unwrap_or(e)),
            Ok(()) if self.end.error.is_none() => {
                // Harmless if it fails: the next run finds these changes in the journal.
                let _ = self.jw.pending.clear();
            }
            Ok(()) => {}
        }
        self.end
    }
}

/// Reads again what of the row's evidence can have changed, then applies its
/// compare-and-set. `Ok(false)`: in a group of writes, the row is locked by another
/// transaction; nothing was done.
fn cas_row(
    ctx: &Ctx<'_>,
    row: &RunningRow,
    report: &mut RowReport,
    seen: Option<Seen>,
    held: &mut Option<Result<Held, Release>>,
    store: &mut dyn Store,
) -> Result<bool> {
    let snapshot = crate::evidence::with_named(ctx.w, store, std::slice::from_ref(row));
    if !ready(ctx, row, report, seen, held, &snapshot) {
        return Ok(true);
    }
    let target = report.plan.target.clone().unwrap_or_default();
    let outcome =
        store.compare_and_set(ctx.w, ctx.schema, &change_of(ctx, row, report, &target))?;
    Ok(apply(report, outcome))
}

/// What of the row's evidence can have changed — its files, its lock, its owner pid — read
/// again just before its write ([`evidence::read_again`]: what the row itself holds, as
/// judged; `snapshot`: `/proc/locks` read for it, or for its group): true when it is still
/// to be written as planned; otherwise its report says why it is left alone. Where a
/// release is planned, the lock file judged with the row (held open since) is checked to
/// be still at its name, and kept for the release.
fn ready(
    ctx: &Ctx<'_>,
    row: &RunningRow,
    report: &mut RowReport,
    seen: Option<Seen>,
    held: &mut Option<Result<Held, Release>>,
    snapshot: &Snapshot,
) -> bool {
    let w = ctx.w;
    // Just before the write: did the row beat, or the worker show up, in between? (Times
    // in the future keep the sighting this run recorded: it is the row's, as judged.)
    let scene = evidence::Scene {
        clocks: ctx.clocks,
        host: ctx.host,
        host_now: SystemTime::now(),
        snapshot,
        local_rows: ctx.local_rows,
    };
    let again = evidence::read_again(w, row, &scene, &report.evidence);
    let (_, d2) = judge(w, row, ctx.host, again);
    // The same inferred verdict keeps this run's count; another one would be its first.
    let c2 = match report.confirmation {
        Some(c) if d2.inferred() && d2.verdict == report.decision.verdict => Some(c),
        _ if d2.inferred() => Some(Confirmation {
            count: 1,
            confirm: w.confirm,
        }),
        _ => None,
    };
    let p2 = plan_row(w, &d2, row, c2, ctx.holds);
    if (p2.action, &p2.target) != (report.plan.action, &report.plan.target) {
        report.action = Action::None;
        report.note = Some(format!(
            "left alone: the evidence changed before the write (now {}: {})",
            d2.verdict.as_str(),
            d2.basis.describe()
        ));
        return false;
    }
    // The lock file to release after the write: the inode the row was judged with, held
    // open since, if its name still holds it (a file absent then is never removed).
    if report.release_planned && held.is_none() {
        *held = Some(match (lock_path(w, row), seen) {
            (Ok(_), Some(seen)) => crate::check::release::hold(seen),
            (Ok(_), None) => Err(Release::Absent),
            (Err(why), _) => Err(Release::Failed(format!("lock_file: {why}"))),
        });
    }
    true
}

/// The compare-and-set of a row that is ready ([`ready`]), to `target`, its planned status.
fn change_of<'r>(
    ctx: &Ctx<'r>,
    row: &'r RunningRow,
    report: &RowReport,
    target: &'r str,
) -> Change<'r> {
    let w = ctx.w;
    let retry = report.plan.action == Action::MarkRetry;
    Change {
        row,
        from_status: &w.running_value,
        new_status: target,
        message: w.message_column.as_ref().map(|_| report.reason.clone()),
        bump_attempts: retry,
        // A row parked for a person may still have a running worker: not ended.
        set_ended: report.plan.action != Action::MarkManual,
        // Back to the queue: not before the backoff for the attempts this reclaim makes,
        // within what the column can hold.
        retry_at: retry.then(|| {
            let attempts = row.attempts.map(|a| a.saturating_add(1));
            super::backoff::delay(w, ctx.schema, ctx.clocks.db.now_epoch, attempts)
        }),
        match_heartbeat: true,
    }
}

/// A compare-and-set's outcome in the row's report. False for [`CasOutcome::Busy`] (a row
/// locked by another transaction, inside a group): nothing was done.
fn apply(report: &mut RowReport, outcome: CasOutcome) -> bool {
    match outcome {
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
        CasOutcome::Busy => return false,
    }
    true
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

/// The row's legacy lock file.
fn lock_path(w: &Watch, row: &RunningRow) -> Result<PathBuf, String> {
    match &w.lock_file {
        Some(tpl) => tpl.render(&row.id.to_string()),
        None => Err("not set".into()),
    }
}

/// How many running rows name each of `wanted` now, read again after the commit. With
/// `{id}` in the template a file is named by the running row with that id alone (each is
/// looked up by its id); without it every running row names the one file (one row is
/// enough to keep it). Never a scan of the watch's rows.
fn lock_users_now(
    w: &Watch,
    wanted: &[(PathBuf, &SqlValue)],
    store: &mut dyn Store,
) -> Result<HashMap<PathBuf, usize>, String> {
    let mut users: HashMap<PathBuf, usize> = HashMap::new();
    let per_row = w
        .lock_file
        .as_ref()
        .is_some_and(crate::config::PathTemplate::has_id);
    if per_row {
        for (path, id) in wanted {
            let row = store.current_row(w, id).map_err(|e| e.full_message())?;
            let running = row.is_some_and(|r| {
                r.status.clone().into_text().as_deref() == Some(w.running_value.as_str())
            });
            *users.entry(path.clone()).or_default() += usize::from(running);
        }
        return Ok(users);
    }
    let mut any = 0;
    store
        .each_running_row_in(
            w,
            crate::store::sql::Page {
                after: None,
                limit: Some(1),
                index: None,
            },
            &mut |_| {
                any += 1;
                Ok(())
            },
        )
        .map_err(|e| e.full_message())?;
    for (path, _) in wanted {
        users.insert(path.clone(), any);
    }
    Ok(users)
}

/// Removes a marked row's legacy lock file when every condition of [`crate::check::release`]
/// holds: `held` is the file as opened again before the write (or why not), `users` the
/// running rows that name each lock file, counted after the commit.
fn release_lock(
    ctx: &Ctx<'_>,
    row: &RunningRow,
    held: Option<Result<Held, Release>>,
    users: &Result<HashMap<PathBuf, usize>, String>,
) -> Release {
    let held = match held {
        Some(Ok(h)) => h,
        Some(Err(outcome)) => return outcome,
        None => return Release::Failed("the lock file was not looked at before the write".into()),
    };
    let path = match lock_path(ctx.w, row) {
        Ok(p) => p,
        Err(why) => return Release::Failed(format!("lock_file: {why}")),
    };
    match users.as_ref().map(|u| u.get(&path).copied().unwrap_or(0)) {
        Err(why) => Release::Failed(format!(
            "the running rows that name it could not be counted after the write: {why}"
        )),
        Ok(0) => crate::check::release::release_held(held, ctx.host),
        Ok(n) => Release::Kept(format!(
            "{n} running row{} name{} it now (counted after the write); it may be another \
             row's lock",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" }
        )),
    }
}

/// The journal entry of one change.
fn journal_entry(ctx: &Ctx<'_>, row: &RunningRow, r: &RowReport, change: &str) -> JournalEntry {
    let to = r.plan.target.clone().unwrap_or_default();
    JournalEntry {
        change: change.to_string(),
        action: r.action,
        applied: r.applied,
        attention: r.attention(),
        held: r.plan.hold,
        reason: r.reason.clone(),
        note: r.note.clone(),
        target: r.target.clone(),
        lock_release: r.lock_release.as_ref().map(|l| l.as_str().to_string()),
        lock_release_detail: r
            .lock_release
            .as_ref()
            .and_then(|l| l.detail())
            .map(str::to_string),
        // The row, the evidence and the verdict as any change journals them (the start
        // matched tells this run of the row from a later run of the same id); selfheal's
        // own judgement, not a person's.
        ..crate::apply::entry(
            ctx.w,
            ctx.host,
            ctx.origin,
            row,
            &r.evidence,
            &r.decision,
            &ctx.w.running_value,
            &to,
        )
    }
}
