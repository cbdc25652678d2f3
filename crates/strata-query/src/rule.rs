//! `ReadPathsFromColumns`: the analyzer rule that turns path functions into column reads.
//!
//! The planner writes every path access as `strata_path(t.data, path, mode)`. This rule finds
//! the Strata table scans of the plan (and the aliases that name them), collects the (path,
//! mode) pairs the plan reads from each, gives each scan a table source whose schema has one
//! virtual column per pair, and rewrites each call into a reference to that column, keeping
//! expression names so the plan's schema does not change. DataFusion's projection pushdown
//! then asks the scan for exactly those columns, and filter pushdown hands it predicates on
//! them for pruning. Calls the rule cannot attribute to a scan are left alone and evaluated
//! on JSON text, so skipping the rule never changes a result, only its speed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result, ScalarValue, TableReference};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, Sort, TableScan, TableScanBuilder};
use datafusion::optimizer::AnalyzerRule;

use crate::paths::{PathColumn, PathMode};
use crate::table::{DATA_COLUMN, StrataTable};
use crate::udf::StrataPath;

#[derive(Debug, Default)]
pub struct ReadPathsFromColumns;

pub(crate) fn strata_table(scan: &TableScan) -> Option<Arc<StrataTable>> {
    let provider = source_as_provider(&scan.source).ok()?;
    let any: Arc<dyn std::any::Any + Send + Sync> = provider;
    any.downcast::<StrataTable>().ok()
}

/// `strata_path(col, 'path', 'mode')` → (col, PathColumn).
fn path_call(expr: &Expr) -> Option<(&Column, PathColumn)> {
    let Expr::ScalarFunction(f) = expr else {
        return None;
    };
    if f.func.name() != StrataPath::NAME {
        return None;
    }
    let [
        Expr::Column(c),
        Expr::Literal(ScalarValue::Utf8(Some(path)), _),
        Expr::Literal(ScalarValue::Utf8(Some(mode)), _),
    ] = f.args.as_slice()
    else {
        return None;
    };
    if c.name != DATA_COLUMN {
        return None;
    }
    Some((
        c,
        PathColumn {
            path: path.clone(),
            mode: PathMode::parse(mode)?,
        },
    ))
}

