//! `UPDATE t SET data = <expression> WHERE <key path> = <value>` without planning a query
//! (ADR 0017, "prepared point statements"): the document is found as a point read finds it
//! ([`crate::point_read`], the statement's snapshot or its transaction's own changes), and the
//! new document is the expression evaluated over it as a physical expression, planned once per
//! expression text and kept by the process.
//!
//! Invariant: the [`Change`] is the one the planned shadow query (`crate::dml`) would find. So
//! only the shape a point read recognises is taken — the table by its name, no alias, the
//! `WHERE` one equality of the table's key path with a literal compared as a key — and the
//! expression is evaluated over the document as JSON text (`data` of the JSON type, as
//! `CAST(… AS JSON)` makes it), whose paths, casts, `||` and `jsonb_set` read it as the planned
//! statement's rewritten columns do. Anything else is left to the planned path (None).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema};
use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Expr, TableFactor, Update};
use strata_json::{KeyValue, TableKey};

use crate::QueryError;
use crate::point_read::{PointRead, PointValue};
use crate::table::{DATA_COLUMN, DataDirSchema};
use crate::udf::json_field;

/// Expressions kept at most; past it the cache starts over (statement texts of one
/// application are few; a client generating endless distinct texts only loses the cache).
const MAX_CACHED_EXPRESSIONS: usize = 1024;

/// The new documents of `update` (on `table`, keyed by `key`) when it is a point update
/// (module docs): `(old key, new document text)`, at most one; None when it must be planned.
pub(crate) async fn new_documents(
    context: &SessionContext,
    update: &Update,
    table: &str,
    key: &TableKey,
    value: &Expr,
) -> Result<Option<Vec<(KeyValue, Option<String>)>>, QueryError> {
    let TableFactor::Table {
        name, alias: None, ..
    } = &update.table.relation
    else {
        return Ok(None);
    };
    let Some(selection) = &update.selection else {
        return Ok(None);
    };
    // The WHERE as a point read would take it: the same recognition, the same comparison.
    let Some(read) = PointRead::parse(&format!(
        "SELECT {DATA_COLUMN} FROM {name} WHERE {selection}"
    )) else {
        return Ok(None);
    };
    let PointValue::Literal(bound) = &read.value else {
        return Ok(None);
    };
    if read.path != key.path {
        return Ok(None);
    }
    let Some(found) = read.key(key.key_type, bound) else {
        return Ok(None);
    };
    let Some(schema) = context
        .catalog(crate::CATALOG)
        .and_then(|catalog| catalog.schema(crate::SCHEMA))
    else {
        return Ok(None);
    };
    let Some(schema) = schema.downcast_ref::<DataDirSchema>() else {
        return Ok(None);
    };
    let Some(result) = schema.point_read(&read, bound).await? else {
        return Ok(None);
    };
    let Some(found) = found else {
        return Ok(Some(Vec::new()));
    };
    let expression = expression(context, table, &value.to_string())?;
    let mut out = Vec::new();
    for batch in &result.batches {
        for document in crate::dml::texts_of(batch, 0)?.into_iter().flatten() {
            let new = evaluate(&expression, &document)?;
            out.push((found.clone(), new));
        }
    }
    Ok(Some(out))
}

/// One document column of the JSON type, named `data` and qualified by the table's name.
fn document_schema(table: &str) -> Result<(Arc<Schema>, DFSchema), QueryError> {
    let schema = Arc::new(Schema::new(vec![json_field(DATA_COLUMN)]));
    let qualified = DFSchema::try_from_qualified_schema(table, &schema)?;
    Ok((schema, qualified))
}

type Compiled = (Arc<Schema>, Arc<dyn PhysicalExpr>);

/// `CAST((text) AS VARCHAR)` over a document of `table`, planned once per process.
fn expression(context: &SessionContext, table: &str, text: &str) -> Result<Compiled, QueryError> {
    static CACHE: OnceLock<Mutex<HashMap<(String, String), Compiled>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let id = (table.to_owned(), text.to_owned());
    if let Some(compiled) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&id)
    {
        return Ok(compiled.clone());
    }
    let (schema, qualified) = document_schema(table)?;
    let logical = context.parse_sql_expr(&format!("CAST(({text}) AS VARCHAR)"), &qualified)?;
    let physical = context.create_physical_expr(logical, &qualified)?;
    let compiled = (schema, physical);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= MAX_CACHED_EXPRESSIONS {
        cache.clear();
    }
    cache.insert(id, compiled.clone());
    Ok(compiled)
}

/// The expression's value for one document (None: NULL).
fn evaluate((schema, expression): &Compiled, document: &str) -> Result<Option<String>, QueryError> {
    let column = Arc::new(StringArray::from(vec![document]));
    let batch = RecordBatch::try_new(schema.clone(), vec![column])
        .map_err(datafusion::error::DataFusionError::from)?;
    let value = expression.evaluate(&batch)?.into_array(1)?;
    let text = cast(&value, &DataType::Utf8).map_err(datafusion::error::DataFusionError::from)?;
    let text = text.as_string::<i32>();
    Ok((!text.is_null(0)).then(|| text.value(0).to_owned()))
}
