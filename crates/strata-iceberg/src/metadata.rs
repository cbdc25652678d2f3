//! Iceberg table metadata (format version 2): the JSON file readers start from, the version hint
//! that points Hadoop-style readers at it, and reading back the previous version.
//!
//! Only what Strata writes is modelled: one schema, the unpartitioned spec, the unsorted order,
//! one snapshot. The metadata of a table is Strata's alone; another engine committing to it is
//! not supported (its files would be overwritten by the next publication).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::IcebergError;
use crate::schema::NAME_MAPPING_PROPERTY;

/// The file in `metadata/` naming the current version, as Hadoop tables and DuckDB read it.
pub const VERSION_HINT_FILE: &str = "version-hint.text";

/// The metadata file of `version` inside `metadata/`.
pub fn metadata_file(version: u64) -> String {
    format!("v{version}.metadata.json")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    pub table_uuid: String,
    pub location: String,
    pub last_sequence_number: i64,
    pub last_updated_ms: i64,
    pub last_column_id: i32,
    pub current_schema_id: i32,
    pub schemas: Vec<Schema>,
    pub default_spec_id: i32,
    pub partition_specs: Vec<PartitionSpec>,
    pub last_partition_id: i32,
    pub default_sort_order_id: i32,
    pub sort_orders: Vec<SortOrder>,
    pub properties: BTreeMap<String, String>,
    pub current_snapshot_id: i64,
    pub refs: BTreeMap<String, SnapshotRef>,
    pub snapshots: Vec<Snapshot>,
    pub snapshot_log: Vec<SnapshotLogEntry>,
    pub metadata_log: Vec<Value>,
}

impl TableMetadata {
    pub fn current_schema(&self) -> Option<&Schema> {
        self.schemas
            .iter()
            .find(|s| s.schema_id == self.current_schema_id)
    }

    /// The name mapping in the table's properties (empty when absent or unreadable: it is only
    /// a source of ids to keep, never of data).
    pub fn name_mapping(&self) -> Vec<NameMappingEntry> {
        self.properties
            .get(NAME_MAPPING_PROPERTY)
            .and_then(|text| serde_json::from_str::<Vec<NameMappingEntry>>(text).ok())
            .map(flatten)
            .unwrap_or_default()
    }

    /// Reads the current metadata of the Iceberg table in `metadata_dir`, `None` when none was
    /// ever published there.
    pub fn load_current(metadata_dir: &Path) -> Result<Option<TableMetadata>, IcebergError> {
        let hint = metadata_dir.join(VERSION_HINT_FILE);
        let text = match std::fs::read_to_string(&hint) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IcebergError::io(&hint, e)),
        };
        let version: u64 = text
            .trim()
            .parse()
            .map_err(|_| IcebergError::PreviousMetadata {
                path: hint.clone(),
                message: format!("{:?} is not a version number", text.trim()),
            })?;
        let path = metadata_dir.join(metadata_file(version));
        let bytes = std::fs::read(&path).map_err(|e| IcebergError::PreviousMetadata {
            path: path.clone(),
            message: e.to_string(),
        })?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| IcebergError::PreviousMetadata {
                path,
                message: e.to_string(),
            })
    }
}

/// Top-level entries and their children, each on its own (ids are unique across all levels).
fn flatten(entries: Vec<NameMappingEntry>) -> Vec<NameMappingEntry> {
    let mut out = Vec::new();
    let mut stack = entries;
    while let Some(mut entry) = stack.pop() {
        stack.append(&mut entry.fields);
        out.push(entry);
    }
    out
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Schema {
    #[serde(rename = "type")]
    pub schema_type: String,
    pub schema_id: i32,
    pub fields: Vec<SchemaField>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaField {
    pub id: i32,
    pub name: String,
    pub required: bool,
    /// A primitive type's name, or a nested type's object (the remainder's `map`).
    #[serde(rename = "type")]
    pub field_type: Value,
}

/// One entry of Iceberg's name mapping: the names a column may have in a data file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NameMappingEntry {
    pub field_id: i32,
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<NameMappingEntry>,
}

impl NameMappingEntry {
    pub fn leaf(field_id: i32, names: &[&str]) -> NameMappingEntry {
        NameMappingEntry {
            field_id,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            fields: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SortOrder {
    pub order_id: i32,
    pub fields: Vec<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotRef {
    pub snapshot_id: i64,
    #[serde(rename = "type")]
    pub ref_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    pub summary: BTreeMap<String, String>,
    pub schema_id: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    pub timestamp_ms: i64,
    pub snapshot_id: i64,
}
