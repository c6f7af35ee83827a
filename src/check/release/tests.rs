//! The release of a legacy lock file, against real files, real locks held by real
//! processes, and real pids.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use super::*;

/// Judged now, held and released at once (the caller's count of running rows aside).
fn release_if_free(path: &Path, host: &Host) -> Release {
    match hold(observe(path)) {
        Ok(held) => release_held(held, host),
        Err(outcome) => outcome,
    }
}

type Ident = (u64, u64);

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn id_of(p: &Path) -> Ident {
    let m = std::fs::symlink_metadata(p).expect("stat");
    (m.dev(), m.ino())
}

/// A python3 child that takes a lock on `path` (`flock` or `lockf`) and says so.
fn python_holder(path: &Path, how: &str) -> Child {
    let mut c = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import fcntl, sys, time\n\
             f = open(sys.argv[1], 'r+')\n\
             fcntl.{how}(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
             print('locked', flush=True)\n\
             time.sleep(600)\n"
        ))
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "locked", "the holder took its lock");
    c
}

fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().expect("spawn");
    let pid = c.id();
    c.wait().expect("wait");
    pid
}

#[test]
fn a_free_file_without_a_pid_or_with_a_dead_pid_is_removed_and_nothing_else() {
    let host = Host::current();
    for content in [
        String::new(),
        "not a pid\n".into(),
        format!("{}\n", dead_pid()),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sync.lock");
        std::fs::write(&p, &content).expect("write");
        std::fs::write(dir.path().join("other"), "x").expect("write");
        let r = release_if_free(&p, &host);
        assert!(matches!(&r, Release::Removed(_)), "{content:?}: {r:?}");
        assert!(!r.needs_a_person());
        assert_eq!(names(dir.path()), ["other"], "{content:?}: no leftovers");
        if content.is_empty() {
            assert_eq!(
                r.detail(),
                Some("no kernel lock on it, no pid in it, inode unchanged")
            );
        }
    }
}

#[test]
fn an_absent_file_stays_absent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");
    assert_eq!(release_if_free(&p, &Host::current()), Release::Absent);
    assert!(names(dir.path()).is_empty(), "nothing was created");
}

#[test]
fn a_live_pid_in_the_file_keeps_it_byte_for_byte() {
    let host = Host::current();
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");
    let mut sleeper = Command::new("sleep").arg("600").spawn().expect("sleep");
    for content in [
        format!("{}\n", sleeper.id()),
        format!("{}:{}", host.name, sleeper.id()),
    ] {
        std::fs::write(&p, &content).expect("write");
        let before = (
            id_of(&p),
            std::fs::metadata(&p).expect("meta").modified().ok(),
        );
        let r = release_if_free(&p, &host);
        assert_eq!(
            r,
            Release::Kept(format!("pid {} written in it is alive", sleeper.id()))
        );
        assert!(r.needs_a_person());
        assert_eq!(std::fs::read_to_string(&p).expect("read"), content);
        assert_eq!(
            (
                id_of(&p),
                std::fs::metadata(&p).expect("meta").modified().ok()
            ),
            before
        );
        assert_eq!(names(dir.path()), ["sync.lock"]);
    }
    sleeper.kill().expect("kill");
    sleeper.wait().expect("wait");
    // The same file, once its pid is gone, goes.
    assert!(matches!(release_if_free(&p, &host), Release::Removed(_)));
}

#[test]
fn a_pid_from_another_host_keeps_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");
    std::fs::write(&p, "elsewhere.invalid:1234\n").expect("write");
    let r = release_if_free(&p, &Host::current());
    assert!(
        matches!(&r, Release::Kept(w) if w.contains("host elsewhere.invalid")),
        "{r:?}"
    );
    assert!(p.exists());
}

#[test]
fn a_recycled_pid_does_not_keep_the_file() {
    // The file was written an hour ago; the process now carrying the pid started just now,
    // so it cannot have written it.
    let host = Host::current();
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");
    let mut sleeper = Command::new("sleep").arg("600").spawn().expect("sleep");
    std::fs::write(&p, format!("{}\n", sleeper.id())).expect("write");
    File::options()
        .append(true)
        .open(&p)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(3_600))
        .expect("mtime");
    let r = release_if_free(&p, &host);
    assert!(
        matches!(&r, Release::Removed(w) if w.contains("started after it was written")),
        "{r:?}"
    );
    sleeper.kill().expect("kill");
    sleeper.wait().expect("wait");
}

