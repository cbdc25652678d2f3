//! Whole documents written as JSON text straight from a batch's columns, without building
//! `serde_json::Value`s first.
//!
//! Invariant: a row's text is byte for byte `serde_json::to_string` of the document
//! [`reconstruct`](super::reconstruct) rebuilds for it — compact, every object's keys in the
//! order of serde_json's map (by bytes) — so a query, an export and a point read give the same
//! text whichever way the document was built. The columns are put in that key order once per
//! batch (a document's keys are the lexicographic order of its paths' segments, and a path's
//! descendants follow it directly in that order); only a row with remainder entries is sorted
//! again. A row whose leaves collide — one path twice, or a value and an object at one key, which
//! no part the shredder writes holds in one row — is rebuilt as a value instead, since the value
//! route defines what such a row reads as.

use arrow::array::{Array, AsArray, MapArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{PartLayout, ValueBuilder, column_value, parse_stored, remainder_of, string_value};
use crate::error::JsonError;
use crate::kind::Kind;
use crate::path::JsonPath;

/// Writes the whole documents of one batch as JSON text.
pub struct DocumentWriter<'a> {
    batch: &'a RecordBatch,
    layout: PartLayout,
    /// Indexes into `layout.columns`, ordered by path: the order their keys are written in.
    ordered: Vec<usize>,
    remainder: Option<&'a MapArray>,
}

/// One value of a row and where it is stored.
struct Leaf<'r> {
    path: &'r [String],
    source: Source<'r>,
}

enum Source<'r> {
    /// Index into the layout's columns.
    Column(usize),
    /// A remainder entry: its stored JSON text and encoded path.
    Stored { text: &'r str, key: &'r str },
}

impl<'a> DocumentWriter<'a> {
    pub fn new(batch: &'a RecordBatch) -> Result<Self, JsonError> {
        let layout = PartLayout::from_schema(batch.schema_ref())?;
        let remainder = remainder_of(batch, &layout)?;
        let mut ordered: Vec<usize> = (0..layout.columns.len()).collect();
        ordered.sort_by(|&a, &b| {
            let path = |i: usize| layout.columns[i].0.path.segments();
            path(a).cmp(path(b))
        });
        Ok(DocumentWriter {
            batch,
            layout,
            ordered,
            remainder,
        })
    }

    /// Appends row `row`'s document to `out`.
    pub fn write(&self, row: usize, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let stored = self.stored_entries(row)?;
        let mut leaves: Vec<Leaf<'_>> = Vec::with_capacity(self.ordered.len() + stored.len());
        for &i in &self.ordered {
            let (column, index) = &self.layout.columns[i];
            if !self.batch.column(*index).is_null(row) {
                leaves.push(Leaf {
                    path: column.path.segments(),
                    source: Source::Column(i),
                });
            }
        }
        if !stored.is_empty() {
            leaves.extend(stored.iter().map(|(path, text, key)| Leaf {
                path: path.segments(),
                source: Source::Stored { text, key },
            }));
            leaves.sort_by(|a, b| a.path.cmp(b.path));
        }
        let start = out.len();
        if !self.write_leaves(&leaves, row, out)? {
            out.truncate(start);
            let root = JsonPath::default();
            let value = ValueBuilder::with_layout(self.batch, &self.layout, &root)?
                .row(row)?
                .unwrap_or_else(|| Value::Object(Map::new()));
            serialize(out, &value, "")?;
        }
        Ok(())
    }

    /// The row's remainder entries: decoded path, stored text, encoded path.
    fn stored_entries(&self, row: usize) -> Result<Vec<(JsonPath, &'a str, &'a str)>, JsonError> {
        let Some(map) = self.remainder else {
            return Ok(Vec::new());
        };
        if map.is_null(row) {
            return Ok(Vec::new());
        }
        let not_text = || JsonError::Layout {
            column: crate::REMAINDER_COLUMN.into(),
            message: "remainder keys or values are not text".into(),
        };
        let keys = map.keys().as_string_opt::<i32>().ok_or_else(not_text)?;
        let values = map.values().as_string_opt::<i32>().ok_or_else(not_text)?;
        let offsets = map.value_offsets();
        let (Some(&from), Some(&to)) = (offsets.get(row), offsets.get(row + 1)) else {
            return Ok(Vec::new());
        };
        Ok((from as usize..to as usize)
            .map(|i| {
                (
                    JsonPath::decode(keys.value(i)),
                    values.value(i),
                    keys.value(i),
                )
            })
            .collect())
    }

