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
//!   [`lease::LEASE_RENEW_SECONDS`]; a server finding a lease renewed less than [`lease::LEASE_SECONDS`] ago by
//!   another process refuses to start, and one that finds its lease taken stops writing.
//! - **Collection** of replaced versions and files runs every [`COLLECT_SECONDS`].
//!
//! Invariants: the working directory's manifest of a table is always one committed version of
//! the table's log; the working directory holds footer copies of parts it did not write, which a
//! merge replaces with the whole part before reading it ([`strata_engine::mirror::Mirror::read_whole`]).

mod lease;
mod mirror;
mod refresh;
mod wal;

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use strata_engine::DataDir;
use strata_format::Manifest;

use crate::error::RemoteError;
use crate::files::FileCache;
use crate::location::RemoteDataDir;

use lease::LEASE_RENEW_SECONDS;
use lease::host_name;

/// How often other writers' commits are looked for (`STRATA_REFRESH_SECONDS` overrides it).
pub const REFRESH_SECONDS: u64 = 5;
/// How often replaced versions and unlisted files are collected.
pub const COLLECT_SECONDS: u64 = 60;

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
    /// What collection learnt of each version's files.
    version_files: Mutex<crate::gc::VersionFiles>,
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
            version_files: Mutex::default(),
        };
        // The lease first: the working directory may be another server's until then (a second
        // server started with the same cache directory).
        mirror.runtime.block_on(mirror.take_lease())?;
        let prepared = mirror.runtime.block_on(async {
            match std::fs::remove_dir_all(&mirror.root) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RemoteError::io(&mirror.root, e)),
            }
            std::fs::create_dir_all(&mirror.root).map_err(|e| RemoteError::io(&mirror.root, e))?;
            mirror.restore_wal().await?;
            for (table, newest) in mirror.remote.tables().await? {
                mirror.stage(&table, Some(newest)).await?;
            }
            Ok::<(), RemoteError>(())
        });
        if let Err(e) = prepared {
            // A server that did not start holds nothing: the next one need not wait.
            if let Err(release) = mirror.release_lease() {
                eprintln!("strata: {}: releasing the lease: {release}", mirror.url());
            }
            return Err(e);
        }
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

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
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
