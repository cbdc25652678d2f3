//! Transactions in SQL: `BEGIN … COMMIT | ROLLBACK` and the implicit transaction of each
//! statement that changes documents (issue 14, ADR 0017).
//!
//! A [`Transaction`] has its own DataFusion context whose `strata.public` schema reads every
//! table at one snapshot, pinned when the transaction begins (all tables together, under the
//! engine's visibility lock, each with a read lease held to the end): the transaction sees no
//! commit made after it began. Its `INSERT`, `UPDATE` and `DELETE` statements run their shadow
//! queries in that context and buffer their effect as net changes per table
//! ([`strata_engine::transaction::TableChanges`]); a statement that reads a table the
//! transaction changed reads its private view (the snapshot plus its own changes,
//! `strata_engine::transaction::stage_view`), staged when first read after a change.
//! [`Transaction::commit`] hands the changes to `strata_engine::transaction::commit`, which
//! fails with a write conflict (SQLSTATE 40001) when another commit changed one of the keys
//! since the snapshot; dropping a transaction rolls it back (nothing was written).
//!
//! Isolation: snapshot isolation (PostgreSQL's `REPEATABLE READ`) by default, with
//! first-committer-wins on keys; write skew is possible there. A transaction made
//! [`Transaction::set_serializable`] also records what it reads — a table read through a
//! planned query as a whole, a document read by key as its key ([`TableRead`]) — and its commit
//! fails with 40001 when another commit changed any of it since the snapshot (optimistic
//! validation, ADR 0017 "SERIALIZABLE"): the transactions that commit are then equivalent to
//! running one at a time in commit order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use datafusion::catalog::{CatalogProvider, CatalogProviderList, MemoryCatalogProvider};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::sqlparser::ast::Statement;
use strata_engine::transaction::{
    CommitSummary, OpenWriter, PrivateView, TableChanges, TableReads, TableWrite,
};
use strata_engine::{DataDir, EngineError, OnConflict, ReadLease};
use strata_format::Manifest;
use strata_json::KeyValue;

use crate::dml::{self, Change, ConflictAction};
use crate::key_join::{KeyJoin, KeyJoinSchemas};
use crate::paths::PathIndex;
use crate::point_read::{BoundValue, PointRead, PointValue};
use crate::table::{DataDirSchema, SnapshotCache, StrataTable};
use crate::{QueryError, QueryResult};

/// SQLSTATE of an `ON CONFLICT DO UPDATE` that would change one row twice.
const CARDINALITY_VIOLATION: &str = "21000";

/// SQLSTATE of a statement that cannot run inside a transaction block.
pub const ACTIVE_SQL_TRANSACTION: &str = "25001";

/// One table as a transaction sees it.
struct PinnedTable {
    snapshot: Arc<Manifest>,
    paths: Arc<PathIndex>,
    /// Held from before the snapshot was read: its files stay readable to the end.
    lease: Option<Arc<ReadLease>>,
    changes: TableChanges,
    /// What a `SERIALIZABLE` transaction read of the table (empty otherwise).
    reads: TableReads,
    /// The private view of the changes, staged when the table is read after a change; None
    /// when there are no changes or they changed since.
    view: Option<StagedView>,
}

/// How a statement reads a table it asks [`TransactionTables::table`] for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableRead {
    /// Through a planned query: what it reads depends on the whole table.
    Planned,
    /// By key: the reader records the key it reads ([`TransactionTables::read_keys`]), or the
    /// whole table when it reads otherwise after all.
    ByKey,
}

struct StagedView {
    /// Owns the view's files (deleted when dropped).
    _view: Arc<PrivateView>,
    manifest: Arc<Manifest>,
    paths: Arc<PathIndex>,
}

