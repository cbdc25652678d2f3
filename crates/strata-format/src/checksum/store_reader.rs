//! Verified reads through an `object_store`: a part as parquet's [`AsyncFileReader`].
//!
//! Every read is widened to whole segments ([`PartChecksums::covering`]), fetched through the
//! store in one `get_ranges` call (which a remote store coalesces into few requests), verified
//! ([`PartChecksums::verify`]) and only then sliced to the bytes asked for. The footer is never
//! read here: readers are built from metadata already verified by [`open_part`], so
//! [`AsyncFileReader::get_metadata`] hands that back.
//!
//! [`open_part`]: super::open_part

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;

use crate::error::FormatError;
use crate::held::StoredFile;

use super::segments::PartChecksums;

/// A part read through an [`ObjectStore`]: with checksums, every byte handed out is verified
/// first, and a damaged byte is an error naming the part, never a value.
#[derive(Debug, Clone)]
pub struct VerifiedPartReader {
    store: Arc<dyn ObjectStore>,
    location: StorePath,
    /// The part as errors name it (its path on disk for a local store).
    path: PathBuf,
    checksums: Option<Arc<PartChecksums>>,
    metadata: Arc<ParquetMetaData>,
}

impl VerifiedPartReader {
    /// A reader of the part at `location` in `store`, whose footer `metadata` and `checksums`
    /// come from [`super::open_part`]; `path` names the part in errors.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        location: StorePath,
        path: PathBuf,
        checksums: Option<Arc<PartChecksums>>,
        metadata: Arc<ParquetMetaData>,
    ) -> Self {
        VerifiedPartReader {
            store,
            location,
            path,
            checksums,
            metadata,
        }
    }

    fn store_error(&self, source: object_store::Error) -> ParquetError {
        external(FormatError::Store {
            path: self.path.clone(),
            source,
        })
    }

    /// The bytes of `ranges`, from the held file when the part is held ([`crate::held`]: a
    /// part a transaction wrote that no checkpoint wrote out yet), else through the store.
    async fn fetch(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, ParquetError> {
        if let Some(bytes) = crate::held::get(&self.path) {
            let held = StoredFile::Held(bytes);
            return ranges
                .iter()
                .map(|range| {
                    held.read_range(range.clone())
                        .map_err(|e| external(FormatError::io(&self.path, e)))
                })
                .collect();
        }
        self.store
            .get_ranges(&self.location, ranges)
            .await
            .map_err(|e| self.store_error(e))
    }

    async fn read(&self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>, ParquetError> {
        let Some(sums) = &self.checksums else {
            return self.fetch(&ranges).await;
        };
        let runs = segment_runs(sums, &ranges).map_err(external)?;
        let fetched = self.fetch(&runs).await?;
        for (run, bytes) in runs.iter().zip(&fetched) {
            if bytes.len() as u64 != run.end - run.start {
                return Err(external(super::damaged(
                    &self.path,
                    format!(
                        "read of bytes {}..{} returned {} bytes",
                        run.start,
                        run.end,
                        bytes.len()
                    ),
                )));
            }
            sums.verify(run.start, bytes).map_err(external)?;
        }
        ranges
            .iter()
            .map(|range| {
                // `runs` are disjoint, ascending and cover every range.
                let i = runs.partition_point(|run| run.end <= range.start);
                let (run, bytes) = runs
                    .get(i)
                    .zip(fetched.get(i))
                    .ok_or_else(|| ParquetError::General(format!("bytes {range:?} not fetched")))?;
                let from = (range.start - run.start) as usize;
                Ok(bytes.slice(from..from + (range.end - range.start) as usize))
            })
            .collect()
    }
}

/// The runs of whole segments that cover `ranges`: disjoint, ascending, overlapping covers
/// merged so that no segment is fetched or verified twice.
fn segment_runs(
    sums: &PartChecksums,
    ranges: &[Range<u64>],
) -> Result<Vec<Range<u64>>, FormatError> {
    let mut covers = ranges
        .iter()
        .map(|r| sums.covering(r.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    covers.sort_unstable_by_key(|r| r.start);
    let mut runs: Vec<Range<u64>> = Vec::with_capacity(covers.len());
    for cover in covers {
        match runs.last_mut() {
            Some(last) if cover.start < last.end => last.end = last.end.max(cover.end),
            _ => runs.push(cover),
        }
    }
    Ok(runs)
}

impl AsyncFileReader for VerifiedPartReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let mut bytes = self.read(vec![range]).await?;
            bytes
                .pop()
                .ok_or_else(|| ParquetError::General("no bytes fetched".to_owned()))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.read(ranges).boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let metadata = self.metadata.clone();
        async move { Ok(metadata) }.boxed()
    }
}

fn external(e: FormatError) -> ParquetError {
    ParquetError::External(Box::new(e))
}
