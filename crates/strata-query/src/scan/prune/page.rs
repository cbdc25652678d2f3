//! Page (granule) pruning: the data pages of one column as pruning containers, from the page
//! index (column index and offset index) of the cached footer.
//!
//! Pages of different columns start at different rows, so, as DataFusion's own page filter
//! does, each single-column conjunct is evaluated over its column's pages and the row ranges
//! of the pages kept are intersected across conjuncts.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{Schema, UInt64Type};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_optimizer::pruning::PruningPredicate;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::ParquetMetaData;
use strata_format::PartEntry;

use crate::paths::PathColumn;

use super::{ColumnSource, ScanPredicate, cast_to_mode, column_source, keep};

/// The pages of one physical column in one row group.
struct PageStatistics<'a> {
    column: &'a PathColumn,
    converter: StatisticsConverter<'a>,
    parquet: &'a ParquetMetaData,
    row_group: [usize; 1],
    pages: usize,
}

impl PageStatistics<'_> {
    fn applies(&self, column: &Column) -> bool {
        column.name() == self.column.column_name()
    }
}

impl PruningStatistics for PageStatistics<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        if !self.applies(column) {
            return None;
        }
        let mins = self
            .converter
            .data_page_mins(
                self.parquet.column_index()?,
                self.parquet.offset_index()?,
                &self.row_group,
            )
            .ok()?;
        cast_to_mode(mins, self.column.mode)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        if !self.applies(column) {
            return None;
        }
        let maxes = self
            .converter
            .data_page_maxes(
                self.parquet.column_index()?,
                self.parquet.offset_index()?,
                &self.row_group,
            )
            .ok()?;
        cast_to_mode(maxes, self.column.mode)
    }

    fn num_containers(&self) -> usize {
        self.pages
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        if !self.applies(column) {
            return None;
        }
        let counts = self
            .converter
            .data_page_null_counts(
                self.parquet.column_index()?,
                self.parquet.offset_index()?,
                &self.row_group,
            )
            .ok()?;
        Some(Arc::new(counts))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        let counts = self
            .converter
            .data_page_row_counts(
                self.parquet.offset_index()?,
                self.parquet.row_groups(),
                &self.row_group,
            )
            .ok()??;
        Some(Arc::new(counts))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// One data page judged by a pruning predicate: its rows, whether the predicate may hold
/// there, and its NULL count (None when unknown).
struct JudgedPage {
    rows: Range<usize>,
    may_hold: bool,
    nulls: Option<u64>,
}

/// The page statistics of `column` in row group `rg` and each page's rows; None when the part
/// has no page index or the column's values are not its physical column's (`column_source`),
/// so that the statistics would not bound them.
fn column_pages<'a>(
    entry: &'a PartEntry,
    parquet: &'a ParquetMetaData,
    schema: &'a Schema,
    rg: usize,
    column: &'a PathColumn,
) -> Option<(PageStatistics<'a>, Vec<Range<usize>>)> {
    let ColumnSource::Physical(name) = column_source(entry, column) else {
        return None;
    };
    let offsets = parquet.offset_index()?.get(rg)?;
    let converter =
        StatisticsConverter::try_new(name, schema, parquet.file_metadata().schema_descr()).ok()?;
    let locations = offsets
        .get(converter.parquet_column_index()?)?
        .page_locations();
    let rows = parquet.row_group(rg).num_rows().max(0) as usize;
    let ranges = (0..locations.len())
        .map(|page| {
            let start = locations[page].first_row_index as usize;
            let end = locations
                .get(page + 1)
                .map_or(rows, |next| next.first_row_index as usize);
            start..end
        })
        .collect();
    let statistics = PageStatistics {
        column,
        converter,
        parquet,
        row_group: [rg],
        pages: locations.len(),
    };
    Some((statistics, ranges))
}

/// Each page's NULL count of `statistics` (None where unknown).
fn page_nulls(statistics: &PageStatistics) -> Vec<Option<u64>> {
    let nulls = statistics
        .null_counts(&Column::new_unqualified(statistics.column.column_name()))
        .and_then(|a| a.as_primitive_opt::<UInt64Type>().cloned());
    (0..statistics.pages)
        .map(|page| {
            nulls
                .as_ref()
                .filter(|n| n.len() > page && n.is_valid(page))
                .map(|n| n.value(page))
        })
        .collect()
}

