//! Text index files (`parts/<part>.text`, ADR 0019): for each indexed string column of a part and
//! each granule of its rows, a split-block bloom filter (Parquet's own `Sbbf`) of the tokens
//! (`strata_text::for_each_token`) of the granule's values.
//!
//! Layout, little-endian: `"STRATATX"`, `u32` version (1; 2 and 3 when postings follow the
//! filters; 4 when postings follow without filters), `u32` granule rows, `u64` rows, `u16`
//! columns; per column: `u16` path length, the encoded path (UTF-8), `u32` granules (0 in a
//! version-4 file), and per granule `u32` length and that many bytes of `Sbbf::write` output
//! (thrift header and bitset; length 0: the granule has no token). The manifest entry carries
//! the whole file's XXH64, which a reader checks before it trusts a byte of a version-1 file. A
//! file of version 2 to 4 continues with the postings of every column ([`postings`]); its
//! manifest entry also carries the XXH64 of the bytes before them and of the postings
//! dictionary, so that a query reads and checks those and only the bitmaps it needs. Since
//! version 4 a part with postings has no filters: its postings decide every search of its
//! columns, so the filters were never read.
//!
//! Invariant: a column is indexed in a part only when every value of its path in that part is in
//! its typed string column (none in the remainder), so a granule whose filter lacks a token holds
//! no row with that token. A keyword column (ADR 0025) is listed only when every value of its
//! path is in its typed string or integer column (the remainder at most `null`), so its postings
//! and the filters of its rare values hold every row with a value.

mod bitmap_cache;
mod postings;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arrow::array::{Array, AsArray};
use parquet::bloom_filter::Sbbf;
use serde::{Deserialize, Serialize};

use crate::error::FormatError;
use crate::held::StoredFile;
use crate::manifest::{PARTS_DIR, sync_dir};
pub use postings::{Candidates, Postings, PostingsSection, ValueRows};
use postings::{DictionaryLayout, PostingsBuilder, hex, write_postings};

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
    /// Where the postings are, when the table keeps them (`text_postings`) or has keyword
    /// columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postings: Option<PostingsSection>,
    /// The encoded paths whose whole values have postings in this part (keyword columns, ADR
    /// 0025): listed in the file after `columns`, never searched by `matches()`. Absent in
    /// entries written before keyword columns existed, and where there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyword_columns: Vec<String>,
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
    /// How the postings dictionary is laid out (tests write the older layout too).
    layout: DictionaryLayout,
}

/// One indexed column's filters while its part is written.
struct ColumnFilters {
    path: String,
    /// Whether the file keeps bloom filters: not beside postings (file version 4).
    keeps_filters: bool,
    /// Rows pushed so far.
    rows: u64,
    /// Sealed granules, each encoded as the file stores it (`u32` length, bytes).
    encoded: Vec<u8>,
    granules: u32,
    /// The distinct tokens of the granule being filled.
    tokens: GranuleTokens,
    rows_in_granule: usize,
    /// Every token's rows, when the table keeps postings; each whole value's rows in a keyword
    /// column.
    postings: Option<PostingsBuilder>,
    /// Whether this is a keyword column: its terms are whole values, strings or integers, it
    /// has postings, and filters only of its rare values ([`KEYWORD_LISTED_ROWS`]). One whose
    /// postings were dropped (a value too long for them) is left out of the file.
    keyword: bool,
}

/// Values of a keyword column held by fewer rows of a part than this are kept in its bloom
/// filters, not its postings: a value's bitmap and dictionary entry cost ~60 bytes whatever its
/// rows, a filter ~1.2 bytes per granule holding it, and a lookup of such a value reads at most
/// this many granules. (Of the log benchmark's 1.1M distinct paths in 10M lines, 1.1M are in
/// fewer than 32 rows, 1.4 on average; they were 80 of the keyword postings' 119 MB.)
pub const KEYWORD_LISTED_ROWS: u64 = 16;

impl ColumnFilters {
    /// Whether the file lists this column.
    fn written(&self) -> bool {
        !self.keyword || self.postings.is_some()
    }

