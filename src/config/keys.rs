//! The `[[watch]]` keys, each defined once in [`WATCH_KEYS`]: its TOML key, its `check`
//! flag with the flag's value name, its help line, its default, and what its value must be.
//! Everything that treats watch keys one at a time reads this table: the TOML reader
//! ([`RawWatch`]), the flags `cli` builds for `check`, the per-key validation
//! ([`check_each`]) and the documentation tests (man page, example configuration,
//! `check --help`). Rules that tie several keys together are not here: they are in
//! `config/watch.rs`, next to the typed `Watch` they produce.
//!
//! Adding a watch key: a row here, the field of `Watch` it fills (one line in
//! `watch::validate`), its tests (`samples()` in `config/tests.rs` wants a value for every
//! key) and its documentation (`tests/docs.rs` fails until the man page, the example
//! configuration and `check --help` have it); the flag, the TOML key, the default and the
//! per-key validation follow from the row. A list of values
//! is a [`Kind::List`] (a TOML array; the flag repeats), an inline table such as
//! `{ column = value, … }` a [`Kind::Map`] (the flag repeats as `--flag KEY=VALUE`).
//!
//! Pure: no I/O. Values from the file or the command line are only read here, never
//! spliced anywhere: identifiers are validated, statuses stay bound parameters downstream.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::lockname::LockTemplate;
use super::values::{Ident, PathTemplate, parse_duration};

/// What a key's value must be. The kind also fixes how the value is written (its
/// [`Shape`]): a TOML string, integer, array or inline table, and a flag that takes one
/// value or repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A watch name: letters, digits, `_`, `-` and `.`, at most 64.
    WatchName,
    /// A host name: not empty, no white space.
    HostName,
    /// A table identifier: a plain name or `database.table`.
    Table,
    /// A column identifier: a plain name.
    Column,
    /// A status value the job's table holds: not empty, at most 255 bytes.
    Status,
    /// A positive duration in humantime syntax (`90s`, `5m`, `1h 30m`).
    Duration,
    /// An absolute path that may contain `{id}`.
    Path,
    /// A named database lock's name template (`{column}`, `{id}`, `{database}`,
    /// `{md5:TEXT}`).
    LockName,
    /// One of these words.
    Word(&'static [&'static str]),
    /// A whole number from `min` to `max` (a TOML integer).
    Int { min: i64, max: i64 },
    /// A non-empty list of values of the `item` kind (a TOML array; the flag repeats).
    /// `empty` is the message for an empty list.
    List {
        item: &'static Kind,
        empty: &'static str,
    },
    /// A non-empty inline table (`{ a = 1, b = "x" }`) whose keys are of the `key` kind and
    /// whose values are of the `value` kind (the flag repeats as `KEY=VALUE`). `empty` is the
    /// message for an empty table.
    Map {
        key: &'static Kind,
        value: &'static Kind,
        empty: &'static str,
    },
}

/// How a value is written: what the TOML reader accepts and what the flag parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A string (a flag's value as given).
    Text,
    /// An integer (a flag's value parsed as one).
    Int,
    /// An array of the item kind's shape (a flag given once per item).
    List(&'static Kind),
    /// An inline table with values of the value kind's shape (a flag given once per
    /// `KEY=VALUE`).
    Map(&'static Kind),
}

/// Whether a key must be given, and what it is when it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Must be given, in the file or as a flag.
    Required,
    /// May be left out: the watch goes without it.
    Optional,
    /// Left out, it has this value (validated like a given one).
    Default(Lit),
}

/// A default value, as it would be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lit {
    Text(&'static str),
    Int(i64),
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Text(s) => f.write_str(s),
            Lit::Int(n) => write!(f, "{n}"),
        }
    }
}

/// A key's flag on `check`: `--{long} <{value_name}>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub long: &'static str,
    pub value_name: &'static str,
}

/// One `[[watch]]` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The TOML key; also how errors and the rest of the program name it.
    pub name: &'static str,
    pub kind: Kind,
    pub need: Requirement,
    /// `None`: the key can only be set in the file.
    pub flag: Option<Flag>,
    /// One line: the flag's help in `check --help`.
    pub help: &'static str,
}

