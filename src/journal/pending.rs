//! `state_dir/pending.jsonl`: the intents of the changes a run is about to try — a header
//! ([`IntentsHeader`]) then one [`JournalEntry`] per change, with its `change` id — on disk
//! before the first compare-and-set, emptied once every applied change is journaled.
//! Truncated, never deleted, so that writing it needs no directory flush. What a stopped
//! run left is settled by [`crate::recovery`].

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::entry::{JournalEntry, to_line};
use crate::error::{Error, Result};
use crate::state::{self, Access, StateFile};
use crate::store::Session;

/// Intents of the changes a run is about to make (empty between runs).
pub const PENDING_FILE: &str = "pending.jsonl";

pub const FILE: StateFile = StateFile {
    name: PENDING_FILE,
    opening: "opening the pending-changes file",
    reading: "reading the pending-changes file",
    writing: "writing the pending-changes file",
    creating: "creating the pending-changes file",
};

/// The first line of the intents file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IntentsHeader {
    /// The run that wrote the intents.
    pub run: String,
    /// The journal's length when they were written: their journal lines, if any, follow.
    pub journal_offset: u64,
    /// The run's database session, which may still hold a write (MySQL).
    pub session: Option<Session>,
    pub time: String,
}

#[derive(Debug)]
pub struct Pending {
    file: File,
    path: PathBuf,
}

/// What a previous run left in `pending.jsonl`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Left {
    /// The default when the header line was damaged.
    pub header: IntentsHeader,
    pub intents: Vec<JournalEntry>,
    /// Lines that were not whole entries (a crash while they were written).
    pub damaged: usize,
}

impl Pending {
    /// Opens `state_dir/pending.jsonl`, creating the directory and the file if needed.
    pub fn open(state_dir: &Path) -> Result<Pending> {
        let (file, path) = state::open(state_dir, &FILE, Access::ReadWrite)?;
        Ok(Pending { file, path })
    }

    /// True when `state_dir/pending.jsonl` exists and is not empty: a run was stopped
    /// before it settled its changes. Costs one `stat(2)`.
    pub fn left_behind(state_dir: &Path) -> bool {
        std::fs::metadata(state_dir.join(PENDING_FILE)).is_ok_and(|m| m.len() > 0)
    }

    /// Reads what is in the file; `None` when it is empty.
    pub fn read(&mut self) -> Result<Option<Left>> {
        let io = |e| Error::io(&self.path, FILE.reading, e);
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut text = String::new();
        (&self.file).read_to_string(&mut text).map_err(io)?;
        let mut left = Left::default();
        let mut first = true;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if first {
                match serde_json::from_str::<IntentsHeader>(line) {
                    Ok(h) => left.header = h,
                    Err(_) => left.damaged += 1,
                }
            } else {
                match serde_json::from_str::<JournalEntry>(line) {
                    Ok(e) => left.intents.push(e),
                    Err(_) => left.damaged += 1,
                }
            }
            first = false;
        }
        Ok((!first).then_some(left))
    }

    /// Replaces the file's contents with `header` and `intents` (each serialised as it is
    /// written, so that memory does not grow with their number), on disk before it returns.
    pub fn write(
        &mut self,
        header: &IntentsHeader,
        intents: &mut dyn Iterator<Item = JournalEntry>,
    ) -> Result<()> {
        let path = self.path.clone();
        let io = move |e| Error::io(&path, FILE.writing, e);
        self.file.set_len(0).map_err(&io)?;
        self.file.seek(SeekFrom::Start(0)).map_err(&io)?;
        let mut out = std::io::BufWriter::new(&self.file);
        let line = |out: &mut std::io::BufWriter<&File>, l: serde_json::Result<Vec<u8>>| {
            l.map_err(std::io::Error::from)
                .and_then(|l| out.write_all(&l))
        };
        line(&mut out, to_line(header)).map_err(&io)?;
        for i in intents {
            line(&mut out, to_line(&i)).map_err(&io)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RowId;

    /// A header line exactly as the release before `IntentsHeader` wrote it.
    const HEADER: &str = r#"{"journal_offset":1734,"run":"vm:28367:1772712000032254313","session":{"connection":42,"server_started":1772000000},"time":"2026-03-05T12:00:00Z"}"#;

    #[test]
    fn intents_round_trip_and_damage_is_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = Pending::open(dir.path()).expect("open");
        assert_eq!(p.read().expect("read"), None);
        let header: IntentsHeader = serde_json::from_str(HEADER).expect("header");
        assert_eq!(header.journal_offset, 1734);
        assert_eq!(header.session.map(|s| s.connection), Some(42));
        let intent = |n: i64| JournalEntry {
            change: format!("{}/{n}", header.run),
            watch: "w".into(),
            id: RowId::Int(n),
            applied: true,
            ..JournalEntry::default()
        };
        p.write(&header, &mut (1..=2).map(intent)).expect("write");
        assert!(Pending::left_behind(dir.path()));
        let text = std::fs::read_to_string(p.path()).expect("text");
        assert_eq!(
            text.lines().next(),
            Some(HEADER),
            "the header as it was written"
        );
        let left = p.read().expect("read").expect("left");
        assert_eq!(left.header, header);
        assert_eq!(left.intents, vec![intent(1), intent(2)]);
        assert_eq!(left.damaged, 0);

        std::fs::write(
            p.path(),
            format!("{HEADER}\n{{\"watch\":\"w\",\"id\":3}}\n{{\"wat"),
        )
        .expect("cut");
        let left = p.read().expect("read").expect("left");
        assert_eq!((left.intents.len(), left.damaged), (1, 1));
        p.clear().expect("clear");
        assert!(!Pending::left_behind(dir.path()));
    }
}
