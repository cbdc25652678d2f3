//! Statements over the PostgreSQL protocol: datafusion-postgres's `DfSessionService` plans and
//! encodes them; this wrapper adds what a shared server needs around each one —
//! - a slot of `limits.max_concurrent_queries` (waited for) held until the last row is sent;
//! - `limits.query_timeout_secs` and **cancel** (a CancelRequest, e.g. Ctrl-C in psql), which
//!   end the statement with SQLSTATE 57014 *also while its rows are being produced*: rows are
//!   computed lazily as pgwire sends them, after `do_query` returns, so the row stream itself is
//!   wrapped, and dropping it drops DataFusion's stream, which stops the scan;
//! - the statement latency metric;
//! - point reads by key (`strata_query::point_read`) answered without planning, in autocommit
//!   from the portal's parameter and in blocks from the bound statement;
//! - columns that hold whole JSON documents (marked `strata.json` in the plan) typed `json`
//!   instead of `text`, in row descriptions and results of the extended protocol (what drivers
//!   use), so drivers hand documents back as documents.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::{DfSessionService, Parser};
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::Type;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::extendedquery::{Bind, Describe, Parse, ParseComplete};
use strata_query::prepared_change::PreparedChange;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::connection_threads::{OnWorkers, rows_on_workers};
use super::deferred_flush::Deferred;
use super::prepared::{self, Command, PreparedStatements};
use super::transactions::{
    Block, Control, OpenSlots, TransactionSlot, control_of, serializable_by_options,
};
use crate::{Shared, sqlstate};

/// The running statement of each connection, by its (process id, secret key).
/// A connection as a CancelRequest names it: its process id and secret key.
type ConnectionKey = (i32, Vec<u8>);

/// Statements are numbered so that a finished one never unregisters its successor.
#[derive(Default)]
pub struct CancelRegistry {
    running: Mutex<HashMap<ConnectionKey, (u64, CancellationToken)>>,
    next_statement: AtomicU64,
}

#[async_trait]
impl CancelHandler for CancelRegistry {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.cancel(request.pid, request.secret_key.to_bytes().to_vec());
    }
}

impl CancelRegistry {
    /// Cancels the statement running on the connection of `pid` and `secret_key`, if any.
    pub fn cancel(&self, pid: i32, secret_key: Vec<u8>) {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        // A request with a wrong secret matches nothing and is ignored, as in PostgreSQL.
        if let Some((_, token)) = running.get(&(pid, secret_key)) {
            token.cancel();
        }
    }
}

/// One statement's claim on the server: its slot, its cancel token and its clock. Dropped when
/// the statement's last row is sent or the statement fails.
struct Running {
    shared: Arc<Shared>,
    registry: Arc<CancelRegistry>,
    key: ConnectionKey,
    statement: u64,
    token: CancellationToken,
    deadline: tokio::time::Instant,
    started: Instant,
    ok: bool,
    /// A slot of `limits.max_concurrent_queries`, held while the statement works.
    slot: Option<OwnedSemaphorePermit>,
    /// The connection's transaction block, idle again when the statement ends.
    connection: Arc<TransactionSlot>,
}

impl Running {
    /// Gives the statement's query slot back before it ends: a `COMMIT` waits for its group
    /// commit (a moment for the other open transactions, then the batch's write), which is no
    /// work of its own, and holding a slot meanwhile made the other connections' statements
    /// queue for slots (at 64 clients, 16 slots were mostly held by waiting commits).
    fn release_slot(&mut self) {
        self.slot = None;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self
            .registry
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if running
            .get(&self.key)
            .is_some_and(|(id, _)| *id == self.statement)
        {
            running.remove(&self.key);
        }
        drop(running);
        self.connection.statement_ended();
        self.shared
            .metrics
            .observe_query(self.started.elapsed(), self.ok);
    }
}

/// Which output columns of `plan` hold whole JSON documents.
fn json_columns(plan: &LogicalPlan) -> Vec<bool> {
    plan.schema()
        .fields()
        .iter()
        .map(|f| f.metadata().contains_key(strata_query::JSON_FIELD_METADATA))
        .collect()
}

/// `fields` with the JSON document columns typed `json` (the text is the same bytes in both
/// the text and the binary format of `json`).
fn with_json_types(fields: &[FieldInfo], json: &[bool]) -> Vec<FieldInfo> {
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            if json.get(i).copied().unwrap_or(false)
                && matches!(*field.datatype(), Type::TEXT | Type::VARCHAR)
            {
                FieldInfo::new(
                    field.name().to_owned(),
                    field.table_id(),
                    field.column_id(),
                    Type::JSON,
                    field.format(),
                )
                .with_format_options(field.format_options().clone())
            } else {
                field.clone()
            }
        })
        .collect()
}

type DfStatement = <DfSessionService as ExtendedQueryHandler>::Statement;

fn plan_of(statement: &DfStatement) -> Option<&LogicalPlan> {
    statement.1.as_ref().map(|(_, plan)| plan)
}

/// datafusion-postgres's parser, with JSON document columns described as `json`.
pub struct StrataParser {
    inner: Arc<Parser>,
}

