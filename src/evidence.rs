//! One running row's evidence: gathered by the sources of [`crate::probe`] ([`gather`];
//! [`read_again`] just before a write), rendered once as name/value pairs ([`render`])
//! that `--explain`, the JSON row and the journal entry take their part of, and said in
//! words for the row message ([`row_message`]: the deciding evidence in words, then the
//! figures; through it the text line, the event log and `stats`). Each is a loop over the
//! sources ([`probe::READ`], [`probe::SHOWN`]); what is particular to one kind of evidence
//! is in its source's file.
//!
//! I/O: [`gather`] and [`read_again`] read what the watch's sources read (a heartbeat
//! file's mtime, the job's lock, the owner's `/proc` entry) — except for a row whose owner
//! is another host, of which only the database's values are read (its files, locks and
//! pids are that host's); rendering and wording are pure.

use crate::config::Watch;
use crate::decide::{Basis, Decision, Evidence, Lock, Owner, Sign, Signal, Thresholds};
use crate::host::Host;
use crate::message;
use crate::probe::named::NamedTable;
use crate::probe::{self, Reading};
use crate::store::{JobTable, RunningRow};

pub use crate::probe::owner::is_remote;
pub use crate::probe::{Human, Item, LockHolder, Record, Rendered, Scene, Snapshot, Value};

/// The watch's thresholds, in seconds, as the decision takes them.
pub fn thresholds(w: &Watch) -> Thresholds {
    Thresholds {
        stale_after: w.stale_after.as_secs(),
        max_age: w.max_age.as_secs(),
    }
}

/// Gathers the evidence for one row: what the row holds, then what is true now. A row
/// whose times lie in the future gets [`Evidence::ahead`] with `seen_s` 0: the caller that
/// keeps selfheal's own sightings across runs fills it in
/// ([`crate::check::confirmations::Tally::sighting`]).
pub fn gather(w: &Watch, row: &RunningRow, scene: &Scene<'_>) -> Evidence {
    let at = Reading::new(w, row, scene);
    let mut e = Evidence::aged(0);
    for s in probe::READ {
        s.read_row(&at, &mut e);
    }
    read_now(&at, &mut e);
    e
}

/// [`Snapshot::read`], and what the database server says now of the named locks
/// (`db_lock`) of `rows`: their holders, in one statement per page of names through the
/// store, and which running row of the watch is the youngest of those sharing a name (every
/// running row is read for that, unless each template has `{id}`). A failure is kept in the
/// table: the rows' named locks are then unreadable (`docs/design.md#named-lock`).
pub fn with_named(w: &Watch, store: &mut dyn JobTable, rows: &[RunningRow]) -> Snapshot {
    let named = (!w.db_lock.is_empty()).then(|| {
        let mut t = NamedTable::default();
        if let Err(e) = ask_named(&mut t, store, w, rows) {
            t.error = Some(e.to_string());
        }
        t
    });
    Snapshot {
        named,
        ..Snapshot::read(w)
    }
}

fn ask_named(
    t: &mut NamedTable,
    store: &mut dyn JobTable,
    w: &Watch,
    rows: &[RunningRow],
) -> crate::error::Result<()> {
    t.database = store.lock_database()?;
    let mut names: Vec<String> = rows
        .iter()
        .filter_map(|r| probe::named::names_of(w, r, &t.database).ok())
        .flatten()
        .collect();
    names.sort_unstable();
    names.dedup();
    let holders = store.named_locks(&names)?;
    t.holders = names.into_iter().zip(holders).collect();
    if w.db_lock.iter().all(crate::config::LockTemplate::has_id) {
        return Ok(());
    }
    let mut youngest = probe::named::Youngest::default();
    let database = t.database.clone();
    store.each_running_row(w, &mut |r| {
        youngest.add(w, &r, &database);
        Ok(())
    })?;
    t.youngest = youngest.shared();
    Ok(())
}

/// The evidence of a row judged a moment ago (`judged`, gathered from this very `row`),
/// read again just before it is written: what can have changed — files, locks, the owner
/// pid — through the same sources; what the row holds (its times, its heartbeat column)
/// as it was judged, since the compare-and-set matches the row as it was read.
pub fn read_again(w: &Watch, row: &RunningRow, scene: &Scene<'_>, judged: &Evidence) -> Evidence {
    let mut e = judged.clone();
    read_now(&Reading::new(w, row, scene), &mut e);
    e
}

/// What is true now, source by source. Another host's row: its heartbeat file, lock and
/// pid live on that host, and whatever this host has under the same names is not them;
/// only what the database holds is its evidence.
fn read_now(at: &Reading<'_>, e: &mut Evidence) {
    if e.is_remote() {
        return;
    }
    for s in probe::READ {
        s.read_now(at, e);
    }
}

