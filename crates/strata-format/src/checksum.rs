//! Checksums that make every byte of a part a read uses verifiable (ADR 0008).
//!
//! A part written by this build has
//! - an XXH64 of the whole file in its manifest entry ([`PartEntry::xxh64`]), checked by merges
//!   before they read an input and by `strata check`;
//! - a *checksum file* `parts/<part>.crc` ([`CHECKSUM_SUFFIX`]), written and fsynced before the
//!   manifest that lists the part is committed, holding a CRC-32 of every *segment* of the part.
//!
//! Segments partition the part file: their boundaries are offset 0, the start and end of every
//! column chunk, the start of every page in the offset index (so a dictionary page and each data
//! page is a segment of its own) and the *tail start*, the first byte after the last column chunk.
//! The last segment, the tail, holds the page indexes and the footer. The boundaries are derived
//! from the footer alone, so the checksum file stores only the tail start and one CRC per
//! segment, in file order (format in `docs/format.md`).
//!
//! Readers open a part with [`open_part`], which checks the file size, reads the tail whole,
//! verifies its CRC and only then parses the footer from it; the row count in the footer must match
//! the manifest's. Data is then read through [`PartFile`], a parquet [`ChunkReader`] that verifies
//! every segment a read touches before handing out a byte (the parquet reader reads whole pages when
//! the offset index is loaded, so a read is exactly a run of segments and nothing is read twice).
//! The verification itself, [`PartChecksums::covering`] and [`PartChecksums::verify`], works on
//! byte ranges and buffers so that an async reader can call it too.
//!
//! Parts written before checksums existed have no `xxh64` in their entry and no checksum file;
//! they are read unverified, as before.

use std::fs::{self, File};
use std::hash::Hasher as _;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::reader::{ChunkReader, Length};

use crate::error::FormatError;
use crate::manifest::{PartEntry, sync_dir};

/// Suffix of a part's checksum file, next to the part in `parts/`.
pub const CHECKSUM_SUFFIX: &str = ".crc";
const MAGIC: &[u8; 4] = b"SCRC";
const CHECKSUM_FILE_VERSION: u32 = 1;
/// Magic, version, part length, tail start, segment count.
const HEADER_BYTES: usize = 4 + 4 + 8 + 8 + 4;

/// The checksum file of the part file at `part_path`.
pub fn checksum_path(part_path: &Path) -> PathBuf {
    let mut name = part_path.as_os_str().to_owned();
    name.push(CHECKSUM_SUFFIX);
    PathBuf::from(name)
}

