//! Publishes a Strata table as an Apache Iceberg table (format version 2) over the very same
//! Parquet parts, so that engines that read Iceberg — Spark, Trino, DuckDB, PyIceberg — query
//! Strata's data in place (issue 16, ADR 0021; the layout is in docs/format.md, "Iceberg
//! metadata").
//!
//! A publication describes the table as one manifest commit left it, under `TABLE/metadata/`:
//! - one snapshot whose id and sequence number are the manifest's version, listing every visible
//!   part as a data file (one data manifest) and every deletion vector as a position delete file
//!   (one delete manifest, Parquet files made from the vectors: [`position_deletes`]);
//! - the schema of [`schema`]: one column per path typed alike in every part, the remainder map,
//!   and the name mapping that resolves the parts' columns (they carry no field ids);
//! - `v<version>.metadata.json`, then `version-hint.text` naming it.
//!
//! Invariants:
//! - Every file is written whole under a temporary name, fsynced and renamed, and the version
//!   hint is written last, so a reader following the hint never meets a half-written version;
//!   a crash leaves the previous version current.
//! - A publication lists the whole table, not a change to the previous one: snapshots have no
//!   parent and only the newest is in the metadata. Readers see the current state; time travel
//!   and incremental reads over Strata's history are not offered. Readers that loaded a version
//!   just before a newer one was published can still finish: its metadata files stay while it
//!   is one of the newest [`KEPT_VERSIONS`] or younger than [`READER_GRACE_SECONDS`], and the
//!   engine keeps the parts a merge retired for as long (Iceberg readers take no read lease).
//! - Nothing here writes or removes a part: the parts stay Strata's, and the Iceberg table is
//!   read-only to other engines.

pub mod error;
pub mod manifests;
pub mod metadata;
pub mod position_deletes;
pub mod schema;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use strata_format::Manifest;
use strata_format::deletes::read_deletion_vector;

pub use error::IcebergError;
use manifests::{Content, FileEntry, SnapshotIds, WrittenManifest};
use metadata::{
    PartitionSpec, Schema, Snapshot, SnapshotLogEntry, SnapshotRef, SortOrder, TableMetadata,
    VERSION_HINT_FILE, metadata_file,
};
use position_deletes::{position_delete_file, write_position_deletes};
use schema::{EXCLUDED_PATHS_PROPERTY, NAME_MAPPING_PROPERTY, PublishedSchema};

/// The directory inside a table's directory that holds its Iceberg metadata.
pub const METADATA_DIR: &str = "metadata";
/// How many publications' files stay in `metadata/` at least (the newest).
pub const KEPT_VERSIONS: usize = 3;
/// How long (seconds) files that a newer publication no longer lists stay for readers of an
/// older one: metadata files after they were replaced, parts after a merge retired them.
pub const READER_GRACE_SECONDS: u64 = 600;

/// What a publication wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub version: u64,
    /// The metadata file readers open (`…/metadata/v<version>.metadata.json`).
    pub metadata_file: PathBuf,
    pub data_files: usize,
    pub delete_files: usize,
    /// Paths left out of the Iceberg schema (their typed columns differ in type between parts).
    pub excluded_paths: Vec<String>,
}

/// Publishes the state `manifest` (just committed in `table_dir`) describes.
pub fn publish(table_dir: &Path, manifest: &Manifest) -> Result<Published, IcebergError> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    publish_at(table_dir, manifest, now_ms)
}

/// [`publish`] with the time the snapshot is stamped with.
pub fn publish_at(
    table_dir: &Path,
    manifest: &Manifest,
    now_ms: i64,
) -> Result<Published, IcebergError> {
    let table_dir = std::fs::canonicalize(table_dir).map_err(|e| IcebergError::io(table_dir, e))?;
    let locations = Locations::of(&table_dir)?;
    publish_with_locations(&table_dir, manifest, now_ms, &locations)
}