/// The tables of one transaction: their snapshots, changes and private views.
pub struct TransactionTables {
    data_dir: DataDir,
    snapshots: Arc<SnapshotCache>,
    /// Pinned when the transaction begins (a block), or when first used (a single statement's
    /// transaction, and tables created after a block began).
    tables: Mutex<BTreeMap<String, PinnedTable>>,
    /// Reads are recorded and checked at commit (see the module docs).
    serializable: AtomicBool,
    /// A statement read or changed a table: the isolation level can no longer change.
    used: AtomicBool,
    /// Taken with the first change: group commit waits a moment for the commits of open
    /// writers (`strata_engine::transaction::OpenWriter`); given back by the commit, or
    /// dropped with the transaction.
    writer: Mutex<Option<OpenWriter>>,
}

impl std::fmt::Debug for TransactionTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionTables")
            .field("data_dir", &self.data_dir.root())
            .finish_non_exhaustive()
    }
}

impl TransactionTables {
    /// The tables of a transaction over `data_dir`: every table pinned at its current manifest
    /// now when `all` (one snapshot of every table, for a block), else each when first used.
    pub(crate) fn pin(
        data_dir: &DataDir,
        snapshots: &Arc<SnapshotCache>,
        all: bool,
    ) -> Result<TransactionTables, EngineError> {
        let mut tables = BTreeMap::new();
        if all {
            let names = data_dir.table_names()?;
            let _consistent = strata_engine::transaction::snapshot_guard();
            for name in names {
                if let Some(pinned) = pin_table(data_dir, snapshots, &name)? {
                    tables.insert(name, pinned);
                }
            }
        }
        Ok(TransactionTables {
            data_dir: data_dir.clone(),
            snapshots: snapshots.clone(),
            tables: Mutex::new(tables),
            serializable: AtomicBool::new(false),
            used: AtomicBool::new(false),
            writer: Mutex::new(None),
        })
    }

