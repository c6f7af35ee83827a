//! The documentation keeps up with the program: the man page renders without a groff
//! warning and names every long option of every subcommand (taken from clap itself, so a
//! new flag or subcommand fails here until it is documented) and every configuration key
//! (taken from the configuration parser); every watch key of the key table is in the man
//! page (with its default), in the example configuration and in `check --help` as its
//! flag, and the example configuration, uncommented, is valid; the README names every
//! subcommand and the man page; completions cover every subcommand.

use std::path::Path;

use crate::common::*;
use clap::CommandFactory;

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

/// What a newcomer needs before the first command — the Rust version
/// Cargo.toml asks for (and how to get it where the distribution's is older), every
/// package `scripts/test` may install, and `runuser` wherever `sudo -u` is shown (minimal
/// images often have no sudo).
#[test]
fn the_readme_says_what_a_build_and_the_tests_need() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(README).expect("README.md");
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
            readme.contains(&format!("`{p}`")),
            "README lists the package scripts/test installs: {p}"
        );
    }
    // runuser beside every sudo -u.
    let man = man_text();
    let cron =
        std::fs::read_to_string(root.join("packaging/selfheal.cron")).expect("selfheal.cron");
    for (name, text) in [
        ("README.md", &readme),
        ("man page", &man),
        ("selfheal.cron", &cron),
    ] {
        if text.contains("sudo -u") {
            assert!(
                text.contains("runuser -u"),
                "{name} shows sudo -u without runuser -u"
            );
        }
    }
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