#[allow(clippy::unnecessary_wraps)] // fills the rows' `flag: Option<Flag>`, one call a row
const fn flag(long: &'static str, value_name: &'static str) -> Option<Flag> {
    Some(Flag { long, value_name })
}

const fn text(default: &'static str) -> Requirement {
    Requirement::Default(Lit::Text(default))
}

use Kind::{Column, Path, Status, Table, WatchName};
use Requirement::{Optional, Required};

/// Every `[[watch]]` key, in the order of the file's documentation and of `check --help`.
pub const WATCH_KEYS: &[Key] = &[
    Key {
        name: "name",
        kind: WatchName,
        need: Required,
        flag: flag("name", "NAME"),
        help: "Name of the watch given with flags [default: the table name]",
    },
    Key {
        name: "host",
        kind: Kind::HostName,
        need: Optional,
        flag: None,
        help: "Only act on this host: heartbeat files and pids are host-local",
    },
    Key {
        name: "table",
        kind: Table,
        need: Required,
        flag: flag("table", "TABLE"),
        help: "Job table (table or database.table)",
    },
    Key {
        name: "match",
        kind: Kind::Map {
            key: &Column,
            value: &Status,
            empty: "expected at least one column = \"value\", e.g. { job = \"full-sync\" }; \
                    leave the key out to take every running row of the table",
        },
        need: Optional,
        flag: flag("match", "COLUMN=VALUE"),
        help: "Only rows whose COLUMN equals VALUE (repeatable): one watch per job kind in one \
               table",
    },
    Key {
        name: "id_column",
        kind: Column,
        need: text("id"),
        flag: flag("id-column", "COLUMN"),
        help: "Id column [default: id]",
    },
    Key {
        name: "status_column",
        kind: Column,
        need: text("status"),
        flag: flag("status-column", "COLUMN"),
        help: "Status column [default: status]",
    },
    Key {
        name: "running_value",
        kind: Status,
        need: text("running"),
        flag: flag("running-value", "VALUE"),
        help: "Status value of a running row [default: running]",
    },
    Key {
        name: "started_column",
        kind: Column,
        need: Required,
        flag: flag("started-column", "COLUMN"),
        help: "Start time column (DATETIME, TIMESTAMP or unix seconds)",
    },
    Key {
        name: "heartbeat_file",
        kind: Path,
        need: Optional,
        flag: flag("heartbeat-file", "PATH"),
        help: "Heartbeat file; may contain {id}",
    },
    Key {
        name: "heartbeat_column",
        kind: Column,
        need: Optional,
        flag: flag("heartbeat-column", "COLUMN"),
        help: "Heartbeat (lease) column",
    },
    Key {
        name: "stale_after",
        kind: Kind::Duration,
        need: Required,
        flag: flag("stale-after", "DURATION"),
        help: "A heartbeat older than this is not beating (e.g. 5m)",
    },
    Key {
        name: "max_age",
        kind: Kind::Duration,
        need: Required,
        flag: flag("max-age", "DURATION"),
        help: "Absolute cap on total runtime (e.g. 4h)",
    },
    Key {
        name: "dead_value",
        kind: Status,
        need: text("error"),
        flag: flag("dead-value", "VALUE"),
        help: "Status for dead rows [default: error]",
    },
    Key {
        name: "ended_column",
        kind: Column,
        need: Optional,
        flag: flag("ended-column", "COLUMN"),
        help: "Column set to the database's NOW() on a change",
    },
    Key {
        name: "message_column",
        kind: Column,
        need: Optional,
        flag: flag("message-column", "COLUMN"),
        help: "Column that receives the reason",
    },
    Key {
        name: "lock_file",
        kind: Path,
        need: Optional,
        flag: flag("lock-file", "PATH"),
        help: "The job's own lock file (a kernel lock held for the whole run): probed, never \
               deleted unless --release-lock if_free; may contain {id}",
    },
    Key {
        name: "owner_column",
        kind: Column,
        need: Optional,
        flag: flag("owner-column", "COLUMN"),
        help: "Column holding HOST:PID or PID of the worker",
    },
    Key {
        name: "owner_host_column",
        kind: Column,
        need: Optional,
        flag: flag("owner-host-column", "COLUMN"),
        help: "Column holding the worker's host, beside owner_pid_column (instead of \
               owner_column)",
    },
    Key {
        name: "owner_pid_column",
        kind: Column,
        need: Optional,
        flag: flag("owner-pid-column", "COLUMN"),
        help: "Column holding the worker's pid, beside owner_host_column",
    },
    Key {
        name: "db_lock",
        kind: Kind::List {
            item: &Kind::LockName,
            empty: "expected at least one lock name, e.g. \"{database}|CRON_{md5:index_{job_code}}\"; \
                    leave the key out when the job takes no named lock",
        },
        need: Optional,
        flag: flag("db-lock", "TEMPLATE"),
        help: "Name of the MySQL/MariaDB lock (GET_LOCK) the job holds for its whole run, with \
               {column}, {id}, {database} and {md5:TEXT} (repeatable: any of them)",
    },
    Key {
        name: "manual_value",
        kind: Status,
        need: Optional,
        flag: flag("manual-value", "VALUE"),
        help: "Status for rows that need a person",
    },
    Key {
        name: "retry_value",
        kind: Status,
        need: Optional,
        flag: flag("retry-value", "VALUE"),
        help: "Status that sends a dead row back to the queue",
    },
    Key {
        name: "attempts_column",
        kind: Column,
        need: Optional,
        flag: flag("attempts-column", "COLUMN"),
        help: "Column counting reclaims",
    },
    Key {
        name: "max_attempts",
        kind: Kind::Int {
            min: 1,
            max: 1_000_000,
        },
        need: Optional,
        flag: flag("max-attempts", "N"),
        help: "Reclaims allowed before a row goes to the manual (or dead) state",
    },
    Key {
        name: "retry_at_column",
        kind: Column,
        need: Optional,
        flag: flag("retry-at-column", "COLUMN"),
        help: "Column set to \"not before\" when a row goes back to the queue: the database's \
               NOW() plus the backoff (needs retry_value)",
    },
    Key {
        name: "retry_backoff",
        kind: Kind::Duration,
        need: text("1m"),
        flag: flag("retry-backoff", "DURATION"),
        help: "Wait before the first retry, doubled per attempt (retry_at_column) [default: 1m]",
    },
    Key {
        name: "retry_backoff_max",
        kind: Kind::Duration,
        need: text("1h"),
        flag: flag("retry-backoff-max", "DURATION"),
        help: "Longest wait before a retry (retry_at_column) [default: 1h]",
    },
    Key {
        name: "report_file",
        kind: Path,
        need: Optional,
        flag: flag("report-file", "PATH"),
        help: "The job's execution record (selfheal run --report), shown by selfheal show; may \
               contain {id}",
    },
    Key {
        name: "overtime",
        kind: Kind::Word(&["mark_dead", "manual", "report"]),
        need: text("mark_dead"),
        flag: flag("overtime", "POLICY"),
        help: "What to do past max_age: mark_dead, manual or report",
    },
    Key {
        name: "release_lock",
        kind: Kind::Word(&["never", "if_free"]),
        need: text("never"),
        flag: flag("release-lock", "POLICY"),
        help: "never (default), or if_free: the lock file is a legacy existence lock; remove it \
               after marking a dead row if nobody locks it and the pid in it is gone",
    },
    Key {
        name: "confirm",
        kind: Kind::Int { min: 1, max: 1_000 },
        need: Requirement::Default(Lit::Int(2)),
        flag: flag("confirm", "N"),
        help: "Runs in a row an inferred verdict (dead on heartbeat alone, hung) must hold \
               before it acts; 1 acts at once [default: 2]",
    },
    Key {
        name: "success_values",
        kind: Kind::List {
            item: &Status,
            empty: "expected at least one status, e.g. [\"done\"]; leave the key out for the \
                    default (every status selfheal does not write itself)",
        },
        need: Optional,
        flag: flag("success-value", "VALUE"),
        help: "Status of a run that ended well (repeatable) [default: any but running, dead, \
               manual, retry]",
    },
];

