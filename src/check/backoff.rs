//! A reclaimed row's "not before" time kept within what its `retry_at_column` can hold
//! (docs/design.md#retry). `retry_backoff × 2^(attempts − 1)` is capped at
//! `retry_backoff_max`, which may be any duration; the column cannot hold any time: a
//! DATETIME ends with the year 9999 (and SQLite's date functions with it), a TIMESTAMP and
//! MySQL's 32-bit INT of unix seconds in January 2038. A delay past the column's end would
//! make the database refuse every such write ("datetime field overflow") or store NULL,
//! so the delay is capped to the column's range, and the run says so once per watch.
//!
//! Pure: the database's now is passed in.

use crate::clock::human;
use crate::config::Watch;
use crate::store::{ColumnType, Schema};

/// 9999-12-31T00:00:00Z, unix seconds: the last day a DATETIME (and SQLite's date
/// functions) can hold, less a day for any time zone it may be written in.
const DATETIME_END: i64 = 253_402_214_400;

/// 2038-01-18T03:14:07Z, unix seconds: a TIMESTAMP's and a signed 32-bit integer's last
/// second, less a day.
const TIMESTAMP_END: i64 = 2_147_397_247;

/// The latest time (unix seconds) the watch's `retry_at_column` can hold, if it has one.
fn column_end(w: &Watch, schema: &Schema) -> Option<i64> {
    let name = w.retry_at_column.as_ref()?.name().to_ascii_lowercase();
    let col = schema.columns.get(&name)?;
    Some(match &col.ty {
        ColumnType::Timestamp => TIMESTAMP_END,
        // MySQL's INT is 32 bits (signed, as far as selfheal can tell); SQLite's are 64.
        ColumnType::Integer
            if col.enforced && matches!(col.declared.as_str(), "int" | "integer") =>
        {
            TIMESTAMP_END
        }
        _ => DATETIME_END,
    })
}

/// The longest delay from `db_now` (unix seconds) that the watch's `retry_at_column` can
/// hold; `None` without the column.
pub(super) fn longest(w: &Watch, schema: &Schema, db_now: i64) -> Option<u64> {
    column_end(w, schema).map(|end| u64::try_from(end.saturating_sub(db_now)).unwrap_or(0))
}

/// The delay before a row that a reclaim sends back to the queue is picked again, for the
/// attempts count after this reclaim ([`Watch::retry_delay`]), capped to what the column
/// can hold from `db_now`.
pub(super) fn delay(w: &Watch, schema: &Schema, db_now: i64, attempts: Option<i64>) -> u64 {
    let d = w.retry_delay(attempts);
    longest(w, schema, db_now).map_or(d, |most| d.min(most))
}

/// What a run says when `retry_backoff_max` reaches beyond what the column can hold from
/// `db_now`: the backoff is capped there. `None` when it fits (or the watch has no
/// `retry_at_column`).
pub(super) fn warning(w: &Watch, schema: &Schema, db_now: i64) -> Option<String> {
    let most = longest(w, schema, db_now)?;
    if w.retry_backoff_max.as_secs() <= most {
        return None;
    }
    let col = w.retry_at_column.as_ref()?;
    Some(format!(
        "watch {}: retry_backoff_max {} reaches beyond what retry_at_column {col} can hold \
         from now ({} at most): a retry waits that long at most; fix: set retry_backoff_max \
         to a duration the column can hold, as in retry_backoff_max = \"1d\"",
        w.name,
        human(w.retry_backoff_max.as_secs()),
        human(most)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, from_str};
    use crate::store::Column;
    use std::collections::HashMap;
    use std::path::Path;

    /// A watch with a retry queue, its `retry_at` column of `col`'s type, and the backoff.
    fn retry_watch_with(col: Column, base: &str, max: &str) -> (Watch, Schema) {
        let text = format!(
            "[database]\nurl = \"sqlite:///tmp/app.db\"\n\n[[watch]]\nname = \"w\"\n\
             table = \"jobs\"\nstarted_column = \"start_time\"\nheartbeat_file = \"/tmp/hb\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\nretry_value = \"pending\"\n\
             attempts_column = \"attempts\"\nmax_attempts = 99\n\
             retry_at_column = \"retry_at\"\nretry_backoff = \"{base}\"\n\
             retry_backoff_max = \"{max}\"\n"
        );
        let cfg = from_str(
            &text,
            Path::new("/etc/selfheal.toml"),
            &Overrides::default(),
            &[],
        )
        .expect("valid");
        let w = cfg.watches.into_iter().next().expect("a watch");
        let schema = Schema {
            message_max: None,
            ended: None,
            retry_at: None,
            columns: HashMap::from([("retry_at".to_string(), col)]),
            id_is_primary: true,
        };
        (w, schema)
    }

    fn column(ty: ColumnType, declared: &str, enforced: bool) -> Column {
        Column {
            declared: declared.into(),
            ty,
            length: None,
            enforced,
            on_update_now: false,
        }
    }

    /// The delay is capped to the column's end from now, for each kind of column; a delay
    /// that fits is kept as it is.
    #[test]
    fn a_backoff_beyond_the_column_is_capped_to_it() {
        let now = 1_800_000_000;
        for (col, end) in [
            (column(ColumnType::DateTime, "datetime", true), DATETIME_END),
            (
                column(ColumnType::Timestamp, "timestamp", true),
                TIMESTAMP_END,
            ),
            (column(ColumnType::Integer, "int", true), TIMESTAMP_END),
            (column(ColumnType::Integer, "bigint", true), DATETIME_END),
            (column(ColumnType::Integer, "integer", false), DATETIME_END),
            (column(ColumnType::Text, "text", false), DATETIME_END),
        ] {
            let (w, schema) = retry_watch_with(col, "1m", "10000000d");
            let most = u64::try_from(end - now).expect("ahead");
            assert_eq!(longest(&w, &schema, now), Some(most));
            assert_eq!(delay(&w, &schema, now, Some(60)), most);
            assert_eq!(delay(&w, &schema, now, Some(2)), 120, "fits: kept");
            assert!(warning(&w, &schema, now).is_some_and(|m| m.contains("retry_backoff_max")));
        }
        let (w, schema) =
            retry_watch_with(column(ColumnType::DateTime, "datetime", true), "1m", "1h");
        assert_eq!(warning(&w, &schema, now), None);
        // A clock past the column's end: no wait at all, never a negative one.
        assert_eq!(delay(&w, &schema, DATETIME_END + 5, Some(3)), 0);
    }
}
