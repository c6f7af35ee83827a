//! The `/proc/locks` parser: any text gives a lock table, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfheal::probe::LockTable;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = LockTable::parse(&text);
});
