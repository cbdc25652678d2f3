//! Reading one scan unit (the selected row groups and rows of one part) and building the scan's
//! outputs from the physical columns read.
//!
//! A path stored in a typed column of a kind its mode reads is passed through (zero copy, or one
//! cast); values of the path's other kinds sit in the remainder and are overlaid row by row;
//! sub-objects and whole documents are rebuilt from JSON. Only the physical columns the outputs
//! need are read.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StringBuilder};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Fields, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::physical_plan::parquet::RowGroupAccess;
use datafusion::physical_plan::metrics::Count;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, RowSelectionPolicy};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::ParquetMetaData;
use strata_format::{PartEntry, VerifiedPartReader};
use strata_json::reconstruct::{DocumentWriter, parse_stored, reconstruct};
use strata_json::{JsonPath, Kind, REMAINDER_COLUMN};

use super::access_plan::{PartInScan, ScanUnit, selected_ranges};
use super::prune::{kind_feeds_mode, remainder_feeds};
use super::row_filter::DecoderFilter;
use super::{BATCH_ROWS, ScanOutput, external, part_error};
use crate::paths::PathMode;
use crate::udf::{ModeValue, build_mode_array, value_in_mode};

/// How one output is produced from one part.
#[derive(Debug, Clone)]
pub(super) enum OutputPlan {
    Document,
    AllNull(PathMode),
    /// A typed column (maybe cast), overlaid with remainder values when `overlay`.
    Typed {
        column: Option<String>,
        path: String,
        mode: PathMode,
        overlay: bool,
    },
    /// A string/int/bool column rendered as text.
    TextDirect {
        column: String,
    },
    /// Rebuilt from every column under the path and the remainder.
    Rebuild {
        path: JsonPath,
        mode: PathMode,
    },
}

pub(super) fn plan_output(entry: &PartEntry, output: &ScanOutput) -> OutputPlan {
    let ScanOutput::Path(column) = output else {
        return OutputPlan::Document;
    };
    let path = &column.path;
    let decoded = JsonPath::decode(path);
    let has_children = entry
        .columns
        .keys()
        .chain(entry.remainder_paths.keys())
        .any(|name| decoded.is_strict_prefix_of(&JsonPath::decode(name)));
    let stored_kind = entry.columns.get(path).copied();
    let remainder_kinds: BTreeSet<Kind> = entry
        .remainder_paths
        .get(path)
        .map(|k| k.iter().copied().filter(|k| *k != Kind::Null).collect())
        .unwrap_or_default();
    let truncated = entry.remainder_paths_truncated;
    let nothing_stored = stored_kind.is_none()
        && remainder_kinds.is_empty()
        && !has_children
        && !truncated
        && !entry.remainder_paths.contains_key(path);
    match column.mode {
        PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool | PathMode::Number => {
            let column_name = stored_kind
                .filter(|k| kind_feeds_mode(*k, column.mode))
                .map(|_| path.clone());
            let overlay = remainder_feeds(entry, path, column.mode);
            if column_name.is_none() && !overlay {
                OutputPlan::AllNull(column.mode)
            } else {
                OutputPlan::Typed {
                    column: column_name,
                    path: path.clone(),
                    mode: column.mode,
                    overlay,
                }
            }
        }
        mode if nothing_stored => OutputPlan::AllNull(mode),
        PathMode::Text | PathMode::Mixed
            if !has_children
                && !truncated
                && !entry.remainder_paths.contains_key(path)
                && matches!(stored_kind, Some(Kind::String | Kind::Int | Kind::Bool)) =>
        {
            OutputPlan::TextDirect {
                column: path.clone(),
            }
        }
        mode => OutputPlan::Rebuild {
            path: decoded,
            mode,
        },
    }
}

