//! Part pruning: the manifest's parts as pruning containers.
//!
//! Per part and virtual column the manifest gives row counts, "every value is NULL" (no stored
//! kind feeds the column's mode), and min/max from the sort-key min/max where the column's
//! values are exactly a typed column's (see `ColumnSource`).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use strata_format::PartEntry;

use super::{
    ColumnSource, ScanPredicate, column_source, counts_to_array, keep, scalar_from_json,
    scalars_to_array,
};

/// The parts of a manifest, one container each.
pub(in crate::scan) struct PartStatistics<'a> {
    pub(in crate::scan) parts: &'a [Arc<PartEntry>],
    pub(in crate::scan) predicate: &'a ScanPredicate,
}

impl PartStatistics<'_> {
    fn bound(
        &self,
        column: &Column,
        pick: impl Fn(&PartEntry) -> Option<&serde_json::Value>,
    ) -> Option<ArrayRef> {
        let virtual_column = self.predicate.column(column.name())?;
        let values = self
            .parts
            .iter()
            .map(|entry| match column_source(entry, virtual_column) {
                ColumnSource::Physical(_) => {
                    pick(entry).and_then(|v| scalar_from_json(v, virtual_column.mode))
                }
                ColumnSource::AllNull | ColumnSource::Unknown => None,
            })
            .collect();
        scalars_to_array(values, virtual_column.mode)
    }
}

impl PruningStatistics for PartStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        let path = &self.predicate.column(column.name())?.path;
        self.bound(column, |entry| entry.sort_key_min.get(path))
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        let path = &self.predicate.column(column.name())?.path;
        self.bound(column, |entry| entry.sort_key_max.get(path))
    }

    fn num_containers(&self) -> usize {
        self.parts.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let virtual_column = self.predicate.column(column.name())?;
        counts_to_array(
            self.parts
                .iter()
                .map(|entry| match column_source(entry, virtual_column) {
                    ColumnSource::AllNull => Some(entry.rows),
                    ColumnSource::Physical(_) | ColumnSource::Unknown => None,
                })
                .collect(),
        )
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter_values(
            self.parts.iter().map(|p| p.rows),
        )))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// Which parts of `parts` may hold rows satisfying the predicate.
pub(in crate::scan) fn parts_to_scan(
    parts: &[Arc<PartEntry>],
    predicate: &ScanPredicate,
) -> Vec<bool> {
    match predicate.whole() {
        Some(whole) => keep(whole, &PartStatistics { parts, predicate }),
        None => vec![true; parts.len()],
    }
}
