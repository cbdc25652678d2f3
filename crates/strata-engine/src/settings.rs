//! Table settings: checking them before a table is created, and which of them can change later.
//!
//! A table's settings live in its manifest (`strata_format::TableSettings`). They are checked
//! before anything is written, so an invalid setting never leaves a table behind:
//! - the sort key is a list of distinct, non-empty dotted paths (`\.` escapes a dot, `\\` a
//!   backslash); it is fixed for the table's life, because every part is sorted by it;
//! - `max_columns` (typed columns per part) can change with `ALTER TABLE t SET (max_columns = N)`:
//!   it applies to parts written afterwards (ingests and merges); existing parts keep their
//!   columns until a merge rewrites them. No data is rewritten by the change itself.

use std::collections::HashSet;

use strata_format::{KeySetting, TableSettings};
use strata_json::{JsonPath, KeyType};

use crate::error::EngineError;

/// Upper bound of `max_columns`: the shredder never gives more paths of one part a node
/// (ADR 0004), so a larger value could not take effect.
pub const MAX_COLUMNS_LIMIT: usize = 100_000;

/// Settings `ALTER TABLE … SET` accepts, with what each does (shown in errors).
pub const CHANGEABLE_SETTINGS: &[(&str, &str)] = &[
    (
        "max_columns",
        "typed columns per part, for parts written from now on",
    ),
    (
        "ttl",
        "retention on the time column, such as '30d', '12h' or 'none'",
    ),
    (
        "text_postings",
        "true to keep every token's rows in the text index of parts written from now on",
    ),
    (
        "keyword_index",
        "comma-separated paths whose whole values get keyword postings in parts written from now \
         on ('' for none)",
    ),
    (
        "iceberg",
        "true to publish the table as an Iceberg table under TABLE/metadata on every commit",
    ),
];

/// Checks user-written dotted sort-key paths and returns them encoded, in order.
///
/// Rejected: an empty list entry, an empty segment (`a..b`, `.`, `a.`), a trailing lone
/// backslash, and a path given twice. Each of these made tables that no ingest could load.
pub fn validate_sort_key(paths: &[String]) -> Result<Vec<String>, EngineError> {
    let mut seen = HashSet::new();
    let mut encoded = Vec::with_capacity(paths.len());
    for (i, raw) in paths.iter().enumerate() {
        let text = raw.trim();
        let invalid = |why: &str| EngineError::InvalidSortKey {
            path: raw.clone(),
            position: i + 1,
            reason: why.to_owned(),
        };
        if text.is_empty() {
            return Err(invalid("the path is empty"));
        }
        if ends_with_lone_backslash(text) {
            return Err(invalid(
                "the path ends with a lone '\\' (write '\\\\' for a backslash, '\\.' for a dot)",
            ));
        }
        let path = JsonPath::parse_dotted(text);
        if path.segments().iter().any(String::is_empty) {
            return Err(invalid(
                "a key in the path is empty (two dots in a row, or a leading or trailing dot)",
            ));
        }
        let name = path.encode();
        if !seen.insert(name.clone()) {
            return Err(invalid("the path is listed twice"));
        }
        encoded.push(name);
    }
    Ok(encoded)
}

/// One user-written dotted path, checked as sort-key paths are, encoded; the error is why not.
fn validate_path(raw: &str) -> Result<String, String> {
    match validate_sort_key(&[raw.to_owned()]) {
        Ok(mut paths) => paths.pop().ok_or_else(|| "the path is empty".to_owned()),
        Err(EngineError::InvalidSortKey { reason, .. }) => Err(reason),
        Err(other) => Err(other.to_string()),
    }
}

/// Checks a user-written dotted time-column path and returns it encoded; rejected as sort-key
/// paths are.
pub fn validate_time_column(raw: &str) -> Result<String, EngineError> {
    validate_path(raw).map_err(|reason| EngineError::InvalidTimeColumn {
        path: raw.to_owned(),
        reason,
    })
}

/// Checks user-written dotted text-index paths and returns them encoded (as sort-key paths).
pub fn validate_text_index(paths: &[String]) -> Result<Vec<String>, EngineError> {
    validate_sort_key(paths).map_err(|e| match e {
        EngineError::InvalidSortKey { path, reason, .. } => {
            EngineError::InvalidTextIndex { path, reason }
        }
        other => other,
    })
}

