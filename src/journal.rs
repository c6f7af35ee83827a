//! The journal: one JSON line per applied change in `state_dir/journal.jsonl`, flushed to
//! disk before the change is reported. Opened only when a run is about to change a row,
//! so a healthy host needs no state directory at all.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const JOURNAL_FILE: &str = "journal.jsonl";

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Opens (creating the directory and file if needed) for appending.
    pub fn open(state_dir: &Path) -> Result<Journal> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(state_dir)
            .map_err(|e| Error::io(state_dir, "creating the state directory (run.state_dir)", e))?;
        let path = state_dir.join(JOURNAL_FILE);
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&path)
            .map_err(|e| Error::io(&path, "opening the journal", e))?;
        Ok(Journal { file, path })
    }

    /// Appends one entry as a single line and flushes it to disk.
    pub fn append(&mut self, entry: &serde_json::Value) -> Result<()> {
        let mut line = entry.to_string();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, "writing the journal", e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
