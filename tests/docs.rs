//! The documentation keeps up with the program: the man page renders without a groff
//! warning and names every long option of every subcommand (taken from clap itself, so a
//! new flag or subcommand fails here until it is documented) and every configuration key
//! (taken from the configuration parser); every watch key of the key table is in the man
//! page (with its default), in the example configuration and in `check --help` as its
//! flag, and the example configuration, uncommented, is valid; the README names every
//! subcommand and the man page; completions cover every subcommand. The user documentation
//! (README, CONTRIBUTING, `docs/`) keeps its examples working — every TOML example loads as
//! a configuration, every shell and PHP example parses, every SQL example runs on the
//! database it names — and every relative link between the documents reaches a file and an
//! anchor that exist.

use std::path::Path;

use crate::common::*;
use clap::CommandFactory;
use mysql::prelude::Queryable;

const MAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/man/selfheal.1");
const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/selfheal.toml");

/// The man page's source as text: `\-` as `-`, font and zero-width escapes removed.
fn man_text() -> String {
    let src = std::fs::read_to_string(MAN).expect("man/selfheal.1");
    let mut s = src.replace("\\-", "-").replace("\\&", "");
    for esc in ["\\fB", "\\fI", "\\fR", "\\fP"] {
        s = s.replace(esc, "");
    }
    s
}

/// True when `word` appears not as part of a longer option or key name.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let part =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let starts_plain = word.starts_with(|c: char| c.is_ascii_alphanumeric());
        !(part(after) || starts_plain && part(before))
    })
}

/// Visible subcommands with their long options, straight from the clap definition.
fn subcommands() -> Vec<(String, Vec<String>)> {
    let cli = selfheal::cli::Cli::command();
    cli.get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let longs = c
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .collect();
            (c.get_name().to_string(), longs)
        })
        .collect()
}

#[test]
fn the_man_page_renders_without_warnings() {
    let Ok(probe) = std::process::Command::new("groff")
        .arg("--version")
        .output()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have groff (scripts/test installs groff-base)"
        );
        eprintln!("SKIPPED: groff is not installed");
        return;
    };
    assert!(probe.status.success());
    for device in ["ps", "utf8", "ascii"] {
        let o = std::process::Command::new("groff")
            .args(["-man", "-ww", "-z", &format!("-T{device}"), MAN])
            .output()
            .expect("groff");
        assert!(o.status.success(), "{device}: {o:?}");
        assert_eq!(stderr(&o), "", "groff -T{device} warnings");
    }
}

#[test]
fn the_man_page_has_its_sections_and_every_option_of_every_subcommand() {
    let man = man_text();
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH DESCRIPTION",
        ".SH COMMANDS",
        ".SH OPTIONS",
        ".SH CONFIGURATION",
        ".SH VERDICTS",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH EXAMPLES",
    ] {
        assert!(man.contains(section), "{section}");
    }
    let subs = subcommands();
    assert!(subs.iter().any(|(n, _)| n == "doctor"), "{subs:?}");
    let mut missing = Vec::new();
    for (name, longs) in &subs {
        if name == "help" {
            continue;
        }
        if !man.contains(&format!(".B {name}\n")) {
            missing.push(format!("subcommand {name} in COMMANDS"));
        }
        for l in longs {
            if !mentions(&man, l) {
                missing.push(format!("{name} {l}"));
            }
        }
    }
    for l in ["--help", "--version"] {
        if !mentions(&man, l) {
            missing.push(l.to_string());
        }
    }
    assert!(missing.is_empty(), "not in man/selfheal.1: {missing:?}");
}

