//! The un-park step of `check` (docs/design.md#unpark): a row parked in `manual_value` as `hung` whose
//! own heartbeat is fresh again after the park, while its worker provably lives and it is
//! within `max_age`, goes back to `running_value` — the stall that parked it is over
//! ([`lives_and_beats`]). Rows parked for `overtime` or for spent retries never are: a
//! fresh beat says nothing new about them. Under a clock-skew hold nothing is un-parked.
//!
//! The parked rows (at most [`LOOKED_AT`]) are judged as running rows are; only for those
//! that qualify is the journal read, for the park (applied, by selfheal, as `hung`), which
//! the last beat must follow. Just before the write what can have changed is read again;
//! the write is one compare-and-set from `manual_value` and the observed start and owner
//! through [`crate::apply`]. A dry run writes nothing.
//!
//! I/O: the parked rows, `/proc/locks`, each parked row's probes, the journal (only when a
//! row qualifies), and the writes above.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use super::{Out, Run};
use crate::apply;
use crate::clock::epoch;
use crate::config::Watch;
use crate::decide::{self, Action, Decision, Evidence, Heartbeat, Verdict};
use crate::error::Result;
use crate::evidence::{Scene, Snapshot, gather, read_again, sign_words, thresholds};
use crate::journal::{DatabaseId, RowId, Writer};
use crate::message::{self, Beat};
use crate::report::{Unparked, WatchRun};
use crate::store::{CasOutcome, Change, RunningRow, Schema, Select, Store};

/// How many of a watch's parked rows one run looks at, by id.
pub const LOOKED_AT: u32 = 10_000;

/// The park of a row, as the journal has it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Park {
    /// When it was journaled (RFC 3339), and as unix seconds.
    time: String,
    at: Option<i64>,
    /// Parked as `hung` by selfheal: the only park an un-park undoes.
    hung: bool,
}

/// Why a parked row's own evidence says its worker lives and beats, in words for its
/// message (`heartbeat fresh again after the park, lock held`); `None` when it does not:
/// the verdict now must be `alive` (heartbeat fresh, within `max_age`, no death signal),
/// and the row's evidence must say so by [`crate::decide::Life::back_to_running`] — its own
/// beat fresh (a heartbeat file with `{id}`, or the heartbeat column alone: a file other
/// rows share may beat for one of them), and its worker provably alive: the row's own lock
/// held (a `lock_file` with `{id}`, or one whose holder is the row's owner pid) or its
/// owner pid alive. Pure.
pub fn lives_and_beats(w: &Watch, ev: &Evidence, d: &Decision) -> Option<String> {
    if d.verdict != Verdict::Alive {
        return None;
    }
    // A file without `{id}` is never taken for the row's own beat here, whatever the
    // number of rows.
    if w.heartbeat_file.as_ref().is_some_and(|t| !t.has_id()) {
        return None;
    }
    let sign = ev.life(thresholds(w)).back_to_running()?;
    Some(format!(
        "heartbeat fresh again after the park, {}",
        sign_words(&sign)
    ))
}

/// The heartbeat's age, where it is one.
fn beat_age(ev: &Evidence) -> Option<u64> {
    match ev.heartbeat {
        Heartbeat::Age(a) => Some(a),
        _ => None,
    }
}

/// The last change the journal has for each of `wanted` (id key, start value) of watch
/// `w`, as a park (applied, to `manual`): `None` for a row whose last change is
/// something else. Only this database's entries are read.
fn parks(
    state_dir: &std::path::Path,
    db: &DatabaseId,
    w: &Watch,
    manual: &str,
    wanted: &HashSet<(String, String)>,
) -> Result<HashMap<(String, String), Option<Park>>> {
    let mut last: HashMap<(String, String), Option<Park>> = HashMap::new();
    crate::journal::read_all(state_dir, db, &mut |e| {
        if e.watch != w.name || !e.applied || !e.made() {
            return;
        }
        let key = (e.id.key(), e.started.clone().unwrap_or_default());
        if !wanted.contains(&key) {
            return;
        }
        let park = (e.to == manual && e.action == Action::MarkManual).then(|| Park {
            at: chrono::DateTime::parse_from_rfc3339(&e.time)
                .ok()
                .map(|t| t.timestamp()),
            time: e.time.clone(),
            hung: e.verdict == Verdict::Hung && !e.by_person(),
        });
        last.insert(key, park);
    })?;
    Ok(last)
}

