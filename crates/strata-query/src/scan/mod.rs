//! The physical scan of a Strata table: prune, read only the needed columns, build path values.
//!
//! Planning prunes before any data page is read (`prune`): whole parts from the manifest, then
//! row groups from the Parquet footer statistics and pages (granules) from the page index, and
//! rows from the parts' key runs. `access_plan` turns those decisions into one DataFusion
//! `ParquetAccessPlan` per part — the one place where row skipping is decided. Execution
//! (`exec`) reads each plan's row groups and rows with a projection of exactly the physical
//! columns the requested paths need (`read`), through parquet's async reader over the data
//! directory's object store (every page verified by strata-format's `VerifiedPartReader`), one
//! tokio task and stream per partition (ADR 0012).
//!
//! Module map: `exec` (the `ExecutionPlan`), `prune` (one module per level), `access_plan`,
//! `read` (opening a part, building outputs, the remainder overlay), `group_counter` (grouped
//! counts by dictionary key), `metadata_cache` (parsed footers kept across statements).

mod access_plan;
mod exec;
mod group_counter;
mod metadata_cache;
mod prune;
mod read;
mod statistics;

use std::path::Path;

use datafusion::common::DataFusionError;

pub use exec::StrataScanExec;
pub use metadata_cache::PartMetadataCache;
pub(crate) use prune::filter_is_exact;

use crate::paths::PathColumn;

/// Rows per batch the scan produces.
const BATCH_ROWS: usize = 8192;

/// One output column of the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanOutput {
    /// The whole document as JSON text.
    Document,
    Path(PathColumn),
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn part_error(table: &str, path: &Path, e: DataFusionError) -> DataFusionError {
    DataFusionError::Execution(format!("table {table}: {}: {e}", path.display()))
}
