//! Keys during an ingest into a keyed table (ADR 0016): which documents win when a key comes
//! twice, and the rows that lose, deleted in the ingest's own commit.
//!
//! Every document of a keyed ingest has a key (the reader rejects those without). The tracker
//! remembers, for each key of this ingest, the ordinal (push order) of the document that holds
//! it now; parts record which ordinals they hold and where the sort put each. At the commit,
//! under the table's writer lock, the ingest's keys are looked up in the table's parts through
//! their key files, and the losers become deletion vectors listed in the same manifest commit
//! as the new parts:
//! - `replace` (the default): the last document of a key wins; rows of the table and earlier
//!   documents of this ingest with that key are deleted;
//! - `ignore`: the first document wins, and a key already in the table keeps its row; the
//!   others are counted as ignored;
//! - `error`: a key given twice, or already in the table, fails the whole ingest and nothing is
//!   committed (as a unique index fails PostgreSQL's `COPY`).
//!
//! Invariant kept: after every commit, each key has at most one live row in the table.
//! Memory: the map holds each key of the ingest once (its bytes plus about 40 bytes).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr;

use strata_format::Manifest;
use strata_json::{KeyValue, TableKey};

use crate::error::EngineError;

/// What a keyed ingest does with a document whose key is already present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnConflict {
    /// The newer document replaces the older (an upsert).
    #[default]
    Replace,
    /// The document already present stays; the newer one is ignored.
    Ignore,
    /// The ingest fails and nothing is committed.
    Error,
}

impl FromStr for OnConflict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "replace" | "update" => Ok(OnConflict::Replace),
            "ignore" | "nothing" => Ok(OnConflict::Ignore),
            "error" => Ok(OnConflict::Error),
            other => Err(format!(
                "unknown conflict policy {other:?} (replace, ignore or error)"
            )),
        }
    }
}

/// A part this ingest wrote: the ordinals of the documents it holds and their rows.
struct NewPart {
    file: String,
    first_ordinal: u64,
    rows: u64,
    positions: Option<Vec<u32>>,
}

/// The keys of one keyed ingest (see the module docs).
pub(super) struct KeyTracker {
    table: String,
    key: TableKey,
    on_conflict: OnConflict,
    /// Key → ordinal of the document that holds it in this ingest.
    holders: HashMap<KeyValue, u64>,
    next_ordinal: u64,
    /// First ordinal not yet in a part cut.
    cut_at: u64,
    /// Ordinals of documents a later document of this ingest replaced.
    superseded: Vec<u64>,
    parts: Vec<NewPart>,
}

/// What the commit deletes, and counts.
pub(super) struct Resolution {
    pub(super) deletions: BTreeMap<String, Vec<u64>>,
    /// Documents of the table, or earlier ones of this ingest, replaced by newer ones.
    pub(super) replaced: u64,
    /// Documents of this ingest not loaded because their key was in the table.
    pub(super) ignored: u64,
}

impl KeyTracker {
    pub(super) fn new(table: &str, key: TableKey, on_conflict: OnConflict) -> Self {
        KeyTracker {
            table: table.to_owned(),
            key,
            on_conflict,
            holders: HashMap::new(),
            next_ordinal: 0,
            cut_at: 0,
            superseded: Vec::new(),
            parts: Vec::new(),
        }
    }

    pub(super) fn key(&self) -> &TableKey {
        &self.key
    }

    /// Decides about the next document, of key `key`: true when it is to be pushed (it gets the
    /// next ordinal), false when it is ignored.
    pub(super) fn admit(&mut self, key: &KeyValue) -> Result<bool, EngineError> {
        let ordinal = self.next_ordinal;
        match (self.holders.get_mut(key), self.on_conflict) {
            (None, _) => {
                self.holders.insert(key.clone(), ordinal);
            }
            (Some(holder), OnConflict::Replace) => {
                self.superseded.push(*holder);
                *holder = ordinal;
            }
            (Some(_), OnConflict::Ignore) => return Ok(false),
            (Some(_), OnConflict::Error) => {
                return Err(EngineError::DuplicateKey {
                    table: self.table.clone(),
                    key: key.to_string(),
                    path: self.key.path.encode(),
                    where_: "twice in this ingest".into(),
                });
            }
        }
        self.next_ordinal += 1;
        Ok(true)
    }

    /// The ordinals pushed since the last cut: those of the part being cut now.
    pub(super) fn cut(&mut self) -> (u64, u64) {
        let range = (self.cut_at, self.next_ordinal);
        self.cut_at = self.next_ordinal;
        range
    }

    /// Records the part that holds the documents of a cut.
    pub(super) fn part_written(
        &mut self,
        file: &str,
        (first, end): (u64, u64),
        positions: Option<Vec<u32>>,
    ) {
        self.parts.push(NewPart {
            file: file.to_owned(),
            first_ordinal: first,
            rows: end - first,
            positions,
        });
    }

