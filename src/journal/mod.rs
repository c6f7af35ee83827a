//! The journal: one JSON line per applied change in `state_dir/journal.jsonl`. Opened only
//! when a run is about to change a row.
//!
//! Every change has an id (`change`), and goes through `state_dir/pending.jsonl` first:
//! before a watch's first compare-and-set, the entries it may write are put there as
//! intents and flushed to disk ([`Pending::begin`]); each applied change is then appended
//! to the journal with one `write(2)` right after its compare-and-set, the journal is
//! flushed once after the watch's writes ([`Journal::sync`]), and the intents are cleared.
//! A run killed anywhere in between (even between a compare-and-set and its journal line)
//! leaves intents behind, and the next run settles them ([`crate::check::recovery`]): an intent
//! whose change the database shows applied, as selfheal's, and the journal does not list is
//! journaled then, marked `recovered`; one whose change cannot be told as selfheal's is
//! journaled with its `outcome` (`unknown`, `unmatched`), never as a change. So the journal
//! lists every applied change exactly once, and two flushes per watch replace one per row.
//!
//! Every entry names the database it was made in ([`DatabaseId`]: scheme, host and
//! database name, or the SQLite file; never a user or password): `stats`, `doctor` and
//! recovery use only entries of the configured database ([`read_all`]), so two
//! configurations sharing a state directory never read each other's rows. Entries written
//! before the database was recorded are taken as the configured database's.
//!
//! **Rotation.** A run that opens the journal at [`ROTATE_AT`] bytes or more, or that has
//! written it past that by the end of a write group ([`Journal::sync`]), first renames
//! it to `journal.jsonl.1` (the older generations move up to `.2`, `.3`, …), through
//! [`crate::fsafe`]; then generations past [`GENERATIONS`] are dropped, oldest first — but
//! never one that holds a change of the run that rotates: a run's own changes stay in the
//! journal until it ends (a run of 100,000 changes keeps all of them, for `show` and
//! `stats` and un-parking), and the next run's first rotation brings the journal back to
//! [`GENERATIONS`]. So disk use stays below about `(GENERATIONS + 1) × ROTATE_AT` plus one
//! run's own changes. A drop is remembered in `journal.cut` ([`Cut`]), so readers can say
//! that history before the oldest generation was rotated away rather than "none".
//! [`read_all`] reads every generation, oldest first. Recovery finds entries by change id
//! in every generation ([`journaled`]), never by file offset, so a rotation between a
//! stopped run and the run that settles it loses nothing.
//!
//! **Damage.** A crash mid-write can leave a last line cut in half, and anything may be in
//! a file on disk. Writers and readers both survive it: [`Journal::open`] ends such a line
//! before appending, so the next entry starts on a line of its own, and the readers skip
//! every line that is not one whole journal entry (cut short, not JSON, not UTF-8, longer
//! than [`MAX_LINE`] — the rest of an overlong line is skipped without being held),
//! counting them for one warning per file instead of failing or silently losing the rest.
//! Memory stays bounded: lines are read one at a time, a report keeps counts and at most
//! [`EXAMPLES`] examples, and [`read_all`] reads at most the last [`READ_AT_MOST`] bytes
//! of each generation (only a file that grew before rotation existed, or that something
//! else wrote, is larger).
//!
//! Every line is a [`JournalEntry`] (`entry.rs`), and the journal is read back only as
//! such, so its format is fixed in one place and never follows `--format json` by accident.
//! Files are opened through [`crate::state`]; the rotation renames through
//! [`crate::fsafe`].

mod entry;
mod pending;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use entry::{DatabaseId, Found, JournalEntry, Outcome, OutcomeBasis, RowId};
pub use pending::{
    Group, IntentsHeader, Left, Origin, PENDING_FILE, Pending, parse as parse_intents,
};

use crate::error::{Error, Result};
use crate::host::Host;
use crate::state::{self, Access, StateFile};

pub const JOURNAL_FILE: &str = "journal.jsonl";

/// The journal is rotated when a run opens it at this size or more (8 MiB: some 10,000
/// changes).
pub const ROTATE_AT: u64 = 8 << 20;

/// Rotated generations kept: `journal.jsonl.1` (the newest) to `journal.jsonl.3` — more
/// while one run's own changes fill more (see the module documentation).
pub const GENERATIONS: u32 = 3;

