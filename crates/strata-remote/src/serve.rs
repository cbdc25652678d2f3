//! `strata serve` on object storage (ADR 0022): the server runs on a local *working directory*
//! that mirrors the data directory on the store, and [`ServeMirror`] keeps the two in step.
//!
//! - **Commits.** The working directory is mirrored ([`strata_engine::mirror`]): every manifest
//!   commit of the engine (ingest, merges, deletions, SQL changes, expiry, settings) uploads its
//!   new files and commits to the table's log first, re-applied onto other writers' commits as
//!   `strata ingest` would be ([`crate::push`]); the engine then commits locally what the log
//!   got. A conflict fails that commit (the table is brought up to the log's newest state, so a
//!   retry applies to it).
//! - **The write-ahead log** is replicated ([`strata_engine::wal::WalReplica`]): each group of
//!   frames is an object `.wal/<segment>/<first sequence number>.frames`, stored before the group
//!   is acknowledged; the floor is `.wal/floor`; a segment's objects are deleted with it. A
//!   server starting on any machine restores the segments from the store before it opens its WAL,
//!   so an acknowledged request survives the loss of the machine.
//! - **Other writers** (`strata ingest`, another machine's `strata sql`) are seen by a refresh of
//!   every table every few seconds ([`REFRESH_SECONDS`]), under each table's writer lock.
//! - **One server per data directory:** it holds the lease `.wal/lease`, renewed every
//!   [`LEASE_RENEW_SECONDS`]; a server finding a lease renewed less than [`LEASE_SECONDS`] ago by
//!   another process refuses to start, and one that finds its lease taken stops writing.
//! - **Collection** of replaced versions and files runs every [`COLLECT_SECONDS`].
//!
//! Invariants: the working directory's manifest of a table is always one committed version of
//! the table's log; the working directory holds footer copies of parts it did not write, which a
//! merge replaces with the whole part before reading it ([`Mirror::read_whole`]).

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use strata_engine::mirror::Mirror;
use strata_engine::wal::{MAGIC, WAL_DIR, WalReplica};
use strata_engine::{DataDir, EngineError};
use strata_format::{Manifest, PartEntry, manifest_log};

use crate::error::RemoteError;
use crate::files::{FileCache, download};
use crate::location::{RemoteDataDir, delete_if_exists, list_all};

/// How often other writers' commits are looked for (`STRATA_REFRESH_SECONDS` overrides it).
pub const REFRESH_SECONDS: u64 = 5;
/// A lease not renewed for this long belongs to a server that is gone.
pub const LEASE_SECONDS: i64 = 30;
pub const LEASE_RENEW_SECONDS: u64 = 10;
/// How often replaced versions and unlisted files are collected.
pub const COLLECT_SECONDS: u64 = 60;
const LEASE_FILE: &str = "lease";
const FLOOR_FILE: &str = "floor";

/// The server's side of a data directory on object storage.
pub struct ServeMirror {
    remote: RemoteDataDir,
    root: PathBuf,
    data_dir: DataDir,
    files: FileCache,
    runtime: tokio::runtime::Runtime,
    /// Linked footer copies of parts (not whole parts) in the working directory.
    footer_copies: Mutex<HashSet<PathBuf>>,
    /// Tables the refresh drops because the log no longer has them: dropped locally only.
    forgetting: Mutex<HashSet<String>>,
    /// This server's lease record (`.wal/lease`).
    lease: serde_json::Value,
    /// Set when another server took the lease: nothing more is written.
    fenced: AtomicBool,
}

impl std::fmt::Debug for ServeMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeMirror")
            .field("url", &self.remote.url())
            .field("root", &self.root)
            .finish()
    }
}

