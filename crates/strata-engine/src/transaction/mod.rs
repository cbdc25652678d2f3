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

mod group;
pub mod intent;
pub mod logged;
pub mod view;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use strata_format::Manifest;
use strata_json::{KeyValue, Shredder, parse_document};

use crate::commit::commit_manifest;
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
    /// Documents deleted by key.
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
/// Transactions committing at the same moment in this process are committed together
/// ([`group`]): one part and one manifest commit per table for all of them.
///
/// Must run where `strata_engine::ingest` may (a deep stack: documents are shredded here).
pub fn commit(
    data_dir: &DataDir,
    writes: &BTreeMap<String, TableWrite>,
) -> Result<CommitSummary, EngineError> {
    let changed: BTreeMap<String, TableWrite> = writes
        .iter()
        .filter(|(_, write)| !write.changes.is_empty())
        .map(|(table, write)| (table.clone(), write.clone()))
        .collect();
    if changed.is_empty() {
        return Ok(CommitSummary::default());
    }
    group::submit(data_dir, changed)
}

/// Commits several transactions' writes together, in order: each is checked for write
/// conflicts against the tables as they are and against the keys of the transactions before it
/// in the batch (which it cannot have seen: they were not committed when it began); those that
/// pass are written as one part per table and committed in one manifest commit per table (and
/// one intent record for several tables). Returns each transaction's outcome, in order.
pub(crate) fn commit_batch(
    data_dir: &DataDir,
    batch: &[BTreeMap<String, TableWrite>],
) -> Vec<Result<CommitSummary, EngineError>> {
    let tables: std::collections::BTreeSet<&String> =
        batch.iter().flat_map(|writes| writes.keys()).collect();
    // Name order: every commit locks in the same order.
    let mut locks: Vec<WriteLock> = Vec::with_capacity(tables.len());
    for table in &tables {
        match data_dir.lock_existing(table, "transaction commit") {
            Ok(lock) => locks.push(lock),
            Err(e) if batch.len() == 1 => return vec![Err(e)],
            // One transaction's missing table must not fail the others: one at a time.
            Err(_) => {
                drop(locks);
                return batch
                    .iter()
                    .flat_map(|writes| commit_batch(data_dir, std::slice::from_ref(writes)))
                    .collect();
            }
        }
    }
    let mut outcomes: Vec<Result<CommitSummary, EngineError>> = Vec::with_capacity(batch.len());
    let mut current: BTreeMap<&String, Manifest> = BTreeMap::new();
    let mut merged: BTreeMap<&String, TableChanges> = BTreeMap::new();
    let mut accepted = Vec::new();
    for writes in batch {
        match accept(data_dir, writes, &mut current, &merged) {
            Ok(summary) => {
                for (table, write) in writes {
                    let into = merged.entry(table).or_default();
                    into.keyed.extend(write.changes.keyed.clone());
                    into.appended.extend(write.changes.appended.iter().cloned());
                }
                accepted.push(outcomes.len());
                outcomes.push(Ok(summary));
            }
            Err(e) => outcomes.push(Err(e)),
        }
    }
    if accepted.is_empty() {
        return outcomes;
    }
    if let Err(e) = write_and_commit(data_dir, current, &merged) {
        // Nothing of the batch is committed: every accepted transaction fails with the cause.
        let message = e.to_string();
        let mut first = Some(e);
        for index in accepted {
            outcomes[index] = Err(first
                .take()
                .unwrap_or_else(|| EngineError::Invalid(message.clone())));
        }
    }
    drop(locks);
    outcomes
}

/// Checks one transaction of a batch (see [`commit_batch`]) against the tables now (`current`,
/// loaded as needed) and the keys accepted before it (`merged`).
fn accept<'a>(
    data_dir: &DataDir,
    writes: &'a BTreeMap<String, TableWrite>,
    current: &mut BTreeMap<&'a String, Manifest>,
    merged: &BTreeMap<&String, TableChanges>,
) -> Result<CommitSummary, EngineError> {
    let mut summary = CommitSummary::default();
    for (table, write) in writes {
        let table_dir = data_dir.table_dir(table)?;
        if !current.contains_key(table) {
            current.insert(table, data_dir.manifest(table)?);
        }
        let manifest = &current[table];
        if let Some(earlier) = merged.get(table)
            && let Some(key) = write
                .changes
                .keyed
                .keys()
                .find(|key| earlier.keyed.contains_key(*key))
        {
            return Err(EngineError::WriteConflict {
                table: table.clone(),
                key: key.to_string(),
            });
        }
        check_conflicts(table, &table_dir, &write.snapshot, manifest, &write.changes)?;
        summary.tables.push(table.clone());
        summary.written += write.changes.documents().count() as u64;
        summary.deleted += write.changes.keyed.values().filter(|d| d.is_none()).count() as u64;
    }
    Ok(summary)
}

/// Writes the merged changes of a batch into the tables (`current`: their manifests now, under
/// their writer locks) and commits them (see the module docs, step 4).
fn write_and_commit<'a>(
    data_dir: &DataDir,
    current: BTreeMap<&'a String, Manifest>,
    merged: &BTreeMap<&'a String, TableChanges>,
) -> Result<(), EngineError> {
    // On a server: one write-ahead log frame for the whole batch, manifests published in memory.
    let mirrored = merged.keys().any(|table| {
        data_dir
            .table_dir(table)
            .is_ok_and(|dir| crate::mirror::of(&dir).is_some())
    });
    if !mirrored && let Some(wal) = logged::wal_of(data_dir) {
        return logged::commit(data_dir, &wal, current, merged);
    }
    let mut staged: Vec<StagedTable> = stage_tables(data_dir, current, merged, false)?
        .into_iter()
        .map(|(table, _)| table)
        .collect();
    let _visible = visibility().write().unwrap_or_else(PoisonError::into_inner);
    match &mut staged[..] {
        [] => {}
        [one] => commit_manifest(&mut one.manifest, &one.table_dir)?,
        several => {
            if let Some((table, _)) = crate::mirror::of(&several[0].table_dir) {
                return Err(EngineError::Mirror {
                    table,
                    message: "a transaction that changes several tables cannot commit on \
                              object storage, whose log commits one table at a time; change one \
                              table per transaction"
                        .into(),
                    conflict: false,
                });
            }
            let record = intent::write(data_dir.root(), several)?;
            for table in several.iter_mut() {
                commit_manifest(&mut table.manifest, &table.table_dir)?;
            }
            intent::remove(&record)?;
        }
    }
    Ok(())
}