#[async_trait]
impl QueryParser for StrataParser {
    type Statement = DfStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        if let Some(description) = strata_query::returning_description(sql)
            .or_else(|| super::transactions::isolation_description(sql))
        {
            // Runs at Execute as other changes do; described (Describe's row description) by a
            // query with the RETURNING list's columns and no rows.
            let described = self
                .inner
                .parse_sql(client, &description, &[])
                .await
                .map_err(with_sqlstate)?;
            return Ok(described.map(|(_, plan)| (sql.to_owned(), plan)));
        }
        if strata_query::table_change_tag(sql).is_some() || control_of(sql).is_some() {
            // Transaction control is Strata's own (`super::transactions`).
            // DataFusion cannot plan ALTER TABLE, and its DROP TABLE skips Strata's rules: the
            // statement runs through `Session::run` at execution, unplanned here.
            return Ok(Some((sql.to_owned(), None)));
        }
        self.inner
            .parse_sql(client, sql, types)
            .await
            .map_err(with_sqlstate)
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        self.inner.get_parameter_types(statement)
    }

    fn get_result_schema(
        &self,
        statement: &Self::Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let fields = self.inner.get_result_schema(statement, format)?;
        Ok(match plan_of(statement) {
            Some(plan) => with_json_types(&fields, &json_columns(plan)),
            None => fields,
        })
    }
}

/// The `count` a document-changing statement answers (None for other statements).
fn changed_rows(result: &strata_query::QueryResult) -> Option<usize> {
    use arrow::array::AsArray;
    let batch = result.batches.first()?;
    let column = batch.column_by_name("count")?;
    let counts = column.as_primitive_opt::<arrow::datatypes::UInt64Type>()?;
    (counts.len() == 1).then(|| counts.value(0) as usize)
}

pub struct StrataStatements {
    inner: Arc<DfSessionService>,
    parser: Arc<StrataParser>,
    shared: Arc<Shared>,
    registry: Arc<CancelRegistry>,
    /// Every connection's transaction block, for the idle-in-transaction sweep.
    slots: Arc<OpenSlots>,
    /// Which prepared statements are point reads, by their text (see [`PointReads`]).
    point_reads: PointReads,
    /// What each prepared statement is, by its text ([`StatementKind`]).
    kinds: Memo<StatementKind>,
    /// Each prepared statement's text cut at its placeholders, by its text.
    templates: Memo<Arc<Result<super::parameters::Template, String>>>,
    /// Prepared document changes parsed with their placeholders, by their text (None: bound as
    /// text and parsed at each execution).
    changes: Memo<Option<Arc<PreparedChange>>>,
    /// Prepared queries recognised as key joins (`strata_query::key_join`) with a parameter
    /// for their `WHERE` value, by their text (None: not one).
    key_joins: Memo<Option<Arc<strata_query::key_join::KeyJoin>>>,
}

/// What is told of a prepared statement by its text, kept per text so that a statement is
/// parsed once, not at every execution. Bounded: emptied when full.
struct Memo<V> {
    known: Mutex<HashMap<String, V>>,
}

impl<V> Default for Memo<V> {
    fn default() -> Self {
        Memo {
            known: Mutex::default(),
        }
    }
}

impl<V: Clone> Memo<V> {
    const MAX_STATEMENTS: usize = 4096;

    fn get_or(&self, sql: &str, tell: impl FnOnce(&str) -> V) -> V {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = known.get(sql) {
            return found.clone();
        }
        let told = tell(sql);
        if known.len() >= Self::MAX_STATEMENTS {
            known.clear();
        }
        known.insert(sql.to_owned(), told.clone());
        told
    }
}

/// Statement texts recognised as point reads (`strata_query::point_read`) or not.
type PointReads = Memo<Option<Arc<strata_query::point_read::PointRead>>>;

/// What a prepared statement's template gives one execution in a transaction block besides its
/// bound text: the change's tree with the values bound, or the point read or key join its text
/// was recognised as once, with the value of its parameter. Without it the bound text is parsed.
enum Bound {
    Change(Box<Statement>),
    PointRead(
        Arc<strata_query::point_read::PointRead>,
        strata_query::point_read::BoundValue,
    ),
    KeyJoin(
        Arc<strata_query::key_join::KeyJoin>,
        strata_query::point_read::BoundValue,
    ),
}

/// What a statement is, as far as choosing how to run it goes: transaction control, a change
/// of a table (with its command tag), or neither. Parsing a statement to tell costs about what
/// running a point read does, and a booking's statements were parsed three times each.
#[derive(Clone)]
struct StatementKind {
    control: Option<Control>,
    change_tag: Option<&'static str>,
}

impl StatementKind {
    fn of(sql: &str) -> StatementKind {
        let control = control_of(sql);
        let change_tag = match control {
            Some(_) => None,
            None => strata_query::table_change_tag(sql),
        };
        StatementKind {
            control,
            change_tag,
        }
    }
}

impl StrataStatements {
    pub fn new(
        inner: Arc<DfSessionService>,
        shared: Arc<Shared>,
        registry: Arc<CancelRegistry>,
        slots: Arc<OpenSlots>,
    ) -> Self {
        let parser = Arc::new(StrataParser {
            inner: inner.query_parser(),
        });
        StrataStatements {
            inner,
            parser,
            shared,
            registry,
            slots,
            point_reads: PointReads::default(),
            kinds: Memo::default(),
            templates: Memo::default(),
            changes: Memo::default(),
            key_joins: Memo::default(),
        }
    }

