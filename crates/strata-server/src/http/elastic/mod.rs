//! Elasticsearch-compatible endpoints (issue 15, ADR 0018), so that the shippers and clients
//! people run already send to Strata unchanged: `_bulk` ([`bulk`], partial updates in
//! [`update`]), the probes they call
//! first ([`probes`]), and a read subset, `_search` and `_count` ([`search`], with the query DSL
//! in [`dsl`]). An index is a table, created on first use.
//!
//! Every answer carries `X-Elastic-Product: Elasticsearch` (the official clients and Logstash
//! refuse a server without it) and is compact JSON (Vector looks for the text
//! `"errors":true`). Errors have Elasticsearch's shape:
//! `{"error": {"root_cause": [...], "type": ..., "reason": ...}, "status": N}`.

mod aggs;
mod bulk;
mod dsl;
mod probes;
mod search;
mod update;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Shared;

/// The routes, to be merged into the HTTP router (behind its authorization).
pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/", get(probes::root).head(probes::ok))
        .route("/_bulk", post(bulk::bulk).put(bulk::bulk))
        .route("/{index}/_bulk", post(bulk::bulk_into).put(bulk::bulk_into))
        .route("/{index}/_search", get(search::search).post(search::search))
        .route("/{index}/_count", get(search::count).post(search::count))
        .route("/_license", get(probes::license))
        .route("/_xpack", get(probes::xpack))
        .route("/_cluster/health", get(probes::cluster_health))
        .route("/_cluster/health/{index}", get(probes::cluster_health))
        .route("/_nodes", get(probes::nodes))
        .route("/_nodes/{*filter}", get(probes::nodes))
        .route(
            "/_index_template/{name}",
            get(probes::no_template)
                .head(probes::not_found)
                .put(probes::acknowledged)
                .post(probes::acknowledged),
        )
        .route(
            "/_template/{name}",
            get(probes::no_template)
                .head(probes::not_found)
                .put(probes::acknowledged),
        )
        .route(
            "/_ingest/pipeline/{name}",
            get(probes::no_pipeline).put(probes::acknowledged),
        )
        .route(
            "/_ilm/policy/{name}",
            get(probes::not_found).put(probes::acknowledged),
        )
        .route(
            "/{index}",
            get(probes::index)
                .head(probes::index_exists)
                .put(probes::create_index),
        )
        .layer(axum::middleware::from_fn(product_header))
}

/// Adds the header Elasticsearch's clients check for.
async fn product_header(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response.headers_mut().insert(
        "x-elastic-product",
        HeaderValue::from_static("Elasticsearch"),
    );
    response
}

/// An error in Elasticsearch's shape.
#[derive(Debug)]
pub struct EsError {
    status: StatusCode,
    kind: &'static str,
    reason: String,
}

impl EsError {
    pub fn new(status: StatusCode, kind: &'static str, reason: impl Into<String>) -> EsError {
        EsError {
            status,
            kind,
            reason: reason.into(),
        }
    }

    /// The `error` object of an answer or of one bulk item.
    pub fn body(kind: &str, reason: &str) -> Value {
        json!({"type": kind, "reason": reason})
    }
}

impl IntoResponse for EsError {
    fn into_response(self) -> Response {
        let cause = EsError::body(self.kind, &self.reason);
        let mut error = cause.clone();
        if let Some(object) = error.as_object_mut() {
            object.insert("root_cause".into(), json!([cause]));
        }
        (
            self.status,
            axum::Json(json!({"error": error, "status": self.status.as_u16()})),
        )
            .into_response()
    }
}
