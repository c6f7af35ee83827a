//! The decision table: named cases for every rule and boundary, then an exhaustive sweep
//! over every combination of evidence checking the safety properties the product promises.

use super::*;

const T: Thresholds = Thresholds {
    stale_after: 300,
    max_age: 14_400,
};

/// Evidence none of which is the row's own (a shared heartbeat file, a per-kind lock held
/// by someone else): what every death signal acts on at once. [`own`] makes it the row's.
fn ev(total: Option<u64>, hb: Heartbeat, lock: Lock, owner: Owner) -> Evidence {
    Evidence::new(total.ok_or_else(|| "NULL".to_string()))
        .with_heartbeat(hb)
        .with_heartbeat_own(false)
        .with_lock(lock)
        .with_owner(owner)
}

/// The same evidence, with the heartbeat and the lock the row's own.
fn own(e: Evidence) -> Evidence {
    e.with_heartbeat_own(true).with_lock_own(true)
}

fn hb(a: u64) -> Heartbeat {
    Heartbeat::Age(a)
}

use Heartbeat::{BeforeRow, Missing};
use Lock::{Absent, Free, NotConfigured as NoLock, Unconfirmed};
use Owner::{Empty, NotConfigured as NoOwner};

fn held() -> Lock {
    Lock::Held { pid: Some(4242) }
}
fn alive() -> Owner {
    Owner::Alive { pid: 4242 }
}
fn dead() -> Owner {
    Owner::Dead { pid: 4242 }
}
fn reused() -> Owner {
    Owner::Reused {
        pid: 4242,
        after_s: 3_600,
        proof: None,
    }
}
fn not_visible() -> Owner {
    Owner::NotVisible { pid: 4242 }
}
fn web2() -> Owner {
    Owner::NotLocal {
        host: "web2".into(),
    }
}

