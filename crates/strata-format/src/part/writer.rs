//! Writing a part: sorted batches to a Parquet file with sort-key bounds, key runs and column
//! profiles, made visible by an fsync and a rename.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::aggregate;
use arrow::datatypes::{DataType, Float64Type, Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use serde_json::Value;
use strata_json::{Kind, LayoutColumn, ShreddedBatch};

use super::encoding::{ColumnHints, PartWriterOptions, sparse_columns, writer_properties};
use super::key_runs::KeyRunTracker;
use crate::error::FormatError;
use crate::manifest::{PartEntry, sync_dir};
use crate::profile::{ColumnProfile, DistinctSketch, PROFILES_KEY, encode_profiles};
use crate::text_index::TextIndexBuilder;

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
        uncompressed_part: batch.num_rows() <= super::encoding::SMALL_PART_ROWS,
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
    writer: ArrowWriter<crate::held::Handover>,
    tmp_path: PathBuf,
    final_path: PathBuf,
    file: String,
    layout: PartSchema,
    sort_key: Vec<String>,
    rows: u64,
    bounds: BTreeMap<String, (Value, Value)>,
    runs: KeyRunTracker,
    profiles: Vec<ProfileBuilder>,
    /// The key column (name, and its slices of every batch written) when the table has a key.
    key_column: Option<(String, Vec<ArrayRef>)>,
    /// The text-indexed columns this part can index (those typed as strings with no value of
    /// their path in the remainder), then its keyword columns (typed as strings or integers,
    /// with no value but null in the remainder), in the text index builder's order.
    text_columns: Vec<String>,
    /// Their text index, built as rows are written.
    text_index: TextIndexBuilder,
    /// The secondary indexes this part can index (`crate::indexes::indexable`), with their
    /// column's slices of every batch written.
    index_columns: Vec<(crate::indexes::IndexSetting, Vec<ArrayRef>)>,
}

/// Rows of a batch from which its text is indexed on a thread of its own while the batch is
/// encoded (below it, a thread costs more than it saves).
const PARALLEL_TEXT_INDEX_ROWS: usize = 16 * 1024;