/// How many generations a reader looks for at most (a journal is never near this: it
/// would take a single run of millions of changes).
const MOST_GENERATIONS: u32 = 10_000;

/// `journal.cut`: when generations were last dropped.
const CUT_FILE: StateFile = StateFile {
    name: "journal.cut",
    opening: "opening journal.cut",
    reading: "reading journal.cut",
    writing: "writing journal.cut",
    creating: "creating a temporary file for journal.cut",
};

/// That older generations of the journal were dropped, and when (the last time): its
/// history before the oldest generation left is gone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cut {
    /// When (UTC, RFC 3339).
    pub dropped_at: String,
}

/// Whether the journal in `state_dir` has lost generations to rotation (`None`: never, or
/// the note cannot be read).
pub fn cut(state_dir: &Path) -> Option<Cut> {
    state::load_typed::<Cut>(state_dir, &CUT_FILE)
        .ok()
        .flatten()
}

/// The highest generation number in `state_dir` (0: only the journal itself, or none).
fn highest_generation(state_dir: &Path) -> u32 {
    (1..=MOST_GENERATIONS)
        .take_while(|n| state_dir.join(generation(*n)).exists())
        .last()
        .unwrap_or(0)
}

/// [`read_all`] reads at most this many bytes of each generation: its end.
pub const READ_AT_MOST: u64 = 2 * ROTATE_AT;

const FILE: StateFile = StateFile {
    name: JOURNAL_FILE,
    opening: "opening the journal",
    reading: "reading the journal",
    writing: "writing the journal",
    creating: "creating the journal",
};

/// Lines longer than this are not journal entries (an entry is well under 4 KiB); they are
/// skipped without being held in memory.
pub const MAX_LINE: usize = 1 << 20;

/// How many damaged lines a report describes (all are counted).
pub const EXAMPLES: usize = 5;

/// The name of generation `n`: `journal.jsonl` for 0, `journal.jsonl.N` after it.
pub fn generation(n: u32) -> String {
    if n == 0 {
        JOURNAL_FILE.to_string()
    } else {
        format!("{JOURNAL_FILE}.{n}")
    }
}

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    state_dir: PathBuf,
    /// Bytes in the file, and appended to it: a run that writes past [`ROTATE_AT`]
    /// rotates it after a flush.
    len: u64,
    /// Whole lines appended since the last write, written by [`Journal::sync`] in one
    /// `write(2)` (or sooner, past [`BUFFERED`]).
    buf: Vec<u8>,
    /// Rotations this run made: generations `.1` to this one hold its changes, and are
    /// kept until it ends.
    rotations: u32,
}

/// Lines a journal holds before it writes them without waiting for a sync.
const BUFFERED: usize = 256 * 1024;

