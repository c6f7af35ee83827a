//! `show [WATCH]`: every row that needs a person, one line each with the reason in words,
//! since when, and the `selfheal resolve …` command for it. Running rows are those the dry
//! run would leave for a person; parked rows come with why and when the journal says they
//! were parked. Exit 0 when nothing needs a person, 1 otherwise.
//!
//! I/O: the database (read-only where it can be), the journal, and each parked row's
//! evidence as `resolve` reads it.

use std::collections::HashMap;
use std::io::Write;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::check::{self, CheckOptions};
use crate::clock::{Clocks, age_on_db_clock, epoch, human};
use crate::config::{Config, Watch};
use crate::decide::{self, Action, Heartbeat, Verdict};
use crate::error::{Error, Result, exit};
use crate::escape::printable;
use crate::evidence::{Scene, gather};
use crate::host::Host;
use crate::journal::{JournalEntry, RowId};
use crate::person;
use crate::report::{Format, Parked, Reporter, RowReport, Summary, Unparked, WatchInfo};
use crate::store::{self, RunningRow, Schema, Select, SqlValue, Store};

use super::history::read_journal;
use super::{by_hand, warn_all};

/// How many parked rows of a watch the list shows, by id.
pub const PARKED_SHOWN: u32 = 1000;

/// One line of `show [WATCH]`: a running or parked row, why, and the command that decides
/// it.
#[derive(Debug, Clone)]
pub struct RowNeedingAPerson {
    pub watch: String,
    pub id: SqlValue,
    pub status: String,
    /// Seconds since the row started, on the database clock.
    pub age_s: Option<u64>,
    /// `parked`, or the verdict of a running row.
    pub verdict: String,
    pub reason: String,
    /// Since when (unix seconds), and what happened then.
    pub since: Option<i64>,
    pub since_what: &'static str,
    pub resolve: String,
    /// JSON only: the statement that makes the same change by hand.
    pub sql: Option<String>,
}

impl RowNeedingAPerson {
    fn line(&self, now: i64) -> String {
        let since = match self.since {
            Some(t) => format!(
                " since {} ago",
                human(u64::try_from(now.saturating_sub(t)).unwrap_or(0))
            ),
            None => String::new(),
        };
        let age = self.age_s.map_or_else(
            || "start unknown".to_string(),
            |a| format!("started {} ago", human(a)),
        );
        format!(
            "{} id={}: '{}', {age}: {}{since}: {}; fix: {}",
            self.watch, self.id, self.status, self.verdict, self.reason, self.resolve
        )
    }

    fn to_json(&self) -> Value {
        json!({
            "watch": self.watch,
            "id": self.id.to_json(),
            "status": self.status,
            "age_s": self.age_s,
            "verdict": self.verdict,
            "reason": self.reason,
            "since": self.since.map(crate::holder_line::rfc3339),
            "since_what": self.since.map(|_| self.since_what),
            "resolve": self.resolve,
            "sql": self.sql,
        })
    }
}

/// Since when a running row needs a person, from its evidence (unix seconds, host
/// clock), and what happened then.
fn since(r: &RowReport, now: i64) -> (Option<i64>, &'static str) {
    let ago = |s: u64| now.saturating_sub(i64::try_from(s).unwrap_or(i64::MAX));
    let total = r.evidence.total_age.as_ref().ok().copied();
    let beat = match r.evidence.heartbeat {
        Heartbeat::Age(a) => Some(a),
        _ => None,
    };
    let max = r.thresholds.max_age;
    match (&r.decision.basis, total, beat) {
        (
            decide::Basis::MaxAge
            | decide::Basis::MaxAgeWorkerLives
            | decide::Basis::OtherHostPastMaxAge(_),
            Some(t),
            _,
        ) => (Some(ago(t.saturating_sub(max))), "past max_age"),
        (decide::Basis::OtherHostSilent(_), _, Some(b)) => {
            (Some(ago(b.saturating_sub(max))), "silent beyond max_age")
        }
        (_, _, Some(b)) if r.decision.verdict != Verdict::Unknown => {
            (Some(ago(b)), "last heartbeat")
        }
        (_, Some(t), _) => (Some(ago(t)), "started"),
        _ => (None, ""),
    }
}

/// The reason in words of a running row that needs a person, as the cron text says it.
fn running_reason(r: &RowReport) -> String {
    let why = match (&r.note, r.plan.hold) {
        (Some(n), _) => n.clone(),
        (None, Some(h)) => h.describe().to_string(),
        (None, None) => r.decision.basis.describe(),
    };
    match (&r.plan.target, r.plan.action) {
        (Some(t), Action::MarkManual) => format!("{why}; the next run parks it in '{t}'"),
        _ => why,
    }
}

