//! The data directory, table directories, the writers' lock, export and garbage collection.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use strata_format::checksum::CHECKSUM_SUFFIX;
use strata_format::manifest::{PARTS_DIR, RETIRED_GRACE_SECS};
use strata_format::{Manifest, check_part, read_part};
use strata_json::JsonPath;
use strata_json::reconstruct::reconstruct;

use crate::error::EngineError;

/// The root directory holding all tables.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

/// What `strata tables` shows for one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub documents: u64,
    pub parts: usize,
    pub bytes: u64,
    pub sort_key: Vec<String>,
}

/// Held while a process writes to a table; released on drop (and by the OS if killed).
pub struct WriteLock {
    _file: fs::File,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DataDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn table_dir(&self, table: &str) -> Result<PathBuf, EngineError> {
        validate_table_name(table)?;
        Ok(self.root.join(table))
    }

    /// The manifest of an existing table.
    pub fn manifest(&self, table: &str) -> Result<Manifest, EngineError> {
        let dir = self.table_dir(table)?;
        Manifest::load(&dir)?.ok_or_else(|| EngineError::NoSuchTable(table.to_owned()))
    }

    /// Names of all tables (directories holding a manifest), sorted.
    pub fn table_names(&self) -> Result<Vec<String>, EngineError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(EngineError::io(&self.root, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| EngineError::io(&self.root, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry
                .path()
                .join(strata_format::manifest::MANIFEST_FILE)
                .exists()
                && validate_table_name(&name).is_ok()
            {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Every table with what its (validated) manifest says, or why it cannot be read: one
    /// damaged table does not hide the others.
    pub fn tables(&self) -> Result<Vec<(String, Result<TableInfo, EngineError>)>, EngineError> {
        Ok(self
            .table_names()?
            .into_iter()
            .map(|name| {
                let info = self.manifest(&name).map(|m| TableInfo {
                    documents: m.rows(),
                    parts: m.parts.len(),
                    bytes: m.bytes(),
                    sort_key: m.settings.sort_key.clone(),
                    name: name.clone(),
                });
                (name, info)
            })
            .collect())
    }

    /// Takes the table's exclusive writer lock, creating the table directory if needed;
    /// blocks while another writer holds it.
    pub fn lock_for_write(&self, table: &str) -> Result<WriteLock, EngineError> {
        let dir = self.table_dir(table)?;
        fs::create_dir_all(dir.join(PARTS_DIR)).map_err(|e| EngineError::io(&dir, e))?;
        let path = dir.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| EngineError::io(&path, e))?;
        file.lock().map_err(|e| EngineError::io(&path, e))?;
        Ok(WriteLock { _file: file })
    }

    /// Path of the table's rejects file.
    pub fn rejects_path(&self, table: &str) -> Result<PathBuf, EngineError> {
        Ok(self.table_dir(table)?.join("rejects.ndjson"))
    }
}

/// Table names become directory names and SQL identifiers, so they are kept plain.
pub fn validate_table_name(name: &str) -> Result<(), EngineError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Ok(())
    } else {
        Err(EngineError::InvalidTableName(name.to_owned()))
    }
}

/// A part file name unique across processes and time.
pub(crate) fn new_part_file(manifest_version: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "part-{:010}-{}-{:x}-{}.parquet",
        manifest_version + 1,
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Deletes part files that no manifest references (left by a killed writer) and retired parts
/// past their grace period. Call only while holding the table's write lock: then no other
/// process is writing a part that is not yet listed.
pub(crate) fn collect_garbage(
    table_dir: &Path,
    manifest: &mut Manifest,
) -> Result<bool, EngineError> {
    let parts_dir = table_dir.join(PARTS_DIR);
    let now = unix_now();
    let before = manifest.retired.len();
    let (expired, kept): (Vec<_>, Vec<_>) = manifest
        .retired
        .drain(..)
        .partition(|r| now.saturating_sub(r.retired_at) >= RETIRED_GRACE_SECS);
    manifest.retired = kept;
    let entries = match fs::read_dir(&parts_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(EngineError::io(&parts_dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(&parts_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // A part's checksum file lives and dies with its part.
        let part_name = name.strip_suffix(CHECKSUM_SUFFIX).unwrap_or(&name);
        let listed = manifest.parts.iter().any(|p| p.file == part_name)
            || manifest.retired.iter().any(|r| r.file == part_name);
        let expired_retired = expired.iter().any(|r| r.file == part_name);
        if !listed || expired_retired {
            let path = entry.path();
            fs::remove_file(&path).map_err(|e| EngineError::io(&path, e))?;
        }
    }
    Ok(manifest.retired.len() != before)
}

/// Writes every document of a table as NDJSON, part by part. Returns the number written.
pub fn export_table(
    data_dir: &DataDir,
    table: &str,
    out: &mut dyn Write,
) -> Result<u64, EngineError> {
    let dir = data_dir.table_dir(table)?;
    let manifest = data_dir.manifest(table)?;
    let mut written = 0u64;
    for part in &manifest.parts {
        let path = Manifest::part_path(&dir, &part.file);
        for batch in read_part(&path, part, 8192)? {
            let batch = batch.map_err(|source| strata_format::FormatError::Arrow {
                path: path.clone(),
                source,
            })?;
            let docs =
                reconstruct(&batch, &JsonPath::default()).map_err(|source| EngineError::Json {
                    table: table.to_owned(),
                    source,
                })?;
            for doc in docs.into_iter().flatten() {
                serde_json::to_writer(&mut *out, &doc)
                    .map_err(|e| EngineError::io("<output>", e.into()))?;
                out.write_all(b"\n")
                    .map_err(|e| EngineError::io("<output>", e))?;
                written += 1;
            }
        }
    }
    Ok(written)
}

/// What `strata check` found in one table.
#[derive(Debug)]
pub struct TableCheck {
    pub table: String,
    /// Problems of the manifest itself (unreadable, or claims the files contradict).
    pub manifest_problems: Vec<String>,
    pub parts: Vec<PartCheck>,
}

/// What `strata check` found in one part.
#[derive(Debug)]
pub struct PartCheck {
    pub file: String,
    /// Empty when the part is fine.
    pub problems: Vec<String>,
    /// What was verified.
    pub note: String,
}

impl TableCheck {
    pub fn is_damaged(&self) -> bool {
        !self.manifest_problems.is_empty() || self.parts.iter().any(|p| !p.problems.is_empty())
    }
}

/// Verifies a table: its manifest against the files, and every visible part completely (whole
/// file hash, checksum file, footer, every page's checksum, row count, and a decode of every
/// row). Reads every byte of the table; takes no lock (parts are immutable).
pub fn check_table(data_dir: &DataDir, table: &str) -> Result<TableCheck, EngineError> {
    let dir = data_dir.table_dir(table)?;
    let path = dir.join(strata_format::manifest::MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::NoSuchTable(table.to_owned()));
        }
        Err(e) => return Err(EngineError::io(path, e)),
    };
    let mut check = TableCheck {
        table: table.to_owned(),
        manifest_problems: Vec::new(),
        parts: Vec::new(),
    };
    let manifest = match Manifest::parse(&path, &bytes) {
        Ok(manifest) => manifest,
        Err(e) => {
            check.manifest_problems.push(e.to_string());
            return Ok(check);
        }
    };
    check.manifest_problems = manifest.problems(&dir);
    for part in &manifest.parts {
        let path = Manifest::part_path(&dir, &part.file);
        let (problems, note) = check_part(&path, part);
        check.parts.push(PartCheck {
            file: part.file.clone(),
            problems,
            note,
        });
    }
    Ok(check)
}
