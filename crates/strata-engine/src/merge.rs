//! Merges: many parts become fewer, larger sorted parts, atomically.
//!
//! A merge streams: the input parts are already sorted by the sort key, so their rows are
//! interleaved in key order (a k-way merge) and written to one output part row group by row
//! group. Memory holds one batch per input and one output row group, whatever the parts' sizes.
//! Before interleaving, every input batch is conformed to the output's layout, chosen from all
//! inputs' typed values by the shredder's rule (see `strata_json::conform`), so the per-part
//! typing rule holds after a merge exactly as after an ingest.
//!
//! When the inputs type a sort-key path differently, their row orders are not comparable; those
//! merges fall back to rebuilding the documents and shredding them again, in parts of the
//! ingest's target size.
//!
//! Outputs are written first; one manifest commit then swaps them in and retires the inputs, so
//! a reader sees either the inputs or the outputs and never a document twice or not at all.
//! [`merge_parts`] writes without the table's writer lock and takes it only for that commit,
//! which keeps the parts other writers committed meanwhile, carries onto the outputs the rows
//! deleted from the inputs since they were read ([`row_map`]), and gives up when one of its
//! inputs is no longer listed; `strata ingest`'s own follow-up merge runs under the ingest's
//! lock.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::compute::{SortOptions, interleave};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use serde_json::Value;
use strata_format::{
    ColumnHints, ColumnProfile, FooterColumns, FormatError, Manifest, PartEntry, PartSchema,
    PartWriter, ROW_GROUP_ROWS, footer_columns, profiled_columns, read_part, read_part_within,
    sparse_columns, verify_file_hash,
};
use strata_json::conform::{ColumnCount, Conformer, merged_layout, merged_remainder_paths};
use strata_json::reconstruct::reconstruct;
use strata_json::shred::MAX_LISTED_REMAINDER_PATHS;
use strata_json::{Document, JsonPath, Kind, Shredder};

use crate::commit::commit_manifest;
use crate::error::EngineError;
use crate::part_writing::{
    DEFAULT_PART_TARGET_BYTES, full_part, part_writer_options, shred_options, write_shredded,
};
use crate::table::{DataDir, collect_garbage, new_part_file, unix_now};

mod row_map;

use row_map::RowMap;

/// Parts smaller than this on disk are candidates for the automatic (tiered) merge; larger ones
/// are merged by `strata optimize` (and the server's idle merge) only: the automatic merge
/// stays short and cheap, merging parts much smaller than those a bulk ingest cuts at its
/// target size (about 12 MB of JSONBench documents).
pub const SMALL_PART_BYTES: u64 = 8 * 1024 * 1024;
/// The automatic merge sorts candidates into size tiers: under this many bytes, then up to
/// [`TIER_GROWTH`] times as many, and so on. Eight parts of a tier merge into a part of the
/// next, except in the smallest, whose parts may be as small as one document: there a merged
/// part stays until it outgrows the tier and is rewritten with every merge until then. Small,
/// so that a server committing one small part per transaction rewrites little (at 1 MiB, the
/// booking benchmark's merges rewrote a part of up to 1 MiB for every eight transactions).
pub const SMALLEST_TIER_BYTES: u64 = 64 * 1024;
/// How much larger each tier's parts are than the one below: a merge of
/// [`AUTO_MERGE_MIN_PARTS`] parts of one tier makes about one part of the next.
pub const TIER_GROWTH: u64 = 8;
/// An automatic merge starts when one tier holds at least this many parts.
pub const AUTO_MERGE_MIN_PARTS: usize = 8;
/// A merge combines inputs of at most this many bytes on disk into one part. Parts this large
/// are never merged again: rewriting them would cost more than the per-part overhead it saves.
pub const MAX_MERGED_PART_BYTES: u64 = 1024 * 1024 * 1024;
/// Inputs of one merge: each holds one decoded batch in memory while the merge runs.
pub const MAX_MERGE_INPUTS: usize = 16;
/// Typed columns summed over the inputs of one merge (but two inputs are always allowed). Every
/// input column is read by its own page reader holding a zstd context, a page and a dictionary
/// (about 80 KB each): 16 GH Archive parts of ~500 columns took 630 MB in zstd contexts alone.
pub const MAX_MERGE_INPUT_COLUMNS: usize = 4096;
/// Rows per output batch handed to the part writer.
/// Arrow data of the inputs' current batches together, and of one output batch, whatever the
/// number and width of the parts: batches are as many rows as fit (GH Archive's 500 sparse
/// columns made fixed batches of 4,096 input and 8,192 output rows cost 1.2 GB; heaptrack).
const MERGE_INPUT_BATCH_BYTES: usize = 32 * 1024 * 1024;
const OUTPUT_BATCH_BYTES: usize = 16 * 1024 * 1024;
const MAX_OUTPUT_BATCH_ROWS: usize = 8192;

/// Which parts a merge considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeScope {
    /// After an ingest: parts under [`SMALL_PART_BYTES`] that were not cut at the ingest's target
    /// size, by size tier, and only a tier that holds at least [`AUTO_MERGE_MIN_PARTS`] of them.
    /// A document is rewritten about once per tier it climbs, however small the ingests were
    /// (merging each new small part into one growing part would rewrite it at every merge).
    Tiered,
    /// `strata optimize`: every part under [`MAX_MERGED_PART_BYTES`], merged round after round
    /// until no two neighbouring parts fit into one.
    All,
}

