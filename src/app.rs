//! From a parsed command line to an exit status: builds the configuration, picks the
//! reporter, runs the command, and prints a fatal error once, on stderr, followed by the
//! fix that fits it (`selfheal: fix: …`, from [`crate::fix`]). A check run as root while
//! cron runs selfheal as another user is warned about first ([`crate::cron`]).

use std::io::Write;

use crate::check::{self, CheckOptions};
use crate::cli::{CheckArgs, Cli, Command, Format, RunArgs, Shell, WatchFlags};
use crate::config::{self, Config, ConfigPath, Overrides};
use crate::error::{Error, Result, exit};
use crate::escape::printable;
use crate::eventlog::{self, Event, EventLog, Severity};
use crate::report::{
    JsonReporter, Parked, Reporter, RowReport, Summary, TextReporter, Unparked, WatchInfo,
};

/// Runs the command and returns the process exit status.
pub fn run(cli: Cli) -> u8 {
    // The fix lines repeat the command as it was run, arguments and --config included.
    let line = crate::person::this_command();
    let command = if line.is_empty() {
        command_name(&cli.command)
    } else {
        line.as_str()
    };
    crate::person::remember_config(match &cli.command {
        Command::Check(a) => a.config.as_deref(),
        Command::Doctor(a) => a.config.as_deref(),
        Command::Stats(a) => a.config.as_deref(),
        Command::Show(a) => a.config.as_deref(),
        Command::Resolve(a) => a.config.as_deref(),
        _ => None,
    });
    let result = match cli.command {
        Command::Check(args) => run_check(&args),
        Command::Doctor(args) => Ok(crate::doctor::run(
            args.config.as_deref(),
            &mut std::io::stdout().lock(),
        )),
        Command::Demo(args) => crate::demo::run(args.keep.as_deref(), &mut std::io::stdout()),
        Command::Init(args) => crate::init::run(&init_options(args), &mut std::io::stdout().lock()),
        Command::Stats(args) => crate::stats::run_command(&stats_options(args)),
        Command::Run(args) => Ok(crate::run::main(&run_options(args))),
        Command::Show(args) => crate::show::run(&show_options(args), &mut std::io::stdout().lock()),
        Command::Resolve(args) => {
            crate::resolve::run(&resolve_options(args), &mut std::io::stdout().lock())
        }
        Command::Completions(args) => completions(args.shell, &mut std::io::stdout().lock()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report_error(&e, command);
            e.exit_code()
        }
    }
}

/// The subcommand, as a fix tells a person to run it again.
fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Check(_) => "check",
        Command::Doctor(_) => "doctor",
        Command::Demo(_) => "demo",
        Command::Init(_) => "init",
        Command::Stats(_) => "stats",
        Command::Completions(_) => "completions",
        Command::Run(_) => "run",
        Command::Show(_) => "show",
        Command::Resolve(_) => "resolve",
    }
}

/// Prints an error and its causes on stderr, then the fix that fits it, if one does:
/// `selfheal: error: …` and `selfheal: fix: …`.
pub fn report_error(e: &Error, command: &str) {
    let mut err = std::io::stderr().lock();
    // A driver's message may quote a value from a row: one line each, whatever it holds.
    let _ = writeln!(err, "selfheal: error: {}", printable(&e.full_message()));
    if let Some(fix) = crate::fix::for_error(e, command) {
        let _ = writeln!(err, "selfheal: fix: {}", printable(&fix));
    }
}

/// The watch flags as a raw watch to overlay onto the file.
pub fn overrides(flags: &WatchFlags) -> Overrides {
    Overrides {
        db_url: flags.db.clone(),
        timezone: flags.timezone.clone(),
        watch: flags.keys.0.clone(),
    }
}

/// `selfheal init`'s options, from its command line.
fn init_options(args: crate::cli::InitArgs) -> crate::init::InitOptions {
    crate::init::InitOptions {
        url: args.url,
        table: args.table,
        write: args.write,
        config: args.config,
        defaults_file: args.defaults_file,
        password_file: args.password_file,
    }
}

