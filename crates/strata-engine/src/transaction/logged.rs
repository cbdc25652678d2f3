//! Transaction commits through the server's write-ahead log (ADR 0017, "live manifests").
//!
//! With a WAL registered for its data directory ([`register`]: the server), a commit batch
//! writes its parts, key files and deletion vectors without fsyncing them
//! ([`strata_format::durability::deferred`]), makes one WAL frame of every table's net changes
//! durable (one group fsync, shared with whatever else the WAL writer is writing), and then
//! publishes the new manifests in memory ([`strata_format::live`]): this process's readers and
//! writers see them at once; `manifest.json` still holds the last durable version. A
//! [`checkpoint`] (about once a second, and at shutdown) makes the files durable — one
//! `syncfs` for all of them — and commits the live manifests to disk with the transaction
//! frames they hold (`wal_transactions`), after which the WAL may drop those frames.
//!
//! Invariants:
//! - a commit is acknowledged only after its frame is durable; its changes are then in the
//!   table's manifest on disk or in a frame above that manifest's `wal_transactions`, which
//!   [`replay`] applies (in sequence order, each once) before the server listens again;
//! - a manifest on disk lists only durable files: every durable commit of a table with a live
//!   manifest goes through [`before_durable_commit`], which fsyncs what is still undurable;
//! - the WAL's floor stays below every transaction frame not yet checkpointed
//!   (`Wal::raise_floor`), and the frames are released ([`Wal::applied`]) only after every
//!   table they changed has them on disk;
//! - a table changed on disk by another process while it had a live manifest here is rebased:
//!   the live commits' changes are applied again on top of what is on disk (they are net
//!   changes by key, or appends), then committed; a commit of this process that was built on
//!   the live manifest fails and is retried by its caller. Such a write of another process
//!   and a live commit of the same key are not checked against each other (last one wins).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use serde::{Deserialize, Serialize};
use strata_format::live_keys::{LiveKeys, LiveKeysRef};
use strata_format::{Manifest, durability, live};
use strata_json::KeyValue;

use super::{TableChanges, apply_changes, stage_tables, visibility};
use crate::error::EngineError;
use crate::input::Compression;
use crate::table::{DataDir, MergeLease, ReadLease};
use crate::wal::{TRANSACTIONS_FRAME, Wal};

/// The logged commits of one data directory.
struct Logged {
    wal: Arc<Wal>,
    /// The highest sequence number of a transaction frame published so far.
    published: u64,
    tables: HashMap<PathBuf, LiveTable>,
    /// Set when a durable frame could not be voided ([`void`]): why no commit is taken.
    broken: Option<String>,
}

/// A table whose newest version is live (in memory) only.
struct LiveTable {
    /// The version on disk the live one was built on.
    durable_version: u64,
    /// Files and directories written for it that are not yet durable.
    undurable: BTreeSet<PathBuf>,
    /// Its logged commits not yet on disk, in sequence order (what a rebase applies again).
    pending: Vec<(u64, TableChanges)>,
    /// Where the keys those commits wrote lie, for a keyed table: the live versions carry it
    /// for lookups ([`strata_format::live_keys`]).
    keys: Option<Arc<LiveKeys>>,
    /// Keeps garbage collection — another process's too — from deleting the parts only the
    /// live manifest lists, as it keeps them from deleting a running merge's.
    _merge_lease: MergeLease,
}

/// Up to this many undurable files are fsynced one by one; more by one `syncfs`.
const SYNC_EACH_UP_TO: usize = 16;

fn registry() -> MutexGuard<'static, HashMap<PathBuf, Logged>> {
    static LOGGED: OnceLock<Mutex<HashMap<PathBuf, Logged>>> = OnceLock::new();
    LOGGED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// From now on, transactions committing into `data_dir` commit through `wal` (after
/// [`replay`] applied what it held).
pub fn register(data_dir: &DataDir, wal: Arc<Wal>) {
    // Every frame up to here is applied already (replayed before): a table created from now on
    // is marked past them (`published`).
    let published = wal.told();
    registry().insert(
        data_dir.root().to_owned(),
        Logged {
            wal,
            published,
            tables: HashMap::new(),
            broken: None,
        },
    );
}

/// For a table created in `table_dir` now: the highest transaction frame sequence number this
/// process's WAL has published (none of them can be the new table's; frames naming a dropped
/// table of the same name must not be replayed into it). None without a WAL.
pub(crate) fn published(table_dir: &Path) -> Option<u64> {
    let root = table_dir.parent()?;
    registry()
        .get(root)
        .map(|logged| logged.published)
        .filter(|published| *published > 0)
}

/// Makes every live table of `data_dir` durable ([`checkpoint`]) and returns to commits that
/// write their manifests to disk themselves.
pub fn unregister(data_dir: &DataDir) -> Result<(), EngineError> {
    checkpoint(data_dir)?;
    registry().remove(data_dir.root());
    Ok(())
}

/// The WAL to commit through, when one is registered for `data_dir`.
pub(super) fn wal_of(data_dir: &DataDir) -> Option<Arc<Wal>> {
    registry().get(data_dir.root()).map(|l| l.wal.clone())
}

