//! A session caches each table's parsed manifest; every statement still takes the current
//! snapshot, so an ingest or merge between two statements is seen by the second.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use strata_engine::input::Input;
use strata_engine::merge::{MergeOptions, merge_parts};
use strata_engine::{DataDir, IngestOptions, ingest};
use strata_query::Session;

fn ingest_rows(dir: &DataDir, from: i64, to: i64) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for n in from..to {
        writeln!(file, r#"{{"n":{n}}}"#).unwrap();
    }
    ingest(
        dir,
        "t",
        &[Input::File(file.path().to_owned())],
        &IngestOptions::default(),
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap();
}

async fn count_and_sum(session: &Session) -> (i64, i64) {
    let result = session
        .run("SELECT count(*), sum(data.n) FROM t")
        .await
        .unwrap();
    let batch = &result.batches[0];
    (
        batch.column(0).as_primitive::<Int64Type>().value(0),
        batch.column(1).as_primitive::<Int64Type>().value(0),
    )
}

#[test]
fn each_statement_sees_the_table_as_last_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(tmp.path()).unwrap();
        assert!(session.run("SELECT count(*) FROM t").await.is_err());
        ingest_rows(&dir, 0, 10);
        assert_eq!(count_and_sum(&session).await, (10, 45));
        assert_eq!(count_and_sum(&session).await, (10, 45));
        ingest_rows(&dir, 10, 20);
        assert_eq!(count_and_sum(&session).await, (20, 190));
        merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
        assert_eq!(count_and_sum(&session).await, (20, 190));
    });
}

/// Sets the modification time of `t`'s manifest to a moment long past (the same every time).
fn age_manifest(root: &std::path::Path) {
    let path = root.join("t").join(strata_format::manifest::MANIFEST_FILE);
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

/// A manifest left unchanged for a while is not read again by every statement (its stamp
/// answers); a commit replaces the file, and the next statement reads the new one even when
/// the new file carries the same modification time.
#[test]
fn a_settled_manifest_is_kept_by_its_stamp_until_a_commit_replaces_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(tmp.path()).unwrap();
        ingest_rows(&dir, 0, 10);
        age_manifest(tmp.path());
        assert_eq!(count_and_sum(&session).await, (10, 45));
        assert_eq!(count_and_sum(&session).await, (10, 45));
        ingest_rows(&dir, 10, 20);
        age_manifest(tmp.path());
        assert_eq!(count_and_sum(&session).await, (20, 190));
    });
}