fn damaged(path: &Path, message: impl Into<String>) -> FormatError {
    FormatError::Damaged {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// The segments of a verified part and their CRC-32s.
#[derive(Debug)]
pub struct PartChecksums {
    path: PathBuf,
    len: u64,
    /// Start of each segment, ascending; segment `i` ends where `i + 1` starts (the last at `len`).
    starts: Vec<u64>,
    crcs: Vec<u32>,
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
    pub fn read_verified(&self, file: &File, range: Range<u64>) -> Result<Bytes, FormatError> {
        let cover = self.covering(range.clone())?;
        let bytes = read_at(&self.path, file, cover.clone())?;
        self.verify(cover.start, &bytes)?;
        let bytes = Bytes::from(bytes);
        Ok(bytes.slice((range.start - cover.start) as usize..(range.end - cover.start) as usize))
    }

    /// Verifies every segment of the part; returns the damaged ones as messages.
    pub fn verify_all(&self, file: &File) -> Vec<String> {
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

fn read_at(path: &Path, file: &File, range: Range<u64>) -> Result<Vec<u8>, FormatError> {
    let mut buffer = vec![0; (range.end - range.start) as usize];
    file.read_exact_at(&mut buffer, range.start)
        .map_err(|e| FormatError::io(path, e))?;
    Ok(buffer)
}

/// Segment starts of a part of `len` bytes whose footer is `metadata` (see the module docs),
/// and its tail start.
fn segment_starts(metadata: &ParquetMetaData, len: u64) -> Result<(Vec<u64>, u64), String> {
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

fn reader_options() -> ArrowReaderOptions {
    ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional)
}

/// Computes the checksums of the complete part file at `path` (not yet visible), writes its
/// checksum file durably and returns the whole file's XXH64 for the manifest.
///
/// `path` may be the part's temporary name; the checksum file is written as
/// `checksum_path(final_path)` (through a `.tmp` file and a rename).
pub fn write_checksums(path: &Path, final_path: &Path) -> Result<u64, FormatError> {
    let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    let metadata = ArrowReaderMetadata::load(&file, reader_options()).map_err(|source| {
        FormatError::Parquet {
            path: path.to_owned(),
            source,
        }
    })?;
    let (starts, tail) = segment_starts(metadata.metadata(), len).map_err(|m| damaged(path, m))?;
    // One sequential pass: each segment's CRC and the whole file's hash.
    let mut hasher = twox_hash::XxHash64::with_seed(0);
    let mut crcs = Vec::with_capacity(starts.len());
    // A handle of its own: the footer reader moved the shared offset of `file`.
    let data = File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, data);
    let mut buffer = vec![0u8; 1 << 20];
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(len);
        let mut crc = crc32fast::Hasher::new();
        let mut left = end - start;
        while left > 0 {
            let n = (left as usize).min(buffer.len());
            reader
                .read_exact(&mut buffer[..n])
                .map_err(|e| FormatError::io(path, e))?;
            crc.update(&buffer[..n]);
            hasher.write(&buffer[..n]);
            left -= n as u64;
        }
        crcs.push(crc.finalize());
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + 4 * crcs.len() + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&CHECKSUM_FILE_VERSION.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&tail.to_le_bytes());
    out.extend_from_slice(&(crcs.len() as u32).to_le_bytes());
    for crc in &crcs {
        out.extend_from_slice(&crc.to_le_bytes());
    }
    let own = crc32fast::hash(&out);
    out.extend_from_slice(&own.to_le_bytes());
    let target = checksum_path(final_path);
    let mut tmp_name = target.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut sidecar = File::create(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
    sidecar
        .write_all(&out)
        .and_then(|()| sidecar.sync_all())
        .map_err(|e| FormatError::io(&tmp, e))?;
    drop(sidecar);
    fs::rename(&tmp, &target).map_err(|e| FormatError::io(&target, e))?;
    if let Some(dir) = target.parent() {
        sync_dir(dir)?;
    }
    Ok(hasher.finish())
}

/// The parsed header and CRCs of a checksum file.
struct ChecksumFile {
    len: u64,
    tail: u64,
    crcs: Vec<u32>,
}

fn read_checksum_file(part_path: &Path) -> Result<ChecksumFile, FormatError> {
    let path = checksum_path(part_path);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(damaged(
                part_path,
                format!("its checksum file {} is missing", path.display()),
            ));
        }
        Err(e) => return Err(FormatError::io(path, e)),
    };
    let bad = |message: &str| {
        damaged(
            part_path,
            format!("checksum file {}: {message}", path.display()),
        )
    };
    if bytes.len() < HEADER_BYTES + 4 || &bytes[..4] != MAGIC {
        return Err(bad("not a Strata checksum file"));
    }
    let (body, own) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != own {
        return Err(bad("fails its own CRC-32"));
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
    let u64_at = |at: usize| (u64::from(u32_at(at + 4)) << 32) | u64::from(u32_at(at));
    let version = u32_at(4);
    if version != CHECKSUM_FILE_VERSION {
        return Err(bad(&format!(
            "version {version} (this build reads {CHECKSUM_FILE_VERSION})"
        )));
    }
    let count = u32_at(24) as usize;
    if body.len() != HEADER_BYTES + 4 * count {
        return Err(bad("length does not match its segment count"));
    }
    Ok(ChecksumFile {
        len: u64_at(8),
        tail: u64_at(16),
        crcs: (0..count).map(|i| u32_at(HEADER_BYTES + 4 * i)).collect(),
    })
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
    let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    if len != entry.bytes {
        return Err(damaged(
            path,
            format!("{len} bytes on disk, the manifest says {}", entry.bytes),
        ));
    }
    let parquet_err = |source| FormatError::Parquet {
        path: path.to_owned(),
        source,
    };
    let opened = if entry.xxh64.is_none() {
        OpenedPart {
            metadata: ArrowReaderMetadata::load(&file, reader_options()).map_err(parquet_err)?,
            checksums: None,
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
            bytes: Bytes::from(tail),
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
        }
    };
    let rows = opened.metadata.metadata().file_metadata().num_rows();
    if u64::try_from(rows).ok() != Some(entry.rows) {
        return Err(damaged(
            path,
            format!(
                "{rows} rows in its footer, the manifest says {}",
                entry.rows
            ),
        ));
    }
    Ok(opened)
}

/// Checks a part's whole-file XXH64 against its manifest entry (a no-op for parts without one).
pub fn verify_file_hash(path: &Path, entry: &PartEntry) -> Result<(), FormatError> {
    let Some(expected) = &entry.xxh64 else {
        return Ok(());
    };
    let found = format!("{:016x}", file_hash(path)?);
    if &found != expected {
        return Err(damaged(
            path,
            format!("its XXH64 is {found}, the manifest says {expected}"),
        ));
    }
    Ok(())
}

fn file_hash(path: &Path) -> Result<u64, FormatError> {
    let mut file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut hasher = twox_hash::XxHash64::with_seed(0);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| FormatError::io(path, e))?;
        if n == 0 {
            return Ok(hasher.finish());
        }
        hasher.write(&buffer[..n]);
    }
}

