//! From a parsed command line to an exit status: builds the configuration, picks the
//! reporter, runs the command, and prints a fatal error once, on stderr.

use std::io::Write;

use crate::check::{self, CheckOptions};
use crate::cli::{CheckArgs, Cli, Command, Format, WatchFlags};
use crate::config::{self, ConfigPath, Overrides, RawWatch};
use crate::error::{Error, Result};
use crate::report::{JsonReporter, Reporter, TextReporter};

/// Runs the command and returns the process exit status.
pub fn run(cli: Cli) -> u8 {
    let result = match cli.command {
        Command::Check(args) => run_check(&args),
        Command::Demo(args) => crate::demo::run(args.keep.as_deref(), &mut std::io::stdout()),
        Command::Stats(args) => crate::stats::run_command(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report_error(&e);
            e.exit_code()
        }
    }
}

/// Prints an error and its causes on stderr.
pub fn report_error(e: &Error) {
    let mut msg = format!("selfheal: error: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The watch flags as a raw watch to overlay onto the file.
pub fn overrides(flags: &WatchFlags) -> Overrides {
    let f = flags.clone();
    Overrides {
        db_url: f.db,
        timezone: f.timezone,
        watch: RawWatch {
            name: f.name,
            host: None,
            table: f.table,
            id_column: f.id_column,
            status_column: f.status_column,
            running_value: f.running_value,
            started_column: f.started_column,
            heartbeat_file: f.heartbeat_file,
            heartbeat_column: f.heartbeat_column,
            stale_after: f.stale_after,
            max_age: f.max_age,
            dead_value: f.dead_value,
            ended_column: f.ended_column,
            message_column: f.message_column,
            lock_file: f.lock_file,
            owner_column: f.owner_column,
            manual_value: f.manual_value,
            retry_value: f.retry_value,
            attempts_column: f.attempts_column,
            max_attempts: f.max_attempts,
            overtime: f.overtime,
            release_lock: f.release_lock,
            success_values: (!f.success_values.is_empty()).then_some(f.success_values),
        },
    }
}

fn run_check(args: &CheckArgs) -> Result<u8> {
    let path = ConfigPath::resolve(args.config.as_deref());
    let cfg = config::load(&path, &overrides(&args.watch), &args.watches)?;
    let opts = CheckOptions {
        dry_run: args.dry_run || args.explain,
        force: args.force,
    };
    let stdout = std::io::stdout().lock();
    let summary = match args.format {
        Format::Json => {
            let mut rep = JsonReporter {
                out: stdout,
                warnings: Vec::new(),
            };
            check::run(&cfg, &opts, &mut rep as &mut dyn Reporter)?
        }
        Format::Text => {
            let mut rep = TextReporter {
                out: stdout,
                err: std::io::stderr(),
                explain: args.explain,
                dry_run: args.dry_run || args.explain,
            };
            check::run(&cfg, &opts, &mut rep as &mut dyn Reporter)?
        }
    };
    Ok(check::exit_code(&summary))
}
