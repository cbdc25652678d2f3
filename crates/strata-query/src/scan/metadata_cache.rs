//! Parsed footers and page indexes of parts, and their deletion vectors, text indexes and the
//! documents point reads rebuilt, shared by the statements of a session. Key file pages are
//! kept by the process's `strata_format::KeyCache`, which commits share.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use lru::LruCache;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::ParquetMetaData;
use strata_format::deletes::read_deletion_vector;
use strata_format::{DeletionVector, KeyCache, Manifest, PartChecksums, PartEntry, TextIndex};
use strata_json::KeyValue;

use super::deleted_rows::PartDeletions;

/// Parsed footers and page indexes of parts, kept across the statements of a session.
///
/// A part file is immutable and its name is never reused (ADR 0001), so an entry can never be
/// stale; merged-away parts simply stop being asked for and age out. Parsing a footer with
/// hundreds of columns and their page index costs milliseconds, which would otherwise be paid by
/// every statement for every part. Memory is bounded by bytes (the parsed metadata's own size):
/// past the budget, the least recently used parts are evicted.
pub struct PartMetadataCache {
    entries: std::sync::Mutex<Entries>,
    budget_bytes: usize,
}

struct Entries {
    parts: LruCache<FileKey, (CachedPart, usize)>,
    bytes: usize,
    /// Deletion vectors by file: like parts, a vector file is immutable and its name (part and
    /// manifest version) is never reused for other contents, so an entry is never stale.
    vectors: SideFiles<FileKey, DeletionVector>,
    /// The same vectors as planning applies them (`deleted_rows::PartDeletions`), by file.
    deletions: SideFiles<FileKey, PartDeletions>,
    /// Text indexes by file, immutable like parts (ADR 0019).
    text_indexes: SideFiles<FileKey, TextIndex>,
    /// Whole documents that point reads rebuilt, by part file and row: a part's row never
    /// changes (deletion vectors say which rows are gone; they are applied before this).
    documents: SideFiles<(FileKey, u64), String>,
    /// Decoded granules that point reads read, by part file and first row: the columns of
    /// every row of the granule, so that its other documents are rebuilt without decoding.
    granules: SideFiles<(FileKey, u64), RecordBatch>,
}

/// Files (or pieces of files) read beside parts — deletion vectors, text indexes, key files —
/// by path, least recently used first out once their sizes pass a budget.
struct SideFiles<K: Clone + Eq + std::hash::Hash, V> {
    queue: LruCache<K, (Arc<V>, usize)>,
    bytes: usize,
}

impl<K: Clone + Eq + std::hash::Hash, V> SideFiles<K, V> {
    fn new() -> Self {
        SideFiles {
            queue: LruCache::unbounded(),
            bytes: 0,
        }
    }

    fn get(&mut self, key: &K) -> Option<Arc<V>> {
        self.queue.get(key).map(|(value, _)| value.clone())
    }

    /// Keeps `value` (counted as `size` bytes) within `budget`.
    fn put(&mut self, key: K, value: Arc<V>, size: usize, budget: usize) {
        put_within_budget(&mut self.queue, &mut self.bytes, key, (value, size), budget);
    }
}

/// A file's path as a cache key, hashed and compared by its bytes: `Path`'s own `Hash` and
/// `Eq` walk its components, which every point read paid several times over. Two spellings of
/// one path are two entries, which costs a read, never a wrong answer.
#[derive(Clone)]
struct FileKey(PathBuf);

impl FileKey {
    fn of(path: &Path) -> FileKey {
        FileKey(path.to_owned())
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_os_str().as_encoded_bytes()
    }
}

impl PartialEq for FileKey {
    fn eq(&self, other: &FileKey) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for FileKey {}

impl std::hash::Hash for FileKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl std::fmt::Debug for PartMetadataCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartMetadataCache")
            .field("bytes", &self.bytes())
            .field("budget_bytes", &self.budget_bytes)
            .finish()
    }
}

impl Default for PartMetadataCache {
    fn default() -> Self {
        Self::with_budget(Self::DEFAULT_BUDGET_BYTES)
    }
}

/// A part's verified footer and page index, and its checksums.
pub(super) type CachedPart = (ArrowReaderMetadata, Option<Arc<PartChecksums>>);

impl PartMetadataCache {
    /// Parsed metadata kept by default: a Bluesky part of 512Ki-row groups parses to about
    /// 0.2 MB, a wide GH Archive part to a few MB, so this holds the footers of hundreds of parts.
    pub const DEFAULT_BUDGET_BYTES: usize = 256 * 1024 * 1024;

