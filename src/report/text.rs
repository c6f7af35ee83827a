//! The text a person reads: one line per change or attention item (cron mails it; a
//! problem it already told of is left out until it changes or `remind_every` passes, see
//! [`crate::check::remind`]), and
//! with `--explain` every row with its evidence (as [`crate::evidence`] renders it), its
//! verdict and what a real run would do, and the rows parked in `manual_value`.
//!
//! Every line goes out through [`crate::escape::printable`]: a value from the database
//! (an id, a status, an owner, a message) cannot end a line early or forge another.

use std::fmt::Write as _;
use std::io::Write;

use super::Release;
use super::{Parked, Reporter, RowReport, Summary, Unparked, WatchInfo};
use crate::clock::human;
use crate::config::fmt_duration;
use crate::decide::{Action, Hold};
use crate::escape::printable;
use crate::evidence;

/// One line per change or attention item (cron mails it); with `explain`, every row with
/// its evidence and verdict.
pub struct TextReporter<W: Write, E: Write> {
    pub out: W,
    pub err: E,
    pub explain: bool,
    /// A dry run says what a real run would change.
    pub dry_run: bool,
    /// Something was printed this run (on either stream); see [`Reporter::spoke`].
    pub spoke: bool,
    /// The row lines of the cron text so far, and those left out past [`MAX_ROW_LINES`].
    pub lines: RowLines,
}

/// A cron run's text lists at most this many rows (docs/design.md#output): a backlog of thousands of
/// rows is one summary line more, never a mail of thousands of lines.
pub const MAX_ROW_LINES: usize = 50;

/// The rows the cron text listed, and those it left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowLines {
    pub listed: usize,
    /// Rows past [`MAX_ROW_LINES`]: how many, how many of them changed, how many need a
    /// person.
    pub more: usize,
    pub more_changed: usize,
    pub more_attention: usize,
}

impl<W: Write, E: Write> TextReporter<W, E> {
    /// One line on `out`, its control characters escaped.
    fn line(&mut self, text: &str) {
        self.spoke = true;
        let _ = writeln!(self.out, "{}", printable(text));
    }
}