/// The un-park step for one watch (see the module documentation), as its steps: the
/// parked rows whose own evidence says their worker lives and beats, the ones of those the
/// journal says selfheal parked as `hung`, each looked at again just before its write, then
/// written (not in a dry run) and reported.
pub(super) fn step(
    run: &mut Run<'_>,
    w: &Watch,
    schema: &Schema,
    store: &mut dyn Store,
    out: &mut Out<'_>,
    counts: &mut WatchRun,
) -> Result<()> {
    let Some(manual) = w.manual_value.as_deref() else {
        return Ok(());
    };
    if run.hold.is_some() {
        return Ok(());
    }
    let candidates = candidates(run, w, manual, store)?;
    if candidates.is_empty() {
        return Ok(());
    }
    let Some(parks) = hung_parks(run, w, manual, &candidates, out) else {
        return Ok(());
    };
    for (row, judged) in candidates {
        let Some(park) = parks.get(&key(&row)) else {
            continue;
        };
        // Just before the write: what can have changed, read again (the server's named
        // locks of the row too, where the watch names db_lock).
        let snapshot = crate::evidence::with_named(w, store, std::slice::from_ref(&row));
        let Some(mut u) = due(run, w, schema, &row, &judged, park, &snapshot) else {
            continue;
        };
        if !run.opts.dry_run {
            write(run, w, schema, store, &row, &mut u)?;
        }
        if u.applied || run.opts.dry_run {
            counts.unparked += 1;
        }
        out.rep.unparked(&u);
    }
    Ok(())
}

/// A row's key in the journal: its id and its start value.
fn key(row: &RunningRow) -> (String, String) {
    (RowId::from(&row.id).key(), row.started.raw.to_string())
}

/// The parked rows (at most [`LOOKED_AT`]) whose own evidence says their worker lives and
/// beats ([`lives_and_beats`]), with that evidence.
fn candidates(
    run: &Run<'_>,
    w: &Watch,
    manual: &str,
    store: &mut dyn Store,
) -> Result<Vec<(RunningRow, Evidence)>> {
    let t = thresholds(w);
    let mut parked: Vec<RunningRow> = Vec::new();
    store.each_row(w, Select::Status(manual, LOOKED_AT), &mut |r| {
        parked.push(r.row);
        Ok(())
    })?;
    // The server's named locks of these rows, where the watch names db_lock.
    let snapshot = crate::evidence::with_named(w, store, &parked);
    let mut candidates = Vec::new();
    for row in parked {
        // Each row's own now: a page of rows takes time.
        let scene = Scene::of_one_row(&run.clocks, &run.host, &snapshot);
        let ev = gather(w, &row, &scene);
        if lives_and_beats(w, &ev, &decide::decide(&ev, t)).is_some() {
            candidates.push((row, ev));
        }
    }
    Ok(candidates)
}

/// The parks selfheal made as `hung` of `candidates`, by [`key`], as the journal has them
/// (the row's last change); `None`, said, when the journal cannot be read: nothing is
/// un-parked then.
fn hung_parks(
    run: &Run<'_>,
    w: &Watch,
    manual: &str,
    candidates: &[(RunningRow, Evidence)],
    out: &mut Out<'_>,
) -> Option<HashMap<(String, String), Park>> {
    let db = run.cfg.database.as_ref()?;
    let wanted: HashSet<(String, String)> = candidates.iter().map(|(row, _)| key(row)).collect();
    match parks(
        &run.cfg.run.state_dir,
        &DatabaseId::of(db),
        w,
        manual,
        &wanted,
    ) {
        Ok(p) => Some(
            p.into_iter()
                .filter_map(|(k, park)| park.filter(|p| p.hung).map(|p| (k, p)))
                .collect(),
        ),
        Err(e) => {
            out.warn(format!(
                "watch {}: cannot read the journal to tell which parked rows were parked as \
                 hung ({}); none is un-parked this run",
                w.name,
                e.full_message()
            ));
            None
        }
    }
}

