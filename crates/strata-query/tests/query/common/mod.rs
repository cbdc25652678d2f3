//! Helpers shared by the integration tests of this crate.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::Path;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, ingest};

/// Ingests `lines` (one document each) into `table` of the data directory at `root` with
/// `options`; panics on any reject or failure.
pub fn ingest_lines(root: &Path, table: &str, lines: &[impl AsRef<str>], options: &IngestOptions) {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for line in lines {
        writeln!(file, "{}", line.as_ref()).unwrap();
    }
    ingest(
        &DataDir::new(root),
        table,
        &[Input::File(file.path().to_owned())],
        options,
        &mut |_| {},
        &mut |r| panic!("unexpected reject {r:?}"),
    )
    .unwrap();
}

/// Creates `table` from `lines`, keyed by `key` when given.
pub fn create(root: &Path, table: &str, key: Option<(&str, strata_json::KeyType)>, lines: &[&str]) {
    let options = IngestOptions {
        key: key.map(|(path, key_type)| (path.to_owned(), key_type)),
        ..Default::default()
    };
    ingest_lines(root, table, lines, &options);
}

/// Ingests the NDJSON `file` into `table` (sort key as comma-separated paths), on a deep stack
/// as the binary does; panics with the engine's message on failure.
pub fn load(dir: &DataDir, table: &str, file: &Path, sort_key: Option<&str>) {
    let dir = dir.clone();
    let table = table.to_owned();
    let file = file.to_owned();
    let sort_key = sort_key.map(|k| k.split(',').map(String::from).collect());
    strata_json::run_with_deep_stack(move || {
        ingest(
            &dir,
            &table,
            &[Input::File(file)],
            &IngestOptions {
                sort_key,
                ..Default::default()
            },
            &mut |_| {},
            &mut |_| {},
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .unwrap();
}

/// Each row of `batches` as its cells joined by ` | `, NULL written `NULL`.
pub fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            rows.push(cells.join(" | "));
        }
    }
    rows
}

/// Whether `sql` is answered without a plan (`Session::point_read`), and its rows, as a pretty
/// table, when it is.
pub fn point_read(session: &strata_query::Session, sql: &str) -> Option<String> {
    use strata_query::point_read::{PointRead, PointValue};
    let read = PointRead::parse(sql)?;
    let PointValue::Literal(value) = &read.value else {
        return None;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let result = runtime
        .block_on(session.point_read(&read, value))
        .unwrap()?;
    Some(
        arrow::util::pretty::pretty_format_batches(&result.batches)
            .unwrap()
            .to_string(),
    )
}

/// `EXPLAIN ANALYZE sql` in `session`, as a table.
pub fn explain(session: &strata_query::Session, sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let result = session
            .run(&format!("EXPLAIN ANALYZE {sql}"))
            .await
            .unwrap();
        arrow::util::pretty::pretty_format_batches(&result.batches)
            .unwrap()
            .to_string()
    })
}

/// The value of a metric `name=N` in an EXPLAIN ANALYZE plan; panics when it is not there.
pub fn metric(plan: &str, name: &str) -> u64 {
    let start = plan
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("no {name} in\n{plan}"));
    plan[start + name.len() + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}
