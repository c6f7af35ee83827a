//! What a run found and did, row by row, and how it is rendered: the one-line text for
//! cron, the `--explain` walk-through, and JSON. Rendering writes to the `Write`rs it is
//! given; library code never prints on its own.

use std::io::Write;

use serde_json::json;

use crate::config::fmt_duration;
use crate::decide::{Action, Decision, Evidence, Plan, Thresholds, Verdict};
use crate::evidence;
use crate::release::Release;
use crate::store::SqlValue;

/// Everything about one running row.
#[derive(Debug, Clone)]
pub struct RowReport {
    pub watch: String,
    pub id: SqlValue,
    pub evidence: Evidence,
    pub thresholds: Thresholds,
    pub decision: Decision,
    /// What a real run does (after the breaker and the clock check).
    pub plan: Plan,
    /// What happened: the planned action, `lost_race`, or `none` when the write was
    /// skipped or failed.
    pub action: Action,
    pub applied: bool,
    /// The message written to (or that would be written to) the row.
    pub reason: String,
    /// Anything else worth saying: a failed write, evidence that changed before the write.
    pub note: Option<String>,
    /// The status the row was set to, or would be.
    pub target: Option<String>,
    /// A real run removes the legacy lock file after marking the row, if it is then free
    /// (`release_lock = "if_free"`).
    pub release_planned: bool,
    /// What became of the legacy lock file (only after an applied change).
    pub lock_release: Option<Release>,
    /// The row's lock file, when a release is planned.
    pub lock_file: Option<String>,
}

impl RowReport {
    pub fn attention(&self) -> bool {
        self.plan.attention
            || self
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("write failed"))
            || self
                .lock_release
                .as_ref()
                .is_some_and(Release::needs_a_person)
    }
}

/// Per-watch facts for the explain header and the JSON summary.
#[derive(Debug, Clone, Default)]
pub struct WatchInfo {
    pub name: String,
    pub table: String,
    pub stale_after_s: u64,
    pub max_age_s: u64,
    /// Why the watch was not checked, if it was not.
    pub skipped: Option<String>,
}

/// What one run did for one watch: the per-watch part of the summary, of `last-run.json`
/// and of the metrics file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchRun {
    pub name: String,
    /// Why the watch was not checked, if it was not.
    pub skipped: Option<String>,
    /// The watch belongs to another host (`host =`): none of this host's business, so the
    /// metrics leave it out.
    pub other_host: bool,
    pub rows: usize,
    /// Rows changed (in a dry run: rows a real run would change).
    pub changed: usize,
    pub attention: usize,
    pub lost_race: usize,
    /// Running rows by verdict.
    pub verdicts: Vec<(Verdict, usize)>,
    /// Applied changes (and lost races) by action.
    pub actions: Vec<(Action, usize)>,
    pub breaker_tripped: bool,
    pub duration: std::time::Duration,
}

impl WatchRun {
    fn bump<K: PartialEq>(v: &mut Vec<(K, usize)>, k: K) {
        match v.iter_mut().find(|(x, _)| *x == k) {
            Some((_, n)) => *n += 1,
            None => v.push((k, 1)),
        }
    }

    /// False when the watch was skipped (another host's, or another run held its lock).
    pub fn checked(&self) -> bool {
        self.skipped.is_none()
    }

    /// Counts one reported row.
    pub fn count(&mut self, r: &RowReport, dry_run: bool) {
        self.rows += 1;
        Self::bump(&mut self.verdicts, r.decision.verdict);
        if r.applied || r.action == Action::LostRace {
            Self::bump(&mut self.actions, r.action);
        }
        if r.applied || (dry_run && r.plan.writes()) {
            self.changed += 1;
        }
        if r.action == Action::LostRace {
            self.lost_race += 1;
        }
        if r.attention() {
            self.attention += 1;
        }
    }

    pub fn verdict_count(&self, v: Verdict) -> usize {
        self.verdicts
            .iter()
            .find(|(x, _)| *x == v)
            .map_or(0, |(_, n)| *n)
    }

    pub fn action_count(&self, a: Action) -> usize {
        self.actions
            .iter()
            .find(|(x, _)| *x == a)
            .map_or(0, |(_, n)| *n)
    }
}