/// The host a row belongs to: the `HOST` of a `HOST:PID` owner as the row writes it;
/// this host's name for a bare `PID`, an empty owner or a watch without `owner_column`
/// (such rows are judged as this host's); `None` for an owner that is not an owner.
pub fn owner_host(row: &RunningRow, e: &Evidence, host: &Host) -> Option<String> {
    match &e.owner {
        Owner::NotLocal { host } => Some(host.clone()),
        Owner::Invalid(_) | Owner::Unreadable(_) => None,
        _ => match row.owner.as_deref().and_then(probe::owner::parse_owner) {
            Some((Some(h), _)) => Some(h.to_string()),
            _ => Some(host.name.clone()),
        },
    }
}

/// Renders evidence: each source its part, in the order they are shown.
pub fn render(e: &Evidence) -> Rendered {
    let mut out = Rendered {
        items: Vec::with_capacity(probe::SHOWN.len()),
        record: Record::default(),
        lock_holder: None,
    };
    for s in probe::SHOWN {
        s.render(e, &mut out);
    }
    out
}

// ---------------------------------------------------------------------------------------
// The row message: the deciding evidence in words, then the figures (docs/design.md#message)

/// The words of the decision: `lock free, worker gone`, `heartbeat stale, lock held by
/// pid 4242`. What a PHP developer reads first, so no bare numbers.
fn decision_words(d: &Decision, e: &Evidence) -> String {
    let owner_pid = match e.owner {
        Owner::Alive { pid } | Owner::Dead { pid } | Owner::Reused { pid, .. } => Some(pid),
        _ => None,
    };
    let reused_after = match e.owner {
        Owner::Reused { after_s, .. } => after_s,
        _ => 0,
    };
    match &d.basis {
        // The detail is in the basis (JSON, the text line, the journal): the row message of
        // a row selfheal cannot judge is never written to the row.
        Basis::Unreadable(_) => "evidence unreadable".into(),
        Basis::OwnerDead => owner_pid.map_or("owner gone".into(), message::owner_gone),
        Basis::OwnerReused => owner_pid.map_or("owner pid likely reused".into(), |p| {
            message::owner_reused(p, reused_after)
        }),
        Basis::TimesWrong { after_s, .. } => format!(
            "row times wrong: owner pid {} is its worker, started {} after the row",
            owner_pid.unwrap_or_default(),
            message::duration(*after_s)
        ),
        Basis::TimesAhead { by_s } => format!(
            "row times {} in the future, no fact about now",
            message::duration(*by_s)
        ),
        Basis::StaleLockUntrusted => "heartbeat stale, lock not trusted as free".into(),
        Basis::LockFree => message::LOCK_FREE.into(),
        Basis::NamedLockFree => message::NAMED_LOCK_FREE.into(),
        Basis::StaleButNamedLockHeld => "heartbeat stale, named lock held".into(),
        Basis::NamedLockHeld => "named lock held".into(),
        Basis::WorkerLives => "lock held or owner alive".into(),
        Basis::NothingDecides => "no sign either way".into(),
        // Never the words of a conclusive death first: the row is not proven dead.
        Basis::Contradicted(sig) | Basis::ContradictionPersists(sig) => format!(
            "own heartbeat fresh, but {}",
            match sig {
                Signal::OwnerDead => owner_pid.map_or("owner gone".into(), message::owner_gone),
                Signal::OwnerReused => owner_pid.map_or("owner gone".into(), |p| {
                    message::owner_reused(p, reused_after)
                }),
                Signal::LockFree => message::LOCK_FREE.into(),
                Signal::NamedLockFree => message::NAMED_LOCK_FREE.into(),
            }
        ),
        Basis::HeartbeatUnusable(_) => "heartbeat file unusable".into(),
        Basis::MaxAge => "running past max_age".into(),
        Basis::MaxAgeWorkerLives => "running past max_age, worker alive".into(),
        Basis::NoHeartbeatYet => "starting, no heartbeat yet".into(),
        Basis::HeartbeatFresh => "heartbeat fresh".into(),
        Basis::StaleButLockHeld => format!(
            "heartbeat stale, {}",
            probe::lock::words(&e.lock).unwrap_or_else(|| "lock held".into())
        ),
        Basis::StaleButOwnerAlive => format!(
            "heartbeat stale, {}",
            probe::owner::words(&e.owner).unwrap_or_else(|| "owner alive".into())
        ),
        Basis::HeartbeatStale => "heartbeat stale, no sign of the worker".into(),
        Basis::HeartbeatMissing => "no heartbeat, no sign of the worker".into(),
        // Never written: another host's rows are that host's to write.
        Basis::OtherHost(h) => format!("owned by host {h}, judged there"),
        Basis::OtherHostPastMaxAge(h) => format!("owned by host {h}, past max_age"),
        Basis::OtherHostSilent(h) => {
            format!("owned by host {h}, its heartbeat silent beyond max_age")
        }
    }
}

