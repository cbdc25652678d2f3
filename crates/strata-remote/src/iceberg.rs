//! Keeping the Iceberg publication (ADR 0021) of a table on object storage in step with its log.
//!
//! After a version is committed, the publication is written in the staging directory with the
//! table's object storage locations (`s3://bucket/prefix/TABLE/parts/…`), starting from the
//! current publication fetched from the store (so that field ids and the table's UUID keep their
//! meaning), and its new files are uploaded to `TABLE/metadata/`; `version-hint.text` is written
//! last, and only while the version published is still the newest (a later writer publishes its
//! own). Turning publication off deletes `TABLE/metadata/`, hint first.

use std::collections::BTreeSet;
use std::path::Path;

use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use strata_format::{Manifest, manifest_log};
use strata_iceberg::metadata::{VERSION_HINT_FILE, metadata_file};

use crate::error::RemoteError;
use crate::location::{delete_if_exists, list_all};

fn metadata_location(table: &str, name: &str) -> StorePath {
    StorePath::from_iter([table, strata_iceberg::METADATA_DIR, name])
}

async fn get_bytes(
    store: &dyn ObjectStore,
    location: &StorePath,
) -> Result<Option<bytes::Bytes>, RemoteError> {
    match store.get(location).await {
        Ok(result) => Ok(Some(
            result
                .bytes()
                .await
                .map_err(|e| RemoteError::store(location, e))?,
        )),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(RemoteError::store(location, e)),
    }
}

/// Publishes `committed` (just committed as the newest version of `table`) or, when the table is
/// no longer published (`was_published` and not now), removes the publication.
pub(crate) async fn keep_in_step(
    store: &dyn ObjectStore,
    table: &str,
    staged_dir: &Path,
    committed: &Manifest,
    was_published: bool,
) -> Result<(), RemoteError> {
    let prefix = StorePath::from_iter([table, strata_iceberg::METADATA_DIR]);
    if !committed.settings.iceberg {
        if was_published {
            delete_if_exists(store, &metadata_location(table, VERSION_HINT_FILE)).await?;
            let rest = list_all(store, &prefix).await?;
            for object in rest {
                delete_if_exists(store, &object.location).await?;
            }
        }
        return Ok(());
    }
    let existing: BTreeSet<String> = list_all(store, &prefix)
        .await?
        .iter()
        .filter_map(|meta| meta.location.filename().map(str::to_owned))
        .collect();
    // The staging directory's own publications (the engine's, of its local versions) go; the
    // current one on the store comes in their place.
    stage_publication(store, table, staged_dir, false).await?;
    let metadata_dir = staged_dir.join(strata_iceberg::METADATA_DIR);
    // The staged table's `.location` names the table's URL: the publication lists its files there.
    let published =
        strata_iceberg::publish(staged_dir, committed).map_err(|e| RemoteError::Iceberg {
            table: table.to_owned(),
            source: e,
        })?;
    let entries =
        std::fs::read_dir(&metadata_dir).map_err(|e| RemoteError::io(&metadata_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| RemoteError::io(&metadata_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Names carry their version (or, for delete files, their vector): what the store has
        // is already these bytes.
        let upload =
            name != VERSION_HINT_FILE && !name.ends_with(".tmp") && !existing.contains(&name);
        if upload {
            let bytes =
                std::fs::read(entry.path()).map_err(|e| RemoteError::io(entry.path(), e))?;
            let location = metadata_location(table, &name);
            store
                .put(&location, PutPayload::from(bytes))
                .await
                .map_err(|e| RemoteError::store(&location, e))?;
        }
    }
    if manifest_log::latest_version(store, table).await? == Some(committed.version) {
        let location = metadata_location(table, VERSION_HINT_FILE);
        store
            .put(
                &location,
                PutPayload::from(published.version.to_string().into_bytes()),
            )
            .await
            .map_err(|e| RemoteError::store(&location, e))?;
    }
    Ok(())
}

/// Replaces `metadata/` of the staged table directory `staged_dir` with the table's current
/// publication on the store: its version hint and metadata file, or (`whole`) every file of it.
pub(crate) async fn stage_publication(
    store: &dyn ObjectStore,
    table: &str,
    staged_dir: &Path,
    whole: bool,
) -> Result<(), RemoteError> {
    let metadata_dir = staged_dir.join(strata_iceberg::METADATA_DIR);
    match std::fs::remove_dir_all(&metadata_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(RemoteError::io(&metadata_dir, e)),
    }
    std::fs::create_dir_all(&metadata_dir).map_err(|e| RemoteError::io(&metadata_dir, e))?;
    if whole {
        let prefix = StorePath::from_iter([table, strata_iceberg::METADATA_DIR]);
        let objects = list_all(store, &prefix).await?;
        for object in objects {
            let Some(name) = object.location.filename() else {
                continue;
            };
            if let Some(bytes) = get_bytes(store, &object.location).await? {
                write(&metadata_dir.join(name), &bytes)?;
            }
        }
        return Ok(());
    }
    // A publication that cannot be read is replaced by a new one (new ids and UUID).
    let Some(version) = hinted_version(store, table).await? else {
        return Ok(());
    };
    if let Some(bytes) =
        get_bytes(store, &metadata_location(table, &metadata_file(version))).await?
    {
        write(&metadata_dir.join(metadata_file(version)), &bytes)?;
        write(
            &metadata_dir.join(VERSION_HINT_FILE),
            version.to_string().as_bytes(),
        )?;
    }
    Ok(())
}

/// The version `table`'s `version-hint.text` on the store names (None: no readable hint).
pub(crate) async fn hinted_version(
    store: &dyn ObjectStore,
    table: &str,
) -> Result<Option<u64>, RemoteError> {
    let hint = get_bytes(store, &metadata_location(table, VERSION_HINT_FILE)).await?;
    Ok(hint.and_then(|text| String::from_utf8_lossy(&text).trim().parse().ok()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), RemoteError> {
    std::fs::write(path, bytes).map_err(|e| RemoteError::io(path, e))
}