#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Part size of the re-shredding fallback.
    pub part_target_bytes: usize,
    pub scope: MergeScope,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions {
            part_target_bytes: DEFAULT_PART_TARGET_BYTES,
            scope: MergeScope::All,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeSummary {
    pub parts_before: usize,
    pub parts_after: usize,
    pub inputs_merged: usize,
    pub outputs_written: usize,
    /// Replaced parts still on disk because readers held a lease when the merge ended; a later
    /// writer deletes them.
    pub retired_kept: usize,
}

/// Merges parts of `table` as `options` say, concurrently with the table's other writers.
///
/// Each round reads a snapshot of the manifest and writes its outputs without the table's
/// writer lock, so ingests and flushes keep committing meanwhile; the lock is taken only to
/// commit. The commit swaps the outputs in if every input is still listed unchanged (deletion
/// vector included) and the settings are unchanged, keeping the parts other writers added
/// meanwhile; otherwise (another merge took an input, rows of an input were deleted, the table
/// was dropped and created again) the round's outputs are deleted and the merge ends. While outputs are being written the merge holds a merge lease, so no writer's garbage
/// collection deletes them as unlisted files.
pub fn merge_parts(
    data_dir: &DataDir,
    table: &str,
    options: &MergeOptions,
) -> Result<MergeSummary, EngineError> {
    merge_parts_observed(data_dir, table, options, &mut || {})
}

/// [`merge_parts`], calling `between` after each round's outputs are written and before the
/// writer lock is taken to commit them (tests run other writers there).
fn merge_parts_observed(
    data_dir: &DataDir,
    table: &str,
    options: &MergeOptions,
    between: &mut dyn FnMut(),
) -> Result<MergeSummary, EngineError> {
    let table_dir = data_dir.table_dir(table)?;
    let mut summary: Option<MergeSummary> = None;
    let mut settled: HashSet<String> = HashSet::new();
    let (lock, mut manifest) = loop {
        let merging = data_dir.merge_lease(table)?;
        let reading = data_dir.read_lease(table)?;
        let snapshot = data_dir.manifest(table)?;
        let summary = summary.get_or_insert_with(|| MergeSummary {
            parts_before: snapshot.parts.len(),
            ..Default::default()
        });
        let round = write_round(table, &table_dir, &snapshot, options, &mut settled)?;
        // The inputs are read: parts retired meanwhile may go.
        drop(reading);
        if round.is_some() {
            between();
        }
        let lock = match data_dir.lock_existing(table, "merge") {
            Ok(lock) => lock,
            Err(e) => {
                if let Some(round) = &round {
                    round.discard(&table_dir);
                }
                return Err(e);
            }
        };
        let mut manifest = data_dir.manifest(table)?;
        let Some(round) = round else {
            break (lock, manifest);
        };
        // Under a steady stream of upserts some input always gains a deletion while the round
        // is written: it is carried onto the outputs (ADR 0017).
        if let Err(round) =
            round.apply_onto(table, &table_dir, &mut manifest, &snapshot, summary)?
        {
            round.discard(&table_dir);
            if options.scope != MergeScope::Tiered {
                break (lock, manifest);
            }
            // Its inputs changed in a way that cannot be carried: small parts are merged again
            // under the writer lock, where nothing changes them; commits of the table wait
            // that long.
            match write_round(table, &table_dir, &manifest, options, &mut settled)? {
                Some(round) => round.apply(&mut manifest, summary),
                None => break (lock, manifest),
            }
        }
        commit_manifest(&mut manifest, &table_dir)?;
        // The outputs are listed now: garbage collection may look at unlisted files again.
        drop(merging);
        if options.scope == MergeScope::Tiered {
            break (lock, manifest);
        }
        drop(lock);
    };
    // Also retries parts that earlier merges had to keep for readers.
    if collect_garbage(&table_dir, &mut manifest)? {
        manifest.version += 1;
        commit_manifest(&mut manifest, &table_dir)?;
    }
    drop(lock);
    let mut summary = summary.unwrap_or_default();
    summary.parts_after = manifest.parts.len();
    summary.retired_kept = manifest.retired.len();
    Ok(summary)
}

/// Merges with the write lock already held and `manifest` the current one.
pub(crate) fn merge_locked(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    options: &MergeOptions,
) -> Result<MergeSummary, EngineError> {
    let mut summary = MergeSummary {
        parts_before: manifest.parts.len(),
        ..Default::default()
    };
    let mut settled: HashSet<String> = HashSet::new();
    while let Some(round) = write_round(table, table_dir, manifest, options, &mut settled)? {
        round.apply(manifest, &mut summary);
        commit_manifest(manifest, table_dir)?;
        if options.scope == MergeScope::Tiered {
            break;
        }
    }
    // Also retries parts that earlier merges had to keep for readers.
    if collect_garbage(table_dir, manifest)? {
        manifest.version += 1;
        commit_manifest(manifest, table_dir)?;
    }
    summary.parts_after = manifest.parts.len();
    summary.retired_kept = manifest.retired.len();
    Ok(summary)
}

/// One round of merges: the groups of input parts and, for each, the parts written in its place
/// (not yet listed in any manifest).
struct Round {
    groups: Vec<Vec<Arc<PartEntry>>>,
    outputs: Vec<Vec<PartEntry>>,
    /// Per group, where its output's rows came from (None: unknown).
    row_maps: Vec<Option<RowMap>>,
}

/// Plans a round of merges over `manifest`'s parts and writes its outputs; None when there is
/// nothing to merge. `settled` collects outputs of the re-shredding fallback, which are as large
/// as its inputs: merging them again in the next round would never end.
fn write_round(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    options: &MergeOptions,
    settled: &mut HashSet<String>,
) -> Result<Option<Round>, EngineError> {
    // Parts a logged transaction wrote and no checkpoint wrote out yet are folded by the
    // checkpoint ([`fold_held_parts`]); merging them here would write them all to disk first.
    let mut excluded = settled.clone();
    excluded.extend(held_parts(table_dir, &manifest.parts).map(|p| p.file.clone()));
    let groups = plan_merges(&manifest.parts, options.scope, &excluded);
    if groups.is_empty() {
        return Ok(None);
    }
    for group in &groups {
        crate::mirror::read_whole(table_dir, group)?;
    }
    Ok(Some(Round::write(
        table, table_dir, manifest, groups, options, settled,
    )?))
}

impl Round {
    /// Writes the outputs of `groups` (parts of `manifest`); the re-shredding fallback's outputs
    /// are added to `settled`.
    fn write(
        table: &str,
        table_dir: &Path,
        manifest: &Manifest,
        groups: Vec<Vec<Arc<PartEntry>>>,
        options: &MergeOptions,
        settled: &mut HashSet<String>,
    ) -> Result<Round, EngineError> {
        let mut outputs: Vec<Vec<PartEntry>> = Vec::with_capacity(groups.len());
        let mut row_maps = Vec::with_capacity(groups.len());
        for group in &groups {
            let (output, row_map) = match merge_group(table, table_dir, manifest, group)? {
                // Every row of the group was deleted: the inputs go, and nothing replaces them.
                Some((output, row_map)) if output.rows == 0 => {
                    discard_part(table_dir, &output);
                    (Vec::new(), row_map)
                }
                Some((output, row_map)) => (vec![output], row_map),
                None => {
                    let rewritten =
                        merge_by_reshredding(table, table_dir, manifest, group, options)?;
                    settled.extend(rewritten.iter().map(|p| p.file.clone()));
                    (rewritten, None)
                }
            };
            outputs.push(output);
            row_maps.push(row_map);
        }
        Ok(Round {
            groups,
            outputs,
            row_maps,
        })
    }

    /// Swaps this round, written from `snapshot`, in for its inputs in `current` (the table
    /// now, under its writer lock) and deletes from its outputs the rows its inputs lost since
    /// they were read ([`row_map`]), for the caller to commit; `current` is left as it was on
    /// error. Gives the round back, with `current` as it was, when it cannot: an input is no
    /// longer listed or changed otherwise, a deletion falls in outputs whose rows are not
    /// mapped, or the settings the outputs were written with no longer hold.
    fn apply_onto(
        self,
        table: &str,
        table_dir: &Path,
        current: &mut Manifest,
        snapshot: &Manifest,
        summary: &mut MergeSummary,
    ) -> Result<Result<(), Round>, EngineError> {
        if current.settings != snapshot.settings {
            return Ok(Err(self));
        }
        let listed: std::collections::HashMap<&str, &Arc<PartEntry>> =
            current.parts.iter().map(|p| (p.file.as_str(), p)).collect();
        let mut carried: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for ((group, outputs), row_map) in self.groups.iter().zip(&self.outputs).zip(&self.row_maps)
        {
            let rows = row_map::carried_deletions(table_dir, group, &listed, row_map.as_ref())?;
            match (rows, &outputs[..]) {
                (None, _) => return Ok(Err(self)),
                (Some(rows), _) if rows.is_empty() => {}
                (Some(rows), [output]) => {
                    carried.insert(output.file.clone(), rows);
                }
                // A map is kept for one output only.
                (Some(_), _) => return Ok(Err(self)),
            }
        }
        drop(listed);
        // Built aside, so that a failure to write the outputs' deletions leaves `current` as
        // it was.
        let mut next = current.clone();
        self.apply(&mut next, summary);
        if !carried.is_empty() {
            let version = next.version;
            crate::deletes::stage_deletions(table, table_dir, &mut next, version, &carried)?;
        }
        *current = next;
        Ok(Ok(()))
    }

    /// Deletes the outputs of a round that will not commit (failures to delete leave garbage
    /// for a later writer).
    fn discard(&self, table_dir: &Path) {
        for part in self.outputs.iter().flatten() {
            discard_part(table_dir, part);
        }
    }

    /// Swaps the outputs in for their inputs in `manifest` and retires the inputs. Each group's
    /// outputs take the place of its first input, so the parts stay in ingest (time) order and
    /// later rounds merge neighbours in time; parts not in the round keep their places.
    fn apply(self, manifest: &mut Manifest, summary: &mut MergeSummary) {
        let Round {
            groups,
            mut outputs,
            row_maps: _,
        } = self;
        let group_of: std::collections::HashMap<&str, usize> = groups
            .iter()
            .enumerate()
            .flat_map(|(g, group)| group.iter().map(move |p| (p.file.as_str(), g)))
            .collect();
        let mut parts = Vec::with_capacity(manifest.parts.len());
        let mut placed = vec![false; groups.len()];
        // The inputs' files as `manifest` lists them, deletion vectors included: an input may
        // have gained a vector since the round read it (carried onto the outputs,
        // `Round::apply_onto`), and a vector neither listed nor retired would be deleted by the
        // next garbage collection under the readers still holding it.
        let mut merged: Vec<String> = Vec::new();
        for part in std::mem::take(&mut manifest.parts) {
            let group = group_of.get(part.file.as_str());
            if group.is_some() {
                merged.extend(part.own_files());
            }
            match group {
                Some(&g) if !placed[g] => {
                    placed[g] = true;
                    summary.outputs_written += outputs[g].len();
                    // The outputs hold rows of every input: the newest input's writes.
                    let newest = groups[g]
                        .iter()
                        .map(|input| input.newest_write)
                        .collect::<Option<Vec<u64>>>()
                        .and_then(|writes| writes.into_iter().max());
                    for mut output in std::mem::take(&mut outputs[g]) {
                        output.newest_write = newest;
                        parts.push(Arc::new(output));
                    }
                }
                Some(_) => {}
                None => parts.push(part),
            }
        }
        manifest.parts = parts;
        summary.inputs_merged += groups.iter().map(Vec::len).sum::<usize>();
        manifest.retire(merged, unix_now());
        manifest.version += 1;
    }
}

/// Inputs of one fold of held parts: they are small (a transaction's documents each), so one
/// output per checkpoint takes more of them than [`MAX_MERGE_INPUTS`].
const MAX_FOLDED_INPUTS: usize = 512;

/// The parts of `parts` whose files are held in memory ([`strata_format::held`]).
fn held_parts<'a>(
    table_dir: &'a Path,
    parts: &'a [Arc<PartEntry>],
) -> impl Iterator<Item = &'a Arc<PartEntry>> + 'a {
    parts
        .iter()
        .filter(move |p| strata_format::held::is_held(&Manifest::part_path(table_dir, &p.file)))
}

