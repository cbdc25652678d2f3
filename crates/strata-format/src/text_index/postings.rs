//! Token postings (ADR 0019, "Postings, when a table asks for them"): for each indexed column of
//! a part, every token's rows as a roaring bitmap, and the rows holding a value at all. They
//! follow the file's header (and, in files of versions 2 and 3, its bloom filters) in the same
//! `.text` file when the table has `text_postings` set.
//!
//! Layout, after the header (see the module above and docs/format.md): each bitmap in the
//! portable roaring format, back to back; then the dictionary, little-endian: `u16` columns; per
//! column: `u16` path length, the path, the location of its present-rows bitmap, `u32` tokens,
//! and per token (sorted bytewise, no repeats) `u16` length, the token, its bitmap's location. A
//! location is `u64` offset in the file, `u32` length, `u64` XXH64 of those bytes. The manifest
//! entry carries the dictionary's offset, length and XXH64, so a reader checks the dictionary
//! against the manifest and each bitmap it reads against the dictionary, and reads no bitmap it
//! does not need.
//!
//! Invariant: a column's postings hold exactly its tokens (`strata_text::for_each_token`) row by
//! row, so a query of terms and prefixes combined by AND, OR and NOT is decided by set algebra
//! with the answers `matches()` gives; a phrase of several tokens is narrowed to the rows holding
//! all of them, and `matches()` still decides those rows.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::Int64Type;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};
use strata_text::TextQuery;

use super::{Bytes, bitmap_cache};
use crate::error::FormatError;
use crate::held::StoredFile;

/// Where a part's postings are in its text index file, as the manifest entry lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostingsSection {
    /// Bytes of the file before the postings (the filters), and their XXH64.
    pub filter_bytes: u64,
    pub filter_xxh64: String,
    pub dictionary_offset: u64,
    pub dictionary_bytes: u64,
    pub dictionary_xxh64: String,
    /// The dictionary indexes blocks of tokens (file versions 3 and 4); false in a version-2
    /// file, whose dictionary lists every token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_blocks: bool,
    /// No bloom filters precede the postings, only the file's header and its columns' paths
    /// (file version 4): the postings decide every search of their columns, so filters would
    /// never be read. False in files of versions 2 and 3.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub filters_omitted: bool,
}

impl PostingsSection {
    /// The version of the text index file this section is in.
    pub(super) fn file_version(&self) -> u32 {
        // A block's token count is in the dictionary; only the layout's kind matters here.
        let layout = match (self.token_blocks, self.filters_omitted) {
            (false, _) => DictionaryLayout::EveryToken,
            (true, false) => DictionaryLayout::BlocksAfterFilters(BLOCK_TOKENS),
            (true, true) => DictionaryLayout::Blocks(BLOCK_TOKENS),
        };
        layout.file_version()
    }
}

/// How a file with postings is laid out: the versions written so far (each still read).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum DictionaryLayout {
    /// Bloom filters, then every token and its bitmap's location in the dictionary (file
    /// version 2, written before 2026-11-28's blocks).
    EveryToken,
    /// Bloom filters, then the tokens in blocks of this many after the bitmaps and the first
    /// token and location of each block in the dictionary (file version 3).
    BlocksAfterFilters(usize),
    /// Version 3 without the bloom filters (file version 4, written since 2026-11-28).
    Blocks(usize),
}

/// Tokens per block of the dictionary's layout as written.
const BLOCK_TOKENS: usize = 128;

impl Default for DictionaryLayout {
    /// Blocks of 128 tokens: a lookup reads one block of about 4 KB (a token and its location
    /// are about 30 bytes), and the dictionary read when a part is opened holds one entry per
    /// block rather than one per token (12 MB for the 400,000 tokens of 10M log lines).
    fn default() -> Self {
        DictionaryLayout::Blocks(BLOCK_TOKENS)
    }
}

impl DictionaryLayout {
    pub(super) fn file_version(self) -> u32 {
        match self {
            DictionaryLayout::EveryToken => 2,
            DictionaryLayout::BlocksAfterFilters(_) => 3,
            DictionaryLayout::Blocks(_) => 4,
        }
    }

    /// Whether bloom filters precede the postings.
    pub(super) fn keeps_filters(self) -> bool {
        !matches!(self, DictionaryLayout::Blocks(_))
    }
}

/// Rows added in increasing order, into a bitmap a batch at a time: roaring's own `push` finds
/// a dense container's last row by scanning it from the end, for every row pushed.
#[derive(Default)]
struct RowsBuilder {
    rows: RoaringBitmap,
    pending: Vec<u32>,
    last: Option<u32>,
}

