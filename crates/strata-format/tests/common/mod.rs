//! Shared by the integration tests of this crate: documents shredded and written as one part.

use serde_json::Value;
use strata_format::{PartEntry, PartWriterOptions, write_part};
use strata_json::{Document, JsonPath, ShredOptions, Shredder};

/// Shreds `docs` (objects) sorted by `sort_key` and writes them as `parts/part.parquet` of a new
/// temporary table directory; returns the directory and the part's manifest entry.
pub fn write_docs(docs: &[Value], sort_key: &[String]) -> (tempfile::TempDir, PartEntry) {
    let mut shredder = Shredder::new(ShredOptions {
        sort_key: sort_key.iter().map(|s| JsonPath::decode(s)).collect(),
        ..Default::default()
    });
    for doc in docs {
        shredder.push(&Document::from_object(
            doc.as_object().expect("documents are objects"),
        ));
    }
    let shredded = shredder.finish().expect("shredding");
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
