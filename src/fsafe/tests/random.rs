//! Random trees planted by the attacker — directories of any mode, links to the victim's
//! files and directories (absolute and relative, dangling, looping), root's own links in
//! the attacker's directories, hard links to the victim's files, FIFOs, files of either
//! owner — beside root's trusted links to the target. Every operation of [`Dir`] is tried
//! on every path in the tree, in a random order; afterwards no file of the victim's has
//! changed. Paths through root's trusted links alone must work.
//!
//! Seeded (a fixed number of cases, so a failure names its seed and replays exactly);
//! `SELFHEAL_FSAFE_CASES` runs more.

use super::*;

const CASES: u64 = 32;

/// splitmix64: small, seeded, good enough to shape trees.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// A link target the attacker might choose, from the link at `rel`.
fn attacker_target(s: &Scene, rng: &mut Rng, rel: &str, nodes: &[String]) -> PathBuf {
    let up = "../".repeat(rel.matches('/').count());
    match rng.below(12) {
        0 => s.p("victim"),
        1 => s.p("victim/rootonly"),
        2 => s.p("victim/config"),
        3 => s.p("victim/rootonly/key"),
        4 => s.p("victim/missing"),
        5 => s.p("victim/rootonly/missing"),
        6 => PathBuf::from(format!("{up}victim")),
        7 => PathBuf::from(format!("{up}victim/rootonly")),
        8 => s.p("target"),
        9 => PathBuf::from("."),
        10 => PathBuf::from(".."),
        _ => s.p(rng.pick(nodes).as_str()),
    }
}

struct Tree {
    /// Paths to try every operation on.
    paths: Vec<PathBuf>,
    /// Root's links that lead to `target/` through trusted links only.
    to_target: Vec<PathBuf>,
}

fn plant(s: &Scene, rng: &mut Rng) -> Tree {
    let mut dirs = vec!["www".to_string()];
    let mut nodes = vec!["www".to_string()];
    let mut to_target = Vec::new();
    let mut root_dirs: Vec<String> = Vec::new();
    for i in 0..4 + rng.below(16) {
        let parent = rng.pick(&dirs).clone();
        let rel = format!("{parent}/n{i}");
        match rng.below(10) {
            0 | 1 => {
                s.dir(&rel, ATTACKER, *rng.pick(&[0o755, 0o700, 0o777, 0o1777]));
                dirs.push(rel.clone());
            }
            2..=4 => {
                let t = attacker_target(s, rng, &rel, &nodes);
                s.link(&rel, t, ATTACKER);
            }
            5 => {
                // Root's own link in a directory the attacker can write (in root's own
                // directory it would be trusted: there, the attacker's).
                let t = attacker_target(s, rng, &rel, &nodes);
                let owner = if root_dirs.contains(&parent) {
                    ATTACKER
                } else {
                    0
                };
                s.link(&rel, t, owner);
            }
            6 => {
                let f = rng.pick(&["victim/config", "victim/rootonly/key"]);
                std::fs::hard_link(s.p(f), s.p(&rel)).expect("hard link");
            }
            7 => {
                nix::unistd::mkfifo(&s.p(&rel), nix::sys::stat::Mode::from_bits_truncate(0o666))
                    .expect("fifo");
                lchown(s.p(&rel), Some(ATTACKER), Some(ATTACKER)).expect("chown");
            }
            8 => {
                let owner = *rng.pick(&[0, ATTACKER]);
                s.file(&rel, "planted\n", owner, 0o644);
            }
            _ => {
                // A directory of root's inside the attacker's, holding root's link to the
                // target: trusted where it is.
                s.dir(&rel, 0, 0o755);
                s.link(&format!("{rel}/t"), s.p("target"), 0);
                nodes.push(format!("{rel}/t"));
                to_target.push(s.p(&format!("{rel}/t")));
                dirs.push(rel.clone());
                root_dirs.push(rel.clone());
            }
        }
        nodes.push(rel);
    }
    for j in 0..=rng.below(4) {
        let rel = format!("trusted/t{j}");
        let (t, good) = match rng.below(4) {
            0 => (s.p("target"), true),
            1 => (PathBuf::from("../target"), true),
            2 if j > 0 => {
                let prev = format!("trusted/t{}", rng.below(j));
                let good = to_target.contains(&s.p(&prev));
                (s.p(&prev), good)
            }
            _ => (s.p(rng.pick(nodes.as_slice()).as_str()), false),
        };
        s.link(&rel, t, 0);
        if good {
            to_target.push(s.p(&rel));
        }
        nodes.push(rel);
    }
    let mut paths = vec![s.p("target/f")];
    for n in &nodes {
        paths.push(s.p(n));
        paths.push(s.p(n).join("f"));
        paths.push(s.p(n).join("sub/f"));
    }
    Tree { paths, to_target }
}

