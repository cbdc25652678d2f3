//! The query language of `matches(text, query)`:
//!
//! - `error` — a term: some token of the text is `error` (case-insensitive: the query is
//!   tokenized as the text is);
//! - `"connection reset"` — a phrase: these tokens, consecutive and in order; a term that
//!   tokenizes to several tokens (`10.0.0.1`, `/api/v2`) is a phrase too;
//! - `time*` — a prefix: some token starts with `time` (a phrase may end with one: `"read tim*"`);
//! - `a b` or `a AND b` — both; `a OR b` — either; `NOT a` or `-a` — not; parentheses group.
//!   AND binds tighter than OR; the keywords are upper case (`and` is a term).

use std::collections::HashMap;

use crate::tokenize::{for_each_token, tokens};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("matches() query {query:?}: {reason}")]
pub struct QueryError {
    pub query: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextQuery {
    /// Consecutive tokens; with `prefix`, the last one need only start the text's token.
    Phrase {
        tokens: Vec<String>,
        prefix: bool,
    },
    And(Vec<TextQuery>),
    Or(Vec<TextQuery>),
    Not(Box<TextQuery>),
}

impl TextQuery {
    pub fn parse(query: &str) -> Result<TextQuery, QueryError> {
        let error = |reason: String| QueryError {
            query: query.to_owned(),
            reason,
        };
        let lexemes = lex(query).map_err(error)?;
        let mut parser = Parser {
            lexemes: &lexemes,
            next: 0,
        };
        let parsed = parser.or().map_err(error)?;
        if let Some(extra) = parser.lexemes.get(parser.next) {
            return Err(error(format!("unexpected {extra}")));
        }
        parsed.ok_or_else(|| error("the query has no term".to_owned()))
    }

    /// Whether `text` matches (for many texts, [`TextQuery::matcher`] is faster).
    pub fn matches(&self, text: &str) -> bool {
        self.matcher().matches(text)
    }

    /// A matcher of this query, for deciding many texts.
    pub fn matcher(&self) -> Matcher<'_> {
        let mut finders = HashMap::new();
        self.collect_tokens(&mut |token| {
            finders
                .entry(token.to_owned())
                .or_insert_with(|| memchr::memmem::Finder::new(token.as_bytes()).into_owned());
        });
        Matcher {
            query: self,
            finders,
            lower: String::new(),
        }
    }

    /// Tokens every matching text holds as substrings of its lowercased form: all of a phrase's
    /// (a prefix is a substring too), those of every part of an AND; none for OR and NOT.
    fn required_tokens<'q>(&'q self, out: &mut Vec<&'q str>) {
        match self {
            TextQuery::Phrase { tokens, .. } => out.extend(tokens.iter().map(String::as_str)),
            TextQuery::And(all) => all.iter().for_each(|q| q.required_tokens(out)),
            TextQuery::Or(_) | TextQuery::Not(_) => {}
        }
    }

    fn collect_tokens(&self, on_token: &mut dyn FnMut(&str)) {
        match self {
            TextQuery::Phrase { tokens, .. } => tokens.iter().for_each(|t| on_token(t)),
            TextQuery::And(all) | TextQuery::Or(all) => {
                all.iter().for_each(|q| q.collect_tokens(on_token))
            }
            TextQuery::Not(inner) => inner.collect_tokens(on_token),
        }
    }

    /// Whether text of these tokens (from [`tokens`]) matches.
    pub fn matches_tokens(&self, text: &[String]) -> bool {
        match self {
            TextQuery::Phrase { tokens, prefix } => phrase_at_any(text, tokens, *prefix),
            TextQuery::And(all) => all.iter().all(|q| q.matches_tokens(text)),
            TextQuery::Or(any) => any.iter().any(|q| q.matches_tokens(text)),
            TextQuery::Not(inner) => !inner.matches_tokens(text),
        }
    }

    /// Whether text whose tokens satisfy `may_contain` (a bloom filter's answer: false means
    /// certainly absent) could match. Never false where some such text matches.
    pub fn may_match(&self, may_contain: &dyn Fn(&str) -> bool) -> bool {
        match self {
            TextQuery::Phrase { tokens, prefix } => {
                let exact = if *prefix {
                    &tokens[..tokens.len() - 1]
                } else {
                    &tokens[..]
                };
                exact.iter().all(|token| may_contain(token))
            }
            TextQuery::And(all) => all.iter().all(|q| q.may_match(may_contain)),
            TextQuery::Or(any) => any.iter().any(|q| q.may_match(may_contain)),
            // The text may hold tokens besides those asked for: nothing can be ruled out.
            TextQuery::Not(_) => true,
        }
    }
}

