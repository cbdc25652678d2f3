//! The scan's statistics for DataFusion's optimizer: row counts and, per column, null counts and
//! min/max.
//!
//! Row counts are exact: the access plans say exactly which rows the scan reads, and the scan
//! filters nothing itself (with a pushed-down limit it may stop early, so the count becomes an
//! upper bound). Column statistics come from the row-group statistics in the cached footers,
//! and only where [`column_source`] says they describe exactly the values the scan produces
//! (the rule pruning keeps too). A row group read whole gives exact null counts and, where
//! parquet marks them exact (not truncated), exact min/max; one read in part gives bounds only.
//! Exact statistics let DataFusion answer `count(*)`, `count(path)`, `min(path)` and `max(path)`
//! over whole parts without reading a data page (`AggregateStatistics`).

use arrow::array::{Array, ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use datafusion::datasource::physical_plan::parquet::RowGroupAccess;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;

use super::ScanOutput;
use super::access_plan::ScanUnit;
use super::prune::{ColumnSource, column_source};

/// Statistics of the rows `units` read, for the scan's `outputs` (in `schema` order).
pub(super) fn scan_statistics<'a>(
    units: impl Iterator<Item = &'a ScanUnit> + Clone,
    outputs: &[ScanOutput],
    schema: &SchemaRef,
    limit: Option<usize>,
) -> Statistics {
    let rows: usize = units.clone().map(|u| u.rows as usize).sum();
    let num_rows = match limit {
        Some(limit) => Precision::Inexact(rows.min(limit)),
        None => Precision::Exact(rows),
    };
    let column_statistics = outputs
        .iter()
        .zip(schema.fields())
        .map(|(output, field)| match output {
            ScanOutput::Document => ColumnStatistics::new_unknown(),
            ScanOutput::Path(column) => {
                let mut summary = ColumnSummary::new(field.data_type());
                for unit in units.clone() {
                    let source = column_source(&unit.part.entry, column);
                    if !summary.add_unit(unit, source) {
                        return ColumnStatistics::new_unknown();
                    }
                }
                summary.finish(limit.is_some())
            }
        })
        .collect();
    Statistics {
        num_rows,
        total_byte_size: Precision::Absent,
        column_statistics,
    }
}

/// One column's statistics, folded unit by unit.
struct ColumnSummary<'t> {
    data_type: &'t DataType,
    nulls: usize,
    nulls_exact: bool,
    min: Option<ScalarValue>,
    max: Option<ScalarValue>,
    bounds_exact: bool,
    /// Rows with a value that no min/max describes yet (an unknown min/max makes both absent).
    bounds_missing: bool,
}

impl<'t> ColumnSummary<'t> {
    fn new(data_type: &'t DataType) -> Self {
        ColumnSummary {
            data_type,
            nulls: 0,
            nulls_exact: true,
            min: None,
            max: None,
            bounds_exact: true,
            bounds_missing: false,
        }
    }

    /// Folds in the rows of one unit; false when the column's values there are not described
    /// by any statistics (then the column has none).
    fn add_unit(&mut self, unit: &ScanUnit, source: ColumnSource<'_>) -> bool {
        let name = match source {
            ColumnSource::AllNull => {
                self.nulls += unit.rows as usize;
                return true;
            }
            ColumnSource::Unknown => return false,
            ColumnSource::Physical(name) => name,
        };
        let metadata = &unit.part.metadata;
        let parquet = metadata.metadata();
        let Ok(converter) = StatisticsConverter::try_new(
            name,
            metadata.schema(),
            parquet.file_metadata().schema_descr(),
        ) else {
            return false;
        };
        let converter = converter.with_missing_null_counts_as_zero(false);
        for (index, access) in unit.plan.inner().iter().enumerate() {
            // A row group whose deleted rows the plan still reads (`deleted_rows`) is not read
            // whole: its footer's bounds may come from them.
            let deleted_read = unit
                .part
                .deleted
                .as_ref()
                .is_some_and(|d| d.after_decoding(index));
            let whole = match access {
                RowGroupAccess::Skip => continue,
                RowGroupAccess::Scan => !deleted_read,
                RowGroupAccess::Selection(_) => false,
            };
            let Some(group) = parquet.row_groups().get(index) else {
                return false;
            };
            let groups = std::iter::once(group);
            let (Ok(mins), Ok(maxes), Ok(nulls), Ok(min_exact), Ok(max_exact)) = (
                converter.row_group_mins(groups.clone()),
                converter.row_group_maxes(groups.clone()),
                converter.row_group_null_counts(groups.clone()),
                converter.row_group_is_min_value_exact(groups.clone()),
                converter.row_group_is_max_value_exact(groups),
            ) else {
                return false;
            };
            self.add_row_group(whole, group.num_rows() as usize, &mins, &maxes, &nulls);
            self.bounds_exact &= whole && all_true(&min_exact) && all_true(&max_exact);
        }
        true
    }

    fn add_row_group(
        &mut self,
        whole: bool,
        rows: usize,
        mins: &ArrayRef,
        maxes: &ArrayRef,
        nulls: &UInt64Array,
    ) {
        let null_count = (!nulls.is_null(0)).then(|| nulls.value(0) as usize);
        match null_count {
            Some(n) if whole => self.nulls += n,
            _ => self.nulls_exact = false,
        }
        if null_count == Some(rows) {
            return; // no value, so no bound to fold
        }
        match (self.scalar(mins), self.scalar(maxes)) {
            (Some(min), Some(max)) => {
                self.min = Some(match self.min.take() {
                    Some(current) if current <= min => current,
                    _ => min,
                });
                self.max = Some(match self.max.take() {
                    Some(current) if current >= max => current,
                    _ => max,
                });
            }
            _ => self.bounds_missing = true,
        }
    }

    /// The single value of a one-row statistics array, in the column's type.
    fn scalar(&self, array: &ArrayRef) -> Option<ScalarValue> {
        if array.is_null(0) {
            return None;
        }
        let array = match array.data_type() == self.data_type {
            true => array.clone(),
            false => arrow::compute::cast(array, self.data_type).ok()?,
        };
        ScalarValue::try_from_array(&array, 0).ok()
    }

    fn finish(self, limited: bool) -> ColumnStatistics {
        let exact = |exact: bool| !limited && exact;
        let null_count = match exact(self.nulls_exact) {
            true => Precision::Exact(self.nulls),
            false => Precision::Absent,
        };
        let bound = |value: Option<ScalarValue>| match value {
            Some(_) if self.bounds_missing => Precision::Absent,
            Some(v) if exact(self.bounds_exact) => Precision::Exact(v),
            Some(v) => Precision::Inexact(v),
            None => Precision::Absent,
        };
        ColumnStatistics {
            null_count,
            min_value: bound(self.min.clone()),
            max_value: bound(self.max.clone()),
            ..ColumnStatistics::new_unknown()
        }
    }
}

fn all_true(flags: &BooleanArray) -> bool {
    flags.null_count() == 0 && flags.true_count() == flags.len()
}
