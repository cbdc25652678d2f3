//! Column names encode JSON path segments; any segments (dots, backslashes, empty keys,
//! unicode) must decode back to themselves, and decoding any name must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_json::JsonPath;

fuzz_target!(|input: &str| {
    let _ = JsonPath::decode(input);
    let segments: Vec<String> = input.split('\u{1}').map(str::to_owned).collect();
    let path = JsonPath::new(segments.clone());
    let decoded = JsonPath::decode(&path.encode());
    assert_eq!(decoded.segments(), segments.as_slice(), "encoded as {:?}", path.encode());
});
