//! The PHP helper (`php/Selfheal/Job.php`) with php-cli and real processes: its lock
//! excludes a second PHP process and a `selfheal run`-wrapped command alike, in both
//! directions, each refused one naming the holder from the same `HOST:PID START` line and
//! exiting 75; its bounded wait gives the lock to a waiter exactly once; it never deletes
//! or recreates its lock file; and a PHP job that uses it (owner column and heartbeat, on a
//! real MariaDB `sync_log`) is never touched by `check` while alive and reclaimed at once
//! when killed; `check` names the PHP job holding the lock from the helper's line; and it
//! loads through a classmap autoloader as Composer's, in either order.
//!
//! Skipped outside CI when php (or, for the database test, pdo_mysql and a MariaDB
//! server) is missing; fails in CI.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Output};
use std::time::Duration;

use crate::common::*;
use selfheal::run::holder::{HolderLine, parse_line};

fn have_php() -> bool {
    have_tool(
        "php",
        &["-r", "exit(extension_loaded('pdo_mysql') ? 0 : 1);"],
        "php-cli with pdo_mysql",
    )
}

pub(crate) fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php/helper_job.php")
}

/// `php helper_job.php --lock LOCK ARGS`.
pub(crate) fn php_job(lock: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("php");
    c.arg(script()).arg("--lock").arg(lock).args(args);
    c
}

/// A PHP job holding its lock, once it said "started".
pub(crate) struct PhpJob {
    proc: Proc,
    out: BufReader<ChildStdout>,
    id: i64,
}

impl PhpJob {
    pub(crate) fn start(cmd: &mut Command) -> PhpJob {
        let mut proc = Proc::spawn_piped(cmd);
        let mut out = BufReader::new(proc.child.stdout.take().expect("stdout"));
        let line = read_line(&mut out);
        let mut f = line.split_whitespace();
        assert_eq!(f.next(), Some("started"), "the job said {line:?}");
        let id = f.next().and_then(|v| v.parse().ok()).expect("id");
        let pid: u32 = f.next().and_then(|v| v.parse().ok()).expect("pid");
        assert_eq!(pid, proc.pid(), "php runs as the process we started");
        PhpJob { proc, out, id }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Waits for the job to end on its own and checks it succeeded.
    pub(crate) fn finish(mut self) {
        let line = read_line(&mut self.out);
        assert!(line.starts_with("done"), "the job said {line:?}");
        let status = self.proc.child.wait().expect("wait");
        self.proc.reap();
        assert!(status.success(), "{status:?}");
    }
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("job output");
    line.trim().to_string()
}

fn holder_line(lock: &Path) -> HolderLine {
    parse_line(&std::fs::read_to_string(lock).expect("lock file")).expect("a holder line")
}

/// A refused PHP job: exit 75 and the helper's message naming the holder line in the words
/// of `selfheal run`'s refusal (before: the line itself and a literal `(HOST:PID START)`).
#[track_caller]
fn php_refused(o: &Output, lock: &Path, holder: &HolderLine, wait: &str) {
    assert_exit(o, 75);
    let err = stderr(o);
    let how = if wait == "0" {
        "; one try (wait 0)\n".to_string()
    } else {
        "; gave up after waiting ".to_string()
    };
    assert!(
        err.contains(&format!(
            "not started: {} is held by {} since {} (",
            lock.display(),
            holder.named(),
            holder.since_text()
        )) && err.contains(" ago)")
            && err.contains(&how),
        "{err}"
    );
    assert!(!err.contains("HOST:PID START"), "{err}");
}

#[test]
fn the_helpers_lock_excludes_a_second_php_job_and_a_wrapped_run_alike() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let marker = sb.path("ran");
    let first = PhpJob::start(&mut php_job(&lock, &["--work", "600"]));
    let line = holder_line(&lock);
    assert_eq!(line.pid, first.pid());
    assert_eq!(line.host, hostname());
    assert_eq!(
        std::fs::metadata(&lock).expect("lock").mode() & 0o777,
        0o644
    );

