//! Text index files (`parts/<part>.text`, ADR 0019): for each indexed string column of a part and
//! each granule of its rows, a split-block bloom filter (Parquet's own `Sbbf`) of the tokens
//! (`strata_text::for_each_token`) of the granule's values.
//!
//! Layout, little-endian: `"STRATATX"`, `u32` version (1), `u32` granule rows, `u64` rows,
//! `u16` columns; per column: `u16` path length, the encoded path (UTF-8), `u32` granules, and per
//! granule `u32` length and that many bytes of `Sbbf::write` output (thrift header and bitset;
//! length 0: the granule has no token). The manifest entry carries the whole file's XXH64, which a
//! reader checks before it trusts a byte.
//!
//! Invariant: a column is indexed in a part only when every value of its path in that part is in
//! its typed string column (none in the remainder), so a granule whose filter lacks a token holds
//! no row with that token.

use std::collections::HashSet;
use std::path::Path;

use arrow::array::{Array, AsArray};
use parquet::bloom_filter::Sbbf;
use serde::{Deserialize, Serialize};

use crate::error::FormatError;
use crate::manifest::{PARTS_DIR, sync_dir};

const MAGIC: &[u8; 8] = b"STRATATX";
const VERSION: u32 = 1;
/// What a bloom filter may wrongly say "maybe" to, per token looked up.
const FALSE_POSITIVE_RATE: f64 = 0.01;
/// Suffix of a part's text index file.
pub const TEXT_INDEX_SUFFIX: &str = ".text";

/// A part's text index, as its manifest entry lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartTextIndex {
    /// File name inside `parts/`.
    pub file: String,
    pub bytes: u64,
    /// XXH64 (seed 0) of the file as 16 lowercase hex digits.
    pub xxh64: String,
    /// The encoded paths indexed in this part.
    pub columns: Vec<String>,
    pub granule_rows: u32,
}

/// The text index file name of a part.
pub fn text_index_file(part: &str) -> String {
    format!("{part}{TEXT_INDEX_SUFFIX}")
}

/// The part a text index file belongs to.
pub fn text_index_part(file: &str) -> Option<&str> {
    file.strip_suffix(TEXT_INDEX_SUFFIX)
}

/// Builds a part's text index while its rows are written, granule by granule: memory holds the
/// filters built so far (a few percent of the text) and one granule's distinct tokens per
/// column, never the part's text itself.
pub struct TextIndexBuilder {
    granule_rows: usize,
    columns: Vec<ColumnFilters>,
}

/// One indexed column's filters while its part is written.
struct ColumnFilters {
    path: String,
    /// Rows pushed so far.
    rows: u64,
    /// Sealed granules, each encoded as the file stores it (`u32` length, bytes).
    encoded: Vec<u8>,
    granules: u32,
    /// The tokens of the granule being filled, and its rows so far. Hashed with foldhash: each
    /// token of every line is looked up, and SipHash was 8 % of a full-text ingest.
    tokens: HashSet<String, foldhash::fast::RandomState>,
    rows_in_granule: usize,
}

impl ColumnFilters {
    /// Encodes the filter of the granule being filled and starts the next one.
    fn seal(&mut self) -> Result<(), String> {
        self.granules += 1;
        self.rows_in_granule = 0;
        if self.tokens.is_empty() {
            self.encoded.extend_from_slice(&0u32.to_le_bytes());
            return Ok(());
        }
        let mut filter = Sbbf::new_with_ndv_fpp(self.tokens.len() as u64, FALSE_POSITIVE_RATE)
            .map_err(|e| e.to_string())?;
        for token in self.tokens.drain() {
            filter.insert(token.as_bytes());
        }
        let mut encoded = Vec::new();
        filter.write(&mut encoded).map_err(|e| e.to_string())?;
        self.encoded
            .extend_from_slice(&(encoded.len() as u32).to_le_bytes());
        self.encoded.extend_from_slice(&encoded);
        Ok(())
    }
}

