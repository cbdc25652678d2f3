//! Joins of documents by key answered without planning (`strata_query::key_join`): after the
//! first statement of a shape is planned, the others are answered from two point reads, with
//! the rows and the result schema the planned statement has — for found, missing and NULL
//! join values, integer keys, projected paths missing or of other kinds (planned then), and in
//! a transaction with its own changes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::path::Path;

use strata_json::KeyType;
use strata_query::Session;
use strata_query::key_join::KeyJoin;
use strata_query::point_read::{BoundValue, PointValue};

fn tables(root: &Path) {
    common::create(
        root,
        "schedules",
        Some(("id", KeyType::String)),
        &[
            r#"{"id": "1", "aircraft": "A1", "minutes": 90, "from": "CDG"}"#,
            r#"{"id": "2", "aircraft": "A2", "minutes": 45, "from": "LHR"}"#,
            r#"{"id": "3", "minutes": 60, "from": "AMS"}"#,
            r#"{"id": "4", "aircraft": "A9", "minutes": 30}"#,
            r#"{"id": "5", "aircraft": "A1", "minutes": 12.5, "from": {"city": "Oslo"}}"#,
            r#"{"id": "6", "aircraft": "7", "minutes": 20, "from": null}"#,
        ],
    );
    common::create(
        root,
        "aircraft",
        Some(("code", KeyType::String)),
        &[
            r#"{"code": "A1", "seats": 180, "maker": "Airbus"}"#,
            r#"{"code": "A2", "seats": 70}"#,
            r#"{"code": "7", "seats": 9}"#,
        ],
    );
    common::create(
        root,
        "gates",
        Some(("number", KeyType::Integer)),
        &[
            r#"{"number": 7, "hall": "B"}"#,
            r#"{"number": 8, "hall": "C"}"#,
        ],
    );
}

fn rows(session: &Session, sql: &str) -> (Vec<String>, Vec<String>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let result = runtime
        .block_on(session.run(sql))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let fields = result
        .schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    let mut rows = common::rows(&result.batches);
    rows.sort();
    (fields, rows)
}

const STATEMENTS: &[&str] = &[
    // The booking's read, for found, missing and NULL join values and a missing document.
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'",
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '2'",
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '3'",
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '4'",
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = 'none'",
    // A fraction projected: planned.
    "SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a \
     ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '5'",
    // Names, the WHERE on the joined side, the equalities turned around, a missing path.
    "SELECT a.data->>'maker' AS maker, s.data->>'from' AS origin FROM aircraft a \
     INNER JOIN schedules s ON s.data->>'aircraft' = a.data->>'code' WHERE '1' = s.data->>'id'",
    "SELECT a.data->>'maker' AS maker, s.data->>'from' AS origin FROM aircraft a \
     INNER JOIN schedules s ON s.data->>'aircraft' = a.data->>'code' WHERE '2' = s.data->>'id'",
    // An object and a null projected.
    "SELECT a.data->>'maker' AS maker, s.data->>'from' AS origin FROM aircraft a \
     INNER JOIN schedules s ON s.data->>'aircraft' = a.data->>'code' WHERE '5' = s.data->>'id'",
    "SELECT a.data->>'maker' AS maker, s.data->>'from' AS origin FROM aircraft a \
     INNER JOIN schedules s ON s.data->>'aircraft' = a.data->>'code' WHERE '6' = s.data->>'id'",
    // A joined table keyed by an integer, compared as text.
    "SELECT g.data->>'hall' FROM schedules s JOIN gates g ON g.data->>'number' = s.data->>'aircraft' \
     WHERE s.data->>'id' = '6'",
    "SELECT g.data->>'hall' FROM schedules s JOIN gates g ON g.data->>'number' = s.data->>'aircraft' \
     WHERE s.data->>'id' = '1'",
];

#[test]
fn key_joins_answer_as_the_planned_statements_do() {
    let tmp = tempfile::tempdir().unwrap();
    tables(tmp.path());
    let session = Session::open(tmp.path()).unwrap();
    let planned = Session::open_without_pruning(tmp.path()).unwrap();
    for sql in STATEMENTS {
        assert!(KeyJoin::parse(sql).is_some(), "{sql}");
        // Twice: the first of a shape is planned, the second answered without planning.
        for _ in 0..2 {
            assert_eq!(rows(&session, sql), rows(&planned, sql), "{sql}");
        }
    }
    // Of the twelve statements, the first of each of the three shapes was planned, and
    // statement 6 (a fraction projected) and 9 (an object projected) are planned each time.
    assert_eq!(session.key_joins().answered(), 2 * 12 - 3 - 2 - 2);
    assert_eq!(planned.key_joins().answered(), 0);
}

