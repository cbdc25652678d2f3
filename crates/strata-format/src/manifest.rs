//! The table manifest: settings fixed at creation and the list of visible parts.
//!
//! `manifest.json` in the table directory is the only mutable file of a table. It is replaced
//! atomically: the new version is written to `manifest.json.tmp`, fsynced, renamed over the old
//! one and the directory fsynced. A reader therefore sees the old or the new list of parts,
//! never a mix, and a process killed at any moment leaves one of the two. Part files not listed
//! in the manifest are garbage (left by an interrupted ingest or merge) and are deleted by the
//! next writer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::{Deserialize, Serialize};
use strata_json::Kind;

use crate::deletes::{PartDeletes, deletion_vector_part};
use crate::error::FormatError;
use crate::keys::{PartKeys, key_file};
pub use crate::retired::{RetiredList, RetiredPart};
use crate::{FORMAT_VERSION, FORMAT_VERSION_WITH_DELETES, FORMAT_VERSION_WITH_KEYS};

pub const MANIFEST_FILE: &str = "manifest.json";
pub const PARTS_DIR: &str = "parts";

/// Settings given when a table is created; `max_columns` can change later (`ALTER TABLE … SET`),
/// the sort key cannot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSettings {
    /// Sort key as encoded JSON paths (see `strata_json::JsonPath::encode`).
    pub sort_key: Vec<String>,
    /// Upper bound on typed columns per part.
    pub max_columns: usize,
    /// The table's primary key (ADR 0016), fixed at creation; absent for tables without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeySetting>,
    /// The path holding each document's time (issue 15, ADR 0018), encoded as sort-key paths
    /// are; absent for tables without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_column: Option<String>,
    /// Paths (encoded) whose string values get a text index in every part (ADR 0019).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub text_index: Vec<String>,
    /// Whether the text index of every part also keeps each token's rows (ADR 0019,
    /// "Postings"): searches made of terms and prefixes are then counted without reading the
    /// text. Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub text_postings: bool,
    /// Paths (encoded) whose whole values, strings or integers, get keyword postings in every
    /// part's text index (ADR 0025): each value's rows, for equality filters and their counts.
    /// Omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyword_index: Vec<String>,
    /// Retention (ADR 0018): parts whose newest time-column value is older than this many
    /// seconds are dropped. Absent: kept forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// Publish the table as an Iceberg table (ADR 0021): every commit also writes the Iceberg
    /// metadata under `metadata/`. Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub iceberg: bool,
    /// Secondary indexes (ADR 0024, `CREATE INDEX`): each part gets a file of the rows of each
    /// value at the index's path. Omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<crate::indexes::IndexSetting>,
}

impl TableSettings {
    /// The settings of a table sorted by `sort_key` with at most `max_columns` typed columns per
    /// part, and nothing else: no key, time column, text index, retention or publication.
    pub fn sorted_by(sort_key: Vec<String>, max_columns: usize) -> TableSettings {
        TableSettings {
            sort_key,
            max_columns,
            key: None,
            time_column: None,
            text_index: Vec::new(),
            text_postings: false,
            keyword_index: Vec::new(),
            ttl_seconds: None,
            iceberg: false,
            indexes: Vec::new(),
        }
    }
}

/// A table's primary key: a JSON path (encoded, as sort-key paths are) and its values' type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySetting {
    pub path: String,
    #[serde(rename = "type")]
    pub key_type: strata_json::KeyType,
}

impl KeySetting {
    pub fn table_key(&self) -> strata_json::TableKey {
        strata_json::TableKey {
            path: strata_json::JsonPath::decode(&self.path),
            key_type: self.key_type,
        }
    }
}

