//! `POST /_bulk` and `POST /{index}/_bulk`: Elasticsearch's bulk API over Strata's ingest.
//!
//! The body is NDJSON (plain, gzip or zstd by `Content-Encoding`): an action line, then for
//! `index` and `create` the document, for `update` its partial document. Each index's documents
//! are written by one commit: the request that creates the index by one ingest, a request into
//! an index that exists as one transaction of its own ([`as_transaction`]: through the server's
//! WAL, as the PostgreSQL protocol's commits go; ADR 0018). Deletes follow, one key at a time.
//! The answer has one item per action, in order, each with its own status, and `errors` is
//! true when any failed (pitfalls seen in Quickwit and GreptimeDB: one error for a batch, or
//! none, loses data).
//!
//! `_id`s are honoured: an index created here is a table keyed by `_id` (ADR 0016), so a batch a
//! shipper sends again after a timeout replaces its documents instead of doubling them. An item
//! without `_id` gets a generated one (20 characters that sort by time of arrival). In a table
//! that exists without a key, `_id` is stored as a field. `create` of an `_id` that is a live
//! document, or that an earlier action of the request writes, fails its item with 409
//! (`version_conflict_engine_exception`) as in Elasticsearch, and the rest of the request goes
//! on; the ids are looked up before the ingest, so a `create` racing another request's write of
//! the same `_id` replaces it (ADR 0018). `update` merges a partial document into the stored
//! one (`super::update`), written by the same ingest. `_type` (Fluent Bit), `routing`,
//! `pipeline` and other metadata are ignored. A table created here with documents that carry
//! `@timestamp` (or `timestamp`) gets it as its time column.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Cursor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use strata_engine::input::{Compression, Input, StreamInput};
use strata_engine::transaction::{CommitSummary, TableChanges, TableReads, TableWrite};
use strata_engine::{EngineError, IngestOptions, OnConflict, Reject};
use strata_json::kind::Leaf;
use strata_json::{Field, KeyType, KeyValue};

use super::EsError;
use super::update::{UpdateOutcome, UpdateRequest, stored_documents};
use crate::Shared;
use crate::http::ingest::{compression, ingest_on_thread};

/// The metadata field that holds a document's id, and the key of tables `_bulk` creates.
const ID_FIELD: &str = "_id";
/// Top-level fields that become the time column of a table `_bulk` creates.
const TIME_FIELDS: [&str; 2] = ["@timestamp", "timestamp"];

pub async fn bulk(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    respond(run(&shared, None, &headers, body).await)
}

pub async fn bulk_into(
    State(shared): State<Arc<Shared>>,
    Path(index): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    respond(run(&shared, Some(index), &headers, body).await)
}

fn respond(result: Result<Value, EsError>) -> Response {
    match result {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(e) => e.into_response(),
    }
}

/// What became of one action.
#[derive(Debug)]
enum Outcome {
    Pending,
    Done {
        status: u16,
        result: &'static str,
    },
    Failed {
        status: u16,
        kind: &'static str,
        reason: String,
    },
}

#[derive(Debug)]
struct Item {
    action: &'static str,
    index: String,
    id: Option<String>,
    outcome: Outcome,
}

impl Item {
    fn fail(&mut self, status: u16, kind: &'static str, reason: impl Into<String>) {
        self.outcome = Outcome::Failed {
            status,
            kind,
            reason: reason.into(),
        };
    }

    fn answer(&self, seq_no: &mut u64) -> Value {
        let mut body = Map::new();
        body.insert("_index".into(), json!(self.index));
        body.insert("_id".into(), json!(self.id));
        match &self.outcome {
            Outcome::Done { status, result } => {
                body.insert("_version".into(), json!(1));
                body.insert("result".into(), json!(result));
                body.insert(
                    "_shards".into(),
                    json!({"total": 1, "successful": 1, "failed": 0}),
                );
                body.insert("_seq_no".into(), json!(*seq_no));
                body.insert("_primary_term".into(), json!(1));
                body.insert("status".into(), json!(status));
                *seq_no += 1;
            }
            Outcome::Failed {
                status,
                kind,
                reason,
            } => {
                body.insert("status".into(), json!(status));
                body.insert("error".into(), EsError::body(kind, reason));
            }
            Outcome::Pending => {
                body.insert("status".into(), json!(500));
                body.insert(
                    "error".into(),
                    EsError::body("exception", "the action was not carried out"),
                );
            }
        }
        json!({ self.action: body })
    }
}

