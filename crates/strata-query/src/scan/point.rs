//! Point reads: the documents of one key of a keyed table, or of one value of a path with a
//! secondary index (ADR 0024), read without planning a query.
//!
//! `SELECT data FROM t WHERE data->>'id' = $1` is the most frequent statement of an
//! application that keeps documents, and planning it through DataFusion (analysis, logical and
//! physical optimisation) costs more than reading the document. This module reads what the
//! planned scan would read for that statement — the same parts (by their key ranges), the same
//! rows (by their key files, less the rows their deletion vectors delete), the same pages and
//! the same document rebuilding (`read`) — so the answer is the scan's answer, produced
//! directly. `crate::point_read` decides which statements qualify.
//!
//! Documents rebuilt here are kept in the session's cache by part and row
//! (`PartMetadataCache::document`): a part never changes once written and its name is never
//! reused, so a kept document is always the row's document; whether the row is still live is
//! decided by the part's deletion vector of the snapshot read, every time, before the cache is
//! asked. A document not kept is rebuilt from its row's granule, decoded whole once and kept
//! (`PartMetadataCache::granule`; positions of an immutable part, safe for the same reason).
//!
//! On a server's live version of a table (`strata_format::live_keys`) a key its logged commits
//! wrote is read from the part and row the version's key map names, and any other key is looked
//! up only in the parts listed before those commits: the hundreds of one-commit parts a second
//! of commits leaves are not asked one by one.
//!
//! Invariant: for a key `k`, the rows produced are exactly the live rows whose key is `k` in
//! the snapshot `manifest`, in part order then row order — the rows the planned statement
//! returns.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::physical_plan::metrics::Count;
use futures::StreamExt;
use object_store::ObjectStore;
use parquet::file::metadata::ParquetMetaData;
use strata_format::live_keys::Located;
use strata_format::part::GRANULE_ROWS;
use strata_format::{FormatError, Manifest, PartEntry};
use strata_json::KeyValue;

use super::access_plan::{self, PartInScan};
use super::metadata_cache::PartMetadataCache;
use super::read::{build_outputs, open_unit, plan_output};
use super::{ScanOutput, part_error};

/// Where a point read finds its rows: a table snapshot and the session's caches.
pub struct PointSource<'a> {
    pub table: &'a str,
    pub dir: &'a Path,
    pub store: &'a Arc<dyn ObjectStore>,
    pub manifest: &'a Manifest,
    pub metadata_cache: &'a PartMetadataCache,
}

/// The whole documents (the one `data` column of `schema`) of the live rows whose key is
/// `key`.
pub async fn read_documents_by_key(
    source: &PointSource<'_>,
    key: &KeyValue,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let PointSource {
        table,
        dir,
        manifest,
        metadata_cache,
        ..
    } = source;
    let by_key_file = |entry: &PartEntry| {
        metadata_cache.key_rows(dir, entry, key)?.ok_or_else(|| {
            strata_format::FormatError::Damaged {
                path: Manifest::part_path(dir, &entry.file),
                message: format!("table {table}: the part has no key file to read by key"),
            }
        })
    };
    // A server's live version knows where the keys its logged commits wrote lie, and that the
    // others can only be in the parts listed before them (`strata_format::live_keys`).
    let located = manifest.live_keys.get().and_then(|keys| {
        let located = keys.locate(manifest, std::slice::from_ref(key))?;
        Some((keys.base_parts(), located.into_iter().next()?))
    });
    match located {
        Some((_, Located::Written(None))) => {
            read_documents_in(source, schema, &[], &by_key_file).await
        }
        Some((_, Located::Written(Some((part, row))))) => {
            let Some(parts) = manifest.parts.get(part..=part) else {
                return read_documents(source, schema, &by_key_file).await;
            };
            read_documents_in(source, schema, parts, &|_| Ok(vec![row])).await
        }
        Some((base_parts, Located::Base)) => {
            let base = &manifest.parts[..base_parts.min(manifest.parts.len())];
            read_documents_in(source, schema, base, &by_key_file).await
        }
        None => read_documents(source, schema, &by_key_file).await,
    }
}

