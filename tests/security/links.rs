//! Nothing a local user plants can make selfheal delete, truncate or overwrite a file: the
//! real binary, run as root (as cron often does) over directories the PHP user
//! `www-data` (uid 33) owns, non-sticky, where that user — the attacker here, its commands
//! run with `setpriv` — plants symbolic links and files. Named after the cases of the
//! issue that found them: 1, a symlinked `locks/` made `release_lock = "if_free"` delete a
//! root-only file; 2, `if_free` removed a new worker's live lock; 3, links in `state_dir`,
//! at the metrics file's temporary name and at the run lock. Then a seeded property test:
//! random trees of links in the lock, heartbeat, metrics and state directories, many real
//! runs, and no file outside those directories changes.
//!
//! Root only (switching users); skipped elsewhere, failed in CI when not root.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use crate::common::*;

const WWW: u32 = 33;

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).expect("chown");
}

/// A directory of www-data's, mode 0755, not sticky: www-data may put anything in it.
fn www_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).expect("mkdir");
    chown(p, WWW);
    chmod(p, 0o755);
    p.to_path_buf()
}

/// Runs `script` with `sh -c` as www-data (the attacker), asserting it succeeded.
#[track_caller]
fn as_www(script: &str) {
    let o = www_command(script).output().expect("setpriv");
    assert!(
        o.status.success(),
        "as www-data: {script}\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}

fn www_command(script: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=33",
        "--regid=33",
        "--clear-groups",
        "--",
        "sh",
        "-c",
        script,
    ]);
    c
}

/// Root, a sandbox others can look into, and `setpriv`; `None`: skipped (failed in CI).
fn setup() -> Option<Sandbox> {
    if !root_or_skip("planting links as www-data") {
        return None;
    }
    let sb = Sandbox::new();
    chmod(sb.dir.path(), 0o755);
    Some(sb)
}

/// A root-only file outside every directory selfheal is configured with.
fn victim(sb: &Sandbox, name: &str, text: &str) -> PathBuf {
    let dir = sb.path("root-only");
    std::fs::create_dir_all(&dir).expect("mkdir");
    chmod(&dir, 0o700);
    let p = dir.join(name);
    std::fs::write(&p, text).expect("victim");
    chmod(&p, 0o600);
    p
}

/// `(inode, size, mode, mtime, text)` of a file, to say it was left as it was.
fn state_of(p: &Path) -> (u64, u64, u32, SystemTime, String) {
    let m = std::fs::symlink_metadata(p).expect("stat");
    (
        m.ino(),
        m.len(),
        m.mode(),
        m.modified().expect("mtime"),
        String::from_utf8_lossy(&std::fs::read(p).expect("read")).into_owned(),
    )
}

fn json(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Case 1: with `lock_file = ".../runtime/locks/{id}"`, www-data replaced `locks/` with a
/// link to a root-only directory; root's run then removed the root-only file of the same
/// name. The walk to the lock file now refuses that link: the row is still marked (its
/// worker is dead), the release fails for a person to look, and the file stays.
#[test]
fn case1_a_locks_directory_swapped_for_a_link_never_leads_root_to_delete_there() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    let runtime = www_dir(&sb.path("runtime"));
    let target = victim(&sb, "7", "root's own file\n");
    let before = state_of(&target);
    as_www(&format!(
        "ln -s {} {}/locks",
        target.parent().expect("dir").display(),
        runtime.display()
    ));
    db.insert(7, "running", 50 * 60);
    sb.heartbeat(7, Duration::from_secs(47 * 60));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}/locks/{{id}}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            runtime.display()
        )),
    );
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 1);
    assert_eq!(state_of(&target), before, "the root-only file is untouched");
    let rows = json(&o);
    let r = row(&rows, 7);
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(r["lock_release"], "failed", "{r}");
    let detail = r["lock_release_detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("refused to follow") && detail.contains("www-data"),
        "{detail}"
    );
    assert_eq!(db.status(7), "error");
}

