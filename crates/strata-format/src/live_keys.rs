//! Where the keys written by a live table's logged commits lie (ADR 0029, first stage).
//!
//! Between two checkpoints a keyed table on a server gains a part per commit batch (held in
//! memory: [`crate::held`]), hundreds a second, each holding a few keys from anywhere in the key
//! range. A lookup by key used to ask each of those parts in turn (its key digest); a
//! [`LiveKeys`] answers for the keys those commits wrote, and sends the others to the parts that
//! were there before them.
//!
//! A map belongs to one *live epoch* of a table: from the first logged commit after its
//! manifest on disk until the next durable commit of the table (a checkpoint, a merge, an
//! ingest), which ends the epoch (the engine's `transaction::logged`). Within an epoch the only
//! new versions are logged commits, each of which appends at most one part to the manifest's
//! list and replaces deletion vectors. Hence, for every version of the epoch:
//! - the parts listed when the epoch began (its *base*) are the first `base_parts` parts;
//! - every part after them was written by a commit of the epoch, and each key it holds is
//!   recorded here with that commit's version and its row.
//!
//! Invariants: a commit's writes are recorded before the manifest holding them is published,
//! one version after another; a manifest carries its epoch's map ([`LiveKeysRef`]) only as
//! published — a copy of it does not, since whoever copies a manifest may change its parts — so
//! a lookup through the map can rely on the layout above. It checks what is cheap to check (the
//! version is recorded, the base's last part and the named part are where the map says) and
//! declines otherwise: the caller then looks in every part, as without a map.

use std::sync::{Arc, PoisonError, RwLock};

use strata_json::KeyValue;

use crate::manifest::Manifest;

/// Where the keys of one live epoch of a table were written (module docs).
#[derive(Debug)]
pub struct LiveKeys {
    /// How many parts the table listed when the epoch began.
    base_parts: usize,
    /// The file of the last of them (none for an empty base): checked by every lookup.
    base_last: Option<String>,
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The newest version whose writes are all recorded.
    recorded: u64,
    /// Set when a commit could not be recorded: the map answers for no version any more.
    broken: bool,
    /// Each key written in the epoch: its writes, oldest first.
    writes: foldhash::HashMap<KeyValue, Vec<Write>>,
}

/// One commit's write of a key.
#[derive(Debug, Clone)]
struct Write {
    version: u64,
    /// Where the document written lies (the part's place in the manifest's list, its file, the
    /// row); none for a deletion.
    at: Option<(usize, Arc<str>, u64)>,
}

/// Where a key lies in a manifest of the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// Written in the epoch: its live row (the part's place in the manifest's list, the row),
    /// or none when the newest write deleted it.
    Written(Option<(usize, u64)>),
    /// Not written in the epoch up to the manifest's version: only the base parts (the first
    /// [`LiveKeys::base_parts`]) can hold it.
    Base,
}

impl LiveKeys {
    /// The map of an epoch that begins on `base` (the manifest its first commit was applied to).
    pub fn new(base: &Manifest) -> LiveKeys {
        LiveKeys {
            base_parts: base.parts.len(),
            base_last: base.parts.last().map(|part| part.file.clone()),
            state: RwLock::new(State {
                recorded: base.version,
                broken: false,
                writes: Default::default(),
            }),
        }
    }

    /// How many parts the table listed when the epoch began: the parts [`Located::Base`] sends
    /// a lookup to.
    pub fn base_parts(&self) -> usize {
        self.base_parts
    }

