//! The data directory, table directories, the writers' lock, the readers' lease, dropping and
//! altering tables, export and garbage collection.
//!
//! Locks (both `flock(2)`, released by the OS when a process dies):
//! - `TABLE/.lock`: writers (ingest, merge, drop, alter) hold it exclusively, one at a time. It
//!   holds the current writer's pid, purpose and start time (JSON) so that a waiting writer can
//!   say who it waits for. A writer that got the lock checks that the file it locked is still
//!   the one at `TABLE/.lock`: `DROP TABLE` deletes the directory while writers may be waiting.
//! - `TABLE/.readers`: readers hold it shared from before they read the manifest until they have
//!   read their last part (the read lease). A retired part (replaced by a merge) is deleted by
//!   the first writer that gets this lock exclusively without waiting: then no reader can hold
//!   a manifest that still lists the part, and every later reader reads a newer one. A
//!   process's readers of a table share one locked file while any of them reads
//!   (`DataDir::read_lease`).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use strata_format::checksum::CHECKSUM_SUFFIX;
use strata_format::keys::key_file_part;
use strata_format::manifest::PARTS_DIR;
use strata_format::{Manifest, TableSettings, check_part, read_part};
use strata_json::reconstruct::DocumentWriter;

use crate::error::EngineError;
use crate::settings::{SettingChange, apply_changes};
use crate::table_names::TableNames;

/// The root directory holding all tables.
#[derive(Clone)]
pub struct DataDir {
    root: PathBuf,
    on_lock_wait: Option<Arc<LockWaitNotice>>,
    /// Shared by the clones of this value (`crate::table_names`).
    names: Arc<TableNames>,
    /// The lease files this process holds locked for its readers, by table directory.
    leases: Arc<Mutex<HashMap<PathBuf, Weak<fs::File>>>>,
}

/// Called when a writer has to wait for another writer's lock.
pub type LockWaitNotice = dyn Fn(&LockWait<'_>) + Send + Sync;

/// Who a writer is waiting for.
#[derive(Debug)]
pub struct LockWait<'a> {
    pub table: &'a str,
    pub lock_file: &'a Path,
    /// The holder as it recorded itself in the lock file, if readable.
    pub holder: Option<LockHolder>,
}

/// What a writer records in `TABLE/.lock` while it holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    /// `ingest`, `optimize`, `drop`, `alter`.
    pub purpose: String,
    /// Unix seconds when the lock was taken.
    pub since: u64,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} by process {}, running for {} s",
            self.purpose,
            self.pid,
            unix_now().saturating_sub(self.since)
        )
    }
}

impl std::fmt::Debug for DataDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataDir").field("root", &self.root).finish()
    }
}

/// What `strata tables` shows for one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub documents: u64,
    pub parts: usize,
    pub bytes: u64,
    pub sort_key: Vec<String>,
    /// The key path and type (`id (string)`), for a table with a key.
    pub key: Option<String>,
}

/// Held while a process writes to a table; released on drop (and by the OS if killed).
pub struct WriteLock {
    file: fs::File,
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        // The holder record describes a running writer only; a stale one would mislead.
        let _ = self.file.set_len(0);
    }
}

/// Held by a reader from before it reads a manifest until it has read its parts: while any
/// lease is held, parts retired by merges stay on disk (see the module docs).
#[derive(Debug)]
pub struct ReadLease {
    /// Shared by the process's leases of the table (`DataDir::locked_lease_file`).
    _file: Arc<fs::File>,
    /// This process's readers of held files (ADR 0017) are told apart by epoch instead.
    _held: strata_format::held::Reader,
}

/// Held by a merge while it writes parts that no manifest lists yet: while any is held, garbage
/// collection leaves unlisted files in `parts/` alone (see `collect_garbage`).
#[derive(Debug)]
pub struct MergeLease {
    _file: fs::File,
}

