//! A table's life: created only by its first commit, sort keys checked before anything exists,
//! dropped and altered under the writer lock; an ingest that committed never fails, and only
//! committed ingests record rejects (with the line's text and offset); retired parts are deleted
//! as soon as no reader holds a lease.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use serde_json::Value;
use strata_engine::input::Input;
use strata_engine::{
    DataDir, EngineError, IngestOptions, IngestSummary, MergeOptions, ParsedInput, PreparedIngest,
    Reject, SettingChange, export_table, ingest, ingest_parsed, merge_parts,
};
use strata_format::Manifest;
use strata_json::run_with_deep_stack;

fn try_load(
    dir: &DataDir,
    table: &str,
    inputs: Vec<Input>,
    options: &IngestOptions,
) -> (Result<IngestSummary, EngineError>, Vec<Reject>) {
    let (dir, table, options) = (dir.clone(), table.to_owned(), options.clone());
    run_with_deep_stack(move || {
        let mut rejects = Vec::new();
        let result = ingest(&dir, &table, &inputs, &options, &mut |_| {}, &mut |r| {
            rejects.push(r.clone())
        });
        (result, rejects)
    })
}

fn load(dir: &DataDir, table: &str, file: PathBuf, options: &IngestOptions) -> IngestSummary {
    try_load(dir, table, vec![Input::File(file)], options)
        .0
        .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn no_merge() -> IngestOptions {
    IngestOptions {
        auto_merge: false,
        ..Default::default()
    }
}

fn with_sort_key(key: &[&str]) -> IngestOptions {
    IngestOptions {
        sort_key: Some(key.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn rejects_file(dir: &DataDir, table: &str) -> Vec<Value> {
    match std::fs::read_to_string(dir.rejects_path(table).unwrap()) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// File names in `dir`, without parts' checksum files (which live and die with their part).
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| !name.ends_with(".crc"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn invalid_sort_keys_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let input = write(tmp.path(), "in.ndjson", "{\"kind\":\"a\"}\n");
    for key in [&["kind", "kind"][..], &["a..b"], &["."], &[""]] {
        let (result, _) = try_load(
            &dir,
            "t",
            vec![Input::File(input.clone())],
            &with_sort_key(key),
        );
        let e = result.unwrap_err();
        assert!(
            matches!(e, EngineError::InvalidSortKey { .. }),
            "{key:?}: {e}"
        );
        assert!(!tmp.path().join("db").join("t").exists(), "{key:?}");
    }
    // The same table then loads with a valid key.
    load(&dir, "t", input, &with_sort_key(&["kind"]));
    assert_eq!(dir.manifest("t").unwrap().settings.sort_key, vec!["kind"]);
}

#[test]
fn a_failed_first_ingest_leaves_no_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let bad = write(tmp.path(), "bad.ndjson", "not json\n[1]\n");
    let (result, rejects) = try_load(&dir, "t", vec![Input::File(bad)], &with_sort_key(&["kind"]));
    assert!(matches!(
        result.unwrap_err(),
        EngineError::AllRejected { rejected: 2, .. }
    ));
    assert_eq!(rejects.len(), 2);
    assert!(dir.table_names().unwrap().is_empty());
    // The failed ingest did not fix the sort key: another one can be chosen.
    let good = write(tmp.path(), "good.ndjson", "{\"did\":\"x\"}\n");
    load(&dir, "t", good, &with_sort_key(&["did"]));
    assert_eq!(dir.manifest("t").unwrap().settings.sort_key, vec!["did"]);
    // A failed ingest into it records none of its rejects.
    assert!(rejects_file(&dir, "t").is_empty());
}

#[test]
fn a_missing_input_is_found_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let good = write(tmp.path(), "good.ndjson", "{\"a\":1}\n");
    let missing = tmp.path().join("missing.ndjson");
    let (result, _) = try_load(
        &dir,
        "t",
        vec![Input::File(good.clone()), Input::File(missing.clone())],
        &IngestOptions::default(),
    );
    let e = result.unwrap_err();
    assert!(
        matches!(&e, EngineError::Input { path, .. } if *path == missing),
        "{e}"
    );
    assert!(!tmp.path().join("db").exists(), "nothing is created");
    load(&dir, "t", good.clone(), &IngestOptions::default());
    let version = dir.manifest("t").unwrap().version;
    let (result, _) = try_load(
        &dir,
        "t",
        vec![Input::File(good), Input::File(tmp.path().to_owned())],
        &IngestOptions::default(),
    );
    assert!(result.unwrap_err().to_string().contains("is a directory"));
    assert_eq!(dir.manifest("t").unwrap().version, version);
}

#[test]
fn drop_table_removes_it_and_alter_changes_max_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let input = write(
        tmp.path(),
        "in.ndjson",
        "{\"kind\":\"a\",\"b\":1,\"c\":2,\"d\":3}\n",
    );
    load(&dir, "t", input.clone(), &with_sort_key(&["kind"]));
    let settings = dir
        .alter_table(
            "t",
            &[SettingChange {
                name: "max_columns".into(),
                value: "2".into(),
            }],
        )
        .unwrap();
    assert_eq!(settings.max_columns, 2);
    load(&dir, "t", input.clone(), &no_merge());
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.parts[0].columns.len(), 4, "old parts keep theirs");
    assert_eq!(
        manifest.parts[1].columns.len(),
        2,
        "new parts follow the change"
    );
    let e = dir
        .alter_table(
            "t",
            &[SettingChange {
                name: "sort_key".into(),
                value: "b".into(),
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("cannot change"), "{e}");

    assert!(dir.drop_table("t").unwrap());
    assert!(!tmp.path().join("db").join("t").exists());
    assert!(dir.table_names().unwrap().is_empty());
    assert!(!dir.drop_table("t").unwrap());
    assert!(matches!(
        dir.alter_table("t", &[]).unwrap_err(),
        EngineError::NoSuchTable(_)
    ));
    assert!(
        !tmp.path().join("db").join("t").exists(),
        "alter creates nothing"
    );
    // A dropped table's name can be used again, with another sort key.
    load(&dir, "t", input, &with_sort_key(&["b"]));
    assert_eq!(dir.manifest("t").unwrap().rows(), 1);
}

#[test]
fn a_failed_follow_up_merge_leaves_the_ingest_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    for i in 0..7 {
        let input = write(
            tmp.path(),
            &format!("{i}.ndjson"),
            &format!("{{\"i\":{i}}}\n"),
        );
        load(&dir, "t", input, &no_merge());
    }
    // The merge after the next ingest needs this part, which is damaged: the manifest still
    // loads (same size, checksum file present), the merge's whole-part check fails (ADR 0008).
    let first = dir.manifest("t").unwrap().parts[0].file.clone();
    let path = Manifest::part_path(&tmp.path().join("db/t"), &first);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let input = write(tmp.path(), "last.ndjson", "{\"i\":7}\n{\"i\":8}\n");
    let summary = load(&dir, "t", input, &IngestOptions::default());
    assert_eq!(summary.progress.loaded, 2);
    assert!(summary.merge.is_none());
    assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
    assert!(
        summary.warnings[0].contains("merge"),
        "{:?}",
        summary.warnings
    );
    assert!(
        summary.warnings[0].contains(&first),
        "{:?}",
        summary.warnings
    );
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.rows(), 9, "the ingest's documents are committed");
    assert_eq!(summary.table_documents, 9);
}

#[test]
fn rejects_record_the_line_and_only_for_committed_ingests() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let long = format!("{{\"s\":\"{}", "x".repeat(100_000));
    let text = format!("{{\"a\":1}}\nnot json\n\n{long}\n{{\"a\":2}}\n\u{FEFF}[1]\n");
    let input = write(tmp.path(), "in.ndjson", &text);
    let mut bytes = b"{\"a\":3}\n".to_vec();
    bytes.extend_from_slice(b"\xff\xfe{}\n");
    let binary = tmp.path().join("bin.ndjson");
    std::fs::write(&binary, &bytes).unwrap();
    let (result, _) = try_load(
        &dir,
        "t",
        vec![Input::File(input.clone()), Input::File(binary.clone())],
        &IngestOptions::default(),
    );
    let summary = result.unwrap();
    assert_eq!(summary.progress.loaded, 3);
    assert_eq!(summary.progress.rejected, 4);
    let rejects = rejects_file(&dir, "t");
    assert_eq!(rejects.len(), 4);
    assert_eq!(rejects[0]["line"], 2);
    assert_eq!(rejects[0]["offset"], 8);
    assert_eq!(rejects[0]["text"], "not json");
    assert_eq!(rejects[0]["length"], 8);
    assert!(rejects[0].get("truncated").is_none());
    assert_eq!(rejects[1]["line"], 4);
    assert_eq!(rejects[1]["offset"], 18);
    assert_eq!(rejects[1]["truncated"], true);
    assert_eq!(rejects[1]["length"], long.len());
    assert_eq!(
        rejects[1]["text"].as_str().unwrap().len(),
        strata_engine::ingest::MAX_REJECT_TEXT_BYTES
    );
    assert_eq!(
        rejects[2]["text"], "\u{FEFF}[1]",
        "a BOM is skipped only at the start"
    );
    assert_eq!(rejects[3]["file"], binary.display().to_string());
    assert_eq!(rejects[3]["line"], 2);
    assert_eq!(rejects[3]["base64"], "//57fQ==");
    assert!(rejects[3].get("text").is_none());

    // An ingest that fails after rejecting lines records none of them: the second input
    // cannot be read (reading /proc/self/mem at offset 0 fails with EIO).
    let (result, rejects) = try_load(
        &dir,
        "t",
        vec![Input::File(input), Input::File("/proc/self/mem".into())],
        &IngestOptions::default(),
    );
    assert!(result.is_err());
    assert_eq!(rejects.len(), 3, "rejects were reported as they came");
    assert_eq!(rejects_file(&dir, "t").len(), 4, "but not recorded");
    assert!(
        !files_in(&tmp.path().join("db/t"))
            .iter()
            .any(|f| f.starts_with(".rejects")),
        "{:?}",
        files_in(&tmp.path().join("db/t"))
    );
    assert_eq!(dir.manifest("t").unwrap().rows(), 3);
}

