//! Key files: where each key of a keyed table's part lies in the part (ADR 0016).
//!
//! A part of a table with a key (`TableSettings::key`) has a key file `parts/<part>.keys`,
//! written with the part and listed in its manifest entry ([`PartKeys`]). It is a Parquet file
//! of two columns, `key` (`Utf8` or `Int64`, the key's type) and `row` (`UInt32`, the row's
//! position in the part, 0-based across row groups), one row per row of the part, **sorted by
//! key** (then row), in data pages of [`KEY_PAGE_ROWS`] rows with a page index. It has a
//! checksum file `<part>.keys.crc` like a part's (ADR 0008), and every read is verified.
//!
//! Finding keys: the page index gives each page's smallest and largest key, and since the file
//! is sorted, the pages that can hold a key are the few whose range covers it: a lookup of one
//! key reads one page of about a thousand keys (and the footer), whatever the part's size. The
//! manifest entry carries the part's smallest and largest key, so most parts are skipped
//! without opening anything. [`find_keys`] looks up many keys in one read of the file (what
//! ingest and transactions do); [`KeyFile`] and [`KeyPage`] look up one key at a time in pages a
//! reader decodes once and keeps (what queries do, through their session's cache).
//!
//! Invariants: a key file has exactly its part's row count and lists every row once; a key may
//! be listed at several rows (a replaced row stays in its part until a merge, deleted by the
//! part's deletion vector): callers skip the deleted ones.

use std::cmp::Ordering;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{SortColumn, SortOptions, lexsort_to_indices, take};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_json::{KeyType, KeyValue};

use crate::checksum::{PartFile, open_verified, verify_hash, write_checksums};
use crate::derived::Derived;
use crate::error::FormatError;
use crate::manifest::{Manifest, PARTS_DIR, PartEntry, sync_dir};

/// Suffix of key files (`<part>.keys`); not `.parquet`, so that readers of `parts/*.parquet`
/// see only the parts.
pub const KEY_FILE_SUFFIX: &str = ".keys";
/// Rows per data page of a key file: what one lookup of one key decodes.
pub const KEY_PAGE_ROWS: usize = 1024;
/// Rows per row group of a key file.
const KEY_ROW_GROUP_ROWS: usize = 1024 * 1024;

/// A part's key file, as its manifest entry lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartKeys {
    /// File name inside `parts/`.
    pub file: String,
    pub bytes: u64,
    /// XXH64 (seed 0) of the file as 16 lowercase hex digits; the file has a checksum file.
    pub xxh64: String,
    /// The smallest and largest key of the part (a JSON string or integer).
    pub min: Value,
    pub max: Value,
    /// The hashes of the file's keys, when this process wrote a file of few keys.
    #[serde(skip)]
    pub digest: Derived<KeyDigest>,
}

impl PartKeys {
    /// Whether a key could be in the part, by its key digest when it has one, else by its
    /// smallest and largest key.
    pub fn may_hold(&self, key: &KeyValue) -> bool {
        if let Some(digest) = self.digest.get() {
            return digest.may_hold(key);
        }
        // Compared in place: a commit asks this of every part for every key it writes.
        let (Some(low), Some(high)) = (bound_cmp(&self.min, key), bound_cmp(&self.max, key)) else {
            return true;
        };
        low.is_le() && high.is_ge()
    }
}

/// Key files of at most this many keys carry a [`KeyDigest`] (8 bytes a key in memory): a
/// transaction's part, and the checkpoint's fold of a second of them.
pub const DIGEST_KEYS: usize = 1024;

/// The sorted hashes of a small key file's keys, kept in memory beside its manifest entry by
/// the process that wrote it.
///
/// On a server committing transactions a keyed table has hundreds of one-commit parts between
/// checkpoints, each with a few keys spread over the whole key range, so a part's smallest and
/// largest key rule out almost none of them: every key a commit writes, and every point read,
/// went to the key cache for each part (about a tenth of the server's CPU in the booking
/// benchmark at 16 clients). A lookup in the digest rules out a part that does not hold the key
/// without touching the cache; a hash shared by another key only sends the lookup on to the
/// key file, which answers exactly.
pub struct KeyDigest {
    hashes: Box<[u64]>,
}

impl KeyDigest {
    fn hash(key: &KeyValue) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0).hash_one(key)
    }

    /// The digest of `keys` (any order), or none for more than [`DIGEST_KEYS`].
    pub fn of(keys: &[KeyValue]) -> Option<KeyDigest> {
        if keys.len() > DIGEST_KEYS {
            return None;
        }
        let mut hashes: Vec<u64> = keys.iter().map(KeyDigest::hash).collect();
        hashes.sort_unstable();
        hashes.dedup();
        Some(KeyDigest {
            hashes: hashes.into(),
        })
    }

    /// False when `key` is certainly not among the keys.
    pub fn may_hold(&self, key: &KeyValue) -> bool {
        self.hashes.binary_search(&KeyDigest::hash(key)).is_ok()
    }
}

