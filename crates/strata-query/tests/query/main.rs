//! strata-query's integration tests, one module per concern, built as one test binary. As fifteen
//! binaries they linked DataFusion fifteen times (about 200 MB and half a minute of a cold build
//! each), half of building the workspace's own crates (ADR 0030).

mod common;
mod deletes;
mod dml;
mod explain;
mod indexes;
mod key_join;
mod keys;
mod keyword_index;
mod lease;
mod pruning;
mod slt;
mod snapshots;
mod stable_answers;
mod store;
mod text_search;
mod transactions;
