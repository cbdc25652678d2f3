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
        // The golden manifests predate `newest_write` (ADR 0017) and must read without it;
        // that new parts get it is checked apart.
        part.as_object_mut().unwrap().remove("newest_write");
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
        assert!(
            fresh_manifest
                .parts
                .iter()
                .all(|p| p.newest_write.is_some_and(|v| v <= fresh_manifest.version))
        );
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

/// `tests/golden/v3-keys/gh/`: a keyed table (format version 3, ADR 0016) of the real GH Archive
/// sample keyed by `id`, sorted by `type`, whose first 100 documents were loaded again (so the
/// first part has a deletion vector and the second replaces them), with its key files. Every
/// build must read it back, find every key exactly once through the key files, and write the
/// same manifest layout and the same key-file contents for the same inputs.
#[test]
fn golden_keyed_table_reads_and_writes_the_same() {
    let golden = repo().join("tests/golden/v3-keys");
    let input = repo().join("tests/data/gharchive_2015-01-01_sample.ndjson");
    let text = std::fs::read_to_string(&input).unwrap();
    let again: String = text.lines().take(100).map(|l| format!("{l}\n")).collect();
    let write = |dir: &DataDir, scratch: &Path| {
        let again_path = scratch.join("again.ndjson");
        std::fs::write(&again_path, &again).unwrap();
        for (path, first) in [(input.clone(), true), (again_path, false)] {
            let dir = dir.clone();
            strata_json::run_with_deep_stack(move || {
                let options = IngestOptions {
                    sort_key: first.then(|| vec!["type".to_owned()]),
                    key: first.then(|| ("id".to_owned(), strata_json::KeyType::String)),
                    auto_merge: false,
                    ..Default::default()
                };
                ingest(
                    &dir,
                    "gh",
                    &[Input::File(path)],
                    &options,
                    &mut |_| {},
                    &mut |_| {},
                )
                .map(|_| ())
                .map_err(|e| e.to_string())
            })
            .unwrap();
        }
    };
    if std::env::var_os("STRATA_UPDATE_GOLDEN").is_some() {
        let _ = std::fs::remove_dir_all(&golden);
        std::fs::create_dir_all(&golden).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let dir = DataDir::new(&golden);
        write(&dir, scratch.path());
        std::fs::write(golden.join("gh.export.ndjson"), export(&dir, "gh")).unwrap();
        for lock_file in [".lock", ".readers", ".merging"] {
            let _ = std::fs::remove_file(golden.join("gh").join(lock_file));
        }
    }
    let expected = std::fs::read_to_string(golden.join("gh.export.ndjson")).unwrap();
    let golden_dir = DataDir::new(&golden);
    let manifest = golden_dir.manifest("gh").unwrap();
    assert_eq!(manifest.format_version, 3);
    assert_eq!(export(&golden_dir, "gh"), expected);
    let check = strata_engine::check_table(&golden_dir, "gh").unwrap();
    assert!(!check.is_damaged(), "{check:?}");

    // Every key once among the live rows, found through the key files.
    let live_hits = |dir: &Path, manifest: &Manifest| {
        let mut keys: Vec<strata_json::KeyValue> = expected
            .lines()
            .map(|l| {
                let doc: Value = serde_json::from_str(l).unwrap();
                strata_json::KeyValue::String(doc["id"].as_str().unwrap().to_owned())
            })
            .collect();
        keys.sort();
        let mut hits = Vec::new();
        for (index, part) in manifest.parts.iter().enumerate() {
            let deleted = part
                .deletes
                .as_ref()
                .map(|d| strata_format::deletes::read_deletion_vector(dir, d, part.rows).unwrap());
            for hit in strata_format::find_keys(dir, part.keys.as_ref().unwrap(), part.rows, &keys)
                .unwrap()
            {
                if !deleted.as_ref().is_some_and(|d| d.contains(hit.row)) {
                    hits.push((keys[hit.key].clone(), index, hit.row));
                }
            }
        }
        hits.sort();
        (keys, hits)
    };
    let (keys, golden_hits) = live_hits(&golden.join("gh"), &manifest);
    assert_eq!(golden_hits.len(), keys.len());
    assert!(
        golden_hits.windows(2).all(|w| w[0].0 != w[1].0),
        "a key is live twice"
    );

    // The same inputs write the same layout and the same key files.
    let tmp = tempfile::tempdir().unwrap();
    let fresh = DataDir::new(tmp.path().join("data"));
    write(&fresh, tmp.path());
    let fresh_manifest = fresh.manifest("gh").unwrap();
    let without_names = |manifest: &Manifest| {
        let mut value = layout(manifest);
        for part in value["parts"].as_array_mut().unwrap() {
            for entry in ["keys", "deletes"] {
                if let Some(object) = part[entry].as_object_mut() {
                    object.remove("file");
                    object.remove("bytes");
                    object.remove("xxh64");
                }
            }
        }
        value
    };
    assert_eq!(without_names(&fresh_manifest), without_names(&manifest));
    let (_, fresh_hits) = live_hits(&tmp.path().join("data").join("gh"), &fresh_manifest);
    assert_eq!(fresh_hits, golden_hits);
    assert_eq!(export(&fresh, "gh"), expected);
}

