//! JSON paths and their column names.
//!
//! A path is the list of object keys from the document root to a value. Its column name joins
//! the keys with `.`, escaping `\` as `\\` and `.` as `\.`, so that every path has exactly one
//! name and every name decodes to exactly one path (keys may contain dots, spaces, any unicode,
//! or be empty).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct JsonPath(pub Vec<String>);

impl JsonPath {
    pub fn new(segments: Vec<String>) -> Self {
        JsonPath(segments)
    }

    /// Parses a user-written dotted path (`commit.collection`) where `\.` escapes a dot.
    pub fn parse_dotted(text: &str) -> Self {
        Self::decode(text)
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The column name of this path.
    pub fn encode(&self) -> String {
        let length = self.0.iter().map(|segment| segment.len() + 1).sum();
        let mut out = String::with_capacity(length);
        for (i, segment) in self.0.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            push_escaped(&mut out, segment);
        }
        out
    }

    /// Inverse of [`JsonPath::encode`].
    pub fn decode(name: &str) -> Self {
        let mut segments = vec![String::new()];
        let mut chars = name.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let (Some(next), Some(last)) = (chars.next(), segments.last_mut()) {
                        last.push(next);
                    }
                }
                '.' => segments.push(String::new()),
                other => {
                    if let Some(last) = segments.last_mut() {
                        last.push(other);
                    }
                }
            }
        }
        JsonPath(segments)
    }

    /// True when `self` is a strict prefix of `other`.
    pub fn is_strict_prefix_of(&self, other: &JsonPath) -> bool {
        other.0.len() > self.0.len() && other.0[..self.0.len()] == self.0[..]
    }

    pub fn child(&self, key: &str) -> JsonPath {
        let mut segments = self.0.clone();
        segments.push(key.to_owned());
        JsonPath(segments)
    }
}

/// Appends one escaped key to a column name under construction.
pub(crate) fn push_escaped(out: &mut String, segment: &str) {
    // Most segments need no escape: copied whole (a point read encodes its path per statement).
    if !segment.contains(['\\', '.']) {
        out.push_str(segment);
        return;
    }
    for c in segment.chars() {
        if c == '\\' || c == '.' {
            out.push('\\');
        }
        out.push(c);
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_with_awkward_keys() {
        let cases: Vec<Vec<&str>> = vec![
            vec!["commit", "collection"],
            vec!["a.b", "c"],
            vec![""],
            vec!["", ""],
            vec!["back\\slash", "dot.", ".", "\\"],
            vec!["ünï cödé", "sp ace"],
        ];
        for case in cases {
            let path = JsonPath(case.iter().map(|s| s.to_string()).collect());
            assert_eq!(JsonPath::decode(&path.encode()), path, "{case:?}");
        }
        assert_eq!(JsonPath(vec!["a.b".into()]).encode(), "a\\.b");
    }
}
