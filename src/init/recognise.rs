//! What a table is, read from its shape: one of the recipes selfheal knows — Magento 2's
//! and Magento 1's `cron_schedule` (with Aoe_Scheduler's `host`, `pid` and `last_seen`
//! where present), the field reports' `sync_log`, a `Selfheal\Lease` queue — or, for any
//! other table, the column that most likely plays each part of a watch, with the reason
//! for each (its name, its type). A table without a status, a start time or a column that
//! identifies a row is refused, in words. Pure: the caller reads the table.

use crate::store::survey::TableInfo;
use crate::store::{Column, ColumnType, Role};

/// The kinds of table selfheal has a recipe for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    /// Magento 2 / Mage-OS / Adobe Commerce `cron_schedule`: judged by the job's named
    /// lock.
    Magento2,
    /// Magento 1 / OpenMage / Maho `cron_schedule`; `aoe`: with Aoe_Scheduler's `host`,
    /// `pid` and `last_seen`.
    Magento1 { aoe: bool },
    /// The field reports' `sync_log`: a job that touches a heartbeat file.
    SyncLog,
    /// A queue worked by `Selfheal\Lease`: an owner and a heartbeat column in each row.
    Lease,
    /// None of those.
    Other,
}

impl Recipe {
    /// True for either Magento's `cron_schedule`.
    pub fn is_magento(self) -> bool {
        matches!(self, Recipe::Magento2 | Recipe::Magento1 { .. })
    }
}

/// A column chosen for a part of the watch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub column: String,
    /// Its type as the database writes it (`varchar(7)`, `timestamp`).
    pub ty: String,
    /// Why it was chosen, after "from column NAME (TYPE)": "", or ": the primary key".
    pub why: String,
}

impl Pick {
    /// `column start_time (datetime)`, and the reason where there is one.
    pub fn from(&self) -> String {
        format!("column {} ({}){}", self.column, self.ty, self.why)
    }
}

/// Every part of a watch the table's columns can play.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub recipe: Recipe,
    /// Why the recipe was recognised, in words ("" for [`Recipe::Other`]).
    pub recognised: String,
    pub id: Pick,
    pub status: Pick,
    /// The status column itself: what values it can hold.
    pub status_type: Column,
    pub started: Pick,
    /// A start that is the row's creation, not its run's: said beside it.
    pub started_caveat: Option<String>,
    pub heartbeat: Option<Pick>,
    pub ended: Option<Pick>,
    pub message: Option<Pick>,
    /// `HOST:PID` or `PID` in one column.
    pub owner: Option<Pick>,
    /// Host and pid in two columns (Aoe_Scheduler's `host` and `pid`).
    pub owner_host: Option<Pick>,
    pub owner_pid: Option<Pick>,
    pub attempts: Option<Pick>,
    pub retry_at: Option<Pick>,
    /// The column that tells job kinds apart (`job_code`, `job`, `type`).
    pub kind: Option<Pick>,
    /// An index whose first column is the status column.
    pub status_index: Option<String>,
    /// The start column is a `DATETIME` (a wall-clock time that carries no zone).
    pub started_is_naive: bool,
}

/// Why a table cannot be mapped to a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmappable {
    /// No column that can hold a status by its name and type.
    NoStatus,
    /// No column that can hold the time a run started.
    NoStart { status: String },
    /// No column that identifies one row (a primary key or unique index of one column).
    NoId,
}

impl Unmappable {
    /// What is missing, in words.
    pub fn what(&self) -> String {
        match self {
            Unmappable::NoStatus => format!(
                "no column holds a job's status (by its name: {}, or a name ending in \
                 _status or _state; of a text, ENUM or integer type)",
                STATUS_NAMES.join(", ")
            ),
            Unmappable::NoStart { status } => format!(
                "it has a status ({status}) but no column holds the time a run started (by \
                 its name: {}, or created_at; a date-time, timestamp or unix seconds)",
                STARTED_NAMES.join(", ")
            ),
            Unmappable::NoId => "no column identifies one row (a primary key or unique index \
                                 of one column): selfheal's compare-and-set must write one row \
                                 and no other"
                .into(),
        }
    }
}