/// Adds the `text_columns` of `batch` to `text_index`.
fn index_text(
    text_columns: &[String],
    text_index: &mut TextIndexBuilder,
    batch: &RecordBatch,
    tmp_path: &Path,
) -> Result<(), FormatError> {
    for (index, name) in text_columns.iter().enumerate() {
        let damaged = |message| FormatError::Damaged {
            path: tmp_path.to_path_buf(),
            message,
        };
        let column = batch
            .column_by_name(name)
            .ok_or_else(|| damaged(format!("rows written without the text column {name}")))?;
        text_index.push(index, column.as_ref()).map_err(damaged)?;
    }
    Ok(())
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
        let out = crate::held::Output::create(&final_path)?;
        let tmp_path = out.writing_path().to_owned();
        let parquet_err = |source| FormatError::Parquet {
            path: tmp_path.clone(),
            source,
        };
        let props = writer_properties(&layout.schema, &layout.columns, sort_key, hints, options)
            .map_err(parquet_err)?;
        let writer = ArrowWriter::try_new(
            crate::held::Handover::new(out),
            layout.schema.clone(),
            Some(props),
        )
        .map_err(parquet_err)?;
        let text_columns =
            indexable_text_columns(&TextColumnLayout::of(&layout), &options.text_columns);
        // Keyword postings are exact only where an index file could be (`crate::indexes`).
        let keyword_columns: Vec<String> = options
            .keyword_columns
            .iter()
            .filter(|path| crate::indexes::layout_indexable(&layout, path))
            .cloned()
            .collect();
        let index_columns = options
            .indexes
            .iter()
            .filter(|index| crate::indexes::layout_indexable(&layout, &index.path))
            .map(|index| (index.clone(), Vec::new()))
            .collect();
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
            key_column: options.key_column.clone().map(|name| (name, Vec::new())),
            text_index: TextIndexBuilder::new(
                text_columns.clone(),
                keyword_columns.clone(),
                super::GRANULE_ROWS,
                options.text_postings,
            ),
            text_columns: text_columns.into_iter().chain(keyword_columns).collect(),
            index_columns,
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
        if let Some((name, slices)) = &mut self.key_column {
            let column = batch
                .column_by_name(name)
                .ok_or_else(|| FormatError::Damaged {
                    path: self.tmp_path.clone(),
                    message: format!("rows written without the key column {name}"),
                })?;
            slices.push(column.clone());
        }
        for (index, slices) in &mut self.index_columns {
            let column = batch
                .column_by_name(&index.path)
                .ok_or_else(|| FormatError::Damaged {
                    path: self.tmp_path.clone(),
                    message: format!(
                        "rows written without the column {} of index {}",
                        index.path, index.name
                    ),
                })?;
            slices.push(column.clone());
        }
        let text_columns = &self.text_columns;
        let text_index = &mut self.text_index;
        let tmp_path = &self.tmp_path;
        let writer = &mut self.writer;
        let mut write = |batch: &RecordBatch| {
            writer.write(batch).map_err(|source| FormatError::Parquet {
                path: tmp_path.clone(),
                source,
            })
        };
        if text_columns.is_empty() || batch.num_rows() < PARALLEL_TEXT_INDEX_ROWS {
            index_text(text_columns, text_index, batch, tmp_path)?;
            write(batch)?;
        } else {
            // Tokenizing and compressing are each about half a full-text part's writing: on
            // two threads, a part is written in about the time of the larger.
            std::thread::scope(|scope| {
                let indexing =
                    scope.spawn(|| index_text(text_columns, text_index, batch, tmp_path));
                let written = write(batch);
                let indexed = match indexing.join() {
                    Ok(result) => result,
                    Err(panic) => std::panic::resume_unwind(panic),
                };
                written.and(indexed)
            })?;
        }
        for profile in &mut self.profiles {
            let Some(column) = batch.columns().get(profile.index) else {
                continue;
            };
            if let Some(strings) = column.as_string_opt::<i32>() {
                for value in strings.iter().flatten() {
                    profile.distinct.insert(value.as_bytes());
                }
            } else if let Some(integers) = column.as_primitive_opt::<Int64Type>() {
                for value in integers.iter().flatten() {
                    profile.distinct.insert(&value.to_le_bytes());
                }
            } else {
                continue;
            }
            profile.values += (column.len() - column.null_count()) as u64;
        }
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
        let (metadata, out) = crate::held::finish_parquet(self.writer, &self.tmp_path)?;
        let written = out.close()?;
        // The checksum file is durable before the part is visible under its final name, and both
        // before any manifest lists the part.
        let xxh64 = crate::checksum::write_checksums(
            written.content(),
            &metadata,
            written.writing_path(),
            &self.final_path,
        )?;
        let bytes = written.place()?;
        if let Some(parts_dir) = self.final_path.parent() {
            sync_dir(parts_dir)?;
        }
        // A part without rows (a merge of parts whose rows were all deleted) has no keys; the
        // merge does not list it.
        let keys = match self.key_column.take().filter(|_| self.rows > 0) {
            Some((_, slices)) => {
                let column = crate::indexes::concat_slices(&slices, &self.final_path)?;
                let parts_dir = self.final_path.parent().unwrap_or(Path::new("."));
                Some(crate::keys::write_key_file(parts_dir, &self.file, &column)?)
            }
            None => None,
        };
        let parts_dir = self.final_path.parent().unwrap_or(Path::new("."));
        let text_index = if self.rows > 0 {
            self.text_index.finish(parts_dir, &self.file)?
        } else {
            None
        };
        let mut indexes = Vec::new();
        for (index, slices) in std::mem::take(&mut self.index_columns) {
            if self.rows == 0 {
                break;
            }
            let column = crate::indexes::concat_slices(&slices, &self.final_path)?;
            indexes.extend(crate::indexes::write_index_file(
                parts_dir,
                &self.file,
                &index.name,
                &column,
            )?);
        }
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
            deletes: None,
            keys,
            newest_write: None,
            text_index,
            indexes,
        })
    }
}

/// What a part's layout says about a path's values: typed as a string column, and whether any
/// may be in the remainder.
struct TextColumnLayout {
    string_columns: BTreeSet<String>,
    in_remainder: BTreeSet<String>,
    remainder_truncated: bool,
}

impl TextColumnLayout {
    fn of(layout: &PartSchema) -> TextColumnLayout {
        TextColumnLayout {
            string_columns: layout
                .columns
                .iter()
                .filter(|c| c.kind == Kind::String)
                .map(|c| c.name.clone())
                .collect(),
            in_remainder: layout.remainder_paths.keys().cloned().collect(),
            remainder_truncated: layout.remainder_paths_truncated,
        }
    }
}

/// The text columns a part can index: every value of the path must be in its typed string
/// column, so that a granule without a token truly holds no row with it (`crate::text_index`).
fn indexable_text_columns(layout: &TextColumnLayout, wanted: &[String]) -> Vec<String> {
    if layout.remainder_truncated {
        return Vec::new();
    }
    wanted
        .iter()
        .filter(|name| {
            layout.string_columns.contains(*name) && !layout.in_remainder.contains(*name)
        })
        .cloned()
        .collect()
}

/// The columns a part profiles, with their index in the schema: string-valued and integer ones
/// dense enough for delta encodings, outside the sort key (whose repeats are adjacent) and the
/// key runs.
pub fn profiled_columns<'a>(
    layout: &'a PartSchema,
    sort_key: &'a [String],
    hints: &'a ColumnHints,
) -> impl Iterator<Item = (usize, &'a LayoutColumn)> + 'a {
    layout.columns.iter().filter_map(move |column| {
        let profiled_kind = matches!(
            column.kind,
            Kind::String | Kind::Number | Kind::Json | Kind::Int
        );
        let excluded = hints.sparse.contains(&column.name)
            || hints.uncompressed.contains(&column.name)
            || sort_key.contains(&column.name);
        if !profiled_kind || excluded {
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
