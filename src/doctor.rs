//! `selfheal doctor`: everything a first run depends on, checked one line at a time with
//! the fix beside each failure — the configuration; the database, its version and how it
//! was reached; the database clock against the host's and the session time zone; per
//! watch the table, its columns and their types, a start or heartbeat column declared `ON
//! UPDATE CURRENT_TIMESTAMP` (with the `ALTER TABLE` that drops the clause), the index
//! that finds running rows (by the database's own plan of the very query `check` runs,
//! `match` included), the message column's room, times in the future, `max_age` against
//! the runs it can see, whether the status column can hold every status the watch writes,
//! `retry_at_column` and the condition the application's picker must add for it, the rows
//! parked in `manual_value`
//! (with the `selfheal resolve` command that decides each); the heartbeat and lock directories as the user
//! selfheal runs as, and a heartbeat file template that matches no running row's file
//! while its directory is there (a typo in the file name); whether pids and `/proc/locks` are the host's (selfheal outside the
//! initial pid namespace); selfheal's run lock, state directory and metrics file; a lock
//! file kept by `selfheal run` or the PHP helper (`run_files`).
//! For several hosts (SPEC §10): which hosts own the running rows now,
//! owners that mix `HOST:PID` with bare pids or none, host-local evidence without
//! `owner_column` or `host` (advice: right on one host, so it leaves the exit status as it
//! is), and an advisory lock that does not reach every host. Also a configuration without
//! a watch, a run as root while cron runs selfheal as someone else, a database password in
//! a file every user can read, and a `check --log` that could not reach its target (as the
//! last real run left it in `state_dir/run-state.json`). Each failure carries the fix that
//! fits its cause and the running user (`crate::fix`); the exit status follows `check`'s
//! where they meet (a table or column the database lacks is 2).
//!
//! Read-only: opens the database read-only where it can, writes no row, creates no file,
//! takes no lock (not even its own run lock: a cron run starting meanwhile must not see
//! exit 75 because someone ran `doctor`).

use std::io::{ErrorKind, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::unistd::{AccessFlags, access};

use crate::clock::{Clocks, age_on_db_clock, clock_skew, human, plausible_age, skew_text};
use crate::config::{self, Config, ConfigPath, Overrides, PathTemplate, Watch, fmt_duration};
use crate::decide::{self, Heartbeat, Verdict};
use crate::error::{Error, Usage, exit};
use crate::escape::printable;
use crate::evidence;
use crate::history::{self, Recent};
use crate::host::Host;
use crate::probe::owner::{INITIAL_PID_NS, PidNamespace};
use crate::store::{self, Introspect, ScanPlan, Schema, Store};

mod run_files;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Pass,
    /// Advice: nothing is wrong with this setup as it is, but a way it is often grown
    /// would make something wrong (SPEC §10). Leaves the exit status as it is.
    Advice,
    /// Works, but an operator should look.
    Warn,
    Fail,
}

/// One line of doctor's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub mark: Mark,
    pub subject: String,
    pub detail: String,
    pub fix: Option<String>,
}

impl Finding {
    fn pass(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            mark: Mark::Pass,
            subject: subject.into(),
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Warn,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn advice(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Advice,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Fail,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// `✓ subject: detail`, `✗ subject: detail; fix: …`, `i subject: detail; advice: …` —
    /// one line, whatever a value from the database or a driver's message in it holds
    /// (control characters escaped).
    pub fn render(&self) -> String {
        let mark = match self.mark {
            Mark::Pass => "✓",
            Mark::Advice => "i",
            Mark::Warn => "!",
            Mark::Fail => "✗",
        };
        let fix_word = if self.mark == Mark::Advice {
            "advice"
        } else {
            "fix"
        };
        let line = match &self.fix {
            Some(fix) => format!(
                "{mark} {}: {}; {fix_word}: {fix}",
                self.subject, self.detail
            ),
            None => format!("{mark} {}: {}", self.subject, self.detail),
        };
        printable(&line).into_owned()
    }
}

/// Collects findings and prints each at once (a slow database must not hide the rest).
struct Report<'a> {
    out: &'a mut dyn Write,
    findings: Vec<Finding>,
}

impl Report<'_> {
    fn add(&mut self, f: Finding) {
        let _ = writeln!(self.out, "{}", f.render());
        self.findings.push(f);
    }
}

/// Runs every check; returns the exit status: 0 all pass (advice included), 1 any warning
/// or failure, 2 the configuration is bad, 3 the database cannot be reached.
pub fn run(config_flag: Option<&Path>, out: &mut dyn Write) -> u8 {
    let mut rep = Report {
        out,
        findings: Vec::new(),
    };
    let path = ConfigPath::resolve(config_flag);
    let cfg = match config::load(&path, &Overrides::default(), &[]) {
        Ok(c) => c,
        Err(e) => {
            let fix = match &e {
                Error::Usage(Usage::NoConfig { .. }) => {
                    "give --config FILE or set SELFHEAL_CONFIG".to_string()
                }
                _ => crate::fix::for_error(&e, "doctor")
                    .unwrap_or_else(|| "correct it, then run selfheal doctor again".to_string()),
            };
            rep.add(Finding::fail("configuration", e.to_string(), fix));
            return e.exit_code();
        }
    };
    rep.add(Finding::pass(
        "configuration",
        format!(
            "{} parses: {} watch{}",
            cfg.source
                .as_ref()
                .map_or("the command line".into(), |p| p.display().to_string()),
            cfg.watches.len(),
            if cfg.watches.len() == 1 { "" } else { "es" }
        ),
    ));
    if let Some(f) = no_watch_finding(&cfg) {
        rep.add(f);
    }
    if let Some(f) = cron_user_finding() {
        rep.add(f);
    }
    for f in secret_findings(&cfg) {
        rep.add(f);
    }
    let host = Host::current().known_as(&cfg.run.host_names);
    // 3 when the database cannot be reached, 2 when it lacks what the configuration names.
    let db_status = database_checks(&cfg, &host, &mut rep).err();
    for w in &cfg.watches {
        let here = w.host.as_ref().is_none_or(|h| host.is_me(h));
        if !here {
            rep.add(Finding::pass(
                format!("watch {}: host", w.name),
                format!(
                    "it runs on {}; this is {}: its files are checked there",
                    w.host.as_deref().unwrap_or(""),
                    host.name
                ),
            ));
            continue;
        }
        if let Some(f) = host_local_finding(w, &host) {
            rep.add(f);
        }
        if let Some(t) = &w.heartbeat_file {
            rep.add(heartbeat_finding(w, t));
        }
        if let Some(t) = &w.lock_file {
            rep.add(lock_dir_finding(w, t));
            if let Some(f) = run_files::finding(w, t) {
                rep.add(f);
            }
        }
    }
    if let Some(f) = pid_namespace_finding(&cfg, PidNamespace::current()) {
        rep.add(f);
    }
    rep.add(run_lock_finding(&cfg.run.lock_file, &cfg.run.state_dir));
    rep.add(state_dir_finding(&cfg.run.state_dir));
    if let Some(f) = log_finding(&cfg.run.state_dir) {
        rep.add(f);
    }
    if let Some(m) = &cfg.run.metrics_file {
        rep.add(metrics_finding(m));
    }
    if let Some(code) = db_status {
        code
    } else if rep
        .findings
        .iter()
        .any(|f| matches!(f.mark, Mark::Warn | Mark::Fail))
    {
        exit::ATTENTION
    } else {
        exit::OK
    }
}

