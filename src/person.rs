//! What selfheal tells a person to run for a row that needs one — `selfheal show WATCH
//! ID` to see its whole record, `selfheal resolve WATCH ID --as …` to decide (docs/design.md#resolve) —
//! written the same way wherever it is said (the cron text, `--explain`, JSON, `doctor`,
//! `show`), and who that person is when they decide ([`actor`]).
//!
//! A row id comes from the database: it is written as one shell word ([`shell_word`]),
//! quoted unless it is plainly safe, so that a pasted command resolves that row and
//! nothing else. Pure, except [`actor`], which reads the environment and the user
//! database.

use std::borrow::Cow;

use crate::config::Watch;
use crate::escape::printable;
use crate::store::SqlValue;

/// `s` as one word for a POSIX shell: as it is when it holds only letters, digits and
/// `_ - . : / + , @ % =` (and does not start with `-`, which a command would take for an
/// option), else in single quotes with each `'` written `'\''`.
pub fn shell_word(s: &str) -> Cow<'_, str> {
    let plain = !s.is_empty()
        && !s.starts_with('-')
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | '-' | '.' | ':' | '/' | '+' | ',' | '@' | '%' | '=')
        });
    if plain {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("'{}'", s.replace('\'', "'\\''")))
    }
}

/// The command line this process was started with, after the program's name, as a person
/// pastes it into a `fix:` line (`check --config /etc/selfheal/shop.toml`): each word quoted
/// for a POSIX shell where it needs it, and a password written into a `--db` URL left out
/// (such a line goes to cron mail). Empty when there were no arguments.
pub fn this_command() -> String {
    command_line(std::env::args().skip(1))
}

/// [`this_command`] for these arguments.
pub fn command_line(args: impl Iterator<Item = String>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut url_next = false;
    for a in args {
        let a = if url_next {
            without_password(&a)
        } else if let Some(u) = a.strip_prefix("--db=") {
            format!("--db={}", without_password(u))
        } else {
            a
        };
        url_next = a == "--db";
        let plain = !a.is_empty()
            && a.chars().all(|c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '_' | '-' | '.' | ':' | '/' | '+' | ',' | '@' | '%' | '=')
            });
        out.push(if plain {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        });
    }
    out.join(" ")
}

/// A URL without any password in it (secrets come from `password_file` and the like).
fn without_password(u: &str) -> String {
    match url::Url::parse(u) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => u.to_string(),
    }
}

/// The decisions `selfheal resolve --as` can make for a row of `w`: `dead` always,
/// `retry` where the watch has `retry_value`, `running` only for a parked row (and only
/// where the watch has `manual_value`).
pub fn choices(w: &Watch, parked: bool) -> Vec<&'static str> {
    let mut v = vec!["dead"];
    if w.retry.is_some() {
        v.push("retry");
    }
    if parked && w.manual_value.is_some() {
        v.push("running");
    }
    v
}

/// `selfheal resolve WATCH ID --as dead|retry[|running]` for a row of `w` (parked or
/// running); `--force` for another host's row, which `resolve` refuses without it.
pub fn resolve_command(w: &Watch, id: &SqlValue, parked: bool, other_host: bool) -> String {
    format!(
        "selfheal resolve {} {} --as {}{}{}",
        w.name,
        shell_word(&id.to_string()),
        choices(w, parked).join("|"),
        if other_host { " --force" } else { "" },
        config_words()
    )
}

/// `selfheal show WATCH ID`.
pub fn show_command(watch: &str, id: &SqlValue) -> String {
    format!(
        "selfheal show {watch} {}{}",
        shell_word(&id.to_string()),
        config_words()
    )
}

/// `selfheal SUBCOMMAND…` as a person pastes it: with this process's `--config`.
pub fn selfheal_command(words: &str) -> String {
    format!("selfheal {words}{}", config_words())
}

/// The `--config FILE` this process was given, made absolute: the commands it prints for a
/// person repeat it, so that pasted anywhere they read the same configuration
/// (docs/design.md#person).
static CONFIG: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Remembers the `--config FILE` of this process's command line (`app` calls it once).
pub fn remember_config(path: Option<&std::path::Path>) {
    if let Some(p) = path {
        let _ = CONFIG.set(std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    }
}

/// ` --config FILE`, quoted for a shell, or nothing when none was given.
fn config_words() -> String {
    CONFIG.get().map_or_else(String::new, |p| {
        format!(" --config {}", shell_word(&p.display().to_string()))
    })
}

/// Who decides, as the journal keeps it ([`actor`]): the name a person is known by, and
/// beside it what the kernel says — `$SUDO_USER` is a claim anyone can make, the real uid
/// is not (docs/design.md#person).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// `$SUDO_USER` when set, else the login name of the real uid, else `uid N`; escaped
    /// ([`printable`]), so it is safe in the message column, the journal and every output.
    pub name: String,
    /// The real uid of the process.
    pub uid: u32,
    /// The login name of the real uid, when the user database has one (escaped).
    pub login: Option<String>,
    /// `name` came from `$SUDO_USER` (the environment), not from the user database.
    pub claimed: bool,
}

