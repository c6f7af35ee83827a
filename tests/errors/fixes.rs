//! Fixes that fit the actual cause and the actual user, through the real binary: an
//! unreadable `defaults_file` is a file to let the user read, not a server to start; a
//! heartbeat directory of the user's own with mode 000 is `chmod u+x`, never "run selfheal
//! as" that same user; as the package's `selfheal` user, a directory the application's
//! group may enter is `adduser selfheal www-data` and the package's state directory is
//! `dpkg-reconfigure selfheal` — and applying those fixes makes `doctor` pass. Runs as
//! other users and in a private mount namespace need root (CI is root).

use std::path::Path;
use std::time::Duration;

use crate::common::*;

fn chown(p: &Path, user: &str) {
    let o = std::process::Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(p)
        .output()
        .expect("chown");
    assert!(o.status.success(), "chown {user} {}: {o:?}", p.display());
}

#[test]
fn an_unreadable_defaults_file_is_a_file_to_let_the_user_read_not_a_server_to_start() {
    let Some(_) = as_www_data() else { return };
    let sb = Sandbox::new();
    // www-data may create the run lock and the state directory: what fails is the option
    // file.
    chmod(sb.dir.path(), 0o777);
    let cnf = sb.file(
        "app.cnf",
        "[client]\nuser = app\npassword = secret\n",
        0o600,
    );
    let cfg = sb.config_with(
        &format!(
            "url = \"mysql:///appdb\"\ndefaults_file = \"{}\"",
            cnf.display()
        ),
        "",
        &sb.watch(""),
    );
    chmod(&cfg, 0o644);
    let o = as_www_data()
        .expect("root")
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 2);
    let d = finding(&o, "database");
    assert!(
        d.starts_with(&format!(
            "✗ database: cannot read database.defaults_file {} as www-data (uid 33): \
             Permission denied (os error 13); fix: chgrp www-data {1} && chmod g+r {1}",
            cnf.display(),
            cnf.display()
        )),
        "{d}"
    );
    assert!(!d.contains("is the server running"), "{d}");
    let o = as_www_data()
        .expect("root")
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        format!(
            "selfheal: error: cannot read database.defaults_file {0} as www-data (uid 33): \
             Permission denied (os error 13)\nselfheal: fix: chgrp www-data {0} && chmod g+r \
             {0} (root keeps it, group www-data may read it)\n",
            cnf.display()
        )
    );
    // nobody is given nothing: not group nogroup's read, but whom to run as. (The run lock and state directory www-data made are not nobody's.)
    let _ = std::fs::remove_file(sb.run_lock());
    let _ = std::fs::remove_dir_all(sb.state_dir());
    let o = as_nobody()
        .expect("root")
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(!err.contains("nogroup") && !err.contains("chmod"), "{err}");
    assert!(
        err.contains(&format!(
            "-- selfheal check --config {}; nobody stands for no user and is given nothing",
            cfg.display()
        )),
        "{err}"
    );
}

#[test]
fn a_heartbeat_directory_of_ones_own_with_mode_000_is_chmod_u_x() {
    let Some(_) = as_nobody() else { return };
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    chmod(sb.dir.path(), 0o755);
    chmod(&db.path, 0o666);
    let runtime = sb.path("runtime");
    std::fs::create_dir(&runtime).expect("dir");
    chown(&runtime, "www-data");
    chmod(&runtime, 0o000);
    let watch = sb.watch("").replace(
        &sb.heartbeat_template(),
        &format!("{}/hb-{{id}}", runtime.display()),
    );
    let cfg = sb.config(&db.url(), &watch);
    chmod(&cfg, 0o644);
    let o = std::process::Command::new("runuser")
        .args(["-u", "www-data", "--"])
        .arg(bin())
        .args(["doctor", "--config"])
        .arg(&cfg)
        .env_remove("SELFHEAL_CONFIG")
        .env("LC_ALL", "C")
        .output()
        .expect("run");
    assert_exit(&o, 1);
    let hb = finding(&o, "watch full-sync: heartbeat_file");
    assert!(
        hb.contains(&format!(
            "fix: chmod u+x {0} ({0} is www-data's own, but its mode 000 shuts its owner out)",
            runtime.display()
        )),
        "{hb}"
    );
    assert!(!hb.contains("run selfheal as"), "{hb}");
}

