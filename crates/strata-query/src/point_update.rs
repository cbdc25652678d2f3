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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, TableReference};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Expr, TableFactor, Update};
use strata_json::{KeyValue, TableKey};

use crate::QueryError;
use crate::point_read::{BoundValue, PointRead, PointValue};
use crate::table::{DATA_COLUMN, DataDirSchema};
use crate::transaction::Transaction;
use crate::udf::json_field;

/// Expressions kept at most; past it the cache starts over (statement texts of one
/// application are few; a client generating endless distinct texts only loses the cache).
const MAX_CACHED_EXPRESSIONS: usize = 1024;

/// The new documents of `update` (on `table`, keyed by `key`) when it is a point update
/// (module docs): `(old key, new document text)`, at most one; None when it must be planned.
pub(crate) async fn new_documents(
    transaction: &Transaction,
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
    let Some(result) = transaction.schema().point_read(&read, bound).await? else {
        return Ok(None);
    };
    let Some(found) = found else {
        return Ok(Some(Vec::new()));
    };
    let expression = expression(
        transaction.session(),
        &[table],
        &format!("CAST(({value}) AS VARCHAR)"),
    )?;
    let mut out = Vec::new();
    for batch in &result.batches {
        for document in crate::dml::texts_of(batch, 0)?.into_iter().flatten() {
            let new = evaluate(&expression, &[&document])?;
            out.push((found.clone(), new));
        }
    }
    Ok(Some(out))
}

/// Document columns of the JSON type, each named `data` and qualified by one of `relations`.
fn document_schema(relations: &[&str]) -> Result<(Arc<Schema>, DFSchema), QueryError> {
    let fields: Vec<Field> = relations.iter().map(|_| json_field(DATA_COLUMN)).collect();
    let schema = Arc::new(Schema::new(fields));
    let qualified = DFSchema::new_with_metadata(
        relations
            .iter()
            .zip(schema.fields())
            .map(|(relation, field)| (Some(TableReference::bare(*relation)), field.clone()))
            .collect(),
        HashMap::new(),
    )?;
    Ok((schema, qualified))
}

type Compiled = (Arc<Schema>, Arc<dyn PhysicalExpr>);
/// Compiled expressions by the relations they read and their text.
type ExpressionCache = Mutex<HashMap<(Vec<String>, String), Compiled>>;

/// `text` over documents of `relations` (in that order), planned once per process.
fn expression(
    context: &SessionContext,
    relations: &[&str],
    text: &str,
) -> Result<Compiled, QueryError> {
    static CACHE: OnceLock<ExpressionCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let id = (
        relations.iter().map(|r| (*r).to_owned()).collect(),
        text.to_owned(),
    );
    if let Some(compiled) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&id)
    {
        return Ok(compiled.clone());
    }
    let (schema, qualified) = document_schema(relations)?;
    let logical = context.parse_sql_expr(text, &qualified)?;
    // A planned statement's expressions are simplified by the optimizer before they run, and
    // some functions are only executable in that form (`coalesce` becomes a `CASE`);
    // `create_physical_expr` coerces types but does not simplify.
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::new(qualified.clone()))
            .build(),
    );
    let logical = simplifier.simplify(simplifier.coerce(logical, &qualified)?)?;
    let physical = crate::known_fields::with_known_fields(
        context.create_physical_expr(logical, &qualified)?,
        &schema,
    )?;
    let compiled = (schema, physical);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= MAX_CACHED_EXPRESSIONS {
        cache.clear();
    }
    cache.insert(id, compiled.clone());
    Ok(compiled)
}

