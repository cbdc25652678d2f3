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
mod side_by_side;
pub mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use strata_format::{Manifest, PartEntry};
use strata_json::{KeyValue, Shredder, parse_document};

use crate::commit::commit_manifest;
use crate::deletes::{live_key_rows, live_key_rows_in, stage_deletions};
use crate::error::EngineError;
use crate::part_writing::{ShreddedPart, shred_options, write_shredded};
use crate::table::{DataDir, WriteLock, new_part_file};

pub use group::{Completion, DEFAULT_COMMIT_DELAY, Leader, OpenWriter, set_commit_delay};
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

/// What a `SERIALIZABLE` transaction read of one table, checked when it commits (see
/// [`commit`]): nothing of it may have changed since the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableReads {
    /// The transaction read the table through a query (a scan, a predicate): any row written
    /// or deleted since the snapshot could have changed what it saw, phantoms included.
    pub whole: bool,
    /// Keys the transaction read by key (point reads, key joins): only a change of these
    /// matters.
    pub keys: BTreeSet<KeyValue>,
}

impl TableReads {
    pub fn is_empty(&self) -> bool {
        !self.whole && self.keys.is_empty()
    }
}

/// What a transaction writes to one table (and, when `SERIALIZABLE`, read of it), and the
/// snapshot it read it in.
#[derive(Debug, Clone)]
pub struct TableWrite {
    /// The table as the transaction's snapshot has it. Its files must still be readable: the
    /// transaction holds a read lease on the table from before it read this manifest.
    pub snapshot: Arc<Manifest>,
    pub changes: TableChanges,
    /// Empty under snapshot isolation, and for tables a `SERIALIZABLE` transaction only wrote.
    pub reads: TableReads,
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

/// Commits a transaction's writes (see the module docs). Tables without changes are skipped
/// unless the transaction read them ([`TableWrite::reads`]); every changed or read table must
/// exist. On [`EngineError::WriteConflict`], [`EngineError::ReadConflict`] or any other error
/// nothing is committed. A transaction that changes nothing commits nothing and checks nothing:
/// it read one snapshot, which is the state after a prefix of the commits, so it fits in their
/// order whatever it read.
///
/// Transactions committing at the same moment in this process are committed together
/// ([`group`]): one part and one manifest commit per table for all of them.
///
/// Must run where `strata_engine::ingest` may (a deep stack: documents are shredded here).
pub fn commit(
    data_dir: &DataDir,
    writes: &BTreeMap<String, TableWrite>,
) -> Result<CommitSummary, EngineError> {
    commit_announced(data_dir, writes, None)
}

/// [`commit`] for a transaction that announced itself to group commit with `writer` (taken
/// with its first change): it stops being waited for once its commit is queued.
pub fn commit_announced(
    data_dir: &DataDir,
    writes: &BTreeMap<String, TableWrite>,
    writer: Option<OpenWriter>,
) -> Result<CommitSummary, EngineError> {
    match checked_writes(writes) {
        None => Ok(CommitSummary::default()),
        Some(checked) => group::submit(data_dir, checked, writer),
    }
}

/// [`commit_announced`] without waiting on this thread: `done` is told the outcome, on the
/// thread that commits the batch. Returns the [`Leader`] when the caller must commit the batch
/// (`Leader::run`, where `strata_engine::ingest` may run).
pub fn queue_commit(
    data_dir: &DataDir,
    writes: &BTreeMap<String, TableWrite>,
    writer: Option<OpenWriter>,
    done: Completion,
) -> Option<Leader> {
    match checked_writes(writes) {
        None => {
            drop(writer);
            done(Ok(CommitSummary::default()));
            None
        }
        Some(checked) => group::enqueue(data_dir, checked, writer, done),
    }
}

/// The tables a commit writes or checks; None when it changes nothing.
fn checked_writes(writes: &BTreeMap<String, TableWrite>) -> Option<BTreeMap<String, TableWrite>> {
    if writes.values().all(|write| write.changes.is_empty()) {
        return None;
    }
    Some(
        writes
            .iter()
            .filter(|(_, write)| !write.changes.is_empty() || !write.reads.is_empty())
            .map(|(table, write)| (table.clone(), write.clone()))
            .collect(),
    )
}

/// Commits several transactions' writes together, in order: each is checked for write
/// conflicts (and read conflicts, [`TableReads`]) against the tables as they are and against the
/// keys of the transactions before it in the batch (which it cannot have seen: they were not
/// committed when it began); those that pass are written as one part per table and committed in
/// one manifest commit per table (and one intent record for several tables). Tables only read
/// are locked too, so that nothing commits into them between their check and the commit.
/// Returns each transaction's outcome, in order.
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
                for (table, write) in writes.iter().filter(|(_, w)| !w.changes.is_empty()) {
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
        if let Some(earlier) = merged.get(table) {
            if let Some(key) = write
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
            if let Some(read) = read_changed_in_batch(&write.reads, earlier) {
                return Err(EngineError::ReadConflict {
                    table: table.clone(),
                    read,
                });
            }
        }
        check_conflicts(table, &table_dir, &write.snapshot, manifest, &write.changes)?;
        check_reads(table, &table_dir, (&write.snapshot, manifest), write)?;
        if write.changes.is_empty() {
            continue;
        }
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
/// left undurable (`strata_format::durability`); otherwise that list is empty. The tables are
/// written side by side ([`side_by_side`]); the first error is returned.
pub(crate) fn stage_tables<'a>(
    data_dir: &DataDir,
    mut current: BTreeMap<&'a String, Manifest>,
    merged: &BTreeMap<&'a String, TableChanges>,
    defer_durability: bool,
) -> Result<Vec<(StagedTable, Vec<PathBuf>)>, EngineError> {
    #[cfg(test)]
    tests::failing_staging::check(data_dir)?;
    let mut jobs = Vec::with_capacity(merged.len());
    for (table, changes) in merged {
        let table_dir = data_dir.table_dir(table)?;
        let manifest = current
            .remove(table)
            .ok_or_else(|| EngineError::NoSuchTable((*table).clone()))?;
        // Owned: the pool's threads outlive the batch (a few documents a table to copy).
        jobs.push(((*table).clone(), changes.clone(), table_dir, manifest));
    }
    let stage = move |(table, changes, table_dir, mut manifest): StageJob| {
        let base_version = manifest.version;
        let mut write = || apply_changes(&table, &table_dir, &mut manifest, &changes);
        let (applied, undurable) = match defer_durability {
            true => strata_format::durability::deferred(write),
            false => (write(), Vec::new()),
        };
        let written = applied?;
        let staged_table = StagedTable {
            table,
            table_dir,
            base_version,
            manifest,
            written,
        };
        Ok((staged_table, undurable))
    };
    side_by_side::map(jobs, stage).into_iter().collect()
}

/// One table of a batch to stage: its name, its changes, its directory and its manifest now.
type StageJob = (String, TableChanges, PathBuf, Manifest);

/// A table's next manifest, written but not committed.
pub(crate) struct StagedTable {
    pub(crate) table: String,
    pub(crate) table_dir: PathBuf,
    /// The version it replaces.
    pub(crate) base_version: u64,
    pub(crate) manifest: Manifest,
    /// Where its keyed documents went.
    pub(crate) written: KeyedWrites,
}

/// Whether `current` lists the same parts with the same deletions as `snapshot`.
fn same_parts(snapshot: &Manifest, current: &Manifest) -> bool {
    snapshot.version == current.version
        && snapshot.parts.len() == current.parts.len()
        && snapshot
            .parts
            .iter()
            .zip(&current.parts)
            .all(|(a, b)| a.file == b.file && a.deletes == b.deletes)
}

/// Fails when a key written by the transaction no longer lives where `snapshot` had it.
fn check_conflicts(
    table: &str,
    table_dir: &Path,
    snapshot: &Manifest,
    current: &Manifest,
    changes: &TableChanges,
) -> Result<(), EngineError> {
    let keys: Vec<KeyValue> = changes.keyed.keys().cloned().collect();
    match changed_key(table, table_dir, snapshot, current, &keys)? {
        None => Ok(()),
        Some(key) => Err(EngineError::WriteConflict {
            table: table.to_owned(),
            key: key.to_string(),
        }),
    }
}

/// Fails when something a `SERIALIZABLE` transaction read of the table changed between
/// `snapshot` and `current`: any row, when it read the table through a query; one of its keys,
/// when it read by key (keys it also wrote are [`check_conflicts`]'s: not looked up twice).
fn check_reads(
    table: &str,
    table_dir: &Path,
    (snapshot, current): (&Manifest, &Manifest),
    write: &TableWrite,
) -> Result<(), EngineError> {
    let reads = &write.reads;
    let conflict = |read: String| EngineError::ReadConflict {
        table: table.to_owned(),
        read,
    };
    if reads.whole && rows_changed(snapshot, current) {
        return Err(conflict("a row it read through a query".into()));
    }
    let keys: Vec<KeyValue> = reads
        .keys
        .iter()
        .filter(|key| !write.changes.keyed.contains_key(*key))
        .cloned()
        .collect();
    match changed_key(table, table_dir, snapshot, current, &keys)? {
        None => Ok(()),
        Some(key) => Err(conflict(format!("key {key}"))),
    }
}

/// What of `reads` the earlier transactions of a batch changed (`earlier`: their changes to the
/// table); None when nothing.
fn read_changed_in_batch(reads: &TableReads, earlier: &TableChanges) -> Option<String> {
    if reads.whole && !earlier.is_empty() {
        return Some("a row it read through a query".into());
    }
    reads
        .keys
        .iter()
        .find(|key| earlier.keyed.contains_key(*key))
        .map(|key| format!("key {key}"))
}

/// Whether a row of the table was written or deleted between `snapshot` and `current`. Merges
/// move rows without changing them: a part that is new since the snapshot counts only when it
/// holds a row written after it (`PartEntry::newest_write`; unknown counts), a part of both
/// only when its deletions changed, and a merge that dropped a row deleted since the snapshot
/// shows in the count of live rows. A merge that also took newer rows reads as a change: a
/// false conflict costs a retry, never an anomaly.
fn rows_changed(snapshot: &Manifest, current: &Manifest) -> bool {
    if same_parts(snapshot, current) {
        return false;
    }
    let before: std::collections::HashMap<&str, &Arc<strata_format::PartEntry>> = snapshot
        .parts
        .iter()
        .map(|part| (part.file.as_str(), part))
        .collect();
    let new_rows_or_deletions = current
        .parts
        .iter()
        .any(|part| match before.get(&*part.file) {
            Some(old) => old.deletes != part.deletes,
            None => part
                .newest_write
                .is_none_or(|written| written > snapshot.version),
        });
    let live_rows =
        |manifest: &Manifest| -> u64 { manifest.parts.iter().map(|part| part.live_rows()).sum() };
    new_rows_or_deletions || live_rows(snapshot) != live_rows(current)
}

/// The first of `keys` that no longer lives where `snapshot` had it (written, deleted or
/// inserted since by another commit); None when none.
fn changed_key<'a>(
    table: &str,
    table_dir: &Path,
    snapshot: &'a Manifest,
    current: &'a Manifest,
    keys: &[KeyValue],
) -> Result<Option<KeyValue>, EngineError> {
    if keys.is_empty() || same_parts(snapshot, current) {
        return Ok(None);
    }
    // A key has at most one live row in a manifest. Where it lies in a part both manifests
    // list alike (same file, same deletions), it lies there in both: unchanged. So only the
    // parts one lists and the other does not list alike are looked in (a commit's few new
    // parts, not every part twice); a key found in neither is unchanged or in neither.
    // Built per commit over every part: a fast hash (the names are not chosen by clients).
    let by_file = |manifest: &'a Manifest| -> foldhash::HashMap<&'a str, &'a Arc<PartEntry>> {
        manifest
            .parts
            .iter()
            .map(|p| (p.file.as_str(), p))
            .collect()
    };
    let (in_snapshot, in_current) = (by_file(snapshot), by_file(current));
    let alike = |part: &Arc<PartEntry>, other: &foldhash::HashMap<&str, &Arc<PartEntry>>| {
        other
            .get(part.file.as_str())
            .is_some_and(|o| Arc::ptr_eq(part, o) || o.deletes == part.deletes)
    };
    let locate = |manifest: &'a Manifest,
                  other: &foldhash::HashMap<&str, &Arc<PartEntry>>|
     -> Result<Vec<Option<(String, u64)>>, EngineError> {
        let mut found = vec![None; keys.len()];
        let differing = manifest.parts.iter().filter(|p| !alike(p, other));
        for hit in live_key_rows_in(table, table_dir, differing, keys)? {
            found[hit.key] = Some((hit.part, hit.row));
        }
        Ok(found)
    };
    let before = locate(snapshot, &in_current)?;
    let now = locate(current, &in_snapshot)?;
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
    Ok(conflict.and_then(|index| keys.get(index).cloned()))
}