/// One visible part, with what a reader needs to plan a query without opening the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartEntry {
    /// File name inside `parts/`.
    pub file: String,
    pub rows: u64,
    pub bytes: u64,
    /// Typed columns: encoded path → kind.
    pub columns: BTreeMap<String, Kind>,
    /// Paths with values in the remainder and their kinds.
    pub remainder_paths: BTreeMap<String, BTreeSet<Kind>>,
    /// True when `remainder_paths` was cut at its bound: any path may be in the remainder.
    pub remainder_paths_truncated: bool,
    /// Min and max of each sort-key column in this part (JSON values; absent when all null).
    pub sort_key_min: BTreeMap<String, serde_json::Value>,
    pub sort_key_max: BTreeMap<String, serde_json::Value>,
    /// True when the writer cut this part because its buffer reached the part size target:
    /// merging it would only rewrite it at the same size, so it is never a merge candidate.
    /// Omitted when false (manifests written before this field read as false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
    /// Where each combination of the leading sort-key values lies in the part (absent when no
    /// sort-key path qualifies; manifests written before this field read as absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_runs: Option<KeyRuns>,
    /// XXH64 (seed 0) of the whole part file as 16 lowercase hex digits. Present exactly when the
    /// part has a checksum file (`crate::checksum`); absent for parts written before checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xxh64: Option<String>,
    /// The part's deletion vector: rows deleted since the part was written (ADR 0015). Absent
    /// when none is; a manifest with one is format version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes: Option<PartDeletes>,
    /// The part's key file (ADR 0016): present exactly when the table has a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<PartKeys>,
    /// The manifest version of the newest commit that wrote rows this part holds: the commit
    /// that listed it, for a part an ingest or a transaction wrote; the newest of its inputs',
    /// for a merge's output. Transactions use it to tell a row a merge moved from a row written
    /// after their snapshot (ADR 0017). Absent in manifests written before it existed, and then
    /// unknown: taken as "possibly after any snapshot".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_write: Option<u64>,
    /// The part's text index (ADR 0019), for tables with text-indexed paths; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_index: Option<crate::text_index::PartTextIndex>,
    /// The part's secondary index files (ADR 0024), one per index of the table that the part
    /// could index and that lists a row; omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<crate::indexes::PartIndex>,
}

impl PartEntry {
    /// The files that go when the part goes: the part and its deletion vector.
    pub fn own_files(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.file.clone()).chain(self.deletes.iter().map(|d| d.file.clone()))
    }

    /// Every file of `parts/` that belongs to this part besides the part itself: its checksum
    /// file, deletion vector, key file (and the key file's checksum file), text index and
    /// secondary index files (and their checksum files).
    pub fn files_beside(&self) -> Vec<String> {
        let mut files = Vec::new();
        if self.xxh64.is_some() {
            files.push(format!("{}{}", self.file, crate::checksum::CHECKSUM_SUFFIX));
        }
        if let Some(deletes) = &self.deletes {
            files.push(deletes.file.clone());
        }
        if let Some(keys) = &self.keys {
            files.push(keys.file.clone());
            files.push(format!("{}{}", keys.file, crate::checksum::CHECKSUM_SUFFIX));
        }
        if let Some(index) = &self.text_index {
            files.push(index.file.clone());
        }
        for index in &self.indexes {
            files.push(index.file.file.clone());
            files.push(format!(
                "{}{}",
                index.file.file,
                crate::checksum::CHECKSUM_SUFFIX
            ));
        }
        files
    }

    /// Rows of the part that are not deleted.
    pub fn live_rows(&self) -> u64 {
        self.rows - self.deletes.as_ref().map_or(0, |d| d.rows.min(self.rows))
    }
}

/// The rows of a part grouped by the values of a prefix of the sort key: every row belongs to
/// exactly one run, runs are listed in row order, and all rows of a run have the run's values.
///
/// Because parts are sorted by the sort key, rows sharing the leading sort-key values are
/// contiguous; the scan selects exactly the runs an equality or IN filter on those paths can
/// match, instead of whole 8,192-row granules around them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRuns {
    /// The leading sort-key paths (encoded) the runs are over.
    pub paths: Vec<String>,
    pub runs: Vec<KeyRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRun {
    /// One JSON scalar per path (`null` for rows without a value).
    pub values: Vec<serde_json::Value>,
    /// First row of the run in the part, and its row count.
    pub start: u64,
    pub rows: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// Incremented by every commit.
    pub version: u64,
    pub settings: TableSettings,
    /// Each part shared between the versions that list it: a commit copies the list, not the
    /// parts (a transaction's commit and its snapshot's release each cost a whole manifest
    /// otherwise).
    #[serde(with = "shared_parts")]
    pub parts: Vec<Arc<PartEntry>>,
    /// Parts replaced by a merge, kept on disk for readers of older manifests until a writer
    /// finds that no reader holds a lease (`strata-engine`'s `table` module).
    /// Shared between versions in chunks (`crate::retired`): a commit that retires files adds
    /// a chunk instead of copying the list.
    #[serde(default)]
    pub retired: RetiredList,
    /// The highest write-ahead-log sequence number whose request is in this table's parts
    /// (the server's WAL, `strata-engine`'s `wal` module); absent when none ever was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_applied: Option<u64>,
    /// The highest write-ahead-log sequence number of a transaction frame whose changes to this
    /// table are in its parts (frames of commits the server logged before writing them here:
    /// ADR 0017, "live manifests"); absent when none ever was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_transactions: Option<u64>,
    /// Where the keys of the logged commits of this live version's epoch lie, on a version
    /// published by a server (`crate::live_keys`); never persisted, and not carried by copies.
    #[serde(skip)]
    pub live_keys: crate::live_keys::LiveKeysRef,
}

