//! Pruning: deciding, before any data page is read, which parts, row groups, pages and rows
//! cannot satisfy the pushed-down filters.
//!
//! The filters become one DataFusion [`PruningPredicate`] over the scan's virtual columns
//! (`data.k`, `data.k::bigint`, ...), evaluated at each level through a [`PruningStatistics`]
//! of that level: parts (`part`, from the manifest), key runs (`key_runs`, exact row ranges of
//! a part), row groups (`row_group`, from the footer) and pages (`page`, from the page index;
//! single-column conjuncts only, since page boundaries differ between columns).
//!
//! The invariant every level keeps: statistics are reported for a virtual column only where
//! they describe exactly the values the scan will produce for it (see [`ColumnSource`]). A
//! container whose physical column has another kind than the column's mode, or whose remainder
//! may hold values of that mode, reports nothing for the column, so it is never pruned wrongly.

pub(super) mod key_index;
pub(super) mod key_runs;
pub(super) mod page;
pub(super) mod part;
pub(super) mod row_group;
pub(super) mod secondary_index;
#[cfg(test)]
mod tests;
pub(super) mod text_index;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, Column, InListExpr, Literal};
use datafusion::physical_expr::utils::{Guarantee, LiteralGuarantee, collect_columns};
use datafusion::physical_expr::{PhysicalExpr, conjunction, create_physical_expr};
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use serde_json::Value;
use strata_format::{Manifest, PartEntry};
use strata_json::Kind;

use super::ScanOutput;
use super::read::{OutputPlan, plan_output};
use crate::paths::{PathColumn, PathMode};

/// The pushed-down filters of one scan, as pruning predicates over its virtual columns.
#[derive(Debug, Clone)]
pub(crate) struct ScanPredicate {
    /// Every convertible filter, conjoined (None: nothing prunes).
    whole: Option<Arc<PruningPredicate>>,
    /// The single-column conjuncts, for the page level.
    single_column: Vec<SingleColumn>,
    /// Virtual columns by name.
    columns: Arc<HashMap<String, PathColumn>>,
    /// The conjuncts `matches(<path>, '<query>')`: the encoded path and the parsed query, for
    /// the text index (`text_index`).
    text_searches: Vec<(String, Arc<strata_text::TextQuery>)>,
    /// The conjuncts pinning a path read as strings or integers to values, for keyword postings
    /// (`text_index`).
    keyword_lookups: Vec<KeywordLookup>,
}

/// A conjunct of the filters that reads one virtual column.
#[derive(Debug, Clone)]
pub(crate) struct SingleColumn {
    pub(crate) column: PathColumn,
    pub(crate) predicate: Arc<PruningPredicate>,
    /// Whether it is a keyword lookup ([`lookup_of`]): keyword postings answer it exactly
    /// where a part lists its path (`text_index::postings_answer`).
    pub(crate) lookup: bool,
}

/// A value an equality conjunct compares a path with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LookupValue {
    /// Equals nothing.
    Null,
    Text(String),
    Int(i64),
}

/// A conjunct `column = literal` (or `IN (…)`, or an OR of such) over one virtual column that
/// reads its path as strings or as integers (ADR 0025): the rows satisfying it are exactly the
/// rows whose typed value is one of `values`, which keyword postings list.
#[derive(Debug, Clone)]
pub(crate) struct KeywordLookup {
    /// The virtual column's name.
    pub(crate) column: String,
    /// Its encoded path.
    pub(crate) path: String,
    pub(crate) mode: PathMode,
    pub(crate) values: BTreeSet<LookupValue>,
}

/// The column name and values of `conjunct` when it is a lookup (see [`KeywordLookup`]): it
/// says nothing but that its one column is one of a set of literals.
pub(crate) fn lookup_of(
    conjunct: &Arc<dyn PhysicalExpr>,
) -> Option<(String, BTreeSet<LookupValue>)> {
    let used = collect_columns(conjunct);
    let [column] = used.iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    let name = column.name();
    if !only_equalities(conjunct, name) {
        return None;
    }
    let [guarantee] = &LiteralGuarantee::analyze(conjunct)[..] else {
        return None;
    };
    if guarantee.guarantee != Guarantee::In || guarantee.column.name() != name {
        return None;
    }
    let values = guarantee
        .literals
        .iter()
        .map(|literal| match literal {
            _ if literal.is_null() => Some(LookupValue::Null),
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)) => Some(LookupValue::Text(s.clone())),
            ScalarValue::Int64(Some(i)) => Some(LookupValue::Int(*i)),
            _ => None,
        })
        .collect::<Option<BTreeSet<_>>>()?;
    Some((name.to_owned(), values))
}

