//! `selfheal demo`: a throw-away SQLite sandbox with rows in every state — a two-hour run
//! that is merely slow, a dead worker, one just starting, one past its cap, one hung while
//! its job still holds the lock, one whose worker was just killed — real heartbeat files
//! with set mtimes, and a live lock held by this process. It runs the real `--explain`,
//! then the real check twice, as cron would, one period apart: between the two the demo
//! moves the sandbox's clock on by ten minutes ([`ten_minutes_pass`]: the rows started ten
//! minutes earlier, the heartbeats of the jobs that still beat are touched, the others are
//! ten minutes older, and so are the last run's confirmation counts). A verdict drawn from
//! a quiet heartbeat acts only when the next run finds the same, and the worker killed a
//! moment ago, whose heartbeat was still fresh, is reclaimed once that heartbeat is stale.
//! It shows the table before and after. Then a job wrapped in `selfheal run` next to a
//! bare one, as real processes (`wrapped`).
//!
//! I/O: creates a temporary directory (or `--keep DIR`), removed afterwards unless kept.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

use crate::check::{self, CheckOptions};
use crate::clock::human;
use crate::config::{self, ConfigPath, Overrides};
use crate::error::{Error, Result, exit};
use crate::report::TextReporter;

mod wrapped;

struct DemoRow {
    id: i64,
    job: &'static str,
    started_ago: u64,
    heartbeat_ago: Option<u64>,
    /// The job's lock file: `None` no file, `Some(true)` held by a live job, `Some(false)` free.
    lock: Option<bool>,
    /// Its job still beats: the heartbeat is touched when time passes.
    beats: bool,
    story: &'static str,
}

const ROWS: &[DemoRow] = &[
    DemoRow {
        id: 1,
        job: "full-sync",
        started_ago: 7_800,
        heartbeat_ago: Some(20),
        lock: Some(true),
        beats: true,
        story: "a legitimate 2h10m run: slow, not dead (the seed incident)",
    },
    DemoRow {
        id: 2,
        job: "daily-report",
        started_ago: 3_000,
        heartbeat_ago: Some(2_820),
        lock: None,
        beats: false,
        story: "its worker died 47 minutes ago (OOM)",
    },
    DemoRow {
        id: 3,
        job: "import",
        started_ago: 30,
        heartbeat_ago: None,
        lock: None,
        beats: false,
        story: "started 30 s ago, no heartbeat yet",
    },
    DemoRow {
        id: 4,
        job: "export",
        started_ago: 18_000,
        heartbeat_ago: Some(10),
        lock: None,
        beats: true,
        story: "beating, but 5 h in: past the 4 h cap",
    },
    DemoRow {
        id: 5,
        job: "reindex",
        started_ago: 2_400,
        heartbeat_ago: Some(1_500),
        lock: Some(true),
        beats: false,
        story: "heartbeat stuck 25 min, yet its job still holds the lock",
    },
    DemoRow {
        id: 6,
        job: "thumbnails",
        started_ago: 1_200,
        heartbeat_ago: Some(100),
        lock: Some(false),
        beats: false,
        story: "killed -9 a moment ago: its lock is free, but its heartbeat (1m40s) is still fresh",
    },
];

fn sql_err(e: rusqlite::Error) -> Error {
    Error::database("demo sandbox", e)
}

fn io_err<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(path, action, e)
}

