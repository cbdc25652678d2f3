//! Tables on object storage (issue 16, ADR 0022): a data directory named by a URL
//! (`s3://bucket/prefix`, or `file:///path` for the same layout on a local directory) instead of
//! a local path.
//!
//! Every command on such a data directory runs in a **staging directory**: a private local data
//! directory holding the newest committed manifest of each table it touches and, for each part,
//! its small files (checksums, deletion vector, key file, text index) and a *footer copy* — a
//! sparse file of the part's size whose only written bytes are its footer and page index. The
//! existing engine and query code run there unchanged: they open parts from the footer copy and
//! read pages through the object store (behind a bounded block cache). A command that changed a
//! table then uploads the files its new manifest lists and commits that manifest as the next
//! version of the table's log (`strata_format::manifest_log`), re-applied onto a newer version
//! when another writer committed first, or refused when the two changes overlap.
//!
//! Invariants:
//! - a table's state is the newest version of its log; nothing is visible before its log entry
//!   exists, and every file an entry lists was uploaded before the entry was created;
//! - files under `parts/` are never overwritten (unique names, created with `PutMode::Create`
//!   where the store allows it), so every cached byte of them stays true forever;
//! - nothing a log version younger than the grace period lists is deleted ([`gc`]);
//! - a footer copy is never read as the part: its unwritten bytes fail the part's checksums, and
//!   parts without checksums are copied whole.

mod block_cache;
mod counting;
mod error;
mod files;
pub mod gc;
mod iceberg;
mod location;
mod push;
mod serve;
mod staging;

pub use block_cache::BlockCacheStore;
pub use counting::{CountingStore, StoreStats};
pub use error::RemoteError;
pub use location::{RemoteDataDir, RemoteOptions, is_remote};
pub use push::{Pushed, TableChange};
pub use serve::{Background, ServeMirror};
pub use staging::Staging;
