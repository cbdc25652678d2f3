//! Filters whose failure never depends on which rows share a batch.
//!
//! DataFusion evaluates `a OR b` over a batch by evaluating `b` for every row unless `a` is
//! true for all of them or false for at most a fifth of them (its pre-selection), and `a AND b`
//! alike. So `data.y = 'abc' OR CAST(data.y AS DOUBLE) > 97` fails on the row holding `'abc'`
//! when it shares a batch with rows the left side leaves undecided, and answers when it does
//! not: whether a statement fails would depend on unrelated documents, and on how the scan
//! happened to cut its batches. PostgreSQL evaluates each row's `OR` on that row alone.
//!
//! Module map: `per_row` (an expression evaluated with each row's own short circuit), `expr`
//! (the expression that falls back to it when its batch evaluation fails), `rule` (the
//! physical optimizer rule that gives that fallback to each such `AND`, `OR` and `NOT`, at any
//! depth, in `FilterExec` predicates, `ProjectionExec` expressions, aggregates' `FILTER
//! (WHERE …)` clauses, the arguments of aggregate functions and of window functions, and hash
//! and nested-loop join conditions), `seal` (the rule before DataFusion's `ProjectionPushdown`
//! that keeps a nested-loop join's guarded operands under their guard). The scan's own filters
//! (in the decoder, and before documents are built) call `per_row` directly
//! (`scan::reduce::rows_kept`).
//!
//! Invariant: the fallback runs only after the batch evaluation failed, and a row fails only
//! when its own value needs an operation that fails (a cast of `'abc'` to a double on a row
//! the left side of its `OR` left undecided). Not covered, keeping DataFusion's batch
//! evaluation: windows' own `FILTER` clauses, window functions DataFusion reversed, and the
//! conditions of sort-merge joins (planned only when a session turns `prefer_hash_join` off)
//! and of symmetric hash joins (planned only over unbounded inputs, which Strata's scans are
//! not) (ADR 0023).

mod expr;
mod per_row;
mod rule;
mod seal;

use std::sync::Arc;

use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr,
};

pub(crate) use per_row::evaluate_or_per_row;
pub(crate) use rule::PerRowShortCircuit;
pub(crate) use seal::SealJoinShortCircuits;

/// Whether `expr` cannot fail on any value: comparisons, `AND`, `OR`, `NOT`, `IN`, `LIKE`,
/// `IS [NOT] NULL`, columns and literals. A cast or a function may fail on a value (`'ba'` as
/// a double).
pub(crate) fn cannot_fail(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let node = match expr.downcast_ref::<BinaryExpr>() {
        Some(binary) => {
            binary.op().supports_propagation()
                || binary.op().is_logic_operator()
                || matches!(
                    binary.op(),
                    Operator::LikeMatch
                        | Operator::ILikeMatch
                        | Operator::NotLikeMatch
                        | Operator::NotILikeMatch
                )
        }
        None => {
            expr.is::<Column>()
                || expr.is::<Literal>()
                || expr.is::<InListExpr>()
                || expr.is::<LikeExpr>()
                || expr.is::<NotExpr>()
                || expr.is::<IsNullExpr>()
                || expr.is::<IsNotNullExpr>()
        }
    };
    node && expr.children().into_iter().all(cannot_fail)
}

/// Whether evaluating `expr` row by row can succeed where its batch evaluation fails: it
/// short-circuits (`AND`/`OR`, through `NOT`) over something that can fail.
fn short_circuits_a_failure(expr: &Arc<dyn PhysicalExpr>) -> bool {
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>()
        && binary.op().is_logic_operator()
    {
        return !cannot_fail(expr);
    }
    if let Some(negated) = expr.downcast_ref::<NotExpr>() {
        return short_circuits_a_failure(negated.arg());
    }
    false
}