/// Case 2: the row was judged with its lock file absent; while its compare-and-set waited
/// on a row lock, a new worker created the lock file and claimed its own row; the release
/// then removed that live lock. Staged exactly: the test holds the row `FOR UPDATE` until
/// selfheal's UPDATE waits on it, then creates the lock file, inserts the new worker's row
/// and commits. A file absent when the row was judged is never removed.
#[test]
fn case2_a_lock_file_absent_when_the_row_was_judged_is_never_removed() {
    use mysql::prelude::Queryable;
    let Some(sb) = setup() else { return };
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    db.insert(1, "running", 50 * 60);
    sb.heartbeat(1, Duration::from_secs(47 * 60));
    let runtime = www_dir(&sb.path("runtime"));
    let lock = runtime.join("sync.lock");
    let cfg = sb.config(
        &db.url,
        &sb.watch(&format!(
            "lock_file = \"{}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            lock.display()
        )),
    );
    let mut holder = db.conn();
    holder.query_drop("START TRANSACTION").expect("begin");
    let _: Vec<i64> = holder
        .query("SELECT id FROM sync_log WHERE id = 1 FOR UPDATE")
        .expect("hold row 1");
    let run = std::thread::spawn({
        let cfg = cfg.clone();
        move || check(&cfg, &["--format", "json"])
    });
    assert!(
        db.wait_for_lock_wait(),
        "selfheal's compare-and-set never waited on row 1"
    );
    // The new worker: its lock file (www-data's, as the job's), then its row.
    as_www(&format!("echo > {}", lock.display()));
    holder
        .query_drop("INSERT INTO sync_log (id, status, start_time) VALUES (2, 'running', NOW())")
        .expect("new row");
    sb.heartbeat(2, Duration::from_secs(1));
    holder.query_drop("COMMIT").expect("commit");
    let o = run.join().expect("check");
    let rows = json(&o);
    let r = row(&rows, 1);
    assert_eq!(r["applied"], true, "{r}");
    assert_ne!(r["lock_release"], "removed", "{r}");
    assert!(lock.exists(), "the new worker's lock is still there: {r}");
    assert_eq!(db.row(2).0, "running");
}

/// Case 3, the state directory: www-data owns it and planted `pending.jsonl` and
/// `journal.jsonl` as links to root's files; a root run truncated one and appended JSON
/// to the other, even with nothing to change. A state directory not private to the
/// running user is now refused (exit 3) before anything is opened in it, with the fix
/// `runuser -u www-data -- selfheal …`; the targets are untouched and no row is written.
#[test]
fn case3_links_in_a_state_directory_of_www_data_are_never_written_through() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    let state = www_dir(&sb.state_dir());
    chmod(&state, 0o750);
    let pending = victim(&sb, "pending-target", "{\"root\": \"data\"}\n");
    let journal = victim(&sb, "journal-target", "root's log\n");
    let before = (state_of(&pending), state_of(&journal));
    as_www(&format!(
        "ln -s {} {}/pending.jsonl && ln -s {} {}/journal.jsonl",
        pending.display(),
        state.display(),
        journal.display(),
        state.display()
    ));
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    // Nothing to change, then a dead row.
    for dead in [false, true] {
        if dead {
            db.insert(2, "running", 50 * 60);
            sb.heartbeat(2, Duration::from_secs(47 * 60));
        }
        let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
        let o = check(&cfg, &[]);
        assert_exit(&o, 3);
        let err = stderr(&o);
        assert!(
            err.contains("state directory (run.state_dir) is owned by www-data (uid 33)")
                && err.contains("selfheal: fix: run selfheal as www-data")
                && err.contains("runuser -u www-data -- selfheal check"),
            "{err}"
        );
        assert_eq!((state_of(&pending), state_of(&journal)), before);
        if dead {
            assert_eq!(db.status(2), "running", "nothing was written");
        }
    }
    // doctor says the same, with the same fix.
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = selfheal()
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("doctor");
    assert_exit(&o, 1);
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("✗ state_dir: "))
        .unwrap_or_else(|| panic!("no failed state_dir line:\n{}", stdout(&o)))
        .to_string();
    assert!(
        line.contains("owned by www-data (uid 33)")
            && line.contains("runuser -u www-data -- selfheal doctor"),
        "{line}"
    );
    assert_eq!((state_of(&pending), state_of(&journal)), before);
    // A state directory www-data can write, though root's: refused as well.
    chown(&state, 0);
    chmod(&state, 0o770);
    std::os::unix::fs::chown(&state, Some(0), Some(WWW)).expect("chgrp");
    let cfg = sb.config(&db.url(), &sb.watch("confirm = 1\n"));
    let o = check(&cfg, &[]);
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("chmod go-w"), "{}", stderr(&o));
    assert_eq!((state_of(&pending), state_of(&journal)), before);
    assert_eq!(db.status(2), "running");
}