/// Merges the parts of `manifest` held in memory (those of logged transactions, ADR 0017) into
/// durable parts written to disk, swapped in for them in `manifest` (the inputs retired), so
/// that a checkpoint writes one part where the transactions since the last one wrote many. The
/// caller holds the table's writer lock and commits `manifest`. Returns the number of inputs
/// folded (0: nothing changed; a held part left alone is written out as it is).
pub(crate) fn fold_held_parts(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
) -> Result<usize, EngineError> {
    let Some(fold) = write_fold(table, table_dir, manifest)? else {
        return Ok(0);
    };
    let mut summary = MergeSummary::default();
    fold.0.apply(manifest, &mut summary);
    Ok(summary.inputs_merged)
}

/// The fold of a table's held parts (see [`fold_held_parts`]), written but not swapped in.
pub(crate) struct Fold(Round);

/// Writes the fold of `manifest`'s held parts without swapping it in: a checkpoint writes it
/// before it takes the table's writer lock, and then swaps it in ([`Fold::apply_onto`]) onto
/// the table as it is by then. None when there is nothing to fold.
pub(crate) fn write_fold(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
) -> Result<Option<Fold>, EngineError> {
    let held: Vec<&Arc<PartEntry>> = held_parts(table_dir, &manifest.parts).collect();
    let groups = group_parts(held.into_iter(), MAX_FOLDED_INPUTS);
    if groups.is_empty() {
        return Ok(None);
    }
    let options = MergeOptions {
        scope: MergeScope::Tiered,
        ..MergeOptions::default()
    };
    let round = Round::write(
        table,
        table_dir,
        manifest,
        groups,
        &options,
        &mut HashSet::new(),
    )?;
    Ok(Some(Fold(round)))
}

impl Fold {
    /// Deletes the fold's outputs, listed nowhere.
    pub(crate) fn discard(self, table_dir: &Path) {
        self.0.discard(table_dir);
    }

    /// Swaps the fold, written from `snapshot`, in for its inputs in `current` (the table now,
    /// under its writer lock), carrying the deletions its inputs gained since. When it cannot
    /// (see `Round::apply_onto`), `current` is left as it was and the fold's outputs are
    /// deleted: the held parts are then folded as if it had not been written.
    pub(crate) fn apply_onto(
        self,
        table: &str,
        table_dir: &Path,
        current: &mut Manifest,
        snapshot: &Manifest,
    ) -> Result<(), EngineError> {
        let mut summary = MergeSummary::default();
        if let Err(round) = self
            .0
            .apply_onto(table, table_dir, current, snapshot, &mut summary)?
        {
            round.discard(table_dir);
        }
        Ok(())
    }
}

