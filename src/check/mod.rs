//! `selfheal check`: read each watch's running rows, gather the evidence, decide, and apply
//! one compare-and-set per row that a verdict condemns.
//!
//! Order of work, so that bad input never causes a partial write: the configuration is
//! already validated; then the run lock (not for dry runs), the database clock, every
//! watch's schema (and that its status column can hold every status the watch writes);
//! only then rows are judged and written. Just before each write the file
//! evidence (heartbeat mtime, lock, owner pid) is read again, and a row whose evidence
//! changed is left alone. The job's lock file is never deleted here, except by
//! `release_lock = "if_free"` after the row's compare-and-set applied (see [`crate::check::release`]).
//!
//! Its rooms. This module is the run: its options and exit status, the run lock, the
//! clocks, each watch in turn, `last-run.json` and the metrics ([`run`] reads as the list
//! of those steps). Per watch, `sweep.rs` judges the running rows (nothing written),
//! `batch.rs` writes the condemned ones (intents, compare-and-set, release, journal), and
//! [`unpark`] puts back to running the parked rows whose own heartbeat beats again after a
//! park as `hung` (docs/design.md#person). Across runs: [`confirmations`] counts inferred verdicts,
//! `decided.rs` reads a person's `--as running`, [`remind`] keeps what the cron text told,
//! [`streak`] trouble that lasts and [`recent`] the recent runs read, and [`recovery`]
//! settles a stopped run's intents; [`release`] removes a legacy lock file. A new per-row
//! verdict or hold belongs in `decide` and `sweep.rs`; anything new that is written goes
//! through `batch.rs` and the journal.
//!
//! I/O here: the run lock, the database connection (clock, schemas, the advisory lock —
//! per watch and host when rows are owned, so hosts judge their own rows side by side —,
//! recent runtimes at most once per 15 minutes a watch ([`recent`]), the count of rows
//! parked in `manual_value`), the confirmation counts (`state_dir/confirmations.json`:
//! read by every run that has a watch with `confirm` above 1, replaced only by a real one),
//! `state_dir/last-run.json` and the metrics file, each only in a real run,
//! `state_dir/reminders.json` in a real run of the cron text ([`crate::check::remind`]),
//! and `state_dir/run-state.json` read by every run, replaced only by a real one
//! ([`streak`]; and, for a watch busy for longer than 2 × `stale_after`, who holds its
//! advisory lock); the rest through `sweep.rs` and `batch.rs`. A run that prints
//! anyway also looks at the modes of the files holding the database password
//! ([`crate::store::credentials::exposed_secrets`]) and warns of those every user can read.

mod backoff;
mod batch;
pub mod collation;
pub mod confirmations;
mod decided;
pub mod recent;
pub mod recovery;
pub mod release;
pub mod remind;
mod room;
pub mod streak;
mod sweep;
pub mod unpark;

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use serde_json::json;

use crate::check::remind::Reminder;
use crate::clock::{Clocks, clock_skew, skew_text};
use crate::config::{Config, Database, Watch};
use crate::decide::{Action, Hold};
use crate::error::{Error, Result, exit};
use crate::evidence::thresholds;
use crate::host::Host;
use crate::journal::{Origin, Pending, RowId, RunId, Writer};
use crate::report::{Parked, Reporter, RowReport, Summary, WatchInfo, WatchRun, summary_json};
use crate::store::{self, RunningRow, Schema, Store};
use confirmations::{Tally, Unread};

use batch::{Batch, BatchEnd, WRITE_GROUP};
use streak::Streaks;
use sweep::{SweepCtx, row_report};

/// How a check runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Decide everything, write nothing (no rows, no journal, no lock, no advisory lock).
    pub dry_run: bool,
    /// Act even when the breaker trips or the clocks disagree.
    pub force: bool,
    /// The cron text: a problem already shown (same row, verdict and basis; the same
    /// run-level warning) is shown again only after `remind_every`, remembered in
    /// `state_dir/reminders.json` ([`crate::check::remind`]). Real runs only.
    pub remind: bool,
}

/// The exit status for a finished run (docs/design.md#exit-status): 1 while any row needs a person — also
/// rows parked in `manual_value` earlier (the cron text tells of them only per
/// `remind_every`, but a systemd unit shows failed and monitoring sees it every run).
pub fn exit_code(s: &Summary) -> u8 {
    if s.totals().attention > 0 || s.parked() > 0 {
        exit::ATTENTION
    } else if !s.busy_watches.is_empty() {
        exit::BUSY
    } else {
        exit::OK
    }
}

