//! Part files: sorted rows as one standard Parquet file, written from one shredded batch
//! ([`write_part`]) or streamed batch by batch by a merge ([`PartWriter`]).
//!
//! Layout (see `docs/format.md`): one column per typed path, named by its encoded path, carrying
//! its kind in Arrow field metadata; then the remainder map column. Row groups hold up to
//! [`ROW_GROUP_ROWS`] rows and data pages up to [`GRANULE_ROWS`] rows; page-level min/max
//! statistics (the Parquet page index) make each page a prunable granule. String columns are
//! zstd compressed and dictionary encoded while the dictionary page stays under 64 KiB, then
//! delta encoded, except the columns a merge found repeating enough for a dictionary over the
//! whole row group ([`ColumnHints::dictionary`], ADR 0007); integers are delta bit-packed and
//! left uncompressed; sparse columns (few values per row group, [`sparse_columns`]) keep parquet's
//! defaults (docs/format.md). Dense string columns outside the sort key get a
//! [`ColumnProfile`] in the footer.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::aggregate;
use arrow::datatypes::{DataType, Float64Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use serde_json::Value;
use strata_json::{Kind, LayoutColumn, ShreddedBatch};

use crate::FORMAT_VERSION;
use crate::checksum::{OpenedPart, open_part};
use crate::error::FormatError;
use crate::manifest::{KeyRun, KeyRuns, PartEntry, sync_dir};
use crate::profile::{
    ColumnProfile, DistinctSketch, PROFILES_KEY, decode_profiles, encode_profiles,
};

/// Rows per Parquet row group: the unit of parallel scanning and the reach of a dictionary.
///
/// Measured after `optimize` of 1M documents with row-group dictionaries (ADR 0007): Bluesky
/// 128Ki rows 90.4 MB, 256Ki 89.2 MB, 512Ki 87.8 MB, 1Mi 87.1 MB (merge peak RSS 285, 299,
/// 327, 366 MB); GH Archive 128Ki 181.8 MB, 512Ki 179.8 MB (1,852 and 2,069 MB: wide rows
/// buffer more per row group). Half a million rows still gives two cores a row group each at a
/// million documents.
pub const ROW_GROUP_ROWS: usize = 512 * 1024;
/// The largest dictionary page of a row-group dictionary column; a column with more distinct
/// bytes in a row group continues that row group delta encoded.
pub const ROW_GROUP_DICTIONARY_BYTES: usize = 32 * 1024 * 1024;
/// Rows per data page: the granule that page statistics let readers skip.
pub const GRANULE_ROWS: usize = 8 * 1024;

#[derive(Debug, Clone)]
pub struct PartWriterOptions {
    pub zstd_level: i32,
}

impl Default for PartWriterOptions {
    fn default() -> Self {
        PartWriterOptions { zstd_level: 3 }
    }
}

/// Columns whose values per [`DENSITY_WINDOW_ROWS`] rows are expected below this get no delta
/// encoding.
///
/// Every delta encoder parquet creates reserves a 1 MiB buffer up front, per column per row group
/// (a string column's delta byte-array fallback holds two). A part of wide documents (GH Archive:
/// ~500 mostly sparse columns) paid that for every column: 860 MB of the 1.5 GB a 1M ingest
/// peaked at (heaptrack). Measured on GH Archive 1M (ingest peak RSS, bytes after `optimize`):
/// no threshold 1,527 MB, 182.6 MB; 2,048 values 1,009 MB, 181.4 MB; 4,096 values 873 MB,
/// 182.3 MB; 8,192 values 773 MB, 184.6 MB. Sparse columns are as small or smaller with a
/// dictionary and plain values; denser ones gain from delta encodings.
pub const MIN_DELTA_VALUES_PER_ROW_GROUP: u64 = 4096;
/// The rows [`MIN_DELTA_VALUES_PER_ROW_GROUP`] is counted over (the row group size when it was
/// measured; the rule is a density, independent of today's row group size).
pub const DENSITY_WINDOW_ROWS: u64 = 128 * 1024;

/// What the writer is told about the data to come, beyond its schema.
#[derive(Debug, Clone, Default)]
pub struct ColumnHints {
    /// Columns written without zstd (the key-run columns, see [`writer_properties`]).
    pub uncompressed: Vec<String>,
    /// Columns with too few values for delta encodings ([`sparse_columns`]).
    pub sparse: BTreeSet<String>,
    /// Columns to dictionary encode over whole row groups, with the plain bytes their profile
    /// carries over ([`ColumnProfile::plain_bytes`]).
    pub dictionary: BTreeMap<String, u64>,
}

/// The columns of `value_counts` (non-null values per column in a part of `rows` rows) that
/// average fewer than [`MIN_DELTA_VALUES_PER_ROW_GROUP`] values per [`DENSITY_WINDOW_ROWS`].
pub fn sparse_columns<'a>(
    value_counts: impl IntoIterator<Item = (&'a str, u64)>,
    rows: u64,
) -> BTreeSet<String> {
    let rows = rows.max(1);
    let rows_per_group = rows.min(DENSITY_WINDOW_ROWS);
    value_counts
        .into_iter()
        .filter(|&(_, values)| {
            (values as u128 * rows_per_group as u128) / (rows as u128)
                < MIN_DELTA_VALUES_PER_ROW_GROUP as u128
        })
        .map(|(name, _)| name.to_owned())
        .collect()
}

fn writer_properties(
    schema: &Schema,
    columns: &[LayoutColumn],
    sort_key: &[String],
    hints: &ColumnHints,
    options: &PartWriterOptions,
) -> Result<WriterProperties, parquet::errors::ParquetError> {
    let sorting: Vec<SortingColumn> = sort_key
        .iter()
        .filter_map(|name| schema.index_of(name).ok())
        .map(|index| SortingColumn {
            column_idx: index as i32,
            descending: false,
            nulls_first: true,
        })
        .collect();
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(options.zstd_level)?))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(GRANULE_ROWS)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_dictionary_enabled(true)
        // Small dictionaries: a high-cardinality column falls back to delta encoding early
        // instead of carrying 1 MiB of dictionary per column chunk, which every reader (and
        // each input of a merge) decodes. Measured at 1M Bluesky: 98.1 -> 96.2 MB on disk.
        .set_dictionary_page_size_limit(64 * 1024)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "strata.format_version".to_owned(),
            FORMAT_VERSION.to_string(),
        )]));
    if !sorting.is_empty() {
        builder = builder.set_sorting_columns(Some(sorting));
    }
    for column in columns {
        let path = ColumnPath::new(vec![column.name.clone()]);
        if hints.sparse.contains(&column.name) {
            // Parquet's defaults (dictionary, plain fallback, zstd): no delta encoder buffers.
            continue;
        }
        builder = match column.kind {
            // Numbers are mostly high-cardinality (ids, timestamps, sizes): a dictionary of up to
            // a page of distinct values costs more than delta bit-packing under zstd.
            // Bit-packed deltas leave zstd nothing to find (measured: 1.00x on Bluesky
            // `time_us`), and every compressed column chunk costs readers a zstd context.
            Kind::Int => builder
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_compression(path.clone(), Compression::UNCOMPRESSED)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
            Kind::Float => builder
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::BYTE_STREAM_SPLIT),
            // Strings keep a dictionary while it stays small; past it, sorted neighbours share
            // prefixes (DIDs, URIs, timestamps), which delta byte-array encoding removes.
            Kind::String | Kind::Number | Kind::Json => {
                if hints.dictionary.contains_key(&column.name) {
                    builder = builder.set_column_dictionary_page_size_limit(
                        path.clone(),
                        ROW_GROUP_DICTIONARY_BYTES,
                    );
                }
                builder.set_column_encoding(path, Encoding::DELTA_BYTE_ARRAY)
            }
            Kind::Bool | Kind::Null => builder,
        };
    }
    // Paths with key runs hold a few hundred runs of a small dictionary per part: a few
    // kilobytes that zstd makes larger, not smaller.
    for path in &hints.uncompressed {
        builder = builder.set_column_compression(
            ColumnPath::new(vec![path.clone()]),
            Compression::UNCOMPRESSED,
        );
    }
    Ok(builder.build())
}

