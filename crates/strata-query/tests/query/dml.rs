//! INSERT, UPDATE and DELETE (issue 14, ADR 0016): counts, conflict policies, PostgreSQL's
//! jsonb `||` and `jsonb_set`, errors that change nothing, and what queries, point reads,
//! exports and merges see afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::path::Path;

use arrow::array::AsArray;
use arrow::datatypes::UInt64Type;
use arrow::util::pretty::pretty_format_batches;
use serde_json::Value;
use strata_engine::{DataDir, MergeOptions, export_table, merge_parts};
use strata_json::KeyType;
use strata_query::{QueryError, Session};

use common::create;

struct Db {
    runtime: tokio::runtime::Runtime,
    session: Session,
    root: std::path::PathBuf,
}

impl Db {
    fn new(root: &Path) -> Db {
        Db {
            runtime: tokio::runtime::Runtime::new().unwrap(),
            session: Session::open(root).unwrap(),
            root: root.to_owned(),
        }
    }

    fn try_run(&self, sql: &str) -> Result<Vec<arrow::record_batch::RecordBatch>, QueryError> {
        self.runtime
            .block_on(async { self.session.run(sql).await.map(|r| r.batches) })
    }

    /// The `count` a changing statement answers.
    fn change(&self, sql: &str) -> u64 {
        let batches = self.try_run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        batches[0].column(0).as_primitive::<UInt64Type>().value(0)
    }

    fn error(&self, sql: &str) -> (String, &'static str) {
        match self.try_run(sql) {
            Ok(_) => panic!("{sql}: expected an error"),
            Err(QueryError::Statement { sqlstate, message }) => (message, sqlstate),
            Err(e) => (e.to_string(), ""),
        }
    }

    fn text(&self, sql: &str) -> String {
        pretty_format_batches(&self.try_run(sql).unwrap())
            .unwrap()
            .to_string()
    }