/// The mirror's background work (refresh, lease, collection); stops when dropped.
pub struct Background {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ServeMirror {
    /// Takes the data directory's lease, and prepares a fresh working directory
    /// (`<cache>/serve`) holding the newest committed state of every table and the write-ahead
    /// log's segments as stored.
    pub fn start(remote: RemoteDataDir) -> Result<Arc<ServeMirror>, RemoteError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("strata-store")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::io(remote.cache_dir(), e))?;
        let root = remote.cache_dir().join("serve");
        match std::fs::remove_dir_all(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(RemoteError::io(&root, e)),
        }
        std::fs::create_dir_all(&root).map_err(|e| RemoteError::io(&root, e))?;
        let now = unix_now();
        let lease = serde_json::json!({
            "host": host_name(),
            "pid": std::process::id(),
            "started": now,
            "renewed": now,
        });
        let mirror = ServeMirror {
            files: FileCache::new(remote.cache_dir()),
            data_dir: DataDir::new(&root),
            remote,
            root,
            runtime,
            footer_copies: Mutex::new(HashSet::new()),
            forgetting: Mutex::new(HashSet::new()),
            lease,
            fenced: AtomicBool::new(false),
        };
        mirror.runtime.block_on(async {
            mirror.take_lease().await?;
            mirror.restore_wal().await?;
            for (table, newest) in mirror.remote.tables().await? {
                mirror.stage(&table, Some(newest)).await?;
            }
            Ok::<(), RemoteError>(())
        })?;
        Ok(Arc::new(mirror))
    }

    /// The working directory the server runs on.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn url(&self) -> &str {
        self.remote.url()
    }

    /// The store queries read part pages through (the block cache).
    pub fn read_store(&self) -> Arc<dyn ObjectStore> {
        self.remote.read_store()
    }

    /// Starts the refresh, lease renewal and collection thread.
    pub fn background(self: &Arc<Self>) -> Result<Background, RemoteError> {
        let refresh = refresh_seconds().map_err(|message| RemoteError::Location {
            url: self.remote.url().to_owned(),
            message,
        })?;
        let (stop, stopped) = mpsc::channel::<()>();
        let mirror = self.clone();
        let thread = std::thread::Builder::new()
            .name("strata-store-sync".into())
            .spawn(move || {
                let mut renewed = Instant::now();
                let mut collected = Instant::now();
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_secs(refresh))
                {
                    if renewed.elapsed().as_secs() >= LEASE_RENEW_SECONDS {
                        renewed = Instant::now();
                        mirror.report("renewing the lease", mirror.renew_lease());
                    }
                    mirror.report("refreshing the tables", mirror.refresh());
                    if collected.elapsed().as_secs() >= COLLECT_SECONDS {
                        collected = Instant::now();
                        mirror.report("collecting old files", mirror.collect());
                    }
                }
                mirror.report("releasing the lease", mirror.release_lease());
            })
            .map_err(|e| RemoteError::io(&self.root, e))?;
        Ok(Background {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn report(&self, doing: &str, result: Result<(), RemoteError>) {
        if let Err(e) = result {
            eprintln!("strata: {}: {doing}: {e}", self.remote.url());
        }
    }

    /// Runs `future` on the mirror's runtime from an engine thread or from a task of the
    /// server's (multi-threaded) runtime, whose worker it then leaves to the others meanwhile.
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.runtime.block_on(future);
        }
        tokio::task::block_in_place(|| self.runtime.block_on(future))
    }

    fn check_lease(&self) -> Result<(), RemoteError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(RemoteError::Location {
                url: self.remote.url().to_owned(),
                message: "another strata serve took over this data directory's lease; this \
                          server no longer writes to it"
                    .into(),
            });
        }
        Ok(())
    }
}

impl ServeMirror {
    /// Brings `table` in the working directory to version `newest` of its log (None: the
    /// newest), linking the files its parts are opened with. The caller holds the table's
    /// writer lock, or nothing else runs yet.
    async fn stage(&self, table: &str, newest: Option<u64>) -> Result<(), RemoteError> {
        let Some((manifest, _)) = self
            .remote
            .stage_table(&self.files, &self.root, table, newest)
            .await?
        else {
            return Ok(());
        };
        self.note_footer_copies(table, &manifest).await
    }

    /// Records which of `manifest`'s part files in the working directory are footer copies.
    async fn note_footer_copies(
        &self,
        table: &str,
        manifest: &Manifest,
    ) -> Result<(), RemoteError> {
        let dir = self.root.join(table);
        let linked = self
            .remote
            .link_parts(&self.files, &dir, table, manifest)
            .await?;
        let mut footer_copies = self
            .footer_copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for part in &manifest.parts {
            let path = Manifest::part_path(&dir, &part.file);
            // A link to the cache made now or by an earlier staging of the table.
            let cached = self.files.path(table, &part.file);
            if linked.contains(&path) || (part.xxh64.is_some() && same_file(&path, &cached)) {
                footer_copies.insert(path);
            }
        }
        Ok(())
    }