/// Where a run's findings go: the summary (JSON, `last-run.json`, metrics) and the
/// reporter, which the reminders spare what the cron text already showed; and what the
/// next real run is to know ([`Streaks`]: busy watches, a log that cannot be reached, the
/// recent runs read for the `max_age` check).
struct Out<'a> {
    rep: &'a mut dyn Reporter,
    summary: &'a mut Summary,
    reminder: Option<Reminder>,
    /// A real run's, saved at its end.
    streaks: Option<Streaks>,
    /// A dry run's view of what real runs left (the recent runs it may use), never saved.
    earlier: Option<Streaks>,
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

/// The database as the reminders name it (never a password).
fn database_label(db: &Database) -> String {
    db.url.label()
}

/// Runs a check over every watch of `cfg`, step by step.
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
    let db = configured_database(cfg)?;
    // What the driver makes of the URL, before anything is touched.
    crate::store::vet(db)?;
    if opts.dry_run {
        return dry_run(cfg, db, *opts, rep, summary);
    }
    let _run_lock = take_run_lock(cfg)?;
    let began = Began::now();
    let mut out = Out {
        rep,
        summary: &mut summary,
        reminder: None,
        streaks: None,
        earlier: None,
    };
    recall_earlier_runs(cfg, db, *opts, &began, &mut out);
    let result = run_watches(cfg, db, *opts, &mut out);
    tell_log_failure(cfg, &mut out);
    keep_for_next_run(cfg, &result, &mut out);
    let status = match &result {
        Ok(()) => exit_code(out.summary),
        Err(e) => e.exit_code(),
    };
    write_last_run(cfg, &mut out, &result, status, &began);
    let metrics = write_metrics(cfg, &out, &result, status, &began);
    tell_exposed_secrets(cfg, db, result.is_err(), &mut *out.rep);
    result?;
    rep.finish(&summary);
    // An unwritable metrics file fails the run (exit 3), after the rows were handled.
    metrics.map(|()| summary)
}

/// The `[database]` a run with watches needs.
fn configured_database(cfg: &Config) -> Result<&Database> {
    cfg.database
        .as_ref()
        .ok_or_else(|| Error::Usage("no [database] configured".into()))
}

/// A dry run (`--dry-run`, `--explain`): every watch judged, nothing written, no lock
/// taken, nothing remembered. It may use the recent runs a real run read (`run-state.json`)
/// while they are fresh, as a real run would.
fn dry_run(
    cfg: &Config,
    db: &Database,
    opts: CheckOptions,
    rep: &mut dyn Reporter,
    mut summary: Summary,
) -> Result<Summary> {
    let now = crate::clock::epoch(SystemTime::now());
    let mut out = Out {
        rep,
        summary: &mut summary,
        reminder: None,
        streaks: None,
        earlier: Some(Streaks::read_only(
            &cfg.run.state_dir,
            database_label(db),
            now,
        )),
    };
    let result = run_watches(cfg, db, opts, &mut out);
    tell_log_failure(cfg, &mut out);
    tell_exposed_secrets(cfg, db, result.is_err(), rep);
    result?;
    rep.finish(&summary);
    Ok(summary)
}

/// Takes selfheal's run lock. It lives in the state directory unless run.lock_file says
/// otherwise; the first run of a configuration creates that directory. Either way, a
/// state directory that is not private to this user is refused before anything else is
/// done (exit 3). One that cannot be created or written is said by the last-run report's
/// warning, and fails the first change that needs the journal.
fn take_run_lock(cfg: &Config) -> Result<crate::runlock::RunLock> {
    let lock_inside = cfg.run.lock_file.starts_with(&cfg.run.state_dir);
    if lock_inside {
        crate::state::create_dir(&cfg.run.state_dir)?;
    }
    let lock = crate::runlock::acquire(&cfg.run.lock_file)?;
    if !lock_inside
        && let Err(e @ Error::Refused { .. }) = crate::state::create_dir(&cfg.run.state_dir)
    {
        return Err(e);
    }
    Ok(lock)
}

