//! Unit tests of each pruning level, over hand-made manifest entries and a small Parquet file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design
#![allow(clippy::single_range_in_vec_init)] // row ranges are what the levels return

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringViewArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{Expr, lit};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::properties::WriterProperties;
use serde_json::json;
use strata_format::PartEntry;
use strata_format::manifest::{KeyRun, KeyRuns};
use strata_json::Kind;

use super::key_runs::run_selection;
use super::page::page_selection;
use super::part::parts_to_scan;
use super::row_group::{RowGroupStatistics, row_groups_to_scan};
use super::{ColumnSource, ScanPredicate, column_source, filter_is_exact};
use crate::paths::{PathColumn, PathMode};

fn path(path: &str, mode: PathMode) -> PathColumn {
    PathColumn {
        path: path.to_owned(),
        mode,
    }
}

/// Every virtual column the tests filter on.
fn columns() -> Vec<PathColumn> {
    vec![
        path("k", PathMode::String),
        path("k", PathMode::Int),
        path("n", PathMode::Int),
        path("n", PathMode::Float),
        path("n", PathMode::String),
    ]
}

fn c(column: &PathColumn) -> Expr {
    Expr::Column(Column::new_unqualified(column.column_name()))
}

fn k() -> Expr {
    c(&path("k", PathMode::String))
}

fn n() -> Expr {
    c(&path("n", PathMode::Int))
}

fn s(value: &str) -> Expr {
    lit(ScalarValue::Utf8View(Some(value.to_owned())))
}

fn predicate(filter: Expr) -> ScanPredicate {
    ScanPredicate::new(&[filter], &columns())
}

fn entry(rows: u64, columns: &[(&str, Kind)]) -> PartEntry {
    crate::paths::part_entry("p.parquet", rows, columns)
}

fn with_range(
    mut e: PartEntry,
    path: &str,
    min: serde_json::Value,
    max: serde_json::Value,
) -> PartEntry {
    e.sort_key_min.insert(path.to_owned(), min);
    e.sort_key_max.insert(path.to_owned(), max);
    e
}

fn with_remainder(mut e: PartEntry, path: &str, kinds: &[Kind]) -> PartEntry {
    e.remainder_paths.insert(
        path.to_owned(),
        kinds.iter().copied().collect::<BTreeSet<_>>(),
    );
    e
}

#[test]
fn column_sources_follow_kinds_modes_and_the_remainder() {
    let string = entry(10, &[("k", Kind::String)]);
    assert_eq!(
        column_source(&string, &path("k", PathMode::String)),
        ColumnSource::Physical("k")
    );
    // No stored kind feeds the mode: every value is NULL.
    assert_eq!(
        column_source(&string, &path("k", PathMode::Int)),
        ColumnSource::AllNull
    );
    // The remainder may feed the mode: nothing is known.
    let mixed = with_remainder(entry(10, &[("k", Kind::String)]), "k", &[Kind::Int]);
    assert_eq!(
        column_source(&mixed, &path("k", PathMode::Int)),
        ColumnSource::Unknown
    );
    // Numbers kept as text do not order like doubles.
    let number = entry(10, &[("n", Kind::Number)]);
    assert_eq!(
        column_source(&number, &path("n", PathMode::Float)),
        ColumnSource::Unknown
    );
    let mut truncated = entry(10, &[("k", Kind::String)]);
    truncated.remainder_paths_truncated = true;
    assert_eq!(
        column_source(&truncated, &path("k", PathMode::String)),
        ColumnSource::Unknown
    );
}

#[test]
fn parts_prune_by_manifest_ranges_and_never_across_kinds() {
    let parts = vec![
        with_range(
            entry(10, &[("k", Kind::String)]),
            "k",
            json!("a"),
            json!("c"),
        ),
        // `k` is an integer column here: a string filter finds only NULLs.
        with_range(entry(10, &[("k", Kind::Int)]), "k", json!(1), json!(3)),
        // Strings in the column, integers in the remainder.
        with_remainder(
            with_range(
                entry(10, &[("k", Kind::String)]),
                "k",
                json!("x"),
                json!("z"),
            ),
            "k",
            &[Kind::Int],
        ),
        // No `k` at all.
        entry(10, &[("n", Kind::Int)]),
    ];
    let parts: Vec<Arc<PartEntry>> = parts.into_iter().map(Arc::new).collect();
    let keep = |filter: Expr| parts_to_scan(&parts, &predicate(filter));
    assert_eq!(keep(k().eq(s("b"))), [true, false, false, false]);
    assert_eq!(keep(k().gt(s("d"))), [false, false, true, false]);
    // LIKE prefixes, OR, NOT IN.
    assert_eq!(keep(k().like(s("y%"))), [false, false, true, false]);
    assert_eq!(
        keep(k().eq(s("a")).or(k().eq(s("y")))),
        [true, false, true, false]
    );
    assert_eq!(
        keep(k().in_list(vec![s("a"), s("b"), s("c")], true)),
        [true, false, true, false]
    );
    // IS NULL: only parts where every value is known NULL (or unknown) stay.
    assert_eq!(keep(k().is_not_null()), [true, false, true, false]);
    assert_eq!(keep(k().is_null()), [true, true, true, true]);
    // The integer mode of `k`: the remainder may hold any integer in part 2.
    let k_int = c(&path("k", PathMode::Int));
    assert_eq!(
        keep(k_int.clone().gt(lit(2i64))),
        [false, true, true, false]
    );
    assert_eq!(keep(k_int.gt(lit(5i64))), [false, false, true, false]);
}