/// The TOML keys of [`WATCH_KEYS`], in order (what the TOML reader lists when it meets
/// an unknown key).
pub const WATCH_KEY_NAMES: &[&str] = &{
    let mut names = [""; WATCH_KEYS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = WATCH_KEYS[i].name;
        i += 1;
    }
    names
};

/// The key named `name`.
pub fn watch_key(name: &str) -> Option<&'static Key> {
    WATCH_KEYS.iter().find(|k| k.name == name)
}

impl Key {
    /// How errors name this key when it was given on the command line.
    pub fn flag_spelling(&self) -> String {
        match self.flag {
            Some(f) => format!("--{}", f.long),
            None => self.name.to_string(),
        }
    }
}

/// Longest status value: what a VARCHAR(255) status column holds.
const MAX_STATUS_LEN: usize = 255;
/// Longest watch name.
const MAX_NAME_LEN: usize = 64;

impl Kind {
    pub fn shape(&self) -> Shape {
        match self {
            Kind::Int { .. } => Shape::Int,
            Kind::List { item, .. } => Shape::List(item),
            Kind::Map { value, .. } => Shape::Map(value),
            Kind::WatchName
            | Kind::HostName
            | Kind::Table
            | Kind::Column
            | Kind::Status
            | Kind::Duration
            | Kind::Path
            | Kind::LockName
            | Kind::Word(_) => Shape::Text,
        }
    }

