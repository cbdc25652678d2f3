//! SQL never sees deleted rows (ADR 0015): scans skip them, and answers DataFusion takes from
//! statistics (`count(*)`, `min`, `max`) count only live rows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::util::pretty::pretty_format_batches;
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, delete_rows, ingest};
use strata_query::Session;

const DOCS: i64 = 20_000;

/// One part of documents n = 0..DOCS sorted by n, so row i holds n = i.
fn table_with_deletions(deleted: &[u64]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for n in 0..DOCS {
        writeln!(file, "{{\"n\":{n},\"kind\":\"k{}\"}}", n % 3).unwrap();
    }
    let options = IngestOptions {
        sort_key: Some(vec!["n".into()]),
        ..Default::default()
    };
    ingest(
        &dir,
        "t",
        &[Input::File(file.path().to_owned())],
        &options,
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap();
    let part = dir.manifest("t").unwrap().parts[0].file.clone();
    delete_rows(&dir, "t", &[(part, deleted.to_vec())].into()).unwrap();
    tmp
}

fn run(root: &std::path::Path, sql: &str) -> Vec<arrow::record_batch::RecordBatch> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(root).unwrap();
        session.run(sql).await.unwrap().batches
    })
}

/// The single integer a query answers (NULL as None).
fn scalar(root: &std::path::Path, sql: &str) -> Option<i64> {
    let batches = run(root, sql);
    let column = cast(batches[0].column(0), &DataType::Int64).unwrap();
    let values = column.as_primitive::<Int64Type>();
    (!values.is_null(0)).then(|| values.value(0))
}

#[test]
fn queries_skip_deleted_rows_also_when_answered_from_statistics() {
    // Deleted rows skipped by the plan (a few and a block), and scattered deleted rows (every
    // 7th too) that the plan reads and each read drops after decoding: the answers, those from
    // statistics included, count live rows only either way.
    let mut skipped: Vec<u64> = vec![0, 1, 100, DOCS as u64 - 1];
    skipped.extend(5_000..6_000);
    let mut scattered = skipped.clone();
    scattered.extend((0..DOCS as u64).filter(|n| n % 7 == 3 && !(5_000..6_000).contains(n)));
    scattered.sort_unstable();
    for deleted in [skipped, scattered] {
        check_live_answers(&deleted);
    }
}

fn check_live_answers(deleted: &[u64]) {
    let tmp = table_with_deletions(deleted);
    let root = tmp.path();
    let live = |f: &dyn Fn(i64) -> bool| {
        (0..DOCS)
            .filter(|n| !deleted.contains(&(*n as u64)) && f(*n))
            .collect::<Vec<_>>()
    };
    let count = |f: &dyn Fn(i64) -> bool| Some(live(f).len() as i64);
    assert_eq!(scalar(root, "SELECT count(*) FROM t"), count(&|_| true));
    assert_eq!(scalar(root, "SELECT min(data.n) FROM t"), Some(2));
    assert_eq!(scalar(root, "SELECT max(data.n) FROM t"), Some(DOCS - 2));
    assert_eq!(
        scalar(root, "SELECT sum(data.n) FROM t"),
        Some(live(&|_| true).iter().sum())
    );
    assert_eq!(
        scalar(root, "SELECT count(*) FROM t WHERE data.n < 10"),
        count(&|n| n < 10)
    );
    assert_eq!(
        scalar(root, "SELECT count(*) FROM t WHERE data.n = 100"),
        Some(0)
    );
    // The page of rows 8,192..16,384 lies wholly inside the range: counted from the page index.
    let sql = "SELECT count(*) FROM t WHERE data.n BETWEEN 4990 AND 19000";
    assert_eq!(scalar(root, sql), count(&|n| (4990..=19000).contains(&n)));
    let plan = pretty_format_batches(&run(root, &format!("EXPLAIN ANALYZE {sql}")))
        .unwrap()
        .to_string();
    let in_page = live(&|n| (8_192..16_384).contains(&n)).len() as f64 / 1000.0;
    assert!(
        plan.contains(&format!("rows_counted_from_statistics={in_page:.2} K")),
        "{plan}"
    );
    assert_eq!(
        scalar(root, "SELECT count(*) FROM t WHERE data.kind = 'k1'"),
        count(&|n| n % 3 == 1)
    );
    // Whole documents: the filter runs in the decoder, over the plan narrowed to live rows.
    let documents = run(
        root,
        "SELECT data FROM t WHERE data.n IN (1, 2, 3, 5500, 9)",
    );
    let rows: usize = documents.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, live(&|n| [1, 2, 3, 5500, 9].contains(&n)).len());
    let documents = run(root, "SELECT data FROM t WHERE data.n < 30");
    let rows: usize = documents.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, live(&|n| n < 30).len());

    let plan = pretty_format_batches(&run(
        root,
        "EXPLAIN ANALYZE SELECT count(*) FROM t WHERE data.kind = 'k0'",
    ))
    .unwrap()
    .to_string();
    assert!(
        plan.contains(&format!("deleted rows skipped={}", deleted.len())),
        "{plan}"
    );
}