fn publish_with_locations(
    table_dir: &Path,
    manifest: &Manifest,
    now_ms: i64,
    locations: &Locations,
) -> Result<Published, IcebergError> {
    let metadata_dir = table_dir.join(METADATA_DIR);
    std::fs::create_dir_all(&metadata_dir).map_err(|e| IcebergError::io(&metadata_dir, e))?;
    let previous = TableMetadata::load_current(&metadata_dir)?;

    let version = manifest.version.max(1);
    let sequence = i64::try_from(version).unwrap_or(i64::MAX);
    let snapshot = SnapshotIds {
        snapshot_id: sequence,
        sequence_number: sequence,
    };
    let schema = PublishedSchema::new(manifest, previous.as_ref());
    let schema_id = match &previous {
        Some(previous) => match previous.current_schema() {
            Some(old) if old.fields == schema.fields => old.schema_id,
            Some(old) => old.schema_id + 1,
            None => 0,
        },
        None => 0,
    };
    let iceberg_schema = Schema {
        schema_type: "struct".into(),
        schema_id,
        fields: schema.fields.clone(),
    };
    let schema_json = to_json(&metadata_dir, &iceberg_schema)?;

    let data_files: Vec<FileEntry> = manifest
        .parts
        .iter()
        .map(|part| FileEntry {
            location: locations.part(&part.file),
            records: part.rows,
            bytes: part.bytes,
            lower_bounds: bounds(&schema, &part.sort_key_min),
            upper_bounds: bounds(&schema, &part.sort_key_max),
        })
        .collect();
    let delete_files = position_delete_entries(table_dir, &metadata_dir, manifest, locations)?;

    let mut manifests: Vec<WrittenManifest> = Vec::new();
    for (content, files) in [
        (Content::Data, &data_files),
        (Content::PositionDeletes, &delete_files),
    ] {
        if files.is_empty() {
            continue;
        }
        let name = manifest_file(version, content);
        manifests.push(manifests::write_manifest(
            &metadata_dir.join(&name),
            &locations.metadata(&name),
            content,
            files,
            snapshot,
            &schema_json,
            schema_id,
        )?);
    }
    let list_name = manifest_list_file(version);
    manifests::write_manifest_list(&metadata_dir.join(&list_name), &manifests, snapshot)?;

    let mut properties = BTreeMap::new();
    properties.insert(
        NAME_MAPPING_PROPERTY.to_owned(),
        to_json(&metadata_dir, &schema.name_mapping)?,
    );
    if !schema.excluded.is_empty() {
        properties.insert(
            EXCLUDED_PATHS_PROPERTY.to_owned(),
            to_json(&metadata_dir, &schema.excluded)?,
        );
    }
    let summary = snapshot_summary(manifest, version, data_files.len(), delete_files.len());
    let table_metadata = TableMetadata {
        format_version: 2,
        table_uuid: previous
            .as_ref()
            .map_or_else(random_uuid, |p| p.table_uuid.clone()),
        location: locations.table.clone(),
        last_sequence_number: sequence,
        last_updated_ms: now_ms,
        last_column_id: schema.last_column_id,
        current_schema_id: schema_id,
        schemas: vec![iceberg_schema],
        default_spec_id: 0,
        partition_specs: vec![PartitionSpec {
            spec_id: 0,
            fields: Vec::new(),
        }],
        // The spec's value for a table that never had a partition field.
        last_partition_id: 999,
        default_sort_order_id: 0,
        sort_orders: vec![SortOrder {
            order_id: 0,
            fields: Vec::new(),
        }],
        properties,
        current_snapshot_id: snapshot.snapshot_id,
        refs: BTreeMap::from([(
            "main".to_owned(),
            SnapshotRef {
                snapshot_id: snapshot.snapshot_id,
                ref_type: "branch".into(),
            },
        )]),
        snapshots: vec![Snapshot {
            snapshot_id: snapshot.snapshot_id,
            sequence_number: snapshot.sequence_number,
            timestamp_ms: now_ms,
            manifest_list: locations.metadata(&list_name),
            summary,
            schema_id,
        }],
        snapshot_log: vec![SnapshotLogEntry {
            timestamp_ms: now_ms,
            snapshot_id: snapshot.snapshot_id,
        }],
        metadata_log: Vec::new(),
    };
    let metadata_path = metadata_dir.join(metadata_file(version));
    let bytes = serde_json::to_vec_pretty(&table_metadata).map_err(|e| IcebergError::Io {
        path: metadata_path.clone(),
        source: e.into(),
    })?;
    write_file(&metadata_path, &bytes)?;
    write_file(
        &metadata_dir.join(VERSION_HINT_FILE),
        version.to_string().as_bytes(),
    )?;
    strata_format::manifest::sync_dir(&metadata_dir)?;
    remove_unused(&metadata_dir, manifest)?;

    Ok(Published {
        version,
        metadata_file: metadata_path,
        data_files: data_files.len(),
        delete_files: delete_files.len(),
        excluded_paths: schema.excluded,
    })
}

