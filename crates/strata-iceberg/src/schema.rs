//! Which JSON paths become which Iceberg columns, and the field ids they keep from one published
//! version to the next.
//!
//! Every typed column of a part is a flat Parquet column named by its encoded path
//! (`commit.collection`), so the Iceberg schema is flat too: one optional column per path whose
//! typed columns have the same Iceberg type in every part, and `__strata_rest` (the remainder,
//! `map<string, string>` of encoded path → exact JSON text) last. A path stored with kinds of
//! different Iceberg types in different parts (an `int` column in one, a `string` column in
//! another) cannot be one Iceberg column, because readers would meet two physical types under
//! one field: it is left out of the schema (listed in the table property
//! [`EXCLUDED_PATHS_PROPERTY`]) until a merge gives it one kind again. Its values stay readable
//! through Strata.
//!
//! Parts carry no Parquet field ids, so readers resolve columns through the name mapping
//! (`schema.name-mapping.default`), which names every column any part has — excluded ones too,
//! under ids the schema does not hold, because some readers (PyIceberg) refuse a file column
//! the mapping does not name.
//!
//! Invariants: an id never changes meaning. A column keeps its id while its name and type stay;
//! a column whose type changes, or that comes back after being excluded, gets a new id above
//! every id handed out before (`last-column-id`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use strata_format::Manifest;
use strata_json::{Kind, REMAINDER_COLUMN};

use crate::metadata::{NameMappingEntry, SchemaField, TableMetadata};

/// Table property listing (as a JSON array) the paths left out of the schema because their
/// typed columns differ in type between parts.
pub const EXCLUDED_PATHS_PROPERTY: &str = "strata.excluded-paths";
/// Iceberg's table property holding the name mapping, for data files without field ids.
pub const NAME_MAPPING_PROPERTY: &str = "schema.name-mapping.default";

/// Iceberg's primitive types that Strata's typed columns are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IcebergType {
    String,
    Long,
    Double,
    Boolean,
}

impl IcebergType {
    /// The Iceberg type of a typed column of `kind` (`None` for `null`, which is never a column).
    pub fn of(kind: Kind) -> Option<IcebergType> {
        match kind {
            Kind::String | Kind::Number | Kind::Json => Some(IcebergType::String),
            Kind::Int => Some(IcebergType::Long),
            Kind::Float => Some(IcebergType::Double),
            Kind::Bool => Some(IcebergType::Boolean),
            Kind::Null => None,
        }
    }

    /// Iceberg's single-value serialization of `value` as a bound of this type (`None` when the
    /// JSON value is not of the type: no bound is better than a wrong one).
    pub fn bound(self, value: &Value) -> Option<Vec<u8>> {
        match (self, value) {
            (IcebergType::String, Value::String(s)) => Some(s.as_bytes().to_vec()),
            (IcebergType::Long, Value::Number(n)) => n.as_i64().map(|v| v.to_le_bytes().to_vec()),
            (IcebergType::Double, Value::Number(n)) => n.as_f64().map(|v| v.to_le_bytes().to_vec()),
            (IcebergType::Boolean, Value::Bool(b)) => Some(vec![u8::from(*b)]),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IcebergType::String => "string",
            IcebergType::Long => "long",
            IcebergType::Double => "double",
            IcebergType::Boolean => "boolean",
        }
    }
}

/// The ids of the remainder map and its key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RemainderIds {
    map: i32,
    key: i32,
    value: i32,
}

/// The schema of one published version, with its name mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSchema {
    /// The schema's columns in order: paths by ascending id, then the remainder map.
    pub fields: Vec<SchemaField>,
    /// Paths left out because their typed columns differ in type between parts, by name.
    pub excluded: Vec<String>,
    pub name_mapping: Vec<NameMappingEntry>,
    /// The highest id ever handed out, this version's included.
    pub last_column_id: i32,
    /// The schema's path columns by name: id and type.
    pub columns: BTreeMap<String, (i32, IcebergType)>,
}