/// The whole documents (the one `data` column of `schema`) of the live rows `rows_of` names in
/// each part of the snapshot (ascending; rows the part's deletion vector deletes among them or
/// not): what a lookup through a key file or a secondary index file reads.
pub async fn read_documents(
    source: &PointSource<'_>,
    schema: &SchemaRef,
    rows_of: &RowsOf<'_>,
) -> Result<RecordBatch> {
    read_documents_in(source, schema, &source.manifest.parts, rows_of).await
}

/// Which rows of a part a point read asks for (ascending; deleted ones among them or not).
pub type RowsOf<'a> = dyn Fn(&PartEntry) -> std::result::Result<Vec<u64>, FormatError> + Sync + 'a;

/// [`read_documents`] among `parts` (some of the snapshot's parts) only.
async fn read_documents_in(
    source: &PointSource<'_>,
    schema: &SchemaRef,
    parts: &[Arc<PartEntry>],
    rows_of: &RowsOf<'_>,
) -> Result<RecordBatch> {
    let PointSource {
        table,
        dir,
        metadata_cache,
        ..
    } = source;
    let context = |e: FormatError| DataFusionError::Execution(format!("table {table}: {e}"));
    let mut documents: Vec<Arc<String>> = Vec::new();
    for entry in parts {
        let mut rows = rows_of(entry).map_err(context)?;
        if rows.is_empty() {
            continue;
        }
        if let Some(deleted) = metadata_cache
            .deletion_vector(dir, entry)
            .map_err(context)?
        {
            rows.retain(|&row| !deleted.contains(row));
        }
        let path = Manifest::part_path(dir, &entry.file);
        let mut found: Vec<(u64, Arc<String>)> = Vec::with_capacity(rows.len());
        let mut missing = Vec::new();
        for row in rows {
            match metadata_cache.document(&path, row) {
                Some(document) => found.push((row, document)),
                None => missing.push(row),
            }
        }
        if !missing.is_empty() {
            let read = read_rows(source, entry, &path, &missing, schema).await?;
            for (row, document) in missing.into_iter().zip(read) {
                let document = Arc::new(document);
                metadata_cache.keep_document(&path, row, document.clone());
                found.push((row, document));
            }
            found.sort_unstable_by_key(|(row, _)| *row);
        }
        documents.extend(found.into_iter().map(|(_, document)| document));
    }
    let column = StringArray::from_iter_values(documents.iter().map(|d| d.as_str()));
    Ok(RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(column)],
    )?)
}

/// A granule of at most this many rows is rebuilt whole when one of its rows is read: a part
/// that transactions committed holds a few documents of each, about to be read by key again.
const MAX_REBUILT_GRANULE_ROWS: u64 = 512;

/// A granule whose columns would take more than this decoded (by the row group's uncompressed
/// size) is not decoded whole for a point read: its rows asked for are read alone.
const MAX_KEPT_GRANULE_BYTES: u64 = 4 * 1024 * 1024;

