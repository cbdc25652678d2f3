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
use std::sync::Arc;

use roaring::RoaringBitmap;
use strata_format::{FormatError, PartEntry, TextIndex};

use strata_json::Kind;

use super::{KeywordLookup, LookupValue, ScanPredicate};
use crate::paths::{PathColumn, PathMode};
use crate::scan::access_plan::join_ranges;

/// Candidate rows up to this many per granule of the part (on average) are read row by row;
/// more by the granules holding them. Past a few a granule every page is decompressed anyway,
/// and a selection of tens of thousands of single rows costs more to build and apply than it
/// saves: at 10M lines, a lookup of 52,000 rows (43 a granule) counted in 3.5 ms narrowed row by
/// row and 1.5 ms by granules, and a GROUP BY over 42,000 took 118–127 ms against 128 (it was
/// one row in 16 of the part before, ADR 0025).
const ROW_LEVEL_ROWS_PER_GRANULE: u64 = 4;

/// What a part's text index leaves to read.
pub(in crate::scan) struct TextRows {
    /// Part rows that may match: sorted, disjoint.
    pub(in crate::scan) kept: Vec<Range<u64>>,
    pub(in crate::scan) granules_pruned: usize,
    /// The part rows matching every `matches` conjunct of the predicate, when the part's
    /// postings decided them all exactly, and every keyword lookup too when `decides_lookups`.
    pub(in crate::scan) matching: Option<RoaringBitmap>,
    /// Whether the part's keyword postings answered every keyword lookup of the predicate, and
    /// `matching` is within them.
    pub(in crate::scan) decides_lookups: bool,
}

/// Whether a conjunct of `predicate` can use the text index of `entry`.
pub(in crate::scan) fn uses_text_index(entry: &PartEntry, predicate: &ScanPredicate) -> bool {
    entry.text_index.as_ref().is_some_and(|indexed| {
        predicate
            .text_searches()
            .iter()
            .any(|(path, _)| indexed.columns.contains(path))
            || predicate
                .keyword_lookups()
                .iter()
                .any(|lookup| indexed.keyword_columns.contains(&lookup.path))
    })
}

/// Whether the keyword postings of `entry` answer lookups on `column`: the part lists its path
/// as a keyword column, in a typed column of the kind the column's mode reads.
pub(in crate::scan) fn postings_answer(entry: &PartEntry, column: &PathColumn) -> bool {
    let listed = entry
        .text_index
        .as_ref()
        .is_some_and(|indexed| indexed.keyword_columns.contains(&column.path));
    listed
        && matches!(
            (column.mode, entry.columns.get(&column.path)),
            (PathMode::String, Some(Kind::String)) | (PathMode::Int, Some(Kind::Int))
        )
}

/// The terms a keyword column of `kind` in a part lists for the rows satisfying `lookup`; None
/// when its values are not what the lookup's column reads (strings read as strings, integers
/// as integers), so the postings cannot answer it.
fn lookup_terms(lookup: &KeywordLookup, kind: Option<Kind>) -> Option<Vec<String>> {
    let mut terms = Vec::with_capacity(lookup.values.len());
    for value in &lookup.values {
        match (value, lookup.mode, kind) {
            (LookupValue::Null, ..) => {}
            (LookupValue::Text(text), PathMode::String, Some(Kind::String)) => {
                terms.push(text.clone())
            }
            (LookupValue::Int(int), PathMode::Int, Some(Kind::Int)) => terms.push(int.to_string()),
            _ => return None,
        }
    }
    Some(terms)
}

/// The rows of keyword column `path` of a part holding one of `terms`: exactly those its
/// postings list when they list every term, else with the granules whose bloom filters may
/// hold a term not listed (values of too few rows are kept there). None when the part's index
/// has no postings of the column.
fn keyword_rows(
    entry: &PartEntry,
    index: &TextIndex,
    path: &str,
    terms: &[String],
) -> Result<Option<(Arc<RoaringBitmap>, bool)>, FormatError> {
    let Some(found) = index
        .postings()
        .map(|postings| postings.value_rows(path, terms))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    let union = |mut extra: RoaringBitmap| {
        for rows in &found.listed {
            extra |= rows.as_ref();
        }
        Arc::new(extra)
    };
    if found.unlisted.is_empty() {
        let rows = match &found.listed[..] {
            [one] => Arc::clone(one),
            _ => union(RoaringBitmap::new()),
        };
        return Ok(Some((rows, true)));
    }
    // A file without filters lists every value of its keyword columns, and so does a column
    // without granules in a file with filters (none of its values was rare).
    let may_hold = index.granules_that_may_match(path, &|contains| {
        found.unlisted.iter().any(|term| contains(term))
    })?;
    let granule_rows = index.granule_rows() as u64;
    let mut extra = RoaringBitmap::new();
    for (granule, _) in may_hold
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, may)| **may)
    {
        let start = granule as u64 * granule_rows;
        let end = (start + granule_rows).min(entry.rows);
        extra.insert_range(start as u32..end as u32);
    }
    let exact = extra.is_empty();
    Ok(Some((union(extra), exact)))
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
    // Rows by keyword postings: the intersection of the lookups the part's index answers,
    // smallest first (a copy of it only: the others are read in the cache).
    let mut answered: Vec<Arc<RoaringBitmap>> = Vec::new();
    let mut lookups_decided = 0;
    for lookup in predicate.keyword_lookups() {
        if !indexed.keyword_columns.contains(&lookup.path) {
            continue;
        }
        let Some(terms) = lookup_terms(lookup, entry.columns.get(&lookup.path).copied()) else {
            continue;
        };
        let Some((rows, exact)) = keyword_rows(entry, index, &lookup.path, &terms)? else {
            continue;
        };
        lookups_decided += usize::from(exact);
        answered.push(rows);
    }
    answered.sort_by_key(|rows| rows.len());
    let by_value = answered.split_first().map(|(smallest, others)| {
        let mut rows = RoaringBitmap::clone(smallest);
        for other in others {
            if rows.is_empty() {
                break;
            }
            rows &= other.as_ref();
        }
        rows
    });
    if searches.is_empty() && by_value.is_none() {
        return Ok(None);
    }
    let decides_lookups =
        lookups_decided > 0 && lookups_decided == predicate.keyword_lookups().len();
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
    let has_text = !predicate.text_searches().is_empty();
    // What the count may take: the rows of the text searches (when decided exactly), within
    // those of the lookups (when all answered).
    let matching = match (has_text, all_exact, decides_lookups) {
        (true, false, _) | (false, _, false) => None,
        (true, true, false) => candidates.clone(),
        (true, true, true) => candidates.clone().zip(by_value.clone()).map(|(t, v)| t & v),
        (false, _, true) => by_value.clone(),
    };
    if let Some(rows) = by_value {
        candidates = Some(match candidates {
            Some(before) => before & rows,
            None => rows,
        });
    }
    let granule_range = |granule: usize| {
        let start = granule as u64 * granule_rows;
        start..(start + granule_rows).min(entry.rows)
    };
    let ranges = match &candidates {
        Some(rows) if rows.len() <= granules as u64 * ROW_LEVEL_ROWS_PER_GRANULE => {
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
                    // Whether any row is there, not how many: counting ranks whole containers.
                    *keep &= rows
                        .range(range.start as u32..range.end as u32)
                        .next()
                        .is_some();
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
        matching,
        decides_lookups,
    }))
}