    /// A cache that keeps at most `budget_bytes` of parsed metadata (at least the newest part).
    pub fn with_budget(budget_bytes: usize) -> Self {
        PartMetadataCache {
            entries: std::sync::Mutex::new(Entries {
                parts: LruCache::unbounded(),
                bytes: 0,
                vectors: SideFiles::new(),
                deletions: SideFiles::new(),
                text_indexes: SideFiles::new(),
                documents: SideFiles::new(),
                granules: SideFiles::new(),
            }),
            budget_bytes,
        }
    }

    /// Deletion vectors kept at most, counted by their file sizes (a roaring bitmap takes about
    /// as much memory as its serialization): millions of scattered deleted rows.
    pub const VECTOR_BUDGET_BYTES: usize = 64 * 1024 * 1024;

    /// Text indexes kept at most, counted by their file sizes (the filters are their bytes).
    pub const TEXT_INDEX_BUDGET_BYTES: usize = 64 * 1024 * 1024;

    /// The rows of the part `entry` (of the table in `table_dir`) whose key is `key`, ascending,
    /// deleted rows included (None: the part has no key file): from the decoded pages of its
    /// key file in the process's [`KeyCache`], each read and verified once, then shared.
    pub(super) fn key_rows(
        &self,
        table_dir: &Path,
        entry: &PartEntry,
        key: &KeyValue,
    ) -> std::result::Result<Option<Vec<u64>>, strata_format::FormatError> {
        let Some(keys) = &entry.keys else {
            return Ok(None);
        };
        KeyCache::shared()
            .rows_of(table_dir, keys, entry.rows, key)
            .map(Some)
    }

    /// Documents that point reads keep at most, by their text's length and their entry: about
    /// 200,000 documents of 300 bytes, least recently read first out.
    pub const DOCUMENT_BUDGET_BYTES: usize = 64 * 1024 * 1024;

    /// The document at `row` of the part at `part_path` if a point read kept it.
    pub(super) fn document(&self, part_path: &Path, row: u64) -> Option<Arc<String>> {
        self.kept(|e| &mut e.documents, &(FileKey::of(part_path), row))
    }

    /// Keeps the document at `row` of the part at `part_path` for later point reads.
    pub(super) fn keep_document(&self, part_path: &Path, row: u64, document: Arc<String>) {
        let size = document.len() + std::mem::size_of::<(PathBuf, u64, String)>();
        let key = (FileKey::of(part_path), row);
        self.keep(
            |e| &mut e.documents,
            key,
            document,
            size,
            Self::DOCUMENT_BUDGET_BYTES,
        );
    }

    /// Decoded granules that point reads keep at most, by their Arrow memory: a few hundred
    /// granules of small documents, a few of wide ones.
    pub const GRANULE_BUDGET_BYTES: usize = 64 * 1024 * 1024;

    /// The decoded granule starting at `first_row` of the part at `part_path`, if a point read
    /// kept it.
    pub(super) fn granule(&self, part_path: &Path, first_row: u64) -> Option<Arc<RecordBatch>> {
        self.kept(|e| &mut e.granules, &(FileKey::of(part_path), first_row))
    }

    /// Keeps the decoded granule starting at `first_row` of the part at `part_path`.
    pub(super) fn keep_granule(&self, part_path: &Path, first_row: u64, batch: Arc<RecordBatch>) {
        let size = batch.get_array_memory_size();
        let key = (FileKey::of(part_path), first_row);
        self.keep(
            |e| &mut e.granules,
            key,
            batch,
            size,
            Self::GRANULE_BUDGET_BYTES,
        );
    }

    /// The text index of the part `entry` of the table in `table_dir` (None: it has none), read
    /// and verified once (`TextIndex::read`), then shared.
    pub(super) fn text_index(
        &self,
        table_dir: &Path,
        entry: &PartEntry,
    ) -> std::result::Result<Option<Arc<TextIndex>>, strata_format::FormatError> {
        let Some(indexed) = &entry.text_index else {
            return Ok(None);
        };
        let path = Manifest::part_path(table_dir, &indexed.file);
        self.side_file(
            |entries| &mut entries.text_indexes,
            FileKey(path),
            TextIndex::memory_bytes,
            Self::TEXT_INDEX_BUDGET_BYTES,
            || TextIndex::read(table_dir, indexed),
        )
        .map(Some)
    }

    /// The deletion vector of the part `entry` of the table in `table_dir` (None: it has none):
    /// the one this process wrote, or else read and checked once
    /// (`strata_format::deletes::read_deletion_vector`), then shared.
    pub(super) fn deletion_vector(
        &self,
        table_dir: &Path,
        entry: &PartEntry,
    ) -> std::result::Result<Option<Arc<DeletionVector>>, strata_format::FormatError> {
        let Some(deletes) = &entry.deletes else {
            return Ok(None);
        };
        if let Some(vector) = deletes.vector.get() {
            return Ok(Some(vector.clone()));
        }
        let path = Manifest::part_path(table_dir, &deletes.file);
        let bytes = deletes.bytes as usize;
        self.side_file(
            |entries| &mut entries.vectors,
            FileKey(path),
            |_| bytes,
            Self::VECTOR_BUDGET_BYTES,
            || read_deletion_vector(table_dir, deletes, entry.rows),
        )
        .map(Some)
    }

