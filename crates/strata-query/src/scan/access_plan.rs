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

use super::deleted_rows::PartDeletions;

use super::prune::ScanPredicate;
use super::prune::key_runs::run_selection;
use super::prune::page::{intersect, page_selection};
use super::prune::row_group::{RowGroupStatistics, row_groups_to_scan};

/// Row groups of one part to read, each with the rows it may match.
#[derive(Debug, Clone)]
pub(super) struct ScanUnit {
    pub(super) part: Arc<PartInScan>,
    /// Over all row groups of the part; those outside the unit are skipped.
    pub(super) plan: ParquetAccessPlan,
    /// Rows the unit reads, not counting deleted rows its plan still reads (`deleted_rows`).
    pub(super) rows: u64,
}

#[derive(Debug)]
pub(super) struct PartInScan {
    pub(super) entry: Arc<PartEntry>,
    /// On disk: names the part in errors and keys the metadata cache.
    pub(super) path: PathBuf,
    /// In the data directory's object store, which every read of the part's pages goes through.
    pub(super) location: object_store::path::Path,
    pub(super) metadata: ArrowReaderMetadata,
    /// What every read of the part is verified against (None: a part without checksums).
    pub(super) checksums: Option<Arc<PartChecksums>>,
    /// The part's deleted rows, which its units' plans skip.
    pub(super) deleted: Option<Arc<PartDeletions>>,
    /// The part rows matching every `matches` conjunct of the scan's predicate, when the part's
    /// text postings decide them exactly (`prune::text_index`), and every keyword lookup too
    /// when `matching_decides_lookups`; deleted rows included.
    pub(super) text_matching: Option<Arc<roaring::RoaringBitmap>>,
    pub(super) matching_decides_lookups: bool,
}

/// What pruning skipped, at each level, and by what: statistics (manifest, footer, page
/// index) or key runs.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PruneCounts {
    pub(super) parts_total: usize,
    /// By the manifest's statistics.
    pub(super) parts_pruned: usize,
    pub(super) row_groups_total: usize,
    pub(super) row_groups_pruned_by_statistics: usize,
    /// Row groups left without a row once key runs were applied.
    pub(super) row_groups_pruned_by_key_runs: usize,
    pub(super) granules_total: usize,
    pub(super) granules_pruned_by_statistics: usize,
    pub(super) granules_pruned_by_key_runs: usize,
    pub(super) rows_total: usize,
    pub(super) rows_pruned_by_parts: usize,
    pub(super) rows_pruned_by_row_groups: usize,
    pub(super) rows_pruned_by_pages: usize,
    pub(super) rows_pruned_by_key_runs: usize,
    /// Rows the pruned plan would have read that deletion vectors skip (ADR 0015).
    pub(super) rows_deleted: usize,
    /// Parts skipped because the key index found none of the keys the filters ask for.
    pub(super) parts_pruned_by_key_index: usize,
    /// Rows (of parts read) that the key index showed hold none of those keys (ADR 0016).
    pub(super) rows_pruned_by_key_index: usize,
    /// Granules whose text index filters hold none of a `matches` query's tokens (ADR 0019).
    pub(super) granules_pruned_by_text_index: usize,
    /// Rows the plan would have read in those granules.
    pub(super) rows_pruned_by_text_index: usize,
    /// Parts skipped because their secondary index files list none of the values the filters
    /// ask for (ADR 0024).
    pub(super) parts_pruned_by_secondary_index: usize,
    /// Rows (of parts read) that secondary index files showed hold none of those values.
    pub(super) rows_pruned_by_secondary_index: usize,
}

impl PruneCounts {
    pub(super) fn row_groups_pruned(&self) -> usize {
        self.row_groups_pruned_by_statistics + self.row_groups_pruned_by_key_runs
    }

    pub(super) fn granules_pruned(&self) -> usize {
        self.granules_pruned_by_statistics
            + self.granules_pruned_by_key_runs
            + self.granules_pruned_by_text_index
    }