/// The un-park of `row`, parked as `park`, if it is still due just before the write: its
/// evidence read again still says its worker lives and beats, and its last beat came
/// after the park (the stall that parked it is over). Not yet applied.
fn due(
    run: &Run<'_>,
    w: &Watch,
    schema: &Schema,
    row: &RunningRow,
    judged: &Evidence,
    park: &Park,
    snapshot: &Snapshot,
) -> Option<Unparked> {
    let t = thresholds(w);
    let scene = Scene::of_one_row(&run.clocks, &run.host, snapshot);
    let ev = read_again(w, row, &scene, judged);
    let d = decide::decide(&ev, t);
    let words = lives_and_beats(w, &ev, &d)?;
    let since = epoch(SystemTime::now()).saturating_sub(park.at?);
    let beat = beat_age(&ev)?;
    if i64::try_from(beat).unwrap_or(i64::MAX) >= since {
        return None;
    }
    let parked_ago = u64::try_from(since).unwrap_or(0);
    let reason = crate::message::cut(
        &message::recovered(
            &words,
            ev.total_age.as_ref().ok().copied(),
            Beat::Ago(beat),
            &[format!("parked {} ago", message::duration(parked_ago))],
        ),
        schema.message_max,
    );
    Some(Unparked {
        watch: w.name.clone(),
        id: row.id.clone(),
        from: w.manual_value.clone().unwrap_or_default(),
        to: w.running_value.clone(),
        action: Action::Unpark,
        applied: false,
        parked_at: park.time.clone(),
        evidence: ev,
        decision: d,
        thresholds: t,
        reason,
        note: None,
    })
}

/// Puts `row` back to `running_value`: one compare-and-set from `manual_value` and the
/// observed start and owner (not the heartbeat column, which the worker moves), journaled
/// through [`crate::apply`]; what became of it goes into `u`.
fn write(
    run: &mut Run<'_>,
    w: &Watch,
    schema: &Schema,
    store: &mut dyn Store,
    row: &RunningRow,
    u: &mut Unparked,
) -> Result<()> {
    let writer = match &mut run.writer {
        Some(jw) => jw,
        None => run
            .writer
            .insert(Writer::open(&run.cfg.run.state_dir, run.origin.clone())?),
    };
    let change = Change {
        row,
        from_status: &u.from,
        new_status: &w.running_value,
        message: w.message_column.as_ref().map(|_| u.reason.clone()),
        bump_attempts: false,
        // Running again: no end time, no retry.
        set_ended: false,
        retry_at: None,
        match_heartbeat: false,
    };
    let mut entry = apply::entry(
        w,
        &run.host,
        &run.origin,
        row,
        &u.evidence,
        &u.decision,
        &u.from,
        &w.running_value,
    );
    entry.action = Action::Unpark;
    entry.reason.clone_from(&u.reason);
    entry.note = Some(format!(
        "parked as hung at {}; its own heartbeat beat {} ago, after the park",
        u.parked_at,
        message::duration(beat_age(&u.evidence).unwrap_or(0))
    ));
    let ctx = apply::Ctx {
        w,
        schema,
        run: &run.id,
    };
    let outcome = apply::apply(&ctx, store, writer, &change, entry)?.0;
    settled(u, outcome);
    Ok(())
}