#[test]
fn a_bom_at_the_start_of_an_input_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let input = write(
        tmp.path(),
        "bom.ndjson",
        "\u{FEFF}{\"a\":1}\r\n{\"a\":2}\r\n",
    );
    let summary = load(&dir, "t", input, &IngestOptions::default());
    assert_eq!(summary.progress.loaded, 2);
    assert_eq!(summary.progress.rejected, 0);
}

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "p".repeat(i % 50)))
        .collect()
}

fn truncated_compressed_input_loads_what_it_can(name: &str, compressed: Vec<u8>, total: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let path = tmp.path().join(name);
    std::fs::write(&path, &compressed[..compressed.len() / 2]).unwrap();
    let (result, rejects) = try_load(
        &dir,
        "t",
        vec![Input::File(path)],
        &IngestOptions::default(),
    );
    let summary = result.unwrap();
    let loaded = summary.progress.loaded as usize;
    assert!(loaded > 0 && loaded < total, "{name}: loaded {loaded}");
    assert_eq!(rejects.len(), 1, "{name}: {rejects:?}");
    let reject = &rejects[0];
    assert_eq!(reject.line, loaded as u64 + 1, "{name}");
    let full = lines(total);
    let expected_offset: usize = full.lines().take(loaded).map(|l| l.len() + 1).sum();
    assert_eq!(reject.offset, expected_offset as u64, "{name}");
    assert!(reject.reason.contains("ends early"), "{}", reject.reason);
    let text = reject.text.as_deref().unwrap();
    assert!(full[expected_offset..].starts_with(text), "{name}: {text}");
    assert_eq!(rejects_file(&dir, "t").len(), 1);
}

