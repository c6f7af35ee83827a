//! The whole-watch decision of the no-named-lock hold (docs/design.md#no-named-lock), from
//! the first pass's counts: when it trips, what it says and whether it holds (`--force`),
//! and how a name seen held proves the template for later runs.

use std::path::Path;

use super::*;
use crate::check::confirmations::Tally;
use crate::clock::DbClock;
use crate::config::{Overrides, from_str};

fn watch(db_lock: &str) -> Watch {
    let text = format!(
        "[database]\nurl = \"mysql://localhost/shop\"\n\n[[watch]]\nname = \"magento-cron\"\n\
         table = \"cron_schedule\"\nstarted_column = \"executed_at\"\n{db_lock}\
         stale_after = \"2m\"\nmax_age = \"1d\"\n"
    );
    from_str(&text, Path::new("/x.toml"), &Overrides::default(), &[])
        .expect("valid")
        .watches
        .remove(0)
}

fn magento() -> Watch {
    watch("db_lock = \"{database}|CRON_{md5:index_{job_code}}\"\n")
}

/// The first pass's counts: `rows` running rows, `held` of them holding their name,
/// `deaths` to be written on a free named lock alone.
fn census(rows: usize, held: usize, deaths: usize) -> Census {
    Census {
        local: rows,
        named_held: held,
        named_free_writes: deaths,
        ..Census::default()
    }
}

/// The holds of `w` over `c`, and the warnings said (kind, words).
fn decided(w: &Watch, c: &Census, proven: bool, force: bool) -> (Holds, Vec<(String, String)>) {
    let clocks = Clocks {
        db: DbClock {
            now_naive: chrono::DateTime::from_timestamp(1_772_712_000, 0)
                .expect("a time")
                .naive_utc(),
            now_epoch: 1_772_712_000,
        },
        tz: None,
        tolerance_s: 60,
    };
    let host = Host::current();
    let ctx = SweepCtx {
        clocks: &clocks,
        host: &host,
        run_hold: None,
        force,
    };
    let mut said = Vec::new();
    let h = holds(w, c, proven, &ctx, &mut |kind, m| {
        said.push((kind.to_string(), m));
    });
    (h, said)
}

#[test]
fn a_template_no_row_holds_holds_its_free_deaths_and_says_what_to_check() {
    let w = magento();
    let (h, said) = decided(&w, &census(5, 0, 4), false, false);
    assert_eq!(h.tripped, [Hold::NoNamedLock]);
    assert_eq!(h.holds, [Hold::NoNamedLock]);
    assert_eq!(said.len(), 1, "{said:?}");
    let (kind, words) = &said[0];
    assert_eq!(kind, "no_named_lock");
    for part in [
        "watch magento-cron: no job of this watch holds its db_lock name",
        "not one of its 5 running rows holds \"{database}|CRON_{md5:index_{job_code}}\"",
        "does the template match the names the application takes?",
        "the 4 deaths on a free named lock alone are held until a real run sees a row's \
         name held",
        "selfheal doctor lists each row's names and who holds them",
        "(--force overrides; selfheal resolve decides a row)",
    ] {
        assert!(words.contains(part), "{part:?} in {words}");
    }

    // --force: said, and acted on.
    let (h, said) = decided(&w, &census(5, 0, 4), false, true);
    assert_eq!(h.tripped, [Hold::NoNamedLock]);
    assert!(h.holds.is_empty());
    assert!(
        said[0].1.contains("are acted on anyway (--force)"),
        "{said:?}"
    );
    assert!(!said[0].1.contains("--force overrides"), "{said:?}");

    // A list of templates is named whole.
    let w = watch(
        "db_lock = [\"{database}|CRON_{md5:index_{job_code}}\", \"{database}|CRON_{md5:default_{job_code}}\"]\n",
    );
    let (_, said) = decided(&w, &census(3, 0, 3), false, false);
    assert!(
        said[0].1.contains(
            "holds \"{database}|CRON_{md5:index_{job_code}}\" or \
             \"{database}|CRON_{md5:default_{job_code}}\""
        ),
        "{said:?}"
    );
}

#[test]
fn a_name_held_a_proven_template_or_one_death_holds_nothing() {
    let w = magento();
    for (c, proven) in [
        (census(5, 1, 4), false),
        (census(5, 0, 4), true),
        (census(5, 0, 1), false),
        (census(0, 0, 0), false),
    ] {
        let (h, said) = decided(&w, &c, proven, false);
        assert!(h.tripped.is_empty() && h.holds.is_empty(), "{said:?}");
        assert!(said.is_empty(), "{said:?}");
    }
}

/// A run that sees a name held proves the template for later ones (through the tally it
/// keeps); a run without a tally proves nothing beyond itself; a watch without db_lock is
/// never proven (and never held: nothing of it dies on a named lock).
#[test]
fn a_name_held_in_the_first_pass_proves_the_template_for_later_runs() {
    let w = magento();
    let db = "mysql://localhost/shop".to_string();
    let mut t = Tally::new(db.clone(), None);
    assert!(!named_lock_proven(
        &w,
        &census(3, 0, 3),
        Some(&mut t),
        1_000
    ));
    assert!(named_lock_proven(&w, &census(3, 1, 2), Some(&mut t), 1_000));
    let kept = t.into_counts(1_000);
    // The next run: every job killed by a deploy, none held, still proven.
    let mut t = Tally::new(db.clone(), Some(kept.clone()));
    assert!(named_lock_proven(&w, &census(3, 0, 3), Some(&mut t), 1_600));
    // Edited: proves itself again.
    let edited = watch("db_lock = \"{database}|CRON_{md5:default_{job_code}}\"\n");
    let mut t = Tally::new(db, Some(kept));
    assert!(!named_lock_proven(
        &edited,
        &census(3, 0, 3),
        Some(&mut t),
        1_600
    ));
    // No tally (the counts could not be read): only this run's own sighting.
    assert!(!named_lock_proven(&w, &census(3, 0, 3), None, 1_600));
    assert!(named_lock_proven(&w, &census(3, 1, 2), None, 1_600));
    let plain = watch("heartbeat_column = \"updated_at\"\n");
    assert!(!named_lock_proven(&plain, &census(3, 1, 0), None, 1_600));
}