/// Physical columns (by name) an output plan reads; `None` means all.
fn needed_columns(entry: &PartEntry, plan: &OutputPlan, needed: &mut BTreeSet<String>) -> bool {
    match plan {
        OutputPlan::Document => return true,
        OutputPlan::AllNull(_) => {}
        OutputPlan::Typed {
            column, overlay, ..
        } => {
            if let Some(c) = column {
                needed.insert(c.clone());
            }
            if *overlay {
                needed.insert(REMAINDER_COLUMN.to_owned());
            }
        }
        OutputPlan::TextDirect { column } => {
            needed.insert(column.clone());
        }
        OutputPlan::Rebuild { path, .. } => {
            for name in entry.columns.keys() {
                let stored = JsonPath::decode(name);
                if stored == *path || path.is_strict_prefix_of(&stored) {
                    needed.insert(name.clone());
                }
            }
            needed.insert(REMAINDER_COLUMN.to_owned());
        }
    }
    false
}

/// The physical columns of `part` that `plans` read; `None` when they read every column (a
/// whole document).
pub(super) fn columns_read<'a>(
    part: &PartInScan,
    plans: impl Iterator<Item = &'a OutputPlan>,
) -> Option<ProjectionMask> {
    let mut needed = BTreeSet::new();
    for plan in plans {
        if needed_columns(&part.entry, plan, &mut needed) {
            return None;
        }
    }
    let roots = part
        .metadata
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| needed.contains(f.name()))
        .map(|(i, _)| i)
        .collect::<Vec<_>>();
    let descr = part.metadata.metadata().file_metadata().schema_descr_ptr();
    Some(ProjectionMask::roots(&descr, roots))
}

/// A selection whose runs (selected or skipped) average fewer rows than this is read as whole
/// pages filtered by a mask rather than run by run. Deletion vectors cut a part's rows into
/// short runs (1 % of rows deleted at random: runs of about 50), which parquet's default (32)
/// reads run by run, each a call into every column's decoder; measured with `bench/changes.py`
/// (1M events, 10 % replaced and 1 % deleted), JSONBench Q3–Q5 ran 10–25 % faster with the mask
/// (Q4 17.5 → 13.6 ms). Key lookups, text-index granules and page pruning select long runs and
/// stay run by run.
pub(super) const MASK_BELOW_AVERAGE_RUN: usize = 1024;

/// A stream of the batches of one part's selected rows.
pub(super) type UnitStream =
    parquet::arrow::async_reader::ParquetRecordBatchStream<VerifiedPartReader>;

/// The compressed bytes of the `read` columns' pages that `access` to row group `rg` fetches:
/// a column's dictionary page and the data pages holding selected rows (the whole column chunk
/// when it has no page index), as parquet fetches them.
fn bytes_read(
    parquet: &ParquetMetaData,
    access: &RowGroupAccess,
    rg: usize,
    read: &ProjectionMask,
) -> usize {
    let meta = parquet.row_group(rg);
    let ranges = selected_ranges(access, meta.num_rows().max(0) as usize);
    let offsets = parquet.offset_index().and_then(|index| index.get(rg));
    let mut bytes = 0;
    for (leaf, chunk) in meta.columns().iter().enumerate() {
        if !read.leaf_included(leaf) {
            continue;
        }
        let pages = match (access, offsets.and_then(|o| o.get(leaf))) {
            (RowGroupAccess::Selection(_), Some(pages)) => pages.page_locations(),
            _ => {
                bytes += chunk.compressed_size().max(0) as usize;
                continue;
            }
        };
        if let Some(start) = chunk.dictionary_page_offset() {
            bytes += (chunk.data_page_offset() - start).max(0) as usize;
        }
        // Pages and ranges are both in row order: one pass over each (a plan narrowed by
        // postings has tens of thousands of ranges).
        let mut range = 0;
        for (page, location) in pages.iter().enumerate() {
            let first = location.first_row_index.max(0) as usize;
            let end = pages
                .get(page + 1)
                .map_or(usize::MAX, |next| next.first_row_index.max(0) as usize);
            while ranges.get(range).is_some_and(|r| r.end <= first) {
                range += 1;
            }
            if ranges.get(range).is_some_and(|r| r.start < end) {
                bytes += location.compressed_page_size.max(0) as usize;
            }
        }
    }
    bytes
}

