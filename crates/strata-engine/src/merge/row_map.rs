//! Where each row of a merge's output came from, so that deletions committed to its inputs
//! while the merge wrote it can be carried onto the output instead of making the merge give up
//! or run again under the table's writer lock (ADR 0017, "Deletions committed during a merge
//! are carried onto its output").
//!
//! A merge reads each input's rows that were not deleted when it read them (its *live* rows, in
//! order) and interleaves them by the sort key, taking runs of consecutive rows from one input;
//! the map keeps those runs. A row deleted since is found by its rank among the input's live
//! rows at the time of reading, and the map gives the output row that holds it.
//!
//! Invariants: every output row is in exactly one run, and each input's runs are in the order
//! of its live rows (an input is read front to back). A map of more than [`MAX_RUNS`] runs is
//! dropped (inputs interleaved row by row in a very large merge): the merge then behaves as
//! without one.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use strata_format::PartEntry;
use strata_format::deletes::{DeletionVector, deletion_vector};

use crate::error::EngineError;

/// At 24 bytes a run, a map of this many runs takes about 24 MiB.
const MAX_RUNS: usize = 1 << 20;

/// Consecutive live rows of one input that went to consecutive output rows.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The rank of the first among the input's live rows.
    live_start: u64,
    output_start: u64,
    rows: u64,
}

/// The runs of a merge's inputs (see the module docs).
#[derive(Debug)]
pub(super) struct RowMap {
    /// Per input, the rows deleted when the merge read it (its live rows are the others).
    deleted_then: Vec<Option<Arc<DeletionVector>>>,
    /// Per input, in the order of its live rows.
    runs: Vec<Vec<Run>>,
    total_runs: usize,
    /// Rows taken from each input so far.
    taken: Vec<u64>,
    /// Output rows so far.
    written: u64,
    overflowed: bool,
}

impl RowMap {
    /// The map of a merge of inputs that had the rows `deleted_then` deleted when it read them.
    pub(super) fn new(deleted_then: Vec<Option<Arc<DeletionVector>>>) -> RowMap {
        let inputs = deleted_then.len();
        RowMap {
            deleted_then,
            runs: vec![Vec::new(); inputs],
            total_runs: 0,
            taken: vec![0; inputs],
            written: 0,
            overflowed: false,
        }
    }

    /// Records that the next output row is the next live row of input `input`.
    pub(super) fn take(&mut self, input: usize) {
        if self.overflowed {
            return;
        }
        let (Some(taken), Some(runs)) = (self.taken.get_mut(input), self.runs.get_mut(input))
        else {
            // Not an input of this map: it can no longer say where rows came from.
            self.overflowed = true;
            return;
        };
        let live = *taken;
        *taken += 1;
        let output = self.written;
        self.written += 1;
        match runs.last_mut() {
            Some(run)
                if run.live_start + run.rows == live && run.output_start + run.rows == output =>
            {
                run.rows += 1;
            }
            _ => {
                runs.push(Run {
                    live_start: live,
                    output_start: output,
                    rows: 1,
                });
                self.total_runs += 1;
                if self.total_runs > MAX_RUNS {
                    self.overflowed = true;
                    self.runs = Vec::new();
                }
            }
        }
    }

    /// The map, unless it grew too large to keep.
    pub(super) fn finish(self) -> Option<RowMap> {
        (!self.overflowed).then_some(self)
    }

    /// The output row holding input `input`'s live row of rank `live`.
    fn output_row(&self, input: usize, live: u64) -> Option<u64> {
        let runs = self.runs.get(input)?;
        let after = runs.partition_point(|run| run.live_start <= live);
        let run = runs.get(after.checked_sub(1)?)?;
        (live < run.live_start + run.rows).then(|| run.output_start + (live - run.live_start))
    }
}

/// The rows of a merge's output to delete so that it shows the deletions `now` (the table's
/// parts at commit, by file) has on the merge's inputs (`inputs`, as the merge read them) and
/// they had not then: empty when none has any. None when they cannot be carried: an input is no
/// longer listed or changed other than by deleting rows, or there is no map (`map`) of the
/// output's rows. The vectors of `now` are read (they are listed, so on disk or held); those
/// of the time of reading come with the map (a commit since may have retired their files).
pub(super) fn carried_deletions(
    table_dir: &Path,
    inputs: &[Arc<PartEntry>],
    now: &HashMap<&str, &Arc<PartEntry>>,
    map: Option<&RowMap>,
) -> Result<Option<Vec<u64>>, EngineError> {
    let mut carried = Vec::new();
    for (input, read) in inputs.iter().enumerate() {
        let Some(current) = now.get(read.file.as_str()) else {
            return Ok(None);
        };
        if Arc::ptr_eq(current, read) || current.as_ref() == read.as_ref() {
            continue;
        }
        if current.rows != read.rows || current.deletes == read.deletes {
            // Changed, and not by deleting rows: nothing the merge wrote can be trusted.
            return Ok(None);
        }
        let (Some(map), Some(deletes)) = (map, &current.deletes) else {
            return Ok(None);
        };
        let deleted_now = deletion_vector(table_dir, deletes, current.rows)?;
        let Some(deleted_then) = map.deleted_then.get(input) else {
            return Ok(None);
        };
        let deleted_then = deleted_then.clone().unwrap_or_default();
        if !deleted_then.is_subset(&deleted_now) {
            // A deleted row is back: not something a commit does.
            return Ok(None);
        }
        for row in deleted_now.difference(&deleted_then).iter() {
            // Not deleted then: its rank among the live rows is its position less the deleted
            // rows before it.
            let live = row - deleted_then.rank(row);
            match map.output_row(input, live) {
                Some(output) => carried.push(output),
                None => return Ok(None),
            }
        }
    }
    carried.sort_unstable();
    Ok(Some(carried))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A map of `takes` (the input of each output row in turn).
    fn map_of(inputs: usize, takes: &[usize]) -> RowMap {
        let mut map = RowMap::new(vec![None; inputs]);
        for &input in takes {
            map.take(input);
        }
        map.finish().unwrap()
    }

    #[test]
    fn each_live_row_of_each_input_finds_the_output_row_that_holds_it() {
        let takes = [0, 0, 1, 1, 1, 0, 2, 1, 0, 0];
        let map = map_of(3, &takes);
        let mut taken = [0u64; 3];
        for (output, &input) in takes.iter().enumerate() {
            assert_eq!(map.output_row(input, taken[input]), Some(output as u64));
            taken[input] += 1;
        }
        // Ranks past an input's last live row are in no run.
        assert_eq!(map.output_row(0, 5), None);
        assert_eq!(map.output_row(2, 1), None);
        assert_eq!(map.output_row(3, 0), None);
        // Runs were merged where rows followed each other: 0 0 | 1 1 1 | 0 | 2 | 1 | 0 0.
        assert_eq!(map.total_runs, 6);
    }

    #[test]
    fn a_map_of_too_many_runs_is_dropped() {
        let mut map = RowMap::new(vec![None; 2]);
        for row in 0..=MAX_RUNS {
            map.take(row % 2);
        }
        assert!(map.finish().is_none());
    }
}
