//! The MySQL option-file parser: any text gives lines or an error naming its line,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = selfheal::store::mycnf::parse(&text) {
        assert!(e.line >= 1, "{e:?}");
    }
});
