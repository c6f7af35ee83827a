//! The safe file access against a real file system, as root, with an unprivileged
//! "attacker" (uid 33, www-data) owning a non-sticky directory and planting links, hard
//! links, FIFOs and devices in it. The attacker's entries are made by root and given to
//! uid 33 (`lchown`): the kernel judges them by their owner, not by who made them.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{PermissionsExt, chown, lchown, symlink};
use std::path::{Path, PathBuf};

use super::*;

mod random;

/// The attacker: www-data.
const ATTACKER: u32 = 33;

/// Root, or skipped (outside CI) / failed (in CI): CI runs the suite as root.
fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the fsafe tests as root"
    );
    eprintln!("SKIPPED: the fsafe tests need root to own files as another user");
    false
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A private tree under a temporary directory:
/// - `www/` — the attacker's directory (uid 33, 0755, not sticky);
/// - `victim/` — root's files (`config` 0644, `rootonly/key` in a 0700 directory);
/// - `trusted/` — root's 0755 directory for root's own links;
/// - `target/` — root's 0755 directory that trusted links lead to.
pub(super) struct Scene {
    _tmp: tempfile::TempDir,
    pub base: PathBuf,
}

impl Scene {
    pub fn new() -> Scene {
        Scene::under(tempfile::tempdir().expect("tempdir"))
    }

    /// On tmpfs (`/dev/shm`) where there is one: the random trees flush thousands of files
    /// and directories, which costs seconds on a disk and nothing in memory.
    pub fn in_memory() -> Scene {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            Scene::under(tempfile::tempdir_in(shm).expect("tempdir"))
        } else {
            Scene::new()
        }
    }

    fn under(tmp: tempfile::TempDir) -> Scene {
        // Reachable by the attacker's own processes (`Scene::attacker`).
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let base = tmp.path().join("base");
        let s = Scene { _tmp: tmp, base };
        s.dir("", 0, 0o755);
        s.dir("www", ATTACKER, 0o755);
        s.dir("victim", 0, 0o755);
        s.file("victim/config", "config\n", 0, 0o644);
        s.dir("victim/rootonly", 0, 0o700);
        s.file("victim/rootonly/key", "key\n", 0, 0o600);
        s.dir("trusted", 0, 0o755);
        s.dir("target", 0, 0o755);
        s
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.base.clone()
        } else {
            self.base.join(rel)
        }
    }

    pub fn dir(&self, rel: &str, uid: u32, mode: u32) -> PathBuf {
        let p = self.p(rel);
        std::fs::create_dir_all(&p).expect("mkdir");
        chown(&p, Some(uid), Some(uid)).expect("chown");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    pub fn file(&self, rel: &str, text: &str, uid: u32, mode: u32) -> PathBuf {
        let p = self.p(rel);
        std::fs::write(&p, text).expect("write");
        chown(&p, Some(uid), Some(uid)).expect("chown");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    pub fn link(&self, rel: &str, target: impl AsRef<Path>, uid: u32) -> PathBuf {
        let p = self.p(rel);
        symlink(target, &p).expect("symlink");
        lchown(&p, Some(uid), Some(uid)).expect("lchown");
        p
    }

    /// Runs `script` with `sh` in `www/` as the attacker itself (uid and gid 33, no other
    /// groups): what it plants there, it can plant without any help from root.
    pub fn attacker(&self, script: &str) {
        let st = std::process::Command::new("setpriv")
            .args([
                "--reuid=33",
                "--regid=33",
                "--clear-groups",
                "--",
                "sh",
                "-c",
                script,
            ])
            .current_dir(self.p("www"))
            .status()
            .expect("setpriv");
        assert!(st.success(), "the attacker's script failed: {script}");
    }

    pub fn victim(&self) -> BTreeMap<String, String> {
        snapshot(&self.p("victim"))
    }
}

/// Everything a write, rename or removal could change under `dir`: names, kinds, modes,
/// owners, contents, link targets (not link counts or times).
pub(super) fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let rel = p
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string();
            let head = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
            let what = if m.file_type().is_symlink() {
                format!(
                    "link -> {}",
                    std::fs::read_link(&p).expect("readlink").display()
                )
            } else if m.is_dir() {
                walk(root, &p, out);
                "dir".into()
            } else if m.is_file() {
                format!("file {:?}", std::fs::read(&p).expect("read"))
            } else {
                "other".into()
            };
            out.insert(rel, format!("{head} {what}"));
        }
    }
    let mut out = BTreeMap::new();
    let m = std::fs::symlink_metadata(dir).expect("lstat");
    out.insert(
        ".".into(),
        format!("{:o} {}:{}", m.mode(), m.uid(), m.gid()),
    );
    walk(dir, dir, &mut out);
    out
}

