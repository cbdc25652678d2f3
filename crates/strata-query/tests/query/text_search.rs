//! `matches(text, query)` over text-indexed tables (ADR 0019): answers equal those of the same
//! session without pruning and of the tokenizer applied to the lines directly; rare tokens skip
//! granules, which `EXPLAIN ANALYZE` counts; parts whose path is not all strings are not
//! indexed and still answer; merges rebuild the index.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use strata_engine::{DataDir, IngestOptions, MergeOptions, merge_parts};
use strata_query::Session;
use strata_text::TextQuery;

use crate::common;

use common::{explain, metric};

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

#[test]
fn postings_count_searches_without_reading_the_text() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = messages(40_000);
    let docs: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(n, m)| serde_json::json!({ "message": m, "n": n }).to_string())
        .collect();
    let options = IngestOptions {
        sort_key: Some(vec!["n".into()]),
        text_postings: true,
        ..with_text_index()
    };
    // Two parts, rows in `n` order. Part 0 loses every third row from 1234 on (line 1234, a
    // rare phrase, among them): runs too short to skip, so dropped after decoding. Part 1 loses
    // one run of 100 rows, which its plan skips.
    common::ingest_lines(tmp.path(), "logs", &docs[..20_000], &options);
    common::ingest_lines(tmp.path(), "logs", &docs[20_000..], &options);
    let dir = DataDir::new(tmp.path());
    let manifest = dir.manifest("logs").unwrap();
    assert!(manifest.settings.text_postings);
    assert!(manifest.parts.iter().all(|p| {
        p.text_index
            .as_ref()
            .is_some_and(|index| index.postings.is_some())
    }));
    let scattered: Vec<u64> = (1234..20_000).step_by(3).collect();
    let run: Vec<u64> = (5000..5100).collect();
    let deletions = [
        (manifest.parts[0].file.clone(), scattered.clone()),
        (manifest.parts[1].file.clone(), run.clone()),
    ];
    strata_engine::delete_rows(&dir, "logs", &deletions.into()).unwrap();
    let deleted: std::collections::HashSet<u64> = scattered
        .into_iter()
        .chain(run.iter().map(|row| row + 20_000))
        .collect();
    let live = |n: usize| !deleted.contains(&(n as u64));
    let queries = QUERIES.iter().copied().chain([
        "alpha AND beta",
        "gamma OR delta",
        "NOT ok",
        "alph*",
        "-user",
        "alpha AND NOT (beta OR gamma)",
        "get \"api v2\"",
        "NOT \"alpha beta\"",
    ]);
    let check = |session: &Session, stage: &str| {
        for query in queries.clone() {
            let parsed = TextQuery::parse(query).unwrap();
            let search = format!("matches(data.message, '{}')", query.replace('\'', "''"));
            let expected = |range: std::ops::Range<usize>| {
                range
                    .filter(|&n| live(n) && parsed.matches(&lines[n]))
                    .count() as i64
            };
            let sql = format!("SELECT count(*) FROM logs WHERE {search}");
            assert_eq!(
                count(session, &sql),
                expected(0..40_000),
                "{stage}: {query}"
            );
            let sql = format!("{sql} AND data.n >= 5000 AND data.n < 32000");
            assert_eq!(
                count(session, &sql),
                expected(5000..32_000),
                "{stage}: {query}"
            );
        }
    };
    let session = Session::open(tmp.path()).unwrap();
    check(&session, "two parts");
    // A search of terms is counted from the postings alone: no page of the part is read (and
    // line 1234's `error` is deleted).
    let plan = explain(
        &session,
        "SELECT count(*) FROM logs WHERE matches(data.message, 'error OR timed OR 東')",
    );
    assert_eq!(
        metric(&plan, "rows_counted_from_text_postings"),
        2,
        "{plan}"
    );
    assert_eq!(metric(&plan, "bytes_scanned"), 0, "{plan}");
    // A phrase's candidates are read and decided by `matches`.
    let plan = explain(
        &session,
        "SELECT count(*) FROM logs WHERE matches(data.message, '\"timed out\"')",
    );
    assert_eq!(
        metric(&plan, "rows_counted_from_text_postings"),
        0,
        "{plan}"
    );
    assert!(metric(&plan, "bytes_scanned") > 0, "{plan}");

    merge_parts(&dir, "logs", &MergeOptions::default()).unwrap();
    let manifest = dir.manifest("logs").unwrap();
    assert_eq!(manifest.parts.len(), 1);
    assert!(
        manifest.parts[0]
            .text_index
            .as_ref()
            .unwrap()
            .postings
            .is_some()
    );
    check(&Session::open(tmp.path()).unwrap(), "merged");
}