    /// The value checked against this kind, or what is wrong with it.
    pub fn check(&self, raw: &Raw) -> Result<Value, String> {
        match (self, raw) {
            (Kind::List { item, empty }, Raw::List(items)) => {
                if items.is_empty() {
                    return Err((*empty).to_string());
                }
                items
                    .iter()
                    .map(|r| item.check(r))
                    .collect::<Result<_, _>>()
                    .map(Value::List)
            }
            (Kind::Map { key, value, empty }, Raw::Map(entries)) => {
                if entries.is_empty() {
                    return Err((*empty).to_string());
                }
                entries
                    .iter()
                    .map(|(k, v)| Ok((key.check_text(k)?, value.check(v)?)))
                    .collect::<Result<_, String>>()
                    .map(Value::Map)
            }
            (Kind::Int { min, max }, Raw::Int(n)) => {
                if (*min..=*max).contains(n) {
                    Ok(Value::Int(*n))
                } else {
                    Err(format!(
                        "expected a whole number from {min} to {max}, got {n}"
                    ))
                }
            }
            (_, Raw::Text(s)) if self.shape() == Shape::Text => self.check_text(s),
            (_, raw) => Err(format!("expected {}, got {raw}", self.shape())),
        }
    }

    fn check_text(&self, s: &str) -> Result<Value, String> {
        match self {
            Kind::WatchName => {
                if s.is_empty()
                    || s.len() > MAX_NAME_LEN
                    || !s
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                {
                    Err(format!(
                        "expected a name of letters, digits, _, - and . (at most \
                         {MAX_NAME_LEN}), got {s:?}"
                    ))
                } else {
                    Ok(Value::Text(s.to_string()))
                }
            }
            Kind::HostName => {
                if s.is_empty() || s.contains(char::is_whitespace) {
                    Err(format!("expected a host name, got {s:?}"))
                } else {
                    Ok(Value::Text(s.to_string()))
                }
            }
            Kind::Table => Ident::table(s).map(Value::Ident),
            Kind::Column => Ident::column(s).map(Value::Ident),
            Kind::Status => {
                if s.is_empty() {
                    Err("expected a non-empty status value".into())
                } else if s.len() > MAX_STATUS_LEN {
                    Err(format!("expected at most {MAX_STATUS_LEN} characters"))
                } else {
                    Ok(Value::Text(s.to_string()))
                }
            }
            Kind::Duration => parse_duration(s).map(Value::Duration),
            Kind::Path => PathTemplate::parse(s).map(Value::Path),
            Kind::LockName => LockTemplate::parse(s).map(Value::LockName),
            Kind::Word(words) => match words.iter().find(|w| **w == s) {
                Some(w) => Ok(Value::Word(w)),
                // Two choices read as `"a" or "b",`, more as a list; both as released.
                None if words.len() == 2 => Err(format!(
                    "expected {:?} or {:?}, got {s:?}",
                    words[0], words[1]
                )),
                None => Err(format!("expected one of {}; got {s:?}", words.join(", "))),
            },
            Kind::Int { .. } | Kind::List { .. } | Kind::Map { .. } => {
                Err(format!("expected {}, got {:?}", self.shape(), s))
            }
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::Text => "a string",
            Shape::Int => "an integer",
            Shape::List(_) => "a list",
            Shape::Map(_) => "a table",
        })
    }
}

