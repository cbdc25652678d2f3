//! Rejected lines: what is recorded of each ([`Reject`]), and the log that records an ingest's
//! rejects in the table's `rejects.ndjson` only once the ingest has committed.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::EngineError;
use crate::table::PENDING_REJECTS_PREFIX;

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
    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.file.capacity()
            + self.reason.capacity()
            + self.text.as_ref().map_or(0, String::capacity)
            + self.base64.as_ref().map_or(0, String::capacity)
    }

    pub(super) fn new(file: &str, line: u64, offset: u64, reason: String, bytes: &[u8]) -> Self {
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

/// Collects an ingest's rejected lines in a pending file of the table directory; they are
/// appended to `rejects.ndjson` only once the ingest has committed ([`RejectLog::publish`]).
/// An ingest that fails deletes its pending file; one that was killed leaves it to the next
/// writer's garbage collection.
pub(super) struct RejectLog {
    pending: PathBuf,
    published: PathBuf,
    file: Option<BufWriter<File>>,
}

impl RejectLog {
    pub(super) fn new(table_dir: &Path, published: PathBuf) -> Self {
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

    pub(super) fn write(&mut self, reject: &Reject) -> Result<(), EngineError> {
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
    pub(super) fn publish(&mut self) -> Result<Option<PathBuf>, EngineError> {
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
