//! A table's manifests on object storage (ADR 0022): a log of never-overwritten objects
//! `TABLE/_log/<20-digit version>.json`, each a whole manifest, created with
//! `PutMode::Create` — the commit point where there is no rename.
//!
//! Invariants:
//! - version V is written at most once: of two writers creating it, the store lets exactly one
//!   succeed (S3 `If-None-Match: *`; an exclusive create on a local directory), and the other
//!   learns it lost ([`Commit::Conflict`]);
//! - the table's state is the manifest of the highest version listed; versions are zero-padded so
//!   that the store's key order is version order;
//! - [`commit_change`] re-reads the log after a lost race and applies its change again to the new
//!   state, so changes that commute (an ingest's new parts) are never lost, and a change that no
//!   longer applies fails instead of overwriting a newer state.
//!
//! Nothing here deletes a version; collection of old versions and orphans is the writer's
//! (ADR 0022: after a grace period).

use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::FormatError;
use crate::manifest::Manifest;

/// The log's directory inside a table.
pub const LOG_DIR: &str = "_log";
/// How often [`commit_change`] re-reads and retries after losing a race before it gives up.
pub const MAX_COMMIT_ATTEMPTS: usize = 64;

/// Where version `version` of `table`'s manifest sits in the store.
pub fn log_location(table: &str, version: u64) -> StorePath {
    StorePath::from_iter([table, LOG_DIR, &format!("{version:020}.json")])
}

/// The version a log object's file name holds (None: not a log entry).
fn version_of(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn store_error(location: &StorePath, source: object_store::Error) -> FormatError {
    FormatError::Store {
        path: location.as_ref().into(),
        source,
    }
}

/// The newest manifest of `table`, or None when the table has none (it does not exist).
pub async fn latest(store: &dyn ObjectStore, table: &str) -> Result<Option<Manifest>, FormatError> {
    let Some(version) = latest_version(store, table).await? else {
        return Ok(None);
    };
    read(store, table, version).await.map(Some)
}

/// The newest version of `table`'s log, or None when it has none (the table does not exist).
pub async fn latest_version(
    store: &dyn ObjectStore,
    table: &str,
) -> Result<Option<u64>, FormatError> {
    Ok(versions(store, table)
        .await?
        .into_iter()
        .map(|(version, _)| version)
        .max())
}

/// Every version of `table`'s log with the time its object was created (seconds since 1970),
/// oldest first.
pub async fn versions(
    store: &dyn ObjectStore,
    table: &str,
) -> Result<Vec<(u64, i64)>, FormatError> {
    let prefix = StorePath::from_iter([table, LOG_DIR]);
    let entries: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| store_error(&prefix, e))?;
    let mut versions: Vec<_> = entries
        .iter()
        .filter_map(|meta| {
            let version = meta.location.filename().and_then(version_of)?;
            Some((version, meta.last_modified.timestamp()))
        })
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

/// Version `version` of `table`'s manifest, checked to be that version.
pub async fn read(
    store: &dyn ObjectStore,
    table: &str,
    version: u64,
) -> Result<Manifest, FormatError> {
    let location = log_location(table, version);
    let bytes = store
        .get(&location)
        .await
        .map_err(|e| store_error(&location, e))?
        .bytes()
        .await
        .map_err(|e| store_error(&location, e))?;
    let path = std::path::PathBuf::from(location.as_ref());
    let manifest = Manifest::parse(&path, &bytes)?;
    if manifest.version != version {
        return Err(FormatError::Manifest {
            path,
            message: format!(
                "holds version {}, its name says {version}",
                manifest.version
            ),
        });
    }
    Ok(manifest)
}

/// The outcome of one attempt to commit a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Committed,
    /// Another writer created this version first.
    Conflict,
}

/// Creates `manifest` as version `manifest.version` of `table`, unless that version exists.
pub async fn commit(
    store: &dyn ObjectStore,
    table: &str,
    manifest: &Manifest,
) -> Result<Commit, FormatError> {
    let location = log_location(table, manifest.version);
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| FormatError::Manifest {
        path: location.as_ref().into(),
        message: e.to_string(),
    })?;
    let options = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    match store
        .put_opts(&location, PutPayload::from(bytes), options)
        .await
    {
        Ok(_) => Ok(Commit::Committed),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Ok(Commit::Conflict),
        Err(e) => Err(store_error(&location, e)),
    }
}

