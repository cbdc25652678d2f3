//! Ingest through log pipelines (issue 15): every line of the real Apache log arrives once,
//! parsed or kept whole; the table gets its time column (and, by default, its sort key) from
//! the pipeline; a time column, once set, is fixed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::PathBuf;

use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{DataDir, EngineError, IngestOptions, IngestSummary, export_table, ingest};
use strata_json::run_with_deep_stack;
use strata_pipeline::Pipelines;

/// The real Apache combined log (tests/data/SOURCES.md); line 8,899 is truncated.
fn apache_log() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/apache_access_2015-05.log")
}

fn load(dir: &DataDir, table: &str, options: IngestOptions) -> Result<IngestSummary, EngineError> {
    let (dir, table) = (dir.clone(), table.to_owned());
    run_with_deep_stack(move || {
        ingest(
            &dir,
            &table,
            &[Input::File(apache_log())],
            &options,
            &mut |_| {},
            &mut |_| {},
        )
    })
}

fn pipeline(name: &str) -> IngestOptions {
    IngestOptions {
        pipeline: Some(Pipelines::default().get(name).unwrap()),
        ..Default::default()
    }
}

fn exported(dir: &DataDir, table: &str) -> Vec<Value> {
    let mut out = Vec::new();
    export_table(dir, table, &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn every_line_of_the_real_log_arrives_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let summary = load(&dir, "access", pipeline("nginx")).unwrap();
    assert_eq!(summary.progress.read, 10_000);
    assert_eq!(summary.progress.loaded, 10_000);
    assert_eq!(summary.progress.rejected, 0);
    assert_eq!(summary.progress.unparsed, 1);

    let lines: Vec<String> = std::fs::read_to_string(apache_log())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let documents = exported(&dir, "access");
    assert_eq!(documents.len(), lines.len());
    let unparsed: Vec<&Value> = documents
        .iter()
        .filter(|doc| doc.get("pipeline_error").is_some())
        .collect();
    assert_eq!(unparsed.len(), 1);
    assert_eq!(unparsed[0]["message"], lines[8_898].as_str());
    // Status and bytes sum over the documents as over the lines' text (`-` bytes: none).
    let sum = |pick: fn(&str) -> Option<i64>| -> i64 {
        lines
            .iter()
            .filter(|l| **l != lines[8_898])
            .filter_map(|l| pick(l))
            .sum()
    };
    let field = |doc: &Value, name: &str| doc.get(name).and_then(Value::as_i64);
    let from_docs = |name: &str| documents.iter().filter_map(|d| field(d, name)).sum::<i64>();
    assert_eq!(from_docs("status"), sum(|l| after_request_field(l, 0)));
    assert_eq!(from_docs("bytes"), sum(|l| after_request_field(l, 1)));
    // Sorted by time: the table's time column is the pipeline's time field.
    let manifest = dir.manifest("access").unwrap();
    assert_eq!(manifest.settings.time_column.as_deref(), Some("timestamp"));
    assert_eq!(manifest.settings.sort_key, vec!["timestamp".to_owned()]);
}

/// The `index`th whitespace field after a line's quoted request, as a number.
fn after_request_field(line: &str, index: usize) -> Option<i64> {
    let rest = line.splitn(3, '"').nth(2)?;
    rest.split_whitespace().nth(index)?.parse().ok()
}

#[test]
fn full_text_lines_keep_the_line_and_its_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let summary = load(&dir, "lines", pipeline("text")).unwrap();
    assert_eq!(
        (summary.progress.loaded, summary.progress.unparsed),
        (10_000, 0)
    );
    let documents = exported(&dir, "lines");
    let first = documents
        .iter()
        .find(|doc| {
            doc["message"]
                .as_str()
                .unwrap()
                .starts_with("83.149.9.216 - - [17/May/2015:10:05:03")
        })
        .unwrap();
    assert_eq!(first["timestamp"], "2015-05-17T10:05:03.000Z");
}

#[test]
fn a_time_column_is_fixed_when_the_table_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let options = IngestOptions {
        time_column: Some("when".to_owned()),
        sort_key: Some(vec!["status".to_owned()]),
        ..pipeline("common")
    };
    let summary = load(&dir, "access", options).unwrap();
    // Combined lines are not common ones: every line is kept whole, none is lost.
    assert_eq!(summary.progress.unparsed, 10_000);
    let manifest = dir.manifest("access").unwrap();
    assert_eq!(manifest.settings.time_column.as_deref(), Some("when"));
    assert_eq!(manifest.settings.sort_key, vec!["status".to_owned()]);
    // The pipeline's default does not clash with an existing table; an explicit one does.
    load(&dir, "access", pipeline("nginx")).unwrap();
    let clash = load(
        &dir,
        "access",
        IngestOptions {
            time_column: Some("timestamp".to_owned()),
            ..pipeline("nginx")
        },
    )
    .unwrap_err();
    assert!(clash.to_string().contains("time column when"), "{clash}");
    let bad = load(
        &dir,
        "other",
        IngestOptions {
            time_column: Some("a..b".to_owned()),
            ..pipeline("nginx")
        },
    )
    .unwrap_err();
    assert!(
        matches!(bad, EngineError::InvalidTimeColumn { .. }),
        "{bad}"
    );
}