/// Where [`apply_changes`] wrote a keyed table's documents.
#[derive(Debug, Default)]
pub(crate) struct KeyedWrites {
    /// The part written: its place in the manifest's list; none when the changes were only
    /// deletions.
    pub(crate) part: Option<usize>,
    /// Each key written, with the row of its document in that part (none: deleted); none when
    /// the table has no key, or the rows are not known.
    pub(crate) rows: Option<Vec<(KeyValue, Option<u64>)>>,
}

/// Writes the part of the new documents and the deletion vectors of the rows they replace or
/// delete into `manifest` (the table now, under its writer lock) as its next version; returns
/// where the keyed documents went.
pub(crate) fn apply_changes(
    table: &str,
    table_dir: &Path,
    manifest: &mut Manifest,
    changes: &TableChanges,
) -> Result<KeyedWrites, EngineError> {
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
    stage_deletions(table, table_dir, manifest, version, &rows)?;
    let part = write_documents(
        table,
        table_dir,
        manifest,
        &new_part_file(manifest.version),
        changes,
    )?;
    let mut written = KeyedWrites::default();
    if let Some(part) = part {
        written.part = Some(manifest.parts.len());
        manifest.parts.push(Arc::new(strata_format::PartEntry {
            newest_write: Some(version),
            ..part.entry
        }));
        if key.is_some() {
            written.rows = keyed_rows(changes, part.positions.as_deref());
        }
    } else if key.is_some() {
        written.rows = keyed_rows(changes, None);
    }
    manifest.version = version;
    Ok(written)
}

