//! Watches the server itself takes for one (docs/design.md#collation-overlap): two watches of one
//! table told apart only by `match` values that the column's collation compares as one —
//! `"ss"` and `"ß"` under `utf8mb4_unicode_ci`, `"sync"` and `"sy\u{200b}nc"` (a zero-width
//! space the collation ignores) — take the same rows, and a row would be judged twice, by
//! two different rules (one watch says `dead`, the other `alive`). The configuration folds
//! case, accents and trailing spaces offline; what only the server knows is asked of it,
//! once per run, before any row is judged: by `check`, which refuses such watches (exit 2),
//! and by `doctor`, which fails them.
//!
//! I/O: one question to the database per pair of values that differ ([`crate::store::Introspect::equal_under_collation`]).

use crate::config::{self, Config, Watch};
use crate::error::{Error, Origin};
use crate::escape::printable;
use crate::store::Store;

/// Two watches whose rows the server takes for the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The earlier watch and the later one (in the configuration's order).
    pub first: String,
    pub second: String,
    /// Each `match` column that was to tell them apart, in words: `job = 'ss' and 'ß' are
    /// one value under utf8mb4_unicode_ci` (values escaped).
    pub same: Vec<String>,
}

impl Overlap {
    /// What is wrong, after `watch SECOND: match: `.
    pub fn message(&self) -> String {
        format!(
            "its rows can be those of watch '{}' on the server: {}; a row would be judged \
             twice, by two different rules",
            self.first,
            self.same.join(", ")
        )
    }

    pub const FIX: &'static str = "give the two watches match values that differ under the column's collation, or merge \
         them";
}

/// The watch pairs of `watches` that the server takes for one: every `match` column that
/// tells them apart offline holds values the column's collation compares as equal. A
/// question the server cannot answer counts as apart.
pub fn overlaps(watches: &[Watch], store: &mut dyn Store) -> Vec<Overlap> {
    let mut out = Vec::new();
    for (i, a) in watches.iter().enumerate() {
        for b in &watches[i + 1..] {
            let Some(apart) = config::told_apart_by(a, b) else {
                continue;
            };
            let mut same = Vec::new();
            let mut all_same = !apart.is_empty();
            for (column, va, vb) in &apart {
                match store.equal_under_collation(a, column, va, vb) {
                    Ok(Some(collation)) => same.push(format!(
                        "{} = '{}' and '{}' are one value under {collation}",
                        column.name(),
                        printable(va),
                        printable(vb)
                    )),
                    Ok(None) | Err(_) => all_same = false,
                }
            }
            if all_same {
                out.push(Overlap {
                    first: a.name.clone(),
                    second: b.name.clone(),
                    same,
                });
            }
        }
    }
    out
}

/// `check`'s refusal: the first overlap as a configuration error (exit 2), naming the
/// file, the watch and both values.
pub fn refuse(cfg: &Config, store: &mut dyn Store) -> Result<(), Error> {
    let Some(o) = overlaps(&cfg.watches, store).into_iter().next() else {
        return Ok(());
    };
    let origin = cfg.source.clone().map_or(Origin::CommandLine, Origin::File);
    Err(Error::Config {
        origin,
        key: format!("watch '{}': match", o.second),
        message: o.message(),
        fix: Some(Overlap::FIX.to_string()),
    })
}