/// Writes `shredded` as `parts/<file>` of `table_dir` and returns its manifest entry.
pub fn write_part(
    table_dir: &Path,
    file: &str,
    shredded: &ShreddedBatch,
    sort_key: &[String],
    options: &PartWriterOptions,
) -> Result<PartEntry, FormatError> {
    let layout = PartSchema {
        schema: shredded.batch.schema(),
        columns: shredded.columns.clone(),
        remainder_paths: shredded.remainder_paths.clone(),
        remainder_paths_truncated: shredded.remainder_paths_truncated,
    };
    // The runs are known before writing here, so exactly their columns stay uncompressed.
    let mut runs = KeyRunTracker::new(&layout, sort_key);
    runs.observe(&shredded.batch)
        .map_err(|source| FormatError::Arrow {
            path: table_dir.join(file),
            source,
        })?;
    let batch = &shredded.batch;
    let hints = ColumnHints {
        uncompressed: runs.clone().finish().map(|r| r.paths).unwrap_or_default(),
        sparse: sparse_columns(
            shredded.columns.iter().filter_map(|c| {
                let array = batch.column_by_name(&c.name)?;
                Some((c.name.as_str(), (array.len() - array.null_count()) as u64))
            }),
            batch.num_rows() as u64,
        ),
        // An ingest part is profiled, not yet judged: its plain bytes are what a merge weighs.
        dictionary: BTreeMap::new(),
    };
    let mut writer = PartWriter::open(table_dir, file, layout, sort_key, &hints, options, runs)?;
    writer.append(batch)?;
    writer.finish()
}

