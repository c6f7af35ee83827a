//! Snapshots of everything a person reads: `check --explain`, the cron text of `check`
//! (changes, rows that need a person, run-level warnings), `--dry-run`, `--format json`,
//! `doctor`, `stats`, `demo`, `--help` and the errors a bad configuration gets, each on a
//! fixed fixture through the real binary. Every change of wording shows in review as a
//! change of a file in `tests/snapshots/`.
//!
//! Determinism: the binary runs with its host clock frozen at [`FROZEN_AT`] (libfaketime;
//! bundled SQLite's `now` follows it), and every row time and heartbeat mtime is set
//! relative to that instant, so ages are exact however loaded the machine is. What
//! legitimately varies from run to run — the sandbox's path, pids of real processes, the
//! host name, the user, the SQLite version — is replaced by a `[NAME]`, by exact value and
//! in context, never by pattern; ages, verdicts and reasons are never redacted. The
//! MariaDB `doctor` runs on the real clock (the server's is real): there the server's
//! version and time zone and a clock skew of at most a second are redacted too.
//!
//! A snapshot that is missing or differs fails the test (in CI, with `CI` set, nothing is
//! written; elsewhere insta writes `*.snap.new` beside it for review). Review and accept:
//! `cargo insta review`, or `INSTA_UPDATE=always cargo test --test tests snapshots::` and read the
//! diff before committing.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use crate::common::*;
use selfheal::holder_line::format_line;

// ---------------------------------------------------------------------------------------
// Running the binary, redacting, snapshotting

/// Values that differ from run to run, each replaced by a `[NAME]`. Replacements are
/// exact strings (a pid only where it stands as a pid), applied in order.
struct Redact(Vec<(String, String)>);

impl Redact {
    /// The sandbox's path, the SQLite version and this user (as `doctor` names it).
    fn new(sb: &Sandbox) -> Redact {
        let uid = nix::unistd::getuid();
        let me = match nix::unistd::User::from_uid(uid).ok().flatten() {
            Some(u) => format!("{} (uid {uid})", u.name),
            None => format!("uid {uid}"),
        };
        let host = hostname();
        Redact(vec![
            (sb.dir.path().display().to_string(), "[SANDBOX]".into()),
            // This host, where output names it: the host that judged, the host a row
            // belongs to.
            (
                format!("judged on host {host}"),
                "judged on host [HOST]".into(),
            ),
            (
                format!("\"host\": \"{host}\""),
                "\"host\": \"[HOST]\"".into(),
            ),
            (
                format!("\"owner_host\": \"{host}"),
                "\"owner_host\": \"[HOST]".into(),
            ),
            (
                format!("{host}.dc2.example.com"),
                "[HOST].dc2.example.com".into(),
            ),
            (format!("host = \"{host}\""), "host = \"[HOST]\"".into()),
            // This host, as a lock file's holder line names it.
            (format!("names {host}:"), "names [HOST]:".into()),
            (format!("({host}:"), "([HOST]:".into()),
            (format!("holder {host}:"), "holder [HOST]:".into()),
            // This host, as a row's history and doctor name it.
            (format!("selfheal on {host}"), "selfheal on [HOST]".into()),
            (
                format!("this host's ({host})"),
                "this host's ([HOST])".into(),
            ),
            (
                format!("sqlite {}", rusqlite::version()),
                "sqlite [VERSION]".into(),
            ),
            (me, "[USER]".into()),
        ])
    }

    fn with(mut self, from: impl Into<String>, to: impl Into<String>) -> Redact {
        self.0.push((from.into(), to.into()));
        self
    }

    /// A pid, where the output shows one: `held:PID`, `alive:PID`, `dead:PID`,
    /// `reused:PID`, `pid PID` in the row message's words, `[HOST]:PID ` of a lock file's
    /// holder, and the JSON `lock_pid`/`owner_pid` fields and `lock_holder`'s `pid`.
    fn pid(mut self, pid: u32, name: &str) -> Redact {
        for state in ["held", "alive", "dead", "reused"] {
            self.0
                .push((format!("{state}:{pid}"), format!("{state}:[{name}]")));
        }
        for after in [' ', ')', ',', ';'] {
            self.0
                .push((format!("pid {pid}{after}"), format!("pid [{name}]{after}")));
        }
        self.0
            .push((format!("[HOST]:{pid} "), format!("[HOST]:[{name}] ")));
        for field in ["lock_pid", "owner_pid", "pid"] {
            self.0.push((
                format!("\"{field}\": {pid}"),
                format!("\"{field}\": [{name}]"),
            ));
        }
        self
    }

    fn apply(&self, text: &str) -> String {
        let text = self
            .0
            .iter()
            .fold(text.to_string(), |t, (from, to)| t.replace(from, to));
        boot_redacted(&text)
    }
}

/// How long after a row pid 1 started depends on when this machine booted: `started
/// 2532d10h43m5s after the row` reads `started [BOOT] after the row`.
fn boot_redacted(text: &str) -> String {
    const TAIL: &str = " after the row";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(TAIL) {
        let head = &rest[..i];
        match head.rfind("started ") {
            Some(j)
                if head[j + 8..]
                    .chars()
                    .all(|c| c.is_ascii_digit() || "dhms".contains(c)) =>
            {
                out.push_str(&head[..j + 8]);
                out.push_str("[BOOT]");
            }
            _ => out.push_str(head),
        }
        out.push_str(TAIL);
        rest = &rest[i + TAIL.len()..];
    }
    out.push_str(rest);
    out
}

/// The binary with its clock frozen (`None`: no faketime, test skipped outside CI).
fn frozen_selfheal() -> Option<Command> {
    let mut c = selfheal();
    frozen_clock(&mut c).then_some(c)
}

/// Runs `selfheal ARGS --config CFG` under the frozen clock; the command line shown in
/// the snapshot is `selfheal ARGS` (the config path is the same everywhere).
fn run(cfg: &Path, args: &[&str]) -> Option<Output> {
    let mut c = frozen_selfheal()?;
    c.args(args).arg("--config").arg(cfg);
    Some(c.output().expect("run selfheal"))
}

/// One run as a person sees it: the command, the exit status, stdout and stderr.
fn transcript(args: &[&str], o: &Output, r: &Redact) -> String {
    let section = |name: &str, bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        if text.is_empty() {
            format!("--- {name}: (nothing)\n")
        } else {
            format!("--- {name}:\n{}", r.apply(&text))
        }
    };
    format!(
        "$ selfheal {}\nexit status {}\n{}{}",
        args.join(" "),
        o.status
            .code()
            .map_or_else(|| format!("{:?}", o.status), |c| c.to_string()),
        section("stdout", &o.stdout),
        section("stderr", &o.stderr),
    )
}

/// `--format json` output with each object pretty-printed (one field a line, keys sorted
/// as serde_json writes them), so a changed field is a one-line diff.
fn json_transcript(args: &[&str], o: &Output, r: &Redact) -> String {
    let mut out = String::new();
    for line in stdout(o).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        out.push_str(&serde_json::to_string_pretty(&v).expect("json"));
        out.push('\n');
    }
    let pretty = Output {
        status: o.status,
        stdout: out.into_bytes(),
        stderr: o.stderr.clone(),
    };
    transcript(args, &pretty, r)
}

