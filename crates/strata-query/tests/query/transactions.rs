//! Transactions (issue 14, ADR 0017): one snapshot for every statement, the transaction's own
//! changes visible to it and to no one else before COMMIT, first committer wins on a key (the
//! later gets a write conflict), rollback leaves nothing, several tables commit together, and
//! concurrent increments of one counter lose none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use strata_engine::{DataDir, MergeOptions, export_table, merge_parts};
use strata_json::KeyType;
use strata_query::{QueryError, Session, Transaction, is_write_conflict};

use common::create;

/// The first column of every row, as text, sorted.
async fn texts(transaction: &Transaction, sql: &str) -> Vec<String> {
    let batches = transaction.run(sql).await.unwrap().batches;
    column_texts(&batches)
}

async fn session_texts(session: &Session, sql: &str) -> Vec<String> {
    column_texts(&session.run(sql).await.unwrap().batches)
}

fn column_texts(batches: &[arrow::record_batch::RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        let column =
            arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
        let strings = column.as_string::<i32>();
        out.extend((0..strings.len()).map(|i| strings.value(i).to_owned()));
    }
    out.sort();
    out
}

/// The statement that sets the balance of account `id`.
fn set(id: &str, balance: u32) -> String {
    format!(
        "UPDATE accounts SET data = jsonb_set(data, '{{balance}}', '{balance}') WHERE data->>'id' = '{id}'"
    )
}

async fn count(transaction: &Transaction, sql: &str) -> u64 {
    let batches = transaction.run(sql).await.unwrap().batches;
    batches[0]
        .column(0)
        .as_primitive::<arrow::datatypes::UInt64Type>()
        .value(0)
}

/// The table's documents through export, in a canonical form (key order is not kept).
fn exported(root: &Path, table: &str) -> Vec<String> {
    let mut out = Vec::new();
    export_table(&DataDir::new(root), table, &mut out).unwrap();
    let mut lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(canonical)
        .collect();
    lines.sort();
    lines
}

fn canonical(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .unwrap()
        .to_string()
}

