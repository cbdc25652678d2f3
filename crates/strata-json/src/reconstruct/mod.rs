//! Reconstruction: typed columns + remainder back into JSON documents or sub-documents.
//!
//! A part's layout is read from its Arrow schema alone (each typed column carries its
//! [`Kind`] in field metadata), so any projection of a part that keeps the columns under a
//! path and the remainder can rebuild the value at that path exactly.
//!
//! This module rebuilds values (`serde_json::Value`, for any prefix); [`text`] writes whole
//! documents as JSON text straight from the columns, the same bytes those values print as.

use std::str::FromStr;

use arrow::array::{Array, AsArray, MapArray, StringArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use serde_json::{Map, Number, Value};

use crate::error::JsonError;
use crate::kind::Kind;
use crate::path::JsonPath;
use crate::{KIND_METADATA_KEY, REMAINDER_COLUMN};

mod text;
pub use text::DocumentWriter;

/// One typed column of a part: its name, the JSON path it holds and the kind of its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutColumn {
    pub name: String,
    pub path: JsonPath,
    pub kind: Kind,
}

/// Which batch columns hold which paths.
#[derive(Debug, Clone, Default)]
pub struct PartLayout {
    /// Typed columns and their index in the schema.
    pub columns: Vec<(LayoutColumn, usize)>,
    /// Index of the remainder column, when present in the schema.
    pub remainder: Option<usize>,
}

impl PartLayout {
    /// Reads the layout from a part schema (or a projection of one). Fields that are neither
    /// typed columns nor the remainder are ignored.
    pub fn from_schema(schema: &Schema) -> Result<Self, JsonError> {
        let mut layout = PartLayout::default();
        for (index, field) in schema.fields().iter().enumerate() {
            if field.name() == REMAINDER_COLUMN {
                layout.remainder = Some(index);
                continue;
            }
            let Some(kind) = field.metadata().get(KIND_METADATA_KEY) else {
                continue;
            };
            let kind = Kind::from_str(kind).map_err(|message| JsonError::Layout {
                column: field.name().clone(),
                message,
            })?;
            layout.columns.push((
                LayoutColumn {
                    name: field.name().clone(),
                    path: JsonPath::decode(field.name()),
                    kind,
                },
                index,
            ));
        }
        Ok(layout)
    }
}

/// Parses stored JSON text (remainder values, `Json` columns) without a recursion limit; the
/// text was produced from a document that passed the depth check on ingest.
pub fn parse_stored(text: &str, path: &str) -> Result<Value, JsonError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    serde::Deserialize::deserialize(&mut deserializer).map_err(|e: serde_json::Error| {
        JsonError::StoredJson {
            path: path.to_owned(),
            message: e.to_string(),
        }
    })
}

/// Whether stored JSON text is one well-formed JSON value, checked as [`parse_stored`] parses
/// but without building the value.
pub fn is_well_formed_stored(text: &str) -> bool {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut deserializer).is_ok()
        && deserializer.end().is_ok()
}

/// The JSON value of row `row` of a typed column, or None when the row has no value there.
pub fn column_value(
    array: &dyn Array,
    column: &LayoutColumn,
    row: usize,
) -> Result<Option<Value>, JsonError> {
    if array.is_null(row) {
        return Ok(None);
    }
    let wrong_type = || JsonError::Layout {
        column: column.name.clone(),
        message: format!("kind {} stored as {}", column.kind, array.data_type()),
    };
    let value = match column.kind {
        Kind::Int => Value::Number(
            array
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(wrong_type)?
                .value(row)
                .into(),
        ),
        Kind::Float => {
            let f = array
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(wrong_type)?
                .value(row);
            Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        Kind::Bool => Value::Bool(array.as_boolean_opt().ok_or_else(wrong_type)?.value(row)),
        Kind::String => Value::String(string_value(array, row).ok_or_else(wrong_type)?.to_owned()),
        Kind::Number => {
            let text = string_value(array, row).ok_or_else(wrong_type)?;
            Value::Number(Number::from_str(text).map_err(|e| JsonError::StoredJson {
                path: column.name.clone(),
                message: e.to_string(),
            })?)
        }
        Kind::Json => parse_stored(
            string_value(array, row).ok_or_else(wrong_type)?,
            &column.name,
        )?,
        Kind::Null => Value::Null,
    };
    Ok(Some(value))
}

pub(crate) fn string_value(array: &dyn Array, row: usize) -> Option<&str> {
    match array.data_type() {
        DataType::Utf8 => array
            .as_any()
            .downcast_ref::<StringArray>()
            .map(|a| a.value(row)),
        DataType::Utf8View => Some(array.as_string_view_opt()?.value(row)),
        DataType::LargeUtf8 => Some(array.as_string_opt::<i64>()?.value(row)),
        _ => None,
    }
}

/// Rebuilds, for every row of `batch`, the value at `prefix` (the empty path = whole document).
///
/// Returns None for rows where nothing is stored at or under `prefix`; for the empty prefix every
/// row yields an object (possibly `{}`).
pub fn reconstruct(
    batch: &RecordBatch,
    prefix: &JsonPath,
) -> Result<Vec<Option<Value>>, JsonError> {
    let layout = PartLayout::from_schema(batch.schema_ref())?;
    let values = ValueBuilder::with_layout(batch, &layout, prefix)?;
    (0..batch.num_rows()).map(|row| values.row(row)).collect()
}

/// What rebuilding the values at one prefix needs of a batch, found once for all its rows.
pub(crate) struct ValueBuilder<'a> {
    prefix: &'a JsonPath,
    /// The typed columns at or under the prefix, in schema order.
    relevant: Vec<(&'a LayoutColumn, &'a dyn Array)>,
    remainder: Option<&'a MapArray>,
}

