//! The local copies of what opening a part needs, kept across commands: each part's small files
//! (checksum file, deletion vector, key file and its checksum file, text index) whole, and the
//! part itself as a *footer copy* — a sparse file of the part's size holding only its footer and
//! page index (from the checksum file's footer offset), the rest unwritten.
//!
//! Layout: `<cache>/files/<table>/parts/<file>`, the names of the data directory. Files are
//! immutable and named uniquely, so a copy, once complete, is never stale; copies are written to
//! a temporary name and renamed. A part without a checksum file (written before ADR 0008) is
//! copied whole: its footer cannot be told apart from the rest without reading it.

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use object_store::{ObjectStore, ObjectStoreExt as _};
use strata_format::{Manifest, PartEntry};

use crate::error::RemoteError;

#[derive(Debug, Clone)]
pub(crate) struct FileCache {
    root: PathBuf,
}

impl FileCache {
    pub(crate) fn new(cache_dir: &Path) -> Self {
        FileCache {
            root: cache_dir.join("files"),
        }
    }

    pub(crate) fn table_dir(&self, table: &str) -> PathBuf {
        self.root.join(table)
    }

    pub(crate) fn path(&self, table: &str, file: &str) -> PathBuf {
        Manifest::part_path(&self.table_dir(table), file)
    }

    /// Removes the cached files of `table` that `listed` (the files of its newest version) does
    /// not name: parts merged away, expired or dropped. Staging directories hold hard links, so
    /// a command that staged an older version keeps reading its copies; a file removed here that
    /// a newer version lists after all is fetched again.
    pub(crate) fn prune(&self, table: &str, listed: &std::collections::BTreeSet<String>) {
        let dir = self
            .table_dir(table)
            .join(strata_format::manifest::PARTS_DIR);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temporary files of a copy in progress in another process are left alone.
            if !listed.contains(&name) && !name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Fetches what is missing of `part`'s small files and footer copy.
    pub(crate) async fn ensure_part(
        &self,
        store: &dyn ObjectStore,
        table: &str,
        part: &PartEntry,
    ) -> Result<(), RemoteError> {
        for file in part.files_beside() {
            let path = self.path(table, &file);
            if !path.exists() {
                let bytes = get_whole(store, table, &file).await?;
                write_new(&path, |f| f.write_all(&bytes))?;
            }
        }
        let path = self.path(table, &part.file);
        if path.exists() {
            return Ok(());
        }
        if part.xxh64.is_none() {
            return download(store, table, &part.file, &path).await;
        }
        let footer = strata_format::checksum::footer_start(&path)?;
        let location = Manifest::part_location(table, &part.file);
        let tail = store
            .get_range(&location, footer..part.bytes)
            .await
            .map_err(|e| RemoteError::store(&location, e))?;
        write_new(&path, |f| {
            f.set_len(part.bytes)?;
            f.write_all_at(&tail, footer)
        })
    }
}

/// The whole object `file` of `table`'s `parts/`.
async fn get_whole(
    store: &dyn ObjectStore,
    table: &str,
    file: &str,
) -> Result<bytes::Bytes, RemoteError> {
    let location = Manifest::part_location(table, file);
    store
        .get(&location)
        .await
        .map_err(|e| RemoteError::store(&location, e))?
        .bytes()
        .await
        .map_err(|e| RemoteError::store(&location, e))
}

/// Downloads the whole object `file` of `table`'s `parts/` to `path`, streaming.
pub(crate) async fn download(
    store: &dyn ObjectStore,
    table: &str,
    file: &str,
    path: &Path,
) -> Result<(), RemoteError> {
    let location = Manifest::part_location(table, file);
    let mut stream = store
        .get(&location)
        .await
        .map_err(|e| RemoteError::store(&location, e))?
        .into_stream();
    let tmp = temporary_name(path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| RemoteError::io(dir, e))?;
    }
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(|e| RemoteError::io(&tmp, e))?);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| RemoteError::store(&location, e))?;
        out.write_all(&chunk)
            .map_err(|e| RemoteError::io(&tmp, e))?;
    }
    out.flush().map_err(|e| RemoteError::io(&tmp, e))?;
    drop(out);
    std::fs::rename(&tmp, path).map_err(|e| RemoteError::io(path, e))
}

fn temporary_name(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    PathBuf::from(name)
}

/// Creates `path` with the contents `fill` writes, through a temporary file and a rename.
fn write_new(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), RemoteError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| RemoteError::io(dir, e))?;
    }
    let tmp = temporary_name(path);
    let mut file = std::fs::File::create(&tmp).map_err(|e| RemoteError::io(&tmp, e))?;
    fill(&mut file).map_err(|e| RemoteError::io(&tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| RemoteError::io(path, e))
}