/// The end of a run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub rows: usize,
    pub changed: usize,
    pub attention: usize,
    pub lost_race: usize,
    pub dry_run: bool,
    /// Database clock minus host clock, seconds (MySQL only).
    pub clock_skew_s: Option<i64>,
    pub clock_skew_exceeded: bool,
    pub breaker_tripped: Vec<String>,
    /// Watches another run was checking (advisory lock).
    pub busy_watches: Vec<String>,
    pub watches_checked: usize,
    /// Legacy lock files removed (`release_lock = "if_free"`).
    pub locks_released: usize,
    pub warnings: Vec<String>,
    /// Per watch, in configuration order.
    pub per_watch: Vec<WatchRun>,
    /// Watches whose `max_age` is below 1.5× a recent run that ended well.
    pub max_age_too_low: Vec<crate::history::MaxAgeWarning>,
}

/// The summary object of SPEC §7 (also the body of `last-run.json`). `warnings` are the
/// run's warnings, in order, without repeats.
pub fn summary_json(s: &Summary, warnings: &[String]) -> serde_json::Value {
    let mut w: Vec<&String> = Vec::with_capacity(warnings.len());
    for x in warnings {
        if !w.contains(&x) {
            w.push(x);
        }
    }
    let per_watch: Vec<serde_json::Value> = s
        .per_watch
        .iter()
        .map(|c| {
            json!({
                "watch": c.name,
                "rows": c.rows,
                "changed": c.changed,
                "attention": c.attention,
                "lost_race": c.lost_race,
                "skipped": c.skipped,
            })
        })
        .collect();
    json!({
        "summary": true,
        "rows": s.rows,
        "changed": s.changed,
        "attention": s.attention,
        "lost_race": s.lost_race,
        "dry_run": s.dry_run,
        "watches": s.watches_checked,
        "locks_released": s.locks_released,
        "clock_skew_s": s.clock_skew_s,
        "clock_skew_exceeded": s.clock_skew_exceeded,
        "breaker_tripped": s.breaker_tripped,
        "busy_watches": s.busy_watches,
        "max_age_too_low": s.max_age_too_low.iter().map(|m| m.to_json()).collect::<Vec<_>>(),
        "per_watch": per_watch,
        "warnings": w,
    })
}

/// Renders a run. Text mode is silent unless something changed or needs a person.
pub trait Reporter {
    fn watch(&mut self, w: &WatchInfo);
    fn row(&mut self, r: &RowReport);
    fn warning(&mut self, msg: &str);
    fn finish(&mut self, s: &Summary);
}

/// One line per change or attention item (cron mails it); with `explain`, every row with
/// its evidence and verdict.
pub struct TextReporter<W: Write, E: Write> {
    pub out: W,
    pub err: E,
    pub explain: bool,
    /// A dry run says what a real run would change.
    pub dry_run: bool,
}

fn what_a_run_does(r: &RowReport) -> String {
    match (r.plan.action, &r.plan.target, r.plan.hold) {
        (_, _, Some(h)) => format!("leave it and report it ({})", h.describe()),
        (Action::None, _, _) if r.plan.attention => {
            "leave it and report it: a person must look".into()
        }
        (Action::None, _, _) => "leave it alone".into(),
        (a, Some(t), _) if r.release_planned => format!(
            "set status to '{t}' ({}), then remove the lock file if nobody holds it, the pid \
             in it is dead and it is still the same file",
            a.as_str()
        ),
        (a, Some(t), _) => format!("set status to '{t}' ({})", a.as_str()),
        (a, None, _) => a.as_str().into(),
    }
}

impl<W: Write, E: Write> Reporter for TextReporter<W, E> {
    fn watch(&mut self, w: &WatchInfo) {
        if !self.explain {
            return;
        }
        let _ = match &w.skipped {
            Some(why) => writeln!(self.out, "watch {}: skipped: {why}", w.name),
            None => writeln!(
                self.out,
                "watch {} (table {}, stale_after {}, max_age {})",
                w.name,
                w.table,
                fmt_duration(std::time::Duration::from_secs(w.stale_after_s)),
                fmt_duration(std::time::Duration::from_secs(w.max_age_s)),
            ),
        };
    }

