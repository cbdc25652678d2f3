//! Filters on string columns decided by dictionary key, inside the Parquet decoder.
//!
//! A log search (`user = 'x' AND method = 'GET' AND path = '/y'`) compares strings on every row
//! it reads: the decoder builds a string view per row and the comparison reads it. The columns
//! are dictionary encoded, so each row is a key into its column chunk's dictionary: reading the
//! column as keys and deciding each dictionary value once, the filter becomes a table lookup
//! per row, and no string is built for the rows it drops.
//!
//! A conjunct over one string output built of comparisons, `LIKE`, `IN`, `NOT`, casts, literals
//! and immutable functions (`user = 'x'`, `method IN ('GET', 'PUT')`, `level >= 'WARN'`,
//! `upper(method) = 'GET'`) is evaluated once over the dictionary's values, then each row is
//! looked up by its key. It takes this path in a unit when the
//! output is a string column passed through unchanged (no cast, no remainder values to
//! overlay, as `GROUP BY` counts by key require), every data page of the column in the unit's
//! row groups is dictionary encoded (a chunk that fell back to plain values would be turned
//! back into a dictionary by hashing every value), and no output of the unit rebuilds documents
//! (those read the stored columns in their stored types).
//!
//! Invariants: a row is kept exactly when its value satisfies the conjunct; a NULL value drops
//! the row, as the comparison's NULL does above the scan — an expression that would keep a NULL
//! is evaluated row by row instead, for that dictionary, and so is one that fails on some value
//! of the dictionary (a cast of a value only dropped rows hold). The outputs built from a column
//! read as keys are cast back to the output's own type, so the rows the scan emits are the same
//! either way. A dictionary's decisions are cached while the decoder hands out batches of the same
//! chunk; the cache holds the dictionary itself, so its buffers cannot be freed and their
//! address reused by another chunk's dictionary while the cached decisions stand.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, new_null_array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{cast, concat};
use arrow::datatypes::{DataType, FieldRef, Int32Type, Schema, SchemaRef};
use arrow::error::ArrowError;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::Volatility;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CastExpr, Column, InListExpr, LikeExpr, Literal, NotExpr,
};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::metrics::Count;
use parquet::basic::Encoding;
use parquet::file::metadata::ColumnChunkMetaData;

use super::access_plan::ScanUnit;
use super::read::{OutputPlan, dictionary_source};

/// Whether every data page of `chunk` is dictionary encoded (Parquet's page encoding
/// statistics, kept by the reader as a mask of the data pages' encodings).
fn all_pages_dictionary_encoded(chunk: &ColumnChunkMetaData) -> bool {
    chunk.dictionary_page_offset().is_some()
        && chunk.page_encoding_stats_mask().is_some_and(|mask| {
            mask.is_only(Encoding::RLE_DICTIONARY) || mask.is_only(Encoding::PLAIN_DICTIONARY)
        })
}

/// A conjunct over one string output (`schema`'s) of the nodes the module documentation lists,
/// rewritten to read that output as the only column of a batch: the output and the rewritten
/// conjunct.
fn single_string_expression(
    conjunct: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
) -> Option<(usize, Decider)> {
    let columns = collect_columns(conjunct);
    let [column] = columns.iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    let field = schema.fields().get(column.index())?;
    if !matches!(
        field.data_type(),
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    ) || !decidable_per_value(conjunct)
    {
        return None;
    }
    let expression = Arc::clone(conjunct)
        .transform(|e| match e.downcast_ref::<Column>() {
            Some(c) => Ok(Transformed::yes(
                Arc::new(Column::new(c.name(), 0)) as Arc<dyn PhysicalExpr>
            )),
            None => Ok(Transformed::no(e)),
        })
        .ok()?
        .data;
    let field = Arc::new(field.as_ref().clone().with_nullable(true));
    Some((column.index(), Decider { expression, field }))
}

