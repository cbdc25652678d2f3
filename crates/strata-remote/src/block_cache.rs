//! A bounded on-disk cache of part pages, in front of the data directory's object store.
//!
//! Ranged reads of part files (`<table>/parts/<file>`) are served from aligned blocks of
//! [`BLOCK_BYTES`] kept under the cache directory (`<location>/<block index>`); missing blocks
//! are fetched together (the store coalesces neighbouring ones into one request) and kept.
//! Only the blocks a query touched are cached, never whole objects. Part files are never
//! overwritten and their names never reused, so a cached block can never be stale.
//!
//! The blocks a process used last are also kept in its memory (up to [`MEMORY_BYTES`]), so a
//! hot query reads no file. The cache on disk is shared by every process using the same cache
//! directory: blocks are written to a
//! temporary name and renamed, and a block evicted under a reader is simply fetched again. Past
//! the byte budget the least recently used blocks (by modification time, refreshed on use) go
//! until the cache is at 80 % of its budget.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use object_store::path::Path as StorePath;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};

use crate::error::RemoteError;

/// The bytes of `ranges` of the file at `path`.
fn read_file_ranges(path: &Path, ranges: &[Range<u64>]) -> std::io::Result<Vec<Bytes>> {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::File::open(path)?;
    ranges
        .iter()
        .map(|range| {
            let mut bytes = vec![0; (range.end - range.start) as usize];
            file.read_exact_at(&mut bytes, range.start)?;
            Ok(Bytes::from(bytes))
        })
        .collect()
}

/// Size of a cached block (the last block of a file is shorter).
pub const BLOCK_BYTES: u64 = 64 * 1024;
/// A block used again after this long gets its modification time refreshed (its LRU position).
const TOUCH_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct BlockCacheStore {
    inner: Arc<dyn ObjectStore>,
    dir: PathBuf,
    budget_bytes: u64,
    /// Bytes of blocks on disk, as far as this process knows (recounted when evicting).
    cached_bytes: AtomicU64,
    /// Sizes of part files, given by the manifests read (saves a HEAD per part).
    sizes: Mutex<HashMap<StorePath, u64>>,
    evicting: Mutex<()>,
    /// The blocks this process used last, in memory: a hot query reads no file at all.
    memory: Mutex<MemoryBlocks>,
    /// Whole copies of part files on local disk (the parts a server wrote or merged): read
    /// directly, bypassing the blocks, while they exist.
    local_copies: Mutex<HashMap<StorePath, PathBuf>>,
}

/// Blocks kept in memory, oldest out first past [`MEMORY_BYTES`].
#[derive(Debug, Default)]
struct MemoryBlocks {
    blocks: HashMap<(StorePath, u64), Bytes>,
    order: std::collections::VecDeque<(StorePath, u64)>,
    bytes: u64,
}

/// Bytes of blocks a process keeps in memory at most.
const MEMORY_BYTES: u64 = 256 * 1024 * 1024;

impl MemoryBlocks {
    fn insert(&mut self, location: &StorePath, block: u64, bytes: Bytes) {
        let key = (location.clone(), block);
        if self.blocks.contains_key(&key) {
            return;
        }
        self.bytes += bytes.len() as u64;
        self.blocks.insert(key.clone(), bytes);
        self.order.push_back(key);
        while self.bytes > MEMORY_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.blocks.remove(&oldest) {
                self.bytes -= gone.len() as u64;
            }
        }
    }
}

impl std::fmt::Display for BlockCacheStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCache({}, {})", self.dir.display(), self.inner)
    }
}

impl BlockCacheStore {
    /// The cache kept in `dir` (created when missing) over `inner`, at most `budget_bytes`.
    pub fn open(
        inner: Arc<dyn ObjectStore>,
        dir: PathBuf,
        budget_bytes: u64,
    ) -> Result<BlockCacheStore, RemoteError> {
        std::fs::create_dir_all(&dir).map_err(|e| RemoteError::io(&dir, e))?;
        let cached: u64 = cached_blocks(&dir).iter().map(|b| b.bytes).sum();
        Ok(BlockCacheStore {
            inner,
            dir,
            budget_bytes,
            cached_bytes: AtomicU64::new(cached),
            sizes: Mutex::default(),
            evicting: Mutex::new(()),
            memory: Mutex::default(),
            local_copies: Mutex::default(),
        })
    }

