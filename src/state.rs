//! `state_dir`: what one run leaves for the next and for the operator — the journal and
//! the intents file ([`crate::journal`]), and `last-run.json`, the summary of the last real
//! (not dry) run, for monitoring and for the operator who asks "did it run, and what did it
//! do?".
//!
//! Every path-based touch of a state file goes through the three functions here: the
//! directory is created by [`create_dir`] (mode 0750, when missing), an appended or
//! rewritten-in-place file is opened by [`open`] (mode 0640; the caller then writes to the
//! descriptor), and a file replaced whole is written by [`replace`]: to a unique temporary
//! file in the same directory, flushed, then renamed over the old one, so a reader sees the
//! old file or the new one, never half of either. A typed state file (one
//! `#[derive(Serialize, Deserialize)]` value, read back only through that type) is
//! [`write_typed`] and [`read_typed`], or — for the files that go through
//! [`crate::fsafe`], never following a link someone else could have planted —
//! [`save_typed`] and [`load_typed`] (the cron text's reminders). A new state file is a
//! new name and a type, nothing else.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// A file in `state_dir`: its name, and how an error speaks of each thing done to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFile {
    pub name: &'static str,
    /// "opening the journal".
    pub opening: &'static str,
    pub reading: &'static str,
    pub writing: &'static str,
    /// "creating a temporary file for last-run.json" (files replaced whole).
    pub creating: &'static str,
}

pub const LAST_RUN_FILE: &str = "last-run.json";

/// `last-run.json`.
pub const LAST_RUN: StateFile = StateFile {
    name: LAST_RUN_FILE,
    opening: "opening last-run.json",
    reading: "reading last-run.json",
    writing: "writing last-run.json",
    creating: "creating a temporary file for last-run.json",
};

/// Mode of every state file: the run's user writes, its group reads.
const FILE_MODE: u32 = 0o640;

/// Creates the state directory (mode 0750) if it does not exist.
pub fn create_dir(state_dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(state_dir)
        .map_err(|e| Error::io(state_dir, "creating the state directory (run.state_dir)", e))
}

/// How a state file is opened by [`open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read, and append at the end (the journal).
    Append,
    /// Read and rewrite in place, never truncated on open (the intents file).
    ReadWrite,
}

/// Opens a state file, creating the directory and the file (mode 0640) when missing.
pub fn open(state_dir: &Path, f: &StateFile, access: Access) -> Result<(File, PathBuf)> {
    create_dir(state_dir)?;
    let path = state_dir.join(f.name);
    let mut o = OpenOptions::new();
    o.read(true).create(true).mode(FILE_MODE);
    match access {
        Access::Append => o.append(true),
        Access::ReadWrite => o.write(true).truncate(false),
    };
    let file = o.open(&path).map_err(|e| Error::io(&path, f.opening, e))?;
    Ok((file, path))
}

/// Replaces a state file with `contents` (mode 0640): a unique temporary file beside it,
/// flushed, renamed into place. Creates the directory when missing.
pub fn replace(state_dir: &Path, f: &StateFile, contents: &[u8]) -> Result<PathBuf> {
    create_dir(state_dir)?;
    let path = state_dir.join(f.name);
    let io = |action: &'static str| move |e: std::io::Error| Error::io(state_dir, action, e);
    let stem = f.name.split('.').next().unwrap_or(f.name);
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{stem}."))
        .suffix(".tmp")
        .tempfile_in(state_dir)
        .map_err(io(f.creating))?;
    tmp.write_all(contents)
        .and_then(|()| tmp.as_file().sync_data())
        .and_then(|()| {
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
        })
        .map_err(io(f.writing))?;
    tmp.persist(&path)
        .map_err(|e| Error::io(&path, "renaming into place", e.error))?;
    Ok(path)
}

/// Replaces a state file with `value` as pretty JSON (see [`replace`]).
pub fn write_typed<T: Serialize>(state_dir: &Path, f: &StateFile, value: &T) -> Result<PathBuf> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::io(state_dir.join(f.name), f.writing, std::io::Error::other(e)))?;
    text.push('\n');
    replace(state_dir, f, text.as_bytes())
}

/// Reads a state file as a `T`. `Ok(None)` when the file does not exist; a file that is
/// not a `T` is an error naming it (the caller decides whether that is fatal).
pub fn read_typed<T: DeserializeOwned>(state_dir: &Path, f: &StateFile) -> Result<Option<T>> {
    let path = state_dir.join(f.name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, f.reading, e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::io(
            &path,
            f.reading,
            std::io::Error::new(ErrorKind::InvalidData, e),
        )
    })
}

