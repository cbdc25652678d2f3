//! Deletion vectors end to end in the engine (ADR 0015): deleted rows leave exports, stay
//! deleted across further deletions, are dropped for good by merges, and a table with deletions
//! is format version 2 until none is left.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use strata_engine::{DataDir, EngineError, MergeOptions, delete_rows, export_table, merge_parts};

/// Ingests ids `range` as one part sorted by id, so row i of the part holds the i-th id.
fn add_part(dir: &DataDir, scratch: &Path, range: std::ops::Range<u64>) {
    let name = format!("in{}", range.start);
    let text: String = range
        .map(|id| format!("{{\"id\":{id},\"name\":\"n{id}\"}}\n"))
        .collect();
    common::add_part_sorted_by_id(dir, scratch, &name, &text);
}

fn ids(dir: &DataDir) -> Vec<u64> {
    let mut out = Vec::new();
    export_table(dir, "t", &mut out).unwrap();
    let mut ids: Vec<u64> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn part_files(dir: &DataDir) -> Vec<String> {
    dir.manifest("t")
        .unwrap()
        .parts
        .iter()
        .map(|p| p.file.clone())
        .collect()
}

fn files_on_disk(dir: &DataDir, suffix: &str) -> Vec<String> {
    let parts = dir.table_dir("t").unwrap().join("parts");
    let mut names: Vec<String> = std::fs::read_dir(parts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

fn format_version(dir: &DataDir) -> u64 {
    let text = std::fs::read(dir.table_dir("t").unwrap().join("manifest.json")).unwrap();
    serde_json::from_slice::<Value>(&text).unwrap()["format_version"]
        .as_u64()
        .unwrap()
}

#[test]
fn deleted_rows_leave_exports_and_merges_drop_them_for_good() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    add_part(&dir, tmp.path(), 0..100);
    add_part(&dir, tmp.path(), 100..200);
    let parts = part_files(&dir);
    assert_eq!(format_version(&dir), 1);

    let first: BTreeMap<String, Vec<u64>> = [
        (parts[0].clone(), vec![0, 5, 99]),
        (parts[1].clone(), vec![10]),
    ]
    .into();
    assert_eq!(delete_rows(&dir, "t", &first).unwrap(), 4);
    let expected: Vec<u64> = (0..200).filter(|i| ![0, 5, 99, 110].contains(i)).collect();
    assert_eq!(ids(&dir), expected);
    assert_eq!(format_version(&dir), 2);
    assert_eq!(files_on_disk(&dir, ".dv").len(), 2);
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts[0].deletes.as_ref().unwrap().rows, 3);
    assert_eq!(manifest.parts[0].live_rows(), 97);

    // Cumulative: deleting again (one row already deleted) adds only the new one, and the
    // part's previous vector file is retired and then deleted.
    let second: BTreeMap<String, Vec<u64>> = [(parts[0].clone(), vec![5, 6])].into();
    assert_eq!(delete_rows(&dir, "t", &second).unwrap(), 1);
    let expected: Vec<u64> = expected.into_iter().filter(|&i| i != 6).collect();
    assert_eq!(ids(&dir), expected);
    assert_eq!(files_on_disk(&dir, ".dv").len(), 2);
    assert_eq!(
        dir.manifest("t").unwrap().parts[0]
            .deletes
            .as_ref()
            .unwrap()
            .rows,
        4
    );
    // `strata tables` counts documents, not rows of parts.
    let tables = dir.tables().unwrap();
    assert_eq!(
        tables[0].1.as_ref().unwrap().documents,
        expected.len() as u64
    );

    // Nothing is committed when one entry is wrong.
    let wrong: BTreeMap<String, Vec<u64>> =
        [(parts[0].clone(), vec![7]), (parts[1].clone(), vec![100])].into();
    assert!(matches!(
        delete_rows(&dir, "t", &wrong),
        Err(EngineError::NoSuchRow { row: 100, .. })
    ));
    let missing: BTreeMap<String, Vec<u64>> = [("part-nope.parquet".to_owned(), vec![1])].into();
    assert!(matches!(
        delete_rows(&dir, "t", &missing),
        Err(EngineError::NoSuchPart { .. })
    ));
    assert_eq!(ids(&dir), expected);

    // A merge writes the live rows only; the vectors go with their parts.
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!((summary.inputs_merged, summary.parts_after), (2, 1));
    let manifest = dir.manifest("t").unwrap();
    assert!(manifest.parts[0].deletes.is_none());
    assert_eq!(manifest.parts[0].rows, expected.len() as u64);
    assert_eq!(ids(&dir), expected);
    assert_eq!(format_version(&dir), 1);
    assert!(files_on_disk(&dir, ".dv").is_empty());
}

#[test]
fn a_manifest_of_an_unknown_format_version_is_refused_by_name() {
    // What a build without deletion vectors does with a version-2 manifest, this build does
    // with a version it does not know: refuse the table instead of misreading it.
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    add_part(&dir, tmp.path(), 0..10);
    let path = dir.table_dir("t").unwrap().join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["format_version"] = 4.into();
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let err = dir.manifest("t").unwrap_err().to_string();
    assert!(err.contains("unsupported format version 4"), "{err}");
}

#[test]
fn a_damaged_deletion_vector_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    add_part(&dir, tmp.path(), 0..10);
    let part = part_files(&dir).remove(0);
    delete_rows(&dir, "t", &[(part, vec![3])].into()).unwrap();
    let dv = files_on_disk(&dir, ".dv").remove(0);
    let path = dir.table_dir("t").unwrap().join("parts").join(&dv);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let mut out = Vec::new();
    let err = export_table(&dir, "t", &mut out).unwrap_err().to_string();
    assert!(err.contains(&dv) && err.contains("CRC-32"), "{err}");
    // `strata check` names it too.
    let check = strata_engine::check_table(&dir, "t").unwrap();
    let problems: Vec<String> = check
        .parts
        .iter()
        .flat_map(|p| p.problems.clone())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&dv) && p.contains("CRC-32")),
        "{problems:?}"
    );
}
