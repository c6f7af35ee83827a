//! `selfheal resolve WATCH ID... --as dead|retry|running`: a person's decision on rows
//! that need one (docs/design.md#person) — the audited, compare-and-set replacement for the `UPDATE`
//! a person would otherwise paste into a SQL client.
//!
//! For each row, after the run lock and the watch's advisory lock are taken (the lock
//! `check` takes for the watch, on this host and, through the database, on every other —
//! so that no `check` judges the watch meanwhile; a forced decision on another host's row
//! takes that host's lock of the watch too), the row and its evidence are read again, exactly as `check` reads them
//! (the store's row reader, [`crate::evidence::gather`], [`crate::decide::decide`]); then:
//! - a row that is neither parked (`manual_value`) nor running (it finished meanwhile, or
//!   has another status) is refused and left alone; `--as running` takes a parked row
//!   only;
//! - `--as dead` and `--as retry` are refused while the worker provably lives (the row's
//!   lock held, its owner pid alive on this host), and every decision for another host's
//!   row, unless `--force`; even forced, the job's lock is never deleted or released;
//! - otherwise one compare-and-set from the status, start, owner and heartbeat column just
//!   observed ([`crate::store::Change`], the one way selfheal writes a row), made through
//!   [`crate::apply`] (intent, compare-and-set, journal line with the actor and the note):
//!   `--as dead` sets `dead_value` and the end time; `--as retry` sets `retry_value`,
//!   raises the attempts by one and sets `retry_at_column` to the database's now (a
//!   person's retry does not wait); `--as running` puts a parked row back to
//!   `running_value`. The message column says `self-heal: resolved as <decision> by <who>:
//!   <note>` ([`crate::message::resolved`], who from [`crate::person::actor`]).
//!
//! Every id is looked up before anything is written: an id the watch has no row for is a
//! usage error (exit 2) and nothing is changed. More than 10 rows ask once at a terminal,
//! and need `--yes` without one. `--dry-run` says what it would write (the statement, its
//! values written in) and writes nothing. Each decision made is counted in the metrics
//! file (`selfheal_resolutions_total`), whose other lines are kept.
//!
//! Exit status: 0 every row resolved; 1 some refused or lost to a race (or the
//! confirmation was declined); 2 usage; 3 database or filesystem failure; 75 a `check`
//! held the run lock for longer than [`RUN_LOCK_WAIT`], or the watch's advisory lock for
//! longer than [`WATCH_LOCK_WAIT`] (the error names who holds it).
//!
//! I/O: the configuration, the database, the row's evidence (files, `/proc`), the run
//! lock, the intents file, the journal and the metrics file; a terminal's answer.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::apply;
use crate::clock::Clocks;
use crate::config::{self, Config, ConfigPath, Overrides, Watch};
use crate::decide::{self, Action, Evidence, Owner};
use crate::error::{Error, Result, Usage, exit};
use crate::escape::printable;
use crate::evidence::{Scene, gather, thresholds};
use crate::host::Host;
use crate::journal::{Origin, RunId, Writer};
use crate::message;
use crate::person;
use crate::store::{self, CasOutcome, Change, ColumnType, Schema, SqlValue, Store, StoredRow};

/// More rows than this ask for confirmation (`--yes` without a terminal).
pub const CONFIRM_ABOVE: usize = 10;

/// How long `resolve` waits for a `check` run to let go of the run lock.
pub const RUN_LOCK_WAIT: Duration = Duration::from_secs(30);

/// How long `resolve` waits for a `check` (on this or another host) to let go of the
/// watch's advisory lock.
pub const WATCH_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A person's decision on a row (selfheal's own is [`crate::decide::Decision`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The worker is gone and the job is not to run again: `dead_value`.
    Dead,
    /// The worker is gone; run the job again now: `retry_value`.
    Retry,
    /// The worker is fine: a parked row goes back to `running_value`.
    Running,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Dead => "dead",
            Resolution::Retry => "retry",
            Resolution::Running => "running",
        }
    }

    fn action(self) -> Action {
        match self {
            Resolution::Dead => Action::MarkDead,
            Resolution::Retry => Action::MarkRetry,
            Resolution::Running => Action::Unpark,
        }
    }
}

