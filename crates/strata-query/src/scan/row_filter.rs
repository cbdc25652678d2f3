//! Filters evaluated inside the Parquet decoder (late materialization).
//!
//! A search keeps few of the rows it reads: `user = 'x' AND path = 'y' AND status = 200` over a
//! log table sorted by time keeps one row in a few hundred, in every granule, so pruning skips
//! nothing. Evaluated above the decoder, every column the filter reads is decoded for every row
//! and every comparison runs on every row. Handed to parquet as a `RowFilter`, the filter's
//! conjuncts are evaluated one after another, each decoding only its own columns and only for
//! the rows the ones before it kept; the scan's other columns are decoded for the rows left.
//!
//! A window (`ORDER BY time LIMIT 1000` under the filter, the `BuildDocumentsLate` rule's top
//! rows) is cut in the decoder too, after the filter: a last predicate keeps the rows among the
//! first 1000 of the part's rows so far, so in a part sorted by time the other columns — the
//! long `message` of a log line — are decoded for about 1000 rows, not for the whole window.
//!
//! Order: the conjunct likeliest to keep fewest rows first — equality (`=`, `IN`) before other
//! comparisons, and among equalities the column whose dictionaries are largest (more distinct
//! values: an equality on it keeps fewer rows); ties keep the order the filter was written in.
//! Conjuncts that may fail on a value (casts, functions, arithmetic) come last, in their written
//! order, and only when every conjunct written before them runs here too, so that they are
//! evaluated on no row the written order would not evaluate them on.
//!
//! Invariants: a conjunct drops only rows the filter above the scan drops too — it is evaluated
//! over the same outputs, built the same way, and NULL drops the row as `FilterExec` does (the
//! filter above still runs); the top rows predicate drops only rows that are not among the first
//! `fetch` of the rows before them, which cannot be among the first `fetch` of all. A stream read through a row filter no longer says which row of the
//! part each of its rows is, so the scans that need row positions (grouped counts taking back
//! deleted rows, point reads) do not use one. Conjuncts over a rebuilt sub-object or whole
//! document are left to the filter above: evaluating them in the decoder would rebuild it for
//! every row twice.

use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::{concat, sort_to_indices, take};
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
use super::dictionary_keys::{KeyedConjunct, keyed_conjunct};
use super::read::{OutputPlan, columns_read};
use super::reduce::{TopRows, probe_outputs, rows_kept};
use super::top_order::BestSoFar;

/// A row filter for one unit.
pub(super) struct DecoderFilter {
    pub(super) filter: RowFilter,
    /// Whether it holds every conjunct of the predicate (the rows it keeps satisfy it).
    pub(super) complete: bool,
    /// The physical columns its conjuncts read.
    pub(super) columns: ProjectionMask,
    /// The columns its conjuncts decide by dictionary key, to be read as keys.
    pub(super) dictionary_columns: Vec<String>,
}

/// The scan's counters the decoder's filter adds to.
#[derive(Clone)]
pub(super) struct FilterMetrics {
    /// Rows dropped by the filter.
    pub(super) rows_filtered: Count,
    /// Rows a conjunct decided by dictionary key (`dictionary_keys`).
    pub(super) rows_by_key: Count,
}

/// What the decoder can evaluate for one unit whose outputs are built by `plans`: the
/// conjuncts of `predicate` (over the scan's outputs, `schema`), and then, when it took every
/// conjunct, the `top` rows so far. `None` when it can evaluate nothing.
pub(super) fn row_filter(
    unit: &ScanUnit,
    plans: &Arc<[OutputPlan]>,
    schema: &SchemaRef,
    predicate: Option<&Arc<dyn PhysicalExpr>>,
    top: Option<(&TopRows, &BestSoFar)>,
    metrics: &FilterMetrics,
) -> Option<DecoderFilter> {
    let all = predicate.map(split_conjunction).unwrap_or_default();
    let total = all.len();
    let evaluator = |probed: Vec<usize>| {
        let read: Vec<&OutputPlan> = probed.iter().filter_map(|&i| plans.get(i)).collect();
        if read.is_empty()
            || read.len() != probed.len()
            || read
                .iter()
                .any(|p| matches!(p, OutputPlan::Document | OutputPlan::Rebuild { .. }))
        {
            return None;
        }
        Some(OutputEvaluator {
            projection: columns_read(&unit.part, read.into_iter())?,
            probed,
            plans: Arc::clone(plans),
            schema: Arc::clone(schema),
            rows_filtered: metrics.rows_filtered.clone(),
        })
    };
    let mut dictionary_columns = Vec::new();
    // Whether every conjunct written so far runs here: one that can fail runs here only then,
    // or it would meet rows a conjunct left to the filter above would have dropped first.
    let mut all_taken = true;
    let mut conjuncts: Vec<(Rank, ConjunctPredicate)> = all
        .into_iter()
        .filter_map(|conjunct| {
            let probed = collect_columns(conjunct)
                .iter()
                .map(|c| c.index())
                .collect();
            let taken = (all_taken || crate::short_circuit::cannot_fail(conjunct))
                .then(|| evaluator(probed))
                .flatten();
            all_taken &= taken.is_some();
            let outputs = taken?;
            let rank = rank(conjunct, unit, &outputs.projection);
            let keyed = keyed_conjunct(conjunct, unit, plans, schema).map(|(column, decider)| {
                dictionary_columns.push(column.clone());
                KeyedConjunct::new(column, decider, metrics.rows_by_key.clone())
            });
            Some((
                rank,
                ConjunctPredicate {
                    conjunct: Arc::clone(conjunct),
                    outputs,
                    keyed,
                },
            ))
        })
        .collect();
    // Stable: equal ranks keep the written order.
    conjuncts.sort_by_key(|(rank, _)| std::cmp::Reverse(*rank));
    let complete = conjuncts.len() == total;
    let mut predicates: Vec<Box<dyn ArrowPredicate>> = conjuncts
        .into_iter()
        .map(|(_, p)| Box::new(p) as Box<dyn ArrowPredicate>)
        .collect();
    // The top rows are counted among the rows that satisfy the whole filter only.
    if let Some((top, best)) = top.filter(|_| complete)
        && let Some(outputs) = evaluator(vec![top.column])
    {
        predicates.push(Box::new(TopPredicate {
            top: top.clone(),
            outputs,
            best: best.clone(),
        }));
    }
    let mut columns = predicates.first()?.projection().clone();
    for predicate in &predicates[1..] {
        columns.union(predicate.projection());
    }
    Some(DecoderFilter {
        filter: RowFilter::new(predicates),
        complete,
        columns,
        dictionary_columns,
    })
}

