//! Planning JSON path syntax: `data.a.b`, `data->'a'->>'b'`, `data->'arr'->0`.
//!
//! Paths become `strata_path(data, '<encoded path>', '<mode>')` calls whose SQL type is fixed
//! here from the table snapshot's path facts (see `paths`); a path no part stores reads as
//! mixed text, NULL in every row. `->` / `->>` on anything that is not a table document (an array element,
//! a sub-result) fall back to `json_get` / `json_get_text` over JSON text.

use std::sync::Arc;

use datafusion::arrow::datatypes::Field;
use datafusion::common::{Column, DFSchema, ExprSchema, Result, ScalarValue, TableReference};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, ScalarUDF, lit};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use strata_json::JsonPath;

use crate::jsonb::JsonbConcat;
use crate::paths::PathMode;
use crate::table::{PathRegistry, TABLE_FIELD_METADATA};
use crate::udf::{JsonGet, StrataPath};

#[derive(Debug)]
pub struct JsonPathPlanner {
    registry: PathRegistry,
    strata_path: Arc<ScalarUDF>,
    json_get: Arc<ScalarUDF>,
    json_get_text: Arc<ScalarUDF>,
    jsonb_concat: Arc<ScalarUDF>,
}

impl JsonPathPlanner {
    pub fn new(registry: PathRegistry) -> Self {
        JsonPathPlanner {
            registry,
            strata_path: Arc::new(ScalarUDF::new_from_impl(StrataPath::new())),
            json_get: Arc::new(ScalarUDF::new_from_impl(JsonGet::new(false))),
            json_get_text: Arc::new(ScalarUDF::new_from_impl(JsonGet::new(true))),
            jsonb_concat: Arc::new(ScalarUDF::new_from_impl(JsonbConcat::new())),
        }
    }

    /// The `strata_path` call for `path` of the document column, typed for `mode` (the path's
    /// natural mode when None).
    fn path_expr(
        &self,
        table: &str,
        document: Column,
        path: &JsonPath,
        mode: Option<PathMode>,
    ) -> Expr {
        let encoded = path.encode();
        let index = self
            .registry
            .read()
            .ok()
            .and_then(|r| r.get(table).cloned());
        let Some(index) = index else {
            return Expr::Literal(ScalarValue::Utf8(None), None);
        };
        // A path no part stores still reads through the scan (every part answers NULL without
        // reading anything), so that its column is named after the path, not `Utf8(NULL)`.
        let mode = mode.unwrap_or_else(|| index.natural_mode(&encoded).unwrap_or(PathMode::Mixed));
        Expr::ScalarFunction(ScalarFunction::new_udf(
            self.strata_path.clone(),
            vec![Expr::Column(document), lit(encoded), lit(mode.as_str())],
        ))
    }

    /// If `expr` is a table document or a `->` path of one: (table, document column, path).
    fn document_path(&self, expr: &Expr, schema: &DFSchema) -> Option<(String, Column, JsonPath)> {
        match expr {
            Expr::Column(c) => {
                let field = schema.field_from_column(c).ok()?;
                let table = field.metadata().get(TABLE_FIELD_METADATA)?.clone();
                Some((table, c.clone(), JsonPath::default()))
            }
            Expr::ScalarFunction(f) if f.func.name() == StrataPath::NAME => {
                let [
                    Expr::Column(c),
                    Expr::Literal(path, _),
                    Expr::Literal(mode, _),
                ] = f.args.as_slice()
                else {
                    return None;
                };
                let (ScalarValue::Utf8(Some(path)), ScalarValue::Utf8(Some(mode))) = (path, mode)
                else {
                    return None;
                };
                if mode != PathMode::Json.as_str() {
                    return None;
                }
                let field = schema.field_from_column(c).ok()?;
                let table = field.metadata().get(TABLE_FIELD_METADATA)?.clone();
                Some((table, c.clone(), JsonPath::decode(path)))
            }
            _ => None,
        }
    }
}

/// A column of the JSON type (`CAST(… AS JSON)`'s, a `RETURNING` list's document), whose
/// `||` is jsonb concatenation as a table document's is.
fn is_json_column(expr: &Expr, schema: &DFSchema) -> bool {
    let Expr::Column(column) = expr else {
        return false;
    };
    schema
        .field_from_column(column)
        .is_ok_and(|field| field.metadata().contains_key(crate::JSON_FIELD_METADATA))
}

fn literal_key(expr: &Expr) -> Option<Result<String, i64>> {
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _) => {
            Some(Ok(s.clone()))
        }
        Expr::Literal(ScalarValue::Int64(Some(i)), _) => Some(Err(*i)),
        Expr::Literal(ScalarValue::Int32(Some(i)), _) => Some(Err(i64::from(*i))),
        _ => None,
    }
}

impl ExprPlanner for JsonPathPlanner {
    fn plan_compound_identifier(
        &self,
        field: &Field,
        qualifier: Option<&TableReference>,
        nested_names: &[String],
    ) -> Result<PlannerResult<Vec<Expr>>> {
        let Some(table) = field.metadata().get(TABLE_FIELD_METADATA) else {
            return Ok(PlannerResult::Original(vec![]));
        };
        let document = Column::new(qualifier.cloned(), field.name());
        let path = JsonPath::new(nested_names.to_vec());
        Ok(PlannerResult::Planned(
            self.path_expr(table, document, &path, None),
        ))
    }

    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let as_text = match expr.op {
            BinaryOperator::Arrow => false,
            BinaryOperator::LongArrow => true,
            // `data || '{…}'`: PostgreSQL's jsonb concatenation when the left side is a
            // document (or a `->` path of one), not string concatenation.
            BinaryOperator::StringConcat
                if self.document_path(&expr.left, schema).is_some()
                    || is_json_column(&expr.left, schema) =>
            {
                return Ok(PlannerResult::Planned(Expr::ScalarFunction(
                    ScalarFunction::new_udf(self.jsonb_concat.clone(), vec![expr.left, expr.right]),
                )));
            }
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let Some(key) = literal_key(&expr.right) else {
            return Ok(PlannerResult::Original(expr));
        };
        let mode = if as_text {
            PathMode::Text
        } else {
            PathMode::Json
        };
        if let (Ok(key), Some((table, document, base))) =
            (&key, self.document_path(&expr.left, schema))
        {
            let path = base.child(key);
            return Ok(PlannerResult::Planned(self.path_expr(
                &table,
                document,
                &path,
                Some(mode),
            )));
        }
        let func = if as_text {
            &self.json_get_text
        } else {
            &self.json_get
        };
        let key_expr = match key {
            Ok(s) => lit(s),
            Err(i) => lit(i),
        };
        // The document column and `->` paths are JSON text already.
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(func.clone(), vec![expr.left, key_expr]),
        )))
    }
}