/// The parked rows of `cfg`'s watches, with why and when the journal says they were
/// parked; warnings said as they come.
fn parked_rows(
    cfg: &Config,
    store: &mut dyn Store,
    clocks: &Clocks,
    host: &Host,
    warnings: &mut Vec<String>,
) -> Result<Vec<RowNeedingAPerson>> {
    let mut rows: Vec<(&Watch, Schema, RunningRow, String)> = Vec::new();
    for w in &cfg.watches {
        let Some(manual) = &w.manual_value else {
            continue;
        };
        let schema = store.schema(w)?;
        let total = store.count_parked(w, manual)?;
        let mut n = 0u64;
        store.each_row(w, Select::Status(manual, PARKED_SHOWN), &mut |r| {
            n += 1;
            rows.push((w, schema.clone(), r.row, manual.clone()));
            Ok(())
        })?;
        if total > n {
            warnings.push(format!(
                "watch {}: {total} rows are parked in '{manual}'; the first {n} by id are listed",
                w.name
            ));
        }
    }
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // The last park of each (watch, id, start).
    let mut parks: HashMap<(String, String, String), JournalEntry> = HashMap::new();
    let wanted: std::collections::HashSet<(String, String, String)> = rows
        .iter()
        .map(|(w, _, r, _)| {
            (
                w.name.clone(),
                RowId::from(&r.id).key(),
                r.started.raw.to_string(),
            )
        })
        .collect();
    warnings.extend(read_journal(cfg, &mut |e| {
        let k = (
            e.watch.clone(),
            e.id.key(),
            e.started.clone().unwrap_or_default(),
        );
        if e.applied && e.made() && wanted.contains(&k) {
            parks.insert(k, e);
        }
    }));
    let mut out = Vec::with_capacity(rows.len());
    for (w, schema, r, manual) in rows {
        let k = (
            w.name.clone(),
            RowId::from(&r.id).key(),
            r.started.raw.to_string(),
        );
        let park = parks.get(&k).filter(|e| e.to == manual);
        let age_s = match &r.started.stamp {
            Ok(Some(s)) => age_on_db_clock(*s, &clocks.db)
                .ok()
                .and_then(|a| u64::try_from(a).ok()),
            _ => None,
        };
        let (verdict, reason, since) = match park {
            Some(e) if e.actor.is_none() => (
                format!("parked as {}", e.verdict.as_str()),
                e.basis_words(),
                chrono::DateTime::parse_from_rfc3339(&e.time)
                    .ok()
                    .map(|t| t.timestamp()),
            ),
            Some(e) => (
                "parked".to_string(),
                format!(
                    "put here by {}",
                    printable(e.actor.as_deref().unwrap_or_default())
                ),
                chrono::DateTime::parse_from_rfc3339(&e.time)
                    .ok()
                    .map(|t| t.timestamp()),
            ),
            None => (
                "parked".to_string(),
                format!(
                    "in '{manual}'; the journal does not say why (parked by hand, by another \
                     configuration, or before the journal)"
                ),
                None,
            ),
        };
        // Only where `resolve` itself would act without --force (docs/design.md#resolve): the row's
        // evidence now, as `resolve` reads it.
        let snapshot = crate::evidence::with_named(w, store, std::slice::from_ref(&r));
        let ev = gather(w, &r, &Scene::of_one_row(clocks, host, &snapshot));
        let sql = crate::resolve::would_refuse(w, host, &ev)
            .is_none()
            .then(|| by_hand(store, w, &schema, &r, &manual));
        out.push(RowNeedingAPerson {
            watch: w.name.clone(),
            id: r.id.clone(),
            status: manual.clone(),
            age_s,
            verdict,
            reason,
            since,
            since_what: "parked",
            resolve: person::resolve_command(w, &r.id, true, false),
            sql,
        });
    }
    Ok(out)
}

/// How many rows `show`'s text lists before it only counts (`--all` lists every one).
pub const TEXT_SHOWN: u64 = 50;

