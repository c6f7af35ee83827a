//! `selfheal stats`: what the history says — runtimes of the runs that ended well, the rows
//! selfheal marked that finished anyway (its false positives), and the `stale_after` and
//! `max_age` that history supports (docs/design.md#error-rate). The cheap form of the same lesson that
//! `check` and `doctor` draw every time lives in [`crate::history`].
//!
//! I/O: reads the configuration, the journal (every generation of `state_dir/journal.jsonl`,
//! the entries of the configured database only, damaged lines counted in one warning per
//! file; see [`crate::journal::read_all`]) and, per watch, the finished rows, streamed once through an
//! exact histogram ([`histogram`]): memory follows the number of distinct runtimes, not
//! the rows; the text output draws it ([`chart`]: log-scaled buckets, the current and
//! suggested `max_age` and the longest run marked). Writes nothing anywhere; opens SQLite read-only. Judgement lives in
//! [`analysis`], pure.
//! Values from the database (ids, statuses, marks) are printed with their control
//! characters escaped ([`crate::escape`]).

pub mod analysis;
pub mod chart;
pub mod histogram;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::clock::{Clocks, human};
use crate::config::{self, Config, ConfigPath, Overrides, Watch, fmt_duration};
use crate::error::{Error, Result, exit};
use crate::escape::printable;
use crate::history::{id_key, max_age_too_low, runtime};
use crate::journal::{self, DatabaseId, JOURNAL_FILE};
use crate::report::Format;
use crate::store::{self, FinishedRow, History, Store};

use analysis::{Judgement, Mark, Marks, RowView, Suggestion, WatchStats, classify};

// ---------------------------------------------------------------------------------------
// `selfheal stats`

/// What `stats` found for one watch.
#[derive(Debug, Clone)]
pub struct WatchReport {
    pub name: String,
    pub table: String,
    pub stale_after_s: u64,
    pub max_age_s: u64,
    /// `success_values` is not set: every status selfheal does not write counts.
    pub default_success: bool,
    /// Why the watch was not measured.
    pub skipped: Option<String>,
    pub stats: WatchStats,
    pub stale_after: Option<Suggestion>,
    pub max_age: Option<Suggestion>,
    /// What people decided about the watch's rows, and how often a park recovered by
    /// itself: the evidence for tuning `stale_after` and `confirm`.
    pub resolutions: Resolutions,
}

/// A watch's decisions by people (`selfheal resolve`) and its un-parks, from the journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resolutions {
    /// `--as dead`, `--as retry`, `--as running`.
    pub dead: u64,
    pub retry: u64,
    pub running: u64,
    /// Rows parked as hung that a run put back to running (their own heartbeat beat
    /// again): false parks.
    pub unparks: u64,
}

impl Resolutions {
    /// Counts one journal entry, if it is a decision or an un-park.
    fn count(&mut self, e: &crate::journal::JournalEntry) {
        match e.resolution() {
            Some("dead") => self.dead += 1,
            Some("retry") => self.retry += 1,
            Some("running") => self.running += 1,
            Some(_) => {}
            None if e.action == crate::decide::Action::Unpark => self.unparks += 1,
            None => {}
        }
    }

    fn any(&self) -> bool {
        *self != Resolutions::default()
    }
}

impl WatchReport {
    pub fn max_age_too_low(&self) -> bool {
        self.stats
            .runtimes
            .max()
            .is_some_and(|m| max_age_too_low(self.max_age_s, m))
    }

    /// Something a person should look at.
    pub fn attention(&self) -> bool {
        self.max_age_too_low() || self.stats.false_positives > 0
    }
}

