//! Opening a part: its size, its verified tail, and the footer and page index parsed from it.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::reader::{ChunkReader, Length};

use crate::deletes::{DeletionVector, decode_checked};
use crate::error::FormatError;
use crate::held::StoredFile;
use crate::manifest::PartEntry;

use super::file::read_checksum_file;
use super::part_file::PartFile;
use super::segments::{PartChecksums, segment_starts};
use super::{damaged, read_at};

pub(super) fn reader_options() -> ArrowReaderOptions {
    ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional)
}

/// Serves reads of a part's tail from memory, so that the footer is parsed from verified bytes
/// only; any read before the tail is refused.
struct TailReader {
    len: u64,
    start: u64,
    bytes: Bytes,
}

impl Length for TailReader {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for TailReader {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self
            .get_bytes(start, (self.len - start.min(self.len)) as usize)?
            .reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start.saturating_add(length as u64);
        if start < self.start || end > self.len {
            return Err(ParquetError::General(format!(
                "footer refers to bytes {start}..{end} outside the part's footer"
            )));
        }
        let from = (start - self.start) as usize;
        Ok(self.bytes.slice(from..from + length))
    }
}

/// A part opened for reading: its footer (with page index when present) and what verifies it.
#[derive(Debug, Clone)]
pub struct OpenedPart {
    pub metadata: ArrowReaderMetadata,
    /// None for parts written before checksums existed.
    pub checksums: Option<Arc<PartChecksums>>,
    /// The part's deleted rows (None: none are); readers built from this skip them.
    pub deleted: Option<Arc<DeletionVector>>,
}

impl OpenedPart {
    /// A reader of the part's bytes that verifies them (see [`PartFile`]).
    pub fn file(&self, path: &Path) -> Result<PartFile, FormatError> {
        PartFile::open(path, self.checksums.clone())
    }
}

/// Opens the part `entry` at `path`: checks its size against the manifest, verifies and parses its
/// footer and page index, and checks its row count against the manifest (see the module docs).
pub fn open_part(path: &Path, entry: &PartEntry) -> Result<OpenedPart, FormatError> {
    let mut opened = open_verified(path, entry.bytes, entry.xxh64.is_some(), entry.rows)?;
    if let Some(deletes) = &entry.deletes {
        let dv_path = path.with_file_name(&deletes.file);
        let blob = crate::held::read(&dv_path).map_err(|e| FormatError::io(&dv_path, e))?;
        let vector = decode_checked(&blob, &dv_path, deletes, entry.rows)?;
        opened.deleted = (!vector.is_empty()).then(|| Arc::new(vector));
    }
    Ok(opened)
}

/// Opens any Parquet file Strata wrote with a checksum file (`checksummed`) or without: checks
/// its size, verifies and parses its footer, and checks its row count (parts, key files).
pub(crate) fn open_verified(
    path: &Path,
    bytes: u64,
    checksummed: bool,
    expected_rows: u64,
) -> Result<OpenedPart, FormatError> {
    let file = StoredFile::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = file.size().map_err(|e| FormatError::io(path, e))?;
    if len != bytes {
        return Err(damaged(
            path,
            format!("{len} bytes on disk, the manifest says {bytes}"),
        ));
    }
    let parquet_err = |source| FormatError::Parquet {
        path: path.to_owned(),
        source,
    };
    let opened = if !checksummed {
        OpenedPart {
            metadata: ArrowReaderMetadata::load(&file, reader_options()).map_err(parquet_err)?,
            checksums: None,
            deleted: None,
        }
    } else {
        let sums = read_checksum_file(path)?;
        if sums.len != len || sums.tail > len || sums.crcs.is_empty() {
            return Err(damaged(
                path,
                format!(
                    "its checksum file describes a part of {} bytes with its footer at {} ({} on disk)",
                    sums.len, sums.tail, len
                ),
            ));
        }
        let tail = read_at(path, &file, sums.tail..len)?;
        let found = crc32fast::hash(&tail);
        let stored = sums.crcs[sums.crcs.len() - 1];
        if found != stored {
            return Err(damaged(
                path,
                format!(
                    "bytes {}..{len} (footer and page index) fail their CRC-32 (stored {stored:08x}, computed {found:08x})",
                    sums.tail
                ),
            ));
        }
        let tail_reader = TailReader {
            len,
            start: sums.tail,
            bytes: tail,
        };
        let metadata =
            ArrowReaderMetadata::load(&tail_reader, reader_options()).map_err(parquet_err)?;
        let (starts, tail_start) =
            segment_starts(metadata.metadata(), len).map_err(|m| damaged(path, m))?;
        if tail_start != sums.tail || starts.len() != sums.crcs.len() {
            return Err(damaged(
                path,
                format!(
                    "its checksum file lists {} segments with the footer at {}, the footer gives {} with the footer at {tail_start}",
                    sums.crcs.len(),
                    sums.tail,
                    starts.len()
                ),
            ));
        }
        OpenedPart {
            metadata,
            checksums: Some(Arc::new(PartChecksums {
                path: path.to_owned(),
                len,
                starts,
                crcs: sums.crcs,
            })),
            deleted: None,
        }
    };
    let rows = opened.metadata.metadata().file_metadata().num_rows();
    if u64::try_from(rows).ok() != Some(expected_rows) {
        return Err(damaged(
            path,
            format!("{rows} rows in its footer, the manifest says {expected_rows}"),
        ));
    }
    Ok(opened)
}
