//! Committing what a command did in its staging directory: the new files are uploaded, then the
//! new manifest becomes the next version of the table's log.
//!
//! When another writer committed since the command staged the table, the command's change is
//! re-applied onto the newer state ([`rebase`]) if the two do not overlap: new parts are added,
//! and parts the command removed or changed (a merge, a deletion) must still be as the command
//! found them. A keyed table takes one writer at a time (keys must stay unique across parts),
//! and so does a change of settings onto changed settings. A change that no longer applies is
//! refused with [`RemoteError::Conflict`]; its uploaded files are orphans that `crate::gc`
//! collects after the grace period.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::{
    ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload, WriteMultipart,
};
use strata_format::{Manifest, PartEntry, manifest_log};

use crate::error::RemoteError;
use crate::files::FileCache;
use crate::gc::GRACE_SECONDS;
use crate::location::RemoteDataDir;
use crate::staging::Staging;

/// Files up to this size are uploaded in one request, larger ones in parts of this size.
const UPLOAD_PART_BYTES: usize = 16 * 1024 * 1024;
/// Uploads running at once.
const CONCURRENT_UPLOADS: usize = 4;

/// What a command did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableChange {
    Unchanged,
    /// Committed as `version`, after uploading `files` files of `bytes` bytes.
    Committed {
        version: u64,
        files: usize,
        bytes: u64,
    },
    /// The command dropped the table.
    Dropped,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub table: String,
    pub change: TableChange,
}

impl Staging {
    /// Uploads and commits every staged table the command changed.
    pub async fn push(&self, remote: &RemoteDataDir) -> Result<Vec<Pushed>, RemoteError> {
        let mut pushed = Vec::new();
        for (table, staged) in &self.tables {
            let change = self.push_table(remote, table, staged.as_ref()).await?;
            pushed.push(Pushed {
                table: table.clone(),
                change,
            });
        }
        // Tables the command created (SQL) that were not staged.
        let root = self.root();
        let entries = std::fs::read_dir(root).map_err(|e| RemoteError::io(root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RemoteError::io(root, e))?;
            let table = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() && !self.tables.contains_key(&table) {
                let change = self.push_table(remote, &table, None).await?;
                pushed.push(Pushed { table, change });
            }
        }
        Ok(pushed)
    }

