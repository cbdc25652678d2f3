//! Rows a part's text index (ADR 0019) proves hold no match of the scan's
//! `matches(path, query)` conjuncts.
//!
//! With bloom filters only, each granule is asked, for each such conjunct over a path the part
//! indexes, whether the query's tokens may be there (`TextQuery::may_match`); a granule some
//! conjunct rules out is not read. A part that keeps postings answers at row level instead: each
//! conjunct's candidate rows (`Postings::candidates`) are intersected, and when every conjunct of
//! the predicate was decided exactly (terms and prefixes under AND, OR and NOT) the rows left are
//! exactly the rows matching them all, which a count takes without reading the text.
//!
//! `matches` still decides every row read, so a false positive costs reading, never an answer.

use std::ops::Range;
use std::path::PathBuf;

use roaring::RoaringBitmap;
use strata_format::{FormatError, PartEntry, TextIndex};

use super::ScanPredicate;
use crate::scan::access_plan::join_ranges;

/// Candidate rows sparser than one in this many are read row by row; denser ones by the
/// granules holding them (a selection of millions of single rows costs more than it saves).
const ROW_LEVEL_SPARSENESS: u64 = 16;

/// What a part's text index leaves to read.
pub(in crate::scan) struct TextRows {
    /// Part rows that may match: sorted, disjoint.
    pub(in crate::scan) kept: Vec<Range<u64>>,
    pub(in crate::scan) granules_pruned: usize,
    /// The part rows matching every `matches` conjunct of the predicate, when the part's
    /// postings decided them all exactly.
    pub(in crate::scan) matching: Option<RoaringBitmap>,
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
) -> Result<Option<TextRows>, FormatError> {
    let Some(indexed) = entry.text_index.as_ref() else {
        return Ok(None);
    };
    let searches: Vec<_> = predicate
        .text_searches()
        .iter()
        .filter(|(path, _)| indexed.columns.contains(path))
        .collect();
    if searches.is_empty() {
        return Ok(None);
    }
    let granule_rows = index.granule_rows() as u64;
    let granules = entry.rows.div_ceil(granule_rows) as usize;
    let mut kept = vec![true; granules];
    // Rows by postings: the intersection of the candidates of the conjuncts that have them.
    let mut candidates: Option<RoaringBitmap> = None;
    let mut all_exact = searches.len() == predicate.text_searches().len();
    for (path, query) in searches {
        if let Some(found) = index
            .postings()
            .map(|postings| postings.candidates(path, query))
            .transpose()?
            .flatten()
        {
            all_exact &= found.exact;
            candidates = Some(match candidates {
                Some(rows) => rows & found.rows,
                None => found.rows,
            });
            continue;
        }
        all_exact = false;
        let Some(may) =
            index.granules_that_may_match(path, &|contains| query.may_match(contains))?
        else {
            continue;
        };
        for (keep, may) in kept.iter_mut().zip(may) {
            *keep &= may;
        }
    }
    let granule_range = |granule: usize| {
        let start = granule as u64 * granule_rows;
        start..(start + granule_rows).min(entry.rows)
    };
    let ranges = match &candidates {
        Some(rows) if rows.len() * ROW_LEVEL_SPARSENESS <= entry.rows => {
            if let Some(past) = rows.max().filter(|row| u64::from(*row) >= entry.rows) {
                return Err(FormatError::Damaged {
                    path: PathBuf::from(&indexed.file),
                    message: format!(
                        "its postings list row {past} of a part of {} rows",
                        entry.rows
                    ),
                });
            }
            let in_kept_granule = |row: &u64| {
                let granule = (row / granule_rows) as usize;
                kept.get(granule).copied().unwrap_or(false)
            };
            let rows = rows.iter().map(u64::from).filter(in_kept_granule);
            join_ranges(rows.map(|row| row..row + 1))
        }
        _ => {
            if let Some(rows) = &candidates {
                for (granule, keep) in kept.iter_mut().enumerate() {
                    let range = granule_range(granule);
                    *keep &= rows.range_cardinality(range.start as u32..range.end as u32) > 0;
                }
            }
            let kept_granules = kept.iter().enumerate().filter(|(_, keep)| **keep);
            join_ranges(kept_granules.map(|(granule, _)| granule_range(granule)))
        }
    };
    let mut read = vec![false; granules];
    for range in &ranges {
        let first = range.start / granule_rows;
        let end = range.end.div_ceil(granule_rows);
        for granule in read.iter_mut().take(end as usize).skip(first as usize) {
            *granule = true;
        }
    }
    let pruned = read.iter().filter(|read| !**read).count();
    Ok(Some(TextRows {
        kept: ranges,
        granules_pruned: pruned,
        matching: candidates.filter(|_| all_exact),
    }))
}
