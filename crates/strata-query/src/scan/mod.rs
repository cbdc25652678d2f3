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
//! `count` (filtered counts from row-group statistics where they cover the filter),
//! `read` (opening a part, building outputs, the remainder overlay), `reduce` (rows dropped
//! before documents are built, for filters and top-k above the scan), `row_filter` (those
//! filters' conjuncts evaluated inside the Parquet decoder, evaluated row by row where the whole
//! batch fails: `crate::short_circuit`), `top_order` (a top-k's pages read
//! best first, those that cannot beat the rows kept skipped), `group_counter` (grouped
//! counts by dictionary key), `deleted_rows` (deleted rows found per batch, for grouped counts
//! that take them back instead of skipping them), `metadata_cache` (parsed footers kept across statements), `point`
//! (the rows of one key, read without a plan), `manifest_rows` (the rows of a statement that
//! reads no column and filters none, counted from the manifest).

mod access_plan;
mod count;
mod deleted_rows;
mod dictionary_keys;
mod exec;
mod group_counter;
mod manifest_rows;
mod metadata_cache;
mod point;
mod prune;
mod read;
mod reduce;
mod row_filter;
mod statistics;
mod top_order;

use std::path::Path;
use std::sync::Arc;

use datafusion::common::DataFusionError;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::repartition::RepartitionExec;

pub use count::Covering;
pub use exec::StrataScanExec;
pub use manifest_rows::ManifestRowsExec;
pub use metadata_cache::PartMetadataCache;
pub use point::{PointSource, read_documents, read_documents_by_key};
pub(crate) use prune::filter_is_exact;
pub use reduce::{RowReduction, TopRows};

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

/// The Strata scan under `node`, through nodes that pass its rows through unchanged
/// (repartitioning, and the cooperative-scheduling wrapper DataFusion puts above a scan of
/// several partitions that nothing repartitions): where the physical rules find the scan they
/// rewrite.
pub(crate) fn scan_below(node: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    if node.is::<StrataScanExec>() {
        return Some(node);
    }
    if node.is::<RepartitionExec>() || node.is::<CooperativeExec>() {
        return node.children().first().and_then(|child| scan_below(child));
    }
    None
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn part_error(table: &str, path: &Path, e: DataFusionError) -> DataFusionError {
    DataFusionError::Execution(format!("table {table}: {}: {e}", path.display()))
}
