//! Deterministic generators of realistic benchmark documents.
//!
//! - [`bluesky`]: Bluesky Jetstream events calibrated to the real statistics of JSONBench's first
//!   1,000,000-document file (collection and operation mix, distinct users per collection and their
//!   growth with scale, `time_us` rate, ~480 bytes per document, record shapes of the real sample).
//! - [`gharchive`]: GitHub Archive 2015 events calibrated to the real 2015-01-01 sample (event-type
//!   mix, skewed actors and repositories, full payload shapes per type).
//!
//! - [`nginx`]: nginx access-log lines (common format) like the log study's, raw text rather than
//!   NDJSON (for `strata ingest --pipeline common`).
//!
//! Invariants shared by all: same dataset, seed, count (and quirks) ⇒ byte-identical output,
//! independent of the `rand` crate's version (the `rng` module implements the generator); documents are written
//! straight into the output as JSON text without intermediate values, which is what lets a single
//! core produce hundreds of thousands of documents per second.

pub mod bluesky;
mod corpus;
pub mod gharchive;
mod json;
mod names;
pub mod nginx;
mod rng;

use std::fmt;
use std::io::Write;
use std::str::FromStr;

#[derive(Debug, thiserror::Error)]
pub enum DatagenError {
    #[error("{context} (after {documents} documents): {source}")]
    Io {
        context: &'static str,
        documents: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown dataset {0:?}: use bluesky, gharchive or nginx")]
    UnknownDataset(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    Bluesky,
    GhArchive,
    /// Raw access-log lines, not JSON documents.
    Nginx,
}

impl FromStr for Dataset {
    type Err = DatagenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bluesky" => Ok(Dataset::Bluesky),
            "gharchive" => Ok(Dataset::GhArchive),
            "nginx" => Ok(Dataset::Nginx),
            other => Err(DatagenError::UnknownDataset(other.to_owned())),
        }
    }
}

impl fmt::Display for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dataset::Bluesky => "bluesky",
            Dataset::GhArchive => "gharchive",
            Dataset::Nginx => "nginx",
        })
    }
}

/// What a generation run produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenStats {
    pub documents: u64,
    pub bytes: u64,
}

/// Writes `docs` documents of `dataset` as NDJSON. `quirks` only affects Bluesky (GH Archive has
/// no quirk mode).
pub fn generate(
    dataset: Dataset,
    seed: u64,
    docs: u64,
    quirks: bool,
    out: &mut dyn Write,
) -> Result<GenStats, DatagenError> {
    match dataset {
        Dataset::Bluesky => {
            bluesky::write_bluesky(&bluesky::BlueskyOptions { seed, docs, quirks }, out)
        }
        Dataset::GhArchive => {
            gharchive::write_gharchive(&gharchive::GhArchiveOptions { seed, docs }, out)
        }
        Dataset::Nginx => nginx::write_nginx(&nginx::NginxOptions { seed, lines: docs }, out),
    }
}

/// Batches documents into ~1 MiB writes: one `write_all` per document would make a `dyn Write`
/// call (and often a syscall) per 500 bytes.
const FLUSH_AT: usize = 1 << 20;

fn drive<W: Write + ?Sized>(
    mut next_document: impl FnMut(&mut Vec<u8>) -> bool,
    out: &mut W,
    context: &'static str,
) -> Result<GenStats, DatagenError> {
    let mut buffer = Vec::with_capacity(FLUSH_AT + (64 << 10));
    let mut stats = GenStats::default();
    let mut flush = |buffer: &mut Vec<u8>, stats: &mut GenStats| {
        out.write_all(buffer).map_err(|source| DatagenError::Io {
            context,
            documents: stats.documents,
            source,
        })?;
        stats.bytes += buffer.len() as u64;
        buffer.clear();
        Ok::<(), DatagenError>(())
    };
    while next_document(&mut buffer) {
        stats.documents += 1;
        if buffer.len() >= FLUSH_AT {
            flush(&mut buffer, &mut stats)?;
        }
    }
    flush(&mut buffer, &mut stats)?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names_round_trip() {
        for d in [Dataset::Bluesky, Dataset::GhArchive, Dataset::Nginx] {
            assert_eq!(d.to_string().parse::<Dataset>().unwrap(), d);
        }
        assert!(matches!(
            "twitter".parse::<Dataset>(),
            Err(DatagenError::UnknownDataset(_))
        ));
    }

    struct Failing;
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn io_errors_carry_context() {
        let err = generate(Dataset::Bluesky, 1, 10, false, &mut Failing).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("Bluesky") && message.contains("disk full"),
            "{message}"
        );
    }

    #[test]
    fn stats_count_what_was_written() {
        for dataset in [Dataset::Bluesky, Dataset::GhArchive] {
            let mut out = Vec::new();
            let stats = generate(dataset, 3, 2_500, false, &mut out).unwrap();
            assert_eq!(stats.documents, 2_500);
            assert_eq!(stats.bytes, out.len() as u64);
            assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2_500);
        }
    }
}
