//! [`SealJoinShortCircuits`]: keeps DataFusion's `ProjectionPushdown` from computing, below a
//! nested-loop join, an operand that the join condition's own short circuit guards.
//!
//! `ProjectionPushdown` moves each part of a nested-loop join's condition that reads one side
//! only into a projection under the join, evaluated for every row of that side: in
//! `a.y = 'abc' OR CAST(a.y AS DOUBLE) > length(b.y) + 96` the cast becomes a column of `a`,
//! computed for the row holding `'abc'` too, so the statement fails whatever its `OR` decides.
//! This rule runs before it and replaces each `AND`, `OR` and `NOT` of such a condition that
//! short-circuits over something that can fail with a [`Sealed`] expression: to the optimizer's
//! tree walks its children are only the columns it reads, so nothing inside it can be moved
//! away from its guard; it is evaluated with each row's own short circuit when its batch
//! evaluation fails, as [`PerRowFallback`](super::expr::PerRowFallback) is.
//!
//! Invariant: a sealed expression is its inner expression with every column it reads replaced
//! by its children, in order: rules that renumber or replace the columns of a join's condition
//! (through `with_new_children`) change the inner expression with them.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::datatypes::{FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::NestedLoopJoinExec;

use super::rule::rebuild_nested_loop_join;
use super::{per_row, short_circuits_a_failure};

/// The physical optimizer rule; see the module documentation. It goes before DataFusion's
/// first `ProjectionPushdown`.
#[derive(Debug, Default)]
pub(crate) struct SealJoinShortCircuits;

impl PhysicalOptimizerRule for SealJoinShortCircuits {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let rebuilt = match node.downcast_ref::<NestedLoopJoinExec>() {
                Some(join) => rebuild_nested_loop_join(join, sealed)?,
                None => None,
            };
            Ok(match rebuilt {
                Some(rebuilt) => Transformed::yes(rebuilt),
                None => Transformed::no(node),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "seal_join_short_circuits"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` with its outermost short circuits over something that can fail sealed (what is
/// inside one is sealed with it); None when it has none.
fn sealed(expr: &Arc<dyn PhysicalExpr>) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let rewritten = expr.clone().transform_down(|node| {
        if node.is::<Sealed>() {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        Ok(match short_circuits_a_failure(&node) {
            true => Transformed::new(
                Arc::new(Sealed::new(node)?) as Arc<dyn PhysicalExpr>,
                true,
                TreeNodeRecursion::Jump,
            ),
            false => Transformed::no(node),
        })
    })?;
    Ok(rewritten.transformed.then_some(rewritten.data))
}

#[derive(Debug, Eq)]
pub(super) struct Sealed {
    inner: Arc<dyn PhysicalExpr>,
    /// What `inner` reads in place of columns, in order of first appearance: its children.
    reads: Vec<Arc<dyn PhysicalExpr>>,
}

impl Sealed {
    fn new(inner: Arc<dyn PhysicalExpr>) -> Result<Self> {
        let mut reads: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        inner.apply(|node| {
            if node.is::<Column>() && !reads.iter().any(|read| read.as_ref() == node.as_ref()) {
                reads.push(node.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(Sealed { inner, reads })
    }
}

impl PartialEq for Sealed {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl Hash for Sealed {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl fmt::Display for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for Sealed {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        per_row::evaluate_or_per_row(&self.inner, batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.reads.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if children.len() != self.reads.len() {
            return internal_err!(
                "a sealed expression reads {} columns, not {}",
                self.reads.len(),
                children.len()
            );
        }
        let inner = self
            .inner
            .clone()
            .transform_down(|node| {
                Ok(
                    match self.reads.iter().position(|r| r.as_ref() == node.as_ref()) {
                        Some(read) => {
                            Transformed::new(children[read].clone(), true, TreeNodeRecursion::Jump)
                        }
                        None => Transformed::no(node),
                    },
                )
            })?
            .data;
        Ok(Arc::new(Sealed {
            inner,
            reads: children,
        }))
    }

    fn is_volatile_node(&self) -> bool {
        // What is sealed is hidden from the walks that look for volatile nodes.
        self.inner
            .exists(|node| Ok(node.is_volatile_node()))
            .unwrap_or(true)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, lit};

    use super::*;

    fn column(name: &str, index: usize) -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new(name, index))
    }

    /// `a = 'abc' OR CAST(b AS DOUBLE) > CAST(a AS DOUBLE)` over the given columns.
    fn guarded(a: Arc<dyn PhysicalExpr>, b: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        let double = arrow::datatypes::DataType::Float64;
        let cast = |e| Arc::new(CastExpr::new(e, double.clone(), None)) as Arc<dyn PhysicalExpr>;
        let equal = Arc::new(BinaryExpr::new(a.clone(), Operator::Eq, lit("abc")));
        let greater = Arc::new(BinaryExpr::new(cast(b), Operator::Gt, cast(a)));
        Arc::new(BinaryExpr::new(equal, Operator::Or, greater))
    }

    #[test]
    fn a_sealed_expression_shows_only_its_columns_and_follows_their_renumbering() {
        let sealed = sealed(&guarded(column("a", 0), column("b", 1)))
            .unwrap()
            .expect("an OR over casts is sealed");
        let children: Vec<String> = sealed.children().iter().map(|c| c.to_string()).collect();
        assert_eq!(children, ["a@0", "b@1"]);
        // Swapped, as a join's sides are: each column is replaced once, by its own child.
        let swapped = sealed
            .clone()
            .with_new_children(vec![column("a", 1), column("b", 0)])
            .unwrap();
        let expected = guarded(column("a", 1), column("b", 0));
        assert_eq!(swapped.to_string(), expected.to_string());
        let inner = &swapped.downcast_ref::<Sealed>().unwrap().inner;
        assert!(inner.as_ref() == expected.as_ref());
        assert!(sealed.with_new_children(vec![column("a", 0)]).is_err());
    }

    #[test]
    fn what_cannot_fail_is_not_sealed() {
        let equal = Arc::new(BinaryExpr::new(column("a", 0), Operator::Eq, lit("abc")));
        let other = Arc::new(BinaryExpr::new(
            column("b", 1),
            Operator::Eq,
            column("a", 0),
        ));
        let safe = Arc::new(BinaryExpr::new(equal, Operator::Or, other)) as Arc<dyn PhysicalExpr>;
        assert!(sealed(&safe).unwrap().is_none());
    }
}
