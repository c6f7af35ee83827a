//! Text from outside selfheal made safe to print on one line: values from the database
//! (ids, statuses, owners, messages, anything read from a row), lines read from lock
//! files, a driver's error text. Cron mails what a run prints, and syslog and a terminal
//! show it: a row id holding a newline must not forge a line of that mail, and one
//! holding an escape sequence must not repaint the terminal.
//!
//! [`printable`] escapes what could break or disguise a line — the control characters
//! (C0, DEL, C1: `\n`, `\r`, `\t`, `\0`, then `\u{1b}`…), the Unicode line and paragraph
//! separators, and every character that is there without being seen: the format
//! characters (general category Cf: the bidirectional overrides, zero-width space and
//! joiners, the byte order mark U+FEFF, the soft hyphen, tags…) and the other default
//! ignorable code points (Hangul fillers, variation selectors, U+034F) — the way Rust's
//! `char::escape_debug` writes them, and keeps everything else as it is (Chinese and
//! other printable text included). So `web1\u{200b}` never reads as the host `web1`. A backslash is kept too: the escaped form is for a person to read, not to
//! be parsed back. The output never holds a character it would escape, so escaping twice
//! changes nothing, and a caller may escape a value and then the whole line.
//!
//! Called at the edges where text leaves selfheal (the text reporter, doctor's lines,
//! `stats`' text, syslog and journald messages, errors on stderr, `selfheal run`'s line
//! about a lock holder). JSON needs none of this: serde escapes every control character.
//! Pure; no I/O.

use std::borrow::Cow;

use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};

/// Characters that could end a line or disguise what a line says.
fn must_escape(c: char) -> bool {
    // Printable ASCII is the common case: no table lookup.
    if (' '..='~').contains(&c) {
        return false;
    }
    c.is_control()
        || matches!(
            c.general_category(),
            // Format characters: bidirectional controls, zero-width space and joiners, the
            // byte order mark, the soft hyphen, tags, …
            G::Format
            // LINE SEPARATOR, PARAGRAPH SEPARATOR
            | G::LineSeparator
            | G::ParagraphSeparator
        )
        || invisible(c)
}

/// The default ignorable code points that are not format characters: shown as nothing
/// (or as a blank) by a terminal or a mail reader.
fn invisible(c: char) -> bool {
    matches!(
        c,
        // COMBINING GRAPHEME JOINER
        '\u{034f}'
        // HANGUL CHOSEONG and JUNGSEONG FILLER, HANGUL FILLER, HALFWIDTH HANGUL FILLER
        | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}'
        // KHMER VOWEL INHERENT AQ and AA
        | '\u{17b4}' | '\u{17b5}'
        // MONGOLIAN FREE VARIATION SELECTORS
        | '\u{180b}'..='\u{180f}'
        // VARIATION SELECTORS, and their supplement
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{e0100}'..='\u{e01ef}'
        // reserved default ignorables
        | '\u{2065}'
        | '\u{fff0}'..='\u{fff8}'
        | '\u{e0000}'..='\u{e0fff}'
    )
}

/// `s` with every control character, line separator and invisible or format character
/// escaped (`\n`, `\r`, `\t`, `\0`, `\u{1b}`, `\u{2028}`, `\u{200b}`); borrowed when
/// there is none.
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
        // Invisible and format characters: a value that would read as another.
        assert_eq!(
            printable("web1\u{200b}:4242 \u{feff}web1 a\u{ad}b \u{2060}\u{200d}\u{3164}\u{fe0f}"),
            "web1\\u{200b}:4242 \\u{feff}web1 a\\u{ad}b \\u{2060}\\u{200d}\\u{3164}\\u{fe0f}"
        );
        assert_eq!(
            printable("\u{e0041}\u{61c}\u{180e}"),
            "\\u{e0041}\\u{61c}\\u{180e}"
        );
        // Printable non-ASCII stays, and so does a backslash; so do spaces (the
        // ideographic space of Chinese text among them).
        assert_eq!(
            printable("数据库\u{3000}同步 é ü"),
            "数据库\u{3000}同步 é ü"
        );
        assert_eq!(printable("测试\\n"), "测试\\n");
        // Escaping twice changes nothing: the output holds nothing to escape.
        for s in ["a\nb", "\u{1b}\u{2029}", "测\0试", "\u{200b}\u{feff}"] {
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