/// A missing or different snapshot must fail in CI, never be written or passed: insta
/// does that when `CI` is set, unless told otherwise through its environment or a
/// configuration file.
fn ci_cannot_accept_snapshots() {
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
    if !ci {
        return;
    }
    let update = std::env::var("INSTA_UPDATE").unwrap_or_default();
    assert!(
        matches!(update.as_str(), "" | "no" | "auto" | "new"),
        "CI is set: INSTA_UPDATE={update} would accept unreviewed snapshots"
    );
    let force = std::env::var("INSTA_FORCE_PASS").unwrap_or_default();
    assert!(
        matches!(force.as_str(), "" | "0"),
        "CI is set: INSTA_FORCE_PASS={force} would pass differing snapshots"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["insta.yaml", ".config/insta.yaml"] {
        assert!(
            !root.join(f).exists(),
            "CI is set: {f} may change how insta treats snapshots"
        );
    }
}

/// Compares `text` with `tests/snapshots/NAME.snap`; `about` (the fixture, in a sentence
/// or two) goes into the snapshot's header for the reviewer.
fn snapshot(name: &str, about: &str, text: &str) {
    ci_cannot_accept_snapshots();
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s.set_description(about);
    s.bind(|| insta::assert_snapshot!(name, text));
}

/// `(id, status, end_time, error_msg)` of every row, one line each: what a person sees in
/// the table after a run.
fn table(db: &SqliteDb) -> String {
    let c = db.conn();
    let mut s = c
        .prepare("SELECT id, status, end_time, error_msg FROM sync_log ORDER BY id")
        .expect("prepare");
    let rows: Vec<String> = s
        .query_map([], |r| {
            Ok(format!(
                "{} {} end={} msg={:?}",
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?.as_deref().unwrap_or("NULL"),
                r.get::<_, String>(3)?
            ))
        })
        .expect("query")
        .map(|r| r.expect("row"))
        .collect();
    format!("--- sync_log:\n{}\n", rows.join("\n"))
}

// ---------------------------------------------------------------------------------------
// The fixture with a row in every verdict

/// A SQLite `sync_log` with one running row per verdict and basis, real heartbeat files,
/// lock files (one held by a real `flock(1)`), and owners (a pid that exited, pid 1 — alive
/// and started before every row but the 2020 one —, a value that is no pid, other hosts).
/// A second watch, of another job kind in the same table, belongs to another host.
struct EveryVerdict {
    sb: Sandbox,
    db: SqliteDb,
    cfg: PathBuf,
    /// Holds row 8's lock.
    holder: Proc,
    /// Holds row 20's lock.
    holder20: Proc,
    /// Holds row 22's lock.
    holder22: Proc,
    /// Row 6's worker, which has exited.
    dead_pid: u32,
}

const EVERY_VERDICT: &str = "sync_log under watch full-sync (stale_after 5m, max_age 4h, \
     heartbeat files, lock files, owner column), clock frozen at 2035-03-14 15:09:26 UTC: \
     1 alive (2h10m, beat 20s ago), 2 starting (30s, no beat), 3 dead on a stale heartbeat \
     (47m), 4 dead with no heartbeat (1h), 5 dead: lock file nobody holds (beat 6m40s ago), 6 \
     dead but contradicted: owner pid exited while the row's own heartbeat beat 10s ago (held \
     quietly), 7 dead: owner pid 1 started after the row (2020, no beat: an inference), 8 hung: stale \
     beat, lock held \
     by flock(1), the file naming THIS-HOST:4243 since the row started (another pid, as \
     selfheal run's line names its command), 9 hung: stale beat, owner pid 1 alive, 10 overtime (5h, beating), \
     11 unknown: start 2h in the future, 12 unknown: owner 'web-3', 13 unknown: lock free \
     but owner alive, 14 unknown: heartbeat file is a symlink loop, 15 remote: owner on \
     web2.invalid, no heartbeat here (50m), 16 remote past max_age (5h, owner on web2.invalid), \
     17 remote: owner THIS-HOST.dc2.example.com with a pid that exited here (50m), 18 \
     starting: 8s old, its heartbeat file 2h old (an earlier row 18's), 19 unknown: start 0, \
     20 overtime (5h) while its lock is held by flock(1) (never marked dead), the file \
     naming flock(1)'s own pid (as the PHP helper's line does), 21 dead: owner pid exited \
     (beat 10m ago), 22 alive: owner pid exited but the row's own lock is held by flock(1) \
     (the owner a launcher that exited), beat 20s ago; watch nightly \
     (match job = nightly) runs on another host. Inferred verdicts (3, 4, 7, 8, 9) need \
     confirm = 2 runs in a row.";

fn every_verdict() -> EveryVerdict {
    // (id, started, heartbeat, lock file: None / Some(held), owner)
    type Row = (i64, SystemTime, Option<u64>, Option<bool>, Option<String>);
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let host = hostname();
    let dead_pid = exited_pid();
    let rows: Vec<Row> = vec![
        (1, ago(2 * HOUR + 10 * MIN), Some(20), None, None),
        (2, ago(30), None, None, None),
        (3, ago(50 * MIN), Some(47 * MIN), None, None),
        (4, ago(HOUR), None, None, None),
        (5, ago(20 * MIN), Some(400), Some(false), None),
        (
            6,
            ago(15 * MIN),
            Some(10),
            None,
            Some(format!("{host}:{dead_pid}")),
        ),
        (7, utc("2020-01-01 00:00:00"), None, None, Some("1".into())),
        (8, ago(40 * MIN), Some(25 * MIN), Some(true), None),
        (
            9,
            ago(50 * MIN),
            Some(30 * MIN),
            None,
            Some(format!("{host}:1")),
        ),
        (10, ago(5 * HOUR), Some(10), None, None),
        (
            11,
            frozen_now() + Duration::from_secs(2 * HOUR),
            Some(10),
            None,
            None,
        ),
        (12, ago(20 * MIN), Some(10), None, Some("web-3".into())),
        (13, ago(30 * MIN), Some(20), Some(false), Some("1".into())),
        (14, ago(30 * MIN), None, None, None),
        (
            15,
            ago(50 * MIN),
            None,
            None,
            Some("web2.invalid:4242".into()),
        ),
        (
            16,
            ago(5 * HOUR),
            None,
            None,
            Some("web2.invalid:4242".into()),
        ),
        (
            17,
            ago(50 * MIN),
            None,
            None,
            Some(format!("{host}.dc2.example.com:{dead_pid}")),
        ),
        (18, ago(8), Some(2 * HOUR), None, None),
        (19, ago(HOUR), Some(10), None, None),
        (20, ago(5 * HOUR), Some(5), Some(true), None),
        (
            21,
            ago(15 * MIN),
            Some(10 * MIN),
            None,
            Some(format!("{host}:{dead_pid}")),
        ),
        (
            22,
            ago(15 * MIN),
            Some(20),
            Some(true),
            Some(format!("{host}:{dead_pid}")),
        ),
    ];
    for (id, started, hb, lock, owner) in &rows {
        db.insert_at(*id, "running", *started);
        if let Some(a) = hb {
            sb.heartbeat_at(*id, ago(*a));
        }
        if lock.is_some() {
            std::fs::write(sb.lock_path(*id), "").expect("lock file");
        }
        if let Some(o) = owner {
            db.conn()
                .execute(
                    "UPDATE sync_log SET worker = ?1 WHERE id = ?2",
                    rusqlite::params![o, id],
                )
                .expect("owner");
        }
    }
    // Two job kinds in one table: this watch's rows, and the nightly job's.
    db.exec("ALTER TABLE sync_log ADD COLUMN job TEXT NOT NULL DEFAULT 'full-sync'");
    // A heartbeat that cannot be read: stat(2) fails with ELOOP, not ENOENT.
    std::os::unix::fs::symlink("hb-14", sb.path("hb-14")).expect("symlink");
    // A start of 0, the usual "unset".
    db.exec("UPDATE sync_log SET start_time = 0 WHERE id = 19");
    let holder = flock1_holder(&sb.lock_path(8), false);
    let holder20 = flock1_holder(&sb.lock_path(20), false);
    let holder22 = flock1_holder(&sb.lock_path(22), false);
    // The holder lines `selfheal run` and the PHP helper write, written in place.
    for (id, pid, since) in [
        (8, 4243, ago(40 * MIN)),
        (20, holder20.pid(), ago(5 * HOUR)),
    ] {
        std::fs::write(sb.lock_path(id), format_line(&host, pid, since)).expect("holder line");
    }
    let watch = format!(
        "{}\n[[watch]]\nname = \"nightly\"\nhost = \"batch-9.invalid\"\ntable = \"sync_log\"\n\
         match = {{ job = \"nightly\" }}\n\
         started_column = \"start_time\"\nheartbeat_file = \"/srv/nightly/{{id}}.beat\"\n\
         stale_after = \"10m\"\nmax_age = \"12h\"\n",
        sb.watch(&format!(
            "match = {{ job = \"full-sync\" }}\nlock_file = \"{}\"\nowner_column = \"worker\"\n",
            sb.lock_template()
        ))
    );
    let cfg = sb.config(&db.url(), &watch);
    EveryVerdict {
        sb,
        db,
        cfg,
        holder,
        holder20,
        holder22,
        dead_pid,
    }
}

/// An absolute UTC time.
fn utc(t: &str) -> SystemTime {
    let s = chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S")
        .expect("time")
        .and_utc()
        .timestamp();
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(s).expect("after 1970"))
}

