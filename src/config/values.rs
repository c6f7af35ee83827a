//! Validated value types used by the configuration: SQL identifiers, durations, path
//! templates. Each is checked once, when the configuration is built, so nothing downstream
//! ever sees an unchecked identifier or an unparsed duration. Pure: no I/O.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A SQL identifier that is safe to splice into a statement: letters, digits and `_`,
/// optionally one `.` separating a database (schema) name from a table name.
/// Values are never spliced; they are always bound parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    schema: Option<String>,
    name: String,
}

/// Longest identifier MySQL and MariaDB accept.
const MAX_IDENT_LEN: usize = 64;

fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENT_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Ident {
    /// A column name: one plain name.
    pub fn column(s: &str) -> Result<Self, String> {
        if plain_name(s) {
            Ok(Ident {
                schema: None,
                name: s.to_string(),
            })
        } else {
            Err(format!(
                "expected a plain column name (letters, digits and _, at most {MAX_IDENT_LEN}), got {s:?}"
            ))
        }
    }

    /// A table name: a plain name, or `database.table`.
    pub fn table(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "expected a plain table name or database.table (letters, digits and _), got {s:?}"
            )
        };
        match s.split_once('.') {
            None if plain_name(s) => Ok(Ident {
                schema: None,
                name: s.to_string(),
            }),
            Some((db, t)) if plain_name(db) && plain_name(t) => Ok(Ident {
                schema: Some(db.to_string()),
                name: t.to_string(),
            }),
            _ => Err(bad()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// True when both name the same column: column names ignore case in MySQL and SQLite.
    pub fn same_column(&self, other: &Ident) -> bool {
        self.name.eq_ignore_ascii_case(&other.name)
    }

    /// True when both may name the same table: the names equal ignoring case (as MySQL
    /// on a case-insensitive file system, and SQLite, compare them), and the databases
    /// equal or at least one left to the connection's default.
    pub fn may_be_same_table(&self, other: &Ident) -> bool {
        self.name.eq_ignore_ascii_case(&other.name)
            && match (&self.schema, &other.schema) {
                (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                _ => true,
            }
    }

    /// Quoted with the given quote character (`` ` `` for MySQL, `"` for SQLite).
    /// Safe because validation admits no quote characters at all.
    pub fn quoted(&self, q: char) -> String {
        match &self.schema {
            Some(s) => format!("{q}{s}{q}.{q}{}{q}", self.name),
            None => format!("{q}{}{q}", self.name),
        }
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A duration in humantime syntax (`90s`, `5m`, `1h 30m`); at least one second. Every
/// threshold selfheal keeps is whole seconds: `"300ms"` would silently become 0 s (every
/// heartbeat older than a second stale), so it is refused like `"0s"`. The messages name
/// no value to write instead (humantime's own "for example 90ms" named one this rejects):
/// which value fits depends on the other keys, so the fix chooses it
/// (`unit_readings`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            if unit_readings(s).is_empty() {
                format!("expected a number with a unit (s, m, h or d) after it, got {s:?}")
            } else {
                format!("{s:?} has no unit: seconds, minutes or hours? (s, m, h or d)")
            }
        }
        humantime::DurationError::UnknownUnit { unit, .. } => format!(
            "unknown unit {unit:?} in {s:?}: use s, m, h or d (seconds, minutes, hours, days)"
        ),
        _ => format!(
            "expected a duration: numbers with units (s, m, h or d), as in \"1h 30m\", got {s:?}"
        ),
    })?;
    if d.is_zero() {
        return Err(format!("expected a positive duration, got {s:?}"));
    }
    if d < Duration::from_secs(1) {
        return Err(format!(
            "expected a duration of at least one second (\"1s\"), got {s:?}"
        ));
    }
    Ok(d)
}

/// What a number written without a unit (`"90"`) may have meant: the same number of
/// seconds, minutes and hours, as the configuration would write each (`90s`, `90m`,
/// `90h`), those of at least one second only. Empty for anything but a whole number.
pub fn unit_readings(s: &str) -> Vec<(String, Duration)> {
    let s = s.trim();
    let n = match s.parse::<u64>() {
        Ok(n) if n > 0 && s.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Vec::new(),
    };
    [("s", 1), ("m", 60), ("h", 3600)]
        .into_iter()
        .filter_map(|(unit, secs)| {
            let d = Duration::from_secs(n.checked_mul(secs)?);
            Some((format!("{n}{unit}"), d))
        })
        .collect()
}