/// The database, its clock, and each watch's side of it. `Err` with doctor's exit status:
/// 3 when the database cannot be reached (or refuses selfheal), 2 when the configuration
/// names what it does not have (a database, table or column) or a file that cannot be
/// read.
fn database_checks(cfg: &Config, host: &Host, rep: &mut Report<'_>) -> Result<(), u8> {
    let Some(db) = &cfg.database else {
        rep.add(Finding::pass("database", "none needed: no watches"));
        return Ok(());
    };
    let mut store = match store::open(db, true) {
        Ok(s) => s,
        Err(e) => {
            // The fix the failure itself calls for: the store words it from the driver's
            // error code and the settings it used; an unreadable option file gets the
            // command that lets this user read it.
            let fix = crate::fix::for_error(&e, "doctor")
                .unwrap_or_else(|| fallback_fix(&e, Some(&db.url)));
            rep.add(Finding::fail("database", e.to_string(), fix));
            return Err(doctor_status(&e));
        }
    };
    match store.describe_server() {
        Ok(v) => rep.add(Finding::pass(
            "database",
            format!("{v} at {}", store.connection()),
        )),
        Err(e) => {
            let fix = crate::fix::for_error(&e, "doctor")
                .unwrap_or_else(|| fallback_fix(&e, Some(&db.url)));
            rep.add(Finding::fail("database", e.to_string(), fix));
            return Err(doctor_status(&e));
        }
    }
    for note in store.notes() {
        rep.add(Finding::warn(
            "database",
            note,
            "fix or remove that option file line",
        ));
    }
    let clocks = match store.clock() {
        Ok(c) => Clocks {
            db: c,
            tz: db.timezone,
            tolerance_s: cfg.run.clock_tolerance.as_secs(),
        },
        Err(e) => {
            let fix = crate::fix::for_error(&e, "doctor")
                .unwrap_or_else(|| fallback_fix(&e, Some(&db.url)));
            rep.add(Finding::fail("clock", e.to_string(), fix));
            return Err(doctor_status(&e));
        }
    };
    rep.add(clock_finding(cfg, &clocks, store.as_mut()));
    let mut bad_config = false;
    if let Some(f) = advisory_lock_finding(cfg, store.as_mut()) {
        rep.add(f);
    }
    for w in &cfg.watches {
        bad_config |= !watch_database_checks(cfg, w, store.as_mut(), &clocks, host, rep);
    }
    for f in collation_overlaps(cfg, store.as_mut()) {
        bad_config = true;
        rep.add(f);
    }
    if bad_config { Err(exit::USAGE) } else { Ok(()) }
}

/// Two watches the configuration tells apart only by `match` values the server compares as
/// one under the column's collation (SPEC §4: `utf8mb4_general_ci` takes `straße` for
/// `strase`): their rows overlap, and a row would be judged by the wrong watch's rules. A
/// configuration error, as the offline check makes it for what it can fold.
fn collation_overlaps(cfg: &Config, store: &mut dyn store::Store) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, a) in cfg.watches.iter().enumerate() {
        for b in &cfg.watches[i + 1..] {
            let Some(apart) = config::told_apart_by(a, b) else {
                continue;
            };
            let mut same = Vec::new();
            let mut all_same = !apart.is_empty();
            for (column, va, vb) in &apart {
                match store.equal_under_collation(a, column, va, vb) {
                    Ok(Some(collation)) => same.push(format!(
                        "{} = {va:?} and {vb:?} are one value under {collation}",
                        column.name()
                    )),
                    // Told apart by the server, or it cannot say: apart.
                    Ok(None) | Err(_) => all_same = false,
                }
            }
            if all_same {
                out.push(Finding::fail(
                    format!("watch {}: match", b.name),
                    format!(
                        "its rows can be those of watch '{}' on the server: {}; a row would \
                         be judged twice, by two different rules",
                        a.name,
                        same.join(", ")
                    ),
                    "give the two watches match values that differ under the column's \
                     collation, or merge them",
                ));
            }
        }
    }
    out
}

/// The fix for a database failure when nothing more fitting is known: a configuration
/// error names what is expected; a database says more in its own log.
fn fallback_fix(e: &Error, url: Option<&config::DbUrl>) -> String {
    match (e.exit_code(), url) {
        (exit::USAGE, _) => "correct it, then run selfheal doctor again".into(),
        (_, Some(config::DbUrl::Sqlite(p))) => format!(
            "sqlite://{} must be an SQLite database this user can read and write",
            p.display()
        ),
        (_, _) => "look at the server's error log".into(),
    }
}

/// Doctor's exit status for an error that stopped its database checks: 2 for what the
/// configuration names wrongly (as `check` exits), else 3 (the database cannot be used).
fn doctor_status(e: &Error) -> u8 {
    match e.exit_code() {
        exit::USAGE => exit::USAGE,
        _ => exit::FAILURE,
    }
}

/// A database password in a file every user can read (a warning per file; group-readable
/// `640 root:www-data` is fine).
fn secret_findings(cfg: &Config) -> Vec<Finding> {
    let Some(db) = &cfg.database else {
        return Vec::new();
    };
    let inputs = crate::store::credentials::Inputs::from_env();
    crate::store::credentials::exposed_secrets(db, cfg.source.as_deref(), &inputs)
        .into_iter()
        .map(|s| Finding::warn("database: password", s.message(), s.fix()))
        .collect()
}

/// A configuration without a watch: the cron job runs, and does nothing.
fn no_watch_finding(cfg: &Config) -> Option<Finding> {
    if !cfg.watches.is_empty() {
        return None;
    }
    let file = cfg
        .source
        .as_ref()
        .map_or("the configuration".into(), |p| p.display().to_string());
    Some(Finding::warn(
        "watches",
        format!(
            "{file} has no [[watch]]: the cron job runs and checks nothing, so no stuck row \
             is ever found"
        ),
        format!(
            "add a [[watch]] table for each job table (the example in {file} or man \
             selfheal, CONFIGURATION), then run selfheal doctor again"
        ),
    ))
}

/// Run as root while cron runs selfheal as another user: what passes here may fail there.
fn cron_user_finding() -> Option<Finding> {
    let (what, fix) = crate::cron::root_warning("doctor")?;
    Some(Finding::warn("user", what, fix))
}

fn clock_finding(cfg: &Config, clocks: &Clocks, store: &mut dyn Introspect) -> Finding {
    let tol = cfg.run.clock_tolerance.as_secs();
    let skew = clock_skew(&clocks.db, SystemTime::now());
    let zone = store
        .session_time_zone()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let naive = match clocks.tz {
        Some(tz) => format!(
            "; naive DATETIME values are read in {tz} (UTC{} now)",
            offset_text(store::zone_offset_now(tz))
        ),
        None => "; naive DATETIME values are read on the database's own clock".into(),
    };
    let detail = format!("{}; session time zone {zone}{naive}", skew_text(skew, tol));
    if skew.unsigned_abs() > tol {
        Finding::fail(
            "clock",
            format!("{detail}: runs act only on conclusive evidence"),
            "synchronise both clocks (chrony, ntpd or systemd-timesyncd on the database \
             server and on this host)",
        )
    } else {
        Finding::pass("clock", detail)
    }
}

fn offset_text(secs: i64) -> String {
    let sign = if secs < 0 { '-' } else { '+' };
    let a = secs.unsigned_abs();
    format!("{sign}{:02}:{:02}", a / 3600, (a % 3600) / 60)
}

/// One watch's table, index, message column, running rows and history. False when the
/// table or a column the watch names is missing (a bad configuration: exit 2).
fn watch_database_checks(
    cfg: &Config,
    w: &Watch,
    store: &mut dyn Store,
    clocks: &Clocks,
    host: &Host,
    rep: &mut Report<'_>,
) -> bool {
    let subject = |what: &str| format!("watch {}: {what}", w.name);
    let schema = match store.schema(w) {
        Ok(s) => s,
        Err(e) => {
            let file = cfg
                .source
                .as_ref()
                .map_or("the configuration".into(), |p| p.display().to_string());
            let (text, fix) = match &e {
                Error::Schema { problem, .. } => (
                    problem.to_string(),
                    format!("{} (watch '{}' is in {file})", problem.fix(&w.name), w.name),
                ),
                other => (
                    other.to_string(),
                    crate::fix::for_error(other, "doctor").unwrap_or_else(|| {
                        fallback_fix(other, cfg.database.as_ref().map(|d| &d.url))
                    }),
                ),
            };
            rep.add(Finding::fail(subject("table"), text, fix));
            return e.exit_code() != exit::USAGE;
        }
    };
    rep.add(columns_finding(w, &schema));
    if let Some(f) = on_update_finding(w, &schema, store) {
        rep.add(f);
    }
    rep.add(values_finding(w, &schema, store));
    rep.add(match store.explain_running(w) {
        Ok(plan) => index_finding(w, &plan),
        Err(e) => Finding::warn(subject("index"), e.to_string(), "run EXPLAIN by hand"),
    });
    rep.add(message_finding(w, &schema));
    if let Some(f) = retry_at_finding(w, &schema, store.dialect()) {
        rep.add(f);
    }
    match store.running_rows(w) {
        Ok(rows) => {
            let here = w.host.as_ref().is_none_or(|h| host.is_me(h));
            for f in rows_findings(w, &rows, clocks, host, here) {
                rep.add(f);
            }
            if here
                && let Some(t) = &w.heartbeat_file
                && let Some(f) = heartbeat_template_finding(w, t, &rows, clocks, host)
            {
                rep.add(f);
            }
            if let Some(f) = owners_finding(w, &rows, host) {
                rep.add(f);
            }
        }
        Err(e) => rep.add(Finding::fail(
            subject("running rows"),
            e.to_string(),
            "check the table",
        )),
    }
    rep.add(history_finding(
        w,
        history::recent_runs(store, w, &schema, clocks),
    ));
    for f in parked_findings(cfg, w, store, clocks) {
        rep.add(f);
    }
    true
}