    /// The deleted rows of the part `entry` (whose Parquet metadata is `parquet`) as planning
    /// applies them, built once per deletion vector; None when it has none.
    pub(super) fn part_deletions(
        &self,
        table_dir: &Path,
        entry: &PartEntry,
        parquet: &ParquetMetaData,
    ) -> std::result::Result<Option<Arc<PartDeletions>>, strata_format::FormatError> {
        let Some(deletes) = &entry.deletes else {
            return Ok(None);
        };
        let path = Manifest::part_path(table_dir, &deletes.file);
        self.side_file(
            |entries| &mut entries.deletions,
            FileKey(path),
            PartDeletions::size,
            Self::VECTOR_BUDGET_BYTES,
            || {
                let vector = self.deletion_vector(table_dir, entry)?.unwrap_or_default();
                Ok(PartDeletions::new(&vector, parquet))
            },
        )
        .map(Some)
    }

    /// The value under `key` in the side-file cache `files` picks, or `read` once and kept
    /// (counted as `size` of it against `budget`).
    fn side_file<K: Clone + Eq + std::hash::Hash, V>(
        &self,
        files: impl Fn(&mut Entries) -> &mut SideFiles<K, V>,
        key: K,
        size: impl FnOnce(&V) -> usize,
        budget: usize,
        read: impl FnOnce() -> std::result::Result<V, strata_format::FormatError>,
    ) -> std::result::Result<Arc<V>, strata_format::FormatError> {
        if let Some(found) = self.kept(&files, &key) {
            return Ok(found);
        }
        let value = Arc::new(read()?);
        let size = size(&value);
        self.keep(files, key, value.clone(), size, budget);
        Ok(value)
    }

    /// The value under `key` in the side-file cache `files` picks, if it is kept.
    fn kept<K: Clone + Eq + std::hash::Hash, V>(
        &self,
        files: impl Fn(&mut Entries) -> &mut SideFiles<K, V>,
        key: &K,
    ) -> Option<Arc<V>> {
        let mut entries = self.entries.lock().ok()?;
        files(&mut entries).get(key)
    }

    /// Keeps `value` (counted as `size`) under `key` in the side-file cache `files` picks,
    /// within `budget`.
    fn keep<K: Clone + Eq + std::hash::Hash, V>(
        &self,
        files: impl Fn(&mut Entries) -> &mut SideFiles<K, V>,
        key: K,
        value: Arc<V>,
        size: usize,
        budget: usize,
    ) {
        if let Ok(mut entries) = self.entries.lock() {
            files(&mut entries).put(key, value, size, budget);
        }
    }

    /// Bytes of parsed metadata held now.
    pub fn bytes(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.bytes)
    }

    pub(super) fn get_or_load(
        &self,
        path: &Path,
        entry: &PartEntry,
    ) -> std::result::Result<CachedPart, strata_format::FormatError> {
        if let Ok(mut entries) = self.entries.lock()
            && let Some((found, _)) = entries.parts.get(&FileKey::of(path))
        {
            return Ok(found.clone());
        }
        let opened = strata_format::open_part(path, entry)?;
        let metadata = open_metadata(&opened.metadata).map_err(|source| {
            strata_format::FormatError::Parquet {
                path: path.to_owned(),
                source,
            }
        })?;
        let size = metadata.metadata().memory_size();
        let part = (metadata, opened.checksums);
        if let Ok(mut entries) = self.entries.lock() {
            let Entries { parts, bytes, .. } = &mut *entries;
            put_within_budget(
                parts,
                bytes,
                FileKey::of(path),
                (part.clone(), size),
                self.budget_bytes,
            );
        }
        Ok(part)
    }
}

/// Puts `entry` (a value and its size) under `key`, then evicts the least recently used entries
/// until `bytes` (the sizes held) is within `budget`, always keeping the newest.
fn put_within_budget<K: Clone + Eq + std::hash::Hash, V>(
    queue: &mut LruCache<K, (V, usize)>,
    bytes: &mut usize,
    key: K,
    entry: (V, usize),
    budget: usize,
) {
    let size = entry.1;
    if let Some((_, replaced)) = queue.put(key, entry) {
        *bytes -= replaced;
    }
    *bytes += size;
    while *bytes > budget && queue.len() > 1 {
        match queue.pop_lru() {
            Some((_, (_, evicted))) => *bytes -= evicted,
            None => break,
        }
    }
}

