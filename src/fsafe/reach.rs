//! Reaching a file before opening it: a name is first reached with an
//! `O_PATH|O_NOFOLLOW` descriptor, which opens nothing (no device driver, no FIFO, no
//! terminal is told), and its type is checked by `fstat` on that descriptor; only a regular
//! file is then opened, through that very descriptor (`/proc/self/fd/N`), so a FIFO,
//! device or socket planted at the name — or swapped in after it was looked at — is never
//! opened (docs/design.md#file-safety).
//!
//! [`reach`] is for reading evidence (lock and heartbeat files, `selfheal run`'s report):
//! a symbolic link at the name is followed as reading usually does, unless a user other
//! than root, the running user and the link's owner can write its directory — there a link
//! may have been planted, and it is not followed. [`reopen`] opens a reached regular file
//! for reading or writing; [`crate::fsafe::Dir`] uses it for every file it opens.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::{Kind, Stat, swappable_by};

/// What is at a name, reached without opening it.
#[derive(Debug)]
pub enum Reached {
    /// A regular file: an `O_PATH` descriptor on it (opens nothing; [`reopen`] opens it),
    /// and its status.
    File(OwnedFd, Stat),
    /// Nothing at that name (or a link to nothing).
    Absent,
    /// Something else: a FIFO, a device, a socket, a directory, or a symbolic link where
    /// another user could have planted it (its status, from the `O_PATH` descriptor).
    /// Never opened.
    Other(Stat),
}

/// Reaches the file at `path` to read it as evidence (see the module documentation): an
/// `O_PATH|O_NOFOLLOW` descriptor and `fstat` on it; a link followed (again `O_PATH`) only
/// when nobody but root, the running user and its owner can write its directory. Errors
/// keep the kernel's code (`NotFound` for a missing directory, `PermissionDenied`, …).
pub fn reach(path: &Path) -> io::Result<Reached> {
    let fd = match rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Reached::Absent),
        Err(e) => return Err(e.into()),
    };
    let st = Stat::from(rustix::fs::fstat(&fd)?);
    let (fd, st) = if st.kind == Kind::Symlink {
        if planted_by_another(path, st.uid) {
            return Ok(Reached::Other(st));
        }
        let fd = match rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(Reached::Absent),
            Err(e) => return Err(e.into()),
        };
        let st = Stat::from(rustix::fs::fstat(&fd)?);
        (fd, st)
    } else {
        (fd, st)
    };
    Ok(if st.kind == Kind::File {
        Reached::File(fd, st)
    } else {
        Reached::Other(st)
    })
}

/// What is at `path`, looked at and never opened: its status when it is a regular file
/// (`Ok(Some)`), `Ok(None)` when nothing is there, `Err(status)` for anything else. The same
/// rule as [`reach`] for a link (followed unless another user could have planted it), in
/// one `statx` for the usual regular file: for evidence that is a file's status alone (a
/// heartbeat's mtime), no descriptor is needed.
pub fn look(path: &Path) -> io::Result<Result<Option<Stat>, Stat>> {
    let at = |flags| match rustix::fs::statat(rustix::fs::CWD, path, flags) {
        Ok(st) => Ok(Some(Stat::from(st))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(io::Error::from(e)),
    };
    let Some(st) = at(rustix::fs::AtFlags::SYMLINK_NOFOLLOW)? else {
        return Ok(Ok(None));
    };
    let st = if st.kind == Kind::Symlink {
        if planted_by_another(path, st.uid) {
            return Ok(Err(st));
        }
        match at(rustix::fs::AtFlags::empty())? {
            Some(st) => st,
            None => return Ok(Ok(None)),
        }
    } else {
        st
    };
    Ok(if st.kind == Kind::File {
        Ok(Some(st))
    } else {
        Err(st)
    })
}

/// True when a user other than root, the running user and `link_uid` can write the
/// directory of `path` (or it cannot be looked at): a link there is not followed.
fn planted_by_another(path: &Path, link_uid: u32) -> bool {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) => swappable_by(m.uid(), m.gid(), m.mode() & 0o7777, link_uid).is_some(),
        Err(_) => true,
    }
}

/// Opens the regular file `reached` (an `O_PATH` descriptor whose type was checked) with
/// `flags` (plus `O_NONBLOCK|O_NOCTTY|O_CLOEXEC`, never `O_CREAT`), through
/// `/proc/self/fd/N`: the kernel opens the very inode the descriptor holds, whatever is at
/// its name by now. The result is checked to be that inode again.
pub fn reopen(reached: &OwnedFd, flags: OFlags) -> io::Result<OwnedFd> {
    let flags = (flags - OFlags::CREATE - OFlags::EXCL - OFlags::NOFOLLOW)
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let fd = rustix::fs::open(
        format!("/proc/self/fd/{}", reached.as_raw_fd()),
        flags,
        Mode::empty(),
    )?;
    let (was, is) = (
        Stat::from(rustix::fs::fstat(reached)?),
        Stat::from(rustix::fs::fstat(&fd)?),
    );
    if was.id != is.id || is.kind != Kind::File {
        return Err(io::Error::other(
            "the file changed while it was opened through its descriptor",
        ));
    }
    Ok(fd)
}

/// [`reach`], then [`reopen`] for reading: the regular file at `path`, opened read-only
/// and non-blocking; anything else is never opened ([`Opened`]).
pub fn open_evidence(path: &Path) -> io::Result<Opened> {
    Ok(match reach(path)? {
        Reached::File(fd, _) => Opened::File(File::from(reopen(&fd, OFlags::RDONLY)?)),
        Reached::Absent => Opened::Absent,
        Reached::Other(st) => Opened::Other(st.kind),
    })
}

/// What [`open_evidence`] found.
#[derive(Debug)]
pub enum Opened {
    /// The regular file, open for reading.
    File(File),
    Absent,
    /// Not a regular file (never opened).
    Other(Kind),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO, a device, a directory and a link to a device are reached and never opened;
    /// a regular file is opened through its descriptor; a missing one is absent.
    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        let link = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &link).expect("symlink");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        assert!(matches!(
            open_evidence(&fifo).expect("fifo"),
            Opened::Other(Kind::Fifo)
        ));
        assert!(matches!(
            open_evidence(&link).expect("link"),
            Opened::Other(Kind::CharDevice)
        ));
        assert!(matches!(
            open_evidence(Path::new("/dev/null")).expect("null"),
            Opened::Other(Kind::CharDevice)
        ));
        assert!(matches!(
            open_evidence(dir.path()).expect("dir"),
            Opened::Other(Kind::Dir)
        ));
        assert!(matches!(
            open_evidence(&dir.path().join("none")).expect("none"),
            Opened::Absent
        ));
        assert!(matches!(
            open_evidence(&file).expect("file"),
            Opened::File(_)
        ));
    }
}
