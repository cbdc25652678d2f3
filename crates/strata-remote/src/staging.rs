//! Staging directories: the private local data directory a command on object storage runs in.
//!
//! `stage` writes, for each table the command touches, the newest committed manifest and links
//! to the cached small files and footer copies of its parts (`crate::files`); the engine and the
//! query code then work there as on any data directory, reading part pages through the store.
//! A staging directory is `<cache>/staging/<pid>-<nanos>/` and is removed when the command ends
//! (or, after a crash, by the next command that finds its process gone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::{StreamExt as _, TryStreamExt as _};
use strata_format::{Manifest, manifest_log};

use crate::error::RemoteError;
use crate::files::{FileCache, download};
use crate::location::RemoteDataDir;

/// Parts fetched at once while staging.
const CONCURRENT_FETCHES: usize = 16;

/// A command's staging directory and the committed state of each table it holds.
#[derive(Debug)]
pub struct Staging {
    root: PathBuf,
    /// By table: the manifest staged (None: the table did not exist) and its bytes as written.
    pub(crate) tables: BTreeMap<String, Option<(Manifest, Vec<u8>)>>,
}

impl Staging {
    /// The staging data directory (pass it to the engine and the query session).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The tables staged, with the version each was staged at (None: it did not exist).
    pub fn versions(&self) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.tables
            .iter()
            .map(|(name, staged)| (name.as_str(), staged.as_ref().map(|(m, _)| m.version)))
    }

    /// Replaces the footer copies of the parts of `table` that `wanted` picks with the whole
    /// parts, for commands that read their every byte (export, check, merges), and fetches the
    /// table's whole Iceberg publication.
    pub async fn materialize(
        &self,
        remote: &RemoteDataDir,
        table: &str,
        wanted: impl Fn(&strata_format::PartEntry) -> bool,
    ) -> Result<(), RemoteError> {
        let Some(Some((manifest, _))) = self.tables.get(table) else {
            return Ok(());
        };
        let dir = self.root.join(table);
        if manifest.settings.iceberg {
            crate::iceberg::stage_publication(remote.store().as_ref(), table, &dir, true).await?;
        }
        futures::stream::iter(manifest.parts.iter().filter(|p| wanted(p)).map(Ok))
            .try_for_each_concurrent(4, |part| {
                let path = Manifest::part_path(&dir, &part.file);
                async move {
                    // The link to the footer copy goes first, so the copy in the cache stays.
                    std::fs::remove_file(&path).map_err(|e| RemoteError::io(&path, e))?;
                    download(remote.store().as_ref(), table, &part.file, &path).await
                }
            })
            .await
    }
}

impl Staging {
    /// Brings the staging directory to the newest committed state of every table of the data
    /// directory (tables created meanwhile included, dropped ones removed), between the
    /// statements of a long-running command (the shell), after [`Staging::push`].
    pub async fn refresh(&mut self, remote: &RemoteDataDir) -> Result<(), RemoteError> {
        let listed = remote.tables().await?;
        let files = FileCache::new(remote.cache_dir());
        for (name, newest) in &listed {
            if self.is_current(name, *newest) {
                continue;
            }
            let staged = remote
                .stage_table(&files, &self.root, name, Some(*newest))
                .await?;
            self.tables.insert(name.clone(), staged);
        }
        let gone: Vec<String> = self
            .tables
            .keys()
            .filter(|name| !listed.iter().any(|(listed, _)| listed == *name))
            .cloned()
            .collect();
        for name in gone {
            self.tables.remove(&name);
            let dir = self.root.join(&name);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RemoteError::io(&dir, e)),
            }
        }
        Ok(())
    }
}