/// How a part's smallest or largest key (as the manifest holds it) compares with `key`, in
/// `KeyValue`'s order (every string before every integer); None when it is not a key.
fn bound_cmp(bound: &Value, key: &KeyValue) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    match (bound, key) {
        (Value::String(bound), KeyValue::String(key)) => Some(bound.as_str().cmp(key.as_str())),
        (Value::String(_), KeyValue::Integer(_)) => Some(Ordering::Less),
        (Value::Number(bound), key) => {
            let bound = bound.as_i64()?;
            match key {
                KeyValue::Integer(key) => Some(bound.cmp(key)),
                KeyValue::String(_) => Some(Ordering::Greater),
            }
        }
        _ => None,
    }
}

fn json_key(value: &Value) -> Option<KeyValue> {
    match value {
        Value::String(s) => Some(KeyValue::String(s.clone())),
        Value::Number(n) => n.as_i64().map(KeyValue::Integer),
        _ => None,
    }
}

/// The key file name of the part `part`.
pub fn key_file(part: &str) -> String {
    format!("{part}{KEY_FILE_SUFFIX}")
}

/// The part a key file belongs to (None: not a key file's name).
pub fn key_file_part(file: &str) -> Option<&str> {
    file.strip_suffix(KEY_FILE_SUFFIX)
}

fn key_schema(key_type: KeyType) -> Arc<Schema> {
    let data_type = match key_type {
        KeyType::String => DataType::Utf8,
        KeyType::Integer => DataType::Int64,
    };
    Arc::new(Schema::new(vec![
        Field::new("key", data_type, false),
        Field::new("row", DataType::UInt32, false),
    ]))
}

/// Writes the key file of part `part_file` in `parts_dir` from the part's key column in row
/// order (`keys[i]` is row `i`'s key): sorted, through a temporary file, fsynced, renamed, with
/// its checksum file. The caller lists the returned entry in the manifest commit that lists the
/// part.
pub fn write_key_file(
    parts_dir: &Path,
    part_file: &str,
    keys: &ArrayRef,
) -> Result<PartKeys, FormatError> {
    let damaged = |message: String| FormatError::Damaged {
        path: parts_dir.join(part_file),
        message,
    };
    if keys.null_count() > 0 {
        return Err(damaged(format!(
            "{} of its rows have no key value",
            keys.null_count()
        )));
    }
    if keys.len() > u32::MAX as usize {
        return Err(damaged(format!(
            "{} rows are too many for a key file",
            keys.len()
        )));
    }
    let rows = UInt32Array::from_iter_values(0..keys.len() as u32);
    write_sorted_file(parts_dir, part_file, &key_file(part_file), keys, rows)
}