/// Whether `expr` gives each value one answer, whatever the rows around it: comparisons,
/// `LIKE`, `IN`, `NOT`, casts, columns, literals and immutable functions only.
fn decidable_per_value(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let node_ok = expr.is::<BinaryExpr>()
        || expr.is::<Column>()
        || expr.is::<Literal>()
        || expr.is::<InListExpr>()
        || expr.is::<LikeExpr>()
        || expr.is::<NotExpr>()
        || expr.is::<CastExpr>()
        || expr
            .downcast_ref::<ScalarFunctionExpr>()
            .is_some_and(|f| f.fun().signature().volatility == Volatility::Immutable);
    node_ok && expr.children().into_iter().all(decidable_per_value)
}

/// The physical column a conjunct can be decided on by dictionary key in `unit`, and how it
/// decides a value; `None` when it must be evaluated over the built outputs (see the module
/// documentation for when).
pub(super) fn keyed_conjunct(
    conjunct: &Arc<dyn PhysicalExpr>,
    unit: &ScanUnit,
    plans: &[OutputPlan],
    schema: &SchemaRef,
) -> Option<(String, Decider)> {
    let (output, decider) = single_string_expression(conjunct, schema)?;
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
        .then(|| (column.to_owned(), decider))
}

/// How a value of the dictionary is decided: the conjunct, rewritten to read its output as the
/// only column (of `field`'s type), is true for it.
pub(super) struct Decider {
    expression: Arc<dyn PhysicalExpr>,
    field: FieldRef,
}

impl Decider {
    /// Whether each value of `values` (a dictionary's strings) is kept; `None` when a NULL would
    /// be kept too, which rows without a key cannot be told apart for here, or when the conjunct
    /// fails on some value.
    ///
    /// A dictionary also holds the values of rows the filters before this one dropped, so
    /// `CAST(x AS DOUBLE) > 0` may fail on a value no row being read holds: that dictionary is
    /// then decided row by row, where a cast fails only if a row read needs it.
    fn decide(&self, values: &ArrayRef) -> Option<Vec<bool>> {
        self.decide_values(values).ok().flatten()
    }

    fn decide_values(&self, values: &ArrayRef) -> Result<Option<Vec<bool>>, ArrowError> {
        let Decider { expression, field } = self;
        let typed = cast(values, field.data_type())?;
        let null = new_null_array(field.data_type(), 1);
        let with_null = concat(&[typed.as_ref(), null.as_ref()])?;
        let rows = with_null.len();
        let schema = Arc::new(Schema::new(vec![Arc::clone(field)]));
        let batch = RecordBatch::try_new(schema, vec![with_null])?;
        let external =
            |e: datafusion::error::DataFusionError| ArrowError::ExternalError(Box::new(e));
        let decided = expression
            .evaluate(&batch)
            .and_then(|v| v.into_array(rows))
            .map_err(external)?;
        let Some(decided) = decided.as_boolean_opt() else {
            return Ok(None);
        };
        let kept = |i: usize| decided.is_valid(i) && decided.value(i);
        if kept(rows - 1) {
            return Ok(None);
        }
        Ok(Some((0..rows - 1).map(kept).collect()))
    }
}

/// Which values of one dictionary the filter keeps, by key.
struct Decisions {
    /// Held so that its buffers, which identify it, stay allocated (see the module docs).
    dictionary: ArrayRef,
    /// None: this dictionary's rows are decided row by row.
    keep: Option<Vec<bool>>,
}

/// Keeps the rows whose value in a dictionary-encoded string column satisfies a conjunct.
pub(super) struct KeyedConjunct {
    column: String,
    decider: Decider,
    cached: Option<Decisions>,
    rows_by_key: Count,
}

impl KeyedConjunct {
    pub(super) fn new(column: String, decider: Decider, rows_by_key: Count) -> Self {
        Self {
            column,
            decider,
            cached: None,
            rows_by_key,
        }
    }

    /// The rows of `batch` kept, or `None` when its column is not read as dictionary keys of
    /// strings or its dictionary cannot be decided by key (the caller then compares the values
    /// themselves).
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
            let keep = self.decider.decide(keys.values());
            self.cached = Some(Decisions {
                dictionary: keys.values().clone(),
                keep,
            });
        }
        let Some(keep) = self.cached.as_ref().and_then(|c| c.keep.as_deref()) else {
            return Ok(None);
        };
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
