//! `matches(text, query)` over text-indexed tables (ADR 0019): answers equal those of the same
//! session without pruning and of the tokenizer applied to the lines directly; rare tokens skip
//! granules, which `EXPLAIN ANALYZE` counts; parts whose path is not all strings are not
//! indexed and still answer; merges rebuild the index.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use arrow::util::pretty::pretty_format_batches;
use strata_engine::{DataDir, IngestOptions, MergeOptions, merge_parts};
use strata_query::Session;
use strata_text::TextQuery;

mod common;

const WORDS: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "GET", "/api/v2", "user", "ok",
];

/// Deterministic log-like messages; a few rare phrases at known lines.
fn messages(count: usize) -> Vec<String> {
    let mut state = 7u64;
    (0..count)
        .map(|i| {
            let mut words = Vec::new();
            for _ in 0..6 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                words.push(WORDS[(state >> 33) as usize % WORDS.len()]);
            }
            let mut message = words.join(" ");
            match i {
                1234 => message.push_str(" ERROR connection reset by peer"),
                30_001 => message.push_str(" error: Connection timed out 10.0.0.1"),
                39_999 => message.push_str(" 東京 エラー"),
                _ => {}
            }
            message
        })
        .collect()
}

fn documents(messages: &[String]) -> Vec<String> {
    messages
        .iter()
        .map(|m| serde_json::json!({ "message": m }).to_string())
        .collect()
}

fn with_text_index() -> IngestOptions {
    IngestOptions {
        text_index: Some(vec!["message".into()]),
        auto_merge: false,
        ..Default::default()
    }
}

fn count(session: &Session, sql: &str) -> i64 {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = session.run(sql).await.unwrap();
        result.batches[0]
            .column(0)
            .as_primitive::<Int64Type>()
            .value(0)
    })
}

fn explain(session: &Session, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = session
            .run(&format!("EXPLAIN ANALYZE {sql}"))
            .await
            .unwrap();
        pretty_format_batches(&result.batches).unwrap().to_string()
    })
}

/// The value of a metric `name=N` in an EXPLAIN ANALYZE plan.
fn metric(plan: &str, name: &str) -> u64 {
    let start = plan
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("no {name} in\n{plan}"));
    plan[start + name.len() + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

const QUERIES: [&str; 9] = [
    "error",
    r#""connection reset""#,
    "error AND timed",
    "10.0.0.1",
    "conn*",
    "ERROR OR 東京",
    "alpha -beta",
    "\"api v2\" user",
    "nothing_like_this",
];

#[test]
fn answers_do_not_depend_on_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = messages(40_000);
    common::ingest_lines(tmp.path(), "logs", &documents(&lines), &with_text_index());
    let manifest = DataDir::new(tmp.path()).manifest("logs").unwrap();
    assert!(manifest.parts.iter().all(|p| p.text_index.is_some()));
    let indexed = Session::open(tmp.path()).unwrap();
    let plain = Session::open_without_pruning(tmp.path()).unwrap();
    for query in QUERIES {
        let parsed = TextQuery::parse(query).unwrap();
        let expected = lines.iter().filter(|l| parsed.matches(l)).count() as i64;
        let sql = format!(
            "SELECT count(*) FROM logs WHERE matches(data.message, '{}')",
            query.replace('\'', "''")
        );
        assert_eq!(count(&indexed, &sql), expected, "{query}");
        assert_eq!(count(&plain, &sql), expected, "{query} without pruning");
    }
    // A rare phrase reads one granule of five.
    let plan = explain(
        &indexed,
        "SELECT count(*) FROM logs WHERE matches(data.message, '\"connection reset\"')",
    );
    assert_eq!(metric(&plan, "granules_pruned_by_text_index"), 4, "{plan}");
    // Combined with other filters, and the index does not prune what it cannot (NOT).
    let plan = explain(
        &indexed,
        "SELECT count(*) FROM logs WHERE matches(data.message, 'NOT alpha')",
    );
    assert_eq!(metric(&plan, "granules_pruned_by_text_index"), 0);
}

#[test]
fn parts_whose_path_is_not_all_strings_are_not_indexed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut docs = documents(&messages(100));
    docs.push(r#"{"message": 42}"#.to_owned());
    docs.push(r#"{"message": ["error in an array"]}"#.to_owned());
    common::ingest_lines(tmp.path(), "mixed", &docs, &with_text_index());
    let part = &DataDir::new(tmp.path()).manifest("mixed").unwrap().parts[0];
    assert!(part.text_index.is_none());
    let session = Session::open(tmp.path()).unwrap();
    assert_eq!(
        count(
            &session,
            "SELECT count(*) FROM mixed WHERE matches(data.message, 'alpha')"
        ),
        messages(100).iter().filter(|m| m.contains("alpha")).count() as i64
    );
}

#[test]
fn merges_rebuild_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = messages(20_000);
    common::ingest_lines(
        tmp.path(),
        "logs",
        &documents(&lines[..10_000]),
        &with_text_index(),
    );
    common::ingest_lines(
        tmp.path(),
        "logs",
        &documents(&lines[10_000..]),
        &with_text_index(),
    );
    let dir = DataDir::new(tmp.path());
    merge_parts(&dir, "logs", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("logs").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    assert!(manifest.parts[0].text_index.is_some());
    let session = Session::open(tmp.path()).unwrap();
    assert_eq!(
        count(
            &session,
            "SELECT count(*) FROM logs WHERE matches(data.message, '\"connection reset\"')"
        ),
        1
    );
    // The text index is fixed with the table.
    let other = IngestOptions {
        text_index: Some(vec!["other".into()]),
        ..Default::default()
    };
    let file = tmp.path().join("more.ndjson");
    std::fs::write(&file, documents(&lines[..1]).join("\n")).unwrap();
    let error = strata_engine::ingest(
        &dir,
        "logs",
        &[strata_engine::input::Input::File(file)],
        &other,
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(error, strata_engine::EngineError::TextIndexMismatch { .. }),
        "{error}"
    );
}