/// `retry_at_column` (SPEC §14): the column exists (else the schema check failed) and what
/// it holds; and the condition the application's picker must add, in this database's SQL,
/// or rows sent back to the queue are picked again at once.
fn retry_at_finding(w: &Watch, schema: &Schema, d: &store::Dialect) -> Option<Finding> {
    let col = w.retry_at_column.as_ref()?;
    let cond = store::sql::due_condition(d, w, schema)?;
    let declared = schema
        .columns
        .get(&col.name().to_ascii_lowercase())
        .map_or("", |c| c.declared.as_str());
    let how = match schema.retry_at {
        Some(store::Ended::Epoch) => "unix seconds",
        Some(store::Ended::Zone(_)) => "the configured timezone's wall-clock time",
        _ => "the database's NOW()",
    };
    let retry = w.retry.as_ref().map_or("", |r| r.value.as_str());
    Some(Finding::pass(
        format!("watch {}: retry_at_column", w.name),
        format!(
            "{col} ({}) is set to {how} plus {} × 2^(attempts − 1), at most {}, when a row goes \
             back to '{retry}'; the application's picker must wait for it: … WHERE {} = \
             '{retry}' AND {cond}",
            if declared.is_empty() {
                "untyped"
            } else {
                declared
            },
            fmt_duration(w.retry_backoff),
            fmt_duration(w.retry_backoff_max),
            w.status_column,
        ),
    ))
}

/// How many parked rows doctor lists, each with the command that decides it.
const PARKED_LISTED: u32 = 10;

/// The rows parked in `manual_value`: a backlog a person owes. Each listed with how long
/// ago it started and, where the journal knows, how long ago it was parked, and the
/// `selfheal resolve` command a person runs after looking at the job (the statement it
/// makes is in `selfheal show --format json`).
fn parked_findings(
    cfg: &Config,
    w: &Watch,
    store: &mut dyn Store,
    clocks: &Clocks,
) -> Vec<Finding> {
    let Some(manual) = &w.manual_value else {
        return Vec::new();
    };
    let subject = format!("watch {}: parked rows", w.name);
    let count = match store.count_parked(w, manual) {
        Ok(n) => n,
        Err(e) => return vec![Finding::warn(subject, e.to_string(), "check the table")],
    };
    if count == 0 {
        return vec![Finding::pass(subject, format!("none in '{manual}'"))];
    }
    let rows = match store.parked_rows(w, manual, PARKED_LISTED) {
        Ok(r) => r,
        Err(e) => return vec![Finding::warn(subject, e.to_string(), "check the table")],
    };
    let parked_at = parked_times(cfg, w, manual);
    let (why_word, why) = match &w.retry {
        Some(_) => ("retry", "back to the queue (retry_value)"),
        None => ("dead", "as dead (dead_value)"),
    };
    let mut out = vec![Finding::warn(
        subject,
        format!(
            "{count} row{} in '{manual}' wait{} for a person (selfheal does not judge a \
             parked row again; every run counts them: selfheal_parked_rows)",
            if count == 1 { "" } else { "s" },
            if count == 1 { "s" } else { "" },
        ),
        format!(
            "look at each job (selfheal show {} ID: is its worker still running? what did it \
             leave half done?), then decide with the selfheal resolve command below (--as \
             running puts a row whose worker is fine back; --as {why_word} releases it {why}){}",
            w.name,
            if count > rows.len() as u64 {
                format!(
                    "; the first {} are listed, selfheal show lists them all",
                    rows.len()
                )
            } else {
                String::new()
            }
        ),
    )];
    let host_now = crate::clock::epoch(SystemTime::now());
    for r in &rows {
        let started = match r.started.stamp {
            Ok(Some(s)) => age_on_db_clock(s, &clocks.db)
                .ok()
                .and_then(|a| u64::try_from(a).ok())
                .map_or_else(
                    || format!("started at {}", r.started.raw),
                    |a| format!("started {} ago", human(a)),
                ),
            _ => format!("started at {}", r.started.raw),
        };
        let key = (history::id_key(&r.id.to_json()), r.started.raw.to_string());
        let parked = match parked_at.get(&key) {
            Some((time, Some(t))) => match u64::try_from(host_now.saturating_sub(*t)) {
                Ok(ago) => format!("parked {} ago ({time}, from the journal)", human(ago)),
                // Journaled under a clock that ran ahead of this one.
                Err(_) => format!(
                    "parked at {time} (from the journal), a time still to come by this \
                     host's clock"
                ),
            },
            Some((time, None)) => format!("parked at {time} (from the journal)"),
            None => "parked at a time the journal does not know".to_string(),
        };
        out.push(Finding::warn(
            format!("watch {}: parked row id={}", w.name, r.id),
            format!("{parked}; its run {started}"),
            format!(
                "after looking ({}): {}",
                crate::person::show_command(&w.name, &r.id),
                crate::person::resolve_command(w, &r.id, true, false)
            ),
        ));
    }
    out
}

/// When the journal says each row of the watch was parked in `manual`: by id key and the
/// start value the compare-and-set matched, the entry's time and that time in unix seconds.
fn parked_times(
    cfg: &Config,
    w: &Watch,
    manual: &str,
) -> std::collections::HashMap<(String, String), (String, Option<i64>)> {
    let mut at = std::collections::HashMap::new();
    let Some(db) = &cfg.database else {
        return at;
    };
    let db = crate::journal::DatabaseId::of(db);
    let _ = crate::journal::read_all(&cfg.run.state_dir, &db, &mut |e| {
        if e.watch == w.name && e.applied && e.made() && e.to == manual {
            let secs = chrono::DateTime::parse_from_rfc3339(&e.time)
                .ok()
                .map(|t| t.timestamp());
            at.insert(
                (e.id.key(), e.started.clone().unwrap_or_default()),
                (e.time.clone(), secs),
            );
        }
    });
    at
}

fn columns_finding(w: &Watch, schema: &Schema) -> Finding {
    let mut seen = Vec::new();
    let mut bad = Vec::new();
    for (key, col, role) in store::types::named_columns(w) {
        let Some(c) = schema.columns.get(&col.name().to_ascii_lowercase()) else {
            continue;
        };
        let ty = &c.declared;
        seen.push(format!(
            "{col} {}",
            if ty.is_empty() { "(untyped)" } else { ty }
        ));
        if let Some(why) = c.ty.problem(role) {
            bad.push(format!("{key} {col} is {ty}: {why}"));
        }
    }
    let subject = format!("watch {}: table {}", w.name, w.table);
    if bad.is_empty() {
        Finding::pass(subject, format!("columns {}", seen.join(", ")))
    } else {
        Finding::fail(
            subject,
            bad.join("; "),
            "point the key at a column of a usable type (a start or heartbeat: DATETIME, \
             TIMESTAMP or integer unix seconds)",
        )
    }
}

