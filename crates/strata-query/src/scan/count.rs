//! `count(*)` of the rows satisfying a filter, taken from row-group statistics where they prove
//! that every row satisfies it, reading only the other row groups.
//!
//! "How many requests in the last six hours" over a table sorted by time: all but the row groups
//! at the range's two ends lie wholly inside it. A row group is *covered* when the footer
//! statistics show that no row can satisfy the filter's negation (the pruning predicate of
//! `NOT filter`, built by [`negate`]) and the filter's columns hold no NULL there (a NULL
//! satisfies neither). Its planned rows (the access plan's selection: deleted rows excluded)
//! are counted without reading a page. In a row group that is not covered whole, a filter on
//! one column is judged page by page (the page index) the same way, so only the pages at a
//! range's ends are read and the filter evaluated there.
//!
//! A filter's `matches(path, 'query')` conjuncts are covered by a part's text postings instead,
//! when they decide them all exactly (`PartInScan::text_matching`): such a part counts the rows
//! of those postings among the rows the other conjuncts' statistics cover, without reading the
//! text (ADR 0019, "Postings").
//!
//! Invariant: a row group is counted from statistics only when its statistics describe exactly
//! the values the filter reads (`column_source` is `Physical` for every column, as for pruning),
//! and from postings only when they were built from every `matches` conjunct of the filter.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{SchemaRef, UInt64Type};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column as PhysicalColumn, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr, split_conjunction};
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use parquet::arrow::arrow_reader::RowSelection;
use strata_text::TextQuery;

use super::access_plan::{ScanUnit, join_ranges, selected_ranges};
use super::prune::keep;
use super::prune::page::{covered_pages, intersect};
use super::prune::row_group::RowGroupStatistics;
use super::prune::{LookupValue, ScanPredicate, lookup_of};

/// The negation for pruning of a set of the filter's conjuncts, and the columns they read
/// (which must hold no NULL).
#[derive(Debug)]
struct Negation {
    /// None: the set is empty.
    predicate: Option<PruningPredicate>,
    columns: Vec<String>,
}

impl Negation {
    /// None when `conjuncts` have no negation pruning can use (see [`negate`]).
    fn of(conjuncts: &[Arc<dyn PhysicalExpr>], schema: &SchemaRef) -> Option<Negation> {
        let Some(all) = conjuncts.iter().cloned().reduce(|left, right| {
            Arc::new(BinaryExpr::new(left, Operator::And, right)) as Arc<dyn PhysicalExpr>
        }) else {
            return Some(Negation {
                predicate: None,
                columns: Vec::new(),
            });
        };
        let predicate = PruningPredicateBuilder::new()
            .with_file_schema(schema.clone())
            .try_build(negate(&all)?)
            .ok()?;
        if predicate.always_true() {
            return None;
        }
        let columns = datafusion::physical_expr::utils::collect_columns(&all)
            .into_iter()
            .map(|c| c.name().to_owned())
            .collect();
        Some(Negation {
            predicate: Some(predicate),
            columns,
        })
    }
}

/// How a filter's rows can be counted without reading them: the negation of its conjuncts other
/// than text searches (with and without its keyword lookups), the text searches, and the
/// keyword lookups.
#[derive(Debug)]
pub struct Covering {
    /// Of every conjunct but text searches, for parts whose postings do not answer the lookups
    /// (None: it has none pruning can use).
    with_lookups: Option<Negation>,
    /// Of the conjuncts neither text searches nor keyword lookups, for parts whose keyword
    /// postings answer every lookup.
    without_lookups: Option<Negation>,
    /// The conjuncts `matches(<column>, '<query>')`: column name and query.
    text_searches: Vec<(String, TextQuery)>,
    /// The conjuncts pinning one column to literals (`prune::lookup_of`): column name and
    /// values.
    lookups: Vec<(String, BTreeSet<LookupValue>)>,
}

