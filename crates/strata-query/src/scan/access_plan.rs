//! Access plans: the one place where the scan decides which rows of a part it skips.
//!
//! A part's plan is a DataFusion [`ParquetAccessPlan`]: one [`RowGroupAccess`] per row group,
//! the intersection of what every source of skipping allows — the part's key runs (exact row
//! ranges), row-group statistics and page statistics. Later sources (text-index hits, deletion
//! vectors) narrow the same plan. The plan is split into units of one row group each so that
//! partitions can balance, and units of one part are merged back per partition.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, RowSelection};
use parquet::file::metadata::ParquetMetaData;
use strata_format::{PartChecksums, PartEntry};

use super::prune::Predicate;
use super::prune::key_runs::run_selection;
use super::prune::page::page_selection;
use super::prune::row_group::row_group_may_match;

/// Row groups of one part to read, each with the rows it may match.
#[derive(Debug, Clone)]
pub(super) struct ScanUnit {
    pub(super) part: Arc<PartInScan>,
    /// Over all row groups of the part; those outside the unit are skipped.
    pub(super) plan: ParquetAccessPlan,
    /// Rows the unit reads.
    pub(super) rows: u64,
}

#[derive(Debug)]
pub(super) struct PartInScan {
    pub(super) entry: PartEntry,
    pub(super) path: PathBuf,
    pub(super) metadata: ArrowReaderMetadata,
    /// What every read of the part is verified against (None: a part without checksums).
    pub(super) checksums: Option<Arc<PartChecksums>>,
}

/// What pruning skipped, at each level.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PruneCounts {
    pub(super) parts_total: usize,
    pub(super) parts_pruned: usize,
    pub(super) row_groups_total: usize,
    pub(super) row_groups_pruned: usize,
    pub(super) pages_total: usize,
    pub(super) pages_pruned: usize,
    pub(super) rows_total: usize,
    pub(super) rows_pruned: usize,
}

/// Granules of a row group of `rows` rows: pruning is reported in granules (GRANULE_ROWS long,
/// the writer's page row limit) so the figures do not depend on how many pages each column
/// happened to need.
fn granules(rows: usize) -> usize {
    rows.div_ceil(strata_format::part::GRANULE_ROWS)
}

/// Granules of a row group of `rows` rows that no range of `ranges` touches.
fn granules_outside(rows: usize, ranges: &[Range<usize>]) -> usize {
    let granule = strata_format::part::GRANULE_ROWS;
    let total = granules(rows);
    let kept = (0..total)
        .filter(|g| {
            let (start, end) = (g * granule, ((g + 1) * granule).min(rows));
            ranges.iter().any(|r| r.start < end && start < r.end)
        })
        .count();
    total - kept
}

/// The access plan of one part that survived part pruning.
pub(super) fn plan_part(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    predicates: &[Predicate],
    counts: &mut PruneCounts,
) -> ParquetAccessPlan {
    let runs = run_selection(entry, predicates);
    let mut plan = ParquetAccessPlan::new_all(parquet.num_row_groups());
    let mut first_row = 0usize;
    for (index, rg) in parquet.row_groups().iter().enumerate() {
        let group_rows = rg.num_rows() as usize;
        let group_start = first_row;
        first_row += group_rows;
        counts.row_groups_total += 1;
        counts.pages_total += granules(group_rows);
        if !predicates.iter().all(|p| row_group_may_match(entry, rg, p)) {
            counts.row_groups_pruned += 1;
            counts.pages_pruned += granules(group_rows);
            plan.skip(index);
            continue;
        }
        if let Some(pages) = page_selection(entry, parquet, index, predicates) {
            counts.pages_pruned += granules_outside(group_rows, &pages);
            plan.scan_selection(index, selection(&pages, group_rows));
        }
        if let Some(runs) = &runs {
            let local: Vec<Range<usize>> = runs
                .iter()
                .filter_map(|r| {
                    let start = r.start.max(group_start);
                    let end = r.end.min(group_start + group_rows);
                    (start < end).then(|| start - group_start..end - group_start)
                })
                .collect();
            plan.scan_selection(index, selection(&local, group_rows));
        }
        if let RowGroupAccess::Selection(s) = &plan.inner()[index]
            && !s.selects_any()
        {
            counts.row_groups_pruned += 1;
            plan.skip(index);
        }
    }
    plan
}

fn selection(ranges: &[Range<usize>], rows: usize) -> RowSelection {
    RowSelection::from_consecutive_ranges(ranges.iter().cloned(), rows)
}

/// Rows an access plan reads.
pub(super) fn planned_rows(plan: &ParquetAccessPlan, parquet: &ParquetMetaData) -> u64 {
    plan.inner()
        .iter()
        .enumerate()
        .map(|(rg, access)| match access {
            RowGroupAccess::Skip => 0,
            RowGroupAccess::Scan => parquet.row_group(rg).num_rows() as u64,
            RowGroupAccess::Selection(s) => s.row_count() as u64,
        })
        .sum()
}

/// One unit per scanned row group of `plan`, so partitions can balance.
pub(super) fn split_units(part: &Arc<PartInScan>, plan: &ParquetAccessPlan) -> Vec<ScanUnit> {
    let parquet = part.metadata.metadata();
    plan.inner()
        .iter()
        .enumerate()
        .filter(|(_, access)| access.should_scan())
        .map(|(rg, access)| {
            let mut single = ParquetAccessPlan::new_none(plan.len());
            single.set(rg, access.clone());
            let rows = planned_rows(&single, parquet);
            ScanUnit {
                part: part.clone(),
                plan: single,
                rows,
            }
        })
        .collect()
}

/// Adds the row groups `other` scans to `plan` (both over the same part).
pub(super) fn merge(plan: &mut ParquetAccessPlan, other: &ParquetAccessPlan) {
    for (rg, access) in other.inner().iter().enumerate() {
        if access.should_scan() {
            plan.set(rg, access.clone());
        }
    }
}