/// The pages of `column` in row group `rg`, judged by `predicate`; None when the column's pages
/// say nothing.
fn pages_judged(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    schema: &Schema,
    rg: usize,
    column: &PathColumn,
    predicate: &PruningPredicate,
) -> Option<Vec<JudgedPage>> {
    let (statistics, ranges) = column_pages(entry, parquet, schema, rg, column)?;
    let nulls = page_nulls(&statistics);
    let judged = keep(predicate, &statistics)
        .into_iter()
        .zip(ranges)
        .zip(nulls)
        .map(|((kept, rows), nulls)| JudgedPage {
            rows,
            may_hold: kept,
            nulls,
        })
        .collect();
    Some(judged)
}

/// One data page of a column: its rows in the row group, its least and greatest value in the
/// column's mode (None when unknown or when every value is NULL) and its NULL count (None when
/// unknown).
pub(in crate::scan) struct PageBounds {
    pub(in crate::scan) rows: Range<usize>,
    pub(in crate::scan) min: Option<ScalarValue>,
    pub(in crate::scan) max: Option<ScalarValue>,
    pub(in crate::scan) nulls: Option<u64>,
}

/// The pages of `column` in row group `rg` with their bounds, from the page index; None when
/// the page index says nothing of the column (`column_pages`).
pub(in crate::scan) fn page_bounds(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    schema: &Schema,
    rg: usize,
    column: &PathColumn,
) -> Option<Vec<PageBounds>> {
    let (statistics, ranges) = column_pages(entry, parquet, schema, rg, column)?;
    let name = Column::new_unqualified(column.column_name());
    let mins = statistics.min_values(&name)?;
    let maxes = statistics.max_values(&name)?;
    let value = |values: &ArrayRef, page: usize| {
        (page < values.len() && values.is_valid(page))
            .then(|| ScalarValue::try_from_array(values, page).ok())
            .flatten()
    };
    let pages = ranges
        .into_iter()
        .zip(page_nulls(&statistics))
        .enumerate()
        .map(|(page, (rows, nulls))| PageBounds {
            rows,
            min: value(&mins, page),
            max: value(&maxes, page),
            nulls,
        })
        .collect();
    Some(pages)
}

/// Consecutive ranges merged.
fn merged(ranges: impl Iterator<Item = Range<usize>>) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for range in ranges {
        match out.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => out.push(range),
        }
    }
    out
}

/// Row ranges of row group `rg` whose pages may satisfy one conjunct; None when the column's
/// pages say nothing about it.
fn conjunct_selection(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    schema: &Schema,
    rg: usize,
    column: &PathColumn,
    predicate: &PruningPredicate,
) -> Option<Vec<Range<usize>>> {
    let pages = pages_judged(entry, parquet, schema, rg, column, predicate)?;
    Some(merged(
        pages
            .into_iter()
            .filter(|page| page.may_hold)
            .map(|page| page.rows),
    ))
}

/// Row ranges of row group `rg` whose pages `negation` rules out and that hold no NULL of
/// `column`: every row there satisfies the filter `negation` negates (`scan::count`).
pub(in crate::scan) fn covered_pages(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    schema: &Schema,
    rg: usize,
    column: &PathColumn,
    negation: &PruningPredicate,
) -> Vec<Range<usize>> {
    let pages = pages_judged(entry, parquet, schema, rg, column, negation).unwrap_or_default();
    merged(
        pages
            .into_iter()
            .filter(|page| !page.may_hold && page.nulls == Some(0))
            .map(|page| page.rows),
    )
}

/// Row ranges of row group `rg` whose pages (granules) may match every single-column conjunct;
/// None when no conjunct can use the page index.
pub(in crate::scan) fn page_selection(
    entry: &PartEntry,
    parquet: &ParquetMetaData,
    schema: &Schema,
    rg: usize,
    predicate: &ScanPredicate,
) -> Option<Vec<Range<usize>>> {
    let mut selected: Option<Vec<Range<usize>>> = None;
    for conjunct in predicate.single_column() {
        let column = &conjunct.column;
        // Keyword postings will narrow the part to the lookup's rows: its pages need no judging.
        if conjunct.lookup && super::text_index::postings_answer(entry, column) {
            continue;
        }
        let predicate = &conjunct.predicate;
        let Some(ranges) = conjunct_selection(entry, parquet, schema, rg, column, predicate) else {
            continue;
        };
        selected = Some(match selected {
            None => ranges,
            Some(previous) => intersect(&previous, &ranges),
        });
    }
    selected
}

pub(in crate::scan) fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].start.max(b[j].start);
        let end = a[i].end.min(b[j].end);
        if start < end {
            out.push(start..end);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}