/// Checks user-written dotted keyword-index paths (ADR 0025) and returns them encoded: paths
/// as sort-key paths, none of them also in the table's `text_index` (encoded), whose values
/// are searched by token instead.
pub fn validate_keyword_index(
    paths: &[String],
    text_index: &[String],
) -> Result<Vec<String>, EngineError> {
    let invalid = |reason: String| EngineError::InvalidSetting {
        setting: "keyword_index".into(),
        reason,
    };
    let encoded = validate_sort_key(paths).map_err(|e| match e {
        EngineError::InvalidSortKey { path, reason, .. } => {
            invalid(format!("path {path:?}: {reason}"))
        }
        other => other,
    })?;
    if let Some((raw, _)) = paths
        .iter()
        .zip(&encoded)
        .find(|(_, path)| text_index.contains(path))
    {
        return Err(invalid(format!(
            "path {raw:?} has a text index; a path is searched by token or looked up by whole \
             value, not both"
        )));
    }
    Ok(encoded)
}

/// The paths of a `keyword_index` setting's value: comma-separated, blank for none.
pub fn split_path_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Checks a user-written dotted key path and returns the table's key setting.
///
/// Rejected as sort-key paths are (empty, empty segments, a lone trailing backslash), and a
/// path under Strata's reserved prefix, whose values never get a typed column.
pub fn validate_key(raw: &str, key_type: KeyType) -> Result<KeySetting, EngineError> {
    let path = validate_path(raw).map_err(|reason| EngineError::InvalidKey {
        path: raw.to_owned(),
        reason,
    })?;
    if path.starts_with(strata_json::RESERVED_PREFIX) {
        return Err(EngineError::InvalidKey {
            path: raw.to_owned(),
            reason: format!(
                "paths starting with {} are reserved",
                strata_json::RESERVED_PREFIX
            ),
        });
    }
    Ok(KeySetting { path, key_type })
}

/// Splits a user's `PATH[:TYPE]` key option: the type after the last `:` when that names one
/// (`string` / `integer`), else the whole text is the path and the type is string.
pub fn parse_key_spec(text: &str) -> (String, KeyType) {
    if let Some((path, suffix)) = text.rsplit_once(':')
        && let Ok(key_type) = suffix.parse::<KeyType>()
    {
        return (path.to_owned(), key_type);
    }
    (text.to_owned(), KeyType::String)
}

fn ends_with_lone_backslash(text: &str) -> bool {
    let trailing = text.bytes().rev().take_while(|&b| b == b'\\').count();
    trailing % 2 == 1
}

/// Checks a `max_columns` value.
pub fn validate_max_columns(value: usize) -> Result<usize, EngineError> {
    if value > MAX_COLUMNS_LIMIT {
        return Err(EngineError::InvalidSetting {
            setting: "max_columns".into(),
            reason: format!("{value} is above the limit of {MAX_COLUMNS_LIMIT}"),
        });
    }
    Ok(value)
}

/// A retention period: `30d`, `12h`, `90m`, `3600s`, `2w` (also with a space and the unit
/// spelt out, `30 days`), or `none`/`0` for none.
pub fn parse_ttl(text: &str) -> Result<Option<u64>, EngineError> {
    let invalid = || EngineError::InvalidSetting {
        setting: "ttl".into(),
        reason: format!(
            "{text:?} is not a retention period (write 30d, 12h, 90m, 3600s, 2w, or none)"
        ),
    };
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("none") || trimmed == "0" {
        return Ok(None);
    }
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let count: u64 = trimmed[..digits].parse().map_err(|_| invalid())?;
    let unit = match trimmed[digits..].trim().to_ascii_lowercase().as_str() {
        "s" | "sec" | "second" | "seconds" => 1,
        "m" | "min" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 604_800,
        _ => return Err(invalid()),
    };
    match count.checked_mul(unit) {
        Some(0) => Ok(None),
        Some(seconds) => Ok(Some(seconds)),
        None => Err(invalid()),
    }
}

/// A boolean setting's value: `true`/`false`, `on`/`off`, `1`/`0` (any case).
fn parse_bool(setting: &str, text: &str) -> Result<bool, EngineError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(EngineError::InvalidSetting {
            setting: setting.into(),
            reason: format!("{text:?} is not a boolean (write true or false)"),
        }),
    }
}

/// One `name = value` of `ALTER TABLE … SET (…)`, the value as written (unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingChange {
    pub name: String,
    pub value: String,
}

