//! `selfheal doctor`: everything a first run depends on, checked one line at a time, each
//! failure with the fix that fits its cause and the running user ([`crate::fix`]). This
//! file runs the checks in order and prints each [`Finding`] as it comes; the checks live
//! beside it, one file per concern.
//!
//! Exit status, as `check`'s where they meet: 0 when all pass (advice included), 1 on any
//! warning or failure, 2 for a bad configuration or a table or column the database lacks,
//! 3 when the database cannot be reached.
//!
//! Read-only: opens the database read-only where it can, writes no row, creates no file,
//! and takes no lock, not even its own run lock (a cron run starting meanwhile must not
//! exit 75 because someone ran `doctor`).

use std::io::Write;
use std::path::Path;

use crate::config::{self, ConfigPath, Overrides};
use crate::error::{Error, Usage, exit};
use crate::escape::printable;
use crate::host::Host;
use crate::probe::owner::PidNamespace;

mod configuration;
mod database;
mod files;
mod hosts;
mod max_age;
mod own_files;
mod rows;
mod run_files;
mod schema;

use configuration::{cron_user_finding, no_watch_finding, secret_findings};
use database::database_checks;
use files::{heartbeat_finding, lock_dir_finding};
use hosts::{host_local_finding, pid_namespace_finding};
use own_files::{log_finding, metrics_finding, run_lock_finding, state_dir_finding};

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Pass,
    /// Advice: nothing is wrong with this setup as it is, but a way it is often grown
    /// would make something wrong (docs/design.md#hosts). Leaves the exit status as it is.
    Advice,
    /// Works, but an operator should look.
    Warn,
    Fail,
}

/// One line of doctor's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub mark: Mark,
    pub subject: String,
    pub detail: String,
    pub fix: Option<String>,
}

impl Finding {
    fn pass(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            mark: Mark::Pass,
            subject: subject.into(),
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Warn,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn advice(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Advice,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Fail,
            subject: subject.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// `✓ subject: detail`, `✗ subject: detail; fix: …`, `i subject: detail; advice: …` —
    /// one line, whatever a value from the database or a driver's message in it holds
    /// (control characters escaped).
    pub fn render(&self) -> String {
        let mark = match self.mark {
            Mark::Pass => "✓",
            Mark::Advice => "i",
            Mark::Warn => "!",
            Mark::Fail => "✗",
        };
        let fix_word = if self.mark == Mark::Advice {
            "advice"
        } else {
            "fix"
        };
        let line = match &self.fix {
            Some(fix) => format!(
                "{mark} {}: {}; {fix_word}: {fix}",
                self.subject, self.detail
            ),
            None => format!("{mark} {}: {}", self.subject, self.detail),
        };
        printable(&line).into_owned()
    }
}

/// Collects findings and prints each at once (a slow database must not hide the rest).
struct Report<'a> {
    out: &'a mut dyn Write,
    findings: Vec<Finding>,
}

impl Report<'_> {
    fn add(&mut self, f: Finding) {
        let _ = writeln!(self.out, "{}", f.render());
        self.findings.push(f);
    }
}

/// Runs every check; returns the exit status: 0 all pass (advice included), 1 any warning
/// or failure, 2 the configuration is bad, 3 the database cannot be reached.
/// How a fix tells a person to run doctor again: with the `--config` it was given.
static AGAIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// This doctor's command line, as a fix repeats it (`doctor --config /etc/selfheal/x.toml`).
pub(crate) fn again() -> &'static str {
    AGAIN.get().map_or("doctor", String::as_str)
}