fn read_all(mut f: File) -> String {
    let mut s = String::new();
    f.read_to_string(&mut s).expect("read");
    s
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .expect("lstat")
        .permissions()
        .mode()
        & 0o7777
}

// ---------------------------------------------------------------------------------------
// Paths that are refused before any system call

#[test]
fn empty_relative_dotdot_and_nul_paths_are_refused_with_what_is_wrong() {
    let cases: [(&[u8], &str); 6] = [
        (b"", "an empty path"),
        (b"var/lib/selfheal", "not an absolute path"),
        (b"./state", "not an absolute path"),
        (
            b"/var/lib/../../etc/shadow",
            "'..' component is not accepted",
        ),
        (b"/var/lib/selfheal/..", "'..' component is not accepted"),
        (b"/var/lib/a\0b", "contains a NUL byte"),
    ];
    for (raw, want) in cases {
        let p = Path::new(OsStr::from_bytes(raw));
        for err in [
            Dir::open(p).expect_err("refused"),
            Dir::create(p, 0o750).expect_err("refused"),
            Dir::open_parent(p).expect_err("refused"),
        ] {
            assert!(matches!(err, Error::BadPath { .. }), "{p:?}: {err:?}");
            assert!(err.to_string().contains(want), "{p:?}: {err}");
            assert_eq!(err.path(), p);
        }
    }
    let err = Dir::open_parent(Path::new("/")).expect_err("no file name");
    assert!(err.to_string().contains("names a directory"), "{err}");
    // `.` components are harmless and dropped.
    assert!(Dir::open(Path::new("/./")).is_ok());
}

#[test]
fn names_in_a_directory_must_be_plain() {
    let dir = Dir::open(Path::new("/")).expect("/");
    for bad in ["", ".", "..", "a/b", "/etc", "a\0b"] {
        let err = dir.stat_at(os(bad)).expect_err(bad);
        assert!(
            err.to_string().contains("not a plain file name"),
            "{bad:?}: {err}"
        );
        assert!(dir.open_read(os(bad)).is_err(), "{bad:?}");
        assert!(dir.unlink(os(bad)).is_err(), "{bad:?}");
        assert!(dir.rename(os("x"), os(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn other_writers_names_the_owner_group_and_everyone_but_never_root_or_me() {
    let me = 1000;
    assert!(other_writers_of(0, 0, 0o755, me).is_empty());
    assert!(other_writers_of(me, 0, 0o700, me).is_empty());
    assert_eq!(other_writers_of(33, 33, 0o755, me), ["www-data"]);
    assert_eq!(other_writers_of(0, 33, 0o775, me), ["group www-data"]);
    assert_eq!(
        other_writers_of(0, 0, 0o1777, me),
        ["group root", "every user"]
    );
    assert_eq!(other_writers_of(0, 0, 0o1757, me), ["every user"]);
    assert_eq!(other_writers_of(4242, 0, 0o700, me), ["4242"]);
}

fn other_writers_of(uid: u32, gid: u32, mode: u32, me: u32) -> Vec<String> {
    error::other_writers(uid, gid, mode, me)
}

// ---------------------------------------------------------------------------------------
// Links that must be followed

#[test]
fn var_run_style_links_root_made_in_root_directories_are_followed() {
    if !root_or_skip() {
        return;
    }
    // The host's own, where it has them.
    for (link, real) in [("/var/run", "/run"), ("/var/lock", "/run/lock")] {
        if std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink()) {
            let d = Dir::open(Path::new(link)).expect(link);
            let want = FileId::from(&std::fs::metadata(real).expect("stat"));
            assert_eq!(d.stat().expect("stat").id, want, "{link}");
            assert_eq!(d.path(), Path::new(link));
        }
    }
    // Debian's absolute form, Fedora's relative `../run` form, and a chain of both.
    let s = Scene::new();
    s.dir("var", 0, 0o755);
    s.dir("run", 0, 0o755);
    s.link("var/run", s.p("run"), 0);
    s.link("var/run2", "../run", 0);
    s.link("trusted/chain", s.p("var/run2"), 0);
    s.link("trusted/dot", "./../trusted/./chain", 0);
    for via in ["var/run", "var/run2", "trusted/chain", "trusted/dot"] {
        let d = Dir::open(&s.p(via)).expect(via);
        let mut f = d.open_append(os("selfheal.lock"), 0o600).expect("append");
        writeln!(f, "{via}").expect("write");
    }
    let text = std::fs::read_to_string(s.p("run/selfheal.lock")).expect("read");
    assert_eq!(text, "var/run\nvar/run2\ntrusted/chain\ntrusted/dot\n");
    assert_eq!(mode_of(&s.p("run/selfheal.lock")), 0o600);
    // A file path through the links.
    let (d, name) = Dir::open_parent(&s.p("trusted/chain/selfheal.lock")).expect("parent");
    assert_eq!(name, "selfheal.lock");
    assert_eq!(d.path(), s.p("trusted/chain"));
    assert_eq!(
        read_all(d.open_read(&name).expect("read")).lines().count(),
        4
    );
}

// ---------------------------------------------------------------------------------------
// Links that must not be followed

#[test]
fn a_parent_directory_swapped_for_the_attackers_link_to_a_root_only_directory_is_refused() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    // The case: `release_lock` on `www/locks/{id}` after www-data replaced
    // `locks/` with a link to a root-only directory.
    s.attacker(&format!("ln -s {} locks", s.p("victim/rootonly").display()));
    let path = s.p("www/locks/key");
    let err = Dir::open_parent(&path).expect_err("refused");
    let text = err.to_string();
    assert!(matches!(err, Error::UntrustedLink { .. }), "{err:?}");
    assert_eq!(err.path(), path);
    assert_eq!(
        text,
        format!(
            "{}: refused to follow {}: a symbolic link owned by www-data (uid 33) in a \
             directory www-data can write",
            path.display(),
            s.p("www/locks").display()
        )
    );
    assert!(Dir::open(&s.p("www/locks")).is_err());
    assert!(Dir::create(&s.p("www/locks/new"), 0o750).is_err());
    // Deeper, and through a relative link.
    s.dir("www/app", ATTACKER, 0o755);
    s.link("www/app/runtime", "../../victim", ATTACKER);
    let err = Dir::open_parent(&s.p("www/app/runtime/config")).expect_err("refused");
    assert!(
        err.to_string().contains(&format!(
            "refused to follow {}",
            s.p("www/app/runtime").display()
        )),
        "{err}"
    );
    assert_eq!(s.victim(), before);
}

#[test]
fn root_owned_links_in_the_attackers_directory_and_attacker_links_in_roots_are_refused() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    // Root's own link, but www-data can rename another over it: refused.
    s.link("www/rootlink", s.p("victim"), 0);
    let err = Dir::open(&s.p("www/rootlink")).expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("a symbolic link in a directory www-data can write"),
        "{err}"
    );
    // www-data's link in root's directory (root chowned it, or it was moved there).
    s.link("trusted/wwwlink", s.p("victim"), ATTACKER);
    let err = Dir::open(&s.p("trusted/wwwlink")).expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("a symbolic link owned by www-data (uid 33)"),
        "{err}"
    );
    // A group-writable directory: the group can replace the link.
    s.dir("shared", 0, 0o775);
    chown(s.p("shared"), None, Some(ATTACKER)).expect("chgrp");
    s.link("shared/l", s.p("victim"), 0);
    let err = Dir::open(&s.p("shared/l")).expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("in a directory group www-data can write"),
        "{err}"
    );
}

