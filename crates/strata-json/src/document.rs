//! Parsing one input line into a document, or a precise reason why it was rejected.
//!
//! [`parse_document`] streams the line through serde_json's deserializer straight into a flat
//! [`Document`]: one entry per object opened or closed and per leaf, all text in one buffer. No
//! tree of the document is ever built. Arrays (and empty objects) are leaves, written as compact
//! JSON text while they are read, so an array of millions of objects costs its text and never a
//! tree of millions of maps.
//!
//! Rules, identical to the tree parser [`parse_document_tree`] that tests compare against:
//! numbers keep their exact text (serde_json's `arbitrary_precision`); duplicate keys follow the
//! last-one-wins rule (as JavaScript, PostgreSQL `jsonb` and Elasticsearch do); object keys inside
//! array text are sorted; nesting is bounded by [`MAX_NESTING_DEPTH`], checked by a byte scan
//! *before* the recursive parser runs so that a hostile document can never overflow the stack.
//! The rare document with a duplicate key, and every line that is not an object, goes through the
//! tree parser, which applies the rule and words the rejection.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::DocumentError;
use crate::kind::{Kind, Leaf, Stored, classify_number, push_json_text};

/// Deepest nesting of arrays/objects accepted in one document.
///
/// Real data rarely passes 100 levels; the promise is at least 1,000. Deeper documents are
/// rejected with [`DocumentError::TooDeep`]. Every recursive routine in Strata (parse, shred,
/// reconstruct, serialise) runs on threads whose stacks are sized for this limit.
pub const MAX_NESTING_DEPTH: usize = 2_048;

/// With `arbitrary_precision`, serde_json hands a number to a visitor as a one-entry map whose
/// key is this token and whose value is the number's exact text (serde_json's own `Value` reads
/// numbers the same way, so a document key spelled like this is read as a number by both).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Objects with more keys than this are checked for duplicates by sorting, not pairwise.
const PAIRWISE_KEY_CHECK: usize = 16;

/// A byte range of [`Document::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

/// A leaf value as held by a [`Document`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    String(Span),
    Int(i64),
    Float(f64),
    Number(Span),
    Bool(bool),
    Null,
    Json(Span),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Entry {
    Open(Span),
    Close,
    Leaf(Span, Slot),
}

/// One parsed JSON object, flat: [`Document::fields`] yields objects opening and closing and
/// leaves with their keys, in document order. Keys are unique within each object.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Document {
    text: String,
    entries: Vec<Entry>,
    /// Some object of the input, at any depth, had a key twice (the last one was kept).
    duplicate_keys: bool,
}

/// One step of walking a [`Document`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// A non-empty object under this key opens; its fields follow until the matching `Close`.
    Open(&'a str),
    Close,
    /// A leaf value under this key.
    Leaf(&'a str, Leaf<'a>),
}

impl Document {
    /// The document's fields in order.
    pub fn fields(&self) -> impl Iterator<Item = Field<'_>> + '_ {
        self.entries.iter().map(|entry| match *entry {
            Entry::Open(key) => Field::Open(self.str(key)),
            Entry::Close => Field::Close,
            Entry::Leaf(key, slot) => Field::Leaf(self.str(key), self.leaf(slot)),
        })
    }

    /// The document of a parsed JSON object (arrays become their compact text).
    pub fn from_object(object: &Map<String, Value>) -> Document {
        let mut document = Document::default();
        document.push_object(object);
        document
    }

    /// Whether the input had a key twice in one object, at any depth (inside arrays too); the
    /// document holds the last value of each such key (ADR 0002).
    pub fn has_duplicate_keys(&self) -> bool {
        self.duplicate_keys
    }