    /// The portal's statement `sql` with its parameters bound as literals.
    fn bind(&self, sql: &str, portal: &Portal<DfStatement>) -> PgWireResult<String> {
        let types = &portal.statement.parameter_types;
        self.template(sql)
            .as_ref()
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|template| super::parameters::bind(sql, template, portal, types))
            .map_err(|message| statement_error(sqlstate::INVALID_PARAMETER, message))
    }

    fn template(&self, sql: &str) -> Arc<Result<super::parameters::Template, String>> {
        self.templates
            .get_or(sql, |sql| Arc::new(super::parameters::Template::of(sql)))
    }

    /// The portal's document change `sql` parsed once and bound to the portal's parameters
    /// (`strata_query::prepared_change`); None when it is bound as text instead.
    fn bind_change(
        &self,
        sql: &str,
        portal: &Portal<DfStatement>,
    ) -> PgWireResult<Option<Statement>> {
        let template = self.template(sql);
        let Ok(template) = template.as_ref() else {
            return Ok(None);
        };
        let prepared = self.changes.get_or(sql, |sql| {
            PreparedChange::parse(sql, template.placeholders()).map(Arc::new)
        });
        let Some(prepared) = prepared else {
            return Ok(None);
        };
        super::parameters::bind_change(&prepared, portal, &portal.statement.parameter_types)
            .map(Some)
            .map_err(|message| statement_error(sqlstate::INVALID_PARAMETER, message))
    }

    /// The portal's query `sql` as a point read or key join recognised once from its text, its
    /// parameter bound; None when it is neither, or its value is not one a read by key takes.
    fn bind_read(&self, sql: &str, portal: &Portal<DfStatement>) -> PgWireResult<Option<Bound>> {
        use strata_query::point_read::PointValue;
        let value_of = |value: &PointValue| match value {
            PointValue::Parameter(index) => {
                super::parameters::point_value(portal, *index, &portal.statement.parameter_types)
                    .map_err(|message| statement_error(sqlstate::INVALID_PARAMETER, message))
            }
            // A literal is read from the bound text as well.
            PointValue::Literal(_) => Ok(None),
        };
        if let Some(read) = self.point_reads.get_or(sql, point_read_of) {
            return Ok(value_of(&read.value)?.map(|value| Bound::PointRead(read, value)));
        }
        if let Some(join) = self.key_joins.get_or(sql, key_join_of) {
            return Ok(value_of(join.value())?.map(|value| Bound::KeyJoin(join, value)));
        }
        Ok(None)
    }

    /// The transaction block of `client`'s connection (created idle on first use, and
    /// registered for the idle-in-transaction sweep; dropped, and an open transaction rolled
    /// back, when the connection ends).
    fn slot_of<C: ClientInfo>(&self, client: &C) -> Arc<TransactionSlot> {
        let mut created = false;
        let slot = client.session_extensions().get_or_insert_with(|| {
            created = true;
            let slot = TransactionSlot::default();
            let options = client.metadata().get("options");
            if let Some(serializable) = options.and_then(|o| serializable_by_options(o)) {
                slot.set_serializable_by_default(serializable);
            }
            slot
        });
        if created {
            self.slots.register(&slot);
        }
        slot
    }

    /// The portal's statement answered as a point read (`strata_query::point_read`), or None
    /// when it is not one or must be planned.
    async fn point_read(&self, portal: &Portal<DfStatement>) -> PgWireResult<Option<Response>> {
        use strata_query::point_read::PointValue;
        let sql = &portal.statement.statement.0;
        let Some(read) = self.point_reads.get_or(sql, point_read_of) else {
            return Ok(None);
        };
        let value = match &read.value {
            PointValue::Literal(value) => value.clone(),
            PointValue::Parameter(index) => {
                let types = &portal.statement.parameter_types;
                match super::parameters::point_value(portal, *index, types)
                    .map_err(|message| statement_error(sqlstate::INVALID_PARAMETER, message))?
                {
                    Some(value) => value,
                    None => return Ok(None),
                }
            }
        };
        // On the runtime's worker, unlike other statements: a point read blocks only on small
        // reads (the manifest, a shared lock on the table's readers file, a key page once),
        // and handing the worker off (`block_in_place`) would cost more than the read.
        let result = self
            .shared
            .session
            .point_read(&read, &value)
            .await
            .map_err(query_error)?;
        let Some(result) = result else {
            return Ok(None);
        };
        use datafusion_postgres::arrow_pg::datatypes::encode_recordbatch;
        let fields = Arc::new(self.parser.get_result_schema(
            &portal.statement.statement,
            Some(&portal.result_column_format),
        )?);
        if fields.len() != result.schema.fields().len() {
            // Described otherwise at Parse: answer as described, by the plan.
            return Ok(None);
        }
        let rows: Vec<_> = result
            .batches
            .into_iter()
            .flat_map(|batch| encode_recordbatch(fields.clone(), batch))
            .collect();
        Ok(Some(Response::Query(QueryResponse::new(
            fields,
            futures::stream::iter(rows),
        ))))
    }

    /// A statement that changes tables or documents, outside a block, through `Session::run_at`
    /// as over HTTP and the command line, at the connection's default isolation (`slot`):
    /// `SERIALIZABLE` validates its reads too.
    async fn change_table(
        &self,
        slot: &TransactionSlot,
        sql: &str,
        tag: &str,
        format: &Format,
        parsed: Option<Statement>,
    ) -> PgWireResult<Response> {
        let serializable = slot.serializable_by_default();
        let session = &self.shared.session;
        let result = match (parsed, tag) {
            // A document change waits for its commit on a blocking thread (`Transaction::
            // commit`); the rest of it runs here, as in a block.
            (Some(parsed), _) => session.run_change_at(sql, parsed, serializable).await,
            (None, "INSERT" | "UPDATE" | "DELETE") => session.run_at(sql, serializable).await,
            // `DROP`, `ALTER`, `CREATE INDEX` take the table's writer lock, which a merge may
            // hold: they wait on a blocking thread, not on the connection's thread.
            (None, _) => {
                let (shared, sql) = (self.shared.clone(), sql.to_owned());
                let workers = shared.workers.clone();
                workers
                    .spawn_blocking(move || {
                        shared
                            .workers
                            .block_on(shared.session.run_at(&sql, serializable))
                    })
                    .await
                    .map_err(|e| {
                        strata_query::QueryError::DataFusion(
                            datafusion::error::DataFusionError::External(Box::new(e)),
                        )
                    })
                    .and_then(|result| result)
            }
        };
        result
            .map_err(query_error)
            .and_then(|result| change_response(tag, &result, format))
    }

    /// Runs `sql` for a connection whose transaction block is `slot` (see
    /// `super::transactions`): a control statement, or a statement of the open block. Without
    /// a block, the statement runs in a transaction of its own.
    /// `kind` is what the statement is when already told (None: told here from `sql`);
    /// `parsed`, its document change parsed already (a prepared one, bound).
    async fn in_block(
        &self,
        slot: &TransactionSlot,
        sql: &str,
        format: &Format,
        kind: Option<StatementKind>,
        bound: Option<Bound>,
    ) -> PgWireResult<Response> {
        let kind = kind.unwrap_or_else(|| StatementKind::of(sql));
        if let Some(control) = kind.control {
            return self.control(slot, control, format).await;
        }
        let change_tag = kind.change_tag;
        match slot.current() {
            None => {
                let transaction = self.begin_transaction()?;
                let response = self
                    .in_transaction(&transaction, false, sql, change_tag, format, bound)
                    .await?;
                transaction.commit().await.map_err(query_error)?;
                Ok(response)
            }
            Some(Err(())) => Err(in_failed_transaction()),
            Some(Ok((transaction, read_only))) => {
                let result = self
                    .in_transaction(&transaction, read_only, sql, change_tag, format, bound)
                    .await;
                if result.is_err() {
                    slot.fail();
                }
                result
            }
        }
    }

    /// One statement of a simple query that holds several, or that is a transaction control or
    /// prepared-statement command: `EXECUTE` runs its bound statement in its place.
    async fn one_of_several<C>(
        &self,
        client: &mut C,
        slot: &TransactionSlot,
        prepared: &PreparedStatements,
        statement: &str,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if prepared::is_command(statement) && slot.is_failed() {
            return Err(in_failed_transaction());
        }
        let bound;
        let statement = match prepared.command(statement)? {
            None => statement,
            Some(Command::Prepared) => return Ok(Response::Execution(Tag::new("PREPARE"))),
            Some(Command::Deallocated(name)) => {
                // Drivers deallocate their protocol-level statements this way too. Without a
                // name those stay: a driver that prepares again under a name in use replaces it.
                if let Some(name) = name {
                    client.portal_store().rm_statement(&name);
                }
                return Ok(Response::Execution(Tag::new("DEALLOCATE")));
            }
            Some(Command::Run(text)) => {
                bound = text;
                bound.as_str()
            }
        };
        let format = Format::UnifiedText;
        let kind = StatementKind::of(statement);
        if slot.in_block() || kind.control.is_some() {
            self.in_block(slot, statement, &format, Some(kind), None)
                .await
        } else if let Some(tag) = kind.change_tag {
            self.change_table(slot, statement, tag, &format, None).await
        } else {
            SimpleQueryHandler::do_query(&*self.inner, client, statement)
                .await
                .map(|mut r| r.pop().unwrap_or(Response::EmptyQuery))
        }
    }

    fn begin_transaction(&self) -> PgWireResult<strata_query::Transaction> {
        // Pinning takes each table's manifest (in memory for tables the server commits to,
        // else a small file in the page cache) and a shared read lease, which no writer holds
        // for long: tens of microseconds, run on the worker. Handing the worker's core over to
        // another thread for it (`block_in_place`) cost more than the pinning itself.
        self.shared.session.begin().map_err(query_error)
    }

    /// One statement of an open transaction: a change (`change_tag`: its command tag) is
    /// buffered, a query reads the transaction's snapshot and its own changes. `bound`: what a
    /// prepared statement's template already told of it.
    async fn in_transaction(
        &self,
        transaction: &strata_query::Transaction,
        read_only: bool,
        sql: &str,
        change_tag: Option<&'static str>,
        format: &Format,
        bound: Option<Bound>,
    ) -> PgWireResult<Response> {
        if let Some(tag) = change_tag {
            if read_only {
                return Err(statement_error(
                    sqlstate::READ_ONLY_TRANSACTION,
                    format!("cannot execute {tag} in a read-only transaction"),
                ));
            }
            let parsed = match bound {
                Some(Bound::Change(parsed)) => Some(*parsed),
                _ => None,
            };
            let result = Box::pin(transaction.run_parsed(sql, parsed))
                .await
                .map_err(query_error)?;
            return change_response(tag, &result, format);
        }
        let answered = match &bound {
            Some(Bound::PointRead(read, value)) => transaction
                .point_read(read, value)
                .await
                .map_err(query_error)?,
            Some(Bound::KeyJoin(join, value)) => transaction
                .bound_key_join(join, value)
                .await
                .map_err(query_error)?,
            _ => None,
        };
        if let Some(result) = answered {
            return document_rows(&result, format);
        }
        if let Some(read) = strata_query::point_read::PointRead::parse(sql)
            && let strata_query::point_read::PointValue::Literal(value) = &read.value
            && let Some(result) = transaction
                .point_read(&read, value)
                .await
                .map_err(query_error)?
        {
            // Parameters were bound into the statement's text as literals (`bind`).
            return document_rows(&result, format);
        }
        if let Some(result) = Box::pin(transaction.key_join(sql))
            .await
            .map_err(query_error)?
        {
            return document_rows(&result, format);
        }
        // Boxed, as is every statement's work below `do_query`: a future holds its largest
        // branch inline, and pgwire moves `do_query`'s future into a box for every statement
        // (a copy of all of it), while planning a query through DataFusion is rare here.
        let planned = Box::pin(async {
            let frame = transaction.sql(sql).await.map_err(query_error)?;
            datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe(frame, format, None)
                .await
        });
        Ok(Response::Query(planned.await?))
    }

    /// `BEGIN`, `COMMIT`, `ROLLBACK` and the rest (see `super::transactions`).
    async fn control(
        &self,
        slot: &TransactionSlot,
        control: Control,
        format: &Format,
    ) -> PgWireResult<Response> {
        match control {
            Control::ShowIsolation { default } => {
                let serializable = match slot.transaction() {
                    Some((transaction, _)) if !default => transaction.is_serializable(),
                    _ => slot.serializable_by_default(),
                };
                let column = super::transactions::isolation_column(default);
                let value = super::transactions::isolation_name(serializable);
                let schema = Arc::new(arrow::datatypes::Schema::new(vec![
                    arrow::datatypes::Field::new(column, arrow::datatypes::DataType::Utf8, true),
                ]));
                let values: arrow::array::ArrayRef =
                    Arc::new(arrow::array::StringArray::from(vec![value]));
                let batch = arrow::array::RecordBatch::try_new(schema.clone(), vec![values])
                    .map_err(|e| statement_error(sqlstate::INTERNAL_ERROR, e.to_string()))?;
                let result = strata_query::QueryResult {
                    schema,
                    batches: vec![batch],
                };
                Ok(Response::Query(rows_response(&result, format, &[])?))
            }
            Control::Begin {
                read_only,
                serializable,
            } => match slot.current() {
                None => {
                    let transaction = self.begin_transaction()?;
                    let serializable = serializable.unwrap_or(slot.serializable_by_default());
                    transaction
                        .set_serializable(serializable)
                        .map_err(query_error)?;
                    slot.open(transaction, read_only);
                    Ok(Response::TransactionStart(Tag::new("BEGIN")))
                }
                // PostgreSQL warns and carries on.
                Some(Ok(_)) => Ok(Response::Execution(Tag::new("BEGIN"))),
                Some(Err(())) => Err(in_failed_transaction()),
            },
            Control::Commit => match slot.end() {
                Block::Open { transaction, .. } => {
                    let Ok(transaction) = Arc::try_unwrap(transaction) else {
                        slot.settle_default(false);
                        return Err(statement_error(
                            sqlstate::INTERNAL_ERROR,
                            "the transaction is still in use by a statement".into(),
                        ));
                    };
                    // A failed commit ends the block too: nothing of it was committed.
                    let committed = transaction.commit().await;
                    slot.settle_default(committed.is_ok());
                    committed.map_err(query_error)?;
                    Ok(Response::TransactionEnd(Tag::new("COMMIT")))
                }
                Block::Failed { .. } => {
                    slot.settle_default(false);
                    Ok(Response::TransactionEnd(Tag::new("ROLLBACK")))
                }
                Block::Idle | Block::Expired => Ok(Response::TransactionEnd(Tag::new("COMMIT"))),
            },
            Control::Rollback => {
                slot.end();
                slot.settle_default(false);
                Ok(Response::TransactionEnd(Tag::new("ROLLBACK")))
            }
            Control::SetTransaction {
                session: true,
                serializable,
            } => {
                if slot.is_failed() {
                    return Err(in_failed_transaction());
                }
                if let Some(serializable) = serializable {
                    slot.set_serializable_by_default(serializable);
                }
                Ok(Response::Execution(Tag::new("SET")))
            }
            Control::SetTransaction {
                session: false,
                serializable,
            } => match (slot.current(), serializable) {
                (Some(Err(())), _) => Err(in_failed_transaction()),
                (Some(Ok((transaction, _))), Some(serializable)) => {
                    match transaction.set_serializable(serializable) {
                        Ok(()) => Ok(Response::Execution(Tag::new("SET"))),
                        Err(e) => {
                            slot.fail();
                            Err(query_error(e))
                        }
                    }
                }
                // Outside a block PostgreSQL only warns; the access mode is not kept.
                _ => Ok(Response::Execution(Tag::new("SET"))),
            },
            Control::Savepoint(name) => match slot.current() {
                None => Err(no_transaction_block("SAVEPOINT")),
                Some(Err(())) => Err(in_failed_transaction()),
                Some(Ok((transaction, _))) => {
                    transaction.savepoint(&name);
                    slot.savepoint_default(&name);
                    Ok(Response::Execution(Tag::new("SAVEPOINT")))
                }
            },
            Control::Release(name) => match slot.current() {
                None => Err(no_transaction_block("RELEASE SAVEPOINT")),
                Some(Err(())) => Err(in_failed_transaction()),
                Some(Ok((transaction, _))) => match transaction.release(&name) {
                    Ok(()) => {
                        slot.release_default(&name);
                        Ok(Response::Execution(Tag::new("RELEASE")))
                    }
                    Err(e) => {
                        slot.fail();
                        Err(query_error(e))
                    }
                },
            },
            Control::RollbackTo(name) => match slot.transaction() {
                None => Err(no_transaction_block("ROLLBACK TO SAVEPOINT")),
                Some((transaction, _)) => match transaction.rollback_to(&name) {
                    Ok(()) => {
                        slot.rollback_default_to(&name);
                        slot.recover();
                        Ok(Response::Execution(Tag::new("ROLLBACK")))
                    }
                    Err(e) => {
                        slot.fail();
                        Err(query_error(e))
                    }
                },
            },
            Control::Unsupported(why) => {
                slot.fail();
                Err(statement_error(sqlstate::FEATURE_NOT_SUPPORTED, why))
            }
        }
    }

    async fn begin<C: ClientInfo>(&self, client: &C) -> PgWireResult<Running> {
        let connection = self.slot_of(client);
        // Running before the expiry is looked at: the sweep cannot end the block in between
        // (the statement would then run outside it).
        connection.statement_started();
        if connection.take_expired() {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                sqlstate::IDLE_IN_TRANSACTION_SESSION_TIMEOUT.into(),
                "terminating connection due to idle-in-transaction timeout \
                 (limits.idle_in_transaction_timeout_secs): its block was rolled back"
                    .into(),
            ))));
        }
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.shared.query_timeout();
        let claimed =
            tokio::time::timeout_at(deadline, self.shared.query_slots.clone().acquire_owned())
                .await;
        let slot = match claimed {
            Ok(Ok(slot)) => slot,
            failed => {
                // No statement ran: the block is idle again from now.
                connection.statement_ended();
                return Err(match failed {
                    Err(_) => canceled(
                        "statement timeout (limits.query_timeout_secs) while waiting for a query slot",
                    ),
                    _ => canceled("the server is shutting down"),
                });
            }
        };
        let (pid, secret) = client.pid_and_secret_key();
        let key = (pid, secret.to_bytes().to_vec());
        let token = CancellationToken::new();
        let statement = self.registry.next_statement.fetch_add(1, Ordering::Relaxed);
        self.registry
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (statement, token.clone()));
        Ok(Running {
            shared: self.shared.clone(),
            registry: self.registry.clone(),
            key,
            statement,
            token,
            deadline,
            started,
            ok: false,
            slot: Some(slot),
            connection,
        })
    }
}

