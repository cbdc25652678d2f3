//! Collection of what no reader can need any more on object storage: old log versions, parts
//! and files that merges, expiry and deletions replaced, and orphans of commands that failed or
//! were killed between their uploads and their commit.
//!
//! Readers take no lease on object storage (ADR 0022). A version of the log stays while it is
//! the newest or was replaced less than [`GRACE_SECONDS`] ago, and so do the files it lists; a
//! file under `parts/` that no kept version lists is deleted once it is older than the grace
//! period too (an upload in progress is younger, and its commit checks that its files are still
//! there when it ran longer than half the grace period).

use std::collections::BTreeSet;

use futures::TryStreamExt as _;
use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use strata_format::manifest_log;

use crate::error::RemoteError;
use crate::location::delete_if_exists;
use crate::push::files_of;

/// How long replaced versions and unlisted files stay: the longest a query may read the state it
/// started with (the same period Iceberg readers get, ADR 0021).
pub const GRACE_SECONDS: u64 = 600;

/// What one collection deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub files: usize,
    pub versions: usize,
}

/// Deletes what no reader of `table` can need at `now` (seconds since 1970), given `grace`.
pub async fn collect(
    store: &dyn ObjectStore,
    table: &str,
    grace: u64,
    now: i64,
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
    for (_, (version, _)) in &kept {
        live.extend(files_of(&manifest_log::read(store, table, *version).await?));
    }
    let parts = StorePath::from_iter([table, strata_format::manifest::PARTS_DIR]);
    let objects: Vec<_> = store
        .list(Some(&parts))
        .try_collect()
        .await
        .map_err(|e| RemoteError::store(&parts, e))?;
    let mut collected = Collected::default();
    for object in objects {
        let Some(name) = object.location.filename() else {
            continue;
        };
        if !live.contains(name) && object.last_modified.timestamp() <= horizon {
            delete_if_exists(store, &object.location).await?;
            collected.files += 1;
        }
    }
    for (_, (version, _)) in old {
        delete_if_exists(store, &manifest_log::log_location(table, *version)).await?;
        collected.versions += 1;
    }
    Ok(collected)
}
