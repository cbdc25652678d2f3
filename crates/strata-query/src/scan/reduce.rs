//! Rows dropped before the costly outputs of a batch are built.
//!
//! Rebuilding whole documents (`SELECT data`) costs far more per row than reading a typed
//! column, and a search usually keeps few of the rows it reads: a time window read granule by
//! granule, a filter on a field, the newest 1000 lines. When the plan above the scan filters
//! and/or keeps the top rows by one column (the `BuildDocumentsLate` rule), the scan first
//! builds only the outputs those read, evaluates the filter, keeps each batch's top rows, and
//! builds every output for the rows left.
//!
//! Invariant: the reduction only drops rows that the plan above would drop too — the filter is
//! the plan's own (and is evaluated again above); the top `fetch` rows of the whole input are
//! among the top `fetch` rows of the batch they sit in — so results are unchanged (ties at the
//! limit may be broken differently, as SQL allows).

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::compute::{
    SortOptions, concat_batches, prep_null_mask_filter, sort_to_indices, take, take_record_batch,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use super::read::{OutputPlan, build_output, build_outputs};

/// Keep only the first `fetch` rows in `options` order of scan output `column`.
#[derive(Debug, Clone)]
pub struct TopRows {
    pub column: usize,
    pub options: SortOptions,
    pub fetch: usize,
}

/// What the scan evaluates before building costly outputs.
#[derive(Debug, Clone)]
pub struct RowReduction {
    /// A predicate over the scan's output schema that reads no costly output.
    pub predicate: Option<Arc<dyn PhysicalExpr>>,
    pub top: Option<TopRows>,
    /// Scan outputs the predicate and the top rows read (built first, for every row).
    pub probed: Vec<usize>,
}

impl fmt::Display for RowReduction {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(predicate) = &self.predicate {
            parts.push(format!("filter={predicate}"));
        }
        if let Some(top) = &self.top {
            let order = if top.options.descending {
                "desc"
            } else {
                "asc"
            };
            parts.push(format!(
                "top {} by output {} {order}",
                top.fetch, top.column
            ));
        }
        write!(f, "{}", parts.join(", "))
    }
}

impl TopRows {
    /// The top `fetch` rows of all of a partition's `batches`, in order, as one batch (None
    /// when there are no rows). Each batch already holds only its own top rows, so this sorts
    /// at most `fetch` rows per batch.
    pub(super) fn merge(
        &self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Option<RecordBatch>> {
        let batch = concat_batches(schema, batches)?;
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let order = sort_to_indices(
            batch.column(self.column),
            Some(self.options),
            Some(self.fetch),
        )?;
        Ok(Some(take_record_batch(&batch, &order)?))
    }

    /// The order of the rows a scan keeping these top rows hands up (see [`TopRows::merge`]).
    pub(super) fn ordering(&self, schema: &SchemaRef) -> Option<PhysicalSortExpr> {
        let field = schema.fields().get(self.column)?;
        Some(PhysicalSortExpr {
            expr: Arc::new(Column::new(field.name(), self.column)),
            options: self.options,
        })
    }
}

impl RowReduction {
    /// The scan's outputs for the rows of `batch` (physical columns) that survive.
    pub(super) fn build(
        &self,
        batch: &RecordBatch,
        plans: &[OutputPlan],
        schema: &SchemaRef,
    ) -> Result<RecordBatch> {
        match self.select(batch, plans, schema)? {
            Some(indices) if indices.len() < batch.num_rows() => {
                build_outputs(&take_record_batch(batch, &indices)?, plans, schema)
            }
            _ => build_outputs(batch, plans, schema),
        }
    }

    /// How many rows of `batch` survive, without building any output for them.
    pub(super) fn surviving_rows(
        &self,
        batch: &RecordBatch,
        plans: &[OutputPlan],
        schema: &SchemaRef,
    ) -> Result<usize> {
        Ok(self
            .select(batch, plans, schema)?
            .map_or(batch.num_rows(), |indices| indices.len()))
    }

    /// The rows of `batch` that survive, in output order (None: all, in their order).
    fn select(
        &self,
        batch: &RecordBatch,
        plans: &[OutputPlan],
        schema: &SchemaRef,
    ) -> Result<Option<UInt32Array>> {
        let probe = probe_outputs(batch, plans, schema, &self.probed)?;
        let mut selected: Option<UInt32Array> = None;
        if let Some(predicate) = &self.predicate {
            let mask = rows_kept(predicate, &probe)?;
            selected = Some(mask.values().set_indices().map(|i| i as u32).collect());
        }
        if let Some(top) = &self.top {
            let key = probe.column(top.column);
            let key = match &selected {
                Some(indices) => take(key.as_ref(), indices, None)?,
                None => Arc::clone(key),
            };
            if key.len() > top.fetch {
                let order = sort_to_indices(&key, Some(top.options), Some(top.fetch))?;
                selected = Some(match &selected {
                    Some(indices) => take(indices, &order, None)?.as_primitive().clone(),
                    None => order,
                });
            }
        }
        Ok(selected)
    }
}

/// The rows of `probe` that `predicate` keeps: true, not NULL (the row goes, as FilterExec
/// drops it). When evaluating it over the whole batch fails, it is evaluated with each row's
/// own short circuit (`crate::short_circuit`): whether DataFusion's evaluation fails depends on
/// which rows share the batch, and the scan's batches hold fewer rows than an unpruned scan's.
pub(super) fn rows_kept(
    predicate: &Arc<dyn PhysicalExpr>,
    probe: &RecordBatch,
) -> Result<BooleanArray> {
    let mask = crate::short_circuit::evaluate_or_per_row(predicate, probe)?
        .into_array(probe.num_rows())?;
    if mask.data_type() != &DataType::Boolean {
        return Err(DataFusionError::Internal(format!(
            "scan filter {predicate} is of type {}, not boolean",
            mask.data_type()
        )));
    }
    let mask = mask.as_boolean();
    Ok(match mask.nulls() {
        Some(_) => prep_null_mask_filter(mask),
        None => mask.clone(),
    })
}

/// A batch of the scan's output schema (every field nullable) holding the outputs `probed`
/// built from `batch` (physical columns), and NULL for the others, which are never read.
pub(super) fn probe_outputs(
    batch: &RecordBatch,
    plans: &[OutputPlan],
    schema: &SchemaRef,
    probed: &[usize],
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(plans.len());
    for (i, (plan, field)) in plans.iter().zip(schema.fields()).enumerate() {
        columns.push(if probed.contains(&i) {
            build_output(batch, plan)?
        } else {
            arrow::array::new_null_array(field.data_type(), rows)
        });
    }
    let nullable: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(nullable)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}
