//! One validated watch: the typed [`Watch`] built from a [`RawWatch`] in two steps. First
//! every key on its own, as the key table says ([`keys::check_each`]: kind, required,
//! default); then the rules that tie keys together, which live here and only here:
//! a heartbeat source is required, `match` columns apart from the status column and from one
//! another, `max_age` above `stale_after`, the retry triple, no
//! status selfheal writes equal to `running_value`, `overtime = "manual"` needs
//! `manual_value`, `release_lock = "if_free"` needs `lock_file`, and `success_values`
//! apart from the statuses selfheal writes.
//!
//! Every error names where the key came from: `watch 'NAME': key` in the file, or the flag
//! on the command line. Pure: no I/O.

use std::collections::HashSet;
use std::time::Duration;

use super::keys::{self, FromValue, Key, Problem, RawWatch, Value};
use super::lockname::LockTemplate;
use super::values::{Ident, PathTemplate, fmt_duration};
use crate::error::{Error, Origin, Result};

/// What to do with a row that ran past `max_age`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overtime {
    MarkDead,
    Manual,
    Report,
}

impl FromValue for Overtime {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Word("mark_dead") => Some(Overtime::MarkDead),
            Value::Word("manual") => Some(Overtime::Manual),
            Value::Word("report") => Some(Overtime::Report),
            _ => None,
        }
    }
}

/// Whether selfheal may remove a job's lock file (never while it may be held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseLock {
    Never,
    IfFree,
}

impl FromValue for ReleaseLock {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Word("never") => Some(ReleaseLock::Never),
            Value::Word("if_free") => Some(ReleaseLock::IfFree),
            _ => None,
        }
    }
}

/// The retry budget of a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub value: String,
    pub attempts_column: Ident,
    pub max_attempts: u32,
}

/// One validated watch.
#[derive(Debug, Clone)]
pub struct Watch {
    pub name: String,
    /// Only act on this host (heartbeat files and pids are host-local).
    pub host: Option<String>,
    pub table: Ident,
    /// `match`: only rows whose column equals the value (bound as text), in column order.
    /// Empty: every row of the table.
    pub matches: Vec<(Ident, String)>,
    pub id_column: Ident,
    pub status_column: Ident,
    pub running_value: String,
    /// DATETIME/TIMESTAMP or integer unix seconds.
    pub started_column: Ident,
    pub heartbeat_file: Option<PathTemplate>,
    pub heartbeat_column: Option<Ident>,
    /// A heartbeat older than this is not beating.
    pub stale_after: Duration,
    /// Absolute cap on total runtime.
    pub max_age: Duration,
    pub dead_value: String,
    pub ended_column: Option<Ident>,
    pub message_column: Option<Ident>,
    /// The job's own lock: probed, never deleted (unless `release_lock = if_free`).
    pub lock_file: Option<PathTemplate>,
    /// `HOST:PID` or `PID` of the worker that claimed the row.
    pub owner_column: Option<Ident>,
    /// The worker's host and pid in two columns (both or neither; not beside
    /// `owner_column`): read as `HOST:PID` (`docs/design.md#evidence-kinds`).
    pub owner_split: Option<(Ident, Ident)>,
    /// The names of the MySQL/MariaDB user-level lock the job holds for its whole run:
    /// held if any is held, free only if all are (`docs/design.md#named-lock`). Empty:
    /// none.
    pub db_lock: Vec<LockTemplate>,
    pub manual_value: Option<String>,
    pub retry: Option<Retry>,
    /// Set to "not before" when a row goes back to the queue (`retry_value`): the
    /// database's now plus [`Watch::retry_delay`] (docs/design.md#lease). Needs `retry_value`.
    pub retry_at_column: Option<Ident>,
    /// The wait before the first retry, doubled per attempt; default 1 minute.
    pub retry_backoff: Duration,
    /// The longest wait before a retry; default 1 hour.
    pub retry_backoff_max: Duration,
    /// The job's execution record (`selfheal run --report`), shown by `selfheal show`;
    /// may contain `{id}`. Read only, never written.
    pub report_file: Option<PathTemplate>,
    pub overtime: Overtime,
    pub release_lock: ReleaseLock,
    /// Statuses the job itself writes when a run ends well: their start-to-end times are
    /// the real runtimes `stats` and the `max_age` warning measure, and a row selfheal
    /// marked that later shows one of them was a false positive. `None`: every status but
    /// the running, dead, manual and retry values.
    pub success_values: Option<Vec<String>>,
    /// Consecutive real runs an inferred verdict (dead on heartbeat silence alone, hung)
    /// must hold for the same row before it acts; 1 acts at once (docs/design.md#whole-watch-holds).
    pub confirm: u32,
}

