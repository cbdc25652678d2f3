//! Statements that change documents: `INSERT`, `UPDATE` and `DELETE` (issue 14, ADR 0016,
//! ADR 0017).
//!
//! DataFusion plans DML but cannot run it on Strata's tables (its provider hooks get filter
//! expressions over columns Strata's rules rewrite, and it refuses `ON CONFLICT` and
//! `RETURNING`), so these statements are recognised here first, as `DROP`/`ALTER` are by
//! `crate::ddl`. This module finds what a statement changes ([`change_of`]), writing nothing:
//!
//! 1. a *shadow query* planned and run by DataFusion through the normal planner, rules and
//!    pruning scan, in the transaction's context, which reads its snapshot and its own
//!    changes (unless `crate::point_update` finds the documents by key, planning nothing):
//!    the `INSERT`'s source rows; for `UPDATE` the key and the new document of each
//!    row the `WHERE` matches; for `DELETE` the key of each such row;
//! 2. the new documents are checked as ingest checks them (valid JSON objects, a key of the
//!    table's type): a bad one fails the statement, naming the row, and nothing changes.
//!
//! `crate::transaction` then adds the [`Change`] to the transaction's changes (`INSERT` fails on
//! a key present, `ON CONFLICT DO NOTHING` skips it, `ON CONFLICT DO UPDATE SET data =
//! EXCLUDED.data` replaces it; `UPDATE` replaces, or moves a document whose key it changed;
//! `DELETE` deletes) and commits them, at the
//! end of the statement (autocommit, retried on a write conflict) or at `COMMIT`. `UPDATE` and
//! `DELETE` need a table with a key, which addresses the rows; `INSERT` works on every table.
//! The result is one row, `count`, the documents changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Delete, Expr, FromTable, Insert, ObjectName, OnConflictAction, OnInsert,
    Statement, TableFactor, TableObject, Update,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata_engine::{DataDir, EngineError, OnConflict};
use strata_json::{KeyType, KeyValue, TableKey, parse_document};

use crate::ddl::table_name;
use crate::transaction::Transaction;
use crate::{QueryError, QueryResult};

/// SQLSTATE of a value that is not valid JSON (PostgreSQL's `invalid_text_representation`).
const INVALID_TEXT: &str = "22P02";
/// SQLSTATE of a NULL where a document or key is required (`not_null_violation`).
const NOT_NULL: &str = "23502";
/// The name `ON CONFLICT DO UPDATE` gives the row proposed for insertion.
pub(crate) const EXCLUDED: &str = "excluded";
/// SQLSTATE of what is not supported (yet).
const NOT_SUPPORTED: &str = "0A000";

/// The PostgreSQL command tag of `sql` when it is one statement [`run`] handles; None for
/// anything else. Nothing runs.
pub fn command_tag(sql: &str) -> Option<&'static str> {
    match parse_one(sql)? {
        Statement::Insert(_) => Some("INSERT"),
        Statement::Update(_) => Some("UPDATE"),
        Statement::Delete(_) => Some("DELETE"),
        _ => None,
    }
}

std::thread_local! {
    /// The text and statement [`parse_one`] parsed last on this thread. The server asks what a
    /// statement is ([`command_tag`]) right before running it ([`change_of`]), with no `await`
    /// between: the second parse of an `INSERT` is saved. Only a cost: a miss parses.
    static LAST_PARSED: std::cell::RefCell<Option<(String, Statement)>> =
        const { std::cell::RefCell::new(None) };
}

fn parse_one(sql: &str) -> Option<Statement> {
    let remembered = LAST_PARSED.with_borrow(|last| {
        last.as_ref()
            .filter(|(text, _)| text == sql)
            .map(|(_, statement)| statement.clone())
    });
    if remembered.is_some() {
        return remembered;
    }
    let statement = parse_one_uncached(sql)?;
    LAST_PARSED.set(Some((sql.to_owned(), statement.clone())));
    Some(statement)
}

pub(crate) fn parse_one_uncached(sql: &str) -> Option<Statement> {
    let sql = without_conflict_expressions(sql);
    let mut statements = DFParser::parse_sql_with_dialect(&sql, &PostgreSqlDialect {}).ok()?;
    if statements.len() != 1 {
        return None;
    }
    match statements.pop_front()? {
        DFStatement::Statement(statement) => Some(*statement),
        _ => None,
    }
}

