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
//! [`ColumnProfile`](crate::profile::ColumnProfile) in the footer.
//!
//! Modules: [`encoding`] (writer properties per column), [`writer`] (rows to a part file),
//! [`key_runs`] (the runs of the sort key's leading values a part records), [`reader`] (verified
//! reads of whole parts and their footers).

mod encoding;
mod key_runs;
mod reader;
mod writer;

pub use encoding::{
    ColumnHints, DENSITY_WINDOW_ROWS, MIN_DELTA_VALUES_PER_ROW_GROUP, PartWriterOptions,
    SMALL_PART_ROWS, sparse_columns,
};
pub use key_runs::{MAX_KEY_RUNS, MIN_KEY_RUN_ROWS};
pub use reader::{
    FooterColumns, footer_columns, read_opened, read_part, read_part_batches, read_part_within,
};
pub use writer::{PartSchema, PartWriter, profiled_columns, write_part};

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
