//! The part-writing pipeline shared by ingests and merges: a filled [`Shredder`] is sorted and
//! written as one part file, on the calling thread or on a writer thread of its own.
//!
//! Nothing here makes a part visible: callers list the entries they get back in one manifest
//! commit (see `crate::table`).

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use strata_format::{PartEntry, PartWriterOptions, write_part};
use strata_json::{DEEP_STACK_BYTES, Shredder};

use crate::error::EngineError;

/// Buffered value bytes at which a part is cut. With the part being written in the background
/// and the next one filling, peak memory is a small multiple of this (see docs/architecture.md).
pub const DEFAULT_PART_TARGET_BYTES: usize = 96 * 1024 * 1024;

/// Sorts and writes one part (on the calling thread).
pub(crate) fn write_shredded(
    table: &str,
    table_dir: &Path,
    file: &str,
    shredder: Shredder,
    sort_key: &[String],
) -> Result<PartEntry, EngineError> {
    let shredded = shredder.finish().map_err(|source| EngineError::Json {
        table: table.to_owned(),
        source,
    })?;
    Ok(write_part(
        table_dir,
        file,
        &shredded,
        sort_key,
        &PartWriterOptions::default(),
    )?)
}

/// Parts written because the buffer reached the target size (see [`PartEntry::full`]).
pub(crate) fn full_part(mut entry: PartEntry) -> PartEntry {
    entry.full = true;
    entry
}

pub(crate) fn spawn_part_writer(
    table: String,
    table_dir: PathBuf,
    file: String,
    shredder: Shredder,
    sort_key: Vec<String>,
) -> Result<JoinHandle<Result<PartEntry, EngineError>>, EngineError> {
    std::thread::Builder::new()
        .name("strata-part-writer".into())
        .stack_size(DEEP_STACK_BYTES)
        .spawn(move || write_shredded(&table, &table_dir, &file, shredder, &sort_key))
        .map_err(|e| EngineError::io("<part writer thread>", e))
}

pub(crate) fn join_writer(
    handle: JoinHandle<Result<PartEntry, EngineError>>,
) -> Result<PartEntry, EngineError> {
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