    pub(super) fn rows_pruned_by_statistics(&self) -> usize {
        self.rows_pruned_by_parts + self.rows_pruned_by_row_groups + self.rows_pruned_by_pages
    }

    pub(super) fn rows_pruned(&self) -> usize {
        self.rows_pruned_by_statistics()
            + self.rows_pruned_by_key_runs
            + self.rows_pruned_by_key_index
            + self.rows_pruned_by_text_index
            + self.rows_pruned_by_secondary_index
    }
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

fn rows_in(ranges: &[Range<usize>]) -> usize {
    ranges.iter().map(|r| r.len()).sum()
}

/// The access plan of one part that survived part pruning: row groups the footer statistics
/// rule out are skipped; in the others, only rows in pages the page index keeps and in key
/// runs the predicate keeps are read.
pub(super) fn plan_part(
    entry: &PartEntry,
    metadata: &ArrowReaderMetadata,
    predicate: &ScanPredicate,
    counts: &mut PruneCounts,
) -> ParquetAccessPlan {
    let parquet = metadata.metadata().as_ref();
    let schema = metadata.schema().as_ref();
    let runs = run_selection(entry, predicate);
    let statistics = RowGroupStatistics {
        entry,
        parquet,
        schema,
        predicate,
    };
    let row_groups_kept = row_groups_to_scan(&statistics);
    let mut plan = ParquetAccessPlan::new_all(parquet.num_row_groups());
    let mut first_row = 0usize;
    for (index, rg) in parquet.row_groups().iter().enumerate() {
        let group_rows = rg.num_rows() as usize;
        let group_start = first_row;
        first_row += group_rows;
        counts.row_groups_total += 1;
        counts.granules_total += granules(group_rows);
        if !row_groups_kept.get(index).copied().unwrap_or(true) {
            counts.row_groups_pruned_by_statistics += 1;
            counts.granules_pruned_by_statistics += granules(group_rows);
            counts.rows_pruned_by_row_groups += group_rows;
            plan.skip(index);
            continue;
        }
        let pages = page_selection(entry, parquet, schema, index, predicate);
        if let Some(pages) = &pages {
            counts.granules_pruned_by_statistics += granules_outside(group_rows, pages);
            counts.rows_pruned_by_pages += group_rows - rows_in(pages);
        }
        let Some(runs) = &runs else {
            if let Some(pages) = pages {
                keep_rows(&mut plan, index, &pages, group_rows, counts, 0);
            }
            continue;
        };
        let local: Vec<Range<usize>> = runs
            .iter()
            .filter_map(|r| {
                let start = r.start.max(group_start);
                let end = r.end.min(group_start + group_rows);
                (start < end).then(|| start - group_start..end - group_start)
            })
            .collect();
        let (before, after) = match &pages {
            Some(pages) => (pages.clone(), intersect(pages, &local)),
            None => (std::iter::once(0..group_rows).collect(), local),
        };
        counts.rows_pruned_by_key_runs += rows_in(&before) - rows_in(&after);
        let by_runs = granules_outside(group_rows, &after) - granules_outside(group_rows, &before);
        keep_rows(&mut plan, index, &after, group_rows, counts, by_runs);
    }
    plan
}

/// Narrows `plan` to the rows of its part that `deletions` does not list (ADR 0015): a row group
/// read whole becomes a selection, so its footer statistics count as bounds only, and a row
/// group left without rows is skipped. Row groups whose deleted rows are scattered keep them in
/// the plan, to be dropped after decoding (`deleted_rows`); they are counted here all the same.
pub(super) fn skip_deleted(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    deletions: &PartDeletions,
    counts: &mut PruneCounts,
) {
    for (index, kept) in deletions.kept.iter().enumerate() {
        let Some(kept) = kept else {
            continue;
        };
        let group_rows = parquet.row_group(index).num_rows().max(0) as usize;
        let access = &plan.inner()[index];
        if !access.should_scan() {
            continue;
        }
        if deletions.after_decoding(index) {
            counts.rows_deleted += deletions.deleted_in_access(index, access, group_rows) as usize;
            continue;
        }
        let (before, after) = keep_selected(plan, index, kept, group_rows);
        counts.rows_deleted += before - after;
    }
}

/// Narrows row group `rg` of `plan` to the rows `kept` selects (a row group left without rows is
/// skipped); returns the rows it read before and after.
pub(super) fn keep_selected(
    plan: &mut ParquetAccessPlan,
    rg: usize,
    kept: &RowSelection,
    group_rows: usize,
) -> (usize, usize) {
    let (before, narrowed) = match &plan.inner()[rg] {
        RowGroupAccess::Skip => return (0, 0),
        RowGroupAccess::Scan => (group_rows, kept.clone()),
        RowGroupAccess::Selection(selected) => (selected.row_count(), selected.intersection(kept)),
    };
    let after = narrowed.row_count();
    if after == 0 {
        plan.skip(rg);
    } else {
        plan.scan_selection(rg, narrowed);
    }
    (before, after)
}

/// Narrows `plan` to the rows the key index found (ADR 0016): `rows` sorted part positions.
pub(super) fn keep_key_rows(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    rows: &[u64],
    counts: &mut PruneCounts,
) {
    counts.rows_pruned_by_key_index += keep_only(plan, parquet, &row_ranges(rows));
}

/// Narrows `plan` to `rows` (sorted), those a part's secondary index files list
/// (`prune::secondary_index`).
pub(super) fn keep_indexed_rows(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    rows: &[u64],
    counts: &mut PruneCounts,
) {
    counts.rows_pruned_by_secondary_index += keep_only(plan, parquet, &row_ranges(rows));
}

/// Narrows `plan` to `ranges` of rows (sorted, disjoint): what a point read decodes.
pub(super) fn keep_row_ranges(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    ranges: &[Range<u64>],
) {
    keep_only(plan, parquet, ranges);
}

/// Sorted rows as ranges of consecutive rows.
pub(super) fn row_ranges(rows: &[u64]) -> Vec<Range<u64>> {
    join_ranges(rows.iter().map(|&row| row..row + 1))
}

/// Sorted, disjoint ranges with those that touch joined into one.
pub(super) fn join_ranges<T: PartialEq>(
    sorted: impl IntoIterator<Item = Range<T>>,
) -> Vec<Range<T>> {
    let mut ranges: Vec<Range<T>> = Vec::new();
    for range in sorted {
        match ranges.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => ranges.push(range),
        }
    }
    ranges
}

