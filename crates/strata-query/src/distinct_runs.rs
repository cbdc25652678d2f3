//! `GROUP BY <path> ... count(DISTINCT <path>)` whose partial phase collects runs instead of
//! hashing every row.
//!
//! DataFusion's partial phase of `count(DISTINCT x)` inserts every row's `x` into a hash set of
//! its group, and its final phase inserts each partial set's values into the group's set again.
//! On a table sorted by the grouped path and then by `x` (JSONBench Q2: grouped by
//! `commit.collection`, distinct `did`, sorted by `kind, commit.operation, commit.collection,
//! did, time_us`) a part's rows of one group hold each `x` in one run, so the partial phase can
//! keep each run's first value — what the set would hold — by comparing a row with the one
//! before it. [`DistinctRuns`] puts [`DistinctRunsExec`] in place of that partial phase; the
//! final phase is DataFusion's own and untouched.
//!
//! Invariants:
//! - the replacement emits the replaced node's schema and partitioning: per group, each plain
//!   count as Int64 and each distinct count's state as the list of values DataFusion's count
//!   distinct accumulator merges;
//! - every non-NULL value of a group's rows is in its list, NULLs never: the final phase puts
//!   the lists into sets, so a value listed twice (rows out of order: parts of one partition,
//!   filters that skip rows, a table not sorted so) counts once, and answers never depend on
//!   the order. The order only decides how long the lists get, which is why the rule asks for
//!   the grouped path followed by the distinct path in the table's sort key: the lists are then
//!   about as long as the sets they replace;
//! - only `count(*)`/`count(<literal>)` and `count(DISTINCT <string path>)` of one grouped string
//!   path, without FILTER, ordering, grouping sets or a limit, are replaced.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, ListArray, RecordBatch, StringArray, StringBuilder,
    StringViewArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, FieldRef, SchemaRef};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;

use crate::partial_count::{
    CountInScan, PartialCountExec, is_count_star, partial_grouping_over_scan, replace_nodes,
    string_path,
};
use crate::scan::StrataScanExec;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct DistinctRuns;

impl PhysicalOptimizerRule for DistinctRuns {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_nodes(plan, replacing)
    }

    fn name(&self) -> &str {
        "strata_distinct_runs"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// One aggregate of the replaced partial phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// `count(*)`: the group's rows.
    Rows,
    /// `count(DISTINCT <input column>)`: the group's values of that column, as runs.
    Distinct(usize),
}

/// The partial phase of a grouped aggregation of plain and distinct counts, by runs.
pub type DistinctRunsExec = PartialCountExec<ByRuns>;

/// Counting a scan's rows by group, and the runs of the distinct counts' columns.
#[derive(Debug)]
pub struct ByRuns {
    /// The scan output grouped by.
    group: usize,
    counted: Arc<Vec<Counted>>,
}

impl CountInScan for ByRuns {
    const NAME: &'static str = "DistinctRunsExec";

    fn describe(&self, schema: &SchemaRef, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(f, "gby=[{}], aggr=[{}]", names[0], names[1..].join(", "))
    }

    fn execute(
        &self,
        scan: &StrataScanExec,
        partition: usize,
        schema: SchemaRef,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let mut input = ExecutionPlan::execute(scan, partition, context)?;
        let (group, counted, state) = (self.group, self.counted.clone(), schema.clone());
        let output = async move {
            let mut groups = Groups::new(counted.len());
            while let Some(batch) = input.next().await {
                groups.add(&batch?, group, &counted)?;
            }
            groups.finish(&state, &counted)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(output),
        )))
    }
}

/// One group's counts so far: its rows (`count(*)`), and per aggregate the first value of each
/// run of its column (`count(DISTINCT)`; the last of them is the value of the group's last row
/// that had one).
struct GroupCounts {
    rows: i64,
    runs: Vec<RunHeads>,
}

/// The first value of each run, in one buffer: hundreds of thousands of short values (a
/// user id per run) would otherwise be as many allocations.
#[derive(Debug, Clone, Default)]
struct RunHeads {
    bytes: String,
    /// Where each value ends in `bytes`.
    ends: Vec<usize>,
}

impl RunHeads {
    fn last(&self) -> Option<&str> {
        let end = *self.ends.last()?;
        let start = self.ends.len().checked_sub(2).map_or(0, |i| self.ends[i]);
        self.bytes.get(start..end)
    }

    /// Adds `value` unless it is the last value added (the run goes on).
    fn extend_with(&mut self, value: &str) {
        if self.last() != Some(value) {
            self.bytes.push_str(value);
            self.ends.push(self.bytes.len());
        }
    }

    fn values(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| self.bytes.get(start..end).unwrap_or_default())
    }
}

