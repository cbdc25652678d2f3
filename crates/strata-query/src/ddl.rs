//! Statements that change tables rather than read them: `DROP TABLE [IF EXISTS] t [, …]`,
//! `ALTER TABLE [IF EXISTS] t SET (setting = value, …)`, and `CREATE INDEX … ON t ((data->>'p'))`
//! / `DROP INDEX [IF EXISTS] name` (secondary indexes, ADR 0024).
//!
//! All run through strata-engine under the table's writer lock (`DataDir::drop_table`,
//! `DataDir::alter_table`, `DataDir::create_index`, `DataDir::drop_index`). DataFusion has no `ALTER TABLE`, and its own `DROP TABLE` path
//! (`DataDirSchema::deregister_table`) reports every failure as "doesn't exist", or nothing at
//! all under `IF EXISTS`; so [`crate::Session::run`] hands these statements here first.
//! Tables are created by their first ingest (`strata ingest`), not by SQL.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    AlterTable, AlterTableOperation, BinaryOperator, CreateIndex, Expr, FunctionArguments, Ident,
    ObjectName, ObjectNamePart, ObjectType, SqlOption, Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata_engine::settings::CHANGEABLE_SETTINGS;
use strata_engine::{DataDir, EngineError, SettingChange};
use strata_json::JsonPath;

use crate::table::DataDirSchema;
use crate::{QueryError, QueryResult};

/// The PostgreSQL command tag of `sql` when it is one statement [`run`] handles (`DROP TABLE`,
/// `ALTER TABLE`, `CREATE INDEX`, `DROP INDEX`); None for anything else. Nothing runs.
pub fn command_tag(sql: &str) -> Option<&'static str> {
    match single_statement(sql)? {
        Statement::Drop {
            object_type: ObjectType::Table,
            ..
        } => Some("DROP TABLE"),
        Statement::AlterTable(_) => Some("ALTER TABLE"),
        Statement::CreateIndex(_) => Some("CREATE INDEX"),
        Statement::Drop {
            object_type: ObjectType::Index,
            ..
        } => Some("DROP INDEX"),
        _ => None,
    }
}

/// The table `sql` creates an index on, when it is one `CREATE INDEX` statement.
pub fn index_table(sql: &str) -> Option<String> {
    match single_statement(sql)? {
        Statement::CreateIndex(create) => table_name(&create.table_name).ok(),
        _ => None,
    }
}

/// `sql` parsed, when it is one SQL statement (DataFusion reports syntax errors).
fn single_statement(sql: &str) -> Option<Statement> {
    let mut statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).ok()?;
    if statements.len() != 1 {
        return None;
    }
    match statements.pop_front()? {
        DFStatement::Statement(statement) => Some(*statement),
        _ => None,
    }
}

/// Runs `sql` when it is one statement [`command_tag`] names; None for anything else.
pub(crate) fn run(context: &SessionContext, sql: &str) -> Result<Option<QueryResult>, QueryError> {
    if !matches!(
        crate::first_word(sql),
        crate::FirstWord::Comment | crate::FirstWord::TableChange
    ) {
        return Ok(None);
    }
    let Some(statement) = single_statement(sql) else {
        return Ok(None);
    };
    match statement {
        Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            ..
        } => {
            let data_dir = data_dir(context)?;
            for name in &names {
                let table = table_name(name)?;
                if !data_dir.drop_table(&table)? && !if_exists {
                    return Err(EngineError::NoSuchTable(table).into());
                }
            }
            Ok(Some(empty_result()))
        }
        Statement::AlterTable(alter) => {
            alter_table(&data_dir(context)?, &alter)?;
            Ok(Some(empty_result()))
        }
        Statement::CreateIndex(create) => {
            create_index(&data_dir(context)?, &create)?;
            Ok(Some(empty_result()))
        }
        Statement::Drop {
            object_type: ObjectType::Index,
            if_exists,
            names,
            cascade,
            ..
        } => {
            if cascade {
                return Err(plan_error(
                    "DROP INDEX … CASCADE: nothing depends on an index; drop it without CASCADE"
                        .into(),
                ));
            }
            let data_dir = data_dir(context)?;
            for name in &names {
                data_dir.drop_index(&index_name(name)?, if_exists)?;
            }
            Ok(Some(empty_result()))
        }
        _ => Ok(None),
    }
}

fn alter_table(data_dir: &DataDir, alter: &AlterTable) -> Result<(), QueryError> {
    let table = table_name(&alter.name)?;
    let mut changes = Vec::new();
    for operation in &alter.operations {
        let AlterTableOperation::SetOptionsParens { options } = operation else {
            let settings: Vec<&str> = CHANGEABLE_SETTINGS.iter().map(|(name, _)| *name).collect();
            return Err(plan_error(format!(
                "ALTER TABLE {table}: only SET (setting = value, ...) is supported; settings \
                 that can change: {}",
                settings.join(", ")
            )));
        };
        for option in options {
            let SqlOption::KeyValue { key, value } = option else {
                return Err(plan_error(format!(
                    "ALTER TABLE {table}: expected setting = value, found {option}"
                )));
            };
            changes.push(SettingChange {
                name: key.value.clone(),
                value: literal_text(value),
            });
        }
    }
    match data_dir.alter_table(&table, &changes) {
        Err(EngineError::NoSuchTable(_)) if alter.if_exists => Ok(()),
        other => other.map(|_| ()).map_err(QueryError::from),
    }
}

