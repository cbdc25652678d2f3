//! The HTTP API: `POST /v1/ingest/{table}`, `POST|GET /v1/query`, `GET /v1/tables`,
//! `GET /health`, `GET /metrics`, and Elasticsearch's `_bulk` with the probes shippers call
//! (`elastic`). Errors are JSON `{"error": message, "code": SQLSTATE}` with a
//! 4xx status for the client's mistakes and 5xx for the server's.
//!
//! With tokens in the config file every route but `/health` needs `Authorization: Bearer
//! TOKEN`. Requests beyond `limits.max_connections` at once are refused with `503`.

mod elastic;
pub(crate) mod ingest;
mod query;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::Shared;
use crate::sqlstate;

/// Serves HTTP (HTTPS with `tls`) on `listener` until the server shuts down; requests in flight
/// are finished.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let shutdown = shared.shutdown.clone();
    let app = router(shared);
    match tls {
        None => {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
            {
                eprintln!("strata: the HTTP listener failed: {e}");
            }
        }
        Some(tls) => serve_tls(listener, app, tls, shutdown).await,
    }
}

/// axum's `serve` has no TLS: each accepted connection is wrapped by rustls and served by hyper.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: tokio_rustls::TlsAcceptor,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (socket, _) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    eprintln!("strata: HTTP accept failed: {e}");
                    continue;
                }
            },
        };
        let (tls, app, shutdown) = (tls.clone(), app.clone(), shutdown.clone());
        connections.spawn(async move {
            // A failed handshake ends this connection only.
            let Ok(stream) = tls.accept(socket).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

fn router(shared: Arc<Shared>) -> Router {
    let requests = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    Router::new()
        .route("/v1/ingest/{table}", post(ingest::ingest))
        .route("/v1/query", post(query::query).get(query::query))
        .route("/v1/tables", get(tables))
        .route("/metrics", get(metrics))
        .merge(elastic::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            authorize,
        ))
        .route("/health", get(health))
        .layer(axum::middleware::from_fn_with_state(
            requests,
            limit_requests,
        ))
        .with_state(shared)
}

/// An error answer: a status, a message and its SQLSTATE.
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(json!({"error": self.message, "code": self.code})),
        )
            .into_response()
    }
}

async fn authorize(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let tokens = &shared.config.tokens;
    if tokens.is_empty() {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compare every token in full so the time taken does not tell how much of one matched.
    let known = given.is_some_and(|given| {
        tokens.iter().fold(false, |found, token| {
            found | constant_time_eq(token.as_bytes(), given.as_bytes())
        })
    });
    if known {
        return next.run(request).await;
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        sqlstate::INVALID_AUTHORIZATION,
        "a valid bearer token is required (Authorization: Bearer TOKEN)",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

async fn limit_requests(
    State(requests): State<Arc<Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    match requests.try_acquire() {
        Ok(_permit) => next.run(request).await,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            sqlstate::TOO_MANY_CONNECTIONS,
            "too many requests at once (limits.max_connections); retry later",
        )
        .into_response(),
    }
}

async fn health() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

async fn tables(State(shared): State<Arc<Shared>>) -> Response {
    let listing = match shared.data_dir.tables() {
        Ok(listing) => listing,
        Err(e) => {
            return ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                sqlstate::of_engine_error(&e),
                e.to_string(),
            )
            .into_response();
        }
    };
    let tables: Vec<_> = listing
        .into_iter()
        .map(|(name, info)| match info {
            Ok(info) => json!({
                "name": name,
                "documents": info.documents,
                "parts": info.parts,
                "bytes": info.bytes,
                "sort_key": info.sort_key,
                "key": info.key,
            }),
            Err(e) => json!({"name": name, "error": e.to_string()}),
        })
        .collect();
    axum::Json(json!({ "tables": tables })).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let data_dir = shared.data_dir.clone();
    let shared_metrics = shared.clone();
    // Reading manifests is file I/O: off the runtime's workers.
    match tokio::task::spawn_blocking(move || {
        let wal = shared_metrics.ingest_queue.as_ref().map(|q| q.sizes());
        shared_metrics.metrics.render(&data_dir, wal)
    })
    .await
    {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate::INTERNAL_ERROR,
            e.to_string(),
        )
        .into_response(),
    }
}
