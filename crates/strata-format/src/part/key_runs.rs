//! Key runs: the runs of equal leading sort-key values a part records in its manifest entry.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;
use serde_json::Value;
use strata_json::Kind;

use super::writer::PartSchema;
use crate::manifest::{KeyRun, KeyRuns};

/// Runs per part are bounded so manifests stay small: at most this many, and on average at least
/// [`MIN_KEY_RUN_ROWS`] rows each (but 16 runs are always allowed). Runs much shorter than a
/// granule would add manifest bytes for little pruning; a prefix of the sort key with more
/// combinations in a part is not indexed (its granules still prune by page statistics).
pub const MAX_KEY_RUNS: usize = 256;
pub const MIN_KEY_RUN_ROWS: usize = 64;

/// Finds the runs of the longest sort-key prefix within the bounds above, batch by batch.
///
/// Only paths held entirely in one typed string, integer or boolean column qualify (a value in
/// the remainder would be invisible to the runs), and the prefix stops at the first path that
/// does not. Per prefix length, run starts are kept until there are more than [`MAX_KEY_RUNS`];
/// longer prefixes have at least as many runs, so tracking stops there too.
#[derive(Clone)]
pub(super) struct KeyRunTracker {
    paths: Vec<String>,
    /// Run starts (row, values of the prefix) per prefix length - 1, for the lengths still
    /// within bounds.
    starts: Vec<Vec<(u64, Vec<Value>)>>,
    /// The previous batch's last row of each qualifying column.
    last: Option<Vec<ArrayRef>>,
    rows: u64,
}

impl KeyRunTracker {
    pub(super) fn new(layout: &PartSchema, sort_key: &[String]) -> Self {
        let mut paths = Vec::new();
        if !layout.remainder_paths_truncated {
            for name in sort_key {
                let in_remainder = layout
                    .remainder_paths
                    .get(name)
                    .is_some_and(|kinds| kinds.iter().any(|k| *k != Kind::Null));
                let typed = layout.schema.field_with_name(name).is_ok_and(|f| {
                    matches!(
                        f.data_type(),
                        DataType::Utf8 | DataType::Utf8View | DataType::Int64 | DataType::Boolean
                    )
                });
                if in_remainder || !typed {
                    break;
                }
                paths.push(name.clone());
            }
        }
        KeyRunTracker {
            starts: vec![Vec::new(); paths.len()],
            paths,
            last: None,
            rows: 0,
        }
    }

    pub(super) fn observe(&mut self, batch: &RecordBatch) -> Result<(), arrow::error::ArrowError> {
        let n = batch.num_rows();
        if n == 0 || self.starts.is_empty() {
            self.rows += n as u64;
            return Ok(());
        }
        let mut columns = Vec::with_capacity(self.starts.len());
        for name in &self.paths[..self.starts.len()] {
            columns.push(batch.column_by_name(name).cloned().ok_or_else(|| {
                arrow::error::ArrowError::SchemaError(format!("sort-key column {name} missing"))
            })?);
        }
        // changed[i]: row i starts a run of the prefix examined so far.
        let mut changed = vec![false; n];
        changed[0] = self.last.is_none();
        for depth in 0..columns.len() {
            let column = &columns[depth];
            if let Some(last) = &self.last {
                changed[0] |=
                    arrow::compute::kernels::cmp::distinct(&column.slice(0, 1), &last[depth])?
                        .value(0);
            }
            if n > 1 {
                let differs = arrow::compute::kernels::cmp::distinct(
                    &column.slice(1, n - 1),
                    &column.slice(0, n - 1),
                )?;
                for (flag, differs) in changed[1..].iter_mut().zip(differs.values().iter()) {
                    *flag |= differs;
                }
            }
            let starts = &mut self.starts[depth];
            for row in (0..n).filter(|&row| changed[row]) {
                if starts.len() > MAX_KEY_RUNS {
                    break;
                }
                let values = columns[..=depth]
                    .iter()
                    .map(|c| scalar_json(c, row))
                    .collect();
                starts.push((self.rows + row as u64, values));
            }
            if starts.len() > MAX_KEY_RUNS {
                self.starts.truncate(depth);
                break;
            }
        }
        self.last = Some(
            columns[..self.starts.len()]
                .iter()
                .map(|c| c.slice(n - 1, 1))
                .collect(),
        );
        self.rows += n as u64;
        Ok(())
    }

    pub(super) fn finish(self) -> Option<KeyRuns> {
        let rows = self.rows;
        if rows == 0 {
            return None;
        }
        let limit = ((rows as usize) / MIN_KEY_RUN_ROWS).clamp(16, MAX_KEY_RUNS);
        let depth = self.starts.iter().rposition(|s| s.len() <= limit)?;
        let mut paths = self.paths;
        paths.truncate(depth + 1);
        let starts = self.starts.into_iter().nth(depth)?;
        let ends: Vec<u64> = starts
            .iter()
            .skip(1)
            .map(|(start, _)| *start)
            .chain(std::iter::once(rows))
            .collect();
        let runs = starts
            .into_iter()
            .zip(ends)
            .map(|((start, values), end)| KeyRun {
                values,
                start,
                rows: end - start,
            })
            .collect();
        Some(KeyRuns { paths, runs })
    }
}

/// The value at `row` of a string, integer or boolean column as JSON.
fn scalar_json(array: &ArrayRef, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).into(),
        DataType::Utf8View => array.as_string_view().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
        DataType::Boolean => array.as_boolean().value(row).into(),
        _ => Value::Null,
    }
}
