//! Segments of a part (see the module docs of `checksum`) and their CRC-32s: which segments a
//! byte range covers, and verifying them.

use std::ops::Range;
use std::path::PathBuf;

use bytes::Bytes;
use parquet::file::metadata::ParquetMetaData;

use crate::error::FormatError;
use crate::held::StoredFile;

use super::{damaged, read_at};

#[derive(Debug)]
pub struct PartChecksums {
    pub(super) path: PathBuf,
    pub(super) len: u64,
    /// Start of each segment, ascending; segment `i` ends where `i + 1` starts (the last at `len`).
    pub(super) starts: Vec<u64>,
    pub(super) crcs: Vec<u32>,
}

impl PartChecksums {
    pub fn segments(&self) -> usize {
        self.starts.len()
    }

    fn end(&self, segment: usize) -> u64 {
        self.starts.get(segment + 1).copied().unwrap_or(self.len)
    }

    /// The segments overlapping `range` (never empty for a non-empty range inside the file).
    fn overlapping(&self, range: &Range<u64>) -> Range<usize> {
        let first = self.starts.partition_point(|&s| s <= range.start).max(1) - 1;
        let last = self.starts.partition_point(|&s| s < range.end);
        first..last.max(first + 1)
    }

    /// The smallest run of whole segments holding `range`: what must be read to verify it.
    pub fn covering(&self, range: Range<u64>) -> Result<Range<u64>, FormatError> {
        if range.start > range.end || range.end > self.len {
            return Err(damaged(
                &self.path,
                format!(
                    "read of bytes {}..{} past the end of the part ({} bytes)",
                    range.start, range.end, self.len
                ),
            ));
        }
        let segments = self.overlapping(&range);
        Ok(self.starts[segments.start]..self.end(segments.end - 1))
    }

    /// Checks `bytes`, the part's bytes from `start`, which must begin and end on segment
    /// boundaries (see [`PartChecksums::covering`]).
    pub fn verify(&self, start: u64, bytes: &[u8]) -> Result<(), FormatError> {
        let range = start..start + bytes.len() as u64;
        if bytes.is_empty() {
            return Ok(());
        }
        if self.covering(range.clone())? != range {
            return Err(damaged(
                &self.path,
                format!(
                    "bytes {}..{} are not whole segments",
                    range.start, range.end
                ),
            ));
        }
        for segment in self.overlapping(&range) {
            let (from, to) = (self.starts[segment], self.end(segment));
            let slice = &bytes[(from - start) as usize..(to - start) as usize];
            let found = crc32fast::hash(slice);
            if found != self.crcs[segment] {
                return Err(damaged(
                    &self.path,
                    format!(
                        "bytes {from}..{to} ({}) fail their CRC-32 (stored {:08x}, computed {found:08x})",
                        self.describe(segment),
                        self.crcs[segment]
                    ),
                ));
            }
        }
        Ok(())
    }

    fn describe(&self, segment: usize) -> &'static str {
        if segment + 1 == self.starts.len() {
            "footer and page index"
        } else {
            "a page"
        }
    }

    /// Reads `range` of `file` after verifying every segment it touches.
    pub fn read_verified(
        &self,
        file: &StoredFile,
        range: Range<u64>,
    ) -> Result<Bytes, FormatError> {
        let cover = self.covering(range.clone())?;
        let bytes = read_at(&self.path, file, cover.clone())?;
        self.verify(cover.start, &bytes)?;
        Ok(bytes.slice((range.start - cover.start) as usize..(range.end - cover.start) as usize))
    }

    /// Verifies every segment of the part; returns the damaged ones as messages.
    pub fn verify_all(&self, file: &StoredFile) -> Vec<String> {
        let mut problems = Vec::new();
        for (segment, &start) in self.starts.iter().enumerate() {
            let range = start..self.end(segment);
            if let Err(e) =
                read_at(&self.path, file, range.clone()).and_then(|b| self.verify(range.start, &b))
            {
                problems.push(e.to_string());
            }
        }
        problems
    }
}

/// Segment starts of a part of `len` bytes whose footer is `metadata` (see the module docs),
/// and its tail start.
pub(super) fn segment_starts(
    metadata: &ParquetMetaData,
    len: u64,
) -> Result<(Vec<u64>, u64), String> {
    let mut starts = vec![0u64];
    let mut tail = 0u64;
    for (rg, group) in metadata.row_groups().iter().enumerate() {
        for (c, chunk) in group.columns().iter().enumerate() {
            let (start, chunk_len) = chunk.byte_range();
            let end = start
                .checked_add(chunk_len)
                .ok_or_else(|| format!("column chunk {rg}/{c} ends past 2^64"))?;
            starts.push(start);
            starts.push(end);
            tail = tail.max(end);
            let pages = metadata
                .offset_index()
                .and_then(|index| index.get(rg))
                .and_then(|columns| columns.get(c));
            for page in pages.map(|p| p.page_locations().as_slice()).unwrap_or(&[]) {
                let offset = u64::try_from(page.offset)
                    .map_err(|_| format!("page at negative offset {}", page.offset))?;
                if offset < start || offset >= end {
                    return Err(format!(
                        "page at {offset} outside its column chunk {start}..{end}"
                    ));
                }
                starts.push(offset);
            }
        }
    }
    if tail > len {
        return Err(format!(
            "column chunks end at {tail}, past the file's {len} bytes"
        ));
    }
    starts.push(tail);
    starts.sort_unstable();
    starts.dedup();
    starts.retain(|&s| s < len);
    Ok((starts, tail))
}
