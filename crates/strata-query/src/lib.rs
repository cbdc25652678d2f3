//! SQL over Strata tables through upstream Apache DataFusion.
//!
//! Everything DataFusion-specific lives in this crate, attached through its extension points:
//! a catalog schema over the data directory and a table provider per table ([`table`]), an
//! expression planner for JSON path syntax ([`planner`]), an analyzer rule that turns path
//! accesses into column reads ([`rule`]), the physical scan that prunes and reads parts
//! ([`scan`]) and a few functions ([`udf`]). DataFusion does the rest: SQL, optimisation,
//! parallel vectorised execution, spilling aggregation.

pub mod count_matching;
pub mod date_part;
mod ddl;
pub mod distinct;
pub mod distinct_runs;
mod dml;
pub mod group_count;
mod insert_values;
pub mod jsonb;
pub mod key_join;
mod known_fields;
pub mod late_documents;
pub mod literal_typing;
pub mod memory;
pub mod number;
pub mod output;
pub mod partial_count;
pub mod paths;
pub mod planner;
pub mod point_read;
mod point_update;
pub mod prepared_change;
pub mod rule;
pub mod scan;
mod short_circuit;
pub mod stream;
pub mod table;
pub mod text_search;
pub mod transaction;
pub mod udf;

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::optimizer::Analyzer;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::ast::Statement;
use strata_engine::DataDir;

use crate::literal_typing::TypeComparisonsByLiteral;
use crate::planner::JsonPathPlanner;
use crate::point_read::{BoundValue, PointRead, PointValue};
use crate::rule::ReadPathsFromColumns;
use crate::table::{DataDirSchema, PathRegistry};

/// The PostgreSQL command tag of `sql` when it is one statement that changes a table or its
/// documents (`DROP TABLE`, `ALTER TABLE`, `INSERT`, `UPDATE`, `DELETE`), which
/// [`Session::run`] runs itself rather than through DataFusion; None for anything else.
pub fn table_change_tag(sql: &str) -> Option<&'static str> {
    match first_word(sql) {
        FirstWord::Comment => ddl::command_tag(sql).or_else(|| dml::command_tag(sql)),
        FirstWord::TableChange => ddl::command_tag(sql),
        FirstWord::DocumentChange => dml::command_tag(sql),
        FirstWord::Other => None,
    }
}

/// What the first word of a statement says it may be. The server asks what a statement is of
/// every statement, and parsing one costs more than answering a point read: only a statement
/// whose first word is one of these (or that starts with a comment) can change a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstWord {
    /// A comment comes first: the statement must be parsed to tell.
    Comment,
    /// `DROP`, `ALTER` or `CREATE` (`crate::ddl`).
    TableChange,
    /// `INSERT`, `UPDATE` or `DELETE` (`crate::dml`).
    DocumentChange,
    /// Anything else: neither.
    Other,
}

pub(crate) fn first_word(sql: &str) -> FirstWord {
    let rest = sql.trim_start();
    if rest.starts_with("--") || rest.starts_with("/*") {
        return FirstWord::Comment;
    }
    let word_end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    match rest[..word_end].to_ascii_lowercase().as_str() {
        "drop" | "alter" | "create" => FirstWord::TableChange,
        "insert" | "update" | "delete" => FirstWord::DocumentChange,
        _ => FirstWord::Other,
    }
}

/// Whether `sql` may be one `INSERT`, `UPDATE` or `DELETE` (parsed to tell only then).
pub(crate) fn changes_documents(sql: &str) -> bool {
    matches!(
        first_word(sql),
        FirstWord::Comment | FirstWord::DocumentChange
    ) && dml::command_tag(sql).is_some()
}

/// Whether `sql` may be one `DROP`, `ALTER` or `CREATE INDEX` (parsed to tell only then).
pub(crate) fn changes_table(sql: &str) -> bool {
    matches!(first_word(sql), FirstWord::Comment | FirstWord::TableChange)
        && ddl::command_tag(sql).is_some()
}

pub use ddl::index_table;
pub use dml::{RETURNING_METADATA, returning_description};
pub use stream::QueryStream;

pub use transaction::{Transaction, is_write_conflict};

/// The catalog and schema of a session's tables (`strata.public.NAME`).
pub(crate) const CATALOG: &str = "strata";
pub(crate) const SCHEMA: &str = "public";

