//! The upgrade: a state directory an earlier release wrote — confirmation counts without
//! sightings (the layout before contradictions and confirmations spaced in time were kept),
//! reminders, the journal, and the intents of a run killed before its writes — is read by
//! this release and carried on from where it was. The files in
//! `tests/fixtures/state-counts-without-sightings/` were made by that release's binary
//! (`make.sh` there says which, and how); the test puts them in a sandbox of its own and
//! runs the real binary under the same frozen clock, a cron period later.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

/// Ten minutes after the fixture's frozen clock ([`FROZEN_AT`], 2035-03-14 15:09:26).
const NOW: &str = "2035-03-14 15:19:26";

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state-counts-without-sightings")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A row as the fixture's database had it, started `ago` seconds before [`THEN`].
fn insert(db: &SqliteDb, id: i64, status: &str, ago: u64, worker: Option<&str>) {
    let then = frozen_now();
    db.conn()
        .execute(
            "INSERT INTO sync_log (id, status, start_time, worker) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                id,
                status,
                sql_datetime(then - Duration::from_secs(ago)),
                worker
            ],
        )
        .expect("insert");
}

#[test]
fn a_state_directory_the_previous_release_wrote_is_read_and_carried_on() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let gone = exited_pid().to_string();
    // The database as the earlier release left it: row 3 marked, the rest running (the
    // second run was killed before its writes to rows 1 and 4).
    insert(&db, 1, "running", 50 * MIN, None);
    insert(&db, 2, "running", 30 * MIN, None);
    insert(&db, 3, "error", 20 * MIN, Some(&gone));
    insert(&db, 4, "running", 40 * MIN, Some(&gone));
    insert(&db, 5, "running", 45 * MIN, None);
    db.exec("UPDATE sync_log SET end_time = '2035-03-14 15:09:26' WHERE id = 3");
    let then = frozen_now();
    let now = then + Duration::from_secs(10 * MIN);
    sb.heartbeat_at(1, then - Duration::from_secs(47 * MIN));
    std::os::unix::fs::symlink("hb-2", sb.path("hb-2")).expect("symlink loop");
    sb.heartbeat_at(5, now - Duration::from_secs(10));
    let cfg = sb.config(&db.url(), &sb.watch("owner_column = \"worker\"\n"));
    // The earlier release's state files, at this sandbox's paths. A reminder remembers
    // its problem without digits.
    let dir = sb.dir.path().display().to_string();
    let state = sb.state_dir();
    std::fs::create_dir(&state).expect("state_dir");
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o750))
        .expect("chmod");
    for name in ["confirmations.json", "journal.jsonl", "pending.jsonl"] {
        std::fs::write(state.join(name), fixture(name).replace("@SANDBOX@", &dir))
            .expect("state file");
    }
    let mut reminders: serde_json::Value =
        serde_json::from_str(&fixture("reminders.json")).expect("reminders");
    for t in reminders["told"].as_array_mut().expect("told") {
        let db_label = t["subject"]["database"]
            .as_str()
            .expect("db")
            .replace("@SANDBOX@", &dir);
        t["subject"]["database"] = db_label.into();
        let digitless: String = dir.chars().filter(|c| !c.is_ascii_digit()).collect();
        let what = t["what"]
            .as_str()
            .expect("what")
            .replace("@SANDBOX@", &digitless);
        t["what"] = what.into();
    }
    std::fs::write(state.join("reminders.json"), reminders.to_string()).expect("reminders");

    // Cron's next run, ten minutes later.
    let mut c = selfheal();
    if !frozen_clock_at(&mut c, NOW) {
        return;
    }
    let o = c
        .arg("check")
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run");
    let out = stdout(&o);
    // Row 2 needs a person still (exit 1), but was told already: not said again.
    assert_exit(&o, 1);
    assert!(!out.contains("id=2"), "told before the upgrade:\n{out}");
    // The stopped run's intents were settled: nothing of them was applied, so rows 1 and 4
    // are judged afresh — row 4's owner is gone (at once), row 1's silence was counted
    // once before the upgrade and is confirmed now.
    assert!(
        out.contains("full-sync id=1: set status to 'error' (mark_dead)"),
        "{out}\n{}",
        stderr(&o)
    );
    assert!(
        out.contains("full-sync id=4: set status to 'error' (mark_dead)"),
        "{out}"
    );
    let statuses: Vec<(i64, String)> = db.dump().into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        statuses,
        [
            (1, "error".to_string()),
            (2, "running".to_string()),
            (3, "error".to_string()),
            (4, "error".to_string()),
            (5, "running".to_string()),
        ]
    );
    // The journal goes on: the earlier release's entry, then this run's, each once.
    let journal = sb.journal();
    let applied: Vec<i64> = journal
        .iter()
        .filter(|e| e["applied"] == true)
        .map(|e| e["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(applied, [3, 1, 4], "{journal:?}");
    assert_eq!(
        std::fs::read_to_string(state.join("pending.jsonl")).expect("intents"),
        "",
        "the intents are settled"
    );
    // Rows no longer running keep no count.
    let counts = std::fs::read_to_string(state.join("confirmations.json")).expect("counts");
    assert!(!counts.contains("\"id\":\"1\""), "{counts}");
    // stats reads the whole journal, the earlier release's entry too.
    let mut s = selfheal();
    if !frozen_clock_at(&mut s, NOW) {
        return;
    }
    let o = s
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    let (watches, summary) = json_lines(&o);
    // Row 3's mark is known from the earlier release's journal alone (its message column
    // was left empty here).
    assert_eq!(watches[0]["marked"], 3, "{}\n{summary}", watches[0]);
    assert_eq!(
        (
            &summary["journal"]["entries"],
            &summary["journal"]["other_database_entries"]
        ),
        (&serde_json::json!(3), &serde_json::json!(0)),
        "{summary}"
    );
}