const LOCK_FILE: &str = ".lock";
const READERS_FILE: &str = ".readers";
const MERGING_FILE: &str = ".merging";
/// Rejects of a running ingest, published to `rejects.ndjson` when it commits.
pub(crate) const PENDING_REJECTS_PREFIX: &str = ".rejects-";

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DataDir {
            root: root.into(),
            on_lock_wait: None,
            names: Arc::default(),
            leases: Arc::default(),
        }
    }

    /// A data directory that must already exist (for commands that only read).
    pub fn open_existing(root: impl Into<PathBuf>) -> Result<Self, EngineError> {
        let dir = DataDir::new(root);
        if dir.root.is_dir() {
            Ok(dir)
        } else {
            Err(EngineError::NoDataDir(dir.root))
        }
    }

    /// Calls `notice` whenever a writer of this data directory has to wait for another one.
    pub fn with_lock_wait_notice(mut self, notice: Arc<LockWaitNotice>) -> Self {
        self.on_lock_wait = Some(notice);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn table_dir(&self, table: &str) -> Result<PathBuf, EngineError> {
        validate_table_name(table)?;
        Ok(self.root.join(table))
    }

    /// True when the table has a manifest (a table exists from its first commit on).
    pub fn table_exists(&self, table: &str) -> Result<bool, EngineError> {
        Ok(self
            .table_dir(table)?
            .join(strata_format::manifest::MANIFEST_FILE)
            .exists())
    }

    /// The manifest of an existing table.
    pub fn manifest(&self, table: &str) -> Result<Manifest, EngineError> {
        let dir = self.table_dir(table)?;
        Manifest::load(&dir)?.ok_or_else(|| EngineError::NoSuchTable(table.to_owned()))
    }

    /// [`DataDir::manifest`] for reading only (shared, not copied: `Manifest::load_shared`).
    pub fn manifest_shared(&self, table: &str) -> Result<Arc<Manifest>, EngineError> {
        let dir = self.table_dir(table)?;
        Manifest::load_shared(&dir)?.ok_or_else(|| EngineError::NoSuchTable(table.to_owned()))
    }

    /// Names of all tables (directories holding a manifest), sorted; listed again only when the
    /// data directory may have changed (`crate::table_names`).
    pub fn table_names(&self) -> Result<Vec<String>, EngineError> {
        self.names.of(&self.root)
    }

    /// Every table with what its (validated) manifest says, or why it cannot be read: one
    /// damaged table does not hide the others.
    pub fn tables(&self) -> Result<Vec<TableListing>, EngineError> {
        Ok(self
            .table_names()?
            .into_iter()
            .map(|name| {
                // Every file looked at: a listing is how users see that a table is damaged.
                let checked = self.table_dir(&name).and_then(|dir| {
                    Manifest::load_checking_all(&dir)?
                        .ok_or_else(|| EngineError::NoSuchTable(name.clone()))
                });
                let info = checked.map(|m| TableInfo {
                    documents: m.rows(),
                    parts: m.parts.len(),
                    bytes: m.bytes(),
                    sort_key: m.settings.sort_key.clone(),
                    key: m
                        .settings
                        .key
                        .as_ref()
                        .map(|k| format!("{} ({})", k.path, k.key_type)),
                    name: name.clone(),
                });
                (name, info)
            })
            .collect())
    }

    /// Takes the table's exclusive writer lock, creating the table directory if needed;
    /// waits while another writer holds it (telling the lock-wait notice who that is).
    /// `purpose` is recorded for writers that wait behind this one.
    pub fn lock_for_write(&self, table: &str, purpose: &str) -> Result<WriteLock, EngineError> {
        self.lock(table, purpose, true)
    }

    /// Like [`DataDir::lock_for_write`] for a table that must exist: creates nothing, and
    /// fails with [`EngineError::NoSuchTable`] when the table has no manifest.
    pub fn lock_existing(&self, table: &str, purpose: &str) -> Result<WriteLock, EngineError> {
        self.lock(table, purpose, false)
    }

    fn lock(&self, table: &str, purpose: &str, create: bool) -> Result<WriteLock, EngineError> {
        let dir = self.table_dir(table)?;
        let path = dir.join(LOCK_FILE);
        loop {
            if create {
                fs::create_dir_all(dir.join(PARTS_DIR)).map_err(|e| EngineError::io(&dir, e))?;
            } else if !self.table_exists(table)? {
                return Err(EngineError::NoSuchTable(table.to_owned()));
            }
            let mut file = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| EngineError::io(&path, e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    if let Some(notice) = &self.on_lock_wait {
                        let holder = fs::read(&path)
                            .ok()
                            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
                        notice(&LockWait {
                            table,
                            lock_file: &path,
                            holder,
                        });
                    }
                    file.lock().map_err(|e| EngineError::io(&path, e))?;
                }
                Err(fs::TryLockError::Error(e)) => return Err(EngineError::io(&path, e)),
            }
            // A writer that dropped the table deleted the file we waited on; start over.
            if !is_same_file(&file, &path) {
                continue;
            }
            // A multi-table commit that died after its commit point is finished first.
            crate::transaction::intent::recover_table(&self.root, table)?;
            if !create && !self.table_exists(table)? {
                return Err(EngineError::NoSuchTable(table.to_owned()));
            }
            let holder = LockHolder {
                pid: std::process::id(),
                purpose: purpose.to_owned(),
                since: unix_now(),
            };
            // Informational only: a failure to record the holder must not stop the writer.
            if let Ok(bytes) = serde_json::to_vec(&holder) {
                let _ = file.set_len(0).and_then(|()| file.write_all(&bytes));
            }
            return Ok(WriteLock { file });
        }
    }

    /// Finishes the multi-table commits that killed processes left half done (see
    /// [`crate::transaction::intent`]); returns how many tables were checked. Writers do this
    /// for their table when they take its lock; a server calls this at start so that readers
    /// never see such a commit in some tables and not in others.
    pub fn recover_transactions(&self) -> Result<usize, EngineError> {
        let tables = crate::transaction::intent::pending_tables(&self.root)?;
        for table in &tables {
            match self.lock_existing(table, "transaction recovery") {
                Ok(_lock) => {}
                Err(EngineError::NoSuchTable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(tables.len())
    }

    /// Takes a read lease on the table (see the module docs). None when the lease file cannot
    /// be opened or created (a read-only data directory, where no writer deletes anything).
    pub fn read_lease(&self, table: &str) -> Result<Option<ReadLease>, EngineError> {
        let table_dir = self.table_dir(table)?;
        let held = strata_format::held::reader(&table_dir.join(PARTS_DIR));
        Ok(self.locked_lease_file(&table_dir)?.map(|file| ReadLease {
            _file: file,
            _held: held,
        }))
    }

    /// The lease file of `table_dir` locked shared: the one this process's readers hold
    /// already, or opened and locked now. A shared lock of one open file serves every reader
    /// of the process as well as a lock each (a writer's exclusive lock waits for all of
    /// them either way), and opening and locking a file for each of a transaction's tables
    /// cost more than the rest of its `BEGIN`.
    fn locked_lease_file(&self, table_dir: &Path) -> Result<Option<Arc<fs::File>>, EngineError> {
        let leases = || self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = leases().get(table_dir).and_then(Weak::upgrade) {
            return Ok(Some(file));
        }
        let path = table_dir.join(READERS_FILE);
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                {
                    Ok(file) => file,
                    Err(_) => return Ok(None),
                }
            }
            Err(_) => return Ok(None),
        };
        // Locked without the map's mutex: a writer collecting garbage holds the lock
        // exclusively for a moment, and other tables' readers need not wait for it.
        file.lock_shared().map_err(|e| EngineError::io(&path, e))?;
        let file = Arc::new(file);
        let mut leases = leases();
        leases.retain(|_, held| held.strong_count() > 0);
        leases.insert(table_dir.to_owned(), Arc::downgrade(&file));
        Ok(Some(file))
    }

    /// Announces a merge that writes parts before it takes the writer lock to commit them; fails
    /// with `NoSuchTable` when the table does not exist.
    pub fn merge_lease(&self, table: &str) -> Result<MergeLease, EngineError> {
        if !self.table_exists(table)? {
            return Err(EngineError::NoSuchTable(table.to_owned()));
        }
        let path = self.table_dir(table)?.join(MERGING_FILE);
        let file = open_lock_file(&path)?;
        file.lock_shared().map_err(|e| EngineError::io(&path, e))?;
        Ok(MergeLease { _file: file })
    }

    /// Path of the table's rejects file.
    pub fn rejects_path(&self, table: &str) -> Result<PathBuf, EngineError> {
        Ok(self.table_dir(table)?.join(REJECTS_FILE))
    }

    /// Deletes a table: its manifest first (the table is gone from then on, atomically), then
    /// its directory. Takes the writer lock, so it waits for a running ingest or merge. Queries
    /// still reading the table's parts fail. Returns false when the table does not exist.
    pub fn drop_table(&self, table: &str) -> Result<bool, EngineError> {
        let lock = match self.lock_existing(table, "drop") {
            Ok(lock) => lock,
            Err(EngineError::NoSuchTable(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        let dir = self.table_dir(table)?;
        // The mirror's copy goes first: a failure there leaves the table whole in both places.
        if let Some((table, mirror)) = crate::mirror::of(&dir) {
            mirror.dropped(&table)?;
        }
        let manifest = dir.join(strata_format::manifest::MANIFEST_FILE);
        fs::remove_file(&manifest).map_err(|e| EngineError::io(&manifest, e))?;
        strata_format::manifest::sync_dir(&dir)?;
        crate::transaction::logged::forget(&dir);
        // A table created again under this name has a lease file of its own.
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&dir);
        remove_table_dir(&dir)?;
        drop(lock);
        Ok(true)
    }

    /// Changes settings of an existing table that can change without rewriting data
    /// (see [`crate::settings`]), in one manifest commit under the writer lock.
    pub fn alter_table(
        &self,
        table: &str,
        changes: &[SettingChange],
    ) -> Result<TableSettings, EngineError> {
        let _lock = self.lock_existing(table, "alter")?;
        let dir = self.table_dir(table)?;
        let mut manifest = self.manifest(table)?;
        apply_changes(table, &mut manifest.settings, changes)?;
        manifest.version += 1;
        if crate::commit::commit_mirrored(&mut manifest, &dir)? {
            return Ok(manifest.settings);
        }
        crate::commit::commit_local(&mut manifest, &dir)?;
        // Unlike other commits, a failed publication is this statement's error: turning Iceberg
        // on is what the user asked for (the settings change itself is committed either way).
        crate::commit::keep_iceberg_in_step(&manifest, &dir).map_err(|source| {
            EngineError::Iceberg {
                table: table.to_owned(),
                source,
            }
        })?;
        Ok(manifest.settings)
    }
}

/// Removes a dropped table's directory. A merge that was writing when the table was dropped
/// may add a file while the directory is being emptied (it fails soon after: its table is gone),
/// so removal is tried a few times.
fn remove_table_dir(dir: &Path) -> Result<(), EngineError> {
    let mut attempt = 0;
    loop {
        match fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) if attempt < 10 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(EngineError::io(dir, e)),
        }
    }
}