impl Watch {
    /// The watch reads the worker's `HOST:PID`: from `owner_column`, or from
    /// `owner_host_column` and `owner_pid_column`.
    pub fn has_owner(&self) -> bool {
        self.owner_column.is_some() || self.owner_split.is_some()
    }

    /// The columns the `db_lock` templates read, each once, in order of first use.
    pub fn lock_columns(&self) -> Vec<&Ident> {
        let mut out: Vec<&Ident> = Vec::new();
        for c in self.db_lock.iter().flat_map(LockTemplate::columns) {
            if !out.iter().any(|o| o.same_column(c)) {
                out.push(c);
            }
        }
        out
    }

    /// How long a row a reclaim sends to `retry_value` waits before it is picked again
    /// (docs/design.md#lease): `retry_backoff × 2^(attempts − 1)`, at most `retry_backoff_max`, where
    /// `attempts` is the count after this reclaim raised it; the base alone without one.
    /// Whole seconds. Pure.
    pub fn retry_delay(&self, attempts: Option<i64>) -> u64 {
        let base = self.retry_backoff.as_secs();
        let max = self.retry_backoff_max.as_secs();
        let doublings = attempts.map_or(0, |a| a.saturating_sub(1).clamp(0, 63));
        let factor = 1u64.checked_shl(u32::try_from(doublings).unwrap_or(63));
        factor
            .and_then(|f| base.checked_mul(f))
            .map_or(max, |d| d.min(max))
    }

    /// True when a finished row with this status ended the way its job meant it to.
    pub fn is_success(&self, status: &str) -> bool {
        match &self.success_values {
            Some(v) => v.iter().any(|s| s == status),
            None => {
                status != self.running_value
                    && status != self.dead_value
                    && self.manual_value.as_deref() != Some(status)
                    && self.retry.as_ref().map(|r| r.value.as_str()) != Some(status)
            }
        }
    }
}

/// Where a watch's keys came from, to name them in errors.
struct Place<'a> {
    file: &'a Origin,
    watch: &'a str,
    /// Keys given as flags.
    from_flags: &'a HashSet<&'static str>,
}

impl Place<'_> {
    /// The origin and key an error about `name` points at.
    fn at(&self, name: &str) -> (Origin, String) {
        if self.from_flags.contains(name) {
            let flag = keys::watch_key(name).map_or_else(|| name.to_string(), Key::flag_spelling);
            (Origin::CommandLine, flag)
        } else {
            (self.file.clone(), format!("watch '{}': {name}", self.watch))
        }
    }

    fn err(&self, name: &str, msg: impl Into<String>) -> Error {
        let (o, k) = self.at(name);
        Error::config(&o, k, msg)
    }

    fn problem(&self, key: &Key, problem: Problem) -> Error {
        match problem {
            Problem::Invalid(msg) => self.err(key.name, msg),
            Problem::Missing => {
                let (o, k) = self.at(key.name);
                // A watch described with flags is completed with flags.
                let hint = match key.flag {
                    Some(_) if o == Origin::CommandLine || self.from_flags.contains("table") => {
                        format!(" (or {})", key.flag_spelling())
                    }
                    _ => String::new(),
                };
                Error::config(&o, k, format!("missing: this key is required{hint}"))
            }
        }
    }
}

/// The checked keys, read as the types the `Watch` fields have.
struct Typed<'a> {
    values: keys::Checked,
    at: &'a Place<'a>,
}

impl Typed<'_> {
    fn get<T: FromValue>(&self, name: &str) -> Result<Option<T>> {
        match self.values.get(name) {
            None => Ok(None),
            Some(v) => T::from_value(v).map(Some).ok_or_else(|| {
                self.at.err(
                    name,
                    format!(
                        "internal: the key table gives {v:?}, not a {}",
                        std::any::type_name::<T>()
                    ),
                )
            }),
        }
    }

    /// A required key, or one with a default.
    fn need<T: FromValue>(&self, name: &str) -> Result<T> {
        match (self.get(name)?, keys::watch_key(name)) {
            (Some(v), _) => Ok(v),
            (None, Some(key)) => Err(self.at.problem(key, Problem::Missing)),
            (None, None) => Err(self.at.err(name, "internal: not a watch key")),
        }
    }
}

