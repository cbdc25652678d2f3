//! `count(*) … WHERE <range>` counted from row-group statistics where they cover the range.
//!
//! Counting the events of a time range is the commonest question asked of a log table, and
//! over a table sorted by time the range covers whole row groups but at its two ends.
//! [`CountMatching`] replaces the first phase of such a count, when it sits on a filter over a
//! Strata scan, with [`CountMatchingExec`]: row groups whose statistics prove every row
//! satisfies the filter count their planned rows without reading a page, the others are read
//! and the filter evaluated in the scan (`scan::count`). The final phase is DataFusion's own.
//!
//! Invariant: the replacement produces the replaced node's schema and partial state (one Int64
//! per aggregate), and only replaces `count(*)`/`count(<literal>)` without DISTINCT, FILTER or
//! grouping, over a filter that reads only path columns the scan produces.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};

use crate::partial_count::{CountInScan, PartialCountExec, is_count_star, replace_nodes};
use crate::scan::{Covering, ScanOutput, StrataScanExec, scan_below};

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct CountMatching;

impl PhysicalOptimizerRule for CountMatching {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_nodes(plan, replacing)
    }

    fn name(&self) -> &str {
        "strata_count_matching"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The partial phase of `count(*) … WHERE filter` over a Strata scan.
pub type CountMatchingExec = PartialCountExec<Matching>;

/// Counting the rows that satisfy a filter, from statistics where they cover it.
#[derive(Debug)]
pub struct Matching {
    /// The filter, over the scan's outputs.
    filter: Arc<dyn PhysicalExpr>,
    covering: Arc<Covering>,
}

impl CountInScan for Matching {
    const NAME: &'static str = "CountMatchingExec";

    fn describe(&self, schema: &SchemaRef, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "filter={}, counts={}",
            self.filter,
            schema.fields().len()
        )
    }

    fn execute(
        &self,
        scan: &StrataScanExec,
        partition: usize,
        schema: SchemaRef,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        scan.execute_count_matching(
            partition,
            Arc::clone(&self.filter),
            Arc::clone(&self.covering),
            schema,
        )
    }
}

/// The replacement for `node`, when it is a partial `count(*)` without grouping over a filter
/// over a Strata scan, the filter reading only path columns and having a negation pruning can
/// use.
fn replacing(node: &Arc<dyn ExecutionPlan>) -> Option<CountMatchingExec> {
    let aggregate = node.downcast_ref::<AggregateExec>()?;
    let simple = *aggregate.mode() == AggregateMode::Partial
        && aggregate.limit_options().is_none()
        && aggregate.group_expr().is_empty()
        && aggregate.filter_expr().iter().all(Option::is_none)
        && aggregate.aggr_expr().iter().all(|a| is_count_star(a));
    let schema = aggregate.schema();
    let counts_are_int64 = schema.fields().len() == aggregate.aggr_expr().len()
        && schema
            .fields()
            .iter()
            .all(|f| f.data_type() == &DataType::Int64);
    if !simple || !counts_are_int64 {
        return None;
    }
    // A scan left with one partition gets a round-robin repartition above its filter.
    let mut input = aggregate.input();
    while input.is::<RepartitionExec>() || input.is::<CooperativeExec>() {
        input = input.children().into_iter().next()?;
    }
    let filter = input.downcast_ref::<FilterExec>()?;
    let scan_node = Arc::clone(scan_below(filter.input())?);
    let scan = scan_node.downcast_ref::<StrataScanExec>()?;
    if scan.limit().is_some() || scan.reduction().is_some() {
        return None;
    }
    let reads_paths_only = collect_columns(filter.predicate())
        .iter()
        .all(|c| matches!(scan.outputs().get(c.index()), Some(ScanOutput::Path(_))));
    if !reads_paths_only {
        return None;
    }
    let covering = Covering::new(filter.predicate(), &scan.schema())?;
    let matching = Matching {
        filter: Arc::clone(filter.predicate()),
        covering: Arc::new(covering),
    };
    Some(PartialCountExec::new(scan_node, matching, schema))
}
