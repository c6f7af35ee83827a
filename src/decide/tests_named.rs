//! The named database lock (`db_lock`) in the decision table: named cases for its rules,
//! then an exhaustive sweep over every combination of its states with every other
//! source's, checking what `docs/design.md#named-lock` promises.

use super::tests::{all_heartbeats, all_locks, all_owners, all_totals, sweep_states};
use super::*;

const T: Thresholds = Thresholds {
    stale_after: 300,
    max_age: 14_400,
};

fn holder() -> NamedHolder {
    NamedHolder {
        connection: 42,
        user: Some("app".into()),
        host: Some("localhost".into()),
        time_s: Some(60),
    }
}

fn held() -> NamedLock {
    NamedLock::Held {
        name: "magento|CRON_x".into(),
        holder: holder(),
    }
}

fn all_named() -> Vec<NamedLock> {
    vec![
        NamedLock::NotConfigured,
        held(),
        NamedLock::Free,
        NamedLock::Shared,
        NamedLock::Unusable("too long".into()),
        NamedLock::Unreadable("gone away".into()),
    ]
}

fn aged(total: u64) -> Evidence {
    Evidence::aged(total)
}

#[test]
fn named_cases() {
    let no_hb = |total| aged(total).with_heartbeat(Heartbeat::NotConfigured);
    let cases: Vec<(&str, Evidence, Verdict, Basis)> = vec![
        (
            "a killed cron job: its lock free, the row past stale_after",
            no_hb(600).with_named(NamedLock::Free),
            Verdict::Dead,
            Basis::NamedLockFree,
        ),
        (
            "a job that just took its lock and marked its row: starting",
            no_hb(10).with_named(NamedLock::Free),
            Verdict::Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "a live run, lock held, no heartbeat configured: alive",
            no_hb(3_600).with_named(held()),
            Verdict::Alive,
            Basis::NamedLockHeld,
        ),
        (
            "a live 25-hour indexer: overtime, but the worker lives",
            no_hb(90_000).with_named(held()),
            Verdict::Overtime,
            Basis::MaxAgeWorkerLives,
        ),
        (
            "a stale heartbeat with the named lock held: hung, never dead",
            aged(3_600)
                .with_heartbeat(Heartbeat::Age(1_000))
                .with_named(held()),
            Verdict::Hung,
            Basis::StaleButNamedLockHeld,
        ),
        (
            "a missing heartbeat with the named lock held: hung",
            aged(3_600).with_named(held()),
            Verdict::Hung,
            Basis::StaleButNamedLockHeld,
        ),
        (
            "an older row whose name a younger row holds: neutral, nothing decides",
            no_hb(3_600).with_named(NamedLock::Shared),
            Verdict::Unknown,
            Basis::NothingDecides,
        ),
        (
            "a name beyond 64 characters: neutral",
            no_hb(3_600).with_named(NamedLock::Unusable("long".into())),
            Verdict::Unknown,
            Basis::NothingDecides,
        ),
        (
            "a server that cannot be asked: unknown",
            no_hb(3_600).with_named(NamedLock::Unreadable("gone".into())),
            Verdict::Unknown,
            Basis::Unreadable("db_lock: gone".into()),
        ),
        (
            "a free named lock beside a living owner pid: a person looks",
            no_hb(3_600)
                .with_named(NamedLock::Free)
                .with_owner(Owner::Alive { pid: 7 }),
            Verdict::Unknown,
            Basis::Unreadable(
                "the job's named lock is free, yet the owner pid is alive (is db_lock right?)"
                    .into(),
            ),
        ),
        (
            "a free named lock beside the row's own fresh heartbeat: contradicted",
            aged(3_600)
                .with_heartbeat(Heartbeat::Age(5))
                .with_named(NamedLock::Free),
            Verdict::Dead,
            Basis::Contradicted(Signal::NamedLockFree),
        ),
        (
            "the owner pid gone beside the named lock held: judged by the lock",
            no_hb(3_600)
                .with_named(held())
                .with_owner(Owner::Dead { pid: 7 }),
            Verdict::Alive,
            Basis::NamedLockHeld,
        ),
        (
            "no heartbeat, the owner gone (Aoe_Scheduler's pid): conclusive",
            no_hb(3_600)
                .with_named(NamedLock::Shared)
                .with_owner(Owner::Dead { pid: 7 }),
            Verdict::Dead,
            Basis::OwnerDead,
        ),
        (
            "no heartbeat, the owner alive: alive",
            no_hb(3_600)
                .with_named(NamedLock::Shared)
                .with_owner(Owner::Alive { pid: 7 }),
            Verdict::Alive,
            Basis::WorkerLives,
        ),
    ];
    for (name, e, verdict, basis) in cases {
        let d = decide(&e, T);
        assert_eq!((d.verdict, &d.basis), (verdict, &basis), "{name}");
    }
    // A person's resolve is refused while the named lock is held.
    let e = no_hb(3_600).with_named(held());
    assert!(matches!(
        e.life(T).for_a_person(),
        Some(evidence::Sign::NamedLock(_))
    ));
}