    /// Tells the cache that `path` is a whole copy of the part file at `location` (part files
    /// never change, so any copy is as good as the object). Reads come from it until it is gone.
    pub fn register_local_copy(&self, location: StorePath, path: PathBuf) {
        if let Ok(mut copies) = self.local_copies.lock() {
            copies.insert(location, path);
        }
    }

    /// `ranges` of the whole local copy of `location`, if there is one that can be read.
    async fn read_local_copy(
        &self,
        location: &StorePath,
        ranges: &[Range<u64>],
    ) -> Option<Vec<Bytes>> {
        let path = self.local_copies.lock().ok()?.get(location).cloned()?;
        let wanted = ranges.to_vec();
        let read = tokio::task::spawn_blocking(move || read_file_ranges(&path, &wanted)).await;
        match read {
            Ok(Ok(bytes)) => Some(bytes),
            // Deleted (the part was merged away): the store still has it for a while.
            _ => {
                if let Ok(mut copies) = self.local_copies.lock() {
                    copies.remove(location);
                }
                None
            }
        }
    }

    /// Tells the cache the size of the object at `location` (a part listed by a manifest).
    pub fn register_size(&self, location: StorePath, bytes: u64) {
        if let Ok(mut sizes) = self.sizes.lock() {
            sizes.insert(location, bytes);
        }
    }