/// Rows a [`RowsBuilder`] holds before it appends them to its bitmap.
const PENDING_ROWS: usize = 128;

impl RowsBuilder {
    /// Adds `row` unless it is the last one added; rows come in increasing order.
    fn add(&mut self, row: u32) -> Result<(), String> {
        if self.last == Some(row) {
            return Ok(());
        }
        self.last = Some(row);
        self.pending.push(row);
        if self.pending.len() == PENDING_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.rows
            .append(self.pending.drain(..))
            .map(|_| ())
            .map_err(|e| format!("postings rows out of order: {e}"))
    }

    fn finish(mut self) -> Result<RoaringBitmap, String> {
        self.flush()?;
        Ok(self.rows)
    }
}

/// Each token's rows.
type TokenRows = HashMap<String, RowsBuilder, foldhash::fast::RandomState>;

/// Shards of a column's tokens, filled on threads of their own: looking every token of every
/// line up in the part's token map is most of building postings.
const SHARDS: usize = 2;

/// Rows of a batch from which its shards are filled in parallel (below, one thread).
pub(super) const PARALLEL_ROWS: usize = 16 * 1024;

/// The shard of `token`.
fn shard_of(token: &str) -> usize {
    use std::hash::BuildHasher;
    (foldhash::fast::FixedState::with_seed(0).hash_one(token) % SHARDS as u64) as usize
}

/// One column's postings while its part is written.
pub(super) struct PostingsBuilder {
    present: RowsBuilder,
    /// Tokens by [`shard_of`].
    shards: Vec<TokenRows>,
}

impl Default for PostingsBuilder {
    fn default() -> Self {
        PostingsBuilder {
            present: RowsBuilder::default(),
            shards: (0..SHARDS).map(|_| TokenRows::default()).collect(),
        }
    }
}

impl PostingsBuilder {
    /// Records the value of part row `row`; rows come in increasing order.
    pub(super) fn add_row(&mut self, row: u32) -> Result<(), String> {
        self.present.add(row)
    }

    /// Records that row `row` holds `token` (again for a repeated token: no effect); returns
    /// whether no row from `granule_start` on held it before, which spares the bloom filter's
    /// builder a second lookup of every token.
    pub(super) fn add_token(
        &mut self,
        row: u32,
        token: &str,
        granule_start: u32,
    ) -> Result<bool, String> {
        add_to(shard_for(&mut self.shards, token)?, row, token)
            .map(|last| last.is_none_or(|last| last < granule_start))
    }

