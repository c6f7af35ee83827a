//! MySQL option files (`my.cnf`, `debian.cnf`, `~/.my.cnf`) read the way the mysql client
//! reads them, for the connection settings selfheal needs: user, password, host, port and
//! socket.
//!
//! [`parse`] is pure: one file's text to a list of lines (groups, options, `!include`,
//! `!includedir`), following MariaDB's `mysys/my_default.c` rule for rule — full-line
//! comments (`#`, `;`), end-of-line `#` comments outside quotes, one pair of matching
//! quotes around a value removed, the escapes `\n \t \r \b \s \" \' \\`, an unknown escape
//! kept as written, group names matched without regard to case, an option before any group
//! an error. [`load`] reads a file and what it includes (`!includedir` takes only `*.cnf`,
//! in name order; a missing or unreadable included file is skipped, as is a world-writable
//! one, with a note; at most 10 levels deep) and keeps the options of the client groups in
//! file order, so that later values win. No error message here ever contains an option's
//! value: a line of an option file may hold a password.

use std::fmt;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The groups the MariaDB `mysql` client reads (`mariadb --help`), in no particular order:
/// options are applied in file order whatever their group.
pub const CLIENT_GROUPS: [&str; 5] = [
    "client",
    "client-server",
    "client-mariadb",
    "mysql",
    "mariadb-client",
];

/// How deep `!include` may nest, as in mysys.
const MAX_DEPTH: usize = 10;

/// One meaningful line of an option file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `[name]`, as written between the brackets (trailing blanks removed).
    Group(String),
    /// `key` or `key = value` (value unquoted and unescaped).
    Option { key: String, value: Option<String> },
    /// `!include PATH`.
    Include(String),
    /// `!includedir DIR`.
    IncludeDir(String),
}

/// A line the mysql client would refuse. `message` never contains a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

