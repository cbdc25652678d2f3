//! Equality filters on string columns decided by dictionary key, inside the Parquet decoder.
//!
//! A log search (`user = 'x' AND method = 'GET' AND path = '/y'`) compares strings on every row
//! it reads: the decoder builds a string view per row and the comparison reads it. The columns
//! are dictionary encoded, so each row is a key into its column chunk's dictionary: reading the
//! column as keys and deciding each dictionary value once, the filter becomes a table lookup
//! per row, and no string is built for the rows it drops.
//!
//! A conjunct `<string output> = '<literal>'` or `<string output> IN ('<literal>', …)` (or
//! equalities on one output joined by OR, as DataFusion writes short `IN` lists) takes this path in a unit when the output is a string column passed through unchanged (no cast,
//! no remainder values to overlay, as `GROUP BY` counts by key require), every data page of the
//! column in the unit's row groups is dictionary encoded (a chunk that fell back to plain
//! values would be turned back into a dictionary by hashing every value), and no output of the
//! unit rebuilds documents (those read the stored columns in their stored types).
//!
//! Invariants: a row is kept exactly when its value equals one of the literals; a NULL value
//! drops the row, as the comparison's NULL does above the scan. The outputs built from a column
//! read as keys are cast back to the output's own type, so the rows the scan emits are the same
//! either way. A dictionary's decisions are cached while the decoder hands out batches of the
//! same chunk; the cache holds the dictionary itself, so its buffers cannot be freed and their
//! address reused by another chunk's dictionary while the cached decisions stand.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::Int32Type;
use arrow::error::ArrowError;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{Guarantee, LiteralGuarantee, collect_columns};
use datafusion::physical_plan::metrics::Count;
use parquet::basic::Encoding;
use parquet::file::metadata::ColumnChunkMetaData;

use super::access_plan::ScanUnit;
use super::prune::only_equalities;
use super::read::{OutputPlan, dictionary_source};

/// The string literals a conjunct accepts and the scan output it compares them with, for
/// `output = 'literal'` (either side), `output IN ('literal', …)` and ORs of those on one output:
/// the conjunct's literal guarantee, when the conjunct says nothing more (as
/// `prune::filter_is_exact` decides).
fn equality_literals(conjunct: &Arc<dyn PhysicalExpr>) -> Option<(usize, BTreeSet<String>)> {
    let [guarantee] = &LiteralGuarantee::analyze(conjunct)[..] else {
        return None;
    };
    let name = guarantee.column.name();
    let columns = collect_columns(conjunct);
    let [column] = columns.iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    if guarantee.guarantee != Guarantee::In
        || column.name() != name
        || !only_equalities(conjunct, name)
    {
        return None;
    }
    let literals = guarantee
        .literals
        .iter()
        .map(|v| v.try_as_str().flatten().map(str::to_owned))
        .collect::<Option<BTreeSet<String>>>()?;
    Some((column.index(), literals))
}

/// Whether every data page of `chunk` is dictionary encoded (Parquet's page encoding
/// statistics, kept by the reader as a mask of the data pages' encodings).
fn all_pages_dictionary_encoded(chunk: &ColumnChunkMetaData) -> bool {
    chunk.dictionary_page_offset().is_some()
        && chunk.page_encoding_stats_mask().is_some_and(|mask| {
            mask.is_only(Encoding::RLE_DICTIONARY) || mask.is_only(Encoding::PLAIN_DICTIONARY)
        })
}

/// The physical column a conjunct can be decided on by dictionary key in `unit`, and the
/// literals it keeps; `None` when it must be evaluated over the built outputs (see the module
/// documentation for when).
pub(super) fn keyed_equality(
    conjunct: &Arc<dyn PhysicalExpr>,
    unit: &ScanUnit,
    plans: &[OutputPlan],
) -> Option<(String, BTreeSet<String>)> {
    let (output, literals) = equality_literals(conjunct)?;
    let entry = &unit.part.entry;
    let column = dictionary_source(entry, plans.get(output)?)?;
    for plan in plans {
        let reads_column = match plan {
            OutputPlan::Document | OutputPlan::Rebuild { .. } => return None,
            OutputPlan::Typed {
                column: Some(c), ..
            } => c == column,
            OutputPlan::TextDirect { column: c } => c == column,
            OutputPlan::Typed { column: None, .. } | OutputPlan::AllNull(_) => false,
        };
        if reads_column && dictionary_source(entry, plan) != Some(column) {
            return None;
        }
    }
    let metadata = unit.part.metadata.metadata();
    let leaf = metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| matches!(c.path().parts(), [only] if only == column))?;
    let row_groups = unit.plan.row_group_indexes();
    row_groups
        .iter()
        .all(|&rg| all_pages_dictionary_encoded(metadata.row_group(rg).column(leaf)))
        .then(|| (column.to_owned(), literals))
}

/// Which values of one dictionary the filter keeps, by key.
struct Decisions {
    /// Held so that its buffers, which identify it, stay allocated (see the module docs).
    dictionary: ArrayRef,
    keep: Vec<bool>,
}

/// Keeps the rows whose value in a dictionary-encoded string column is one of `literals`.
pub(super) struct KeyedEquality {
    column: String,
    literals: BTreeSet<String>,
    cached: Option<Decisions>,
    rows_by_key: Count,
}

impl KeyedEquality {
    pub(super) fn new(column: String, literals: BTreeSet<String>, rows_by_key: Count) -> Self {
        Self {
            column,
            literals,
            cached: None,
            rows_by_key,
        }
    }

    /// The rows of `batch` kept, or `None` when its column is not read as dictionary keys of
    /// strings (the caller then compares the values themselves).
    pub(super) fn evaluate(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<Option<BooleanArray>, ArrowError> {
        let Some(keys) = batch
            .column_by_name(&self.column)
            .and_then(|a| a.as_dictionary_opt::<Int32Type>())
        else {
            return Ok(None);
        };
        let Some(values) = keys.values().as_string_opt::<i32>() else {
            return Ok(None);
        };
        let same = self.cached.as_ref().is_some_and(|c| {
            let cached = c.dictionary.as_string::<i32>();
            cached.len() == values.len()
                && std::ptr::eq(cached.values().as_ptr(), values.values().as_ptr())
                && std::ptr::eq(cached.offsets().as_ptr(), values.offsets().as_ptr())
        });
        if !same {
            let keep = values
                .iter()
                .map(|v| v.is_some_and(|v| self.literals.contains(v)))
                .collect();
            self.cached = Some(Decisions {
                dictionary: keys.values().clone(),
                keep,
            });
        }
        let keep = self
            .cached
            .as_ref()
            .map(|c| c.keep.as_slice())
            .unwrap_or(&[]);
        let codes = keys.keys().values();
        // A key out of the dictionary (only under a NULL row) keeps nothing.
        let mut kept = BooleanBuffer::collect_bool(codes.len(), |i| {
            usize::try_from(codes[i])
                .ok()
                .and_then(|k| keep.get(k))
                .copied()
                .unwrap_or(false)
        });
        if let Some(nulls) = keys.nulls() {
            kept = &kept & nulls.inner();
        }
        self.rows_by_key.add(codes.len());
        Ok(Some(BooleanArray::new(kept, None)))
    }
}
