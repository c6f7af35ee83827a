//! Real values for show's unit tests: a watch read from its TOML, one of its running rows,
//! evidence about that row, and the dry run's report of it, judged and planned by
//! [`crate::decide`] as `check` does.

use std::path::Path;

use crate::config::{Overrides, Watch, from_str};
use crate::decide::{self, ActionPolicy, Confirmation, Evidence, Heartbeat, Lock, Owner};
use crate::evidence::thresholds;
use crate::report::RowReport;
use crate::store::{RunningRow, SqlValue, TimeValue};

/// `now` in the tests: 2026-03-05T12:00:00Z.
pub(super) const NOW: i64 = 1_772_712_000;

/// Watch `sync` on `app.sync_log`: a heartbeat file and a lock file per row, an owner
/// column, 5 minutes to go stale, 4 hours at most, parked rows in `wait_manual`.
pub(super) fn watch() -> Watch {
    let text = "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"sync\"\n\
                table = \"app.sync_log\"\nstarted_column = \"start_time\"\n\
                heartbeat_file = \"/run/app/{id}.hb\"\nlock_file = \"/run/app/{id}.lock\"\n\
                owner_column = \"worker\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                manual_value = \"wait_manual\"\n";
    let cfg = from_str(
        text,
        Path::new("/etc/selfheal/selfheal.toml"),
        &Overrides::default(),
        &[],
    )
    .expect("valid watch");
    cfg.watches.into_iter().next().expect("one watch")
}

/// Row 7, started at 10:30 and owned by pid 4242 on web1.
pub(super) fn row() -> RunningRow {
    RunningRow {
        id: SqlValue::Int(7),
        started: TimeValue {
            raw: SqlValue::Text("2026-03-05 10:30:00".into()),
            stamp: Ok(None),
        },
        heartbeat: None,
        owner: Some("web1:4242".into()),
        owner_raw: SqlValue::Text("web1:4242".into()),
        attempts: None,
        lock_values: Vec::new(),
        owner_split_raw: None,
    }
}

/// What the probes found about a row `total_age` seconds old.
pub(super) fn evidence(total_age: u64, heartbeat: Heartbeat, lock: Lock, owner: Owner) -> Evidence {
    Evidence::aged(total_age)
        .with_heartbeat(heartbeat)
        .with_heartbeat_own(true)
        .with_lock(lock)
        .with_lock_own(true)
        .with_owner(owner)
}

/// The dry run's report of [`row`] with `ev`: judged, planned with the watch's policy and
/// held while `confirmation` says its inferred verdict is not confirmed yet.
pub(super) fn report(w: &Watch, ev: Evidence, confirmation: Option<Confirmation>) -> RowReport {
    let t = thresholds(w);
    let decision = decide::decide(&ev, t);
    let policy = ActionPolicy {
        dead_value: &w.dead_value,
        manual_value: w.manual_value.as_deref(),
        retry: None,
        overtime: w.overtime,
    };
    let plan = decide::confirm(
        decide::plan(&decision, None, &policy),
        &decision,
        confirmation,
    );
    RowReport {
        watch: w.name.clone(),
        id: row().id,
        host: "web1".into(),
        owner_host: Some("web1".into()),
        evidence: ev,
        thresholds: t,
        decision,
        action: plan.action,
        applied: false,
        reason: String::new(),
        note: None,
        target: plan.target.clone(),
        release_planned: false,
        lock_release: None,
        lock_file: None,
        confirmation,
        already_told: false,
        resolve: None,
        plan,
    }
}
