//! Safe file access for a process that may run as root over directories less trusted users
//! own: every file selfheal writes, renames or removes is reached through this module
//! (docs/design.md#writes).
//!
//! **The walk.** A path is reached one component at a time from `/`: each directory is
//! opened `O_PATH|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC` relative to the handle of the one
//! before, and the resulting [`Dir`] is a handle, not a name. Everything after that is
//! relative to the handle, the last component always without following a link:
//! `openat(O_NOFOLLOW)`, `fstatat(AT_SYMLINK_NOFOLLOW)`, `renameat`, `unlinkat`, `mkdirat`,
//! `linkat`. A directory renamed or swapped for a link after it was reached does not move
//! the handle: writes land in the directory that was checked.
//!
//! **What is trusted.** A symbolic link on the way is followed only when both
//! - the link is owned by root or by the running (effective) user, and
//! - the directory holding it is owned by root or the running user and has no group or
//!   other write bit — so nobody else can have planted the link or replace it between the
//!   check and `readlinkat`.
//!
//! `/var/run -> /run` and `/var/lock -> /run/lock` (root's links in root's 0755 `/var`)
//! are followed; a link the PHP user made in its own directory is not, nor a link of any
//! owner in a directory the PHP user can write. The sticky bit is not taken as trust: a
//! link in `/tmp` or `/run/lock` (mode 1777) is never followed, whoever owns it — stricter
//! than `fs.protected_symlinks`, and the same on hosts where that is off. Write access
//! granted by a POSIX ACL shows in the group bits (the ACL mask), so it counts too. A
//! trusted link is followed by reading it and walking its target by the same rules (an
//! absolute target starts again from `/`; `..` in a target goes back up the directories
//! the walk came through, as Fedora's `/var/run -> ../run` needs), at most [`MAX_LINKS`]
//! links per walk, like the kernel's ELOOP. Real directories on the way are walked
//! whoever owns them: their owner can add and remove names in them, but cannot make a
//! name in them lead anywhere else. Reading evidence (heartbeat mtimes, the lock probe)
//! does not take the walk: it follows links as usual, except where another user could
//! have planted them, and opens only regular files ([`reach`], docs/design.md#file-safety).
//!
//! **What is refused.** Empty and relative paths, `..` components and NUL bytes in a path
//! given to this module ([`Error::BadPath`]); a link that is not trusted
//! ([`Error::UntrustedLink`], naming the link, its owner and who can write its
//! directory); a last component that is a link ([`Error::FinalSymlink`]). A file opened
//! to be written must be a regular file ([`Error::NotRegular`]: every name is first reached
//! `O_PATH|O_NOFOLLOW` and its type checked by `fstat` on that descriptor, and only a
//! regular file is then opened, through that descriptor ([`reopen`]): a FIFO, device or
//! socket planted where a file is expected, or swapped in meanwhile, is never opened), with
//! one name only ([`Error::HardLinked`]: a hard link to a file
//! elsewhere, e.g. `/etc/shadow` where `fs.protected_hardlinks` is off, must not be
//! appended to or truncated — the check matters most for root, who owns such files), and
//! owned by the running user ([`Error::NotOwned`]; the run lock and the state files are
//! selfheal's own). These are checked on the opened descriptor before anything is written;
//! opening with `O_CREAT` (never `O_TRUNC`) changes nothing in an existing file. A private
//! directory ([`Dir::check_private`], for `state_dir`) must be owned by the running user
//! and not writable by group or others ([`Error::NotPrivate`], with the fix:
//! `runuser -u OWNER -- selfheal …`). Unprivileged users cannot make device nodes, so a
//! device can appear under a name only if root put it there.
//!
//! **Temporary files.** [`Dir::create_temp`] names them with 128 random bits
//! (`getrandom`) and creates them `O_CREAT|O_EXCL|O_NOFOLLOW`: a name planted in advance
//! is never opened, whatever it is. [`Dir::replace`] writes such a file, flushes it,
//! renames it over the target (`renameat` replaces a planted link, never follows it) and
//! flushes the directory. A temporary file dropped before it is persisted is unlinked by
//! its name (in a directory someone else can write, that removes whatever they may have
//! put under the random name since: a name of theirs, in their directory).
//!
//! **Removing a file by inode** ([`Dir::remove_if_same`], the legacy-lock release).
//! `unlink(2)` takes a name, not a descriptor, so the name is checked with
//! `fstatat(AT_SYMLINK_NOFOLLOW)`, renamed to an unpredictable private name in the same
//! directory (atomic: from then on nobody reaches the file by its old name), the renamed
//! entry is checked again, and only the expected inode is unlinked. Anything else is
//! linked back to the old name with `linkat`, which never replaces a file. The window that
//! remains: (1) a file another process creates at the name between the first check and the
//! rename is renamed aside and linked back — for those microseconds it is missing from its
//! name (a job testing `file_exists()` just then sees no lock), and if yet another file
//! appeared meanwhile the link fails and the second file stays under the private name
//! ([`Error::Stranded`] says where); (2) between the second check and the unlink, someone
//! who can write the directory could rename another entry of that directory onto the
//! private name, which the unlink then removes — a name that user could remove anyway,
//! never a file elsewhere (a job that only creates its own lock never touches the private
//! name); (3) a process killed between the rename and the unlink leaves the checked file
//! under the private name (`.NAME.selfheal-release.RANDOM`).
//!
//! **Kernel and C library.** The system calls are made by rustix's `linux_raw` backend
//! (raw syscalls, no glibc wrapper at all, so nothing newer than the GLIBC_2.17 baseline
//! is linked): `openat`, `newfstatat`/`fstat` (on 32-bit targets rustix tries `statx` and
//! falls back to `fstatat64` where it is missing), `readlinkat`, `mkdirat`, `renameat`,
//! `linkat`, `unlinkat`, `fchmod`, `fcntl`, `fsync` — all present since Linux 2.6.16.
//! Never `openat2` (5.6) or `renameat2` (3.15). `O_PATH` needs 2.6.39 and `fstat` on an
//! `O_PATH` descriptor 3.6; the legacy hosts run 3.10 and later. Random names come from
//! the `getrandom` crate, which finds `getrandom(2)` at run time and falls back to
//! `/dev/urandom`.
//!
//! **Modes.** A file created by [`Dir::open_append`] or [`Dir::open_rw`] gets `mode`
//! less the umask (never wider); an existing one is tightened to `mode` (bits outside it
//! are cleared, nothing is added). A temporary file gets exactly `mode` (`fchmod`), since a
//! report or metrics file replaced through it may be meant for another reader.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