impl Journal {
    /// Opens (creating the directory and file if needed) for appending, rotating it first
    /// when it has reached [`ROTATE_AT`]. A last line cut by a crash is ended first, so it
    /// damages only itself.
    pub fn open(state_dir: &Path) -> Result<Journal> {
        let (mut file, mut path) = state::open(state_dir, &FILE, Access::Append)?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(&path, "reading the journal", e))?
            .len();
        if len >= ROTATE_AT {
            drop(file);
            // Nothing of this run's is in it yet: back to GENERATIONS.
            rotate(state_dir, 0)?;
            (file, path) = state::open(state_dir, &FILE, Access::Append)?;
        }
        let cut =
            ends_mid_line(&mut file).map_err(|e| Error::io(&path, "reading the journal", e))?;
        if cut {
            file.write_all(b"\n")
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io(&path, "writing the journal", e))?;
        }
        let len = file.metadata().map_or(0, |m| m.len());
        Ok(Journal {
            file,
            path,
            state_dir: state_dir.to_path_buf(),
            len,
            buf: Vec::new(),
            rotations: 0,
        })
    }

    /// Appends one entry as a single line. Lines are written together, whole, by
    /// [`Journal::sync`] (one `write(2)`, then one flush to disk for a write group): a
    /// process killed before it has left them unwritten, and their intents (written and
    /// flushed before the compare-and-sets) still name every change, for the next run to
    /// settle ([`crate::check::recovery`]).
    pub fn append(&mut self, entry: &JournalEntry) -> Result<()> {
        let line = entry::to_line(entry)
            .map_err(|e| Error::io(&self.path, "writing the journal", e.into()))?;
        self.len = self
            .len
            .saturating_add(u64::try_from(line.len()).unwrap_or(u64::MAX));
        self.buf.extend_from_slice(&line);
        if self.buf.len() >= BUFFERED {
            self.write_buffered()?;
        }
        Ok(())
    }

    /// Writes the lines appended since the last write.
    fn write_buffered(&mut self) -> Result<()> {
        let r = self.file.write_all(&self.buf);
        self.buf.clear();
        r.map_err(|e| Error::io(&self.path, "writing the journal", e))
    }

    /// Writes what was appended and flushes it to disk; then, when the file has reached
    /// [`ROTATE_AT`], rotates it (also inside a run: a backlog of a million changes keeps
    /// the journal's disk use bounded, and recovery finds a change by its id in any
    /// generation).
    pub fn sync(&mut self) -> Result<()> {
        self.write_buffered()?;
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, "writing the journal", e))?;
        if self.len >= ROTATE_AT {
            // This run's changes are in the current file, and in the generations its
            // earlier rotations made: none of them is dropped.
            self.rotations = self.rotations.saturating_add(1);
            rotate(&self.state_dir, self.rotations)?;
            let (file, path) = state::open(&self.state_dir, &FILE, Access::Append)?;
            self.len = file.metadata().map_or(0, |m| m.len());
            (self.file, self.path) = (file, path);
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Journal {
    /// Lines appended and never synced (a run that stopped on an error) are still
    /// written, unflushed: the journal is as complete as it can be, and any change
    /// among them whose intent stays is found in it by its id.
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.file.write_all(&self.buf);
        }
    }
}

/// Every generation moves up one (`journal.jsonl` → `.1`, `.1` → `.2`, …; each `renameat`
/// in the state directory reached by [`crate::fsafe`] and checked private
/// ([`state::dir`])), then those past `max(GENERATIONS, own)` are removed, the directory
/// flushed, and a drop noted in `journal.cut`. `own`: how many generations hold changes of
/// the run that rotates (its rotations so far, this one included; 0 at its start). A run
/// still appending to the old file (another configuration sharing the directory) goes on
/// writing into `.1`, which is read like the rest.
fn rotate(state_dir: &Path, own: u32) -> Result<()> {
    let action = "rotating the journal";
    let dir = state::dir(state_dir)?;
    let highest = highest_generation(state_dir);
    for n in (0..=highest).rev() {
        let from = generation(n);
        let from = OsStr::new(&from);
        match dir.stat_at(from) {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(e) => return Err(Error::fsafe(e, action)),
        }
        dir.rename(from, OsStr::new(&generation(n + 1)))
            .map_err(|e| Error::fsafe(e, action))?;
    }
    let keep = GENERATIONS.max(own);
    let mut dropped = false;
    for n in keep.saturating_add(1)..=highest.saturating_add(1) {
        dropped |= dir
            .unlink(OsStr::new(&generation(n)))
            .map_err(|e| Error::fsafe(e, action))?;
    }
    dir.sync().map_err(|e| Error::fsafe(e, action))?;
    if dropped {
        let cut = Cut {
            dropped_at: crate::clock::now_rfc3339(),
        };
        state::save_typed_unsynced(state_dir, &CUT_FILE, &cut)?;
    }
    Ok(())
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

/// A line of the journal that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    /// 1-based line number (counted from where reading started).
    pub line: u64,
    pub why: String,
}

/// What reading one journal file found besides the entries it handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// The file does not exist (no change was ever journaled here).
    pub missing: bool,
    /// Whole entries read (those of another database included).
    pub entries: u64,
    /// Entries of another database, not handed on ([`read_all`]).
    pub other_database: u64,
    /// Damaged lines skipped.
    pub damaged: u64,
    /// The first [`EXAMPLES`] of them.
    pub examples: Vec<Damaged>,
    /// Bytes at the start of the file that were not read ([`READ_AT_MOST`]).
    pub not_read: u64,
}

