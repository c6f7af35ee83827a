//! `run.metrics_file`: the Prometheus node_exporter textfile format, rewritten after every
//! real run (never by a dry run) while the run lock is held.
//!
//! Per watch of this host: running rows by verdict and by the host they belong to, rows
//! that need a person, rows parked in `manual_value` (the backlog a person owes), rows
//! whose action was held (by hold) and the whole-watch holds that tripped, changes
//! by action (counters), breaker trips (counter), the last run's time, duration and
//! outcome, and the time of the last successful run — the watchdog's own dead man's
//! switch; and the host that judged them. Also a person's decisions
//! (`selfheal_resolutions_total{decision}`, raised by `selfheal resolve` through
//! [`count_resolution`], which keeps every other line) and the rows un-parked
//! (`selfheal_unparks_total`); a run carries both on. Names carry the `selfheal_` prefix, base units
//! (seconds) and `_total` for counters.
//!
//! Counters and the last success survive from run to run by reading the previous file
//! back: it is selfheal's own output, and a lost file merely resets the counters, which
//! Prometheus handles. A watch not checked this run (another `--watch` selection) keeps
//! its previous lines. I/O, through [`crate::fsafe`] (no link someone else planted is
//! followed): reads the previous file; writes a new temporary file with an unpredictable
//! name beside it (`.NAME.RANDOM.tmp`, which the textfile collector ignores), flushes it
//! to disk and renames it over the file, so a reader never sees half a file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::config::Config;
use crate::decide::{Action, Hold, Verdict};
use crate::error::{Error, Result};
use crate::fsafe::Dir;
use crate::host::Host;
use crate::report::{LogStatus, Summary};

/// What one run contributes.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    /// The host that ran it.
    pub host: &'a str,
    /// `None` when the run failed (database or file-system failure).
    pub summary: Option<&'a Summary>,
    /// `--log`: whether it reached its target (also when the run failed).
    pub log: Option<&'a LogStatus>,
    pub exit_status: u8,
    pub started: SystemTime,
    pub duration: Duration,
}

const VERDICTS: [Verdict; 7] = [
    Verdict::Alive,
    Verdict::Starting,
    Verdict::Dead,
    Verdict::Hung,
    Verdict::Overtime,
    Verdict::Unknown,
    Verdict::Remote,
];
/// Holds of one row, then those of a watch as a whole (docs/design.md#holds).
const ROW_HOLDS: [Hold; 8] = [
    Hold::Confirming,
    Hold::Contradicted,
    Hold::Person,
    Hold::Breaker,
    Hold::ClockSkew,
    Hold::NoHeartbeat,
    Hold::MassOvertime,
    Hold::NoNamedLock,
];
const WATCH_HOLDS: [Hold; 4] = [
    Hold::Breaker,
    Hold::NoHeartbeat,
    Hold::MassOvertime,
    Hold::NoNamedLock,
];
const ACTIONS: [Action; 4] = [
    Action::MarkDead,
    Action::MarkRetry,
    Action::MarkManual,
    Action::LostRace,
];

/// A person's decisions (`selfheal resolve --as`), the `decision` label of
/// `selfheal_resolutions_total`.
pub const DECISIONS: [&str; 3] = ["dead", "retry", "running"];

