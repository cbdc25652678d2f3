//! Ingest: NDJSON lines in, sorted parts out, committed atomically at the end.
//!
//! Lines are read in chunks, parsed in parallel, and pushed into a [`Shredder`]; when its
//! buffered values reach `part_target_bytes` the batch is sorted and written as a part on a
//! background thread while parsing goes on (at most one part in flight, which bounds memory).
//! Nothing is visible until every part is written and one manifest commit lists them all.
//! Blank lines are skipped (NDJSON convention) and not counted; every other line is either
//! loaded or rejected, so `read = loaded + rejected`. A UTF-8 byte order mark at the start of an
//! input is skipped. Rejected lines are recorded (with their text, up to
//! [`MAX_REJECT_TEXT_BYTES`]) only when the ingest commits.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use rayon::prelude::*;
use strata_format::{Manifest, PartEntry, TableSettings};
use strata_json::{
    DEEP_STACK_BYTES, Document, DocumentError, JsonPath, ShredOptions, Shredder, parse_document,
};

use crate::error::EngineError;
use crate::input::{Input, is_source_error};
use crate::merge::{MergeOptions, MergeScope, MergeSummary, merge_locked};
use crate::part_writing::{
    DEFAULT_PART_TARGET_BYTES, full_part, join_writer, spawn_part_writer, write_shredded,
};
use crate::settings::{validate_max_columns, validate_sort_key};
use crate::table::{DataDir, PENDING_REJECTS_PREFIX, collect_garbage, new_part_file};

const CHUNK_BYTES: usize = 8 * 1024 * 1024;
const CHUNK_LINES: usize = 32 * 1024;

#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Dotted JSON paths (validated by `settings::validate_sort_key`); used when the table is
    /// created, checked against it otherwise.
    pub sort_key: Option<Vec<String>>,
    /// Typed columns per part, for a new table.
    pub max_columns: Option<usize>,
    pub part_target_bytes: usize,
    /// Merge small parts after the ingest commits.
    pub auto_merge: bool,
    /// A longer line (without its line break) is rejected without being held in memory whole;
    /// `None`: no limit (the command line, whose input the user chose).
    pub max_line_bytes: Option<usize>,
    /// The highest write-ahead-log sequence number among the inputs: recorded in the manifest
    /// in the same commit as their parts, so that recovery applies each request once
    /// (`crate::wal`).
    pub wal_applied: Option<u64>,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            sort_key: None,
            max_columns: None,
            part_target_bytes: DEFAULT_PART_TARGET_BYTES,
            auto_merge: true,
            max_line_bytes: None,
            wal_applied: None,
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

impl IngestProgress {
    /// What was counted since `earlier` (an earlier value of the same counters).
    pub fn since(&self, earlier: &IngestProgress) -> IngestProgress {
        IngestProgress {
            read: self.read - earlier.read,
            loaded: self.loaded - earlier.loaded,
            rejected: self.rejected - earlier.rejected,
            duplicate_keys: self.duplicate_keys - earlier.duplicate_keys,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

/// The most bytes of a rejected line recorded in `rejects.ndjson`; longer lines are cut there
/// and marked `truncated`.
pub const MAX_REJECT_TEXT_BYTES: usize = 64 * 1024;

/// One rejected input line, as recorded in `rejects.ndjson` (docs/format.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reject {
    pub file: String,
    /// 1-based line number in the decompressed input.
    pub line: u64,
    /// Byte offset of the line's first byte in the decompressed input.
    pub offset: u64,
    pub reason: String,
    /// Length of the line in bytes (without its line break).
    pub length: u64,
    /// The line (its first [`MAX_REJECT_TEXT_BYTES`] bytes) when that is valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The same bytes in standard base64 when they are not valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// True when the line was longer than [`MAX_REJECT_TEXT_BYTES`] and was cut.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Reject {
    fn new(file: &str, line: u64, offset: u64, reason: String, bytes: &[u8]) -> Self {
        let truncated = bytes.len() > MAX_REJECT_TEXT_BYTES;
        let mut kept = &bytes[..bytes.len().min(MAX_REJECT_TEXT_BYTES)];
        if truncated {
            // Do not let the cut split a UTF-8 character of an otherwise valid line.
            if let Err(e) = std::str::from_utf8(kept)
                && e.error_len().is_none()
            {
                kept = &kept[..e.valid_up_to()];
            }
        }
        let (text, base64) = match std::str::from_utf8(kept) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => {
                use base64::Engine;
                (
                    None,
                    Some(base64::engine::general_purpose::STANDARD.encode(kept)),
                )
            }
        };
        Reject {
            file: file.to_owned(),
            line,
            offset,
            reason,
            length: bytes.len() as u64,
            text,
            base64,
            truncated,
        }
    }
}

#[derive(Debug, Clone)]
pub struct IngestSummary {
    pub progress: IngestProgress,
    /// The same counts for each input, in the order given.
    pub per_input: Vec<IngestProgress>,
    pub parts_written: usize,
    pub table_bytes: u64,
    pub table_documents: u64,
    pub table_parts: usize,
    /// True when this ingest created the table (its first commit).
    pub created: bool,
    /// Where this ingest's rejected lines were recorded (None when there were none).
    pub rejects_file: Option<PathBuf>,
    pub merge: Option<MergeSummary>,
    /// What went wrong after the commit (the documents are loaded all the same).
    pub warnings: Vec<String>,
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

/// Loads `inputs` into `table`, creating it with its first commit.
///
/// Settings and inputs are checked before anything is written. An error means nothing was
/// committed (and no reject was recorded); `Ok` means the documents are committed, even when
/// the follow-up merge or the publication of rejects failed (see [`IngestSummary::warnings`]).
/// Every line rejected is an error ([`EngineError::AllRejected`]).
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
    let table_dir = data_dir.table_dir(table)?;
    let requested_sort_key = options
        .sort_key
        .as_deref()
        .map(validate_sort_key)
        .transpose()?;
    let max_columns = options.max_columns.map(validate_max_columns).transpose()?;
    for input in inputs {
        input.check()?;
    }

