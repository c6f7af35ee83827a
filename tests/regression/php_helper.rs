//! The PHP helper (`php/Selfheal/Job.php`) on files that were not its own: a link or a
//! directory another user swapped in on its path, a script or data file given as the lock,
//! a shared lock another user holds. With php-cli, as root over a directory `www-data`
//! owns.

use std::process::Command;

use crate::common::*;
use crate::php::helper::{PhpJob, php_job, planting, rounds, swapping, www_data_dir};

/// A root PHP job rewrote a root-only file through a link www-data planted at its lock.
///
/// Www-data loops `ln -s /root-only/victim d/x.lock; rm d/x.lock` while a root PHP job
/// starts with `'lock' => 'd/x.lock'`: the 0600 victim was rewritten with the holder line
/// and made 0644; with `'heartbeat'`, root created the file the link named. Now no round
/// writes, truncates, re-permissions or creates anything through the link: 1500 rounds at
/// full speed, then 100 with the helper's system calls slowed down.
#[test]
fn a_root_php_job_never_writes_or_creates_through_a_link_planted_in_its_directory() {
    let Some((sb, www)) = www_data_dir() else {
        return;
    };
    if !have_tool("strace", &["-qq", "-o", "/dev/null", "true"], "strace") {
        return;
    }
    let private = sb.path("root-only");
    std::fs::create_dir(&private).expect("dir");
    chmod(&private, 0o700);
    let victim = private.join("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    chmod(&victim, 0o600);
    let before = bytes_and_mode(&victim);
    let chosen = private.join("chosen");

    for (option, name, target) in [
        ("lock", "x.lock", &victim),
        ("heartbeat", "x.beat", &chosen),
    ] {
        let link = www.join(name);
        let attacker = planting(&link, target);
        wait_until("the attacker plants its link", secs(30), || {
            link.is_symlink()
        });
        for (n, slow) in [(1500, false), (100, true)] {
            let (started, refused) = rounds(option, &link, n, slow);
            let trail = format!("{option}, {n} rounds{}", if slow { ", slowed" } else { "" });
            assert_eq!(
                bytes_and_mode(&victim),
                before,
                "{trail}: the victim was changed"
            );
            assert!(
                !chosen.exists(),
                "{trail}: root created the file the link names"
            );
            assert_eq!(
                std::fs::read_dir(&private).expect("dir").count(),
                1,
                "{trail}: something was created in the private directory"
            );
            assert!(
                refused > 0,
                "{trail}: the link was never in the way ({started} started)"
            );
        }
        drop(attacker);
    }
}

/// A root PHP job could create files in a root-only directory swapped in on its path.
///
/// The same, one directory up: www-data owns `www` and swaps the real directory
/// `www/runtime` the job's files are in for a link to a root-only directory and back. A
/// file opened there is caught by the descriptor's own path; a file created there would
/// stay, so the helper creates files through a descriptor held on the directory it checked
/// (the root-only directory gets nothing, its own `x.lock` is left as it is).
#[test]
fn a_root_php_job_never_creates_or_writes_through_a_directory_swapped_on_its_path() {
    let Some((sb, www)) = www_data_dir() else {
        return;
    };
    if !have_tool("strace", &["-qq", "-o", "/dev/null", "true"], "strace") {
        return;
    }
    let private = sb.path("root-only");
    std::fs::create_dir(&private).expect("dir");
    chmod(&private, 0o700);
    let victim = private.join("x.lock");
    std::fs::write(&victim, "precious\n").expect("victim");
    chmod(&victim, 0o600);
    let before = bytes_and_mode(&victim);
    let runtime = www.join("runtime");
    std::fs::create_dir(&runtime).expect("dir");
    nix::unistd::chown(&runtime, Some(33.into()), Some(33.into())).expect("chown");
    let attacker = swapping(&runtime, &private);
    wait_until("the attacker swaps the directory", secs(30), || {
        runtime.is_symlink()
    });
    for (option, name) in [("lock", "x.lock"), ("heartbeat", "x.beat")] {
        for (n, slow) in [(1500, false), (100, true)] {
            let (started, refused) = rounds(option, &runtime.join(name), n, slow);
            let trail = format!("{option}, {n} rounds{}", if slow { ", slowed" } else { "" });
            assert_eq!(
                bytes_and_mode(&victim),
                before,
                "{trail}: the victim was changed"
            );
            let names: Vec<_> = std::fs::read_dir(&private)
                .expect("dir")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(
                names,
                ["x.lock"],
                "{trail}: files were created in the private directory"
            );
            assert!(
                refused > 0,
                "{trail}: the swap was never in the way ({started} started)"
            );
        }
    }
    drop(attacker);
}

/// The PHP helper replaced a locked script's or data file's content with its holder line.
///
/// docs/design.md#run-wrapper for the helper: a lock file that is neither empty nor holds a holder line (the
/// script itself, a data file — also another user's) is locked as it is: a second job is
/// refused, naming the PHP process from /proc/locks, and the file's bytes and mode stay
/// (before: the content was replaced by the holder line).
#[test]
fn the_helper_locks_a_script_or_data_file_and_leaves_its_bytes_and_mode_alone() {
    let Some((_sb, www)) = www_data_dir() else {
        return;
    };
    let db = www.join("data.db");
    std::fs::write(&db, b"SQLite format 3\0\x10\x00rows").expect("db");
    chmod(&db, 0o640);
    let theirs = www.join("theirs.php");
    std::fs::write(&theirs, "<?php // www-data's script\n").expect("script");
    nix::unistd::chown(&theirs, Some(33.into()), Some(33.into())).expect("chown");
    chmod(&theirs, 0o755);
    for file in [&db, &theirs] {
        let before = bytes_and_mode(file);
        let gate = www.join("gate");
        let job = PhpJob::start(&mut php_job(
            file,
            &["--work", "600", "--gate", gate.to_str().expect("path")],
        ));
        let o = php_job(file, &["--wait", "0"]).output().expect("php");
        assert_exit(&o, 75);
        assert!(
            stderr(&o).contains(&format!(
                "not started: {} is held by pid {} (",
                file.display(),
                job.pid()
            )) && stderr(&o).contains(") (the file names no holder); one try (wait 0)"),
            "{}",
            stderr(&o)
        );
        std::fs::write(&gate, "").expect("gate");
        job.finish();
        std::fs::remove_file(&gate).expect("gate");
        assert_eq!(bytes_and_mode(file), before, "{}", file.display());
    }
}

/// The PHP helper blamed a shared lock another user held on the job its file's line named.
///
/// A shared flock another user holds on a root PHP job's lock is named as such (process,
/// user), not blamed on the job the file's line names.
#[test]
fn a_shared_lock_another_user_holds_is_named_by_the_helper() {
    let Some((_sb, www)) = www_data_dir() else {
        return;
    };
    let lock = www.join("job.lock");
    let o = php_job(&lock, &[]).output().expect("php");
    assert!(o.status.success(), "{o:?}");
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=33",
        "--regid=33",
        "--clear-groups",
        "--",
        "flock",
        "--shared",
        "--no-fork",
    ])
    .arg(&lock)
    .args(["sleep", "600"]);
    let reader = Proc::spawn(&mut c);
    let pid = reader.pid();
    wait_until("www-data holds its shared lock", secs(30), || {
        lock_holders(&lock).contains(&i64::from(pid))
    });
    let o = php_job(&lock, &["--wait", "0"]).output().expect("php");
    assert_exit(&o, 75);
    assert!(
        stderr(&o).contains(&format!(
            "not started: {} is held by pid {pid} (sleep) of user www-data (uid 33), with a \
             shared lock (not a run of this job, which locks exclusively); one try (wait 0)",
            lock.display()
        )),
        "{}",
        stderr(&o)
    );
}