mod error;
mod reach;
mod walk;

pub use error::{Error, Who};
pub use reach::{Opened, Reached, look, open_evidence, reach, reopen};

/// At most this many symbolic links are followed in one walk (the kernel's own limit).
pub const MAX_LINKS: usize = 40;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The effective uid of this process.
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Who, other than root, the running user and the file's owner `file_uid`, could replace a
/// file in a directory with this owner, group and mode (`st_mode & 0o7777`) — rename it
/// away and put another under its name — in words (`www-data (uid 33), group www-data
/// and every user`); `None` when nobody else can. The test [`Dir`]'s walk applies to
/// links, but for the sticky bit: in a sticky directory only the directory's owner can
/// rename or remove another user's file. Used for evidence (a lock file in such a
/// directory proves nothing when free), never to write.
pub fn swappable_by(dir_uid: u32, dir_gid: u32, mode: u32, file_uid: u32) -> Option<String> {
    let me = euid();
    let mut who = Vec::new();
    if dir_uid != 0 && dir_uid != me && dir_uid != file_uid {
        who.push(Who::of(dir_uid).to_string());
    }
    if mode & 0o1000 == 0 {
        who.extend(
            error::other_writers(dir_uid, dir_gid, mode, me)
                .into_iter()
                .filter(|w| w.starts_with("group ") || w == "every user"),
        );
    }
    (!who.is_empty()).then(|| error::and_list(&who))
}