/// The schema the filters are written over: the document and those of the virtual columns
/// they name. A table has a virtual column per path and mode, hundreds of them; planning runs
/// this for every filter DataFusion offers, so it keeps only the columns that matter.
fn virtual_schema(filters: &[Expr], columns: &[PathColumn]) -> SchemaRef {
    let named: HashSet<&str> = filters
        .iter()
        .flat_map(|f| f.column_refs())
        .map(|c| c.name.as_str())
        .collect();
    let mut fields = vec![Field::new(crate::table::DATA_COLUMN, DataType::Utf8, true)];
    fields.extend(named.iter().filter_map(|name| {
        let column = columns.iter().find(|c| c.has_name(name))?;
        Some(Field::new(*name, column.mode.data_type(), true))
    }));
    Arc::new(Schema::new(fields))
}

/// The filters as physical expressions over `schema`, conjunct by conjunct; a conjunct that
/// cannot be converted (it reads no virtual column, or uses what has no physical form) is
/// dropped, which only prunes less.
fn physical_conjuncts(filters: &[Expr], schema: &SchemaRef) -> Vec<Arc<dyn PhysicalExpr>> {
    let Ok(dfschema) = DFSchema::try_from(schema.as_ref().clone()) else {
        return Vec::new();
    };
    let props = ExecutionProps::new();
    let context = PhysicalPlanningContext::default();
    filters
        .iter()
        .flat_map(split_conjunction)
        // Filters offered for pushdown name the table; the scan's schema does not.
        .map(|e| unnormalize_col(e.clone()))
        .filter_map(|e| create_physical_expr(&e, &dfschema, &props, &context).ok())
        .collect()
}

/// IN lists up to this long prune by min/max (DataFusion's default is 20); the hand-built
/// pruning this replaced had no limit, and an OR of a few hundred comparisons per container
/// costs microseconds.
const MAX_IN_LIST_PRUNED: usize = 256;

fn build(expr: Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Arc<PruningPredicate>> {
    let predicate = PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .with_max_in_list_size(MAX_IN_LIST_PRUNED)
        .try_build(expr)
        .ok()?;
    // Literal guarantees prune through `contained` even when min/max cannot (long IN lists).
    (!predicate.always_true() || !predicate.literal_guarantees().is_empty())
        .then(|| Arc::new(predicate))
}

impl ScanPredicate {
    pub(crate) fn new(filters: &[Expr], columns: &[PathColumn]) -> Self {
        let schema = virtual_schema(filters, columns);
        let conjuncts = physical_conjuncts(filters, &schema);
        let by_name: HashMap<String, PathColumn> = columns
            .iter()
            .map(|c| (c.column_name(), c.clone()))
            .collect();
        let single_column = conjuncts
            .iter()
            .filter_map(|e| {
                let used = collect_columns(e);
                let [column] = used.iter().collect::<Vec<_>>()[..] else {
                    return None;
                };
                let column = by_name.get(column.name())?.clone();
                Some(SingleColumn {
                    column,
                    predicate: build(e.clone(), &schema)?,
                    lookup: lookup_of(e).is_some(),
                })
            })
            .collect();
        let whole = (!conjuncts.is_empty())
            .then(|| build(conjunction(conjuncts.clone()), &schema))
            .flatten();
        let text_searches = filters
            .iter()
            .flat_map(split_conjunction)
            .filter_map(|conjunct| text_search(conjunct, &by_name))
            .collect();
        let keyword_lookups = conjuncts
            .iter()
            .filter_map(|conjunct| {
                let (name, values) = lookup_of(conjunct)?;
                let column = by_name.get(&name)?;
                matches!(column.mode, PathMode::String | PathMode::Int).then(|| KeywordLookup {
                    column: name,
                    path: column.path.clone(),
                    mode: column.mode,
                    values,
                })
            })
            .collect();
        ScanPredicate {
            whole,
            single_column,
            columns: Arc::new(by_name),
            text_searches,
            keyword_lookups,
        }
    }

    pub(super) fn text_searches(&self) -> &[(String, Arc<strata_text::TextQuery>)] {
        &self.text_searches
    }

    pub(super) fn keyword_lookups(&self) -> &[KeywordLookup] {
        &self.keyword_lookups
    }

    pub(super) fn whole(&self) -> Option<&PruningPredicate> {
        self.whole.as_deref()
    }

    pub(super) fn single_column(&self) -> &[SingleColumn] {
        &self.single_column
    }

    /// The virtual column a statistics request names.
    pub(super) fn column(&self, name: &str) -> Option<&PathColumn> {
        self.columns.get(name)
    }
}

impl fmt::Display for ScanPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.whole {
            Some(p) => write!(f, "{}", p.predicate_expr()),
            None => Ok(()),
        }
    }
}