/// What an `index`, `create` or `update` action writes.
enum Write {
    /// The whole document (with its `_id`), as NDJSON text.
    Document(Vec<u8>),
    /// A partial update of the document with the item's `_id`.
    Update(UpdateRequest),
}

/// The writes of one index for its ingest, each with its item, in request order.
#[derive(Default)]
struct IndexWrites {
    documents: Vec<(usize, Write)>,
    /// The time field of the first document that has one (for a table created here).
    time_field: Option<&'static str>,
}

async fn run(
    shared: &Arc<Shared>,
    path_index: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, EsError> {
    let started = Instant::now();
    let limit = shared.config.limits.max_body_bytes;
    let body = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|e| {
            EsError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "content_too_long_exception",
                format!("the request body could not be read within limits.max_body_bytes ({limit} bytes): {e}"),
            )
        })?;
    let compression = compression(headers).map_err(|e| {
        EsError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "illegal_argument_exception",
            e.message,
        )
    })?;
    let lines = decoded_lines(compression, body)?;
    let Plan {
        mut items,
        writes,
        deletes,
    } = plan(&lines, path_index.as_deref())?;

    for (index, writes) in writes {
        write_index(shared, &index, writes, &mut items).await;
    }
    for (index, targets) in deletes {
        delete_from_index(shared, &index, targets, &mut items).await;
    }

    let errors = items
        .iter()
        .any(|item| !matches!(item.outcome, Outcome::Done { .. }));
    let mut seq_no = 0;
    let answers: Vec<Value> = items.iter().map(|item| item.answer(&mut seq_no)).collect();
    Ok(json!({
        "took": started.elapsed().as_millis() as u64,
        "errors": errors,
        "items": answers,
    }))
}

/// The body's lines, decompressed (through ingest's own decompressors).
fn decoded_lines(compression: Compression, body: Bytes) -> Result<Vec<Vec<u8>>, EsError> {
    let input = Input::Stream(StreamInput::new(
        "_bulk body".to_owned(),
        compression,
        Box::new(Cursor::new(body)),
    ));
    let unreadable = |e: &dyn std::fmt::Display| {
        EsError::new(
            StatusCode::BAD_REQUEST,
            "parse_exception",
            format!("the request body could not be read: {e}"),
        )
    };
    let mut reader = input.open().map_err(|e| unreadable(&e))?;
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader
            .read_until(b'\n', &mut line)
            .map_err(|e| unreadable(&e))?
            == 0
        {
            break;
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        if !line.iter().all(u8::is_ascii_whitespace) {
            lines.push(line);
        }
    }
    Ok(lines)
}

/// A request's actions: its items in order, each index's documents, and each index's deletes
/// (item and id).
struct Plan {
    items: Vec<Item>,
    writes: BTreeMap<String, IndexWrites>,
    deletes: BTreeMap<String, Vec<(usize, String)>>,
}

