//! One change outside a sweep — an un-park by `check` ([`crate::check`]'s un-park step),
//! a person's decision (`selfheal resolve`, [`crate::resolve`]) — made in the order
//! `check`'s batches keep for theirs ([`crate::journal`]): its intent on disk first
//! (`state_dir/pending.jsonl`), then the compare-and-set
//! ([`crate::store::JobTable::compare_and_set`], the one statement through which selfheal
//! writes a row), then its journal line, flushed, and the intent taken out again. A
//! process killed anywhere in between leaves the intent behind, and the next real `check`
//! settles it ([`crate::check::recovery`]): the journal lists every applied change exactly once,
//! whoever made it.
//!
//! Also the journal entry such a change carries ([`entry`]): the row, the evidence and
//! the verdict as they were just before the write.
//!
//! I/O: the intents file and the journal (through the [`Writer`] the caller opened), one
//! compare-and-set.

use crate::clock::now_rfc3339;
use crate::config::Watch;
use crate::decide::{Action, Decision, Evidence};
use crate::error::Result;
use crate::evidence::{self, owner_host, thresholds};
use crate::host::Host;
use crate::journal::{JournalEntry, Origin, RowId, RunId, Writer};
use crate::store::{CasOutcome, Change, RunningRow, Schema, Store};

/// The journal entry of a change to `row` from status `from` to `to`, judged by
/// `decision` on `evidence` just before it: everything but what the caller adds (the
/// action, the message, a note, who decided).
#[allow(clippy::too_many_arguments)] // one entry, described in full by its caller
pub fn entry(
    w: &Watch,
    host: &Host,
    origin: &Origin,
    row: &RunningRow,
    evidence: &Evidence,
    decision: &Decision,
    from: &str,
    to: &str,
) -> JournalEntry {
    let t = thresholds(w);
    JournalEntry {
        lock_file: crate::probe::lock::file_looked_at(w, row, evidence),
        time: now_rfc3339(),
        host: host.name.clone(),
        owner_host: owner_host(row, evidence, host),
        database: Some(origin.database.clone()),
        watch: w.name.clone(),
        table: w.table.to_string(),
        id: RowId::from(&row.id),
        started: Some(row.started.raw.to_string()),
        attempts: row.attempts,
        from: from.to_string(),
        to: to.to_string(),
        verdict: decision.verdict,
        basis: decision.basis.code(),
        conclusive: decision.conclusive(),
        action: Action::None,
        target: Some(to.to_string()),
        stale_after_s: t.stale_after,
        max_age_s: t.max_age,
        evidence: evidence::render(evidence).record,
        ..JournalEntry::default()
    }
}

/// What [`apply`] writes with.
pub struct Ctx<'a> {
    pub w: &'a Watch,
    pub schema: &'a Schema,
    /// The run (or the `resolve` invocation) whose change this is.
    pub run: &'a RunId,
}

/// Makes one change: its intent (the journal entry, with a new change id) on disk, the
/// compare-and-set, and — when it applied — the journal line, flushed; then the intent is
/// taken out. Returns what the compare-and-set came to, with the entry as journaled.
/// `Err`: the intents file or the journal could not be written, or the database failed
/// (then the intent stays, for the next run to settle: the change may or may not have
/// been made).
pub fn apply(
    ctx: &Ctx<'_>,
    store: &mut dyn Store,
    writer: &mut Writer,
    change: &Change<'_>,
    mut entry: JournalEntry,
) -> Result<(CasOutcome, JournalEntry)> {
    entry.change = ctx.run.change();
    entry.applied = true;
    let header = writer
        .origin
        .header(ctx.run.as_str(), store.session(), now_rfc3339());
    writer
        .pending
        .begin(&header, &mut std::iter::once(entry.clone()))?;
    let outcome = store.compare_and_set(ctx.w, ctx.schema, change)?;
    if outcome == CasOutcome::Applied {
        entry.time = now_rfc3339();
        writer.journal.append(&entry)?;
        writer.journal.sync()?;
    } else {
        entry.applied = false;
    }
    // Harmless if it fails: the next run finds the change in the journal (or the row
    // unchanged) and drops the intent.
    let _ = writer.pending.clear();
    Ok((outcome, entry))
}
