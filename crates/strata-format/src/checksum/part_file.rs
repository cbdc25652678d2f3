//! Verified reads: a part file as parquet's `ChunkReader`.

use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use crate::error::FormatError;
use crate::held::StoredFile;

use super::segments::PartChecksums;
use super::{damaged, read_at};

/// A part file as parquet's [`ChunkReader`]: with checksums, every read is verified first and a
/// damaged byte is an error naming the part, never a value.
#[derive(Debug, Clone)]
pub struct PartFile {
    path: PathBuf,
    file: StoredFile,
    len: u64,
    checksums: Option<Arc<PartChecksums>>,
}

impl PartFile {
    pub fn open(path: &Path, checksums: Option<Arc<PartChecksums>>) -> Result<Self, FormatError> {
        let file = StoredFile::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = file.size().map_err(|e| FormatError::io(path, e))?;
        Ok(PartFile {
            path: path.to_owned(),
            file,
            len,
            checksums,
        })
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes, FormatError> {
        match &self.checksums {
            Some(sums) => sums.read_verified(&self.file, range),
            None => {
                if range.end > self.len {
                    return Err(damaged(
                        &self.path,
                        format!("read of bytes {}..{} past its end", range.start, range.end),
                    ));
                }
                read_at(&self.path, &self.file, range)
            }
        }
    }
}

impl Length for PartFile {
    fn len(&self) -> u64 {
        self.len
    }
}

/// What [`PartFile::get_read`] returns: verified bytes in memory, or the unverified file.
pub enum PartRead {
    Verified(bytes::buf::Reader<Bytes>),
    Unverified(std::io::BufReader<Box<dyn Read + Send>>),
}

impl Read for PartRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            PartRead::Verified(r) => r.read(buf),
            PartRead::Unverified(r) => r.read(buf),
        }
    }
}

impl ChunkReader for PartFile {
    type T = PartRead;

    /// With checksums, the bytes from `start` to the end of its segment (the parquet reader
    /// streams only page headers and the footer's last 8 bytes, each inside one segment).
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        match &self.checksums {
            Some(sums) => {
                let end = sums
                    .covering(start..start.saturating_add(1).min(self.len))
                    .map_err(external)?
                    .end;
                let bytes = self.read(start.min(end)..end).map_err(external)?;
                Ok(PartRead::Verified(bytes.reader()))
            }
            None => Ok(PartRead::Unverified(std::io::BufReader::new(
                self.file.get_read(start)?,
            ))),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.read(start..start.saturating_add(length as u64))
            .map_err(external)
    }
}

fn external(e: FormatError) -> ParquetError {
    ParquetError::External(Box::new(e))
}
