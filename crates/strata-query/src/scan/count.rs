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
use super::prune::ScanPredicate;
use super::prune::keep;
use super::prune::page::{covered_pages, intersect};
use super::prune::row_group::RowGroupStatistics;

/// The negation for pruning of the filter's conjuncts other than text searches, the columns
/// they read (which must hold no NULL), and the text searches.
#[derive(Debug)]
pub struct Covering {
    /// None: every conjunct is a text search.
    negation: Option<PruningPredicate>,
    columns: Vec<String>,
    /// The conjuncts `matches(<column>, '<query>')`: column name and query.
    text_searches: Vec<(String, TextQuery)>,
}

impl Covering {
    /// `None` when the conjuncts of `filter` that are not text searches have no negation
    /// pruning can use (see [`negate`]).
    pub fn new(filter: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Covering> {
        let mut text_searches = Vec::new();
        let mut others = Vec::new();
        for conjunct in split_conjunction(filter) {
            match text_search(conjunct) {
                Some(search) => text_searches.push(search),
                None => others.push(Arc::clone(conjunct)),
            }
        }
        let Some(others) = others.into_iter().reduce(|left, right| {
            Arc::new(BinaryExpr::new(left, Operator::And, right)) as Arc<dyn PhysicalExpr>
        }) else {
            return Some(Covering {
                negation: None,
                columns: Vec::new(),
                text_searches,
            });
        };
        let negation = PruningPredicateBuilder::new()
            .with_file_schema(schema.clone())
            .try_build(negate(&others)?)
            .ok()?;
        if negation.always_true() {
            return None;
        }
        let columns = datafusion::physical_expr::utils::collect_columns(&others)
            .into_iter()
            .map(|c| c.name().to_owned())
            .collect();
        Some(Covering {
            negation: Some(negation),
            columns,
            text_searches,
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

/// Splits `unit` into the rows counted from statistics and a unit of the row groups that must
/// be read (`None` when none must). `postings_decide` tells whether a part's `text_matching`
/// answers the filter's text searches (`Covering::text_searches_are_the_scans`).
pub(super) fn split_covered(
    unit: &ScanUnit,
    covering: &Covering,
    predicate: &ScanPredicate,
    postings_decide: bool,
) -> (u64, Option<ScanUnit>) {
    let parquet = unit.part.metadata.metadata();
    if unit.plan.len() != parquet.num_row_groups() {
        // Not a plan of this file: nothing is counted here, and reading it says what is wrong.
        return (0, Some(unit.clone()));
    }
    let statistics = RowGroupStatistics {
        entry: &unit.part.entry,
        parquet: parquet.as_ref(),
        schema: unit.part.metadata.schema().as_ref(),
        predicate,
    };
    let text_matching = match &unit.part.text_matching {
        _ if !covering.has_text_searches() => None,
        Some(matching) if postings_decide => Some(matching),
        // Rows of text searches the postings do not decide are read.
        _ => return (0, Some(unit.clone())),
    };
    let may_fail = match &covering.negation {
        Some(negation) => keep(negation, &statistics),
        None => vec![false; parquet.num_row_groups()],
    };
    let null_counts: Vec<Option<Arc<dyn Array>>> = covering
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
        let hits: u64 = ranges
            .iter()
            .map(|r| matching.range_cardinality(part_range(r)))
            .sum();
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
        let covered = match (covering.columns.as_slice(), &covering.negation) {
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