/// `selfheal run`'s options, from its command line.
fn run_options(args: RunArgs) -> crate::run::Options {
    crate::run::Options {
        lock: args.lock,
        wait: args.wait,
        heartbeat: args.heartbeat,
        every: args.every,
        report: args.report,
        command: args.command,
    }
}

/// Writes the completion script for `shell` (the packaging calls this).
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<u8> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let name = cmd.get_name().to_string();
    match shell {
        Shell::Bash => clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, name, out),
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, name, out),
        Shell::Fish => clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, name, out),
    }
    Ok(exit::OK)
}

/// Passes everything to the reporter and, with `--log`, sends changes, rows that need a
/// person and warnings to the log too.
struct Logged<'a> {
    inner: &'a mut dyn Reporter,
    log: &'a mut EventLog,
    cfg: &'a Config,
    /// `--quiet`: the inner reporter prints nothing.
    quiet: bool,
}

impl Reporter for Logged<'_> {
    fn watch(&mut self, w: &WatchInfo) {
        self.inner.watch(w);
    }

    fn row(&mut self, r: &RowReport) {
        let running = self
            .cfg
            .watches
            .iter()
            .find(|w| w.name == r.watch)
            .map_or("running", |w| w.running_value.as_str());
        if let Some(e) = eventlog::row_event(r, running) {
            self.log.send(&e);
        }
        self.inner.row(r);
    }

    fn warning(&mut self, msg: &str) {
        self.log.send(&Event {
            severity: Severity::Warning,
            message: format!("warning: {msg}"),
            fields: Vec::new(),
        });
        self.inner.warning(msg);
    }

    /// The log gets every run's warnings; only the cron text is spared the repeats.
    fn warning_already_told(&mut self, msg: &str) {
        self.log.send(&Event {
            severity: Severity::Warning,
            message: format!("warning: {msg}"),
            fields: Vec::new(),
        });
        self.inner.warning_already_told(msg);
    }

    fn parked(&mut self, p: &Parked) {
        self.inner.parked(p);
    }

    fn unparked(&mut self, u: &Unparked) {
        if u.applied {
            self.log.send(&Event {
                severity: Severity::Notice,
                message: format!(
                    "watch={} id={} {}→{} action=recovered verdict={} reason=\"{}\"",
                    u.watch,
                    u.id,
                    u.from,
                    u.to,
                    u.decision.verdict.as_str(),
                    u.reason
                ),
                fields: vec![
                    ("SELFHEAL_WATCH", u.watch.clone()),
                    ("SELFHEAL_ID", u.id.to_string()),
                    ("SELFHEAL_ACTION", "recovered".to_string()),
                    ("SELFHEAL_FROM", u.from.clone()),
                    ("SELFHEAL_TO", u.to.clone()),
                    ("SELFHEAL_REASON", u.reason.clone()),
                ],
            });
        }
        self.inner.unparked(u);
    }

    fn spoke(&self) -> bool {
        self.inner.spoke()
    }

    fn log_status(&self) -> Option<crate::report::LogStatus> {
        Some(self.log.status())
    }

    /// Said even by a `--quiet` run (only when due: once, then per remind_every): it
    /// leaves everything else to this log.
    fn log_failure(&mut self, msg: &str) {
        if self.quiet {
            let _ = writeln!(std::io::stderr(), "selfheal: warning: {}", printable(msg));
        } else {
            self.inner.warning(msg);
        }
    }

    fn finish(&mut self, s: &Summary) {
        self.inner.finish(s);
    }
}

