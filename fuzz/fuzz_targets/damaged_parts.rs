//! Damaged bytes in a part or its checksum file: reading the part must fail naming it or return
//! exactly the values written, and `check_part` must report any change to the part. A panic, a
//! silently different value or unnoticed damage is a finding (`strata_format::selfcheck`).
//!
//! Input: pairs of (4-byte little-endian offset, XOR mask) applied to the part; a first byte with
//! its low bit set damages the checksum file instead.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arrow::record_batch::RecordBatch;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use strata_format::checksum::checksum_path;
use strata_format::selfcheck::{IntactPart, check_damaged_read};
use strata_format::{PartEntry, PartWriterOptions, read_part_batches, write_part};
use strata_json::{Document, JsonPath, ShredOptions, Shredder};

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    entry: PartEntry,
    bytes: Vec<u8>,
    checksum_file: Vec<u8>,
    batches: Vec<RecordBatch>,
}

/// One part of 20,000 documents (several pages per column, every kind), written once.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let sort_key = ["kind".to_owned()];
        let mut shredder = Shredder::new(ShredOptions {
            sort_key: sort_key.iter().map(|s| JsonPath::decode(s)).collect(),
            ..Default::default()
        });
        for i in 0..20_000u64 {
            let kind = ["commit", "identity", "account"][(i % 3) as usize];
            let doc = json!({
                "kind": kind,
                "did": format!("did:plc:{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20),
                "time_us": 1_700_000_000_000_000u64 + i * 997,
                "ratio": i as f64 / 7.0,
                "ok": i % 5 == 0,
                "nested": {"a": [i, i + 1], "b": null},
            });
            shredder.push(&Document::from_object(doc.as_object().unwrap()));
        }
        let shredded = shredder.finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let entry = write_part(
            dir.path(),
            "part.parquet",
            &shredded,
            &sort_key,
            &PartWriterOptions::default(),
        )
        .unwrap();
        let path = dir.path().join("parts/part.parquet");
        Fixture {
            bytes: std::fs::read(&path).unwrap(),
            checksum_file: std::fs::read(checksum_path(&path)).unwrap(),
            batches: read_part_batches(&path, &entry).unwrap(),
            path,
            entry,
            _dir: dir,
        }
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((first, rest)) = input.split_first() else {
        return;
    };
    let flips: Vec<(usize, u8)> = rest
        .chunks_exact(5)
        .take(16)
        .filter(|c| c[4] != 0)
        .map(|c| (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize, c[4]))
        .collect();
    if flips.is_empty() {
        return;
    }
    let f = fixture();
    let part = IntactPart {
        path: &f.path,
        entry: &f.entry,
        bytes: &f.bytes,
        checksum_file: &f.checksum_file,
        batches: &f.batches,
    };
    if let Err(violation) = check_damaged_read(&part, &flips, first & 1 == 1) {
        panic!("{violation}");
    }
});
