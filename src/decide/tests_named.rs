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
