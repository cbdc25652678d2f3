//! Strata tables as DataFusion tables: a catalog schema that lists the data directory, and a
//! table provider over one manifest snapshot.
//!
//! A table's SQL schema is one column, `data` (the document as JSON text), plus the virtual
//! path columns that the `ReadPathsFromColumns` rule adds for the paths a query reads. A
//! snapshot (manifest and read lease) is taken when the statement resolves the table, and again
//! for each execution of a plan kept across executions (a prepared statement): every scan of
//! one execution reads the same snapshot, so a statement sees one consistent set of parts even
//! while an ingest or merge commits, and a prepared statement sees what was committed before
//! each execution.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use object_store::ObjectStore;
use strata_engine::{DataDir, ReadLease};
use strata_format::Manifest;

use crate::paths::{PathColumn, PathIndex};
use crate::point_read::{BoundValue, PointRead};
use crate::scan::{
    ManifestRowsExec, PartMetadataCache, PointSource, ScanOutput, StrataScanExec, read_documents,
    read_documents_by_key,
};
use crate::transaction::{TableRead, TransactionTables};
use crate::udf::json_field;
use strata_format::stamp::Stamp;

/// Field metadata naming the Strata table a `data` column belongs to.
pub const TABLE_FIELD_METADATA: &str = "strata.table";
/// Name of the document column.
pub const DATA_COLUMN: &str = "data";

/// The last manifest read per table in a session, parsed and indexed.
///
/// Every statement looks at the manifest file (its snapshot): when its stamp
/// (`strata_format::stamp`) shows the file read last, unchanged, the last snapshot is the
/// answer; otherwise the file is read, and only when its bytes differ from the last ones are
/// they parsed and the path index rebuilt, which on a table of many parts costs more than a
/// small query itself.
#[derive(Debug, Default)]
pub struct SnapshotCache {
    tables: Mutex<HashMap<String, CachedSnapshot>>,
}

/// The bytes of the manifest file and their stamp (both empty for a live manifest), the
/// manifest and its path index.
type CachedSnapshot = (Vec<u8>, Option<Stamp>, Arc<Manifest>, Arc<PathIndex>);
/// A table's manifest and the path facts indexed from it.
pub(crate) type Snapshot = (Arc<Manifest>, Arc<PathIndex>);

impl SnapshotCache {
    pub(crate) fn load(
        &self,
        table: &str,
        dir: &Path,
    ) -> Result<Option<Snapshot>, strata_format::FormatError> {
        // The server's newest version, committed through its write-ahead log and not yet on
        // disk (`strata_format::live`): validated when it was built from a valid one.
        if let Some(live) = strata_format::live::get(dir) {
            let mut before = None;
            if let Ok(tables) = self.tables.lock()
                && let Some((_, _, manifest, paths)) = tables.get(table)
            {
                if Arc::ptr_eq(manifest, &live) {
                    return Ok(Some((manifest.clone(), paths.clone())));
                }
                before = Some((manifest.clone(), paths.clone()));
            }
            // Each logged commit publishes a version with its parts added: their paths are
            // added to the index of the version before rather than every part read again.
            let paths = Arc::new(match before {
                Some((manifest, paths)) => paths.with_parts_added(&manifest, &live),
                None => PathIndex::from_manifest(&live),
            });
            if let Ok(mut tables) = self.tables.lock() {
                tables.insert(
                    table.to_owned(),
                    (Vec::new(), None, live.clone(), paths.clone()),
                );
            }
            return Ok(Some((live, paths)));
        }
        let path = dir.join(strata_format::manifest::MANIFEST_FILE);
        let read_at = std::time::SystemTime::now();
        let stamp = match std::fs::metadata(&path) {
            Ok(metadata) => Stamp::of(&metadata, read_at),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(strata_format::FormatError::io(path, e)),
        };
        if let (Some(stamp), Ok(tables)) = (&stamp, self.tables.lock())
            && let Some((_, Some(kept), manifest, paths)) = tables.get(table)
            && kept.still_holds(stamp)
        {
            return Ok(Some((manifest.clone(), paths.clone())));
        }
        // Read after the stamp: a file replaced in between is read again next time.
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(strata_format::FormatError::io(path, e)),
        };
        if let Ok(mut tables) = self.tables.lock()
            && let Some((cached, kept, manifest, paths)) = tables.get_mut(table)
            && *cached == bytes
        {
            *kept = stamp;
            return Ok(Some((manifest.clone(), paths.clone())));
        }
        let manifest = Manifest::parse(&path, &bytes)?;
        // Validated when parsed: a statement on a damaged table fails naming the table and part
        // (the files of unchanged bytes were checked when they were first parsed, and so were
        // those of parts the process's last valid manifest of the table listed alike).
        manifest.validate_remembered(dir, true)?;
        let manifest = Arc::new(manifest);
        let paths = Arc::new(PathIndex::from_manifest(&manifest));
        if let Ok(mut tables) = self.tables.lock() {
            tables.insert(
                table.to_owned(),
                (bytes, stamp, manifest.clone(), paths.clone()),
            );
        }
        Ok(Some((manifest, paths)))
    }
}