/// Opens the selected row groups and rows of one part (its access plan), reading the physical
/// columns `plans` need through `store`, every byte verified against the part's checksums.
/// `dictionary_column`, when given, is read as dictionary-encoded strings (keys into each
/// column chunk's dictionary) instead of one string per row, as are the columns the row
/// filter decides by key. `row_filter`, when given, is evaluated by the decoder
/// (`row_filter`): the stream holds only the rows it keeps.
pub(super) fn open_unit(
    store: &Arc<dyn ObjectStore>,
    unit: &ScanUnit,
    plans: &[OutputPlan],
    table: &str,
    bytes_scanned: &Count,
    dictionary_column: Option<&str>,
    row_filter: Option<DecoderFilter>,
) -> Result<UnitStream> {
    let part = &unit.part;
    let file_schema = part.metadata.schema().clone();
    let parquet = part.metadata.metadata().clone();
    let mask = columns_read(part, plans.iter()).unwrap_or_else(ProjectionMask::all);
    // What the decoder reads: the outputs' columns and the filter's.
    let mut read = mask.clone();
    if let Some(filter) = &row_filter {
        read.union(&filter.columns);
    }
    let row_groups = unit.plan.row_group_indexes();
    for &rg in &row_groups {
        bytes_scanned.add(bytes_read(&parquet, &unit.plan.inner()[rg], rg, &read));
    }
    // Columns read as dictionary keys: the one a grouped count asks for, and those the
    // filter's conjuncts decide by key.
    let mut dictionary: Vec<&str> = dictionary_column.into_iter().collect();
    if let Some(filter) = &row_filter {
        dictionary.extend(filter.dictionary_columns.iter().map(String::as_str));
    }
    let metadata = if dictionary.is_empty() {
        part.metadata.clone()
    } else {
        let fields: Fields = file_schema
            .fields()
            .iter()
            .map(|f| {
                if dictionary.contains(&f.name().as_str()) {
                    Arc::new(f.as_ref().clone().with_data_type(DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(DataType::Utf8),
                    )))
                } else {
                    f.clone()
                }
            })
            .collect();
        let options = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
        ArrowReaderMetadata::try_new(parquet.clone(), options)
            .map_err(|e| part_error(table, &part.path, e.into()))?
    };
    let reader = VerifiedPartReader::new(
        store.clone(),
        part.location.clone(),
        part.path.clone(),
        part.checksums.clone(),
        parquet.clone(),
    );
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata)
        .with_projection(mask)
        .with_row_groups(row_groups)
        .with_batch_size(BATCH_ROWS);
    let selection = unit
        .plan
        .clone()
        .into_overall_row_selection(parquet.row_groups())
        .map_err(|e| part_error(table, &part.path, e))?;
    if let Some(selection) = selection {
        builder = builder
            .with_row_selection(selection)
            .with_row_selection_policy(RowSelectionPolicy::Auto {
                threshold: MASK_BELOW_AVERAGE_RUN,
            });
    }
    if let Some(filter) = row_filter {
        builder = builder.with_row_filter(filter.filter);
    }
    builder
        .build()
        .map_err(|e| part_error(table, &part.path, e.into()))
}

/// The physical column an output can be counted from by dictionary key: a string column passed
/// through unchanged (no cast, no remainder values to overlay).
pub(super) fn dictionary_source<'a>(entry: &PartEntry, plan: &'a OutputPlan) -> Option<&'a str> {
    let column = match plan {
        OutputPlan::Typed {
            column: Some(column),
            mode: PathMode::String,
            overlay: false,
            ..
        } => column,
        OutputPlan::TextDirect { column } => column,
        _ => return None,
    };
    (entry.columns.get(column) == Some(&Kind::String)).then_some(column.as_str())
}

