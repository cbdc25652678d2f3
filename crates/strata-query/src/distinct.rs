//! `count(DISTINCT x)` next to plain counts, rewritten into two spillable group-bys.
//!
//! DataFusion evaluates `count(DISTINCT x)` with one in-memory hash set per group unless every
//! other aggregate of the query is `sum`, `min` or `max` (its own `single_distinct_to_groupby`
//! rule). Event queries almost always pair it with `count(*)` (JSONBench Q2), and those sets
//! neither spill nor respect the memory pool: tens of millions of distinct users fail the
//! query. This rule turns
//!
//! ```text
//! Aggregate: group=[g], aggr=[count(DISTINCT x), count(*), count(y), min(z), max(z)]
//! ```
//! into
//! ```text
//! Projection: g, count(x), coalesce(sum(c1), 0), coalesce(sum(c2), 0), min(m), max(m)  -- original names
//!   Aggregate: group=[g], aggr=[count(x), sum(c1), sum(c2), min(m), max(m)]
//!     Aggregate: group=[g, x], aggr=[count(*) AS c1, count(y) AS c2, min(z) AS m, max(z) AS m']
//! ```
//! Both aggregates are ordinary hash aggregations, which spill under memory pressure.
//!
//! The in-memory sets are faster (DataFusion has specialised string sets), so the rewrite is
//! only applied when the aggregate's input could hold more distinct values than fit in a
//! fraction of the memory pool: its row count, from the manifests of the Strata tables it scans,
//! times [`BYTES_PER_DISTINCT_VALUE`]. Inputs of unknown size (other sources, joins, unnests)
//! are always rewritten.
//!
//! Invariants: the output schema (names, qualifiers, types) is the original one; `count` of an
//! empty input stays 0 (hence `coalesce`); only `count`, `min` and `max` ride along, because
//! re-summing a `sum` could widen decimal types; filters and ordered aggregates are left alone.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams};
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, LogicalPlanBuilder, col, lit};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::rule::strata_table;

const DISTINCT_ALIAS: &str = "__strata_distinct";

/// Generous memory estimate of one distinct value in a hash set (string, hash, slot).
pub const BYTES_PER_DISTINCT_VALUE: u64 = 100;

#[derive(Debug)]
pub struct SpillableCountDistinct {
    /// The session's memory pool size.
    memory_limit: u64,
}

impl SpillableCountDistinct {
    pub fn new(memory_limit: usize) -> Self {
        SpillableCountDistinct {
            memory_limit: memory_limit as u64,
        }
    }

    /// Whether in-memory distinct sets over `input` could outgrow half of the memory pool.
    fn may_outgrow_memory(&self, input: &LogicalPlan) -> bool {
        let mut rows = Some(0u64);
        let _ = input.apply(|node| {
            // Joins and unnests can output more rows than their inputs hold: size unknown.
            if matches!(node, LogicalPlan::Join(_) | LogicalPlan::Unnest(_)) {
                rows = None;
                return Ok(TreeNodeRecursion::Stop);
            }
            if let LogicalPlan::TableScan(scan) = node {
                rows = match (rows, strata_table(scan)) {
                    (Some(total), Some(table)) => {
                        Some(total + table.manifest().parts.iter().map(|p| p.rows).sum::<u64>())
                    }
                    _ => None,
                };
            }
            Ok(TreeNodeRecursion::Continue)
        });
        rows.is_none_or(|rows| {
            rows.saturating_mul(BYTES_PER_DISTINCT_VALUE) > self.memory_limit / 2
        })
    }
}

/// What each original aggregate becomes.
enum Role {
    /// `count(DISTINCT x)`: counted over the inner group-by's `x`.
    Distinct,
    /// `count(...)`: counted in the inner aggregate, summed in the outer one.
    Count,
    /// `min`/`max`: the same function in both aggregates.
    Repeat,
}

/// The aggregate call under any aliases (name-preserving rewrites alias aggregates).
fn aggregate_function(expr: &Expr) -> Option<&AggregateFunction> {
    match expr {
        Expr::AggregateFunction(function) => Some(function),
        Expr::Alias(alias) => aggregate_function(&alias.expr),
        _ => None,
    }
}

