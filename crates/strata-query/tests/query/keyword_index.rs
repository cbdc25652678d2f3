//! Keyword postings (`keyword_index`, ADR 0025): equality filters on paths whose whole values
//! have postings answer as the same documents without them — over parts that can list a path
//! and parts that cannot (other kinds at the path, a value too long to list), with deleted
//! rows — and a count of such filters reads no page of a part whose postings answer it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use arrow::util::pretty::pretty_format_batches;
use strata_engine::{DataDir, IngestOptions};
use strata_query::Session;

use crate::common;

use common::{explain, metric};

const KEYWORDS: [&str; 6] = ["user", "status", "method", "path", "code", "session"];

/// Documents `n` in `range`: a user of 40 (none every 97th, null every 101st), an integer
/// status, a method, a path, an integer code and a session of three rows (too few for a part
/// to list: its bloom filters hold it). `quirks` adds what keeps a part from listing a path: integer
/// users and string statuses now and then, and one path longer than a keyword may be.
fn documents(range: std::ops::Range<usize>, quirks: bool) -> Vec<String> {
    range
        .map(|n| {
            let status = [200, 200, 200, 404, 500, 301][n % 6];
            let method = ["GET", "POST", "PUT"][(n / 5) % 3];
            let mut doc = serde_json::json!({
                "n": n,
                "user": format!("u{}", (n * 7) % 40),
                "status": status,
                "method": method,
                "path": format!("/a/{}", (n * 13) % 300),
                "code": n % 4,
                "session": format!("s{}", n / 3),
            });
            if n % 97 == 0 {
                doc.as_object_mut().unwrap().remove("user");
            }
            if n % 101 == 0 {
                doc["user"] = serde_json::Value::Null;
            }
            if quirks && n % 50 == 0 {
                doc["user"] = serde_json::json!(7);
            }
            if quirks && n % 77 == 0 {
                doc["status"] = serde_json::json!("200");
            }
            if quirks && n % 1000 == 3 {
                doc["path"] = serde_json::json!(format!("/a/{}", "x".repeat(5000)));
            }
            doc.to_string()
        })
        .collect()
}

fn run(session: &Session, sql: &str) -> Vec<arrow::array::RecordBatch> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async { session.run(sql).await.unwrap().batches })
}

fn count(session: &Session, sql: &str) -> i64 {
    run(session, sql)[0]
        .column(0)
        .as_primitive::<Int64Type>()
        .value(0)
}

const FILTERS: [&str; 19] = [
    "data.user = 'u3'",
    "data.user = 'u3' AND data.status = 200",
    "data.user IN ('u1', 'u2') AND data.method = 'GET'",
    "data.user = 'u3' OR data.status = 500",
    "data.status IN (404, 500) AND data.n >= 5000 AND data.n < 25000",
    "data.path = '/a/17' AND data.method = 'POST' AND data.status = 200",
    "data.user = 'nobody'",
    "data->>'user' = 'u3'",
    "data.status = 200 AND data.user = 'u3' AND data.n > 100",
    "(data.status = 200 OR data.status = 404) AND data.method = 'PUT'",
    "data.user = 'u3' AND data.user IN ('u3', 'u4')",
    "data.user = 'u3' AND data.n % 2 = 0",
    "data.status = 301 AND data.user IS NOT NULL",
    "data.method = 'GET' AND data.status <> 200",
    "data.code IN (1, 3) AND data.user = 'u5'",
    "data.code = 2 AND data.method = 'PUT' AND data.n >= 15000",
    "data.session = 's1234'",
    "data.session IN ('s5', 's6700', 's9000', 'nope') AND data.code <> 0",
    "data.session = 's4000' AND data.user = 'u3'",
];

