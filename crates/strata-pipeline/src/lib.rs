//! Log pipelines: each raw line in, one JSON document out (issue 15, ADR 0018).
//!
//! A [`Pipeline`] extracts fields from a line (a regex with named groups, a dissect pattern,
//! a JSON object, or the whole line as `message`), drops "no value" texts, converts types and
//! the time field, renames and drops fields. Built-in pipelines ([`builtin`]) cover access logs,
//! JSON lines and full-text lines; users declare theirs in the config file ([`spec`]).
//!
//! Invariants:
//! - no line is lost: a line the pipeline cannot parse (no match, a field that does not convert)
//!   becomes `{"message": <the line>, <time field>: <ingest time>, "pipeline_error": <why>}`,
//!   and [`Processed::unparsed`] says so, so that callers count it;
//! - blank lines are skipped, as NDJSON ingest skips them;
//! - every time a pipeline writes (parsed or ingest time) has the pipeline's one precision, so
//!   the stored strings sort as their instants ([`timestamp`]);
//! - bytes that are not UTF-8 are written as `\xHH` (as nginx escapes them) before parsing.

mod builtin;
pub mod dissect;
pub mod spec;
pub mod timestamp;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};
use strata_json::{Document, DocumentError, parse_document, parse_document_tree};

pub use builtin::BUILTIN_NAMES;
pub use spec::{DEFAULT_TIME_FIELD, PipelineSpec, TimeDeclaration};
use timestamp::{Precision, TimeSpec, write_time};

/// The field that holds the whole line: of an unparsed line, and with `keep_message`.
pub const MESSAGE_FIELD: &str = "message";
/// The field that says why a line was not parsed.
pub const ERROR_FIELD: &str = "pipeline_error";

#[derive(Debug, Clone, thiserror::Error)]
pub enum PipelineError {
    #[error("pipeline '{pipeline}': {reason}")]
    Invalid { pipeline: String, reason: String },
    #[error("unknown pipeline '{name}' (built in: {}; declared in the config file: {})",
        BUILTIN_NAMES.join(", "),
        if declared.is_empty() { "none".to_owned() } else { declared.join(", ") })]
    Unknown { name: String, declared: Vec<String> },
    #[error("pipeline '{name}' is built in; give yours another name")]
    ShadowsBuiltin { name: String },
}

/// What a field's text becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A 64-bit integer (`+7` and `007` are 7).
    Int,
    /// A finite floating-point number.
    Float,
    /// `true`/`false`, `1`/`0`, `yes`/`no`, any case.
    Bool,
    /// The text as it is (the default).
    String,
}

/// The time field of a pipeline: which field, and how its text is read and stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeField {
    pub field: String,
    pub spec: TimeSpec,
}

/// Where a pipeline's fields come from.
#[derive(Debug, Clone)]
pub(crate) enum Extractor {
    /// Named groups of a regex anchored at both ends.
    Regex(regex::Regex),
    Dissect(dissect::Dissect),
    /// The line is a JSON object.
    Json,
    /// The whole line as `message`, its time found in it (`crate::detect_time`).
    Text,
}

/// A compiled pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    name: String,
    extractor: Extractor,
    time: Option<TimeField>,
    types: BTreeMap<String, FieldType>,
    rename: BTreeMap<String, String>,
    drop: BTreeSet<String>,
    null_values: Vec<String>,
    keep_message: bool,
    /// Whether anything changes a JSON line: if not, `json` parses it as NDJSON ingest does.
    converts: bool,
    /// Whether a regex's `request` field is split into `method`, `path` and `protocol`
    /// (`builtin::split_request`): the built-in access logs.
    split_request: bool,
}

/// A line's fields as its extractor found them: in name order, each name once.
type Fields<'a> = Vec<(Cow<'a, str>, FieldValue<'a>)>;

/// A field's value on its way to the document: text (mostly a slice of the line, so that a
/// parsed line costs no allocation per field), a converted scalar, or a JSON line's value.
#[derive(Debug, Clone, PartialEq)]
enum FieldValue<'a> {
    Text(Cow<'a, str>),
    Int(i64),
    Bool(bool),
    Json(Value),
}

