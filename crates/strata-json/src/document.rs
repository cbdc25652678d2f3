//! Parsing one input line into a JSON object, or a precise reason why it was rejected.
//!
//! Numbers keep their exact text (serde_json's `arbitrary_precision`), duplicate keys follow the
//! last-one-wins rule (as JavaScript, PostgreSQL `jsonb` and Elasticsearch do), and nesting is
//! bounded by [`MAX_NESTING_DEPTH`], checked by a byte scan *before* the recursive parser runs so
//! that a hostile document can never overflow the stack.

use serde_json::{Map, Value};

use crate::error::DocumentError;

/// Deepest nesting of arrays/objects accepted in one document.
///
/// Real data rarely passes 100 levels; the promise is at least 1,000. Deeper documents are
/// rejected with [`DocumentError::TooDeep`]. Every recursive routine in Strata (parse, shred,
/// reconstruct, serialise) runs on threads whose stacks are sized for this limit.
pub const MAX_NESTING_DEPTH: usize = 2_048;

/// Parses one NDJSON line (without its trailing newline) into a JSON object.
pub fn parse_document(line: &[u8]) -> Result<Map<String, Value>, DocumentError> {
    let text = std::str::from_utf8(line).map_err(|e| DocumentError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    if text.trim().is_empty() {
        return Err(DocumentError::Empty);
    }
    check_depth(line)?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value: Value =
        serde::Deserialize::deserialize(&mut deserializer).map_err(|e| DocumentError::Syntax {
            message: e.to_string(),
        })?;
    deserializer.end().map_err(|e| DocumentError::Syntax {
        message: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(DocumentError::NotAnObject {
            found: json_type_name(&other),
        }),
    }
}

/// Name of a value's JSON type, for messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Rejects documents nested deeper than [`MAX_NESTING_DEPTH`] without recursing.
fn check_depth(bytes: &[u8]) -> Result<(), DocumentError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING_DEPTH {
                    return Err(DocumentError::TooDeep {
                        limit: MAX_NESTING_DEPTH,
                        offset,
                    });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_with_reasons() {
        assert!(matches!(
            parse_document(b"[1,2]"),
            Err(DocumentError::NotAnObject { found: "an array" })
        ));
        assert!(matches!(
            parse_document(b"{\"a\": 1"),
            Err(DocumentError::Syntax { .. })
        ));
        assert!(matches!(
            parse_document(b"{\"a\": \"\xff\"}"),
            Err(DocumentError::InvalidUtf8 { offset: 7 })
        ));
        assert!(matches!(parse_document(b"  "), Err(DocumentError::Empty)));
        assert!(matches!(
            parse_document(b"{} {}"),
            Err(DocumentError::Syntax { .. })
        ));
    }

    #[test]
    fn duplicate_keys_last_one_wins() {
        let doc = parse_document(br#"{"a": 1, "a": "two"}"#).unwrap();
        assert_eq!(doc["a"], Value::String("two".into()));
    }

    #[test]
    fn depth_limit_is_exact() {
        crate::run_with_deep_stack(depth_limit_cases)
    }

    fn depth_limit_cases() {
        let ok = format!(
            "{}{}",
            "{\"a\":".repeat(MAX_NESTING_DEPTH - 1) + "[]",
            "}".repeat(MAX_NESTING_DEPTH - 1)
        );
        assert!(parse_document(ok.as_bytes()).is_ok());
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(MAX_NESTING_DEPTH) + "[]",
            "}".repeat(MAX_NESTING_DEPTH)
        );
        assert!(matches!(
            parse_document(deep.as_bytes()),
            Err(DocumentError::TooDeep { .. })
        ));
        // Brackets inside strings do not count.
        let text = format!("{{\"s\": \"{}\"}}", "[".repeat(MAX_NESTING_DEPTH * 2));
        assert!(parse_document(text.as_bytes()).is_ok());
    }
}
