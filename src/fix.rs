//! The fix that fits an error and the user selfheal runs as. For a path that user cannot
//! use: the command that lets *that* user in, chosen from the owner, group and mode found
//! there (`chmod u+x` for its own directory, `adduser selfheal www-data` where a group
//! already has the access, `chgrp` and `chmod g+r` for a root-only file). For the state
//! directory: the way the package hands it over (`dpkg-reconfigure selfheal`), or the user
//! cron runs selfheal as. Never "run as root", never a fix addressed to another user.
//!
//! I/O: `stat` and `access(2)` along a path, the passwd and group databases, the cron file
//! ([`crate::cron`]), whether the package is installed. Writes nothing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::unistd::{AccessFlags, Gid, Group, Uid, User, access};

use crate::error::Error;

/// The effective user selfheal runs as and its groups: whom a fix is addressed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningUser {
    pub uid: u32,
    /// The login name, else the numeric uid.
    pub name: String,
    /// The primary group's name, else its number.
    pub group: String,
    /// Every group the process has.
    pub gids: Vec<u32>,
}

impl RunningUser {
    pub fn current() -> RunningUser {
        let uid = nix::unistd::geteuid();
        let gid = nix::unistd::getegid();
        let name = User::from_uid(uid)
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name);
        let mut gids: Vec<u32> = nix::unistd::getgroups()
            .unwrap_or_default()
            .into_iter()
            .map(Gid::as_raw)
            .collect();
        gids.push(gid.as_raw());
        RunningUser {
            uid: uid.as_raw(),
            name,
            group: group_name(gid.as_raw()),
            gids,
        }
    }

    /// The placeholder account (`nobody`, uid 65534, the kernel's overflow uid): it stands
    /// for no user, NFS maps root to it, and daemons share it, so it is given nothing —
    /// no group, no file, no directory. A fix for it is to run as the right user.
    pub fn is_placeholder(&self) -> bool {
        let overflow = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        self.uid == 65534
            || overflow == Some(self.uid)
            || matches!(self.name.as_str(), "nobody" | "nfsnobody")
    }

    /// `www-data (uid 33)`.
    pub fn describe(&self) -> String {
        if self.name == self.uid.to_string() {
            format!("uid {}", self.uid)
        } else {
            format!("{} (uid {})", self.name, self.uid)
        }
    }
}

/// The group that should read a secret selfheal needs (an option or password file, kept
/// `640 root:GROUP`): the running user's, or — for root, who reads anything — the group
/// of the user cron runs selfheal as, when the cron file names one.
pub fn reader_group() -> String {
    let me = RunningUser::current();
    if me.uid != 0 {
        return me.group;
    }
    crate::cron::users()
        .first()
        .and_then(|u| User::from_name(u).ok().flatten())
        .map_or(me.group, |u| group_name(u.gid.as_raw()))
}

fn group_name(gid: u32) -> String {
    Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}

fn user_name(uid: u32) -> String {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

/// The access to a path a fix grants: chmod's r, x, wx or rw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read a file.
    Read,
    /// Look inside a directory (stat the files in it).
    Search,
    /// Create files in a directory.
    Write,
    /// Read and write a file (a SQLite database, a socket to connect to).
    ReadWrite,
}

impl Permission {
    /// The permission letters `chmod` takes, in the order it shows them.
    fn letters(self) -> &'static str {
        match self {
            Permission::Read => "r",
            Permission::Search => "x",
            Permission::Write => "wx",
            Permission::ReadWrite => "rw",
        }
    }

    /// The permission bits, as the owner's (shift for group or others).
    fn bits(self) -> u32 {
        match self {
            Permission::Read => 0o4,
            Permission::Search => 0o1,
            Permission::Write => 0o3,
            Permission::ReadWrite => 0o6,
        }
    }

    fn flags(self) -> AccessFlags {
        match self {
            Permission::Read => AccessFlags::R_OK,
            Permission::Search => AccessFlags::X_OK,
            Permission::Write => AccessFlags::W_OK | AccessFlags::X_OK,
            Permission::ReadWrite => AccessFlags::R_OK | AccessFlags::W_OK,
        }
    }
}

/// Groups that hand out more than one file: nobody should join them to read one.
const PRIVILEGED_GROUPS: [&str; 8] = [
    "root",
    "adm",
    "shadow",
    "sudo",
    "wheel",
    "disk",
    "staff",
    "systemd-journal",
];

