//! Postings bitmaps read and checked, kept for later queries of the process.
//!
//! The same keyword's or token's rows are asked for again and again (a dashboard refreshed, a
//! search narrowed), and reading a bitmap means a read, a hash over its bytes and decoding it —
//! most of a count taken from postings once planning is done. Entries are keyed by the reader of
//! the file they came from (a `Postings`, which the part metadata cache keeps for the session;
//! [`reader_id`]) and the bitmap's offset and XXH64 in it: part files are immutable, so an
//! entry never goes stale, and a bitmap is checked when it is read, once per reader — a file
//! opened anew is read and checked anew. Least recently used entries go first past
//! [`CAPACITY_BYTES`]; those of readers dropped age out the same way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use lru::LruCache;
use roaring::RoaringBitmap;

/// Bytes of bitmaps (their serialized size, about their memory) the process keeps at most.
pub(super) const CAPACITY_BYTES: u64 = 64 << 20;

/// A bitmap's reader, offset and XXH64.
type Key = (u64, u64, u64);

/// A new reader's identity, never given before in the process.
pub(super) fn reader_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The kept bitmaps, least recently used first out, with their bytes.
struct Entries {
    lru: LruCache<Key, (Arc<RoaringBitmap>, u64)>,
    bytes: u64,
}

fn entries() -> &'static Mutex<Entries> {
    static ENTRIES: OnceLock<Mutex<Entries>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        Mutex::new(Entries {
            lru: LruCache::unbounded(),
            bytes: 0,
        })
    })
}

/// The bitmap at `offset` with XXH64 `xxh64` of the file of `reader`, if kept.
pub(super) fn get(reader: u64, offset: u64, xxh64: u64) -> Option<Arc<RoaringBitmap>> {
    let mut entries = entries().lock().ok()?;
    entries
        .lru
        .get(&(reader, offset, xxh64))
        .map(|(rows, _)| Arc::clone(rows))
}

/// Keeps `rows`, read and checked from `offset` of the file of `reader`, and evicts the least
/// recently used entries while the kept bytes exceed the capacity (as `KeyCache` does).
pub(super) fn put(reader: u64, offset: u64, xxh64: u64, rows: Arc<RoaringBitmap>) {
    let bytes = rows.serialized_size() as u64;
    if bytes > CAPACITY_BYTES / 4 {
        return;
    }
    let Ok(mut entries) = entries().lock() else {
        return;
    };
    if let Some((_, replaced)) = entries.lru.put((reader, offset, xxh64), (rows, bytes)) {
        entries.bytes -= replaced;
    }
    entries.bytes += bytes;
    while entries.bytes > CAPACITY_BYTES {
        match entries.lru.pop_lru() {
            Some((_, (_, evicted))) => entries.bytes -= evicted,
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kept_by_location_and_evicted_oldest_first() {
        let file = reader_id();
        let rows: RoaringBitmap = (0..1000).collect();
        put(file, 8, 1, Arc::new(rows.clone()));
        assert_eq!(get(file, 8, 1).as_deref(), Some(&rows));
        // Another offset, hash or reader is another bitmap.
        assert!(get(file, 9, 1).is_none());
        assert!(get(file, 8, 2).is_none());
        assert!(get(reader_id(), 8, 1).is_none());
        // Bitmaps of ~1 MiB each (one bit in every other of 16M rows: bitmap containers)
        // fill the cache past its capacity; the one used last before them is evicted first.
        let big: RoaringBitmap = (0..(16u32 << 20)).step_by(2).collect();
        let size = big.serialized_size() as u64;
        let big = Arc::new(big);
        let count = CAPACITY_BYTES / size + 2;
        for offset in 100..100 + count {
            put(file, offset, 3, Arc::clone(&big));
            // Keep the most recent ones in use.
            assert!(get(file, offset, 3).is_some());
        }
        assert!(get(file, 8, 1).is_none());
        assert!(get(file, 100, 3).is_none());
        assert!(get(file, 100 + count - 1, 3).is_some());
        assert!(entries().lock().unwrap().bytes <= CAPACITY_BYTES);
    }
}