/// The groups of one partition, in the order they first appeared.
struct Groups {
    keys: Vec<Option<String>>,
    counts: Vec<GroupCounts>,
    index: HashMap<Option<String>, usize>,
    /// Aggregates per group.
    width: usize,
}

impl Groups {
    fn new(width: usize) -> Groups {
        Groups {
            keys: Vec::new(),
            counts: Vec::new(),
            index: HashMap::new(),
            width,
        }
    }

    fn slot(&mut self, key: Option<&str>) -> usize {
        if let Some(&slot) = self.index.get(&key.map(str::to_owned)) {
            return slot;
        }
        let slot = self.keys.len();
        self.keys.push(key.map(str::to_owned));
        self.counts.push(GroupCounts {
            rows: 0,
            runs: vec![RunHeads::default(); self.width],
        });
        self.index.insert(key.map(str::to_owned), slot);
        slot
    }

    /// Counts `batch`'s rows: grouped by its column `group`, distinct values of the columns
    /// `counted` names.
    fn add(&mut self, batch: &RecordBatch, group: usize, counted: &[Counted]) -> Result<()> {
        let as_strings = |index: usize| -> Result<ArrayRef> {
            let column = batch.columns().get(index).ok_or_else(|| {
                DataFusionError::Internal(format!("DistinctRunsExec: no input column {index}"))
            })?;
            Ok(cast(column, &DataType::Utf8View)?)
        };
        let keys = as_strings(group)?;
        let keys = keys.as_string_view();
        let values: Vec<Option<ArrayRef>> = counted
            .iter()
            .map(|c| match c {
                Counted::Rows => Ok(None),
                Counted::Distinct(column) => as_strings(*column).map(Some),
            })
            .collect::<Result<_>>()?;
        let values: Vec<Option<&StringViewArray>> = values
            .iter()
            .map(|v| v.as_ref().map(|v| v.as_string_view()))
            .collect();
        // Rows of one group come together on a sorted table: the map is asked only when the
        // group changes.
        let mut current: Option<(Option<&str>, usize)> = None;
        for row in 0..batch.num_rows() {
            let key = keys.is_valid(row).then(|| keys.value(row));
            let slot = match current {
                Some((seen, slot)) if seen == key => slot,
                _ => {
                    let slot = self.slot(key);
                    current = Some((key, slot));
                    slot
                }
            };
            let counts = &mut self.counts[slot];
            counts.rows += 1;
            for (values, heads) in values.iter().zip(counts.runs.iter_mut()) {
                let Some(values) = values else { continue };
                if values.is_null(row) {
                    continue;
                }
                heads.extend_with(values.value(row));
            }
        }
        Ok(())
    }