/// `show [WATCH]`: every row that needs a person, printed as the dry run judges them: a
/// backlog is streamed, never kept (docs/design.md#paging). The text stops at
/// [`TEXT_SHOWN`] rows unless `all`, and counts the rest per watch and verdict.
pub(super) fn listing(cfg: &Config, format: Format, all: bool, out: &mut dyn Write) -> Result<u8> {
    if cfg.watches.is_empty() {
        let _ = match format {
            Format::Text => writeln!(out, "no watch is configured: nothing to show"),
            Format::Json => writeln!(out, "{}", json!({"summary": true, "rows": 0, "watches": 0})),
        };
        return Ok(exit::OK);
    }
    let Some(db) = cfg.database.as_ref() else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    let mut store = store::open(db, true)?;
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let host = Host::current().known_as(&cfg.run.host_names);
    let mut warnings = Vec::new();
    // The parked rows are bounded (PARKED_SHOWN a watch) and read first; each watch's are
    // printed after its running rows, once the dry run has said which it would un-park.
    let parked = parked_rows(cfg, store.as_mut(), &clocks, &host, &mut warnings)?;
    let mut lister = Lister {
        cfg,
        format,
        limit: if all || format == Format::Json {
            u64::MAX
        } else {
            TEXT_SHOWN
        },
        out,
        store,
        host,
        now: epoch(SystemTime::now()),
        parked,
        schema: None,
        current: None,
        unparked: Vec::new(),
        listed: 0,
        rows: 0,
        untold: Vec::new(),
        warnings,
        failed: None,
    };
    let opts = CheckOptions {
        dry_run: true,
        force: false,
        remind: false,
    };
    let judged = check::run(cfg, &opts, &mut lister);
    if let Some(e) = lister.failed.take() {
        return Err(e);
    }
    judged?;
    lister.watch_done();
    lister.close();
    Ok(if lister.rows == 0 {
        exit::OK
    } else {
        exit::ATTENTION
    })
}

/// The dry run's reporter for `show [WATCH]`: each row that needs a person printed (or,
/// past the text's limit, counted) as it is judged.
struct Lister<'a> {
    cfg: &'a Config,
    format: Format,
    /// How many rows are printed; the rest are counted in `untold`.
    limit: u64,
    out: &'a mut dyn Write,
    /// The second, read-only connection: each running row's statement by hand (JSON).
    store: Box<dyn Store>,
    host: Host,
    now: i64,
    /// Every watch's parked rows, printed after that watch's running rows.
    parked: Vec<RowNeedingAPerson>,
    /// The watch being judged, and its schema.
    current: Option<&'a Watch>,
    schema: Option<Schema>,
    /// What the dry run would un-park in the current watch.
    unparked: Vec<Unparked>,
    listed: u64,
    rows: u64,
    /// Rows not printed, per watch and verdict, in the order first met.
    untold: Vec<(String, String, u64)>,
    warnings: Vec<String>,
    /// The first failure to read a row again; the run is failed with it.
    failed: Option<Error>,
}