/// Case 3, the metrics file: its temporary name was `selfheal.prom.<pid>`, so a link
/// planted there by whoever can write node_exporter's textfile directory was written
/// through with metrics text. The link is planted under exactly the pid the run gets (the
/// shell that plants it becomes selfheal with `exec`), and another at the file's own
/// name: neither target changes, and the file is selfheal's own regular file.
#[test]
fn case3_planted_names_for_the_metrics_file_are_never_written_through() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    let textfile = www_dir(&sb.path("textfile"));
    let by_pid = victim(&sb, "by-pid", "root's config\n");
    let by_name = victim(&sb, "by-name", "root's other config\n");
    let before = (state_of(&by_pid), state_of(&by_name));
    as_www(&format!(
        "ln -s {} {}/selfheal.prom",
        by_name.display(),
        textfile.display()
    ));
    let prom = textfile.join("selfheal.prom");
    let cfg = sb.config_with(
        &format!("url = \"{}\"", db.url()),
        &format!("metrics_file = \"{}\"", prom.display()),
        &sb.watch(""),
    );
    let o = Command::new("sh")
        .args([
            "-c",
            "setpriv --reuid=33 --regid=33 --clear-groups -- ln -s \"$VICTIM\" \"$DIR/selfheal.prom.$$\" \
             && exec \"$SELFHEAL\" check --config \"$CFG\"",
        ])
        .env("VICTIM", &by_pid)
        .env("DIR", &textfile)
        .env("SELFHEAL", bin())
        .env("CFG", &cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C")
        .output()
        .expect("sh");
    assert_exit(&o, 0);
    assert_eq!((state_of(&by_pid), state_of(&by_name)), before);
    let m = std::fs::symlink_metadata(&prom).expect("metrics file");
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(m.uid(), 0);
    assert!(
        std::fs::read_to_string(&prom)
            .expect("read")
            .contains("selfheal_last_run_exit_status 0")
    );
}

/// Case 3, the run lock: a link planted at a run lock in a directory another user can
/// write made root create the link's target; a run lock of another user's, which any
/// user could also `flock` through a read-only descriptor, made every run exit 75. The
/// link is refused (exit 3) and nothing is created; another user's lock is refused with
/// the fix (exit 3), never waited on; and the lock selfheal creates is 0600, so nobody
/// else can open it to hold it.
#[test]
fn case3_a_run_lock_planted_or_held_by_another_user_never_wedges_or_creates() {
    let Some(sb) = setup() else { return };
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 60);
    sb.heartbeat(1, Duration::from_secs(5));
    let shared = www_dir(&sb.path("lock-dir"));
    let created = sb.path("root-only").join("created-by-root");
    victim(&sb, "placeholder", "");
    let config = |lock: &Path| {
        let p = sb.path("run-lock.toml");
        std::fs::write(
            &p,
            format!(
                "[database]\nurl = \"{}\"\n\n[run]\nlock_file = \"{}\"\nstate_dir = \"{}\"\n\n[[watch]]\n{}",
                db.url(),
                lock.display(),
                sb.state_dir().display(),
                sb.watch("")
            ),
        )
        .expect("config");
        p
    };

    // A link at the name.
    let lock = shared.join("selfheal.lock");
    as_www(&format!("ln -s {} {}", created.display(), lock.display()));
    let o = check(&config(&lock), &[]);
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("is a symbolic link"), "{}", stderr(&o));
    assert!(!created.exists(), "root created nothing through the link");

    // Another user's lock, held by that user through a read-only descriptor.
    as_www(&format!("rm {0} && : > {0}", lock.display()));
    let mut held = Proc::spawn(&mut www_command(&format!(
        "exec flock --shared --no-fork {} sleep 600",
        lock.display()
    )));
    wait_until("www-data holds its lock", Duration::from_secs(10), || {
        lock_holders(&lock).contains(&i64::from(held.pid()))
    });
    let o = check(&config(&lock), &[]);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(
        err.contains("owned by www-data (uid 33), not by root (uid 0)")
            && err.contains("selfheal: fix:")
            && err.contains("leave run.lock_file unset"),
        "{err}"
    );
    held.kill9();

    // The lock selfheal creates itself: 0600, which www-data cannot open to hold.
    let own = sb.path("own-lock-dir");
    std::fs::create_dir(&own).expect("mkdir");
    chmod(&own, 0o755);
    let lock = own.join("selfheal.lock");
    // An old 0644 lock from before is narrowed too.
    std::fs::write(&lock, "").expect("old lock");
    chmod(&lock, 0o644);
    let cfg = config(&lock);
    assert_exit(&check(&cfg, &[]), 0);
    assert_eq!(
        std::fs::metadata(&lock).expect("lock").mode() & 0o777,
        0o600
    );
    let o = www_command(&format!(
        "flock --shared --nonblock {} true",
        lock.display()
    ))
    .output()
    .expect("flock");
    assert!(!o.status.success(), "www-data could open the run lock");
    assert_exit(&check(&cfg, &[]), 0);
}

