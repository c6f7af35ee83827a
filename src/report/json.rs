//! `--format json`: one object per row, then one summary object (docs/design.md#json-summary); the summary
//! object is also the body of `last-run.json`. The evidence fields are those of
//! [`crate::evidence::Record`], and `lock_holder` ([`crate::evidence::LockHolder`]).

use std::io::Write;

use serde::Serialize;
use serde_json::json;

use super::Release;
use super::{Reporter, RowReport, Summary, Unparked, WatchInfo};
use crate::decide::{Action, Hold, Signal, Verdict};
use crate::evidence;

/// The summary object of docs/design.md#json-summary (also the body of `last-run.json`). `warnings` are the
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
                "rows": c.totals.rows,
                "changed": c.totals.changed,
                "attention": c.totals.attention,
                "lost_race": c.totals.lost_race,
                "skipped": c.skipped,
                "parked": c.parked,
                "busy_runs": c.busy_runs,
                "unparked": c.unparked,
                "owners": owners_json(&c.owners),
            })
        })
        .collect();
    let t = s.totals();
    json!({
        "summary": true,
        "host": s.host,
        "rows": t.rows,
        "changed": t.changed,
        "attention": t.attention,
        "lost_race": t.lost_race,
        "dry_run": s.dry_run,
        "watches": s.watches_checked,
        "locks_released": t.locks_released,
        "clock_skew_s": s.clock_skew_s,
        "clock_skew_exceeded": s.clock_skew_exceeded,
        "breaker_tripped": s.breaker_tripped,
        "busy_watches": s.busy_watches,
        "max_age_too_low": s.max_age_too_low.iter().map(super::super::history::MaxAgeWarning::to_json).collect::<Vec<_>>(),
        "per_watch": per_watch,
        "warnings": w,
        "parked": s.parked(),
        "log": s.log.as_ref().map(|l| json!({"target": l.target, "error": l.error})),
    })
}

/// The owner hosts of a watch's rows: the busiest by name, the rest summed as `other` (with
/// how many hosts that is), so a summary stays small whatever the number of hosts.
fn owners_json(o: &super::OwnerCounts) -> Vec<serde_json::Value> {
    let b = o.busiest();
    let mut v: Vec<serde_json::Value> = b
        .shown
        .into_iter()
        .map(|(h, n)| json!({"host": h, "rows": n}))
        .collect();
    if let Some(other) = b.other {
        let mut o = json!({"host": "other", "rows": other.rows, "hosts": other.hosts});
        if other.more_hosts {
            // More hosts than were counted one by one: `hosts` is a lower bound.
            o["more_hosts"] = json!(true);
        }
        v.push(o);
    }
    v
}

/// One JSON object per row, then one summary object (docs/design.md#json-summary).
pub struct JsonReporter<W: Write> {
    pub out: W,
    pub warnings: Vec<String>,
}

/// One row of `--format json` (docs/design.md#json-row). Its keys are printed in sorted order.
#[derive(Serialize)]
struct RowJson<'a> {
    watch: &'a str,
    id: serde_json::Value,
    /// The host that judged the row.
    host: &'a str,
    /// The host the row belongs to.
    owner_host: Option<&'a str>,
    verdict: Verdict,
    action: Action,
    applied: bool,
    reason: &'a str,
    basis: String,
    conclusive: bool,
    target: Option<&'a str>,
    attention: bool,
    held: Option<Hold>,
    /// A death signal the row's own lock, held, overruled (`owner_dead`, `owner_reused`).
    overruled: Option<Signal>,
    note: Option<&'a str>,
    lock_file: Option<&'a str>,
    lock_release: Option<&'static str>,
    lock_release_detail: Option<&'a str>,
    stale_after_s: u64,
    max_age_s: u64,
    /// An inferred verdict: the consecutive real runs that found it (this one included,
    /// in a dry run as a real run would count now), and how many it takes to act.
    confirmations: Option<u32>,
    confirm: Option<u32>,
    #[serde(flatten)]
    evidence: evidence::Record,
    lock_holder: Option<evidence::LockHolder>,
    /// For a row that needs a person: the `selfheal resolve …` command that decides it.
    resolve: Option<&'a str>,
}

pub fn row_json(r: &RowReport) -> serde_json::Value {
    let rendered = evidence::render(&r.evidence);
    let row = RowJson {
        watch: &r.watch,
        id: r.id.to_json(),
        host: &r.host,
        owner_host: r.owner_host.as_deref(),
        verdict: r.decision.verdict,
        action: r.action,
        applied: r.applied,
        reason: &r.reason,
        basis: r.decision.basis.describe(),
        conclusive: r.decision.conclusive(),
        target: r.target.as_deref(),
        attention: r.attention(),
        held: r.plan.hold,
        overruled: r.decision.overruled,
        note: r.note.as_deref(),
        lock_file: r.lock_file.as_deref(),
        lock_release: r.lock_release.as_ref().map(Release::as_str),
        lock_release_detail: r.lock_release.as_ref().and_then(Release::detail),
        stale_after_s: r.thresholds.stale_after,
        max_age_s: r.thresholds.max_age,
        confirmations: r.confirmation.map(|c| c.count),
        confirm: r.confirmation.map(|c| c.confirm),
        evidence: rendered.record,
        lock_holder: rendered.lock_holder,
        resolve: r.resolve.as_deref(),
    };
    // Through a `Value`, whose map sorts the keys as docs/design.md#output's examples show them.
    serde_json::to_value(row).unwrap_or(serde_json::Value::Null)
}

/// The object of an un-park (`"action": "recovered"`), among the rows: the parked row, what
/// was (or would be) done, the evidence now.
pub fn unparked_json(u: &Unparked) -> serde_json::Value {
    let rendered = evidence::render(&u.evidence);
    let mut v = json!({
        "watch": u.watch,
        "id": u.id.to_json(),
        "verdict": u.decision.verdict,
        "basis": u.decision.basis.describe(),
        "action": u.action,
        "applied": u.applied,
        "from": u.from,
        "target": u.to,
        "parked_at": u.parked_at,
        "reason": u.reason,
        "note": u.note,
        "attention": u.note.as_deref().is_some_and(|n| n.starts_with("write failed")),
        "stale_after_s": u.thresholds.stale_after,
        "max_age_s": u.thresholds.max_age,
        "lock_holder": rendered.lock_holder,
    });
    if let (Some(o), Ok(serde_json::Value::Object(e))) =
        (v.as_object_mut(), serde_json::to_value(&rendered.record))
    {
        o.extend(e);
    }
    v
}

impl<W: Write> Reporter for JsonReporter<W> {
    fn unparked(&mut self, u: &Unparked) {
        let mut line = serde_json::to_vec(&unparked_json(u)).unwrap_or_default();
        line.push(b'\n');
        let _ = self.out.write_all(&line);
    }

    fn watch(&mut self, w: &WatchInfo) {
        if let Some(why) = &w.skipped {
            self.warnings
                .push(format!("watch {}: skipped: {why}", w.name));
        }
    }

    fn row(&mut self, r: &RowReport) {
        let mut line = serde_json::to_vec(&row_json(r)).unwrap_or_default();
        line.push(b'\n');
        let _ = self.out.write_all(&line);
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
