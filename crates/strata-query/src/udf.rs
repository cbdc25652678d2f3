//! SQL functions Strata adds to DataFusion.
//!
//! - `strata_path(data, path, mode)`: the value at an encoded JSON path of a document given as
//!   JSON text, in one of the [`PathMode`]s. The planner emits it for `data.a.b`, `data->'a'`
//!   and `data->>'a'`; the `ReadPathsFromColumns` analyzer rule then replaces it with a read of
//!   the shredded column, so evaluating it on whole documents is only the fallback for plans
//!   the rule cannot see through (e.g. `data` passed through a CTE).
//! - `json_get(json, key_or_index)` / `json_get_text(json, key_or_index)`: `->` / `->>` on JSON
//!   text, used when the left side is not a table's document (arrays, sub-results).
//! - `date_diff(unit, start, end)`: number of `unit` boundaries crossed from `start` to `end`.
//! - `strata_compare_number(number_text, op, literal)`: exact comparison of JSON numbers with a
//!   SQL number (emitted by the `TypeComparisonsByLiteral` rule).
//! - `matches(text, query)`: full-text search (`crate::text_search`).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
    StringViewBuilder,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use serde_json::Value;
use strata_json::JsonPath;
use strata_json::reconstruct::parse_stored;

use crate::JSON_FIELD_METADATA;
use crate::paths::PathMode;

/// All functions to register in a session.
pub fn all_functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(StrataPath::new()),
        ScalarUDF::new_from_impl(JsonGet::new(false)),
        ScalarUDF::new_from_impl(JsonGet::new(true)),
        ScalarUDF::new_from_impl(DateDiff::new()),
        ScalarUDF::new_from_impl(CompareNumber::new()),
        ScalarUDF::new_from_impl(crate::jsonb::JsonbConcat::new()),
        ScalarUDF::new_from_impl(crate::jsonb::JsonbSet::new()),
        ScalarUDF::new_from_impl(crate::jsonb::ToJsonb::new()),
        ScalarUDF::new_from_impl(crate::text_search::Matches::new()),
        // Registered over DataFusion's own `date_part` (and its alias), which it wraps.
        ScalarUDF::new_from_impl(crate::date_part::FastDatePart::new()),
    ]
}

/// A field that carries JSON text, marked for output formatting.
pub fn json_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true).with_metadata(
        [(JSON_FIELD_METADATA.to_owned(), "true".to_owned())]
            .into_iter()
            .collect(),
    )
}

fn literal_string<'a>(args: &'a ReturnFieldArgs, index: usize) -> Option<&'a str> {
    match args.scalar_arguments.get(index).copied().flatten() {
        Some(ScalarValue::Utf8(Some(s)))
        | Some(ScalarValue::Utf8View(Some(s)))
        | Some(ScalarValue::LargeUtf8(Some(s))) => Some(s.as_str()),
        _ => None,
    }
}

pub(crate) fn scalar_string(value: &ColumnarValue) -> Option<String> {
    match value {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s)))
        | ColumnarValue::Scalar(ScalarValue::Utf8View(Some(s)))
        | ColumnarValue::Scalar(ScalarValue::LargeUtf8(Some(s))) => Some(s.clone()),
        _ => None,
    }
}