/// What became of an un-park's compare-and-set, in its report.
fn settled(u: &mut Unparked, outcome: CasOutcome) {
    match outcome {
        CasOutcome::Applied => u.applied = true,
        CasOutcome::LostRace => {
            u.action = Action::LostRace;
            u.note = Some("the row moved on between the read and the write; left as it is".into());
        }
        CasOutcome::Failed(why) => {
            u.action = Action::None;
            u.note = Some(format!("write failed: {why}"));
        }
        CasOutcome::Busy => {
            u.action = Action::None;
            u.note =
                Some("the row is locked by another transaction; the next run tries again".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Basis, Lock, Owner, Thresholds};
    use crate::store::{SqlValue, TimeValue};

    fn watch(extra: &str) -> Watch {
        let text = format!(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"w\"\n\
             table = \"jobs\"\nstarted_column = \"start_time\"\nstale_after = \"5m\"\n\
             max_age = \"4h\"\nmanual_value = \"wait_manual\"\n{extra}\n"
        );
        let cfg = crate::config::from_str(
            &text,
            std::path::Path::new("/etc/selfheal/selfheal.toml"),
            &crate::config::Overrides::default(),
            &[],
        )
        .expect("valid watch");
        cfg.watches.into_iter().next().expect("one watch")
    }

    fn row(owner: Option<&str>) -> RunningRow {
        RunningRow {
            id: SqlValue::Int(7),
            started: TimeValue {
                raw: SqlValue::Text("2026-11-29 10:00:00".into()),
                stamp: Ok(None),
            },
            heartbeat: None,
            owner: owner.map(str::to_string),
            owner_raw: owner.map_or(SqlValue::Null, |o| SqlValue::Text(o.into())),
            attempts: None,
            lock_values: Vec::new(),
            owner_split_raw: None,
        }
    }

    /// Evidence as `gather` makes it for a per-row lock: a held lock is the row's own.
    fn ev(heartbeat: Heartbeat, lock: Lock, owner: Owner) -> Evidence {
        Evidence::aged(1800)
            .with_heartbeat(heartbeat)
            .with_lock_own(matches!(lock, Lock::Held { .. }))
            .with_lock(lock)
            .with_owner(owner)
    }

    const T: Thresholds = Thresholds {
        stale_after: 300,
        max_age: 14_400,
    };

    #[test]
    fn only_a_rows_own_fresh_beat_with_a_living_worker_unparks_it() {
        let per_row =
            watch("heartbeat_file = \"/run/app/{id}.hb\"\nlock_file = \"/run/app/{id}.lock\"");
        let held = |pid| Lock::Held { pid };
        let judge = |w: &Watch, _row: &RunningRow, e: Evidence| {
            let d = decide::decide(&e, T);
            lives_and_beats(w, &e, &d)
        };
        // Fresh, its own lock held: yes.
        assert_eq!(
            judge(
                &per_row,
                &row(None),
                ev(Heartbeat::Age(5), held(Some(42)), Owner::NotConfigured)
            )
            .as_deref(),
            Some("heartbeat fresh again after the park, lock held by pid 42")
        );
        // Fresh, its owner alive: yes.
        let owned = watch("heartbeat_file = \"/run/app/{id}.hb\"\nowner_column = \"worker\"");
        assert_eq!(
            judge(
                &owned,
                &row(Some("42")),
                ev(
                    Heartbeat::Age(5),
                    Lock::NotConfigured,
                    Owner::Alive { pid: 42 }
                )
            )
            .as_deref(),
            Some("heartbeat fresh again after the park, owner pid 42 alive")
        );
        // Still stale, or missing: no.
        assert_eq!(
            judge(
                &per_row,
                &row(None),
                ev(Heartbeat::Age(900), held(Some(42)), Owner::NotConfigured)
            ),
            None
        );
        assert_eq!(
            judge(
                &per_row,
                &row(None),
                ev(Heartbeat::Missing, held(Some(42)), Owner::NotConfigured)
            ),
            None
        );
        // Fresh, but nothing says the worker lives: no.
        assert_eq!(
            judge(
                &per_row,
                &row(None),
                ev(Heartbeat::Age(5), Lock::Absent, Owner::NotConfigured)
            ),
            None
        );
        // Past max_age: overtime, never.
        let mut old = ev(Heartbeat::Age(5), held(Some(42)), Owner::NotConfigured);
        old.total_age = Ok(20_000);
        assert_eq!(judge(&per_row, &row(None), old), None);
        // A heartbeat file other rows share may beat for one of them: no.
        let shared =
            watch("heartbeat_file = \"/run/app/all.hb\"\nlock_file = \"/run/app/{id}.lock\"");
        assert_eq!(
            judge(
                &shared,
                &row(None),
                ev(Heartbeat::Age(5), held(Some(42)), Owner::NotConfigured)
            ),
            None
        );
        // A per-kind lock proves the row's worker only when it is the row's own (its
        // holder the row's owner: `gather` says which, tested there).
        let per_kind = watch(
            "heartbeat_column = \"beat\"\nlock_file = \"/run/app/job.lock\"\nowner_column = \"worker\"",
        );
        let not_visible = Owner::NotVisible { pid: 42 };
        let mut another_run = ev(Heartbeat::Age(5), held(Some(99)), not_visible.clone());
        another_run.lock_own = false;
        assert_eq!(
            judge(&per_kind, &row(Some("42")), another_run),
            None,
            "held by another run of the job"
        );
        assert!(
            judge(
                &per_kind,
                &row(Some("42")),
                ev(Heartbeat::Age(5), held(Some(42)), not_visible)
            )
            .is_some()
        );
        // A beat that is not the row's own (a shared file, another row's column) no.
        let mut shared_beat = ev(Heartbeat::Age(5), held(Some(42)), Owner::NotConfigured);
        shared_beat.heartbeat_own = false;
        assert_eq!(judge(&per_kind, &row(None), shared_beat), None);
        // An unknown verdict: no.
        let d = Decision {
            verdict: Verdict::Unknown,
            basis: Basis::Unreadable("x".into()),
            overruled: None,
        };
        let e = ev(Heartbeat::Age(5), held(Some(42)), Owner::NotConfigured);
        assert_eq!(lives_and_beats(&per_row, &e, &d), None);
    }
}