/// How many times a statement that changes documents outside a transaction block is run again
/// after a write conflict before the conflict is reported (SQLSTATE 40001).
pub const AUTOCOMMIT_ATTEMPTS: usize = 64;

/// Field metadata key marking columns whose text is JSON (outputs embed it as JSON).
pub const JSON_FIELD_METADATA: &str = "strata.json";

/// Memory DataFusion may use before aggregations and sorts spill to disk.
pub const DEFAULT_MEMORY_LIMIT: usize = 4 * 1024 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
    /// A statement that cannot run as written, with its SQLSTATE (a document that is not JSON,
    /// a missing key, what is not supported yet).
    #[error("{message}")]
    Statement {
        sqlstate: &'static str,
        message: String,
    },
    /// A statement that ended before it was complete (the parser reports no position then).
    #[error("syntax error at end of input (line {line}, column {column}): {message}")]
    IncompleteStatement {
        message: String,
        line: usize,
        column: usize,
    },
}

/// The result of one statement.
pub struct QueryResult {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// A SQL session over one data directory.
pub struct Session {
    context: SessionContext,
    /// The catalog schema of the data directory's tables (also registered in `context`).
    tables: Arc<DataDirSchema>,
    /// Told the tables each transaction commit changed (the server's merger listens).
    on_commit: Option<transaction::CommitObserver>,
    /// Result schemas of the key joins planned so far, shared with the session's transactions.
    key_joins: Arc<key_join::KeyJoinSchemas>,
}

impl Session {
    pub fn open(data_dir: &Path) -> Result<Session, QueryError> {
        Session::open_with_pruning(data_dir, true, None, None)
    }

    /// A session whose statements together may hold `memory_limit` bytes before aggregations
    /// and sorts spill (instead of `STRATA_MEMORY_LIMIT` or [`DEFAULT_MEMORY_LIMIT`]).
    pub fn open_with_memory_limit(
        data_dir: &Path,
        memory_limit: usize,
    ) -> Result<Session, QueryError> {
        Session::open_with_pruning(data_dir, true, None, Some(memory_limit))
    }

