//! Position delete files: a part's deletion vector (ADR 0015) as the Parquet file Iceberg v2
//! readers apply, one row `(file_path, pos)` per deleted row, in row order.
//!
//! The file is derived from one deletion vector file, which never changes once written, so it is
//! named after it and written once; it goes when that vector is no longer the part's.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use strata_format::DeletionVector;

use crate::error::IcebergError;

/// Iceberg's reserved field ids of a position delete file's columns.
const FILE_PATH_FIELD_ID: &str = "2147483546";
const POS_FIELD_ID: &str = "2147483545";

/// The position delete file made from the deletion vector file `vector_file`.
pub fn position_delete_file(vector_file: &str) -> String {
    format!("deletes-{vector_file}.parquet")
}

/// Writes the positions of `vector` for the data file at `data_location` to `path`; returns the
/// file's size.
pub fn write_position_deletes(
    path: &Path,
    data_location: &str,
    vector: &DeletionVector,
) -> Result<u64, IcebergError> {
    let failed = |e: &dyn std::fmt::Display| IcebergError::Parquet {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let with_id = |field: Field, id: &str| {
        field.with_metadata([(PARQUET_FIELD_ID_META_KEY.to_owned(), id.to_owned())].into())
    };
    let schema = Arc::new(Schema::new(vec![
        with_id(
            Field::new("file_path", DataType::Utf8, false),
            FILE_PATH_FIELD_ID,
        ),
        with_id(Field::new("pos", DataType::Int64, false), POS_FIELD_ID),
    ]));
    let positions: Vec<i64> = vector
        .iter()
        .map(|p| i64::try_from(p).unwrap_or(i64::MAX))
        .collect();
    let paths = StringArray::from_iter_values(std::iter::repeat_n(data_location, positions.len()));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(paths), Arc::new(Int64Array::from(positions))],
    )
    .map_err(|e| failed(&e))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut bytes = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut bytes, schema, Some(properties)).map_err(|e| failed(&e))?;
    writer.write(&batch).map_err(|e| failed(&e))?;
    writer.close().map_err(|e| failed(&e))?;
    crate::write_file(path, &bytes)?;
    Ok(bytes.len() as u64)
}