// ---------------------------------------------------------------------------------------
// The property: no file outside the planted directories changes

/// What a tree looks like: per path, its kind, owner, mode, size, inode, mtime and
/// contents (or a link's target).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).expect("stat");
        let what = if m.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(&p).expect("readlink").display())
        } else if m.is_dir() {
            for e in std::fs::read_dir(&p).expect("ls") {
                todo.push(e.expect("entry").path());
            }
            "dir".into()
        } else {
            format!(
                "{:?}",
                String::from_utf8_lossy(&std::fs::read(&p).expect("read"))
            )
        };
        out.insert(
            p,
            format!(
                "{} {}:{} {:o} {} ino {} mtime {:?} {what}",
                if m.is_dir() { "d" } else { "f" },
                m.uid(),
                m.gid(),
                m.mode(),
                m.len(),
                m.ino(),
                m.modified().ok()
            ),
        );
    }
    out
}

/// One of `items`, chosen by `rng`.
fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    let n = u64::try_from(items.len()).expect("len");
    &items[usize::try_from(rng.next() % n).expect("index")]
}

/// One random plan of links, as a shell script for www-data: in each of `dirs`, names
/// selfheal may touch (`names`) become links to victims, to each other, or to nothing,
/// and sometimes the directory itself is moved aside and replaced by a link.
fn plant_script(rng: &mut Rng, dirs: &[(PathBuf, Vec<String>)], targets: &[PathBuf]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("set -e\n");
    let mut links: Vec<PathBuf> = Vec::new();
    for (dir, names) in dirs {
        if rng.between(0, 5) == 0 {
            // The whole directory becomes a link (to a victim directory, usually).
            let t = pick(rng, targets);
            let _ = writeln!(
                s,
                "mv {0} {0}.moved && ln -s {1} {0}",
                dir.display(),
                t.display()
            );
            continue;
        }
        for name in names {
            if rng.between(0, 2) == 0 {
                continue;
            }
            let at = dir.join(name);
            let to = match rng.between(0, 3) {
                0 if !links.is_empty() => pick(rng, &links).clone(),
                1 => PathBuf::from(format!("/nonexistent/dangling-{}", rng.next() % 1000)),
                _ => pick(rng, targets).clone(),
            };
            let _ = writeln!(s, "rm -f {0}; ln -s {1} {0}", at.display(), to.display());
            links.push(at);
        }
    }
    s
}

