//! The names of a data directory's tables, listed again only when the directory may have
//! changed.
//!
//! A transaction block pins every table when it begins (one snapshot of all of them), so the
//! server asks for the names at every `BEGIN`. Listing them reads the directory and looks for a
//! manifest in each entry: about a twentieth of the server's CPU in the booking benchmark, for
//! an answer that changes only when a table is created or dropped.
//!
//! A table's directory is created or removed in the data directory, which changes the data
//! directory's modification time; a table exists once its manifest is in its directory, which
//! does not. So a listing is kept with the modification time it was taken at, and with the
//! entries that had a valid table name but no manifest yet (`pending`, normally none: a table
//! being created, or one whose creation was interrupted), which are looked at again on every
//! call.
//!
//! Invariant: a kept listing is answered only while the data directory's stamp
//! (`strata_format::stamp`: identity and modification time) is the one read before it was
//! listed, and that stamp was settled: a change made within the clock tick after a listing may
//! leave the modification time as it was, and a listing of a directory that had not changed for
//! a while before it was taken cannot meet such a change unseen.

use std::fs;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use strata_format::manifest::MANIFEST_FILE;
use strata_format::stamp::Stamp;

use crate::error::EngineError;
use crate::table::validate_table_name;

/// The kept listing of one data directory (see the module docs).
#[derive(Default)]
pub(crate) struct TableNames {
    kept: Mutex<Option<Listing>>,
}

struct Listing {
    /// The data directory's stamp, read just before it was listed.
    stamp: Option<Stamp>,
    /// Table names, sorted.
    names: Vec<String>,
    /// Entries with a valid table name and no manifest when listed.
    pending: Vec<String>,
}

impl TableNames {
    /// The names of the tables in `root`, sorted.
    pub(crate) fn of(&self, root: &Path) -> Result<Vec<String>, EngineError> {
        let read_at = SystemTime::now();
        let stamp = match fs::metadata(root) {
            Ok(metadata) => Stamp::of(&metadata, read_at),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(EngineError::io(root, e)),
        };
        {
            let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if let (Some(listing), Some(stamp)) = (kept.as_ref(), &stamp)
                && listing
                    .stamp
                    .as_ref()
                    .is_some_and(|listed| listed.still_holds(stamp))
                && !listing
                    .pending
                    .iter()
                    .any(|name| root.join(name).join(MANIFEST_FILE).exists())
            {
                return Ok(listing.names.clone());
            }
        }
        let listing = list(root, stamp)?;
        let names = listing.names.clone();
        *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(listing);
        Ok(names)
    }
}

/// Reads `root` (stamped `stamp` just before): its table names (sorted) and its pending
/// entries.
fn list(root: &Path, stamp: Option<Stamp>) -> Result<Listing, EngineError> {
    let mut names = Vec::new();
    let mut pending = Vec::new();
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Listing {
                stamp,
                names,
                pending,
            });
        }
        Err(e) => return Err(EngineError::io(root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if validate_table_name(&name).is_err() {
            continue;
        }
        match entry.path().join(MANIFEST_FILE).exists() {
            true => names.push(name),
            false => pending.push(name),
        }
    }
    names.sort();
    Ok(Listing {
        stamp,
        names,
        pending,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn create_table(root: &Path, name: &str) {
        fs::create_dir_all(root.join(name)).unwrap();
        fs::write(root.join(name).join(MANIFEST_FILE), b"{}").unwrap();
    }

    /// Whether the kept listing would answer while the directory stays as it is.
    fn kept_settled(names: &TableNames) -> bool {
        let kept = names.kept.lock().unwrap();
        let stamp = kept.as_ref().unwrap().stamp.clone().unwrap();
        stamp.still_holds(&stamp)
    }

    /// Sets the data directory's modification time `age` into the past.
    fn age(root: &Path, age: Duration) {
        let file = fs::File::open(root).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    #[test]
    fn a_settled_listing_is_kept_and_a_change_of_the_directory_lists_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        create_table(root, "b");
        create_table(root, "a");
        fs::create_dir(root.join(".wal")).unwrap();
        age(root, Duration::from_secs(10));
        let names = TableNames::default();
        assert_eq!(names.of(root).unwrap(), ["a", "b"]);
        assert!(
            names.kept.lock().unwrap().is_some(),
            "a settled listing is kept"
        );

        // A manifest removed without the directory changing: the kept listing still answers
        // (the caller finds no manifest to pin), which shows that it is the one answering.
        fs::remove_file(root.join("b").join(MANIFEST_FILE)).unwrap();
        assert_eq!(names.of(root).unwrap(), ["a", "b"]);

        // A table created: the directory's time changes and the names are listed again.
        create_table(root, "c");
        assert_eq!(names.of(root).unwrap(), ["a", "c"]);
    }

    #[test]
    fn a_listing_of_a_directory_changed_just_before_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        create_table(root, "a");
        let names = TableNames::default();
        assert_eq!(names.of(root).unwrap(), ["a"]);
        assert!(!kept_settled(&names));
    }

    #[test]
    fn a_table_whose_manifest_appears_later_is_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        create_table(root, "a");
        fs::create_dir(root.join("new")).unwrap();
        age(root, Duration::from_secs(10));
        let names = TableNames::default();
        assert_eq!(names.of(root).unwrap(), ["a"]);
        assert!(kept_settled(&names));
        // The manifest of the new table's first commit: the data directory does not change.
        let before = fs::metadata(root).unwrap().modified().unwrap();
        fs::write(root.join("new").join(MANIFEST_FILE), b"{}").unwrap();
        assert_eq!(fs::metadata(root).unwrap().modified().unwrap(), before);
        assert_eq!(names.of(root).unwrap(), ["a", "new"]);
    }

    #[test]
    fn a_missing_data_directory_has_no_tables() {
        let dir = tempfile::tempdir().unwrap();
        let names = TableNames::default();
        assert!(names.of(&dir.path().join("absent")).unwrap().is_empty());
    }
}