impl ReadReport {
    fn damage(&mut self, line: u64, why: impl FnOnce() -> String) {
        self.damaged += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(Damaged { line, why: why() });
        }
    }

    /// One warning line for the damaged lines and the part not read, if any.
    pub fn warning(&self, path: &Path) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(first) = self.examples.first() {
            let lines: Vec<String> = self.examples.iter().map(|d| d.line.to_string()).collect();
            parts.push(format!(
                "skipped {} damaged line{} (line {}{}; first: {})",
                self.damaged,
                if self.damaged == 1 { "" } else { "s" },
                lines.join(", "),
                if self.damaged > EXAMPLES as u64 {
                    ", …"
                } else {
                    ""
                },
                first.why
            ));
        }
        if self.not_read > 0 {
            parts.push(format!(
                "read only its last {} MiB, not the {} bytes before them (the journal rotates \
                 at {} MiB; this file grew before it did)",
                READ_AT_MOST >> 20,
                self.not_read,
                ROTATE_AT >> 20
            ));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "{}: {}; the rest was read",
                path.display(),
                parts.join("; ")
            )
        })
    }
}

/// Reads the journal at `path` line by line, handing every whole entry to `each`.
/// Damaged lines (cut by a crash, not JSON, not an entry, not UTF-8, absurdly long) are
/// skipped and counted in the report. A missing file is an empty journal.
pub fn read(path: &Path, each: &mut dyn FnMut(JournalEntry)) -> Result<ReadReport> {
    read_file(path, None, each)
}

/// [`read`], of at most the last `at_most` bytes (from the first line that starts in
/// them).
fn read_file(
    path: &Path,
    at_most: Option<u64>,
    each: &mut dyn FnMut(JournalEntry),
) -> Result<ReadReport> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ReadReport {
                missing: true,
                ..ReadReport::default()
            });
        }
        Err(e) => return Err(Error::io(path, "opening the journal", e)),
    };
    let io = |e| Error::io(path, "reading the journal", e);
    let len = file.metadata().map_err(io)?.len();
    let start = at_most.map_or(0, |max| len.saturating_sub(max));
    let mut reader = BufReader::new(file);
    if start > 0 {
        // Into the byte before: the line under way there is skipped whole, so a line that
        // starts exactly at `start` is read.
        reader.seek(SeekFrom::Start(start - 1)).map_err(io)?;
        skip_line(&mut reader).map_err(io)?;
    }
    let mut report = read_entries(reader, each).map_err(io)?;
    report.not_read = start;
    Ok(report)
}

/// Skips to just after the next newline.
fn skip_line(r: &mut impl BufRead) -> std::io::Result<()> {
    let mut sink = Vec::new();
    read_line(r, &mut sink, 0).map(|_| ())
}

/// Reads journal lines from `r`, handing every whole entry to `each`; the report counts
/// what was skipped. Fails only when `r` does.
pub fn read_entries(
    r: impl Read,
    each: &mut dyn FnMut(JournalEntry),
) -> std::io::Result<ReadReport> {
    let mut report = ReadReport::default();
    let mut reader = BufReader::new(r);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let (ended, too_long) = read_line(&mut reader, &mut buf, MAX_LINE)?;
        if buf.is_empty() && !ended && !too_long {
            break;
        }
        line_no += 1;
        if too_long {
            report.damage(line_no, || format!("longer than {MAX_LINE} bytes"));
        } else if buf.iter().all(u8::is_ascii_whitespace) {
            // A blank line: nothing lost.
        } else {
            match serde_json::from_slice::<serde_json::Value>(&buf) {
                // Without a newline but whole: only the newline's write was cut. Take it.
                Ok(v @ serde_json::Value::Object(_)) => match serde_json::from_value(v) {
                    Ok(e) => {
                        report.entries += 1;
                        each(e);
                    }
                    Err(e) => report.damage(line_no, || format!("not a journal entry: {e}")),
                },
                Ok(_) => report.damage(line_no, || "not a JSON object".into()),
                Err(e) if !ended || e.is_eof() => report.damage(line_no, || {
                    "cut short (a crash while it was written?)".into()
                }),
                Err(e) => report.damage(line_no, || format!("not JSON: {e}")),
            }
        }
        if !ended {
            break;
        }
    }
    Ok(report)
}

/// Reads one line into `buf` (without the newline), keeping at most `max` bytes; the rest
/// of a longer line is read past without being kept. Returns `(ended with a newline, was
/// longer than max)`.
pub(crate) fn read_line(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(bool, bool)> {
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((false, too_long));
        }
        let (line, found) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (chunk.get(..i).unwrap_or_default(), true),
            None => (chunk, false),
        };
        let take = line.len();
        if !too_long {
            if buf.len() + take > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(line);
            }
        }
        r.consume(take + usize::from(found));
        if found {
            return Ok((true, too_long));
        }
    }
}