/// The largest state file [`load_typed`] reads: anything bigger is not one selfheal wrote.
const MAX_TYPED: u64 = 16 << 20;

/// An [`crate::fsafe`] failure as selfheal's error, naming the path once.
fn from_fsafe(e: crate::fsafe::Error, action: &'static str) -> Error {
    let path = e.path().to_path_buf();
    match e {
        crate::fsafe::Error::Io { source, .. } => Error::io(path, action, source),
        other => {
            let text = other.to_string();
            let prefix = format!("{}: ", path.display());
            let why = text.strip_prefix(&prefix).unwrap_or(&text).to_string();
            Error::io(path, action, std::io::Error::other(why))
        }
    }
}

/// Replaces a typed state file with `value` as pretty JSON, through [`crate::fsafe`]: the
/// directory is reached (and created, mode 0750, where missing) one component at a time
/// without following a link someone else could have planted, the file is written to an
/// unpredictable temporary name beside it (mode 0640), flushed, and renamed over the old
/// one.
pub fn save_typed<T: Serialize>(state_dir: &Path, f: &StateFile, value: &T) -> Result<PathBuf> {
    let path = state_dir.join(f.name);
    let mut text = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::io(&path, f.writing, std::io::Error::other(e)))?;
    text.push(b'\n');
    let dir = crate::fsafe::Dir::create(state_dir, 0o750).map_err(|e| from_fsafe(e, f.creating))?;
    dir.replace(std::ffi::OsStr::new(f.name), FILE_MODE, |file| {
        file.write_all(&text)
    })
    .map_err(|e| from_fsafe(e, f.writing))?;
    Ok(path)
}

/// Reads a typed state file written by [`save_typed`], through [`crate::fsafe`] (a link at
/// its name is refused, not followed; at most 16 MiB is read). `Ok(None)` when it (or the
/// directory) does not exist; a file that is not a `T` is an error naming it.
pub fn load_typed<T: DeserializeOwned>(state_dir: &Path, f: &StateFile) -> Result<Option<T>> {
    use std::io::Read;
    let path = state_dir.join(f.name);
    let opened = crate::fsafe::Dir::open(state_dir)
        .and_then(|dir| dir.open_read(std::ffi::OsStr::new(f.name)));
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(from_fsafe(e, f.reading)),
    };
    let mut text = Vec::new();
    file.take(MAX_TYPED)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(&path, f.reading, e))?;
    serde_json::from_slice(&text).map(Some).map_err(|e| {
        Error::io(
            &path,
            f.reading,
            std::io::Error::new(ErrorKind::InvalidData, e),
        )
    })
}

/// Replaces a typed state file whose loss costs little (a later run only starts over)
/// with `value` as JSON, as [`save_typed`] does but not flushed to disk: a reader sees the
/// old file or the new one, and after a crash perhaps the old one.
pub fn save_typed_unsynced<T: Serialize>(
    state_dir: &Path,
    f: &StateFile,
    value: &T,
) -> Result<PathBuf> {
    let path = state_dir.join(f.name);
    let mut text = serde_json::to_vec(value)
        .map_err(|e| Error::io(&path, f.writing, std::io::Error::other(e)))?;
    text.push(b'\n');
    let dir = crate::fsafe::Dir::create(state_dir, 0o750).map_err(|e| from_fsafe(e, f.creating))?;
    let name = std::ffi::OsStr::new(f.name);
    let mut tmp = dir
        .create_temp(name, FILE_MODE)
        .map_err(|e| from_fsafe(e, f.creating))?;
    tmp.file_mut()
        .write_all(&text)
        .map_err(|e| Error::io(&path, f.writing, e))?;
    tmp.persist(name).map_err(|e| from_fsafe(e, f.writing))?;
    Ok(path)
}