/// When a real run began: on the host clock, and for measuring its duration.
struct Began {
    at: SystemTime,
    clock: Instant,
}

impl Began {
    fn now() -> Began {
        Began {
            at: SystemTime::now(),
            clock: Instant::now(),
        }
    }

    fn epoch(&self) -> i64 {
        crate::clock::epoch(self.at)
    }
}

/// What earlier real runs left for this one: what the cron text already told
/// (`reminders.json`, cron text only) and the trouble that lasts across runs
/// (`run-state.json`: busy watches, a `--log` that cannot be reached; and the recent runs
/// read for the `max_age` check). A file that cannot be read is said, and read as empty.
fn recall_earlier_runs(
    cfg: &Config,
    db: &Database,
    opts: CheckOptions,
    began: &Began,
    out: &mut Out<'_>,
) {
    if opts.remind {
        let (reminder, warning) = Reminder::load(
            &cfg.run.state_dir,
            cfg.run.remind_every,
            began.epoch(),
            database_label(db),
        );
        out.reminder = Some(reminder);
        if let Some(w) = warning {
            out.warn(w);
        }
    }
    let (streaks, warning) = Streaks::load(&cfg.run.state_dir, database_label(db), began.epoch());
    out.streaks = Some(streaks);
    if let Some(w) = warning {
        out.warn(w);
    }
}

/// Leaves for the next run what this one learnt: what the cron text showed — only after a
/// whole run (a failed run's problems are shown again next time, never lost) — and the
/// streaks, whatever the outcome (a watch was busy, the log failed, either way).
fn keep_for_next_run(cfg: &Config, result: &Result<()>, out: &mut Out<'_>) {
    if let (Ok(()), Some(r)) = (result, out.reminder.take())
        && let Err(e) = r.save(&cfg.run.state_dir)
    {
        out.warn(format!(
            "{}; the next run shows every problem again",
            e.full_message()
        ));
    }
    if let Some(s) = out.streaks.take()
        && let Err(e) = s.save(&cfg.run.state_dir)
    {
        out.warn(format!(
            "{}; busy watches are counted again from the next run",
            e.full_message()
        ));
    }
}

/// `--log` that cannot reach its target: kept in the summary (so in `last-run.json` and
/// the metrics) every run, and said — even by `--quiet` — the first real run it happens,
/// then once per `remind_every` (a dry run, at a terminal, says it every time).
fn tell_log_failure(cfg: &Config, out: &mut Out<'_>) {
    let Some(status) = out.rep.log_status() else {
        return;
    };
    out.summary.log = Some(status.clone());
    let Some(error) = status.error else {
        if let Some(s) = out.streaks.as_mut() {
            s.log_worked();
        }
        return;
    };
    let msg = format!(
        "--log {}: cannot send there: {error}; nothing is logged there until it is back \
         (said once, then every remind_every; last-run.json, the metrics and selfheal \
         doctor show it on every run); fix: start the log daemon (rsyslog, or \
         systemd-journald for --log journald), or drop --log from the cron line",
        status.target
    );
    let every = i64::try_from(cfg.run.remind_every.as_secs()).unwrap_or(i64::MAX);
    let due = out
        .streaks
        .as_mut()
        .is_none_or(|s| s.log_failed(status.target, &error, every));
    if due {
        out.rep.log_failure(&msg);
    } else {
        out.rep.warning_already_told(&msg);
    }
    out.summary.warnings.push(msg);
}