/// Path facts of the tables resolved by the statement being planned, by table name.
pub type PathRegistry = Arc<RwLock<HashMap<String, Arc<PathIndex>>>>;

/// The schema of a table without path columns: its one `data` column, marked as JSON and as
/// the table's. Built once per table name and shared, since every statement (every point read)
/// resolves its table: building a field's metadata map each time cost 3.5 % of a server's CPU
/// answering point selects. One entry per table name the process ever resolved (a dropped
/// table's stays, a few hundred bytes; the schema depends on the name only, so it is never
/// stale).
fn data_schema(table: &str) -> SchemaRef {
    static SCHEMAS: std::sync::OnceLock<Mutex<HashMap<String, SchemaRef>>> =
        std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Mutex::default);
    let mut schemas = schemas
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(schema) = schemas.get(table) {
        return schema.clone();
    }
    let field = json_field(DATA_COLUMN).with_metadata(
        [
            (crate::JSON_FIELD_METADATA.to_owned(), "true".to_owned()),
            (TABLE_FIELD_METADATA.to_owned(), table.to_owned()),
        ]
        .into_iter()
        .collect(),
    );
    let schema = Arc::new(Schema::new(vec![field]));
    schemas.insert(table.to_owned(), schema.clone());
    schema
}

#[derive(Debug)]
pub struct StrataTable {
    name: String,
    dir: PathBuf,
    manifest: Arc<Manifest>,
    paths: Arc<PathIndex>,
    columns: Vec<PathColumn>,
    schema: SchemaRef,
    metadata_cache: Arc<PartMetadataCache>,
    /// The data directory's object store, which the scan reads part pages through.
    store: Arc<dyn ObjectStore>,
    /// Taken before the manifest was read: the snapshot's parts stay on disk while it is held.
    lease: Option<Arc<ReadLease>>,
    /// False only to compare answers against unpruned scans (`Session::open_without_pruning`).
    pruning: bool,
    /// Whether the scan applies a filter exactly, by filter: DataFusion's optimizer offers the
    /// same filters dozens of times while planning one query, and the answer only depends on
    /// this table's columns and snapshot.
    exact_filters: Mutex<HashMap<Expr, bool>>,
    /// Where a later execution takes its own snapshot (None: tables built in tests).
    refresh: Option<Arc<Refresh>>,
}

/// What a table needs to take a new snapshot, and the snapshot of the execution running now.
#[derive(Debug)]
struct Refresh {
    data_dir: DataDir,
    snapshots: Arc<SnapshotCache>,
    /// The execution (by its start time) and the snapshot its scans read.
    current: Mutex<Option<ExecutionSnapshot>>,
}

/// An execution's start time (nanoseconds) and the snapshot its scans read.
type ExecutionSnapshot = (Option<i64>, Arc<Manifest>, Option<Arc<ReadLease>>);

impl StrataTable {
    /// The table `name` of `data_dir`, whose parts `store` (rooted at the data directory) holds.
    pub fn open(
        data_dir: &DataDir,
        name: &str,
        snapshots: &Arc<SnapshotCache>,
        metadata_cache: Arc<PartMetadataCache>,
        store: &DataDirStore,
    ) -> Result<Option<StrataTable>, strata_engine::EngineError> {
        let dir = data_dir.table_dir(name)?;
        let lease = data_dir.read_lease(name)?.map(Arc::new);
        let Some((manifest, paths)) = snapshots.load(name, &dir)? else {
            return Ok(None);
        };
        let mut table = StrataTable::build(
            name.to_owned(),
            dir,
            (manifest, paths, lease),
            Vec::new(),
            (metadata_cache, store.get(data_dir)?),
        );
        table.refresh = Some(Arc::new(Refresh {
            data_dir: data_dir.clone(),
            snapshots: snapshots.clone(),
            current: Mutex::new(None),
        }));
        Ok(Some(table))
    }