    /// The new part and row of the document of `ordinal`.
    fn locate(&self, ordinal: u64) -> Option<(&str, u64)> {
        let index = self
            .parts
            .partition_point(|p| p.first_ordinal <= ordinal)
            .checked_sub(1)?;
        let part = &self.parts[index];
        let offset = ordinal - part.first_ordinal;
        if offset >= part.rows {
            return None;
        }
        let row = match &part.positions {
            Some(positions) => u64::from(*positions.get(offset as usize)?),
            None => offset,
        };
        Some((&part.file, row))
    }

    /// Looks the ingest's keys up in the parts of `existing` (the table before this ingest) and
    /// returns what the commit deletes; for `error`, fails on the first key found.
    pub(super) fn resolve(
        self,
        table_dir: &Path,
        existing: &Manifest,
    ) -> Result<Resolution, EngineError> {
        let mut deletions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let delete_new = |tracker: &KeyTracker,
                          deletions: &mut BTreeMap<String, Vec<u64>>,
                          ordinal: u64|
         -> Result<(), EngineError> {
            let (file, row) = tracker.locate(ordinal).ok_or_else(|| {
                EngineError::Invalid(format!(
                    "table {}: document {ordinal} of the ingest is in no part written",
                    tracker.table
                ))
            })?;
            deletions.entry(file.to_owned()).or_default().push(row);
            Ok(())
        };
        for &ordinal in &self.superseded {
            delete_new(&self, &mut deletions, ordinal)?;
        }
        let mut replaced = self.superseded.len() as u64;
        let mut ignored = 0;

        let mut holders: Vec<(KeyValue, u64)> =
            self.holders.iter().map(|(k, o)| (k.clone(), *o)).collect();
        holders.sort_unstable();
        let (keys, ordinals): (Vec<KeyValue>, Vec<u64>) = holders.into_iter().unzip();
        for hit in crate::deletes::live_key_rows(&self.table, table_dir, existing, &keys)? {
            match self.on_conflict {
                OnConflict::Replace => {
                    deletions.entry(hit.part).or_default().push(hit.row);
                    replaced += 1;
                }
                OnConflict::Ignore => {
                    delete_new(&self, &mut deletions, ordinals[hit.key])?;
                    ignored += 1;
                }
                OnConflict::Error => {
                    return Err(EngineError::DuplicateKey {
                        table: self.table.clone(),
                        key: keys[hit.key].to_string(),
                        path: self.key.path.encode(),
                        where_: "already in the table".into(),
                    });
                }
            }
        }
        Ok(Resolution {
            deletions,
            replaced,
            ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use strata_json::{JsonPath, KeyType};

    fn tracker(on_conflict: OnConflict) -> KeyTracker {
        let key = TableKey {
            path: JsonPath::parse_dotted("id"),
            key_type: KeyType::Integer,
        };
        KeyTracker::new("t", key, on_conflict)
    }

    #[test]
    fn replace_keeps_the_last_document_of_a_key() {
        let mut t = tracker(OnConflict::Replace);
        for k in [1, 2, 1, 3, 1] {
            assert!(t.admit(&KeyValue::Integer(k)).unwrap());
        }
        let cut = t.cut();
        assert_eq!(cut, (0, 5));
        // The sort put document i at row 4 - i.
        t.part_written("p", cut, Some(vec![4, 3, 2, 1, 0]));
        assert_eq!(t.superseded, vec![0, 2]);
        assert_eq!(t.locate(0), Some(("p", 4)));
        assert_eq!(t.locate(2), Some(("p", 2)));
        assert_eq!(t.locate(5), None);
    }

    #[test]
    fn ignore_and_error_on_a_key_given_twice() {
        let mut t = tracker(OnConflict::Ignore);
        assert!(t.admit(&KeyValue::Integer(1)).unwrap());
        assert!(!t.admit(&KeyValue::Integer(1)).unwrap());
        assert_eq!(t.next_ordinal, 1);
        let mut t = tracker(OnConflict::Error);
        assert!(t.admit(&KeyValue::Integer(1)).unwrap());
        let e = t.admit(&KeyValue::Integer(1)).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn ordinals_are_located_across_parts() {
        let mut t = tracker(OnConflict::Replace);
        for k in 0..5 {
            t.admit(&KeyValue::Integer(k)).unwrap();
        }
        let first = t.cut();
        for k in 5..8 {
            t.admit(&KeyValue::Integer(k)).unwrap();
        }
        let second = t.cut();
        t.part_written("a", first, None);
        t.part_written("b", second, Some(vec![2, 0, 1]));
        assert_eq!(t.locate(4), Some(("a", 4)));
        assert_eq!(t.locate(5), Some(("b", 2)));
        assert_eq!(t.locate(7), Some(("b", 1)));
    }

    #[test]
    fn policies_parse() {
        assert_eq!("REPLACE".parse::<OnConflict>(), Ok(OnConflict::Replace));
        assert_eq!("ignore".parse::<OnConflict>(), Ok(OnConflict::Ignore));
        assert!("merge".parse::<OnConflict>().is_err());
    }
}