impl FieldValue<'_> {
    /// The value of a JSON line's field (its strings are text like any extractor's).
    fn of_json(value: Value) -> FieldValue<'static> {
        match value {
            Value::String(s) => FieldValue::Text(Cow::Owned(s)),
            other => FieldValue::Json(other),
        }
    }

    fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Text(text) => FieldValue::Text(Cow::Owned(text.into_owned())),
            FieldValue::Int(i) => FieldValue::Int(i),
            FieldValue::Bool(b) => FieldValue::Bool(b),
            FieldValue::Json(value) => FieldValue::Json(value),
        }
    }

    fn push_to(&self, document: &mut Document, key: &str) {
        match self {
            FieldValue::Text(text) => document.push_string(key, text),
            FieldValue::Int(i) => document.push_int(key, *i),
            FieldValue::Bool(b) => document.push_value(key, &Value::Bool(*b)),
            FieldValue::Json(value) => document.push_value(key, value),
        }
    }
}

/// One line's document.
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    pub document: Document,
    /// Why the line was kept whole as `message` instead of parsed; None when it was parsed.
    pub unparsed: Option<String>,
}

impl Pipeline {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: &str,
        extractor: Extractor,
        time: Option<TimeField>,
        types: BTreeMap<String, FieldType>,
        rename: BTreeMap<String, String>,
        drop: BTreeSet<String>,
        null_values: Vec<String>,
        keep_message: bool,
    ) -> Pipeline {
        let converts = time.is_some()
            || !types.is_empty()
            || !rename.is_empty()
            || !drop.is_empty()
            || !null_values.is_empty()
            || keep_message;
        Pipeline {
            name: name.to_owned(),
            extractor,
            time,
            types,
            rename,
            drop,
            null_values,
            keep_message,
            converts,
            split_request: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The field that holds each document's time, as stored (after renaming): the natural time
    /// column of a table this pipeline fills. None for a pipeline without a time field (`json`).
    pub fn time_field(&self) -> Option<&str> {
        self.time.as_ref().map(|time| self.stored_name(&time.field))
    }

    /// Whether documents hold the whole line as `message` (the `text` pipeline, and those with
    /// `keep_message`): a table it creates gets a text index on `message`.
    pub fn keeps_message(&self) -> bool {
        self.keep_message
    }

    fn stored_name<'a>(&'a self, field: &'a str) -> &'a str {
        self.rename.get(field).map_or(field, String::as_str)
    }

    fn precision(&self) -> Precision {
        self.time
            .as_ref()
            .map_or(Precision::Millis, |time| time.spec.precision)
    }

    /// The document of `line` (without its line break); None for a blank line.
    /// `ingest_time` stands in for a time the line does not have.
    pub fn process(&self, line: &[u8], ingest_time: DateTime<Utc>) -> Option<Processed> {
        let text = utf8_text(line);
        if text.trim().is_empty() {
            return None;
        }
        let fields = match &self.extractor {
            Extractor::Json if !self.converts => {
                return match parse_document(line) {
                    Ok(document) => Some(Processed {
                        document,
                        unparsed: None,
                    }),
                    Err(DocumentError::Empty) => None,
                    Err(e) => Some(self.unparsed(&text, ingest_time, e.to_string())),
                };
            }
            Extractor::Json => match parse_document_tree(line) {
                Ok(object) => object
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k), FieldValue::of_json(v)))
                    .collect(),
                Err(e) => return Some(self.unparsed(&text, ingest_time, e.to_string())),
            },
            Extractor::Regex(regex) => match regex.captures(&text) {
                Some(captures) => {
                    // Capture names are unique (the regex crate refuses duplicates).
                    let mut fields: Fields = regex
                        .capture_names()
                        .zip(captures.iter())
                        .filter_map(|(name, group)| Some((name?, group?.as_str())))
                        .map(|(name, value)| {
                            (Cow::Borrowed(name), FieldValue::Text(Cow::Borrowed(value)))
                        })
                        .collect();
                    if self.split_request {
                        builtin::split_request_field(&mut fields);
                    }
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    fields
                }
                None => return Some(self.no_match(&text, ingest_time)),
            },
            Extractor::Dissect(dissect) => match dissect.apply(&text) {
                // Through a map: a name given twice keeps its last value.
                Some(fields) => fields
                    .into_iter()
                    .collect::<BTreeMap<String, String>>()
                    .into_iter()
                    .map(|(name, value)| (Cow::Owned(name), FieldValue::Text(Cow::Owned(value))))
                    .collect(),
                None => return Some(self.no_match(&text, ingest_time)),
            },
            Extractor::Text => match (detect_time(&text), &self.time) {
                (Some(found), Some(time)) => vec![(
                    Cow::Borrowed(time.field.as_str()),
                    FieldValue::Text(Cow::Owned(found)),
                )],
                _ => Vec::new(),
            },
        };
        Some(match self.convert(fields, &text, ingest_time) {
            Ok(document) => Processed {
                document,
                unparsed: None,
            },
            Err(reason) => self.unparsed(&text, ingest_time, reason),
        })
    }

    fn no_match(&self, text: &str, ingest_time: DateTime<Utc>) -> Processed {
        self.unparsed(
            text,
            ingest_time,
            format!(
                "the line does not match the pattern of pipeline '{}'",
                self.name
            ),
        )
    }

    /// The line kept whole: `message`, the ingest time in the time field, and why.
    fn unparsed(&self, text: &str, ingest_time: DateTime<Utc>, reason: String) -> Processed {
        let time_field = self.time_field().unwrap_or(DEFAULT_TIME_FIELD);
        let mut object = Map::new();
        object.insert(MESSAGE_FIELD.to_owned(), Value::String(text.to_owned()));
        object.insert(
            time_field.to_owned(),
            Value::String(write_time(ingest_time, self.precision())),
        );
        object.insert(ERROR_FIELD.to_owned(), Value::String(reason.clone()));
        Processed {
            document: Document::from_object(&object),
            unparsed: Some(reason),
        }
    }

    /// Applies "no value" texts, types, the time field, renames, drops and `keep_message` to
    /// `fields` (in name order, each name once) and builds the document, its keys in name order
    /// (of two fields renamed to one name, the later is kept, as a map would); the error names
    /// the first field that does not convert.
    fn convert<'a>(
        &'a self,
        fields: Fields<'a>,
        text: &'a str,
        ingest_time: DateTime<Utc>,
    ) -> Result<Document, String> {
        let mut out: Vec<(Cow<'a, str>, FieldValue<'a>)> = Vec::with_capacity(fields.len() + 2);
        for (name, value) in fields {
            if self.drop.contains(name.as_ref()) {
                continue;
            }
            let value = match value {
                FieldValue::Text(s) if self.null_values.iter().any(|n| *n == *s) => continue,
                FieldValue::Text(s) => match self.types.get(name.as_ref()) {
                    None | Some(FieldType::String) => FieldValue::Text(s),
                    Some(field_type) => convert_text(&s, *field_type)
                        .map_err(|why| format!("field '{name}': '{s}' is not {why}"))?,
                },
                other => other,
            };
            let value = match &self.time {
                Some(time) if time.field == name => {
                    let instant = match &value {
                        FieldValue::Text(s) => time.spec.read(s),
                        FieldValue::Int(i) => time.spec.read(&i.to_string()),
                        FieldValue::Json(Value::Number(n)) => time.spec.read(&n.to_string()),
                        FieldValue::Bool(b) => {
                            return Err(format!("field '{name}': {b} is not a time"));
                        }
                        FieldValue::Json(other) => {
                            return Err(format!("field '{name}': {other} is not a time"));
                        }
                    }
                    .map_err(|why| format!("field '{name}': {why}"))?;
                    FieldValue::Text(Cow::Owned(time.spec.write(instant)))
                }
                _ => value,
            };
            let stored = match self.rename.get(name.as_ref()) {
                Some(renamed) => Cow::Borrowed(renamed.as_str()),
                None => name,
            };
            out.push((stored, value));
        }
        if let Some(time) = &self.time {
            let stored = self.stored_name(&time.field);
            if !self.drop.contains(&time.field) && !out.iter().any(|(name, _)| name == stored) {
                out.push((
                    Cow::Borrowed(stored),
                    FieldValue::Text(Cow::Owned(write_time(ingest_time, time.spec.precision))),
                ));
            }
        }
        if self.keep_message {
            out.push((
                Cow::Borrowed(MESSAGE_FIELD),
                FieldValue::Text(Cow::Borrowed(text)),
            ));
        }
        // Stable, so that of equal names the later stays last, and is the one kept.
        out.sort_by(|a, b| a.0.cmp(&b.0));
        let mut document = Document::default();
        for (index, (name, value)) in out.iter().enumerate() {
            if out.get(index + 1).is_some_and(|(next, _)| next == name) {
                continue;
            }
            value.push_to(&mut document, name);
        }
        Ok(document)
    }
}