/// Reads the actions: the items in order, each index's documents, and the deletes. A line that
/// is not an action, or an action without its document, fails the whole request (as
/// Elasticsearch does); a bad document fails its item only.
fn plan(lines: &[Vec<u8>], path_index: Option<&str>) -> Result<Plan, EsError> {
    let mut items = Vec::new();
    let mut writes: BTreeMap<String, IndexWrites> = BTreeMap::new();
    let mut deletes: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let mut next = 0;
    while next < lines.len() {
        let line_number = next + 1;
        let malformed = |why: &str| {
            EsError::new(
                StatusCode::BAD_REQUEST,
                "illegal_argument_exception",
                format!("Malformed action/metadata line [{line_number}], {why}"),
            )
        };
        let action: Value = serde_json::from_slice(&lines[next])
            .map_err(|e| malformed(&format!("it is not JSON: {e}")))?;
        next += 1;
        let Some((name, metadata)) = action
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        else {
            return Err(malformed("expected an object with one action"));
        };
        let action: &'static str = match name.as_str() {
            "index" => "index",
            "create" => "create",
            "delete" => "delete",
            "update" => "update",
            other => {
                return Err(malformed(&format!(
                    "expected one of [create, delete, index, update] but found [{other}]"
                )));
            }
        };
        let metadata = metadata.as_object().cloned().unwrap_or_default();
        let index = match metadata
            .get("_index")
            .and_then(Value::as_str)
            .or(path_index)
        {
            Some(index) => index.to_owned(),
            None => {
                return Err(EsError::new(
                    StatusCode::BAD_REQUEST,
                    "action_request_validation_exception",
                    format!(
                        "Validation Failed: 1: index is missing for the action on line {line_number};"
                    ),
                ));
            }
        };
        let id = match metadata.get(ID_FIELD) {
            Some(Value::String(id)) => Some(id.clone()),
            Some(Value::Number(id)) => Some(id.to_string()),
            _ => None,
        };
        let source = if action == "delete" {
            None
        } else {
            let source = lines.get(next).ok_or_else(|| {
                malformed(&format!(
                    "the {action} action has no document line after it"
                ))
            })?;
            next += 1;
            Some(source)
        };
        let mut item = Item {
            action,
            index: index.clone(),
            id,
            outcome: Outcome::Pending,
        };
        if let Err(e) = strata_engine::table::validate_table_name(&index) {
            item.fail(400, "invalid_index_name_exception", e.to_string());
            items.push(item);
            continue;
        }
        match (action, source) {
            ("delete", _) => match &item.id {
                Some(id) => deletes
                    .entry(index)
                    .or_default()
                    .push((items.len(), id.clone())),
                None => item.fail(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: id is missing;",
                ),
            },
            ("update", Some(source)) => match (&item.id, UpdateRequest::parse(source, ID_FIELD)) {
                (None, _) => item.fail(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: id is missing;",
                ),
                (Some(_), Err(reason)) => item.fail(400, "illegal_argument_exception", reason),
                (Some(_), Ok(update)) => writes
                    .entry(index)
                    .or_default()
                    .documents
                    .push((items.len(), Write::Update(update))),
            },
            (_, Some(source)) => match with_id(source, &mut item) {
                Ok((document, time_field)) => {
                    let target = writes.entry(index).or_default();
                    target
                        .documents
                        .push((items.len(), Write::Document(document)));
                    target.time_field = target.time_field.or(time_field);
                }
                Err(reason) => item.fail(400, "document_parsing_exception", reason),
            },
            (_, None) => item.fail(400, "document_parsing_exception", "no document"),
        }
        items.push(item);
    }
    Ok(Plan {
        items,
        writes,
        deletes,
    })
}

/// The document with its `_id` (given, or generated into the item) as its first field, and
/// its time field if it has one. The document's own text is kept as it came.
fn with_id(source: &[u8], item: &mut Item) -> Result<(Vec<u8>, Option<&'static str>), String> {
    // The flat parser ingest uses too; only the top-level keys matter here.
    let document = strata_json::parse_document(source)
        .map_err(|e| format!("failed to parse the document: {e}"))?;
    let mut depth = 0usize;
    let mut top_strings: Vec<&str> = Vec::new();
    for field in document.fields() {
        let top_key = match field {
            Field::Open(key) => {
                depth += 1;
                (depth == 1).then_some(key)
            }
            Field::Close => {
                depth = depth.saturating_sub(1);
                None
            }
            Field::Leaf(key, leaf) => {
                if depth == 0 && matches!(leaf, Leaf::String(_)) {
                    top_strings.push(key);
                }
                (depth == 0).then_some(key)
            }
        };
        if top_key == Some(ID_FIELD) {
            return Err(
                "Field [_id] is a metadata field and cannot be added inside a document. Use \
                 the index API request parameters."
                    .to_owned(),
            );
        }
    }
    let time_field = TIME_FIELDS
        .into_iter()
        .find(|field| top_strings.contains(field));
    let id = item.id.get_or_insert_with(generated_id).clone();
    let text = std::str::from_utf8(source)
        .map_err(|e| e.to_string())?
        .trim();
    let inner = text
        .strip_prefix('{')
        .ok_or_else(|| "the document is not a JSON object".to_owned())?
        .trim_start();
    let mut document = format!("{{{}:{}", json!(ID_FIELD), json!(id));
    if !inner.starts_with('}') {
        document.push(',');
    }
    document.push_str(inner);
    Ok((document.into_bytes(), time_field))
}