/// Each key of `changes` with the row of its document in the part [`write_documents`] wrote
/// (`positions`: its rows in push order, none when in push order), or none when deleted; none
/// when `positions` lists fewer documents than were pushed.
fn keyed_rows(
    changes: &TableChanges,
    positions: Option<&[u32]>,
) -> Option<Vec<(KeyValue, Option<u64>)>> {
    let mut pushed = 0usize;
    let mut rows = Vec::with_capacity(changes.keyed.len());
    for (key, document) in &changes.keyed {
        let row = match document {
            None => None,
            Some(_) => {
                let row = match positions {
                    None => pushed as u64,
                    Some(positions) => u64::from(*positions.get(pushed)?),
                };
                pushed += 1;
                Some(row)
            }
        };
        rows.push((key.clone(), row));
    }
    Some(rows)
}

/// Writes the documents of `changes` as one part named `file` of the table `manifest`
/// describes (None when there are none), checking that each keyed document has its map key.
/// Keyed documents are pushed first, in key order, then the appended ones.
pub(crate) fn write_documents(
    table: &str,
    table_dir: &Path,
    manifest: &Manifest,
    file: &str,
    changes: &TableChanges,
) -> Result<Option<ShreddedPart>, EngineError> {
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
    Ok(Some(write_shredded(
        table,
        table_dir,
        file,
        shredder,
        &manifest.settings,
    )?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use strata_json::KeyType;

    use super::*;
    use crate::input::Input;
    use crate::{IngestOptions, export_table, ingest};

    /// Fail points, each armed for the next time it is reached in a chosen data directory.
    struct FailPoint {
        armed: std::sync::Mutex<Vec<std::path::PathBuf>>,
        what: &'static str,
    }

    impl FailPoint {
        const fn new(what: &'static str) -> FailPoint {
            FailPoint {
                armed: std::sync::Mutex::new(Vec::new()),
                what,
            }
        }

        fn arm(&self, data_dir: &DataDir) {
            self.armed.lock().unwrap().push(data_dir.root().to_owned());
        }

        fn check(&self, data_dir: &DataDir) -> Result<(), EngineError> {
            let mut armed = self.armed.lock().unwrap();
            match armed.iter().position(|root| root == data_dir.root()) {
                Some(at) => {
                    armed.remove(at);
                    Err(EngineError::Invalid(format!("{} (fail point)", self.what)))
                }
                None => Ok(()),
            }
        }
    }

    /// The next staging of a batch fails.
    pub(crate) mod failing_staging {
        use super::{DataDir, EngineError, FailPoint};

        static POINT: FailPoint = FailPoint::new("staging failed");

        pub(crate) fn arm(data_dir: &DataDir) {
            POINT.arm(data_dir);
        }

        pub(crate) fn check(data_dir: &DataDir) -> Result<(), EngineError> {
            POINT.check(data_dir)
        }
    }

    /// The next frame voiding a failed batch's frame is not written.
    pub(crate) mod failing_void {
        use super::{DataDir, EngineError, FailPoint};

        static POINT: FailPoint = FailPoint::new("the void frame was not written");

        pub(crate) fn arm(data_dir: &DataDir) {
            POINT.arm(data_dir);
        }

        pub(crate) fn check(data_dir: &DataDir) -> Result<(), EngineError> {
            POINT.check(data_dir)
        }
    }

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

    pub(super) fn upsert(
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
        BTreeMap::from([(
            table.to_owned(),
            TableWrite {
                snapshot,
                changes,
                reads: TableReads::default(),
            },
        )])
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

    /// `table` now, its files kept (as a transaction keeps them) by a lease pushed on `leases`.
    fn leased(
        data_dir: &DataDir,
        table: &str,
        leases: &mut Vec<crate::ReadLease>,
    ) -> Arc<Manifest> {
        leases.extend(data_dir.read_lease(table).unwrap());
        Arc::new(data_dir.manifest(table).unwrap())
    }

    /// A write of `id` to `table` at `snapshot` by a transaction that read `reads` there.
    fn write_after_reading(
        snapshot: &Arc<Manifest>,
        table: &str,
        id: i64,
        reads: TableReads,
    ) -> BTreeMap<String, TableWrite> {
        let mut changes = TableChanges::default();
        changes.keyed.insert(
            KeyValue::Integer(id),
            Some(format!(r#"{{"id":{id},"on_call":false}}"#)),
        );
        BTreeMap::from([(
            table.to_owned(),
            TableWrite {
                snapshot: snapshot.clone(),
                changes,
                reads,
            },
        )])
    }

    fn whole() -> TableReads {
        TableReads {
            whole: true,
            keys: BTreeSet::new(),
        }
    }

    #[test]
    fn write_skew_commits_under_snapshot_isolation_and_fails_when_the_reads_are_checked() {
        // Two doctors on call; each transaction sees both on call and takes one off.
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let mut leases = Vec::new();
        let doctors = [r#"{"id":1,"on_call":true}"#, r#"{"id":2,"on_call":true}"#];
        keyed_table(&data_dir, "si", &doctors);
        keyed_table(&data_dir, "ser", &doctors);
        for (table, reads) in [("si", TableReads::default()), ("ser", whole())] {
            let snapshot = leased(&data_dir, table, &mut leases);
            let first = write_after_reading(&snapshot, table, 1, reads.clone());
            let second = write_after_reading(&snapshot, table, 2, reads);
            commit(&data_dir, &first).unwrap();
            let outcome = commit(&data_dir, &second);
            match table {
                "si" => assert!(outcome.is_ok(), "{outcome:?}"),
                _ => assert!(
                    matches!(&outcome, Err(EngineError::ReadConflict { table, .. }) if table == "ser"),
                    "{outcome:?}"
                ),
            }
        }
        assert!(
            exported(&data_dir, "si")
                .iter()
                .all(|d| d.contains("false"))
        );
        assert_eq!(
            exported(&data_dir, "ser"),
            [r#"{"id":1,"on_call":false}"#, r#"{"id":2,"on_call":true}"#]
        );
    }

    #[test]
    fn a_key_read_conflicts_only_with_a_change_of_that_key() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let mut leases = Vec::new();
        let lines = [r#"{"id":1}"#, r#"{"id":2}"#, r#"{"id":3}"#];
        keyed_table(&data_dir, "t", &lines);
        let reads_key_3 = TableReads {
            whole: false,
            keys: BTreeSet::from([KeyValue::Integer(3)]),
        };
        // Another commit changes key 2: the read of key 3 stands.
        let snapshot = leased(&data_dir, "t", &mut leases);
        commit(&data_dir, &upsert(&data_dir, "t", 2, r#"{"id":2,"v":1}"#)).unwrap();
        commit(
            &data_dir,
            &write_after_reading(&snapshot, "t", 1, reads_key_3.clone()),
        )
        .unwrap();
        // Another commit deletes key 3: the read of it conflicts.
        let snapshot = leased(&data_dir, "t", &mut leases);
        crate::delete_keys(&data_dir, "t", vec![KeyValue::Integer(3)]).unwrap();
        let outcome = commit(
            &data_dir,
            &write_after_reading(&snapshot, "t", 1, reads_key_3),
        );
        assert!(
            matches!(&outcome, Err(EngineError::ReadConflict { read, .. }) if read == "key 3"),
            "{outcome:?}"
        );
        // An absent key read stands while other keys change, and conflicts once inserted.
        let before_insert = leased(&data_dir, "t", &mut leases);
        commit(&data_dir, &upsert(&data_dir, "t", 4, r#"{"id":4}"#)).unwrap();
        let reads_key_5 = TableReads {
            whole: false,
            keys: BTreeSet::from([KeyValue::Integer(5)]),
        };
        commit(
            &data_dir,
            &write_after_reading(&before_insert, "t", 1, reads_key_5.clone()),
        )
        .unwrap();
        let before_insert = leased(&data_dir, "t", &mut leases);
        commit(&data_dir, &upsert(&data_dir, "t", 5, r#"{"id":5}"#)).unwrap();
        let outcome = commit(
            &data_dir,
            &write_after_reading(&before_insert, "t", 1, reads_key_5),
        );
        assert!(
            matches!(outcome, Err(EngineError::ReadConflict { .. })),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_merge_since_the_snapshot_is_no_change_but_a_deletion_it_folded_in_is() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let mut leases = Vec::new();
        keyed_table(&data_dir, "t", &[r#"{"id":1}"#, r#"{"id":2}"#]);
        commit(&data_dir, &upsert(&data_dir, "t", 3, r#"{"id":3}"#)).unwrap();
        let parts = |d: &DataDir| d.manifest("t").unwrap().parts.len();
        assert_eq!(parts(&data_dir), 2);

        let snapshot = leased(&data_dir, "t", &mut leases);
        crate::merge_parts(&data_dir, "t", &crate::MergeOptions::default()).unwrap();
        assert_eq!(
            parts(&data_dir),
            1,
            "the test needs a merge after the snapshot"
        );
        commit(&data_dir, &write_after_reading(&snapshot, "t", 1, whole())).unwrap();

        // A deletion since the snapshot, then a merge that drops the deleted row.
        commit(&data_dir, &upsert(&data_dir, "t", 4, r#"{"id":4}"#)).unwrap();
        let snapshot = leased(&data_dir, "t", &mut leases);
        crate::delete_keys(&data_dir, "t", vec![KeyValue::Integer(2)]).unwrap();
        crate::merge_parts(&data_dir, "t", &crate::MergeOptions::default()).unwrap();
        assert_eq!(parts(&data_dir), 1);
        let outcome = commit(&data_dir, &write_after_reading(&snapshot, "t", 1, whole()));
        assert!(
            matches!(outcome, Err(EngineError::ReadConflict { .. })),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_table_only_read_is_checked_and_a_transaction_that_writes_nothing_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let mut leases = Vec::new();
        keyed_table(&data_dir, "a", &[r#"{"id":1}"#]);
        keyed_table(&data_dir, "b", &[r#"{"id":1}"#]);
        let read_b = |snapshot_a: &Arc<Manifest>, snapshot_b: &Arc<Manifest>, writes_a: bool| {
            let mut writes = write_after_reading(snapshot_a, "a", 1, TableReads::default());
            if !writes_a {
                writes.clear();
            }
            writes.insert(
                "b".to_owned(),
                TableWrite {
                    snapshot: snapshot_b.clone(),
                    changes: TableChanges::default(),
                    reads: whole(),
                },
            );
            writes
        };
        let a = leased(&data_dir, "a", &mut leases);
        let b = leased(&data_dir, "b", &mut leases);
        commit(&data_dir, &upsert(&data_dir, "b", 2, r#"{"id":2}"#)).unwrap();
        // Read-only: it saw a consistent snapshot, nothing to check.
        assert_eq!(
            commit(&data_dir, &read_b(&a, &b, false)).unwrap(),
            CommitSummary::default()
        );
        let outcome = commit(&data_dir, &read_b(&a, &b, true));
        assert!(
            matches!(&outcome, Err(EngineError::ReadConflict { table, .. }) if table == "b"),
            "{outcome:?}"
        );
        // Read at the table as it is now, the write goes in and only `a` is reported changed.
        let b = leased(&data_dir, "b", &mut leases);
        let summary = commit(&data_dir, &read_b(&a, &b, true)).unwrap();
        assert_eq!(summary.tables, ["a"]);

        // In one batch, a transaction that read `b` after one that writes it conflicts.
        let a = leased(&data_dir, "a", &mut leases);
        let b = leased(&data_dir, "b", &mut leases);
        let batch = vec![
            upsert(&data_dir, "b", 3, r#"{"id":3}"#),
            read_b(&a, &b, true),
        ];
        let outcomes = commit_batch(&data_dir, &batch);
        assert!(outcomes[0].is_ok());
        assert!(
            matches!(&outcomes[1], Err(EngineError::ReadConflict { table, .. }) if table == "b"),
            "{outcomes:?}"
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