/// Reads the journal (every generation, the entries of the configured database only)
/// into per-watch marks, for the watches asked about only.
/// The marks are selfheal's own judgements only: a person's decisions and un-parks are
/// counted per watch ([`Resolutions`]) instead.
fn read_marks(
    cfg: &Config,
    db: &DatabaseId,
    warnings: &mut Vec<String>,
) -> (HashMap<String, Marks>, HashMap<String, Resolutions>, Value) {
    let path = cfg.run.state_dir.join(JOURNAL_FILE);
    let mut marks: HashMap<String, Marks> = cfg
        .watches
        .iter()
        .map(|w| (w.name.clone(), Marks::new()))
        .collect();
    let mut resolutions: HashMap<String, Resolutions> = HashMap::new();
    let result = journal::read_all(&cfg.run.state_dir, db, &mut |entry| {
        // An intent whose outcome a later run could not tell is no change of selfheal's.
        if !marks.contains_key(&entry.watch) || !entry.made() {
            return;
        }
        if entry.by_person() || entry.action == crate::decide::Action::Unpark {
            resolutions
                .entry(entry.watch.clone())
                .or_default()
                .count(&entry);
        } else if let Some(by_id) = marks.get_mut(&entry.watch)
            && let Some((_, id, m)) = Mark::from_entry(&entry)
        {
            by_id.entry(id).or_default().push(m);
        }
    });
    let info = match result {
        Ok(read) => {
            warnings.extend(read.warnings());
            // Marks older than the journal's oldest generation are not in it any more:
            // say so, rather than let them pass for rows selfheal never marked.
            if let Some(words) = read.cut_words() {
                warnings.push(format!(
                    "{words}: rows marked before then are found by their message prefix only"
                ));
            }
            json!({
                "path": path.display().to_string(),
                "present": !read.missing(),
                "files": read.files.iter().filter(|(_, r)| !r.missing).count(),
                "entries": read.entries(),
                "other_database_entries": read.other_database(),
                "damaged_lines": read.damaged(),
                "cut": read.cut.as_ref().map(|c| c.dropped_at.clone()),
                "since": read.oldest,
            })
        }
        Err(e) => {
            warnings.push(format!(
                "{}; false positives are found by the message prefix only",
                e.full_message()
            ));
            json!({"path": path.display().to_string(), "present": false, "error": e.full_message()})
        }
    };
    (marks, resolutions, info)
}

/// Measures one watch: one streamed pass over its finished rows.
fn measure(
    store: &mut dyn Store,
    w: &Watch,
    clocks: &Clocks,
    marks: Option<&Marks>,
) -> Result<WatchStats> {
    let mut s = WatchStats::default();
    let marks = marks.filter(|m| !m.is_empty());
    store.finished_rows(w, History::All, &mut |r: FinishedRow| {
        let id = r.id.to_json();
        let rt = runtime(&r, clocks);
        let success = w.is_success(&r.status);
        let row_marks = marks.and_then(|m| m.get(&id_key(&id))).map(Vec::as_slice);
        let judgement = if row_marks.is_none() && r.marked.is_none() {
            Judgement::Plain
        } else {
            let started = r.started.raw.to_string();
            classify(
                RowView {
                    id: &id,
                    started: &started,
                    status: &r.status,
                    runtime_s: rt.as_ref().ok().copied(),
                    marked: r.marked.as_deref(),
                    success,
                },
                row_marks,
            )
        };
        s.add(&id, &r.status, rt, success, judgement);
        Ok(())
    })?;
    Ok(s)
}