/// What a part holds, known before its rows are written.
#[derive(Debug, Clone)]
pub struct PartSchema {
    pub schema: SchemaRef,
    pub columns: Vec<LayoutColumn>,
    pub remainder_paths: BTreeMap<String, BTreeSet<Kind>>,
    pub remainder_paths_truncated: bool,
}

/// Writes one part from batches already sorted by the sort key, streaming: memory holds one
/// row group, whatever the part's size. Statistics and key runs are gathered on the way.
///
/// The bytes go to `<file>.tmp` first and are fsynced and renamed by [`PartWriter::finish`], so
/// a visible part file is always complete; it only becomes part of the table when a manifest
/// listing it is committed.
pub struct PartWriter {
    writer: ArrowWriter<fs::File>,
    tmp_path: PathBuf,
    final_path: PathBuf,
    file: String,
    layout: PartSchema,
    sort_key: Vec<String>,
    rows: u64,
    bounds: BTreeMap<String, (Value, Value)>,
    runs: KeyRunTracker,
    profiles: Vec<ProfileBuilder>,
}

/// A column's profile while its part is written.
struct ProfileBuilder {
    name: String,
    index: usize,
    values: u64,
    distinct: DistinctSketch,
    /// Plain bytes carried over when the column is dictionary encoded.
    carried_plain_bytes: Option<u64>,
}

impl PartWriter {
    /// Starts `parts/<file>` of `table_dir`, encoding columns as `hints` say.
    pub fn create(
        table_dir: &Path,
        file: &str,
        layout: PartSchema,
        sort_key: &[String],
        hints: &ColumnHints,
        options: &PartWriterOptions,
    ) -> Result<Self, FormatError> {
        let runs = KeyRunTracker::new(&layout, sort_key);
        Self::open(table_dir, file, layout, sort_key, hints, options, runs)
    }

    /// [`PartWriter::create`] with a key-run tracker that has observed the rows already.
    fn open(
        table_dir: &Path,
        file: &str,
        layout: PartSchema,
        sort_key: &[String],
        hints: &ColumnHints,
        options: &PartWriterOptions,
        runs: KeyRunTracker,
    ) -> Result<Self, FormatError> {
        let parts_dir = table_dir.join(crate::manifest::PARTS_DIR);
        fs::create_dir_all(&parts_dir).map_err(|e| FormatError::io(&parts_dir, e))?;
        let final_path = parts_dir.join(file);
        let tmp_path = parts_dir.join(format!("{file}.tmp"));
        let parquet_err = |source| FormatError::Parquet {
            path: tmp_path.clone(),
            source,
        };
        let props = writer_properties(&layout.schema, &layout.columns, sort_key, hints, options)
            .map_err(parquet_err)?;
        let out = fs::File::create(&tmp_path).map_err(|e| FormatError::io(&tmp_path, e))?;
        let writer =
            ArrowWriter::try_new(out, layout.schema.clone(), Some(props)).map_err(parquet_err)?;
        let profiles = profiled_columns(&layout, sort_key, hints)
            .map(|(index, column)| ProfileBuilder {
                carried_plain_bytes: hints.dictionary.get(&column.name).copied(),
                name: column.name.clone(),
                index,
                values: 0,
                distinct: DistinctSketch::default(),
            })
            .collect();
        Ok(PartWriter {
            profiles,
            writer,
            runs,
            tmp_path,
            final_path,
            file: file.to_owned(),
            layout,
            sort_key: sort_key.to_vec(),
            rows: 0,
            bounds: BTreeMap::new(),
        })
    }

