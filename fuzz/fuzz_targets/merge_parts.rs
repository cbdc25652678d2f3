//! Any bytes as NDJSON input, shredded into two parts and conformed to their merged layout as
//! `strata optimize` does. A panic, a changed document or a remainder value that belongs in a
//! typed column is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_json::selfcheck::check_merge_round_trip;

fuzz_target!(|input: &[u8]| {
    let max_columns = match input.first() {
        Some(b) => 1 + usize::from(*b % 4) * 8,
        None => 1024,
    };
    let owned = input.to_vec();
    let result = strata_json::run_with_deep_stack(move || {
        check_merge_round_trip(&owned, max_columns, &["kind", "commit.collection"])
    });
    if let Err(violation) = result {
        panic!("{violation}");
    }
});
