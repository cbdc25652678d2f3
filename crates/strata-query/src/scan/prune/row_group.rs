//! Row-group pruning: the row groups of one part as pruning containers, with min/max and null
//! counts from its Parquet footer (read through `StatisticsConverter`, already cached with the
//! footer).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::Schema;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::ParquetMetaData;
use strata_format::PartEntry;

use crate::paths::PathColumn;

use super::{ColumnSource, ScanPredicate, cast_to_mode, column_source, keep};

pub(in crate::scan) struct RowGroupStatistics<'a> {
    pub(in crate::scan) entry: &'a PartEntry,
    pub(in crate::scan) parquet: &'a ParquetMetaData,
    /// The Arrow schema the part is read with (strings as `Utf8View`).
    pub(in crate::scan) schema: &'a Schema,
    pub(in crate::scan) predicate: &'a ScanPredicate,
}

impl<'a> RowGroupStatistics<'a> {
    fn source(&self, column: &Column) -> Option<(&'a PathColumn, ColumnSource<'a>)> {
        let virtual_column = self.predicate.column(column.name())?;
        Some((virtual_column, column_source(self.entry, virtual_column)))
    }

    /// The converter of the physical column whose statistics describe `column`.
    fn converter(&self, column: &Column) -> Option<(&'a PathColumn, StatisticsConverter<'a>)> {
        let (virtual_column, ColumnSource::Physical(name)) = self.source(column)? else {
            return None;
        };
        let converter = StatisticsConverter::try_new(
            name,
            self.schema,
            self.parquet.file_metadata().schema_descr(),
        )
        .ok()?;
        Some((virtual_column, converter))
    }
}

impl PruningStatistics for RowGroupStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        let (virtual_column, converter) = self.converter(column)?;
        let mins = converter.row_group_mins(self.parquet.row_groups()).ok()?;
        cast_to_mode(mins, virtual_column.mode)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        let (virtual_column, converter) = self.converter(column)?;
        let maxes = converter.row_group_maxes(self.parquet.row_groups()).ok()?;
        cast_to_mode(maxes, virtual_column.mode)
    }

    fn num_containers(&self) -> usize {
        self.parquet.num_row_groups()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        match self.source(column)?.1 {
            ColumnSource::AllNull => self.row_counts(),
            ColumnSource::Physical(_) => {
                let (_, converter) = self.converter(column)?;
                let counts = converter
                    .row_group_null_counts(self.parquet.row_groups())
                    .ok()?;
                Some(Arc::new(counts))
            }
            ColumnSource::Unknown => None,
        }
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter_values(
            self.parquet
                .row_groups()
                .iter()
                .map(|rg| rg.num_rows() as u64),
        )))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// Which row groups of the part may hold rows satisfying the predicate.
pub(in crate::scan) fn row_groups_to_scan(statistics: &RowGroupStatistics<'_>) -> Vec<bool> {
    match statistics.predicate.whole() {
        Some(whole) => keep(whole, statistics),
        None => vec![true; statistics.parquet.num_row_groups()],
    }
}
