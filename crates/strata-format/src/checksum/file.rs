//! The checksum file `parts/<part>.crc`: writing it beside a new part, and reading it back.

use std::hash::Hasher as _;
use std::io::Read;
use std::path::Path;

use parquet::file::metadata::ParquetMetaData;

use crate::error::FormatError;
use crate::held::StoredFile;
use crate::manifest::sync_dir;

use super::segments::segment_starts;
use super::{checksum_path, damaged};

const MAGIC: &[u8; 4] = b"SCRC";
const CHECKSUM_FILE_VERSION: u32 = 1;
/// Magic, version, part length, tail start, segment count.
const HEADER_BYTES: usize = 4 + 4 + 8 + 8 + 4;

/// Computes the checksums of the complete part file `content` (written at `path`, not yet
/// visible; `metadata` is its footer's, page index included, as its writer wrote it), writes
/// its checksum file durably (or holds it: [`crate::held`]) and returns the whole file's XXH64
/// for the manifest. The checksum file is written as `checksum_path(final_path)`.
pub fn write_checksums(
    content: &StoredFile,
    metadata: &ParquetMetaData,
    path: &Path,
    final_path: &Path,
) -> Result<u64, FormatError> {
    let len = content.size().map_err(|e| FormatError::io(path, e))?;
    let (starts, tail) = segment_starts(metadata, len).map_err(|m| damaged(path, m))?;
    // One sequential pass: each segment's CRC and the whole file's hash.
    let mut hasher = twox_hash::XxHash64::with_seed(0);
    let mut crcs = Vec::with_capacity(starts.len());
    let data = content.reader().map_err(|e| FormatError::io(path, e))?;
    // Buffers of at most the file's size: a transaction's part is often a few KB, for which
    // allocating and zeroing two MiB is wasted work.
    let chunk = usize::try_from(len).unwrap_or(usize::MAX).clamp(1, 1 << 20);
    let mut reader = std::io::BufReader::with_capacity(chunk, data);
    let mut buffer = vec![0u8; chunk];
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
    crate::held::write_file(&target, &out)?;
    if let Some(dir) = target.parent() {
        sync_dir(dir)?;
    }
    Ok(hasher.finish())
}

/// Where the footer and page index of the part at `path` start, from its checksum file: the
/// bytes a reader needs to open the part (a copy of a remote part keeps only these).
pub fn footer_start(part_path: &Path) -> Result<u64, FormatError> {
    let sums = read_checksum_file(part_path)?;
    if sums.tail > sums.len {
        return Err(damaged(
            part_path,
            format!(
                "its checksum file puts the footer at {} in a part of {} bytes",
                sums.tail, sums.len
            ),
        ));
    }
    Ok(sums.tail)
}

/// The parsed header and CRCs of a checksum file.
pub(super) struct ChecksumFile {
    pub(super) len: u64,
    pub(super) tail: u64,
    pub(super) crcs: Vec<u32>,
}

pub(super) fn read_checksum_file(part_path: &Path) -> Result<ChecksumFile, FormatError> {
    let path = checksum_path(part_path);
    let bytes = match crate::held::read(&path) {
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
