//! `POST /v1/ingest/{table}[?sort_key=a,b][&wait=visible|durable][&pipeline=NAME]`: an NDJSON
//! body (plain, or gzip/zstd by `Content-Encoding`) loaded into a table by the same code and
//! rules as `strata ingest`; with `pipeline`, raw log lines made documents by that pipeline.
//!
//! A body up to `wal.max_request_bytes` is buffered, parsed once (the answer's counts and
//! rejects come from this parse) and stored in the write-ahead log; its parsed documents wait in
//! `crate::ingest_queue` to be written into parts. The answer comes once queries see the
//! documents (`wait=visible`, the default) or after the WAL's fsync (`wait=durable`).
//! A larger body, one that creates a table with a sort key, one whose documents would take more
//! memory than one flush takes (`wal.flush_bytes`, or `wal.max_pending_bytes` if smaller), and
//! one whose every line is rejected stream through the decompressor into the shredder on a
//! thread of their own, so memory does not grow with the body, and are answered after their
//! commit. Either way `200` means every accepted document is
//! durable. Rejected lines are listed with their line number and reason (the first
//! [`MAX_LISTED_REJECTS`]; all of them are also in the table's `rejects.ndjson`). A body that is
//! cut off or too large stores nothing.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::json;
use strata_engine::input::{Compression, Input, StreamInput};
use strata_engine::settings::parse_key_spec;
use strata_engine::{
    EngineError, IngestOptions, IngestProgress, IngestSummary, OnConflict, ParsedInput, Reject,
};

use super::ApiError;
use crate::Shared;
use crate::ingest_queue::{IngestQueue, QueueError};
use crate::sqlstate;

/// Rejects listed in an answer; a body of a million bad lines must not make a huge answer.
pub use crate::ingest_queue::MAX_LISTED_REJECTS;

#[derive(Deserialize)]
pub struct IngestParams {
    /// Comma-separated dotted paths; used when the request creates the table.
    sort_key: Option<String>,
    /// `PATH[:string|integer]`: the key of a table the request creates (checked otherwise).
    key: Option<String>,
    /// For a table with a key: `replace` (default), `ignore` or `error`.
    on_conflict: Option<String>,
    /// `visible` (default): answer once queries see the documents; `durable`: once they are
    /// in the write-ahead log (visible within `wal.flush_interval_ms`).
    wait: Option<String>,
    /// A log pipeline (built in or from the config file): the body is raw lines, each made a
    /// document by it (issue 15).
    pipeline: Option<String>,
    /// The time column of a table the request creates (a dotted path).
    time_column: Option<String>,
    /// Comma-separated dotted paths whose strings get a text index, for a table the request
    /// creates.
    text_index: Option<String>,
    /// `true`: a table the request creates keeps every token's rows in its text index.
    text_postings: Option<bool>,
    /// Comma-separated dotted paths whose whole values get keyword postings, for a table the
    /// request creates.
    keyword_index: Option<String>,
}

