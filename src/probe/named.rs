//! The job's named database lock (`db_lock`, `docs/design.md#named-lock`): the
//! MySQL/MariaDB user-level lock a PHP job holds for its whole run (`GET_LOCK`), as a
//! source of evidence ([`NamedLockSource`]): held (by which connection), free, or
//! neither proven for this row.
//!
//! I/O: none here. The server is asked once per page of rows, before the page is judged
//! (`crate::evidence::with_named`, through the store: one `SELECT IS_USED_LOCK(?), …`, and
//! the process list for the holders), and the answers wait in the page's
//! [`super::Snapshot`] ([`NamedTable`]). Asking takes no
//! lock: a job starting at that instant never fails its own `GET_LOCK` because of
//! selfheal.
//!
//! A name several running rows share (one lock per job code) is evidence only for the
//! youngest of them, the one that can hold it; for the older ones it is neutral
//! ([`NamedLock::Shared`]). A name that cannot be made (longer than 64 characters, a
//! column it reads is NULL) is unusable, neutral.

use std::collections::HashMap;

use crate::clock::Stamp;
use crate::config::{MAX_LOCK_NAME, Watch};
use crate::decide::{Basis, Decision, Evidence, NamedHolder, NamedLock, Thresholds, Verdict};
use crate::store::RunningRow;

use super::{Human, Item, Reading, Rendered, Source, Value};

/// The job's named lock ([`Evidence::named`]).
pub struct NamedLockSource;

/// What the server said of the names of one page of rows.
#[derive(Debug, Clone, Default)]
pub struct NamedTable {
    /// The connection's database, as `{database}` fills it.
    pub database: String,
    /// Each name of the page: who holds it (`None`: nobody).
    pub holders: HashMap<String, Option<NamedHolder>>,
    /// Each name several running rows of the watch share: the youngest of them (its id
    /// as text), the only one whose evidence it is.
    pub youngest: HashMap<String, String>,
    /// Why the server could not be asked.
    pub error: Option<String>,
}

/// Which running row of a watch is the youngest of those that share each name: fed every
/// running row, one at a time ([`Youngest::add`]); names only one row has are dropped.
#[derive(Debug, Default)]
pub struct Youngest {
    by_name: HashMap<String, (usize, (i64, String))>,
}

impl Youngest {
    /// Counts `row`'s names (watch `w`, database `database`).
    pub fn add(&mut self, w: &Watch, row: &RunningRow, database: &str) {
        let key = (start_key(row), row.id.to_string());
        for n in names_of(w, row, database).unwrap_or_default() {
            let e = self.by_name.entry(n).or_insert((0, key.clone()));
            e.0 += 1;
            if younger(&key, &e.1) {
                e.1 = key.clone();
            }
        }
    }

    /// Each name several rows share, with the youngest of them (its id as text).
    pub fn shared(self) -> HashMap<String, String> {
        self.by_name
            .into_iter()
            .filter(|(_, (n, _))| *n > 1)
            .map(|(name, (_, (_, id)))| (name, id))
            .collect()
    }
}

/// `a` started after `b` (or at the same second with a greater id).
fn younger(a: &(i64, String), b: &(i64, String)) -> bool {
    let num = |s: &str| s.parse::<i128>().ok();
    match a.0.cmp(&b.0) {
        std::cmp::Ordering::Equal => match (num(&a.1), num(&b.1)) {
            (Some(x), Some(y)) => x > y,
            _ => a.1 > b.1,
        },
        o => o.is_gt(),
    }
}

/// A row's start as seconds, for ordering rows of one table (a naive time in its zone's
/// wall clock: the rows compared were written in the same zone).
fn start_key(r: &RunningRow) -> i64 {
    match &r.started.stamp {
        Ok(Some(Stamp::Epoch(s))) => *s,
        Ok(Some(Stamp::Local(n, _))) => n.and_utc().timestamp(),
        _ => i64::MIN,
    }
}

/// The names watch `w`'s templates make for `row`, in the templates' order; `Err`: why
/// one cannot be made (a column it reads is NULL, longer than the server allows).
pub fn names_of(
    w: &Watch,
    row: &RunningRow,
    database: &str,
) -> std::result::Result<Vec<String>, String> {
    let cols = w.lock_columns();
    let value = |c: &crate::config::Ident| {
        cols.iter()
            .position(|k| k.same_column(c))
            .and_then(|i| row.lock_values.get(i).cloned().flatten())
    };
    let id = row.id.to_string();
    w.db_lock
        .iter()
        .map(|t| {
            let name = t.fill(database, &id, &value)?;
            if name.chars().count() > MAX_LOCK_NAME {
                return Err(format!(
                    "the name {name:?} is {} characters, beyond the server's {MAX_LOCK_NAME}",
                    name.chars().count()
                ));
            }
            Ok(name)
        })
        .collect()
}

