//! `StrataScanExec`: the execution plan node of a table scan — planning (pruning into access
//! plans, spreading them over partitions), display and metrics, and execution: each partition's
//! stream drives parquet's async reader over the data directory's object store, unit by unit,
//! and builds the outputs of each batch as the consumer polls it.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{Int32Type, SchemaRef};
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::ObjectStore;
use strata_format::Manifest;

use super::access_plan::{self, PartInScan, PruneCounts, ScanUnit};
use super::count::{self, Covering};
use super::deleted_rows::{deleted_rows_to_drop, without_rows};
use super::group_counter::GroupCounter;
use super::metadata_cache::PartMetadataCache;
use super::prune::ScanPredicate;
use super::prune::part::parts_to_scan;
use super::prune::{key_index, secondary_index, text_index};
use super::read::{
    OutputPlan, build_output, build_outputs, dictionary_source, open_unit, plan_output,
};
use super::reduce::RowReduction;
use super::row_filter::{FilterMetrics, row_filter};
use super::statistics::scan_statistics;
use super::top_order::{BestSoFar, OrderedUnit, in_key_order};
use super::{ScanOutput, part_error};
use crate::paths::PathColumn;

#[derive(Debug)]
pub struct StrataScanExec {
    table: String,
    outputs: Arc<Vec<ScanOutput>>,
    schema: SchemaRef,
    partitions: Vec<Vec<ScanUnit>>,
    predicate: ScanPredicate,
    limit: Option<usize>,
    /// Rows dropped before costly outputs are built (`reduce`), set by `BuildDocumentsLate`.
    reduction: Option<Arc<RowReduction>>,
    counts: PruneCounts,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
    /// Keeps the snapshot's parts on disk while the scan runs (`strata_engine::table`).
    lease: Option<Arc<strata_engine::ReadLease>>,
    /// The data directory's store; parts are read from it by their location.
    store: Arc<dyn ObjectStore>,
    /// Whether filters above the scan (and a window's top rows) are also evaluated in the
    /// decoder (`row_filter`): in a session that prunes; one that does not
    /// (`Session::open_without_pruning`) evaluates them only above, for comparison.
    filters_in_decoder: bool,
    /// The units' statistics, computed once: planning asks for them again and again (each
    /// optimizer rule that looks at its input's), and each time converts the footer statistics
    /// of every row group and column read — a fifth of planning a count from postings.
    statistics: Arc<StatisticsCache>,
    /// The table's sort key (encoded paths): each part's rows are in this order.
    sort_key: Arc<Vec<String>>,
}

/// The statistics of a scan's units, overall and per partition, computed when first asked for.
#[derive(Debug)]
struct StatisticsCache {
    whole: OnceLock<Statistics>,
    partitions: Vec<OnceLock<Statistics>>,
}

impl StatisticsCache {
    fn new(partitions: usize) -> Arc<StatisticsCache> {
        Arc::new(StatisticsCache {
            whole: OnceLock::new(),
            partitions: (0..partitions).map(|_| OnceLock::new()).collect(),
        })
    }
}

