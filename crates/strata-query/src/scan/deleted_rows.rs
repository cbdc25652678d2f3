//! Deleted rows of a part as the scan applies them: skipped by the access plan, or read and
//! dropped from each decoded batch.
//!
//! [`PartDeletions`] is a part's deletion vector turned into what planning needs: per row group
//! the selection of its kept rows, the deleted positions in order, and how the row group's
//! deletions are applied. Building it costs a walk over every deleted row, so it is built once
//! per vector and kept in the session's part metadata cache (with 110,000 deleted rows it was a
//! third of planning JSONBench Q1).
//!
//! Where a row group's deleted rows are few and far between, its access plan skips them
//! (`access_plan::skip_deleted`). Where they are scattered — 10 % of a table's documents
//! replaced leave a deleted row every few dozen — a selection around each would alternate
//! between reading and skipping a few rows thousands of times: copying it into every plan,
//! partition and reader, and parquet's building of ranges and masks from its selectors, cost more
//! than the rows. Such a row group is planned *with* its deleted rows, counted out of the plan's
//! row counts and statistics, and its reads drop them from each decoded batch ([`DeletedRows`],
//! [`without_rows`]); a grouped count by dictionary key subtracts their keys instead
//! (`GroupCounter::remove_dictionary_rows`). A read whose filter runs in the decoder narrows
//! the plan first ([`deleted_rows_to_drop`]): the rows such a filter keeps are no longer the
//! plan's rows in order.
//!
//! Invariants: a unit's `rows`, the rows counted from statistics and the exactness of its
//! column statistics account for the deleted rows its plan still reads
//! ([`PartDeletions::after_decoding`]); batches arrive in the order the plan reads rows — row
//! groups ascending, each row group's selected rows ascending — which is how `read::open_unit`
//! reads a unit.

use std::ops::Range;

use arrow::array::{BooleanArray, BooleanBufferBuilder, RecordBatch};
use datafusion::common::Result;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::arrow::arrow_reader::RowSelection;
use parquet::file::metadata::ParquetMetaData;
use strata_format::DeletionVector;

use super::access_plan::{ScanUnit, keep_selected, selected_ranges};
use super::read::MASK_BELOW_AVERAGE_RUN;

/// Prepares `unit` for a read: the deleted rows its plan reads, to drop after decoding (`None`
/// when it reads none); or, when the read's filter runs in the decoder (`decoder_filter`), whose
/// kept rows are no longer the plan's rows in order, the plan narrowed to the live rows of those
/// row groups, and `None`.
pub(super) fn deleted_rows_to_drop(
    unit: &mut ScanUnit,
    decoder_filter: bool,
) -> Option<DeletedRows> {
    let deletions = unit.part.deleted.clone()?;
    let pending: Vec<usize> = unit
        .plan
        .row_group_indexes()
        .into_iter()
        .filter(|&rg| deletions.after_decoding(rg))
        .collect();
    if pending.is_empty() {
        return None;
    }
    if decoder_filter {
        let parquet = unit.part.metadata.metadata().clone();
        for rg in pending {
            if let Some(Some(kept)) = deletions.kept.get(rg) {
                let group_rows = parquet.row_group(rg).num_rows().max(0) as usize;
                keep_selected(&mut unit.plan, rg, kept, group_rows);
            }
        }
        return None;
    }
    let rows = DeletedRows::new(&unit.plan, unit.part.metadata.metadata(), &deletions);
    rows.any().then_some(rows)
}

/// `batch` without the rows at `rows` (ascending indexes).
pub(super) fn without_rows(batch: &RecordBatch, rows: &[usize]) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(batch.clone());
    }
    let mut keep = BooleanBufferBuilder::new(batch.num_rows());
    keep.append_n(batch.num_rows(), true);
    for &row in rows {
        if row < batch.num_rows() {
            keep.set_bit(row, false);
        }
    }
    let keep = BooleanArray::new(keep.finish(), None);
    Ok(arrow::compute::filter_record_batch(batch, &keep)?)
}

/// A part's deleted rows, as planning applies them (see the module docs).
#[derive(Debug)]
pub(super) struct PartDeletions {
    /// Per row group, the selection of its rows that are not deleted; None when none is.
    pub(super) kept: Vec<Option<RowSelection>>,
    /// Per row group, whether its deleted rows are read and dropped after decoding rather than
    /// skipped by the plan.
    after_decoding: Vec<bool>,
    /// Per row group, the part position of its first row.
    group_starts: Vec<u64>,
    /// Deleted part positions, ascending.
    positions: Vec<u64>,
}