    /// Bytes of blocks on disk as this process counts them.
    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes.load(Ordering::Relaxed)
    }

    async fn size_of(&self, location: &StorePath) -> object_store::Result<u64> {
        if let Some(size) = self
            .sizes
            .lock()
            .ok()
            .and_then(|s| s.get(location).copied())
        {
            return Ok(size);
        }
        let size = self.inner.head(location).await?.size;
        self.register_size(location.clone(), size);
        Ok(size)
    }

    fn block_dir(&self, location: &StorePath) -> PathBuf {
        let mut dir = self.dir.clone();
        for part in location.parts() {
            dir.push(part.as_ref());
        }
        dir
    }

    /// The bytes of `ranges` of the object at `location`, through the blocks.
    async fn read_ranges(
        &self,
        location: &StorePath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        if let Some(bytes) = self.read_local_copy(location, ranges).await {
            return Ok(bytes);
        }
        let size = self.size_of(location).await?;
        if let Some(bad) = ranges.iter().find(|r| r.end > size || r.start > r.end) {
            return Err(generic(format!(
                "{location}: range {}..{} outside an object of {size} bytes",
                bad.start, bad.end
            )));
        }
        let wanted: BTreeSet<u64> = ranges
            .iter()
            .filter(|r| r.end > r.start)
            .flat_map(|r| (r.start / BLOCK_BYTES)..=((r.end - 1) / BLOCK_BYTES))
            .collect();
        let dir = self.block_dir(location);
        let mut blocks = BTreeMap::new();
        if let Ok(memory) = self.memory.lock() {
            for &block in &wanted {
                if let Some(bytes) = memory.blocks.get(&(location.clone(), block)) {
                    blocks.insert(block, bytes.clone());
                }
            }
        }
        if blocks.len() < wanted.len() {
            let dir = dir.clone();
            let on_disk: BTreeSet<u64> = wanted
                .iter()
                .copied()
                .filter(|b| !blocks.contains_key(b))
                .collect();
            let loaded = tokio::task::spawn_blocking(move || load_blocks(&dir, &on_disk))
                .await
                .map_err(|e| generic(e.to_string()))?;
            if let Ok(mut memory) = self.memory.lock() {
                for (block, bytes) in &loaded {
                    memory.insert(location, *block, bytes.clone());
                }
            }
            blocks.extend(loaded);
        }
        let missing: Vec<u64> = wanted
            .iter()
            .copied()
            .filter(|b| !blocks.contains_key(b))
            .collect();
        if !missing.is_empty() {
            let runs = block_runs(&missing, size);
            let fetched = self.inner.get_ranges(location, &runs).await?;
            let mut new_blocks = Vec::new();
            for (run, bytes) in runs.iter().zip(fetched) {
                if bytes.len() as u64 != run.end - run.start {
                    return Err(generic(format!(
                        "{location}: asked for {} bytes at {}, got {}",
                        run.end - run.start,
                        run.start,
                        bytes.len()
                    )));
                }
                let mut at = run.start;
                while at < run.end {
                    let end = (at + BLOCK_BYTES).min(run.end);
                    let block = bytes.slice((at - run.start) as usize..(end - run.start) as usize);
                    new_blocks.push((at / BLOCK_BYTES, block.clone()));
                    blocks.insert(at / BLOCK_BYTES, block);
                    at = end;
                }
            }
            if let Ok(mut memory) = self.memory.lock() {
                for (block, bytes) in &new_blocks {
                    memory.insert(location, *block, bytes.clone());
                }
            }
            let written: u64 = new_blocks.iter().map(|(_, b)| b.len() as u64).sum();
            let dir = dir.clone();
            // Keeping blocks is best effort: a full disk costs speed, not the answer.
            let _ = tokio::task::spawn_blocking(move || store_blocks(&dir, &new_blocks)).await;
            let total = self.cached_bytes.fetch_add(written, Ordering::Relaxed) + written;
            if total > self.budget_bytes {
                self.evict();
            }
        }
        ranges
            .iter()
            .map(|range| assemble(&blocks, range).ok_or_else(|| generic("block missing".into())))
            .collect()
    }

    /// Deletes the least recently used blocks until the cache holds 80 % of its budget.
    fn evict(&self) {
        let Ok(_guard) = self.evicting.try_lock() else {
            return;
        };
        let mut blocks = cached_blocks(&self.dir);
        let mut total: u64 = blocks.iter().map(|b| b.bytes).sum();
        let target = self.budget_bytes / 10 * 8;
        blocks.sort_by_key(|b| b.used);
        for block in blocks {
            if total <= target {
                break;
            }
            if std::fs::remove_file(&block.path).is_ok() {
                total -= block.bytes;
            }
        }
        self.cached_bytes.store(total, Ordering::Relaxed);
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "BlockCache",
        source: message.into(),
    }
}

/// Byte ranges (clipped to the object's `size`) covering `blocks` (ascending), with blocks less
/// than `object_store`'s coalescing distance apart fetched in one request — and the blocks in
/// between kept too, since their bytes come anyway.
fn block_runs(blocks: &[u64], size: u64) -> Vec<Range<u64>> {
    let mut runs: Vec<Range<u64>> = Vec::new();
    for &block in blocks {
        let start = block * BLOCK_BYTES;
        let end = (start + BLOCK_BYTES).min(size);
        match runs.last_mut() {
            Some(last) if start - last.end <= object_store::OBJECT_STORE_COALESCE_DEFAULT => {
                last.end = end
            }
            _ => runs.push(start..end),
        }
    }
    runs
}

fn block_file(dir: &Path, block: u64) -> PathBuf {
    dir.join(format!("{block:010}"))
}

/// The blocks among `wanted` found on disk (a block that cannot be read is fetched again).
fn load_blocks(dir: &Path, wanted: &BTreeSet<u64>) -> BTreeMap<u64, Bytes> {
    let now = SystemTime::now();
    let mut found = BTreeMap::new();
    for &block in wanted {
        let path = block_file(dir, block);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let stale = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|used| now.duration_since(used).unwrap_or_default() > TOUCH_AFTER);
        if stale && let Ok(file) = std::fs::File::options().write(true).open(&path) {
            let _ = file.set_modified(now);
        }
        found.insert(block, Bytes::from(bytes));
    }
    found
}

