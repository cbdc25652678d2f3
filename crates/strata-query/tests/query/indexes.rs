//! Secondary indexes (`CREATE INDEX`, ADR 0024): equality filters on an indexed path read only
//! the rows the parts' index files list, and answer exactly what an unpruned scan answers — for
//! parts written before the index (built by `CREATE INDEX`) and after it (by the part writer),
//! for parts whose values at the path are of several kinds (not indexed, read whole), across
//! updates, deletions and merges; `DROP INDEX` goes back to scanning.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::path::Path;

use arrow::util::pretty::pretty_format_batches;
use strata_engine::{DataDir, IngestOptions, MergeOptions, merge_parts};
use strata_json::KeyType;
use strata_query::Session;

fn answer(session: &Session, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = session
            .run(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        pretty_format_batches(&result.batches).unwrap().to_string()
    })
}

fn error(session: &Session, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    match runtime.block_on(session.run(sql)) {
        Ok(_) => panic!("{sql} succeeded"),
        Err(e) => e.to_string(),
    }
}

/// One ingest of `n` documents starting at `first` into `events`, keyed and sorted by `seq` (so the
/// users are spread over every page): `user` a string (one of 50, or `rare` in one document of
/// 1,000), `code` an integer (one of 7), and, when `mixed`, some `code`s that are strings or
/// floats.
fn ingest(root: &Path, first: u32, n: u32, mixed: bool) {
    let lines: Vec<String> = (first..first + n)
        .map(|i| {
            let code = match (mixed, i % 11) {
                (true, 0) => r#""404""#.to_owned(),
                (true, 1) => "4.5".to_owned(),
                _ => (400 + i % 7).to_string(),
            };
            let user = match i % 1000 {
                999 => "rare".to_owned(),
                _ => format!("u{:02}", (i * 7) % 50),
            };
            format!(
                r#"{{"seq":{i},"user":"{user}","code":{code},"kind":"k{}"}}"#,
                i % 3
            )
        })
        .collect();
    let options = IngestOptions {
        key: Some(("seq".into(), KeyType::Integer)),
        sort_key: Some(vec!["seq".into()]),
        auto_merge: false,
        ..Default::default()
    };
    common::ingest_lines(root, "events", &lines, &options);
}

const QUERIES: &[&str] = &[
    "SELECT count(*) FROM events WHERE data.user = 'u07'",
    "SELECT data.seq FROM events WHERE data->>'user' = 'u13' ORDER BY 1 LIMIT 5",
    "SELECT count(*) FROM events WHERE data.user IN ('u01', 'u02', 'nobody')",
    "SELECT count(*) FROM events WHERE data.user = 'u07' AND data.kind = 'k1'",
    "SELECT count(*) FROM events WHERE data.user = 'u07' OR data.kind = 'k1'",
    "SELECT count(*) FROM events WHERE data.user = 'nobody'",
    "SELECT count(*) FROM events WHERE data.user = 'rare'",
    "SELECT data.seq FROM events WHERE data.user IN ('rare', 'u07') ORDER BY 1 LIMIT 5",
    "SELECT data.seq FROM events WHERE data.user = 'rare' AND data.kind = 'k2' ORDER BY 1",
    "SELECT count(*) FROM events WHERE data.code = 403",
    "SELECT count(*) FROM events WHERE data->>'code' = '404'",
    "SELECT count(*) FROM events WHERE data->>'code' = '403'",
    "SELECT count(*) FROM events WHERE data->>'code' = '0404'",
    "SELECT count(*) FROM events WHERE data.code = 4.5",
    "SELECT count(*) FROM events WHERE data.code = 403 AND data.user = 'u21'",
    "SELECT data FROM events WHERE data.user = 'u33' ORDER BY data.seq LIMIT 3",
];

fn check(root: &Path, label: &str) {
    let indexed = Session::open(root).unwrap();
    let unpruned = Session::open_without_pruning(root).unwrap();
    for sql in QUERIES {
        assert_eq!(
            answer(&indexed, sql),
            answer(&unpruned, sql),
            "{label}: {sql}"
        );
    }
}

fn plan(session: &Session, sql: &str) -> String {
    answer(session, &format!("EXPLAIN ANALYZE {sql}"))
}