#[test]
fn links_in_a_sticky_world_writable_directory_are_never_followed() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    s.dir("tmp", 0, 0o1777);
    s.link("tmp/theirs", s.p("victim"), ATTACKER);
    s.link("tmp/mine", s.p("target"), 0);
    for (name, owner) in [("theirs", " owned by www-data (uid 33)"), ("mine", "")] {
        let err = Dir::open(&s.p(&format!("tmp/{name}"))).expect_err("refused");
        let text = err.to_string();
        assert!(
            text.ends_with(&format!(
                "a symbolic link{owner} in a directory group root and every user can write"
            )),
            "{text}"
        );
    }
    // Real directories in it are walked (their own entries are judged as usual).
    s.dir("tmp/real", 0, 0o755);
    let d = Dir::open(&s.p("tmp/real")).expect("real dir");
    d.open_append(os("f"), 0o600).expect("append");
}

#[test]
fn a_trusted_link_into_the_attackers_directory_is_walked_by_the_same_rules() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    s.link("trusted/app", s.p("www"), 0);
    s.dir("www/state", ATTACKER, 0o755);
    s.link("www/evil", s.p("victim"), ATTACKER);
    // Into the attacker's real directory: allowed (it is theirs, and names in it are all
    // that can change).
    let d = Dir::open(&s.p("trusted/app/state")).expect("real dir behind a trusted link");
    assert_eq!(d.path(), s.p("trusted/app/state"));
    // On through their link: refused, named where the walk really was.
    let err = Dir::open(&s.p("trusted/app/evil")).expect_err("refused");
    assert!(
        err.to_string()
            .contains(&format!("refused to follow {}", s.p("www/evil").display())),
        "{err}"
    );
    assert_eq!(s.victim(), before);
}

