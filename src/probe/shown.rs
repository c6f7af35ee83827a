//! How a row's evidence is shown: [`Rendered`], made once per row by
//! [`crate::evidence::render`] from each source's part ([`super::Source::render`]) — the
//! items of `--explain` ([`Item`]), the [`Record`] the JSON row and the journal entry carry
//! under its names, and who a held lock's file names ([`LockHolder`]). Pure.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::clock::human;

/// The evidence as programs read it: flattened into the JSON row (docs/design.md#json-row) and into the
/// journal entry, under these names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    pub total_age_s: Option<u64>,
    /// How far the row's times lie in the future, when they do (its age is then unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead_s: Option<u64>,
    pub heartbeat_age_s: Option<u64>,
    /// `present`, `missing`, `before_row` (only a beat older than the row: an earlier
    /// row's; counts as missing), or `unreadable: why`.
    pub heartbeat: Cow<'static, str>,
    /// `none`, `held`, `free` (a try-lock got it), `free_unconfirmed` (`/proc/locks`
    /// shows no holder), `present`, `absent`, `unreadable`.
    pub lock: Cow<'static, str>,
    pub lock_pid: Option<u32>,
    /// `none`, `empty`, `alive`, `dead`, `reused`, `remote`, `not_visible`, `invalid`,
    /// `unreadable`.
    pub owner: Cow<'static, str>,
    pub owner_pid: Option<u32>,
    /// The named database lock (`db_lock`): `held`, `free`, `shared` (a younger running
    /// row shares its name: neutral), `unusable`, `unreadable`; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_lock: Option<Cow<'static, str>>,
    /// Who holds it: `connection`, and where the process list shows them `user`, `host`
    /// and `time_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_lock_holder: Option<crate::decide::NamedHolder>,
}

/// The holder a held lock's file names (its `HOST:PID START` line), as the JSON row gives
/// it (`lock_holder`, `null` without one): `host` as the file has it (JSON escapes it),
/// the process's `pid`, and `since`, RFC 3339 UTC. `pid` may differ from `lock_pid`: for
/// `selfheal run`, `/proc/locks` gives the wrapper that took the lock, the line its
/// command. The journal entry does not carry it (its row message names the holder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub host: String,
    pub pid: u32,
    pub since: String,
}

/// A value as `--explain` writes it (where it is not a duration); formatted only where it
/// is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `missing`, `free`, `none`.
    Word(&'static str),
    /// Seconds: `2820s`.
    Secs(u64),
    /// A state and its pid: `held:4242`.
    Pid(&'static str, u32),
    /// A state and a name: `remote:web2`.
    Named(&'static str, String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Word(w) => f.write_str(w),
            Value::Secs(s) => write!(f, "{s}s"),
            Value::Pid(w, pid) => write!(f, "{w}:{pid}"),
            Value::Named(w, name) => write!(f, "{w}:{name}"),
        }
    }
}

/// How `--explain` writes a value; formatted only when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Human {
    /// The [`Value`] as it is: `held:4242`.
    Same,
    /// A duration: `47m`.
    Duration(u64),
    /// A duration before now: `47m ago`.
    Ago(u64),
    /// A beat older than the row: `missing (last beat 2h0m ago, before this row started)`.
    BeforeRow(u64),
    /// Words of their own: `free (not confirmed)`.
    Words(&'static str),
    /// Times in the future: `unknown: its times are 8h0m in the future (seen for 2m)`.
    Ahead { by_s: u64, seen_s: u64 },
}

/// One piece of evidence as people read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Its name: `heartbeat_age`, `lock`.
    pub key: &'static str,
    /// Its value: `2820s`, `held:4242`, `missing`.
    pub value: Value,
    /// Its word in `--explain` (`heartbeat`), and its value there.
    pub word: &'static str,
    pub human: Human,
    /// Said after the value in `--explain`, in parentheses: who the lock file names.
    pub aside: Option<String>,
}

impl Item {
    /// Its value in `--explain`: `47m ago`, `held:4242`.
    pub fn human(&self) -> String {
        let value = self.value_human();
        match &self.aside {
            Some(a) => format!("{value} ({a})"),
            None => value,
        }
    }

    fn value_human(&self) -> String {
        match self.human {
            Human::Same => self.value.to_string(),
            Human::Duration(a) => human(a),
            Human::Ago(a) => format!("{} ago", human(a)),
            Human::BeforeRow(a) => format!(
                "missing (last beat {} ago, before this row started: an earlier row's)",
                human(a)
            ),
            Human::Words(w) => w.to_string(),
            Human::Ahead { by_s, seen_s } => format!(
                "unknown: its times are {} in the future (seen running for {})",
                human(by_s),
                human(seen_s)
            ),
        }
    }
}

/// The one rendering of a row's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// In the order of the sources ([`super::SHOWN`]): the row's age first.
    pub items: Vec<Item>,
    pub record: Record,
    pub lock_holder: Option<LockHolder>,
}

impl Rendered {
    /// The evidence part of an `--explain` row: `running 47m, heartbeat 47m ago, lock
    /// free, owner none`.
    pub fn explain(&self) -> String {
        self.items
            .iter()
            .map(|i| format!("{} {}", i.word, i.human()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
