//! Key files opened, and their pages decoded, once per process: what every lookup of a few keys
//! reads — the query's point reads and planned key lookups, and the engine's commits, whose
//! write-conflict checks and replaced rows look up each key written (ADR 0016, ADR 0017).
//!
//! Without it a commit opened, verified and decoded the key file of every part that may hold a
//! key it wrote, twice for the conflict check and once more for the rows it replaces; on a
//! server committing booking transactions that was a third of all CPU (parquet also creates a
//! zstd compressor and decompressor for every column chunk it reads).
//!
//! Invariants: a key file never changes once written and its name (its part's, which holds the
//! writing process, a clock and a counter) is never reused, so an entry is never stale — files of
//! merged-away parts are simply no longer asked for and age out. What is kept is bounded by
//! bytes (the parsed footer's and the decoded page's memory sizes), least recently used first
//! out; at least the newest entry stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use lru::LruCache;
use strata_json::KeyValue;

use crate::error::FormatError;
use crate::indexes::PartIndex;
use crate::keys::{KeyFile, KeyHit, KeyPage, PartKeys, find_keys};
use crate::manifest::Manifest;

/// Lookups of more keys than this at once read the key file straight through
/// ([`find_keys`]) instead of page by page through the cache: a bulk keyed ingest looks up every
/// key it loads, which would only churn the cache.
pub const CACHED_LOOKUP_KEYS: usize = 256;

#[derive(Clone)]
enum Cached {
    File(Arc<KeyFile>),
    Page(Arc<KeyPage>),
    /// A key file of one page (a transaction's part: most of a table's parts on a busy server)
    /// with that page, decoded when the file is opened: its one page is read by the first
    /// lookup the part's key range lets through anyway, and a lookup then costs one entry's
    /// lookup instead of two.
    OnePage(Arc<KeyFile>, Arc<KeyPage>),
}

enum Entry {
    File(PathBuf),
    Page(PathBuf, usize),
}

impl Entry {
    /// The path's bytes: hashing and comparing them is what a lookup per key and part can
    /// afford (`Path`'s own `Hash` and `Eq` walk its components). Two spellings of one path are
    /// two entries, which costs a read, never a wrong answer.
    fn identity(&self) -> (&[u8], Option<usize>) {
        match self {
            Entry::File(path) => (path.as_os_str().as_encoded_bytes(), None),
            Entry::Page(path, index) => (path.as_os_str().as_encoded_bytes(), Some(*index)),
        }
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Entry {}

impl std::hash::Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

struct Entries {
    lru: LruCache<Entry, (Cached, usize)>,
    bytes: usize,
}

/// Opened key files and decoded key pages (see the module docs).
pub struct KeyCache {
    entries: Mutex<Entries>,
    budget_bytes: usize,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("bytes", &self.bytes())
            .field("budget_bytes", &self.budget_bytes)
            .finish()
    }
}

impl KeyCache {
    /// Kept at most by the process's cache: about 30 MB of decoded pages hold the keys of a
    /// million documents, so point reads and commits over a working set that size never read
    /// a key file.
    pub const DEFAULT_BUDGET_BYTES: usize = 64 * 1024 * 1024;

