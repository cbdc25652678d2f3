//! The endpoints shippers and clients call before sending: who the server is (`GET /`, with
//! the configured version), its license and features, cluster health, nodes, templates, ingest
//! pipelines and lifecycle policies, and whether an index exists.
//!
//! Strata has no templates, Elasticsearch ingest pipelines or lifecycle policies: a `GET` says
//! there is none (404, as for a fresh cluster), a `PUT` is acknowledged and changes nothing, so
//! that Logstash, Beats and Fluent Bit go on to send. An index is created by its first
//! document, so `PUT /{index}` is acknowledged and the table appears with its first `_bulk`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::EsError;
use crate::Shared;

const CLUSTER_NAME: &str = "strata";
const NODE_ID: &str = "strata-node-0";

pub async fn root(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({
        "name": NODE_ID,
        "cluster_name": CLUSTER_NAME,
        "cluster_uuid": "strata-cluster",
        "version": {
            "number": shared.config.elasticsearch.version,
            "build_flavor": "default",
            "build_type": "strata",
            "build_hash": env!("CARGO_PKG_VERSION"),
            "build_date": "2026-01-01T00:00:00.000Z",
            "build_snapshot": false,
            "lucene_version": "9.12.0",
            "minimum_wire_compatibility_version": "7.17.0",
            "minimum_index_compatibility_version": "7.0.0"
        },
        "tagline": "You Know, for Search"
    }))
    .into_response()
}

pub async fn ok() -> StatusCode {
    StatusCode::OK
}

pub async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

pub async fn license() -> Response {
    axum::Json(json!({
        "license": {
            "status": "active",
            "uid": "strata",
            "type": "basic",
            "issue_date": "2026-01-01T00:00:00.000Z",
            "issue_date_in_millis": 1_767_225_600_000u64,
            "max_nodes": 1000,
            "issued_to": CLUSTER_NAME,
            "issuer": "strata",
            "start_date_in_millis": -1
        }
    }))
    .into_response()
}

pub async fn xpack() -> Response {
    let off = json!({"available": false, "enabled": false});
    axum::Json(json!({
        "build": {"hash": env!("CARGO_PKG_VERSION"), "date": "2026-01-01T00:00:00.000Z"},
        "license": {"uid": "strata", "type": "basic", "mode": "basic", "status": "active"},
        "features": {"ilm": off, "security": off, "monitoring": off, "ml": off, "watcher": off}
    }))
    .into_response()
}

pub async fn cluster_health(State(shared): State<Arc<Shared>>) -> Response {
    let tables = shared.data_dir.tables().map_or(0, |tables| tables.len());
    axum::Json(json!({
        "cluster_name": CLUSTER_NAME,
        "status": "green",
        "timed_out": false,
        "number_of_nodes": 1,
        "number_of_data_nodes": 1,
        "active_primary_shards": tables,
        "active_shards": tables,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": 0,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0
    }))
    .into_response()
}

/// One node, published at the address the client reached (clients that sniff connect there).
pub async fn nodes(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let address = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("127.0.0.1:8080")
        .to_owned();
    axum::Json(json!({
        "_nodes": {"total": 1, "successful": 1, "failed": 0},
        "cluster_name": CLUSTER_NAME,
        "nodes": {
            NODE_ID: {
                "name": NODE_ID,
                "version": shared.config.elasticsearch.version,
                "roles": ["data", "ingest", "master"],
                "http": {"publish_address": address, "bound_address": [address]}
            }
        }
    }))
    .into_response()
}

pub async fn no_template(Path(name): Path<String>) -> Response {
    EsError::new(
        StatusCode::NOT_FOUND,
        "resource_not_found_exception",
        format!("index template matching [{name}] not found"),
    )
    .into_response()
}

/// Elasticsearch answers a missing ingest pipeline with `404 {}`.
pub async fn no_pipeline() -> Response {
    (StatusCode::NOT_FOUND, axum::Json(json!({}))).into_response()
}

pub async fn acknowledged() -> Response {
    axum::Json(json!({"acknowledged": true})).into_response()
}

pub async fn create_index(Path(index): Path<String>) -> Response {
    axum::Json(json!({"acknowledged": true, "shards_acknowledged": true, "index": index}))
        .into_response()
}

pub async fn index_exists(
    State(shared): State<Arc<Shared>>,
    Path(index): Path<String>,
) -> StatusCode {
    if shared.data_dir.table_exists(&index).unwrap_or(false) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

pub async fn index(State(shared): State<Arc<Shared>>, Path(index): Path<String>) -> Response {
    if !shared.data_dir.table_exists(&index).unwrap_or(false) {
        return EsError::new(
            StatusCode::NOT_FOUND,
            "index_not_found_exception",
            format!("no such index [{index}]"),
        )
        .into_response();
    }
    axum::Json(json!({
        index.clone(): {
            "aliases": {},
            "mappings": {},
            "settings": {"index": {
                "number_of_shards": "1",
                "number_of_replicas": "0",
                "provided_name": index
            }}
        }
    }))
    .into_response()
}
