//! Files held in memory instead of on disk: what a write under [`crate::durability::deferred`]
//! produces (ADR 0017, "held files").
//!
//! A transaction commit logged in the server's write-ahead log needs its part, key file,
//! checksum files and deletion vectors only until a checkpoint folds them into the table's
//! durable parts; creating each as a file cost more than writing it (the file system allocates
//! and later frees an inode per file, up to ten per commit). So under `deferred` the writers of
//! this crate hand their finished bytes to this process-wide map, keyed by the path the file
//! would have on disk, and every reader of this crate opens a path here first
//! ([`StoredFile::open`], [`read`]).
//!
//! Invariants:
//! - a held path is never also a file on disk: [`write_out`] writes a held file to disk in full
//!   (through a temporary name and a rename) before it stops holding it, so a reader finds it in
//!   one place or the other, never half written;
//! - no manifest on disk lists a held file (the held files die with the process; the WAL holds
//!   the commits that wrote them): a durable commit first writes out every held file it lists;
//! - a held file is dropped only by [`remove`] (garbage collection, under the table's writer
//!   lock, when no manifest or reader needs it any more) or by [`write_out`];
//! - only this process can read a held file, so whether a reader may still need one that a
//!   committed manifest retired is told by epochs, not by the read-lease lock other processes
//!   share: every reader of a directory registers with the epoch it started in ([`reader`],
//!   taken by the engine's read lease before the reader loads a manifest), the first look at a
//!   retired held file starts a new epoch ([`unseen_since_retired`]), and the file is unseen
//!   once every reader of an earlier epoch has ended. (The read-lease lock is free only when no
//!   reader at all holds it: under steady load that moment may never come, and held files
//!   would pile up in memory.)

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use bytes::Bytes;
use parquet::file::reader::{ChunkReader, Length};

use crate::error::FormatError;

/// Held files by directory, then by file name: garbage collection lists one directory's.
type Held = HashMap<PathBuf, HashMap<OsString, Bytes>>;

fn held() -> &'static RwLock<Held> {
    static HELD: OnceLock<RwLock<Held>> = OnceLock::new();
    HELD.get_or_init(Default::default)
}

/// A path as the map's directory and name (a path without both is never held).
fn split(path: &Path) -> Option<(&Path, &OsStr)> {
    Some((path.parent()?, path.file_name()?))
}

/// The held file at `path`, if there is one.
pub fn get(path: &Path) -> Option<Bytes> {
    let (dir, name) = split(path)?;
    held()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(dir)?
        .get(name)
        .cloned()
}

/// Whether `path` is held in memory.
pub fn is_held(path: &Path) -> bool {
    let Some((dir, name)) = split(path) else {
        return false;
    };
    held()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(dir)
        .is_some_and(|files| files.contains_key(name))
}

fn insert(path: &Path, bytes: Bytes) -> Result<(), FormatError> {
    let (dir, name) = split(path).ok_or_else(|| FormatError::Damaged {
        path: path.to_owned(),
        message: "a file to hold needs a directory and a name".into(),
    })?;
    held()
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(dir.to_owned())
        .or_default()
        .insert(name.to_owned(), bytes);
    Ok(())
}

/// Stops holding `path`; true when it was held.
pub fn remove(path: &Path) -> bool {
    let Some((dir, name)) = split(path) else {
        return false;
    };
    let mut held = held().write().unwrap_or_else(PoisonError::into_inner);
    let Some(files) = held.get_mut(dir) else {
        return false;
    };
    let removed = files.remove(name).is_some();
    if files.is_empty() {
        held.remove(dir);
    }
    removed
}

/// Deletes the file at `path`: the held one, or else the one on disk.
pub fn delete(path: &Path) -> std::io::Result<()> {
    match remove(path) {
        true => Ok(()),
        false => std::fs::remove_file(path),
    }
}

