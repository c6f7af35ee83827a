//! Durations, SQL identifiers, path templates and the timestamps read back from text
//! columns: never a panic; an accepted identifier is safe to quote, and a rendered path
//! never leaves the template's directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfheal::config::{Ident, PathTemplate, parse_duration};
use std::path::Component;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_duration(text) {
        assert!(!d.is_zero());
    }
    for ident in [Ident::column(text), Ident::table(text)]
        .into_iter()
        .flatten()
    {
        for q in ['`', '"'] {
            let quoted = ident.quoted(q);
            let inner: String = quoted.chars().filter(|c| *c != '.' && *c != q).collect();
            assert!(
                inner
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{quoted}"
            );
        }
    }
    let _ = selfheal::clock::parse_text_stamp(text);
    // The text as a row id, rendered into a template.
    let tpl = PathTemplate::parse("/run/app/hb-{id}.json").expect("template");
    if let Ok(p) = tpl.render(text) {
        assert!(p.starts_with("/run/app"), "{}", p.display());
        assert_eq!(p.components().count(), 4, "{}", p.display());
        assert!(
            p.components()
                .all(|c| !matches!(c, Component::ParentDir | Component::CurDir)),
            "{}",
            p.display()
        );
    }
    // The text as a template.
    if let Ok(t) = PathTemplate::parse(text) {
        let _ = t.render("42");
    }
});
