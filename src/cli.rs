//! The command line (clap derive; the watch flags built from the key table in
//! `config/keys.rs`). Only parsing lives here: the library turns these structures into a
//! validated configuration and runs the command. The watch flags reach the library as a
//! plain key → value map (`config::RawWatch`), never as clap types.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::config::keys::{Flag, Key, WATCH_KEYS};
use crate::config::{Raw, RawWatch};

/// Watchdog for job rows stuck in `running`: judges each by real liveness evidence and
/// reclaims only the dead, with compare-and-set writes; never deletes a job's lock.
#[derive(Debug, Parser)]
#[command(name = "selfheal", version, propagate_version = true)]
#[command(
    after_help = "Exit status: 0 all rows handled; 1 some rows need a person; 2 bad command \
                  line or configuration (also a table or column the database lacks); 3 \
                  database or filesystem failure (also a state_dir, run lock or link it \
                  refuses: see SECURITY in selfheal(1)); 75 another run holds the lock.\nSee \
                  selfheal(1) for the configuration file."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Judge every running row and reclaim the dead (what cron runs)
    #[command(
        after_help = "The text form (what cron mails) prints each change, and a row that needs \
                      a person when its problem first appears or changes, then at most once per \
                      [run] remind_every (default 24h); the exit status stays 1 on every run \
                      while a row needs a person. --explain, --dry-run and --format json show \
                      everything."
    )]
    Check(Box<CheckArgs>),
    /// Check the configuration, database, schema, status values, index, clocks, parked rows and
    /// paths, one line each
    #[command(
        after_help = "Exit status: 0 every check passed; 1 something warned or failed (also: \
                      no watch configured, or run as root while cron runs selfheal as another \
                      user); 2 bad configuration (also a table or column the database lacks); 3 \
                      the database cannot be reached."
    )]
    Doctor(DoctorArgs),
    /// Build a throw-away SQLite sandbox and run the real check against it
    Demo(DemoArgs),
    /// Read a job table and propose a configuration for it, each value with where it came
    /// from; then show what check --explain says about its running rows under it
    #[command(
        after_help = "Recognises Magento 2's and Magento 1's cron_schedule (with \
                      Aoe_Scheduler's host and pid), the field reports' sync_log and a \
                      Selfheal\\Lease queue; for any other table it proposes the columns \
                      by their names and types. The statuses are counted bounded: a small \
                      table whole, else through an index on the status, else its latest \
                      rows. What it prints is the configuration, and comments.\nExit \
                      status: 0 proposed (and written with --write); 2 bad command line, no \
                      such table (the job tables there are named), a table that cannot be \
                      watched, or a --write file that exists already; 3 the database cannot \
                      be read or the file cannot be written.\nSee selfheal(1), section \
                      COMMANDS."
    )]
    Init(InitArgs),
    /// Runtimes of finished rows (a histogram), selfheal's false positives, suggested
    /// stale_after and max_age
    Stats(StatsArgs),
    /// Run a job under a kernel lock with a bounded wait, a heartbeat and an execution record
    Run(RunArgs),
    /// What needs a person, over every watch (one line each, with the resolve command); or
    /// one row's whole record: its columns, evidence, verdict, journal and last execution
    #[command(
        after_help = "Exit status: 0 nothing needs a person (or the row was shown); 1 some rows \
                      need a person; 2 bad command line or configuration (no such watch or row \
                      id); 3 database or filesystem failure. Reads only.\nSee selfheal(1), \
                      section RESOLVING."
    )]
    Show(ShowArgs),
    /// A person's decision on rows that need one: mark dead, send back to the queue, or put
    /// a parked row back to running; one compare-and-set each, journaled with who decided
    #[command(
        after_help = "Each row is read again with its evidence: one whose worker provably lives \
                      (its lock held, its owner pid alive), or another host's row, is refused \
                      unless --force (the job's lock is never touched); one that is neither \
                      parked nor running is refused. The message column gets \"self-heal: \
                      resolved as DECISION by WHO: NOTE\" (WHO: $SUDO_USER, else the login \
                      name).\nExit status: 0 every row resolved; 1 some refused or lost to a \
                      race; 2 bad command line or configuration (no such watch or row id, --as \
                      retry without retry_value, more than 10 rows without --yes and no \
                      terminal); 3 database or filesystem failure; 75 a check run held the run \
                      lock for 30 s, or the watch's advisory lock for 5 s.\nSee selfheal(1), \
                      section RESOLVING."
    )]
    Resolve(ResolveArgs),
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

    /// Print every running row with its evidence and verdict, and the rows parked in
    /// manual_value; change nothing (implies --dry-run)
    #[arg(long)]
    pub explain: bool,

    /// Decide everything, write nothing (no rows, no journal, no lock release)
    #[arg(long)]
    pub dry_run: bool,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Act even when a whole-watch hold trips (breaker, no heartbeat, no named lock, mass
    /// overtime) or the clocks disagree (for an operator who has looked)
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
    /// The watch keys: one flag per key of `config::keys::WATCH_KEYS` that has one.
    #[command(flatten)]
    pub keys: WatchKeyFlags,
}

