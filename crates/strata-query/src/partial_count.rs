//! The node our count rules put in place of the partial phase of a count-only aggregation
//! that reads a Strata scan: [`PartialCountExec`], generic over how the scan counts
//! ([`CountInScan`]: by dictionary key in `group_count`, rows matching a filter in
//! `count_matching`, runs of distinct values in `distinct_runs`).
//!
//! Invariant: the node has the replaced aggregation's schema (its partial state: Int64 counts,
//! and for `distinct_runs` the lists of values a count of distinct values merges) and the
//! scan's partitioning, and emits once per partition; DataFusion's final phase above it is
//! untouched.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::paths::PathMode;
use crate::scan::{ScanOutput, StrataScanExec};

/// How a [`PartialCountExec`] has its scan count.
pub trait CountInScan: fmt::Debug + Send + Sync + 'static {
    /// The node's name in plans.
    const NAME: &'static str;

    /// What follows the name in `EXPLAIN`; `schema` is the node's.
    fn describe(&self, schema: &SchemaRef, f: &mut fmt::Formatter) -> fmt::Result;

    /// One partition's counts, as batches of `schema`.
    fn execute(
        &self,
        scan: &StrataScanExec,
        partition: usize,
        schema: SchemaRef,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream>;
}

/// The partial phase of a count-only aggregation, counted by the Strata scan below it.
#[derive(Debug)]
pub struct PartialCountExec<C> {
    scan: Arc<dyn ExecutionPlan>,
    count: Arc<C>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl<C: CountInScan> PartialCountExec<C> {
    /// `scan` (a Strata scan) counting as `count`, in place of an aggregation of `schema`.
    pub(crate) fn new(scan: Arc<dyn ExecutionPlan>, count: C, schema: SchemaRef) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            scan.properties().output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        PartialCountExec {
            scan,
            count: Arc::new(count),
            schema,
            properties: Arc::new(properties),
        }
    }
}

impl<C: CountInScan> DisplayAs for PartialCountExec<C> {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: ", C::NAME)?;
        self.count.describe(&self.schema, f)
    }
}

impl<C: CountInScan> ExecutionPlan for PartialCountExec<C> {
    fn name(&self) -> &str {
        C::NAME
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.scan]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let scan = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal(format!("{} needs its scan", C::NAME)))?;
        Ok(Arc::new(PartialCountExec {
            scan,
            count: Arc::clone(&self.count),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let scan = self.scan.downcast_ref::<StrataScanExec>().ok_or_else(|| {
            DataFusionError::Internal(format!("{} over a plan that is not a Strata scan", C::NAME))
        })?;
        self.count
            .execute(scan, partition, self.schema.clone(), context)
    }
}

/// Whether `aggregate` is `count(*)` or `count(<non-NULL literal>)`, plain.
pub(crate) fn is_count_star(
    aggregate: &datafusion::physical_expr::aggregate::AggregateFunctionExpr,
) -> bool {
    aggregate.fun().name() == "count"
        && !aggregate.is_distinct()
        && aggregate.order_bys().is_empty()
        && aggregate.expressions().iter().all(|e| {
            e.downcast_ref::<Literal>()
                .is_some_and(|l| !l.value().is_null())
        })
}

/// `plan` with every node that `replacing` has a replacement for replaced, bottom-up.
pub(crate) fn replace_nodes<E: ExecutionPlan + 'static>(
    plan: Arc<dyn ExecutionPlan>,
    replacing: impl Fn(&Arc<dyn ExecutionPlan>) -> Option<E>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(match replacing(&node) {
            Some(replacement) => Transformed::yes(Arc::new(replacement) as _),
            None => Transformed::no(node),
        })
    })
    .data()
}

/// `node` as the partial phase of an aggregation grouped by one column, with the Strata scan it
/// reads directly and the scan's output it groups by: no FILTER, grouping sets or limit on the
/// aggregation, no limit on the scan. Which aggregates it computes is the caller's to check.
pub(crate) fn partial_grouping_over_scan(
    node: &Arc<dyn ExecutionPlan>,
) -> Option<(&AggregateExec, &StrataScanExec, usize)> {
    let aggregate = node.downcast_ref::<AggregateExec>()?;
    let scan = aggregate.input().downcast_ref::<StrataScanExec>()?;
    let group_by = aggregate.group_expr();
    let simple = *aggregate.mode() == AggregateMode::Partial
        && aggregate.limit_options().is_none()
        && group_by.is_single()
        && group_by.expr().len() == 1
        && aggregate.filter_expr().iter().all(Option::is_none);
    if !simple || scan.limit().is_some() {
        return None;
    }
    let group = group_by.expr()[0].0.downcast_ref::<Column>()?.index();
    Some((aggregate, scan, group))
}

/// The encoded path of the scan's output `column` when it is a path read as a string.
pub(crate) fn string_path(scan: &StrataScanExec, column: usize) -> Option<&str> {
    match scan.outputs().get(column)? {
        ScanOutput::Path(path)
            if matches!(
                path.mode,
                PathMode::String | PathMode::Text | PathMode::Mixed
            ) =>
        {
            Some(path.path.as_str())
        }
        _ => None,
    }
}
