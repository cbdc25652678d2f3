//! The damage check shared by the fuzz target `damaged_parts` and the property test in
//! `tests/checksums.rs`: bytes of a part (or of its checksum file) are flipped, the part is read,
//! and the read must fail naming the part or return exactly the values written; `check_part`
//! must report any change to the part's bytes.

use std::path::Path;

use arrow::record_batch::RecordBatch;

use crate::checksum::{check_part, checksum_path};
use crate::manifest::PartEntry;
use crate::part::read_part_batches;

/// A written part and what reading it gave while it was intact.
pub struct IntactPart<'a> {
    pub path: &'a Path,
    pub entry: &'a PartEntry,
    pub bytes: &'a [u8],
    pub checksum_file: &'a [u8],
    pub batches: &'a [RecordBatch],
}

/// Applies `flips` (offset taken modulo the file's length, XOR mask) to the part, or to its
/// checksum file when `in_checksum_file`, reads it, restores it, and describes a violation.
pub fn check_damaged_read(
    part: &IntactPart<'_>,
    flips: &[(usize, u8)],
    in_checksum_file: bool,
) -> Result<(), String> {
    let (target, clean) = if in_checksum_file {
        (checksum_path(part.path), part.checksum_file)
    } else {
        (part.path.to_owned(), part.bytes)
    };
    if clean.is_empty() {
        return Ok(());
    }
    let mut damaged = clean.to_vec();
    for &(offset, mask) in flips {
        damaged[offset % clean.len()] ^= mask;
    }
    let write = |bytes: &[u8]| std::fs::write(&target, bytes).map_err(|e| e.to_string());
    write(&damaged)?;
    let read = read_part_batches(part.path, part.entry);
    let checked = check_part(part.path, part.entry).0;
    write(clean)?;
    let name = part.path.display().to_string();
    match read {
        Ok(batches) if batches != part.batches => {
            return Err(format!(
                "flips {flips:?}: the part read as different values"
            ));
        }
        Err(e) if !e.to_string().contains(&name) => {
            return Err(format!(
                "flips {flips:?}: the error does not name the part: {e}"
            ));
        }
        _ => {}
    }
    if damaged != clean && checked.is_empty() {
        return Err(format!("flips {flips:?}: check_part found nothing"));
    }
    Ok(())
}
