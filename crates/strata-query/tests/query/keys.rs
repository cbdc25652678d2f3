//! Point reads on keyed tables (ADR 0016): filters that pin the key read only the rows the
//! parts' key files name, and answer exactly what an unpruned scan answers — across parts,
//! replaced documents (whose old rows stay in their parts, deleted) and merges.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::path::Path;

use arrow::util::pretty::pretty_format_batches;
use strata_engine::{DataDir, IngestOptions, MergeOptions, OnConflict, merge_parts};
use strata_json::KeyType;
use strata_query::Session;

fn load(root: &Path, table: &str, key: (&str, KeyType), lines: &[String]) {
    let options = IngestOptions {
        key: Some((key.0.to_owned(), key.1)),
        on_conflict: OnConflict::Replace,
        sort_key: Some(vec!["kind".into()]),
        auto_merge: false,
        ..Default::default()
    };
    common::ingest_lines(root, table, lines, &options);
}

fn answer(session: &Session, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = session.run(sql).await.unwrap();
        pretty_format_batches(&result.batches).unwrap().to_string()
    })
}

/// Table `s` keyed by the string `id`, table `i` by the integer `owner.id`, each in three
/// ingests whose later ones replace some documents of the earlier.
fn tables() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for round in 0..3u32 {
        let docs: Vec<String> = (0..3000u32)
            .filter(|n| n % 3 == round || round == 0)
            .map(|n| {
                format!(
                    r#"{{"id":"u{n:05}","owner":{{"id":{}}},"kind":"k{}","round":{round}}}"#,
                    i64::from(n) - 1000,
                    n % 4
                )
            })
            .collect();
        load(tmp.path(), "s", ("id", KeyType::String), &docs);
        load(tmp.path(), "i", ("owner.id", KeyType::Integer), &docs);
    }
    tmp
}

const QUERIES: &[&str] = &[
    "SELECT data FROM s WHERE data.id = 'u00042'",
    "SELECT data.round FROM s WHERE data->>'id' = 'u00043'",
    "SELECT data.id, data.round FROM s WHERE data.id IN ('u00001', 'u02999', 'nope') ORDER BY 1",
    "SELECT count(*) FROM s WHERE data.id = 'u00044' AND data.kind = 'k0'",
    "SELECT count(*) FROM s WHERE data.id = 'u00044' OR data.kind = 'k1'",
    "SELECT count(*) FROM s WHERE data.id = 'missing'",
    "SELECT data FROM i WHERE data.owner.id = -958",
    "SELECT data.id FROM i WHERE data.owner.id IN (0, 1999, 5000) ORDER BY 1",
    "SELECT data.id FROM i WHERE data->'owner'->>'id' = '17'",
    "SELECT count(*) FROM i WHERE data->'owner'->>'id' = '017'",
    "SELECT data.id FROM i WHERE data.owner.id::text = '18'",
    // Point reads the session answers without planning (strata_query::point_read).
    "SELECT * FROM s WHERE data->>'id' = 'u00045'",
    "SELECT data FROM s WHERE 'u00046' = (data.id);",
    "SELECT data FROM s WHERE data.id = NULL",
    "SELECT data FROM i WHERE data->'owner'->>'id' = '17'",
    "SELECT data FROM i WHERE data->'owner'->>'id' = '017'",
    "SELECT data FROM i WHERE data.owner.id = 5000",
];

#[test]
fn point_reads_answer_as_an_unpruned_scan_does() {
    let tmp = tables();
    let indexed = Session::open(tmp.path()).unwrap();
    let unpruned = Session::open_without_pruning(tmp.path()).unwrap();
    let check = |label: &str| {
        for sql in QUERIES {
            assert_eq!(
                answer(&indexed, sql),
                answer(&unpruned, sql),
                "{label}: {sql}"
            );
        }
    };
    check("three ingests");
    // The newest version of a replaced document, once.
    assert!(
        answer(&indexed, QUERIES[1]).contains("| 1 "),
        "{}",
        answer(&indexed, QUERIES[1])
    );
    let dir = DataDir::new(tmp.path());
    merge_parts(&dir, "s", &MergeOptions::default()).unwrap();
    merge_parts(&dir, "i", &MergeOptions::default()).unwrap();
    check("merged");
}

#[test]
fn point_reads_skip_planning_only_where_the_key_answers() {
    let tmp = tables();
    let session = Session::open(tmp.path()).unwrap();
    for sql in [
        "SELECT data FROM s WHERE data.id = 'u00042'",
        "SELECT * FROM s WHERE data->>'id' = 'u00045'",
        "SELECT data FROM i WHERE data.owner.id = -958",
        "SELECT data FROM i WHERE data->'owner'->>'id' = '017'",
    ] {
        let direct = common::point_read(&session, sql).unwrap_or_else(|| panic!("planned: {sql}"));
        assert_eq!(direct, answer(&session, sql), "{sql}");
    }
    for sql in [
        // Not the key's path, or not compared as the key: planned.
        "SELECT data FROM s WHERE data.kind = 'k1'",
        "SELECT data FROM i WHERE data.id = 'u00001'",
        "SELECT data FROM i WHERE data.owner.id = '17'",
        "SELECT data FROM s WHERE data->>'id' = 7",
        "SELECT data FROM nosuchtable WHERE data.id = 'u00001'",
    ] {
        assert_eq!(common::point_read(&session, sql), None, "{sql}");
    }
}

