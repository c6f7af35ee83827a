//! `selfheal check`: read each watch's running rows, gather the evidence, decide, and apply
//! one compare-and-set per row that a verdict condemns.
//!
//! Order of work, so that bad input never causes a partial write: the configuration is
//! already validated; then the run lock (not for dry runs), the database clock, every
//! watch's schema (and that its status column can hold every status the watch writes);
//! only then rows are judged and written. Just before each write the file
//! evidence (heartbeat mtime, lock, owner pid) is read again, and a row whose evidence
//! changed is left alone. The job's lock file is never deleted here, except by
//! `release_lock = "if_free"` after the row's compare-and-set applied (see [`crate::release`]).
//!
//! Four rooms: this module is the run (its options and exit status, the run lock, the
//! clocks, settling a stopped run, each watch in turn, `last-run.json` and the metrics);
//! `sweep.rs` turns a watch's rows into judged rows (nothing written); `batch.rs` writes a
//! watch's condemned rows (intents, compare-and-set, release, journal); `unpark.rs` puts
//! back to running the parked rows whose own heartbeat beats again after a park as `hung`
//! (SPEC §13), one change at a time through [`crate::apply`]. A new per-row
//! verdict or hold belongs in `decide` and `sweep.rs`; anything new that is written goes
//! through `batch.rs` and the journal.
//!
//! I/O here: the run lock, the database connection (clock, schemas, the advisory lock —
//! per watch and host when rows are owned, so hosts judge their own rows side by side —,
//! recent runtimes, the count of rows parked in `manual_value`), the confirmation counts
//! (`state_dir/confirmations.json`: read by every run that has a watch with `confirm`
//! above 1, replaced only by a real one), `state_dir/last-run.json` and the metrics file,
//! each only in a real run, and `state_dir/reminders.json` in a real run of the cron text
//! ([`crate::remind`]); the rest through `sweep.rs` and `batch.rs`. A run that prints
//! anyway also looks at the modes of the files holding the database password
//! ([`crate::store::credentials::exposed_secrets`]) and warns of those every user can read.

mod batch;
mod sweep;
pub mod unpark;

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use serde_json::json;

use crate::clock::{Clocks, clock_skew, skew_text};
use crate::config::{Config, Database, Watch};
use crate::confirmations::{self, Tally, Unread};
use crate::decide::{Action, Hold};
use crate::error::{Error, Result, exit};
use crate::evidence::thresholds;
use crate::host::Host;
use crate::journal::{Origin, Pending, RowId, RunId, Writer};
use crate::remind::Reminder;
use crate::report::{Parked, Reporter, RowReport, Summary, WatchInfo, WatchRun, summary_json};
use crate::store::{self, RunningRow, Schema, Store};

use batch::{Batch, BatchEnd};
use sweep::{SweepCtx, Swept, row_report};

/// How a check runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Decide everything, write nothing (no rows, no journal, no lock, no advisory lock).
    pub dry_run: bool,
    /// Act even when the breaker trips or the clocks disagree.
    pub force: bool,
    /// The cron text: a problem already shown (same row, verdict and basis; the same
    /// run-level warning) is shown again only after `remind_every`, remembered in
    /// `state_dir/reminders.json` ([`crate::remind`]). Real runs only.
    pub remind: bool,
}

/// The exit status for a finished run (SPEC §7).
pub fn exit_code(s: &Summary) -> u8 {
    if s.totals().attention > 0 {
        exit::ATTENTION
    } else if !s.busy_watches.is_empty() {
        exit::BUSY
    } else {
        exit::OK
    }
}

/// Where a run's findings go: the summary (JSON, `last-run.json`, metrics) and the
/// reporter, which the reminders spare what the cron text already showed.
struct Out<'a> {
    rep: &'a mut dyn Reporter,
    summary: &'a mut Summary,
    reminder: Option<Reminder>,
}

impl Out<'_> {
    fn warn(&mut self, msg: String) {
        self.rep.warning(&msg);
        self.summary.warnings.push(msg);
    }

    /// A run-level warning of a kind the cron text shows once per `remind_every`
    /// (`watch`: the watch it is about, if any).
    fn warn_once(&mut self, kind: &'static str, watch: Option<&str>, msg: String) {
        let due = self
            .reminder
            .as_mut()
            .is_none_or(|r| r.warning_due(kind, watch));
        if due {
            self.rep.warning(&msg);
        } else {
            self.rep.warning_already_told(&msg);
        }
        self.summary.warnings.push(msg);
    }
}