impl Lister<'_> {
    fn emit(&mut self, n: &RowNeedingAPerson) {
        self.rows += 1;
        if self.listed >= self.limit {
            match self
                .untold
                .iter_mut()
                .find(|(w, v, _)| *w == n.watch && *v == n.verdict)
            {
                Some(u) => u.2 += 1,
                None => self.untold.push((n.watch.clone(), n.verdict.clone(), 1)),
            }
            return;
        }
        self.listed += 1;
        let _ = match self.format {
            Format::Text => writeln!(self.out, "{}", printable(&n.line(self.now))),
            Format::Json => writeln!(self.out, "{}", n.to_json()),
        };
    }

    /// The current watch is judged: its parked rows follow its running ones.
    fn watch_done(&mut self) {
        let Some(w) = self.current.take() else {
            return;
        };
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.watch == w.name);
        self.parked = rest;
        for mut p in mine {
            if self
                .unparked
                .iter()
                .any(|u| u.watch == w.name && u.id == p.id)
            {
                p.reason.push_str(
                    "; its own heartbeat beats again since: the next run puts it back to running",
                );
            }
            self.emit(&p);
        }
        self.unparked.clear();
        self.schema = None;
    }

    fn running(&mut self, w: &Watch, r: &RowReport) -> Result<RowNeedingAPerson> {
        let (since, what) = since(r, self.now);
        // The statement by hand is JSON's only: the text never reads the row again.
        let sql = match self.format {
            Format::Text => None,
            Format::Json => {
                if self.schema.is_none() {
                    self.schema = Some(self.store.schema(w)?);
                }
                let row = self.store.row_by_id(w, &r.id)?;
                match (row, self.schema.as_ref()) {
                    (Some(s), Some(schema))
                        if crate::resolve::would_refuse(w, &self.host, &r.evidence).is_none() =>
                    {
                        Some(by_hand(
                            self.store.as_ref(),
                            w,
                            schema,
                            &s.row,
                            &w.running_value,
                        ))
                    }
                    _ => None,
                }
            }
        };
        Ok(RowNeedingAPerson {
            watch: r.watch.clone(),
            id: r.id.clone(),
            status: w.running_value.clone(),
            age_s: r.evidence.total_age.as_ref().ok().copied(),
            verdict: r.decision.verdict.as_str().to_string(),
            reason: running_reason(r),
            since,
            since_what: what,
            // Still running now (a park the next run makes is not made yet).
            resolve: person::resolve_command(
                w,
                &r.id,
                false,
                r.decision.verdict == Verdict::Remote,
            ),
            // Only where `resolve` itself would act without --force (docs/design.md#resolve).
            sql,
        })
    }

    /// After the last watch: what was not printed, the warnings, the JSON summary.
    fn close(&mut self) {
        match self.format {
            Format::Text => {
                if self.rows == 0 {
                    let n = self.cfg.watches.len();
                    let _ = writeln!(
                        self.out,
                        "nothing needs a person ({n} watch{})",
                        if n == 1 { "" } else { "es" }
                    );
                }
                if self.rows > self.listed {
                    let each: Vec<String> = self
                        .untold
                        .iter()
                        .map(|(w, v, n)| format!("{w}: {n} {v}"))
                        .collect();
                    let _ = writeln!(
                        self.out,
                        "… and {} more rows that need a person ({}); selfheal show --all lists \
                         every one",
                        self.rows - self.listed,
                        printable(&each.join(", "))
                    );
                }
                warn_all(&self.warnings);
            }
            Format::Json => {
                let _ = writeln!(
                    self.out,
                    "{}",
                    json!({
                        "summary": true,
                        "rows": self.rows,
                        "watches": self.cfg.watches.len(),
                        "warnings": self.warnings,
                    })
                );
            }
        }
    }
}