/// What keeps the running user from using `path` as `need` says, as the command that lets
/// it: the first directory on the way it cannot look into, else the path itself. `None`
/// when nothing does, or when the path or a directory on the way does not exist.
pub fn access_fix(path: &Path, need: Permission) -> Option<String> {
    access_fix_for(&RunningUser::current(), path, need, "…")
}

/// [`access_fix`] where the command that was run is known (`doctor`, `check`): a fix that
/// says to run it as another user names it.
pub fn access_fix_in(path: &Path, need: Permission, command: &str) -> Option<String> {
    access_fix_for(&RunningUser::current(), path, need, command)
}

/// [`access_fix`] for `me`.
pub fn access_fix_for(
    me: &RunningUser,
    path: &Path,
    need: Permission,
    command: &str,
) -> Option<String> {
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for dir in ancestors {
        if dir.as_os_str().is_empty() {
            continue;
        }
        match access(dir, AccessFlags::X_OK) {
            Ok(()) => {}
            Err(nix::errno::Errno::EACCES) => {
                return Some(grant(me, dir, Permission::Search, command));
            }
            Err(_) => return None,
        }
    }
    match access(path, need.flags()) {
        Err(nix::errno::Errno::EACCES) => Some(grant(me, path, need, command)),
        _ => None,
    }
}

/// The command that gives `me` what `need` says on `target`, by the owner, group and mode
/// found there (see the module header). The placeholder account is given nothing: the way
/// out is to run as the user that should ([`placeholder_fix`]).
fn grant(me: &RunningUser, target: &Path, need: Permission, command: &str) -> String {
    let t = target.display();
    let l = need.letters();
    let Ok(m) = std::fs::metadata(target) else {
        if me.is_placeholder() {
            return placeholder_fix(me, &crate::cron::users(), None, command);
        }
        return format!("let {} {} {t}", me.name, verb(need));
    };
    let mode = m.mode() & 0o7777;
    let (uid, gid) = (m.uid(), m.gid());
    let owner = user_name(uid);
    let group = group_name(gid);
    if me.is_placeholder() {
        let owner = (uid != 0).then_some(owner.as_str());
        return placeholder_fix(me, &crate::cron::users(), owner, command);
    }
    if uid == me.uid {
        return format!(
            "chmod u+{l} {t} ({t} is {}'s own, but its mode {mode:03o} shuts its owner out)",
            me.name
        );
    }
    if me.uid == 0 {
        return format!(
            "root is refused {t} (a network file system that maps root to nobody?): let \
             its owner {owner} do the work, or export it without root squashing"
        );
    }
    if me.gids.contains(&gid) {
        return format!(
            "chmod g+{l} {t} ({} is in its group {group}, which its mode {mode:03o} shuts \
             out)",
            me.name
        );
    }
    let group_has = (mode >> 3) & need.bits() == need.bits();
    let privileged = gid == 0 || PRIVILEGED_GROUPS.contains(&group.as_str());
    let or_owner = if uid != 0 && m.is_dir() {
        format!(", or run selfheal as {owner}, its owner")
    } else {
        String::new()
    };
    match (privileged, group_has, uid) {
        (false, true, _) => format!(
            "adduser {} {group} (group {group} may {} {t}; the next run cron starts has \
             the new group){or_owner}",
            me.name,
            verb(need)
        ),
        (false, false, _) => format!(
            "chmod g+{l} {t} && adduser {} {group} (its group {group} may then {} it){or_owner}",
            me.name,
            verb(need)
        ),
        (true, _, 0) => format!(
            "chgrp {} {t} && chmod g+{l} {t} (root keeps it, group {} may {} it)",
            me.group,
            me.group,
            verb(need)
        ),
        (true, _, _) => format!("setfacl -m u:{}:{l} {t}{or_owner}", me.name),
    }
}

/// The fix for the placeholder account (`nobody`), which is given nothing: run as the user
/// cron runs selfheal as, else as `owner` (of the file or directory in the way), else as
/// the user that runs `selfheal check`. `command` is what was run (`doctor`, `check`; `…`
/// where it is not known).
pub fn placeholder_fix(
    me: &RunningUser,
    cron_users: &[String],
    owner: Option<&str>,
    command: &str,
) -> String {
    let why = format!(
        "{} stands for no user and is given nothing (NFS maps root to it, daemons share it)",
        me.name
    );
    match (cron_users.first(), owner) {
        (Some(u), _) => format!(
            "run selfheal as {u}, the user {} runs it as: runuser -u {u} -- selfheal \
             {command}; {why}",
            crate::cron::CRON_FILE
        ),
        (None, Some(o)) => format!(
            "run selfheal as the user cron runs it as, such as {o}, the owner: runuser -u {o} \
             -- selfheal {command}; {why}"
        ),
        (None, None) => format!(
            "run selfheal as the user cron runs it as: runuser -u USER -- selfheal {command}; \
             {why}"
        ),
    }
}