/// Every named-lock state beside every combination of the other sources'.
#[test]
fn every_named_lock_combination_keeps_its_promises() {
    let mut heartbeats = all_heartbeats();
    heartbeats.push(Heartbeat::NotConfigured);
    let mut n = 0;
    for named in all_named() {
        sweep_states(
            &all_totals(),
            &heartbeats,
            &all_locks(),
            &all_owners(),
            |e| {
                let e = e.clone().with_named(named.clone());
                let d = decide(&e, T);
                let ctx = format!("{e:?} -> {d:?}");
                n += 1;
                let remote = matches!(e.owner, Owner::NotLocal { .. });
                let other_unreadable = matches!(e.heartbeat, Heartbeat::Unreadable(_))
                    || matches!(e.lock, Lock::Unreadable(_))
                    || matches!(e.owner, Owner::Unreadable(_) | Owner::Invalid(_));
                // Unreadable: unknown, whatever else.
                if matches!(named, NamedLock::Unreadable(_)) {
                    assert_eq!(d.verdict, Verdict::Unknown, "{ctx}");
                    return;
                }
                if remote || other_unreadable {
                    return;
                }
                // Proof means proof: conclusive deaths are the three facts about now.
                assert_eq!(
                    d.conclusive(),
                    matches!(
                        d.basis,
                        Basis::OwnerDead | Basis::LockFree | Basis::NamedLockFree
                    ),
                    "{ctx}"
                );
                if d.basis == Basis::NamedLockFree {
                    let old = match e.ahead {
                        Some(a) => a.seen_s >= T.stale_after,
                        None => e.total_age.as_ref().is_ok_and(|t| *t >= T.stale_after),
                    };
                    assert!(named == NamedLock::Free && old, "{ctx}");
                }
                // Held is life: never dead, and a stale heartbeat is hung.
                if matches!(named, NamedLock::Held { .. }) {
                    assert_ne!(d.verdict, Verdict::Dead, "{ctx}");
                    assert!(!matches!(
                        d.basis,
                        Basis::HeartbeatStale | Basis::HeartbeatMissing
                    ));
                }
                // Neutral states weigh like no named lock at all, where a heartbeat is named.
                if matches!(named, NamedLock::Shared | NamedLock::Unusable(_))
                    && e.heartbeat != Heartbeat::NotConfigured
                {
                    let without = decide(&e.clone().with_named(NamedLock::NotConfigured), T);
                    assert_eq!(d, without, "{ctx}");
                }
                // With no heartbeat, silence is no evidence: dead only on a fact (or a pid that
                // looks reused, an inference of its own), never hung.
                if e.heartbeat == Heartbeat::NotConfigured {
                    assert_ne!(d.verdict, Verdict::Hung, "{ctx}");
                    if d.verdict == Verdict::Dead {
                        assert!(
                            d.conclusive() || d.contradicted() || d.basis == Basis::OwnerReused,
                            "{ctx}"
                        );
                    }
                }
                // A free named lock on an old row with nothing alive beside it reclaims it.
                let lives = e.life(T).proven() || e.life(T).own_beat.is_some();
                let total = e.total_age.clone().ok();
                if named == NamedLock::Free
                    && e.ahead.is_none()
                    && total.is_some_and(|t| t >= T.stale_after)
                    && !lives
                    && !matches!(e.owner, Owner::Reused { .. })
                    && !matches!(e.lock, Lock::Unconfirmed)
                {
                    assert_eq!(d.verdict, Verdict::Dead, "{ctx}");
                    assert!(d.conclusive(), "{ctx}");
                }
            },
        );
    }
    assert!(n > 400_000, "{n} combinations");
}

// ---------------------------------------------------------------------------------------
// The no-named-lock hold (docs/design.md#no-named-lock)