impl TextIndexBuilder {
    /// A builder for the columns at `paths` (encoded paths), in granules of `granule_rows`.
    pub fn new(paths: Vec<String>, granule_rows: usize) -> Self {
        TextIndexBuilder {
            granule_rows: granule_rows.max(1),
            columns: paths
                .into_iter()
                .map(|path| ColumnFilters {
                    path,
                    rows: 0,
                    encoded: Vec::new(),
                    granules: 0,
                    tokens: HashSet::default(),
                    rows_in_granule: 0,
                })
                .collect(),
        }
    }

    /// Adds the next rows of column `column` (its index in the paths the builder was made
    /// with): a string array, NULL where the row has no value. Errors say why, for the caller
    /// to name the part.
    pub fn push(&mut self, column: usize, values: &dyn Array) -> Result<(), String> {
        let granule_rows = self.granule_rows;
        let filters = self
            .columns
            .get_mut(column)
            .ok_or_else(|| format!("no text column {column}"))?;
        let strings = values
            .as_string_opt::<i32>()
            .ok_or_else(|| format!("text column {} is not a string column", filters.path))?;
        for row in 0..strings.len() {
            if strings.is_valid(row) {
                let tokens = &mut filters.tokens;
                strata_text::for_each_token(strings.value(row), |token| {
                    if !tokens.contains(token) {
                        tokens.insert(token.to_owned());
                    }
                });
            }
            filters.rows += 1;
            filters.rows_in_granule += 1;
            if filters.rows_in_granule == granule_rows {
                filters.seal()?;
            }
        }
        Ok(())
    }

    /// Writes the index of part `part_file` in `parts_dir`: through a temporary file, fsynced,
    /// renamed. None when no column is indexed. Every column must have had the same rows pushed.
    pub fn finish(
        mut self,
        parts_dir: &Path,
        part_file: &str,
    ) -> Result<Option<PartTextIndex>, FormatError> {
        let damaged = |message: String| FormatError::Damaged {
            path: parts_dir.join(part_file),
            message,
        };
        let Some(rows) = self.columns.first().map(|c| c.rows) else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(
            64 + self
                .columns
                .iter()
                .map(|c| c.encoded.len() + c.path.len())
                .sum::<usize>(),
        );
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(self.granule_rows as u32).to_le_bytes());
        bytes.extend_from_slice(&rows.to_le_bytes());
        bytes.extend_from_slice(&(self.columns.len() as u16).to_le_bytes());
        for filters in &mut self.columns {
            if filters.rows != rows {
                return Err(damaged(format!(
                    "text column {} has {} rows, the part {rows}",
                    filters.path, filters.rows
                )));
            }
            if filters.rows_in_granule > 0 {
                filters.seal().map_err(damaged)?;
            }
            bytes.extend_from_slice(&(filters.path.len() as u16).to_le_bytes());
            bytes.extend_from_slice(filters.path.as_bytes());
            bytes.extend_from_slice(&filters.granules.to_le_bytes());
            bytes.extend_from_slice(&filters.encoded);
        }
        let file = text_index_file(part_file);
        let final_path = parts_dir.join(&file);
        crate::held::write_file(&final_path, &bytes)?;
        sync_dir(parts_dir)?;
        Ok(Some(PartTextIndex {
            file,
            bytes: bytes.len() as u64,
            xxh64: format!("{:016x}", twox_hash::XxHash64::oneshot(0, &bytes)),
            columns: self.columns.iter().map(|c| c.path.clone()).collect(),
            granule_rows: self.granule_rows as u32,
        }))
    }
}

/// Whether a token may be in a granule (false: certainly not).
pub type TokenTest<'a> = dyn Fn(&str) -> bool + 'a;

/// A part's text index, read and verified.
#[derive(Debug)]
pub struct TextIndex {
    granule_rows: usize,
    rows: u64,
    /// Per column, per granule: its filter (None: no token in the granule).
    columns: Vec<(String, Vec<Option<Sbbf>>)>,
}