/// Builds the sandbox in `dir`; returns the config path and the lock files held open.
fn build(dir: &Path) -> Result<(PathBuf, Vec<File>)> {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).map_err(io_err(&run, "creating the sandbox"))?;
    let db = dir.join("app.db");
    let conn = Connection::open(&db).map_err(sql_err)?;
    conn.execute_batch(
        "CREATE TABLE sync_log (
            id INTEGER PRIMARY KEY,
            job TEXT NOT NULL,
            status VARCHAR(16) NOT NULL,
            start_time TEXT NOT NULL,
            end_time TEXT,
            error_msg VARCHAR(255) NOT NULL DEFAULT ''
         );
         CREATE INDEX sync_log_status ON sync_log (status);",
    )
    .map_err(sql_err)?;
    let now = SystemTime::now();
    let mut held = Vec::new();
    for r in ROWS {
        conn.execute(
            "INSERT INTO sync_log (id, job, status, start_time) VALUES (?1, ?2, 'running', datetime('now', ?3))",
            rusqlite::params![r.id, r.job, format!("-{} seconds", r.started_ago)],
        )
        .map_err(sql_err)?;
        if let Some(ago) = r.heartbeat_ago {
            let p = run.join(format!("{}.heartbeat", r.id));
            let f = File::create(&p).map_err(io_err(&p, "creating a heartbeat file"))?;
            f.set_modified(now - Duration::from_secs(ago))
                .map_err(io_err(&p, "setting a heartbeat mtime"))?;
        }
        if let Some(hold) = r.lock {
            let p = run.join(format!("{}.lock", r.id));
            let f = File::create(&p).map_err(io_err(&p, "creating a lock file"))?;
            if hold {
                f.lock().map_err(io_err(&p, "locking a lock file"))?;
                held.push(f);
            }
        }
    }
    conn.execute(
        "INSERT INTO sync_log (id, job, status, start_time, end_time, error_msg)
         VALUES (7, 'full-sync', 'done', datetime('now', '-1 day'), datetime('now', '-22 hours'), '')",
        [],
    )
    .map_err(sql_err)?;

    let cfg = dir.join("selfheal.toml");
    let text = format!(
        r#"# The demo's configuration: one watch over sync_log.
[database]
url = "sqlite://{db}"

[run]
lock_file = "{run}/selfheal.lock"
state_dir = "{state}"

[[watch]]
name = "jobs"
table = "sync_log"
started_column = "start_time"
heartbeat_file = "{run}/{{id}}.heartbeat"
lock_file = "{run}/{{id}}.lock"
stale_after = "5m"
max_age = "4h"
dead_value = "error"
manual_value = "wait_manual"
ended_column = "end_time"
message_column = "error_msg"
"#,
        db = db.display(),
        run = run.display(),
        state = dir.join("state").display(),
    );
    std::fs::write(&cfg, text).map_err(io_err(&cfg, "writing the demo configuration"))?;
    Ok((cfg, held))
}

/// Ten minutes pass in the sandbox, as between two cron runs: every running row started
/// ten minutes earlier, the heartbeat of every job that still beats is touched now, the
/// others are ten minutes older, and the confirmation counts and contradiction times the
/// last run kept are ten minutes old (selfheal counts a run toward `confirm` only when it
/// comes at least `stale_after / 2` after the one before).
fn ten_minutes_pass(dir: &Path, db: &Path) -> Result<()> {
    const TEN_MINUTES: u64 = 600;
    let conn = Connection::open(db).map_err(sql_err)?;
    conn.execute(
        "UPDATE sync_log SET start_time = datetime(start_time, '-600 seconds') \
         WHERE status = 'running'",
        [],
    )
    .map_err(sql_err)?;
    let now = SystemTime::now();
    for r in ROWS {
        let p = dir.join("run").join(format!("{}.heartbeat", r.id));
        let Ok(m) = std::fs::metadata(&p) else {
            continue;
        };
        let at = if r.beats {
            now
        } else {
            m.modified()
                .map_err(io_err(&p, "reading a heartbeat mtime"))?
                .checked_sub(Duration::from_secs(TEN_MINUTES))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        File::options()
            .append(true)
            .open(&p)
            .and_then(|f| f.set_modified(at))
            .map_err(io_err(&p, "setting a heartbeat mtime"))?;
    }
    let state = dir.join("state");
    if let Ok(Some(mut counts)) = crate::check::confirmations::load(&state) {
        let ago = i64::try_from(TEN_MINUTES).unwrap_or(0);
        for e in &mut counts.entries {
            e.seen -= ago;
            if let Some(s) = e.since.as_mut() {
                *s -= ago;
            }
            // A row is counted by its id and start value: the start moved with the clock.
            if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&e.started, "%Y-%m-%d %H:%M:%S") {
                e.started = (t - chrono::Duration::seconds(ago))
                    .format("%Y-%m-%d %H:%M:%S")
                    .to_string();
            }
        }
        crate::check::confirmations::save(&state, &counts)?;
    }
    Ok(())
}

fn print_table(db: &Path, out: &mut dyn Write) -> Result<()> {
    let conn = Connection::open(db).map_err(sql_err)?;
    let mut stmt = conn
        .prepare(
            "SELECT id, job, status, CAST(strftime('%s','now') - strftime('%s', start_time) AS INTEGER),
                    end_time IS NOT NULL, error_msg FROM sync_log ORDER BY id",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, String>(5)?,
            ))
        })
        .map_err(sql_err)?;
    let _ = writeln!(
        out,
        "  {:<3} {:<13} {:<12} {:<10} {:<6} error_msg",
        "id", "job", "status", "started", "ended"
    );
    for row in rows {
        let (id, job, status, age, ended, msg) = row.map_err(sql_err)?;
        // What decided, in words; the figures are in the row and the journal.
        let head = crate::message::head(&msg);
        let msg = if head.len() < msg.len() {
            format!("{head} (…)")
        } else if msg.chars().count() > 60 {
            format!("{}…", crate::message::cut(&msg, Some(60)))
        } else {
            msg
        };
        let _ = writeln!(
            out,
            "  {id:<3} {job:<13} {status:<12} {:<10} {:<6} {msg}",
            format!("{} ago", human(u64::try_from(age).unwrap_or(0))),
            if ended { "yes" } else { "" },
        );
    }
    Ok(())
}

