//! The row message of docs/design.md#message — `self-heal: <verdict>: <the deciding evidence in words>
//! (<figures>)`, e.g. `self-heal: dead: lock free, worker gone (row 20m, heartbeat 1m40s
//! ago, stale_after 5m)` — built and parsed here, and nowhere else.
//!
//! `check` writes it into the row's message column (cut to the column's length, [`cut`]:
//! the figures go first, the words stay); `stats` recognises the rows selfheal marked by
//! [`MESSAGE_PREFIX`] and reads the message back with [`parse`] where the journal does not
//! know the row — in this form and in the older `self-heal: <verdict>: heartbeat_age=…s
//! stale_after=…s total_age=…s …` form that rows marked by earlier releases still carry.
//! The store looks for the prefix in SQL. Which words and figures a piece of evidence
//! gives is decided by the one rendering of evidence (`evidence::message_parts`); this
//! module knows the shape of the message, the wording of the conclusive deaths (so that
//! they parse back) and how durations are written. Pure.

use std::fmt::Write as _;

use crate::decide::Verdict;

/// How every message selfheal writes begins: how `stats` recognises the rows it marked.
pub const MESSAGE_PREFIX: &str = "self-heal:";

/// The words of a death proven by a free lock.
pub const LOCK_FREE: &str = "lock free, worker gone";
/// The words of a death proven by a free named database lock (`db_lock`).
pub const NAMED_LOCK_FREE: &str = "named lock free, worker gone";

/// The words of a death proven by the owner pid: gone.
pub fn owner_gone(pid: u32) -> String {
    format!("owner pid {pid} gone")
}

/// The words of a death inferred from the owner pid: it belongs to a process started
/// `after_s` after the row. (Earlier releases wrote `owner pid N reused by a newer
/// process` and took it as proof; [`parse`] still reads that form as they meant it.)
pub fn owner_reused(pid: u32, after_s: u64) -> String {
    format!(
        "owner pid {pid} reused? started {} after the row",
        duration(after_s)
    )
}

/// Where the figures begin.
const FIGURES_OPEN: &str = " (row ";

