//! Conforming parts to one layout: what a sorted merge of parts needs.
//!
//! Each part chooses its typed columns from its own documents, so two parts may type a path
//! differently, or one may keep it in the remainder. Before their rows can be interleaved into
//! one part, every input batch is rewritten to the merged part's layout ([`merged_layout`]):
//! a value whose (path, kind) has a column there goes into that column, also when it came from
//! the input's remainder; every other value goes to the remainder as its exact JSON text.
//!
//! Invariants, the same as the shredder's (ADR 0002): a value of a typed column's kind is never
//! in the remainder, each row's remainder keys are unique, and no value is lost or changed.
//! Documents are never rebuilt: values move between columns one by one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Float64Builder, Int64Builder, MapArray,
    StringBuilder, new_null_array,
};
use arrow::datatypes::{Float64Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use serde_json::Value;

use crate::error::JsonError;
use crate::kind::{Kind, Leaf, Stored, classify_number, push_json_text, value_kind};
use crate::path::JsonPath;
use crate::reconstruct::{LayoutColumn, PartLayout, parse_stored, string_value};
use crate::shred::{column_field, remainder_builder, remainder_field};

/// How many values one input part holds in one typed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnCount {
    pub name: String,
    pub kind: Kind,
    pub values: u64,
}

/// The typed columns of a part merged from inputs whose columns and value counts are `inputs`,
/// chosen by the shredder's rule over the inputs' typed values: sort-key paths first, then the
/// other paths by value count, each with its most frequent kind, at most `max_columns`.
///
/// Returns None when the inputs type a sort-key path differently: rows sorted by different kinds
/// cannot be interleaved without re-sorting, and the caller must fall back to re-shredding.
pub fn merged_layout(
    inputs: &[ColumnCount],
    sort_key: &[String],
    max_columns: usize,
) -> Option<Vec<LayoutColumn>> {
    let mut counts: BTreeMap<&str, BTreeMap<Kind, u64>> = BTreeMap::new();
    for input in inputs {
        *counts
            .entry(input.name.as_str())
            .or_default()
            .entry(input.kind)
            .or_default() += input.values;
    }
    let dominant = |kinds: &BTreeMap<Kind, u64>| {
        kinds
            .iter()
            .max_by_key(|(kind, count)| (**count, std::cmp::Reverse(kind.index())))
            .map(|(kind, count)| (*kind, *count))
    };
    let column = |name: &str, kind: Kind| LayoutColumn {
        name: name.to_owned(),
        path: JsonPath::decode(name),
        kind,
    };
    let mut chosen = Vec::new();
    for name in sort_key {
        if let Some(kinds) = counts.remove(name.as_str()) {
            if kinds.len() > 1 {
                return None;
            }
            if let Some((kind, _)) = dominant(&kinds) {
                chosen.push(column(name, kind));
            }
        }
    }
    let mut ranked: Vec<(u64, JsonPath, &str, Kind)> = counts
        .iter()
        .filter_map(|(name, kinds)| {
            dominant(kinds).map(|(kind, count)| (count, JsonPath::decode(name), *name, kind))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let room = max_columns.saturating_sub(chosen.len());
    chosen.extend(
        ranked
            .into_iter()
            .take(room)
            .map(|(_, _, name, kind)| column(name, kind)),
    );
    Some(chosen)
}

/// The remainder paths of a merged part: the inputs' remainder paths less the (path, kind) pairs
/// that now have a typed column, plus the typed columns of the inputs that do not.
pub fn merged_remainder_paths<'a>(
    layout: &[LayoutColumn],
    input_remainders: impl IntoIterator<Item = &'a BTreeMap<String, BTreeSet<Kind>>>,
    input_columns: &[ColumnCount],
) -> BTreeMap<String, BTreeSet<Kind>> {
    let typed: BTreeSet<(&str, Kind)> = layout.iter().map(|c| (c.name.as_str(), c.kind)).collect();
    let mut out: BTreeMap<String, BTreeSet<Kind>> = BTreeMap::new();
    let pairs = input_remainders
        .into_iter()
        .flat_map(|paths| {
            paths
                .iter()
                .flat_map(|(name, kinds)| kinds.iter().map(move |kind| (name.as_str(), *kind)))
        })
        .chain(
            input_columns
                .iter()
                .filter(|c| c.values > 0)
                .map(|c| (c.name.as_str(), c.kind)),
        );
    for (name, kind) in pairs {
        if !typed.contains(&(name, kind)) {
            out.entry(name.to_owned()).or_default().insert(kind);
        }
    }
    out
}

/// Rewrites batches of any part to one merged layout.
pub struct Conformer {
    layout: Vec<LayoutColumn>,
    schema: SchemaRef,
    column_of: HashMap<String, usize>,
}

/// A remainder value moving into a typed column.
enum Promoted {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Conformer {
    pub fn new(layout: Vec<LayoutColumn>) -> Self {
        let mut fields: Vec<_> = layout.iter().map(column_field).collect();
        fields.push(remainder_field());
        let column_of = layout
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Conformer {
            layout,
            schema: Arc::new(Schema::new(fields)),
            column_of,
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn layout(&self) -> &[LayoutColumn] {
        &self.layout
    }

    /// `batch` (rows of one part, all its columns) in the merged layout, rows in the same order.
    pub fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch, JsonError> {
        let rows = batch.num_rows();
        let input = PartLayout::from_schema(batch.schema_ref())?;
        let mut sources: Vec<Option<&ArrayRef>> = vec![None; self.layout.len()];
        let mut demoted: Vec<(&LayoutColumn, &ArrayRef)> = Vec::new();
        for (column, index) in &input.columns {
            let array = batch.column(*index);
            match self.column_of.get(&column.name) {
                Some(&out) if self.layout[out].kind == column.kind => sources[out] = Some(array),
                _ => demoted.push((column, array)),
            }
        }
        let remainder = match input.remainder {
            Some(index) => {
                Some(
                    batch
                        .column(index)
                        .as_map_opt()
                        .ok_or_else(|| JsonError::Layout {
                            column: crate::REMAINDER_COLUMN.into(),
                            message: "remainder is not a map".into(),
                        })?,
                )
            }
            None => None,
        };

        // Remainder entries that belong in a typed column: (column, row) -> value.
        let mut promoted: Vec<BTreeMap<usize, Promoted>> =
            (0..self.layout.len()).map(|_| BTreeMap::new()).collect();
        let mut kept: Option<Vec<bool>> = None;
        if let Some(map) = remainder {
            let keys = map.keys().as_string::<i32>();
            let values = map.values().as_string::<i32>();
            let offsets = map.value_offsets();
            for row in 0..rows {
                let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
                for entry in start..end {
                    let Some(&out) = self.column_of.get(keys.value(entry)) else {
                        continue;
                    };
                    let text = values.value(entry);
                    if let Some(value) = promote(text, keys.value(entry), self.layout[out].kind)? {
                        promoted[out].insert(row, value);
                        kept.get_or_insert_with(|| vec![true; keys.len()])[entry] = false;
                    }
                }
            }
        }

        let mut arrays = Vec::with_capacity(self.layout.len() + 1);
        for (out, column) in self.layout.iter().enumerate() {
            let array = match (sources[out], promoted[out].is_empty()) {
                (Some(source), true) => source.clone(),
                (None, true) => new_null_array(&column_field(column).data_type().clone(), rows),
                (source, false) => {
                    overlay(column, source.map(|a| a.as_ref()), &promoted[out], rows)?
                }
            };
            arrays.push(array);
        }
        let remainder = match (remainder, demoted.is_empty(), &kept) {
            (Some(map), true, None) => Arc::new(map.clone()) as ArrayRef,
            (None, true, _) => {
                let mut builder = remainder_builder();
                for _ in 0..rows {
                    builder
                        .append(true)
                        .map_err(|e| JsonError::arrow("building an empty remainder", e))?;
                }
                Arc::new(builder.finish())
            }
            _ => rebuild_remainder(remainder, kept.as_deref(), &demoted, rows)?,
        };
        arrays.push(remainder);
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| JsonError::arrow("conforming a batch to the merged layout", e))
    }
}

/// The typed value of stored JSON `text` when its kind is `kind`.
fn promote(text: &str, path: &str, kind: Kind) -> Result<Option<Promoted>, JsonError> {
    let value = parse_stored(text, path)?;
    if value_kind(&value) != kind {
        return Ok(None);
    }
    Ok(match value {
        Value::String(s) => Some(Promoted::Text(s)),
        Value::Number(n) => Some(match classify_number(n.as_str()) {
            Leaf::Int(i) => Promoted::Int(i),
            Leaf::Float(f) => Promoted::Float(f),
            // Number columns hold exactly the stored text.
            _ => Promoted::Text(text.to_owned()),
        }),
        // JSON columns hold exactly the stored text.
        Value::Array(_) | Value::Object(_) => Some(Promoted::Text(text.to_owned())),
        Value::Bool(b) => Some(Promoted::Bool(b)),
        Value::Null => None,
    })
}

/// `source` (or nulls) with the rows of `promoted` filled in.
fn overlay(
    column: &LayoutColumn,
    source: Option<&dyn Array>,
    promoted: &BTreeMap<usize, Promoted>,
    rows: usize,
) -> Result<ArrayRef, JsonError> {
    let mismatch = || JsonError::Layout {
        column: column.name.clone(),
        message: format!("kind {} does not match its stored type", column.kind),
    };
    let present = |row: usize| source.is_some_and(|a| a.is_valid(row));
    Ok(match column.kind {
        Kind::Int => {
            let values = source.and_then(|a| a.as_primitive_opt::<Int64Type>());
            let mut b = Int64Builder::with_capacity(rows);
            for row in 0..rows {
                match promoted.get(&row) {
                    Some(Promoted::Int(i)) => b.append_value(*i),
                    Some(_) => return Err(mismatch()),
                    None if present(row) => b.append_value(values.ok_or_else(mismatch)?.value(row)),
                    None => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::Float => {
            let values = source.and_then(|a| a.as_primitive_opt::<Float64Type>());
            let mut b = Float64Builder::with_capacity(rows);
            for row in 0..rows {
                match promoted.get(&row) {
                    Some(Promoted::Float(f)) => b.append_value(*f),
                    Some(_) => return Err(mismatch()),
                    None if present(row) => b.append_value(values.ok_or_else(mismatch)?.value(row)),
                    None => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::Bool => {
            let values = source.and_then(|a| a.as_boolean_opt());
            let mut b = BooleanBuilder::with_capacity(rows);
            for row in 0..rows {
                match promoted.get(&row) {
                    Some(Promoted::Bool(v)) => b.append_value(*v),
                    Some(_) => return Err(mismatch()),
                    None if present(row) => b.append_value(values.ok_or_else(mismatch)?.value(row)),
                    None => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::String | Kind::Number | Kind::Json | Kind::Null => {
            let mut b = StringBuilder::with_capacity(rows, 0);
            for row in 0..rows {
                match promoted.get(&row) {
                    Some(Promoted::Text(t)) => b.append_value(t),
                    Some(_) => return Err(mismatch()),
                    None if present(row) => {
                        let array = source.ok_or_else(mismatch)?;
                        b.append_value(string_value(array, row).ok_or_else(mismatch)?)
                    }
                    None => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
    })
}

/// The remainder with the entries not in `kept` dropped and the `demoted` columns' values added.
fn rebuild_remainder(
    remainder: Option<&MapArray>,
    kept: Option<&[bool]>,
    demoted: &[(&LayoutColumn, &ArrayRef)],
    rows: usize,
) -> Result<ArrayRef, JsonError> {
    let mut builder = remainder_builder();
    let mut text = String::new();
    for row in 0..rows {
        if let Some(map) = remainder {
            let keys = map.keys().as_string::<i32>();
            let values = map.values().as_string::<i32>();
            let offsets = map.value_offsets();
            for entry in offsets[row] as usize..offsets[row + 1] as usize {
                if kept.is_none_or(|k| k[entry]) {
                    builder.keys().append_value(keys.value(entry));
                    builder.values().append_value(values.value(entry));
                }
            }
        }
        for (column, array) in demoted {
            if array.is_null(row) {
                continue;
            }
            text.clear();
            typed_json_text(column, array.as_ref(), row, &mut text)?;
            builder.keys().append_value(&column.name);
            builder.values().append_value(&text);
        }
        builder
            .append(true)
            .map_err(|e| JsonError::arrow("building the merged remainder", e))?;
    }
    Ok(Arc::new(builder.finish()))
}

/// The exact JSON text of the value at `row` of a typed column (not null there).
fn typed_json_text(
    column: &LayoutColumn,
    array: &dyn Array,
    row: usize,
    out: &mut String,
) -> Result<(), JsonError> {
    let mismatch = || JsonError::Layout {
        column: column.name.clone(),
        message: format!("kind {} stored as {}", column.kind, array.data_type()),
    };
    let value = match column.kind {
        Kind::String | Kind::Number | Kind::Json | Kind::Null => {
            Stored::Text(string_value(array, row).ok_or_else(mismatch)?)
        }
        Kind::Int => Stored::Int(
            array
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(mismatch)?
                .value(row),
        ),
        Kind::Float => Stored::Float(
            array
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(mismatch)?
                .value(row),
        ),
        Kind::Bool => Stored::Bool(array.as_boolean_opt().ok_or_else(mismatch)?.value(row)),
    };
    push_json_text(column.kind, value, out);
    Ok(())
}
