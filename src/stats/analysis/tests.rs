//! Table tests of the stats judgement: false-positive classification, message parsing,
//! rounding, the max_age rule and the suggestions.

use super::*;
use serde_json::json;

/// The row message as earlier releases wrote it (rows still carry it).
const MSG: &str = "self-heal: dead: heartbeat_age=2820s stale_after=300s total_age=3000s \
                   max_age=14400s lock=none";

/// The same message as this release writes it.
const WORDS: &str = "self-heal: dead: heartbeat stale, no sign of the worker (row 50m, \
                     heartbeat 47m ago, stale_after 5m)";

fn mark(started: Option<&str>, to: &str, verdict: &str) -> Mark {
    Mark {
        started: started.map(str::to_string),
        to: to.into(),
        verdict: verdict.into(),
        time: Some("2026-11-29T10:00:00+00:00".into()),
        heartbeat_age_s: Some(2820),
        total_age_s: Some(3000),
        conclusive: false,
        basis: Some("the heartbeat is stale and nothing says the worker lives".into()),
    }
}

fn view<'a>(
    id: &'a Value,
    status: &'a str,
    runtime: i64,
    marked: Option<&'a str>,
    success: bool,
) -> RowView<'a> {
    RowView {
        id,
        started: "2026-11-29 09:10:00",
        status,
        runtime_s: Some(runtime),
        marked,
        success,
    }
}