/// The keys the configuration parser accepts in one table, from its own "unknown key"
/// message.
fn keys_of(section: &str) -> Vec<String> {
    let body = match section {
        "watch" => "[[watch]]\nname = \"w\"\nzz_not_a_key = 1\n".to_string(),
        s => format!("[{s}]\nzz_not_a_key = 1\n"),
    };
    let err = selfheal::config::from_str(
        &body,
        Path::new("/x.toml"),
        &selfheal::config::Overrides::default(),
        &[],
    )
    .expect_err("unknown key")
    .to_string();
    let expected = err
        .split_once("this table takes")
        .map_or_else(|| panic!("{err}"), |(_, e)| e);
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_man_page_documents_every_configuration_key() {
    let man = man_text();
    let mut missing = Vec::new();
    for (section, heading) in [
        ("database", ".SS \"[database]\""),
        ("run", ".SS \"[run]\""),
        ("watch", ".SS \"[[watch]]\""),
    ] {
        let keys = keys_of(section);
        assert!(keys.len() >= 4, "{section}: {keys:?}");
        let start = man.find(heading).unwrap_or_else(|| panic!("{heading}"));
        let rest = &man[start + heading.len()..];
        let end = rest
            .find(".SS ")
            .or_else(|| rest.find(".SH "))
            .unwrap_or(rest.len());
        let part = &rest[..end];
        for k in keys {
            if !part.contains(&format!(".B {k}\n")) {
                missing.push(format!("{section}.{k}"));
            }
        }
    }
    assert!(missing.is_empty(), "keys without a .B entry: {missing:?}");
}

/// The part of `text` from `start` to the first of `ends` after it (or the end).
fn between<'a>(text: &'a str, start: &str, ends: &[&str]) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("{start}")) + start.len();
    let rest = &text[from..];
    let end = ends
        .iter()
        .filter_map(|e| rest.find(e))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The example configuration's lines that are settings once their comment marks (one or
/// two `# `) are taken off: section headers and `key = value`.
fn example_settings() -> Vec<String> {
    let text = std::fs::read_to_string(EXAMPLE).expect("packaging/selfheal.toml");
    text.lines()
        .filter_map(|l| {
            let code = l.strip_prefix("# ").unwrap_or(l);
            let code = code.strip_prefix("# ").unwrap_or(code);
            let is_key = code.split_once(" = ").is_some_and(|(k, _)| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            });
            let is_table = code.starts_with('[') && code.ends_with(']');
            (is_key || is_table).then(|| code.to_string())
        })
        .collect()
}

