//! The physical scan of a Strata table: prune, read only the needed columns, build path values.
//!
//! Planning prunes twice before any data page is read: whole parts, from the manifest (a part
//! that stores no value of a filtered path cannot match; sort-key min/max), then row groups,
//! from the Parquet footer statistics. Execution reads each remaining row group with a
//! projection of exactly the physical columns the requested paths need, on blocking threads,
//! one stream per partition. A path stored in a typed column of a compatible kind is passed
//! through (zero copy, or one cast); only values in the remainder, sub-objects and whole
//! documents are rebuilt from JSON.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Int64Array, RecordBatch, RecordBatchOptions,
    StringBuilder, StringViewArray,
};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Fields, Int32Type, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;
use serde_json::Value;
use strata_format::{Manifest, PartChecksums, PartEntry, PartFile};
use strata_json::reconstruct::{parse_stored, reconstruct};
use strata_json::{JsonPath, Kind, REMAINDER_COLUMN};

use crate::paths::{PathColumn, PathMode};
use crate::udf::{ModeValue, build_mode_array, value_in_mode};

const BATCH_ROWS: usize = 8192;

/// One output column of the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanOutput {
    /// The whole document as JSON text.
    Document,
    Path(PathColumn),
}

/// A comparison that can be decided from min/max statistics.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
enum Predicate {
    Compare {
        column: PathColumn,
        op: Operator,
        value: Bound,
    },
    In {
        column: PathColumn,
        values: Vec<Bound>,
    },
    IsNotNull {
        column: PathColumn,
    },
}

impl Predicate {
    fn column(&self) -> &PathColumn {
        match self {
            Predicate::Compare { column, .. }
            | Predicate::In { column, .. }
            | Predicate::IsNotNull { column } => column,
        }
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Predicate::Compare { column, op, value } => {
                write!(f, "{} {op} {value:?}", column.column_name())
            }
            Predicate::In { column, values } => {
                write!(f, "{} IN ({} values)", column.column_name(), values.len())
            }
            Predicate::IsNotNull { column } => write!(f, "{} IS NOT NULL", column.column_name()),
        }
    }
}

/// Row groups of one part to read, each with the row ranges its pages may match (None: all).
#[derive(Debug, Clone)]
struct ScanUnit {
    part: Arc<PartInScan>,
    row_groups: Vec<(usize, Option<Vec<Range<usize>>>)>,
    rows: u64,
}

#[derive(Debug)]
struct PartInScan {
    entry: PartEntry,
    path: PathBuf,
    metadata: ArrowReaderMetadata,
    /// What every read of the part is verified against (None: a part without checksums).
    checksums: Option<Arc<PartChecksums>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct PruneCounts {
    parts_total: usize,
    parts_pruned: usize,
    row_groups_total: usize,
    row_groups_pruned: usize,
    pages_total: usize,
    pages_pruned: usize,
    rows_total: usize,
    rows_pruned: usize,
}

#[derive(Debug)]
pub struct StrataScanExec {
    table: String,
    outputs: Arc<Vec<ScanOutput>>,
    schema: SchemaRef,
    partitions: Vec<Vec<ScanUnit>>,
    predicates: Vec<Predicate>,
    limit: Option<usize>,
    counts: PruneCounts,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
    /// Keeps the snapshot's parts on disk while the scan runs (`strata_engine::table`).
    lease: Option<Arc<strata_engine::ReadLease>>,
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl StrataScanExec {
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        table: String,
        dir: PathBuf,
        manifest: &Manifest,
        columns: &[PathColumn],
        outputs: Vec<ScanOutput>,
        schema: SchemaRef,
        filters: &[Expr],
        limit: Option<usize>,
        target_partitions: usize,
        metadata_cache: &PartMetadataCache,
    ) -> Result<Self> {
        let predicates: Vec<Predicate> = filters
            .iter()
            .flat_map(split_conjunction)
            .filter_map(|e| predicate_from_expr(e, columns))
            .collect();
        let mut counts = PruneCounts {
            parts_total: manifest.parts.len(),
            ..Default::default()
        };
        let mut units = Vec::new();
        for entry in &manifest.parts {
            if !predicates.iter().all(|p| part_may_match(entry, p)) {
                counts.parts_pruned += 1;
                continue;
            }
            let path = Manifest::part_path(&dir, &entry.file);
            let (metadata, checksums) = metadata_cache
                .get_or_load(&path, entry)
                .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?;
            let parquet = metadata.metadata().clone();
            let runs = run_selection(entry, &predicates);
            let mut row_groups = Vec::new();
            let mut first_row = 0usize;
            for (index, rg) in parquet.row_groups().iter().enumerate() {
                let group_rows = rg.num_rows() as usize;
                let group_start = first_row;
                first_row += group_rows;
                counts.row_groups_total += 1;
                if !predicates.iter().all(|p| row_group_may_match(entry, rg, p)) {
                    counts.row_groups_pruned += 1;
                    counts.pages_total +=
                        (rg.num_rows() as usize).div_ceil(strata_format::part::GRANULE_ROWS);
                    counts.pages_pruned +=
                        (rg.num_rows() as usize).div_ceil(strata_format::part::GRANULE_ROWS);
                    continue;
                }
                let mut selection =
                    page_selection(entry, &parquet, index, &predicates, &mut counts);
                if let Some(runs) = &runs {
                    let local: Vec<Range<usize>> = runs
                        .iter()
                        .filter_map(|r| {
                            let start = r.start.max(group_start);
                            let end = r.end.min(group_start + group_rows);
                            (start < end).then(|| start - group_start..end - group_start)
                        })
                        .collect();
                    selection = Some(match selection {
                        None => local,
                        Some(pages) => intersect(&pages, &local),
                    });
                }
                if selection.as_ref().is_some_and(|ranges| ranges.is_empty()) {
                    counts.row_groups_pruned += 1;
                    continue;
                }
                row_groups.push((index, selection));
            }
            if row_groups.is_empty() {
                continue;
            }
            let part = Arc::new(PartInScan {
                entry: entry.clone(),
                path,
                metadata,
                checksums,
            });
            // One unit per row group so partitions can balance; consecutive groups of the
            // same part are merged back per partition below.
            for (rg, selection) in row_groups {
                let rows = match &selection {
                    Some(ranges) => ranges.iter().map(|r| r.len() as u64).sum(),
                    None => parquet.row_group(rg).num_rows() as u64,
                };
                units.push(ScanUnit {
                    part: part.clone(),
                    row_groups: vec![(rg, selection)],
                    rows,
                });
            }
        }
        counts.rows_total = manifest.parts.iter().map(|p| p.rows as usize).sum();
        let rows_kept: u64 = units.iter().map(|u| u.rows).sum();
        counts.rows_pruned = counts.rows_total.saturating_sub(rows_kept as usize);
        let partitions = distribute(units, target_partitions);
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        let metrics = ExecutionPlanMetricsSet::new();
        let scan = StrataScanExec {
            table,
            outputs: Arc::new(outputs),
            schema,
            partitions,
            predicates,
            limit,
            counts,
            metrics,
            properties: Arc::new(properties),
            lease: None,
        };
        scan.record_prune_counts();
        Ok(scan)
    }

