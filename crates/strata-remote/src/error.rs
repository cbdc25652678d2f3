//! The errors of commands on object storage: what failed, and on which object or file.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("data directory {url}: {message}")]
    Location { url: String, message: String },
    #[error("{location}: {source}")]
    Store {
        location: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] strata_format::FormatError),
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
    #[error("table {table}: publishing as Iceberg: {source}")]
    Iceberg {
        table: String,
        #[source]
        source: strata_iceberg::IcebergError,
    },
    /// Another writer committed a change that overlaps this one; nothing of it was committed.
    #[error(
        "table {table}: {message}; nothing was committed, run the command again to apply it to \
         the new state"
    )]
    Conflict { table: String, message: String },
}

impl RemoteError {
    pub(crate) fn store(location: &object_store::path::Path, source: object_store::Error) -> Self {
        RemoteError::Store {
            location: location.to_string(),
            source,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RemoteError::Io {
            path: path.into(),
            source,
        }
    }
}
