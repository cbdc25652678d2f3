//! A transaction's private view of a table it changed: its snapshot, with the rows of the keys
//! it wrote deleted and a part of its own documents added, for the statements of the
//! transaction that read the table (PostgreSQL's "a transaction sees its own writes").
//!
//! The view is a manifest no one commits. Its part and deletion vectors are files in the
//! table's `parts/` directory under names no commit uses (`view-…`), written without fsync
//! (a crash loses only what was never committed). While the view lives it holds the table's
//! merge lease, under which garbage collection leaves unlisted files alone; dropping it
//! deletes its files (files of a killed process are unlisted garbage, collected later).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use strata_format::Manifest;
use strata_format::checksum::CHECKSUM_SUFFIX;
use strata_format::deletes::DELETION_VECTOR_SUFFIX;
use strata_format::keys::key_file;
use strata_json::KeyValue;

use super::{TableChanges, write_documents};
use crate::deletes::{live_key_rows, stage_deletions_named};
use crate::error::EngineError;
use crate::table::{DataDir, MergeLease};

/// A table as one transaction sees it (see the module docs).
#[derive(Debug)]
pub struct PrivateView {
    /// The snapshot with the transaction's changes; never committed.
    pub manifest: Manifest,
    table_dir: PathBuf,
    files: Vec<String>,
    _lease: MergeLease,
}

impl Drop for PrivateView {
    fn drop(&mut self) {
        for file in &self.files {
            // Best effort: a file left behind is unlisted garbage, collected later.
            let _ = strata_format::held::delete(&Manifest::part_path(&self.table_dir, file));
        }
    }
}

/// The view of `table` at `snapshot` with `changes` (see the module docs).
///
/// Must run where `strata_engine::ingest` may (documents are shredded here).
pub fn stage_view(
    data_dir: &DataDir,
    table: &str,
    snapshot: &Manifest,
    changes: &TableChanges,
) -> Result<PrivateView, EngineError> {
    let lease = data_dir.merge_lease(table)?;
    let table_dir = data_dir.table_dir(table)?;
    let mut view = PrivateView {
        manifest: snapshot.clone(),
        table_dir: table_dir.clone(),
        files: Vec::new(),
        _lease: lease,
    };
    let stem = view_stem();
    let keys: Vec<KeyValue> = changes.keyed.keys().cloned().collect();
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for hit in live_key_rows(table, &table_dir, snapshot, &keys)? {
        rows.entry(hit.part).or_default().push(hit.row);
    }
    let vector_name = |part: &str| format!("{stem}-{part}{DELETION_VECTOR_SUFFIX}");
    // Listed before they are written: a failure halfway still deletes what was written.
    view.files.extend(rows.keys().map(|part| vector_name(part)));
    let file = format!("{stem}.parquet");
    view.files
        .extend(part_files(&file, &snapshot.settings.indexes));
    // Never made durable and gone with the view: held in memory, not created on disk.
    let (written, _never_durable) = strata_format::durability::deferred(|| {
        stage_deletions_named(table, &table_dir, &mut view.manifest, &rows, &vector_name)?;
        write_documents(table, &table_dir, snapshot, &file, changes)
    });
    if let Some(part) = written? {
        view.manifest.parts.push(Arc::new(part.entry));
    }
    Ok(view)
}

/// A name no other view or commit uses.
fn view_stem() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "view-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The files a part named `file` is written as: itself, its key file, their checksum files,
/// its text index, its files of the table's secondary `indexes` and their checksum files.
fn part_files(file: &str, indexes: &[strata_format::IndexSetting]) -> Vec<String> {
    let keys = key_file(file);
    let mut files = vec![
        strata_format::text_index::text_index_file(file),
        format!("{file}{CHECKSUM_SUFFIX}"),
        format!("{keys}{CHECKSUM_SUFFIX}"),
        keys,
        file.to_owned(),
    ];
    for index in indexes {
        let index = strata_format::indexes::index_file(file, &index.name);
        files.push(format!("{index}{CHECKSUM_SUFFIX}"));
        files.push(index);
    }
    files
}
