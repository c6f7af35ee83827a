//! From a table's [`Mapping`] and the values its rows hold to the watches `init` proposes:
//! every key with its value and where that value came from — a column (its name, its
//! type), the statuses the rows hold, a recipe, or a guess (the thresholds: `selfheal
//! stats` is how to set them). One watch per job kind where the kinds can be told apart
//! and the evidence is per kind (a heartbeat file each job touches); one watch for the
//! whole table where each row carries its own evidence (a heartbeat column, a named
//! lock), and always for Magento's `cron_schedule`, whose hundreds of job codes one watch
//! serves. A key this selfheal does not read yet is proposed commented out, and a watch
//! left without any evidence of life is proposed commented out as a whole. Pure.

use super::recognise::{Mapping, Pick, Recipe};
use crate::store::{Column, ColumnType};

/// A value as the configuration writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Text(String),
    Int(i64),
    List(Vec<String>),
    /// An inline table (`{ job = "full-sync" }`).
    Map(Vec<(String, String)>),
}

/// One `key = value` line of the proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: &'static str,
    pub value: Val,
    /// Where the value came from: the comment beside the line.
    pub from: String,
    /// Longer words, above the line.
    pub about: Vec<String>,
    /// False: the line is printed commented out.
    pub on: bool,
}

impl Entry {
    pub fn new(key: &'static str, value: Val, from: impl Into<String>) -> Entry {
        Entry {
            key,
            value,
            from: from.into(),
            about: Vec::new(),
            on: true,
        }
    }

    fn text(key: &'static str, value: &str, from: impl Into<String>) -> Entry {
        Entry::new(key, Val::Text(value.to_string()), from)
    }

    pub fn about(mut self, words: impl Into<String>) -> Entry {
        self.about.push(words.into());
        self
    }

    pub fn off(mut self) -> Entry {
        self.on = false;
        self
    }
}

/// One proposed `[[watch]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchPlan {
    pub name: String,
    /// Paragraphs above the watch: why it is one watch or one of several, its evidence.
    pub intro: Vec<String>,
    pub entries: Vec<Entry>,
    /// False: the whole watch is printed commented out (`intro` says why).
    pub active: bool,
}

impl WatchPlan {
    /// The entry for `key`, if the watch has one.
    pub fn entry_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.key == key)
    }

    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

/// The values the table's rows hold, as counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Status, job kind (where the kind column was counted) and rows.
    pub rows: Vec<(String, Option<String>, u64)>,
    /// How they were counted, in words ("all 1,204 rows").
    pub scope: String,
    /// Every row of the table was counted.
    pub whole: bool,
}

impl Seen {
    /// Each status with its rows, the most common first.
    pub fn statuses(&self) -> Vec<(String, u64)> {
        tally(self.rows.iter().map(|(s, _, n)| (s.clone(), *n)))
    }

    /// Each job kind with its rows, the most common first (none where kinds were not
    /// counted).
    pub fn kinds(&self) -> Vec<(String, u64)> {
        tally(
            self.rows
                .iter()
                .filter_map(|(_, k, n)| k.clone().map(|k| (k, *n))),
        )
    }

    fn rows_with(&self, status: &str) -> Option<u64> {
        self.statuses()
            .into_iter()
            .find(|(s, _)| s == status)
            .map(|(_, n)| n)
    }
}

fn tally(items: impl Iterator<Item = (String, u64)>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for (k, n) in items {
        match out.iter_mut().find(|(o, _)| *o == k) {
            Some((_, m)) => *m += n,
            None => out.push((k, n)),
        }
    }
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Why no watch can be proposed for a table that has its columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoWatch {
    /// No status value says running, and the column cannot tell.
    NoRunningValue { column: String, values: Vec<String> },
    /// The status column cannot hold a status for a failed run.
    NoDeadValue {
        column: String,
        ty: String,
        widened: Option<String>,
    },
}

/// What a plan is made with, besides the table.
pub struct Ctx<'a> {
    /// The table as the configuration names it.
    pub table: &'a str,
    /// Where the table's name came from ("from --table").
    pub table_from: &'a str,
    /// Whether this selfheal reads a watch key (`db_lock`, `owner_host_column`, … may
    /// not be there yet).
    pub known: &'a dyn Fn(&str) -> bool,
}

