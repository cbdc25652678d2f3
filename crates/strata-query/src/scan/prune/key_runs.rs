//! Key runs: exact row ranges of a part whose leading sort-key values may satisfy the filters.

use std::ops::Range;

use strata_format::PartEntry;

use super::{Predicate, bound_from_json, kind_feeds_mode, range_may_match};

/// Rows of the part (ranges in part row numbers) whose leading sort-key values can satisfy the
/// predicates on those paths, from the part's key runs; `None` when the runs cannot narrow
/// the scan (no runs, or no predicate on their paths).
pub(in crate::scan) fn run_selection(
    entry: &PartEntry,
    predicates: &[Predicate],
) -> Option<Vec<Range<usize>>> {
    let runs = entry.key_runs.as_ref()?;
    let applicable: Vec<(usize, &Predicate)> = predicates
        .iter()
        .filter_map(|p| {
            let column = p.column();
            let position = runs.paths.iter().position(|path| *path == column.path)?;
            // Runs describe the typed column; a mode it does not feed is decided elsewhere.
            let kind = entry.columns.get(&column.path)?;
            kind_feeds_mode(*kind, column.mode).then_some((position, p))
        })
        .collect();
    if applicable.is_empty() {
        return None;
    }
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for run in &runs.runs {
        let matches = applicable.iter().all(|(position, predicate)| {
            match run.values.get(*position).and_then(bound_from_json) {
                Some(value) => range_may_match(predicate, &value, &value),
                // NULL satisfies no pruning predicate (comparisons, IN, IS NOT NULL).
                None => run.values.get(*position).is_none_or(|v| !v.is_null()),
            }
        });
        if matches {
            let (start, end) = (run.start as usize, (run.start + run.rows) as usize);
            match ranges.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => ranges.push(start..end),
            }
        }
    }
    Some(ranges)
}