    /// Records the values of `strings`, the part's rows from `first_row` on (NULL: no value),
    /// each shard of tokens on a thread of its own for a batch of many rows.
    pub(super) fn add_values(
        &mut self,
        strings: &StringArray,
        first_row: u32,
    ) -> Result<(), String> {
        let rows = (0..strings.len()).filter(|&i| strings.is_valid(i));
        for i in rows {
            self.present.add(part_row(first_row, i)?)?;
        }
        if strings.len() < PARALLEL_ROWS {
            // One thread: each value tokenized once, each token to its shard.
            return each_token(strings, first_row, |row, token| {
                add_to(shard_for(&mut self.shards, token)?, row, token).map(drop)
            });
        }
        let fill = |shard: usize, tokens: &mut TokenRows| {
            each_token(strings, first_row, |row, token| {
                match shard_of(token) == shard {
                    true => add_to(tokens, row, token).map(drop),
                    false => Ok(()),
                }
            })
        };
        std::thread::scope(|scope| {
            let filling: Vec<_> = self
                .shards
                .iter_mut()
                .enumerate()
                .map(|(shard, tokens)| scope.spawn(move || fill(shard, tokens)))
                .collect();
            filling
                .into_iter()
                .try_for_each(|thread| match thread.join() {
                    Ok(result) => result,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
        })
    }
}

/// The longest value (in bytes) a keyword column lists: a dictionary entry's length is a `u16`,
/// and values this long are not what equality lookups of a keyword are for. A part with a
/// longer value at the path gets no keyword postings for it (its lookups read the column).
pub(super) const MAX_KEYWORD_BYTES: usize = 4096;

impl PostingsBuilder {
    /// Records the whole values of `values` (strings, or integers as their decimal text), the
    /// part's rows from `first_row` on (NULL: no value). Ok(false), having recorded nothing
    /// more, when a value is longer than [`MAX_KEYWORD_BYTES`].
    pub(super) fn add_whole_values(
        &mut self,
        values: &dyn Array,
        first_row: u32,
    ) -> Result<bool, String> {
        let strings = values.as_string_opt::<i32>();
        let integers = values.as_primitive_opt::<Int64Type>();
        if strings.is_none() && integers.is_none() {
            return Err(format!(
                "values of type {} are neither strings nor integers",
                values.data_type()
            ));
        }
        if let Some(strings) = strings
            && strings
                .iter()
                .flatten()
                .any(|s| s.len() > MAX_KEYWORD_BYTES)
        {
            return Ok(false);
        }
        let mut text = String::new();
        for i in (0..values.len()).filter(|&i| values.is_valid(i)) {
            let row = part_row(first_row, i)?;
            self.present.add(row)?;
            let term = match (strings, integers) {
                (Some(strings), _) => strings.value(i),
                (None, Some(integers)) => {
                    text.clear();
                    let _ = write!(text, "{}", integers.value(i));
                    &text
                }
                (None, None) => continue,
            };
            add_to(shard_for(&mut self.shards, term)?, row, term)?;
        }
        Ok(true)
    }
}

impl PostingsBuilder {
    /// Removes the terms held by fewer than `rows` rows and returns them with their rows (in
    /// order): a keyword column keeps those in bloom filters instead.
    pub(super) fn take_rare(&mut self, rows: u64) -> Result<Vec<(String, Vec<u32>)>, String> {
        let mut rare = Vec::new();
        for shard in &mut self.shards {
            let terms: Vec<String> = shard
                .iter()
                .filter(|(_, held)| held.rows.len() + (held.pending.len() as u64) < rows)
                .map(|(term, _)| term.clone())
                .collect();
            for term in terms {
                if let Some(held) = shard.remove(&term) {
                    rare.push((term, held.finish()?.iter().collect()));
                }
            }
        }
        Ok(rare)
    }
}

/// Calls `add` with the part row and each token of every value of `strings` (the part's rows
/// from `first_row` on); the first error it returns is the answer.
fn each_token(
    strings: &StringArray,
    first_row: u32,
    mut add: impl FnMut(u32, &str) -> Result<(), String>,
) -> Result<(), String> {
    for i in (0..strings.len()).filter(|&i| strings.is_valid(i)) {
        let row = part_row(first_row, i)?;
        let mut failed = None;
        strata_text::for_each_token(strings.value(i), |token| {
            if let Err(e) = add(row, token) {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// The shard of `shards` that holds `token`.
fn shard_for<'a>(shards: &'a mut [TokenRows], token: &str) -> Result<&'a mut TokenRows, String> {
    shards
        .get_mut(shard_of(token))
        .ok_or_else(|| format!("no postings shard for token {token:?}"))
}

/// The part row of row `index` of a batch starting at part row `first_row`.
fn part_row(first_row: u32, index: usize) -> Result<u32, String> {
    u32::try_from(index)
        .ok()
        .and_then(|index| first_row.checked_add(index))
        .ok_or_else(|| "more than 2^32 rows in one part".to_owned())
}

/// Adds `row` to the rows of `token` in `tokens`; returns the row the token was last seen in
/// before (None: a new token).
fn add_to(tokens: &mut TokenRows, row: u32, token: &str) -> Result<Option<u32>, String> {
    match tokens.get_mut(token) {
        Some(rows) => {
            let last = rows.last;
            rows.add(row)?;
            Ok(last)
        }
        None => {
            let mut rows = RowsBuilder::default();
            rows.add(row)?;
            tokens.insert(token.to_owned(), rows);
            Ok(None)
        }
    }
}

/// Appends the postings of `columns` (path, postings) to `bytes` (the filters so far) and
/// returns the section's location: the bitmaps, then (in `layout`) each column's tokens in
/// blocks, then the dictionary indexing the blocks by their first tokens.
pub(super) fn write_postings(
    bytes: &mut Vec<u8>,
    columns: Vec<(String, PostingsBuilder)>,
    layout: DictionaryLayout,
) -> Result<PostingsSection, String> {
    let filter_bytes = bytes.len() as u64;
    let filter_xxh64 = hex(twox_hash::XxHash64::oneshot(0, bytes));
    let mut dictionary = Vec::new();
    dictionary.extend_from_slice(&(columns.len() as u16).to_le_bytes());
    // Per column: its present-rows bitmap's and its tokens' entries, until the blocks are cut.
    let mut entries_of = Vec::with_capacity(columns.len());
    for (path, postings) in columns {
        let mut present = Vec::new();
        append_bitmap(bytes, &mut present, postings.present.finish()?)?;
        let mut tokens: Vec<(String, RowsBuilder)> =
            postings.shards.into_iter().flatten().collect();
        tokens.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut entries = Vec::with_capacity(tokens.len());
        for (token, rows) in tokens {
            let mut entry = Vec::with_capacity(2 + token.len() + LOCATION_BYTES);
            entry.extend_from_slice(&(token.len() as u16).to_le_bytes());
            entry.extend_from_slice(token.as_bytes());
            append_bitmap(bytes, &mut entry, rows.finish()?)?;
            entries.push((token, entry));
        }
        entries_of.push((path, present, entries));
    }
    for (path, present, entries) in entries_of {
        dictionary.extend_from_slice(&(path.len() as u16).to_le_bytes());
        dictionary.extend_from_slice(path.as_bytes());
        dictionary.extend_from_slice(&present);
        dictionary.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        let block_tokens = match layout {
            DictionaryLayout::EveryToken => {
                for (_, entry) in &entries {
                    dictionary.extend_from_slice(entry);
                }
                continue;
            }
            DictionaryLayout::BlocksAfterFilters(tokens) | DictionaryLayout::Blocks(tokens) => {
                tokens.max(1)
            }
        };
        let blocks = entries.chunks(block_tokens);
        dictionary.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
        for block in blocks {
            let Some((first, _)) = block.first() else {
                continue;
            };
            dictionary.extend_from_slice(&(first.len() as u16).to_le_bytes());
            dictionary.extend_from_slice(first.as_bytes());
            dictionary.extend_from_slice(&(block.len() as u32).to_le_bytes());
            let offset = bytes.len();
            for (_, entry) in block {
                bytes.extend_from_slice(entry);
            }
            append_location(&mut dictionary, offset, &bytes[offset..]);
        }
    }
    let dictionary_offset = bytes.len() as u64;
    let dictionary_xxh64 = hex(twox_hash::XxHash64::oneshot(0, &dictionary));
    bytes.extend_from_slice(&dictionary);
    Ok(PostingsSection {
        filter_bytes,
        filter_xxh64,
        dictionary_offset,
        dictionary_bytes: dictionary.len() as u64,
        dictionary_xxh64,
        token_blocks: layout != DictionaryLayout::EveryToken,
        filters_omitted: !layout.keeps_filters(),
    })
}

/// Writes `rows` (run-compressed where that is smaller) to `bytes` and its location to
/// `dictionary`.
fn append_bitmap(
    bytes: &mut Vec<u8>,
    dictionary: &mut Vec<u8>,
    mut rows: RoaringBitmap,
) -> Result<(), String> {
    rows.optimize();
    let offset = bytes.len();
    rows.serialize_into(&mut *bytes)
        .map_err(|e| e.to_string())?;
    append_location(dictionary, offset, &bytes[offset..]);
    Ok(())
}

/// Appends the location of `written`, found at `offset` in the file, to `to`.
fn append_location(to: &mut Vec<u8>, offset: usize, written: &[u8]) {
    to.extend_from_slice(&(offset as u64).to_le_bytes());
    to.extend_from_slice(&(written.len() as u32).to_le_bytes());
    to.extend_from_slice(&twox_hash::XxHash64::oneshot(0, written).to_le_bytes());
}

pub(super) fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// A bitmap's place in the file.
#[derive(Debug, Clone, Copy)]
struct Location {
    offset: u64,
    length: u32,
    xxh64: u64,
}

impl Location {
    fn read(reader: &mut Bytes) -> Option<Location> {
        Some(Location {
            offset: reader.u64()?,
            length: reader.u32()?,
            xxh64: reader.u64()?,
        })
    }

    fn range(&self) -> Range<u64> {
        self.offset..self.offset + u64::from(self.length)
    }
}

#[derive(Debug)]
struct ColumnPostings {
    path: String,
    present: Location,
    tokens: Tokens,
}

/// Where a column's tokens are. Tokens are compared in place, never copied (a 10M-line part has
/// hundreds of thousands).
#[derive(Debug)]
enum Tokens {
    /// A version-2 file: where each token's entry starts in the dictionary, in bytewise order.
    InDictionary(Vec<u32>),
    /// A version-3 file: the column's blocks of tokens, in bytewise order, read when a query
    /// needs one.
    Blocks(Vec<Block>),
}

#[derive(Debug)]
struct Block {
    /// Where its first token is in the dictionary.
    first: Range<usize>,
    tokens: u32,
    location: Location,
}

/// Bytes of a dictionary entry after its token: the location.
const LOCATION_BYTES: usize = 20;

/// A part's postings dictionary, read and verified; token blocks and bitmaps are read when a
/// query needs them.
#[derive(Debug)]
pub struct Postings {
    /// The text index file, which the blocks and bitmaps are read from.
    file: PathBuf,
    /// This reader's identity in the process's cache of bitmaps it has read
    /// (`bitmap_cache`).
    reader: u64,
    dictionary: bytes::Bytes,
    columns: Vec<ColumnPostings>,
}

/// The token of the entry at `at` of `entries` (a dictionary or a block) and its location.
/// Entries were checked when read; were one not there, it reads as an empty token at an empty
/// location, which no bitmap's XXH64 matches.
fn entry(entries: &[u8], at: u32) -> (&[u8], Location) {
    let empty = Location {
        offset: 0,
        length: 0,
        xxh64: 0,
    };
    parse_entry(entries, at as usize).unwrap_or((&[], empty))
}

fn parse_entry(entries: &[u8], at: usize) -> Option<(&[u8], Location)> {
    let mut reader = Bytes {
        bytes: entries.get(at..)?,
        at: 0,
    };
    let length = reader.u16()? as usize;
    let token = reader.take(length)?;
    Some((token, Location::read(&mut reader)?))
}

/// Reads `count` entries (`u16` length, token, location) from `reader`, checking that the tokens
/// are UTF-8 and in strictly increasing bytewise order; returns where each starts in the reader's
/// bytes.
fn read_entries(reader: &mut Bytes, count: usize) -> Result<Vec<u32>, String> {
    let mut last: Option<&[u8]> = None;
    let mut entries = Vec::with_capacity(count.min(1 << 24));
    for _ in 0..count {
        let at = u32::try_from(reader.at).map_err(|_| "it is over 4 GiB".to_owned())?;
        let ends = || "it ends early".to_owned();
        let length = reader.u16().ok_or_else(ends)? as usize;
        let token = reader.take(length).ok_or_else(ends)?;
        reader.take(LOCATION_BYTES).ok_or_else(ends)?;
        if std::str::from_utf8(token).is_err() || last.is_some_and(|last| last >= token) {
            return Err(format!(
                "its tokens are not UTF-8 in order at {:?}",
                String::from_utf8_lossy(token)
            ));
        }
        last = Some(token);
        entries.push(at);
    }
    Ok(entries)
}

/// The rows a query may match in a part, by its postings.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidates {
    pub rows: RoaringBitmap,
    /// Whether exactly these rows match (else they are a superset `matches()` must decide).
    pub exact: bool,
}

impl Postings {
    /// Reads the dictionary of `section` from the text index file `file`, checking it against
    /// the manifest's XXH64.
    pub(super) fn read(
        file: &Path,
        stored: &StoredFile,
        section: &PostingsSection,
    ) -> Result<Postings, FormatError> {
        let damaged = |message: String| FormatError::Damaged {
            path: file.to_owned(),
            message,
        };
        let range = section.dictionary_offset..section.dictionary_offset + section.dictionary_bytes;
        let bytes = stored
            .read_range(range)
            .map_err(|e| FormatError::io(file, e))?;
        let found = hex(twox_hash::XxHash64::oneshot(0, &bytes));
        if found != section.dictionary_xxh64 {
            return Err(damaged(format!(
                "its postings dictionary's XXH64 is {found}, the manifest says {}",
                section.dictionary_xxh64
            )));
        }
        let mut reader = Bytes {
            bytes: &bytes,
            at: 0,
        };
        let short = || damaged("its postings dictionary ends early".to_owned());
        let column_count = reader.u16().ok_or_else(short)?;
        let mut columns = Vec::with_capacity(column_count as usize);
        for _ in 0..column_count {
            let path = reader.string().ok_or_else(short)?;
            let present = Location::read(&mut reader).ok_or_else(short)?;
            let count = reader.u32().ok_or_else(short)? as usize;
            let in_column =
                |message: String| damaged(format!("its postings dictionary of {path}: {message}"));
            let tokens = match section.token_blocks {
                false => Tokens::InDictionary(read_entries(&mut reader, count).map_err(in_column)?),
                true => Tokens::Blocks(read_blocks(&mut reader, count).map_err(in_column)?),
            };
            columns.push(ColumnPostings {
                path,
                present,
                tokens,
            });
        }
        if reader.at != bytes.len() {
            return Err(damaged(
                "its postings dictionary has bytes after its last token".to_owned(),
            ));
        }
        Ok(Postings {
            file: file.to_owned(),
            reader: bitmap_cache::reader_id(),
            dictionary: bytes,
            columns,
        })
    }

    /// Whether `column` (an encoded path) has postings in this part.
    pub fn has_column(&self, column: &str) -> bool {
        self.columns.iter().any(|c| c.path == column)
    }

    /// Bytes held in memory by the dictionary (about).
    pub(super) fn memory_bytes(&self) -> usize {
        let tokens = |c: &ColumnPostings| match &c.tokens {
            Tokens::InDictionary(entries) => 4 * entries.len(),
            Tokens::Blocks(blocks) => std::mem::size_of::<Block>() * blocks.len(),
        };
        self.dictionary.len() + self.columns.iter().map(tokens).sum::<usize>()
    }

    /// `read` of the postings of `column` through a reader of the file; None when the column
    /// has no postings.
    fn with_column<T>(
        &self,
        column: &str,
        read: impl FnOnce(&ColumnPostings, &BitmapReader) -> Result<T, FormatError>,
    ) -> Result<Option<T>, FormatError> {
        let Some(postings) = self.columns.iter().find(|c| c.path == column) else {
            return Ok(None);
        };
        let stored = StoredFile::open(&self.file).map_err(|e| FormatError::io(&self.file, e))?;
        let reader = BitmapReader {
            postings: self,
            file: &self.file,
            stored: &stored,
        };
        read(postings, &reader).map(Some)
    }

    /// The rows of `column` that may match `query`; None when the column has no postings.
    pub fn candidates(
        &self,
        column: &str,
        query: &TextQuery,
    ) -> Result<Option<Candidates>, FormatError> {
        self.with_column(column, |postings, reader| {
            let present = Present {
                location: postings.present,
                rows: OnceCell::new(),
            };
            evaluate(query, postings, &present, reader)
        })
    }

    /// The rows of keyword column `column` holding each value of `values` (integers as their
    /// decimal text) that its postings list, and the values they do not list (held by too few
    /// rows, when the column has bloom filters, or by none); None when the column has no
    /// postings.
    pub fn value_rows<'v>(
        &self,
        column: &str,
        values: &'v [String],
    ) -> Result<Option<ValueRows<'v>>, FormatError> {
        self.with_column(column, |postings, reader| {
            let mut found = ValueRows::default();
            for value in values {
                match token_bitmap(postings, value, reader)? {
                    Some(rows) => found.listed.push(rows),
                    None => found.unlisted.push(value.as_str()),
                }
            }
            Ok(found)
        })
    }

    /// The first token of `block`.
    fn first_of(&self, block: &Block) -> &[u8] {
        self.dictionary.get(block.first.clone()).unwrap_or(&[])
    }
}

/// Reads the index of a column's `count` tokens in blocks: `u32` blocks, and per block `u16`
/// length and its first token, `u32` tokens in it, its location. Blocks are in order, none
/// empty, and hold `count` tokens in all.
fn read_blocks(reader: &mut Bytes, count: usize) -> Result<Vec<Block>, String> {
    let ends = || "it ends early".to_owned();
    let block_count = reader.u32().ok_or_else(ends)? as usize;
    let mut blocks: Vec<Block> = Vec::with_capacity(block_count.min(1 << 20));
    let mut total = 0usize;
    for _ in 0..block_count {
        let length = reader.u16().ok_or_else(ends)? as usize;
        let start = reader.at;
        let first = reader.take(length).ok_or_else(ends)?;
        let tokens = reader.u32().ok_or_else(ends)?;
        let location = Location::read(reader).ok_or_else(ends)?;
        let after = blocks
            .last()
            .and_then(|b| reader.bytes.get(b.first.clone()));
        if tokens == 0 || std::str::from_utf8(first).is_err() || after.is_some_and(|a| a >= first) {
            return Err(format!(
                "its blocks are not UTF-8 tokens in order at {:?}",
                String::from_utf8_lossy(first)
            ));
        }
        total += tokens as usize;
        blocks.push(Block {
            first: start..start + length,
            tokens,
            location,
        });
    }
    if total != count {
        return Err(format!("its blocks hold {total} tokens, it says {count}"));
    }
    Ok(blocks)
}

/// The rows of a query's leaves, read from a part's text index file.
struct BitmapReader<'a> {
    postings: &'a Postings,
    file: &'a Path,
    stored: &'a StoredFile,
}

impl BitmapReader<'_> {
    fn damaged(&self, message: String) -> FormatError {
        FormatError::Damaged {
            path: self.file.to_owned(),
            message,
        }
    }