/// Removes a table's Iceberg metadata (when publishing is turned off): the hint first, so no
/// reader starts on a version being removed. Returns false when there was none.
pub fn unpublish(table_dir: &Path) -> Result<bool, IcebergError> {
    let metadata_dir = table_dir.join(METADATA_DIR);
    let hint = metadata_dir.join(VERSION_HINT_FILE);
    match std::fs::remove_file(&hint) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !metadata_dir.exists() => {
            return Ok(false);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(IcebergError::io(&hint, e)),
    }
    std::fs::remove_dir_all(&metadata_dir).map_err(|e| IcebergError::io(&metadata_dir, e))?;
    Ok(true)
}

/// The position delete files of the table's deletion vectors, each written the first time a
/// publication meets its vector (a vector file never changes, so neither does its copy).
fn position_delete_entries(
    table_dir: &Path,
    metadata_dir: &Path,
    manifest: &Manifest,
    locations: &Locations,
) -> Result<Vec<FileEntry>, IcebergError> {
    let mut entries = Vec::new();
    for part in &manifest.parts {
        let Some(deletes) = &part.deletes else {
            continue;
        };
        let name = position_delete_file(&deletes.file);
        let path = metadata_dir.join(&name);
        let bytes = match std::fs::metadata(&path) {
            Ok(existing) => existing.len(),
            Err(_) => {
                let vector = read_deletion_vector(table_dir, deletes, part.rows)?;
                write_position_deletes(&path, &locations.part(&part.file), &vector)?
            }
        };
        entries.push(FileEntry {
            location: locations.metadata(&name),
            records: deletes.rows,
            bytes,
            ..FileEntry::default()
        });
    }
    Ok(entries)
}

/// The snapshot's summary: Iceberg's totals, and the Strata manifest version it describes.
fn snapshot_summary(
    manifest: &Manifest,
    version: u64,
    data_files: usize,
    delete_files: usize,
) -> BTreeMap<String, String> {
    let deleted_rows: u64 = manifest
        .parts
        .iter()
        .filter_map(|p| p.deletes.as_ref())
        .map(|d| d.rows)
        .sum();
    BTreeMap::from([
        ("operation".to_owned(), "overwrite".to_owned()),
        ("strata.manifest-version".to_owned(), version.to_string()),
        ("total-data-files".to_owned(), data_files.to_string()),
        ("total-delete-files".to_owned(), delete_files.to_string()),
        (
            "total-records".to_owned(),
            manifest
                .parts
                .iter()
                .map(|p| p.rows)
                .sum::<u64>()
                .to_string(),
        ),
        (
            "total-position-deletes".to_owned(),
            deleted_rows.to_string(),
        ),
        ("total-files-size".to_owned(), manifest.bytes().to_string()),
    ])
}

/// Bounds of a part's sort-key columns from its manifest entry (the min and max of each typed
/// column, exact), for the columns the schema holds. Other columns get none: a part's footer
/// has them, but reading every footer on every commit would cost more than the pruning saves
/// on tables sorted by the paths filters use.
fn bounds(
    schema: &PublishedSchema,
    values: &BTreeMap<String, serde_json::Value>,
) -> Vec<(i32, Vec<u8>)> {
    let mut out: Vec<(i32, Vec<u8>)> = values
        .iter()
        .filter_map(|(path, value)| {
            let (id, ty) = schema.columns.get(path)?;
            Some((*id, ty.bound(value)?))
        })
        .collect();
    out.sort();
    out
}

fn manifest_file(version: u64, content: Content) -> String {
    match content {
        Content::Data => format!("manifest-{version}-data.avro"),
        Content::PositionDeletes => format!("manifest-{version}-deletes.avro"),
    }
}

fn manifest_list_file(version: u64) -> String {
    format!("snap-{version}.avro")
}

/// The version a file of a publication belongs to (None: not such a file).
pub fn version_of(file: &str) -> Option<u64> {
    let digits = file
        .strip_prefix('v')
        .and_then(|rest| rest.strip_suffix(".metadata.json"))
        .or_else(|| {
            file.strip_prefix("snap-")
                .and_then(|rest| rest.strip_suffix(".avro"))
        })
        .or_else(|| {
            file.strip_prefix("manifest-")
                .and_then(|rest| rest.strip_suffix(".avro"))
                .and_then(|rest| rest.split_once('-'))
                .map(|(digits, _)| digits)
        })?;
    digits.parse().ok()
}

