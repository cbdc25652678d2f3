//! Reading an input's lines: in chunks, parsed in parallel on the parse pool, every document
//! and every rejected line handed on in input order.
//!
//! Invariants: each non-blank line is counted once, as loaded or rejected; a line's number and
//! byte offset are those of the decompressed input; a line over the limit is rejected without
//! being held whole.

use std::io::BufRead;
use std::sync::{Arc, OnceLock};

use rayon::prelude::*;
use strata_json::{DEEP_STACK_BYTES, Document, DocumentError, KeyValue, TableKey, parse_document};
use strata_pipeline::Pipeline;

use super::IngestProgress;
use super::rejects::Reject;
use crate::error::EngineError;
use crate::input::{Input, is_source_error};

const CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// Lines parsed together; also the documents a [`DocumentReader`] hands on at a time.
pub(super) const CHUNK_LINES: usize = 32 * 1024;

/// Takes one document and its key (for a keyed table): true when loaded, false when ignored.
pub(super) type OnDocument<'a> =
    dyn FnMut(&Document, Option<&KeyValue>) -> Result<bool, EngineError> + 'a;

/// Hands on an input's documents and rejected lines, a chunk at a time.
pub(super) trait DocumentReader {
    /// Hands on the next chunk's documents (with their key, for a keyed table) and rejects,
    /// counting them in `progress`; false once the input has ended. `on_document` says whether
    /// the document was loaded (true) or ignored (false, a keyed ingest's duplicate).
    fn next(
        &mut self,
        progress: &mut IngestProgress,
        on_document: &mut OnDocument<'_>,
        on_reject: &mut dyn FnMut(Reject) -> Result<(), EngineError>,
    ) -> Result<bool, EngineError>;
}

/// Reads one input in chunks of lines, parses each chunk in parallel, and hands every
/// document and every rejected line on in input order.
pub(super) struct ChunkReader {
    name: String,
    reader: Box<dyn BufRead + Send>,
    max_line_bytes: Option<usize>,
    line_number: u64,
    offset: u64,
    buffer: Vec<u8>,
    /// Per line of the chunk: where it starts in `buffer`, its line number and input offset.
    starts: Vec<(usize, u64, u64)>,
    /// The table's key: a document without a key value is rejected.
    key: Option<TableKey>,
    /// Makes each line a document; None: lines are NDJSON documents.
    pipeline: Option<Arc<Pipeline>>,
}

impl ChunkReader {
    pub(super) fn open(
        input: &Input,
        max_line_bytes: Option<usize>,
        key: Option<TableKey>,
        pipeline: Option<Arc<Pipeline>>,
    ) -> Result<Self, EngineError> {
        Ok(ChunkReader {
            key,
            pipeline,
            name: input.display_name(),
            reader: input.open()?,
            max_line_bytes,
            line_number: 0,
            offset: 0,
            buffer: Vec::with_capacity(CHUNK_BYTES + 4096),
            starts: Vec::with_capacity(CHUNK_LINES),
        })
    }
}

impl DocumentReader for ChunkReader {
    fn next(
        &mut self,
        progress: &mut IngestProgress,
        on_document: &mut OnDocument<'_>,
        on_reject: &mut dyn FnMut(Reject) -> Result<(), EngineError>,
    ) -> Result<bool, EngineError> {
        self.next_owned(
            progress,
            &mut |document, key| on_document(&document, key.as_ref()),
            on_reject,
        )
    }
}

impl ChunkReader {
    /// Reads, parses and hands on the next chunk, its documents by value; false once the input
    /// has ended.
    pub(super) fn next_owned(
        &mut self,
        progress: &mut IngestProgress,
        on_document: &mut dyn FnMut(Document, Option<KeyValue>) -> Result<bool, EngineError>,
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
            key,
            pipeline,
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
        let key = key.as_ref();
        let pipeline = pipeline.as_deref();
        // One time for the chunk: what a pipeline writes for a line without a time of its own.
        let ingest_time = chrono::Utc::now();
        let parsed: Vec<Result<Loadable, Unloadable>> = parse_pool().install(|| {
            lines
                .par_iter()
                .map(|(l, _, _)| {
                    let (doc, unparsed) = match pipeline {
                        Some(pipeline) => match pipeline.process(l, ingest_time) {
                            Some(processed) => (processed.document, processed.unparsed.is_some()),
                            None => return Err(Unloadable::Document(DocumentError::Empty)),
                        },
                        None => (parse_document(l).map_err(Unloadable::Document)?, false),
                    };
                    match key {
                        Some(key) => match key.of(&doc) {
                            Ok(value) => Ok((doc, Some(value), unparsed)),
                            Err(e) => Err(Unloadable::Key(e)),
                        },
                        None => Ok((doc, None, unparsed)),
                    }
                })
                .collect()
        });
        for (&(text, line, offset), result) in lines.iter().zip(parsed) {
            match result {
                Ok((doc, key, unparsed)) => {
                    progress.read += 1;
                    let duplicate_keys = doc.has_duplicate_keys();
                    if on_document(doc, key)? {
                        progress.loaded += 1;
                        progress.unparsed += u64::from(unparsed);
                        progress.duplicate_keys += u64::from(duplicate_keys);
                    } else {
                        progress.ignored += 1;
                    }
                }
                Err(Unloadable::Document(DocumentError::Empty)) => {}
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

/// A line's document, its key (for a keyed table), and whether a pipeline kept the line whole
/// because it could not parse it.
type Loadable = (Document, Option<KeyValue>, bool);

/// Why a line is not loaded.
#[derive(Debug, thiserror::Error)]
enum Unloadable {
    #[error(transparent)]
    Document(DocumentError),
    /// A keyed table's document without a key value.
    #[error("{0}")]
    Key(strata_json::KeyError),
}

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

pub(super) fn parse_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .stack_size(DEEP_STACK_BYTES)
            .thread_name(|i| format!("strata-parse-{i}"))
            .start_handler(|_| {
                // A thread that keeps its priority only parses sooner.
                let _ =
                    crate::priority::lower_current_thread(crate::priority::parse_threads_nice());
            })
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
