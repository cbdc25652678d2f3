//! Ingest → export round trips through real part files, rejects, merges and table settings.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, MergeOptions, export_table, ingest, merge_parts};
use strata_json::run_with_deep_stack;

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

struct Loaded {
    read: u64,
    loaded: u64,
    rejected: u64,
    rejects: Vec<(u64, String)>,
}

fn load(dir: &DataDir, table: &str, file: PathBuf, options: IngestOptions) -> Loaded {
    let dir = dir.clone();
    let table = table.to_owned();
    run_with_deep_stack(move || {
        let mut rejects = Vec::new();
        let summary = ingest(
            &dir,
            &table,
            &[Input::File(file)],
            &options,
            &mut |_| {},
            &mut |r| rejects.push((r.line, r.reason.clone())),
        )
        .unwrap();
        Loaded {
            read: summary.progress.read,
            loaded: summary.progress.loaded,
            rejected: summary.progress.rejected,
            rejects,
        }
    })
}

fn export_sorted(dir: &DataDir, table: &str) -> Vec<String> {
    let dir = dir.clone();
    let table = table.to_owned();
    run_with_deep_stack(move || {
        let mut out = Vec::new();
        export_table(&dir, &table, &mut out).unwrap();
        let mut docs: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(canonical)
            .collect();
        docs.sort();
        docs
    })
}

/// Parses with the same rules as ingest (exact numbers, last duplicate key wins) and prints
/// with sorted keys, so documents compare by value.
fn canonical(line: &str) -> String {
    let mut de = serde_json::Deserializer::from_str(line);
    de.disable_recursion_limit();
    let value: Value = serde::Deserialize::deserialize(&mut de).unwrap();
    value.to_string()
}

fn expected_docs(file: &Path) -> Vec<String> {
    let bytes = std::fs::read(file).unwrap();
    let mut docs: Vec<String> = bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| strata_json::parse_document_tree(l).ok())
        .map(|m| Value::Object(m).to_string())
        .collect();
    docs.sort();
    docs
}

#[test]
fn edge_cases_round_trip_and_rejects_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let file = repo_file("edge_cases.ndjson");
    let loaded = load(&dir, "edge", file.clone(), IngestOptions::default());
    assert_eq!(loaded.loaded, 17);
    assert_eq!(loaded.rejected, 8);
    assert_eq!(loaded.read, loaded.loaded + loaded.rejected);
    let lines: Vec<u64> = loaded.rejects.iter().map(|r| r.0).collect();
    assert_eq!(lines, vec![17, 18, 19, 20, 21, 22, 23, 24]);
    assert!(
        loaded.rejects[0].1.contains("expected an object"),
        "{:?}",
        loaded.rejects[0]
    );
    assert!(
        loaded.rejects[6].1.contains("nesting deeper"),
        "{:?}",
        loaded.rejects[6]
    );
    assert!(
        loaded.rejects[7].1.contains("UTF-8"),
        "{:?}",
        loaded.rejects[7]
    );
    let rejects_file = std::fs::read_to_string(tmp.path().join("edge/rejects.ndjson")).unwrap();
    assert_eq!(rejects_file.lines().count(), 8);
    assert!(rejects_file.contains("edge_cases.ndjson"));

    let exported = export_sorted(&dir, "edge");
    assert_eq!(exported, expected_docs(&file));
    // Exact values, spelled out for the ones most often lost elsewhere.
    let all = exported.join("\n");
    for needle in [
        "\"007\"",
        "1.10",
        "1e+400",
        "1e-7",
        "18446744073709551616",
        "-0",
        "\"n\":null",
        "\"empty_obj\":{}",
        "\"empty_arr\":[]",
    ] {
        assert!(all.contains(needle), "{needle} missing");
    }
}