/// Groups of candidate parts, each of at least two parts and at most [`MAX_MERGE_INPUTS`]
/// parts, [`MAX_MERGE_INPUT_COLUMNS`] columns and [`MAX_MERGED_PART_BYTES`] bytes: neighbours
/// for [`MergeScope::All`], parts of one size tier (in table order) for [`MergeScope::Tiered`].
fn plan_merges(
    parts: &[Arc<PartEntry>],
    scope: MergeScope,
    settled: &HashSet<String>,
) -> Vec<Vec<Arc<PartEntry>>> {
    let candidate = |p: &PartEntry| {
        !settled.contains(&p.file)
            && match scope {
                MergeScope::Tiered => !p.full && p.bytes < SMALL_PART_BYTES,
                MergeScope::All => p.bytes < MAX_MERGED_PART_BYTES,
            }
    };
    match scope {
        MergeScope::All => {
            // A part that is not a candidate separates its neighbours' groups.
            let runs = parts.split(|p| !candidate(p));
            runs.flat_map(|run| group_parts(run.iter(), MAX_MERGE_INPUTS))
                .collect()
        }
        MergeScope::Tiered => {
            let mut tiers: BTreeMap<u32, Vec<&Arc<PartEntry>>> = BTreeMap::new();
            for part in parts.iter().filter(|p| candidate(p)) {
                tiers.entry(size_tier(part.bytes)).or_default().push(part);
            }
            tiers
                .into_values()
                .filter(|members| members.len() >= AUTO_MERGE_MIN_PARTS)
                .flat_map(|members| group_parts(members.into_iter(), MAX_MERGE_INPUTS))
                .collect()
        }
    }
}

/// The size tier of a part of `bytes` (see [`SMALLEST_TIER_BYTES`]).
fn size_tier(bytes: u64) -> u32 {
    let mut tier = 0;
    let mut bound = SMALLEST_TIER_BYTES;
    while bytes >= bound {
        tier += 1;
        bound = bound.saturating_mul(TIER_GROWTH);
    }
    tier
}

/// Cuts `parts` into merge groups in order, each within the limits of one merge (at most
/// `max_inputs` parts); a part left alone is not merged, unless it has deleted rows: rewritten
/// alone, it drops them for good.
fn group_parts<'a>(
    parts: impl Iterator<Item = &'a Arc<PartEntry>>,
    max_inputs: usize,
) -> Vec<Vec<Arc<PartEntry>>> {
    let mut groups = Vec::new();
    let mut current: Vec<Arc<PartEntry>> = Vec::new();
    let close = |current: &mut Vec<Arc<PartEntry>>, groups: &mut Vec<Vec<Arc<PartEntry>>>| {
        if current.len() >= 2 || current.iter().any(|p| p.deletes.is_some()) {
            groups.push(std::mem::take(current));
        }
        current.clear();
    };
    for part in parts {
        let bytes: u64 = current.iter().map(|p| p.bytes).sum();
        let columns: usize = current.iter().map(|p| p.columns.len()).sum();
        let full = bytes + part.bytes > MAX_MERGED_PART_BYTES
            || current.len() >= max_inputs
            || (current.len() >= 2 && columns + part.columns.len() > MAX_MERGE_INPUT_COLUMNS);
        if !current.is_empty() && full {
            close(&mut current, &mut groups);
        }
        current.push(part.clone());
    }
    close(&mut current, &mut groups);
    groups
}

/// The output columns that take a dictionary per row group, with their plain bytes: those whose
/// inputs' profiles, united, say it pays ([`ColumnProfile::pays_for_dictionary`], ADR 0007).
/// Inputs that did not profile a column (it was sparse there: small parts are) may hold up to
/// [`UNPROFILED_SHARE`] of its `values` (the inputs' values of the output column's kind); the
/// profiles of the rest stand for them.
fn dictionary_columns(
    layout: &PartSchema,
    sort_key: &[String],
    hints: &ColumnHints,
    group: &[Arc<PartEntry>],
    footers: &[FooterColumns],
    values: &BTreeMap<&str, u64>,
    rows: u64,
) -> BTreeMap<String, u64> {
    let mut chosen = BTreeMap::new();
    for (_, column) in profiled_columns(layout, sort_key, hints) {
        let name = &column.name;
        let mut union = ColumnProfile::default();
        for (part, footer) in group.iter().zip(footers) {
            if part.columns.get(name) == Some(&column.kind)
                && let Some(profile) = footer.profiles.get(name)
            {
                union.absorb(profile);
            }
        }
        let values = values.get(name.as_str()).copied().unwrap_or(0);
        let profiled = union.values as f64;
        if profiled < (1.0 - UNPROFILED_SHARE) * values as f64 {
            continue;
        }
        if union.pays_for_dictionary(rows, ROW_GROUP_ROWS as u64) {
            let plain_bytes = union.plain_bytes as f64 * values.max(union.values) as f64 / profiled;
            chosen.insert(name.clone(), plain_bytes as u64);
        }
    }
    chosen
}

/// The share of a column's values that may lie in inputs without its profile when a merge
/// chooses its encoding.
const UNPROFILED_SHARE: f64 = 0.1;

