//! Reads through an object store (`VerifiedPartReader`, the query scan's reader): the same rows
//! as the synchronous `PartFile`, and a damaged byte in a page is an error naming the part.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use std::path::Path;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use strata_format::checksum::checksum_path;
use strata_format::{PartEntry, VerifiedPartReader, open_part};

const BATCH: usize = 4096;

fn part_path(dir: &Path) -> std::path::PathBuf {
    dir.join("parts/part.parquet")
}

/// Rows 9,000..14,000 of a 20,000-row part: parts of two pages of every column.
fn middle() -> RowSelection {
    RowSelection::from(vec![
        RowSelector::skip(9_000),
        RowSelector::select(5_000),
        RowSelector::skip(6_000),
    ])
}

/// The part's batches read through a `LocalFileSystem` store rooted at the table directory.
async fn read_through_store(
    dir: &Path,
    entry: &PartEntry,
    selection: Option<RowSelection>,
) -> Result<Vec<RecordBatch>, String> {
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    read_from(store, dir, entry, selection).await
}

/// The part's batches read through `store`, which holds the table directory's `parts/`; the
/// footer and checksums come from the local part, as the scan's cache provides them.
async fn read_from(
    store: Arc<dyn ObjectStore>,
    dir: &Path,
    entry: &PartEntry,
    selection: Option<RowSelection>,
) -> Result<Vec<RecordBatch>, String> {
    let path = part_path(dir);
    let opened = open_part(&path, entry).map_err(|e| e.to_string())?;
    let reader = VerifiedPartReader::new(
        store,
        object_store::path::Path::from("parts/part.parquet"),
        path.clone(),
        opened.checksums.clone(),
        opened.metadata.metadata().clone(),
    );
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, opened.metadata)
        .with_batch_size(BATCH);
    if let Some(selection) = selection {
        builder = builder.with_row_selection(selection);
    }
    let stream = builder.build().map_err(|e| e.to_string())?;
    stream.try_collect().await.map_err(|e| e.to_string())
}

/// The same through the synchronous, verified `PartFile`.
fn read_through_file(
    dir: &Path,
    entry: &PartEntry,
    selection: Option<RowSelection>,
) -> Vec<RecordBatch> {
    let path = part_path(dir);
    let opened = open_part(&path, entry).unwrap();
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
        opened.file(&path).unwrap(),
        opened.metadata,
    )
    .with_batch_size(BATCH);
    if let Some(selection) = selection {
        builder = builder.with_row_selection(selection);
    }
    builder.build().unwrap().collect::<Result<_, _>>().unwrap()
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

#[tokio::test]
async fn an_undamaged_part_reads_the_same_rows_as_through_part_file() {
    let (dir, entry) = common::write_docs(&common::docs(20_000), &["kind".to_owned()]);
    let whole = read_through_store(dir.path(), &entry, None).await.unwrap();
    assert_eq!(rows(&whole), 20_000);
    assert_eq!(whole, read_through_file(dir.path(), &entry, None));
    let selected = read_through_store(dir.path(), &entry, Some(middle()))
        .await
        .unwrap();
    assert_eq!(rows(&selected), 5_000);
    assert_eq!(
        selected,
        read_through_file(dir.path(), &entry, Some(middle()))
    );
}

#[tokio::test]
async fn a_damaged_byte_in_a_page_is_an_error_naming_the_part() {
    let (dir, entry) = common::write_docs(&common::docs(20_000), &["kind".to_owned()]);
    let path = part_path(dir.path());
    let clean = std::fs::read(&path).unwrap();
    let len = clean.len();
    for offset in [64, len / 3, len / 2, 2 * len / 3] {
        let mut damaged = clean.clone();
        damaged[offset] ^= 0x5a;
        std::fs::write(&path, &damaged).unwrap();
        let message = read_through_store(dir.path(), &entry, None)
            .await
            .expect_err("a damaged page read without error");
        assert!(
            message.contains(&path.display().to_string()) && message.contains("damaged"),
            "flip at {offset}: {message}"
        );
    }
    std::fs::write(&path, &clean).unwrap();
    assert_eq!(
        rows(&read_through_store(dir.path(), &entry, None).await.unwrap()),
        20_000
    );
}

#[tokio::test]
async fn parts_without_checksums_read_through_the_store_unverified() {
    let (dir, entry) = common::write_docs(&common::docs(5_000), &["kind".to_owned()]);
    let expected = read_through_file(dir.path(), &entry, None);
    std::fs::remove_file(checksum_path(&part_path(dir.path()))).unwrap();
    let legacy = PartEntry {
        xxh64: None,
        deletes: None,
        keys: None,
        ..entry
    };
    assert_eq!(
        read_through_store(dir.path(), &legacy, None).await.unwrap(),
        expected
    );
}

#[tokio::test]
async fn a_missing_part_is_an_error_naming_it() {
    let (dir, entry) = common::write_docs(&common::docs(1_000), &["kind".to_owned()]);
    let path = part_path(dir.path());
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let message = read_from(store, dir.path(), &entry, None)
        .await
        .expect_err("read from an empty store");
    assert!(message.contains(&path.display().to_string()), "{message}");
}