#[test]
fn grouped_counts_take_back_the_rows_they_read_deleted() {
    // Scattered deletions (every 7th row, and a block): the grouped count by dictionary key reads
    // the deleted rows and takes their keys back instead of skipping each of them.
    let mut deleted: Vec<u64> = (0..DOCS as u64).filter(|n| n % 7 == 3).collect();
    deleted.extend((12_000..12_500).filter(|n| n % 7 != 3));
    let tmp = table_with_deletions(&deleted);
    let root = tmp.path();
    // A second part (documents n = DOCS..DOCS + 3000), so that the scan has a partition per core
    // and the count runs in the scan (`CountByKeyExec`), not after a repartition.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for n in DOCS..DOCS + 3000 {
        writeln!(file, "{{\"n\":{n},\"kind\":\"k{}\"}}", n % 3).unwrap();
    }
    let options = IngestOptions {
        auto_merge: false,
        ..Default::default()
    };
    let input = [Input::File(file.path().to_owned())];
    ingest(
        &DataDir::new(root),
        "t",
        &input,
        &options,
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap();
    let expected = |range: std::ops::Range<i64>| {
        let mut counts = [0i64; 3];
        for n in range.filter(|n| !deleted.contains(&(*n as u64))) {
            counts[(n % 3) as usize] += 1;
        }
        format!("k0 {}, k1 {}, k2 {}", counts[0], counts[1], counts[2])
    };
    let grouped = |sql: &str| {
        let batches = run(root, sql);
        let mut rows = Vec::new();
        for batch in &batches {
            let kinds = cast(batch.column(0), &DataType::Utf8).unwrap();
            let counts = cast(batch.column(1), &DataType::Int64).unwrap();
            for i in 0..batch.num_rows() {
                rows.push(format!(
                    "{} {}",
                    kinds.as_string::<i32>().value(i),
                    counts.as_primitive::<Int64Type>().value(i)
                ));
            }
        }
        rows.join(", ")
    };
    assert_eq!(
        grouped("SELECT data.kind, count(*) FROM t GROUP BY 1 ORDER BY 1"),
        expected(0..DOCS + 3000)
    );
    // Pages the filter prunes stay pruned; the rows read in them are counted once.
    assert_eq!(
        grouped("SELECT data.kind, count(*) FROM t WHERE data.n >= 9000 GROUP BY 1 ORDER BY 1"),
        expected(9_000..DOCS + 3000)
    );
    let plan = pretty_format_batches(&run(
        root,
        "EXPLAIN ANALYZE SELECT data.kind, count(*) FROM t GROUP BY 1",
    ))
    .unwrap()
    .to_string();
    let live = DOCS as usize + 3000 - deleted.len();
    assert!(plan.contains("CountByKeyExec"), "{plan}");
    assert!(
        plan.contains(&format!("rows_counted_by_key={live}"))
            || plan.contains(&format!(
                "rows_counted_by_key={:.2} K",
                live as f64 / 1000.0
            )),
        "{plan}"
    );
}

#[test]
fn a_count_of_every_row_takes_the_live_rows_from_the_manifest_and_opens_no_file() {
    // `count(*)` with no filter, and any statement needing no column, counts the parts' rows
    // less their deleted rows as the manifest lists them: with the part's file gone from disk
    // they still answer, while a statement that reads the part fails naming it.
    let deleted = [0u64, 7, 5_000, DOCS as u64 - 1];
    let tmp = table_with_deletions(&deleted);
    let root = tmp.path();
    let live = DOCS - deleted.len() as i64;
    let dir = DataDir::new(root);
    let part = dir.manifest("t").unwrap().parts[0].file.clone();
    std::fs::remove_file(dir.table_dir("t").unwrap().join("parts").join(&part)).unwrap();
    assert_eq!(scalar(root, "SELECT count(*) FROM t"), Some(live));
    let rows = |sql: &str| -> usize { run(root, sql).iter().map(|b| b.num_rows()).sum() };
    assert_eq!(rows("SELECT 1 FROM t"), live as usize);
    assert_eq!(rows("SELECT 1 FROM t LIMIT 5"), 5);
    let plan = pretty_format_batches(&run(root, "EXPLAIN SELECT 1 FROM t"))
        .unwrap()
        .to_string();
    assert!(
        plan.contains(&format!("ManifestRowsExec: table=t, rows={live}")),
        "{plan}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime.block_on(async {
        let session = Session::open(root).unwrap();
        session
            .run("SELECT count(*) FROM t WHERE data.n > 5")
            .await
            .map(|_| ())
            .unwrap_err()
    });
    assert!(error.to_string().contains(&part), "{error}");
}