    /// The table's documents by key, through export (no SQL involved).
    fn documents(&self, table: &str) -> Vec<Value> {
        let mut out = Vec::new();
        export_table(&DataDir::new(&self.root), table, &mut out).unwrap();
        let mut docs: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        docs.sort_by_key(|d| d["id"].to_string());
        docs
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn insert_update_delete_on_a_keyed_table() {
    let tmp = tempfile::tempdir().unwrap();
    create(
        tmp.path(),
        "t",
        Some(("id", KeyType::Integer)),
        &[r#"{"id":1,"n":1}"#, r#"{"id":2,"n":2}"#],
    );
    let db = Db::new(tmp.path());
    assert_eq!(
        db.change(r#"INSERT INTO t VALUES ('{"id":3,"n":3}'), ('{"id":4,"n":4,"tags":["a"]}')"#),
        2
    );
    // A key present: PostgreSQL's unique violation, and nothing of the statement is loaded.
    let (message, code) = db.error(r#"INSERT INTO t VALUES ('{"id":5}'), ('{"id":3,"n":30}')"#);
    assert!(message.contains("already in the table"), "{message}");
    assert_eq!(code, "", "an engine error, mapped to 23505 by the server");
    assert_eq!(db.documents("t").len(), 4);
    assert_eq!(
        db.change(
            r#"INSERT INTO t VALUES ('{"id":3,"n":30}'), ('{"id":5,"n":5}') ON CONFLICT DO NOTHING"#
        ),
        1
    );
    assert_eq!(
        db.change(
            r#"INSERT INTO t VALUES ('{"id":3,"n":31}') ON CONFLICT (data) DO UPDATE SET data = EXCLUDED.data"#
        ),
        1
    );
    assert_eq!(
        db.change(r#"UPDATE t SET data = data || '{"n": 100, "seen": true}' WHERE data.n >= 5"#),
        2
    );
    assert_eq!(
        db.change("UPDATE t SET data = jsonb_set(data, '{tags,0}', '\"b\"') WHERE data.id = 4"),
        1
    );
    assert_eq!(db.change("UPDATE t SET data = data WHERE data.id = 99"), 0);
    assert_eq!(
        db.change("DELETE FROM t WHERE data.id = 2 OR data.id = 99"),
        1
    );
    assert_eq!(
        db.documents("t"),
        vec![
            json(r#"{"id":1,"n":1}"#),
            json(r#"{"id":3,"n":100,"seen":true}"#),
            json(r#"{"id":4,"n":4,"tags":["b"]}"#),
            json(r#"{"id":5,"n":100,"seen":true}"#),
        ]
    );
    // Queries and point reads see the same.
    assert!(
        db.text("SELECT data.n FROM t WHERE data.id = 3")
            .contains("| 100")
    );
    assert!(
        db.text("SELECT count(*) FROM t WHERE data.id = 2")
            .contains("| 0 ")
    );
    assert!(db.text("SELECT count(*) FROM t").contains("| 4 "));
    merge_parts(&DataDir::new(tmp.path()), "t", &MergeOptions::default()).unwrap();
    assert_eq!(db.documents("t").len(), 4);
    assert_eq!(db.change("DELETE FROM t"), 4);
    assert!(db.documents("t").is_empty());
}

#[test]
fn bad_statements_change_nothing_and_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    create(
        tmp.path(),
        "t",
        Some(("id", KeyType::String)),
        &[r#"{"id":"a","n":1}"#],
    );
    create(tmp.path(), "plain", None, &[r#"{"id":"x"}"#]);
    let db = Db::new(tmp.path());
    for (sql, code, says) in [
        (
            r#"INSERT INTO t VALUES ('{"n":2}')"#,
            "23502",
            "the key path id is missing",
        ),
        (
            r#"INSERT INTO t VALUES ('{"id":7}')"#,
            "23502",
            "holds the integer 7",
        ),
        (
            r#"INSERT INTO t VALUES ('{"id":"b",')"#,
            "22P02",
            "invalid input syntax for type json",
        ),
        (
            r#"INSERT INTO t VALUES ('[1]')"#,
            "22P02",
            "expected an object",
        ),
        ("INSERT INTO t VALUES (NULL)", "23502", "NULL document"),
        // An UPDATE may change a key, but to one of the table's key type only.
        (
            r#"UPDATE t SET data = '{"id":7}'"#,
            "23502",
            "holds the integer 7",
        ),
        ("UPDATE t SET data = NULL", "23502", "cannot delete"),
        ("DELETE FROM plain", "0A000", "needs a table with a key"),
        (
            r#"INSERT INTO plain VALUES ('{"id":"y"}') ON CONFLICT DO NOTHING"#,
            "0A000",
            "has no key",
        ),
        // RETURNING does not save a statement that fails.
        (
            "INSERT INTO t VALUES ('{}') RETURNING data",
            "23502",
            "the key path id is missing",
        ),
    ] {
        let (message, sqlstate) = db.error(sql);
        assert_eq!(sqlstate, code, "{sql}: {message}");
        assert!(message.contains(says), "{sql}: {message}");
    }
    assert_eq!(db.documents("t"), vec![json(r#"{"id":"a","n":1}"#)]);
    // A table without a key takes plain inserts.
    assert_eq!(
        db.change(
            r#"INSERT INTO plain SELECT '{"id":"' || x || '"}' FROM (VALUES ('p'), ('q')) v(x)"#
        ),
        2
    );
    assert_eq!(db.documents("plain").len(), 3);
}

/// An `UPDATE … WHERE <key> = <value>` is answered without a planned query
/// (`strata_query::point_update`); the same statement with a condition the point path does not
/// take (`AND true`) is planned. Both must change the same documents the same way.
#[test]
fn a_point_update_changes_what_the_planned_update_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let documents = [
        r#"{"id":1,"n":1,"tags":["a","b"],"o":{"x":1.5,"s":"é"}}"#,
        r#"{"id":2,"n":"two","o":null}"#,
        r#"{"id":3,"n":3,"deep":{"a":{"b":[1,{"c":2}]}}}"#,
    ];
    for table in ["point", "planned"] {
        create(
            tmp.path(),
            table,
            Some(("id", KeyType::Integer)),
            &documents,
        );
    }
    let db = Db::new(tmp.path());
    let statements = [
        ("data || '{\"seen\": true}'", "data.id = 1"),
        (
            "jsonb_set(data, '{n}', to_jsonb((data->>'n')::int + 1))",
            "data->>'id' = '3'",
        ),
        ("jsonb_set(data, '{tags,0}', '\"z\"')", "1 = data.id"),
        ("data || '{\"o\": {\"y\": 2}}'", "data.id = 2"),
        (
            "jsonb_set(data, '{deep,a,b,1,c}', to_jsonb(data->>'n'))",
            "data.id = 3",
        ),
        ("'{\"id\": 2, \"replaced\": true}'", "data.id = 2"),
        ("data", "data.id = 99"),
        ("data", "data->>'id' = '01'"),
        // Functions the optimizer rewrites before they can run (`coalesce` into a `CASE`).
        (
            "jsonb_set(data, '{m}', to_jsonb(coalesce(data->>'missing', 'none')))",
            "data.id = 2",
        ),
        // The key moves: the old one is deleted, the new one written.
        ("jsonb_set(data, '{id}', '7')", "data.id = 1"),
    ];
    for (value, condition) in statements {
        let point = db.change(&format!(
            "UPDATE point SET data = {value} WHERE {condition}"
        ));
        let planned = db.change(&format!(
            "UPDATE planned SET data = {value} WHERE {condition} AND true"
        ));
        assert_eq!(point, planned, "{value} WHERE {condition}");
        assert_eq!(
            db.documents("point"),
            db.documents("planned"),
            "{value} WHERE {condition}"
        );
    }
    // Errors alike too: a NULL document, a key of another type.
    for value in ["NULL", "'{\"id\": \"seven\"}'", "'[1]'"] {
        let (point, _) = db.error(&format!(
            "UPDATE point SET data = {value} WHERE data.id = 3"
        ));
        let (planned, _) = db.error(&format!(
            "UPDATE planned SET data = {value} WHERE data.id = 3 AND true"
        ));
        assert_eq!(point, planned, "{value}");
    }
    assert_eq!(db.documents("point").len(), 3);
}