/// Validates one watch: each key on its own, then the rules between keys. `from_flags`
/// names the keys given on the command line (their errors name the flag).
pub(super) fn validate(
    raw: &RawWatch,
    file: &Origin,
    from_flags: &HashSet<&'static str>,
) -> Result<Watch> {
    let at = Place {
        file,
        watch: raw.text("name").unwrap_or_default(),
        from_flags,
    };
    let v = Typed {
        values: keys::check_each(raw)
            .map_err(|(key, p)| at.problem(key, p).with_fix(unit_fix(raw, key, &at)))?,
        at: &at,
    };
    let w = Watch {
        name: v.need("name")?,
        host: v.get("host")?,
        table: v.need("table")?,
        matches: v.get("match")?.unwrap_or_default(),
        id_column: v.need("id_column")?,
        status_column: v.need("status_column")?,
        running_value: v.need("running_value")?,
        started_column: v.need("started_column")?,
        heartbeat_file: v.get("heartbeat_file")?,
        heartbeat_column: v.get("heartbeat_column")?,
        stale_after: v.need("stale_after")?,
        max_age: v.need("max_age")?,
        dead_value: v.need("dead_value")?,
        ended_column: v.get("ended_column")?,
        message_column: v.get("message_column")?,
        lock_file: v.get("lock_file")?,
        owner_column: v.get("owner_column")?,
        owner_split: owner_split(&v)?,
        db_lock: v.get("db_lock")?.unwrap_or_default(),
        manual_value: v.get("manual_value")?,
        retry: retry_budget(&v)?,
        retry_at_column: v.get("retry_at_column")?,
        retry_backoff: v.need("retry_backoff")?,
        retry_backoff_max: v.need("retry_backoff_max")?,
        report_file: v.get("report_file")?,
        overtime: v.need("overtime")?,
        release_lock: v.need("release_lock")?,
        success_values: v.get("success_values")?,
        confirm: v.need("confirm")?,
    };
    cross_key_rules(&w, &at)?;
    Ok(w)
}

/// The fix for `stale_after` or `max_age` written as a number alone (`"90"`): the
/// readings with a unit that every rule accepts — at least a second, and `max_age` above
/// `stale_after` — so the fix never names a value that is then refused. `None` for any
/// other problem.
fn unit_fix(raw: &RawWatch, key: &Key, at: &Place) -> Option<String> {
    let value = raw.text(key.name)?;
    let readings = super::values::unit_readings(value);
    if readings.is_empty() {
        return None;
    }
    let other = |name: &str| {
        raw.text(name)
            .and_then(|s| super::values::parse_duration(s).ok())
    };
    let (fits, rule): (Box<dyn Fn(Duration) -> bool>, String) = match key.name {
        "max_age" => match other("stale_after") {
            Some(s) => (
                Box::new(move |d| d > s),
                format!("above stale_after ({})", fmt_duration(s)),
            ),
            None => (Box::new(|_| true), String::new()),
        },
        "stale_after" => match other("max_age") {
            Some(m) => (
                Box::new(move |d| d < m),
                format!("below max_age ({})", fmt_duration(m)),
            ),
            None => (Box::new(|_| true), String::new()),
        },
        _ => (Box::new(|_| true), String::new()),
    };
    let good: Vec<String> = readings
        .into_iter()
        .filter(|(_, d)| fits(*d))
        .map(|(text, _)| text)
        .collect();
    let (origin, _) = at.at(key.name);
    let flag = origin == Origin::CommandLine;
    let write = |v: &str| {
        if flag {
            format!("{} {v}", key.flag_spelling())
        } else {
            format!("{} = \"{v}\"", key.name)
        }
    };
    let alt = |v: &String| if flag { v.clone() } else { format!("\"{v}\"") };
    Some(match good.split_first() {
        Some((first, [])) => format!("write {}: a number needs its unit", write(first)),
        Some((first, rest)) => format!(
            "write {} (or {}), whichever you meant: a number needs its unit",
            write(first),
            rest.iter().map(alt).collect::<Vec<_>>().join(" or ")
        ),
        None => format!("give {} a unit (s, m, h or d) and a value {rule}", key.name),
    })
}

