//! Nothing a local user plants can make selfheal delete, truncate or overwrite a file: the
//! real binary, run as root (as cron often does) over directories the PHP user `www-data`
//! (uid 33) owns, non-sticky, where that user — the attacker here, its commands run with
//! `setpriv` — plants symbolic links and files. A seeded property test: random trees of links
//! in the lock, heartbeat, metrics and state directories, many real runs, and no file outside
//! those directories changes. (Each case that once went wrong is in
//! `regression::planted_files`, with these helpers.)
//!
//! Root only (switching users); skipped elsewhere, failed in CI when not root.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use crate::common::*;

pub(crate) const WWW: u32 = 33;

pub(crate) fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).expect("chown");
}

/// A directory of www-data's, mode 0755, not sticky: www-data may put anything in it.
pub(crate) fn www_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).expect("mkdir");
    chown(p, WWW);
    chmod(p, 0o755);
    p.to_path_buf()
}

/// Runs `script` with `sh -c` as www-data (the attacker), asserting it succeeded.
#[track_caller]
pub(crate) fn as_www(script: &str) {
    let o = www_command(script).output().expect("setpriv");
    assert!(
        o.status.success(),
        "as www-data: {script}\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}

pub(crate) fn www_command(script: &str) -> Command {
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
pub(crate) fn setup() -> Option<Sandbox> {
    if !root_or_skip("planting links as www-data") {
        return None;
    }
    let sb = Sandbox::new();
    chmod(sb.dir.path(), 0o755);
    Some(sb)
}

/// A root-only file outside every directory selfheal is configured with.
pub(crate) fn victim(sb: &Sandbox, name: &str, text: &str) -> PathBuf {
    let dir = sb.path("root-only");
    std::fs::create_dir_all(&dir).expect("mkdir");
    chmod(&dir, 0o700);
    let p = dir.join(name);
    std::fs::write(&p, text).expect("victim");
    chmod(&p, 0o600);
    p
}

/// `(inode, size, mode, mtime, text)` of a file, to say it was left as it was.
pub(crate) fn state_of(p: &Path) -> (u64, u64, u32, SystemTime, String) {
    let m = std::fs::symlink_metadata(p).expect("stat");
    (
        m.ino(),
        m.len(),
        m.mode(),
        m.modified().expect("mtime"),
        String::from_utf8_lossy(&std::fs::read(p).expect("read")).into_owned(),
    )
}

pub(crate) fn json(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
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