/// The response to a statement that changed tables: INSERT, UPDATE and DELETE answer one
/// `count` row, which PostgreSQL's tags carry (`INSERT 0 3`, `UPDATE 2`).
fn change_response(
    tag: &str,
    result: &strata_query::QueryResult,
    format: &Format,
) -> PgWireResult<Response> {
    if result
        .schema
        .metadata()
        .contains_key(strata_query::RETURNING_METADATA)
    {
        // `RETURNING` rows; pgwire appends their count to the tag (`INSERT 0 2`).
        let mut response = rows_response(result, format, &[])?;
        response.set_command_tag(if tag == "INSERT" { "INSERT 0" } else { tag });
        return Ok(Response::Query(response));
    }
    Ok(Response::Execution(match changed_rows(result) {
        Some(rows) if tag == "INSERT" => Tag::new(tag).with_oid(0).with_rows(rows),
        Some(rows) => Tag::new(tag).with_rows(rows),
        None => Tag::new(tag),
    }))
}

/// A query's rows read by key (documents, typed `json` where they are JSON) as its response.
fn document_rows(result: &strata_query::QueryResult, format: &Format) -> PgWireResult<Response> {
    Ok(Response::Query(rows_response(
        result,
        format,
        &json_fields(result),
    )?))
}

/// The rows of `result` as a query response, the columns `json` marks typed `json`.
fn rows_response(
    result: &strata_query::QueryResult,
    format: &Format,
    json: &[bool],
) -> PgWireResult<QueryResponse> {
    use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
    let fields = arrow_schema_to_pg_fields(&result.schema, format, None)?;
    let fields = Arc::new(with_json_types(&fields, json));
    let rows: Vec<_> = result
        .batches
        .iter()
        .flat_map(|batch| encode_recordbatch(fields.clone(), batch.clone()))
        .collect();
    Ok(QueryResponse::new(fields, futures::stream::iter(rows)))
}

