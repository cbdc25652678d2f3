//! Engine errors; each carries the table or file it concerns.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Format(#[from] strata_format::FormatError),
    #[error("table {table}: cannot publish it as an Iceberg table: {source}")]
    Iceberg {
        table: String,
        #[source]
        source: strata_iceberg::IcebergError,
    },
    #[error("table {table}: {source}")]
    Json {
        table: String,
        #[source]
        source: strata_json::JsonError,
    },
    #[error("table {table}: arrow error while {context}: {source}")]
    Arrow {
        table: String,
        context: &'static str,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("table {0:?} does not exist")]
    NoSuchTable(String),
    #[error(
        "invalid table name {0:?}: use letters, digits, '_', '-' and '.', starting with a letter or '_'"
    )]
    InvalidTableName(String),
    #[error(
        "table {table} already has sort key [{existing}]; the sort key is fixed when a table is created (given: [{given}])"
    )]
    SortKeyMismatch {
        table: String,
        existing: String,
        given: String,
    },
    #[error(
        "table {table} has {existing}; a table's key is fixed when the table is created (given: key {given})"
    )]
    KeyMismatch {
        table: String,
        existing: String,
        given: String,
    },
    #[error(
        "table {table}: key {path} = {key} is {where_}; nothing was loaded (to replace or skip such documents: strata ingest --on-conflict replace|ignore, SQL INSERT … ON CONFLICT DO UPDATE SET data = EXCLUDED.data | DO NOTHING)"
    )]
    DuplicateKey {
        table: String,
        key: String,
        path: String,
        where_: String,
    },
    #[error("invalid key path {path:?}: {reason}")]
    InvalidKey { path: String, reason: String },
    #[error("invalid text index path {path:?}: {reason}")]
    InvalidTextIndex { path: String, reason: String },
    #[error(
        "table {table} has a text index on [{existing}]; it is fixed when the table is created (given: [{given}])"
    )]
    TextIndexMismatch {
        table: String,
        existing: String,
        given: String,
    },
    #[error("invalid time column {path:?}: {reason}")]
    InvalidTimeColumn { path: String, reason: String },
    #[error(
        "table {table} has {}; a table's time column is fixed when the table is created (given: {given})",
        existing.as_ref().map_or("no time column".to_owned(), |e| format!("time column {e}"))
    )]
    TimeColumnMismatch {
        table: String,
        existing: Option<String>,
        given: String,
    },
    #[error("invalid sort key path {path:?} (entry {position}): {reason}")]
    InvalidSortKey {
        path: String,
        position: usize,
        reason: String,
    },
    #[error("table setting {setting}: {reason}")]
    InvalidSetting { setting: String, reason: String },
    #[error("index {name}: {reason}")]
    InvalidIndex { name: String, reason: String },
    #[error("index {0} does not exist")]
    NoSuchIndex(String),
    #[error("input {path}: {source}")]
    Input {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("table {table}: every one of the {rejected} lines read was rejected")]
    AllRejected { table: String, rejected: u64 },
    #[error("table {table}: no part {part} (a merge may have replaced it)")]
    NoSuchPart { table: String, part: String },
    #[error("table {table}: part {part} has {rows} rows; there is no row {row} to delete")]
    NoSuchRow {
        table: String,
        part: String,
        row: u64,
        rows: u64,
    },
    /// A transaction wrote a key that another commit changed after the transaction's snapshot
    /// (SQLSTATE 40001: retry the transaction).
    #[error(
        "could not serialize access due to concurrent update: table {table}, key {key} was changed by another commit after this transaction began"
    )]
    WriteConflict { table: String, key: String },
    /// A `SERIALIZABLE` transaction read something of `table` (`read`: the table, or one key)
    /// that another commit changed after the transaction's snapshot, and it writes: committing
    /// it could make an order no serial execution has (SQLSTATE 40001: retry the transaction).
    #[error(
        "could not serialize access due to read/write dependencies among transactions: table {table}: {read} was changed by another commit after this SERIALIZABLE transaction read it"
    )]
    ReadConflict { table: String, read: String },
    /// The mirror of the data directory (object storage under `strata serve`) failed or refused
    /// a change of `table`; `conflict`: another writer changed what it changed (retry).
    #[error("table {table}: {message}")]
    Mirror {
        table: String,
        message: String,
        conflict: bool,
    },
    #[error("data directory {0} does not exist")]
    NoDataDir(PathBuf),
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            source,
        }
    }
}