impl PartDeletions {
    pub(super) fn new(vector: &DeletionVector, parquet: &ParquetMetaData) -> Self {
        let positions: Vec<u64> = vector.iter().collect();
        let groups = parquet.num_row_groups();
        let (mut kept, mut after_decoding) = (Vec::with_capacity(groups), vec![false; groups]);
        let mut group_starts = Vec::with_capacity(groups);
        let mut group_start = 0u64;
        for (index, group) in parquet.row_groups().iter().enumerate() {
            group_starts.push(group_start);
            let group_rows = group.num_rows().max(0) as u64;
            let group_end = group_start + group_rows;
            let first = positions.partition_point(|&p| p < group_start);
            let last = positions.partition_point(|&p| p < group_end);
            let deleted = &positions[first..last];
            if deleted.is_empty() {
                kept.push(None);
                group_start = group_end;
                continue;
            }
            let mut ranges = Vec::with_capacity(deleted.len() + 1);
            let mut next = 0usize;
            for &position in deleted {
                let local = (position - group_start) as usize;
                if local > next {
                    ranges.push(next..local);
                }
                next = local + 1;
            }
            if next < group_rows as usize {
                ranges.push(next..group_rows as usize);
            }
            // Runs of kept and of deleted rows averaging fewer rows than parquet reads run by
            // run (a row group wholly deleted is skipped instead).
            let runs = 2 * ranges.len() as u64;
            after_decoding[index] =
                !ranges.is_empty() && group_rows / runs < MASK_BELOW_AVERAGE_RUN as u64;
            kept.push(Some(RowSelection::from_consecutive_ranges(
                ranges.into_iter(),
                group_rows as usize,
            )));
            group_start = group_end;
        }
        PartDeletions {
            kept,
            after_decoding,
            group_starts,
            positions,
        }
    }

    /// Whether row group `rg`'s deleted rows stay in the plan, to be dropped after decoding.
    pub(super) fn after_decoding(&self, rg: usize) -> bool {
        self.after_decoding.get(rg).copied().unwrap_or(false)
    }

    /// How many of the rows `ranges` of row group `rg` (row numbers within it) are deleted.
    pub(super) fn deleted_in(&self, rg: usize, ranges: &[Range<usize>]) -> u64 {
        let Some(&start) = self.group_starts.get(rg) else {
            return 0;
        };
        ranges
            .iter()
            .map(|range| {
                let (from, to) = (start + range.start as u64, start + range.end as u64);
                (self.positions.partition_point(|&p| p < to)
                    - self.positions.partition_point(|&p| p < from)) as u64
            })
            .sum()
    }

    /// How many of the rows `access` reads of row group `rg` (of `rows` rows) are deleted.
    pub(super) fn deleted_in_access(&self, rg: usize, access: &RowGroupAccess, rows: usize) -> u64 {
        self.deleted_in(rg, &selected_ranges(access, rows))
    }

    /// Bytes this keeps in memory, as the metadata cache counts them.
    pub(super) fn size(&self) -> usize {
        let selectors: usize = self.kept.iter().flatten().map(|s| s.iter().count()).sum();
        (self.positions.len() + self.group_starts.len()) * 8 + selectors * 16
    }
}

/// The deleted rows among those a plan reads, in reading order.
pub(super) struct DeletedRows {
    /// Part positions the plan reads, in reading order.
    ranges: Vec<Range<u64>>,
    /// Index into `ranges` of the next row, and that row's offset into its range.
    range: usize,
    offset: u64,
    /// Deleted part positions inside `ranges`, ascending, and the first not yet reported.
    deleted: Vec<u64>,
    next: usize,
}

