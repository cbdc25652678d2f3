//! Iceberg manifests and manifest lists (format version 2) as Avro object container files.
//!
//! A manifest lists data files (the parts) or delete files (position deletes made from deletion
//! vectors); a manifest list lists a snapshot's manifests. Every field carries its Iceberg field
//! id in the Avro schema, which is how readers resolve them. Only required fields and the
//! optional ones Strata knows are written: column statistics are left out (readers then plan
//! without them).

use std::path::Path;

use apache_avro::types::Value as AvroValue;
use apache_avro::{Schema as AvroSchema, Writer};

use crate::error::IcebergError;

const MANIFEST_ENTRY_SCHEMA: &str = r#"{
  "type": "record", "name": "manifest_entry",
  "fields": [
    {"name": "status", "type": "int", "field-id": 0},
    {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
    {"name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3},
    {"name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4},
    {"name": "data_file", "field-id": 2, "type": {
      "type": "record", "name": "r2",
      "fields": [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": []}},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        {"name": "lower_bounds", "field-id": 125, "default": null, "type": ["null", {
          "type": "array", "logicalType": "map",
          "items": {"type": "record", "name": "k126_v127", "fields": [
            {"name": "key", "type": "int", "field-id": 126},
            {"name": "value", "type": "bytes", "field-id": 127}
          ]}
        }]},
        {"name": "upper_bounds", "field-id": 128, "default": null, "type": ["null", {
          "type": "array", "logicalType": "map",
          "items": {"type": "record", "name": "k129_v130", "fields": [
            {"name": "key", "type": "int", "field-id": 129},
            {"name": "value", "type": "bytes", "field-id": 130}
          ]}
        }]}
      ]
    }}
  ]
}"#;

const MANIFEST_FILE_SCHEMA: &str = r#"{
  "type": "record", "name": "manifest_file",
  "fields": [
    {"name": "manifest_path", "type": "string", "field-id": 500},
    {"name": "manifest_length", "type": "long", "field-id": 501},
    {"name": "partition_spec_id", "type": "int", "field-id": 502},
    {"name": "content", "type": "int", "field-id": 517},
    {"name": "sequence_number", "type": "long", "field-id": 515},
    {"name": "min_sequence_number", "type": "long", "field-id": 516},
    {"name": "added_snapshot_id", "type": "long", "field-id": 503},
    {"name": "added_files_count", "type": "int", "field-id": 504},
    {"name": "existing_files_count", "type": "int", "field-id": 505},
    {"name": "deleted_files_count", "type": "int", "field-id": 506},
    {"name": "added_rows_count", "type": "long", "field-id": 512},
    {"name": "existing_rows_count", "type": "long", "field-id": 513},
    {"name": "deleted_rows_count", "type": "long", "field-id": 514}
  ]
}"#;

/// What a manifest lists: Iceberg's `content` of manifests and of the files in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    Data,
    PositionDeletes,
}

impl Content {
    /// The `content` field of a manifest list entry (0 data, 1 deletes).
    fn manifest_code(self) -> i32 {
        match self {
            Content::Data => 0,
            Content::PositionDeletes => 1,
        }
    }

    /// The `content` field of a data file entry (0 data, 1 position deletes).
    fn file_code(self) -> i32 {
        self.manifest_code()
    }

    fn manifest_name(self) -> &'static str {
        match self {
            Content::Data => "data",
            Content::PositionDeletes => "deletes",
        }
    }
}

/// One Parquet file a manifest lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileEntry {
    /// Absolute location (`file:///…`), as readers open it.
    pub location: String,
    pub records: u64,
    pub bytes: u64,
    /// Field id → smallest and largest value in the file, serialized as Iceberg's single values;
    /// readers skip files whose bounds rule a filter out. Only exact bounds are listed.
    pub lower_bounds: Vec<(i32, Vec<u8>)>,
    pub upper_bounds: Vec<(i32, Vec<u8>)>,
}