impl Covering {
    /// `None` when neither set of the conjuncts of `filter` that are not text searches has a
    /// negation pruning can use (see [`negate`]).
    pub fn new(filter: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Covering> {
        let mut text_searches = Vec::new();
        let mut lookups = Vec::new();
        let (mut others, mut looked_up) = (Vec::new(), Vec::new());
        for conjunct in split_conjunction(filter) {
            if let Some(search) = text_search(conjunct) {
                text_searches.push(search);
                continue;
            }
            if let Some(lookup) = lookup_of(conjunct) {
                lookups.push(lookup);
                looked_up.push(Arc::clone(conjunct));
                continue;
            }
            others.push(Arc::clone(conjunct));
        }
        let without_lookups = Negation::of(&others, schema);
        let with_lookups = match looked_up.is_empty() {
            true => Negation::of(&others, schema),
            false => Negation::of(&[others, looked_up].concat(), schema),
        };
        if with_lookups.is_none() && (lookups.is_empty() || without_lookups.is_none()) {
            return None;
        }
        Some(Covering {
            with_lookups,
            without_lookups,
            text_searches,
            lookups,
        })
    }

    /// Whether the filter has text searches, which only postings can cover.
    pub(super) fn has_text_searches(&self) -> bool {
        !self.text_searches.is_empty()
    }

    /// Whether the scan's text searches (`predicate`, over which each part's `text_matching` is
    /// built) are exactly the filter's.
    pub(super) fn text_searches_are_the_scans(&self, predicate: &ScanPredicate) -> bool {
        let scans = predicate.text_searches();
        scans.len() == self.text_searches.len()
            && self.text_searches.iter().all(|(name, query)| {
                predicate.column(name).is_some_and(|column| {
                    scans
                        .iter()
                        .any(|(path, q)| *path == column.path && q.as_ref() == query)
                })
            })
    }

    /// Whether the scan's keyword lookups (over which a part's `text_matching` is built when it
    /// decides them) are exactly the filter's, and there are some.
    pub(super) fn lookups_are_the_scans(&self, predicate: &ScanPredicate) -> bool {
        let scans = predicate.keyword_lookups();
        !self.lookups.is_empty()
            && scans.len() == self.lookups.len()
            && self.lookups.iter().all(|(name, values)| {
                scans
                    .iter()
                    .any(|lookup| lookup.column == *name && lookup.values == *values)
            })
    }
}

/// The column and query of a conjunct `matches(<column>, '<constant query>')`.
fn text_search(conjunct: &Arc<dyn PhysicalExpr>) -> Option<(String, TextQuery)> {
    let call = conjunct.downcast_ref::<ScalarFunctionExpr>()?;
    if call.name() != crate::text_search::MATCHES {
        return None;
    }
    let [column, query] = call.args() else {
        return None;
    };
    let column = column.downcast_ref::<PhysicalColumn>()?;
    let query = match query.downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8(Some(q))
        | ScalarValue::Utf8View(Some(q))
        | ScalarValue::LargeUtf8(Some(q)) => q,
        _ => return None,
    };
    Some((column.name().to_owned(), TextQuery::parse(query).ok()?))
}

/// `NOT expr` as comparisons pruning understands: De Morgan over AND/OR, and each comparison
/// flipped (`a < b` → `a >= b`). Equal to SQL's NOT wherever the compared values are not NULL,
/// which covered row groups guarantee for the columns. `None` for anything else.
pub fn negate(expr: &Arc<dyn PhysicalExpr>) -> Option<Arc<dyn PhysicalExpr>> {
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    let (left, right) = (binary.left(), binary.right());
    let (op, left, right) = match binary.op() {
        Operator::And => (Operator::Or, negate(left)?, negate(right)?),
        Operator::Or => (Operator::And, negate(left)?, negate(right)?),
        op => {
            let flipped = match op {
                Operator::Lt => Operator::GtEq,
                Operator::LtEq => Operator::Gt,
                Operator::Gt => Operator::LtEq,
                Operator::GtEq => Operator::Lt,
                Operator::Eq => Operator::NotEq,
                Operator::NotEq => Operator::Eq,
                _ => return None,
            };
            (flipped, Arc::clone(left), Arc::clone(right))
        }
    };
    Some(Arc::new(BinaryExpr::new(left, op, right)))
}

/// Which of a part's postings a count may take: whether a part's `text_matching` answers the
/// filter's text searches (`Covering::text_searches_are_the_scans`) and its keyword lookups
/// (`Covering::lookups_are_the_scans`) where the part decides them.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostingsDecide {
    pub(super) text: bool,
    pub(super) lookups: bool,
}