/// The database as the reminders name it (never a user or password).
fn database_label(db: &Database) -> String {
    match &db.url {
        crate::config::DbUrl::Sqlite(p) => format!("sqlite://{}", p.display()),
        crate::config::DbUrl::Mysql(u) => crate::config::redact_url(u),
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
        let result = run_watches(
            cfg,
            db,
            *opts,
            &mut Out {
                rep,
                summary: &mut summary,
                reminder: None,
            },
        );
        tell_exposed_secrets(cfg, db, result.is_err(), rep);
        result?;
        rep.finish(&summary);
        return Ok(summary);
    }
    // The run lock lives in the state directory unless run.lock_file says otherwise; the
    // first run of a configuration creates that directory. Either way, a state directory
    // that is not private to this user is refused before anything else is done (exit 3).
    let lock_inside = cfg.run.lock_file.starts_with(&cfg.run.state_dir);
    if lock_inside {
        crate::state::create_dir(&cfg.run.state_dir)?;
    }
    let _run_lock = crate::runlock::acquire(&cfg.run.lock_file)?;
    // One that cannot be created or written is said by the last-run report's warning, and
    // fails the first change that needs the journal; one that is not private, at once.
    if !lock_inside
        && let Err(e @ Error::Refused { .. }) = crate::state::create_dir(&cfg.run.state_dir)
    {
        return Err(e);
    }
    let started = SystemTime::now();
    let began = Instant::now();
    let mut out = Out {
        rep,
        summary: &mut summary,
        reminder: None,
    };
    if opts.remind {
        let (reminder, warning) = Reminder::load(
            &cfg.run.state_dir,
            cfg.run.remind_every,
            crate::clock::epoch(started),
            database_label(db),
        );
        out.reminder = Some(reminder);
        if let Some(w) = warning {
            out.warn(w);
        }
    }
    let result = run_watches(cfg, db, *opts, &mut out);
    // What the cron text showed, for the next run; only after a whole run (a failed run's
    // problems are shown again next time, never lost).
    if let (Ok(()), Some(r)) = (&result, out.reminder.take())
        && let Err(e) = r.save(&cfg.run.state_dir)
    {
        out.warn(format!(
            "{}; the next run shows every problem again",
            e.full_message()
        ));
    }
    let status = match &result {
        Ok(()) => exit_code(out.summary),
        Err(e) => e.exit_code(),
    };
    write_last_run(cfg, &mut out, &result, status, started, began);
    let metrics = cfg.run.metrics_file.as_ref().map(|path| {
        let host = Host::for_config(cfg);
        let run = crate::metrics::Run {
            host: &host.name,
            summary: result.is_ok().then_some(&*out.summary),
            exit_status: status,
            started,
            duration: began.elapsed(),
        };
        crate::metrics::update(path, cfg, &host, &run)
    });
    tell_exposed_secrets(cfg, db, result.is_err(), &mut *out.rep);
    result?;
    rep.finish(&summary);
    // An unwritable metrics file fails the run (exit 3), after the rows were handled.
    if let Some(m) = metrics {
        m?;
    }
    Ok(summary)
}

/// A database password in a file every user can read: one warning per such file, once per
/// run, and only from a run that prints anyway (a change, a row that needs a person,
/// another warning, `--explain`, JSON, or an error), so the silent cron run stays silent.
/// `doctor` says it every time.
fn tell_exposed_secrets(cfg: &Config, db: &Database, failed: bool, rep: &mut dyn Reporter) {
    if !(failed || rep.spoke()) {
        return;
    }
    let inputs = crate::store::credentials::Inputs::from_env();
    for s in crate::store::credentials::exposed_secrets(db, cfg.source.as_deref(), &inputs) {
        rep.warning(&format!("{}; fix: {}", s.message(), s.fix()));
    }
}

/// Writes `state_dir/last-run.json`. Failing to is not worth failing a run whose rows
/// were handled and journaled: it is a warning, which also tells the operator, before any
/// row needs it, that the state directory (and so the journal) is unusable.
fn write_last_run(
    cfg: &Config,
    out: &mut Out<'_>,
    result: &Result<()>,
    status: u8,
    started: SystemTime,
    began: Instant,
) {
    let mut body = summary_json(out.summary, &out.summary.warnings);
    if let Some(o) = body.as_object_mut() {
        o.remove("summary");
        let time = chrono::DateTime::<chrono::Utc>::from(started)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        o.insert("time".into(), json!(time));
        let ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
        o.insert("duration_ms".into(), json!(ms));
        o.insert("exit_status".into(), json!(status));
        let error = result.as_ref().err().map(Error::full_message);
        o.insert("error".into(), json!(error));
        o.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    }
    if let Err(e) = crate::state::write_last_run(&cfg.run.state_dir, &body)
        && result.is_ok()
    {
        out.warn(format!(
            "cannot write the last-run report: {}; the journal needs this directory too, \
             so the next change would fail; fix: {}",
            e.full_message(),
            crate::fix::for_error(&e, "check")
                .unwrap_or_else(|| crate::fix::state_dir_fix(&cfg.run.state_dir, "check"))
        ));
    }
}