    /// Moves the values of a keyword column held by fewer than [`KEYWORD_LISTED_ROWS`] rows
    /// from its postings to a bloom filter per granule of `granule_rows` (none: every value is
    /// listed).
    fn seal_keyword(&mut self, granule_rows: usize) -> Result<(), String> {
        let Some(postings) = &mut self.postings else {
            return Ok(());
        };
        let rare = postings.take_rare(KEYWORD_LISTED_ROWS)?;
        if rare.is_empty() {
            return Ok(());
        }
        let granules = self.rows.div_ceil(granule_rows as u64) as usize;
        let mut per_granule: Vec<Vec<&str>> = vec![Vec::new(); granules];
        for (value, rows) in &rare {
            let mut last = None;
            for row in rows {
                let granule = *row as usize / granule_rows;
                if last != Some(granule)
                    && let Some(values) = per_granule.get_mut(granule)
                {
                    values.push(value);
                }
                last = Some(granule);
            }
        }
        self.keeps_filters = true;
        for values in per_granule {
            for value in values {
                self.tokens.insert(value);
            }
            self.seal()?;
        }
        Ok(())
    }

    /// Encodes the filter of the granule being filled and starts the next one.
    fn seal(&mut self) -> Result<(), String> {
        self.rows_in_granule = 0;
        if !self.keeps_filters {
            return Ok(());
        }
        self.granules += 1;
        if self.tokens.is_empty() {
            self.encoded.extend_from_slice(&0u32.to_le_bytes());
            return Ok(());
        }
        let mut filter = Sbbf::new_with_ndv_fpp(self.tokens.len() as u64, FALSE_POSITIVE_RATE)
            .map_err(|e| e.to_string())?;
        for token in self.tokens.iter() {
            filter.insert(token);
        }
        self.tokens.clear();
        let mut encoded = Vec::new();
        filter.write(&mut encoded).map_err(|e| e.to_string())?;
        self.encoded
            .extend_from_slice(&(encoded.len() as u32).to_le_bytes());
        self.encoded.extend_from_slice(&encoded);
        Ok(())
    }
}

/// The distinct tokens of one granule, told apart by their XXH64 (seed 0) — the hash the
/// split-block bloom filter itself takes of a token, so tokens of one hash would set the same
/// bits anyway and keeping one of them loses nothing. Each token of every line is looked up
/// here: a set of hashes spares comparing and allocating strings (a set of `String`s was 12 %
/// of a full-text ingest), and the distinct tokens' bytes lie in one buffer.
#[derive(Default)]
struct GranuleTokens {
    hashes: HashSet<u64, foldhash::fast::RandomState>,
    bytes: Vec<u8>,
    /// Where each token ends in `bytes`.
    ends: Vec<usize>,
}

impl GranuleTokens {
    fn insert(&mut self, token: &str) {
        if self
            .hashes
            .insert(twox_hash::XxHash64::oneshot(0, token.as_bytes()))
        {
            self.bytes.extend_from_slice(token.as_bytes());
            self.ends.push(self.bytes.len());
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .filter_map(|(start, end)| self.bytes.get(start..end))
    }

    fn clear(&mut self) {
        self.hashes.clear();
        self.bytes.clear();
        self.ends.clear();
    }
}

impl TextIndexBuilder {
    /// A builder for the text columns at `paths` (encoded paths), in granules of `granule_rows`,
    /// with every token's rows too when `postings`, and for the keyword columns at
    /// `keyword_paths` (each whole value's rows; the text columns are pushed first).
    pub fn new(
        paths: Vec<String>,
        keyword_paths: Vec<String>,
        granule_rows: usize,
        postings: bool,
    ) -> Self {
        let column = |path, keyword: bool| {
            let postings = postings || keyword;
            ColumnFilters {
                path,
                keeps_filters: !keyword
                    && (!postings || DictionaryLayout::default().keeps_filters()),
                rows: 0,
                encoded: Vec::new(),
                granules: 0,
                tokens: GranuleTokens::default(),
                rows_in_granule: 0,
                postings: postings.then(PostingsBuilder::default),
                keyword,
            }
        };
        let text = paths.into_iter().map(|path| column(path, false));
        let keywords = keyword_paths.into_iter().map(|path| column(path, true));
        TextIndexBuilder {
            granule_rows: granule_rows.max(1),
            columns: text.chain(keywords).collect(),
            layout: DictionaryLayout::default(),
        }
    }

    #[cfg(test)]
    fn with_layout(mut self, layout: DictionaryLayout) -> Self {
        for column in &mut self.columns {
            column.keeps_filters =
                !column.keyword && (column.postings.is_none() || layout.keeps_filters());
        }
        TextIndexBuilder { layout, ..self }
    }