    /// Lets queries read the parts of `manifest` that are whole in `table_dir` (the ones this
    /// server wrote) from there rather than through the store.
    fn register_local_copies(&self, table: &str, table_dir: &Path, manifest: &Manifest) {
        let footer_copies = self
            .footer_copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for part in &manifest.parts {
            let path = Manifest::part_path(table_dir, &part.file);
            if !footer_copies.contains(&path) {
                self.remote
                    .block_cache()
                    .register_local_copy(Manifest::part_location(table, &part.file), path);
            }
        }
    }

    /// Brings every table to the newest version of its log: tables other writers created or
    /// changed are staged, tables they dropped are dropped here.
    pub fn refresh(&self) -> Result<(), RemoteError> {
        let listed = self.block_on(self.remote.tables())?;
        for (table, newest) in &listed {
            if local_version(&self.root.join(table))? >= Some(*newest) {
                continue;
            }
            let _lock = self.data_dir.lock_for_write(table, "refresh")?;
            // Our own commits may have passed it meanwhile.
            if local_version(&self.root.join(table))? < Some(*newest) {
                self.block_on(self.stage(table, Some(*newest)))?;
            }
        }
        for table in self.data_dir.table_names()? {
            if listed.iter().any(|(name, _)| *name == table) {
                continue;
            }
            let lock = match self.data_dir.lock_existing(&table, "refresh") {
                Ok(lock) => lock,
                Err(EngineError::NoSuchTable(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            // Created by this server after the listing, or dropped by another writer?
            let store = self.remote.store().clone();
            if self
                .block_on(manifest_log::latest_version(store.as_ref(), &table))?
                .is_some()
            {
                continue;
            }
            drop(lock);
            self.forgetting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(table.clone());
            let dropped = self.data_dir.drop_table(&table);
            self.forgetting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&table);
            dropped?;
        }
        Ok(())
    }

    /// Collects what no reader needs any more in every table ([`crate::gc`]).
    pub fn collect(&self) -> Result<(), RemoteError> {
        self.check_lease()?;
        let grace = crate::gc::grace_seconds().map_err(|message| RemoteError::Location {
            url: self.remote.url().to_owned(),
            message,
        })?;
        for table in self.data_dir.table_names()? {
            let store = self.remote.store().clone();
            self.block_on(crate::gc::collect(
                store.as_ref(),
                &table,
                grace,
                unix_now(),
            ))?;
        }
        Ok(())
    }
}

impl Mirror for ServeMirror {
    fn commit(
        &self,
        table: &str,
        table_dir: &Path,
        manifest: &Manifest,
    ) -> Result<Manifest, EngineError> {
        let mirror_error = |e: RemoteError| EngineError::Mirror {
            table: table.to_owned(),
            conflict: matches!(e, RemoteError::Conflict { .. }),
            message: e.to_string(),
        };
        self.check_lease().map_err(mirror_error)?;
        let base = Manifest::load(table_dir)?;
        if base.is_none() {
            // A table this server creates is published (Iceberg) with its files where they are.
            let location = table_dir.join(strata_iceberg::LOCATION_FILE);
            std::fs::write(&location, self.remote.table_url(table))
                .map_err(|e| EngineError::io(&location, e))?;
        }
        let result = self.block_on(async {
            let (committed, _, _) =
                crate::push::commit_table(&self.remote, &self.root, table, base.as_ref(), manifest)
                    .await?;
            // Parts other writers committed meanwhile are opened from footer copies here too.
            self.note_footer_copies(table, &committed).await?;
            Ok::<Manifest, RemoteError>(committed)
        });
        match result {
            Ok(committed) => {
                self.register_local_copies(table, table_dir, &committed);
                Ok(committed)
            }
            Err(e @ RemoteError::Conflict { .. }) => {
                // A retry must start from what the log holds now.
                if let Err(refresh) = self.block_on(self.stage(table, None)) {
                    eprintln!("strata: table {table}: bringing it up to date failed: {refresh}");
                }
                Err(mirror_error(e))
            }
            Err(e) => Err(mirror_error(e)),
        }
    }

    fn read_whole(
        &self,
        table: &str,
        table_dir: &Path,
        parts: &[PartEntry],
    ) -> Result<(), EngineError> {
        for part in parts {
            let path = Manifest::part_path(table_dir, &part.file);
            let is_footer_copy = self
                .footer_copies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&path);
            if !is_footer_copy {
                continue;
            }
            // A new file renamed over the link: readers of the footer copy keep theirs.
            let store = self.remote.store().clone();
            self.block_on(download(store.as_ref(), table, &part.file, &path))
                .map_err(|e| EngineError::Mirror {
                    table: table.to_owned(),
                    message: e.to_string(),
                    conflict: false,
                })?;
            self.footer_copies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&path);
            self.remote
                .block_cache()
                .register_local_copy(Manifest::part_location(table, &part.file), path);
        }
        Ok(())
    }