    /// The document as compact JSON text, keys in document order.
    pub fn to_json_text(&self) -> String {
        let mut out = String::with_capacity(self.text.len() + 2 * self.entries.len() + 2);
        out.push('{');
        // Whether the object being written has a field already (one flag per open object).
        let mut has_field = vec![false];
        for field in self.fields() {
            let mut key_of = |key: &str, out: &mut String| {
                if let Some(last) = has_field.last_mut() {
                    if *last {
                        out.push(',');
                    }
                    *last = true;
                }
                push_json_text(Kind::String, Stored::Text(key), out);
                out.push(':');
            };
            match field {
                Field::Open(key) => {
                    key_of(key, &mut out);
                    out.push('{');
                    has_field.push(false);
                }
                Field::Close => {
                    out.push('}');
                    has_field.pop();
                }
                Field::Leaf(key, leaf) => {
                    key_of(key, &mut out);
                    leaf.push_json_text(&mut out);
                }
            }
        }
        out.push('}');
        out
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    fn str(&self, span: Span) -> &str {
        self.text.get(span.start..span.end).unwrap_or_default()
    }

    fn leaf(&self, slot: Slot) -> Leaf<'_> {
        match slot {
            Slot::String(span) => Leaf::String(self.str(span)),
            Slot::Int(i) => Leaf::Int(i),
            Slot::Float(f) => Leaf::Float(f),
            Slot::Number(span) => Leaf::Number(self.str(span)),
            Slot::Bool(b) => Leaf::Bool(b),
            Slot::Null => Leaf::Null,
            Slot::Json(span) => Leaf::Json(self.str(span)),
        }
    }

    fn push_str(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span {
            start,
            end: self.text.len(),
        }
    }

    fn span_from(&self, start: usize) -> Span {
        Span {
            start,
            end: self.text.len(),
        }
    }

    /// The slot of a number with exact text `text`.
    fn push_number(&mut self, text: &str) -> Slot {
        let span = self.push_str(text);
        self.number_slot(span)
    }

    /// The slot of the number whose exact text is `span`; integers and floats give their text
    /// back to the buffer.
    fn number_slot(&mut self, span: Span) -> Slot {
        let slot = match classify_number(self.str(span)) {
            Leaf::Int(i) => Slot::Int(i),
            Leaf::Float(f) => Slot::Float(f),
            _ => return Slot::Number(span),
        };
        self.text.truncate(span.start);
        slot
    }

    fn push_object(&mut self, object: &Map<String, Value>) {
        for (key, value) in object {
            self.push_value(key, value);
        }
    }

    /// Appends `value` under `key` to the innermost open object (the top level of a document
    /// built from nothing), as [`Document::from_object`] would hold it. The caller keeps the keys
    /// of an object unique.
    pub fn push_value(&mut self, key: &str, value: &Value) {
        let key = self.push_str(key);
        let slot = match value {
            Value::Object(inner) if !inner.is_empty() => {
                self.entries.push(Entry::Open(key));
                self.push_object(inner);
                self.entries.push(Entry::Close);
                return;
            }
            Value::String(s) => Slot::String(self.push_str(s)),
            Value::Number(n) => self.push_number(n.as_str()),
            Value::Bool(b) => Slot::Bool(*b),
            Value::Null => Slot::Null,
            Value::Array(_) | Value::Object(_) => Slot::Json(self.push_str(&value.to_string())),
        };
        self.entries.push(Entry::Leaf(key, slot));
    }

    /// Appends a string under `key`, as [`Document::push_value`] does a JSON string, without
    /// the string being a `Value` first (a log pipeline's fields are slices of its line).
    pub fn push_string(&mut self, key: &str, value: &str) {
        let key = self.push_str(key);
        let slot = Slot::String(self.push_str(value));
        self.entries.push(Entry::Leaf(key, slot));
    }

    /// Appends an integer under `key`, as [`Document::push_value`] does a JSON number of
    /// the integer's text.
    pub fn push_int(&mut self, key: &str, value: i64) {
        let key = self.push_str(key);
        self.entries.push(Entry::Leaf(key, Slot::Int(value)));
    }
}

