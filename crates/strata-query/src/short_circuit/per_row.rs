//! Evaluating a boolean expression with each row's own short circuit.
//!
//! Invariant: the answer is the expression's SQL value for each row, with `AND` and `OR`
//! evaluating their right side only for the rows their left side leaves undecided (as
//! PostgreSQL evaluates a row), so it fails only when a row's own value needs an operation that
//! fails. It is only the fallback: the whole-batch evaluation is faster and, when it succeeds,
//! gives the same values.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::boolean::{and_kleene, not, or_kleene};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, NotExpr};
use datafusion::physical_expr_common::utils::scatter;

/// `expr` over `batch` as DataFusion evaluates it, or, when that fails, with each row's own
/// short circuit ([`evaluate`]).
pub(crate) fn evaluate_or_per_row(
    expr: &Arc<dyn PhysicalExpr>,
    batch: &RecordBatch,
) -> Result<ColumnarValue> {
    match expr.evaluate(batch) {
        Ok(value) => Ok(value),
        // A row of the batch failed: evaluated row by row, only a row whose own value needs the
        // failing operation fails, with that operation's error.
        Err(_) => evaluate(expr, batch).map(ColumnarValue::Array),
    }
}

/// `expr` over `batch`, each `AND`, `OR` and `NOT` of it evaluated with each row's own short
/// circuit.
pub(crate) fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        let is_and = match binary.op() {
            Operator::And => true,
            Operator::Or => false,
            _ => return expr.evaluate(batch)?.into_array(batch.num_rows()),
        };
        let left = evaluate(binary.left(), batch)?;
        let left = boolean(&left, binary.left())?;
        // A row is decided by a false left side of AND, a true left side of OR.
        let undecided: BooleanArray = left.iter().map(|v| Some(v != Some(!is_and))).collect();
        if undecided.true_count() == 0 {
            return Ok(Arc::new(left.clone()));
        }
        let rows = filter_record_batch(batch, &undecided)?;
        let right = evaluate(binary.right(), &rows)?;
        // Decided rows get NULL on the right, which their left side overrides.
        let right = scatter(&undecided, boolean(&right, binary.right())?)?;
        let right = boolean(&right, binary.right())?;
        let combined = if is_and {
            and_kleene(left, right)?
        } else {
            or_kleene(left, right)?
        };
        return Ok(Arc::new(combined));
    }
    if let Some(negated) = expr.downcast_ref::<NotExpr>() {
        let inner = evaluate(negated.arg(), batch)?;
        return Ok(Arc::new(not(boolean(&inner, negated.arg())?)?));
    }
    expr.evaluate(batch)?.into_array(batch.num_rows())
}

fn boolean<'a>(array: &'a ArrayRef, expr: &Arc<dyn PhysicalExpr>) -> Result<&'a BooleanArray> {
    array.as_boolean_opt().ok_or_else(|| {
        DataFusionError::Internal(format!(
            "{expr} is of type {}, not boolean",
            array.data_type()
        ))
    })
}
