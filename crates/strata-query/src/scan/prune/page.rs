//! Page (granule) pruning: rows of a row group whose pages' statistics in the column index may
//! satisfy the filters.

use std::ops::Range;

use parquet::file::page_index::column_index::ColumnIndexMetaData;
use strata_format::PartEntry;

use super::{Bound, Predicate, range_may_match, remainder_feeds};

/// Min and max of page `page` from a column index, as bounds.
fn page_bounds(index: &ColumnIndexMetaData, page: usize) -> Option<(Bound, Bound)> {
    match index {
        ColumnIndexMetaData::BYTE_ARRAY(i) => {
            let min = std::str::from_utf8(i.min_value(page)?).ok()?;
            let max = std::str::from_utf8(i.max_value(page)?).ok()?;
            Some((Bound::Str(min.to_owned()), Bound::Str(max.to_owned())))
        }
        ColumnIndexMetaData::INT64(i) => Some((
            Bound::Int(*i.min_value(page)?),
            Bound::Int(*i.max_value(page)?),
        )),
        ColumnIndexMetaData::DOUBLE(i) => Some((
            Bound::Float(*i.min_value(page)?),
            Bound::Float(*i.max_value(page)?),
        )),
        ColumnIndexMetaData::BOOLEAN(i) => Some((
            Bound::Bool(*i.min_value(page)?),
            Bound::Bool(*i.max_value(page)?),
        )),
        _ => None,
    }
}

/// Row ranges of row group `rg` whose pages (granules) may match every predicate; None when no
/// predicate can use the page index.
pub(in crate::scan) fn page_selection(
    entry: &PartEntry,
    parquet: &parquet::file::metadata::ParquetMetaData,
    rg: usize,
    predicates: &[Predicate],
) -> Option<Vec<Range<usize>>> {
    let (Some(column_index), Some(offset_index)) = (parquet.column_index(), parquet.offset_index())
    else {
        return None;
    };
    let group = parquet.row_group(rg);
    let rows = group.num_rows() as usize;
    let mut selected: Option<Vec<Range<usize>>> = None;
    for predicate in predicates {
        let column = predicate.column();
        if remainder_feeds(entry, &column.path, column.mode) {
            continue;
        }
        let Some(ci) = group.columns().iter().position(|c| {
            c.column_path().parts().len() == 1 && c.column_path().parts()[0] == column.path
        }) else {
            continue;
        };
        let (Some(index), Some(offsets)) = (
            column_index.get(rg).and_then(|c| c.get(ci)),
            offset_index.get(rg).and_then(|c| c.get(ci)),
        ) else {
            continue;
        };
        let pages = offsets.page_locations();
        let mut ranges: Vec<Range<usize>> = Vec::new();
        for (page, location) in pages.iter().enumerate() {
            let start = location.first_row_index as usize;
            let end = pages
                .get(page + 1)
                .map_or(rows, |next| next.first_row_index as usize);
            let keep = if index.is_null_page(page) {
                false
            } else {
                match page_bounds(index, page) {
                    Some((min, max)) => range_may_match(predicate, &min, &max),
                    None => true,
                }
            };
            if keep {
                match ranges.last_mut() {
                    Some(last) if last.end == start => last.end = end,
                    _ => ranges.push(start..end),
                }
            }
        }
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