    let _lock = data_dir.lock_for_write(table, "ingest")?;
    let existing = Manifest::load(&table_dir)?;
    let created = existing.is_none();
    let mut manifest = match existing {
        Some(existing) => {
            if let Some(given) = requested_sort_key
                && given != existing.settings.sort_key
            {
                return Err(EngineError::SortKeyMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.sort_key.join(", "),
                    given: given.join(", "),
                });
            }
            existing
        }
        None => Manifest::new(TableSettings {
            sort_key: requested_sort_key.unwrap_or_default(),
            max_columns: max_columns.unwrap_or(strata_json::shred::DEFAULT_MAX_COLUMNS),
        }),
    };
    if collect_garbage(&table_dir, &mut manifest)? && !created {
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
    let mut rejects = RejectLog::new(&table_dir, data_dir.rejects_path(table)?);
    let mut shredder = Shredder::new(shred_options.clone());
    let mut in_flight: Option<JoinHandle<Result<PartEntry, EngineError>>> = None;
    let mut new_parts: Vec<PartEntry> = Vec::new();
    let version = manifest.version;

    let mut per_input = Vec::with_capacity(inputs.len());
    for input in inputs {
        let before = progress.clone();
        let mut chunks = ChunkReader::open(input, options.max_line_bytes)?;
        let mut record = |reject: Reject| -> Result<(), EngineError> {
            rejects.write(&reject)?;
            on_reject(&reject);
            Ok(())
        };
        loop {
            let more = chunks.next(&mut progress, &mut |doc| shredder.push(doc), &mut record)?;
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
            if !more {
                break;
            }
        }
        per_input.push(progress.since(&before));
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
    if progress.loaded == 0 && progress.rejected > 0 {
        return Err(EngineError::AllRejected {
            table: table.to_owned(),
            rejected: progress.rejected,
        });
    }

    let parts_written = new_parts.len();
    manifest.parts.extend(new_parts);
    if let Some(seq) = options.wal_applied {
        manifest.wal_applied = Some(manifest.wal_applied.unwrap_or(0).max(seq));
    }
    manifest.version += 1;
    manifest.commit(&table_dir)?;

    // Committed: from here on nothing may turn the ingest into a failure, or a retry would
    // load the same documents twice.
    let mut warnings = Vec::new();
    let rejects_file = match rejects.publish() {
        Ok(path) => path,
        Err(e) => {
            warnings.push(format!(
                "the {} rejected lines could not be recorded in {}: {e}",
                progress.rejected,
                data_dir.rejects_path(table)?.display()
            ));
            None
        }
    };
    let committed = manifest.clone();
    let merge = if options.auto_merge {
        let merge_options = MergeOptions {
            part_target_bytes: options.part_target_bytes,
            scope: MergeScope::SmallParts,
        };
        match merge_locked(table, &table_dir, &mut manifest, &merge_options) {
            Ok(summary) => Some(summary),
            Err(e) => {
                warnings.push(format!(
                    "the automatic merge of small parts failed (the ingest's documents are \
                     committed; `strata optimize {table}` retries the merge): {e}"
                ));
                // The merge may have failed before or after its own commit.
                manifest = Manifest::load(&table_dir)
                    .ok()
                    .flatten()
                    .unwrap_or(committed);
                None
            }
        }
    } else {
        None
    };
    Ok(IngestSummary {
        progress,
        per_input,
        parts_written,
        created,
        table_bytes: manifest.bytes(),
        table_documents: manifest.rows(),
        table_parts: manifest.parts.len(),
        rejects_file,
        merge,
        warnings,
    })
}

/// Checks an input by the rules of [`ingest`] without loading it: the counts it would report,
/// and each line it would reject. Nothing is written.
///
/// Must run where [`ingest`] may (parsing uses the same pool).
pub fn screen(
    input: &Input,
    max_line_bytes: Option<usize>,
    on_reject: &mut dyn FnMut(&Reject),
) -> Result<IngestProgress, EngineError> {
    let mut progress = IngestProgress::default();
    let mut chunks = ChunkReader::open(input, max_line_bytes)?;
    while chunks.next(&mut progress, &mut |_| {}, &mut |reject| {
        on_reject(&reject);
        Ok(())
    })? {}
    Ok(progress)
}

/// Reads one input in chunks of lines, parses each chunk in parallel, and hands every
/// document and every rejected line on in input order.
struct ChunkReader {
    name: String,
    reader: Box<dyn BufRead + Send>,
    max_line_bytes: Option<usize>,
    line_number: u64,
    offset: u64,
    buffer: Vec<u8>,
    /// Per line of the chunk: where it starts in `buffer`, its line number and input offset.
    starts: Vec<(usize, u64, u64)>,
}

impl ChunkReader {
    fn open(input: &Input, max_line_bytes: Option<usize>) -> Result<Self, EngineError> {
        Ok(ChunkReader {
            name: input.display_name(),
            reader: input.open()?,
            max_line_bytes,
            line_number: 0,
            offset: 0,
            buffer: Vec::with_capacity(CHUNK_BYTES + 4096),
            starts: Vec::with_capacity(CHUNK_LINES),
        })
    }

    /// Reads, parses and hands on the next chunk; false once the input has ended.
    fn next(
        &mut self,
        progress: &mut IngestProgress,
        on_document: &mut dyn FnMut(&Document),
        on_reject: &mut dyn FnMut(Reject) -> Result<(), EngineError>,
    ) -> Result<bool, EngineError> {
        let ChunkReader {
            name,
            reader,
            max_line_bytes,
            line_number,
            offset,
            buffer,
            starts,
        } = self;
        let mut broken: Option<(Vec<u8>, u64, u64, String)> = None;
        buffer.clear();
        starts.clear();
        let mut eof = false;
        while buffer.len() < CHUNK_BYTES && starts.len() < CHUNK_LINES {
            let start = buffer.len();
            match read_line(&mut **reader, buffer, *max_line_bytes) {
                Ok(LineRead::End) => {
                    eof = true;
                    break;
                }
                Ok(LineRead::Line(n)) => {
                    *line_number += 1;
                    starts.push((start, *line_number, *offset));
                    *offset += n as u64;
                    progress.bytes += n as u64;
                }
                Ok(LineRead::TooLong {
                    length,
                    content,
                    limit,
                }) => {
                    // Reported now, so it comes before the chunk's other rejects.
                    *line_number += 1;
                    let kept = buffer.split_off(start);
                    progress.read += 1;
                    progress.rejected += 1;
                    progress.bytes += length;
                    let mut reject = Reject::new(
                        name,
                        *line_number,
                        *offset,
                        format!("the line is longer than the limit of {limit} bytes"),
                        trim_newline(&kept),
                    );
                    reject.length = content;
                    reject.truncated = true;
                    on_reject(reject)?;
                    *offset += length;
                }
                Err(e) if is_source_error(&e) => {
                    return Err(EngineError::Input {
                        path: name.clone().into(),
                        source: e,
                    });
                }
                Err(e) => {
                    // The decompressor failed: what it decoded before is loaded; the bytes
                    // of the line it broke off in, and everything after, are rejected.
                    let partial = buffer.split_off(start);
                    progress.bytes += partial.len() as u64;
                    broken = Some((
                        partial,
                        *line_number + 1,
                        *offset,
                        format!(
                            "the compressed input is damaged or ends early after {offset} \
                             bytes of decompressed data ({e}); the rest of this input \
                             was not read"
                        ),
                    ));
                    eof = true;
                    break;
                }
            }
        }
        let lines: Vec<(&[u8], u64, u64)> = starts
            .iter()
            .enumerate()
            .map(|(i, &(start, line, offset))| {
                let end = starts.get(i + 1).map_or(buffer.len(), |s| s.0);
                let mut text = trim_newline(&buffer[start..end]);
                if line == 1 {
                    text = text.strip_prefix(UTF8_BOM).unwrap_or(text);
                }
                (text, line, offset)
            })
            .collect();
        let parsed: Vec<Result<Document, DocumentError>> = parse_pool().install(|| {
            lines
                .par_iter()
                .map(|(l, _, _)| parse_document(l))
                .collect()
        });
        for (&(text, line, offset), result) in lines.iter().zip(parsed) {
            match result {
                Ok(doc) => {
                    progress.read += 1;
                    progress.loaded += 1;
                    progress.duplicate_keys += u64::from(doc.has_duplicate_keys());
                    on_document(&doc);
                }
                Err(DocumentError::Empty) => {}
                Err(reason) => {
                    progress.read += 1;
                    progress.rejected += 1;
                    on_reject(Reject::new(name, line, offset, reason.to_string(), text))?;
                }
            }
        }
        if let Some((text, line, offset, reason)) = broken.take() {
            progress.read += 1;
            progress.rejected += 1;
            on_reject(Reject::new(name, line, offset, reason, trim_newline(&text)))?;
        }
        // One huge line grows the chunk buffer to its size; give that memory back rather
        // than hold it while the part is sorted and written.
        if buffer.capacity() > 2 * CHUNK_BYTES {
            *buffer = Vec::with_capacity(CHUNK_BYTES + 4096);
        }
        Ok(!eof)
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What [`read_line`] found.
enum LineRead {
    End,
    /// A line of this many bytes (with its line break) was appended to the buffer.
    Line(usize),
    /// A line of `length` bytes with its line break, `content` without, over `limit`: only its
    /// first bytes were appended; the rest was read and dropped.
    TooLong {
        length: u64,
        content: u64,
        limit: usize,
    },
}

/// `read_until(b'\n')`, except that a line longer than `limit` is not held whole.
fn read_line(
    reader: &mut dyn BufRead,
    buffer: &mut Vec<u8>,
    limit: Option<usize>,
) -> std::io::Result<LineRead> {
    let Some(limit) = limit else {
        return Ok(match reader.read_until(b'\n', buffer)? {
            0 => LineRead::End,
            n => LineRead::Line(n),
        });
    };
    let start = buffer.len();
    let mut length = 0u64;
    let mut ended = false;
    while !ended {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        let used = match memchr::memchr(b'\n', available) {
            Some(i) => {
                ended = true;
                i + 1
            }
            None => available.len(),
        };
        let room = (limit + 2).saturating_sub(buffer.len() - start);
        buffer.extend_from_slice(&available[..used.min(room)]);
        length += used as u64;
        reader.consume(used);
    }
    let kept = &buffer[start..];
    Ok(if length == 0 {
        LineRead::End
    } else if trim_newline(kept).len() > limit || (kept.len() as u64) < length {
        LineRead::TooLong {
            length,
            content: length - u64::from(ended),
            limit,
        }
    } else {
        LineRead::Line(length as usize)
    })
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Collects an ingest's rejected lines in a pending file of the table directory; they are
/// appended to `rejects.ndjson` only once the ingest has committed ([`RejectLog::publish`]).
/// An ingest that fails deletes its pending file; one that was killed leaves it to the next
/// writer's garbage collection.
struct RejectLog {
    pending: PathBuf,
    published: PathBuf,
    file: Option<BufWriter<File>>,
}

impl RejectLog {
    fn new(table_dir: &Path, published: PathBuf) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let pending = table_dir.join(format!(
            "{PENDING_REJECTS_PREFIX}{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        RejectLog {
            pending,
            published,
            file: None,
        }
    }

    fn write(&mut self, reject: &Reject) -> Result<(), EngineError> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&self.pending)
                .map_err(|e| EngineError::io(&self.pending, e))?;
            self.file = Some(BufWriter::new(file));
        }
        if let Some(file) = self.file.as_mut() {
            serde_json::to_writer(&mut *file, reject)
                .map_err(|e| EngineError::io(&self.pending, e.into()))?;
            file.write_all(b"\n")
                .map_err(|e| EngineError::io(&self.pending, e))?;
        }
        Ok(())
    }

    /// Appends the pending rejects to the table's rejects file; returns its path when there
    /// were any.
    fn publish(&mut self) -> Result<Option<PathBuf>, EngineError> {
        let Some(writer) = self.file.take() else {
            return Ok(None);
        };
        let mut pending = writer
            .into_inner()
            .map_err(|e| EngineError::io(&self.pending, e.into_error()))?;
        pending
            .seek(SeekFrom::Start(0))
            .map_err(|e| EngineError::io(&self.pending, e))?;
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.published)
            .map_err(|e| EngineError::io(&self.published, e))?;
        std::io::copy(&mut pending, &mut out).map_err(|e| EngineError::io(&self.published, e))?;
        out.sync_data()
            .map_err(|e| EngineError::io(&self.published, e))?;
        drop(pending);
        std::fs::remove_file(&self.pending).map_err(|e| EngineError::io(&self.pending, e))?;
        Ok(Some(self.published.clone()))
    }
}

impl Drop for RejectLog {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Not published: the ingest failed, and its rejects are not recorded.
            let _ = std::fs::remove_file(&self.pending);
        }
    }
}
