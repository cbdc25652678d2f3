//! Point reads by key that plan nothing (ADR 0017, "prepared point statements").
//!
//! `SELECT data FROM t WHERE data->>'id' = $1` — a document by its key — is what applications
//! that keep documents run most, and DataFusion's planning of it (about a millisecond) costs
//! more than reading the document through the key files. [`PointRead::parse`] recognises the
//! statement by its tokens, once per statement text; [`crate::Session::point_read`] then reads
//! the document with `scan::read_documents_by_key`, the planned scan's own reading, whenever
//! the table is keyed on that path.
//!
//! Recognised, whole statement only (an optional `;` at the end): `SELECT data` or `SELECT *`,
//! `FROM` one table name, `WHERE` one equality between the key's path — `data->>'k'`,
//! `data->'a'->>'k'` or `data.k` / `data.a.k`, optionally in parentheses — and a parameter
//! `$n`, a string literal or an integer literal, on either side. Anything else (another
//! column, a second condition, a cast, an alias, `LIMIT`) is planned as usual.
//!
//! Invariant: the answer is the planned statement's answer. A value is compared the way the
//! planned statement compares it: through `->>` as text (so an integer key `42` is found by
//! the text `'42'`, not by `'042'`), through `data.k` by the value's own type (a string key
//! by text, an integer key by an integer). A combination whose planned meaning differs from a
//! key lookup (an integer value against `->>` text, a string value against an integer key read
//! as `data.k`) is not taken: [`crate::Session::point_read`] answers `None` and the statement
//! is planned. `NULL` equals nothing: no rows.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use strata_json::{JsonPath, KeyType, KeyValue};

use crate::table::DATA_COLUMN;

/// A statement recognised as a read of one table's documents by a path's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointRead {
    /// The table, as written.
    pub table: String,
    /// The path compared.
    pub path: JsonPath,
    /// Compared through `->>` (as text) rather than `data.k` (by the value's type).
    pub as_text: bool,
    /// What the path is compared with.
    pub value: PointValue,
}

/// The right-hand side of the statement's equality.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointValue {
    /// `$n` (1-based), bound at execution.
    Parameter(usize),
    Literal(BoundValue),
}

/// A value compared with the key: a literal, or a parameter's value as the client bound it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundValue {
    Null,
    Text(String),
    Integer(i64),
}

impl PointValue {
    /// The parameter a placeholder (`$1`, `$2`, …) stands for; None for any other name.
    pub(crate) fn parameter(name: &str) -> Option<PointValue> {
        let index: usize = name.strip_prefix('$')?.parse().ok()?;
        (index >= 1).then_some(PointValue::Parameter(index))
    }
}

impl PointRead {
    /// The point read `sql` is, or None when it is any other statement.
    pub fn parse(sql: &str) -> Option<PointRead> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
        let mut tokens = Tokens {
            tokens: tokens
                .into_iter()
                .filter(|t| !matches!(t, Token::Whitespace(_)))
                .collect(),
            at: 0,
        };
        tokens.keyword(Keyword::SELECT)?;
        if !tokens.take(&Token::Mul) {
            tokens.name(DATA_COLUMN)?;
        }
        tokens.keyword(Keyword::FROM)?;
        let table = tokens.identifier()?;
        tokens.keyword(Keyword::WHERE)?;
        let (path, as_text, value) = match tokens.key_path() {
            Some((path, as_text)) => {
                tokens.expect(&Token::Eq)?;
                (path, as_text, tokens.value()?)
            }
            None => {
                let value = tokens.value()?;
                tokens.expect(&Token::Eq)?;
                let (path, as_text) = tokens.key_path()?;
                (path, as_text, value)
            }
        };
        tokens.take(&Token::SemiColon);
        tokens.at_end().then_some(PointRead {
            table,
            path,
            as_text,
            value,
        })
    }

    /// The key `value` is for a table keyed by a key of `key_type`, as the planned statement
    /// compares them: `Some(None)` when it matches no document (NULL, or text that is no
    /// integer's canonical form), None when the statement must be planned instead.
    pub fn key(&self, key_type: KeyType, value: &BoundValue) -> Option<Option<KeyValue>> {
        match (value, key_type, self.as_text) {
            (BoundValue::Null, _, _) => Some(None),
            (BoundValue::Text(text), KeyType::String, _) => {
                Some(Some(KeyValue::String(text.clone())))
            }
            (BoundValue::Text(text), KeyType::Integer, true) => {
                Some(KeyValue::integer_from_text(text))
            }
            (BoundValue::Integer(i), KeyType::Integer, false) => Some(Some(KeyValue::Integer(*i))),
            _ => None,
        }
    }
}