/// What [`read_all`] found in each generation, oldest first.
#[derive(Debug, Clone, Default)]
pub struct JournalRead {
    pub files: Vec<(PathBuf, ReadReport)>,
    /// Older generations were dropped: history before the oldest entry read is gone.
    pub cut: Option<Cut>,
    /// When the oldest entry handed on was journaled.
    pub oldest: Option<String>,
}

impl JournalRead {
    /// When history was cut, in words, for a reader that found nothing older: "the journal
    /// holds entries since T; older ones were rotated away" — `None` when nothing was
    /// dropped.
    pub fn cut_words(&self) -> Option<String> {
        self.cut.as_ref().map(|c| match &self.oldest {
            Some(t) => format!(
                "the journal holds entries since {t}; older ones were rotated away (last at {})",
                c.dropped_at
            ),
            None => format!("older entries were rotated away (last at {})", c.dropped_at),
        })
    }
}

impl JournalRead {
    /// No generation exists.
    pub fn missing(&self) -> bool {
        self.files.iter().all(|(_, r)| r.missing)
    }

    /// Entries of the configured database handed on.
    pub fn entries(&self) -> u64 {
        self.files
            .iter()
            .map(|(_, r)| r.entries - r.other_database)
            .sum()
    }

    pub fn other_database(&self) -> u64 {
        self.files.iter().map(|(_, r)| r.other_database).sum()
    }

    pub fn damaged(&self) -> u64 {
        self.files.iter().map(|(_, r)| r.damaged).sum()
    }

    /// One warning per file with damaged lines or a part not read.
    pub fn warnings(&self) -> Vec<String> {
        self.files
            .iter()
            .filter_map(|(p, r)| r.warning(p))
            .collect()
    }
}

/// Reads every generation of the journal in `state_dir`, oldest first (at most the last
/// [`READ_AT_MOST`] bytes of each), handing on the entries of the database `db` (and
/// those that name none: written before the database was recorded).
pub fn read_all(
    state_dir: &Path,
    db: &DatabaseId,
    each: &mut dyn FnMut(JournalEntry),
) -> Result<JournalRead> {
    let mut read = JournalRead {
        cut: cut(state_dir),
        ..JournalRead::default()
    };
    for n in (0..=highest_generation(state_dir).max(GENERATIONS)).rev() {
        let path = state_dir.join(generation(n));
        let mut other = 0u64;
        let oldest = &mut read.oldest;
        let mut report = read_file(&path, Some(READ_AT_MOST), &mut |e| {
            if db.owns(e.database.as_ref()) {
                if oldest.is_none() {
                    *oldest = Some(e.time.clone());
                }
                each(e);
            } else {
                other += 1;
            }
        })?;
        report.other_database = other;
        // An absent older generation is the usual case: not worth listing.
        if n == 0 || !report.missing {
            read.files.push((path, report));
        }
    }
    Ok(read)
}

/// Which of the change ids `wanted` the journal lists, in any generation (each read
/// whole: a stopped run's entries may be anywhere in them). Memory follows `wanted`.
pub fn journaled(state_dir: &Path, wanted: &HashSet<String>) -> Result<HashSet<String>> {
    let mut found = HashSet::new();
    if wanted.is_empty() {
        return Ok(found);
    }
    for n in (0..=highest_generation(state_dir).max(GENERATIONS)).rev() {
        read_file(&state_dir.join(generation(n)), None, &mut |e| {
            if wanted.contains(&e.change) {
                found.insert(e.change);
            }
        })?;
    }
    Ok(found)
}

/// The journal and the intents file, opened before a run's first change.
pub struct Writer {
    pub journal: Journal,
    pub pending: Pending,
    /// The configuration and database the run's entries and intents are tagged with.
    pub origin: Origin,
}