impl EveryVerdict {
    fn redact(&self) -> Redact {
        Redact::new(&self.sb)
            .pid(self.holder.pid(), "FLOCK_PID")
            .pid(self.holder20.pid(), "FLOCK20_PID")
            .pid(self.holder22.pid(), "FLOCK22_PID")
            .pid(self.dead_pid, "EXITED_PID")
            .with(format!("this is {}", hostname()), "this is [HOST]")
    }
}

#[test]
fn explain_every_verdict() {
    let f = every_verdict();
    let args = ["check", "--explain"];
    let Some(o) = run(&f.cfg, &args) else { return };
    snapshot(
        "explain_every_verdict",
        EVERY_VERDICT,
        &transcript(&args, &o, &f.redact()),
    );
}

#[test]
fn cron_every_verdict() {
    let f = every_verdict();
    let args = ["check"];
    let Some(o) = run(&f.cfg, &args) else { return };
    let r = f.redact();
    let mut text = transcript(&args, &o, &r) + &r.apply(&table(&f.db));
    // Cron's next run, a period later: the inferred verdicts are confirmed now.
    next_cron_run(&f.sb);
    let Some(o) = run(&f.cfg, &args) else { return };
    text += &(transcript(&args, &o, &r) + &r.apply(&table(&f.db)));
    snapshot(
        "cron_every_verdict",
        &format!(
            "The cron form (a real run), twice, as cron runs it, over: {EVERY_VERDICT} The \
             table after each run."
        ),
        &text,
    );
}

#[test]
fn dry_run_every_verdict() {
    let f = every_verdict();
    let args = ["check", "--dry-run"];
    let Some(o) = run(&f.cfg, &args) else { return };
    let r = f.redact();
    let text = transcript(&args, &o, &r) + &r.apply(&table(&f.db));
    snapshot(
        "dry_run_every_verdict",
        &format!("--dry-run over: {EVERY_VERDICT} Then the table, unchanged."),
        &text,
    );
}

#[test]
fn json_every_verdict() {
    let f = every_verdict();
    let args = ["check", "--format", "json"];
    let Some(o) = run(&f.cfg, &args) else { return };
    snapshot(
        "json_every_verdict",
        &format!(
            "--format json of a real run (each object pretty-printed here) over: {EVERY_VERDICT}"
        ),
        &json_transcript(&args, &o, &f.redact()),
    );
}

#[test]
fn explain_heartbeat_dir_unreadable() {
    // As nobody, over a heartbeat directory of root's that nobody cannot enter.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert_at(1, "running", ago(20 * MIN));
    let (_private, cfg) = sb.private_heartbeat_config(&db, 0o755);
    let Some(mut c) = as_nobody_frozen() else {
        return;
    };
    let o = c
        .args(["check", "--explain", "--config"])
        .arg(&cfg)
        .output()
        .expect("run selfheal");
    snapshot(
        "explain_heartbeat_dir_unreadable",
        "check --explain run as nobody: one row running 20m whose heartbeat file is in a \
         directory of root's (mode 700).",
        &transcript(&["check", "--explain"], &o, &Redact::new(&sb)),
    );
}

// ---------------------------------------------------------------------------------------
// A legacy existence lock, released after its row is marked

/// `release_lock = "if_free"`: row 1 dead (stale heartbeat), its lock file naming a pid
/// that exited; row 2 dead (no heartbeat), its lock file naming pid 1, alive; row 3 dead
/// (stale heartbeat) with no lock file; row 4 alive, its lock file naming pid 1; rows 5
/// and 6 alive.
fn legacy_locks() -> (Sandbox, SqliteDb, PathBuf, Redact) {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let exited = exited_pid();
    db.insert_at(1, "running", ago(50 * MIN));
    sb.heartbeat_at(1, ago(47 * MIN));
    db.insert_at(2, "running", ago(HOUR));
    db.insert_at(3, "running", ago(40 * MIN));
    sb.heartbeat_at(3, ago(30 * MIN));
    // Alive rows enough that three heartbeat-only deaths do not trip the breaker.
    for (id, age) in [(4, 2 * HOUR), (5, 30 * MIN), (6, 30 * MIN)] {
        db.insert_at(id, "running", ago(age));
        sb.heartbeat_at(id, ago(20));
    }
    for (id, pid) in [(1, exited.to_string()), (2, "1".into()), (4, "1".into())] {
        let p = sb.lock_path(id);
        std::fs::write(&p, format!("{pid}\n")).expect("lock file");
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(ago(if id == 4 { 2 * HOUR } else { HOUR })))
            .expect("lock mtime");
    }
    let cfg = sb.config(
        &db.url(),
        &sb.watch(&format!(
            "lock_file = \"{}\"\nrelease_lock = \"if_free\"\nconfirm = 1\n",
            sb.lock_template()
        )),
    );
    let r = Redact::new(&sb).with(
        format!("pid {exited} in it is gone"),
        "pid [EXITED_PID] in it is gone",
    );
    (sb, db, cfg, r)
}

const LEGACY_LOCKS: &str = "release_lock = \"if_free\", confirm = 1: row 1 dead (heartbeat 47m old), its \
     lock file naming a pid that exited; row 2 dead (no heartbeat), its lock file naming pid 1 \
     (alive); row 3 dead (heartbeat 30m old), no lock file; row 4 alive, its lock file naming \
     pid 1; rows 5 and 6 alive.";

#[test]
fn explain_legacy_lock_release() {
    let (_sb, _db, cfg, r) = legacy_locks();
    let args = ["check", "--explain"];
    let Some(o) = run(&cfg, &args) else { return };
    snapshot(
        "explain_legacy_lock_release",
        LEGACY_LOCKS,
        &transcript(&args, &o, &r),
    );
}

#[test]
fn cron_legacy_lock_release() {
    let (sb, db, cfg, r) = legacy_locks();
    let args = ["check"];
    let Some(o) = run(&cfg, &args) else { return };
    let mut locks: Vec<String> = std::fs::read_dir(sb.dir.path())
        .expect("sandbox")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("lock-"))
        .collect();
    locks.sort();
    snapshot(
        "cron_legacy_lock_release",
        &format!("The cron form (a real run): {LEGACY_LOCKS} Then the table and the lock files."),
        &(transcript(&args, &o, &r)
            + &r.apply(&table(&db))
            + &format!("--- lock files:\n{}\n", locks.join(" "))),
    );
}

// ---------------------------------------------------------------------------------------
// Run-level warnings of the cron form

/// The cron form over the watch `watch` gives, after `setup`.
fn cron_shot(
    name: &str,
    about: &str,
    watch: impl FnOnce(&Sandbox) -> String,
    setup: impl FnOnce(&Sandbox, &SqliteDb),
) {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    setup(&sb, &db);
    let cfg = sb.config(&db.url(), &watch(&sb));
    let args = ["check"];
    let Some(o) = run(&cfg, &args) else { return };
    let r = Redact::new(&sb);
    let text = transcript(&args, &o, &r) + &r.apply(&table(&db));
    snapshot(name, about, &text);
}

#[test]
fn cron_breaker_tripped() {
    cron_shot(
        "cron_breaker_tripped",
        "Four rows 3h into a 4h cap, three of them with heartbeat files 2h old, one beating, \
         confirm = 1: three deaths on heartbeat alone out of four rows trip the breaker; \
         nothing is marked.",
        |sb| sb.watch("confirm = 1\n"),
        |sb, db| {
            for id in 1..=4 {
                db.insert_at(id, "running", ago(3 * HOUR));
                sb.heartbeat_at(id, ago(if id <= 3 { 2 * HOUR } else { 20 }));
            }
        },
    );
}

#[test]
fn cron_shared_heartbeat_file() {
    cron_shot(
        "cron_shared_heartbeat_file",
        "heartbeat_file without {id}: two running rows (10m and 20m old) share one file that \
         beat 30s ago; both alive, and a warning.",
        |sb| {
            sb.watch("").replace(
                &sb.heartbeat_template(),
                &sb.path("progress.json").display().to_string(),
            )
        },
        |sb, db| {
            db.insert_at(1, "running", ago(10 * MIN));
            db.insert_at(2, "running", ago(20 * MIN));
            std::fs::File::create(sb.path("progress.json"))
                .and_then(|f| f.set_modified(ago(30)))
                .expect("heartbeat file");
        },
    );
}