    /// A cache keeping at most `budget_bytes` (at least its newest entry).
    pub fn with_budget(budget_bytes: usize) -> KeyCache {
        KeyCache {
            entries: Mutex::new(Entries {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            budget_bytes,
        }
    }

    /// The process's cache, shared by every session and commit.
    pub fn shared() -> &'static KeyCache {
        static SHARED: OnceLock<KeyCache> = OnceLock::new();
        SHARED.get_or_init(|| KeyCache::with_budget(KeyCache::DEFAULT_BUDGET_BYTES))
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rows of a part (of `part_rows` rows, in `table_dir`, with the key file `keys`) whose
    /// key is `key`, ascending; rows its deletion vector deletes are among them.
    pub fn rows_of(
        &self,
        table_dir: &Path,
        keys: &PartKeys,
        part_rows: u64,
        key: &KeyValue,
    ) -> Result<Vec<u64>, FormatError> {
        let rows = self.rows_listed(table_dir, keys, part_rows, part_rows, key, u64::MAX)?;
        Ok(rows.unwrap_or_default())
    }

    /// The rows of a part (of `part_rows` rows, in `table_dir`) whose value in the secondary
    /// index file `index` (`crate::indexes`) is `value`, ascending; deleted rows among them.
    pub fn index_rows_of(
        &self,
        table_dir: &Path,
        index: &PartIndex,
        part_rows: u64,
        value: &KeyValue,
    ) -> Result<Vec<u64>, FormatError> {
        let rows = self.index_rows_at_most(table_dir, index, part_rows, value, u64::MAX)?;
        Ok(rows.unwrap_or_default())
    }

    /// [`KeyCache::index_rows_of`], or None without reading them when the page index shows
    /// more than `limit` rows hold `value`.
    pub fn index_rows_at_most(
        &self,
        table_dir: &Path,
        index: &PartIndex,
        part_rows: u64,
        value: &KeyValue,
        limit: u64,
    ) -> Result<Option<Vec<u64>>, FormatError> {
        self.rows_listed(table_dir, &index.file, part_rows, index.rows, value, limit)
    }

    /// [`KeyCache::rows_of`] in a file listing `listed_rows` of the part's rows; None when its
    /// page index shows more than `limit` of them hold `key` (nothing else read).
    fn rows_listed(
        &self,
        table_dir: &Path,
        keys: &PartKeys,
        part_rows: u64,
        listed_rows: u64,
        key: &KeyValue,
        limit: u64,
    ) -> Result<Option<Vec<u64>>, FormatError> {
        if !keys.may_hold(key) {
            return Ok(Some(Vec::new()));
        }
        let path = Manifest::part_path(table_dir, &keys.file);
        let file_entry = Entry::File(path.clone());
        let (file, only_page) = match self.get(&file_entry) {
            Some(Cached::File(file)) => (file, None),
            Some(Cached::OnePage(file, page)) => (file, Some(page)),
            _ => {
                let file = Arc::new(KeyFile::open_listing(
                    table_dir,
                    keys,
                    part_rows,
                    listed_rows,
                )?);
                if file.pages() == 1 {
                    let page = Arc::new(file.read_page(0)?);
                    let size = file.memory_size() + page.memory_size();
                    let cached = Cached::OnePage(file.clone(), page.clone());
                    self.put(file_entry, cached, size);
                    (file, Some(page))
                } else {
                    let size = file.memory_size();
                    self.put(file_entry, Cached::File(file.clone()), size);
                    (file, None)
                }
            }
        };
        if file.rows_only_of(key) > limit {
            return Ok(None);
        }
        if let Some(page) = only_page {
            return Ok(Some(page.rows_of(key)));
        }
        let mut rows = Vec::new();
        for index in file.pages_of(key) {
            let page_entry = Entry::Page(path.clone(), index);
            let page = match self.get(&page_entry) {
                Some(Cached::Page(page)) => page,
                _ => {
                    let page = Arc::new(file.read_page(index)?);
                    let size = page.memory_size();
                    self.put(page_entry, Cached::Page(page.clone()), size);
                    page
                }
            };
            rows.extend(page.rows_of(key));
        }
        Ok(Some(rows))
    }

    /// [`find_keys`] for few keys (at most [`CACHED_LOOKUP_KEYS`]) through the cache, one key
    /// at a time; more are read straight through the key file.
    pub fn find_keys(
        &self,
        table_dir: &Path,
        keys: &PartKeys,
        part_rows: u64,
        sorted_keys: &[KeyValue],
    ) -> Result<Vec<KeyHit>, FormatError> {
        if sorted_keys.len() > CACHED_LOOKUP_KEYS {
            return find_keys(table_dir, keys, part_rows, sorted_keys);
        }
        let mut hits = Vec::new();
        for (index, key) in sorted_keys.iter().enumerate() {
            hits.extend(
                self.rows_of(table_dir, keys, part_rows, key)?
                    .into_iter()
                    .map(|row| KeyHit { key: index, row }),
            );
        }
        Ok(hits)
    }

    fn get(&self, entry: &Entry) -> Option<Cached> {
        self.lock().lru.get(entry).map(|(cached, _)| cached.clone())
    }

    fn put(&self, entry: Entry, cached: Cached, size: usize) {
        let mut entries = self.lock();
        if let Some((_, replaced)) = entries.lru.put(entry, (cached, size)) {
            entries.bytes -= replaced;
        }
        entries.bytes += size;
        while entries.bytes > self.budget_bytes && entries.lru.len() > 1 {
            match entries.lru.pop_lru() {
                Some((_, (_, evicted))) => entries.bytes -= evicted,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;
    use crate::keys::write_key_file;

    /// A key file of `keys` (row i holds keys[i]) in `dir/parts`.
    fn key_file(dir: &Path, keys: &[i64]) -> PartKeys {
        let parts = dir.join("parts");
        std::fs::create_dir_all(&parts).unwrap();
        let column: ArrayRef = Arc::new(Int64Array::from(keys.to_vec()));
        write_key_file(&parts, "part-1.parquet", &column).unwrap()
    }

    #[test]
    fn lookups_through_the_cache_equal_reading_the_file_and_stay_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<i64> = (0..50_000).map(|i| (i * 7919) % 50_000).collect();
        let entry = key_file(dir.path(), &keys);
        let wanted: Vec<KeyValue> = [3, 17, 4_999, 49_999, 50_000, -1]
            .into_iter()
            .map(KeyValue::Integer)
            .collect();
        let direct = find_keys(dir.path(), &entry, keys.len() as u64, &wanted).unwrap();
        // A budget smaller than one page: every entry but the newest is evicted, and answers
        // stay the same.
        for cache in [KeyCache::with_budget(1 << 30), KeyCache::with_budget(1)] {
            for _ in 0..2 {
                let cached = cache
                    .find_keys(dir.path(), &entry, keys.len() as u64, &wanted)
                    .unwrap();
                assert_eq!(cached, direct);
            }
            assert!(!cache.lock().lru.is_empty());
        }
        let small = KeyCache::with_budget(1);
        small
            .find_keys(dir.path(), &entry, keys.len() as u64, &wanted)
            .unwrap();
        assert_eq!(small.lock().lru.len(), 1);
        // A file of one page is one entry, and answers alike.
        let few: Vec<i64> = vec![9, 4, 7];
        let one_page = key_file(dir.path(), &few);
        let cache = KeyCache::with_budget(1 << 30);
        for _ in 0..2 {
            for (row, key) in few.iter().enumerate() {
                let rows = cache
                    .rows_of(dir.path(), &one_page, 3, &KeyValue::Integer(*key))
                    .unwrap();
                assert_eq!(rows, [row as u64]);
            }
            let absent = cache.rows_of(dir.path(), &one_page, 3, &KeyValue::Integer(5));
            assert!(absent.unwrap().is_empty());
        }
        assert_eq!(cache.lock().lru.len(), 1);
        // Each key is found at its row.
        assert_eq!(direct.len(), 4);
        for hit in &direct {
            assert_eq!(KeyValue::Integer(keys[hit.row as usize]), wanted[hit.key]);
        }
    }
}