impl Shape {
    /// One value of a flag: the flag's value, or one item of a repeated flag.
    pub fn parse_flag(&self, s: &str) -> Result<Raw, String> {
        match self {
            Shape::Text => Ok(Raw::Text(s.to_string())),
            Shape::Int => s.parse().map(Raw::Int).map_err(|e| format!("{e}")),
            Shape::List(item) => item.shape().parse_flag(s),
            Shape::Map(value) => match s.split_once('=') {
                Some((k, v)) => Ok(Raw::Map(BTreeMap::from([(
                    k.to_string(),
                    value.shape().parse_flag(v)?,
                )]))),
                None => Err(format!("expected KEY=VALUE, got {s:?}")),
            },
        }
    }

    /// True when the flag is given once per item.
    pub fn repeats(&self) -> bool {
        matches!(self, Shape::List(_) | Shape::Map(_))
    }

    /// The values of a repeated flag, each from [`Shape::parse_flag`], as one value.
    pub fn gather(&self, items: impl IntoIterator<Item = Raw>) -> Raw {
        match self {
            Shape::Map(_) => Raw::Map(
                items
                    .into_iter()
                    .flat_map(|r| match r {
                        Raw::Map(m) => m,
                        // Not from `parse_flag`: kept under an empty key, which no key
                        // kind accepts, so the check reports it.
                        other => BTreeMap::from([(String::new(), other)]),
                    })
                    .collect(),
            ),
            _ => Raw::List(items.into_iter().collect()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Raw values: as written in the file or given as flags, before validation.

/// A value as written: the shape is right (the TOML reader saw to that), the content is
/// not checked yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raw {
    Text(String),
    Int(i64),
    List(Vec<Raw>),
    Map(BTreeMap<String, Raw>),
}

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::Text(s) => write!(f, "{s:?}"),
            Raw::Int(n) => write!(f, "{n}"),
            Raw::List(items) => {
                f.write_str("[")?;
                for (i, r) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{r}")?;
                }
                f.write_str("]")
            }
            Raw::Map(entries) => {
                f.write_str("{ ")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k} = {v}")?;
                }
                f.write_str(" }")
            }
        }
    }
}

impl From<&str> for Raw {
    fn from(s: &str) -> Raw {
        Raw::Text(s.to_string())
    }
}

impl From<String> for Raw {
    fn from(s: String) -> Raw {
        Raw::Text(s)
    }
}

impl From<i64> for Raw {
    fn from(n: i64) -> Raw {
        Raw::Int(n)
    }
}

impl Lit {
    fn raw(&self) -> Raw {
        match self {
            Lit::Text(s) => Raw::Text((*s).to_string()),
            Lit::Int(n) => Raw::Int(*n),
        }
    }
}

/// One watch's keys as written: a `[[watch]]` table of the file, or the watch flags of
/// `check` (the same map, overlaid onto the file's watch). Only keys of [`WATCH_KEYS`]
/// can be in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RawWatch(BTreeMap<&'static str, Raw>);

impl RawWatch {
    pub fn get(&self, name: &str) -> Option<&Raw> {
        self.0.get(name)
    }

