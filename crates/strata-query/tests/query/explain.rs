//! `EXPLAIN ANALYZE` shows what the scan pruned and read: parts by the manifest's sort-key
//! ranges, granules by Parquet page statistics, rows, and bytes scanned.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;

use arrow::util::pretty::pretty_format_batches;
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, ingest};
use strata_query::Session;

fn ingest_lines(dir: &DataDir, table: &str, lines: &[String]) {
    ingest_sorted(dir, table, lines, &["kind", "n"]);
}

fn ingest_sorted(dir: &DataDir, table: &str, lines: &[String], sort_key: &[&str]) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
    let options = IngestOptions {
        sort_key: Some(sort_key.iter().map(|p| (*p).to_owned()).collect()),
        ..Default::default()
    };
    ingest(
        dir,
        table,
        &[Input::File(file.path().to_owned())],
        &options,
        &mut |_| {},
        &mut |_| {},
    )
    .unwrap();
}

fn explain_analyze(root: &std::path::Path, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(root).unwrap();
        let result = session
            .run(&format!("EXPLAIN ANALYZE {sql}"))
            .await
            .unwrap();
        pretty_format_batches(&result.batches).unwrap().to_string()
    })
}

/// Reads `label=pruned/total` from the scan's line of the plan.
fn pruned(plan: &str, label: &str) -> (u64, u64) {
    let start = plan
        .find(&format!("{label}="))
        .unwrap_or_else(|| panic!("no {label} in\n{plan}"))
        + label.len()
        + 1;
    let text: String = plan[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '/')
        .collect();
    let (a, b) = text.split_once('/').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn explain_analyze_reports_pruned_parts_granules_rows_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // Three ingests make three parts with disjoint `kind` ranges; the middle one is large enough
    // (40,000 rows sorted by n) to have several granules of 8,192 rows.
    for (kind, rows) in [("alpha", 1_000), ("beta", 40_000), ("gamma", 1_000)] {
        let lines: Vec<String> = (0..rows)
            .map(|n| format!(r#"{{"kind":"{kind}","n":{n},"text":"row {n} of {kind}"}}"#))
            .collect();
        ingest_lines(&dir, "events", &lines);
    }

    // The queries of these tests read rows (`sum`): a count over what pruning keeps exactly
    // would be answered from statistics, without a scan to report on.
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.kind = 'beta' AND data.n < 100",
    );
    // parts=kept/total, then pruned counts as pruned/total.
    assert_eq!(pruned(&plan, "parts"), (1, 3), "{plan}");
    // 40,000 rows = 5 granules; only the first can hold n < 100.
    assert_eq!(pruned(&plan, "granules pruned"), (4, 5), "{plan}");
    assert_eq!(
        pruned(&plan, "rows pruned"),
        (42_000 - 8_192, 42_000),
        "{plan}"
    );
    for metric in [
        "parts_pruned=2",
        "granules_pruned=4",
        "rows_pruned=",
        "bytes_scanned=",
    ] {
        assert!(plan.contains(metric), "no {metric} in\n{plan}");
    }

    // IN lists (which DataFusion turns into OR chains) prune like equality.
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.kind IN ('alpha', 'gamma')",
    );
    assert_eq!(pruned(&plan, "parts"), (2, 3), "{plan}");
    assert_eq!(pruned(&plan, "rows pruned"), (40_000, 42_000), "{plan}");

    // Page statistics exist for every column, so equality on another path prunes too...
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.text = 'row 5 of beta'",
    );
    assert_eq!(pruned(&plan, "parts"), (3, 3), "{plan}");
    assert!(pruned(&plan, "granules pruned").0 > 0, "{plan}");
    // ...while a filter statistics cannot decide prunes nothing.
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.text LIKE '%5 of beta'",
    );
    assert_eq!(pruned(&plan, "parts"), (3, 3), "{plan}");
    assert_eq!(pruned(&plan, "rows pruned"), (0, 42_000), "{plan}");
}