/// The path and query of a conjunct `matches(<virtual column>, '<constant query>')`.
fn text_search(
    conjunct: &Expr,
    columns: &HashMap<String, PathColumn>,
) -> Option<(String, Arc<strata_text::TextQuery>)> {
    let Expr::ScalarFunction(call) = conjunct else {
        return None;
    };
    if call.name() != crate::text_search::MATCHES {
        return None;
    }
    let [Expr::Column(column), query] = &call.args[..] else {
        return None;
    };
    let column = columns.get(&column.name)?;
    let query = crate::text_search::parse_constant_query(query)?;
    Some((column.path.clone(), Arc::new(query)))
}

/// Whether the scan applies `filter` exactly in every part of `manifest`, so that DataFusion
/// needs no filter above it: the filter guarantees (`literal_guarantees`) that a string path
/// is one of a set of strings and says nothing else, and every part holds the path in a typed
/// string column, nowhere else, and indexes it in its key runs. Run values are exact and the
/// scan reads only the runs the predicate keeps (`key_runs`), so the rows it returns are
/// exactly the rows satisfying the filter.
pub(crate) fn filter_is_exact(filter: &Expr, columns: &[PathColumn], manifest: &Manifest) -> bool {
    // The cheap conditions first.
    let named = filter.column_refs();
    let [name] = named.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()[..] else {
        return false;
    };
    let Some(column) = columns.iter().find(|c| c.has_name(name)) else {
        return false;
    };
    let indexed_everywhere = || {
        manifest.parts.iter().all(|part| {
            part.columns.get(&column.path) == Some(&Kind::String)
                && !remainder_feeds(part, &column.path, column.mode)
                && part
                    .key_runs
                    .as_ref()
                    .is_some_and(|runs| runs.paths.contains(&column.path))
        })
    };
    if column.mode != PathMode::String || !indexed_everywhere() {
        return false;
    }
    let filters = std::slice::from_ref(filter);
    let schema = virtual_schema(filters, std::slice::from_ref(column));
    let [expr] = &physical_conjuncts(filters, &schema)[..] else {
        return false;
    };
    let [guarantee] = &LiteralGuarantee::analyze(expr)[..] else {
        return false;
    };
    guarantee.guarantee == Guarantee::In
        && guarantee.column.name() == name
        && guarantee
            .literals
            .iter()
            .all(|v| matches!(v, ScalarValue::Utf8View(Some(_))))
        && only_equalities(expr, name)
}

/// Whether `expr` is an equality of column `name` with a literal, an IN list of literals, or
/// an OR of such: a filter that says nothing but what its literal guarantee says.
pub(super) fn only_equalities(expr: &Arc<dyn PhysicalExpr>, name: &str) -> bool {
    let is_column =
        |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<Column>().is_some_and(|c| c.name() == name);
    let is_literal = |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<Literal>().is_some();
    if let Some(b) = expr.downcast_ref::<BinaryExpr>() {
        return match b.op() {
            Operator::Or => only_equalities(b.left(), name) && only_equalities(b.right(), name),
            Operator::Eq => {
                (is_column(b.left()) && is_literal(b.right()))
                    || (is_literal(b.left()) && is_column(b.right()))
            }
            _ => false,
        };
    }
    if let Some(list) = expr.downcast_ref::<InListExpr>() {
        return !list.negated() && is_column(list.expr()) && list.list().iter().all(is_literal);
    }
    false
}

/// Column kinds whose values a typed mode reads.
pub(super) fn kind_feeds_mode(kind: Kind, mode: PathMode) -> bool {
    matches!(
        (kind, mode),
        (Kind::String, PathMode::String)
            | (Kind::Int, PathMode::Int)
            | (
                Kind::Int | Kind::Float | Kind::Number,
                PathMode::Float | PathMode::Number
            )
            | (Kind::Bool, PathMode::Bool)
    )
}

pub(super) fn remainder_feeds(entry: &PartEntry, path: &str, mode: PathMode) -> bool {
    entry.remainder_paths_truncated
        || entry
            .remainder_paths
            .get(path)
            .is_some_and(|kinds| kinds.iter().any(|k| kind_feeds_mode(*k, mode)))
}

/// What a part's statistics can say about one virtual column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ColumnSource<'a> {
    /// Every value is NULL in this part (nothing stored feeds the mode).
    AllNull,
    /// The values are exactly those of this physical column, in an order-preserving type:
    /// its min, max and null counts are the column's.
    Physical(&'a str),
    /// Values may come from elsewhere (the remainder, sub-objects) or change order when
    /// converted (integers as text): no statistics.
    Unknown,
}

