//! Text from outside selfheal made safe to print on one line: values from the database
//! (ids, statuses, owners, messages, anything read from a row), lines read from lock
//! files, a driver's error text. Cron mails what a run prints, and syslog and a terminal
//! show it: a row id holding a newline must not forge a line of that mail, and one
//! holding an escape sequence must not repaint the terminal.
//!
//! [`printable`] escapes what could break or disguise a line — the control characters
//! (C0, DEL, C1: `\n`, `\r`, `\t`, `\0`, then `\u{1b}`…), the Unicode line and paragraph
//! separators and the bidirectional overrides — the way Rust's `char::escape_debug`
//! writes them, and keeps everything else as it is (Chinese and other printable text
//! included). A backslash is kept too: the escaped form is for a person to read, not to
//! be parsed back. The output never holds a character it would escape, so escaping twice
//! changes nothing, and a caller may escape a value and then the whole line.
//!
//! Called at the edges where text leaves selfheal (the text reporter, doctor's lines,
//! `stats`' text, syslog and journald messages, errors on stderr, `selfheal run`'s line
//! about a lock holder). JSON needs none of this: serde escapes every control character.
//! Pure; no I/O.

use std::borrow::Cow;

/// Characters that could end a line or disguise what a line says.
fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // LINE SEPARATOR, PARAGRAPH SEPARATOR
            '\u{2028}' | '\u{2029}'
            // bidirectional embeddings, overrides and isolates, and the marks
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{061c}'
        )
}

/// `s` with every control character, line separator and bidirectional override escaped
/// (`\n`, `\r`, `\t`, `\0`, `\u{1b}`, `\u{2028}`); borrowed when there is none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(must_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' | '\r' | '\t' | '\0' => out.extend(c.escape_debug()),
            c if must_escape(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`printable`] of at most the first `max` characters of `s` (a line read from a file
/// someone else writes, shown in a message).
pub fn printable_cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => printable(s.get(..end).unwrap_or(s)).into_owned(),
        None => printable(s).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_text_is_kept() {
        assert_eq!(printable("42"), "42");
        assert!(matches!(printable("数据库 id=7 — ok"), Cow::Borrowed(_)));
        assert_eq!(
            printable("7\nfull-sync id=8: set status to 'error'"),
            "7\\nfull-sync id=8: set status to 'error'"
        );
        assert_eq!(
            printable("a\r\t\0\u{1b}[31mb\u{7}\u{7f}\u{85}"),
            "a\\r\\t\\0\\u{1b}[31mb\\u{7}\\u{7f}\\u{85}"
        );
        assert_eq!(
            printable("x\u{2028}y\u{202e}z\u{2066}"),
            "x\\u{2028}y\\u{202e}z\\u{2066}"
        );
        // Printable non-ASCII stays, and so does a backslash.
        assert_eq!(printable("测试\\n"), "测试\\n");
        // Escaping twice changes nothing: the output holds nothing to escape.
        for s in ["a\nb", "\u{1b}\u{2029}", "测\0试"] {
            let once = printable(s).into_owned();
            assert_eq!(printable(&once), once);
            assert!(!once.contains('\n'));
        }
    }

    #[test]
    fn cut_counts_characters_before_escaping() {
        assert_eq!(printable_cut("a\u{1b}[2Jb", 10), "a\\u{1b}[2Jb");
        assert_eq!(printable_cut(&"x".repeat(500), 200).len(), 200);
        assert_eq!(printable_cut("测试数据库", 2), "测试");
        assert_eq!(printable_cut("a\nb", 2), "a\\n");
        assert_eq!(printable_cut("", 3), "");
    }
}