/// The watch keys given as flags, as the key → value map the configuration overlays onto
/// the file's watch. Built from the key table, so a key's flag, value name and help line
/// are written once, in `config/keys.rs`.
#[derive(Debug, Clone, Default)]
pub struct WatchKeyFlags(pub RawWatch);

impl Args for WatchKeyFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        WATCH_KEYS.iter().fold(cmd, |cmd, key| match key.flag {
            Some(flag) => cmd.arg(watch_arg(key, flag)),
            None => cmd,
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The flag of one watch key: a string or an integer, or a flag repeated once per item of a
/// list or table (`config::keys::Shape` parses each value).
fn watch_arg(key: &Key, flag: Flag) -> Arg {
    let shape = key.kind.shape();
    Arg::new(key.name)
        .long(flag.long)
        .value_name(flag.value_name)
        .help(key.help)
        .value_parser(move |s: &str| shape.parse_flag(s))
        .action(if shape.repeats() {
            ArgAction::Append
        } else {
            ArgAction::Set
        })
}

/// The value given for `key`'s flag, if any.
fn take(m: &mut ArgMatches, key: &Key) -> Result<Option<Raw>, clap::Error> {
    let shape = key.kind.shape();
    let taken = if shape.repeats() {
        m.try_remove_many::<Raw>(key.name)
            .map(|items| items.map(|items| shape.gather(items)))
    } else {
        m.try_remove_one::<Raw>(key.name)
    };
    taken.map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, e))
}

impl FromArgMatches for WatchKeyFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        let mut out = WatchKeyFlags::default();
        out.update_from_arg_matches_mut(m)?;
        Ok(out)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.update_from_arg_matches_mut(&mut m.clone())
    }

    fn update_from_arg_matches_mut(&mut self, m: &mut ArgMatches) -> Result<(), clap::Error> {
        for key in WATCH_KEYS.iter().filter(|k| k.flag.is_some()) {
            if let Some(v) = take(m, key)? {
                self.0.insert(key, v);
            }
        }
        Ok(())
    }
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

/// `selfheal show`: what needs a person, or one row's whole record (docs/design.md#show).
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Configuration file [default: $SELFHEAL_CONFIG, then /etc/selfheal/selfheal.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Only this watch
    #[arg(value_name = "WATCH")]
    pub watch: Option<String>,

    /// One row of the watch: its whole record
    #[arg(value_name = "ID", requires = "watch", allow_hyphen_values = true)]
    pub id: Option<String>,

    /// List every row that needs a person (the text lists the first 50 and counts the rest
    /// per watch and verdict; JSON always streams every row)
    #[arg(long, conflicts_with = "id")]
    pub all: bool,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// A person's decision (`resolve --as`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Resolution {
    /// The worker is gone and the job is not to run again: dead_value (and the end time)
    Dead,
    /// Run the job again now: retry_value, attempts + 1, retry_at_column to now
    Retry,
    /// The worker is fine: a parked row goes back to running_value
    Running,
}

