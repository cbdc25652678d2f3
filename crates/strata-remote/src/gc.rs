//! Collection of what no reader can need any more on object storage: old log versions, parts
//! and files that merges, expiry and deletions replaced, orphans of commands that failed or
//! were killed between their uploads and their commit, and Iceberg metadata of replaced
//! versions (a publication's files carry the version they describe).
//!
//! Readers take no lease on object storage (ADR 0022). A version of the log stays while it is
//! the newest or was replaced less than [`GRACE_SECONDS`] ago, and so do the files it lists; a
//! file under `parts/` that no kept version lists is deleted once it is older than the grace
//! period too (an upload in progress is younger, and its commit checks that its files are still
//! there when it ran longer than half the grace period).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use strata_format::manifest_log;

use crate::error::RemoteError;
use crate::location::{delete_if_exists, list_all};
use crate::push::files_of;

/// How long replaced versions and unlisted files stay: the longest a query may read the state it
/// started with (the same period Iceberg readers get, ADR 0021).
pub const GRACE_SECONDS: u64 = 600;

/// The grace period in force: `STRATA_GRACE_SECONDS`, or [`GRACE_SECONDS`].
pub fn grace_seconds() -> Result<u64, String> {
    match std::env::var("STRATA_GRACE_SECONDS") {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("STRATA_GRACE_SECONDS={text:?} is not a number of seconds")),
        Err(_) => Ok(GRACE_SECONDS),
    }
}

/// What one collection deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub files: usize,
    pub versions: usize,
}

/// The files each log version lists, remembered between collections by a long-running process
/// (the server), since versions never change: a collection then reads only the versions
/// committed since the last one.
#[derive(Debug, Default)]
pub struct VersionFiles {
    by_version: HashMap<(String, u64), Arc<BTreeSet<String>>>,
}

/// Deletes what no reader of `table` can need at `now` (seconds since 1970), given `grace`.
pub async fn collect(
    store: &dyn ObjectStore,
    table: &str,
    grace: u64,
    now: i64,
) -> Result<Collected, RemoteError> {
    collect_remembering(store, table, grace, now, &mut VersionFiles::default()).await
}

/// [`collect`], reading only the versions `remembered` does not hold yet.
pub async fn collect_remembering(
    store: &dyn ObjectStore,
    table: &str,
    grace: u64,
    now: i64,
    remembered: &mut VersionFiles,
) -> Result<Collected, RemoteError> {
    let versions = manifest_log::versions(store, table).await?;
    let horizon = now - grace as i64;
    // A version is kept while it is the newest, or was replaced (its successor created) recently.
    let (kept, old): (Vec<_>, Vec<_>) = versions.iter().enumerate().partition(|(i, _)| {
        versions
            .get(i + 1)
            .is_none_or(|(_, replaced_at)| *replaced_at > horizon)
    });
    if kept.is_empty() {
        return Ok(Collected::default());
    }
    let mut live = BTreeSet::new();
    let mut kept_versions = BTreeSet::new();
    for (_, (version, _)) in &kept {
        let key = (table.to_owned(), *version);
        let files = match remembered.by_version.get(&key) {
            Some(files) => files.clone(),
            None => {
                let manifest = manifest_log::read(store, table, *version).await?;
                // A publication's files are named by the version they describe, its delete
                // files by their vector (ADR 0021).
                let mut files = files_of(&manifest);
                files.extend(
                    manifest
                        .parts
                        .iter()
                        .filter_map(|p| p.deletes.as_ref())
                        .map(|d| strata_iceberg::position_deletes::position_delete_file(&d.file)),
                );
                let files = Arc::new(files);
                remembered.by_version.insert(key, files.clone());
                files
            }
        };
        live.extend(files.iter().cloned());
        kept_versions.insert(*version);
    }
    // Versions no longer kept are never read again.
    remembered
        .by_version
        .retain(|(name, version), _| name != table || kept_versions.contains(version));
    live.insert(strata_iceberg::metadata::VERSION_HINT_FILE.to_owned());
    // The version the hint names stays whatever its age: readers start there.
    if let Some(version) = crate::iceberg::hinted_version(store, table).await? {
        kept_versions.insert(version);
    }
    let mut collected = Collected::default();
    for folder in [
        strata_format::manifest::PARTS_DIR,
        strata_iceberg::METADATA_DIR,
    ] {
        let prefix = StorePath::from_iter([table, folder]);
        let objects = list_all(store, &prefix).await?;
        for object in objects {
            let Some(name) = object.location.filename() else {
                continue;
            };
            let listed = live.contains(name)
                || strata_iceberg::version_of(name).is_some_and(|v| kept_versions.contains(&v));
            if !listed && object.last_modified.timestamp() <= horizon {
                delete_if_exists(store, &object.location).await?;
                collected.files += 1;
            }
        }
    }
    for (_, (version, _)) in old {
        delete_if_exists(store, &manifest_log::log_location(table, *version)).await?;
        collected.versions += 1;
    }
    Ok(collected)
}