/// The verified footer and page index with an Arrow schema that reads every string column as
/// `Utf8View`.
fn open_metadata(plain: &ArrowReaderMetadata) -> parquet::errors::Result<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    let fields: Vec<arrow::datatypes::FieldRef> = plain
        .schema()
        .fields()
        .iter()
        .map(|f| {
            if f.data_type() == &DataType::Utf8 {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View))
            } else {
                f.clone()
            }
        })
        .collect();
    let schema = Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        plain.schema().metadata().clone(),
    ));
    ArrowReaderMetadata::try_new(plain.metadata().clone(), options.with_schema(schema))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use strata_engine::input::Input;
    use strata_engine::{DataDir, IngestOptions, ingest};
    use strata_format::Manifest;

    use super::PartMetadataCache;

    #[test]
    fn least_recently_used_parts_leave_once_over_budget() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        for part in 0..3 {
            let mut file = tempfile::NamedTempFile::new().unwrap();
            for n in 0..100 {
                writeln!(file, r#"{{"part":{part},"n":{n}}}"#).unwrap();
            }
            let input = [Input::File(file.path().to_owned())];
            ingest(
                &dir,
                "t",
                &input,
                &IngestOptions::default(),
                &mut |_| {},
                &mut |_| {},
            )
            .unwrap();
        }
        let table_dir = dir.table_dir("t").unwrap();
        let manifest = dir.manifest("t").unwrap();
        let paths: Vec<_> = manifest
            .parts
            .iter()
            .map(|e| (Manifest::part_path(&table_dir, &e.file), e))
            .collect();
        let size = |cache: &PartMetadataCache, i: usize| {
            let before = cache.bytes();
            cache.get_or_load(&paths[i].0, paths[i].1).unwrap();
            cache.bytes() - before
        };
        let unbounded = PartMetadataCache::default();
        let sizes: Vec<usize> = (0..3).map(|i| size(&unbounded, i)).collect();
        assert!(sizes.iter().all(|&s| s > 0), "{sizes:?}");
        assert_eq!(unbounded.bytes(), sizes.iter().sum::<usize>());
        // Room for two parts: loading a third evicts the least recently used, not the oldest.
        let cache = PartMetadataCache::with_budget(sizes[0] + sizes[1] + sizes[2] - 1);
        for i in [0, 1, 0, 2] {
            cache.get_or_load(&paths[i].0, paths[i].1).unwrap();
        }
        assert_eq!(cache.bytes(), sizes[0] + sizes[2]);
        // A budget below one part still keeps the newest.
        let tiny = PartMetadataCache::with_budget(1);
        for (path, entry) in &paths {
            tiny.get_or_load(path, entry).unwrap();
        }
        assert_eq!(tiny.bytes(), sizes[2]);
    }

    #[test]
    fn text_indexes_are_read_once_per_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for n in 0..100 {
            writeln!(file, r#"{{"message":"line {n}"}}"#).unwrap();
        }
        let options = IngestOptions {
            text_index: Some(vec!["message".into()]),
            ..IngestOptions::default()
        };
        let input = [Input::File(file.path().to_owned())];
        ingest(&dir, "t", &input, &options, &mut |_| {}, &mut |_| {}).unwrap();
        let table_dir = dir.table_dir("t").unwrap();
        let entry = dir.manifest("t").unwrap().parts.remove(0);
        let cache = PartMetadataCache::default();
        let first = cache.text_index(&table_dir, &entry).unwrap().unwrap();
        let again = cache.text_index(&table_dir, &entry).unwrap().unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        assert_eq!(first.rows().unwrap(), 100);
    }

    #[test]
    fn deletion_vectors_are_read_once_per_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for n in 0..100 {
            writeln!(file, r#"{{"n":{n}}}"#).unwrap();
        }
        let input = [Input::File(file.path().to_owned())];
        ingest(
            &dir,
            "t",
            &input,
            &IngestOptions::default(),
            &mut |_| {},
            &mut |_| {},
        )
        .unwrap();
        let table_dir = dir.table_dir("t").unwrap();
        let cache = PartMetadataCache::default();
        let entry = || dir.manifest("t").unwrap().parts.remove(0);
        assert!(
            cache
                .deletion_vector(&table_dir, &entry())
                .unwrap()
                .is_none()
        );
        let part = entry().file.clone();
        let delete = |rows: Vec<u64>| {
            strata_engine::delete_rows(&dir, "t", &[(part.clone(), rows)].into()).unwrap();
        };
        delete(vec![1, 2]);
        let first = cache
            .deletion_vector(&table_dir, &entry())
            .unwrap()
            .unwrap();
        let again = cache
            .deletion_vector(&table_dir, &entry())
            .unwrap()
            .unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        assert_eq!(first.len(), 2);
        // A new vector is a new file, read anew.
        delete(vec![3]);
        let newer = cache
            .deletion_vector(&table_dir, &entry())
            .unwrap()
            .unwrap();
        assert_eq!(newer.len(), 3);
    }
}