/// A duration as the message writes it: exact, in days, hours, minutes and seconds with
/// the zero parts left out — `1m40s`, `5m`, `2h10m5s`, `0s`.
pub fn duration(secs: u64) -> String {
    let mut out = String::new();
    let parts = [
        (secs / 86_400, 'd'),
        ((secs % 86_400) / 3600, 'h'),
        ((secs % 3600) / 60, 'm'),
        (secs % 60, 's'),
    ];
    for (n, unit) in parts {
        if n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// The figures of a message, as [`build`] writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// Seconds since the last beat.
    Ago(u64),
    Missing,
    Unreadable,
    /// The watch names no heartbeat: no figure.
    NotConfigured,
}

/// The row message, before it is cut to the column's length: the verdict, the deciding
/// evidence in `words`, then the figures — the row's age, its heartbeat, and `more`
/// (thresholds and other evidence, each already in words: `stale_after 5m`).
pub fn build(
    verdict: Verdict,
    words: &str,
    row_age: Option<u64>,
    beat: Beat,
    more: &[String],
) -> String {
    build_as(verdict.as_str(), words, row_age, beat, more)
}

/// The word that stands where a verdict stands in the message of an un-park: a row
/// parked as `hung` whose own heartbeat is fresh again, put back to running.
pub const RECOVERED: &str = "recovered";

/// How the message of a person's decision begins after the prefix.
pub const RESOLVED: &str = "resolved as ";

/// The message of an un-park: `self-heal: recovered: heartbeat fresh again after the
/// park, lock held (row 1h, heartbeat 5s ago, parked 20m ago)`.
pub fn recovered(words: &str, row_age: Option<u64>, beat: Beat, more: &[String]) -> String {
    build_as(RECOVERED, words, row_age, beat, more)
}

/// The message of a person's decision (docs/design.md#resolve): `self-heal: resolved as retry by
/// alice: the API is back`, without the colon and note when none was given.
pub fn resolved(decision: &str, who: &str, note: Option<&str>) -> String {
    match note.map(str::trim).filter(|n| !n.is_empty()) {
        Some(n) => format!("{MESSAGE_PREFIX} {RESOLVED}{decision} by {who}: {n}"),
        None => format!("{MESSAGE_PREFIX} {RESOLVED}{decision} by {who}"),
    }
}

/// True when a parsed message records selfheal's own verdict on a row (what `stats`
/// weighs), not an un-park or a person's decision.
pub fn is_verdict(p: &ParsedMessage) -> bool {
    p.verdict != RECOVERED && !p.verdict.starts_with(RESOLVED.trim_end())
}

fn build_as(
    verdict: &str,
    words: &str,
    row_age: Option<u64>,
    beat: Beat,
    more: &[String],
) -> String {
    let mut m = String::with_capacity(128);
    let _ = write!(m, "{MESSAGE_PREFIX} {verdict}: {words}");
    m.push_str(FIGURES_OPEN);
    match row_age {
        Some(a) => m.push_str(&duration(a)),
        None => m.push_str("age unknown"),
    }
    match beat {
        Beat::Ago(a) => {
            let _ = write!(m, ", heartbeat {} ago", duration(a));
        }
        Beat::Missing => m.push_str(", no heartbeat"),
        Beat::Unreadable => m.push_str(", heartbeat unreadable"),
        Beat::NotConfigured => {}
    }
    for f in more {
        m.push_str(", ");
        m.push_str(f);
    }
    m.push(')');
    m
}

/// The part of a message before its figures: `self-heal: dead: lock free, worker gone`.
pub fn head(msg: &str) -> &str {
    msg.split_once(FIGURES_OPEN).map_or(msg, |(head, _)| head)
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

/// Parses a message of either form, perhaps cut to the column's length. `None` without
/// the prefix. A figure cut short is not read at all (a cut `row 20m` would read as
/// `row 2`): only what the message shows whole is taken.
pub fn parse(msg: &str) -> Option<ParsedMessage> {
    let rest = msg.strip_prefix(MESSAGE_PREFIX)?.trim_start();
    let (verdict, tail) = rest.split_once(':').unwrap_or((rest, ""));
    let p = ParsedMessage {
        verdict: verdict.trim().to_string(),
        ..ParsedMessage::default()
    };
    let tail = tail.trim_start();
    if is_older_form(tail) {
        Some(parse_older(p, tail))
    } else {
        Some(parse_words(p, tail))
    }
}

/// The form of earlier releases: name=value pairs after the verdict.
fn is_older_form(tail: &str) -> bool {
    tail.starts_with("heartbeat_age=")
}

/// `heartbeat_age=…s stale_after=…s total_age=…s max_age=…s lock=… [owner=…]`.
fn parse_older(mut p: ParsedMessage, tail: &str) -> ParsedMessage {
    let secs = |v: &str| v.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    let toks: Vec<&str> = tail.split(' ').collect();
    // The last token may be cut: only tokens followed by a space are whole.
    let whole = if tail.ends_with(' ') {
        toks.len()
    } else {
        toks.len().saturating_sub(1)
    };
    for (i, tok) in toks.iter().enumerate() {
        // A cut `lock=free` cannot be read as anything but `free`; a cut number can.
        let complete = i < whole;
        match tok.split_once('=') {
            Some(("heartbeat_age", v)) if complete => p.heartbeat_age_s = secs(v),
            Some(("total_age", v)) if complete => p.total_age_s = secs(v),
            Some(("lock", "free")) => p.conclusive = true,
            Some(("owner", v)) if v.starts_with("dead:") || v.starts_with("reused:") => {
                p.conclusive = true;
            }
            _ => {}
        }
    }
    p
}

/// `<words> (row …, heartbeat … ago, …)`.
fn parse_words(mut p: ParsedMessage, tail: &str) -> ParsedMessage {
    // The first "(row ": the words are selfheal's own and never hold it; a value from the
    // database among the later figures (an owner's host) cannot move where they begin.
    let (words, figures) = match tail.split_once(FIGURES_OPEN) {
        Some((words, figures)) => (words, Some(figures)),
        None => (tail, None),
    };
    p.conclusive = words.starts_with(LOCK_FREE)
        || words.starts_with(NAMED_LOCK_FREE)
        || conclusive_owner(words);
    let Some(figures) = figures else {
        return p;
    };
    // Each figure ends with ", " or the closing ")": a figure the cut reached is left out.
    // The row's age is the first figure (its "row " already taken by the split) and the
    // heartbeat the second; only those places are read (a value from the database may
    // stand among the later figures).
    let dur = |s: &str| humantime::parse_duration(s).ok().map(|d| d.as_secs());
    let mut rest = figures;
    for place in 0..2 {
        let (figure, next) = match (rest.split_once(", "), rest.split_once(')')) {
            (Some((f, n)), Some((g, _))) if f.len() < g.len() => (f, n),
            (Some((f, n)), None) => (f, n),
            (_, Some((g, _))) => (g, ""),
            (None, None) => break,
        };
        match place {
            0 => p.total_age_s = dur(figure),
            _ => {
                p.heartbeat_age_s = figure
                    .strip_prefix("heartbeat ")
                    .and_then(|v| v.strip_suffix(" ago"))
                    .and_then(dur);
            }
        }
        rest = next;
    }
    p
}

/// `owner pid N gone`, or an earlier release's `owner pid N reused…`, whole (a pid that
/// looks reused is an inference now: `owner pid N started … after the row`).
fn conclusive_owner(words: &str) -> bool {
    let Some(rest) = words.strip_prefix("owner pid ") else {
        return false;
    };
    let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    after.len() < rest.len()
        && (after.starts_with(" gone") || after.starts_with(" reused by a newer process"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn more(v: &[&str]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_message_is_the_spec_form() {
        let m = build(
            Verdict::Dead,
            LOCK_FREE,
            Some(1200),
            Beat::Ago(100),
            &more(&["stale_after 5m"]),
        );
        assert_eq!(
            m,
            "self-heal: dead: lock free, worker gone (row 20m, heartbeat 1m40s ago, \
             stale_after 5m)"
        );
        assert_eq!(head(&m), "self-heal: dead: lock free, worker gone");
        assert_eq!(
            build(
                Verdict::Unknown,
                "evidence unreadable",
                None,
                Beat::Unreadable,
                &[]
            ),
            "self-heal: unknown: evidence unreadable (row age unknown, heartbeat unreadable)"
        );
    }

    #[test]
    fn an_unpark_and_a_persons_decision_are_told_apart_from_verdicts() {
        let m = recovered(
            "heartbeat fresh again after the park, lock held",
            Some(3600),
            Beat::Ago(5),
            &more(&["parked 20m ago"]),
        );
        assert_eq!(
            m,
            "self-heal: recovered: heartbeat fresh again after the park, lock held (row 1h, \
             heartbeat 5s ago, parked 20m ago)"
        );
        let p = parse(&m).expect("ours");
        assert_eq!(
            (p.verdict.as_str(), p.total_age_s),
            ("recovered", Some(3600))
        );
        assert!(!is_verdict(&p));
        let r = resolved("retry", "alice", Some(" the API is back "));
        assert_eq!(r, "self-heal: resolved as retry by alice: the API is back");
        assert!(!is_verdict(&parse(&r).expect("ours")));
        assert_eq!(
            resolved("dead", "bob", Some("")),
            "self-heal: resolved as dead by bob"
        );
        assert!(is_verdict(
            &parse("self-heal: hung: heartbeat stale").expect("ours")
        ));
    }

    #[test]
    fn durations_are_exact() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(100), "1m40s");
        assert_eq!(duration(300), "5m");
        assert_eq!(duration(7805), "2h10m5s");
        assert_eq!(duration(86_400 * 3 + 1), "3d1s");
        for s in [0, 1, 59, 60, 3599, 3600, 86_399, 86_400, 479_660_966] {
            let back = humantime::parse_duration(&duration(s)).expect("parses");
            assert_eq!(back.as_secs(), s);
        }
    }

    #[test]
    fn what_is_built_parses_back_whole_and_cut() {
        let cases: Vec<(String, ParsedMessage)> = vec![
            (
                build(
                    Verdict::Dead,
                    "heartbeat stale, no sign of the worker",
                    Some(3000),
                    Beat::Ago(2820),
                    &more(&["stale_after 5m", "no lock file"]),
                ),
                ParsedMessage {
                    verdict: "dead".into(),
                    heartbeat_age_s: Some(2820),
                    total_age_s: Some(3000),
                    conclusive: false,
                },
            ),
            (
                build(
                    Verdict::Dead,
                    LOCK_FREE,
                    None,
                    Beat::Missing,
                    &more(&["stale_after 5m"]),
                ),
                ParsedMessage {
                    verdict: "dead".into(),
                    conclusive: true,
                    ..ParsedMessage::default()
                },
            ),
            (
                build(
                    Verdict::Overtime,
                    "running past max_age",
                    Some(20_000),
                    Beat::Ago(10),
                    &more(&["max_age 4h", "lock held by pid 77", "owner pid 4242 alive"]),
                ),
                ParsedMessage {
                    verdict: "overtime".into(),
                    heartbeat_age_s: Some(10),
                    total_age_s: Some(20_000),
                    conclusive: false,
                },
            ),
            (
                build(
                    Verdict::Dead,
                    "owner pid 4242 reused by a newer process",
                    Some(61),
                    Beat::Unreadable,
                    &more(&["stale_after 1m"]),
                ),
                ParsedMessage {
                    verdict: "dead".into(),
                    total_age_s: Some(61),
                    conclusive: true,
                    ..ParsedMessage::default()
                },
            ),
            (
                build(
                    Verdict::Dead,
                    &owner_gone(7),
                    Some(479_660_966),
                    Beat::Ago(5),
                    &more(&["stale_after 5m"]),
                ),
                ParsedMessage {
                    verdict: "dead".into(),
                    heartbeat_age_s: Some(5),
                    total_age_s: Some(479_660_966),
                    conclusive: true,
                },
            ),
        ];
        for (m, want) in cases {
            assert_eq!(parse(&m).as_ref(), Some(&want), "{m}");
            // Cut anywhere after the verdict, it still parses, and what survives agrees:
            // a figure is either whole or absent, never a cut number.
            let head = format!("{MESSAGE_PREFIX} {}:", want.verdict).len();
            for n in head..m.len() {
                let c = cut(&m, Some(n));
                let got = parse(&c).unwrap_or_else(|| panic!("{c}"));
                assert_eq!(got.verdict, want.verdict, "{c}");
                assert!(
                    got.heartbeat_age_s
                        .is_none_or(|x| Some(x) == want.heartbeat_age_s),
                    "{c}"
                );
                assert!(
                    got.total_age_s.is_none_or(|x| Some(x) == want.total_age_s),
                    "{c}"
                );
                assert!(!got.conclusive || want.conclusive, "{c}");
            }
        }
    }

    /// Messages exactly as earlier releases wrote them into rows.
    const OLDER: [(&str, Option<u64>, Option<u64>, bool); 6] = [
        (
            "self-heal: dead: heartbeat_age=2820s stale_after=300s total_age=3000s \
             max_age=14400s lock=none",
            Some(2820),
            Some(3000),
            false,
        ),
        (
            "self-heal: dead: heartbeat_age=100s stale_after=300s total_age=1200s \
             max_age=14400s lock=free owner=empty",
            Some(100),
            Some(1200),
            true,
        ),
        (
            "self-heal: dead: heartbeat_age=10s stale_after=300s total_age=900s \
             max_age=14400s lock=absent owner=dead:99999999",
            Some(10),
            Some(900),
            true,
        ),
        (
            "self-heal: overtime: heartbeat_age=10s stale_after=300s total_age=18000s \
             max_age=14400s lock=held:4242 owner=reused:12",
            Some(10),
            Some(18000),
            true,
        ),
        (
            "self-heal: dead: heartbeat_age=missing stale_after=300s total_age=unknown \
             max_age=14400s lock=absent",
            None,
            None,
            false,
        ),
        (
            "self-heal: hung: heartbeat_age=unreadable stale_after=60s total_age=61s \
             max_age=3600s lock=held owner=alive:12",
            None,
            Some(61),
            false,
        ),
    ];

    #[test]
    fn messages_of_earlier_releases_still_parse_whole_and_cut() {
        for (m, hb, total, conclusive) in OLDER {
            let p = parse(m).expect("prefix");
            assert_eq!(
                (p.heartbeat_age_s, p.total_age_s, p.conclusive),
                (hb, total, conclusive),
                "{m}"
            );
            let head = format!("{MESSAGE_PREFIX} {}:", p.verdict).len();
            for n in head..m.len() {
                let c = cut(m, Some(n));
                let got = parse(&c).unwrap_or_else(|| panic!("{c}"));
                assert!(got.heartbeat_age_s.is_none_or(|x| Some(x) == hb), "{c}");
                assert!(got.total_age_s.is_none_or(|x| Some(x) == total), "{c}");
                assert!(!got.conclusive || conclusive, "{c}");
            }
        }
        let cut = parse("self-heal: overtime: heartbeat_age=missing stale_af").expect("p");
        assert_eq!(cut.verdict, "overtime");
        assert_eq!((cut.heartbeat_age_s, cut.total_age_s), (None, None));
        // A cut number is not read: `total_age=30` of `total_age=3000s`.
        let cut =
            parse("self-heal: dead: heartbeat_age=2820s stale_after=300s total_age=30").expect("p");
        assert_eq!((cut.heartbeat_age_s, cut.total_age_s), (Some(2820), None));
    }

    #[test]
    fn other_messages_are_not_selfheals() {
        assert_eq!(parse("sync failed: timeout"), None);
        assert_eq!(parse(""), None);
        let p = parse("self-heal: dead").expect("the prefix");
        assert_eq!(p.verdict, "dead");
        assert!(!p.conclusive);
        // Words that only look like figures do not count.
        let p = parse("self-heal: unknown: evidence unreadable (row age unknown, no heartbeat)")
            .expect("p");
        assert_eq!((p.total_age_s, p.heartbeat_age_s), (None, None));
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
