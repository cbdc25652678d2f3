//! Parsed footers and page indexes of parts, shared by the statements of a session.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use strata_format::{PartChecksums, PartEntry};

/// Parsed footers and page indexes of parts, kept across the statements of a session.
///
/// A part file is immutable and its name is never reused (ADR 0001), so an entry can never be
/// stale; merged-away parts simply stop being asked for. Parsing a footer with hundreds of
/// columns and their page index costs milliseconds, which would otherwise be paid by every
/// statement for every part.
#[derive(Debug, Default)]
pub struct PartMetadataCache {
    entries: std::sync::Mutex<std::collections::HashMap<PathBuf, CachedPart>>,
}

/// A part's verified footer and page index, and its checksums.
pub(super) type CachedPart = (ArrowReaderMetadata, Option<Arc<PartChecksums>>);

impl PartMetadataCache {
    /// Entries kept before the cache starts over (bounds memory on very large tables).
    const MAX_ENTRIES: usize = 4096;

    pub(super) fn get_or_load(
        &self,
        path: &Path,
        entry: &PartEntry,
    ) -> std::result::Result<CachedPart, strata_format::FormatError> {
        if let Ok(entries) = self.entries.lock()
            && let Some(found) = entries.get(path)
        {
            return Ok(found.clone());
        }
        let opened = strata_format::open_part(path, entry)?;
        let metadata = open_metadata(&opened.metadata).map_err(|source| {
            strata_format::FormatError::Parquet {
                path: path.to_owned(),
                source,
            }
        })?;
        let part = (metadata, opened.checksums);
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= Self::MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(path.to_owned(), part.clone());
        }
        Ok(part)
    }
}

/// The verified footer and page index with an Arrow schema that reads every string column as
/// `Utf8View`.
fn open_metadata(plain: &ArrowReaderMetadata) -> parquet::errors::Result<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
    let fields: Vec<arrow::datatypes::FieldRef> = plain
        .schema()
        .fields()
        .iter()
        .map(|f| {
            if f.data_type() == &DataType::Utf8 {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View))
            } else {
                f.clone()
            }
        })
        .collect();
    let schema = Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        plain.schema().metadata().clone(),
    ));
    ArrowReaderMetadata::try_new(plain.metadata().clone(), options.with_schema(schema))
}