/// Commits `change` applied to the newest state of `table` (or to `new_table`'s settings when
/// the table has no manifest yet) as the next version, re-reading and re-applying after every
/// lost race. `change` returns an error when it does not apply to the state it is given; that
/// error is returned and nothing is written. Returns the committed manifest.
pub async fn commit_change<E>(
    store: &dyn ObjectStore,
    table: &str,
    new_table: impl Fn() -> Manifest,
    mut change: impl FnMut(&mut Manifest) -> Result<(), E>,
) -> Result<Manifest, E>
where
    E: From<FormatError>,
{
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        let mut manifest = latest(store, table).await?.unwrap_or_else(&new_table);
        change(&mut manifest)?;
        manifest.version += 1;
        if commit(store, table, &manifest).await? == Commit::Committed {
            return Ok(manifest);
        }
    }
    let location = log_location(table, 0);
    Err(FormatError::Manifest {
        path: location.as_ref().into(),
        message: format!(
            "lost the race to commit {MAX_COMMIT_ATTEMPTS} times in a row to other writers"
        ),
    }
    .into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use object_store::local::LocalFileSystem;
    use object_store::memory::InMemory;

    use super::*;
    use crate::manifest::TableSettings;

    fn settings() -> TableSettings {
        TableSettings::sorted_by(vec!["k".into()], 64)
    }

    fn new_table() -> Manifest {
        Manifest::new(settings())
    }

    /// A part entry named `file` (only its name matters here).
    fn part(file: &str) -> std::sync::Arc<crate::PartEntry> {
        std::sync::Arc::new(
            serde_json::from_value(serde_json::json!({
                "file": file, "rows": 1, "bytes": 1, "columns": {}, "remainder_paths": {},
                "remainder_paths_truncated": false, "sort_key_min": {}, "sort_key_max": {}
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_version_is_created_once_and_the_newest_is_the_state() {
        let store = InMemory::new();
        assert!(latest(&store, "t").await.unwrap().is_none());
        let mut first = new_table();
        first.version = 1;
        assert_eq!(
            commit(&store, "t", &first).await.unwrap(),
            Commit::Committed
        );
        let mut rival = first.clone();
        rival.parts.push(part("rival.parquet"));
        assert_eq!(commit(&store, "t", &rival).await.unwrap(), Commit::Conflict);
        assert_eq!(latest(&store, "t").await.unwrap().unwrap(), first);
        // Zero padding keeps key order = version order past one digit.
        for version in 2..=12 {
            let mut next = first.clone();
            next.version = version;
            commit(&store, "t", &next).await.unwrap();
        }
        assert_eq!(latest(&store, "t").await.unwrap().unwrap().version, 12);
        assert_eq!(
            log_location("t", 12).as_ref(),
            "t/_log/00000000000000000012.json"
        );
    }

    /// Writers racing on one table lose no change: every append is in the final state once, and
    /// each version extends the one before it.
    async fn racing_writers_lose_nothing(store: Arc<dyn ObjectStore>) {
        let writers = 4;
        let appends = 10;
        let mut tasks = Vec::new();
        for writer in 0..writers {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..appends {
                    let file = format!("w{writer}-{i}.parquet");
                    commit_change::<FormatError>(store.as_ref(), "t", new_table, |m| {
                        m.parts.push(part(&file));
                        Ok(())
                    })
                    .await
                    .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let last = latest(store.as_ref(), "t").await.unwrap().unwrap();
        assert_eq!(last.version, (writers * appends) as u64);
        let mut files: Vec<String> = last.parts.iter().map(|p| p.file.clone()).collect();
        files.sort();
        files.dedup();
        assert_eq!(files.len(), writers * appends);
        for version in 2..=last.version {
            let before = read(store.as_ref(), "t", version - 1).await.unwrap();
            let after = read(store.as_ref(), "t", version).await.unwrap();
            assert_eq!(after.parts[..before.parts.len()], before.parts[..]);
            assert_eq!(after.parts.len(), before.parts.len() + 1);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_writers_lose_nothing_in_memory() {
        racing_writers_lose_nothing(Arc::new(InMemory::new())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_writers_lose_nothing_on_a_local_directory() {
        let tmp = tempfile::tempdir().unwrap();
        racing_writers_lose_nothing(Arc::new(
            LocalFileSystem::new_with_prefix(tmp.path()).unwrap(),
        ))
        .await;
    }

    #[tokio::test]
    async fn a_change_that_no_longer_applies_writes_nothing() {
        let store = InMemory::new();
        let result = commit_change::<FormatError>(&store, "t", new_table, |_| {
            Err(FormatError::Manifest {
                path: "t".into(),
                message: "does not apply".into(),
            })
        })
        .await;
        assert!(result.is_err());
        assert!(latest(&store, "t").await.unwrap().is_none());
    }
}