/// A sign of life ([`crate::decide::Life`]) in the row message's words: `lock held by pid
/// 4242`, `owner pid 4242 alive`.
pub fn sign_words(s: &Sign<'_>) -> String {
    let words = match *s {
        Sign::Lock(l) => probe::lock::words(&Lock::Held { pid: l.pid }),
        Sign::Owner(o) => probe::owner::words(&match o.later_s {
            None => Owner::Alive { pid: o.pid },
            Some(after_s) => Owner::Reused {
                pid: o.pid,
                after_s,
                proof: None,
            },
        }),
        Sign::OwnBeat(_) => Some("own heartbeat fresh".into()),
        Sign::NamedLock(h) => Some(format!("named lock held by connection {}", h.connection)),
    };
    words.unwrap_or_default()
}

/// The row message of docs/design.md#message for a decision on this evidence, before it is cut: the
/// deciding evidence in words, then the row's age, its heartbeat, the threshold that
/// decided (`max_age` for an overtime, else `stale_after`), and each source's words where
/// the decision's do not already name it ([`probe::Source::words`]: how far ahead the
/// row's times are, the lock, who the held lock's file names, the owner).
pub fn row_message(d: &Decision, e: &Evidence, t: Thresholds) -> String {
    let mut more = Vec::with_capacity(3);
    more.push(match d.basis {
        Basis::MaxAge
        | Basis::MaxAgeWorkerLives
        | Basis::OtherHostPastMaxAge(_)
        | Basis::OtherHostSilent(_) => {
            format!("max_age {}", message::duration(t.max_age))
        }
        _ => format!("stale_after {}", message::duration(t.stale_after)),
    });
    for s in probe::SHOWN {
        s.words(e, d, &mut more);
    }
    message::build(
        d.verdict,
        &decision_words(d, e),
        e.total_age.as_ref().ok().copied(),
        probe::heartbeat::figure(&e.heartbeat),
        &more,
    )
}

/// Every row message this watch can write, each decision a source can bring about
/// ([`probe::Source::deciding`]) with every source at its widest ([`probe::Source::widest`]).
fn widest_messages(w: &Watch) -> Vec<String> {
    let t = thresholds(w);
    probe::SHOWN
        .iter()
        .filter(|s| s.applies(w))
        .flat_map(|s| s.deciding())
        .map(|(verdict, basis)| {
            let mut e = Evidence::aged(0);
            for s in probe::SHOWN {
                s.widest(w, basis, t, &mut e);
            }
            row_message(&Decision::new(*verdict, basis.clone()), &e, t)
        })
        .collect()
}

/// The longest row message this watch can write (before cutting), in characters.
pub fn longest_message(w: &Watch) -> usize {
    widest_messages(w)
        .iter()
        .map(|m| m.chars().count())
        .max()
        .unwrap_or(0)
}