/// How early a conjunct runs (greater first): conjuncts that cannot fail before those that can,
/// then equality first, then by the bytes of its columns' dictionary pages in the unit's row
/// groups. Conjuncts that can fail all rank alike, so they keep their written order.
type Rank = (bool, bool, u64);

fn rank(conjunct: &Arc<dyn PhysicalExpr>, unit: &ScanUnit, projection: &ProjectionMask) -> Rank {
    if !crate::short_circuit::cannot_fail(conjunct) {
        return (false, false, 0);
    }
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
    (true, equality, dictionary_bytes)
}

/// Builds the scan outputs a predicate reads from the physical columns the decoder hands it.
struct OutputEvaluator {
    projection: ProjectionMask,
    /// The scan outputs read.
    probed: Vec<usize>,
    plans: Arc<[OutputPlan]>,
    schema: SchemaRef,
    rows_filtered: Count,
}

impl OutputEvaluator {
    /// A batch of the scan's outputs with the probed ones built from `batch`.
    fn probe(&self, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        probe_outputs(batch, &self.plans, &self.schema, &self.probed)
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))
    }

    fn kept(&self, rows: usize, kept: BooleanArray) -> BooleanArray {
        self.rows_filtered.add(rows - kept.true_count());
        kept
    }
}

/// One conjunct of the filter, evaluated by the decoder over the columns it reads.
struct ConjunctPredicate {
    conjunct: Arc<dyn PhysicalExpr>,
    outputs: OutputEvaluator,
    /// How it is decided by dictionary key, when its column is read as keys.
    keyed: Option<KeyedConjunct>,
}

impl ConjunctPredicate {
    /// The rows of `batch` (holding at least the columns it reads) it keeps, by dictionary key
    /// when its column was read as keys.
    fn decide(&mut self, batch: &RecordBatch) -> Result<BooleanArray, ArrowError> {
        if let Some(keyed) = &mut self.keyed
            && let Some(kept) = keyed.evaluate(batch)?
        {
            return Ok(kept);
        }
        let probe = self.outputs.probe(batch)?;
        rows_kept(&self.conjunct, &probe).map_err(|e| ArrowError::ExternalError(Box::new(e)))
    }
}

impl ArrowPredicate for ConjunctPredicate {
    fn projection(&self) -> &ProjectionMask {
        &self.outputs.projection
    }

    fn evaluate(&mut self, batch: RecordBatch) -> Result<BooleanArray, ArrowError> {
        let kept = self.decide(&batch)?;
        Ok(self.outputs.kept(batch.num_rows(), kept))
    }
}

/// Keeps the rows that are among the first `top.fetch` in order of the partition's rows so far
/// (ties at the boundary may go either way, as SQL allows): in a part sorted by the order's
/// column, a window's other columns are decoded for about `fetch` rows only.
struct TopPredicate {
    top: TopRows,
    outputs: OutputEvaluator,
    /// The best `fetch` values of the partition's rows so far, which also tell `top_order`
    /// which pages are not worth opening.
    best: BestSoFar,
}

impl ArrowPredicate for TopPredicate {
    fn projection(&self) -> &ProjectionMask {
        &self.outputs.projection
    }

    fn evaluate(&mut self, batch: RecordBatch) -> Result<BooleanArray, ArrowError> {
        let rows = batch.num_rows();
        let probe = self.outputs.probe(&batch)?;
        let key = probe.column(self.top.column);
        let (seen, candidates) = match self.best.get() {
            Some(best) => (best.len(), concat(&[best.as_ref(), key.as_ref()])?),
            None => (0, Arc::clone(key)),
        };
        if candidates.len() <= self.top.fetch {
            self.best.set(candidates);
            return Ok(self
                .outputs
                .kept(rows, BooleanArray::from(vec![true; rows])));
        }
        let order = sort_to_indices(&candidates, Some(self.top.options), Some(self.top.fetch))?;
        let mut kept = vec![false; rows];
        for index in order.values() {
            if let Some(row) = (*index as usize).checked_sub(seen) {
                kept[row] = true;
            }
        }
        self.best.set(take(candidates.as_ref(), &order, None)?);
        Ok(self.outputs.kept(rows, BooleanArray::from(kept)))
    }
}
