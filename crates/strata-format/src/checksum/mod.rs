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
//! byte ranges and buffers; the query scan reads through [`VerifiedPartReader`], parquet's
//! `AsyncFileReader` over an `object_store`, which widens every read to whole segments the same
//! way and verifies them before handing out a byte. `PartFile` serves the synchronous readers
//! (merges, exports, `strata check`).
//!
//! Parts written before checksums existed have no `xxh64` in their entry and no checksum file;
//!
//! Modules: [`segments`] (segment boundaries and their verification), [`file`] (the checksum
//! file's bytes), [`open`] (verified footers), [`part_file`] (verified synchronous reads),
//! [`store_reader`] (verified reads through an object store), [`check`] (whole-file hashes and
//! `strata check`).

mod check;
mod file;
mod open;
mod part_file;
mod segments;
mod store_reader;

use std::ops::Range;

use bytes::Bytes;
use std::path::{Path, PathBuf};

use crate::error::FormatError;
use crate::held::StoredFile;

pub(crate) use check::verify_hash;
pub use check::{check_part, verify_file_hash};
pub use file::{footer_start, write_checksums};
pub(crate) use open::open_verified;
pub use open::{OpenedPart, open_part};
pub use part_file::{PartFile, PartRead};
pub use segments::PartChecksums;
pub use store_reader::VerifiedPartReader;

/// Suffix of a part's checksum file, next to the part in `parts/`.
pub const CHECKSUM_SUFFIX: &str = ".crc";

/// The checksum file of the part file at `part_path`.
pub fn checksum_path(part_path: &Path) -> PathBuf {
    let mut name = part_path.as_os_str().to_owned();
    name.push(CHECKSUM_SUFFIX);
    PathBuf::from(name)
}

pub(super) fn damaged(path: &Path, message: impl Into<String>) -> FormatError {
    FormatError::Damaged {
        path: path.to_owned(),
        message: message.into(),
    }
}

pub(super) fn read_at(
    path: &Path,
    file: &StoredFile,
    range: Range<u64>,
) -> Result<Bytes, FormatError> {
    file.read_range(range).map_err(|e| FormatError::io(path, e))
}