/// What every watch of a run shares.
struct Run<'a> {
    cfg: &'a Config,
    opts: CheckOptions,
    host: Host,
    clocks: Clocks,
    /// Holds back everything not conclusive (the clocks disagree).
    hold: Option<Hold>,
    id: RunId,
    /// The configuration and database this run's journal entries and intents carry.
    origin: Origin,
    /// Opened before the run's first change (or to settle a stopped run's intents).
    writer: Option<Writer>,
    /// The confirmation counts, when a watch of the run needs them.
    tally: Option<Tally>,
}

/// Everything after the run lock: connect, read the clocks and every schema, settle what a
/// stopped run left, then judge and handle each watch's rows.
fn run_watches(cfg: &Config, db: &Database, opts: CheckOptions, out: &mut Out<'_>) -> Result<()> {
    let mut store = store::open(db, opts.dry_run)?;
    for note in store.notes() {
        out.warn(note);
    }
    let host = Host::for_config(cfg);
    out.summary.host.clone_from(&host.name);
    let clocks = Clocks {
        db: store.clock()?,
        tz: db.timezone,
        tolerance_s: cfg.run.clock_tolerance.as_secs(),
    };
    let hold = compare_clocks(cfg, opts, &clocks, out);

    // Every schema first: a missing column in the last watch must not leave the first
    // watch's rows half-handled. So too a status the column cannot hold (exit 2).
    let mut schemas: HashMap<&str, Schema> = HashMap::new();
    for w in &cfg.watches {
        let schema = store.schema(w)?;
        store::types::check_values(w, &schema)?;
        schemas.insert(&w.name, schema);
    }

    let tally = load_tally(cfg, db, opts, out);
    let mut run = Run {
        cfg,
        opts,
        id: RunId::new(&host),
        origin: Origin::of(cfg, db),
        host,
        clocks,
        hold,
        writer: None,
        tally,
    };
    if !opts.dry_run && Pending::left_behind(&cfg.run.state_dir) {
        let jw = run
            .writer
            .insert(Writer::open(&cfg.run.state_dir, run.origin.clone())?);
        for msg in crate::recovery::settle(cfg, store.as_mut(), jw)? {
            out.warn(msg);
        }
    }
    for w in &cfg.watches {
        let schema = schemas.remove(w.name.as_str());
        check_watch(&mut run, w, schema, store.as_mut(), out)?;
    }
    // Like the journal: a run that cannot keep the counts must say so (exit 3), or no
    // inferred verdict would ever act.
    if let Some(t) = run.tally.take()
        && !opts.dry_run
        && t.worth_writing()
    {
        let counts = t.into_counts(crate::clock::epoch(SystemTime::now()));
        confirmations::save(&cfg.run.state_dir, &counts)?;
    }
    Ok(())
}

/// The confirmation counts the last real run left, when a watch of this run needs them
/// (`confirm` above 1). A damaged file is started over (the next write mends it). One that
/// cannot be read (another user's) is said, and the run counts as a first run would: a dry
/// run or `--explain` shows that view; a real run replaces the file when it has anything
/// to count, and fails (exit 3) if it cannot — an inferred verdict that can never be
/// confirmed must not go unnoticed.
fn load_tally(cfg: &Config, db: &Database, opts: CheckOptions, out: &mut Out<'_>) -> Option<Tally> {
    if cfg.watches.iter().all(|w| w.confirm <= 1) {
        return None;
    }
    let key = confirmations::database_key(db);
    Some(match confirmations::load(&cfg.run.state_dir) {
        Ok(counts) => Tally::new(key, counts),
        Err(Unread::Damaged(e)) => {
            out.warn(format!(
                "{}; the counts of inferred verdicts start over",
                e.full_message()
            ));
            Tally::new(key, Some(confirmations::Counts::default()))
        }
        Err(Unread::Failed(e)) => {
            out.warn(format!(
                "cannot read the confirmation counts ({}); {}",
                e.full_message(),
                if opts.dry_run {
                    "showing what a first run would do"
                } else {
                    "counting as a first run would"
                }
            ));
            Tally::new(key, None)
        }
    })
}

