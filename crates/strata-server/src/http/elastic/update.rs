//! `update` actions of `_bulk`: Elasticsearch's partial updates of one document by `_id`.
//!
//! The action's body holds `doc` (fields to merge into the stored document: objects merge
//! field by field, recursively; any other value, arrays included, replaces), `upsert` (the
//! document to create when none has the `_id`) or `doc_as_upsert: true` (create it from `doc`).
//! Scripts are not run: an action with `script` fails with 400. An update that changes nothing
//! is a `noop` (Elasticsearch's `detect_noop`, on by default) and writes nothing.
//!
//! The document updated is the newest one the request has written for the `_id` before the
//! action (an earlier `index`, `create` or `update` of the same request), else the table's live
//! one; the result is written by the request's ingest like an `index` action's document.
//! Merged documents are written with their fields in name order (the merge goes through
//! `serde_json`'s map); values are kept exactly (numbers at their written precision).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::EsError;
use super::dsl::string_sql;
use crate::Shared;

/// An `update` action's body.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct UpdateRequest {
    doc: Option<Map<String, Value>>,
    upsert: Option<Map<String, Value>>,
    doc_as_upsert: bool,
}

/// What an update does to its document.
#[derive(Debug, PartialEq)]
pub(super) enum UpdateOutcome {
    /// The merge changed nothing: nothing is written.
    Noop,
    /// The document as merged, to be written.
    Merged(Map<String, Value>),
    /// No document had the `_id`: this one (the upsert) is created.
    Created(Map<String, Value>),
    /// No document had the `_id`, and the action has no upsert.
    Missing,
}

impl UpdateRequest {
    /// Reads an update action's body; the error is the item's reason (400).
    pub(super) fn parse(source: &[u8], id_field: &str) -> Result<UpdateRequest, String> {
        let body: Value = serde_json::from_slice(source)
            .map_err(|e| format!("failed to parse the update request: {e}"))?;
        let Value::Object(mut body) = body else {
            return Err("the update request is not a JSON object".into());
        };
        if body.contains_key("script") {
            return Err(
                "Strata's _bulk does not run scripts; send the fields to change as \
                        `doc` (or UPDATE … SET data = jsonb_set(…) over SQL)"
                    .into(),
            );
        }
        let object = |value: Option<Value>, name: &str| match value {
            None => Ok(None),
            Some(Value::Object(object)) if object.contains_key(id_field) => Err(format!(
                "Field [{id_field}] is a metadata field and cannot be added inside `{name}`."
            )),
            Some(Value::Object(object)) => Ok(Some(object)),
            Some(_) => Err(format!("`{name}` must be a JSON object")),
        };
        let doc = object(body.remove("doc"), "doc")?;
        let upsert = object(body.remove("upsert"), "upsert")?;
        let doc_as_upsert = match body.remove("doc_as_upsert") {
            None => false,
            Some(Value::Bool(flag)) => flag,
            Some(_) => return Err("`doc_as_upsert` must be true or false".into()),
        };
        if doc.is_none() && upsert.is_none() {
            return Err("Validation Failed: 1: script or doc is missing;".into());
        }
        Ok(UpdateRequest {
            doc,
            upsert,
            doc_as_upsert,
        })
    }

    /// The update applied to `current` (the document with the `_id`, if any), which holds the
    /// `_id` field under `id_field`; a created document gets it as `id`.
    pub(super) fn apply(
        &self,
        current: Option<&Map<String, Value>>,
        id_field: &str,
        id: &str,
    ) -> UpdateOutcome {
        match current {
            Some(current) => {
                let mut merged = current.clone();
                if let Some(doc) = &self.doc {
                    merge(&mut merged, doc);
                }
                if &merged == current {
                    UpdateOutcome::Noop
                } else {
                    UpdateOutcome::Merged(merged)
                }
            }
            None => {
                let created = match (&self.upsert, &self.doc, self.doc_as_upsert) {
                    (_, Some(doc), true) => doc,
                    (Some(upsert), _, _) => upsert,
                    _ => return UpdateOutcome::Missing,
                };
                let mut created = created.clone();
                created.insert(id_field.to_owned(), Value::String(id.to_owned()));
                UpdateOutcome::Created(created)
            }
        }
    }
}

