//! Joins of documents by key that plan nothing (issue 14: the flight booking's read).
//!
//! `SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a
//! ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '42'` — a document by its key
//! and the document of another table its path names — is the read of an order-entry
//! transaction. DataFusion plans it in about 1.5 ms (its physical planning and a hash join over
//! two scans), ten times the cost of the two point reads it amounts to. [`KeyJoin::parse`]
//! recognises the statement; [`run`] reads the driving table's documents by the `WHERE` value
//! with `point_read` (a key, or a secondary index), and for each the joined table's documents by
//! the value of its `ON` path, and projects the selected paths.
//!
//! Recognised, whole statement only: `SELECT` of `alias.data->>'k'` items (`->` steps before the
//! last allowed, an `AS` name allowed), `FROM` one table with an alias, `[INNER] JOIN` one table
//! with an alias `ON` an equality of one path of each, and `WHERE` one equality of a path of
//! either with a string or integer literal, or with a parameter (`$n`: a prepared statement's
//! text, parsed once, whose value [`run`] is given). Anything else is planned as usual.
//!
//! The result's schema is the planned statement's: the first statement of a shape (its text
//! with the literal left out, see [`KeyJoin::shape`]) is planned, and its schema kept by shape
//! in the session ([`KeyJoinSchemas`]); later ones build their rows in it.
//!
//! Invariant: the answer is the planned statement's answer, up to row order (no `ORDER BY` is
//! recognised). Values are compared and projected as `->>` text, and only string and integer
//! values (and `null` or a missing path, SQL's NULL, which joins nothing) are handled here: any
//! other kind met in a path read (a fraction, a boolean, an object) makes [`run`] answer None and
//! the statement is planned. When either table is not read by that path without planning
//! (`point_read` answers None), the same.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, JoinConstraint, JoinOperator, SelectItem, SetExpr, Statement,
    TableFactor, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use strata_json::JsonPath;

use crate::point_read::{BoundValue, PointRead, PointValue};
use crate::table::{DATA_COLUMN, DataDirSchema};
use crate::{QueryError, QueryResult};

/// A statement recognised as a join of documents by key (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyJoin {
    /// The table the `WHERE` equality reads, and the path it compares with `value`.
    driving: String,
    driving_path: Vec<String>,
    value: PointValue,
    /// The driving table's `ON` path, and the joined table with its `ON` path.
    driving_on: Vec<String>,
    joined: String,
    joined_on: Vec<String>,
    /// Each selected item: of the joined table (else the driving one), and its path.
    outputs: Vec<(bool, Vec<String>)>,
    /// The statement's text with its literal left out: statements of one shape have one
    /// result schema.
    shape: String,
}

/// One side of the join: its table and the alias the statement names it by.
struct Side {
    table: String,
    alias: String,
}

impl KeyJoin {
    /// The key join `sql` is, or None when it is any other statement.
    pub fn parse(sql: &str) -> Option<KeyJoin> {
        // Most statements are not joins: spare them the parse.
        if !sql.to_ascii_uppercase().contains("JOIN") {
            return None;
        }
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
        let [Statement::Query(query)] = statements.as_mut_slice() else {
            return None;
        };
        if query.with.is_some()
            || query.order_by.is_some()
            || query.limit_clause.is_some()
            || query.fetch.is_some()
            || !query.locks.is_empty()
        {
            return None;
        }
        let SetExpr::Select(select) = query.body.as_mut() else {
            return None;
        };
        let no_grouping = match &select.group_by {
            datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(exprs, modifiers) => {
                exprs.is_empty() && modifiers.is_empty()
            }
            _ => false,
        };
        if select.distinct.is_some()
            || select.top.is_some()
            || select.into.is_some()
            || !no_grouping
            || select.having.is_some()
            || select.qualify.is_some()
            || !select.named_window.is_empty()
            || select.from.len() != 1
        {
            return None;
        }
        let from = &select.from[0];
        let [join] = from.joins.as_slice() else {
            return None;
        };
        let constraint = match &join.join_operator {
            JoinOperator::Join(constraint) | JoinOperator::Inner(constraint) => constraint,
            _ => return None,
        };
        let JoinConstraint::On(on) = constraint else {
            return None;
        };
        let left = side(&from.relation)?;
        let right = side(&join.relation)?;
        if left.alias == right.alias {
            return None;
        }
        let which = |alias: &str| -> Option<bool> {
            match alias {
                a if a == left.alias => Some(false),
                a if a == right.alias => Some(true),
                _ => None,
            }
        };
        // ON: a path of each side.
        let mut on = on.clone();
        let (on_a, on_b) = equality_mut(&mut on)?;
        let (on_a, on_b) = (text_path(on_a)?, text_path(on_b)?);
        let (side_a, side_b) = (which(&on_a.0)?, which(&on_b.0)?);
        if side_a == side_b {
            return None;
        }
        let on_paths = if side_a {
            [on_b.1, on_a.1]
        } else {
            [on_a.1, on_b.1]
        };
        // WHERE: a path of either side and a literal.
        let selection = select.selection.as_mut()?;
        let (path, literal) = {
            let (a, b) = equality_mut(selection)?;
            match (text_path(a), text_path(b)) {
                (Some(path), None) => (path, b),
                (None, Some(path)) => (path, a),
                _ => return None,
            }
        };
        let value = literal_value(literal)?;
        let where_right = which(&path.0)?;
        let outputs = select
            .projection
            .iter()
            .map(|item| {
                let expr = match item {
                    SelectItem::UnnamedExpr(expr) => expr,
                    SelectItem::ExprWithAlias { expr, .. } => expr,
                    _ => return None,
                };
                let (alias, path) = text_path(expr)?;
                Some((which(&alias)? != where_right, path))
            })
            .collect::<Option<Vec<_>>>()?;
        if outputs.is_empty() {
            return None;
        }
        *literal = Expr::value(Value::Placeholder("$key".to_owned()));
        let shape = statements.first()?.to_string();
        let (driving, joined) = if where_right {
            (right, left)
        } else {
            (left, right)
        };
        let [left_on, right_on] = on_paths;
        let (driving_on, joined_on) = if where_right {
            (right_on, left_on)
        } else {
            (left_on, right_on)
        };
        Some(KeyJoin {
            driving: driving.table,
            driving_path: path.1,
            value,
            driving_on,
            joined: joined.table,
            joined_on,
            outputs,
            shape,
        })
    }