/// PostgreSQL's answer to a savepoint statement outside a block.
fn no_transaction_block(statement: &str) -> PgWireError {
    statement_error(
        sqlstate::NO_ACTIVE_SQL_TRANSACTION,
        format!("{statement} can only be used in transaction blocks"),
    )
}

/// PostgreSQL's answer to a statement in a block after one of its statements failed.
fn in_failed_transaction() -> PgWireError {
    statement_error(
        sqlstate::IN_FAILED_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block".into(),
    )
}

fn query_error(error: strata_query::QueryError) -> PgWireError {
    statement_error(sqlstate::of_query_error(&error), error.to_string())
}

/// The connection's SQL-level prepared statements.
fn prepared_of<C: ClientInfo>(client: &C) -> Arc<PreparedStatements> {
    client
        .session_extensions()
        .get_or_insert_with(PreparedStatements::default)
}

/// `error` as one response of a simple query holding several statements.
fn error_response(error: PgWireError) -> Response {
    match with_sqlstate(error) {
        PgWireError::UserError(info) => Response::Error(info),
        other => Response::Error(Box::new(ErrorInfo::new(
            "ERROR".into(),
            sqlstate::INTERNAL_ERROR.into(),
            other.to_string(),
        ))),
    }
}

/// An error that ends the statement, not the session.
pub(super) fn statement_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message,
    )))
}

