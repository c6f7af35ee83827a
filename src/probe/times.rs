//! The row's times: its age since `started_column`, on the database's clock (never the
//! host's: every age is a difference of instants on the clock that wrote them), and how
//! far beyond the clock tolerance its start lies in the future, if it does — then its
//! times cannot be trusted and it is judged by the facts about now alone (docs/design.md#proof-means-proof, "Proof
//! means proof"). A heartbeat column in the future counts too ([`super::heartbeat`]).
//!
//! I/O: none; read from the row.

use crate::clock::{
    Clocks, FUTURE_TOLERANCE_S, age_on_db_clock, implausible_start, instant, plausible_age,
};
use crate::config::Watch;
use crate::decide::{Ahead, Basis, Decision, Evidence, Thresholds, Verdict};
use crate::message;
use crate::store::RunningRow;

use super::{Human, Item, Reading, Rendered, Source, Value, widest_secs};

/// The row's times ([`Evidence::total_age`], [`Evidence::ahead`]).
pub struct TimesSource;

impl Source for TimesSource {
    fn read_row(&self, at: &Reading<'_>, e: &mut Evidence) {
        let (total_age, ahead) = total_age(at.w, at.row, at.scene.clocks);
        e.total_age = total_age;
        e.ahead = ahead.map(|by_s| Ahead { by_s, seen_s: 0 });
    }

    fn render(&self, e: &Evidence, out: &mut Rendered) {
        let (value, human) = match (&e.total_age, e.ahead) {
            (_, Some(a)) => (
                Value::Word("ahead"),
                Human::Ahead {
                    by_s: a.by_s,
                    seen_s: a.seen_s,
                },
            ),
            (Ok(a), None) => (Value::Secs(*a), Human::Duration(*a)),
            (Err(_), None) => (Value::Word("unknown"), Human::Same),
        };
        out.record.total_age_s = e.total_age.as_ref().ok().copied();
        out.record.ahead_s = e.ahead.map(|a| a.by_s);
        out.items.push(Item {
            key: "total_age",
            value,
            word: "running",
            human,
            aside: None,
        });
    }

    /// A row whose times lie in the future has no age to show: how far ahead instead.
    fn words(&self, e: &Evidence, _d: &Decision, out: &mut Vec<String>) {
        out.extend(
            e.ahead
                .map(|a| format!("times {} ahead", message::duration(a.by_s))),
        );
    }

    // (A row whose times lie in the future writes "row age unknown, …, times … ahead": a
    // few characters more, for a row that is itself a fault; its figures are cut first.)
    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[
            (Verdict::Overtime, Basis::MaxAge),
            (Verdict::Overtime, Basis::MaxAgeWorkerLives),
        ]
    }

    fn widest(&self, _w: &Watch, _basis: &Basis, t: Thresholds, e: &mut Evidence) {
        e.total_age = Ok(widest_secs(t));
        e.ahead = None;
    }
}

/// Seconds since the row started, on the database clock, and how far beyond the
/// tolerance its start lies in the future, if it does. A start that is not a plausible
/// start (0, a zero date, before 2000) is as good as none.
fn total_age(w: &Watch, row: &RunningRow, clocks: &Clocks) -> (Result<u64, String>, Option<u64>) {
    let col = &w.started_column;
    let raw = &row.started.raw;
    match &row.started.stamp {
        Err(e) => (Err(format!("{col} = {raw}: {e}")), None),
        Ok(None) => (Err(format!("{col} is NULL")), None),
        Ok(Some(s)) => {
            let at = match instant(*s, clocks.db.now_epoch) {
                Ok(at) => at,
                Err(why) => return (Err(why), None),
            };
            if let Some(why) = implausible_start(at) {
                return (Err(format!("{col} = {raw}: {why}")), None);
            }
            match age_on_db_clock(*s, &clocks.db) {
                Ok(a) => (plausible_age(a, &format!("{col} ({raw})")), future_by(a)),
                Err(why) => (Err(why), None),
            }
        }
    }
}

/// How far a signed age lies in the future beyond the tolerance, if it does.
pub(super) fn future_by(age: i64) -> Option<u64> {
    (age < -FUTURE_TOLERANCE_S).then(|| age.unsigned_abs())
}