/// Metric families: name, type, help. Rendered in this order.
const FAMILIES: [(&str, &str, &str); 20] = [
    (
        "selfheal_host_info",
        "gauge",
        "The host that wrote this file and judged its rows (always 1).",
    ),
    (
        "selfheal_rows",
        "gauge",
        "Running rows by verdict in the last run.",
    ),
    (
        "selfheal_owner_rows",
        "gauge",
        "Running rows by the host they belong to (owner_host) in the last run.",
    ),
    (
        "selfheal_attention_rows",
        "gauge",
        "Rows that needed a person in the last run.",
    ),
    (
        "selfheal_parked_rows",
        "gauge",
        "Rows parked in manual_value, waiting for a person (watches with a manual_value).",
    ),
    (
        "selfheal_held_rows",
        "gauge",
        "Rows whose action was held in the last run, by hold (confirming, contradicted: \
         waiting on their own; person: put back to running by a person; breaker, clock_skew, \
         no_heartbeat, mass_overtime, no_named_lock: for a person).",
    ),
    (
        "selfheal_watch_held",
        "gauge",
        "1 when a whole-watch hold (breaker, no_heartbeat, mass_overtime, no_named_lock) \
         tripped in the last run, else 0.",
    ),
    (
        "selfheal_changes_total",
        "counter",
        "Rows changed by action (lost_race: the row moved on before the write).",
    ),
    (
        "selfheal_watch_busy",
        "gauge",
        "Consecutive real runs that skipped the watch because its advisory lock was held elsewhere (0 when it was checked).",
    ),
    (
        "selfheal_log_up",
        "gauge",
        "Whether check --log reached its target (syslog or journald) in the last run.",
    ),
    (
        "selfheal_breaker_trips_total",
        "counter",
        "Runs in which the breaker held back heartbeat-only deaths.",
    ),
    (
        "selfheal_resolutions_total",
        "counter",
        "A person's decisions on rows (selfheal resolve) by decision: dead, retry, running.",
    ),
    (
        "selfheal_unparks_total",
        "counter",
        "Rows parked as hung that a run put back to running: their own heartbeat beat again.",
    ),
    (
        "selfheal_last_run_timestamp_seconds",
        "gauge",
        "When the last run started.",
    ),
    (
        "selfheal_last_run_duration_seconds",
        "gauge",
        "How long the last run took for the watch (the whole run when it failed).",
    ),
    (
        "selfheal_last_run_success",
        "gauge",
        "1 when the last run judged every running row of the watch, else 0.",
    ),
    (
        "selfheal_last_success_timestamp_seconds",
        "gauge",
        "When a run last judged every running row of the watch (alert when stale).",
    ),
    (
        "selfheal_clock_skew_seconds",
        "gauge",
        "Database clock minus host clock at the last run.",
    ),
    (
        "selfheal_last_run_exit_status",
        "gauge",
        "Exit status of the last run (0, 1, 3, 75).",
    ),
    (
        "selfheal_metrics_version",
        "gauge",
        "Format of this file; always 1.",
    ),
];

/// One sample: family, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub family: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    fn new(family: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            family: family.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.as_str())
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// Reads back a file this module wrote. Lines it does not understand are dropped.
pub fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (family, labels) = match head.split_once('{') {
            None => (head.to_string(), Vec::new()),
            Some((f, rest)) => {
                let Some(body) = rest.strip_suffix('}') else {
                    continue;
                };
                let mut labels = Vec::new();
                let mut ok = true;
                let mut rest = body;
                while !rest.is_empty() {
                    let Some((k, after)) = rest.split_once("=\"") else {
                        ok = false;
                        break;
                    };
                    // The value ends at the first unescaped quote.
                    let mut end = None;
                    let mut esc = false;
                    for (i, c) in after.char_indices() {
                        match (c, esc) {
                            ('\\', false) => esc = true,
                            ('"', false) => {
                                end = Some(i);
                                break;
                            }
                            _ => esc = false,
                        }
                    }
                    // The value, and what follows its closing quote.
                    let Some((value, tail)) =
                        end.and_then(|i| Some((after.get(..i)?, after.get(i + 1..)?)))
                    else {
                        ok = false;
                        break;
                    };
                    labels.push((k.to_string(), unescape(value)));
                    rest = tail.trim_start_matches(',');
                }
                if !ok {
                    continue;
                }
                (f.to_string(), labels)
            }
        };
        out.push(Sample {
            family,
            labels,
            value,
        });
    }
    out
}