fn canceled(why: &str) -> PgWireError {
    statement_error(
        sqlstate::QUERY_CANCELED,
        format!("canceling statement due to {why}"),
    )
}

/// DataFusion's errors reach pgwire as `ApiError`, which it sends as XX000: give them their
/// SQLSTATE (undefined table, syntax error, ...) so that drivers can tell them apart.
fn with_sqlstate(error: PgWireError) -> PgWireError {
    match error {
        PgWireError::ApiError(inner) => {
            let code = if let Some(e) = inner.downcast_ref::<datafusion::error::DataFusionError>() {
                sqlstate::of_datafusion_error(e)
            } else if inner
                .downcast_ref::<datafusion::sql::sqlparser::parser::ParserError>()
                .is_some()
            {
                // datafusion-postgres parses extended-protocol statements with sqlparser itself.
                sqlstate::SYNTAX_ERROR
            } else {
                sqlstate::INTERNAL_ERROR
            };
            statement_error(code, inner.to_string())
        }
        other => other,
    }
}

/// Runs `work` (planning) under the statement's cancel token and deadline, with what it spawns
/// on the shared runtime (`connection_threads::OnWorkers`).
async fn guarded<T>(
    running: &Running,
    work: impl Future<Output = PgWireResult<T>>,
) -> PgWireResult<T> {
    let work = OnWorkers::new(&running.shared.workers, work);
    tokio::select! {
        result = work => result.map_err(with_sqlstate),
        _ = running.token.cancelled() => Err(canceled("user request")),
        _ = tokio::time::sleep_until(running.deadline) => Err(canceled("statement timeout (limits.query_timeout_secs)")),
    }
}

