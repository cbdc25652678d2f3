//! Shared by the integration tests of this crate: documents shredded and written as one part.

#![allow(dead_code)] // each test binary uses its own share of these helpers

use serde_json::{Value, json};
use strata_format::{PartEntry, PartWriterOptions, write_part};
use strata_json::{Document, JsonPath, ShredOptions, ShreddedBatch, Shredder};

/// Shreds `docs` (objects) sorted by `sort_key` into one batch.
pub fn shred(docs: &[Value], sort_key: &[String]) -> ShreddedBatch {
    let mut shredder = Shredder::new(ShredOptions {
        sort_key: sort_key.iter().map(|s| JsonPath::decode(s)).collect(),
        ..Default::default()
    });
    for doc in docs {
        shredder.push(&Document::from_object(
            doc.as_object().expect("documents are objects"),
        ));
    }
    shredder.finish().expect("shredding")
}

/// A deterministic hexadecimal string of 32 characters that compresses no better than random.
pub fn hash_text(n: u64) -> String {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    format!("{:016x}{:016x}", mix(n), mix(!n))
}

/// Shreds `docs` (objects) sorted by `sort_key` and writes them as `parts/part.parquet` of a new
/// temporary table directory; returns the directory and the part's manifest entry.
pub fn write_docs(docs: &[Value], sort_key: &[String]) -> (tempfile::TempDir, PartEntry) {
    let shredded = shred(docs, sort_key);
    let dir = tempfile::tempdir().expect("temporary directory");
    let entry = write_part(
        dir.path(),
        "part.parquet",
        &shredded,
        sort_key,
        &PartWriterOptions::default(),
    )
    .expect("writing the part");
    (dir, entry)
}

/// Documents with every column kind, several pages per column (granules of 8,192 rows) and a
/// dictionary-encoded string column.
pub fn docs(rows: usize) -> Vec<Value> {
    (0..rows)
        .map(|i| {
            let kind = ["commit", "identity", "account"][i % 3];
            json!({
                "kind": kind,
                "did": format!("did:plc:{}", hash_text((i / 7) as u64)),
                "time_us": 1_700_000_000_000_000i64 + i as i64 * 997,
                "ratio": i as f64 / 7.0,
                "ok": i % 5 == 0,
                "text": hash_text(i as u64),
                "nested": {"a": [i, i + 1], "b": null},
            })
        })
        .collect()
}