    /// Records the writes of the commit that made `manifest` (the epoch's next version):
    /// `written` pairs each key it wrote with the row of its document in `part` (the place in
    /// `manifest.parts` of the part the commit wrote), or none for a deletion. Returns false,
    /// recording nothing, when `manifest` is not the next version of the epoch or does not
    /// list the part: the map then answers for no version any more, and lookups look in every
    /// part.
    pub fn record(
        &self,
        manifest: &Manifest,
        part: Option<usize>,
        written: impl IntoIterator<Item = (KeyValue, Option<u64>)>,
    ) -> bool {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let file = part.and_then(|index| manifest.parts.get(index));
        let in_order = !state.broken
            && manifest.version == state.recorded + 1
            && self.base_holds(manifest)
            && part.is_none_or(|index| index >= self.base_parts)
            && part.is_none() == file.is_none();
        if !in_order {
            drop(state);
            self.abandon();
            return false;
        }
        let file: Option<Arc<str>> = file.map(|entry| Arc::from(entry.file.as_str()));
        let version = manifest.version;
        for (key, row) in written {
            let at = match (row, part, &file) {
                (Some(row), Some(index), Some(file)) => Some((index, file.clone(), row)),
                _ => None,
            };
            state
                .writes
                .entry(key)
                .or_default()
                .push(Write { version, at });
        }
        state.recorded = version;
        true
    }

    /// Gives the map up: a commit of the epoch could not be recorded. Lookups look in every
    /// part from now on.
    pub fn abandon(&self) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        state.broken = true;
        state.writes.clear();
    }

    /// Where each of `keys` lies in `manifest` (a version of the epoch, published or the newest
    /// one under its writer lock); None when the map cannot answer for it (module docs): look
    /// in every part instead.
    pub fn locate(&self, manifest: &Manifest, keys: &[KeyValue]) -> Option<Vec<Located>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if state.broken || manifest.version > state.recorded || !self.base_holds(manifest) {
            return None;
        }
        let mut located = Vec::with_capacity(keys.len());
        for key in keys {
            let newest = state
                .writes
                .get(key)
                .and_then(|writes| writes.iter().rfind(|w| w.version <= manifest.version));
            located.push(match newest {
                None => Located::Base,
                Some(Write { at: None, .. }) => Located::Written(None),
                Some(Write {
                    at: Some((index, file, row)),
                    ..
                }) => {
                    let listed = manifest.parts.get(*index)?;
                    if listed.file.as_str() != &**file {
                        return None;
                    }
                    Located::Written(Some((*index, *row)))
                }
            });
        }
        Some(located)
    }

    /// Whether `manifest` lists the epoch's base parts first, as far as the last of them shows.
    fn base_holds(&self, manifest: &Manifest) -> bool {
        match (&self.base_last, self.base_parts.checked_sub(1)) {
            (Some(last), Some(index)) => manifest
                .parts
                .get(index)
                .is_some_and(|part| &part.file == last),
            _ => true,
        }
    }
}

/// A manifest's [`LiveKeys`], carried only by the manifest it was set on: a copy of the
/// manifest carries none (module docs), and two manifests are equal whatever they carry.
#[derive(Default)]
pub struct LiveKeysRef(Option<Arc<LiveKeys>>);

impl LiveKeysRef {
    pub fn new(keys: Arc<LiveKeys>) -> LiveKeysRef {
        LiveKeysRef(Some(keys))
    }

    pub fn get(&self) -> Option<&Arc<LiveKeys>> {
        self.0.as_ref()
    }
}

impl Clone for LiveKeysRef {
    fn clone(&self) -> LiveKeysRef {
        LiveKeysRef(None)
    }
}

impl PartialEq for LiveKeysRef {
    fn eq(&self, _: &LiveKeysRef) -> bool {
        true
    }
}

