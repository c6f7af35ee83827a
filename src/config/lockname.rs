//! A named database lock's name as a template (`db_lock`, `docs/design.md#named-lock`):
//! fixed text with `{COLUMN}` (a column of the row), `{id}` (the row's id), `{database}`
//! (the database's name) and `{md5:TEXT}` (the lowercase hex MD5 of TEXT once its own
//! placeholders are filled; it may hold another `{md5:…}`). Parsed once, when the
//! configuration is built; filled per row. Pure: no I/O.

use std::fmt::{self, Write as _};

use super::values::Ident;

/// Longest name MySQL and MariaDB give a user-level lock.
pub const MAX_LOCK_NAME: usize = 64;

/// Length of an MD5 in lowercase hex: what `{md5:…}` always fills in.
const MD5_HEX: usize = 32;

/// A parsed `db_lock` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockTemplate {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Id,
    Database,
    Column(Ident),
    Md5(Vec<Part>),
}

impl LockTemplate {
    /// Parses a template, or says what is wrong with it.
    pub fn parse(s: &str) -> Result<Self, String> {
        let parts = parse_parts(&mut s.chars(), false)?;
        if parts.is_empty() {
            return Err(
                "expected a lock name, e.g. \"{database}|CRON_{md5:index_{job_code}}\"".into(),
            );
        }
        let t = LockTemplate {
            source: s.to_string(),
            parts,
        };
        let fixed = t.fixed_len();
        if fixed > MAX_LOCK_NAME {
            return Err(format!(
                "its fixed text alone is {fixed} characters (each {{md5:…}} counts 32); a \
                 MySQL/MariaDB lock name holds at most {MAX_LOCK_NAME}"
            ));
        }
        Ok(t)
    }

    /// Characters every name it makes has, whatever the row: the text outside
    /// placeholders, and 32 for each `{md5:…}`.
    pub fn fixed_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.chars().count(),
                Part::Md5(_) => MD5_HEX,
                _ => 0,
            })
            .sum()
    }

    /// The columns it reads, each once, in order of first use.
    pub fn columns(&self) -> Vec<&Ident> {
        let mut out: Vec<&Ident> = Vec::new();
        collect_columns(&self.parts, &mut out);
        out
    }

    /// It names `{id}`: every row gets a name of its own.
    pub fn has_id(&self) -> bool {
        fn any_id(parts: &[Part]) -> bool {
            parts.iter().any(|p| match p {
                Part::Id => true,
                Part::Md5(inner) => any_id(inner),
                _ => false,
            })
        }
        any_id(&self.parts)
    }

    /// The name for one row: `database`, the row's `id` as text, and the text of a column
    /// (`None`: NULL). `Err`: a column it names is NULL.
    pub fn fill(
        &self,
        database: &str,
        id: &str,
        column: &dyn Fn(&Ident) -> Option<String>,
    ) -> Result<String, String> {
        fill_parts(&self.parts, database, id, column)
    }
}

fn collect_columns<'a>(parts: &'a [Part], out: &mut Vec<&'a Ident>) {
    for p in parts {
        match p {
            Part::Column(c) if !out.iter().any(|o| o.same_column(c)) => out.push(c),
            Part::Md5(inner) => collect_columns(inner, out),
            _ => {}
        }
    }
}

fn fill_parts(
    parts: &[Part],
    database: &str,
    id: &str,
    column: &dyn Fn(&Ident) -> Option<String>,
) -> Result<String, String> {
    let mut s = String::new();
    for p in parts {
        match p {
            Part::Text(t) => s.push_str(t),
            Part::Id => s.push_str(id),
            Part::Database => s.push_str(database),
            Part::Column(c) => match column(c) {
                Some(v) => s.push_str(&v),
                None => return Err(format!("column {c} is NULL")),
            },
            Part::Md5(inner) => {
                let text = fill_parts(inner, database, id, column)?;
                s.push_str(&md5_hex(text.as_bytes()));
            }
        }
    }
    Ok(s)
}