#[cfg(unix)]
fn is_same_file(file: &fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_same_file(_file: &fs::File, path: &Path) -> bool {
    path.exists()
}

pub(crate) const REJECTS_FILE: &str = "rejects.ndjson";

/// Table names become directory names and SQL identifiers, so they are kept plain. A `.` is
/// allowed after the first character because Elasticsearch index names (which `_bulk` makes
/// tables of) carry dates such as `logs-2024.01.31`; in SQL such a name is quoted.
pub fn validate_table_name(name: &str) -> Result<(), EngineError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        Ok(())
    } else {
        Err(EngineError::InvalidTableName(name.to_owned()))
    }
}

/// A part file name unique across processes and time.
pub(crate) fn new_part_file(manifest_version: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "part-{:010}-{}-{:x}-{}.parquet",
        manifest_version + 1,
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A table's name with what its manifest says, or why it cannot be read.
pub type TableListing = (String, Result<TableInfo, EngineError>);

/// Seconds since 1970 now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Deletes part files that no manifest references (left by a killed writer), pending rejects
/// of killed ingests, and retired parts once no reader holds a lease. Call only while holding
/// the table's write lock: then no other process is writing a part that is not yet listed.
/// Returns true when `manifest` changed (the caller commits it).
pub(crate) fn collect_garbage(
    table_dir: &Path,
    manifest: &mut Manifest,
) -> Result<bool, EngineError> {
    let before = manifest.retired.len();
    let reclaimed = reclaim_retired(table_dir, manifest)?;
    for entry in read_dir_if_exists(table_dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(PENDING_REJECTS_PREFIX) {
            remove_if_exists(&entry.path())?;
        }
    }
    let parts_dir = table_dir.join(PARTS_DIR);
    // A running merge writes parts no manifest lists yet; unlisted files wait until none runs.
    // The exclusive lock is held while deleting, so no merge starts meanwhile.
    let merging = table_dir.join(MERGING_FILE);
    let merging_lock = open_lock_file(&merging)?;
    let no_merge_running = match merging_lock.try_lock() {
        Ok(()) => true,
        Err(fs::TryLockError::WouldBlock) => false,
        Err(fs::TryLockError::Error(e)) => return Err(EngineError::io(&merging, e)),
    };
    let on_disk = read_dir_if_exists(&parts_dir)?
        .into_iter()
        .map(|entry| entry.file_name().to_string_lossy().into_owned());
    // Sets: a server's table may hold hundreds of parts a second (ADR 0017, "held files").
    let listed_parts: HashSet<&str> = (manifest.parts.iter().map(|p| p.file.as_str()))
        .chain(manifest.retired.iter().map(|r| r.file.as_str()))
        .collect();
    let listed_vectors: HashSet<&str> = crate::deletes::listed_vectors(manifest).collect();
    let reclaimed: HashSet<&str> = reclaimed.iter().map(String::as_str).collect();
    for name in on_disk.chain(strata_format::held::names_in(&parts_dir)) {
        // A part's checksum file lives and dies with its part.
        let part_name = name.strip_suffix(CHECKSUM_SUFFIX).unwrap_or(&name);
        // So does its key file (and the key file's checksum file), its text index, and its
        // secondary index files (and theirs).
        let part_name = key_file_part(part_name).unwrap_or(part_name);
        let part_name = strata_format::text_index::text_index_part(part_name).unwrap_or(part_name);
        let part_name = strata_format::indexes::index_file_part(part_name).unwrap_or(part_name);
        let listed = listed_parts.contains(part_name) || listed_vectors.contains(name.as_str());
        if (!listed && no_merge_running) || reclaimed.contains(part_name) {
            remove_if_exists(&parts_dir.join(&name))?;
        }
    }
    drop(merging_lock);
    Ok(manifest.retired.len() != before)
}

/// When no reader holds a lease, takes retired parts off `manifest.retired` and returns their
/// names (the caller deletes them); otherwise returns nothing.
fn reclaim_retired(table_dir: &Path, manifest: &mut Manifest) -> Result<Vec<String>, EngineError> {
    if manifest.retired.is_empty() {
        return Ok(Vec::new());
    }
    // Held files (ADR 0017) were never on disk: only readers of this process may see them, and
    // their epochs tell when none can any more, whatever other readers hold the lease.
    let parts_dir = table_dir.join(PARTS_DIR);
    // Asked once per file: `unseen_since_retired` starts the file's epoch on its first call.
    let mut held_reclaimed: Vec<String> = Vec::new();
    for retired in manifest.retired.iter() {
        let path = parts_dir.join(&retired.file);
        if strata_format::held::is_held(&path) && strata_format::held::unseen_since_retired(&path) {
            held_reclaimed.push(retired.file.clone());
        }
    }
    // The list is shared with older versions: copied only when something goes.
    if !held_reclaimed.is_empty() {
        let going: std::collections::HashSet<&str> =
            held_reclaimed.iter().map(String::as_str).collect();
        manifest
            .retired
            .retain(|retired| !going.contains(retired.file.as_str()));
    }
    for file in &held_reclaimed {
        remove_if_exists(&parts_dir.join(file))?;
    }
    let mut reclaimed = reclaim_retired_on_disk(table_dir, manifest)?;
    reclaimed.append(&mut held_reclaimed);
    Ok(reclaimed)
}

/// [`reclaim_retired`] of the files on disk: all of them once no reader holds a lease.
fn reclaim_retired_on_disk(
    table_dir: &Path,
    manifest: &mut Manifest,
) -> Result<Vec<String>, EngineError> {
    if manifest.retired.is_empty() {
        return Ok(Vec::new());
    }
    let path = table_dir.join(READERS_FILE);
    let file = open_lock_file(&path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(Vec::new()),
        Err(fs::TryLockError::Error(e)) => return Err(EngineError::io(&path, e)),
    }
    // Readers that start from now on wait for this lock and then read the committed manifest,
    // which lists none of these parts; the caller's next commit only drops them from `retired`.
    // Iceberg readers take no lease: on a table published as Iceberg, a part stays for a grace
    // period after it was retired, for the readers that planned over a version listing it.
    let parts_dir = table_dir.join(PARTS_DIR);
    let now = unix_now();
    let grace = if manifest.settings.iceberg {
        strata_iceberg::READER_GRACE_SECONDS
    } else {
        0
    };
    let is_waiting =
        |r: &strata_format::manifest::RetiredPart| r.retired_at.saturating_add(grace) > now;
    if manifest.retired.iter().all(is_waiting) {
        return Ok(Vec::new());
    }
    let (waiting, due): (Vec<_>, Vec<_>) = manifest
        .retired
        .iter()
        .cloned()
        .partition(|r| is_waiting(r));
    manifest.retired = waiting.into();
    let retired: Vec<String> = due.into_iter().map(|r| r.file).collect();
    for file in &retired {
        remove_if_exists(&parts_dir.join(file))?;
    }
    Ok(retired)
}

/// Opens (creating when missing) a file that only carries flock(2) locks.
fn open_lock_file(path: &Path) -> Result<fs::File, EngineError> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| EngineError::io(path, e))
}

