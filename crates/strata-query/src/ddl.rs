//! Statements that change tables rather than read them: `DROP TABLE [IF EXISTS] t [, …]` and
//! `ALTER TABLE [IF EXISTS] t SET (setting = value, …)`.
//!
//! Both run through strata-engine under the table's writer lock (`DataDir::drop_table`,
//! `DataDir::alter_table`). DataFusion has no `ALTER TABLE`, and its own `DROP TABLE` path
//! (`DataDirSchema::deregister_table`) reports every failure as "doesn't exist", or nothing at
//! all under `IF EXISTS`; so [`crate::Session::run`] hands these statements here first.
//! Tables are created by their first ingest (`strata ingest`), not by SQL.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    AlterTable, AlterTableOperation, Expr, ObjectName, ObjectNamePart, ObjectType, SqlOption,
    Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata_engine::settings::CHANGEABLE_SETTINGS;
use strata_engine::{DataDir, EngineError, SettingChange};

use crate::table::DataDirSchema;
use crate::{QueryError, QueryResult};

/// The PostgreSQL command tag of `sql` when it is one statement [`run`] handles (`DROP TABLE`,
/// `ALTER TABLE`); None for anything else. Nothing runs.
pub fn command_tag(sql: &str) -> Option<&'static str> {
    let mut statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).ok()?;
    if statements.len() != 1 {
        return None;
    }
    let Some(DFStatement::Statement(statement)) = statements.pop_front() else {
        return None;
    };
    match *statement {
        Statement::Drop {
            object_type: ObjectType::Table,
            ..
        } => Some("DROP TABLE"),
        Statement::AlterTable(_) => Some("ALTER TABLE"),
        _ => None,
    }
}

/// Runs `sql` when it is one DROP TABLE or ALTER TABLE statement; None for anything else.
pub(crate) fn run(context: &SessionContext, sql: &str) -> Result<Option<QueryResult>, QueryError> {
    let Ok(mut statements) = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}) else {
        return Ok(None); // DataFusion reports the syntax error
    };
    if statements.len() != 1 {
        return Ok(None);
    }
    let Some(DFStatement::Statement(statement)) = statements.pop_front() else {
        return Ok(None);
    };
    match *statement {
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