    /// Holds `lease` until the scan and its streams are done.
    pub fn with_lease(mut self, lease: Option<Arc<strata_engine::ReadLease>>) -> Self {
        self.lease = lease;
        self
    }

    fn record_prune_counts(&self) {
        let c = self.counts;
        for (name, value) in [
            ("parts_total", c.parts_total),
            ("parts_pruned", c.parts_pruned),
            ("row_groups_total", c.row_groups_total),
            ("row_groups_pruned", c.row_groups_pruned),
            ("granules_total", c.pages_total),
            ("granules_pruned", c.pages_pruned),
            ("rows_total", c.rows_total),
            ("rows_pruned", c.rows_pruned),
        ] {
            MetricBuilder::new(&self.metrics)
                .global_counter(name)
                .add(value);
        }
    }
}

/// Splits units into `n` partitions of similar row counts, keeping each part's row groups
/// together where possible so a partition opens each file once.
fn distribute(units: Vec<ScanUnit>, n: usize) -> Vec<Vec<ScanUnit>> {
    let total: u64 = units.iter().map(|u| u.rows).sum();
    let n = n.max(1);
    let per_partition = total.div_ceil(n as u64).max(1);
    let mut partitions: Vec<Vec<ScanUnit>> = vec![Vec::new()];
    let mut filled = 0u64;
    for unit in units {
        if filled >= per_partition && partitions.len() < n {
            partitions.push(Vec::new());
            filled = 0;
        }
        filled += unit.rows;
        let current = partitions.last_mut().map(|p| {
            if let Some(last) = p.last_mut()
                && Arc::ptr_eq(&last.part, &unit.part)
            {
                last.row_groups.extend(unit.row_groups.iter().cloned());
                last.rows += unit.rows;
                None
            } else {
                Some(unit)
            }
        });
        if let Some(Some(unit)) = current
            && let Some(p) = partitions.last_mut()
        {
            p.push(unit);
        }
    }
    partitions
}

fn split_conjunction(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryExpr(b) if b.op == Operator::And => {
            let mut out = split_conjunction(&b.left);
            out.extend(split_conjunction(&b.right));
            out
        }
        other => vec![other],
    }
}

fn column_of(expr: &Expr, columns: &[PathColumn]) -> Option<PathColumn> {
    let Expr::Column(c) = strip_cast(expr) else {
        return None;
    };
    columns
        .iter()
        .find(|p| {
            p.column_name() == c.name
                && matches!(
                    p.mode,
                    PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool
                )
        })
        .cloned()
}

fn strip_cast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(c)
            if matches!(
                c.field.data_type(),
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
            ) =>
        {
            strip_cast(&c.expr)
        }
        other => other,
    }
}

fn bound_of(expr: &Expr) -> Option<Bound> {
    let Expr::Literal(value, _) = strip_cast(expr) else {
        return None;
    };
    Some(match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Bound::Str(s.clone()),
        ScalarValue::Int64(Some(i)) => Bound::Int(*i),
        ScalarValue::Int32(Some(i)) => Bound::Int(i64::from(*i)),
        ScalarValue::UInt32(Some(i)) => Bound::Int(i64::from(*i)),
        ScalarValue::Float64(Some(f)) => Bound::Float(*f),
        ScalarValue::Boolean(Some(b)) => Bound::Bool(*b),
        _ => return None,
    })
}

/// Whether the scan applies `filter` exactly in every part of `manifest`, so that DataFusion
/// needs no filter above it: an equality or IN list of strings on a string path that every
/// part holds in a typed string column and indexes in its key runs. Run values are exact and
/// the scan reads only the runs that match (see `run_selection`), so the rows it returns are
/// exactly the rows satisfying the filter.
pub(crate) fn filter_is_exact(filter: &Expr, columns: &[PathColumn], manifest: &Manifest) -> bool {
    let Some(predicate) = predicate_from_expr(filter, columns) else {
        return false;
    };
    let string_values = match &predicate {
        Predicate::Compare {
            op: Operator::Eq,
            value: Bound::Str(_),
            ..
        } => true,
        Predicate::In { values, .. } => values.iter().all(|v| matches!(v, Bound::Str(_))),
        _ => false,
    };
    let column = predicate.column();
    string_values
        && column.mode == PathMode::String
        && manifest.parts.iter().all(|part| {
            part.columns.get(&column.path) == Some(&Kind::String)
                && part
                    .key_runs
                    .as_ref()
                    .is_some_and(|runs| runs.paths.contains(&column.path))
        })
}

