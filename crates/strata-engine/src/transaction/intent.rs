//! Intent records: how a commit of several tables stays all-or-nothing across a crash.
//!
//! `DATA_DIR/.transactions/<name>.json` lists, for each table of one commit, the version it
//! replaces and the whole manifest that replaces it. The record is written to a temporary file,
//! fsynced and renamed (so it exists whole or not at all) before the first manifest is
//! committed, and removed after the last. Its existence is the commit point: a record found
//! later belongs to a commit whose process died, and is applied — each of its tables whose
//! manifest is still at the version replaced gets the recorded one — then removed.
//!
//! Invariant: a record is applied to a table only by a holder of the table's writer lock, before
//! that holder does anything else ([`recover_table`] runs inside `DataDir::lock`), so no other
//! write can come between a crashed commit and its completion. The new parts a record lists
//! are unlisted files until it is applied, and garbage collection runs only under the writer
//! lock, after recovery: they are never collected first.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use strata_format::Manifest;
use strata_format::manifest::{sync_dir, write_durably};

use super::StagedTable;
use crate::commit::commit_manifest;
use crate::error::EngineError;

/// The directory of intent records in a data directory (not a valid table name).
pub const TRANSACTIONS_DIR: &str = ".transactions";
const RECORD_SUFFIX: &str = ".json";

#[derive(Debug, Serialize, Deserialize)]
struct IntentRecord {
    tables: Vec<IntentTable>,
}

#[derive(Debug, Serialize, Deserialize)]
struct IntentTable {
    table: String,
    /// The version of the table's manifest that `manifest` replaces.
    base_version: u64,
    manifest: Manifest,
}