/// Decides texts for one query, reusing its searchers and buffer.
///
/// Every token of a text is a substring of the text lowercased as the tokenizer lowercases, so a
/// query that cannot match on those substrings cannot match at all: that test, without splitting
/// the text, decides most texts of a selective query; the others are tokenized and decided
/// exactly.
pub struct Matcher<'a> {
    query: &'a TextQuery,
    finders: HashMap<String, memchr::memmem::Finder<'static>>,
    lower: String,
}

/// How much of a column [`Matcher::matches_column`] samples to choose the token it searches for.
const SAMPLE_BYTES: usize = 8 * 1024;

impl Matcher<'_> {
    pub fn matches(&mut self, text: &str) -> bool {
        crate::tokenize::lowercase_into(text, &mut self.lower);
        let (lower, finders) = (self.lower.as_bytes(), &self.finders);
        let may = self.query.may_match(&|token| {
            finders
                .get(token)
                .is_none_or(|finder| finder.find(lower).is_some())
        });
        may && self.query.matches_tokens(&tokens(text))
    }

    /// Decides a column of texts at once: text `i` is `bytes[offsets[i]..offsets[i + 1]]` (an
    /// Arrow string array's buffers), one answer per text, each what [`Matcher::matches`] says.
    ///
    /// Why it is faster: a selective query rules out most texts, and one search for a token the
    /// query requires, over the whole column lowercased at once, rules them out together instead
    /// of lowercasing and searching text by text. Only the texts where the token occurs (and texts
    /// that are not ASCII, whose lowercase forms are not the ASCII lowercasing of their bytes) are
    /// decided one by one. The token searched for is the required one found least often in a
    /// sample of the column (length does not tell rarity: `production` in every path, a user
    /// name in few lines).
    pub fn matches_column(&mut self, bytes: &[u8], offsets: &[i32]) -> Vec<bool> {
        let rows = offsets.len().saturating_sub(1);
        let bound = |row: usize| {
            offsets
                .get(row)
                .map_or(0, |&offset| usize::try_from(offset).unwrap_or(0))
        };
        let text = |row: usize| {
            String::from_utf8_lossy(bytes.get(bound(row)..bound(row + 1)).unwrap_or_default())
        };
        let mut required = Vec::new();
        self.query.required_tokens(&mut required);
        let start = bound(0);
        // Without a required token (OR, NOT) there is nothing to search for.
        let lower = match required.is_empty() {
            true => Vec::new(),
            false => bytes
                .get(start..bound(rows))
                .unwrap_or_default()
                .to_ascii_lowercase(),
        };
        let sample = &lower[..lower.len().min(SAMPLE_BYTES)];
        let Some((token, finder)) = required
            .iter()
            .filter_map(|token| Some((*token, self.finders.get(*token)?)))
            .min_by_key(|(token, finder)| {
                (
                    finder.find_iter(sample).count(),
                    std::cmp::Reverse(token.len()),
                )
            })
        else {
            return (0..rows).map(|row| self.matches(&text(row))).collect();
        };
        let mut holds_token = vec![false; rows];
        let (mut row, mut from) = (0, 0);
        while let Some(hit) = finder.find(&lower[from..]) {
            let at = start + from + hit;
            while row < rows && bound(row + 1) <= at {
                row += 1;
            }
            if row == rows {
                break;
            }
            // A hit across the end of a text is no hit; either way the search goes on at the
            // next text, so a hit overlapping this one there is not skipped.
            let row_end = bound(row + 1);
            if at + token.len() <= row_end {
                holds_token[row] = true;
            }
            from = row_end - start;
        }
        let all_ascii = lower.is_ascii();
        (0..rows)
            .map(|row| {
                let undecided = holds_token[row]
                    || (!all_ascii
                        && !bytes
                            .get(bound(row)..bound(row + 1))
                            .is_some_and(<[u8]>::is_ascii));
                undecided && self.matches(&text(row))
            })
            .collect()
    }
}