    /// The bytes at `location`, checked against its XXH64; `what` names them in errors.
    fn read_checked(&self, location: Location, what: &str) -> Result<bytes::Bytes, FormatError> {
        let bytes = self
            .stored
            .read_range(location.range())
            .map_err(|e| FormatError::io(self.file, e))?;
        let found = twox_hash::XxHash64::oneshot(0, &bytes);
        if found != location.xxh64 {
            return Err(self.damaged(format!(
                "the {what} at byte {} have XXH64 {}, the dictionary says {}",
                location.offset,
                hex(found),
                hex(location.xxh64)
            )));
        }
        Ok(bytes)
    }

    /// The bitmap at `location`, checked against its XXH64 when first read (then kept,
    /// `bitmap_cache`).
    fn read(&self, location: Location) -> Result<RoaringBitmap, FormatError> {
        self.read_shared(location)
            .map(|rows| RoaringBitmap::clone(&rows))
    }

    /// [`BitmapReader::read`], shared with the cache rather than copied.
    fn read_shared(&self, location: Location) -> Result<Arc<RoaringBitmap>, FormatError> {
        let reader = self.postings.reader;
        if let Some(rows) = bitmap_cache::get(reader, location.offset, location.xxh64) {
            return Ok(rows);
        }
        let bytes = self.read_checked(location, "postings")?;
        let rows = RoaringBitmap::deserialize_from(&bytes[..]).map_err(|e| {
            self.damaged(format!(
                "the postings at byte {} do not decode: {e}",
                location.offset
            ))
        })?;
        let rows = Arc::new(rows);
        bitmap_cache::put(reader, location.offset, location.xxh64, Arc::clone(&rows));
        Ok(rows)
    }