/// The documents at `rows` (ascending) of the part `entry` at `path`, in that order, built as
/// the one column of `schema`.
///
/// Rows are read granule by granule (the rows a data page holds at most, `GRANULE_ROWS`):
/// decoding a page costs about the same for one row as for all of them. A granule of a few
/// rows is rebuilt whole and its documents kept (`PartMetadataCache::document`); a larger one
/// small enough is decoded whole and kept in the session's cache (`PartMetadataCache::granule`),
/// and the next point read of any of its rows rebuilds the document from it without decoding —
/// as a page cache serves a database's neighbouring rows.
async fn read_rows(
    source: &PointSource<'_>,
    entry: &Arc<PartEntry>,
    path: &Path,
    rows: &[u64],
    schema: &SchemaRef,
) -> Result<Vec<String>> {
    let PointSource {
        table,
        metadata_cache,
        ..
    } = source;
    let (metadata, checksums) = metadata_cache
        .get_or_load(path, entry)
        .map_err(|e| DataFusionError::Execution(format!("table {table}: {e}")))?;
    let granules = granules_of(metadata.metadata());
    let part = Arc::new(PartInScan {
        entry: entry.clone(),
        path: path.to_owned(),
        location: Manifest::part_location(table, &entry.file),
        metadata,
        checksums,
        deleted: None,
        text_matching: None,
        matching_decides_lookups: false,
    });
    let plans = [plan_output(&part.entry, &ScanOutput::Document)];
    let mut documents = Vec::with_capacity(rows.len());
    let mut rest = rows;
    while let Some(&first) = rest.first() {
        let Some((granule, decoded_bytes)) = granules.iter().find(|(g, _)| g.contains(&first))
        else {
            return Err(part_error(
                table,
                &part.path,
                DataFusionError::Internal(format!("row {first} is past the part's row groups")),
            ));
        };
        let count = rest.iter().take_while(|&&row| row < granule.end).count();
        let (here, after) = rest.split_at(count);
        rest = after;
        let granule_rows = granule.end - granule.start;
        let batches = if granule_rows <= MAX_REBUILT_GRANULE_ROWS {
            // A small granule (a transaction's part) is rebuilt whole, its other documents
            // kept for the point reads that follow: taking one row from it costs more than
            // rebuilding a document.
            let read = read_ranges(source, &part, &plans, std::slice::from_ref(granule)).await?;
            let mut row = granule.start;
            let mut wanted = here.iter().peekable();
            for batch in &read {
                for document in rebuilt_documents(batch, &plans, schema, table, &part)? {
                    if wanted.next_if_eq(&&row).is_some() {
                        documents.push(document);
                    } else {
                        metadata_cache.keep_document(path, row, Arc::new(document));
                    }
                    row += 1;
                }
            }
            if row != granule.end {
                return Err(misread_granule(table, &part, granule, row - granule.start));
            }
            Vec::new()
        } else if *decoded_bytes <= MAX_KEPT_GRANULE_BYTES {
            let whole = match metadata_cache.granule(path, granule.start) {
                Some(batch) => batch,
                None => {
                    let read =
                        read_ranges(source, &part, &plans, std::slice::from_ref(granule)).await?;
                    let batch = Arc::new(match read.as_slice() {
                        [one] => one.clone(),
                        _ => concat_batches(&part_schema(&read, &part)?, &read)?,
                    });
                    if batch.num_rows() as u64 != granule.end - granule.start {
                        return Err(misread_granule(
                            table,
                            &part,
                            granule,
                            batch.num_rows() as u64,
                        ));
                    }
                    metadata_cache.keep_granule(path, granule.start, batch.clone());
                    batch
                }
            };
            // Slices, not a copy: a point read takes one row or a few neighbouring ones, and
            // copying them out of every column cost more than rebuilding the document.
            access_plan::row_ranges(here)
                .into_iter()
                .map(|run| {
                    whole.slice(
                        (run.start - granule.start) as usize,
                        (run.end - run.start) as usize,
                    )
                })
                .collect()
        } else {
            read_ranges(source, &part, &plans, &access_plan::row_ranges(here)).await?
        };
        for batch in batches {
            documents.extend(rebuilt_documents(&batch, &plans, schema, table, &part)?);
        }
    }
    if documents.len() != rows.len() {
        return Err(part_error(
            table,
            &part.path,
            DataFusionError::Internal(format!(
                "{} rows asked for, {} read",
                rows.len(),
                documents.len()
            )),
        ));
    }
    Ok(documents)
}

/// The error of a granule of `part` that read as `rows` rows, not as many as it has.
fn misread_granule(
    table: &str,
    part: &PartInScan,
    granule: &Range<u64>,
    rows: u64,
) -> DataFusionError {
    part_error(
        table,
        &part.path,
        DataFusionError::Internal(format!(
            "granule at row {} read as {rows} rows",
            granule.start
        )),
    )
}

