//! Retention (issue 15, ADR 0018): a table with a time column and a TTL (`ALTER TABLE t SET
//! (ttl = '30d')`) loses, in one manifest commit, every part whose newest time is older than
//! the TTL. `strata optimize` and the server's background merge thread call [`drop_expired`].
//!
//! Whole parts only: a part is dropped when its newest value of the time column (its sort-key
//! maximum, so the time column must be in the sort key, as it is by default) is before the
//! cutoff; a part holding any newer row stays whole. Dropped parts (and their deletion vectors)
//! are retired like a merge's inputs, so queries that started before keep reading them; garbage
//! collection deletes them once no reader holds a lease.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use strata_format::PartEntry;

use crate::commit::commit_manifest;
use crate::error::EngineError;
use crate::table::{DataDir, unix_now};

/// What one pass of retention dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionSummary {
    pub parts_dropped: usize,
    pub rows_dropped: u64,
}

/// Drops the parts of `table` whose every time is before `now - ttl` (`now` in seconds since
/// 1970). Nothing happens, and no lock is taken, for a table without a TTL or without expired
/// parts.
pub fn drop_expired(
    data_dir: &DataDir,
    table: &str,
    now: u64,
) -> Result<RetentionSummary, EngineError> {
    let manifest = data_dir.manifest(table)?;
    if expired_parts(&manifest.parts, &manifest.settings, now).is_empty() {
        return Ok(RetentionSummary::default());
    }
    let _lock = data_dir.lock_existing(table, "retention")?;
    let table_dir = data_dir.table_dir(table)?;
    let mut manifest = data_dir.manifest(table)?;
    let expired = expired_parts(&manifest.parts, &manifest.settings, now);
    if expired.is_empty() {
        return Ok(RetentionSummary::default());
    }
    let mut summary = RetentionSummary::default();
    let mut retired = Vec::new();
    manifest.parts.retain(|part| {
        if !expired.contains(&part.file) {
            return true;
        }
        summary.parts_dropped += 1;
        summary.rows_dropped += part.rows;
        retired.extend(part.own_files());
        false
    });
    manifest.retire(retired, unix_now());
    manifest.version += 1;
    commit_manifest(&mut manifest, &table_dir)?;
    Ok(summary)
}

/// The files of the parts older than the table's TTL.
fn expired_parts(
    parts: &[Arc<PartEntry>],
    settings: &strata_format::TableSettings,
    now: u64,
) -> Vec<String> {
    let (Some(ttl), Some(time_column)) = (settings.ttl_seconds, &settings.time_column) else {
        return Vec::new();
    };
    let Some(cutoff) = now
        .checked_sub(ttl)
        .and_then(|seconds| i64::try_from(seconds).ok())
        .and_then(|seconds| DateTime::<Utc>::from_timestamp(seconds, 0))
    else {
        return Vec::new();
    };
    parts
        .iter()
        .filter(|part| newest_time(part, time_column).is_some_and(|newest| newest < cutoff))
        .map(|part| part.file.clone())
        .collect()
}

/// A part's newest time: its sort-key maximum of the time column, read as RFC 3339. None (the
/// part is kept) when the time column is not in the sort key or the value is not a time.
fn newest_time(part: &PartEntry, time_column: &str) -> Option<DateTime<Utc>> {
    match part.sort_key_max.get(time_column)? {
        Value::String(text) => DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
        _ => None,
    }
}