    // A second PHP job: one try, then a bounded wait; both refused, 75.
    for wait in ["0", "0.3"] {
        let o = php_job(&lock, &["--wait", wait]).output().expect("php");
        php_refused(&o, &lock, &line, wait);
    }
    // A wrapped command: 75, the same holder named.
    let o = selfheal()
        .arg("run")
        .arg("--lock")
        .arg(&lock)
        .args(["--wait", "200ms", "--", "touch"])
        .arg(&marker)
        .output()
        .expect("run");
    assert_exit(&o, 75);
    assert!(
        stderr(&o).contains(&format!(
            "is held by {} since {} (",
            line.owner(),
            line.since_text()
        )),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists());
    drop(first);
}

#[test]
fn a_wrapped_runs_lock_excludes_the_helper() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let _wrapped = Proc::spawn(
        selfheal()
            .arg("run")
            .arg("--lock")
            .arg(&lock)
            .args(["--", "sleep", "600"]),
    );
    let mut line = None;
    wait_until("the wrapped command holds the lock", secs(30), || {
        line = std::fs::read_to_string(&lock)
            .ok()
            .and_then(|t| parse_line(&t));
        line.is_some()
    });
    let line = line.expect("line");
    for wait in ["0", "0.3"] {
        let o = php_job(&lock, &["--wait", wait]).output().expect("php");
        php_refused(&o, &lock, &line, wait);
    }
}

/// `check` names a PHP job's lock holder from the line the helper writes: the PHP
/// process itself, which also took the lock (the pid `/proc/locks` gives).
#[test]
fn check_names_the_php_job_holding_the_lock_from_its_line() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert(1, "running", 600);
    sb.heartbeat(1, secs(8 * 60));
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!("lock_file = \"{}\"\n", sb.lock_template())),
    );
    let lock = sb.lock_path(1);
    let gate = sb.path("gate");
    let job = PhpJob::start(&mut php_job(
        &lock,
        &["--work", "60", "--gate", gate.to_str().expect("utf-8")],
    ));
    let line = holder_line(&lock);
    assert_eq!(line.pid, job.pid());
    let o = check(&cfg, &["--format", "json", "--dry-run"]);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, 1);
    assert_eq!(
        (&r["verdict"], &r["lock_pid"]),
        (&"hung".into(), &job.pid().into()),
        "{r}"
    );
    assert_eq!(
        r["lock_holder"],
        serde_json::json!({"host": line.host, "pid": job.pid(), "since": line.since_text()}),
        "{r}"
    );
    let o = check(&cfg, &["--explain"]);
    assert!(
        stdout(&o).contains(&format!(
            "lock held:{} ({} since {})",
            job.pid(),
            line.named(),
            line.since_text()
        )),
        "{}",
        stdout(&o)
    );
    std::fs::write(&gate, "").expect("gate");
    job.finish();
}

#[test]
fn the_helper_waits_then_gets_the_lock_exactly_once_and_keeps_the_file() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let out = sb.path("out");
    let gate = sb.path("gate");
    let s = |p: &Path| p.to_str().expect("path").to_string();
    let first = PhpJob::start(&mut php_job(
        &lock,
        &["--work", "600", "--gate", &s(&gate), "--out", &s(&out)],
    ));
    let inode = std::fs::metadata(&lock).expect("lock").ino();
    let mut second = Proc::spawn(&mut php_job(&lock, &["--wait", "600", "--out", &s(&out)]));
    // It waits: it has the lock file open, and has not run.
    wait_until("the second job opens the lock file", secs(30), || {
        std::fs::read_dir(format!("/proc/{}/fd", second.pid())).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| m.ino() == inode))
        })
    });
    assert!(second.child.try_wait().expect("wait").is_none());
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        format!("{}\n", first.pid())
    );
    let first_pid = first.pid();
    std::fs::write(&gate, "").expect("gate");
    first.finish();
    let status = second.child.wait().expect("wait");
    second.reap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        format!("{first_pid}\n{}\n", second.pid()),
        "the waiter ran exactly once, after the first"
    );
    assert_eq!(
        std::fs::metadata(&lock).expect("the lock file stays").ino(),
        inode,
        "never deleted or recreated"
    );
    assert_eq!(holder_line(&lock).pid, second.pid());
}