/// `selfheal resolve`: a person's decision on rows (docs/design.md#resolve).
#[derive(Debug, Args)]
#[command(
    override_usage = "selfheal resolve [--config FILE] WATCH ID... --as dead|retry|running \
                      [--note TEXT] [--dry-run] [--force] [--yes]"
)]
pub struct ResolveArgs {
    /// Configuration file [default: $SELFHEAL_CONFIG, then /etc/selfheal/selfheal.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The watch the rows belong to
    #[arg(value_name = "WATCH")]
    pub watch: String,

    /// The rows' ids (as selfheal show lists them)
    #[arg(
        value_name = "ID",
        required = true,
        num_args = 1..,
        allow_negative_numbers = true
    )]
    pub ids: Vec<String>,

    /// The decision
    #[arg(long = "as", value_enum, value_name = "DECISION", required = true)]
    pub decision: Resolution,

    /// Why: kept in the row's message and the journal
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,

    /// Say what would be written (the statement), write nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Resolve even a row whose worker provably lives, or another host's row (the job's
    /// lock is never touched)
    #[arg(long)]
    pub force: bool,

    /// Do not ask before resolving more than 10 rows (required without a terminal)
    #[arg(long)]
    pub yes: bool,
}

/// `selfheal init`: a first configuration from a table's shape (docs/design.md#commands).
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Database URL: sqlite:///path.db or mysql://user@host/db?socket=PATH (no password
    /// here) [default: [database] of --config]
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    /// The job table (table or database.table) [default: the one table that looks like a
    /// job table]
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,

    /// Also write the configuration to FILE, which must not exist
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,

    /// Take [database] from this configuration [default: $SELFHEAL_CONFIG, then
    /// /etc/selfheal/selfheal.toml, when no --url is given]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// A MySQL option file whose [client] gives user, password, host and socket
    #[arg(long, value_name = "FILE")]
    pub defaults_file: Option<PathBuf>,

    /// A file whose first line is the database password ($SELFHEAL_DB_PASSWORD works too)
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Build the sandbox here and keep it, instead of a temporary directory removed afterwards
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}

/// `selfheal run`: the job's evidence and an honest exit status (docs/design.md#run-wrapper).
#[derive(Debug, Args)]
#[command(
    override_usage = "selfheal run [--lock FILE] [--wait DURATION] [--heartbeat FILE] \
                      [--every DURATION] [--report FILE] -- COMMAND [ARG]...",
    after_help = "Exit status: the command's own (128+N when signal N ended it); 75 the lock \
                  was not obtained within --wait (one line on stderr names the holder); 2 bad \
                  command line; 3 the lock, heartbeat or report file cannot be used safely; \
                  126 the command cannot be executed; 127 it was not found. In the last four \
                  cases the command was not started.\nSee selfheal(1), section RUN."
)]
pub struct RunArgs {
    /// Hold an exclusive flock on FILE while the command runs (created if missing, never
    /// deleted); the command inherits it. The holder line goes only into an empty file or
    /// one that holds a line: any other file (the script itself) is locked as it is
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,

    /// Wait at most this long for the lock (e.g. 30s, 3m; at most 100years); 0 is one try
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0",
        value_parser = crate::run::parse_wait,
        allow_hyphen_values = true,
        requires = "lock"
    )]
    pub wait: Duration,

    /// Touch FILE before the command starts, then while it runs and is not stopped
    #[arg(long, value_name = "FILE")]
    pub heartbeat: Option<PathBuf>,

    /// How often to touch the heartbeat file (at least 1s, at most 100years)
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::run::parse_every,
        allow_hyphen_values = true,
        requires = "heartbeat"
    )]
    pub every: Duration,

    /// Write the execution record (JSON) to FILE, atomically, when the command starts and ends
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// The command and its arguments (after --)
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}
