//! Secondary index files (`parts/<part>.<index>.index`, ADR 0024): for each index a table declares
//! (`TableSettings::indexes`, from `CREATE INDEX`) and each part whose values at the index's path
//! can all be listed, the pairs `(value, row)` of the part's rows holding a value there, sorted
//! by value then row. The file has exactly a key file's format (`crate::keys`: Parquet, columns
//! `key` and `row`, data pages of 1,024 rows with a page index, a checksum file beside it), so a
//! lookup of one value reads one page of it, through the same cache.
//!
//! Invariant: a part has an index file only when every value of the index's path in the part is
//! in the path's typed column and that column holds strings or integers (values of other kinds —
//! floats, booleans, objects — and paths in the remainder leave the part without one; JSON
//! `null`, which equals nothing, may be in the remainder). So the rows an index file lists for a
//! value are exactly the part's rows holding that value, and a part without an index file is
//! read whole, as without the index.

use std::collections::BTreeSet;
use std::path::Path;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::datatypes::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};
use strata_json::{KeyType, Kind};

use crate::error::FormatError;
use crate::keys::{PartKeys, check_sorted_file, write_sorted_file};
use crate::manifest::{Manifest, PartEntry};
use crate::part::PartSchema;

/// Suffix of secondary index files; not `.parquet`, so that readers of `parts/*.parquet` see only
/// the parts.
pub const INDEX_FILE_SUFFIX: &str = ".index";

/// A secondary index a table declares: its name (unique in the data directory, as PostgreSQL's
/// index names are in a schema) and the encoded path it indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSetting {
    pub name: String,
    pub path: String,
}

/// A part's file of one secondary index, as its manifest entry lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartIndex {
    /// The index's name (`IndexSetting::name`).
    pub name: String,
    /// The rows the file lists: the part's rows holding a value at the path.
    pub rows: u64,
    /// The file, its size, hash and smallest and largest value, as a key file's entry says.
    #[serde(flatten)]
    pub file: PartKeys,
}

/// The index file name of index `index` of part `part`.
pub fn index_file(part: &str, index: &str) -> String {
    format!("{part}.{index}{INDEX_FILE_SUFFIX}")
}

/// The part an index file belongs to (None: not an index file's name). Index names hold no
/// `.`, so the part is what precedes the last one.
pub fn index_file_part(file: &str) -> Option<&str> {
    let stem = file.strip_suffix(INDEX_FILE_SUFFIX)?;
    stem.rsplit_once('.').map(|(part, _)| part)
}

/// Whether `name` can name an index: what an unquoted SQL identifier can be (letters, digits
/// and `_`, not starting with a digit), so that it is safe inside a file name.
pub fn valid_index_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

/// Whether a part can index a path (see the module's invariant) whose typed column is of kind
/// `typed` (None: no typed column) and whose values in the remainder are of `remainder` kinds:
/// the column holds strings or integers, and the remainder at most nulls.
pub fn indexable(
    typed: Option<Kind>,
    remainder: Option<&BTreeSet<Kind>>,
    remainder_truncated: bool,
) -> bool {
    matches!(typed, Some(Kind::String | Kind::Int))
        && !remainder_truncated
        && remainder.is_none_or(|kinds| kinds.iter().all(|k| *k == Kind::Null))
}

/// [`indexable`] for a part about to be written.
pub fn layout_indexable(layout: &PartSchema, path: &str) -> bool {
    let typed = layout
        .columns
        .iter()
        .find(|c| c.name == path)
        .map(|c| c.kind);
    indexable(
        typed,
        layout.remainder_paths.get(path),
        layout.remainder_paths_truncated,
    )
}

/// [`indexable`] for a part a manifest lists.
pub fn entry_indexable(entry: &PartEntry, path: &str) -> bool {
    indexable(
        entry.columns.get(path).copied(),
        entry.remainder_paths.get(path),
        entry.remainder_paths_truncated,
    )
}

/// The type of the values a part's index file on `path` holds: that of the path's typed column
/// in the part (string or integer); None when the part has no such column.
pub fn value_type(entry: &PartEntry, path: &str) -> Option<KeyType> {
    match entry.columns.get(path) {
        Some(Kind::String) => Some(KeyType::String),
        Some(Kind::Int) => Some(KeyType::Integer),
        _ => None,
    }
}