/// Measures the database clock against the host's; beyond the tolerance, warns and (unless
/// forced) holds back everything not conclusive.
fn compare_clocks(
    cfg: &Config,
    opts: CheckOptions,
    clocks: &Clocks,
    out: &mut Out<'_>,
) -> Option<Hold> {
    let skew = clock_skew(&clocks.db, SystemTime::now());
    out.summary.clock_skew_s = Some(skew);
    if skew.unsigned_abs() <= cfg.run.clock_tolerance.as_secs() {
        return None;
    }
    out.summary.clock_skew_exceeded = true;
    out.warn_once(
        "clock_skew",
        None,
        format!(
            "{}{}",
            skew_text(skew, cfg.run.clock_tolerance.as_secs()),
            if opts.force {
                "; --force: acting on all evidence anyway"
            } else {
                "; acting only on conclusive evidence (owner pid gone, lock free)"
            }
        ),
    );
    (!opts.force).then_some(Hold::ClockSkew)
}

/// One watch: skipped (another host's, or another run holds its lock), or judged, written
/// and reported.
fn check_watch(
    run: &mut Run<'_>,
    w: &Watch,
    schema: Option<Schema>,
    store: &mut dyn Store,
    out: &mut Out<'_>,
) -> Result<()> {
    let t = thresholds(w);
    let mut info = WatchInfo {
        name: w.name.clone(),
        table: w.table.to_string(),
        matches: w
            .matches
            .iter()
            .map(|(c, v)| format!("{c} = {v:?}"))
            .collect(),
        host: run.host.name.clone(),
        stale_after_s: t.stale_after,
        max_age_s: t.max_age,
        skipped: None,
    };
    let mut counts = WatchRun {
        name: w.name.clone(),
        ..WatchRun::default()
    };
    if let Some(h) = &w.host
        && !run.host.is_me(h)
    {
        info.skipped = Some(format!("it runs on host {h}; this is {}", run.host.name));
        counts.skipped.clone_from(&info.skipped);
        counts.other_host = true;
        out.summary.per_watch.push(counts);
        out.rep.watch(&info);
        return Ok(());
    }
    let t0 = Instant::now();
    // Each host judges only the rows it owns: the lock is then this host's alone.
    let lock_host = w.owner_column.as_ref().map(|_| run.host.own_name());
    if !run.opts.dry_run && !store.try_watch_lock(w, lock_host)? {
        info.skipped = Some(match lock_host {
            Some(_) => "another selfheal run on this host is checking it".into(),
            None => "another selfheal run (on this or another host) is checking it".into(),
        });
        counts.skipped.clone_from(&info.skipped);
        counts.duration = t0.elapsed();
        out.summary.per_watch.push(counts);
        out.summary.busy_watches.push(w.name.clone());
        out.rep.watch(&info);
        return Ok(());
    }
    out.rep.watch(&info);
    out.summary.watches_checked += 1;
    if let Some(r) = out.reminder.as_mut() {
        r.checked(&w.name);
    }
    let Some(schema) = schema else {
        return Ok(());
    };
    max_age_check(store, w, &schema, &run.clocks, out);
    let ctx = SweepCtx {
        clocks: &run.clocks,
        host: &run.host,
        run_hold: run.hold,
        force: run.opts.force,
    };
    let swept = sweep::sweep(w, store, &ctx, run.tally.as_mut(), &mut |kind, m| {
        out.warn_once(kind, Some(&w.name), m);
    })?;
    if swept.breaker_tripped {
        out.summary.breaker_tripped.push(w.name.clone());
        counts.breaker_tripped = true;
    }
    let result = write_and_report(run, w, &schema, swept, store, out, &mut counts)
        .and_then(|()| unpark::step(run, w, &schema, store, out, &mut counts))
        .and_then(|()| count_parked(run, w, store, out, &mut counts));
    counts.duration = t0.elapsed();
    out.summary.per_watch.push(counts);
    result
}

/// How many parked rows `--explain` lists.
const PARKED_LISTED: u32 = 10;

/// Counts the rows parked in `manual_value` (after this run's writes): one `COUNT(*)`
/// through the status index per watch, whose cost follows the parked rows, not the
/// table. A dry run (`--explain`) also lists the first few with their age.
fn count_parked(
    run: &Run<'_>,
    w: &Watch,
    store: &mut dyn Store,
    out: &mut Out<'_>,
    counts: &mut WatchRun,
) -> Result<()> {
    let Some(manual) = &w.manual_value else {
        return Ok(());
    };
    let count = store.count_parked(w, manual)?;
    counts.parked = Some(count);
    let rows = if run.opts.dry_run && count > 0 {
        store
            .parked_rows(w, manual, PARKED_LISTED)?
            .into_iter()
            .map(|r| {
                let age = match r.started.stamp {
                    Ok(Some(s)) => crate::clock::age_on_db_clock(s, &run.clocks.db)
                        .ok()
                        .and_then(|a| u64::try_from(a).ok()),
                    _ => None,
                };
                (r.id, age)
            })
            .collect()
    } else {
        Vec::new()
    };
    out.rep.parked(&Parked {
        watch: w.name.clone(),
        value: manual.clone(),
        count,
        rows,
        choices: crate::person::choices(w, true).join("|"),
    });
    Ok(())
}