    /// Appends rows; they must sort after (or equal to) every row written before.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        self.runs
            .observe(batch)
            .map_err(|source| FormatError::Arrow {
                path: self.tmp_path.clone(),
                source,
            })?;
        self.append(batch)
    }

    /// [`PartWriter::write`] of rows the key-run tracker has observed.
    fn append(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        for name in &self.sort_key {
            if let Some(column) = batch.column_by_name(name)
                && let Some((min, max)) = min_max(column)
            {
                match self.bounds.get_mut(name) {
                    Some((low, high)) => {
                        if json_order(&min, low).is_some_and(|o| o.is_lt()) {
                            *low = min;
                        }
                        if json_order(&max, high).is_some_and(|o| o.is_gt()) {
                            *high = max;
                        }
                    }
                    None => {
                        self.bounds.insert(name.clone(), (min, max));
                    }
                }
            }
        }
        for profile in &mut self.profiles {
            if let Some(strings) = batch
                .columns()
                .get(profile.index)
                .and_then(|c| c.as_string_opt::<i32>())
            {
                for value in strings.iter().flatten() {
                    profile.distinct.insert(value.as_bytes());
                }
                profile.values += (strings.len() - strings.null_count()) as u64;
            }
        }
        self.writer
            .write(batch)
            .map_err(|source| FormatError::Parquet {
                path: self.tmp_path.clone(),
                source,
            })?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Flushes the last row group and records the profiles, whose plain bytes are known only
    /// now, in the footer.
    fn append_profiles(&mut self) -> Result<(), parquet::errors::ParquetError> {
        if self.profiles.is_empty() {
            return Ok(());
        }
        self.writer.flush()?;
        // Typed columns are flat and precede the remainder map, so a typed column's index in the
        // Arrow schema is also its leaf index in each row group.
        let mut written: BTreeMap<usize, u64> = BTreeMap::new();
        for group in self.writer.flushed_row_groups() {
            for profile in &self.profiles {
                if let Some(column) = group.columns().get(profile.index) {
                    *written.entry(profile.index).or_default() +=
                        column.compressed_size().max(0) as u64;
                }
            }
        }
        let profiles: BTreeMap<String, ColumnProfile> = std::mem::take(&mut self.profiles)
            .into_iter()
            .map(|p| {
                let plain_bytes = p
                    .carried_plain_bytes
                    .unwrap_or_else(|| written.get(&p.index).copied().unwrap_or(0));
                let profile = ColumnProfile {
                    values: p.values,
                    plain_bytes,
                    distinct: p.distinct,
                };
                (p.name, profile)
            })
            .collect();
        self.writer.append_key_value_metadata(KeyValue::new(
            PROFILES_KEY.to_owned(),
            encode_profiles(&profiles),
        ));
        Ok(())
    }

    /// Closes, fsyncs and renames the file; returns its manifest entry.
    pub fn finish(mut self) -> Result<PartEntry, FormatError> {
        self.append_profiles()
            .map_err(|source| FormatError::Parquet {
                path: self.tmp_path.clone(),
                source,
            })?;
        let out = self
            .writer
            .into_inner()
            .map_err(|source| FormatError::Parquet {
                path: self.tmp_path.clone(),
                source,
            })?;
        out.sync_all()
            .map_err(|e| FormatError::io(&self.tmp_path, e))?;
        drop(out);
        // The checksum file is durable before the part is visible under its final name, and both
        // before any manifest lists the part.
        let xxh64 = crate::checksum::write_checksums(&self.tmp_path, &self.final_path)?;
        fs::rename(&self.tmp_path, &self.final_path)
            .map_err(|e| FormatError::io(&self.final_path, e))?;
        if let Some(parts_dir) = self.final_path.parent() {
            sync_dir(parts_dir)?;
        }
        let bytes = fs::metadata(&self.final_path)
            .map_err(|e| FormatError::io(&self.final_path, e))?
            .len();
        let (sort_key_min, sort_key_max) = self
            .bounds
            .into_iter()
            .map(|(name, (min, max))| ((name.clone(), min), (name, max)))
            .unzip();
        Ok(PartEntry {
            file: self.file,
            rows: self.rows,
            bytes,
            columns: self
                .layout
                .columns
                .iter()
                .map(|c| (c.name.clone(), c.kind))
                .collect(),
            remainder_paths: self.layout.remainder_paths,
            remainder_paths_truncated: self.layout.remainder_paths_truncated,
            sort_key_min,
            sort_key_max,
            full: false,
            key_runs: self.runs.finish(),
            xxh64: Some(format!("{xxh64:016x}")),
        })
    }
}

