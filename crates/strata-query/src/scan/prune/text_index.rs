//! Granules a part's text index (ADR 0019) proves hold no match of the scan's
//! `matches(path, query)` conjuncts: for each granule, each such conjunct over a path the part
//! indexes asks the granule's bloom filter whether the query's tokens may be there
//! (`TextQuery::may_match`); a granule some conjunct rules out is not read. `matches` still
//! decides every row read, so a false positive of a filter costs reading, never an answer.

use std::ops::Range;

use strata_format::{PartEntry, TextIndex};

use super::ScanPredicate;

/// What a part's text index leaves to read.
pub(in crate::scan) struct TextRows {
    /// Part rows that may match: sorted, disjoint.
    pub(in crate::scan) kept: Vec<Range<u64>>,
    pub(in crate::scan) granules_pruned: usize,
}

/// Whether a conjunct of `predicate` can use the text index of `entry`.
pub(in crate::scan) fn uses_text_index(entry: &PartEntry, predicate: &ScanPredicate) -> bool {
    entry.text_index.as_ref().is_some_and(|indexed| {
        predicate
            .text_searches()
            .iter()
            .any(|(path, _)| indexed.columns.contains(path))
    })
}

/// The rows of `entry` that may match, by its text index `index`; None when no conjunct can
/// use it.
pub(in crate::scan) fn text_rows(
    entry: &PartEntry,
    index: &TextIndex,
    predicate: &ScanPredicate,
) -> Option<TextRows> {
    let indexed = entry.text_index.as_ref()?;
    let searches: Vec<_> = predicate
        .text_searches()
        .iter()
        .filter(|(path, _)| indexed.columns.contains(path))
        .collect();
    if searches.is_empty() {
        return None;
    }
    let granule_rows = index.granule_rows() as u64;
    let granules = entry.rows.div_ceil(granule_rows) as usize;
    let mut kept = vec![true; granules];
    for (path, query) in searches {
        let Some(may) = index.granules_that_may_match(path, &|contains| query.may_match(contains))
        else {
            continue;
        };
        for (keep, may) in kept.iter_mut().zip(may) {
            *keep &= may;
        }
    }
    let mut ranges: Vec<Range<u64>> = Vec::new();
    for (granule, _) in kept.iter().enumerate().filter(|(_, keep)| **keep) {
        let start = granule as u64 * granule_rows;
        let end = (start + granule_rows).min(entry.rows);
        match ranges.last_mut() {
            Some(last) if last.end == start => last.end = end,
            _ => ranges.push(start..end),
        }
    }
    let pruned = kept.iter().filter(|keep| !**keep).count();
    Some(TextRows {
        kept: ranges,
        granules_pruned: pruned,
    })
}
