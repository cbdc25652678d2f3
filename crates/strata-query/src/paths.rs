//! How a JSON path is typed in SQL, table-wide, and the virtual columns that carry paths.
//!
//! Storage types a path per part; SQL needs one type per query. The rule (ADR 0003):
//! - dotted access (`data.a.b`) gives the path's *natural* type: `Utf8` if every stored value
//!   is a string, `Int64` if every value is an integer, `Float64` if every value is a number
//!   and at least one is not an `i64`, `Boolean` if every value is a boolean, and otherwise
//!   (mixed kinds, arrays, objects) text with `->>` semantics, so that a string reads the same
//!   whatever else the path holds. JSON `null` is SQL NULL in every dotted mode;
//! - a comparison of a dotted path with a literal is typed by the literal, not by the path
//!   (see `literal_typing`), so its answer does not change when other documents arrive;
//! - `data->'a'` gives the JSON text of the value (`'"x"'`, `'1.10'`, `'{"k":1}'`, `'null'`);
//! - `data->>'a'` gives text: a string's contents, any other value's JSON text, NULL for `null`.
//!
//! Each (path, mode) a query reads becomes one virtual column of the table scan, named like the
//! SQL that asked for it (`data.commit.collection`, `data->commit`, `data->>commit`).

use std::collections::{BTreeMap, BTreeSet};

use arrow::datatypes::DataType;
use strata_format::{Manifest, PartEntry};
use strata_json::{JsonPath, Kind};

/// How a path is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathMode {
    String,
    Int,
    Float,
    Bool,
    /// JSON text of the value.
    Json,
    /// `->>` text.
    Text,
    /// Dotted access to a path of several kinds: `->>` text (a string's contents, any other
    /// value's JSON text, SQL NULL for `null`).
    Mixed,
    /// The exact JSON text of numeric values only (others NULL), for exact comparisons and
    /// casts.
    Number,
}

impl PathMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PathMode::String => "string",
            PathMode::Int => "int",
            PathMode::Float => "float",
            PathMode::Bool => "bool",
            PathMode::Json => "json",
            PathMode::Text => "text",
            PathMode::Mixed => "mixed",
            PathMode::Number => "number",
        }
    }

    pub fn parse(s: &str) -> Option<PathMode> {
        [
            PathMode::String,
            PathMode::Int,
            PathMode::Float,
            PathMode::Bool,
            PathMode::Json,
            PathMode::Text,
            PathMode::Mixed,
            PathMode::Number,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    pub fn data_type(self) -> DataType {
        match self {
            PathMode::Int => DataType::Int64,
            PathMode::Float => DataType::Float64,
            PathMode::Bool => DataType::Boolean,
            // Views avoid copying strings out of Parquet pages and are what DataFusion's
            // string kernels and group-by are fastest on.
            PathMode::String | PathMode::Text | PathMode::Mixed | PathMode::Number => {
                DataType::Utf8View
            }
            PathMode::Json => DataType::Utf8,
        }
    }

    /// Modes whose values are JSON text (marked so outputs can embed them as JSON).
    pub fn is_json(self) -> bool {
        self == PathMode::Json
    }

    /// What a virtual column name puts before and after the path in this mode.
    fn name_affixes(self) -> (&'static str, &'static str) {
        match self {
            PathMode::Json => ("data->", ""),
            PathMode::Text => ("data->>", ""),
            PathMode::String => ("data.", ""),
            PathMode::Int => ("data.", "::bigint"),
            PathMode::Float => ("data.", "::double"),
            PathMode::Bool => ("data.", "::boolean"),
            PathMode::Mixed => ("data.", "::mixed"),
            PathMode::Number => ("data.", "::number"),
        }
    }

    /// Modes the planner gives dotted access (`data.a.b`), whose comparisons with literals are
    /// typed by the literal.
    pub fn is_dotted(self) -> bool {
        matches!(
            self,
            PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool | PathMode::Mixed
        )
    }
}

/// A (path, mode) read by a query, i.e. one virtual column.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathColumn {
    /// Encoded path (see `JsonPath::encode`); empty for the whole document.
    pub path: String,
    pub mode: PathMode,
}

impl PathColumn {
    /// The column name shown in plans, shaped like the SQL that reads it. One path may be read
    /// in several modes by one query (`data.k` selected as mixed text and compared as a string),
    /// so every mode but the string one carries a suffix.
    pub fn column_name(&self) -> String {
        let (prefix, suffix) = self.mode.name_affixes();
        format!("{prefix}{}{suffix}", self.path)
    }

    /// Whether `name` is this column's [`Self::column_name`], without building the name
    /// (planning asks this of every virtual column of a table for every filter).
    pub fn has_name(&self, name: &str) -> bool {
        let (prefix, suffix) = self.mode.name_affixes();
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .is_some_and(|path| path == self.path)
    }
}

/// What the table's manifest says about one path, over all parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFacts {
    /// Kinds stored at the path (columns and remainder), `null` excluded.
    pub kinds: BTreeSet<Kind>,
    /// Some part stores values *under* the path (it is an object there).
    pub is_object: bool,
}

