//! [`PerRowShortCircuit`]: the physical optimizer rule that gives each `FilterExec` predicate
//! and `ProjectionExec` expression that short-circuits over something that can fail a
//! [`PerRowFallback`](super::expr::PerRowFallback).
//!
//! It runs after every other rule (Strata's own rules read `FilterExec` predicates as
//! DataFusion built them) and wraps only what needs it: a filter of comparisons alone, or one
//! without `AND`/`OR`, is left as it is.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;

use super::expr::PerRowFallback;
use super::short_circuits_a_failure;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct PerRowShortCircuit;

impl PhysicalOptimizerRule for PerRowShortCircuit {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(filter) = node.downcast_ref::<FilterExec>()
                && let Some(predicate) = with_fallback(filter.predicate())
            {
                let rebuilt = FilterExecBuilder::from(filter)
                    .with_predicate(predicate)
                    .build()?;
                return Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>));
            }
            if let Some(projection) = node.downcast_ref::<ProjectionExec>()
                && projection
                    .expr()
                    .iter()
                    .any(|e| short_circuits_a_failure(&e.expr))
            {
                let exprs = projection.expr().iter().map(|e| {
                    let expr = with_fallback(&e.expr).unwrap_or_else(|| e.expr.clone());
                    ProjectionExpr::new(expr, e.alias.clone())
                });
                // The schema's metadata (a JSON column's marks) is kept as it was.
                let rebuilt = ProjectionExec::try_new_with_schema_metadata(
                    exprs,
                    projection.input().clone(),
                    &projection.schema(),
                )?;
                return Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "per_row_short_circuit"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` with the per-row fallback, when it can need it (and does not have it yet: the rule
/// may meet a plan twice).
fn with_fallback(expr: &Arc<dyn PhysicalExpr>) -> Option<Arc<dyn PhysicalExpr>> {
    if expr.is::<PerRowFallback>() || !short_circuits_a_failure(expr) {
        return None;
    }
    Some(Arc::new(PerRowFallback::new(expr.clone())))
}