/// One transaction frame's body: every changed table's net changes (JSON, docs/format.md), or
/// the frames it voids.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LoggedCommit {
    tables: BTreeMap<String, LoggedChanges>,
    /// Earlier frames whose batch failed after they were written ([`void`]): recovery skips
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    voids: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct LoggedChanges {
    /// Keyed writes: the key, and the document now (null: deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keyed: Vec<(LoggedKey, Option<String>)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    appended: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
enum LoggedKey {
    #[serde(rename = "s")]
    String(String),
    #[serde(rename = "i")]
    Integer(i64),
}

fn encode(merged: &BTreeMap<&String, TableChanges>) -> Result<Vec<u8>, EngineError> {
    let commit = LoggedCommit {
        tables: merged
            .iter()
            .map(|(table, changes)| {
                let keyed = changes
                    .keyed
                    .iter()
                    .map(|(key, document)| {
                        let key = match key {
                            KeyValue::String(s) => LoggedKey::String(s.clone()),
                            KeyValue::Integer(i) => LoggedKey::Integer(*i),
                        };
                        (key, document.clone())
                    })
                    .collect();
                let logged = LoggedChanges {
                    keyed,
                    appended: changes.appended.clone(),
                };
                ((*table).clone(), logged)
            })
            .collect(),
        voids: Vec::new(),
    };
    serde_json::to_vec(&commit).map_err(|e| EngineError::Invalid(e.to_string()))
}

/// A frame's tables' changes, and the earlier frames it voids.
type Decoded = (BTreeMap<String, TableChanges>, Vec<u64>);

fn decode(seq: u64, body: &[u8]) -> Result<Decoded, EngineError> {
    let commit: LoggedCommit = serde_json::from_slice(body).map_err(|e| {
        EngineError::Invalid(format!(
            "write-ahead log frame {seq} is not a logged transaction commit: {e}"
        ))
    })?;
    let tables = commit
        .tables
        .into_iter()
        .map(|(table, logged)| {
            let keyed = logged
                .keyed
                .into_iter()
                .map(|(key, document)| {
                    let key = match key {
                        LoggedKey::String(s) => KeyValue::String(s),
                        LoggedKey::Integer(i) => KeyValue::Integer(i),
                    };
                    (key, document)
                })
                .collect();
            let changes = TableChanges {
                keyed,
                appended: logged.appended,
            };
            (table, changes)
        })
        .collect();
    Ok((tables, commit.voids))
}

/// A transaction frame queued on the WAL: its sequence number once it is durable.
struct QueuedFrame(std::sync::mpsc::Receiver<Result<u64, EngineError>>);

impl QueuedFrame {
    fn durable(self) -> Result<u64, EngineError> {
        self.0.recv().map_err(|_| {
            EngineError::Invalid("the write-ahead log stopped before the commit was durable".into())
        })?
    }
}

/// Queues `body` as a transaction frame.
fn append(wal: &Wal, body: Vec<u8>) -> QueuedFrame {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    wal.append(
        TRANSACTIONS_FRAME,
        Compression::None,
        body.into(),
        Box::new(move |outcome| {
            let _ = sender.send(outcome);
        }),
    );
    QueuedFrame(receiver)
}

/// Commits a batch's merged changes through `wal` (module docs): `current` are the tables now,
/// under their writer locks (held by the caller until this returns).
pub(super) fn commit<'a>(
    data_dir: &DataDir,
    wal: &Wal,
    mut current: BTreeMap<&'a String, Manifest>,
    merged: &BTreeMap<&'a String, TableChanges>,
) -> Result<(), EngineError> {
    {
        let registry = registry();
        let logged = registry.get(data_dir.root());
        if let Some(why) = logged.and_then(|logged| logged.broken.clone()) {
            return Err(EngineError::Invalid(why));
        }
        // Each keyed table's key map: its live epoch's (`current` is then its newest live
        // version, all recorded), or a new epoch's beginning on `current`, which is on disk.
        for (table, manifest) in current.iter_mut() {
            if manifest.settings.key.is_none() {
                continue;
            }
            let table_dir = data_dir.table_dir(table)?;
            let keys = match logged.and_then(|logged| logged.tables.get(&table_dir)) {
                Some(live) => live.keys.clone(),
                None => Some(Arc::new(LiveKeys::new(manifest))),
            };
            if let Some(keys) = keys {
                manifest.live_keys = LiveKeysRef::new(keys);
            }
        }
    }
    // The frame is made durable while the parts are written, not after: the WAL's fdatasync
    // took a quarter of a batch's time (ADR 0017). A batch whose parts then fail voids it.
    let frame = append(wal, encode(merged)?);
    let staged = match stage_tables(data_dir, current, merged, true) {
        Ok(staged) => staged,
        Err(e) => return Err(void(data_dir, wal, frame, e)),
    };
    let seq = frame.durable()?;
    // Durable from here on: the frame holds the commit.
    let _visible = visibility().write().unwrap_or_else(PoisonError::into_inner);
    let mut registry = registry();
    let Some(logged) = registry.get_mut(data_dir.root()) else {
        // Unregistered meanwhile (the server is stopping): commit to disk as without a WAL.
        drop(registry);
        for (mut table, undurable) in staged {
            durability::make_durable(&undurable)?;
            table.manifest.wal_transactions = Some(seq);
            crate::commit::commit_manifest(&mut table.manifest, &table.table_dir)?;
        }
        return Ok(());
    };
    logged.published = logged.published.max(seq);
    for (mut table, undurable) in staged {
        table.manifest.wal_transactions = Some(seq);
        // The map the manifest was staged with (set above), recorded before it is published.
        let keys = table.manifest.live_keys.get().cloned();
        let entry = match logged.tables.entry(table.table_dir.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => entry.insert(LiveTable {
                durable_version: table.base_version,
                undurable: BTreeSet::new(),
                pending: Vec::new(),
                keys: keys.clone(),
                _merge_lease: data_dir.merge_lease(&table.table)?,
            }),
        };
        entry.undurable.extend(undurable);
        if let Some(changes) = merged.get(&table.table) {
            entry.pending.push((seq, changes.clone()));
        }
        if let Some(keys) = keys {
            let recorded = match table.written.rows.take() {
                Some(rows) => keys.record(&table.manifest, table.written.part, rows),
                None => false,
            };
            if !recorded {
                keys.abandon();
            }
            table.manifest.live_keys = LiveKeysRef::new(keys);
        }
        live::publish(&table.table_dir, Arc::new(table.manifest));
    }
    Ok(())
}

/// Takes back the frame of a batch whose parts could not be written (`cause`): once the frame
/// is durable, a second frame voiding it is made durable too, so that recovery does not apply
/// a batch its transactions were told failed. Returns the error to tell them. Should the void
/// not be written, the first frame stays in the WAL and will be applied at the next start: the
/// transactions are told so, and the data directory takes no more logged commits in this
/// process (a later commit could contradict the one recovery will apply).
fn void(data_dir: &DataDir, wal: &Wal, frame: QueuedFrame, cause: EngineError) -> EngineError {
    let Ok(seq) = frame.durable() else {
        // Never written: nothing to take back.
        return cause;
    };
    let body = LoggedCommit {
        voids: vec![seq],
        ..LoggedCommit::default()
    };
    let voided = serde_json::to_vec(&body)
        .map_err(|e| EngineError::Invalid(e.to_string()))
        .and_then(|body| {
            #[cfg(test)]
            super::tests::failing_void::check(data_dir)?;
            append(wal, body).durable()
        });
    let mut registry = registry();
    let logged = registry.get_mut(data_dir.root());
    match voided {
        Ok(void_seq) => {
            // Both frames are done with: the next checkpoint releases them.
            if let Some(logged) = logged {
                logged.published = logged.published.max(void_seq);
            }
            cause
        }
        Err(e) => {
            let why = format!(
                "a commit's write-ahead log frame {seq} is durable but its tables could not be \
                 written ({cause}), and the frame could not be voided ({e}): the server applies \
                 it when it starts again, and takes no more transactions until then"
            );
            if let Some(logged) = logged {
                logged.broken = Some(why.clone());
            }
            EngineError::Invalid(why)
        }
    }
}