impl DeletedRows {
    pub(super) fn new(
        plan: &ParquetAccessPlan,
        parquet: &ParquetMetaData,
        deletions: &PartDeletions,
    ) -> Self {
        let mut ranges = Vec::new();
        let mut group_start = 0u64;
        for (access, group) in plan.inner().iter().zip(parquet.row_groups()) {
            let group_rows = group.num_rows().max(0) as u64;
            match access {
                RowGroupAccess::Skip => {}
                RowGroupAccess::Scan => ranges.push(group_start..group_start + group_rows),
                RowGroupAccess::Selection(selection) => {
                    let mut row = group_start;
                    for selector in selection.iter() {
                        let count = selector.row_count as u64;
                        if !selector.skip {
                            ranges.push(row..row + count);
                        }
                        row += count;
                    }
                }
            }
            group_start += group_rows;
        }
        let mut deleted = Vec::new();
        let mut read = ranges.iter().peekable();
        let first = ranges.first().map_or(0, |r| r.start);
        let from = deletions.positions.partition_point(|&p| p < first);
        for &position in &deletions.positions[from..] {
            while read.next_if(|r| r.end <= position).is_some() {}
            let Some(range) = read.peek() else {
                break;
            };
            if range.contains(&position) {
                deleted.push(position);
            }
        }
        DeletedRows {
            ranges,
            range: 0,
            offset: 0,
            deleted,
            next: 0,
        }
    }

    /// Whether any row the plan reads is deleted.
    pub(super) fn any(&self) -> bool {
        !self.deleted.is_empty()
    }

    /// The next batch of the plan's rows without its deleted rows.
    pub(super) fn drop_from(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let deleted = self.next_batch(batch.num_rows());
        without_rows(batch, &deleted)
    }

    /// The indexes, within the next batch of `rows` rows, of its deleted rows (ascending).
    pub(super) fn next_batch(&mut self, rows: usize) -> Vec<usize> {
        let mut found = Vec::new();
        let mut done = 0usize;
        while done < rows {
            let Some(range) = self.ranges.get(self.range) else {
                break;
            };
            let start = range.start + self.offset;
            let take = (range.end - start).min((rows - done) as u64);
            let end = start + take;
            while self.deleted.get(self.next).is_some_and(|&p| p < start) {
                self.next += 1;
            }
            while let Some(&position) = self.deleted.get(self.next)
                && position < end
            {
                found.push(done + (position - start) as usize);
                self.next += 1;
            }
            done += take as usize;
            if end == range.end {
                self.range += 1;
                self.offset = 0;
            } else {
                self.offset += take;
            }
        }
        found
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// Metadata of a Parquet file of 30 rows in row groups of 10.
    fn metadata() -> Arc<ParquetMetaData> {
        let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..30));
        let batch = RecordBatch::try_from_iter([("n", column)]).unwrap();
        let file = tempfile::tempfile().unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(10))
            .build();
        let mut writer =
            ArrowWriter::try_new(file.try_clone().unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        Arc::new(reader.metadata().clone())
    }

    #[test]
    fn deleted_rows_are_found_at_their_place_in_each_batch() {
        let parquet = metadata();
        let mut plan = ParquetAccessPlan::new_all(3);
        plan.skip(1);
        // Row group 2 reads rows 22..25 and 27..30 (positions of the part).
        plan.set(
            2,
            RowGroupAccess::Selection(RowSelection::from(vec![
                RowSelector::skip(2),
                RowSelector::select(3),
                RowSelector::skip(2),
                RowSelector::select(3),
            ])),
        );
        let mut vector = DeletionVector::new();
        for position in [0, 3, 9, 12, 21, 22, 26, 29] {
            vector.insert(position);
        }
        let deletions = PartDeletions::new(&vector, &parquet);
        let kept = |d: &PartDeletions| -> Vec<Option<usize>> {
            d.kept
                .iter()
                .map(|s| s.as_ref().map(|s| s.row_count()))
                .collect()
        };
        assert_eq!(kept(&deletions), vec![Some(7), Some(9), Some(6)]);
        let mut deleted = DeletedRows::new(&plan, &parquet, &deletions);
        assert!(deleted.any());
        // Reading order: 0..10, 22..25, 27..30 — 16 rows, in batches of 4, 8 and 4.
        assert_eq!(deleted.next_batch(4), vec![0, 3]);
        assert_eq!(deleted.next_batch(8), vec![5, 6]); // positions 9 and 22
        assert_eq!(deleted.next_batch(4), vec![3]); // position 29
        assert_eq!(deleted.next_batch(4), Vec::<usize>::new());
        let mut none = DeletionVector::new();
        none.insert(15);
        let none = PartDeletions::new(&none, &parquet);
        assert_eq!(kept(&none), vec![None, Some(9), None]);
        assert!(!DeletedRows::new(&plan, &parquet, &none).any());
    }
}