/// Ingests `lines` through the `text` pipeline (each line as `message`, its ISO time as
/// `timestamp`, the time column).
fn load_lines(dir: &DataDir, table: &str, lines: &[&str]) {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), lines.join("\n")).unwrap();
    let (dir, table, path) = (dir.clone(), table.to_owned(), tmp.path().to_owned());
    let options = IngestOptions {
        auto_merge: false,
        ..pipeline("text")
    };
    run_with_deep_stack(move || {
        ingest(
            &dir,
            &table,
            &[Input::File(path)],
            &options,
            &mut |_| {},
            &mut |_| {},
        )
    })
    .unwrap();
}

#[test]
fn expired_parts_are_dropped_whole() {
    use strata_engine::{SettingChange, drop_expired};
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    load_lines(
        &dir,
        "app",
        &["2026-01-01T10:00:00Z old a", "2026-01-02T10:00:00Z old b"],
    );
    load_lines(&dir, "app", &["2026-11-25T10:00:00Z new c"]);
    // A part with an old and a new line stays whole.
    load_lines(
        &dir,
        "app",
        &["2026-01-03T10:00:00Z old d", "2026-11-25T11:00:00Z new e"],
    );
    // 2026-11-26T00:00:00Z.
    let now = 1_795_651_200;
    // No TTL: nothing goes.
    assert_eq!(drop_expired(&dir, "app", now).unwrap().parts_dropped, 0);
    dir.alter_table(
        "app",
        &[SettingChange {
            name: "ttl".into(),
            value: "7d".into(),
        }],
    )
    .unwrap();
    let summary = drop_expired(&dir, "app", now).unwrap();
    assert_eq!((summary.parts_dropped, summary.rows_dropped), (1, 2));
    let messages: Vec<String> = exported(&dir, "app")
        .iter()
        .map(|doc| doc["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(messages.len(), 3);
    assert!(
        messages
            .iter()
            .all(|m| !m.contains("old a") && !m.contains("old b"))
    );
    // Again: nothing more is old enough.
    assert_eq!(drop_expired(&dir, "app", now).unwrap().parts_dropped, 0);
    let manifest = dir.manifest("app").unwrap();
    assert_eq!(manifest.settings.ttl_seconds, Some(7 * 86_400));
    assert_eq!(manifest.parts.len(), 2);
}

#[test]
fn a_table_gets_its_retention_when_an_ingest_creates_it_and_keeps_it_after() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    let file = tmp.path().join("lines.log");
    std::fs::write(&file, "2026-11-25T10:00:00Z a\n").unwrap();
    let load = |table: &str, options: IngestOptions| {
        let (dir, table, file) = (dir.clone(), table.to_owned(), file.clone());
        run_with_deep_stack(move || {
            ingest(
                &dir,
                &table,
                &[Input::File(file)],
                &options,
                &mut |_| {},
                &mut |_| {},
            )
        })
    };
    let with_ttl = |ttl: &str| IngestOptions {
        ttl: Some(ttl.to_owned()),
        ..pipeline("text")
    };
    load("app", with_ttl("30d")).unwrap();
    assert_eq!(
        dir.manifest("app").unwrap().settings.ttl_seconds,
        Some(30 * 86_400)
    );
    // The same retention again, or none given: loads. Another one: refused, naming ALTER TABLE.
    load("app", with_ttl("30 days")).unwrap();
    load("app", pipeline("text")).unwrap();
    let e = load("app", with_ttl("7d")).unwrap_err().to_string();
    assert!(e.contains("ALTER TABLE app SET (ttl"), "{e}");
    assert!(load("app", with_ttl("soon")).is_err());
    // Without a time column there is nothing to expire by: no table is created.
    let json = IngestOptions {
        ttl: Some("30d".into()),
        ..pipeline("json")
    };
    let e = load("plain", json).unwrap_err().to_string();
    assert!(e.contains("no time column"), "{e}");
    assert!(dir.manifest("plain").is_err());
}
