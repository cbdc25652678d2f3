//! Key runs in part manifest entries: every row in exactly one run, runs in row order, each
//! run's rows holding its values; paths the runs cannot describe are left out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use serde_json::{Value, json};
use strata_format::KeyRuns;

fn runs_of(docs: &[Value], sort_key: &[&str]) -> Option<KeyRuns> {
    let sort_key: Vec<String> = sort_key.iter().map(|s| s.to_string()).collect();
    common::write_docs(docs, &sort_key).1.key_runs
}

#[test]
fn runs_partition_the_rows_by_the_leading_sort_key_values() {
    let docs: Vec<Value> = (0..3000)
        .map(|i| {
            let kind = ["b", "a", "c"][i % 3];
            json!({"kind": kind, "op": i % 2 == 0, "n": i})
        })
        .chain([json!({"n": -1})])
        .collect();
    let runs = runs_of(&docs, &["kind", "op", "n"]).unwrap();
    // `n` is unique per row: 3,001 runs would exceed the bound, so the prefix stops at `op`.
    assert_eq!(runs.paths, ["kind", "op"]);
    let summary: Vec<(Value, u64, u64)> = runs
        .runs
        .iter()
        .map(|r| (json!(r.values), r.start, r.rows))
        .collect();
    assert_eq!(
        summary,
        [
            (json!([null, null]), 0, 1),
            (json!(["a", false]), 1, 500),
            (json!(["a", true]), 501, 500),
            (json!(["b", false]), 1001, 500),
            (json!(["b", true]), 1501, 500),
            (json!(["c", false]), 2001, 500),
            (json!(["c", true]), 2501, 500),
        ]
    );
}

#[test]
fn a_sort_key_path_with_values_in_the_remainder_is_not_covered() {
    // `kind` is a string in most documents and a number in one: the number sits in the
    // remainder, where runs over the typed column could not see it.
    let docs: Vec<Value> = (0..100)
        .map(|i| json!({"kind": if i == 50 { json!(7) } else { json!("x") }, "n": i % 4}))
        .collect();
    assert_eq!(runs_of(&docs, &["kind", "n"]), None);
    assert_eq!(runs_of(&docs, &["n"]).unwrap().runs.len(), 4);
}