    fn row(&mut self, r: &RowReport) {
        let e = &r.evidence;
        if self.explain {
            let _ = writeln!(
                self.out,
                "  id={:<4} {:<9} {}",
                r.id.to_string(),
                r.decision.verdict.as_str(),
                evidence::render(e, r.thresholds).explain(),
            );
            let _ = writeln!(self.out, "      because {}", r.decision.basis.describe());
            let _ = writeln!(self.out, "      a real run would {}", what_a_run_does(r));
            if let Some(n) = &r.note {
                let _ = writeln!(self.out, "      note: {n}");
            }
            return;
        }
        // A lock file that was already gone needs no line of its own (JSON says "absent").
        let lock_line = r.lock_release.as_ref().and_then(|l| {
            let file = r.lock_file.as_deref().unwrap_or("");
            let detail = l.detail().unwrap_or("");
            Some(match l {
                Release::Removed(_) => {
                    format!(
                        "{} id={}: removed lock file {file}: {detail}",
                        r.watch, r.id
                    )
                }
                Release::Absent => return None,
                Release::Kept(_) | Release::Failed(_) => format!(
                    "{} id={}: needs a person: lock file {file} {} ({detail}); the job cannot \
                     start again while it is there",
                    r.watch,
                    r.id,
                    l.as_str()
                ),
            })
        });
        let line = if r.applied {
            format!(
                "{} id={}: set status to '{}' ({}{}) — {}",
                r.watch,
                r.id,
                r.target.as_deref().unwrap_or(""),
                r.action.as_str(),
                if r.attention() {
                    ", a person must look"
                } else {
                    ""
                },
                r.reason
            )
        } else if self.dry_run && r.plan.writes() {
            format!(
                "{} id={}: would set status to '{}' ({}) — {}",
                r.watch,
                r.id,
                r.target.as_deref().unwrap_or(""),
                r.action.as_str(),
                r.reason
            )
        } else if r.attention() {
            let why = match (&r.note, r.plan.hold) {
                (Some(n), _) => n.clone(),
                (None, Some(h)) => h.describe().to_string(),
                (None, None) => r.decision.basis.describe(),
            };
            format!(
                "{} id={}: needs a person ({}): {why} — {}",
                r.watch,
                r.id,
                r.decision.verdict.as_str(),
                r.reason
            )
        } else {
            return;
        };
        let _ = writeln!(self.out, "{line}");
        if let Some(l) = lock_line {
            let _ = writeln!(self.out, "{l}");
        }
    }

    fn warning(&mut self, msg: &str) {
        let _ = writeln!(self.err, "selfheal: warning: {msg}");
    }

    fn finish(&mut self, s: &Summary) {
        if !self.explain {
            return;
        }
        let _ = writeln!(
            self.out,
            "{} running row{} in {} watch{}: a real run would change {}, {} need{} a person{}",
            s.rows,
            if s.rows == 1 { "" } else { "s" },
            s.watches_checked,
            if s.watches_checked == 1 { "" } else { "es" },
            s.changed,
            s.attention,
            if s.attention == 1 { "s" } else { "" },
            if s.dry_run {
                " (nothing was written)"
            } else {
                ""
            },
        );
    }
}

/// One JSON object per row, then one summary object (SPEC §7).
pub struct JsonReporter<W: Write> {
    pub out: W,
    pub warnings: Vec<String>,
}

pub fn row_json(r: &RowReport) -> serde_json::Value {
    let mut row = json!({
        "watch": r.watch,
        "id": r.id.to_json(),
        "verdict": r.decision.verdict,
        "action": r.action,
        "applied": r.applied,
        "reason": r.reason,
        "basis": r.decision.basis.describe(),
        "conclusive": r.decision.conclusive(),
        "target": r.target,
        "attention": r.attention(),
        "held": r.plan.hold,
        "note": r.note,
        "lock_file": r.lock_file,
        "lock_release": r.lock_release.as_ref().map(Release::as_str),
        "lock_release_detail": r.lock_release.as_ref().and_then(Release::detail),
        "stale_after_s": r.thresholds.stale_after,
        "max_age_s": r.thresholds.max_age,
    });
    if let (Some(o), Ok(serde_json::Value::Object(ev))) = (
        row.as_object_mut(),
        serde_json::to_value(evidence::render(&r.evidence, r.thresholds).record),
    ) {
        o.extend(ev);
    }
    row
}

impl<W: Write> Reporter for JsonReporter<W> {
    fn watch(&mut self, w: &WatchInfo) {
        if let Some(why) = &w.skipped {
            self.warnings
                .push(format!("watch {}: skipped: {why}", w.name));
        }
    }

    fn row(&mut self, r: &RowReport) {
        let _ = writeln!(self.out, "{}", row_json(r));
    }

    fn warning(&mut self, msg: &str) {
        self.warnings.push(msg.to_string());
    }

    fn finish(&mut self, s: &Summary) {
        let mut warnings = self.warnings.clone();
        warnings.extend(s.warnings.iter().cloned());
        let _ = writeln!(self.out, "{}", summary_json(s, &warnings));
    }
}