/// A written manifest, as its manifest list entry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenManifest {
    pub location: String,
    pub length: u64,
    pub content: Content,
    pub files: usize,
    pub rows: u64,
}

/// The snapshot a manifest or manifest list belongs to.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotIds {
    pub snapshot_id: i64,
    pub sequence_number: i64,
}

/// Writes a manifest of `files` (all added by `snapshot`) to `path`, read by readers at
/// `location`. `schema_json` is the table schema the manifest is written against.
pub fn write_manifest(
    path: &Path,
    location: &str,
    content: Content,
    files: &[FileEntry],
    snapshot: SnapshotIds,
    schema_json: &str,
    schema_id: i32,
) -> Result<WrittenManifest, IcebergError> {
    let mut schema = AvroSchema::parse_str(MANIFEST_ENTRY_SCHEMA).map_err(|e| avro(path, e))?;
    mark_arrays_as_maps(&mut schema).map_err(|e| avro(path, e))?;
    let mut writer = new_writer(&schema, path)?;
    for (key, value) in [
        ("schema", schema_json.to_owned()),
        ("schema-id", schema_id.to_string()),
        ("partition-spec", "[]".to_owned()),
        ("partition-spec-id", "0".to_owned()),
        ("format-version", "2".to_owned()),
        ("content", content.manifest_name().to_owned()),
    ] {
        writer
            .add_user_metadata(key.to_owned(), value)
            .map_err(|e| avro(path, e))?;
    }
    for file in files {
        let data_file = AvroValue::Record(vec![
            ("content".into(), AvroValue::Int(content.file_code())),
            ("file_path".into(), AvroValue::String(file.location.clone())),
            ("file_format".into(), AvroValue::String("PARQUET".into())),
            ("partition".into(), AvroValue::Record(Vec::new())),
            (
                "record_count".into(),
                AvroValue::Long(to_long(file.records)),
            ),
            (
                "file_size_in_bytes".into(),
                AvroValue::Long(to_long(file.bytes)),
            ),
            ("lower_bounds".into(), bounds(&file.lower_bounds)),
            ("upper_bounds".into(), bounds(&file.upper_bounds)),
        ]);
        // Status 1 (added) with the sequence numbers left to inherit from the manifest list:
        // each published snapshot lists the whole table (the module docs of `publish`).
        let entry = AvroValue::Record(vec![
            ("status".into(), AvroValue::Int(1)),
            (
                "snapshot_id".into(),
                AvroValue::Union(1, Box::new(AvroValue::Long(snapshot.snapshot_id))),
            ),
            (
                "sequence_number".into(),
                AvroValue::Union(0, Box::new(AvroValue::Null)),
            ),
            (
                "file_sequence_number".into(),
                AvroValue::Union(0, Box::new(AvroValue::Null)),
            ),
            ("data_file".into(), data_file),
        ]);
        writer.append_value(entry).map_err(|e| avro(path, e))?;
    }
    let bytes = writer.into_inner().map_err(|e| avro(path, e))?;
    crate::write_file(path, &bytes)?;
    Ok(WrittenManifest {
        location: location.to_owned(),
        length: bytes.len() as u64,
        content,
        files: files.len(),
        rows: files.iter().map(|f| f.records).sum(),
    })
}

