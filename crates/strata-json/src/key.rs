//! A table's primary key: the JSON path that identifies a document, the JSON type its values
//! must have, and how one document's key value is found (ADR 0016).
//!
//! Invariants:
//! - a key value is a JSON string or an integer whose text is the canonical `i64` text
//!   ([`Kind::String`] / [`Kind::Int`]); a table's key has exactly one of the two types, so two
//!   documents have the same key exactly when their values at the path are equal (`"42"` and
//!   `42` can never meet in one table);
//! - a document whose value at the path is missing, `null`, of the other type, or not a scalar
//!   has no key, and [`document_key`] says which of these it is, for the reject line.

use std::fmt;
use std::str::FromStr;

use crate::document::{Document, Field};
use crate::kind::{Kind, Leaf};
use crate::path::JsonPath;

/// The JSON type of a table's key values.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    /// JSON strings (stored as a `Utf8` column).
    String,
    /// JSON integers in the `i64` range, written canonically (stored as an `Int64` column).
    Integer,
}

impl KeyType {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::String => "string",
            KeyType::Integer => "integer",
        }
    }

    /// The kind of the typed column that holds the key's values.
    pub fn kind(self) -> Kind {
        match self {
            KeyType::String => Kind::String,
            KeyType::Integer => Kind::Int,
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "string" | "text" => Ok(KeyType::String),
            "integer" | "int" | "bigint" => Ok(KeyType::Integer),
            other => Err(format!(
                "unknown key type {other:?} (the key type is string or integer)"
            )),
        }
    }
}

/// One document's key value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyValue {
    String(String),
    Integer(i64),
}

impl KeyValue {
    pub fn key_type(&self) -> KeyType {
        match self {
            KeyValue::String(_) => KeyType::String,
            KeyValue::Integer(_) => KeyType::Integer,
        }
    }

    /// The integer key whose text (as `->>` reads it) is `text`: only an integer's canonical
    /// decimal form names one (`'42'`, not `'042'` or `'+42'`).
    pub fn integer_from_text(text: &str) -> Option<KeyValue> {
        text.parse::<i64>()
            .ok()
            .filter(|i| i.to_string() == text)
            .map(KeyValue::Integer)
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        match self {
            KeyValue::String(s) => s.capacity(),
            KeyValue::Integer(_) => 0,
        }
    }
}

impl fmt::Display for KeyValue {
    /// The value as JSON text (`"abc"`, `42`), as users wrote it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::String(s) => {
                let quoted = serde_json::to_string(s).map_err(|_| fmt::Error)?;
                f.write_str(&quoted)
            }
            KeyValue::Integer(i) => write!(f, "{i}"),
        }
    }
}

/// Why a document has no key value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the key path {path} is missing")]
    Missing { path: String },
    #[error("the key path {path} is null")]
    Null { path: String },
    #[error("the key path {path} holds {found}, but the table's key is of type {expected}")]
    WrongType {
        path: String,
        found: String,
        expected: KeyType,
    },
}

/// The table's key: a path and the type of its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableKey {
    pub path: JsonPath,
    pub key_type: KeyType,
}

impl TableKey {
    /// The key value of `document`, or why it has none.
    pub fn of(&self, document: &Document) -> Result<KeyValue, KeyError> {
        document_key(document, self)
    }
}

/// Finds the value at `key.path` in `document` (one walk of its fields, stopping at the value).
pub fn document_key(document: &Document, key: &TableKey) -> Result<KeyValue, KeyError> {
    let segments = key.path.segments();
    let display = || key.path.encode();
    // `depth` objects along the key's path are open; `skip` counts objects opened off the path.
    let mut depth = 0usize;
    let mut skip = 0usize;
    for field in document.fields() {
        match field {
            Field::Open(name) => {
                if skip > 0 {
                    skip += 1;
                } else if depth + 1 < segments.len() && name == segments[depth] {
                    depth += 1;
                } else if depth < segments.len() && name == segments[depth] {
                    // The last segment names an object: not a scalar.
                    return Err(KeyError::WrongType {
                        path: display(),
                        found: "an object".into(),
                        expected: key.key_type,
                    });
                } else {
                    skip = 1;
                }
            }
            Field::Close => {
                if skip > 0 {
                    skip -= 1;
                } else {
                    // The object on the path closed without the key: keys are unique per
                    // object, so it is not further on.
                    break;
                }
            }
            Field::Leaf(name, leaf) => {
                if skip > 0 || depth + 1 != segments.len() || name != segments[depth] {
                    if skip == 0 && depth + 1 < segments.len() && name == segments[depth] {
                        // A scalar where the path goes on into an object.
                        return Err(KeyError::Missing { path: display() });
                    }
                    continue;
                }
                return match (leaf, key.key_type) {
                    (Leaf::String(s), KeyType::String) => Ok(KeyValue::String(s.to_owned())),
                    (Leaf::Int(i), KeyType::Integer) => Ok(KeyValue::Integer(i)),
                    (Leaf::Null, _) => Err(KeyError::Null { path: display() }),
                    (other, expected) => Err(KeyError::WrongType {
                        path: display(),
                        found: describe(&other),
                        expected,
                    }),
                };
            }
        }
    }
    Err(KeyError::Missing { path: display() })
}