/// The columns a part profiles, with their index in the schema: string-valued ones dense enough
/// for delta encodings, outside the sort key (whose repeats are adjacent) and the key runs.
pub fn profiled_columns<'a>(
    layout: &'a PartSchema,
    sort_key: &'a [String],
    hints: &'a ColumnHints,
) -> impl Iterator<Item = (usize, &'a LayoutColumn)> + 'a {
    layout.columns.iter().filter_map(move |column| {
        let string_valued = matches!(column.kind, Kind::String | Kind::Number | Kind::Json);
        let excluded = hints.sparse.contains(&column.name)
            || hints.uncompressed.contains(&column.name)
            || sort_key.contains(&column.name);
        if !string_valued || excluded {
            return None;
        }
        let index = layout.schema.index_of(&column.name).ok()?;
        Some((index, column))
    })
}

/// Order of two JSON scalars of the same type (None across types).
fn json_order(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Runs per part are bounded so manifests stay small: at most this many, and on average at least
/// [`MIN_KEY_RUN_ROWS`] rows each (but 16 runs are always allowed). Runs much shorter than a
/// granule would add manifest bytes for little pruning; a prefix of the sort key with more
/// combinations in a part is not indexed (its granules still prune by page statistics).
pub const MAX_KEY_RUNS: usize = 256;
pub const MIN_KEY_RUN_ROWS: usize = 64;

/// Finds the runs of the longest sort-key prefix within the bounds above, batch by batch.
///
/// Only paths held entirely in one typed string, integer or boolean column qualify (a value in
/// the remainder would be invisible to the runs), and the prefix stops at the first path that
/// does not. Per prefix length, run starts are kept until there are more than [`MAX_KEY_RUNS`];
/// longer prefixes have at least as many runs, so tracking stops there too.
#[derive(Clone)]
struct KeyRunTracker {
    paths: Vec<String>,
    /// Run starts (row, values of the prefix) per prefix length - 1, for the lengths still
    /// within bounds.
    starts: Vec<Vec<(u64, Vec<Value>)>>,
    /// The previous batch's last row of each qualifying column.
    last: Option<Vec<ArrayRef>>,
    rows: u64,
}

impl KeyRunTracker {
    fn new(layout: &PartSchema, sort_key: &[String]) -> Self {
        let mut paths = Vec::new();
        if !layout.remainder_paths_truncated {
            for name in sort_key {
                let in_remainder = layout
                    .remainder_paths
                    .get(name)
                    .is_some_and(|kinds| kinds.iter().any(|k| *k != Kind::Null));
                let typed = layout.schema.field_with_name(name).is_ok_and(|f| {
                    matches!(
                        f.data_type(),
                        DataType::Utf8 | DataType::Utf8View | DataType::Int64 | DataType::Boolean
                    )
                });
                if in_remainder || !typed {
                    break;
                }
                paths.push(name.clone());
            }
        }
        KeyRunTracker {
            starts: vec![Vec::new(); paths.len()],
            paths,
            last: None,
            rows: 0,
        }
    }

    fn observe(&mut self, batch: &RecordBatch) -> Result<(), arrow::error::ArrowError> {
        let n = batch.num_rows();
        if n == 0 || self.starts.is_empty() {
            self.rows += n as u64;
            return Ok(());
        }
        let mut columns = Vec::with_capacity(self.starts.len());
        for name in &self.paths[..self.starts.len()] {
            columns.push(batch.column_by_name(name).cloned().ok_or_else(|| {
                arrow::error::ArrowError::SchemaError(format!("sort-key column {name} missing"))
            })?);
        }
        // changed[i]: row i starts a run of the prefix examined so far.
        let mut changed = vec![false; n];
        changed[0] = self.last.is_none();
        for depth in 0..columns.len() {
            let column = &columns[depth];
            if let Some(last) = &self.last {
                changed[0] |=
                    arrow::compute::kernels::cmp::distinct(&column.slice(0, 1), &last[depth])?
                        .value(0);
            }
            if n > 1 {
                let differs = arrow::compute::kernels::cmp::distinct(
                    &column.slice(1, n - 1),
                    &column.slice(0, n - 1),
                )?;
                for (flag, differs) in changed[1..].iter_mut().zip(differs.values().iter()) {
                    *flag |= differs;
                }
            }
            let starts = &mut self.starts[depth];
            for row in (0..n).filter(|&row| changed[row]) {
                if starts.len() > MAX_KEY_RUNS {
                    break;
                }
                let values = columns[..=depth]
                    .iter()
                    .map(|c| scalar_json(c, row))
                    .collect();
                starts.push((self.rows + row as u64, values));
            }
            if starts.len() > MAX_KEY_RUNS {
                self.starts.truncate(depth);
                break;
            }
        }
        self.last = Some(
            columns[..self.starts.len()]
                .iter()
                .map(|c| c.slice(n - 1, 1))
                .collect(),
        );
        self.rows += n as u64;
        Ok(())
    }

    fn finish(self) -> Option<KeyRuns> {
        let rows = self.rows;
        if rows == 0 {
            return None;
        }
        let limit = ((rows as usize) / MIN_KEY_RUN_ROWS).clamp(16, MAX_KEY_RUNS);
        let depth = self.starts.iter().rposition(|s| s.len() <= limit)?;
        let mut paths = self.paths;
        paths.truncate(depth + 1);
        let starts = self.starts.into_iter().nth(depth)?;
        let ends: Vec<u64> = starts
            .iter()
            .skip(1)
            .map(|(start, _)| *start)
            .chain(std::iter::once(rows))
            .collect();
        let runs = starts
            .into_iter()
            .zip(ends)
            .map(|((start, values), end)| KeyRun {
                values,
                start,
                rows: end - start,
            })
            .collect();
        Some(KeyRuns { paths, runs })
    }
}

/// The value at `row` of a string, integer or boolean column as JSON.
fn scalar_json(array: &ArrayRef, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).into(),
        DataType::Utf8View => array.as_string_view().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
        DataType::Boolean => array.as_boolean().value(row).into(),
        _ => Value::Null,
    }
}

