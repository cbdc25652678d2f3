//! Tables on a local data directory: ingest, export, merges, and the rules that keep them safe.
//!
//! A data directory holds one directory per table:
//! `TABLE/manifest.json` (the visible parts), `TABLE/parts/*.parquet` (immutable parts),
//! `TABLE/rejects.ndjson` (rejected input lines of committed ingests), `TABLE/.lock` (writers'
//! lock) and `TABLE/.readers` (readers' leases).
//!
//! Invariants:
//! - one writer per table at a time (an exclusive lock on `.lock`), any number of readers;
//! - a write becomes visible only through one atomic manifest commit, so a killed process leaves
//!   the table as it was before or after the whole ingest or merge;
//! - a table exists from its first commit on: nothing invalid or interrupted leaves a table;
//! - readers work on one manifest snapshot under a read lease; parts that a merge replaced stay
//!   on disk until no lease is held, so those snapshots stay readable (see [`table`]).

mod commit;
pub mod deletes;
pub mod error;
pub mod indexes;
pub mod ingest;
pub mod input;
pub mod merge;
pub mod mirror;
mod part_writing;
pub mod priority;
pub mod retention;
pub mod selfcheck;
pub mod settings;
pub mod table;
mod table_names;
pub mod transaction;
pub mod wal;

pub use deletes::{delete_keys, delete_rows, live_keys};
pub use error::EngineError;
pub use ingest::{
    IngestOptions, IngestProgress, IngestSummary, OnConflict, ParsedInput, PreparedIngest, Reject,
    ingest, ingest_parsed,
};
pub use merge::{MergeOptions, MergeScope, MergeSummary, merge_parts};
pub use retention::{RetentionSummary, drop_expired};
pub use settings::SettingChange;
pub use table::{
    DataDir, LockHolder, LockWait, MergeLease, PartCheck, ReadLease, TableCheck, TableInfo,
    check_table, export_table,
};