/// Parses one NDJSON line (without its trailing newline) into a [`Document`].
pub fn parse_document(line: &[u8]) -> Result<Document, DocumentError> {
    let text = checked_text(line)?;
    if !text.trim_start().starts_with('{') {
        // Not an object: the tree parser names what it is (or why it is not JSON).
        return parse_document_tree(line).map(|object| Document::from_object(&object));
    }
    let mut builder = Builder::default();
    // Keys and strings take less text than the line (no quotes, no punctuation), and a field
    // takes at least a few bytes of it: reserving once spares the reallocations of growth.
    builder.document.text.reserve(text.len());
    builder
        .document
        .entries
        .reserve((text.len() / 16).min(1024));
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    deserializer
        .deserialize_map(ObjectVisitor {
            builder: &mut builder,
        })
        .and_then(|()| deserializer.end())
        .map_err(|e| syntax_error(text, &e))?;
    if builder.needs_tree {
        let mut document =
            parse_document_tree(line).map(|object| Document::from_object(&object))?;
        document.duplicate_keys = builder.duplicate_keys;
        return Ok(document);
    }
    builder.document.duplicate_keys = builder.duplicate_keys;
    Ok(builder.document)
}

/// Parses one NDJSON line into a serde_json tree: the reference that [`parse_document`] agrees
/// with (tests compare the two), and its path for documents with duplicate keys.
pub fn parse_document_tree(line: &[u8]) -> Result<Map<String, Value>, DocumentError> {
    let text = checked_text(line)?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value: Value =
        serde::Deserialize::deserialize(&mut deserializer).map_err(|e| syntax_error(text, &e))?;
    deserializer.end().map_err(|e| syntax_error(text, &e))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(DocumentError::NotAnObject {
            found: json_type_name(&other),
        }),
    }
}

/// Why serde_json rejected `text`. Its message for a lone surrogate escape speaks of an
/// "unexpected end of hex escape" (or calls a trailing surrogate "leading"), so an error at or
/// after a lone surrogate is reported as that surrogate, with its escape and byte offset.
fn syntax_error(text: &str, error: &serde_json::Error) -> DocumentError {
    // serde_json counts lines from 1 and columns in bytes from 1.
    let line_start: usize = text
        .split_inclusive('\n')
        .take(error.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let error_offset = line_start + error.column();
    match find_lone_surrogate(text) {
        Some((offset, escape)) if offset < error_offset => DocumentError::LoneSurrogate {
            escape: escape.to_owned(),
            offset,
        },
        _ => DocumentError::Syntax {
            message: error.to_string(),
        },
    }
}

/// The byte offset and text of the first `\u` escape (four hex digits) in a string of `text`
/// that is a surrogate without its other half.
fn find_lone_surrogate(text: &str) -> Option<(usize, &str)> {
    let bytes = text.as_bytes();
    let unit_at = |i: usize| -> Option<u32> {
        if bytes.get(i..i + 2)? != b"\\u" {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(bytes.get(i + 2..i + 6)?).ok()?, 16).ok()
    };
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match (in_string, bytes[i]) {
            (false, b'"') => in_string = true,
            (true, b'"') => in_string = false,
            (true, b'\\') => match unit_at(i) {
                Some(0xD800..=0xDBFF) if matches!(unit_at(i + 6), Some(0xDC00..=0xDFFF)) => {
                    i += 12;
                    continue;
                }
                Some(0xD800..=0xDFFF) => return Some((i, text.get(i..i + 6)?)),
                // Any other escape: skip the backslash and the character it escapes.
                _ => i += 1,
            },
            _ => {}
        }
        i += 1;
    }
    None
}

/// The line as text once it is known to be UTF-8, not blank and not nested too deep.
fn checked_text(line: &[u8]) -> Result<&str, DocumentError> {
    let text = std::str::from_utf8(line).map_err(|e| DocumentError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })?;
    if text.trim().is_empty() {
        return Err(DocumentError::Empty);
    }
    check_depth(line)?;
    Ok(text)
}