/// Seeded: for random trees of links planted by www-data in the lock, heartbeat, metrics
/// and state directories, real runs (SQLite, as root) change no file outside them — not a
/// byte, not an owner, mode or time, no file added or removed.
#[test]
fn random_links_planted_by_www_data_change_no_file_outside_their_directories() {
    let Some(sb) = setup() else { return };
    let seed = std::env::var("SELFHEAL_SECURITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5e1f_4ea1_u64);
    let mut rng = Rng(seed);
    // The victims: root's files and a directory, and www-data's own files elsewhere.
    let victims = sb.path("victims");
    std::fs::create_dir(&victims).expect("mkdir");
    let vdir = victims.join("dir");
    std::fs::create_dir(&vdir).expect("mkdir");
    let mut targets = vec![victims.clone(), vdir.clone()];
    for (i, dir) in [&victims, &vdir].into_iter().enumerate() {
        for n in [
            "1",
            "2",
            "7",
            "selfheal.prom",
            "journal.jsonl",
            "pending.jsonl",
        ] {
            let p = dir.join(n);
            std::fs::write(&p, format!("victim {i} {n}\n")).expect("victim");
            targets.push(p);
        }
    }
    let www_victims = www_dir(&sb.path("www-victims"));
    as_www(&format!(
        "echo theirs > {0}/a && echo theirs > {0}/7",
        www_victims.display()
    ));
    targets.push(www_victims.join("a"));
    targets.push(www_victims.clone());

    // What the runs did, so that the property is not proved by runs that did nothing.
    let (mut applied, mut refused, mut releases) = (0, 0, BTreeMap::<String, u32>::new());
    let rounds = 40;
    for round in 0..rounds {
        // Everything selfheal writes in lives under www-data's `base` (the database, which
        // is the application's, not selfheal's file, lives apart).
        let base = www_dir(&sb.path(&format!("r{round}")));
        let db_dir = sb.path(&format!("db{round}"));
        std::fs::create_dir(&db_dir).expect("mkdir");
        let runtime = www_dir(&base.join("runtime"));
        let locks = www_dir(&runtime.join("locks"));
        let hb = www_dir(&runtime.join("hb"));
        let textfile = www_dir(&base.join("textfile"));
        let state = base.join("state");
        // The state directory: root's (private) or www-data's (refused).
        let www_state = rng.between(0, 2) == 0;
        if www_state {
            www_dir(&state);
        }
        let db_path = db_dir.join("app.db");
        let c = rusqlite::Connection::open(&db_path).expect("sqlite");
        c.execute_batch(SQLITE_SCHEMA).expect("schema");
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("now")
            .as_secs();
        let ids = [1i64, 2, 3, 7];
        for id in ids {
            let age = if rng.between(0, 1) == 0 { 50 * 60 } else { 60 };
            c.execute(
                "INSERT INTO sync_log (id, status, start_time) VALUES (?1, 'running', ?2)",
                rusqlite::params![id, (now - age).to_string()],
            )
            .expect("row");
            // A heartbeat of its own, fresh or stale, or none.
            let p = hb.join(id.to_string());
            match rng.between(0, 2) {
                0 => {}
                n => {
                    std::fs::write(&p, "").expect("hb");
                    chown(&p, WWW);
                    let ago = if n == 1 { 47 * 60 } else { 5 };
                    std::fs::File::options()
                        .append(true)
                        .open(&p)
                        .expect("hb")
                        .set_modified(SystemTime::now() - Duration::from_secs(ago))
                        .expect("mtime");
                }
            }
            if rng.between(0, 1) == 0 {
                as_www(&format!("echo > {}/{id}", locks.display()));
            }
        }
        drop(c);
        let names = |extra: &[&str]| -> Vec<String> {
            ids.iter()
                .map(ToString::to_string)
                .chain(extra.iter().map(|s| (*s).to_string()))
                .collect()
        };
        let mut dirs = vec![
            (locks.clone(), names(&[])),
            (hb.clone(), names(&[])),
            (
                textfile.clone(),
                vec!["selfheal.prom".into(), ".selfheal.prom.tmp".into()],
            ),
        ];
        if www_state {
            dirs.push((
                state.clone(),
                vec![
                    "journal.jsonl".into(),
                    "pending.jsonl".into(),
                    "last-run.json".into(),
                    "run.lock".into(),
                    "confirmations.json".into(),
                    "reminders.json".into(),
                ],
            ));
        } else {
            // Root's: www-data cannot plant in it, only move it aside for a link.
            std::fs::create_dir(&state).expect("mkdir");
            chmod(&state, 0o750);
            dirs.push((state.clone(), Vec::new()));
        }
        as_www(&plant_script(&mut rng, &dirs, &targets));
        let cfg = base.join("selfheal.toml");
        std::fs::write(
            &cfg,
            format!(
                "[database]\nurl = \"sqlite://{}\"\n\n[run]\nstate_dir = \"{}\"\nmetrics_file = \"{}/selfheal.prom\"\n\n\
                 [[watch]]\nname = \"w\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
                 heartbeat_file = \"{}/{{id}}\"\nlock_file = \"{}/{{id}}\"\nrelease_lock = \"if_free\"\n\
                 stale_after = \"5m\"\nmax_age = \"4h\"\nended_column = \"end_time\"\n\
                 message_column = \"error_msg\"\nconfirm = 1\n",
                db_path.display(),
                state.display(),
                textfile.display(),
                hb.display(),
                locks.display()
            ),
        )
        .expect("config");
        let before = (snapshot(&victims), snapshot(&www_victims));
        for _ in 0..2 {
            let o = check(&cfg, &["--format", "json"]);
            assert!(
                matches!(o.status.code(), Some(0 | 1 | 3)),
                "round {round} (seed {seed}): {}\n{}",
                stdout(&o),
                stderr(&o)
            );
            if o.status.code() == Some(3) {
                refused += 1;
            }
            for r in json(&o).iter().filter(|r| r["applied"] == true) {
                applied += 1;
                if let Some(l) = r["lock_release"].as_str() {
                    *releases.entry(l.to_string()).or_default() += 1;
                }
            }
        }
        let after = (snapshot(&victims), snapshot(&www_victims));
        assert!(
            before == after,
            "round {round} (seed {seed}, set SELFHEAL_SECURITY_SEED to replay): a file \
             outside the planted directories changed:\nbefore {before:#?}\nafter {after:#?}"
        );
    }
    eprintln!("{applied} rows changed, {refused} runs refused, releases {releases:?}");
    assert!(
        applied > 0 && refused > 0 && releases.contains_key("removed"),
        "the runs must change rows, release lock files and be refused, or this proves \
         little: {applied} changed, {refused} refused, releases {releases:?}"
    );
}
