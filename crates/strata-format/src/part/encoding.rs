//! Writer properties: the encoding, compression and statistics of each column of a part.

use std::collections::{BTreeMap, BTreeSet};

use arrow::datatypes::Schema;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use strata_json::{Kind, LayoutColumn};

use super::{GRANULE_ROWS, ROW_GROUP_DICTIONARY_BYTES, ROW_GROUP_ROWS};
use crate::FORMAT_VERSION;

#[derive(Debug, Clone)]
pub struct PartWriterOptions {
    pub zstd_level: i32,
    /// The column (encoded path) of the table's key: the part gets a key file built from it
    /// (`crate::keys`). None for tables without a key.
    pub key_column: Option<String>,
    /// Columns (encoded paths) whose string values get a text index (`crate::text_index`).
    pub text_columns: Vec<String>,
    /// Whether the text index keeps every token's rows too (`TableSettings::text_postings`).
    pub text_postings: bool,
    /// Columns (encoded paths) whose whole values get keyword postings in the text index
    /// (`TableSettings::keyword_index`).
    pub keyword_columns: Vec<String>,
    /// The table's secondary indexes (`crate::indexes`): the part gets a file for each one whose
    /// path it can index.
    pub indexes: Vec<crate::indexes::IndexSetting>,
}

impl Default for PartWriterOptions {
    fn default() -> Self {
        PartWriterOptions {
            zstd_level: 3,
            key_column: None,
            text_columns: Vec::new(),
            text_postings: false,
            keyword_columns: Vec::new(),
            indexes: Vec::new(),
        }
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
    /// carries over ([`ColumnProfile::plain_bytes`](crate::profile::ColumnProfile::plain_bytes)).
    pub dictionary: BTreeMap<String, u64>,
    /// Write every column without zstd: a part of at most [`SMALL_PART_ROWS`] rows (a
    /// transaction commit's), which compression hardly shrinks and which would cost each
    /// reader a zstd context per column chunk (merges compress the rows later).
    pub uncompressed_part: bool,
}

/// Parts of at most this many rows written from one batch are not compressed
/// ([`ColumnHints::uncompressed_part`]); neither are their key files.
pub const SMALL_PART_ROWS: usize = 64;

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

pub(super) fn writer_properties(
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
    let compression = match hints.uncompressed_part {
        true => Compression::UNCOMPRESSED,
        false => Compression::ZSTD(ZstdLevel::try_new(options.zstd_level)?),
    };
    let mut builder = WriterProperties::builder()
        .set_compression(compression)
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
            // Unless a merge found few distinct values (HTTP statuses, sizes, counters: ADR
            // 0007), which a row-group dictionary's bit-packed indexes under zstd store in a
            // fifth of the deltas' bytes (nginx `status`: 1.24 -> 0.23 MB per 1M rows).
            Kind::Int if hints.dictionary.contains_key(&column.name) => builder
                .set_column_dictionary_page_size_limit(path.clone(), ROW_GROUP_DICTIONARY_BYTES)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
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
