//! The house has floors, read from the source. In `src/`, every `crate::…` and `super::…`
//! path a module's code names (its tests and comments left out) is a use of another module:
//! no module uses one that uses it back (the module map in `src/lib.rs`), and each layer
//! that map describes uses nothing from the floors it must not reach — the pure decision
//! core no I/O, the adapters no judgement, the configuration nothing it would touch. A
//! circle or a broken rule is printed with the lines that make it.
//!
//! In `tests/`, every file is a module of the one test binary (`Cargo.toml` turns off the
//! discovery of test binaries), so a file no `mod` names would never run: each must be
//! reached from `tests/tests.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
}

/// The code of a file without its tests (a `#[cfg(test)]` item runs to the end of the
/// file here, as every module of `src/` keeps its tests last) and without comments, line
/// for line.
fn code(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One module naming another: the path it names (from the crate root) and where.
struct Use {
    /// The module whose code it is (`["check", "sweep"]`).
    from: Vec<String>,
    /// The path named, from the crate root (`["store", "RunningRow"]`).
    to: Vec<String>,
    file: PathBuf,
    line: usize,
    text: String,
}

impl Use {
    fn at(&self) -> String {
        format!(
            "src/{}:{}: {}",
            self.file.display(),
            self.line,
            self.text.trim()
        )
    }
}

/// The module a file of `src/` is: `check/sweep.rs` is `check::sweep`, `check/mod.rs` is
/// `check`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// The identifiers of a path, `a::b::c`, up to what ends it (a `::{` group stays in
/// `rest`).
fn path_at(s: &str) -> (Vec<String>, &str) {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_string());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            _ => break,
        }
    }
    (segs, rest)
}

/// Where the group that `body` opens ends: the index of its closing brace.
fn group_end(body: &str) -> usize {
    let mut depth = 0;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    body.len()
}

/// The paths a `use` group `{a, b::{c, d}, self}` after `prefix` names.
fn group(prefix: &[String], body: &str, out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    for part in parts {
        let part = part.trim();
        if part.is_empty() || part == "*" {
            continue;
        }
        let (segs, rest) = path_at(part);
        let mut full = prefix.to_vec();
        if segs.first().is_some_and(|s| s == "self") {
            out.push(full);
            continue;
        }
        full.extend(segs);
        match rest.strip_prefix("::{") {
            Some(inner) => group(&full, &inner[..group_end(inner)], out),
            None => out.push(full),
        }
    }
}

/// Every use of a module path in the code of `src/` (tests and `tests.rs` files left out).
fn uses(src: &Path) -> Vec<Use> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut out = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src).expect("under src");
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if rel == Path::new("lib.rs")
            || rel == Path::new("main.rs")
            || name == "tests.rs"
            || rel.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read");
        out.extend(uses_in(&module_of(src, f), rel, &text));
    }
    out
}

/// The uses of module paths in `text`, the code of module `from` in file `file`: each
/// `crate::…` and `super::…` path, a `{…}` group read as the paths it names.
fn uses_in(from: &[String], file: &Path, text: &str) -> Vec<Use> {
    let code = code(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        // A path starting with `crate` or `super`, if this `::` follows that word.
        let head = &code[..i];
        let word_start = head
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        let word = &head[word_start..];
        if (word != "crate" && word != "super") || head[..word_start].ends_with("::") {
            continue; // `super::super::x` is read from its first `super`
        }
        let mut base: Vec<String> = if word == "crate" {
            Vec::new()
        } else {
            from[..from.len().saturating_sub(1)].to_vec()
        };
        let mut rest = &code[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let mut named = Vec::new();
        match rest.strip_prefix('{') {
            Some(body) => group(&base, &body[..group_end(body)], &mut named),
            None => {
                let (segs, rest) = path_at(rest);
                let mut full = base;
                full.extend(segs);
                match rest.strip_prefix("::{") {
                    Some(inner) => group(&full, &inner[..group_end(inner)], &mut named),
                    None => named.push(full),
                }
            }
        }
        let line = head.matches('\n').count() + 1;
        for to in named.into_iter().filter(|p| !p.is_empty()) {
            out.push(Use {
                from: from.to_vec(),
                to,
                file: file.to_path_buf(),
                line,
                text: lines.get(line - 1).copied().unwrap_or("").to_string(),
            });
        }
    }
    out
}

#[test]
fn the_reader_of_src_finds_every_form_of_path() {
    let text = "//! crate::commented::out\n\
                use crate::a::{self, b::{C, d}, e as f};\n\
                use super::g::H;\n\
                fn x() { crate::i::j(super::super::k::l); } // crate::m\n\
                #[cfg(test)]\n\
                mod tests { use crate::n; }\n";
    let from = ["p".to_string(), "q".to_string(), "r".to_string()];
    let found: Vec<(String, usize)> = uses_in(&from, Path::new("p/q/r.rs"), text)
        .iter()
        .map(|u| (u.to.join("::"), u.line))
        .collect();
    let want = [
        ("a", 2),
        ("a::b::C", 2),
        ("a::b::d", 2),
        ("a::e", 2),
        ("p::q::g::H", 3),
        ("i::j", 4),
        ("p::k::l", 4),
    ];
    assert_eq!(
        found,
        want.map(|(p, l)| (p.to_string(), l)),
        "comments and tests are left out; groups, `super::` and `super::super::` resolved"
    );
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules of `src/`.
fn top_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("read src")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|m| m != "lib" && m != "main")
        .collect()
}