/// `CREATE INDEX [IF NOT EXISTS] [name] ON t ((data->>'a'))` (or `(data.a)`, `data->'a'->>'b'`):
/// one JSON path of the table's documents, equality lookups only (ADR 0024).
fn create_index(data_dir: &DataDir, create: &CreateIndex) -> Result<(), QueryError> {
    let table = table_name(&create.table_name)?;
    let unsupported = |what: &str| {
        plan_error(format!(
            "CREATE INDEX on {table}: {what} is not supported (an index is on one JSON path of \
             the documents: ON {table} ((data->>'path')) or ON {table} (data.path))"
        ))
    };
    if create.unique {
        return Err(unsupported(
            "UNIQUE (a table's key is unique: strata ingest --key PATH)",
        ));
    }
    if create.predicate.is_some() {
        return Err(unsupported("a partial index (WHERE)"));
    }
    if !create.include.is_empty() {
        return Err(unsupported("INCLUDE"));
    }
    if let Some(using) = &create.using
        && !using.to_string().eq_ignore_ascii_case("btree")
    {
        return Err(unsupported(&format!("USING {using}")));
    }
    let [column] = create.columns.as_slice() else {
        return Err(unsupported("an index of several columns"));
    };
    let path = indexed_path(&column.column.expr)
        .ok_or_else(|| unsupported(&format!("the expression {}", column.column.expr)))?;
    let name = match &create.name {
        Some(name) => index_name(name)?,
        None => default_index_name(&table, &path),
    };
    data_dir.create_index(&table, &name, &path.encode(), create.if_not_exists)?;
    Ok(())
}

/// The JSON path an index expression reads: `data.a.b`, `data->'a'->>'b'`, parenthesized or
/// not. None for anything else.
fn indexed_path(expr: &Expr) -> Option<JsonPath> {
    match expr {
        Expr::Nested(inner) => indexed_path(inner),
        Expr::CompoundIdentifier(idents) => match idents.split_first() {
            Some((document, path))
                if document.value == crate::table::DATA_COLUMN && !path.is_empty() =>
            {
                Some(JsonPath::new(
                    path.iter().map(|i| i.value.clone()).collect(),
                ))
            }
            _ => None,
        },
        // `data.user`: a dotted name ending in a keyword that is also a function without
        // parentheses (`user`, `current_date`) parses as a call of that function.
        Expr::Function(function) if matches!(function.args, FunctionArguments::None) => {
            let idents: Vec<Ident> = function
                .name
                .0
                .iter()
                .map(|part| part.as_ident().cloned())
                .collect::<Option<_>>()?;
            indexed_path(&Expr::CompoundIdentifier(idents))
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Arrow | BinaryOperator::LongArrow,
            right,
        } => {
            let Expr::Value(value) = right.as_ref() else {
                return None;
            };
            let Value::SingleQuotedString(key) = &value.value else {
                return None;
            };
            let base = match left.as_ref() {
                Expr::Identifier(ident) if ident.value == crate::table::DATA_COLUMN => {
                    JsonPath::new(Vec::new())
                }
                other => indexed_path(other)?,
            };
            Some(base.child(key))
        }
        _ => None,
    }
}

/// PostgreSQL's name for an unnamed index: `<table>_<column>_idx`, here the path's segments
/// joined by `_`, kept to what an index name may hold.
fn default_index_name(table: &str, path: &JsonPath) -> String {
    let raw = format!("{table}_{}_idx", path.segments().join("_"));
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name.truncate(63);
    name
}

/// An index's name: `name` or `public.name`.
fn index_name(name: &ObjectName) -> Result<String, QueryError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident.value.clone()),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [index] => Ok(index.clone()),
        [schema, index] if schema == "public" => Ok(index.clone()),
        _ => Err(plan_error(format!("unsupported index name {name}"))),
    }
}

/// A setting's value as written: numbers and strings without quotes, anything else as SQL.
fn literal_text(value: &Expr) -> String {
    match value {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.to_string(),
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

/// The table a statement names: `t`, `public.t` or `strata.public.t`.
pub(crate) fn table_name(name: &ObjectName) -> Result<String, QueryError> {
    let parts: Vec<&str> = name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident.value.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| plan_error(format!("unsupported table name {name}")))?;
    match parts.as_slice() {
        [table] | ["public", table] | ["strata", "public", table] => Ok((*table).to_owned()),
        _ => Err(plan_error(format!(
            "table {name} is not in this data directory (its tables are strata.public.NAME)"
        ))),
    }
}

pub(crate) fn data_dir(context: &SessionContext) -> Result<DataDir, QueryError> {
    with_data_dir_schema(context, |schema| Ok(schema.data_dir().clone()))
}

/// Runs `work` on the session's data directory schema.
pub(crate) fn with_data_dir_schema<T>(
    context: &SessionContext,
    work: impl FnOnce(&DataDirSchema) -> Result<T, QueryError>,
) -> Result<T, QueryError> {
    let schema = context
        .catalog(crate::CATALOG)
        .and_then(|catalog| catalog.schema(crate::SCHEMA));
    match schema
        .as_ref()
        .and_then(|schema| schema.downcast_ref::<DataDirSchema>())
    {
        Some(schema) => work(schema),
        None => Err(plan_error(
            "the session has no data directory schema".to_owned(),
        )),
    }
}

fn plan_error(message: String) -> QueryError {
    QueryError::DataFusion(DataFusionError::Plan(message))
}

fn empty_result() -> QueryResult {
    QueryResult {
        schema: Arc::new(Schema::empty()),
        batches: Vec::new(),
    }
}