/// A document under construction, and the keys of the objects currently open (to find
/// duplicates).
#[derive(Default)]
struct Builder {
    document: Document,
    open_keys: Vec<Span>,
    /// A duplicate key, or a top-level object that serde_json reads as a number: the tree
    /// parser decides.
    needs_tree: bool,
    /// Some object had a key twice (in array text too).
    duplicate_keys: bool,
}

impl Builder {
    /// Reads the remaining entries of an object whose first key (if any) was already read.
    fn read_entries<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        mut key: Option<Span>,
    ) -> Result<(), A::Error> {
        let level = self.open_keys.len();
        while let Some(k) = key {
            self.open_keys.push(k);
            map.next_value_seed(FieldSeed {
                builder: self,
                key: k,
            })?;
            key = map.next_key_seed(TextSeed {
                text: &mut self.document.text,
            })?;
        }
        if has_duplicates(&self.document, &self.open_keys[level..]) {
            self.needs_tree = true;
            self.duplicate_keys = true;
        }
        self.open_keys.truncate(level);
        Ok(())
    }

    fn leaf(&mut self, key: Span, slot: Slot) {
        self.document.entries.push(Entry::Leaf(key, slot));
    }
}

fn has_duplicates(document: &Document, keys: &[Span]) -> bool {
    if keys.len() <= PAIRWISE_KEY_CHECK {
        return keys.iter().enumerate().any(|(i, &a)| {
            keys[i + 1..]
                .iter()
                .any(|&b| document.str(a) == document.str(b))
        });
    }
    let mut texts: Vec<&str> = keys.iter().map(|&k| document.str(k)).collect();
    texts.sort_unstable();
    texts.windows(2).any(|w| w[0] == w[1])
}

/// The top-level object.
struct ObjectVisitor<'b> {
    builder: &'b mut Builder,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let first = map.next_key_seed(TextSeed {
            text: &mut self.builder.document.text,
        })?;
        if first.is_some_and(|key| self.builder.document.str(key) == NUMBER_TOKEN) {
            self.builder.needs_tree = true;
        }
        self.builder.read_entries(&mut map, first)
    }
}

/// Appends a string (a key, or a number's text) to the document's text; yields its span.
struct TextSeed<'t> {
    text: &'t mut String,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = Span;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Span, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = Span;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, s: &str) -> Result<Span, E> {
        let start = self.text.len();
        self.text.push_str(s);
        Ok(Span {
            start,
            end: self.text.len(),
        })
    }
}

/// Appends a number's exact text, as serde_json hands it over under [`NUMBER_TOKEN`].
struct NumberSeed<'t> {
    text: &'t mut String,
}

impl<'de> DeserializeSeed<'de> for NumberSeed<'_> {
    type Value = Span;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Span, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed<'_> {
    type Value = Span;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("string containing a number")
    }

    /// serde_json's own number text, owned: already validated.
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Span, E> {
        TextSeed { text: self.text }.visit_str(&s)
    }

    /// A document that spells the token as a key: valid only if the string is a number, as
    /// serde_json's tree has it.
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Span, E> {
        s.parse::<Number>()
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(s), &self))?;
        TextSeed { text: self.text }.visit_str(s)
    }
}