/// A new document id: 15 bytes (microseconds since 1970, the process id, a counter) written
/// with a base-64 alphabet in ASCII order, so that ids sort by time of arrival and land after
/// the key ranges of earlier parts.
fn generated_id() -> String {
    const ALPHABET: &[u8; 64] = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut bytes = [0u8; 15];
    bytes[..8].copy_from_slice(&micros.to_be_bytes());
    bytes[8..11].copy_from_slice(&std::process::id().to_be_bytes()[1..]);
    bytes[11..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    let mut id = String::with_capacity(20);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8) | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            id.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
        }
    }
    id
}

/// Loads one index's documents with one ingest and settles their items.
async fn write_index(shared: &Arc<Shared>, index: &str, writes: IndexWrites, items: &mut [Item]) {
    let exists = shared.data_dir.table_exists(index).unwrap_or(false);
    let conflicts = match create_conflicts(shared, index, &writes, items, exists) {
        Ok(conflicts) => conflicts,
        Err(e) => {
            for (item, _) in &writes.documents {
                items[*item].fail(500, "exception", e.to_string());
            }
            return;
        }
    };
    // The documents updates start from; an error fails the update items only.
    let (stored, update_error) =
        match updated_documents(shared, index, &writes, items, exists).await {
            Ok(stored) => (stored, None),
            Err(e) => (HashMap::new(), Some(e)),
        };
    // The newest document of each updated `_id` this request has written so far.
    let mut latest: HashMap<String, Map<String, Value>> = HashMap::new();
    // Each written document's `_id` and text.
    let mut documents: Vec<(String, Vec<u8>)> = Vec::new();
    // Each written line's item and the status and result it gets once the ingest commits.
    let mut written: Vec<(usize, u16, &'static str)> = Vec::new();
    for (item, write) in &writes.documents {
        let id = items[*item].id.clone().unwrap_or_default();
        if conflicts.contains(item) {
            items[*item].fail(
                409,
                "version_conflict_engine_exception",
                format!("[{id}]: version conflict, document already exists"),
            );
            continue;
        }
        let (document, status, result) = match write {
            Write::Document(document) => {
                if stored.contains_key(&id)
                    && let Ok(Value::Object(parsed)) = serde_json::from_slice(document)
                {
                    latest.insert(id.clone(), parsed);
                }
                (document.clone(), 201, "created")
            }
            Write::Update(_) if update_error.is_some() => {
                if let Some(e) = &update_error {
                    items[*item].fail(e.status.as_u16(), e.kind, e.reason.clone());
                }
                continue;
            }
            Write::Update(update) => {
                let current = latest
                    .get(&id)
                    .or_else(|| stored.get(&id).and_then(Option::as_ref));
                let (document, status, result) = match update.apply(current, ID_FIELD, &id) {
                    UpdateOutcome::Noop => {
                        items[*item].outcome = Outcome::Done {
                            status: 200,
                            result: "noop",
                        };
                        continue;
                    }
                    UpdateOutcome::Missing => {
                        items[*item].fail(
                            404,
                            "document_missing_exception",
                            format!("[{id}]: document missing"),
                        );
                        continue;
                    }
                    UpdateOutcome::Merged(document) => (document, 200, "updated"),
                    UpdateOutcome::Created(document) => (document, 201, "created"),
                };
                let text = Value::Object(document.clone()).to_string().into_bytes();
                latest.insert(id.clone(), document);
                (text, status, result)
            }
        };
        documents.push((id, document));
        written.push((*item, status, result));
    }
    if written.is_empty() {
        return;
    }
    if let Some(changes) = as_transaction(shared, index, exists, &documents) {
        let outcome = commit_with_retries(shared, index, changes).await;
        // With a WAL the commit's part is held in memory until a checkpoint folds it, which
        // tells the merger then (as for the PostgreSQL protocol's commits).
        if outcome.is_ok() && shared.ingest_queue.is_none() {
            shared.merger.ingested(index);
        }
        for &(item, status, result) in &written {
            match &outcome {
                Ok(_) => items[item].outcome = Outcome::Done { status, result },
                Err(e @ EngineError::WriteConflict { .. }) => {
                    items[item].fail(429, "es_rejected_execution_exception", e.to_string())
                }
                Err(e) => items[item].fail(500, "exception", e.to_string()),
            }
        }
        return;
    }
    let mut lines = Vec::new();
    for (_, document) in &documents {
        lines.extend_from_slice(document);
        lines.push(b'\n');
    }
    let options = IngestOptions {
        key: (!exists).then(|| (ID_FIELD.to_owned(), KeyType::String)),
        time_column: if exists {
            None
        } else {
            writes.time_field.map(str::to_owned)
        },
        on_conflict: OnConflict::Replace,
        auto_merge: false,
        max_line_bytes: Some(shared.config.limits.max_line_bytes),
        ..IngestOptions::default()
    };
    let input = Input::Stream(StreamInput::new(
        format!("_bulk into {index}"),
        Compression::None,
        Box::new(Cursor::new(lines)),
    ));
    let outcome = ingest_on_thread(shared, index.to_owned(), input, options, usize::MAX).await;
    let (result, rejects) = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            for &(item, _, _) in &written {
                items[item].fail(500, "exception", e.message.clone());
            }
            return;
        }
    };
    let mut rejected: BTreeMap<u64, &Reject> = BTreeMap::new();
    for reject in &rejects {
        rejected.insert(reject.line, reject);
    }
    let failure = result
        .as_ref()
        .err()
        .filter(|e| !matches!(e, EngineError::AllRejected { .. }));
    if result.is_ok() {
        shared.merger.ingested(index);
    }
    for (line, &(item, status, result)) in written.iter().enumerate() {
        let item = &mut items[item];
        if let Some(reject) = rejected.get(&(line as u64 + 1)) {
            item.fail(400, "document_parsing_exception", reject.reason.clone());
        } else if let Some(e) = failure {
            item.fail(500, "exception", e.to_string());
        } else {
            item.outcome = Outcome::Done { status, result };
        }
    }
}

