//! `state_dir`: what one run leaves for the next and for the operator — the journal and
//! the intents file ([`crate::journal`]), the confirmation counts, the reminders, and
//! `last-run.json`, the summary of the last real (not dry) run, for monitoring and for the
//! operator who asks "did it run, and what did it do?".
//!
//! Every touch of a state file goes through [`crate::fsafe`], by the functions here: the
//! directory is reached one component at a time without following a link someone else
//! could have planted, created (mode 0750) where missing, and must be private to the
//! running user ([`dir`]: owned by it, no group or other write bit; anything else is
//! [`Error::Refused`], exit 3, with the fix `runuser -u OWNER -- selfheal …`). A file
//! appended to or rewritten in place is opened by [`open`] (mode 0640, never through a
//! link, never one with other names or another owner; the caller then writes to the
//! descriptor), and a file replaced whole is written by [`replace`]: to a temporary file
//! with an unpredictable name beside it, flushed, then renamed over the old one, so a
//! reader sees the old file or the new one, never half of either. A typed state file (one
//! `#[derive(Serialize, Deserialize)]` value, read back only through that type) is
//! [`save_typed`] (or [`save_typed_unsynced`]) and [`load_typed`]. A new state file is a
//! new name and a type, nothing else.
//!
//! Reading does not ask for a private directory (`--explain` and `stats` may run as
//! another user), but never follows a link at a state file's name either.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::fsafe::Dir;

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

/// Mode of a state directory selfheal creates.
const DIR_MODE: u32 = 0o750;

/// What the state directory is called in messages.
pub const DIR_WHAT: &str = "state directory (run.state_dir)";

/// Reaches the state directory through [`crate::fsafe`], creating it (mode 0750) where
/// missing, and refuses it unless it is private to the running user: owned by it, and
/// writable by nobody else ([`Error::Refused`], exit 3). Whoever else can write it could
/// put a link or a file of theirs where selfheal writes next.
pub fn dir(state_dir: &Path) -> Result<Dir> {
    let dir = Dir::create(state_dir, DIR_MODE)
        .map_err(|e| Error::fsafe(e, "creating the state directory (run.state_dir)"))?;
    dir.check_private(DIR_WHAT)
        .map_err(|e| Error::fsafe(e, "using the state directory (run.state_dir)"))?;
    Ok(dir)
}

/// Creates the state directory (mode 0750) if it does not exist, and checks it is
/// private (see [`dir`]).
pub fn create_dir(state_dir: &Path) -> Result<()> {
    dir(state_dir).map(|_| ())
}

/// How a state file is opened by [`open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read, and append at the end (the journal).
    Append,
    /// Read and rewrite in place, never truncated on open (the intents file).
    ReadWrite,
}

/// Opens a state file, creating the directory and the file (mode 0640) when missing. An
/// existing file must be a regular file of the running user's with no other name; a link
/// at its name is refused, never followed.
pub fn open(state_dir: &Path, f: &StateFile, access: Access) -> Result<(File, PathBuf)> {
    let dir = dir(state_dir)?;
    let name = OsStr::new(f.name);
    let file = match access {
        Access::Append => dir.open_append(name, FILE_MODE),
        Access::ReadWrite => dir.open_rw(name, FILE_MODE),
    }
    .map_err(|e| Error::fsafe(e, f.opening))?;
    Ok((file, state_dir.join(f.name)))
}

/// Replaces a state file with `contents` (mode 0640): a temporary file with an
/// unpredictable name beside it, flushed, renamed into place, the directory flushed.
/// Creates the directory when missing.
pub fn replace(state_dir: &Path, f: &StateFile, contents: &[u8]) -> Result<PathBuf> {
    let dir = dir(state_dir)?;
    dir.replace(OsStr::new(f.name), FILE_MODE, |file| {
        file.write_all(contents)
    })
    .map_err(|e| Error::fsafe(e, f.writing))?;
    Ok(state_dir.join(f.name))
}

/// Replaces a state file with `value` as pretty JSON (see [`replace`]).
pub fn write_typed<T: Serialize>(state_dir: &Path, f: &StateFile, value: &T) -> Result<PathBuf> {
    save_typed(state_dir, f, value)
}

/// Reads a state file as a `T` (see [`load_typed`]).
pub fn read_typed<T: DeserializeOwned>(state_dir: &Path, f: &StateFile) -> Result<Option<T>> {
    load_typed(state_dir, f)
}