/// The names of the files held in `dir` (not in its subdirectories).
pub fn names_in(dir: &Path) -> Vec<String> {
    held()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(dir)
        .map(|files| {
            files
                .keys()
                .filter_map(|name| name.to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The readers of one directory in this process, by the epoch they started in.
#[derive(Default)]
struct Epochs {
    current: u64,
    active: std::collections::BTreeMap<u64, usize>,
    /// Retired held files, by the epoch their retirement was first seen in.
    retired: HashMap<OsString, u64>,
}

fn epochs() -> &'static Mutex<HashMap<PathBuf, Epochs>> {
    static EPOCHS: OnceLock<Mutex<HashMap<PathBuf, Epochs>>> = OnceLock::new();
    EPOCHS.get_or_init(Default::default)
}

/// A reader of the held files of one directory (module docs): registered while it lives.
#[derive(Debug)]
pub struct Reader {
    dir: PathBuf,
    epoch: u64,
}

/// Registers a reader of the files in `dir`, before it loads the manifest listing them.
pub fn reader(dir: &Path) -> Reader {
    let mut epochs = epochs().lock().unwrap_or_else(PoisonError::into_inner);
    let entry = epochs.entry(dir.to_owned()).or_default();
    let epoch = entry.current;
    *entry.active.entry(epoch).or_default() += 1;
    Reader {
        dir: dir.to_owned(),
        epoch,
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut epochs = epochs().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = epochs.get_mut(&self.dir)
            && let Some(count) = entry.active.get_mut(&self.epoch)
        {
            *count -= 1;
            if *count == 0 {
                entry.active.remove(&self.epoch);
            }
        }
    }
}

/// Whether no reader of this process can still see the held file at `path`, which a committed
/// manifest retired (module docs). The first call for a file starts a new epoch of its
/// directory: readers registered from then on loaded a manifest without it.
pub fn unseen_since_retired(path: &Path) -> bool {
    let Some((dir, name)) = split(path) else {
        return true;
    };
    let mut epochs = epochs().lock().unwrap_or_else(PoisonError::into_inner);
    let entry = epochs.entry(dir.to_owned()).or_default();
    let retired_in = match entry.retired.get(name) {
        Some(epoch) => *epoch,
        None => {
            entry.current += 1;
            entry.retired.insert(name.to_owned(), entry.current);
            entry.current
        }
    };
    let unseen = entry
        .active
        .keys()
        .next()
        .is_none_or(|oldest| *oldest >= retired_in);
    if unseen {
        entry.retired.remove(name);
    }
    unseen
}

/// Bytes held in memory, over all held files (for metrics and tests).
pub fn held_bytes() -> u64 {
    held()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .flat_map(|files| files.values())
        .map(|b| b.len() as u64)
        .sum()
}

/// Reads a whole file, held or on disk.
pub fn read(path: &Path) -> std::io::Result<Bytes> {
    match get(path) {
        Some(bytes) => Ok(bytes),
        None => std::fs::read(path).map(Bytes::from),
    }
}

/// Writes the held file at `path` to disk under that name, fsynced when `sync` (the caller
/// syncs the file system otherwise), and stops holding it. False when `path` is not held.
pub fn write_out(path: &Path, sync: bool) -> Result<bool, FormatError> {
    let Some(bytes) = get(path) else {
        return Ok(false);
    };
    write_through_temporary(path, &bytes, sync)?;
    remove(path);
    Ok(true)
}

/// Writes `bytes` to `path` through a temporary file (fsynced when `sync`) and a rename: a
/// reader never sees the file half written.
fn write_through_temporary(path: &Path, bytes: &[u8], sync: bool) -> Result<(), FormatError> {
    let tmp = temporary_name(path);
    let mut file = File::create(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| if sync { file.sync_all() } else { Ok(()) })
        .map_err(|e| FormatError::io(&tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| FormatError::io(path, e))
}

fn temporary_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Writes a whole file under `path`: held under [`crate::durability::deferred`], otherwise
/// through a temporary file, fsynced and renamed (a reader never sees it half written). The
/// caller syncs the directory.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), FormatError> {
    if crate::durability::is_deferred() {
        insert(path, Bytes::copy_from_slice(bytes))?;
    } else {
        write_through_temporary(path, bytes, true)?;
    }
    crate::durability::placed(path);
    Ok(())
}

/// A file being written: held in memory under [`crate::durability::deferred`], otherwise a
/// temporary file on disk beside where it goes.
pub(crate) struct Output {
    path: PathBuf,
    sink: Sink,
}

enum Sink {
    Disk { file: File, tmp: PathBuf },
    Held(Vec<u8>),
}

impl Output {
    /// Starts the file that [`Output::place`] puts at `path`.
    pub(crate) fn create(path: &Path) -> Result<Output, FormatError> {
        let sink = match crate::durability::is_deferred() {
            true => Sink::Held(Vec::new()),
            false => {
                let tmp = temporary_name(path);
                let file = File::create(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
                Sink::Disk { file, tmp }
            }
        };
        Ok(Output {
            path: path.to_owned(),
            sink,
        })
    }

    /// The name errors give the file while it is written.
    pub(crate) fn writing_path(&self) -> &Path {
        match &self.sink {
            Sink::Disk { tmp, .. } => tmp,
            Sink::Held(_) => &self.path,
        }
    }

    /// Ends the writing (an fsync on disk, unless deferred) and returns the written bytes for
    /// reading, not yet under their final name.
    pub(crate) fn close(self) -> Result<Written, FormatError> {
        let (content, tmp) = match self.sink {
            Sink::Disk { file, tmp } => {
                crate::durability::sync_file(&file).map_err(|e| FormatError::io(&tmp, e))?;
                drop(file);
                let file = File::open(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
                (StoredFile::Disk(Arc::new(file)), Some(tmp))
            }
            Sink::Held(bytes) => (StoredFile::Held(Bytes::from(bytes)), None),
        };
        Ok(Written {
            path: self.path,
            content,
            tmp,
        })
    }
}

/// An [`Output`] lent to a Parquet writer and taken back once the writer has finished the file
/// ([`finish_parquet`]), so that the footer's metadata comes from the writer as written instead
/// of being read back from the bytes.
pub(crate) struct Handover(Option<Output>);

impl Handover {
    pub(crate) fn new(out: Output) -> Handover {
        Handover(Some(out))
    }

    fn lent(&mut self) -> std::io::Result<&mut Output> {
        self.0
            .as_mut()
            .ok_or_else(|| std::io::Error::other("written after the Parquet file was finished"))
    }
}

impl Write for Handover {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lent()?.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.lent()?.write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lent()?.flush()
    }
}

/// Finishes the Parquet file `writer` wrote into its [`Handover`]: the file's metadata as the
/// writer wrote it (row groups, column chunks and the page index), and the output to close.
pub(crate) fn finish_parquet(
    mut writer: parquet::arrow::ArrowWriter<Handover>,
    path: &Path,
) -> Result<(parquet::file::metadata::ParquetMetaData, Output), FormatError> {
    let metadata = writer.finish().map_err(|source| FormatError::Parquet {
        path: path.to_owned(),
        source,
    })?;
    let out = writer
        .inner_mut()
        .0
        .take()
        .ok_or_else(|| FormatError::Damaged {
            path: path.to_owned(),
            message: "its writer was finished twice".into(),
        })?;
    Ok((metadata, out))
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.sink {
            Sink::Disk { file, .. } => file.write(buf),
            Sink::Held(bytes) => {
                bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Disk { file, .. } => file.write_all(buf),
            Sink::Held(bytes) => {
                bytes.extend_from_slice(buf);
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Disk { file, .. } => file.flush(),
            Sink::Held(_) => Ok(()),
        }
    }
}

/// A closed [`Output`]: its bytes, readable, and where they go.
pub(crate) struct Written {
    path: PathBuf,
    content: StoredFile,
    tmp: Option<PathBuf>,
}

impl Written {
    /// The bytes written (to compute checksums before the file is visible).
    pub(crate) fn content(&self) -> &StoredFile {
        &self.content
    }

    /// The name errors give the bytes before they are placed.
    pub(crate) fn writing_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// Puts the file under its final name (rename, or held); returns its length. The caller
    /// syncs the directory.
    pub(crate) fn place(self) -> Result<u64, FormatError> {
        let len = self
            .content
            .size()
            .map_err(|e| FormatError::io(self.writing_path(), e))?;
        match (&self.content, &self.tmp) {
            (StoredFile::Held(bytes), _) => insert(&self.path, bytes.clone())?,
            (StoredFile::Disk(_), Some(tmp)) => {
                std::fs::rename(tmp, &self.path).map_err(|e| FormatError::io(&self.path, e))?
            }
            (StoredFile::Disk(_), None) => {}
        }
        crate::durability::placed(&self.path);
        Ok(len)
    }
}

/// A file to read: held in memory or on disk (module docs).
#[derive(Debug, Clone)]
pub enum StoredFile {
    Disk(Arc<File>),
    Held(Bytes),
}

impl StoredFile {
    /// Opens `path`: the held file when there is one, else the file on disk.
    pub fn open(path: &Path) -> std::io::Result<StoredFile> {
        match get(path) {
            Some(bytes) => Ok(StoredFile::Held(bytes)),
            None => File::open(path).map(|f| StoredFile::Disk(Arc::new(f))),
        }
    }

    /// Its length in bytes.
    pub fn size(&self) -> std::io::Result<u64> {
        match self {
            StoredFile::Disk(file) => file.metadata().map(|m| m.len()),
            StoredFile::Held(bytes) => Ok(bytes.len() as u64),
        }
    }

    /// The bytes of `range`; an error when the file ends before it.
    pub fn read_range(&self, range: Range<u64>) -> std::io::Result<Bytes> {
        match self {
            StoredFile::Disk(file) => {
                let mut buffer = vec![0; range.end.saturating_sub(range.start) as usize];
                file.read_exact_at(&mut buffer, range.start)?;
                Ok(Bytes::from(buffer))
            }
            StoredFile::Held(bytes) => {
                let end = usize::try_from(range.end).unwrap_or(usize::MAX);
                let start = usize::try_from(range.start).unwrap_or(usize::MAX);
                if start > end || end > bytes.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("bytes {start}..{end} of a file of {}", bytes.len()),
                    ));
                }
                Ok(bytes.slice(start..end))
            }
        }
    }

    /// A sequential reader of the whole file (of its own: other reads do not move it).
    pub fn reader(&self) -> std::io::Result<Box<dyn Read + Send>> {
        match self {
            StoredFile::Disk(file) => Ok(Box::new(PositionalReader {
                file: file.clone(),
                position: 0,
            })),
            StoredFile::Held(bytes) => Ok(Box::new(std::io::Cursor::new(bytes.clone()))),
        }
    }
}

/// Reads a file from the start by positional reads: clones of a `File` share one offset, which
/// parquet's readers move.
struct PositionalReader {
    file: Arc<File>,
    position: u64,
}

impl Read for PositionalReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.position)?;
        self.position += n as u64;
        Ok(n)
    }
}