    /// A session whose scans read part pages through `store`, an object store rooted at the data
    /// directory (`<table>/parts/<file>`), instead of the local file system. Manifests, footers
    /// and checksum files are still read from `data_dir`.
    pub fn open_with_store(
        data_dir: &Path,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Result<Session, QueryError> {
        Session::open_with_pruning(data_dir, true, Some(store), None)
    }

    /// A session reading part pages through `store` when given ([`Session::open_with_store`]),
    /// with `memory_limit` when given ([`Session::open_with_memory_limit`]).
    pub fn open_with(
        data_dir: &Path,
        store: Option<Arc<dyn object_store::ObjectStore>>,
        memory_limit: Option<usize>,
    ) -> Result<Session, QueryError> {
        Session::open_with_pruning(data_dir, true, store, memory_limit)
    }

    /// A session whose scans read every row of every part (no statistics, no key runs, every
    /// filter applied above the scan): the reference that pruned answers are checked against.
    pub fn open_without_pruning(data_dir: &Path) -> Result<Session, QueryError> {
        Session::open_with_pruning(data_dir, false, None, None)
    }

    fn open_with_pruning(
        data_dir: &Path,
        pruning: bool,
        store: Option<Arc<dyn object_store::ObjectStore>>,
        memory_limit: Option<usize>,
    ) -> Result<Session, QueryError> {
        let memory_limit = memory_limit.unwrap_or_else(|| {
            std::env::var("STRATA_MEMORY_LIMIT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MEMORY_LIMIT)
        });
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(memory::StrataMemoryPool::new(memory_limit)))
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::OsTmpDirectory),
            )
            .build_arc()?;
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_default_catalog_and_schema("strata", "public");
        // JSON keys are case-sensitive, so identifiers are too (as in ClickHouse).
        config.options_mut().sql_parser.enable_ident_normalization = false;
        // PostgreSQL precedence makes `data->'a' IS NULL` mean `(data->'a') IS NULL`.
        config.options_mut().sql_parser.dialect = datafusion::common::config::Dialect::PostgreSQL;
        // A partial aggregation that keeps more than 40% of its input rows (grouping by user or
        // by URL) costs a hash-table insert per row and saves the final phase little: the final
        // phase hashes what survives again. DataFusion's default gives up only above 80%.
        config
            .options_mut()
            .execution
            .skip_partial_aggregation_probe_ratio_threshold = 0.4;
        let registry = PathRegistry::default();
        let mut analyzer_rules = Analyzer::new().rules;
        analyzer_rules.insert(0, Arc::new(ReadPathsFromColumns));
        // Comparisons are typed by their literals before paths become column reads.
        analyzer_rules.insert(0, Arc::new(TypeComparisonsByLiteral::default()));
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features();
        if let Some(planners) = builder.expr_planners() {
            planners.insert(0, Arc::new(JsonPathPlanner::new(registry.clone())));
            planners.insert(1, Arc::new(date_part::ExtractPlanner::new()));
        }
        let mut optimizer_rules = datafusion::optimizer::Optimizer::new().rules;
        optimizer_rules.insert(
            0,
            Arc::new(distinct::SpillableCountDistinct::new(memory_limit)),
        );
        let mut physical_rules =
            datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
        // Before the first projection pushdown, which would compute a join condition's guarded
        // operands below the join for every row.
        let pushdown = physical_rules
            .iter()
            .position(|rule| rule.name() == "ProjectionPushdown")
            .unwrap_or(0);
        physical_rules.insert(pushdown, Arc::new(short_circuit::SealJoinShortCircuits));
        let state = builder
            .with_type_planner(Arc::new(jsonb::JsonTypePlanner::default()))
            .with_analyzer_rules(analyzer_rules)
            .with_optimizer_rules(optimizer_rules)
            .with_physical_optimizer_rules(physical_rules)
            .with_physical_optimizer_rule(Arc::new(group_count::CountByKey))
            .with_physical_optimizer_rule(Arc::new(distinct_runs::DistinctRuns))
            .with_physical_optimizer_rule(Arc::new(late_documents::BuildDocumentsLate))
            .with_physical_optimizer_rule(Arc::new(count_matching::CountMatching))
            // Last: the rules above read filter predicates as DataFusion built them.
            .with_physical_optimizer_rule(Arc::new(short_circuit::PerRowShortCircuit))
            .build();
        let context = SessionContext::new_with_state(state);
        for function in udf::all_functions() {
            context.register_udf(function);
        }
        let catalog = datafusion::catalog::MemoryCatalogProvider::new();
        use datafusion::catalog::CatalogProvider;
        // A commit of several tables that a killed process left half done is finished before
        // anything is read.
        DataDir::new(data_dir).recover_transactions()?;
        let mut schema = DataDirSchema::new(DataDir::new(data_dir), registry).with_pruning(pruning);
        if let Some(store) = store {
            schema = schema.with_store(store);
        }
        let tables = Arc::new(schema);
        catalog.register_schema("public", tables.clone())?;
        context.register_catalog("strata", Arc::new(catalog));
        Ok(Session {
            context,
            tables,
            on_commit: None,
            key_joins: Arc::default(),
        })
    }

    pub fn context(&self) -> &SessionContext {
        &self.context
    }

    /// Answers the point read `read` (a statement [`PointRead::parse`] recognised) with `value`
    /// as its compared value, without planning; None when the statement must be planned
    /// instead (its table is not keyed by its path, or the value is not compared as a key).
    pub async fn point_read(
        &self,
        read: &PointRead,
        value: &BoundValue,
    ) -> Result<Option<QueryResult>, QueryError> {
        self.tables.point_read(read, value).await
    }

    /// The result schemas of the session's key joins (`key_join`), and how many statements
    /// they answered without planning.
    pub fn key_joins(&self) -> &key_join::KeyJoinSchemas {
        &self.key_joins
    }

    /// Plans and runs one statement, collecting its result.
    pub async fn run(&self, sql: &str) -> Result<QueryResult, QueryError> {
        self.run_at(sql, false).await
    }

