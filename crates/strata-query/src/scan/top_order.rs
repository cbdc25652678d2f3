//! A top-k read best granule first: `ORDER BY time DESC LIMIT 1000` over parts sorted by time
//! opens the newest granule first and no granule that cannot hold a row of the answer.
//!
//! The decoder's top rows predicate (`row_filter`) keeps the rows among the first `fetch` in
//! the order of the rows seen so far. Read in the part's order, a descending window over a part
//! sorted ascending sees every row as better than all before it, so every granule of the window
//! is decoded, and its costly columns' pages are decompressed even to skip rows. Here, when the
//! page index shows a unit's part holding the key column in order (each page's greatest value
//! at most the next page's least), the unit is split into one unit per page of the key column,
//! those are read best first (greatest first for a descending order, least first for an
//! ascending one), and a page whose best possible value is not better than the `fetch`-th best
//! value kept so far (`BestSoFar`, shared by the partition's predicates) is not opened.
//!
//! Invariants: a page is skipped only when none of its rows can be among the first `fetch` of
//! the rows kept so far: its bound is no better than `fetch` values already kept (ties at the
//! boundary may go either way, as SQL allows), and a page that may hold NULLs is read when the
//! order puts NULLs first. A partition's rows then come in another order than its parts' rows,
//! which nothing above relies on: the scan declares no output ordering.

use std::cmp::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use arrow::array::ArrayRef;
use arrow::compute::sort_to_indices;
use datafusion::common::ScalarValue;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};

use super::access_plan::ScanUnit;
use super::prune::page::{PageBounds, page_bounds};
use super::reduce::TopRows;
use crate::paths::PathColumn;

/// The best `fetch` key values the top rows predicates of one partition have kept so far
/// (fewer until that many rows were seen), in no particular order.
#[derive(Clone, Default)]
pub(super) struct BestSoFar(Arc<Mutex<Option<ArrayRef>>>);

impl BestSoFar {
    pub(super) fn get(&self) -> Option<ArrayRef> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set(&self, best: ArrayRef) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(best);
    }

    /// The `fetch`-th best value kept, once `fetch` values have been; None before, or when it
    /// is NULL.
    fn threshold(&self, top: &TopRows) -> Option<ScalarValue> {
        let best = self.get()?;
        if best.len() < top.fetch {
            return None;
        }
        let order = sort_to_indices(&best, Some(top.options), Some(top.fetch)).ok()?;
        let worst = order.values().last()?;
        ScalarValue::try_from_array(&best, *worst as usize)
            .ok()
            .filter(|v| !v.is_null())
    }
}

/// A unit to read and, for pages of a part sorted by the key, the best key value a row of it
/// may have.
pub(super) struct OrderedUnit {
    pub(super) unit: ScanUnit,
    bound: Option<Bound>,
    /// Pages of the key column it reads (for the count of those skipped).
    pages: usize,
}

struct Bound {
    best: ScalarValue,
    /// NULLs of the key in the page (None: unknown).
    nulls: Option<u64>,
}

impl OrderedUnit {
    /// A unit read whole, whatever the top rows kept.
    pub(super) fn whole(unit: ScanUnit) -> Self {
        OrderedUnit {
            unit,
            bound: None,
            pages: 0,
        }
    }

    /// The pages of the key column it reads.
    pub(super) fn granules(&self) -> usize {
        self.pages
    }

    /// Whether a row of the unit may be among the first `top.fetch` after the rows `best` kept.
    pub(super) fn worth_reading(&self, best: &BestSoFar, top: &TopRows) -> bool {
        let Some(bound) = &self.bound else {
            return true;
        };
        if top.options.nulls_first && bound.nulls != Some(0) {
            return true;
        }
        let Some(threshold) = best.threshold(top) else {
            return true;
        };
        match bound.best.partial_cmp(&threshold) {
            Some(Ordering::Greater) => top.options.descending,
            Some(Ordering::Less) => !top.options.descending,
            Some(Ordering::Equal) => false,
            None => true,
        }
    }
}