/// How often a request's commit is tried again after another commit wrote one of its `_id`s
/// since it took its snapshot.
const COMMIT_ATTEMPTS: usize = 8;

/// The documents (`_id` and text) as one transaction's changes, when they may be committed as
/// one (ADR 0018): into a table that exists, keyed by `_id` (what
/// `_bulk` creates; then a later write of an `_id` replaces it) or without a key (appended); a
/// request the WAL takes whole (`wal.max_request_bytes`), with no document over
/// `limits.max_line_bytes`, which the direct ingest rejects by line and records. `None`: the
/// direct ingest.
fn as_transaction(
    shared: &Shared,
    index: &str,
    exists: bool,
    documents: &[(String, Vec<u8>)],
) -> Option<TableChanges> {
    let bytes: usize = documents.iter().map(|(_, text)| text.len() + 1).sum();
    let line_limit = shared.config.limits.max_line_bytes;
    if !exists
        || bytes > shared.config.wal.max_request_bytes
        || documents.iter().any(|(_, text)| text.len() > line_limit)
    {
        return None;
    }
    let manifest = shared.data_dir.manifest_shared(index).ok()?;
    let keyed_by_id = match &manifest.settings.key {
        None => false,
        Some(key) if key.path == ID_FIELD && key.key_type == KeyType::String => true,
        Some(_) => return None,
    };
    let mut changes = TableChanges::default();
    for (id, text) in documents {
        let text = String::from_utf8(text.clone()).ok()?;
        if keyed_by_id {
            // A later action on the same `_id` wins, as a later line of an ingest does.
            changes
                .keyed
                .insert(KeyValue::String(id.clone()), Some(text));
        } else {
            changes.appended.push(text);
        }
    }
    Some(changes)
}

/// Commits `changes` to `index` as a transaction of its own — through the server's WAL when it
/// has one: durable at the group fsync, visible at once, written into parts by its checkpoints —
/// on a fresh snapshot each attempt: `_bulk`'s writes replace what is there, so a key another
/// commit wrote since the snapshot is no reason to fail, only to look again.
async fn commit_with_retries(
    shared: &Shared,
    index: &str,
    changes: TableChanges,
) -> Result<CommitSummary, EngineError> {
    let data_dir = shared.data_dir.clone();
    let table = index.to_owned();
    let work = move || {
        let mut attempt = 1;
        loop {
            // The lease keeps the snapshot's files while the commit looks keys up in them.
            let _lease = data_dir.read_lease(&table)?;
            let write = TableWrite {
                snapshot: data_dir.manifest_shared(&table)?,
                changes: changes.clone(),
                reads: TableReads::default(),
            };
            let writes = BTreeMap::from([(table.clone(), write)]);
            match strata_engine::transaction::commit(&data_dir, &writes) {
                Err(EngineError::WriteConflict { .. }) if attempt < COMMIT_ATTEMPTS => attempt += 1,
                outcome => return outcome,
            }
        }
    };
    tokio::task::spawn_blocking(move || strata_json::run_with_deep_stack(work))
        .await
        .map_err(|e| EngineError::Invalid(format!("the commit's thread failed: {e}")))?
}