/// Merges `patch` into `target` as Elasticsearch merges a partial document: an object into an
/// object field by field, recursively; anything else replaces.
fn merge(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match (target.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(patch)) => merge(existing, patch),
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The live documents of `index` whose `id_field` is one of `ids`, by id.
pub(super) async fn stored_documents(
    shared: &Shared,
    index: &str,
    id_field: &str,
    ids: &[String],
) -> Result<HashMap<String, Map<String, Value>>, EsError> {
    let mut documents = HashMap::new();
    if ids.is_empty() {
        return Ok(documents);
    }
    let list: Vec<String> = ids.iter().map(|id| string_sql(id)).collect();
    let sql = format!(
        "SELECT data FROM \"{}\" WHERE data->>{} IN ({})",
        index.replace('"', "\"\""),
        string_sql(id_field),
        list.join(", ")
    );
    for mut row in super::search::sql_rows(shared, &sql).await? {
        let document = match row.remove("data") {
            Some(Value::String(text)) => serde_json::from_str(&text).ok(),
            Some(value) => Some(value),
            None => None,
        };
        if let Some(Value::Object(document)) = document
            && let Some(Value::String(id)) = document.get(id_field)
        {
            documents.insert(id.clone(), document);
        }
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(object) => object,
            _ => panic!("not an object"),
        }
    }

    fn request(body: Value) -> Result<UpdateRequest, String> {
        UpdateRequest::parse(body.to_string().as_bytes(), "_id")
    }

    #[test]
    fn a_partial_document_merges_objects_and_replaces_everything_else() {
        let current = object(json!({"_id": "a", "n": 1, "user": {"name": "x", "tags": [1, 2]}}));
        let update = request(json!({"doc": {"user": {"tags": [3], "age": 4}, "m": 1.50}})).unwrap();
        assert_eq!(
            update.apply(Some(&current), "_id", "a"),
            UpdateOutcome::Merged(object(json!({
                "_id": "a", "n": 1, "m": 1.50, "user": {"name": "x", "tags": [3], "age": 4}
            })))
        );
        let same = request(json!({"doc": {"user": {"name": "x"}}})).unwrap();
        assert_eq!(same.apply(Some(&current), "_id", "a"), UpdateOutcome::Noop);
    }

    #[test]
    fn a_missing_document_is_created_only_from_an_upsert() {
        let doc = request(json!({"doc": {"n": 1}})).unwrap();
        assert_eq!(doc.apply(None, "_id", "a"), UpdateOutcome::Missing);
        let doc_as_upsert = request(json!({"doc": {"n": 1}, "doc_as_upsert": true})).unwrap();
        assert_eq!(
            doc_as_upsert.apply(None, "_id", "a"),
            UpdateOutcome::Created(object(json!({"_id": "a", "n": 1})))
        );
        let upsert = request(json!({"doc": {"n": 1}, "upsert": {"n": 0}})).unwrap();
        assert_eq!(
            upsert.apply(None, "_id", "b"),
            UpdateOutcome::Created(object(json!({"_id": "b", "n": 0})))
        );
    }

    #[test]
    fn what_cannot_be_applied_is_refused() {
        assert!(request(json!({"script": {"source": "ctx._source.n++"}})).is_err());
        assert!(request(json!({"doc": [1]})).is_err());
        assert!(request(json!({"doc": {"_id": "x"}})).is_err());
        assert!(request(json!({"doc_as_upsert": true})).is_err());
        assert!(UpdateRequest::parse(b"[1]", "_id").is_err());
    }
}