/// `Manifest::parts` as a plain list of parts: sharing is the process's business, not the file's.
mod shared_parts {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        items: &[Arc<T>],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(items.iter().map(|item| item.as_ref()))
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Arc<T>>, D::Error> {
        let items = Vec::<T>::deserialize(deserializer)?;
        Ok(items.into_iter().map(Arc::new).collect())
    }
}

impl Manifest {
    pub fn new(settings: TableSettings) -> Self {
        Manifest {
            format_version: FORMAT_VERSION,
            version: 0,
            settings,
            parts: Vec::new(),
            retired: RetiredList::default(),
            wal_applied: None,
            wal_transactions: None,
            live_keys: Default::default(),
        }
    }

    /// Lists `files` as retired at `at` (seconds since 1970): no longer part of the table,
    /// deleted by garbage collection once no reader holds a lease from before.
    pub fn retire(&mut self, files: impl IntoIterator<Item = String>, at: u64) {
        let mut files = files.into_iter().peekable();
        if files.peek().is_none() {
            return;
        }
        self.retired.extend(files.map(|file| RetiredPart {
            file,
            retired_at: at,
        }));
    }

    /// Documents in the table: rows of its parts that are not deleted.
    pub fn rows(&self) -> u64 {
        self.parts.iter().map(|part| part.live_rows()).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }

    /// Reads `manifest.json` of a table directory (or the table's live manifest in this
    /// process: [`crate::live`]) and validates it ([`Manifest::validate`]);
    /// Ok(None) when the table does not exist. On disk only what the last manifest this
    /// process loaded from the directory did not list alike is looked at
    /// ([`Manifest::validate_since`]): a commit loads its table's manifest, and stat'ing every
    /// file of every part each time cost more than the commit's own reads. A part file lost
    /// since is then found when it is read, or by [`Manifest::load_checking_all`].
    pub fn load(table_dir: &Path) -> Result<Option<Manifest>, FormatError> {
        Manifest::load_with(table_dir, true)
    }

    /// [`Manifest::load`] looking at the files of every part (listings that report a table's
    /// health: `strata tables`).
    pub fn load_checking_all(table_dir: &Path) -> Result<Option<Manifest>, FormatError> {
        Manifest::load_with(table_dir, false)
    }

    /// [`Manifest::load`] for a caller that only reads the manifest: this process's live version
    /// is shared instead of copied (a table of many parts makes the copy cost more than the
    /// statement that asked for it).
    pub fn load_shared(table_dir: &Path) -> Result<Option<Arc<Manifest>>, FormatError> {
        Manifest::load_shared_with(table_dir, true)
    }

    fn load_with(table_dir: &Path, trust_loaded: bool) -> Result<Option<Manifest>, FormatError> {
        Ok(Manifest::load_shared_with(table_dir, trust_loaded)?.map(Arc::unwrap_or_clone))
    }