/// Writes `parts_dir/<file>` (a key file, or a secondary index file: `crate::indexes`) of the
/// part `part_file`: the pairs `(values[i], rows[i])` sorted by value then row, through a
/// temporary file, fsynced, renamed, with its checksum file. `values` holds no null.
pub(crate) fn write_sorted_file(
    parts_dir: &Path,
    part_file: &str,
    file: &str,
    values: &ArrayRef,
    rows: UInt32Array,
) -> Result<PartKeys, FormatError> {
    let final_path = parts_dir.join(file);
    let out = crate::held::Output::create(&final_path)?;
    let tmp_path = out.writing_path().to_owned();
    let damaged = |message: String| FormatError::Damaged {
        path: parts_dir.join(part_file),
        message,
    };
    let key_type = match values.data_type() {
        DataType::Utf8 => KeyType::String,
        DataType::Int64 => KeyType::Integer,
        other => return Err(damaged(format!("its {file} column is of type {other}"))),
    };
    let arrow_err = |source| FormatError::Arrow {
        path: tmp_path.clone(),
        source,
    };
    let order = lexsort_to_indices(
        &[
            SortColumn {
                values: values.clone(),
                options: Some(SortOptions::default()),
            },
            SortColumn {
                values: Arc::new(rows.clone()),
                options: Some(SortOptions::default()),
            },
        ],
        None,
    )
    .map_err(arrow_err)?;
    let sorted_keys = take(values.as_ref(), &order, None).map_err(arrow_err)?;
    let sorted_rows = take(&rows, &order, None).map_err(arrow_err)?;
    let (min, max) = match (first_key(&sorted_keys), last_key(&sorted_keys)) {
        (Some(min), Some(max)) => (min, max),
        _ => return Err(damaged(format!("{file} would list no rows"))),
    };
    let batch = RecordBatch::try_new(key_schema(key_type), vec![sorted_keys, sorted_rows])
        .map_err(arrow_err)?;
    let props = WriterProperties::builder()
        // A small part's key file is not compressed, as its part is not (`SMALL_PART_ROWS`).
        .set_compression(match batch.num_rows() <= crate::part::SMALL_PART_ROWS {
            true => Compression::UNCOMPRESSED,
            false => Compression::ZSTD(ZstdLevel::default()),
        })
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(KEY_PAGE_ROWS)
        .set_write_batch_size(KEY_PAGE_ROWS)
        .set_max_row_group_row_count(Some(KEY_ROW_GROUP_ROWS))
        .set_dictionary_enabled(false)
        .build();
    let parquet_err = |source| FormatError::Parquet {
        path: tmp_path.clone(),
        source,
    };
    let mut writer =
        ArrowWriter::try_new(crate::held::Handover::new(out), batch.schema(), Some(props))
            .map_err(parquet_err)?;
    writer.write(&batch).map_err(parquet_err)?;
    let (metadata, out) = crate::held::finish_parquet(writer, &tmp_path)?;
    let written = out.close()?;
    let xxh64 = write_checksums(
        written.content(),
        &metadata,
        written.writing_path(),
        &final_path,
    )?;
    let bytes = written.place()?;
    sync_dir(parts_dir)?;
    let digest = match batch.num_rows() <= DIGEST_KEYS {
        true => keys_of(batch.column(0))
            .and_then(|keys| KeyDigest::of(&keys))
            .map_or_else(Derived::default, |digest| Derived::new(Arc::new(digest))),
        false => Derived::default(),
    };
    Ok(PartKeys {
        file: file.to_owned(),
        bytes,
        xxh64: format!("{xxh64:016x}"),
        min,
        max,
        digest,
    })
}

/// The values of a key column as keys (None unless every row holds a key: see [`bound`]).
fn keys_of(column: &ArrayRef) -> Option<Vec<KeyValue>> {
    (0..column.len()).map(|i| bound(column, i)).collect()
}

fn key_at(keys: &ArrayRef, i: usize) -> Option<Value> {
    match keys.data_type() {
        DataType::Utf8 => Some(Value::String(keys.as_string::<i32>().value(i).to_owned())),
        DataType::Int64 => Some(Value::from(keys.as_primitive::<Int64Type>().value(i))),
        _ => None,
    }
}

fn first_key(keys: &ArrayRef) -> Option<Value> {
    (!keys.is_empty()).then(|| key_at(keys, 0)).flatten()
}

fn last_key(keys: &ArrayRef) -> Option<Value> {
    (!keys.is_empty())
        .then(|| key_at(keys, keys.len() - 1))
        .flatten()
}

/// One row of a part found by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHit {
    /// Index of the key in the sorted list looked up.
    pub key: usize,
    /// The row's position in the part.
    pub row: u64,
}

/// The rows of a part (of `part_rows` rows, in `table_dir`) whose key is one of `sorted_keys`
/// (sorted ascending, no duplicates), reading only the key file's pages whose key range covers
/// one of them. Rows the part's deletion vector deletes are among them: the caller skips those.
pub fn find_keys(
    table_dir: &Path,
    keys_entry: &PartKeys,
    part_rows: u64,
    sorted_keys: &[KeyValue],
) -> Result<Vec<KeyHit>, FormatError> {
    let wanted: Vec<&KeyValue> = sorted_keys
        .iter()
        .filter(|k| keys_entry.may_hold(k))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let path = Manifest::part_path(table_dir, &keys_entry.file);
    let opened = open_verified(&path, keys_entry.bytes, true, part_rows)?;
    let selection = page_selection(&opened.metadata, &wanted);
    if selection.as_ref().is_some_and(|s| !s.selects_any()) {
        return Ok(Vec::new());
    }
    let mut hits = Vec::new();
    scan_key_file(&path, opened, selection, &mut |key, row| {
        let found = match key {
            KeyRef::String(key) => sorted_keys.binary_search_by(|k| compare_str(k, key)),
            KeyRef::Integer(key) => sorted_keys.binary_search_by(|k| compare_int(k, key)),
        };
        if let Ok(index) = found {
            let row = u64::from(row);
            if row >= part_rows {
                return Err(FormatError::Damaged {
                    path: path.clone(),
                    message: format!("it lists row {row} of a part of {part_rows} rows"),
                });
            }
            hits.push(KeyHit { key: index, row });
        }
        Ok(())
    })?;
    Ok(hits)
}