/// What a durable commit of a table with a live manifest must do first (module docs), called
/// under the table's writer lock before a manifest built on the live one is committed. Returns
/// false when the table was rebased instead: another process had committed to it, so that
/// manifest is stale and must not be committed (the caller fails, to be retried).
pub(crate) fn before_durable_commit(table_dir: &Path) -> Result<bool, EngineError> {
    let Some(root) = table_dir.parent() else {
        return Ok(true);
    };
    let (undurable, durable_version, pending) = {
        let registry = registry();
        let Some(state) = registry.get(root).and_then(|l| l.tables.get(table_dir)) else {
            return Ok(true);
        };
        (
            state.undurable.clone(),
            state.durable_version,
            state.pending.clone(),
        )
    };
    let on_disk = read_disk_manifest(table_dir)?;
    if on_disk.as_ref().map(|m| m.version) == Some(durable_version) {
        let paths: Vec<PathBuf> = undurable.iter().cloned().collect();
        match paths.len() {
            0..=SYNC_EACH_UP_TO => durability::make_durable(&paths)?,
            _ => {
                durability::write_out_held(&paths)?;
                sync_filesystem(root)?
            }
        }
        mark_durable(root, &undurable.into_iter().collect());
        return Ok(true);
    }
    // Another process committed to the table since the live version was built on it.
    let Some(mut rebased) = on_disk else {
        // Dropped by another process: nothing to commit into.
        forget(table_dir);
        return Ok(false);
    };
    let table = table_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    eprintln!(
        "strata: table {table} was changed by another process while this server held {} \
         commits not yet checkpointed; applying them again on top of the table as it is",
        pending.len()
    );
    for (seq, changes) in &pending {
        apply_changes(&table, table_dir, &mut rebased, changes)?;
        rebased.wal_transactions = Some(rebased.wal_transactions.unwrap_or(0).max(*seq));
    }
    rebased.commit(table_dir)?;
    forget(table_dir);
    Ok(false)
}

/// Takes `durable` off the undurable files of the live tables under `root`.
fn mark_durable(root: &Path, durable: &HashSet<PathBuf>) {
    if let Some(logged) = registry().get_mut(root) {
        for state in logged.tables.values_mut() {
            state.undurable.retain(|path| !durable.contains(path));
        }
    }
}

/// Takes the held files `manifest` does not list (parts a fold replaced, deletion vectors a
/// later commit superseded) off the table's undurable files: they are never written out.
fn keep_listed_undurable(root: &Path, table_dir: &Path, manifest: &Manifest) {
    let parts_dir = table_dir.join(strata_format::manifest::PARTS_DIR);
    let listed: HashSet<PathBuf> = manifest
        .parts
        .iter()
        .flat_map(|p| std::iter::once(p.file.clone()).chain(p.files_beside()))
        .map(|file| parts_dir.join(file))
        .collect();
    if let Some(state) = registry()
        .get_mut(root)
        .and_then(|logged| logged.tables.get_mut(table_dir))
    {
        state
            .undurable
            .retain(|path| listed.contains(path) || !strata_format::held::is_held(path));
    }
}

/// Takes a held file that garbage collection deleted (a retired deletion vector, a folded part's
/// file) off its table's undurable files: no manifest lists it any more, and a durable commit
/// that looked for it to write it out would fail.
pub(crate) fn forget_undurable(path: &Path) {
    let Some(table_dir) = path.parent().and_then(Path::parent) else {
        return;
    };
    let Some(root) = table_dir.parent() else {
        return;
    };
    if let Some(state) = registry()
        .get_mut(root)
        .and_then(|logged| logged.tables.get_mut(table_dir))
    {
        state.undurable.remove(path);
    }
}

/// The table's manifest on disk (not the live one), parsed but not validated.
fn read_disk_manifest(table_dir: &Path) -> Result<Option<Manifest>, EngineError> {
    let path = table_dir.join(strata_format::manifest::MANIFEST_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(Manifest::parse(&path, &bytes)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EngineError::io(&path, e)),
    }
}

/// Forgets the table's live state: its newest version is on disk, or the table is gone.
pub(crate) fn forget(table_dir: &Path) {
    if let Some(root) = table_dir.parent()
        && let Some(logged) = registry().get_mut(root)
    {
        logged.tables.remove(table_dir);
    }
    live::clear(table_dir);
}

