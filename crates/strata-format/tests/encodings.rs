//! Column encodings of written parts: delta encodings for columns with enough values per row
//! group, Parquet's defaults (dictionary, plain) for sparse ones, whose delta encoders would each
//! reserve a megabyte per row group for a few values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use std::collections::BTreeMap;

use parquet::basic::Encoding;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::json;
use strata_format::{MIN_DELTA_VALUES_PER_ROW_GROUP, sparse_columns};

#[test]
fn sparse_columns_average_few_values_per_row_group() {
    assert_eq!(MIN_DELTA_VALUES_PER_ROW_GROUP, 4_096);
    let counts = [("dense", 100_000u64), ("edge", 4_096), ("rare", 4_095)];
    // One row group of 100k rows: the threshold applies to the counts as they are.
    assert_eq!(
        sparse_columns(counts, 100_000),
        ["rare".to_owned()].into_iter().collect()
    );
    // 1M rows make 8 row groups of 128k: 4,096 values per row group need 31,250 in total.
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

    let file = std::fs::File::open(dir.path().join("parts/part.parquet")).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let mut encodings: BTreeMap<String, Vec<Encoding>> = BTreeMap::new();
    for column in reader.metadata().row_group(0).columns() {
        encodings.insert(column.column_path().string(), column.encodings().collect());
    }
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
