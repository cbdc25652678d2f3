//! Data directories whose commits are made durable somewhere else first: `strata serve` on
//! object storage (ADR 0022) runs the engine on a local working directory and registers a
//! [`Mirror`] for it, through which every manifest commit, drop and whole-part read of that
//! directory passes.
//!
//! The registry is process-wide because the engine's commit sites know a table directory, not
//! the [`crate::DataDir`] value it came from; a mirror is found by the table directory's parent.
//!
//! Invariants (for a mirrored directory):
//! - a manifest is committed locally only after the mirror committed it, and what is committed
//!   locally is what the mirror committed (which may hold other writers' parts as well);
//! - the caller holds the table's writer lock across the mirror's commit and the local one, so
//!   the local manifest always equals one committed version of the mirror's log;
//! - a transaction never commits several tables on a mirror: its log commits one table at a
//!   time, so the all-or-nothing rule of a multi-table commit could not hold.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use strata_format::{Manifest, PartEntry};

use crate::error::EngineError;

/// Where a mirrored data directory's commits go first.
pub trait Mirror: Send + Sync {
    /// Makes `manifest`, the next state of `table` (files in `table_dir/parts`), durable on the
    /// mirror; returns the state committed there, which the engine then commits locally.
    fn commit(
        &self,
        table: &str,
        table_dir: &Path,
        manifest: &Manifest,
    ) -> Result<Manifest, EngineError>;

    /// Makes every byte of `parts` readable in `table_dir/parts` (a merge reads them whole).
    fn read_whole(
        &self,
        table: &str,
        table_dir: &Path,
        parts: &[Arc<PartEntry>],
    ) -> Result<(), EngineError>;

    /// `table` was dropped locally: drop it on the mirror.
    fn dropped(&self, table: &str) -> Result<(), EngineError>;
}

type Registry = Vec<(PathBuf, Arc<dyn Mirror>)>;

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: RwLock<Registry> = RwLock::new(Vec::new());
    &REGISTRY
}

/// Keeps `root` mirrored until dropped.
#[must_use = "the data directory stops being mirrored when this is dropped"]
pub struct Mirrored {
    root: PathBuf,
}

impl Drop for Mirrored {
    fn drop(&mut self) {
        registry()
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(root, _)| *root != self.root);
    }
}

/// Sends every commit, drop and whole-part read of the data directory `root` through `mirror`.
pub fn mirror(root: &Path, mirror: Arc<dyn Mirror>) -> Mirrored {
    registry()
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push((root.to_owned(), mirror));
    Mirrored {
        root: root.to_owned(),
    }
}

/// The mirror of the data directory holding `table_dir`, with the table's name.
pub(crate) fn of(table_dir: &Path) -> Option<(String, Arc<dyn Mirror>)> {
    let registry = registry().read().unwrap_or_else(PoisonError::into_inner);
    if registry.is_empty() {
        return None;
    }
    let root = table_dir.parent()?;
    let table = table_dir.file_name()?.to_string_lossy().into_owned();
    registry
        .iter()
        .find(|(mirrored, _)| mirrored == root)
        .map(|(_, mirror)| (table, mirror.clone()))
}

/// Fetches the whole bytes of `parts` when `table_dir` is mirrored (a no-op otherwise).
pub(crate) fn read_whole(table_dir: &Path, parts: &[Arc<PartEntry>]) -> Result<(), EngineError> {
    match of(table_dir) {
        Some((table, mirror)) => mirror.read_whole(&table, table_dir, parts),
        None => Ok(()),
    }
}