/// The keys that give a watch evidence of life: a watch without one of them is an age
/// rule, which selfheal does not propose.
pub const LIVENESS: &[&str] = &["heartbeat_file", "heartbeat_column", "lock_file", "db_lock"];

/// At most this many job kinds get a watch each; more, and one watch takes them all.
pub const MAX_KINDS: usize = 8;

/// Where a heartbeat file is proposed when the table cannot say where the job touches
/// one: a directory that does not exist (`/nonexistent`, the home of `nobody`), so that,
/// until a person sets the path, every row is judged `unknown` and nothing is written
/// (an unusable heartbeat file is neutral evidence, never death).
pub const PLACEHOLDER_DIR: &str = "/nonexistent/selfheal-set-me";

const RUNNING_LIKE: &[&str] = &[
    "running",
    "processing",
    "in_progress",
    "inprogress",
    "started",
    "active",
    "working",
    "executing",
    "busy",
    "claimed",
];
const FAILED_LIKE: &[&str] = &[
    "error", "failed", "failure", "dead", "crashed", "aborted", "fail", "errored",
];
const SUCCESS_LIKE: &[&str] = &[
    "success",
    "succeeded",
    "done",
    "completed",
    "complete",
    "finished",
    "ok",
    "processed",
];
const MANUAL_LIKE: &[&str] = &[
    "wait_manual",
    "manual",
    "needs_review",
    "review",
    "hung",
    "parked",
    "on_hold",
    "stuck",
];
const QUEUED_LIKE: &[&str] = &["pending", "queued", "waiting", "ready", "new", "retry"];

/// A value of the status column for a part, and where it came from: the statuses the rows
/// hold, else the members of the column's ENUM.
fn choose(like: &[&str], seen: &Seen, column: &Column) -> Option<(String, String)> {
    let statuses = seen.statuses();
    for want in like {
        if let Some((s, n)) = statuses.iter().find(|(s, _)| s.eq_ignore_ascii_case(want)) {
            return Some((
                s.clone(),
                format!("from the table's statuses: {}", rows(*n, s)),
            ));
        }
    }
    if let ColumnType::Enum { members } = &column.ty {
        for want in like {
            if let Some(m) = members.iter().find(|m| m.eq_ignore_ascii_case(want)) {
                return Some((m.clone(), "a value of the column's ENUM".into()));
            }
        }
    }
    None
}

/// `done (12 rows)`, `running (1 row)`.
fn rows(n: u64, status: &str) -> String {
    format!("{status} ({})", count(n, "row"))
}