/// A start or heartbeat column declared `ON UPDATE CURRENT_TIMESTAMP` (the default for the
/// first TIMESTAMP column of a table on older MySQL): every `UPDATE` of the row that does
/// not assign it moves it to now. selfheal's and the PHP helpers' writes assign it to
/// itself, but the application's own writes restart the row's age (a stuck job never
/// reaches `max_age`) or beat for it. Names each such column and the `ALTER TABLE` that
/// drops the clause, keeping the rest of its definition as the database writes it.
fn on_update_finding(w: &Watch, schema: &Schema, store: &mut dyn Store) -> Option<Finding> {
    let roles = [
        (
            "started_column",
            Some(&w.started_column),
            "the row's age starts again, so max_age never ends a stuck job",
        ),
        (
            "heartbeat_column",
            w.heartbeat_column.as_ref(),
            "any write to the row looks like a heartbeat",
        ),
    ];
    let mut details = Vec::new();
    let mut fixes = Vec::new();
    for (key, col, harm) in roles {
        let Some(col) = col.filter(|c| {
            schema
                .columns
                .get(&c.name().to_ascii_lowercase())
                .is_some_and(|c| c.on_update_now)
        }) else {
            continue;
        };
        details.push(format!(
            "{key} {col} is declared ON UPDATE CURRENT_TIMESTAMP: every UPDATE of a row that \
             does not set it moves it to now ({harm})"
        ));
        let (table, column) = (w.table.quoted('`'), col.quoted('`'));
        let definition = store
            .column_definition(w, col)
            .ok()
            .flatten()
            .and_then(|d| store::types::without_on_update(&d));
        fixes.push(match definition {
            Some(d) => format!("ALTER TABLE {table} MODIFY {column} {d}"),
            None => format!(
                "ALTER TABLE {table} MODIFY {column} with its definition from SHOW CREATE TABLE \
                 {} without ON UPDATE CURRENT_TIMESTAMP",
                w.table
            ),
        });
    }
    if details.is_empty() {
        return None;
    }
    Some(Finding::warn(
        format!("watch {}: ON UPDATE", w.name),
        format!(
            "{}; selfheal's and Selfheal\\Lease's own writes keep it, the application's do not",
            details.join("; ")
        ),
        format!("drop the clause: {}", fixes.join("; ")),
    ))
}