#[test]
fn point_reads_follow_replacements_and_deletions_of_kept_documents() {
    let tmp = tables();
    let session = Session::open(tmp.path()).unwrap();
    let sql = "SELECT data FROM s WHERE data.id = 'u00007'";
    let first = common::point_read(&session, sql).unwrap();
    assert!(first.contains(r#""round":1"#), "{first}");
    // The document is kept by the session now; a replacement commits a new part and deletes
    // the kept row.
    answer(
        &session,
        r#"INSERT INTO s VALUES ('{"id":"u00007","kind":"k9","round":7}') ON CONFLICT (data) DO UPDATE SET data = EXCLUDED.data"#,
    );
    let replaced = common::point_read(&session, sql).unwrap();
    assert!(replaced.contains(r#""round":7"#), "{replaced}");
    assert_eq!(replaced.lines().count(), 5, "one row: {replaced}");
    answer(&session, "DELETE FROM s WHERE data.id = 'u00007'");
    let deleted = common::point_read(&session, sql).unwrap();
    assert!(!deleted.contains("u00007"), "{deleted}");
    let dir = DataDir::new(tmp.path());
    merge_parts(&dir, "s", &MergeOptions::default()).unwrap();
    assert_eq!(common::point_read(&session, sql).unwrap(), deleted);
    let other = "SELECT data FROM s WHERE data.id = 'u00008'";
    assert_eq!(
        common::point_read(&session, other).unwrap(),
        answer(&Session::open_without_pruning(tmp.path()).unwrap(), other)
    );
}

#[test]
fn explain_analyze_shows_the_rows_the_key_index_skips() {
    let tmp = tables();
    let session = Session::open(tmp.path()).unwrap();
    let plan = answer(
        &session,
        "EXPLAIN ANALYZE SELECT data FROM s WHERE data.id = 'u00042'",
    );
    // Three parts hold u00042 once each (two rows deleted by newer versions); every other
    // row of the table is skipped by the key index or by the deletion vectors.
    assert!(plan.contains("key index: parts pruned="), "{plan}");
    assert!(plan.contains("output_rows=1"), "{plan}");
    let plan = answer(
        &session,
        "EXPLAIN ANALYZE SELECT data FROM s WHERE data.id = 'nope'",
    );
    assert!(plan.contains("key index: parts pruned=3"), "{plan}");
    // Every way of pinning the key reads through the index (the OR does not pin it).
    for sql in QUERIES.iter().filter(|q| {
        // Answered without a scan: DataFusion knows from the scan's statistics that no row is left.
        !q.contains(" OR ")
            && !q.contains("'017'")
            && !q.contains("'missing'")
            && !q.contains("NULL")
    }) {
        let plan = answer(&session, &format!("EXPLAIN ANALYZE {sql}"));
        assert!(plan.contains("key index: parts pruned="), "{sql}: {plan}");
    }
}

#[test]
fn prepared_statements_answer_as_their_text_does() {
    let tmp = tables();
    let session = Session::open(tmp.path()).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    answer(
        &session,
        "PREPARE by_id(text) AS SELECT data FROM s WHERE data->>'id' = $1",
    );
    answer(
        &session,
        "PREPARE by_owner(bigint) AS SELECT data.id FROM i WHERE data.owner.id = $1",
    );
    for (execute, text) in [
        (
            "EXECUTE by_id('u00042')",
            "SELECT data FROM s WHERE data->>'id' = 'u00042'",
        ),
        (
            "EXECUTE by_owner(-958)",
            "SELECT data.id FROM i WHERE data.owner.id = -958",
        ),
    ] {
        // The server encodes rows by the frame's schema: every batch must have its columns.
        let frame = runtime.block_on(session.context().sql(execute)).unwrap();
        let columns = frame.schema().fields().len();
        let batches = runtime.block_on(frame.collect()).unwrap();
        assert!(
            batches.iter().all(|b| b.num_columns() == columns),
            "{execute}: {columns} columns in the schema, batches {:?}",
            batches.iter().map(|b| b.schema()).collect::<Vec<_>>()
        );
        assert_eq!(
            answer(&session, execute),
            answer(&session, text),
            "{execute}"
        );
    }
}

/// A part of several granules (GRANULE_ROWS rows each, the rows a data page holds at most):
/// a point read decodes its row's granule whole and keeps it, and later reads of other rows of
/// that granule are rebuilt from it. The part is sorted by `kind`, so a key's neighbours in a
/// granule are far from it in key order.
#[test]
fn point_reads_across_granules_answer_as_a_scan_does() {
    let tmp = tempfile::tempdir().unwrap();
    let docs: Vec<String> = (0..20_000u32)
        .map(|n| {
            format!(
                r#"{{"id":"u{n:05}","kind":"k{}","n":{n},"tags":["t{}"]}}"#,
                n % 7,
                n % 3
            )
        })
        .collect();
    load(tmp.path(), "s", ("id", KeyType::String), &docs);
    let session = Session::open(tmp.path()).unwrap();
    let unpruned = Session::open_without_pruning(tmp.path()).unwrap();
    let read = |n: u32| format!("SELECT data FROM s WHERE data.id = 'u{n:05}'");
    for round in 0..2 {
        for n in (0..20_000).step_by(613).chain([0, 8191, 8192, 19_999]) {
            let direct = common::point_read(&session, &read(n)).unwrap();
            assert!(
                direct.contains(&format!(r#""n":{n},"#)),
                "round {round}: {direct}"
            );
            assert_eq!(direct, answer(&unpruned, &read(n)), "round {round}: {n}");
        }
    }
    answer(&session, "DELETE FROM s WHERE data.id = 'u00613'");
    assert!(
        !common::point_read(&session, &read(613))
            .unwrap()
            .contains("u00613")
    );
    assert_eq!(
        common::point_read(&session, &read(614)).unwrap(),
        answer(&unpruned, &read(614))
    );
}