/// The identity of a file: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of an open file (`fstat`).
    pub fn of(file: &File) -> io::Result<FileId> {
        Ok(Stat::from(rustix::fs::fstat(file)?).id)
    }
}

impl From<&std::fs::Metadata> for FileId {
    fn from(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// What kind of file a name holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    fn of(mode: u32) -> Kind {
        match FileType::from_raw_mode(mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Unknown => Kind::Unknown,
        }
    }

    /// "a FIFO", "a directory", … for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Unknown => "a file of unknown type",
        }
    }
}

/// The status of a file, as `fstat`/`fstatat` without following links report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub id: FileId,
    pub kind: Kind,
    /// Permission bits, with set-id and sticky bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub modified: SystemTime,
}

impl From<rustix::fs::Stat> for Stat {
    // The field types of `struct stat` differ between targets.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from(s: rustix::fs::Stat) -> Stat {
        let secs = s.st_mtime as i64;
        let nanos = (s.st_mtime_nsec as u64).min(999_999_999) as u32;
        let modified = if secs >= 0 {
            SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs.unsigned_abs(), nanos))
        } else {
            SystemTime::UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
        }
        .unwrap_or(SystemTime::UNIX_EPOCH);
        Stat {
            id: FileId {
                dev: s.st_dev as u64,
                ino: s.st_ino as u64,
            },
            kind: Kind::of(s.st_mode as u32),
            mode: (s.st_mode as u32) & 0o7777,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            nlink: s.st_nlink as u64,
            size: u64::try_from(s.st_size).unwrap_or(0),
            modified,
        }
    }
}

/// What [`Dir::remove_if_same`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The expected inode was unlinked, and nothing else.
    Removed,
    /// Nothing was at the name.
    Absent,
    /// Another file was at the name; nothing was touched.
    Replaced,
    /// Another file took the name just before the rename; it was renamed aside and linked
    /// back to its name.
    PutBack,
}

/// A directory reached by the walk: a handle that keeps naming the directory that was
/// checked, whatever happens to its path afterwards. Every operation takes a plain file
/// name (no `/`, not `.` or `..`) in it and never follows a link at that name.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// A plain name in a directory: not empty, no `/`, not `.` or `..`, no NUL.
fn plain_name(dir: &Path, name: &OsStr) -> Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Error::BadPath {
            path: dir.join(name),
            problem: "not a plain file name",
        });
    }
    Ok(())
}

/// 128 random bits in hex.
fn random_hex() -> io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(e.to_string()),
    })?;
    let mut hex = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(hex, "{x:02x}");
    }
    Ok(hex)
}

/// `name` cut to at most `max` bytes (names are bytes; a cut character only shows in the
/// name of a temporary file).
fn cut(name: &OsStr, max: usize) -> &OsStr {
    let b = name.as_bytes();
    OsStr::from_bytes(&b[..b.len().min(max)])
}

const READ: OFlags = OFlags::RDONLY;

impl Dir {
    /// Reaches the existing directory `path` (absolute, no `..`) by the walk.
    pub fn open(path: &Path) -> Result<Dir> {
        let names = walk::names(path)?;
        let level = walk::walk(path, &names, None)?;
        Ok(Dir {
            fd: level.fd,
            path: path.to_path_buf(),
        })
    }

    /// Reaches `path`, creating the directories that are missing with `mode` (less the
    /// umask) on the way, as `mkdir -p` would — by the same walk.
    pub fn create(path: &Path, mode: u32) -> Result<Dir> {
        let names = walk::names(path)?;
        let level = walk::walk(path, &names, Some(mode))?;
        Ok(Dir {
            fd: level.fd,
            path: path.to_path_buf(),
        })
    }

