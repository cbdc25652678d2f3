//! What this process derived from a file a manifest entry names, kept beside the entry in
//! memory: a small key file's digest ([`crate::keys::KeyDigest`]), a deletion vector as decoded.
//!
//! Manifest entries are shared between a table's versions in memory (a commit copies its
//! manifest's parts by reference), so something derived once — when the file was written, or by
//! the first reader of an entry loaded from disk ([`Derived::fill`]) — serves every later reader
//! of this process without a cache lookup or a decode.
//!
//! Invariants: a file never changes once written and its name is never reused, so what was
//! derived from it holds for every copy of its entry; it is never persisted (an entry read from
//! a manifest on disk has none until a reader fills it from the file), and two entries naming the
//! same file are equal whether or not they carry it.

use std::sync::{Arc, OnceLock};

/// A value derived from the file of the manifest entry holding it, or none (module docs).
pub struct Derived<T: ?Sized>(OnceLock<Arc<T>>);

impl<T: ?Sized> Derived<T> {
    pub fn new(value: Arc<T>) -> Derived<T> {
        Derived(OnceLock::from(value))
    }

    pub fn get(&self) -> Option<&Arc<T>> {
        self.0.get()
    }

    /// Keeps `value`, derived by a reader of the file, for the readers after it of this entry
    /// (and of the entries sharing it); returns what the entry holds now (the value kept by a
    /// reader that came first, when two raced).
    pub fn fill(&self, value: Arc<T>) -> Arc<T> {
        self.0.get_or_init(|| value).clone()
    }
}

impl<T: ?Sized> Default for Derived<T> {
    fn default() -> Derived<T> {
        Derived(OnceLock::new())
    }
}

impl<T: ?Sized> Clone for Derived<T> {
    fn clone(&self) -> Derived<T> {
        Derived(self.0.clone())
    }
}

impl<T: ?Sized> PartialEq for Derived<T> {
    fn eq(&self, _: &Derived<T>) -> bool {
        true
    }
}

impl<T: ?Sized> Eq for Derived<T> {}

impl<T: ?Sized> std::fmt::Debug for Derived<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.get() {
            Some(_) => f.write_str("Derived(in memory)"),
            None => f.write_str("Derived(none)"),
        }
    }
}