/// A key as a key file holds it.
enum KeyRef<'a> {
    String(&'a str),
    Integer(i64),
}

/// Hands each `(key, row)` of a key file (of the rows `selection` selects) to `visit`, in
/// file order; every page read is verified.
fn scan_key_file(
    path: &Path,
    opened: crate::checksum::OpenedPart,
    selection: Option<RowSelection>,
    visit: &mut dyn FnMut(KeyRef<'_>, u32) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let file = PartFile::open(path, opened.checksums.clone())?;
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, opened.metadata)
        .with_batch_size(8 * KEY_PAGE_ROWS);
    if let Some(selection) = selection {
        builder = builder.with_row_selection(selection);
    }
    let reader = builder.build().map_err(|source| FormatError::Parquet {
        path: path.to_owned(),
        source,
    })?;
    for batch in reader {
        let batch = batch.map_err(|source| FormatError::Arrow {
            path: path.to_owned(),
            source,
        })?;
        let rows = batch
            .column(1)
            .as_primitive::<arrow::datatypes::UInt32Type>();
        let keys = batch.column(0);
        for i in 0..batch.num_rows() {
            let key = match keys.data_type() {
                DataType::Utf8 => KeyRef::String(keys.as_string::<i32>().value(i)),
                DataType::Int64 => KeyRef::Integer(keys.as_primitive::<Int64Type>().value(i)),
                other => {
                    return Err(FormatError::Damaged {
                        path: path.to_owned(),
                        message: format!("its key column is of type {other}"),
                    });
                }
            };
            visit(key, rows.value(i))?;
        }
    }
    Ok(())
}

fn compare_str(key: &KeyValue, value: &str) -> Ordering {
    match key {
        KeyValue::String(s) => s.as_str().cmp(value),
        // Integers never equal a string: order them all before.
        KeyValue::Integer(_) => Ordering::Less,
    }
}

fn compare_int(key: &KeyValue, value: i64) -> Ordering {
    match key {
        KeyValue::Integer(i) => i.cmp(&value),
        KeyValue::String(_) => Ordering::Greater,
    }
}

/// The pages of the key file whose key range covers one of `wanted` (sorted), as a row
/// selection; None when the file has no page index (everything is read).
fn page_selection(
    metadata: &parquet::arrow::arrow_reader::ArrowReaderMetadata,
    wanted: &[&KeyValue],
) -> Option<RowSelection> {
    let pages = page_bounds(metadata)?;
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for page in pages.iter().filter(|page| page.may_hold_any(wanted)) {
        match ranges.last_mut() {
            Some(last) if last.end == page.rows.start => last.end = page.rows.end,
            _ => ranges.push(page.rows.clone()),
        }
    }
    let total = pages.last().map_or(0, |page| page.rows.end);
    Some(RowSelection::from_consecutive_ranges(
        ranges.into_iter(),
        total,
    ))
}

/// One data page of a key file: its rows (positions in the file) and key range.
#[derive(Debug, Clone)]
struct PageBounds {
    rows: Range<usize>,
    min: KeyValue,
    max: KeyValue,
}

impl PageBounds {
    /// Whether one of `wanted` (sorted) falls in the page's key range.
    fn may_hold_any(&self, wanted: &[&KeyValue]) -> bool {
        // The first wanted key not below the page's smallest: the page is needed if it is not
        // above its largest.
        let first = wanted.partition_point(|k| **k < self.min);
        wanted.get(first).is_some_and(|k| **k <= self.max)
    }
}

/// The key file's data pages from its page index, in file order; None when it has none.
fn page_bounds(
    metadata: &parquet::arrow::arrow_reader::ArrowReaderMetadata,
) -> Option<Vec<PageBounds>> {
    let parquet = metadata.metadata();
    let column_index = parquet.column_index()?;
    let offset_index = parquet.offset_index()?;
    let converter = StatisticsConverter::try_new(
        "key",
        metadata.schema(),
        parquet.file_metadata().schema_descr(),
    )
    .ok()?;
    let groups: Vec<usize> = (0..parquet.num_row_groups()).collect();
    let mins = converter
        .data_page_mins(column_index, offset_index, &groups)
        .ok()?;
    let maxes = converter
        .data_page_maxes(column_index, offset_index, &groups)
        .ok()?;
    let counts = converter
        .data_page_row_counts(offset_index, parquet.row_groups(), &groups)
        .ok()??;
    if mins.len() != maxes.len() || mins.len() != counts.len() {
        return None;
    }
    let mut pages = Vec::with_capacity(mins.len());
    let mut start = 0usize;
    for page in 0..mins.len() {
        let rows = counts.value(page) as usize;
        pages.push(PageBounds {
            rows: start..start + rows,
            min: bound(&mins, page)?,
            max: bound(&maxes, page)?,
        });
        start += rows;
    }
    Some(pages)
}