impl StrataScanExec {
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        table: String,
        dir: PathBuf,
        store: Arc<dyn ObjectStore>,
        manifest: &Manifest,
        columns: &[PathColumn],
        outputs: Vec<ScanOutput>,
        schema: SchemaRef,
        filters: &[Expr],
        limit: Option<usize>,
        target_partitions: usize,
        metadata_cache: &PartMetadataCache,
        filters_in_decoder: bool,
    ) -> Result<Self> {
        let predicate = ScanPredicate::new(filters, columns);
        let mut counts = PruneCounts {
            parts_total: manifest.parts.len(),
            ..Default::default()
        };
        let mut units = Vec::new();
        let parts_kept = parts_to_scan(&manifest.parts, &predicate);
        let wanted_keys = manifest
            .settings
            .key
            .as_ref()
            .and_then(|key| key_index::wanted_keys(&predicate, key));
        let index_lookups = secondary_index::index_lookups(&predicate, &manifest.settings.indexes);
        for (entry, kept) in manifest.parts.iter().zip(parts_kept) {
            if !kept {
                counts.parts_pruned += 1;
                counts.rows_pruned_by_parts += entry.rows as usize;
                continue;
            }
            let key_rows = match &wanted_keys {
                Some(keys) => key_index::key_rows(metadata_cache, &dir, entry, keys)
                    .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?,
                None => None,
            };
            if key_rows.as_ref().is_some_and(Vec::is_empty) {
                counts.parts_pruned += 1;
                counts.parts_pruned_by_key_index += 1;
                counts.rows_pruned_by_key_index += entry.rows as usize;
                continue;
            }
            let indexed_rows = match index_lookups.is_empty() {
                true => None,
                false => secondary_index::index_rows(&dir, entry, &index_lookups)
                    .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?,
            };
            if indexed_rows.as_ref().is_some_and(Vec::is_empty) {
                counts.parts_pruned += 1;
                counts.parts_pruned_by_secondary_index += 1;
                counts.rows_pruned_by_secondary_index += entry.rows as usize;
                continue;
            }
            let path = Manifest::part_path(&dir, &entry.file);
            let (metadata, checksums) = metadata_cache
                .get_or_load(&path, entry)
                .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?;
            let mut plan = access_plan::plan_part(entry, &metadata, &predicate, &mut counts);
            if let Some(rows) = &key_rows {
                access_plan::keep_key_rows(&mut plan, metadata.metadata(), rows, &mut counts);
            }
            if let Some(rows) = &indexed_rows {
                access_plan::keep_indexed_rows(&mut plan, metadata.metadata(), rows, &mut counts);
            }
            let index = if text_index::uses_text_index(entry, &predicate) {
                metadata_cache
                    .text_index(&dir, entry)
                    .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?
            } else {
                None
            };
            let text_rows = index
                .as_deref()
                .map(|index| text_index::text_rows(entry, index, &predicate))
                .transpose()
                .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?
                .flatten();
            if let Some(text_rows) = &text_rows {
                access_plan::keep_text_rows(
                    &mut plan,
                    metadata.metadata(),
                    &text_rows.kept,
                    text_rows.granules_pruned,
                    &mut counts,
                );
            }
            let deleted = metadata_cache
                .part_deletions(&dir, entry, metadata.metadata())
                .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?;
            if let Some(deleted) = &deleted {
                access_plan::skip_deleted(&mut plan, metadata.metadata(), deleted, &mut counts);
            }
            let part = Arc::new(PartInScan {
                entry: entry.clone(),
                path,
                location: Manifest::part_location(&table, &entry.file),
                metadata,
                checksums,
                deleted,
                matching_decides_lookups: text_rows.as_ref().is_some_and(|r| r.decides_lookups),
                text_matching: text_rows.and_then(|rows| rows.matching).map(Arc::new),
            });
            units.extend(access_plan::split_units(&part, plan));
        }
        counts.rows_total = manifest.parts.iter().map(|p| p.rows as usize).sum();
        let partitions = distribute(units, target_partitions);
        let partitions_len = partitions.len();
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
            predicate,
            limit,
            reduction: None,
            counts,
            metrics,
            properties: Arc::new(properties),
            lease: None,
            store,
            filters_in_decoder,
            statistics: StatisticsCache::new(partitions_len),
            sort_key: Arc::new(manifest.settings.sort_key.clone()),
        };
        scan.record_prune_counts();
        Ok(scan)
    }

    /// Holds `lease` until the scan and its streams are done.
    pub fn with_lease(mut self, lease: Option<Arc<strata_engine::ReadLease>>) -> Self {
        self.lease = lease;
        self
    }

    /// This scan, dropping rows as `reduction` says before building its costly outputs.
    ///
    /// A reduction that keeps the top rows also orders them: each partition hands up its top
    /// `fetch` rows sorted, in one batch, so the scan declares that order and the sort above
    /// it has nothing left to do (the `BuildDocumentsLate` rule removes it).
    pub(crate) fn with_reduction(&self, reduction: RowReduction) -> Self {
        let properties = match reduction
            .top
            .as_ref()
            .and_then(|t| t.ordering(&self.schema))
        {
            Some(order) => Arc::new(self.properties.as_ref().clone().with_eq_properties(
                EquivalenceProperties::new_with_orderings(self.schema.clone(), [[order]]),
            )),
            None => Arc::clone(&self.properties),
        };
        let scan = StrataScanExec {
            table: self.table.clone(),
            outputs: Arc::clone(&self.outputs),
            schema: Arc::clone(&self.schema),
            partitions: self.partitions.clone(),
            predicate: self.predicate.clone(),
            limit: self.limit,
            reduction: Some(Arc::new(reduction)),
            counts: self.counts,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
            lease: self.lease.clone(),
            store: Arc::clone(&self.store),
            filters_in_decoder: self.filters_in_decoder,
            // The same units: a reduction only makes the statistics inexact (below).
            statistics: Arc::clone(&self.statistics),
            sort_key: Arc::clone(&self.sort_key),
        };
        scan.record_prune_counts();
        scan
    }

    pub(crate) fn reduction(&self) -> Option<&RowReduction> {
        self.reduction.as_deref()
    }

    fn record_prune_counts(&self) {
        let c = self.counts;
        for (name, value) in [
            ("parts_total", c.parts_total),
            ("parts_pruned", c.parts_pruned),
            ("row_groups_total", c.row_groups_total),
            ("row_groups_pruned", c.row_groups_pruned()),
            (
                "row_groups_pruned_by_statistics",
                c.row_groups_pruned_by_statistics,
            ),
            (
                "row_groups_pruned_by_key_runs",
                c.row_groups_pruned_by_key_runs,
            ),
            ("granules_total", c.granules_total),
            ("granules_pruned", c.granules_pruned()),
            (
                "granules_pruned_by_statistics",
                c.granules_pruned_by_statistics,
            ),
            ("granules_pruned_by_key_runs", c.granules_pruned_by_key_runs),
            ("rows_total", c.rows_total),
            ("rows_pruned", c.rows_pruned()),
            ("rows_pruned_by_parts", c.rows_pruned_by_parts),
            ("rows_pruned_by_row_groups", c.rows_pruned_by_row_groups),
            ("rows_pruned_by_pages", c.rows_pruned_by_pages),
            ("rows_pruned_by_key_runs", c.rows_pruned_by_key_runs),
            ("rows_deleted", c.rows_deleted),
            ("parts_pruned_by_key_index", c.parts_pruned_by_key_index),
            ("rows_pruned_by_key_index", c.rows_pruned_by_key_index),
            (
                "granules_pruned_by_text_index",
                c.granules_pruned_by_text_index,
            ),
            ("rows_pruned_by_text_index", c.rows_pruned_by_text_index),
            (
                "parts_pruned_by_secondary_index",
                c.parts_pruned_by_secondary_index,
            ),
            (
                "rows_pruned_by_secondary_index",
                c.rows_pruned_by_secondary_index,
            ),
        ] {
            MetricBuilder::new(&self.metrics)
                .global_counter(name)
                .add(value);
        }
    }
}

