//! Deletion vectors: which rows of a part are deleted, kept in a file beside the part
//! (ADR 0015).
//!
//! Parts are immutable, so a document that is deleted (or replaced by a newer version) stays in
//! its part and its row position is added to the part's deletion vector. A deletion vector file
//! `parts/<part>.<version>.dv` holds exactly one Apache Iceberg `deletion-vector-v1` blob (the
//! Puffin specification; Delta Lake's deletion vectors store the same bytes):
//!
//! | bytes | what |
//! |---|---|
//! | 4 | length of the magic and the bitmap together, big-endian |
//! | 4 | magic `D1 D3 39 64` |
//! | n | the deleted row positions as a 64-bit roaring bitmap, "portable" serialization |
//! | 4 | CRC-32 (ISO-HDLC, as zlib's) of the magic and the bitmap, big-endian |
//!
//! so that publishing a table to Iceberg readers (issue 16) copies the bytes into a Puffin file.
//! Positions are 0-based over the whole part, across row groups (as `KeyRun::start`).
//!
//! Invariants, checked when a vector is read: the blob is whole (its length field, magic and
//! CRC match), every position is below the part's row count, and the vector holds exactly the
//! number of rows its manifest entry ([`PartDeletes::rows`]) says. A vector is cumulative: a new
//! one for a part holds every position of the previous one, which a commit retires.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use parquet::arrow::arrow_reader::RowSelection;
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

use crate::derived::Derived;
use crate::error::FormatError;
use crate::manifest::Manifest;

/// The magic that starts the bitmap of a `deletion-vector-v1` blob.
pub const DELETION_VECTOR_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
/// File name suffix of deletion vector files.
pub const DELETION_VECTOR_SUFFIX: &str = ".dv";

/// A part's current deletion vector, as its manifest entry lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartDeletes {
    /// File name inside `parts/`.
    pub file: String,
    /// Deleted rows (the bitmap's cardinality).
    pub rows: u64,
    /// Size of the file.
    pub bytes: u64,
    /// The vector as written, when this process wrote it ([`deletion_vector`] reads no file).
    #[serde(skip)]
    pub vector: Derived<DeletionVector>,
}

/// Deleted row positions of one part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeletionVector {
    positions: RoaringTreemap,
}

impl DeletionVector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `position` deleted; false when it already was.
    pub fn insert(&mut self, position: u64) -> bool {
        self.positions.insert(position)
    }

    pub fn contains(&self, position: u64) -> bool {
        self.positions.contains(position)
    }

    /// Number of deleted rows.
    pub fn len(&self) -> u64 {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Adds every position of `other`.
    pub fn union_with(&mut self, other: &DeletionVector) {
        self.positions |= &other.positions;
    }

    /// Whether every position deleted here is deleted in `other` too.
    pub fn is_subset(&self, other: &DeletionVector) -> bool {
        self.positions.is_subset(&other.positions)
    }

    /// The positions deleted here and not in `other`.
    pub fn difference(&self, other: &DeletionVector) -> DeletionVector {
        DeletionVector {
            positions: &self.positions - &other.positions,
        }
    }

    /// How many deleted positions are at most `position`.
    pub fn rank(&self, position: u64) -> u64 {
        self.positions.rank(position)
    }

    /// Deleted positions in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.positions.iter()
    }

    /// The ranges of rows in `0..rows` that are not deleted, in order.
    pub fn kept_ranges(&self, rows: u64) -> Vec<Range<u64>> {
        let mut kept = Vec::new();
        let mut next = 0;
        for position in self.positions.iter().take_while(|&p| p < rows) {
            if position > next {
                kept.push(next..position);
            }
            next = position + 1;
        }
        if next < rows {
            kept.push(next..rows);
        }
        kept
    }

    /// Parquet's row selection of the rows in `0..rows` that are not deleted.
    pub fn kept_selection(&self, rows: u64) -> RowSelection {
        let ranges = self.kept_ranges(rows);
        RowSelection::from_consecutive_ranges(
            ranges.into_iter().map(|r| r.start as usize..r.end as usize),
            rows as usize,
        )
    }

    /// The `deletion-vector-v1` blob of this vector (module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 + self.positions.serialized_size());
        body.extend_from_slice(&DELETION_VECTOR_MAGIC);
        // Writing into a Vec cannot fail.
        let _ = self.positions.serialize_into(&mut body);
        let mut blob = Vec::with_capacity(body.len() + 8);
        blob.extend_from_slice(&(body.len() as u32).to_be_bytes());
        blob.extend_from_slice(&body);
        blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        blob
    }

    /// Reads a `deletion-vector-v1` blob; `path` names it in errors.
    pub fn decode(blob: &[u8], path: &Path) -> Result<DeletionVector, FormatError> {
        let damaged = |message: String| FormatError::Damaged {
            path: path.to_owned(),
            message,
        };
        if blob.len() < 12 {
            return Err(damaged(format!(
                "deletion vector of {} bytes is shorter than its framing",
                blob.len()
            )));
        }
        let length = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
        if length + 8 != blob.len() {
            return Err(damaged(format!(
                "deletion vector says {length} bytes of magic and bitmap, the file holds {}",
                blob.len() - 8
            )));
        }
        let body = &blob[4..4 + length];
        let stored = &blob[4 + length..];
        let crc = u32::from_be_bytes([stored[0], stored[1], stored[2], stored[3]]);
        if crc32fast::hash(body) != crc {
            return Err(damaged("deletion vector CRC-32 mismatch".into()));
        }
        if body[..4] != DELETION_VECTOR_MAGIC {
            return Err(damaged(format!(
                "deletion vector magic {:02x?} is not {:02x?}",
                &body[..4],
                DELETION_VECTOR_MAGIC
            )));
        }
        let positions = RoaringTreemap::deserialize_from(&body[4..])
            .map_err(|e| damaged(format!("deletion vector bitmap: {e}")))?;
        Ok(DeletionVector { positions })
    }
}

