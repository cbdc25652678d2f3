//! PostgreSQL's `jsonb` functions that change a document, for `UPDATE t SET data = …`:
//! `jsonb_set(target, path, new [, create_if_missing])` and the `||` operator on documents
//! (`jsonb_concat`, planned by `crate::planner` when the left side is a document or a `->`
//! path of one).
//!
//! Semantics follow PostgreSQL 15 ("JSON Functions and Operators"): `jsonb_set` replaces the
//! item at the path (a text array literal such as `'{a,b,0}'`: keys in objects, indexes in
//! arrays, negative from the end); a missing last step is added when `create_if_missing` (the
//! default), a missing earlier step leaves the target unchanged, and a scalar target is an
//! error. `a || b` merges two objects (the right side wins, not recursively), concatenates two
//! arrays, and otherwise wraps the non-array sides into arrays first. Both are strict: a NULL
//! argument gives NULL. Numbers keep their exact text (serde_json's arbitrary precision);
//! objects come back with their keys sorted.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;
use strata_json::reconstruct::parse_stored;

use crate::udf::json_field;

/// `jsonb_concat(a, b)`: PostgreSQL's `jsonb || jsonb`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonbConcat {
    signature: Signature,
}

impl JsonbConcat {
    pub const NAME: &'static str = "jsonb_concat";