#[test]
fn grouped_counts_over_several_parts_count_dictionary_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    for part in 0..3 {
        let lines: Vec<String> = (0..5_000)
            .map(|n| format!(r#"{{"kind":"k{}","n":{n}}}"#, (n * 7 + part) % 5))
            .collect();
        ingest_lines(&dir, "events", &lines);
    }
    let plan = explain_analyze(
        tmp.path(),
        "SELECT data.kind, count(*) FROM events GROUP BY data.kind",
    );
    assert!(plan.contains("CountByKeyExec"), "{plan}");
    assert!(plan.contains("rows_counted_by_key=15.00 K"), "{plan}");
    // Other aggregates keep DataFusion's own partial aggregation.
    let plan = explain_analyze(
        tmp.path(),
        "SELECT data.kind, count(*), max(data.n) FROM events GROUP BY data.kind",
    );
    assert!(!plan.contains("CountByKeyExec"), "{plan}");
}

#[test]
fn distinct_counts_of_the_next_sort_key_path_collect_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // 3 kinds, 40 users, 20 events of each user: 40 distinct users per kind.
    let lines: Vec<String> = (0..2_400)
        .map(|n| format!(r#"{{"kind":"k{}","user":"u{}","n":{n}}}"#, n % 3, n % 120))
        .collect();
    ingest_sorted(&dir, "events", &lines, &["kind", "user", "n"]);
    let sql = "SELECT data.kind AS k, count(*) AS n, count(DISTINCT data.user) AS u FROM events \
               GROUP BY k ORDER BY k";
    let plan = explain_analyze(tmp.path(), sql);
    assert!(plan.contains("DistinctRunsExec"), "{plan}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answer = runtime.block_on(async {
        let session = Session::open(tmp.path()).unwrap();
        let result = session.run(sql).await.unwrap();
        pretty_format_batches(&result.batches).unwrap().to_string()
    });
    for kind in 0..3 {
        assert!(
            answer.contains(&format!("| k{kind} | 800 | 40 |")),
            "{answer}"
        );
    }
    // Not the path after the grouped one in the sort key: DataFusion's own sets.
    let plan = explain_analyze(
        tmp.path(),
        "SELECT data.user AS u, count(DISTINCT data.kind) FROM events GROUP BY u",
    );
    assert!(!plan.contains("DistinctRunsExec"), "{plan}");
}

#[test]
fn equality_on_the_leading_sort_key_selects_exactly_its_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // One part sorted by (kind, n): 10,000 rows of each kind, so `beta` spans rows 10,000..20,000,
    // which straddle granule boundaries at 8,192 and 16,384.
    let lines: Vec<String> = ["gamma", "alpha", "beta"]
        .iter()
        .flat_map(|kind| (0..10_000).map(move |n| format!(r#"{{"kind":"{kind}","n":{n}}}"#)))
        .collect();
    ingest_lines(&dir, "events", &lines);
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.kind = 'beta'",
    );
    assert_eq!(pruned(&plan, "rows pruned"), (20_000, 30_000), "{plan}");
    // Page statistics rule out the granules holding no `beta` (rows 0..8,192 and
    // 24,576..30,000); the runs cut the rest down to rows 10,000..20,000.
    for metric in [
        "rows_pruned_by_pages=13.62 K",
        "rows_pruned_by_key_runs=6.38 K",
        "granules_pruned_by_statistics=2",
    ] {
        assert!(plan.contains(metric), "no {metric} in\n{plan}");
    }
    assert!(plan.contains("output_rows=10.00 K"), "{plan}");
    // The runs decide the equality row by row: the scan applies it alone.
    assert!(!plan.contains("FilterExec"), "{plan}");
    let plan = explain_analyze(
        tmp.path(),
        "SELECT sum(data.n) FROM events WHERE data.kind IN ('alpha', 'gamma') AND data.n >= 0",
    );
    assert_eq!(pruned(&plan, "rows pruned"), (10_000, 30_000), "{plan}");
    // `n` has too many values per part for runs: DataFusion still filters on it.
    assert!(plan.contains("FilterExec: data.n"), "{plan}");
}

#[test]
fn general_predicates_prune_parts_granules_and_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    for (kind, rows) in [("alpha", 1_000), ("beta", 40_000), ("gamma", 1_000)] {
        let lines: Vec<String> = (0..rows)
            .map(|n| format!(r#"{{"kind":"{kind}","n":{n}}}"#))
            .collect();
        ingest_lines(&dir, "events", &lines);
    }
    let count = |sql: &str| {
        explain_analyze(
            tmp.path(),
            &format!("SELECT sum(data.n) FROM events WHERE {sql}"),
        )
    };
    // A LIKE prefix is a range of strings.
    let plan = count("data.kind LIKE 'al%'");
    assert_eq!(pruned(&plan, "parts"), (1, 3), "{plan}");
    // OR of ranges on one path.
    let plan = count("data.kind < 'b' OR data.kind > 'g'");
    assert_eq!(pruned(&plan, "parts"), (2, 3), "{plan}");
    // NOT IN and NOT of an equality.
    let plan = count("data.kind NOT IN ('alpha', 'gamma')");
    assert_eq!(pruned(&plan, "parts"), (1, 3), "{plan}");
    let plan = count("NOT (data.kind <> 'beta')");
    assert_eq!(pruned(&plan, "parts"), (1, 3), "{plan}");
    // A path no part stores is NULL everywhere.
    let plan = count("data.missing IS NOT NULL");
    assert_eq!(pruned(&plan, "parts"), (0, 3), "{plan}");
    // A cast of a path: integer statistics bound its doubles; pages of the large part too.
    let plan = count("CAST(data.n AS DOUBLE) > 20000.5");
    assert_eq!(pruned(&plan, "parts"), (1, 3), "{plan}");
    assert_eq!(pruned(&plan, "granules pruned"), (2, 5), "{plan}");
    assert!(plan.contains("rows_pruned_by_pages=16.38 K"), "{plan}");
    // An OR across two paths prunes where both sides are ruled out.
    let plan = count("data.kind = 'alpha' OR data.n > 30000");
    assert_eq!(pruned(&plan, "parts"), (2, 3), "{plan}");
}

fn answer(root: &std::path::Path, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(root).unwrap();
        let result = session.run(sql).await.unwrap();
        pretty_format_batches(&result.batches).unwrap().to_string()
    })
}

#[test]
fn whole_part_counts_and_bounds_answer_from_statistics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    for part in 0..3 {
        let mut lines: Vec<String> = (0..2_000)
            .map(|n| format!(r#"{{"kind":"k{part}","n":{}}}"#, n + part * 10_000))
            .collect();
        lines.push(format!(r#"{{"kind":"k{part}"}}"#));
        ingest_lines(&dir, "events", &lines);
    }
    let sql =
        "SELECT count(*), count(data.n), min(data.n), max(data.n), max(data.kind) FROM events";
    let plan = explain_analyze(tmp.path(), sql);
    // Exact row counts, null counts and min/max from the manifest and footers: no scan runs.
    assert!(!plan.contains("StrataScanExec"), "{plan}");
    let expected = "| 6003     | 6000          | 0           | 21999       | k2             |";
    assert!(
        answer(tmp.path(), sql).contains(expected),
        "{}",
        answer(tmp.path(), sql)
    );

    // Key runs make an equality on the leading sort key exact, so its count is known too.
    let sql = "SELECT count(*) FROM events WHERE data.kind = 'k1'";
    let plan = explain_analyze(tmp.path(), sql);
    assert!(!plan.contains("StrataScanExec"), "{plan}");
    assert!(
        answer(tmp.path(), sql).contains("| 2001     |"),
        "{}",
        answer(tmp.path(), sql)
    );

    // A part that stores `n` mostly as text keeps its integers in the remainder: its statistics
    // do not describe `n` read as a number, so the scan reads it.
    let mixed = [r#""many""#, r#""more""#, "7"].map(|n| format!(r#"{{"kind":"k9","n":{n}}}"#));
    ingest_lines(&dir, "events", &mixed);
    let sql = "SELECT count(*), max(TRY_CAST(data.n AS BIGINT)) FROM events";
    let plan = explain_analyze(tmp.path(), sql);
    assert!(plan.contains("StrataScanExec"), "{plan}");
    assert!(
        answer(tmp.path(), sql).contains("| 6006     | 21999"),
        "{}",
        answer(tmp.path(), sql)
    );
    // With a filter that pruning cannot make exact, DataFusion still counts the rows.
    let plan = explain_analyze(tmp.path(), "SELECT count(*) FROM events WHERE data.n > 5");
    assert!(plan.contains("FilterExec"), "{plan}");
}

fn query_json(root: &std::path::Path, sql: &str) -> Vec<String> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let session = Session::open(root).unwrap();
        let result = session.run(sql).await.unwrap();
        let mut rows = Vec::new();
        for batch in &result.batches {
            let column =
                arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
            let strings = column
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap();
            rows.extend(strings.iter().map(|s| s.unwrap_or("NULL").to_owned()));
        }
        rows
    })
}

/// Three parts of `n` in 0..1,000, 1,000..41,000 and 41,000..42,000, plus a part whose `n`
/// lies inside every range below but is missing on half its rows.
fn ranged_parts(dir: &DataDir) {
    for (first, rows) in [(0, 1_000), (1_000, 40_000), (41_000, 1_000)] {
        let lines: Vec<String> = (first..first + rows)
            .map(|n| format!(r#"{{"kind":"k","n":{n},"text":"row {n}"}}"#))
            .collect();
        ingest_lines(dir, "events", &lines);
    }
    let lines: Vec<String> = (0..2_000)
        .map(|i| match i % 2 {
            0 => format!(r#"{{"kind":"m","n":{}}}"#, 20_000 + i),
            _ => r#"{"kind":"m","text":"no n"}"#.to_owned(),
        })
        .collect();
    ingest_lines(dir, "events", &lines);
}

#[test]
fn counts_over_ranges_take_covered_row_groups_from_statistics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    ranged_parts(&dir);
    let sql = "SELECT count(*) FROM events WHERE data.n >= 500 AND data.n < 41500";
    // 500..41,500 of the three ranged parts, and the 1,000 rows of the fourth that have an n.
    assert_eq!(query_json(tmp.path(), sql), ["42000"]);
    let plan = explain_analyze(tmp.path(), sql);
    assert!(plan.contains("CountMatchingExec"), "{plan}");
    // Only the middle part's row group lies wholly inside the range and has no NULL n.
    assert!(
        plan.contains("rows_counted_from_statistics=40.00 K"),
        "{plan}"
    );
    // A range inside the middle part: its pages (granules of 8,192 rows) wholly inside count
    // from the page index, only the two at the ends are read.
    let sql = "SELECT count(*) FROM events WHERE data.n >= 10000 AND data.n < 30000";
    assert_eq!(query_json(tmp.path(), sql), ["21000"]);
    let plan = explain_analyze(tmp.path(), sql);
    assert!(
        plan.contains("rows_counted_from_statistics=8.19 K"),
        "{plan}"
    );
    // The same count where only DataFusion evaluates the filter.
    let unoptimized = "SELECT count(*) FROM events WHERE data.n + 0 >= 500 AND data.n + 0 < 41500";
    assert_eq!(query_json(tmp.path(), unoptimized), ["42000"]);
    assert!(!explain_analyze(tmp.path(), unoptimized).contains("CountMatchingExec"));
    // OR, NOT-equal and a range nothing covers count exactly too.
    for (filter, expected) in [
        ("data.n < 100 OR data.n >= 41900", "200"),
        ("data.n <> 5 AND data.n <= 999", "999"),
        ("data.n > 50000", "0"),
    ] {
        let sql = format!("SELECT count(*) FROM events WHERE {filter}");
        assert_eq!(query_json(tmp.path(), &sql), [expected], "{filter}");
    }
}

#[test]
fn a_top_k_over_one_partition_is_not_repartitioned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let lines: Vec<String> = (0..40_000)
        .map(|n| format!(r#"{{"n":{n},"text":"row {n}"}}"#))
        .collect();
    ingest_lines(&dir, "events", &lines);
    let window = "SELECT data FROM events WHERE data.n >= 100 AND data.n < 35000 \
                  ORDER BY data.n DESC LIMIT 2";
    assert_eq!(
        query_json(tmp.path(), window),
        [
            r#"{"n":34999,"text":"row 34999"}"#,
            r#"{"n":34998,"text":"row 34998"}"#
        ]
    );
    let plan = explain_analyze(tmp.path(), window);
    assert!(plan.contains("top 2 by output"), "{plan}");
    assert!(plan.contains("parts=1/1"), "{plan}");
    // The scan keeps two rows: nothing above it is worth spreading over the cores, and it
    // hands them up in order, so no sort is left above it.
    assert!(!plan.contains("RepartitionExec"), "{plan}");
    assert!(!plan.contains("SortExec"), "{plan}");
    // Paths instead of documents: the same top-k in the scan, and no sort above it.
    let paths = "SELECT data.text, data.n FROM events WHERE data.n < 35000 \
                 ORDER BY data.n DESC LIMIT 2";
    assert_eq!(query_json(tmp.path(), paths), ["row 34999", "row 34998"]);
    let plan = explain_analyze(tmp.path(), paths);
    assert!(plan.contains("top 2 by output"), "{plan}");
    assert!(!plan.contains("SortExec"), "{plan}");
    // Ascending, past an offset.
    let window = "SELECT data FROM events WHERE data.n >= 100 ORDER BY data.n LIMIT 2 OFFSET 3";
    assert_eq!(
        query_json(tmp.path(), window),
        [
            r#"{"n":103,"text":"row 103"}"#,
            r#"{"n":104,"text":"row 104"}"#
        ]
    );
    // On a path the part is not sorted by, every granule is read: the scan's batches of kept
    // rows add up to more than twice the limit, and are cut back to it as they come.
    let tmp_unsorted = tempfile::tempdir().unwrap();
    let rows: Vec<(u64, u64)> = (0..40_000u64).map(|n| (n * 7_919 % 40_000, n)).collect();
    let document = |(m, n): &(u64, u64)| format!(r#"{{"m":{m},"n":{n},"text":"row {n}"}}"#);
    ingest_lines(
        &DataDir::new(tmp_unsorted.path()),
        "events",
        &rows.iter().map(document).collect::<Vec<_>>(),
    );
    let mut expected = rows.clone();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected[..8_000].iter().map(document).collect();
    let sql = "SELECT data FROM events ORDER BY data.m DESC LIMIT 8000";
    assert_eq!(query_json(tmp_unsorted.path(), sql), expected);
    // The same scan without a top-k still feeds both cores.
    let filtered = "SELECT data FROM events WHERE data.n >= 100 AND data.n < 35000";
    assert_eq!(query_json(tmp.path(), filtered).len(), 34_900);
    let plan = explain_analyze(tmp.path(), filtered);
    assert!(plan.contains("RepartitionExec"), "{plan}");
}

#[test]
fn documents_are_built_only_for_the_rows_a_top_k_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    ranged_parts(&dir);
    let sql = "SELECT data FROM events WHERE data.n >= 100 AND data.n < 30000 \
               ORDER BY data.n DESC LIMIT 3";
    let expected: Vec<String> = [29_999, 29_998, 29_997]
        .iter()
        .map(|n| format!(r#"{{"kind":"k","n":{n},"text":"row {n}"}}"#))
        .collect();
    assert_eq!(query_json(tmp.path(), sql), expected);
    let plan = explain_analyze(tmp.path(), sql);
    assert!(plan.contains("before building outputs: filter="), "{plan}");
    assert!(plan.contains("top 3 by output"), "{plan}");
    // The sort reads the path column, not the documents.
    assert!(!plan.contains("strata_path(data"), "{plan}");
    // Ascending with an offset, and a filter alone (no ORDER BY).
    // In parts sorted by n, the decoder keeps the first rows in order and drops the rest of
    // each part before the documents' columns are decoded (the filter alone drops 1,100), or
    // the granules past them are not opened; a window without a filter is cut the same way.
    for (sql, first) in [
        (
            "SELECT data FROM events WHERE data.n >= 100 ORDER BY data.n LIMIT 2 OFFSET 1",
            101,
        ),
        ("SELECT data FROM events ORDER BY data.n LIMIT 2", 0),
    ] {
        let expected: Vec<String> = [first, first + 1]
            .iter()
            .map(|n| format!(r#"{{"kind":"k","n":{n},"text":"row {n}"}}"#))
            .collect();
        assert_eq!(query_json(tmp.path(), sql), expected, "{sql}");
        assert_decoder_dropped_thousands(tmp.path(), sql, 30.0);
    }
    let sql = "SELECT data FROM events WHERE data.text = 'row 7'";
    assert_eq!(
        query_json(tmp.path(), sql),
        [r#"{"kind":"k","n":7,"text":"row 7"}"#]
    );
    assert!(explain_analyze(tmp.path(), sql).contains("before building outputs: filter="));
    // Descending puts rows without the sort path first (NULLS FIRST, as in PostgreSQL), whole.
    let sql = "SELECT data FROM events WHERE data.kind = 'm' ORDER BY data.n DESC LIMIT 1";
    assert_eq!(
        query_json(tmp.path(), sql),
        [r#"{"kind":"m","text":"no n"}"#]
    );
}

#[test]
fn a_top_k_reads_parts_sorted_by_its_key_best_granule_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    ranged_parts(&dir);
    let documents = |ns: &[u32]| -> Vec<String> {
        ns.iter()
            .map(|n| format!(r#"{{"kind":"k","n":{n},"text":"row {n}"}}"#))
            .collect()
    };
    let skipped = |sql: &str| -> u64 {
        let plan = explain_analyze(tmp.path(), sql);
        counter(&plan, "granules_skipped_for_top_rows")
            .parse()
            .unwrap_or_else(|_| panic!("{plan}"))
    };
    // Newest first: the last part's granule fills the top rows, and the five granules of the
    // 40,000-row part (n below 41,000) and the first part's are then skipped unopened. The
    // fourth part's granule holds rows without n, which come first descending: it is read.
    let sql = "SELECT data FROM events WHERE data.kind = 'k' ORDER BY data.n DESC LIMIT 3";
    assert_eq!(
        query_json(tmp.path(), sql),
        documents(&[41_999, 41_998, 41_997])
    );
    assert!(skipped(sql) >= 5, "{}", explain_analyze(tmp.path(), sql));
    // Ascending from inside the large part: its granule holding 20,000 fills them, the two
    // granules after it are skipped (the last part is read by the other partition).
    let sql = "SELECT data FROM events WHERE data.kind = 'k' AND data.n >= 20000 \
               ORDER BY data.n LIMIT 2";
    assert_eq!(query_json(tmp.path(), sql), documents(&[20_000, 20_001]));
    assert!(skipped(sql) >= 2, "{}", explain_analyze(tmp.path(), sql));
    // A filter that keeps few rows of each granule: nothing can be skipped until the top
    // rows are filled, and the answer is the same.
    let sql = "SELECT data FROM events WHERE data.kind = 'k' AND data.n % 7919 = 0 \
               ORDER BY data.n DESC LIMIT 2";
    assert_eq!(query_json(tmp.path(), sql), documents(&[39_595, 31_676]));
    // Descending, rows without n come first, whole, and every granule that may hold them is
    // read.
    for sql in [
        "SELECT data FROM events WHERE data.kind = 'm' ORDER BY data.n DESC LIMIT 2",
        "SELECT data FROM events ORDER BY data.n DESC LIMIT 2",
    ] {
        assert_eq!(
            query_json(tmp.path(), sql),
            [
                r#"{"kind":"m","text":"no n"}"#,
                r#"{"kind":"m","text":"no n"}"#
            ],
            "{sql}"
        );
    }
}

#[test]
fn a_top_k_over_parts_with_overlapping_keys_reads_every_page_that_may_beat_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // Three parts sorted by n whose values interleave (n modulo 3): on two partitions, two of
    // them share one, and each one's pages bound values the other's top rows do not reach.
    for residue in 0..3 {
        let lines: Vec<String> = (0..30_000)
            .filter(|n| n % 3 == residue)
            .map(|n| format!(r#"{{"n":{n}}}"#))
            .collect();
        ingest_lines(&dir, "events", &lines);
    }
    for (sql, expected) in [
        (
            "SELECT data.n FROM events WHERE data.n >= 0 ORDER BY data.n DESC LIMIT 4",
            ["29999", "29998", "29997", "29996"],
        ),
        (
            "SELECT data FROM events ORDER BY data.n DESC LIMIT 4",
            [
                r#"{"n":29999}"#,
                r#"{"n":29998}"#,
                r#"{"n":29997}"#,
                r#"{"n":29996}"#,
            ],
        ),
        (
            "SELECT data FROM events WHERE data.n >= 15000 ORDER BY data.n LIMIT 4",
            [
                r#"{"n":15000}"#,
                r#"{"n":15001}"#,
                r#"{"n":15002}"#,
                r#"{"n":15003}"#,
            ],
        ),
    ] {
        assert_eq!(query_json(tmp.path(), sql), expected, "{sql}");
    }
}

/// Asserts that `sql`'s scan left more than `thousands` thousand rows undecoded: dropped in the
/// decoder, or in granules a top-k skipped (`top_order`; counted at 8,192 rows, which every
/// granule of the 40,000-row part but its last holds).
fn assert_decoder_dropped_thousands(data_dir: &std::path::Path, sql: &str, thousands: f64) {
    let plan = explain_analyze(data_dir, sql);
    let dropped = counter(&plan, "rows_filtered_in_decoder");
    let dropped_thousands: f64 = match dropped.strip_suffix(" K") {
        Some(thousands) => thousands.parse().unwrap_or(0.0),
        None => dropped.parse::<f64>().unwrap_or(0.0) / 1000.0,
    };
    let skipped: f64 = counter(&plan, "granules_skipped_for_top_rows")
        .parse()
        .unwrap_or(0.0);
    assert!(
        dropped_thousands + 8.192 * skipped > thousands,
        "{dropped} dropped, {skipped} granules skipped: {plan}"
    );
}

/// The `name=N` counter of the plan's scan (`N` as `EXPLAIN ANALYZE` prints it, e.g. `1.23 K`).
fn counter<'a>(plan: &'a str, name: &str) -> &'a str {
    let start = plan
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("no {name} in\n{plan}"))
        + name.len()
        + 1;
    let end = plan[start..]
        .find([',', ']'])
        .map_or(plan.len(), |e| start + e);
    &plan[start..end]
}

#[test]
fn selective_filters_are_evaluated_in_the_decoder_conjunct_by_conjunct() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // A log-like table: `user` has 500 values, `method` 2, `status` 3, in every granule; one
    // row in 251 has a number as `user` (in the remainder), and one in 97 has no `user`.
    let user_of = |n: usize| match (n % 97, n % 251) {
        (0, _) => None,
        (_, 3) => Some(format!("{}", n % 500)),
        _ => Some(format!(r#""u{}""#, n % 500)),
    };
    let method_of = |n: usize| if n.is_multiple_of(5) { "POST" } else { "GET" };
    let status_of = |n: usize| [200, 404, 500][n % 3];
    let lines: Vec<String> = (0..30_000)
        .map(|n| {
            let user = user_of(n).map_or(String::new(), |u| format!(r#","user":{u}"#));
            format!(
                r#"{{"kind":"k","n":{n}{user},"method":"{}","status":{}}}"#,
                method_of(n),
                status_of(n)
            )
        })
        .collect();
    ingest_lines(&dir, "logs", &lines);
    for (user, method, status) in [("u7", "GET", 200), ("u10", "POST", 404), ("u3", "GET", 200)] {
        let want = (0..30_000usize)
            .filter(|&n| {
                // A number is not the string of its digits (ADR 0003).
                user_of(n).is_some_and(|u| u == format!(r#""{user}""#))
                    && method_of(n) == method
                    && status_of(n) == status
            })
            .count()
            .to_string();
        let filter =
            format!("data.user = '{user}' AND data.method = '{method}' AND data.status = {status}");
        let sql = format!("SELECT count(*) FROM logs WHERE {filter}");
        assert_eq!(query_json(tmp.path(), &sql), [want.as_str()], "{sql}");
        let plan = explain_analyze(tmp.path(), &sql);
        assert!(plan.contains("CountMatchingExec"), "{plan}");
        // Nearly every row is dropped inside the decoder, before the scan builds its outputs.
        assert!(
            counter(&plan, "rows_filtered_in_decoder").ends_with(" K"),
            "{plan}"
        );
        // `method` is decided by dictionary key; `user`, with numbers in the remainder, is not.
        assert_ne!(
            counter(&plan, "rows_compared_by_dictionary_key"),
            "0",
            "{plan}"
        );
        // Documents are rebuilt only for the rows kept, with the same answer.
        let sql = format!("SELECT data FROM logs WHERE {filter}");
        let documents = query_json(tmp.path(), &sql);
        assert_eq!(documents.len().to_string(), want, "{sql}");
        assert!(
            documents
                .iter()
                .all(|d| d.contains(&format!(r#""method":"{method}""#))),
            "{documents:?}"
        );
        let plan = explain_analyze(tmp.path(), &sql);
        assert!(
            counter(&plan, "rows_filtered_in_decoder").ends_with(" K"),
            "{plan}"
        );
    }
}

#[test]
fn string_filters_are_decided_by_dictionary_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    // Strings only: `user` has 300 values and is missing from one row in 7, `method` 3.
    let user_of = |n: usize| (!n.is_multiple_of(7)).then(|| format!("u{}", n % 300));
    let method_of = |n: usize| ["GET", "POST", "PUT"][n % 3];
    let lines: Vec<String> = (0..20_000)
        .map(|n| {
            let user = user_of(n).map_or(String::new(), |u| format!(r#","user":"{u}""#));
            format!(
                r#"{{"kind":"k","n":{n}{user},"method":"{}"}}"#,
                method_of(n)
            )
        })
        .collect();
    ingest_lines(&dir, "logs", &lines);
    type Rule = fn(Option<&str>, &str) -> bool;
    let cases: [(&str, Rule, bool); 11] = [
        ("data.user = 'u7'", |u, _| u == Some("u7"), true),
        (
            "'u7' = data.user AND data.method = 'PUT'",
            |u, m| u == Some("u7") && m == "PUT",
            true,
        ),
        (
            "data.method IN ('GET', 'PUT') AND data.user IN ('u1', 'u2', 'nobody')",
            |u, m| m != "POST" && matches!(u, Some("u1" | "u2")),
            true,
        ),
        ("data.user = 'u7x'", |_, _| false, true),
        (
            "data.user <> 'u7' AND data.method = 'GET'",
            |u, m| u.is_some_and(|u| u != "u7") && m == "GET",
            true,
        ),
        // Other filters over one string column: evaluated once per dictionary value.
        ("data.user > 'u8'", |u, _| u.is_some_and(|u| u > "u8"), true),
        (
            "data.user >= 'u2' AND data.user < 'u3' AND data.method <> 'GET'",
            |u, m| u.is_some_and(|u| ("u2".."u3").contains(&u)) && m != "GET",
            true,
        ),
        (
            "upper(data.user) = 'U7' OR data.user > 'u98'",
            |u, _| u.is_some_and(|u| u == "u7" || u > "u98"),
            true,
        ),
        // NULL is kept: decided row by row (a row without a user has no key to look up).
        (
            "coalesce(data.user, 'u7') = 'u7'",
            |u, _| u.is_none_or(|u| u == "u7"),
            false,
        ),
        (
            "data.user IS DISTINCT FROM 'u7'",
            |u, _| u != Some("u7"),
            false,
        ),
        ("data.user IS NULL", |u, _| u.is_none(), false),
    ];
    for (filter, rule, keyed) in cases {
        let kept: Vec<usize> = (0..20_000usize)
            .filter(|&n| rule(user_of(n).as_deref(), method_of(n)))
            .collect();
        let sql = format!("SELECT count(*) FROM logs WHERE {filter}");
        assert_eq!(
            query_json(tmp.path(), &sql),
            [kept.len().to_string()],
            "{sql}"
        );
        let plan = explain_analyze(tmp.path(), &sql);
        let by_key = counter(&plan, "rows_compared_by_dictionary_key");
        assert_eq!(by_key != "0", keyed, "{sql}: {plan}");
        // The columns read as keys come out as the strings they were.
        let sql = format!(
            "SELECT concat(data.n, ':', coalesce(data.user, '-'), ':', data.method) FROM logs \
             WHERE {filter} ORDER BY data.n"
        );
        let want: Vec<String> = kept
            .iter()
            .map(|&n| {
                let user = user_of(n).unwrap_or_else(|| "-".into());
                format!("{n}:{user}:{}", method_of(n))
            })
            .collect();
        assert_eq!(query_json(tmp.path(), &sql), want, "{sql}");
    }
}