fn describe(leaf: &Leaf<'_>) -> String {
    match leaf {
        Leaf::String(s) => format!("the string {}", preview(&format!("{s:?}"))),
        Leaf::Int(i) => format!("the integer {i}"),
        Leaf::Float(f) => format!("the number {f}"),
        Leaf::Number(text) => format!("the number {}", preview(text)),
        Leaf::Bool(b) => format!("the boolean {b}"),
        Leaf::Null => "null".into(),
        Leaf::Json(text) if text.starts_with('[') => "an array".into(),
        Leaf::Json(_) => "an empty object".into(),
    }
}

fn preview(text: &str) -> String {
    const MAX: usize = 60;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::parse_document;

    fn key(path: &str, key_type: KeyType) -> TableKey {
        TableKey {
            path: JsonPath::parse_dotted(path),
            key_type,
        }
    }

    fn of(doc: &str, path: &str, key_type: KeyType) -> Result<KeyValue, KeyError> {
        key(path, key_type).of(&parse_document(doc.as_bytes()).unwrap())
    }

    #[test]
    fn finds_the_value_at_the_path_and_nowhere_else() {
        let doc = r#"{"a":{"id":"inner","x":{"id":"deeper"}},"id":"top","b":{"c":{"id":7}}}"#;
        assert_eq!(
            of(doc, "id", KeyType::String),
            Ok(KeyValue::String("top".into()))
        );
        assert_eq!(
            of(doc, "a.id", KeyType::String),
            Ok(KeyValue::String("inner".into()))
        );
        assert_eq!(
            of(doc, "a.x.id", KeyType::String),
            Ok(KeyValue::String("deeper".into()))
        );
        assert_eq!(
            of(doc, "b.c.id", KeyType::Integer),
            Ok(KeyValue::Integer(7))
        );
        assert!(matches!(
            of(doc, "x.id", KeyType::String),
            Err(KeyError::Missing { .. })
        ));
        assert!(matches!(
            of(r#"{"a":{"y":1},"id":2}"#, "a.id", KeyType::Integer),
            Err(KeyError::Missing { .. })
        ));
    }

    #[test]
    fn a_value_of_another_type_is_no_key() {
        for (doc, expected) in [
            (r#"{"id":42}"#, "the integer 42"),
            (r#"{"id":1.5}"#, "the number 1.5"),
            (r#"{"id":[1]}"#, "an array"),
            (r#"{"id":{}}"#, "an empty object"),
            (r#"{"id":{"a":1}}"#, "an object"),
            (r#"{"id":true}"#, "the boolean true"),
        ] {
            match of(doc, "id", KeyType::String) {
                Err(KeyError::WrongType { found, .. }) => assert_eq!(found, expected, "{doc}"),
                other => panic!("{doc}: {other:?}"),
            }
        }
        assert!(matches!(
            of(r#"{"id":"42"}"#, "id", KeyType::Integer),
            Err(KeyError::WrongType { .. })
        ));
        // Not the canonical i64 text: a number, not an integer key.
        assert!(matches!(
            of(r#"{"id":1e3}"#, "id", KeyType::Integer),
            Err(KeyError::WrongType { .. })
        ));
        assert!(matches!(
            of(r#"{"id":18446744073709551616}"#, "id", KeyType::Integer),
            Err(KeyError::WrongType { .. })
        ));
        assert!(matches!(
            of(r#"{"id":null}"#, "id", KeyType::Integer),
            Err(KeyError::Null { .. })
        ));
        assert!(matches!(
            of(r#"{"id":{"x":1}}"#, "id.x.y", KeyType::Integer),
            Err(KeyError::Missing { .. })
        ));
    }

    #[test]
    fn key_values_print_as_json() {
        assert_eq!(KeyValue::String("a\"b".into()).to_string(), r#""a\"b""#);
        assert_eq!(KeyValue::Integer(-3).to_string(), "-3");
        assert_eq!("INT".parse::<KeyType>(), Ok(KeyType::Integer));
        assert!("float".parse::<KeyType>().is_err());
    }
}