fn convert_text(text: &str, field_type: FieldType) -> Result<FieldValue<'static>, &'static str> {
    match field_type {
        FieldType::String => Ok(FieldValue::Text(Cow::Owned(text.to_owned()))),
        FieldType::Int => text
            .trim()
            .parse::<i64>()
            .map(FieldValue::Int)
            .map_err(|_| "an integer"),
        FieldType::Float => text
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(|n| FieldValue::Json(Value::Number(n)))
            .ok_or("a finite number"),
        FieldType::Bool => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(FieldValue::Bool(true)),
            "false" | "0" | "no" => Ok(FieldValue::Bool(false)),
            _ => Err("true or false"),
        },
    }
}

/// The line as text: itself when it is UTF-8, else with each invalid byte written as `\xHH`.
fn utf8_text(line: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(line) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => {
            let mut text = String::with_capacity(line.len() + 16);
            for chunk in line.utf8_chunks() {
                text.push_str(chunk.valid());
                for byte in chunk.invalid() {
                    text.push_str(&format!("\\x{byte:02X}"));
                }
            }
            Cow::Owned(text)
        }
    }
}

/// The first timestamp in a full-text line: an access log's `[17/May/2015:10:05:03 +0000]`
/// or an ISO 8601 time (`2024-08-01T14:22:47.123Z`, `2024-08-01 14:22:47,123`), as ISO 8601
/// text for the `text` pipeline's time field.
fn detect_time(text: &str) -> Option<String> {
    if let Some(found) = leading_access_log_time(text) {
        return Some(found);
    }
    detect_time_by_regex(text)
}

