//! The journal: one JSON line per applied change in `state_dir/journal.jsonl`. Opened only
//! when a run is about to change a row.
//!
//! Every change has an id (`change`), and goes through `state_dir/pending.jsonl` first:
//! before a watch's first compare-and-set, the entries it may write are put there as
//! intents and flushed to disk ([`Pending::write`]); each applied change is then appended
//! to the journal with one `write(2)` right after its compare-and-set, the journal is
//! flushed once after the watch's writes ([`Journal::sync`]), and the intents are cleared.
//! A run killed anywhere in between (even between a compare-and-set and its journal line)
//! leaves intents behind, and the next run settles them ([`crate::recovery`]): an intent
//! whose change the database shows applied and the journal does not list is journaled
//! then, marked `recovered`. So the journal lists every applied change exactly once, and
//! two flushes per watch replace one per row.
//!
//! A crash mid-write can leave a last line cut in half. Writers and readers both survive
//! it: [`Journal::open`] ends such a line before appending, so the next entry starts on a
//! line of its own, and [`read`] skips every line that is not one whole JSON object,
//! reporting where, instead of failing or silently losing the rest.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const JOURNAL_FILE: &str = "journal.jsonl";
/// Intents of the changes a run is about to make (empty between runs).
pub const PENDING_FILE: &str = "pending.jsonl";

/// Lines longer than this are not journal entries (an entry is well under 4 KiB); they are
/// skipped without being held in memory.
const MAX_LINE: usize = 1 << 20;

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

/// Creates the state directory (mode 0750) if it does not exist.
pub fn create_state_dir(state_dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(state_dir)
        .map_err(|e| Error::io(state_dir, "creating the state directory (run.state_dir)", e))
}

