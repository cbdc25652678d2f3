//! `BuildDocumentsLate`: whole documents are rebuilt only for the rows a query keeps.
//!
//! `SELECT data FROM logs WHERE <time window> ORDER BY time DESC LIMIT 1000` — the shape of
//! every log search and of Elasticsearch's `_search` — reads whole granules, keeps the rows of
//! the window and then only the newest 1000 of them. DataFusion filters and sorts after the
//! scan has built its outputs, so every row read would have its document rebuilt from its
//! columns, by far the dearest step. This rule finds a `FilterExec` and/or a top-k `SortExec`
//! (a sort with a fetch, on one scan output) above a Strata scan (through repartitioning) and hands both to the scan as a [`RowReduction`]: the scan evaluates them
//! on the cheap outputs first and rebuilds documents for the surviving rows only.
//!
//! A top-k is handed to the scan whatever its outputs (paths as well as documents): the scan
//! then reads sorted parts best granule first and hands its rows up sorted.
//!
//! Invariant: the reduction may only drop rows the plan above would drop (see `scan::reduce`),
//! and is applied only when neither the predicate nor the sort key reads a document; a filter
//! without a top-k only when the scan builds whole documents. The filter above still runs.
//! The sort above is removed only when the scan declares its order, which it does once it
//! keeps the top rows: each partition then hands up its top `fetch` rows sorted, exactly what
//! the sort would have produced from it. A round-robin repartition between a top-k and its
//! scan is removed too (see `replace_scan`), which changes how many partitions the rows arrive
//! in, not which rows.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::Partitioning;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::scan::{RowReduction, ScanOutput, StrataScanExec, TopRows, scan_below};

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct BuildDocumentsLate;

impl PhysicalOptimizerRule for BuildDocumentsLate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Top-down, so a top-k sort is seen before the filter below it; the scan then carries
        // a reduction and is not reduced again.
        plan.transform_down(|node| {
            if let Some(sort) = node.downcast_ref::<SortExec>()
                && let Some(fetch) = sort.fetch()
                && let [key] = sort.expr().as_ref()
                && let Some(column) = key.expr.downcast_ref::<Column>()
            {
                let top = TopRows {
                    column: column.index(),
                    options: key.options,
                    fetch,
                };
                if let Some(input) = reduce(sort.input(), Some(top))? {
                    // The scan now hands up each partition's top rows in the sort's order
                    // (`StrataScanExec::with_reduction`), which the filter keeps: the sort
                    // would copy them for nothing.
                    if input
                        .equivalence_properties()
                        .ordering_satisfy(sort.expr().clone())?
                        && (sort.preserve_partitioning()
                            || input.output_partitioning().partition_count() == 1)
                    {
                        return Ok(Transformed::yes(input));
                    }
                    return Ok(Transformed::yes(replace_children_if_necessary(
                        node,
                        vec![input],
                    )?));
                }
            }
            if node.is::<FilterExec>()
                && let Some(reduced) = reduce(&node, None)?
            {
                return Ok(Transformed::yes(reduced));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "strata_build_documents_late"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` (a filter, or what a top-k sort reads) with the scan below it reducing rows, or
/// `None` when the shape does not match or nothing would be gained.
fn reduce(
    node: &Arc<dyn ExecutionPlan>,
    mut top: Option<TopRows>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut predicate = None;
    let mut below = node;
    if let Some(filter) = node.downcast_ref::<FilterExec>() {
        if let Some(top) = &mut top {
            // The sort reads the filter's output; map the key to the filter's input.
            if let Some(projection) = filter.projection() {
                let Some(index) = projection.get(top.column) else {
                    return Ok(None);
                };
                top.column = *index;
            }
        }
        predicate = Some(Arc::clone(filter.predicate()));
        below = filter.input();
    }
    let Some(scan) = scan_below(below).and_then(|n| n.downcast_ref::<StrataScanExec>()) else {
        return Ok(None);
    };
    if scan.reduction().is_some() {
        return Ok(None);
    }
    let mut probed: Vec<usize> = predicate
        .iter()
        .flat_map(collect_columns)
        .map(|c| c.index())
        .collect();
    probed.extend(top.as_ref().map(|t| t.column));
    probed.sort_unstable();
    probed.dedup();
    let outputs = scan.outputs();
    let document_read = probed
        .iter()
        .any(|&i| !matches!(outputs.get(i), Some(ScanOutput::Path(_))));
    let builds_documents = outputs.iter().any(|o| matches!(o, ScanOutput::Document));
    // A filter alone is worth taking into the scan only when it spares rebuilding documents.
    // A top-k is worth it whatever the outputs: the scan then reads sorted parts best granule
    // first and hands up its rows sorted (no sort above), e.g. `SELECT data.message … ORDER BY
    // data.timestamp DESC LIMIT 1000`.
    if document_read || (top.is_none() && !builds_documents) {
        return Ok(None);
    }
    let keeps_top_rows = top.is_some();
    let reduced: Arc<dyn ExecutionPlan> = Arc::new(scan.with_reduction(RowReduction {
        predicate,
        top,
        probed,
    }));
    replace_scan(node, reduced, keeps_top_rows).map(Some)
}

/// `node` with the scan at the bottom of its single-child chain replaced by `scan`.
///
/// With `keeps_top_rows`, a round-robin repartition directly above the scan is dropped as
/// well: it exists to spread the scan's rows over more cores for the operators above, but a
/// scan that keeps the top `fetch` rows hands up at most `fetch` rows per batch, which a
/// filter and a top-k sort take in microseconds; the repartition would only add a hand-off
/// between tasks and a merge of partitions to every time window (about 0.3 ms of 3.5).
fn replace_scan(
    node: &Arc<dyn ExecutionPlan>,
    scan: Arc<dyn ExecutionPlan>,
    keeps_top_rows: bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    if node.is::<StrataScanExec>() {
        return Ok(scan);
    }
    let Some(child) = node.children().first().map(|c| Arc::clone(c)) else {
        return Ok(Arc::clone(node));
    };
    if keeps_top_rows
        && let Some(repartition) = node.downcast_ref::<RepartitionExec>()
        && matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
        && !repartition.preserve_order()
    {
        return replace_scan(&child, scan, keeps_top_rows);
    }
    let child = replace_scan(&child, scan, keeps_top_rows)?;
    replace_children_if_necessary(Arc::clone(node), vec![child])
}