    /// Block `index` of `blocks` (a column's): its bytes and where each entry starts in them,
    /// checked against the dictionary (its XXH64, its first token, its token count, its order
    /// up to the next block's first token).
    fn block(
        &self,
        blocks: &[Block],
        index: usize,
    ) -> Result<(bytes::Bytes, Vec<u32>), FormatError> {
        let Some(block) = blocks.get(index) else {
            return Err(self.damaged(format!("its postings have no block {index}")));
        };
        let bytes = self.read_checked(block.location, "token block")?;
        let mut reader = Bytes {
            bytes: &bytes,
            at: 0,
        };
        let in_block = |message: String| {
            self.damaged(format!(
                "the token block at byte {}: {message}",
                block.location.offset
            ))
        };
        let entries = read_entries(&mut reader, block.tokens as usize).map_err(in_block)?;
        let first = entries.first().map(|at| entry(&bytes, *at).0);
        let last = entries.last().map(|at| entry(&bytes, *at).0);
        let next = blocks.get(index + 1).map(|b| self.postings.first_of(b));
        if reader.at != bytes.len()
            || first != Some(self.postings.first_of(block))
            || next.is_some_and(|next| last.is_some_and(|last| last >= next))
        {
            return Err(in_block(
                "its tokens are not those the dictionary gives it".to_owned(),
            ));
        }
        Ok((bytes, entries))
    }
}

