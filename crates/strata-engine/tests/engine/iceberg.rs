//! Tables published as Iceberg (ADR 0021), read back as an Iceberg reader would: the version
//! hint, the metadata file, the Avro manifest list and manifests, the position delete files.
//! Every commit keeps the publication in step; column ids keep their meaning across versions;
//! a path typed differently in two parts is left out of the schema, not misread.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use apache_avro::Reader;
use apache_avro::types::Value as Avro;
use parquet::record::RowAccessor;
use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{
    DataDir, IngestOptions, MergeOptions, SettingChange, delete_rows, ingest, merge_parts,
};

fn add_part(dir: &DataDir, scratch: &Path, name: &str, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    common::add_part_sorted_by_id(dir, scratch, name, &text);
}

fn ids(range: std::ops::Range<u64>) -> Vec<Value> {
    range
        .map(|id| serde_json::json!({"id": id, "name": format!("n{id}")}))
        .collect()
}

fn set_iceberg(dir: &DataDir, on: bool) {
    dir.alter_table(
        "t",
        &[SettingChange {
            name: "iceberg".into(),
            value: on.to_string(),
        }],
    )
    .unwrap();
}

/// The current published metadata, through the version hint as Hadoop-style readers find it.
fn current_metadata(dir: &DataDir) -> Value {
    let metadata = metadata_dir(dir);
    let hint = std::fs::read_to_string(metadata.join("version-hint.text")).unwrap();
    let bytes = std::fs::read(metadata.join(format!("v{}.metadata.json", hint.trim()))).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn metadata_dir(dir: &DataDir) -> PathBuf {
    dir.table_dir("t").unwrap().join("metadata")
}

/// `file:///…` → the local path.
fn local(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap())
}

/// The records of an Avro file, each as field name → value.
fn avro_records(path: &Path) -> Vec<BTreeMap<String, Avro>> {
    let file = std::fs::File::open(path).unwrap();
    Reader::new(file)
        .unwrap()
        .map(|record| match record.unwrap() {
            Avro::Record(fields) => fields.into_iter().collect(),
            other => panic!("not a record: {other:?}"),
        })
        .collect()
}

fn long(value: &Avro) -> i64 {
    match value {
        Avro::Long(v) => *v,
        Avro::Int(v) => i64::from(*v),
        Avro::Union(_, inner) => long(inner),
        other => panic!("not a number: {other:?}"),
    }
}

