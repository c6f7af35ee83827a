//! Several app servers, one job table (docs/design.md#hosts), through the real binary run as different
//! hosts on this machine: each run gets a private UTS namespace (`unshare --uts`, then
//! `hostname web2`) and a private mount namespace in which its own directory of heartbeat
//! files, lock files, journal and run lock is bind-mounted at the one path the shared
//! configuration names — so each "host" sees its own files there, and the other host's
//! files are absent (or, worse, unrelated files of the same name lie there), as on real
//! servers. Root only (in CI a non-root run fails).
//!
//! The rows of one MariaDB table are owned by both hosts (`HOST:PID`): each host marks
//! exactly its own dead rows and never the other's, also when both run at once, round
//! after round, with no change lost or made twice (counted from both hosts' journals and
//! from the table). A watch pair split by `match` acts differently on rows of the same age.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;
use mysql::prelude::Queryable;

/// `selfheal ARGS` as host `name`, with `own` bind-mounted on `at` (when given), in private
/// UTS and mount namespaces; the environment scrubbed as [`selfheal`] does.
pub(crate) fn as_host(name: &str, mount: Option<(&Path, &Path)>, args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--uts", "--mount", "--propagation", "private", "sh", "-c"]);
    match mount {
        Some(_) => c.arg("hostname \"$1\" && mount --bind \"$2\" \"$3\" && shift 3 && exec \"$@\""),
        None => c.arg("hostname \"$1\" && shift 3 && exec \"$@\""),
    };
    c.arg("sh").arg(name);
    match mount {
        Some((own, at)) => c.arg(own).arg(at),
        None => c.args(["-", "-"]),
    };
    c.arg(bin())
        .args(args)
        .env_remove("SELFHEAL_CONFIG")
        .env_remove("SELFHEAL_DB_PASSWORD")
        .env_remove("MYSQL_PWD")
        .env("HOME", "/nonexistent/selfheal-test-home")
        .env("LC_ALL", "C");
    c
}

pub(crate) fn run(c: &mut Command) -> Output {
    c.output().expect("run selfheal as another host")
}

/// Two app servers' worlds: `web1/` and `web2/` (each host's heartbeat files, lock files,
/// journal and run lock), mounted in turn at `here/`, the directory the configuration
/// names.
struct Farm {
    sb: Sandbox,
}

impl Farm {
    fn new() -> Farm {
        let sb = Sandbox::new();
        for d in ["here", "web1", "web2"] {
            std::fs::create_dir(sb.path(d)).expect("dir");
        }
        Farm { sb }
    }

    fn here(&self) -> PathBuf {
        self.sb.path("here")
    }

    fn dir(&self, host: &str) -> PathBuf {
        self.sb.path(host)
    }

    /// One configuration for every host: files under `here/`, rows owned by `HOST:PID`.
    fn config(&self, url: &str, run_extra: &str, watch_extra: &str) -> PathBuf {
        let here = self.here();
        let p = self.sb.path("selfheal.toml");
        std::fs::write(
            &p,
            format!(
                "[database]\nurl = \"{url}\"\n\n[run]\nlock_file = \"{h}/selfheal.lock\"\n\
                 state_dir = \"{h}/state\"\n{run_extra}\n\n[[watch]]\nname = \"full-sync\"\n\
                 table = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_file = \"{h}/hb-{{id}}\"\nlock_file = \"{h}/lock-{{id}}\"\n\
                 owner_column = \"worker\"\nstale_after = \"5m\"\nmax_age = \"4h\"\n\
                 ended_column = \"end_time\"\nmessage_column = \"error_msg\"\n{watch_extra}\n",
                h = here.display()
            ),
        )
        .expect("config");
        p
    }

    /// `selfheal check --config CFG ARGS` on `host`, in its own world.
    fn check(&self, host: &str, cfg: &Path, args: &[&str]) -> Command {
        let mut all = vec!["check", "--config", cfg.to_str().expect("utf-8")];
        all.extend(args);
        let own = self.dir(host);
        let here = self.here();
        let mut c = as_host(host, Some((&own, &here)), &all);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    }