impl TextIndex {
    /// Reads the text index `entry` of a part of the table at `table_dir`, checking its XXH64.
    pub fn read(table_dir: &Path, entry: &PartTextIndex) -> Result<TextIndex, FormatError> {
        let path = table_dir.join(PARTS_DIR).join(&entry.file);
        let bytes = crate::held::read(&path).map_err(|e| FormatError::io(&path, e))?;
        let damaged = |message: String| FormatError::Damaged {
            path: path.clone(),
            message,
        };
        let found = format!("{:016x}", twox_hash::XxHash64::oneshot(0, &bytes));
        if found != entry.xxh64 {
            return Err(damaged(format!(
                "its XXH64 is {found}, the manifest says {}",
                entry.xxh64
            )));
        }
        let mut reader = Bytes {
            bytes: &bytes,
            at: 0,
        };
        let short = || damaged("it ends early".to_owned());
        if reader.take(8).ok_or_else(short)? != MAGIC {
            return Err(damaged("it is not a text index".to_owned()));
        }
        let version = reader.u32().ok_or_else(short)?;
        if version != VERSION {
            return Err(damaged(format!("unknown text index version {version}")));
        }
        let granule_rows = reader.u32().ok_or_else(short)? as usize;
        let rows = reader.u64().ok_or_else(short)?;
        let column_count = reader.u16().ok_or_else(short)?;
        let mut columns = Vec::with_capacity(column_count as usize);
        for _ in 0..column_count {
            let length = reader.u16().ok_or_else(short)? as usize;
            let name = std::str::from_utf8(reader.take(length).ok_or_else(short)?)
                .map_err(|e| damaged(e.to_string()))?
                .to_owned();
            let granules = reader.u32().ok_or_else(short)? as usize;
            let mut filters = Vec::with_capacity(granules);
            for _ in 0..granules {
                let length = reader.u32().ok_or_else(short)? as usize;
                if length == 0 {
                    filters.push(None);
                    continue;
                }
                let encoded = reader.take(length).ok_or_else(short)?;
                filters.push(Some(
                    Sbbf::from_bytes(encoded).map_err(|e| damaged(e.to_string()))?,
                ));
            }
            columns.push((name, filters));
        }
        if reader.at != bytes.len() {
            return Err(damaged("it has bytes after its last filter".to_owned()));
        }
        Ok(TextIndex {
            granule_rows,
            rows,
            columns,
        })
    }

