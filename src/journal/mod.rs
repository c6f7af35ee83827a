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
//! line of its own, and [`read`] skips every line that is not one whole journal entry,
//! reporting where, instead of failing or silently losing the rest.
//!
//! Every line is a [`JournalEntry`] (`entry.rs`), and the journal is read back only as
//! such, so its format is fixed in one place and never follows `--format json` by accident.
//! Files are opened through [`crate::state`].

mod entry;
mod pending;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use entry::{JournalEntry, RowId};
pub use pending::{IntentsHeader, Left, PENDING_FILE, Pending};

use crate::error::{Error, Result};
use crate::host::Host;
use crate::state::{self, Access, StateFile};

pub const JOURNAL_FILE: &str = "journal.jsonl";

const FILE: StateFile = StateFile {
    name: JOURNAL_FILE,
    opening: "opening the journal",
    reading: "reading the journal",
    writing: "writing the journal",
    creating: "creating the journal",
};

/// Lines longer than this are not journal entries (an entry is well under 4 KiB); they are
/// skipped without being held in memory.
const MAX_LINE: usize = 1 << 20;

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Opens (creating the directory and file if needed) for appending. A last line cut
    /// by a crash is ended first, so it damages only itself.
    pub fn open(state_dir: &Path) -> Result<Journal> {
        let (mut file, path) = state::open(state_dir, &FILE, Access::Append)?;
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
    pub fn append(&mut self, entry: &JournalEntry) -> Result<()> {
        entry::to_line(entry)
            .map_err(std::io::Error::from)
            .and_then(|line| self.file.write_all(&line))
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

/// Reads the journal's entries from byte `offset` on (from the start when the file is now
/// shorter than that: it was rotated), handing each whole entry to `each`.
pub fn read_from(path: &Path, offset: u64, each: &mut dyn FnMut(JournalEntry)) -> Result<()> {
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
        if !too_long && let Ok(e) = serde_json::from_slice::<JournalEntry>(&buf) {
            each(e);
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

/// Reads the journal at `path` line by line, handing every whole entry to `each`.
/// Damaged lines (cut by a crash, not JSON, not an entry, not UTF-8, absurdly long) are
/// skipped and listed in the report. A missing file is an empty journal.
pub fn read(path: &Path, each: &mut dyn FnMut(JournalEntry)) -> Result<ReadReport> {
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
            Ok(v @ serde_json::Value::Object(_)) => match serde_json::from_value(v) {
                Ok(e) => {
                    report.entries += 1;
                    each(e);
                }
                Err(e) => report
                    .damaged
                    .push(damaged(format!("not a journal entry: {e}"))),
            },
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

/// The journal and the intents file, opened before a run's first change.
pub struct Writer {
    pub journal: Journal,
    pub pending: Pending,
}

impl Writer {
    pub fn open(state_dir: &Path) -> Result<Writer> {
        Ok(Writer {
            journal: Journal::open(state_dir)?,
            pending: Pending::open(state_dir)?,
        })
    }
}

/// A run's id (`HOST:PID:NANOS`), and the ids of its changes (`RUN/N`), which tie the
/// journal's entries to the intents in `pending.jsonl`.
pub struct RunId {
    id: String,
    next: std::cell::Cell<u64>,
}

impl RunId {
    pub fn new(host: &Host) -> RunId {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        RunId {
            id: format!("{}:{}:{nanos}", host.name, std::process::id()),
            next: std::cell::Cell::new(1),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The id of the run's next change.
    pub fn change(&self) -> String {
        let n = self.next.get();
        self.next.set(n + 1);
        format!("{}/{n}", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i64) -> JournalEntry {
        JournalEntry {
            watch: "w".into(),
            id: RowId::Int(id),
            reason: "self-heal: dead".into(),
            ..JournalEntry::default()
        }
    }

    fn read_all(path: &Path) -> (Vec<RowId>, ReadReport) {
        let mut v = Vec::new();
        let rep = read(path, &mut |e| v.push(e.id)).expect("read");
        (v, rep)
    }

    #[test]
    fn a_line_cut_in_half_is_skipped_and_the_next_append_starts_a_new_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::open(dir.path()).expect("open");
        j.append(&entry(1)).expect("append");
        j.append(&entry(2)).expect("append");
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let text = std::fs::read_to_string(&path).expect("read");
        let cut = text.len() - 12;
        std::fs::write(&path, &text[..cut]).expect("cut");
        let (v, rep) = read_all(&path);
        assert_eq!(v, vec![RowId::Int(1)]);
        assert_eq!(rep.damaged.len(), 1);
        assert_eq!(rep.damaged[0].line, 2);
        assert!(rep.damaged[0].why.contains("cut short"), "{rep:?}");

        let mut j = Journal::open(dir.path()).expect("reopen");
        j.append(&entry(3)).expect("append");
        drop(j);
        let (v, rep) = read_all(&path);
        assert_eq!(v, vec![RowId::Int(1), RowId::Int(3)]);
        assert_eq!(rep.entries, 2);
        assert_eq!(rep.damaged.len(), 1);
        assert!(
            rep.warning(&path)
                .is_some_and(|w| w.contains("skipped 1 damaged line (line 2")),
            "{rep:?}"
        );
        // What is read back is what was written.
        let mut all = Vec::new();
        read(&path, &mut |e| all.push(e)).expect("read");
        assert_eq!(all, vec![entry(1), entry(3)]);
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
        bytes.extend_from_slice(b"\n{\"id\": 5, \"verdict\": \"gone\"}\n");
        bytes.extend_from_slice(b"{\"id\": 4}");
        std::fs::write(&path, &bytes).expect("write");
        let (v, rep) = read_all(&path);
        assert_eq!(v, vec![RowId::Int(1), RowId::Int(4)]);
        let lines: Vec<u64> = rep.damaged.iter().map(|d| d.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6, 7], "{rep:?}");
        assert!(rep.damaged[3].why.contains("longer than"), "{rep:?}");
        assert!(
            rep.damaged[4].why.contains("not a journal entry"),
            "{rep:?}"
        );
        // Reading from an offset skips the same lines.
        let mut from = Vec::new();
        read_from(&path, 0, &mut |e| from.push(e.id)).expect("read_from");
        assert_eq!(from, v);
    }

    #[test]
    fn a_missing_journal_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (v, rep) = read_all(&dir.path().join(JOURNAL_FILE));
        assert!(v.is_empty());
        assert!(rep.missing);
    }
}