/// Runs `stats` over every selected watch, handing each report to `each` as soon as it is
/// measured. Returns the journal summary and the warnings.
pub fn run(cfg: &Config, each: &mut dyn FnMut(&WatchReport)) -> Result<(Value, Vec<String>)> {
    let mut warnings = Vec::new();
    if cfg.watches.is_empty() {
        return Ok((Value::Null, warnings));
    }
    let Some(db) = &cfg.database else {
        return Err(Error::Usage("no [database] configured".into()));
    };
    let mut store = store::open(db, true)?;
    let clocks = store::clocks(&mut *store, db, cfg.run.clock_tolerance)?;
    let mut schemas = Vec::with_capacity(cfg.watches.len());
    for w in &cfg.watches {
        schemas.push(store.schema(w)?);
    }
    let (marks, resolutions, journal_info) = read_marks(cfg, &DatabaseId::of(db), &mut warnings);
    for w in &cfg.watches {
        let mut rep = WatchReport {
            name: w.name.clone(),
            table: w.table.to_string(),
            stale_after_s: w.stale_after.as_secs(),
            max_age_s: w.max_age.as_secs(),
            default_success: w.success_values.is_none(),
            skipped: None,
            stats: WatchStats::default(),
            stale_after: None,
            max_age: None,
            resolutions: resolutions.get(&w.name).copied().unwrap_or_default(),
        };
        if w.ended_column.is_none() {
            rep.skipped =
                Some("no ended_column: without an end time there is no runtime to measure".into());
        } else {
            rep.stats = measure(store.as_mut(), w, &clocks, marks.get(&w.name))?;
            let (st, max) = analysis::suggestions(&rep.stats, rep.stale_after_s, rep.max_age_s);
            rep.stale_after = Some(st);
            rep.max_age = max;
        }
        each(&rep);
    }
    Ok((journal_info, warnings))
}

/// How `selfheal stats` runs (`app` fills this from the command line).
#[derive(Debug, Clone, Default)]
pub struct StatsOptions {
    /// `--config`; `None`: `$SELFHEAL_CONFIG`, then the default path.
    pub config: Option<PathBuf>,
    /// Only these watches (all when empty).
    pub watches: Vec<String>,
    pub format: Format,
}

/// `selfheal stats`, printing to stdout: exit 0, or 1 when a watch has false positives or
/// a `max_age` below 1.5× its longest run.
pub fn run_command(args: &StatsOptions) -> Result<u8> {
    let path = ConfigPath::resolve(args.config.as_deref());
    let cfg = config::load(&path, &Overrides::default(), &args.watches)?;
    let mut out = std::io::stdout().lock();
    let mut attention = false;
    let mut totals = (0usize, 0u64);
    let (journal_info, warnings) = run(&cfg, &mut |rep| {
        attention |= rep.attention();
        totals.0 += 1;
        totals.1 += rep.stats.false_positives;
        let _ = match args.format {
            Format::Json => writeln!(out, "{}", watch_json(rep)),
            Format::Text => write_text(&mut out, rep),
        };
    })?;
    match args.format {
        Format::Json => {
            let _ = writeln!(
                out,
                "{}",
                json!({
                    "summary": true,
                    "watches": totals.0,
                    "false_positives": totals.1,
                    "attention": attention,
                    "journal": journal_info,
                    "warnings": warnings,
                })
            );
        }
        Format::Text => {
            if totals.0 == 0 {
                let _ = writeln!(out, "no watch is configured: nothing to measure");
            }
            let mut err = std::io::stderr();
            for w in &warnings {
                let _ = writeln!(err, "selfheal: warning: {}", printable(w));
            }
        }
    }
    Ok(if attention { exit::ATTENTION } else { exit::OK })
}

fn secs_duration(s: u64) -> String {
    fmt_duration(std::time::Duration::from_secs(s))
}