/// Every count of deaths on a free named lock, of rows holding their name, proven or not:
/// it trips only for a template never seen held, with not one name held now, and at least
/// two such deaths. One death alone is today's: a job that died.
#[test]
fn no_named_lock_trips_only_unproven_with_none_held_and_several_free_deaths() {
    for deaths in 0..=64 {
        for held in 0..=8 {
            for proven in [false, true] {
                let trips = no_named_lock(deaths, held, proven);
                assert_eq!(
                    trips,
                    !proven && held == 0 && deaths >= 2,
                    "{deaths} deaths, {held} held, proven {proven}"
                );
            }
        }
    }
    assert_eq!(NAMED_LOCK_FREE_DEATHS, 2);
    assert!(!no_named_lock(1, 0, false), "one job that died");
    assert!(no_named_lock(2, 0, false));
    assert!(no_named_lock(100_000, 0, false), "a whole backlog");
    assert!(
        !no_named_lock(100_000, 1, false),
        "one name held proves the template"
    );
    assert!(
        !no_named_lock(100_000, 0, true),
        "seen held by an earlier run"
    );
}

/// Every decision of every combination of evidence, under every plan a watch can make:
/// the hold holds a death on a free named lock — written or not, whatever the plan — and
/// nothing else; and the other whole-watch holds still let that death through.
#[test]
fn the_no_named_lock_hold_holds_deaths_on_a_free_named_lock_and_nothing_else() {
    let policies = [
        ActionPolicy {
            dead_value: "error",
            manual_value: None,
            retry: None,
            overtime: crate::config::Overtime::MarkDead,
        },
        ActionPolicy {
            dead_value: "error",
            manual_value: Some("wait_manual"),
            retry: Some(("pending", 3)),
            overtime: crate::config::Overtime::Manual,
        },
    ];
    let mut heartbeats = all_heartbeats();
    heartbeats.push(Heartbeat::NotConfigured);
    let mut held_back = 0;
    for named in all_named() {
        sweep_states(
            &all_totals(),
            &heartbeats,
            &all_locks(),
            &all_owners(),
            |e| {
                let e = e.clone().with_named(named.clone());
                let d = decide(&e, T);
                let ctx = format!("{e:?} -> {d:?}");
                let free_death = d.basis == Basis::NamedLockFree;
                assert_eq!(Hold::NoNamedLock.applies_to(&d), free_death, "{ctx}");
                if free_death {
                    assert_eq!(e.named, NamedLock::Free, "{ctx}");
                    assert!(d.conclusive(), "{ctx}");
                }
                for p in &policies {
                    for attempts in [None, Some(5)] {
                        let planned = plan(&d, attempts, p);
                        let held = hold(planned.clone(), &d, Hold::NoNamedLock);
                        if free_death {
                            assert!(planned.writes(), "a free named lock writes: {ctx}");
                            assert_eq!(held.hold, Some(Hold::NoNamedLock), "{ctx}");
                            assert!(!held.writes() && held.attention, "{ctx}");
                            held_back += 1;
                            // Conclusive: the breaker, the clocks, no heartbeat and a mass
                            // overtime let it through, as before.
                            for other in [
                                Hold::Breaker,
                                Hold::ClockSkew,
                                Hold::NoHeartbeat,
                                Hold::MassOvertime,
                            ] {
                                assert_eq!(hold(planned.clone(), &d, other), planned, "{ctx}");
                            }
                        } else {
                            assert_eq!(held, planned, "{ctx}");
                        }
                    }
                }
            },
        );
    }
    assert!(held_back > 1_000, "{held_back}");
    assert!(Hold::NoNamedLock.needs_a_person());
    assert_eq!(Hold::NoNamedLock.as_str(), "no_named_lock");
}

/// One row of a simulated watch: its evidence, judged and planned as a run plans it
/// under the holds the watch as a whole comes to (as `check/sweep.rs` counts them).
struct Judged {
    decision: Decision,
    plan: Plan,
}

/// A watch's rows judged: first counted (names held now, deaths on a free named lock a
/// run would write), then planned under the no-named-lock hold if it trips.
fn judge_watch(rows: &[Evidence], proven: bool) -> (bool, Vec<Judged>) {
    let p = ActionPolicy {
        dead_value: "error",
        manual_value: None,
        retry: None,
        overtime: crate::config::Overtime::MarkDead,
    };
    let decided: Vec<(Decision, Plan)> = rows
        .iter()
        .map(|e| {
            let d = decide(e, T);
            let planned = hold_contradiction(plan(&d, None, &p), &d);
            (d, planned)
        })
        .collect();
    let held_now = rows
        .iter()
        .filter(|e| matches!(e.named, NamedLock::Held { .. }))
        .count();
    let deaths = decided
        .iter()
        .filter(|(d, p)| Hold::NoNamedLock.applies_to(d) && p.writes())
        .count();
    let trips = no_named_lock(deaths, held_now, proven);
    let judged = decided
        .into_iter()
        .map(|(d, planned)| Judged {
            plan: if trips {
                hold(planned, &d, Hold::NoNamedLock)
            } else {
                planned
            },
            decision: d,
        })
        .collect();
    (trips, judged)
}