#[test]
fn no_module_uses_one_that_uses_it_back() {
    let src = src();
    let modules = top_modules(&src);
    // Top-level module → the modules it uses, each with the lines that make the edge.
    let mut edges: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for u in uses(&src) {
        let (Some(m), Some(to)) = (u.from.first(), u.to.first()) else {
            continue;
        };
        if m != to && modules.contains(to) {
            edges
                .entry(m.clone())
                .or_default()
                .entry(to.clone())
                .or_default()
                .push(u.at());
        }
    }
    // Each line once (a `use` group names a module once per item), at most three an edge.
    for lines in edges.values_mut().flat_map(BTreeMap::values_mut) {
        lines.dedup();
        if lines.len() > 3 {
            let more = lines.len() - 3;
            lines.truncate(3);
            lines.push(format!("… and {more} more"));
        }
    }
    // A circle: a module that reaches itself.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((m, path)) = stack.pop() {
            for next in edges.get(&m).into_iter().flat_map(BTreeMap::keys) {
                if next == start {
                    let mut c = path.clone();
                    c.push(start.clone());
                    let lines: Vec<String> = c
                        .windows(2)
                        .flat_map(|w| edges[&w[0]][&w[1]].iter().map(|l| format!("    {l}")))
                        .collect();
                    circles.push(format!("{}\n{}", c.join(" → "), lines.join("\n")));
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
        "modules that use one another (a circle each, with its lines):\n{}",
        circles.join("\n")
    );
    // The floors the module map names are there to be found: the check is reading code.
    assert!(edges["check"].contains_key("config"), "{edges:?}");
    assert!(edges["config"].contains_key("error"), "{edges:?}");
}

/// A layer of `src/`: modules that must not use certain others.
struct Layer {
    /// What the rule keeps, in words (printed when it breaks).
    rule: &'static str,
    /// The modules it is about (`check::recovery` for one room of a module), or every
    /// top-level module when empty.
    modules: &'static [&'static str],
    /// Modules it is not about, with `modules` empty.
    but: &'static [&'static str],
    /// The modules (or paths) they must not use.
    must_not_use: &'static [&'static str],
    /// Paths under those they may still name.
    except: &'static [&'static str],
}

/// Modules whose work is I/O: files, the database, processes, sockets, the terminal.
/// (`clock` and `holder_line` hold pure pieces — a duration in words, the holder line's
/// type — beside their reading of the clock and of a lock file; the core uses only those.)
const IO: &[&str] = &[
    "app", "apply", "check", "cli", "cron", "demo", "doctor", "eventlog", "evidence", "fix",
    "fsafe", "history", "host", "init", "journal", "metrics", "person", "probe", "resolve", "run",
    "runlock", "show", "state", "stats", "store",
];