fn predicate_from_expr(expr: &Expr, columns: &[PathColumn]) -> Option<Predicate> {
    match expr {
        // DataFusion rewrites short IN lists to OR chains of equalities; fold them back.
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            let equal_values = |p: Predicate| match p {
                Predicate::Compare {
                    column,
                    op: Operator::Eq,
                    value,
                } => Some((column, vec![value])),
                Predicate::In { column, values } => Some((column, values)),
                _ => None,
            };
            let (left_column, mut values) = equal_values(predicate_from_expr(&b.left, columns)?)?;
            let (right_column, right_values) =
                equal_values(predicate_from_expr(&b.right, columns)?)?;
            if left_column != right_column {
                return None;
            }
            values.extend(right_values);
            Some(Predicate::In {
                column: left_column,
                values,
            })
        }
        Expr::BinaryExpr(b) => {
            let flipped = |op: Operator| match op {
                Operator::Lt => Operator::Gt,
                Operator::LtEq => Operator::GtEq,
                Operator::Gt => Operator::Lt,
                Operator::GtEq => Operator::LtEq,
                other => other,
            };
            if !matches!(
                b.op,
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) {
                return None;
            }
            if let (Some(column), Some(value)) = (column_of(&b.left, columns), bound_of(&b.right)) {
                Some(Predicate::Compare {
                    column,
                    op: b.op,
                    value,
                })
            } else if let (Some(column), Some(value)) =
                (column_of(&b.right, columns), bound_of(&b.left))
            {
                Some(Predicate::Compare {
                    column,
                    op: flipped(b.op),
                    value,
                })
            } else {
                None
            }
        }
        Expr::InList(list) if !list.negated => {
            let column = column_of(&list.expr, columns)?;
            let values: Option<Vec<Bound>> = list.list.iter().map(bound_of).collect();
            Some(Predicate::In {
                column,
                values: values?,
            })
        }
        Expr::IsNotNull(inner) => Some(Predicate::IsNotNull {
            column: column_of(inner, columns)?,
        }),
        _ => None,
    }
}

/// Column kinds whose values a typed mode reads.
fn kind_feeds_mode(kind: Kind, mode: PathMode) -> bool {
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

fn remainder_feeds(entry: &PartEntry, path: &str, mode: PathMode) -> bool {
    entry.remainder_paths_truncated
        || entry
            .remainder_paths
            .get(path)
            .is_some_and(|kinds| kinds.iter().any(|k| kind_feeds_mode(*k, mode)))
}

/// False when no row of the part can satisfy the predicate.
fn part_may_match(entry: &PartEntry, predicate: &Predicate) -> bool {
    let column = predicate.column();
    if remainder_feeds(entry, &column.path, column.mode) {
        return true;
    }
    let Some(kind) = entry.columns.get(&column.path) else {
        return false; // every value is NULL for this mode
    };
    if !kind_feeds_mode(*kind, column.mode) {
        return false;
    }
    let (Some(min), Some(max)) = (
        entry
            .sort_key_min
            .get(&column.path)
            .and_then(bound_from_json),
        entry
            .sort_key_max
            .get(&column.path)
            .and_then(bound_from_json),
    ) else {
        return true;
    };
    range_may_match(predicate, &min, &max)
}

/// Rows of the part (ranges in part row numbers) whose leading sort-key values can satisfy the
/// predicates on those paths, from the part's key runs; `None` when the runs cannot narrow
/// the scan (no runs, or no predicate on their paths).
fn run_selection(entry: &PartEntry, predicates: &[Predicate]) -> Option<Vec<Range<usize>>> {
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

fn bound_from_json(value: &Value) -> Option<Bound> {
    match value {
        Value::String(s) => Some(Bound::Str(s.clone())),
        Value::Bool(b) => Some(Bound::Bool(*b)),
        Value::Number(n) => n
            .as_i64()
            .map(Bound::Int)
            .or_else(|| n.as_str().parse().ok().map(Bound::Float)),
        _ => None,
    }
}

fn compare(a: &Bound, b: &Bound) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Bound::Str(x), Bound::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Bound::Int(x), Bound::Int(y)) => Some(x.cmp(y)),
        (Bound::Float(x), Bound::Float(y)) => x.partial_cmp(y),
        (Bound::Int(x), Bound::Float(y)) => (*x as f64).partial_cmp(y),
        (Bound::Float(x), Bound::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Bound::Bool(x), Bound::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Whether any value in [min, max] can satisfy the predicate (true when unsure).
fn range_may_match(predicate: &Predicate, min: &Bound, max: &Bound) -> bool {
    use std::cmp::Ordering::*;
    let within = |v: &Bound| {
        !matches!(compare(v, min), Some(Less)) && !matches!(compare(v, max), Some(Greater))
    };
    match predicate {
        Predicate::IsNotNull { .. } => true,
        Predicate::In { values, .. } => values.iter().any(within),
        Predicate::Compare { op, value, .. } => match op {
            Operator::Eq => within(value),
            Operator::Lt => !matches!(compare(min, value), Some(Greater | Equal)),
            Operator::LtEq => !matches!(compare(min, value), Some(Greater)),
            Operator::Gt => !matches!(compare(max, value), Some(Less | Equal)),
            Operator::GtEq => !matches!(compare(max, value), Some(Less)),
            _ => true,
        },
    }
}

fn row_group_may_match(entry: &PartEntry, rg: &RowGroupMetaData, predicate: &Predicate) -> bool {
    let column = predicate.column();
    if remainder_feeds(entry, &column.path, column.mode) {
        return true;
    }
    let Some(chunk) = rg
        .columns()
        .iter()
        .find(|c| c.column_path().parts().len() == 1 && c.column_path().parts()[0] == column.path)
    else {
        return true;
    };
    let Some(stats) = chunk.statistics() else {
        return true;
    };
    if stats.null_count_opt() == Some(rg.num_rows() as u64) {
        return false;
    }
    let bounds = match stats {
        Statistics::ByteArray(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => match (min.as_utf8(), max.as_utf8()) {
                (Ok(min), Ok(max)) => {
                    Some((Bound::Str(min.to_owned()), Bound::Str(max.to_owned())))
                }
                _ => None,
            },
            _ => None,
        },
        Statistics::Int64(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Int(*min), Bound::Int(*max))),
            _ => None,
        },
        Statistics::Double(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Float(*min), Bound::Float(*max))),
            _ => None,
        },
        Statistics::Boolean(s) => match (s.min_opt(), s.max_opt()) {
            (Some(min), Some(max)) => Some((Bound::Bool(*min), Bound::Bool(*max))),
            _ => None,
        },
        _ => None,
    };
    match bounds {
        // Parquet byte-array statistics may be truncated: only exact (not truncated) bounds
        // are trusted, which parquet-rs guarantees for values under its truncation length.
        Some((min, max)) => range_may_match(predicate, &min, &max),
        None => true,
    }
}