/// Writes each changed table's part and deletion vectors (`apply_changes`) into its next
/// manifest, built on `current` (the tables now, under their writer locks). With
/// `defer_durability` nothing is fsynced, and each table comes with the files and directories
/// left undurable (`strata_format::durability`); otherwise that list is empty.
pub(crate) fn stage_tables<'a>(
    data_dir: &DataDir,
    mut current: BTreeMap<&'a String, Manifest>,
    merged: &BTreeMap<&'a String, TableChanges>,
    defer_durability: bool,
) -> Result<Vec<(StagedTable, Vec<PathBuf>)>, EngineError> {
    let mut staged = Vec::with_capacity(merged.len());
    for (table, changes) in merged {
        let table_dir = data_dir.table_dir(table)?;
        let mut manifest = current
            .remove(table)
            .ok_or_else(|| EngineError::NoSuchTable((*table).clone()))?;
        let base_version = manifest.version;
        let mut write = || apply_changes(table, &table_dir, &mut manifest, changes);
        let (applied, undurable) = match defer_durability {
            true => strata_format::durability::deferred(write),
            false => (write(), Vec::new()),
        };
        applied?;
        let staged_table = StagedTable {
            table: (*table).clone(),
            table_dir,
            base_version,
            manifest,
        };
        staged.push((staged_table, undurable));
    }
    Ok(staged)
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
pub(crate) fn apply_changes(
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use strata_json::KeyType;

    use super::*;
    use crate::input::Input;
    use crate::{IngestOptions, export_table, ingest};

    /// Creates table `name` keyed by the integer `id`, with `lines` as its documents.
    pub(super) fn keyed_table(data_dir: &DataDir, name: &str, lines: &[&str]) {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for line in lines {
            writeln!(file, "{line}").unwrap();
        }
        let options = IngestOptions {
            key: Some(("id".into(), KeyType::Integer)),
            ..IngestOptions::default()
        };
        ingest(
            data_dir,
            name,
            &[Input::File(file.path().to_owned())],
            &options,
            &mut |_| {},
            &mut |_| {},
        )
        .unwrap();
    }

    fn upsert(
        data_dir: &DataDir,
        table: &str,
        id: i64,
        document: &str,
    ) -> BTreeMap<String, TableWrite> {
        let snapshot = Arc::new(data_dir.manifest(table).unwrap());
        let mut changes = TableChanges::default();
        changes
            .keyed
            .insert(KeyValue::Integer(id), Some(document.to_owned()));
        BTreeMap::from([(table.to_owned(), TableWrite { snapshot, changes })])
    }

    #[test]
    fn a_batch_commits_once_per_table_and_the_later_writer_of_a_key_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#, r#"{"id":2,"v":0}"#]);
        keyed_table(&data_dir, "b", &[r#"{"id":1,"v":0}"#]);
        let versions = |d: &DataDir| {
            (
                d.manifest("a").unwrap().version,
                d.manifest("b").unwrap().version,
            )
        };
        let before = versions(&data_dir);
        let batch = vec![
            upsert(&data_dir, "a", 1, r#"{"id":1,"v":1}"#),
            upsert(&data_dir, "a", 1, r#"{"id":1,"v":2}"#),
            upsert(&data_dir, "a", 2, r#"{"id":2,"v":3}"#),
            upsert(&data_dir, "b", 1, r#"{"id":1,"v":4}"#),
        ];
        let outcomes = commit_batch(&data_dir, &batch);
        assert!(outcomes[0].is_ok());
        assert!(matches!(&outcomes[1], Err(EngineError::WriteConflict { key, .. }) if key == "1"));
        assert!(outcomes[2].is_ok() && outcomes[3].is_ok());
        // One commit per table for the whole batch.
        assert_eq!(versions(&data_dir), (before.0 + 1, before.1 + 1));
        assert_eq!(
            exported(&data_dir, "a"),
            [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":3}"#]
        );
    }

    /// The table's documents as exported, sorted.
    pub(super) fn exported(data_dir: &DataDir, table: &str) -> Vec<String> {
        let mut out = Vec::new();
        export_table(data_dir, table, &mut out).unwrap();
        let mut lines: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn concurrent_commits_of_one_key_let_exactly_one_win() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#]);
        let writes: Vec<_> = (1..=8)
            .map(|v| upsert(&data_dir, "a", 1, &format!(r#"{{"id":1,"v":{v}}}"#)))
            .collect();
        let handles: Vec<_> = writes
            .into_iter()
            .map(|w| {
                let data_dir = data_dir.clone();
                std::thread::Builder::new()
                    .stack_size(strata_json::DEEP_STACK_BYTES)
                    .spawn(move || commit(&data_dir, &w).is_ok())
                    .unwrap()
            })
            .collect();
        let outcomes: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // All began from one snapshot: whatever the batching, one commit wins.
        assert_eq!(outcomes.iter().filter(|ok| **ok).count(), 1, "{outcomes:?}");
    }
}
