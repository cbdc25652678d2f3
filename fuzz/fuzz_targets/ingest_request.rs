//! Any bytes as a `strata serve` ingest request body: the first byte chooses the
//! `Content-Encoding` (none, gzip, zstd), the rest is the body. It must be committed with every
//! line accounted for, or rejected whole (`strata_engine::selfcheck::check_stream_ingest`). A
//! panic, a lost or invented document, or an error on an in-memory body is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_engine::input::Compression;
use strata_engine::selfcheck::check_stream_ingest;

fuzz_target!(|input: &[u8]| {
    let Some((&choice, body)) = input.split_first() else {
        return;
    };
    let compression = match choice % 3 {
        0 => Compression::None,
        1 => Compression::Gzip,
        _ => Compression::Zstd,
    };
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let owned = body.to_vec();
    let result = strata_json::run_with_deep_stack(move || check_stream_ingest(dir.path(), &owned, compression));
    if let Err(violation) = result {
        panic!("{violation}");
    }
});
