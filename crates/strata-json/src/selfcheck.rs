//! The ingest path's promise as one function that fuzzers and tests can drive with any bytes.
//!
//! [`check_ingest_round_trip`] splits its input into lines exactly as ingest does, parses each
//! line, shreds every accepted document into one batch and reconstructs it. It reports a
//! violation when a document does not come back exactly (numbers compared by their text).
//! Rejections are fine — they are the documented outcome for bad input — but a panic or a
//! stack overflow anywhere on this path is a bug, and the fuzz targets in `fuzz/` exist to find
//! one. Callers must run it on a stack sized by [`crate::DEEP_STACK_BYTES`] when inputs may nest
//! up to [`crate::MAX_NESTING_DEPTH`] levels.

use serde_json::Value;

use crate::path::JsonPath;
use crate::reconstruct::reconstruct;
use crate::shred::{ShredOptions, Shredder};
use crate::{DocumentError, parse_document};

/// What one checked input held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// Lines parsed into documents and round-tripped.
    pub accepted: usize,
    /// Lines rejected, with the reason ingest would record.
    pub rejected: Vec<DocumentError>,
}

/// Parses, shreds and reconstructs every line of `input`; `Err` describes a lost or changed
/// document. `max_columns` and `sort_key` exercise the remainder and the sort.
pub fn check_ingest_round_trip(
    input: &[u8],
    max_columns: usize,
    sort_key: &[&str],
) -> Result<CheckOutcome, String> {
    let mut outcome = CheckOutcome::default();
    let mut expected = Vec::new();
    let mut shredder = Shredder::new(ShredOptions {
        sort_key: sort_key.iter().map(|p| JsonPath::parse_dotted(p)).collect(),
        max_columns,
    });
    for line in input.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match parse_document(line) {
            Ok(document) => {
                shredder.push(&document);
                expected.push(Value::Object(document).to_string());
                outcome.accepted += 1;
            }
            // Ingest skips blank lines without counting them.
            Err(DocumentError::Empty) => {}
            Err(reason) => outcome.rejected.push(reason),
        }
    }
    if expected.is_empty() {
        return Ok(outcome);
    }
    let shredded = shredder
        .finish()
        .map_err(|e| format!("shredding accepted documents failed: {e}"))?;
    if shredded.batch.num_rows() != expected.len() {
        return Err(format!(
            "{} documents shredded into {} rows",
            expected.len(),
            shredded.batch.num_rows()
        ));
    }
    let rebuilt = reconstruct(&shredded.batch, &JsonPath::default())
        .map_err(|e| format!("reconstruction failed: {e}"))?;
    let mut actual = Vec::with_capacity(rebuilt.len());
    for (row, document) in rebuilt.into_iter().enumerate() {
        match document {
            Some(document) => actual.push(document.to_string()),
            None => return Err(format!("row {row} reconstructed as absent")),
        }
    }
    // The batch is sorted by the sort key, so compare as multisets.
    expected.sort_unstable();
    actual.sort_unstable();
    if let Some((want, got)) = expected.iter().zip(&actual).find(|(w, g)| w != g) {
        return Err(format!("document changed: stored {want}, got back {got}"));
    }
    Ok(outcome)
}
