//! Pruning never changes an answer: random tables of several parts (typed columns, values of
//! conflicting kinds in the remainder, JSON nulls, absent paths, key runs, a part large enough
//! for several pages) and random predicates (comparisons, IN, OR, NOT, IS [NOT] NULL, LIKE
//! prefixes, casts, over string, bigint, double and boolean modes) give the same rows through a
//! pruning session as through one that scans every row (`Session::open_without_pruning`).
//! In the style of DataFusion's `core/tests/fuzz_cases/pruning.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::path::Path;

use proptest::prelude::*;
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, ingest};
use strata_query::Session;

use crate::common;

/// A JSON value of a generated document (None: the key is absent).
#[derive(Debug, Clone)]
enum Json {
    Null,
    Str(&'static str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Json {
    fn text(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Str(s) => format!("\"{s}\""),
            Json::Int(i) => i.to_string(),
            Json::Float(f) => format!("{f:?}"),
            Json::Bool(b) => b.to_string(),
        }
    }
}

const STRINGS: [&str; 6] = ["a", "ab", "b", "ba", "c", "10"];

fn any_value() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(Json::Null),
        prop::sample::select(&STRINGS[..]).prop_map(Json::Str),
        (-3i64..4).prop_map(Json::Int),
        (-5i64..6).prop_map(|h| Json::Float(h as f64 / 2.0 + 0.25)),
        any::<bool>().prop_map(Json::Bool),
    ]
}

/// A value of `path`: mostly of the path's own kind in this part, sometimes absent, null or of
/// another kind (which lands in the remainder).
fn value_of(kind: u8) -> impl Strategy<Value = Option<Json>> {
    let own = match kind {
        0 => prop::sample::select(&STRINGS[..])
            .prop_map(Json::Str)
            .boxed(),
        1 => (-3i64..4).prop_map(Json::Int).boxed(),
        2 => (-5i64..6)
            .prop_map(|h| Json::Float(h as f64 / 2.0 + 0.25))
            .boxed(),
        _ => any::<bool>().prop_map(Json::Bool).boxed(),
    };
    prop_oneof![
        8 => own.prop_map(Some),
        1 => Just(None),
        1 => any_value().prop_map(Some),
    ]
}

const PATHS: [&str; 4] = ["s", "i", "f", "b"];

/// The documents of one part: per path, the kind most of its values have in this part.
fn part() -> impl Strategy<Value = Vec<String>> {
    (prop::array::uniform4(0u8..5), 1usize..25).prop_flat_map(|(draws, rows)| {
        // Path p's values are mostly of kind p (s strings, i ints, f floats, b booleans), but
        // in some parts mostly of another kind.
        let kinds: Vec<u8> = (0u8..4)
            .zip(draws)
            .map(|(p, d)| if d < 3 { p } else { (p + d) % 4 })
            .collect();
        let row = (
            value_of(kinds[0]),
            value_of(kinds[1]),
            value_of(kinds[2]),
            value_of(kinds[3]),
        );
        prop::collection::vec(row, rows).prop_map(|rows| {
            rows.into_iter()
                .map(|(s, i, f, b)| document(&[s, i, f, b]))
                .collect()
        })
    })
}