/// Where the values of `column` come from in the part `entry` (see [`ColumnSource`]); decided
/// by the same plan the read uses, so statistics and values cannot disagree.
pub(super) fn column_source<'a>(entry: &'a PartEntry, column: &PathColumn) -> ColumnSource<'a> {
    let physical = entry.columns.get_key_value(&column.path);
    if matches!(
        column.mode,
        PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool | PathMode::Number
    ) {
        // The typed modes' plan without building it (this runs per part and statistic, and
        // the plan looks for sub-paths among all the part's paths): the typed column when
        // its kind feeds the mode, overlaid with the remainder when that may feed it too.
        let feeding = physical.filter(|(_, kind)| kind_feeds_mode(**kind, column.mode));
        return match (feeding, remainder_feeds(entry, &column.path, column.mode)) {
            (None, false) => ColumnSource::AllNull,
            (Some((name, kind)), false) if order_preserved(*kind, column.mode) => {
                ColumnSource::Physical(name)
            }
            _ => ColumnSource::Unknown,
        };
    }
    match plan_output(entry, &ScanOutput::Path(column.clone())) {
        OutputPlan::AllNull(_) => ColumnSource::AllNull,
        OutputPlan::TextDirect { .. } => match physical {
            Some((name, Kind::String)) => ColumnSource::Physical(name),
            _ => ColumnSource::Unknown,
        },
        _ => ColumnSource::Unknown,
    }
}

/// Whether a physical column of `kind` read in `mode` keeps its values' order, so that its
/// min/max (cast to the mode's type) bound the values the mode produces. Numbers kept as text
/// (`Kind::Number`) and integers or booleans rendered as text do not.
fn order_preserved(kind: Kind, mode: PathMode) -> bool {
    matches!(
        (kind, mode),
        (
            Kind::String,
            PathMode::String | PathMode::Text | PathMode::Mixed
        ) | (Kind::Int, PathMode::Int | PathMode::Float)
            | (Kind::Float, PathMode::Float)
            | (Kind::Bool, PathMode::Bool)
    )
}

/// A manifest JSON value (sort-key min/max, key-run value) as a value of `column`'s type; None
/// when it is not one (a NULL, or another kind).
pub(super) fn scalar_from_json(value: &Value, mode: PathMode) -> Option<ScalarValue> {
    match (value, mode) {
        (Value::String(s), PathMode::String | PathMode::Text | PathMode::Mixed) => {
            Some(ScalarValue::Utf8View(Some(s.clone())))
        }
        (Value::Number(n), PathMode::Int) => n.as_i64().map(|i| ScalarValue::Int64(Some(i))),
        (Value::Number(n), PathMode::Float) => n.as_f64().map(|f| ScalarValue::Float64(Some(f))),
        (Value::Bool(b), PathMode::Bool) => Some(ScalarValue::Boolean(Some(*b))),
        _ => None,
    }
}

/// One array of `mode`'s type from per-container values (None: unknown); None when no
/// container has a value.
pub(super) fn scalars_to_array(
    values: Vec<Option<ScalarValue>>,
    mode: PathMode,
) -> Option<ArrayRef> {
    if values.iter().all(Option::is_none) {
        return None;
    }
    let null = ScalarValue::try_from(&mode.data_type()).ok()?;
    ScalarValue::iter_to_array(
        values
            .into_iter()
            .map(|v| v.unwrap_or_else(|| null.clone())),
    )
    .ok()
}

/// Per-container counts as the `UInt64Array` statistics are given in; None when none is known.
pub(super) fn counts_to_array(counts: Vec<Option<u64>>) -> Option<ArrayRef> {
    if counts.iter().all(Option::is_none) {
        return None;
    }
    Some(Arc::new(UInt64Array::from(counts)))
}

/// `array` cast to the type of `mode` (Int64 statistics for a `::double` column); None when it
/// cannot be.
pub(super) fn cast_to_mode(array: ArrayRef, mode: PathMode) -> Option<ArrayRef> {
    let target = mode.data_type();
    if array.data_type() == &target {
        return Some(array);
    }
    arrow::compute::cast(&array, &target).ok()
}

/// Which containers the predicate keeps; every container when it cannot be evaluated.
pub(super) fn keep(
    predicate: &PruningPredicate,
    statistics: &dyn datafusion::common::pruning::PruningStatistics,
) -> Vec<bool> {
    predicate
        .prune(statistics)
        .unwrap_or_else(|_| vec![true; statistics.num_containers()])
}
