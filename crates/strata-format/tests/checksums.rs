//! Damaged parts: a flipped byte anywhere in a part, its checksum file or its manifest entry is
//! an error naming the part, never a value different from the one written (ADR 0008).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use std::path::Path;

use arrow::record_batch::RecordBatch;
use proptest::prelude::*;
use strata_format::checksum::checksum_path;
use strata_format::selfcheck::{IntactPart, check_damaged_read};
use strata_format::{PartEntry, check_part, read_part_batches, verify_file_hash};

fn write(rows: usize) -> (tempfile::TempDir, PartEntry) {
    common::write_docs(&common::docs(rows), &["kind".to_owned(), "did".to_owned()])
}

fn part_path(dir: &Path) -> std::path::PathBuf {
    dir.join("parts/part.parquet")
}

fn flip(path: &Path, offset: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset] ^= mask;
    std::fs::write(path, bytes).unwrap();
}

/// What a read of the part gives: its batches, or the error's message.
fn read(path: &Path, entry: &PartEntry) -> Result<Vec<RecordBatch>, String> {
    read_part_batches(path, entry).map_err(|e| e.to_string())
}

/// The rule: damage is an error naming the part, or (for bytes no read uses) the same values.
fn assert_error_or_same(path: &Path, entry: &PartEntry, expected: &[RecordBatch], what: &str) {
    match read(path, entry) {
        Ok(batches) => assert_eq!(batches, expected, "{what}: a silently different value"),
        Err(message) => assert!(
            message.contains(&path.display().to_string()),
            "{what}: the error does not name the part: {message}"
        ),
    }
}

#[test]
fn written_parts_have_a_checksum_file_and_a_whole_file_hash() {
    let (dir, entry) = write(20_000);
    let path = part_path(dir.path());
    let hash = entry.xxh64.as_deref().expect("xxh64 in the manifest entry");
    assert_eq!(hash.len(), 16);
    assert!(checksum_path(&path).exists());
    verify_file_hash(&path, &entry).unwrap();
    let (problems, note) = check_part(&path, &entry);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(note.contains("segments verified"), "{note}");
    assert_eq!(
        read(&path, &entry)
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        20_000
    );
}

#[test]
fn flipped_bytes_in_pages_and_footer_are_errors_naming_the_part() {
    let (dir, entry) = write(20_000);
    let path = part_path(dir.path());
    let clean = std::fs::read(&path).unwrap();
    let expected = read(&path, &entry).unwrap();
    let len = clean.len();
    // Offsets across the data pages, the page index and the footer (the last 8 bytes are the
    // footer length and magic).
    let offsets = [
        4,
        64,
        len / 7,
        len / 3,
        len / 2,
        2 * len / 3,
        len - 4_000,
        len - 200,
        len - 9,
        len - 2,
    ];
    for offset in offsets {
        flip(&path, offset, 0x5a);
        let result = read(&path, &entry);
        let Err(message) = result else {
            panic!("a flip at {offset} of {len} read without error");
        };
        assert!(
            message.contains(&path.display().to_string()) && message.contains("damaged"),
            "flip at {offset}: {message}"
        );
        let (problems, _) = check_part(&path, &entry);
        assert!(!problems.is_empty(), "check missed a flip at {offset}");
        assert!(verify_file_hash(&path, &entry).is_err());
        std::fs::write(&path, &clean).unwrap();
    }
    // The 4-byte magic at the start is read by no reader: a flip there changes no value, and the
    // whole-file hash (merges, `strata check`) still sees it.
    flip(&path, 1, 0xff);
    assert_error_or_same(&path, &entry, &expected, "magic");
    assert!(verify_file_hash(&path, &entry).is_err());
    assert!(!check_part(&path, &entry).0.is_empty());
}

#[test]
fn a_damaged_or_missing_checksum_file_is_an_error_naming_the_part() {
    let (dir, entry) = write(5_000);
    let path = part_path(dir.path());
    let sums = checksum_path(&path);
    let clean = std::fs::read(&sums).unwrap();
    for offset in [0, 5, 9, 17, 25, 30, clean.len() / 2, clean.len() - 1] {
        flip(&sums, offset, 0x01);
        let message = read(&path, &entry).expect_err("damaged checksum file accepted");
        assert!(message.contains("part.parquet"), "{message}");
        std::fs::write(&sums, &clean).unwrap();
    }
    std::fs::remove_file(&sums).unwrap();
    let message = read(&path, &entry).expect_err("missing checksum file accepted");
    assert!(
        message.contains("checksum file") && message.contains("missing"),
        "{message}"
    );
}

#[test]
fn the_manifest_entry_must_agree_with_the_part() {
    let (dir, entry) = write(5_000);
    let path = part_path(dir.path());
    let rows = PartEntry {
        rows: entry.rows + 1,
        ..entry.clone()
    };
    let message = read(&path, &rows).expect_err("row count not checked");
    assert!(message.contains("rows"), "{message}");
    let bytes = PartEntry {
        bytes: entry.bytes - 1,
        ..entry.clone()
    };
    assert!(read(&path, &bytes).is_err(), "size not checked");
    let hash = PartEntry {
        xxh64: Some("0000000000000000".to_owned()),
        deletes: None,
        keys: None,
        ..entry.clone()
    };
    assert!(verify_file_hash(&path, &hash).is_err());
    assert!(!check_part(&path, &hash).0.is_empty());
}

#[test]
fn parts_without_checksums_still_read() {
    let (dir, entry) = write(5_000);
    let path = part_path(dir.path());
    let expected = read(&path, &entry).unwrap();
    // A part written before checksums: no checksum file, no xxh64 in its entry.
    std::fs::remove_file(checksum_path(&path)).unwrap();
    let legacy = PartEntry {
        xxh64: None,
        deletes: None,
        keys: None,
        ..entry
    };
    assert_eq!(read(&path, &legacy).unwrap(), expected);
    let (problems, note) = check_part(&path, &legacy);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(note.contains("before checksums"), "{note}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any damage (1–4 bytes anywhere in the part or its checksum file, any bits) is an error
    /// naming the part or leaves every value as written; `check_part` reports every change to the
    /// part (the same check as the fuzz target `damaged_parts`).
    #[test]
    fn damaged_parts_never_read_as_different_values(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..=4),
        in_checksum_file in proptest::bool::weighted(0.2),
    ) {
        let (dir, entry) = write(3_000);
        let path = part_path(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let checksum_file = std::fs::read(checksum_path(&path)).unwrap();
        let batches = read(&path, &entry).unwrap();
        let part = IntactPart {
            path: &path,
            entry: &entry,
            bytes: &bytes,
            checksum_file: &checksum_file,
            batches: &batches,
        };
        if let Err(violation) = check_damaged_read(&part, &flips, in_checksum_file) {
            prop_assert!(false, "{}", violation);
        }
    }
}
