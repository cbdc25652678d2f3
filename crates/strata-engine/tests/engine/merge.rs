//! Sorted merges of parts typed differently: every document comes back, the output is sorted,
//! typed by the shredder's rule, and its key runs equal those of one ingest of all documents.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::record_batch::RecordBatch;
use proptest::prelude::*;
use serde_json::{Value, json};
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, MergeOptions, export_table, ingest, merge_parts};
use strata_format::{Manifest, read_part_batches};
use strata_json::kind::value_kind;
use strata_json::reconstruct::parse_stored;
use strata_json::{Kind, REMAINDER_COLUMN, run_with_deep_stack};

fn write_ndjson(dir: &Path, name: &str, docs: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let text: String = docs.iter().map(|d| format!("{d}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn load(dir: &DataDir, table: &str, file: PathBuf, options: &IngestOptions) {
    let (dir, table, options) = (dir.clone(), table.to_owned(), options.clone());
    run_with_deep_stack(move || {
        let summary = ingest(
            &dir,
            &table,
            &[Input::File(file)],
            &options,
            &mut |_| {},
            &mut |r| panic!("unexpected reject: {r:?}"),
        )
        .unwrap();
        assert_eq!(summary.progress.rejected, 0);
    });
}

fn export_sorted(dir: &DataDir, table: &str) -> Vec<String> {
    let (dir, table) = (dir.clone(), table.to_owned());
    run_with_deep_stack(move || {
        let mut out = Vec::new();
        export_table(&dir, &table, &mut out).unwrap();
        let mut docs: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
            .collect();
        docs.sort();
        docs
    })
}

fn options(sort_key: &[&str], max_columns: Option<usize>) -> IngestOptions {
    IngestOptions {
        sort_key: Some(sort_key.iter().map(|s| s.to_string()).collect()),
        max_columns,
        auto_merge: false,
        ..Default::default()
    }
}

/// Ingests each group of documents as its own part, merges everything, and checks the result.
fn ingest_and_merge(
    groups: &[Vec<Value>],
    sort_key: &[&str],
    max_columns: Option<usize>,
) -> (tempfile::TempDir, DataDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let opts = options(sort_key, max_columns);
    for (i, docs) in groups.iter().enumerate() {
        let file = write_ndjson(tmp.path(), &format!("in{i}.ndjson"), docs);
        load(&dir, "t", file, &opts);
    }
    let before = export_sorted(&dir, "t");
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let non_empty = groups.iter().filter(|g| !g.is_empty()).count();
    if non_empty >= 2 {
        assert!(summary.inputs_merged >= non_empty, "{summary:?}");
        assert_eq!(summary.parts_after, 1);
    }
    assert_eq!(export_sorted(&dir, "t"), before, "merge changed documents");
    (tmp, dir)
}

fn only_part(dir: &DataDir, tmp: &Path) -> (strata_format::PartEntry, Vec<RecordBatch>) {
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    let part = (*manifest.parts[0]).clone();
    let batches =
        read_part_batches(&Manifest::part_path(&tmp.join("data/t"), &part.file), &part).unwrap();
    (part, batches)
}

/// No remainder entry holds a value of its path's typed-column kind (the shredder's rule).
fn assert_remainder_holds_no_typed_value(part: &strata_format::PartEntry, batches: &[RecordBatch]) {
    for batch in batches {
        let map = batch
            .column_by_name(REMAINDER_COLUMN)
            .unwrap()
            .as_map()
            .clone();
        let keys = map.keys().as_string::<i32>();
        let values = map.values().as_string::<i32>();
        for i in 0..keys.len() {
            let key = keys.value(i);
            let value = parse_stored(values.value(i), key).unwrap();
            let kind = value_kind(&value);
            assert_ne!(
                part.columns.get(key),
                Some(&kind),
                "remainder holds a {kind} of typed column {key}"
            );
            assert!(
                part.remainder_paths
                    .get(key)
                    .is_some_and(|k| k.contains(&kind)),
                "remainder_paths misses {key} ({kind})"
            );
        }
    }
}

#[test]
fn conflicting_types_are_chosen_again_over_all_inputs() {
    // Part 1 types `x` as int (3 values), part 2 as string (4 values): the merged part types it
    // as string and moves the ints to the remainder; `y` only ever in part 2's remainder as an
    // int (its string is dominant there) becomes int-typed when part 3 adds more ints.
    let part1 = vec![
        json!({"k": "a", "x": 1, "n": 1.5}),
        json!({"k": "c", "x": 2}),
        json!({"k": "e", "x": 3, "z": null}),
    ];
    let part2 = vec![
        json!({"k": "b", "x": "one", "y": "s"}),
        json!({"k": "d", "x": "two", "y": "t"}),
        json!({"k": "f", "x": "three", "y": 7}),
        json!({"k": "g", "x": "four", "y": {"deep": [1, {"a": 2}]}}),
    ];
    let part3 = vec![
        json!({"k": "a", "y": 8}),
        json!({"k": "h", "y": 9}),
        json!({"k": "i", "y": 10, "x": 18446744073709551616u128.to_string()}),
    ];
    let (tmp, dir) = ingest_and_merge(&[part1, part2, part3], &["k"], None);
    let (part, batches) = only_part(&dir, tmp.path());
    assert_eq!(part.columns["x"], Kind::String);
    assert_eq!(part.columns["y"], Kind::Int);
    assert_eq!(part.rows, 10);
    assert_eq!(
        part.remainder_paths["x"].iter().collect::<Vec<_>>(),
        [&Kind::Int]
    );
    assert_remainder_holds_no_typed_value(&part, &batches);
    let keys: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let k = b.column_by_name("k").unwrap().as_string::<i32>().clone();
            (0..k.len()).map(move |i| k.value(i).to_owned())
        })
        .collect();
    assert_eq!(keys, ["a", "a", "b", "c", "d", "e", "f", "g", "h", "i"]);
}