/// Narrows `plan` to the granules the text index keeps (`prune::text_index`).
pub(super) fn keep_text_rows(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    kept: &[Range<u64>],
    granules_pruned: usize,
    counts: &mut PruneCounts,
) {
    counts.granules_pruned_by_text_index += granules_pruned;
    counts.rows_pruned_by_text_index += keep_only(plan, parquet, kept);
}

/// Narrows `plan` to the part rows in `kept` (sorted, disjoint); returns how many rows the plan
/// read before that it no longer reads.
fn keep_only(
    plan: &mut ParquetAccessPlan,
    parquet: &ParquetMetaData,
    kept: &[Range<u64>],
) -> usize {
    let mut removed = 0;
    let mut group_start = 0u64;
    for (index, rg) in parquet.row_groups().iter().enumerate() {
        let group_rows = rg.num_rows().max(0) as u64;
        let group_end = group_start + group_rows;
        // `kept` is sorted: only its ranges from the first ending after the group's start to
        // the last starting before its end overlap it (a part narrowed row by row has tens of
        // thousands, and tens of row groups).
        let first = kept.partition_point(|r| r.end <= group_start);
        let end = first + kept[first..].partition_point(|r| r.start < group_end);
        let local: Vec<Range<usize>> = kept[first..end]
            .iter()
            .filter_map(|r| {
                let (start, end) = (r.start.max(group_start), r.end.min(group_end));
                (start < end).then(|| (start - group_start) as usize..(end - group_start) as usize)
            })
            .collect();
        group_start = group_end;
        let group_rows = group_rows as usize;
        if rows_in(&local) == group_rows {
            continue;
        }
        let live = selection(&local, group_rows);
        let narrowed = match &plan.inner()[index] {
            RowGroupAccess::Skip => continue,
            RowGroupAccess::Scan => live,
            RowGroupAccess::Selection(selected) => selected.intersection(&live),
        };
        let before = match &plan.inner()[index] {
            RowGroupAccess::Selection(selected) => selected.row_count(),
            _ => group_rows,
        };
        removed += before - narrowed.row_count();
        if narrowed.row_count() == 0 {
            plan.skip(index);
        } else {
            plan.scan_selection(index, narrowed);
        }
    }
    removed
}