/// Whether the status column can hold every status the watch writes; when it cannot, the
/// `ALTER TABLE` that makes room (keeping the rest of the column's definition as the
/// database writes it) and the configuration change that avoids it.
fn values_finding(w: &Watch, schema: &Schema, store: &mut dyn Store) -> Finding {
    let subject = format!("watch {}: status values", w.name);
    let Some(col) = schema
        .columns
        .get(&w.status_column.name().to_ascii_lowercase())
    else {
        return Finding::pass(subject, "no status column to check");
    };
    let values = store::types::written_values(w);
    let listed = values
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let misfits = store::types::misfits(w, schema);
    let ty = col.type_text();
    if misfits.is_empty() {
        return Finding::pass(
            subject,
            if col.enforced {
                format!("{} {ty} holds {listed}", w.status_column)
            } else {
                format!(
                    "{} ({}) holds {listed} (SQLite stores any value)",
                    w.status_column,
                    if ty.is_empty() { "untyped" } else { &ty }
                )
            },
        );
    }
    let detail = misfits
        .iter()
        .map(|(k, v, m)| {
            format!(
                "{k} {v:?} cannot be stored in {} {ty}: {m}",
                w.status_column
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut fixes = Vec::new();
    let bad: Vec<&str> = misfits.iter().map(|(_, v, _)| *v).collect();
    if let Some(wider) = col.widened(&bad) {
        let rest = store
            .column_definition(w, &w.status_column)
            .ok()
            .flatten()
            .map(|d| store::types::split_type(&d).1.to_string());
        fixes.push(match rest {
            Some(rest) => format!(
                "ALTER TABLE {} MODIFY {} {wider}{rest}",
                w.table.quoted('`'),
                w.status_column.quoted('`')
            ),
            None => format!(
                "ALTER TABLE {} MODIFY {} {wider} (keep its NULL, DEFAULT, character set \
                 and comment: SHOW CREATE TABLE {} shows them)",
                w.table.quoted('`'),
                w.status_column.quoted('`'),
                w.table
            ),
        });
    }
    for (key, _, m) in &misfits {
        fixes.push(match m {
            store::types::Misfit::NotMember { members } => {
                let others: Vec<&str> = members
                    .iter()
                    .map(String::as_str)
                    .filter(|m| *m != w.running_value)
                    .collect();
                format!(
                    "set {key} in watch '{}' to one of the column's values the application \
                     means for it ({})",
                    w.name,
                    others.join(", ")
                )
            }
            store::types::Misfit::TooLong { length, .. } => format!(
                "set {key} in watch '{}' to a value of at most {length} characters",
                w.name
            ),
            store::types::Misfit::NotANumber => format!(
                "set {key} in watch '{}' to the number the application uses for that state",
                w.name
            ),
        });
    }
    Finding::fail(
        subject,
        format!(
            "{detail}: a strict server refuses every such change, a lenient one (sql_mode \
             without STRICT_TRANS_TABLES) would store a mangled value and the row would \
             vanish from every status the application knows; selfheal check refuses to \
             start (exit 2) until it fits"
        ),
        fixes.join("; or "),
    )
}

/// Below this many expected rows a full scan is no outage (MySQL picks one on small tables
/// even when an index exists).
const SMALL_TABLE_ROWS: u64 = 10_000;

fn index_finding(w: &Watch, plan: &ScanPlan) -> Finding {
    let subject = format!("watch {}: index", w.name);
    let create = format!(
        "CREATE INDEX idx_{}_{} ON {} ({})",
        w.table.name(),
        w.status_column.name(),
        w.table,
        w.status_column
    );
    match (&plan.index, plan.candidates.is_empty(), plan.rows) {
        (Some(i), _, _) => Finding::pass(
            subject,
            format!("running rows are found through index {i} ({})", plan.detail),
        ),
        (None, false, Some(r)) if r >= SMALL_TABLE_ROWS => Finding::warn(
            subject,
            format!(
                "the database reads ~{r} rows although {} could serve (most rows running, or \
                 stale statistics?) ({})",
                plan.candidates.join(", "),
                plan.detail
            ),
            format!("ANALYZE TABLE {}", w.table),
        ),
        (None, false, _) => Finding::pass(
            subject,
            format!(
                "{} can find running rows; on a table this small the database reads it \
                 whole ({})",
                plan.candidates.join(", "),
                plan.detail
            ),
        ),
        (None, true, rows) => {
            let (mark, cost) = scan_cost(rows);
            Finding {
                mark,
                subject,
                detail: format!(
                    "no index covers {}: every run reads the whole table{cost} ({})",
                    w.status_column, plan.detail
                ),
                fix: Some(create),
            }
        }
    }
}

/// From this many rows on, a scan on every run is felt by the application's own queries.
const BIG_TABLE_ROWS: u64 = 1_000_000;

/// What a scan of the whole table on every run costs, in words scaled to the rows it
/// reads (`None`: the database does not say), and how much it matters: a table of a few
/// rows costs nothing yet, so it is a warning; one that already costs is a failure.
fn scan_cost(rows: Option<u64>) -> (Mark, String) {
    match rows {
        Some(r) if r < SMALL_TABLE_ROWS => (
            Mark::Warn,
            format!(
                " — {} now, which costs nothing yet, but a job log grows, and each run \
                 then reads all of it",
                rows_words(r)
            ),
        ),
        Some(r) if r < BIG_TABLE_ROWS => (Mark::Fail, format!(", ~{r} rows now, on every run")),
        Some(r) => (
            Mark::Fail,
            format!(
                ", ~{r} rows now, on every run: a scan that size every few minutes slows \
                 the application's own queries"
            ),
        ),
        None => (
            Mark::Fail,
            ", and each run costs more as the table grows".to_string(),
        ),
    }
}

fn rows_words(r: u64) -> String {
    match r {
        0 => "it is empty".into(),
        1 => "1 row".into(),
        _ => format!("~{r} rows"),
    }
}

fn message_finding(w: &Watch, schema: &Schema) -> Finding {
    let subject = format!("watch {}: message", w.name);
    let Some(col) = &w.message_column else {
        return Finding::pass(
            subject,
            "no message_column: the reason for a change goes to the journal only",
        );
    };
    let need = evidence::longest_message(w);
    let words = evidence::longest_words(w);
    let widen = format!(
        "widen it, e.g. ALTER TABLE {} MODIFY {col} VARCHAR({}) (keep its NULL and DEFAULT)",
        w.table,
        need.max(255)
    );
    match schema.message_max {
        None => Finding::pass(subject, format!("{col} holds any length")),
        Some(n) if n >= need => Finding::pass(
            subject,
            format!("{col} holds {n} characters; a reason needs at most {need}"),
        ),
        Some(n) if n >= words => Finding::warn(
            subject,
            format!(
                "{col} holds {n} characters; reasons of up to {need} will be cut (the \
                 figures in parentheses go first, the words stay)"
            ),
            widen,
        ),
        Some(n) => Finding::fail(
            subject,
            format!(
                "{col} holds {n} characters, too few for the words of a reason (up to \
                 {words}, e.g. \"self-heal: dead: lock free, worker gone\"): a person \
                 reading the row would not learn why it was changed"
            ),
            widen,
        ),
    }
}

/// Times in the future on the database clock, and a one-line census of the running rows.
fn rows_findings(
    w: &Watch,
    rows: &[store::RunningRow],
    clocks: &Clocks,
    host: &Host,
    here: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut future: Vec<(String, i64)> = Vec::new();
    for r in rows {
        let mut look = |col: &str, tv: &store::TimeValue| {
            if let Ok(Some(s)) = &tv.stamp
                && let Ok(age) = age_on_db_clock(*s, &clocks.db)
                && plausible_age(age, col).is_err()
            {
                future.push((format!("row {}: {col} = {}", r.id, tv.raw), -age));
            }
        };
        look(w.started_column.name(), &r.started);
        if let (Some(c), Some(tv)) = (&w.heartbeat_column, &r.heartbeat) {
            look(c.name(), tv);
        }
    }
    if let Some((first, ahead)) = future.first() {
        // To the nearest hour, halves away from zero, in integers: no float to cast back.
        let hours = ahead / 3600 + ahead % 3600 / 1800;
        let whole_hours = hours != 0 && (ahead - hours * 3600).abs() <= 120;
        let fix = match (clocks.tz, whole_hours) {
            (Some(tz), _) => format!(
                "timezone = \"{tz}\" is set: make it the zone the application writes in, or \
                 fix the clock of the host that writes these values"
            ),
            (None, true) => format!(
                "the application seems to write naive times {hours:+}h off the session's \
                 zone (an application that sets its own session time_zone — Laravel's MySQL \
                 connection does when its timezone is set — and writes NOW() into DATETIME \
                 columns): set [database] timezone to the zone it writes in (one at UTC{} \
                 now), or fix the writing host's clock",
                offset_text(
                    clocks.db.now_naive.and_utc().timestamp() - clocks.db.now_epoch + hours * 3600
                )
            ),
            (None, false) => "fix the clock of the host that writes these values".into(),
        };
        out.push(Finding::fail(
            format!("watch {}: times", w.name),
            format!(
                "{} of {} running rows carry times in the future on the database clock, e.g. \
                 {first} is {} ahead: such rows are judged by the facts about now alone (a \
                 gone pid, a free lock), and otherwise reported as unknown",
                future.len(),
                rows.len(),
                human(ahead.unsigned_abs())
            ),
            fix,
        ));
    }
    if !here {
        return out;
    }
    let t = evidence::thresholds(w);
    let host_now = SystemTime::now();
    let snapshot = evidence::Snapshot::read(w);
    let mut counts: Vec<(Verdict, usize)> = Vec::new();
    let mut unknown: Option<String> = None;
    // Rows whose owner pid is provably their worker though it started long after them: the
    // row's times are wrong (the first, and how many).
    let mut mistimed: Option<(String, u64)> = None;
    let mut mistimed_n = 0usize;
    let scene = evidence::Scene {
        clocks,
        host,
        host_now,
        snapshot: &snapshot,
        local_rows: rows
            .iter()
            .filter(|r| !evidence::is_remote(w, r, host))
            .count(),
    };
    for r in rows {
        let ev = evidence::gather(w, r, &scene);
        let d = decide::decide(&ev, t);
        if let decide::Basis::TimesWrong { after_s, proof } = d.basis {
            mistimed_n += 1;
            mistimed.get_or_insert_with(|| {
                (
                    format!(
                        "row {} (its owner pid is its worker: {})",
                        r.id,
                        proof.describe()
                    ),
                    after_s,
                )
            });
        }
        if d.verdict == Verdict::Unknown && unknown.is_none() {
            unknown = Some(format!("row {}: {}", r.id, d.basis.describe()));
        }
        match counts.iter_mut().find(|(v, _)| *v == d.verdict) {
            Some((_, n)) => *n += 1,
            None => counts.push((d.verdict, 1)),
        }
    }
    let census = if counts.is_empty() {
        "none now".to_string()
    } else {
        counts
            .iter()
            .map(|(v, n)| format!("{n} {}", v.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some((first, after_s)) = mistimed {
        out.push(Finding::fail(
            format!("watch {}: times", w.name),
            format!(
                "{mistimed_n} running row{} look{} {} older than {} worker: {first} — the \
                 row's times are wrong by about that much, not its worker (such rows are \
                 reported as unknown, never marked)",
                if mistimed_n == 1 { "" } else { "s" },
                if mistimed_n == 1 { "s" } else { "" },
                human(after_s),
                if mistimed_n == 1 { "its" } else { "their" },
            ),
            "most often an application that sets its own session time_zone (Laravel's MySQL \
             connection does when its timezone is set) and writes NOW() into DATETIME \
             columns: set [database] timezone to the zone it writes in, have it write UTC, \
             or make the columns TIMESTAMP; otherwise fix the writing host's clock",
        ));
    }
    let subject = format!("watch {}: running rows", w.name);
    match unknown {
        Some(u) if future.is_empty() => out.push(Finding::warn(
            subject,
            format!("{census}; {u}"),
            "selfheal check --explain shows each row's evidence",
        )),
        _ => out.push(Finding::pass(subject, census)),
    }
    out
}

/// Heartbeat files, lock files and the pids written in them are this host's: a watch that
/// relies on them but says neither whose rows are whose (`owner_column`) nor which host its
/// jobs run on (`host`) kills another host's live jobs if its cron line runs there too.
fn host_local_finding(w: &Watch, host: &Host) -> Option<Finding> {
    if w.owner_column.is_some() || w.host.is_some() {
        return None;
    }
    let relies: Vec<&str> = [
        ("heartbeat_file", w.heartbeat_file.is_some()),
        ("lock_file", w.lock_file.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if relies.is_empty() {
        return None;
    }
    // Right on one host; advice, which leaves the exit status as it is (SPEC §10).
    Some(Finding::advice(
        format!("watch {}: hosts", w.name),
        format!(
            "{} {} files on this host, and the watch has neither owner_column nor host: \
             right while its jobs run on this host only; if the same cron line ever runs \
             on another app server too, each host judges every row by its own files and \
             marks the other's live jobs dead",
            relies.join(" and "),
            if relies.len() == 1 { "names" } else { "name" },
        ),
        format!(
            "pin the watch to its one host (host = \"{}\"), or, before a second host runs \
             it, let workers write HOST:PID into an owner column and set owner_column",
            host.name
        ),
    ))
}

/// Which hosts own the running rows right now (`owner_column` only), and a warning when
/// `HOST:PID` owners are mixed with bare pids or empty owners: those are judged as this
/// host's on every host that runs the watch.
fn owners_finding(w: &Watch, rows: &[store::RunningRow], host: &Host) -> Option<Finding> {
    use crate::probe::owner::parse_owner;
    let col = w.owner_column.as_ref()?;
    let mut hosts: Vec<(String, usize)> = Vec::new();
    let (mut bare, mut empty, mut invalid) = (0usize, 0usize, 0usize);
    for r in rows {
        match r.owner.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            None => empty += 1,
            Some(v) => match parse_owner(v) {
                Some((Some(h), _)) => {
                    let h = h.to_ascii_lowercase();
                    match hosts.iter_mut().find(|(x, _)| *x == h) {
                        Some((_, n)) => *n += 1,
                        None => hosts.push((h, 1)),
                    }
                }
                Some((None, _)) => bare += 1,
                None => invalid += 1,
            },
        }
    }
    hosts.sort();
    let mut parts: Vec<String> = hosts
        .iter()
        .map(|(h, n)| {
            let me = if host.is_me(h) { " (this host)" } else { "" };
            format!("{h}{me} {n}")
        })
        .collect();
    let unqualified = bare + empty;
    if bare > 0 {
        parts.push(format!("bare PID {bare}"));
    }
    if empty > 0 {
        parts.push(format!("no owner {empty}"));
    }
    if invalid > 0 {
        parts.push(format!("not HOST:PID {invalid}"));
    }
    let subject = format!("watch {}: hosts", w.name);
    if parts.is_empty() {
        return Some(Finding::pass(subject, "no running rows now"));
    }
    let census = format!("running rows by owner: {}", parts.join(", "));
    if !hosts.is_empty() && unqualified > 0 {
        return Some(Finding::warn(
            subject,
            format!(
                "{census}: the {unqualified} without a host are judged as this host's ({}) \
                 by every host that runs this watch, with its own pids and files",
                host.name
            ),
            format!(
                "make every worker write HOST:PID into {col} (PHP: gethostname() . ':' . \
                 getmypid())"
            ),
        ));
    }
    Some(Finding::pass(subject, census))
}

/// Where the database's advisory lock does not coordinate hosts (Galera: node-local
/// `GET_LOCK`). Only said when something is amiss, and only for watches that need it.
fn advisory_lock_finding(cfg: &Config, store: &mut dyn Introspect) -> Option<Finding> {
    if cfg.watches.is_empty() {
        return None;
    }
    match store.advisory_lock_gap() {
        Ok(None) => None,
        Ok(Some(gap)) => Some(Finding::warn(
            "advisory lock",
            format!(
                "{gap}; with owner_column each host still judges only its own rows, but two \
                 hosts may act on the same watch at once (every write stays a \
                 compare-and-set, so no change is applied twice)"
            ),
            "run the cron line on one host per watch (host = …), or point every host at \
             the same node",
        )),
        Err(e) => Some(Finding::warn(
            "advisory lock",
            format!("cannot tell whether GET_LOCK reaches every host: {e}"),
            "check the account's rights to read server variables",
        )),
    }
}

fn history_finding(w: &Watch, recent: crate::error::Result<Recent>) -> Finding {
    let subject = format!("watch {}: max_age", w.name);
    let cap = fmt_duration(w.max_age);
    let runs = match recent {
        Ok(Recent::Runs(r)) => r,
        Ok(Recent::NoEndedColumn) => {
            return Finding::pass(
                subject,
                format!("{cap}; no ended_column, so no finished runs to compare it with"),
            );
        }
        Ok(Recent::IdNotPrimary) => {
            return Finding::warn(
                subject,
                format!(
                    "{cap}; not compared with finished runs: {} is not the primary key, so \
                     the latest rows cannot be read cheaply",
                    w.id_column
                ),
                "see `selfheal stats` for the runtimes of every finished row",
            );
        }
        Err(e) => {
            return Finding::warn(
                subject,
                format!("cannot read finished runs: {e}"),
                "check the table",
            );
        }
    };
    let Some((longest, _)) = &runs.longest else {
        return Finding::pass(
            subject,
            format!("{cap}; no finished runs yet to compare it with"),
        );
    };
    let what = format!(
        "the longest of the last {} runs that ended well took {}",
        runs.runs,
        fmt_duration(Duration::from_secs(*longest))
    );
    match runs.max_age_warning(w) {
        Some(warn) => Finding::fail(
            subject,
            format!(
                "{cap} is below 1.5x what real runs take ({what}): it would kill legitimate runs"
            ),
            format!(
                "raise max_age to at least {}",
                fmt_duration(Duration::from_secs(warn.at_least_s))
            ),
        ),
        None => Finding::pass(
            subject,
            format!("{cap} is at least 1.5x what real runs take ({what})"),
        ),
    }
}

/// The login name and uid selfheal runs as, for messages.
fn me() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid).ok().flatten() {
        Some(u) => format!("{} (uid {uid})", u.name),
        None => format!("uid {uid}"),
    }
}

/// Whether this user can look inside `dir` (stat files there) — exactly what a heartbeat or
/// lock probe needs.
#[derive(Debug, PartialEq, Eq)]
enum DirAccess {
    Ok,
    Missing,
    NotDir,
    Denied(String),
    Other(String),
}

fn probe_dir(dir: &Path) -> DirAccess {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => DirAccess::Missing,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => DirAccess::Denied(e.to_string()),
        Err(e) => DirAccess::Other(e.to_string()),
        Ok(m) if !m.is_dir() => DirAccess::NotDir,
        Ok(_) => match std::fs::metadata(dir.join(".selfheal-doctor-probe")) {
            Ok(_) => DirAccess::Ok,
            Err(e) if e.kind() == ErrorKind::NotFound => DirAccess::Ok,
            Err(e) if e.kind() == ErrorKind::PermissionDenied => DirAccess::Denied(e.to_string()),
            Err(e) => DirAccess::Other(e.to_string()),
        },
    }
}

/// The directory a template's files live in: the part before the first component holding
/// `{id}`; and the file itself when the template has no `{id}`.
fn template_dir(t: &PathTemplate) -> (PathBuf, Option<PathBuf>) {
    let p = Path::new(t.as_str());
    if !t.has_id() {
        return (
            p.parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
            Some(p.to_path_buf()),
        );
    }
    let mut dir = PathBuf::new();
    for c in p.components() {
        if let Component::Normal(s) = c
            && s.to_string_lossy().contains("{id}")
        {
            break;
        }
        dir.push(c);
    }
    (dir, None)
}

/// The command that lets this user look inside `dir` (or the directory above it that
/// shuts it out), for the owner, group and mode found there.
fn denied_fix(dir: &Path) -> String {
    crate::fix::access_fix_in(dir, crate::fix::Need::Search, "doctor").unwrap_or_else(|| {
        format!(
            "give {} search (x) permission on {} and every directory above it",
            crate::fix::Me::current().name,
            dir.display()
        )
    })
}

fn heartbeat_finding(w: &Watch, t: &PathTemplate) -> Finding {
    let subject = format!("watch {}: heartbeat_file", w.name);
    let (dir, file) = template_dir(t);
    match probe_dir(&dir) {
        DirAccess::Ok => {}
        DirAccess::Missing => {
            return Finding::fail(
                subject,
                format!(
                    "directory {} does not exist: no row can be judged by its heartbeat \
                     (every row older than stale_after is unknown, for a person, unless its \
                     owner pid or lock proves it dead)",
                    dir.display()
                ),
                format!("correct heartbeat_file (now {})", t.as_str()),
            );
        }
        DirAccess::NotDir => {
            return Finding::fail(
                subject,
                format!("{} is not a directory", dir.display()),
                format!("correct heartbeat_file (now {})", t.as_str()),
            );
        }
        DirAccess::Denied(e) => {
            return Finding::fail(
                subject,
                format!(
                    "{} cannot look inside {} ({e}): every heartbeat would be unreadable and \
                     every row unknown",
                    me(),
                    dir.display()
                ),
                denied_fix(&dir),
            );
        }
        DirAccess::Other(e) => {
            return Finding::fail(
                subject,
                format!("{}: {e}", dir.display()),
                "check the file system (NFS mount?)",
            );
        }
    }
    match file {
        None => Finding::pass(
            subject,
            format!("{} can read the heartbeat files in {}", me(), dir.display()),
        ),
        Some(f) => match crate::probe::file_heartbeat(&f, SystemTime::now()) {
            Heartbeat::Age(a) | Heartbeat::BeforeRow(a) => Finding::pass(
                subject,
                format!("{} is readable; it last beat {} ago", f.display(), human(a)),
            ),
            Heartbeat::Missing => Finding::pass(
                subject,
                format!(
                    "{} does not exist now (no job running?); its directory is readable",
                    f.display()
                ),
            ),
            Heartbeat::Unusable(why) | Heartbeat::Unreadable(why) => {
                Finding::fail(subject, why, denied_fix(&dir))
            }
        },
    }
}

/// At most this many running rows are probed for their heartbeat file by
/// [`heartbeat_template_finding`], at most this many names of the template's directory
/// read for its hint, and at most this many of them named.
const TEMPLATE_ROWS: usize = 100;
const TEMPLATE_DIR_NAMES: usize = 1000;
const TEMPLATE_HINTS: usize = 3;

/// A `heartbeat_file` that matches no running row's file while its directory is there: a
/// typo in the file name (`sync-{id}.hb` for the job's `sync_{id}.hb`) passes the directory
/// check, and looks to `check` exactly like every job dying at once (held, for a person:
/// SPEC §5). Said when this host's running rows past `stale_after` (the first
/// [`TEMPLATE_ROWS`] of them) all lack their file, the template's directory can be searched,
/// and no file of theirs is there — with names in that directory that look like the
/// template's (the same prefix or extension) as a hint. Bounded: [`TEMPLATE_ROWS`] stats and
/// [`TEMPLATE_DIR_NAMES`] directory entries.
fn heartbeat_template_finding(
    w: &Watch,
    t: &PathTemplate,
    rows: &[store::RunningRow],
    clocks: &Clocks,
    host: &Host,
) -> Option<Finding> {
    let stale_after = i64::try_from(w.stale_after.as_secs()).unwrap_or(i64::MAX);
    let now = SystemTime::now();
    let mut looked = 0usize;
    let mut first: Option<(String, PathBuf)> = None;
    for r in rows.iter().filter(|r| !evidence::is_remote(w, r, host)) {
        let Ok(Some(s)) = &r.started.stamp else {
            continue;
        };
        if !age_on_db_clock(*s, &clocks.db).is_ok_and(|a| a > stale_after) {
            continue;
        }
        let id = r.id.to_string();
        let Ok(path) = t.render(&id) else {
            continue;
        };
        // Any file there (even a stale one, or an earlier row's) is the template matching.
        if crate::probe::file_heartbeat(&path, now) != Heartbeat::Missing {
            return None;
        }
        first.get_or_insert((id, path));
        looked += 1;
        if looked == TEMPLATE_ROWS {
            break;
        }
    }
    let (id, path) = first?;
    let (dir, file) = template_dir(t);
    if probe_dir(&dir) != DirAccess::Ok {
        // The directory's own finding says what is wrong with it.
        return None;
    }
    let file = file.as_deref().and_then(Path::file_name);
    // The name the files of `dir` should have: the component with `{id}`, or the file's.
    let components = Path::new(t.as_str()).components();
    let pattern = components
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .find(|s| s.contains("{id}"))
        .or_else(|| file.map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let hint = match similar_names(&dir, &pattern).as_slice() {
        [] => format!("nothing in {} looks like it", dir.display()),
        names => format!(
            "{} holds {}",
            dir.display(),
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Some(Finding::warn(
        format!("watch {}: heartbeat files", w.name),
        format!(
            "{} past stale_after ({}) {} (e.g. row {id}: {} does not exist), while {} exists: \
             {} seems to name no file the job writes (a typo?), which looks to check exactly \
             like every job dying at once; {hint}",
            match looked {
                1 => "this host's one running row".to_string(),
                TEMPLATE_ROWS =>
                    format!("not one of the first {looked} of this host's running rows"),
                n => format!("not one of this host's {n} running rows"),
            },
            fmt_duration(w.stale_after),
            if looked == 1 {
                "has no heartbeat file"
            } else {
                "has its heartbeat file"
            },
            path.display(),
            dir.display(),
            t.as_str(),
        ),
        format!(
            "correct heartbeat_file (now {}) to the file the job touches; selfheal check \
             --explain shows where each row's heartbeat was looked for",
            t.as_str()
        ),
    ))
}

/// Up to [`TEMPLATE_HINTS`] names in `dir` (of the first [`TEMPLATE_DIR_NAMES`] read) that
/// look like `pattern`, a template's file name (`sync-{id}.hb`): the same text before
/// `{id}`, the same extension, or the same leading word (`sync`), sorted.
fn similar_names(dir: &Path, pattern: &str) -> Vec<String> {
    let (before, after) = pattern.split_once("{id}").unwrap_or((pattern, ""));
    let extension = after
        .rsplit_once('.')
        .or_else(|| before.rsplit_once('.').filter(|_| after.is_empty()))
        .map(|(_, e)| format!(".{e}"))
        .filter(|e| e.len() > 1);
    let word: String = before
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .take(TEMPLATE_DIR_NAMES)
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            (!before.is_empty() && n.starts_with(before))
                || extension.as_deref().is_some_and(|e| n.ends_with(e))
                || (word.chars().count() >= 3 && n.starts_with(&word))
        })
        .collect();
    names.sort();
    names.truncate(TEMPLATE_HINTS);
    names
}

/// Outside the host's initial pid namespace (a container, `unshare --pid`), pids and
/// `/proc/locks` are another namespace's: said once, when a watch relies on them.
fn pid_namespace_finding(cfg: &Config, ns: &PidNamespace) -> Option<Finding> {
    let PidNamespace::Other(here) = ns else {
        return None;
    };
    let owners = cfg.watches.iter().any(|w| w.owner_column.is_some());
    let locks = cfg.watches.iter().any(|w| w.lock_file.is_some());
    if !owners && !locks {
        return None;
    }
    Some(Finding::warn(
        "pid namespace",
        format!(
            "selfheal runs in pid namespace {here}, not the host's initial one ({INITIAL_PID_NS}): \
             kill(pid, 0), /proc and /proc/locks see only this namespace's processes, so owner \
             pids count as not_visible (they prove nothing either way) and a lock /proc/locks \
             shows free is confirmed with a try-lock before a row is marked on it"
        ),
        "run selfheal on the host itself, not in a container, for owner pids to count as \
         evidence",
    ))
}

fn lock_dir_finding(w: &Watch, t: &PathTemplate) -> Finding {
    let subject = format!("watch {}: lock_file", w.name);
    let (dir, _) = template_dir(t);
    match probe_dir(&dir) {
        DirAccess::Ok => match swappable_lock_dir(&dir) {
            Some(who) => Finding::warn(
                subject,
                format!(
                    "directory {} can be written by {who} (and is not sticky): anyone there \
                     could swap a lock file the job holds for an unlocked one, so a free lock \
                     there proves nothing and its rows are judged by their heartbeat alone",
                    dir.display()
                ),
                format!(
                    "chmod o-w,g-w {d} (or chmod +t {d}), or keep the job's locks in a \
                     directory only its user can write",
                    d = dir.display()
                ),
            ),
            None => Finding::pass(
                subject,
                format!(
                    "directory {} exists and {} can look inside (the lock is probed, never \
                     taken or deleted)",
                    dir.display(),
                    me()
                ),
            ),
        },
        DirAccess::Missing => Finding::fail(
            subject,
            format!(
                "directory {} does not exist: the lock will always be absent, which proves \
                 nothing",
                dir.display()
            ),
            format!("correct lock_file (now {})", t.as_str()),
        ),
        DirAccess::NotDir => Finding::fail(
            subject,
            format!("{} is not a directory", dir.display()),
            format!("correct lock_file (now {})", t.as_str()),
        ),
        DirAccess::Denied(e) => Finding::fail(
            subject,
            format!("{} cannot look inside {} ({e})", me(), dir.display()),
            denied_fix(&dir),
        ),
        DirAccess::Other(e) => Finding::fail(
            subject,
            format!("{}: {e}", dir.display()),
            "check the file system",
        ),
    }
}

/// Who could swap a lock file in `dir` (SPEC §5), taking the directory's owner as the
/// lock files' (a job keeps its locks in a directory of its own); `None` when nobody but
/// root, this user and that owner can.
fn swappable_lock_dir(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    crate::fsafe::swappable_by(m.uid(), m.gid(), m.mode() & 0o7777, m.uid())
}

fn writable(p: &Path) -> bool {
    access(p, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
}

/// The nearest existing ancestor of `p` (itself included).
fn existing_ancestor(p: &Path) -> Option<&Path> {
    p.ancestors().find(|a| a.exists())
}

fn run_lock_finding(path: &Path, state_dir: &Path) -> Finding {
    let subject = "run lock";
    // Reached as check reaches it (src/runlock.rs): a link at its name or on the way, or
    // another user's lock, is refused; an existing lock is opened read-write through the
    // same walk, never by following a link (doctor runs as root too).
    let found = crate::fsafe::Dir::open_parent(path).and_then(|(d, name)| {
        match d.stat_at(&name)? {
            Some(st) if st.kind == crate::fsafe::Kind::Symlink => {
                Err(crate::fsafe::Error::FinalSymlink {
                    path: path.to_path_buf(),
                })
            }
            Some(st) if st.uid != nix::unistd::geteuid().as_raw() => {
                Err(crate::fsafe::Error::NotOwned {
                    path: path.to_path_buf(),
                    owner: crate::fsafe::Who::of(st.uid),
                    me: crate::fsafe::Who::me(),
                })
            }
            // Read-write, as check opens it (a read-only descriptor is not enough any
            // more); the mode applies only if it vanished meanwhile, as check would
            // create it.
            Some(_) => d.open_rw(&name, 0o600).map(|_| true),
            None => Ok(false),
        }
    });
    match found {
        Ok(true) => return Finding::pass(subject, format!("{} is usable", path.display())),
        Err(e) if !e.is_not_found() && e.io_kind().is_none() => {
            return refused_finding(subject, e, "opening the run lock (run.lock_file)");
        }
        Err(e) if !e.is_not_found() => {
            // Shut out on the way: say where, in words, not the system call that failed.
            let why = match (e.io_kind(), crate::fix::shut_out_at(path)) {
                (Some(ErrorKind::PermissionDenied), Some(dir)) => {
                    format!("it may not look inside {}", crate::fix::describe_dir(dir))
                }
                _ => e.to_string(),
            };
            return Finding::fail(
                subject,
                format!("{} cannot open {}: {why}", me(), path.display()),
                lock_fix(path, state_dir),
            );
        }
        _ => {}
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    // The directory may not be there yet: a run creates the state directory first.
    match existing_ancestor(dir) {
        Some(a) if a.is_dir() && writable(a) => Finding::pass(
            subject,
            format!(
                "{} will be created in {} on the first run",
                path.display(),
                dir.display()
            ),
        ),
        _ => Finding::fail(
            subject,
            format!(
                "{} does not exist and {} cannot create it in {}",
                path.display(),
                me(),
                dir.display()
            ),
            lock_fix(path, state_dir),
        ),
    }
}

/// The fix for a run lock this user cannot create or open: as for the state directory
/// when it lives there (the default); a lock file set elsewhere is best left to the
/// default.
fn lock_fix(path: &Path, state_dir: &Path) -> String {
    if path.starts_with(state_dir) && state_dir.exists() && !state_dir.is_dir() {
        return format!(
            "{} is not a directory: point run.state_dir at a directory (or move that file \
             away)",
            state_dir.display()
        );
    }
    if path.starts_with(state_dir) {
        return crate::fix::state_dir_fix(state_dir, "doctor");
    }
    format!(
        "remove run.lock_file from the configuration: the lock then lives in state_dir \
         ({}), which the run's user writes anyway",
        state_dir.join(config::RUN_LOCK_NAME).display()
    )
}

/// A state directory (or a run lock) selfheal would refuse, said as `check` says it, with
/// its fix.
fn refused_finding(subject: &str, e: crate::fsafe::Error, action: &'static str) -> Finding {
    let e = Error::fsafe(e, action);
    let fix = crate::fix::for_error(&e, "doctor").unwrap_or_default();
    Finding::fail(
        subject,
        format!("{}: check refuses it (exit 3)", e.full_message()),
        fix,
    )
}

fn state_dir_finding(dir: &Path) -> Finding {
    let subject = "state_dir";
    if dir.is_dir() {
        // Reached as check reaches it; not private to this user: check refuses it.
        if let Err(e) =
            crate::fsafe::Dir::open(dir).and_then(|d| d.check_private(crate::state::DIR_WHAT))
            && !e.is_not_found()
        {
            return refused_finding(subject, e, "using the state directory (run.state_dir)");
        }
        let journal = dir.join(crate::journal::JOURNAL_FILE);
        let ok =
            writable(dir) && (!journal.exists() || access(&journal, AccessFlags::W_OK).is_ok());
        return if ok {
            Finding::pass(
                subject,
                format!(
                    "{} is writable (journal.jsonl of every change, last-run.json)",
                    dir.display()
                ),
            )
        } else {
            Finding::fail(
                subject,
                format!(
                    "{} cannot write the journal in {}: every run would warn, and the first change would fail (exit 3)",
                    me(),
                    dir.display()
                ),
                crate::fix::state_dir_fix(dir, "doctor"),
            )
        };
    }
    if dir.exists() {
        return Finding::fail(
            subject,
            format!("{} is not a directory", dir.display()),
            "set run.state_dir to a directory",
        );
    }
    match existing_ancestor(dir) {
        Some(a) if a.is_dir() && writable(a) => Finding::pass(
            subject,
            format!(
                "{} will be created by the next run (in {})",
                dir.display(),
                a.display()
            ),
        ),
        _ => Finding::fail(
            subject,
            format!(
                "{} does not exist and {} cannot create it",
                dir.display(),
                me()
            ),
            crate::fix::state_dir_fix(dir, "doctor"),
        ),
    }
}

/// A `check --log` that could not reach its target, as the last real run that tried left
/// it in `state_dir/run-state.json` (a quiet cron run says it only once).
fn log_finding(state_dir: &Path) -> Option<Finding> {
    let f = crate::check::streak::last_log_failure(state_dir)?;
    let since = chrono::DateTime::from_timestamp(f.since, 0)
        .map_or_else(|| f.since.to_string(), |t| t.to_rfc3339());
    Some(Finding::warn(
        "log",
        format!(
            "check --log {} has not reached its target since {since}: {}; nothing is logged \
             there",
            f.target, f.error
        ),
        match f.target.as_str() {
            "journald" => "start systemd-journald (its socket is /run/systemd/journal/socket), \
                           or drop --log journald from the cron line"
                .to_string(),
            _ => "start the syslog daemon (rsyslog or syslog-ng: /dev/log), or drop --log \
                  syslog from the cron line"
                .to_string(),
        },
    ))
}

fn metrics_finding(file: &Path) -> Finding {
    let subject = "metrics_file";
    let dir = file.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Finding::fail(
            subject,
            format!("directory {} does not exist", dir.display()),
            "create it, or point metrics_file at node_exporter's textfile directory",
        );
    }
    if !writable(dir) {
        return Finding::fail(
            subject,
            format!(
                "{} cannot write in {} (the file is written to a temporary file there, \
                 then renamed)",
                me(),
                dir.display()
            ),
            format!("let the user selfheal runs as write in {}", dir.display()),
        );
    }
    let age = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    Finding::pass(
        subject,
        match age {
            Some(a) => format!(
                "{} was last written {} ago",
                file.display(),
                human(a.as_secs())
            ),
            None => format!("{} will be written by the next run", file.display()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_directories() {
        let t = |s: &str| PathTemplate::parse(s).expect("template");
        assert_eq!(
            template_dir(&t("/var/www/run/progress-{id}.json")),
            (PathBuf::from("/var/www/run"), None)
        );
        assert_eq!(
            template_dir(&t("/var/www/run/{id}/hb")),
            (PathBuf::from("/var/www/run"), None)
        );
        assert_eq!(
            template_dir(&t("/var/www/run/progress.json")),
            (
                PathBuf::from("/var/www/run"),
                Some(PathBuf::from("/var/www/run/progress.json"))
            )
        );
    }

    #[test]
    fn names_like_a_template_are_a_few_with_its_prefix_extension_or_word() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in [
            "sync_1.hb",
            "sync_2.hb",
            "sync_10.hb",
            "sync_3.hb",
            "other.hb",
            "deploy.log",
            "synchro.lock",
        ] {
            std::fs::write(dir.path().join(n), "").expect("file");
        }
        // The same extension or leading word; a few, sorted.
        assert_eq!(
            similar_names(dir.path(), "sync-{id}.hb"),
            ["other.hb", "sync_1.hb", "sync_10.hb"]
        );
        assert_eq!(
            similar_names(dir.path(), "sync-{id}.beat"),
            ["sync_1.hb", "sync_10.hb", "sync_2.hb"]
        );
        assert!(similar_names(dir.path(), "hb-{id}").is_empty());
        assert_eq!(
            similar_names(dir.path(), "deploy.lock"),
            ["deploy.log", "synchro.lock"]
        );
    }

    #[test]
    fn lines_render_with_marks_and_fixes() {
        assert_eq!(
            Finding::pass("database", "mariadb 10.11").render(),
            "✓ database: mariadb 10.11"
        );
        assert_eq!(
            Finding::fail("watch w: index", "none", "CREATE INDEX x ON t (s)").render(),
            "✗ watch w: index: none; fix: CREATE INDEX x ON t (s)"
        );
        assert_eq!(
            Finding::warn("a", "id=b\nc\u{1b}", "d").render(),
            "! a: id=b\\nc\\u{1b}; fix: d"
        );
        assert_eq!(offset_text(8 * 3600), "+08:00");
        assert_eq!(offset_text(-(5 * 3600 + 1800)), "-05:30");
    }
}