/// The documents the `update` items of `writes` start from, by `_id`: the table's live
/// document, or None when it has none. An update needs the table keyed by `_id` (what `_bulk`
/// creates); in another table its items fail here.
async fn updated_documents(
    shared: &Arc<Shared>,
    index: &str,
    writes: &IndexWrites,
    items: &[Item],
    exists: bool,
) -> Result<HashMap<String, Option<Map<String, Value>>>, EsError> {
    let ids: Vec<String> = (writes.documents.iter())
        .filter(|(_, write)| matches!(write, Write::Update(_)))
        .filter_map(|(item, _)| items[*item].id.clone())
        .collect();
    let mut documents: HashMap<String, Option<Map<String, Value>>> =
        ids.iter().map(|id| (id.clone(), None)).collect();
    if ids.is_empty() || !exists {
        return Ok(documents);
    }
    let manifest = shared
        .data_dir
        .manifest(index)
        .map_err(|e| super::search::bad_request(e.to_string()))?;
    if (manifest.settings.key.as_ref()).is_none_or(|key| key.path != ID_FIELD) {
        return Err(super::search::bad_request(format!(
            "index {index} is not keyed by {ID_FIELD} (it was not created by _bulk), so its \
             documents cannot be updated by id"
        )));
    }
    for (id, document) in stored_documents(shared, index, ID_FIELD, &ids).await? {
        documents.insert(id, Some(document));
    }
    Ok(documents)
}

/// The `create` items of `writes` that Elasticsearch answers 409: their `_id` is a live
/// document of the table, or an earlier `index` or `create` of this request wrote it. Only a
/// table keyed by `_id` (what `_bulk` creates) is looked up; in a table without that key `_id`
/// is a plain field, and `create` adds the document as `index` does.
fn create_conflicts(
    shared: &Arc<Shared>,
    index: &str,
    writes: &IndexWrites,
    items: &[Item],
    exists: bool,
) -> Result<std::collections::HashSet<usize>, EngineError> {
    let mut conflicts = std::collections::HashSet::new();
    let creates = writes
        .documents
        .iter()
        .any(|(item, _)| items[*item].action == "create");
    if !creates {
        return Ok(conflicts);
    }
    let mut live = std::collections::BTreeSet::new();
    if exists {
        // The lease keeps the snapshot's parts while their key files are read.
        let _lease = shared.data_dir.read_lease(index)?;
        let manifest = shared.data_dir.manifest(index)?;
        let keyed_by_id = manifest
            .settings
            .key
            .as_ref()
            .is_some_and(|key| key.path == ID_FIELD);
        if !keyed_by_id {
            return Ok(conflicts);
        }
        let ids: Vec<KeyValue> = (writes.documents.iter())
            .filter(|(item, _)| items[*item].action == "create")
            .filter_map(|(item, _)| items[*item].id.clone().map(KeyValue::String))
            .collect();
        live = strata_engine::deletes::live_keys(&shared.data_dir, index, &manifest, &ids)?;
    }
    let mut written = std::collections::HashSet::new();
    for (item, _) in &writes.documents {
        let Some(id) = &items[*item].id else {
            continue;
        };
        let taken = !written.insert(id.as_str()) || live.contains(&KeyValue::String(id.clone()));
        if items[*item].action == "create" && taken {
            conflicts.insert(*item);
        }
    }
    Ok(conflicts)
}