    async fn push_table(
        &self,
        remote: &RemoteDataDir,
        table: &str,
        staged: Option<&(Manifest, Vec<u8>)>,
    ) -> Result<TableChange, RemoteError> {
        let dir = self.root().join(table);
        let path = dir.join(strata_format::manifest::MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Dropped by the command (`DROP TABLE`): dropped on the store too.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && staged.is_some() => {
                return Ok(if remote.drop_table(table).await? {
                    TableChange::Dropped
                } else {
                    TableChange::Unchanged
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TableChange::Unchanged);
            }
            Err(e) => return Err(RemoteError::io(&path, e)),
        };
        if staged.is_some_and(|(_, staged_bytes)| *staged_bytes == bytes) {
            return Ok(TableChange::Unchanged);
        }
        let local = Manifest::parse(&path, &bytes)?;
        let base = staged.map(|(manifest, _)| manifest);
        let (committed, files, bytes) =
            commit_table(remote, self.root(), table, base, &local).await?;
        Ok(TableChange::Committed {
            version: committed.version,
            files,
            bytes,
        })
    }
}

/// Uploads the files of `root/table/parts` that `local` lists and `base` (the committed state
/// the change started from; None: a new table) does not, then commits `local` as the next
/// version of the table's log, re-applied onto a newer one when another writer committed first
/// ([`rebase`]). Returns the committed manifest, and the number and bytes of files uploaded.
pub(crate) async fn commit_table(
    remote: &RemoteDataDir,
    root: &Path,
    table: &str,
    base: Option<&Manifest>,
    local: &Manifest,
) -> Result<(Manifest, usize, u64), RemoteError> {
    let dir = root.join(table);
    let before = base.map(files_of).unwrap_or_default();
    let new_files: Vec<String> = files_of(local).difference(&before).cloned().collect();
    let store = remote.store().as_ref();
    let started = Instant::now();
    let uploaded: u64 = futures::stream::iter(new_files.iter())
        .map(|file| upload(store, table, &dir, file))
        .buffer_unordered(CONCURRENT_UPLOADS)
        .try_fold(0, |sum, bytes| async move { Ok(sum + bytes) })
        .await?;
    if started.elapsed().as_secs() > GRACE_SECONDS / 2 {
        // Collection deletes unlisted files older than the grace period: after a long upload,
        // make sure the first files are still there before a version lists them.
        for file in &new_files {
            let location = Manifest::part_location(table, file);
            store
                .head(&location)
                .await
                .map_err(|e| RemoteError::store(&location, e))?;
        }
    }
    let committed = manifest_log::commit_change(
        store,
        table,
        || Manifest::new(local.settings.clone()),
        |current| rebase(table, base, local, current),
    )
    .await?;
    keep_rejects(store, table, &dir, committed.version).await?;
    // The commit stands whatever happens to its publication, as on a local directory: a
    // failure is reported, and the next commit publishes again.
    let was_published = base.is_some_and(|b| b.settings.iceberg);
    if let Err(e) =
        crate::iceberg::keep_in_step(store, table, &dir, &committed, was_published).await
    {
        eprintln!("warning: {e}");
    }
    // Later commands find the new parts in the cache instead of fetching them: the cache
    // takes them from this staging directory as it would from the store.
    let cache = FileCache::new(remote.cache_dir());
    let written = object_store::local::LocalFileSystem::new_with_prefix(root)
        .map_err(|e| RemoteError::store(&object_store::path::Path::from(table), e))?;
    let before_parts: BTreeSet<&str> = base
        .map(|b| b.parts.iter().map(|p| p.file.as_str()).collect())
        .unwrap_or_default();
    for part in local
        .parts
        .iter()
        .filter(|p| !before_parts.contains(p.file.as_str()))
    {
        cache.ensure_part(&written, table, part).await?;
    }
    Ok((committed, new_files.len(), uploaded))
}

/// Uploads the lines the command's ingest rejected (the engine's `rejects.ndjson`, which starts
/// empty in a staging directory) as `TABLE/rejects/<version>-<pid>.ndjson`, beside the version
/// that committed the rest of the input.
async fn keep_rejects(
    store: &dyn ObjectStore,
    table: &str,
    dir: &Path,
    version: u64,
) -> Result<(), RemoteError> {
    let path = dir.join(REJECTS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) if !bytes.is_empty() => bytes,
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RemoteError::io(&path, e)),
    };
    let location = object_store::path::Path::from_iter([
        table,
        "rejects",
        &format!("{version:020}-{}.ndjson", std::process::id()),
    ]);
    store
        .put(&location, PutPayload::from(bytes))
        .await
        .map_err(|e| RemoteError::store(&location, e))?;
    // Kept there now; a server's next commit uploads only the lines rejected after this one.
    std::fs::remove_file(&path).map_err(|e| RemoteError::io(&path, e))
}

/// The engine's file of rejected input lines in a table directory.
const REJECTS_FILE: &str = "rejects.ndjson";

/// Every file in `parts/` that `manifest` lists.
pub(crate) fn files_of(manifest: &Manifest) -> BTreeSet<String> {
    manifest
        .parts
        .iter()
        .flat_map(|part| std::iter::once(part.file.clone()).chain(part.files_beside()))
        .collect()
}