const STATUS_NAMES: &[&str] = &["status", "state", "job_status", "run_status", "task_status"];
const STARTED_NAMES: &[&str] = &[
    "start_time",
    "started_at",
    "executed_at",
    "started",
    "start",
    "start_at",
    "started_on",
    "begin_time",
    "began_at",
    "run_started_at",
    "claimed_at",
    "reserved_at",
    "picked_at",
    "locked_at",
    "run_at",
];
/// A start that is the row's creation: used only where nothing better is there.
const CREATED_NAMES: &[&str] = &["created_at", "create_time", "created", "inserted_at"];
const HEARTBEAT_NAMES: &[&str] = &[
    "heartbeat_at",
    "heartbeat",
    "last_heartbeat",
    "last_heartbeat_at",
    "heartbeat_time",
    "beat_at",
    "last_beat",
    "last_seen",
    "last_seen_at",
    "alive_at",
    "pinged_at",
    "last_ping",
    "ping_time",
    "lease_renewed_at",
    "renewed_at",
    "progress_at",
];
const ENDED_NAMES: &[&str] = &[
    "end_time",
    "ended_at",
    "finished_at",
    "finish_time",
    "completed_at",
    "done_at",
    "stopped_at",
    "end_at",
    "ended",
    "finished",
];
const MESSAGE_NAMES: &[&str] = &[
    "error_msg",
    "error_message",
    "last_error",
    "error",
    "errors",
    "err_msg",
    "failure_reason",
    "message",
    "messages",
    "msg",
    "reason",
];
const OWNER_NAMES: &[&str] = &[
    "worker",
    "owner",
    "locked_by",
    "claimed_by",
    "reserved_by",
    "lock_owner",
    "host_pid",
    "worker_id",
];
const HOST_NAMES: &[&str] = &["host", "hostname", "worker_host"];
const PID_NAMES: &[&str] = &["pid", "worker_pid", "process_id"];
const ATTEMPTS_NAMES: &[&str] = &[
    "attempts",
    "attempt",
    "tries",
    "retries",
    "retry_count",
    "attempt_count",
    "try_count",
];
const RETRY_AT_NAMES: &[&str] = &[
    "retry_at",
    "retry_after",
    "next_retry_at",
    "next_attempt_at",
    "available_at",
    "not_before",
    "run_after",
];
const KIND_NAMES: &[&str] = &[
    "job_code",
    "job",
    "job_name",
    "job_type",
    "task",
    "task_name",
    "type",
    "kind",
    "queue",
    "command",
];

/// The table's columns, by lowercase name.
struct Columns<'a> {
    all: &'a [(String, Column)],
}

impl<'a> Columns<'a> {
    fn get(&self, name: &str) -> Option<(&'a str, &'a Column)> {
        self.all
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(n, c)| (n.as_str(), c))
    }

    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The first of `names` that the table has with a type fit for `fits`; then, with
    /// `suffixes`, the first column whose name ends with one of them.
    fn pick(
        &self,
        names: &[&str],
        suffixes: &[&str],
        fits: impl Fn(&Column) -> bool,
        taken: &[&Pick],
    ) -> Option<Pick> {
        let free = |n: &str| !taken.iter().any(|p| p.column.eq_ignore_ascii_case(n));
        let by_name = names
            .iter()
            .filter_map(|n| self.get(n))
            .find(|(n, c)| fits(c) && free(n));
        let by_suffix = || {
            self.all
                .iter()
                .find(|(n, c)| {
                    let lower = n.to_ascii_lowercase();
                    suffixes.iter().any(|s| lower.ends_with(s)) && fits(c) && free(n)
                })
                .map(|(n, c)| (n.as_str(), c))
        };
        by_name.or_else(by_suffix).map(|(n, c)| pick(n, c, ""))
    }
}

fn pick(name: &str, c: &Column, why: &str) -> Pick {
    Pick {
        column: name.to_string(),
        ty: type_words(c),
        why: why.to_string(),
    }
}

/// A column's type as the database writes it; "no declared type" where it has none.
pub fn type_words(c: &Column) -> String {
    match c.type_text() {
        t if t.is_empty() => "no declared type".into(),
        t => t,
    }
}