/// One array of `slices` (a column written or read batch by batch); errors name `path`.
pub(crate) fn concat_slices(slices: &[ArrayRef], path: &Path) -> Result<ArrayRef, FormatError> {
    let refs: Vec<&dyn Array> = slices.iter().map(|a| a.as_ref()).collect();
    arrow::compute::concat(&refs).map_err(|source| FormatError::Arrow {
        path: path.to_owned(),
        source,
    })
}

/// Builds the index file of `index` for an existing part of the table in `table_dir` (what
/// `CREATE INDEX` does for the parts written before it), reading the part's column at the
/// index's path, verified, deleted rows included (the file lists positions in the part). None
/// when the part cannot index the path ([`entry_indexable`]) or no row has a value there.
pub fn build_part_index(
    table_dir: &Path,
    entry: &PartEntry,
    index: &IndexSetting,
) -> Result<Option<PartIndex>, FormatError> {
    if !entry_indexable(entry, &index.path) {
        return Ok(None);
    }
    let path = Manifest::part_path(table_dir, &entry.file);
    let opened = crate::checksum::open_part(&path, entry)?;
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
        opened.file(&path)?,
        opened.metadata.clone(),
    );
    let Some(root) = builder
        .schema()
        .fields()
        .iter()
        .position(|f| f.name() == &index.path)
    else {
        return Err(FormatError::Damaged {
            path,
            message: format!(
                "its manifest entry lists the column {} it lacks",
                index.path
            ),
        });
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), [root]);
    let parquet_err = |source| FormatError::Parquet {
        path: path.clone(),
        source,
    };
    let reader = builder
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()
        .map_err(parquet_err)?;
    let mut slices = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|source| FormatError::Arrow {
            path: path.clone(),
            source,
        })?;
        slices.push(batch.column(0).clone());
    }
    let column = concat_slices(&slices, &path)?;
    if column.len() as u64 != entry.rows {
        return Err(FormatError::Damaged {
            path,
            message: format!(
                "{} rows read of the {} its manifest entry lists",
                column.len(),
                entry.rows
            ),
        });
    }
    let parts_dir = table_dir.join(crate::manifest::PARTS_DIR);
    write_index_file(&parts_dir, &entry.file, &index.name, &column)
}

/// Writes the index file of index `index` for part `part_file` in `parts_dir` from the part's
/// column at the index's path in row order (`values[i]` is row `i`'s value, null where it has
/// none). None when no row has a value (a lookup finds nothing in the part without a file).
pub fn write_index_file(
    parts_dir: &Path,
    part_file: &str,
    index: &str,
    values: &ArrayRef,
) -> Result<Option<PartIndex>, FormatError> {
    if !matches!(values.data_type(), DataType::Utf8 | DataType::Int64) {
        return Err(FormatError::Damaged {
            path: parts_dir.join(part_file),
            message: format!(
                "its column for index {index} is of type {}",
                values.data_type()
            ),
        });
    }
    if values.len() > u32::MAX as usize {
        return Err(FormatError::Damaged {
            path: parts_dir.join(part_file),
            message: format!("{} rows are too many for an index file", values.len()),
        });
    }
    let listed: Vec<u32> = (0..values.len() as u32)
        .filter(|&row| values.is_valid(row as usize))
        .collect();
    if listed.is_empty() {
        return Ok(None);
    }
    let rows = UInt32Array::from(listed);
    let listed_values = arrow::compute::take(values.as_ref(), &rows, None).map_err(|source| {
        FormatError::Arrow {
            path: parts_dir.join(part_file),
            source,
        }
    })?;
    let count = rows.len() as u64;
    let file = write_sorted_file(
        parts_dir,
        part_file,
        &index_file(part_file, index),
        &listed_values,
        rows,
    )?;
    Ok(Some(PartIndex {
        name: index.to_owned(),
        rows: count,
        file,
    }))
}