    fn load_shared_with(
        table_dir: &Path,
        trust_loaded: bool,
    ) -> Result<Option<Arc<Manifest>>, FormatError> {
        // This process's newest version of the table, not yet on disk (`crate::live`).
        if let Some(live) = crate::live::get(table_dir) {
            if !trust_loaded {
                live.validate_since(table_dir, None)?;
            }
            return Ok(Some(live));
        }
        let path = table_dir.join(MANIFEST_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FormatError::io(path, e)),
        };
        let manifest = Manifest::parse(&path, &bytes)?;
        manifest.validate_remembered(table_dir, trust_loaded)?;
        Ok(Some(Arc::new(manifest)))
    }

    /// Validates this manifest of `table_dir` and remembers it as the last one this process
    /// found valid there. With `since_last`, only what the last valid one did not list alike is
    /// looked at on disk ([`Manifest::validate_since`]); otherwise every file.
    pub fn validate_remembered(
        &self,
        table_dir: &Path,
        since_last: bool,
    ) -> Result<(), FormatError> {
        let loaded = last_loaded();
        let previous = match since_last {
            true => loaded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(table_dir)
                .cloned(),
            false => None,
        };
        self.validate_since(table_dir, previous.as_deref())?;
        loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(table_dir.to_owned(), Arc::new(self.clone()));
        Ok(())
    }

    /// Checks what a manifest claims against itself and against the files, as far as that is
    /// cheap (one `stat` per part): every problem found, each naming the part. A manifest with
    /// problems is refused, so a hand-edited or damaged one is an error, never a wrong answer.
    /// Row counts are checked against the key runs here, and against the footer whenever a part
    /// is opened (`crate::checksum::open_part`).
    pub fn problems(&self, table_dir: &Path) -> Vec<String> {
        self.problems_since(table_dir, None)
    }

    /// [`Manifest::problems`], except that the files of a part `validated` (a manifest of the
    /// same table found valid before) lists with the same entry are not looked at again: a part
    /// and the files beside it never change once written, and garbage collection deletes only
    /// files no manifest lists. What is checked on disk is then what the manifests between them
    /// added — a statement after a commit stats the commit's new part, not every part.
    pub fn problems_since(&self, table_dir: &Path, validated: Option<&Manifest>) -> Vec<String> {
        let known: std::collections::HashMap<&str, &Arc<PartEntry>> = validated
            .map(|v| v.parts.iter().map(|p| (p.file.as_str(), p)).collect())
            .unwrap_or_default();
        let mut problems = Vec::new();
        let mut seen = BTreeSet::new();
        for part in &self.parts {
            let name = &part.file;
            if !is_plain_file_name(name) {
                problems.push(format!("part {name:?} is not a file name in {PARTS_DIR}/"));
                continue;
            }
            if !seen.insert(name.as_str()) {
                problems.push(format!("part {name} is listed twice"));
                continue;
            }
            if self.retired.iter().any(|r| &r.file == name) {
                problems.push(format!("part {name} is listed as visible and as retired"));
            }
            if let Some(hash) = &part.xxh64
                && (hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                problems.push(format!("part {name}: xxh64 {hash:?} is not 16 hex digits"));
            }
            if let Some(runs) = &part.key_runs {
                let mut next = 0u64;
                let in_order = runs.runs.iter().all(|run| {
                    let ok = run.start == next && run.values.len() == runs.paths.len();
                    next = run.start.saturating_add(run.rows);
                    ok
                });
                if !in_order {
                    problems.push(format!(
                        "part {name}: its key runs do not cover its rows in order"
                    ));
                } else if next != part.rows {
                    problems.push(format!(
                        "part {name}: {} rows, but its key runs cover {next}",
                        part.rows
                    ));
                }
            }
            if known
                .get(name.as_str())
                .is_some_and(|known| Arc::ptr_eq(known, part) || **known == *part)
            {
                continue;
            }
            if let Some(deletes) = &part.deletes {
                problems.extend(deletes_problems(table_dir, part, deletes));
            }
            problems.extend(keys_problems(table_dir, part, self.settings.key.is_some()));
            problems.extend(index_problems(table_dir, part, &self.settings));
            let path = Manifest::part_path(table_dir, name);
            match fs::metadata(&path) {
                Ok(meta) if meta.len() != part.bytes => problems.push(format!(
                    "part {name}: {} bytes on disk, the manifest says {}",
                    meta.len(),
                    part.bytes
                )),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    problems.push(format!("part {name}: file {} is missing", path.display()))
                }
                Err(e) => problems.push(format!("part {name}: {}: {e}", path.display())),
            }
            if part.xxh64.is_some() {
                let sums = crate::checksum::checksum_path(&path);
                if let Err(e) = fs::metadata(&sums) {
                    problems.push(format!(
                        "part {name}: checksum file {}: {e}",
                        sums.display()
                    ));
                }
            }
        }
        for retired in self.retired.iter() {
            if !is_plain_file_name(&retired.file) {
                problems.push(format!(
                    "retired part {:?} is not a file name in {PARTS_DIR}/",
                    retired.file
                ));
            }
        }
        problems
    }

    /// [`Manifest::problems`] as one error naming the manifest (and so the table).
    pub fn validate(&self, table_dir: &Path) -> Result<(), FormatError> {
        self.validate_since(table_dir, None)
    }

    /// [`Manifest::validate`] looking on disk only at parts `validated` does not list as they
    /// are (see [`Manifest::problems_since`]).
    pub fn validate_since(
        &self,
        table_dir: &Path,
        validated: Option<&Manifest>,
    ) -> Result<(), FormatError> {
        let problems = self.problems_since(table_dir, validated);
        if problems.is_empty() {
            return Ok(());
        }
        Err(FormatError::Manifest {
            path: table_dir.join(MANIFEST_FILE),
            message: problems.join("; "),
        })
    }

    /// Parses the bytes of the manifest file at `path` (named in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Manifest, FormatError> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| FormatError::Manifest {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        if ![
            FORMAT_VERSION,
            FORMAT_VERSION_WITH_DELETES,
            FORMAT_VERSION_WITH_KEYS,
        ]
        .contains(&manifest.format_version)
        {
            return Err(FormatError::Version {
                path: path.to_owned(),
                found: manifest.format_version,
                supported: FORMAT_VERSION_WITH_KEYS,
            });
        }
        Ok(manifest)
    }

    /// Atomically replaces the table's manifest with `self` (see the module docs).
    pub fn commit(&self, table_dir: &Path) -> Result<(), FormatError> {
        let path = table_dir.join(MANIFEST_FILE);
        let tmp = table_dir.join(format!("{MANIFEST_FILE}.tmp"));
        // A table with deletions must not be read by a build that would return deleted rows:
        // its manifest says version 2, which such builds refuse. Without deletions it stays 1.
        // A keyed table must not be written by a build that would not keep its keys unique.
        let version = if self.settings.key.is_some() {
            FORMAT_VERSION_WITH_KEYS
        } else if self.parts.iter().any(|p| p.deletes.is_some()) {
            FORMAT_VERSION_WITH_DELETES
        } else {
            FORMAT_VERSION
        };
        let relabelled;
        let manifest = if self.format_version == version {
            self
        } else {
            relabelled = Manifest {
                format_version: version,
                ..self.clone()
            };
            &relabelled
        };
        let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| FormatError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_durably(&tmp, &bytes)?;
        fs::rename(&tmp, &path).map_err(|e| FormatError::io(&path, e))?;
        sync_dir(table_dir)
    }

    pub fn part_path(table_dir: &Path, file: &str) -> PathBuf {
        table_dir.join(PARTS_DIR).join(file)
    }

    /// Where the part `file` of `table` sits in an object store rooted at the data directory
    /// (the same layout as [`Manifest::part_path`]: `<table>/parts/<file>`).
    pub fn part_location(table: &str, file: &str) -> object_store::path::Path {
        object_store::path::Path::from_iter([table, PARTS_DIR, file])
    }
}