    /// A file in `host`'s world with an mtime `age` ago.
    fn touch(&self, host: &str, name: &str, age: Duration) {
        let p = self.dir(host).join(name);
        let f = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&p)
            .expect("file");
        f.set_modified(std::time::SystemTime::now() - age)
            .expect("mtime");
    }

    /// Journal entries `host` wrote.
    fn journal(&self, host: &str) -> Vec<serde_json::Value> {
        match std::fs::read_to_string(self.dir(host).join("state/journal.jsonl")) {
            Ok(t) => t
                .lines()
                .map(|l| serde_json::from_str(l).expect("journal line"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn other(host: &str) -> &'static str {
    if host == "web1" { "web2" } else { "web1" }
}

/// A row of `sync_log` owned by `owner`, started `age` seconds ago on the database clock.
fn insert(db: &mut MysqlDb, id: i64, owner: &str, age: u64) {
    db.exec(&format!(
        "INSERT INTO sync_log (id, status, start_time, worker) \
         VALUES ({id}, 'running', NOW() - INTERVAL {age} SECOND, '{owner}')"
    ));
}

/// Row ids and the host that owns them.
type Rows = Vec<(i64, &'static str)>;

/// One round's rows: for each host, two alive (a live worker, a fresh heartbeat in its own
/// world) and two dead (the worker's pid is gone, no heartbeat: a killed worker whose
/// heartbeat is still fresh waits for it to go stale); in the other host's world, a free
/// lock file and a two-hour-old heartbeat under each of them — unrelated files that happen
/// to have the same name there, which must never count. The live rows start a few seconds
/// ago, after the live worker did (a pid that started after its row looks recycled); the
/// dead ones past `stale_after`.
fn plant_round(farm: &Farm, db: &mut MysqlDb, round: i64, worker: u32, gone: u32) -> (Rows, Rows) {
    let (mut alive, mut dead) = (Vec::new(), Vec::new());
    for (k, host) in [(0, "web1"), (1, "web2")] {
        let base = round * 100 + k * 10;
        for (n, live) in [(1u8, true), (2, true), (3, false), (4, false)] {
            let id = base + i64::from(n);
            let pid = if live { worker } else { gone };
            // A live row a few seconds old (after its worker started); a dead one past
            // stale_after (a gone pid on a younger row may be a launcher's).
            let age = if live {
                u64::from(n)
            } else {
                6 * 60 + u64::from(n)
            };
            insert(db, id, &format!("{host}:{pid}"), age);
            if live {
                farm.touch(host, &format!("hb-{id}"), Duration::from_secs(5));
            }
            farm.touch(
                other(host),
                &format!("hb-{id}"),
                Duration::from_secs(2 * HOUR),
            );
            farm.touch(
                other(host),
                &format!("lock-{id}"),
                Duration::from_secs(HOUR),
            );
            if live {
                alive.push((id, host));
            } else {
                dead.push((id, host));
            }
        }
    }
    (alive, dead)
}

#[test]
fn two_hosts_each_mark_exactly_their_own_dead_rows_concurrently_round_after_round() {
    if !root_or_skip("running as two hosts") {
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let farm = Farm::new();
    let cfg = farm.config(&db.url, "", "");
    // The live worker, started before every row (a pid that started after its row is a
    // recycled one).
    let worker_proc = sleeper();
    std::thread::sleep(Duration::from_secs(3));
    let worker = worker_proc.pid();
    let gone = exited_pid();

    // First, one host at a time, in words: web1 leaves web2's rows to web2.
    let (_, dead) = plant_round(&farm, &mut db, 0, worker, gone);
    let o = farm
        .check("web1", &cfg, &["--dry-run", "--format", "json"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let (json, summary) = json_lines(&o);
    assert_eq!(summary["host"], "web1");
    for r in &json {
        let owner_host = r["owner_host"].as_str().expect("owner_host");
        assert_eq!(r["host"], "web1", "{r}");
        let want = match (owner_host, r["id"].as_i64().map(|i| i % 10)) {
            ("web2", _) => "remote",
            ("web1", Some(1 | 2)) => "alive",
            ("web1", Some(3 | 4)) => "dead",
            other => panic!("{other:?}: {r}"),
        };
        assert_eq!(r["verdict"], want, "{r}");
        if want == "remote" {
            // Not looked at: not this host's heartbeat file or lock file of that name.
            assert_eq!(
                (
                    r["lock"].as_str(),
                    r["heartbeat"].as_str(),
                    r["action"].as_str()
                ),
                (Some("none"), Some("missing"), Some("none")),
                "{r}"
            );
        }
    }
    assert_eq!(
        summary["per_watch"][0]["owners"],
        serde_json::json!([{"host": "web1", "rows": 4}, {"host": "web2", "rows": 4}])
    );
    let o = farm
        .check("web2", &cfg, &["--explain"])
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(
        text.contains("judged on host web2")
            && text.contains("  id=1    remote    running ")
            && text.contains("heartbeat missing, lock none, owner remote:web1")
            && text.contains("because host web1 owns the row"),
        "{text}"
    );

    // Then both at once, round after round, with new rows each round — and a second run
    // on web1 beside them, which either waits its turn behind the run lock (75) or finds
    // nothing left to do.
    let mut all_dead = dead;
    let mut all_alive = Vec::new();
    let rounds: i64 = 30;
    for round in 0..rounds {
        if round > 0 {
            let (alive, dead) = plant_round(&farm, &mut db, round, worker, gone);
            all_alive.extend(alive);
            all_dead.extend(dead);
        }
        let hosts = ["web1", "web2", "web1"];
        let children: Vec<_> = hosts
            .iter()
            .map(|h| farm.check(h, &cfg, &[]).spawn().expect("spawn"))
            .collect();
        let mut turned_away = 0;
        for (h, c) in hosts.iter().zip(children) {
            let o = c.wait_with_output().expect("wait");
            if *h == "web1" && o.status.code() == Some(75) {
                assert_eq!(stdout(&o), "");
                turned_away += 1;
                continue;
            }
            assert_exit(&o, 0);
            assert!(
                stdout(&o)
                    .lines()
                    .all(|l| l.starts_with("full-sync id=") && l.contains("(mark_dead)")),
                "{h}: {}",
                stdout(&o)
            );
        }
        assert!(turned_away < 2, "one web1 run got through");
        for (id, host) in &all_dead {
            let (status, ended, msg) = db.row(*id);
            assert_eq!(status, "error", "round {round}: {host}'s dead row {id}");
            assert!(
                ended && msg.contains(&format!("owner pid {gone} gone")),
                "{msg}"
            );
        }
        for (id, host) in &all_alive {
            assert_eq!(
                db.row(*id).0,
                "running",
                "round {round}: {host}'s live row {id}"
            );
        }
    }

    // Every change exactly once: both journals together hold one entry per dead row, each
    // made by the row's own host; the table agrees.
    let mut seen = std::collections::HashMap::new();
    for host in ["web1", "web2"] {
        for e in farm.journal(host) {
            assert_eq!(e["host"], host, "{e}");
            assert_eq!(e["owner_host"], host, "{e}");
            assert_eq!(
                (e["applied"].as_bool(), e["to"].as_str()),
                (Some(true), Some("error"))
            );
            let id = e["id"].as_i64().expect("id");
            assert!(seen.insert(id, host).is_none(), "row {id} changed twice");
        }
    }
    let mut want: Vec<(i64, &str)> = all_dead.clone();
    want.sort();
    let mut got: Vec<(i64, &str)> = seen.into_iter().collect();
    got.sort();
    assert_eq!(
        got, want,
        "no change lost, none doubled, none by the wrong host"
    );
    let errors: Vec<i64> = db.query("SELECT id FROM sync_log WHERE status = 'error' ORDER BY id");
    assert_eq!(errors, want.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    let running: Vec<i64> = db.query("SELECT COUNT(*) FROM sync_log WHERE status = 'running'");
    assert_eq!(
        running,
        [i64::try_from(all_alive.len()).expect("count") + 4]
    );
    // No lock file was ever released, of either world.
    for host in ["web1", "web2"] {
        let locks = std::fs::read_dir(farm.dir(host))
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("lock-"))
            })
            .count();
        assert_eq!(
            locks,
            4 * usize::try_from(rounds).expect("rounds"),
            "{host}"
        );
    }
}

#[test]
fn hosts_never_turn_each_other_away_but_a_second_run_on_one_host_is() {
    if !root_or_skip("running as two hosts") {
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let farm = Farm::new();
    let cfg = farm.config(&db.url, "", "");
    let gone = exited_pid();
    insert(&mut db, 1, &format!("web1:{gone}"), 20 * MIN);
    insert(&mut db, 2, &format!("web2:{gone}"), 20 * MIN);

    // A run on web1 holds web1's advisory lock for the watch.
    let mut other_run = db.conn();
    let name = format!("selfheal/{}/full-sync@web1", db.name);
    let got: Option<i64> = other_run
        .exec_first("SELECT GET_LOCK(?, 0)", (name,))
        .expect("GET_LOCK");
    assert_eq!(got, Some(1));

    let o = farm
        .check("web1", &cfg, &["--format", "json"])
        .output()
        .expect("run");
    assert_exit(&o, 75);
    let (_, summary) = json_lines(&o);
    assert_eq!(summary["busy_watches"], serde_json::json!(["full-sync"]));
    assert!(
        summary["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("another selfheal run on this host")),
        "{summary}"
    );
    assert_eq!(db.row(1).0, "running");

    // web2 is not held up by web1's run, and does its own rows only.
    let o = farm.check("web2", &cfg, &[]).output().expect("run");
    assert_exit(&o, 0);
    assert_eq!(
        (db.row(1).0.as_str(), db.row(2).0.as_str()),
        ("running", "error")
    );

    drop(other_run);
    let o = farm.check("web1", &cfg, &[]).output().expect("run");
    assert_exit(&o, 0);
    assert_eq!(db.row(1).0, "error");
}

#[test]
fn another_hosts_row_past_max_age_is_reported_never_written() {
    if !root_or_skip("running as two hosts") {
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let farm = Farm::new();
    let cfg = farm.config(
        &db.url,
        "",
        "heartbeat_column = \"heartbeat_at\"\nmanual_value = \"wait_manual\"\n",
    );
    // web2's rows: one within max_age whose heartbeat column went quiet an hour ago (a
    // lock web2's worker holds is invisible from here: not proof of death), one six hours
    // old whose heartbeat stopped five hours ago (web2 may be gone for good).
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at, worker) VALUES \
         (1, 'running', NOW() - INTERVAL 2 HOUR, NOW() - INTERVAL 1 HOUR, 'web2:4242'), \
         (2, 'running', NOW() - INTERVAL 6 HOUR, NOW() - INTERVAL 5 HOUR, 'web2:4242')",
    );
    let before = db.dump();
    let o = farm.check("web1", &cfg, &[]).output().expect("run");
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with(
            "full-sync id=2: needs a person (remote): host web2 owns the row and it is past \
             max_age"
        ),
        "{text}"
    );
    assert_eq!(db.dump(), before, "never written, not even to manual_value");
    assert!(farm.journal("web1").is_empty());
    let o = farm
        .check("web1", &cfg, &["--format", "json"])
        .output()
        .expect("run");
    let (json, _) = json_lines(&o);
    assert_eq!(
        (
            row(&json, 1)["verdict"].as_str(),
            row(&json, 1)["attention"].as_bool()
        ),
        (Some("remote"), Some(false))
    );
    // Only the heartbeat column was read: about an hour.
    assert_eq!(row(&json, 1)["heartbeat"], "present");
    assert!(
        row(&json, 1)["heartbeat_age_s"]
            .as_u64()
            .is_some_and(|a| (3600..2 * 3600).contains(&a)),
        "{}",
        row(&json, 1)
    );
    assert_eq!(
        (
            row(&json, 2)["verdict"].as_str(),
            row(&json, 2)["attention"].as_bool()
        ),
        (Some("remote"), Some(true))
    );
}

#[test]
fn doctor_shows_which_hosts_own_running_rows_and_warns_of_owners_without_a_host() {
    if !root_or_skip("running as two hosts") {
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let farm = Farm::new();
    let cfg = farm.config(&db.url, "", "");
    let gone = exited_pid();
    insert(&mut db, 1, &format!("web1:{gone}"), 10 * MIN);
    insert(&mut db, 2, &format!("WEB2:{gone}"), 10 * MIN);
    insert(&mut db, 3, &format!("web2:{gone}"), 10 * MIN);
    let doctor = |host: &str| {
        let cfg = cfg.to_str().expect("utf-8");
        let own = farm.dir(host);
        let here = farm.here();
        run(&mut as_host(
            host,
            Some((&own, &here)),
            &["doctor", "--config", cfg],
        ))
    };
    let hosts_line = |o: &Output| {
        stdout(o)
            .lines()
            .find(|l| l.contains("watch full-sync: hosts:"))
            .map_or_else(|| panic!("no hosts line: {}", stdout(o)), str::to_string)
    };
    let o = doctor("web2");
    let l = hosts_line(&o);
    assert_eq!(
        l,
        "✓ watch full-sync: hosts: running rows by owner: web1 1, web2 (this host) 2"
    );
    assert!(
        stdout(&o).contains("running rows: 1 remote, 2 dead"),
        "{}",
        stdout(&o)
    );
    // A worker that writes only its pid: judged as this host's, on every host.
    insert(&mut db, 4, &gone.to_string(), 10 * MIN);
    let o = doctor("web1");
    assert_exit(&o, 1);
    let l = hosts_line(&o);
    assert!(l.starts_with("! "), "{l}");
    assert!(
        l.contains("web1 (this host) 1, web2 2, bare PID 1")
            && l.contains("judged as this host's (web1) by every host")
            && l.contains("gethostname() . ':' . getmypid()"),
        "{l}"
    );
}

#[test]
fn a_watch_pair_split_by_match_acts_differently_on_rows_of_the_same_age() {
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.exec("ALTER TABLE sync_log ADD COLUMN job VARCHAR(16) NOT NULL DEFAULT ''");
    // History: the quick job takes two minutes, the long one two hours.
    db.exec(
        "INSERT INTO sync_log (id, job, status, start_time, end_time) VALUES \
         (1, 'quick', 'done', NOW() - INTERVAL 5 HOUR, NOW() - INTERVAL 298 MINUTE), \
         (2, 'long', 'done', NOW() - INTERVAL 5 HOUR, NOW() - INTERVAL 3 HOUR), \
         (3, 'quick', 'done', NOW() - INTERVAL 4 HOUR, NOW() - INTERVAL 238 MINUTE)",
    );
    // Now: one of each, 30 minutes old, both beating.
    db.exec(
        "INSERT INTO sync_log (id, job, status, start_time) VALUES \
         (10, 'quick', 'running', NOW() - INTERVAL 30 MINUTE), \
         (11, 'long', 'running', NOW() - INTERVAL 30 MINUTE), \
         (12, 'other', 'running', NOW() - INTERVAL 30 MINUTE)",
    );
    let sb = Sandbox::new();
    for id in [10, 11, 12] {
        sb.heartbeat(id, Duration::from_secs(10));
    }
    let pin = format!("host = \"{}\"\n", hostname());
    let quick = sb
        .watch(&format!("match = {{ job = \"quick\" }}\n{pin}"))
        .replace("name = \"full-sync\"", "name = \"quick\"")
        .replace("stale_after = \"5m\"", "stale_after = \"1m\"")
        .replace("max_age = \"4h\"", "max_age = \"10m\"");
    let long = sb
        .watch(&format!("match = {{ job = \"long\" }}\n{pin}"))
        .replace("name = \"full-sync\"", "name = \"long\"");
    let cfg = sb.config(&db.url, &format!("{quick}\n\n[[watch]]\n{long}"));

    // doctor explains the very query, filter and all, and judges each kind by its rules.
    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    let out = stdout(&o);
    // The overtime row is a finding (a real run marks it): exit 1.
    assert_exit(&o, 1);
    assert!(
        out.contains(
            "! watch quick: running rows: 1 overtime: rows a real run marks or leaves for a \
             person"
        ),
        "{out}"
    );
    assert!(out.contains("✓ watch long: running rows: 1 alive"), "{out}");
    // The max_age check reads each kind's own runs: 10m is plenty for a 2-minute job.
    assert!(
        out.contains("✓ watch quick: max_age: 10m is at least 1.5x what real runs take (the longest of the last 2 runs that ended well took 2m)"),
        "{out}"
    );
    assert!(
        out.contains("the longest of the last 1 runs that ended well took 2h"),
        "{out}"
    );

    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (json, summary) = json_lines(&o);
    assert_eq!(json.len(), 2, "row 12 is no watch's: {json:?}");
    assert_eq!(
        (
            row(&json, 10)["watch"].as_str(),
            row(&json, 10)["verdict"].as_str()
        ),
        (Some("quick"), Some("overtime"))
    );
    assert_eq!(
        (
            row(&json, 11)["watch"].as_str(),
            row(&json, 11)["verdict"].as_str()
        ),
        (Some("long"), Some("alive"))
    );
    assert_eq!(summary["max_age_too_low"], serde_json::json!([]));
    assert_eq!(db.row(10).0, "error");
    assert_eq!(db.row(11).0, "running");
    assert_eq!(db.row(12).0, "running");

    // stats reads each kind's own history.
    let o = selfheal()
        .args(["stats", "--format", "json", "--config"])
        .arg(&cfg)
        .output()
        .expect("stats");
    assert_exit(&o, 0);
    let per: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let by = |w: &str| {
        per.iter()
            .find(|p| p["watch"] == w)
            .unwrap_or_else(|| panic!("{w}: {per:?}"))
    };
    assert_eq!(by("quick")["successful"], 2, "{per:?}");
    assert_eq!(by("long")["successful"], 1, "{per:?}");
}

/// A row per container, each with a host name of its own: counting rows by owner host is a
/// hash map, and what a run writes about them is bounded — the metrics file names the 20
/// busiest hosts and sums the rest under `other`, and so does the summary (`last-run.json`,
/// `--format json`), whatever the number of hosts.
#[test]
fn thousands_of_distinct_owner_hosts_give_bounded_metrics_and_summaries() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let n: i64 = 3_000;
    {
        let mut c = db.conn();
        let tx = c.transaction().expect("tx");
        for id in 1..=n {
            // Rows on one busy host too, so the busiest are not a tie.
            let owner = if id <= 5 {
                "busy.invalid:1".to_string()
            } else {
                format!("pod-{id}.invalid:1")
            };
            tx.execute(
                "INSERT INTO sync_log (id, status, start_time, worker) \
                 VALUES (?1, 'running', datetime('now', '-60 seconds'), ?2)",
                rusqlite::params![id, owner],
            )
            .expect("insert");
        }
        tx.commit().expect("commit");
    }
    let metrics = sb.path("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", metrics.display()),
        &sb.watch("owner_column = \"worker\"\n"),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (_, summary) = json_lines(&o);
    let owners = summary["per_watch"][0]["owners"]
        .as_array()
        .expect("owners");
    assert_eq!(owners.len(), 21, "{owners:?}");
    assert_eq!(
        owners[0],
        serde_json::json!({"host": "busy.invalid", "rows": 5})
    );
    let other = owners.last().expect("other");
    assert_eq!(other["host"], "other");
    assert_eq!(other["rows"], n - 5 - 19);
    assert_eq!(other["hosts"], n - 5 - 19);
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("selfheal_owner_rows{"))
        .collect();
    assert_eq!(series.len(), 21, "{series:?}");
    assert!(
        series
            .iter()
            .any(|l| l.contains("owner_host=\"other\"") && l.ends_with(&format!(" {}", n - 24))),
        "{series:?}"
    );
    let last_run = std::fs::read(sb.state_dir().join("last-run.json")).expect("last-run.json");
    assert!(
        last_run.len() < 16 * 1024,
        "last-run.json: {} bytes",
        last_run.len()
    );
}