fn fits(role: Role) -> impl Fn(&Column) -> bool {
    move |c: &Column| c.ty.problem(role).is_none()
}

/// Text a person or a job writes: not an ENUM, not a number.
fn is_text(c: &Column) -> bool {
    matches!(c.ty, ColumnType::Text | ColumnType::Untyped)
}

/// A column that holds a point in time, by its type: a date-time, a timestamp, unix
/// seconds, or text (SQLite's dates, or a declaration that says nothing).
fn is_time(c: &Column) -> bool {
    matches!(
        c.ty,
        ColumnType::DateTime
            | ColumnType::Timestamp
            | ColumnType::Integer
            | ColumnType::Decimal
            | ColumnType::Text
            | ColumnType::Untyped
    )
}

/// Reads the table's shape: the recipe it fits, and the column for each part of a watch.
/// `table` is its name as given; `neighbours` the other tables of the database (Magento 2
/// is told from Magento 1 by its `setup_module`).
pub fn map_columns(
    table: &str,
    info: &TableInfo,
    neighbours: &[String],
) -> Result<Mapping, Unmappable> {
    let cols = Columns { all: &info.columns };
    let id = id_pick(&cols, info).ok_or(Unmappable::NoId)?;
    let status = cols
        .pick(
            STATUS_NAMES,
            &["_status", "_state"],
            |c| fits(Role::Status)(c) && !c.ty.eq(&ColumnType::Other),
            &[&id],
        )
        .ok_or(Unmappable::NoStatus)?;
    let status_type = cols
        .get(&status.column)
        .map(|(_, c)| c.clone())
        .ok_or(Unmappable::NoStatus)?;
    let no_start = || Unmappable::NoStart {
        status: status.column.clone(),
    };
    let (recipe, recognised) = recipe_of(table, &cols, neighbours);
    let taken = [&id, &status];
    let mut started_caveat = None;
    let started = match recipe {
        Recipe::Magento2 | Recipe::Magento1 { .. } => cols
            .get("executed_at")
            .map(|(n, c)| pick(n, c, ": set when Magento marks the row running")),
        _ => cols.pick(
            STARTED_NAMES,
            &["_started_at", "_start_time"],
            is_time,
            &taken,
        ),
    };
    let started = match started {
        Some(s) => s,
        None => {
            let created = cols
                .pick(CREATED_NAMES, &[], is_time, &taken)
                .ok_or_else(no_start)?;
            started_caveat = Some(format!(
                "{} is when the row was made: a row that waits in a queue before it runs \
                 looks older than its run",
                created.column
            ));
            created
        }
    };
    if cols
        .get(&started.column)
        .is_some_and(|(_, c)| !fits(Role::Time)(c))
    {
        return Err(no_start());
    }
    let started_is_naive = cols
        .get(&started.column)
        .is_some_and(|(_, c)| c.ty == ColumnType::DateTime);
    let taken = [&id, &status, &started];
    let heartbeat = cols.pick(HEARTBEAT_NAMES, &["_heartbeat"], is_time, &taken);
    let mut taken: Vec<&Pick> = taken.to_vec();
    taken.extend(heartbeat.as_ref());
    let ended = cols.pick(ENDED_NAMES, &["_finished_at", "_ended_at"], is_time, &taken);
    taken.extend(ended.as_ref());
    let message = cols.pick(MESSAGE_NAMES, &["_error", "_message"], is_text, &taken);
    taken.extend(message.as_ref());
    let owner = cols.pick(OWNER_NAMES, &[], fits(Role::Text), &taken);
    taken.extend(owner.as_ref());
    // Host and pid apart (Aoe_Scheduler): both or neither.
    let (owner_host, owner_pid) = match owner {
        Some(_) => (None, None),
        None => {
            let host = cols.pick(HOST_NAMES, &[], is_text, &taken);
            let pid = cols.pick(
                PID_NAMES,
                &[],
                |c| {
                    matches!(
                        c.ty,
                        ColumnType::Integer | ColumnType::Text | ColumnType::Untyped
                    )
                },
                &taken,
            );
            match (host, pid) {
                (Some(h), Some(p)) => (Some(h), Some(p)),
                _ => (None, None),
            }
        }
    };
    taken.extend(owner_host.as_ref());
    taken.extend(owner_pid.as_ref());
    let attempts = cols.pick(ATTEMPTS_NAMES, &[], fits(Role::Count), &taken);
    taken.extend(attempts.as_ref());
    let retry_at = cols.pick(RETRY_AT_NAMES, &[], is_time, &taken);
    taken.extend(retry_at.as_ref());
    let kind = cols.pick(
        KIND_NAMES,
        &[],
        |c| {
            matches!(
                c.ty,
                ColumnType::Text | ColumnType::Enum { .. } | ColumnType::Untyped
            )
        },
        &taken,
    );
    let status_index = info
        .indexes
        .iter()
        .find(|ix| {
            ix.columns
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case(&status.column))
        })
        .map(|ix| ix.name.clone());
    // A queue worked by the lease: its owner and its heartbeat in the row (the lease's
    // own example is a sync_log).
    let (recipe, recognised) = match recipe {
        Recipe::Other | Recipe::SyncLog if owner.is_some() && heartbeat.is_some() => (
            Recipe::Lease,
            format!(
                "a queue whose rows carry their worker ({}) and a heartbeat column ({}), as \
                 Selfheal\\Lease writes them",
                owner.as_ref().map_or("", |p| p.column.as_str()),
                heartbeat.as_ref().map_or("", |p| p.column.as_str())
            ),
        ),
        other => (other, recognised),
    };
    Ok(Mapping {
        recipe,
        recognised,
        id,
        status,
        status_type,
        started,
        started_caveat,
        heartbeat,
        ended,
        message,
        owner,
        owner_host,
        owner_pid,
        attempts,
        retry_at,
        kind,
        status_index,
        started_is_naive,
    })
}