/// The documents of `batch`'s rows (read from `part` with `plans`), built as the one column of
/// `schema`.
fn rebuilt_documents(
    batch: &RecordBatch,
    plans: &[super::read::OutputPlan],
    schema: &SchemaRef,
    table: &str,
    part: &PartInScan,
) -> Result<Vec<String>> {
    let built =
        build_outputs(batch, plans, schema).map_err(|e| part_error(table, &part.path, e))?;
    let column = arrow::compute::cast(built.column(0), &DataType::Utf8)?;
    let text = column.as_string::<i32>();
    (0..text.len())
        .map(|i| match text.is_null(i) {
            true => Err(part_error(
                table,
                &part.path,
                DataFusionError::Internal("a row rebuilt no document".into()),
            )),
            false => Ok(text.value(i).to_owned()),
        })
        .collect()
}

/// The granules of a part, each with the bytes its columns take uncompressed (its share of its
/// row group's): every row group cut into `GRANULE_ROWS` rows from its first.
fn granules_of(parquet: &ParquetMetaData) -> Vec<(Range<u64>, u64)> {
    let granule = GRANULE_ROWS as u64;
    let mut granules = Vec::new();
    let mut start = 0u64;
    for row_group in parquet.row_groups() {
        let rows = u64::try_from(row_group.num_rows()).unwrap_or(0);
        let bytes = u64::try_from(row_group.total_byte_size()).unwrap_or(u64::MAX);
        let mut first = start;
        while first < start + rows {
            let end = (first + granule).min(start + rows);
            let share = bytes.saturating_mul(end - first) / rows.max(1);
            granules.push((first..end, share));
            first = end;
        }
        start += rows;
    }
    granules
}

/// The schema of batches read from `part` (for joining them into one).
fn part_schema(read: &[RecordBatch], part: &PartInScan) -> Result<SchemaRef> {
    read.first().map(RecordBatch::schema).ok_or_else(|| {
        DataFusionError::Internal(format!("part {}: nothing read", part.path.display()))
    })
}

/// The part's columns that `plans` read, at the rows of `ranges` (sorted, disjoint), in order.
async fn read_ranges(
    source: &PointSource<'_>,
    part: &Arc<PartInScan>,
    plans: &[super::read::OutputPlan],
    ranges: &[Range<u64>],
) -> Result<Vec<RecordBatch>> {
    let PointSource { table, store, .. } = source;
    let mut plan = ParquetAccessPlan::new_all(part.metadata.metadata().num_row_groups());
    access_plan::keep_row_ranges(&mut plan, part.metadata.metadata(), ranges);
    let mut read = Vec::new();
    for unit in access_plan::split_units(part, plan) {
        let mut batches = open_unit(store, &unit, plans, table, &Count::new(), None, None)?;
        while let Some(batch) = batches.next().await {
            read.push(
                batch
                    .map_err(DataFusionError::from)
                    .map_err(|e| part_error(table, &part.path, e))?,
            );
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::array::Int64Array;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::FileReader;
    use parquet::file::serialized_reader::SerializedFileReader;

    use super::*;

    /// A point read slices a decoded granule by these runs.
    #[test]
    fn consecutive_rows_are_read_as_one_run() {
        let runs = access_plan::row_ranges(&[3, 4, 5, 9, 11, 12]);
        assert_eq!(runs, vec![3..6, 9..10, 11..13]);
        assert_eq!(access_plan::row_ranges(&[]).len(), 0);
        assert_eq!(access_plan::row_ranges(&[7]), vec![7..8]);
    }

    /// Granules start at each row group's first row: a granule never spans two row groups.
    #[test]
    fn granules_restart_at_every_row_group() {
        let values = Int64Array::from_iter_values(0..20);
        let batch = RecordBatch::try_from_iter([("v", Arc::new(values) as _)]).unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(7))
            .build();
        let file = tempfile::tempfile().unwrap();
        let mut writer =
            ArrowWriter::try_new(file.try_clone().unwrap(), batch.schema(), Some(properties))
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let granules = granules_of(reader.metadata());
        let ranges: Vec<Range<u64>> = granules.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(ranges, [0..7, 7..14, 14..20]);
        let last = reader.metadata().row_group(2).total_byte_size() as u64;
        assert_eq!(granules[2].1, last);
    }
}