/// Makes the record of `tables` durable; returns its path.
pub(crate) fn write(root: &Path, tables: &[StagedTable]) -> Result<PathBuf, EngineError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = root.join(TRANSACTIONS_DIR);
    fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
    let record = IntentRecord {
        tables: tables
            .iter()
            .map(|t| IntentTable {
                table: t.table.clone(),
                base_version: t.base_version,
                manifest: t.manifest.clone(),
            })
            .collect(),
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!(
        "{nanos:x}-{}-{}{RECORD_SUFFIX}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    let bytes = serde_json::to_vec(&record)
        .map_err(|e| EngineError::Invalid(format!("{}: {e}", path.display())))?;
    write_durably(&tmp, &bytes)?;
    fs::rename(&tmp, &path).map_err(|e| EngineError::io(&path, e))?;
    sync_dir(&dir)?;
    Ok(path)
}

/// Removes a record whose tables are all committed.
pub(crate) fn remove(path: &Path) -> Result<(), EngineError> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(EngineError::io(path, e)),
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Applies to `table` (whose writer lock the caller holds) the records of commits that died
/// before committing it, and removes the records all of whose tables are committed.
pub(crate) fn recover_table(root: &Path, table: &str) -> Result<(), EngineError> {
    for (path, record) in records(root)? {
        let Some(mine) = record.tables.iter().find(|t| t.table == table) else {
            continue;
        };
        let table_dir = root.join(table);
        if let Some(current) = Manifest::load(&table_dir)?
            && current.version == mine.base_version
        {
            commit_manifest(&mut mine.manifest.clone(), &table_dir)?;
        }
        if all_applied(root, &record)? {
            remove(&path)?;
        }
    }
    Ok(())
}

/// Whether every table of `record` is at or past its recorded version (or gone).
fn all_applied(root: &Path, record: &IntentRecord) -> Result<bool, EngineError> {
    for table in &record.tables {
        if let Some(current) = Manifest::load(&root.join(&table.table))?
            && current.version < table.manifest.version
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The tables that records left by killed commits still have to be applied to.
pub fn pending_tables(root: &Path) -> Result<Vec<String>, EngineError> {
    let mut tables: Vec<String> = records(root)?
        .into_iter()
        .flat_map(|(_, record)| record.tables.into_iter().map(|t| t.table))
        .collect();
    tables.sort();
    tables.dedup();
    Ok(tables)
}

/// The records in the data directory at `root`.
fn records(root: &Path) -> Result<Vec<(PathBuf, IntentRecord)>, EngineError> {
    let dir = root.join(TRANSACTIONS_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EngineError::io(&dir, e)),
    };
    let mut records = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(&dir, e))?;
        if !entry.file_name().to_string_lossy().ends_with(RECORD_SUFFIX) {
            // A record not renamed into place was never a commit point.
            continue;
        }
        let path = entry.path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            // Removed meanwhile by the commit that wrote it or by another recovery.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(EngineError::io(&path, e)),
        };
        let record = serde_json::from_slice(&bytes).map_err(|e| {
            EngineError::Invalid(format!(
                "{}: damaged transaction intent record: {e}",
                path.display()
            ))
        })?;
        records.push((path, record));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use super::*;
    use crate::input::Input;
    use crate::table::DataDir;
    use crate::transaction::{TableChanges, apply_changes};
    use crate::{IngestOptions, export_table, ingest};

    fn table(data_dir: &DataDir, name: &str, line: &str) {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(file, "{line}").unwrap();
        ingest(
            data_dir,
            name,
            &[Input::File(file.path().to_owned())],
            &IngestOptions::default(),
            &mut |_| {},
            &mut |_| {},
        )
        .unwrap();
    }

    /// The next manifest of `name` with `line` appended, written but not committed.
    fn staged(data_dir: &DataDir, name: &str, line: &str) -> StagedTable {
        let table_dir = data_dir.table_dir(name).unwrap();
        let mut manifest = data_dir.manifest(name).unwrap();
        let base_version = manifest.version;
        let changes = TableChanges {
            appended: vec![line.to_owned()],
            ..TableChanges::default()
        };
        let written = apply_changes(name, &table_dir, &mut manifest, &changes).unwrap();
        StagedTable {
            table: name.to_owned(),
            table_dir,
            base_version,
            manifest,
            written,
        }
    }

    fn rows(data_dir: &DataDir, name: &str) -> usize {
        let mut out = Vec::new();
        export_table(data_dir, name, &mut out).unwrap();
        out.iter().filter(|&&b| b == b'\n').count()
    }

    #[test]
    fn a_commit_killed_after_its_record_is_finished_by_the_next_writer() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        table(&data_dir, "accounts", r#"{"a":1}"#);
        table(&data_dir, "transfers", r#"{"t":1}"#);
        let tables = vec![
            staged(&data_dir, "accounts", r#"{"a":2}"#),
            staged(&data_dir, "transfers", r#"{"t":2}"#),
        ];
        let record = write(dir.path(), &tables).unwrap();
        // Killed after committing the first table only.
        commit_manifest(&mut tables[0].manifest.clone(), &tables[0].table_dir).unwrap();
        drop(tables);
        assert_eq!(rows(&data_dir, "transfers"), 1);
        assert_eq!(
            pending_tables(dir.path()).unwrap(),
            ["accounts", "transfers"]
        );

        // A writer of the second table applies the record first (and garbage collection,
        // which runs after, keeps the part the record lists).
        table(&data_dir, "transfers", r#"{"t":3}"#);
        assert_eq!(rows(&data_dir, "accounts"), 2);
        assert_eq!(rows(&data_dir, "transfers"), 3);
        assert!(!record.exists());
        assert!(pending_tables(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_record_without_any_commit_is_applied_whole_and_a_torn_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        table(&data_dir, "a", r#"{"a":1}"#);
        table(&data_dir, "b", r#"{"b":1}"#);
        let tables = vec![
            staged(&data_dir, "a", r#"{"a":2}"#),
            staged(&data_dir, "b", r#"{"b":2}"#),
        ];
        write(dir.path(), &tables).unwrap();
        // A record being written when the process died was never renamed into place.
        fs::write(
            dir.path().join(TRANSACTIONS_DIR).join("torn.json.tmp"),
            b"{\"tables\": [",
        )
        .unwrap();
        assert_eq!(data_dir.recover_transactions().unwrap(), 2);
        assert_eq!(rows(&data_dir, "a"), 2);
        assert_eq!(rows(&data_dir, "b"), 2);
        // Applied once: recovering again changes nothing.
        assert_eq!(data_dir.recover_transactions().unwrap(), 0);
        assert_eq!(rows(&data_dir, "a"), 2);
    }
}