fn phrase_at_any(text: &[String], phrase: &[String], prefix: bool) -> bool {
    let Some(last) = phrase.len().checked_sub(1) else {
        return false;
    };
    if text.len() < phrase.len() {
        return false;
    }
    (0..=text.len() - phrase.len()).any(|start| {
        phrase.iter().enumerate().all(|(i, token)| {
            let candidate = &text[start + i];
            if prefix && i == last {
                candidate.starts_with(token.as_str())
            } else {
                candidate == token
            }
        })
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Lexeme {
    Word { text: String, prefix: bool },
    Quoted { text: String, prefix: bool },
    And,
    Or,
    Not,
    Open,
    Close,
}

impl std::fmt::Display for Lexeme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lexeme::Word { text, .. } => write!(f, "term {text:?}"),
            Lexeme::Quoted { text, .. } => write!(f, "phrase \"{text}\""),
            Lexeme::And => f.write_str("AND"),
            Lexeme::Or => f.write_str("OR"),
            Lexeme::Not => f.write_str("NOT"),
            Lexeme::Open => f.write_str("'('"),
            Lexeme::Close => f.write_str("')'"),
        }
    }
}

fn lex(query: &str) -> Result<Vec<Lexeme>, String> {
    let mut lexemes = Vec::new();
    let mut chars = query.chars().peekable();
    // The character before the one looked at: a '-' that starts a word is NOT.
    let mut previous: Option<char> = None;
    while let Some(&c) = chars.peek() {
        let starts_word = previous.is_none_or(|p| p.is_whitespace() || p == '(');
        previous = Some(c);
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' => {
                chars.next();
                lexemes.push(Lexeme::Open);
            }
            ')' => {
                chars.next();
                lexemes.push(Lexeme::Close);
            }
            '"' => {
                chars.next();
                let mut text = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => text.push(c),
                        None => return Err("a '\"' is not closed".to_owned()),
                    }
                }
                let prefix = text.ends_with('*');
                lexemes.push(Lexeme::Quoted {
                    text: text.trim_end_matches('*').to_owned(),
                    prefix,
                });
            }
            '-' if starts_word => {
                chars.next();
                lexemes.push(Lexeme::Not);
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '"') {
                        break;
                    }
                    word.push(c);
                    previous = Some(c);
                    chars.next();
                }
                lexemes.push(match word.as_str() {
                    "AND" => Lexeme::And,
                    "OR" => Lexeme::Or,
                    "NOT" => Lexeme::Not,
                    _ => Lexeme::Word {
                        prefix: word.ends_with('*'),
                        text: word.trim_end_matches('*').to_owned(),
                    },
                });
            }
        }
    }
    Ok(lexemes)
}