/// Splits units, in order, into at most `n` partitions of similar row counts, keeping each
/// part's row groups together where possible so a partition opens each file once.
///
/// Each partition aims at an equal share of the rows not yet given out, and a unit starts the
/// next partition when more than half of it would lie past the current one's share: row groups
/// of 500,000, 500,000 and 100,000 rows over two partitions give 500,000 and 600,000 (filling
/// each partition up to its share first gave 1,000,000 and 100,000, one core idle for most of
/// the scan).
fn distribute(units: Vec<ScanUnit>, n: usize) -> Vec<Vec<ScanUnit>> {
    let rows: Vec<u64> = units.iter().map(|u| u.rows).collect();
    let starts = partition_starts(&rows, n);
    let mut partitions: Vec<Vec<ScanUnit>> = Vec::with_capacity(starts.len().max(1));
    partitions.push(Vec::new());
    for (index, unit) in units.into_iter().enumerate() {
        if index > 0 && starts.contains(&index) {
            partitions.push(Vec::new());
        }
        let Some(partition) = partitions.last_mut() else {
            continue;
        };
        match partition.last_mut() {
            Some(last) if Arc::ptr_eq(&last.part, &unit.part) => {
                access_plan::merge(&mut last.plan, &unit.plan);
                last.rows += unit.rows;
            }
            _ => partition.push(unit),
        }
    }
    partitions
}

