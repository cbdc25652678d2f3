//! An object store wrapper that counts GET requests and the bytes they return: what the S3
//! benchmark reports per query, and what tests check the cache against.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// GET requests sent and bytes they returned.
#[derive(Debug, Default)]
pub struct StoreStats {
    gets: AtomicU64,
    bytes: AtomicU64,
}

impl StoreStats {
    /// (GET requests, bytes fetched) so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Counts the GETs sent to `inner` and the bytes they returned.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    stats: Arc<StoreStats>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn ObjectStore>, stats: Arc<StoreStats>) -> Self {
        CountingStore { inner, stats }
    }
}

impl std::fmt::Display for CountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
// `get_ranges` is left to the trait's default, which coalesces ranges and sends each request
// through `get_opts`: every request and every byte is counted there.
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let head = options.head;
        let result = self.inner.get_opts(location, options).await?;
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        if head {
            return Ok(result);
        }
        // Count the bytes as the caller consumes them.
        let stats = self.stats.clone();
        let payload = match result.payload {
            GetResultPayload::Stream(stream) => GetResultPayload::Stream(
                stream
                    .inspect(move |chunk| {
                        if let Ok(chunk) = chunk {
                            stats.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        }
                    })
                    .boxed(),
            ),
            file @ GetResultPayload::File(..) => {
                stats
                    .bytes
                    .fetch_add(result.range.end - result.range.start, Ordering::Relaxed);
                file
            }
        };
        Ok(GetResult { payload, ..result })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
