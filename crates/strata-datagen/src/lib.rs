//! Deterministic generators of realistic benchmark documents.
//!
//! - [`bluesky`]: Bluesky Jetstream events calibrated to the real statistics of JSONBench's first
//!   1,000,000-document file (collection and operation mix, distinct users per collection and their
//!   growth with scale, `time_us` rate, ~480 bytes per document, record shapes of the real sample).
//! - [`gharchive`]: GitHub Archive 2015 events calibrated to the real 2015-01-01 sample (event-type
//!   mix, skewed repositories and actors, payload shapes per type).
//!
//! Same dataset, seed and count ⇒ byte-identical output. Documents are written straight into the
//! output as JSON text (no intermediate values), so generation runs at hundreds of thousands of
//! documents per second.

pub mod bluesky;
pub mod gharchive;
mod text;

use std::fmt;
use std::io::Write;
use std::str::FromStr;

#[derive(Debug, thiserror::Error)]
pub enum DatagenError {
    #[error("writing generated documents: {0}")]
    Io(#[from] std::io::Error),
    #[error("unknown dataset {0:?}: use bluesky or gharchive")]
    UnknownDataset(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    Bluesky,
    GhArchive,
}

impl FromStr for Dataset {
    type Err = DatagenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bluesky" => Ok(Dataset::Bluesky),
            "gharchive" => Ok(Dataset::GhArchive),
            other => Err(DatagenError::UnknownDataset(other.to_owned())),
        }
    }
}

impl fmt::Display for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dataset::Bluesky => "bluesky",
            Dataset::GhArchive => "gharchive",
        })
    }
}

/// What a generation run produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenStats {
    pub documents: u64,
    pub bytes: u64,
}

/// Writes `docs` documents of `dataset` as NDJSON.
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
        Dataset::GhArchive => gharchive::write_gharchive(seed, docs, out),
    }
}
