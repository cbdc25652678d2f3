//! Physical expressions whose arguments' result fields are worked out once, for expressions
//! planned once and evaluated over one row at a time (`point_update`: `UPDATE … SET` and
//! `ON CONFLICT DO UPDATE` by key).
//!
//! DataFusion's `ScalarFunctionExpr::evaluate` asks each argument for its result field at every
//! evaluation, and an expression without a field of its own (a cast, an operator, a literal)
//! answers by formatting its whole subtree as the field's name and coercing its operands'
//! types again. Over a batch of thousands of rows that is nothing; over the one row of a
//! booking's upsert it was most of the evaluation (the server's CPU per booking fell 3 % without
//! it, `bench/booking.py` at 16 clients). Wrapping
//! every argument in [`KnownField`] answers with the field worked out when the expression was
//! planned: the schema an expression is evaluated against is the one it was planned for.
//!
//! Invariant: a wrapped expression evaluates exactly as the expression it wraps.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

/// `inner`, whose result field over the schema it was planned for is `field`.
#[derive(Debug, Eq)]
pub(crate) struct KnownField {
    inner: Arc<dyn PhysicalExpr>,
    field: FieldRef,
}

impl PartialEq for KnownField {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner) && self.field == other.field
    }
}

impl std::hash::Hash for KnownField {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.field.hash(state);
    }
}

/// `expression` with each argument of each of its nodes wrapped in a [`KnownField`] for
/// `schema` (the schema it will be evaluated against).
pub(crate) fn with_known_fields(
    expression: Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Arc<dyn PhysicalExpr>> {
    let children = expression.children();
    if children.is_empty() {
        return Ok(expression);
    }
    let known = children
        .into_iter()
        .map(|child| {
            let child = with_known_fields(Arc::clone(child), schema)?;
            let field = child.return_field(schema)?;
            Ok(Arc::new(KnownField {
                inner: child,
                field,
            }) as Arc<dyn PhysicalExpr>)
        })
        .collect::<Result<Vec<_>>>()?;
    expression.with_new_children(known)
}

impl fmt::Display for KnownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for KnownField {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.field.data_type().clone())
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(self.field.is_nullable())
    }

    fn return_field(&self, _input_schema: &Schema) -> Result<FieldRef> {
        Ok(Arc::clone(&self.field))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        self.inner.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match <[Arc<dyn PhysicalExpr>; 1]>::try_from(children) {
            Ok([inner]) => Ok(Arc::new(KnownField {
                inner,
                field: Arc::clone(&self.field),
            })),
            Err(children) => Err(datafusion::error::DataFusionError::Internal(format!(
                "a known field has one child, not {}",
                children.len()
            ))),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use arrow::array::{Array, AsArray, StringArray};
    use arrow::datatypes::Field;
    use datafusion::common::DFSchema;
    use datafusion::prelude::SessionContext;

    use super::*;

    #[test]
    fn an_expression_with_known_fields_evaluates_as_the_expression_and_asks_no_argument_again() {
        let context = SessionContext::new();
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Utf8, true)]));
        let qualified = DFSchema::try_from(schema.as_ref().clone()).unwrap();
        let logical = context
            .parse_sql_expr(
                "concat(upper(a), '-', CAST(length(a) + 1 AS VARCHAR))",
                &qualified,
            )
            .unwrap();
        let planned = context.create_physical_expr(logical, &qualified).unwrap();
        let known = with_known_fields(Arc::clone(&planned), &schema).unwrap();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringArray::from(vec![
                Some("ab"),
                None,
                Some("xyz"),
            ]))],
        )
        .unwrap();
        let evaluate = |expression: &Arc<dyn PhysicalExpr>| {
            let value = expression.evaluate(&batch).unwrap().into_array(3).unwrap();
            let value = arrow::compute::cast(&value, &DataType::Utf8).unwrap();
            let text = value.as_string::<i32>();
            (0..3)
                .map(|i| (!text.is_null(i)).then(|| text.value(i).to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(evaluate(&known), evaluate(&planned));
        assert_eq!(evaluate(&known)[0].as_deref(), Some("AB-3"));
        assert_eq!(
            known.return_field(&schema).unwrap(),
            planned.return_field(&schema).unwrap()
        );
        // Every argument answers its field from what it was planned with: the schema given
        // now is not even looked at.
        let empty = Schema::empty();
        for argument in known.children() {
            assert!(argument.is::<KnownField>());
            assert!(argument.return_field(&empty).is_ok());
        }
    }
}
