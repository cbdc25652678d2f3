//! Transactions: changes to several documents of several tables that commit together or not at
//! all, under snapshot isolation (issue 14, ADR 0017).
//!
//! A transaction reads one snapshot — a manifest per table, all taken while no multi-table
//! commit of this process is half visible ([`visibility`]), and kept readable by the read
//! leases its holder takes before reading them — and buffers its writes as net changes per table
//! ([`TableChanges`]). Nothing touches a table before [`commit`]:
//! 1. the writer locks of the changed tables, taken in name order, so two commits never wait on
//!    each other in a cycle;
//! 2. *first committer wins*: every key the transaction wrote must still be where its snapshot
//!    had it — the same row of the same part, or absent both times; otherwise another commit
//!    (a transaction, an ingest, a `DELETE`) changed it after the snapshot, and the commit fails
//!    with [`EngineError::WriteConflict`] (SQLSTATE 40001: the client retries). A row a merge
//!    moved is not a change when the part it is in now holds no row written after the snapshot
//!    (`PartEntry::newest_write`); a merge that also took newer rows makes it look like one: a
//!    false conflict costs a retry, never a lost update;
//! 3. for each table, one part holding the new documents and deletion vectors for the rows they
//!    replace or delete, found through the key files of the table as it is *now* (so rows that
//!    merges moved are found where they are);
//! 4. the commit: one manifest commit for one table; for several, an *intent record* listing
//!    every new manifest is made durable first ([`intent`]), then the manifests are committed and
//!    the record removed. A process killed in between leaves a record that the next writer of
//!    any of its tables (and the server at start) applies before anything else, so the
//!    transaction is in all its tables or in none.
//!
//! A transaction that reads a table it changed reads a private view ([`view`]): its snapshot
//! plus a part of its own documents, with its deletion vectors, in files no manifest lists.

pub mod intent;
pub mod view;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use strata_format::Manifest;
use strata_json::{KeyValue, Shredder, parse_document};

use crate::deletes::{live_key_rows, stage_deletions};
use crate::error::EngineError;
use crate::part_writing::{shred_options, write_shredded};
use crate::table::{DataDir, WriteLock, new_part_file};

pub use view::{PrivateView, stage_view};

/// The net change of one transaction to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableChanges {
    /// For a table with a key: each key the transaction wrote and its document now (`None`:
    /// deleted). The document's key must be the map's key.
    pub keyed: BTreeMap<KeyValue, Option<String>>,
    /// For a table without a key: the documents the transaction appended.
    pub appended: Vec<String>,
}

impl TableChanges {
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.appended.is_empty()
    }

    /// Every document the changes write.
    pub fn documents(&self) -> impl Iterator<Item = &str> {
        self.keyed
            .values()
            .flatten()
            .chain(&self.appended)
            .map(String::as_str)
    }
}

/// What a transaction writes to one table, and the snapshot it read it in.
#[derive(Debug, Clone)]
pub struct TableWrite {
    /// The table as the transaction's snapshot has it. Its files must still be readable: the
    /// transaction holds a read lease on the table from before it read this manifest.
    pub snapshot: Arc<Manifest>,
    pub changes: TableChanges,
}

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitSummary {
    /// The tables changed, by name.
    pub tables: Vec<String>,
    /// Documents written (new or replacing).
    pub written: u64,
    /// Rows deleted: replaced or deleted documents.
    pub deleted: u64,
}

/// Held (shared) while a snapshot of several tables is taken, and (exclusive) while a commit
/// makes its manifests visible: in this process a snapshot never holds part of a commit.
pub fn visibility() -> &'static RwLock<()> {
    static VISIBILITY: RwLock<()> = RwLock::new(());
    &VISIBILITY
}

/// Takes the shared side of [`visibility`] (a poisoned lock is taken as it is: it guards no
/// data).
pub fn snapshot_guard() -> RwLockReadGuard<'static, ()> {
    visibility().read().unwrap_or_else(PoisonError::into_inner)
}

/// Commits a transaction's writes (see the module docs). Tables without changes are skipped;
/// every changed table must exist. On [`EngineError::WriteConflict`] or any other error nothing
/// is committed.
///
/// Must run where `strata_engine::ingest` may (a deep stack: documents are shredded here).
pub fn commit(
    data_dir: &DataDir,
    writes: &BTreeMap<String, TableWrite>,
) -> Result<CommitSummary, EngineError> {
    let changed: Vec<(&String, &TableWrite)> = writes
        .iter()
        .filter(|(_, write)| !write.changes.is_empty())
        .collect();
    let mut summary = CommitSummary {
        tables: changed.iter().map(|(table, _)| (*table).clone()).collect(),
        ..CommitSummary::default()
    };
    if changed.is_empty() {
        return Ok(summary);
    }
    // BTreeMap order: every commit locks in the same order.
    let mut locks: Vec<WriteLock> = Vec::with_capacity(changed.len());
    for (table, _) in &changed {
        locks.push(data_dir.lock_existing(table, "transaction commit")?);
    }
    let mut staged: Vec<StagedTable> = Vec::with_capacity(changed.len());
    for (table, write) in &changed {
        let table_dir = data_dir.table_dir(table)?;
        let mut manifest = data_dir.manifest(table)?;
        check_conflicts(
            table,
            &table_dir,
            &write.snapshot,
            &manifest,
            &write.changes,
        )?;
        let base_version = manifest.version;
        let (written, deleted) = apply_changes(table, &table_dir, &mut manifest, &write.changes)?;
        summary.written += written;
        summary.deleted += deleted;
        staged.push(StagedTable {
            table: (*table).clone(),
            table_dir,
            base_version,
            manifest,
        });
    }
    let _visible = visibility().write().unwrap_or_else(PoisonError::into_inner);
    match &staged[..] {
        [one] => one.manifest.commit(&one.table_dir)?,
        several => {
            let record = intent::write(data_dir.root(), several)?;
            for table in several {
                table.manifest.commit(&table.table_dir)?;
            }
            intent::remove(&record)?;
        }
    }
    drop(locks);
    Ok(summary)
}