#[test]
fn false_positives_and_reruns_are_told_apart() {
    let id = json!(7);
    let same = [mark(Some("2026-11-29 09:10:00"), "error", "dead")];
    let earlier = [mark(Some("2026-11-29 07:00:00"), "pending", "dead")];
    let old_entry = [mark(None, "error", "overtime")];
    let cases: Vec<(&str, RowView<'_>, Option<&[Mark]>, &str)> = vec![
        // The journal knows this very run; it ended well: the worker was alive.
        (
            "journal, same run, done",
            view(&id, "done", 7300, None, true),
            Some(&same),
            "fp:journal:dead",
        ),
        (
            "journal, same run, message kept",
            view(&id, "done", 7300, Some(MSG), true),
            Some(&same),
            "fp:journal:dead",
        ),
        (
            "journal, same run, still error",
            view(&id, "error", 3000, Some(MSG), false),
            Some(&same),
            "marked",
        ),
        // An earlier run was sent to the retry queue; this run succeeded: the retry worked.
        (
            "journal, earlier run, done",
            view(&id, "done", 9000, Some(MSG), true),
            Some(&earlier),
            "rerun",
        ),
        (
            "journal, earlier run, failed",
            view(&id, "failed", 60, None, false),
            Some(&earlier),
            "plain",
        ),
        (
            "journal, earlier run, failed, marked",
            view(&id, "error", 60, Some(MSG), false),
            Some(&earlier),
            "marked",
        ),
        (
            "journal entry without start",
            view(&id, "done", 10, None, true),
            Some(&old_entry),
            "fp:journal:overtime",
        ),
        // The journal does not know the row: the message decides.
        (
            "message, done, long run",
            view(&id, "done", 7300, Some(MSG), true),
            None,
            "fp:message:dead",
        ),
        (
            "message, done, within clock slack",
            view(&id, "done", 2941, Some(MSG), true),
            None,
            "fp:message:dead",
        ),
        (
            "message, done, shorter than the marked age",
            view(&id, "done", 600, Some(MSG), true),
            None,
            "rerun",
        ),
        (
            "message, error",
            view(&id, "error", 3000, Some(MSG), false),
            None,
            "marked",
        ),
        // The same, in words.
        (
            "words, done, long run",
            view(&id, "done", 7300, Some(WORDS), true),
            None,
            "fp:message:dead",
        ),
        (
            "words, done, within clock slack",
            view(&id, "done", 2941, Some(WORDS), true),
            None,
            "fp:message:dead",
        ),
        (
            "words, done, shorter than the marked age",
            view(&id, "done", 600, Some(WORDS), true),
            None,
            "rerun",
        ),
        (
            "words, error",
            view(&id, "error", 3000, Some(WORDS), false),
            None,
            "marked",
        ),
        ("nothing", view(&id, "done", 100, None, true), None, "plain"),
        (
            "empty marks",
            view(&id, "done", 100, None, true),
            Some(&[]),
            "plain",
        ),
    ];
    for (name, r, marks, want) in cases {
        let got = match classify(r, marks) {
            Judgement::Plain => "plain".to_string(),
            Judgement::Marked => "marked".to_string(),
            Judgement::Rerun => "rerun".to_string(),
            Judgement::FalsePositive(fp) => {
                assert_eq!(fp.id, id, "{name}");
                assert_eq!(fp.status, r.status, "{name}");
                format!(
                    "fp:{}:{}",
                    match fp.source {
                        Source::Journal => "journal",
                        Source::Message => "message",
                    },
                    fp.verdict
                )
            }
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn counts_follow_the_judgements() {
    let mut s = WatchStats::default();
    let id = |n: i64| json!(n);
    s.add(&id(1), "done", Ok(100), true, Judgement::Plain);
    s.add(&id(2), "skipped", Ok(7200), true, Judgement::Plain);
    s.add(&id(3), "error", Ok(50), false, Judgement::Marked);
    s.add(&id(4), "done", Ok(-5), true, Judgement::Plain);
    s.add(
        &id(5),
        "done",
        Err("start_time = soon: not a time".into()),
        true,
        Judgement::Plain,
    );
    let fp = |verdict: &str, conclusive, hb| {
        Judgement::FalsePositive(Box::new(FalsePositive {
            id: json!(6),
            status: "done".into(),
            runtime_s: Some(9000),
            source: Source::Journal,
            verdict: verdict.into(),
            marked_at: None,
            set_to: Some("error".into()),
            heartbeat_age_s: hb,
            total_age_s: Some(3_000),
            conclusive,
            basis: None,
        }))
    };
    s.add(&id(6), "done", Ok(9000), true, fp("dead", false, Some(480)));
    s.add(&id(7), "done", Ok(8000), true, fp("dead", true, Some(5000)));
    s.add(
        &id(8),
        "done",
        Ok(8000),
        true,
        fp("overtime", false, Some(9000)),
    );
    s.add(&id(9), "done", Ok(300), true, Judgement::Rerun);
    // A silence longer than the run was old when it was marked: an earlier row's beat.
    s.add(
        &id(10),
        "done",
        Ok(9000),
        true,
        fp("dead", false, Some(7_209)),
    );
    s.add(
        &id(11),
        "done",
        Err(BadRuntime::Implausible(
            "runs 400d0h, longer than a year".into(),
        )),
        true,
        Judgement::Plain,
    );
    assert_eq!(s.finished, 11);
    assert_eq!(
        s.runtimes.count(),
        7,
        "successful runs with a readable, plausible runtime"
    );
    assert_eq!(s.runtimes.max(), Some(9000));
    assert_eq!(s.longest_id, Some(json!(6)));
    assert_eq!(s.unreadable, 1);
    assert_eq!(
        s.unreadable_example.as_deref(),
        Some("id=5: start_time = soon: not a time")
    );
    assert_eq!(s.implausible, 2);
    assert_eq!(
        s.implausible_example.as_deref(),
        Some("id=4: ends 5s before it starts")
    );
    assert_eq!((s.marked, s.rerun, s.false_positives), (1, 1, 4));
    assert_eq!(s.fp_heartbeat_impossible, 1);
    assert_eq!(s.false_positives_by_verdict.get("dead"), Some(&3));
    assert_eq!(s.false_positives_by_verdict.get("overtime"), Some(&1));
    // Only a death inferred from the heartbeat says something about stale_after.
    assert_eq!(s.fp_heartbeat_max_s, Some(480));
    assert_eq!(s.fp_conclusive, 1);
    assert_eq!(s.listed.len(), 4);
    assert_eq!(
        s.by_status
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("done", 6), ("skipped", 1)]
    );
    // Distinct statuses are counted by name up to a bound, then together.
    let mut many = WatchStats::default();
    for i in 0..i64::try_from(MAX_STATUSES).expect("small") + 5 {
        many.add(&id(i), &format!("s{i}"), Ok(1), true, Judgement::Plain);
    }
    many.add(&id(0), "s0", Ok(1), true, Judgement::Plain);
    assert_eq!(many.by_status.len(), MAX_STATUSES + 1);
    assert_eq!(many.by_status.get(OTHER_STATUSES), Some(&5));
    assert_eq!(many.by_status.get("s0"), Some(&2));
}

#[test]
fn suggestions_explain_themselves() {
    let mut s = WatchStats::default();
    assert_eq!(suggest_max_age(&s.runtimes, 1_800), None);
    for i in 0..100 {
        s.add(&json!(i), "done", Ok(7_000 + i), true, Judgement::Plain);
    }
    let m = suggest_max_age(&s.runtimes, 1_800).expect("suggestion");
    // max 7099s → 1.5x = 10649; p99 = 7098 → 2x = 14196 → rounded up to 4h.
    assert_eq!(m.secs, 14_400);
    assert!(
        m.reason.contains("1.5× the longest run (1h58m)"),
        "{}",
        m.reason
    );
    assert!(m.reason.contains("kills legitimate runs"), "{}", m.reason);
    assert!(!m.reason.contains("first guess"), "{}", m.reason);
    let m = suggest_max_age(&s.runtimes, 14_400).expect("suggestion");
    assert!(!m.reason.contains("kills"), "{}", m.reason);

    let st = suggest_stale_after(&s, 300);
    assert_eq!(st.secs, 300);
    assert!(st.reason.starts_with("keep it"), "{}", st.reason);
    s.fp_heartbeat_max_s = Some(480);
    let st = suggest_stale_after(&s, 300);
    assert_eq!(st.secs, 1_200, "twice 8m is 16m, rounded up to 20m");
    s.fp_heartbeat_max_s = Some(100);
    assert_eq!(suggest_stale_after(&s, 300).secs, 300);

    // Few runs: said so. stale_after above the runtimes: max_age stays above it.
    let mut few = WatchStats::default();
    few.add(&json!(1), "done", Ok(30), true, Judgement::Plain);
    few.fp_heartbeat_max_s = Some(3_000);
    let (st, m) = suggestions(&few, 300, 3_600);
    let m = m.expect("one run is enough for a guess");
    assert!(m.reason.contains("only 1 run ended well"), "{}", m.reason);
    assert!(m.secs > st.secs, "{} > {}", m.secs, st.secs);
}
