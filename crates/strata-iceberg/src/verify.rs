//! Checks a table's Iceberg publication against the manifest it should describe: what
//! `strata check` reports. A publication that failed is only a warning when it happens (the
//! commit stands), so this is where an operator finds a stale or damaged one.
//!
//! The publication is right when the version hint names the manifest's version, the metadata
//! sits at the table's current location, and its snapshot lists exactly the table's parts (data
//! files) and deletion vectors (position delete files), every listed file present with the size
//! listed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use apache_avro::Reader;
use apache_avro::types::Value as AvroValue;
use strata_format::Manifest;

use crate::metadata::TableMetadata;
use crate::position_deletes::position_delete_file;
use crate::{Locations, METADATA_DIR};

/// What is wrong with the publication of the table in `table_dir` (empty: nothing).
pub fn problems(table_dir: &Path, manifest: &Manifest) -> Vec<String> {
    let metadata_dir = table_dir.join(METADATA_DIR);
    if !manifest.settings.iceberg {
        return if metadata_dir.exists() {
            vec![format!(
                "{} exists but the table is not published as Iceberg (the next commit removes it)",
                metadata_dir.display()
            )]
        } else {
            Vec::new()
        };
    }
    let problems = match check(table_dir, &metadata_dir, manifest) {
        Ok(problems) => problems,
        Err(problem) => vec![problem],
    };
    problems
        .into_iter()
        .map(|p| format!("Iceberg publication: {p}"))
        .collect()
}

fn check(
    table_dir: &Path,
    metadata_dir: &Path,
    manifest: &Manifest,
) -> Result<Vec<String>, String> {
    let stale = "(the next commit publishes the table again)";
    let metadata = TableMetadata::load_current(metadata_dir)
        .map_err(|e| format!("Iceberg metadata: {e}"))?
        .ok_or_else(|| {
            format!(
                "the table is published as Iceberg but {} has no version hint {stale}",
                metadata_dir.display()
            )
        })?;
    let table_dir =
        std::fs::canonicalize(table_dir).map_err(|e| format!("{}: {e}", table_dir.display()))?;
    let locations = Locations::of(&table_dir).map_err(|e| e.to_string())?;
    let location = &locations.table;
    let mut problems = Vec::new();
    let expected_version = i64::try_from(manifest.version.max(1)).unwrap_or(i64::MAX);
    if metadata.current_snapshot_id != expected_version {
        problems.push(format!(
            "the Iceberg metadata describes version {}, the table is at version {} {stale}",
            metadata.current_snapshot_id, manifest.version
        ));
    }
    if metadata.location != *location {
        problems.push(format!(
            "the Iceberg metadata is published at {}, the table is at {location} {stale}",
            metadata.location
        ));
        return Ok(problems);
    }
    let snapshot = metadata
        .snapshots
        .iter()
        .find(|s| s.snapshot_id == metadata.current_snapshot_id)
        .ok_or("the Iceberg metadata has no current snapshot")?;
    let mut data_files = BTreeSet::new();
    let mut delete_files = BTreeSet::new();
    for entry in avro_records(&local_path(
        &locations,
        &table_dir,
        &snapshot.manifest_list,
    )?)? {
        let manifest_path = local_path(
            &locations,
            &table_dir,
            &string_field(&entry, "manifest_path")?,
        )?;
        let listed = long_field(&entry, "manifest_length")?;
        check_size(&manifest_path, listed, &mut problems);
        let files = match avro_records(&manifest_path) {
            Ok(files) => files,
            // Missing or damaged: reported (the size above, or this), and the rest checked.
            Err(e) => {
                if manifest_path.exists() {
                    problems.push(e);
                }
                continue;
            }
        };
        for file in files {
            let data_file = field(&file, "data_file")?;
            let path = string_field(data_file, "file_path")?;
            check_size(
                &local_path(&locations, &table_dir, &path)?,
                long_field(data_file, "file_size_in_bytes")?,
                &mut problems,
            );
            match long_field(data_file, "content")? {
                0 => data_files.insert(path),
                _ => delete_files.insert(path),
            };
        }
    }
    let expected_data: BTreeSet<String> = manifest
        .parts
        .iter()
        .map(|p| locations.part(&p.file))
        .collect();
    let expected_deletes: BTreeSet<String> = manifest
        .parts
        .iter()
        .filter_map(|p| p.deletes.as_ref())
        .map(|d| locations.metadata(&position_delete_file(&d.file)))
        .collect();
    for (what, listed, expected) in [
        ("data files", &data_files, &expected_data),
        ("position delete files", &delete_files, &expected_deletes),
    ] {
        if listed != expected {
            problems.push(format!(
                "the Iceberg snapshot lists {} {what}, the table has {} ({} missing, {} extra) {stale}",
                listed.len(),
                expected.len(),
                expected.difference(listed).count(),
                listed.difference(expected).count()
            ));
        }
    }
    Ok(problems)
}

fn check_size(path: &Path, listed: i64, problems: &mut Vec<String>) {
    match std::fs::metadata(path) {
        Ok(meta) if i64::try_from(meta.len()).ok() == Some(listed) => {}
        Ok(meta) => problems.push(format!(
            "{}: {} bytes, the Iceberg metadata lists {listed}",
            path.display(),
            meta.len()
        )),
        Err(e) => problems.push(format!(
            "{}: {e} (listed by the Iceberg metadata)",
            path.display()
        )),
    }
}

fn local_path(locations: &Locations, table_dir: &Path, location: &str) -> Result<PathBuf, String> {
    locations
        .local_path(table_dir, location)
        .ok_or_else(|| format!("{location} is neither the table's nor a local location"))
}

fn avro_records(path: &Path) -> Result<Vec<AvroValue>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = Reader::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
    reader
        .map(|r| r.map_err(|e| format!("{}: {e}", path.display())))
        .collect()
}

fn field<'a>(record: &'a AvroValue, name: &str) -> Result<&'a AvroValue, String> {
    let AvroValue::Record(fields) = record else {
        return Err(format!(
            "an Iceberg Avro record is not a record: {record:?}"
        ));
    };
    let value = fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or_else(|| format!("an Iceberg Avro record has no {name}"))?;
    Ok(match value {
        AvroValue::Union(_, inner) => inner,
        other => other,
    })
}

fn string_field(record: &AvroValue, name: &str) -> Result<String, String> {
    match field(record, name)? {
        AvroValue::String(s) => Ok(s.clone()),
        other => Err(format!("{name} is not a string: {other:?}")),
    }
}

fn long_field(record: &AvroValue, name: &str) -> Result<i64, String> {
    match field(record, name)? {
        AvroValue::Long(v) => Ok(*v),
        AvroValue::Int(v) => Ok(i64::from(*v)),
        other => Err(format!("{name} is not a number: {other:?}")),
    }
}