    /// Records that the transaction read `keys` of `table` (None: the whole table), when it is
    /// `SERIALIZABLE`.
    pub(crate) fn read_keys(
        &self,
        table: &str,
        keys: Option<&[KeyValue]>,
    ) -> Result<(), EngineError> {
        if !self.serializable.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pinned) = self.pinned(&mut tables, table)? {
            match keys {
                None => pinned.reads.whole = true,
                Some(keys) => pinned.reads.keys.extend(keys.iter().cloned()),
            }
        }
        Ok(())
    }

    /// The pinned `name` in `tables`, pinned now when it was not yet (None: no such table).
    fn pinned<'a>(
        &self,
        tables: &'a mut BTreeMap<String, PinnedTable>,
        name: &str,
    ) -> Result<Option<&'a mut PinnedTable>, EngineError> {
        if !tables.contains_key(name) {
            let _consistent = strata_engine::transaction::snapshot_guard();
            match pin_table(&self.data_dir, &self.snapshots, name)? {
                Some(pinned) => {
                    tables.insert(name.to_owned(), pinned);
                }
                None => return Ok(None),
            }
        }
        Ok(tables.get_mut(name))
    }

    /// The table `name` as this transaction reads it (None: no such table in its snapshot),
    /// recording a read of the whole table when `read` is [`TableRead::Planned`].
    pub(crate) async fn table(
        &self,
        name: &str,
        schema: &DataDirSchema,
        read: TableRead,
    ) -> Result<Option<StrataTable>, EngineError> {
        self.used.store(true, Ordering::Relaxed);
        let stage = {
            let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(pinned) = self.pinned(&mut tables, name)? else {
                return Ok(None);
            };
            if read == TableRead::Planned && self.serializable.load(Ordering::Relaxed) {
                pinned.reads.whole = true;
            }
            match &pinned.view {
                _ if pinned.changes.is_empty() => {
                    let snapshot = (
                        pinned.snapshot.clone(),
                        pinned.paths.clone(),
                        pinned.lease.clone(),
                    );
                    return schema.snapshot_table(name, snapshot).map(Some);
                }
                Some(staged) => {
                    return schema
                        .snapshot_table(
                            name,
                            (
                                staged.manifest.clone(),
                                staged.paths.clone(),
                                pinned.lease.clone(),
                            ),
                        )
                        .map(Some);
                }
                None => (pinned.snapshot.clone(), pinned.changes.clone()),
            }
        };
        let (snapshot, changes) = stage;
        let (data_dir, table) = (self.data_dir.clone(), name.to_owned());
        let view = dml::blocking(move || {
            strata_engine::transaction::stage_view(&data_dir, &table, &snapshot, &changes)
        })
        .await
        .map_err(|e| match e {
            QueryError::Engine(e) => e,
            other => EngineError::Invalid(other.to_string()),
        })?;
        let manifest = Arc::new(view.manifest.clone());
        let staged = StagedView {
            paths: Arc::new(PathIndex::from_manifest(&manifest)),
            manifest,
            _view: Arc::new(view),
        };
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(pinned) = tables.get_mut(name) else {
            return Ok(None);
        };
        let read = (
            staged.manifest.clone(),
            staged.paths.clone(),
            pinned.lease.clone(),
        );
        pinned.view = Some(staged);
        schema.snapshot_table(name, read).map(Some)
    }

    /// The snapshot of `table`.
    fn snapshot_of(&self, table: &str) -> Result<Arc<Manifest>, QueryError> {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        self.pinned(&mut tables, table)?
            .map(|p| p.snapshot.clone())
            .ok_or_else(|| QueryError::Engine(EngineError::NoSuchTable(table.to_owned())))
    }

    /// Applies `change` to `table`'s changes: all of it, or (on error) none.
    fn apply(&self, table: &str, change: StatementChange) -> Result<u64, QueryError> {
        self.used.store(true, Ordering::Relaxed);
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let pinned = self
            .pinned(&mut tables, table)?
            .ok_or_else(|| QueryError::Engine(EngineError::NoSuchTable(table.to_owned())))?;
        let count = match change {
            StatementChange::Appended(documents) => {
                let count = documents.len() as u64;
                pinned.changes.appended.extend(documents);
                count
            }
            StatementChange::Keyed(keyed) => {
                let count = keyed.len() as u64;
                pinned.changes.keyed.extend(keyed);
                count
            }
        };
        if count > 0 {
            pinned.view = None;
            let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            if writer.is_none() {
                *writer = Some(OpenWriter::new(&self.data_dir));
            }
        }
        Ok(count)
    }

    /// Whether `key` of `table` holds a document in this transaction now, given whether it
    /// did in the snapshot.
    fn holds(&self, table: &str, key: &KeyValue, in_snapshot: bool) -> bool {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        match tables.get(table).and_then(|p| p.changes.keyed.get(key)) {
            Some(document) => document.is_some(),
            None => in_snapshot,
        }
    }

    /// Every table's changes now, to come back to ([`Transaction::savepoint`]).
    fn changes(&self) -> BTreeMap<String, TableChanges> {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables
            .iter()
            .filter(|(_, p)| !p.changes.is_empty())
            .map(|(name, p)| (name.clone(), p.changes.clone()))
            .collect()
    }

    /// Sets every table's changes back to `saved` (tables missing there: none). Snapshots stay
    /// pinned as they are.
    fn restore(&self, saved: &BTreeMap<String, TableChanges>) {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, pinned) in tables.iter_mut() {
            let changes = saved.get(name).cloned().unwrap_or_default();
            if changes != pinned.changes {
                pinned.changes = changes;
                pinned.view = None;
            }
        }
    }

    fn writes(&self) -> BTreeMap<String, TableWrite> {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables
            .iter()
            .filter(|(_, p)| !p.changes.is_empty() || !p.reads.is_empty())
            .map(|(name, p)| {
                (
                    name.clone(),
                    TableWrite {
                        snapshot: p.snapshot.clone(),
                        changes: p.changes.clone(),
                        reads: p.reads.clone(),
                    },
                )
            })
            .collect()
    }
}