/// A key file opened for lookups one key at a time: its verified footer and the key range of
/// each data page, so that a lookup reads (or finds cached) the one page that can hold a key.
/// What a session keeps per key file; [`KeyPage`]s are what it keeps per page.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    opened: crate::checksum::OpenedPart,
    part_rows: u64,
    /// The data pages; one range over the whole file when it has no page index.
    pages: Vec<PageBounds>,
}

impl KeyFile {
    /// Opens and verifies the footer of the key file `keys_entry` of a part of `part_rows` rows
    /// in `table_dir`.
    pub fn open(
        table_dir: &Path,
        keys_entry: &PartKeys,
        part_rows: u64,
    ) -> Result<KeyFile, FormatError> {
        Self::open_listing(table_dir, keys_entry, part_rows, part_rows)
    }

    /// [`KeyFile::open`] of a file listing `listed_rows` of the part's rows (a secondary index
    /// lists only the rows holding a value: `crate::indexes`).
    pub fn open_listing(
        table_dir: &Path,
        keys_entry: &PartKeys,
        part_rows: u64,
        listed_rows: u64,
    ) -> Result<KeyFile, FormatError> {
        let path = Manifest::part_path(table_dir, &keys_entry.file);
        let opened = open_verified(&path, keys_entry.bytes, true, listed_rows)?;
        let pages = match page_bounds(&opened.metadata) {
            Some(pages) => pages,
            None => {
                let (Some(min), Some(max)) = (json_key(&keys_entry.min), json_key(&keys_entry.max))
                else {
                    return Err(FormatError::Damaged {
                        path,
                        message: "its manifest entry has no key range".into(),
                    });
                };
                vec![PageBounds {
                    rows: 0..listed_rows as usize,
                    min,
                    max,
                }]
            }
        };
        Ok(KeyFile {
            path,
            opened,
            part_rows,
            pages,
        })
    }

    /// How many data pages the file has.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// The pages whose key range covers `key`.
    pub fn pages_of(&self, key: &KeyValue) -> Vec<usize> {
        let wanted = [key];
        (0..self.pages.len())
            .filter(|&i| self.pages[i].may_hold_any(&wanted))
            .collect()
    }

    /// Rows certainly listed with `key`: those of the pages holding no other key. A lower
    /// bound, from the page index alone.
    pub fn rows_only_of(&self, key: &KeyValue) -> u64 {
        self.pages
            .iter()
            .filter(|page| page.min == *key && page.max == *key)
            .map(|page| page.rows.len() as u64)
            .sum()
    }

    /// Reads and verifies data page `page`.
    pub fn read_page(&self, page: usize) -> Result<KeyPage, FormatError> {
        let damaged = |message: String| FormatError::Damaged {
            path: self.path.clone(),
            message,
        };
        let bounds = self
            .pages
            .get(page)
            .ok_or_else(|| damaged(format!("it has no page {page}")))?;
        let total = self.pages.last().map_or(0, |p| p.rows.end);
        let selection =
            RowSelection::from_consecutive_ranges(std::iter::once(bounds.rows.clone()), total);
        let mut keys: Vec<ArrayRef> = Vec::new();
        let mut rows: Vec<ArrayRef> = Vec::new();
        let file = PartFile::open(&self.path, self.opened.checksums.clone())?;
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.opened.metadata.clone())
                .with_batch_size(bounds.rows.len().max(1))
                .with_row_selection(selection)
                .build()
                .map_err(|source| FormatError::Parquet {
                    path: self.path.clone(),
                    source,
                })?;
        for batch in reader {
            let batch = batch.map_err(|source| FormatError::Arrow {
                path: self.path.clone(),
                source,
            })?;
            keys.push(batch.column(0).clone());
            rows.push(batch.column(1).clone());
        }
        let concat = |arrays: &[ArrayRef]| {
            let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&refs).map_err(|source| FormatError::Arrow {
                path: self.path.clone(),
                source,
            })
        };
        let (keys, rows) = (concat(&keys)?, concat(&rows)?);
        if !matches!(keys.data_type(), DataType::Utf8 | DataType::Int64) {
            return Err(damaged(format!(
                "its key column is of type {}",
                keys.data_type()
            )));
        }
        let rows = rows
            .as_primitive_opt::<arrow::datatypes::UInt32Type>()
            .cloned()
            .ok_or_else(|| damaged(format!("its row column is of type {}", rows.data_type())))?;
        if let Some(bad) = rows
            .values()
            .iter()
            .find(|&&row| u64::from(row) >= self.part_rows)
        {
            return Err(damaged(format!(
                "it lists row {bad} of a part of {} rows",
                self.part_rows
            )));
        }
        Ok(KeyPage { keys, rows })
    }

    /// Bytes of memory the parsed footer takes (what a cache counts).
    pub fn memory_size(&self) -> usize {
        self.opened.metadata.metadata().memory_size()
            + self.pages.len() * std::mem::size_of::<PageBounds>()
    }
}