/// The response with its rows produced under the statement's cancel token and deadline; the
/// claim is released when the row stream fails, or when it ends if `ends_claim` (Some(whether
/// the statements succeeded)). `json` marks document columns.
fn guard_rows(
    response: Response,
    running: Arc<Mutex<Option<Running>>>,
    json: &[bool],
    ends_claim: Option<bool>,
) -> Response {
    let Response::Query(mut query) = response else {
        return response;
    };
    let command_tag = query.command_tag().to_owned();
    let row_schema = Arc::new(with_json_types(&query.row_schema(), json));
    let data_rows = std::mem::replace(query.data_rows(), Box::pin(futures::stream::empty()));
    let rows = futures::stream::unfold(Some((data_rows, running)), move |state| async move {
        let (mut rows, running) = state?;
        let (token, deadline) = {
            let guard = running.lock().unwrap_or_else(PoisonError::into_inner);
            let claim = guard.as_ref()?;
            (claim.token.clone(), claim.deadline)
        };
        let next = tokio::select! {
            next = rows.next() => next,
            _ = token.cancelled() => Some(Err(canceled("user request"))),
            _ = tokio::time::sleep_until(deadline) => Some(Err(canceled("statement timeout (limits.query_timeout_secs)"))),
        };
        match next {
            Some(Ok(row)) => Some((Ok(row), Some((rows, running)))),
            Some(Err(e)) => {
                // Dropping the rows stops DataFusion's stream; the claim ends as a failure.
                drop(rows);
                running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                Some((Err(with_sqlstate(e)), None))
            }
            None => {
                // Unless these are the last rows of the query string, the rows of the statements
                // after this one are still to be sent under the claim.
                if let Some(ok) = ends_claim
                    && let Some(mut claim) = running
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take()
                {
                    claim.ok = ok;
                }
                None
            }
        }
    });
    let mut guarded = QueryResponse::new(row_schema, rows);
    guarded.set_command_tag(&command_tag);
    Response::Query(guarded)
}

/// Wraps every response of one statement; the claim is shared by the responses' row streams
/// (a simple query may hold several statements' responses) and ends with the last of them.
fn guard_responses(responses: Vec<Response>, mut running: Running, json: &[bool]) -> Vec<Response> {
    if !responses.iter().any(|r| matches!(r, Response::Query(_))) {
        running.ok = !responses.iter().any(|r| matches!(r, Response::Error(_)));
        return responses;
    }
    let failed = responses.iter().any(|r| matches!(r, Response::Error(_)));
    let last_rows = responses
        .iter()
        .rposition(|r| matches!(r, Response::Query(_)));
    let claim = Arc::new(Mutex::new(Some(running)));
    responses
        .into_iter()
        .enumerate()
        .map(|(i, response)| {
            let ends_claim = (Some(i) == last_rows).then_some(!failed);
            guard_rows(response, claim.clone(), json, ends_claim)
        })
        .collect()
}

/// Tells pgwire the transaction status a control statement leaves before it runs
/// ([`super::transactions::status_before`]).
fn align_status<C: ClientInfo>(statements: &StrataStatements, client: &mut C, sql: &str) {
    if let Some(status) = super::transactions::status_before(&statements.slot_of(client), sql) {
        client.set_transaction_status(status);
    }
}