#[test]
fn a_php_job_using_the_helper_is_never_touched_alive_and_reclaimed_when_killed() {
    let mut db = mysql_or_skip!();
    if !have_php() {
        return;
    }
    db.create_sync_log("DATETIME");
    let sb = Sandbox::new();
    let lock = sb.path("job.lock");
    let beat = sb.path("job.heartbeat");
    let cfg = sb.config(
        &db.url,
        &format!(
            "name = \"full-sync\"\ntable = \"sync_log\"\nstarted_column = \"start_time\"\n\
             heartbeat_file = \"{}\"\nlock_file = \"{}\"\nowner_column = \"worker\"\n\
             stale_after = \"5s\"\nmax_age = \"1h\"\nended_column = \"end_time\"\n\
             message_column = \"error_msg\"\n",
            beat.display(),
            lock.display()
        ),
    );
    let (dsn, user, pass) = pdo(&db);
    let s = |p: &Path| p.to_str().expect("path").to_string();
    let mut cmd = php_job(
        &lock,
        &[
            "--heartbeat",
            &s(&beat),
            "--every",
            "1",
            "--dsn",
            &dsn,
            "--user",
            &user,
            "--work",
            "600",
        ],
    );
    cmd.env("DB_PASSWORD", pass);
    let mut job = PhpJob::start(&mut cmd);
    let owner = format!("{}:{}", hostname(), job.pid());
    assert_eq!(
        holder_line(&lock).owner(),
        owner,
        "the lock names the owner"
    );

    // Alive, for longer than stale_after: beat() keeps the heartbeat fresh.
    let before = db.dump();
    let started = std::time::Instant::now();
    let mut runs = 0;
    while runs < 4 || started.elapsed() < secs(7) {
        let o = check(&cfg, &["--format", "json"]);
        assert_exit(&o, 0);
        let (rows, summary) = json_lines(&o);
        let r = row(&rows, job.id);
        assert_eq!(r["verdict"], "alive", "run {runs}: {r}");
        assert_eq!(r["owner"], "alive", "{r}");
        assert_eq!(r["owner_pid"], job.pid(), "{r}");
        assert_eq!(r["lock"], "held", "{r}");
        assert_eq!(r["lock_pid"], job.pid(), "{r}");
        assert_eq!(summary["changed"], 0);
        assert_eq!(db.dump(), before);
        runs += 1;
        std::thread::sleep(Duration::from_millis(500));
    }

    // Killed: the pid is gone and the lock free, beside the row's own heartbeat, still
    // fresh: the death waits for it (quietly: exit 0, nothing written).
    job.proc.kill9();
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, job.id);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["owner"], "dead", "{r}");
    assert_eq!(r["held"], "contradicted", "{r}");
    assert_eq!(db.dump(), before);
    // Once the heartbeat is stale, the next run reclaims it at once.
    std::fs::File::options()
        .append(true)
        .open(&beat)
        .expect("heartbeat")
        .set_modified(std::time::SystemTime::now() - secs(6))
        .expect("mtime");
    let o = check(&cfg, &["--format", "json"]);
    assert_exit(&o, 0);
    let (rows, _) = json_lines(&o);
    let r = row(&rows, job.id);
    assert_eq!(r["verdict"], "dead", "{r}");
    assert_eq!(r["owner"], "dead", "{r}");
    assert_eq!(r["lock"], "free", "{r}");
    assert_eq!(r["applied"], true);
    let (status, ended, msg) = db.row(job.id);
    assert_eq!((status.as_str(), ended), ("error", true));
    assert!(msg.starts_with("self-heal: dead: "), "{msg}");
    assert!(lock.exists(), "the lock file stays");

    // The next job takes the same lock and finishes clean.
    let mut cmd = php_job(
        &lock,
        &[
            "--heartbeat",
            &s(&beat),
            "--dsn",
            &dsn,
            "--user",
            &user,
            "--work",
            "1",
        ],
    );
    cmd.env("DB_PASSWORD", pdo(&db).2);
    let next = PhpJob::start(&mut cmd);
    let id = next.id;
    next.finish();
    assert_eq!(db.row(id), ("done".to_string(), true, String::new()));
    cron_check_is_silent(&cfg);
}