/// The file name of `part`'s deletion vector written by the commit that makes `version`:
/// `<part>.<version>-<writer>.dv`, where the writer suffix (process and time) keeps the name
/// unique even when two writers make the same version of a table on object storage, where
/// files are never overwritten (ADR 0022). Names without the suffix (older tables) stay valid.
pub fn deletion_vector_file(part: &str, version: u64) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{part}.{version:010}-{:x}{nanos:x}{count:x}{DELETION_VECTOR_SUFFIX}",
        std::process::id()
    )
}

/// The part a deletion vector file belongs to (None: not a deletion vector's name).
pub fn deletion_vector_part(file: &str) -> Option<&str> {
    let stem = file.strip_suffix(DELETION_VECTOR_SUFFIX)?;
    let (part, version) = stem.rsplit_once('.')?;
    let (digits, writer) = version.split_once('-').unwrap_or((version, ""));
    let named = digits.len() == 10
        && digits.bytes().all(|b| b.is_ascii_digit())
        && writer.bytes().all(|b| b.is_ascii_hexdigit());
    named.then_some(part)
}

/// Writes `vector` as the deletion vector file `file` of the table in `table_dir` (through a
/// temporary file, fsynced, then renamed: a reader never sees it half written), and returns its
/// manifest entry. The caller commits a manifest listing it.
pub fn write_deletion_vector(
    table_dir: &Path,
    file: &str,
    vector: &DeletionVector,
) -> Result<PartDeletes, FormatError> {
    let path = Manifest::part_path(table_dir, file);
    let blob = vector.encode();
    crate::held::write_file(&path, &blob)?;
    Ok(PartDeletes {
        file: file.to_owned(),
        rows: vector.len(),
        bytes: blob.len() as u64,
        vector: Derived::new(Arc::new(vector.clone())),
    })
}

/// The deletion vector `deletes` of a part of `part_rows` rows: the one this process wrote or
/// read already for this entry, or else read and checked ([`read_deletion_vector`]) and kept
/// beside the entry. On a server committing transactions a commit and a point read look at the
/// vectors of the parts holding each key they look up, and after each checkpoint the entries of
/// durable parts come from the manifest on disk, with nothing derived.
pub fn deletion_vector(
    table_dir: &Path,
    deletes: &PartDeletes,
    part_rows: u64,
) -> Result<Arc<DeletionVector>, FormatError> {
    match deletes.vector.get() {
        Some(vector) => Ok(vector.clone()),
        None => {
            let vector = read_deletion_vector(table_dir, deletes, part_rows)?;
            Ok(deletes.vector.fill(Arc::new(vector)))
        }
    }
}

/// Reads the deletion vector `deletes` of a part of `part_rows` rows and checks it against its
/// entry (module docs).
pub fn read_deletion_vector(
    table_dir: &Path,
    deletes: &PartDeletes,
    part_rows: u64,
) -> Result<DeletionVector, FormatError> {
    let path = Manifest::part_path(table_dir, &deletes.file);
    let blob = crate::held::read(&path).map_err(|e| FormatError::io(&path, e))?;
    decode_checked(&blob, &path, deletes, part_rows)
}