impl Journal {
    /// Opens (creating the directory and file if needed) for appending. A last line cut
    /// by a crash is ended first, so it damages only itself.
    pub fn open(state_dir: &Path) -> Result<Journal> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(JOURNAL_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&path)
            .map_err(|e| Error::io(&path, "opening the journal", e))?;
        let cut =
            ends_mid_line(&mut file).map_err(|e| Error::io(&path, "reading the journal", e))?;
        if cut {
            file.write_all(b"\n")
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io(&path, "writing the journal", e))?;
        }
        Ok(Journal { file, path })
    }

    /// Appends one entry as a single line, in one `write(2)`: a process killed after it
    /// returns has left the whole line (in the page cache). [`Journal::sync`] puts it on
    /// disk.
    pub fn append(&mut self, entry: &serde_json::Value) -> Result<()> {
        let mut line = entry.to_string();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| Error::io(&self.path, "writing the journal", e))
    }

    /// Flushes what was appended to disk.
    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, "writing the journal", e))
    }

    /// The journal's length in bytes now (where the next entry will start).
    pub fn end_offset(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io(&self.path, "reading the journal", e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// True when a regular, non-empty file does not end with a newline.
fn ends_mid_line(file: &mut File) -> std::io::Result<bool> {
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// `state_dir/pending.jsonl`: a header line, then one intent per change a run is about to
/// try (the journal entry it would append, with its `change` id). Truncated, never deleted,
/// so that writing it needs no directory flush.
#[derive(Debug)]
pub struct Pending {
    file: File,
    path: PathBuf,
}

/// What a previous run left in `pending.jsonl`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Left {
    pub header: serde_json::Map<String, serde_json::Value>,
    pub intents: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Lines that were not whole JSON objects (a crash while they were written).
    pub damaged: usize,
}

impl Pending {
    /// Opens `state_dir/pending.jsonl`, creating the directory and the file if needed.
    pub fn open(state_dir: &Path) -> Result<Pending> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(PENDING_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .open(&path)
            .map_err(|e| Error::io(&path, "opening the pending-changes file", e))?;
        Ok(Pending { file, path })
    }

    /// True when `state_dir/pending.jsonl` exists and is not empty: a run was stopped
    /// before it settled its changes. Costs one `stat(2)`.
    pub fn left_behind(state_dir: &Path) -> bool {
        std::fs::metadata(state_dir.join(PENDING_FILE)).is_ok_and(|m| m.len() > 0)
    }

    /// Reads what is in the file; `None` when it is empty.
    pub fn read(&mut self) -> Result<Option<Left>> {
        let io = |e| Error::io(&self.path, "reading the pending-changes file", e);
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut text = String::new();
        (&self.file).read_to_string(&mut text).map_err(io)?;
        let mut left = Left::default();
        let mut first = true;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<serde_json::Value>(line) {
                Ok(serde_json::Value::Object(m)) if first => left.header = m,
                Ok(serde_json::Value::Object(m)) => left.intents.push(m),
                _ => left.damaged += 1,
            }
            first = false;
        }
        Ok((!first).then_some(left))
    }

    /// Replaces the file's contents with `header` and `intents` (each serialised as it is
    /// written, so that memory does not grow with their number), on disk before it returns.
    pub fn write(
        &mut self,
        header: &serde_json::Value,
        intents: &mut dyn Iterator<Item = serde_json::Value>,
    ) -> Result<()> {
        let path = self.path.clone();
        let io = move |e| Error::io(&path, "writing the pending-changes file", e);
        self.file.set_len(0).map_err(&io)?;
        self.file.seek(SeekFrom::Start(0)).map_err(&io)?;
        let mut out = std::io::BufWriter::new(&self.file);
        let line = |out: &mut std::io::BufWriter<&File>, v: &serde_json::Value| {
            serde_json::to_writer(&mut *out, v)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"))
        };
        line(&mut out, header).map_err(&io)?;
        for i in intents {
            line(&mut out, &i).map_err(&io)?;
        }
        out.flush().map_err(&io)?;
        drop(out);
        self.file.sync_data().map_err(&io)
    }

    /// Empties the file: every intent in it is settled.
    pub fn clear(&mut self) -> Result<()> {
        self.file
            .set_len(0)
            .map_err(|e| Error::io(&self.path, "clearing the pending-changes file", e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads the journal's entries from byte `offset` on (from the start when the file is now
/// shorter than that: it was rotated), handing each whole JSON object to `each`.
pub fn read_from(
    path: &Path,
    offset: u64,
    each: &mut dyn FnMut(serde_json::Map<String, serde_json::Value>),
) -> Result<()> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, "opening the journal", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io(path, "reading the journal", e))?
        .len();
    let start = if offset <= len { offset } else { 0 };
    file.seek(SeekFrom::Start(start))
        .map_err(|e| Error::io(path, "reading the journal", e))?;
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let (ended, too_long) = read_line(&mut reader, &mut buf)
            .map_err(|e| Error::io(path, "reading the journal", e))?;
        if buf.is_empty() && !ended && !too_long {
            return Ok(());
        }
        if !too_long && let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(&buf) {
            each(m);
        }
        if !ended {
            return Ok(());
        }
    }
}

/// A line of the journal that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    /// 1-based line number.
    pub line: u64,
    pub why: String,
}

/// What reading the journal found besides its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// The file does not exist (no change was ever journaled here).
    pub missing: bool,
    pub entries: u64,
    pub damaged: Vec<Damaged>,
}

impl ReadReport {
    /// One warning line for the damaged lines, if any.
    pub fn warning(&self, path: &Path) -> Option<String> {
        let first = self.damaged.first()?;
        let lines: Vec<String> = self
            .damaged
            .iter()
            .take(5)
            .map(|d| d.line.to_string())
            .collect();
        Some(format!(
            "{}: skipped {} damaged line{} (line {}{}; first: {}); the rest was read",
            path.display(),
            self.damaged.len(),
            if self.damaged.len() == 1 { "" } else { "s" },
            lines.join(", "),
            if self.damaged.len() > 5 { ", …" } else { "" },
            first.why
        ))
    }
}