/// PDO's DSN, user and password for the test database.
fn pdo(db: &MysqlDb) -> (String, String, String) {
    let opts = mysql::Opts::from_url(&db.url).expect("url");
    let dsn = match opts.get_socket() {
        Some(sock) => format!("mysql:unix_socket={sock};dbname={}", db.name),
        None => format!(
            "mysql:host={};port={};dbname={}",
            opts.get_ip_or_hostname(),
            opts.get_tcp_port(),
            db.name
        ),
    };
    (
        dsn,
        opts.get_user().unwrap_or("root").to_string(),
        opts.get_pass().unwrap_or("").to_string(),
    )
}

#[test]
fn the_helper_loads_through_a_classmap_autoloader_in_either_order() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let php = Path::new(env!("CARGO_MANIFEST_DIR")).join("php/Selfheal");
    // As Composer's classmap loads a class: `include` of the mapped file on first use.
    let code = |first: &str| {
        format!(
            "$map = ['Selfheal\\\\Job' => '{dir}/Job.php', \
                     'Selfheal\\\\LockNotObtained' => '{dir}/LockNotObtained.php'];\n\
             spl_autoload_register(function ($c) use ($map) {{ \
                 if (isset($map[$c])) {{ include $map[$c]; }} }});\n\
             {first}\n\
             $job = Selfheal\\Job::start(['lock' => '{lock}']);\n\
             echo Selfheal\\Job::owner();",
            dir = php.display(),
            lock = sb.path("job.lock").display(),
        )
    };
    for first in [
        "new Selfheal\\LockNotObtained('/x', '', 0);",
        "class_exists('Selfheal\\Job');",
    ] {
        let o = Command::new("php")
            .arg("-r")
            .arg(code(first))
            .output()
            .expect("php");
        assert!(o.status.success(), "{first}: {o:?}");
        let owner = stdout(&o);
        let (host, pid) = owner.rsplit_once(':').expect("HOST:PID");
        assert_eq!(host, hostname());
        assert!(pid.parse::<u32>().is_ok(), "{owner}");
        assert_eq!(holder_line(&sb.path("job.lock")).owner(), owner);
    }
}

// ---------------------------------------------------------------------------------------
// As root, over a directory another user owns (docs/design.md#file-safety, docs/design.md#run-wrapper)

/// A sandbox others can enter, with `www`: a directory www-data (uid 33) owns. `None`
/// when not root or without php (skipped; CI fails).
pub(crate) fn www_data_dir() -> Option<(Sandbox, PathBuf)> {
    if !have_php() {
        return None;
    }
    crate::common::www_data_dir()
}

/// www-data, over and over: plants the link LINK -> TARGET and removes it, pausing a
/// random few microseconds after each step (so that the moments it appears and goes fall
/// anywhere in the job's checks).
pub(crate) fn planting(link: &Path, target: &Path) -> Proc {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=33",
        "--regid=33",
        "--clear-groups",
        "--",
        "/usr/bin/perl",
        "-e",
    ])
    .arg(
        "my ($l, $t) = @ARGV; while (1) { symlink($t, $l); \
             for (my $i = int(rand(3000)); $i > 0; $i--) {} unlink($l); \
             for (my $i = int(rand(3000)); $i > 0; $i--) {} }",
    )
    .arg(link)
    .arg(target);
    Proc::spawn(&mut c)
}

