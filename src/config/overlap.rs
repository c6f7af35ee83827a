//! The rule between watches (docs/design.md#configuration): two watches whose rows can overlap — the same table,
//! and no column on which their filters (`match`, and the status column's running value)
//! want different values — are a configuration error. Such a row would be judged twice by
//! two different rules (two `stale_after`, two `max_age`), and whichever acts first wins.
//!
//! Every watch of the file counts, selected by `--watch` or not: the watches a run leaves
//! out still run in other runs. A watch left out whose keys do not validate is skipped here
//! (its own run reports it). Values are compared as a database may compare them: after
//! compatibility decomposition, without accents and other combining marks, in lower case,
//! without trailing spaces — `full-sync`, `Full-Sync`, `fúll-sync` and `full-sync ` are one
//! value to MariaDB's default `utf8mb4_general_ci` — so two values that may be equal there
//! never count as telling watches apart. Collations fold more than this (`ß` is `s` to
//! `utf8mb4_general_ci`): `doctor` asks the server itself, under the column's collation.
//!
//! Pure: no I/O.

use super::keys::{self, FromValue, RawWatch};
use super::{Ident, Watch};
use crate::error::{Error, Origin, Result};

/// Which rows a watch takes: table, and the equality filters on them.
struct Footprint {
    name: String,
    table: Ident,
    /// `match`, plus the status column at the running value.
    filters: Vec<(Ident, String)>,
}

impl Footprint {
    fn of(w: &Watch) -> Footprint {
        let mut filters = w.matches.clone();
        filters.push((w.status_column.clone(), w.running_value.clone()));
        Footprint {
            name: w.name.clone(),
            table: w.table.clone(),
            filters,
        }
    }

    /// A watch as written; `None` when its keys do not validate.
    fn of_raw(raw: &RawWatch) -> Option<Footprint> {
        let c = keys::check_each(raw).ok()?;
        let get = |k: &str| c.get(k);
        let mut filters: Vec<(Ident, String)> = match get("match") {
            Some(v) => FromValue::from_value(v)?,
            None => Vec::new(),
        };
        filters.push((
            Ident::from_value(get("status_column")?)?,
            String::from_value(get("running_value")?)?,
        ));
        Some(Footprint {
            name: String::from_value(get("name")?)?,
            table: Ident::from_value(get("table")?)?,
            filters,
        })
    }

    /// True when no row can be taken by both: a column both filter on, with values that
    /// differ even to a case-insensitive database.
    fn apart_from(&self, other: &Footprint) -> bool {
        !self.table.may_be_same_table(&other.table)
            || self.filters.iter().any(|(c, v)| {
                other
                    .filters
                    .iter()
                    .any(|(oc, ov)| c.same_column(oc) && !may_be_equal(v, ov))
            })
    }
}

/// True when a database may take the two values for one (see the module documentation).
pub(crate) fn may_be_equal(a: &str, b: &str) -> bool {
    folded(a) == folded(b)
}

/// The value as a case- and accent-insensitive collation compares it, as far as can be
/// told without the server: compatibility-decomposed (NFKD), combining marks removed, in
/// lower case, trailing spaces cut.
fn folded(v: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    use unicode_normalization::char::is_combining_mark;
    let s: String = v
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect();
    s.trim_end_matches(' ').to_string()
}

/// What tells two watches' rows apart as far as can be known without the server: the
/// columns both filter on, each with the two values (`None` when their tables differ).
/// Empty when nothing does (then [`check`] has refused them already).
pub(crate) fn told_apart_by(a: &Watch, b: &Watch) -> Option<Vec<(Ident, String, String)>> {
    let (fa, fb) = (Footprint::of(a), Footprint::of(b));
    if !fa.table.may_be_same_table(&fb.table) {
        return None;
    }
    Some(
        fa.filters
            .iter()
            .flat_map(|(c, v)| {
                fb.filters
                    .iter()
                    .filter(move |(oc, ov)| c.same_column(oc) && !may_be_equal(v, ov))
                    .map(move |(_, ov)| (c.clone(), v.clone(), ov.clone()))
            })
            .collect(),
    )
}

/// Fails when two watches can take the same rows. `file` holds every watch of the file as
/// written; `validated` the watches of this run (flags applied), which stand for their
/// namesakes in `file`.
pub(super) fn check(file: &[RawWatch], validated: &[Watch], origin: &Origin) -> Result<()> {
    let mut all: Vec<Footprint> = file
        .iter()
        .filter_map(|raw| {
            match validated
                .iter()
                .find(|w| Some(w.name.as_str()) == raw.text("name"))
            {
                Some(w) => Some(Footprint::of(w)),
                None => Footprint::of_raw(raw),
            }
        })
        .collect();
    if file.is_empty() {
        all.extend(validated.iter().map(Footprint::of));
    }
    for (i, b) in all.iter().enumerate() {
        if let Some(a) = all[..i].iter().find(|a| !a.apart_from(b)) {
            return Err(Error::config(
                origin,
                format!("watch '{}': match", b.name),
                format!(
                    "its rows can be those of watch '{}' (both read table {}, and no match \
                     column tells them apart: values that differ only in case, accents or \
                     trailing spaces are one value to a case-insensitive collation): a row \
                     would be judged twice, by two different rules; give both a match on a \
                     column where their values differ, e.g. match = {{ job = \"{}\" }}, or \
                     merge them",
                    a.name, b.table, b.name
                ),
            ));
        }
    }
    Ok(())
}