#[test]
fn every_watch_key_is_in_the_man_page_the_example_and_check_help() {
    use selfheal::config::keys::{Requirement, WATCH_KEY_NAMES, WATCH_KEYS};
    assert_eq!(
        keys_of("watch"),
        WATCH_KEY_NAMES,
        "the parser reads the key table"
    );

    let man = man_text();
    let configuration = between(&man, ".SH CONFIGURATION", &[".SH "]);
    let watch_section = between(configuration, ".SS \"[[watch]]\"", &[".SS ", ".SH "]);
    let example = example_settings();
    let o = selfheal().args(["check", "--help"]).output().expect("run");
    assert_exit(&o, 0);
    // The help as one line: clap wraps long help lines.
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");

    let mut missing = Vec::new();
    for key in WATCH_KEYS {
        let k = key.name;
        let entry = format!(".B {k}\n");
        if watch_section.contains(&entry) {
            if let Requirement::Default(d) = key.need {
                let text = between(watch_section, &entry, &[".TP", ".SS ", ".SH "]);
                let d = d.to_string();
                if !(mentions(text, &d) && text.to_lowercase().contains("default")) {
                    missing.push(format!("man page: the default of {k} ({d})"));
                }
            }
        } else {
            missing.push(format!("man page: {k} in CONFIGURATION [[watch]]"));
        }
        if !example.iter().any(|l| l.starts_with(&format!("{k} = "))) {
            missing.push(format!("packaging/selfheal.toml: a (commented) {k} = …"));
        }
        if let Some(flag) = key.flag {
            let usage = format!("--{} <{}> {}", flag.long, flag.value_name, key.help);
            if !help.contains(&usage) {
                missing.push(format!("check --help: {usage}"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented watch keys: {missing:#?}");
}

#[test]
fn the_example_configuration_uncommented_is_valid() {
    // The owner in two columns is the alternative to owner_column: not both at once.
    let text = example_settings()
        .into_iter()
        .filter(|l| !l.starts_with("owner_host_column") && !l.starts_with("owner_pid_column"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("[[watch]]"), "{text}");
    let cfg = selfheal::config::from_str(
        &text,
        Path::new(EXAMPLE),
        &selfheal::config::Overrides::default(),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(cfg.watches.len(), 1);
}

#[test]
fn the_readme_names_every_subcommand_and_the_man_page() {
    let readme = std::fs::read_to_string(README).expect("README.md");
    for (name, _) in subcommands() {
        if name != "help" {
            assert!(
                readme.contains(&format!("selfheal {name}")),
                "README: selfheal {name}"
            );
        }
    }
    assert!(
        readme.contains("man/selfheal.1"),
        "README points at the man page"
    );
}

/// What a newcomer needs before the first command — the Rust version Cargo.toml asks for
/// (and how to get it where the distribution's is older) in the README; every package
/// `scripts/test` may install in CONTRIBUTING.md; and `runuser` wherever `sudo -u` is shown
/// (minimal images often have no sudo), in every document.
#[test]
fn the_docs_say_what_a_build_and_the_tests_need() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(README).expect("README.md");
    let contributing =
        std::fs::read_to_string(root.join("CONTRIBUTING.md")).expect("CONTRIBUTING.md");
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("rust-version in Cargo.toml");
    assert!(
        readme.contains(&format!("**Rust {version} or newer**")),
        "README names rust-version {version}"
    );
    assert!(readme.contains("rustup"), "README says how to get it");
    // Every package scripts/test installs with apt_install.
    let script = std::fs::read_to_string(root.join("scripts/test")).expect("scripts/test");
    let mut packages: Vec<&str> = script
        .lines()
        .filter_map(|l| l.split_once("apt_install ").map(|(_, rest)| rest))
        .filter(|rest| !rest.starts_with("()") && !rest.starts_with('{'))
        .flat_map(|rest| rest.split([';', '\\']).next())
        .flat_map(str::split_whitespace)
        .filter(|w| !w.starts_with('-') && !w.starts_with('$') && !w.starts_with('"'))
        .collect();
    packages.sort_unstable();
    packages.dedup();
    assert!(packages.len() >= 8, "{packages:?}");
    for p in &packages {
        assert!(
            contributing.contains(&format!("`{p}`")),
            "CONTRIBUTING.md lists the package scripts/test installs: {p}"
        );
    }
    // runuser beside every sudo -u.
    let mut texts = vec![
        ("man page".to_string(), man_text()),
        (
            "selfheal.cron".to_string(),
            std::fs::read_to_string(root.join("packaging/selfheal.cron")).expect("selfheal.cron"),
        ),
    ];
    for f in doc_files() {
        let text = std::fs::read_to_string(root.join(&f)).expect("doc");
        texts.push((f, text));
    }
    for (name, text) in &texts {
        if text.contains("sudo -u") {
            assert!(
                text.contains("runuser -u"),
                "{name} shows sudo -u without runuser -u"
            );
        }
    }
}

/// The anchors a Markdown file offers: its `<a id="…">` (or `name`) tags and the GitHub
/// slug of each heading (lowercase; letters, digits, `-` and `_` kept, spaces made `-`,
/// everything else dropped; a repeated slug gets `-1`, `-2`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for tag in ["<a id=\"", "<a name=\""] {
        for (i, _) in text.match_indices(tag) {
            let rest = &text[i + tag.len()..];
            out.push(rest[..rest.find('"').unwrap_or(0)].to_string());
        }
    }
    let mut in_code = false;
    let mut seen: Vec<String> = Vec::new();
    for l in text.lines() {
        if l.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(heading) = (!in_code)
            .then(|| l.trim_start_matches('#'))
            .filter(|h| l.starts_with('#') && h.starts_with(' '))
        else {
            continue;
        };
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.iter().filter(|s| **s == slug).count();
        seen.push(slug.clone());
        out.push(if n == 0 { slug } else { format!("{slug}-{n}") });
    }
    out
}

/// The targets of the Markdown links of `text` outside code (`[text](target)`), with the
/// line of each.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, l) in text.lines().enumerate() {
        if l.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Inline code is not a link: drop it first.
        let plain: String = l.split('`').step_by(2).collect::<Vec<_>>().join("");
        let line = if l.matches('`').count() % 2 == 0 {
            plain
        } else {
            l.to_string()
        };
        for (i, _) in line.match_indices("](") {
            let rest = &line[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push((n + 1, rest[..end].to_string()));
            }
        }
    }
    out
}

/// Every relative link between the documents reaches a file that exists, and an anchor the
/// target Markdown file has (a heading or an `<a id>`); a link within a file, an anchor of
/// that file. Shown to find a missing file and a missing anchor.
#[test]
fn every_relative_link_between_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let check = |file: &str, text: &str| -> Vec<String> {
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        let mut broken = Vec::new();
        for (line, target) in links(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let (rel, target_text) = if path.is_empty() {
                (file.to_string(), Some(text.to_string()))
            } else {
                let p = root.join(dir).join(path);
                if !p.exists() {
                    broken.push(format!("{file}:{line}: {target}: no such file"));
                    continue;
                }
                let text = path
                    .ends_with(".md")
                    .then(|| std::fs::read_to_string(&p).expect("read"));
                (path.to_string(), text)
            };
            if let (false, Some(t)) = (anchor.is_empty(), target_text)
                && !anchors(&t).iter().any(|a| a == anchor)
            {
                broken.push(format!("{file}:{line}: {target}: {rel} has no #{anchor}"));
            }
        }
        broken
    };
    // The check finds what it is for.
    let planted = check(
        "docs/x.md",
        "[a](operator.md#no-such-heading) [b](missing.md) [c](#here)\n\n## Here\n",
    );
    assert_eq!(planted.len(), 2, "{planted:?}");
    let mut files = doc_files();
    files.extend(["BENCHMARKS.md".to_string(), "fuzz/README.md".to_string()]);
    let mut broken = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(root.join(f)).expect("doc");
        broken.extend(check(f, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every TOML example of the documents is a valid configuration: one with a `[[watch]]`,
/// `[database]` or `[run]` table loads (a `[database]` is added to a watch shown alone),
/// and nothing else is written as TOML.
#[test]
fn every_toml_example_in_the_docs_is_a_valid_configuration() {
    let mut n = 0;
    for f in doc_files() {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&f)).expect("doc");
        for b in code_blocks(&text).into_iter().filter(|b| b.lang == "toml") {
            let at = format!("{f}:{}", b.line);
            assert!(
                ["[[watch]]", "[database]", "[run]"]
                    .iter()
                    .any(|t| b.code.lines().any(|l| l.trim() == *t)),
                "{at}: a TOML example that is not a configuration:\n{}",
                b.code
            );
            let code = if b.code.lines().any(|l| l.trim() == "[database]") {
                b.code.clone()
            } else {
                format!(
                    "[database]\nurl = \"sqlite:///var/lib/app/app.db\"\n\n{}",
                    b.code
                )
            };
            selfheal::config::from_str(
                &code,
                Path::new("/etc/selfheal/selfheal.toml"),
                &selfheal::config::Overrides::default(),
                &[],
            )
            .unwrap_or_else(|e| panic!("{at}: {e}\n{code}"));
            n += 1;
        }
    }
    assert!(n >= 8, "{n} TOML examples");
}

/// Every shell example (```sh) passes `bash -n`, and every PHP example (```php) `php -l`
/// (a fragment without `<?php` is linted as one).
#[test]
fn every_shell_and_php_example_in_the_docs_parses() {
    let have_php = have_tool("php", &["-v"], "php-cli");
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sh, mut php) = (0, 0);
    for f in doc_files() {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&f)).expect("doc");
        for b in code_blocks(&text) {
            let at = format!("{f}:{}", b.line);
            let (cmd, args, code): (&str, &[&str], String) = match b.lang.as_str() {
                "sh" | "bash" | "shell" => ("bash", &["-n"], b.code.clone()),
                "php" if have_php => {
                    let code = if b.code.starts_with("<?php") {
                        b.code.clone()
                    } else {
                        format!("<?php\n{}", b.code)
                    };
                    ("php", &["-l"], code)
                }
                _ => continue,
            };
            let p = dir.path().join("example");
            std::fs::write(&p, &code).expect("write");
            let o = std::process::Command::new(cmd)
                .args(args)
                .arg(&p)
                .output()
                .expect(cmd);
            assert!(
                o.status.success(),
                "{at}: {cmd} {}: {}{}\n{code}",
                args.join(" "),
                stdout(&o),
                stderr(&o)
            );
            if cmd == "bash" {
                sh += 1;
            } else {
                php += 1;
            }
        }
    }
    assert!(sh >= 5, "{sh} shell examples");
    assert!(php >= 3 || !have_php, "{php} PHP examples");
}