/// `1 row`, `1,204 rows`.
pub fn count(n: u64, what: &str) -> String {
    format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// `4182230` → `4,182,230`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The watches for the table.
pub fn plan(m: &Mapping, seen: &Seen, ctx: &Ctx<'_>) -> Result<Vec<WatchPlan>, NoWatch> {
    let running = running_value(m, seen)?;
    let dead = dead_value(m, seen)?;
    let base = Base {
        m,
        seen,
        ctx,
        running,
        dead,
    };
    let kinds = seen.kinds();
    let split = m.kind.as_ref().filter(|_| {
        !m.recipe.is_magento() && m.heartbeat.is_none() && (2..=MAX_KINDS).contains(&kinds.len())
    });
    Ok(match split {
        Some(kind) => {
            let mut names: Vec<String> = Vec::new();
            kinds
                .iter()
                .enumerate()
                .map(|(i, (k, n))| {
                    let name = unique_name(&watch_name(k), &names);
                    names.push(name.clone());
                    let mut w = base.watch(&name, Some((kind, k, *n, kinds.len())));
                    // Why there is a watch per kind is said once, above the first.
                    if i > 0 {
                        w.intro.remove(0);
                    }
                    w
                })
                .collect()
        }
        None => vec![base.watch(&default_name(m, ctx.table), None)],
    })
}

fn default_name(m: &Mapping, table: &str) -> String {
    if m.recipe.is_magento() {
        "magento-cron".into()
    } else {
        watch_name(table.rsplit('.').next().unwrap_or(table))
    }
}

/// A watch name from a value: letters, digits, `_`, `-` and `.`, the rest as `-`, at
/// most 64.
fn watch_name(s: &str) -> String {
    let name: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    if name.trim_matches('-').is_empty() {
        "job".into()
    } else {
        name
    }
}

fn unique_name(name: &str, taken: &[String]) -> String {
    let mut n = name.to_string();
    let mut i = 2;
    while taken.contains(&n) {
        n = format!("{name}-{i}");
        i += 1;
    }
    n
}

/// The running value: a status that says running among the rows, else in the ENUM, else
/// the default — unless the column holds codes, or an ENUM that has no such value.
fn running_value(m: &Mapping, seen: &Seen) -> Result<(String, String), NoWatch> {
    let refuse = || NoWatch::NoRunningValue {
        column: m.status.column.clone(),
        values: match &m.status_type.ty {
            ColumnType::Enum { members } => members.clone(),
            _ => seen.statuses().into_iter().map(|(s, _)| s).collect(),
        },
    };
    if let Some((v, from)) = choose(RUNNING_LIKE, seen, &m.status_type) {
        let from = match seen.rows_with(&v) {
            Some(n) => format!("from the table's statuses: {v} ({} now)", count(n, "row")),
            None => from,
        };
        return Ok((v, from));
    }
    match &m.status_type.ty {
        ColumnType::Enum { .. } | ColumnType::Integer => Err(refuse()),
        _ if !seen.statuses().is_empty()
            && seen
                .statuses()
                .iter()
                .all(|(s, _)| s.trim().parse::<i64>().is_ok()) =>
        {
            Err(refuse())
        }
        _ => Ok((
            "running".into(),
            "the default: no row says running now".into(),
        )),
    }
}

fn dead_value(m: &Mapping, seen: &Seen) -> Result<(String, String), NoWatch> {
    if m.recipe.is_magento() && m.status_type.holds("error").is_ok() {
        return Ok((
            "error".into(),
            "Magento's own status for a failed job".into(),
        ));
    }
    if let Some(found) = choose(FAILED_LIKE, seen, &m.status_type) {
        return Ok(found);
    }
    if m.status_type.holds("error").is_ok() {
        return Ok((
            "error".into(),
            "the default: no row says it failed now".into(),
        ));
    }
    Err(NoWatch::NoDeadValue {
        column: m.status.column.clone(),
        ty: m.status_type.type_text(),
        widened: m.status_type.widened(&["error"]),
    })
}

/// What every watch of the plan shares.
struct Base<'a> {
    m: &'a Mapping,
    seen: &'a Seen,
    ctx: &'a Ctx<'a>,
    running: (String, String),
    dead: (String, String),
}