#[test]
fn cron_max_age_below_recent_runs() {
    cron_shot(
        "cron_max_age_below_recent_runs",
        "max_age 2h while a recent run that ended well (id 1) took 3h10m, another 1h; one \
         row running 30m, beating.",
        |sb| sb.watch("").replace("max_age = \"4h\"", "max_age = \"2h\""),
        |sb, db| {
            finished(db, 1, "done", ago(26 * HOUR), 3 * HOUR + 10 * MIN);
            finished(db, 2, "done", ago(25 * HOUR), HOUR);
            db.insert_at(3, "running", ago(30 * MIN));
            sb.heartbeat_at(3, ago(10));
        },
    );
}

#[test]
fn json_breaker_and_max_age_warnings() {
    // Four rows 90m into a 2h cap, three of them with heartbeats 1h old (the breaker),
    // and a run that ended well after 3h10m (max_age too low).
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for id in 1..=4 {
        db.insert_at(id, "running", ago(90 * MIN));
        sb.heartbeat_at(id, ago(if id <= 3 { HOUR } else { 20 }));
    }
    finished(&db, 5, "done", ago(26 * HOUR), 3 * HOUR + 10 * MIN);
    let cfg = sb.config(
        &db.url(),
        &sb.watch("confirm = 1\n")
            .replace("max_age = \"4h\"", "max_age = \"2h\""),
    );
    let args = ["check", "--format", "json"];
    let Some(o) = run(&cfg, &args) else { return };
    snapshot(
        "json_breaker_and_max_age_warnings",
        "--format json of a real run (each object pretty-printed here), confirm = 1: four \
         rows 90m into a 2h cap, three with heartbeats 1h old (the breaker trips), one \
         beating; a run that ended well after 3h10m (id 5) makes max_age too low.",
        &json_transcript(&args, &o, &Redact::new(&sb)),
    );
}

/// A finished row: started at `start`, ended `runtime` seconds later.
fn finished(db: &SqliteDb, id: i64, status: &str, start: SystemTime, runtime: u64) {
    db.insert_at(id, status, start);
    db.conn()
        .execute(
            "UPDATE sync_log SET end_time = ?1 WHERE id = ?2",
            rusqlite::params![sql_datetime(start + Duration::from_secs(runtime)), id],
        )
        .expect("end");
}

// ---------------------------------------------------------------------------------------
// doctor

/// A `doctor` fixture: the schema, the watch (from the standard one), and rows and files.
struct DoctorCase {
    schema: String,
    watch: fn(&Sandbox) -> String,
    setup: fn(&Sandbox, &SqliteDb),
}

/// The standard watch with the job's lock files and an owner column.
fn full_watch(sb: &Sandbox) -> String {
    sb.watch(&format!(
        "lock_file = \"{}\"\nowner_column = \"worker\"\n",
        sb.lock_template()
    ))
}

/// Two runs that ended well (1h and 2h) and one row running 20 minutes, beating.
fn healthy_rows(sb: &Sandbox, db: &SqliteDb) {
    finished(db, 1, "done", ago(30 * HOUR), HOUR);
    finished(db, 2, "done", ago(26 * HOUR), 2 * HOUR);
    db.insert_at(3, "running", ago(20 * MIN));
    sb.heartbeat_at(3, ago(10));
}

impl DoctorCase {
    fn new(watch: fn(&Sandbox) -> String, setup: fn(&Sandbox, &SqliteDb)) -> DoctorCase {
        DoctorCase {
            schema: SQLITE_SCHEMA.to_string(),
            watch,
            setup,
        }
    }

    fn schema(mut self, from: &str, to: &str) -> DoctorCase {
        assert!(self.schema.contains(from), "{from} in the schema");
        self.schema = self.schema.replace(from, to);
        self
    }

    /// The sandbox, the database and the configuration (with a metrics file).
    fn build(&self) -> (Sandbox, SqliteDb, PathBuf) {
        let sb = Sandbox::new();
        let db = SqliteDb::with_schema(&sb, &self.schema);
        (self.setup)(&sb, &db);
        std::fs::create_dir(sb.path("textfile")).expect("textfile dir");
        let cfg = sb.config_with(
            &format!("url = \"{}\"", db.url()),
            &format!(
                "metrics_file = \"{}\"",
                sb.path("textfile/selfheal.prom").display()
            ),
            &(self.watch)(&sb),
        );
        (sb, db, cfg)
    }

    fn snapshot(&self, name: &str, about: &str) {
        let (sb, _db, cfg) = self.build();
        let args = ["doctor"];
        let Some(o) = run(&cfg, &args) else { return };
        snapshot(name, about, &transcript(&args, &o, &Redact::new(&sb)));
    }
}

#[test]
fn doctor_sqlite_healthy() {
    DoctorCase::new(full_watch, healthy_rows).snapshot(
        "doctor_sqlite_healthy",
        "A healthy SQLite setup: the status index, a 255-character message column, heartbeat \
         and lock directories, two runs that ended well (1h, 2h) under a 4h cap, one row \
         running and beating, a metrics directory.",
    );
}

#[test]
fn doctor_sqlite_no_status_index() {
    DoctorCase::new(full_watch, healthy_rows)
        .schema("CREATE INDEX sync_log_status ON sync_log (status);", "")
        .snapshot(
            "doctor_sqlite_no_status_index",
            "The healthy setup without the index on status.",
        );
}

#[test]
fn doctor_sqlite_column_typo() {
    DoctorCase::new(
        |sb| full_watch(sb).replace("\"start_time\"", "\"start_tme\""),
        healthy_rows,
    )
    .snapshot(
        "doctor_sqlite_column_typo",
        "The healthy setup with started_column = \"start_tme\" (a typo).",
    );
}

#[test]
fn doctor_sqlite_message_column_too_short() {
    DoctorCase::new(full_watch, healthy_rows)
        .schema("error_msg VARCHAR(255)", "error_msg VARCHAR(60)")
        .snapshot(
            "doctor_sqlite_message_column_too_short",
            "The healthy setup with error_msg VARCHAR(60).",
        );
}

#[test]
fn doctor_sqlite_max_age_below_runs() {
    DoctorCase::new(
        |sb| full_watch(sb).replace("max_age = \"4h\"", "max_age = \"2h\""),
        |sb, db| {
            healthy_rows(sb, db);
            finished(db, 4, "done", ago(10 * HOUR), 3 * HOUR + 10 * MIN);
        },
    )
    .snapshot(
        "doctor_sqlite_max_age_below_runs",
        "The healthy setup with max_age 2h and a run that ended well after 3h10m (id 4).",
    );
}

#[test]
fn doctor_sqlite_times_in_the_future() {
    DoctorCase::new(full_watch, |sb, db| {
        healthy_rows(sb, db);
        db.insert_at(5, "running", frozen_now() + Duration::from_secs(2 * HOUR));
        sb.heartbeat_at(5, ago(10));
    })
    .snapshot(
        "doctor_sqlite_times_in_the_future",
        "The healthy setup plus a running row whose start_time is 2h ahead of the database \
         clock (naive times written in a zone 2h off).",
    );
}

#[test]
fn doctor_sqlite_heartbeat_dir_unreadable() {
    // As nobody, over a heartbeat directory of root's that nobody cannot enter (the
    // heartbeats of a job run by another user), in a sandbox nobody can read but not write.
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    healthy_rows(&sb, &db);
    let (_private, cfg) = sb.private_heartbeat_config(&db, 0o755);
    let Some(mut c) = as_nobody_frozen() else {
        return;
    };
    let o = c
        .args(["doctor", "--config"])
        .arg(&cfg)
        .output()
        .expect("run selfheal");
    snapshot(
        "doctor_sqlite_heartbeat_dir_unreadable",
        "Run as nobody: the heartbeat files are in a directory of root's (mode 700), the \
         sandbox is root's (mode 755); one row running.",
        &transcript(&["doctor"], &o, &Redact::new(&sb)),
    );
}

// ---------------------------------------------------------------------------------------
// stats

const STATS: &str = "Runs that ended well: 20m, 35m, 50m, 1h10m, 1h25m ('done') and 5m ('failed', \
     counted by default); row 6 marked dead by two real checks on a 47m-old heartbeat, then \
     finished 'done' after 1h10m (a false positive, from the journal); row 7 marked dead \
     (no heartbeat) and stayed so; row 8 'done' after 40m carrying a selfheal message no \
     journal knows (a false positive, from the message).";

