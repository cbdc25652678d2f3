//! The JSON type of a stored leaf value, and how a value is classified into one.
//!
//! A leaf is a scalar, an array, or an empty object (non-empty objects are not leaves: their
//! keys are). Numbers go to [`Kind::Int`] only when their text is exactly the decimal text of an
//! `i64`, to [`Kind::Float`] only when their text is exactly the shortest round-trip text of an
//! `f64`; every other number (`1.10`, `1e3`, `18446744073709551616`, `-0`) is
//! [`Kind::Number`] and keeps its text. That is what makes "what goes in comes back" hold.

use std::fmt;
use std::str::FromStr;

use serde_json::{Number, Value};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// JSON string, stored as Arrow `Utf8`.
    String,
    /// Integer whose text is the canonical `i64` text, stored as `Int64`.
    Int,
    /// Number whose text is the shortest round-trip `f64` text, stored as `Float64`.
    Float,
    /// Any other number, stored as its exact JSON text (`Utf8`).
    Number,
    /// `true` / `false`, stored as `Boolean`.
    Bool,
    /// JSON `null`. Never a column: nulls live in the remainder.
    Null,
    /// Array or empty object, stored as compact JSON text (`Utf8`).
    Json,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::String,
        Kind::Int,
        Kind::Float,
        Kind::Number,
        Kind::Bool,
        Kind::Null,
        Kind::Json,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Number => "number",
            Kind::Bool => "bool",
            Kind::Null => "null",
            Kind::Json => "json",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Kinds whose values are JSON scalars (SQL can hold them in a typed column).
    pub fn is_scalar(self) -> bool {
        !matches!(self, Kind::Json)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown kind {s:?}"))
    }
}

/// A classified leaf value, borrowing from the parsed document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leaf<'a> {
    String(&'a str),
    Int(i64),
    Float(f64),
    Number(&'a str),
    Bool(bool),
    Null,
    /// Array or empty object, as compact JSON text (keys of objects sorted, last duplicate wins).
    Json(&'a str),
}

impl Leaf<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            Leaf::String(_) => Kind::String,
            Leaf::Int(_) => Kind::Int,
            Leaf::Float(_) => Kind::Float,
            Leaf::Number(_) => Kind::Number,
            Leaf::Bool(_) => Kind::Bool,
            Leaf::Null => Kind::Null,
            Leaf::Json(_) => Kind::Json,
        }
    }

    /// Appends the value's exact JSON text.
    pub(crate) fn push_json_text(&self, out: &mut String) {
        let stored = match *self {
            Leaf::String(text) | Leaf::Number(text) | Leaf::Json(text) => Stored::Text(text),
            Leaf::Int(i) => Stored::Int(i),
            Leaf::Float(f) => Stored::Float(f),
            Leaf::Bool(b) => Stored::Bool(b),
            Leaf::Null => Stored::Null,
        };
        push_json_text(self.kind(), stored, out);
    }
}

/// The kind a value that is not a non-empty object is stored as.
pub fn value_kind(value: &Value) -> Kind {
    match value {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::String(_) => Kind::String,
        Value::Number(n) => classify_number(n.as_str()).kind(),
        Value::Array(_) | Value::Object(_) => Kind::Json,
    }
}

/// Classifies the exact text of a JSON number as [`Leaf::Int`], [`Leaf::Float`] or
/// [`Leaf::Number`].
pub fn classify_number(text: &str) -> Leaf<'_> {
    if let Ok(i) = text.parse::<i64>() {
        if canonical_int_text(i) == text {
            return Leaf::Int(i);
        }
    } else if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
        && canonical_float_text(f) == text
    {
        return Leaf::Float(f);
    }
    Leaf::Number(text)
}

/// A value as a column or the shredder's buffers hold it: the text of strings, numbers and JSON.
pub(crate) enum Stored<'a> {
    Text(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
}

/// Appends the exact JSON text of a stored value of `kind`: a string quoted, number and JSON
/// texts as stored, integers and floats in their canonical text. The one rule by which typed
/// values become remainder entries, at shredding and at merging alike.
pub(crate) fn push_json_text(kind: Kind, value: Stored<'_>, out: &mut String) {
    match value {
        Stored::Text(text) if kind == Kind::String => {
            out.push_str(&serde_json::to_string(text).unwrap_or_default())
        }
        Stored::Text(text) => out.push_str(text),
        Stored::Int(i) => out.push_str(&canonical_int_text(i)),
        Stored::Float(f) => out.push_str(&canonical_float_text(f)),
        Stored::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Stored::Null => out.push_str("null"),
    }
}

/// The JSON text an `Int` column value is written back as.
pub fn canonical_int_text(i: i64) -> String {
    i.to_string()
}

/// The JSON text a `Float` column value is written back as (shortest round trip, via ryu as
/// serde_json formats it). Only numbers already written exactly like this are stored as floats.
pub fn canonical_float_text(f: f64) -> String {
    match Number::from_f64(f) {
        Some(n) => n.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf_kind(json: &str) -> Kind {
        let v: Value = serde_json::from_str(json).unwrap();
        value_kind(&v)
    }

    #[test]
    fn numbers_are_classified_by_exact_text() {
        assert_eq!(leaf_kind("7"), Kind::Int);
        assert_eq!(leaf_kind("-9223372036854775808"), Kind::Int);
        assert_eq!(leaf_kind("9223372036854775808"), Kind::Number);
        assert_eq!(leaf_kind("18446744073709551616"), Kind::Number);
        assert_eq!(leaf_kind("0.1"), Kind::Float);
        assert_eq!(leaf_kind("1.5"), Kind::Float);
        assert_eq!(leaf_kind("1.10"), Kind::Number);
        assert_eq!(leaf_kind("1e3"), Kind::Number);
        assert_eq!(leaf_kind("1e400"), Kind::Number);
        assert_eq!(leaf_kind("-0"), Kind::Number);
        assert_eq!(leaf_kind("\"007\""), Kind::String);
        assert_eq!(leaf_kind("[]"), Kind::Json);
        assert_eq!(leaf_kind("{}"), Kind::Json);
        assert_eq!(leaf_kind("null"), Kind::Null);
    }
}