fn run_check(cfg_path: &Path, explain: bool, out: &mut dyn Write) -> Result<u8> {
    let cfg = config::load(
        &ConfigPath::Explicit(cfg_path.to_path_buf(), crate::error::Origin::CommandLine),
        &Overrides::default(),
        &[],
    )?;
    let mut buf = Vec::new();
    let mut err = Vec::new();
    let summary = {
        let mut rep = TextReporter {
            out: &mut buf,
            err: &mut err,
            explain,
            dry_run: explain,
            spoke: false,
            lines: crate::report::text::RowLines::default(),
        };
        check::run(
            &cfg,
            &CheckOptions {
                dry_run: explain,
                force: false,
                ..CheckOptions::default()
            },
            &mut rep,
        )?
    };
    let _ = out.write_all(&err);
    let _ = out.write_all(&buf);
    Ok(check::exit_code(&summary))
}

fn exit_words(code: u8) -> &'static str {
    match code {
        exit::OK => "every running row was judged and handled",
        exit::ATTENTION => "done, and some rows need a person",
        _ => "see above",
    }
}

/// Runs the walkthrough; the exit status is the demo's own (0 when it ran).
pub fn run(keep: Option<&Path>, out: &mut dyn Write) -> Result<u8> {
    let tmp;
    let dir: PathBuf = match keep {
        Some(d) => {
            if d.exists() && std::fs::read_dir(d).map_or(true, |mut r| r.next().is_some()) {
                return Err(Error::Usage(
                    format!("--keep {}: the directory must be new or empty", d.display()).into(),
                ));
            }
            std::fs::create_dir_all(d).map_err(io_err(d, "creating the sandbox"))?;
            d.canonicalize()
                .map_err(io_err(d, "resolving the sandbox"))?
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("selfheal-demo-")
                .tempdir()
                .map_err(|e| Error::io(std::env::temp_dir(), "creating the sandbox", e))?;
            tmp.path().to_path_buf()
        }
    };
    let (cfg, held) = build(&dir)?;
    let db = dir.join("app.db");

    let _ = writeln!(
        out,
        "selfheal demo: a throw-away sandbox in {}",
        dir.display()
    );
    let _ = writeln!(out, "  database  sqlite://{}", db.display());
    let _ = writeln!(out, "  config    {}", cfg.display());
    let _ = writeln!(
        out,
        "  a live job (this demo process) holds the locks of rows 1 and 5\n"
    );
    for r in ROWS {
        let _ = writeln!(out, "  row {}: {}", r.id, r.story);
    }
    let _ = writeln!(out, "\nBefore:");
    print_table(&db, out)?;

    let _ = writeln!(
        out,
        "\n$ selfheal check --explain --config {}",
        cfg.display()
    );
    let code = run_check(&cfg, true, out)?;
    let _ = writeln!(out, "(exit status {code}; --explain changes nothing)");

    let _ = writeln!(out, "\n$ selfheal check --config {}", cfg.display());
    let code = run_check(&cfg, false, out)?;
    let _ = writeln!(
        out,
        "(exit status {code}: {}; proven deaths and overtime act at once, but a death beside \
         the row's own\nfresh heartbeat (row 6) waits until that heartbeat is stale, and a \
         quiet heartbeat waits for the next\nrun, a cron period later, to confirm it: \
         confirm = 2)",
        exit_words(code)
    );
    print_table(&db, out)?;

    ten_minutes_pass(&dir, &db)?;
    let _ = writeln!(
        out,
        "\n# Ten minutes later (the demo moves the sandbox's clock on: the rows started ten \
         minutes earlier,\n# the live jobs have beaten, the stalled and the dead heartbeats \
         are ten minutes older)"
    );
    let _ = writeln!(
        out,
        "$ selfheal check --config {}    # cron's next run",
        cfg.display()
    );
    let code = run_check(&cfg, false, out)?;
    let _ = writeln!(out, "(exit status {code}: {})", exit_words(code));

    let _ = writeln!(out, "\nAfter:");
    print_table(&db, out)?;
    let _ = writeln!(
        out,
        "\nEvery change is in {}/state/journal.jsonl. The lock files are all still there:",
        dir.display()
    );
    let mut locks: Vec<String> = std::fs::read_dir(dir.join("run"))
        .map_err(io_err(&dir, "listing the sandbox"))?
        .filter_map(std::result::Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock") && n != "selfheal.lock")
        .collect();
    locks.sort();
    let _ = writeln!(out, "  {}", locks.join(" "));
    drop(held);
    wrapped::show(&dir, out)?;
    if keep.is_some() {
        let _ = writeln!(out, "\nThe sandbox is kept in {}.", dir.display());
    }
    Ok(exit::OK)
}