#[test]
fn a_truncated_gzip_or_zstd_input_loads_its_readable_documents() {
    let total = 20_000;
    let text = lines(total);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    truncated_compressed_input_loads_what_it_can("in.ndjson.gz", gz.finish().unwrap(), total);
    let zst = zstd::stream::encode_all(text.as_bytes(), 3).unwrap();
    truncated_compressed_input_loads_what_it_can("in.ndjson.zst", zst, total);
}

#[test]
fn a_waiting_writer_is_told_who_holds_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let held = DataDir::new(tmp.path())
        .lock_for_write("t", "ingest")
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = DataDir::new(tmp.path()).with_lock_wait_notice(Arc::new(move |wait| {
        tx.send((
            wait.table.to_owned(),
            wait.lock_file.to_owned(),
            wait.holder.clone(),
        ))
        .unwrap();
    }));
    let thread = std::thread::spawn(move || waiter.lock_for_write("t", "optimize").map(|_| ()));
    let (table, lock_file, holder) = rx.recv().unwrap();
    assert_eq!(table, "t");
    assert_eq!(lock_file, tmp.path().join("t/.lock"));
    let holder = holder.unwrap();
    assert_eq!(holder.pid, std::process::id());
    assert_eq!(holder.purpose, "ingest");
    drop(held);
    thread.join().unwrap().unwrap();
}

