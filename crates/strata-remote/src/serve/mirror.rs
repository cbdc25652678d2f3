//! The working directory's commits, drops and whole-part reads go to the store first
//! ([`Mirror`]); the files its parts are opened with are linked from the cache.

use std::path::Path;
use std::sync::{Arc, PoisonError};

use strata_engine::EngineError;
use strata_engine::mirror::Mirror;
use strata_format::{Manifest, PartEntry};

use super::{ServeMirror, same_file};
use crate::error::RemoteError;
use crate::files::download;

impl ServeMirror {
    /// Brings `table` in the working directory to version `newest` of its log (None: the
    /// newest), linking the files its parts are opened with. The caller holds the table's
    /// writer lock, or nothing else runs yet.
    pub(super) async fn stage(&self, table: &str, newest: Option<u64>) -> Result<(), RemoteError> {
        let Some((manifest, _)) = self
            .remote
            .stage_table(&self.files, &self.root, table, newest)
            .await?
        else {
            return Ok(());
        };
        // Staging linked every part already: the links are recognised as such.
        self.note_footer_copies(table, &manifest, &[]);
        Ok(())
    }

    /// Links what the working directory lacks of `manifest`'s parts (other writers' parts in a
    /// rebased commit) and records the footer copies.
    async fn link_footer_copies(
        &self,
        table: &str,
        manifest: &Manifest,
    ) -> Result<(), RemoteError> {
        let dir = self.root.join(table);
        let linked = self
            .remote
            .link_parts(&self.files, &dir, table, manifest)
            .await?;
        self.note_footer_copies(table, manifest, &linked);
        Ok(())
    }

    /// Records which of `manifest`'s part files in the working directory are footer copies:
    /// those in `linked`, and links to the cache's footer copies.
    fn note_footer_copies(&self, table: &str, manifest: &Manifest, linked: &[std::path::PathBuf]) {
        let dir = self.root.join(table);
        let mut footer_copies = self
            .footer_copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for part in &manifest.parts {
            let path = Manifest::part_path(&dir, &part.file);
            // A link to the cache made now or by an earlier staging of the table.
            let cached = self.files.path(table, &part.file);
            if linked.contains(&path) || (part.xxh64.is_some() && same_file(&path, &cached)) {
                footer_copies.insert(path);
            }
        }
    }

    /// Lets queries read the parts of `manifest` that are whole in `table_dir` (the ones this
    /// server wrote) from there rather than through the store.
    pub(super) fn register_local_copies(&self, table: &str, table_dir: &Path, manifest: &Manifest) {
        let footer_copies = self
            .footer_copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for part in &manifest.parts {
            let path = Manifest::part_path(table_dir, &part.file);
            if !footer_copies.contains(&path) {
                self.remote
                    .block_cache()
                    .register_local_copy(Manifest::part_location(table, &part.file), path);
            }
        }
    }
}

impl Mirror for ServeMirror {
    fn commit(
        &self,
        table: &str,
        table_dir: &Path,
        manifest: &Manifest,
    ) -> Result<Manifest, EngineError> {
        let mirror_error = |e: RemoteError| EngineError::Mirror {
            table: table.to_owned(),
            conflict: matches!(e, RemoteError::Conflict { .. }),
            message: e.to_string(),
        };
        self.check_lease().map_err(mirror_error)?;
        let base = Manifest::load(table_dir)?;
        if base.is_none() {
            // A table this server creates is published (Iceberg) with its files where they are.
            let location = table_dir.join(strata_iceberg::LOCATION_FILE);
            std::fs::write(&location, self.remote.table_url(table))
                .map_err(|e| EngineError::io(&location, e))?;
        }
        let result = self.block_on(async {
            let (committed, _, _) =
                crate::push::commit_table(&self.remote, &self.root, table, base.as_ref(), manifest)
                    .await?;
            // Parts other writers committed meanwhile are opened from footer copies here too.
            self.link_footer_copies(table, &committed).await?;
            Ok::<Manifest, RemoteError>(committed)
        });
        match result {
            Ok(committed) => {
                self.register_local_copies(table, table_dir, &committed);
                Ok(committed)
            }
            Err(e @ RemoteError::Conflict { .. }) => {
                // A retry must start from what the log holds now.
                if let Err(refresh) = self.block_on(self.stage(table, None)) {
                    eprintln!("strata: table {table}: bringing it up to date failed: {refresh}");
                }
                Err(mirror_error(e))
            }
            Err(e) => Err(mirror_error(e)),
        }
    }

    fn read_whole(
        &self,
        table: &str,
        table_dir: &Path,
        parts: &[Arc<PartEntry>],
    ) -> Result<(), EngineError> {
        for part in parts {
            let path = Manifest::part_path(table_dir, &part.file);
            let is_footer_copy = self
                .footer_copies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&path);
            if !is_footer_copy {
                continue;
            }
            // A new file renamed over the link: readers of the footer copy keep theirs.
            let store = self.remote.store().clone();
            self.block_on(download(store.as_ref(), table, &part.file, &path))
                .map_err(|e| EngineError::Mirror {
                    table: table.to_owned(),
                    message: e.to_string(),
                    conflict: false,
                })?;
            self.footer_copies
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&path);
            self.remote
                .block_cache()
                .register_local_copy(Manifest::part_location(table, &part.file), path);
        }
        Ok(())
    }

    fn dropped(&self, table: &str) -> Result<(), EngineError> {
        let forgetting = self
            .forgetting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(table);
        if forgetting {
            return Ok(());
        }
        let result = self
            .check_lease()
            .and_then(|()| self.block_on(self.remote.drop_table(table)));
        result.map(|_| ()).map_err(|e| EngineError::Mirror {
            table: table.to_owned(),
            message: e.to_string(),
            conflict: false,
        })
    }
}