/// How `selfheal resolve` runs (`app` fills this from the command line).
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    pub config: Option<PathBuf>,
    pub watch: String,
    pub ids: Vec<String>,
    pub resolution: Resolution,
    pub note: Option<String>,
    pub dry_run: bool,
    pub force: bool,
    pub yes: bool,
}

/// The watch `name` of the configuration at `config` (`None`: `$SELFHEAL_CONFIG`, then
/// the default): a name the configuration lacks is a usage error that lists the ones it
/// has.
pub fn load_watch(config: Option<&Path>, name: &str) -> Result<Config> {
    let path = ConfigPath::resolve(config);
    match config::load(&path, &Overrides::default(), &[name.to_string()]) {
        Err(Error::Usage(Usage::UnknownWatch {
            name,
            origin,
            known,
        })) => Err(Error::Usage(Usage::Other(format!(
            "watch {name:?}: no such watch in {origin} (known: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )))),
        other => other,
    }
}

/// A row id given on the command line, as the id column holds it: on an integer column a
/// whole number, where surrounding spaces, a `+` and leading zeros are allowed (`" 1"`,
/// `01` and `+1` are row 1) and anything else is a usage error naming the id and the
/// column; text otherwise, as given.
pub fn parse_id(w: &Watch, schema: &Schema, given: &str) -> Result<SqlValue> {
    let integer = schema
        .columns
        .get(&w.id_column.name().to_ascii_lowercase())
        .is_some_and(|c| c.ty == ColumnType::Integer);
    if !integer {
        return Ok(SqlValue::Text(given.to_string()));
    }
    let digits = given.trim();
    digits
        .parse::<i64>()
        .map(SqlValue::Int)
        .or_else(|_| digits.parse::<u64>().map(SqlValue::UInt))
        .map_err(|_| {
            Error::Usage(Usage::Other(format!(
                "'{}' is not a row id of watch {}: its id column {} is an integer column \
                 (a whole number, like 42)",
                printable(given),
                w.name,
                w.id_column
            )))
        })
}

/// The run lock, waited for at most [`RUN_LOCK_WAIT`] (a `check` run holds it for
/// seconds): `resolve` never judges or writes a row while a run does.
fn run_lock(cfg: &Config) -> Result<crate::runlock::RunLock> {
    if cfg.run.lock_file.starts_with(&cfg.run.state_dir) {
        crate::state::create_dir(&cfg.run.state_dir)?;
    }
    let deadline = Instant::now() + RUN_LOCK_WAIT;
    loop {
        match crate::runlock::acquire(&cfg.run.lock_file) {
            Err(Error::Busy { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Takes the advisory lock `check` takes for watch `w` (per `host` when each host judges
/// its own rows), waiting up to [`WATCH_LOCK_WAIT`] for a run to let go of it; then says
/// who holds it (exit 75). Held until the connection closes.
fn watch_lock(store: &mut dyn Store, w: &Watch, host: Option<&str>) -> Result<()> {
    let deadline = Instant::now() + WATCH_LOCK_WAIT;
    while !store.try_watch_lock(w, host)? {
        if Instant::now() >= deadline {
            return Err(watch_busy(store, w, host));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Who holds the advisory lock of `w` that [`watch_lock`] did not get, and what to do.
fn watch_busy(store: &mut dyn Store, w: &Watch, host: Option<&str>) -> Error {
    let waited = WATCH_LOCK_WAIT.as_secs();
    let (holder, fix) = match store.watch_lock_holder(w, host) {
        Ok(Some(h)) => {
            let who = match (&h.user, &h.host) {
                (Some(u), Some(at)) => format!(" ({u}@{at})"),
                (Some(u), None) => format!(" ({u})"),
                _ => String::new(),
            };
            (
                format!(
                    "its advisory lock {} is held by connection {}{who} (a selfheal check \
                     judging it, on this or another host), still after {waited}s",
                    h.lock, h.connection
                ),
                format!(
                    "run resolve again once that check is done; if connection {0} holds it \
                     for long, see what it is (SHOW PROCESSLIST) and, if it is no selfheal \
                     run, end it (KILL {0})",
                    h.connection
                ),
            )
        }
        Ok(None) => (
            format!("its advisory lock was held for {waited}s, and is free again now"),
            "run resolve again".to_string(),
        ),
        Err(e) => (
            format!(
                "its advisory lock was held for {waited}s; who holds it could not be asked \
                 ({})",
                e.full_message()
            ),
            "run resolve again once the check that holds it is done".to_string(),
        ),
    };
    Error::WatchBusy {
        watch: w.name.clone(),
        holder: printable(&holder).into_owned(),
        fix,
    }
}

/// What became of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Changed: from this status to that one.
    Resolved { from: String, to: String },
    /// `--dry-run`: the statement a real run would make.
    Would {
        from: String,
        to: String,
        statement: String,
    },
    /// Left alone, and why.
    Refused(String),
    /// The compare-and-set matched nothing: the row moved on in between.
    LostRace,
    /// The statement failed for this row.
    Failed(String),
}

/// What one `resolve` works with.
struct Ctx<'a> {
    cfg: &'a Config,
    w: &'a Watch,
    schema: &'a Schema,
    clocks: &'a Clocks,
    host: &'a Host,
    origin: Origin,
    run: RunId,
    who: person::Actor,
    opts: &'a ResolveOptions,
    writer: Option<Writer>,
    /// The hosts whose advisory lock of the watch this run holds (lowercase; `check`'s
    /// lock names when each host judges its own rows).
    locked: Vec<String>,
}

impl Ctx<'_> {
    /// Decides one row, read again just now.
    fn resolve_one(&mut self, store: &mut dyn Store, now: &StoredRow) -> Result<Outcome> {
        let (w, opts) = (self.w, self.opts);
        let status = now.status.to_string();
        let row = &now.row;
        let parked = w.manual_value.as_deref() == Some(status.as_str());
        let running = status == w.running_value;
        if !parked && !running {
            return Ok(Outcome::Refused(format!(
                "its status is now '{status}', neither '{}' nor {}: it finished or moved on \
                 meanwhile; left as it is",
                w.running_value,
                w.manual_value
                    .as_deref()
                    .map_or("parked".to_string(), |m| format!("'{m}'"))
            )));
        }
        if opts.resolution == Resolution::Running && !parked {
            return Ok(Outcome::Refused(format!(
                "--as running puts a row parked in '{}' back to running; this one is '{status}'",
                w.manual_value.as_deref().unwrap_or_default()
            )));
        }
        if let Some(why) = other_host(w, self.host)
            && !opts.force
        {
            return Ok(Outcome::Refused(why));
        }
        let snapshot = crate::evidence::with_named(w, store, std::slice::from_ref(row));
        let mut ev = gather(
            w,
            row,
            &Scene::of_one_row(self.clocks, self.host, &snapshot),
        );
        let judging_life = opts.resolution != Resolution::Running && !opts.force;
        if judging_life {
            // About to write on the strength of a free lock: try it, as `check` does.
            ev = crate::probe::lock::confirm(w, row, self.host, ev);
        }
        let d = decide::decide(&ev, thresholds(w));
        if let Owner::NotLocal { host } = &ev.owner {
            if !opts.force {
                return Ok(Outcome::Refused(remote_owner(host)));
            }
            // Forced on another host's row: that host's `check` takes its own lock of the
            // watch; take it too, then read the row again under it.
            let name = host.to_ascii_lowercase();
            if w.owner_column.is_some() && !opts.dry_run && !self.locked.contains(&name) {
                watch_lock(store, w, Some(&name))?;
                self.locked.push(name);
                return match store.row_by_id(w, &row.id)? {
                    Some(again) => self.resolve_one(store, &again),
                    None => Ok(Outcome::Refused(
                        "the row is gone (deleted meanwhile); nothing to resolve".into(),
                    )),
                };
            }
        }
        if judging_life && let Some(sign) = ev.life(thresholds(w)).for_a_person() {
            return Ok(Outcome::Refused(format!(
                "the worker provably lives: {}; a live worker is not marked {}: look at it \
                 first (selfheal show {} {}), or --force (the lock is never touched)",
                sign.describe(),
                opts.resolution.as_str(),
                w.name,
                person::shell_word(&row.id.to_string())
            )));
        }
        let (to, set_ended) = match opts.resolution {
            Resolution::Dead => (w.dead_value.clone(), true),
            Resolution::Retry => match &w.retry {
                Some(r) => (r.value.clone(), true),
                None => return Err(no_retry(w)),
            },
            Resolution::Running => (w.running_value.clone(), false),
        };
        let reason = message::cut(
            &message::resolved(
                opts.resolution.as_str(),
                &self.who.name,
                person::note(opts.note.as_deref()).as_deref(),
            ),
            self.schema.message_max,
        );
        let change = Change {
            row,
            from_status: &status,
            new_status: &to,
            message: w.message_column.as_ref().map(|_| reason.clone()),
            bump_attempts: opts.resolution == Resolution::Retry,
            set_ended,
            // A person's retry does not wait.
            retry_at: (opts.resolution == Resolution::Retry).then_some(0),
            match_heartbeat: true,
        };
        if opts.dry_run {
            let d = store.dialect();
            let st = store::sql::cas_sql(d, w, self.schema, &change);
            return Ok(Outcome::Would {
                from: status,
                to,
                statement: store::sql::for_a_person(d, &st),
            });
        }
        let mut entry = apply::entry(w, self.host, &self.origin, row, &ev, &d, &status, &to);
        entry.action = opts.resolution.action();
        entry.reason = reason;
        entry.actor = Some(self.who.name.clone());
        entry.actor_claimed = self.who.claimed;
        entry.uid = Some(self.who.uid);
        entry.login.clone_from(&self.who.login);
        entry.decision_note = person::note(opts.note.as_deref());
        if opts.force {
            entry.note = Some("--force: refusals overridden by a person".into());
        }
        let writer = match &mut self.writer {
            Some(jw) => jw,
            None => self
                .writer
                .insert(Writer::open(&self.cfg.run.state_dir, self.origin.clone())?),
        };
        let ctx = apply::Ctx {
            w,
            schema: self.schema,
            run: &self.run,
        };
        Ok(match apply::apply(&ctx, store, writer, &change, entry)?.0 {
            CasOutcome::Applied => Outcome::Resolved { from: status, to },
            CasOutcome::LostRace => Outcome::LostRace,
            CasOutcome::Failed(why) => Outcome::Failed(why),
            CasOutcome::Busy => Outcome::Failed("the row is locked by another transaction".into()),
        })
    }
}

/// Why `resolve` refuses every decision on a watch pinned to another host, if it is.
fn other_host(w: &Watch, host: &Host) -> Option<String> {
    w.host.as_ref().filter(|h| !host.is_me(h)).map(|h| {
        format!(
            "watch {} runs on host {h}, this is {}: resolve it there (its files, locks and \
             pids are that host's), or --force",
            w.name, host.name
        )
    })
}

fn remote_owner(host: &str) -> String {
    format!(
        "host {host} owns the row: resolve it there (its files, locks and pids are that \
         host's), or --force"
    )
}

/// Why `resolve --as dead|retry` would refuse this row without `--force`, if it would: the
/// watch is pinned to another host, another host owns the row, or evidence of the row's
/// own says its worker lives. `show` offers a hand-written statement only where this is
/// `None` (docs/design.md#person).
pub fn would_refuse(w: &Watch, host: &Host, ev: &Evidence) -> Option<String> {
    if let Some(why) = other_host(w, host) {
        return Some(why);
    }
    if let Owner::NotLocal { host } = &ev.owner {
        return Some(remote_owner(host));
    }
    ev.life(thresholds(w))
        .for_a_person()
        .map(|sign| format!("the worker provably lives: {}", sign.describe()))
}

fn no_retry(w: &Watch) -> Error {
    Error::Usage(Usage::Other(format!(
        "--as retry: watch {} has no retry_value (with attempts_column and max_attempts) to \
         send a row back to the queue; use --as dead, or configure a retry",
        w.name
    )))
}

/// Asks once at a terminal whether to go on with `n` rows; true for yes.
fn confirmed(n: usize, w: &Watch, resolution: Resolution) -> bool {
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "selfheal: resolve {n} rows of watch {} as {}? [y/N] ",
        w.name,
        resolution.as_str()
    );
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes")
}

/// `selfheal resolve`, printing one line per row to `out`: see the module documentation
/// for what it does and its exit status.
pub fn run(opts: &ResolveOptions, out: &mut dyn Write) -> Result<u8> {
    let cfg = load_watch(opts.config.as_deref(), &opts.watch)?;
    let Some(w) = cfg.watches.iter().find(|w| w.name == opts.watch) else {
        return Err(Error::Usage(Usage::Other(format!(
            "watch {:?}: no such watch",
            opts.watch
        ))));
    };
    let Some(db) = cfg.database.as_ref() else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    match opts.resolution {
        Resolution::Retry if w.retry.is_none() => return Err(no_retry(w)),
        Resolution::Running if w.manual_value.is_none() => {
            return Err(Error::Usage(Usage::Other(format!(
                "--as running: watch {} has no manual_value, so none of its rows is ever \
                 parked; --as running puts a parked row back to running",
                w.name
            ))));
        }
        _ => {}
    }
    let mut store = store::open(db, opts.dry_run)?;
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let schema = store.schema(w)?;
    store::types::check_values(w, &schema)?;
    // Ids as the id column holds them, then each row once: on an integer column " 1", 01
    // and +1 are one row, resolved once.
    let mut ids: Vec<(&str, SqlValue)> = Vec::with_capacity(opts.ids.len());
    for id in &opts.ids {
        let v = parse_id(w, &schema, id)?;
        if !ids.iter().any(|(_, seen)| *seen == v) {
            ids.push((id, v));
        }
    }
    if ids.len() > CONFIRM_ABOVE && !opts.yes && !opts.dry_run {
        if !std::io::stdin().is_terminal() {
            return Err(Error::Usage(Usage::Other(format!(
                "{} rows: more than {CONFIRM_ABOVE} rows at once need --yes when there is no \
                 terminal to ask",
                ids.len()
            ))));
        }
        if !confirmed(ids.len(), w, opts.resolution) {
            let _ = writeln!(out, "nothing resolved: not confirmed");
            return Ok(exit::ATTENTION);
        }
    }
    // Every id before anything is written: an id with no row is a usage error.
    let mut values = Vec::with_capacity(ids.len());
    let mut missing = Vec::new();
    for (id, v) in ids {
        if store.row_by_id(w, &v)?.is_none() {
            missing.push(printable(id).into_owned());
        }
        values.push(v);
    }
    if !missing.is_empty() {
        return Err(Error::Usage(Usage::Other(format!(
            "watch {}: no row with id {} in {}{} (selfheal show lists the rows that need a \
             person)",
            w.name,
            missing.join(", "),
            w.table,
            if w.matches.is_empty() {
                String::new()
            } else {
                format!(
                    " where {}",
                    w.matches
                        .iter()
                        .map(|(c, v)| format!("{c} = {v:?}"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )
            }
        ))));
    }
    let _lock = if opts.dry_run {
        None
    } else {
        Some(run_lock(&cfg)?)
    };
    let host = Host::current().known_as(&cfg.run.host_names);
    // The lock `check` takes for this watch on this host (docs/design.md#resolve): no
    // `check` judges these rows while a person decides them.
    let lock_host = w.owner_column.as_ref().map(|_| host.own_name().to_string());
    if !opts.dry_run {
        watch_lock(store.as_mut(), w, lock_host.as_deref())?;
    }
    let mut ctx = Ctx {
        cfg: &cfg,
        w,
        schema: &schema,
        clocks: &clocks,
        origin: Origin::of(&cfg, db),
        run: RunId::new(&host),
        host: &host,
        who: person::actor(),
        opts,
        writer: None,
        locked: lock_host.into_iter().collect(),
    };
    let mut all_resolved = true;
    let mut made = 0u64;
    let mut failure = None;
    for v in &values {
        let outcome = match store.row_by_id(w, v) {
            Ok(Some(now)) => ctx.resolve_one(store.as_mut(), &now),
            Ok(None) => Ok(Outcome::Refused(
                "the row is gone (deleted meanwhile); nothing to resolve".into(),
            )),
            Err(e) => Err(e),
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        if matches!(outcome, Outcome::Resolved { .. }) {
            made += 1;
        }
        all_resolved &= matches!(outcome, Outcome::Resolved { .. } | Outcome::Would { .. });
        let _ = writeln!(
            out,
            "{}",
            printable(&line(w, v, &ctx.who.name, opts, &outcome))
        );
    }
    // Counted even when a later row failed: these decisions were made.
    if made > 0
        && let Some(path) = &cfg.run.metrics_file
        && let Err(e) =
            crate::metrics::count_resolution(path, &w.name, opts.resolution.as_str(), made)
        && failure.is_none()
    {
        failure = Some(e);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(if all_resolved {
        exit::OK
    } else {
        exit::ATTENTION
    })
}

/// The line said for one row.
fn line(w: &Watch, id: &SqlValue, who: &str, opts: &ResolveOptions, o: &Outcome) -> String {
    let head = format!("{} id={}", w.name, id);
    let d = opts.resolution.as_str();
    match o {
        Outcome::Resolved { from, to } => {
            format!("{head}: set status to '{to}' (was '{from}'): resolved as {d} by {who}")
        }
        Outcome::Would {
            from,
            to,
            statement,
        } => format!(
            "{head}: would set status to '{to}' (now '{from}'), resolved as {d} by {who}: \
             {statement}"
        ),
        Outcome::Refused(why) => format!("{head}: refused: {why}"),
        Outcome::LostRace => format!(
            "{head}: lost_race: the row moved on between the read and the write; left as it is"
        ),
        Outcome::Failed(why) => format!("{head}: write failed: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Heartbeat, Lock};
    use crate::holder_line::HolderLine;

    const T: decide::Thresholds = decide::Thresholds {
        stale_after: 300,
        max_age: 14_400,
    };

    /// Why a person's `dead` or `retry` is refused, if it is.
    fn lives(ev: &Evidence) -> Option<String> {
        ev.life(T).for_a_person().map(|s| s.describe())
    }

    fn ev(lock: Lock, owner: Owner) -> Evidence {
        Evidence::aged(600)
            .with_heartbeat(Heartbeat::Age(900))
            .with_lock(lock)
            .with_owner(owner)
    }

    #[test]
    fn a_worker_provably_lives_by_its_pid_or_its_lock() {
        assert_eq!(
            lives(&ev(Lock::Absent, Owner::Alive { pid: 42 })).as_deref(),
            Some("its owner pid 42 is alive")
        );
        assert_eq!(
            lives(&ev(Lock::Held { pid: Some(9) }, Owner::NotConfigured)).as_deref(),
            Some("the job's lock is held by pid 9")
        );
        assert!(
            lives(&ev(Lock::Held { pid: None }, Owner::NotConfigured))
                .is_some_and(|w| w.contains("not visible from here"))
        );
        let named = ev(Lock::Held { pid: Some(9) }, Owner::Dead { pid: 42 }).with_lock_holder(
            Some(HolderLine {
                host: "web1".into(),
                pid: 42,
                since: 1_800_000_000,
            }),
        );
        assert!(
            lives(&named).is_some_and(|w| w.starts_with("the job's lock is held (web1:42 since ")),
            "the holder line names the row's owner"
        );
        // A per-kind lock held by another run of the job says nothing of this row's worker.
        assert_eq!(
            lives(&ev(Lock::Held { pid: Some(99) }, Owner::Dead { pid: 42 })),
            None
        );
        for nothing in [
            Lock::Free,
            Lock::Absent,
            Lock::Unconfirmed,
            Lock::NotConfigured,
        ] {
            assert_eq!(lives(&ev(nothing, Owner::NotConfigured)), None);
        }
    }

    /// Any evidence of the row's own that its worker lives refuses a person's `dead` or
    /// `retry`: its own fresh heartbeat, and an owner pid that exists though it started
    /// after the row (that it is another process is only an inference).
    #[test]
    fn its_own_fresh_heartbeat_or_a_pid_that_looks_reused_refuses() {
        let fresh = ev(Lock::NotConfigured, Owner::NotConfigured).with_heartbeat(Heartbeat::Age(0));
        assert_eq!(
            lives(&fresh).as_deref(),
            Some("its own heartbeat is fresh (0s ago)")
        );
        let shared = fresh.clone().with_heartbeat_own(false);
        assert_eq!(lives(&shared), None, "another row's beat");
        let stale = fresh.with_heartbeat(Heartbeat::Age(301));
        assert_eq!(lives(&stale), None);
        let later = ev(
            Lock::NotConfigured,
            Owner::Reused {
                pid: 42,
                after_s: 18_000,
                proof: None,
            },
        );
        assert!(
            lives(&later)
                .is_some_and(|w| w.starts_with("its owner pid 42 is alive (it started 5h0m"))
        );
    }
}