impl Reporter for Lister<'_> {
    fn watch(&mut self, w: &WatchInfo) {
        self.watch_done();
        self.current = self.cfg.watches.iter().find(|x| x.name == w.name);
        if let Some(why) = &w.skipped {
            self.warnings
                .push(format!("watch {}: skipped: {why}", w.name));
        }
    }

    fn row(&mut self, r: &RowReport) {
        let Some(w) = self.current.filter(|w| w.name == r.watch) else {
            return;
        };
        if !r.attention() || r.applied || self.failed.is_some() {
            return;
        }
        match self.running(w, r) {
            Ok(n) => self.emit(&n),
            Err(e) => self.failed = Some(e),
        }
    }

    fn warning(&mut self, msg: &str) {
        if !self.warnings.iter().any(|w| w == msg) {
            self.warnings.push(msg.to_string());
        }
    }

    fn unparked(&mut self, u: &Unparked) {
        self.unparked.push(u.clone());
    }

    fn parked(&mut self, _p: &Parked) {}

    /// The dry run itself prints nothing.
    fn spoke(&self) -> bool {
        false
    }

    fn finish(&mut self, _s: &Summary) {}
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::{Basis, Hold, Lock, Owner};
    use crate::show::fixtures::{NOW, evidence, report, watch};

    fn hung() -> RowNeedingAPerson {
        RowNeedingAPerson {
            watch: "sync".into(),
            id: SqlValue::Int(7),
            status: "running".into(),
            age_s: Some(5400),
            verdict: "hung".into(),
            reason: "the heartbeat is stale, but the job's lock is held".into(),
            since: Some(NOW - 900),
            since_what: "last heartbeat",
            resolve: "selfheal resolve sync 7 --as dead".into(),
            sql: Some("UPDATE …".into()),
        }
    }

    #[test]
    fn a_line_says_the_row_why_since_when_and_the_command() {
        assert_eq!(
            hung().line(NOW),
            "sync id=7: 'running', started 1h30m ago: hung since 15m ago: the heartbeat is \
             stale, but the job's lock is held; fix: selfheal resolve sync 7 --as dead"
        );
        let parked = RowNeedingAPerson {
            status: "wait_manual".into(),
            age_s: None,
            verdict: "parked".into(),
            reason: "in 'wait_manual'; the journal does not say why".into(),
            since: None,
            since_what: "parked",
            ..hung()
        };
        assert_eq!(
            parked.line(NOW),
            "sync id=7: 'wait_manual', start unknown: parked: in 'wait_manual'; the journal \
             does not say why; fix: selfheal resolve sync 7 --as dead"
        );
        // A since from a clock ahead of this one reads as now.
        let ahead = RowNeedingAPerson {
            since: Some(NOW + 60),
            ..hung()
        };
        assert!(ahead.line(NOW).contains(": hung since 0s ago: "));
    }

    #[test]
    fn a_row_in_json_keeps_every_field_and_dates_since() {
        assert_eq!(
            hung().to_json(),
            json!({
                "watch": "sync",
                "id": 7,
                "status": "running",
                "age_s": 5400,
                "verdict": "hung",
                "reason": "the heartbeat is stale, but the job's lock is held",
                "since": "2026-03-05T11:45:00Z",
                "since_what": "last heartbeat",
                "resolve": "selfheal resolve sync 7 --as dead",
                "sql": "UPDATE …",
            })
        );
        let undated = RowNeedingAPerson {
            since: None,
            sql: None,
            ..hung()
        };
        let v = undated.to_json();
        assert_eq!(v["since"], json!(null));
        assert_eq!(v["since_what"], json!(null), "no since, no what");
        assert_eq!(v["sql"], json!(null));
    }

    #[test]
    fn since_is_the_event_that_made_the_row_need_a_person() {
        let w = watch();
        let at = |ev| {
            let r = report(&w, ev, None);
            (r.decision.basis.clone(), since(&r, NOW))
        };
        let held = Lock::Held { pid: Some(4242) };
        let alive = Owner::Alive { pid: 4242 };
        // Hung: since its last heartbeat.
        assert_eq!(
            at(evidence(
                5400,
                Heartbeat::Age(900),
                held.clone(),
                alive.clone()
            )),
            (Basis::StaleButLockHeld, (Some(NOW - 900), "last heartbeat"))
        );
        // Past max_age (4h) at 5h, beating: since an hour ago, not since its last beat.
        assert_eq!(
            at(evidence(
                18_000,
                Heartbeat::Age(60),
                Lock::Absent,
                Owner::Empty
            )),
            (Basis::MaxAge, (Some(NOW - 3600), "past max_age"))
        );
        // Unknown: since it started, whatever its heartbeat.
        assert_eq!(
            at(evidence(
                5400,
                Heartbeat::Unreadable("EIO".into()),
                held.clone(),
                alive.clone()
            )),
            (
                Basis::Unreadable("heartbeat: EIO".into()),
                (Some(NOW - 5400), "started")
            )
        );
        // Another host's row past max_age: since then; one whose heartbeat column has been
        // silent beyond max_age (its start within it): since it went silent that long.
        let remote = || Owner::NotLocal {
            host: "web2".into(),
        };
        assert_eq!(
            at(evidence(
                20_000,
                Heartbeat::Age(60),
                Lock::NotConfigured,
                remote()
            )),
            (
                Basis::OtherHostPastMaxAge("web2".into()),
                (Some(NOW - 5600), "past max_age")
            )
        );
        assert_eq!(
            at(evidence(
                14_000,
                Heartbeat::Age(15_000),
                Lock::NotConfigured,
                remote()
            )),
            (
                Basis::OtherHostSilent("web2".into()),
                (Some(NOW - 600), "silent beyond max_age")
            )
        );
        // Nothing dates it: an unknown start and no heartbeat.
        let mut undated = evidence(0, Heartbeat::Missing, held, alive);
        undated.total_age = Err("start_time is NULL".into());
        assert_eq!(at(undated).1, (None, ""));
    }

    #[test]
    fn the_reason_is_the_note_the_hold_or_the_basis_and_says_a_coming_park() {
        let w = watch();
        let ev = evidence(
            5400,
            Heartbeat::Age(900),
            Lock::Held { pid: Some(4242) },
            Owner::Alive { pid: 4242 },
        );
        let hung = report(&w, ev, None);
        assert_eq!(
            running_reason(&hung),
            "the heartbeat is stale, but the job's lock is held; the next run parks it in \
             'wait_manual'"
        );
        let mut failed = hung.clone();
        failed.note = Some("write failed: Lock wait timeout exceeded".into());
        assert_eq!(
            running_reason(&failed),
            "write failed: Lock wait timeout exceeded; the next run parks it in 'wait_manual'"
        );
        let mut held = hung;
        held.plan = decide::hold(held.plan, &held.decision, Hold::Breaker);
        assert_eq!(running_reason(&held), Hold::Breaker.describe());
    }
}
