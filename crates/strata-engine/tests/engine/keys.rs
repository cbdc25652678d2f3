//! Keyed tables end to end in the engine (ADR 0016): upserts by key, the three conflict
//! policies, documents without a key, fixed key settings, and — as a property over random
//! sequences of ingests and merges — at most one live document per key, always the one the
//! policy says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{
    DataDir, EngineError, IngestOptions, IngestSummary, MergeOptions, OnConflict, Reject,
    export_table, ingest, merge_parts,
};
use strata_json::KeyType;

fn options(key: &str, key_type: KeyType, on_conflict: OnConflict) -> IngestOptions {
    IngestOptions {
        key: Some((key.to_owned(), key_type)),
        on_conflict,
        auto_merge: false,
        ..Default::default()
    }
}

fn load(
    dir: &DataDir,
    scratch: &Path,
    lines: &[String],
    options: &IngestOptions,
) -> (Result<IngestSummary, EngineError>, Vec<Reject>) {
    let path = scratch.join("in.ndjson");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let mut rejects = Vec::new();
    let result = ingest(
        dir,
        "t",
        &[Input::File(path)],
        options,
        &mut |_| {},
        &mut |r| rejects.push(r.clone()),
    );
    (result, rejects)
}

fn documents(dir: &DataDir) -> Vec<Value> {
    let mut out = Vec::new();
    export_table(dir, "t", &mut out).unwrap();
    let mut docs: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    docs.sort_by_key(|d| d.to_string());
    docs
}

fn doc(id: &Value, version: u32) -> String {
    serde_json::json!({"id": id, "version": version, "pad": "x".repeat(40)}).to_string()
}

#[test]
fn a_document_replaces_the_one_with_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let opts = options("id", KeyType::String, OnConflict::Replace);
    let first: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|k| doc(&(*k).into(), 1))
        .collect();
    let (summary, _) = load(&dir, tmp.path(), &first, &opts);
    assert_eq!(summary.unwrap().replaced, 0);
    let second = vec![
        doc(&"b".into(), 2),
        doc(&"d".into(), 2),
        doc(&"b".into(), 3),
    ];
    let summary = load(&dir, tmp.path(), &second, &opts).0.unwrap();
    // b of the table, and b version 2 of this ingest.
    assert_eq!(summary.replaced, 2);
    assert_eq!(summary.table_documents, 4);
    let versions: BTreeMap<String, u64> = documents(&dir)
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap().to_owned(),
                d["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [("a", 1), ("b", 3), ("c", 1), ("d", 2)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    );
    // A merge keeps exactly the live documents, and the key files follow the parts.
    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    assert!(manifest.parts[0].deletes.is_none());
    assert!(manifest.parts[0].keys.is_some());
    assert_eq!(manifest.format_version, 3);
    assert_eq!(documents(&dir).len(), 4);
    let parts_dir = dir.table_dir("t").unwrap().join("parts");
    let key_files = std::fs::read_dir(parts_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".keys")
        })
        .count();
    assert_eq!(key_files, 1, "the merged parts' key files were collected");
}

#[test]
fn ignore_keeps_the_first_and_error_loads_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let ignore = options("id", KeyType::Integer, OnConflict::Ignore);
    let lines = vec![doc(&1.into(), 1), doc(&2.into(), 1), doc(&1.into(), 2)];
    let summary = load(&dir, tmp.path(), &lines, &ignore).0.unwrap();
    assert_eq!((summary.progress.loaded, summary.progress.ignored), (2, 1));
    let lines = vec![doc(&2.into(), 3), doc(&3.into(), 3)];
    let summary = load(&dir, tmp.path(), &lines, &ignore).0.unwrap();
    assert_eq!((summary.progress.loaded, summary.progress.ignored), (1, 1));
    let got: Vec<(i64, u64)> = documents(&dir)
        .iter()
        .map(|d| (d["id"].as_i64().unwrap(), d["version"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, vec![(1, 1), (2, 1), (3, 3)]);

    let error = options("id", KeyType::Integer, OnConflict::Error);
    let before = dir.manifest("t").unwrap();
    let e = load(
        &dir,
        tmp.path(),
        &[doc(&4.into(), 4), doc(&3.into(), 4)],
        &error,
    )
    .0
    .unwrap_err();
    assert!(matches!(e, EngineError::DuplicateKey { .. }), "{e}");
    assert!(
        e.to_string().contains("key id = 3 is already in the table"),
        "{e}"
    );
    let e = load(
        &dir,
        tmp.path(),
        &[doc(&5.into(), 4), doc(&5.into(), 5)],
        &error,
    )
    .0
    .unwrap_err();
    assert!(e.to_string().contains("twice in this ingest"), "{e}");
    assert_eq!(dir.manifest("t").unwrap().parts, before.parts);
    assert_eq!(documents(&dir).len(), 3);
}

#[test]
fn documents_without_a_key_of_the_tables_type_are_rejected_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let opts = options("user.id", KeyType::String, OnConflict::Replace);
    let lines: Vec<String> = [
        r#"{"user":{"id":"u1"}}"#,
        r#"{"user":{"name":"x"}}"#,
        r#"{"user":{"id":7}}"#,
        r#"{"user":{"id":null}}"#,
        r#"{"id":"u2"}"#,
        r#"{"user":{"id":"u2","n":1}}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (summary, rejects) = load(&dir, tmp.path(), &lines, &opts);
    assert_eq!(summary.unwrap().progress.loaded, 2);
    let reasons: Vec<(u64, String)> = rejects.into_iter().map(|r| (r.line, r.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            (2, "the key path user.id is missing".to_owned()),
            (
                3,
                "the key path user.id holds the integer 7, but the table's key is of type string"
                    .to_owned()
            ),
            (4, "the key path user.id is null".to_owned()),
            (5, "the key path user.id is missing".to_owned()),
        ]
    );
}

#[test]
fn a_tables_key_is_fixed_when_it_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let plain = IngestOptions {
        auto_merge: false,
        ..Default::default()
    };
    load(&dir, tmp.path(), &[doc(&1.into(), 1)], &plain)
        .0
        .unwrap();
    let keyed = options("id", KeyType::Integer, OnConflict::Replace);
    let e = load(&dir, tmp.path(), &[doc(&1.into(), 2)], &keyed)
        .0
        .unwrap_err();
    assert!(matches!(e, EngineError::KeyMismatch { .. }), "{e}");
    assert!(e.to_string().contains("no key"), "{e}");

    let other = DataDir::new(tmp.path().join("other"));
    load(&other, tmp.path(), &[doc(&1.into(), 1)], &keyed)
        .0
        .unwrap();
    let wrong_type = options("id", KeyType::String, OnConflict::Replace);
    let e = load(&other, tmp.path(), &[doc(&"1".into(), 1)], &wrong_type)
        .0
        .unwrap_err();
    assert!(matches!(e, EngineError::KeyMismatch { .. }), "{e}");
    // Without --key, an ingest uses the table's key.
    load(&other, tmp.path(), &[doc(&1.into(), 2)], &plain)
        .0
        .unwrap();
    assert_eq!(documents(&other).len(), 1);
    for bad in ["", "a..b", "__strata_rest"] {
        let e = load(
            &DataDir::new(tmp.path().join("bad")),
            tmp.path(),
            &[doc(&1.into(), 1)],
            &options(bad, KeyType::Integer, OnConflict::Replace),
        )
        .0
        .unwrap_err();
        assert!(matches!(e, EngineError::InvalidKey { .. }), "{bad:?}: {e}");
    }
}