/// `retry_value`, `attempts_column` and `max_attempts` go together.
fn retry_budget(v: &Typed) -> Result<Option<Retry>> {
    let value = v.get::<String>("retry_value")?;
    let attempts_column = v.get::<Ident>("attempts_column")?;
    let max_attempts = v.get::<u32>("max_attempts")?;
    match (value, attempts_column, max_attempts) {
        (None, None, None) => Ok(None),
        (Some(value), Some(attempts_column), Some(max_attempts)) => Ok(Some(Retry {
            value,
            attempts_column,
            max_attempts,
        })),
        (rv, ac, ma) => {
            let missing: Vec<&str> = [
                ("retry_value", rv.is_none()),
                ("attempts_column", ac.is_none()),
                ("max_attempts", ma.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(k, _)| *k)
            .collect();
            Err(v.at.err(
                "retry_value",
                format!(
                    "retries need retry_value, attempts_column and max_attempts together; missing: {}",
                    missing.join(", ")
                ),
            ))
        }
    }
}

/// `owner_host_column` and `owner_pid_column`: both, or neither.
fn owner_split(v: &Typed<'_>) -> Result<Option<(Ident, Ident)>> {
    match (
        v.get::<Ident>("owner_host_column")?,
        v.get::<Ident>("owner_pid_column")?,
    ) {
        (Some(h), Some(p)) => Ok(Some((h, p))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(v.at.err(
            "owner_host_column",
            "needs owner_pid_column too: the worker's host and pid are read together",
        )),
        (None, Some(_)) => Err(v.at.err(
            "owner_pid_column",
            "needs owner_host_column too: the worker's host and pid are read together (a \
             column of bare pids is owner_column)",
        )),
    }
}

/// The rules between keys, on the typed watch.
fn cross_key_rules(w: &Watch, at: &Place) -> Result<()> {
    if w.heartbeat_file.is_none()
        && w.heartbeat_column.is_none()
        && w.db_lock.is_empty()
        && w.lock_file.is_none()
    {
        return Err(at.err(
            "heartbeat_file",
            "no heartbeat source: set heartbeat_file (a file the job touches), \
             heartbeat_column (a column it updates), lock_file (a file it locks for its \
             whole run) or db_lock (a named lock it holds); age alone is not liveness",
        ));
    }
    if w.owner_split.is_some() && w.owner_column.is_some() {
        return Err(at.err(
            "owner_host_column",
            "give either owner_column (HOST:PID) or owner_host_column with owner_pid_column, \
             not both",
        ));
    }
    let mut seen: Vec<&Ident> = Vec::new();
    for (col, _) in &w.matches {
        if col.same_column(&w.status_column) {
            return Err(at.err(
                "match",
                format!(
                    "{col} is the status_column: running rows are those where it is \
                     running_value ({:?}); match on another column",
                    w.running_value
                ),
            ));
        }
        if seen.iter().any(|c| c.same_column(col)) {
            return Err(at.err(
                "match",
                format!("{col} is named twice (column names ignore case)"),
            ));
        }
        seen.push(col);
    }
    if w.max_age <= w.stale_after {
        return Err(at.err(
            "max_age",
            format!(
                "must be greater than stale_after ({}), got {}; max_age is a backstop well \
                 above the longest real run",
                fmt_duration(w.stale_after),
                fmt_duration(w.max_age)
            ),
        ));
    }
    // The statuses selfheal writes, each named by its key.
    let own = [
        ("dead_value", Some(w.dead_value.as_str())),
        ("manual_value", w.manual_value.as_deref()),
        ("retry_value", w.retry.as_ref().map(|r| r.value.as_str())),
    ];
    for (key, v) in own {
        if v == Some(w.running_value.as_str()) {
            return Err(at.err(
                key,
                format!("must differ from running_value ({:?})", w.running_value),
            ));
        }
    }
    if w.overtime == Overtime::Manual && w.manual_value.is_none() {
        return Err(at.err(
            "overtime",
            "overtime = \"manual\" needs manual_value (the status a person looks for)",
        ));
    }
    if w.retry_at_column.is_some() && w.retry.is_none() {
        return Err(at.err(
            "retry_at_column",
            "retry_at_column needs retry_value (with attempts_column and max_attempts): it is \
             set when a row goes back to the queue",
        ));
    }
    if w.retry_backoff_max < w.retry_backoff {
        return Err(at.err(
            "retry_backoff_max",
            format!(
                "must be at least retry_backoff ({}), got {}",
                fmt_duration(w.retry_backoff),
                fmt_duration(w.retry_backoff_max)
            ),
        ));
    }
    if w.release_lock == ReleaseLock::IfFree && w.lock_file.is_none() {
        return Err(at.err("release_lock", "release_lock = \"if_free\" needs lock_file"));
    }
    for s in w.success_values.iter().flatten() {
        let not_success = [("running_value", Some(w.running_value.as_str()))]
            .into_iter()
            .chain(own);
        if let Some((k, _)) = not_success
            .into_iter()
            .find(|(_, v)| *v == Some(s.as_str()))
        {
            return Err(at.err(
                "success_values",
                format!(
                    "{s:?} is the {k}: a row with it did not end well on its own \
                     (selfheal writes it, or it is still running)"
                ),
            ));
        }
    }
    Ok(())
}
