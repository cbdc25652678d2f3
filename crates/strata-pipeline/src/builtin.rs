//! The pipelines every Strata has, by name: access logs (`common`; `combined`, also called
//! `nginx` and `apache`), JSON lines (`json`) and full-text lines (`text`).
//!
//! The access-log pipelines are ordinary regex pipelines (what a user could write), so they
//! exercise the same code as user pipelines. Their fields: `ip`, `ident`, `user`, `timestamp`
//! (RFC 3339 UTC, seconds), `method`, `path`, `protocol`, `status` (int), `bytes` (int), and for
//! `combined` also `referrer` and `user_agent`. `-` means "no value" (the field is absent). A
//! request line that is not `METHOD PATH [PROTOCOL]` (a scanner's junk, a truncated request)
//! is kept whole as `request`.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::spec::{DEFAULT_TIME_FIELD, PipelineSpec, TimeDeclaration};
use crate::timestamp::{Precision, TimeFormat, TimeSpec, Zone};
use crate::{Extractor, FieldType, Pipeline, PipelineError, TimeField};

/// Names of the built-in pipelines, for help and errors.
pub const BUILTIN_NAMES: &[&str] = &["combined", "nginx", "apache", "common", "json", "text"];

const QUOTED: &str = r#"(?:[^"\\]|\\.)*"#;

fn common_pattern() -> String {
    format!(
        r#"(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<timestamp>[^\]]+)\] "(?:(?P<method>[A-Z]+) (?P<path>[^ "]+)(?: (?P<protocol>HTTP/[0-9.]+))?|(?P<request>{QUOTED}))" (?P<status>\d{{3}}|-) (?P<bytes>\d+|-)"#
    )
}

fn access_log(combined: bool) -> PipelineSpec {
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

/// The built-in pipeline `name`, or None.
pub(crate) fn builtin(name: &str) -> Option<Result<Arc<Pipeline>, PipelineError>> {
    static COMBINED: LazyLock<Result<Arc<Pipeline>, PipelineError>> =
        LazyLock::new(|| access_log(true).compile("combined").map(Arc::new));
    static COMMON: LazyLock<Result<Arc<Pipeline>, PipelineError>> =
        LazyLock::new(|| access_log(false).compile("common").map(Arc::new));
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