/// The index of the first unit of each partition (see [`distribute`]), given the units' rows.
fn partition_starts(rows: &[u64], n: usize) -> Vec<usize> {
    let n = n.max(1) as u64;
    let mut remaining: u64 = rows.iter().sum();
    let mut starts = vec![0];
    let mut share = remaining.div_ceil(n);
    let mut filled = 0u64;
    for (index, &unit) in rows.iter().enumerate() {
        if index > 0 && (starts.len() as u64) < n && filled + unit / 2 > share {
            starts.push(index);
            share = remaining.div_ceil(n + 1 - starts.len() as u64);
            filled = 0;
        }
        filled += unit;
        remaining -= unit;
    }
    starts
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
            "StrataScanExec: table={}, columns=[{}], parts={}/{} (pruned {}), row_groups={}/{} (pruned {}: statistics {}, key runs {}), granules pruned={}/{} (statistics {}, key runs {}), rows pruned={}/{} (parts {}, row groups {}, pages {}, key runs {})",
            self.table,
            outputs.join(", "),
            c.parts_total - c.parts_pruned,
            c.parts_total,
            c.parts_pruned,
            c.row_groups_total - c.row_groups_pruned(),
            c.row_groups_total,
            c.row_groups_pruned(),
            c.row_groups_pruned_by_statistics,
            c.row_groups_pruned_by_key_runs,
            c.granules_pruned(),
            c.granules_total,
            c.granules_pruned_by_statistics,
            c.granules_pruned_by_key_runs,
            c.rows_pruned(),
            c.rows_total,
            c.rows_pruned_by_parts,
            c.rows_pruned_by_row_groups,
            c.rows_pruned_by_pages,
            c.rows_pruned_by_key_runs,
        )?;
        if c.rows_pruned_by_key_index > 0 || c.parts_pruned_by_key_index > 0 {
            write!(
                f,
                ", key index: parts pruned={}, rows pruned={}",
                c.parts_pruned_by_key_index, c.rows_pruned_by_key_index
            )?;
        }
        if c.rows_pruned_by_secondary_index > 0 || c.parts_pruned_by_secondary_index > 0 {
            write!(
                f,
                ", secondary index: parts pruned={}, rows pruned={}",
                c.parts_pruned_by_secondary_index, c.rows_pruned_by_secondary_index
            )?;
        }
        if c.rows_deleted > 0 {
            write!(f, ", deleted rows skipped={}", c.rows_deleted)?;
        }
        let predicate = self.predicate.to_string();
        if !predicate.is_empty() {
            write!(f, ", pruning_predicate={predicate}")?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        if let Some(reduction) = &self.reduction {
            write!(f, ", before building outputs: {reduction}")?;
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

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let (outputs, schema, limit) = (&self.outputs, &self.schema, self.limit);
        // Per partition: the units it reads; overall: all of them.
        let cached = match args.partition() {
            Some(p) => self.statistics.partitions.get(p),
            None => Some(&self.statistics.whole),
        };
        let compute = || match args.partition() {
            Some(p) => {
                let units = self.partitions.get(p).into_iter().flatten();
                scan_statistics(units, outputs, schema, limit)
            }
            None => scan_statistics(self.partitions.iter().flatten(), outputs, schema, limit),
        };
        let statistics = match cached {
            Some(cell) => cell.get_or_init(compute).clone(),
            None => compute(),
        };
        // A reduction drops rows the statistics count.
        let statistics = match self.reduction {
            Some(_) => statistics.to_inexact(),
            None => statistics,
        };
        Ok(Arc::new(statistics))
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
        let reduction = self.reduction.clone();
        let table = self.table.clone();
        let bytes_scanned = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let filter_metrics = self.filter_metrics(partition);
        let filters_in_decoder = self.filters_in_decoder;
        let lease = self.lease.clone();
        let store = self.store.clone();
        let stream_schema = schema.clone();
        let skipped_for_top =
            MetricBuilder::new(&self.metrics).counter("granules_skipped_for_top_rows", partition);
        // A top-k whose filter the decoder takes reads parts sorted by its key best pages
        // first, and skips the pages that cannot beat the rows kept (`top_order`).
        let best = BestSoFar::default();
        let top = reduction
            .as_ref()
            .filter(|_| filters_in_decoder)
            .and_then(|r| r.top.clone());
        let units: Vec<OrderedUnit> = match &top {
            Some(top) => match outputs.get(top.column) {
                Some(ScanOutput::Path(column)) => in_key_order(units, column, top),
                _ => units.into_iter().map(OrderedUnit::whole).collect(),
            },
            None => units.into_iter().map(OrderedUnit::whole).collect(),
        };
        let best_for_filters = best.clone();
        let merged_top = reduction.as_ref().and_then(|r| r.top.clone());
        let merge_schema = schema.clone();
        // Polled by whoever consumes the partition (DataFusion's own tasks), as its Parquet
        // source is: no task or channel of our own between the reader and the plan above.
        // Units are taken one at a time, after the one before was read whole, so each sees
        // the top rows its predecessors kept.
        let batches = futures::stream::iter(units)
            .filter(move |ordered| {
                let worth = top
                    .as_ref()
                    .is_none_or(|top| ordered.worth_reading(&best, top));
                if !worth {
                    skipped_for_top.add(ordered.granules());
                }
                futures::future::ready(worth)
            })
            .map(move |ordered| {
                let mut unit = ordered.unit;
                // The closure owns the lease, so the parts stay on disk while the stream lives.
                let _lease = &lease;
                let plans: Arc<[OutputPlan]> = outputs
                    .iter()
                    .map(|o| plan_output(&unit.part.entry, o))
                    .collect();
                let filter = reduction
                    .as_ref()
                    .filter(|_| filters_in_decoder)
                    .and_then(|r| {
                        let predicate = r.predicate.as_ref();
                        let top = r.top.as_ref().map(|top| (top, &best_for_filters));
                        row_filter(&unit, &plans, &schema, predicate, top, &filter_metrics)
                    });
                let mut deleted_rows = deleted_rows_to_drop(&mut unit, filter.is_some());
                let batches =
                    open_unit(&store, &unit, &plans, &table, &bytes_scanned, None, filter)?;
                let (table, schema, output_rows, reduction) = (
                    table.clone(),
                    schema.clone(),
                    output_rows.clone(),
                    reduction.clone(),
                );
                Ok::<_, DataFusionError>(batches.map(move |batch| {
                    let out: RecordBatch = batch
                        .map_err(DataFusionError::from)
                        .and_then(|batch| match &mut deleted_rows {
                            Some(rows) => rows.drop_from(&batch),
                            None => Ok(batch),
                        })
                        .and_then(|batch| match &reduction {
                            Some(reduction) => reduction.build(&batch, &plans, &schema),
                            None => build_outputs(&batch, &plans, &schema),
                        })
                        .map_err(|e| part_error(&table, &unit.part.path, e))?;
                    output_rows.add(out.num_rows());
                    Ok::<_, DataFusionError>(out)
                }))
            })
            .try_flatten();
        // The partition's top rows, sorted, as the order `with_reduction` declared. Batches
        // are cut back to the top `fetch` rows whenever twice that many are held, so a large
        // LIMIT holds about what DataFusion's own top-k sort would.
        let batches = match merged_top {
            Some(top) => futures::stream::once(async move {
                let (held, _) = batches
                    .try_fold((Vec::new(), 0usize), |(mut held, rows), batch| {
                        let rows = rows + batch.num_rows();
                        held.push(batch);
                        futures::future::ready(if rows > top.fetch.saturating_mul(2) {
                            top.merge(&merge_schema, &held).map(|kept| {
                                let rows = kept.as_ref().map_or(0, RecordBatch::num_rows);
                                (Vec::from_iter(kept), rows)
                            })
                        } else {
                            Ok((held, rows))
                        })
                    })
                    .await?;
                top.merge(&merge_schema, &held)
            })
            .try_filter_map(|batch| futures::future::ready(Ok(batch)))
            .boxed(),
            None => batches.boxed(),
        };
        let batches = stop_after_rows(batches, limit);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            stream_schema,
            batches,
        )))
    }
}