impl std::fmt::Debug for LiveKeysRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(_) => f.write_str("LiveKeysRef(set)"),
            None => f.write_str("LiveKeysRef(none)"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::manifest::{PartEntry, TableSettings};

    fn part(file: &str) -> Arc<PartEntry> {
        let value = serde_json::json!({
            "file": file, "rows": 1, "bytes": 1, "columns": {}, "remainder_paths": {},
            "remainder_paths_truncated": false, "sort_key_min": {}, "sort_key_max": {}
        });
        Arc::new(serde_json::from_value(value).unwrap())
    }

    /// A version of the epoch: `files` listed, at `version`.
    fn manifest(version: u64, files: &[&str]) -> Manifest {
        Manifest {
            version,
            parts: files.iter().map(|f| part(f)).collect(),
            ..Manifest::new(TableSettings::sorted_by(Vec::new(), 64))
        }
    }

    fn key(i: i64) -> KeyValue {
        KeyValue::Integer(i)
    }

    #[test]
    fn a_version_sees_the_newest_write_at_or_below_it_and_other_keys_in_the_base() {
        let base = manifest(7, &["d1", "d2"]);
        let keys = LiveKeys::new(&base);
        assert_eq!(keys.base_parts(), 2);
        // v8 writes keys 1 and 2 into part c8; v9 rewrites 1 into c9 and deletes 2; v10 deletes
        // key 5 (of the base) and writes no part.
        let v8 = manifest(8, &["d1", "d2", "c8"]);
        assert!(keys.record(&v8, Some(2), [(key(1), Some(0)), (key(2), Some(1))]));
        let v9 = manifest(9, &["d1", "d2", "c8", "c9"]);
        assert!(keys.record(&v9, Some(3), [(key(1), Some(0)), (key(2), None)]));
        let v10 = manifest(10, &["d1", "d2", "c8", "c9"]);
        assert!(keys.record(&v10, None, [(key(5), None)]));

        let wanted = [key(1), key(2), key(5), key(6)];
        use Located::{Base, Written};
        assert_eq!(
            keys.locate(&v10, &wanted).unwrap(),
            [Written(Some((3, 0))), Written(None), Written(None), Base]
        );
        assert_eq!(
            keys.locate(&v9, &wanted).unwrap(),
            [Written(Some((3, 0))), Written(None), Base, Base]
        );
        assert_eq!(
            keys.locate(&v8, &wanted).unwrap(),
            [Written(Some((2, 0))), Written(Some((2, 1))), Base, Base]
        );
        assert_eq!(
            keys.locate(&base, &wanted).unwrap(),
            [Base, Base, Base, Base]
        );
    }

    #[test]
    fn a_version_not_recorded_or_laid_out_otherwise_is_not_answered_for() {
        let base = manifest(3, &["d1"]);
        let keys = LiveKeys::new(&base);
        let v4 = manifest(4, &["d1", "c4"]);
        assert!(keys.record(&v4, Some(1), [(key(1), Some(0))]));
        // Staged but not recorded yet.
        let v5 = manifest(5, &["d1", "c4", "c5"]);
        assert_eq!(keys.locate(&v5, &[key(9)]), None);
        // A base part merged away, or the written part not where it was.
        assert_eq!(keys.locate(&manifest(4, &["m", "c4"]), &[key(9)]), None);
        assert_eq!(keys.locate(&manifest(4, &["d1", "x"]), &[key(1)]), None);
        assert_eq!(
            keys.locate(&v4, &[key(1)]),
            Some(vec![Located::Written(Some((1, 0)))])
        );
        // Not the next version: recorded nothing, and no version is answered for any more.
        assert!(!keys.record(&manifest(6, &["d1", "c4", "c6"]), Some(2), []));
        assert_eq!(keys.locate(&v4, &[key(1)]), None);
        assert!(!keys.record(&v5, Some(2), [(key(2), Some(0))]));
        assert_eq!(keys.locate(&v5, &[key(2)]), None);
    }

    #[test]
    fn a_copy_of_a_manifest_carries_no_map() {
        let mut manifest = manifest(1, &[]);
        manifest.live_keys = LiveKeysRef::new(Arc::new(LiveKeys::new(&manifest)));
        assert!(manifest.live_keys.get().is_some());
        let copy = manifest.clone();
        assert!(copy.live_keys.get().is_none());
        assert_eq!(copy, manifest);
    }
}
