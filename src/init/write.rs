//! `--write FILE`: the file must not exist. It is refused at once when something is there
//! (before the database is opened), and created whole or not at all, never over another
//! file or through a link ([`crate::fsafe::Dir::write_new`]). I/O: that file.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Command;
use crate::error::{Error, Origin, Result};

/// The file `--write` names, absolute; refused at once when something is there already,
/// or its directory is missing (before the database is even opened).
pub(super) fn write_target(p: &Path, cmd: &Command<'_>) -> Result<PathBuf> {
    let cli = Origin::CommandLine;
    let path = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::Io {
                path: p.to_path_buf(),
                action: "finding the current directory for",
                source: e,
            })?
            .join(p)
    };
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(exists(&path, cmd));
    }
    match path.parent() {
        Some(dir) if dir.is_dir() => Ok(path),
        _ => Err(Error::config(
            &cli,
            "--write",
            format!(
                "{}: its directory does not exist; selfheal init creates the file, not the \
                 directory",
                path.display()
            ),
        )),
    }
}

pub(super) fn exists(path: &Path, cmd: &Command<'_>) -> Error {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|s| format!(".{}", s.to_string_lossy()))
        .unwrap_or_default();
    let free = (1..100)
        .map(|i| {
            let n = if i == 1 {
                format!("{stem}.new{ext}")
            } else {
                format!("{stem}.new{i}{ext}")
            };
            path.with_file_name(n)
        })
        .find(|p| std::fs::symlink_metadata(p).is_err());
    Error::config(
        &Origin::CommandLine,
        "--write",
        format!(
            "{} exists already: selfheal init never overwrites a file",
            path.display()
        ),
    )
    .with_fix(free.map(|p| cmd.line(None, Some(&p))))
}

/// Writes the proposal to `path`, which must still not exist.
pub(super) fn write_file(path: &Path, text: &str, cmd: &Command<'_>) -> Result<()> {
    let refused = |e| Error::Refused {
        action: "writing the configuration (--write)",
        refused: Box::new(e),
    };
    let (dir, name) = crate::fsafe::Dir::open_parent(path).map_err(refused)?;
    let wrote = dir
        .write_new(&name, 0o644, |f| f.write_all(text.as_bytes()))
        .map_err(refused)?;
    if wrote {
        Ok(())
    } else {
        Err(exists(path, cmd))
    }
}