/// The stats fixture: a real `check` marks rows 6 and 7, then row 6's worker finishes.
fn stats_fixture() -> Option<(Sandbox, PathBuf)> {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    for (id, runtime) in [
        (1, 20 * MIN),
        (2, 35 * MIN),
        (3, 50 * MIN),
        (4, HOUR + 10 * MIN),
        (5, HOUR + 25 * MIN),
    ] {
        finished(
            &db,
            id,
            "done",
            ago(u64::try_from(id).expect("an id above 0") * 24 * HOUR),
            runtime,
        );
    }
    finished(&db, 9, "failed", ago(8 * HOUR), 5 * MIN);
    finished(&db, 8, "done", ago(7 * HOUR), 40 * MIN);
    db.exec(
        "UPDATE sync_log SET error_msg = 'self-heal: dead: heartbeat_age=400s stale_after=300s \
         total_age=900s max_age=14400s lock=none' WHERE id = 8",
    );
    db.insert_at(6, "running", ago(50 * MIN));
    sb.heartbeat_at(6, ago(47 * MIN));
    db.insert_at(7, "running", ago(HOUR));
    let cfg = sb.config(&db.url(), &sb.watch(""));
    // Two cron runs: the first finds both silent, the second confirms it.
    for _ in 0..2 {
        next_cron_run(&sb);
        let o = run(&cfg, &["check"])?;
        assert_exit(&o, 0);
    }
    assert_eq!(
        (db.status(6), db.status(7)),
        ("error".into(), "error".into())
    );
    // The worker of row 6 was alive after all: it finishes and writes its own status.
    db.conn()
        .execute(
            "UPDATE sync_log SET status = 'done', end_time = ?1 WHERE id = 6",
            [sql_datetime(frozen_now() + Duration::from_secs(20 * MIN))],
        )
        .expect("finish row 6");
    Some((sb, cfg))
}

#[test]
fn stats_false_positives() {
    let Some((sb, cfg)) = stats_fixture() else {
        return;
    };
    let args = ["stats"];
    let Some(o) = run(&cfg, &args) else { return };
    snapshot(
        "stats_false_positives",
        STATS,
        &transcript(&args, &o, &Redact::new(&sb)),
    );
}

#[test]
fn stats_false_positives_json() {
    let Some((sb, cfg)) = stats_fixture() else {
        return;
    };
    let args = ["stats", "--format", "json"];
    let Some(o) = run(&cfg, &args) else { return };
    snapshot(
        "stats_false_positives_json",
        &format!("stats --format json (each object pretty-printed here): {STATS}"),
        &json_transcript(&args, &o, &Redact::new(&sb)),
    );
}

// ---------------------------------------------------------------------------------------
// demo

#[test]
fn demo() {
    // Built in the sandbox (--keep), so that its path is known; the demo process itself
    // holds the live locks, so its pid is the holder's.
    let sb = Sandbox::new();
    let Some(mut c) = frozen_selfheal() else {
        return;
    };
    let child = c
        .args(["demo", "--keep"])
        .arg(sb.path("demo"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run selfheal demo");
    let pid = child.id();
    let o = child.wait_with_output().expect("selfheal demo");
    // The wrapped job's processes, from its execution record in the kept sandbox.
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sb.path("demo/run/cron-8.json")).expect("the wrapped job's record"),
    )
    .expect("JSON");
    let wrapper =
        u32::try_from(record["wrapper_pid"].as_u64().expect("wrapper_pid")).expect("a pid");
    let job = u32::try_from(record["pid"].as_u64().expect("pid")).expect("a pid");
    snapshot(
        "demo",
        "selfheal demo --keep DIR under the frozen clock.",
        &transcript(
            &["demo", "--keep", "[SANDBOX]/demo"],
            &o,
            &Redact::new(&sb)
                .pid(pid, "DEMO_PID")
                .pid(wrapper, "WRAPPER_PID")
                .pid(job, "JOB_PID")
                .with(format!("pid {wrapper};"), "pid [WRAPPER_PID];")
                .with(format!("{}:{job} ", hostname()), "[HOST]:[JOB_PID] ")
                .with(format!("{}:{job}\n", hostname()), "[HOST]:[JOB_PID]\n"),
        ),
    );
}

// ---------------------------------------------------------------------------------------
// doctor on MariaDB