/// Replaces `state_dir/last-run.json` with `report` (pretty JSON, mode 0640).
pub fn write_last_run(state_dir: &Path, report: &serde_json::Value) -> Result<PathBuf> {
    write_typed(state_dir, &LAST_RUN, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_report_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let p = write_last_run(&state, &serde_json::json!({"n": 1})).expect("write");
        write_last_run(&state, &serde_json::json!({"n": 2})).expect("write");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
        assert_eq!(v["n"], 2);
        let names: Vec<String> = std::fs::read_dir(&state)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![LAST_RUN_FILE.to_string()]);
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn an_unusable_state_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").expect("file");
        let err = write_last_run(&file.join("state"), &serde_json::json!({}))
            .expect_err("not a directory");
        assert!(err.to_string().contains("a-file/state"), "{err}");
    }

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Counts {
        rows: Vec<(String, u32)>,
    }

    const COUNTS: StateFile = StateFile {
        name: "c.json",
        opening: "opening c.json",
        reading: "reading c.json",
        writing: "writing c.json",
        creating: "creating a temporary file for c.json",
    };

    #[test]
    fn a_typed_state_file_reads_back_as_its_type() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            read_typed::<Counts>(dir.path(), &COUNTS).expect("read"),
            None
        );
        let c = Counts {
            rows: vec![("full-sync/7".into(), 2)],
        };
        write_typed(dir.path(), &COUNTS, &c).expect("write");
        assert_eq!(read_typed(dir.path(), &COUNTS).expect("read"), Some(c));
        std::fs::write(dir.path().join("c.json"), "{\"rows\": 3}").expect("damage");
        let e = read_typed::<Counts>(dir.path(), &COUNTS).expect_err("damaged");
        assert!(e.to_string().contains("c.json"), "{e}");
    }

    #[test]
    fn a_typed_state_file_goes_through_fsafe_and_reads_back_as_its_type() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        assert_eq!(load_typed::<Counts>(&state, &COUNTS).expect("read"), None);
        let c = Counts {
            rows: vec![("full-sync/7".into(), 2)],
        };
        let p = save_typed(&state, &COUNTS, &c).expect("write");
        assert_eq!(load_typed(&state, &COUNTS).expect("read"), Some(c));
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // A link planted at the name is neither read through nor written through.
        std::fs::remove_file(&p).expect("remove");
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "{\"rows\": []}").expect("write");
        std::os::unix::fs::symlink(&elsewhere, &p).expect("symlink");
        let e = load_typed::<Counts>(&state, &COUNTS).expect_err("a link");
        assert!(e.to_string().contains("c.json"), "{e}");
        save_typed(&state, &COUNTS, &Counts { rows: Vec::new() }).expect("replaces the link");
        assert_eq!(
            std::fs::read_to_string(&elsewhere).expect("read"),
            "{\"rows\": []}",
            "the link's target is untouched"
        );
        std::fs::write(&p, "[1]").expect("damage");
        assert!(load_typed::<Counts>(&state, &COUNTS).is_err());
    }

    #[test]
    fn an_unsynced_typed_file_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let c = Counts {
            rows: vec![("full-sync/7".into(), 2)],
        };
        let p = save_typed_unsynced(&state, &COUNTS, &c).expect("write");
        assert_eq!(load_typed(&state, &COUNTS).expect("read"), Some(c));
        save_typed_unsynced(&state, &COUNTS, &Counts { rows: vec![] }).expect("write");
        assert_eq!(
            load_typed(&state, &COUNTS).expect("read"),
            Some(Counts { rows: vec![] })
        );
        let c = Counts { rows: vec![] };
        let names: Vec<String> = std::fs::read_dir(&state)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["c.json".to_string()], "no temporary file left");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // A link planted at the name is replaced, never written through.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "theirs").expect("target");
        std::fs::remove_file(&p).expect("rm");
        std::os::unix::fs::symlink(&target, &p).expect("link");
        save_typed_unsynced(&state, &COUNTS, &c).expect("write");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "theirs");
        assert!(
            !std::fs::symlink_metadata(&p)
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        // A state directory that is a file: an error naming it.
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").expect("file");
        let e = save_typed_unsynced(&file.join("state"), &COUNTS, &c).expect_err("not a dir");
        assert!(e.to_string().contains("a-file"), "{e}");
    }

    #[test]
    fn state_files_are_opened_for_appending_or_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let (mut f, p) = open(&state, &COUNTS, Access::Append).expect("open");
        f.write_all(b"a\n").expect("write");
        let (mut f, _) = open(&state, &COUNTS, Access::Append).expect("reopen");
        f.write_all(b"b\n").expect("write");
        assert_eq!(std::fs::read_to_string(&p).expect("read"), "a\nb\n");
        let (_f, _) = open(&state, &COUNTS, Access::ReadWrite).expect("in place");
        assert_eq!(
            std::fs::read_to_string(&p).expect("read"),
            "a\nb\n",
            "not truncated"
        );
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }
}