/// `units` in the order to read them for `top` over `column`: units whose parts do not hold
/// the key in order first, whole and as they came; then runs of pages of the key column of the
/// others (`split_by_pages`), best bound first.
pub(super) fn in_key_order(
    units: Vec<ScanUnit>,
    column: &PathColumn,
    top: &TopRows,
) -> Vec<OrderedUnit> {
    let mut whole = Vec::new();
    let mut pages = Vec::new();
    for unit in units {
        match split_by_pages(&unit, column, top) {
            Some(split) => pages.extend(split),
            None => whole.push(OrderedUnit::whole(unit)),
        }
    }
    pages.sort_by(|a, b| {
        let (Some(a), Some(b)) = (&a.bound, &b.bound) else {
            return Ordering::Equal;
        };
        let order = a.best.partial_cmp(&b.best).unwrap_or(Ordering::Equal);
        if top.options.descending {
            order.reverse()
        } else {
            order
        }
    });
    whole.extend(pages);
    whole
}

/// `unit` split into runs of its pages of `column`, best first, each run with the best value a
/// row of it may have for `top`; None when the pages of the unit's row groups are not in key
/// order or say nothing. The first run holds at least `top.fetch` of the unit's rows and each
/// next one at least twice as many as the one before: when the filter keeps most rows, the
/// first run fills the top rows and the rest is skipped; when it keeps few, the unit is still
/// read in a few parquet reads, not one per page.
fn split_by_pages(unit: &ScanUnit, column: &PathColumn, top: &TopRows) -> Option<Vec<OrderedUnit>> {
    let parquet = unit.part.metadata.metadata();
    let schema = unit.part.metadata.schema();
    let mut pages: Vec<(usize, PageBounds)> = Vec::new();
    for rg in unit.plan.row_group_indexes() {
        let bounds = page_bounds(&unit.part.entry, parquet, schema, rg, column)?;
        pages.extend(bounds.into_iter().map(|page| (rg, page)));
    }
    let in_order = pages
        .windows(2)
        .all(|pair| match (&pair[0].1.max, &pair[1].1.min) {
            (Some(max), Some(min)) => max.partial_cmp(min).is_some_and(Ordering::is_le),
            _ => false,
        });
    if !in_order
        || pages
            .iter()
            .any(|(_, p)| p.min.is_none() || p.max.is_none())
    {
        return None;
    }
    if top.options.descending {
        pages.reverse();
    }
    let mut runs = Vec::new();
    let mut run: Option<Run> = None;
    let mut wanted = top.fetch.max(1);
    for (rg, page) in pages {
        let group_rows = parquet.row_group(rg).num_rows().max(0) as usize;
        let page_rows = RowSelection::from(vec![
            RowSelector::skip(page.rows.start),
            RowSelector::select(page.rows.len()),
            RowSelector::skip(group_rows.saturating_sub(page.rows.end)),
        ]);
        let selection = match &unit.plan.inner()[rg] {
            RowGroupAccess::Skip => continue,
            RowGroupAccess::Scan => page_rows,
            RowGroupAccess::Selection(selected) => selected.intersection(&page_rows),
        };
        if selection.row_count() == 0 {
            continue;
        }
        let best = if top.options.descending {
            page.max
        } else {
            page.min
        };
        let current = run.get_or_insert_with(|| Run {
            plan: ParquetAccessPlan::new_none(parquet.num_row_groups()),
            rows: 0,
            pages: 0,
            best,
            nulls: Some(0),
        });
        current.add(rg, selection, page.nulls);
        if current.rows >= wanted {
            runs.extend(run.take().map(|r| r.into_unit(unit)));
            wanted = wanted.saturating_mul(2);
        }
    }
    runs.extend(run.map(|r| r.into_unit(unit)));
    Some(runs)
}

/// Pages of one unit read together.
struct Run {
    plan: ParquetAccessPlan,
    rows: usize,
    pages: usize,
    /// The best bound of its pages: its first page's.
    best: Option<ScalarValue>,
    nulls: Option<u64>,
}

impl Run {
    fn add(&mut self, rg: usize, selection: RowSelection, nulls: Option<u64>) {
        self.rows += selection.row_count();
        self.pages += 1;
        // `set`, not `scan_selection`: the plan starts skipping every row group, and a
        // row group's pages add up.
        let selection = match &self.plan.inner()[rg] {
            RowGroupAccess::Selection(before) => before.union(&selection),
            _ => selection,
        };
        self.plan.set(rg, RowGroupAccess::Selection(selection));
        self.nulls = self.nulls.zip(nulls).map(|(a, b)| a + b);
    }

    fn into_unit(self, unit: &ScanUnit) -> OrderedUnit {
        OrderedUnit {
            unit: ScanUnit {
                part: Arc::clone(&unit.part),
                plan: self.plan,
                rows: self.rows as u64,
            },
            bound: self.best.map(|best| Bound {
                best,
                nulls: self.nulls,
            }),
            pages: self.pages,
        }
    }
}
