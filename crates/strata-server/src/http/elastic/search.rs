//! `GET|POST /{index}/_search` and `/{index}/_count`: Elasticsearch's read subset, answered by
//! SQL over the same tables (`dsl` turns the query into a condition). `{index}` may be a list
//! (`a,b`) and hold `*` patterns; the indices' documents are read together.
//!
//! `_search` takes `query`, `size` (default 10), `from`, `sort`, `_source`,
//! `track_total_hits`, and `aggs`/`aggregations` (see [`super::aggs`]). Hits have no score (`_score: null`): Strata filters, it does not rank. What is
//! not supported is answered 400 with its name.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::EsError;
use super::dsl::{Unsupported, condition, filter_source, order_by, string_sql};
use crate::Shared;

/// Hits `_search` returns at most (`size` beyond is refused, as Elasticsearch's
/// `index.max_result_window` is 10,000).
const MAX_RESULT_WINDOW: u64 = 10_000;

pub async fn search(
    State(shared): State<Arc<Shared>>,
    Path(index): Path<String>,
    body: Bytes,
) -> Response {
    respond(run_search(&shared, &index, &body).await)
}

pub async fn count(
    State(shared): State<Arc<Shared>>,
    Path(index): Path<String>,
    body: Bytes,
) -> Response {
    respond(run_count(&shared, &index, &body).await)
}

fn respond(result: Result<Value, EsError>) -> Response {
    match result {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(e) => e.into_response(),
    }
}

pub(super) fn bad_request(reason: impl Into<String>) -> EsError {
    EsError::new(StatusCode::BAD_REQUEST, "parsing_exception", reason)
}

impl From<Unsupported> for EsError {
    fn from(unsupported: Unsupported) -> EsError {
        EsError::new(
            StatusCode::BAD_REQUEST,
            "illegal_argument_exception",
            unsupported.0,
        )
    }
}

fn request_body(body: &[u8]) -> Result<Map<String, Value>, EsError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(bad_request("the request body must be a JSON object")),
        Err(e) => Err(bad_request(format!("the request body is not JSON: {e}"))),
    }
}

/// The tables `index` names (a comma list, `*` patterns), in name order.
fn tables(shared: &Shared, index: &str) -> Result<Vec<String>, EsError> {
    let existing: Vec<String> = shared
        .data_dir
        .tables()
        .map_err(|e| {
            EsError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "exception",
                e.to_string(),
            )
        })?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut found = Vec::new();
    for pattern in index.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if pattern.contains('*') {
            found.extend(existing.iter().filter(|t| glob(pattern, t)).cloned());
        } else if existing.iter().any(|t| t == pattern) {
            found.push(pattern.to_owned());
        } else {
            return Err(EsError::new(
                StatusCode::NOT_FOUND,
                "index_not_found_exception",
                format!("no such index [{pattern}]"),
            ));
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// `*` matches any run of characters.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The documents of `tables` with their index name, as a SQL relation `(_index, data)`.
fn relation(tables: &[String]) -> String {
    let selects: Vec<String> = tables
        .iter()
        .map(|t| {
            format!(
                "SELECT {} AS _index, data FROM \"{}\"",
                string_sql(t),
                t.replace('"', "\"\"")
            )
        })
        .collect();
    format!("({}) AS docs", selects.join(" UNION ALL "))
}

pub(super) async fn sql_rows(
    shared: &Shared,
    sql: &str,
) -> Result<Vec<Map<String, Value>>, EsError> {
    let result = shared.session.run(sql).await.map_err(|e| {
        EsError::new(
            StatusCode::BAD_REQUEST,
            "search_phase_execution_exception",
            format!("{e} (SQL: {sql})"),
        )
    })?;
    rows_of(&result.batches)
}

fn rows_of(batches: &[RecordBatch]) -> Result<Vec<Map<String, Value>>, EsError> {
    let mut writer = arrow::json::ArrayWriter::new(Vec::new());
    let batches: Vec<&RecordBatch> = batches.iter().collect();
    let internal = |e: &dyn std::fmt::Display| {
        EsError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "exception",
            e.to_string(),
        )
    };
    writer.write_batches(&batches).map_err(|e| internal(&e))?;
    writer.finish().map_err(|e| internal(&e))?;
    let bytes = writer.into_inner();
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&bytes).map_err(|e| internal(&e))
}

fn where_clause(condition: &Option<String>) -> String {
    condition
        .as_ref()
        .map_or(String::new(), |c| format!(" WHERE {c}"))
}

pub(super) async fn total(shared: &Shared, from: &str, filter: &str) -> Result<u64, EsError> {
    let rows = sql_rows(shared, &format!("SELECT count(*) AS n FROM {from}{filter}")).await?;
    Ok(rows
        .first()
        .and_then(|row| row.get("n"))
        .and_then(Value::as_u64)
        .unwrap_or(0))
}