/// `sql` without the parenthesized target of `ON CONFLICT (…)` when it holds expressions, as
/// PostgreSQL users write for an expression index (`ON CONFLICT ((data->>'id'))`), which the SQL
/// parser cannot read. A table's only unique constraint is its key, so the target can only name
/// it; column targets (`ON CONFLICT (data)`) parse as they are.
fn without_conflict_expressions(sql: &str) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.into();
    };
    let is_word =
        |token: &Token, keyword: Keyword| matches!(token, Token::Word(w) if w.keyword == keyword);
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    for (n, window) in significant.windows(4).enumerate() {
        let [on, conflict, open, inner] = [window[0], window[1], window[2], window[3]];
        if !(is_word(&tokens[on], Keyword::ON)
            && is_word(&tokens[conflict], Keyword::CONFLICT)
            && tokens[open] == Token::LParen
            && tokens[inner] == Token::LParen)
        {
            continue;
        }
        // The target's closing parenthesis.
        let mut depth = 0usize;
        let close = significant[n + 2..].iter().copied().find(|&i| {
            match tokens[i] {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            depth == 0
        });
        let Some(close) = close else {
            return sql.into();
        };
        let text: String = tokens[..open]
            .iter()
            .chain(&tokens[close + 1..])
            .map(ToString::to_string)
            .collect();
        return text.into();
    }
    sql.into()
}

/// What one statement changes, found by its shadow query and checked; nothing is written.
pub(crate) enum Change {
    /// Documents to insert, with their keys when the table has one.
    Insert {
        table: String,
        key: Option<TableKey>,
        documents: Vec<(Option<KeyValue>, String)>,
        on_conflict: ConflictAction,
    },
    /// New versions of documents of a keyed table: each document's key before the statement,
    /// its key after (another when the statement changed it), and the new document.
    Update {
        table: String,
        documents: Vec<(KeyValue, KeyValue, String)>,
    },
    /// Keys of the documents to delete, and the documents when `RETURNING` wants them.
    Delete {
        table: String,
        keys: Vec<KeyValue>,
        documents: Vec<String>,
    },
}

/// What an `INSERT` does with a document whose key is present.
pub(crate) enum ConflictAction {
    /// Fail, skip the document, or replace the present one with it.
    Policy(OnConflict),
    /// `ON CONFLICT DO UPDATE SET data = <document> [WHERE <condition>]`: both expressions
    /// over the present document (`<target>.data`) and the new one (`excluded.data`);
    /// rows the condition does not hold for stay as they are.
    Update {
        /// The name the expressions give the table: its alias or its name.
        target: String,
        document: String,
        condition: Option<String>,
    },
}

/// A statement's `RETURNING` list, and the name it gives the table's document column.
pub(crate) struct Returning {
    /// The select list as written (`data`, `data->>'id' AS id`, `*`).
    pub(crate) items: String,
    /// The table's alias, or its name.
    pub(crate) relation: String,
}

/// The change of `sql` when it is one INSERT, UPDATE or DELETE (its shadow query run in
/// `transaction`), with its `RETURNING` list; None for anything else.
pub(crate) async fn change_of(
    transaction: &Transaction,
    sql: &str,
) -> Result<Option<(Change, Option<Returning>)>, QueryError> {
    match parse_one(sql) {
        Some(statement) => change_of_statement(transaction, statement).await,
        None => Ok(None),
    }
}

/// [`change_of`] of a statement parsed already (`crate::prepared_change`).
pub(crate) async fn change_of_statement(
    transaction: &Transaction,
    statement: Statement,
) -> Result<Option<(Change, Option<Returning>)>, QueryError> {
    let returning = returning_of(&statement);
    let wanted = returning.is_some();
    Ok(Some((
        match statement {
            Statement::Insert(insert) => insert_change(transaction, &insert).await?,
            Statement::Update(update) => update_change(transaction, &update).await?,
            Statement::Delete(delete) => delete_change(transaction, &delete, wanted).await?,
            _ => return Ok(None),
        },
        returning,
    )))
}

