//! Inputs parsed before they are loaded: the server parses a request once, answers with its
//! counts and rejects, and later writes the very same documents into parts.
//!
//! Invariant: a [`ParsedInput`] holds exactly what [`super::ChunkReader`] hands on for the same
//! input — its documents in order, its rejects with their line numbers, and the same counts —
//! so loading it commits what loading the lines would have.

use std::sync::Arc;

use strata_json::Document;
use strata_pipeline::Pipeline;

use super::IngestProgress;
use super::reader::{CHUNK_LINES, ChunkReader, DocumentReader, OnDocument};
use super::rejects::Reject;
use crate::error::EngineError;
use crate::input::Input;

/// One input's documents and rejected lines, parsed by ingest's own rules.
#[derive(Debug)]
pub struct ParsedInput {
    documents: Vec<Document>,
    rejects: Vec<Reject>,
    progress: IngestProgress,
    heap_bytes: usize,
}

impl ParsedInput {
    /// Reads and parses the whole input, which is held in memory (meant for request bodies);
    /// `None` once its documents and rejects would take more than `max_heap_bytes` (a small
    /// compressed body can hold a great deal).
    ///
    /// Must run where [`super::ingest`] may (parsing uses the same pool).
    pub fn parse(
        input: &Input,
        max_line_bytes: Option<usize>,
        max_heap_bytes: usize,
        pipeline: Option<Arc<Pipeline>>,
    ) -> Result<Option<Self>, EngineError> {
        input.check()?;
        let mut reader = ChunkReader::open(input, max_line_bytes, None, pipeline)?;
        let mut parsed = ParsedInput {
            documents: Vec::new(),
            rejects: Vec::new(),
            progress: IngestProgress::default(),
            heap_bytes: 0,
        };
        loop {
            let ParsedInput {
                documents,
                rejects,
                progress,
                heap_bytes,
            } = &mut parsed;
            let (documents_before, rejects_before) = (documents.len(), rejects.len());
            let more = reader.next_owned(
                progress,
                &mut |document, _| {
                    documents.push(document);
                    Ok(true)
                },
                &mut |reject| {
                    rejects.push(reject);
                    Ok(())
                },
            )?;
            *heap_bytes += documents[documents_before..]
                .iter()
                .map(Document::heap_bytes)
                .sum::<usize>()
                + rejects[rejects_before..]
                    .iter()
                    .map(Reject::heap_bytes)
                    .sum::<usize>();
            if *heap_bytes > max_heap_bytes {
                return Ok(None);
            }
            if !more {
                return Ok(Some(parsed));
            }
        }
    }

    /// What loading the input counts.
    pub fn progress(&self) -> &IngestProgress {
        &self.progress
    }

    /// The rejected lines, in input order.
    pub fn rejects(&self) -> &[Reject] {
        &self.rejects
    }

    /// Memory held by the documents and rejects.
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }

    /// Names the input in its rejects (the `file` of `rejects.ndjson`).
    pub fn rename(&mut self, name: &str) {
        for reject in &mut self.rejects {
            name.clone_into(&mut reject.file);
        }
    }

    pub(super) fn reader(&self) -> ParsedReader<'_> {
        ParsedReader {
            input: self,
            started: false,
            next_document: 0,
        }
    }
}

/// Hands on a [`ParsedInput`]: its rejects and counts first, then its documents a chunk at a
/// time (so that the ingest cuts parts at its target size as it does for lines).
pub(super) struct ParsedReader<'a> {
    input: &'a ParsedInput,
    started: bool,
    next_document: usize,
}

impl DocumentReader for ParsedReader<'_> {
    fn next(
        &mut self,
        progress: &mut IngestProgress,
        on_document: &mut OnDocument<'_>,
        on_reject: &mut dyn FnMut(Reject) -> Result<(), EngineError>,
    ) -> Result<bool, EngineError> {
        let documents = &self.input.documents;
        if !self.started {
            self.started = true;
            progress.add(&self.input.progress);
            for reject in &self.input.rejects {
                on_reject(reject.clone())?;
            }
        }
        let end = (self.next_document + CHUNK_LINES).min(documents.len());
        for document in &documents[self.next_document..end] {
            on_document(document, None)?;
        }
        self.next_document = end;
        Ok(end < documents.len())
    }
}