/// The value under `key` of an object being read.
struct FieldSeed<'b> {
    builder: &'b mut Builder,
    key: Span,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        self.builder.leaf(self.key, Slot::Bool(b));
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.builder.leaf(self.key, Slot::Null);
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        let span = self.builder.document.push_str(s);
        self.builder.leaf(self.key, Slot::String(span));
        Ok(())
    }

    fn visit_i64<E>(self, i: i64) -> Result<(), E> {
        self.visit_number(&Number::from(i).to_string())
    }

    fn visit_u64<E>(self, u: u64) -> Result<(), E> {
        self.visit_number(&Number::from(u).to_string())
    }

    fn visit_f64<E>(self, f: f64) -> Result<(), E> {
        let text = Number::from_f64(f)
            .map(|n| n.to_string())
            .unwrap_or_default();
        self.visit_number(&text)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let document = &mut self.builder.document;
        let start = document.text.len();
        CanonicalText {
            out: &mut document.text,
            duplicate_keys: &mut self.builder.duplicate_keys,
        }
        .visit_seq(seq)?;
        let span = document.span_from(start);
        self.builder.leaf(self.key, Slot::Json(span));
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let builder = self.builder;
        let first = map.next_key_seed(TextSeed {
            text: &mut builder.document.text,
        })?;
        let Some(first) = first else {
            let span = builder.document.push_str("{}");
            builder.leaf(self.key, Slot::Json(span));
            return Ok(());
        };
        if builder.document.str(first) == NUMBER_TOKEN {
            builder.document.text.truncate(first.start);
            let span = map.next_value_seed(NumberSeed {
                text: &mut builder.document.text,
            })?;
            let slot = builder.document.number_slot(span);
            builder.leaf(self.key, slot);
            return Ok(());
        }
        builder.document.entries.push(Entry::Open(self.key));
        builder.read_entries(&mut map, Some(first))?;
        builder.document.entries.push(Entry::Close);
        Ok(())
    }
}

impl FieldSeed<'_> {
    fn visit_number<E>(self, text: &str) -> Result<(), E> {
        let slot = self.builder.document.push_number(text);
        self.builder.leaf(self.key, slot);
        Ok(())
    }
}

/// Writes any JSON value as compact text exactly as serde_json writes its tree (`Value`'s
/// `Display`): keys sorted, the last of duplicate keys kept, numbers in their input text.
struct CanonicalText<'o> {
    out: &'o mut String,
    /// Set when an object had a key twice.
    duplicate_keys: &'o mut bool,
}

