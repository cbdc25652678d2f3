//! User pipelines as the config file declares them (`[pipelines.NAME]`), and their checks.
//!
//! ```toml
//! [pipelines.app]
//! dissect = "%{ts} %{+ts} %{level} %{message}"   # or regex = '…(?P<name>…)…', or json = true
//! append_separator = " "
//! time = { field = "ts", format = "%Y-%m-%d %H:%M:%S%.f", zone = "Europe/Berlin", precision = "ms" }
//! types = { status = "int", latency = "float", cached = "bool" }
//! rename = { ts = "timestamp" }
//! drop = ["ident"]
//! null_values = ["-"]
//! keep_message = true
//! ```
//!
//! Every key but the extractor is optional; unknown keys are errors (a misspelt setting must
//! not silently do nothing). A definition is checked when the file is read: a bad regex, time
//! format, zone or precision names the pipeline.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::PipelineError;
use crate::dissect::Dissect;
use crate::timestamp::{Precision, TimeFormat, TimeSpec, Zone};
use crate::{Extractor, FieldType, Pipeline, TimeField};

/// The name of the time field when a pipeline does not say.
pub const DEFAULT_TIME_FIELD: &str = "timestamp";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// A regular expression (Rust's `regex` syntax) whose named groups are the fields; it must
    /// match the whole line (it is anchored at both ends).
    pub regex: Option<String>,
    /// A dissect pattern (`crate::dissect`).
    pub dissect: Option<String>,
    /// What a dissect `%{+name}` puts between the parts it joins.
    #[serde(default)]
    pub append_separator: String,
    /// Lines are JSON objects: the conversions apply to their top-level fields.
    #[serde(default)]
    pub json: bool,
    pub time: Option<TimeDeclaration>,
    /// Field → `int`, `float`, `bool` or `string`: what its text becomes.
    #[serde(default)]
    pub types: BTreeMap<String, FieldType>,
    /// Field → its new name, applied after the conversions.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Fields not stored (names before renaming).
    #[serde(default)]
    pub drop: Vec<String>,
    /// Texts that mean "no value": a field holding one is absent from the document.
    #[serde(default)]
    pub null_values: Vec<String>,
    /// Also store the whole line as `message`.
    #[serde(default)]
    pub keep_message: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeDeclaration {
    /// The field holding the time (before renaming); default `timestamp`.
    pub field: Option<String>,
    /// `iso8601`, `epoch_s`, `epoch_ms`, `epoch_us`, `epoch_ns`, `clf` or a strftime pattern.
    pub format: String,
    /// The zone of times written without an offset; default UTC.
    pub zone: Option<String>,
    /// `s`, `ms`, `us` or `ns`; default: what the format carries.
    pub precision: Option<String>,
}

impl PipelineSpec {
    /// Checks the definition and builds the pipeline named `name`.
    pub fn compile(&self, name: &str) -> Result<Pipeline, PipelineError> {
        let invalid = |reason: String| PipelineError::Invalid {
            pipeline: name.to_owned(),
            reason,
        };
        let extractors = [self.regex.is_some(), self.dissect.is_some(), self.json]
            .iter()
            .filter(|set| **set)
            .count();
        if extractors != 1 {
            return Err(invalid(
                "give exactly one of regex = '…', dissect = '…' or json = true".to_owned(),
            ));
        }
        let extractor = if let Some(pattern) = &self.regex {
            let anchored = format!("^(?:{pattern})$");
            let regex = regex::Regex::new(&anchored)
                .map_err(|e| invalid(format!("the regex does not compile: {e}")))?;
            if regex.capture_names().flatten().next().is_none() {
                return Err(invalid(
                    "the regex has no named group ((?P<name>…)) to make a field of".to_owned(),
                ));
            }
            Extractor::Regex(regex)
        } else if let Some(pattern) = &self.dissect {
            Extractor::Dissect(Dissect::compile(pattern, &self.append_separator).map_err(invalid)?)
        } else {
            Extractor::Json
        };
        let time = match &self.time {
            Some(declared) => {
                let format = TimeFormat::parse_name(&declared.format);
                let zone = match &declared.zone {
                    Some(zone) => Zone::parse(zone).map_err(invalid)?,
                    None => Zone::utc(),
                };
                let precision = match &declared.precision {
                    Some(precision) => Precision::parse(precision).map_err(invalid)?,
                    None => format.natural_precision(),
                };
                Some(TimeField {
                    field: declared
                        .field
                        .clone()
                        .unwrap_or_else(|| DEFAULT_TIME_FIELD.to_owned()),
                    spec: TimeSpec {
                        format,
                        zone,
                        precision,
                    },
                })
            }
            None => None,
        };
        for (from, to) in &self.rename {
            if from.is_empty() || to.is_empty() {
                return Err(invalid(format!(
                    "rename '{from}' = '{to}': a name is empty"
                )));
            }
        }
        Ok(Pipeline::new(
            name,
            extractor,
            time,
            self.types.clone(),
            self.rename.clone(),
            self.drop.iter().cloned().collect(),
            self.null_values.clone(),
            self.keep_message,
        ))
    }
}