impl Writer {
    pub fn open(state_dir: &Path, origin: Origin) -> Result<Writer> {
        Ok(Writer {
            journal: Journal::open(state_dir)?,
            pending: Pending::open(state_dir)?,
            origin,
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

    fn read_all_of(path: &Path) -> (Vec<RowId>, ReadReport) {
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
        let (v, rep) = read_all_of(&path);
        assert_eq!(v, vec![RowId::Int(1)]);
        assert_eq!(rep.damaged, 1);
        assert_eq!(rep.examples[0].line, 2);
        assert!(rep.examples[0].why.contains("cut short"), "{rep:?}");

        let mut j = Journal::open(dir.path()).expect("reopen");
        j.append(&entry(3)).expect("append");
        drop(j);
        let (v, rep) = read_all_of(&path);
        assert_eq!(v, vec![RowId::Int(1), RowId::Int(3)]);
        assert_eq!(rep.entries, 2);
        assert_eq!(rep.damaged, 1);
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
    fn garbage_of_every_kind_is_skipped_and_only_counted() {
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
        for _ in 0..100 {
            bytes.extend_from_slice(b"{\"id\": \xc3\x28}\n");
        }
        bytes.extend_from_slice(b"{\"id\": 4}");
        std::fs::write(&path, &bytes).expect("write");
        let (v, rep) = read_all_of(&path);
        assert_eq!(v, vec![RowId::Int(1), RowId::Int(4)]);
        let lines: Vec<u64> = rep.examples.iter().map(|d| d.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6, 7], "{rep:?}");
        assert_eq!(rep.damaged, 105);
        assert!(rep.examples[3].why.contains("longer than"), "{rep:?}");
        assert!(
            rep.examples[4].why.contains("not a journal entry"),
            "{rep:?}"
        );
        let w = rep.warning(&path).expect("warning");
        assert!(
            w.contains("skipped 105 damaged lines (line 2, 4, 5, 6, 7, …"),
            "{w}"
        );
    }

    #[test]
    fn a_missing_journal_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (v, rep) = read_all_of(&dir.path().join(JOURNAL_FILE));
        assert!(v.is_empty());
        assert!(rep.missing);
    }

    fn db(path: &str) -> DatabaseId {
        DatabaseId {
            scheme: "sqlite".into(),
            path: Some(path.into()),
            ..DatabaseId::default()
        }
    }

    #[test]
    fn the_journal_rotates_and_every_generation_is_read_by_database_and_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = db("/srv/a.db");
        let change = |n: u64, d: Option<&DatabaseId>| JournalEntry {
            change: format!("r/{n}"),
            database: d.cloned(),
            ..entry(i64::try_from(n).expect("n"))
        };
        // Generation after generation: each opened at ROTATE_AT moves up one.
        let big = vec![b'x'; usize::try_from(ROTATE_AT).expect("size")];
        for n in 0..5u64 {
            let mut j = Journal::open(dir.path()).expect("open");
            j.append(&change(n, Some(&ours))).expect("append");
            j.append(&change(100 + n, Some(&db("/srv/b.db"))))
                .expect("append");
            j.append(&change(200 + n, None)).expect("append");
            j.file.write_all(b"\n").expect("nl");
            j.file.write_all(&big).expect("fill");
            j.file.write_all(b"\n").expect("nl");
        }
        let names: Vec<bool> = (0..=GENERATIONS + 1)
            .map(|n| dir.path().join(generation(n)).exists())
            .collect();
        assert_eq!(
            names,
            [true, true, true, true, false],
            "three generations kept"
        );
        let mut seen = Vec::new();
        let read = read_all(dir.path(), &ours, &mut |e| seen.push(e.change)).expect("read");
        // The oldest (changes 0 and 200) was dropped; the rest, oldest first, this
        // database's and the unmarked ones only.
        assert_eq!(
            seen,
            [
                "r/1", "r/201", "r/2", "r/202", "r/3", "r/203", "r/4", "r/204"
            ]
        );
        assert_eq!((read.entries(), read.other_database()), (8, 4));
        assert_eq!(
            read.damaged(),
            4,
            "the filler line of each generation: longer than MAX_LINE"
        );
        let wanted: HashSet<String> = ["r/0", "r/1", "r/104", "r/204", "r/9"]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        let found = journaled(dir.path(), &wanted).expect("journaled");
        let mut found: Vec<String> = found.into_iter().collect();
        found.sort();
        assert_eq!(found, ["r/1", "r/104", "r/204"]);
    }

    /// A run that writes more than ROTATE_AT rotates the journal itself, at a flush (the
    /// end of a write group), and every change is still found by its id.
    #[test]
    fn a_long_run_rotates_the_journal_as_it_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let mut j = Journal::open(&state).expect("open");
        let mut n = 0i64;
        let mut wanted = HashSet::new();
        let change = |n: i64| JournalEntry {
            change: format!("run/{n}"),
            ..entry(n)
        };
        while j.len < ROTATE_AT + 1 {
            let e = change(n);
            wanted.insert(e.change.clone());
            j.append(&e).expect("append");
            n += 1;
            if n % 100 == 0 {
                j.sync().expect("sync");
            }
        }
        j.sync().expect("sync");
        assert!(state.join(generation(1)).exists(), "rotated inside the run");
        assert!(j.len < ROTATE_AT);
        let last = change(n);
        wanted.insert(last.change.clone());
        j.append(&last).expect("append");
        j.sync().expect("sync");
        assert!(wanted.len() > 10_000);
        assert_eq!(journaled(&state, &wanted).expect("read"), wanted);
    }