fn verb(need: Permission) -> &'static str {
    match need {
        Permission::Read => "read",
        Permission::Search => "look inside",
        Permission::Write => "write in",
        Permission::ReadWrite => "read and write",
    }
}

/// Where the package keeps its state (its postinst hands it to the cron user, and
/// `dpkg-reconfigure selfheal` runs that again), and a file only the installed package
/// ships: when it is there, the package is installed. (Not dpkg's own database: that is
/// dpkg's business, and its layout is not an interface.)
const PACKAGE_STATE_DIR: &str = "/var/lib/selfheal";
const PACKAGE_FILE: &str = "/usr/share/doc/selfheal/copyright";

/// The fix for a state directory (or the run lock in it) the running user cannot create or
/// write: the cron user is the one that must (so, run as that user); the package's own
/// directory is handed over by `dpkg-reconfigure selfheal`; anything else gets the command
/// that gives it to this user. `command` is what was run (`doctor`, `check`).
pub fn state_dir_fix(dir: &Path, command: &str) -> String {
    state_dir_fix_for(&RunningUser::current(), &crate::cron::users(), dir, command)
}

/// [`state_dir_fix`] for `me` and the users of the cron file.
pub fn state_dir_fix_for(
    me: &RunningUser,
    cron_users: &[String],
    dir: &Path,
    command: &str,
) -> String {
    let d = dir.display();
    if me.is_placeholder() {
        let owner = existing(dir)
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.uid());
        let owner = owner.filter(|u| *u != 0).map(user_name);
        return placeholder_fix(me, cron_users, owner.as_deref(), command);
    }
    if let Some(u) = cron_users.first()
        && !cron_users.contains(&me.name)
        && me.uid != 0
    {
        return format!(
            "{} runs selfheal as {u}, not {}: run it as {u} (runuser -u {u} -- selfheal \
             {command}), or name {} there and give it {d}",
            crate::cron::CRON_FILE,
            me.name,
            me.name
        );
    }
    if dir.starts_with(PACKAGE_STATE_DIR) && Path::new(PACKAGE_FILE).exists() {
        return format!(
            "dpkg-reconfigure selfheal (as root): the package gives {PACKAGE_STATE_DIR} and \
             what is in it to the user {} names",
            crate::cron::CRON_FILE
        );
    }
    if dir.is_dir() {
        format!("chown -R {}: {d} (as root)", me.name)
    } else {
        format!(
            "install -d -o {} -g {} -m 750 {d} (as root)",
            me.name, me.group
        )
    }
}

/// `p`, or the nearest directory above it that exists.
fn existing(p: &Path) -> Option<&Path> {
    p.ancestors().find(|a| a.exists())
}

/// The first directory on the way to `path` that the running user may not look inside
/// (`None`: every one lets it in, or one does not exist).
pub fn shut_out_at(path: &Path) -> Option<&Path> {
    path.ancestors()
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .filter(|d| !d.as_os_str().is_empty())
        .find(|d| access(*d, AccessFlags::X_OK) == Err(nix::errno::Errno::EACCES))
}

/// `/var/lib/selfheal (www-data:www-data, mode 750)`.
pub fn describe_dir(dir: &Path) -> String {
    match std::fs::metadata(dir) {
        Ok(m) => format!(
            "{} ({}:{}, mode {:03o})",
            dir.display(),
            user_name(m.uid()),
            group_name(m.gid()),
            m.mode() & 0o7777
        ),
        Err(_) => dir.display().to_string(),
    }
}