    /// The key's value when it is a string.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(Raw::Text(s)) => Some(s),
            _ => None,
        }
    }

    /// Sets a key of the table.
    pub fn insert(&mut self, key: &'static Key, value: Raw) {
        self.0.insert(key.name, value);
    }

    /// Sets the key named `name`; fails for a name that is not a watch key.
    pub fn set(&mut self, name: &str, value: impl Into<Raw>) -> Result<(), String> {
        let key = watch_key(name).ok_or_else(|| format!("{name:?} is not a watch key"))?;
        self.insert(key, value.into());
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> Option<Raw> {
        self.0.remove(name)
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Overlays `flags` onto this watch; returns which keys came from `flags`.
    pub fn overlay(&mut self, flags: &RawWatch) -> HashSet<&'static str> {
        let mut set = HashSet::new();
        for (k, v) in &flags.0 {
            self.0.insert(k, v.clone());
            set.insert(*k);
        }
        set
    }
}

impl<'de> Deserialize<'de> for RawWatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("RawWatch", WATCH_KEY_NAMES, WatchVisitor)
    }
}

/// Reads a `[[watch]]` table key by key. Keys and values are read through seeds so that
/// the TOML reader points its errors at the key or the value, and the messages are serde's
/// own ("unknown field …, expected one of …", "invalid type: …, expected a string").
struct WatchVisitor;

impl<'de> Visitor<'de> for WatchVisitor {
    type Value = RawWatch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct RawWatch")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawWatch, A::Error> {
        let mut out = RawWatch::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if out.0.contains_key(key.name) {
                return Err(de::Error::duplicate_field(key.name));
            }
            let value = if key.kind == Kind::Duration {
                // `stale_after = 600`: read as the text "600", whose missing unit the
                // duration's own check names, with the fix ("600s" or "600m"?).
                map.next_value_seed(DurationSeed)?
            } else {
                map.next_value_seed(ShapeSeed(key.kind.shape()))?
            };
            out.insert(key, value);
        }
        Ok(out)
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = &'static Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = &'static Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'static Key, E> {
        watch_key(v).ok_or_else(|| E::unknown_field(v, WATCH_KEY_NAMES))
    }
}

struct ShapeSeed(Shape);

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Raw;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        match self.0 {
            Shape::Text => String::deserialize(d).map(Raw::Text),
            Shape::Int => i64::deserialize(d).map(Raw::Int),
            // A lock name may be given alone or as a list of them.
            Shape::List(Kind::LockName) => d.deserialize_any(ListVisitor(Shape::Text, true)),
            Shape::List(item) => d.deserialize_seq(ListVisitor(item.shape(), false)),
            Shape::Map(value) => d.deserialize_map(MapVisitor(value.shape())),
        }
    }
}

/// A duration's value: text, or a whole number taken as its text (a number without a unit
/// is then refused with the readings it may have meant, as the text `"600"` is).
struct DurationSeed;

/// `[run]`'s durations, read as a watch's are ([`DurationSeed`]): text, or a whole number
/// taken as its text.
pub fn duration_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match DurationSeed.deserialize(d)? {
        Raw::Text(t) => Ok(Some(t)),
        _ => Ok(None),
    }
}

impl<'de> DeserializeSeed<'de> for DurationSeed {
    type Value = Raw;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for DurationSeed {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with its unit, as text (\"5m\", \"90s\", \"1h 30m\")")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Text(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Text(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw::Text(v.to_string()))
    }
}

/// A list of values of this shape; `true`: one value alone is a list of one.
struct ListVisitor(Shape, bool);

impl<'de> Visitor<'de> for ListVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        if self.1 {
            Ok(Raw::List(vec![Raw::Text(v.to_string())]))
        } else {
            Err(E::invalid_type(de::Unexpected::Str(v), &self))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ShapeSeed(self.0))? {
            items.push(item);
        }
        Ok(Raw::List(items))
    }
}

struct MapVisitor(Shape);

impl<'de> Visitor<'de> for MapVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(ShapeSeed(self.0))?;
            entries.insert(k, v);
        }
        Ok(Raw::Map(entries))
    }
}

// ---------------------------------------------------------------------------------------
// Checked values: each key on its own.

/// A value that passed its key's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Ident(Ident),
    Duration(Duration),
    Path(PathTemplate),
    LockName(LockTemplate),
    Word(&'static str),
    Int(i64),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

/// What is wrong with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A required key is not given.
    Missing,
    /// The value fails its kind's check.
    Invalid(String),
}