fn pin_table(
    data_dir: &DataDir,
    snapshots: &SnapshotCache,
    name: &str,
) -> Result<Option<PinnedTable>, EngineError> {
    let lease = data_dir.read_lease(name)?.map(Arc::new);
    let dir = data_dir.table_dir(name)?;
    let Some((snapshot, paths)) = snapshots.load(name, &dir)? else {
        return Ok(None);
    };
    Ok(Some(PinnedTable {
        snapshot,
        paths,
        lease,
        changes: TableChanges::default(),
        reads: TableReads::default(),
        view: None,
    }))
}

/// What one statement adds to a table's changes.
enum StatementChange {
    Appended(Vec<String>),
    Keyed(BTreeMap<KeyValue, Option<String>>),
}

/// Told the name of each table a commit changed.
pub type CommitObserver = Arc<dyn Fn(&str) + Send + Sync>;

/// A transaction (see the module docs). Dropping it rolls it back.
pub struct Transaction {
    /// The session's context: its functions, rules and settings (its catalog is the session's).
    session: SessionContext,
    /// The transaction's own context, whose catalog holds `schema`: built when a statement of
    /// the transaction is first planned. Key joins, point reads and writes by key plan nothing,
    /// and building a context (a copy of every function and rule) costs as much as one of them.
    context: OnceLock<SessionContext>,
    /// The transaction's schema (registered in `context`): its tables at its snapshot.
    schema: Arc<DataDirSchema>,
    tables: Arc<TransactionTables>,
    on_commit: Option<CommitObserver>,
    /// `SAVEPOINT`s, oldest first: each name with every table's changes when it was set.
    savepoints: Mutex<Vec<(String, BTreeMap<String, TableChanges>)>>,
    /// The session's result schemas of key joins (`crate::key_join`).
    key_joins: Arc<KeyJoinSchemas>,
}

/// SQLSTATE of a savepoint name that no `SAVEPOINT` set (PostgreSQL's
/// `invalid_savepoint_specification`).
pub const INVALID_SAVEPOINT: &str = "3B001";

impl Transaction {
    /// Begins a transaction over the tables of `context`'s data directory schema, with the
    /// same functions, rules and settings.
    /// `whole_snapshot`: pin every table now (a block), or each table when first used (a
    /// single statement, whose tables are all resolved while it is planned).
    pub(crate) fn begin(
        context: &SessionContext,
        on_commit: Option<CommitObserver>,
        key_joins: Arc<KeyJoinSchemas>,
        whole_snapshot: bool,
    ) -> Result<Transaction, QueryError> {
        let pinned =
            crate::ddl::with_data_dir_schema(context, |schema| Ok(schema.pinned(whole_snapshot)?))?;
        let tables = pinned
            .transaction()
            .cloned()
            .ok_or_else(|| QueryError::Engine(EngineError::Invalid("no pinned tables".into())))?;
        Ok(Transaction {
            session: context.clone(),
            context: OnceLock::new(),
            schema: Arc::new(pinned),
            tables,
            on_commit,
            savepoints: Mutex::new(Vec::new()),
            key_joins,
        })
    }

    /// The transaction's context (see the field), built on first use.
    fn planning(&self) -> Result<&SessionContext, QueryError> {
        if let Some(context) = self.context.get() {
            return Ok(context);
        }
        // The transaction's own catalog list: registering its schema must not touch the
        // session's. Other catalogs (pg_catalog, for drivers) are shared as they are.
        let catalogs = Arc::new(datafusion::catalog::MemoryCatalogProviderList::new());
        let original = self.session.state().catalog_list().clone();
        for name in original.catalog_names() {
            if name != crate::CATALOG
                && let Some(catalog) = original.catalog(&name)
            {
                catalogs.register_catalog(name, catalog);
            }
        }
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(crate::SCHEMA, self.schema.clone())?;
        catalogs.register_catalog(crate::CATALOG.to_owned(), Arc::new(catalog));
        let state = SessionStateBuilder::new_from_existing(self.session.state())
            .with_catalog_list(catalogs)
            .build();
        // Two statements of one transaction never run at once; were they to, one context wins.
        Ok(self
            .context
            .get_or_init(|| SessionContext::new_with_state(state)))
    }

