//! [`PerRowFallback`]: an expression evaluated as DataFusion evaluates it, and again with each
//! row's own short circuit (`super::per_row`) when that fails.
//!
//! Invariant: it is its inner expression in every respect but the fallback — same type,
//! nullability, bounds and display (plans and `EXPLAIN` read as before) — so optimizer rules
//! and statistics that look through it see what they saw.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::datatypes::{FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::sort_properties::ExprProperties;
use datafusion::physical_expr::PhysicalExpr;

use super::per_row;

#[derive(Debug, Eq)]
pub(super) struct PerRowFallback {
    inner: Arc<dyn PhysicalExpr>,
}

impl PerRowFallback {
    pub(super) fn new(inner: Arc<dyn PhysicalExpr>) -> Self {
        PerRowFallback { inner }
    }
}

impl PartialEq for PerRowFallback {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl Hash for PerRowFallback {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl fmt::Display for PerRowFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for PerRowFallback {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        per_row::evaluate_or_per_row(&self.inner, batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match <[_; 1]>::try_from(children) {
            Ok([inner]) => Ok(Arc::new(PerRowFallback::new(inner))),
            Err(children) => {
                internal_err!("a per-row fallback takes one child, not {}", children.len())
            }
        }
    }

    fn evaluate_bounds(&self, children: &[&Interval]) -> Result<Interval> {
        match children {
            [inner] => Ok((*inner).clone()),
            _ => internal_err!("a per-row fallback takes one child, not {}", children.len()),
        }
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        children: &[&Interval],
    ) -> Result<Option<Vec<Interval>>> {
        match children {
            [inner] => Ok(inner.intersect(interval)?.map(|narrowed| vec![narrowed])),
            _ => internal_err!("a per-row fallback takes one child, not {}", children.len()),
        }
    }

    fn get_properties(&self, children: &[ExprProperties]) -> Result<ExprProperties> {
        match children {
            [inner] => Ok(inner.clone()),
            _ => internal_err!("a per-row fallback takes one child, not {}", children.len()),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}
