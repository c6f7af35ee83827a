//! The configuration file: any text gives a `Config` or an error naming the file — never a
//! panic — and a `Config` holds only validated identifiers and positive durations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfheal::config::{self, Ident, Overrides};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = Path::new("/fuzz/selfheal.toml");
    match config::from_str(text, file, &Overrides::default(), &[]) {
        Ok(cfg) => {
            for w in &cfg.watches {
                for c in [&w.id_column, &w.status_column, &w.started_column] {
                    assert!(Ident::column(c.name()).is_ok(), "{c}");
                }
                assert!(Ident::table(&w.table.to_string()).is_ok(), "{}", w.table);
                assert!(!w.stale_after.is_zero());
                assert!(w.max_age > w.stale_after);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("/fuzz/selfheal.toml"), "{msg}");
        }
    }
});
