//! Column encodings of written parts: delta encodings for columns with enough values per row
//! group, Parquet's defaults (dictionary, plain) for sparse ones, whose delta encoders would each
//! reserve a megabyte per row group for a few values; column profiles in the footer, and a
//! dictionary over whole row groups where a merge asks for one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use std::collections::BTreeMap;

use parquet::basic::Encoding;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::{Value, json};
use strata_format::{
    ColumnHints, MIN_DELTA_VALUES_PER_ROW_GROUP, PartSchema, PartWriter, PartWriterOptions,
    footer_columns, sparse_columns,
};

#[test]
fn sparse_columns_average_few_values_per_row_group() {
    assert_eq!(MIN_DELTA_VALUES_PER_ROW_GROUP, 4_096);
    let counts = [("dense", 100_000u64), ("edge", 4_096), ("rare", 4_095)];
    // One row group of 100k rows: the threshold applies to the counts as they are.
    assert_eq!(
        sparse_columns(counts, 100_000),
        ["rare".to_owned()].into_iter().collect()
    );
    // The rule is a density: 4,096 values per 128Ki rows, 31,250 of 1M rows.
    let counts = [("a", 31_250u64), ("b", 31_249)];
    assert_eq!(
        sparse_columns(counts, 1_000_000),
        ["b".to_owned()].into_iter().collect()
    );
}

#[test]
fn dense_columns_use_delta_encodings_and_sparse_ones_do_not() {
    let rows = 20_000;
    let docs: Vec<_> = (0..rows)
        .map(|i| {
            let mut doc = json!({"n": i, "s": format!("user-{:08}", i * 7919 % rows)});
            if i % 1000 == 0 {
                doc["rare_n"] = json!(i);
                doc["rare_s"] = json!(format!("rare-{i}"));
            }
            doc
        })
        .collect();
    let (dir, entry) = common::write_docs(&docs, &[]);
    assert_eq!(entry.rows, rows);

    let encodings = column_encodings(&dir.path().join("parts/part.parquet"));
    let has = |column: &str, encoding: Encoding| encodings[column].contains(&encoding);
    assert!(has("n", Encoding::DELTA_BINARY_PACKED), "{encodings:?}");
    assert!(has("s", Encoding::DELTA_BYTE_ARRAY), "{encodings:?}");
    for sparse in ["rare_n", "rare_s"] {
        assert!(
            !has(sparse, Encoding::DELTA_BINARY_PACKED) && !has(sparse, Encoding::DELTA_BYTE_ARRAY),
            "{sparse}: {encodings:?}"
        );
    }
}

/// Encodings per column over all row groups.
fn column_encodings(path: &std::path::Path) -> BTreeMap<String, Vec<Encoding>> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut encodings: BTreeMap<String, Vec<Encoding>> = BTreeMap::new();
    for group in reader.metadata().row_groups() {
        for column in group.columns() {
            encodings
                .entry(column.column_path().string())
                .or_default()
                .extend(column.encodings());
        }
    }
    encodings
}

fn compressed_bytes(path: &std::path::Path, name: &str) -> u64 {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader
        .metadata()
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .filter(|c| c.column_path().string() == name)
        .map(|c| c.compressed_size() as u64)
        .sum()
}

/// `ref` repeats 3,000 hashes (130 KB of distinct text, twice a small dictionary page), `k` is
/// the sort key, `n` an integer, `rare` sparse.
fn referencing_docs(rows: u64) -> Vec<Value> {
    (0..rows)
        .map(|i| {
            let mut doc = json!({"k": format!("k{}", i % 10), "ref": common::hash_text(i * 7 % 3_000), "n": i});
            if i % 1000 == 0 {
                doc["rare"] = json!(format!("rare-{i}"));
            }
            doc
        })
        .collect()
}