pub async fn ingest(
    State(shared): State<Arc<Shared>>,
    Path(table): Path<String>,
    Query(params): Query<IngestParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match run(shared, table, params, &headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn run(
    shared: Arc<Shared>,
    table: String,
    params: IngestParams,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    shared
        .data_dir
        .table_dir(&table)
        .map_err(|e| engine_error(&e))?;
    let compression = compression(headers)?;
    let on_conflict = match params.on_conflict.as_deref() {
        None => OnConflict::default(),
        Some(text) => text.parse().map_err(|e: String| {
            ApiError::new(StatusCode::BAD_REQUEST, sqlstate::INVALID_PARAMETER, e)
        })?,
    };
    let requested = IngestOptions {
        sort_key: params
            .sort_key
            .as_deref()
            .map(|keys| keys.split(',').map(str::to_owned).collect()),
        key: params.key.as_deref().map(parse_key_spec),
        on_conflict,
        pipeline: params
            .pipeline
            .as_deref()
            .map(|name| shared.pipelines.get(name))
            .transpose()
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    sqlstate::INVALID_PARAMETER,
                    e.to_string(),
                )
            })?,
        time_column: params.time_column.clone(),
        text_index: params
            .text_index
            .as_deref()
            .map(|paths| paths.split(',').map(str::to_owned).collect()),
        text_postings: params.text_postings.unwrap_or(false),
        keyword_index: params
            .keyword_index
            .as_deref()
            .map(strata_engine::settings::split_path_list),
        ..IngestOptions::default()
    };
    // Keyed tables load from their lines, which checks each document's key (ADR 0016): they
    // take the direct path, and so do raw lines through a pipeline and requests that set a
    // time column (the WAL's frames hold NDJSON bodies).
    let keyed = requested.pipeline.is_some()
        || requested.time_column.is_some()
        || requested.text_index.is_some()
        || requested.text_postings
        || requested.keyword_index.is_some()
        || params.key.is_some()
        || shared
            .data_dir
            .manifest_shared(&table)
            .is_ok_and(|m| m.settings.key.is_some());
    let wait_visible = match params.wait.as_deref() {
        None | Some("visible") => true,
        Some("durable") => false,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                sqlstate::INVALID_PARAMETER,
                format!("wait={other:?}: use wait=visible (the default) or wait=durable"),
            ));
        }
    };
    let limit = shared.config.limits.max_body_bytes;
    let too_large = Arc::new(AtomicBool::new(false));
    let mut chunks = limited(body, limit, too_large.clone());
    let body_error = |e: io::Error| {
        if too_large.load(Ordering::Relaxed) {
            too_large_error(limit)
        } else {
            unreadable_body(&e)
        }
    };

    // Small bodies (the usual case for applications and shippers) go through the WAL; a body
    // that creates a table with a sort key, or outgrows wal.max_request_bytes, streams into
    // parts directly.
    if let Some(queue) = shared.ingest_queue.clone()
        && params.sort_key.is_none()
        && !keyed
    {
        let most = shared.config.wal.max_request_bytes;
        let mut buffered = BytesMut::new();
        let mut overflow = None;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(body_error)?;
            if buffered.len() + chunk.len() > most {
                overflow = Some(chunk);
                break;
            }
            buffered.extend_from_slice(&chunk);
        }
        let buffered = buffered.freeze();
        match overflow {
            None => {
                return through_wal(&shared, queue, table, compression, buffered, wait_visible)
                    .await;
            }
            Some(chunk) => {
                chunks = futures::stream::iter([Ok(buffered), Ok(chunk)])
                    .chain(chunks)
                    .boxed();
            }
        }
    }
    let reader = body_reader(chunks);
    into_parts(
        &shared,
        table,
        requested,
        compression,
        reader,
        &too_large,
        limit,
    )
    .await
}

type Chunks = BoxStream<'static, io::Result<Bytes>>;

/// The body's chunks, failing once more than `limit` bytes came (and saying so in `too_large`).
fn limited(body: Body, limit: u64, too_large: Arc<AtomicBool>) -> Chunks {
    let mut received = 0u64;
    body.into_data_stream()
        .map_err(io::Error::other)
        .and_then(move |chunk| {
            received += chunk.len() as u64;
            let result = if received > limit {
                too_large.store(true, Ordering::Relaxed);
                Err(io::Error::other(format!(
                    "the request body exceeds {limit} bytes"
                )))
            } else {
                Ok(chunk)
            };
            std::future::ready(result)
        })
        .boxed()
}

/// A blocking reader over the chunks for an ingest thread; it must be made on the runtime.
fn body_reader(chunks: Chunks) -> Box<dyn std::io::Read + Send> {
    Box::new(tokio_util::io::SyncIoBridge::new(
        tokio_util::io::StreamReader::new(chunks),
    ))
}

fn unreadable_body(error: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        sqlstate::DATA_EXCEPTION,
        format!("the request body could not be read to its end; nothing was committed ({error})"),
    )
}

fn too_large_error(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        sqlstate::INVALID_PARAMETER,
        format!(
            "the request body exceeds limits.max_body_bytes ({limit} bytes); nothing was committed"
        ),
    )
}