/// The longest part before the figures (`self-heal: <verdict>: <words>`) of a row message
/// this watch can write, in characters: a message column shorter than this loses the
/// words, not just figures.
pub fn longest_words(w: &Watch) -> usize {
    widest_messages(w)
        .iter()
        .map(|m| message::head(m).chars().count())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{Heartbeat, Verdict};
    use crate::holder_line::HolderLine;
    use crate::message;

    const T: Thresholds = Thresholds {
        stale_after: 300,
        max_age: 14_400,
    };

    fn ev(total: Result<u64, String>, heartbeat: Heartbeat, lock: Lock, owner: Owner) -> Evidence {
        Evidence::new(total)
            .with_heartbeat(heartbeat)
            .with_lock(lock)
            .with_owner(owner)
    }

    #[test]
    fn every_output_takes_its_part_of_one_rendering() {
        let e = ev(
            Ok(3_000),
            Heartbeat::Age(2_820),
            Lock::Held { pid: Some(42) },
            Owner::NotLocal {
                host: "web2".into(),
            },
        );
        let r = render(&e);
        assert_eq!(
            r.explain(),
            "running 50m, heartbeat 47m ago, lock held:42, owner remote:web2"
        );
        let d = Decision::new(Verdict::Hung, Basis::StaleButLockHeld);
        assert_eq!(
            row_message(&d, &e, T),
            "self-heal: hung: heartbeat stale, lock held by pid 42 (row 50m, heartbeat 47m \
             ago, stale_after 5m, owner on web2)"
        );
        assert_eq!(
            serde_json::to_value(&r.record).expect("json"),
            serde_json::json!({
                "total_age_s": 3000, "heartbeat_age_s": 2820, "heartbeat": "present",
                "lock": "held", "lock_pid": 42, "owner": "remote", "owner_pid": null,
            })
        );

        let e = ev(
            Err("start_time is NULL".into()),
            Heartbeat::Unreadable("EACCES".into()),
            Lock::NotConfigured,
            Owner::NotConfigured,
        );
        let r = render(&e);
        assert_eq!(
            r.explain(),
            "running unknown, heartbeat unreadable, lock none, owner none"
        );
        let d = Decision::new(
            Verdict::Unknown,
            Basis::Unreadable("heartbeat: EACCES".into()),
        );
        assert_eq!(
            row_message(&d, &e, T),
            "self-heal: unknown: evidence unreadable (row age unknown, heartbeat unreadable, \
             stale_after 5m)"
        );
        assert_eq!(r.record.heartbeat, "unreadable: EACCES");
        assert_eq!(
            (r.record.total_age_s, r.record.heartbeat_age_s),
            (None, None)
        );
    }

    /// The holder line names the holder in `--explain`, the row message and JSON, beside
    /// what `/proc/locks` says; it never changes the verdict.
    #[test]
    fn a_held_locks_file_names_its_holder_everywhere_and_decides_nothing() {
        let line = HolderLine {
            host: "web1".into(),
            pid: 4243,
            since: 1_796_032_800, // 2026-11-30T10:00:00Z
        };
        let held = |pid| {
            let mut e = ev(
                Ok(2_400),
                Heartbeat::Age(1_500),
                Lock::Held { pid },
                Owner::NotConfigured,
            );
            e.lock_holder = Some(line.clone());
            e
        };
        let cases = [
            (
                Some(4242),
                "lock held:4242 (the file names web1:4243 since 2026-11-30T10:00:00Z)",
            ),
            (
                Some(4243),
                "lock held:4243 (web1:4243 since 2026-11-30T10:00:00Z)",
            ),
            (
                None,
                "lock held (a try-lock failed; the file names web1:4243 since \
                 2026-11-30T10:00:00Z)",
            ),
        ];
        for (pid, want) in cases {
            let e = held(pid);
            let r = render(&e);
            assert!(r.explain().contains(want), "{}", r.explain());
            let d = crate::decide::decide(&e, T);
            let without = e.clone().with_lock_holder(None);
            assert_eq!(d, crate::decide::decide(&without, T), "naming only");
            assert_eq!(d.basis, Basis::StaleButLockHeld);
            let m = row_message(&d, &e, T);
            assert!(
                m.ends_with(", holder web1:4243 since 2026-11-30T10:00:00Z)"),
                "{m}"
            );
            assert_eq!(message::parse(&m).map(|p| p.total_age_s), Some(Some(2_400)));
            assert_eq!(
                serde_json::to_value(&r.lock_holder).expect("json"),
                serde_json::json!({"host": "web1", "pid": 4243, "since": "2026-11-30T10:00:00Z"})
            );
            assert_eq!(r.record.lock_pid, pid, "/proc/locks' pid stays as it was");
        }
        // A lock not held names nobody, whatever the file says.
        let mut e = held(None);
        e.lock = Lock::Free;
        let r = render(&e);
        assert_eq!(r.lock_holder, None);
        assert!(r.explain().contains("lock free (a try-lock got it),"));
        assert!(!row_message(&crate::decide::decide(&e, T), &e, T).contains("holder"));
        // A host from the file is printed cut (and escaped), never whole.
        let mut e = held(Some(1));
        e.lock_holder = Some(HolderLine {
            host: "x".repeat(300),
            ..line.clone()
        });
        let shown = render(&e).explain();
        assert!(
            shown.contains(&format!("names {}…:4243 since", "x".repeat(64))),
            "{shown}"
        );
    }

    #[test]
    fn the_message_says_what_decided_in_words_then_the_figures() {
        let d = |verdict, basis| Decision::new(verdict, basis);
        let cases = [
            (
                d(Verdict::Dead, Basis::LockFree),
                ev(
                    Ok(1200),
                    Heartbeat::Age(100),
                    Lock::Free,
                    Owner::NotConfigured,
                ),
                "self-heal: dead: lock free, worker gone (row 20m, heartbeat 1m40s ago, \
                 stale_after 5m)",
            ),
            (
                d(Verdict::Dead, Basis::OwnerDead),
                ev(
                    Ok(900),
                    Heartbeat::Age(10),
                    Lock::Absent,
                    Owner::Dead { pid: 4242 },
                ),
                "self-heal: dead: owner pid 4242 gone (row 15m, heartbeat 10s ago, \
                 stale_after 5m, no lock file)",
            ),
            (
                d(Verdict::Dead, Basis::HeartbeatMissing),
                ev(
                    Ok(3600),
                    Heartbeat::Missing,
                    Lock::NotConfigured,
                    Owner::Empty,
                ),
                "self-heal: dead: no heartbeat, no sign of the worker (row 1h, no heartbeat, \
                 stale_after 5m, no owner)",
            ),
            (
                d(Verdict::Hung, Basis::StaleButOwnerAlive),
                ev(
                    Ok(3000),
                    Heartbeat::Age(1800),
                    Lock::NotConfigured,
                    Owner::Alive { pid: 1 },
                ),
                "self-heal: hung: heartbeat stale, owner pid 1 alive (row 50m, heartbeat 30m \
                 ago, stale_after 5m)",
            ),
            (
                d(Verdict::Overtime, Basis::MaxAge),
                ev(
                    Ok(18_005),
                    Heartbeat::Age(10),
                    Lock::Held { pid: Some(77) },
                    Owner::NotConfigured,
                ),
                "self-heal: overtime: running past max_age (row 5h5s, heartbeat 10s ago, \
                 max_age 4h, lock held by pid 77)",
            ),
        ];
        for (d, e, want) in cases {
            assert_eq!(row_message(&d, &e, T), want);
        }
    }

    #[test]
    fn the_longest_message_is_the_widest_any_decision_writes() {
        let cfg = crate::config::from_str(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"w\"\n\
             table = \"t\"\nstarted_column = \"s\"\nheartbeat_file = \"/run/{id}\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\nlock_file = \"/run/{id}.lock\"\n\
             owner_column = \"o\"\n",
            std::path::Path::new("/etc/selfheal/selfheal.toml"),
            &crate::config::Overrides::default(),
            &[],
        )
        .expect("config");
        let w = &cfg.watches[0];
        let all = widest_messages(w);
        assert_eq!(
            longest_message(w),
            all.iter().map(|m| m.chars().count()).max().expect("some")
        );
        assert!(longest_words(w) < longest_message(w));
        // The reused owner's words are the longest.
        assert_eq!(
            longest_words(w),
            "self-heal: dead: owner pid 4194304 reused? started 16d16h after the row".len()
        );
    }

    #[test]
    fn the_row_message_of_any_evidence_parses_back_to_it() {
        let totals = [Ok(0), Ok(3_000), Err("bad".to_string())];
        let beats = [
            Heartbeat::Age(7),
            Heartbeat::Missing,
            Heartbeat::Unusable("x".into()),
            Heartbeat::Unreadable("x".into()),
        ];
        let locks = [
            Lock::NotConfigured,
            Lock::Held { pid: Some(9) },
            Lock::Held { pid: None },
            Lock::Free,
            Lock::Present,
            Lock::Untrusted("x".into()),
            Lock::Absent,
            Lock::Unreadable("x".into()),
        ];
        let owners = [
            Owner::NotConfigured,
            Owner::Empty,
            Owner::Alive { pid: 5 },
            Owner::Dead { pid: 5 },
            Owner::Reused {
                pid: 5,
                after_s: 60,
                proof: None,
            },
            Owner::NotLocal { host: "h".into() },
            Owner::Invalid("x".into()),
            Owner::Unreadable("x".into()),
        ];
        for total in &totals {
            for hb in &beats {
                for lock in &locks {
                    for (owner, own) in owners.iter().flat_map(|o| [(o, false), (o, true)]) {
                        let e = ev(total.clone(), hb.clone(), lock.clone(), owner.clone())
                            .with_heartbeat_own(own)
                            .with_lock_own(own);
                        let d = crate::decide::decide(&e, T);
                        let m = row_message(&d, &e, T);
                        let p = message::parse(&m).expect("prefix");
                        assert_eq!(p.verdict, d.verdict.as_str(), "{m}");
                        assert_eq!(p.total_age_s, total.as_ref().ok().copied(), "{m}");
                        let hb_age = match hb {
                            Heartbeat::Age(a) => Some(*a),
                            _ => None,
                        };
                        assert_eq!(p.heartbeat_age_s, hb_age, "{m}");
                        assert_eq!(p.conclusive, d.conclusive(), "{m}");
                    }
                }
            }
        }
    }
}