#[test]
fn link_loops_and_long_chains_stop_with_an_eloop_like_error() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    s.link("trusted/a", s.p("trusted/b"), 0);
    s.link("trusted/b", "a", 0);
    s.link("trusted/self", "self", 0);
    for l in ["trusted/a", "trusted/self"] {
        let err = Dir::open(&s.p(l)).expect_err("loop");
        assert!(matches!(err, Error::TooManyLinks { .. }), "{err:?}");
        assert!(
            err.to_string().contains("more than 40 symbolic links"),
            "{err}"
        );
    }
    // 40 links in a row are fine, 41 are not.
    for i in 0..41 {
        let next = if i == 0 {
            s.p("target")
        } else {
            s.p(&format!("trusted/c{}", i - 1))
        };
        s.link(&format!("trusted/c{i}"), next, 0);
    }
    assert!(Dir::open(&s.p("trusted/c39")).is_ok());
    let err = Dir::open(&s.p("trusted/c40")).expect_err("41 links");
    assert!(matches!(err, Error::TooManyLinks { .. }), "{err:?}");
}

#[test]
fn dangling_links_and_missing_directories() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    // The attacker's dangling link as the last component: O_CREAT must not create its
    // target.
    s.link("www/journal.jsonl", s.p("victim/new"), ATTACKER);
    let d = Dir::open(&s.p("www")).expect("www");
    for err in [
        d.open_append(os("journal.jsonl"), 0o600).expect_err("link"),
        d.open_rw(os("journal.jsonl"), 0o600).expect_err("link"),
        d.open_read(os("journal.jsonl")).expect_err("link"),
    ] {
        assert!(matches!(err, Error::FinalSymlink { .. }), "{err:?}");
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
    }
    assert!(!s.p("victim/new").exists());
    // A trusted dangling link: an ordinary "not found", naming where.
    s.link("trusted/gone", s.p("nowhere/deeper"), 0);
    let err = Dir::open(&s.p("trusted/gone")).expect_err("dangling");
    assert!(err.is_not_found(), "{err:?}");
    assert!(
        err.to_string()
            .contains(&s.p("nowhere").display().to_string()),
        "{err}"
    );
    // A file in the middle of a path.
    let err = Dir::open(&s.p("victim/config/x")).expect_err("not a dir");
    assert!(matches!(err, Error::NotADirectory { .. }), "{err:?}");
    assert_eq!(s.victim(), before);
}

// ---------------------------------------------------------------------------------------
// What the attacker plants at the last component

#[test]
fn a_final_link_is_never_written_through_but_can_be_replaced_or_removed() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    s.link("www/pending.jsonl", s.p("victim/config"), ATTACKER);
    s.link("www/last-run.json", s.p("victim/config"), ATTACKER);
    let d = Dir::open(&s.p("www")).expect("www");
    assert!(matches!(
        d.open_rw(os("pending.jsonl"), 0o600),
        Err(Error::FinalSymlink { .. })
    ));
    // Replacing renames over the link itself.
    d.replace(os("last-run.json"), 0o640, |f| f.write_all(b"{}\n"))
        .expect("replace");
    let st = d
        .stat_at(os("last-run.json"))
        .expect("stat")
        .expect("there");
    assert_eq!((st.kind, st.mode, st.uid), (Kind::File, 0o640, 0));
    // Removing removes the link.
    assert!(d.unlink(os("pending.jsonl")).expect("unlink"));
    assert!(!d.unlink(os("pending.jsonl")).expect("gone"));
    // A link at a directory name.
    s.link("www/sub", s.p("victim/rootonly"), ATTACKER);
    assert!(matches!(
        d.open_dir(os("sub")),
        Err(Error::FinalSymlink { .. })
    ));
    assert!(matches!(
        d.mkdir(os("sub"), 0o700),
        Err(Error::FinalSymlink { .. })
    ));
    assert_eq!(s.victim(), before);
}

#[test]
fn hard_links_to_other_files_are_read_but_never_appended_to_or_truncated() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    // Where fs.protected_hardlinks is off, www-data can link root's files into its own
    // directory; root owns them, so only the link count gives them away.
    std::fs::hard_link(s.p("victim/config"), s.p("www/journal.jsonl")).expect("link");
    std::fs::hard_link(s.p("victim/rootonly/key"), s.p("www/run.lock")).expect("link");
    let d = Dir::open(&s.p("www")).expect("www");
    let err = d
        .open_append(os("journal.jsonl"), 0o600)
        .expect_err("hard link");
    assert!(matches!(err, Error::HardLinked { links: 2, .. }), "{err:?}");
    assert!(err.to_string().contains("has 2 names"), "{err}");
    let err = d.open_rw(os("run.lock"), 0o600).expect_err("hard link");
    assert!(matches!(err, Error::HardLinked { .. }), "{err:?}");
    // The mode was not tightened either.
    assert_eq!(mode_of(&s.p("victim/config")), 0o644);
    // Reading is harmless.
    assert_eq!(
        read_all(d.open_read(os("journal.jsonl")).expect("read")),
        "config\n"
    );
    // Replacing and removing change only the name in www/.
    d.replace(os("journal.jsonl"), 0o600, |f| f.write_all(b"x"))
        .expect("replace");
    assert!(d.unlink(os("run.lock")).expect("unlink"));
    assert_eq!(s.victim(), before);
}