/// A table's next manifest, written but not committed.
pub(crate) struct StagedTable {
    pub(crate) table: String,
    pub(crate) table_dir: PathBuf,
    /// The version it replaces.
    pub(crate) base_version: u64,
    pub(crate) manifest: Manifest,
}

/// Fails when a key written by the transaction no longer lives where `snapshot` had it.
fn check_conflicts(
    table: &str,
    table_dir: &Path,
    snapshot: &Manifest,
    current: &Manifest,
    changes: &TableChanges,
) -> Result<(), EngineError> {
    let unchanged = snapshot.version == current.version
        && snapshot.parts.len() == current.parts.len()
        && snapshot
            .parts
            .iter()
            .zip(&current.parts)
            .all(|(a, b)| a.file == b.file && a.deletes == b.deletes);
    if changes.keyed.is_empty() || unchanged {
        return Ok(());
    }
    let keys: Vec<KeyValue> = changes.keyed.keys().cloned().collect();
    let locate = |manifest: &Manifest| -> Result<Vec<Option<(String, u64)>>, EngineError> {
        let mut found = vec![None; keys.len()];
        for hit in live_key_rows(table, table_dir, manifest, &keys)? {
            found[hit.key] = Some((hit.part, hit.row));
        }
        Ok(found)
    };
    let before = locate(snapshot)?;
    let now = locate(current)?;
    let written_at = |part: &str| {
        current
            .parts
            .iter()
            .find(|p| p.file == part)
            .and_then(|p| p.newest_write)
    };
    let conflict = before
        .iter()
        .zip(&now)
        .position(|(before, now)| match (before, now) {
            (before, now) if before == now => false,
            // Moved, not changed: a merge copied the row into a part that holds no row written
            // after the snapshot (there was one live row then, and it is this one).
            (Some(_), Some((part, _))) => {
                written_at(part).is_none_or(|written| written > snapshot.version)
            }
            _ => true,
        });
    match conflict {
        None => Ok(()),
        Some(index) => Err(EngineError::WriteConflict {
            table: table.to_owned(),
            key: keys[index].to_string(),
        }),
    }
}

/// Writes the part of the new documents and the deletion vectors of the rows they replace or
/// delete into `manifest` (the table now, under its writer lock) as its next version; returns
/// the documents written and the rows deleted.
fn apply_changes(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    changes: &TableChanges,
) -> Result<(u64, u64), EngineError> {
    let key = manifest.settings.key.as_ref().map(|k| k.table_key());
    match (&key, changes.keyed.is_empty(), changes.appended.is_empty()) {
        (Some(_), _, false) => {
            return Err(EngineError::Invalid(format!(
                "table {table} has a key: its documents are written by key, not appended"
            )));
        }
        (None, false, _) => {
            return Err(EngineError::Invalid(format!(
                "table {table} has no key: its documents cannot be written by key"
            )));
        }
        _ => {}
    }
    let version = manifest.version + 1;
    let keys: Vec<KeyValue> = changes.keyed.keys().cloned().collect();
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for hit in live_key_rows(table, table_dir, manifest, &keys)? {
        rows.entry(hit.part).or_default().push(hit.row);
    }
    let deleted = stage_deletions(table, table_dir, manifest, version, &rows)?;
    let part = write_documents(
        table,
        table_dir,
        manifest,
        &new_part_file(manifest.version),
        changes,
    )?;
    let written = part.as_ref().map_or(0, |p| p.rows);
    manifest
        .parts
        .extend(part.map(|part| strata_format::PartEntry {
            newest_write: Some(version),
            ..part
        }));
    manifest.version = version;
    Ok((written, deleted))
}

/// Writes the documents of `changes` as one part named `file` of the table `manifest`
/// describes (None when there are none), checking that each keyed document has its map key.
pub(crate) fn write_documents(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    file: &str,
    changes: &TableChanges,
) -> Result<Option<strata_format::PartEntry>, EngineError> {
    let key = manifest.settings.key.as_ref().map(|k| k.table_key());
    let mut shredder = Shredder::new(shred_options(&manifest.settings));
    let mut pushed = 0u64;
    let mut push = |text: &str, expected: Option<&KeyValue>| -> Result<(), EngineError> {
        let document = parse_document(text.as_bytes()).map_err(|e| {
            EngineError::Invalid(format!(
                "table {table}: a document written is not valid: {e}"
            ))
        })?;
        if let (Some(key), Some(expected)) = (&key, expected) {
            let found = key.of(&document).map_err(|e| {
                EngineError::Invalid(format!("table {table}: a document written has {e}"))
            })?;
            if &found != expected {
                return Err(EngineError::Invalid(format!(
                    "table {table}: the document written for key {expected} has key {found}"
                )));
            }
        }
        shredder.push(&document);
        pushed += 1;
        Ok(())
    };
    for (key, document) in &changes.keyed {
        if let Some(text) = document {
            push(text, Some(key))?;
        }
    }
    for text in &changes.appended {
        push(text, None)?;
    }
    if pushed == 0 {
        return Ok(None);
    }
    Ok(Some(
        write_shredded(table, table_dir, file, shredder, &manifest.settings)?.entry,
    ))
}
