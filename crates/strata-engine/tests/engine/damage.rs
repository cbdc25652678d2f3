//! Damaged tables (issue 11, items 4 and 5): flipped bytes in a part and hand-edited manifests
//! are errors that name the table and part in export, merges, `check` and `tables`; the healthy
//! tables of the data directory stay listed and readable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{
    DataDir, IngestOptions, MergeOptions, check_table, export_table, ingest, merge_parts,
};
use strata_json::run_with_deep_stack;

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/jetstream_sample.ndjson")
}

fn load(dir: &DataDir, table: &str, sort_key: Option<&str>) {
    let dir = dir.clone();
    let table = table.to_owned();
    let sort_key = sort_key.map(|k| k.split(',').map(String::from).collect());
    run_with_deep_stack(move || {
        ingest(
            &dir,
            &table,
            &[Input::File(sample())],
            &IngestOptions {
                sort_key,
                auto_merge: false,
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

fn export(dir: &DataDir, table: &str) -> Result<String, String> {
    let dir = dir.clone();
    let table = table.to_owned();
    run_with_deep_stack(move || {
        let mut out = Vec::new();
        export_table(&dir, &table, &mut out)
            .map(|_| String::from_utf8(out).unwrap())
            .map_err(|e| e.to_string())
    })
}

/// A data directory with the sample in `t` (sort key, so key runs) and in `healthy`.
fn setup() -> (tempfile::TempDir, DataDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    load(&dir, "t", Some("kind,did"));
    load(&dir, "healthy", None);
    (tmp, dir)
}

fn part_file(dir: &DataDir, table: &str) -> (String, PathBuf) {
    let manifest = dir.manifest(table).unwrap();
    let file = manifest.parts[0].file.clone();
    let path = dir.root().join(table).join("parts").join(&file);
    (file, path)
}

fn edit_manifest(dir: &DataDir, table: &str, edit: impl FnOnce(&mut Value)) {
    let path = dir.root().join(table).join("manifest.json");
    let mut value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
}

/// `tables` lists every table: `t` with an error containing each of `needles`, `healthy` fine.
fn assert_listed_as_damaged(dir: &DataDir, needles: &[&str]) {
    let tables = dir.tables().unwrap();
    let names: Vec<&str> = tables.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["healthy", "t"]);
    assert!(tables[0].1.is_ok(), "{:?}", tables[0].1);
    let message = tables[1]
        .1
        .as_ref()
        .expect_err("damage not reported")
        .to_string();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    assert!(
        message.contains("/t/manifest.json"),
        "table not named: {message}"
    );
    assert!(export(dir, "healthy").is_ok());
    let check = check_table(dir, "t").unwrap();
    assert!(check.is_damaged(), "check missed it: {check:?}");
    assert!(!check_table(dir, "healthy").unwrap().is_damaged());
}

#[test]
fn flipped_bytes_fail_export_merge_and_check_naming_the_part() {
    let (_tmp, dir) = setup();
    load(&dir, "t", None); // a second part, so that `optimize` has something to merge
    let expected = export(&dir, "t").unwrap();
    let (file, path) = part_file(&dir, "t");
    let clean = std::fs::read(&path).unwrap();
    let len = clean.len();
    for offset in [len / 5, len / 2, 4 * len / 5, len - 100] {
        let mut bytes = clean.clone();
        for b in &mut bytes[offset..offset + 4] {
            *b ^= 0xa5;
        }
        std::fs::write(&path, &bytes).unwrap();
        let message = export(&dir, "t").expect_err("damaged part exported");
        assert!(message.contains(&file), "{offset}: {message}");
        let check = check_table(&dir, "t").unwrap();
        assert!(check.is_damaged());
        assert!(!check.parts[0].problems.is_empty());
        assert!(check.parts[1].problems.is_empty(), "{:?}", check.parts[1]);
        let manifest_before = dir.manifest("t").unwrap();
        let merged = run_with_deep_stack({
            let dir = dir.clone();
            move || merge_parts(&dir, "t", &MergeOptions::default()).map_err(|e| e.to_string())
        });
        let message = merged.expect_err("a damaged part was merged");
        assert!(message.contains(&file), "{message}");
        assert_eq!(dir.manifest("t").unwrap(), manifest_before);
    }
    std::fs::write(&path, &clean).unwrap();
    assert_eq!(export(&dir, "t").unwrap(), expected);
    assert!(!check_table(&dir, "t").unwrap().is_damaged());
}

#[test]
fn an_edited_row_count_is_reported() {
    let (_tmp, dir) = setup();
    let (file, _) = part_file(&dir, "t");
    // With key runs, the manifest contradicts itself: found on load.
    edit_manifest(&dir, "t", |m| m["parts"][0]["rows"] = Value::from(151));
    assert_listed_as_damaged(&dir, &[&file, "key runs"]);
    assert!(export(&dir, "t").unwrap_err().contains(&file));
    // Without key runs, the footer contradicts it: found when the part is opened.
    let (file, _) = part_file(&dir, "healthy");
    edit_manifest(&dir, "healthy", |m| {
        m["parts"][0]["rows"] = Value::from(151)
    });
    let message = export(&dir, "healthy").unwrap_err();
    assert!(
        message.contains(&file) && message.contains("rows"),
        "{message}"
    );
    assert!(check_table(&dir, "healthy").unwrap().is_damaged());
}

#[test]
fn a_part_listed_twice_is_reported() {
    let (_tmp, dir) = setup();
    let (file, _) = part_file(&dir, "t");
    edit_manifest(&dir, "t", |m| {
        let part = m["parts"][0].clone();
        m["parts"].as_array_mut().unwrap().push(part);
    });
    assert_listed_as_damaged(&dir, &[&file, "listed twice"]);
    assert!(export(&dir, "t").unwrap_err().contains("listed twice"));
}

#[test]
fn a_missing_part_file_is_reported() {
    let (_tmp, dir) = setup();
    let (file, path) = part_file(&dir, "t");
    std::fs::remove_file(&path).unwrap();
    assert_listed_as_damaged(&dir, &[&file, "missing"]);
}

#[test]
fn a_garbage_manifest_is_reported_and_the_other_tables_still_list() {
    let (_tmp, dir) = setup();
    std::fs::write(
        dir.root().join("t/manifest.json"),
        b"{\"format_version\": 1, garbage",
    )
    .unwrap();
    assert_listed_as_damaged(&dir, &["invalid manifest"]);
    let check = check_table(&dir, "t").unwrap();
    assert!(!check.manifest_problems.is_empty());
}

#[test]
fn checksum_files_survive_later_writes_and_merges() {
    let (_tmp, dir) = setup();
    load(&dir, "t", None);
    run_with_deep_stack({
        let dir = dir.clone();
        move || merge_parts(&dir, "t", &MergeOptions::default()).map_err(|e| e.to_string())
    })
    .unwrap();
    // The next writer collects garbage; the checksum files of listed parts are not garbage.
    load(&dir, "t", None);
    let check = check_table(&dir, "t").unwrap();
    assert!(!check.is_damaged(), "{check:?}");
    let manifest = dir.manifest("t").unwrap();
    for part in &manifest.parts {
        assert!(part.xxh64.is_some());
        let sums = dir
            .root()
            .join("t/parts")
            .join(format!("{}.crc", part.file));
        assert!(sums.exists(), "{} lost its checksum file", part.file);
    }
}

#[test]
fn validation_since_a_valid_manifest_looks_on_disk_only_at_what_changed() {
    let (_tmp, dir) = setup();
    let validated = dir.manifest("t").unwrap();
    let table_dir = dir.root().join("t");
    let (file, path) = part_file(&dir, "t");
    std::fs::remove_file(&path).unwrap();
    // Listed alike by the manifest validated before: its files are not looked at again.
    assert!(
        validated
            .problems_since(&table_dir, Some(&validated))
            .is_empty()
    );
    // Without it, or when the entry changed, the missing file is found.
    let missing = format!("part {file}: file");
    assert!(
        validated
            .problems(&table_dir)
            .iter()
            .any(|p| p.contains(&missing))
    );
    let mut changed = validated.clone();
    std::sync::Arc::make_mut(&mut changed.parts[0]).bytes += 1;
    let problems = changed.problems_since(&table_dir, Some(&validated));
    assert!(
        problems.iter().any(|p| p.contains(&missing)),
        "{problems:?}"
    );
}