/// Splits `unit` into the rows counted from statistics and a unit of the row groups that must
/// be read (`None` when none must).
pub(super) fn split_covered(
    unit: &ScanUnit,
    covering: &Covering,
    predicate: &ScanPredicate,
    decide: PostingsDecide,
) -> (u64, Option<ScanUnit>) {
    let parquet = unit.part.metadata.metadata();
    if unit.plan.len() != parquet.num_row_groups() {
        // Not a plan of this file: nothing is counted here, and reading it says what is wrong.
        return (0, Some(unit.clone()));
    }
    let part = &unit.part;
    let decides_lookups = decide.lookups && part.matching_decides_lookups;
    let negation = match decides_lookups {
        true => covering.without_lookups.as_ref(),
        false => covering.with_lookups.as_ref(),
    };
    let Some(negation) = negation else {
        return (0, Some(unit.clone()));
    };
    let statistics = RowGroupStatistics {
        entry: &unit.part.entry,
        parquet: parquet.as_ref(),
        schema: unit.part.metadata.schema().as_ref(),
        predicate,
    };
    let text_decided = decide.text || !covering.has_text_searches();
    let text_matching = match &part.text_matching {
        _ if !covering.has_text_searches() && !decides_lookups => None,
        Some(matching) if text_decided && part.matching_decides_lookups == decides_lookups => {
            Some(matching)
        }
        // Rows of text searches the postings do not decide are read.
        _ => return (0, Some(unit.clone())),
    };
    let may_fail = match &negation.predicate {
        Some(predicate) => keep(predicate, &statistics),
        None => vec![false; parquet.num_row_groups()],
    };
    let null_counts: Vec<Option<Arc<dyn Array>>> = negation
        .columns
        .iter()
        .map(|name| statistics.null_counts(&Column::new_unqualified(name)))
        .collect();
    let no_nulls = |rg: usize| {
        null_counts.iter().all(|counts| {
            counts
                .as_ref()
                .and_then(|c| c.as_primitive_opt::<UInt64Type>())
                .is_some_and(|c| c.len() > rg && c.is_valid(rg) && c.value(rg) == 0)
        })
    };
    // Deleted rows the plan still reads in rows `ranges` of a row group (`deleted_rows`).
    let deleted_in = |rg: usize, ranges: &[Range<usize>]| match &unit.part.deleted {
        Some(deletions) if deletions.after_decoding(rg) => deletions.deleted_in(rg, ranges),
        _ => 0,
    };
    let group_starts: Vec<u64> = parquet
        .row_groups()
        .iter()
        .scan(0u64, |start, group| {
            let this = *start;
            *start += group.num_rows().max(0) as u64;
            Some(this)
        })
        .collect();
    // The rows of `ranges` of a row group the statistics cover that satisfy the filter: all of
    // them but deleted ones, or those of them the postings hold.
    // `start`: the row group's first row in the part.
    let satisfying = |rg: usize, start: u64, ranges: &[Range<usize>]| -> u64 {
        let Some(matching) = text_matching else {
            return rows_in(ranges) as u64 - deleted_in(rg, ranges);
        };
        let part_range =
            |r: &Range<usize>| (start + r.start as u64) as u32..(start + r.end as u64) as u32;
        let hits = rows_within(matching, start, ranges);
        let deleted = match &unit.part.deleted {
            Some(deletions) if deletions.after_decoding(rg) => {
                let matched = join_ranges(
                    ranges
                        .iter()
                        .flat_map(|r| matching.range(part_range(r)))
                        .map(|row| (u64::from(row) - start) as usize)
                        .map(|row| row..row + 1),
                );
                deletions.deleted_in(rg, &matched)
            }
            _ => 0,
        };
        hits - deleted
    };
    let mut counted = 0u64;
    let mut rest = ParquetAccessPlan::new_none(unit.plan.len());
    let mut rest_rows = 0u64;
    let groups = unit
        .plan
        .inner()
        .iter()
        .zip(parquet.row_groups())
        .zip(group_starts);
    for (rg, ((access, group), start)) in groups.enumerate() {
        if !access.should_scan() {
            continue;
        }
        let group_rows = group.num_rows().max(0) as usize;
        let selected = selected_ranges(access, group_rows);
        let rows = rows_in(&selected) as u64 - deleted_in(rg, &selected);
        if !may_fail.get(rg).copied().unwrap_or(true) && no_nulls(rg) {
            counted += satisfying(rg, start, &selected);
            continue;
        }
        // Not covered whole: the pages of a single-column filter may be.
        let covered = match (negation.columns.as_slice(), &negation.predicate) {
            ([name], Some(negation)) => predicate.column(name).map_or_else(Vec::new, |column| {
                covered_pages(
                    &unit.part.entry,
                    parquet.as_ref(),
                    statistics.schema,
                    rg,
                    column,
                    negation,
                )
            }),
            _ => Vec::new(),
        };
        if covered.is_empty() {
            rest.set(rg, access.clone());
            rest_rows += rows;
            continue;
        }
        let counted_here = intersect(&selected, &covered);
        counted += satisfying(rg, start, &counted_here);
        let to_read = intersect(&selected, &complement(&covered, group_rows));
        if !to_read.is_empty() {
            rest_rows += rows_in(&to_read) as u64 - deleted_in(rg, &to_read);
            rest.set(
                rg,
                RowGroupAccess::Selection(RowSelection::from_consecutive_ranges(
                    to_read.into_iter(),
                    group_rows,
                )),
            );
        }
    }
    let rest = (rest_rows > 0).then(|| ScanUnit {
        part: Arc::clone(&unit.part),
        plan: rest,
        rows: rest_rows,
    });
    (counted, rest)
}