/// Uploads the file `file` of the staged table directory `dir`; returns its size.
async fn upload(
    store: &dyn ObjectStore,
    table: &str,
    dir: &Path,
    file: &str,
) -> Result<u64, RemoteError> {
    let path = Manifest::part_path(dir, file);
    let location = Manifest::part_location(table, file);
    let store_error = |e| RemoteError::store(&location, e);
    let mut source = std::fs::File::open(&path).map_err(|e| RemoteError::io(&path, e))?;
    let size = source
        .metadata()
        .map_err(|e| RemoteError::io(&path, e))?
        .len();
    if size as usize <= UPLOAD_PART_BYTES {
        let mut bytes = Vec::with_capacity(size as usize);
        source
            .read_to_end(&mut bytes)
            .map_err(|e| RemoteError::io(&path, e))?;
        // Names are unique: an object already there is another writer's, never replaced.
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        store
            .put_opts(&location, PutPayload::from(bytes), options)
            .await
            .map_err(store_error)?;
        return Ok(size);
    }
    let upload = store.put_multipart(&location).await.map_err(store_error)?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART_BYTES);
    let mut buffer = vec![0; UPLOAD_PART_BYTES];
    loop {
        let read = source
            .read(&mut buffer)
            .map_err(|e| RemoteError::io(&path, e))?;
        if read == 0 {
            break;
        }
        if let Err(e) = writer.wait_for_capacity(CONCURRENT_UPLOADS).await {
            writer.abort().await.ok();
            return Err(store_error(e));
        }
        writer.write(&buffer[..read]);
    }
    writer.finish().await.map_err(store_error)?;
    Ok(size)
}