/// The fix for `e` that only a look at the system can tell (who owns the state directory,
/// who cron runs selfheal as), else [`Error::fix`]. `command` is what was run.
pub fn for_error(e: &Error, command: &str) -> Option<String> {
    // A file the placeholder account may not read: whom to run as, with the command that
    // was run (the store that raised it did not know it).
    if let Error::CannotRead { path, source, .. } = e
        && source.kind() == std::io::ErrorKind::PermissionDenied
        && RunningUser::current().is_placeholder()
        && let Some(f) = access_fix_in(path, Permission::Read, command)
    {
        return Some(f);
    }
    if let Some(f) = e.fix() {
        return Some(f);
    }
    match e {
        Error::Io {
            path,
            action,
            source,
        } => io_fix(path, action, source.kind(), command),
        Error::Journal { path, source, .. } => {
            io_fix(path, "writing the journal", source.kind(), command)
        }
        Error::Refused { action, refused } => refused_fix(refused, action, command),
        // A file that is not this user's to read (the configuration): the command that
        // lets it, chosen here, where the error is reported.
        Error::CannotRead { path, source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            access_fix_in(path, Permission::Read, command)
        }
        _ => None,
    }
}

/// The fix for a file or directory selfheal refused to use ([`Error::Refused`]). Nothing
/// here tells anyone to loosen a check: the way out is to run as the right user, or to
/// take away what someone else put in selfheal's way.
fn refused_fix(e: &crate::fsafe::Error, action: &str, command: &str) -> Option<String> {
    use crate::fsafe::Error as F;
    let setting = action
        .rsplit_once('(')
        .and_then(|(_, k)| k.strip_suffix(')'))
        .unwrap_or("the setting");
    match e {
        F::NotPrivate {
            path,
            owner,
            me,
            writers,
            ..
        } => {
            let p = path.display();
            let tighten = if writers.is_empty() {
                String::new()
            } else {
                format!(" (and make it private to its owner: chmod go-w {p})")
            };
            let cron = crate::cron::users();
            Some(if owner.uid == me.uid {
                format!("chmod go-w {p}: nobody but {me} may change what is in it")
            } else if me.uid != 0
                && (owner.uid == 0 || (cron.contains(&me.arg()) && !cron.contains(&owner.arg())))
            {
                // Cron runs selfheal as this user, or root owns the directory (selfheal is
                // not to run as root): the directory is to be given to this user.
                format!("{}{tighten}", state_dir_fix(path, command))
            } else {
                format!(
                    "run selfheal as {}, who owns {p}{}: runuser -u {} -- selfheal \
                     {command}{tighten}",
                    owner.arg(),
                    if cron.contains(&owner.arg()) {
                        format!(", as {} does", crate::cron::CRON_FILE)
                    } else {
                        String::new()
                    },
                    owner.arg()
                )
            })
        }
        F::NotOwned {
            path, owner, me, ..
        } => Some(format!(
            "if {} did not put it there for selfheal, remove it (as root: rm {}) and run \
             again; if selfheal should run as {}: runuser -u {} -- selfheal {command}{}",
            owner.arg(),
            path.display(),
            owner.arg(),
            owner.arg(),
            // Not the default run lock in state_dir, but one set apart.
            if setting == "run.lock_file"
                && path.file_name() != Some(std::ffi::OsStr::new(crate::runlock::RUN_LOCK_NAME))
            {
                format!(
                    "; a run lock outside state_dir can be taken by others: leave \
                     run.lock_file unset, and {} keeps it in its own state_dir",
                    me.arg()
                )
            } else {
                String::new()
            }
        )),
        F::FinalSymlink { path } => Some(format!(
            "selfheal never makes a symbolic link there: see who did (ls -l {}), remove it, \
             and run again",
            path.display()
        )),
        F::UntrustedLink { component, .. } => Some(format!(
            "set {setting} to a path without the link {} (its target, once you have checked \
             it is the right place), or let only root change the directory that holds it",
            component.display()
        )),
        F::NotRegular { path, .. } => Some(format!(
            "move {} away: selfheal needs a regular file of its own there",
            path.display()
        )),
        F::HardLinked { path, .. } => Some(format!(
            "remove {} (its other names keep what is in it) and run again",
            path.display()
        )),
        _ => None,
    }
}