/// How one output is produced from one part.
#[derive(Debug, Clone)]
enum OutputPlan {
    Document,
    AllNull(PathMode),
    /// A typed column (maybe cast), overlaid with remainder values when `overlay`.
    Typed {
        column: Option<String>,
        path: String,
        mode: PathMode,
        overlay: bool,
    },
    /// A string/int/bool column rendered as text.
    TextDirect {
        column: String,
    },
    /// Rebuilt from every column under the path and the remainder.
    Rebuild {
        path: JsonPath,
        mode: PathMode,
    },
}

fn plan_output(entry: &PartEntry, output: &ScanOutput) -> OutputPlan {
    let ScanOutput::Path(column) = output else {
        return OutputPlan::Document;
    };
    let path = &column.path;
    let decoded = JsonPath::decode(path);
    let has_children = entry
        .columns
        .keys()
        .chain(entry.remainder_paths.keys())
        .any(|name| decoded.is_strict_prefix_of(&JsonPath::decode(name)));
    let stored_kind = entry.columns.get(path).copied();
    let remainder_kinds: BTreeSet<Kind> = entry
        .remainder_paths
        .get(path)
        .map(|k| k.iter().copied().filter(|k| *k != Kind::Null).collect())
        .unwrap_or_default();
    let truncated = entry.remainder_paths_truncated;
    let nothing_stored = stored_kind.is_none()
        && remainder_kinds.is_empty()
        && !has_children
        && !truncated
        && !entry.remainder_paths.contains_key(path);
    match column.mode {
        PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool | PathMode::Number => {
            let column_name = stored_kind
                .filter(|k| kind_feeds_mode(*k, column.mode))
                .map(|_| path.clone());
            let overlay = remainder_feeds(entry, path, column.mode);
            if column_name.is_none() && !overlay {
                OutputPlan::AllNull(column.mode)
            } else {
                OutputPlan::Typed {
                    column: column_name,
                    path: path.clone(),
                    mode: column.mode,
                    overlay,
                }
            }
        }
        mode if nothing_stored => OutputPlan::AllNull(mode),
        PathMode::Text | PathMode::Mixed
            if !has_children
                && !truncated
                && !entry.remainder_paths.contains_key(path)
                && matches!(stored_kind, Some(Kind::String | Kind::Int | Kind::Bool)) =>
        {
            OutputPlan::TextDirect {
                column: path.clone(),
            }
        }
        mode => OutputPlan::Rebuild {
            path: decoded,
            mode,
        },
    }
}

/// Physical columns (by name) an output plan reads; `None` means all.
fn needed_columns(entry: &PartEntry, plan: &OutputPlan, needed: &mut BTreeSet<String>) -> bool {
    match plan {
        OutputPlan::Document => return true,
        OutputPlan::AllNull(_) => {}
        OutputPlan::Typed {
            column, overlay, ..
        } => {
            if let Some(c) = column {
                needed.insert(c.clone());
            }
            if *overlay {
                needed.insert(REMAINDER_COLUMN.to_owned());
            }
        }
        OutputPlan::TextDirect { column } => {
            needed.insert(column.clone());
        }
        OutputPlan::Rebuild { path, .. } => {
            for name in entry.columns.keys() {
                let stored = JsonPath::decode(name);
                if stored == *path || path.is_strict_prefix_of(&stored) {
                    needed.insert(name.clone());
                }
            }
            needed.insert(REMAINDER_COLUMN.to_owned());
        }
    }
    false
}

