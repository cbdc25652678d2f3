//! The one way the engine commits a table's manifest: the atomic commit itself
//! (`Manifest::commit`), then, for a table published as Iceberg (ADR 0021), the Iceberg metadata
//! describing the committed state.
//!
//! The commit point is the manifest; the Iceberg metadata follows it. A publication that fails
//! does not undo or fail the commit (the data is committed: reporting a failure would make a
//! client send it again): it is reported on stderr, and the next commit publishes the whole
//! table again, this one's changes included. Every caller holds the table's writer lock, so
//! publications of one table never run at the same time.

use std::path::Path;

use strata_format::Manifest;

use crate::error::EngineError;

/// Commits `manifest` in `table_dir` and keeps the table's Iceberg metadata in step.
pub(crate) fn commit_manifest(manifest: &Manifest, table_dir: &Path) -> Result<(), EngineError> {
    manifest.commit(table_dir)?;
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
