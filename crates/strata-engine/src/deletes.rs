//! Deleting rows of parts: the write side of deletion vectors (ADR 0015).
//!
//! A deletion adds row positions to parts' deletion vectors and commits them in one manifest
//! commit under the table's writer lock, so a reader sees all of one deletion or none of it.
//! Vectors are cumulative: each commit writes a new vector file per part it changes (named
//! after the commit's version) holding the old positions and the new, and retires the old file
//! (deleted under the read-lease rule of ADR 0009, like a merged part). Readers of parts skip the
//! deleted rows (`strata_format::open_part`, the query scan); merges drop them for good.
//!
//! This is the primitive that keyed upserts, `DELETE` and `UPDATE` build on (issue 14).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use strata_format::deletes::{
    DeletionVector, deletion_vector, deletion_vector_file, write_deletion_vector,
};
use strata_format::live_keys::Located;
use strata_format::{KeyCache, Manifest, PartEntry};
use strata_json::KeyValue;

use crate::commit::commit_manifest;
use crate::error::EngineError;
use crate::table::{DataDir, collect_garbage, unix_now};

/// Deletes the given rows (positions within each part, by part file name) of `table` in one
/// commit; returns how many rows were not deleted before. Rows already deleted are ignored; a
/// part that is not in the table, or a position past a part's end, is an error and nothing is
/// committed.
pub fn delete_rows(
    data_dir: &DataDir,
    table: &str,
    rows: &BTreeMap<String, Vec<u64>>,
) -> Result<u64, EngineError> {
    let _lock = data_dir.lock_existing(table, "delete")?;
    let table_dir = data_dir.table_dir(table)?;
    let mut manifest = data_dir.manifest(table)?;
    commit_deletions(table, &table_dir, &mut manifest, rows)
}

/// Stages `rows` for deletion in `manifest` and commits it (nothing when no row was live);
/// returns how many rows were deleted. The caller holds the writer lock.
fn commit_deletions(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    rows: &BTreeMap<String, Vec<u64>>,
) -> Result<u64, EngineError> {
    let version = manifest.version + 1;
    let deleted = stage_deletions(table, table_dir, manifest, version, rows)?;
    if deleted == 0 {
        return Ok(0);
    }
    manifest.version = version;
    commit_manifest(manifest, table_dir)?;
    if collect_garbage(table_dir, manifest)? {
        manifest.version += 1;
        commit_manifest(manifest, table_dir)?;
    }
    Ok(deleted)
}

/// Deletes the live documents of a keyed `table` whose key is one of `keys`, in one commit;
/// returns how many were deleted (keys not in the table are ignored). The rows are found through
/// the parts' key files under the writer lock, so a document replaced meanwhile is deleted in
/// its newest version.
pub fn delete_keys(
    data_dir: &DataDir,
    table: &str,
    mut keys: Vec<KeyValue>,
) -> Result<u64, EngineError> {
    let _lock = data_dir.lock_existing(table, "delete")?;
    let table_dir = data_dir.table_dir(table)?;
    let mut manifest = data_dir.manifest(table)?;
    if manifest.settings.key.is_none() {
        return Err(EngineError::Invalid(format!(
            "table {table} has no key: its documents cannot be deleted by key"
        )));
    }
    keys.sort_unstable();
    keys.dedup();
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for hit in live_key_rows(table, &table_dir, &manifest, &keys)? {
        rows.entry(hit.part).or_default().push(hit.row);
    }
    commit_deletions(table, &table_dir, &mut manifest, &rows)
}

/// Writes the deletion vectors that delete `rows` (positions by part file name) from the parts
/// of `manifest` and lists them in it, retiring the vectors they replace, for the commit that
/// makes `version` (the caller commits). Returns how many rows were not deleted before. A part
/// that is not in the manifest, or a position past a part's end, is an error, and the manifest
/// is left as it was (vector files already written are unlisted garbage).
pub(crate) fn stage_deletions(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    version: u64,
    rows: &BTreeMap<String, Vec<u64>>,
) -> Result<u64, EngineError> {
    stage_deletions_named(table, table_dir, manifest, rows, &|part| {
        deletion_vector_file(part, version)
    })
}

/// [`stage_deletions`] with the vector files named by `file_name` (of the part's file name):
/// a transaction's private view names its own so that they never meet a commit's.
pub(crate) fn stage_deletions_named(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    rows: &BTreeMap<String, Vec<u64>>,
    file_name: &dyn Fn(&str) -> String,
) -> Result<u64, EngineError> {
    let mut deleted = 0;
    let mut retired = Vec::new();
    let mut changes = Vec::new();
    for (part_file, positions) in rows {
        let index = manifest
            .parts
            .iter()
            .position(|p| &p.file == part_file)
            .ok_or_else(|| EngineError::NoSuchPart {
                table: table.to_owned(),
                part: part_file.clone(),
            })?;
        let part = &manifest.parts[index];
        let mut vector = match &part.deletes {
            Some(deletes) => Arc::unwrap_or_clone(deletion_vector(table_dir, deletes, part.rows)?),
            None => DeletionVector::new(),
        };
        let before = vector.len();
        for &row in positions {
            if row >= part.rows {
                return Err(EngineError::NoSuchRow {
                    table: table.to_owned(),
                    part: part_file.clone(),
                    row,
                    rows: part.rows,
                });
            }
            vector.insert(row);
        }
        if vector.len() > before {
            deleted += vector.len() - before;
            changes.push((index, vector));
        }
    }
    let mut entries = Vec::with_capacity(changes.len());
    for (index, vector) in changes {
        let file = file_name(&manifest.parts[index].file);
        entries.push((index, write_deletion_vector(table_dir, &file, &vector)?));
    }
    for (index, entry) in entries {
        if let Some(old) = Arc::make_mut(&mut manifest.parts[index])
            .deletes
            .replace(entry)
        {
            retired.push(old.file);
        }
    }
    manifest.retire(retired, unix_now());
    Ok(deleted)
}

