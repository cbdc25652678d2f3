//! strata-engine's integration tests, one module per concern, built as one test binary (ten
//! binaries linked arrow and parquet ten times before).

mod common;
mod damage;
mod deletes;
mod golden;
mod iceberg;
mod ingest_export;
mod keys;
mod lifecycle;
mod merge;
mod pipelines;
mod stream_input;