/// The column that identifies a row: the primary key of one column, else a unique index
/// of one column.
fn id_pick(cols: &Columns<'_>, info: &TableInfo) -> Option<Pick> {
    if let [pk] = info.primary_key.as_slice() {
        let (n, c) = cols.get(pk)?;
        return Some(pick(n, c, ": the primary key"));
    }
    info.indexes
        .iter()
        .filter(|ix| ix.unique)
        .find_map(|ix| match ix.columns.as_slice() {
            [one] => cols
                .get(one)
                .map(|(n, c)| pick(n, c, &format!(": unique (index {})", ix.name))),
            _ => None,
        })
}

/// Which recipe the table's name, columns and neighbours say, and why.
fn recipe_of(table: &str, cols: &Columns<'_>, neighbours: &[String]) -> (Recipe, String) {
    let name = table
        .rsplit('.')
        .next()
        .unwrap_or(table)
        .to_ascii_lowercase();
    let cron = ["schedule_id", "job_code", "status", "executed_at"]
        .iter()
        .all(|c| cols.has(c));
    if let Some(prefix) = name.strip_suffix("cron_schedule")
        && cron
    {
        let aoe = ["host", "pid", "last_seen"].iter().all(|c| cols.has(c));
        let neighbour = |t: &str| {
            let want = format!("{prefix}{t}");
            neighbours.iter().any(|n| n.eq_ignore_ascii_case(&want))
        };
        if aoe {
            return (
                Recipe::Magento1 { aoe: true },
                "Magento 1 / OpenMage / Maho cron_schedule with Aoe_Scheduler's host, pid and \
                 last_seen"
                    .into(),
            );
        }
        if neighbour("setup_module") {
            return (
                Recipe::Magento2,
                format!(
                    "Magento 2 / Mage-OS cron_schedule (the database has Magento 2's \
                     {prefix}setup_module)"
                ),
            );
        }
        let why = if neighbour("core_resource") {
            format!("the database has Magento 1's {prefix}core_resource")
        } else {
            format!("no {prefix}setup_module table says Magento 2")
        };
        return (
            Recipe::Magento1 { aoe: false },
            format!("Magento 1 / OpenMage / Maho cron_schedule ({why}), without Aoe_Scheduler"),
        );
    }
    let seed = ["id", "status", "start_time", "end_time", "error_msg"]
        .iter()
        .all(|c| cols.has(c));
    if name == "sync_log" || seed {
        return (
            Recipe::SyncLog,
            "the field reports' sync_log (id, status, start_time, end_time, error_msg): a job \
             that touches a heartbeat file while it runs"
                .into(),
        );
    }
    (Recipe::Other, String::new())
}