/// The JSON object for one watch.
pub fn watch_json(r: &WatchReport) -> Value {
    let s = &r.stats;
    let h = &s.runtimes;
    let runtime = (h.count() > 0).then(|| {
        json!({
            "p50": h.percentile(500),
            "p95": h.percentile(950),
            "p99": h.percentile(990),
            "max": h.max(),
            "min": h.min(),
            "longest_id": s.longest_id,
        })
    });
    let listed: Vec<Value> = s
        .listed
        .iter()
        .map(|f| {
            json!({
                "id": f.id,
                "status": f.status,
                "runtime_s": f.runtime_s,
                "source": f.source,
                "verdict": f.verdict,
                "marked_at": f.marked_at,
                "set_to": f.set_to,
                "heartbeat_age_s": f.heartbeat_age_s,
                "conclusive": f.conclusive,
                "basis": f.basis,
            })
        })
        .collect();
    let suggestion = |x: &Option<Suggestion>| {
        x.as_ref()
            .map(|s| json!({"secs": s.secs, "value": secs_duration(s.secs), "reason": s.reason}))
    };
    json!({
        "watch": r.name,
        "table": r.table,
        "skipped": r.skipped,
        "stale_after_s": r.stale_after_s,
        "max_age_s": r.max_age_s,
        "finished": s.finished,
        "successful": h.count(),
        "successful_by_status": s.by_status,
        "success_values_default": r.default_success,
        "unreadable": s.unreadable,
        "unreadable_example": s.unreadable_example,
        "implausible": s.implausible,
        "implausible_example": s.implausible_example,
        "runtime_s": runtime,
        "marked": s.marked,
        "rerun_after_mark": s.rerun,
        "false_positives": s.false_positives,
        "false_positives_by_verdict": s.false_positives_by_verdict,
        "false_positives_conclusive": s.fp_conclusive,
        "false_positives_impossible_silence": s.fp_heartbeat_impossible,
        "false_positive_rows": listed,
        "max_age_too_low": r.max_age_too_low(),
        "suggested_stale_after": suggestion(&r.stale_after),
        "suggested_max_age": suggestion(&r.max_age),
        "resolutions": {
            "dead": r.resolutions.dead,
            "retry": r.resolutions.retry,
            "running": r.resolutions.running,
        },
        "unparks": r.resolutions.unparks,
    })
}