/// Merges one group of parts into one output part by interleaving their sorted rows, with the
/// map of where its rows came from (None when too large to keep); None when their sort-key
/// columns cannot be interleaved (see the module doc).
fn merge_group(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    group: &[Arc<PartEntry>],
) -> Result<Option<(PartEntry, Option<RowMap>)>, EngineError> {
    let sort_key = &manifest.settings.sort_key;
    let mut counts = Vec::new();
    let mut footers = Vec::with_capacity(group.len());
    for part in group {
        let path = Manifest::part_path(table_dir, &part.file);
        // A damaged input must stop the merge, not be rewritten into a part with fresh checksums.
        verify_file_hash(&path, part)?;
        let footer = footer_columns(&path, part)?;
        for (name, &values) in &footer.value_counts {
            if let Some(kind) = part.columns.get(name) {
                counts.push(ColumnCount {
                    name: name.clone(),
                    kind: *kind,
                    values,
                });
            }
        }
        footers.push(footer);
    }
    // The key path, like the sort key's, always keeps its typed column.
    let mut forced = sort_key.clone();
    if let Some(key) = &manifest.settings.key
        && !forced.contains(&key.path)
    {
        forced.push(key.path.clone());
    }
    let layout = merged_layout(&counts, &forced, manifest.settings.max_columns).filter(|layout| {
        // A sort-key value waiting in some input's remainder with the output column's kind
        // would move into the key column and break that input's order (an input whose
        // remainder paths are truncated might hold one).
        group.iter().all(|p| {
            !p.remainder_paths_truncated
                && layout
                    .iter()
                    .filter(|c| sort_key.contains(&c.name))
                    .all(|c| {
                        !p.remainder_paths
                            .get(&c.name)
                            .is_some_and(|kinds| kinds.contains(&c.kind))
                    })
        })
    });
    let Some(layout) = layout else {
        return Ok(None);
    };

    let mut remainder_paths =
        merged_remainder_paths(&layout, group.iter().map(|p| &p.remainder_paths), &counts);
    let truncated = remainder_paths.len() > MAX_LISTED_REMAINDER_PATHS;
    if truncated {
        remainder_paths = remainder_paths
            .into_iter()
            .take(MAX_LISTED_REMAINDER_PATHS)
            .collect();
    }
    let conformer = Conformer::new(layout);
    // Key-run columns stay uncompressed (see the part writer); the output's runs are at most as
    // deep as the shallowest input's.
    let uncompressed = group
        .iter()
        .map(|p| p.key_runs.as_ref().map_or(&[][..], |r| &r.paths[..]))
        .min_by_key(|paths| paths.len())
        .unwrap_or_default()
        .to_vec();
    // Values per output column: the inputs' values of the column's kind (promotions out of
    // remainders may add a few).
    let typed: HashSet<(&str, Kind)> = conformer
        .layout()
        .iter()
        .map(|c| (c.name.as_str(), c.kind))
        .collect();
    let mut values: BTreeMap<&str, u64> = BTreeMap::new();
    for count in &counts {
        if typed.contains(&(count.name.as_str(), count.kind)) {
            *values.entry(count.name.as_str()).or_default() += count.values;
        }
    }
    let rows: u64 = group.iter().map(|p| p.rows).sum();
    let mut hints = ColumnHints {
        uncompressed,
        sparse: sparse_columns(values.iter().map(|(&name, &v)| (name, v)), rows),
        dictionary: BTreeMap::new(),
        uncompressed_part: false,
    };
    let layout = PartSchema {
        schema: conformer.schema(),
        columns: conformer.layout().to_vec(),
        remainder_paths,
        remainder_paths_truncated: truncated,
    };
    hints.dictionary =
        dictionary_columns(&layout, sort_key, &hints, group, &footers, &values, rows);
    let file = new_part_file(manifest.version);
    let mut writer = PartWriter::create(
        table_dir,
        &file,
        layout,
        sort_key,
        &hints,
        &part_writer_options(&manifest.settings),
    )?;

    let key_fields: Vec<(usize, SortField)> = sort_key
        .iter()
        .filter_map(|name| conformer.schema().index_of(name).ok())
        .map(|index| {
            let data_type = conformer.schema().field(index).data_type().clone();
            let options = SortOptions {
                descending: false,
                nulls_first: true,
            };
            (index, SortField::new_with_options(data_type, options))
        })
        .collect();
    let converter = if key_fields.is_empty() {
        None
    } else {
        Some(
            RowConverter::new(key_fields.iter().map(|(_, f)| f.clone()).collect()).map_err(
                |source| EngineError::Arrow {
                    table: table.to_owned(),
                    context: "ordering merge inputs",
                    source,
                },
            )?,
        )
    };
    let batch_bytes = MERGE_INPUT_BATCH_BYTES / group.len();
    let mut cursors = Vec::with_capacity(group.len());
    let mut widest_row_bytes = 1;
    for (part, footer) in group.iter().zip(&footers) {
        let path = Manifest::part_path(table_dir, &part.file);
        let (reader, row_bytes) = read_part_within(&path, footer, batch_bytes)?;
        widest_row_bytes = widest_row_bytes.max(row_bytes);
        cursors.push(Cursor {
            reader,
            path,
            current: None,
        });
    }
    let mut merge = KWayMerge {
        table,
        conformer: &conformer,
        converter: converter.as_ref(),
        key_columns: key_fields.iter().map(|(i, _)| *i).collect(),
        held: Vec::new(),
        batch_rows: (OUTPUT_BATCH_BYTES / widest_row_bytes).clamp(256, MAX_OUTPUT_BATCH_ROWS),
        picks: Vec::new(),
        row_map: RowMap::new(footers.iter().map(|f| f.deleted().cloned()).collect()),
    };
    // Encoding and compressing the output costs about as much as reading and interleaving the
    // inputs: the writer gets its own thread, fed through a short queue.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<RecordBatch>(2);
    std::thread::scope(|scope| {
        let writing = scope.spawn(move || -> Result<PartEntry, EngineError> {
            for batch in receiver {
                writer.write(&batch)?;
            }
            Ok(writer.finish()?)
        });
        let merged = (|| -> Result<(), EngineError> {
            for cursor in &mut cursors {
                merge.advance(cursor)?;
            }
            while let Some((best, runner_up)) = merge.two_smallest(&cursors) {
                merge.take_run(&mut cursors, best, runner_up)?;
                if merge.picks.len() >= merge.batch_rows || merge.all_done(&cursors) {
                    let batch = merge.flush(&mut cursors)?;
                    if sender.send(batch).is_err() {
                        // The writer stopped; its error is reported below.
                        break;
                    }
                }
            }
            Ok(())
        })();
        drop(sender);
        let written = writing.join().map_err(|_| {
            EngineError::Invalid(format!("table {table}: the merge writer thread panicked"))
        })?;
        merged?;
        Ok(Some((written?, merge.row_map.finish())))
    })
}

/// Deletes a part that no manifest lists, with the files beside it (checksum, key, text index
/// and secondary index files; a failure leaves garbage for a later writer).
fn discard_part(table_dir: &Path, part: &PartEntry) {
    for file in part.files_beside().into_iter().chain([part.file.clone()]) {
        let _ = strata_format::held::delete(&Manifest::part_path(table_dir, &file));
    }
}

/// One input of a k-way merge: its reader and the batch being consumed.
struct Cursor {
    reader: ParquetRecordBatchReader,
    path: std::path::PathBuf,
    /// (slot in `KWayMerge::held`, sort keys as rows, next row); None once exhausted.
    current: Option<(usize, Option<Rows>, usize)>,
}

struct KWayMerge<'a> {
    table: &'a str,
    conformer: &'a Conformer,
    converter: Option<&'a RowConverter>,
    key_columns: Vec<usize>,
    /// Batches referenced by `picks` (and the cursors' current batches).
    held: Vec<RecordBatch>,
    /// Rows per output batch.
    batch_rows: usize,
    /// Output rows so far: (slot in `held`, row).
    picks: Vec<(usize, usize)>,
    /// Where every output row came from.
    row_map: RowMap,
}