    /// A run's own changes are never rotated away before it ends, however many rotations
    /// it makes; the next run's first rotation drops the oldest earlier generations and
    /// notes the cut, which readers report.
    #[test]
    fn a_runs_own_changes_stay_until_it_ends_and_the_next_run_trims() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let db = db("/var/lib/app.db");
        let change = |run: &str, n: i64| JournalEntry {
            change: format!("{run}/{n}"),
            database: Some(db.clone()),
            time: format!("2026-12-01T00:00:{:02}Z", n % 60),
            ..entry(n)
        };
        // An earlier run's generation.
        let mut j = Journal::open(&state).expect("open");
        j.append(&change("early", 0)).expect("append");
        j.sync().expect("sync");
        drop(j);
        // A big run: five times the rotation size, in write groups (long notes make few
        // lines of it).
        let mut j = Journal::open(&state).expect("open");
        let mut own = HashSet::new();
        let (mut n, mut written) = (0i64, 0u64);
        while written < 5 * ROTATE_AT {
            let e = JournalEntry {
                note: Some("x".repeat(8_000)),
                ..change("big", n)
            };
            own.insert(e.change.clone());
            j.append(&e).expect("append");
            written += 8_000;
            n += 1;
            if n % 200 == 0 {
                j.sync().expect("sync");
            }
        }
        j.sync().expect("sync");
        assert!(j.rotations > GENERATIONS, "rotations: {}", j.rotations);
        assert_eq!(
            journaled(&state, &own).expect("read"),
            own,
            "every own change"
        );
        drop(j);
        // The next run opens the journal at its bound: back to GENERATIONS, and the cut is
        // noted.
        std::fs::write(
            state.join(JOURNAL_FILE),
            vec![b'\n'; usize::try_from(ROTATE_AT).expect("size")],
        )
        .expect("fill");
        let j = Journal::open(&state).expect("open");
        drop(j);
        assert_eq!(highest_generation(&state), GENERATIONS);
        let read = read_all(&state, &db, &mut |_| {}).expect("read");
        assert!(read.cut.is_some(), "the cut is noted");
        let words = read.cut_words().expect("words");
        assert!(
            words.starts_with("the journal holds entries since 2026-12-01T00:00:")
                && words.contains("older ones were rotated away"),
            "{words}"
        );
    }

    #[test]
    fn only_the_end_of_an_overgrown_generation_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(JOURNAL_FILE);
        let mut bytes = Vec::new();
        let line = to_line_bytes(&entry(1));
        let n = usize::try_from(READ_AT_MOST).expect("size") / line.len() + 10;
        for _ in 0..n {
            bytes.extend_from_slice(&line);
        }
        bytes.extend_from_slice(&to_line_bytes(&entry(2)));
        std::fs::write(&path, &bytes).expect("write");
        let mut count = 0u64;
        let read = read_all(dir.path(), &db("/x"), &mut |_| count += 1).expect("read");
        let (_, rep) = &read.files[0];
        assert_eq!(rep.damaged, 0, "reading starts at a whole line");
        assert!(rep.not_read > 0 && rep.not_read < 2 * line.len() as u64 * 10);
        assert_eq!(count, read.entries());
        assert!(count < n as u64 && count > n as u64 - 20, "{count} of {n}");
        assert!(read.warnings()[0].contains("read only its last 16 MiB"));
    }

    fn to_line_bytes(e: &JournalEntry) -> Vec<u8> {
        entry::to_line(e).expect("line")
    }
}
