//! The pipelines every Strata has, by name: access logs (`common`; `combined`, also called
//! `nginx` and `apache`), JSON lines (`json`) and full-text lines (`text`).
//!
//! The access-log pipelines are ordinary regex pipelines (what a user could write), so they
//! exercise the same code as user pipelines, except that their quoted request is split into its
//! parts after the regex ([`split_request`]). Their fields: `ip`, `ident`, `user`, `timestamp`
//! (RFC 3339 UTC, seconds), `method`, `path`, `protocol`, `status` (int), `bytes` (int), and for
//! `combined` also `referrer` and `user_agent`. `-` means "no value" (the field is absent). A
//! request line that is not `METHOD PATH [PROTOCOL]` (a scanner's junk, a truncated request)
//! is kept whole as `request`. Inside the quotes a backslash escapes the next character (as
//! Apache writes `\"` and `\\`), so a lone backslash before the closing quote does not close it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::spec::{DEFAULT_TIME_FIELD, PipelineSpec, TimeDeclaration};
use crate::timestamp::{Precision, TimeFormat, TimeSpec, Zone};
use crate::{Extractor, FieldType, FieldValue, Pipeline, PipelineError, TimeField};

/// Names of the built-in pipelines, for help and errors.
pub const BUILTIN_NAMES: &[&str] = &["combined", "nginx", "apache", "common", "json", "text"];

pub(crate) const QUOTED: &str = r#"(?:[^"\\]|\\.)*"#;

/// The access-log line up to its size. The request is one quoted group, split afterwards
/// ([`split_request`]): with alternatives for a split and a whole request inside the quotes, the
/// regex is not one-pass and the regex crate decides every line with a slower engine (a quarter
/// of a structured ingest's time; 2M lines 4.6–5.0 → 4.0–4.4 s with the split moved out).
fn common_pattern() -> String {
    format!(
        r#"(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<timestamp>[^\]]+)\] "(?P<request>{QUOTED})" (?P<status>\d{{3}}|-) (?P<bytes>\d+|-)"#
    )
}

pub(crate) fn access_log(combined: bool) -> PipelineSpec {
    let mut regex = common_pattern();
    if combined {
        regex.push_str(&format!(
            r#" "(?P<referrer>{QUOTED})" "(?P<user_agent>{QUOTED})""#
        ));
    }
    PipelineSpec {
        regex: Some(regex),
        time: Some(TimeDeclaration {
            field: Some(DEFAULT_TIME_FIELD.to_owned()),
            format: "clf".to_owned(),
            zone: None,
            precision: Some("s".to_owned()),
        }),
        types: BTreeMap::from([
            ("status".to_owned(), FieldType::Int),
            ("bytes".to_owned(), FieldType::Int),
        ]),
        null_values: vec!["-".to_owned()],
        ..PipelineSpec::default()
    }
}

/// `METHOD PATH [PROTOCOL]` of a request line, as the regex alternative
/// `(?P<method>[A-Z]+) (?P<path>[^ "]+)(?: (?P<protocol>HTTP/[0-9.]+))?` reads it; None for any
/// other request (kept whole).
pub(crate) fn split_request(request: &str) -> Option<(&str, &str, Option<&str>)> {
    let (method, rest) = request.split_once(' ')?;
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let (path, protocol) = match rest.split_once(' ') {
        Some((path, protocol)) => (path, Some(protocol)),
        None => (rest, None),
    };
    if path.is_empty() || path.contains('"') {
        return None;
    }
    if let Some(protocol) = protocol {
        let version = protocol.strip_prefix("HTTP/")?;
        if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return None;
        }
    }
    Some((method, path, protocol))
}

/// Replaces a `request` field that splits ([`split_request`]) by its `method`, `path` and
/// `protocol` fields.
pub(crate) fn split_request_field<'a>(fields: &mut crate::Fields<'a>) {
    let Some(index) = fields.iter().position(|(name, _)| name == "request") else {
        return;
    };
    let FieldValue::Text(request) = &fields[index].1 else {
        return;
    };
    // A regex's group is a slice of the line, and so are its parts.
    let split = match request.clone() {
        Cow::Borrowed(request) => request_fields(request),
        Cow::Owned(request) => request_fields(&request).map(|split| {
            split
                .into_iter()
                .map(|(name, value)| (Cow::Owned(name.into_owned()), value.into_owned()))
                .collect()
        }),
    };
    if let Some(split) = split {
        fields.splice(index..=index, split);
    }
}

/// The `method`, `path` and `protocol` fields of a request that splits.
fn request_fields(request: &str) -> Option<crate::Fields<'_>> {
    let (method, path, protocol) = split_request(request)?;
    let text = |part| FieldValue::Text(Cow::Borrowed(part));
    let mut split = vec![
        (Cow::Borrowed("method"), text(method)),
        (Cow::Borrowed("path"), text(path)),
    ];
    if let Some(protocol) = protocol {
        split.push((Cow::Borrowed("protocol"), text(protocol)));
    }
    Some(split)
}

fn split_requests(mut pipeline: Pipeline) -> Arc<Pipeline> {
    pipeline.split_request = true;
    Arc::new(pipeline)
}

/// The built-in pipeline `name`, or None.
pub(crate) fn builtin(name: &str) -> Option<Result<Arc<Pipeline>, PipelineError>> {
    static COMBINED: LazyLock<Result<Arc<Pipeline>, PipelineError>> =
        LazyLock::new(|| access_log(true).compile("combined").map(split_requests));
    static COMMON: LazyLock<Result<Arc<Pipeline>, PipelineError>> =
        LazyLock::new(|| access_log(false).compile("common").map(split_requests));
    static JSON: LazyLock<Arc<Pipeline>> = LazyLock::new(|| {
        Arc::new(Pipeline::new(
            "json",
            Extractor::Json,
            None,
            BTreeMap::new(),
            BTreeMap::new(),
            Default::default(),
            Vec::new(),
            false,
        ))
    });
    static TEXT: LazyLock<Arc<Pipeline>> = LazyLock::new(|| {
        Arc::new(Pipeline::new(
            "text",
            Extractor::Text,
            Some(TimeField {
                field: DEFAULT_TIME_FIELD.to_owned(),
                spec: TimeSpec {
                    format: TimeFormat::Iso8601,
                    zone: Zone::utc(),
                    precision: Precision::Millis,
                },
            }),
            BTreeMap::new(),
            BTreeMap::new(),
            Default::default(),
            Vec::new(),
            true,
        ))
    });
    match name {
        "combined" | "nginx" | "apache" => Some(COMBINED.clone()),
        "common" => Some(COMMON.clone()),
        "json" => Some(Ok(JSON.clone())),
        "text" => Some(Ok(TEXT.clone())),
        _ => None,
    }
}
