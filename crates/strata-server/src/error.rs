//! The server's error type: what can stop `strata serve` from starting or running. Errors of
//! single requests are answered to their client (HTTP JSON or a PostgreSQL error) and never
//! reach this type.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen for {protocol} on {addr}: {source}")]
    Bind {
        protocol: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to listen for {protocol} on {addr} without authentication: only loopback \
         addresses are served when the config file lists no {needed}"
    )]
    Unauthenticated {
        protocol: &'static str,
        addr: SocketAddr,
        needed: &'static str,
    },
    #[error("config file {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error(transparent)]
    Pipeline(#[from] strata_pipeline::PipelineError),
    #[error("cannot start the server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Query(#[from] strata_query::QueryError),
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
}