    /// The session's context: functions and settings for expressions evaluated without a
    /// planned query (its tables are not the transaction's: read those through [`Self::schema`]).
    pub(crate) fn session(&self) -> &SessionContext {
        &self.session
    }

    /// The transaction's tables: its snapshot with its own changes.
    pub(crate) fn schema(&self) -> &DataDirSchema {
        &self.schema
    }

    /// Makes the transaction `SERIALIZABLE` (see the module docs), or snapshot isolation
    /// again; only before it read or changed a table (PostgreSQL's 25001 otherwise).
    pub fn set_serializable(&self, serializable: bool) -> Result<(), QueryError> {
        if self.tables.used.load(Ordering::Relaxed) {
            return Err(QueryError::Statement {
                sqlstate: ACTIVE_SQL_TRANSACTION,
                message: "SET TRANSACTION ISOLATION LEVEL must be called before any query".into(),
            });
        }
        self.tables
            .serializable
            .store(serializable, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the transaction is `SERIALIZABLE`.
    pub fn is_serializable(&self) -> bool {
        self.tables.serializable.load(Ordering::Relaxed)
    }

    /// `SAVEPOINT name`: remembers the transaction's changes now. A name set again hides the
    /// older one until the newer is released, as in PostgreSQL.
    pub fn savepoint(&self, name: &str) {
        let changes = self.tables.changes();
        self.savepoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.to_owned(), changes));
    }

    /// `ROLLBACK TO SAVEPOINT name`: undoes every change made since the newest savepoint of
    /// that name, and forgets the savepoints set after it (it stays).
    pub fn rollback_to(&self, name: &str) -> Result<(), QueryError> {
        let mut savepoints = self
            .savepoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = find_savepoint(&savepoints, name)?;
        savepoints.truncate(at + 1);
        self.tables.restore(&savepoints[at].1);
        Ok(())
    }

    /// `RELEASE SAVEPOINT name`: forgets the newest savepoint of that name and those set after
    /// it, keeping every change.
    pub fn release(&self, name: &str) -> Result<(), QueryError> {
        let mut savepoints = self
            .savepoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = find_savepoint(&savepoints, name)?;
        savepoints.truncate(at);
        Ok(())
    }

    /// The transaction's context: queries planned in it read the transaction's snapshot.
    pub fn context(&self) -> Result<&SessionContext, QueryError> {
        self.planning()
    }

    /// Runs one statement in the transaction: a change is buffered (its result is the
    /// `count` of documents it changed), a query reads the snapshot and the transaction's own
    /// changes. Statements that change tables themselves (`DROP`, `ALTER`, `CREATE INDEX`)
    /// cannot run in a transaction. A failed statement changes nothing.
    pub async fn run(&self, sql: &str) -> Result<QueryResult, QueryError> {
        self.run_parsed(sql, None).await
    }

    /// [`Transaction::run`] of `sql` whose document change was parsed already (`parsed`: a
    /// prepared change bound to this execution's values, `crate::prepared_change`).
    pub async fn run_parsed(
        &self,
        sql: &str,
        parsed: Option<Statement>,
    ) -> Result<QueryResult, QueryError> {
        let change = match parsed {
            Some(statement) => dml::change_of_statement(self, statement).await?,
            None => self.change_of_text(sql).await?,
        };
        if let Some((change, returning)) = change {
            let (count, documents) = self.buffer(change, returning.is_some()).await?;
            return match returning {
                Some(returning) => {
                    dml::returning_rows(self.planning()?, &returning, &documents).await
                }
                None => dml::count_result(count),
            };
        }
        let frame = self.sql(sql).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.collect().await?;
        Ok(QueryResult { schema, batches })
    }

    async fn change_of_text(
        &self,
        sql: &str,
    ) -> Result<Option<(Change, Option<dml::Returning>)>, QueryError> {
        if crate::changes_table(sql) {
            return Err(QueryError::Statement {
                sqlstate: ACTIVE_SQL_TRANSACTION,
                message: "DROP TABLE, ALTER TABLE, CREATE INDEX and DROP INDEX cannot run inside \
                          a transaction block"
                    .into(),
            });
        }
        dml::change_of(self, sql).await
    }