impl KWayMerge<'_> {
    /// Loads the cursor's next non-empty batch, conformed, or marks it exhausted.
    fn advance(&mut self, cursor: &mut Cursor) -> Result<(), EngineError> {
        cursor.current = None;
        for batch in cursor.reader.by_ref() {
            let batch = batch.map_err(|source| FormatError::Arrow {
                path: cursor.path.clone(),
                source,
            })?;
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = self
                .conformer
                .conform(&batch)
                .map_err(|source| EngineError::Json {
                    table: self.table.to_owned(),
                    source,
                })?;
            let rows =
                match self.converter {
                    Some(converter) => {
                        let keys: Vec<ArrayRef> = self
                            .key_columns
                            .iter()
                            .map(|&i| batch.column(i).clone())
                            .collect();
                        Some(converter.convert_columns(&keys).map_err(|source| {
                            EngineError::Arrow {
                                table: self.table.to_owned(),
                                context: "ordering merge inputs",
                                source,
                            }
                        })?)
                    }
                    None => None,
                };
            self.held.push(batch);
            cursor.current = Some((self.held.len() - 1, rows, 0));
            return Ok(());
        }
        Ok(())
    }

    /// Whether every input is consumed.
    fn all_done(&self, cursors: &[Cursor]) -> bool {
        cursors.iter().all(|c| c.current.is_none())
    }

    /// Whether the next row of cursor `a` goes before that of cursor `b` (ties: lower input).
    fn before(cursors: &[Cursor], a: usize, b: usize) -> bool {
        match (&cursors[a].current, &cursors[b].current) {
            (Some((_, Some(ra), ia)), Some((_, Some(rb), ib))) => {
                let (x, y) = (ra.row(*ia), rb.row(*ib));
                x < y || (x == y && a < b)
            }
            _ => a < b,
        }
    }

    /// The cursor holding the smallest next row, and the one holding the second smallest.
    fn two_smallest(&self, cursors: &[Cursor]) -> Option<(usize, Option<usize>)> {
        let mut best: Option<usize> = None;
        let mut second: Option<usize> = None;
        for i in (0..cursors.len()).filter(|&i| cursors[i].current.is_some()) {
            match best {
                Some(b) if !Self::before(cursors, i, b) => {
                    if second.is_none_or(|s| Self::before(cursors, i, s)) {
                        second = Some(i);
                    }
                }
                _ => {
                    second = best;
                    best = Some(i);
                }
            }
        }
        best.map(|b| (b, second))
    }

    /// Takes rows from `best` while they still go before the runner-up's next row.
    fn take_run(
        &mut self,
        cursors: &mut [Cursor],
        best: usize,
        runner_up: Option<usize>,
    ) -> Result<(), EngineError> {
        loop {
            let Some((slot, _, row)) = cursors[best].current.as_ref() else {
                return Ok(());
            };
            self.picks.push((*slot, *row));
            self.row_map.take(best);
            let rows_in_batch = self.held[*slot].num_rows();
            if let Some((_, _, row)) = cursors[best].current.as_mut() {
                *row += 1;
                if *row == rows_in_batch {
                    self.advance(&mut cursors[best])?;
                    return Ok(());
                }
            }
            if self.picks.len() >= self.batch_rows
                || runner_up.is_some_and(|r| !Self::before(cursors, best, r))
            {
                return Ok(());
            }
        }
    }

    /// The picked rows as one batch; releases batches no cursor needs any more.
    fn flush(&mut self, cursors: &mut [Cursor]) -> Result<RecordBatch, EngineError> {
        let arrow_err = |source| EngineError::Arrow {
            table: self.table.to_owned(),
            context: "interleaving merge inputs",
            source,
        };
        let schema = self.conformer.schema();
        let mut columns = Vec::with_capacity(schema.fields().len());
        for column in 0..schema.fields().len() {
            let arrays: Vec<&dyn Array> = self
                .held
                .iter()
                .map(|b| b.column(column).as_ref())
                .collect();
            columns.push(interleave(&arrays, &self.picks).map_err(arrow_err)?);
        }
        let batch = RecordBatch::try_new(schema, columns).map_err(arrow_err)?;
        self.picks.clear();
        let mut held = Vec::with_capacity(cursors.len());
        for cursor in cursors.iter_mut() {
            if let Some((slot, _, _)) = cursor.current.as_mut() {
                held.push(self.held[*slot].clone());
                *slot = held.len() - 1;
            }
        }
        self.held = held;
        Ok(batch)
    }
}

