//! Merges: many small parts become fewer, larger sorted parts, atomically.
//!
//! The documents of the input parts are reconstructed and shredded again, so the output parts
//! choose their columns and types from all their documents (the per-part typing rule holds after
//! a merge exactly as after an ingest). Outputs are written first; one manifest commit then
//! swaps them in and retires the inputs, so a reader sees either the inputs or the outputs and
//! never a document twice or not at all.

use std::path::Path;

use serde_json::Value;
use strata_format::{Manifest, PartEntry, RetiredPart, read_part};
use strata_json::reconstruct::reconstruct;
use strata_json::{JsonPath, ShredOptions, Shredder};

use crate::error::EngineError;
use crate::ingest::{DEFAULT_PART_TARGET_BYTES, full_part, write_shredded};
use crate::table::{DataDir, collect_garbage, new_part_file, unix_now};

/// Parts smaller than this on disk are merge candidates.
pub const SMALL_PART_BYTES: u64 = 16 * 1024 * 1024;
/// Automatic merges start when at least this many small parts exist.
pub const AUTO_MERGE_MIN_PARTS: usize = 8;

#[derive(Debug, Clone)]
pub struct MergeOptions {
    pub part_target_bytes: usize,
    /// Only merge when there are at least [`AUTO_MERGE_MIN_PARTS`] small parts.
    pub only_when_many: bool,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions {
            part_target_bytes: DEFAULT_PART_TARGET_BYTES,
            only_when_many: false,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeSummary {
    pub parts_before: usize,
    pub parts_after: usize,
    pub inputs_merged: usize,
    pub outputs_written: usize,
}

/// Merges the small parts of `table` (takes the table's write lock).
pub fn merge_small_parts(
    data_dir: &DataDir,
    table: &str,
    options: &MergeOptions,
) -> Result<MergeSummary, EngineError> {
    let _lock = data_dir.lock_for_write(table)?;
    let table_dir = data_dir.table_dir(table)?;
    let mut manifest = data_dir.manifest(table)?;
    merge_locked(table, &table_dir, &mut manifest, options)
}

/// Merges with the write lock already held and `manifest` the current one.
pub(crate) fn merge_locked(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    options: &MergeOptions,
) -> Result<MergeSummary, EngineError> {
    let parts_before = manifest.parts.len();
    let mut candidates: Vec<PartEntry> = manifest
        .parts
        .iter()
        .filter(|p| !p.full && p.bytes < SMALL_PART_BYTES)
        .cloned()
        .collect();
    let minimum = if options.only_when_many {
        AUTO_MERGE_MIN_PARTS
    } else {
        2
    };
    if candidates.len() < minimum {
        return Ok(MergeSummary {
            parts_before,
            parts_after: parts_before,
            ..Default::default()
        });
    }
    candidates.sort_by_key(|p| p.rows);

    let sort_key = manifest.settings.sort_key.clone();
    let shred_options = ShredOptions {
        sort_key: sort_key.iter().map(|s| JsonPath::decode(s)).collect(),
        max_columns: manifest.settings.max_columns,
    };
    let json_err = |source| EngineError::Json {
        table: table.to_owned(),
        source,
    };
    let mut outputs = Vec::new();
    let mut shredder = Shredder::new(shred_options.clone());
    for part in &candidates {
        let path = Manifest::part_path(table_dir, &part.file);
        for batch in read_part(&path, 8192)? {
            let batch = batch.map_err(|source| strata_format::FormatError::Arrow {
                path: path.clone(),
                source,
            })?;
            for doc in reconstruct(&batch, &JsonPath::default())
                .map_err(json_err)?
                .into_iter()
                .flatten()
            {
                if let Value::Object(map) = doc {
                    shredder.push(&map);
                }
            }
            if shredder.buffered_bytes() >= options.part_target_bytes {
                let full = std::mem::replace(&mut shredder, Shredder::new(shred_options.clone()));
                outputs.push(full_part(write_shredded(
                    table,
                    table_dir,
                    &new_part_file(manifest.version),
                    full,
                    &sort_key,
                )?));
            }
        }
    }
    if !shredder.is_empty() {
        outputs.push(write_shredded(
            table,
            table_dir,
            &new_part_file(manifest.version),
            shredder,
            &sort_key,
        )?);
    }

    let now = unix_now();
    let merged: Vec<String> = candidates.iter().map(|p| p.file.clone()).collect();
    manifest.parts.retain(|p| !merged.contains(&p.file));
    let outputs_written = outputs.len();
    manifest.parts.extend(outputs);
    manifest
        .retired
        .extend(merged.iter().map(|file| RetiredPart {
            file: file.clone(),
            retired_at: now,
        }));
    manifest.version += 1;
    manifest.commit(table_dir)?;
    if collect_garbage(table_dir, manifest)? {
        manifest.version += 1;
        manifest.commit(table_dir)?;
    }
    Ok(MergeSummary {
        parts_before,
        parts_after: manifest.parts.len(),
        inputs_merged: merged.len(),
        outputs_written,
    })
}