/// Reads the journal at `path` line by line, handing every whole JSON object to `each`.
/// Damaged lines (cut by a crash, not JSON, not an object, not UTF-8, absurdly long) are
/// skipped and listed in the report. A missing file is an empty journal.
pub fn read(
    path: &Path,
    each: &mut dyn FnMut(serde_json::Map<String, serde_json::Value>),
) -> Result<ReadReport> {
    let mut report = ReadReport::default();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.missing = true;
            return Ok(report);
        }
        Err(e) => return Err(Error::io(path, "opening the journal", e)),
    };
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let (ended, too_long) = read_line(&mut reader, &mut buf)
            .map_err(|e| Error::io(path, "reading the journal", e))?;
        if buf.is_empty() && !ended && !too_long {
            break;
        }
        line_no += 1;
        let damaged = |why: String| Damaged { line: line_no, why };
        if too_long {
            report
                .damaged
                .push(damaged(format!("longer than {MAX_LINE} bytes")));
            continue;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            if !ended {
                break;
            }
            continue;
        }
        match serde_json::from_slice::<serde_json::Value>(&buf) {
            // Without a newline but whole: only the newline's write was cut. Take it.
            Ok(serde_json::Value::Object(map)) => {
                report.entries += 1;
                each(map);
            }
            Ok(_) => report.damaged.push(damaged("not a JSON object".into())),
            Err(e) if !ended || e.is_eof() => report
                .damaged
                .push(damaged("cut short (a crash while it was written?)".into())),
            Err(e) => report.damaged.push(damaged(format!("not JSON: {e}"))),
        }
        if !ended {
            break;
        }
    }
    Ok(report)
}

/// Reads one line into `buf` (without the newline), keeping at most [`MAX_LINE`] bytes.
/// Returns `(ended with a newline, was longer than MAX_LINE)`.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<(bool, bool)> {
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok((false, too_long));
        }
        let (take, found) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + take > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(take + usize::from(found));
        if found {
            return Ok((true, too_long));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(path: &Path) -> (Vec<serde_json::Value>, ReadReport) {
        let mut v = Vec::new();
        let rep = read(path, &mut |m| v.push(serde_json::Value::Object(m))).expect("read");
        (v, rep)
    }

    #[test]
    fn a_line_cut_in_half_is_skipped_and_the_next_append_starts_a_new_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::open(dir.path()).expect("open");
        j.append(&serde_json::json!({"id": 1})).expect("append");
        j.append(&serde_json::json!({"id": 2, "reason": "self-heal: dead"}))
            .expect("append");
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let text = std::fs::read_to_string(&path).expect("read");
        let cut = text.len() - 12;
        std::fs::write(&path, &text[..cut]).expect("cut");
        let (v, rep) = read_all(&path);
        assert_eq!(v, vec![serde_json::json!({"id": 1})]);
        assert_eq!(rep.damaged.len(), 1);
        assert_eq!(rep.damaged[0].line, 2);
        assert!(rep.damaged[0].why.contains("cut short"), "{rep:?}");

        let mut j = Journal::open(dir.path()).expect("reopen");
        j.append(&serde_json::json!({"id": 3})).expect("append");
        drop(j);
        let (v, rep) = read_all(&path);
        assert_eq!(
            v,
            vec![serde_json::json!({"id": 1}), serde_json::json!({"id": 3})]
        );
        assert_eq!(rep.entries, 2);
        assert_eq!(rep.damaged.len(), 1);
        assert!(
            rep.warning(&path)
                .is_some_and(|w| w.contains("skipped 1 damaged line (line 2")),
            "{rep:?}"
        );
    }

    #[test]
    fn garbage_of_every_kind_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(JOURNAL_FILE);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"{\"id\": 1}\n");
        bytes.extend_from_slice(b"[1, 2]\n");
        bytes.extend_from_slice(b"\n");
        bytes.extend_from_slice(b"\xff\xfe{\n");
        bytes.extend_from_slice(b"{\"id\": 2}{\"id\": 3}\n");
        bytes.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        bytes.extend_from_slice(b"\n{\"id\": 4}");
        std::fs::write(&path, &bytes).expect("write");
        let (v, rep) = read_all(&path);
        assert_eq!(
            v,
            vec![serde_json::json!({"id": 1}), serde_json::json!({"id": 4})]
        );
        let lines: Vec<u64> = rep.damaged.iter().map(|d| d.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6], "{rep:?}");
        assert!(rep.damaged[3].why.contains("longer than"), "{rep:?}");
    }

    #[test]
    fn a_missing_journal_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (v, rep) = read_all(&dir.path().join(JOURNAL_FILE));
        assert!(v.is_empty());
        assert!(rep.missing);
    }
}
