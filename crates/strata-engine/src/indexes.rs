//! `CREATE INDEX` and `DROP INDEX` (ADR 0024): declaring a table's secondary indexes and
//! building the index files of the parts written before.
//!
//! Creating an index, under the table's writer lock (writers wait while the files are built, as
//! PostgreSQL's `CREATE INDEX` without `CONCURRENTLY` makes them wait): the setting is added (so every part written
//! from then on gets its file from the part writer) and each part the manifest lists gets its file
//! built from its column (`strata_format::indexes::build_part_index`), all in one commit. A merge
//! that started before the commit does not commit (its settings no longer hold: `merge`), so
//! every part it would have added has the index's file or is read whole — and a part without an
//! index file is only ever slower to look up in, never answered differently. Dropping an index
//! removes the setting and the parts' entries in one commit; garbage collection deletes the
//! files no manifest lists.
//!
//! Index names are unique in the data directory (PostgreSQL's are unique in a schema, and its
//! `DROP INDEX` names no table), checked when an index is created.

use std::sync::Arc;

use strata_format::indexes::{IndexSetting, build_part_index, valid_index_name};

use crate::error::EngineError;
use crate::table::DataDir;

/// What `CREATE INDEX` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexCreated {
    /// The index was created; this many parts got an index file.
    Created { parts_indexed: usize },
    /// `IF NOT EXISTS` and an index of that name exists (on any table).
    AlreadyExists,
}

impl DataDir {
    /// Creates the index `name` on the encoded path `path` of `table` and builds the files of the
    /// table's parts. An index of that name on any table is an error, or `AlreadyExists` with
    /// `if_not_exists`; so is a second index on the same path of the table.
    pub fn create_index(
        &self,
        table: &str,
        name: &str,
        path: &str,
        if_not_exists: bool,
    ) -> Result<IndexCreated, EngineError> {
        if !valid_index_name(name) {
            return Err(EngineError::InvalidIndex {
                name: name.to_owned(),
                reason: "an index name is letters, digits and '_' (at most 63), not starting \
                         with a digit"
                    .into(),
            });
        }
        if let Some(owner) = self.table_of_index(name)? {
            if if_not_exists {
                return Ok(IndexCreated::AlreadyExists);
            }
            return Err(EngineError::InvalidIndex {
                name: name.to_owned(),
                reason: format!("an index of that name exists on table {owner}"),
            });
        }
        let _lock = self.lock_existing(table, "create index")?;
        let dir = self.table_dir(table)?;
        let mut manifest = self.manifest(table)?;
        if let Some(existing) = manifest.settings.indexes.iter().find(|i| i.path == path) {
            return Err(EngineError::InvalidIndex {
                name: name.to_owned(),
                reason: format!(
                    "table {table} has index {} on {path} already",
                    existing.name
                ),
            });
        }
        let setting = IndexSetting {
            name: name.to_owned(),
            path: path.to_owned(),
        };
        // On object storage, the parts' bytes come to the local directory first, as a merge's do.
        crate::mirror::read_whole(&dir, &manifest.parts)?;
        let mut parts_indexed = 0;
        for entry in &mut manifest.parts {
            if let Some(index) = build_part_index(&dir, entry, &setting)? {
                Arc::make_mut(entry).indexes.push(index);
                parts_indexed += 1;
            }
        }
        manifest.settings.indexes.push(setting);
        manifest.version += 1;
        crate::commit::commit_manifest(&mut manifest, &dir)?;
        Ok(IndexCreated::Created { parts_indexed })
    }

    /// Drops the index `name` from whichever table has it; false when none has (an error unless
    /// `if_exists`).
    pub fn drop_index(&self, name: &str, if_exists: bool) -> Result<bool, EngineError> {
        let Some(table) = self.table_of_index(name)? else {
            if if_exists {
                return Ok(false);
            }
            return Err(EngineError::NoSuchIndex(name.to_owned()));
        };
        let _lock = self.lock_existing(&table, "drop index")?;
        let dir = self.table_dir(&table)?;
        let mut manifest = self.manifest(&table)?;
        let before = manifest.settings.indexes.len();
        manifest.settings.indexes.retain(|i| i.name != name);
        if manifest.settings.indexes.len() == before {
            // Dropped by another statement between the lookup and the lock.
            return Ok(false);
        }
        for entry in &mut manifest.parts {
            if entry.indexes.iter().any(|i| i.name == name) {
                Arc::make_mut(entry).indexes.retain(|i| i.name != name);
            }
        }
        manifest.version += 1;
        crate::commit::commit_manifest(&mut manifest, &dir)?;
        Ok(true)
    }

    /// The table that has an index named `name`, if any.
    pub fn table_of_index(&self, name: &str) -> Result<Option<String>, EngineError> {
        for table in self.table_names()? {
            let manifest = match self.manifest_shared(&table) {
                Ok(manifest) => manifest,
                // Dropped while listing.
                Err(EngineError::NoSuchTable(_)) => continue,
                Err(e) => return Err(e),
            };
            if manifest.settings.indexes.iter().any(|i| i.name == name) {
                return Ok(Some(table));
            }
        }
        Ok(None)
    }
}
