//! `POST /v1/ingest/{table}[?sort_key=a,b]`: an NDJSON body (plain, or gzip/zstd by
//! `Content-Encoding`) loaded into a table by the same code and rules as `strata ingest`.
//!
//! The body streams from the socket through the decompressor into the shredder on a thread of
//! its own, so memory does not grow with the body. The answer comes after the commit: `200`
//! means every accepted document is durable. Rejected lines are listed with their line number
//! and reason (the first [`MAX_LISTED_REJECTS`]; all of them are also in the table's
//! `rejects.ndjson`). A body that is cut off or too large commits nothing.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use serde::Deserialize;
use serde_json::json;
use strata_engine::input::{Compression, Input, StreamInput};
use strata_engine::{EngineError, IngestOptions, IngestSummary, Reject};

use super::ApiError;
use crate::Shared;
use crate::sqlstate;

/// Rejects listed in an answer; a body of a million bad lines must not make a huge answer.
pub const MAX_LISTED_REJECTS: usize = 1000;

#[derive(Deserialize)]
pub struct IngestParams {
    /// Comma-separated dotted paths; used when the request creates the table.
    sort_key: Option<String>,
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
    let limit = shared.config.limits.max_body_bytes;
    let too_large = Arc::new(AtomicBool::new(false));
    let mut received = 0u64;
    let flag = too_large.clone();
    let chunks = body
        .into_data_stream()
        .map_err(io::Error::other)
        .and_then(move |chunk| {
            received += chunk.len() as u64;
            let result = if received > limit {
                flag.store(true, Ordering::Relaxed);
                Err(io::Error::other(format!(
                    "the request body exceeds {limit} bytes"
                )))
            } else {
                Ok(chunk)
            };
            std::future::ready(result)
        });
    // A blocking reader over the body for the ingest thread; it must be made on the runtime.
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(chunks));
    let input = Input::Stream(StreamInput::new(
        format!("request body ({table})"),
        compression,
        Box::new(reader),
    ));
    let options = IngestOptions {
        sort_key: params
            .sort_key
            .map(|keys| keys.split(',').map(str::to_owned).collect()),
        // The background merger merges small parts (see `merger`), not the request.
        auto_merge: false,
        max_line_bytes: Some(shared.config.limits.max_line_bytes),
        ..IngestOptions::default()
    };

    let (done, outcome) = tokio::sync::oneshot::channel();
    let data_dir = shared.data_dir.clone();
    let table_name = table.clone();
    std::thread::Builder::new()
        .name("strata-ingest".into())
        .stack_size(strata_json::DEEP_STACK_BYTES)
        .spawn(move || {
            let mut listed = Vec::new();
            let result = strata_engine::ingest(
                &data_dir,
                &table_name,
                &[input],
                &options,
                &mut |_| {},
                &mut |reject| {
                    if listed.len() < MAX_LISTED_REJECTS {
                        listed.push(reject.clone());
                    }
                },
            );
            let _ = done.send((result, listed));
        })
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                sqlstate::INTERNAL_ERROR,
                e.to_string(),
            )
        })?;
    let (result, listed) = outcome.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate::INTERNAL_ERROR,
            "the ingest thread ended without an answer",
        )
    })?;

    let metrics = &shared.metrics;
    metrics.ingest_requests.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(summary) => {
            shared.merger.ingested(&table);
            metrics
                .ingested_documents
                .fetch_add(summary.progress.loaded, Ordering::Relaxed);
            metrics
                .rejected_documents
                .fetch_add(summary.progress.rejected, Ordering::Relaxed);
            metrics
                .ingested_bytes
                .fetch_add(summary.progress.bytes, Ordering::Relaxed);
            Ok(axum::Json(answer(&table, &summary, &listed)).into_response())
        }
        Err(e) => {
            metrics.ingest_failures.fetch_add(1, Ordering::Relaxed);
            if too_large.load(Ordering::Relaxed) {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    sqlstate::INVALID_PARAMETER,
                    format!(
                        "the request body exceeds limits.max_body_bytes ({limit} bytes); nothing was committed"
                    ),
                ));
            }
            if let EngineError::AllRejected { rejected, .. } = e {
                metrics
                    .rejected_documents
                    .fetch_add(rejected, Ordering::Relaxed);
                let body = json!({
                    "error": e.to_string(),
                    "code": sqlstate::DATA_EXCEPTION,
                    "accepted": 0,
                    "rejected": rejected,
                    "rejects": listed_rejects(&listed),
                });
                return Ok((StatusCode::BAD_REQUEST, axum::Json(body)).into_response());
            }
            if let EngineError::Input { .. } = e {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    sqlstate::DATA_EXCEPTION,
                    format!(
                        "the request body could not be read to its end; nothing was committed ({e})"
                    ),
                ));
            }
            Err(engine_error(&e))
        }
    }
}

fn compression(headers: &HeaderMap) -> Result<Compression, ApiError> {
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

fn answer(table: &str, summary: &IngestSummary, listed: &[Reject]) -> serde_json::Value {
    let progress = &summary.progress;
    json!({
        "table": table,
        "accepted": progress.loaded,
        "rejected": progress.rejected,
        "rejects": listed_rejects(listed),
        "rejects_listed": listed.len(),
        "created": summary.created,
        "bytes": progress.bytes,
        "warnings": summary.warnings,
    })
}