fn store_blocks(dir: &Path, blocks: &[(u64, Bytes)]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    for (block, bytes) in blocks {
        let path = block_file(dir, *block);
        let tmp = dir.join(format!(
            ".{block}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// The bytes of `range` cut from the blocks holding it (None: one of them is missing).
fn assemble(blocks: &BTreeMap<u64, Bytes>, range: &Range<u64>) -> Option<Bytes> {
    if range.start == range.end {
        return Some(Bytes::new());
    }
    let first = range.start / BLOCK_BYTES;
    let last = (range.end - 1) / BLOCK_BYTES;
    if first == last {
        let block = blocks.get(&first)?;
        let from = (range.start - first * BLOCK_BYTES) as usize;
        let to = (range.end - first * BLOCK_BYTES) as usize;
        return (to <= block.len()).then(|| block.slice(from..to));
    }
    let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
    for index in first..=last {
        let block = blocks.get(&index)?;
        let block_start = index * BLOCK_BYTES;
        let from = range.start.saturating_sub(block_start) as usize;
        let to = ((range.end - block_start) as usize).min(block.len());
        if from > to {
            return None;
        }
        out.extend_from_slice(&block[from..to]);
    }
    (out.len() as u64 == range.end - range.start).then(|| out.freeze())
}

struct CachedBlock {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

/// Every block file under `dir` (temporary files of unfinished writes included, so that they
/// age out too).
fn cached_blocks(dir: &Path) -> Vec<CachedBlock> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                out.push(CachedBlock {
                    path: entry.path(),
                    bytes: meta.len(),
                    used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
    }
    out
}

/// Whether a read is a plain ranged read of a part's bytes, which the blocks serve.
fn served_by_blocks(location: &StorePath, options: &GetOptions) -> Option<Range<u64>> {
    let in_parts = location
        .parts()
        .any(|p| p.as_ref() == strata_format::manifest::PARTS_DIR);
    let plain = options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
        && !options.head;
    match (&options.range, in_parts && plain) {
        (Some(GetRange::Bounded(range)), true) => Some(range.clone()),
        _ => None,
    }
}

#[async_trait]
impl ObjectStore for BlockCacheStore {
    async fn put_opts(
        &self,
        location: &StorePath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &StorePath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &StorePath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let Some(range) = served_by_blocks(location, &options) else {
            return self.inner.get_opts(location, options).await;
        };
        let size = self.size_of(location).await?;
        let mut bytes = self
            .read_ranges(location, std::slice::from_ref(&range))
            .await?;
        let bytes = bytes.pop().unwrap_or_default();
        Ok(GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(
                async move { Ok(bytes) },
            ))),
            meta: ObjectMeta {
                location: location.clone(),
                last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                size,
                e_tag: None,
                version: None,
            },
            range,
            attributes: Default::default(),
        })
    }

    async fn get_ranges(
        &self,
        location: &StorePath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        if served_by_blocks(location, &GetOptions::new().with_range(Some(0..1))).is_none() {
            return self.inner.get_ranges(location, ranges).await;
        }
        self.read_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<StorePath>>,
    ) -> BoxStream<'static, object_store::Result<StorePath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&StorePath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&StorePath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &StorePath,
        to: &StorePath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use object_store::memory::InMemory;

    use super::*;
    use crate::counting::{CountingStore, StoreStats};

    #[tokio::test]
    async fn a_local_copy_is_read_while_it_exists_then_the_store() {
        let memory = Arc::new(InMemory::new());
        let data: Vec<u8> = (0..(2 * BLOCK_BYTES)).map(|i| (i % 241) as u8).collect();
        let location = StorePath::from("t/parts/q.parquet");
        memory.put(&location, data.clone().into()).await.unwrap();
        let stats = Arc::new(StoreStats::default());
        let counted: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(memory, stats.clone()));
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCacheStore::open(counted, dir.path().join("b"), 10 * BLOCK_BYTES).unwrap();
        let copy = dir.path().join("q.parquet");
        std::fs::write(&copy, &data).unwrap();
        cache.register_size(location.clone(), data.len() as u64);
        cache.register_local_copy(location.clone(), copy.clone());
        let range = 100..BLOCK_BYTES + 7;
        let want = &data[range.start as usize..range.end as usize];
        assert_eq!(
            &cache.get_range(&location, range.clone()).await.unwrap()[..],
            want
        );
        assert_eq!(stats.snapshot(), (0, 0), "read from the local copy");
        std::fs::remove_file(&copy).unwrap();
        assert_eq!(&cache.get_range(&location, range).await.unwrap()[..], want);
        assert_eq!(stats.snapshot().0, 1, "then from the store");
    }

    #[tokio::test]
    async fn ranges_come_from_blocks_fetched_once_and_the_budget_holds() {
        let memory = Arc::new(InMemory::new());
        let data: Vec<u8> = (0..(3 * BLOCK_BYTES + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        let location = StorePath::from("t/parts/p.parquet");
        memory.put(&location, data.clone().into()).await.unwrap();
        let stats = Arc::new(StoreStats::default());
        let counted: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(memory, stats.clone()));
        let dir = tempfile::tempdir().unwrap();
        let cache =
            BlockCacheStore::open(counted.clone(), dir.path().join("b"), 10 * BLOCK_BYTES).unwrap();
        cache.register_size(location.clone(), data.len() as u64);
        let ranges = [
            10..20,
            BLOCK_BYTES - 5..BLOCK_BYTES + 5,
            3 * BLOCK_BYTES..3 * BLOCK_BYTES + 100,
        ];
        let got = cache.get_ranges(&location, &ranges).await.unwrap();
        for (range, bytes) in ranges.iter().zip(&got) {
            assert_eq!(&bytes[..], &data[range.start as usize..range.end as usize]);
        }
        let (gets, fetched) = stats.snapshot();
        // Blocks 0, 1 and 3 in one request, with block 2 between them (kept too).
        assert_eq!((gets, fetched), (1, 3 * BLOCK_BYTES + 100));
        // Served from disk now: no new request, the same bytes (through get_opts too).
        let again = cache
            .get_range(&location, 15..BLOCK_BYTES + 2)
            .await
            .unwrap();
        assert_eq!(&again[..], &data[15..(BLOCK_BYTES + 2) as usize]);
        assert_eq!(stats.snapshot().0, 1);
        assert_eq!(cache.cached_bytes(), 3 * BLOCK_BYTES + 100);
        // Another process with a budget of two blocks finds four on disk and, at its next
        // fetch, evicts down to 80 % of its budget, the least recently used first.
        let small =
            BlockCacheStore::open(counted.clone(), dir.path().join("b"), 2 * BLOCK_BYTES).unwrap();
        small.register_size(location.clone(), data.len() as u64);
        std::fs::remove_file(small.block_dir(&location).join(format!("{:010}", 2))).unwrap();
        small
            .get_range(&location, 2 * BLOCK_BYTES..2 * BLOCK_BYTES + 1)
            .await
            .unwrap();
        assert_eq!(stats.snapshot().0, 2);
        assert!(small.cached_bytes() <= 2 * BLOCK_BYTES / 10 * 8);
        let on_disk: u64 = cached_blocks(&dir.path().join("b"))
            .iter()
            .map(|b| b.bytes)
            .sum();
        assert_eq!(on_disk, small.cached_bytes());
        // A range past the end is an error, not a short answer.
        assert!(
            cache
                .get_range(&location, 0..data.len() as u64 + 1)
                .await
                .is_err()
        );
        // Reads outside parts/ go straight to the store.
        let log = StorePath::from("t/_log/00000000000000000001.json");
        counted.put(&log, b"{}".to_vec().into()).await.unwrap();
        assert_eq!(
            &cache.get(&log).await.unwrap().bytes().await.unwrap()[..],
            b"{}"
        );
    }
}