/// The row's named lock, from what the page's table says.
fn weigh(at: &Reading<'_>, t: &NamedTable) -> NamedLock {
    if let Some(why) = &t.error {
        return NamedLock::Unreadable(why.clone());
    }
    let names = match names_of(at.w, at.row, &t.database) {
        Ok(n) => n,
        Err(why) => return NamedLock::Unusable(why),
    };
    let mut all_free = true;
    for name in &names {
        if t.youngest.get(name).is_some_and(|id| id != at.id()) {
            all_free = false;
            continue;
        }
        match t.holders.get(name) {
            Some(Some(h)) => {
                return NamedLock::Held {
                    name: name.clone(),
                    holder: h.clone(),
                };
            }
            Some(None) => {}
            None => return NamedLock::Unreadable(format!("{name:?} was not asked about")),
        }
    }
    if all_free {
        NamedLock::Free
    } else {
        NamedLock::Shared
    }
}

impl Source for NamedLockSource {
    /// What the server said of the row's names when its page was read (a fact about now,
    /// read again with the page's snapshot before a write).
    fn read_now(&self, at: &Reading<'_>, e: &mut Evidence) {
        e.named = match (&at.scene.snapshot.named, at.w.db_lock.is_empty()) {
            (_, true) => NamedLock::NotConfigured,
            (Some(t), false) => weigh(at, t),
            (None, false) => NamedLock::Unreadable("the server was not asked".into()),
        };
    }

    fn render(&self, e: &Evidence, out: &mut Rendered) {
        let (state, human, aside): (&'static str, Human, Option<String>) = match &e.named {
            NamedLock::NotConfigured => return,
            NamedLock::Held { name, holder } => (
                "held",
                Human::Same,
                Some(format!("{name} by {}", holder.describe())),
            ),
            NamedLock::Free => ("free", Human::Same, None),
            NamedLock::Shared => (
                "shared",
                Human::Words("a younger running row shares its name: neutral"),
                None,
            ),
            NamedLock::Unusable(why) => ("unusable", Human::Same, Some(why.clone())),
            NamedLock::Unreadable(why) => ("unreadable", Human::Same, Some(why.clone())),
        };
        out.record.db_lock = Some(state.into());
        out.record.db_lock_holder = match &e.named {
            NamedLock::Held { holder, .. } => Some(holder.clone()),
            _ => None,
        };
        let value = match &e.named {
            NamedLock::Held { holder, .. } => {
                Value::Named("held", format!("connection {}", holder.connection))
            }
            _ => Value::Word(state),
        };
        out.items.push(Item {
            key: "db_lock",
            value,
            word: "named lock",
            human,
            aside,
        });
    }

    fn words(&self, e: &Evidence, d: &Decision, out: &mut Vec<String>) {
        let named = matches!(
            d.basis,
            Basis::NamedLockFree | Basis::StaleButNamedLockHeld | Basis::NamedLockHeld
        );
        if named {
            return;
        }
        out.extend(match &e.named {
            NamedLock::Held { holder, .. } => Some(format!(
                "named lock held by connection {}",
                holder.connection
            )),
            NamedLock::Free => Some("named lock free".into()),
            NamedLock::Unusable(_) => Some("named lock unusable".into()),
            _ => None,
        });
    }

    fn applies(&self, w: &Watch) -> bool {
        !w.db_lock.is_empty()
    }

    fn deciding(&self) -> &'static [(Verdict, Basis)] {
        &[
            (Verdict::Dead, Basis::NamedLockFree),
            (Verdict::Hung, Basis::StaleButNamedLockHeld),
        ]
    }

    fn widest(&self, w: &Watch, basis: &Basis, _t: Thresholds, e: &mut Evidence) {
        e.named = match (w.db_lock.is_empty(), basis) {
            (true, _) => NamedLock::NotConfigured,
            (false, Basis::NamedLockFree) => NamedLock::Free,
            (false, _) => NamedLock::Held {
                name: "x".repeat(MAX_LOCK_NAME),
                holder: NamedHolder {
                    connection: u64::from(u32::MAX),
                    user: None,
                    host: None,
                    time_s: None,
                },
            },
        };
    }
}
