//! The ingest path's promise as one function that fuzzers and tests can drive with any bytes.
//!
//! [`check_ingest_round_trip`] splits its input into lines exactly as ingest does, parses each
//! line, shreds every accepted document into one batch and reconstructs it. It reports a
//! violation when a document does not come back exactly as the tree parser
//! ([`crate::parse_document_tree`]) reads it (numbers compared by their text), or when the
//! streaming parser and the tree parser disagree on accepting a line.
//! Rejections are fine — they are the documented outcome for bad input — but a panic or a
//! stack overflow anywhere on this path is a bug, and the fuzz targets in `fuzz/` exist to find
//! one. [`check_merge_round_trip`] does the same for a merge: two parts typed from different
//! documents, conformed to their merged layout. Callers must run both on a stack sized by
//! [`crate::DEEP_STACK_BYTES`] when inputs may nest up to [`crate::MAX_NESTING_DEPTH`] levels.

use arrow::array::{Array, AsArray};
use arrow::record_batch::RecordBatch;
use serde_json::Value;

use crate::conform::{ColumnCount, Conformer, merged_layout};
use crate::kind::value_kind;
use crate::path::JsonPath;
use crate::reconstruct::{DocumentWriter, PartLayout, parse_stored, reconstruct};
use crate::shred::{ShredOptions, Shredder};
use crate::{Document, DocumentError, REMAINDER_COLUMN, parse_document, parse_document_tree};

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
    let mut shredder = Shredder::new(shred_options(max_columns, sort_key));
    let (outcome, mut expected) = parse_lines(input, |_, document| shredder.push(document))?;
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
    let mut actual = Vec::with_capacity(expected.len());
    push_rebuilt(&shredded.batch, &mut actual)?;
    // The batch is sorted by the sort key, so compare as multisets.
    compare_as_multisets(&mut expected, &mut actual, "document changed")?;
    Ok(outcome)
}

/// Options of the checks: `max_columns` also caps the distinct paths a batch buffers, at twice its
/// value, so that small limits from a fuzzer exercise the path overflow as well as the remainder.
fn shred_options(max_columns: usize, sort_key: &[&str]) -> ShredOptions {
    ShredOptions {
        sort_key: sort_key.iter().map(|p| JsonPath::parse_dotted(p)).collect(),
        key: None,
        max_columns,
        max_paths: max_columns.saturating_mul(2),
    }
}

/// Splits `input` into lines as ingest does and parses each; hands every accepted document (and
/// its index among them) to `accept`. Returns the outcome and the accepted documents' texts as
/// the tree parser reads them; `Err` when the streaming parser disagrees with it on accepting a
/// line.
fn parse_lines(
    input: &[u8],
    mut accept: impl FnMut(usize, &Document),
) -> Result<(CheckOutcome, Vec<String>), String> {
    let mut outcome = CheckOutcome::default();
    let mut expected = Vec::new();
    for line in input.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match (parse_document(line), parse_document_tree(line)) {
            (Ok(document), Ok(tree)) => {
                accept(outcome.accepted, &document);
                expected.push(Value::Object(tree).to_string());
                outcome.accepted += 1;
            }
            // Ingest skips blank lines without counting them.
            (Err(DocumentError::Empty), Err(DocumentError::Empty)) => {}
            (Err(reason), Err(_)) => outcome.rejected.push(reason),
            (streamed, tree) => {
                return Err(format!(
                    "parsers disagree on line {:?}: streamed {:?}, tree {:?}",
                    String::from_utf8_lossy(line),
                    streamed.map(|_| "accepted"),
                    tree.map(|_| "accepted")
                ));
            }
        }
    }
    Ok((outcome, expected))
}

/// Appends the text of every document rebuilt from `batch`; a row rebuilt as absent is an error,
/// and so is a row whose text written straight from the columns ([`DocumentWriter`]) differs.
fn push_rebuilt(batch: &RecordBatch, out: &mut Vec<String>) -> Result<(), String> {
    let rebuilt = reconstruct(batch, &JsonPath::default())
        .map_err(|e| format!("reconstruction failed: {e}"))?;
    let writer = DocumentWriter::new(batch).map_err(|e| format!("document writer failed: {e}"))?;
    let mut written = Vec::new();
    for (row, document) in rebuilt.into_iter().enumerate() {
        let Some(document) = document else {
            return Err(format!("row {row} reconstructed as absent"));
        };
        let text = document.to_string();
        written.clear();
        writer
            .write(row, &mut written)
            .map_err(|e| format!("writing row {row} failed: {e}"))?;
        if written != text.as_bytes() {
            return Err(format!(
                "row {row} written as {} but rebuilt as {text}",
                String::from_utf8_lossy(&written)
            ));
        }
        out.push(text);
    }
    Ok(())
}