    /// [`Session::run`] for a client whose transactions are `SERIALIZABLE` (`serializable`,
    /// the PostgreSQL connection's `default_transaction_isolation`): a statement that changes
    /// documents then also has its reads validated at commit, and runs again after a read
    /// conflict as after a write conflict (see [`Session::autocommit`]).
    pub async fn run_at(&self, sql: &str, serializable: bool) -> Result<QueryResult, QueryError> {
        if let Some(result) = ddl::run(&self.context, sql)? {
            return Ok(result);
        }
        if changes_documents(sql) {
            return self.autocommit(sql, serializable).await;
        }
        if let Some(read) = PointRead::parse(sql)
            && let PointValue::Literal(value) = &read.value
            && let Some(result) = self.point_read(&read, value).await?
        {
            return Ok(result);
        }
        let join = key_join::KeyJoin::parse(sql);
        if let Some(join) = &join
            && let PointValue::Literal(value) = join.value()
            && let Some(result) = key_join::run(&self.tables, join, value, &self.key_joins).await?
        {
            return Ok(result);
        }
        let frame = match self.context.sql(&stream::copy_with_format(sql)?).await {
            Ok(frame) => frame,
            Err(e) => return Err(with_end_position(e, sql)),
        };
        let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
        if let Some(join) = &join {
            self.key_joins.remember(join.shape(), schema.clone());
        }
        let batches = frame.collect().await?;
        Ok(QueryResult { schema, batches })
    }
}

/// Puts Strata's JSON types (`::json`, `::jsonb`) back in front of the type planner `context`
/// has now: an extension that installs its own (the PostgreSQL catalog does) replaces it.
pub fn install_json_types(context: &SessionContext) {
    let state = context.state_ref();
    let existing = state.read().clone();
    let mut builder = SessionStateBuilder::new_from_existing(existing);
    let inner = builder.type_planner().take();
    let planner = jsonb::JsonTypePlanner::wrapping(inner);
    *state.write() = builder.with_type_planner(Arc::new(planner)).build();
}

impl Session {
    /// Begins a transaction: every table is read at the snapshot taken now, and changes are
    /// buffered until [`Transaction::commit`] (see [`transaction`]).
    pub fn begin(&self) -> Result<Transaction, QueryError> {
        Transaction::begin(
            &self.context,
            self.on_commit.clone(),
            self.key_joins.clone(),
            true,
        )
    }

    /// The same session, calling `observer` with the name of each table a transaction (or a
    /// statement that changes documents) of it commits.
    pub fn with_commit_observer(mut self, observer: transaction::CommitObserver) -> Session {
        self.on_commit = Some(observer);
        self
    }

    /// Runs a statement that changes documents in a transaction of its own, run again (with a
    /// new snapshot) when another commit changed one of its keys meanwhile: what PostgreSQL's
    /// `READ COMMITTED` does for a single statement by re-checking the rows it waited for.
    ///
    /// `serializable`: the transaction records its reads, and another commit that changed one
    /// of them since the snapshot runs the statement again too. Nothing of a statement reaches
    /// its client before its commit, so running it again on a newer snapshot is what a client
    /// retrying PostgreSQL's 40001 would do, and the order of commits is a serial order.
    pub(crate) async fn autocommit(
        &self,
        sql: &str,
        serializable: bool,
    ) -> Result<QueryResult, QueryError> {
        self.autocommit_parsed(sql, None, serializable).await
    }

    /// [`Session::run_at`] of a document change parsed already (`parsed`: a prepared change
    /// bound to this execution's values, [`prepared_change`]); `sql` is its bound text.
    pub async fn run_change_at(
        &self,
        sql: &str,
        parsed: Statement,
        serializable: bool,
    ) -> Result<QueryResult, QueryError> {
        self.autocommit_parsed(sql, Some(parsed), serializable)
            .await
    }

