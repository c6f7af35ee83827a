//! doctor on a watch's rows now: the running rows judged as `check` judges them (a census
//! and the first unknown row), times in the future on the database clock, rows that look
//! older than their worker (their times are wrong), and the rows parked in `manual_value`,
//! each with the `selfheal resolve` command that decides it.
//!
//! I/O: reads parked rows through the store, the evidence files, `/proc` and `/proc/locks`
//! as `check` does, and the journal (when a row was parked); writes nothing.

use std::time::SystemTime;

use crate::clock::{Clocks, age_on_db_clock, human, plausible_age};
use crate::config::{Config, Watch};
use crate::decide::{self, Verdict};
use crate::error::Result;
use crate::evidence;
use crate::history;
use crate::host::Host;
use crate::store::{self, Store};

use super::Finding;
use super::database::offset_text;
use super::files::{TEMPLATE_ROWS, heartbeat_template_finding};
use super::hosts::{Owners, owners_finding};

/// How many parked rows doctor lists, each with the command that decides it.
const PARKED_LISTED: u32 = 10;

/// The rows parked in `manual_value`: a backlog a person owes. Each listed with how long
/// ago it started and, where the journal knows, how long ago it was parked, and the
/// `selfheal resolve` command a person runs after looking at the job (the statement it
/// makes is in `selfheal show --format json`).
pub(super) fn parked_findings(
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

/// How many running rows doctor lists with their named locks.
const NAMED_LISTED: usize = 20;

/// Each running row's named lock names (`db_lock`) and who holds them, as the server
/// says now (`docs/design.md#named-lock`), for the first [`NAMED_LISTED`] of them (`more`:
/// how many others there are); `None` for a watch without `db_lock`.
pub(super) fn named_lock_finding(
    w: &Watch,
    rows: &[store::RunningRow],
    snapshot: &evidence::Snapshot,
    more: u64,
) -> Option<Finding> {
    let t = snapshot.named.as_ref()?;
    let subject = format!("watch '{}': named locks", w.name);
    if let Some(why) = &t.error {
        return Some(Finding::fail(
            subject,
            format!("the server could not be asked who holds them: {why}"),
            "check the database connection",
        ));
    }
    let mut lines = Vec::new();
    for r in rows.iter().take(NAMED_LISTED) {
        let names = match crate::probe::named::names_of(w, r, &t.database) {
            Ok(n) => n,
            Err(why) => {
                lines.push(format!("row {}: unusable ({why})", r.id));
                continue;
            }
        };
        let each: Vec<String> = names
            .iter()
            .map(|n| match t.holders.get(n) {
                Some(Some(h)) => format!("{n} held by {}", h.describe()),
                Some(None) => format!("{n} free"),
                None => format!("{n} not asked"),
            })
            .collect();
        lines.push(format!("row {}: {}", r.id, each.join("; ")));
    }
    let detail = if lines.is_empty() {
        "no running rows".to_string()
    } else if more > 0 {
        format!("{} | and {more} more rows", lines.join(" | "))
    } else {
        lines.join(" | ")
    };
    Some(Finding::pass(subject, detail))
}

/// What the first pass over a watch's running rows counts: never the rows themselves
/// (docs/design.md#paging).
#[derive(Default)]
struct Counted {
    rows: u64,
    /// This host's rows (how many share a heartbeat file is judged from it).
    local: usize,
    /// Rows with a time in the future, each counted once, and the first of them.
    future: u64,
    first_future: Option<(String, i64)>,
    owners: Owners,
    /// The first of this host's rows past `stale_after`, for the heartbeat template.
    template: Vec<store::RunningRow>,
}

impl Counted {
    fn add(&mut self, w: &Watch, r: store::RunningRow, clocks: &Clocks, host: &Host) {
        self.rows += 1;
        let mut ahead: Option<(String, i64)> = None;
        let mut look = |col: &str, tv: &store::TimeValue| {
            if let Ok(Some(s)) = &tv.stamp
                && let Ok(age) = age_on_db_clock(*s, &clocks.db)
                && plausible_age(age, col).is_err()
            {
                ahead.get_or_insert((format!("row {}: {col} = {}", r.id, tv.raw), -age));
            }
        };
        look(w.started_column.name(), &r.started);
        if let (Some(c), Some(tv)) = (&w.heartbeat_column, &r.heartbeat) {
            look(c.name(), tv);
        }
        if let Some(a) = ahead {
            self.future += 1;
            self.first_future.get_or_insert(a);
        }
        self.owners.add(&r);
        if evidence::is_remote(w, &r, host) {
            return;
        }
        self.local += 1;
        let stale_after = i64::try_from(w.stale_after.as_secs()).unwrap_or(i64::MAX);
        if self.template.len() < TEMPLATE_ROWS
            && w.heartbeat_file.is_some()
            && matches!(&r.started.stamp, Ok(Some(s))
                if age_on_db_clock(*s, &clocks.db).is_ok_and(|a| a > stale_after))
        {
            self.template.push(r);
        }
    }
}

/// The running rows of a watch, read a page at a time: times in the future on the
/// database clock, a one-line census of the verdicts (this host's watches only), the
/// heartbeat file template, and who owns the rows.
pub(super) fn running_rows_findings(
    w: &Watch,
    store: &mut dyn Store,
    clocks: &Clocks,
    host: &Host,
    here: bool,
) -> Result<Vec<Finding>> {
    let mut counted = Counted::default();
    store::pages(w, store, |_, page| {
        for r in page {
            counted.add(w, r, clocks, host);
        }
        Ok(true)
    })?;
    let mut out = rows_findings(w, store, &counted, clocks, host, here)?;
    if here
        && let Some(t) = &w.heartbeat_file
        && let Some(f) = heartbeat_template_finding(w, t, &counted.template, clocks, host)
    {
        out.push(f);
    }
    if let Some(f) = owners_finding(w, std::mem::take(&mut counted.owners), host) {
        out.push(f);
    }
    Ok(out)
}

/// Times in the future on the database clock, and (a second pass) the census of verdicts.
fn rows_findings(
    w: &Watch,
    store: &mut dyn Store,
    counted: &Counted,
    clocks: &Clocks,
    host: &Host,
    here: bool,
) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    if let Some((first, ahead)) = &counted.first_future {
        let ahead = *ahead;
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
                counted.future,
                counted.rows,
                human(ahead.unsigned_abs())
            ),
            fix,
        ));
    }
    if !here {
        return Ok(out);
    }
    let t = evidence::thresholds(w);
    let host_now = SystemTime::now();
    let mut counts: Vec<(Verdict, usize)> = Vec::new();
    let mut unknown: Option<String> = None;
    // Rows whose owner pid is provably their worker though it started long after them: the
    // row's times are wrong (the first, and how many).
    let mut mistimed: Option<(String, u64)> = None;
    let mut mistimed_n = 0usize;
    let mut named: Option<Finding> = None;
    store::pages(w, store, |store, page| {
        // The server's named locks of this page, where the watch names db_lock.
        let snapshot = evidence::with_named(w, store, &page);
        if named.is_none() && snapshot.named.is_some() {
            let more = counted
                .rows
                .saturating_sub(page.len().min(NAMED_LISTED) as u64);
            named = Some(
                named_lock_finding(w, &page, &snapshot, more).unwrap_or_else(|| {
                    Finding::pass(format!("watch '{}': named locks", w.name), "none")
                }),
            );
        }
        let scene = evidence::Scene {
            clocks,
            host,
            host_now,
            snapshot: &snapshot,
            local_rows: counted.local,
        };
        for r in &page {
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
        Ok(true)
    })?;
    out.extend(named);
    let future = counted.future > 0;
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
    // Rows left for a person are a finding, not a tick: a census of "1 overtime" is exactly
    // what someone running doctor wants to look at. Dead rows are what `check` exists to
    // mark, not a fault of the setup: they are advice, and a healthy setup still exits 0.
    let for_a_person = counts
        .iter()
        .any(|(v, _)| matches!(v, Verdict::Hung | Verdict::Overtime | Verdict::Unknown));
    let dead = counts.iter().any(|(v, _)| matches!(v, Verdict::Dead));
    match unknown {
        Some(u) if !future => out.push(Finding::warn(
            subject,
            format!("{census}; {u}"),
            format!(
                "{} shows each row's evidence",
                crate::person::selfheal_command("check --explain")
            ),
        )),
        _ if for_a_person && !future => out.push(Finding::warn(
            subject,
            format!("{census}: rows a real run marks or leaves for a person"),
            format!(
                "{} shows each row's evidence and what a real run would do",
                crate::person::selfheal_command("check --explain")
            ),
        )),
        _ if dead && !future => out.push(Finding::advice(
            subject,
            format!("{census}: rows the next real run marks"),
            format!(
                "{} shows each row's evidence; cron's next run marks them",
                crate::person::selfheal_command("check --explain")
            ),
        )),
        _ => out.push(Finding::pass(subject, census)),
    }
    Ok(out)
}