    pub fn granule_rows(&self) -> usize {
        self.granule_rows
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// For each granule of `column` (an encoded path): whether `may_match` says it may hold a
    /// match, given a test of whether a token may be in the granule. None: the column is not
    /// indexed in this part.
    pub fn granules_that_may_match(
        &self,
        column: &str,
        may_match: &dyn Fn(&TokenTest) -> bool,
    ) -> Option<Vec<bool>> {
        let (_, filters) = self.columns.iter().find(|(name, _)| name == column)?;
        Some(
            filters
                .iter()
                .map(|filter| match filter {
                    Some(filter) => may_match(&|token| filter.check(token.as_bytes())),
                    None => may_match(&|_| false),
                })
                .collect(),
        )
    }
}

/// A cursor over a file's bytes.
struct Bytes<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(slice)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Checks a part's text index file against its manifest entry (for `strata check`).
pub fn check_text_index(table_dir: &Path, entry: &PartTextIndex) -> Vec<String> {
    match TextIndex::read(table_dir, entry) {
        Ok(_) => Vec::new(),
        Err(e) => vec![format!("text index {}: {e}", entry.file)],
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, StringArray};
    use strata_text::TextQuery;

    use super::*;

    /// The index of whole columns (encoded path, values), each pushed at once.
    fn write_text_index(
        parts_dir: &Path,
        part_file: &str,
        columns: &[(String, ArrayRef)],
        granule_rows: usize,
    ) -> Result<Option<PartTextIndex>, FormatError> {
        let paths = columns.iter().map(|(path, _)| path.clone()).collect();
        let mut builder = TextIndexBuilder::new(paths, granule_rows);
        for (column, (_, values)) in columns.iter().enumerate() {
            builder.push(column, values.as_ref()).unwrap();
        }
        builder.finish(parts_dir, part_file)
    }

    #[test]
    fn granules_without_a_token_are_ruled_out() {
        let dir = tempfile::tempdir().unwrap();
        let parts = dir.path().join(PARTS_DIR);
        fs::create_dir_all(&parts).unwrap();
        let values: Vec<Option<String>> = (0..10)
            .map(|i| match i {
                3 => None,
                7 => Some("ERROR connection reset by peer".to_owned()),
                i => Some(format!("GET /page/{i} 200")),
            })
            .collect();
        let column: ArrayRef = Arc::new(StringArray::from(values));
        let entry = write_text_index(&parts, "p.parquet", &[("message".into(), column)], 4)
            .unwrap()
            .unwrap();
        assert_eq!(entry.file, "p.parquet.text");
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        assert_eq!((index.rows(), index.granule_rows()), (10, 4));
        let kept = |query: &str| {
            let query = TextQuery::parse(query).unwrap();
            index
                .granules_that_may_match("message", &|contains| query.may_match(contains))
                .unwrap()
        };
        assert_eq!(kept(r#""connection reset""#), [false, true, false]);
        assert_eq!(kept("get"), [true, true, true]);
        assert_eq!(kept("page OR error"), [true, true, true]);
        assert_eq!(kept("NOT get"), [true, true, true]);
        assert!(index.granules_that_may_match("other", &|_| true).is_none());

        // A flipped byte is found before anything is trusted.
        let path = parts.join(&entry.file);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, bytes).unwrap();
        assert!(
            TextIndex::read(dir.path(), &entry)
                .unwrap_err()
                .to_string()
                .contains("XXH64")
        );
    }

    #[test]
    fn rows_pushed_in_any_batches_give_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<Option<String>> = (0..23)
            .map(|i| (i % 5 != 0).then(|| format!("user{} GET /a/{} 200", i % 4, i % 3)))
            .collect();
        let whole: ArrayRef = Arc::new(StringArray::from(values.clone()));
        let other: ArrayRef = Arc::new(StringArray::from(
            values.iter().rev().cloned().collect::<Vec<_>>(),
        ));
        let at_once = dir.path().join("once");
        fs::create_dir_all(&at_once).unwrap();
        let columns = [("a".to_owned(), whole), ("b".to_owned(), other.clone())];
        let entry = write_text_index(&at_once, "p.parquet", &columns, 4)
            .unwrap()
            .unwrap();
        // Batches that end inside a granule, on its boundary, and past several.
        let batched = dir.path().join("batched");
        fs::create_dir_all(&batched).unwrap();
        let mut builder = TextIndexBuilder::new(vec!["a".into(), "b".into()], 4);
        for (start, len) in [(0, 3), (3, 1), (4, 9), (13, 10)] {
            let slice: ArrayRef = Arc::new(StringArray::from(values[start..start + len].to_vec()));
            builder.push(0, slice.as_ref()).unwrap();
        }
        builder.push(1, other.as_ref()).unwrap();
        let batched_entry = builder.finish(&batched, "p.parquet").unwrap().unwrap();
        assert_eq!(batched_entry, entry);
        assert_eq!(
            fs::read(batched.join(&entry.file)).unwrap(),
            fs::read(at_once.join(&entry.file)).unwrap()
        );
        // Columns of different lengths are refused, naming the column.
        let mut builder = TextIndexBuilder::new(vec!["a".into(), "b".into()], 4);
        builder.push(0, other.as_ref()).unwrap();
        let error = builder
            .finish(&batched, "q.parquet")
            .unwrap_err()
            .to_string();
        assert!(error.contains("text column b has 0 rows"), "{error}");
    }
}
