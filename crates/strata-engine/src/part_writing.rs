//! The part-writing pipeline shared by ingests and merges: a filled [`Shredder`] is sorted and
//! written as one part file, on the calling thread or on a writer thread of its own.
//!
//! Nothing here makes a part visible: callers list the entries they get back in one manifest
//! commit (see `crate::table`).

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use strata_format::{PartEntry, PartWriterOptions, TableSettings, write_part};
use strata_json::{DEEP_STACK_BYTES, JsonPath, ShredOptions, Shredder};

use crate::error::EngineError;

/// Buffered value bytes at which a part is cut. With the part being written in the background
/// and the next one filling, peak memory is a small multiple of this (see docs/architecture.md).
pub const DEFAULT_PART_TARGET_BYTES: usize = 96 * 1024 * 1024;

/// How the documents of a table with these settings are shredded: the sort-key paths and the
/// key path always get their typed columns.
pub(crate) fn shred_options(settings: &TableSettings) -> ShredOptions {
    ShredOptions {
        sort_key: settings
            .sort_key
            .iter()
            .map(|s| JsonPath::decode(s))
            .collect(),
        key: settings.key.as_ref().map(|k| JsonPath::decode(&k.path)),
        max_columns: settings.max_columns,
        ..ShredOptions::default()
    }
}

/// How parts of a table with these settings are written (a keyed table's get key files; text-
/// indexed paths get text index files; secondary indexes get index files).
pub(crate) fn part_writer_options(settings: &TableSettings) -> PartWriterOptions {
    PartWriterOptions {
        key_column: settings.key.as_ref().map(|k| k.path.clone()),
        text_columns: settings.text_index.clone(),
        text_postings: settings.text_postings,
        keyword_columns: settings.keyword_index.clone(),
        indexes: settings.indexes.clone(),
        ..PartWriterOptions::default()
    }
}

/// A part written from a shredder.
pub(crate) struct ShreddedPart {
    pub(crate) entry: PartEntry,
    /// The row of each document in push order (None: in push order), see
    /// [`strata_json::ShreddedBatch::positions`].
    pub(crate) positions: Option<Vec<u32>>,
}

/// Sorts and writes one part (on the calling thread).
pub(crate) fn write_shredded(
    table: &str,
    table_dir: &Path,
    file: &str,
    shredder: Shredder,
    settings: &TableSettings,
) -> Result<ShreddedPart, EngineError> {
    let mut shredded = shredder.finish().map_err(|source| EngineError::Json {
        table: table.to_owned(),
        source,
    })?;
    let entry = write_part(
        table_dir,
        file,
        &shredded,
        &settings.sort_key,
        &part_writer_options(settings),
    )?;
    Ok(ShreddedPart {
        entry,
        positions: shredded.positions.take(),
    })
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
    settings: TableSettings,
) -> Result<JoinHandle<Result<ShreddedPart, EngineError>>, EngineError> {
    std::thread::Builder::new()
        .name("strata-part-writer".into())
        .stack_size(DEEP_STACK_BYTES)
        .spawn(move || write_shredded(&table, &table_dir, &file, shredder, &settings))
        .map_err(|e| EngineError::io("<part writer thread>", e))
}

pub(crate) fn join_writer(
    handle: JoinHandle<Result<ShreddedPart, EngineError>>,
) -> Result<ShreddedPart, EngineError> {
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