/// What a keyword column's postings say of a set of values.
#[derive(Debug, Default)]
pub struct ValueRows<'v> {
    /// The rows of each value listed (shared with the process's cache of bitmaps read).
    pub listed: Vec<Arc<RoaringBitmap>>,
    /// The values not listed.
    pub unlisted: Vec<&'v str>,
}

/// The rows of `token`, None when the column does not list it.
fn token_bitmap(
    postings: &ColumnPostings,
    token: &str,
    reader: &BitmapReader,
) -> Result<Option<Arc<RoaringBitmap>>, FormatError> {
    locate(postings, token.as_bytes(), reader)?
        .map(|location| reader.read_shared(location))
        .transpose()
}

/// Where the bitmap of `token` is, None when the column does not list it.
fn locate(
    postings: &ColumnPostings,
    token: &[u8],
    reader: &BitmapReader,
) -> Result<Option<Location>, FormatError> {
    match &postings.tokens {
        Tokens::InDictionary(entries) => Ok(find(&reader.postings.dictionary, entries, token)),
        Tokens::Blocks(blocks) if blocks.is_empty() => Ok(None),
        Tokens::Blocks(blocks) => {
            let (bytes, entries) = reader.block(blocks, block_of(blocks, token, reader))?;
            Ok(find(&bytes, &entries, token))
        }
    }
}

