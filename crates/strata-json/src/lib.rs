//! JSON shredding and reconstruction for Strata.
//!
//! This crate owns the mapping between JSON documents and typed, per-path Arrow columns:
//! parsing one document ([`document`]), naming paths ([`path`]), classifying leaf values
//! ([`kind`]), turning a batch of documents into one sorted [`arrow::record_batch::RecordBatch`]
//! ([`shred`]), turning rows back into documents ([`reconstruct`]) and rewriting parts to a common
//! layout so that they can be merged ([`conform`]).
//!
//! Invariants every module keeps:
//! - nothing is lost: every leaf value of every accepted document is stored either in the typed
//!   column of its path or in the per-part remainder, with its exact JSON text;
//! - a column is typed per path *per part*: never unified across parts, and a merged part
//!   chooses again over all its rows ([`conform`]);
//! - no I/O happens here; callers hand bytes in and get Arrow data out.

pub mod conform;
pub mod document;
pub mod error;
pub mod key;
pub mod kind;
pub mod path;
pub mod reconstruct;
pub mod selfcheck;
pub mod shred;

pub use document::{Document, Field, MAX_NESTING_DEPTH, parse_document, parse_document_tree};
pub use error::{DocumentError, JsonError};
pub use key::{KeyError, KeyType, KeyValue, TableKey, document_key};
pub use kind::Kind;
pub use path::JsonPath;
pub use reconstruct::{LayoutColumn, PartLayout};
pub use shred::{ShredOptions, ShreddedBatch, Shredder};

/// Name of the per-part remainder column: `Map<encoded path, JSON text>`.
///
/// Every internal column name starts with [`RESERVED_PREFIX`]; document paths whose encoded name
/// starts with it are stored in the remainder so they can never collide with internal columns.
pub const REMAINDER_COLUMN: &str = "__strata_rest";

/// Prefix reserved for Strata's internal columns.
pub const RESERVED_PREFIX: &str = "__strata";

/// Arrow field metadata key holding a column's [`Kind`].
pub const KIND_METADATA_KEY: &str = "strata.kind";

/// Stack size for threads that parse, shred or reconstruct documents up to
/// [`MAX_NESTING_DEPTH`] levels deep (debug builds use large frames; pages are only committed
/// when touched, so the reservation is cheap).
pub const DEEP_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Runs `f` on a thread whose stack can hold [`MAX_NESTING_DEPTH`] levels of recursion.
pub fn run_with_deep_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let handle = std::thread::Builder::new()
        .name("strata-deep".into())
        .stack_size(DEEP_STACK_BYTES)
        .spawn(f);
    match handle {
        Ok(handle) => match handle.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        // Spawning only fails when the OS refuses a thread; nothing sensible remains to do.
        Err(e) => panic!("cannot spawn a thread: {e}"),
    }
}