impl Base<'_> {
    /// The watch named `name`; with `kind`, the one for that job kind (the kind column,
    /// its value, its rows, how many kinds there are).
    fn watch(&self, name: &str, kind: Option<(&Pick, &str, u64, usize)>) -> WatchPlan {
        let m = self.m;
        let known = self.ctx.known;
        let mut intro = self.intro(kind);
        let name_from = match kind {
            Some((k, _, _, _)) => format!("the {} of its rows", k.column),
            None if m.recipe.is_magento() => "Magento's cron".to_string(),
            None => "the table's name".to_string(),
        };
        let mut e = vec![
            Entry::text("name", name, name_from),
            Entry::text("table", self.ctx.table, self.ctx.table_from),
        ];
        if let Some((k, value, n, _)) = kind {
            e.push(Entry::new(
                "match",
                Val::Map(vec![(k.column.clone(), value.to_string())]),
                format!(
                    "the rows of {} {value} ({} counted)",
                    k.column,
                    count(n, "row")
                ),
            ));
        }
        e.push(Entry::text(
            "id_column",
            &m.id.column,
            format!("from {}", m.id.from()),
        ));
        e.push(Entry::text(
            "status_column",
            &m.status.column,
            format!("from {}", m.status.from()),
        ));
        e.push(Entry::text(
            "running_value",
            &self.running.0,
            &self.running.1,
        ));
        let mut started = Entry::text(
            "started_column",
            &m.started.column,
            format!("from {}", m.started.from()),
        );
        if let Some(caveat) = &m.started_caveat {
            started = started.about(caveat.clone());
        }
        e.push(started);
        e.extend(self.evidence(kind.map(|(_, v, _, _)| v)));
        e.extend(self.thresholds());
        e.push(Entry::text("dead_value", &self.dead.0, &self.dead.1));
        if let Some(p) = &m.ended {
            e.push(Entry::text(
                "ended_column",
                &p.column,
                format!("from {}", p.from()),
            ));
        }
        if let Some(p) = &m.message {
            e.push(Entry::text(
                "message_column",
                &p.column,
                format!("from {}", p.from()),
            ));
        }
        e.extend(self.success_values());
        e.extend(self.person_and_retries());
        if m.recipe.is_magento() {
            e.push(
                Entry::text(
                    "overtime",
                    "report",
                    "a cron job past max_age goes to a person",
                )
                .about(
                    "A job that runs past max_age is told to a person, never marked: \
                         selfheal cannot stop the process, and a row marked while its job \
                         still runs lets Magento start the job code again beside it.",
                ),
            );
        }
        for x in &mut e {
            if x.on && !known(x.key) {
                x.on = false;
                x.about.push(format!(
                    "This selfheal does not read the key {} yet: the line stays commented \
                     out until it does (selfheal(1), CONFIGURATION, lists the keys it reads).",
                    x.key
                ));
            }
        }
        let active = e.iter().any(|x| x.on && LIVENESS.contains(&x.key));
        if !active {
            intro.push(self.why_inactive());
        }
        WatchPlan {
            name: name.to_string(),
            intro,
            entries: e,
            active,
        }
    }

    /// Why the watch is one of several, or one for the whole table.
    fn intro(&self, kind: Option<(&Pick, &str, u64, usize)>) -> Vec<String> {
        let m = self.m;
        let kinds = self.seen.kinds();
        let mut out = Vec::new();
        match (kind, &m.kind) {
            (Some((k, _, _, n)), _) => out.push(format!(
                "One watch per {} ({n} seen): each job touches its own heartbeat file and \
                 may need its own thresholds. A {} not listed here is not watched: give it \
                 a watch of its own.{}",
                k.column,
                k.column,
                if self.seen.whole {
                    ""
                } else {
                    " The kinds were counted in a sample, not the whole table."
                }
            )),
            (None, Some(k)) if m.recipe.is_magento() => out.push(format!(
                "One watch for every {col}: each row is judged by its own evidence, so one \
                 watch serves every job code, and its thresholds are only backstops. A \
                 watch per {col} (match = {{ {col} = \"…\" }}) would leave every {col} not \
                 listed unwatched, and cannot sit beside a watch for the rest (two watches \
                 of one table must be told apart by match).",
                col = k.column
            )),
            (None, Some(k)) if m.heartbeat.is_some() => out.push(format!(
                "One watch for the whole table: the heartbeat is in each row, so one \
                 stale_after serves every {col}; split it with match = {{ {col} = \"…\" }} \
                 only where selfheal stats shows that a {col} needs a max_age of its own.",
                col = k.column
            )),
            (None, Some(k)) => out.push(format!(
                "One watch for the whole table: {} of {} were seen ({}), too many for a \
                 watch each.",
                kinds.len(),
                k.column,
                self.seen.scope
            )),
            (None, None) => out.push(
                "One watch for the whole table: no column tells job kinds apart.".to_string(),
            ),
        }
        out
    }

    fn why_inactive(&self) -> String {
        let m = self.m;
        match m.recipe {
            Recipe::Magento2 => "The watch is commented out: without the named lock a Magento 2 \
                                 row carries no evidence of life selfheal can read (no \
                                 heartbeat, no owner), and an age rule is what selfheal exists \
                                 to replace. Uncomment it once this selfheal reads db_lock."
                .into(),
            Recipe::Magento1 { .. } => "The watch is commented out: Magento 1's cron leaves no \
                                       evidence of life in its rows (no pid, no host, no \
                                       heartbeat) and takes no named lock, and an age rule is \
                                       what selfheal exists to replace. Aoe_Scheduler adds \
                                       host, pid and last_seen (renewed while the job's \
                                       process lives): with it, selfheal init proposes an \
                                       active watch."
                .into(),
            _ => {
                "The watch is commented out: it has no evidence of life selfheal reads yet.".into()
            }
        }
    }

    /// The evidence of life: a named lock, a heartbeat column, a heartbeat file; the
    /// owner.
    fn evidence(&self, kind: Option<&str>) -> Vec<Entry> {
        let m = self.m;
        let mut e = Vec::new();
        if m.recipe == Recipe::Magento2 {
            e.push(db_lock());
        }
        match (&m.heartbeat, m.recipe) {
            (Some(p), Recipe::Magento1 { aoe: true }) => e.push(Entry::text(
                "heartbeat_column",
                &p.column,
                format!(
                    "from {}: Aoe_Scheduler renews it while the job's pid lives",
                    p.from()
                ),
            )),
            (Some(p), Recipe::Lease) => e.push(Entry::text(
                "heartbeat_column",
                &p.column,
                format!("from {}: the worker's lease", p.from()),
            )),
            (Some(p), _) => e.push(Entry::text(
                "heartbeat_column",
                &p.column,
                format!("from {}", p.from()),
            )),
            (None, Recipe::Magento2 | Recipe::Magento1 { .. }) => {}
            (None, _) => {
                let table = self.ctx.table.rsplit('.').next().unwrap_or(self.ctx.table);
                let stem = kind.map_or_else(|| table.to_string(), watch_name);
                e.push(
                    Entry::text(
                        "heartbeat_file",
                        &format!("{PLACEHOLDER_DIR}/{stem}-{{id}}.heartbeat"),
                        "a placeholder",
                    )
                    .about(
                        "The job's heartbeat: a file it touches while it runs (its mtime; \
                         {id} is the row's id). The table cannot say where: set the path \
                         your job touches (selfheal run --heartbeat, or the PHP helper's \
                         beat(), keep one fresh). Until then the directory does not exist, \
                         every running row is judged unknown, and nothing is written.",
                    ),
                );
            }
        }
        match (&m.owner, &m.owner_host, &m.owner_pid) {
            (Some(p), _, _) => {
                let owner = Entry::text("owner_column", &p.column, format!("from {}", p.from()));
                e.push(if m.recipe == Recipe::Lease {
                    owner.about(
                        "HOST:PID of the worker that claimed the row (Selfheal\\Lease and \
                         Selfheal\\Job::owner() write it): a pid that is gone on its host is \
                         a fact that the row's worker is dead.",
                    )
                } else {
                    owner.off().about(format!(
                        "If {} holds HOST:PID (or PID) of the worker that claimed the row, \
                         uncomment this: a pid that is gone is a fact that the worker is \
                         dead. Anything else there (a user, a name) is no owner.",
                        p.column
                    ))
                });
            }
            (None, Some(h), Some(pid)) => {
                e.push(
                    Entry::text("owner_host_column", &h.column, format!("from {}", h.from()))
                        .about(format!(
                            "The worker's host and pid, in two columns{}: a pid gone from its \
                             host is a fact that the worker is dead; another host's rows are \
                             that host's selfheal's to judge.",
                            if matches!(m.recipe, Recipe::Magento1 { aoe: true }) {
                                " (Aoe_Scheduler writes gethostname() and getmypid())"
                            } else {
                                ""
                            }
                        )),
                );
                e.push(Entry::text(
                    "owner_pid_column",
                    &pid.column,
                    format!("from {}", pid.from()),
                ));
            }
            _ => {}
        }
        e
    }

    /// `stale_after` and `max_age`: guesses by recipe, marked as such.
    fn thresholds(&self) -> Vec<Entry> {
        let m = self.m;
        let (stale, stale_why, max, max_why) = match m.recipe {
            Recipe::Magento2 => (
                "5m",
                "a guess: a free lock acts once the row is this old",
                "1d",
                "a guess: Magento itself ends running rows a day after they were scheduled",
            ),
            Recipe::Magento1 { .. } => (
                "15m",
                "a guess: Aoe_Scheduler's own limit (mark_as_error_after, 15 minutes)",
                "1d",
                "a guess: a backstop above the longest cron job",
            ),
            Recipe::Lease => (
                "1m",
                "a guess: well above the 10 s between Selfheal\\Lease's beats",
                "6h",
                "a guess: a backstop above the longest run",
            ),
            Recipe::SyncLog => (
                "5m",
                "a guess: the field reports' heartbeat limit",
                "4h",
                "a guess: the field reports' cap",
            ),
            Recipe::Other if m.heartbeat.is_some() => (
                "10m",
                "a guess: well above how often the job renews its heartbeat",
                "6h",
                "a guess: a backstop above the longest run",
            ),
            Recipe::Other => (
                "5m",
                "a guess: well above how often the job touches its heartbeat",
                "4h",
                "a guess: a backstop above the longest run",
            ),
        };
        vec![
            Entry::text("stale_after", stale, stale_why).about(
                "stale_after and max_age are guesses: once runs have ended under selfheal, \
                 selfheal stats --config FILE shows their runtimes and suggests both.",
            ),
            Entry::text("max_age", max, max_why),
        ]
    }

    fn success_values(&self) -> Option<Entry> {
        let m = self.m;
        let mut found: Vec<String> = Vec::new();
        for (s, _) in self.seen.statuses() {
            if SUCCESS_LIKE.iter().any(|w| s.eq_ignore_ascii_case(w)) {
                found.push(s);
            }
        }
        if m.recipe.is_magento() && !found.iter().any(|s| s == "success") {
            found.insert(0, "success".into());
        }
        if found.is_empty()
            && let ColumnType::Enum { members } = &m.status_type.ty
        {
            found = members
                .iter()
                .filter(|s| SUCCESS_LIKE.iter().any(|w| s.eq_ignore_ascii_case(w)))
                .cloned()
                .collect();
        }
        if found.is_empty() {
            return None;
        }
        let from = if m.recipe.is_magento() {
            "Magento's status for a job that ended well".to_string()
        } else {
            let seen: Vec<String> = found
                .iter()
                .map(|s| match self.seen.rows_with(s) {
                    Some(n) => rows(n, s),
                    None => s.clone(),
                })
                .collect();
            format!("from the table's statuses: {}", seen.join(", "))
        };
        Some(Entry::new("success_values", Val::List(found), from))
    }

    /// `manual_value` and the retry budget, where the table has them.
    fn person_and_retries(&self) -> Vec<Entry> {
        let m = self.m;
        let mut e = Vec::new();
        if m.recipe.is_magento() {
            return e;
        }
        match choose(MANUAL_LIKE, self.seen, &m.status_type) {
            Some((v, from)) => e.push(Entry::text("manual_value", &v, from)),
            None if m.status_type.holds("wait_manual").is_ok() => e.push(
                Entry::text(
                    "manual_value",
                    "wait_manual",
                    "where rows go that need a person",
                )
                .off()
                .about(
                    "A status for rows that need a person (a hung worker, retries used up), \
                     if the application can show one; without it such rows are reported \
                     and left running.",
                ),
            ),
            None => {}
        }
        let Some(attempts) = &m.attempts else {
            return e;
        };
        let retry = choose(QUEUED_LIKE, self.seen, &m.status_type).or_else(|| {
            m.status_type.holds("pending").is_ok().then(|| {
                (
                    "pending".to_string(),
                    "the queue's usual status (Selfheal\\Lease claims pending rows)".to_string(),
                )
            })
        });
        let Some((retry, from)) = retry else {
            return e;
        };
        e.push(
            Entry::text("retry_value", &retry, from)
                .about("Dead rows go back to the queue while attempts remain."),
        );
        e.push(Entry::text(
            "attempts_column",
            &attempts.column,
            format!("from {}", attempts.from()),
        ));
        e.push(Entry::new(
            "max_attempts",
            Val::Int(3),
            "a guess: reclaims before a row goes to a person",
        ));
        if let Some(p) = &m.retry_at {
            e.push(Entry::text(
                "retry_at_column",
                &p.column,
                format!("from {}", p.from()),
            ));
        }
        e
    }
}

/// Magento 2's named lock: one name per cron group of Magento Open Source.
fn db_lock() -> Entry {
    let names = ["default", "index", "consumers"]
        .iter()
        .map(|g| format!("{{database}}|CRON_{{md5:{g}_{{job_code}}}}"))
        .collect();
    Entry::new("db_lock", Val::List(names), "Magento 2's lock for each job").about(
        "The job's named lock: Magento 2's cron takes GET_LOCK('<database>|CRON_' . \
         md5('<group>_<job_code>')) for each job before it marks the row running, and \
         releases it when the job ends. A free lock on a row older than stale_after is a fact \
         that its run is over; a held one, that it lives (a 25-hour indexer is never \
         touched). One name per cron group: add your own modules' groups (their \
         etc/cron_groups.xml); a lock prefix other than the database name in app/etc/env.php \
         replaces {database}.",
    )
}

#[cfg(test)]
mod tests;