/// Rewrites the metrics file, with `run.metrics_file`. Its failure fails the run (exit 3),
/// after the rows were handled.
fn write_metrics(
    cfg: &Config,
    out: &Out<'_>,
    result: &Result<()>,
    status: u8,
    began: &Began,
) -> Result<()> {
    let Some(path) = cfg.run.metrics_file.as_ref() else {
        return Ok(());
    };
    let host = Host::current().known_as(&cfg.run.host_names);
    let run = crate::metrics::Run {
        host: &host.name,
        summary: result.is_ok().then_some(&*out.summary),
        log: out.summary.log.as_ref(),
        exit_status: status,
        started: began.at,
        duration: began.clock.elapsed(),
    };
    crate::metrics::update(path, cfg, &host, &run)
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
fn write_last_run(cfg: &Config, out: &mut Out<'_>, result: &Result<()>, status: u8, began: &Began) {
    let mut body = summary_json(out.summary, &out.summary.warnings);
    if let Some(o) = body.as_object_mut() {
        o.remove("summary");
        let time = chrono::DateTime::<chrono::Utc>::from(began.at)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        o.insert("time".into(), json!(time));
        let ms = u64::try_from(began.clock.elapsed().as_millis()).unwrap_or(u64::MAX);
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
/// stopped run left, then judge and handle each watch's rows, and keep the confirmation
/// counts.
fn run_watches(cfg: &Config, db: &Database, opts: CheckOptions, out: &mut Out<'_>) -> Result<()> {
    let mut store = store::open(db, opts.dry_run)?;
    let (mut run, mut schemas) = prepare(cfg, db, opts, store.as_mut(), out)?;
    settle_stopped_run(&mut run, store.as_mut(), out)?;
    for w in &cfg.watches {
        let schema = schemas.remove(w.name.as_str());
        check_watch(&mut run, w, schema, store.as_mut(), out)?;
    }
    keep_confirmations(&mut run)
}

/// What every watch of the run shares, read before the first row is judged: this host,
/// the clocks (a skew holds back everything not conclusive), every watch's schema — a
/// missing column in the last watch must not leave the first watch's rows half-handled,
/// nor a status the column cannot hold (exit 2) — and the confirmation counts.
fn prepare<'a>(
    cfg: &'a Config,
    db: &Database,
    opts: CheckOptions,
    store: &mut dyn Store,
    out: &mut Out<'_>,
) -> Result<(Run<'a>, HashMap<&'a str, Schema>)> {
    for note in store.notes() {
        out.warn(note);
    }
    let host = Host::current().known_as(&cfg.run.host_names);
    out.summary.host.clone_from(&host.name);
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let hold = compare_clocks(cfg, opts, &clocks, out);
    let mut schemas: HashMap<&str, Schema> = HashMap::new();
    for w in &cfg.watches {
        let schema = store.schema(w)?;
        store::types::check_values(w, &schema)?;
        schemas.insert(&w.name, schema);
    }
    // Watches the server takes for one judge a row twice: refused before any is judged.
    collation::refuse(cfg, store)?;
    let tally = Some(load_tally(cfg, db, opts, out));
    let run = Run {
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
    Ok((run, schemas))
}

/// A real run that finds the intents of a stopped one settles them first.
fn settle_stopped_run(run: &mut Run<'_>, store: &mut dyn Store, out: &mut Out<'_>) -> Result<()> {
    let state_dir = &run.cfg.run.state_dir;
    if run.opts.dry_run || !Pending::left_behind(state_dir) {
        return Ok(());
    }
    let jw = run
        .writer
        .insert(Writer::open(state_dir, run.origin.clone())?);
    for msg in crate::check::recovery::settle(run.cfg, store, jw)? {
        out.warn(msg);
    }
    Ok(())
}

/// Like the journal: a run that cannot keep the counts must say so (exit 3), or no
/// inferred verdict would ever act.
fn keep_confirmations(run: &mut Run<'_>) -> Result<()> {
    if let Some(t) = run.tally.take()
        && !run.opts.dry_run
        && t.worth_writing()
    {
        let counts = t.into_counts(crate::clock::epoch(SystemTime::now()));
        confirmations::save(&run.cfg.run.state_dir, &counts)?;
    }
    Ok(())
}

/// The confirmation counts and contradiction times the last real run left (every watch
/// may meet a contradiction; only watches with `confirm` above 1 count). A damaged file
/// is started over (the next write mends it). One that
/// cannot be read (another user's) is said, and the run counts as a first run would: a dry
/// run or `--explain` shows that view; a real run replaces the file when it has anything
/// to count, and fails (exit 3) if it cannot — an inferred verdict that can never be
/// confirmed must not go unnoticed.
fn load_tally(cfg: &Config, db: &Database, opts: CheckOptions, out: &mut Out<'_>) -> Tally {
    let key = confirmations::database_key(db);
    match confirmations::load(&cfg.run.state_dir) {
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
    }
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

/// What the `--explain` header and JSON say of a watch.
fn watch_info(run: &Run<'_>, w: &Watch) -> WatchInfo {
    let t = thresholds(w);
    WatchInfo {
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
    }
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
    let mut info = watch_info(run, w);
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
    let lock_host = w.has_owner().then(|| run.host.own_name());
    if !run.opts.dry_run && !store.try_watch_lock(w, lock_host)? {
        info.skipped = Some(match lock_host {
            Some(_) => "another selfheal run on this host is checking it".into(),
            None => "another selfheal run (on this or another host) is checking it".into(),
        });
        counts.skipped.clone_from(&info.skipped);
        counts.busy_runs = tell_busy(w, lock_host, store, out);
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
    if let Some(s) = out.streaks.as_mut() {
        s.checked(&w.name);
    }
    let Some(schema) = schema else {
        return Ok(());
    };
    max_age_check(store, w, &schema, &run.clocks, out);
    if let Some(warn) = backoff::warning(w, &schema, run.clocks.db.now_epoch) {
        out.warn_once("retry_backoff_capped", Some(&w.name), warn);
    }
    // The run's own, apart from `run`, which the passes write through.
    let (clocks, host) = (run.clocks, run.host.clone());
    let ctx = SweepCtx {
        clocks: &clocks,
        host: &host,
        run_hold: run.hold,
        force: run.opts.force,
    };
    if let Some(t) = run.tally.as_mut() {
        t.checked(w);
    }
    // The first pass: every running row judged, only counts kept; then what holds the
    // watch as a whole, decided before any row is written.
    let mut census = sweep::census(w, store, &ctx, run.tally.as_ref())?;
    let now = crate::clock::epoch(SystemTime::now());
    let named_proven = sweep::named_lock_proven(w, &census, run.tally.as_mut(), now);
    let holds = sweep::holds(w, &census, named_proven, &ctx, &mut |kind, m| {
        out.warn_once(kind, Some(&w.name), m);
    });
    if holds.tripped.contains(&Hold::Breaker) {
        out.summary.breaker_tripped.push(w.name.clone());
        counts.breaker_tripped = true;
    }
    counts.holds.clone_from(&holds.tripped);
    // The second pass, a write group at a time: judged again, written, reported.
    let pass = SecondPass {
        w,
        schema: &schema,
        ctx: &ctx,
        holds: &holds.holds,
        local_rows: census.local,
        decided: std::cell::OnceCell::new(),
    };
    let result = match census.take_kept() {
        Some(rows) => pass.rows(run, rows, store, out, &mut counts).map(|_| ()),
        None => sweep::pages(w, store, |store, page| {
            let rows = page.into_iter().map(sweep::SecondPassRow::Read).collect();
            pass.rows(run, rows, store, out, &mut counts)
        }),
    }
    .and_then(|()| unpark::step(run, w, &schema, store, out, &mut counts))
    .and_then(|()| count_parked(run, w, store, out, &mut counts));
    if let Some(n) = run.tally.as_ref().map(|t| t.over_cap(w)).filter(|n| *n > 0) {
        out.warn_once(
            "confirmation_cap",
            Some(&w.name),
            format!(
                "watch {}: {n} more rows with an inferred verdict than the confirmation counts \
                 keep ({} new rows of a watch a run): they wait, held as confirming, for a \
                 run with room",
                w.name,
                confirmations::CAP
            ),
        );
    }
    counts.duration = t0.elapsed();
    out.summary.per_watch.push(counts);
    result
}

/// The second pass over a watch's rows.
struct SecondPass<'p> {
    w: &'p Watch,
    schema: &'p Schema,
    ctx: &'p SweepCtx<'p>,
    holds: &'p [Hold],
    local_rows: usize,
    /// The rows a person put back to running, read from the journal when first needed.
    decided: std::cell::OnceCell<HashMap<decided::Key, decided::Decided>>,
}

/// Changes a batch of the second pass carries at most: its intents are written and flushed
/// once, and its journal lines once.
const BATCH: usize = 1_000;

impl SecondPass<'_> {
    /// Judges `rows` (one `/proc/locks` read for all of them), then writes and reports them
    /// in order, a batch at a time: the rows judged are held until [`BATCH`] of them are to
    /// be written (or a page of them is judged, or the rows end), so a batch carries up to
    /// [`BATCH`] changes in write groups of [`WRITE_GROUP`] whatever share of the rows die.
    /// Under `release_lock = "if_free"` a batch is one write group: no more lock files are
    /// held open than one group's. `Err`: a write failed the run, the rest is left.
    fn rows(
        &self,
        run: &mut Run<'_>,
        rows: Vec<sweep::SecondPassRow>,
        store: &mut dyn Store,
        out: &mut Out<'_>,
        counts: &mut WatchRun,
    ) -> Result<bool> {
        let snapshot = crate::evidence::Snapshot::read(self.w);
        // A batch (its intents written and flushed once, its journal lines flushed once)
        // of up to BATCH changes, or a page of rows; of one write group when each dead row
        // holds its legacy lock file open until it is written.
        let batch = if self.w.release_lock == crate::config::ReleaseLock::IfFree {
            WRITE_GROUP
        } else {
            BATCH
        };
        let mut judged = Vec::new();
        let mut seen = Vec::new();
        let mut writes = 0;
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            // A few rows at a time, each judged at the clock of its own moment.
            let few: Vec<sweep::SecondPassRow> = rows.by_ref().take(64).collect();
            // The server's named locks, asked again for these rows (a fact about now).
            let named = (!self.w.db_lock.is_empty()).then(|| {
                let of_few: Vec<_> = few.iter().map(sweep::SecondPassRow::row).cloned().collect();
                crate::evidence::with_named(self.w, store, &of_few)
            });
            let scene = crate::evidence::Scene {
                clocks: self.ctx.clocks,
                host: self.ctx.host,
                host_now: SystemTime::now(),
                snapshot: named.as_ref().unwrap_or(&snapshot),
                local_rows: self.local_rows,
            };
            let (j, s) = sweep::judge_group(
                self.w,
                few,
                self.ctx,
                &scene,
                run.tally.as_mut(),
                self.holds,
            );
            let j = self.held_by_a_person(run, j, scene.host_now, out);
            writes += j.iter().filter(|j| j.plan.writes()).count();
            judged.extend(j);
            seen.extend(s);
            if writes >= batch || judged.len() >= sweep::PAGE || rows.peek().is_none() {
                let (j, s) = (std::mem::take(&mut judged), std::mem::take(&mut seen));
                write_and_report(run, self, j, s, store, out, counts)?;
                writes = 0;
            }
        }
        Ok(true)
    }
}

impl SecondPass<'_> {
    /// Holds the rows a person put back to running for the very reason they would be
    /// parked or reported for now ([`decided`]). The journal is read only when a row of
    /// the watch is `hung` or `overtime` and needs a person, and then once per watch.
    fn held_by_a_person(
        &self,
        run: &Run<'_>,
        mut judged: Vec<sweep::Judged>,
        host_now: SystemTime,
        out: &mut Out<'_>,
    ) -> Vec<sweep::Judged> {
        let about = |j: &sweep::Judged| {
            j.plan.attention
                && matches!(
                    j.decision.verdict,
                    crate::decide::Verdict::Hung | crate::decide::Verdict::Overtime
                )
        };
        if !judged.iter().any(about) {
            return judged;
        }
        let Some(db) = run.cfg.database.as_ref() else {
            return judged;
        };
        let decided = self.decided.get_or_init(|| {
            decided::load(
                &run.cfg.run.state_dir,
                &crate::journal::DatabaseId::of(db),
                self.w,
            )
            .unwrap_or_else(|e| {
                out.warn(format!(
                    "watch {}: cannot read the journal to tell which rows a person put back to \
                     running ({}); they are judged as if nobody had",
                    self.w.name,
                    e.full_message()
                ));
                HashMap::new()
            })
        });
        if decided.is_empty() {
            return judged;
        }
        let now = crate::clock::epoch(host_now);
        let t = thresholds(self.w);
        for j in judged.iter_mut().filter(|j| about(j)) {
            let key = (RowId::from(&j.row.id).key(), j.row.started.raw.to_string());
            if let Some(p) = decided.get(&key)
                && decided::holds(p, &j.decision, &j.evidence, now, t)
            {
                j.plan = crate::decide::hold_by_person();
            }
        }
        judged
    }
}

/// A watch skipped because its advisory lock is held elsewhere: one more run of its busy
/// streak (the count the `selfheal_watch_busy` gauge shows), and once the streak is
/// longer than 2 × `stale_after` (docs/design.md#output), a warning that names the lock's holder — a
/// selfheal run holds it for seconds, so one that holds it for longer is most likely not
/// selfheal: the lock's name is predictable, and any database account can take it first.
/// The cron text says it once, then per `remind_every`.
fn tell_busy(w: &Watch, lock_host: Option<&str>, store: &mut dyn Store, out: &mut Out<'_>) -> u64 {
    let Some(streaks) = out.streaks.as_mut() else {
        return 0;
    };
    let streak = streaks.busy(&w.name);
    let now = crate::clock::epoch(SystemTime::now());
    let for_s = u64::try_from(now.saturating_sub(streak.since)).unwrap_or(0);
    if for_s <= w.stale_after.as_secs().saturating_mul(2) {
        return streak.runs;
    }
    let (holder, fix) = match store.watch_lock_holder(w, lock_host) {
        Ok(Some(h)) => {
            let who = match (&h.user, &h.host) {
                (Some(u), Some(host)) => format!("{u}@{host}"),
                (Some(u), None) => u.clone(),
                _ => "an account this one may not see (the PROCESS privilege shows it)".to_string(),
            };
            (
                format!(
                    "its advisory lock {} is held by connection {} of {who}",
                    h.lock, h.connection
                ),
                store.lock_holder_fix(Some(h.connection)),
            )
        }
        Ok(None) => (
            "its advisory lock was free again when asked".to_string(),
            format!("if it goes on, {}", store.lock_holder_fix(None)),
        ),
        Err(e) => (
            format!(
                "who holds its advisory lock could not be asked ({})",
                e.full_message()
            ),
            store.lock_holder_fix(None),
        ),
    };
    out.warn_once(
        "watch_busy",
        Some(&w.name),
        format!(
            "watch {}: not checked for {} ({} runs in a row): {holder}; a selfheal run holds \
             it for seconds, so this is most likely not selfheal — the lock's name is \
             predictable and any account on the server can take it; fix: {fix}",
            w.name,
            crate::clock::human(for_s),
            streak.runs
        ),
    );
    streak.runs
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
/// to the latest rows by primary key, so it costs the same on any table; and those are read
/// at most once per [`recent::FRESH_FOR_S`]: a real run keeps what it read in
/// `run-state.json`, and a later run (a dry run too) uses it while it is fresh and read
/// under the same [`recent::Key`]. The warning itself is made every run from those runs and
/// this run's `max_age`.
fn max_age_check(
    store: &mut dyn Store,
    w: &Watch,
    schema: &Schema,
    clocks: &Clocks,
    out: &mut Out<'_>,
) {
    if crate::history::recent_unread(w, schema).is_some() {
        return;
    }
    let key = recent::Key::of(w, schema, clocks.tz.map(crate::zone::Zone::name));
    let kept = out
        .streaks
        .as_ref()
        .or(out.earlier.as_ref())
        .and_then(|s| s.recent_runs(&w.name, &key));
    let runs = match kept {
        Some(runs) => runs,
        None => match crate::history::read_recent_runs(store, w, clocks) {
            Ok(runs) => {
                if let Some(s) = out.streaks.as_mut() {
                    s.read_recent_runs(&w.name, key, &runs);
                }
                runs
            }
            Err(e) => {
                out.warn(format!(
                    "watch {}: cannot read recent runtimes for the max_age check: {}",
                    w.name,
                    e.full_message()
                ));
                return;
            }
        },
    };
    if let Some(warn) = runs.max_age_warning(w) {
        out.warn_once("max_age_too_low", Some(&w.name), warn.message());
        out.summary.max_age_too_low.push(warn);
    }
}

/// Writes the rows of a group a real run changes, then reports every row in order. The
/// row whose write failed the run, and the rows after it, are not reported.
fn write_and_report(
    run: &mut Run<'_>,
    pass: &SecondPass<'_>,
    rows: Vec<sweep::Judged>,
    mut lock_seen: Vec<Option<crate::check::release::Seen>>,
    store: &mut dyn Store,
    out: &mut Out<'_>,
    counts: &mut WatchRun,
) -> Result<()> {
    let dry_run = run.opts.dry_run;
    let (w, schema) = (pass.w, pass.schema);
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
            holds: pass.holds,
            local_rows: pass.local_rows,
            run: &run.id,
            origin: &run.origin,
        };
        let mut b = Batch {
            ctx,
            store,
            writer: &mut run.writer,
            lock_seen: writes.iter().map(|&i| lock_seen[i].take()).collect(),
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
        let what = crate::check::remind::row_problem(
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