/// One decoded data page of a key file: keys in ascending order and their rows.
#[derive(Debug)]
pub struct KeyPage {
    /// `Utf8` or `Int64`.
    keys: ArrayRef,
    rows: UInt32Array,
}

impl KeyPage {
    /// The rows (part positions) the page lists for `key`, ascending.
    pub fn rows_of(&self, key: &KeyValue) -> Vec<u64> {
        // How the page's key at `i` orders against `key` (a key of the other type is never
        // listed: nothing equals it).
        let compare = |i: usize| -> Ordering {
            match self.keys.data_type() {
                DataType::Utf8 => compare_str(key, self.keys.as_string::<i32>().value(i)),
                _ => compare_int(key, self.keys.as_primitive::<Int64Type>().value(i)),
            }
            .reverse()
        };
        let (mut low, mut high) = (0, self.keys.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if compare(mid) == Ordering::Less {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        (low..self.keys.len())
            .take_while(|&i| compare(i) == Ordering::Equal)
            .map(|i| u64::from(self.rows.value(i)))
            .collect()
    }

    /// Bytes of memory the page takes (what a cache counts).
    pub fn memory_size(&self) -> usize {
        self.keys.get_array_memory_size() + self.rows.get_array_memory_size()
    }
}

fn bound(values: &ArrayRef, i: usize) -> Option<KeyValue> {
    if values.is_null(i) {
        return None;
    }
    match values.data_type() {
        DataType::Utf8 => Some(KeyValue::String(
            values.as_string::<i32>().value(i).to_owned(),
        )),
        DataType::Utf8View => Some(KeyValue::String(
            values.as_string_view().value(i).to_owned(),
        )),
        DataType::Int64 => Some(KeyValue::Integer(
            values.as_primitive::<Int64Type>().value(i),
        )),
        _ => None,
    }
}

/// Everything `strata check` verifies of a part's key file: its whole-file hash, every page
/// against its checksum file, and that it lists each row of the part once, sorted by key.
pub fn check_key_file(parts_dir: &Path, part: &PartEntry, keys: &PartKeys) -> Vec<String> {
    check_sorted_file(parts_dir, part, keys, part.rows)
}

/// [`check_key_file`] of a file that lists `listed_rows` distinct rows of the part (a key file
/// lists them all; a secondary index those holding a value).
pub(crate) fn check_sorted_file(
    parts_dir: &Path,
    part: &PartEntry,
    keys: &PartKeys,
    listed_rows: u64,
) -> Vec<String> {
    let path = parts_dir.join(&keys.file);
    let mut problems = Vec::new();
    if let Err(e) = verify_hash(&path, &keys.xxh64) {
        problems.push(e.to_string());
    }
    let opened = match open_verified(&path, keys.bytes, true, listed_rows) {
        Ok(opened) => opened,
        Err(e) => {
            problems.push(e.to_string());
            return problems;
        }
    };
    if let Some(sums) = &opened.checksums {
        match crate::held::StoredFile::open(&path) {
            Ok(file) => problems.extend(sums.verify_all(&file)),
            Err(e) => problems.push(FormatError::io(&path, e).to_string()),
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let damaged = |message: String| {
        FormatError::Damaged {
            path: path.clone(),
            message,
        }
        .to_string()
    };
    let rows = match read_all(&path, opened) {
        Ok(rows) => rows,
        Err(e) => return vec![e.to_string()],
    };
    let mut seen = vec![false; part.rows as usize];
    for window in rows.windows(2) {
        if window[0] > window[1] {
            return vec![damaged(format!(
                "it is not sorted: key {} at row {} comes after {} at row {}",
                window[1].0, window[1].1, window[0].0, window[0].1
            ))];
        }
    }
    for (_, row) in &rows {
        match seen.get_mut(*row as usize) {
            Some(slot) if !*slot => *slot = true,
            _ => {
                return vec![damaged(format!(
                    "it lists row {row} twice or past the part's end"
                ))];
            }
        }
    }
    problems
}

/// Every (key, row) of a key file, in file order.
fn read_all(
    path: &Path,
    opened: crate::checksum::OpenedPart,
) -> Result<Vec<(KeyValue, u32)>, FormatError> {
    let mut out = Vec::new();
    scan_key_file(path, opened, None, &mut |key, row| {
        out.push(match key {
            KeyRef::String(s) => (KeyValue::String(s.to_owned()), row),
            KeyRef::Integer(i) => (KeyValue::Integer(i), row),
        });
        Ok(())
    })?;
    Ok(out)
}

/// Where the key file of `part_file` of the table in `table_dir` is.
pub fn key_file_path(table_dir: &Path, part_file: &str) -> PathBuf {
    table_dir.join(PARTS_DIR).join(key_file(part_file))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::fs;

    fn parts_dir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let parts = dir.path().join(PARTS_DIR);
        fs::create_dir_all(&parts).unwrap();
        (dir, parts)
    }

    #[test]
    fn a_part_may_hold_the_keys_between_its_bounds_in_key_order() {
        use serde_json::json;
        let bounds = [
            json!("a"),
            json!("m"),
            json!("zz"),
            json!(-5),
            json!(0),
            json!(7),
            json!(1.5),
            json!(null),
        ];
        let keys = [
            KeyValue::String(String::new()),
            KeyValue::String("a".into()),
            KeyValue::String("b".into()),
            KeyValue::String("m".into()),
            KeyValue::String("zzz".into()),
            KeyValue::Integer(i64::MIN),
            KeyValue::Integer(-5),
            KeyValue::Integer(3),
            KeyValue::Integer(7),
            KeyValue::Integer(8),
        ];
        for min in &bounds {
            for max in &bounds {
                let part = PartKeys {
                    file: String::new(),
                    bytes: 0,
                    xxh64: String::new(),
                    min: min.clone(),
                    max: max.clone(),
                    digest: Derived::default(),
                };
                for key in &keys {
                    // KeyValue's own order over the bounds read as keys; unreadable: maybe.
                    let expected = match (json_key(min), json_key(max)) {
                        (Some(low), Some(high)) => low <= *key && *key <= high,
                        _ => true,
                    };
                    assert_eq!(
                        part.may_hold(key),
                        expected,
                        "{min} ..= {max} holds {key:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn finds_every_row_of_a_key_and_nothing_else() {
        let (dir, parts) = parts_dir();
        // 5,000 rows in part order: keys k0000..k2499, each twice (rows i and i + 2,500).
        let keys: Vec<String> = (0..5000).map(|i| format!("k{:04}", i % 2500)).collect();
        let array: ArrayRef = Arc::new(StringArray::from(keys.clone()));
        let entry = write_key_file(&parts, "p.parquet", &array).unwrap();
        assert_eq!(entry.min, Value::String("k0000".into()));
        assert_eq!(entry.max, Value::String("k2499".into()));
        let wanted = vec![
            KeyValue::String("k0007".into()),
            KeyValue::String("k1999".into()),
            KeyValue::String("missing".into()),
        ];
        let mut hits = find_keys(dir.path(), &entry, 5000, &wanted).unwrap();
        hits.sort_by_key(|h| h.row);
        assert_eq!(
            hits,
            vec![
                KeyHit { key: 0, row: 7 },
                KeyHit { key: 1, row: 1999 },
                KeyHit { key: 0, row: 2507 },
                KeyHit { key: 1, row: 4499 },
            ]
        );
        // Out of the part's range: nothing opened.
        let none = find_keys(dir.path(), &entry, 5000, &[KeyValue::String("z".into())]).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_small_key_file_carries_a_digest_that_rules_out_keys_it_does_not_hold() {
        let (dir, parts) = parts_dir();
        let even: Vec<i64> = (0..100).map(|i| i * 2).collect();
        let array: ArrayRef = Arc::new(Int64Array::from(even.clone()));
        let entry = write_key_file(&parts, "p.parquet", &array).unwrap();
        for key in &even {
            assert!(entry.may_hold(&KeyValue::Integer(*key)));
        }
        // Odd keys lie between the smallest and largest key: only the digest rules them out,
        // and a lookup then opens nothing.
        for key in (0..100).map(|i| i * 2 + 1) {
            assert!(!entry.may_hold(&KeyValue::Integer(key)), "{key}");
        }
        assert!(!entry.may_hold(&KeyValue::String("4".into())));
        let strings: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        let array: ArrayRef = Arc::new(StringArray::from(strings.clone()));
        let named = write_key_file(&parts, "q.parquet", &array).unwrap();
        assert!(named.may_hold(&KeyValue::String("s3".into())));
        assert!(!named.may_hold(&KeyValue::String("s35".into())));
        // Read back from a manifest, the entry has no digest: the bounds decide, as before, and
        // the entry is still the same entry.
        let read: PartKeys = serde_json::from_str(&serde_json::to_string(&entry).unwrap()).unwrap();
        assert_eq!(read, entry);
        assert!(read.may_hold(&KeyValue::Integer(3)));
        assert_eq!(
            find_keys(dir.path(), &read, 100, &[KeyValue::Integer(3)]).unwrap(),
            []
        );
        // A file of more keys than `DIGEST_KEYS` has none.
        let many: ArrayRef = Arc::new(Int64Array::from(
            (0..DIGEST_KEYS as i64 + 1)
                .map(|i| i * 2)
                .collect::<Vec<_>>(),
        ));
        let large = write_key_file(&parts, "r.parquet", &many).unwrap();
        assert!(large.may_hold(&KeyValue::Integer(3)));
    }

    #[test]
    fn integer_keys_and_pages_selected() {
        let (dir, parts) = parts_dir();
        let values: Vec<i64> = (0..10_000).map(|i| (i * 7919) % 10_000 - 5000).collect();
        let array: ArrayRef = Arc::new(Int64Array::from(values.clone()));
        let entry = write_key_file(&parts, "p.parquet", &array).unwrap();
        assert_eq!(entry.min, Value::from(-5000));
        let opened = open_verified(
            &key_file_path(dir.path(), "p.parquet"),
            entry.bytes,
            true,
            10_000,
        )
        .unwrap();
        let one = KeyValue::Integer(values[1234]);
        let selection = page_selection(&opened.metadata, &[&one]).unwrap();
        assert_eq!(selection.row_count(), KEY_PAGE_ROWS, "one page read");
        let hits = find_keys(dir.path(), &entry, 10_000, &[one]).unwrap();
        assert_eq!(hits, vec![KeyHit { key: 0, row: 1234 }]);
    }

    #[test]
    fn a_damaged_key_file_is_named() {
        let (dir, parts) = parts_dir();
        let array: ArrayRef = Arc::new(Int64Array::from((0..3000).collect::<Vec<i64>>()));
        let entry = write_key_file(&parts, "p.parquet", &array).unwrap();
        let path = key_file_path(dir.path(), "p.parquet");
        let mut bytes = fs::read(&path).unwrap();
        bytes[10] ^= 0xff;
        fs::write(&path, bytes).unwrap();
        let e = find_keys(dir.path(), &entry, 3000, &[KeyValue::Integer(5)]).unwrap_err();
        assert!(e.to_string().contains("p.parquet.keys"), "{e}");
    }

    #[test]
    fn check_verifies_a_key_file_and_names_damage() {
        let (dir, parts) = parts_dir();
        let array: ArrayRef = Arc::new(StringArray::from(vec!["b", "a", "c"]));
        let keys = write_key_file(&parts, "p.parquet", &array).unwrap();
        let part = PartEntry {
            file: "p.parquet".into(),
            rows: 3,
            bytes: 0,
            columns: Default::default(),
            remainder_paths: Default::default(),
            remainder_paths_truncated: false,
            sort_key_min: Default::default(),
            sort_key_max: Default::default(),
            full: false,
            key_runs: None,
            xxh64: None,
            deletes: None,
            keys: Some(keys.clone()),
            newest_write: None,
            text_index: None,
            indexes: Vec::new(),
        };
        assert!(check_key_file(&parts, &part, &keys).is_empty());
        let wrong_rows = PartEntry {
            rows: 4,
            ..part.clone()
        };
        assert!(!check_key_file(&parts, &wrong_rows, &keys).is_empty());
        let path = key_file_path(dir.path(), "p.parquet");
        let mut bytes = fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        fs::write(&path, bytes).unwrap();
        let problems = check_key_file(&parts, &part, &keys);
        assert!(problems.iter().any(|p| p.contains("XXH64")), "{problems:?}");
    }

    #[test]
    fn nulls_or_other_types_are_refused() {
        let (_dir, parts) = parts_dir();
        let nulls: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None]));
        assert!(write_key_file(&parts, "p.parquet", &nulls).is_err());
        let floats: ArrayRef = Arc::new(arrow::array::Float64Array::from(vec![1.0]));
        assert!(write_key_file(&parts, "p.parquet", &floats).is_err());
    }
}