/// Converts a JSON value to the requested mode's SQL value; None means SQL NULL.
pub enum ModeValue {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

pub fn value_in_mode(value: Option<&Value>, mode: PathMode) -> ModeValue {
    let Some(value) = value else {
        return ModeValue::Null;
    };
    match (mode, value) {
        (PathMode::Json, v) => ModeValue::Text(v.to_string()),
        (PathMode::Text | PathMode::Mixed, Value::Null) => ModeValue::Null,
        (PathMode::Text | PathMode::Mixed, Value::String(s)) => ModeValue::Text(s.clone()),
        (PathMode::Text | PathMode::Mixed, v) => ModeValue::Text(v.to_string()),
        // With serde_json's arbitrary precision, a number's text is the document's own.
        (PathMode::Number, Value::Number(n)) => ModeValue::Text(n.to_string()),
        (PathMode::String, Value::String(s)) => ModeValue::Text(s.clone()),
        (PathMode::Int, Value::Number(n)) => n.as_i64().map_or(ModeValue::Null, ModeValue::Int),
        (PathMode::Float, Value::Number(n)) => n
            .as_str()
            .parse::<f64>()
            .map_or(ModeValue::Null, ModeValue::Float),
        (PathMode::Bool, Value::Bool(b)) => ModeValue::Bool(*b),
        _ => ModeValue::Null,
    }
}

/// Builds an array of `mode`'s type from per-row values.
pub fn build_mode_array(
    mode: PathMode,
    values: impl ExactSizeIterator<Item = ModeValue>,
) -> ArrayRef {
    let rows = values.len();
    match mode {
        PathMode::Int => {
            let mut b = Int64Builder::with_capacity(rows);
            for v in values {
                b.append_option(match v {
                    ModeValue::Int(i) => Some(i),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        PathMode::Float => {
            let mut b = Float64Builder::with_capacity(rows);
            for v in values {
                b.append_option(match v {
                    ModeValue::Float(f) => Some(f),
                    ModeValue::Int(i) => Some(i as f64),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        PathMode::Bool => {
            let mut b = BooleanBuilder::with_capacity(rows);
            for v in values {
                b.append_option(match v {
                    ModeValue::Bool(x) => Some(x),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        PathMode::String | PathMode::Text | PathMode::Mixed | PathMode::Number => {
            let mut b = StringViewBuilder::with_capacity(rows);
            for v in values {
                match v {
                    ModeValue::Text(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        PathMode::Json => {
            let mut b = StringBuilder::with_capacity(rows, rows * 16);
            for v in values {
                match v {
                    ModeValue::Text(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
    }
}

/// How a path reads in SQL, for column names: dotted for typed access, arrows for JSON and text.
fn path_display_name(base: &str, path: &JsonPath, mode: PathMode) -> String {
    let segments = path.segments();
    if segments.is_empty() {
        return base.to_owned();
    }
    let mut name = base.to_owned();
    match mode {
        PathMode::Json | PathMode::Text => {
            for (i, segment) in segments.iter().enumerate() {
                let arrow = if mode == PathMode::Text && i + 1 == segments.len() {
                    "->>"
                } else {
                    "->"
                };
                name.push_str(arrow);
                name.push('\'');
                name.push_str(&segment.replace('\'', "''"));
                name.push('\'');
            }
        }
        PathMode::String
        | PathMode::Int
        | PathMode::Float
        | PathMode::Bool
        | PathMode::Mixed
        | PathMode::Number => {
            for segment in segments {
                name.push('.');
                let plain = segment
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_');
                if plain {
                    name.push_str(segment);
                } else {
                    name.push('"');
                    name.push_str(&segment.replace('"', "\"\""));
                    name.push('"');
                }
            }
        }
    }
    name
}

fn value_at<'a>(mut value: &'a Value, segments: &[String]) -> Option<&'a Value> {
    for segment in segments {
        value = value.as_object()?.get(segment)?;
    }
    Some(value)
}

fn json_strings(array: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(array, &DataType::Utf8)?)
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StrataPath {
    signature: Signature,
}

impl StrataPath {
    pub const NAME: &'static str = "strata_path";

    pub fn new() -> Self {
        StrataPath {
            signature: Signature::any(3, Volatility::Immutable),
        }
    }
}

impl Default for StrataPath {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for StrataPath {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        plan_err!("strata_path needs literal path and mode arguments")
    }
    /// Output columns are named as users write paths, not after this internal function:
    /// `data.a.b` for typed access, `data->'a'->'b'` for JSON, `data->'a'->>'b'` for text.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let literal = |i: usize| match args.get(i) {
            Some(Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _)) => {
                Some(s.as_str())
            }
            _ => None,
        };
        let (Some(data), Some(path), Some(mode)) = (
            args.first(),
            literal(1),
            literal(2).and_then(PathMode::parse),
        ) else {
            return plan_err!("strata_path(data, path, mode) needs literal path and mode");
        };
        let base = match data {
            Expr::Column(column) => column.name.clone(),
            other => other.schema_name().to_string(),
        };
        Ok(path_display_name(&base, &JsonPath::decode(path), mode))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let Some(mode) = literal_string(&args, 2).and_then(PathMode::parse) else {
            return plan_err!("strata_path(data, path, mode): mode must be a literal mode name");
        };
        let field = if mode.is_json() {
            json_field(Self::NAME)
        } else {
            Field::new(Self::NAME, mode.data_type(), true)
        };
        Ok(Arc::new(field))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (Some(path), Some(mode)) = (
            scalar_string(&args.args[1]),
            scalar_string(&args.args[2]).and_then(|m| PathMode::parse(&m)),
        ) else {
            return exec_err!("strata_path(data, path, mode) needs literal path and mode");
        };
        let segments = JsonPath::decode(&path).0;
        let documents = json_strings(&args.args[0].to_array(args.number_rows)?)?;
        let documents = documents.as_string::<i32>();
        let mut values = Vec::with_capacity(documents.len());
        for row in 0..documents.len() {
            if documents.is_null(row) {
                values.push(ModeValue::Null);
                continue;
            }
            let doc = parse_stored(documents.value(row), "data")
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
            let found = if path.is_empty() {
                Some(&doc)
            } else {
                value_at(&doc, &segments)
            };
            values.push(value_in_mode(found, mode));
        }
        Ok(ColumnarValue::Array(build_mode_array(
            mode,
            values.into_iter(),
        )))
    }
}

/// `json_get` (`->`) and `json_get_text` (`->>`) over JSON text.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonGet {
    signature: Signature,
    as_text: bool,
}

impl JsonGet {
    pub fn new(as_text: bool) -> Self {
        JsonGet {
            signature: Signature::any(2, Volatility::Immutable),
            as_text,
        }
    }
}

impl ScalarUDFImpl for JsonGet {
    fn name(&self) -> &str {
        if self.as_text {
            "json_get_text"
        } else {
            "json_get"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(if self.as_text {
            PathMode::Text.data_type()
        } else {
            PathMode::Json.data_type()
        })
    }
    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(if self.as_text {
            Field::new(self.name(), PathMode::Text.data_type(), true)
        } else {
            json_field(self.name())
        }))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let json = json_strings(&args.args[0].to_array(rows)?)?;
        let json = json.as_string::<i32>();
        let keys = args.args[1].to_array(rows)?;
        let index_keys = match keys.data_type() {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Some(cast(&keys, &DataType::Int64)?),
            _ => None,
        };
        let string_keys = json_strings(&keys)?;
        let string_keys = string_keys.as_string::<i32>();
        let mode = if self.as_text {
            PathMode::Text
        } else {
            PathMode::Json
        };
        let mut values = Vec::with_capacity(rows);
        for row in 0..rows {
            if json.is_null(row) || keys.is_null(row) {
                values.push(ModeValue::Null);
                continue;
            }
            let Ok(doc) = parse_stored(json.value(row), "json") else {
                values.push(ModeValue::Null);
                continue;
            };
            let found = match &index_keys {
                Some(indexes) => {
                    let i = indexes
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .value(row);
                    doc.as_array().and_then(|a| {
                        let i = if i < 0 { a.len() as i64 + i } else { i };
                        usize::try_from(i).ok().and_then(|i| a.get(i))
                    })
                }
                None => doc.as_object().and_then(|o| o.get(string_keys.value(row))),
            };
            values.push(value_in_mode(found, mode));
        }
        Ok(ColumnarValue::Array(build_mode_array(
            mode,
            values.into_iter(),
        )))
    }
}

/// `date_diff(unit, start, end)`: unit boundaries crossed from start to end, as BIGINT.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DateDiff {
    signature: Signature,
}

impl DateDiff {
    pub fn new() -> Self {
        DateDiff {
            signature: Signature::any(3, Volatility::Immutable),
        }
    }
}

impl Default for DateDiff {
    fn default() -> Self {
        Self::new()
    }
}

fn unit_nanos(unit: &str) -> Option<i64> {
    Some(match unit.to_ascii_lowercase().trim_end_matches('s') {
        "nanosecond" | "n" => 1,
        "microsecond" | "u" | "us" => 1_000,
        "millisecond" | "m" | "ms" => 1_000_000,
        "second" | "sec" => 1_000_000_000,
        "minute" | "min" => 60_000_000_000,
        "hour" | "h" => 3_600_000_000_000,
        "day" | "d" => 86_400_000_000_000,
        "week" | "w" => 604_800_000_000_000,
        _ => return None,
    })
}

impl ScalarUDFImpl for DateDiff {
    fn name(&self) -> &str {
        "date_diff"
    }
    fn aliases(&self) -> &[String] {
        &[]
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(unit) = scalar_string(&args.args[0]) else {
            return exec_err!(
                "date_diff(unit, start, end): unit must be a literal such as 'millisecond'"
            );
        };
        let Some(nanos) = unit_nanos(&unit) else {
            return exec_err!(
                "date_diff: unknown unit {unit:?} (use nanosecond, microsecond, millisecond, second, minute, hour, day or week)"
            );
        };
        let rows = args.number_rows;
        let as_nanos = |value: &ColumnarValue| -> Result<ArrayRef> {
            let array = value.to_array(rows)?;
            let ts = cast(&array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            Ok(cast(&ts, &DataType::Int64)?)
        };
        let start = as_nanos(&args.args[1])?;
        let end = as_nanos(&args.args[2])?;
        let start = start.as_primitive::<arrow::datatypes::Int64Type>();
        let end = end.as_primitive::<arrow::datatypes::Int64Type>();
        let result: arrow::array::Int64Array = start
            .iter()
            .zip(end.iter())
            // Unit boundaries crossed, as DuckDB's and ClickHouse's date_diff count them.
            .map(|(s, e)| Some(e?.div_euclid(nanos) - s?.div_euclid(nanos)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(result)))
    }
}

/// `strata_compare_number(number_text, op, literal)`: `op` (`=`, `<>`, `<`, `<=`, `>`, `>=`)
/// between numbers written as decimal text, decided exactly (see [`crate::number`]). NULL
/// where the value is NULL or not a number. The `TypeComparisonsByLiteral` rule emits it for
/// comparisons of paths with numbers that a double could not decide.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CompareNumber {
    signature: Signature,
}

impl CompareNumber {
    pub const NAME: &'static str = "strata_compare_number";

    pub fn new() -> Self {
        CompareNumber {
            signature: Signature::any(3, Volatility::Immutable),
        }
    }
}

impl Default for CompareNumber {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for CompareNumber {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use std::cmp::Ordering;
        let (Some(op), Some(literal)) =
            (scalar_string(&args.args[1]), scalar_string(&args.args[2]))
        else {
            return exec_err!(
                "{}(value, op, literal) needs literal op and number",
                Self::NAME
            );
        };
        let Some(literal) = crate::number::ExactNumber::parse(&literal) else {
            return exec_err!("{}: {literal:?} is not a number", Self::NAME);
        };
        let holds: fn(Ordering) -> bool = match op.as_str() {
            "=" => Ordering::is_eq,
            "<>" => Ordering::is_ne,
            "<" => Ordering::is_lt,
            "<=" => Ordering::is_le,
            ">" => Ordering::is_gt,
            ">=" => Ordering::is_ge,
            other => return exec_err!("{}: unknown operator {other:?}", Self::NAME),
        };
        let values = cast(
            &args.args[0].to_array(args.number_rows)?,
            &DataType::Utf8View,
        )?;
        let values = values.as_string_view();
        let mut result = BooleanBuilder::with_capacity(values.len());
        for row in 0..values.len() {
            if values.is_null(row) {
                result.append_null();
            } else {
                result.append_option(literal.order_of(values.value(row)).map(holds));
            }
        }
        Ok(ColumnarValue::Array(Arc::new(result.finish())))
    }
}