/// The fallback merge: rebuild every document and shred them again (bounded by
/// `options.part_target_bytes` per output part).
fn merge_by_reshredding(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    group: &[Arc<PartEntry>],
    options: &MergeOptions,
) -> Result<Vec<PartEntry>, EngineError> {
    let settings = &manifest.settings;
    let shred_options = shred_options(settings);
    let json_err = |source| EngineError::Json {
        table: table.to_owned(),
        source,
    };
    let mut outputs = Vec::new();
    let mut shredder = Shredder::new(shred_options.clone());
    for part in group {
        let path = Manifest::part_path(table_dir, &part.file);
        verify_file_hash(&path, part)?;
        for batch in read_part(&path, part, 8192)? {
            let batch = batch.map_err(|source| FormatError::Arrow {
                path: path.clone(),
                source,
            })?;
            for doc in reconstruct(&batch, &JsonPath::default())
                .map_err(json_err)?
                .into_iter()
                .flatten()
            {
                if let Value::Object(map) = doc {
                    shredder.push(&Document::from_object(&map));
                }
            }
            if shredder.buffered_bytes() >= options.part_target_bytes {
                let full = std::mem::replace(&mut shredder, Shredder::new(shred_options.clone()));
                outputs.push(full_part(
                    write_shredded(
                        table,
                        table_dir,
                        &new_part_file(manifest.version),
                        full,
                        settings,
                    )?
                    .entry,
                ));
            }
        }
    }
    if !shredder.is_empty() {
        outputs.push(
            write_shredded(
                table,
                table_dir,
                &new_part_file(manifest.version),
                shredder,
                settings,
            )?
            .entry,
        );
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_json::Kind;

    fn part(file: &str, bytes: u64, columns: usize, full: bool) -> Arc<PartEntry> {
        Arc::new(PartEntry {
            file: file.to_owned(),
            rows: 1,
            bytes,
            columns: (0..columns).map(|i| (format!("c{i}"), Kind::Int)).collect(),
            remainder_paths: Default::default(),
            remainder_paths_truncated: false,
            sort_key_min: Default::default(),
            sort_key_max: Default::default(),
            full,
            key_runs: None,
            xxh64: None,
            deletes: None,
            keys: None,
            newest_write: None,
            text_index: None,
            indexes: Vec::new(),
        })
    }

    fn files(groups: &[Vec<Arc<PartEntry>>]) -> Vec<Vec<&str>> {
        groups
            .iter()
            .map(|g| g.iter().map(|p| p.file.as_str()).collect())
            .collect()
    }

    #[test]
    fn merges_respect_inputs_columns_and_bytes() {
        let none = HashSet::new();
        // 20 narrow parts: groups of MAX_MERGE_INPUTS, then the rest.
        let narrow: Vec<Arc<PartEntry>> = (0..20)
            .map(|i| part(&format!("n{i}"), 10, 50, true))
            .collect();
        let groups = plan_merges(&narrow, MergeScope::All, &none);
        assert_eq!(
            groups.iter().map(Vec::len).collect::<Vec<_>>(),
            [MAX_MERGE_INPUTS, 20 - MAX_MERGE_INPUTS]
        );
        // Wide parts: 600 columns each, so at most 6 per merge (3,600 of 4,096 columns).
        let wide: Vec<Arc<PartEntry>> = (0..8)
            .map(|i| part(&format!("w{i}"), 10, 600, true))
            .collect();
        let groups = plan_merges(&wide, MergeScope::All, &none);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), [6, 2]);
        // Two inputs are always allowed, however wide.
        let widest: Vec<Arc<PartEntry>> = (0..3)
            .map(|i| part(&format!("x{i}"), 10, 5000, true))
            .collect();
        assert_eq!(plan_merges(&widest, MergeScope::All, &none).len(), 1);
        // A part too large to merge splits its neighbours into separate groups.
        let parts = vec![
            part("a", 10, 1, true),
            part("b", 10, 1, true),
            part("big", MAX_MERGED_PART_BYTES, 1, true),
            part("c", 10, 1, true),
            part("d", 10, 1, true),
        ];
        let groups = plan_merges(&parts, MergeScope::All, &none);
        assert_eq!(files(&groups), [vec!["a", "b"], vec!["c", "d"]]);
        // The automatic merge takes only small parts that were not cut at the target, and only
        // once there are enough of them.
        let mut small: Vec<Arc<PartEntry>> = (0..AUTO_MERGE_MIN_PARTS)
            .map(|i| part(&format!("s{i}"), 10, 1, false))
            .collect();
        small.push(part("full", 10, 1, true));
        let groups = plan_merges(&small, MergeScope::Tiered, &none);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].len(), AUTO_MERGE_MIN_PARTS);
        small.remove(0);
        assert!(plan_merges(&small, MergeScope::Tiered, &none).is_empty());
        // Tiers: eight parts of one size tier are merged, seven of another are not, and parts of
        // different tiers are never merged together.
        let mut tiered: Vec<Arc<PartEntry>> = (0..AUTO_MERGE_MIN_PARTS)
            .map(|i| part(&format!("t0-{i}"), SMALLEST_TIER_BYTES / 2, 1, false))
            .collect();
        tiered.extend(
            (0..AUTO_MERGE_MIN_PARTS - 1)
                .map(|i| part(&format!("t1-{i}"), SMALLEST_TIER_BYTES * 2, 1, false)),
        );
        tiered.push(part("large", SMALL_PART_BYTES, 1, false));
        let groups = plan_merges(&tiered, MergeScope::Tiered, &none);
        assert_eq!(groups.len(), 1);
        assert!(groups[0].iter().all(|p| p.file.starts_with("t0-")));
        assert_eq!(groups[0].len(), AUTO_MERGE_MIN_PARTS);
        // The tier-1 parts need not be neighbours: an eighth one later in the table joins them.
        tiered.remove(0);
        tiered.push(part("t1-last", SMALLEST_TIER_BYTES * 7, 1, false));
        let groups = plan_merges(&tiered, MergeScope::Tiered, &none);
        assert_eq!(groups.len(), 1);
        assert!(groups[0].iter().all(|p| p.file.starts_with("t1-")));
        assert_eq!(groups[0].len(), AUTO_MERGE_MIN_PARTS);
        assert_eq!(size_tier(SMALLEST_TIER_BYTES - 1), 0);
        assert_eq!(size_tier(SMALLEST_TIER_BYTES), 1);
        assert_eq!(size_tier(SMALLEST_TIER_BYTES * TIER_GROWTH), 2);
        // Settled parts (outputs of a re-shredding fallback) are left alone.
        let settled: HashSet<String> = ["a".to_owned()].into();
        let groups = plan_merges(&parts[..2], MergeScope::All, &settled);
        assert!(groups.is_empty());
    }

    /// A table of `parts` small parts of 20 documents each, ingested without merging.
    fn small_parts(parts: usize) -> (tempfile::TempDir, DataDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path().join("data"));
        for part in 0..parts {
            add_part(&dir, tmp.path(), part);
        }
        (tmp, dir)
    }

    fn add_part(dir: &DataDir, scratch: &Path, part: usize) {
        add_part_of(dir, scratch, part, (0..20).map(|i| part * 100 + i));
    }

    /// Ingests the documents of `ids` (tagged with `part`) as one part.
    fn add_part_of(dir: &DataDir, scratch: &Path, part: usize, ids: impl Iterator<Item = usize>) {
        let path = scratch.join(format!("in{part}.ndjson"));
        let text: String = ids
            .map(|id| format!("{{\"id\":{id},\"part\":{part}}}\n"))
            .collect();
        std::fs::write(&path, text).unwrap();
        let options = crate::IngestOptions {
            sort_key: Some(vec!["id".to_owned()]),
            auto_merge: false,
            ..Default::default()
        };
        crate::ingest(
            dir,
            "t",
            &[crate::input::Input::File(path)],
            &options,
            &mut |_| {},
            &mut |r| panic!("unexpected reject: {r:?}"),
        )
        .unwrap();
    }

    /// The ids in the table, sorted (a document seen twice shows twice).
    fn ids(dir: &DataDir) -> Vec<u64> {
        let mut out = Vec::new();
        crate::export_table(dir, "t", &mut out).unwrap();
        let mut ids: Vec<u64> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    fn expected_ids(parts: usize) -> Vec<u64> {
        (0..parts as u64)
            .flat_map(|p| (0..20).map(move |i| p * 100 + i))
            .collect()
    }

    /// Files in the table's parts directory that the manifest lists neither as parts nor as
    /// retired (checksum files count with their parts).
    fn unlisted_files(dir: &DataDir) -> Vec<String> {
        let table_dir = dir.table_dir("t").unwrap();
        let manifest = dir.manifest("t").unwrap();
        std::fs::read_dir(table_dir.join(strata_format::manifest::PARTS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| {
                let part = name
                    .strip_suffix(strata_format::checksum::CHECKSUM_SUFFIX)
                    .unwrap_or(name);
                !manifest
                    .parts
                    .iter()
                    .any(|p| p.file == part || p.deletes.as_ref().is_some_and(|d| &d.file == name))
                    && !manifest.retired.iter().any(|r| r.file == part)
            })
            .collect()
    }

    fn tiered() -> MergeOptions {
        MergeOptions {
            scope: MergeScope::Tiered,
            ..MergeOptions::default()
        }
    }

    #[test]
    fn an_ingest_commits_while_a_merge_writes_and_both_are_kept() {
        let (tmp, dir) = small_parts(AUTO_MERGE_MIN_PARTS);
        let summary = merge_parts_observed(&dir, "t", &tiered(), &mut || {
            // The ingest commits (and collects garbage) while the merge's output is unlisted.
            add_part(&dir, tmp.path(), AUTO_MERGE_MIN_PARTS);
        })
        .unwrap();
        assert_eq!(summary.inputs_merged, AUTO_MERGE_MIN_PARTS);
        assert_eq!(summary.outputs_written, 1);
        let manifest = dir.manifest("t").unwrap();
        assert_eq!(manifest.parts.len(), 2, "{:?}", manifest.parts);
        assert_eq!(manifest.parts[0].rows, 20 * AUTO_MERGE_MIN_PARTS as u64);
        assert_eq!(ids(&dir), expected_ids(AUTO_MERGE_MIN_PARTS + 1));
        assert!(unlisted_files(&dir).is_empty());
    }

    #[test]
    fn a_merge_whose_inputs_another_merge_took_discards_its_outputs() {
        let (_tmp, dir) = small_parts(AUTO_MERGE_MIN_PARTS);
        let mut other = None;
        let summary = merge_parts_observed(&dir, "t", &tiered(), &mut || {
            other = Some(merge_parts(&dir, "t", &MergeOptions::default()).unwrap());
        })
        .unwrap();
        assert_eq!(other.unwrap().inputs_merged, AUTO_MERGE_MIN_PARTS);
        assert_eq!(summary.inputs_merged, 0);
        assert_eq!(dir.manifest("t").unwrap().parts.len(), 1);
        assert_eq!(ids(&dir), expected_ids(AUTO_MERGE_MIN_PARTS));
        assert!(unlisted_files(&dir).is_empty());
    }

    #[test]
    fn deletions_committed_while_a_merge_writes_are_carried_onto_its_output() {
        // The parts' ids interleave (part p holds p, p + n, p + 2n, …), so the output takes
        // one row at a time from each input, and some inputs had deleted rows already when the
        // merge read them. Both scopes merge, and the output lists the later deletions as its
        // own deleted rows instead of being written again without them.
        let parts = AUTO_MERGE_MIN_PARTS;
        for options in [MergeOptions::default(), tiered()] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = DataDir::new(tmp.path().join("data"));
            for part in 0..parts {
                let ids = (0..20).map(|row| row * parts + part);
                add_part_of(&dir, tmp.path(), part, ids);
            }
            let files: Vec<String> = dir
                .manifest("t")
                .unwrap()
                .parts
                .iter()
                .map(|p| p.file.clone())
                .collect();
            // Row r of part p holds id r * n + p.
            let id_of = |part: usize, row: u64| row as usize * parts + part;
            let before: BTreeMap<String, Vec<u64>> =
                [(files[0].clone(), vec![1, 5]), (files[2].clone(), vec![0])].into();
            crate::delete_rows(&dir, "t", &before).unwrap();
            let meanwhile: BTreeMap<String, Vec<u64>> = [
                (files[0].clone(), vec![0, 2, 19]),
                (files[1].clone(), vec![7]),
                (files[3].clone(), vec![10, 11]),
            ]
            .into();
            // A full merge runs rounds until one merges nothing: the deletions go in the first.
            // A reader then takes the table as it is, and still reads it after the merge.
            let mut first_round = true;
            let mut reader = None;
            let summary = merge_parts_observed(&dir, "t", &options, &mut || {
                if std::mem::take(&mut first_round) {
                    assert_eq!(crate::delete_rows(&dir, "t", &meanwhile).unwrap(), 6);
                    reader = Some((dir.read_lease("t").unwrap(), dir.manifest("t").unwrap()));
                }
            })
            .unwrap();
            let (lease, seen) = reader.unwrap();
            let table_dir = dir.table_dir("t").unwrap();
            for part in &seen.parts {
                if let Some(deletes) = &part.deletes {
                    let read = strata_format::deletes::read_deletion_vector(
                        &table_dir, deletes, part.rows,
                    );
                    assert!(read.is_ok(), "{:?}: {read:?}", options.scope);
                }
            }
            drop(lease);
            let manifest = dir.manifest("t").unwrap();
            assert_eq!(manifest.parts.len(), 1);
            let output = &manifest.parts[0];
            let rows = 20 * parts as u64;
            match options.scope {
                MergeScope::Tiered => {
                    assert_eq!(summary.inputs_merged, parts);
                    assert_eq!(output.rows, rows - 3);
                    assert_eq!(output.deletes.as_ref().map(|d| d.rows), Some(6));
                }
                // A full merge's next round rewrites the output alone, without its deleted rows.
                MergeScope::All => {
                    assert_eq!(summary.inputs_merged, parts + 1);
                    assert_eq!(output.rows, rows - 9);
                    assert!(output.deletes.is_none());
                }
            }
            let gone: HashSet<usize> = before
                .iter()
                .chain(&meanwhile)
                .flat_map(|(file, rows)| {
                    let part = files.iter().position(|f| f == file).unwrap();
                    rows.iter().map(move |&row| id_of(part, row))
                })
                .collect();
            let expected: Vec<u64> = (0..20 * parts)
                .filter(|id| !gone.contains(id))
                .map(|id| id as u64)
                .collect();
            assert_eq!(ids(&dir), expected, "{:?}", options.scope);
            assert!(unlisted_files(&dir).is_empty());
        }
    }

    #[test]
    fn garbage_collection_spares_a_running_merge_and_deletes_unlisted_files_after() {
        let (tmp, dir) = small_parts(2);
        let table_dir = dir.table_dir("t").unwrap();
        let orphan = table_dir.join("parts").join("part-orphan.parquet.tmp");
        std::fs::write(&orphan, b"left by a killed writer").unwrap();
        let lease = dir.merge_lease("t").unwrap();
        add_part(&dir, tmp.path(), 2);
        assert!(orphan.exists(), "deleted while a merge was running");
        drop(lease);
        add_part(&dir, tmp.path(), 3);
        assert!(!orphan.exists());
        assert_eq!(ids(&dir), expected_ids(4));
    }

    #[test]
    fn a_table_dropped_while_a_merge_writes_stays_dropped() {
        let (_tmp, dir) = small_parts(AUTO_MERGE_MIN_PARTS);
        let result = merge_parts_observed(&dir, "t", &tiered(), &mut || {
            assert!(dir.drop_table("t").unwrap());
        });
        assert!(
            matches!(result, Err(EngineError::NoSuchTable(_))),
            "{result:?}"
        );
        assert!(!dir.table_exists("t").unwrap());
    }
}