/// Replaces, in every line, what stands between `before` and `after` (both kept) with
/// `name`: for values of the server's own configuration that no test controls.
fn redact_between(text: &str, before: &str, after: &str, name: &str) -> String {
    text.lines()
        .map(|l| match l.split_once(before) {
            Some((head, rest)) => match rest.split_once(after) {
                Some((_, tail)) => format!("{head}{before}{name}{after}{tail}"),
                None => l.to_string(),
            },
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `doctor` on the standard MariaDB table changed by `alter` (an `ALTER TABLE` body, or
/// empty), with two runs that ended well (1h, 2h) and one row running 20m and beating,
/// over the watch `watch` gives. The binary runs on the real clock, as the server does.
fn doctor_mariadb(name: &str, about: &str, alter: &str, watch: fn(&Sandbox) -> String) {
    mariadb_shot(name, about, alter, watch, &[&["doctor"]]);
}

/// Like [`doctor_mariadb`], with the transcripts of `commands` (each given `--config`), one
/// after the other.
fn mariadb_shot(
    name: &str,
    about: &str,
    alter: &str,
    watch: fn(&Sandbox) -> String,
    commands: &[&[&str]],
) {
    if std::env::var_os("SELFHEAL_TEST_MYSQL_URL").is_some() {
        // The snapshots are of the local MariaDB as scripts/test runs it; another server
        // (MySQL, another socket) words some lines differently.
        eprintln!("SKIPPED: SELFHEAL_TEST_MYSQL_URL names another server than the snapshots'");
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    if !alter.is_empty() {
        db.exec(&format!("ALTER TABLE sync_log {alter}"));
    }
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, end_time) VALUES \
         (1, 'done', NOW() - INTERVAL 30 HOUR, NOW() - INTERVAL 29 HOUR), \
         (2, 'done', NOW() - INTERVAL 26 HOUR, NOW() - INTERVAL 24 HOUR)",
    );
    db.exec(
        "INSERT INTO sync_log (id, status, start_time, heartbeat_at) VALUES \
         (3, 'running', NOW() - INTERVAL 20 MINUTE, NOW() - INTERVAL 10 SECOND)",
    );
    // Settled statistics: the row estimate EXPLAIN shows must not move between runs.
    db.exec("ANALYZE TABLE sync_log");
    let version: Vec<String> = db.query("SELECT VERSION()");
    let sb = Sandbox::new();
    sb.heartbeat(3, Duration::from_secs(5));
    let cfg = sb.config(&db.url, &watch(&sb));
    let mut r = Redact::new(&sb)
        .with(format!("mariadb {} at", version[0]), "mariadb [VERSION] at")
        .with(db.name.clone(), "[DATABASE]");
    // Two reads of two clocks a moment apart: a second either way is no skew.
    for n in 0..=1 {
        for dir in ["ahead of", "behind"] {
            r = r.with(
                format!("the database clock is {n}s {dir} the host clock"),
                "the database clock is [0 or 1s off] the host clock",
            );
        }
    }
    let text: String = commands
        .iter()
        .map(|args| {
            let o = selfheal()
                .args(*args)
                .arg("--config")
                .arg(&cfg)
                .output()
                .expect("run selfheal");
            transcript(args, &o, &r)
        })
        .collect();
    snapshot(
        name,
        &format!(
            "{about} (Server version, database name, session time zone and a clock skew of \
             at most a second redacted.)"
        ),
        &redact_between(&text, "session time zone ", "; naive", "[ZONE]"),
    );
}

/// The standard watch with the heartbeat column, lock files and the owner column.
fn mariadb_watch(sb: &Sandbox) -> String {
    sb.watch(&format!(
        "heartbeat_column = \"heartbeat_at\"\nlock_file = \"{}\"\nowner_column = \"worker\"\n",
        sb.lock_template()
    ))
}

#[test]
fn doctor_mariadb_healthy() {
    doctor_mariadb(
        "doctor_mariadb_healthy",
        "A healthy MariaDB table (DATETIME start, heartbeat column, idx_status, a \
         255-character message column), two runs that ended well (1h, 2h) under a 4h cap, one \
         row running 20m and beating.",
        "",
        mariadb_watch,
    );
}

#[test]
fn doctor_mariadb_neglected_table() {
    doctor_mariadb(
        "doctor_mariadb_neglected_table",
        "The healthy MariaDB setup, but the table has no index on status and a 60-character \
         message column, and max_age is 1h against a run of 2h.",
        "DROP INDEX idx_status, MODIFY error_msg VARCHAR(60) NOT NULL DEFAULT ''",
        |sb| mariadb_watch(sb).replace("max_age = \"4h\"", "max_age = \"1h\""),
    );
}

#[test]
fn doctor_mariadb_column_typo() {
    doctor_mariadb(
        "doctor_mariadb_column_typo",
        "The healthy MariaDB setup with heartbeat_column = \"heartbeat\" (the column is \
         heartbeat_at).",
        "",
        |sb| mariadb_watch(sb).replace("\"heartbeat_at\"", "\"heartbeat\""),
    );
}

#[test]
fn mariadb_status_enum_without_the_dead_value() {
    mariadb_shot(
        "mariadb_status_enum_without_the_dead_value",
        "The healthy MariaDB setup, but status is ENUM('running','done','failed') NOT NULL \
         DEFAULT 'running' COMMENT 'job state' and dead_value is the default 'error': doctor, \
         then check (refused before anything is written), then stats.",
        "MODIFY status ENUM('running','done','failed') NOT NULL DEFAULT 'running' COMMENT \
         'job state'",
        mariadb_watch,
        &[&["doctor"], &["check"], &["stats"]],
    );
}

// ---------------------------------------------------------------------------------------
// Parked rows

const PARKED: &str = "The healthy SQLite setup with manual_value = \"wait_manual\": two runs \
     that ended well (1h, 2h), row 3 running and beating; row 4 (started 40m ago, its \
     heartbeat 25m old, its lock held by flock(1)) parked by a real check; row 5, started 3h \
     ago, set to 'wait_manual' by hand (no journal knows it).";

/// The parked-rows fixture: row 4 parked by real checks (as many as it takes), row 5 by
/// hand. `None` without faketime.
fn parked_fixture() -> Option<(Sandbox, SqliteDb, PathBuf)> {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    healthy_rows(&sb, &db);
    db.insert_at(4, "running", ago(40 * MIN));
    sb.heartbeat_at(4, ago(25 * MIN));
    let holder = flock1_holder(&sb.lock_path(4), false);
    db.insert_at(5, "wait_manual", ago(3 * HOUR));
    let cfg = sb.config(
        &db.url(),
        &full_watch(&sb).replace(
            "owner_column",
            "manual_value = \"wait_manual\"\nowner_column",
        ),
    );
    for _ in 0..3 {
        next_cron_run(&sb);
        run(&cfg, &["check"])?;
        if db.status(4) != "running" {
            break;
        }
    }
    assert_eq!(db.status(4), "wait_manual");
    drop(holder);
    Some((sb, db, cfg))
}

#[test]
fn parked_rows() {
    let Some((sb, _db, cfg)) = parked_fixture() else {
        return;
    };
    let r = Redact::new(&sb);
    let mut text = String::new();
    for args in [
        &["doctor"][..],
        &["check", "--explain"],
        &["check"],
        &["stats"],
    ] {
        let Some(o) = run(&cfg, args) else { return };
        text.push_str(&transcript(args, &o, &r));
    }
    snapshot(
        "parked_rows",
        &format!("doctor, check --explain, the cron form of check and stats over: {PARKED}"),
        &text,
    );
}

// ---------------------------------------------------------------------------------------
// Cron mail once per problem

#[test]
fn cron_tells_once_per_problem() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert_at(1, "running", ago(30 * MIN));
    std::os::unix::fs::symlink("hb-1", sb.path("hb-1")).expect("symlink loop");
    finished(&db, 2, "done", ago(26 * HOUR), 3 * HOUR);
    let cfg = sb.config(&db.url(), &sb.watch(""));
    let r = Redact::new(&sb);
    let mut text = String::new();
    for (when, at) in [
        ("now", None),
        ("the next run", None),
        ("a day later", Some("2035-03-15 16:09:26")),
    ] {
        let Some(mut c) = frozen_selfheal() else {
            return;
        };
        if let Some(at) = at {
            c.env("FAKETIME", at);
        }
        let o = c
            .args(["check", "--config"])
            .arg(&cfg)
            .output()
            .expect("run selfheal");
        text.push_str("# ");
        text.push_str(when);
        text.push('\n');
        text.push_str(&transcript(&["check"], &o, &r));
    }
    snapshot(
        "cron_tells_once_per_problem",
        "The cron form three times: now, at the next run, and a day later (remind_every 24h \
         by default). Row 1 (30m) cannot be judged: its heartbeat file is a symlink loop; a \
         run that ended well after 3h makes max_age 4h too low.",
        &text,
    );
}

// ---------------------------------------------------------------------------------------
// --help and the errors a bad configuration gets

#[test]
fn help() {
    for (name, args) in [
        ("help_selfheal", &["--help"][..]),
        ("help_check", &["check", "--help"]),
        ("help_doctor", &["doctor", "--help"]),
        ("help_stats", &["stats", "--help"]),
        ("help_demo", &["demo", "--help"]),
        ("help_init", &["init", "--help"]),
        ("help_run", &["run", "--help"]),
        ("help_show", &["show", "--help"]),
        ("help_resolve", &["resolve", "--help"]),
    ] {
        // clap wraps help to $COLUMNS (else the terminal's width, else 100).
        let o = selfheal()
            .args(args)
            .env("COLUMNS", "100")
            .output()
            .expect("run selfheal");
        snapshot(
            name,
            &format!("selfheal {} at 100 columns.", args.join(" ")),
            &transcript(args, &o, &Redact(Vec::new())),
        );
    }
}

#[test]
fn init_proposes_a_watch_for_the_seeds_sync_log() {
    let sb = Sandbox::new();
    let db = SqliteDb::with_schema(
        &sb,
        "CREATE TABLE sync_log (
            id INTEGER PRIMARY KEY,
            job VARCHAR(32) NOT NULL,
            status VARCHAR(16) NOT NULL,
            start_time TEXT,
            end_time TEXT,
            error_msg VARCHAR(255) NOT NULL DEFAULT ''
        );
        CREATE INDEX sync_log_status ON sync_log (status);",
    );
    let row = |id: i64, job: &str, status: &str, start: u64, end: Option<u64>| {
        db.exec(&format!(
            "INSERT INTO sync_log (id, job, status, start_time, end_time) \
             VALUES ({id}, '{job}', '{status}', '{}', {})",
            sql_datetime(ago(start)),
            end.map_or("NULL".into(), |e| format!("'{}'", sql_datetime(ago(e))))
        ));
    };
    row(1, "full-sync", "done", 30 * HOUR, Some(27 * HOUR));
    row(2, "full-sync", "error", 6 * HOUR, Some(5 * HOUR));
    row(3, "incremental", "done", 2 * HOUR, Some(110 * MIN));
    row(4, "full-sync", "running", 50 * MIN, None);
    row(5, "incremental", "running", 2 * MIN, None);
    let Some(mut c) = frozen_selfheal() else {
        return;
    };
    let file = sb.path("app.toml");
    let args = [
        "init",
        "--url",
        &db.url(),
        "--table",
        "sync_log",
        "--write",
        file.to_str().expect("utf-8"),
    ];
    let o = c.args(args).output().expect("run selfheal");
    let r = Redact::new(&sb);
    let shown: Vec<String> = args.iter().map(|a| r.apply(a)).collect();
    let shown: Vec<&str> = shown.iter().map(String::as_str).collect();
    snapshot(
        "init_sync_log",
        "selfheal init on a SQLite sync_log with two job kinds (full-sync: a run of 3h that \
         ended well, one that failed, one running for 50m; incremental: a 10m run, one running \
         for 2m): one watch per job kind, each waiting for its heartbeat file.",
        &transcript(&shown, &o, &r),
    );
}

#[test]
fn configuration_errors() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    let good = sb.watch("");
    let cases: Vec<(&str, String, &[&str])> = vec![
        ("a TOML syntax error", "name = \"full-sync\nx".into(), &[]),
        (
            "a key with a typo",
            good.replace("stale_after", "stale_afer"),
            &[],
        ),
        (
            "a duration that is not one",
            good.replace("\"5m\"", "\"5x\""),
            &[],
        ),
        (
            "a number without a unit",
            good.replace("max_age = \"4h\"", "max_age = \"90\""),
            &[],
        ),
        (
            "a required key missing",
            good.replace("table = \"sync_log\"\n", ""),
            &[],
        ),
        (
            "a table name that is no identifier",
            good.replace("\"sync_log\"", "\"sync_log; DROP TABLE x\""),
            &[],
        ),
        (
            "overtime = manual without manual_value",
            format!("{good}overtime = \"manual\"\n"),
            &[],
        ),
        (
            "an unknown release_lock",
            format!("{good}release_lock = \"sometimes\"\n"),
            &[],
        ),
        (
            "dead_value equal to running_value",
            format!("{good}dead_value = \"running\"\n"),
            &[],
        ),
        (
            "a flag with a bad value",
            good.clone(),
            &["--stale-after", "5x"],
        ),
        (
            "a database file that does not exist",
            good.clone(),
            &["--db", "sqlite:///nonexistent/app.db"],
        ),
    ];
    let r = Redact::new(&sb);
    let mut text = String::new();
    for (about, watch, flags) in cases {
        let cfg = sb.config(&db.url(), &watch);
        let o = selfheal()
            .arg("check")
            .args(flags)
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("run selfheal");
        let mut args = vec!["check"];
        args.extend(flags);
        let _ = writeln!(text, "# {about}\n{}", transcript(&args, &o, &r));
    }
    let o = selfheal()
        .args(["check", "--config", "/nonexistent/selfheal.toml"])
        .output()
        .expect("run selfheal");
    let _ = write!(
        text,
        "# a configuration file that does not exist\n{}",
        transcript(&["check", "--config", "/nonexistent/selfheal.toml"], &o, &r)
    );
    snapshot(
        "configuration_errors",
        "check with a configuration (the standard watch over sync_log) broken one way at a \
         time.",
        &text,
    );
}

