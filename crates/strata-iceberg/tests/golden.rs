//! Golden file of the Iceberg publication (docs/format.md, "Iceberg metadata"): the keyed golden
//! table of format version 3 (two parts, one with a deletion vector; tests/golden/v3-keys/gh)
//! published at a fixed time must give exactly `tests/golden/iceberg/gh.json` — the table
//! metadata, the version hint, every Avro file's header (schema with field ids, metadata keys)
//! and records, and the position delete file's rows — with the table's random uuid and its
//! absolute location replaced by placeholders. Set STRATA_UPDATE_GOLDEN=1 to rewrite it after an
//! intended, documented change.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};

use apache_avro::Reader;
use apache_avro::types::Value as Avro;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::RowAccessor;
use serde_json::{Map, Value, json};
use strata_format::Manifest;

const PUBLISHED_AT_MS: i64 = 1_764_115_200_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn avro_json(value: &Avro) -> Value {
    match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => json!(b),
        Avro::Int(i) => json!(i),
        Avro::Long(l) => json!(l),
        Avro::String(s) => json!(s),
        Avro::Bytes(bytes) => json!(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        Avro::Union(_, inner) => avro_json(inner),
        Avro::Array(items) => Value::Array(items.iter().map(avro_json).collect()),
        Avro::Record(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), avro_json(v)))
                .collect(),
        ),
        other => panic!("unexpected Avro value {other:?}"),
    }
}

/// An Avro file as JSON: its schema, user metadata (JSON-valued keys parsed) and records.
fn avro_file(path: &Path) -> Value {
    let reader = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    let schema: Value = serde_json::to_value(reader.writer_schema()).unwrap();
    let mut metadata = Map::new();
    for (key, bytes) in reader.user_metadata() {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        metadata.insert(key.clone(), value);
    }
    let records: Vec<Value> = reader.map(|r| avro_json(&r.unwrap())).collect();
    json!({"schema": schema, "metadata": metadata, "records": records})
}

fn position_deletes(path: &Path) -> Value {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let ids: Vec<i32> = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.self_type().get_basic_info().id())
        .collect();
    let rows: Vec<Value> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            json!([row.get_string(0).unwrap(), row.get_long(1).unwrap()])
        })
        .collect();
    json!({"field_ids": ids, "rows": rows})
}

/// Replaces `from` by `to` in every string of `value` (and in JSON held inside strings).
fn replace_everywhere(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) => *s = s.replace(from, to),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| replace_everywhere(v, from, to)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| replace_everywhere(v, from, to)),
        _ => {}
    }
}

/// Sizes of files that hold the table's absolute location (the manifests, the position delete
/// file) vary with it once compressed: each is checked against the file and then replaced by a
/// placeholder. The table schema each manifest carries is checked against the metadata's and
/// then elided, so the golden file holds it once.
fn normalize_sizes(files: &mut Map<String, Value>, metadata_dir: &Path) {
    let size_of = |location: &Value| -> u64 {
        let name = location.as_str().unwrap().rsplit('/').next().unwrap();
        std::fs::metadata(metadata_dir.join(name)).unwrap().len()
    };
    let metadata_schema = files
        .iter()
        .find(|(name, _)| name.ends_with(".metadata.json"))
        .map(|(_, m)| m["schemas"][0].clone())
        .unwrap();
    for (name, file) in files.iter_mut() {
        if !name.ends_with(".avro") {
            continue;
        }
        if let Some(schema) = file["metadata"].get_mut("schema") {
            assert_eq!(*schema, metadata_schema, "{name}: the table schema");
            *schema = json!("<the table schema of the metadata file>");
        }
        for record in file["records"].as_array_mut().unwrap() {
            if let Some(length) = record.get_mut("manifest_length") {
                assert_eq!(length.as_u64().unwrap(), size_of(&record["manifest_path"]));
                record["manifest_length"] = json!("<its size>");
            } else if record["data_file"]["content"] == 1 {
                let data_file = &mut record["data_file"];
                let size = size_of(&data_file["file_path"]);
                assert_eq!(data_file["file_size_in_bytes"].as_u64().unwrap(), size);
                data_file["file_size_in_bytes"] = json!("<its size>");
            }
        }
    }
}

#[test]
fn the_keyed_golden_table_publishes_the_golden_iceberg_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let table_dir = tmp.path().join("gh");
    copy_dir(&repo().join("tests/golden/v3-keys/gh"), &table_dir);
    let manifest = Manifest::load(&table_dir).unwrap().unwrap();
    let published = strata_iceberg::publish_at(&table_dir, &manifest, PUBLISHED_AT_MS).unwrap();
    assert_eq!((published.data_files, published.delete_files), (2, 1));

    let metadata_dir = table_dir.join("metadata");
    let mut names: Vec<String> = std::fs::read_dir(&metadata_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut files = Map::new();
    for name in &names {
        let path = metadata_dir.join(name);
        let value = if name.ends_with(".avro") {
            avro_file(&path)
        } else if name.ends_with(".parquet") {
            position_deletes(&path)
        } else if name.ends_with(".json") {
            let mut metadata: Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            metadata["table-uuid"] = json!("<random uuid>");
            metadata
        } else {
            json!(std::fs::read_to_string(&path).unwrap())
        };
        files.insert(name.clone(), value);
    }
    normalize_sizes(&mut files, &metadata_dir);
    let mut actual = Value::Object(files);
    let location = format!(
        "file://{}",
        std::fs::canonicalize(&table_dir).unwrap().display()
    );
    replace_everywhere(&mut actual, &location, "file://<table directory>");
    let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";

    let golden = repo().join("tests/golden/iceberg/gh.json");
    if std::env::var_os("STRATA_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (STRATA_UPDATE_GOLDEN=1 writes it)",
            golden.display()
        )
    });
    assert!(
        text == expected,
        "the publication differs from {}; if the change is intended and documented, rerun with \
         STRATA_UPDATE_GOLDEN=1:\n{text}",
        golden.display()
    );
}