impl<'a> ValueBuilder<'a> {
    /// `layout` is `batch`'s layout; the columns it names are looked up in `batch`.
    pub(crate) fn with_layout(
        batch: &'a RecordBatch,
        layout: &'a PartLayout,
        prefix: &'a JsonPath,
    ) -> Result<Self, JsonError> {
        let relevant = layout
            .columns
            .iter()
            .filter(|(c, _)| c.path == *prefix || prefix.is_strict_prefix_of(&c.path))
            .map(|(c, index)| (c, batch.column(*index).as_ref()))
            .collect();
        Ok(ValueBuilder {
            prefix,
            relevant,
            remainder: remainder_of(batch, layout)?,
        })
    }

    /// The value at the prefix in row `row`: None when nothing is stored at or under it (the
    /// whole document, the empty prefix, is always an object).
    pub(crate) fn row(&self, row: usize) -> Result<Option<Value>, JsonError> {
        let prefix = self.prefix;
        let depth = prefix.segments().len();
        let mut here: Option<Value> = None;
        let mut members = Map::new();
        for (column, array) in &self.relevant {
            if let Some(value) = column_value(*array, column, row)? {
                place(
                    &mut here,
                    &mut members,
                    &column.path.segments()[depth..],
                    value,
                    &column.name,
                )?;
            }
        }
        if let Some(map) = self.remainder
            && !map.is_null(row)
        {
            let entries = map.value(row);
            let keys = entries.column(0).as_string::<i32>();
            let values = entries.column(1).as_string::<i32>();
            for i in 0..entries.len() {
                let path = JsonPath::decode(keys.value(i));
                if path == *prefix || prefix.is_strict_prefix_of(&path) {
                    let value = parse_stored(values.value(i), keys.value(i))?;
                    place(
                        &mut here,
                        &mut members,
                        &path.segments()[depth..],
                        value,
                        keys.value(i),
                    )?;
                }
            }
        }
        Ok(match here {
            Some(value) => Some(value),
            None if !members.is_empty() || depth == 0 => Some(Value::Object(members)),
            None => None,
        })
    }
}

/// The remainder column of `batch`, when its layout has one.
fn remainder_of<'a>(
    batch: &'a RecordBatch,
    layout: &PartLayout,
) -> Result<Option<&'a MapArray>, JsonError> {
    match layout.remainder {
        Some(index) => Ok(Some(batch.column(index).as_map_opt().ok_or_else(|| {
            JsonError::Layout {
                column: REMAINDER_COLUMN.into(),
                message: "remainder is not a map".into(),
            }
        })?)),
        None => Ok(None),
    }
}

/// Puts `value` at `relative` below the prefix: an empty `relative` is the prefix itself.
fn place(
    here: &mut Option<Value>,
    members: &mut Map<String, Value>,
    relative: &[String],
    value: Value,
    name: &str,
) -> Result<(), JsonError> {
    let Some((last, parents)) = relative.split_last() else {
        *here = Some(value);
        return Ok(());
    };
    let mut object = members;
    for key in parents {
        let entry = object
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        object = match entry {
            Value::Object(inner) => inner,
            _ => {
                return Err(JsonError::Layout {
                    column: name.to_owned(),
                    message: format!("key {key:?} holds both a value and an object"),
                });
            }
        };
    }
    object.insert(last.clone(), value);
    Ok(())
}