/// True when a table's column names alone make it look like a job table: a status and a
/// start time (for naming the tables a database has when the one asked for is missing).
pub fn looks_like_job_table(columns: &[String]) -> Option<(String, String)> {
    let find = |names: &[&str], suffixes: &[&str]| {
        names
            .iter()
            .find_map(|n| columns.iter().find(|c| c.eq_ignore_ascii_case(n)))
            .or_else(|| {
                columns.iter().find(|c| {
                    let lower = c.to_ascii_lowercase();
                    suffixes.iter().any(|s| lower.ends_with(s))
                })
            })
            .cloned()
    };
    let status = find(STATUS_NAMES, &["_status", "_state"])?;
    let started = find(STARTED_NAMES, &["_started_at", "_start_time"])?;
    Some((status, started))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::survey::Index;

    fn mysql(name: &str, data_type: &str, column_type: &str) -> (String, Column) {
        let len = column_type
            .split_once('(')
            .and_then(|(_, r)| r.trim_end_matches(')').parse().ok());
        (name.into(), Column::mysql(data_type, column_type, len, ""))
    }

    /// Magento 2's `cron_schedule` as `information_schema` describes it.
    pub(crate) fn magento2() -> TableInfo {
        TableInfo {
            columns: vec![
                mysql("schedule_id", "int", "int(10) unsigned"),
                mysql("job_code", "varchar", "varchar(255)"),
                mysql("status", "varchar", "varchar(7)"),
                mysql("messages", "text", "text"),
                mysql("created_at", "timestamp", "timestamp"),
                mysql("scheduled_at", "timestamp", "timestamp"),
                mysql("executed_at", "timestamp", "timestamp"),
                mysql("finished_at", "timestamp", "timestamp"),
            ],
            primary_key: vec!["schedule_id".into()],
            indexes: vec![Index {
                name: "CRON_SCHEDULE_JOB_CODE_STATUS_SCHEDULED_AT".into(),
                unique: false,
                columns: vec!["job_code".into(), "status".into(), "scheduled_at".into()],
            }],
            rows: Some(1200),
        }
    }

    #[test]
    fn magento_2_is_told_from_magento_1_by_its_neighbours() {
        let m =
            map_columns("cron_schedule", &magento2(), &["setup_module".into()]).expect("mapped");
        assert_eq!(m.recipe, Recipe::Magento2);
        assert_eq!(m.id.column, "schedule_id");
        assert_eq!(m.started.column, "executed_at");
        assert_eq!(m.ended.map(|p| p.column).as_deref(), Some("finished_at"));
        assert_eq!(m.message.map(|p| p.column).as_deref(), Some("messages"));
        assert_eq!(m.kind.map(|p| p.column).as_deref(), Some("job_code"));
        assert_eq!(
            m.status_index, None,
            "job_code comes first in Magento's index"
        );
        // With a table prefix, and without Magento 2's own table.
        let m = map_columns("mg_cron_schedule", &magento2(), &["mg_setup_module".into()])
            .expect("mapped");
        assert_eq!(m.recipe, Recipe::Magento2);
        let m =
            map_columns("cron_schedule", &magento2(), &["core_resource".into()]).expect("mapped");
        assert_eq!(m.recipe, Recipe::Magento1 { aoe: false });
        assert!(m.recognised.contains("core_resource"), "{}", m.recognised);
    }

    #[test]
    fn aoe_schedulers_columns_give_a_heartbeat_and_an_owner_in_two_columns() {
        let mut info = magento2();
        info.columns.extend([
            mysql("host", "varchar", "varchar(255)"),
            mysql("pid", "varchar", "varchar(255)"),
            mysql("last_seen", "timestamp", "timestamp"),
        ]);
        let m = map_columns("cron_schedule", &info, &[]).expect("mapped");
        assert_eq!(m.recipe, Recipe::Magento1 { aoe: true });
        assert_eq!(m.heartbeat.map(|p| p.column).as_deref(), Some("last_seen"));
        assert_eq!(m.owner_host.map(|p| p.column).as_deref(), Some("host"));
        assert_eq!(m.owner_pid.map(|p| p.column).as_deref(), Some("pid"));
        assert_eq!(m.owner, None);
    }

    fn sqlite(cols: &[(&str, &str)], pk: &str) -> TableInfo {
        TableInfo {
            columns: cols
                .iter()
                .map(|(n, t)| ((*n).to_string(), Column::declared(t)))
                .collect(),
            primary_key: vec![pk.into()],
            indexes: Vec::new(),
            rows: None,
        }
    }

    #[test]
    fn the_seeds_sync_log_and_a_lease_queue() {
        let seed = sqlite(
            &[
                ("id", "INTEGER"),
                ("status", "VARCHAR(16)"),
                ("start_time", "TEXT"),
                ("end_time", "TEXT"),
                ("error_msg", "VARCHAR(255)"),
            ],
            "id",
        );
        let m = map_columns("sync_log", &seed, &[]).expect("mapped");
        assert_eq!(m.recipe, Recipe::SyncLog);
        assert_eq!(m.started.from(), "column start_time (text)");
        assert_eq!(m.id.from(), "column id (integer): the primary key");
        let lease = sqlite(
            &[
                ("id", "INTEGER"),
                ("status", "VARCHAR(16)"),
                ("start_time", "TEXT"),
                ("worker", "VARCHAR(64)"),
                ("heartbeat_at", "TEXT"),
                ("end_time", "TEXT"),
                ("error_msg", "VARCHAR(255)"),
                ("attempts", "INTEGER"),
                ("retry_at", "TEXT"),
            ],
            "id",
        );
        let m = map_columns("jobs", &lease, &[]).expect("mapped");
        assert_eq!(m.recipe, Recipe::Lease);
        assert_eq!(m.owner.map(|p| p.column).as_deref(), Some("worker"));
        assert_eq!(m.attempts.map(|p| p.column).as_deref(), Some("attempts"));
        assert_eq!(m.retry_at.map(|p| p.column).as_deref(), Some("retry_at"));
    }

    #[test]
    fn a_table_without_a_status_a_start_or_an_id_is_refused() {
        let no_start = sqlite(
            &[("id", "INTEGER"), ("status", "TEXT"), ("note", "TEXT")],
            "id",
        );
        assert_eq!(
            map_columns("t", &no_start, &[]),
            Err(Unmappable::NoStart {
                status: "status".into()
            })
        );
        let no_status = sqlite(&[("id", "INTEGER"), ("start_time", "TEXT")], "id");
        assert_eq!(map_columns("t", &no_status, &[]), Err(Unmappable::NoStatus));
        let mut no_id = sqlite(&[("status", "TEXT"), ("start_time", "TEXT")], "x");
        no_id.primary_key.clear();
        assert_eq!(map_columns("t", &no_id, &[]), Err(Unmappable::NoId));
        // A creation time stands in for a start, with its caveat.
        let created = sqlite(
            &[
                ("id", "INTEGER"),
                ("state", "TEXT"),
                ("created_at", "DATETIME"),
            ],
            "id",
        );
        let m = map_columns("t", &created, &[]).expect("mapped");
        assert_eq!(m.status.column, "state");
        assert_eq!(m.started.column, "created_at");
        assert!(m.started_caveat.is_some());
    }

    #[test]
    fn job_tables_are_named_by_their_columns_alone() {
        let cols = |c: &[&str]| c.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            looks_like_job_table(&cols(&["id", "status", "start_time"])),
            Some(("status".into(), "start_time".into()))
        );
        assert_eq!(
            looks_like_job_table(&cols(&["schedule_id", "status", "executed_at"])),
            Some(("status".into(), "executed_at".into()))
        );
        assert_eq!(looks_like_job_table(&cols(&["id", "name", "price"])), None);
    }
}
