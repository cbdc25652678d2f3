//! Part pruning from the manifest: the kinds each part stores per path and its sort-key min/max.

use strata_format::PartEntry;

use super::{Predicate, bound_from_json, kind_feeds_mode, range_may_match, remainder_feeds};

/// False when no row of the part can satisfy the predicate.
pub(in crate::scan) fn part_may_match(entry: &PartEntry, predicate: &Predicate) -> bool {
    let column = predicate.column();
    if remainder_feeds(entry, &column.path, column.mode) {
        return true;
    }
    let Some(kind) = entry.columns.get(&column.path) else {
        return false; // every value is NULL for this mode
    };
    if !kind_feeds_mode(*kind, column.mode) {
        return false;
    }
    let (Some(min), Some(max)) = (
        entry
            .sort_key_min
            .get(&column.path)
            .and_then(bound_from_json),
        entry
            .sort_key_max
            .get(&column.path)
            .and_then(bound_from_json),
    ) else {
        return true;
    };
    range_may_match(predicate, &min, &max)
}