#[test]
fn named_cases() {
    use Verdict::*;
    let cases: Vec<(&str, Evidence, Verdict, Basis)> = vec![
        // The seed incident: a 2h10m run with a 20 s old heartbeat and a 4 h cap lives.
        (
            "seed: 2h10m run, fresh heartbeat",
            ev(Some(7_800), hb(20), NoLock, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "dead: heartbeat 47 min old",
            ev(Some(3_000), hb(2_820), NoLock, NoOwner),
            Dead,
            Basis::HeartbeatStale,
        ),
        (
            "starting: 30 s old, no heartbeat",
            ev(Some(30), Missing, NoLock, NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "missing heartbeat at exactly stale_after",
            ev(Some(300), Missing, NoLock, NoOwner),
            Dead,
            Basis::HeartbeatMissing,
        ),
        (
            "missing heartbeat just below stale_after",
            ev(Some(299), Missing, NoLock, NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "heartbeat exactly stale_after is fresh",
            ev(Some(1_000), hb(300), NoLock, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "heartbeat one second past stale_after",
            ev(Some(1_000), hb(301), NoLock, NoOwner),
            Dead,
            Basis::HeartbeatStale,
        ),
        (
            "total exactly max_age is within",
            ev(Some(14_400), hb(5), NoLock, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "total one second past max_age",
            ev(Some(14_401), hb(5), NoLock, NoOwner),
            Overtime,
            Basis::MaxAge,
        ),
        (
            "overtime beats a stale heartbeat",
            ev(Some(20_000), hb(9_000), NoLock, NoOwner),
            Overtime,
            Basis::MaxAge,
        ),
        (
            "overtime even while the lock is held, but the worker provably lives",
            ev(Some(20_000), hb(5), held(), NoOwner),
            Overtime,
            Basis::MaxAgeWorkerLives,
        ),
        (
            "overtime with the owner alive: the worker provably lives",
            ev(Some(20_000), hb(9_000), NoLock, alive()),
            Overtime,
            Basis::MaxAgeWorkerLives,
        ),
        (
            "overtime with a lock nobody was seen holding: not proof of life",
            ev(Some(20_000), hb(5), Unconfirmed, NoOwner),
            Overtime,
            Basis::MaxAge,
        ),
        (
            "unreadable heartbeat is unknown, not dead",
            ev(
                Some(3_000),
                Heartbeat::Unreadable("EACCES".into()),
                NoLock,
                NoOwner,
            ),
            Unknown,
            Basis::Unreadable("heartbeat: EACCES".into()),
        ),
        (
            "unreadable start is unknown",
            ev(None, hb(5), NoLock, NoOwner),
            Unknown,
            Basis::Unreadable("start time: NULL".into()),
        ),
        (
            "unreadable lock is unknown",
            ev(
                Some(3_000),
                hb(2_000),
                Lock::Unreadable("EIO".into()),
                NoOwner,
            ),
            Unknown,
            Basis::Unreadable("lock: EIO".into()),
        ),
        (
            "unreadable owner is unknown",
            ev(
                Some(3_000),
                hb(2_000),
                NoLock,
                Owner::Unreadable("EACCES".into()),
            ),
            Unknown,
            Basis::Unreadable("owner: EACCES".into()),
        ),
        (
            "garbage owner is unknown",
            ev(
                Some(3_000),
                hb(2_000),
                NoLock,
                Owner::Invalid("web-3".into()),
            ),
            Unknown,
            Basis::Unreadable("owner: \"web-3\" is not HOST:PID or PID".into()),
        ),
        (
            "unknown wins over conclusive death",
            ev(
                Some(3_000),
                Heartbeat::Unreadable("EIO".into()),
                Free,
                dead(),
            ),
            Unknown,
            Basis::Unreadable("heartbeat: EIO".into()),
        ),
        // Lock evidence.
        (
            "stale heartbeat but lock held: hung",
            ev(Some(3_000), hb(2_820), held(), NoOwner),
            Hung,
            Basis::StaleButLockHeld,
        ),
        (
            "missing heartbeat but lock held: hung",
            ev(Some(3_000), Missing, held(), NoOwner),
            Hung,
            Basis::StaleButLockHeld,
        ),
        (
            "lock confirmed free, row old: dead at once, fresh heartbeat or not",
            ev(Some(3_000), hb(10), Free, NoOwner),
            Dead,
            Basis::LockFree,
        ),
        // The issue's case 1: /proc/locks (another pid namespace, NFS) shows no holder of
        // a lock the worker holds, and it beat 0 s ago.
        (
            "lock free only as /proc/locks shows it, fresh heartbeat: alive",
            ev(Some(3_000), hb(0), Unconfirmed, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "unconfirmed free lock, stale: dead by heartbeat only, never conclusive",
            ev(Some(3_000), hb(2_000), Unconfirmed, NoOwner),
            Dead,
            Basis::HeartbeatStale,
        ),
        (
            "a try-lock that failed: held, holder not visible: hung",
            ev(Some(3_000), hb(2_000), Lock::Held { pid: None }, NoOwner),
            Hung,
            Basis::StaleButLockHeld,
        ),
        (
            "unconfirmed free lock beside a living owner: the same contradiction",
            ev(Some(3_000), hb(20), Unconfirmed, alive()),
            Unknown,
            Basis::Unreadable(
                "the job's lock is free, yet the owner pid is alive (is lock_file right?)".into(),
            ),
        ),
        (
            "lock free, row exactly stale_after old",
            ev(Some(300), Missing, Free, NoOwner),
            Dead,
            Basis::LockFree,
        ),
        (
            "lock free, row young: not yet conclusive",
            ev(Some(299), Missing, Free, NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "lock free beats overtime",
            ev(Some(20_000), hb(5), Free, NoOwner),
            Dead,
            Basis::LockFree,
        ),
        (
            "lock file absent proves nothing",
            ev(Some(3_000), hb(10), Absent, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "lock absent and stale: dead by heartbeat",
            ev(Some(3_000), hb(2_000), Absent, NoOwner),
            Dead,
            Basis::HeartbeatStale,
        ),
        // A legacy existence lock (release_lock = "if_free"): no kernel lock is its normal
        // state, so a present file is neutral — never the conclusive "lock free".
        (
            "existence lock present, fresh heartbeat, old row: alive",
            ev(Some(7_800), hb(20), Lock::Present, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "existence lock present, stale: dead by heartbeat, not conclusive",
            ev(Some(3_000), hb(2_820), Lock::Present, NoOwner),
            Dead,
            Basis::HeartbeatStale,
        ),
        (
            "existence lock present, owner alive, stale: hung, not a contradiction",
            ev(Some(3_000), hb(2_820), Lock::Present, alive()),
            Hung,
            Basis::StaleButOwnerAlive,
        ),
        (
            "existence lock present past max_age: overtime, not dead",
            ev(Some(20_000), hb(5), Lock::Present, NoOwner),
            Overtime,
            Basis::MaxAge,
        ),
        (
            "lock held and fresh: alive",
            ev(Some(3_000), hb(3), held(), NoOwner),
            Alive,
            Basis::HeartbeatFresh,
        ),
        // Owner evidence.
        (
            "owner dead: dead, even with a fresh heartbeat",
            ev(Some(3_000), hb(1), NoLock, dead()),
            Dead,
            Basis::OwnerDead,
        ),
        (
            "owner dead while young: starting (a launcher may exit before its worker beats)",
            ev(Some(5), Missing, NoLock, dead()),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "owner dead at stale_after: dead",
            ev(Some(300), Missing, NoLock, dead()),
            Dead,
            Basis::OwnerDead,
        ),
        (
            "owner pid reused: dead",
            ev(Some(3_000), hb(1), NoLock, reused()),
            Dead,
            Basis::OwnerReused,
        ),
        (
            "owner dead beats a held lock (another worker holds it)",
            ev(Some(3_000), hb(2_000), held(), dead()),
            Dead,
            Basis::OwnerDead,
        ),
        (
            "owner alive, stale: hung",
            ev(Some(3_000), hb(2_000), NoLock, alive()),
            Hung,
            Basis::StaleButOwnerAlive,
        ),
        (
            "owner alive, lock free: contradiction, a person looks",
            ev(Some(3_000), hb(2_000), Free, alive()),
            Unknown,
            Basis::Unreadable(
                "the job's lock is free, yet the owner pid is alive (is lock_file right?)".into(),
            ),
        ),
        // Another host's row (docs/design.md#precedence, precedence 2): never judged by this host's files,
        // locks or pids, and reported only when its host may be gone for good.
        (
            "remote, no heartbeat column, within max_age",
            ev(Some(3_000), Missing, NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote, no heartbeat column, exactly max_age",
            ev(Some(14_400), Missing, NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote, no heartbeat column, past max_age",
            ev(Some(14_401), Missing, NoLock, web2()),
            Remote,
            Basis::OtherHostPastMaxAge("web2".into()),
        ),
        (
            "remote, heartbeat column fresh, within max_age",
            ev(Some(3_000), hb(20), NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote, heartbeat column stale (a lock held there is invisible here): not dead",
            ev(Some(3_000), hb(2_820), NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote, heartbeat column stale exactly max_age",
            ev(Some(14_400), hb(14_400), NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote, heartbeat column stale beyond max_age (older than the row)",
            ev(Some(3_000), hb(14_401), NoLock, web2()),
            Remote,
            Basis::OtherHostSilent("web2".into()),
        ),
        (
            "remote, heartbeat column fresh, past max_age",
            ev(Some(20_000), hb(5), NoLock, web2()),
            Remote,
            Basis::OtherHostPastMaxAge("web2".into()),
        ),
        (
            "remote, heartbeat column stale beyond max_age, past max_age",
            ev(Some(20_000), hb(19_000), NoLock, web2()),
            Remote,
            Basis::OtherHostPastMaxAge("web2".into()),
        ),
        (
            "remote, no heartbeat yet, young: remote, not starting",
            ev(Some(30), Missing, NoLock, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "remote beats a free lock: the holder there is invisible here",
            ev(Some(3_000), Missing, Free, web2()),
            Remote,
            Basis::OtherHost("web2".into()),
        ),
        (
            "unknown beats remote: an unreadable heartbeat column",
            ev(
                Some(3_000),
                Heartbeat::Unreadable("in the future".into()),
                NoLock,
                web2(),
            ),
            Unknown,
            Basis::Unreadable("heartbeat: in the future".into()),
        ),
        (
            "unknown beats remote: an unreadable start",
            ev(None, hb(5), NoLock, web2()),
            Unknown,
            Basis::Unreadable("start time: NULL".into()),
        ),
        (
            "owner column empty proves nothing",
            ev(Some(3_000), hb(20), NoLock, Empty),
            Alive,
            Basis::HeartbeatFresh,
        ),
        // Outside the initial pid namespace: the pid says nothing.
        (
            "owner pid not visible, fresh: alive",
            ev(Some(3_000), hb(0), NoLock, not_visible()),
            Alive,
            Basis::HeartbeatFresh,
        ),
        (
            "owner pid not visible, stale: dead by heartbeat only, never conclusive",
            ev(Some(3_000), hb(2_000), NoLock, not_visible()),
            Dead,
            Basis::HeartbeatStale,
        ),
        (
            "owner pid not visible, lock confirmed free: the lock decides",
            ev(Some(3_000), hb(0), Free, not_visible()),
            Dead,
            Basis::LockFree,
        ),
        // A heartbeat older than the row: an earlier row's (ids reused). The issue's case
        // 3: a new row 12, 8 s old, and a file 7209 s old.
        (
            "heartbeat older than a young row: starting, not dead",
            ev(Some(8), BeforeRow(7_209), NoLock, NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "heartbeat older than a young row with its lock held: starting, not hung",
            ev(Some(3), BeforeRow(7_209), held(), NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
        ),
        (
            "heartbeat older than an old row: missing",
            ev(Some(3_000), BeforeRow(7_209), NoLock, NoOwner),
            Dead,
            Basis::HeartbeatMissing,
        ),
        (
            "heartbeat older than an old row, lock held: hung",
            ev(Some(3_000), BeforeRow(7_209), held(), NoOwner),
            Hung,
            Basis::StaleButLockHeld,
        ),
    ];
    for (name, e, verdict, basis) in cases {
        let d = decide(&e, T);
        assert_eq!((d.verdict, &d.basis), (verdict, &basis), "{name}");
    }
}

pub(super) fn all_totals() -> Vec<Option<u64>> {
    vec![
        None,
        Some(0),
        Some(30),
        Some(299),
        Some(300),
        Some(301),
        Some(7_800),
        Some(14_399),
        Some(14_400),
        Some(14_401),
        Some(100_000),
    ]
}
pub(super) fn all_heartbeats() -> Vec<Heartbeat> {
    vec![
        Heartbeat::Unreadable("x".into()),
        Heartbeat::Unusable("nodir".into()),
        Missing,
        BeforeRow(20),
        BeforeRow(7_209),
        hb(0),
        hb(20),
        hb(299),
        hb(300),
        hb(301),
        hb(2_820),
        hb(1_000_000),
    ]
}
pub(super) fn all_locks() -> Vec<Lock> {
    vec![
        NoLock,
        held(),
        Lock::Held { pid: Some(7) },
        Lock::Held { pid: None },
        Unconfirmed,
        Free,
        Lock::Present,
        Lock::Untrusted("every user".into()),
        Absent,
        Lock::Unreadable("x".into()),
    ]
}
pub(super) fn all_owners() -> Vec<Owner> {
    vec![
        NoOwner,
        Empty,
        alive(),
        dead(),
        reused(),
        Owner::Reused {
            pid: 4242,
            after_s: 3_600,
            proof: Some(WorkerProof::BeatSinceStart),
        },
        not_visible(),
        Owner::NotLocal { host: "h".into() },
        Owner::Invalid("?".into()),
        Owner::Unreadable("x".into()),
    ]
}

/// Times that lie in the future: none, and a row selfheal has just seen or has seen for
/// `stale_after`.
fn all_aheads() -> Vec<Option<Ahead>> {
    vec![
        None,
        Some(Ahead {
            by_s: 18_000,
            seen_s: 0,
        }),
        Some(Ahead {
            by_s: 18_000,
            seen_s: T.stale_after - 1,
        }),
        Some(Ahead {
            by_s: 18_000,
            seen_s: T.stale_after,
        }),
    ]
}

/// Every combination of these states, whose or not, with and without times in the
/// future, to `f`.
pub(super) fn sweep_states(
    totals: &[Option<u64>],
    heartbeats: &[Heartbeat],
    locks: &[Lock],
    owners: &[Owner],
    mut f: impl FnMut(&Evidence),
) {
    for total in totals {
        for h in heartbeats {
            for l in locks {
                for o in owners {
                    for (heartbeat_own, lock_own) in
                        [(false, false), (true, false), (false, true), (true, true)]
                    {
                        for ahead in all_aheads() {
                            if ahead.is_some() && total.is_some() {
                                continue;
                            }
                            let e = ev(*total, h.clone(), l.clone(), o.clone())
                                .with_heartbeat_own(heartbeat_own)
                                .with_lock_own(lock_own)
                                .with_ahead(ahead);
                            f(&e);
                        }
                    }
                }
            }
        }
    }
}

/// Every combination of evidence, whose or not, with and without times in the future.
fn sweep(mut f: impl FnMut(&Evidence, &Decision)) -> usize {
    let mut n = 0;
    for total in all_totals() {
        for h in all_heartbeats() {
            for l in all_locks() {
                for o in all_owners() {
                    for (heartbeat_own, lock_own) in
                        [(false, false), (true, false), (false, true), (true, true)]
                    {
                        for ahead in all_aheads() {
                            // A row whose times lie ahead has no age.
                            if ahead.is_some() && total.is_some() {
                                continue;
                            }
                            let e = ev(total, h.clone(), l.clone(), o.clone())
                                .with_heartbeat_own(heartbeat_own)
                                .with_lock_own(lock_own)
                                .with_ahead(ahead);
                            let d = decide(&e, T);
                            f(&e, &d);
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    n
}

#[test]
fn every_combination_keeps_the_promises() {
    let n = sweep(|e, d| {
        let ctx = format!("{e:?} -> {d:?}");
        let unreadable = matches!(e.heartbeat, Heartbeat::Unreadable(_))
            || matches!(e.lock, Lock::Unreadable(_))
            || matches!(e.owner, Owner::Unreadable(_) | Owner::Invalid(_))
            || (e.total_age.is_err() && e.ahead.is_none());
        let total = e.total_age.clone().unwrap_or(0);
        let lock_held = matches!(e.lock, Lock::Held { .. });
        let owner_alive = matches!(e.owner, Owner::Alive { .. });
        let lives = lock_held || owner_alive;
        let owner_dead = matches!(e.owner, Owner::Dead { .. });
        let reused = matches!(e.owner, Owner::Reused { .. });
        let fresh = matches!(e.heartbeat, Heartbeat::Age(a) if a <= T.stale_after);
        let no_beat = matches!(e.heartbeat, Missing | BeforeRow(_));
        let unusable = matches!(e.heartbeat, Heartbeat::Unusable(_));
        let untrusted = matches!(e.lock, Lock::Untrusted(_));
        // The row's own evidence of life.
        let own_lock_held = lock_held && e.lock_own;
        let own_fresh = fresh && e.heartbeat_own;
        // How old the row is for "older than stale_after": its age, or for a row whose
        // times lie ahead, selfheal's own sighting of it.
        let old = match e.ahead {
            Some(a) => a.seen_s >= T.stale_after,
            None => total >= T.stale_after,
        };
        // Facts about now: the owner pid gone, the lock free (tried, trusted, row old).
        let lock_free_old = e.lock == Lock::Free && old;
        let seen_free_old = matches!(e.lock, Lock::Free | Lock::Unconfirmed) && old;
        let fact = (owner_dead && !own_lock_held && old) || lock_free_old;

        if unreadable {
            assert_eq!(d.verdict, Verdict::Unknown, "{ctx}");
            return;
        }
        // Another host's row is remote whatever this host's evidence says, never written,
        // and needs a person only once its host may be gone.
        if matches!(e.owner, Owner::NotLocal { .. }) {
            assert_eq!(d.verdict, Verdict::Remote, "{ctx}");
            let gone = (e.ahead.is_none() && total > T.max_age)
                || matches!(e.heartbeat, Heartbeat::Age(a) if a > T.max_age);
            for p in [
                POLICY,
                ActionPolicy {
                    manual_value: Some("m"),
                    retry: Some(("r", 3)),
                    overtime: Overtime::Manual,
                    ..POLICY
                },
            ] {
                let p = plan(d, Some(0), &p);
                assert!(!p.writes(), "{ctx}");
                assert_eq!(p.attention, gone, "{ctx}");
            }
            assert!(!d.conclusive(), "{ctx}");
            return;
        }
        // Proof means proof: only a fact about now is conclusive, and a conclusive death
        // rests on one.
        assert_eq!(
            d.conclusive(),
            matches!(d.basis, Basis::OwnerDead | Basis::LockFree),
            "{ctx}"
        );
        if d.conclusive() {
            assert!(fact, "{ctx}");
            assert_eq!(d.verdict, Verdict::Dead, "{ctx}");
            // Evidence selfheal cannot trust proves nothing.
            assert!(
                !matches!(e.lock, Lock::Unconfirmed | Lock::Untrusted(_)) || owner_dead,
                "{ctx}"
            );
            assert!(
                !matches!(e.owner, Owner::NotVisible { .. }) || lock_free_old,
                "{ctx}"
            );
        }
        // Life beats inference: the row's own lock, held, is never marked dead.
        if own_lock_held {
            assert_ne!(d.verdict, Verdict::Dead, "{ctx}");
        }
        if !own_lock_held {
            assert_eq!(d.overruled, None, "{ctx}");
        }
        // A death is never written beside a provably living owner or the row's own lock;
        // beside a lock that cannot be trusted as free, only a gone pid kills.
        if d.verdict == Verdict::Dead && !d.contradicted() {
            assert!(!owner_alive && !own_lock_held, "{ctx}");
            if untrusted {
                assert!(d.conclusive() && owner_dead, "{ctx}");
            }
        }
        // A row whose times lie ahead is judged by the facts about now alone: dead on one
        // (once seen for stale_after), waiting beside its own fresh beat, else unknown.
        if e.ahead.is_some() {
            match d.verdict {
                Verdict::Dead if d.contradicted() => assert!(fact && own_fresh, "{ctx}"),
                Verdict::Dead => assert!(fact && !own_fresh, "{ctx}"),
                Verdict::Unknown => assert!(
                    !fact || own_lock_held || (seen_free_old && (owner_alive || reused)),
                    "{ctx}"
                ),
                _ => panic!("a row whose times lie ahead judged by its times: {ctx}"),
            }
            return;
        }
        // An owner pid that looks reused: the worker (and unknown) when the row's own
        // evidence proves it, never overtime; else an inference, never conclusive.
        if let Owner::Reused { pid, proof, .. } = e.owner {
            let by_that_pid = own_lock_held && e.lock == Lock::Held { pid: Some(pid) };
            if by_that_pid || own_fresh || proof.is_some() {
                assert_eq!(d.verdict, Verdict::Unknown, "{ctx}");
                assert!(matches!(d.basis, Basis::TimesWrong { .. }), "{ctx}");
                return;
            }
            assert!(!matches!(d.basis, Basis::TimesWrong { .. }), "{ctx}");
        } else {
            assert!(!matches!(d.basis, Basis::TimesWrong { .. }), "{ctx}");
        }
        match d.verdict {
            Verdict::Remote => panic!("remote without another host: {ctx}"),
            Verdict::Unknown => {
                // The lock-free-but-owner-alive contradiction, an unusable heartbeat with
                // nothing conclusive, a silent row beside a lock others could swap, and
                // nothing else (a contradiction goes to a person only by `persisting`).
                assert!(
                    (seen_free_old && owner_alive)
                        || (unusable && !fact && (T.stale_after..=T.max_age).contains(&total))
                        || (untrusted
                            && !lives
                            && !fresh
                            && !fact
                            && total <= T.max_age
                            && !((no_beat || unusable) && total < T.stale_after)),
                    "{ctx}"
                );
            }
            Verdict::Dead if d.contradicted() => {
                // A death signal waiting for the row's own fresh heartbeat: never acted on
                // as a conclusive death, and never past the cap (that is an overtime).
                assert!(fact && own_fresh && total <= T.max_age, "{ctx}");
                assert!(!d.conclusive() && !d.inferred(), "{ctx}");
                let p = hold_contradiction(plan(d, Some(0), &POLICY), d);
                assert!(!p.writes() && !p.attention, "{ctx}");
                assert_eq!(p.hold, Some(Hold::Contradicted), "{ctx}");
            }
            Verdict::Dead => {
                // Conclusive on a fact, or inferred: a silent heartbeat with no sign of
                // life, or a pid that looks reused with nothing of the row's own for it.
                assert!(
                    d.conclusive()
                        || (d.basis == Basis::OwnerReused && reused && !own_fresh)
                        || (!lives && !fresh && !unusable && !reused && total <= T.max_age),
                    "{ctx}"
                );
                assert_eq!(d.inferred(), !d.conclusive(), "{ctx}");
                assert!(!(d.conclusive() && own_fresh), "{ctx}");
            }
            Verdict::Overtime => {
                assert!(total > T.max_age && (own_fresh || !fact), "{ctx}");
                // A worker that provably runs is told apart: it is never marked dead.
                assert_eq!(d.basis == Basis::MaxAgeWorkerLives, lives, "{ctx}");
            }
            Verdict::Starting => {
                assert!(
                    total < T.stale_after && (no_beat || unusable) && !fact,
                    "{ctx}"
                );
            }
            Verdict::Alive => {
                assert!(fresh && total <= T.max_age && !fact, "{ctx}");
            }
            Verdict::Hung => {
                assert!(lives && !fresh && total <= T.max_age && !fact, "{ctx}");
                assert!(!unusable, "{ctx}");
                assert!(!(no_beat && total < T.stale_after), "{ctx}");
            }
        }
        // Inferred verdicts are exactly the hung rows and the deaths drawn from a silent
        // heartbeat or a pid that looks reused.
        assert_eq!(
            d.inferred(),
            d.verdict == Verdict::Hung
                || (d.verdict == Verdict::Dead && !d.conclusive() && !d.contradicted()),
            "{ctx}"
        );
        // A fresh heartbeat within the cap with no death signal standing is always alive:
        // the seed's legitimate two-hour run.
        let contradiction = seen_free_old && owner_alive;
        if fresh && total <= T.max_age && !fact && !contradiction && !reused {
            assert_eq!(d.verdict, Verdict::Alive, "{ctx}");
        }
    });
    assert_eq!(n, 11 * 12 * 10 * 10 * 4 + 12 * 10 * 10 * 4 * 3);
}

/// Replaces one piece of evidence.
fn with(e: &Evidence, f: impl FnOnce(&mut Evidence)) -> Evidence {
    let mut e = e.clone();
    f(&mut e);
    e
}

#[test]
fn evidence_selfheal_cannot_trust_weighs_like_no_evidence() {
    sweep(|e, d| {
        // A heartbeat older than the row is exactly a missing one.
        if let BeforeRow(_) = e.heartbeat {
            let missing = with(e, |e| e.heartbeat = Missing);
            assert_eq!(*d, decide(&missing, T), "{e:?}");
        }
        // A pid of another namespace is exactly no owner column.
        if let Owner::NotVisible { .. } = e.owner {
            let none = with(e, |e| e.owner = NoOwner);
            assert_eq!(*d, decide(&none, T), "{e:?}");
        }
        // A lock nobody was seen holding is an absent one, but for the contradiction with
        // a living owner.
        if e.lock == Unconfirmed && d.verdict != Verdict::Unknown {
            let absent = with(e, |e| e.lock = Absent);
            assert_eq!(*d, decide(&absent, T), "{e:?}");
        }
        // Confirming the lock only ever turns a verdict into a conclusive death (or, beside
        // the row's own fresh heartbeat, a contradiction) or leaves it: a held lock (the
        // try-lock failed) never makes a row look deader.
        if let Some(confirmed) = as_if_confirmed(e) {
            let c = decide(&confirmed, T);
            assert!(
                c == *d || c.conclusive() || c.contradicted(),
                "{e:?}: {d:?} -> {c:?}"
            );
            let held = decide(&with(e, |e| e.lock = Lock::Held { pid: None }), T);
            let owner_gone = matches!(e.owner, Owner::Dead { .. } | Owner::Reused { .. });
            // (A pid that looks reused is an inference: a held lock stops it too.)
            assert!(
                held.verdict != Verdict::Dead || owner_gone,
                "{e:?}: {held:?}"
            );
        } else {
            assert_ne!(e.lock, Unconfirmed);
        }
    });
}

#[test]
fn an_older_heartbeat_never_looks_more_alive() {
    // Holding everything else fixed, ageing the heartbeat never turns a non-alive verdict
    // into alive.
    for total in all_totals().into_iter().flatten() {
        for l in all_locks() {
            for o in all_owners() {
                let mut seen_not_alive = false;
                for a in [0, 20, 299, 300, 301, 2_820, 1_000_000] {
                    let v = decide(&ev(Some(total), hb(a), l.clone(), o.clone()), T).verdict;
                    assert!(
                        v != Verdict::Alive || !seen_not_alive,
                        "{total} {a} {l:?} {o:?}"
                    );
                    seen_not_alive |= v != Verdict::Alive;
                }
            }
        }
    }
}

const POLICY: ActionPolicy<'static> = ActionPolicy {
    dead_value: "error",
    manual_value: None,
    retry: None,
    overtime: Overtime::MarkDead,
};

fn d(v: Verdict, b: Basis) -> Decision {
    Decision::new(v, b)
}

#[test]
fn plans() {
    let dead = d(Verdict::Dead, Basis::HeartbeatStale);
    let p = plan(&dead, None, &POLICY);
    assert_eq!(
        (p.action, p.target.as_deref(), p.attention),
        (Action::MarkDead, Some("error"), false)
    );

    for v in [Verdict::Alive, Verdict::Starting] {
        let p = plan(&d(v, Basis::HeartbeatFresh), None, &POLICY);
        assert_eq!((p.action, p.attention), (Action::None, false), "{v:?}");
    }
    let p = plan(
        &d(Verdict::Unknown, Basis::Unreadable("x".into())),
        None,
        &POLICY,
    );
    assert_eq!((p.action, p.attention), (Action::None, true));

    // hung: manual state when configured, else reported.
    let hung = d(Verdict::Hung, Basis::StaleButLockHeld);
    assert_eq!(plan(&hung, None, &POLICY).action, Action::None);
    assert!(plan(&hung, None, &POLICY).attention);
    let manual = ActionPolicy {
        manual_value: Some("wait_manual"),
        ..POLICY
    };
    let p = plan(&hung, None, &manual);
    assert_eq!(
        (p.action, p.target.as_deref(), p.attention),
        (Action::MarkManual, Some("wait_manual"), true)
    );

    // overtime per policy; never to the retry queue.
    let ot = d(Verdict::Overtime, Basis::MaxAge);
    let retrying = ActionPolicy {
        retry: Some(("pending", 3)),
        manual_value: Some("wait_manual"),
        ..POLICY
    };
    assert_eq!(plan(&ot, Some(0), &retrying).action, Action::MarkDead);
    assert_eq!(
        plan(
            &ot,
            None,
            &ActionPolicy {
                overtime: Overtime::Report,
                ..POLICY
            }
        )
        .action,
        Action::None
    );
    assert!(
        plan(
            &ot,
            None,
            &ActionPolicy {
                overtime: Overtime::Report,
                ..POLICY
            }
        )
        .attention
    );
    assert_eq!(
        plan(
            &ot,
            None,
            &ActionPolicy {
                overtime: Overtime::Manual,
                ..manual
            }
        )
        .action,
        Action::MarkManual
    );

    // retry budget: below max → retry; spent → manual, or dead without a manual state.
    assert_eq!(plan(&dead, None, &retrying).action, Action::MarkRetry);
    assert_eq!(plan(&dead, Some(2), &retrying).action, Action::MarkRetry);
    assert_eq!(plan(&dead, Some(3), &retrying).action, Action::MarkManual);
    assert_eq!(plan(&dead, Some(7), &retrying).action, Action::MarkManual);
    let no_manual = ActionPolicy {
        manual_value: None,
        ..retrying
    };
    assert_eq!(plan(&dead, Some(3), &no_manual).action, Action::MarkDead);
}

#[test]
fn holds_keep_only_conclusive_deaths() {
    let stale = d(Verdict::Dead, Basis::HeartbeatStale);
    let lock_free = d(Verdict::Dead, Basis::LockFree);
    let owner_dead = d(Verdict::Dead, Basis::OwnerDead);
    let ot = d(Verdict::Overtime, Basis::MaxAge);
    for why in [Hold::Breaker, Hold::ClockSkew] {
        let p = hold(plan(&stale, None, &POLICY), &stale, why);
        assert_eq!(
            (p.action, p.attention, p.hold),
            (Action::None, true, Some(why))
        );
        let p = hold(plan(&ot, None, &POLICY), &ot, why);
        assert_eq!(p.action, Action::None);
        for c in [&lock_free, &owner_dead] {
            assert_eq!(
                hold(plan(c, None, &POLICY), c, why).action,
                Action::MarkDead
            );
        }
        let alive = d(Verdict::Alive, Basis::HeartbeatFresh);
        assert_eq!(
            hold(plan(&alive, None, &POLICY), &alive, why),
            plan(&alive, None, &POLICY)
        );
    }
    assert!(inferred_death(&stale, &plan(&stale, None, &POLICY)));
    assert!(!inferred_death(
        &lock_free,
        &plan(&lock_free, None, &POLICY)
    ));
}

#[test]
fn remote_rows_are_never_written() {
    let everything = ActionPolicy {
        manual_value: Some("wait_manual"),
        retry: Some(("pending", 3)),
        ..POLICY
    };
    for (basis, attention) in [
        (Basis::OtherHost("web2".into()), false),
        (Basis::OtherHostPastMaxAge("web2".into()), true),
        (Basis::OtherHostSilent("web2".into()), true),
    ] {
        let r = d(Verdict::Remote, basis);
        for p in [&POLICY, &everything] {
            let pl = plan(&r, Some(0), p);
            assert_eq!((pl.action, pl.attention), (Action::None, attention));
            for why in [Hold::Breaker, Hold::ClockSkew] {
                assert_eq!(hold(pl.clone(), &r, why), pl);
            }
            assert!(!inferred_death(&r, &pl));
        }
        assert!(r.basis.describe().contains("host web2 owns the row"));
    }
}

#[test]
fn breaker_threshold() {
    assert!(!breaker_trips(2, 2));
    assert!(!breaker_trips(2, 3));
    assert!(breaker_trips(3, 3));
    assert!(breaker_trips(3, 5));
    assert!(!breaker_trips(3, 6));
    assert!(breaker_trips(4, 7));
    assert!(!breaker_trips(5, 10));
    assert!(breaker_trips(6, 10));
}

#[test]
fn overtime_with_a_living_worker_is_never_marked_dead() {
    // The issue's case 8: a 5-hour run whose worker holds its flock and beat 5 s ago.
    let lives = decide(&ev(Some(18_000), hb(5), held(), NoOwner), T);
    assert_eq!(lives.basis, Basis::MaxAgeWorkerLives);
    let manual = ActionPolicy {
        manual_value: Some("wait_manual"),
        ..POLICY
    };
    let p = plan(&lives, None, &manual);
    assert_eq!(
        (p.action, p.target.as_deref(), p.attention),
        (Action::MarkManual, Some("wait_manual"), true)
    );
    let p = plan(&lives, None, &POLICY);
    assert_eq!(
        (p.action, p.target, p.attention),
        (Action::None, None, true)
    );
    // manual and report stay as they are.
    for (policy, action) in [
        (Overtime::Manual, Action::MarkManual),
        (Overtime::Report, Action::None),
    ] {
        let p = plan(
            &lives,
            None,
            &ActionPolicy {
                overtime: policy,
                ..manual
            },
        );
        assert_eq!(p.action, action, "{policy:?}");
    }
    // A stuck heartbeat with nothing alive: the backstop marks it.
    let stuck = decide(&ev(Some(18_000), hb(5), NoLock, NoOwner), T);
    assert_eq!(plan(&stuck, None, &manual).action, Action::MarkDead);
    // Over every combination: a plan never sets dead_value past max_age while the lock
    // is held or the owner lives.
    sweep(|e, d| {
        let lives = matches!(e.lock, Lock::Held { .. }) || matches!(e.owner, Owner::Alive { .. });
        if d.verdict == Verdict::Overtime && lives {
            for p in [&POLICY, &manual] {
                let pl = plan(d, None, p);
                assert_ne!(pl.action, Action::MarkDead, "{e:?}");
                assert_ne!(pl.target.as_deref(), Some("error"), "{e:?}");
            }
        }
    });
}

#[test]
fn inferred_verdicts_wait_for_confirmation_and_conclusive_ones_do_not() {
    let manual = ActionPolicy {
        manual_value: Some("wait_manual"),
        ..POLICY
    };
    let first = Some(Confirmation {
        count: 1,
        confirm: 2,
    });
    let second = Some(Confirmation {
        count: 2,
        confirm: 2,
    });
    let confirming = Plan {
        action: Action::None,
        target: None,
        attention: false,
        hold: Some(Hold::Confirming),
    };
    for inferred in [
        d(Verdict::Dead, Basis::HeartbeatStale),
        d(Verdict::Dead, Basis::HeartbeatMissing),
        d(Verdict::Hung, Basis::StaleButLockHeld),
        d(Verdict::Hung, Basis::StaleButOwnerAlive),
        d(Verdict::Dead, Basis::OwnerReused),
    ] {
        assert!(inferred.inferred(), "{inferred:?}");
        for p in [&POLICY, &manual] {
            let planned = plan(&inferred, None, p);
            assert_eq!(confirm(planned.clone(), &inferred, first), confirming);
            assert_eq!(confirm(planned.clone(), &inferred, second), planned);
            // Not counted at all (`confirm = 1` with no state): as planned.
            assert_eq!(confirm(planned.clone(), &inferred, None), planned);
        }
    }
    // Conclusive deaths, overtime, unknown and the living act (or not) at once.
    for now in [
        d(Verdict::Dead, Basis::LockFree),
        d(Verdict::Dead, Basis::OwnerDead),
        d(Verdict::Overtime, Basis::MaxAge),
        d(Verdict::Overtime, Basis::MaxAgeWorkerLives),
        d(Verdict::Unknown, Basis::Unreadable("x".into())),
        d(Verdict::Alive, Basis::HeartbeatFresh),
        d(Verdict::Starting, Basis::NoHeartbeatYet),
    ] {
        assert!(!now.inferred(), "{now:?}");
        let planned = plan(&now, None, &manual);
        assert_eq!(confirm(planned.clone(), &now, first), planned, "{now:?}");
    }
    // A confirming row is neither a breaker death nor held back as one.
    let silent = d(Verdict::Dead, Basis::HeartbeatStale);
    let held = confirm(plan(&silent, None, &POLICY), &silent, first);
    assert!(!inferred_death(&silent, &held));
    assert_eq!(hold(held.clone(), &silent, Hold::Breaker), held);
}

#[test]
fn a_lock_is_tried_only_as_a_hypothesis_of_a_free_one() {
    let e = ev(Some(3_000), hb(0), Unconfirmed, NoOwner);
    let c = as_if_confirmed(&e).expect("unconfirmed");
    assert_eq!(c.lock, Free);
    assert_eq!(decide(&c, T).basis, Basis::LockFree);
    for l in [NoLock, held(), Free, Lock::Present, Absent] {
        assert_eq!(as_if_confirmed(&ev(Some(3_000), hb(0), l, NoOwner)), None);
    }
}

/// docs/design.md#life-beats-inference "Life beats inference": every pairing of a death signal with the row's own
/// evidence of life, and with evidence that is not the row's own.
#[test]
fn life_beats_inference() {
    use Verdict::*;
    let old = Some(1_201); // past stale_after, within max_age
    let cases: Vec<(&str, Evidence, Verdict, Basis, Option<Signal>)> = vec![
        // The issue's case 1: a launcher wrote its pid and exited; the worker holds the
        // row's own lock and beat 0 s ago.
        (
            "owner gone, own lock held, fresh: alive, the owner noted",
            own(ev(old, hb(0), held(), dead())),
            Alive,
            Basis::HeartbeatFresh,
            Some(Signal::OwnerDead),
        ),
        (
            "owner gone, own lock held, stale: hung (a person), never dead",
            own(ev(old, hb(2_000), held(), dead())),
            Hung,
            Basis::StaleButLockHeld,
            Some(Signal::OwnerDead),
        ),
        (
            "owner reused, own lock held by another pid, missing heartbeat: hung",
            own(ev(old, Missing, Lock::Held { pid: Some(7) }, reused())),
            Hung,
            Basis::StaleButLockHeld,
            Some(Signal::OwnerReused),
        ),
        (
            "owner gone, own lock held, past max_age: overtime with the worker alive",
            own(ev(Some(14_401), hb(0), held(), dead())),
            Overtime,
            Basis::MaxAgeWorkerLives,
            Some(Signal::OwnerDead),
        ),
        // A per-kind lock held by the next run of the job proves nothing about this row.
        (
            "owner gone, someone else's lock held, stale: dead",
            ev(old, hb(2_000), held(), dead()),
            Dead,
            Basis::OwnerDead,
            None,
        ),
        // A death signal meeting the row's own fresh heartbeat: a contradiction.
        (
            "owner gone, own fresh heartbeat: contradicted",
            ev(old, hb(0), NoLock, dead()).with_heartbeat_own(true),
            Dead,
            Basis::Contradicted(Signal::OwnerDead),
            None,
        ),
        (
            "owner gone, own heartbeat at exactly stale_after: contradicted",
            ev(old, hb(300), NoLock, dead()).with_heartbeat_own(true),
            Dead,
            Basis::Contradicted(Signal::OwnerDead),
            None,
        ),
        (
            "owner gone, own heartbeat just stale: the death acts at once",
            ev(old, hb(301), NoLock, dead()).with_heartbeat_own(true),
            Dead,
            Basis::OwnerDead,
            None,
        ),
        (
            "owner reused, own fresh heartbeat: the worker, whose row's times are wrong",
            ev(old, hb(5), NoLock, reused()).with_heartbeat_own(true),
            Unknown,
            Basis::TimesWrong {
                after_s: 3_600,
                proof: WorkerProof::OwnHeartbeat,
            },
            None,
        ),
        (
            "lock confirmed free, own fresh heartbeat: contradicted",
            ev(old, hb(5), Free, NoOwner).with_heartbeat_own(true),
            Dead,
            Basis::Contradicted(Signal::LockFree),
            None,
        ),
        (
            "owner gone, a shared heartbeat fresh (another row's beat): dead",
            ev(old, hb(0), NoLock, dead()),
            Dead,
            Basis::OwnerDead,
            None,
        ),
        (
            "owner gone, own fresh heartbeat, past max_age: the cap is not a death signal",
            ev(Some(14_401), hb(0), NoLock, dead()).with_heartbeat_own(true),
            Overtime,
            Basis::MaxAge,
            None,
        ),
        (
            "owner gone on a young row, own fresh heartbeat: alive (too young to say)",
            ev(Some(10), hb(0), NoLock, dead()).with_heartbeat_own(true),
            Alive,
            Basis::HeartbeatFresh,
            None,
        ),
        // The issue's case 3: a lock file swapped in a directory others can write.
        (
            "lock free where others could swap it, fresh: alive",
            ev(old, hb(0), Lock::Untrusted("every user".into()), NoOwner),
            Alive,
            Basis::HeartbeatFresh,
            None,
        ),
        (
            "lock free where others could swap it, stale: unknown, never dead",
            ev(
                old,
                hb(2_000),
                Lock::Untrusted("every user".into()),
                NoOwner,
            ),
            Unknown,
            Basis::StaleLockUntrusted,
            None,
        ),
        (
            "lock free where others could swap it, missing: unknown, never dead",
            ev(old, Missing, Lock::Untrusted("every user".into()), Empty),
            Unknown,
            Basis::StaleLockUntrusted,
            None,
        ),
        (
            "lock free where others could swap it, owner gone: the gone pid acts",
            ev(old, hb(2_000), Lock::Untrusted("every user".into()), dead()),
            Dead,
            Basis::OwnerDead,
            None,
        ),
        // The issue's case 2: a typo in heartbeat_file.
        (
            "heartbeat directory missing, nothing conclusive: unknown",
            ev(old, Heartbeat::Unusable("d: nodir".into()), NoLock, NoOwner),
            Unknown,
            Basis::HeartbeatUnusable("d: nodir".into()),
            None,
        ),
        (
            "heartbeat directory missing, lock held: unknown, never hung",
            ev(old, Heartbeat::Unusable("d".into()), held(), NoOwner),
            Unknown,
            Basis::HeartbeatUnusable("d".into()),
            None,
        ),
        (
            "heartbeat directory missing, owner gone: the conclusive evidence acts",
            ev(old, Heartbeat::Unusable("d".into()), NoLock, dead()),
            Dead,
            Basis::OwnerDead,
            None,
        ),
        (
            "heartbeat directory missing, young row: starting",
            ev(Some(30), Heartbeat::Unusable("d".into()), NoLock, NoOwner),
            Starting,
            Basis::NoHeartbeatYet,
            None,
        ),
        (
            "heartbeat directory missing, past max_age: the cap acts",
            ev(
                Some(14_401),
                Heartbeat::Unusable("d".into()),
                NoLock,
                NoOwner,
            ),
            Overtime,
            Basis::MaxAge,
            None,
        ),
        (
            "heartbeat directory missing but the column beats: alive",
            ev(old, hb(3), NoLock, NoOwner),
            Alive,
            Basis::HeartbeatFresh,
            None,
        ),
    ];
    for (name, e, verdict, basis, overruled) in cases {
        let d = decide(&e, T);
        assert_eq!(
            (d.verdict, &d.basis, d.overruled),
            (verdict, &basis, overruled),
            "{name}"
        );
    }
}

#[test]
fn a_contradiction_goes_to_a_person_once_it_has_stood_for_stale_after() {
    let c = Decision::new(Verdict::Dead, Basis::Contradicted(Signal::OwnerDead));
    assert_eq!(persisting(c.clone(), 0, T), c);
    assert_eq!(persisting(c.clone(), T.stale_after - 1, T), c);
    let p = persisting(c, T.stale_after, T);
    assert_eq!(
        (p.verdict, &p.basis),
        (
            Verdict::Unknown,
            &Basis::ContradictionPersists(Signal::OwnerDead)
        )
    );
    // Reported for a person, naming both, and the setting to check.
    let words = p.basis.describe();
    assert!(words.contains("owner pid no longer exists"), "{words}");
    assert!(words.contains("own heartbeat"), "{words}");
    assert!(words.contains("owner_column"), "{words}");
    assert!(plan(&p, None, &POLICY).attention);
    // Anything else is as it was, however long.
    let other = Decision::new(Verdict::Dead, Basis::OwnerDead);
    assert_eq!(persisting(other.clone(), 100_000, T), other);
}

#[test]
fn each_whole_watch_hold_holds_what_it_is_about() {
    let hb_dead = d(Verdict::Dead, Basis::HeartbeatMissing);
    let hung = d(Verdict::Hung, Basis::StaleButLockHeld);
    let owner_dead = d(Verdict::Dead, Basis::OwnerDead);
    let overtime = d(Verdict::Overtime, Basis::MaxAge);
    let contradicted = d(Verdict::Dead, Basis::Contradicted(Signal::OwnerDead));
    let named_free = d(Verdict::Dead, Basis::NamedLockFree);
    let p = ActionPolicy {
        manual_value: Some("m"),
        ..POLICY
    };
    for (hold_, applies) in [
        (Hold::Breaker, [true, true, false, true, true, false]),
        (Hold::ClockSkew, [true, true, false, true, true, false]),
        (Hold::NoHeartbeat, [true, true, false, false, false, false]),
        (
            Hold::MassOvertime,
            [false, false, false, true, false, false],
        ),
        (Hold::NoNamedLock, [false, false, false, false, false, true]),
    ] {
        for (dd, applies) in [
            &hb_dead,
            &hung,
            &owner_dead,
            &overtime,
            &contradicted,
            &named_free,
        ]
        .into_iter()
        .zip(applies)
        {
            assert_eq!(hold_.applies_to(dd), applies, "{hold_:?} {dd:?}");
            let planned = plan(dd, None, &p);
            let held = hold(planned.clone(), dd, hold_);
            if applies && planned.writes() {
                assert_eq!(held.hold, Some(hold_), "{hold_:?} {dd:?}");
                assert!(!held.writes() && held.attention, "{hold_:?} {dd:?}");
            } else {
                assert_eq!(held, planned, "{hold_:?} {dd:?}");
            }
        }
        assert!(hold_.needs_a_person());
    }
    assert!(!Hold::Confirming.needs_a_person());
    assert!(!Hold::Contradicted.needs_a_person());
    // A conclusive death is never held back by a whole-watch hold, but for a free named
    // lock's by the no-named-lock hold (a template never seen held).
    for h in [
        Hold::Breaker,
        Hold::ClockSkew,
        Hold::NoHeartbeat,
        Hold::MassOvertime,
        Hold::NoNamedLock,
    ] {
        assert!(!h.applies_to(&owner_dead), "{h:?}");
        assert_eq!(h.applies_to(&named_free), h == Hold::NoNamedLock, "{h:?}");
    }
}

#[test]
fn whole_watch_thresholds() {
    // Mass overtime: like the breaker, more than half and at least 3.
    assert!(!mass_overtime(2, 2));
    assert!(mass_overtime(3, 5));
    assert!(!mass_overtime(3, 6));
    assert!(mass_overtime(1_000_000, 1_000_000));
    // No heartbeat: any number of rows, none beating, one past stale_after.
    assert!(no_heartbeat(1, 0, 1));
    assert!(!no_heartbeat(1, 0, 0));
    assert!(!no_heartbeat(10, 1, 10));
    assert!(!no_heartbeat(0, 0, 0));
    assert!(no_heartbeat(500, 0, 1));
}

/// docs/design.md#proof-means-proof "Proof means proof": every pairing of an owner pid that looks reused with the
/// row's own lock, its own heartbeat and the breaker, and rows whose times lie ahead.
#[test]
fn proof_means_proof() {
    use Verdict::*;
    let old = Some(18_301); // the row looks 5 h old: a session time zone of -05:00
    let later = |beat_since_start: bool| Owner::Reused {
        pid: 4242,
        after_s: 18_000,
        proof: beat_since_start.then_some(WorkerProof::BeatSinceStart),
    };
    let wrong = |proof| Basis::TimesWrong {
        after_s: 18_000,
        proof,
    };
    let cases: Vec<(&str, Evidence, Verdict, Basis)> = vec![
        // The pid is the worker: its row's times are wrong, whatever else they say.
        (
            "own lock held by that very pid, past max_age: unknown, never overtime",
            own(ev(old, Missing, held(), later(false))),
            Unknown,
            wrong(WorkerProof::OwnLock),
        ),
        (
            "own fresh heartbeat, past max_age: unknown, never overtime",
            ev(old, hb(1), NoLock, later(false)).with_heartbeat_own(true),
            Unknown,
            wrong(WorkerProof::OwnHeartbeat),
        ),
        (
            "own fresh heartbeat within max_age: unknown, never contradicted",
            ev(Some(1_200), hb(1), NoLock, later(false)).with_heartbeat_own(true),
            Unknown,
            wrong(WorkerProof::OwnHeartbeat),
        ),
        (
            "own heartbeat file touched since the process started, stale now (a hung \
             worker): unknown, never dead",
            ev(Some(1_200), hb(900), NoLock, later(true)).with_heartbeat_own(true),
            Unknown,
            wrong(WorkerProof::BeatSinceStart),
        ),
        // Nothing of the row's own says so: an inference, confirmed before it acts.
        (
            "no heartbeat, no lock: dead by inference",
            ev(Some(1_200), Missing, NoLock, later(false)),
            Dead,
            Basis::OwnerReused,
        ),
        (
            "a fresh heartbeat another row shares: dead by inference",
            ev(Some(1_200), hb(1), NoLock, later(false)),
            Dead,
            Basis::OwnerReused,
        ),
        (
            "someone else's lock held (the next run of the job): dead by inference",
            ev(Some(1_200), hb(900), held(), later(false)),
            Dead,
            Basis::OwnerReused,
        ),
        (
            "own lock held by another pid: judged by the heartbeat, the owner noted",
            own(ev(
                Some(1_200),
                hb(900),
                Lock::Held { pid: Some(7) },
                later(false),
            )),
            Hung,
            Basis::StaleButLockHeld,
        ),
        (
            "a free lock beside it is a fact about now: conclusive",
            ev(Some(1_200), hb(900), Free, later(false)),
            Dead,
            Basis::LockFree,
        ),
        (
            "a lock that cannot be trusted as free: judged by the heartbeat, never dead",
            ev(
                Some(1_200),
                hb(900),
                Lock::Untrusted("every user".into()),
                later(false),
            ),
            Unknown,
            Basis::StaleLockUntrusted,
        ),
    ];
    for (name, e, verdict, basis) in cases {
        let d = decide(&e, T);
        assert_eq!((d.verdict, &d.basis), (verdict, &basis), "{name}");
        if d.basis == Basis::OwnerReused {
            // Inferred: it waits for confirmation and the breaker counts it.
            assert!(
                d.inferred() && d.inferred_death() && !d.conclusive(),
                "{name}"
            );
            let p = plan(&d, None, &POLICY);
            let first = Some(Confirmation {
                count: 1,
                confirm: 2,
            });
            assert!(!confirm(p.clone(), &d, first).writes(), "{name}");
            assert!(inferred_death(&d, &p), "{name}");
            assert!(!hold(p.clone(), &d, Hold::Breaker).writes(), "{name}");
            assert!(!hold(p, &d, Hold::ClockSkew).writes(), "{name}");
        }
        if matches!(d.basis, Basis::TimesWrong { .. }) {
            let p = plan(&d, None, &POLICY);
            assert!(
                !p.writes() && p.attention,
                "{name}: a person, never a write"
            );
        }
    }
    // Three rows of five whose pids look reused trip the breaker.
    assert!(breaker_trips(3, 5));

    // Times ahead: the facts about now alone, with selfheal's own sighting for the age.
    let ahead = |seen_s| {
        Some(Ahead {
            by_s: 28_800,
            seen_s,
        })
    };
    let row = |a, hb: Heartbeat, lock: Lock, owner: Owner| ev(None, hb, lock, owner).with_ahead(a);
    let times = Basis::TimesAhead { by_s: 28_800 };
    let cases: Vec<(&str, Evidence, Verdict, Basis)> = vec![
        (
            "owner gone, just seen: wait (a launcher may exit before its worker beats)",
            row(ahead(0), Missing, NoLock, dead()),
            Unknown,
            times.clone(),
        ),
        (
            "owner gone, seen for stale_after: conclusive",
            row(ahead(300), Missing, NoLock, dead()),
            Dead,
            Basis::OwnerDead,
        ),
        (
            "lock free, seen for stale_after: conclusive",
            row(ahead(300), Missing, Free, NoOwner),
            Dead,
            Basis::LockFree,
        ),
        (
            "owner gone, own lock held: life wins",
            own(row(ahead(300), Missing, held(), dead())),
            Unknown,
            times.clone(),
        ),
        (
            "owner gone, own fresh heartbeat file: contradicted",
            row(ahead(300), hb(2), NoLock, dead()).with_heartbeat_own(true),
            Dead,
            Basis::Contradicted(Signal::OwnerDead),
        ),
        (
            "owner alive: no fact about now, unknown (never overtime)",
            row(ahead(100_000), hb(2), NoLock, alive()),
            Unknown,
            times.clone(),
        ),
        (
            "nothing but a heartbeat: unknown",
            row(ahead(100_000), hb(100_000), NoLock, NoOwner),
            Unknown,
            times.clone(),
        ),
    ];
    for (name, e, verdict, basis) in cases {
        let d = decide(&e, T);
        assert_eq!((d.verdict, &d.basis), (verdict, &basis), "{name}");
    }
}

/// The journal keeps a basis as its code; a code of a variant that carries nothing reads
/// back in its words, any other code as it is.
#[test]
fn a_kept_code_reads_back_in_words() {
    for b in [
        Basis::OwnerDead,
        Basis::OwnerReused,
        Basis::LockFree,
        Basis::StaleLockUntrusted,
        Basis::MaxAge,
        Basis::MaxAgeWorkerLives,
        Basis::NoHeartbeatYet,
        Basis::HeartbeatFresh,
        Basis::StaleButLockHeld,
        Basis::StaleButOwnerAlive,
        Basis::HeartbeatStale,
        Basis::HeartbeatMissing,
    ] {
        assert_eq!(Basis::words_of(&b.code()), b.describe(), "{b:?}");
    }
    for kept in [
        Basis::TimesAhead { by_s: 60 }.code(),
        Basis::Contradicted(Signal::OwnerDead).code(),
        Basis::Unreadable("x".into()).code(),
        "the heartbeat is stale, but the job's lock is held".to_string(),
    ] {
        assert_eq!(Basis::words_of(&kept), kept);
    }
}