/// Makes every live table of `data_dir` durable, each under its writer lock: the parts its
/// logged transactions wrote, held in memory ([`strata_format::held`]), are merged into durable
/// parts on disk — before the lock is taken ([`crate::merge::write_fold`]: commits do not wait
/// for it), then swapped in with the deletions committed meanwhile carried onto them, and the
/// parts committed since folded under the lock ([`crate::merge::fold_held_parts`]) — the other
/// files its live manifest lists are written out and synced, and the manifest is committed to
/// disk; the held files no manifest lists any more are then dropped (garbage collection, once
/// no reader needs them).
/// Then the WAL is told that the transaction frames published before it began are applied.
/// Returns the names of the tables committed.
pub fn checkpoint(data_dir: &DataDir) -> Result<Vec<String>, EngineError> {
    let (wal, upto, tables) = {
        let registry = registry();
        let Some(logged) = registry.get(data_dir.root()) else {
            return Ok(Vec::new());
        };
        let mut tables: Vec<PathBuf> = logged.tables.keys().cloned().collect();
        tables.sort();
        (logged.wal.clone(), logged.published, tables)
    };
    let mut committed = Vec::new();
    for table_dir in &tables {
        let Some(table) = table_dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // Folded before the writer lock is taken, so that the table's commits do not wait for
        // it; the rows they delete meanwhile are deleted from the fold's output too.
        let mut folded = fold_unlocked(data_dir, table, table_dir);
        let _lock = match data_dir.lock_existing(table, "checkpoint") {
            Ok(lock) => lock,
            Err(EngineError::NoSuchTable(_)) => {
                forget(table_dir);
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(manifest) = live::get(table_dir) {
            let mut manifest = (*manifest).clone();
            if let Some((snapshot, fold)) = folded.written.take() {
                // One that cannot be swapped in leaves the manifest as it was: the held parts
                // are folded under the lock below, as if it had not been written.
                if let Err(e) = fold.apply_onto(table, table_dir, &mut manifest, &snapshot) {
                    eprintln!(
                        "strata: checkpoint of {table}: swapping in its transactions' merged \
                         parts failed (merging them again): {e}"
                    );
                }
            }
            drop(folded.reading.take());
            // What was committed since the fold above was written (all of the held parts when
            // there was none). A fold that fails changes nothing: the held parts are written
            // out as they are.
            if let Err(e) = crate::merge::fold_held_parts(table, table_dir, &mut manifest) {
                eprintln!(
                    "strata: checkpoint of {table}: merging its transactions' parts failed \
                     (writing them out one by one instead): {e}"
                );
            }
            keep_listed_undurable(data_dir.root(), table_dir, &manifest);
            // A table another process changed meanwhile is rebased and committed instead.
            if before_durable_commit(table_dir)? {
                crate::commit::commit_manifest(&mut manifest, table_dir)?;
                // The fold's output is listed now: garbage collection may look at unlisted
                // files again.
                drop(folded);
                if crate::table::collect_garbage(table_dir, &mut manifest)? {
                    manifest.version += 1;
                    crate::commit::commit_manifest(&mut manifest, table_dir)?;
                }
            }
            committed.push(table.to_owned());
        } else if let Some((_, fold)) = folded.written.take() {
            // Made durable by another writer meanwhile: the fold is not needed.
            fold.discard(table_dir);
        }
    }
    wal.applied(TRANSACTIONS_FRAME, upto)?;
    Ok(committed)
}

/// A fold of a table's held parts written before the checkpoint takes the table's writer lock.
struct UnlockedFold {
    /// The live manifest it was written from, and the fold; None when there was nothing to
    /// fold, or the fold failed (the checkpoint then folds under the lock).
    written: Option<(Arc<Manifest>, crate::merge::Fold)>,
    /// Keeps the fold's inputs while it is swapped in.
    reading: Option<ReadLease>,
    /// Keeps garbage collection from deleting the fold's output, listed nowhere until it is
    /// swapped in: a merge committing meanwhile may end the table's live state, and with it the
    /// lease that state holds.
    _merging: Option<MergeLease>,
}

/// Writes the fold of the table's held parts as its live manifest lists them now, without the
/// table's writer lock.
fn fold_unlocked(data_dir: &DataDir, table: &str, table_dir: &Path) -> UnlockedFold {
    let nothing = UnlockedFold {
        written: None,
        reading: None,
        _merging: None,
    };
    let (Ok(merging), Ok(reading)) = (data_dir.merge_lease(table), data_dir.read_lease(table))
    else {
        return nothing;
    };
    let Some(snapshot) = live::get(table_dir) else {
        return nothing;
    };
    let written = match crate::merge::write_fold(table, table_dir, &snapshot) {
        Ok(fold) => fold.map(|fold| (snapshot, fold)),
        Err(e) => {
            eprintln!(
                "strata: checkpoint of {table}: merging its transactions' parts before taking \
                 the table's lock failed (merging them under it instead): {e}"
            );
            None
        }
    };
    UnlockedFold {
        written,
        reading,
        _merging: Some(merging),
    }
}

/// One `syncfs(2)` of the file system holding `root`: every file written there so far is
/// durable (cheaper than an fsync per file when a checkpoint covers hundreds).
fn sync_filesystem(root: &Path) -> Result<(), EngineError> {
    let dir = std::fs::File::open(root).map_err(|e| EngineError::io(root, e))?;
    rustix::fs::syncfs(&dir).map_err(|e| EngineError::io(root, e.into()))
}

/// What [`replay`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Table changes applied from frames.
    pub applied: usize,
    /// Table changes already on disk, or for tables that no longer exist.
    pub skipped: usize,
}

/// Applies the transaction frames a WAL held (`(seq, body)`, in sequence order) to every table
/// whose manifest on disk does not have them yet, each in a durable commit recording it.
/// Runs before [`register`] (no table is live).
pub fn replay(data_dir: &DataDir, frames: &[(u64, &[u8])]) -> Result<Replayed, EngineError> {
    let mut replayed = Replayed::default();
    let mut decoded = Vec::with_capacity(frames.len());
    let mut voided = HashSet::new();
    for (seq, body) in frames {
        let (tables, voids) = decode(*seq, body)?;
        voided.extend(voids);
        decoded.push((seq, tables));
    }
    for (seq, tables) in decoded {
        if voided.contains(seq) {
            continue;
        }
        for (table, changes) in tables {
            let _lock = match data_dir.lock_existing(&table, "replaying a logged commit") {
                Ok(lock) => lock,
                Err(EngineError::NoSuchTable(_)) => {
                    replayed.skipped += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut manifest = data_dir.manifest(&table)?;
            if manifest
                .wal_transactions
                .is_some_and(|applied| applied >= *seq)
            {
                replayed.skipped += 1;
                continue;
            }
            let table_dir = data_dir.table_dir(&table)?;
            apply_changes(&table, &table_dir, &mut manifest, &changes)?;
            manifest.wal_transactions = Some(*seq);
            crate::commit::commit_manifest(&mut manifest, &table_dir)?;
            replayed.applied += 1;
        }
    }
    Ok(replayed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::transaction::TableWrite;
    use crate::transaction::tests::{exported, keyed_table};
    use crate::wal::DEFAULT_SEGMENT_BYTES;

    /// Commits one transaction writing `(table, id, document)`s.
    fn commit_upserts(data_dir: &DataDir, upserts: &[(&str, i64, &str)]) {
        let mut writes: BTreeMap<String, TableWrite> = BTreeMap::new();
        for (table, id, document) in upserts {
            let write = writes
                .entry(table.to_string())
                .or_insert_with(|| TableWrite {
                    snapshot: Arc::new(data_dir.manifest(table).unwrap()),
                    changes: TableChanges::default(),
                    reads: Default::default(),
                });
            write
                .changes
                .keyed
                .insert(KeyValue::Integer(*id), Some(document.to_string()));
        }
        crate::transaction::commit(data_dir, &writes).unwrap();
    }

    fn on_disk(data_dir: &DataDir, table: &str) -> Manifest {
        read_disk_manifest(&data_dir.table_dir(table).unwrap())
            .unwrap()
            .unwrap()
    }

    fn open_wal(data_dir: &DataDir) -> (Arc<Wal>, Vec<(u64, Vec<u8>)>) {
        let (wal, recovery) =
            Wal::open(data_dir.root(), DEFAULT_SEGMENT_BYTES, &mut |_| Ok(0)).unwrap();
        let frames = recovery
            .frames
            .into_iter()
            .filter(|f| f.table == TRANSACTIONS_FRAME)
            .map(|f| (f.seq, f.body.to_vec()))
            .collect();
        (Arc::new(wal), frames)
    }

    /// What a process killed now leaves: the WAL and the files on disk, nothing in memory.
    fn crash(data_dir: &DataDir) {
        if let Some(logged) = registry().remove(data_dir.root()) {
            for table_dir in logged.tables.keys() {
                live::clear(table_dir);
                let parts_dir = table_dir.join(strata_format::manifest::PARTS_DIR);
                for name in strata_format::held::names_in(&parts_dir) {
                    strata_format::held::remove(&parts_dir.join(name));
                }
            }
        }
    }

    /// A data directory with a WAL registered and table `a` keyed by `id`, holding
    /// `{"id":1,"v":0}`; with the directory of its parts.
    fn logged_table_a() -> (tempfile::TempDir, DataDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#]);
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);
        let parts_dir = data_dir.table_dir("a").unwrap().join("parts");
        (dir, data_dir, parts_dir)
    }

    /// The table's documents, shortest first (their order in an export is the parts').
    fn exported_by_length(data_dir: &DataDir, table: &str) -> Vec<String> {
        let mut documents = exported(data_dir, table);
        documents.sort_by_key(|d| d.len());
        documents
    }

    fn files_on_disk(dir: &Path) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn logged_commits_create_no_files_and_a_checkpoint_folds_their_parts_into_one() {
        let (_dir, data_dir, parts_dir) = logged_table_a();
        let before = files_on_disk(&parts_dir);

        let mut expected = vec![r#"{"id":1,"v":1}"#.to_owned()];
        for id in 2..=21 {
            let document = format!(r#"{{"id":{id},"v":{id}}}"#);
            commit_upserts(&data_dir, &[("a", id, &document)]);
            expected.push(document);
        }
        // Replaces the row of the durable part: a deletion vector, held too.
        commit_upserts(&data_dir, &[("a", 1, r#"{"id":1,"v":1}"#)]);
        assert_eq!(files_on_disk(&parts_dir), before, "no file was created");
        assert!(!strata_format::held::names_in(&parts_dir).is_empty());
        assert_eq!(data_dir.manifest("a").unwrap().parts.len(), 22);
        expected.sort_by_key(|d| d.len());
        assert_eq!(exported_by_length(&data_dir, "a"), expected);

        assert_eq!(checkpoint(&data_dir).unwrap(), ["a"]);
        let a = on_disk(&data_dir, "a");
        assert_eq!(a.parts.len(), 2, "the 21 held parts became one");
        assert!(a.parts[0].deletes.is_some());
        assert!(
            strata_format::held::names_in(&parts_dir).is_empty(),
            "nothing stays held: {:?}",
            strata_format::held::names_in(&parts_dir)
        );
        assert_eq!(exported_by_length(&data_dir, "a"), expected);
        // On disk for good: what a crash leaves is the same, and the WAL's frames are all in it.
        crash(&data_dir);
        let (_wal, frames) = open_wal(&data_dir);
        let replayed = replay_frames(&data_dir, &frames);
        assert_eq!(replayed.applied, 0);
        assert_eq!(exported_by_length(&data_dir, "a"), expected);
    }

    #[test]
    fn a_superseded_held_vector_collected_before_a_checkpoint_is_not_written_out() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1}"#, r#"{"id":2}"#]);
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);
        let parts_dir = data_dir.table_dir("a").unwrap().join("parts");
        // Replacements of the durable part's two rows, one commit each: the first one's deletion
        // vector is superseded by the second's, retired while still held and not yet durable.
        commit_upserts(&data_dir, &[("a", 1, r#"{"id":1,"v":1}"#)]);
        commit_upserts(&data_dir, &[("a", 2, r#"{"id":2,"v":1}"#)]);
        assert_eq!(data_dir.manifest("a").unwrap().retired.len(), 1);
        // A background merge that finds nothing to merge still collects garbage: the retired
        // vector no reader sees goes, and the commits after it must not look for it again.
        let tiered = crate::merge::MergeOptions {
            scope: crate::merge::MergeScope::Tiered,
            ..Default::default()
        };
        crate::merge::merge_parts(&data_dir, "a", &tiered).unwrap();
        commit_upserts(&data_dir, &[("a", 3, r#"{"id":3}"#)]);
        assert_eq!(checkpoint(&data_dir).unwrap(), ["a"]);
        assert!(
            strata_format::held::names_in(&parts_dir).is_empty(),
            "still held: {:?}",
            strata_format::held::names_in(&parts_dir)
        );
        assert_eq!(
            exported_by_length(&data_dir, "a"),
            [r#"{"id":3}"#, r#"{"id":1,"v":1}"#, r#"{"id":2,"v":1}"#]
        );
    }

    /// Commits `changes` (key, document or None to delete) to table `a` on a snapshot read under
    /// a read lease, again on a new snapshot after a write conflict (a merge or checkpoint may
    /// move a key between parts); any other error fails the test.
    fn commit_until_done(data_dir: &DataDir, changes: &[(i64, Option<String>)]) {
        loop {
            let _lease = data_dir.read_lease("a").unwrap();
            let mut write = TableWrite {
                snapshot: Arc::new(data_dir.manifest("a").unwrap()),
                changes: TableChanges::default(),
                reads: Default::default(),
            };
            for (id, document) in changes {
                write
                    .changes
                    .keyed
                    .insert(KeyValue::Integer(*id), document.clone());
            }
            let writes = BTreeMap::from([("a".to_owned(), write)]);
            match crate::transaction::commit(data_dir, &writes) {
                Ok(_) => return,
                Err(EngineError::WriteConflict { .. }) => continue,
                Err(e) => panic!("commit failed: {e}"),
            }
        }
    }

    /// Tells the other threads of a test that the thread holding it panicked.
    struct PanicFlag<'a>(&'a std::sync::atomic::AtomicBool);

    impl Drop for PanicFlag<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// Logged commits, background merges of both scopes, checkpoints and readers all at once
    /// (what a server under an update mix runs): none of them fails, every read sees each key
    /// once, and the table ends as the commits left it — also after a crash and replay. The
    /// lost deletion vector of 2026-11-28 (a merge's garbage collection against the undurable
    /// files) failed here.
    #[test]
    fn commits_merges_checkpoints_and_readers_at_once_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let initial: Vec<String> = (0..40)
            .map(|id| format!(r#"{{"id":{id},"n":0}}"#))
            .collect();
        let lines: Vec<&str> = initial.iter().map(String::as_str).collect();
        keyed_table(&data_dir, "a", &lines);
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);

        let writers_done = std::sync::atomic::AtomicUsize::new(0);
        // A thread that panics stops the others' loops, so that the test fails instead of
        // hanging.
        let failed = std::sync::atomic::AtomicBool::new(false);
        let failed = &failed;
        const WRITERS: i64 = 2;
        let models: Vec<BTreeMap<i64, Option<String>>> = std::thread::scope(|scope| {
            let data_dir = &data_dir;
            let writers: Vec<_> = (0..WRITERS)
                .map(|writer| {
                    let writers_done = &writers_done;
                    scope.spawn(move || {
                        let _flag = PanicFlag(failed);
                        // Each writer owns the keys of its residue: no two conflict by key.
                        let mut model: BTreeMap<i64, Option<String>> = (0..40)
                            .filter(|id| id % WRITERS == writer)
                            .map(|id| (id, Some(format!(r#"{{"id":{id},"n":0}}"#))))
                            .collect();
                        let owned: Vec<i64> = model.keys().copied().collect();
                        let mut state = 0x9e37_79b9_u64 + writer as u64;
                        for round in 1..=250 {
                            state = state
                                .wrapping_mul(6_364_136_223_846_793_005)
                                .wrapping_add(1_442_695_040_888_963_407);
                            let pick = (state >> 33) as usize;
                            let mut changes = Vec::new();
                            for step in 0..=(pick % 3) {
                                let id = owned[(pick / 3 + step * 7) % owned.len()];
                                let document = match (pick >> 8) % 5 {
                                    0 => None,
                                    _ => Some(format!(r#"{{"id":{id},"n":{round}}}"#)),
                                };
                                changes.push((id, document));
                            }
                            changes.sort_by_key(|(id, _)| *id);
                            changes.dedup_by_key(|(id, _)| *id);
                            commit_until_done(data_dir, &changes);
                            model.extend(changes);
                        }
                        writers_done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        model
                    })
                })
                .collect();
            let running = || {
                writers_done.load(std::sync::atomic::Ordering::SeqCst) < WRITERS as usize
                    && !failed.load(std::sync::atomic::Ordering::SeqCst)
            };
            scope.spawn(move || {
                let _flag = PanicFlag(failed);
                let mut scope_all = false;
                while running() {
                    let options = crate::merge::MergeOptions {
                        scope: match scope_all {
                            true => crate::merge::MergeScope::All,
                            false => crate::merge::MergeScope::Tiered,
                        },
                        ..Default::default()
                    };
                    if let Err(e) = crate::merge::merge_parts(data_dir, "a", &options) {
                        panic!("merge failed: {e}");
                    }
                    scope_all = !scope_all;
                }
            });
            scope.spawn(move || {
                let _flag = PanicFlag(failed);
                while running() {
                    if let Err(e) = checkpoint(data_dir) {
                        panic!("checkpoint failed: {e}");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            });
            scope.spawn(move || {
                let _flag = PanicFlag(failed);
                while running() {
                    let documents = exported(data_dir, "a");
                    let mut ids: Vec<i64> = documents
                        .iter()
                        .map(|d| {
                            serde_json::from_str::<serde_json::Value>(d).unwrap()["id"]
                                .as_i64()
                                .unwrap()
                        })
                        .collect();
                    let read = ids.len();
                    ids.dedup();
                    assert_eq!(ids.len(), read, "a key seen twice: {documents:?}");
                }
            });
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let expected = |data_dir: &DataDir| {
            let mut documents: Vec<String> = models
                .iter()
                .flat_map(|model| model.values().flatten().cloned())
                .collect();
            documents.sort();
            assert_eq!(exported(data_dir, "a"), documents);
        };
        expected(&data_dir);
        checkpoint(&data_dir).unwrap();
        expected(&data_dir);
        crash(&data_dir);
        let (_wal, frames) = open_wal(&data_dir);
        replay_frames(&data_dir, &frames);
        expected(&data_dir);
    }

    fn replay_frames(data_dir: &DataDir, frames: &[(u64, Vec<u8>)]) -> Replayed {
        let frames: Vec<(u64, &[u8])> = frames.iter().map(|(s, b)| (*s, &b[..])).collect();
        replay(data_dir, &frames).unwrap()
    }

    /// Commits one transaction of keyed changes to `table`: each id's document, or none to
    /// delete it.
    fn commit_changes(data_dir: &DataDir, table: &str, changes: &[(i64, Option<String>)]) {
        let mut write = TableWrite {
            snapshot: Arc::new(data_dir.manifest(table).unwrap()),
            changes: TableChanges::default(),
            reads: Default::default(),
        };
        for (id, document) in changes {
            write
                .changes
                .keyed
                .insert(KeyValue::Integer(*id), document.clone());
        }
        let writes = BTreeMap::from([(table.to_owned(), write)]);
        crate::transaction::commit(data_dir, &writes).unwrap();
    }

    #[test]
    fn key_lookups_through_a_live_key_map_find_what_a_walk_of_every_part_finds() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for id in 0..20 {
            use std::io::Write;
            writeln!(file, r#"{{"id":{id},"v":{}}}"#, 100 - id).unwrap();
        }
        // Sorted by `v`: a commit's documents lie in its part in another order than its keys.
        let options = crate::ingest::IngestOptions {
            key: Some(("id".into(), strata_json::KeyType::Integer)),
            sort_key: Some(vec!["v".into()]),
            ..Default::default()
        };
        let input = [crate::input::Input::File(file.path().to_owned())];
        crate::ingest::ingest(&data_dir, "t", &input, &options, &mut |_| {}, &mut |_| {}).unwrap();
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);
        let table_dir = data_dir.table_dir("t").unwrap();

        let all_keys: Vec<KeyValue> = (0..24).map(KeyValue::Integer).collect();
        let found = |rows: Vec<crate::deletes::KeyRow>| {
            let mut found: Vec<(usize, String, u64)> =
                rows.into_iter().map(|r| (r.key, r.part, r.row)).collect();
            found.sort();
            found
        };
        let mut random = 7u64;
        let mut next = |bound: u64| {
            random = random
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (random >> 33) % bound
        };
        let mut versions: Vec<Arc<Manifest>> = Vec::new();
        let mut answered = 0;
        for step in 0..60 {
            if step == 30 {
                // A new epoch: the one before ends with its parts folded away.
                checkpoint(&data_dir).unwrap();
                versions.clear();
            }
            let changes: Vec<(i64, Option<String>)> = (0..1 + next(4))
                .map(|_| {
                    let id = next(24) as i64;
                    let document =
                        (next(4) != 0).then(|| format!(r#"{{"id":{id},"v":{}}}"#, next(1000)));
                    (id, document)
                })
                .collect();
            commit_changes(&data_dir, "t", &changes);
            let live = live::get(&table_dir).unwrap();
            assert!(live.live_keys.get().is_some(), "step {step}");
            versions.push(live);
            // Every version of the epoch so far, the older ones as a transaction that began
            // then sees them.
            for version in &versions {
                let through_map =
                    crate::deletes::live_key_rows("t", &table_dir, version, &all_keys).unwrap();
                let every_part = crate::deletes::live_key_rows_in(
                    "t",
                    &table_dir,
                    version.parts.iter(),
                    &all_keys,
                )
                .unwrap();
                assert_eq!(
                    found(through_map),
                    found(every_part),
                    "step {step}, version {}",
                    version.version
                );
                let keys = version.live_keys.get().unwrap();
                answered += usize::from(keys.locate(version, &all_keys).is_some());
            }
        }
        // Every version was answered through its map (30 + 30 versions, each asked once per
        // later step of its epoch).
        assert_eq!(answered, 2 * (30 * 31 / 2));
    }

    #[test]
    fn a_batch_whose_parts_fail_after_its_frame_was_written_is_not_replayed() {
        let (_dir, data_dir, _) = logged_table_a();
        crate::transaction::tests::failing_staging::arm(&data_dir);
        let mut writes: BTreeMap<String, TableWrite> = BTreeMap::new();
        let mut changes = TableChanges::default();
        changes
            .keyed
            .insert(KeyValue::Integer(2), Some(r#"{"id":2}"#.into()));
        writes.insert(
            "a".into(),
            TableWrite {
                snapshot: Arc::new(data_dir.manifest("a").unwrap()),
                changes,
                reads: Default::default(),
            },
        );
        let failed = crate::transaction::commit(&data_dir, &writes).unwrap_err();
        assert!(failed.to_string().contains("fail point"), "{failed}");
        commit_upserts(&data_dir, &[("a", 3, r#"{"id":3}"#)]);
        let expected = [r#"{"id":3}"#, r#"{"id":1,"v":0}"#];
        assert_eq!(exported_by_length(&data_dir, "a"), expected);

        crash(&data_dir);
        let (wal, frames) = open_wal(&data_dir);
        // The failed batch's frame, the frame voiding it, the later commit.
        assert_eq!(frames.len(), 3);
        let replayed = replay_frames(&data_dir, &frames);
        assert_eq!(replayed.applied, 1);
        assert_eq!(exported_by_length(&data_dir, "a"), expected);

        // Once checkpointed, neither frame of the failed batch holds the floor down.
        register(&data_dir, wal.clone());
        crate::transaction::tests::failing_staging::arm(&data_dir);
        assert!(crate::transaction::commit(&data_dir, &writes).is_err());
        checkpoint(&data_dir).unwrap();
        // The WAL's writer counts a frame as told only after its callback returned: wait for
        // the void frame (published by the failed commit) to be counted.
        let void_seq = registry().get(data_dir.root()).unwrap().published;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while wal.told() < void_seq {
            assert!(
                std::time::Instant::now() < deadline,
                "the void frame {void_seq} was never told (told: {})",
                wal.told()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        wal.raise_floor(void_seq).unwrap();
        drop(wal);
        unregister(&data_dir).unwrap();
        let (_wal, frames) = open_wal(&data_dir);
        assert!(frames.is_empty(), "{} frames above the floor", frames.len());
        assert_eq!(exported_by_length(&data_dir, "a"), expected);
    }

    #[test]
    fn a_failed_batch_whose_frame_cannot_be_voided_stops_commits_and_is_applied_at_restart() {
        let (_dir, data_dir, _) = logged_table_a();
        crate::transaction::tests::failing_staging::arm(&data_dir);
        crate::transaction::tests::failing_void::arm(&data_dir);
        let upsert = |id: i64| {
            let mut changes = TableChanges::default();
            changes
                .keyed
                .insert(KeyValue::Integer(id), Some(format!(r#"{{"id":{id}}}"#)));
            let write = TableWrite {
                snapshot: Arc::new(data_dir.manifest("a").unwrap()),
                changes,
                reads: Default::default(),
            };
            crate::transaction::commit(&data_dir, &BTreeMap::from([("a".to_owned(), write)]))
        };
        let failed = upsert(2).unwrap_err().to_string();
        assert!(failed.contains("could not be voided"), "{failed}");
        assert!(
            failed.contains("applies it when it starts again"),
            "{failed}"
        );
        // Nothing more is taken: it could contradict the batch recovery will apply.
        assert_eq!(upsert(3).unwrap_err().to_string(), failed);
        assert_eq!(exported_by_length(&data_dir, "a"), [r#"{"id":1,"v":0}"#]);

        crash(&data_dir);
        let (_wal, frames) = open_wal(&data_dir);
        assert_eq!(frames.len(), 1);
        replay_frames(&data_dir, &frames);
        assert_eq!(
            exported_by_length(&data_dir, "a"),
            [r#"{"id":2}"#, r#"{"id":1,"v":0}"#]
        );
    }

    #[test]
    fn folded_held_parts_go_once_their_readers_end_while_later_readers_hold_leases() {
        let (_dir, data_dir, parts_dir) = logged_table_a();
        for id in 2..=4 {
            commit_upserts(&data_dir, &[("a", id, &format!(r#"{{"id":{id}}}"#))]);
        }
        let early = data_dir.read_lease("a").unwrap();
        checkpoint(&data_dir).unwrap();
        assert_eq!(on_disk(&data_dir, "a").parts.len(), 2);
        assert!(
            !strata_format::held::names_in(&parts_dir).is_empty(),
            "a reader from before the fold may still read the folded parts"
        );
        // Under steady load some reader always holds the lease; the folded parts still go.
        let late = data_dir.read_lease("a").unwrap();
        drop(early);
        commit_upserts(&data_dir, &[("a", 5, r#"{"id":5}"#)]);
        checkpoint(&data_dir).unwrap();
        assert!(
            strata_format::held::names_in(&parts_dir).is_empty(),
            "still held: {:?}",
            strata_format::held::names_in(&parts_dir)
        );
        assert!(on_disk(&data_dir, "a").retired.is_empty());
        assert_eq!(exported(&data_dir, "a").len(), 5);
        drop(late);
    }

    #[test]
    fn a_logged_commit_is_seen_at_once_is_on_disk_after_a_checkpoint_and_survives_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#, r#"{"id":2,"v":0}"#]);
        keyed_table(&data_dir, "b", &[r#"{"id":1,"v":0}"#]);
        let (wal, frames) = open_wal(&data_dir);
        assert!(frames.is_empty());
        register(&data_dir, wal);
        let disk_before = on_disk(&data_dir, "a").version;

        commit_upserts(
            &data_dir,
            &[("a", 1, r#"{"id":1,"v":1}"#), ("b", 1, r#"{"id":1,"v":1}"#)],
        );
        // Seen by this process; not yet in manifest.json.
        assert_eq!(data_dir.manifest("a").unwrap().version, disk_before + 1);
        assert_eq!(on_disk(&data_dir, "a").version, disk_before);
        assert_eq!(
            exported(&data_dir, "a"),
            [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":0}"#]
        );

        assert_eq!(checkpoint(&data_dir).unwrap(), ["a", "b"]);
        let a = on_disk(&data_dir, "a");
        assert_eq!(a.version, disk_before + 1);
        assert!(a.wal_transactions.is_some());
        assert!(strata_format::live::get(&data_dir.table_dir("a").unwrap()).is_none());
        // A checkpoint with nothing live commits nothing.
        assert_eq!(checkpoint(&data_dir).unwrap(), Vec::<String>::new());

        commit_upserts(&data_dir, &[("a", 2, r#"{"id":2,"v":2}"#)]);
        assert_eq!(on_disk(&data_dir, "a").version, disk_before + 1);
        crash(&data_dir);
        // After the crash the disk has the checkpointed commit only ...
        assert_eq!(
            exported(&data_dir, "a"),
            [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":0}"#]
        );
        // ... and the WAL the rest: applied once, whatever is replayed twice.
        let (_wal, frames) = open_wal(&data_dir);
        assert_eq!(frames.len(), 2);
        let replayed = replay_frames(&data_dir, &frames);
        assert_eq!((replayed.applied, replayed.skipped), (1, 2));
        assert_eq!(
            exported(&data_dir, "a"),
            [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":2}"#]
        );
        assert_eq!(exported(&data_dir, "b"), [r#"{"id":1,"v":1}"#]);
        let again = replay_frames(&data_dir, &frames);
        assert_eq!((again.applied, again.skipped), (0, 3));
        assert_eq!(
            exported(&data_dir, "a"),
            [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":2}"#]
        );
    }

    #[test]
    fn frames_of_a_dropped_table_are_not_replayed_into_a_new_one_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#]);
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);
        commit_upserts(&data_dir, &[("a", 2, r#"{"id":2,"v":1}"#)]);
        assert!(data_dir.drop_table("a").unwrap());
        keyed_table(&data_dir, "a", &[r#"{"id":7,"v":0}"#]);
        crash(&data_dir);
        let (_wal, frames) = open_wal(&data_dir);
        assert_eq!(frames.len(), 1);
        let replayed = replay_frames(&data_dir, &frames);
        assert_eq!((replayed.applied, replayed.skipped), (0, 1));
        assert_eq!(exported(&data_dir, "a"), [r#"{"id":7,"v":0}"#]);
    }

    #[test]
    fn a_table_another_process_committed_to_is_rebased_at_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path().join("data"));
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#]);
        // Another process: the same directory under another name shares no memory with this
        // one's (live manifests are by path), only the files and their locks.
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(data_dir.root(), &alias).unwrap();
        let other = DataDir::new(&alias);
        let (wal, _) = open_wal(&data_dir);
        register(&data_dir, wal);

        commit_upserts(&data_dir, &[("a", 1, r#"{"id":1,"v":1}"#)]);
        commit_upserts(&other, &[("a", 2, r#"{"id":2,"v":9}"#)]);
        // Each sees its own write only, until the checkpoint puts this one's on top of the other's.
        assert_eq!(exported(&data_dir, "a"), [r#"{"id":1,"v":1}"#]);
        assert_eq!(
            exported(&other, "a"),
            [r#"{"id":1,"v":0}"#, r#"{"id":2,"v":9}"#]
        );
        checkpoint(&data_dir).unwrap();
        let expected = [r#"{"id":1,"v":1}"#, r#"{"id":2,"v":9}"#];
        assert_eq!(exported(&data_dir, "a"), expected);
        assert_eq!(exported(&other, "a"), expected);
        unregister(&data_dir).unwrap();
    }
}
