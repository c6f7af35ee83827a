//! What `/etc/cron.d/selfheal` says about who runs selfheal: the user field of each active
//! line that runs it. `check` and `doctor` run by hand as another user (root, most often)
//! say so, and a fix names the user that matters — the one cron runs selfheal as.
//!
//! I/O: reads that one file; a missing or unreadable file says nothing (no warning rests
//! on a guess). The parsing ([`users_in`]) is pure.

use std::path::Path;

/// The cron line the package installs.
pub const CRON_FILE: &str = "/etc/cron.d/selfheal";

/// The users cron runs selfheal as, in the order of their lines, without repeats; empty
/// when the file is missing, unreadable or runs selfheal nowhere.
pub fn users() -> Vec<String> {
    std::fs::read_to_string(Path::new(CRON_FILE))
        .map(|t| users_in(&t))
        .unwrap_or_default()
}

/// The user field of every line of a system crontab (`MIN HOUR DOM MON DOW USER CMD`, or
/// `@daily USER CMD`) whose command runs selfheal. Comments, blank lines and variable
/// assignments (`MAILTO=root`) are skipped.
pub fn users_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || is_assignment(line) {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (user, command) = if fields[0].starts_with('@') {
            (fields.get(1), fields.get(2..))
        } else {
            (fields.get(5), fields.get(6..))
        };
        let (Some(user), Some(command)) = (user, command) else {
            continue;
        };
        let runs_selfheal = command
            .iter()
            .any(|w| w.rsplit('/').next().is_some_and(|name| name == "selfheal"));
        if runs_selfheal && !out.iter().any(|u| u == user) {
            out.push((*user).to_string());
        }
    }
    out
}

/// `NAME=value` (cron allows blanks around `=`).
fn is_assignment(line: &str) -> bool {
    let rest = line.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
    rest.len() < line.len() && rest.trim_start().starts_with('=')
}

/// A warning for a run by root while cron runs selfheal as another user: what root creates
/// in `state_dir` (the journal, the run lock, `last-run.json`) would be root's, which the
/// cron runs cannot write, and root sees files the cron user may not. `None` for any other
/// user, when cron runs selfheal as root too, or when the cron file says nothing.
/// `command` is how to run the same thing as that user (`check --explain`, `doctor`).
pub fn root_warning(command: &str) -> Option<(String, String)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    root_warning_for(&users(), command)
}

/// [`root_warning`] for the users of a cron file: `(what is wrong, the fix)`.
pub fn root_warning_for(users: &[String], command: &str) -> Option<(String, String)> {
    let first = users.first()?;
    if users.iter().any(|u| u == "root") {
        return None;
    }
    Some((
        format!(
            "running as root, but {CRON_FILE} runs selfheal as {first}: root sees files \
             {first} may not, and what a real run creates in state_dir (the journal, the run \
             lock) would be root's, which {first} cannot write"
        ),
        format!("run it as {first}: runuser -u {first} -- selfheal {command}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_fields_of_lines_that_run_selfheal() {
        let text = "# comment\nMAILTO=root\nPATH = /usr/bin:/bin\n\n\
                    */10 * * * * www-data [ -x /usr/bin/selfheal ] && /usr/bin/selfheal check\n\
                    5 * * * * shop /usr/bin/selfheal check --config /etc/selfheal/shop.toml\n\
                    @daily selfheal selfheal stats\n\
                    * * * * * root /usr/local/bin/other-tool\n\
                    */10 * * * * www-data /usr/bin/selfheal check --quiet\n";
        assert_eq!(users_in(text), ["www-data", "shop", "selfheal"]);
        assert!(users_in("# */10 * * * * www-data /usr/bin/selfheal check\n").is_empty());
        assert!(users_in("*/10 * * * *\n").is_empty());
    }

    #[test]
    fn root_is_warned_only_when_cron_runs_selfheal_as_someone_else() {
        let www = vec!["www-data".to_string()];
        let (what, fix) = root_warning_for(&www, "doctor").expect("a warning");
        assert!(what.contains("runs selfheal as www-data"), "{what}");
        assert_eq!(
            fix,
            "run it as www-data: runuser -u www-data -- selfheal doctor"
        );
        assert_eq!(root_warning_for(&[], "doctor"), None);
        assert_eq!(
            root_warning_for(&["www-data".into(), "root".into()], "doctor"),
            None
        );
    }
}
