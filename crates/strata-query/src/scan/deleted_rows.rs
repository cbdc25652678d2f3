//! Deleted rows found batch by batch, for scans that read them and take them back afterwards.
//!
//! Deletion vectors are normally applied as row selections (`access_plan::skip_deleted`). When
//! thousands of scattered rows are deleted (10 % of a table's documents replaced), the selection
//! alternates between reading and skipping a few rows thousands of times, and the reader's cost
//! per switch outweighs the rows: JSONBench Q1's grouped count by dictionary key took 4.6 × its
//! time on the same table without deletions. A grouped count instead reads every row of its unit
//! as planned before deletions and, for each batch, subtracts the keys of the rows this module
//! reports deleted (`GroupCounter::remove_dictionary_rows`).
//!
//! Invariant: batches arrive in the order the plan reads rows — row groups ascending, each row
//! group's selected rows ascending — which is how `read::open_unit` reads a unit.

use std::ops::Range;

use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::file::metadata::ParquetMetaData;
use strata_format::DeletionVector;

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
        vector: &DeletionVector,
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
        for position in vector.iter() {
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
        let mut deleted = DeletedRows::new(&plan, &parquet, &vector);
        assert!(deleted.any());
        // Reading order: 0..10, 22..25, 27..30 — 16 rows, in batches of 4, 8 and 4.
        assert_eq!(deleted.next_batch(4), vec![0, 3]);
        assert_eq!(deleted.next_batch(8), vec![5, 6]); // positions 9 and 22
        assert_eq!(deleted.next_batch(4), vec![3]); // position 29
        assert_eq!(deleted.next_batch(4), Vec::<usize>::new());
        let mut none = DeletionVector::new();
        none.insert(15);
        assert!(!DeletedRows::new(&plan, &parquet, &none).any());
    }
}
