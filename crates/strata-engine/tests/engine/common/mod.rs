//! Helpers shared by the engine's integration tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::Path;

use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, ingest};

/// Ingests the NDJSON `text` (written to `scratch/<name>.ndjson`) into table `t` as one part
/// sorted by `id`, with no merge after it; a rejected line fails the test.
pub fn add_part_sorted_by_id(dir: &DataDir, scratch: &Path, name: &str, text: &str) {
    let path = scratch.join(format!("{name}.ndjson"));
    std::fs::write(&path, text).unwrap();
    let options = IngestOptions {
        sort_key: Some(vec!["id".to_owned()]),
        auto_merge: false,
        ..Default::default()
    };
    ingest(
        dir,
        "t",
        &[Input::File(path)],
        &options,
        &mut |_| {},
        &mut |r| panic!("unexpected reject: {r:?}"),
    )
    .unwrap();
}