impl DisplayAs for StrataScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let outputs: Vec<String> = self
            .outputs
            .iter()
            .map(|o| match o {
                ScanOutput::Document => "data".to_owned(),
                ScanOutput::Path(p) => p.column_name(),
            })
            .collect();
        let c = self.counts;
        write!(
            f,
            "StrataScanExec: table={}, columns=[{}], parts={}/{} (pruned {}), row_groups={}/{} (pruned {}), granules pruned={}/{}, rows pruned={}/{}",
            self.table,
            outputs.join(", "),
            c.parts_total - c.parts_pruned,
            c.parts_total,
            c.parts_pruned,
            c.row_groups_total - c.row_groups_pruned,
            c.row_groups_total,
            c.row_groups_pruned,
            c.pages_pruned,
            c.pages_total,
            c.rows_pruned,
            c.rows_total
        )?;
        if !self.predicates.is_empty() {
            let p: Vec<String> = self.predicates.iter().map(|p| p.to_string()).collect();
            write!(f, ", pruning_predicates=[{}]", p.join(" AND "))?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for StrataScanExec {
    fn name(&self) -> &str {
        "StrataScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units = self.partitions.get(partition).cloned().unwrap_or_default();
        let outputs = self.outputs.clone();
        let schema = self.schema.clone();
        let limit = self.limit;
        let table = self.table.clone();
        let bytes_scanned = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 2);
        let tx = builder.tx();
        let lease = self.lease.clone();
        builder.spawn_blocking(move || {
            let _lease = lease;
            let mut produced = 0usize;
            for unit in units {
                let plans: Vec<OutputPlan> = outputs
                    .iter()
                    .map(|o| plan_output(&unit.part.entry, o))
                    .collect();
                let reader = open_unit(&unit, &plans, &table, &bytes_scanned, None)?;
                for batch in reader {
                    let out = batch
                        .map_err(DataFusionError::from)
                        .and_then(|batch| build_outputs(&batch, &plans, &schema))
                        .map_err(|e| part_error(&table, &unit.part.path, e))?;
                    produced += out.num_rows();
                    output_rows.add(out.num_rows());
                    if tx.blocking_send(Ok(out)).is_err() {
                        return Ok(()); // the consumer has gone away
                    }
                    if limit.is_some_and(|l| produced >= l) {
                        return Ok(());
                    }
                }
            }
            Ok(())
        });
        Ok(builder.build())
    }
}

impl StrataScanExec {
    /// The row limit pushed into the scan.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The scan's outputs, in schema order.
    pub(crate) fn outputs(&self) -> &[ScanOutput] {
        &self.outputs
    }

    /// The first phase of `GROUP BY <output> ... count(*)` over this scan, for one partition:
    /// rows counted per distinct value of string output `group`, emitted as batches of
    /// `result_schema` (the group value, then the count once per count aggregate).
    ///
    /// Where a part stores the path as a dictionary-encoded string column (the usual case for
    /// low-cardinality paths), the column is read as dictionary keys and counted per key, so no
    /// string is materialised or hashed per row. The result is a partial aggregate: a value may
    /// appear in several batches (the count table is emitted whenever it reaches
    /// [`GroupCounter::MAX_GROUPS`], which bounds memory), and the final phase adds them up.
    pub(crate) fn execute_count_by(
        &self,
        partition: usize,
        group: usize,
        result_schema: SchemaRef,
    ) -> Result<SendableRecordBatchStream> {
        let units = self.partitions.get(partition).cloned().unwrap_or_default();
        let output = self
            .outputs
            .get(group)
            .cloned()
            .ok_or_else(|| DataFusionError::Internal(format!("scan has no output {group}")))?;
        let table = self.table.clone();
        let bytes_scanned = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let rows_by_key =
            MetricBuilder::new(&self.metrics).counter("rows_counted_by_key", partition);
        let mut builder = RecordBatchReceiverStreamBuilder::new(result_schema.clone(), 2);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            let mut counter = GroupCounter::default();
            for unit in units {
                let plan = plan_output(&unit.part.entry, &output);
                let dictionary = dictionary_source(&unit.part.entry, &plan);
                let reader = open_unit(
                    &unit,
                    std::slice::from_ref(&plan),
                    &table,
                    &bytes_scanned,
                    dictionary,
                )?;
                for batch in reader {
                    let batch = batch
                        .map_err(DataFusionError::from)
                        .map_err(|e| part_error(&table, &unit.part.path, e))?;
                    output_rows.add(batch.num_rows());
                    let keys = dictionary
                        .and_then(|c| batch.column_by_name(c))
                        .and_then(|a| a.as_dictionary_opt::<Int32Type>());
                    match keys {
                        Some(keys) => {
                            rows_by_key.add(keys.len());
                            counter.add_dictionary(keys);
                        }
                        None => {
                            let values = build_output(&batch, &plan)
                                .map_err(|e| part_error(&table, &unit.part.path, e))?;
                            counter.add_strings(&values)?;
                        }
                    }
                    if counter.len() >= GroupCounter::MAX_GROUPS {
                        let out = counter.emit(&result_schema)?;
                        if tx.blocking_send(Ok(out)).is_err() {
                            return Ok(());
                        }
                    }
                }
            }
            let out = counter.emit(&result_schema)?;
            let _ = tx.blocking_send(Ok(out)); // Err: the consumer has gone away
            Ok(())
        });
        Ok(builder.build())
    }
}

fn part_error(table: &str, path: &Path, e: DataFusionError) -> DataFusionError {
    DataFusionError::Execution(format!("table {table}: {}: {e}", path.display()))
}

