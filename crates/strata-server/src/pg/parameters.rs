//! Parameters of the statements Strata runs itself (`INSERT`, `UPDATE`, `DELETE`, `DROP`,
//! `ALTER`; see `strata_query::table_change_tag`) over the extended protocol: drivers send
//! `INSERT INTO t VALUES ($1)` and the values apart, and these statements are not planned by
//! DataFusion at Parse, so each `$n` is bound here, at Execute, as a SQL literal of its value.
//!
//! Invariants: a value becomes a literal that reads back as exactly that value — text is
//! quoted with `'` doubled (never spliced in raw), numbers and booleans are checked to be
//! numbers and booleans before they are written unquoted, NULL is `NULL` — so a parameter can
//! never change the statement's structure. Only `$n` placeholder tokens are replaced: a `$1`
//! inside a string literal or a comment stays as it is.
//!
//! Point reads (`strata_query::point_read`) are not planned either: their one parameter is
//! decoded here the same way and compared as a key (`point_value`).

use datafusion::sql::sqlparser::ast::Expr;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use pgwire::api::Type;
use pgwire::api::portal::Portal;

/// `sql` (whose [`Template`] is `template`) with each `$n` replaced by the literal of parameter
/// n of `portal`, or why a parameter cannot be bound.
pub fn bind<S>(
    sql: &str,
    template: &Template,
    portal: &Portal<S>,
    types: &[Option<Type>],
) -> Result<String, String> {
    if portal.parameters.is_empty() {
        return Ok(sql.to_owned());
    }
    template.fill(|name| Ok(Some(literal_of(portal, name, types)?)))
}

/// `change` (a prepared document change) with each `$n` bound to the expression of the literal
/// [`bind`] would write for parameter n of `portal`: the statement [`bind`]'s text parses to.
pub fn bind_change<S>(
    change: &strata_query::prepared_change::PreparedChange,
    portal: &Portal<S>,
    types: &[Option<Type>],
) -> Result<datafusion::sql::sqlparser::ast::Statement, String> {
    change.bind(|name| expression(parameter(portal, placeholder_index(name)?, types)?))
}

/// The 1-based index of the placeholder `name` (`"$1"`).
fn placeholder_index(name: &str) -> Result<usize, String> {
    name.get(1..)
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| format!("unknown parameter {name}"))
}

/// The expression [`literal`]'s text of `value` parses to, built directly for the values a
/// driver sends most (text, NULL, booleans, plain integers and decimals: parsing their literal
/// back was half the cost of binding a prepared change); any other goes through the parser.
fn expression(value: Value) -> Result<Expr, String> {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value as SqlValue};
    let direct = match value {
        Value::Null => Expr::value(SqlValue::Null),
        Value::Text(text) => Expr::value(SqlValue::SingleQuotedString(text)),
        Value::Bool(value) => Expr::value(SqlValue::Boolean(value)),
        Value::Number(text) => match text.strip_prefix('-') {
            Some(digits) if plain_number(digits) => Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr: Box::new(Expr::value(SqlValue::Number(digits.to_owned(), false))),
            },
            None if plain_number(&text) => Expr::value(SqlValue::Number(text, false)),
            _ => {
                return strata_query::prepared_change::literal_expression(&literal(Value::Number(
                    text,
                )));
            }
        },
    };
    Ok(direct)
}

/// Digits with at most one `.` between digits: a number literal the parser reads as one token.
fn plain_number(text: &str) -> bool {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "1"));
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && digits(fraction)
}

/// The SQL literal of the parameter the placeholder `name` (`"$1"`) stands for.
fn literal_of<S>(portal: &Portal<S>, name: &str, types: &[Option<Type>]) -> Result<String, String> {
    Ok(literal(parameter(portal, placeholder_index(name)?, types)?))
}

/// `sql` with each `$n` placeholder token replaced by what `value` gives for its name (`"$1"`;
/// None keeps the token). Every other token, string literals and comments included, is written
/// back as it was, so only placeholders change.
pub fn replace_placeholders(
    sql: &str,
    value: impl FnMut(&str) -> Result<Option<String>, String>,
) -> Result<String, String> {
    Template::of(sql)?.fill(value)
}

/// A statement's text cut at its `$n` placeholders: tokenized once per prepared statement
/// (tokenizing at every execution was about 2 % of a booking's CPU), filled at each.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    /// Tokens written back as they were.
    Text(String),
    /// A `$n` placeholder, by its name.
    Placeholder(String),
}

impl Template {
    /// The template of `sql`, or why it cannot be tokenized.
    pub fn of(sql: &str) -> Result<Template, String> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize()
            .map_err(|e| e.to_string())?;
        let mut pieces = Vec::new();
        let mut text = String::new();
        for token in tokens {
            match token {
                Token::Placeholder(name) if name.starts_with('$') => {
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Placeholder(name));
                }
                token => text.push_str(&token.to_string()),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template { pieces })
    }

    /// How many placeholder tokens the text holds (a name used twice counts twice).
    pub fn placeholders(&self) -> usize {
        self.pieces
            .iter()
            .filter(|piece| matches!(piece, Piece::Placeholder(_)))
            .count()
    }

    /// The text with each placeholder replaced by what `value` gives for its name (None keeps
    /// the placeholder).
    pub fn fill(
        &self,
        mut value: impl FnMut(&str) -> Result<Option<String>, String>,
    ) -> Result<String, String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Placeholder(name) => match value(name)? {
                    Some(text) => out.push_str(&text),
                    None => out.push_str(name),
                },
            }
        }
        Ok(out)
    }
}