#[test]
fn retired_parts_are_deleted_once_no_reader_holds_a_lease() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    for i in 0..3 {
        let input = write(
            tmp.path(),
            &format!("{i}.ndjson"),
            &format!("{{\"i\":{i}}}\n"),
        );
        load(&dir, "t", input, &no_merge());
    }
    let parts_dir = tmp.path().join("db/t/parts");
    let before = files_in(&parts_dir);
    assert_eq!(before.len(), 3);

    // A reader's lease keeps the parts its snapshot lists.
    let lease = dir.read_lease("t").unwrap().unwrap();
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!((summary.inputs_merged, summary.retired_kept), (3, 3));
    assert_eq!(files_in(&parts_dir).len(), 4);
    drop(lease);
    // The next writer deletes them.
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!(summary.retired_kept, 0);
    let after = files_in(&parts_dir);
    assert_eq!(after.len(), 1);
    assert!(!before.contains(&after[0]));
    assert!(dir.manifest("t").unwrap().retired.is_empty());

    // Without readers, `optimize` reclaims the space at once.
    for i in 3..5 {
        let input = write(
            tmp.path(),
            &format!("{i}.ndjson"),
            &format!("{{\"i\":{i}}}\n"),
        );
        load(&dir, "t", input, &no_merge());
    }
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!((summary.inputs_merged, summary.retired_kept), (3, 0));
    assert_eq!(files_in(&parts_dir).len(), 1);
    assert_eq!(dir.manifest("t").unwrap().rows(), 5);
}

/// A process's readers of a table share one locked lease file; a table dropped and created
/// again under its name gets a lease of its own, not the dropped table's file.
#[test]
fn a_lease_of_a_table_created_again_protects_the_new_tables_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("db"));
    let load_three = |from: usize| {
        for i in from..from + 3 {
            let input = write(
                tmp.path(),
                &format!("{i}.ndjson"),
                &format!("{{\"i\":{i}}}\n"),
            );
            load(&dir, "t", input, &no_merge());
        }
    };
    load_three(0);
    let first = dir.read_lease("t").unwrap().unwrap();
    let second = dir.clone().read_lease("t").unwrap().unwrap();
    drop(first);
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!(summary.retired_kept, 3, "the second reader still reads");
    drop(second);

    let old = dir.read_lease("t").unwrap().unwrap();
    assert!(dir.drop_table("t").unwrap());
    load_three(3);
    let new = dir.read_lease("t").unwrap().unwrap();
    drop(old);
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!(
        (summary.inputs_merged, summary.retired_kept),
        (3, 3),
        "the new table's reader holds its parts"
    );
    drop(new);
    let summary = merge_parts(&dir, "t", &MergeOptions::default()).unwrap();
    assert_eq!(summary.retired_kept, 0);
}