/// Formats a duration the way the configuration writes it (`4h`, `5m 30s`).
pub fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// An absolute path that may contain the placeholder `{id}`, replaced by a row's id.
/// The id is validated before it enters the path, so a row can never point selfheal at
/// another directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    raw: String,
}

impl PathTemplate {
    pub fn parse(s: &str) -> Result<Self, String> {
        if !Path::new(s).is_absolute() {
            return Err(format!(
                "expected an absolute path (cron's working directory is not yours), got {s:?}"
            ));
        }
        let rest = s.replace("{id}", "");
        if rest.contains('{') || rest.contains('}') {
            return Err(format!("expected no placeholder but {{id}}, got {s:?}"));
        }
        Ok(PathTemplate { raw: s.to_string() })
    }

    pub fn has_id(&self) -> bool {
        self.raw.contains("{id}")
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The path for one row. Fails, naming the id, when the id could change the directory
    /// (anything but letters, digits, `_`, `-`, and `.` not in first place).
    pub fn render(&self, id: &str) -> Result<PathBuf, String> {
        if !self.has_id() {
            return Ok(PathBuf::from(&self.raw));
        }
        if !safe_path_id(id) {
            return Err(format!(
                "id {id:?} cannot be used in the path template {:?}",
                self.raw
            ));
        }
        Ok(PathBuf::from(self.raw.replace("{id}", id)))
    }
}

fn safe_path_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_accept_plain_names_only() {
        for ok in ["sync_log", "id", "T1", "_x", "appdb.sync_log", "1col"] {
            assert!(Ident::table(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "sync_log; DROP TABLE x",
            "a b",
            "a.b.c",
            ".t",
            "t.",
            "`t`",
            "t\"",
            "t--",
            "naïve",
            &"x".repeat(65),
        ] {
            assert!(Ident::table(bad).is_err(), "{bad:?}");
        }
        assert!(Ident::column("db.col").is_err());
        assert_eq!(Ident::table("a.b").unwrap().quoted('`'), "`a`.`b`");
        assert_eq!(Ident::column("status").unwrap().quoted('"'), "\"status\"");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("0s").is_err());
        for short in ["300ms", "999ms", "1us", "5ns"] {
            let e = parse_duration(short).expect_err(short);
            assert!(
                e.contains("at least one second") && e.contains(short),
                "{e}"
            );
        }
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("1000ms").unwrap(), Duration::from_secs(1));
        assert!(parse_duration("5 minutes please").is_err());
        // A number alone: no unit, and no value named that the rules would reject.
        let e = parse_duration("90").expect_err("no unit");
        assert_eq!(
            e,
            "\"90\" has no unit: seconds, minutes or hours? (s, m, h or d)"
        );
        let e = parse_duration("5x").expect_err("unknown unit");
        assert!(e.starts_with("unknown unit \"x\" in \"5x\""), "{e}");
        for s in ["90", "5x", "1h 30", "x", ""] {
            let e = parse_duration(s).expect_err(s);
            assert!(!e.contains("ms") && !e.contains("90s"), "{s:?}: {e}");
        }
        let readings: Vec<String> = unit_readings(" 90 ").into_iter().map(|r| r.0).collect();
        assert_eq!(readings, ["90s", "90m", "90h"]);
        for none in ["0", "1.5", "-3", "+3", "5m", ""] {
            assert!(unit_readings(none).is_empty(), "{none:?}");
        }
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(fmt_duration(Duration::from_secs(14400)), "4h");
    }

    #[test]
    fn path_templates() {
        let t = PathTemplate::parse("/run/app/job-{id}.hb").unwrap();
        assert_eq!(t.render("42").unwrap(), PathBuf::from("/run/app/job-42.hb"));
        assert_eq!(
            t.render("a1b2-c3_d.e").unwrap(),
            PathBuf::from("/run/app/job-a1b2-c3_d.e.hb")
        );
        for bad in ["../etc/passwd", "..", "a/b", "", ".hidden", "x y", "a\0b"] {
            assert!(t.render(bad).is_err(), "{bad:?}");
        }
        assert!(PathTemplate::parse("relative/{id}").is_err());
        assert!(PathTemplate::parse("/x/{name}").is_err());
        let fixed = PathTemplate::parse("/x/progress.json").unwrap();
        assert!(!fixed.has_id());
        assert_eq!(
            fixed.render("../../x").unwrap(),
            PathBuf::from("/x/progress.json")
        );
    }
}