/// The expression's value over one document per relation, as text (None: NULL).
fn evaluate(
    (schema, expression): &Compiled,
    documents: &[&str],
) -> Result<Option<String>, QueryError> {
    let columns: Vec<ArrayRef> = documents
        .iter()
        .map(|d| Arc::new(StringArray::from(vec![*d])) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns)
        .map_err(datafusion::error::DataFusionError::from)?;
    let value = expression.evaluate(&batch)?.into_array(1)?;
    let text = cast(&value, &DataType::Utf8).map_err(datafusion::error::DataFusionError::from)?;
    let text = text.as_string::<i32>();
    Ok((!text.is_null(0)).then(|| text.value(0).to_owned()))
}

/// The live document of `table` (keyed by `key`) with key `value`, read as a point read
/// reads it; `Ok(None)` when the table cannot be read by key (then nothing is answered here).
async fn document_by_key(
    schema: &DataDirSchema,
    table: &str,
    key: &TableKey,
    value: &KeyValue,
) -> Result<Option<Option<String>>, QueryError> {
    let (as_text, bound) = match value {
        KeyValue::String(text) => (true, BoundValue::Text(text.clone())),
        KeyValue::Integer(i) => (false, BoundValue::Integer(*i)),
    };
    let read = PointRead {
        table: table.to_owned(),
        path: key.path.clone(),
        as_text,
        value: PointValue::Literal(bound.clone()),
    };
    let Some(result) = schema.point_read(&read, &bound).await? else {
        return Ok(None);
    };
    let mut found = None;
    for batch in &result.batches {
        found = found.or(crate::dml::texts_of(batch, 0)?.into_iter().flatten().next());
    }
    Ok(Some(found))
}

/// The document of each of `keys` in `table` as `schema` reads it (a transaction's: its
/// snapshot with its own changes), None for an absent key; None when the table cannot be read
/// by key.
pub(crate) async fn present_documents(
    schema: &DataDirSchema,
    table: &str,
    key: &TableKey,
    keys: &[KeyValue],
) -> Result<Option<BTreeMap<KeyValue, Option<String>>>, QueryError> {
    let mut present = BTreeMap::new();
    for value in keys {
        if present.contains_key(value) {
            continue;
        }
        let Some(found) = document_by_key(schema, table, key, value).await? else {
            return Ok(None);
        };
        present.insert(value.clone(), found);
    }
    Ok(Some(present))
}

/// `ON CONFLICT DO UPDATE SET data = <document> [WHERE <condition>]` for the documents
/// `excluded` proposes (key, text), without a planned query: each present document is taken
/// from `present` (read by [`present_documents`]) or else read by its key, and the expressions
/// (over `target.data` and `excluded.data`) evaluated. Per excluded document whose key is
/// present and whose condition holds: `(key, new document text)`. None when the table cannot be
/// read by key (the caller plans it).
pub(crate) async fn conflict_updates(
    context: &SessionContext,
    schema: &DataDirSchema,
    table: &str,
    key: &TableKey,
    (target, document, condition): (&str, &str, Option<&str>),
    excluded: &[(KeyValue, String)],
    present: Option<&BTreeMap<KeyValue, Option<String>>>,
) -> Result<Option<Vec<(KeyValue, Option<String>)>>, QueryError> {
    let relations = [target, crate::dml::EXCLUDED];
    let document = expression(
        context,
        &relations,
        &format!("CAST(({document}) AS VARCHAR)"),
    )?;
    let condition = condition
        .map(|c| expression(context, &relations, &format!("CAST(({c}) AS BOOLEAN)")))
        .transpose()?;
    let mut updates = Vec::new();
    for (value, proposed) in excluded {
        let present = match present.and_then(|present| present.get(value)) {
            Some(found) => found.clone(),
            None => match document_by_key(schema, table, key, value).await? {
                Some(found) => found,
                None => return Ok(None),
            },
        };
        let Some(present) = present else {
            continue;
        };
        let documents = [present.as_str(), proposed.as_str()];
        if let Some(condition) = &condition
            && evaluate(condition, &documents)?.as_deref() != Some("true")
        {
            continue;
        }
        updates.push((value.clone(), evaluate(&document, &documents)?));
    }
    Ok(Some(updates))
}