#[test]
fn the_column_limit_holds_across_inputs() {
    let part1: Vec<Value> = (0..5).map(|i| json!({"k": i, "a": i, "b": i})).collect();
    let part2: Vec<Value> = (5..12).map(|i| json!({"k": i, "c": i, "d": "x"})).collect();
    let (tmp, dir) = ingest_and_merge(&[part1, part2], &["k"], Some(3));
    let (part, batches) = only_part(&dir, tmp.path());
    // k (sort key) first, then the two paths with most values: c and d (7 each).
    assert_eq!(
        part.columns.keys().collect::<Vec<_>>(),
        ["c", "d", "k"],
        "{:?}",
        part.columns
    );
    assert!(part.remainder_paths.contains_key("a"));
    assert!(part.remainder_paths.contains_key("b"));
    assert_remainder_holds_no_typed_value(&part, &batches);
}

#[test]
fn sort_key_typed_differently_falls_back_to_reshredding() {
    let part1 = vec![json!({"k": 1, "v": "a"}), json!({"k": 2, "v": "b"})];
    let part2 = vec![json!({"k": "x", "v": "c"}), json!({"k": "y", "v": "d"})];
    let (tmp, dir) = ingest_and_merge(&[part1, part2], &["k"], None);
    let (part, _) = only_part(&dir, tmp.path());
    assert_eq!(part.rows, 4);
}

#[test]
fn merged_key_runs_equal_those_of_one_ingest() {
    let docs: Vec<Value> = (0..3000)
        .map(|i| {
            let kind = ["commit", "identity"][(i % 7 == 0) as usize];
            let op = ["create", "delete", "update"][i % 3];
            json!({
                "kind": kind,
                "op": op,
                "user": format!("u{}", i % 97),
                "t": 1_000_000 + i,
            })
        })
        .collect();
    let sort_key = ["kind", "op", "user", "t"];
    let chunks: Vec<Vec<Value>> = docs.chunks(700).map(|c| c.to_vec()).collect();
    let (tmp, dir) = ingest_and_merge(&chunks, &sort_key, None);
    let (merged, _) = only_part(&dir, tmp.path());

    let single_tmp = tempfile::tempdir().unwrap();
    let single = DataDir::new(single_tmp.path());
    let file = write_ndjson(single_tmp.path(), "all.ndjson", &docs);
    load(&single, "t", file, &options(&sort_key, None));
    let reference = single.manifest("t").unwrap().parts[0].clone();
    assert!(reference.key_runs.is_some());
    assert_eq!(merged.key_runs, reference.key_runs);
    assert_eq!(merged.sort_key_min, reference.sort_key_min);
    assert_eq!(merged.sort_key_max, reference.sort_key_max);
    assert_eq!(merged.columns, reference.columns);
}