fn shards() -> Value {
    json!({"total": 1, "successful": 1, "skipped": 0, "failed": 0})
}

async fn run_count(shared: &Shared, index: &str, body: &[u8]) -> Result<Value, EsError> {
    let request = request_body(body)?;
    let tables = tables(shared, index)?;
    if tables.is_empty() {
        return Ok(json!({"count": 0, "_shards": shards()}));
    }
    let condition = match request.get("query") {
        Some(query) => condition(query)?,
        None => None,
    };
    let count = total(shared, &relation(&tables), &where_clause(&condition)).await?;
    Ok(json!({"count": count, "_shards": shards()}))
}

async fn run_search(shared: &Shared, index: &str, body: &[u8]) -> Result<Value, EsError> {
    let started = Instant::now();
    let request = request_body(body)?;
    let size = request.get("size").and_then(Value::as_u64).unwrap_or(10);
    let from = request.get("from").and_then(Value::as_u64).unwrap_or(0);
    if from + size > MAX_RESULT_WINDOW {
        return Err(bad_request(format!(
            "Result window is too large, from + size must be less than or equal to: \
             [{MAX_RESULT_WINDOW}] but was [{}]",
            from + size
        )));
    }
    let tables = tables(shared, index)?;
    let condition = match request.get("query") {
        Some(query) => condition(query)?,
        None => None,
    };
    let order = match request.get("sort") {
        Some(sort) => order_by(sort)?,
        None => Vec::new(),
    };
    let mut answer = json!({
        "took": 0,
        "timed_out": false,
        "_shards": shards(),
        "hits": {"total": {"value": 0, "relation": "eq"}, "max_score": null, "hits": []},
    });
    if tables.is_empty() {
        return Ok(answer);
    }
    let relation = relation(&tables);
    let filter = where_clause(&condition);
    let total = total(shared, &relation, &filter).await?;
    let mut hits = Vec::new();
    if size > 0 {
        let order_sql = if order.is_empty() {
            String::new()
        } else {
            let items: Vec<String> = order
                .iter()
                .map(|(expr, desc)| {
                    format!("{expr} {} NULLS LAST", if *desc { "DESC" } else { "ASC" })
                })
                .collect();
            format!(" ORDER BY {}", items.join(", "))
        };
        let sort_columns: Vec<String> = order
            .iter()
            .enumerate()
            .map(|(i, (expr, _))| format!(", {expr} AS sort_{i}"))
            .collect();
        let sql = format!(
            "SELECT _index, data{} FROM {relation}{filter}{order_sql} LIMIT {size} OFFSET {from}",
            sort_columns.concat()
        );
        for row in sql_rows(shared, &sql).await? {
            hits.push(hit(row, request.get("_source"), order.len()));
        }
    }
    answer["hits"]["total"]["value"] = json!(total);
    answer["hits"]["hits"] = Value::Array(hits);
    let aggregations = request.get("aggs").or_else(|| request.get("aggregations"));
    if let Some(Value::Object(aggregations)) = aggregations {
        let mut results = Map::new();
        for (name, spec) in aggregations {
            results.insert(
                name.clone(),
                super::aggs::aggregation(shared, &relation, &condition, name, spec).await?,
            );
        }
        answer["aggregations"] = Value::Object(results);
    }
    answer["took"] = json!(started.elapsed().as_millis() as u64);
    Ok(answer)
}

/// One hit: its index, `_id` (the document's, for tables `_bulk` made), no score, the source.
fn hit(mut row: Map<String, Value>, source_request: Option<&Value>, sorts: usize) -> Value {
    let index = row.remove("_index").unwrap_or(Value::Null);
    let mut source = match row.remove("data") {
        Some(Value::String(text)) => match serde_json::from_str(&text) {
            Ok(Value::Object(object)) => object,
            _ => Map::new(),
        },
        Some(Value::Object(object)) => object,
        _ => Map::new(),
    };
    let id = source.remove("_id").unwrap_or(Value::Null);
    let mut hit = json!({"_index": index, "_id": id, "_score": null});
    if let Some(source) = filter_source(source, source_request) {
        hit["_source"] = source;
    }
    if sorts > 0 {
        hit["sort"] = Value::Array(
            (0..sorts)
                .map(|i| row.remove(&format!("sort_{i}")).unwrap_or(Value::Null))
                .collect(),
        );
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("logs-*", "logs-2024.01.01"));
        assert!(glob("*-2024*", "logs-2024.01.01"));
        assert!(!glob("logs-*", "metrics-1"));
        assert!(glob("*", "x"));
    }
}