#[test]
fn a_merge_of_parts_whose_rows_are_all_deleted_leaves_no_part() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let opts = options("id", KeyType::Integer, OnConflict::Replace);
    let lines: Vec<String> = (0..50).map(|k| doc(&k.into(), 1)).collect();
    load(&dir, tmp.path(), &lines, &opts).0.unwrap();
    let part = dir.manifest("t").unwrap().parts[0].clone();
    strata_engine::delete_rows(
        &dir,
        "t",
        &[(part.file.clone(), (0..part.rows).collect())].into(),
    )
    .unwrap();
    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("t").unwrap();
    assert!(manifest.parts.is_empty(), "{:?}", manifest.parts);
    assert!(documents(&dir).is_empty());
    // The keys are free again.
    load(&dir, tmp.path(), &lines[..3], &opts).0.unwrap();
    assert_eq!(documents(&dir).len(), 3);
}

/// One step of a random history of a keyed table.
#[derive(Debug, Clone)]
enum Step {
    /// Documents as (key, sort value), loaded with a policy (replace or ignore).
    Ingest(Vec<(u8, u8)>, bool),
    Merge,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (proptest::collection::vec((0u8..24, 0u8..4), 1..40), any::<bool>())
            .prop_map(|(docs, replace)| Step::Ingest(docs, replace)),
        1 => Just(Step::Merge),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// After any history, the table holds exactly one document per key, the one a model of the
    /// policies says, with small parts (several per ingest) and a sort key that reorders rows.
    #[test]
    fn each_key_has_exactly_the_document_the_policy_says(
        steps in proptest::collection::vec(step(), 1..8)
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path().join("data"));
        let mut model: BTreeMap<u8, (u8, u32)> = BTreeMap::new();
        let mut version = 0u32;
        for step in steps {
            match step {
                Step::Ingest(docs, replace) => {
                    let policy = if replace { OnConflict::Replace } else { OnConflict::Ignore };
                    let mut opts = options("id", KeyType::String, policy);
                    opts.sort_key = Some(vec!["s".to_owned()]);
                    opts.part_target_bytes = 2_000;
                    let lines: Vec<String> = docs
                        .iter()
                        .map(|(k, s)| {
                            version += 1;
                            serde_json::json!({"id": format!("k{k}"), "s": s, "v": version})
                                .to_string()
                        })
                        .collect();
                    let mut v = version - docs.len() as u32;
                    for (k, s) in &docs {
                        v += 1;
                        if replace || !model.contains_key(k) {
                            model.insert(*k, (*s, v));
                        }
                    }
                    load(&dir, tmp.path(), &lines, &opts).0.unwrap();
                }
                Step::Merge => {
                    if dir.table_exists("t").unwrap() {
                        merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
                    }
                }
            }
            if !dir.table_exists("t").unwrap() {
                continue;
            }
            let got: BTreeMap<u8, (u8, u32)> = documents(&dir)
                .iter()
                .map(|d| {
                    let k: u8 = d["id"].as_str().unwrap()[1..].parse().unwrap();
                    (k, (d["s"].as_u64().unwrap() as u8, d["v"].as_u64().unwrap() as u32))
                })
                .collect();
            prop_assert_eq!(documents(&dir).len(), got.len(), "a key is live twice");
            prop_assert_eq!(&got, &model);
        }
    }
}
