//! Live manifests: table versions this process committed through the server's write-ahead log
//! and shows its own readers before their manifest is on disk (ADR 0017, "live manifests").
//!
//! A live manifest is a table's newest version in this process: [`Manifest::load`] and the
//! query's snapshots return it instead of `manifest.json`. It lists parts and side files that
//! may not be durable yet; what makes the version durable (the write-ahead log frame of its
//! changes, and the checkpoint that fsyncs its files and commits it) is the engine's. Invariants:
//! - a live manifest is published, replaced and cleared only under the table's writer lock, and
//!   its version is above the one on disk it was derived from;
//! - whoever commits a manifest of the table to disk clears the entry in the same writer-lock
//!   hold (after its commit, so that a reader never goes from the newer on-disk version back to
//!   an older live one);
//! - other processes see `manifest.json` only (up to a checkpoint behind).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::Manifest;

fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<Manifest>>> {
    static LIVE: OnceLock<Mutex<HashMap<PathBuf, Arc<Manifest>>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// The live manifest of the table in `table_dir`, if it has one.
pub fn get(table_dir: &Path) -> Option<Arc<Manifest>> {
    registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(table_dir)
        .cloned()
}

/// Makes `manifest` the table's live manifest (module docs: under its writer lock).
pub fn publish(table_dir: &Path, manifest: Arc<Manifest>) {
    registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(table_dir.to_owned(), manifest);
}

/// Forgets the table's live manifest: its newest version is on disk, or the table is gone.
pub fn clear(table_dir: &Path) {
    registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(table_dir);
}

/// The directories of the tables under `root` that have a live manifest.
pub fn tables_under(root: &Path) -> Vec<PathBuf> {
    let mut tables: Vec<PathBuf> = registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .keys()
        .filter(|dir| dir.parent() == Some(root))
        .cloned()
        .collect();
    tables.sort();
    tables
}