#[test]
fn integer_ranges_bound_doubles_and_casts() {
    let parts = vec![
        with_range(entry(10, &[("n", Kind::Int)]), "n", json!(1), json!(3)),
        with_range(
            entry(10, &[("n", Kind::Float)]),
            "n",
            json!(2.5),
            json!(9.5),
        ),
        // A float in the remainder of an integer column: the double mode is not bounded.
        with_remainder(
            with_range(entry(10, &[("n", Kind::Int)]), "n", json!(1), json!(3)),
            "n",
            &[Kind::Float],
        ),
    ];
    let parts: Vec<Arc<PartEntry>> = parts.into_iter().map(Arc::new).collect();
    let keep = |filter: Expr| parts_to_scan(&parts, &predicate(filter));
    let double = c(&path("n", PathMode::Float));
    assert_eq!(keep(double.clone().gt(lit(3.5f64))), [false, true, true]);
    assert_eq!(keep(double.lt(lit(2.0f64))), [true, false, true]);
    // A cast of the integer mode: the remainder's doubles are NULL in that mode, and part 1
    // holds no integers.
    let cast = Expr::Cast(datafusion::logical_expr::Cast::new(
        Box::new(n()),
        DataType::Float64,
    ));
    assert_eq!(keep(cast.clone().gt(lit(3.5f64))), [false, false, false]);
    assert_eq!(keep(cast.lt(lit(1.5f64))), [true, false, true]);
}

fn runs_entry() -> PartEntry {
    let mut e = entry(10, &[("k", Kind::String), ("n", Kind::Int)]);
    e.key_runs = Some(KeyRuns {
        paths: vec!["k".into()],
        runs: vec![
            KeyRun {
                values: vec![json!("a")],
                start: 0,
                rows: 5,
            },
            KeyRun {
                values: vec![json!("b")],
                start: 5,
                rows: 3,
            },
            KeyRun {
                values: vec![serde_json::Value::Null],
                start: 8,
                rows: 2,
            },
        ],
    });
    e
}

#[test]
fn key_runs_select_exact_row_ranges() {
    let e = runs_entry();
    let select = |filter: Expr| run_selection(&e, &predicate(filter));
    assert_eq!(select(k().eq(s("b"))), Some(vec![5..8]));
    assert_eq!(
        select(k().in_list(vec![s("a"), s("b")], false)),
        Some(vec![0..8])
    );
    assert_eq!(select(k().is_null()), Some(vec![8..10]));
    assert_eq!(select(k().not_eq(s("a"))), Some(vec![5..8]));
    assert_eq!(select(k().eq(s("z"))), Some(vec![]));
    // A filter on a path the runs are not over cannot narrow them.
    assert_eq!(select(n().gt(lit(3i64))), None);
    // Nor when the remainder may hold values of the filtered mode.
    let mixed = with_remainder(runs_entry(), "k", &[Kind::String]);
    assert_eq!(run_selection(&mixed, &predicate(k().eq(s("b")))), None);
}

#[test]
fn exact_pushdown_needs_an_equality_on_a_run_path_in_every_part() {
    let manifest = |parts: Vec<PartEntry>| strata_format::Manifest {
        parts: parts.into_iter().map(Arc::new).collect(),
        ..strata_format::Manifest::new(strata_format::TableSettings::sorted_by(
            vec!["k".into()],
            64,
        ))
    };
    let indexed = manifest(vec![runs_entry(), runs_entry()]);
    let columns = columns();
    assert!(filter_is_exact(&k().eq(s("b")), &columns, &indexed));
    assert!(filter_is_exact(
        &k().eq(s("a")).or(k().eq(s("b"))),
        &columns,
        &indexed
    ));
    assert!(filter_is_exact(
        &k().in_list(vec![s("a"), s("b")], false),
        &columns,
        &indexed
    ));
    assert!(!filter_is_exact(&k().gt(s("a")), &columns, &indexed));
    assert!(!filter_is_exact(&k().not_eq(s("a")), &columns, &indexed));
    assert!(!filter_is_exact(&k().like(s("a%")), &columns, &indexed));
    assert!(!filter_is_exact(&n().eq(lit(1i64)), &columns, &indexed));
    let partly = manifest(vec![runs_entry(), entry(10, &[("k", Kind::String)])]);
    assert!(!filter_is_exact(&k().eq(s("b")), &columns, &partly));
}