    /// Reaches the directory of the file `path` and returns it with the file's name.
    pub fn open_parent(path: &Path) -> Result<(Dir, OsString)> {
        let mut names = walk::names(path)?;
        let Some(name) = names.pop() else {
            return Err(Error::BadPath {
                path: path.to_path_buf(),
                problem: "names a directory, not a file",
            });
        };
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let level = walk::walk(path, &names, None)?;
        Ok((
            Dir {
                fd: level.fd,
                path: dir,
            },
            name,
        ))
    }

    /// The path this directory was reached by (as it was asked for).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, name: &OsStr, action: &'static str, e: impl Into<io::Error>) -> Error {
        Error::io(self.path.join(name), action, e)
    }

    /// The status of the directory itself.
    pub fn stat(&self) -> Result<Stat> {
        rustix::fs::fstat(&self.fd)
            .map(Stat::from)
            .map_err(|e| Error::io(self.path.clone(), "reading the status of", e))
    }

    /// Refuses a directory that is not private to the running user: owned by someone else,
    /// or writable by group or others. `what` names it in the message, e.g.
    /// `"state directory (run.state_dir)"`.
    pub fn check_private(&self, what: &'static str) -> Result<()> {
        let st = self.stat()?;
        let me = euid();
        // The owner is judged on its own; who else can write it comes from the mode.
        let writers = error::other_writers(me, st.gid, st.mode, me);
        if st.uid == me && writers.is_empty() {
            return Ok(());
        }
        Err(Error::NotPrivate {
            path: self.path.clone(),
            what,
            owner: Who::of(st.uid),
            me: Who::of(me),
            writers,
        })
    }

    /// The status of `name` without following a link (`fstatat(AT_SYMLINK_NOFOLLOW)`);
    /// `None` when nothing is there.
    pub fn stat_at(&self, name: &OsStr) -> Result<Option<Stat>> {
        plain_name(&self.path, name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => Ok(Some(Stat::from(s))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.err(name, "reading the status of", e)),
        }
    }

    /// Opens `name` with `flags` (creating it with `create` when missing): first reached
    /// `O_PATH|O_NOFOLLOW` and checked by `fstat` on that descriptor — a link is
    /// [`Error::FinalSymlink`], a FIFO, device or socket [`Error::NotRegular`], never
    /// opened — then opened through the descriptor ([`reopen`]), so nothing swapped in
    /// meanwhile is opened either. A missing file is created `O_CREAT|O_EXCL|O_NOFOLLOW`
    /// (a name planted between the look and the create is looked at again). The descriptor
    /// is returned with its status, still non-blocking.
    fn open_at(&self, name: &OsStr, flags: OFlags, create: Option<u32>) -> Result<(OwnedFd, Stat)> {
        plain_name(&self.path, name)?;
        let reach = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let stat = |fd: &OwnedFd| {
            rustix::fs::fstat(fd)
                .map(Stat::from)
                .map_err(|e| self.err(name, "reading the status of", e))
        };
        for _ in 0..MAX_LINKS {
            let seen = match rustix::fs::openat(&self.fd, name, reach, Mode::empty()) {
                Ok(seen) => seen,
                Err(Errno::NOENT) if create.is_some() => {
                    let flags = flags
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::NONBLOCK
                        | OFlags::NOCTTY
                        | OFlags::CLOEXEC;
                    let mode = Mode::from_raw_mode(create.unwrap_or(0));
                    match rustix::fs::openat(&self.fd, name, flags, mode) {
                        Ok(fd) => {
                            let st = stat(&fd)?;
                            return Ok((fd, st));
                        }
                        // Made by someone else meanwhile: look at it again.
                        Err(Errno::EXIST) => continue,
                        Err(e) => return Err(self.err(name, "creating", e)),
                    }
                }
                Err(e) => return Err(self.err(name, "opening", e)),
            };
            let st = stat(&seen)?;
            match st.kind {
                Kind::File => {}
                Kind::Symlink => {
                    return Err(Error::FinalSymlink {
                        path: self.path.join(name),
                    });
                }
                kind => {
                    return Err(Error::NotRegular {
                        path: self.path.join(name),
                        kind: kind.describe(),
                    });
                }
            }
            let fd = reopen(&seen, flags).map_err(|e| self.err(name, "opening", e))?;
            return Ok((fd, st));
        }
        Err(self.err(
            name,
            "creating",
            io::Error::other("the name kept changing between looking at it and creating it"),
        ))
    }

    fn is_link(&self, name: &OsStr) -> bool {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| Kind::of(s.st_mode) == Kind::Symlink)
    }

    /// Back to blocking I/O once the file is known to be a regular file.
    fn blocking(&self, name: &OsStr, fd: OwnedFd) -> Result<File> {
        let flags = rustix::fs::fcntl_getfl(&fd).map_err(|e| self.err(name, "opening", e))?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)
            .map_err(|e| self.err(name, "opening", e))?;
        Ok(File::from(fd))
    }

    /// Refuses to write to a file with other names or another owner; tightens its mode to
    /// `mode`.
    fn writable(&self, name: &OsStr, fd: &OwnedFd, st: &Stat, mode: u32) -> Result<()> {
        let me = euid();
        if st.uid != me {
            return Err(Error::NotOwned {
                path: self.path.join(name),
                owner: Who::of(st.uid),
                me: Who::of(me),
            });
        }
        if st.nlink > 1 {
            return Err(Error::HardLinked {
                path: self.path.join(name),
                links: st.nlink,
            });
        }
        if st.mode & !mode & 0o7777 != 0 {
            rustix::fs::fchmod(fd, Mode::from_raw_mode(st.mode & mode))
                .map_err(|e| self.err(name, "changing the mode of", e))?;
        }
        Ok(())
    }

    /// Opens the regular file `name` for reading (any owner, any number of names).
    pub fn open_read(&self, name: &OsStr) -> Result<File> {
        let (fd, _) = self.open_at(name, READ, None)?;
        self.blocking(name, fd)
    }

    /// Opens `name` for reading and appending, creating it with `mode` if missing. An
    /// existing file must be a regular file of the running user's with no other name.
    pub fn open_append(&self, name: &OsStr, mode: u32) -> Result<File> {
        let (fd, st) = self.open_at(name, OFlags::RDWR | OFlags::APPEND, Some(mode))?;
        self.writable(name, &fd, &st, mode)?;
        self.blocking(name, fd)
    }

    /// Opens `name` for reading and writing, creating it with `mode` if missing, never
    /// truncating it (a caller that rewrites it truncates after this checked the file).
    /// The same checks as [`Dir::open_append`].
    pub fn open_rw(&self, name: &OsStr, mode: u32) -> Result<File> {
        let (fd, st) = self.open_at(name, OFlags::RDWR, Some(mode))?;
        self.writable(name, &fd, &st, mode)?;
        self.blocking(name, fd)
    }

    /// Creates the new file `name` (`O_CREAT|O_EXCL|O_NOFOLLOW`) with exactly `mode`:
    /// anything already at the name, a planted link included, is an error.
    fn create_new(&self, name: &OsStr, mode: u32) -> Result<File, (Errno, Error)> {
        if let Err(e) = plain_name(&self.path, name) {
            return Err((Errno::INVAL, e));
        }
        let flags = OFlags::RDWR
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode & 0o777))
            .map_err(|e| (e, self.err(name, "creating", e)))?;
        if let Err(e) = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777)) {
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            return Err((e, self.err(name, "changing the mode of", e)));
        }
        Ok(File::from(fd))
    }

    /// Creates a new temporary file beside `like` (its name `.LIKE.RANDOM.tmp`, 128
    /// random bits), mode exactly `mode`. It is removed when dropped unless
    /// [`TempFile::persist`]ed.
    pub fn create_temp(&self, like: &OsStr, mode: u32) -> Result<TempFile<'_>> {
        plain_name(&self.path, like)?;
        let mut tries = 0;
        loop {
            let hex = random_hex().map_err(|e| self.err(like, "naming a temporary file for", e))?;
            let mut name = OsString::from(".");
            name.push(cut(like, 150));
            name.push(format!(".{hex}.tmp"));
            match self.create_new(&name, mode) {
                Ok(file) => {
                    return Ok(TempFile {
                        dir: self,
                        name,
                        file,
                        persisted: false,
                    });
                }
                // 128 random bits do not collide; a name taken anyway is looked past, a
                // few times.
                Err((Errno::EXIST, e)) => {
                    tries += 1;
                    if tries >= 8 {
                        return Err(e);
                    }
                }
                Err((_, e)) => return Err(e),
            }
        }
    }

    /// Replaces `name` with a file of exactly `mode` whose contents `write` produces:
    /// written to a new temporary file, flushed, renamed over `name`, then the directory
    /// flushed. A reader sees the old file or the new one, never a part.
    pub fn replace(
        &self,
        name: &OsStr,
        mode: u32,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<()> {
        let mut tmp = self.create_temp(name, mode)?;
        let tmp_name = tmp.name().to_os_string();
        write(tmp.file_mut())
            .and_then(|()| tmp.file_mut().sync_all())
            .map_err(|e| self.err(&tmp_name, "writing", e))?;
        tmp.persist(name)?;
        self.sync()
    }

    /// Creates `name` with exactly `mode` and the contents `write` produces, unless
    /// something is at `name` already (`Ok(false)`: nothing changed, whatever is there —
    /// a file, a link — is neither followed nor replaced): written to a new temporary file
    /// and flushed, then linked to `name` (`linkat` never replaces anything), the directory
    /// flushed. A reader sees no file or the whole file, never a part.
    pub fn write_new(
        &self,
        name: &OsStr,
        mode: u32,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<bool> {
        plain_name(&self.path, name)?;
        let mut tmp = self.create_temp(name, mode)?;
        let tmp_name = tmp.name().to_os_string();
        write(tmp.file_mut())
            .and_then(|()| tmp.file_mut().sync_all())
            .map_err(|e| self.err(&tmp_name, "writing", e))?;
        match rustix::fs::linkat(&self.fd, &tmp_name, &self.fd, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(self.err(name, "creating", e)),
        }
        // The temporary name goes; the file stays under `name`.
        drop(tmp);
        self.sync()?;
        Ok(true)
    }

    /// `renameat` within this directory. Neither name is followed: a link at `to` is
    /// replaced, not written through.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> Result<()> {
        plain_name(&self.path, from)?;
        plain_name(&self.path, to)?;
        rustix::fs::renameat(&self.fd, from, &self.fd, to)
            .map_err(|e| self.err(from, "renaming", e))
    }

    /// Removes the name `name` (a link is removed itself, never its target); `false` when
    /// nothing was there. A directory is not removed.
    pub fn unlink(&self, name: &OsStr) -> Result<bool> {
        plain_name(&self.path, name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(self.err(name, "removing", e)),
        }
    }

    /// Makes the directory `name` with `mode` (less the umask); `false` when a directory
    /// was already there. A link or other file at the name is an error.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> Result<bool> {
        plain_name(&self.path, name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => match self.stat_at(name)? {
                Some(st) if st.kind == Kind::Dir => Ok(false),
                Some(st) if st.kind == Kind::Symlink => Err(Error::FinalSymlink {
                    path: self.path.join(name),
                }),
                _ => Err(Error::NotADirectory {
                    path: self.path.join(name),
                    component: self.path.join(name),
                }),
            },
            Err(e) => Err(self.err(name, "creating", e)),
        }
    }

    /// Reaches the subdirectory `name` without following a link at that name.
    pub fn open_dir(&self, name: &OsStr) -> Result<Dir> {
        plain_name(&self.path, name)?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir {
                fd,
                path: self.path.join(name),
            }),
            Err(Errno::LOOP | Errno::NOTDIR) if self.is_link(name) => Err(Error::FinalSymlink {
                path: self.path.join(name),
            }),
            Err(Errno::NOTDIR) => Err(Error::NotADirectory {
                path: self.path.join(name),
                component: self.path.join(name),
            }),
            Err(e) => Err(self.err(name, "opening", e)),
        }
    }

    /// Flushes the directory (its entries: a rename, a new file) to disk.
    pub fn sync(&self) -> Result<()> {
        // `fsync` needs a real descriptor, not an `O_PATH` one.
        let fd = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(self.path.clone(), "opening", e))?;
        rustix::fs::fsync(&fd).map_err(|e| Error::io(self.path.clone(), "flushing", e))
    }

    /// Removes `name` only if it is the file `held` is open on (device and inode), by
    /// renaming it aside, checking the renamed entry, and unlinking that; see the module
    /// documentation for the window that remains. The file is taken open, not as a bare
    /// identity, on purpose: a file system gives a freed inode number to the next new file
    /// at once, so an identity noted earlier and not held open could be carried by a new
    /// file created at the name since (a new worker's lock). Open it (e.g. with
    /// [`Dir::open_read`]) when the file is judged and keep it open until this returns.
    pub fn remove_if_same(&self, name: &OsStr, held: &File) -> Result<Removal> {
        let expected = FileId::of(held).map_err(|e| self.err(name, "reading the status of", e))?;
        match self.stat_at(name)? {
            None => return Ok(Removal::Absent),
            Some(st) if st.id != expected || st.kind == Kind::Dir => {
                return Ok(Removal::Replaced);
            }
            Some(_) => {}
        }
        let hex = random_hex().map_err(|e| self.err(name, "naming the release of", e))?;
        let mut aside = OsString::from(".");
        aside.push(cut(name, 150));
        aside.push(format!(".selfheal-release.{hex}"));
        match rustix::fs::renameat(&self.fd, name, &self.fd, &aside) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(Removal::Absent),
            Err(e) => return Err(self.err(name, "renaming aside", e)),
        }
        self.settle_aside(name, &aside, expected)
    }

    /// After `name` was renamed to `aside`: unlinks `aside` if it is `expected`, else
    /// links it back to `name` (never replacing anything there) and drops `aside`.
    fn settle_aside(&self, name: &OsStr, aside: &OsStr, expected: FileId) -> Result<Removal> {
        let aside_path = self.path.join(aside);
        let st = rustix::fs::statat(&self.fd, aside, AtFlags::SYMLINK_NOFOLLOW)
            .map(Stat::from)
            .map_err(|e| Error::io(aside_path.clone(), "reading the status of", e))?;
        if st.id == expected {
            return rustix::fs::unlinkat(&self.fd, aside, AtFlags::empty())
                .map(|()| Removal::Removed)
                .map_err(|e| Error::io(aside_path, "removing", e));
        }
        // Not the file checked: put it back, never over whatever may be at the name now.
        if let Err(e) = rustix::fs::linkat(&self.fd, aside, &self.fd, name, AtFlags::empty()) {
            return Err(Error::Stranded {
                path: self.path.join(name),
                aside: aside_path,
                source: e.into(),
            });
        }
        rustix::fs::unlinkat(&self.fd, aside, AtFlags::empty())
            .map(|()| Removal::PutBack)
            .map_err(|e| Error::io(aside_path, "removing the second name", e))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A new file under a random name in a [`Dir`], removed on drop unless persisted.
#[derive(Debug)]
pub struct TempFile<'d> {
    dir: &'d Dir,
    name: OsString,
    file: File,
    persisted: bool,
}

impl TempFile<'_> {
    /// The temporary name.
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// Renames the file over `name` in the same directory (`renameat`: a link at `name`
    /// is replaced, not followed). Flushing the file before and the directory after is the
    /// caller's ([`Dir::replace`] does both).
    pub fn persist(mut self, name: &OsStr) -> Result<()> {
        self.dir.rename(&self.name, name)?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.persisted {
            let _ = rustix::fs::unlinkat(&self.dir.fd, &self.name, AtFlags::empty());
        }
    }
}

#[cfg(test)]
mod tests;