#[test]
fn optimize_merges_in_rounds_until_one_part_remains() {
    // More parts than one merge takes: a first round makes two parts, a second one.
    let groups: Vec<Vec<Value>> = (0..strata_engine::merge::MAX_MERGE_INPUTS as i64 + 8)
        .map(|p| {
            (0..20)
                .map(|i| json!({"g": i % 5, "i": p * 100 + i, "s": format!("value {i}")}))
                .collect()
        })
        .collect();
    let (tmp, dir) = ingest_and_merge(&groups, &["g", "i"], None);
    let (part, batches) = only_part(&dir, tmp.path());
    assert_eq!(part.rows, 20 * groups.len() as u64);
    let mut previous: Option<(i64, i64)> = None;
    for batch in &batches {
        let g = batch
            .column_by_name("g")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int64Type>();
        let i = batch
            .column_by_name("i")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int64Type>();
        for row in 0..batch.num_rows() {
            let key = (g.value(row), i.value(row));
            assert!(
                previous.is_none_or(|p| p <= key),
                "{previous:?} then {key:?}"
            );
            previous = Some(key);
        }
    }
}

/// Encodings of a part's column over all its row groups.
fn encodings_of(path: &Path, column: &str) -> Vec<parquet::basic::Encoding> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader
        .metadata()
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .filter(|c| c.column_path().string() == column)
        .flat_map(|c| c.encodings().collect::<Vec<_>>())
        .collect()
}

/// Table `t` sorted by `k` with one part per group of documents: its data directory (kept by the
/// returned temporary directory) and its table directory.
fn table_of_parts(groups: &[Vec<Value>]) -> (tempfile::TempDir, DataDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    for (i, docs) in groups.iter().enumerate() {
        let file = write_ndjson(tmp.path(), &format!("in{i}.ndjson"), docs);
        load(&dir, "t", file, &options(&["k"], None));
    }
    let table_dir = tmp.path().join("data/t");
    (tmp, dir, table_dir)
}

#[test]
fn merges_give_repeated_references_a_row_group_dictionary_and_unique_ids_none() {
    use parquet::basic::Encoding;
    // Splitmix: hexadecimal hashes that compress no better than random ones.
    let hash = |n: u64| {
        let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        format!("{:016x}", z ^ (z >> 31))
    };
    // Each input: 12,000 references to 10,000 posts, whose 160 KB of distinct text overflows a
    // default dictionary page; together, 24,000 references to the same 10,000, for which a
    // dictionary pays. Ids are unique throughout.
    let groups: Vec<Vec<Value>> = (0..2u64)
        .map(|p| {
            (0..12_000u64)
                .map(|i| {
                    let n = p * 12_000 + i;
                    json!({"k": n % 7, "ref": hash(n * 7 % 10_000), "id": hash(1 << 40 | n)})
                })
                .collect()
        })
        .collect();
    let (_tmp, dir, table_dir) = table_of_parts(&groups);
    let entries = dir.manifest("t").unwrap().parts;
    let inputs: Vec<PathBuf> = entries
        .iter()
        .map(|p| Manifest::part_path(&table_dir, &p.file))
        .collect();
    assert_eq!(inputs.len(), 2, "one part per input");
    let plain_bytes: u64 = inputs
        .iter()
        .zip(&entries)
        .map(|(p, e)| strata_format::footer_columns(p, e).unwrap().profiles["ref"].plain_bytes)
        .sum();
    for input in &inputs {
        assert!(encodings_of(input, "ref").contains(&Encoding::DELTA_BYTE_ARRAY));
    }
    let before = export_sorted(&dir, "t");

    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    let output = Manifest::part_path(&table_dir, &manifest.parts[0].file);
    let refs = encodings_of(&output, "ref");
    assert!(refs.contains(&Encoding::RLE_DICTIONARY), "{refs:?}");
    assert!(!refs.contains(&Encoding::DELTA_BYTE_ARRAY), "{refs:?}");
    assert!(encodings_of(&output, "id").contains(&Encoding::DELTA_BYTE_ARRAY));
    let profiles = strata_format::footer_columns(&output, &manifest.parts[0])
        .unwrap()
        .profiles;
    assert_eq!(profiles["ref"].plain_bytes, plain_bytes);
    assert_eq!(profiles["ref"].values, 24_000);
    assert_eq!(export_sorted(&dir, "t"), before, "merge changed documents");
}