impl Staging {
    /// Whether `table` is staged at version `newest` and unchanged since.
    fn is_current(&self, table: &str, newest: u64) -> bool {
        let Some(Some((manifest, bytes))) = self.tables.get(table) else {
            return false;
        };
        let path = self
            .root
            .join(table)
            .join(strata_format::manifest::MANIFEST_FILE);
        manifest.version == newest && std::fs::read(&path).ok().as_ref() == Some(bytes)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl RemoteDataDir {
    /// A staging directory holding the newest committed state of `tables`, each given with its
    /// newest version when the caller listed it already ([`Self::tables`]; None: looked up).
    pub async fn stage(&self, tables: &[(String, Option<u64>)]) -> Result<Staging, RemoteError> {
        let staging_dir = self.cache_dir().join("staging");
        remove_abandoned(&staging_dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let root = staging_dir.join(format!("{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).map_err(|e| RemoteError::io(&root, e))?;
        let mut staging = Staging {
            root,
            tables: BTreeMap::new(),
        };
        let files = FileCache::new(self.cache_dir());
        for (table, newest) in tables {
            let staged = self
                .stage_table(&files, &staging.root, table, *newest)
                .await?;
            staging.tables.insert(table.clone(), staged);
        }
        Ok(staging)
    }

    pub(crate) async fn stage_table(
        &self,
        files: &FileCache,
        root: &Path,
        table: &str,
        newest: Option<u64>,
    ) -> Result<Option<(Manifest, Vec<u8>)>, RemoteError> {
        let dir = root.join(table);
        std::fs::create_dir_all(&dir).map_err(|e| RemoteError::io(&dir, e))?;
        // Publications made here list the table's files where they are (ADR 0021, 0022).
        let location = dir.join(strata_iceberg::LOCATION_FILE);
        std::fs::write(&location, self.table_url(table))
            .map_err(|e| RemoteError::io(&location, e))?;
        let manifest = match newest {
            Some(version) => Some(manifest_log::read(self.store().as_ref(), table, version).await?),
            None => manifest_log::latest(self.store().as_ref(), table).await?,
        };
        let Some(manifest) = manifest else {
            return Ok(None);
        };
        if manifest.settings.iceberg {
            crate::iceberg::stage_publication(self.store().as_ref(), table, &dir, false).await?;
        }
        self.link_parts(files, &dir, table, &manifest).await?;
        files.prune(table, &crate::push::files_of(&manifest));
        manifest.commit(&dir)?;
        let path = dir.join(strata_format::manifest::MANIFEST_FILE);
        let bytes = std::fs::read(&path).map_err(|e| RemoteError::io(&path, e))?;
        Ok(Some((manifest, bytes)))
    }

    /// Puts in `dir/parts` what `manifest`'s parts are opened with that is not there yet: links
    /// to the cached small files and footer copies (fetched into the cache when missing).
    /// Returns the footer copies it linked, which must not be read as whole parts.
    pub(crate) async fn link_parts(
        &self,
        files: &FileCache,
        dir: &Path,
        table: &str,
        manifest: &Manifest,
    ) -> Result<Vec<PathBuf>, RemoteError> {
        let store = self.store().clone();
        futures::stream::iter(manifest.parts.iter())
            .map(|part| {
                let store = store.clone();
                async move { files.ensure_part(store.as_ref(), table, part).await }
            })
            .buffer_unordered(CONCURRENT_FETCHES)
            .try_collect::<Vec<()>>()
            .await?;
        let parts_dir = dir.join(strata_format::manifest::PARTS_DIR);
        std::fs::create_dir_all(&parts_dir).map_err(|e| RemoteError::io(&parts_dir, e))?;
        let mut footer_copies = Vec::new();
        for part in &manifest.parts {
            for file in std::iter::once(part.file.clone()).chain(part.files_beside()) {
                let cached = files.path(table, &file);
                let staged = parts_dir.join(&file);
                // Staged already (a refresh), possibly whole: a copy onto a link to the cached
                // file would overwrite the cached file itself.
                if staged.exists() {
                    continue;
                }
                if std::fs::hard_link(&cached, &staged).is_err() {
                    std::fs::copy(&cached, &staged).map_err(|e| RemoteError::io(&staged, e))?;
                }
                if file == part.file && part.xxh64.is_some() {
                    footer_copies.push(staged);
                }
            }
            self.block_cache()
                .register_size(Manifest::part_location(table, &part.file), part.bytes);
        }
        Ok(footer_copies)
    }
}

/// Removes staging directories whose process is gone (a crash, a `kill -9`).
fn remove_abandoned(staging_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(staging_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, _)) = name.split_once('-') else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