    fn dropped(&self, table: &str) -> Result<(), EngineError> {
        let forgetting = self
            .forgetting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(table);
        if forgetting {
            return Ok(());
        }
        let result = self
            .check_lease()
            .and_then(|()| self.block_on(self.remote.drop_table(table)));
        result.map(|_| ()).map_err(|e| EngineError::Mirror {
            table: table.to_owned(),
            message: e.to_string(),
            conflict: false,
        })
    }
}

/// The write-ahead log on the store.
impl WalReplica for ServeMirror {
    fn write_group(&self, segment: u64, first_seq: u64, frames: &[u8]) -> Result<(), EngineError> {
        let location = group_location(segment, first_seq);
        let result = self.check_lease().and_then(|()| {
            self.block_on(put(
                self.remote.store().as_ref(),
                &location,
                Bytes::copy_from_slice(frames),
                PutMode::Create,
            ))
        });
        result.map_err(|e| wal_error(&location, e))
    }

    fn write_floor(&self, floor: u64) -> Result<(), EngineError> {
        let location = StorePath::from_iter([WAL_DIR, FLOOR_FILE]);
        let result = self.check_lease().and_then(|()| {
            self.block_on(put(
                self.remote.store().as_ref(),
                &location,
                Bytes::from(format!("{floor}\n")),
                PutMode::Overwrite,
            ))
        });
        result.map_err(|e| wal_error(&location, e))
    }

    fn delete_segment(&self, segment: u64) -> Result<(), EngineError> {
        let prefix = StorePath::from_iter([WAL_DIR, &format!("{segment:020}")]);
        let result = self.check_lease().and_then(|()| {
            self.block_on(async {
                let store = self.remote.store().as_ref();
                for object in list_all(store, &prefix).await? {
                    delete_if_exists(store, &object.location).await?;
                }
                Ok(())
            })
        });
        result.map_err(|e| wal_error(&prefix, e))
    }
}

impl ServeMirror {
    /// Writes the log's segments and floor as stored into the working directory's `.wal/`.
    async fn restore_wal(&self) -> Result<(), RemoteError> {
        let store = self.remote.store().as_ref();
        let dir = self.root.join(WAL_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| RemoteError::io(&dir, e))?;
        let mut objects = list_all(store, &StorePath::from(WAL_DIR)).await?;
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let mut segments: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        for object in objects {
            let parts: Vec<String> = object
                .location
                .parts()
                .map(|p| p.as_ref().to_owned())
                .collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            match parts[..] {
                [_, FLOOR_FILE] => {
                    let bytes = get(store, &object.location).await?;
                    let path = dir.join(FLOOR_FILE);
                    std::fs::write(&path, &bytes).map_err(|e| RemoteError::io(&path, e))?;
                }
                [_, segment, group] if group.ends_with(".frames") => {
                    let Ok(segment) = segment.parse::<u64>() else {
                        continue;
                    };
                    let bytes = get(store, &object.location).await?;
                    segments
                        .entry(segment)
                        .or_insert_with(|| MAGIC.to_vec())
                        .extend_from_slice(&bytes);
                }
                _ => {}
            }
        }
        for (first, bytes) in segments {
            let path = dir.join(format!("{first:020}.wal"));
            std::fs::write(&path, &bytes).map_err(|e| RemoteError::io(&path, e))?;
        }
        Ok(())
    }

