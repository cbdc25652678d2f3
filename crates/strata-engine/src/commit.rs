//! The one way the engine commits a table's manifest: the atomic commit itself
//! (`Manifest::commit`), then, for a table published as Iceberg (ADR 0021), the Iceberg metadata
//! describing the committed state. In a mirrored data directory ([`crate::mirror`]) the mirror
//! commits first, publication included, and the local commit follows it.
//!
//! The commit point is the manifest; the Iceberg metadata follows it. A publication that fails
//! does not undo or fail the commit (the data is committed: reporting a failure would make a
//! client send it again): it is reported on stderr, and the next commit publishes the whole
//! table again, this one's changes included. Every caller holds the table's writer lock, so
//! publications of one table never run at the same time.

use std::path::Path;

use strata_format::Manifest;

use crate::error::EngineError;

/// Commits `manifest` in `table_dir` and keeps the table's Iceberg metadata in step. On a
/// mirrored data directory `manifest` becomes what the mirror committed (other writers' parts
/// included), so that a caller that goes on changing it starts from the committed state.
pub(crate) fn commit_manifest(
    manifest: &mut Manifest,
    table_dir: &Path,
) -> Result<(), EngineError> {
    if commit_mirrored(manifest, table_dir)? {
        return Ok(());
    }
    commit_local(manifest, table_dir)?;
    if let Err(e) = keep_iceberg_in_step(manifest, table_dir) {
        eprintln!(
            "strata: committed version {} of {}, but its Iceberg metadata was not updated (the \
             next commit publishes it again): {e}",
            manifest.version,
            table_dir.display()
        );
    }
    Ok(())
}

/// Commits `manifest` to `table_dir`'s `manifest.json`. When the table has a live manifest
/// (changes this server logged but has not written to disk yet: `crate::transaction::logged`),
/// its undurable files are made durable first, and the live manifest is dropped after; when
/// another process committed to the table meanwhile, the live changes are applied again on top
/// of its commit instead and this commit fails (its caller retries on the table as it is).
pub(crate) fn commit_local(manifest: &mut Manifest, table_dir: &Path) -> Result<(), EngineError> {
    // A table created now holds none of the transaction frames logged before it: a table of
    // the same name dropped earlier does (ADR 0017, "live manifests").
    if manifest.wal_transactions.is_none()
        && !table_dir
            .join(strata_format::manifest::MANIFEST_FILE)
            .exists()
    {
        manifest.wal_transactions = crate::transaction::logged::published(table_dir);
    }
    if !crate::transaction::logged::before_durable_commit(table_dir)? {
        return Err(EngineError::Invalid(format!(
            "table {} was changed by another process while this commit was prepared; try again",
            table_dir.display()
        )));
    }
    manifest.commit(table_dir)?;
    crate::transaction::logged::forget(table_dir);
    Ok(())
}

/// On a mirrored data directory, commits `manifest` on the mirror, then locally what the mirror
/// committed; false (nothing done) when `table_dir` is not mirrored.
pub(crate) fn commit_mirrored(
    manifest: &mut Manifest,
    table_dir: &Path,
) -> Result<bool, EngineError> {
    let Some((table, mirror)) = crate::mirror::of(table_dir) else {
        return Ok(false);
    };
    *manifest = mirror.commit(&table, table_dir, manifest)?;
    manifest.commit(table_dir)?;
    Ok(true)
}

/// Publishes the committed `manifest` when the table is published as Iceberg; removes the
/// metadata of a table that no longer is.
pub(crate) fn keep_iceberg_in_step(
    manifest: &Manifest,
    table_dir: &Path,
) -> Result<(), strata_iceberg::IcebergError> {
    if manifest.settings.iceberg {
        strata_iceberg::publish(table_dir, manifest)?;
    } else if table_dir.join(strata_iceberg::METADATA_DIR).exists() {
        strata_iceberg::unpublish(table_dir)?;
    }
    Ok(())
}
