//! The house has floors: no module of `src/` uses one that uses it back (the module map in
//! `src/lib.rs`). Read from the source: every `crate::NAME` a module's code names (its
//! tests and comments left out) is an edge, and the graph of the top-level modules must
//! have no circle. A circle found is printed with the lines that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its tests (a `#[cfg(test)]` item runs to the end of the
/// file here, as every module of `src/` keeps its tests last) and without comments.
fn code(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `code` names: `crate::a::b` and `use crate::{a, b::c}`.
fn used(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                out.insert(ident(part.trim()));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| modules.contains(m));
    out
}

#[test]
fn no_module_uses_one_that_uses_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let top = |p: &Path| -> String {
        let rel = p.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a name");
        first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| top(p))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let m = top(f);
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if m == "lib"
            || m == "main"
            || name == "tests.rs"
            || f.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read");
        let mut uses = used(&code(&text), &modules);
        uses.remove(&m);
        edges.entry(m).or_default().extend(uses);
    }
    // A circle: a module that reaches itself.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((m, path)) = stack.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == start {
                    let mut c = path.clone();
                    c.push(start.clone());
                    circles.push(c.join(" → "));
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that use one another (a circle each):\n{}",
        circles.join("\n")
    );
    // The floors the module map names are there to be found: the check is reading code.
    assert!(edges["check"].contains("config"), "{edges:?}");
    assert!(edges["config"].contains("error"), "{edges:?}");
}