    /// The same table, pruning (`true`, the default) or scanning every row of every part.
    pub fn with_pruning(mut self, pruning: bool) -> StrataTable {
        self.pruning = pruning;
        self
    }

    pub(crate) fn build(
        name: String,
        dir: PathBuf,
        (manifest, paths, lease): (Arc<Manifest>, Arc<PathIndex>, Option<Arc<ReadLease>>),
        columns: Vec<PathColumn>,
        (metadata_cache, store): (Arc<PartMetadataCache>, Arc<dyn ObjectStore>),
    ) -> StrataTable {
        let data = data_schema(&name);
        let schema = if columns.is_empty() {
            data
        } else {
            let mut fields = vec![data.field(0).clone()];
            for column in &columns {
                fields.push(if column.mode.is_json() {
                    json_field(&column.column_name())
                } else {
                    Field::new(column.column_name(), column.mode.data_type(), true)
                });
            }
            Arc::new(Schema::new(fields))
        };
        StrataTable {
            name,
            dir,
            manifest,
            paths,
            columns,
            schema,
            metadata_cache,
            store,
            lease,
            pruning: true,
            exact_filters: Mutex::default(),
            refresh: None,
        }
    }

    /// The same snapshot with the given path columns added to its schema.
    pub fn with_columns(&self, columns: BTreeSet<PathColumn>) -> StrataTable {
        StrataTable::build(
            self.name.clone(),
            self.dir.clone(),
            (
                self.manifest.clone(),
                self.paths.clone(),
                self.lease.clone(),
            ),
            columns.into_iter().collect(),
            (self.metadata_cache.clone(), self.store.clone()),
        )
        .with_pruning(self.pruning)
        .with_refresh(self.refresh.clone())
    }

    fn with_refresh(mut self, refresh: Option<Arc<Refresh>>) -> StrataTable {
        self.refresh = refresh;
        self
    }