#[test]
fn dense_string_and_integer_columns_outside_the_sort_key_are_profiled() {
    let rows = 20_000;
    let (dir, entry) = common::write_docs(&referencing_docs(rows), &["k".to_owned()]);
    let path = dir.path().join("parts/part.parquet");
    let footer = footer_columns(&path, &entry).unwrap();
    assert_eq!(
        footer.profiles.keys().collect::<Vec<_>>(),
        ["n", "ref"],
        "the sort key and sparse columns have no profile"
    );
    // Unique integers: a dictionary would not pay.
    let integers = &footer.profiles["n"];
    assert_eq!(integers.values, rows);
    assert!((integers.distinct.estimate() - rows as f64).abs() < 1_000.0);
    assert!(!integers.pays_for_dictionary(rows, rows));
    let profile = &footer.profiles["ref"];
    assert_eq!(profile.values, rows);
    assert_eq!(profile.plain_bytes, compressed_bytes(&path, "ref"));
    let distinct = profile.distinct.estimate();
    assert!((distinct - 3_000.0).abs() < 150.0, "{distinct}");
    assert!(profile.pays_for_dictionary(rows, rows));
    assert_eq!(footer.value_counts["rare"], 20);
    // Written without a hint, the column leaves its small dictionary for delta encoding.
    assert!(column_encodings(&path)["ref"].contains(&Encoding::DELTA_BYTE_ARRAY));
}

#[test]
fn a_dictionary_hint_keeps_whole_row_groups_in_the_dictionary() {
    let rows = 20_000;
    let sort_key = ["k".to_owned()];
    let shredded = common::shred(&referencing_docs(rows), &sort_key);
    let dir = tempfile::tempdir().unwrap();
    let hints = ColumnHints {
        dictionary: BTreeMap::from([("ref".to_owned(), 123_456)]),
        ..Default::default()
    };
    let layout = PartSchema {
        schema: shredded.batch.schema(),
        columns: shredded.columns.clone(),
        remainder_paths: shredded.remainder_paths.clone(),
        remainder_paths_truncated: shredded.remainder_paths_truncated,
    };
    let options = PartWriterOptions::default();
    let mut writer = PartWriter::create(
        dir.path(),
        "part.parquet",
        layout,
        &sort_key,
        &hints,
        &options,
    )
    .unwrap();
    writer.write(&shredded.batch).unwrap();
    let entry = writer.finish().unwrap();
    assert_eq!(entry.rows, rows);

    let path = dir.path().join("parts/part.parquet");
    let encodings = &column_encodings(&path)["ref"];
    assert!(
        encodings.contains(&Encoding::RLE_DICTIONARY),
        "{encodings:?}"
    );
    assert!(
        !encodings.contains(&Encoding::DELTA_BYTE_ARRAY),
        "{encodings:?}"
    );
    // The plain bytes of a dictionary column are carried over, not measured.
    assert_eq!(
        footer_columns(&path, &entry).unwrap().profiles["ref"].plain_bytes,
        123_456
    );
}

/// The compression codec of every column chunk of the part at `path`, by column path.
fn column_codecs(path: &std::path::Path) -> BTreeMap<String, parquet::basic::Compression> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut codecs = BTreeMap::new();
    for group in reader.metadata().row_groups() {
        for column in group.columns() {
            codecs.insert(column.column_path().string(), column.compression());
        }
    }
    codecs
}

#[test]
fn a_part_of_a_few_rows_is_not_compressed_and_a_larger_one_is() {
    use parquet::basic::Compression;
    let doc = |i: usize| json!({"id": i, "s": format!("user-{i:08}"), "nested": {"x": [i]}});
    let few: Vec<_> = (0..strata_format::SMALL_PART_ROWS).map(doc).collect();
    let (dir, _) = common::write_docs(&few, &[]);
    let codecs = column_codecs(&dir.path().join("parts/part.parquet"));
    assert!(
        codecs.values().all(|c| *c == Compression::UNCOMPRESSED),
        "{codecs:?}"
    );
    let more: Vec<_> = (0..=strata_format::SMALL_PART_ROWS).map(doc).collect();
    let (dir, _) = common::write_docs(&more, &[]);
    let codecs = column_codecs(&dir.path().join("parts/part.parquet"));
    assert!(matches!(codecs["s"], Compression::ZSTD(_)), "{codecs:?}");
}