/// The Magento recipe's shape (no heartbeat, the named lock alone) through whole watches:
/// a wrong template writes nothing; the right one, with some names held, marks the free
/// rows as before; a proven template marks every job a deploy killed; one free row alone,
/// and facts about now other than the named lock, act as before.
#[test]
fn a_watch_whose_names_are_all_free_is_held_whole_until_its_template_is_proven() {
    let no_hb = |total| aged(total).with_heartbeat(Heartbeat::NotConfigured);
    let free = |total| no_hb(total).with_named(NamedLock::Free);
    let live = |total| no_hb(total).with_named(held());
    let writes = |j: &[Judged]| j.iter().filter(|j| j.plan.writes()).count();

    // A wrong template: five live jobs, every name free. Nothing is written, every row is
    // held for a person.
    let wrong: Vec<Evidence> = (1..=5).map(|i| free(600 * i)).collect();
    let (trips, j) = judge_watch(&wrong, false);
    assert!(trips);
    assert_eq!(writes(&j), 0);
    assert!(
        j.iter()
            .all(|j| j.plan.hold == Some(Hold::NoNamedLock) && j.plan.attention)
    );

    // The same rows once the template was seen held (a deploy killed every worker).
    let (trips, j) = judge_watch(&wrong, true);
    assert!(!trips);
    assert_eq!(writes(&j), 5);
    assert!(j.iter().all(|j| j.decision.basis == Basis::NamedLockFree));

    // The right template: three live jobs hold theirs, two died. The two are marked.
    let mixed = vec![live(600), free(900), live(1_200), free(3_600), live(7_200)];
    let (trips, j) = judge_watch(&mixed, false);
    assert!(!trips);
    assert_eq!(writes(&j), 2);
    for (e, j) in mixed.iter().zip(&j) {
        let dead = e.named == NamedLock::Free;
        assert_eq!(j.plan.writes(), dead, "{e:?}");
        assert_eq!(j.plan.hold, None, "{e:?}");
    }

    // One free row alone: a job that died, marked as before.
    let (trips, j) = judge_watch(&[free(600)], false);
    assert!(!trips);
    assert_eq!(writes(&j), 1);

    // Two free rows beside young ones that prove nothing yet: held all the same (a share
    // of the rows would let young rows dilute a wrong template's deaths).
    let diluted = vec![free(600), free(900), free(10), free(20), free(30), free(40)];
    let (trips, j) = judge_watch(&diluted, false);
    assert!(trips);
    assert_eq!(writes(&j), 0);
    assert_eq!(
        j.iter()
            .filter(|j| j.decision.verdict == Verdict::Starting)
            .count(),
        4
    );

    // A gone owner pid is a fact of its own: it acts under the hold; the free names wait.
    let owner_gone = vec![
        free(600).with_owner(Owner::Dead { pid: 7 }),
        free(900),
        free(1_200),
    ];
    let (trips, j) = judge_watch(&owner_gone, false);
    assert!(trips);
    assert_eq!(writes(&j), 1);
    assert_eq!(j[0].decision.basis, Basis::OwnerDead);
    assert!(j[0].plan.writes());

    // Neutral names (shared with a younger row, unusable) prove nothing and count nothing.
    let neutral = vec![
        no_hb(600).with_named(NamedLock::Shared),
        no_hb(600).with_named(NamedLock::Unusable("long".into())),
        free(900),
    ];
    let (trips, j) = judge_watch(&neutral, false);
    assert!(!trips, "one death on a free name");
    assert_eq!(writes(&j), 1);
    let neutral_two = vec![
        no_hb(600).with_named(NamedLock::Shared),
        free(900),
        free(1_200),
    ];
    assert!(judge_watch(&neutral_two, false).0);

    // A heartbeat beside: free names on beating rows wait as contradictions; the silent
    // ones alone count, and are held while none is held.
    let beating = vec![
        aged(3_600)
            .with_heartbeat(Heartbeat::Age(5))
            .with_named(NamedLock::Free),
        aged(3_600)
            .with_heartbeat(Heartbeat::Age(1_000))
            .with_named(NamedLock::Free),
        aged(3_600)
            .with_heartbeat(Heartbeat::Age(2_000))
            .with_named(NamedLock::Free),
    ];
    let (trips, j) = judge_watch(&beating, false);
    assert!(trips);
    assert_eq!(
        j[0].decision.basis,
        Basis::Contradicted(Signal::NamedLockFree)
    );
    assert_eq!(writes(&j), 0);
}
