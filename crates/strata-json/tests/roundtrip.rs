//! Property test: any batch of JSON objects, shredded and reconstructed, comes back exactly
//! (numbers compared by their text, so `1.10` must stay `1.10`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use proptest::prelude::*;
use serde_json::{Map, Number, Value};
use strata_json::reconstruct::{DocumentWriter, reconstruct};
use strata_json::{JsonPath, ShredOptions, Shredder};

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|i| Value::Number(i.into())),
        any::<u64>().prop_map(|u| Value::Number(u.into())),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "1.10",
            "1e3",
            "1E+3",
            "-0",
            "0.0",
            "1e400",
            "-1e-400",
            "18446744073709551616",
            "123456789012345678901234567890",
            "0.1",
            "2.50",
            "-9223372036854775809",
        ])
        .prop_map(|t| Value::Number(t.parse().unwrap())),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "kind",
            "a.b",
            "",
            " ",
            "ü",
            "__strata_rest",
            "x\\y",
            "n"
        ])
        .prop_map(String::from),
        "\\PC{0,6}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        "(?s).{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["007", "\u{0}", "line\nbreak", "\"quoted\"", "é😀"])
            .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn document() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(key(), json(), 0..6).prop_map(|m| m.into_iter().collect())
}

fn round_trip(
    docs: &[Map<String, Value>],
    max_columns: usize,
    max_paths: usize,
    sort_key: Vec<JsonPath>,
) -> strata_json::ShreddedBatch {
    let mut shredder = Shredder::new(ShredOptions {
        sort_key,
        key: None,
        max_columns,
        max_paths,
    });
    // Through the text and the streaming parser, as ingest does.
    for doc in docs {
        let text = Value::Object(doc.clone()).to_string();
        shredder.push(&strata_json::parse_document(text.as_bytes()).unwrap());
    }
    let shredded = shredder.finish().unwrap();
    assert_eq!(shredded.batch.num_rows(), docs.len());
    let back = reconstruct(&shredded.batch, &JsonPath::default()).unwrap();
    let mut got: Vec<String> = back.into_iter().map(|d| d.unwrap().to_string()).collect();
    // The text written straight from the columns is the rebuilt value's, row for row.
    let writer = DocumentWriter::new(&shredded.batch).unwrap();
    for (row, text) in got.iter().enumerate() {
        let mut written = Vec::new();
        writer.write(row, &mut written).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), *text, "row {row}");
    }
    let mut want: Vec<String> = docs
        .iter()
        .map(|d| Value::Object(d.clone()).to_string())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    shredded
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn shred_reconstruct_is_exact(docs in prop::collection::vec(document(), 1..24)) {
        round_trip(&docs, 1024, 100_000, vec![]);
    }

    #[test]
    fn exact_with_tight_column_limit_and_sort_key(docs in prop::collection::vec(document(), 1..24)) {
        round_trip(&docs, 2, 100_000, vec![JsonPath::parse_dotted("kind"), JsonPath::parse_dotted("a.b")]);
    }

    /// Paths beyond the cap (at any depth, under objects with and without a node) come back.
    #[test]
    fn exact_with_tight_path_limit(docs in prop::collection::vec(document(), 1..24), max_paths in 0usize..12) {
        round_trip(&docs, 3, max_paths, vec![JsonPath::parse_dotted("kind")]);
    }
}

#[test]
fn paths_beyond_the_cap_go_to_the_remainder_and_are_listed() {
    let docs: Vec<Map<String, Value>> = [
        r#"{"id": 1, "scores": {"u1": 5}}"#,
        r#"{"id": 2, "scores": {"u2": 6, "u3": {"deep": [1, 2]}}, "a.b": null}"#,
    ]
    .iter()
    .map(|t| serde_json::from_str(t).unwrap())
    .collect();
    // Nodes: the root, `id`, `scores`, `scores.u1`; everything after goes to the remainder.
    let shredded = round_trip(&docs, 1024, 4, vec![]);
    let listed: Vec<&str> = shredded
        .remainder_paths
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(listed, vec!["a\\.b", "scores.u2", "scores.u3.deep"]);
    let columns: Vec<&str> = shredded.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(columns, vec!["id", "scores.u1"]);
}

#[test]
fn type_conflicts_keep_every_value() {
    let docs: Vec<Map<String, Value>> = [
        r#"{"subject": "did:plc:abc", "n": 1}"#,
        r#"{"subject": {"cid": "x", "uri": "at://y"}, "n": "1"}"#,
        r#"{"subject": null, "n": 1.5}"#,
        r#"{"n": [1, 2, {"deep": true}]}"#,
        r#"{"subject": {}, "n": 18446744073709551616}"#,
    ]
    .iter()
    .map(|t| serde_json::from_str(t).unwrap())
    .collect();
    round_trip(&docs, 1024, 100_000, vec![JsonPath::parse_dotted("n")]);
}

#[test]
fn subtree_reconstruction() {
    let docs: Vec<Map<String, Value>> = [
        r#"{"commit": {"record": {"subject": "did:1", "t": 1}}}"#,
        r#"{"commit": {"record": {"subject": {"cid": "c"}}}}"#,
        r#"{"other": 1}"#,
    ]
    .iter()
    .map(|t| serde_json::from_str(t).unwrap())
    .collect();
    let mut shredder = Shredder::new(ShredOptions::default());
    for doc in &docs {
        shredder.push(&strata_json::Document::from_object(doc));
    }
    let shredded = shredder.finish().unwrap();
    let record = reconstruct(
        &shredded.batch,
        &JsonPath::parse_dotted("commit.record.subject"),
    )
    .unwrap();
    let texts: Vec<Option<String>> = record
        .into_iter()
        .map(|v| v.map(|v| v.to_string()))
        .collect();
    assert_eq!(
        texts,
        vec![
            Some("\"did:1\"".into()),
            Some(r#"{"cid":"c"}"#.into()),
            None
        ]
    );
}
