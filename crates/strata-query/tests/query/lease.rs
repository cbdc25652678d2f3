//! A resolved table holds a read lease: a merge that commits meanwhile keeps the parts the
//! statement's snapshot lists, and the next writer deletes them once the statement is gone
//! (ADR 0009).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, MergeOptions, ingest, merge_parts};
use strata_query::Session;

#[test]
fn a_resolved_table_keeps_its_parts_until_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    for i in 0..3 {
        let file = tmp.path().join(format!("{i}.ndjson"));
        std::fs::write(&file, format!("{{\"i\":{i}}}\n")).unwrap();
        let dir = dir.clone();
        strata_json::run_with_deep_stack(move || {
            let options = IngestOptions {
                auto_merge: false,
                ..Default::default()
            };
            ingest(
                &dir,
                "t",
                &[Input::File(file)],
                &options,
                &mut |_| {},
                &mut |_| {},
            )
            .unwrap();
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let provider = runtime
        .block_on(session.context().table_provider("t"))
        .unwrap();
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!((summary.inputs_merged, summary.retired_kept), (3, 3));
    drop(provider);
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!(summary.retired_kept, 0);
    // Only the merged part is left (with its checksum file).
    let parts = std::fs::read_dir(tmp.path().join("t/parts"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            !name.to_string_lossy().ends_with(".crc")
        })
        .count();
    assert_eq!(parts, 1);
    let rows = runtime
        .block_on(session.run("SELECT count(*) FROM t"))
        .unwrap();
    assert_eq!(rows.batches[0].num_rows(), 1);
}
