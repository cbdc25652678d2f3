//! The one error type of the crate: what could not be published, and where.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] strata_format::FormatError),
    #[error("{path}: cannot write the Avro file: {message}")]
    Avro { path: PathBuf, message: String },
    #[error("{path}: cannot write the position delete file: {message}")]
    Parquet { path: PathBuf, message: String },
    /// The previous Iceberg metadata of the table exists but cannot be read: publishing over it
    /// would change the ids readers already resolved columns by.
    #[error("{path}: the table's previous Iceberg metadata cannot be read: {message}")]
    PreviousMetadata { path: PathBuf, message: String },
    #[error("{path}: the table directory is not a valid location: {message}")]
    Location { path: PathBuf, message: String },
}

impl IcebergError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        IcebergError::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn avro(path: &Path, error: impl std::fmt::Display) -> Self {
        IcebergError::Avro {
            path: path.to_owned(),
            message: error.to_string(),
        }
    }
}
