//! `POST /v1/query` (SQL in the body) or `GET /v1/query?sql=…`, with
//! `format=json|ndjson|csv|arrow|parquet|table` (default json).
//!
//! The statement is planned and its first batch computed before the answer's headers go out,
//! so planning and early errors are JSON errors with a status and SQLSTATE. After that the
//! result streams batch by batch through the same writers as `strata query` (memory holds a
//! few batches, whatever the result's size). An error after the headers cuts the body off; a
//! client that goes away drops the stream, which cancels the statement. A statement waits for
//! one of `limits.max_concurrent_queries` slots and is cancelled after
//! `limits.query_timeout_secs`.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use strata_query::output::{Format, ResultWriter};

use super::ApiError;
use crate::Shared;
use crate::sqlstate;

/// Output bytes gathered before they are sent as one chunk.
const CHUNK_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
pub struct QueryParams {
    sql: Option<String>,
    format: Option<String>,
}

pub async fn query(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<QueryParams>,
    body: String,
) -> Response {
    let started = Instant::now();
    match run(shared.clone(), params, body, started).await {
        Ok(response) => response,
        Err(e) => {
            shared.metrics.observe_query(started.elapsed(), false);
            e.into_response()
        }
    }
}

async fn run(
    shared: Arc<Shared>,
    params: QueryParams,
    body: String,
    started: Instant,
) -> Result<Response, ApiError> {
    let sql = match params.sql {
        Some(sql) if body.trim().is_empty() => sql,
        Some(_) => {
            return Err(bad_request(
                "give the SQL either in the body or as ?sql=, not both",
            ));
        }
        None => body,
    };
    let format: Format = params
        .format
        .as_deref()
        .unwrap_or("json")
        .parse()
        .map_err(bad_request)?;
    let mut statements = strata_query::split_statements(&sql);
    let statement = match (statements.pop(), statements.is_empty()) {
        (Some(statement), true) => statement,
        (None, _) => return Err(bad_request("no SQL statement given")),
        (Some(_), false) => return Err(bad_request("one statement per request")),
    };

    let deadline = tokio::time::Instant::now() + shared.query_timeout();
    let slot = tokio::time::timeout_at(deadline, shared.query_slots.clone().acquire_owned())
        .await
        .map_err(|_| timed_out())?
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                sqlstate::QUERY_CANCELED,
                "the server is shutting down",
            )
        })?;
    let result = tokio::time::timeout_at(deadline, shared.session.stream(&statement))
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| query_error(&e))?;
    let mut batches = result.batches;
    let buffer = SharedBuffer::default();
    let mut writer = ResultWriter::new(buffer.clone(), format, &result.schema)
        .map_err(|e| internal(e.to_string()))?;
    // The first batch before the headers: most errors show up by then.
    let first = tokio::time::timeout_at(deadline, batches.next())
        .await
        .map_err(|_| timed_out())?
        .transpose()
        .map_err(|e| query_error(&e.into()))?;
    if let Some(batch) = &first {
        writer.write(batch).map_err(|e| internal(e.to_string()))?;
    }

    let (chunks, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let metrics_owner = shared.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let mut ok = true;
        let mut done = first.is_none();
        while !done {
            if buffer.len() >= CHUNK_BYTES && chunks.send(Ok(buffer.take())).await.is_err() {
                // The client went away: dropping the stream cancels the statement.
                ok = false;
                break;
            }
            let next = match tokio::time::timeout_at(deadline, batches.next()).await {
                Ok(next) => next,
                Err(_) => Some(Err(datafusion::error::DataFusionError::Execution(
                    "canceling statement due to statement timeout (limits.query_timeout_secs)"
                        .into(),
                ))),
            };
            match next {
                Some(Ok(batch)) => {
                    if let Err(e) = writer.write(&batch) {
                        let _ = chunks.send(Err(std::io::Error::other(e.to_string()))).await;
                        ok = false;
                        break;
                    }
                }
                Some(Err(e)) => {
                    let _ = chunks.send(Err(std::io::Error::other(e.to_string()))).await;
                    ok = false;
                    break;
                }
                None => done = true,
            }
        }
        if done {
            match writer.finish() {
                Ok(_) => {
                    let _ = chunks.send(Ok(buffer.take())).await;
                }
                Err(e) => {
                    let _ = chunks.send(Err(std::io::Error::other(e.to_string()))).await;
                    ok = false;
                }
            }
        }
        metrics_owner.metrics.observe_query(started.elapsed(), ok);
    });
    let body = Body::from_stream(crate::received(receiver));
    Ok(([(header::CONTENT_TYPE, content_type(format))], body).into_response())
}

fn content_type(format: Format) -> &'static str {
    match format {
        Format::Json => "application/json",
        Format::Ndjson => "application/x-ndjson",
        Format::Csv => "text/csv; charset=utf-8",
        Format::Parquet => "application/vnd.apache.parquet",
        Format::Arrow => "application/vnd.apache.arrow.stream",
        Format::Table => "text/plain; charset=utf-8",
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, sqlstate::SYNTAX_ERROR, message)
}

fn internal(message: String) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        sqlstate::INTERNAL_ERROR,
        message,
    )
}

fn timed_out() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        sqlstate::QUERY_CANCELED,
        "canceling statement due to statement timeout (limits.query_timeout_secs)",
    )
}

fn query_error(error: &strata_query::QueryError) -> ApiError {
    let code = sqlstate::of_query_error(error);
    let status = match code {
        sqlstate::INTERNAL_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
        sqlstate::OUT_OF_MEMORY => StatusCode::SERVICE_UNAVAILABLE,
        sqlstate::UNDEFINED_TABLE => StatusCode::NOT_FOUND,
        sqlstate::UNIQUE_VIOLATION => StatusCode::CONFLICT,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, code, error.to_string())
}

/// The writers' output: bytes gathered here are taken out and sent as chunks.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn take(&self) -> Bytes {
        Bytes::from(std::mem::take(
            &mut *self.0.lock().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