pub fn run(config_flag: Option<&Path>, out: &mut dyn Write) -> u8 {
    let _ = AGAIN.set(match config_flag {
        Some(p) => crate::person::command_line(
            ["doctor", "--config"]
                .into_iter()
                .map(str::to_string)
                .chain(std::iter::once(p.display().to_string())),
        ),
        None => "doctor".to_string(),
    });
    let mut rep = Report {
        out,
        findings: Vec::new(),
    };
    let path = ConfigPath::resolve(config_flag);
    let cfg = match config::load(&path, &Overrides::default(), &[]) {
        Ok(c) => c,
        Err(e) => {
            let fix = match &e {
                Error::Usage(Usage::NoConfig { .. }) => {
                    "give --config FILE or set SELFHEAL_CONFIG".to_string()
                }
                _ => crate::fix::for_error(&e, again())
                    .unwrap_or_else(|| "correct it, then run selfheal doctor again".to_string()),
            };
            rep.add(Finding::fail("configuration", e.to_string(), fix));
            return e.exit_code();
        }
    };
    rep.add(Finding::pass(
        "configuration",
        format!(
            "{} parses: {} watch{}",
            cfg.source
                .as_ref()
                .map_or("the command line".into(), |p| p.display().to_string()),
            cfg.watches.len(),
            if cfg.watches.len() == 1 { "" } else { "es" }
        ),
    ));
    if let Some(f) = no_watch_finding(&cfg) {
        rep.add(f);
    }
    if let Some(f) = cron_user_finding() {
        rep.add(f);
    }
    for f in secret_findings(&cfg) {
        rep.add(f);
    }
    let host = Host::current().known_as(&cfg.run.host_names);
    // 3 when the database cannot be reached, 2 when it lacks what the configuration names.
    let db_status = database_checks(&cfg, &host, &mut rep).err();
    for w in &cfg.watches {
        let here = w.host.as_ref().is_none_or(|h| host.is_me(h));
        if !here {
            rep.add(Finding::pass(
                format!("watch {}: host", w.name),
                format!(
                    "it runs on {}; this is {}: its files are checked there",
                    w.host.as_deref().unwrap_or(""),
                    host.name
                ),
            ));
            continue;
        }
        if let Some(f) = host_local_finding(w, &host) {
            rep.add(f);
        }
        if let Some(t) = &w.heartbeat_file {
            rep.add(heartbeat_finding(w, t));
        }
        if let Some(t) = &w.lock_file {
            rep.add(lock_dir_finding(w, t));
            if let Some(f) = run_files::finding(w, t) {
                rep.add(f);
            }
        }
    }
    if let Some(f) = pid_namespace_finding(&cfg, PidNamespace::current()) {
        rep.add(f);
    }
    rep.add(run_lock_finding(&cfg.run.lock_file, &cfg.run.state_dir));
    rep.add(state_dir_finding(&cfg.run.state_dir));
    if let Some(f) = log_finding(&cfg.run.state_dir) {
        rep.add(f);
    }
    if let Some(m) = &cfg.run.metrics_file {
        rep.add(metrics_finding(m));
    }
    if let Some(code) = db_status {
        code
    } else if rep
        .findings
        .iter()
        .any(|f| matches!(f.mark, Mark::Warn | Mark::Fail))
    {
        exit::ATTENTION
    } else {
        exit::OK
    }
}

/// The login name and uid selfheal runs as, for messages.
fn me() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid).ok().flatten() {
        Some(u) => format!("{} (uid {uid})", u.name),
        None => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::database::offset_text;
    use super::*;

    #[test]
    fn lines_render_with_marks_and_fixes() {
        assert_eq!(
            Finding::pass("database", "mariadb 10.11").render(),
            "✓ database: mariadb 10.11"
        );
        assert_eq!(
            Finding::fail("watch w: index", "none", "CREATE INDEX x ON t (s)").render(),
            "✗ watch w: index: none; fix: CREATE INDEX x ON t (s)"
        );
        assert_eq!(
            Finding::warn("a", "id=b\nc\u{1b}", "d").render(),
            "! a: id=b\\nc\\u{1b}; fix: d"
        );
        assert_eq!(offset_text(8 * 3600), "+08:00");
        assert_eq!(offset_text(-(5 * 3600 + 1800)), "-05:30");
    }
}