/// Path facts of a table snapshot, for typing paths at planning time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathIndex {
    facts: BTreeMap<String, PathFacts>,
    /// Some part's remainder path list was truncated: unknown paths may exist.
    open_ended: bool,
}

impl PathIndex {
    pub fn from_manifest(manifest: &Manifest) -> Self {
        let mut index = PathIndex::default();
        for part in &manifest.parts {
            index.add_part(part);
        }
        index
    }

    /// The index of `after`, given this index of `before`: this one with the parts added when
    /// `after` lists every part of `before` first, in order (a part's paths never change);
    /// built from every part otherwise (a merge or a fold removed some).
    pub fn with_parts_added(&self, before: &Manifest, after: &Manifest) -> Self {
        let kept = before.parts.len() <= after.parts.len()
            && before
                .parts
                .iter()
                .zip(&after.parts)
                .all(|(old, new)| old.file == new.file);
        if !kept {
            return PathIndex::from_manifest(after);
        }
        let mut index = self.clone();
        for part in &after.parts[before.parts.len()..] {
            index.add_part(part);
        }
        index
    }

    fn add_part(&mut self, part: &PartEntry) {
        self.open_ended |= part.remainder_paths_truncated;
        let stored = part
            .columns
            .iter()
            .map(|(name, kind)| (name, vec![*kind]))
            .chain(
                part.remainder_paths
                    .iter()
                    .map(|(name, kinds)| (name, kinds.iter().copied().collect())),
            );
        for (name, kinds) in stored {
            let path = JsonPath::decode(name);
            let facts = self.facts.entry(name.clone()).or_default();
            facts
                .kinds
                .extend(kinds.into_iter().filter(|k| *k != Kind::Null));
            // Every proper prefix of a stored path is an object somewhere.
            let segments = path.segments();
            for len in 1..segments.len() {
                let prefix = JsonPath::new(segments[..len].to_vec()).encode();
                self.facts.entry(prefix).or_default().is_object = true;
            }
        }
    }

    /// The natural mode of a path for dotted access; None when no part stores it.
    pub fn natural_mode(&self, encoded_path: &str) -> Option<PathMode> {
        let Some(facts) = self.facts.get(encoded_path) else {
            return self.open_ended.then_some(PathMode::Mixed);
        };
        if facts.is_object {
            return Some(PathMode::Mixed);
        }
        let kinds = &facts.kinds;
        let numeric = kinds
            .iter()
            .all(|k| matches!(k, Kind::Int | Kind::Float | Kind::Number));
        Some(match kinds.iter().next() {
            None => PathMode::String,
            Some(Kind::String) if kinds.len() == 1 => PathMode::String,
            Some(Kind::Int) if kinds.len() == 1 => PathMode::Int,
            Some(Kind::Bool) if kinds.len() == 1 => PathMode::Bool,
            Some(_) if numeric => PathMode::Float,
            Some(_) => PathMode::Mixed,
        })
    }
}

/// A part entry of `rows` rows storing `columns`, nothing else known (for tests).
#[cfg(test)]
pub(crate) fn part_entry(file: &str, rows: u64, columns: &[(&str, Kind)]) -> PartEntry {
    PartEntry {
        file: file.into(),
        rows,
        bytes: 0,
        columns: columns.iter().map(|(p, k)| ((*p).to_owned(), *k)).collect(),
        remainder_paths: BTreeMap::new(),
        remainder_paths_truncated: false,
        sort_key_min: BTreeMap::new(),
        sort_key_max: BTreeMap::new(),
        full: false,
        key_runs: None,
        xxh64: None,
        deletes: None,
        keys: None,
        newest_write: None,
        text_index: None,
        indexes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use strata_format::{Manifest, PartEntry, TableSettings};
    use strata_json::Kind;

    use super::{PathIndex, part_entry};

    fn part(file: &str, columns: &[(&str, Kind)]) -> PartEntry {
        part_entry(file, 1, columns)
    }

    fn manifest(parts: &[&PartEntry]) -> Manifest {
        Manifest {
            parts: parts.iter().map(|p| Arc::new((*p).clone())).collect(),
            ..Manifest::new(TableSettings::sorted_by(Vec::new(), 64))
        }
    }

    #[test]
    fn an_index_with_parts_added_is_the_index_of_the_new_version() {
        let a = part(
            "a.parquet",
            &[("only_a", Kind::String), ("k", Kind::String)],
        );
        let b = part("b.parquet", &[("x.y", Kind::Int)]);
        let c = part("c.parquet", &[("k", Kind::Int)]);
        let before = manifest(&[&a, &b]);
        let index = PathIndex::from_manifest(&before);
        // A commit added a part: its paths join the index.
        let appended = manifest(&[&a, &b, &c]);
        assert_eq!(
            index.with_parts_added(&before, &appended),
            PathIndex::from_manifest(&appended)
        );
        // A merge removed one: `only_a` is no longer stored anywhere.
        let merged = manifest(&[&b, &c]);
        let rebuilt = index.with_parts_added(&before, &merged);
        assert_eq!(rebuilt, PathIndex::from_manifest(&merged));
        assert_eq!(rebuilt.natural_mode("only_a"), None);
    }
}
