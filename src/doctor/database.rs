//! doctor on the database: how it was reached and its version, its clock against this
//! host's and the session time zone, watches told apart only by values the column's
//! collation folds together, and the walk through each watch's checks that need the
//! database (its table in `schema`, its rows in `rows` and `hosts`, its runs in `max_age`).
//! Decides doctor's exit status when the database cannot be used (3) or lacks what the
//! configuration names (2).
//!
//! I/O: opens the database, read-only where it can, and reads from it; writes nothing.

use std::time::SystemTime;

use crate::clock::{Clocks, clock_skew, skew_text};
use crate::config::{self, Config, Watch};
use crate::error::{Error, exit};
use crate::history;
use crate::host::Host;
use crate::store::{self, Introspect, Store};

use super::hosts::advisory_lock_finding;
use super::max_age::history_finding;
use super::rows::{parked_findings, running_rows_findings};
use super::schema::{
    columns_finding, index_finding, message_finding, on_update_finding, retry_at_finding,
    values_finding,
};
use super::{Finding, Report};

/// The database, its clock, and each watch's side of it. `Err` with doctor's exit status:
/// 3 when the database cannot be reached (or refuses selfheal), 2 when the configuration
/// names what it does not have (a database, table or column) or a file that cannot be
/// read.
pub(super) fn database_checks(cfg: &Config, host: &Host, rep: &mut Report<'_>) -> Result<(), u8> {
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
            let fix = crate::fix::for_error(&e, super::again())
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
            let fix = crate::fix::for_error(&e, super::again())
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
            let fix = crate::fix::for_error(&e, super::again())
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
/// one under the column's collation ([`crate::check::collation`], the question `check`
/// asks too): a configuration error, as the offline check makes it for what it can fold.
fn collation_overlaps(cfg: &Config, store: &mut dyn store::Store) -> Vec<Finding> {
    crate::check::collation::overlaps(&cfg.watches, store)
        .into_iter()
        .map(|o| {
            Finding::fail(
                format!("watch {}: match", o.second),
                o.message(),
                crate::check::collation::Overlap::FIX,
            )
        })
        .collect()
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

pub(super) fn offset_text(secs: i64) -> String {
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
                    crate::fix::for_error(other, super::again()).unwrap_or_else(|| {
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
        Ok(plan) => index_finding(w, &plan, store),
        Err(e) => Finding::warn(subject("index"), e.to_string(), "run EXPLAIN by hand"),
    });
    rep.add(message_finding(w, &schema, store));
    if let Some(f) = retry_at_finding(w, &schema, store.dialect()) {
        rep.add(f);
    }
    let here = w.host.as_ref().is_none_or(|h| host.is_me(h));
    match running_rows_findings(w, store, clocks, host, here) {
        Ok(findings) => {
            for f in findings {
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