/// Every operation on `name` in `d`, in an order the seed chooses.
fn operate(d: &Dir, name: &OsStr, victim: &File, rng: &mut Rng) {
    let mut order: Vec<usize> = (0..13).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    for op in order {
        match op {
            0 => {
                let _ = d.stat_at(name);
            }
            1 => {
                if let Ok(f) = d.open_read(name) {
                    let mut buf = Vec::new();
                    let _ = f.take(1 << 16).read_to_end(&mut buf);
                }
            }
            2 => {
                if let Ok(mut f) = d.open_append(name, 0o600) {
                    let _ = f.write_all(b"appended\n");
                }
            }
            3 => {
                if let Ok(mut f) = d.open_rw(name, 0o600) {
                    let _ = f.set_len(0).and_then(|()| f.write_all(b"rewritten\n"));
                }
            }
            4 => {
                let _ = d.replace(name, 0o644, |f| f.write_all(b"replaced\n"));
            }
            5 => {
                let _ = d.create_temp(name, 0o600);
            }
            6 => {
                let mut aside = name.to_os_string();
                aside.push(".moved");
                if d.rename(name, &aside).is_ok() {
                    let _ = d.rename(&aside, name);
                }
            }
            7 => {
                let _ = d.mkdir(name, 0o700);
            }
            8 => {
                if let Ok(sub) = d.open_dir(name) {
                    let _ = sub.open_append(os("inner"), 0o600);
                }
            }
            9 => {
                let _ = d.remove_if_same(name, victim);
            }
            10 => {
                if let Ok(f) = d.open_read(name) {
                    let _ = d.remove_if_same(name, &f);
                }
            }
            11 => {
                let _ = d.sync();
            }
            _ => {
                let _ = d.unlink(name);
            }
        }
    }
}

fn exercise(path: &Path, victim: &File, rng: &mut Rng) {
    if let Ok(d) = Dir::open(path) {
        let _ = d.stat();
        let _ = d.check_private("directory");
        operate(&d, os("f"), victim, rng);
    }
    let _ = Dir::create(&path.join("made/deeper"), 0o750);
    if let Ok((d, name)) = Dir::open_parent(path) {
        operate(&d, &name, victim, rng);
    }
}

#[test]
fn random_planted_trees_never_change_a_file_outside_the_attackers_directory_and_the_target() {
    if !root_or_skip() {
        return;
    }
    let cases = std::env::var("SELFHEAL_FSAFE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let mut tried = 0usize;
    let mut trusted_used = 0usize;
    for case in 0..cases {
        let seed = 0x5e1f_4ea1_0000_0000 ^ case;
        let mut rng = Rng(seed);
        let s = Scene::in_memory();
        let before = s.victim();
        let victim = File::open(s.p("victim/config")).expect("open");
        let tree = plant(&s, &mut rng);

        // Root's trusted links to the target work (before anything below moves them).
        for link in &tree.to_target {
            let (d, name) = Dir::open_parent(&link.join("through"))
                .unwrap_or_else(|e| panic!("seed {seed:#x}: {}: {e}", link.display()));
            d.open_append(&name, 0o600)
                .unwrap_or_else(|e| panic!("seed {seed:#x}: {}: {e}", link.display()));
            assert!(s.p("target/through").is_file(), "seed {seed:#x}");
            trusted_used += 1;
        }

        for path in &tree.paths {
            exercise(path, &victim, &mut rng);
            tried += 1;
        }
        let after = s.victim();
        assert!(
            after == before,
            "seed {seed:#x}: the victim's files changed\nbefore: {before:#?}\nafter: {after:#?}"
        );
    }
    // The generator really made trees and trusted paths (a control on the test itself).
    assert!(tried as u64 > cases * 10, "{tried} paths tried");
    assert!(
        trusted_used as u64 > cases / 2,
        "{trusted_used} trusted links used"
    );
}

#[test]
fn the_same_operations_without_the_walks_rules_would_change_the_victim() {
    // A control: the trees above are dangerous. Doing the same writes through plain
    // `std::fs` (following every link) does change the victim's files.
    if !root_or_skip() {
        return;
    }
    let s = Scene::new();
    let before = s.victim();
    s.link("www/locks", s.p("victim/rootonly"), ATTACKER);
    s.link("www/journal.jsonl", s.p("victim/config"), ATTACKER);
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.p("www/journal.jsonl"))
        .and_then(|mut f| f.write_all(b"x"))
        .expect("std follows the link");
    std::fs::remove_file(s.p("www/locks/key")).expect("std follows the parent link");
    assert_ne!(s.victim(), before);
}