#[test]
fn lookups_answer_as_without_postings() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = IngestOptions {
        sort_key: Some(vec!["n".into()]),
        auto_merge: false,
        ..Default::default()
    };
    let keyed = IngestOptions {
        keyword_index: Some(KEYWORDS.iter().map(|k| k.to_string()).collect()),
        ..plain.clone()
    };
    // Parts 0 and 1 list every path; part 2 lists method and code only (integer users, string
    // statuses, a path too long).
    let parts = [
        documents(0..10_000, false),
        documents(10_000..20_000, false),
        documents(20_000..30_000, true),
    ];
    for docs in &parts {
        common::ingest_lines(tmp.path(), "plain", docs, &plain);
        common::ingest_lines(tmp.path(), "keyed", docs, &keyed);
    }
    let dir = DataDir::new(tmp.path());
    let manifest = dir.manifest("keyed").unwrap();
    assert_eq!(manifest.settings.keyword_index, KEYWORDS.to_vec());
    let listed: Vec<Vec<String>> = manifest
        .parts
        .iter()
        .map(|p| p.text_index.as_ref().unwrap().keyword_columns.clone())
        .collect();
    assert_eq!(listed[0], KEYWORDS.to_vec());
    assert_eq!(listed[1], KEYWORDS.to_vec());
    assert_eq!(listed[2], vec!["method", "code", "session"]);
    // The same rows of both tables deleted: scattered ones in part 0 (dropped after decoding),
    // a run in part 1 (skipped by the plan).
    let scattered: Vec<u64> = (11..10_000).step_by(7).collect();
    let run_of: Vec<u64> = (3000..3500).collect();
    for table in ["plain", "keyed"] {
        let manifest = dir.manifest(table).unwrap();
        let deletions = [
            (manifest.parts[0].file.clone(), scattered.clone()),
            (manifest.parts[1].file.clone(), run_of.clone()),
        ];
        strata_engine::delete_rows(&dir, table, &deletions.into()).unwrap();
    }
    let session = Session::open(tmp.path()).unwrap();
    for filter in FILTERS {
        let expected = count(
            &session,
            &format!("SELECT count(*) FROM plain WHERE {filter}"),
        );
        let sql = format!("SELECT count(*) FROM keyed WHERE {filter}");
        assert_eq!(count(&session, &sql), expected, "{filter}");
        let rows = |table: &str| {
            let sql = format!("SELECT data.n FROM {table} WHERE {filter} ORDER BY data.n");
            pretty_format_batches(&run(&session, &sql))
                .unwrap()
                .to_string()
        };
        assert_eq!(rows("keyed"), rows("plain"), "{filter}");
    }
    // A count of lookups over the parts that list them (n < 20,000 leaves out part 2 by its
    // statistics) is taken from their postings: no page is read.
    // (`status` holds strings in part 2, so it is compared as a number: not a lookup.)
    let filter = "data.user = 'u3' AND data.code = 1 AND data.method = 'GET' AND data.n < 20000";
    let sql = format!("SELECT count(*) FROM keyed WHERE {filter}");
    let expected = count(
        &session,
        &format!("SELECT count(*) FROM plain WHERE {filter}"),
    );
    assert!(expected > 0);
    let plan = explain(&session, &sql);
    assert_eq!(
        metric(&plan, "rows_counted_from_keyword_postings"),
        expected as u64,
        "{plan}"
    );
    assert_eq!(metric(&plan, "bytes_scanned"), 0, "{plan}");
    // The plain table reads its pages.
    let plan = explain(
        &session,
        &format!("SELECT count(*) FROM plain WHERE {filter}"),
    );
    assert!(metric(&plan, "bytes_scanned") > 0, "{plan}");
    // A session is in too few rows to be listed: the granule whose filter holds it is read,
    // the other granules of the two parts pruned.
    let plan = explain(
        &session,
        "SELECT count(*) FROM keyed WHERE data.session = 's1234' AND data.n < 20000",
    );
    assert!(
        !plan.contains("rows_counted_from_keyword_postings"),
        "{plan}"
    );
    assert!(
        metric(&plan, "granules_pruned_by_text_index") >= 1,
        "{plan}"
    );
    assert!(metric(&plan, "bytes_scanned") > 0, "{plan}");
}

/// Ingests one document into `table`: the engine's answer.
fn try_ingest(
    root: &std::path::Path,
    table: &str,
    options: &IngestOptions,
) -> Result<strata_engine::IngestSummary, strata_engine::EngineError> {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, r#"{{"user":"a"}}"#).unwrap();
    strata_engine::ingest(
        &DataDir::new(root),
        table,
        &[strata_engine::input::Input::File(file.path().to_owned())],
        options,
        &mut |_| {},
        &mut |_| {},
    )
}

#[test]
fn keyword_index_settings() {
    let tmp = tempfile::tempdir().unwrap();
    // A path cannot be searched by token and looked up by whole value both.
    let options = IngestOptions {
        text_index: Some(vec!["user".into()]),
        keyword_index: Some(vec!["user".into()]),
        ..Default::default()
    };
    let error = try_ingest(tmp.path(), "t", &options).unwrap_err();
    assert!(error.to_string().contains("keyword_index"), "{error}");
    // Set later, it applies to the parts written afterwards.
    let plain = IngestOptions {
        auto_merge: false,
        ..Default::default()
    };
    common::ingest_lines(tmp.path(), "t", &documents(0..100, false), &plain);
    let session = Session::open(tmp.path()).unwrap();
    run(
        &session,
        "ALTER TABLE t SET (keyword_index = 'user, status')",
    );
    common::ingest_lines(tmp.path(), "t", &documents(100..200, false), &plain);
    let manifest = DataDir::new(tmp.path()).manifest("t").unwrap();
    assert_eq!(manifest.settings.keyword_index, vec!["user", "status"]);
    assert!(manifest.parts[0].text_index.is_none());
    let second = manifest.parts[1].text_index.as_ref().unwrap();
    assert_eq!(second.keyword_columns, vec!["user", "status"]);
    assert!(second.columns.is_empty());
    // An ingest asking for other keyword paths than the table's is refused.
    let other = IngestOptions {
        keyword_index: Some(vec!["method".into()]),
        ..plain
    };
    let error = try_ingest(tmp.path(), "t", &other).unwrap_err();
    assert!(error.to_string().contains("keyword_index"), "{error}");
}