/// `php rounds.php OPTION PATH ROUNDS` as root: (started, refused). With `slow`, under
/// strace with every stat and open delayed by 2 ms: the gaps between the helper's checks
/// and its opens grow wide, and the planted link falls into them (the old helper wrote
/// through it in about a third of such rounds).
pub(crate) fn rounds(option: &str, path: &Path, n: u32, slow: bool) -> (u32, u32) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php/rounds.php");
    let mut c = if slow {
        let mut c = Command::new("strace");
        c.args([
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=newfstatat,openat",
        ])
        .args(["-e", "inject=newfstatat:delay_exit=2000"])
        .args(["-e", "inject=openat:delay_exit=2000", "php"]);
        c
    } else {
        Command::new("php")
    };
    let o = c
        .arg(script)
        .arg(option)
        .arg(path)
        .arg(n.to_string())
        .output()
        .expect("php");
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    let f: Vec<&str> = out.split_whitespace().collect();
    match f.as_slice() {
        ["started", s, "refused", r] => (s.parse().expect("n"), r.parse().expect("n")),
        _ => panic!("rounds.php said {out:?}"),
    }
}

/// www-data, over and over: swaps its directory DIR for a link to TARGET and back
/// (`DIR.real` meanwhile), pausing a random few microseconds after each swap.
pub(crate) fn swapping(dir: &Path, target: &Path) -> Proc {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=33",
        "--regid=33",
        "--clear-groups",
        "--",
        "/usr/bin/perl",
        "-e",
    ])
    .arg(
        "my ($d, $t) = @ARGV; while (1) { rename($d, \"$d.real\") or next; \
             symlink($t, $d); for (my $i = int(rand(3000)); $i > 0; $i--) {} \
             unlink($d); rename(\"$d.real\", $d); \
             for (my $i = int(rand(3000)); $i > 0; $i--) {} }",
    )
    .arg(dir)
    .arg(target);
    Proc::spawn(&mut c)
}

/// 'wait' and 'every' beyond 100 years (or not a number at all) are refused when the job
/// starts, as `selfheal run` refuses them.
#[test]
fn waits_and_intervals_beyond_100_years_are_refused() {
    if !have_php() {
        return;
    }
    let sb = Sandbox::new();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("php/Selfheal/Job.php");
    for (option, value) in [
        ("wait", "1e300"),
        ("wait", "INF"),
        ("every", "NAN"),
        ("every", "3155760001"),
    ] {
        let code = format!(
            "require '{}'; try {{ Selfheal\\Job::start(['lock' => '{}', '{option}' => {value}]); \
             echo 'started'; }} catch (InvalidArgumentException $e) {{ echo $e->getMessage(); }}",
            job.display(),
            sb.path("l").display()
        );
        let o = Command::new("php")
            .arg("-r")
            .arg(code)
            .output()
            .expect("php");
        let out = stdout(&o);
        assert!(
            out.starts_with(&format!("Selfheal\\Job: '{option}' must be at ")),
            "{option} {value}: {out}"
        );
    }
}

/// The helper promises PHP 7.0: no syntax or function of a later version (the checker is
/// the tokenizer of the php-cli at hand; it is shown to flag a sample of 7.1+ code).
#[test]
fn the_helper_keeps_to_php_7_0_syntax() {
    if !have_php() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checker = root.join("tests/php/syntax70.php");
    let o = Command::new("php")
        .arg(&checker)
        .arg(root.join("php/Selfheal/Job.php"))
        .arg(root.join("php/Selfheal/LockNotObtained.php"))
        .output()
        .expect("php");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let sb = Sandbox::new();
    let sample = sb.path("newer.php");
    std::fs::write(
        &sample,
        "<?php\nclass A {\n    private const X = 1;\n    public ?int $y;\n    \
         public function f(?int $a): void { $a ??= 1; }\n}\n[$a, $b] = [1, 2];\n",
    )
    .expect("sample");
    let o = Command::new("php")
        .arg(&checker)
        .arg(&sample)
        .output()
        .expect("php");
    assert_exit(&o, 1);
    let out = stdout(&o);
    for what in [
        "3: class constant visibility (7.1)",
        "4: typed property (7.4)",
        "5: nullable type (7.1)",
        "5: type void",
        "5: ??= (7.4)",
        "7: short list destructuring (7.1)",
    ] {
        assert!(out.contains(what), "{what}: {out}");
    }
}
