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
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::group_count::{is_count_star, replace_nodes};
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
        replace_nodes(plan, CountMatchingExec::replacing)
    }

    fn name(&self) -> &str {
        "strata_count_matching"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The partial phase of `count(*) … WHERE filter` over a Strata scan.
#[derive(Debug)]
pub struct CountMatchingExec {
    scan: Arc<dyn ExecutionPlan>,
    /// The filter, over the scan's outputs.
    filter: Arc<dyn PhysicalExpr>,
    covering: Arc<Covering>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl CountMatchingExec {
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
        let filter = aggregate.input().downcast_ref::<FilterExec>()?;
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
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            scan.properties().output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Some(CountMatchingExec {
            scan: scan_node,
            filter: Arc::clone(filter.predicate()),
            covering: Arc::new(covering),
            schema,
            properties: Arc::new(properties),
        })
    }
}

impl DisplayAs for CountMatchingExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CountMatchingExec: filter={}, counts={}",
            self.filter,
            self.schema.fields().len()
        )
    }
}

impl ExecutionPlan for CountMatchingExec {
    fn name(&self) -> &str {
        "CountMatchingExec"
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
            DataFusionError::Internal("CountMatchingExec needs its scan".to_owned())
        })?;
        Ok(Arc::new(CountMatchingExec {
            scan,
            filter: Arc::clone(&self.filter),
            covering: Arc::clone(&self.covering),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let scan = self.scan.downcast_ref::<StrataScanExec>().ok_or_else(|| {
            DataFusionError::Internal(
                "CountMatchingExec over a plan that is not a Strata scan".to_owned(),
            )
        })?;
        scan.execute_count_matching(
            partition,
            Arc::clone(&self.filter),
            Arc::clone(&self.covering),
            self.schema.clone(),
        )
    }
}