/// The fix for a file of selfheal's own that could not be used: the state directory and
/// what is in it (the journal, the run lock, `last-run.json`), the metrics file. `action`
/// says what was done and names the setting ("creating the state directory
/// (run.state_dir)").
fn io_fix(path: &Path, action: &str, kind: std::io::ErrorKind, command: &str) -> Option<String> {
    use std::io::ErrorKind as K;
    let setting = action
        .rsplit_once('(')
        .and_then(|(_, k)| k.strip_suffix(')'))
        .unwrap_or("");
    let parent = path.parent().unwrap_or(Path::new("/"));
    match (kind, setting) {
        (K::NotFound, "run.metrics_file") => Some(format!(
            "create {} (node_exporter's textfile directory) for {} to write in, or correct \
             run.metrics_file",
            parent.display(),
            RunningUser::current().name
        )),
        (K::PermissionDenied, "run.metrics_file") => {
            access_fix_in(parent, Permission::Write, command)
        }
        // A run lock set apart from the state directory.
        (_, "run.lock_file")
            if path.file_name() != Some(std::ffi::OsStr::new(crate::runlock::RUN_LOCK_NAME)) =>
        {
            Some(format!(
                "leave run.lock_file unset (the lock then lives in state_dir), or let {} \
                 write {}",
                RunningUser::current().name,
                parent.display()
            ))
        }
        (K::AlreadyExists | K::NotADirectory, _) => Some(format!(
            "{} is not a directory: point run.state_dir at a directory (or move that file away)",
            if path.is_dir() { parent } else { path }.display()
        )),
        (K::ReadOnlyFilesystem, _) => Some(format!(
            "{} is on a read-only file system: point {} at a writable directory",
            path.display(),
            if setting.is_empty() {
                "run.state_dir"
            } else {
                setting
            }
        )),
        (K::PermissionDenied, _) => {
            // The state directory itself (it may not exist yet), or the one a state file
            // is in.
            let dir = if path.is_dir() || (!path.exists() && action.contains("directory")) {
                path
            } else {
                parent
            };
            Some(state_dir_fix(dir, command))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn me(uid: u32, name: &str) -> RunningUser {
        RunningUser {
            uid,
            name: name.into(),
            group: name.into(),
            gids: vec![uid],
        }
    }

    #[test]
    fn the_state_directory_goes_to_the_cron_user() {
        let www = me(33, "www-data");
        let cron = vec!["www-data".to_string()];
        let dir = Path::new("/nonexistent/selfheal-state");
        assert_eq!(
            state_dir_fix_for(&www, &cron, dir, "doctor"),
            "install -d -o www-data -g www-data -m 750 /nonexistent/selfheal-state (as root)"
        );
        let other = me(1000, "deploy");
        let fix = state_dir_fix_for(&other, &cron, dir, "check");
        assert!(
            fix.starts_with("/etc/cron.d/selfheal runs selfheal as www-data, not deploy: run it as www-data (runuser -u www-data -- selfheal check)"),
            "{fix}"
        );
    }

    #[test]
    fn nobody_is_given_nothing_but_told_whom_to_run_as() {
        let nobody = me(65534, "nobody");
        assert!(nobody.is_placeholder());
        assert!(!me(33, "www-data").is_placeholder());
        let cron = vec!["www-data".to_string()];
        let dir = Path::new("/nonexistent/selfheal-state");
        let fix = state_dir_fix_for(&nobody, &cron, dir, "doctor");
        assert!(
            fix.starts_with(
                "run selfheal as www-data, the user /etc/cron.d/selfheal runs it as: \
                 runuser -u www-data -- selfheal doctor; nobody stands for no user"
            ),
            "{fix}"
        );
        // No cron file: the owner of what is in the way, else the user cron runs it as.
        let fix = placeholder_fix(&nobody, &[], Some("www-data"), "check");
        assert!(
            fix.contains("runuser -u www-data -- selfheal check"),
            "{fix}"
        );
        let fix = state_dir_fix_for(&nobody, &[], dir, "check");
        assert!(
            fix.starts_with("run selfheal as the user cron runs it as: runuser -u USER"),
            "{fix}"
        );
        for fix in [
            fix,
            grant(&nobody, Path::new("/"), Permission::Write, "doctor"),
        ] {
            assert!(
                !fix.contains("adduser") && !fix.contains("chown") && !fix.contains("chmod"),
                "{fix}"
            );
        }
    }

    #[test]
    fn a_directory_of_ones_own_gets_chmod_u() {
        // As root the test cannot be refused; `grant` itself is what words the fix.
        let d = tempfile::tempdir().expect("tmp");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let uid = std::fs::metadata(d.path()).expect("stat").uid();
        let fix = grant(&me(uid, "www-data"), d.path(), Permission::Search, "doctor");
        assert!(
            fix.starts_with(&format!("chmod u+x {}", d.path().display())),
            "{fix}"
        );
        assert!(!fix.contains("run selfheal as"), "{fix}");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
}