impl Length for StoredFile {
    fn len(&self) -> u64 {
        match self {
            StoredFile::Disk(file) => Length::len(file.as_ref()),
            StoredFile::Held(bytes) => bytes.len() as u64,
        }
    }
}

impl ChunkReader for StoredFile {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            StoredFile::Disk(file) => Box::new(ChunkReader::get_read(file.as_ref(), start)?),
            StoredFile::Held(bytes) => Box::new(ChunkReader::get_read(bytes, start)?),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            StoredFile::Disk(file) => ChunkReader::get_bytes(file.as_ref(), start, length),
            StoredFile::Held(bytes) => ChunkReader::get_bytes(bytes, start, length),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_deferred_write_is_held_until_written_out_and_read_the_same_in_both_places() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let ((), written) = crate::durability::deferred(|| {
            let mut out = Output::create(&path).unwrap();
            out.write_all(b"hello, ").unwrap();
            out.write_all(b"world").unwrap();
            let closed = out.close().unwrap();
            assert_eq!(closed.content().read_range(7..12).unwrap(), "world");
            assert_eq!(closed.place().unwrap(), 12);
        });
        assert_eq!(written, std::slice::from_ref(&path));
        assert!(!path.exists(), "a held file is not on disk");
        assert_eq!(read(&path).unwrap(), "hello, world");
        let held = StoredFile::open(&path).unwrap();
        assert!(matches!(held, StoredFile::Held(_)));
        assert!(
            held.read_range(10..13).is_err(),
            "a read past the end fails"
        );
        assert!(names_in(dir.path()).contains(&"f".to_owned()));