/// The configuration of the seed incident: a cap below the runs it must let live. Bounded
/// to the latest rows by primary key, so it costs the same on any table.
fn max_age_check(
    store: &mut dyn Store,
    w: &Watch,
    schema: &Schema,
    clocks: &Clocks,
    out: &mut Out<'_>,
) {
    match crate::history::recent_max_age_check(store, w, schema, clocks) {
        Ok(Some(warn)) => {
            out.warn_once("max_age_too_low", Some(&w.name), warn.message());
            out.summary.max_age_too_low.push(warn);
        }
        Ok(None) => {}
        Err(e) => out.warn(format!(
            "watch {}: cannot read recent runtimes for the max_age check: {}",
            w.name,
            e.full_message()
        )),
    }
}

/// Writes the rows a real run changes, then reports every row in order. The row whose
/// write failed the run, and the rows after it, are not reported.
fn write_and_report(
    run: &mut Run<'_>,
    w: &Watch,
    schema: &Schema,
    swept: Swept,
    store: &mut dyn Store,
    out: &mut Out<'_>,
    counts: &mut WatchRun,
) -> Result<()> {
    let dry_run = run.opts.dry_run;
    let rows = swept.rows;
    // Reports are made as rows are output; only the rows to write get theirs first.
    let writes: Vec<usize> = (0..rows.len())
        .filter(|&i| !dry_run && rows[i].plan.writes())
        .collect();
    let mut batch: Vec<(RunningRow, RowReport)> = writes
        .iter()
        .map(|&i| {
            let report = row_report(w, schema, &run.host, rows[i].clone());
            (rows[i].row.clone(), report)
        })
        .collect();
    let end = if batch.is_empty() {
        BatchEnd::default()
    } else {
        let ctx = batch::Ctx {
            w,
            schema,
            state_dir: &run.cfg.run.state_dir,
            clocks: &run.clocks,
            host: &run.host,
            hold: swept.hold,
            run: &run.id,
            origin: &run.origin,
        };
        let mut b = Batch {
            ctx,
            store,
            writer: &mut run.writer,
            lock_seen: writes.iter().map(|&i| rows[i].lock_seen.clone()).collect(),
        };
        let end = b.write(&mut batch)?;
        BatchEnd {
            stopped_at: end.stopped_at.and_then(|k| writes.get(k).copied()),
            error: end.error,
        }
    };
    // A row written is no longer running: it keeps no confirmation count.
    if let Some(t) = run.tally.as_mut() {
        for (row, _) in batch.iter().filter(|(_, r)| r.applied) {
            t.forget(w, &RowId::from(&row.id).key(), &row.started.raw.to_string());
        }
    }
    let mut written = writes
        .into_iter()
        .zip(batch.into_iter().map(|(_, r)| r))
        .peekable();
    for (i, j) in rows.into_iter().enumerate() {
        if end.stopped_at.is_some_and(|s| i >= s) {
            break;
        }
        let started = j.row.started.raw.to_string();
        let report = match written.next_if(|(k, _)| *k == i) {
            Some((_, r)) => r,
            None => row_report(w, schema, &run.host, j),
        };
        report_row(report, &started, dry_run, out, counts);
    }
    end.error.map_or(Ok(()), Err)
}

/// Counts and reports one row; a row that needs a person and was not changed is shown in
/// the cron text only when the reminders say so.
fn report_row(
    mut report: RowReport,
    started: &str,
    dry_run: bool,
    out: &mut Out<'_>,
    counts: &mut WatchRun,
) {
    if !dry_run && !report.plan.writes() {
        report.action = Action::None;
    }
    if let Some(r) = out.reminder.as_mut()
        && !report.applied
        && report.attention()
    {
        let failed = report
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("write failed"));
        let what = crate::remind::row_problem(
            report.decision.verdict,
            &report.decision.basis,
            report.plan.hold,
            failed,
        );
        report.already_told = !r.row_due(&report.watch, &report.id.to_string(), started, what);
    }
    counts.count(&report, dry_run);
    out.rep.row(&report);
}