/// Everything `strata check` verifies of a part's index file: its whole-file hash, every page
/// against its checksum file, and that it lists distinct rows of the part, sorted by value.
pub fn check_index_file(parts_dir: &Path, part: &PartEntry, index: &PartIndex) -> Vec<String> {
    check_sorted_file(parts_dir, part, &index.file, index.rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::Schema;
    use strata_json::{JsonPath, KeyValue, LayoutColumn};

    use super::*;
    use crate::keys::KeyFile;
    use crate::manifest::PARTS_DIR;

    fn layout(columns: &[(&str, Kind)], remainder: &[(&str, Kind)]) -> PartSchema {
        let mut remainder_paths: BTreeMap<String, BTreeSet<Kind>> = BTreeMap::new();
        for (path, kind) in remainder {
            remainder_paths
                .entry((*path).to_owned())
                .or_default()
                .insert(*kind);
        }
        PartSchema {
            schema: Arc::new(Schema::empty()),
            columns: columns
                .iter()
                .map(|(name, kind)| LayoutColumn {
                    name: (*name).to_owned(),
                    path: JsonPath::decode(name),
                    kind: *kind,
                })
                .collect(),
            remainder_paths,
            remainder_paths_truncated: false,
        }
    }

    #[test]
    fn only_parts_whose_values_are_all_listable_are_indexed() {
        assert!(layout_indexable(
            &layout(&[("user", Kind::String)], &[]),
            "user"
        ));
        assert!(layout_indexable(
            &layout(&[("n", Kind::Int)], &[("n", Kind::Null)]),
            "n"
        ));
        // A float, a string among integers, a path only in the remainder, another kind.
        assert!(!layout_indexable(
            &layout(&[("n", Kind::Int)], &[("n", Kind::Float)]),
            "n"
        ));
        assert!(!layout_indexable(
            &layout(&[("n", Kind::Int)], &[("n", Kind::String)]),
            "n"
        ));
        assert!(!layout_indexable(
            &layout(&[], &[("user", Kind::String)]),
            "user"
        ));
        assert!(!layout_indexable(&layout(&[("ok", Kind::Bool)], &[]), "ok"));
        let mut truncated = layout(&[("user", Kind::String)], &[]);
        truncated.remainder_paths_truncated = true;
        assert!(!layout_indexable(&truncated, "user"));
    }

    #[test]
    fn an_index_file_lists_the_rows_of_each_value_and_skips_rows_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let parts = dir.path().join(PARTS_DIR);
        std::fs::create_dir_all(&parts).unwrap();
        let values: Vec<Option<&str>> = (0..5000)
            .map(|i| (i % 3 != 0).then_some(["a", "b", "c", "d"][i % 4]))
            .collect();
        let column: ArrayRef = Arc::new(StringArray::from(values.clone()));
        let index = write_index_file(&parts, "p.parquet", "by_user", &column)
            .unwrap()
            .unwrap();
        assert_eq!(index.file.file, "p.parquet.by_user.index");
        assert_eq!(index_file_part(&index.file.file), Some("p.parquet"));
        assert_eq!(index_file_part("p.parquet.keys"), None);
        let listed = values.iter().filter(|v| v.is_some()).count() as u64;
        assert_eq!(index.rows, listed);
        let file = KeyFile::open_listing(dir.path(), &index.file, 5000, index.rows).unwrap();
        let key = KeyValue::String("b".into());
        let mut found = Vec::new();
        for page in file.pages_of(&key) {
            found.extend(file.read_page(page).unwrap().rows_of(&key));
        }
        let expected: Vec<u64> = (0..5000u64)
            .filter(|&i| values[i as usize] == Some("b"))
            .collect();
        assert_eq!(found, expected);

        let entry = crate::manifest::PartEntry {
            rows: 5000,
            ..test_entry()
        };
        assert_eq!(
            check_index_file(&parts, &entry, &index),
            Vec::<String>::new()
        );
        // Claiming every row of the part is caught.
        let wrong = PartIndex {
            rows: 5000,
            ..index.clone()
        };
        assert!(!check_index_file(&parts, &entry, &wrong).is_empty());
    }

    #[test]
    fn no_file_for_a_part_without_values_and_none_for_other_types() {
        let dir = tempfile::tempdir().unwrap();
        let nulls: ArrayRef = Arc::new(Int64Array::from(vec![None, None]));
        assert!(
            write_index_file(dir.path(), "p.parquet", "i", &nulls)
                .unwrap()
                .is_none()
        );
        let floats: ArrayRef = Arc::new(arrow::array::Float64Array::from(vec![1.5]));
        assert!(write_index_file(dir.path(), "p.parquet", "i", &floats).is_err());
        assert!(valid_index_name("by_user_2"));
        assert!(!valid_index_name("2x"));
        assert!(!valid_index_name("a/b"));
        assert!(!valid_index_name(""));
    }

    fn test_entry() -> crate::manifest::PartEntry {
        serde_json::from_str(
            r#"{"file":"p.parquet","rows":0,"bytes":0,"columns":{},"remainder_paths":{},
                "remainder_paths_truncated":false,"sort_key_min":{},"sort_key_max":{}}"#,
        )
        .unwrap()
    }
}