/// Ends `batches` once `limit` rows have been produced (the limit pushed into the scan), without
/// reading a batch past it.
fn stop_after_rows(
    batches: impl Stream<Item = Result<RecordBatch>> + Send + 'static,
    limit: Option<usize>,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    futures::stream::unfold(
        (Box::pin(batches), 0usize),
        move |(mut batches, produced)| async move {
            if limit.is_some_and(|l| produced >= l) {
                return None;
            }
            let batch = batches.next().await?;
            let rows = batch.as_ref().map_or(0, RecordBatch::num_rows);
            Some((batch, (batches, produced + rows)))
        },
    )
}

impl StrataScanExec {
    /// The counters of filters evaluated in the decoder (`row_filter`), for `EXPLAIN ANALYZE`:
    /// rows dropped, and rows decided by dictionary key.
    fn filter_metrics(&self, partition: usize) -> FilterMetrics {
        FilterMetrics {
            rows_filtered: MetricBuilder::new(&self.metrics)
                .counter("rows_filtered_in_decoder", partition),
            rows_by_key: MetricBuilder::new(&self.metrics)
                .counter("rows_compared_by_dictionary_key", partition),
        }
    }

    /// The row limit pushed into the scan.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The table's sort key (encoded paths): the order of each part's rows.
    pub(crate) fn sort_key(&self) -> &[String] {
        &self.sort_key
    }