/// The layers `src/lib.rs` describes, as they hold.
const LAYERS: &[Layer] = &[
    Layer {
        rule: "decide is the pure core: it names no module that does I/O",
        modules: &["decide"],
        but: &[],
        must_not_use: IO,
        except: &[],
    },
    Layer {
        rule: "the configuration is validated before anything is touched: config names no \
               module that reads rows, probes, judges, writes or reports",
        modules: &["config"],
        but: &[],
        must_not_use: &[
            "apply", "check", "decide", "doctor", "eventlog", "evidence", "journal", "metrics",
            "probe", "report", "resolve", "run", "show", "state", "stats", "store",
        ],
        except: &[],
    },
    Layer {
        rule: "the database adapters never decide, probe, journal or print: store names none \
               of those",
        modules: &["store"],
        but: &[],
        must_not_use: &[
            "apply", "check", "decide", "doctor", "eventlog", "evidence", "journal", "metrics",
            "probe", "report", "resolve", "run", "show", "state", "stats",
        ],
        except: &[],
    },
    Layer {
        rule: "the probes look at this host, never at the database, and never judge or \
               report: probe names no store but a row handed to it",
        modules: &["probe"],
        but: &[],
        must_not_use: &[
            "apply", "check", "doctor", "eventlog", "evidence", "journal", "metrics", "report",
            "resolve", "show", "state", "stats", "store",
        ],
        except: &["store::RunningRow"],
    },
    Layer {
        rule: "evidence gathers and never writes: evidence names no journal, state, writer \
               or report",
        modules: &["evidence"],
        but: &[],
        must_not_use: &[
            "apply", "check", "eventlog", "journal", "metrics", "report", "resolve", "state",
        ],
        except: &[],
    },
    Layer {
        rule: "a stopped run's intents are settled from the journal and the store alone: \
               check::recovery names no probe, evidence or verdict",
        modules: &["check::recovery"],
        but: &[],
        must_not_use: &["decide", "evidence", "probe"],
        except: &[],
    },
    Layer {
        rule: "the report renders what it is given: report opens no file, probe, journal or \
               log",
        modules: &["report"],
        but: &[],
        must_not_use: &[
            "apply", "check", "eventlog", "fsafe", "journal", "metrics", "probe", "resolve", "run",
            "runlock", "state",
        ],
        except: &[],
    },
    Layer {
        rule: "doctor and stats write nothing: they name neither apply nor resolve",
        modules: &["doctor", "stats"],
        but: &[],
        must_not_use: &["apply", "resolve"],
        except: &[],
    },
    Layer {
        rule: "init writes no row and keeps no record: it judges through check's dry run and \
               names neither apply, resolve, journal nor state",
        modules: &["init"],
        but: &[],
        must_not_use: &["apply", "resolve", "journal", "state"],
        except: &[],
    },
    Layer {
        rule: "selfheal run never touches the job table: run names no store, check, \
               evidence, journal, apply or resolve",
        modules: &["run"],
        but: &[],
        must_not_use: &["apply", "check", "evidence", "journal", "resolve", "store"],
        except: &[],
    },
    Layer {
        rule: "no clap type goes further than app: only app names cli",
        modules: &[],
        but: &["app", "cli"],
        must_not_use: &["cli"],
        except: &[],
    },
    Layer {
        rule: "app is the top floor: no module names it",
        modules: &[],
        but: &["app"],
        must_not_use: &["app"],
        except: &[],
    },
    Layer {
        rule: "a database backend is reached through store alone: no other module names \
               store::mysql, store::postgres, store::sqlite or store::mycnf",
        modules: &[],
        but: &["store"],
        must_not_use: &[
            "store::mysql",
            "store::postgres",
            "store::sqlite",
            "store::mycnf",
        ],
        except: &[],
    },
    Layer {
        rule: "the foundations stand alone: fsafe, escape, clock, zone, host and cron name no \
               other module but zone (the time zone rules clock places naive times by)",
        modules: &["fsafe", "escape", "clock", "zone", "host", "cron"],
        but: &[],
        must_not_use: &["*"],
        except: &["zone"],
    },
];

fn path(p: &str) -> Vec<String> {
    p.split("::").map(str::to_string).collect()
}

#[test]
fn each_layer_of_src_uses_only_what_its_rule_allows() {
    let src = src();
    let modules = top_modules(&src);
    let all = uses(&src);
    // A rule about a module that is gone is a rule that no longer checks anything.
    for layer in LAYERS {
        for m in layer
            .modules
            .iter()
            .chain(layer.but)
            .chain(layer.must_not_use.iter().filter(|m| **m != "*"))
        {
            let top = path(m).remove(0);
            assert!(
                modules.contains(&top),
                "the rule \"{}\" names `{m}`, which src/ no longer has: update the rule",
                layer.rule
            );
        }
    }
    let mut broken = Vec::new();
    for layer in LAYERS {
        let mut lines = Vec::new();
        for u in &all {
            let Some(own) = u.from.first() else { continue };
            let about = if layer.modules.is_empty() {
                !layer.but.contains(&own.as_str())
            } else {
                layer.modules.iter().any(|m| u.from.starts_with(&path(m)))
            };
            // A module's own rooms are its own business; only the crate's modules count.
            if !about
                || u.to.first() == Some(own)
                || !u.to.first().is_some_and(|t| modules.contains(t))
            {
                continue;
            }
            let forbidden = layer
                .must_not_use
                .iter()
                .any(|m| *m == "*" || u.to.starts_with(&path(m)));
            let excepted = layer.except.iter().any(|m| u.to.starts_with(&path(m)));
            if forbidden && !excepted {
                lines.push(format!("    {}", u.at()));
            }
        }
        lines.dedup();
        if !lines.is_empty() {
            broken.push(format!("{}:\n{}", layer.rule, lines.join("\n")));
        }
    }
    assert!(
        broken.is_empty(),
        "layers of src/ that use what their rule keeps out (each with its lines):\n{}",
        broken.join("\n")
    );
    // The rules were read against code: src/ names its modules hundreds of times.
    assert!(all.len() > 200, "{} uses found in src/", all.len());
}

