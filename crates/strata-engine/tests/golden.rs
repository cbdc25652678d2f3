//! Golden files of on-disk format version 1.
//!
//! `tests/golden/v1/TABLE/` holds tables written before part checksums (no `xxh64`, no checksum
//! files; frozen) and `tests/golden/v1-checksums/TABLE/` the same tables written with them (ADR
//! 0008), each with `TABLE.export.ndjson`, the expected export. Every build must (1) read both
//! and export exactly the expected documents (the second verified: `check` finds them intact),
//! and (2) write the same layout for the same input: the same manifest entries (columns, kinds,
//! remainder paths, statistics) and the same Parquet schema. Set STRATA_UPDATE_GOLDEN=1 to
//! regenerate `v1-checksums` after an intended, documented change.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatchReader;
use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, export_table, ingest};
use strata_format::Manifest;

const TABLES: [(&str, &str, Option<&str>); 2] = [
    ("edge", "edge_cases.ndjson", None),
    (
        "bluesky",
        "jetstream_sample.ndjson",
        Some("kind,commit.operation,commit.collection,did,time_us"),
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn write_table(dir: &DataDir, table: &str, file: &str, sort_key: Option<&str>) {
    let dir = dir.clone();
    let table = table.to_owned();
    let input = repo().join("tests/data").join(file);
    let sort_key = sort_key.map(|k| k.split(',').map(String::from).collect());
    strata_json::run_with_deep_stack(move || {
        ingest(
            &dir,
            &table,
            &[Input::File(input)],
            &IngestOptions {
                sort_key,
                ..Default::default()
            },
            &mut |_| {},
            &mut |_| {},
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .unwrap();
}

fn export(dir: &DataDir, table: &str) -> String {
    let dir = dir.clone();
    let table = table.to_owned();
    strata_json::run_with_deep_stack(move || {
        let mut out = Vec::new();
        export_table(&dir, &table, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    })
}

/// The parts of a manifest without what legitimately differs between runs.
fn layout(manifest: &Manifest) -> Value {
    let mut value = serde_json::to_value(manifest).unwrap();
    value["version"] = Value::Null;
    for part in value["parts"].as_array_mut().unwrap() {
        part["file"] = Value::Null;
        part["bytes"] = Value::Null;
        // Which parts have checksums is checked apart; their value follows the bytes.
        part.as_object_mut().unwrap().remove("xxh64");
    }
    value
}

fn part_schema(table_dir: &Path, manifest: &Manifest) -> String {
    let path = Manifest::part_path(table_dir, &manifest.parts[0].file);
    let reader = strata_format::read_part(&path, &manifest.parts[0], 1024).unwrap();
    format!("{:#?}", reader.schema())
}

#[test]
fn golden_tables_read_and_write_the_same() {
    let legacy = repo().join("tests/golden/v1");
    let golden = repo().join("tests/golden/v1-checksums");
    let update = std::env::var_os("STRATA_UPDATE_GOLDEN").is_some();
    if update {
        let _ = std::fs::remove_dir_all(&golden);
        std::fs::create_dir_all(&golden).unwrap();
        let dir = DataDir::new(&golden);
        for (table, file, sort_key) in TABLES {
            write_table(&dir, table, file, sort_key);
            std::fs::write(
                golden.join(format!("{table}.export.ndjson")),
                export(&dir, table),
            )
            .unwrap();
            let _ = std::fs::remove_file(golden.join(table).join(".lock"));
        }
    }
    let golden_dir = DataDir::new(&golden);
    let tmp = tempfile::tempdir().unwrap();
    let fresh_dir = DataDir::new(tmp.path());
    for (table, file, sort_key) in TABLES {
        let expected =
            std::fs::read_to_string(golden.join(format!("{table}.export.ndjson"))).unwrap();
        // 1. Old files read back exactly: parts without checksums as before, parts with them
        // verified.
        let legacy_dir = DataDir::new(&legacy);
        let legacy_manifest = legacy_dir.manifest(table).unwrap();
        assert!(legacy_manifest.parts.iter().all(|p| p.xxh64.is_none()));
        assert_eq!(
            export(&legacy_dir, table),
            expected,
            "{table}: unverified parts"
        );
        let legacy_check = strata_engine::check_table(&legacy_dir, table).unwrap();
        assert!(!legacy_check.is_damaged(), "{legacy_check:?}");
        let golden_manifest = golden_dir.manifest(table).unwrap();
        assert!(golden_manifest.parts.iter().all(|p| p.xxh64.is_some()));
        let golden_check = strata_engine::check_table(&golden_dir, table).unwrap();
        assert!(!golden_check.is_damaged(), "{golden_check:?}");
        let mut got = String::new();
        for part in &golden_manifest.parts {
            let batches = strata_format::read_part_batches(
                &Manifest::part_path(&golden.join(table), &part.file),
                part,
            )
            .unwrap();
            for batch in batches {
                for doc in
                    strata_json::reconstruct::reconstruct(&batch, &strata_json::JsonPath::default())
                        .unwrap()
                        .into_iter()
                        .flatten()
                {
                    got.push_str(&doc.to_string());
                    got.push('\n');
                }
            }
        }
        assert_eq!(
            got, expected,
            "{table}: golden parts no longer read back the same"
        );

        // 2. The same input writes the same layout.
        write_table(&fresh_dir, table, file, sort_key);
        let fresh_manifest = fresh_dir.manifest(table).unwrap();
        assert!(fresh_manifest.parts.iter().all(|p| p.xxh64.is_some()));
        assert_eq!(
            layout(&fresh_manifest),
            layout(&golden_manifest),
            "{table}: manifest layout changed"
        );
        assert_eq!(
            layout(&legacy_manifest),
            layout(&golden_manifest),
            "{table}: the layout changed beyond checksums since v1"
        );
        assert_eq!(
            part_schema(&tmp.path().join(table), &fresh_manifest),
            part_schema(&golden.join(table), &golden_manifest),
            "{table}: part schema changed"
        );
        assert_eq!(
            export(&fresh_dir, table),
            expected,
            "{table}: export order or values changed"
        );
    }
}
