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
use datafusion::execution::TaskContext;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};

use crate::partial_count::{
    CountInScan, PartialCountExec, is_count_star, partial_grouping_over_scan, replace_nodes,
    string_path,
};
use crate::scan::StrataScanExec;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct CountByKey;

impl PhysicalOptimizerRule for CountByKey {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_nodes(plan, replacing)
    }

    fn name(&self) -> &str {
        "strata_count_by_key"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The partial phase of `GROUP BY <string path> ... count(*)` over a Strata scan.
pub type CountByKeyExec = PartialCountExec<ByKey>;

/// Counting by the dictionary keys of one scan output.
#[derive(Debug)]
pub struct ByKey {
    /// The scan output grouped by.
    group: usize,
}

impl CountInScan for ByKey {
    const NAME: &'static str = "CountByKeyExec";

    fn describe(&self, schema: &SchemaRef, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "gby=[{}], counts={}",
            schema.field(0).name(),
            schema.fields().len() - 1
        )
    }

    fn execute(
        &self,
        scan: &StrataScanExec,
        partition: usize,
        schema: SchemaRef,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        scan.execute_count_by(partition, self.group, schema)
    }
}

/// The replacement for `node`, when it is a partial count-only aggregation grouped by one
/// string path that a Strata scan produces directly.
fn replacing(node: &Arc<dyn ExecutionPlan>) -> Option<CountByKeyExec> {
    let (aggregate, scan, group) = partial_grouping_over_scan(node)?;
    if !aggregate.aggr_expr().iter().all(|a| is_count_star(a)) {
        return None;
    }
    string_path(scan, group)?;
    let schema = aggregate.schema();
    let counts_are_int64 = schema
        .fields()
        .iter()
        .skip(1)
        .all(|f| f.data_type() == &DataType::Int64);
    if schema.fields().len() != 1 + aggregate.aggr_expr().len() || !counts_are_int64 {
        return None;
    }
    Some(PartialCountExec::new(
        aggregate.input().clone(),
        ByKey { group },
        schema,
    ))
}
