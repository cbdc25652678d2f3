//! Key runs: the runs of a part (rows sharing the leading sort-key values) as pruning
//! containers. A run's value is exact for all its rows (min = max = the value; NULL count is
//! all or none), so the runs kept are exact row ranges of the part.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::DataType;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_expr::utils::collect_columns;
use strata_format::PartEntry;
use strata_format::manifest::KeyRuns;

use crate::paths::PathColumn;

use super::{ColumnSource, ScanPredicate, column_source, keep, scalar_from_json, scalars_to_array};

struct RunStatistics<'a> {
    entry: &'a PartEntry,
    runs: &'a KeyRuns,
    predicate: &'a ScanPredicate,
}

impl RunStatistics<'_> {
    /// The virtual column and its position in the runs' values, when the runs describe exactly
    /// its values (the runs are over the typed column).
    fn position(&self, column: &Column) -> Option<(&PathColumn, usize)> {
        let virtual_column = self.predicate.column(column.name())?;
        let position = self
            .runs
            .paths
            .iter()
            .position(|p| *p == virtual_column.path)?;
        matches!(
            column_source(self.entry, virtual_column),
            ColumnSource::Physical(_)
        )
        .then_some((virtual_column, position))
    }

    fn values(&self, column: &Column) -> Option<ArrayRef> {
        let (virtual_column, position) = self.position(column)?;
        let values = self
            .runs
            .runs
            .iter()
            .map(|run| {
                run.values
                    .get(position)
                    .and_then(|v| scalar_from_json(v, virtual_column.mode))
            })
            .collect();
        scalars_to_array(values, virtual_column.mode)
    }
}

impl PruningStatistics for RunStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column)
    }

    fn num_containers(&self) -> usize {
        self.runs.runs.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let (_, position) = self.position(column)?;
        Some(Arc::new(UInt64Array::from_iter(self.runs.runs.iter().map(
            |run| match run.values.get(position) {
                Some(serde_json::Value::Null) => Some(run.rows),
                Some(_) => Some(0),
                None => None,
            },
        ))))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter_values(
            self.runs.runs.iter().map(|r| r.rows),
        )))
    }

    /// Exact membership: a run's value is in the set or not (a NULL is in no set).
    fn contained(&self, column: &Column, values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        let (virtual_column, position) = self.position(column)?;
        let data_type = virtual_column.mode.data_type();
        // Only literals of the column's own type can be compared by equality of scalars, and
        // floats are left to min/max (scalar equality is not SQL's on them).
        if data_type == DataType::Float64
            || values
                .iter()
                .any(|v| v.data_type() != data_type || v.is_null())
        {
            return None;
        }
        Some(BooleanArray::from_iter(self.runs.runs.iter().map(|run| {
            let value = run.values.get(position)?;
            match value {
                serde_json::Value::Null => Some(false),
                _ => scalar_from_json(value, virtual_column.mode).map(|v| values.contains(&v)),
            }
        })))
    }
}

/// Rows of the part (ranges in part row numbers) in runs the predicate keeps; `None` when the
/// runs cannot narrow the scan (no runs, or no filtered column among their paths).
pub(in crate::scan) fn run_selection(
    entry: &PartEntry,
    predicate: &ScanPredicate,
) -> Option<Vec<Range<usize>>> {
    let runs = entry.key_runs.as_ref()?;
    let whole = predicate.whole()?;
    let statistics = RunStatistics {
        entry,
        runs,
        predicate,
    };
    let applicable = collect_columns(whole.orig_expr())
        .iter()
        .any(|c| statistics.position(&Column::from_name(c.name())).is_some());
    if !applicable {
        return None;
    }
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for (run, kept) in runs.runs.iter().zip(keep(whole, &statistics)) {
        if kept {
            let (start, end) = (run.start as usize, (run.start + run.rows) as usize);
            match ranges.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => ranges.push(start..end),
            }
        }
    }
    Some(ranges)
}