/// Deletes one index's ids, one commit each, and settles their items.
async fn delete_from_index(
    shared: &Arc<Shared>,
    index: &str,
    targets: Vec<(usize, String)>,
    items: &mut [Item],
) {
    let data_dir = shared.data_dir.clone();
    let table = index.to_owned();
    let ids: Vec<String> = targets.iter().map(|(_, id)| id.clone()).collect();
    let results = tokio::task::spawn_blocking(move || {
        let exists = data_dir.table_exists(&table).unwrap_or(false);
        ids.into_iter()
            .map(|id| {
                if !exists {
                    return Ok(0);
                }
                strata_engine::delete_keys(&data_dir, &table, vec![KeyValue::String(id)])
            })
            .collect::<Vec<_>>()
    })
    .await;
    let results = match results {
        Ok(results) => results,
        Err(e) => {
            for (item, _) in &targets {
                items[*item].fail(500, "exception", e.to_string());
            }
            return;
        }
    };
    let mut deleted_any = false;
    for ((item, _), result) in targets.iter().zip(results) {
        let item = &mut items[*item];
        match result {
            Ok(0) => {
                item.outcome = Outcome::Done {
                    status: 404,
                    result: "not_found",
                }
            }
            Ok(_) => {
                deleted_any = true;
                item.outcome = Outcome::Done {
                    status: 200,
                    result: "deleted",
                };
            }
            Err(e) => item.fail(400, "illegal_argument_exception", e.to_string()),
        }
    }
    if deleted_any {
        shared.merger.ingested(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<Vec<u8>> {
        text.lines().map(|l| l.as_bytes().to_vec()).collect()
    }

    #[test]
    fn generated_ids_sort_by_time_and_are_unique() {
        let ids: Vec<String> = (0..1000).map(|_| generated_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
        assert!(ids.iter().all(|id| id.len() == 20));
        assert!(ids.first() < ids.last());
    }

    #[test]
    fn every_action_gets_an_item_in_order() {
        let body = lines(concat!(
            r#"{"index":{"_index":"logs","_id":"a"}}"#,
            "\n",
            r#"{"msg":"one","@timestamp":"2024-01-01T00:00:00Z"}"#,
            "\n",
            r#"{"create":{"_type":"_doc"}}"#,
            "\n",
            r#"{"msg":"two"}"#,
            "\n",
            r#"{"index":{}}"#,
            "\n",
            r#"not json"#,
            "\n",
            r#"{"update":{"_id":"a"}}"#,
            "\n",
            r#"{"doc":{"msg":"x"}}"#,
            "\n",
            r#"{"delete":{"_index":"other","_id":7}}"#,
            "\n",
            r#"{"index":{"_index":"Bad/Name"}}"#,
            "\n",
            r#"{"x":1}"#,
            "\n",
            r#"{"index":{}}"#,
            "\n",
            r#"{"_id":"inside","x":1}"#,
            "\n",
        ));
        let Plan {
            items,
            writes,
            deletes,
        } = plan(&body, Some("logs")).unwrap();
        let actions: Vec<&str> = items.iter().map(|i| i.action).collect();
        assert_eq!(
            actions,
            [
                "index", "create", "index", "update", "delete", "index", "index"
            ]
        );
        let failed: Vec<bool> = items
            .iter()
            .map(|i| matches!(i.outcome, Outcome::Failed { .. }))
            .collect();
        assert_eq!(failed, [false, false, true, false, false, true, true]);
        let logs = &writes["logs"];
        let logged: Vec<usize> = logs.documents.iter().map(|(item, _)| *item).collect();
        assert_eq!(logged, [0, 1, 3]);
        assert_eq!(logs.time_field, Some("@timestamp"));
        let Write::Document(first) = &logs.documents[0].1 else {
            panic!("the first write is a document");
        };
        assert!(matches!(logs.documents[2].1, Write::Update(_)));
        let first: Value = serde_json::from_slice(first).unwrap();
        assert_eq!(
            first,
            json!({"_id": "a", "msg": "one", "@timestamp": "2024-01-01T00:00:00Z"})
        );
        assert_eq!(items[1].id.as_ref().map(String::len), Some(20));
        assert_eq!(deletes["other"], [(4, "7".to_owned())]);
    }

    #[test]
    fn a_broken_action_line_fails_the_request() {
        assert!(plan(&lines("{\"index\":{}}"), Some("logs")).is_err());
        assert!(plan(&lines("{\"upsert\":{}}\n{}"), Some("logs")).is_err());
        assert!(plan(&lines("{\"index\":{}}\n{}"), None).is_err());
        assert!(plan(&lines("[1]\n{}"), Some("logs")).is_err());
        let plan = plan(&lines("{\"index\":{}}\n{}"), Some("logs")).unwrap();
        assert_eq!(plan.items.len(), 1);
    }
}