    /// The partial state: the groups, then per aggregate its counts or its lists of values.
    fn finish(self, schema: &SchemaRef, counted: &[Counted]) -> Result<RecordBatch> {
        let fields = schema.fields();
        let keys = StringArray::from(self.keys);
        let mut columns = vec![cast(&keys, fields[0].data_type())?];
        for (index, counted) in counted.iter().enumerate() {
            let field = &fields[1 + index];
            columns.push(match counted {
                Counted::Rows => Arc::new(Int64Array::from_iter_values(
                    self.counts.iter().map(|c| c.rows),
                )),
                Counted::Distinct(_) => value_lists(&self.counts, index, field)?,
            });
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// Aggregate `index`'s run values of every group, as a list per group typed as `field`.
fn value_lists(counts: &[GroupCounts], index: usize, field: &FieldRef) -> Result<ArrayRef> {
    let DataType::List(item) = field.data_type() else {
        return Err(DataFusionError::Internal(format!(
            "DistinctRunsExec: {} is not a list",
            field.name()
        )));
    };
    let lists = counts.iter().map(|c| &c.runs[index]);
    let offsets = OffsetBuffer::from_lengths(lists.clone().map(|heads| heads.ends.len()));
    let (count, bytes) = lists.clone().fold((0, 0), |(n, b), heads| {
        (n + heads.ends.len(), b + heads.bytes.len())
    });
    let mut values = StringBuilder::with_capacity(count, bytes);
    for value in lists.flat_map(RunHeads::values) {
        values.append_value(value);
    }
    let values = values.finish();
    let values = cast(&values, item.data_type())?;
    Ok(Arc::new(ListArray::try_new(
        item.clone(),
        offsets,
        values,
        None,
    )?))
}

/// The replacement for `node`, when it is the partial phase of plain and distinct counts
/// grouped by one string path of a Strata scan whose table is sorted by the grouped path and
/// then by each distinct one.
fn replacing(node: &Arc<dyn ExecutionPlan>) -> Option<DistinctRunsExec> {
    let (aggregate, scan, group) = partial_grouping_over_scan(node)?;
    let group_path = string_path(scan, group)?;
    let counted: Vec<Counted> = aggregate
        .aggr_expr()
        .iter()
        .map(|a| counted(a, scan, group_path))
        .collect::<Option<_>>()?;
    if !counted.iter().any(|c| matches!(c, Counted::Distinct(_))) {
        return None;
    }
    let schema = aggregate.schema();
    let states_fit = schema.fields().len() == 1 + counted.len()
        && schema
            .fields()
            .iter()
            .skip(1)
            .zip(&counted)
            .all(|(field, c)| match c {
                Counted::Rows => field.data_type() == &DataType::Int64,
                Counted::Distinct(_) => matches!(field.data_type(), DataType::List(_)),
            });
    if !states_fit {
        return None;
    }
    Some(PartialCountExec::new(
        aggregate.input().clone(),
        ByRuns {
            group,
            counted: Arc::new(counted),
        },
        schema,
    ))
}

/// What `aggregate` counts, when it is `count(*)`, or `count(DISTINCT <string path>)` of a path
/// that follows `group_path` in the table's sort key.
fn counted(
    aggregate: &AggregateFunctionExpr,
    scan: &StrataScanExec,
    group_path: &str,
) -> Option<Counted> {
    if is_count_star(aggregate) {
        return Some(Counted::Rows);
    }
    let arguments = aggregate.expressions();
    let [argument] = arguments.as_slice() else {
        return None;
    };
    if aggregate.fun().name() != "count"
        || !aggregate.is_distinct()
        || !aggregate.order_bys().is_empty()
    {
        return None;
    }
    let column = argument.downcast_ref::<Column>()?.index();
    let path = string_path(scan, column)?;
    let sort_key = scan.sort_key();
    let follows = sort_key
        .windows(2)
        .any(|pair| pair[0] == group_path && pair[1] == path);
    follows.then_some(Counted::Distinct(column))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(rows: &[(Option<&str>, Option<&str>)]) -> RecordBatch {
        let groups: StringArray = rows.iter().map(|r| r.0).collect();
        let values: StringArray = rows.iter().map(|r| r.1).collect();
        RecordBatch::try_from_iter([
            ("g", Arc::new(groups) as ArrayRef),
            ("v", Arc::new(values) as ArrayRef),
        ])
        .unwrap()
    }

    fn state_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
            Field::new_list("d", Field::new_list_field(DataType::Utf8View, true), false),
        ]))
    }

    /// Per group: its rows and its distinct non-NULL values, from the emitted state.
    fn counted_by_group(batches: &[RecordBatch]) -> Vec<(Option<String>, i64, Vec<String>)> {
        let counted = [Counted::Rows, Counted::Distinct(1)];
        let mut groups = Groups::new(counted.len());
        for b in batches {
            groups.add(b, 0, &counted).unwrap();
        }
        let state = groups.finish(&state_schema(), &counted).unwrap();
        let keys = state.column(0).as_string_view();
        let rows = state
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>();
        let lists = state.column(2).as_list::<i32>();
        let mut out: Vec<_> = (0..state.num_rows())
            .map(|i| {
                let list = lists.value(i);
                let mut values: Vec<String> = list
                    .as_string_view()
                    .iter()
                    .map(|v| v.unwrap().to_owned())
                    .collect();
                values.sort();
                (
                    keys.is_valid(i).then(|| keys.value(i).to_owned()),
                    rows.value(i),
                    values,
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn sorted_rows_list_each_value_once_across_batches() {
        let first = batch(&[
            (Some("a"), Some("x")),
            (Some("a"), Some("x")),
            (Some("a"), Some("y")),
        ]);
        // The run of `y` goes on in the next batch; `b` starts after it.
        let second = batch(&[
            (Some("a"), Some("y")),
            (Some("b"), Some("x")),
            (Some("b"), None),
        ]);
        assert_eq!(
            counted_by_group(&[first, second]),
            vec![
                (Some("a".into()), 4, vec!["x".into(), "y".into()]),
                (Some("b".into()), 2, vec!["x".into()]),
            ]
        );
    }

    #[test]
    fn unsorted_rows_list_every_value_nulls_never() {
        // Rows out of order list a value once per run; the final phase's sets count it once.
        let rows = batch(&[
            (Some("a"), Some("x")),
            (None, Some("z")),
            (Some("a"), Some("y")),
            (Some("a"), Some("x")),
            (None, None),
            (Some("a"), None),
        ]);
        let got = counted_by_group(&[rows]);
        assert_eq!(got[0], (None, 2, vec!["z".into()]));
        let (key, rows, values) = &got[1];
        assert_eq!((key.as_deref(), *rows), (Some("a"), 4));
        let mut distinct = values.clone();
        distinct.dedup();
        assert_eq!(distinct, vec!["x".to_owned(), "y".to_owned()]);
        assert!(values.len() >= distinct.len());
    }
}
