//! Dissect patterns, as Elasticsearch's and Logstash's dissect processor reads them: literal
//! text with `%{field}` slots, each slot taking the text up to the literal that follows it.
//!
//! `%{name}` a field; `%{}` or `%{?name}` a slot whose text is skipped; `%{+name}` appends to
//! `name` (with the pipeline's separator); `%{name->}` also skips repeats of the delimiter that
//! follows (padding). A slot at the end takes the rest of the line; a literal at the end must
//! end the line. Two slots need a literal between them. No backtracking: a delimiter is its
//! first occurrence, which is what makes dissect fast and predictable.

/// One slot of a pattern and the literal after it.
#[derive(Debug, Clone, PartialEq)]
struct Slot {
    /// None: skipped.
    name: Option<String>,
    append: bool,
    padded: bool,
    /// The literal after the slot; empty for a slot at the end of the pattern.
    delimiter: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dissect {
    prefix: String,
    slots: Vec<Slot>,
    /// The literal after the last slot must end the line.
    anchored_end: bool,
    append_separator: String,
}

impl Dissect {
    pub fn compile(pattern: &str, append_separator: &str) -> Result<Dissect, String> {
        let mut rest = pattern;
        let prefix_end = rest.find("%{").unwrap_or(rest.len());
        let prefix = rest[..prefix_end].to_owned();
        rest = &rest[prefix_end..];
        let mut slots: Vec<Slot> = Vec::new();
        while let Some(body) = rest.strip_prefix("%{") {
            let close = body
                .find('}')
                .ok_or_else(|| format!("dissect pattern '{pattern}': a '%{{' is not closed"))?;
            let spec = &body[..close];
            rest = &body[close + 1..];
            let literal_end = rest.find("%{").unwrap_or(rest.len());
            let delimiter = rest[..literal_end].to_owned();
            rest = &rest[literal_end..];
            if delimiter.is_empty() && !rest.is_empty() {
                return Err(format!(
                    "dissect pattern '{pattern}': the slot %{{{spec}}} is followed by another slot \
                     without literal text between them"
                ));
            }
            let (spec, padded) = match spec.strip_suffix("->") {
                Some(spec) => (spec, true),
                None => (spec, false),
            };
            let (name, append) = if spec.is_empty() || spec.starts_with('?') {
                (None, false)
            } else if let Some(name) = spec.strip_prefix('+') {
                (Some(name.to_owned()), true)
            } else {
                (Some(spec.to_owned()), false)
            };
            if name.as_deref().is_some_and(str::is_empty) {
                return Err(format!(
                    "dissect pattern '{pattern}': '%{{+}}' names no field"
                ));
            }
            slots.push(Slot {
                name,
                append,
                padded,
                delimiter,
            });
        }
        if slots.is_empty() {
            return Err(format!("dissect pattern '{pattern}' has no %{{field}}"));
        }
        let anchored_end = slots.last().is_some_and(|slot| !slot.delimiter.is_empty());
        Ok(Dissect {
            prefix,
            slots,
            anchored_end,
            append_separator: append_separator.to_owned(),
        })
    }

    /// The names of the fields the pattern fills, in pattern order, each once.
    pub fn field_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.slots.iter().filter_map(|slot| slot.name.as_deref()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The fields of `line` in pattern order, or None when the line does not fit the pattern.
    pub fn apply(&self, line: &str) -> Option<Vec<(String, String)>> {
        let mut rest = line.strip_prefix(self.prefix.as_str())?;
        let mut fields: Vec<(String, String)> = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let value = if slot.delimiter.is_empty() {
                std::mem::take(&mut rest)
            } else {
                let end = rest.find(slot.delimiter.as_str())?;
                let value = &rest[..end];
                rest = &rest[end + slot.delimiter.len()..];
                if slot.padded {
                    while let Some(after) = rest.strip_prefix(slot.delimiter.as_str()) {
                        rest = after;
                    }
                }
                value
            };
            let Some(name) = &slot.name else { continue };
            match fields.iter_mut().find(|(existing, _)| existing == name) {
                Some((_, existing)) if slot.append => {
                    existing.push_str(&self.append_separator);
                    existing.push_str(value);
                }
                Some((_, existing)) => *existing = value.to_owned(),
                None => fields.push((name.clone(), value.to_owned())),
            }
        }
        if self.anchored_end && !rest.is_empty() {
            return None;
        }
        Some(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pattern: &str, line: &str) -> Option<Vec<(String, String)>> {
        Dissect::compile(pattern, " ").unwrap().apply(line)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn slots_take_text_up_to_the_next_literal() {
        assert_eq!(
            fields(
                "%{ip} - %{user} [%{ts}] \"%{request}\" %{status}",
                "1.2.3.4 - bob [01/Aug/2024:14:22:47 +0800] \"GET / HTTP/1.1\" 200"
            ),
            Some(pairs(&[
                ("ip", "1.2.3.4"),
                ("user", "bob"),
                ("ts", "01/Aug/2024:14:22:47 +0800"),
                ("request", "GET / HTTP/1.1"),
                ("status", "200"),
            ]))
        );
    }

    #[test]
    fn skip_append_and_padding() {
        assert_eq!(
            fields(
                "%{date} %{+date} %{?level} %{message}",
                "2024-01-01 10:00:00 INFO it works"
            ),
            Some(pairs(&[
                ("date", "2024-01-01 10:00:00"),
                ("message", "it works")
            ]))
        );
        assert_eq!(
            fields("%{a->} %{b}", "x     y"),
            Some(pairs(&[("a", "x"), ("b", "y")]))
        );
    }

    #[test]
    fn a_line_that_does_not_fit_is_refused() {
        assert_eq!(fields("[%{a}] %{b}", "no bracket"), None);
        assert_eq!(fields("%{a} %{b}!", "x y"), None);
        assert_eq!(fields("%{a} %{b}!", "x y! more"), None);
        assert_eq!(
            fields("%{a} %{b}!", "x y!"),
            Some(pairs(&[("a", "x"), ("b", "y")]))
        );
    }

    #[test]
    fn bad_patterns_are_named() {
        assert!(
            Dissect::compile("%{a}%{b}", "")
                .unwrap_err()
                .contains("%{a}")
        );
        assert!(
            Dissect::compile("%{a", "")
                .unwrap_err()
                .contains("not closed")
        );
        assert!(
            Dissect::compile("plain text", "")
                .unwrap_err()
                .contains("no %{field}")
        );
    }
}
