//! What a file's or directory's metadata says about whether it changed: kept beside something
//! derived from it, so that it is read again only when it may have changed.
//!
//! A file replaced by a rename (a manifest commit) gets a new inode; a directory whose entries
//! change gets a new modification time. Both can repeat: an inode freed by a rename may be
//! given to the next file created, and file systems keep modification times at a clock tick's
//! granularity, so two changes within one tick may leave the time as it was. So a stamp is
//! trusted ([`Stamp::settled`]) only when the modification time it holds was at least
//! [`SETTLED`] older than the moment the metadata was read: whatever changes the file or
//! directory after that moment gives it a newer modification time.

use std::fs::Metadata;
use std::time::{Duration, SystemTime};

/// How much older than the reading a modification time must be for its stamp to be trusted:
/// far above any file system's timestamp granularity.
pub const SETTLED: Duration = Duration::from_secs(1);

/// The identity and modification time of a file or directory, as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: SystemTime,
    /// Whether `modified` was at least [`SETTLED`] old when this was read.
    settled: bool,
}

impl Stamp {
    /// The stamp of `metadata`, read just before `read_at`.
    pub fn of(metadata: &Metadata, read_at: SystemTime) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let modified = metadata.modified().ok()?;
        let settled = read_at
            .duration_since(modified)
            .is_ok_and(|age| age >= SETTLED);
        Some(Stamp {
            device: metadata.dev(),
            inode: metadata.ino(),
            len: metadata.len(),
            modified,
            settled,
        })
    }

    /// Whether what was derived under `self` still holds for a file now stamped `now`: the same
    /// file, unchanged, and `self` settled.
    pub fn still_holds(&self, now: &Stamp) -> bool {
        self.settled
            && self.device == now.device
            && self.inode == now.inode
            && self.len == now.len
            && self.modified == now.modified
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_stamp_holds_only_for_the_same_settled_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let fresh = Stamp::of(&std::fs::metadata(&path).unwrap(), SystemTime::now()).unwrap();
        assert!(!fresh.still_holds(&fresh), "just written: not settled");

        let old = SystemTime::now() - Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let read = || Stamp::of(&std::fs::metadata(&path).unwrap(), SystemTime::now()).unwrap();
        let settled = read();
        assert!(settled.still_holds(&read()));

        // Replaced by a rename, as a manifest commit replaces it: another inode.
        let next = dir.path().join("next");
        std::fs::write(&next, b"two").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&next)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(!settled.still_holds(&read()));
    }
}