/// The modules a file of `tests/` declares (`mod name;`, `pub(crate) mod name;`), as
/// files: `dir/name.rs` or `dir/name/mod.rs`, where `dir` is the file's own directory for
/// `tests.rs` and `mod.rs`, and `dir/stem/` for any other file.
fn declared(file: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(file).expect("read");
    let dir = file.parent().expect("a directory");
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let base = if name == "tests.rs" || name == "mod.rs" {
        dir.to_path_buf()
    } else {
        dir.join(name.trim_end_matches(".rs"))
    };
    code(&text)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or(l.strip_prefix("pub "))
                .unwrap_or(l);
            let m = l.strip_prefix("mod ")?.strip_suffix(';')?;
            let flat = base.join(format!("{m}.rs"));
            Some(if flat.exists() {
                flat
            } else {
                base.join(m).join("mod.rs")
            })
        })
        .collect()
}

#[test]
fn every_file_under_tests_is_a_module_of_the_test_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut reached = BTreeSet::new();
    let mut todo = vec![tests.join("tests.rs")];
    while let Some(f) = todo.pop() {
        if reached.insert(f.clone()) {
            todo.extend(declared(&f));
        }
    }
    let mut files = Vec::new();
    sources(&tests, &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !reached.contains(*f))
        .map(|f| f.strip_prefix(&tests).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files under tests/ that no `mod` reaches from tests/tests.rs (they would never \
         build or run; name each in its folder's mod.rs or in tests.rs):\n{}",
        missing.join("\n")
    );
    assert!(reached.len() > 40, "the module tree is read: {reached:?}");
}

/// The functions of a file's code ([`code`]: tests and comments left out), each with its
/// length in lines, from its `fn` line to the brace that closes its body.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("pub(super) ").unwrap_or(t);
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut opened) = (0i64, false);
        for (i, l) in lines[start..].iter().enumerate() {
            // Braces in string and char literals are rare enough in this code to ignore.
            for c in l.chars() {
                match c {
                    '{' => (depth, opened) = (depth + 1, true),
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                out.push((name.clone(), i + 1));
                break;
            }
            if !opened && l.trim_end().ends_with(';') {
                break;
            }
        }
    }
    out
}

/// `check::run` reads as its list of steps, and so does each step: the un-park step, once
/// a 168-line function, is split into functions of its steps (candidates, the parks that
/// were `hung`, the look just before the write, the write), none longer than a screen.
#[test]
fn the_unpark_step_reads_as_its_steps() {
    let file = src().join("check/unpark.rs");
    let text = code(&std::fs::read_to_string(&file).expect("read"));
    let lengths = function_lengths(&text);
    assert!(
        lengths.iter().any(|(n, _)| n == "step"),
        "the step is found: {lengths:?}"
    );
    let long: Vec<String> = lengths
        .iter()
        .filter(|(_, n)| *n > 60)
        .map(|(f, n)| format!("{f}: {n} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "functions of src/check/unpark.rs longer than 60 lines: {long:?}"
    );
}

/// The code, its tests and its scripts cite the repository's own contract: every
/// `docs/design.md#anchor` they name is an anchor of that file, and nothing cites a "SPEC"
/// section the repository does not hold.
#[test]
fn the_code_cites_anchors_design_md_has() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("design.md");
    let anchors: std::collections::HashSet<&str> = design
        .split("<a id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    let mut files = Vec::new();
    for dir in ["src", "tests", "scripts", "php", "packaging"] {
        walk(&root.join(dir), &mut files);
    }
    let (mut cited, mut missing, mut spec) = (0usize, Vec::new(), Vec::new());
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue; // not text
        };
        // Snapshots are output; this test names the patterns it looks for.
        if f.components().any(|c| c.as_os_str() == "snapshots") || f.ends_with("structure.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", f.strip_prefix(root).unwrap_or(f).display(), n + 1);
            if line.contains("SPEC §") || line.contains("SPEC section") {
                spec.push(at.clone());
            }
            for part in line.split("design.md#").skip(1) {
                let a: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                cited += 1;
                if !anchors.contains(a.as_str()) {
                    missing.push(format!("{at}: #{a}"));
                }
            }
        }
    }
    assert!(
        cited > 100,
        "only {cited} citations found: the scan is broken"
    );
    assert!(missing.is_empty(), "anchors design.md lacks: {missing:#?}");
    assert!(
        spec.is_empty(),
        "citations of a SPEC the repository does not hold: {spec:#?}"
    );
}

fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}
