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
//! Invariant: a row group is counted from statistics only when its statistics describe exactly
//! the values the filter reads (`column_source` is `Physical` for every column, as for pruning).

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{SchemaRef, UInt64Type};
use datafusion::common::Column;
use datafusion::common::pruning::PruningStatistics;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use parquet::arrow::arrow_reader::RowSelection;

use super::access_plan::{ScanUnit, selected_ranges};
use super::prune::ScanPredicate;
use super::prune::keep;
use super::prune::page::{covered_pages, intersect};
use super::prune::row_group::RowGroupStatistics;

/// The filter's negation for pruning, and the columns it reads (which must hold no NULL).
#[derive(Debug)]
pub struct Covering {
    negation: PruningPredicate,
    columns: Vec<String>,
}

impl Covering {
    /// `None` when `filter` has no negation pruning can use (see [`negate`]).
    pub fn new(filter: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Covering> {
        let negation = PruningPredicateBuilder::new()
            .with_file_schema(schema.clone())
            .try_build(negate(filter)?)
            .ok()?;
        if negation.always_true() {
            return None;
        }
        let columns = datafusion::physical_expr::utils::collect_columns(filter)
            .into_iter()
            .map(|c| c.name().to_owned())
            .collect();
        Some(Covering { negation, columns })
    }
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
/// be read (`None` when none must).
pub(super) fn split_covered(
    unit: &ScanUnit,
    covering: &Covering,
    predicate: &ScanPredicate,
) -> (u64, Option<ScanUnit>) {
    let parquet = unit.part.metadata.metadata();
    let statistics = RowGroupStatistics {
        entry: &unit.part.entry,
        parquet: parquet.as_ref(),
        schema: unit.part.metadata.schema().as_ref(),
        predicate,
    };
    let may_fail = keep(&covering.negation, &statistics);
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
    let mut counted = 0u64;
    let mut rest = ParquetAccessPlan::new_none(unit.plan.len());
    let mut rest_rows = 0u64;
    for (rg, access) in unit.plan.inner().iter().enumerate() {
        if !access.should_scan() {
            continue;
        }
        let group_rows = parquet.row_group(rg).num_rows().max(0) as usize;
        let selected = selected_ranges(access, group_rows);
        let rows = rows_in(&selected) as u64 - deleted_in(rg, &selected);
        if !may_fail.get(rg).copied().unwrap_or(true) && no_nulls(rg) {
            counted += rows;
            continue;
        }
        // Not covered whole: the pages of a single-column filter may be.
        let covered = match covering.columns.as_slice() {
            [name] => predicate.column(name).map_or_else(Vec::new, |column| {
                covered_pages(
                    &unit.part.entry,
                    parquet.as_ref(),
                    statistics.schema,
                    rg,
                    column,
                    &covering.negation,
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
        counted += rows_in(&counted_here) as u64 - deleted_in(rg, &counted_here);
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