#[test]
fn a_kernel_lock_held_by_another_process_keeps_the_file() {
    let host = Host::current();
    for how in ["flock", "lockf"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sync.lock");
        std::fs::write(&p, "").expect("write");
        let before = id_of(&p);
        let mut holder = python_holder(&p, how);
        for _ in 0..3 {
            let r = release_if_free(&p, &host);
            assert_eq!(
                r,
                Release::Kept(format!(
                    "a kernel lock on it is held by pid {}",
                    holder.id()
                )),
                "{how}"
            );
            assert_eq!(id_of(&p), before, "{how}");
            assert_eq!(names(dir.path()), ["sync.lock"], "{how}");
        }
        holder.kill().expect("kill");
        holder.wait().expect("wait");
        assert!(
            matches!(release_if_free(&p, &host), Release::Removed(_)),
            "{how}"
        );
    }
}

#[test]
fn symbolic_links_and_directories_are_never_removed() {
    let host = Host::current();
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("target");
    std::fs::write(&target, "").expect("write");
    let link = dir.path().join("sync.lock");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    assert!(
        matches!(release_if_free(&link, &host), Release::Kept(w) if w.contains("symbolic link"))
    );
    let sub = dir.path().join("dir.lock");
    std::fs::create_dir(&sub).expect("mkdir");
    assert!(
        matches!(release_if_free(&sub, &host), Release::Kept(w) if w.contains("not a regular file"))
    );
    assert_eq!(names(dir.path()), ["dir.lock", "sync.lock", "target"]);
}

#[test]
fn only_the_inode_seen_when_the_row_was_judged_is_removed() {
    let host = Host::current();
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");

    // Absent when judged: a file that appears later (a new worker's lock) is never removed.
    let seen = observe(&p);
    assert!(matches!(seen, Seen::Absent), "{seen:?}");
    std::fs::write(&p, "").expect("a new worker's lock");
    assert_eq!(hold(seen).expect_err("absent then"), Release::Absent);
    assert_eq!(names(dir.path()), ["sync.lock"]);

    // Replaced between the judgement and the re-read before the write: kept.
    let seen = observe(&p);
    let old = dir.path().join("old");
    std::fs::rename(&p, &old).expect("rename");
    std::fs::write(&p, "new").expect("write");
    let r = hold(seen).expect_err("replaced");
    assert!(
        matches!(&r, Release::Kept(w) if w.contains("replaced by another file since the row was judged")),
        "{r:?}"
    );

    // Replaced after it was held: the held inode is not at the name any more; kept.
    let held = hold(observe(&p)).expect("held");
    std::fs::rename(&p, dir.path().join("older")).expect("rename");
    std::fs::write(&p, "newer").expect("write");
    let r = release_held(held, &host);
    assert!(
        matches!(&r, Release::Kept(w) if w.contains("replaced by another file")),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&p).expect("read"), "newer");
    assert_eq!(names(dir.path()), ["old", "older", "sync.lock"]);

    // The held inode itself goes, and nothing else.
    let held = hold(observe(&p)).expect("held");
    assert_eq!(
        release_held(held, &host),
        Release::Removed("no kernel lock on it, no pid in it, inode unchanged".into())
    );
    assert_eq!(names(dir.path()), ["old", "older"]);
}

/// The case: the file judged is deleted and a new one made under its name before
/// the write (ext4 hands the freed inode number to the next file of the directory more
/// often than not, so a device and inode number noted at judgement would match). Held
/// open since the judgement, the judged inode cannot be given away: the new file is told
/// apart and kept, round after round.
#[test]
fn a_file_deleted_and_made_again_after_the_judgement_is_never_taken_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("sync.lock");
    for round in 0..50 {
        std::fs::write(&p, "").expect("the dead worker's lock");
        let seen = observe(&p);
        std::fs::remove_file(&p).expect("rm");
        std::fs::write(&p, "").expect("a new worker's lock");
        let r = hold(seen).expect_err("replaced");
        assert!(
            matches!(&r, Release::Kept(w) if w.contains("replaced by another file")),
            "round {round}: {r:?}"
        );
        assert_eq!(names(dir.path()), ["sync.lock"], "round {round}");
    }
}

#[test]
fn a_directory_on_the_way_swapped_for_a_link_leads_nowhere() {
    // As the PHP user would: `locks/` replaced by a link to a directory of someone else's.
    // The link is owned by root here (the test runs as root or as one user), so what
    // makes it untrusted is its directory, which others can write.
    use std::os::unix::fs::PermissionsExt;
    let host = Host::current();
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime");
    let victim = dir.path().join("victim");
    std::fs::create_dir(&runtime).expect("mkdir");
    std::fs::create_dir(&victim).expect("mkdir");
    std::fs::write(victim.join("shadow"), "secret").expect("write");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::os::unix::fs::symlink(&victim, runtime.join("locks")).expect("symlink");
    let p = runtime.join("locks/shadow");
    let r = release_if_free(&p, &host);
    assert!(
        matches!(&r, Release::Failed(w) if w.contains("refused to follow")),
        "{r:?}"
    );
    assert!(r.needs_a_person());
    assert_eq!(
        std::fs::read_to_string(victim.join("shadow")).expect("untouched"),
        "secret"
    );
}