impl AnalyzerRule for ReadPathsFromColumns {
    fn name(&self) -> &str {
        "read_paths_from_columns"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // 1. Qualifiers (table names and aliases) that denote a Strata scan.
        let mut qualifiers: HashMap<TableReference, String> = HashMap::new();
        plan.apply_with_subqueries(|node| {
            match node {
                LogicalPlan::TableScan(scan) => {
                    if let Some(table) = strata_table(scan) {
                        qualifiers.insert(scan.table_name.clone(), table.name().to_owned());
                    }
                }
                LogicalPlan::SubqueryAlias(alias) => {
                    if let LogicalPlan::TableScan(scan) = alias.input.as_ref()
                        && let Some(table) = strata_table(scan)
                    {
                        qualifiers.insert(alias.alias.clone(), table.name().to_owned());
                    }
                }
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if qualifiers.is_empty() {
            return Ok(plan);
        }
        // 2. Paths each table is read at.
        let mut requested: BTreeMap<String, BTreeSet<PathColumn>> = BTreeMap::new();
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|expr| {
                expr.apply(|e| {
                    if let Some((column, path)) = path_call(e)
                        && let Some(table) =
                            column.relation.as_ref().and_then(|r| qualifiers.get(r))
                    {
                        requested.entry(table.clone()).or_default().insert(path);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        if requested.is_empty() {
            return Ok(plan);
        }
        // 3. Widen the scans, rewrite the calls, recompute schemas bottom-up.
        let original_columns = plan.schema().columns();
        let rewritten = plan.transform_up_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = &node
                && let Some(table) = strata_table(scan)
                && let Some(columns) = requested.get(table.name())
            {
                let widened = Arc::new(table.with_columns(columns.clone()));
                let new_scan =
                    TableScanBuilder::new(scan.table_name.clone(), provider_as_source(widened))
                        .with_filters(scan.filters.clone())
                        .with_fetch(scan.fetch)
                        .build()?;
                return Ok(Transformed::yes(LogicalPlan::TableScan(new_scan)));
            }
            if let Some(restructured) = sort_through_projection(&node)? {
                return Ok(Transformed::yes(restructured));
            }
            read_available_paths(node)
        })?;
        restore_output_columns(&original_columns, rewritten.data)
    }
}

/// A widened scan passes its path columns up through the nodes that keep their input's schema
/// (`Filter`, `Sort`, `Limit`). A plan the optimizer has already run over (a prepared
/// statement's, at `EXECUTE`) may have no projection above them, so its output would grow; the
/// statement's own columns are selected again on top.
fn restore_output_columns(original: &[Column], plan: LogicalPlan) -> Result<LogicalPlan> {
    if plan.schema().fields().len() == original.len() {
        return Ok(plan);
    }
    let columns = original.iter().cloned().map(Expr::Column).collect();
    Ok(LogicalPlan::Projection(Projection::try_new(
        columns,
        Arc::new(plan),
    )?))
}

/// The column a path call reads once it is replaced: `relation."path:mode"`.
fn path_column(relation: &TableReference, path: &PathColumn) -> Column {
    Column::new(Some(relation.clone()), path.column_name())
}

/// Replaces the path calls of `node` whose column its input carries, i.e. directly above the
/// (widened) scan or nodes that pass its schema through. Elsewhere the call stays and is
/// evaluated on the document text: slower, same result.
fn read_available_paths(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let inputs: Vec<_> = node.inputs().iter().map(|i| i.schema().clone()).collect();
    rewrite_expressions_keeping_names(node, |e| {
        if let Some((column, path)) = path_call(&e)
            && let Some(relation) = column.relation.as_ref()
        {
            let replacement = path_column(relation, &path);
            if inputs.iter().any(|schema| schema.has_column(&replacement)) {
                return Ok(Transformed::yes(Expr::Column(replacement)));
            }
        }
        Ok(Transformed::no(e))
    })
}

/// `SELECT data … ORDER BY data.time`: the Sort sits above the query's projection, which does
/// not carry the path column, so the sort key would be parsed out of every document. Instead the
/// projection carries the column, the Sort reads it, and a projection above the Sort restores
/// the query's columns. `None` when the node is not such a Sort.
fn sort_through_projection(node: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let LogicalPlan::Sort(sort) = node else {
        return Ok(None);
    };
    let LogicalPlan::Projection(projection) = sort.input.as_ref() else {
        return Ok(None);
    };
    let below = projection.input.schema();
    let mut carried: Vec<Column> = Vec::new();
    for sort_expr in &sort.expr {
        sort_expr.expr.apply(|e| {
            if let Some((column, path)) = path_call(e)
                && let Some(relation) = column.relation.as_ref()
            {
                let wanted = path_column(relation, &path);
                let name_taken = projection
                    .schema
                    .has_column_with_unqualified_name(&wanted.name);
                if below.has_column(&wanted) && !name_taken && !carried.contains(&wanted) {
                    carried.push(wanted);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    if carried.is_empty() {
        return Ok(None);
    }
    let query_columns: Vec<Expr> = projection
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let mut widened = projection.expr.clone();
    widened.extend(carried.into_iter().map(Expr::Column));
    let widened = Projection::try_new(widened, Arc::clone(&projection.input))?;
    let sort = LogicalPlan::Sort(Sort {
        expr: sort.expr.clone(),
        input: Arc::new(LogicalPlan::Projection(widened)),
        fetch: sort.fetch,
    });
    let sort = read_available_paths(sort)?.data;
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        query_columns,
        Arc::new(sort),
    )?)))
}

/// Rewrites every expression of `node` bottom-up with `rewrite`, keeping the names the plan's
/// schema knows them by (a rewritten expression is aliased to its old name), and recomputes the
/// node's schema (its inputs may have changed too).
pub(crate) fn rewrite_expressions_keeping_names(
    node: LogicalPlan,
    mut rewrite: impl FnMut(Expr) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    let preserver = NamePreserver::new(&node);
    let node = node.map_expressions(|expr| {
        let saved = preserver.save(&expr);
        let result = expr.transform_up(&mut rewrite)?;
        Ok(if result.transformed {
            Transformed::yes(saved.restore(result.data))
        } else {
            result
        })
    })?;
    let transformed = node.transformed;
    let plan = node.data.recompute_schema()?;
    Ok(if transformed {
        Transformed::yes(plan)
    } else {
        Transformed::no(plan)
    })
}