#[test]
fn fifos_devices_and_directories_where_a_file_is_expected_are_refused_without_blocking() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    s.attacker("mkfifo pending.jsonl");
    // Root can make a device node; an unprivileged user cannot.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        s.p("www/journal.jsonl"),
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .expect("mknod /dev/null twin");
    s.dir("www/last-run.json", ATTACKER, 0o755);
    let d = Dir::open(&s.p("www")).expect("www");
    // No writer on the FIFO: a blocking open for reading would wait forever.
    for (name, kind) in [
        ("pending.jsonl", "a FIFO"),
        ("journal.jsonl", "a character device"),
        ("last-run.json", "a directory"),
    ] {
        let err = d.open_read(os(name)).expect_err(name);
        assert!(matches!(err, Error::NotRegular { .. }), "{name}: {err:?}");
        assert!(
            err.to_string()
                .ends_with(&format!("is {kind}, not a regular file")),
            "{err}"
        );
        for err in [
            d.open_append(os(name), 0o600).expect_err(name),
            d.open_rw(os(name), 0o600).expect_err(name),
        ] {
            assert!(
                matches!(err, Error::NotRegular { .. } | Error::Io { .. }),
                "{name}: {err:?}"
            );
        }
    }
}

#[test]
fn a_file_of_another_user_is_not_written_and_the_fix_is_named() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    // The case: www-data plants the run lock (0644) so any user can flock it.
    s.file("trusted/selfheal.lock", "", ATTACKER, 0o644);
    let (d, name) = Dir::open_parent(&s.p("trusted/selfheal.lock")).expect("parent");
    let err = d.open_rw(&name, 0o600).expect_err("not ours");
    assert!(matches!(err, Error::NotOwned { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: owned by www-data (uid 33), not by root (uid 0) who runs selfheal: run \
             selfheal as its owner: runuser -u www-data -- selfheal …",
            s.p("trusted/selfheal.lock").display()
        )
    );
    assert_eq!(mode_of(&s.p("trusted/selfheal.lock")), 0o644);
    assert!(d.open_read(&name).is_ok());
}

// ---------------------------------------------------------------------------------------
// Handles keep pointing where they were checked