    /// Answers the point read `read` with `value` at the transaction's snapshot and with its
    /// own changes, without planning (see [`crate::Session::point_read`]); None when it must
    /// be planned.
    pub async fn point_read(
        &self,
        read: &PointRead,
        value: &BoundValue,
    ) -> Result<Option<QueryResult>, QueryError> {
        self.schema.point_read(read, value).await
    }

    /// Answers a query that is a join of documents by key (`crate::key_join`) at the
    /// transaction's snapshot and with its own changes, planning only the first of its shape;
    /// None when `sql` is not such a join.
    pub async fn key_join(&self, sql: &str) -> Result<Option<QueryResult>, QueryError> {
        let Some(join) = KeyJoin::parse(sql) else {
            return Ok(None);
        };
        if let PointValue::Literal(value) = join.value()
            && let Some(result) = self.bound_key_join(&join, value).await?
        {
            return Ok(Some(result));
        }
        let frame = self.sql(sql).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        self.key_joins.remember(join.shape(), schema.clone());
        let batches = frame.collect().await?;
        Ok(Some(QueryResult { schema, batches }))
    }

    /// Answers the key join `join` (parsed once from a prepared statement's text) with
    /// `value` for its `WHERE` equality, without planning; None when it must be planned (the
    /// first statement of its shape, or what `crate::key_join::run` does not answer).
    pub async fn bound_key_join(
        &self,
        join: &KeyJoin,
        value: &BoundValue,
    ) -> Result<Option<QueryResult>, QueryError> {
        crate::key_join::run(&self.schema, join, value, &self.key_joins).await
    }

