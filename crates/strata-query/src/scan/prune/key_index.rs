//! Point reads by key: when the filters pin a keyed table's key path to a set of values
//! (`data.id = 'x'`, `data->>'id' IN (…)`), each part's key file (ADR 0016) gives exactly the
//! rows holding those keys, and the scan reads those rows only — a part whose key range or key
//! file holds none of them is skipped before its footer is even read.
//!
//! The set comes from DataFusion's literal guarantees of the whole predicate ("if a row
//! satisfies the filters, its column is one of these literals"), so skipping every other row
//! never drops a row that matches. Values are compared the way the column's mode reads the
//! path: a string key under its string, `->>` text or mixed modes; an integer key under its
//! integer mode, or under the text modes by its canonical decimal text (a text literal that is
//! not one, `'007'`, matches no integer key).

use std::path::Path;

use datafusion::common::ScalarValue;
use datafusion::physical_expr::utils::Guarantee;
use strata_format::{FormatError, KeySetting, PartEntry};
use strata_json::{KeyType, KeyValue};

use super::ScanPredicate;
use crate::paths::PathMode;
use crate::scan::metadata_cache::PartMetadataCache;

/// The keys the filters pin `key`'s path to (sorted, without duplicates); None when they do
/// not pin it.
pub(in crate::scan) fn wanted_keys(
    predicate: &ScanPredicate,
    key: &KeySetting,
) -> Option<Vec<KeyValue>> {
    let (literals, mode) = pinned_literals(predicate, &key.path)?;
    values_of_literals(&literals, mode, key.key_type)
}

/// The literals the filters pin the encoded path `path` to ("if a row satisfies the filters,
/// its column is one of these"), and how the pinned column reads the path; None when they do
/// not pin it.
pub(in crate::scan) fn pinned_literals(
    predicate: &ScanPredicate,
    path: &str,
) -> Option<(Vec<ScalarValue>, PathMode)> {
    let whole = predicate.whole()?;
    for guarantee in whole.literal_guarantees() {
        if guarantee.guarantee != Guarantee::In {
            continue;
        }
        let Some(column) = predicate.column(guarantee.column.name()) else {
            continue;
        };
        if column.path != path {
            continue;
        }
        return Some((guarantee.literals.iter().cloned().collect(), column.mode));
    }
    None
}

/// The values of `key_type` that `literals` (as a column of `mode` reads the path) can equal,
/// sorted, without duplicates; None when one of them is of a type this lookup does not compare.
pub(in crate::scan) fn values_of_literals(
    literals: &[ScalarValue],
    mode: PathMode,
    key_type: KeyType,
) -> Option<Vec<KeyValue>> {
    let mut keys = Vec::with_capacity(literals.len());
    for literal in literals {
        match key_of_literal(literal, mode, key_type) {
            Literal::Key(value) => keys.push(value),
            Literal::MatchesNone => {}
            Literal::Unusable => return None,
        }
    }
    keys.sort_unstable();
    keys.dedup();
    Some(keys)
}

enum Literal {
    Key(KeyValue),
    /// A literal no key of the table can equal (as the column reads it).
    MatchesNone,
    /// A literal of a type this lookup does not compare: the scan reads as without the index.
    Unusable,
}

fn key_of_literal(literal: &ScalarValue, mode: PathMode, key_type: KeyType) -> Literal {
    let text = match literal {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.as_str()),
        _ => None,
    };
    if literal.is_null() {
        return Literal::MatchesNone;
    }
    match (key_type, mode) {
        (KeyType::String, PathMode::String | PathMode::Text | PathMode::Mixed) => match text {
            Some(s) => Literal::Key(KeyValue::String(s.to_owned())),
            None => Literal::Unusable,
        },
        (KeyType::Integer, PathMode::Int) => match literal {
            ScalarValue::Int64(Some(i)) => Literal::Key(KeyValue::Integer(*i)),
            _ => Literal::Unusable,
        },
        (KeyType::Integer, PathMode::Text | PathMode::Mixed) => match text {
            Some(s) => match KeyValue::integer_from_text(s) {
                Some(key) => Literal::Key(key),
                None => Literal::MatchesNone,
            },
            None => Literal::Unusable,
        },
        _ => Literal::Unusable,
    }
}

/// The rows of `entry` (in the table at `table_dir`) holding one of `keys`, sorted, from the
/// session's cached key file pages; deleted rows among them are left to the part's deletion
/// vector. None when the part has no key file.
pub(in crate::scan) fn key_rows(
    cache: &PartMetadataCache,
    table_dir: &Path,
    entry: &PartEntry,
    keys: &[KeyValue],
) -> Result<Option<Vec<u64>>, FormatError> {
    if entry.keys.is_none() {
        return Ok(None);
    }
    let mut rows = Vec::new();
    for key in keys {
        rows.extend(cache.key_rows(table_dir, entry, key)?.unwrap_or_default());
    }
    rows.sort_unstable();
    rows.dedup();
    Ok(Some(rows))
}