fn string(value: &Avro) -> String {
    match value {
        Avro::String(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// The data and delete files of the current snapshot: (content, location, record count).
fn listed_files(metadata: &Value) -> Vec<(i64, String, i64)> {
    let snapshot = &metadata["snapshots"][0];
    assert_eq!(snapshot["snapshot-id"], metadata["current-snapshot-id"]);
    let mut files = Vec::new();
    for manifest in avro_records(&local(snapshot["manifest-list"].as_str().unwrap())) {
        let path = local(&string(&manifest["manifest_path"]));
        assert_eq!(
            long(&manifest["manifest_length"]),
            std::fs::metadata(&path).unwrap().len() as i64
        );
        let entries = avro_records(&path);
        assert_eq!(long(&manifest["added_files_count"]), entries.len() as i64);
        for entry in entries {
            assert_eq!(long(&entry["status"]), 1, "every file is listed as added");
            let Avro::Record(data_file) = &entry["data_file"] else {
                panic!("data_file is not a record");
            };
            let field = |name: &str| &data_file.iter().find(|(n, _)| n == name).unwrap().1;
            assert_eq!(long(field("content")), long(&manifest["content"]));
            assert_eq!(string(field("file_format")), "PARQUET");
            files.push((
                long(field("content")),
                string(field("file_path")),
                long(field("record_count")),
            ));
        }
    }
    files.sort();
    files
}

/// Field id → (lower, upper) bound, serialized.
type Bounds = BTreeMap<i32, (Vec<u8>, Vec<u8>)>;

/// Each data file's sort-key bounds, by location.
fn data_file_bounds(metadata: &Value) -> BTreeMap<String, Bounds> {
    let list = local(metadata["snapshots"][0]["manifest-list"].as_str().unwrap());
    let data_manifest = avro_records(&list)
        .into_iter()
        .find(|m| long(&m["content"]) == 0)
        .unwrap();
    let by_id = |value: &Avro| -> BTreeMap<i32, Vec<u8>> {
        let Avro::Union(1, inner) = value else {
            return BTreeMap::new();
        };
        let Avro::Array(items) = inner.as_ref() else {
            panic!("bounds are not an array: {inner:?}");
        };
        items
            .iter()
            .map(|item| match item {
                Avro::Record(kv) => match (&kv[0].1, &kv[1].1) {
                    (Avro::Int(id), Avro::Bytes(bytes)) => (*id, bytes.clone()),
                    other => panic!("not a bound: {other:?}"),
                },
                other => panic!("not a bound: {other:?}"),
            })
            .collect()
    };
    avro_records(&local(&string(&data_manifest["manifest_path"])))
        .into_iter()
        .map(|entry| {
            let Avro::Record(data_file) = &entry["data_file"] else {
                panic!("data_file is not a record");
            };
            let field = |name: &str| &data_file.iter().find(|(n, _)| n == name).unwrap().1;
            let lower = by_id(field("lower_bounds"));
            let upper = by_id(field("upper_bounds"));
            let bounds = lower
                .into_iter()
                .map(|(id, low)| (id, (low, upper[&id].clone())))
                .collect();
            (string(field("file_path")), bounds)
        })
        .collect()
}

fn schema_fields(metadata: &Value) -> Vec<(i64, String, Value)> {
    let schema = metadata["schemas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["schema-id"] == metadata["current-schema-id"])
        .unwrap();
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_i64().unwrap(),
                f["name"].as_str().unwrap().to_owned(),
                f["type"].clone(),
            )
        })
        .collect()
}

fn name_mapping(metadata: &Value) -> Vec<Value> {
    serde_json::from_str(
        metadata["properties"]["schema.name-mapping.default"]
            .as_str()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn every_part_and_every_deleted_row_is_published_with_each_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    add_part(&dir, tmp.path(), "a", &ids(0..100));
    add_part(&dir, tmp.path(), "b", &ids(100..250));
    assert!(!metadata_dir(&dir).exists(), "nothing is published unasked");
    set_iceberg(&dir, true);

    let manifest = dir.manifest("t").unwrap();
    let metadata = current_metadata(&dir);
    assert_eq!(metadata["format-version"], 2);
    assert_eq!(metadata["current-snapshot-id"], manifest.version);
    assert_eq!(metadata["last-sequence-number"], manifest.version);
    let table_dir = std::fs::canonicalize(dir.table_dir("t").unwrap()).unwrap();
    assert_eq!(
        metadata["location"],
        format!("file://{}", table_dir.display())
    );
    let parts_location = format!("file://{}/parts", table_dir.display());
    let mut expected: Vec<(i64, String, i64)> = manifest
        .parts
        .iter()
        .map(|p| (0, format!("{parts_location}/{}", p.file), p.rows as i64))
        .collect();
    expected.sort();
    assert_eq!(listed_files(&metadata), expected);

    let fields = schema_fields(&metadata);
    let names: Vec<&str> = fields.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["id", "name", "__strata_rest"],
        "paths by id, remainder last"
    );
    assert_eq!(fields[0].2, "long");
    assert_eq!(fields[1].2, "string");
    assert_eq!(fields[2].2["type"], "map");
    // Every column a part has is named by the mapping, the remainder's children under both
    // the names Arrow writes and the ones Iceberg readers look up.
    // The sort key's bounds, exact, in Iceberg's single-value serialization (a long: 8 bytes
    // little-endian), so readers skip parts a filter on `id` rules out.
    let id_field = i32::try_from(fields[0].0).unwrap();
    let bounds = data_file_bounds(&metadata);
    for part in &manifest.parts {
        let (low, high) = if part.rows == 100 {
            (0i64, 99i64)
        } else {
            (100, 249)
        };
        let part_bounds = &bounds[&format!("{parts_location}/{}", part.file)];
        assert_eq!(
            part_bounds.keys().copied().collect::<Vec<_>>(),
            [id_field],
            "only sort-key columns"
        );
        assert_eq!(
            part_bounds[&id_field],
            (low.to_le_bytes().to_vec(), high.to_le_bytes().to_vec())
        );
    }
    let mapping = name_mapping(&metadata);
    assert_eq!(mapping.len(), 3);
    assert_eq!(
        mapping[2]["fields"][0]["names"],
        serde_json::json!(["key", "keys"])
    );

    // A deletion: the next commit publishes the vector as a position delete file.
    let first = manifest.parts.iter().find(|p| p.rows == 100).unwrap();
    delete_rows(
        &dir,
        "t",
        &BTreeMap::from([(first.file.clone(), vec![0, 7, 99])]),
    )
    .unwrap();
    let metadata = current_metadata(&dir);
    let files = listed_files(&metadata);
    assert_eq!(files.len(), 3);
    let (content, delete_location, records) = files.last().unwrap().clone();
    assert_eq!((content, records), (1, 3));
    let reader = parquet::file::reader::SerializedFileReader::new(
        std::fs::File::open(local(&delete_location)).unwrap(),
    )
    .unwrap();
    let schema = parquet::file::reader::FileReader::metadata(&reader)
        .file_metadata()
        .schema_descr_ptr();
    let ids: Vec<i32> = schema
        .columns()
        .iter()
        .map(|c| c.self_type().get_basic_info().id())
        .collect();
    assert_eq!(ids, [2147483546, 2147483545], "Iceberg's reserved ids");
    let rows: Vec<(String, i64)> = parquet::file::reader::FileReader::get_row_iter(&reader, None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            (row.get_string(0).unwrap().clone(), row.get_long(1).unwrap())
        })
        .collect();
    let first_location = format!("{parts_location}/{}", first.file);
    assert_eq!(
        rows,
        [0, 7, 99].map(|pos| (first_location.clone(), pos)).to_vec()
    );
    let summary = &metadata["snapshots"][0]["summary"];
    assert_eq!(summary["total-records"], "250");
    assert_eq!(summary["total-position-deletes"], "3");
}