/// The `RETURNING` list of a changing statement.
fn returning_of(statement: &Statement) -> Option<Returning> {
    let (items, relation) = match statement {
        Statement::Insert(insert) => (
            insert.returning.as_ref()?,
            match (&insert.table_alias, &insert.table) {
                (Some(alias), _) => alias.alias.to_string(),
                (None, TableObject::TableName(name)) => relation_name(name),
                (None, _) => return None,
            },
        ),
        Statement::Update(update) => (
            update.returning.as_ref()?,
            relation_of(&update.table.relation)?,
        ),
        Statement::Delete(delete) => {
            let from = match &delete.from {
                FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from) => from,
            };
            (
                delete.returning.as_ref()?,
                relation_of(&from.first()?.relation)?,
            )
        }
        _ => return None,
    };
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    Some(Returning {
        items: items.join(", "),
        relation,
    })
}

fn relation_of(factor: &TableFactor) -> Option<String> {
    match factor {
        TableFactor::Table {
            alias: Some(alias), ..
        } => Some(alias.name.to_string()),
        TableFactor::Table { name, .. } => Some(relation_name(name)),
        _ => None,
    }
}

/// The last part of a table name: how columns are qualified by it.
fn relation_name(name: &ObjectName) -> String {
    name.0
        .last()
        .map_or_else(|| name.to_string(), ToString::to_string)
}

/// The query that evaluates a `RETURNING` list over `documents` (none: its columns only).
fn returning_sql(returning: &Returning, documents: &[String]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let values: Vec<String> = if documents.is_empty() {
        vec!["(CAST(NULL AS JSON))".to_owned()]
    } else {
        documents
            .iter()
            .map(|d| format!("(CAST({} AS JSON))", quote(d)))
            .collect()
    };
    format!(
        "SELECT {} FROM (VALUES {}) AS {}({}){}",
        returning.items,
        values.join(", "),
        returning.relation,
        crate::table::DATA_COLUMN,
        if documents.is_empty() {
            " WHERE false"
        } else {
            ""
        }
    )
}

/// Field metadata on a changing statement's result that has `RETURNING` rows (its command tag
/// counts the rows) rather than the one `count` row.
pub const RETURNING_METADATA: &str = "strata.returning";

/// The rows of a `RETURNING` list over the documents a statement inserted, updated or deleted.
pub(crate) async fn returning_rows(
    context: &SessionContext,
    returning: &Returning,
    documents: &[String],
) -> Result<QueryResult, QueryError> {
    let frame = context.sql(&returning_sql(returning, documents)).await?;
    let schema = frame.schema().as_arrow().clone();
    let batches = frame.collect().await?;
    let mut metadata = schema.metadata().clone();
    metadata.insert(RETURNING_METADATA.to_owned(), "true".to_owned());
    let schema = Arc::new(schema.with_metadata(metadata));
    let batches = batches
        .into_iter()
        .map(|b| b.with_schema(schema.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(datafusion::error::DataFusionError::from)?;
    Ok(QueryResult { schema, batches })
}

/// For a changing statement with `RETURNING`, a query with the result's columns and no rows,
/// for describing the statement before it runs (the PostgreSQL protocol's Describe); None for
/// other statements.
pub fn returning_description(sql: &str) -> Option<String> {
    let returning = returning_of(&parse_one(sql)?)?;
    Some(returning_sql(&returning, &[]))
}

/// The result of a statement that changed `count` documents: one row, `count`.
pub(crate) fn count_result(count: u64) -> Result<QueryResult, QueryError> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(UInt64Array::from(vec![count]))],
    )
    .map_err(datafusion::error::DataFusionError::from)?;
    Ok(QueryResult {
        schema,
        batches: vec![batch],
    })
}

fn invalid(sqlstate: &'static str, message: String) -> QueryError {
    QueryError::Statement { sqlstate, message }
}

fn not_supported(message: impl Into<String>) -> QueryError {
    invalid(NOT_SUPPORTED, message.into())
}

/// A statement's target table and its key (None: the table has none).
fn target(data_dir: &DataDir, name: &ObjectName) -> Result<(String, Option<TableKey>), QueryError> {
    let table = table_name(name)?;
    let manifest = data_dir.manifest_shared(&table)?;
    Ok((table, manifest.settings.key.as_ref().map(|k| k.table_key())))
}