/// The text block for one watch.
pub fn write_text(out: &mut dyn Write, r: &WatchReport) -> std::io::Result<()> {
    let s = &r.stats;
    let h = &s.runtimes;
    writeln!(
        out,
        "watch {} (table {}, stale_after {}, max_age {})",
        r.name,
        r.table,
        secs_duration(r.stale_after_s),
        secs_duration(r.max_age_s)
    )?;
    if let Some(why) = &r.skipped {
        writeln!(out, "  skipped: {}", printable(why))?;
        return write_resolutions(out, &r.resolutions);
    }
    let by: Vec<String> = s
        .by_status
        .iter()
        .map(|(st, n)| format!("{} {n}", printable(st)))
        .collect();
    writeln!(
        out,
        "  finished rows     {} ({} ended well{}{})",
        s.finished,
        h.count(),
        if by.is_empty() {
            String::new()
        } else {
            format!(": {}", by.join(", "))
        },
        [
            (s.unreadable, "with unreadable times", &s.unreadable_example),
            (
                s.implausible,
                "implausible, left out",
                &s.implausible_example
            ),
        ]
        .iter()
        .filter(|(n, _, _)| *n > 0)
        .fold(String::new(), |mut acc, (n, what, e)| {
            let _ = write!(
                acc,
                "; {n} {what}, e.g. {}",
                printable(e.as_deref().unwrap_or(""))
            );
            acc
        })
    )?;
    if r.default_success && s.by_status.len() > 1 {
        writeln!(
            out,
            "                    (by default every status selfheal does not write counts as \
             ended well; list the job's own success statuses in success_values to narrow it)"
        )?;
    }
    match (
        h.percentile(500),
        h.percentile(950),
        h.percentile(990),
        h.max(),
    ) {
        (Some(p50), Some(p95), Some(p99), Some(max)) => writeln!(
            out,
            "  runtime           p50 {}  p95 {}  p99 {}  max {}{}",
            human(p50),
            human(p95),
            human(p99),
            human(max),
            s.longest_id
                .as_ref()
                .map(|id| format!(" (id={})", printable(&id_key(id))))
                .unwrap_or_default()
        )?,
        _ => writeln!(out, "  runtime           no run ended well yet")?,
    }
    let mut marks: Vec<(u64, String)> = Vec::with_capacity(3);
    if let Some(max) = h.max() {
        marks.push((max, format!("longest run {}", human(max))));
    }
    if let Some(m) = &r.max_age {
        marks.push((
            m.secs,
            format!("suggested max_age {}", secs_duration(m.secs)),
        ));
    }
    marks.push((
        r.max_age_s,
        format!("max_age {}", secs_duration(r.max_age_s)),
    ));
    let chart = chart::lines(h, &marks);
    if !chart.is_empty() {
        writeln!(out, "  runtimes          (runs that ended well, log scale)")?;
        for line in chart {
            writeln!(out, "    {line}")?;
        }
    }
    writeln!(
        out,
        "  false positives   {}{}",
        s.false_positives,
        if s.false_positives == 0 {
            " (no row selfheal marked finished anyway)".to_string()
        } else {
            let by: Vec<String> = s
                .false_positives_by_verdict
                .iter()
                .map(|(v, n)| format!("{v}: {n}"))
                .collect();
            format!(" rows selfheal marked finished anyway ({})", by.join(", "))
        }
    )?;
    for f in &s.listed {
        let why = match (&f.basis, f.conclusive, f.heartbeat_age_s) {
            (Some(b), true, _) => format!(" ({})", printable(b)),
            (None, true, _) => " (on conclusive evidence)".into(),
            (_, false, Some(a)) => format!(" on a heartbeat {} old", human(a)),
            (_, false, None) => String::new(),
        };
        writeln!(
            out,
            "    id={} {} after {}: marked {}{why}{} ({})",
            printable(&id_key(&f.id)),
            printable(&f.status),
            f.runtime_s.map_or_else(|| "?".into(), human),
            printable(&f.verdict),
            f.marked_at
                .as_deref()
                .map(|t| format!(" at {}", printable(t)))
                .unwrap_or_default(),
            match f.source {
                analysis::Source::Journal => "journal",
                analysis::Source::Message => "message",
            }
        )?;
    }
    let more = s.false_positives.saturating_sub(s.listed.len() as u64);
    if more > 0 {
        writeln!(out, "    … and {more} more")?;
    }
    if s.fp_conclusive > 0 {
        writeln!(
            out,
            "  note              {} of them rested on evidence selfheal takes as proof (the \
             job's lock free, its owner pid gone): check that lock_file and owner_column \
             describe how the job really locks and records itself",
            s.fp_conclusive
        )?;
    }
    if s.fp_heartbeat_impossible > 0 {
        writeln!(
            out,
            "  note              {} of them showed a heartbeat older than the run itself (an \
             earlier row's, ids reused): no silence of a live run, left out of stale_after",
            s.fp_heartbeat_impossible
        )?;
    }
    if s.marked > 0 || s.rerun > 0 {
        writeln!(
            out,
            "  marked by selfheal {} stayed marked; {} ran again later and ended well",
            s.marked, s.rerun
        )?;
    }
    if let Some(m) = &r.max_age {
        writeln!(
            out,
            "  suggested         max_age = \"{}\"  ({})",
            secs_duration(m.secs),
            m.reason
        )?;
    }
    if let Some(st) = &r.stale_after {
        writeln!(
            out,
            "  suggested         stale_after = \"{}\"  ({})",
            secs_duration(st.secs),
            st.reason
        )?;
    }
    write_resolutions(out, &r.resolutions)?;
    if r.max_age_too_low() {
        writeln!(
            out,
            "  WARNING           max_age {} is below 1.5× the longest run that ended well ({}): \
             it kills legitimate runs",
            secs_duration(r.max_age_s),
            human(h.max().unwrap_or(0))
        )?;
    }
    Ok(())
}

/// What people decided and how often a park recovered: said only when something was.
fn write_resolutions(out: &mut dyn Write, r: &Resolutions) -> std::io::Result<()> {
    if !r.any() {
        return Ok(());
    }
    writeln!(
        out,
        "  a person decided  dead {}, retry {}, running {} (selfheal resolve)",
        r.dead, r.retry, r.running
    )?;
    writeln!(
        out,
        "  parks recovered   {} (parked as hung, then their own heartbeat beat again: false \
         parks; {}",
        r.unparks,
        if r.unparks + r.running > 0 {
            "many of them, or people choosing running, say stale_after or confirm is too tight)"
        } else {
            "none)"
        }
    )
}