#[async_trait]
impl SimpleQueryHandler for StrataStatements {
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        align_status(self, client, &query.query);
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut running = self.begin(client).await?;
        let slot = self.slot_of(client);
        let statements = strata_query::split_statements(query);
        if let [only] = statements.as_slice()
            && control_of(only) == Some(Control::Commit)
        {
            running.release_slot();
        }
        if statements.len() > 1
            || slot.in_block()
            || statements
                .iter()
                .any(|s| control_of(s).is_some() || prepared::is_command(s))
        {
            // Statements one by one, under one claim, as the block they begin, continue or end
            // has them run; the first error ends the query string (as in PostgreSQL).
            let prepared = prepared_of(client);
            let mut responses = Vec::with_capacity(statements.len());
            for statement in &statements {
                let response = guarded(
                    &running,
                    self.one_of_several(client, &slot, &prepared, statement),
                )
                .await;
                match response {
                    Ok(Response::Error(e)) => {
                        responses.push(Response::Error(e));
                        break;
                    }
                    Ok(response) => responses.push(response),
                    Err(e) => {
                        responses.push(error_response(e));
                        break;
                    }
                }
            }
            return Ok(guard_responses(responses, running, &[]));
        }
        if let Some(tag) = strata_query::table_change_tag(query) {
            let response = guarded(
                &running,
                self.change_table(&slot, query, tag, &Format::UnifiedText, None),
            )
            .await?;
            return Ok(guard_responses(vec![response], running, &[]));
        }
        let responses = guarded(
            &running,
            SimpleQueryHandler::do_query(&*self.inner, client, query),
        )
        .await?
        .into_iter()
        .map(|response| rows_on_workers(response, &self.shared.workers))
        .collect();
        // Simple queries are not planned here, so their documents stay `text` (psql shows the
        // same either way).
        Ok(guard_responses(responses, running, &[]))
    }
}

#[async_trait]
impl ExtendedQueryHandler for StrataStatements {
    type Statement = DfStatement;
    type QueryParser = StrataParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    // Parse, Bind, Describe and Execute answer through `Deferred`: their messages leave with
    // the `ReadyForQuery` of the `Sync` after them, in one write (see `deferred_flush`).

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match StoredStatement::parse(client, &message, self.query_parser()).await? {
            Some(statement) => client.portal_store().put_statement(Arc::new(statement)),
            // An empty query binds, describes and executes as one (as in PostgreSQL).
            None => client
                .portal_store()
                .put_empty_statement(message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME)),
        }
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Binding reads only the portal store, never a handler's own state: the planner's
        // handler binds as this one would.
        ExtendedQueryHandler::on_bind(&*self.inner, &mut Deferred(client), message).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_describe(&mut Deferred(client), message).await
    }

    async fn on_execute<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        if let Some(pgwire::api::store::Entry::Value(portal)) =
            client.portal_store().get_portal(name)
        {
            let sql = portal.statement.statement.0.clone();
            align_status(self, client, &sql);
        }
        self._on_execute(&mut Deferred(&mut *client), message)
            .await?;
        if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            // The client waits for a COPY answer before it sends anything more.
            client.flush().await?;
        }
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut running = self.begin(client).await?;
        let sql = &portal.statement.statement.0;
        let slot = self.slot_of(client);
        let template = self.kinds.get_or(sql, StatementKind::of);
        if template.control == Some(Control::Commit) {
            running.release_slot();
        }
        let in_block = slot.in_block() || template.control.is_some();
        let point_read = !in_block && self.point_reads.get_or(sql, point_read_of).is_some();
        let change = match point_read {
            true => None,
            false => template.change_tag,
        };
        let response = match change {
            _ if in_block => {
                let bound = self.bind(sql, portal)?;
                // Bound parameters are values: they never make a change of another kind, nor
                // a query a change. Only a control statement's setting or a statement the
                // template could not be told from are told again from the bound text.
                let told = portal.parameters.is_empty()
                    || (template.control.is_none() && template.change_tag.is_some());
                let kind = told.then(|| template.clone());
                let prepared = match (&template.control, template.change_tag) {
                    (Some(_), _) => None,
                    (None, Some(_)) => self
                        .bind_change(sql, portal)?
                        .map(|parsed| Bound::Change(Box::new(parsed))),
                    (None, None) => self.bind_read(sql, portal)?,
                };
                guarded(
                    &running,
                    Box::pin(self.in_block(
                        &slot,
                        &bound,
                        &portal.result_column_format,
                        kind,
                        prepared,
                    )),
                )
                .await?
            }
            Some(tag) => {
                let bound = self.bind(sql, portal)?;
                let parsed = match template.control.is_none() {
                    true => self.bind_change(sql, portal)?,
                    false => None,
                };
                guarded(
                    &running,
                    Box::pin(self.change_table(
                        &slot,
                        &bound,
                        tag,
                        &portal.result_column_format,
                        parsed,
                    )),
                )
                .await?
            }
            None => match guarded(&running, Box::pin(self.point_read(portal))).await? {
                Some(response) => response,
                None => rows_on_workers(
                    guarded(
                        &running,
                        ExtendedQueryHandler::do_query(&*self.inner, client, portal, max_rows),
                    )
                    .await?,
                    &self.shared.workers,
                ),
            },
        };
        let json = plan_of(&portal.statement.statement)
            .map(json_columns)
            .unwrap_or_default();
        let mut responses = guard_responses(vec![response], running, &json);
        Ok(responses.pop().unwrap_or(Response::EmptyQuery))
    }
}

/// The point read `sql` is, if it is one (`strata_query::point_read`).
fn point_read_of(sql: &str) -> Option<Arc<strata_query::point_read::PointRead>> {
    strata_query::point_read::PointRead::parse(sql).map(Arc::new)
}

/// The key join `sql` is, if it is one (`strata_query::key_join`).
fn key_join_of(sql: &str) -> Option<Arc<strata_query::key_join::KeyJoin>> {
    strata_query::key_join::KeyJoin::parse(sql).map(Arc::new)
}

/// Which columns of a result hold JSON (answered with PostgreSQL's `json` type).
fn json_fields(result: &strata_query::QueryResult) -> Vec<bool> {
    result
        .schema
        .fields()
        .iter()
        .map(|f| f.metadata().contains_key(strata_query::JSON_FIELD_METADATA))
        .collect()
}