/// The watch's keys, each checked on its own, with defaults filled in. A key left out
/// without a default is absent.
#[derive(Debug, Clone, Default)]
pub struct Checked(BTreeMap<&'static str, Value>);

impl Checked {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }
}

/// Checks every key of the table in order, filling in defaults: the first problem, with
/// its key, or the checked values.
pub fn check_each(raw: &RawWatch) -> Result<Checked, (&'static Key, Problem)> {
    let mut out = Checked::default();
    for key in WATCH_KEYS {
        let default = match key.need {
            Requirement::Default(lit) => Some(lit.raw()),
            Requirement::Required | Requirement::Optional => None,
        };
        match raw.get(key.name).or(default.as_ref()) {
            Some(r) => {
                let v = key.kind.check(r).map_err(|m| (key, Problem::Invalid(m)))?;
                out.0.insert(key.name, v);
            }
            None if key.need == Requirement::Required => return Err((key, Problem::Missing)),
            None => {}
        }
    }
    Ok(out)
}

/// A typed value out of a [`Value`]; `None` when the value is of another kind.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Ident {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Ident(i) => Some(i.clone()),
            _ => None,
        }
    }
}

impl FromValue for Duration {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Duration(d) => Some(*d),
            _ => None,
        }
    }
}

impl FromValue for PathTemplate {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Path(p) => Some(p.clone()),
            _ => None,
        }
    }
}

impl FromValue for LockTemplate {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::LockName(t) => Some(t.clone()),
            _ => None,
        }
    }
}

impl FromValue for u32 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(n) => u32::try_from(*n).ok(),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Vec<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::List(items) => items.iter().map(T::from_value).collect(),
            _ => None,
        }
    }
}