/// Deletes the files of publications older than the newest [`KEPT_VERSIONS`], position delete
/// files of vectors the table no longer has (listed or retired), and stray temporary files.
fn remove_unused(metadata_dir: &Path, manifest: &Manifest) -> Result<(), IcebergError> {
    let entries = std::fs::read_dir(metadata_dir).map_err(|e| IcebergError::io(metadata_dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| IcebergError::io(metadata_dir, e))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    let published: BTreeSet<u64> = names
        .iter()
        .filter(|n| n.ends_with(".metadata.json"))
        .filter_map(|n| version_of(n))
        .collect();
    // A version stopped being current when the next one's metadata file was written: readers
    // that loaded it have had that long to finish.
    let age = |version: u64| {
        std::fs::metadata(metadata_dir.join(metadata_file(version)))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|written| written.elapsed().ok())
    };
    let versions: Vec<u64> = published.iter().copied().collect();
    let mut kept: BTreeSet<u64> = versions.iter().rev().take(KEPT_VERSIONS).copied().collect();
    for pair in versions.windows(2) {
        if age(pair[1]).is_none_or(|replaced| replaced.as_secs() < READER_GRACE_SECONDS) {
            kept.insert(pair[0]);
        }
    }
    let vectors: BTreeSet<String> = manifest
        .parts
        .iter()
        .filter_map(|p| p.deletes.as_ref().map(|d| d.file.clone()))
        .chain(manifest.retired.iter().map(|r| r.file.clone()))
        .map(|file| position_delete_file(&file))
        .collect();
    for name in names {
        let unused = if name.ends_with(".tmp") {
            true
        } else if name.starts_with("deletes-") {
            !vectors.contains(&name)
        } else {
            version_of(&name).is_some_and(|v| !kept.contains(&v))
        };
        if unused {
            let path = metadata_dir.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(IcebergError::io(&path, e)),
            }
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` whole: a temporary file, fsynced, renamed over `path`.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), IcebergError> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    strata_format::manifest::write_durably(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(|e| IcebergError::io(path, e))
}

/// Where a published table's files are, as Iceberg readers open them: `file://` locations under
/// the table directory (the path verbatim: readers do not percent-decode it). Publication writes
/// them and `verify` expects them, so both take them from here.
pub(crate) struct Locations {
    /// The table directory's location (the metadata's `location`).
    pub(crate) table: String,
}

/// A file in a table directory whose table lives elsewhere — a staging directory of a table on
/// object storage (ADR 0022) — holding the table's URL (`s3://bucket/prefix/TABLE`).
pub const LOCATION_FILE: &str = ".location";

impl Locations {
    /// The locations of the table in `table_dir` (canonical): its `.location` when it has one,
    /// else the directory itself.
    pub(crate) fn of(table_dir: &Path) -> Result<Locations, IcebergError> {
        let recorded = table_dir.join(LOCATION_FILE);
        match std::fs::read_to_string(&recorded) {
            Ok(url) => {
                return Ok(Locations {
                    table: url.trim().trim_end_matches('/').to_owned(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(IcebergError::io(&recorded, e)),
        }
        let text = table_dir.to_str().ok_or_else(|| IcebergError::Location {
            path: table_dir.to_owned(),
            message: "the path is not UTF-8".into(),
        })?;
        Ok(Locations {
            table: format!("file://{}", text.trim_end_matches('/')),
        })
    }

    /// A part (or any file of `parts/`).
    pub(crate) fn part(&self, file: &str) -> String {
        format!(
            "{}/{}/{file}",
            self.table,
            strata_format::manifest::PARTS_DIR
        )
    }

    /// A file of `metadata/`.
    pub(crate) fn metadata(&self, name: &str) -> String {
        format!("{}/{METADATA_DIR}/{name}", self.table)
    }

    /// Where the file at `location` is in `table_dir` (a location of this table), or in the
    /// local file system (a `file://` location).
    pub(crate) fn local_path(&self, table_dir: &Path, location: &str) -> Option<PathBuf> {
        if let Some(rest) = location.strip_prefix(&format!("{}/", self.table)) {
            return Some(table_dir.join(rest));
        }
        location.strip_prefix("file://").map(PathBuf::from)
    }
}

fn to_json(context: &Path, value: &impl serde::Serialize) -> Result<String, IcebergError> {
    serde_json::to_string(value).map_err(|e| IcebergError::Io {
        path: context.to_owned(),
        source: e.into(),
    })
}

/// A random (version 4) UUID, as a new table's `table-uuid` (seeded from the clock and the
/// process: it tells tables apart, it guards no secret).
fn random_uuid() -> String {
    use rand::{Rng, SeedableRng};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(nanos ^ u64::from(std::process::id()) << 32);
    let mut bytes: [u8; 16] = rng.random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