/// The block a token is in if listed: the last one starting at or before it.
fn block_of(blocks: &[Block], token: &[u8], reader: &BitmapReader) -> usize {
    blocks
        .partition_point(|b| reader.postings.first_of(b) <= token)
        .saturating_sub(1)
}

/// Where the bitmap of `token` is among `entries` (each starts in `bytes`, in bytewise order of
/// their tokens).
fn find(bytes: &[u8], entries: &[u32], token: &[u8]) -> Option<Location> {
    let at = entries.partition_point(|at| entry(bytes, *at).0 < token);
    entries
        .get(at)
        .map(|at| entry(bytes, *at))
        .filter(|(found, _)| *found == token)
        .map(|(_, location)| location)
}

/// The rows holding `token`, or every token starting with it when `prefix`.
fn token_rows(
    postings: &ColumnPostings,
    token: &str,
    prefix: bool,
    reader: &BitmapReader,
) -> Result<RoaringBitmap, FormatError> {
    let token = token.as_bytes();
    if !prefix {
        return match locate(postings, token, reader)? {
            Some(location) => reader.read(location),
            None => Ok(RoaringBitmap::new()),
        };
    }
    let blocks = match &postings.tokens {
        Tokens::InDictionary(entries) => {
            return rows_starting_with(&reader.postings.dictionary, entries, token, reader);
        }
        Tokens::Blocks(blocks) => blocks,
    };
    // The prefix's first token is in the last block starting at or before it; its tokens may
    // go on into the blocks after it that start with the prefix.
    let start = block_of(blocks, token, reader);
    let mut rows = RoaringBitmap::new();
    for (index, block) in blocks.iter().enumerate().skip(start) {
        if index > start && !reader.postings.first_of(block).starts_with(token) {
            break;
        }
        let (bytes, entries) = reader.block(blocks, index)?;
        rows |= rows_starting_with(&bytes, &entries, token, reader)?;
    }
    Ok(rows)
}