/// Applies changes to settings in memory, or says why one cannot be made.
pub fn apply_changes(
    table: &str,
    settings: &mut TableSettings,
    changes: &[SettingChange],
) -> Result<(), EngineError> {
    for change in changes {
        match change.name.to_ascii_lowercase().as_str() {
            "max_columns" => {
                let value: usize =
                    change
                        .value
                        .trim()
                        .parse()
                        .map_err(|_| EngineError::InvalidSetting {
                            setting: "max_columns".into(),
                            reason: format!("{:?} is not a non-negative integer", change.value),
                        })?;
                settings.max_columns = validate_max_columns(value)?;
            }
            "ttl" => {
                if settings.time_column.is_none() {
                    return Err(EngineError::InvalidSetting {
                        setting: "ttl".into(),
                        reason: format!(
                            "table {table} has no time column to expire documents by (create it \
                             with --time-column PATH, or through a pipeline)"
                        ),
                    });
                }
                settings.ttl_seconds = parse_ttl(&change.value)?;
            }
            "iceberg" => settings.iceberg = parse_bool("iceberg", &change.value)?,
            "text_postings" => {
                let postings = parse_bool("text_postings", &change.value)?;
                if postings && settings.text_index.is_empty() {
                    return Err(EngineError::InvalidSetting {
                        setting: "text_postings".into(),
                        reason: format!(
                            "table {table} has no text index to keep postings in (create it \
                             with --text-index PATH, or through a pipeline keeping message)"
                        ),
                    });
                }
                settings.text_postings = postings;
            }
            "keyword_index" => {
                let paths = split_path_list(&change.value);
                settings.keyword_index = validate_keyword_index(&paths, &settings.text_index)?;
            }
            "key" => {
                return Err(EngineError::InvalidSetting {
                    setting: "key".into(),
                    reason: format!(
                        "the key of table {table} cannot change: every part has a key file built \
                         from it. Create a new table with the new key and load it from \
                         `strata export {table}`"
                    ),
                });
            }
            "sort_key" => {
                return Err(EngineError::InvalidSetting {
                    setting: "sort_key".into(),
                    reason: format!(
                        "the sort key of table {table} cannot change: every part is stored sorted by \
                         it. Create a new table with the new sort key and load it from \
                         `strata export {table}`"
                    ),
                });
            }
            other => {
                let known: Vec<String> = CHANGEABLE_SETTINGS
                    .iter()
                    .map(|(name, what)| format!("{name} ({what})"))
                    .collect();
                return Err(EngineError::InvalidSetting {
                    setting: other.to_owned(),
                    reason: format!(
                        "unknown table setting; settings that can change: {}",
                        known.join(", ")
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sort_keys_that_no_ingest_could_load_are_refused() {
        for bad in [
            &["kind", "kind"][..],
            &["a..b"],
            &["."],
            &[""],
            &["a."],
            &[".a"],
            &["a\\"],
            &["kind", " kind "],
        ] {
            assert!(
                validate_sort_key(&keys(bad)).is_err(),
                "{bad:?} should be refused"
            );
        }
        assert_eq!(
            validate_sort_key(&keys(&["kind", " commit.collection", "a\\.b", "c\\\\"])).unwrap(),
            keys(&["kind", "commit.collection", "a\\.b", "c\\\\"])
        );
        assert_eq!(validate_sort_key(&[]).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn only_max_columns_changes() {
        let mut settings = TableSettings::sorted_by(keys(&["kind"]), 1024);
        let change = |name: &str, value: &str| SettingChange {
            name: name.into(),
            value: value.into(),
        };
        apply_changes("t", &mut settings, &[change("max_columns", "8")]).unwrap();
        assert_eq!(settings.max_columns, 8);
        let e = apply_changes("t", &mut settings, &[change("sort_key", "did")]).unwrap_err();
        assert!(e.to_string().contains("cannot change"), "{e}");
        let e = apply_changes("t", &mut settings, &[change("colour", "red")]).unwrap_err();
        assert!(e.to_string().contains("max_columns"), "{e}");
        assert!(apply_changes("t", &mut settings, &[change("max_columns", "-1")]).is_err());
        // A TTL needs a time column.
        let e = apply_changes("t", &mut settings, &[change("ttl", "30d")]).unwrap_err();
        assert!(e.to_string().contains("no time column"), "{e}");
        settings.time_column = Some("ts".into());
        apply_changes("t", &mut settings, &[change("ttl", "30 days")]).unwrap();
        assert_eq!(settings.ttl_seconds, Some(30 * 86_400));
        apply_changes("t", &mut settings, &[change("ttl", "none")]).unwrap();
        assert_eq!(settings.ttl_seconds, None);
        for bad in ["", "d", "30x", "-1d", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
        assert!(apply_changes("t", &mut settings, &[change("max_columns", "1000001")]).is_err());
        assert_eq!(settings.max_columns, 8);
        apply_changes("t", &mut settings, &[change("iceberg", "TRUE")]).unwrap();
        assert!(settings.iceberg);
        apply_changes("t", &mut settings, &[change("iceberg", "off")]).unwrap();
        assert!(!settings.iceberg);
        let e = apply_changes("t", &mut settings, &[change("iceberg", "yes please")]).unwrap_err();
        assert!(e.to_string().contains("not a boolean"), "{e}");
    }
}