#[test]
fn column_ids_keep_their_meaning_and_conflicting_paths_are_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    add_part(
        &dir,
        tmp.path(),
        "a",
        &[serde_json::json!({"id": 1, "a": 1})],
    );
    set_iceberg(&dir, true);
    let first = current_metadata(&dir);
    let id_of = |metadata: &Value, name: &str| {
        schema_fields(metadata)
            .into_iter()
            .find(|(_, n, _)| n == name)
            .map(|(id, _, _)| id)
    };
    let a_as_long = id_of(&first, "a").unwrap();

    // A second part where `a` is a string and `b` new: `a` has two types, so it leaves the
    // schema (but not the mapping); `id` keeps its id; `b` gets one above every earlier id.
    add_part(
        &dir,
        tmp.path(),
        "b",
        &[serde_json::json!({"id": 2, "a": "x", "b": true})],
    );
    let second = current_metadata(&dir);
    assert_eq!(id_of(&second, "id"), id_of(&first, "id"));
    assert_eq!(id_of(&second, "a"), None);
    let b = id_of(&second, "b").unwrap();
    assert!(b > first["last-column-id"].as_i64().unwrap());
    assert_eq!(second["properties"]["strata.excluded-paths"], r#"["a"]"#);
    let mapped_a = name_mapping(&second)
        .into_iter()
        .find(|e| e["names"] == serde_json::json!(["a"]))
        .unwrap();
    assert!(mapped_a["field-id"].as_i64().unwrap() != a_as_long);
    assert!(
        second["current-schema-id"].as_i64() > first["current-schema-id"].as_i64(),
        "a changed schema gets a new schema id"
    );

    // A merge gives `a` one kind again: it comes back under an id it never had.
    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let merged = current_metadata(&dir);
    let a_again = id_of(&merged, "a").unwrap();
    assert!(a_again != a_as_long && a_again != mapped_a["field-id"].as_i64().unwrap());
    assert_eq!(id_of(&merged, "b"), Some(b));
}