/// Parses the body, stores it in the WAL, and answers once it is durable (`wait=durable`) or
/// once queries see its documents (`wait=visible`), with the parse's counts and rejects.
async fn through_wal(
    shared: &Arc<Shared>,
    queue: Arc<IngestQueue>,
    table: String,
    compression: Compression,
    body: Bytes,
    wait_visible: bool,
) -> Result<Response, ApiError> {
    let created = !shared.data_dir.table_exists(&table).unwrap_or(true);
    let parsed = parse(shared, &table, compression, body.clone()).await?;
    let Some(parsed) = parsed.filter(|parsed| parsed.progress().loaded > 0) else {
        // Nothing to store, or too much to hold: the direct path records the rejects and
        // answers as `strata ingest` does.
        let reader: Box<dyn std::io::Read + Send> = Box::new(io::Cursor::new(body));
        let never = AtomicBool::new(false);
        return into_parts(
            shared,
            table,
            IngestOptions::default(),
            compression,
            reader,
            &never,
            0,
        )
        .await;
    };
    let progress = parsed.progress().clone();
    let listed: Vec<Reject> = parsed
        .rejects()
        .iter()
        .take(MAX_LISTED_REJECTS)
        .cloned()
        .collect();

    let metrics = &shared.metrics;
    metrics.ingest_requests.fetch_add(1, Ordering::Relaxed);
    let submitted = queue
        .submit(&table, compression, body, parsed, wait_visible)
        .await;
    let seq = match submitted {
        Ok(seq) => seq,
        Err(e) => {
            metrics.ingest_failures.fetch_add(1, Ordering::Relaxed);
            let (status, code) = match &e {
                QueueError::Busy { .. } | QueueError::Stopping => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    sqlstate::INSUFFICIENT_RESOURCES,
                ),
                QueueError::NotDurable(_) | QueueError::NotVisible { .. } => {
                    (StatusCode::INTERNAL_SERVER_ERROR, sqlstate::INTERNAL_ERROR)
                }
            };
            let mut response = ApiError::new(status, code, e.to_string()).into_response();
            if status == StatusCode::SERVICE_UNAVAILABLE {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            }
            return Ok(response);
        }
    };
    count_ingested(metrics, &progress);
    let mut answer = answer(&table, &progress, &listed, created, &[]);
    if let Some(object) = answer.as_object_mut() {
        object.insert("wal_seq".into(), json!(seq));
        object.insert("visible".into(), json!(wait_visible));
        if !wait_visible {
            object.insert(
                "visible_within_ms".into(),
                json!(shared.config.wal.flush_interval_ms),
            );
        }
    }
    Ok(axum::Json(answer).into_response())
}

/// The body's documents and rejects by ingest's own rules; `None` when they would take more
/// than one flush takes in memory. Nothing is written.
async fn parse(
    shared: &Arc<Shared>,
    table: &str,
    compression: Compression,
    body: Bytes,
) -> Result<Option<ParsedInput>, ApiError> {
    let name = format!("request body ({table})");
    let max_line_bytes = shared.config.limits.max_line_bytes;
    // A request is written by one flush; a body that would not fit one (a small gzip body can
    // hold a great deal) streams instead, so concurrent requests hold at most that much each.
    let max_heap_bytes = shared
        .config
        .wal
        .flush_bytes
        .min(shared.config.wal.max_pending_bytes);
    tokio::task::spawn_blocking(move || {
        let input = Input::Stream(StreamInput::new(
            name,
            compression,
            Box::new(io::Cursor::new(body)),
        ));
        ParsedInput::parse(&input, Some(max_line_bytes), max_heap_bytes, None)
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate::INTERNAL_ERROR,
            e.to_string(),
        )
    })?
    .map_err(|e| engine_error(&e))
}

/// Streams the body into parts with one commit, as `strata ingest` does.
async fn into_parts(
    shared: &Arc<Shared>,
    table: String,
    requested: IngestOptions,
    compression: Compression,
    reader: Box<dyn std::io::Read + Send>,
    too_large: &AtomicBool,
    limit: u64,
) -> Result<Response, ApiError> {
    let input = Input::Stream(StreamInput::new(
        format!("request body ({table})"),
        compression,
        reader,
    ));
    let options = IngestOptions {
        // The background merger merges small parts (see `merger`), not the request.
        auto_merge: false,
        max_line_bytes: Some(shared.config.limits.max_line_bytes),
        ..requested
    };
    let (result, listed) =
        ingest_on_thread(shared, table.clone(), input, options, MAX_LISTED_REJECTS).await?;

    let metrics = &shared.metrics;
    metrics.ingest_requests.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(summary) => {
            shared.merger.ingested(&table);
            count_ingested(metrics, &summary.progress);
            let mut answer = answer(
                &table,
                &summary.progress,
                &listed,
                summary.created,
                &summary.warnings,
            );
            if let Some(object) = answer.as_object_mut() {
                object.insert("replaced".into(), json!(summary.replaced));
            }
            Ok(axum::Json(answer).into_response())
        }
        Err(e) => {
            metrics.ingest_failures.fetch_add(1, Ordering::Relaxed);
            if too_large.load(Ordering::Relaxed) {
                return Err(too_large_error(limit));
            }
            if let EngineError::AllRejected { rejected, .. } = e {
                metrics
                    .rejected_documents
                    .fetch_add(rejected, Ordering::Relaxed);
                return Ok(all_rejected(&e, rejected, &listed));
            }
            if let EngineError::Input { .. } = e {
                return Err(unreadable_body(&e));
            }
            Err(engine_error(&e))
        }
    }
}

