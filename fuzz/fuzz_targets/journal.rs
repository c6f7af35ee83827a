//! The journal reader: any bytes (not UTF-8, cut short, overlong lines) give entries and a
//! count of damaged lines, never a panic or an error; every entry handed on writes back as
//! a line that reads as the same entry, and a report describes at most a few lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfheal::journal::{EXAMPLES, JournalEntry, read_entries};

fuzz_target!(|data: &[u8]| {
    let mut entries = Vec::new();
    let report = read_entries(data, &mut |e| entries.push(e)).expect("a slice never fails");
    let lines = data.split(|b| *b == b'\n').count() as u64;
    assert_eq!(report.entries, entries.len() as u64);
    assert!(report.entries + report.damaged <= lines);
    assert!(report.examples.len() <= EXAMPLES);
    assert!(report.examples.windows(2).all(|w| w[0].line < w[1].line));
    for e in entries {
        let line = serde_json::to_vec(&e).expect("an entry serialises");
        let back: JournalEntry = serde_json::from_slice(&line).expect("and reads back");
        assert_eq!(back, e);
    }
});
