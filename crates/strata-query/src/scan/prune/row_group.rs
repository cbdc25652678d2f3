//! Row-group pruning from the min/max and null counts of the Parquet footer.

use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;
use strata_format::PartEntry;

use super::{Bound, Predicate, range_may_match, remainder_feeds};

pub(in crate::scan) fn row_group_may_match(
    entry: &PartEntry,
    rg: &RowGroupMetaData,
    predicate: &Predicate,
) -> bool {
    let column = predicate.column();
    if remainder_feeds(entry, &column.path, column.mode) {
        return true;
    }
    let Some(chunk) = rg
        .columns()
        .iter()
        .find(|c| c.column_path().parts().len() == 1 && c.column_path().parts()[0] == column.path)
    else {
        return true;
    };
    let Some(stats) = chunk.statistics() else {
        return true;
    };
    if stats.null_count_opt() == Some(rg.num_rows() as u64) {
        return false;
    }
    let bounds = match stats {
        Statistics::ByteArray(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => match (min.as_utf8(), max.as_utf8()) {
                (Ok(min), Ok(max)) => {
                    Some((Bound::Str(min.to_owned()), Bound::Str(max.to_owned())))
                }
                _ => None,
            },
            _ => None,
        },
        Statistics::Int64(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Int(*min), Bound::Int(*max))),
            _ => None,
        },
        Statistics::Double(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Float(*min), Bound::Float(*max))),
            _ => None,
        },
        Statistics::Boolean(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Bool(*min), Bound::Bool(*max))),
            _ => None,
        },
        _ => None,
    };
    match bounds {
        // Parquet byte-array statistics may be truncated: only exact (not truncated) bounds
        // are trusted, which parquet-rs guarantees for values under its truncation length.
        Some((min, max)) => range_may_match(predicate, &min, &max),
        None => true,
    }
}