/// Runs `strata_engine::ingest` of one input on a thread of its own (deep stack, background
/// priority) and hands back its result with its first `keep_rejects` rejects.
pub(crate) async fn ingest_on_thread(
    shared: &Arc<Shared>,
    table: String,
    input: Input,
    options: IngestOptions,
    keep_rejects: usize,
) -> Result<(Result<IngestSummary, EngineError>, Vec<Reject>), ApiError> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    let data_dir = shared.data_dir.clone();
    let nice = shared.config.limits.background_nice;
    std::thread::Builder::new()
        .name("strata-ingest".into())
        .stack_size(strata_json::DEEP_STACK_BYTES)
        .spawn(move || {
            crate::lower_priority(nice);
            let mut kept = Vec::new();
            let result = strata_engine::ingest(
                &data_dir,
                &table,
                &[input],
                &options,
                &mut |_| {},
                &mut |reject| {
                    if kept.len() < keep_rejects {
                        kept.push(reject.clone());
                    }
                },
            );
            let _ = done.send((result, kept));
        })
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                sqlstate::INTERNAL_ERROR,
                e.to_string(),
            )
        })?;
    outcome.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate::INTERNAL_ERROR,
            "the ingest thread ended without an answer",
        )
    })
}

pub(crate) fn compression(headers: &HeaderMap) -> Result<Compression, ApiError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(Compression::None);
    };
    match value
        .to_str()
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("gzip") | Ok("x-gzip") => Ok(Compression::Gzip),
        Ok("zstd") => Ok(Compression::Zstd),
        Ok("identity") | Ok("") => Ok(Compression::None),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("Content-Encoding {value:?} is not supported: use gzip, zstd or none"),
        )),
    }
}

fn engine_error(error: &EngineError) -> ApiError {
    let code = sqlstate::of_engine_error(error);
    let status = if code == sqlstate::INTERNAL_ERROR {
        StatusCode::INTERNAL_SERVER_ERROR
    } else if code == sqlstate::UNIQUE_VIOLATION {
        StatusCode::CONFLICT
    } else {
        StatusCode::BAD_REQUEST
    };
    ApiError::new(status, code, error.to_string())
}

fn listed_rejects(listed: &[Reject]) -> Vec<serde_json::Value> {
    listed
        .iter()
        .map(|r| json!({"line": r.line, "offset": r.offset, "reason": r.reason}))
        .collect()
}

fn answer(
    table: &str,
    progress: &IngestProgress,
    listed: &[Reject],
    created: bool,
    warnings: &[String],
) -> serde_json::Value {
    json!({
        "table": table,
        "accepted": progress.loaded,
        "rejected": progress.rejected,
        "ignored": progress.ignored,
        "rejects": listed_rejects(listed),
        "rejects_listed": listed.len(),
        "created": created,
        "bytes": progress.bytes,
        "unparsed": progress.unparsed,
        "warnings": warnings,
    })
}

/// Every line was rejected: a `400` listing the first rejects.
fn all_rejected(error: &EngineError, rejected: u64, listed: &[Reject]) -> Response {
    let body = json!({
        "error": error.to_string(),
        "code": sqlstate::DATA_EXCEPTION,
        "accepted": 0,
        "rejected": rejected,
        "rejects": listed_rejects(listed),
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn count_ingested(metrics: &crate::metrics::Metrics, progress: &IngestProgress) {
    metrics
        .ingested_documents
        .fetch_add(progress.loaded, Ordering::Relaxed);
    metrics
        .rejected_documents
        .fetch_add(progress.rejected, Ordering::Relaxed);
    metrics
        .ingested_bytes
        .fetch_add(progress.bytes, Ordering::Relaxed);
}
