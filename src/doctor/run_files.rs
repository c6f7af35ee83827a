//! doctor on a lock file kept by `selfheal run` or the PHP helper: its `HOST:PID START`
//! holder line is recognised, and the finding says who holds the lock (or last held it)
//! and what such a heartbeat proves. A fixed `lock_file` is looked at directly; with
//! `{id}` in the file name, the files of that pattern are counted (at most [`MAX_FILES`])
//! and the first held ones named. No line when no file carries a holder line.
//!
//! I/O: reads the first bytes of each lock file (a regular file only, opened without
//! blocking) and probes its lock through `/proc/locks`; locks, creates and writes nothing.
//! What the files say is printed escaped and cut (another user may write them).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::Finding;
use super::files::template_dir;
use crate::config::{PathTemplate, Watch};
use crate::decide::Lock;
use crate::escape::printable_cut;
use crate::holder_line::HolderLine;
use crate::host::Host;
use crate::probe::lock::{open_regular, read_line_at};
use crate::probe::{LockTable, probe_lock};
use crate::run::holder::{Holder, HolderState};

/// At most this many files of an `{id}` pattern are read.
const MAX_FILES: usize = 1_000;

/// At most this many held files of an `{id}` pattern are named with their holder.
const MAX_NAMED: usize = 3;

/// The finding for a watch whose lock file carries a holder line, if it does.
pub(super) fn finding(w: &Watch, t: &PathTemplate) -> Option<Finding> {
    let subject = format!("watch {}: written by selfheal run", w.name);
    let beat_note = w.heartbeat_file.as_ref().map(|h| {
        format!(
            "; if `selfheal run --heartbeat` touches {}, a fresh heartbeat proves the process \
             exists, not that it progresses (a job that can should beat from its own loop)",
            h.as_str()
        )
    });
    let beat_note = beat_note.unwrap_or_default();
    let table = LockTable::read();
    if !t.has_id() {
        let path = Path::new(t.as_str());
        let line = read_line_at(path)?;
        return Some(one_file(&subject, path, &line, table.as_ref(), &beat_note));
    }
    let (dir, _) = template_dir(t);
    let files = pattern_files(t, &dir);
    let mut with_line = 0;
    let mut held: usize = 0;
    let mut named = Vec::new();
    for f in &files {
        if let Some(line) = read_line_at(f) {
            with_line += 1;
            if matches!(probe_lock(f, table.as_ref()), Lock::Held { .. }) {
                held += 1;
                if named.len() < MAX_NAMED {
                    let name = f
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default();
                    named.push(format!(
                        "{} by {} since {}",
                        printable_cut(&name, 64),
                        line.named(),
                        line.since_text()
                    ));
                }
            }
        }
    }
    let named = match held.saturating_sub(named.len()) {
        _ if named.is_empty() => String::new(),
        0 => format!(" ({})", named.join(", ")),
        more => format!(" ({}, and {more} more)", named.join(", ")),
    };
    (with_line > 0).then(|| {
        Finding::pass(
            subject,
            format!(
                "{with_line} of the {} lock files in {} carry the holder line selfheal run and \
                 the PHP helper write (HOST:PID START), {held} held now{named}{beat_note}",
                files.len(),
                dir.display()
            ),
        )
    })
}

fn one_file(
    subject: &str,
    path: &Path,
    line: &HolderLine,
    table: Option<&LockTable>,
    beat_note: &str,
) -> Finding {
    let shown = path.display();
    match probe_lock(path, table) {
        Lock::Held { .. } => {
            let holder = open_regular(path)
                .ok()
                .map(|f| Holder::judge(&f, &Host::current()));
            match holder {
                Some(h) if h.state == HolderState::Gone => Finding::warn(
                    subject,
                    format!(
                        "{shown} is held by {}: every later run exits 75 until it ends",
                        h.describe(SystemTime::now())
                    ),
                    format!("find it with fuser -v {shown}, and end it or let it finish"),
                ),
                Some(h) => Finding::pass(
                    subject,
                    format!(
                        "{shown} is held by {}: the holder line of selfheal run and the PHP \
                         helper{beat_note}",
                        h.describe(SystemTime::now())
                    ),
                ),
                None => Finding::pass(
                    subject,
                    format!("{shown} is held by {}{beat_note}", line.named()),
                ),
            }
        }
        _ => Finding::pass(
            subject,
            format!(
                "{shown} is free; it was last held by {} from {}: the holder line of selfheal \
                 run and the PHP helper{beat_note}",
                line.named(),
                line.since_text()
            ),
        ),
    }
}

/// The files in `dir` whose names fit the template's last component (`{id}` as any
/// non-empty text); none when `{id}` is in a directory's name.
fn pattern_files(t: &PathTemplate, dir: &Path) -> Vec<PathBuf> {
    let full = Path::new(t.as_str());
    let Some(name) = full.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    if full.parent() != Some(dir) {
        return Vec::new();
    }
    let Some((prefix, suffix)) = name.split_once("{id}") else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            (n.len() > prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix))
                .then(|| e.path())
        })
        .take(MAX_FILES)
        .collect::<Vec<_>>();
    files.sort();
    files
}