/// One parameter's value, checked against its type.
#[derive(Debug, PartialEq)]
enum Value {
    Null,
    Text(String),
    /// The canonical text of a number.
    Number(String),
    Bool(bool),
}

/// The SQL literal of one parameter value.
fn literal(value: Value) -> String {
    match value {
        Value::Null => "NULL".to_owned(),
        Value::Text(text) => quoted(&text),
        Value::Number(text) => text,
        Value::Bool(value) => value.to_string(),
    }
}

/// Parameter `index` (1-based) of `portal`, decoded by its type and format.
fn parameter<S>(portal: &Portal<S>, index: usize, types: &[Option<Type>]) -> Result<Value, String> {
    let name = format!("${index}");
    let value = index
        .checked_sub(1)
        .and_then(|i| portal.parameters.get(i))
        .ok_or_else(|| {
            format!(
                "parameter {name} was not given ({} given)",
                portal.parameters.len()
            )
        })?;
    let pg_type = types.get(index - 1).cloned().flatten();
    let binary = portal.parameter_format.is_binary(index - 1);
    decode(value.as_deref(), pg_type.as_ref(), binary, &name)
}

/// Parameter `index` (1-based) of `portal` as a point read compares it (`strata_query::
/// point_read`): None when it is of a type a key is never compared with (a fraction, a
/// boolean), so the statement is planned instead.
pub fn point_value<S>(
    portal: &Portal<S>,
    index: usize,
    types: &[Option<Type>],
) -> Result<Option<strata_query::point_read::BoundValue>, String> {
    use strata_query::point_read::BoundValue;
    Ok(match parameter(portal, index, types)? {
        Value::Null => Some(BoundValue::Null),
        Value::Text(text) => Some(BoundValue::Text(text)),
        Value::Number(text) => text.parse().ok().map(BoundValue::Integer),
        Value::Bool(_) => None,
    })
}

/// One parameter value of type `pg_type`, sent in the binary or the text format.
fn decode(
    value: Option<&[u8]>,
    pg_type: Option<&Type>,
    binary: bool,
    name: &str,
) -> Result<Value, String> {
    let Some(bytes) = value else {
        return Ok(Value::Null);
    };
    let numeric = |text: String| -> Result<Value, String> {
        if text.parse::<f64>().is_ok() || text.parse::<i128>().is_ok() {
            Ok(Value::Number(text))
        } else {
            Err(format!("parameter {name}: {text:?} is not a number"))
        }
    };
    let fixed = |n: usize| -> Result<&[u8], String> {
        (bytes.len() == n)
            .then_some(bytes)
            .ok_or_else(|| format!("parameter {name}: {} bytes, expected {n}", bytes.len()))
    };
    let to_array = |b: &[u8]| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[8 - b.len()..].copy_from_slice(b);
        a
    };
    match pg_type {
        Some(t) if *t == Type::INT2 || *t == Type::INT4 || *t == Type::INT8 => {
            if binary {
                let width = match *t {
                    Type::INT2 => 2,
                    Type::INT4 => 4,
                    _ => 8,
                };
                let b = fixed(width)?;
                let value = match width {
                    2 => i64::from(i16::from_be_bytes([b[0], b[1]])),
                    4 => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                    _ => i64::from_be_bytes(to_array(b)),
                };
                Ok(Value::Number(value.to_string()))
            } else {
                numeric(text(bytes, name)?)
            }
        }
        Some(t) if *t == Type::FLOAT4 || *t == Type::FLOAT8 => {
            if binary {
                let value = if *t == Type::FLOAT4 {
                    let b = fixed(4)?;
                    f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                } else {
                    f64::from_be_bytes(to_array(fixed(8)?))
                };
                if !value.is_finite() {
                    return Err(format!("parameter {name}: {value} is not a finite number"));
                }
                Ok(Value::Number(format!("{value:?}")))
            } else {
                numeric(text(bytes, name)?)
            }
        }
        Some(t) if *t == Type::NUMERIC && !binary => numeric(text(bytes, name)?),
        Some(t) if *t == Type::BOOL => {
            let value = if binary {
                fixed(1)?[0] != 0
            } else {
                match text(bytes, name)?.as_str() {
                    "t" | "true" | "1" | "on" | "yes" => true,
                    "f" | "false" | "0" | "off" | "no" => false,
                    other => return Err(format!("parameter {name}: {other:?} is not a boolean")),
                }
            };
            Ok(Value::Bool(value))
        }
        // jsonb's binary form is a version byte (1) and the text.
        Some(t) if *t == Type::JSONB && binary => match bytes.split_first() {
            Some((1, rest)) => Ok(Value::Text(text(rest, name)?)),
            _ => Err(format!("parameter {name}: unknown jsonb binary version")),
        },
        Some(t) if binary && !is_text_type(t) => Err(format!(
            "parameter {name}: binary values of type {} are not supported; send it as text",
            t.name()
        )),
        _ => Ok(Value::Text(text(bytes, name)?)),
    }
}

