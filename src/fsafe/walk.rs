//! The walk: from `/` to a directory, one component at a time, each opened
//! `O_PATH|O_DIRECTORY|O_NOFOLLOW` relative to the handle of the one before, following a
//! symbolic link only when nobody but root and the running user could have planted it or
//! can replace it. See the rules in [`crate::fsafe`].

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::error::{Error, Who, other_writers};
use super::{MAX_LINKS, euid};

/// How often one name may be looked at again after it changed under the walk (a directory
/// created, or swapped concurrently): a bound so that nobody can keep the walk spinning.
const MAX_RETRIES: usize = 40;

/// A directory reached by the walk.
pub(super) struct Level {
    pub fd: OwnedFd,
    pub stat: Stat,
    /// The path the walk took to get here (after following links), for messages.
    pub shown: PathBuf,
}

/// The names under `/` that `path` consists of. Refuses an empty or relative path, a `..`
/// component and a NUL byte: selfheal's files are named by absolute, plain paths.
pub(super) fn names(path: &Path) -> Result<Vec<OsString>, Error> {
    let bad = |problem| Error::BadPath {
        path: path.to_path_buf(),
        problem,
    };
    if path.as_os_str().is_empty() {
        return Err(bad("an empty path"));
    }
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(bad("the path contains a NUL byte"));
    }
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return Err(bad(
            "not an absolute path (selfheal's files are named from /)",
        ));
    }
    let mut out = Vec::new();
    for c in comps {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(bad(
                    "a '..' component is not accepted in the path of a file selfheal writes",
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad("not a plain absolute path"));
            }
        }
    }
    Ok(out)
}

fn stat_err(path: &Path, component: &Path, action: &'static str, e: Errno) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        component: Some(component.to_path_buf()),
        action,
        source: e.into(),
    }
}

fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// Opens `/`.
fn root(path: &Path) -> Result<Level, Error> {
    let root = Path::new("/");
    let fd = rustix::fs::openat(
        CWD,
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| stat_err(path, root, "opening", e))?;
    let stat =
        rustix::fs::fstat(&fd).map_err(|e| stat_err(path, root, "reading the status of", e))?;
    Ok(Level {
        fd,
        stat,
        shown: root.to_path_buf(),
    })
}

/// Walks `names` from `/` (`path` is what they came from, for messages). With `create`,
/// missing directories are made with that mode (less the umask).
pub(super) fn walk(path: &Path, names: &[OsString], create: Option<u32>) -> Result<Level, Error> {
    let me = euid();
    // Names still to walk, the next one last.
    let mut todo: Vec<OsString> = names.iter().rev().cloned().collect();
    let mut cur = root(path)?;
    // The directories above `cur`, `/` first; `..` in a link's target goes back up these.
    let mut parents: Vec<Level> = Vec::new();
    let mut links = 0usize;
    let mut retries = 0usize;

    while let Some(name) = todo.pop() {
        if name.is_empty() || name == "." {
            continue;
        }
        if name == ".." {
            if let Some(up) = parents.pop() {
                cur = up;
            }
            continue;
        }
        let here = cur.shown.join(&name);
        let opened = rustix::fs::openat(
            &cur.fd,
            name.as_os_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let open_err = match opened {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd)
                    .map_err(|e| stat_err(path, &here, "reading the status of", e))?;
                if !is_dir(&stat) {
                    return Err(Error::NotADirectory {
                        path: path.to_path_buf(),
                        component: here,
                    });
                }
                let next = Level {
                    fd,
                    stat,
                    shown: here,
                };
                parents.push(std::mem::replace(&mut cur, next));
                retries = 0;
                continue;
            }
            Err(e) => e,
        };
        // Not opened: find out what is there, without following it.
        match rustix::fs::statat(&cur.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                let link_owner_trusted = st.st_uid == 0 || st.st_uid == me;
                let dir_writers = other_writers(
                    cur.stat.st_uid,
                    cur.stat.st_gid,
                    cur.stat.st_mode & 0o7777,
                    me,
                );
                if !link_owner_trusted || !dir_writers.is_empty() {
                    return Err(Error::UntrustedLink {
                        path: path.to_path_buf(),
                        component: here,
                        link_owner: Who::of(st.st_uid),
                        link_owner_trusted,
                        dir_writers,
                    });
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(Error::TooManyLinks {
                        path: path.to_path_buf(),
                        component: here,
                    });
                }
                // Nobody else can write this directory, so the link read is the one checked.
                let target = rustix::fs::readlinkat(&cur.fd, name.as_os_str(), Vec::new())
                    .map_err(|e| stat_err(path, &here, "reading the symbolic link", e))?;
                let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                if target.as_os_str().is_empty() {
                    return Err(stat_err(
                        path,
                        &here,
                        "following the symbolic link",
                        Errno::NOENT,
                    ));
                }
                if target.has_root() {
                    parents.truncate(1);
                    if let Some(slash) = parents.pop() {
                        cur = slash;
                    }
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => todo.push(n.to_os_string()),
                        Component::ParentDir => todo.push("..".into()),
                        Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
                    }
                }
            }
            Ok(st) if is_dir(&st) => {
                // A directory now; a symbolic link or nothing when opened (swapped
                // meanwhile): look again. Anything else (no permission) is the answer.
                if !matches!(open_err, Errno::LOOP | Errno::NOTDIR | Errno::NOENT)
                    || retries >= MAX_RETRIES
                {
                    return Err(stat_err(path, &here, "opening", open_err));
                }
                retries += 1;
                todo.push(name);
            }
            Ok(_) => {
                return Err(Error::NotADirectory {
                    path: path.to_path_buf(),
                    component: here,
                });
            }
            Err(Errno::NOENT) => {
                let Some(mode) = create else {
                    return Err(stat_err(path, &here, "opening", Errno::NOENT));
                };
                if retries >= MAX_RETRIES {
                    return Err(stat_err(path, &here, "creating", Errno::NOENT));
                }
                retries += 1;
                match rustix::fs::mkdirat(&cur.fd, name.as_os_str(), Mode::from_raw_mode(mode)) {
                    // Created here, or by someone else meanwhile: open whatever is there now
                    // by the same rules.
                    Ok(()) | Err(Errno::EXIST) => todo.push(name),
                    Err(e) => return Err(stat_err(path, &here, "creating", e)),
                }
            }
            Err(e) => return Err(stat_err(path, &here, "opening", e)),
        }
    }
    Ok(cur)
}