/// The deletion vector files a manifest lists for its visible parts.
pub(crate) fn listed_vectors(manifest: &Manifest) -> impl Iterator<Item = &str> {
    manifest
        .parts
        .iter()
        .filter_map(|p| p.deletes.as_ref().map(|d| d.file.as_str()))
}

/// A live row holding one of the keys looked up.
pub(crate) struct KeyRow {
    /// Index of the key in the sorted list looked up.
    pub(crate) key: usize,
    pub(crate) part: String,
    pub(crate) row: u64,
}

/// The live rows (not deleted by their part's vector) of `manifest`'s parts whose key is one of
/// `sorted_keys` (ascending, no duplicates), found through the parts' key files. In a table
/// that keeps its invariant, each key has at most one.
///
/// A live version of a server's table answers from its epoch's key map for the keys its logged
/// commits wrote, and looks for the others only in the parts that were there before them
/// ([`strata_format::live_keys`]).
pub(crate) fn live_key_rows(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    sorted_keys: &[KeyValue],
) -> Result<Vec<KeyRow>, EngineError> {
    let located = manifest
        .live_keys
        .get()
        .and_then(|keys| Some((keys.base_parts(), keys.locate(manifest, sorted_keys)?)));
    let every_part = || live_key_rows_in(table, table_dir, manifest.parts.iter(), sorted_keys);
    let Some((base_parts, located)) = located else {
        return every_part();
    };
    let mut rows = Vec::new();
    let mut in_base = Vec::new();
    for (index, located) in located.into_iter().enumerate() {
        match located {
            Located::Written(Some((part, row))) => {
                // Listed: `locate` checked it.
                let Some(part) = manifest.parts.get(part) else {
                    return every_part();
                };
                rows.push(KeyRow {
                    key: index,
                    part: part.file.clone(),
                    row,
                });
            }
            Located::Written(None) => {}
            Located::Base => in_base.push(index),
        }
    }
    if !in_base.is_empty() {
        let keys: Vec<KeyValue> = in_base.iter().map(|&i| sorted_keys[i].clone()).collect();
        let base = manifest.parts.iter().take(base_parts);
        for hit in live_key_rows_in(table, table_dir, base, &keys)? {
            rows.push(KeyRow {
                key: in_base[hit.key],
                ..hit
            });
        }
    }
    Ok(rows)
}

/// [`live_key_rows`] among `parts` (some of a manifest's parts) only.
pub(crate) fn live_key_rows_in<'a>(
    table: &str,
    table_dir: &Path,
    parts: impl Iterator<Item = &'a Arc<PartEntry>>,
    sorted_keys: &[KeyValue],
) -> Result<Vec<KeyRow>, EngineError> {
    let mut rows = Vec::new();
    if sorted_keys.is_empty() {
        return Ok(rows);
    }
    for part in parts {
        let Some(entry) = &part.keys else {
            return Err(EngineError::Invalid(format!(
                "table {table}: part {} of a keyed table has no key file",
                part.file
            )));
        };
        let hits = KeyCache::shared().find_keys(table_dir, entry, part.rows, sorted_keys)?;
        if hits.is_empty() {
            continue;
        }
        let deleted = match &part.deletes {
            Some(deletes) => Some(deletion_vector(table_dir, deletes, part.rows)?),
            None => None,
        };
        rows.extend(
            hits.into_iter()
                .filter(|hit| !deleted.as_ref().is_some_and(|d| d.contains(hit.row)))
                .map(|hit| KeyRow {
                    key: hit.key,
                    part: part.file.clone(),
                    row: hit.row,
                }),
        );
    }
    Ok(rows)
}

/// The keys among `keys` that have a live document in `manifest` (a snapshot of the keyed
/// `table`, whose files its holder's read lease keeps).
pub fn live_keys(
    data_dir: &DataDir,
    table: &str,
    manifest: &Manifest,
    keys: &[KeyValue],
) -> Result<std::collections::BTreeSet<KeyValue>, EngineError> {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let table_dir = data_dir.table_dir(table)?;
    Ok(live_key_rows(table, &table_dir, manifest, &sorted)?
        .into_iter()
        .map(|hit| sorted[hit.key].clone())
        .collect())
}