#[test]
fn merges_give_integers_of_few_values_a_dictionary_and_keep_deltas_for_the_rest() {
    use parquet::basic::{Compression, Encoding};
    // `status` takes six values in no order (an access log's); `n` counts up, unique.
    let statuses = [200, 200, 200, 304, 404, 200, 500, 301, 200, 200, 302];
    let groups: Vec<Vec<Value>> = (0..2u64)
        .map(|p| {
            (0..6_000u64)
                .map(|i| {
                    let n = p * 6_000 + i;
                    let status = statuses[(n * 7919 % 11) as usize];
                    json!({"k": n % 5, "status": status, "n": n * 3})
                })
                .collect()
        })
        .collect();
    let (_tmp, dir, table_dir) = table_of_parts(&groups);
    let inputs = dir.manifest("t").unwrap().parts;
    for entry in &inputs {
        let input = Manifest::part_path(&table_dir, &entry.file);
        assert!(!encodings_of(&input, "status").contains(&Encoding::RLE_DICTIONARY));
        let profiles = strata_format::footer_columns(&input, entry)
            .unwrap()
            .profiles;
        assert_eq!(profiles["status"].values, 6_000);
        assert!(profiles["n"].distinct.estimate() > 5_000.0);
    }
    let before = export_sorted(&dir, "t");

    merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    let output = Manifest::part_path(&table_dir, &manifest.parts[0].file);
    let status = encodings_of(&output, "status");
    assert!(status.contains(&Encoding::RLE_DICTIONARY), "{status:?}");
    assert!(
        !status.contains(&Encoding::DELTA_BINARY_PACKED),
        "{status:?}"
    );
    assert!(encodings_of(&output, "n").contains(&Encoding::DELTA_BINARY_PACKED));
    let compression = |column: &str| {
        let reader =
            parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&output).unwrap())
                .unwrap();
        use parquet::file::reader::FileReader;
        let metadata = reader.metadata();
        metadata.row_groups()[0]
            .columns()
            .iter()
            .find(|c| c.column_path().string() == column)
            .unwrap()
            .compression()
    };
    assert!(matches!(compression("status"), Compression::ZSTD(_)));
    assert_eq!(compression("n"), Compression::UNCOMPRESSED);
    assert_eq!(export_sorted(&dir, "t"), before, "merge changed documents");
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-c]{0,3}".prop_map(Value::String),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "x", null])),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    let key = prop_oneof![Just("k"), Just("a"), Just("b"), Just("c")];
    (
        0u8..4,
        proptest::collection::btree_map(key, leaf(), 0..4),
        proptest::option::of(leaf()),
    )
        .prop_map(|(k, fields, nested)| {
            let mut map: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect();
            map.insert("k".into(), json!(k));
            if let Some(v) = nested {
                map.insert("n".into(), json!({"v": v}));
            }
            Value::Object(map)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any documents, split into parts any way, with any column limit, survive a merge.
    #[test]
    fn merges_keep_every_value(
        groups in proptest::collection::vec(proptest::collection::vec(document(), 0..12), 1..5),
        max_columns in prop_oneof![Just(None), (1usize..4).prop_map(Some)],
    ) {
        let (tmp, dir) = ingest_and_merge(&groups, &["k"], max_columns);
        let manifest = dir.manifest("t").unwrap();
        for part in &manifest.parts {
            let batches = read_part_batches(
                &Manifest::part_path(&tmp.path().join("data/t"), &part.file),
                part,
            )
            .unwrap();
            assert_remainder_holds_no_typed_value(part, &batches);
            let counts: BTreeMap<_, _> = part.columns.iter().collect();
            prop_assert!(counts.len() <= max_columns.unwrap_or(usize::MAX));
        }
    }
}