fn is_space(c: char) -> bool {
    // my_isspace with latin1: space, \t \n \v \f \r.
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Cuts a `#` comment that is not inside quotes (mysys `remove_end_comment`).
fn remove_end_comment(s: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut escape = false;
    for (i, c) in s.char_indices() {
        if (c == '\'' || c == '"') && !escape {
            match quote {
                None => quote = Some(c),
                Some(q) if q == c => quote = None,
                Some(_) => {}
            }
        }
        if quote.is_none() && c == '#' {
            // `i` is where the '#' starts: always a character boundary.
            return s.get(..i).unwrap_or(s);
        }
        escape = quote.is_some() && c == '\\' && !escape;
    }
    s
}

/// A value as written after `=`: blanks trimmed, one pair of matching quotes removed,
/// escapes resolved.
fn unquote(raw: &str) -> String {
    let v = raw.trim_matches(is_space);
    let chars: Vec<char> = v.chars().collect();
    let inner: &[char] = match (chars.first(), chars.last()) {
        (Some(&f), Some(&l)) if (f == '"' || f == '\'') && chars.len() > 1 && f == l => {
            &chars[1..chars.len() - 1]
        }
        _ => &chars,
    };
    let mut out = String::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c == '\\' && i + 1 < inner.len() {
            i += 1;
            match inner[i] {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                's' => out.push(' '),
                '"' => out.push('"'),
                '\'' => out.push('\''),
                '\\' => out.push('\\'),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// `!include`/`!includedir` argument: the rest of the line, blanks trimmed; no comments.
fn directive_arg(rest: &str, keyword: &str, line: usize) -> Result<String, ParseError> {
    let arg = rest.trim_matches(is_space);
    if arg.is_empty() {
        return Err(ParseError {
            line,
            message: format!("'!{keyword}' without a path"),
        });
    }
    Ok(arg.to_string())
}

/// Parses one option file's text. Line numbers start at 1.
pub fn parse(text: &str) -> Result<Vec<(usize, Line)>, ParseError> {
    let mut out = Vec::new();
    let mut found_group = false;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let s = raw.trim_start_matches(is_space);
        if s.is_empty() || s.starts_with('#') || s.starts_with(';') {
            continue;
        }
        if let Some(d) = s.strip_prefix('!') {
            let d = d.trim_start_matches(is_space);
            let keyword_then_space = |kw: &str| {
                d.strip_prefix(kw)
                    .filter(|rest| rest.starts_with(is_space) || rest.is_empty())
            };
            if let Some(rest) = keyword_then_space("includedir") {
                out.push((
                    line,
                    Line::IncludeDir(directive_arg(rest, "includedir", line)?),
                ));
            } else if let Some(rest) = keyword_then_space("include") {
                out.push((line, Line::Include(directive_arg(rest, "include", line)?)));
            }
            // Any other directive is ignored, as the mysql client does.
            continue;
        }
        if let Some(g) = s.strip_prefix('[') {
            let Some((name, _)) = g.split_once(']') else {
                return Err(ParseError {
                    line,
                    message: "a group line without ']'".into(),
                });
            };
            found_group = true;
            out.push((line, Line::Group(name.trim_end_matches(is_space).into())));
            continue;
        }
        if !found_group {
            return Err(ParseError {
                line,
                message: "an option before any [group]".into(),
            });
        }
        let body = remove_end_comment(s);
        let (key, value) = match body.split_once('=') {
            Some((key, value)) => (key, Some(unquote(value))),
            None => (body, None),
        };
        out.push((
            line,
            Line::Option {
                key: key.trim_end_matches(is_space).to_string(),
                value,
            },
        ));
    }
    Ok(out)
}

/// An option of a client group, where it was found.
#[derive(Clone, PartialEq, Eq)]
pub struct Opt {
    /// Normalised: `_` as `-`, without a `loose-` prefix.
    pub key: String,
    pub value: Option<String>,
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Debug for Opt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = match (&self.value, self.key.as_str()) {
            (Some(_), "password") => Some("***"),
            (v, _) => v.as_deref(),
        };
        write!(
            f,
            "{}:{}: {}={:?}",
            self.file.display(),
            self.line,
            self.key,
            value
        )
    }
}

/// Why an option file could not be used. Never contains a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    pub message: String,
    /// For a file that could not be read at all: the kind of the failure and the OS
    /// error number, so that a caller can tell "missing" from "not yours to read".
    pub io: Option<(ErrorKind, Option<i32>)>,
}

impl LoadError {
    /// The I/O failure that kept the file from being read, if that is what happened.
    pub fn io_error(&self) -> Option<std::io::Error> {
        self.io.map(|(kind, raw)| match raw {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::from(kind),
        })
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

/// Everything read from one option file and its includes.
#[derive(Debug, Clone, Default)]
pub struct OptionSet {
    /// Options of [`CLIENT_GROUPS`], in file order.
    pub options: Vec<Opt>,
    /// Files read, in order.
    pub files: Vec<PathBuf>,
    /// Files skipped and why (missing includes are skipped silently, as by mysql).
    pub notes: Vec<String>,
}

impl OptionSet {
    /// The last value of `key` (later values win), with where it came from. A key given
    /// without a value (`password` alone) yields `Some((None, …))`.
    pub fn last(&self, key: &str) -> Option<&Opt> {
        self.options.iter().rev().find(|o| o.key == key)
    }
}

fn normalise_key(k: &str) -> String {
    let k = k.replace('_', "-");
    match k.strip_prefix("loose-") {
        Some(rest) => rest.to_string(),
        None => k,
    }
}

fn world_writable(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && meta.permissions().mode() & 0o002 != 0
}

/// Reads `path` as a required option file (the mysql client's `--defaults-file`): a
/// missing, unreadable or world-writable file is an error.
pub fn load(path: &Path) -> Result<OptionSet, LoadError> {
    let err = |m: String| LoadError {
        file: path.to_path_buf(),
        message: m,
        io: None,
    };
    let unreadable = |e: std::io::Error| LoadError {
        file: path.to_path_buf(),
        message: format!("cannot read it: {e}"),
        io: Some((e.kind(), e.raw_os_error())),
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if world_writable(&meta) {
        return Err(err(
            "is world-writable; the mysql client ignores such a file, and so does selfheal \
             (chmod o-w it)"
                .into(),
        ));
    }
    let mut set = OptionSet::default();
    read_into(path, 0, &mut set)?.map_err(unreadable)?;
    Ok(set)
}

/// Reads `path` as an optional option file (`~/.my.cnf`): `Ok(None)` when it does not
/// exist; unreadable or world-writable files are skipped with a note, as by mysql.
pub fn load_optional(path: &Path) -> Result<Option<OptionSet>, LoadError> {
    let mut set = OptionSet::default();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            set.notes.push(format!("{}: skipped: {e}", path.display()));
            return Ok(Some(set));
        }
        Ok(m) if world_writable(&m) => {
            set.notes.push(format!(
                "{}: skipped: world-writable (the mysql client ignores it too)",
                path.display()
            ));
            return Ok(Some(set));
        }
        Ok(_) => {}
    }
    if let Err(e) = read_into(path, 0, &mut set)? {
        set.notes.push(format!("{}: skipped: {e}", path.display()));
    }
    Ok(Some(set))
}

/// Reads one file into `set`. The outer error is a parse error (fatal, as in mysql); the
/// inner one an I/O error opening this file (the caller decides).
fn read_into(
    path: &Path,
    depth: usize,
    set: &mut OptionSet,
) -> Result<Result<(), std::io::Error>, LoadError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines = parse(&text).map_err(|e| LoadError {
        file: path.to_path_buf(),
        message: format!("line {}: {}", e.line, e.message),
        io: None,
    })?;
    set.files.push(path.to_path_buf());
    let mut in_client_group = false;
    for (line, l) in lines {
        match l {
            Line::Group(g) => {
                in_client_group = CLIENT_GROUPS.iter().any(|c| c.eq_ignore_ascii_case(&g));
            }
            Line::Option { key, value } => {
                if in_client_group {
                    set.options.push(Opt {
                        key: normalise_key(&key),
                        value,
                        file: path.to_path_buf(),
                        line,
                    });
                }
            }
            Line::Include(p) => include(Path::new(&p), path, line, depth, set)?,
            Line::IncludeDir(d) => {
                let dir = Path::new(&d);
                let mut names: Vec<Vec<u8>> = std::fs::read_dir(dir)
                    .map_err(|e| LoadError {
                        file: path.to_path_buf(),
                        message: format!("line {line}: !includedir {}: {e}", dir.display()),
                        io: None,
                    })?
                    .filter_map(std::result::Result::ok)
                    .map(|e| {
                        use std::os::unix::ffi::OsStrExt;
                        e.file_name().as_bytes().to_vec()
                    })
                    .filter(|n| n.ends_with(b".cnf"))
                    .collect();
                names.sort();
                for n in names {
                    use std::os::unix::ffi::OsStrExt;
                    let p = dir.join(std::ffi::OsStr::from_bytes(&n));
                    include(&p, path, line, depth, set)?;
                }
            }
        }
    }
    Ok(Ok(()))
}

fn include(
    p: &Path,
    from: &Path,
    line: usize,
    depth: usize,
    set: &mut OptionSet,
) -> Result<(), LoadError> {
    if depth + 1 > MAX_DEPTH {
        set.notes.push(format!(
            "{}:{line}: skipped !include {}: nested more than {MAX_DEPTH} deep",
            from.display(),
            p.display()
        ));
        return Ok(());
    }
    match std::fs::metadata(p) {
        // A missing or unreadable include is skipped silently by mysql; say so quietly.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            set.notes.push(format!("{}: skipped: {e}", p.display()));
            return Ok(());
        }
        Ok(m) if world_writable(&m) => {
            set.notes.push(format!(
                "{}: skipped: world-writable (the mysql client ignores it too)",
                p.display()
            ));
            return Ok(());
        }
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {}
    }
    if let Err(e) = read_into(p, depth + 1, set)? {
        set.notes.push(format!("{}: skipped: {e}", p.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