/// Opens the selected row groups of one part, reading the physical columns `plans` need.
/// `dictionary_column`, when given, is read as dictionary-encoded strings (keys into each
/// column chunk's dictionary) instead of one string per row.
fn open_unit(
    unit: &ScanUnit,
    plans: &[OutputPlan],
    table: &str,
    bytes_scanned: &Count,
    dictionary_column: Option<&str>,
) -> Result<ParquetRecordBatchReader> {
    let part = &unit.part;
    let mut needed = BTreeSet::new();
    let mut all = false;
    for plan in plans {
        all |= needed_columns(&part.entry, plan, &mut needed);
    }
    let file_schema = part.metadata.schema().clone();
    let roots: Vec<usize> = file_schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| all || needed.contains(f.name()))
        .map(|(i, _)| i)
        .collect();
    let parquet = part.metadata.metadata().clone();
    let descr = parquet.file_metadata().schema_descr_ptr();
    let mask = ProjectionMask::roots(&descr, roots.iter().copied());
    for (rg, _) in &unit.row_groups {
        let meta = parquet.row_group(*rg);
        for (i, chunk) in meta.columns().iter().enumerate() {
            if mask.leaf_included(i) {
                bytes_scanned.add(chunk.compressed_size().max(0) as usize);
            }
        }
    }
    let metadata = match dictionary_column {
        None => part.metadata.clone(),
        Some(column) => {
            let fields: Fields = file_schema
                .fields()
                .iter()
                .map(|f| {
                    if f.name() == column {
                        Arc::new(f.as_ref().clone().with_data_type(DataType::Dictionary(
                            Box::new(DataType::Int32),
                            Box::new(DataType::Utf8),
                        )))
                    } else {
                        f.clone()
                    }
                })
                .collect();
            let options = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
            ArrowReaderMetadata::try_new(parquet.clone(), options)
                .map_err(|e| part_error(table, &part.path, e.into()))?
        }
    };
    let file = PartFile::open(&part.path, part.checksums.clone())
        .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?;
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata)
        .with_projection(mask)
        .with_row_groups(unit.row_groups.iter().map(|(rg, _)| *rg).collect())
        .with_batch_size(BATCH_ROWS);
    if unit.row_groups.iter().any(|(_, s)| s.is_some()) {
        builder = builder.with_row_selection(row_selection(&parquet, &unit.row_groups));
    }
    builder
        .build()
        .map_err(|e| part_error(table, &part.path, e.into()))
}

/// The physical column an output can be counted from by dictionary key: a string column passed
/// through unchanged (no cast, no remainder values to overlay).
fn dictionary_source<'a>(entry: &PartEntry, plan: &'a OutputPlan) -> Option<&'a str> {
    let column = match plan {
        OutputPlan::Typed {
            column: Some(column),
            mode: PathMode::String,
            overlay: false,
            ..
        } => column,
        OutputPlan::TextDirect { column } => column,
        _ => return None,
    };
    (entry.columns.get(column) == Some(&Kind::String)).then_some(column.as_str())
}

/// Row counts per distinct string value (NULL included), the state of a partial
/// `GROUP BY ... count(*)`.
#[derive(Default)]
struct GroupCounter {
    counts: HashMap<String, i64>,
    nulls: i64,
    /// The dictionary whose keys `key_counts` counts: consecutive batches of one column chunk
    /// share its buffers (each batch wraps them in a new array), so per-key counts are folded
    /// into `counts` only when they change.
    dictionary: Option<ArrayRef>,
    key_counts: Vec<i64>,
}

impl GroupCounter {
    /// Distinct values held before the table is emitted and started afresh.
    const MAX_GROUPS: usize = 1 << 16;

    /// Distinct values folded so far (the current dictionary's keys are folded when it changes,
    /// so memory stays within `MAX_GROUPS` plus one column chunk's dictionary).
    fn len(&self) -> usize {
        self.counts.len()
    }

    fn add_dictionary(&mut self, array: &DictionaryArray<Int32Type>) {
        let same = self.dictionary.as_ref().is_some_and(|d| {
            let identity = dictionary_identity(array.values());
            identity.is_some() && identity == dictionary_identity(d)
        });
        if !same {
            self.fold_dictionary();
            self.dictionary = Some(array.values().clone());
            self.key_counts = vec![0; array.values().len()];
        }
        let keys = array.keys();
        if keys.null_count() == 0 {
            for key in keys.values() {
                if let Some(count) = self.key_counts.get_mut(*key as usize) {
                    *count += 1;
                }
            }
        } else {
            for key in keys.iter() {
                match key.and_then(|k| self.key_counts.get_mut(k as usize)) {
                    Some(count) => *count += 1,
                    None => self.nulls += 1,
                }
            }
        }
    }

    fn fold_dictionary(&mut self) {
        let Some(values) = self.dictionary.take() else {
            return;
        };
        let key_counts = std::mem::take(&mut self.key_counts);
        for (i, n) in key_counts.into_iter().enumerate() {
            if n == 0 {
                continue;
            }
            match string_at(&values, i) {
                Some(value) => self.add(value, n),
                None => self.nulls += n,
            }
        }
    }

    fn add_strings(&mut self, array: &ArrayRef) -> Result<()> {
        let array = match array.data_type() {
            DataType::Utf8View => array.clone(),
            _ => arrow::compute::cast(array, &DataType::Utf8View)?,
        };
        for value in array.as_string_view().iter() {
            match value {
                Some(value) => self.add(value, 1),
                None => self.nulls += 1,
            }
        }
        Ok(())
    }

    fn add(&mut self, value: &str, n: i64) {
        match self.counts.get_mut(value) {
            Some(count) => *count += n,
            None => {
                self.counts.insert(value.to_owned(), n);
            }
        }
    }