    /// The statement's text with its literal left out (see the module docs).
    pub fn shape(&self) -> &str {
        &self.shape
    }

    /// What the `WHERE` equality compares the driving path with.
    pub fn value(&self) -> &PointValue {
        &self.value
    }
}

/// A table with an alias, in `FROM` or `JOIN`.
fn side(factor: &TableFactor) -> Option<Side> {
    let TableFactor::Table {
        name, alias, args, ..
    } = factor
    else {
        return None;
    };
    if args.is_some() {
        return None;
    }
    let [part] = name.0.as_slice() else {
        return None;
    };
    let table = identifier(part.as_ident()?);
    let alias = match alias {
        Some(alias) if alias.columns.is_empty() => identifier(&alias.name),
        Some(_) => return None,
        None => table.clone(),
    };
    Some(Side { table, alias })
}

/// An identifier as DataFusion resolves it: unquoted ones in lower case.
fn identifier(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The two sides of `left = right` (in parentheses or not), mutable so that the literal of the
/// `WHERE` equality can be left out of the shape.
fn equality_mut(expr: &mut Expr) -> Option<(&mut Expr, &mut Expr)> {
    match expr {
        Expr::Nested(inner) => equality_mut(inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => Some((left, right)),
        _ => None,
    }
}

/// `alias.data->'a'->>'b'`: the alias and the path, read as text.
fn text_path(expr: &Expr) -> Option<(String, Vec<String>)> {
    path_step(expr, BinaryOperator::LongArrow)
}

/// `alias.data` or `alias.data->'a'…`: the alias and the path so far.
fn object_path(expr: &Expr) -> Option<(String, Vec<String>)> {
    match expr {
        Expr::Nested(inner) => object_path(inner),
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [alias, column] if identifier(column) == DATA_COLUMN => {
                Some((identifier(alias), Vec::new()))
            }
            _ => None,
        },
        expr => path_step(expr, BinaryOperator::Arrow),
    }
}

/// `<object path> <operator> 'key'` (in parentheses or not): the alias and the path with `key`.
fn path_step(expr: &Expr, operator: BinaryOperator) -> Option<(String, Vec<String>)> {
    match expr {
        Expr::Nested(inner) => path_step(inner, operator),
        Expr::BinaryOp { left, op, right } if *op == operator => {
            let (alias, mut path) = object_path(left)?;
            path.push(string_literal(right)?);
            Some((alias, path))
        }
        _ => None,
    }
}

fn string_literal(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn literal_value(expr: &Expr) -> Option<PointValue> {
    let Expr::Value(value) = expr else {
        return None;
    };
    match &value.value {
        Value::SingleQuotedString(text) => {
            Some(PointValue::Literal(BoundValue::Text(text.clone())))
        }
        Value::Number(text, false) => text
            .parse()
            .ok()
            .map(|n| PointValue::Literal(BoundValue::Integer(n))),
        Value::Placeholder(name) => PointValue::parameter(name),
        _ => None,
    }
}

/// Result schemas of key joins, by shape, for one session and its transactions.
#[derive(Default)]
pub struct KeyJoinSchemas {
    by_shape: Mutex<HashMap<String, SchemaRef>>,
    /// Statements answered here without planning.
    answered: AtomicU64,
}

/// Shapes a session keeps at most; more start the map afresh (applications have a few).
const MAX_SHAPES: usize = 1024;

impl KeyJoinSchemas {
    pub(crate) fn get(&self, shape: &str) -> Option<SchemaRef> {
        let by_shape = self.by_shape.lock().unwrap_or_else(PoisonError::into_inner);
        by_shape.get(shape).cloned()
    }

    /// How many statements were answered without planning.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    pub(crate) fn remember(&self, shape: &str, schema: SchemaRef) {
        let mut by_shape = self.by_shape.lock().unwrap_or_else(PoisonError::into_inner);
        if by_shape.len() >= MAX_SHAPES {
            by_shape.clear();
        }
        by_shape.insert(shape.to_owned(), schema);
    }
}

/// Answers `join` from `tables` in the result schema kept for its shape; None when it must be
/// planned (see the module docs).
pub(crate) async fn run(
    tables: &DataDirSchema,
    join: &KeyJoin,
    value: &BoundValue,
    schemas: &KeyJoinSchemas,
) -> Result<Option<QueryResult>, QueryError> {
    let Some(schema) = schemas.get(join.shape()) else {
        return Ok(None);
    };
    let result = answer(tables, join, value, &schema).await?;
    if result.is_some() {
        schemas.answered.fetch_add(1, Ordering::Relaxed);
    }
    Ok(result)
}

async fn answer(
    tables: &DataDirSchema,
    join: &KeyJoin,
    value: &BoundValue,
    schema: &SchemaRef,
) -> Result<Option<QueryResult>, QueryError> {
    if schema.fields().len() != join.outputs.len()
        || !schema.fields().iter().all(|f| is_text(f.data_type()))
    {
        return Ok(None);
    }
    let Some(drivers) = documents_by(tables, &join.driving, &join.driving_path, value).await?
    else {
        return Ok(None);
    };
    let mut columns: Vec<Vec<Option<String>>> = vec![Vec::new(); join.outputs.len()];
    for driver in &drivers {
        let on = match text_at(driver, &join.driving_on) {
            Some(Some(on)) => on,
            Some(None) => continue, // NULL joins nothing
            None => return Ok(None),
        };
        let value = BoundValue::Text(on);
        let Some(joined) = documents_by(tables, &join.joined, &join.joined_on, &value).await?
        else {
            return Ok(None);
        };
        for other in &joined {
            for ((of_joined, path), column) in join.outputs.iter().zip(&mut columns) {
                let document = if *of_joined { other } else { driver };
                match text_at(document, path) {
                    Some(value) => column.push(value),
                    None => return Ok(None),
                }
            }
        }
    }
    let arrays = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(values, field)| {
            let array: ArrayRef = Arc::new(StringArray::from(values));
            cast(&array, field.data_type())
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| QueryError::DataFusion(e.into()))?;
    let batch = RecordBatch::try_new(schema.clone(), arrays)
        .map_err(|e| QueryError::DataFusion(e.into()))?;
    Ok(Some(QueryResult {
        schema: schema.clone(),
        batches: vec![batch],
    }))
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// The documents of `table` whose `path`, read as text, equals `value`, parsed; None when they
/// cannot be read without planning.
async fn documents_by(
    tables: &DataDirSchema,
    table: &str,
    path: &[String],
    value: &BoundValue,
) -> Result<Option<Vec<serde_json::Value>>, QueryError> {
    let read = PointRead {
        table: table.to_owned(),
        path: JsonPath::new(path.to_vec()),
        as_text: true,
        value: PointValue::Literal(value.clone()),
    };
    let Some(result) = tables.point_read(&read, value).await? else {
        return Ok(None);
    };
    let mut documents = Vec::new();
    for batch in &result.batches {
        let column =
            cast(batch.column(0), &DataType::Utf8).map_err(|e| QueryError::DataFusion(e.into()))?;
        let texts = column.as_string::<i32>();
        for row in 0..texts.len() {
            if texts.is_null(row) {
                continue;
            }
            let document = serde_json::from_str(texts.value(row)).map_err(|e| {
                QueryError::Engine(strata_engine::EngineError::Invalid(format!(
                    "table {table}: a document read by key is not JSON: {e}"
                )))
            })?;
            documents.push(document);
        }
    }
    Ok(Some(documents))
}

/// `path` of `document` read as `->>` reads it: Some(None) for `null` or a missing path,
/// Some(text) for a string or an integer, None for any other kind (left to the planner).
fn text_at(document: &serde_json::Value, path: &[String]) -> Option<Option<String>> {
    let mut at = document;
    for key in path {
        match at.as_object().and_then(|object| object.get(key)) {
            Some(value) => at = value,
            None => return Some(None),
        }
    }
    match at {
        serde_json::Value::Null => Some(None),
        serde_json::Value::String(text) => Some(Some(text.clone())),
        serde_json::Value::Number(number) if number.is_i64() || number.is_u64() => {
            Some(Some(number.to_string()))
        }
        _ => None,
    }
}