/// `tests/golden/v3-indexes/gh/`: the first 300 documents of the real GH Archive sample sorted by
/// `type`, with two secondary indexes (ADR 0024): `gh_repo` on the string path `repo.name` and
/// `gh_actor` on the integer path `actor.id`, built by `CREATE INDEX` for the part already there,
/// then 50 more documents whose part the part writer indexed. Every build must read it back
/// (`check` verifying every index file), find the same rows for every value through the files,
/// and write the same manifest layout (index entries' rows and value ranges included) and the
/// same index contents for the same inputs.
#[test]
fn golden_indexed_table_reads_and_writes_the_same() {
    let golden = repo().join("tests/golden/v3-indexes");
    let input = repo().join("tests/data/gharchive_2015-01-01_sample.ndjson");
    let text = std::fs::read_to_string(&input).unwrap();
    let lines: Vec<String> = text.lines().map(|l| format!("{l}\n")).collect();
    let write = |dir: &DataDir, scratch: &Path| {
        for (batch, range) in [(0, 0..300), (1, 300..350)] {
            let path = scratch.join(format!("batch-{batch}.ndjson"));
            std::fs::write(&path, lines[range].concat()).unwrap();
            let writer = dir.clone();
            strata_json::run_with_deep_stack(move || {
                let options = IngestOptions {
                    sort_key: (batch == 0).then(|| vec!["type".to_owned()]),
                    auto_merge: false,
                    ..Default::default()
                };
                ingest(
                    &writer,
                    "gh",
                    &[Input::File(path)],
                    &options,
                    &mut |_| {},
                    &mut |_| {},
                )
                .map(|_| ())
                .map_err(|e| e.to_string())
            })
            .unwrap();
            if batch == 0 {
                dir.create_index("gh", "gh_repo", "repo.name", false)
                    .unwrap();
                dir.create_index("gh", "gh_actor", "actor.id", false)
                    .unwrap();
            }
        }
    };
    if std::env::var_os("STRATA_UPDATE_GOLDEN").is_some() {
        let _ = std::fs::remove_dir_all(&golden);
        std::fs::create_dir_all(&golden).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let dir = DataDir::new(&golden);
        write(&dir, scratch.path());
        std::fs::write(golden.join("gh.export.ndjson"), export(&dir, "gh")).unwrap();
        for lock_file in [".lock", ".readers", ".merging"] {
            let _ = std::fs::remove_file(golden.join("gh").join(lock_file));
        }
    }
    let expected = std::fs::read_to_string(golden.join("gh.export.ndjson")).unwrap();
    let golden_dir = DataDir::new(&golden);
    let manifest = golden_dir.manifest("gh").unwrap();
    let names: Vec<&str> = manifest
        .settings
        .indexes
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, ["gh_repo", "gh_actor"]);
    assert_eq!(export(&golden_dir, "gh"), expected);
    let check = strata_engine::check_table(&golden_dir, "gh").unwrap();
    assert!(!check.is_damaged(), "{check:?}");

    // For each part and index, the rows listed for every value of the documents.
    let listed = |dir: &Path, manifest: &Manifest| {
        let mut values: Vec<(String, strata_json::KeyValue)> = Vec::new();
        for line in expected.lines() {
            let doc: Value = serde_json::from_str(line).unwrap();
            let repo = doc["repo"]["name"].as_str().unwrap().to_owned();
            values.push(("gh_repo".into(), strata_json::KeyValue::String(repo)));
            let actor = doc["actor"]["id"].as_i64().unwrap();
            values.push(("gh_actor".into(), strata_json::KeyValue::Integer(actor)));
        }
        values.sort();
        values.dedup();
        let mut found = Vec::new();
        for (part_index, part) in manifest.parts.iter().enumerate() {
            assert_eq!(
                part.indexes.len(),
                2,
                "part {part_index} has both index files"
            );
            for (name, value) in &values {
                let index = part.indexes.iter().find(|i| &i.name == name).unwrap();
                let rows = strata_format::KeyCache::shared()
                    .index_rows_of(dir, index, part.rows, value)
                    .unwrap();
                found.push((part_index, name.clone(), value.clone(), rows));
            }
        }
        found
    };
    let golden_rows = listed(&golden.join("gh"), &manifest);
    let rows_listed: usize = golden_rows.iter().map(|(_, _, _, rows)| rows.len()).sum();
    assert_eq!(rows_listed, 2 * 350, "every document once in each index");

    // The same inputs write the same layout and the same index contents.
    let tmp = tempfile::tempdir().unwrap();
    let fresh = DataDir::new(tmp.path().join("data"));
    write(&fresh, tmp.path());
    let fresh_manifest = fresh.manifest("gh").unwrap();
    let without_names = |manifest: &Manifest| {
        let mut value = layout(manifest);
        for part in value["parts"].as_array_mut().unwrap() {
            for index in part["indexes"].as_array_mut().unwrap() {
                let object = index.as_object_mut().unwrap();
                object.remove("file");
                object.remove("bytes");
                object.remove("xxh64");
            }
        }
        value
    };
    assert_eq!(without_names(&fresh_manifest), without_names(&manifest));
    assert_eq!(
        listed(&tmp.path().join("data").join("gh"), &fresh_manifest),
        golden_rows
    );
    assert_eq!(export(&fresh, "gh"), expected);
}