fn epoch_s(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

/// The new samples from the previous ones and this run. `watches`: every watch of this
/// host in the configuration; `selected`: those this run set out to check. Pure.
pub fn samples(
    prev: &[Sample],
    watches: &[String],
    selected: &[String],
    run: &Run<'_>,
) -> Vec<Sample> {
    let prev_of = |family: &str, watch: &str, extra: Option<(&str, &str)>| -> f64 {
        prev.iter()
            .find(|s| {
                s.family == family
                    && s.label("watch") == Some(watch)
                    && extra.is_none_or(|(k, v)| s.label(k) == Some(v))
            })
            .map_or(0.0, |s| s.value)
    };
    let mut out = Vec::new();
    let now = epoch_s(run.started);
    // Watches of this host that this run did not reach keep their lines; watches that are
    // no longer configured are dropped.
    let reached: Vec<&str> = match run.summary {
        Some(s) => s
            .per_watch
            .iter()
            .filter(|w| !w.other_host)
            .map(|w| w.name.as_str())
            .collect(),
        None => selected.iter().map(String::as_str).collect(),
    };
    for w in watches {
        if !reached.contains(&w.as_str()) {
            out.extend(
                prev.iter()
                    .filter(|s| s.label("watch") == Some(w.as_str()))
                    .cloned(),
            );
        }
    }
    let per_watch = run.summary.map_or(&[][..], |s| s.per_watch.as_slice());
    for w in &reached {
        let stats = per_watch.iter().find(|s| s.name == *w);
        let success = stats.is_some_and(super::report::WatchRun::checked);
        if let Some(s) = stats.filter(|s| s.checked()) {
            for v in VERDICTS {
                out.push(Sample::new(
                    "selfheal_rows",
                    &[("watch", w), ("verdict", v.as_str())],
                    s.verdict_count(v) as f64,
                ));
            }
            out.push(Sample::new(
                "selfheal_attention_rows",
                &[("watch", w)],
                s.totals.attention as f64,
            ));
            if let Some(n) = s.parked {
                out.push(Sample::new(
                    "selfheal_parked_rows",
                    &[("watch", w)],
                    n as f64,
                ));
            }
            // The busiest hosts by name, the rest summed: a bounded number of series
            // whatever the number of distinct hosts.
            let busiest = s.owners.busiest();
            for (owner, n) in busiest.shown {
                out.push(Sample::new(
                    "selfheal_owner_rows",
                    &[("watch", w), ("owner_host", owner)],
                    n as f64,
                ));
            }
            if let Some(other) = busiest.other {
                out.push(Sample::new(
                    "selfheal_owner_rows",
                    &[("watch", w), ("owner_host", "other")],
                    other.rows as f64,
                ));
            }
            for h in ROW_HOLDS {
                let n = s.held.iter().find(|(x, _)| *x == h).map_or(0, |(_, n)| *n);
                out.push(Sample::new(
                    "selfheal_held_rows",
                    &[("watch", w), ("hold", h.as_str())],
                    n as f64,
                ));
            }
            for h in WATCH_HOLDS {
                out.push(Sample::new(
                    "selfheal_watch_held",
                    &[("watch", w), ("hold", h.as_str())],
                    if s.holds.contains(&h) { 1.0 } else { 0.0 },
                ));
            }
        }
        for a in ACTIONS {
            let before = prev_of("selfheal_changes_total", w, Some(("action", a.as_str())));
            let now_n = stats.map_or(0, |s| s.action_count(a));
            out.push(Sample::new(
                "selfheal_changes_total",
                &[("watch", w), ("action", a.as_str())],
                before + now_n as f64,
            ));
        }
        // Every run: the count of a streak, 0 once checked; a failed run keeps the last.
        let busy = match (run.summary, stats) {
            (Some(_), Some(s)) => s.busy_runs as f64,
            (Some(_), None) => 0.0,
            (None, _) => prev_of("selfheal_watch_busy", w, None),
        };
        out.push(Sample::new("selfheal_watch_busy", &[("watch", w)], busy));
        // A person's decisions are counted by `selfheal resolve` ([`count_resolution`]);
        // a run carries them on.
        for d in DECISIONS {
            let n = prev_of("selfheal_resolutions_total", w, Some(("decision", d)));
            out.push(Sample::new(
                "selfheal_resolutions_total",
                &[("watch", w), ("decision", d)],
                n,
            ));
        }
        out.push(Sample::new(
            "selfheal_unparks_total",
            &[("watch", w)],
            prev_of("selfheal_unparks_total", w, None) + stats.map_or(0.0, |s| s.unparked as f64),
        ));
        let trips = prev_of("selfheal_breaker_trips_total", w, None)
            + if stats.is_some_and(|s| s.breaker_tripped) {
                1.0
            } else {
                0.0
            };
        out.push(Sample::new(
            "selfheal_breaker_trips_total",
            &[("watch", w)],
            trips,
        ));
        out.push(Sample::new(
            "selfheal_last_run_timestamp_seconds",
            &[("watch", w)],
            now,
        ));
        let duration = stats.map_or(run.duration, |s| s.duration);
        out.push(Sample::new(
            "selfheal_last_run_duration_seconds",
            &[("watch", w)],
            (duration.as_secs_f64() * 1000.0).round() / 1000.0,
        ));
        out.push(Sample::new(
            "selfheal_last_run_success",
            &[("watch", w)],
            if success { 1.0 } else { 0.0 },
        ));
        let last_success = if success {
            now
        } else {
            prev_of("selfheal_last_success_timestamp_seconds", w, None)
        };
        if last_success > 0.0 {
            out.push(Sample::new(
                "selfheal_last_success_timestamp_seconds",
                &[("watch", w)],
                last_success,
            ));
        }
    }
    if !run.host.is_empty() {
        out.push(Sample::new(
            "selfheal_host_info",
            &[("host", run.host)],
            1.0,
        ));
    }
    if let Some(skew) = run.summary.and_then(|s| s.clock_skew_s) {
        out.push(Sample::new("selfheal_clock_skew_seconds", &[], skew as f64));
    }
    if let Some(l) = run.log {
        out.push(Sample::new(
            "selfheal_log_up",
            &[("target", l.target)],
            if l.error.is_none() { 1.0 } else { 0.0 },
        ));
    }
    out.push(Sample::new(
        "selfheal_last_run_exit_status",
        &[],
        f64::from(run.exit_status),
    ));
    out.push(Sample::new("selfheal_metrics_version", &[], 1.0));
    out
}

#[allow(clippy::cast_possible_truncation)] // an integral value below 1e15 < 2^53 is exact as i64
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Renders samples in the text exposition format, families in a fixed order, each with
/// `# HELP` and `# TYPE`.
pub fn render(samples: &[Sample]) -> String {
    let mut by_family: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_family.entry(s.family.as_str()).or_default().push(s);
    }
    let mut out = String::new();
    for (name, kind, help) in FAMILIES {
        let Some(list) = by_family.get(name) else {
            continue;
        };
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in list {
            let labels = if s.labels.is_empty() {
                String::new()
            } else {
                format!(
                    "{{{}}}",
                    s.labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            let _ = writeln!(out, "{name}{labels} {}", fmt_value(s.value));
        }
    }
    out
}

/// What the metrics file is called in messages.
const WRITING: &str = "writing the metrics file (run.metrics_file)";

/// Writes `text` to `path` atomically, through [`crate::fsafe`]: its directory reached
/// without following a link someone else could have planted, a new temporary file with an
/// unpredictable name beside it (mode 0644: node_exporter reads it), flushed to disk,
/// renamed over `path` (a link at `path` is replaced, never written through), the
/// directory flushed. The temporary file is removed on failure.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let (dir, name) = Dir::open_parent(path).map_err(|e| Error::fsafe(e, WRITING))?;
    dir.replace(&name, 0o644, |f| f.write_all(text.as_bytes()))
        .map_err(|e| Error::fsafe(e, WRITING))
}

/// The largest previous file read back: selfheal's own is a few KiB per watch.
const MAX_PREVIOUS: u64 = 4 << 20;

/// The previous file's text, read through [`crate::fsafe`]; `None` when there is none, or
/// when something else than a regular file is at its name (a link, a FIFO: it is replaced
/// by the next write, never read through).
fn previous(path: &Path) -> Result<Option<String>> {
    use std::io::Read as _;
    let reading = "reading the previous metrics file (run.metrics_file)";
    let opened = Dir::open_parent(path).and_then(|(dir, name)| dir.open_read(&name));
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(crate::fsafe::Error::FinalSymlink { .. } | crate::fsafe::Error::NotRegular { .. }) => {
            return Ok(None);
        }
        Err(e) => return Err(Error::fsafe(e, reading)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_PREVIOUS)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, reading, e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The samples of `prev` with `watch`'s counter of `decision` raised by `n` (added when it
/// is not there); every other sample as it was. Pure.
pub fn with_resolutions(prev: &[Sample], watch: &str, decision: &str, n: u64) -> Vec<Sample> {
    let mut out = prev.to_vec();
    let hit = out.iter_mut().find(|s| {
        s.family == "selfheal_resolutions_total"
            && s.label("watch") == Some(watch)
            && s.label("decision") == Some(decision)
    });
    match hit {
        Some(s) => s.value += n as f64,
        None => out.push(Sample::new(
            "selfheal_resolutions_total",
            &[("watch", watch), ("decision", decision)],
            n as f64,
        )),
    }
    if !out.iter().any(|s| s.family == "selfheal_metrics_version") {
        out.push(Sample::new("selfheal_metrics_version", &[], 1.0));
    }
    out
}

/// Counts `n` decisions of a person (`selfheal resolve --as decision`) on `watch`'s rows
/// in the metrics file: reads it back, raises that counter, keeps every other line, and
/// rewrites it atomically (as [`update`] does).
pub fn count_resolution(path: &Path, watch: &str, decision: &str, n: u64) -> Result<()> {
    let prev = previous(path)?.map(|t| parse(&t)).unwrap_or_default();
    write_atomic(path, &render(&with_resolutions(&prev, watch, decision, n)))
}

/// Reads the previous file, merges this run in, and rewrites it atomically.
pub fn update(path: &Path, cfg: &Config, host: &Host, run: &Run<'_>) -> Result<()> {
    let prev = previous(path)?.map(|t| parse(&t)).unwrap_or_default();
    let here = |h: &Option<String>| h.as_ref().is_none_or(|h| host.is_me(h));
    let watches: Vec<String> = cfg
        .all_watches
        .iter()
        .filter(|(_, h)| here(h))
        .map(|(n, _)| n.clone())
        .collect();
    let selected: Vec<String> = cfg
        .watches
        .iter()
        .filter(|w| here(&w.host))
        .map(|w| w.name.clone())
        .collect();
    write_atomic(path, &render(&samples(&prev, &watches, &selected, run)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::WatchRun;

    fn stats(name: &str) -> WatchRun {
        WatchRun {
            name: name.into(),
            verdicts: vec![(Verdict::Alive, 2), (Verdict::Dead, 1)],
            actions: vec![(Action::MarkDead, 1)],
            owners: [("web1", 2), ("web2.dc1.example.com", 1)].into(),
            breaker_tripped: false,
            duration: Duration::from_millis(12),
            ..WatchRun::default()
        }
    }

    fn value(samples: &[Sample], family: &str, labels: &[(&str, &str)]) -> Option<f64> {
        samples
            .iter()
            .find(|s| s.family == family && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
            .map(|s| s.value)
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn counters_accumulate_and_a_failed_run_keeps_the_last_success() {
        let watches = vec!["a".to_string(), "b".to_string()];
        let mut a1 = stats("a");
        a1.parked = Some(3);
        let s1 = Summary {
            per_watch: vec![a1, stats("b")],
            clock_skew_s: Some(-2),
            ..Summary::default()
        };
        let run1 = Run {
            host: "web1",
            summary: Some(&s1),
            log: None,
            exit_status: 0,
            started: at(1_000),
            duration: Duration::from_millis(30),
        };
        let text1 = render(&samples(&[], &watches, &watches, &run1));
        let first = parse(&text1);
        assert_eq!(
            value(
                &first,
                "selfheal_rows",
                &[("watch", "a"), ("verdict", "alive")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &first,
                "selfheal_rows",
                &[("watch", "a"), ("verdict", "unknown")]
            ),
            Some(0.0)
        );
        assert_eq!(
            value(
                &first,
                "selfheal_changes_total",
                &[("watch", "a"), ("action", "mark_dead")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &first,
                "selfheal_last_run_duration_seconds",
                &[("watch", "a")]
            ),
            Some(0.012)
        );
        assert_eq!(
            value(&first, "selfheal_clock_skew_seconds", &[]),
            Some(-2.0)
        );
        assert_eq!(
            value(&first, "selfheal_parked_rows", &[("watch", "a")]),
            Some(3.0)
        );
        assert_eq!(
            value(&first, "selfheal_parked_rows", &[("watch", "b")]),
            None,
            "a watch without manual_value parks nothing"
        );
        // The host that judged, and the hosts the rows belong to.
        assert_eq!(
            value(&first, "selfheal_host_info", &[("host", "web1")]),
            Some(1.0)
        );
        assert_eq!(
            value(
                &first,
                "selfheal_owner_rows",
                &[("watch", "a"), ("owner_host", "web2.dc1.example.com")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &first,
                "selfheal_rows",
                &[("watch", "a"), ("verdict", "remote")]
            ),
            Some(0.0)
        );

        // A second run of watch a only: counters add up, b keeps its lines.
        let mut a2 = stats("a");
        a2.breaker_tripped = true;
        let s2 = Summary {
            per_watch: vec![a2],
            ..Summary::default()
        };
        let run2 = Run {
            host: "web1",
            summary: Some(&s2),
            log: None,
            exit_status: 1,
            started: at(2_000),
            duration: Duration::from_millis(30),
        };
        let second = parse(&render(&samples(&first, &watches, &["a".into()], &run2)));
        let changes = |s: &[Sample], w| {
            value(
                s,
                "selfheal_changes_total",
                &[("watch", w), ("action", "mark_dead")],
            )
        };
        assert_eq!(changes(&second, "a"), Some(2.0));
        assert_eq!(changes(&second, "b"), Some(1.0));
        assert_eq!(
            value(&second, "selfheal_breaker_trips_total", &[("watch", "a")]),
            Some(1.0)
        );
        assert_eq!(
            value(
                &second,
                "selfheal_last_run_timestamp_seconds",
                &[("watch", "b")]
            ),
            Some(1_000.0)
        );

        // A failed run: no row gauges, success 0, last success kept, counters kept.
        let run3 = Run {
            host: "web1",
            summary: None,
            log: None,
            exit_status: 3,
            started: at(3_000),
            duration: Duration::from_millis(5_000),
        };
        // A failed run of watch a only: b is left as it was.
        let third = parse(&render(&samples(&second, &watches, &["a".into()], &run3)));
        assert_eq!(
            value(&third, "selfheal_last_run_success", &[("watch", "b")]),
            Some(1.0)
        );
        // A failed run of both.
        let third = parse(&render(&samples(&third, &watches, &watches, &run3)));
        assert_eq!(
            value(&third, "selfheal_last_run_success", &[("watch", "b")]),
            Some(0.0)
        );
        assert_eq!(value(&third, "selfheal_rows", &[("watch", "a")]), None);
        assert_eq!(
            value(&third, "selfheal_last_run_success", &[("watch", "a")]),
            Some(0.0)
        );
        assert_eq!(
            value(
                &third,
                "selfheal_last_success_timestamp_seconds",
                &[("watch", "a")]
            ),
            Some(2_000.0)
        );
        assert_eq!(
            value(
                &third,
                "selfheal_last_run_duration_seconds",
                &[("watch", "a")]
            ),
            Some(5.0)
        );
        assert_eq!(changes(&third, "a"), Some(2.0));
        assert_eq!(
            value(&third, "selfheal_last_run_exit_status", &[]),
            Some(3.0)
        );

        // A watch removed from the configuration disappears.
        let only_a = vec!["a".to_string()];
        let fourth = samples(&third, &only_a, &only_a, &run3);
        assert!(fourth.iter().all(|s| s.label("watch") != Some("b")));
    }

    #[test]
    fn a_persons_decisions_are_counted_kept_by_runs_and_unparks_added_up() {
        let watches = vec!["a".to_string(), "b".to_string()];
        let s = Summary {
            per_watch: vec![stats("a"), stats("b")],
            ..Summary::default()
        };
        let run = Run {
            host: "web1",
            summary: Some(&s),
            exit_status: 0,
            started: at(1_000),
            duration: Duration::from_millis(30),
            log: None,
        };
        let first = samples(&[], &watches, &watches, &run);
        assert_eq!(
            value(
                &first,
                "selfheal_resolutions_total",
                &[("watch", "a"), ("decision", "retry")]
            ),
            Some(0.0)
        );
        // resolve counts two retries on a, keeping every other line as it was.
        let after = with_resolutions(&parse(&render(&first)), "a", "retry", 2);
        let after = parse(&render(&after));
        assert_eq!(after.len(), first.len());
        assert_eq!(
            value(
                &after,
                "selfheal_resolutions_total",
                &[("watch", "a"), ("decision", "retry")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &after,
                "selfheal_rows",
                &[("watch", "a"), ("verdict", "alive")]
            ),
            Some(2.0)
        );
        // The next run carries the counter on and adds its un-parks.
        let mut a = stats("a");
        a.unparked = 1;
        let s2 = Summary {
            per_watch: vec![a, stats("b")],
            ..Summary::default()
        };
        let run2 = Run {
            summary: Some(&s2),
            started: at(2_000),
            ..run
        };
        let next = samples(&after, &watches, &watches, &run2);
        assert_eq!(
            value(
                &next,
                "selfheal_resolutions_total",
                &[("watch", "a"), ("decision", "retry")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(&next, "selfheal_unparks_total", &[("watch", "a")]),
            Some(1.0)
        );
        // Into a file that does not exist yet: the counter alone, and the format's version.
        let lone = render(&with_resolutions(&[], "a", "dead", 1));
        assert_eq!(
            lone.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            [
                "selfheal_resolutions_total{watch=\"a\",decision=\"dead\"} 1",
                "selfheal_metrics_version 1"
            ]
        );
    }

    #[test]
    fn rendering_is_the_text_format() {
        let s = vec![
            Sample::new(
                "selfheal_rows",
                &[("watch", "a\"b"), ("verdict", "dead")],
                3.0,
            ),
            Sample::new(
                "selfheal_last_run_duration_seconds",
                &[("watch", "x")],
                0.25,
            ),
        ];
        let text = render(&s);
        assert_eq!(
            text,
            "# HELP selfheal_rows Running rows by verdict in the last run.\n\
             # TYPE selfheal_rows gauge\n\
             selfheal_rows{watch=\"a\\\"b\",verdict=\"dead\"} 3\n\
             # HELP selfheal_last_run_duration_seconds How long the last run took for the \
             watch (the whole run when it failed).\n\
             # TYPE selfheal_last_run_duration_seconds gauge\n\
             selfheal_last_run_duration_seconds{watch=\"x\"} 0.25\n"
        );
        assert_eq!(parse(&text), s);
    }

    #[test]
    fn writes_are_atomic_renames() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("selfheal.prom");
        write_atomic(&p, "a 1\n").expect("write");
        write_atomic(&p, "a 2\n").expect("write");
        assert_eq!(std::fs::read_to_string(&p).expect("read"), "a 2\n");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(std::result::Result::ok)
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
        let e = write_atomic(&dir.path().join("no/such/dir.prom"), "x").expect_err("no dir");
        assert_eq!(e.exit_code(), 3);
    }
}
