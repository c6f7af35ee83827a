//! The intents reader (`pending.jsonl`): any bytes give groups and a count of damaged lines,
//! never a panic or an error; the lines that keep the groups (what a settlement writes
//! back) read again as the same groups, with nothing damaged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use selfheal::journal::{Left, parse_intents};

fuzz_target!(|data: &[u8]| {
    let left = parse_intents(data).expect("a slice never fails");
    let lines = data.split(|b| *b == b'\n').count() as u64;
    let intents: usize = left.groups.iter().map(|g| g.intents.len()).sum();
    assert!(intents as u64 + left.damaged <= lines);
    let kept: Vec<_> = left.groups.iter().filter(|g| !g.intents.is_empty()).cloned().collect();
    let again = parse_intents(&Left::lines_of(&kept)[..]).expect("a slice never fails");
    assert_eq!(again.damaged, 0);
    assert_eq!(again.groups.len(), kept.len());
    for (a, b) in again.groups.iter().zip(&kept) {
        assert_eq!(a.header, b.header);
        assert_eq!(a.intents, b.intents);
    }
});