    /// The counted groups as one batch of `schema` (value, then the count per aggregate),
    /// leaving the counter empty.
    fn emit(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        self.fold_dictionary();
        let mut values: Vec<Option<String>> = Vec::with_capacity(self.counts.len() + 1);
        let mut counts: Vec<i64> = Vec::with_capacity(self.counts.len() + 1);
        for (value, n) in self.counts.drain() {
            values.push(Some(value));
            counts.push(n);
        }
        if self.nulls > 0 {
            values.push(None);
            counts.push(std::mem::take(&mut self.nulls));
        }
        let group_type = schema.field(0).data_type();
        let values: ArrayRef = Arc::new(StringViewArray::from_iter(values));
        let values = if values.data_type() == group_type {
            values
        } else {
            arrow::compute::cast(&values, group_type)?
        };
        let counts: ArrayRef = Arc::new(Int64Array::from(counts));
        let mut columns = vec![values];
        columns.extend((1..schema.fields().len()).map(|_| counts.clone()));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// The buffers behind a string dictionary: equal identities mean the same dictionary (buffers
/// are immutable, and the counter holds the compared one alive, so an address cannot be reused).
fn dictionary_identity(values: &ArrayRef) -> Option<(*const u8, *const u8, usize)> {
    let strings = values.as_string_opt::<i32>()?;
    Some((
        strings.offsets().inner().inner().as_ptr(),
        strings.values().as_ptr(),
        strings.len(),
    ))
}

fn string_at(values: &ArrayRef, i: usize) -> Option<&str> {
    if values.is_null(i) {
        return None;
    }
    match values.data_type() {
        DataType::Utf8 => Some(values.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(values.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(values.as_string_view().value(i)),
        _ => None,
    }
}

fn build_outputs(
    batch: &RecordBatch,
    plans: &[OutputPlan],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(plans.len());
    for plan in plans {
        columns.push(build_output(batch, plan)?);
    }
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

fn build_output(batch: &RecordBatch, plan: &OutputPlan) -> Result<ArrayRef> {
    let rows = batch.num_rows();
    let safe = CastOptions {
        safe: true,
        ..Default::default()
    };
    Ok(match plan {
        OutputPlan::AllNull(mode) => arrow::array::new_null_array(&mode.data_type(), rows),
        OutputPlan::Document => {
            let docs = reconstruct(batch, &JsonPath::default()).map_err(external)?;
            let mut b = StringBuilder::with_capacity(rows, rows * 256);
            for doc in docs {
                match doc {
                    Some(d) => b.append_value(d.to_string()),
                    None => b.append_value("{}"),
                }
            }
            Arc::new(b.finish())
        }
        OutputPlan::TextDirect { column } => {
            let array = batch
                .column_by_name(column)
                .ok_or_else(|| DataFusionError::Internal(format!("column {column} not read")))?;
            let text = PathMode::Text.data_type();
            if array.data_type() == &text {
                array.clone()
            } else {
                cast_with_options(array, &text, &safe)?
            }
        }
        OutputPlan::Typed {
            column,
            path,
            mode,
            overlay,
        } => {
            let base = match column {
                Some(name) => {
                    let array = batch.column_by_name(name).ok_or_else(|| {
                        DataFusionError::Internal(format!("column {name} not read"))
                    })?;
                    if array.data_type() == &mode.data_type() {
                        array.clone()
                    } else {
                        cast_with_options(array, &mode.data_type(), &safe)?
                    }
                }
                None => arrow::array::new_null_array(&mode.data_type(), rows),
            };
            if *overlay {
                overlay_remainder(batch, base, path, *mode)?
            } else {
                base
            }
        }
        OutputPlan::Rebuild { path, mode } => {
            let values = reconstruct(batch, path).map_err(external)?;
            build_mode_array(
                *mode,
                values.iter().map(|v| value_in_mode(v.as_ref(), *mode)),
            )
        }
    })
}

/// Fills rows whose value sits in the remainder (a rarer kind of the path) into `base`.
fn overlay_remainder(
    batch: &RecordBatch,
    base: ArrayRef,
    key: &str,
    mode: PathMode,
) -> Result<ArrayRef> {
    let Some(remainder) = batch.column_by_name(REMAINDER_COLUMN) else {
        return Ok(base);
    };
    let Some(map) = remainder.as_map_opt() else {
        return Ok(base);
    };
    let mut values: Vec<ModeValue> = Vec::with_capacity(base.len());
    for row in 0..base.len() {
        let mut value = scalar_at(&base, row);
        if matches!(value, ModeValue::Null) && !map.is_null(row) {
            let entries = map.value(row);
            let keys = entries.column(0).as_string::<i32>();
            let texts = entries.column(1).as_string::<i32>();
            for i in 0..entries.len() {
                if keys.value(i) == key {
                    let parsed = parse_stored(texts.value(i), key).map_err(external)?;
                    value = value_in_mode(Some(&parsed), mode);
                }
            }
        }
        values.push(value);
    }
    Ok(build_mode_array(mode, values.into_iter()))
}

fn scalar_at(array: &ArrayRef, row: usize) -> ModeValue {
    if array.is_null(row) {
        return ModeValue::Null;
    }
    match array.data_type() {
        DataType::Int64 => ModeValue::Int(
            array
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(row),
        ),
        DataType::Float64 => ModeValue::Float(
            array
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(row),
        ),
        DataType::Boolean => ModeValue::Bool(array.as_boolean().value(row)),
        DataType::Utf8 => ModeValue::Text(array.as_string::<i32>().value(row).to_owned()),
        DataType::Utf8View => ModeValue::Text(array.as_string_view().value(row).to_owned()),
        _ => ModeValue::Null,
    }
}

/// Parsed footers and page indexes of parts, kept across the statements of a session.
///
/// A part file is immutable and its name is never reused (ADR 0001), so an entry can never be
/// stale; merged-away parts simply stop being asked for. Parsing a footer with hundreds of
/// columns and their page index costs milliseconds, which would otherwise be paid by every
/// statement for every part.
#[derive(Debug, Default)]
pub struct PartMetadataCache {
    entries: std::sync::Mutex<std::collections::HashMap<PathBuf, CachedPart>>,
}

/// A part's verified footer and page index, and its checksums.
type CachedPart = (ArrowReaderMetadata, Option<Arc<PartChecksums>>);

impl PartMetadataCache {
    /// Entries kept before the cache starts over (bounds memory on very large tables).
    const MAX_ENTRIES: usize = 4096;

    fn get_or_load(
        &self,
        path: &Path,
        entry: &PartEntry,
    ) -> std::result::Result<CachedPart, strata_format::FormatError> {
        if let Ok(entries) = self.entries.lock()
            && let Some(found) = entries.get(path)
        {
            return Ok(found.clone());
        }
        let opened = strata_format::open_part(path, entry)?;
        let metadata = open_metadata(&opened.metadata).map_err(|source| {
            strata_format::FormatError::Parquet {
                path: path.to_owned(),
                source,
            }
        })?;
        let part = (metadata, opened.checksums);
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= Self::MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(path.to_owned(), part.clone());
        }
        Ok(part)
    }
}

/// The verified footer and page index with an Arrow schema that reads every string column as
/// `Utf8View`.
fn open_metadata(plain: &ArrowReaderMetadata) -> parquet::errors::Result<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    let fields: Vec<arrow::datatypes::FieldRef> = plain
        .schema()
        .fields()
        .iter()
        .map(|f| {
            if f.data_type() == &DataType::Utf8 {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View))
            } else {
                f.clone()
            }
        })
        .collect();
    let schema = Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        plain.schema().metadata().clone(),
    ));
    ArrowReaderMetadata::try_new(plain.metadata().clone(), options.with_schema(schema))
}