/// The rows holding a token starting with `prefix` among `entries` (each starts in `bytes`, in
/// bytewise order of their tokens).
fn rows_starting_with(
    bytes: &[u8],
    entries: &[u32],
    prefix: &[u8],
    reader: &BitmapReader,
) -> Result<RoaringBitmap, FormatError> {
    let first = entries.partition_point(|at| entry(bytes, *at).0 < prefix);
    let mut rows = RoaringBitmap::new();
    for (_, location) in entries[first..]
        .iter()
        .map(|at| entry(bytes, *at))
        .take_while(|(found, _)| found.starts_with(prefix))
    {
        rows |= reader.read(location)?;
    }
    Ok(rows)
}

/// The rows of a column holding a value, read only by a query that needs them (a negation, an
/// empty phrase, an empty AND).
struct Present {
    location: Location,
    rows: OnceCell<RoaringBitmap>,
}

impl Present {
    fn rows(&self, reader: &BitmapReader) -> Result<&RoaringBitmap, FormatError> {
        if let Some(rows) = self.rows.get() {
            return Ok(rows);
        }
        let rows = reader.read(self.location)?;
        Ok(self.rows.get_or_init(|| rows))
    }
}

fn evaluate(
    query: &TextQuery,
    postings: &ColumnPostings,
    present: &Present,
    reader: &BitmapReader,
) -> Result<Candidates, FormatError> {
    Ok(match query {
        TextQuery::Phrase { tokens, prefix } => {
            let Some((last, before)) = tokens.split_last() else {
                return Ok(Candidates {
                    rows: present.rows(reader)?.clone(),
                    exact: false,
                });
            };
            let mut rows = token_rows(postings, last, *prefix, reader)?;
            for token in before {
                if rows.is_empty() {
                    break;
                }
                rows &= token_rows(postings, token, false, reader)?;
            }
            // One token is exactly a term (or prefix); several must also be consecutive.
            let exact = before.is_empty() || rows.is_empty();
            Candidates { rows, exact }
        }
        TextQuery::And(all) => {
            let mut result: Option<Candidates> = None;
            for q in all {
                if result.as_ref().is_some_and(|r| r.rows.is_empty()) {
                    break;
                }
                let next = evaluate(q, postings, present, reader)?;
                result = Some(match result {
                    None => next,
                    Some(mut r) => {
                        r.rows &= next.rows;
                        r.exact &= next.exact;
                        r
                    }
                });
            }
            // An AND cut short by an empty intersection is exactly empty.
            match result {
                None => Candidates {
                    rows: present.rows(reader)?.clone(),
                    exact: true,
                },
                Some(r) if r.rows.is_empty() => Candidates {
                    rows: r.rows,
                    exact: true,
                },
                Some(r) => r,
            }
        }
        TextQuery::Or(any) => {
            let mut rows = RoaringBitmap::new();
            let mut exact = true;
            for q in any {
                let next = evaluate(q, postings, present, reader)?;
                rows |= next.rows;
                exact &= next.exact;
            }
            Candidates { rows, exact }
        }
        TextQuery::Not(inner) => {
            let inner = evaluate(inner, postings, present, reader)?;
            match inner.exact {
                true => Candidates {
                    rows: present.rows(reader)? - &inner.rows,
                    exact: true,
                },
                // Rows outside a superset do not match inside it: nothing is ruled out.
                false => Candidates {
                    rows: present.rows(reader)?.clone(),
                    exact: false,
                },
            }
        }
    })
}