fn role(expr: &Expr, distinct_arg: &mut Option<Expr>) -> Option<Role> {
    let Some(AggregateFunction {
        func,
        params:
            AggregateFunctionParams {
                args,
                distinct,
                filter: None,
                order_by,
                ..
            },
    }) = aggregate_function(expr)
    else {
        return None;
    };
    if !order_by.is_empty() {
        return None;
    }
    let name = func.name().to_ascii_lowercase();
    match (name.as_str(), distinct) {
        ("count", true) if args.len() == 1 => {
            if distinct_arg.get_or_insert_with(|| args[0].clone()) == &args[0] {
                Some(Role::Distinct)
            } else {
                None // several distinct arguments: out of scope
            }
        }
        ("count", false) => Some(Role::Count),
        ("min" | "max", _) => Some(Role::Repeat),
        _ => None,
    }
}

impl OptimizerRule for SpillableCountDistinct {
    fn name(&self) -> &str {
        "strata_spillable_count_distinct"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        if matches!(aggregate.group_expr.first(), Some(Expr::GroupingSet(_))) {
            return Ok(Transformed::no(plan));
        }
        let mut distinct_arg = None;
        let roles: Option<Vec<Role>> = aggregate
            .aggr_expr
            .iter()
            .map(|e| role(e, &mut distinct_arg))
            .collect();
        let (Some(roles), Some(distinct_arg)) = (roles, distinct_arg) else {
            return Ok(Transformed::no(plan));
        };
        if !self.may_outgrow_memory(&aggregate.input) {
            return Ok(Transformed::no(plan));
        }
        let schema = aggregate.schema.clone();
        let groups = aggregate.group_expr.len();

        let mut inner_groups = Vec::with_capacity(groups + 1);
        let mut outer_groups = Vec::with_capacity(groups);
        let mut output = Vec::with_capacity(schema.fields().len());
        for (i, group) in aggregate.group_expr.iter().enumerate() {
            let alias = format!("__strata_group_{i}");
            inner_groups.push(group.clone().unalias().alias(&alias));
            outer_groups.push(col(&alias));
            let (qualifier, field) = schema.qualified_field(i);
            output.push(col(&alias).alias_qualified(qualifier.cloned(), field.name()));
        }
        inner_groups.push(distinct_arg.alias(DISTINCT_ALIAS));

        let mut inner_aggregates = Vec::new();
        let mut outer_aggregates = Vec::new();
        for (i, (expr, role)) in aggregate.aggr_expr.iter().zip(&roles).enumerate() {
            let (qualifier, field) = schema.qualified_field(groups + i);
            let Some(function) = aggregate_function(expr) else {
                return Ok(Transformed::no(plan));
            };
            let outer = match role {
                Role::Distinct => aggregate_call(count_udaf(), col(DISTINCT_ALIAS)),
                Role::Count | Role::Repeat => {
                    let alias = format!("__strata_partial_{i}");
                    let mut inner = function.clone();
                    inner.params.distinct = false;
                    inner_aggregates.push(Expr::AggregateFunction(inner).alias(&alias));
                    match role {
                        Role::Count => aggregate_call(sum_udaf(), col(&alias)),
                        _ => aggregate_call(function.func.clone(), col(&alias)),
                    }
                }
            };
            outer_aggregates.push(outer.clone());
            let value = match role {
                Role::Count => datafusion::functions::core::expr_fn::coalesce(vec![
                    outer,
                    lit(ScalarValue::Int64(Some(0))),
                ]),
                _ => outer,
            };
            output.push(value.alias_qualified(qualifier.cloned(), field.name()));
        }

        let inner = Aggregate::try_new(aggregate.input.clone(), inner_groups, inner_aggregates)?;
        let outer = Aggregate::try_new(
            Arc::new(LogicalPlan::Aggregate(inner)),
            outer_groups,
            outer_aggregates,
        )?;
        let rewritten = LogicalPlanBuilder::from(LogicalPlan::Aggregate(outer))
            .project(output)?
            .build()?;
        Ok(Transformed::yes(rewritten))
    }
}

fn aggregate_call(func: Arc<datafusion::logical_expr::AggregateUDF>, arg: Expr) -> Expr {
    Expr::AggregateFunction(AggregateFunction::new_udf(
        func,
        vec![arg],
        false,
        None,
        vec![],
        None,
    ))
}