async fn insert_change(transaction: &Transaction, insert: &Insert) -> Result<Change, QueryError> {
    let TableObject::TableName(name) = &insert.table else {
        return Err(not_supported("INSERT INTO a table function"));
    };
    let only_data = match &insert.columns[..] {
        [] => true,
        [column] => column.to_string() == crate::table::DATA_COLUMN,
        _ => false,
    };
    if !only_data {
        return Err(not_supported(format!(
            "a table has one column, {}: INSERT INTO t [({})] VALUES ('{{…}}')",
            crate::table::DATA_COLUMN,
            crate::table::DATA_COLUMN
        )));
    }
    let source = insert
        .source
        .as_ref()
        .ok_or_else(|| not_supported("INSERT without VALUES or a query"))?;
    let (table, key) = target(transaction.schema().data_dir(), name)?;
    let on_conflict = match &insert.on {
        None => ConflictAction::Policy(OnConflict::Error),
        Some(OnInsert::OnConflict(conflict)) => {
            if key.is_none() {
                return Err(not_supported(format!(
                    "ON CONFLICT: table {table} has no key (strata ingest --key)"
                )));
            }
            match &conflict.action {
                OnConflictAction::DoNothing => ConflictAction::Policy(OnConflict::Ignore),
                OnConflictAction::DoUpdate(update) => {
                    let [assignment] = &update.assignments[..] else {
                        return Err(not_supported(
                            "ON CONFLICT DO UPDATE sets one column: SET data = <new document>",
                        ));
                    };
                    if !assigns_data(&assignment.target) {
                        return Err(not_supported(format!(
                            "ON CONFLICT DO UPDATE sets the document: SET {} = <new document>",
                            crate::table::DATA_COLUMN
                        )));
                    }
                    let replaces = update.selection.is_none()
                        && assignment
                            .value
                            .to_string()
                            .eq_ignore_ascii_case("EXCLUDED.data");
                    if replaces {
                        ConflictAction::Policy(OnConflict::Replace)
                    } else {
                        let target = insert
                            .table_alias
                            .as_ref()
                            .map_or_else(|| table.clone(), |a| a.alias.to_string());
                        ConflictAction::Update {
                            document: qualified(&assignment.value, &target),
                            condition: update.selection.as_ref().map(|c| qualified(c, &target)),
                            target,
                        }
                    }
                }
            }
        }
        Some(other) => return Err(not_supported(format!("{other}"))),
    };
    // Rows made of literals only are computed here; a planned `VALUES` costs a millisecond.
    let texts = match crate::insert_values::literal_rows(source) {
        Some(rows) => rows.into_iter().map(Some).collect(),
        None => documents_of(transaction.context()?, &source.to_string(), 0).await?,
    };
    let documents: Vec<String> = texts
        .into_iter()
        .enumerate()
        .map(|(row, text)| {
            text.ok_or_else(|| {
                invalid(
                    NOT_NULL,
                    format!("row {}: a NULL document cannot be inserted", row + 1),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let documents = documents
        .into_iter()
        .enumerate()
        .map(|(row, text)| Ok((check_document(&text, key.as_ref(), row)?, text)))
        .collect::<Result<_, QueryError>>()?;
    Ok(Change::Insert {
        table,
        key,
        documents,
        on_conflict,
    })
}

/// `expression` with the document column written bare (`data`, `data.a.b`) qualified by
/// `target`: in `ON CONFLICT DO UPDATE` it means the present document (as in PostgreSQL),
/// and the shadow query also reads `excluded.data`.
fn qualified(expression: &Expr, target: &str) -> String {
    use datafusion::sql::sqlparser::ast::{Ident, visit_expressions_mut};
    let mut expression = expression.clone();
    let _ = visit_expressions_mut(&mut expression, |e| {
        match e {
            Expr::Identifier(ident) if ident.value == crate::table::DATA_COLUMN => {
                *e = Expr::CompoundIdentifier(vec![Ident::new(target), ident.clone()]);
            }
            Expr::CompoundIdentifier(idents)
                if idents
                    .first()
                    .is_some_and(|i| i.value == crate::table::DATA_COLUMN) =>
            {
                idents.insert(0, Ident::new(target));
            }
            // `EXCLUDED` is a keyword of the statement, whatever its case.
            Expr::CompoundIdentifier(idents)
                if idents.first().is_some_and(|i| {
                    i.quote_style.is_none() && i.value.eq_ignore_ascii_case(EXCLUDED)
                }) =>
            {
                idents[0] = Ident::new(EXCLUDED);
            }
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    expression.to_string()
}

/// The new versions of the present documents `excluded` conflicts with (new document by key),
/// as `ON CONFLICT DO UPDATE SET data = <document> [WHERE <condition>]` makes them: read in
/// `transaction` (its snapshot and own changes), checked as inserted documents
/// are. Keys whose row the condition rejects are absent from the answer.
pub(crate) async fn conflict_updates(
    transaction: &Transaction,
    table: &str,
    key: &TableKey,
    (target, document, condition): (&str, &str, Option<&str>),
    excluded: &[(KeyValue, String)],
    present: Option<&BTreeMap<KeyValue, Option<String>>>,
) -> Result<Vec<(KeyValue, String)>, QueryError> {
    if excluded.is_empty() {
        return Ok(Vec::new());
    }
    // Each present document read by its key, or as `present` has it: no query planned
    // (`crate::point_update`).
    let found = crate::point_update::conflict_updates(
        transaction.session(),
        transaction.schema(),
        table,
        key,
        (target, document, condition),
        excluded,
        present,
    )
    .await?;
    let rows: Vec<(Option<KeyValue>, Option<String>)> = match found {
        Some(found) => found.into_iter().map(|(k, d)| (Some(k), d)).collect(),
        None => {
            let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
            let values: Vec<String> = excluded
                .iter()
                .map(|(_, d)| format!("({})", quote(d)))
                .collect();
            let target_key = key_expression_of(key, Some(target));
            let sql = format!(
                "SELECT {target_key}, CAST(({document}) AS VARCHAR) FROM {table} AS {target} \
                 JOIN (VALUES {}) AS {EXCLUDED}(data) ON {target_key} = {}{}",
                values.join(", "),
                key_expression_of(key, Some(EXCLUDED)),
                condition.map_or(String::new(), |c| format!(" WHERE {c}"))
            );
            let batches = transaction.context()?.sql(&sql).await?.collect().await?;
            let mut rows = Vec::new();
            for batch in &batches {
                for (old, new) in texts_of(batch, 0)?.into_iter().zip(texts_of(batch, 1)?) {
                    rows.push((old.and_then(|text| key_from_text(&text, key.key_type)), new));
                }
            }
            rows
        }
    };
    let mut updates = Vec::new();
    for (old, new) in rows {
        let row = updates.len();
        let new = new.ok_or_else(|| {
            invalid(
                NOT_NULL,
                format!(
                    "row {}: ON CONFLICT DO UPDATE made the document NULL",
                    row + 1
                ),
            )
        })?;
        let new_key = check_document(&new, Some(key), row)?;
        let (Some(old), Some(new_key)) = (old, new_key) else {
            continue;
        };
        if old != new_key {
            return Err(not_supported(format!(
                "row {}: ON CONFLICT DO UPDATE changes the key {} of a document",
                row + 1,
                key.path.encode()
            )));
        }
        updates.push((old, new));
    }
    Ok(updates)
}

fn assigns_data(target: &AssignmentTarget) -> bool {
    matches!(target, AssignmentTarget::ColumnName(name) if name.to_string() == crate::table::DATA_COLUMN)
}

async fn update_change(transaction: &Transaction, update: &Update) -> Result<Change, QueryError> {
    if update.from.is_some() || !update.table.joins.is_empty() {
        return Err(not_supported("UPDATE … FROM is not supported yet"));
    }
    let TableFactor::Table { name, .. } = &update.table.relation else {
        return Err(not_supported("UPDATE of something other than a table"));
    };
    let [assignment] = &update.assignments[..] else {
        return Err(not_supported(
            "UPDATE sets one column: SET data = <new document>",
        ));
    };
    if !assigns_data(&assignment.target) {
        return Err(not_supported(format!(
            "UPDATE sets the document: SET {} = <new document>",
            crate::table::DATA_COLUMN
        )));
    }
    let (table, key) = target(transaction.schema().data_dir(), name)?;
    let key = key.ok_or_else(|| keyless(&table, "UPDATE"))?;
    // One document by its key: no query planned (`crate::point_update`).
    if let Some(found) =
        crate::point_update::new_documents(transaction, update, &table, &key, &assignment.value)
            .await?
    {
        let mut documents = Vec::new();
        for (old, new) in found {
            documents.extend(updated_document(&key, documents.len(), Some(old), new)?);
        }
        return Ok(Change::Update { table, documents });
    }
    // The relation as written, alias included: the statement's expressions may use it.
    let relation = &update.table.relation;
    let qualifier = relation_of(relation);
    let sql = format!(
        "SELECT {}, CAST(({}) AS VARCHAR) FROM {relation}{}",
        key_expression_of(&key, qualifier.as_deref()),
        assignment.value,
        where_clause(update.selection.as_ref())
    );
    let batches = transaction.context()?.sql(&sql).await?.collect().await?;
    let mut documents = Vec::new();
    for batch in &batches {
        let old_keys = texts_of(batch, 0)?;
        let new_documents = texts_of(batch, 1)?;
        for (old, new) in old_keys.into_iter().zip(new_documents) {
            let old = old.and_then(|text| key_from_text(&text, key.key_type));
            documents.extend(updated_document(&key, documents.len(), old, new)?);
        }
    }
    Ok(Change::Update { table, documents })
}

/// Row `row` of an `UPDATE`: the document's key (None: not read), its new text, checked;
/// `(old key, new key, new document)`.
fn updated_document(
    key: &TableKey,
    row: usize,
    old: Option<KeyValue>,
    new: Option<String>,
) -> Result<Option<(KeyValue, KeyValue, String)>, QueryError> {
    let new = new.ok_or_else(|| {
        invalid(
            NOT_NULL,
            format!(
                "row {}: the new document is NULL (an UPDATE cannot delete)",
                row + 1
            ),
        )
    })?;
    let new_key = check_document(&new, Some(key), row)?;
    // The shadow query reads the keys of live documents: a row without one is not a document
    // of the table's (it cannot happen; it is skipped rather than invented).
    Ok(match (old, new_key) {
        (Some(old), Some(new_key)) => Some((old, new_key, new)),
        _ => None,
    })
}

/// `with_documents`: the deleted documents are wanted too (for `RETURNING`).
async fn delete_change(
    transaction: &Transaction,
    delete: &Delete,
    with_documents: bool,
) -> Result<Change, QueryError> {
    if delete.using.is_some() || !delete.tables.is_empty() || delete.limit.is_some() {
        return Err(not_supported("DELETE with USING, several tables or LIMIT"));
    }
    let from = match &delete.from {
        FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from) => from,
    };
    let [from] = &from[..] else {
        return Err(not_supported("DELETE from several tables"));
    };
    let TableFactor::Table { name, .. } = &from.relation else {
        return Err(not_supported("DELETE from something other than a table"));
    };
    let (table, key) = target(transaction.schema().data_dir(), name)?;
    let key = key.ok_or_else(|| keyless(&table, "DELETE"))?;
    let relation = &from.relation;
    let qualifier = relation_of(relation);
    let sql = format!(
        "SELECT {}, {} FROM {relation}{}",
        key_expression_of(&key, qualifier.as_deref()),
        if with_documents {
            format!(
                "{}.{}",
                qualifier.as_deref().unwrap_or(&table),
                crate::table::DATA_COLUMN
            )
        } else {
            "NULL".to_owned()
        },
        where_clause(delete.selection.as_ref())
    );
    let batches = transaction.context()?.sql(&sql).await?.collect().await?;
    let (mut keys, mut documents) = (Vec::new(), Vec::new());
    for batch in &batches {
        for (old, document) in texts_of(batch, 0)?.into_iter().zip(texts_of(batch, 1)?) {
            if let Some(old) = old.and_then(|text| key_from_text(&text, key.key_type)) {
                keys.push(old);
                documents.extend(document);
            }
        }
    }
    Ok(Change::Delete {
        table,
        keys,
        documents,
    })
}

fn keyless(table: &str, statement: &str) -> QueryError {
    not_supported(format!(
        "{statement} needs a table with a key, which addresses its documents; table {table} has \
         none (create it with strata ingest --key PATH)"
    ))
}

fn where_clause(selection: Option<&Expr>) -> String {
    selection.map_or(String::new(), |e| format!(" WHERE {e}"))
}

/// `data->'a'->>'b'` (or `<qualifier>.data->…`): the key's `->>` text (a string's contents, an
/// integer's decimal text) in the document column of the relation named `qualifier`.
fn key_expression_of(key: &TableKey, qualifier: Option<&str>) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let segments = key.path.segments();
    let mut expression = match qualifier {
        Some(q) => format!("{q}.{}", crate::table::DATA_COLUMN),
        None => crate::table::DATA_COLUMN.to_owned(),
    };
    for (i, segment) in segments.iter().enumerate() {
        let arrow = if i + 1 == segments.len() { "->>" } else { "->" };
        expression.push_str(arrow);
        expression.push_str(&quote(segment));
    }
    expression
}

fn key_from_text(text: &str, key_type: KeyType) -> Option<KeyValue> {
    match key_type {
        KeyType::String => Some(KeyValue::String(text.to_owned())),
        KeyType::Integer => text.parse().ok().map(KeyValue::Integer),
    }
}

/// Column `column` of every row of a query, as text (None for NULL).
async fn documents_of(
    context: &SessionContext,
    sql: &str,
    column: usize,
) -> Result<Vec<Option<String>>, QueryError> {
    let batches = context.sql(sql).await?.collect().await?;
    let mut out = Vec::new();
    for batch in &batches {
        if batch.num_columns() != 1 {
            return Err(not_supported(format!(
                "the rows inserted have {} columns; a table has one, the document",
                batch.num_columns()
            )));
        }
        out.extend(texts_of(batch, column)?);
    }
    Ok(out)
}

pub(crate) fn texts_of(
    batch: &RecordBatch,
    column: usize,
) -> Result<Vec<Option<String>>, QueryError> {
    let array = cast(batch.column(column), &DataType::Utf8)
        .map_err(datafusion::error::DataFusionError::from)?;
    let strings = array.as_string::<i32>();
    Ok((0..strings.len())
        .map(|i| (!strings.is_null(i)).then(|| strings.value(i).to_owned()))
        .collect())
}

/// Checks one new document as ingest would; returns its key (for a keyed table).
fn check_document(
    text: &str,
    key: Option<&TableKey>,
    row: usize,
) -> Result<Option<KeyValue>, QueryError> {
    let document = parse_document(text.as_bytes()).map_err(|e| {
        invalid(
            INVALID_TEXT,
            format!("row {}: invalid input syntax for type json: {e}", row + 1),
        )
    })?;
    match key {
        Some(key) => key
            .of(&document)
            .map(Some)
            .map_err(|e| invalid(NOT_NULL, format!("row {}: {e}", row + 1))),
        None => Ok(None),
    }
}

/// Runs engine work off the async runtime, on a thread deep enough for documents
/// (`strata_json::DEEP_STACK_BYTES`).
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, QueryError> {
    tokio::task::spawn_blocking(move || strata_json::run_with_deep_stack(work))
        .await
        .map_err(|e| {
            QueryError::DataFusion(datafusion::error::DataFusionError::External(Box::new(e)))
        })?
        .map_err(QueryError::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use strata_json::JsonPath;

    #[test]
    fn the_key_is_read_as_text_along_its_path() {
        let key = TableKey {
            path: JsonPath::new(vec!["o'k".into(), "id".into()]),
            key_type: KeyType::Integer,
        };
        assert_eq!(key_expression_of(&key, None), "data->'o''k'->>'id'");
        assert_eq!(key_expression_of(&key, Some("t")), "t.data->'o''k'->>'id'");
        assert_eq!(
            key_from_text("-7", KeyType::Integer),
            Some(KeyValue::Integer(-7))
        );
    }

    #[test]
    fn an_expression_conflict_target_is_dropped() {
        assert_eq!(
            without_conflict_expressions(
                "INSERT INTO t VALUES ('{\"id\": \"(\"}') ON CONFLICT ((data->>'id')) DO NOTHING"
            ),
            "INSERT INTO t VALUES ('{\"id\": \"(\"}') ON CONFLICT  DO NOTHING"
        );
        let plain = "INSERT INTO t VALUES ('{}') ON CONFLICT (data) DO NOTHING";
        assert_eq!(without_conflict_expressions(plain), plain);
        assert_eq!(
            command_tag(
                "insert into t values ('{}') on conflict ((data->>'id')) do update set data = excluded.data"
            ),
            Some("INSERT")
        );
    }

    #[test]
    fn tags() {
        assert_eq!(command_tag("INSERT INTO t VALUES ('{}')"), Some("INSERT"));
        assert_eq!(
            command_tag("update t set data = '{}' where data.a = 1"),
            Some("UPDATE")
        );
        assert_eq!(command_tag("DELETE FROM t"), Some("DELETE"));
        assert_eq!(command_tag("SELECT 1"), None);
    }
}