#[test]
fn a_directory_swapped_for_a_link_after_it_was_reached_does_not_move_the_handle() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    s.dir("www/state", ATTACKER, 0o755);
    s.file("www/state/journal.jsonl", "", 0, 0o600);
    let d = Dir::open(&s.p("www/state")).expect("state");
    // Between two operations www-data moves the directory away and plants a link.
    s.attacker(&format!(
        "mv state state.old && ln -s {} state",
        s.p("victim").display()
    ));

    let mut j = d.open_append(os("journal.jsonl"), 0o600).expect("append");
    j.write_all(b"entry\n").expect("write");
    d.replace(os("config"), 0o644, |f| f.write_all(b"mine"))
        .expect("replace");
    d.open_rw(os("pending.jsonl"), 0o600).expect("rw");
    d.rename(os("pending.jsonl"), os("pending.old"))
        .expect("rename");
    assert!(d.mkdir(os("rootonly"), 0o700).expect("mkdir"));
    let mut t = d.create_temp(os("key"), 0o600).expect("temp");
    t.file_mut().write_all(b"k").expect("write");
    t.persist(os("key")).expect("persist");
    d.sync().expect("sync");
    assert!(d.unlink(os("key")).expect("unlink"));

    assert_eq!(s.victim(), before);
    assert_eq!(
        std::fs::read_to_string(s.p("www/state.old/journal.jsonl")).expect("read"),
        "entry\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.p("www/state.old/config")).expect("read"),
        "mine"
    );
    // A new walk sees the link, and refuses it.
    assert!(matches!(
        Dir::open(&s.p("www/state")),
        Err(Error::UntrustedLink { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// Temporary files

#[test]
fn temporary_names_are_random_and_a_planted_name_is_never_opened() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    let d = Dir::open(&s.p("www")).expect("www");
    // The old predictable names, planted.
    for guess in [
        format!("selfheal.prom.{}", std::process::id()),
        ".last-run.json.tmp".into(),
    ] {
        s.link(&format!("www/{guess}"), s.p("victim/config"), ATTACKER);
    }
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let t = d.create_temp(os("selfheal.prom"), 0o644).expect("temp");
        let n = t.name().to_string_lossy().into_owned();
        let hex = n
            .strip_prefix(".selfheal.prom.")
            .and_then(|r| r.strip_suffix(".tmp"))
            .expect("pattern");
        assert_eq!(hex.len(), 32, "{n}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{n}");
        assert!(s.p("www").join(&n).exists());
        names.insert(n);
        // Dropped: removed.
    }
    assert_eq!(names.len(), 50);
    assert!(names.iter().all(|n| !s.p("www").join(n).exists()));
    // O_EXCL: whatever sits at the chosen name — a link, a file — is an error, untouched.
    s.link("www/planted", s.p("victim/config"), ATTACKER);
    s.file("www/plain", "theirs", ATTACKER, 0o644);
    for n in ["planted", "plain"] {
        let Err((errno, err)) = d.create_new(os(n), 0o600) else {
            panic!("{n} was opened");
        };
        assert_eq!(errno, Errno::EXIST, "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(s.p("www/plain")).expect("read"),
        "theirs"
    );
    assert_eq!(s.victim(), before);
}

#[test]
fn replace_writes_exactly_the_mode_asked_and_leaves_no_temporary_file() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let d = Dir::create(&s.p("target/metrics"), 0o755).expect("create");
    for round in 0..3 {
        d.replace(os("selfheal.prom"), 0o664, |f| {
            writeln!(f, "selfheal_runs_total {round}")
        })
        .expect("replace");
    }
    let p = s.p("target/metrics/selfheal.prom");
    assert_eq!(
        std::fs::read_to_string(&p).expect("read"),
        "selfheal_runs_total 2\n"
    );
    assert_eq!(mode_of(&p), 0o664);
    let names: Vec<_> = std::fs::read_dir(s.p("target/metrics"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, [OsString::from("selfheal.prom")]);
    // A failing writer leaves the old file and no temporary file.
    let err = d
        .replace(os("selfheal.prom"), 0o664, |_| {
            Err(io::Error::other("full"))
        })
        .expect_err("fails");
    assert!(err.to_string().contains("full"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&p).expect("read"),
        "selfheal_runs_total 2\n"
    );
    assert_eq!(
        std::fs::read_dir(s.p("target/metrics"))
            .expect("ls")
            .count(),
        1
    );
}

#[test]
fn write_new_never_replaces_what_is_there_and_leaves_no_temporary_file() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let d = Dir::create(&s.p("etc/selfheal"), 0o755).expect("create");
    let wrote = d
        .write_new(os("app.toml"), 0o644, |f| writeln!(f, "[database]"))
        .expect("write");
    assert!(wrote);
    let p = s.p("etc/selfheal/app.toml");
    assert_eq!(std::fs::read_to_string(&p).expect("read"), "[database]\n");
    assert_eq!(mode_of(&p), 0o644);
    // A file there stays as it is, and so does a link (never followed).
    let again = d
        .write_new(os("app.toml"), 0o644, |f| writeln!(f, "[run]"))
        .expect("write");
    assert!(!again);
    assert_eq!(std::fs::read_to_string(&p).expect("read"), "[database]\n");
    symlink(s.p("elsewhere"), s.p("etc/selfheal/link.toml")).expect("symlink");
    assert!(
        !d.write_new(os("link.toml"), 0o644, |f| writeln!(f, "x"))
            .expect("write")
    );
    assert!(!s.p("elsewhere").exists());
    let mut names: Vec<_> = std::fs::read_dir(s.p("etc/selfheal"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [OsString::from("app.toml"), OsString::from("link.toml")]
    );
}

// ---------------------------------------------------------------------------------------
// Opening for append / read-write

#[test]
fn append_and_rw_create_with_the_mode_tighten_an_existing_file_and_never_truncate() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let d = Dir::create(&s.p("target/state"), 0o750).expect("create");
    let mut j = d.open_append(os("journal.jsonl"), 0o600).expect("append");
    j.write_all(b"one\n").expect("write");
    drop(j);
    assert_eq!(mode_of(&s.p("target/state/journal.jsonl")), 0o600);
    let mut j = d.open_append(os("journal.jsonl"), 0o600).expect("append");
    j.seek(SeekFrom::Start(0)).expect("seek");
    j.write_all(b"two\n").expect("write");
    let mut text = String::new();
    j.seek(SeekFrom::Start(0)).expect("seek");
    j.read_to_string(&mut text).expect("read back");
    assert_eq!(text, "one\ntwo\n", "appended, whatever the offset");

    s.file("target/state/pending.jsonl", "left\n", 0, 0o644);
    let f = d.open_rw(os("pending.jsonl"), 0o600).expect("rw");
    assert_eq!(mode_of(&s.p("target/state/pending.jsonl")), 0o600);
    assert_eq!(read_all(f), "left\n");
}

// ---------------------------------------------------------------------------------------
// Private directories

#[test]
fn a_state_dir_not_private_to_the_running_user_is_refused_with_the_fix() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let what = "state directory (run.state_dir)";
    s.dir("www/selfheal", ATTACKER, 0o750);
    let err = Dir::open(&s.p("www/selfheal"))
        .expect("open")
        .check_private(what)
        .expect_err("not ours");
    assert!(matches!(err, Error::NotPrivate { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the state directory (run.state_dir) is owned by www-data (uid 33), not by \
             root (uid 0) who runs selfheal: run selfheal as its owner: runuser -u www-data \
             -- selfheal …",
            s.p("www/selfheal").display()
        )
    );
    s.dir("target/open", 0, 0o777);
    let err = Dir::open(&s.p("target/open"))
        .expect("open")
        .check_private(what)
        .expect_err("writable");
    assert_eq!(
        err.to_string(),
        format!(
            "{0}: the state directory (run.state_dir) can be written by group root and every \
             user, not only by root (uid 0) who runs selfheal: make it private: chmod go-w {0}",
            s.p("target/open").display()
        )
    );
    // Created where missing, private, usable.
    let d = Dir::create(&s.p("target/var/lib/selfheal"), 0o750).expect("create");
    d.check_private(what).expect("private");
    assert_eq!(mode_of(&s.p("target/var/lib/selfheal")) & 0o022, 0);
    assert!(d.mkdir(os("confirm"), 0o700).expect("mkdir"));
    assert!(!d.mkdir(os("confirm"), 0o700).expect("already there"));
}

#[test]
fn create_makes_every_missing_directory_however_deep_and_refuses_a_link_on_the_way() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let deep: PathBuf = (0..60).fold(s.p("target"), |p, i| p.join(format!("d{i}")));
    let d = Dir::create(&deep, 0o700).expect("create");
    d.open_append(os("f"), 0o600).expect("append");
    assert!(deep.join("f").is_file());
    assert_eq!(mode_of(&deep) & 0o077, 0);
    // Existing directories are walked, not changed; an attacker's link is not made into
    // a directory's place nor followed.
    s.link("www/state", s.p("victim"), ATTACKER);
    let before = s.victim();
    let err = Dir::create(&s.p("www/state/selfheal"), 0o750).expect_err("link");
    assert!(matches!(err, Error::UntrustedLink { .. }), "{err:?}");
    assert_eq!(s.victim(), before);
}

// ---------------------------------------------------------------------------------------
// Removing by inode

#[test]
fn remove_if_same_removes_only_the_inode_checked() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    s.dir("www/locks", ATTACKER, 0o755);
    s.file("www/locks/a.lock", "123\n", ATTACKER, 0o644);
    let d = Dir::open(&s.p("www/locks")).expect("locks");
    // Held open from the check to the removal, as the release does.
    let held = d.open_read(os("a.lock")).expect("open");

    // A new worker's file took the name since the check: not removed.
    std::fs::remove_file(s.p("www/locks/a.lock")).expect("rm");
    s.file("www/locks/a.lock", "456\n", ATTACKER, 0o644);
    assert_eq!(
        d.remove_if_same(os("a.lock"), &held).expect("rm"),
        Removal::Replaced
    );
    assert_eq!(
        std::fs::read_to_string(s.p("www/locks/a.lock")).expect("kept"),
        "456\n"
    );

    // The inode held: removed, and nothing else left behind.
    let held = d.open_read(os("a.lock")).expect("open");
    assert_eq!(
        d.remove_if_same(os("a.lock"), &held).expect("rm"),
        Removal::Removed
    );
    assert_eq!(std::fs::read_dir(s.p("www/locks")).expect("ls").count(), 0);
    assert_eq!(
        d.remove_if_same(os("a.lock"), &held).expect("rm"),
        Removal::Absent
    );

    // A link at the name to the very file held is not that file.
    let victim = File::open(s.p("victim/config")).expect("open");
    s.link("www/locks/b.lock", s.p("victim/config"), ATTACKER);
    assert_eq!(
        d.remove_if_same(os("b.lock"), &victim).expect("rm"),
        Removal::Replaced
    );
    // A hard link to it is: that name (in www-data's directory) goes, the file stays.
    std::fs::hard_link(s.p("victim/config"), s.p("www/locks/c.lock")).expect("link");
    assert_eq!(
        d.remove_if_same(os("c.lock"), &victim).expect("rm"),
        Removal::Removed
    );
    assert_eq!(s.victim(), before);
}