/// The access-log time of a line whose first `[` opens one, when no ISO 8601 time can start
/// before it — what the regex of [`detect_time_by_regex`] would find first, found without
/// searching (an access log's lines all start this way). An ISO 8601 time holds no `[` and has
/// a digit before its first `-`, so a prefix without a `-` after a digit holds none.
fn leading_access_log_time(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let open = bytes.iter().position(|&b| b == b'[')?;
    if bytes[..open]
        .windows(2)
        .any(|pair| pair[0].is_ascii_digit() && pair[1] == b'-')
    {
        return None;
    }
    let clf = text.get(open + 1..open + 27)?;
    if bytes.get(open + 27) != Some(&b']') {
        return None;
    }
    let instant = timestamp::read_fixed_width_clf(clf)?;
    // Whole seconds, as the access-log form has them.
    Some(write_time(instant.with_timezone(&Utc), Precision::Seconds))
}

fn detect_time_by_regex(text: &str) -> Option<String> {
    static TIME: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
        regex::Regex::new(
            r"\[\d{2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\]|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
        )
        .ok()
    });
    // The alternative matched is told by the match's first byte (`[` or a digit), so the line
    // is searched by the regex's fast engine alone: asking for the groups ran a slower one over
    // the whole line (16 % of a full-text ingest's time).
    let found = TIME.as_ref()?.find(text)?.as_str();
    match found.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        Some(clf) => {
            let instant = timestamp::read_clf(clf).ok()?;
            Some(write_time(instant.with_timezone(&Utc), Precision::Seconds))
        }
        None => Some(found.to_owned()),
    }
}

/// The pipelines a data directory's ingests can name: the built-ins and the config file's.
#[derive(Debug, Clone, Default)]
pub struct Pipelines {
    declared: BTreeMap<String, Arc<Pipeline>>,
}

impl Pipelines {
    /// The built-ins and `declared` (the config file's `[pipelines]`), each checked.
    pub fn new(declared: &BTreeMap<String, PipelineSpec>) -> Result<Pipelines, PipelineError> {
        let mut compiled = BTreeMap::new();
        for (name, spec) in declared {
            if BUILTIN_NAMES.contains(&name.as_str()) {
                return Err(PipelineError::ShadowsBuiltin { name: name.clone() });
            }
            compiled.insert(name.clone(), Arc::new(spec.compile(name)?));
        }
        Ok(Pipelines { declared: compiled })
    }

    /// The pipeline called `name`.
    pub fn get(&self, name: &str) -> Result<Arc<Pipeline>, PipelineError> {
        if let Some(builtin) = builtin::builtin(name) {
            return builtin;
        }
        self.declared
            .get(name)
            .cloned()
            .ok_or_else(|| PipelineError::Unknown {
                name: name.to_owned(),
                declared: self.declared.keys().cloned().collect(),
            })
    }
}

#[cfg(test)]
mod tests;
