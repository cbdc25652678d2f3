//! Filters evaluated inside the Parquet decoder (late materialization).
//!
//! A search keeps few of the rows it reads: `user = 'x' AND path = 'y' AND status = 200` over a
//! log table sorted by time keeps one row in a few hundred, in every granule, so pruning skips
//! nothing. Evaluated above the decoder, every column the filter reads is decoded for every row
//! and every comparison runs on every row. Handed to parquet as a `RowFilter`, the filter's
//! conjuncts are evaluated one after another, each decoding only its own columns and only for
//! the rows the ones before it kept; the scan's other columns are decoded for the rows left.
//!
//! Order: the conjunct likeliest to keep fewest rows first — equality (`=`, `IN`) before other
//! comparisons, and among equalities the column whose dictionaries are largest (more distinct
//! values: an equality on it keeps fewer rows); ties keep the order the filter was written in.
//!
//! Invariants: a conjunct drops only rows the filter above the scan drops too — it is evaluated
//! over the same outputs, built the same way, and NULL drops the row as `FilterExec` does (the
//! filter above still runs). A stream read through a row filter no longer says which row of the
//! part each of its rows is, so the scans that need row positions (grouped counts taking back
//! deleted rows, point reads) do not use one. Conjuncts over a rebuilt sub-object or whole
//! document are left to the filter above: evaluating them in the decoder would rebuild it for
//! every row twice.

use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, InListExpr, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, split_conjunction};
use datafusion::physical_plan::metrics::Count;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowPredicate, RowFilter};

use super::access_plan::ScanUnit;
use super::read::{OutputPlan, columns_read};
use super::reduce::{probe_outputs, rows_kept};

/// The row filter of `predicate` (over the scan's outputs, `schema`) for one unit whose outputs
/// are built by `plans`; `None` when no conjunct can be evaluated in the decoder.
/// `rows_filtered` counts the rows the filter drops.
pub(super) fn row_filter(
    unit: &ScanUnit,
    plans: &Arc<[OutputPlan]>,
    schema: &SchemaRef,
    predicate: &Arc<dyn PhysicalExpr>,
    rows_filtered: &Count,
) -> Option<RowFilter> {
    let mut conjuncts: Vec<(Rank, ConjunctPredicate)> = split_conjunction(predicate)
        .into_iter()
        .filter_map(|conjunct| {
            let probed: Vec<usize> = collect_columns(conjunct)
                .iter()
                .map(|c| c.index())
                .collect();
            let read: Vec<&OutputPlan> = probed.iter().filter_map(|&i| plans.get(i)).collect();
            if read.is_empty()
                || read.len() != probed.len()
                || read
                    .iter()
                    .any(|p| matches!(p, OutputPlan::Document | OutputPlan::Rebuild { .. }))
            {
                return None;
            }
            let projection = columns_read(&unit.part, read.into_iter())?;
            let rank = rank(conjunct, unit, &projection);
            Some((
                rank,
                ConjunctPredicate {
                    conjunct: Arc::clone(conjunct),
                    projection,
                    probed,
                    plans: Arc::clone(plans),
                    schema: Arc::clone(schema),
                    rows_filtered: rows_filtered.clone(),
                },
            ))
        })
        .collect();
    if conjuncts.is_empty() {
        return None;
    }
    // Stable: equal ranks keep the written order.
    conjuncts.sort_by(|a, b| b.0.cmp(&a.0));
    Some(RowFilter::new(
        conjuncts
            .into_iter()
            .map(|(_, p)| Box::new(p) as Box<dyn ArrowPredicate>)
            .collect(),
    ))
}

/// How early a conjunct runs (greater first): equality first, then by the bytes of its
/// columns' dictionary pages in the unit's row groups.
type Rank = (bool, u64);

fn rank(conjunct: &Arc<dyn PhysicalExpr>, unit: &ScanUnit, projection: &ProjectionMask) -> Rank {
    let equality = if let Some(binary) = conjunct.downcast_ref::<BinaryExpr>() {
        *binary.op() == Operator::Eq
            && (binary.left().is::<Literal>() || binary.right().is::<Literal>())
    } else if let Some(list) = conjunct.downcast_ref::<InListExpr>() {
        !list.negated()
    } else {
        false
    };
    let metadata = unit.part.metadata.metadata();
    let mut dictionary_bytes = 0u64;
    for rg in unit.plan.row_group_indexes() {
        for (leaf, chunk) in metadata.row_group(rg).columns().iter().enumerate() {
            if projection.leaf_included(leaf)
                && let Some(start) = chunk.dictionary_page_offset()
            {
                dictionary_bytes += (chunk.data_page_offset() - start).max(0) as u64;
            }
        }
    }
    (equality, dictionary_bytes)
}

/// One conjunct of the filter, evaluated by the decoder over the columns it reads.
struct ConjunctPredicate {
    conjunct: Arc<dyn PhysicalExpr>,
    projection: ProjectionMask,
    /// The scan outputs the conjunct reads.
    probed: Vec<usize>,
    plans: Arc<[OutputPlan]>,
    schema: SchemaRef,
    rows_filtered: Count,
}

impl ArrowPredicate for ConjunctPredicate {
    fn projection(&self) -> &ProjectionMask {
        &self.projection
    }

    fn evaluate(&mut self, batch: RecordBatch) -> Result<BooleanArray, ArrowError> {
        let probe = probe_outputs(&batch, &self.plans, &self.schema, &self.probed)
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        let kept = rows_kept(&self.conjunct, &probe)
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        self.rows_filtered.add(batch.num_rows() - kept.true_count());
        Ok(kept)
    }
}