pub(super) fn build_outputs(
    batch: &RecordBatch,
    plans: &[OutputPlan],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(plans.len());
    for plan in plans {
        columns.push(build_output(batch, plan)?);
    }
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

pub(super) fn build_output(batch: &RecordBatch, plan: &OutputPlan) -> Result<ArrayRef> {
    let rows = batch.num_rows();
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    Ok(match plan {
        OutputPlan::AllNull(mode) => arrow::array::new_null_array(&mode.data_type(), rows),
        OutputPlan::Document => {
            let writer = DocumentWriter::new(batch).map_err(external)?;
            let mut b = StringBuilder::with_capacity(rows, rows * 256);
            let mut text = Vec::new();
            for row in 0..rows {
                text.clear();
                writer.write(row, &mut text).map_err(external)?;
                b.append_value(std::str::from_utf8(&text).map_err(external)?);
            }
            Arc::new(b.finish())
        }
        OutputPlan::TextDirect { column } => {
            let array = batch
                .column_by_name(column)
                .ok_or_else(|| DataFusionError::Internal(format!("column {column} not read")))?;
            let text = PathMode::Text.data_type();
            if array.data_type() == &text {
                array.clone()
            } else {
                cast_with_options(array, &text, &safe)?
            }
        }
        OutputPlan::Typed {
            column,
            path,
            mode,
            overlay,
        } => {
            let base = match column {
                Some(name) => {
                    let array = batch.column_by_name(name).ok_or_else(|| {
                        DataFusionError::Internal(format!("column {name} not read"))
                    })?;
                    if array.data_type() == &mode.data_type() {
                        array.clone()
                    } else {
                        cast_with_options(array, &mode.data_type(), &safe)?
                    }
                }
                None => arrow::array::new_null_array(&mode.data_type(), rows),
            };
            if *overlay {
                overlay_remainder(batch, base, path, *mode)?
            } else {
                base
            }
        }
        OutputPlan::Rebuild { path, mode } => {
            let values = reconstruct(batch, path).map_err(external)?;
            build_mode_array(
                *mode,
                values.iter().map(|v| value_in_mode(v.as_ref(), *mode)),
            )
        }
    })
}

/// Fills rows whose value sits in the remainder (a rarer kind of the path) into `base`.
fn overlay_remainder(
    batch: &RecordBatch,
    base: ArrayRef,
    key: &str,
    mode: PathMode,
) -> Result<ArrayRef> {
    let Some(remainder) = batch.column_by_name(REMAINDER_COLUMN) else {
        return Ok(base);
    };
    let Some(map) = remainder.as_map_opt() else {
        return Ok(base);
    };
    let mut values: Vec<ModeValue> = Vec::with_capacity(base.len());
    for row in 0..base.len() {
        let mut value = scalar_at(&base, row);
        if matches!(value, ModeValue::Null) && !map.is_null(row) {
            let entries = map.value(row);
            let keys = entries.column(0).as_string::<i32>();
            let texts = entries.column(1).as_string::<i32>();
            for i in 0..entries.len() {
                if keys.value(i) == key {
                    let parsed = parse_stored(texts.value(i), key).map_err(external)?;
                    value = value_in_mode(Some(&parsed), mode);
                }
            }
        }
        values.push(value);
    }
    Ok(build_mode_array(mode, values.into_iter()))
}

fn scalar_at(array: &ArrayRef, row: usize) -> ModeValue {
    if array.is_null(row) {
        return ModeValue::Null;
    }
    match array.data_type() {
        DataType::Int64 => ModeValue::Int(
            array
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(row),
        ),
        DataType::Float64 => ModeValue::Float(
            array
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(row),
        ),
        DataType::Boolean => ModeValue::Bool(array.as_boolean().value(row)),
        DataType::Utf8 => ModeValue::Text(array.as_string::<i32>().value(row).to_owned()),
        DataType::Utf8View => ModeValue::Text(array.as_string_view().value(row).to_owned()),
        _ => ModeValue::Null,
    }
}
