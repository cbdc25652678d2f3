//! Ingest: NDJSON lines in, sorted parts out, committed atomically at the end.
//!
//! Lines are read in chunks, parsed in parallel, and pushed into a [`Shredder`]; when its
//! buffered values reach `part_target_bytes` the batch is sorted and written as a part on a
//! background thread while parsing goes on (at most one part in flight, which bounds memory).
//! Nothing is visible until every part is written and one manifest commit lists them all.
//! Blank lines are skipped (NDJSON convention) and not counted; every other line is either
//! loaded or rejected, so `read = loaded + rejected`.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::thread::JoinHandle;

use rayon::prelude::*;
use strata_format::{Manifest, PartEntry, PartWriterOptions, TableSettings, write_part};
use strata_json::{
    DEEP_STACK_BYTES, Document, DocumentError, JsonPath, ShredOptions, Shredder, parse_document,
};

use crate::error::EngineError;
use crate::input::Input;
use crate::merge::{MergeOptions, MergeScope, MergeSummary, merge_locked};
use crate::table::{DataDir, collect_garbage, new_part_file};

/// Buffered value bytes at which a part is cut. With the part being written in the background
/// and the next one filling, peak memory is a small multiple of this (see docs/architecture.md).
pub const DEFAULT_PART_TARGET_BYTES: usize = 96 * 1024 * 1024;

const CHUNK_BYTES: usize = 8 * 1024 * 1024;
const CHUNK_LINES: usize = 32 * 1024;

#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Dotted JSON paths; used when the table is created, checked against it otherwise.
    pub sort_key: Option<Vec<String>>,
    /// Typed columns per part, for a new table.
    pub max_columns: Option<usize>,
    pub part_target_bytes: usize,
    /// Merge small parts after the ingest commits.
    pub auto_merge: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            sort_key: None,
            max_columns: None,
            part_target_bytes: DEFAULT_PART_TARGET_BYTES,
            auto_merge: true,
        }
    }
}

/// Counters reported while an ingest runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestProgress {
    pub read: u64,
    pub loaded: u64,
    pub rejected: u64,
    /// Loaded documents that had a key twice in one object (the last value was kept, ADR 0002).
    pub duplicate_keys: u64,
    /// Uncompressed input bytes consumed.
    pub bytes: u64,
}

/// One rejected input line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reject {
    pub file: String,
    pub line: u64,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct IngestSummary {
    pub progress: IngestProgress,
    pub parts_written: usize,
    pub table_bytes: u64,
    pub table_documents: u64,
    pub table_parts: usize,
    pub rejects_file: Option<PathBuf>,
    pub merge: Option<MergeSummary>,
}

fn parse_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .stack_size(DEEP_STACK_BYTES)
            .thread_name(|i| format!("strata-parse-{i}"))
            .build()
            .unwrap_or_else(|_| {
                // Fall back to a single-threaded pool; parsing still works, just slower.
                rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .stack_size(DEEP_STACK_BYTES)
                    .build()
                    .unwrap_or_else(|e| panic!("cannot start any parse thread: {e}"))
            })
    })
}

