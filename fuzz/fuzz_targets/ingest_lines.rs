//! Any bytes as NDJSON input: parse, shred (with a tight column limit so the remainder is
//! exercised too), reconstruct. A panic, a stack overflow or a changed document is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_json::selfcheck::check_ingest_round_trip;

fuzz_target!(|input: &[u8]| {
    let max_columns = match input.first() {
        Some(b) => 1 + usize::from(*b % 4) * 8,
        None => 1024,
    };
    let owned = input.to_vec();
    let result = strata_json::run_with_deep_stack(move || {
        check_ingest_round_trip(&owned, max_columns, &["kind", "commit.collection"])
    });
    if let Err(violation) = result {
        panic!("{violation}");
    }
});