    /// The snapshot the scans of the execution that started at `started` read: the one taken
    /// when the table was resolved for its first execution, a new one for each later execution.
    /// A plan whose filters this table applies exactly is refused when the new snapshot no
    /// longer lets the scan apply them exactly.
    fn execution_snapshot(
        &self,
        started: Option<i64>,
        filters: &[Expr],
    ) -> Result<(Arc<Manifest>, Option<Arc<ReadLease>>)> {
        let Some(refresh) = &self.refresh else {
            return Ok((self.manifest.clone(), self.lease.clone()));
        };
        let mut current = refresh
            .current
            .lock()
            .map_err(|_| DataFusionError::Internal("snapshot slot poisoned".into()))?;
        match current.as_ref() {
            Some((at, manifest, lease)) if *at == started => {
                return Ok((manifest.clone(), lease.clone()));
            }
            None => {
                // The first execution reads the snapshot its statement resolved.
                *current = Some((started, self.manifest.clone(), self.lease.clone()));
                return Ok((self.manifest.clone(), self.lease.clone()));
            }
            Some(_) => {}
        }
        let lease = refresh
            .data_dir
            .read_lease(&self.name)
            .map_err(external)?
            .map(Arc::new);
        let Some((manifest, _)) = refresh
            .snapshots
            .load(&self.name, &self.dir)
            .map_err(external)?
        else {
            return Err(DataFusionError::Plan(format!(
                "table {} was dropped after this statement was prepared",
                self.name
            )));
        };
        if !Arc::ptr_eq(&manifest, &self.manifest) && self.pruning {
            let planned_exact = self
                .exact_filters
                .lock()
                .map_err(|_| DataFusionError::Internal("filter exactness memo poisoned".into()))?;
            let broken = filters.iter().any(|filter| {
                planned_exact.get(filter) == Some(&true)
                    && !crate::scan::filter_is_exact(filter, &self.columns, &manifest)
            });
            if broken {
                return Err(DataFusionError::Plan(format!(
                    "table {} changed since this statement was prepared in a way its plan \
                     cannot follow; prepare the statement again",
                    self.name
                )));
            }
        }
        *current = Some((started, manifest.clone(), lease.clone()));
        Ok((manifest, lease))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn paths(&self) -> &Arc<PathIndex> {
        &self.paths
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }
}

#[async_trait]
impl TableProvider for StrataTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Filters prune parts, row groups and granules by statistics and DataFusion still
        // applies them, except equalities the parts' key runs decide row by row.
        let mut known = self
            .exact_filters
            .lock()
            .map_err(|_| DataFusionError::Internal("filter exactness memo poisoned".into()))?;
        Ok(filters
            .iter()
            .map(|filter| {
                let exact = self.pruning
                    && *known.entry((*filter).clone()).or_insert_with(|| {
                        crate::scan::filter_is_exact(filter, &self.columns, &self.manifest)
                    });
                if exact {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let outputs: Vec<ScanOutput> = indices
            .iter()
            .map(|&i| {
                if i == 0 {
                    ScanOutput::Document
                } else {
                    ScanOutput::Path(self.columns[i - 1].clone())
                }
            })
            .collect();
        let schema = Arc::new(self.schema.project(&indices)?);
        let partitions = state.config().target_partitions().max(1);
        let started = state
            .execution_props()
            .query_execution_start_time
            .and_then(|at| at.timestamp_nanos_opt());
        let (manifest, lease) = self.execution_snapshot(started, filters)?;
        if outputs.is_empty() && filters.is_empty() {
            return Ok(Arc::new(ManifestRowsExec::new(
                self.name.clone(),
                &manifest,
                schema,
                limit,
            )));
        }
        let exec = StrataScanExec::try_new(
            self.name.clone(),
            self.dir.clone(),
            self.store.clone(),
            &manifest,
            &self.columns,
            outputs,
            schema,
            if self.pruning { filters } else { &[] },
            limit,
            partitions,
            &self.metadata_cache,
            self.pruning,
        )?
        .with_lease(lease);
        Ok(Arc::new(exec))
    }
}

/// The object store of a data directory: every read of a part's pages goes through it, by the
/// part's location relative to the data directory (`<table>/parts/<file>`). By default a
/// `LocalFileSystem` rooted at the data directory, made when the first table is opened (the
/// directory may not exist before); another store (S3, or a test's) is given with
/// [`DataDirStore::with_store`].
#[derive(Debug, Default)]
pub struct DataDirStore {
    store: std::sync::OnceLock<Arc<dyn ObjectStore>>,
}

impl DataDirStore {
    /// A data directory whose parts `store` holds.
    pub fn with_store(store: Arc<dyn ObjectStore>) -> Self {
        let cell = std::sync::OnceLock::new();
        let _ = cell.set(store);
        DataDirStore { store: cell }
    }

    fn get(&self, data_dir: &DataDir) -> Result<Arc<dyn ObjectStore>, strata_engine::EngineError> {
        if let Some(store) = self.store.get() {
            return Ok(store.clone());
        }
        let local = object_store::local::LocalFileSystem::new_with_prefix(data_dir.root())
            .map_err(|e| {
                strata_engine::EngineError::from(strata_format::FormatError::Store {
                    path: data_dir.root().to_owned(),
                    source: e,
                })
            })?;
        Ok(self.store.get_or_init(|| Arc::new(local)).clone())
    }
}

/// The `public` schema of the session: every table of the data directory.
#[derive(Debug)]
pub struct DataDirSchema {
    data_dir: DataDir,
    registry: PathRegistry,
    /// Shared by every statement of the session: parts never change once written.
    metadata_cache: Arc<PartMetadataCache>,
    store: Arc<DataDirStore>,
    snapshots: Arc<SnapshotCache>,
    /// See `StrataTable::with_pruning`.
    pruning: bool,
    /// A transaction's schema: its tables are read at the transaction's snapshot (or in its
    /// private views) instead of the newest commit.
    transaction: Option<Arc<TransactionTables>>,
}

impl DataDirSchema {
    pub fn new(data_dir: DataDir, registry: PathRegistry) -> Self {
        DataDirSchema {
            data_dir,
            registry,
            metadata_cache: Arc::new(PartMetadataCache::default()),
            store: Arc::default(),
            snapshots: Arc::default(),
            pruning: true,
            transaction: None,
        }
    }

    /// Reads part pages through `store` (rooted at the data directory) instead of the local
    /// file system.
    pub fn with_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.store = Arc::new(DataDirStore::with_store(store));
        self
    }

    /// Tables that prune (`true`, the default) or scan every row of every part; used only to
    /// check that pruning never changes an answer.
    pub fn with_pruning(mut self, pruning: bool) -> Self {
        self.pruning = pruning;
        self
    }

    pub fn data_dir(&self) -> &DataDir {
        &self.data_dir
    }

    /// The documents `read` asks for, read through the table's key files without a plan
    /// (`crate::point_read`); None when `read.table` is not a table keyed by `read.path`, or
    /// `value` is not compared as a key there: the statement is then planned as usual.
    pub(crate) async fn point_read(
        &self,
        read: &PointRead,
        value: &BoundValue,
    ) -> Result<Option<crate::QueryResult>, crate::QueryError> {
        if !self.pruning || strata_engine::table::validate_table_name(&read.table).is_err() {
            return Ok(None);
        }
        // A transaction's table is its snapshot, or its private view once it changed it.
        let table = match &self.transaction {
            Some(transaction) => {
                transaction
                    .table(&read.table, self, TableRead::ByKey)
                    .await?
            }
            None => StrataTable::open(
                &self.data_dir,
                &read.table,
                &self.snapshots,
                self.metadata_cache.clone(),
                &self.store,
            )?,
        };
        let Some(table) = table else {
            return Ok(None);
        };
        let encoded_path = read.path.encode();
        let keyed = table
            .manifest
            .settings
            .key
            .as_ref()
            .filter(|key| key.path == encoded_path);
        let Some(setting) = keyed else {
            // A secondary index finds the documents a predicate matches: a read of the table.
            if let Some(transaction) = &self.transaction {
                transaction.read_keys(&read.table, None)?;
            }
            return indexed_point_read(&table, read, value, &encoded_path).await;
        };
        if table.manifest.parts.iter().any(|part| part.keys.is_none()) {
            // Only parts with key files can be read by key.
            return Ok(None);
        }
        let Some(key) = read.key(setting.key_type, value) else {
            return Ok(None);
        };
        let schema = data_schema(&table.name);
        let Some(key) = key else {
            return Ok(Some(crate::QueryResult {
                schema,
                batches: Vec::new(),
            }));
        };
        if let Some(transaction) = &self.transaction {
            transaction.read_keys(&read.table, Some(std::slice::from_ref(&key)))?;
        }
        // The table's read lease keeps its parts on disk until the rows are read.
        let batch = read_documents_by_key(&table.point_source(), &key, &schema).await?;
        Ok(Some(point_result(schema, batch)))
    }

    /// The same schema with its tables pinned for a transaction: all now (`all`, one snapshot),
    /// or each when first used.
    pub(crate) fn pinned(&self, all: bool) -> Result<DataDirSchema, strata_engine::EngineError> {
        let tables = TransactionTables::pin(&self.data_dir, &self.snapshots, all)?;
        Ok(DataDirSchema {
            data_dir: self.data_dir.clone(),
            registry: self.registry.clone(),
            metadata_cache: self.metadata_cache.clone(),
            store: self.store.clone(),
            snapshots: self.snapshots.clone(),
            pruning: self.pruning,
            transaction: Some(Arc::new(tables)),
        })
    }

    /// The tables of the transaction this schema belongs to (None: not a transaction's).
    pub(crate) fn transaction(&self) -> Option<&Arc<TransactionTables>> {
        self.transaction.as_ref()
    }

    /// `name` read at `snapshot` (with its read lease), for a transaction.
    pub(crate) fn snapshot_table(
        &self,
        name: &str,
        (manifest, paths, lease): (Arc<Manifest>, Arc<PathIndex>, Option<Arc<ReadLease>>),
    ) -> Result<StrataTable, strata_engine::EngineError> {
        Ok(StrataTable::build(
            name.to_owned(),
            self.data_dir.table_dir(name)?,
            (manifest, paths, lease),
            Vec::new(),
            (self.metadata_cache.clone(), self.store.get(&self.data_dir)?),
        )
        .with_pruning(self.pruning))
    }
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl SchemaProvider for DataDirSchema {
    fn table_names(&self) -> Vec<String> {
        self.data_dir.table_names().unwrap_or_default()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if strata_engine::table::validate_table_name(name).is_err() {
            return Ok(None);
        }
        if let Some(transaction) = &self.transaction {
            let Some(table) = transaction
                .table(name, self, TableRead::Planned)
                .await
                .map_err(external)?
            else {
                return Ok(None);
            };
            if let Ok(mut registry) = self.registry.write() {
                registry.insert(name.to_owned(), table.paths().clone());
            }
            return Ok(Some(Arc::new(table)));
        }
        let Some(table) = StrataTable::open(
            &self.data_dir,
            name,
            &self.snapshots,
            self.metadata_cache.clone(),
            &self.store,
        )
        .map_err(external)?
        else {
            return Ok(None);
        };
        let table = table.with_pruning(self.pruning);
        if let Ok(mut registry) = self.registry.write() {
            registry.insert(name.to_owned(), table.paths().clone());
        }
        Ok(Some(Arc::new(table)))
    }

    /// `DROP TABLE` as DataFusion routes it: deletes the table's files (under its writer lock).
    /// `Session::run` handles `DROP TABLE` itself (crate::ddl) so that its errors are reported
    /// as they are; this serves DataFusion's own path.
    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if strata_engine::table::validate_table_name(name).is_err() {
            return Ok(None);
        }
        match self.data_dir.drop_table(name).map_err(external)? {
            true => Ok(Some(Arc::new(DroppedTable))),
            false => Ok(None),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.data_dir
            .table_dir(name)
            .map(|d| d.join(strata_format::manifest::MANIFEST_FILE).exists())
            .unwrap_or(false)
    }
}

/// What `deregister_table` hands back for a table whose files are gone: it has no rows.
#[derive(Debug)]
struct DroppedTable;

#[async_trait]
impl TableProvider for DroppedTable {
    fn schema(&self) -> SchemaRef {
        Arc::new(Schema::empty())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
            self.schema(),
        )))
    }
}