fn run_check(args: &CheckArgs) -> Result<u8> {
    let path = ConfigPath::resolve(args.config.as_deref());
    let cfg = config::load(&path, &overrides(&args.watch), &args.watches)?;
    let dry_run = args.dry_run || args.explain;
    let opts = CheckOptions {
        dry_run,
        force: args.force,
        // The cron text (a real run printing text): unchanged problems once per
        // remind_every. JSON, --explain, --dry-run and --quiet show or skip everything.
        remind: args.format == Format::Text && !dry_run && !args.quiet,
    };
    let stdout = std::io::stdout().lock();
    let mut json;
    let mut text;
    let mut quiet;
    let rep: &mut dyn Reporter = match (args.format, args.quiet) {
        (_, true) => {
            quiet = TextReporter {
                out: std::io::sink(),
                err: std::io::sink(),
                explain: false,
                dry_run: opts.dry_run,
                spoke: false,
                lines: crate::report::text::RowLines::default(),
            };
            &mut quiet
        }
        (Format::Json, false) => {
            json = JsonReporter {
                out: stdout,
                warnings: Vec::new(),
            };
            &mut json
        }
        (Format::Text, false) => {
            text = TextReporter {
                out: stdout,
                err: std::io::stderr(),
                explain: args.explain,
                dry_run: opts.dry_run,
                spoke: false,
                lines: crate::report::text::RowLines::default(),
            };
            &mut text
        }
    };
    if let Some((what, fix)) = crate::cron::root_warning(&check_command(args)) {
        rep.warning(&format!("{what}; fix: {fix}"));
    }
    let Some(target) = args.log else {
        return check::run(&cfg, &opts, rep).map(|s| check::exit_code(&s));
    };
    let mut log = EventLog::open(log_target(target));
    let result = check::run(
        &cfg,
        &opts,
        &mut Logged {
            inner: rep,
            log: &mut log,
            cfg: &cfg,
            quiet: args.quiet,
        },
    );
    if let Err(e) = &result {
        log.send(&Event {
            severity: Severity::Err,
            message: format!("error: {e}"),
            fields: Vec::new(),
        });
    }
    result.map(|s| check::exit_code(&s))
}

/// This check's command line, as a fix tells a person to run it as another user.
fn check_command(args: &CheckArgs) -> String {
    let mut c = String::from("check");
    if args.explain {
        c.push_str(" --explain");
    } else if args.dry_run {
        c.push_str(" --dry-run");
    }
    if let Some(p) = &args.config {
        c.push_str(" --config ");
        c.push_str(&p.display().to_string());
    }
    c
}

/// `--log`, as the library names it.
fn log_target(t: crate::cli::LogTarget) -> eventlog::LogTarget {
    match t {
        crate::cli::LogTarget::Syslog => eventlog::LogTarget::Syslog,
        crate::cli::LogTarget::Journald => eventlog::LogTarget::Journald,
    }
}

/// `selfheal stats`' flags, as the library takes them.
fn stats_options(args: crate::cli::StatsArgs) -> crate::stats::StatsOptions {
    crate::stats::StatsOptions {
        config: args.config,
        watches: args.watches,
        format: format(args.format),
    }
}

/// The library's form of an output format.
fn format(f: Format) -> crate::report::Format {
    match f {
        Format::Text => crate::report::Format::Text,
        Format::Json => crate::report::Format::Json,
    }
}

/// `selfheal show`'s arguments, as the library takes them.
fn show_options(args: crate::cli::ShowArgs) -> crate::show::ShowOptions {
    crate::show::ShowOptions {
        config: args.config,
        watch: args.watch,
        id: args.id,
        format: format(args.format),
        all: args.all,
    }
}

/// `selfheal resolve`'s arguments, as the library takes them.
fn resolve_options(args: crate::cli::ResolveArgs) -> crate::resolve::ResolveOptions {
    use crate::resolve::Resolution;
    crate::resolve::ResolveOptions {
        config: args.config,
        watch: args.watch,
        ids: args.ids,
        resolution: match args.decision {
            crate::cli::Resolution::Dead => Resolution::Dead,
            crate::cli::Resolution::Retry => Resolution::Retry,
            crate::cli::Resolution::Running => Resolution::Running,
        },
        note: args.note,
        dry_run: args.dry_run,
        force: args.force,
        yes: args.yes,
    }
}