/// Loads `inputs` into `table`, creating it on first use.
///
/// Must run on a thread with a [`DEEP_STACK_BYTES`] stack (see `strata_json::run_with_deep_stack`).
pub fn ingest(
    data_dir: &DataDir,
    table: &str,
    inputs: &[Input],
    options: &IngestOptions,
    on_progress: &mut dyn FnMut(&IngestProgress),
    on_reject: &mut dyn FnMut(&Reject),
) -> Result<IngestSummary, EngineError> {
    let _lock = data_dir.lock_for_write(table)?;
    let table_dir = data_dir.table_dir(table)?;
    let mut manifest = open_or_create(data_dir, table, options)?;
    if collect_garbage(&table_dir, &mut manifest)? {
        manifest.version += 1;
        manifest.commit(&table_dir)?;
    }
    let sort_key = manifest.settings.sort_key.clone();
    let shred_options = ShredOptions {
        sort_key: sort_key.iter().map(|s| JsonPath::decode(s)).collect(),
        max_columns: manifest.settings.max_columns,
        ..ShredOptions::default()
    };

    let mut progress = IngestProgress::default();
    let mut rejects = RejectLog::new(data_dir.rejects_path(table)?);
    let mut shredder = Shredder::new(shred_options.clone());
    let mut in_flight: Option<JoinHandle<Result<PartEntry, EngineError>>> = None;
    let mut new_parts: Vec<PartEntry> = Vec::new();
    let version = manifest.version;

    let mut buffer: Vec<u8> = Vec::with_capacity(CHUNK_BYTES + 4096);
    let mut starts: Vec<(usize, u64)> = Vec::with_capacity(CHUNK_LINES);
    for input in inputs {
        let name = input.display_name();
        let mut reader = input.open()?;
        let mut line_number = 0u64;
        loop {
            buffer.clear();
            starts.clear();
            let mut eof = false;
            while buffer.len() < CHUNK_BYTES && starts.len() < CHUNK_LINES {
                let start = buffer.len();
                let n = reader
                    .read_until(b'\n', &mut buffer)
                    .map_err(|e| EngineError::io(name.clone(), e))?;
                if n == 0 {
                    eof = true;
                    break;
                }
                line_number += 1;
                progress.bytes += n as u64;
                starts.push((start, line_number));
            }
            let lines: Vec<(&[u8], u64)> = starts
                .iter()
                .enumerate()
                .map(|(i, &(start, line))| {
                    let end = starts.get(i + 1).map_or(buffer.len(), |s| s.0);
                    (trim_newline(&buffer[start..end]), line)
                })
                .collect();
            let parsed: Vec<Result<Document, DocumentError>> =
                parse_pool().install(|| lines.par_iter().map(|(l, _)| parse_document(l)).collect());
            for ((_, line), result) in lines.iter().zip(parsed) {
                match result {
                    Ok(doc) => {
                        progress.read += 1;
                        progress.loaded += 1;
                        progress.duplicate_keys += u64::from(doc.has_duplicate_keys());
                        shredder.push(&doc);
                    }
                    Err(DocumentError::Empty) => {}
                    Err(reason) => {
                        progress.read += 1;
                        progress.rejected += 1;
                        let reject = Reject {
                            file: name.clone(),
                            line: *line,
                            reason: reason.to_string(),
                        };
                        rejects.write(&reject)?;
                        on_reject(&reject);
                    }
                }
            }
            if shredder.buffered_bytes() >= options.part_target_bytes {
                let full = std::mem::replace(&mut shredder, Shredder::new(shred_options.clone()));
                if let Some(handle) = in_flight.take() {
                    new_parts.push(full_part(join_writer(handle)?));
                }
                in_flight = Some(spawn_part_writer(
                    table.to_owned(),
                    table_dir.clone(),
                    new_part_file(version),
                    full,
                    sort_key.clone(),
                )?);
            }
            on_progress(&progress);
            // One huge line grows the chunk buffer to its size; give that memory back rather
            // than hold it while the part is sorted and written.
            if buffer.capacity() > 2 * CHUNK_BYTES {
                buffer = Vec::with_capacity(CHUNK_BYTES + 4096);
            }
            if eof {
                break;
            }
        }
    }
    if let Some(handle) = in_flight.take() {
        new_parts.push(full_part(join_writer(handle)?));
    }
    if !shredder.is_empty() {
        new_parts.push(write_shredded(
            table,
            &table_dir,
            &new_part_file(version),
            shredder,
            &sort_key,
        )?);
    }

    let parts_written = new_parts.len();
    manifest.parts.extend(new_parts);
    manifest.version += 1;
    manifest.commit(&table_dir)?;

    let merge = if options.auto_merge {
        let merge_options = MergeOptions {
            part_target_bytes: options.part_target_bytes,
            scope: MergeScope::SmallParts,
        };
        Some(merge_locked(
            table,
            &table_dir,
            &mut manifest,
            &merge_options,
        )?)
    } else {
        None
    };
    Ok(IngestSummary {
        progress,
        parts_written,
        table_bytes: manifest.bytes(),
        table_documents: manifest.rows(),
        table_parts: manifest.parts.len(),
        rejects_file: rejects.path_if_written(),
        merge,
    })
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn open_or_create(
    data_dir: &DataDir,
    table: &str,
    options: &IngestOptions,
) -> Result<Manifest, EngineError> {
    let table_dir = data_dir.table_dir(table)?;
    let requested: Option<Vec<String>> = options.sort_key.as_ref().map(|paths| {
        paths
            .iter()
            .map(|p| JsonPath::parse_dotted(p.trim()).encode())
            .collect()
    });
    match Manifest::load(&table_dir)? {
        Some(existing) => {
            if let Some(given) = requested
                && given != existing.settings.sort_key
            {
                return Err(EngineError::SortKeyMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.sort_key.join(", "),
                    given: given.join(", "),
                });
            }
            Ok(existing)
        }
        None => {
            let manifest = Manifest::new(TableSettings {
                sort_key: requested.unwrap_or_default(),
                max_columns: options
                    .max_columns
                    .unwrap_or(strata_json::shred::DEFAULT_MAX_COLUMNS),
            });
            manifest.commit(&table_dir)?;
            Ok(manifest)
        }
    }
}

/// Sorts and writes one part (on the calling thread).
pub(crate) fn write_shredded(
    table: &str,
    table_dir: &std::path::Path,
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

fn spawn_part_writer(
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

fn join_writer(
    handle: JoinHandle<Result<PartEntry, EngineError>>,
) -> Result<PartEntry, EngineError> {
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Appends rejected lines to the table's rejects file, opened on the first reject.
struct RejectLog {
    path: PathBuf,
    file: Option<File>,
}

impl RejectLog {
    fn new(path: PathBuf) -> Self {
        RejectLog { path, file: None }
    }

    fn write(&mut self, reject: &Reject) -> Result<(), EngineError> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| EngineError::io(&self.path, e))?;
            self.file = Some(file);
        }
        if let Some(file) = self.file.as_mut() {
            let mut line =
                serde_json::to_vec(reject).map_err(|e| EngineError::io(&self.path, e.into()))?;
            line.push(b'\n');
            file.write_all(&line)
                .map_err(|e| EngineError::io(&self.path, e))?;
        }
        Ok(())
    }

    fn path_if_written(&self) -> Option<PathBuf> {
        self.file.as_ref().map(|_| self.path.clone())
    }
}