impl PublishedSchema {
    /// The schema for `manifest`'s parts, keeping the ids of `previous` where their meaning holds.
    pub fn new(manifest: &Manifest, previous: Option<&TableMetadata>) -> PublishedSchema {
        let mut types: BTreeMap<&str, BTreeSet<IcebergType>> = BTreeMap::new();
        for part in &manifest.parts {
            for (path, kind) in &part.columns {
                if let Some(ty) = IcebergType::of(*kind) {
                    types.entry(path.as_str()).or_default().insert(ty);
                }
            }
        }
        let old = OldIds::from(previous);
        let mut next_id = old.last_column_id;
        let mut fresh = || {
            next_id += 1;
            next_id
        };

        let mut columns: Vec<(i32, &str, IcebergType)> = Vec::new();
        let mut excluded: Vec<(i32, &str)> = Vec::new();
        for (path, kinds) in &types {
            let mut kinds = kinds.iter();
            match (kinds.next(), kinds.next()) {
                (Some(&ty), None) => {
                    let id = old.column(path, ty).unwrap_or_else(&mut fresh);
                    columns.push((id, path, ty));
                }
                _ => {
                    let id = old.excluded(path).unwrap_or_else(&mut fresh);
                    excluded.push((id, path));
                }
            }
        }
        let remainder = old.remainder.unwrap_or_else(|| RemainderIds {
            map: fresh(),
            key: fresh(),
            value: fresh(),
        });
        columns.sort_unstable();

        let mut fields: Vec<SchemaField> = columns
            .iter()
            .map(|&(id, name, ty)| SchemaField {
                id,
                name: name.to_owned(),
                required: false,
                field_type: Value::String(ty.name().to_owned()),
            })
            .collect();
        fields.push(SchemaField {
            id: remainder.map,
            name: REMAINDER_COLUMN.to_owned(),
            required: false,
            field_type: json!({
                "type": "map",
                "key-id": remainder.key,
                "key": "string",
                "value-id": remainder.value,
                "value": "string",
                "value-required": false,
            }),
        });

        let mut name_mapping: Vec<NameMappingEntry> = columns
            .iter()
            .map(|&(id, name, _)| (id, name))
            .chain(excluded.iter().copied())
            .map(|(id, name)| NameMappingEntry::leaf(id, &[name]))
            .collect();
        name_mapping.sort_by_key(|entry| entry.field_id);
        // Arrow writes a map's children as `keys`/`values`; Iceberg readers look them up as
        // `key`/`value`. Both names map to the same ids.
        name_mapping.push(NameMappingEntry {
            field_id: remainder.map,
            names: vec![REMAINDER_COLUMN.to_owned()],
            fields: vec![
                NameMappingEntry::leaf(remainder.key, &["key", "keys"]),
                NameMappingEntry::leaf(remainder.value, &["value", "values"]),
            ],
        });

        PublishedSchema {
            columns: columns
                .iter()
                .map(|&(id, name, ty)| (name.to_owned(), (id, ty)))
                .collect(),
            fields,
            excluded: excluded
                .iter()
                .map(|(_, name)| (*name).to_owned())
                .collect(),
            name_mapping,
            last_column_id: next_id,
        }
    }
}

/// What the previous version assigned: ids by (name, type) for schema columns, ids of names the
/// mapping held outside the schema (excluded paths), and the remainder's ids.
#[derive(Default)]
struct OldIds {
    columns: BTreeMap<(String, IcebergType), i32>,
    excluded: BTreeMap<String, i32>,
    remainder: Option<RemainderIds>,
    last_column_id: i32,
}

impl OldIds {
    fn from(previous: Option<&TableMetadata>) -> OldIds {
        let Some(previous) = previous else {
            return OldIds::default();
        };
        let mut ids = OldIds {
            last_column_id: previous.last_column_id,
            ..OldIds::default()
        };
        let mut in_schema = BTreeSet::new();
        if let Some(schema) = previous.current_schema() {
            for field in &schema.fields {
                in_schema.insert(field.id);
                if field.name == REMAINDER_COLUMN {
                    let id = |key: &str| {
                        field
                            .field_type
                            .get(key)
                            .and_then(Value::as_i64)
                            .and_then(|id| i32::try_from(id).ok())
                    };
                    if let (Some(key), Some(value)) = (id("key-id"), id("value-id")) {
                        ids.remainder = Some(RemainderIds {
                            map: field.id,
                            key,
                            value,
                        });
                    }
                    continue;
                }
                let ty = match field.field_type.as_str() {
                    Some("string") => IcebergType::String,
                    Some("long") => IcebergType::Long,
                    Some("double") => IcebergType::Double,
                    Some("boolean") => IcebergType::Boolean,
                    _ => continue,
                };
                ids.columns.insert((field.name.clone(), ty), field.id);
            }
        }
        for entry in previous.name_mapping() {
            if !in_schema.contains(&entry.field_id) {
                for name in entry.names {
                    ids.excluded.insert(name, entry.field_id);
                }
            }
        }
        ids
    }

    fn column(&self, name: &str, ty: IcebergType) -> Option<i32> {
        self.columns.get(&(name.to_owned(), ty)).copied()
    }

    fn excluded(&self, name: &str) -> Option<i32> {
        self.excluded.get(name).copied()
    }
}
