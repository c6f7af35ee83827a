//! The proposal as the configuration file it is: TOML whose every setting carries where
//! its value came from beside it, with longer words above it, and whose lines a person
//! may uncomment are written `# key = value`. Everything `init` prints is this text or
//! comments, so its whole output is a configuration that loads. Pure.

use std::fmt::Write as _;

use super::plan::{Entry, Val, WatchPlan};

/// Comment paragraphs are wrapped to this many characters.
const WIDTH: usize = 88;
/// The comment beside a setting starts at this column at the earliest…
const COMMENT_AT: usize = 36;
/// …and goes above the setting when the line would be longer than this.
const LINE_MAX: usize = 100;

/// The parts of the file.
pub struct Document<'a> {
    /// Paragraphs at the top.
    pub header: &'a [String],
    pub database: &'a [Entry],
    /// `[run]`: settings a person may want, commented out with their defaults.
    pub run: &'a [Entry],
    pub watches: &'a [WatchPlan],
}

/// The configuration text.
pub fn render(doc: &Document<'_>) -> String {
    let mut out: Vec<String> = Vec::new();
    for (i, p) in doc.header.iter().enumerate() {
        if i > 0 {
            out.push("#".into());
        }
        out.extend(comment(p));
    }
    out.push(String::new());
    out.push("[database]".into());
    for e in doc.database {
        out.extend(entry(e, false));
    }
    out.push(String::new());
    out.push("[run]".into());
    for e in doc.run {
        out.extend(entry(e, false));
    }
    for w in doc.watches {
        out.push(String::new());
        for p in &w.intro {
            out.extend(comment(p));
        }
        out.push(if w.active {
            "[[watch]]".into()
        } else {
            "# [[watch]]".into()
        });
        for e in &w.entries {
            out.extend(entry(e, !w.active));
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// A paragraph as comment lines of at most [`WIDTH`] characters (a word longer than that
/// stays whole).
pub fn comment(paragraph: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::from("#");
    for word in paragraph.split_whitespace() {
        if line.chars().count() + 1 + word.chars().count() > WIDTH && line != "#" {
            lines.push(std::mem::replace(&mut line, String::from("#")));
        }
        line.push(' ');
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// One setting: its words above it, then `key = value` and where the value came from;
/// commented out when it is off, or when its whole watch is.
fn entry(e: &Entry, watch_off: bool) -> Vec<String> {
    let mut lines: Vec<String> = e.about.iter().flat_map(|p| comment(p)).collect();
    let prefix = if e.on && !watch_off { "" } else { "# " };
    let setting = format!("{prefix}{} = {}", e.key, value(&e.value));
    let from = format!("# {}", e.from);
    let width = setting.chars().count();
    if e.from.is_empty() {
        lines.push(setting);
    } else if width.max(COMMENT_AT - 2) + 2 + from.chars().count() <= LINE_MAX {
        let pad = COMMENT_AT.saturating_sub(width).max(2);
        lines.push(format!("{setting}{}{from}", " ".repeat(pad)));
    } else {
        lines.extend(comment(&e.from));
        lines.push(setting);
    }
    lines
}

/// A value as TOML writes it.
pub fn value(v: &Val) -> String {
    match v {
        Val::Text(s) => string(s),
        Val::Int(n) => n.to_string(),
        Val::List(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|s| string(s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // Keys are validated column names: bare keys.
        Val::Map(pairs) => format!(
            "{{ {} }}",
            pairs
                .iter()
                .map(|(k, v)| format!("{k} = {}", string(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A TOML basic string: quotes and backslashes escaped, control characters as `\uXXXX`.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_toml_whatever_they_hold() {
        assert_eq!(string("a\"b\\c\nd\u{1b}"), "\"a\\\"b\\\\c\\nd\\u001B\"");
        let v = value(&Val::Map(vec![("job".into(), "full \"sync\"".into())]));
        let parsed: toml::Table = toml::from_str(&format!("m = {v}")).expect("toml");
        assert_eq!(parsed["m"]["job"].as_str(), Some("full \"sync\""));
        assert_eq!(
            value(&Val::List(vec!["a".into(), "b".into()])),
            "[\"a\", \"b\"]"
        );
    }

    #[test]
    fn where_a_value_came_from_is_beside_it_or_above_it() {
        let short = Entry::new("table", Val::Text("sync_log".into()), "from --table");
        assert_eq!(
            entry(&short, false),
            ["table = \"sync_log\"                  # from --table"]
        );
        let mut long = Entry::new(
            "heartbeat_file",
            Val::Text("/nonexistent/selfheal-set-me/a-very-long-table-name-{id}.heartbeat".into()),
            "a placeholder: set the file your job touches",
        );
        long.on = false;
        assert_eq!(
            entry(&long, false),
            [
                "# a placeholder: set the file your job touches",
                "# heartbeat_file = \"/nonexistent/selfheal-set-me/a-very-long-table-name-{id}.heartbeat\""
            ]
        );
    }

    #[test]
    fn paragraphs_wrap_at_the_width() {
        let p = "word ".repeat(40);
        let lines = comment(&p);
        assert!(lines.len() > 1);
        assert!(
            lines.iter().all(|l| l.chars().count() <= WIDTH),
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| l.starts_with("# ")));
    }
}