#[test]
fn indexed_lookups_answer_as_an_unpruned_scan_does_and_read_only_listed_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    ingest(root, 0, 20_000, false);
    ingest(root, 20_000, 5_000, true);
    let session = Session::open(root).unwrap();
    let lookup = "SELECT count(*) FROM events WHERE data.user = 'u07'";
    assert!(!plan(&session, lookup).contains("secondary index"));

    answer(&session, "CREATE INDEX by_user ON events ((data->>'user'))");
    answer(&session, "CREATE INDEX ON events (data.code)");
    check(root, "indexes built for existing parts");
    // A user in 20 of the first part's 20,000 rows and 5 of the second's 5,000: everything
    // else is skipped.
    let explained = plan(
        &session,
        "SELECT count(*) FROM events WHERE data.user = 'rare'",
    );
    assert!(
        explained.contains("secondary index: parts pruned=0, rows pruned=24975,"),
        "{explained}"
    );
    // `u07` is in 400 rows of the first part, more than the 128 a lookup may narrow a part of 3
    // granules to (they would lie in every page): that part is read as without the index. The
    // second part's 100 are few enough.
    let explained = plan(&session, lookup);
    assert!(
        explained.contains("secondary index: parts pruned=0, rows pruned=4900,"),
        "{explained}"
    );
    // The second part holds strings and floats at `code`: it has no index file for it and is
    // read whole; the first lists 2,857 rows for 403, too many to narrow by.
    // (`data.code = 403` compares numbers exactly, since `code` holds floats too: that reads
    // every part; `->>` compares text, which the integer index files answer.)
    let explained = plan(
        &session,
        "SELECT count(*) FROM events WHERE data->>'code' = '403' AND data.user = 'rare'",
    );
    assert!(
        explained.contains("secondary index: parts pruned=0, rows pruned=24975,"),
        "{explained}"
    );
    // A value no part lists skips every part without reading one.
    let explained = plan(
        &session,
        "SELECT data FROM events WHERE data.user = 'nobody'",
    );
    assert!(
        explained.contains("secondary index: parts pruned=2"),
        "{explained}"
    );

    // Parts written after the index get their files from the part writer.
    ingest(root, 25_000, 3_000, false);
    check(root, "a part written after the index");
    let explained = plan(
        &session,
        "SELECT data FROM events WHERE data.user = 'nobody'",
    );
    assert!(
        explained.contains("secondary index: parts pruned=3"),
        "{explained}"
    );

    // Updates and deletions: the replaced and deleted rows stay listed in their parts and are
    // skipped by the deletion vectors.
    answer(
        &session,
        "UPDATE events SET data = data || '{\"user\":\"u07\"}' WHERE data.seq < 40",
    );
    answer(
        &session,
        "DELETE FROM events WHERE data.user = 'u13' AND data.kind = 'k0'",
    );
    check(root, "after updates and deletions");
    merge_parts(&DataDir::new(root), "events", &MergeOptions::default()).unwrap();
    check(root, "merged");
    let explained = plan(
        &session,
        "SELECT count(*) FROM events WHERE data.user = 'rare'",
    );
    assert!(
        explained.contains("secondary index: parts pruned=0, rows pruned="),
        "{explained}"
    );

    answer(&session, "DROP INDEX by_user");
    check(root, "index dropped");
    assert!(!plan(&session, lookup).contains("secondary index"));
    let manifest = DataDir::new(root).manifest("events").unwrap();
    assert!(
        manifest
            .parts
            .iter()
            .all(|p| p.indexes.iter().all(|i| i.name != "by_user"))
    );
}

#[test]
fn index_statements_check_what_they_are_given() {
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), 0, 100, false);
    let session = Session::open(tmp.path()).unwrap();
    answer(&session, "CREATE INDEX by_user ON events ((data->>'user'))");
    assert!(
        error(&session, "CREATE INDEX by_user ON events (data.kind)")
            .contains("an index of that name exists on table events")
    );
    answer(
        &session,
        "CREATE INDEX IF NOT EXISTS by_user ON events (data.kind)",
    );
    let again = error(&session, "CREATE INDEX again ON events (data.user)");
    assert!(
        again.contains("has index by_user on user already"),
        "{again}"
    );
    assert!(error(&session, "CREATE UNIQUE INDEX u ON events (data.seq)").contains("UNIQUE"));
    assert!(
        error(&session, "CREATE INDEX two ON events (data.seq, data.kind)")
            .contains("several columns")
    );
    assert!(
        error(&session, "CREATE INDEX f ON events (lower(data->>'kind'))").contains("expression")
    );
    assert!(error(&session, "CREATE INDEX n ON nosuchtable (data.a)").contains("nosuchtable"));
    assert!(error(&session, "DROP INDEX nosuchindex").contains("does not exist"));
    answer(&session, "DROP INDEX IF EXISTS nosuchindex");
    // A default name like PostgreSQL's.
    answer(&session, "CREATE INDEX ON events ((data->'kind'))");
    let manifest = DataDir::new(tmp.path()).manifest("events").unwrap();
    let names: Vec<&str> = manifest
        .settings
        .indexes
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, ["by_user", "events_kind_idx"]);
    // Index files are verified with the part.
    let check = strata_engine::table::check_table(&DataDir::new(tmp.path()), "events").unwrap();
    assert!(!check.is_damaged(), "{check:?}");
}

#[test]
fn point_reads_through_an_index_plan_nothing_where_every_part_can_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    ingest(root, 0, 3_000, false);
    ingest(root, 3_000, 1_000, true);
    let session = Session::open(root).unwrap();
    answer(&session, "CREATE INDEX by_user ON events (data.user)");
    answer(&session, "CREATE INDEX by_code ON events (data.code)");
    answer(
        &session,
        "UPDATE events SET data = data || '{\"user\":\"u01\"}' WHERE data.seq = 5",
    );
    let unpruned = Session::open_without_pruning(root).unwrap();
    for sql in [
        "SELECT data FROM events WHERE data.user = 'u01'",
        // Held by seq 5 before the update: its old row is deleted, not read.
        "SELECT data FROM events WHERE data.user = 'u35'",
        "SELECT * FROM events WHERE data->>'user' = 'u07'",
        "SELECT data FROM events WHERE data.user = 'nobody'",
        "SELECT data FROM events WHERE data.user = NULL",
    ] {
        let direct = common::point_read(&session, sql).unwrap_or_else(|| panic!("planned: {sql}"));
        // Sorted rows: the planned statement's order is not part of its meaning.
        let sorted = |table: String| {
            let mut lines: Vec<String> = table.lines().map(str::to_owned).collect();
            lines.sort();
            lines
        };
        assert_eq!(sorted(direct), sorted(answer(&unpruned, sql)), "{sql}");
    }
    for sql in [
        // The second part holds strings and floats at `code`: it has no file, so this is planned.
        "SELECT data FROM events WHERE data->>'code' = '403'",
        // No index on the path.
        "SELECT data FROM events WHERE data.kind = 'k1'",
        // An integer against text read as a string column: the planned statement decides.
        "SELECT data FROM events WHERE data.user = 7",
    ] {
        assert_eq!(common::point_read(&session, sql), None, "{sql}");
    }
}