#[test]
fn retired_parts_wait_for_iceberg_readers_and_turning_it_off_removes_the_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    add_part(&dir, tmp.path(), "a", &ids(0..10));
    add_part(&dir, tmp.path(), "b", &ids(10..20));
    set_iceberg(&dir, true);
    let before = dir.manifest("t").unwrap();
    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    // Another commit runs garbage collection; no Strata reader holds a lease, but the merged
    // parts may still be read by an Iceberg reader that planned over the previous version.
    add_part(&dir, tmp.path(), "c", &ids(20..30));
    let parts = dir.table_dir("t").unwrap().join("parts");
    for part in &before.parts {
        assert!(parts.join(&part.file).exists(), "{} was deleted", part.file);
    }
    let metadata = current_metadata(&dir);
    assert_eq!(
        listed_files(&metadata).len(),
        2,
        "the merged part and the new one"
    );
    let older: Vec<String> = std::fs::read_dir(metadata_dir(&dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    assert_eq!(
        older.len(),
        3,
        "the versions of the last three commits: {older:?}"
    );

    set_iceberg(&dir, false);
    assert!(!metadata_dir(&dir).exists());
    // Without Iceberg, the next collection deletes the retired parts at once.
    add_part(&dir, tmp.path(), "d", &ids(30..40));
    add_part(&dir, tmp.path(), "e", &ids(40..50));
    for part in &before.parts {
        assert!(!parts.join(&part.file).exists(), "{} was kept", part.file);
    }
}

#[test]
fn an_ingest_can_create_a_published_table_but_not_publish_an_existing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let path = tmp.path().join("in.ndjson");
    std::fs::write(&path, "{\"id\": 1}\n").unwrap();
    let load = |table: &str, iceberg: bool| {
        let options = IngestOptions {
            iceberg,
            ..Default::default()
        };
        ingest(
            &dir,
            table,
            &[Input::File(path.clone())],
            &options,
            &mut |_| {},
            &mut |_| {},
        )
    };
    load("published", true).unwrap();
    assert!(dir.manifest("published").unwrap().settings.iceberg);
    assert!(
        dir.table_dir("published")
            .unwrap()
            .join("metadata/version-hint.text")
            .exists()
    );
    load("published", false).unwrap();
    load("plain", false).unwrap();
    let e = load("plain", true).unwrap_err().to_string();
    assert!(e.contains("ALTER TABLE plain SET (iceberg"), "{e}");
}

#[test]
fn check_finds_a_stale_or_damaged_publication() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    add_part(&dir, tmp.path(), "a", &ids(0..10));
    set_iceberg(&dir, true);
    let problems = |dir: &DataDir| {
        strata_engine::check_table(dir, "t")
            .unwrap()
            .manifest_problems
    };
    assert_eq!(problems(&dir), Vec::<String>::new());

    // A commit whose publication did not happen (as when it failed): the check says so.
    let mut manifest = dir.manifest("t").unwrap();
    manifest.version += 1;
    manifest.commit(&dir.table_dir("t").unwrap()).unwrap();
    let found = problems(&dir);
    assert!(
        found.iter().any(|p| p.contains("describes version")),
        "{found:?}"
    );
    // The next commit publishes the table again.
    add_part(&dir, tmp.path(), "b", &ids(10..20));
    assert_eq!(problems(&dir), Vec::<String>::new());

    // A manifest of the publication lost or changed.
    let metadata = current_metadata(&dir);
    let list = local(metadata["snapshots"][0]["manifest-list"].as_str().unwrap());
    let data_manifest = local(&string(&avro_records(&list)[0]["manifest_path"]));
    std::fs::write(&data_manifest, b"not avro").unwrap();
    let found = problems(&dir);
    assert!(
        found
            .iter()
            .any(|p| p.contains("bytes, the Iceberg metadata lists")),
        "{found:?}"
    );
}
