//! The row message of SPEC §6 — `self-heal: <verdict>: heartbeat_age=…s stale_after=…s
//! total_age=…s max_age=…s lock=… [owner=…]` — built and parsed here, and nowhere else.
//!
//! `check` writes it into the row's message column (cut to the column's length, [`cut`]);
//! `stats` recognises the rows selfheal marked by [`MESSAGE_PREFIX`] and reads the
//! message back with [`parse`] where the journal does not know the row; the store looks
//! for the prefix in SQL. The name/value pairs come from the one rendering of evidence
//! (`evidence::Rendered::message_pairs`), so this module knows the shape of the message,
//! not how each piece of evidence is written. Pure.

use std::fmt::{Display, Write as _};

use crate::decide::Verdict;

/// How every message selfheal writes begins: how `stats` recognises the rows it marked.
pub const MESSAGE_PREFIX: &str = "self-heal:";

/// The row message from a verdict and its evidence as name/value pairs, before it is cut
/// to the column's length.
pub fn build<V: Display>(verdict: Verdict, pairs: &[(&str, V)]) -> String {
    let mut m = String::with_capacity(128);
    m.push_str(MESSAGE_PREFIX);
    m.push(' ');
    m.push_str(verdict.as_str());
    m.push(':');
    for (name, value) in pairs {
        m.push(' ');
        m.push_str(name);
        m.push('=');
        let _ = write!(m, "{value}");
    }
    m
}

/// Cuts a message to at most `max` characters (strict SQL modes reject longer values).
pub fn cut(msg: &str, max: Option<usize>) -> String {
    match max {
        Some(n) if msg.chars().count() > n => msg.chars().take(n).collect(),
        _ => msg.to_string(),
    }
}

/// What selfheal's message in a row says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedMessage {
    pub verdict: String,
    pub heartbeat_age_s: Option<u64>,
    pub total_age_s: Option<u64>,
    /// The owner or lock decided it (conclusive), as far as the message shows.
    pub conclusive: bool,
}

/// Parses `self-heal: <verdict>: heartbeat_age=…s stale_after=…s total_age=…s …` (perhaps
/// cut to the column's length). `None` without the prefix.
pub fn parse(msg: &str) -> Option<ParsedMessage> {
    let rest = msg.strip_prefix(MESSAGE_PREFIX)?.trim_start();
    let (verdict, tail) = rest.split_once(':').unwrap_or((rest, ""));
    let mut p = ParsedMessage {
        verdict: verdict.trim().to_string(),
        ..ParsedMessage::default()
    };
    let secs = |v: &str| v.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    for tok in tail.split_whitespace() {
        match tok.split_once('=') {
            Some(("heartbeat_age", v)) => p.heartbeat_age_s = secs(v),
            Some(("total_age", v)) => p.total_age_s = secs(v),
            Some(("lock", "free")) => p.conclusive = true,
            Some(("owner", v)) if v.starts_with("dead:") || v.starts_with("reused:") => {
                p.conclusive = true;
            }
            _ => {}
        }
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs = Vec<(&'static str, String)>;

    fn pairs(v: &[(&'static str, &str)]) -> Pairs {
        v.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn the_message_is_the_spec_form() {
        let m = build(
            Verdict::Dead,
            &pairs(&[
                ("heartbeat_age", "2820s"),
                ("stale_after", "300s"),
                ("total_age", "3000s"),
                ("max_age", "14400s"),
                ("lock", "none"),
            ]),
        );
        assert_eq!(
            m,
            "self-heal: dead: heartbeat_age=2820s stale_after=300s total_age=3000s \
             max_age=14400s lock=none"
        );
    }

    #[test]
    fn what_is_built_parses_back_whole_and_cut() {
        let cases: Vec<(Verdict, Pairs, ParsedMessage)> = vec![
            (
                Verdict::Dead,
                pairs(&[
                    ("heartbeat_age", "2820s"),
                    ("stale_after", "300s"),
                    ("total_age", "3000s"),
                    ("max_age", "14400s"),
                    ("lock", "none"),
                ]),
                ParsedMessage {
                    verdict: "dead".into(),
                    heartbeat_age_s: Some(2820),
                    total_age_s: Some(3000),
                    conclusive: false,
                },
            ),
            (
                Verdict::Dead,
                pairs(&[
                    ("heartbeat_age", "missing"),
                    ("stale_after", "300s"),
                    ("total_age", "unknown"),
                    ("max_age", "14400s"),
                    ("lock", "free"),
                ]),
                ParsedMessage {
                    verdict: "dead".into(),
                    conclusive: true,
                    ..ParsedMessage::default()
                },
            ),
            (
                Verdict::Overtime,
                pairs(&[
                    ("heartbeat_age", "10s"),
                    ("stale_after", "300s"),
                    ("total_age", "20000s"),
                    ("max_age", "14400s"),
                    ("lock", "held:77"),
                    ("owner", "reused:4242"),
                ]),
                ParsedMessage {
                    verdict: "overtime".into(),
                    heartbeat_age_s: Some(10),
                    total_age_s: Some(20000),
                    conclusive: true,
                },
            ),
            (
                Verdict::Hung,
                pairs(&[
                    ("heartbeat_age", "unreadable"),
                    ("stale_after", "60s"),
                    ("total_age", "61s"),
                    ("max_age", "3600s"),
                    ("lock", "held"),
                    ("owner", "alive:12"),
                ]),
                ParsedMessage {
                    verdict: "hung".into(),
                    total_age_s: Some(61),
                    ..ParsedMessage::default()
                },
            ),
        ];
        for (verdict, p, want) in cases {
            let m = build(verdict, &p);
            assert_eq!(parse(&m).as_ref(), Some(&want), "{m}");
            // Cut anywhere after the verdict, it still parses, and what survives agrees.
            let head = format!("{MESSAGE_PREFIX} {}:", verdict.as_str()).len();
            for n in head..m.len() {
                let c = cut(&m, Some(n));
                let got = parse(&c).unwrap_or_else(|| panic!("{c}"));
                assert_eq!(got.verdict, want.verdict, "{c}");
                assert!(
                    got.heartbeat_age_s
                        .is_none_or(|x| Some(x) == want.heartbeat_age_s)
                );
                assert!(got.total_age_s.is_none_or(|x| Some(x) == want.total_age_s));
                assert!(!got.conclusive || want.conclusive, "{c}");
            }
        }
    }

    #[test]
    fn messages_are_parsed_even_when_cut() {
        let cut = parse("self-heal: overtime: heartbeat_age=missing stale_af").expect("p");
        assert_eq!(cut.verdict, "overtime");
        assert_eq!((cut.heartbeat_age_s, cut.total_age_s), (None, None));
        assert!(
            parse("self-heal: dead: heartbeat_age=10s lock=none owner=dead:4242")
                .expect("p")
                .conclusive
        );
        assert!(parse("self-heal: dead: lock=free").expect("p").conclusive);
        assert_eq!(parse("sync failed: timeout"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn messages_are_cut_by_characters() {
        assert_eq!(cut("abcdef", Some(3)), "abc");
        assert_eq!(cut("abc", Some(3)), "abc");
        assert_eq!(cut("ééé", Some(2)), "éé");
        assert_eq!(cut("abc", None), "abc");
        assert_eq!(cut("abc", Some(0)), "");
    }
}