#[test]
fn real_samples_round_trip() {
    for (name, sort_key) in [
        (
            "jetstream_sample.ndjson",
            Some(vec![
                "kind".into(),
                "commit.operation".into(),
                "commit.collection".into(),
                "did".into(),
                "time_us".into(),
            ]),
        ),
        (
            "gharchive_2015-01-01_sample.ndjson",
            Some(vec!["type".into(), "repo.name".into()]),
        ),
        ("gharchive_2021-07-21_sample.ndjson", None),
        ("nginxplus_status.ndjson", None),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        let file = repo_file(name);
        let options = IngestOptions {
            sort_key,
            ..Default::default()
        };
        let loaded = load(&dir, "t", file.clone(), options);
        assert_eq!(loaded.rejected, 0, "{name}: {:?}", loaded.rejects);
        assert_eq!(export_sorted(&dir, "t"), expected_docs(&file), "{name}");
    }
}

#[test]
fn small_ingests_merge_without_losing_or_duplicating() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let file = repo_file("jetstream_sample.ndjson");
    let options = IngestOptions {
        sort_key: Some(vec!["kind".into(), "did".into()]),
        auto_merge: false,
        ..Default::default()
    };
    for _ in 0..5 {
        load(&dir, "bsky", file.clone(), options.clone());
    }
    assert_eq!(dir.manifest("bsky").unwrap().parts.len(), 5);
    let before = export_sorted(&dir, "bsky");
    assert_eq!(before.len(), 5 * 152);
    let summary = merge_parts(&dir, "bsky", &MergeOptions::default()).unwrap();
    assert_eq!(summary.inputs_merged, 5);
    assert_eq!(summary.parts_after, 1);
    let manifest = dir.manifest("bsky").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    assert!(
        manifest.retired.is_empty(),
        "no reader held a lease: the inputs are deleted at once (tests/engine/lifecycle.rs)"
    );
    // The merged part and its checksum file (ADR 0008); the inputs' files are gone.
    let mut files: Vec<String> = std::fs::read_dir(tmp.path().join("bsky/parts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(format!("{}.crc", files[0]), files[1]);
    assert_eq!(export_sorted(&dir, "bsky"), before);
}

#[test]
fn sort_key_is_fixed_at_creation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let file = repo_file("jetstream_sample.ndjson");
    load(
        &dir,
        "t",
        file.clone(),
        IngestOptions {
            sort_key: Some(vec!["did".into()]),
            ..Default::default()
        },
    );
    let err = run_with_deep_stack({
        let dir = dir.clone();
        move || {
            ingest(
                &dir,
                "t",
                &[Input::File(file)],
                &IngestOptions {
                    sort_key: Some(vec!["kind".into()]),
                    ..Default::default()
                },
                &mut |_| {},
                &mut |_| {},
            )
            .err()
            .map(|e| e.to_string())
        }
    });
    assert!(err.unwrap().contains("sort key"));
}

#[test]
fn parts_are_sorted_by_the_sort_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    load(
        &dir,
        "t",
        repo_file("jetstream_sample.ndjson"),
        IngestOptions {
            sort_key: Some(vec!["kind".into(), "time_us".into()]),
            ..Default::default()
        },
    );
    let manifest = dir.manifest("t").unwrap();
    let part = &manifest.parts[0];
    assert_eq!(part.sort_key_min["kind"], Value::String("account".into()));
    assert_eq!(part.sort_key_max["kind"], Value::String("identity".into()));
    let batches = strata_format::read_part_batches(
        &strata_format::Manifest::part_path(&tmp.path().join("t"), &part.file),
        part,
    )
    .unwrap();
    let kinds = batches[0].column_by_name("kind").unwrap();
    let kinds = arrow_strings(kinds);
    let mut sorted = kinds.clone();
    sorted.sort();
    assert_eq!(kinds, sorted);
}

fn arrow_strings(array: &arrow::array::ArrayRef) -> Vec<String> {
    use arrow::array::AsArray;
    array
        .as_string::<i32>()
        .iter()
        .map(|s| s.unwrap_or("").to_owned())
        .collect()
}