/// Writes the manifest list of `snapshot` to `path`.
pub fn write_manifest_list(
    path: &Path,
    manifests: &[WrittenManifest],
    snapshot: SnapshotIds,
) -> Result<(), IcebergError> {
    let schema = AvroSchema::parse_str(MANIFEST_FILE_SCHEMA).map_err(|e| avro(path, e))?;
    let mut writer = new_writer(&schema, path)?;
    for (key, value) in [
        ("snapshot-id", snapshot.snapshot_id.to_string()),
        ("parent-snapshot-id", "null".to_owned()),
        ("sequence-number", snapshot.sequence_number.to_string()),
        ("format-version", "2".to_owned()),
    ] {
        writer
            .add_user_metadata(key.to_owned(), value)
            .map_err(|e| avro(path, e))?;
    }
    for manifest in manifests {
        let files = i32::try_from(manifest.files).unwrap_or(i32::MAX);
        writer
            .append_value(AvroValue::Record(vec![
                (
                    "manifest_path".into(),
                    AvroValue::String(manifest.location.clone()),
                ),
                (
                    "manifest_length".into(),
                    AvroValue::Long(to_long(manifest.length)),
                ),
                ("partition_spec_id".into(), AvroValue::Int(0)),
                (
                    "content".into(),
                    AvroValue::Int(manifest.content.manifest_code()),
                ),
                (
                    "sequence_number".into(),
                    AvroValue::Long(snapshot.sequence_number),
                ),
                (
                    "min_sequence_number".into(),
                    AvroValue::Long(snapshot.sequence_number),
                ),
                (
                    "added_snapshot_id".into(),
                    AvroValue::Long(snapshot.snapshot_id),
                ),
                ("added_files_count".into(), AvroValue::Int(files)),
                ("existing_files_count".into(), AvroValue::Int(0)),
                ("deleted_files_count".into(), AvroValue::Int(0)),
                (
                    "added_rows_count".into(),
                    AvroValue::Long(to_long(manifest.rows)),
                ),
                ("existing_rows_count".into(), AvroValue::Long(0)),
                ("deleted_rows_count".into(), AvroValue::Long(0)),
            ]))
            .map_err(|e| avro(path, e))?;
    }
    let bytes = writer.into_inner().map_err(|e| avro(path, e))?;
    crate::write_file(path, &bytes)
}

/// An Avro writer with the deflate codec: the one every Iceberg reader knows (a file without a
/// codec entry, which Avro reads as uncompressed, PyIceberg takes for gzip).
fn new_writer<'a>(
    schema: &'a AvroSchema,
    path: &Path,
) -> Result<Writer<'a, Vec<u8>>, IcebergError> {
    Writer::with_codec(
        schema,
        Vec::new(),
        apache_avro::Codec::Deflate(apache_avro::DeflateSettings::default()),
    )
    .map_err(|e| avro(path, e))
}

/// Puts `"logicalType": "map"` back on the schema's arrays, which `apache-avro`'s parser drops
/// (it keeps logical types it knows only): Iceberg readers take an array of key/value records
/// for a map only with it, and refuse the array otherwise. Every array in the manifest schemas
/// here is such a map.
fn mark_arrays_as_maps(schema: &mut AvroSchema) -> apache_avro::AvroResult<()> {
    match schema {
        AvroSchema::Record(record) => {
            for field in &mut record.fields {
                mark_arrays_as_maps(&mut field.schema)?;
            }
        }
        AvroSchema::Union(union) => {
            let mut variants = union.variants().to_vec();
            for variant in &mut variants {
                mark_arrays_as_maps(variant)?;
            }
            *union = apache_avro::schema::UnionSchema::new(variants)?;
        }
        AvroSchema::Array(array) => {
            array.attributes.insert("logicalType".into(), "map".into());
            mark_arrays_as_maps(&mut array.items)?;
        }
        _ => {}
    }
    Ok(())
}

/// A bounds map as Iceberg writes maps with non-string keys in Avro: an array of key/value
/// records (null when empty).
fn bounds(values: &[(i32, Vec<u8>)]) -> AvroValue {
    if values.is_empty() {
        return AvroValue::Union(0, Box::new(AvroValue::Null));
    }
    let items = values
        .iter()
        .map(|(id, bytes)| {
            AvroValue::Record(vec![
                ("key".into(), AvroValue::Int(*id)),
                ("value".into(), AvroValue::Bytes(bytes.clone())),
            ])
        })
        .collect();
    AvroValue::Union(1, Box::new(AvroValue::Array(items)))
}

fn to_long(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn avro(path: &Path, error: impl std::fmt::Display) -> IcebergError {
    IcebergError::avro(path, error)
}