    pub fn new() -> Self {
        JsonbConcat {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl Default for JsonbConcat {
    fn default() -> Self {
        Self::new()
    }
}

/// `jsonb_set(target, path, new [, create_if_missing])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonbSet {
    signature: Signature,
}

impl JsonbSet {
    pub fn new() -> Self {
        JsonbSet {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl Default for JsonbSet {
    fn default() -> Self {
        Self::new()
    }
}

fn texts(arg: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    Ok(cast(&arg.to_array(rows)?, &DataType::Utf8)?)
}

fn parse(text: &str, what: &str) -> Result<Value> {
    match parse_stored(text, what) {
        Ok(value) => Ok(value),
        Err(e) => exec_err!("invalid input syntax for type json: {e}"),
    }
}

fn render(value: &Value) -> Result<String> {
    match serde_json::to_string(value) {
        Ok(text) => Ok(text),
        Err(e) => exec_err!("cannot write a JSON value: {e}"),
    }
}

impl ScalarUDFImpl for JsonbConcat {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(json_field(self.name())))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let left = texts(&args.args[0], rows)?;
        let right = texts(&args.args[1], rows)?;
        let (left, right) = (left.as_string::<i32>(), right.as_string::<i32>());
        let mut out = StringBuilder::new();
        for row in 0..rows {
            if left.is_null(row) || right.is_null(row) {
                out.append_null();
                continue;
            }
            let merged = concat(
                parse(left.value(row), "jsonb ||")?,
                parse(right.value(row), "jsonb ||")?,
            );
            out.append_value(render(&merged)?);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// PostgreSQL's `jsonb || jsonb`.
pub fn concat(left: Value, right: Value) -> Value {
    match (left, right) {
        (Value::Object(mut a), Value::Object(b)) => {
            a.extend(b);
            Value::Object(a)
        }
        (Value::Array(mut a), Value::Array(b)) => {
            a.extend(b);
            Value::Array(a)
        }
        (Value::Array(mut a), b) => {
            a.push(b);
            Value::Array(a)
        }
        (a, Value::Array(b)) => {
            let mut out = vec![a];
            out.extend(b);
            Value::Array(out)
        }
        (a, b) => Value::Array(vec![a, b]),
    }
}

impl ScalarUDFImpl for JsonbSet {
    fn name(&self) -> &str {
        "jsonb_set"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !(3..=4).contains(&arg_types.len()) {
            return datafusion::common::plan_err!(
                "jsonb_set(target, path, new [, create_if_missing]) takes 3 or 4 arguments"
            );
        }
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(json_field(self.name())))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let target = texts(&args.args[0], rows)?;
        let paths = texts(&args.args[1], rows)?;
        let new = texts(&args.args[2], rows)?;
        let create = match args.args.get(3) {
            Some(arg) => Some(cast(&arg.to_array(rows)?, &DataType::Boolean)?),
            None => None,
        };
        let (target, paths, new) = (
            target.as_string::<i32>(),
            paths.as_string::<i32>(),
            new.as_string::<i32>(),
        );
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let create_missing = match &create {
                Some(flags) if flags.is_null(row) => None,
                Some(flags) => Some(flags.as_boolean().value(row)),
                None => Some(true),
            };
            let Some(create_missing) = create_missing else {
                out.append_null();
                continue;
            };
            if target.is_null(row) || paths.is_null(row) || new.is_null(row) {
                out.append_null();
                continue;
            }
            let path = parse_text_array(paths.value(row))?;
            let mut document = parse(target.value(row), "jsonb_set")?;
            set_path(
                &mut document,
                &path,
                parse(new.value(row), "jsonb_set")?,
                create_missing,
            )?;
            out.append_value(render(&document)?);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// A PostgreSQL text array literal (`{a,b,"c d"}`) as its elements.
pub fn parse_text_array(text: &str) -> Result<Vec<String>> {
    let trimmed = text.trim();
    let Some(inner) = trimmed
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    else {
        return exec_err!("malformed array literal: {text:?} (a path is written '{{a,b,0}}')");
    };
    let mut elements = Vec::new();
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        let mut element = String::new();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => element.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => element.push(c),
                    None => return exec_err!("malformed array literal: {text:?}"),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
            match chars.next() {
                None | Some(',') => {}
                Some(_) => return exec_err!("malformed array literal: {text:?}"),
            }
        } else {
            for c in chars.by_ref() {
                if c == ',' {
                    break;
                }
                element.push(c);
            }
            element = element.trim().to_owned();
        }
        elements.push(element);
    }
    Ok(elements)
}

/// PostgreSQL's `jsonb_set` on `document` in place.
pub fn set_path(
    document: &mut Value,
    path: &[String],
    new: Value,
    create_missing: bool,
) -> Result<()> {
    if !matches!(document, Value::Object(_) | Value::Array(_)) {
        return exec_err!("cannot set path in scalar");
    }
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut at = document;
    for step in parents {
        let next = match at {
            Value::Object(map) => map.get_mut(step),
            Value::Array(items) => match array_index(step, items.len())? {
                Some(i) => items.get_mut(i),
                None => None,
            },
            _ => None,
        };
        match next {
            Some(value) => at = value,
            None => return Ok(()),
        }
    }
    match at {
        Value::Object(map) if create_missing || map.contains_key(last) => {
            map.insert(last.clone(), new);
        }
        Value::Array(items) => {
            let len = items.len();
            match array_index(last, len)? {
                Some(i) => items[i] = new,
                None if create_missing => {
                    let negative = last.trim().starts_with('-');
                    if negative {
                        items.insert(0, new);
                    } else {
                        items.push(new);
                    }
                }
                None => {}
            }
        }
        _ => {}
    }
    Ok(())
}

/// The element `step` names in an array of `len` (None: out of range).
fn array_index(step: &str, len: usize) -> Result<Option<usize>> {
    let Ok(index) = step.trim().parse::<i64>() else {
        return exec_err!(
            "path element {step:?} is not an integer, but the value there is an array"
        );
    };
    let index = if index < 0 { len as i64 + index } else { index };
    Ok(usize::try_from(index).ok().filter(|&i| i < len))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn set(doc: Value, path: &str, new: Value, create: bool) -> Value {
        let mut doc = doc;
        set_path(&mut doc, &parse_text_array(path).unwrap(), new, create).unwrap();
        doc
    }

    #[test]
    fn jsonb_set_as_postgresql_does() {
        let doc = json!({"a": {"b": 1}, "arr": [1, 2, 3]});
        assert_eq!(
            set(doc.clone(), "{a,b}", json!(2), true),
            json!({"a": {"b": 2}, "arr": [1, 2, 3]})
        );
        assert_eq!(
            set(doc.clone(), "{a,c}", json!("x"), true)["a"],
            json!({"b": 1, "c": "x"})
        );
        assert_eq!(set(doc.clone(), "{a,c}", json!("x"), false), doc);
        assert_eq!(
            set(doc.clone(), "{x,y}", json!(1), true),
            doc,
            "missing parent"
        );
        assert_eq!(
            set(doc.clone(), "{arr,-1}", json!(9), true)["arr"],
            json!([1, 2, 9])
        );
        assert_eq!(
            set(doc.clone(), "{arr,10}", json!(9), true)["arr"],
            json!([1, 2, 3, 9])
        );
        assert_eq!(
            set(doc.clone(), "{arr,-10}", json!(0), true)["arr"],
            json!([0, 1, 2, 3])
        );
        assert!(set_path(&mut json!(5), &["a".into()], json!(1), true).is_err());
        assert_eq!(
            parse_text_array(r#"{a, "b c" ,"d\"e"}"#).unwrap(),
            vec!["a", "b c", "d\"e"]
        );
        assert!(parse_text_array("a,b").is_err());
    }

    #[test]
    fn concat_as_postgresql_does() {
        assert_eq!(
            concat(json!({"a": 1, "b": 2}), json!({"b": 3, "c": {"d": 4}})),
            json!({"a": 1, "b": 3, "c": {"d": 4}})
        );
        assert_eq!(concat(json!([1]), json!([2, 3])), json!([1, 2, 3]));
        assert_eq!(concat(json!({"a": 1}), json!(5)), json!([{"a": 1}, 5]));
        assert_eq!(concat(json!(1), json!([2])), json!([1, 2]));
    }
}

/// `to_jsonb(value)`: PostgreSQL's conversion of a SQL value to a JSON value — a number to a
/// JSON number, text to a JSON string, a boolean to `true`/`false`; NULL stays NULL (as
/// PostgreSQL's strict function does). Text is always a string: a document is already JSON.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToJsonb {
    signature: Signature,
}

impl ToJsonb {
    pub fn new() -> Self {
        ToJsonb {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl Default for ToJsonb {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for ToJsonb {
    fn name(&self) -> &str {
        "to_jsonb"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(json_field(self.name())))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let values = args.args[0].to_array(rows)?;
        let quote = matches!(
            values.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        if !(quote
            || values.data_type().is_numeric()
            || matches!(values.data_type(), DataType::Boolean | DataType::Null))
        {
            return exec_err!(
                "to_jsonb of a {} value is not supported",
                values.data_type()
            );
        }
        let texts = cast(&values, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let mut out = StringBuilder::new();
        for row in 0..rows {
            if texts.is_null(row) {
                out.append_null();
            } else if quote {
                out.append_value(render(&Value::String(texts.value(row).to_owned()))?);
            } else {
                out.append_value(texts.value(row));
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// PostgreSQL's `json` and `jsonb` types in casts (`'…'::jsonb`, `CAST(x AS JSON)`): JSON text,
/// marked as JSON for output. The cast does not check or normalise the text (PostgreSQL's does);
/// functions that take JSON (`jsonb_set`, `||`) check it when they read it. DataFusion keeps one
/// type planner per session, so other types are handed to the one this one wraps (the
/// PostgreSQL catalog's, in the server).
#[derive(Debug, Default)]
pub struct JsonTypePlanner {
    inner: Option<Arc<dyn datafusion::logical_expr::planner::TypePlanner>>,
}

impl JsonTypePlanner {
    pub fn wrapping(
        inner: Option<Arc<dyn datafusion::logical_expr::planner::TypePlanner>>,
    ) -> Self {
        JsonTypePlanner { inner }
    }
}

impl datafusion::logical_expr::planner::TypePlanner for JsonTypePlanner {
    fn plan_type_field(
        &self,
        sql_type: &datafusion::sql::sqlparser::ast::DataType,
    ) -> Result<Option<FieldRef>> {
        use datafusion::sql::sqlparser::ast::DataType as SqlType;
        match (sql_type, &self.inner) {
            (SqlType::JSON | SqlType::JSONB, _) => Ok(Some(Arc::new(json_field("")))),
            (_, Some(inner)) => inner.plan_type_field(sql_type),
            (_, None) => Ok(None),
        }
    }
}