/// The largest state file [`load_typed`] reads: anything bigger is not one selfheal wrote.
const MAX_TYPED: u64 = 16 << 20;

/// Replaces a typed state file with `value` as pretty JSON, through [`replace`].
pub fn save_typed<T: Serialize>(state_dir: &Path, f: &StateFile, value: &T) -> Result<PathBuf> {
    replace(state_dir, f, &json_text(state_dir, f, value, true)?)
}

/// `value` as the text of the state file `f`: JSON (pretty or on one line) and a newline.
fn json_text<T: Serialize>(
    state_dir: &Path,
    f: &StateFile,
    value: &T,
    pretty: bool,
) -> Result<Vec<u8>> {
    let written = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    };
    let mut text = written
        .map_err(|e| Error::io(state_dir.join(f.name), f.writing, std::io::Error::other(e)))?;
    text.push(b'\n');
    Ok(text)
}

/// Reads a typed state file written by [`save_typed`], through [`crate::fsafe`] (a link at
/// its name is refused, not followed; at most 16 MiB is read). `Ok(None)` when it (or the
/// directory) does not exist; a file that is not a `T` is an error naming it.
pub fn load_typed<T: DeserializeOwned>(state_dir: &Path, f: &StateFile) -> Result<Option<T>> {
    use std::io::Read;
    let path = state_dir.join(f.name);
    let opened = Dir::open(state_dir).and_then(|dir| dir.open_read(OsStr::new(f.name)));
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(Error::fsafe(e, f.reading)),
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
    replace_unsynced(state_dir, f, &json_text(state_dir, f, value, false)?)
}

/// Replaces a typed state file with `value` as pretty JSON, as [`save_typed`] does but not
/// flushed to disk (see [`save_typed_unsynced`]).
pub fn save_typed_pretty_unsynced<T: Serialize>(
    state_dir: &Path,
    f: &StateFile,
    value: &T,
) -> Result<PathBuf> {
    replace_unsynced(state_dir, f, &json_text(state_dir, f, value, true)?)
}

/// Replaces a state file with `contents` (mode 0640) through a temporary file renamed into
/// place, not flushed to disk: a reader sees the old file or the new one, and after a crash
/// perhaps the old one.
fn replace_unsynced(state_dir: &Path, f: &StateFile, contents: &[u8]) -> Result<PathBuf> {
    let path = state_dir.join(f.name);
    let dir = dir(state_dir)?;
    let name = OsStr::new(f.name);
    let mut tmp = dir
        .create_temp(name, FILE_MODE)
        .map_err(|e| Error::fsafe(e, f.creating))?;
    tmp.file_mut()
        .write_all(contents)
        .map_err(|e| Error::io(&path, f.writing, e))?;
    tmp.persist(name).map_err(|e| Error::fsafe(e, f.writing))?;
    Ok(path)
}

/// Replaces `state_dir/last-run.json` with `report` (pretty JSON, mode 0640). A reader
/// sees the old file or the new one; it is not flushed to disk: it is for monitoring,
/// selfheal never reads it back, and every run writes it again (the changes themselves
/// are flushed in the journal).
pub fn write_last_run(state_dir: &Path, report: &serde_json::Value) -> Result<PathBuf> {
    save_typed_pretty_unsynced(state_dir, &LAST_RUN, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
    fn a_state_dir_others_can_write_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).expect("mkdir");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o770)).expect("chmod");
        let e = write_last_run(&state, &serde_json::json!({})).expect_err("group-writable");
        assert!(matches!(e, Error::Refused { .. }), "{e:?}");
        assert_eq!(e.exit_code(), crate::error::exit::FAILURE);
        assert!(e.to_string().contains("can be written by"), "{e}");
        let e = open(&state, &COUNTS, Access::Append).expect_err("group-writable");
        assert!(matches!(e, Error::Refused { .. }), "{e:?}");
        assert_eq!(std::fs::read_dir(&state).expect("ls").count(), 0);
        // Reading asks for no private directory.
        assert_eq!(load_typed::<Counts>(&state, &COUNTS).expect("read"), None);
    }

    #[test]
    fn an_unusable_state_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").expect("file");
        let err = write_last_run(&file.join("state"), &serde_json::json!({}))
            .expect_err("not a directory");
        // Named where the path stops being a directory.
        assert!(
            err.to_string()
                .starts_with(&format!("{}: creating the state directory", file.display())),
            "{err}"
        );
        assert_eq!(err.exit_code(), crate::error::exit::FAILURE);
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