/// The package's user and the application's group, on a host of its own: `selfheal` is
/// not in group www-data, whose heartbeat directory (750) it cannot enter, and the state
/// directory is still www-data's (the cron line was just switched to `selfheal`).
#[test]
fn as_the_selfheal_user_the_fixes_are_adduser_and_dpkg_reconfigure_and_they_work() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(3, "running", 20 * 60);
    sb.heartbeat(3, Duration::from_secs(10));
    chmod(sb.dir.path(), 0o755);
    chmod(&db.path, 0o666);
    let runtime = sb.path("runtime");
    std::fs::create_dir(&runtime).expect("dir");
    std::fs::rename(sb.path("hb-3"), runtime.join("hb-3")).expect("move heartbeat");
    chown(&runtime, "www-data");
    chmod(&runtime, 0o750);
    // Named selfheal.toml with no [run]: the package's /var/lib/selfheal. The watch is
    // pinned to this host, the one thing doctor would otherwise warn about.
    let cfg = sb.path("selfheal.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\nurl = \"{}\"\n\n[[watch]]\n{}",
            db.url(),
            sb.watch(&format!("host = \"{}\"\n", hostname())).replace(
                &sb.heartbeat_template(),
                &format!("{}/hb-{{id}}", runtime.display())
            )
        ),
    )
    .expect("config");
    chmod(&cfg, 0o644);
    let postinst =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/maintainer-scripts/postinst");
    // The host: user selfheal (not in www-data), the cron line naming it, the package
    // installed, its state directory still www-data's.
    // (A selfheal user this host already has, say from the package's own install test,
    // would be found first: the test's host has only its own.)
    let setup = "set -e
        sed -i '/^selfheal:/d' /etc/passwd /etc/group
        echo 'selfheal:x:990:990::/var/lib/selfheal:/usr/sbin/nologin' >>/etc/passwd
        echo 'selfheal:x:990:' >>/etc/group
        mkdir -p /etc/cron.d /usr/share/doc/selfheal
        echo '*/10 * * * * selfheal [ -x /usr/bin/selfheal ] && /usr/bin/selfheal check' >/etc/cron.d/selfheal
        touch /usr/share/doc/selfheal/copyright
        install -d -o www-data -g www-data -m 750 /var/lib/selfheal";
    let script = r#"
        doctor() { setpriv --reuid=990 --regid=990 --init-groups "$SELFHEAL" doctor --config "$CFG"; }
        doctor; echo "exit $?"
        echo ----
        # The fixes doctor gave: the group, then what dpkg-reconfigure runs.
        sed -i 's/^www-data:x:33:.*$/&,selfheal/; s/^www-data:x:33:,selfheal$/www-data:x:33:selfheal/' /etc/group
        sh "$POSTINST" configure
        doctor; echo "exit $?"
    "#;
    let Some(mut c) = on_own_host(
        &["/etc", "/var/lib", "/usr/share/doc"],
        setup,
        &["sh".as_ref(), "-c".as_ref(), script.as_ref()],
    ) else {
        return;
    };
    let o = c
        .env("CFG", &cfg)
        .env("POSTINST", &postinst)
        .output()
        .expect("run");
    let out = stdout(&o);
    let (before, after) = out
        .split_once("----\n")
        .unwrap_or_else(|| panic!("{out}{}", stderr(&o)));
    let line = |text: &str, subject: &str| -> String {
        text.lines()
            .find(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, r)| r.starts_with(&format!("{subject}: ")))
            })
            .unwrap_or_else(|| panic!("no {subject:?} line in:\n{text}"))
            .to_string()
    };
    let hb = line(before, "watch full-sync: heartbeat_file");
    assert!(
        hb.starts_with("✗ ")
            && hb.contains(&format!(
                "fix: adduser selfheal www-data (group www-data may look inside {}",
                runtime.display()
            )),
        "{hb}"
    );
    assert!(!hb.contains("chmod o+x"), "{hb}");
    let state = line(before, "state_dir");
    assert!(
        state.starts_with("✗ ") && state.contains("fix: dpkg-reconfigure selfheal (as root)"),
        "{state}"
    );
    assert!(!state.contains("chown -R"), "{state}");
    assert!(before.ends_with("exit 1\n"), "{before}");
    // After the two fixes, as given: all passes.
    assert!(
        line(after, "watch full-sync: heartbeat_file").starts_with("✓ "),
        "{after}"
    );
    assert!(line(after, "state_dir").starts_with("✓ "), "{after}");
    assert!(line(after, "run lock").starts_with("✓ "), "{after}");
    assert!(after.ends_with("exit 0\n"), "{after}\n{}", stderr(&o));
}