fn is_text_type(t: &Type) -> bool {
    [
        Type::TEXT,
        Type::VARCHAR,
        Type::BPCHAR,
        Type::JSON,
        Type::UNKNOWN,
    ]
    .contains(t)
}

fn text(bytes: &[u8], name: &str) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("parameter {name} is not valid UTF-8"))
}

/// A SQL string literal: single quotes doubled, so no value can end the literal early.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn literal_of(
        value: Option<&[u8]>,
        pg_type: Option<&Type>,
        binary: bool,
        name: &str,
    ) -> Result<String, String> {
        decode(value, pg_type, binary, name).map(literal)
    }

    #[test]
    fn values_become_literals_that_read_back_as_themselves() {
        assert_eq!(literal_of(None, None, false, "$1").unwrap(), "NULL");
        assert_eq!(
            literal_of(Some(b"it's"), Some(&Type::TEXT), false, "$1").unwrap(),
            "'it''s'"
        );
        assert_eq!(
            literal_of(Some(b"42"), Some(&Type::INT8), false, "$1").unwrap(),
            "42"
        );
        assert!(literal_of(Some(b"1; DROP TABLE t"), Some(&Type::INT8), false, "$1").is_err());
        assert_eq!(
            literal_of(Some(&(-7i32).to_be_bytes()), Some(&Type::INT4), true, "$1").unwrap(),
            "-7"
        );
        assert_eq!(
            literal_of(Some(&1.5f64.to_be_bytes()), Some(&Type::FLOAT8), true, "$1").unwrap(),
            "1.5"
        );
        assert_eq!(
            literal_of(Some(b"\x01{\"a\":1}"), Some(&Type::JSONB), true, "$1").unwrap(),
            "'{\"a\":1}'"
        );
        assert_eq!(
            literal_of(Some(&[1]), Some(&Type::BOOL), true, "$1").unwrap(),
            "true"
        );
        assert!(literal_of(Some(&[0, 1]), Some(&Type::UUID), true, "$1").is_err());
    }

    #[test]
    fn values_bound_directly_are_what_their_literals_parse_to() {
        let mut values = vec![Value::Null, Value::Bool(true), Value::Bool(false)];
        for text in [
            "",
            "it's",
            "''",
            "a\\nb",
            "back\\slash",
            "line\nbreak",
            "$1",
            "-- not a comment",
            "日本",
            "{\"a\": [1, \"x\"]}",
            "E'x'",
            "\t",
        ] {
            values.push(Value::Text(text.to_owned()));
        }
        for number in [
            "0",
            "42",
            "-7",
            "007",
            "1.5",
            "-0.25",
            "1e3",
            "1.5e-3",
            "-2E+5",
            ".5",
            "5.",
            "-",
            "--5",
            "1.2.3",
            "123456789012345678901234567890",
            "inf",
            "NaN",
            "+5",
        ] {
            values.push(Value::Number(number.to_owned()));
        }
        for value in values {
            let shown = format!("{value:?}");
            let parsed =
                strata_query::prepared_change::literal_expression(&literal(match &value {
                    Value::Null => Value::Null,
                    Value::Text(t) => Value::Text(t.clone()),
                    Value::Number(t) => Value::Number(t.clone()),
                    Value::Bool(b) => Value::Bool(*b),
                }));
            let direct = expression(value);
            // Spans aside (`Expr`'s equality ignores them): the same tree.
            assert_eq!(direct.is_ok(), parsed.is_ok(), "{shown}");
            if let (Ok(direct), Ok(parsed)) = (direct, parsed) {
                assert!(direct == parsed, "{shown}: {direct:?} against {parsed:?}");
                assert_eq!(direct.to_string(), parsed.to_string(), "{shown}");
            }
        }
    }

    #[test]
    fn a_template_fills_only_placeholders_and_keeps_the_rest_as_written() {
        let sql = "SELECT '$1', $1 /* $2 */, \"$3\" FROM t WHERE x = $2 -- $1\n AND y=$10";
        let template = Template::of(sql).unwrap();
        assert_eq!(template.fill(|_| Ok(None)).unwrap(), sql);
        let filled = template
            .fill(|name| Ok((name != "$10").then(|| format!("<{name}>"))))
            .unwrap();
        assert_eq!(
            filled,
            "SELECT '$1', <$1> /* $2 */, \"$3\" FROM t WHERE x = <$2> -- $1\n AND y=$10"
        );
        assert_eq!(
            template.fill(|name| Err(format!("no {name}"))).unwrap_err(),
            "no $1"
        );
        assert!(Template::of("SELECT 'unterminated").is_err());
    }
}
