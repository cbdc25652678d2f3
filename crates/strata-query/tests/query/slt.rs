//! Runs every `tests/slt/*.slt` file (sqllogictest format) against tables loaded from the
//! repository's sample data: `edge` (edge cases), `bluesky` (real Jetstream sample, JSONBench
//! sort key), `gh` (real GH Archive 2015 sample), `keys` (three parts, `k` of every JSON type),
//! `scratch` (the Jetstream sample again, for DROP and ALTER).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};

use arrow::array::Array;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use strata_engine::DataDir;
use strata_query::{QueryError, Session};

use crate::common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct StrataDb {
    session: Session,
}

#[async_trait::async_trait]
impl AsyncDB for StrataDb {
    type Error = QueryError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let result = self.session.run(sql).await?;
        let types = result
            .schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::UInt64 => DefaultColumnType::Integer,
                DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, _) => {
                    DefaultColumnType::FloatingPoint
                }
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
                    DefaultColumnType::Text
                }
                _ => DefaultColumnType::Any,
            })
            .collect();
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &result.batches {
            let formatters: Vec<ArrayFormatter> = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<Result<_, _>>()
                .map_err(datafusion::error::DataFusionError::from)?;
            for row in 0..batch.num_rows() {
                rows.push(
                    formatters
                        .iter()
                        .zip(batch.columns())
                        .map(|(f, c)| {
                            let text = f.value(row).to_string();
                            if !c.is_null(row) && text.is_empty() {
                                "(empty)".to_owned()
                            } else {
                                text
                            }
                        })
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "strata"
    }
}

/// Ingests `tests/data/<file>` of the repository into `table`.
fn load(dir: &DataDir, table: &str, file: &str, sort_key: Option<&str>) {
    common::load(dir, table, &repo().join("tests/data").join(file), sort_key);
}

#[test]
fn sqllogictest_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    load(&dir, "edge", "edge_cases.ndjson", None);
    load(
        &dir,
        "bluesky",
        "jetstream_sample.ndjson",
        Some("kind,commit.operation,commit.collection,did,time_us"),
    );
    load(
        &dir,
        "gh",
        "gharchive_2015-01-01_sample.ndjson",
        Some("type,repo.name"),
    );
    // Three parts (so aggregation runs in two phases): one with every JSON type under `k`, one
    // with strings only, one without `k` at all.
    load(&dir, "keys", "group_keys.ndjson", None);
    load(&dir, "keys", "group_keys_strings.ndjson", None);
    load(&dir, "keys", "jetstream_sample.ndjson", None);
    // Dropped and altered by 07_ddl.slt (the other files never read it).
    load(&dir, "scratch", "jetstream_sample.ndjson", Some("kind,did"));
    let root = tmp.path().to_owned();

    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/slt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files found");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(strata_json::DEEP_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    for file in &files {
        let root = root.clone();
        let result = runtime.block_on(async move {
            let mut runner = sqllogictest::Runner::new(move || {
                let root = root.clone();
                async move {
                    Ok::<_, QueryError>(StrataDb {
                        session: Session::open(&root)?,
                    })
                }
            });
            runner.run_file_async(file).await
        });
        if let Err(e) = result {
            failures.push(format!("{}: {}", file.display(), e.display(true)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