    /// Writes the document of `leaves` (in key order); false, with `out` partly written, when
    /// two leaves collide.
    fn write_leaves(
        &self,
        leaves: &[Leaf<'_>],
        row: usize,
        out: &mut Vec<u8>,
    ) -> Result<bool, JsonError> {
        out.push(b'{');
        // Keys of the objects open below the document, outermost first.
        let mut open: Vec<&str> = Vec::new();
        // Whether the innermost open object has no member yet.
        let mut empty = true;
        let mut previous: Option<&[String]> = None;
        for leaf in leaves {
            let Some((last, parents)) = leaf.path.split_last() else {
                return Ok(false);
            };
            if previous.is_some_and(|p| leaf.path.starts_with(p)) {
                return Ok(false);
            }
            let common = open
                .iter()
                .zip(parents)
                .take_while(|(open, parent)| **open == parent.as_str())
                .count();
            while open.len() > common {
                open.pop();
                out.push(b'}');
                empty = false;
            }
            for key in &parents[common..] {
                write_key(out, key, empty)?;
                out.push(b'{');
                open.push(key);
                empty = true;
            }
            write_key(out, last, empty)?;
            self.write_value(&leaf.source, row, out)?;
            empty = false;
            previous = Some(leaf.path);
        }
        out.extend(std::iter::repeat_n(b'}', open.len() + 1));
        Ok(true)
    }

    fn write_value(
        &self,
        source: &Source<'_>,
        row: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), JsonError> {
        let (column, index) = match source {
            Source::Column(i) => &self.layout.columns[*i],
            Source::Stored { text, key } => {
                return serialize(out, &parse_stored(text, key)?, key);
            }
        };
        let array = self.batch.column(*index).as_ref();
        // The common kinds directly; the others as the value route builds them.
        match column.kind {
            Kind::String => {
                if let Some(text) = string_value(array, row) {
                    return escaped(out, text, &column.name);
                }
            }
            Kind::Int => {
                if let Some(ints) = array.as_primitive_opt::<Int64Type>() {
                    return serialize(out, &ints.value(row), &column.name);
                }
            }
            Kind::Bool => {
                if let Some(bools) = array.as_boolean_opt() {
                    out.extend_from_slice(if bools.value(row) { b"true" } else { b"false" });
                    return Ok(());
                }
            }
            _ => {}
        }
        match column_value(array, column, row)? {
            Some(value) => serialize(out, &value, &column.name),
            None => serialize(out, &Value::Null, &column.name),
        }
    }
}

fn write_key(out: &mut Vec<u8>, key: &str, first: bool) -> Result<(), JsonError> {
    if !first {
        out.push(b',');
    }
    escaped(out, key, key)?;
    out.push(b':');
    Ok(())
}

fn escaped(out: &mut Vec<u8>, text: &str, path: &str) -> Result<(), JsonError> {
    serialize(out, text, path)
}

fn serialize<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
    path: &str,
) -> Result<(), JsonError> {
    serde_json::to_writer(out, value).map_err(|e| JsonError::Layout {
        column: path.to_owned(),
        message: format!("writing JSON text: {e}"),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::KIND_METADATA_KEY;
    use crate::reconstruct::reconstruct;

    fn column(path: &[&str], kind: &str, data_type: DataType) -> Field {
        let path = JsonPath::new(path.iter().map(|s| s.to_string()).collect());
        Field::new(path.encode(), data_type, true).with_metadata(HashMap::from([(
            KIND_METADATA_KEY.to_owned(),
            kind.to_owned(),
        )]))
    }

    fn written(batch: &RecordBatch) -> Vec<String> {
        let writer = DocumentWriter::new(batch).unwrap();
        (0..batch.num_rows())
            .map(|row| {
                let mut out = Vec::new();
                writer.write(row, &mut out).unwrap();
                String::from_utf8(out).unwrap()
            })
            .collect()
    }

    #[test]
    fn nested_paths_become_objects_in_key_order() {
        let schema = Schema::new(vec![
            column(&["b"], "string", DataType::Utf8),
            column(&["a", "y"], "int", DataType::Int64),
            column(&["a b"], "int", DataType::Int64),
            column(&["a", "x"], "string", DataType::Utf8),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("q\"\n"), None])),
            Arc::new(Int64Array::from(vec![Some(-7), None])),
            Arc::new(Int64Array::from(vec![Some(1), Some(2)])),
            Arc::new(StringArray::from(vec![Some("é"), None])),
        ];
        let batch = RecordBatch::try_new(Arc::new(schema), columns).unwrap();
        assert_eq!(
            written(&batch),
            [
                r#"{"a":{"x":"é","y":-7},"a b":1,"b":"q\"\n"}"#,
                r#"{"a b":2}"#
            ]
        );
    }

    /// A value and an object at one key in one row (no part the shredder writes has that): the
    /// row reads as the value route rebuilds it, here the object overwritten by the later column.
    #[test]
    fn colliding_paths_read_as_the_value_route_rebuilds_them() {
        let schema = Schema::new(vec![
            column(&["a", "b"], "int", DataType::Int64),
            column(&["a"], "int", DataType::Int64),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(2), Some(3)])),
            Arc::new(Int64Array::from(vec![Some(1), None])),
        ];
        let batch = RecordBatch::try_new(Arc::new(schema), columns).unwrap();
        let rebuilt: Vec<String> = reconstruct(&batch, &JsonPath::default())
            .unwrap()
            .into_iter()
            .map(|d| d.unwrap().to_string())
            .collect();
        assert_eq!(rebuilt, [r#"{"a":1}"#, r#"{"a":{"b":3}}"#]);
        assert_eq!(written(&batch), rebuilt);
    }
}