/// Who decides: `$SUDO_USER` when set (a person who ran selfheal through sudo, as the
/// state directory's owner), else the login name of the real uid, else `uid N` — with the
/// real uid and its login beside it.
pub fn actor() -> Actor {
    let uid = nix::unistd::getuid();
    let login = match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => Some(printable(&u.name).into_owned()),
        _ => None,
    };
    let claimed = std::env::var_os("SUDO_USER")
        .map(|u| u.to_string_lossy().trim().to_string())
        .filter(|u| !u.is_empty());
    actor_of(uid.as_raw(), login, claimed.as_deref())
}

/// [`actor`] from what it read: the real uid, its login, `$SUDO_USER`.
pub fn actor_of(uid: u32, login: Option<String>, sudo_user: Option<&str>) -> Actor {
    let (name, claimed) = match sudo_user {
        Some(u) => (printable(u).into_owned(), true),
        None => (login.clone().unwrap_or_else(|| format!("uid {uid}")), false),
    };
    Actor {
        name,
        uid,
        login,
        claimed,
    }
}

/// A person's `--note` as it is stored and shown: trimmed, escaped ([`printable`]: no
/// newline, escape sequence or bidirectional override survives); `None` when empty.
pub fn note(given: Option<&str>) -> Option<String> {
    given
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| printable(n).into_owned())
}

#[cfg(test)]
mod tests {
    /// A fix repeats the command as it was run, pasteable: words quoted where a shell needs
    /// it, a `--db` URL's password left out.
    #[test]
    fn the_command_line_as_a_fix_repeats_it() {
        let line = |a: &[&str]| command_line(a.iter().map(|s| (*s).to_string()));
        assert_eq!(
            line(&[
                "check",
                "--config",
                "/etc/selfheal/shop.toml",
                "--watch",
                "a b"
            ]),
            "check --config /etc/selfheal/shop.toml --watch 'a b'"
        );
        assert_eq!(
            line(&[
                "resolve",
                "sync",
                "7",
                "--as",
                "dead",
                "--note",
                "it's gone"
            ]),
            "resolve sync 7 --as dead --note 'it'\\''s gone'"
        );
        assert_eq!(
            line(&["check", "--db", "mysql://app:secret@db1/app"]),
            "check --db mysql://app@db1/app"
        );
        assert_eq!(
            line(&["check", "--db=mysql://app:secret@db1/app"]),
            "check --db=mysql://app@db1/app"
        );
        assert!(!line(&["check", "--db", "mysql://app:secret@db1/app"]).contains("secret"));
    }

    use super::*;

    #[test]
    fn ids_are_one_shell_word() {
        assert_eq!(shell_word("42"), "42");
        assert_eq!(shell_word("job-7"), "job-7");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("-5"), "'-5'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shell_word("a;b"), "'a;b'");
    }

    /// `$SUDO_USER` is a claim: kept as the name, marked claimed, the real uid beside it;
    /// what it holds is escaped, so it forges no line and reorders no text.
    #[test]
    fn the_actor_is_escaped_and_a_claim_is_marked() {
        let a = actor_of(
            1000,
            Some("eve".into()),
            Some("eve\u{1b}[2J\nselfheal: fake line"),
        );
        assert_eq!(a.name, "eve\\u{1b}[2J\\nselfheal: fake line");
        assert!(a.claimed);
        assert_eq!((a.uid, a.login.as_deref()), (1000, Some("eve")));
        let a = actor_of(33, Some("www-data".into()), None);
        assert_eq!((a.name.as_str(), a.claimed), ("www-data", false));
        assert_eq!(actor_of(4242, None, None).name, "uid 4242");
        assert_eq!(
            note(Some("  API back\u{202e}kcab IPA\n* * * * * root sh  ")).as_deref(),
            Some("API back\\u{202e}kcab IPA\\n* * * * * root sh")
        );
        assert_eq!(note(Some("  ")), None);
    }
}