/// Parses up to the end of `rest`, or (inside `{md5:…}`) up to its closing `}`, which is
/// consumed.
fn parse_parts(rest: &mut std::str::Chars<'_>, inside: bool) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    loop {
        let Some(c) = rest.next() else {
            if inside {
                return Err("{md5: is not closed by }".into());
            }
            break;
        };
        match c {
            '}' if inside => break,
            '}' => return Err("a } closes no placeholder".into()),
            '{' => {
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                let mut head = String::new();
                let end = loop {
                    match rest.next() {
                        Some(c @ ('}' | ':')) => break c,
                        Some(c) => head.push(c),
                        None => return Err("a { opens no placeholder that is closed".into()),
                    }
                };
                parts.push(match (head.as_str(), end) {
                    ("md5", ':') => Part::Md5(parse_parts(rest, true)?),
                    ("id", '}') => Part::Id,
                    ("database", '}') => Part::Database,
                    (name, '}') => Part::Column(Ident::column(name).map_err(|e| {
                        format!(
                            "{{{name}}}: {e}; a placeholder is {{id}}, {{database}}, \
                             {{md5:TEXT}} or a column"
                        )
                    })?),
                    (name, _) => {
                        return Err(format!(
                            "{{{name}:…}}: a placeholder is {{id}}, {{database}}, {{md5:TEXT}} \
                             or a column"
                        ));
                    }
                });
            }
            c if c.is_control() => return Err("a lock name holds no control characters".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

impl fmt::Display for LockTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// The lowercase hex MD5 of `data` (RFC 1321), as PHP's `md5()` gives it. Not for
/// security: it only rebuilds the names applications lock.
pub fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    md5::Md5::digest(data)
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(name: &Ident) -> Option<String> {
        match name.name() {
            "job_code" => Some("indexer_reindex_all_invalid".into()),
            "n" => None,
            _ => Some("x".into()),
        }
    }

    #[test]
    fn magento_s_cron_lock_name_is_filled_as_magento_builds_it() {
        let t = LockTemplate::parse("{database}|CRON_{md5:index_{job_code}}").unwrap();
        let name = t.fill("magento", "7", &cols).unwrap();
        let md5 = md5_hex(b"index_indexer_reindex_all_invalid");
        assert_eq!(name, format!("magento|CRON_{md5}"));
        assert_eq!(t.fixed_len(), 1 + 5 + 32);
        assert_eq!(t.columns().len(), 1);
        assert!(!t.has_id());
    }

    #[test]
    fn md5_nests_and_id_is_the_row_s_own() {
        let t = LockTemplate::parse("{database}|{md5:CRON_{md5:default_{job_code}}}:{id}").unwrap();
        let inner = md5_hex(b"default_indexer_reindex_all_invalid");
        let outer = md5_hex(format!("CRON_{inner}").as_bytes());
        assert_eq!(t.fill("db", "42", &cols).unwrap(), format!("db|{outer}:42"));
        assert!(t.has_id());
    }

    #[test]
    fn md5_matches_the_rfc_s_test_suite() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            md5_hex(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            ),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    #[test]
    fn bad_templates_say_why() {
        for (s, says) in [
            ("", "expected a lock name"),
            ("job_{md5:x", "not closed"),
            ("job_{", "closed"),
            ("job}", "closes no placeholder"),
            ("job_{job-code}", "placeholder is"),
            ("a\tb", "control"),
        ] {
            let e = LockTemplate::parse(s).unwrap_err();
            assert!(e.contains(says), "{s:?}: {e}");
        }
        let long = "x".repeat(33);
        let e = LockTemplate::parse(&format!("{long}{{md5:{{id}}}}")).unwrap_err();
        assert!(e.contains("65 characters"), "{e}");
        assert!(LockTemplate::parse(&format!("{}{{md5:{{id}}}}", "x".repeat(32))).is_ok());
    }

    #[test]
    fn a_null_column_makes_no_name() {
        let t = LockTemplate::parse("job_{n}").unwrap();
        assert!(t.fill("db", "1", &cols).unwrap_err().contains("NULL"));
    }
}