/// The statement's tokens (whitespace and comments dropped) and a cursor.
struct Tokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokens {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<&Token> {
        let token = self.tokens.get(self.at);
        self.at += 1;
        token
    }

    /// Consumes `token` if it is next.
    fn take(&mut self, token: &Token) -> bool {
        let found = self.peek() == Some(token);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, token: &Token) -> Option<()> {
        self.take(token).then_some(())
    }

    fn keyword(&mut self, keyword: Keyword) -> Option<()> {
        match self.next()? {
            Token::Word(word) if word.keyword == keyword && word.quote_style.is_none() => Some(()),
            _ => None,
        }
    }

    /// An identifier: a word that is not a reserved keyword, or a quoted name.
    fn identifier(&mut self) -> Option<String> {
        match self.next()? {
            Token::Word(word) if word.quote_style == Some('"') => Some(word.value.clone()),
            Token::Word(word) if word.quote_style.is_none() && !is_clause(word.keyword) => {
                Some(word.value.clone())
            }
            _ => None,
        }
    }

    fn name(&mut self, name: &str) -> Option<()> {
        (self.identifier()? == name).then_some(())
    }

    /// `data->>'k'`, `data->'a'->>'k'`, `data.k`, `data.a.k`, each maybe in parentheses: the
    /// path and whether it is read as text. The cursor is left where it was when none is next.
    fn key_path(&mut self) -> Option<(JsonPath, bool)> {
        let start = self.at;
        let found = self.parenthesized_key_path();
        if found.is_none() {
            self.at = start;
        }
        found
    }

    fn parenthesized_key_path(&mut self) -> Option<(JsonPath, bool)> {
        if self.take(&Token::LParen) {
            let found = self.parenthesized_key_path()?;
            return self.take(&Token::RParen).then_some(found);
        }
        self.name(DATA_COLUMN)?;
        let mut segments = Vec::new();
        if self.take(&Token::Period) {
            segments.push(self.identifier()?);
            while self.take(&Token::Period) {
                segments.push(self.identifier()?);
            }
            return Some((JsonPath(segments), false));
        }
        loop {
            let last = match self.next()? {
                Token::Arrow => false,
                Token::LongArrow => true,
                _ => return None,
            };
            match self.next()? {
                Token::SingleQuotedString(segment) => segments.push(segment.clone()),
                _ => return None,
            }
            if last {
                return Some((JsonPath(segments), true));
            }
        }
    }

    fn value(&mut self) -> Option<PointValue> {
        match self.next()? {
            Token::Placeholder(name) => PointValue::parameter(name),
            Token::SingleQuotedString(text) => {
                Some(PointValue::Literal(BoundValue::Text(text.clone())))
            }
            Token::Number(digits, false) => digits
                .parse::<i64>()
                .ok()
                .map(|i| PointValue::Literal(BoundValue::Integer(i))),
            Token::Minus => match self.next()? {
                Token::Number(digits, false) => format!("-{digits}")
                    .parse::<i64>()
                    .ok()
                    .map(|i| PointValue::Literal(BoundValue::Integer(i))),
                _ => None,
            },
            Token::Word(word) if word.keyword == Keyword::NULL && word.quote_style.is_none() => {
                Some(PointValue::Literal(BoundValue::Null))
            }
            _ => None,
        }
    }

