//! `ManifestRowsExec`: the scan of a statement that needs no column of a table and filters
//! none of its rows (`SELECT count(*) FROM t`, `SELECT 1 FROM t`): its rows, counted from the
//! manifest, with no file opened.
//!
//! The manifest lists each part's rows and the cardinality of its deletion vector, so the
//! table's live rows are known exactly before any footer is read. DataFusion's
//! `AggregateStatistics` rule answers `count(*)` from the exact row count this plan reports, so
//! the plan is usually not even executed; when it is, it produces that many rows of no columns.
//! A planned scan ([`super::StrataScanExec`]) would open every part's footer and checksum file
//! to plan row groups nobody reads: on a cold page cache, most of such a statement's time.
//!
//! Invariant: the row count is exact — the parts' rows less their deleted rows, of the manifest
//! the statement reads, cut at the scan's limit.

use std::fmt;
use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use strata_format::Manifest;

use super::BATCH_ROWS;

#[derive(Debug)]
pub struct ManifestRowsExec {
    table: String,
    rows: usize,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl ManifestRowsExec {
    /// The rows of `manifest` (at most `limit`) as a plan of the columnless `schema`.
    pub fn new(
        table: String,
        manifest: &Manifest,
        schema: SchemaRef,
        limit: Option<usize>,
    ) -> ManifestRowsExec {
        let rows = usize::try_from(manifest.rows()).unwrap_or(usize::MAX);
        let rows = limit.map_or(rows, |limit| rows.min(limit));
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        ManifestRowsExec {
            table,
            rows,
            schema,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for ManifestRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ManifestRowsExec: table={}, rows={} (from the manifest, no file read)",
            self.table, self.rows
        )
    }
}

impl ExecutionPlan for ManifestRowsExec {
    fn name(&self) -> &str {
        "ManifestRowsExec"
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

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::new(Statistics {
            num_rows: Precision::Exact(self.rows),
            total_byte_size: Precision::Exact(0),
            column_statistics: Vec::new(),
        }))
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let (schema, total) = (self.schema.clone(), self.rows);
        let batches = (0..total).step_by(BATCH_ROWS).map(move |start| {
            let rows = BATCH_ROWS.min(total - start);
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            RecordBatch::try_new_with_options(schema.clone(), Vec::new(), &options)
                .map_err(Into::into)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        )))
    }
}