/// Narrows row group `index` of `plan` to `ranges`; a row group left without rows is skipped
/// (counted as pruned by key runs when they emptied it).
fn keep_rows(
    plan: &mut ParquetAccessPlan,
    index: usize,
    ranges: &[Range<usize>],
    group_rows: usize,
    counts: &mut PruneCounts,
    granules_by_runs: usize,
) {
    counts.granules_pruned_by_key_runs += granules_by_runs;
    if ranges.is_empty() {
        if granules_by_runs > 0 {
            counts.row_groups_pruned_by_key_runs += 1;
        } else {
            counts.row_groups_pruned_by_statistics += 1;
        }
        plan.skip(index);
    } else if rows_in(ranges) < group_rows {
        plan.scan_selection(index, selection(ranges, group_rows));
    }
}

fn selection(ranges: &[Range<usize>], rows: usize) -> RowSelection {
    RowSelection::from_consecutive_ranges(ranges.iter().cloned(), rows)
}

/// The row ranges an access to a row group of `rows` rows reads.
pub(super) fn selected_ranges(access: &RowGroupAccess, rows: usize) -> Vec<Range<usize>> {
    let selection = match access {
        RowGroupAccess::Skip => return Vec::new(),
        RowGroupAccess::Scan => return std::iter::once(0..rows).collect(),
        RowGroupAccess::Selection(selection) => selection,
    };
    let mut ranges = Vec::new();
    let mut row = 0;
    for selector in selection.iter() {
        if !selector.skip {
            ranges.push(row..row + selector.row_count);
        }
        row += selector.row_count;
    }
    ranges
}

/// One unit per row group `plan` reads, so partitions can balance.
pub(super) fn split_units(part: &Arc<PartInScan>, plan: ParquetAccessPlan) -> Vec<ScanUnit> {
    let parquet = part.metadata.metadata();
    let groups = plan.len();
    plan.into_inner()
        .into_iter()
        .enumerate()
        .filter(|(_, access)| access.should_scan())
        .filter_map(|(rg, access)| {
            let group_rows = parquet.row_group(rg).num_rows().max(0) as usize;
            let mut rows = match &access {
                RowGroupAccess::Skip => 0,
                RowGroupAccess::Scan => group_rows as u64,
                RowGroupAccess::Selection(s) => s.row_count() as u64,
            };
            if let Some(deletions) = part.deleted.as_ref().filter(|d| d.after_decoding(rg)) {
                rows -= deletions.deleted_in_access(rg, &access, group_rows);
            }
            // Every row it reads deleted (kept in the plan, to be dropped): nothing to read.
            if rows == 0 {
                return None;
            }
            let mut single = ParquetAccessPlan::new_none(groups);
            single.set(rg, access);
            Some(ScanUnit {
                part: part.clone(),
                plan: single,
                rows,
            })
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