/// Every SQL example of the user documentation (not design.md's statement shapes) names
/// its database on its first line (`-- MySQL/MariaDB`, `-- SQLite`, or `-- PostgreSQL`,
/// left to the PostgreSQL tests) and runs there, in a database of its own; and `selfheal
/// init` recognises the recipes' `sync_log` on MariaDB.
#[test]
fn every_sql_example_in_the_docs_runs_on_its_database() {
    let mut n = 0;
    let mut mysql_blocks = Vec::new();
    for f in doc_files() {
        if f == "docs/design.md" {
            continue;
        }
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&f)).expect("doc");
        for b in code_blocks(&text).into_iter().filter(|b| b.lang == "sql") {
            let at = format!("{f}:{}", b.line);
            if b.code.starts_with("-- SQLite") {
                let sb = Sandbox::new();
                let c = rusqlite::Connection::open(sb.path("x.db")).expect("sqlite");
                c.execute_batch(&b.code)
                    .unwrap_or_else(|e| panic!("{at}: {e}\n{}", b.code));
            } else if b.code.starts_with("-- MySQL/MariaDB") {
                mysql_blocks.push((at, b.code));
            } else if b.code.starts_with("-- PostgreSQL") {
                // Run by the PostgreSQL tests, where a server is at hand.
                continue;
            } else {
                panic!(
                    "{at}: an SQL example's first line names its database: -- MySQL/MariaDB, \
                     -- SQLite or -- PostgreSQL\n{}",
                    b.code
                );
            }
            n += 1;
        }
    }
    assert!(n >= 3, "{n} SQL examples");
    for (at, code) in &mysql_blocks {
        let Some(db) = MysqlDb::new() else {
            return;
        };
        db.conn()
            .query_drop(code)
            .unwrap_or_else(|e| panic!("{at}: {e}\n{code}"));
    }
    let Some(mut db) = MysqlDb::new() else {
        return;
    };
    db.exec(&doc_block(
        "docs/recipes.md",
        "sql",
        "-- MySQL/MariaDB\nCREATE TABLE sync_log (",
    ));
    let o = selfheal()
        .args(["init", "--url", &db.url, "--table", "sync_log"])
        .output()
        .expect("init");
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("Recognised: the field reports' sync_log"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn completions_for_each_shell_cover_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let o = selfheal()
            .args(["completions", shell])
            .output()
            .expect("run");
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert!(out.len() > 500, "{shell}: {out}");
        for (name, _) in subcommands() {
            assert!(out.contains(&name), "{shell}: {name}");
        }
        assert!(out.contains("dry-run"), "{shell}: options too");
    }
    let o = selfheal()
        .args(["completions", "tcsh"])
        .output()
        .expect("run");
    assert_exit(&o, 2);
    let help = stdout(&selfheal().arg("--help").output().expect("run"));
    assert!(!help.contains("completions"), "hidden from --help: {help}");
}