/// Applies the change from `base` (the state the command staged; None: a new table) to `local`
/// (the state it left) onto `current`, the newest committed state; `current` is a new table's
/// empty manifest of version 0 when the log is empty. `manifest_log::commit_change` then
/// commits it as the next version.
pub(crate) fn rebase(
    table: &str,
    base: Option<&Manifest>,
    local: &Manifest,
    current: &mut Manifest,
) -> Result<(), RemoteError> {
    let conflict = |message: String| {
        Err(RemoteError::Conflict {
            table: table.to_owned(),
            message,
        })
    };
    let exists = current.version > 0;
    match base {
        Some(base) if exists && current.version == base.version => {
            *current = Manifest {
                version: base.version,
                ..local.clone()
            };
            return Ok(());
        }
        None if !exists => {
            *current = Manifest {
                version: 0,
                ..local.clone()
            };
            return Ok(());
        }
        Some(_) if !exists => return conflict("another writer dropped the table".into()),
        _ => {}
    }
    let newer = current.version;
    if local.settings.key.is_some() {
        return conflict(format!(
            "another writer committed version {newer} first, and a keyed table takes one \
             writer at a time"
        ));
    }
    let base_settings = base.map_or(&local.settings, |b| &b.settings);
    if current.settings != *base_settings {
        return conflict(format!(
            "another writer committed version {newer} with other table settings"
        ));
    }
    current.settings = local.settings.clone();
    let base_parts: BTreeMap<&str, &Arc<PartEntry>> = base
        .map(|b| b.parts.iter().map(|p| (p.file.as_str(), p)).collect())
        .unwrap_or_default();
    let local_parts: BTreeMap<&str, &Arc<PartEntry>> =
        local.parts.iter().map(|p| (p.file.as_str(), p)).collect();
    for (file, before) in &base_parts {
        let after = local_parts.get(file);
        if after == Some(before) {
            continue;
        }
        // Removed (merged, expired) or changed (deletions) by this command: only while the
        // newer state still has the part as this command found it.
        let Some(at) = current.parts.iter().position(|p| p.file == *file) else {
            return conflict(format!(
                "another writer committed version {newer}, which no longer has part {file}"
            ));
        };
        if *current.parts[at] != ***before {
            return conflict(format!(
                "another writer committed version {newer}, which changed part {file}"
            ));
        }
        match after {
            Some(after) => current.parts[at] = (*after).clone(),
            None => {
                current.parts.remove(at);
            }
        }
    }
    for part in &local.parts {
        if !base_parts.contains_key(part.file.as_str()) {
            current.parts.push(part.clone());
        }
    }
    for retired in local.retired.iter() {
        let new = base.is_none_or(|b| !b.retired.contains(retired));
        if new && !current.retired.contains(retired) {
            current.retired.push(retired.clone());
        }
    }
    current.format_version = current.format_version.max(local.format_version);
    // Requests of the server's write-ahead log that this change applied stay applied.
    current.wal_applied = current.wal_applied.max(local.wal_applied);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use strata_format::TableSettings;

    use super::*;

    fn settings() -> TableSettings {
        TableSettings::sorted_by(vec!["k".into()], 64)
    }

    fn part(file: &str, deleted: Option<u64>) -> PartEntry {
        let mut value = serde_json::json!({
            "file": file, "rows": 10, "bytes": 100, "columns": {}, "remainder_paths": {},
            "remainder_paths_truncated": false, "sort_key_min": {}, "sort_key_max": {}
        });
        if let Some(rows) = deleted {
            value["deletes"] =
                serde_json::json!({"file": format!("{file}.dv"), "rows": rows, "bytes": 8});
        }
        serde_json::from_value(value).unwrap()
    }

    fn manifest(version: u64, parts: Vec<PartEntry>) -> Manifest {
        Manifest {
            version,
            parts: parts.into_iter().map(Arc::new).collect(),
            ..Manifest::new(settings())
        }
    }

    fn files(m: &Manifest) -> Vec<&str> {
        m.parts.iter().map(|p| p.file.as_str()).collect()
    }

    #[test]
    fn unchanged_state_takes_the_local_manifest() {
        let base = manifest(3, vec![part("a", None)]);
        let local = manifest(5, vec![part("a", None), part("b", None)]);
        let mut current = base.clone();
        rebase("t", Some(&base), &local, &mut current).unwrap();
        assert_eq!((current.version, files(&current)), (3, vec!["a", "b"]));
    }

    #[test]
    fn appends_commute_with_appends_and_merges() {
        let base = manifest(3, vec![part("a", None), part("b", None)]);
        let local = manifest(
            4,
            vec![part("a", None), part("b", None), part("mine", None)],
        );
        // Another writer merged a and b into ab, then appended c.
        let mut current = manifest(5, vec![part("ab", None), part("c", None)]);
        rebase("t", Some(&base), &local, &mut current).unwrap();
        assert_eq!(files(&current), vec!["ab", "c", "mine"]);
    }

    #[test]
    fn a_merge_of_parts_another_writer_changed_is_refused() {
        let base = manifest(3, vec![part("a", None), part("b", None)]);
        let merged = manifest(4, vec![part("ab", None)]);
        let mut deleted_in_a = manifest(4, vec![part("a", Some(2)), part("b", None)]);
        let err = rebase("t", Some(&base), &merged, &mut deleted_in_a).unwrap_err();
        assert!(err.to_string().contains("changed part a"), "{err}");
        let mut merged_elsewhere = manifest(4, vec![part("ab2", None)]);
        let err = rebase("t", Some(&base), &merged, &mut merged_elsewhere).unwrap_err();
        assert!(err.to_string().contains("no longer has part a"), "{err}");
        // Deletions in different parts commute.
        let local = manifest(4, vec![part("a", None), part("b", Some(1))]);
        let mut current = manifest(4, vec![part("a", Some(2)), part("b", None)]);
        rebase("t", Some(&base), &local, &mut current).unwrap();
        assert_eq!(
            current.parts,
            vec![Arc::new(part("a", Some(2))), Arc::new(part("b", Some(1)))]
        );
    }

    #[test]
    fn new_tables_dropped_tables_and_keyed_tables() {
        let local = manifest(1, vec![part("mine", None)]);
        // Created by another writer with the same settings: both appends stay.
        let mut current = manifest(1, vec![part("theirs", None)]);
        rebase("t", None, &local, &mut current).unwrap();
        assert_eq!(files(&current), vec!["theirs", "mine"]);
        // With other settings: refused.
        let mut other = manifest(1, vec![]);
        other.settings.sort_key = vec!["x".into()];
        assert!(rebase("t", None, &local, &mut other).is_err());
        // Dropped since staged: refused.
        let base = manifest(2, vec![]);
        let mut empty = Manifest::new(settings());
        assert!(rebase("t", Some(&base), &local, &mut empty).is_err());
        // A keyed table with a newer state: refused.
        let mut keyed = manifest(3, vec![part("mine", None)]);
        keyed.settings.key = Some(strata_format::KeySetting {
            path: "id".into(),
            key_type: strata_json::KeyType::String,
        });
        let mut newer = manifest(4, vec![]);
        newer.settings = keyed.settings.clone();
        let keyed_base = Manifest {
            version: 3,
            parts: vec![],
            ..keyed.clone()
        };
        assert!(rebase("t", Some(&keyed_base), &keyed, &mut newer).is_err());
    }
}