/// `Err(what: stored …, got back …)` unless both hold the same documents in any order.
fn compare_as_multisets(
    expected: &mut [String],
    actual: &mut [String],
    what: &str,
) -> Result<(), String> {
    expected.sort_unstable();
    actual.sort_unstable();
    if expected.len() != actual.len() {
        return Err(format!(
            "{what}: {} documents stored, {} rows back",
            expected.len(),
            actual.len()
        ));
    }
    match expected.iter().zip(actual.iter()).find(|(w, g)| w != g) {
        Some((want, got)) => Err(format!("{what}: stored {want}, got back {got}")),
        None => Ok(()),
    }
}

/// Shreds the accepted lines of `input` into two parts (alternate lines), conforms both to their
/// merged layout as a merge does, and checks that every document comes back exactly and that no
/// remainder value has its path's typed-column kind. Inputs whose parts type a sort-key path
/// differently are skipped (merges re-shred those).
pub fn check_merge_round_trip(
    input: &[u8],
    max_columns: usize,
    sort_key: &[&str],
) -> Result<CheckOutcome, String> {
    let options = shred_options(max_columns, sort_key);
    let mut shredders = [Shredder::new(options.clone()), Shredder::new(options)];
    let (outcome, mut expected) =
        parse_lines(input, |index, document| shredders[index % 2].push(document))?;
    let mut parts = Vec::new();
    for shredder in shredders {
        if !shredder.is_empty() {
            let shredded = shredder
                .finish()
                .map_err(|e| format!("shredding accepted documents failed: {e}"))?;
            parts.push(shredded.batch);
        }
    }
    let mut counts = Vec::new();
    for batch in &parts {
        let layout = PartLayout::from_schema(batch.schema_ref()).map_err(|e| e.to_string())?;
        for (column, index) in layout.columns {
            let array = batch.column(index);
            counts.push(ColumnCount {
                name: column.name,
                kind: column.kind,
                values: (array.len() - array.null_count()) as u64,
            });
        }
    }
    let sort_names: Vec<String> = sort_key
        .iter()
        .map(|p| JsonPath::parse_dotted(p).encode())
        .collect();
    let Some(layout) = merged_layout(&counts, &sort_names, max_columns) else {
        return Ok(outcome);
    };
    let conformer = Conformer::new(layout);
    let mut actual = Vec::with_capacity(expected.len());
    for batch in &parts {
        let conformed = conformer
            .conform(batch)
            .map_err(|e| format!("conforming failed: {e}"))?;
        check_remainder_holds_no_typed_value(&conformed)?;
        push_rebuilt(&conformed, &mut actual)?;
    }
    compare_as_multisets(&mut expected, &mut actual, "document changed by a merge")?;
    Ok(outcome)
}

fn check_remainder_holds_no_typed_value(batch: &RecordBatch) -> Result<(), String> {
    let layout = PartLayout::from_schema(batch.schema_ref()).map_err(|e| e.to_string())?;
    let Some(remainder) = batch
        .column_by_name(REMAINDER_COLUMN)
        .and_then(|c| c.as_map_opt())
    else {
        return Err("merged batch has no remainder map".into());
    };
    let keys = remainder.keys().as_string::<i32>();
    let values = remainder.values().as_string::<i32>();
    for entry in 0..keys.len() {
        let value =
            parse_stored(values.value(entry), keys.value(entry)).map_err(|e| e.to_string())?;
        let kind = value_kind(&value);
        if layout
            .columns
            .iter()
            .any(|(c, _)| c.name == keys.value(entry) && c.kind == kind)
        {
            return Err(format!(
                "remainder holds a {kind} of path {} that has a {kind} column",
                keys.value(entry)
            ));
        }
    }
    Ok(())
}