/// Data type of the `data` column.
pub fn data_column_type() -> DataType {
    DataType::Utf8
}

/// [`DataDirSchema::point_read`] through a secondary index on the read's path (ADR 0024): the
/// documents of the rows each part's index file lists for the value, when every part that may
/// hold the path has a file for the index and compares the value as the planned statement does
/// (`PointRead::key`, by the part's column kind); None — plan the statement — otherwise.
async fn indexed_point_read(
    table: &StrataTable,
    read: &PointRead,
    value: &BoundValue,
    encoded_path: &str,
) -> Result<Option<crate::QueryResult>, crate::QueryError> {
    let Some(index) = (table.manifest.settings.indexes.iter()).find(|i| i.path == encoded_path)
    else {
        return Ok(None);
    };
    // Per part: the index file and the value as its column holds it (None: it matches no row).
    let mut lookups = std::collections::HashMap::new();
    for entry in &table.manifest.parts {
        let file = entry.indexes.iter().find(|i| i.name == index.name);
        let holds_path = entry.columns.contains_key(encoded_path)
            || entry.remainder_paths.contains_key(encoded_path)
            || entry.remainder_paths_truncated;
        let value_type = strata_format::indexes::value_type(entry, encoded_path);
        let key_type = match (file, value_type) {
            (Some(_), Some(key_type)) => key_type,
            // No row of the part has a value at the path.
            (None, _) if !holds_path => continue,
            _ => return Ok(None),
        };
        let Some(key) = read.key(key_type, value) else {
            return Ok(None);
        };
        lookups.insert(entry.file.as_str(), (file, key));
    }
    let schema = data_schema(&table.name);
    let batch = read_documents(&table.point_source(), &schema, &|entry| match lookups
        .get(entry.file.as_str())
    {
        Some((Some(file), Some(key))) => {
            strata_format::KeyCache::shared().index_rows_of(&table.dir, file, entry.rows, key)
        }
        _ => Ok(Vec::new()),
    })
    .await?;
    Ok(Some(point_result(schema, batch)))
}

/// A point read's result: no rows, no batch, as a planned statement answers.
fn point_result(schema: SchemaRef, batch: arrow::array::RecordBatch) -> crate::QueryResult {
    let batches = if batch.num_rows() == 0 {
        Vec::new()
    } else {
        vec![batch]
    };
    crate::QueryResult { schema, batches }
}

impl StrataTable {
    /// Where point reads of this snapshot find their rows.
    fn point_source(&self) -> PointSource<'_> {
        PointSource {
            table: &self.name,
            dir: &self.dir,
            store: &self.store,
            manifest: &self.manifest,
            metadata_cache: &self.metadata_cache,
        }
    }
}