        assert!(write_out(&path, true).unwrap());
        assert!(!is_held(&path));
        assert_eq!(std::fs::read(&path).unwrap(), b"hello, world");
        let disk = StoredFile::open(&path).unwrap();
        assert!(matches!(disk, StoredFile::Disk(_)));
        assert_eq!(disk.read_range(0..5).unwrap(), "hello");
        assert!(!write_out(&path, true).unwrap(), "written out once");
    }

    #[test]
    fn a_retired_held_file_is_unseen_once_the_readers_before_its_retirement_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let before = reader(dir.path());
        assert!(
            !unseen_since_retired(&path),
            "a reader from before may see it"
        );
        let after = reader(dir.path());
        assert!(!unseen_since_retired(&path));
        drop(before);
        assert!(
            unseen_since_retired(&path),
            "a reader that started after the retirement loaded a manifest without it"
        );
        drop(after);
        // Without readers a retired file is unseen at once.
        assert!(unseen_since_retired(&dir.path().join("q")));
    }

    #[test]
    fn outside_a_deferred_scope_files_go_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        let mut out = Output::create(&path).unwrap();
        out.write_all(b"abc").unwrap();
        assert_eq!(out.close().unwrap().place().unwrap(), 3);
        assert!(!is_held(&path));
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
        write_file(&dir.path().join("h"), b"xyz").unwrap();
        assert_eq!(std::fs::read(dir.path().join("h")).unwrap(), b"xyz");
    }
}