/// Min and max of page `page` from a column index, as bounds.
fn page_bounds(index: &ColumnIndexMetaData, page: usize) -> Option<(Bound, Bound)> {
    match index {
        ColumnIndexMetaData::BYTE_ARRAY(i) => {
            let min = std::str::from_utf8(i.min_value(page)?).ok()?;
            let max = std::str::from_utf8(i.max_value(page)?).ok()?;
            Some((Bound::Str(min.to_owned()), Bound::Str(max.to_owned())))
        }
        ColumnIndexMetaData::INT64(i) => Some((
            Bound::Int(*i.min_value(page)?),
            Bound::Int(*i.max_value(page)?),
        )),
        ColumnIndexMetaData::DOUBLE(i) => Some((
            Bound::Float(*i.min_value(page)?),
            Bound::Float(*i.max_value(page)?),
        )),
        ColumnIndexMetaData::BOOLEAN(i) => Some((
            Bound::Bool(*i.min_value(page)?),
            Bound::Bool(*i.max_value(page)?),
        )),
        _ => None,
    }
}

/// Row ranges of row group `rg` whose pages (granules) may match every predicate; None when no
/// predicate can use the page index.
fn page_selection(
    entry: &PartEntry,
    parquet: &parquet::file::metadata::ParquetMetaData,
    rg: usize,
    predicates: &[Predicate],
    counts: &mut PruneCounts,
) -> Option<Vec<Range<usize>>> {
    let (Some(column_index), Some(offset_index)) = (parquet.column_index(), parquet.offset_index())
    else {
        return None;
    };
    let group = parquet.row_group(rg);
    let rows = group.num_rows() as usize;
    let mut selected: Option<Vec<Range<usize>>> = None;
    for predicate in predicates {
        let column = predicate.column();
        if remainder_feeds(entry, &column.path, column.mode) {
            continue;
        }
        let Some(ci) = group.columns().iter().position(|c| {
            c.column_path().parts().len() == 1 && c.column_path().parts()[0] == column.path
        }) else {
            continue;
        };
        let (Some(index), Some(offsets)) = (
            column_index.get(rg).and_then(|c| c.get(ci)),
            offset_index.get(rg).and_then(|c| c.get(ci)),
        ) else {
            continue;
        };
        let pages = offsets.page_locations();
        let mut ranges: Vec<Range<usize>> = Vec::new();
        for (page, location) in pages.iter().enumerate() {
            let start = location.first_row_index as usize;
            let end = pages
                .get(page + 1)
                .map_or(rows, |next| next.first_row_index as usize);
            let keep = if index.is_null_page(page) {
                false
            } else {
                match page_bounds(index, page) {
                    Some((min, max)) => range_may_match(predicate, &min, &max),
                    None => true,
                }
            };
            if keep {
                match ranges.last_mut() {
                    Some(last) if last.end == start => last.end = end,
                    _ => ranges.push(start..end),
                }
            }
        }
        selected = Some(match selected {
            None => ranges,
            Some(previous) => intersect(&previous, &ranges),
        });
    }
    // Pruning is reported in granules (GRANULE_ROWS long, the writer's page row limit) so the
    // figures do not depend on how many pages each column happened to need.
    let granule = strata_format::part::GRANULE_ROWS;
    let granules = rows.div_ceil(granule);
    counts.pages_total += granules;
    if let Some(ranges) = &selected {
        let kept = (0..granules)
            .filter(|g| {
                let (start, end) = (g * granule, ((g + 1) * granule).min(rows));
                ranges.iter().any(|r| r.start < end && start < r.end)
            })
            .count();
        counts.pages_pruned += granules - kept;
    }
    selected
}

fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].start.max(b[j].start);
        let end = a[i].end.min(b[j].end);
        if start < end {
            out.push(start..end);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// One selection over the concatenated rows of the unit's row groups.
fn row_selection(
    parquet: &parquet::file::metadata::ParquetMetaData,
    row_groups: &[(usize, Option<Vec<Range<usize>>>)],
) -> RowSelection {
    let mut ranges = Vec::new();
    let mut offset = 0usize;
    for (rg, selection) in row_groups {
        let rows = parquet.row_group(*rg).num_rows() as usize;
        match selection {
            Some(selected) => {
                ranges.extend(selected.iter().map(|r| r.start + offset..r.end + offset))
            }
            None => ranges.push(offset..offset + rows),
        }
        offset += rows;
    }
    RowSelection::from_consecutive_ranges(ranges.into_iter(), offset)
}