/// A part of two row groups of four rows, pages of two rows:
/// k = a a b b | c c d NULL, n = 1 2 3 4 | 5 6 7 8.
fn parquet_part() -> (tempfile::NamedTempFile, ArrowReaderMetadata) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8View, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let k: ArrayRef = Arc::new(StringViewArray::from(vec![
        Some("a"),
        Some("a"),
        Some("b"),
        Some("b"),
        Some("c"),
        Some("c"),
        Some("d"),
        None,
    ]));
    let n: ArrayRef = Arc::new(Int64Array::from_iter_values(1..=8));
    let batch = RecordBatch::try_new(schema.clone(), vec![k, n]).unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(4))
        .set_data_page_row_count_limit(2)
        .set_write_batch_size(2)
        .build();
    let mut writer =
        ArrowWriter::try_new(file.reopen().unwrap(), schema, Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
    let metadata = ArrowReaderMetadata::load(&file.reopen().unwrap(), options).unwrap();
    (file, metadata)
}

fn row_groups(e: &PartEntry, metadata: &ArrowReaderMetadata, filter: Expr) -> Vec<bool> {
    let predicate = predicate(filter);
    row_groups_to_scan(&RowGroupStatistics {
        entry: e,
        parquet: metadata.metadata(),
        schema: metadata.schema(),
        predicate: &predicate,
    })
}

#[test]
fn row_groups_prune_by_footer_statistics_of_their_own_kind_only() {
    let (_file, metadata) = parquet_part();
    assert_eq!(metadata.metadata().num_row_groups(), 2);
    let e = entry(8, &[("k", Kind::String), ("n", Kind::Int)]);
    assert_eq!(row_groups(&e, &metadata, n().gt(lit(4i64))), [false, true]);
    assert_eq!(row_groups(&e, &metadata, k().eq(s("a"))), [true, false]);
    assert_eq!(row_groups(&e, &metadata, k().is_null()), [false, true]);
    // Long IN lists too (DataFusion's default stops at 20 values).
    let long: Vec<Expr> = (10..40i64).map(lit).collect();
    assert_eq!(
        row_groups(&e, &metadata, n().in_list(long, false)),
        [false, false]
    );
    assert_eq!(
        row_groups(&e, &metadata, k().like(s("d%")).or(n().lt(lit(2i64)))),
        [true, true]
    );
    // Integer statistics bound the double mode...
    let double = c(&path("n", PathMode::Float));
    assert_eq!(
        row_groups(&e, &metadata, double.clone().gt(lit(4.5f64))),
        [false, true]
    );
    // ...unless the remainder may hold doubles, which the footer knows nothing of.
    let mixed = with_remainder(e.clone(), "n", &[Kind::Float]);
    assert_eq!(
        row_groups(&mixed, &metadata, double.gt(lit(100.0f64))),
        [true, true]
    );
    // `n` read as a string: an integer column holds none.
    let n_string = c(&path("n", PathMode::String));
    assert_eq!(
        row_groups(&e, &metadata, n_string.clone().eq(s("1"))),
        [false, false]
    );
    assert_eq!(row_groups(&e, &metadata, n_string.is_null()), [true, true]);
}

#[test]
fn pages_prune_per_column_and_intersect() {
    let (_file, metadata) = parquet_part();
    let e = entry(8, &[("k", Kind::String), ("n", Kind::Int)]);
    let pages = |rg: usize, filter: Expr| {
        page_selection(
            &e,
            metadata.metadata(),
            metadata.schema(),
            rg,
            &predicate(filter),
        )
    };
    assert_eq!(pages(1, n().gt(lit(6i64))), Some(vec![2..4]));
    assert_eq!(pages(1, k().eq(s("c"))), Some(vec![0..2]));
    assert_eq!(pages(0, k().eq(s("b"))), Some(vec![2..4]));
    assert_eq!(pages(1, k().is_null()), Some(vec![2..4]));
    assert_eq!(
        pages(1, n().gt(lit(6i64)).and(k().eq(s("c")))),
        Some(vec![])
    );
    // Conjuncts over two columns at once cannot use pages.
    assert_eq!(pages(1, n().gt(lit(6i64)).or(k().eq(s("c")))), None);
    // The remainder may feed the mode: no page statistics.
    let mixed = with_remainder(e.clone(), "n", &[Kind::Float]);
    let double = c(&path("n", PathMode::Float));
    let predicate = predicate(double.gt(lit(100.0f64)));
    assert_eq!(
        page_selection(
            &mixed,
            metadata.metadata(),
            metadata.schema(),
            1,
            &predicate
        ),
        None
    );
}