    /// The scan's outputs, in schema order.
    pub(crate) fn outputs(&self) -> &[ScanOutput] {
        &self.outputs
    }

    /// The first phase of `count(*) … WHERE filter` over this scan, for one partition: one
    /// batch of `result_schema` with the count once per count aggregate. Row groups `covering`
    /// proves wholly inside the filter are counted from their statistics (`count`); the others
    /// are read and `filter` (over the scan's outputs) evaluated.
    pub(crate) fn execute_count_matching(
        &self,
        partition: usize,
        filter: Arc<dyn PhysicalExpr>,
        covering: Arc<Covering>,
        result_schema: SchemaRef,
    ) -> Result<SendableRecordBatchStream> {
        let units = self.partitions.get(partition).cloned().unwrap_or_default();
        let probed: Vec<usize> = collect_columns(&filter).iter().map(|c| c.index()).collect();
        let reduction = RowReduction {
            predicate: Some(Arc::clone(&filter)),
            top: None,
            probed,
        };
        let (outputs, schema, table) = (
            self.outputs.clone(),
            self.schema.clone(),
            self.table.clone(),
        );
        let predicate = self.predicate.clone();
        let bytes_scanned = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let decide = count::PostingsDecide {
            text: covering.text_searches_are_the_scans(&self.predicate),
            lookups: covering.lookups_are_the_scans(&self.predicate),
        };
        // Counted rows are told apart by what covered the filter's text searches or keyword
        // lookups, if it has any.
        let by_keywords = decide.lookups && units.iter().any(|u| u.part.matching_decides_lookups);
        let from_statistics = MetricBuilder::new(&self.metrics).counter(
            match (covering.has_text_searches(), by_keywords) {
                (true, _) => "rows_counted_from_text_postings",
                (false, true) => "rows_counted_from_keyword_postings",
                (false, false) => "rows_counted_from_statistics",
            },
            partition,
        );
        let filter_metrics = self.filter_metrics(partition);
        let filters_in_decoder = self.filters_in_decoder;
        let mut builder = RecordBatchReceiverStreamBuilder::new(result_schema.clone(), 2);
        let tx = builder.tx();
        let (lease, store) = (self.lease.clone(), self.store.clone());
        builder.spawn(async move {
            let _lease = lease;
            let mut total = 0u64;
            for unit in units {
                let (counted, rest) = count::split_covered(&unit, &covering, &predicate, decide);
                from_statistics.add(counted as usize);
                total += counted;
                let Some(mut rest) = rest else {
                    continue;
                };
                let plans: Arc<[OutputPlan]> = outputs
                    .iter()
                    .map(|o| plan_output(&rest.part.entry, o))
                    .collect();
                let filter = match filters_in_decoder {
                    true => {
                        row_filter(&rest, &plans, &schema, Some(&filter), None, &filter_metrics)
                    }
                    false => None,
                };
                // When the decoder evaluates the whole filter, the rows it keeps are counted
                // without reading any column for them.
                let complete = filter.as_ref().is_some_and(|f| f.complete);
                let read: &[OutputPlan] = if complete { &[] } else { &plans };
                let mut deleted_rows = deleted_rows_to_drop(&mut rest, filter.is_some());
                let mut batches =
                    open_unit(&store, &rest, read, &table, &bytes_scanned, None, filter)?;
                while let Some(batch) = batches.next().await {
                    let rows = batch
                        .map_err(DataFusionError::from)
                        .and_then(|batch| match &mut deleted_rows {
                            Some(rows) => rows.drop_from(&batch),
                            None => Ok(batch),
                        })
                        .and_then(|batch| match complete {
                            true => Ok(batch.num_rows()),
                            false => reduction.surviving_rows(&batch, &plans, &schema),
                        })
                        .map_err(|e| part_error(&table, &rest.part.path, e))?;
                    output_rows.add(rows);
                    total += rows as u64;
                }
            }
            let count = i64::try_from(total)
                .map_err(|_| DataFusionError::Internal(format!("count {total} overflows")))?;
            let columns: Vec<ArrayRef> = result_schema
                .fields()
                .iter()
                .map(|_| Arc::new(Int64Array::from(vec![count])) as ArrayRef)
                .collect();
            let out = RecordBatch::try_new(result_schema, columns)?;
            let _ = tx.send(Ok(out)).await; // Err: the consumer has gone away
            Ok(())
        });
        Ok(builder.build())
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
        let lease = self.lease.clone();
        let store = self.store.clone();
        builder.spawn(async move {
            let _lease = lease;
            let mut counter = GroupCounter::default();
            for mut unit in units {
                let plan = plan_output(&unit.part.entry, &output);
                let dictionary = dictionary_source(&unit.part.entry, &plan);
                // Keys of deleted rows the plan reads are taken back (see `deleted_rows`).
                let mut deleted_rows = deleted_rows_to_drop(&mut unit, false);
                let mut batches = open_unit(
                    &store,
                    &unit,
                    std::slice::from_ref(&plan),
                    &table,
                    &bytes_scanned,
                    dictionary,
                    None,
                )?;
                while let Some(batch) = batches.next().await {
                    let mut batch = batch
                        .map_err(DataFusionError::from)
                        .map_err(|e| part_error(&table, &unit.part.path, e))?;
                    let deleted = match &mut deleted_rows {
                        Some(rows) => rows.next_batch(batch.num_rows()),
                        None => Vec::new(),
                    };
                    output_rows.add(batch.num_rows() - deleted.len());
                    let keys = dictionary
                        .and_then(|c| batch.column_by_name(c))
                        .and_then(|a| a.as_dictionary_opt::<Int32Type>());
                    match keys {
                        Some(keys) => {
                            rows_by_key.add(keys.len() - deleted.len());
                            counter.add_dictionary(keys);
                            counter.remove_dictionary_rows(keys, &deleted);
                        }
                        None => {
                            if !deleted.is_empty() {
                                batch = without_rows(&batch, &deleted)
                                    .map_err(|e| part_error(&table, &unit.part.path, e))?;
                            }
                            let values = build_output(&batch, &plan)
                                .map_err(|e| part_error(&table, &unit.part.path, e))?;
                            counter.add_strings(&values)?;
                        }
                    }
                    if counter.len() >= GroupCounter::MAX_GROUPS {
                        let out = counter.emit(&result_schema)?;
                        if tx.send(Ok(out)).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
            let out = counter.emit(&result_schema)?;
            let _ = tx.send(Ok(out)).await; // Err: the consumer has gone away
            Ok(())
        });
        Ok(builder.build())
    }
}

#[cfg(test)]
mod tests {
    use super::partition_starts;

    #[test]
    fn partitions_take_equal_shares_of_the_rows() {
        // A large part's two row groups and a small part of changes.
        assert_eq!(
            partition_starts(&[500_000, 500_000, 100_000], 2),
            vec![0, 1]
        );
        assert_eq!(partition_starts(&[400, 400, 400], 2), vec![0, 2]);
        assert_eq!(
            partition_starts(&[10, 10, 10, 10, 10, 10], 3),
            vec![0, 2, 4]
        );
        // A unit larger than a share ends its partition; later ones share what remains.
        assert_eq!(partition_starts(&[900, 50, 50, 50, 50], 2), vec![0, 1]);
        assert_eq!(partition_starts(&[5], 4), vec![0]);
        assert_eq!(partition_starts(&[], 2), vec![0]);
    }
}
