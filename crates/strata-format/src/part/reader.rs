//! Reading parts for merges, exports and tests: footers, value counts and verified row batches.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::checksum::{OpenedPart, open_part};
use crate::deletes::DeletionVector;
use crate::error::FormatError;
use crate::manifest::PartEntry;
use crate::profile::{ColumnProfile, PROFILES_KEY, decode_profiles};

/// What a merge learns about its input from the footer, which is read and verified once: the
/// input's reader ([`read_part_within`]) is built from the same metadata.
#[derive(Debug, Clone)]
pub struct FooterColumns {
    opened: OpenedPart,
    /// Non-null values per top-level column (a column chunk without statistics counts all its
    /// rows).
    pub value_counts: BTreeMap<String, u64>,
    /// The part's column profiles (none for parts written before profiles existed).
    pub profiles: BTreeMap<String, ColumnProfile>,
}

impl FooterColumns {
    /// The rows of the part deleted when it was opened: its reader skips them.
    pub fn deleted(&self) -> Option<&Arc<DeletionVector>> {
        self.opened.deleted.as_ref()
    }
}

/// Reads the footer of the part `entry` at `path` (verified, [`open_part`]): its columns' value
/// counts and profiles.
pub fn footer_columns(path: &Path, entry: &PartEntry) -> Result<FooterColumns, FormatError> {
    let opened = open_part(path, entry)?;
    let parquet = opened.metadata.metadata();
    let profiles = match parquet
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == PROFILES_KEY))
        .and_then(|e| e.value.as_deref())
    {
        Some(text) => decode_profiles(text).map_err(|message| FormatError::Footer {
            path: path.to_owned(),
            message,
        })?,
        None => BTreeMap::new(),
    };
    let mut counts = BTreeMap::new();
    for row_group in parquet.row_groups() {
        let rows = row_group.num_rows().max(0) as u64;
        for column in row_group.columns() {
            if let [name] = column.column_path().parts() {
                let nulls = column
                    .statistics()
                    .and_then(|s| s.null_count_opt())
                    .unwrap_or(0);
                *counts.entry(name.clone()).or_default() += rows.saturating_sub(nulls);
            }
        }
    }
    Ok(FooterColumns {
        opened,
        value_counts: counts,
        profiles,
    })
}

/// Opens the part `entry` at `path` for reading, batch by batch, with all its columns; every byte
/// read is verified against the part's checksums.
pub fn read_part(
    path: &Path,
    entry: &PartEntry,
    batch_size: usize,
) -> Result<ParquetRecordBatchReader, FormatError> {
    let opened = open_part(path, entry)?;
    read_opened(path, &opened, batch_size)
}

/// [`read_part`] of a part [`open_part`] has opened.
pub fn read_opened(
    path: &Path,
    opened: &OpenedPart,
    batch_size: usize,
) -> Result<ParquetRecordBatchReader, FormatError> {
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
        opened.file(path)?,
        opened.metadata.clone(),
    );
    skip_deleted(builder, opened)
        .with_batch_size(batch_size)
        .build()
        .map_err(|source| FormatError::Parquet {
            path: path.to_owned(),
            source,
        })
}

/// Opens a part whose footer [`footer_columns`] read, in batches of about `batch_bytes` of Arrow
/// data each (between 256 and 8,192 rows); also returns the estimated bytes of one row. A row is
/// estimated from the footer as its share of the uncompressed column data plus 8 bytes per
/// column: Arrow arrays are dense, so every column costs an offset or a value slot in every row,
/// null or not, which is what dominates batches of wide, sparse documents.
pub fn read_part_within(
    path: &Path,
    footer: &FooterColumns,
    batch_bytes: usize,
) -> Result<(ParquetRecordBatchReader, usize), FormatError> {
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
        footer.opened.file(path)?,
        footer.opened.metadata.clone(),
    );
    let metadata = builder.metadata();
    let rows = metadata.file_metadata().num_rows().max(1) as usize;
    let data: i64 = metadata
        .row_groups()
        .iter()
        .map(|g| g.total_byte_size())
        .sum();
    let row_bytes = (data.max(0) as usize / rows + 8 * builder.schema().fields().len()).max(1);
    let batch_rows = (batch_bytes / row_bytes).clamp(256, 8192);
    let reader = skip_deleted(builder, &footer.opened)
        .with_batch_size(batch_rows)
        .build()
        .map_err(|source| FormatError::Parquet {
            path: path.to_owned(),
            source,
        })?;
    Ok((reader, row_bytes))
}

/// A reader that skips the part's deleted rows (ADR 0015): merges drop them for good, exports
/// never show them.
fn skip_deleted(
    builder: ParquetRecordBatchReaderBuilder<crate::checksum::PartFile>,
    opened: &OpenedPart,
) -> ParquetRecordBatchReaderBuilder<crate::checksum::PartFile> {
    match &opened.deleted {
        Some(deleted) => {
            let rows = opened.metadata.metadata().file_metadata().num_rows().max(0) as u64;
            builder.with_row_selection(deleted.kept_selection(rows))
        }
        None => builder,
    }
}

/// Reads a whole part into memory (merges and tests).
pub fn read_part_batches(path: &Path, entry: &PartEntry) -> Result<Vec<RecordBatch>, FormatError> {
    read_part(path, entry, 64 * 1024)?
        .map(|b| {
            b.map_err(|source| FormatError::Arrow {
                path: path.to_owned(),
                source,
            })
        })
        .collect()
}