    /// Plans a query (not a change) in the transaction.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame, QueryError> {
        self.planning()?
            .sql(sql)
            .await
            .map_err(|e| crate::with_end_position(e, sql))
    }

    /// Adds a statement's change to the transaction's changes (see the module docs for the
    /// conflict policies); returns how many documents it changed and, when `returning`, which
    /// (the new versions; for a deletion, the deleted ones).
    async fn buffer(
        &self,
        change: Change,
        returning: bool,
    ) -> Result<(u64, Vec<String>), QueryError> {
        let tables = &self.tables;
        let wanted = |documents: &mut dyn Iterator<Item = &String>| -> Vec<String> {
            if returning {
                documents.cloned().collect()
            } else {
                Vec::new()
            }
        };
        match change {
            Change::Insert {
                table,
                key: None,
                documents,
                ..
            } => {
                let documents: Vec<String> = documents.into_iter().map(|(_, d)| d).collect();
                let returned = wanted(&mut documents.iter());
                let count = tables.apply(&table, StatementChange::Appended(documents))?;
                Ok((count, returned))
            }
            Change::Insert {
                table,
                key: Some(key),
                documents,
                on_conflict,
            } => {
                let keys: Vec<KeyValue> = documents.iter().filter_map(|(k, _)| k.clone()).collect();
                // An upsert that updates what it finds reads each present document once, by
                // its key in the transaction's view (which records the key read): that tells
                // whether the key is held (its own changes included) and what the update starts
                // from. Else (other policies, or a table not read by key) whether each key is
                // live in the snapshot.
                let present = match &on_conflict {
                    ConflictAction::Update { .. } => {
                        crate::point_update::present_documents(&self.schema, &table, &key, &keys)
                            .await?
                    }
                    ConflictAction::Policy(_) => None,
                };
                let in_snapshot = match &present {
                    Some(_) => BTreeSet::new(),
                    None => self.live_in_snapshot(&table, keys).await?,
                };
                let policy = match &on_conflict {
                    ConflictAction::Policy(policy) => Some(*policy),
                    ConflictAction::Update { .. } => None,
                };
                let mut statement: BTreeMap<KeyValue, Option<String>> = BTreeMap::new();
                let mut conflicting: Vec<(KeyValue, String)> = Vec::new();
                for (document_key, document) in documents {
                    let Some(document_key) = document_key else {
                        continue;
                    };
                    let in_statement = statement.contains_key(&document_key)
                        || conflicting.iter().any(|(k, _)| *k == document_key);
                    let held = in_statement
                        || match &present {
                            Some(present) => {
                                present.get(&document_key).is_some_and(Option::is_some)
                            }
                            None => tables.holds(
                                &table,
                                &document_key,
                                in_snapshot.contains(&document_key),
                            ),
                        };
                    match (held, policy) {
                        (false, _) | (true, Some(OnConflict::Replace)) => {
                            statement.insert(document_key, Some(document));
                        }
                        (true, Some(OnConflict::Ignore)) => {}
                        (true, Some(OnConflict::Error)) => {
                            return Err(QueryError::Engine(EngineError::DuplicateKey {
                                table: table.clone(),
                                key: document_key.to_string(),
                                path: key.path.encode(),
                                where_: "already in the table".into(),
                            }));
                        }
                        (true, None) if in_statement => {
                            return Err(QueryError::Statement {
                                sqlstate: CARDINALITY_VIOLATION,
                                message: format!(
                                    "ON CONFLICT DO UPDATE command cannot affect row a second \
                                     time: key {document_key} comes twice"
                                ),
                            });
                        }
                        (true, None) => conflicting.push((document_key, document)),
                    }
                }
                if let ConflictAction::Update {
                    target,
                    document,
                    condition,
                } = &on_conflict
                {
                    let updates = dml::conflict_updates(
                        self,
                        &table,
                        &key,
                        (target, document, condition.as_deref()),
                        &conflicting,
                        present.as_ref(),
                    )
                    .await?;
                    statement.extend(updates.into_iter().map(|(k, d)| (k, Some(d))));
                }
                let returned = wanted(&mut statement.values().flatten());
                let count = tables.apply(&table, StatementChange::Keyed(statement))?;
                Ok((count, returned))
            }
            Change::Update { table, documents } => {
                let returned = wanted(&mut documents.iter().map(|(_, _, d)| d));
                let count = documents.len() as u64;
                let changes = self.updated_keys(&table, documents).await?;
                tables.apply(&table, StatementChange::Keyed(changes))?;
                Ok((count, returned))
            }
            Change::Delete {
                table,
                keys,
                documents,
            } => {
                let changes = keys.into_iter().map(|k| (k, None)).collect();
                let count = tables.apply(&table, StatementChange::Keyed(changes))?;
                Ok((count, documents))
            }
        }
    }

    /// Which of `keys` have a live document in the snapshot of `table`.
    /// The keyed changes of an `UPDATE`: each new document under its new key, and the old key
    /// of each document whose key changed deleted (unless another document moved to it). Keys
    /// must stay unique once the whole statement is applied (PostgreSQL checks each row, so
    /// `SET id = id + 1` may fail there in some row orders; it does not here).
    async fn updated_keys(
        &self,
        table: &str,
        documents: Vec<(KeyValue, KeyValue, String)>,
    ) -> Result<BTreeMap<KeyValue, Option<String>>, QueryError> {
        let duplicate = |key: &KeyValue, where_: &str| {
            QueryError::Engine(EngineError::DuplicateKey {
                table: table.to_owned(),
                key: key.to_string(),
                path: self.key_path(table),
                where_: where_.to_owned(),
            })
        };
        let vacated: BTreeSet<KeyValue> = documents
            .iter()
            .filter(|(old, new, _)| old != new)
            .map(|(old, _, _)| old.clone())
            .collect();
        let kept: BTreeSet<KeyValue> = documents
            .iter()
            .filter(|(old, new, _)| old == new)
            .map(|(old, _, _)| old.clone())
            .collect();
        let moved: Vec<KeyValue> = documents
            .iter()
            .filter(|(old, new, _)| old != new)
            .map(|(_, new, _)| new.clone())
            .collect();
        let in_snapshot = self.live_in_snapshot(table, moved.clone()).await?;
        let mut changes: BTreeMap<KeyValue, Option<String>> =
            vacated.iter().map(|old| (old.clone(), None)).collect();
        let mut written: BTreeSet<KeyValue> = BTreeSet::new();
        for (old, new, document) in documents {
            if !written.insert(new.clone()) {
                return Err(duplicate(&new, "given to two documents by the UPDATE"));
            }
            let taken = old != new
                && !vacated.contains(&new)
                && (kept.contains(&new)
                    || self.tables.holds(table, &new, in_snapshot.contains(&new)));
            if taken {
                return Err(duplicate(&new, "already in the table"));
            }
            changes.insert(new, Some(document));
        }
        Ok(changes)
    }

    /// The key path of `table`, for messages.
    fn key_path(&self, table: &str) -> String {
        self.tables
            .snapshot_of(table)
            .ok()
            .and_then(|m| m.settings.key.as_ref().map(|k| k.path.clone()))
            .unwrap_or_default()
    }

    async fn live_in_snapshot(
        &self,
        table: &str,
        keys: Vec<KeyValue>,
    ) -> Result<BTreeSet<KeyValue>, QueryError> {
        // Whether a key is present decides what the statement writes: a read of the key.
        self.tables.read_keys(table, Some(&keys))?;
        let snapshot = self.tables.snapshot_of(table)?;
        // A lookup in the key files (kept decoded by the process's key cache; a page read
        // otherwise), as a point read does on the same worker: a thread hand-off each way
        // would cost more than the lookup.
        Ok(strata_engine::live_keys(
            &self.tables.data_dir,
            table,
            &snapshot,
            &keys,
        )?)
    }

    /// Commits the transaction's changes (see the module docs); a write conflict is
    /// `EngineError::WriteConflict` (SQLSTATE 40001), and nothing is committed then.
    pub async fn commit(self) -> Result<CommitSummary, QueryError> {
        let writes = self.tables.writes();
        if writes.is_empty() {
            return Ok(CommitSummary::default());
        }
        let data_dir = self.tables.data_dir.clone();
        let writer = self
            .tables
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Awaited as a task: only the committer that leads the batch takes a blocking thread
        // (`strata_engine::transaction::group`).
        let (sender, outcome) = tokio::sync::oneshot::channel();
        let done: strata_engine::transaction::Completion = Box::new(move |result| {
            // The receiver is gone only when the statement was cancelled: the commit's
            // outcome then has nobody to tell.
            let _ = sender.send(result);
        });
        if let Some(leader) =
            strata_engine::transaction::queue_commit(&data_dir, &writes, writer, done)
        {
            // Not awaited: the batch commits the others' transactions too, whatever becomes
            // of this statement.
            drop(tokio::task::spawn_blocking(move || {
                strata_json::run_with_deep_stack(move || leader.run())
            }));
        }
        let summary = outcome
            .await
            .map_err(|_| {
                QueryError::Engine(EngineError::Invalid(
                    "the commit's batch ended without an outcome".into(),
                ))
            })?
            .map_err(QueryError::from)?;
        if let Some(observer) = &self.on_commit {
            for table in &summary.tables {
                observer(table);
            }
        }
        Ok(summary)
    }
}

/// The position of the newest savepoint called `name`.
fn find_savepoint(
    savepoints: &[(String, BTreeMap<String, TableChanges>)],
    name: &str,
) -> Result<usize, QueryError> {
    savepoints
        .iter()
        .rposition(|(set, _)| set == name)
        .ok_or_else(|| QueryError::Statement {
            sqlstate: INVALID_SAVEPOINT,
            message: format!("savepoint \"{name}\" does not exist"),
        })
}

/// Whether `error` is a serialization failure (a write conflict, or a `SERIALIZABLE`
/// transaction's read conflict): the transaction may succeed when run again.
pub fn is_write_conflict(error: &QueryError) -> bool {
    matches!(
        error,
        QueryError::Engine(EngineError::WriteConflict { .. } | EngineError::ReadConflict { .. })
    )
}