/// Min and max of a typed column as JSON values (None when all null or not comparable).
fn min_max(array: &ArrayRef) -> Option<(Value, Value)> {
    match array.data_type() {
        DataType::Int64 => {
            let a = array.as_primitive::<Int64Type>();
            Some((aggregate::min(a)?.into(), aggregate::max(a)?.into()))
        }
        DataType::Float64 => {
            let a = array.as_primitive::<Float64Type>();
            let min = serde_json::Number::from_f64(aggregate::min(a)?)?;
            let max = serde_json::Number::from_f64(aggregate::max(a)?)?;
            Some((Value::Number(min), Value::Number(max)))
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            Some((
                aggregate::min_string(a)?.into(),
                aggregate::max_string(a)?.into(),
            ))
        }
        DataType::Boolean => {
            let a = array.as_boolean();
            Some((
                aggregate::min_boolean(a)?.into(),
                aggregate::max_boolean(a)?.into(),
            ))
        }
        _ => None,
    }
}

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
    ParquetRecordBatchReaderBuilder::new_with_metadata(opened.file(path)?, opened.metadata.clone())
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
    let reader = builder
        .with_batch_size(batch_rows)
        .build()
        .map_err(|source| FormatError::Parquet {
            path: path.to_owned(),
            source,
        })?;
    Ok((reader, row_bytes))
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