    fn at_end(&self) -> bool {
        self.at >= self.tokens.len()
    }
}

/// Keywords that cannot name a table here without quotes.
fn is_clause(keyword: Keyword) -> bool {
    matches!(
        keyword,
        Keyword::SELECT
            | Keyword::FROM
            | Keyword::WHERE
            | Keyword::JOIN
            | Keyword::ORDER
            | Keyword::GROUP
            | Keyword::LIMIT
            | Keyword::NULL
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn path(segments: &[&str]) -> JsonPath {
        JsonPath(segments.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn recognises_reads_by_one_path_value() {
        let read = PointRead::parse("SELECT data FROM docs WHERE data->>'id' = $1").unwrap();
        assert_eq!(
            read,
            PointRead {
                table: "docs".into(),
                path: path(&["id"]),
                as_text: true,
                value: PointValue::Parameter(1),
            }
        );
        let read =
            PointRead::parse("select * from \"My T\" where 'x' = (data->'a'->>'k');").unwrap();
        assert_eq!(read.table, "My T");
        assert_eq!(read.path, path(&["a", "k"]));
        assert_eq!(
            read.value,
            PointValue::Literal(BoundValue::Text("x".into()))
        );
        let read = PointRead::parse("SELECT data FROM t WHERE data.a.id = -42").unwrap();
        assert_eq!((read.path, read.as_text), (path(&["a", "id"]), false));
        assert_eq!(read.value, PointValue::Literal(BoundValue::Integer(-42)));
    }

    #[test]
    fn anything_more_is_planned() {
        for sql in [
            "SELECT data FROM t WHERE data->>'id' = $1 LIMIT 1",
            "SELECT data FROM t WHERE data->>'id' = $1 AND data.n > 1",
            "SELECT data, 1 FROM t WHERE data->>'id' = $1",
            "SELECT data->>'n' FROM t WHERE data->>'id' = $1",
            "SELECT data FROM t AS x WHERE data->>'id' = $1",
            "SELECT data FROM t WHERE data->>'id' = $1::text",
            "SELECT data FROM t WHERE data->'id' = $1",
            "SELECT data FROM t WHERE data->>'id' <> $1",
            "SELECT data FROM t, u WHERE data->>'id' = $1",
            "SELECT data FROM t WHERE data.id = 1.5",
            "SELECT data FROM t WHERE data->>'id' = $1; SELECT 1",
            "EXPLAIN SELECT data FROM t WHERE data->>'id' = $1",
        ] {
            assert_eq!(PointRead::parse(sql), None, "{sql}");
        }
    }

    #[test]
    fn values_compare_as_the_planned_statement_compares_them() {
        let text = PointRead::parse("SELECT data FROM t WHERE data->>'id' = $1").unwrap();
        let typed = PointRead::parse("SELECT data FROM t WHERE data.id = $1").unwrap();
        let s = |v: &str| BoundValue::Text(v.into());
        assert_eq!(
            text.key(KeyType::String, &s("7")),
            Some(Some(KeyValue::String("7".into())))
        );
        assert_eq!(
            text.key(KeyType::Integer, &s("7")),
            Some(Some(KeyValue::Integer(7)))
        );
        assert_eq!(text.key(KeyType::Integer, &s("007")), Some(None));
        assert_eq!(text.key(KeyType::Integer, &BoundValue::Integer(7)), None);
        assert_eq!(
            typed.key(KeyType::Integer, &BoundValue::Integer(7)),
            Some(Some(KeyValue::Integer(7)))
        );
        assert_eq!(typed.key(KeyType::Integer, &s("7")), None);
        assert_eq!(typed.key(KeyType::String, &BoundValue::Integer(7)), None);
        assert_eq!(text.key(KeyType::String, &BoundValue::Null), Some(None));
    }
}