/// Every file of the repository a document names in code quotes (`src/check/sweep.rs`,
/// `tests/check/`, `scripts/soak`) is there: a recipe's list of files to touch (a new kind
/// of evidence, a new database) and the architecture's map cannot point at a file that moved.
/// The recipe in `src/probe/mod.rs` names files relative to `src/`; those are checked too.
#[test]
fn every_file_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut named = 0usize;
    let mut check = |file: &str, text: &str, base: &str, prefixes: &[&str]| {
        for quoted in text.split('`').skip(1).step_by(2) {
            let p = quoted.trim_end_matches(['.', ',', ';', ':']);
            // A path with an anchor is a link's target: the link test checks those.
            let p = p.split('#').next().unwrap_or(p);
            if !prefixes.iter().any(|x| p.starts_with(x))
                || p.contains(['*', '{', ' ', '<', '('])
                || p.contains("::")
                || p.contains("NAME")
            {
                continue;
            }
            named += 1;
            if !root.join(base).join(p).exists() {
                missing.push(format!("{file}: {p}"));
            }
        }
    };
    let top = [
        "src/",
        "tests/",
        "scripts/",
        "packaging/",
        "php/",
        "docs/",
        "man/",
    ];
    for f in doc_files() {
        let text = std::fs::read_to_string(root.join(&f)).expect("doc");
        check(&f, &text, "", &top);
    }
    // The recipe for a new kind of evidence, in the module documentation of `probe`.
    let recipe = std::fs::read_to_string(root.join("src/probe/mod.rs")).expect("probe/mod.rs");
    let doc: String = recipe
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    check(
        "src/probe/mod.rs",
        &doc,
        "src",
        &[
            "config/",
            "decide",
            "probe/",
            "evidence.rs",
            "store/",
            "check/",
        ],
    );
    assert!(named > 30, "only {named} paths found: the scan is broken");
    assert!(missing.is_empty(), "named but not there: {missing:#?}");
}
