//! The files a table's manifest lists as retired (no longer part of the table, kept for the
//! readers of older versions until garbage collection deletes them), shared between the
//! manifest's versions.
//!
//! A busy server's tables retire files at every commit (each deletion vector a commit
//! replaces) and collect them only when no reader holds a lease from before, so the list holds
//! hundreds to thousands of names while commits keep adding to it. Copied whole by every
//! commit, it was 11 % of the server's CPU under sysbench's 50/50 update mix (a name allocated
//! and copied per entry per commit). [`RetiredList`] keeps it in chunks shared between versions:
//! a version adds one chunk, so a commit copies a list of chunk pointers, and chunks are joined
//! into one once there are [`MAX_CHUNKS`] (one full copy per that many commits).
//!
//! Invariant: the list's order is the order files were retired in, whatever its chunks; in the
//! manifest's JSON it is a plain list, as before chunks existed.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A retired file of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPart {
    pub file: String,
    /// Seconds since the Unix epoch when the merge that replaced it committed.
    pub retired_at: u64,
}

/// Chunks a list holds before they are joined into one.
const MAX_CHUNKS: usize = 32;

/// The retired files of a manifest, in the order they were retired (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct RetiredList {
    chunks: Vec<Arc<[RetiredPart]>>,
}

impl RetiredList {
    pub fn iter(&self) -> impl Iterator<Item = &RetiredPart> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|chunk| chunk.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(|chunk| chunk.is_empty())
    }

    pub fn contains(&self, retired: &RetiredPart) -> bool {
        self.iter().any(|r| r == retired)
    }

    /// Adds `files` after the ones listed.
    pub fn extend(&mut self, files: impl IntoIterator<Item = RetiredPart>) {
        let chunk: Arc<[RetiredPart]> = files.into_iter().collect();
        if chunk.is_empty() {
            return;
        }
        self.chunks.push(chunk);
        if self.chunks.len() > MAX_CHUNKS {
            let joined: Arc<[RetiredPart]> = self.iter().cloned().collect();
            self.chunks = vec![joined];
        }
    }

    pub fn push(&mut self, retired: RetiredPart) {
        self.extend([retired]);
    }

    /// Keeps only the files `keep` is true of (in order); the list is rebuilt only when one
    /// goes.
    pub fn retain(&mut self, mut keep: impl FnMut(&RetiredPart) -> bool) {
        if self.iter().all(&mut keep) {
            return;
        }
        // `keep` is asked again: a caller's predicate does not change between the two passes.
        let kept: Vec<RetiredPart> = self.iter().filter(|r| keep(r)).cloned().collect();
        *self = RetiredList::from(kept);
    }
}

impl From<Vec<RetiredPart>> for RetiredList {
    fn from(files: Vec<RetiredPart>) -> Self {
        let mut list = RetiredList::default();
        list.extend(files);
        list
    }
}

impl PartialEq for RetiredList {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for RetiredList {}

impl Serialize for RetiredList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for RetiredList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<RetiredPart>::deserialize(deserializer).map(RetiredList::from)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn retired(n: u64) -> RetiredPart {
        RetiredPart {
            file: format!("part-{n}.dv"),
            retired_at: n,
        }
    }

    #[test]
    fn versions_share_chunks_and_keep_the_order_files_were_retired_in() {
        let mut list = RetiredList::default();
        let mut versions = Vec::new();
        for n in 0..100 {
            list.extend([retired(2 * n), retired(2 * n + 1)]);
            versions.push(list.clone());
        }
        assert!(list.chunks.len() <= MAX_CHUNKS);
        let expected: Vec<RetiredPart> = (0..200).map(retired).collect();
        assert_eq!(list.iter().cloned().collect::<Vec<_>>(), expected);
        assert_eq!(list.len(), 200);
        // An older version is unchanged by later additions.
        assert_eq!(versions[9].len(), 20);
        assert_eq!(
            versions[9].iter().cloned().collect::<Vec<_>>(),
            expected[..20].to_vec()
        );
        // A new version shares its predecessor's chunks.
        let mut next = list.clone();
        next.push(retired(200));
        assert!(Arc::ptr_eq(&next.chunks[0], &list.chunks[0]));
        assert!(next.contains(&retired(200)) && !list.contains(&retired(200)));
        list.retain(|r| r.retired_at % 2 == 0);
        assert_eq!(list.len(), 100);
        assert!(list.iter().all(|r| r.retired_at % 2 == 0));
        assert!(!list.is_empty());
    }

    #[test]
    fn a_list_is_a_plain_json_list_equal_however_chunked() {
        let mut chunked = RetiredList::default();
        chunked.push(retired(1));
        chunked.extend([retired(2), retired(3)]);
        let json = serde_json::to_string(&chunked).unwrap();
        assert_eq!(
            json,
            r#"[{"file":"part-1.dv","retired_at":1},{"file":"part-2.dv","retired_at":2},{"file":"part-3.dv","retired_at":3}]"#
        );
        let read: RetiredList = serde_json::from_str(&json).unwrap();
        assert_eq!(read, chunked);
        assert_eq!(read.chunks.len(), 1);
        assert_ne!(read, RetiredList::from(vec![retired(1), retired(2)]));
        assert!(RetiredList::default().is_empty());
        assert_eq!(
            serde_json::to_string(&RetiredList::default()).unwrap(),
            "[]"
        );
    }
}
