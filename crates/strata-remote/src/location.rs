//! Which object store a data directory URL names, and where its local cache lives.
//!
//! `s3://bucket/prefix` is S3 (or any S3-compatible server) configured from the usual `AWS_*`
//! environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …, as `object_store` reads them); `file:///path` is the
//! same object layout on a local directory (tests, shared file systems).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectMeta, ObjectStore};
use strata_format::manifest_log;

use crate::block_cache::BlockCacheStore;
use crate::counting::{CountingStore, StoreStats};
use crate::error::RemoteError;

/// Whether `data_dir` names object storage rather than a local directory.
pub fn is_remote(data_dir: &str) -> bool {
    data_dir.starts_with("s3://") || data_dir.starts_with("file://")
}

/// Where the local cache of a remote data directory lives and how large its block cache may grow.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// None: `$XDG_CACHE_HOME/strata` (or `~/.cache/strata`), one folder per data directory URL.
    pub cache_dir: Option<PathBuf>,
    /// Bytes of part pages kept in the block cache at most.
    pub cache_bytes: u64,
    /// Store options from the config file (`object_store`'s S3 keys, such as `endpoint`,
    /// `region`, `access_key_id`); the `AWS_*` environment variables override them.
    pub store_options: Vec<(String, String)>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            cache_dir: None,
            cache_bytes: Self::DEFAULT_CACHE_BYTES,
            store_options: Vec::new(),
        }
    }
}

impl RemoteOptions {
    pub const DEFAULT_CACHE_BYTES: u64 = 4 << 30;
}

/// A data directory on object storage: its store, the counters of what was fetched from it, and
/// its local cache (footer copies and small files of parts, and the block cache of pages).
#[derive(Debug)]
pub struct RemoteDataDir {
    url: String,
    /// The store rooted at the data directory, counting what is fetched.
    store: Arc<dyn ObjectStore>,
    stats: Arc<StoreStats>,
    blocks: Arc<BlockCacheStore>,
    cache_dir: PathBuf,
}

impl RemoteDataDir {
    pub fn open(url: &str, options: &RemoteOptions) -> Result<RemoteDataDir, RemoteError> {
        let backend = backend(url, &options.store_options)?;
        let stats = Arc::new(StoreStats::default());
        let store: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(backend, stats.clone()));
        let cache_dir = match &options.cache_dir {
            Some(dir) => dir.clone(),
            None => default_cache_root()?.join(cache_folder_name(url)),
        };
        std::fs::create_dir_all(&cache_dir).map_err(|e| RemoteError::io(&cache_dir, e))?;
        let blocks = Arc::new(BlockCacheStore::open(
            store.clone(),
            cache_dir.join("blocks"),
            options.cache_bytes,
        )?);
        Ok(RemoteDataDir {
            url: url.to_owned(),
            store,
            stats,
            blocks,
            cache_dir,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of `table`'s folder (its Iceberg `location`).
    pub fn table_url(&self, table: &str) -> String {
        format!("{}/{table}", self.url.trim_end_matches('/'))
    }

    /// The store rooted at the data directory (`<table>/_log/…`, `<table>/parts/…`).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The store that queries read part pages through: the block cache over [`Self::store`].
    pub fn read_store(&self) -> Arc<dyn ObjectStore> {
        self.blocks.clone()
    }

    pub fn block_cache(&self) -> &Arc<BlockCacheStore> {
        &self.blocks
    }

    /// Requests and bytes fetched from the store so far.
    pub fn stats(&self) -> &Arc<StoreStats> {
        &self.stats
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The tables of the data directory (the folders holding a manifest log), by name, with
    /// their newest version.
    pub async fn tables(&self) -> Result<Vec<(String, u64)>, RemoteError> {
        let listing = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|e| RemoteError::store(&StorePath::from(""), e))?;
        let mut tables = Vec::new();
        for prefix in listing.common_prefixes {
            let Some(name) = prefix.filename() else {
                continue;
            };
            if let Some(newest) = manifest_log::latest_version(self.store.as_ref(), name).await? {
                tables.push((name.to_owned(), newest));
            }
        }
        tables.sort();
        Ok(tables)
    }

    /// Deletes the table `table` (false: it does not exist). The log goes first, oldest version
    /// first, so that readers see the newest state until the table is gone; then its files.
    pub async fn drop_table(&self, table: &str) -> Result<bool, RemoteError> {
        let log = StorePath::from_iter([table, manifest_log::LOG_DIR]);
        let mut versions = list_all(self.store.as_ref(), &log).await?;
        if versions.is_empty() {
            return Ok(false);
        }
        versions.sort_by(|a, b| a.location.cmp(&b.location));
        for meta in &versions {
            delete_if_exists(self.store.as_ref(), &meta.location).await?;
        }
        let root = StorePath::from(table);
        let rest = list_all(self.store.as_ref(), &root).await?;
        for meta in &rest {
            delete_if_exists(self.store.as_ref(), &meta.location).await?;
        }
        Ok(true)
    }
}

/// Every object under `prefix`.
pub(crate) async fn list_all(
    store: &dyn ObjectStore,
    prefix: &StorePath,
) -> Result<Vec<ObjectMeta>, RemoteError> {
    store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| RemoteError::store(prefix, e))
}

pub(crate) async fn delete_if_exists(
    store: &dyn ObjectStore,
    location: &StorePath,
) -> Result<(), RemoteError> {
    use object_store::ObjectStoreExt;
    match store.delete(location).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(RemoteError::store(location, e)),
    }
}

fn backend(url: &str, options: &[(String, String)]) -> Result<Arc<dyn ObjectStore>, RemoteError> {
    let bad = |message: String| RemoteError::Location {
        url: url.to_owned(),
        message,
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket (expected s3://bucket/prefix)".into()));
        }
        let s3 = s3_builder(options)
            .map_err(bad)?
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Ok(Arc::new(s3));
        }
        return Ok(Arc::new(PrefixStore::new(s3, prefix)));
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(bad("a file:// data directory needs an absolute path".into()));
        }
        std::fs::create_dir_all(path).map_err(|e| bad(e.to_string()))?;
        let local = object_store::local::LocalFileSystem::new_with_prefix(path)
            .map_err(|e| bad(e.to_string()))?;
        return Ok(Arc::new(local));
    }
    Err(bad("not an object storage URL (s3://… or file://…)".into()))
}

/// An S3 store configured by `options` (the config file's), then by the `AWS_*` environment
/// variables, which win as they do for AWS's own tools.
fn s3_builder(options: &[(String, String)]) -> Result<object_store::aws::AmazonS3Builder, String> {
    use object_store::aws::AmazonS3ConfigKey;
    let mut builder = object_store::aws::AmazonS3Builder::new();
    for (key, value) in options {
        let parsed: AmazonS3ConfigKey = key
            .parse()
            .map_err(|_| format!("[storage] {key}: not an S3 option of object_store"))?;
        builder = builder.with_config(parsed, value);
    }
    for (key, value) in std::env::vars() {
        if key.starts_with("AWS_")
            && let Ok(parsed) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
        {
            builder = builder.with_config(parsed, value);
        }
    }
    Ok(builder)
}

fn default_cache_root() -> Result<PathBuf, RemoteError> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("strata"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("strata")),
        None => Err(RemoteError::Location {
            url: String::new(),
            message: "no HOME or XDG_CACHE_HOME for the local cache; give --cache-dir".into(),
        }),
    }
}

/// A folder name for `url` that is readable and cannot collide with another URL's.
fn cache_folder_name(url: &str) -> String {
    let readable: String = url
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect();
    let hash = url.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{readable}-{hash:016x}")
}