/// Decodes a deletion vector's bytes, read from wherever, and checks them against its entry.
pub fn decode_checked(
    blob: &[u8],
    path: &Path,
    deletes: &PartDeletes,
    part_rows: u64,
) -> Result<DeletionVector, FormatError> {
    let damaged = |message: String| FormatError::Damaged {
        path: path.to_owned(),
        message,
    };
    if blob.len() as u64 != deletes.bytes {
        return Err(damaged(format!(
            "deletion vector of {} bytes, the manifest says {}",
            blob.len(),
            deletes.bytes
        )));
    }
    let vector = DeletionVector::decode(blob, path)?;
    if vector.len() != deletes.rows {
        return Err(damaged(format!(
            "deletion vector holds {} rows, the manifest says {}",
            vector.len(),
            deletes.rows
        )));
    }
    if let Some(last) = vector.positions.max()
        && last >= part_rows
    {
        return Err(damaged(format!(
            "deletion vector deletes row {last} of a part of {part_rows} rows"
        )));
    }
    Ok(vector)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vector(positions: &[u64]) -> DeletionVector {
        let mut v = DeletionVector::new();
        for &p in positions {
            v.insert(p);
        }
        v
    }

    /// The bytes the specifications give for this vector, written out by hand: Iceberg's framing
    /// and magic, the portable 64-bit roaring layout (a little-endian count of 32-bit bitmaps,
    /// each a little-endian high key and a portable 32-bit bitmap, RoaringFormatSpec) and the CRC.
    #[test]
    fn the_blob_follows_the_deletion_vector_v1_layout() {
        let blob = vector(&[1, 3, 70_000]).encode();
        #[rustfmt::skip]
        let bitmap: &[u8] = &[
            1, 0, 0, 0, 0, 0, 0, 0, // one 32-bit bitmap
            0, 0, 0, 0,             // its high key: 0
            0x3A, 0x30, 0, 0,       // cookie 12346: no run containers, offsets present
            2, 0, 0, 0,             // two containers
            0, 0, 1, 0,             // key 0, cardinality − 1 = 1
            1, 0, 0, 0,             // key 1, cardinality − 1 = 0
            24, 0, 0, 0,            // offset of container 0
            28, 0, 0, 0,            // offset of container 1
            1, 0, 3, 0,             // container 0: 1, 3
            0x70, 0x11,             // container 1: 70,000 − 65,536 = 4,464
        ];
        let body = [&DELETION_VECTOR_MAGIC[..], bitmap].concat();
        let expected = [
            &(body.len() as u32).to_be_bytes()[..],
            &body,
            &crc32fast::hash(&body).to_be_bytes(),
        ]
        .concat();
        assert_eq!(blob, expected);
        let back = DeletionVector::decode(&blob, Path::new("x.dv")).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), [1, 3, 70_000]);
    }

    #[test]
    fn damage_is_named() {
        let mut blob = vector(&[5]).encode();
        let last = blob.len() - 1;
        blob[last] ^= 1;
        let err = DeletionVector::decode(&blob, Path::new("p.dv")).unwrap_err();
        assert!(err.to_string().contains("CRC-32"), "{err}");
        let err = DeletionVector::decode(&blob[..6], Path::new("p.dv")).unwrap_err();
        assert!(err.to_string().contains("shorter"), "{err}");
        let good = vector(&[5]).encode();
        let entry = PartDeletes {
            file: "p.dv".into(),
            rows: 1,
            bytes: good.len() as u64,
            vector: Derived::default(),
        };
        let err = decode_checked(&good, Path::new("p.dv"), &entry, 5).unwrap_err();
        assert!(
            err.to_string().contains("row 5 of a part of 5 rows"),
            "{err}"
        );
        let wrong_count = PartDeletes { rows: 2, ..entry };
        assert!(decode_checked(&good, Path::new("p.dv"), &wrong_count, 10).is_err());
    }

    #[test]
    fn a_vector_read_for_an_entry_loaded_from_disk_is_kept_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("parts")).unwrap();
        let written = write_deletion_vector(dir.path(), "p.dv", &vector(&[2, 4])).unwrap();
        // As a manifest read from disk has it: nothing derived.
        let loaded = PartDeletes {
            vector: Derived::default(),
            ..written
        };
        let copy = loaded.clone();
        let first = deletion_vector(dir.path(), &loaded, 10).unwrap();
        assert_eq!(first.iter().collect::<Vec<_>>(), [2, 4]);
        // Read once: the entry answers without the file from now on.
        std::fs::remove_file(Manifest::part_path(dir.path(), "p.dv")).unwrap();
        let again = deletion_vector(dir.path(), &loaded, 10).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // A copy made before the read has its own, and goes to the file.
        assert!(deletion_vector(dir.path(), &copy, 10).is_err());
    }

    #[test]
    fn kept_ranges_are_the_complement() {
        assert_eq!(vector(&[]).kept_ranges(4), vec![0..4]);
        assert_eq!(vector(&[0, 1, 5]).kept_ranges(7), vec![2..5, 6..7]);
        assert_eq!(vector(&[2, 3]).kept_ranges(4), vec![0..2]);
        assert!(vector(&[0, 1]).kept_ranges(2).is_empty());
    }

    #[test]
    fn file_names_name_their_part() {
        let file = deletion_vector_file("part-0000000003-1-a-0.parquet", 7);
        assert!(file.starts_with("part-0000000003-1-a-0.parquet.0000000007-"));
        assert_ne!(
            file,
            deletion_vector_file("part-0000000003-1-a-0.parquet", 7)
        );
        assert_eq!(
            deletion_vector_part(&file),
            Some("part-0000000003-1-a-0.parquet")
        );
        assert_eq!(
            deletion_vector_part("part-0000000003-1-a-0.parquet.0000000007.dv"),
            Some("part-0000000003-1-a-0.parquet")
        );
        assert_eq!(deletion_vector_part("p.parquet.0000000007-xyz.dv"), None);
        assert_eq!(deletion_vector_part("part-1.parquet.crc"), None);
        assert_eq!(deletion_vector_part("x.12.dv"), None);
    }
}