struct Parser<'a> {
    lexemes: &'a [Lexeme],
    next: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Lexeme> {
        self.lexemes.get(self.next)
    }

    /// `and ("OR" and)*`; None for an empty query.
    fn or(&mut self) -> Result<Option<TextQuery>, String> {
        let mut any = Vec::new();
        loop {
            match self.and()? {
                Some(query) => any.push(query),
                None if any.is_empty() && self.peek().is_none() => return Ok(None),
                None => return Err("OR needs a term on each side".to_owned()),
            }
            if self.peek() == Some(&Lexeme::Or) {
                self.next += 1;
            } else {
                break;
            }
        }
        Ok(Some(if any.len() == 1 {
            any.remove(0)
        } else {
            TextQuery::Or(any)
        }))
    }

    /// `unary (["AND"] unary)*`; None when no term starts here.
    fn and(&mut self) -> Result<Option<TextQuery>, String> {
        let mut all = Vec::new();
        loop {
            let explicit = self.peek() == Some(&Lexeme::And);
            if explicit {
                if all.is_empty() {
                    return Err("AND needs a term on each side".to_owned());
                }
                self.next += 1;
            }
            match self.unary()? {
                Some(query) => all.push(query),
                None if explicit => return Err("AND needs a term on each side".to_owned()),
                None => break,
            }
        }
        Ok(match all.len() {
            0 => None,
            1 => all.pop(),
            _ => Some(TextQuery::And(all)),
        })
    }

    fn unary(&mut self) -> Result<Option<TextQuery>, String> {
        match self.peek() {
            Some(Lexeme::Not) => {
                self.next += 1;
                match self.unary()? {
                    Some(inner) => Ok(Some(TextQuery::Not(Box::new(inner)))),
                    None => Err("NOT needs a term after it".to_owned()),
                }
            }
            Some(Lexeme::Open) => {
                self.next += 1;
                let inner = self.or()?;
                if self.peek() != Some(&Lexeme::Close) {
                    return Err("a '(' is not closed".to_owned());
                }
                self.next += 1;
                inner
                    .map(Some)
                    .ok_or_else(|| "empty parentheses".to_owned())
            }
            Some(Lexeme::Word { text, prefix } | Lexeme::Quoted { text, prefix }) => {
                let (text, prefix) = (text.clone(), *prefix);
                self.next += 1;
                let mut phrase = Vec::new();
                for_each_token(&text, |token| phrase.push(token.to_owned()));
                if phrase.is_empty() {
                    return Err(format!(
                        "{text:?} has no letters or digits, so it matches nothing"
                    ));
                }
                Ok(Some(TextQuery::Phrase {
                    tokens: phrase,
                    prefix,
                }))
            }
            Some(Lexeme::Close) | Some(Lexeme::And) | Some(Lexeme::Or) | None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn phrase(tokens: &[&str], prefix: bool) -> TextQuery {
        TextQuery::Phrase {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            prefix,
        }
    }

    #[test]
    fn parses_terms_phrases_prefixes_and_operators() {
        assert_eq!(
            TextQuery::parse("Error").unwrap(),
            phrase(&["error"], false)
        );
        assert_eq!(
            TextQuery::parse(r#"error AND "connection reset""#).unwrap(),
            TextQuery::And(vec![
                phrase(&["error"], false),
                phrase(&["connection", "reset"], false)
            ])
        );
        assert_eq!(
            TextQuery::parse("a b OR c").unwrap(),
            TextQuery::Or(vec![
                TextQuery::And(vec![phrase(&["a"], false), phrase(&["b"], false)]),
                phrase(&["c"], false)
            ])
        );
        assert_eq!(
            TextQuery::parse("-debug (timeout* OR 10.0.0.1)").unwrap(),
            TextQuery::And(vec![
                TextQuery::Not(Box::new(phrase(&["debug"], false))),
                TextQuery::Or(vec![
                    phrase(&["timeout"], true),
                    phrase(&["10", "0", "0", "1"], false)
                ])
            ])
        );
        assert_eq!(
            TextQuery::parse("x-ray").unwrap(),
            phrase(&["x", "ray"], false)
        );
        assert_eq!(TextQuery::parse("and").unwrap(), phrase(&["and"], false));
    }

    #[test]
    fn bad_queries_say_why() {
        for (query, why) in [
            ("", "no term"),
            ("\"open", "not closed"),
            ("(a", "not closed"),
            ("a OR", "each side"),
            ("AND a", "each side"),
            ("NOT", "after it"),
            ("a )", "unexpected"),
            ("--", "matches nothing"),
            ("-", "after it"),
            ("!!", "matches nothing"),
        ] {
            let error = TextQuery::parse(query).unwrap_err();
            assert!(error.to_string().contains(why), "{query:?}: {error}");
        }
    }

    #[test]
    fn matches_as_documented() {
        let line = r#"2024-08-01 ERROR [db] Connection reset by peer 10.0.0.1 after timeouts"#;
        for (query, expected) in [
            ("error", true),
            ("ERROR connection", true),
            (r#""connection reset""#, true),
            (r#""reset connection""#, false),
            ("timeout", false),
            ("timeout*", true),
            (r#""by pe*""#, true),
            ("10.0.0.1", true),
            ("10.0.0.2", false),
            ("warn OR reset", true),
            ("error -db", false),
            ("error NOT warn", true),
            ("(warn OR info) error", false),
        ] {
            assert_eq!(
                TextQuery::parse(query).unwrap().matches(line),
                expected,
                "{query}"
            );
        }
    }

    fn query_strategy() -> impl Strategy<Value = String> {
        let term =
            prop::sample::select(vec!["a", "b", "c", "k", "ab", "a*", "\"a b\"", "\"b c*\""]);
        let leaf = term.prop_map(str::to_owned);
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} {y})")),
                (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} OR {y})")),
                inner.prop_map(|x| format!("NOT {x}")),
            ]
        })
    }

    proptest! {
        /// The substring test before tokenizing changes no answer.
        #[test]
        fn the_quick_test_changes_no_answer(
            query in query_strategy(),
            text in prop::collection::vec(
                prop::sample::select(vec!["a", "B", "c", "ab", "A-b", "ΣΑΣ", "σας", "c*", "b.c"]),
                0..6,
            ),
        ) {
            let query = TextQuery::parse(&query).unwrap();
            let text = text.join(" ");
            prop_assert_eq!(query.matches(&text), query.matches_tokens(&tokens(&text)));
        }

        /// Deciding a column at once gives every text the answer it gets alone: texts that
        /// hold the searched token across their end, empty texts, texts whose lowercase form is
        /// not their ASCII lowercasing (the Kelvin sign is a `k`), a column starting mid-buffer.
        #[test]
        fn a_column_is_decided_as_its_texts_are(
            query in query_strategy(),
            texts in prop::collection::vec(
                prop::collection::vec(
                    prop::sample::select(vec![
                        "a", "B", "c", "ab", "A-b", "ΣΑΣ", "b\u{212A}", "\u{212A}", "a*", "", " ",
                    ]),
                    0..4,
                )
                .prop_map(|words| words.concat()),
                0..12,
            ),
            skip in 0usize..3,
        ) {
            let query = TextQuery::parse(&query).unwrap();
            let mut bytes = Vec::new();
            let mut offsets = vec![0i32];
            for text in &texts {
                bytes.extend_from_slice(text.as_bytes());
                offsets.push(i32::try_from(bytes.len()).unwrap());
            }
            let skip = skip.min(texts.len());
            let one_by_one: Vec<bool> = texts[skip..].iter().map(|t| query.matches(t)).collect();
            prop_assert_eq!(query.matcher().matches_column(&bytes, &offsets[skip..]), one_by_one);
        }

        /// Pruning by the tokens a text holds never rules out a text that matches.
        #[test]
        fn may_match_never_drops_a_match(
            query in query_strategy(),
            text in prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "ab", "abc"]), 0..6),
        ) {
            let query = TextQuery::parse(&query).unwrap();
            let text = text.join(" ");
            let held = tokens(&text);
            if query.matches(&text) {
                prop_assert!(query.may_match(&|token| held.iter().any(|t| t == token)));
            }
        }
    }
}