#[test]
fn a_file_renamed_aside_that_is_not_the_one_checked_is_put_back() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    s.dir("www/locks", ATTACKER, 0o755);
    let d = Dir::open(&s.p("www/locks")).expect("locks");
    s.file("www/locks/checked", "", ATTACKER, 0o644);
    let checked = FileId::of(&d.open_read(os("checked")).expect("open")).expect("id");
    // What a race between the last check and the rename leaves: another file under the
    // private name.
    s.file("www/locks/.a.lock.aside", "new worker\n", ATTACKER, 0o644);
    let put = d
        .settle_aside(os("a.lock"), os(".a.lock.aside"), checked)
        .expect("settle");
    assert_eq!(put, Removal::PutBack);
    assert_eq!(
        std::fs::read_to_string(s.p("www/locks/a.lock")).expect("back"),
        "new worker\n"
    );
    assert!(!s.p("www/locks/.a.lock.aside").exists());
    // And if yet another file took the name meanwhile: neither is replaced; the error
    // says where the second one is.
    s.file("www/locks/.a.lock.aside", "third\n", ATTACKER, 0o644);
    let err = d
        .settle_aside(os("a.lock"), os(".a.lock.aside"), checked)
        .expect_err("stranded");
    assert!(matches!(err, Error::Stranded { .. }), "{err:?}");
    assert!(err.to_string().contains(".a.lock.aside"), "{err}");
    assert_eq!(
        std::fs::read_to_string(s.p("www/locks/a.lock")).expect("kept"),
        "new worker\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.p("www/locks/.a.lock.aside")).expect("kept"),
        "third\n"
    );
}