    async fn autocommit_parsed(
        &self,
        sql: &str,
        parsed: Option<Statement>,
        serializable: bool,
    ) -> Result<QueryResult, QueryError> {
        let mut attempt = 1;
        loop {
            let transaction = Transaction::begin(
                &self.context,
                self.on_commit.clone(),
                self.key_joins.clone(),
                false,
            )?;
            transaction.set_serializable(serializable)?;
            let result = transaction.run_parsed(sql, parsed.clone()).await?;
            match transaction.commit().await {
                Ok(_) => return Ok(result),
                Err(e) if is_write_conflict(&e) && attempt < AUTOCOMMIT_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The parser gives a line and column for every syntax error except running out of input;
/// that one gets the position just past the statement's last character.
pub(crate) fn with_end_position(
    error: datafusion::error::DataFusionError,
    sql: &str,
) -> QueryError {
    use datafusion::error::DataFusionError;
    match &error {
        DataFusionError::SQL(parser_error, _) => {
            let message = parser_error.to_string();
            if message.contains("found: EOF") && !message.contains("Line:") {
                let trimmed = sql.trim_end();
                let line = trimmed.lines().count().max(1);
                let column = trimmed.lines().last().map_or(0, |l| l.chars().count()) + 1;
                return QueryError::IncompleteStatement {
                    message,
                    line,
                    column,
                };
            }
            QueryError::DataFusion(error)
        }
        _ => QueryError::DataFusion(error),
    }
}

/// Splits a script into statements at top-level semicolons (semicolons inside strings and
/// comments do not split), each statement its own text as written: re-printing a parsed
/// statement is not faithful (DataFusion prints `COPY ... TO 'file'` without the quotes). Blank
/// statements are dropped; text the tokenizer cannot read comes back whole so that running it
/// reports the error.
pub fn split_statements(sql: &str) -> Vec<String> {
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return vec![sql.to_owned()];
    };
    let mut statements = Vec::new();
    let mut start = 0;
    let mut blank = true;
    for token in &tokens {
        match &token.token {
            Token::SemiColon => {
                let end = stream::byte_offset(sql, token.span.start);
                if !blank {
                    statements.push(sql.get(start..end).unwrap_or_default().trim().to_owned());
                }
                start = end + 1;
                blank = true;
            }
            Token::Whitespace(_) | Token::EOF => {}
            _ => blank = false,
        }
    }
    if !blank {
        statements.push(sql.get(start..).unwrap_or_default().trim().to_owned());
    }
    statements
}

#[cfg(test)]
mod change_tag_tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::{ddl, dml, table_change_tag};

    const STATEMENTS: &[&str] = &[
        "INSERT INTO t VALUES ('{}')",
        "insert into t values ('{}') on conflict ((data->>'id')) do nothing",
        "UPDATE t SET data = data || '{\"a\":1}' WHERE data.id = 1",
        "DELETE FROM t WHERE data.id = 2",
        "DROP TABLE t",
        "ALTER TABLE t SET (ttl = '30d')",
        "CREATE INDEX i ON t ((data->>'user'))",
        "DROP INDEX IF EXISTS i",
        "CREATE VIEW v AS SELECT 1",
        "DROP VIEW v",
        "SELECT * FROM t",
        "BEGIN",
        "COMMIT",
        "INSERT INTO t VALUES ('{}'); DELETE FROM t",
        "INSERTINTO t",
        "UPDATE",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "EXPLAIN DELETE FROM t",
        "",
    ];

    proptest! {
        #[test]
        fn the_first_word_decides_as_parsing_does(
            statement in prop::sample::select(STATEMENTS),
            lead in "[ \t\n]{0,3}(--[a-z ]{0,5}\n|/\\*[a-z ]{0,5}\\*/)?[ \t\n]{0,3}",
            upper in any::<bool>(),
        ) {
            let statement = match upper {
                true => statement.to_uppercase(),
                false => statement.to_owned(),
            };
            let sql = format!("{lead}{statement}");
            let parsed = ddl::command_tag(&sql).or_else(|| dml::command_tag(&sql));
            prop_assert_eq!(table_change_tag(&sql), parsed, "{:?}", sql);
        }
    }

    #[test]
    fn statements_that_change_tables_are_tagged() {
        assert_eq!(
            table_change_tag("  update t set data = '{}'"),
            Some("UPDATE")
        );
        assert_eq!(table_change_tag("-- x\nDROP TABLE t"), Some("DROP TABLE"));
        assert_eq!(table_change_tag("SELECT 1"), None);
    }
}

#[cfg(test)]
mod split_tests {
    use super::split_statements;

    #[test]
    fn statements_keep_their_text() {
        assert_eq!(
            split_statements(
                "SELECT ';' AS \"a;b\"; -- c;\n COPY (SELECT 1) TO '/tmp/é;x.csv';;\n/* ; */ SELECT 2"
            ),
            vec![
                "SELECT ';' AS \"a;b\"",
                "-- c;\n COPY (SELECT 1) TO '/tmp/é;x.csv'",
                "/* ; */ SELECT 2"
            ]
        );
        assert_eq!(
            split_statements(" ; -- only a comment\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            split_statements("SELECT 'é';SELECT 'ü'"),
            vec!["SELECT 'é'", "SELECT 'ü'"]
        );
        // Unreadable text comes back whole.
        assert_eq!(split_statements("SELECT 'open"), vec!["SELECT 'open"]);
    }
}