impl<'de> DeserializeSeed<'de> for CanonicalText<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CanonicalText<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        push_json_text(Kind::Bool, Stored::Bool(b), self.out);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        push_json_text(Kind::Null, Stored::Null, self.out);
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        push_json_text(Kind::String, Stored::Text(s), self.out);
        Ok(())
    }

    fn visit_i64<E>(self, i: i64) -> Result<(), E> {
        self.out.push_str(&Number::from(i).to_string());
        Ok(())
    }

    fn visit_u64<E>(self, u: u64) -> Result<(), E> {
        self.out.push_str(&Number::from(u).to_string());
        Ok(())
    }

    fn visit_f64<E>(self, f: f64) -> Result<(), E> {
        if let Some(n) = Number::from_f64(f) {
            self.out.push_str(&n.to_string());
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push('[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(',');
            }
            if seq
                .next_element_seed(CanonicalText {
                    out: &mut *self.out,
                    duplicate_keys: &mut *self.duplicate_keys,
                })?
                .is_none()
            {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut key_text = String::new();
        let mut entries: Vec<(String, String)> = Vec::new();
        while map
            .next_key_seed(TextSeed {
                text: &mut key_text,
            })?
            .is_some()
        {
            let key = std::mem::take(&mut key_text);
            if entries.is_empty() && key == NUMBER_TOKEN {
                map.next_value_seed(NumberSeed { text: self.out })?;
                return Ok(());
            }
            let mut value = String::new();
            map.next_value_seed(CanonicalText {
                out: &mut value,
                duplicate_keys: &mut *self.duplicate_keys,
            })?;
            entries.push((key, value));
        }
        // A stable sort keeps duplicates in input order: the last of each run wins.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        self.out.push('{');
        let mut first = true;
        for (i, (key, value)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                *self.duplicate_keys = true;
                continue;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            push_json_text(Kind::String, Stored::Text(key), self.out);
            self.out.push(':');
            self.out.push_str(value);
        }
        self.out.push('}');
        Ok(())
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

    /// The document's leaves as sorted (path, leaf) texts: equal for equal documents whatever
    /// their key order.
    fn leaves(document: &Document) -> Vec<String> {
        let mut path: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for field in document.fields() {
            match field {
                Field::Open(key) => path.push(key),
                Field::Close => {
                    path.pop();
                }
                Field::Leaf(key, leaf) => out.push(format!("{path:?}/{key:?} = {leaf:?}")),
            }
        }
        out.sort();
        out
    }

    #[test]
    fn json_text_gives_the_document_back() {
        for line in [
            r#"{}"#,
            r#"{"a":1,"b":{"c":"x\"y","d":{"e":[1,{"f":null}]},"g":{}},"h":1.10,"i":true}"#,
            r#"{"k\u00e9y":"\ud83d\ude00","n":-0,"big":18446744073709551616}"#,
        ] {
            let document = parse_document(line.as_bytes()).unwrap();
            let text = document.to_json_text();
            assert_eq!(
                parse_document(text.as_bytes()).unwrap(),
                document,
                "{line} -> {text}"
            );
        }
    }

    /// The streaming parser agrees with the tree parser on acceptance and on every leaf.
    fn assert_agrees(line: &str) {
        let streamed = parse_document(line.as_bytes());
        let tree = parse_document_tree(line.as_bytes());
        match (&streamed, &tree) {
            (Ok(streamed), Ok(tree)) => {
                assert_eq!(
                    leaves(streamed),
                    leaves(&Document::from_object(tree)),
                    "{line}"
                )
            }
            (Err(_), Err(_)) => {}
            _ => panic!("{line}: streamed {streamed:?}, tree {tree:?}"),
        }
    }

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
        assert!(matches!(
            parse_document(b"{\"a\": [1, {\"b\": tru}]}"),
            Err(DocumentError::Syntax { .. })
        ));
    }

    #[test]
    fn duplicate_keys_last_one_wins() {
        let doc = parse_document(br#"{"a": 1, "b": {"c": 2}, "a": "two", "b": 3}"#).unwrap();
        assert_eq!(
            doc.fields().collect::<Vec<_>>(),
            vec![
                Field::Leaf("a", Leaf::String("two")),
                Field::Leaf("b", Leaf::Int(3)),
            ]
        );
        // Inside array text too, and at any depth.
        let doc = parse_document(br#"{"x": {"y": [{"k": 1, "k": 2}], "y": 0}}"#).unwrap();
        assert_eq!(
            doc.fields().collect::<Vec<_>>(),
            vec![
                Field::Open("x"),
                Field::Leaf("y", Leaf::Int(0)),
                Field::Close
            ]
        );
        let doc = parse_document(br#"{"y": [{"k": 1, "j": [], "k": 2}]}"#).unwrap();
        assert_eq!(
            doc.fields().collect::<Vec<_>>(),
            vec![Field::Leaf("y", Leaf::Json(r#"[{"j":[],"k":2}]"#))]
        );
    }

    #[test]
    fn lone_surrogates_are_named_with_their_offset() {
        for (line, escape, offset) in [
            (r#"{"a": "x\ud800"}"#, r"\ud800", 8),
            (r#"{"a": "\uDBFFz"}"#, r"\uDBFF", 7),
            (r#"{"a": "\udc00"}"#, r"\udc00", 7),
            (r#"{"a": "\ud800\u0041"}"#, r"\ud800", 7),
            (r#"{"\\": 1, "k\ud83d": 2}"#, r"\ud83d", 12),
            (r#"{"a": ["\ud83d\ude00", "\ude00"]}"#, r"\ude00", 24),
            (r#"[{"a": "\ud800"}]"#, r"\ud800", 8),
        ] {
            let expected = DocumentError::LoneSurrogate {
                escape: escape.to_owned(),
                offset,
            };
            assert_eq!(
                parse_document(line.as_bytes()),
                Err(expected.clone()),
                "{line}"
            );
            assert_eq!(
                parse_document_tree(line.as_bytes()),
                Err(expected),
                "{line}"
            );
        }
        let message = parse_document(br#"{"a": "\ud800"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(r"lone surrogate escape \ud800 at byte 7"),
            "{message}"
        );
        // A pair is a character; an error before a lone surrogate is that error.
        assert!(parse_document(br#"{"a": "\ud83d\ude00"}"#).is_ok());
        assert!(matches!(
            parse_document(br#"{"a": tru, "b": "\ud800"}"#),
            Err(DocumentError::Syntax { .. })
        ));
        // An escaped backslash before `u` is no escape.
        assert!(parse_document(br#"{"a": "\\ud800"}"#).is_ok());
    }

    #[test]
    fn duplicate_keys_are_flagged() {
        for (line, duplicates) in [
            (r#"{"a": 1, "b": 2}"#, false),
            (r#"{"a": 1, "a": 2}"#, true),
            (r#"{"x": {"a": 1, "a": 2}}"#, true),
            (r#"{"x": [{"a": 1, "a": 2}]}"#, true),
            (r#"{"x": [{"a": 1}, {"a": 2}], "y": {"a": 3}}"#, false),
        ] {
            let document = parse_document(line.as_bytes()).unwrap();
            assert_eq!(document.has_duplicate_keys(), duplicates, "{line}");
        }
    }

    #[test]
    fn streams_what_the_tree_parser_reads() {
        let wide: String = (0..40).map(|i| format!("\"k{i}\": {i},")).collect();
        for line in [
            r#"{"s": "007", "i": 7, "f": 0.1, "n": 1.10, "big": 18446744073709551616, "e": 1e400}"#,
            r#"{"neg": -0, "t": true, "f": false, "z": null, "o": {}, "a": [], "nested": {"x": {}}}"#,
            r#"{"arr": [1, "two", 3.0, 1e2, null, true, [[]], {"b": 1, "a": {"d": [], "c": 0}}]}"#,
            r#"{"esc": "a\"b\\c\u0000\u00e9\n/\/", "k\u00e9y": {"": {" ": ["\ud83d\ude00"]}}}"#,
            r#"{"a": {"$serde_json::private::Number": "12.50"}}"#,
            r#"{"a": [{"$serde_json::private::Number": "-3"}]}"#,
            r#"{"a": {"$serde_json::private::Number": "abc"}}"#,
            r#"{"a": [{"$serde_json::private::Number": "abc"}]}"#,
            r#"{"a": {"$serde_json::private::Number": 5}}"#,
            r#"{"$serde_json::private::Number": "5"}"#,
            r#"{"$serde_json::private::Number": "x"}"#,
            r#"{"a": 1, "a": 2, "b": {"c": 1, "c": {"d": 2}}}"#,
            &format!("{{{wide} \"k7\": \"dup\"}}"),
            &format!("{{{wide} \"last\": 0}}"),
            "  {\"padded\" : [ 1 , 2 ] }  ",
        ] {
            assert_agrees(line);
        }
    }

    #[test]
    fn array_text_is_the_tree_text() {
        let line = r#"{"a": [ {"z": 1, "y": [ 1.10 , "\u00e9\u0000" ], "x": {} }, 18446744073709551616 ]}"#;
        let tree = parse_document_tree(line.as_bytes()).unwrap();
        let doc = parse_document(line.as_bytes()).unwrap();
        assert_eq!(
            doc.fields().collect::<Vec<_>>(),
            vec![Field::Leaf("a", Leaf::Json(&tree["a"].to_string()))]
        );
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
        let ok_array = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_NESTING_DEPTH - 1),
            "]".repeat(MAX_NESTING_DEPTH - 1)
        );
        assert_agrees(&ok_array);
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