/// What is wrong with the deletion vector entry of `part` (without reading the vector).
fn deletes_problems(table_dir: &Path, part: &PartEntry, deletes: &PartDeletes) -> Vec<String> {
    let name = &part.file;
    let file = &deletes.file;
    if !is_plain_file_name(file) || deletion_vector_part(file) != Some(name.as_str()) {
        return vec![format!(
            "part {name}: {file:?} is not the name of one of its deletion vectors"
        )];
    }
    let mut problems = Vec::new();
    if deletes.rows > part.rows {
        problems.push(format!(
            "part {name}: its deletion vector deletes {} of its {} rows",
            deletes.rows, part.rows
        ));
    }
    let path = Manifest::part_path(table_dir, file);
    match fs::metadata(&path) {
        Ok(meta) if meta.len() != deletes.bytes => problems.push(format!(
            "part {name}: deletion vector {file} has {} bytes on disk, the manifest says {}",
            meta.len(),
            deletes.bytes
        )),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => problems.push(format!(
            "part {name}: deletion vector {} is missing",
            path.display()
        )),
        Err(e) => problems.push(format!("part {name}: {}: {e}", path.display())),
    }
    problems
}

/// What is wrong with the key file entry of `part` of a table with a key (`keyed`) or without.
fn keys_problems(table_dir: &Path, part: &PartEntry, keyed: bool) -> Vec<String> {
    let name = &part.file;
    let keys = match (&part.keys, keyed) {
        (None, false) => return Vec::new(),
        (None, true) => return vec![format!("part {name} of a keyed table has no key file")],
        (Some(_), false) => {
            return vec![format!(
                "part {name} has a key file, but the table has no key"
            )];
        }
        (Some(keys), true) => keys,
    };
    if keys.file != key_file(name) {
        return vec![format!("part {name}: {:?} is not its key file", keys.file)];
    }
    listed_file_problems(table_dir, name, "key file", &keys.file, keys.bytes)
}