impl<K: FromValue, V: FromValue> FromValue for Vec<(K, V)> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Map(entries) => entries
                .iter()
                .map(|(k, v)| Some((K::from_value(k)?, V::from_value(v)?)))
                .collect(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_flags_are_spelled_like_their_keys() {
        let mut names = HashSet::new();
        let mut longs = HashSet::new();
        for k in WATCH_KEYS {
            assert!(names.insert(k.name), "{} twice", k.name);
            assert!(!k.help.is_empty() && !k.help.ends_with('.'), "{}", k.name);
            if let Some(f) = k.flag {
                assert!(longs.insert(f.long), "--{} twice", f.long);
                // The flag is the key with dashes (a list's flag names one item).
                let plain = k.name.replace('_', "-");
                assert!(
                    f.long == plain || plain.strip_suffix('s') == Some(f.long),
                    "{} vs --{}",
                    k.name,
                    f.long
                );
                assert!(
                    !f.value_name.is_empty()
                        && f.value_name
                            .bytes()
                            .all(|b| b.is_ascii_uppercase() || b == b'='),
                    "{}",
                    k.name
                );
            }
        }
        assert_eq!(WATCH_KEY_NAMES.len(), WATCH_KEYS.len());
        assert!(
            WATCH_KEY_NAMES
                .iter()
                .zip(WATCH_KEYS)
                .all(|(n, k)| *n == k.name)
        );
    }

    #[test]
    fn every_default_passes_its_own_check() {
        for k in WATCH_KEYS {
            if let Requirement::Default(lit) = k.need {
                assert!(k.kind.check(&lit.raw()).is_ok(), "{}: {lit}", k.name);
            }
        }
    }

    #[test]
    fn kinds_check_values() {
        let words = Kind::Word(&["a", "b", "c"]);
        assert_eq!(words.check(&"b".into()), Ok(Value::Word("b")));
        assert_eq!(
            words.check(&"d".into()),
            Err("expected one of a, b, c; got \"d\"".into())
        );
        assert_eq!(
            Kind::Word(&["never", "if_free"]).check(&"x".into()),
            Err("expected \"never\" or \"if_free\", got \"x\"".into())
        );
        let int = Kind::Int { min: 1, max: 9 };
        assert_eq!(int.check(&Raw::Int(9)), Ok(Value::Int(9)));
        assert!(int.check(&Raw::Int(0)).is_err());
        assert_eq!(
            int.check(&"3".into()),
            Err("expected an integer, got \"3\"".into())
        );
        let list = Kind::List {
            item: &Kind::Status,
            empty: "none",
        };
        assert_eq!(list.check(&Raw::List(vec![])), Err("none".into()));
        assert_eq!(
            list.check(&Raw::List(vec!["x".into()])),
            Ok(Value::List(vec![Value::Text("x".into())]))
        );
        assert!(list.check(&Raw::List(vec!["".into()])).is_err());
        assert!(list.check(&"x".into()).is_err());
        assert!(Kind::Column.check(&Raw::Int(1)).is_err());
        assert!(Kind::HostName.check(&"web 1".into()).is_err());
        assert!(Kind::WatchName.check(&"a/b".into()).is_err());
        assert!(Kind::Status.check(&"x".repeat(256).into()).is_err());
    }

    #[test]
    fn an_inline_table_kind_reads_from_toml_and_from_repeated_flags() {
        const FILTERS: Kind = Kind::Map {
            key: &Kind::Column,
            value: &Kind::Status,
            empty: "expected at least one column = value",
        };
        let doc: toml::Table =
            toml::from_str("m = { kind = \"full\", shard = \"3\" }").expect("toml");
        let raw = ShapeSeed(FILTERS.shape())
            .deserialize(doc["m"].clone())
            .expect("a table");
        assert_eq!(raw.to_string(), "{ kind = \"full\", shard = \"3\" }");
        let flags =
            ["kind=full", "shard=3"].map(|s| FILTERS.shape().parse_flag(s).expect("KEY=VALUE"));
        assert!(FILTERS.shape().repeats());
        assert_eq!(FILTERS.shape().gather(flags), raw);
        let checked = FILTERS.check(&raw).expect("valid");
        let pairs: Vec<(Ident, String)> = FromValue::from_value(&checked).expect("pairs");
        assert_eq!(
            pairs
                .iter()
                .map(|(c, v)| format!("{c}={v}"))
                .collect::<Vec<_>>(),
            ["kind=full", "shard=3"]
        );
        assert!(FILTERS.shape().parse_flag("kind").is_err());
        assert_eq!(
            FILTERS.check(&Raw::Map(BTreeMap::new())),
            Err("expected at least one column = value".into())
        );
        let bad = Raw::Map(BTreeMap::from([("a b".to_string(), Raw::from("x"))]));
        assert!(FILTERS.check(&bad).is_err());
        let not_a_table = toml::Value::String("x".into());
        let e = ShapeSeed(FILTERS.shape())
            .deserialize(not_a_table)
            .expect_err("a string");
        assert!(e.to_string().contains("expected a map"), "{e}");
    }

    #[test]
    fn flags_parse_by_shape() {
        assert_eq!(Shape::Int.parse_flag("12"), Ok(Raw::Int(12)));
        assert_eq!(
            Shape::Int.parse_flag("three"),
            Err("invalid digit found in string".into())
        );
        let list = Kind::List {
            item: &Kind::Status,
            empty: "",
        }
        .shape();
        let items = ["a", "b"].map(|s| list.parse_flag(s).expect("text"));
        assert_eq!(list.gather(items), Raw::List(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn required_keys_are_missing_and_defaults_filled_in() {
        let mut raw = RawWatch::default();
        raw.set("name", "w").expect("key");
        let (key, problem) = check_each(&raw).expect_err("table missing");
        assert_eq!((key.name, problem), ("table", Problem::Missing));
        for (k, v) in [
            ("table", "t"),
            ("started_column", "s"),
            ("stale_after", "5m"),
            ("max_age", "4h"),
        ] {
            raw.set(k, v).expect("key");
        }
        let v = check_each(&raw).expect("valid");
        assert_eq!(v.get("overtime"), Some(&Value::Word("mark_dead")));
        assert_eq!(v.get("dead_value"), Some(&Value::Text("error".into())));
        assert_eq!(v.get("lock_file"), None);
        assert!(raw.set("no_such_key", "x").is_err());
    }
}
