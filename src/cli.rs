//! The command line (clap derive). Only parsing lives here: the library turns these
//! structures into a validated configuration and runs the command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Watchdog for job rows stuck in `running`: judges each by real liveness evidence and
/// reclaims only the dead, with compare-and-set writes; never deletes a job's lock.
#[derive(Debug, Parser)]
#[command(name = "selfheal", version, propagate_version = true)]
#[command(
    after_help = "Exit status: 0 all rows handled; 1 some rows need a person; 2 bad command \
                  line or configuration; 3 database or filesystem failure; 75 another run \
                  holds the lock.\nSee selfheal(1) for the configuration file."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Judge every running row and reclaim the dead (what cron runs)
    Check(Box<CheckArgs>),
    /// Check the configuration, database, schema, index, clocks and paths, one line each
    Doctor(DoctorArgs),
    /// Build a throw-away SQLite sandbox and run the real check against it
    Demo(DemoArgs),
    /// Runtimes of finished rows, selfheal's false positives, suggested stale_after and max_age
    Stats(StatsArgs),
    /// Print shell completions for bash, zsh or fish (for packaging)
    #[command(hide = true)]
    Completions(CompletionsArgs),
}

/// Where `check --log` sends one line per change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogTarget {
    /// The local syslog socket, /dev/log (journald reads it too)
    Syslog,
    /// The systemd journal's native socket, with structured fields
    Journald,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Configuration file [default: $SELFHEAL_CONFIG, then /etc/selfheal/selfheal.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Configuration file [default: $SELFHEAL_CONFIG, then /etc/selfheal/selfheal.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Check only this watch (repeatable)
    #[arg(long = "watch", value_name = "NAME")]
    pub watches: Vec<String>,

    /// Print every running row with its evidence and verdict; change nothing (implies --dry-run)
    #[arg(long)]
    pub explain: bool,

    /// Decide everything, write nothing (no rows, no journal, no lock release)
    #[arg(long)]
    pub dry_run: bool,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Act even when the breaker trips or the clocks disagree (for an operator who has looked)
    #[arg(long)]
    pub force: bool,

    /// Print nothing but fatal errors; the exit status (and --log) carry the rest
    #[arg(long, short, conflicts_with_all = ["explain", "format"])]
    pub quiet: bool,

    /// Also send one line per change (and per row that needs a person) to syslog or journald
    #[arg(long, value_enum, value_name = "TARGET")]
    pub log: Option<LogTarget>,

    #[command(flatten)]
    pub watch: WatchFlags,
}

/// One watch described with flags; each overrides the same key of the file.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "One watch given with flags (override the configuration file)")]
pub struct WatchFlags {
    /// Database URL: sqlite:///path.db or mysql://user@host/db?socket=PATH (no password here)
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// How naive DATETIME values were written (IANA zone, e.g. Asia/Shanghai)
    #[arg(long, value_name = "ZONE")]
    pub timezone: Option<String>,
    /// Name of the watch given with flags [default: the table name]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Job table (table or database.table)
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
    /// Id column [default: id]
    #[arg(long, value_name = "COLUMN")]
    pub id_column: Option<String>,
    /// Status column [default: status]
    #[arg(long, value_name = "COLUMN")]
    pub status_column: Option<String>,
    /// Status value of a running row [default: running]
    #[arg(long, value_name = "VALUE")]
    pub running_value: Option<String>,
    /// Start time column (DATETIME, TIMESTAMP or unix seconds)
    #[arg(long, value_name = "COLUMN")]
    pub started_column: Option<String>,
    /// Heartbeat file; may contain {id}
    #[arg(long, value_name = "PATH")]
    pub heartbeat_file: Option<String>,
    /// Heartbeat (lease) column
    #[arg(long, value_name = "COLUMN")]
    pub heartbeat_column: Option<String>,
    /// A heartbeat older than this is not beating (e.g. 5m)
    #[arg(long, value_name = "DURATION")]
    pub stale_after: Option<String>,
    /// Absolute cap on total runtime (e.g. 4h)
    #[arg(long, value_name = "DURATION")]
    pub max_age: Option<String>,
    /// Status for dead rows [default: error]
    #[arg(long, value_name = "VALUE")]
    pub dead_value: Option<String>,
    /// Column set to the database's NOW() on a change
    #[arg(long, value_name = "COLUMN")]
    pub ended_column: Option<String>,
    /// Column that receives the reason
    #[arg(long, value_name = "COLUMN")]
    pub message_column: Option<String>,
    /// The job's own lock file (a kernel lock held for the whole run): probed, never
    /// deleted unless --release-lock if_free; may contain {id}
    #[arg(long, value_name = "PATH")]
    pub lock_file: Option<String>,
    /// Column holding HOST:PID or PID of the worker
    #[arg(long, value_name = "COLUMN")]
    pub owner_column: Option<String>,
    /// Status for rows that need a person
    #[arg(long, value_name = "VALUE")]
    pub manual_value: Option<String>,
    /// Status that sends a dead row back to the queue
    #[arg(long, value_name = "VALUE")]
    pub retry_value: Option<String>,
    /// Column counting reclaims
    #[arg(long, value_name = "COLUMN")]
    pub attempts_column: Option<String>,
    /// Reclaims allowed before a row goes to the manual (or dead) state
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<i64>,
    /// What to do past max_age: mark_dead, manual or report
    #[arg(long, value_name = "POLICY")]
    pub overtime: Option<String>,
    /// never (default), or if_free: the lock file is a legacy existence lock; remove it after
    /// marking a dead row if nobody locks it and the pid in it is gone
    #[arg(long, value_name = "POLICY")]
    pub release_lock: Option<String>,
    /// Status of a run that ended well (repeatable) [default: any but running, dead, manual, retry]
    #[arg(long = "success-value", value_name = "VALUE")]
    pub success_values: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Configuration file [default: $SELFHEAL_CONFIG, then /etc/selfheal/selfheal.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Only this watch (repeatable)
    #[arg(long = "watch", value_name = "NAME")]
    pub watches: Vec<String>,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Build the sandbox here and keep it, instead of a temporary directory removed afterwards
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}