fn read_dir_if_exists(dir: &Path) -> Result<Vec<fs::DirEntry>, EngineError> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map_err(|e| EngineError::io(dir, e)))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(EngineError::io(dir, e)),
    }
}

/// Deletes the file at `path`, held in memory ([`strata_format::held`]) or on disk.
fn remove_if_exists(path: &Path) -> Result<(), EngineError> {
    // Garbage now, though a live table may still count it among the files its next durable
    // commit writes out: it must not look for it.
    crate::transaction::logged::forget_undurable(path);
    match strata_format::held::delete(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EngineError::io(path, e)),
    }
}

/// Writes every document of a table as NDJSON, part by part. Returns the number written.
pub fn export_table(
    data_dir: &DataDir,
    table: &str,
    out: &mut dyn Write,
) -> Result<u64, EngineError> {
    let dir = data_dir.table_dir(table)?;
    let _lease = data_dir.read_lease(table)?;
    let manifest = data_dir.manifest(table)?;
    let mut written = 0u64;
    let mut text = Vec::new();
    for part in &manifest.parts {
        let path = Manifest::part_path(&dir, &part.file);
        for batch in read_part(&path, part, 8192)? {
            let batch = batch.map_err(|source| strata_format::FormatError::Arrow {
                path: path.clone(),
                source,
            })?;
            let json_err = |source| EngineError::Json {
                table: table.to_owned(),
                source,
            };
            let writer = DocumentWriter::new(&batch).map_err(json_err)?;
            for row in 0..batch.num_rows() {
                text.clear();
                writer.write(row, &mut text).map_err(json_err)?;
                text.push(b'\n');
                out.write_all(&text)
                    .map_err(|e| EngineError::io("<output>", e))?;
                written += 1;
            }
        }
    }
    Ok(written)
}

