//! When the files this crate writes become durable: at once (the default: fsync of each file
//! and of the directory it is renamed into), or later, for writes that something else already
//! makes durable — a transaction commit whose changes are in the server's write-ahead log
//! (ADR 0017, "live manifests") — and whose files are fsynced together before any manifest on
//! disk lists them.
//!
//! [`deferred`] runs a write with the fsyncs skipped on the calling thread and returns the
//! files and directories it left undurable; the files are not even created: the writers of this
//! crate hold them in memory ([`crate::held`]). Invariant: a file written under [`deferred`] is
//! listed by no manifest on disk until the caller has made every returned path durable
//! ([`make_durable`], or [`write_out_held`] and a sync of the file system); the writers here
//! write on the calling thread only, so the thread-local scope sees all of them.

use std::cell::RefCell;
use std::fs::File;
use std::path::{Path, PathBuf};

thread_local! {
    /// Some while a [`deferred`] write runs on this thread: the paths it left undurable.
    static DEFERRED: RefCell<Option<Vec<PathBuf>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous scope when the write ends, also by panic.
struct Scope {
    previous: Option<Vec<PathBuf>>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        DEFERRED.with(|d| *d.borrow_mut() = previous);
    }
}

/// Runs `write` with this crate's fsyncs deferred (module docs); returns its result and every
/// file (by its final name) and directory it left undurable, in the order written.
pub fn deferred<T>(write: impl FnOnce() -> T) -> (T, Vec<PathBuf>) {
    let scope = Scope {
        previous: DEFERRED.with(|d| d.borrow_mut().replace(Vec::new())),
    };
    let result = write();
    let written = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
    drop(scope);
    (result, written)
}

/// Whether a [`deferred`] write runs on this thread (writers then hold their files).
pub(crate) fn is_deferred() -> bool {
    DEFERRED.with(|d| d.borrow().is_some())
}

fn record(path: &Path) {
    DEFERRED.with(|d| {
        if let Some(written) = d.borrow_mut().as_mut()
            && !written.iter().any(|p| p == path)
        {
            written.push(path.to_owned());
        }
    });
}

/// Fsyncs a file just written, unless durability is deferred (then the writer reports its
/// final name through [`placed`] once it is renamed there).
pub(crate) fn sync_file(file: &File) -> std::io::Result<()> {
    match is_deferred() {
        true => Ok(()),
        false => file.sync_all(),
    }
}

/// Records a file written under its final name, when durability is deferred.
pub(crate) fn placed(path: &Path) {
    record(path);
}

/// Fsyncs a directory, or records it when durability is deferred.
pub(crate) fn sync_directory(dir: &Path) -> std::io::Result<()> {
    match is_deferred() {
        true => {
            record(dir);
            Ok(())
        }
        false => File::open(dir).and_then(|d| d.sync_all()),
    }
}

/// Makes files and directories written under [`deferred`] durable, one fsync each: a held
/// file is written out first; directories are synced last, after every rename into them. A
/// file that is gone is an error: a manifest about to list it must not be committed.
pub fn make_durable(paths: &[PathBuf]) -> Result<(), crate::FormatError> {
    let (directories, files): (Vec<&PathBuf>, Vec<&PathBuf>) =
        paths.iter().partition(|path| path.is_dir());
    for path in files {
        if !crate::held::write_out(path, true)? {
            File::open(path)
                .and_then(|file| file.sync_all())
                .map_err(|e| crate::FormatError::io(path, e))?;
        }
    }
    for dir in directories {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| crate::FormatError::io(dir, e))?;
    }
    Ok(())
}

/// Writes the held files among `paths` to disk without fsyncing them: the caller syncs the
/// whole file system after (cheaper than an fsync each when there are many).
pub fn write_out_held(paths: &[PathBuf]) -> Result<(), crate::FormatError> {
    for path in paths {
        crate::held::write_out(path, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_deferred_write_reports_its_files_and_directories_once_and_ends_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a");
        let ((), written) = deferred(|| {
            let out = File::create(&file).unwrap();
            sync_file(&out).unwrap();
            placed(&file);
            sync_directory(dir.path()).unwrap();
            sync_directory(dir.path()).unwrap();
        });
        assert_eq!(written, [file.clone(), dir.path().to_owned()]);
        assert!(!is_deferred());
        make_durable(&written).unwrap();
        // Outside a scope nothing is recorded.
        placed(&file);
        assert!(!is_deferred());
    }
}