#[test]
fn errors_keep_the_io_error_and_name_the_path() {
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let err = Dir::open(&s.p("target/missing/deeper")).expect_err("missing");
    assert!(err.is_not_found());
    let Error::Io {
        component, source, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(component.as_deref(), Some(s.p("target/missing").as_path()));
    assert_eq!(source.kind(), io::ErrorKind::NotFound);
    assert!(std::error::Error::source(&err).is_some());
    let text = err.to_string();
    let head = format!(
        "{}: opening {}: ",
        s.p("target/missing/deeper").display(),
        s.p("target/missing").display()
    );
    assert!(
        text.starts_with(&head) && text.ends_with("(os error 2)"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Run as an unprivileged user

/// Set in the copy of this test binary that the test below starts as `nobody`.
const CHILD_BASE: &str = "SELFHEAL_FSAFE_NOBODY_BASE";
const NOBODY: u32 = 65534;

#[test]
fn as_nobody_its_own_links_are_followed_and_roots_directory_is_not_its_state_dir() {
    if let Some(base) = std::env::var_os(CHILD_BASE) {
        return as_nobody_child(Path::new(&base));
    }
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    s.dir("nob", NOBODY, 0o755);
    s.dir("nob/real", NOBODY, 0o755);
    s.link("nob/mine", "real", NOBODY);
    s.link("nob/theirs", "real", ATTACKER);
    s.link("www/rootmade", s.p("nob/real"), 0);
    s.file("nob/roots.lock", "", 0, 0o666);
    // This very test, again, in a copy of the test binary running as nobody.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "fsafe::tests::as_nobody_its_own_links_are_followed_and_roots_directory_is_not_its_state_dir",
            "--test-threads=1",
        ])
        .env(CHILD_BASE, &s.base)
        .output()
        .expect("setpriv");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the test ran as nobody: {text}");
    assert_eq!(
        std::fs::read_to_string(s.p("nob/real/journal.jsonl")).expect("written by nobody"),
        "nobody\n"
    );
}

/// The part that runs as nobody (uid 65534), in the tree the root part made.
fn as_nobody_child(base: &Path) {
    assert_eq!(euid(), NOBODY);
    let p = |rel: &str| base.join(rel);
    // Its own link in its own directory: followed.
    let d = Dir::open(&p("nob/mine")).expect("own link");
    let mut f = d.open_append(os("journal.jsonl"), 0o600).expect("append");
    f.write_all(b"nobody\n").expect("write");
    d.check_private("state directory (run.state_dir)")
        .expect("its own directory is private to it");
    // Another user's link, and root's link in www-data's directory: refused.
    let err = Dir::open(&p("nob/theirs")).expect_err("theirs");
    assert!(
        err.to_string()
            .ends_with("a symbolic link owned by www-data (uid 33)"),
        "{err}"
    );
    let err = Dir::open(&p("www/rootmade")).expect_err("in www-data's directory");
    assert!(
        err.to_string()
            .ends_with("a symbolic link in a directory www-data can write"),
        "{err}"
    );
    // Root's directory is not nobody's state directory; root's file is not its run lock.
    let err = Dir::open(&p("trusted"))
        .expect("open")
        .check_private("state directory (run.state_dir)")
        .expect_err("root's");
    assert!(
        err.to_string().ends_with(
            "is owned by root (uid 0), not by nobody (uid 65534) who runs selfheal: run \
             selfheal as its owner: runuser -u root -- selfheal …"
        ),
        "{err}"
    );
    let err = Dir::open(&p("nob"))
        .expect("open")
        .open_rw(os("roots.lock"), 0o600)
        .expect_err("root's file");
    assert!(matches!(err, Error::NotOwned { .. }), "{err:?}");
}
