//! Deleted rows of a part as the scan applies them, and found batch by batch for scans that
//! read them and take them back afterwards.
//!
//! [`PartDeletions`] is a part's deletion vector turned into what planning needs: per row group
//! the selection of its kept rows, and the deleted positions in order. Building it costs a walk
//! over every deleted row, so it is built once per vector and kept in the session's part
//! metadata cache (with 110,000 deleted rows it was a third of planning JSONBench Q1).
//!
//! Deletion vectors are applied as row selections at planning (`access_plan::skip_deleted`), so
//! that row counts and statistics are exact. When thousands of scattered rows are deleted (10 %
//! of a table's documents replaced), such a selection alternates between reading and skipping a
//! few rows thousands of times, and the reader's cost per switch (parquet builds ranges and masks
//! from every selector of every row group it opens) outweighs the rows. Such a unit is read as
//! planned before deletions instead, and the rows [`DeletedRows`] reports deleted are dropped
//! from each decoded batch ([`read_deleted_after_decoding`]); a grouped count by dictionary key
//! subtracts their keys instead (`GroupCounter::remove_dictionary_rows`).
//!
//! Invariant: batches arrive in the order the plan reads rows — row groups ascending, each row
//! group's selected rows ascending — which is how `read::open_unit` reads a unit.

use std::ops::Range;

use arrow::array::{BooleanArray, BooleanBufferBuilder, RecordBatch};
use datafusion::common::Result;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::arrow::arrow_reader::RowSelection;
use parquet::file::metadata::ParquetMetaData;
use strata_format::DeletionVector;

use super::access_plan::ScanUnit;
use super::read::MASK_BELOW_AVERAGE_RUN;

/// How a unit with deleted rows among those it reads before deletions is to be read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum DeletedRowsRead {
    /// Read before deletions whenever it has deleted rows, dropping them after decoding.
    Always,
    /// Only when they are scattered: runs between them average fewer than
    /// [`MASK_BELOW_AVERAGE_RUN`] rows, where parquet would decode whole pages and filter them by
    /// a mask anyway. Longer runs are skipped by the planned selection without being decoded.
    WhenScattered,
}

/// Switches `unit` to its plan before deletions when `when` says so, and returns the deleted rows
/// its batches then hold, to drop after decoding (`without_rows`). `None`: the unit reads as
/// planned (no deleted rows among them, or a selection that skips them).
pub(super) fn read_deleted_after_decoding(
    unit: &mut ScanUnit,
    when: DeletedRowsRead,
) -> Option<DeletedRows> {
    let (undeleted, deletions) = (unit.undeleted.as_ref()?, unit.part.deleted.as_ref()?);
    let rows = DeletedRows::new(undeleted, unit.part.metadata.metadata(), deletions);
    if !rows.any() {
        return None;
    }
    let runs = 2 * rows.deleted.len() as u64 + 1;
    if when == DeletedRowsRead::WhenScattered
        && rows.rows_read() / runs >= MASK_BELOW_AVERAGE_RUN as u64
    {
        return None;
    }
    unit.plan = unit.undeleted.take()?;
    Some(rows)
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
    /// Deleted part positions, ascending.
    positions: Vec<u64>,
}

impl PartDeletions {
    pub(super) fn new(vector: &DeletionVector, parquet: &ParquetMetaData) -> Self {
        let positions: Vec<u64> = vector.iter().collect();
        let mut kept = Vec::with_capacity(parquet.num_row_groups());
        let mut group_start = 0u64;
        for group in parquet.row_groups() {
            let group_rows = group.num_rows().max(0) as u64;
            let group_end = group_start + group_rows;
            let first = positions.partition_point(|&p| p < group_start);
            let last = positions.partition_point(|&p| p < group_end);
            let deleted = &positions[first..last];
            kept.push((!deleted.is_empty()).then(|| {
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
                RowSelection::from_consecutive_ranges(ranges.into_iter(), group_rows as usize)
            }));
            group_start = group_end;
        }
        PartDeletions { kept, positions }
    }

    /// Bytes this keeps in memory, as the metadata cache counts them.
    pub(super) fn size(&self) -> usize {
        let selectors: usize = self.kept.iter().flatten().map(|s| s.iter().count()).sum();
        self.positions.len() * 8 + selectors * 16
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

    /// Rows the plan reads, deleted or not.
    fn rows_read(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
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