    /// Adds the next rows of column `column` (its index in the text paths the builder was made
    /// with, then in its keyword paths): a string array, NULL where the row has no value, or for
    /// a keyword column an integer array too. Errors say why, for the caller to name the part.
    pub fn push(&mut self, column: usize, values: &dyn Array) -> Result<(), String> {
        let granule_rows = self.granule_rows;
        let filters = self
            .columns
            .get_mut(column)
            .ok_or_else(|| format!("no text column {column}"))?;
        if filters.keyword {
            let first_row = u32::try_from(filters.rows).map_err(|_| {
                format!(
                    "keyword column {}: more than 2^32 rows in one part",
                    filters.path
                )
            })?;
            filters.rows += values.len() as u64;
            // A value too long for a keyword: the part does not list the column (below).
            if let Some(postings) = &mut filters.postings
                && !postings
                    .add_whole_values(values, first_row)
                    .map_err(|e| format!("keyword column {}: {e}", filters.path))?
            {
                filters.postings = None;
            }
            return Ok(());
        }
        let strings = values
            .as_string_opt::<i32>()
            .ok_or_else(|| format!("text column {} is not a string column", filters.path))?;
        if let Some(postings) = &mut filters.postings
            && !filters.keeps_filters
        {
            let first_row = u32::try_from(filters.rows).map_err(|_| {
                format!(
                    "text column {}: more than 2^32 rows in one part",
                    filters.path
                )
            })?;
            postings
                .add_values(strings, first_row)
                .map_err(|e| format!("text column {}: {e}", filters.path))?;
            filters.rows += strings.len() as u64;
            return Ok(());
        }
        for row in 0..strings.len() {
            if strings.is_valid(row) {
                let tokens = &mut filters.tokens;
                match &mut filters.postings {
                    None => strata_text::for_each_token(strings.value(row), |token| {
                        tokens.insert(token)
                    }),
                    Some(postings) => {
                        let part_row = u32::try_from(filters.rows).map_err(|_| {
                            format!(
                                "text column {}: more than 2^32 rows in one part",
                                filters.path
                            )
                        })?;
                        postings.add_row(part_row)?;
                        let granule_start = part_row - filters.rows_in_granule as u32;
                        let mut failed = None;
                        strata_text::for_each_token(strings.value(row), |token| {
                            match postings.add_token(part_row, token, granule_start) {
                                Ok(true) => tokens.insert(token),
                                Ok(false) => {}
                                Err(e) => failed = Some(e),
                            }
                        });
                        if let Some(e) = failed {
                            return Err(e);
                        }
                    }
                }
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
        self.columns.retain(ColumnFilters::written);
        let Some(rows) = self.columns.first().map(|c| c.rows) else {
            return Ok(None);
        };
        for column in self.columns.iter_mut().filter(|c| c.keyword) {
            column.seal_keyword(self.granule_rows).map_err(damaged)?;
        }
        let mut bytes = Vec::with_capacity(
            64 + self
                .columns
                .iter()
                .map(|c| c.encoded.len() + c.path.len())
                .sum::<usize>(),
        );
        let keeps_postings = self.columns.iter().any(|c| c.postings.is_some());
        // Text columns without postings beside keyword columns keep their filters, which
        // then precede the postings.
        if let DictionaryLayout::Blocks(tokens) = self.layout
            && self.columns.iter().any(|c| c.keeps_filters)
        {
            self.layout = DictionaryLayout::BlocksAfterFilters(tokens);
        }
        bytes.extend_from_slice(MAGIC);
        let version = match keeps_postings {
            true => self.layout.file_version(),
            false => VERSION,
        };
        bytes.extend_from_slice(&version.to_le_bytes());
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
        let postings = match keeps_postings {
            true => {
                let columns = self
                    .columns
                    .iter_mut()
                    .filter_map(|c| Some((c.path.clone(), c.postings.take()?)))
                    .collect();
                Some(write_postings(&mut bytes, columns, self.layout).map_err(damaged)?)
            }
            false => None,
        };
        let file = text_index_file(part_file);
        let final_path = parts_dir.join(&file);
        crate::held::write_file(&final_path, &bytes)?;
        sync_dir(parts_dir)?;
        Ok(Some(PartTextIndex {
            file,
            bytes: bytes.len() as u64,
            xxh64: hex(twox_hash::XxHash64::oneshot(0, &bytes)),
            columns: self.paths(false),
            granule_rows: self.granule_rows as u32,
            postings,
            keyword_columns: self.paths(true),
        }))
    }

    /// The paths of the text columns (`keyword` false) or of the keyword columns.
    fn paths(&self, keyword: bool) -> Vec<String> {
        self.columns
            .iter()
            .filter(|c| c.keyword == keyword)
            .map(|c| c.path.clone())
            .collect()
    }
}

/// Whether a token may be in a granule (false: certainly not).
pub type TokenTest<'a> = dyn Fn(&str) -> bool + 'a;

/// A part's text index, read and verified.
#[derive(Debug)]
pub struct TextIndex {
    granule_rows: usize,
    /// The filters: read with the index from a version-1 file, else when first asked for (a
    /// query the postings decide never reads them).
    filters: OnceLock<Filters>,
    /// Where the filters of a file with postings are, to read them later.
    file: PathBuf,
    section: Option<PostingsSection>,
    /// The postings dictionary, when the part keeps postings.
    postings: Option<Postings>,
}

#[derive(Debug)]
struct Filters {
    /// Bytes of the file they were read from.
    bytes: usize,
    rows: u64,
    /// Per column, per granule: its filter (None: no token in the granule).
    columns: Vec<(String, Vec<Option<Sbbf>>)>,
}

impl TextIndex {
    /// Reads the text index `entry` of a part of the table at `table_dir`, checking its XXH64;
    /// with postings, reads and checks their dictionary only (filters and bitmaps are read and
    /// checked when a query needs them).
    pub fn read(table_dir: &Path, entry: &PartTextIndex) -> Result<TextIndex, FormatError> {
        let path = table_dir.join(PARTS_DIR).join(&entry.file);
        if entry.granule_rows == 0 {
            return Err(FormatError::Damaged {
                path,
                message: "its manifest entry gives granules of 0 rows".to_owned(),
            });
        }
        let index = TextIndex {
            granule_rows: entry.granule_rows as usize,
            filters: OnceLock::new(),
            file: path.clone(),
            section: entry.postings.clone(),
            postings: None,
        };
        match &entry.postings {
            None => {
                let bytes = crate::held::read(&path).map_err(|e| FormatError::io(&path, e))?;
                let found = hex(twox_hash::XxHash64::oneshot(0, &bytes));
                if found != entry.xxh64 {
                    return Err(FormatError::Damaged {
                        path,
                        message: format!("its XXH64 is {found}, the manifest says {}", entry.xxh64),
                    });
                }
                let filters = index.parse_filters(&bytes, VERSION)?;
                let _ = index.filters.set(filters);
                Ok(index)
            }
            Some(section) => {
                let stored = StoredFile::open(&path).map_err(|e| FormatError::io(&path, e))?;
                let postings = Postings::read(&path, &stored, section)?;
                Ok(TextIndex {
                    postings: Some(postings),
                    ..index
                })
            }
        }
    }

    /// The filters, read and checked on first use from a file with postings.
    fn filters(&self) -> Result<&Filters, FormatError> {
        if let Some(filters) = self.filters.get() {
            return Ok(filters);
        }
        let path = &self.file;
        let Some(section) = &self.section else {
            return Err(FormatError::Damaged {
                path: path.clone(),
                message: "its filters were not read".to_owned(),
            });
        };
        let bytes = StoredFile::open(path)
            .and_then(|stored| stored.read_range(0..section.filter_bytes))
            .map_err(|e| FormatError::io(path, e))?;
        let found = hex(twox_hash::XxHash64::oneshot(0, &bytes));
        if found != section.filter_xxh64 {
            return Err(FormatError::Damaged {
                path: path.clone(),
                message: format!(
                    "its filters' XXH64 is {found}, the manifest says {}",
                    section.filter_xxh64
                ),
            });
        }
        let filters = self.parse_filters(&bytes, section.file_version())?;
        // Another thread may have read them meanwhile: the same bytes, either will do.
        let _ = self.filters.set(filters);
        self.filters.get().ok_or_else(|| FormatError::Damaged {
            path: path.clone(),
            message: "its filters were not kept".to_owned(),
        })
    }

    /// The filters of a file of `version` from its checked `bytes`.
    fn parse_filters(&self, bytes: &[u8], version: u32) -> Result<Filters, FormatError> {
        let damaged = |message: String| FormatError::Damaged {
            path: self.file.clone(),
            message,
        };
        let mut reader = Bytes { bytes, at: 0 };
        let short = || damaged("it ends early".to_owned());
        if reader.take(8).ok_or_else(short)? != MAGIC {
            return Err(damaged("it is not a text index".to_owned()));
        }
        let found = reader.u32().ok_or_else(short)?;
        if found != version {
            return Err(damaged(format!(
                "text index version {found}, where its manifest entry implies {version}"
            )));
        }
        let granule_rows = reader.u32().ok_or_else(short)? as usize;
        if granule_rows != self.granule_rows {
            return Err(damaged(format!(
                "granules of {granule_rows} rows, the manifest says {}",
                self.granule_rows
            )));
        }
        let rows = reader.u64().ok_or_else(short)?;
        let column_count = reader.u16().ok_or_else(short)?;
        let mut columns = Vec::with_capacity(column_count as usize);
        for _ in 0..column_count {
            let name = reader.string().ok_or_else(short)?;
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
        Ok(Filters {
            bytes: bytes.len(),
            rows,
            columns,
        })
    }

    /// The part's postings, when it keeps them.
    pub fn postings(&self) -> Option<&Postings> {
        self.postings.as_ref()
    }

    /// Bytes this index holds in memory (about): its filters (once read) and postings
    /// dictionary.
    pub fn memory_bytes(&self) -> usize {
        let filters = match &self.section {
            Some(section) => section.filter_bytes as usize,
            None => self.filters.get().map_or(0, |f| f.bytes),
        };
        filters + self.postings.as_ref().map_or(0, Postings::memory_bytes)
    }

    pub fn granule_rows(&self) -> usize {
        self.granule_rows
    }

    /// Rows of the part, as the filters record them.
    pub fn rows(&self) -> Result<u64, FormatError> {
        self.filters().map(|f| f.rows)
    }

    /// For each granule of `column` (an encoded path): whether `may_match` says it may hold a
    /// match, given a test of whether a token may be in the granule. None: the column is not
    /// indexed in this part, or the part keeps postings without filters (which decide instead).
    pub fn granules_that_may_match(
        &self,
        column: &str,
        may_match: &dyn Fn(&TokenTest) -> bool,
    ) -> Result<Option<Vec<bool>>, FormatError> {
        if self.section.as_ref().is_some_and(|s| s.filters_omitted) {
            return Ok(None);
        }
        let Some((_, filters)) = self
            .filters()?
            .columns
            .iter()
            .find(|(name, _)| name == column)
        else {
            return Ok(None);
        };
        Ok(Some(
            filters
                .iter()
                .map(|filter| match filter {
                    Some(filter) => may_match(&|token| filter.check(token.as_bytes())),
                    None => may_match(&|_| false),
                })
                .collect(),
        ))
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

    /// A `u16` length and that many bytes of UTF-8.
    fn string(&mut self) -> Option<String> {
        let length = self.u16()? as usize;
        String::from_utf8(self.take(length)?.to_vec()).ok()
    }
}

/// Checks a part's text index file against its manifest entry (for `strata check`): the whole
/// file's XXH64, then its structure.
pub fn check_text_index(table_dir: &Path, entry: &PartTextIndex) -> Vec<String> {
    let path = table_dir.join(PARTS_DIR).join(&entry.file);
    let whole = crate::held::read(&path).map(|bytes| hex(twox_hash::XxHash64::oneshot(0, &bytes)));
    let problem = match whole {
        Err(e) => Some(format!("cannot be read: {e}")),
        Ok(found) if found != entry.xxh64 => Some(format!(
            "its XXH64 is {found}, the manifest says {}",
            entry.xxh64
        )),
        // `rows` parses the filters, which a file with postings reads only when asked.
        Ok(_) => TextIndex::read(table_dir, entry)
            .and_then(|index| index.rows())
            .err()
            .map(|e| e.to_string()),
    };
    problem
        .map(|problem| vec![format!("text index {}: {problem}", entry.file)])
        .unwrap_or_default()
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
        let mut builder = TextIndexBuilder::new(paths, Vec::new(), granule_rows, false);
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
        assert_eq!((index.rows().unwrap(), index.granule_rows()), (10, 4));
        let kept = |query: &str| {
            let query = TextQuery::parse(query).unwrap();
            index
                .granules_that_may_match("message", &|contains| query.may_match(contains))
                .unwrap()
                .unwrap()
        };
        assert_eq!(kept(r#""connection reset""#), [false, true, false]);
        assert_eq!(kept("get"), [true, true, true]);
        assert_eq!(kept("page OR error"), [true, true, true]);
        assert_eq!(kept("NOT get"), [true, true, true]);
        assert!(
            index
                .granules_that_may_match("other", &|_| true)
                .unwrap()
                .is_none()
        );

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
        let mut builder = TextIndexBuilder::new(vec!["a".into(), "b".into()], Vec::new(), 4, false);
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
        let mut builder = TextIndexBuilder::new(vec!["a".into(), "b".into()], Vec::new(), 4, false);
        builder.push(0, other.as_ref()).unwrap();
        let error = builder
            .finish(&batched, "q.parquet")
            .unwrap_err()
            .to_string();
        assert!(error.contains("text column b has 0 rows"), "{error}");
    }

    #[test]
    fn postings_filled_on_several_threads_are_those_filled_on_one() {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<Option<String>> = (0..40_000)
            .map(|i| {
                (i % 7 != 3).then(|| format!("GET /item/{} {} user{} t{i}", i % 97, i % 5, i % 13))
            })
            .collect();
        let column: ArrayRef = Arc::new(StringArray::from(values));
        let build = |name: &str, batch: usize| {
            let mut builder = TextIndexBuilder::new(vec!["message".into()], Vec::new(), 8192, true);
            let mut start = 0;
            while start < column.len() {
                let len = batch.min(column.len() - start);
                builder.push(0, column.slice(start, len).as_ref()).unwrap();
                start += len;
            }
            let parts = dir.path().join(name);
            fs::create_dir_all(&parts).unwrap();
            let entry = builder.finish(&parts, "p.parquet").unwrap().unwrap();
            fs::read(parts.join(entry.file)).unwrap()
        };
        // One batch of 40,000 rows is filled by shard threads, batches of 1,000 on this one.
        assert!(column.len() >= postings::PARALLEL_ROWS && 1_000 < postings::PARALLEL_ROWS);
        assert_eq!(build("parallel", column.len()), build("serial", 1_000));
    }

    #[test]
    fn keyword_columns_list_whole_values_beside_filtered_text() {
        let dir = tempfile::tempdir().unwrap();
        let parts = dir.path().join(PARTS_DIR);
        fs::create_dir_all(&parts).unwrap();
        let rows = 200;
        let messages: ArrayRef = Arc::new(StringArray::from(
            (0..rows)
                .map(|i| Some(format!("line {i} of text")))
                .collect::<Vec<_>>(),
        ));
        // Three users of ~60 rows each (listed), one of two rows (kept in the filters).
        let users: ArrayRef = Arc::new(StringArray::from(
            (0..rows)
                .map(|i| match i {
                    5 | 150 => Some("Rare one".to_owned()),
                    i if i % 10 == 4 => None,
                    i => Some(format!("User {}", i % 3)),
                })
                .collect::<Vec<_>>(),
        ));
        let statuses: ArrayRef = Arc::new(arrow::array::Int64Array::from(
            (0..rows)
                .map(|i| (i != 6).then_some([200, 404, -1][i % 3]))
                .collect::<Vec<_>>(),
        ));
        let long = "x".repeat(postings::MAX_KEYWORD_BYTES + 1);
        let paths: ArrayRef = Arc::new(StringArray::from(
            (0..rows)
                .map(|i| {
                    Some(if i == 130 {
                        long.clone()
                    } else {
                        format!("/p/{}", i % 2)
                    })
                })
                .collect::<Vec<_>>(),
        ));
        let keywords = vec!["user".into(), "status".into(), "path".into()];
        let mut builder = TextIndexBuilder::new(vec!["message".into()], keywords, 8, false);
        // In two batches, the first ending inside a granule; the long path is in the second.
        for (start, len) in [(0, 101), (101, 99)] {
            for (column, values) in [&messages, &users, &statuses, &paths].iter().enumerate() {
                builder
                    .push(column, values.slice(start, len).as_ref())
                    .unwrap();
            }
        }
        let entry = builder.finish(&parts, "p.parquet").unwrap().unwrap();
        // The text column keeps its filters (they precede the postings); the path, with a value
        // too long to list, is not a keyword column of this part.
        assert_eq!(entry.columns, vec!["message"]);
        assert_eq!(entry.keyword_columns, vec!["user", "status"]);
        let section = entry.postings.clone().unwrap();
        assert!(!section.filters_omitted);
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        let query = TextQuery::parse("text").unwrap();
        let kept = index
            .granules_that_may_match("message", &|contains| query.may_match(contains))
            .unwrap()
            .unwrap();
        assert_eq!(kept, vec![true; 25]);
        let postings = index.postings().unwrap();
        assert!(!postings.has_column("message") && !postings.has_column("path"));
        let expected = |keep: &dyn Fn(usize) -> bool| {
            (0..rows)
                .filter(|&i| keep(i))
                .map(|i| i as u32)
                .collect::<Vec<u32>>()
        };
        let found = |column: &str, values: &[&str]| {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            let found = postings.value_rows(column, &values).unwrap().unwrap();
            let unlisted: Vec<String> = found.unlisted.iter().map(|v| v.to_string()).collect();
            let mut listed = roaring::RoaringBitmap::new();
            for rows in &found.listed {
                listed |= rows.as_ref();
            }
            (listed.iter().collect::<Vec<u32>>(), unlisted)
        };
        let user = |i: usize, n: usize| i % 10 != 4 && i != 5 && i != 150 && i % 3 == n;
        // Whole values, case and all: not tokens.
        assert_eq!(
            found("user", &["User 1"]),
            (expected(&|i| user(i, 1)), vec![])
        );
        assert_eq!(
            found("user", &["user 1", "User", "User 0", "User 2"]).0,
            expected(&|i| user(i, 0) || user(i, 2))
        );
        assert_eq!(found("user", &["user 1", "User"]).1, vec!["user 1", "User"]);
        assert_eq!(
            found("status", &["-1"]),
            (expected(&|i| i % 3 == 2), vec![])
        );
        assert_eq!(
            found("status", &["200"]),
            (expected(&|i| i % 3 == 0 && i != 6), vec![])
        );
        // The rare user is not listed; the filters of its granules (0 and 18) hold it, and only
        // the user column has filters among the keyword columns.
        assert_eq!(
            found("user", &["Rare one"]),
            (vec![], vec!["Rare one".into()])
        );
        let rare = index
            .granules_that_may_match("user", &|contains| contains("Rare one"))
            .unwrap()
            .unwrap();
        let holding: Vec<usize> = (0..25).filter(|&g| rare[g]).collect();
        assert_eq!(holding, vec![0, 18]);
        let status = index
            .granules_that_may_match("status", &|contains| contains("200"))
            .unwrap()
            .unwrap();
        assert!(status.is_empty());
    }

    #[test]
    fn postings_hold_each_tokens_rows_and_prove_their_bytes() {
        // As written (blocks of 128 tokens: one here), in blocks of 2 (a prefix's tokens span
        // blocks), one token a block, after bloom filters (files of version 3), and in the
        // dictionary itself (files of version 2).
        for layout in [
            DictionaryLayout::default(),
            DictionaryLayout::Blocks(2),
            DictionaryLayout::Blocks(1),
            DictionaryLayout::BlocksAfterFilters(2),
            DictionaryLayout::EveryToken,
        ] {
            postings_in_layout(layout);
        }
    }

    fn postings_in_layout(layout: DictionaryLayout) {
        let dir = tempfile::tempdir().unwrap();
        let parts = dir.path().join(PARTS_DIR);
        fs::create_dir_all(&parts).unwrap();
        let values: Vec<Option<String>> = (0..30)
            .map(|i| match i {
                3 | 17 => None,
                7 => Some("ERROR connection reset by peer".to_owned()),
                i => Some(format!("GET /page/{} {} user{}", i % 4, 200 + i % 3, i % 5)),
            })
            .collect();
        let column: ArrayRef = Arc::new(StringArray::from(values.clone()));
        let mut builder =
            TextIndexBuilder::new(vec!["message".into()], Vec::new(), 8, true).with_layout(layout);
        // In two batches, the first ending inside a granule.
        builder.push(0, column.slice(0, 11).as_ref()).unwrap();
        builder.push(0, column.slice(11, 19).as_ref()).unwrap();
        let entry = builder.finish(&parts, "p.parquet").unwrap().unwrap();
        let section = entry.postings.clone().unwrap();
        assert_eq!(section.file_version(), layout.file_version());
        let with_postings = fs::read(parts.join(&entry.file)).unwrap();
        assert_eq!(with_postings[8..12], layout.file_version().to_le_bytes());
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        assert_eq!(index.rows().unwrap(), 30);
        let query = TextQuery::parse(r#""connection reset""#).unwrap();
        let kept = index
            .granules_that_may_match("message", &|contains| query.may_match(contains))
            .unwrap();
        if layout.keeps_filters() {
            // The filters are those of the index without postings, byte for byte (but the
            // version), and answer as they do.
            let plain = write_text_index(&parts, "q.parquet", &[("message".into(), column)], 8)
                .unwrap()
                .unwrap();
            let without = fs::read(parts.join(&plain.file)).unwrap();
            assert_eq!(
                with_postings[12..section.filter_bytes as usize],
                without[12..]
            );
            assert_eq!(kept.unwrap(), [true, false, false, false]);
        } else {
            // Only the header and the column's path (and its 0 granules) precede the postings.
            assert_eq!(section.filter_bytes, 8 + 4 + 4 + 8 + 2 + 2 + 7 + 4);
            assert!(kept.is_none());
        }
        let postings = index.postings().unwrap();
        assert!(postings.has_column("message") && !postings.has_column("other"));
        for (query, exact) in [
            ("error", true),
            ("page AND 201", true),
            ("user1 OR user2", true),
            ("NOT get", true),
            ("us*", true),
            ("user4", true),
            ("0", true),
            ("p*", true),
            ("20*", true),
            ("zz*", true),
            ("user5", true),
            ("page -(user1 OR 202)", true),
            (r#""connection reset""#, false),
            (r#""page 3""#, false),
            (r#"NOT "page 3""#, false),
            (r#""nothing here""#, true),
        ] {
            let parsed = TextQuery::parse(query).unwrap();
            let found = postings.candidates("message", &parsed).unwrap().unwrap();
            let matching: Vec<u32> = (0..values.len() as u32)
                .filter(|&row| {
                    values[row as usize]
                        .as_deref()
                        .is_some_and(|text| parsed.matches(text))
                })
                .collect();
            assert_eq!(found.exact, exact, "{layout:?} {query}");
            if exact {
                let rows: Vec<u32> = found.rows.iter().collect();
                assert_eq!(rows, matching, "{layout:?} {query}");
            } else {
                assert!(
                    matching.iter().all(|row| found.rows.contains(*row)),
                    "{query}"
                );
            }
        }
        assert!(postings.candidates("other", &query).unwrap().is_none());

        // A flipped byte in a bitmap is found when the bitmap is read, and by `strata check`.
        let path = parts.join(&entry.file);
        let original = fs::read(&path).unwrap();
        let mut bytes = original.clone();
        bytes[section.filter_bytes as usize + 2] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        let error = index
            .postings()
            .unwrap()
            .candidates("message", &TextQuery::parse("NOT error").unwrap())
            .unwrap_err()
            .to_string();
        assert!(error.contains("XXH64"), "{error}");
        assert_eq!(check_text_index(dir.path(), &entry).len(), 1);
        // One in the header (or the filters) when they are first asked for (a query the
        // postings decide never reads them).
        let mut bytes = original.clone();
        bytes[20] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        let error = index.rows().unwrap_err().to_string();
        assert!(error.contains("filters' XXH64"), "{error}");
        // One in the last token's block (or, without blocks, its bitmap, which comes last)
        // when a query reads it.
        let mut bytes = original.clone();
        bytes[section.dictionary_offset as usize - 3] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let index = TextIndex::read(dir.path(), &entry).unwrap();
        let postings = index.postings().unwrap();
        let error = postings
            .candidates("message", &TextQuery::parse("user4").unwrap())
            .unwrap_err()
            .to_string();
        let damaged = match layout {
            DictionaryLayout::EveryToken => "postings at byte",
            DictionaryLayout::BlocksAfterFilters(_) | DictionaryLayout::Blocks(_) => {
                "token block at byte"
            }
        };
        assert!(error.contains(damaged), "{layout:?}: {error}");
        assert_eq!(check_text_index(dir.path(), &entry).len(), 1);
        // So is one in the dictionary, before the index is used.
        let mut bytes = original.clone();
        bytes[section.dictionary_offset as usize + 3] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let error = TextIndex::read(dir.path(), &entry).unwrap_err().to_string();
        assert!(error.contains("dictionary"), "{error}");
        fs::write(&path, &original).unwrap();
        assert!(check_text_index(dir.path(), &entry).is_empty());
    }
}