/// What is wrong with the secondary index entries of `part`: each names an index of the table,
/// once, as its own file, which is there with the size listed.
fn index_problems(table_dir: &Path, part: &PartEntry, settings: &TableSettings) -> Vec<String> {
    let name = &part.file;
    let mut problems = Vec::new();
    for (position, index) in part.indexes.iter().enumerate() {
        if !settings.indexes.iter().any(|i| i.name == index.name) {
            problems.push(format!(
                "part {name} has a file of index {}, which the table does not have",
                index.name
            ));
        } else if part.indexes[..position]
            .iter()
            .any(|i| i.name == index.name)
        {
            problems.push(format!("part {name} lists index {} twice", index.name));
        } else if index.file.file != crate::indexes::index_file(name, &index.name) {
            problems.push(format!(
                "part {name}: {:?} is not its file of index {}",
                index.file.file, index.name
            ));
        } else {
            problems.extend(listed_file_problems(
                table_dir,
                name,
                "index file",
                &index.file.file,
                index.file.bytes,
            ));
        }
    }
    problems
}

/// What is wrong with the file `file` (a `what`) of part `name`: missing, or not `bytes` long.
fn listed_file_problems(
    table_dir: &Path,
    name: &str,
    what: &str,
    file: &str,
    bytes: u64,
) -> Vec<String> {
    let path = Manifest::part_path(table_dir, file);
    match crate::held::StoredFile::open(&path).and_then(|stored| stored.size()) {
        Ok(len) if len != bytes => vec![format!(
            "part {name}: {what} {file} has {len} bytes on disk, the manifest says {bytes}"
        )],
        Ok(_) => Vec::new(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            vec![format!("part {name}: {what} {} is missing", path.display())]
        }
        Err(e) => vec![format!("part {name}: {}: {e}", path.display())],
    }
}

/// A name of a file directly inside `parts/` (garbage collection deletes by these names).
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The manifest this process last found valid ([`Manifest::validate_remembered`]), by table
/// directory (one per table the process has read).
fn last_loaded() -> &'static Mutex<HashMap<PathBuf, Arc<Manifest>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Manifest>>>> = OnceLock::new();
    LOADED.get_or_init(Default::default)
}

/// Writes a whole file and fsyncs it (unless inside [`crate::durability::deferred`]).
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), FormatError> {
    let mut file = fs::File::create(path).map_err(|e| FormatError::io(path, e))?;
    file.write_all(bytes)
        .map_err(|e| FormatError::io(path, e))?;
    crate::durability::sync_file(&file).map_err(|e| FormatError::io(path, e))
}

/// Fsyncs a directory so that renames and creations inside it are durable (recorded instead
/// inside [`crate::durability::deferred`]).
pub fn sync_dir(dir: &Path) -> Result<(), FormatError> {
    crate::durability::sync_directory(dir).map_err(|e| FormatError::io(dir, e))
}