// ---------------------------------------------------------------------------------------
// The common mistakes, as check and doctor word them: each error a sentence
// with the fix that fits the cause and the user

/// One mistake: what it is, and the command it is seen through (`None` for a run as
/// nobody, skipped when not root).
struct Mistake {
    about: &'static str,
    cfg: PathBuf,
    args: Vec<&'static str>,
    as_nobody: bool,
}

/// Makes the sandbox's run lock and state directory (and what is in it) `uid`'s, where
/// they exist.
fn give_run_files(sb: &Sandbox, uid: u32) {
    for p in [sb.state_dir(), sb.run_lock()] {
        if p.exists() {
            let ok = std::process::Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{uid}"))
                .arg(&p)
                .status()
                .expect("chown");
            assert!(ok.success(), "chown {}", p.display());
        }
    }
}

/// The transcripts of `mistakes`, each under its `# about` line; `None` when a run as
/// nobody or under the frozen clock cannot be made here (skipped outside CI).
fn mistakes_transcript(sb: &Sandbox, mistakes: &[Mistake]) -> Option<String> {
    // A run as nobody names nobody (uid 65534) as it is: the same on every host.
    let r = Redact::new(sb);
    let mut text = String::new();
    for m in mistakes {
        // The run lock and the state directory belong to the user that runs (selfheal
        // refuses another user's), as with a configuration of that user's own.
        give_run_files(sb, if m.as_nobody { 65534 } else { 0 });
        let mut c = if m.as_nobody {
            as_nobody_frozen()?
        } else {
            frozen_selfheal()?
        };
        let o = c
            .args(&m.args)
            .arg("--config")
            .arg(&m.cfg)
            .output()
            .expect("run selfheal");
        let _ = writeln!(
            text,
            "# {}{}\n{}",
            m.about,
            if m.as_nobody { " (as nobody)" } else { "" },
            transcript(&m.args, &o, &r)
        );
    }
    Some(text)
}

/// The standard SQLite fixture (healthy rows) with the sandbox open to nobody, and one
/// configuration per mistake.
fn common_mistakes(command: &'static str) -> Option<(Sandbox, String)> {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    healthy_rows(&sb, &db);
    std::fs::create_dir(sb.path("textfile")).expect("textfile dir");
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    };
    // Every file here is one config_with writes: give each mistake its own name.
    let write = |name: &str, database: &str, watch: &str| {
        let p = sb.config_with(database, "", watch);
        let to = sb.path(name);
        std::fs::rename(&p, &to).expect("rename");
        mode(&to, 0o644);
        to
    };
    let url = format!("url = \"{}\"", db.url());
    let good = full_watch(&sb);
    let secret = sb.file(
        "app.cnf",
        "[client]\nuser = app\npassword = secret\n",
        0o600,
    );
    let locked = write("locked.toml", &url, &good);
    mode(&locked, 0o600);
    let one = |about, cfg, as_nobody| Mistake {
        about,
        cfg,
        args: vec![command],
        as_nobody,
    };
    let mistakes = vec![
        one(
            "table = \"sync_lg\" (a typo)",
            write(
                "table-typo.toml",
                &url,
                &good.replace("\"sync_log\"", "\"sync_lg\""),
            ),
            false,
        ),
        one(
            "started_column = \"start_tme\" (a typo)",
            write(
                "column-typo.toml",
                &url,
                &good.replace("\"start_time\"", "\"start_tme\""),
            ),
            false,
        ),
        one(
            "url names a database file that does not exist",
            write(
                "db-typo.toml",
                &format!("url = \"sqlite://{}/ap.db\"", sb.dir.path().display()),
                &good,
            ),
            false,
        ),
        one(
            "url names a socket where no server listens",
            write(
                "no-socket.toml",
                "url = \"mysql://app@localhost/appdb?socket=/nonexistent/mysqld.sock\"",
                &good,
            ),
            false,
        ),
        one(
            "defaults_file names a file that does not exist",
            write(
                "no-cnf.toml",
                "url = \"mysql:///appdb\"\ndefaults_file = \"/etc/selfheal/app.cnf\"",
                &good,
            ),
            false,
        ),
        one(
            "defaults_file is root's, mode 600",
            write(
                "root-cnf.toml",
                &format!(
                    "url = \"mysql:///appdb\"\ndefaults_file = \"{}\"",
                    secret.display()
                ),
                &good,
            ),
            true,
        ),
        one("the configuration is root's, mode 600", locked, true),
    ];
    // The sandbox as a user's home would be: nobody may look and write in it.
    mode(sb.dir.path(), 0o777);
    let text = mistakes_transcript(&sb, &mistakes)?;
    Some((sb, text))
}

#[test]
fn check_common_mistakes() {
    let Some((_sb, text)) = common_mistakes("check") else {
        return;
    };
    snapshot(
        "check_common_mistakes",
        "check (the cron form) on the healthy SQLite setup broken one common way at a time: \
         each error a sentence naming what failed, then the fix that fits the cause and the \
         user (runs as nobody where said).",
        &text,
    );
}

#[test]
fn doctor_common_mistakes() {
    let Some((_sb, text)) = common_mistakes("doctor") else {
        return;
    };
    snapshot(
        "doctor_common_mistakes",
        "doctor on the healthy SQLite setup broken one common way at a time (runs as nobody \
         where said): a table or column the database lacks is exit 2, as in check.",
        &text,
    );
}

#[test]
fn doctor_without_a_watch() {
    let sb = Sandbox::new();
    let cfg = sb.path("selfheal.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\n# url = \"mysql://app@localhost/appdb\"\n\n[run]\nstate_dir = \"{}\"\n",
            sb.state_dir().display()
        ),
    )
    .expect("write");
    let Some(o) = run(&cfg, &["doctor"]) else {
        return;
    };
    snapshot(
        "doctor_without_a_watch",
        "doctor on a configuration with no [[watch]] (as the package ships it): a warning, \
         exit 1.",
        &transcript(&["doctor"], &o, &Redact::new(&sb)),
    );
}