/// What `strata check` found in one table.
#[derive(Debug)]
pub struct TableCheck {
    pub table: String,
    /// Problems of the manifest itself (unreadable, or claims the files contradict).
    pub manifest_problems: Vec<String>,
    pub parts: Vec<PartCheck>,
}

/// What `strata check` found in one part.
#[derive(Debug)]
pub struct PartCheck {
    pub file: String,
    /// Empty when the part is fine.
    pub problems: Vec<String>,
    /// What was verified.
    pub note: String,
}

impl TableCheck {
    pub fn is_damaged(&self) -> bool {
        !self.manifest_problems.is_empty() || self.parts.iter().any(|p| !p.problems.is_empty())
    }
}

/// Verifies a table: its manifest against the files, and every visible part completely (whole
/// file hash, checksum file, footer, every page's checksum, row count, and a decode of every
/// row). Reads every byte of the table; takes no lock (parts are immutable).
pub fn check_table(data_dir: &DataDir, table: &str) -> Result<TableCheck, EngineError> {
    let dir = data_dir.table_dir(table)?;
    let path = dir.join(strata_format::manifest::MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::NoSuchTable(table.to_owned()));
        }
        Err(e) => return Err(EngineError::io(path, e)),
    };
    let mut check = TableCheck {
        table: table.to_owned(),
        manifest_problems: Vec::new(),
        parts: Vec::new(),
    };
    let manifest = match Manifest::parse(&path, &bytes) {
        Ok(manifest) => manifest,
        Err(e) => {
            check.manifest_problems.push(e.to_string());
            return Ok(check);
        }
    };
    check.manifest_problems = manifest.problems(&dir);
    check
        .manifest_problems
        .extend(strata_iceberg::verify::problems(&dir, &manifest));
    for part in &manifest.parts {
        let path = Manifest::part_path(&dir, &part.file);
        let (problems, note) = check_part(&path, part);
        check.parts.push(PartCheck {
            file: part.file.clone(),
            problems,
            note,
        });
    }
    Ok(check)
}
