//! Errors of reading and writing persisted files; each names the file involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: parquet: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{path}: arrow: {source}")]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    /// A part's bytes do not match its checksums, its footer or its manifest entry.
    #[error("part {path} is damaged: {message}")]
    Damaged { path: PathBuf, message: String },
    #[error("{path}: invalid part footer: {message}")]
    Footer { path: PathBuf, message: String },
    #[error("{path}: unsupported format version {found} (this build reads {supported})")]
    Version {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// A read through an `object_store` (the scan's reads of part pages) failed.
    #[error("{path}: {source}")]
    Store {
        path: PathBuf,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: strata_json::JsonError,
    },
}

impl FormatError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}
