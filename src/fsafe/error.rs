//! The errors of [`crate::fsafe`]. Each names the path that was asked for and, where the walk
//! stopped on the way, the component it stopped at; system-call failures keep their
//! `io::Error` as the source.

use std::fmt;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use super::MAX_LINKS;

/// A user as the messages show it: `www-data (uid 33)`, or `uid 1234` when the user has no
/// name on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    pub uid: u32,
    /// The user's name, when the user database has one.
    pub name: Option<Box<str>>,
}

impl Who {
    /// Looks the name up (`getpwuid_r`); only called to word an error.
    pub fn of(uid: u32) -> Who {
        let name = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name.into_boxed_str());
        Who { uid, name }
    }

    /// The effective user this process runs as.
    pub fn me() -> Who {
        Who::of(super::euid())
    }

    /// What to pass to `runuser -u`: the name, else the numeric uid.
    pub fn arg(&self) -> String {
        match &self.name {
            Some(n) => n.to_string(),
            None => self.uid.to_string(),
        }
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{n} (uid {})", self.uid),
            None => write!(f, "uid {}", self.uid),
        }
    }
}

/// Who, other than root and the running user, can change the entries of a directory with
/// this owner and mode: its owner (who can always `chmod` it), the group with write
/// permission, every user. Empty for a directory nobody else can write.
pub(super) fn other_writers(dir_uid: u32, dir_gid: u32, mode: u32, me: u32) -> Vec<String> {
    let mut w = Vec::new();
    if dir_uid != 0 && dir_uid != me {
        w.push(Who::of(dir_uid).arg());
    }
    if mode & 0o020 != 0 {
        let group = Group::from_gid(Gid::from_raw(dir_gid))
            .ok()
            .flatten()
            .map_or_else(|| format!("gid {dir_gid}"), |g| g.name);
        w.push(format!("group {group}"));
    }
    if mode & 0o002 != 0 {
        w.push("every user".into());
    }
    w
}

pub(super) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn untrusted(owner: &Who, owner_trusted: bool, writers: &[String]) -> String {
    let mut s = String::from("a symbolic link");
    if !owner_trusted {
        let _ = write!(s, " owned by {owner}");
    }
    if !writers.is_empty() {
        let _ = write!(s, " in a directory {} can write", and_list(writers));
    }
    s
}

fn not_private(what: &str, path: &Path, owner: &Who, me: &Who, writers: &[String]) -> String {
    if owner.uid == me.uid {
        format!(
            "the {what} can be written by {}, not only by {me} who runs selfheal: make it \
             private: chmod go-w {}",
            and_list(writers),
            path.display()
        )
    } else {
        let mut s = format!(
            "the {what} is owned by {owner}, not by {me} who runs selfheal: run selfheal as its \
             owner: runuser -u {} -- selfheal …",
            owner.arg()
        );
        if !writers.is_empty() {
            let _ = write!(
                s,
                " (and make it private: {} can write it: chmod go-w {})",
                and_list(writers),
                path.display()
            );
        }
        s
    }
}

fn io_text(path: &Path, component: Option<&Path>, action: &str, source: &io::Error) -> String {
    match component {
        Some(c) if c != path => format!("{}: {action} {}: {source}", path.display(), c.display()),
        // "reading the status of" wants its object.
        _ if action.ends_with(" of") => format!("{}: {action} it: {source}", path.display()),
        _ => format!("{}: {action}: {source}", path.display()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path cannot name one of selfheal's files: empty, relative, with a `..` component,
    /// a NUL byte, or (for a file) no file name.
    #[error("{}: {problem}", path.display())]
    BadPath {
        path: PathBuf,
        problem: &'static str,
    },

    /// A symbolic link on the way that someone other than root or the running user could
    /// have planted or can replace.
    #[error(
        "{}: refused to follow {}: {}",
        path.display(),
        component.display(),
        untrusted(link_owner, *link_owner_trusted, dir_writers)
    )]
    UntrustedLink {
        path: PathBuf,
        /// The link, as reached by the walk.
        component: PathBuf,
        link_owner: Who,
        /// The link is owned by root or the running user.
        link_owner_trusted: bool,
        /// Who else can write the directory holding the link (empty: nobody).
        dir_writers: Vec<String>,
    },

    /// More symbolic links than the kernel itself would follow (ELOOP).
    #[error(
        "{}: more than {MAX_LINKS} symbolic links on the way (stopped at {})",
        path.display(),
        component.display()
    )]
    TooManyLinks { path: PathBuf, component: PathBuf },

    /// A component that must be a directory is something else.
    #[error("{}: {} is not a directory", path.display(), component.display())]
    NotADirectory { path: PathBuf, component: PathBuf },

    /// The file itself (the last component) is a symbolic link: never followed.
    #[error("{}: is a symbolic link; selfheal does not write, rename or remove through one", path.display())]
    FinalSymlink { path: PathBuf },

    /// A FIFO, device, socket or directory where a regular file is expected.
    #[error("{}: is {kind}, not a regular file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },

    /// A file with other names (hard links): writing to it would change a file elsewhere.
    #[error(
        "{}: the file has {links} names (hard links); selfheal writes only to a file that has no other name",
        path.display()
    )]
    HardLinked { path: PathBuf, links: u64 },

    /// A file selfheal would write to belongs to another user.
    #[error(
        "{}: owned by {owner}, not by {me} who runs selfheal: run selfheal as its owner: runuser -u {} -- selfheal …",
        path.display(),
        owner.arg()
    )]
    NotOwned { path: PathBuf, owner: Who, me: Who },

    /// A directory selfheal keeps private state in is not private.
    #[error("{}: {}", path.display(), not_private(what, path, owner, me, writers))]
    NotPrivate {
        path: PathBuf,
        /// What the directory is, e.g. "state directory (run.state_dir)".
        what: &'static str,
        owner: Who,
        me: Who,
        /// Who else can write it.
        writers: Vec<String>,
    },

    /// A file another process put at the path while a lock file was being released was
    /// renamed aside and could not be linked back.
    #[error(
        "{}: another file appeared at this path during the release and could not be put back; it is now at {}: {source}",
        path.display(),
        aside.display()
    )]
    Stranded {
        path: PathBuf,
        aside: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A system call failed.
    #[error("{}", io_text(path, component.as_deref(), action, source))]
    Io {
        path: PathBuf,
        /// Where the walk was when it failed, if before the last component.
        component: Option<PathBuf>,
        action: &'static str,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The path that was asked for.
    pub fn path(&self) -> &Path {
        match self {
            Error::BadPath { path, .. }
            | Error::UntrustedLink { path, .. }
            | Error::TooManyLinks { path, .. }
            | Error::NotADirectory { path, .. }
            | Error::FinalSymlink { path }
            | Error::NotRegular { path, .. }
            | Error::HardLinked { path, .. }
            | Error::NotOwned { path, .. }
            | Error::NotPrivate { path, .. }
            | Error::Stranded { path, .. }
            | Error::Io { path, .. } => path,
        }
    }

    /// The kind of the failed system call, for an [`Error::Io`].
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// The file, or a directory on its path, does not exist.
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::NotFound)
    }

    pub(super) fn io(path: PathBuf, action: &'static str, source: impl Into<io::Error>) -> Self {
        Error::Io {
            path,
            component: None,
            action,
            source: source.into(),
        }
    }
}