fn document(values: &[Option<Json>]) -> String {
    let fields: Vec<String> = PATHS
        .iter()
        .zip(values)
        .filter_map(|(path, value)| value.as_ref().map(|v| format!("\"{path}\":{}", v.text())))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// A part of `rows` rows sorted by `i` then `s`, large enough for several pages (granules), so
/// that page statistics and key runs have something to skip.
fn large_part(rows: usize, seed: u64) -> Vec<String> {
    (0..rows)
        .map(|n| {
            let i = (n * 4 / rows) as i64;
            let s = STRINGS[(n / 700 + seed as usize) % STRINGS.len()];
            let f = (n % 97) as f64 / 4.0;
            if n % 1000 == 7 {
                format!(r#"{{"s":"{s}","i":"text","f":{f:?}}}"#)
            } else {
                format!(r#"{{"s":"{s}","i":{i},"f":{f:?},"b":{}}}"#, n % 3 == 0)
            }
        })
        .collect()
}

fn atom() -> impl Strategy<Value = String> {
    let string = prop::sample::select(&STRINGS[..]);
    let int = -3i64..4;
    let half = (-5i64..6).prop_map(|h| h as f64 / 2.0 + 0.25);
    let cmp = prop::sample::select(&["=", "<>", "<", "<=", ">", ">="][..]);
    prop_oneof![
        (cmp.clone(), string).prop_map(|(op, v)| format!("data.s {op} '{v}'")),
        (cmp.clone(), int.clone()).prop_map(|(op, v)| format!("data.i {op} {v}")),
        (cmp.clone(), half.clone()).prop_map(|(op, v)| format!("data.f {op} {v:?}")),
        (cmp.clone(), int.clone()).prop_map(|(op, v)| format!("data.f {op} {v}")),
        any::<bool>().prop_map(|v| format!("data.b = {v}")),
        Just("data.b".to_owned()),
        (cmp, half).prop_map(|(op, v)| format!("CAST(data.i AS DOUBLE) {op} {v:?}")),
        prop::collection::vec(prop::sample::select(&STRINGS[..]), 1..4).prop_map(|vs| {
            let list: Vec<String> = vs.iter().map(|v| format!("'{v}'")).collect();
            format!("data.s IN ({})", list.join(", "))
        }),
        (any::<bool>(), prop::collection::vec(int, 1..4)).prop_map(|(not, vs)| {
            let list: Vec<String> = vs.iter().map(|v| v.to_string()).collect();
            let not = if not { "NOT " } else { "" };
            format!("data.i {not}IN ({})", list.join(", "))
        }),
        (prop::sample::select(&PATHS[..]), any::<bool>())
            .prop_map(|(p, not)| format!("data.{p} IS {}NULL", if not { "NOT " } else { "" })),
        prop::sample::select(&["a", "b", "1", ""][..]).prop_map(|p| format!("data.s LIKE '{p}%'")),
    ]
}

fn predicate() -> impl Strategy<Value = String> {
    atom().prop_recursive(2, 6, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) AND ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) OR ({b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
}

fn load(dir: &DataDir, lines: &[String], sort_key: &Option<Vec<String>>, max_columns: usize) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
    ingest(
        dir,
        "t",
        &[Input::File(file.path().to_owned())],
        &IngestOptions {
            sort_key: sort_key.clone(),
            max_columns: Some(max_columns),
            auto_merge: false,
            ..Default::default()
        },
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap();
}

/// The rows of `sql`, sorted, or its error.
fn rows(
    session: &Session,
    runtime: &tokio::runtime::Runtime,
    sql: &str,
) -> Result<Vec<String>, String> {
    runtime.block_on(async {
        let result = session.run(sql).await.map_err(|e| e.to_string())?;
        let mut rows = common::rows(&result.batches);
        rows.sort();
        Ok(rows)
    })
}

fn check(root: &Path, predicates: &[String]) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pruned = Session::open(root).unwrap();
    let unpruned = Session::open_without_pruning(root).unwrap();
    for predicate in predicates {
        for sql in [
            format!("SELECT data FROM t WHERE {predicate}"),
            format!("SELECT count(*) FROM t WHERE {predicate}"),
        ] {
            // A cast that fails on some stored value fails only where that row is read, so
            // an error of the full scan says nothing about the pruned one.
            let Ok(expected) = rows(&unpruned, &runtime, &sql) else {
                continue;
            };
            let actual = rows(&pruned, &runtime, &sql);
            prop_assert_eq!(actual, Ok(expected), "{}", sql);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn pruning_returns_the_rows_of_an_unpruned_scan(
        parts in prop::collection::vec(part(), 1..5),
        large in prop::option::of(9_000usize..18_000),
        seed in 0u64..6,
        sorted in any::<bool>(),
        few_columns in any::<bool>(),
        predicates in prop::collection::vec(predicate(), 1..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        let sort_key = sorted.then(|| vec!["s".to_owned(), "i".to_owned()]);
        // Two typed columns per part push the other paths into the remainder.
        let max_columns = if few_columns { 2 } else { 64 };
        for lines in &parts {
            load(&dir, lines, &sort_key, max_columns);
        }
        if let Some(rows) = large {
            load(&dir, &large_part(rows, seed), &sort_key, max_columns);
        }
        check(tmp.path(), &predicates)?;
    }
}

/// Whether DataFusion's `a OR b` evaluates `b` on a row `a` already decided depends on the
/// rows that share the batch (it pre-selects only when at most a fifth are undecided): the
/// scan's filters, evaluated over the fewer rows pruning leaves, must not fail where the full
/// scan did not. Here the rows with `s = 'ab'` are one without `i` and one with `i = 'ba'`.
/// Found by the property test above.
#[test]
fn a_filter_is_short_circuited_per_row_where_its_batch_evaluation_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let small: Vec<String> = [
        r#"{"s":"ab","f":0.25}"#,
        r#"{"s":"b","i":"a","f":0.25}"#,
        r#"{"s":"a","i":"a","f":0.25}"#,
        r#"{"s":"a","i":0,"f":0.25}"#,
        r#"{"s":"ab","i":"ba","f":1.875}"#,
        r#"{"s":-3,"i":"ab","f":-0.75}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let key = Some(vec!["s".to_owned(), "i".to_owned()]);
    load(&dir, &small, &key, 64);
    load(&dir, &large_part(17014, 0), &key, 64);
    let predicate =
        "((data.i IS NOT NULL) OR (CAST(data.i AS DOUBLE) > -0.75)) AND (data.s IN ('ab', 'ba'))";
    check(tmp.path(), &[predicate.to_owned()]).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let sql = format!("SELECT data FROM t WHERE {predicate} AND data.f = 1.875");
    assert_eq!(
        rows(&session, &runtime, &sql),
        Ok(vec![r#"{"f":1.875,"i":"ba","s":"ab"}"#.to_owned()])
    );
}

/// The decoder runs equalities and large dictionaries first, but a conjunct that can fail on a
/// value (a cast) runs after the ones written before it, as a row's filter does: here the rows
/// holding `i = 'ba'` are the rows `s = 'y'`, which the first conjunct drops.
#[test]
fn a_conjunct_that_can_fail_runs_after_the_conjuncts_written_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let lines: Vec<String> = (0..200)
        .map(|n| match n % 2 {
            0 => format!(r#"{{"s":"x","i":"{}"}}"#, n % 7),
            _ => r#"{"s":"y","i":"ba"}"#.to_owned(),
        })
        .collect();
    // Unsorted, so that no key run drops the rows `s = 'y'` before the decoder.
    load(&dir, &lines, &None, 64);
    let predicate = "(data.s IN ('x', 'z')) AND (CAST(data.i AS DOUBLE) > 0.5)";
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let sql = format!("SELECT data FROM t WHERE {predicate}");
    let found = rows(&session, &runtime, &sql).map(|rows| rows.len());
    // n even and n % 7 > 0: 100 - 15.
    assert_eq!(found, Ok(85));
    check(tmp.path(), &[predicate.to_owned()]).unwrap();
}

/// The documents of table `t` that no deletion vector lists, read without the scan: every row
/// of each part (ignoring its vector), rebuilt, minus the listed positions; canonical JSON.
fn live_documents(dir: &DataDir) -> Vec<String> {
    let table_dir = dir.table_dir("t").unwrap();
    let mut docs = Vec::new();
    for entry in dir.manifest("t").unwrap().parts {
        let deleted = entry.deletes.as_ref().map(|d| {
            strata_format::deletes::read_deletion_vector(&table_dir, d, entry.rows).unwrap()
        });
        let whole = strata_format::PartEntry {
            deletes: None,
            keys: None,
            ..(*entry).clone()
        };
        let path = strata_format::Manifest::part_path(&table_dir, &entry.file);
        let mut position = 0u64;
        for batch in strata_format::read_part_batches(&path, &whole).unwrap() {
            let rebuilt =
                strata_json::reconstruct::reconstruct(&batch, &strata_json::JsonPath::default())
                    .unwrap();
            for doc in rebuilt {
                if !deleted.as_ref().is_some_and(|d| d.contains(position)) {
                    docs.push(doc.unwrap().to_string());
                }
                position += 1;
            }
        }
    }
    docs.sort();
    docs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Deleted rows never come back, and pruning over parts with deletion vectors still gives
    /// the rows of an unpruned scan (ADR 0015).
    #[test]
    fn deleted_rows_stay_hidden_with_and_without_pruning(
        parts in prop::collection::vec(part(), 1..4),
        large in prop::option::of(9_000usize..18_000),
        seed in 0u64..6,
        sorted in any::<bool>(),
        deletions in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..60),
        predicates in prop::collection::vec(predicate(), 1..4),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        let sort_key = sorted.then(|| vec!["s".to_owned(), "i".to_owned()]);
        for lines in &parts {
            load(&dir, lines, &sort_key, 64);
        }
        if let Some(rows) = large {
            load(&dir, &large_part(rows, seed), &sort_key, 64);
        }
        let manifest = dir.manifest("t").unwrap();
        let mut chosen: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for (part, row) in &deletions {
            let entry = part.get(&manifest.parts);
            if entry.rows > 0 {
                chosen.entry(entry.file.clone()).or_default().push(row.index(entry.rows as usize) as u64);
            }
        }
        strata_engine::delete_rows(&dir, "t", &chosen).unwrap();

        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let session = Session::open(tmp.path()).unwrap();
        let mut all: Vec<String> = rows(&session, &runtime, "SELECT data FROM t")
            .unwrap()
            .iter()
            .map(|text| serde_json::from_str::<serde_json::Value>(text).unwrap().to_string())
            .collect();
        all.sort();
        let expected = live_documents(&dir);
        prop_assert_eq!(&all, &expected);
        let count = rows(&session, &runtime, "SELECT count(*) FROM t").unwrap();
        prop_assert_eq!(count, vec![expected.len().to_string()]);
        drop(session);
        check(tmp.path(), &predicates)?;
    }
}
