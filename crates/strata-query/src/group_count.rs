//! `GROUP BY <path> ... count(*)` counted by dictionary key inside the scan.
//!
//! Counting events per type, collection or status is the commonest question asked of event
//! data, and the grouped path is almost always a low-cardinality string stored
//! dictionary-encoded. DataFusion's partial aggregation would hash one materialised string per
//! row; [`CountByKey`] replaces that first phase, when it sits directly on a Strata scan, with
//! [`CountByKeyExec`], which counts dictionary keys and resolves each key to its string once
//! per column chunk. The final phase is DataFusion's own and is untouched, so results, NULL
//! grouping and ordering are exactly those of the plan it replaces.
//!
//! Invariant: the replacement produces the replaced node's schema, partitioning and partial
//! state (one Int64 count per aggregate), and only replaces `count(*)`/`count(<literal>)`
//! without DISTINCT, FILTER, ordering or grouping sets.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::paths::PathMode;
use crate::scan::{ScanOutput, StrataScanExec};

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct CountByKey;

impl PhysicalOptimizerRule for CountByKey {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_nodes(plan, CountByKeyExec::replacing)
    }

    fn name(&self) -> &str {
        "strata_count_by_key"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with every node that `replacing` has a replacement for replaced, bottom-up: the
/// physical rules that swap a partial aggregation over a Strata scan for a node of their own.
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

/// The partial phase of `GROUP BY <string path> ... count(*)` over a Strata scan.
#[derive(Debug)]
pub struct CountByKeyExec {
    scan: Arc<dyn ExecutionPlan>,
    /// The scan output grouped by.
    group: usize,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

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

impl CountByKeyExec {
    /// The replacement for `node`, when it is a partial count-only aggregation grouped by one
    /// string path that a Strata scan produces directly.
    fn replacing(node: &Arc<dyn ExecutionPlan>) -> Option<CountByKeyExec> {
        let aggregate = node.downcast_ref::<AggregateExec>()?;
        let scan = aggregate.input().downcast_ref::<StrataScanExec>()?;
        let group_by = aggregate.group_expr();
        let simple = *aggregate.mode() == AggregateMode::Partial
            && aggregate.limit_options().is_none()
            && group_by.is_single()
            && group_by.expr().len() == 1
            && aggregate.filter_expr().iter().all(Option::is_none)
            && aggregate.aggr_expr().iter().all(|a| is_count_star(a));
        if !simple || scan.limit().is_some() {
            return None;
        }
        let column = group_by.expr()[0].0.downcast_ref::<Column>()?;
        let output = scan.outputs().get(column.index())?;
        let ScanOutput::Path(path) = output else {
            return None;
        };
        if !matches!(
            path.mode,
            PathMode::String | PathMode::Text | PathMode::Mixed
        ) {
            return None;
        }
        let schema = aggregate.schema();
        let counts_are_int64 = schema
            .fields()
            .iter()
            .skip(1)
            .all(|f| f.data_type() == &DataType::Int64);
        if schema.fields().len() != 1 + aggregate.aggr_expr().len() || !counts_are_int64 {
            return None;
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            scan.properties().output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Some(CountByKeyExec {
            scan: aggregate.input().clone(),
            group: column.index(),
            schema,
            properties: Arc::new(properties),
        })
    }

    fn strata_scan(&self) -> Result<&StrataScanExec> {
        self.scan.downcast_ref::<StrataScanExec>().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(
                "CountByKeyExec over a plan that is not a Strata scan".to_owned(),
            )
        })
    }
}

impl DisplayAs for CountByKeyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CountByKeyExec: gby=[{}], counts={}",
            self.schema.field(0).name(),
            self.schema.fields().len() - 1
        )
    }
}

impl ExecutionPlan for CountByKeyExec {
    fn name(&self) -> &str {
        "CountByKeyExec"
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
        let scan = children.into_iter().next().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("CountByKeyExec needs its scan".to_owned())
        })?;
        Ok(Arc::new(CountByKeyExec {
            scan,
            group: self.group,
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.strata_scan()?
            .execute_count_by(partition, self.group, self.schema.clone())
    }
}
