//! Other writers' commits come into the working directory; old versions and files go.

use std::sync::PoisonError;

use strata_engine::EngineError;
use strata_format::manifest_log;

use super::{ServeMirror, local_version, unix_now};
use crate::error::RemoteError;

impl ServeMirror {
    /// Brings every table to the newest version of its log: tables other writers created or
    /// changed are staged, tables they dropped are dropped here.
    pub fn refresh(&self) -> Result<(), RemoteError> {
        let listed = self.block_on(self.remote.tables())?;
        for (table, newest) in &listed {
            if local_version(&self.root.join(table))? >= Some(*newest) {
                continue;
            }
            let _lock = self.data_dir.lock_for_write(table, "refresh")?;
            // Our own commits may have passed it meanwhile, or the table may have been dropped
            // since the listing (then nothing is staged): the newest version is read again.
            if local_version(&self.root.join(table))? < Some(*newest) {
                self.block_on(self.stage(table, None))?;
            }
        }
        for table in self.data_dir.table_names()? {
            if listed.iter().any(|(name, _)| *name == table) {
                continue;
            }
            let lock = match self.data_dir.lock_existing(&table, "refresh") {
                Ok(lock) => lock,
                Err(EngineError::NoSuchTable(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            // Created by this server after the listing, or dropped by another writer?
            let store = self.remote.store().clone();
            if self
                .block_on(manifest_log::latest_version(store.as_ref(), &table))?
                .is_some()
            {
                continue;
            }
            drop(lock);
            self.forgetting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(table.clone());
            let dropped = self.data_dir.drop_table(&table);
            self.forgetting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&table);
            dropped?;
        }
        Ok(())
    }

    /// Collects what no reader needs any more in every table ([`crate::gc`]).
    pub fn collect(&self) -> Result<(), RemoteError> {
        self.check_lease()?;
        let grace = crate::gc::grace_seconds().map_err(|message| RemoteError::Location {
            url: self.remote.url().to_owned(),
            message,
        })?;
        let mut remembered = self
            .version_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for table in self.data_dir.table_names()? {
            let store = self.remote.store().clone();
            self.block_on(crate::gc::collect_remembering(
                store.as_ref(),
                &table,
                grace,
                unix_now(),
                &mut remembered,
            ))?;
        }
        Ok(())
    }
}