/// Everything `strata check` verifies of one part; returns the problems found (empty: fine) and
/// a note on what was verified.
pub fn check_part(path: &Path, entry: &PartEntry) -> (Vec<String>, String) {
    let mut problems = Vec::new();
    if let Err(e) = verify_file_hash(path, entry) {
        problems.push(e.to_string());
    }
    let opened = match open_part(path, entry) {
        Ok(opened) => opened,
        Err(e) => {
            problems.push(e.to_string());
            return (problems, "could not be opened".to_owned());
        }
    };
    let note = match &opened.checksums {
        Some(sums) => {
            match File::open(path) {
                Ok(file) => problems.extend(sums.verify_all(&file)),
                Err(e) => problems.push(FormatError::io(path, e).to_string()),
            }
            format!(
                "{} rows; whole file, footer and {} segments verified",
                entry.rows,
                sums.segments()
            )
        }
        None => format!(
            "{} rows; written before checksums: footer and row count checked, data decoded",
            entry.rows
        ),
    };
    // Decoding every row also catches damage that checksums cannot (parts without them).
    if problems.is_empty()
        && let Err(e) = crate::part::read_opened(path, &opened, 8192).and_then(|reader| {
            for batch in reader {
                batch.map_err(|source| FormatError::Arrow {
                    path: path.to_owned(),
                    source,
                })?;
            }
            Ok(())
        })
    {
        problems.push(e.to_string());
    }
    (problems, note)
}

/// A part file as parquet's [`ChunkReader`]: with checksums, every read is verified first and a
/// damaged byte is an error naming the part, never a value.
#[derive(Debug, Clone)]
pub struct PartFile {
    path: PathBuf,
    file: Arc<File>,
    len: u64,
    checksums: Option<Arc<PartChecksums>>,
}

impl PartFile {
    pub fn open(path: &Path, checksums: Option<Arc<PartChecksums>>) -> Result<Self, FormatError> {
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        Ok(PartFile {
            path: path.to_owned(),
            file: Arc::new(file),
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
                read_at(&self.path, &self.file, range).map(Bytes::from)
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
    Unverified(std::io::BufReader<File>),
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
        use std::io::Seek;
        match &self.checksums {
            Some(sums) => {
                let end = sums
                    .covering(start..start.saturating_add(1).min(self.len))
                    .map_err(external)?
                    .end;
                let bytes = self.read(start.min(end)..end).map_err(external)?;
                Ok(PartRead::Verified(bytes.reader()))
            }
            None => {
                let mut file = self.file.try_clone()?;
                file.seek(std::io::SeekFrom::Start(start))?;
                Ok(PartRead::Unverified(std::io::BufReader::new(file)))
            }
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