fn what_a_run_does(r: &RowReport) -> String {
    match (r.plan.action, &r.plan.target, r.plan.hold) {
        (_, _, Some(Hold::Confirming)) => {
            let (count, confirm) = r.confirmation.map_or((1, 1), |c| (c.count, c.confirm));
            format!(
                "leave it for now: confirming ({count} of {confirm} runs in a row that must \
                 find it {}; an inferred verdict acts only then, so a short stall never \
                 parks or kills a job)",
                r.decision.verdict.as_str()
            )
        }
        (_, _, Some(h @ (Hold::Contradicted | Hold::Person))) => {
            format!("leave it for now: {}", h.describe())
        }
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
        let text = match &w.skipped {
            Some(why) => format!("watch {}: skipped: {why}", w.name),
            None => format!(
                "watch {} (table {}{}, stale_after {}, max_age {}), judged on host {}",
                w.name,
                w.table,
                w.matches.iter().fold(String::new(), |mut s, m| {
                    let _ = write!(s, ", match {m}");
                    s
                }),
                fmt_duration(std::time::Duration::from_secs(w.stale_after_s)),
                fmt_duration(std::time::Duration::from_secs(w.max_age_s)),
                w.host,
            ),
        };
        self.line(&text);
    }

    fn row(&mut self, r: &RowReport) {
        let e = &r.evidence;
        if self.explain {
            self.line(&format!(
                "  id={:<4} {:<9} {}",
                r.id.to_string(),
                r.decision.verdict.as_str(),
                evidence::render(e).explain(),
            ));
            self.line(&format!("      because {}", r.decision.basis.describe()));
            if let Some(sig) = r.decision.overruled {
                self.line(&format!(
                    "      overruled: {}, but the row's own lock is held, so its worker runs \
                     (the owner column names a launcher that exited, or a process of another \
                     pid namespace?)",
                    sig.describe()
                ));
            }
            self.line(&format!("      a real run would {}", what_a_run_does(r)));
            if let Some(n) = &r.note {
                self.line(&format!("      note: {n}"));
            }
            if let Some(cmd) = &r.resolve {
                self.line(&format!(
                    "      a person: {} shows its whole record; {cmd} decides",
                    crate::person::show_command(&r.watch, &r.id)
                ));
            }
            return;
        }
        let fix = r
            .resolve
            .as_deref()
            .map(|c| format!("; fix: {c}"))
            .unwrap_or_default();
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
        // Past the bound, a row is counted for the summary line instead.
        let listed = r.applied
            || (self.dry_run && (r.plan.writes() || r.plan.hold == Some(Hold::Confirming)))
            || (r.attention() && !r.already_told);
        if listed && self.lines.listed >= MAX_ROW_LINES {
            self.lines.more += 1;
            self.lines.more_changed += usize::from(r.applied || (self.dry_run && r.plan.writes()));
            self.lines.more_attention += usize::from(r.attention());
            return;
        }
        if listed {
            self.lines.listed += 1;
        }
        let line = if r.applied {
            format!(
                "{} id={}: set status to '{}' ({}{}) — {}{}",
                r.watch,
                r.id,
                r.target.as_deref().unwrap_or(""),
                r.action.as_str(),
                if r.attention() {
                    ", a person must look"
                } else {
                    ""
                },
                r.reason,
                if r.attention() { fix.as_str() } else { "" }
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
        } else if self.dry_run && r.plan.hold == Some(Hold::Confirming) {
            // docs/design.md#output: a dry run says which rows wait for their next confirmation.
            let (count, confirm) = r.confirmation.map_or((1, 1), |c| (c.count, c.confirm));
            format!(
                "{} id={}: waits for its next confirmation ({}: {count} of the {confirm} runs \
                 in a row it takes before a real run acts) — {}",
                r.watch,
                r.id,
                r.decision.verdict.as_str(),
                r.reason
            )
        } else if r.attention() && r.already_told {
            // Told less than remind_every ago; the exit status still says it.
            return;
        } else if r.attention() {
            let why = match (&r.note, r.plan.hold) {
                (Some(n), _) => n.clone(),
                (None, Some(h)) => h.describe().to_string(),
                (None, None) => r.decision.basis.describe(),
            };
            format!(
                "{} id={}: needs a person ({}): {why} — {}{fix}",
                r.watch,
                r.id,
                r.decision.verdict.as_str(),
                r.reason
            )
        } else {
            return;
        };
        self.line(&line);
        if let Some(l) = lock_line {
            self.line(&l);
        }
    }

    fn warning(&mut self, msg: &str) {
        self.spoke = true;
        let _ = writeln!(self.err, "selfheal: warning: {}", printable(msg));
    }

    fn spoke(&self) -> bool {
        self.spoke
    }

    /// Shown less than `remind_every` ago: cron mails whatever is printed.
    fn warning_already_told(&mut self, _msg: &str) {}

    /// An un-park: said once, when it is made (the next run finds the row running); in
    /// `--explain` with its evidence. A lost race says nothing in the cron text (the row
    /// moved on by itself); a failed write is said.
    fn unparked(&mut self, u: &Unparked) {
        if self.explain {
            self.line(&format!(
                "  id={:<4} {:<9} {} (parked in '{}')",
                u.id.to_string(),
                u.decision.verdict.as_str(),
                evidence::render(&u.evidence).explain(),
                u.from
            ));
            self.line(&format!(
                "      because it was parked as hung at {} and its own heartbeat is fresh \
                 again since, while its worker lives",
                u.parked_at
            ));
            self.line(&format!(
                "      a real run would set status back to '{}' (recovered)",
                u.to
            ));
            if let Some(n) = &u.note {
                self.line(&format!("      note: {n}"));
            }
            return;
        }
        let line = if u.applied {
            format!(
                "{} id={}: set status back to '{}' (recovered) — {}",
                u.watch, u.id, u.to, u.reason
            )
        } else if self.dry_run {
            format!(
                "{} id={}: would set status back to '{}' (recovered) — {}",
                u.watch, u.id, u.to, u.reason
            )
        } else if let Some(n) = u.note.as_deref().filter(|n| n.starts_with("write failed")) {
            format!(
                "{} id={}: needs a person (recovered): {n} — {}",
                u.watch, u.id, u.reason
            )
        } else {
            return;
        };
        self.line(&line);
    }

    /// `--explain` only: the cron text never repeats them (the person was told when they
    /// were parked), and the metrics and JSON count them.
    fn parked(&mut self, p: &Parked) {
        if !self.explain || p.count == 0 {
            return;
        }
        let rows: Vec<String> = p
            .rows
            .iter()
            .map(|(id, age)| match age {
                Some(a) => format!("id={id} (started {} ago)", human(*a)),
                None => format!("id={id}"),
            })
            .collect();
        let more = p.count.saturating_sub(p.rows.len() as u64);
        self.line(&format!(
            "  parked: {} row{} in '{}' wait{} for a person: {}{}; selfheal show {} ID shows \
             one, selfheal resolve {} ID --as {} decides it",
            p.count,
            if p.count == 1 { "" } else { "s" },
            p.value,
            if p.count == 1 { "s" } else { "" },
            rows.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
            p.watch,
            p.watch,
            p.choices
        ));
    }

    fn finish(&mut self, s: &Summary) {
        if !self.explain {
            let l = self.lines;
            if l.more > 0 {
                self.line(&format!(
                    "… and {} more row{} not listed here ({} {}, {} need{} a person): every \
                     change is in the journal (journal.jsonl in the state directory), every \
                     row in selfheal check --explain, what needs a person in selfheal show",
                    l.more,
                    if l.more == 1 { "" } else { "s" },
                    l.more_changed,
                    if self.dry_run {
                        "would change"
                    } else {
                        "changed"
                    },
                    l.more_attention,
                    if l.more_attention == 1 { "s" } else { "" },
                ));
            }
            return;
        }
        let t = s.totals();
        self.line(&format!(
            "{} running row{} in {} watch{}: a real run would change {}, {} need{} a person{}",
            t.rows,
            if t.rows == 1 { "" } else { "s" },
            s.watches_checked,
            if s.watches_checked == 1 { "" } else { "es" },
            t.changed,
            t.attention,
            if t.attention == 1 { "s" } else { "" },
            if s.dry_run {
                " (nothing was written)"
            } else {
                ""
            },
        ));
    }
}