#[test]
fn other_statements_are_not_key_joins() {
    for sql in [
        "SELECT s.data->>'minutes' FROM schedules s WHERE s.data->>'id' = '1'",
        "SELECT s.data->>'minutes' FROM schedules s JOIN aircraft a \
         ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1' ORDER BY 1",
        "SELECT s.data->>'minutes' FROM schedules s LEFT JOIN aircraft a \
         ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'",
        "SELECT s.data->>'minutes' FROM schedules s JOIN aircraft a \
         ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1' AND true",
        "SELECT count(*) FROM schedules s JOIN aircraft a \
         ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'",
        "SELECT s.data->'minutes' FROM schedules s JOIN aircraft a \
         ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'",
        "SELECT s.data->>'minutes' FROM schedules s JOIN aircraft s \
         ON s.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'",
    ] {
        assert_eq!(KeyJoin::parse(sql), None, "{sql}");
    }
    // One shape whatever the literal; another for another name.
    let shape = |sql: &str| KeyJoin::parse(sql).unwrap().shape().to_owned();
    let base = "SELECT s.data->>'minutes' FROM schedules s JOIN aircraft a \
                ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = ";
    assert_eq!(shape(&format!("{base}'1'")), shape(&format!("{base}'22'")));
    assert_ne!(
        shape(&format!("{base}'1'")),
        shape(&format!("{base}'1'").replace("'minutes'", "'minutes' AS m"))
    );
}

#[test]
fn a_transaction_joins_its_own_changes() {
    let tmp = tempfile::tempdir().unwrap();
    tables(tmp.path());
    let session = Session::open(tmp.path()).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let transaction = session.begin().unwrap();
        transaction
            .run(r#"INSERT INTO aircraft VALUES ('{"code": "A9", "seats": 4}')"#)
            .await
            .unwrap();
        transaction
            .run(
                r#"UPDATE aircraft SET data = data || '{"seats": 190}' WHERE data->>'code' = 'A1'"#,
            )
            .await
            .unwrap();
        let join = |id: &str| {
            format!(
                "SELECT a.data->>'seats' FROM schedules s JOIN aircraft a \
                 ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '{id}'"
            )
        };
        for (id, seats) in [("4", "4"), ("1", "190"), ("4", "4"), ("1", "190")] {
            let result = transaction.key_join(&join(id)).await.unwrap().unwrap();
            assert_eq!(common::rows(&result.batches), [seats], "{id}");
        }
        assert_eq!(session.key_joins().answered(), 3);
        drop(transaction); // rolled back
    });
    // Rolled back: the session reads the tables as they were.
    let sql = "SELECT a.data->>'seats' FROM schedules s JOIN aircraft a \
               ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = '1'";
    assert_eq!(rows(&session, sql).1, ["180"]);
}

#[test]
fn a_prepared_key_join_is_parsed_once_and_answers_with_each_value() {
    let tmp = tempfile::tempdir().unwrap();
    tables(tmp.path());
    let session = Session::open(tmp.path()).unwrap();
    let literal = |id: &str| {
        format!(
            "SELECT a.data->>'seats', s.data->>'minutes' FROM schedules s JOIN aircraft a \
             ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = {id}"
        )
    };
    let template = KeyJoin::parse(&literal("$1")).unwrap();
    assert_eq!(template.value(), &PointValue::Parameter(1));
    // One shape with the literal statements: their result schema serves it.
    assert_eq!(
        template.shape(),
        KeyJoin::parse(&literal("'1'")).unwrap().shape()
    );
    let ids = ["1", "2", "4", "9"];
    let planned_session = Session::open_without_pruning(tmp.path()).unwrap();
    let planned: Vec<Vec<String>> = ids
        .iter()
        .map(|id| rows(&planned_session, &literal(&format!("'{id}'"))).1)
        .collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let transaction = session.begin().unwrap();
        // Not planned yet: the template alone cannot answer.
        let value = BoundValue::Text("1".into());
        assert!(
            transaction
                .bound_key_join(&template, &value)
                .await
                .unwrap()
                .is_none()
        );
        transaction
            .key_join(&literal("'1'"))
            .await
            .unwrap()
            .unwrap();
        for (id, planned) in ids.iter().zip(&planned) {
            let value = BoundValue::Text((*id).into());
            let bound = transaction
                .bound_key_join(&template, &value)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&common::rows(&bound.batches), planned, "{id}");
        }
        assert_eq!(session.key_joins().answered(), 4);
    });
    assert_eq!(planned[0], ["180 | 90"]);
}