    async fn take_lease(&self) -> Result<(), RemoteError> {
        let store = self.remote.store().as_ref();
        let location = lease_location();
        match store.get(&location).await {
            Ok(found) => {
                let bytes = found
                    .bytes()
                    .await
                    .map_err(|e| RemoteError::store(&location, e))?;
                let held: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                let renewed = held["renewed"].as_i64().unwrap_or(0);
                let age = unix_now() - renewed;
                if age < lease_seconds() {
                    return Err(RemoteError::Location {
                        url: self.remote.url().to_owned(),
                        message: format!(
                            "another strata serve runs on it (host {}, process {}, lease \
                             renewed {age} s ago); one server per data directory (a lease not \
                             renewed for {} s is taken over)",
                            held["host"].as_str().unwrap_or("?"),
                            held["pid"],
                            lease_seconds()
                        ),
                    });
                }
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(RemoteError::store(&location, e)),
        }
        self.write_lease().await
    }

    async fn write_lease(&self) -> Result<(), RemoteError> {
        let mut lease = self.lease.clone();
        lease["renewed"] = unix_now().into();
        put(
            self.remote.store().as_ref(),
            &lease_location(),
            Bytes::from(lease.to_string()),
            PutMode::Overwrite,
        )
        .await
    }

    /// Renews the lease, or stops writing when another server holds it now.
    fn renew_lease(&self) -> Result<(), RemoteError> {
        self.check_lease()?;
        let location = lease_location();
        let held = self.block_on(get(self.remote.store().as_ref(), &location))?;
        let held: serde_json::Value = serde_json::from_slice(&held).unwrap_or_default();
        if held["started"] != self.lease["started"] || held["pid"] != self.lease["pid"] {
            self.fenced.store(true, Ordering::SeqCst);
            return self.check_lease();
        }
        self.block_on(self.write_lease())
    }

    fn release_lease(&self) -> Result<(), RemoteError> {
        if self.fenced.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.block_on(delete_if_exists(
            self.remote.store().as_ref(),
            &lease_location(),
        ))
    }
}

fn lease_location() -> StorePath {
    StorePath::from_iter([WAL_DIR, LEASE_FILE])
}

fn group_location(segment: u64, first_seq: u64) -> StorePath {
    StorePath::from_iter([
        WAL_DIR,
        &format!("{segment:020}"),
        &format!("{first_seq:020}.frames"),
    ])
}

fn wal_error(location: &StorePath, e: RemoteError) -> EngineError {
    EngineError::Invalid(format!(
        "the write-ahead log on object storage ({location}): {e}"
    ))
}

async fn put(
    store: &dyn ObjectStore,
    location: &StorePath,
    bytes: Bytes,
    mode: PutMode,
) -> Result<(), RemoteError> {
    let options = PutOptions {
        mode,
        ..PutOptions::default()
    };
    store
        .put_opts(location, PutPayload::from(bytes), options)
        .await
        .map(|_| ())
        .map_err(|e| RemoteError::store(location, e))
}

async fn get(store: &dyn ObjectStore, location: &StorePath) -> Result<Bytes, RemoteError> {
    store
        .get(location)
        .await
        .map_err(|e| RemoteError::store(location, e))?
        .bytes()
        .await
        .map_err(|e| RemoteError::store(location, e))
}

/// The version of the manifest in `table_dir` (None: no table there).
fn local_version(table_dir: &Path) -> Result<Option<u64>, RemoteError> {
    Ok(Manifest::load(table_dir)?.map(|m| m.version))
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `STRATA_LEASE_SECONDS` (tests), or [`LEASE_SECONDS`].
fn lease_seconds() -> i64 {
    std::env::var("STRATA_LEASE_SECONDS")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(LEASE_SECONDS)
}

/// `STRATA_REFRESH_SECONDS`, or [`REFRESH_SECONDS`].
fn refresh_seconds() -> Result<u64, String> {
    match std::env::var("STRATA_REFRESH_SECONDS") {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(seconds) if seconds > 0 => Ok(seconds),
            _ => Err(format!(
                "STRATA_REFRESH_SECONDS={text:?} is not a positive number of seconds"
            )),
        },
        Err(_) => Ok(REFRESH_SECONDS),
    }
}