/// check and doctor against MariaDB, for the mistakes only a server shows: a database it
/// does not have, a wrong password. (Real clock; the database and account names redacted.)
#[test]
fn mariadb_common_mistakes() {
    if std::env::var_os("SELFHEAL_TEST_MYSQL_URL").is_some() {
        eprintln!("SKIPPED: SELFHEAL_TEST_MYSQL_URL names another server than the snapshots'");
        return;
    }
    let mut db = mysql_or_skip!();
    db.create_sync_log("DATETIME");
    let user = db.create_user("the-right-password");
    let sb = Sandbox::new();
    let r = Redact::new(&sb)
        .with(user.clone(), "[DBUSER]")
        .with(db.name.clone(), "[DATABASE]");
    let base = db.url.clone();
    let (scheme, rest) = base.split_once("://").expect("scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let as_user = format!("{scheme}://{user}@{host}");
    let mut text = String::new();
    for (about, url, password) in [
        (
            "url names a database the server does not have",
            with_database(&db.url, &format!("{}_old", db.name)),
            None,
        ),
        (
            "the password in $SELFHEAL_DB_PASSWORD is wrong",
            as_user.clone(),
            Some("a-wrong-password"),
        ),
        ("the account needs a password and has none", as_user, None),
    ] {
        let cfg = sb.config(&url, &sb.watch(""));
        for cmd in ["check", "doctor"] {
            let mut c = selfheal();
            if let Some(p) = password {
                c.env("SELFHEAL_DB_PASSWORD", p);
            }
            let o = c.args([cmd, "--config"]).arg(&cfg).output().expect("run");
            let _ = writeln!(text, "# {about}\n{}", transcript(&[cmd], &o, &r));
        }
    }
    snapshot(
        "mariadb_common_mistakes",
        "check and doctor against the local MariaDB with a wrong database name, a wrong \
         password, no password (database and account names redacted).",
        &text,
    );
}

// ---------------------------------------------------------------------------------------
// A person's side: show, resolve, un-parking (docs/design.md#show)

/// Runs `selfheal ARGS --config CFG` under the frozen clock with `SUDO_USER` set.
fn run_as(cfg: &Path, sudo_user: &str, args: &[&str]) -> Option<Output> {
    let mut c = frozen_selfheal()?;
    c.args(args)
        .arg("--config")
        .arg(cfg)
        .env("SUDO_USER", sudo_user);
    Some(c.output().expect("run selfheal"))
}

const PERSON: &str = "The healthy SQLite setup with manual_value = \"wait_manual\", a retry queue \
     (retry_value 'pending', max_attempts 3) and retry_at_column = \"retry_at\": two runs that \
     ended well (1h, 2h), row 3 running and beating; row 4 (started 40m ago, its heartbeat 25m \
     old, its lock held by flock(1)) parked by a real check; row 5, started 3h ago, set to \
     'wait_manual' by hand (no journal knows it); row 6 (30m) whose heartbeat file is a \
     symlink loop; row 8 (50m) owned by web2.invalid, within max_age.";

/// The fixture of [`PERSON`]: the sandbox, the database, the configuration and row 4's
/// lock holder (still holding). `None` without faketime.
fn person_fixture() -> Option<(Sandbox, SqliteDb, PathBuf, Proc)> {
    let sb = Sandbox::new();
    let db = SqliteDb::with_schema(
        &sb,
        &SQLITE_SCHEMA.replace(
            "attempts INTEGER NOT NULL DEFAULT 0",
            "attempts INTEGER NOT NULL DEFAULT 0,\n    retry_at TEXT",
        ),
    );
    healthy_rows(&sb, &db);
    db.insert_at(4, "running", ago(40 * MIN));
    sb.heartbeat_at(4, ago(25 * MIN));
    let holder = flock1_holder(&sb.lock_path(4), false);
    db.insert_at(5, "wait_manual", ago(3 * HOUR));
    let cfg = sb.config(
        &db.url(),
        &full_watch(&sb).replace(
            "owner_column",
            "manual_value = \"wait_manual\"\nretry_value = \"pending\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 3\nretry_at_column = \"retry_at\"\n\
             owner_column",
        ),
    );
    for _ in 0..3 {
        run(&cfg, &["check"])?;
        if db.status(4) != "running" {
            break;
        }
        next_cron_run(&sb);
    }
    assert_eq!(db.status(4), "wait_manual");
    db.insert_at(6, "running", ago(30 * MIN));
    std::os::unix::fs::symlink("hb-6", sb.path("hb-6")).expect("symlink loop");
    db.insert_at(8, "running", ago(50 * MIN));
    db.exec("UPDATE sync_log SET worker = 'web2.invalid:4242' WHERE id = 8");
    Some((sb, db, cfg, holder))
}

#[test]
fn show_and_resolve() {
    let Some((sb, db, cfg, holder)) = person_fixture() else {
        return;
    };
    let r = Redact::new(&sb).pid(holder.pid(), "FLOCK_PID");
    let mut text = String::new();
    let mut shot = |args: &[&str], o: Option<Output>, json: bool| -> bool {
        let Some(o) = o else { return false };
        text.push_str(&if json {
            json_transcript(args, &o, &r)
        } else {
            transcript(args, &o, &r)
        });
        true
    };
    for (args, json) in [
        (&["show"][..], false),
        (&["show", "--format", "json"], true),
        (&["show", "full-sync", "4"], false),
        (&["show", "full-sync", "4", "--format", "json"], true),
        (&["doctor"], false),
    ] {
        if !shot(args, run(&cfg, args), json) {
            return;
        }
    }
    let args = ["resolve", "full-sync", "5", "--as", "retry", "--dry-run"];
    if !shot(&args, run_as(&cfg, "alice", &args), false) {
        return;
    }
    // Row 4's worker provably lives (its lock is held): refused; the others are decided.
    let args = [
        "resolve",
        "full-sync",
        "4",
        "5",
        "6",
        "--as",
        "dead",
        "--note",
        "gone since the deploy",
    ];
    if !shot(&args, run_as(&cfg, "alice", &args), false) {
        return;
    }
    // Its worker gone, the person sends it back to the queue.
    drop(holder);
    let args = ["resolve", "full-sync", "4", "--as", "retry"];
    if !shot(&args, run_as(&cfg, "alice", &args), false) {
        return;
    }
    for args in [&["show"][..], &["show", "full-sync", "4"], &["stats"]] {
        if !shot(args, run(&cfg, args), false) {
            return;
        }
    }
    text.push_str(&r.apply(&table(&db)));
    snapshot(
        "show_and_resolve",
        &format!(
            "show (text and JSON), show of one row (text and JSON), doctor, resolve --dry-run, \
             resolve of three rows as alice (one refused: its lock is held), then of the \
             refused one once its holder is gone, show again and stats, over: {PERSON}"
        ),
        &text,
    );
}

#[test]
fn unpark_is_said_once() {
    let sb = Sandbox::new();
    let db = SqliteDb::new(&sb);
    db.insert_at(7, "running", ago(30 * MIN));
    sb.heartbeat_at(7, ago(20 * MIN));
    let holder = flock1_holder(&sb.lock_path(7), false);
    let cfg = sb.config(
        &db.url(),
        &full_watch(&sb).replace(
            "owner_column",
            "manual_value = \"wait_manual\"\nconfirm = 1\nowner_column",
        ),
    );
    let r = Redact::new(&sb).pid(holder.pid(), "FLOCK_PID");
    let later = "2035-03-14 15:19:26";
    let mut text = String::new();
    for (when, at, args, beat) in [
        ("now: parked as hung", None, &["check"][..], false),
        (
            "10m later, its worker beats again",
            Some(later),
            &["check", "--explain"],
            true,
        ),
        ("the real run", Some(later), &["check"], false),
        ("the next run", Some(later), &["check"], false),
        ("stats", Some(later), &["stats"], false),
    ] {
        if beat {
            sb.heartbeat_at(7, frozen_now() + Duration::from_secs(10 * MIN - 5));
        }
        let Some(mut c) = frozen_selfheal() else {
            return;
        };
        if let Some(at) = at
            && !frozen_clock_at(&mut c, at)
        {
            return;
        }
        let o = c
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("run selfheal");
        let _ = writeln!(text, "# {when}");
        text.push_str(&transcript(args, &o, &r));
    }
    text.push_str(&r.apply(&table(&db)));
    snapshot(
        "unpark_is_said_once",
        "Row 7 (started 30m ago, heartbeat 20m old, its lock held by flock(1)) under \
         manual_value = \"wait_manual\" and confirm = 1: the first run parks it as hung; 10 \
         minutes later its heartbeat is 5s old: --explain, the real run that un-parks it, the \
         next run, and stats.",
        &text,
    );
}