fn accounts(root: &Path) {
    create(
        root,
        "accounts",
        Some(("id", KeyType::String)),
        &[
            r#"{"id":"a","balance":100}"#,
            r#"{"id":"b","balance":100}"#,
            r#"{"id":"c","balance":100}"#,
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_reads_one_snapshot_and_its_own_changes() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    let ids = "SELECT data->>'id' FROM accounts";
    assert_eq!(texts(&transaction, ids).await, ["a", "b", "c"]);

    // A commit after the snapshot is not seen by the transaction.
    session
        .run(r#"INSERT INTO accounts VALUES ('{"id":"d","balance":1}')"#)
        .await
        .unwrap();
    assert_eq!(texts(&transaction, ids).await, ["a", "b", "c"]);

    // Its own changes are, in every later statement (a private view), and by no one else.
    assert_eq!(
        count(
            &transaction,
            r#"INSERT INTO accounts VALUES ('{"id":"e","balance":5}')"#
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &transaction,
            "UPDATE accounts SET data = jsonb_set(data, '{balance}', '0') WHERE data->>'id' = 'a'"
        )
        .await,
        1
    );
    assert_eq!(
        count(&transaction, "DELETE FROM accounts WHERE data->>'id' = 'b'").await,
        1
    );
    assert_eq!(texts(&transaction, ids).await, ["a", "c", "e"]);
    assert_eq!(
        texts(
            &transaction,
            "SELECT data->>'balance' FROM accounts WHERE data->>'id' = 'a'"
        )
        .await,
        ["0"]
    );
    // A change reads the view too: the second update sees the first.
    transaction
        .run("UPDATE accounts SET data = jsonb_set(data, '{balance}', '7') WHERE data->>'balance' = '0'")
        .await
        .unwrap();
    assert_eq!(
        texts(
            &transaction,
            "SELECT data->>'balance' FROM accounts WHERE data->>'id' = 'a'"
        )
        .await,
        ["7"]
    );
    assert_eq!(
        session_texts(&session, ids).await,
        ["a", "b", "c", "d"],
        "uncommitted changes are private"
    );

    let summary = transaction.commit().await.unwrap();
    assert_eq!(summary.tables, ["accounts"]);
    assert_eq!(session_texts(&session, ids).await, ["a", "c", "d", "e"]);
    assert_eq!(
        exported(dir.path(), "accounts"),
        [
            r#"{"balance":1,"id":"d"}"#,
            r#"{"balance":100,"id":"c"}"#,
            r#"{"balance":5,"id":"e"}"#,
            r#"{"balance":7,"id":"a"}"#,
        ]
    );
    // No private view file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("accounts/parts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("view-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_committer_wins_and_the_other_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let first = session.begin().unwrap();
    let second = session.begin().unwrap();
    let disjoint = session.begin().unwrap();
    first.run(&set("a", 1)).await.unwrap();
    second.run(&set("a", 2)).await.unwrap();
    disjoint.run(&set("b", 3)).await.unwrap();
    first.commit().await.unwrap();
    let error = second.commit().await.unwrap_err();
    assert!(is_write_conflict(&error), "{error}");
    assert!(error.to_string().contains(r#"key "a""#), "{error}");
    // A transaction that wrote other keys commits.
    disjoint.commit().await.unwrap();
    assert_eq!(
        exported(dir.path(), "accounts"),
        [
            r#"{"balance":1,"id":"a"}"#,
            r#"{"balance":100,"id":"c"}"#,
            r#"{"balance":3,"id":"b"}"#,
        ]
    );

    // Deleting a key another commit changed conflicts too, and so does inserting a key another
    // commit inserted first.
    let deleter = session.begin().unwrap();
    deleter
        .run("DELETE FROM accounts WHERE data->>'id' = 'c'")
        .await
        .unwrap();
    let inserter = session.begin().unwrap();
    inserter
        .run(r#"INSERT INTO accounts VALUES ('{"id":"z","balance":0}')"#)
        .await
        .unwrap();
    session.run(&set("c", 9)).await.unwrap();
    session
        .run(r#"INSERT INTO accounts VALUES ('{"id":"z","balance":1}')"#)
        .await
        .unwrap();
    assert!(is_write_conflict(&deleter.commit().await.unwrap_err()));
    assert!(is_write_conflict(&inserter.commit().await.unwrap_err()));
    let documents: Vec<String> = session_texts(
        &session,
        "SELECT data FROM accounts WHERE data->>'id' IN ('c', 'z')",
    )
    .await
    .iter()
    .map(|d| canonical(d))
    .collect();
    assert_eq!(
        documents,
        [r#"{"balance":1,"id":"z"}"#, r#"{"balance":9,"id":"c"}"#]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_during_a_transaction_is_not_a_conflict_but_a_newer_write_it_carries_is() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    create(
        dir.path(),
        "accounts",
        None,
        &[r#"{"id":"d","balance":100}"#],
    );
    let session = Session::open(dir.path()).unwrap();
    // The merge moves every row written before the transaction began: no conflict.
    let transaction = session.begin().unwrap();
    transaction.run(&set("a", 1)).await.unwrap();
    let merged = merge_parts(
        &DataDir::new(dir.path()),
        "accounts",
        &MergeOptions::default(),
    )
    .unwrap();
    assert_eq!(merged.inputs_merged, 2);
    transaction.commit().await.unwrap();

    // A merge that carries a row written after the snapshot into the key's part: conflict.
    let transaction = session.begin().unwrap();
    transaction.run(&set("b", 2)).await.unwrap();
    session.run(&set("b", 3)).await.unwrap();
    merge_parts(
        &DataDir::new(dir.path()),
        "accounts",
        &MergeOptions::default(),
    )
    .unwrap();
    assert!(is_write_conflict(&transaction.commit().await.unwrap_err()));
    assert_eq!(
        exported(dir.path(), "accounts"),
        [
            r#"{"balance":1,"id":"a"}"#,
            r#"{"balance":100,"id":"c"}"#,
            r#"{"balance":100,"id":"d"}"#,
            r#"{"balance":3,"id":"b"}"#,
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_leaves_nothing_and_failed_statements_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let before = exported(dir.path(), "accounts");
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    transaction
        .run(r#"INSERT INTO accounts VALUES ('{"id":"x","balance":1}')"#)
        .await
        .unwrap();
    // A key present (in the snapshot, or written by this transaction) fails a plain INSERT,
    // and the statement's other documents are not inserted either.
    for sql in [
        r#"INSERT INTO accounts VALUES ('{"id":"y","balance":1}'), ('{"id":"a","balance":1}')"#,
        r#"INSERT INTO accounts VALUES ('{"id":"x","balance":2}')"#,
    ] {
        let Err(error) = transaction.run(sql).await else {
            panic!("{sql} succeeded");
        };
        assert!(
            error.to_string().contains("already in the table"),
            "{error}"
        );
    }
    assert_eq!(
        texts(&transaction, "SELECT data->>'id' FROM accounts").await,
        ["a", "b", "c", "x"]
    );
    // A key this transaction deleted may be inserted again; DO NOTHING skips present keys.
    transaction
        .run("DELETE FROM accounts WHERE data->>'id' = 'a'")
        .await
        .unwrap();
    assert_eq!(
        count(
            &transaction,
            r#"INSERT INTO accounts VALUES ('{"id":"a","balance":5}'), ('{"id":"b","balance":5}') ON CONFLICT DO NOTHING"#
        )
        .await,
        1
    );
    drop(transaction);
    assert_eq!(exported(dir.path(), "accounts"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_tables_commit_together() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    create(dir.path(), "transfers", None, &[r#"{"id":0}"#]);
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    transaction
        .run(
            "UPDATE accounts SET data = jsonb_set(data, '{balance}', '90') WHERE data->>'id' = 'a'",
        )
        .await
        .unwrap();
    transaction
        .run("UPDATE accounts SET data = jsonb_set(data, '{balance}', '110') WHERE data->>'id' = 'b'")
        .await
        .unwrap();
    transaction
        .run(r#"INSERT INTO transfers VALUES ('{"id":1,"from":"a","to":"b","amount":10}')"#)
        .await
        .unwrap();
    let summary = transaction.commit().await.unwrap();
    assert_eq!(summary.tables, ["accounts", "transfers"]);
    assert_eq!(
        session_texts(
            &session,
            "SELECT sum(CAST(data->>'balance' AS BIGINT)) FROM accounts"
        )
        .await,
        ["300"]
    );
    assert_eq!(exported(dir.path(), "transfers").len(), 2);
    // The commit point left nothing behind.
    let records = dir.path().join(".transactions");
    assert!(
        !records.exists() || std::fs::read_dir(&records).unwrap().next().is_none(),
        "an intent record was left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_lose_none() {
    let dir = tempfile::tempdir().unwrap();
    create(
        dir.path(),
        "counters",
        Some(("id", KeyType::Integer)),
        &[r#"{"id":1,"n":0}"#],
    );
    let session = Arc::new(Session::open(dir.path()).unwrap());
    let (clients, increments) = (4, 12);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            let mut retries = 0;
            for _ in 0..increments {
                loop {
                    // A read-modify-write in a transaction: read, then write what was read + 1.
                    let transaction = session.begin().unwrap();
                    let n: i64 = texts(
                        &transaction,
                        "SELECT data->>'n' FROM counters WHERE data->>'id' = '1'",
                    )
                    .await[0]
                        .parse()
                        .unwrap();
                    transaction
                        .run(&format!(
                            "UPDATE counters SET data = jsonb_set(data, '{{n}}', '{}') WHERE data->>'id' = '1'",
                            n + 1
                        ))
                        .await
                        .unwrap();
                    match transaction.commit().await {
                        Ok(_) => break,
                        Err(e) if is_write_conflict(&e) => retries += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            retries
        }));
    }
    // Single statements increment too, each in a transaction of its own retried on conflict.
    let autocommit = {
        let session = session.clone();
        tokio::spawn(async move {
            for _ in 0..increments {
                session
                    .run("UPDATE counters SET data = jsonb_set(data, '{n}', CAST(CAST(data->>'n' AS BIGINT) + 1 AS VARCHAR)) WHERE data->>'id' = '1'")
                    .await
                    .unwrap();
            }
        })
    };
    let mut retries = 0;
    for task in tasks {
        retries += task.await.unwrap();
    }
    autocommit.await.unwrap();
    let expected = (clients + 1) * increments;
    assert_eq!(
        session_texts(&session, "SELECT data->>'n' FROM counters").await,
        [expected.to_string()],
        "{retries} retries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_cannot_run_in_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    match transaction.run("DROP TABLE accounts").await {
        Err(QueryError::Statement { sqlstate, .. }) => assert_eq!(sqlstate, "25001"),
        other => panic!("{:?}", other.map(|r| r.batches)),
    }
    assert_eq!(exported(dir.path(), "accounts").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_answers_the_documents_changed() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    let rows = |result: strata_query::QueryResult| column_texts(&result.batches);
    assert_eq!(
        rows(
            transaction
                .run(r#"INSERT INTO accounts VALUES ('{"id":"x","balance":1}') RETURNING data->>'id'"#)
                .await
                .unwrap()
        ),
        ["x"]
    );
    assert_eq!(
        rows(
            transaction
                .run("UPDATE accounts AS a SET data = jsonb_set(a.data, '{balance}', '5') WHERE a.data->>'id' IN ('a', 'x') RETURNING a.data->>'balance'")
                .await
                .unwrap()
        ),
        ["5", "5"]
    );
    assert_eq!(
        rows(
            transaction
                .run("DELETE FROM accounts WHERE data->>'id' = 'b' RETURNING data")
                .await
                .unwrap()
        )
        .iter()
        .map(|d| canonical(d))
        .collect::<Vec<_>>(),
        [r#"{"balance":100,"id":"b"}"#]
    );
    // Nothing changed: no rows, and the columns still there.
    let none = transaction
        .run("DELETE FROM accounts WHERE data->>'id' = 'nobody' RETURNING data->>'id' AS id")
        .await
        .unwrap();
    assert!(none.batches.iter().all(|b| b.num_rows() == 0));
    assert_eq!(none.schema.field(0).name(), "id");
    transaction.commit().await.unwrap();
    // Outside a block too.
    assert_eq!(
        column_texts(
            &session
                .run(r#"INSERT INTO accounts VALUES ('{"id":"y","balance":2}') RETURNING data->>'balance'"#)
                .await
                .unwrap()
                .batches
        ),
        ["2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_in_a_transaction_see_its_snapshot_and_its_own_changes() {
    use strata_query::point_read::{PointRead, PointValue};
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    let direct = |sql: &'static str| {
        let transaction = &transaction;
        async move {
            let read = PointRead::parse(sql).unwrap();
            let PointValue::Literal(value) = &read.value else {
                panic!("a literal: {sql}");
            };
            let result = transaction.point_read(&read, value).await.unwrap();
            column_texts(&result.unwrap_or_else(|| panic!("planned: {sql}")).batches)
        }
    };
    let a = "SELECT data FROM accounts WHERE data->>'id' = 'a'";
    let d = "SELECT data FROM accounts WHERE data->>'id' = 'd'";
    assert_eq!(direct(a).await, [r#"{"balance":100,"id":"a"}"#]);
    // Committed after the snapshot: not seen.
    session
        .run(r#"INSERT INTO accounts VALUES ('{"id":"d","balance":1}')"#)
        .await
        .unwrap();
    assert!(direct(d).await.is_empty());
    // The transaction's own changes are (its private view), as the planned query sees them.
    transaction.run(&set("a", 7)).await.unwrap();
    transaction
        .run(r#"INSERT INTO accounts VALUES ('{"id":"e","balance":5}')"#)
        .await
        .unwrap();
    transaction
        .run("DELETE FROM accounts WHERE data->>'id' = 'b'")
        .await
        .unwrap();
    for sql in [
        a,
        "SELECT data FROM accounts WHERE data->>'id' = 'b'",
        "SELECT data FROM accounts WHERE data->>'id' = 'e'",
        d,
    ] {
        let planned = format!("{} AND true", sql);
        assert_eq!(
            direct(sql).await,
            texts(&transaction, &planned).await,
            "{sql}"
        );
    }
    assert_eq!(direct(a).await, [r#"{"balance":7,"id":"a"}"#]);
}

/// Single statements of a `SERIALIZABLE` client (`Session::run_at`): each doctor's statement
/// takes them off call only if two are on call, a read of the whole table. At snapshot
/// isolation two such statements running together can both see two on call and both commit
/// (write skew: nobody on call); serializable, the second one's read was changed by the first
/// one's commit, and it runs again on a newer snapshot, where it changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_single_statements_run_again_after_a_read_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let doctors = [r#"{"id":1,"on_call":true}"#, r#"{"id":2,"on_call":true}"#];
    create(
        dir.path(),
        "doctors",
        Some(("id", KeyType::Integer)),
        &doctors,
    );
    let session = Arc::new(Session::open(dir.path()).unwrap());
    let off_call = |id: u32| {
        format!(
            "UPDATE doctors SET data = jsonb_set(data, '{{on_call}}', 'false') WHERE data.id = {id} \
             AND (SELECT count(*) FROM doctors WHERE data.on_call = true) = 2"
        )
    };
    let on_call = |id: u32| {
        format!(
            "UPDATE doctors SET data = jsonb_set(data, '{{on_call}}', 'true') WHERE data.id = {id}"
        )
    };
    for round in 0..40 {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for id in [1, 2] {
            let (session, barrier, sql) = (session.clone(), barrier.clone(), off_call(id));
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                session.run_at(&sql, true).await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let left = session_texts(
            &session,
            "SELECT count(*) FROM doctors WHERE data.on_call = true",
        )
        .await;
        assert_eq!(
            left,
            ["1"],
            "round {round}: the doctors on call after both statements"
        );
        for id in [1, 2] {
            session.run(&on_call(id)).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_in_a_transaction_finds_what_its_own_changes_left() {
    let dir = tempfile::tempdir().unwrap();
    accounts(dir.path());
    let session = Session::open(dir.path()).unwrap();
    let transaction = session.begin().unwrap();
    let upsert = |id: &str, balance: u32, condition: &str| {
        format!(
            r#"INSERT INTO accounts VALUES ('{{"id":"{id}","balance":{balance}}}')
               ON CONFLICT ((data->>'id')) DO UPDATE
               SET data = jsonb_set(accounts.data, '{{balance}}',
                   to_jsonb((accounts.data->>'balance')::int + (EXCLUDED.data->>'balance')::int)){condition}"#
        )
    };
    // Inserted by the transaction, then found by the upsert: updated.
    transaction
        .run(r#"INSERT INTO accounts VALUES ('{"id":"x","balance":1}')"#)
        .await
        .unwrap();
    assert_eq!(count(&transaction, &upsert("x", 10, "")).await, 1);
    // Deleted by the transaction: the upsert inserts it again.
    transaction
        .run("DELETE FROM accounts WHERE data->>'id' = 'a'")
        .await
        .unwrap();
    assert_eq!(count(&transaction, &upsert("a", 7, "")).await, 1);
    // Present in the snapshot, and the condition does not hold: neither updated nor inserted.
    let not_taken = " WHERE (accounts.data->>'balance')::int > 1000";
    assert_eq!(count(&transaction, &upsert("b", 5, not_taken)).await, 0);
    // Present in the snapshot: updated.
    assert_eq!(count(&transaction, &upsert("c", 5, "")).await, 1);
    transaction.commit().await.unwrap();
    let balances = session_texts(
        &session,
        "SELECT (data->>'id') || '=' || (data->>'balance') FROM accounts",
    )
    .await;
    assert_eq!(balances, ["a=7", "b=100", "c=105", "x=11"]);
}
