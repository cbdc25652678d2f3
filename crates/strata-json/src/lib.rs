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

std::thread_local! {
    /// Whether this thread's stack is [`DEEP_STACK_BYTES`] deep (see [`mark_deep_stack`]).
    static DEEP_STACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Records that the calling thread was created with a [`DEEP_STACK_BYTES`] stack, so that
/// [`run_with_deep_stack`] runs on it directly. For threads a pool creates with that stack size
/// (a tokio runtime's `on_thread_start`); calling it on any other thread is a stack overflow
/// waiting for a deep document.
pub fn mark_deep_stack() {
    DEEP_STACK.with(|deep| deep.set(true));
}

/// Runs `f` on a thread whose stack can hold [`MAX_NESTING_DEPTH`] levels of recursion: the
/// calling thread when [`mark_deep_stack`] marked it (a thread per call costs a `clone` and an
/// `munmap` of its stack, a few percent of a short transaction), a new one otherwise.
pub fn run_with_deep_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    if DEEP_STACK.with(std::cell::Cell::get) {
        return f();
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::thread::{ThreadId, current};

    use super::*;

    fn runs_on_caller() -> bool {
        let caller: ThreadId = current().id();
        run_with_deep_stack(move || current().id() == caller)
    }

    #[test]
    fn deep_work_runs_on_a_marked_thread_itself_and_on_a_new_one_from_any_other() {
        assert!(!runs_on_caller());
        let marked = std::thread::Builder::new()
            .stack_size(DEEP_STACK_BYTES)
            .spawn(|| {
                mark_deep_stack();
                runs_on_caller()
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(marked);
    }
}
