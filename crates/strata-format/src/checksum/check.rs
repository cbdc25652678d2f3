//! Whole-file XXH64 checks, and everything `strata check` verifies of one part.

use std::hash::Hasher as _;
use std::io::Read;
use std::path::Path;

use crate::error::FormatError;
use crate::held::StoredFile;
use crate::manifest::PartEntry;

use super::damaged;
use super::open::open_part;

/// Checks a part's whole-file XXH64 against its manifest entry (a no-op for parts without one).
pub fn verify_file_hash(path: &Path, entry: &PartEntry) -> Result<(), FormatError> {
    match &entry.xxh64 {
        Some(expected) => verify_hash(path, expected),
        None => Ok(()),
    }
}

/// Checks a file's whole-file XXH64 against `expected` (16 hex digits).
pub(crate) fn verify_hash(path: &Path, expected: &str) -> Result<(), FormatError> {
    let found = format!("{:016x}", file_hash(path)?);
    if found != expected {
        return Err(damaged(
            path,
            format!("its XXH64 is {found}, the manifest says {expected}"),
        ));
    }
    Ok(())
}

fn file_hash(path: &Path) -> Result<u64, FormatError> {
    // A held file is hashed where it lies; a file on disk through a buffer no larger than the
    // file (a commit's small parts are hashed by every merge and checkpoint that reads them, and
    // a zeroed 1 MiB buffer each was the larger part of that cost).
    let file = StoredFile::open(path).map_err(|e| FormatError::io(path, e))?;
    if let StoredFile::Held(bytes) = &file {
        return Ok(twox_hash::XxHash64::oneshot(0, bytes));
    }
    let size = file.size().map_err(|e| FormatError::io(path, e))?;
    let mut reader = file.reader().map_err(|e| FormatError::io(path, e))?;
    let mut hasher = twox_hash::XxHash64::with_seed(0);
    let mut buffer = vec![0u8; usize::try_from(size.clamp(1, 1 << 20)).unwrap_or(1 << 20)];
    loop {
        let n = reader
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
            match StoredFile::open(path) {
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
    let note = match &entry.deletes {
        Some(deletes) => format!(
            "{note}; deletion vector {} verified ({} rows deleted)",
            deletes.file, deletes.rows
        ),
        None => note,
    };
    let note = match (&entry.keys, path.parent()) {
        (Some(keys), Some(parts_dir)) => {
            let found = crate::keys::check_key_file(parts_dir, entry, keys);
            let verified = found.is_empty();
            problems.extend(found);
            if verified {
                format!("{note}; key file {} verified", keys.file)
            } else {
                note
            }
        }
        _ => note,
    };
    let mut note = note;
    if let Some(parts_dir) = path.parent() {
        for index in &entry.indexes {
            let found = crate::indexes::check_index_file(parts_dir, entry, index);
            if found.is_empty() {
                note = format!("{note}; index file {} verified", index.file.file);
            }
            problems.extend(found);
        }
    }
    let note = match (&entry.text_index, path.parent().and_then(Path::parent)) {
        (Some(text), Some(table_dir)) => {
            let found = crate::text_index::check_text_index(table_dir, text);
            let verified = found.is_empty();
            problems.extend(found);
            if verified {
                format!("{note}; text index {} verified", text.file)
            } else {
                note
            }
        }
        _ => note,
    };
    (problems, note)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write as _;

    use super::*;

    #[test]
    fn a_held_file_and_the_same_bytes_on_disk_hash_alike_and_a_changed_byte_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = format!("{:016x}", twox_hash::XxHash64::oneshot(0, &bytes));
        let on_disk = dir.path().join("on-disk");
        std::fs::write(&on_disk, &bytes).unwrap();
        let held_path = dir.path().join("held");
        let ((), _) = crate::durability::deferred(|| {
            let mut out = crate::held::Output::create(&held_path).unwrap();
            out.write_all(&bytes).unwrap();
            out.close().unwrap().place().unwrap();
        });
        assert!(crate::held::is_held(&held_path));
        verify_hash(&on_disk, &expected).unwrap();
        verify_hash(&held_path, &expected).unwrap();

        let mut changed = bytes.clone();
        changed[2_500_000] ^= 1;
        std::fs::write(&on_disk, &changed).unwrap();
        let error = verify_hash(&on_disk, &expected).unwrap_err().to_string();
        assert!(error.contains("on-disk"), "{error}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let empty_hash = format!("{:016x}", twox_hash::XxHash64::oneshot(0, b""));
        verify_hash(&empty, &empty_hash).unwrap();
        crate::held::remove(&held_path);
    }
}