/// How many rows of `matching` (part rows) lie in `ranges` (sorted, disjoint rows of a row
/// group starting at part row `start`). A plan narrowed to sparse postings has a range per
/// row: those are walked beside the bitmap's rows rather than each counted on its own.
fn rows_within(matching: &roaring::RoaringBitmap, start: u64, ranges: &[Range<usize>]) -> u64 {
    let part_row = |row: usize| (start + row as u64) as u32;
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
        return 0;
    };
    if ranges.len() <= WALKED_RANGES {
        return ranges
            .iter()
            .map(|r| matching.range_cardinality(part_row(r.start)..part_row(r.end)))
            .sum();
    }
    let mut ranges = ranges.iter().peekable();
    let mut found = 0;
    for row in matching.range(part_row(first.start)..part_row(last.end)) {
        let row = (u64::from(row) - start) as usize;
        while ranges.next_if(|r| r.end <= row).is_some() {}
        match ranges.peek() {
            Some(r) if r.start <= row => found += 1,
            Some(_) => {}
            None => break,
        }
    }
    found
}

/// Ranges up to this many are counted one by one, more by walking them beside the bitmap.
const WALKED_RANGES: usize = 16;

/// The rows of `0..rows` outside the sorted, disjoint `ranges`.
fn complement(ranges: &[Range<usize>], rows: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for range in ranges {
        if range.start > start {
            out.push(start..range.start);
        }
        start = start.max(range.end);
    }
    if start < rows {
        out.push(start..rows);
    }
    out
}

fn rows_in(ranges: &[Range<usize>]) -> usize {
    ranges.iter().map(|r| r.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_within_ranges_walked_or_counted() {
        let matching: roaring::RoaringBitmap =
            [3u32, 5, 100, 101, 102, 150, 400].into_iter().collect();
        // A row group starting at part row 100: local rows 0, 1, 2, 50, 300.
        let few = [0..2, 40..60];
        assert_eq!(rows_within(&matching, 100, &few), 3);
        let many: Vec<Range<usize>> = (0..40).map(|i| i * 10..i * 10 + 1).collect();
        // Local rows 0, 10, …, 390: of the matching ones, 0 and 50 and 300.
        assert_eq!(rows_within(&matching, 100, &many), 3);
        let single_rows: Vec<Range<usize>> = [
            0, 1, 2, 3, 49, 51, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309,
        ]
        .iter()
        .map(|&r| r..r + 1)
        .collect();
        assert!(single_rows.len() > WALKED_RANGES);
        assert_eq!(rows_within(&matching, 100, &single_rows), 4);
        assert_eq!(rows_within(&matching, 100, &[]), 0);
    }

    #[test]
    fn complement_and_selection_ranges() {
        assert_eq!(complement(&[2..4, 6..8], 10), vec![0..2, 4..6, 8..10]);
        let whole: Vec<Range<usize>> = std::iter::once(0..10).collect();
        assert_eq!(complement(&whole, 10), Vec::<Range<usize>>::new());
        assert_eq!(complement(&[], 3), vec![0..3]);
        let selection = RowSelection::from_consecutive_ranges([1..3, 5..6].into_iter(), 8);
        assert_eq!(
            selected_ranges(&RowGroupAccess::Selection(selection), 8),
            vec![1..3, 5..6]
        );
    }
}