/// The server parses a request once and writes the parsed documents later: that must commit
/// exactly what loading the lines commits — counts, rejects (line, offset, text) and documents,
/// across several parts.
#[test]
fn a_parsed_input_loads_what_its_lines_load() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let mut text = String::from("\u{FEFF}");
    // More lines than one chunk (32,768), so that both loads cut parts between chunks.
    for i in 0..70_000 {
        match i % 500 {
            7 => text.push_str("not json\n"),
            8 => text.push('\n'),
            9 => text.push_str("[1, 2]\n"),
            10 => text.push_str(&format!("{{\"id\": {i}, \"id\": \"twice\"}}\n")),
            _ => text.push_str(&format!(
                "{{\"id\": {i}, \"tag\": \"t{}\", \"n\": {{\"x\": {}.5}}}}\n",
                i % 7,
                i
            )),
        }
    }
    let file = write(tmp.path(), "in.ndjson", &text);
    let options = IngestOptions {
        // Small parts, so that both loads cut several.
        part_target_bytes: 16 * 1024,
        ..no_merge()
    };
    let (lines, _) = try_load(&dir, "lines", vec![Input::File(file.clone())], &options);
    let lines = lines.unwrap();

    let parsed = {
        let (dir, options) = (dir.clone(), options.clone());
        run_with_deep_stack(move || {
            let mut parsed = ParsedInput::parse(&Input::File(file.clone()), None, usize::MAX, None)
                .unwrap()
                .expect("no memory limit");
            parsed.rename(&file.display().to_string());
            ingest_parsed(&dir, "parsed", &[&parsed], &options).unwrap()
        })
    };
    assert_eq!(parsed.progress, lines.progress);
    assert_eq!(parsed.per_input, lines.per_input);
    assert_eq!(parsed.progress.rejected, 280);
    assert_eq!(parsed.progress.duplicate_keys, 140);
    assert!(parsed.parts_written > 1, "{}", parsed.parts_written);
    assert_eq!(parsed.parts_written, lines.parts_written);
    assert_eq!(rejects_file(&dir, "parsed"), rejects_file(&dir, "lines"));
    let export = |table: &str| {
        let mut out = Vec::new();
        export_table(&dir, table, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    assert_eq!(export("parsed"), export("lines"));

    // A body whose documents would take more memory than allowed is not held.
    let small = ParsedInput::parse(&Input::File(tmp.path().join("in.ndjson")), None, 1024, None);
    assert!(small.unwrap().is_none());
}

/// The server shreds a flush without the table's lock and commits it under the lock: when the
/// table's settings changed in between (here: it was created with a sort key), the commit loads
/// the documents again with the settings it finds, never with the ones they were shredded by.
#[test]
fn a_prepared_ingest_follows_settings_changed_before_its_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path().join("data"));
    let text: String = (0..100)
        .map(|i| format!("{{\"id\": {}, \"v\": \"x\"}}\n", 99 - i))
        .collect();
    let file = write(tmp.path(), "in.ndjson", &text);
    let (summary, first_parts) = {
        let (dir, file) = (dir.clone(), file.clone());
        run_with_deep_stack(move || {
            let parsed = ParsedInput::parse(&Input::File(file.clone()), None, usize::MAX, None)
                .unwrap()
                .unwrap();
            let inputs = [&parsed];
            // Shredded for a table that does not exist yet: no sort key.
            let prepared = PreparedIngest::shred(&dir, "t", &inputs, &no_merge()).unwrap();
            // Meanwhile another writer creates it, sorted by id.
            let created = ingest(
                &dir,
                "t",
                &[Input::File(file)],
                &with_sort_key(&["id"]),
                &mut |_| {},
                &mut |_| {},
            )
            .unwrap();
            (prepared.commit(&dir).unwrap(), created.parts_written)
        })
    };
    assert_eq!(summary.progress.loaded, 100);
    assert!(!summary.created);
    let manifest = dir.manifest("t").unwrap();
    assert_eq!(manifest.settings.sort_key, ["id"]);
    assert_eq!(manifest.rows(), 200);
    assert_eq!(manifest.parts.len(), first_parts + summary.parts_written);
    for part in &manifest.parts {
        assert_eq!(part.sort_key_min["id"], 0, "{part:?}");
        assert_eq!(part.sort_key_max["id"], 99, "{part:?}");
    }
}
