//! The server's config file (TOML, `strata serve --config FILE`): users and tokens, limits, and
//! the background merge policy. Every key is optional; unknown keys are errors (a misspelt limit
//! must not silently mean "no limit").
//!
//! ```toml
//! tokens = ["secret-token"]            # HTTP: `Authorization: Bearer secret-token`
//! tls = { cert = "server.crt", key = "server.key" }   # both protocols
//! [[users]]                             # PostgreSQL protocol: SCRAM-SHA-256
//! name = "alice"
//! password = "wonderland"
//! [limits]
//! max_body_bytes = 4294967296
//! max_line_bytes = 67108864
//! max_connections = 256
//! max_concurrent_queries = 16
//! query_timeout_secs = 300
//! query_memory_bytes = 4294967296
//! connection_threads = 0                # PostgreSQL connections' threads; 0: one per CPU
//! [wal]
//! enabled = true
//! max_request_bytes = 8388608
//! flush_interval_ms = 1000
//! max_pending_bytes = 536870912
//! admission_wait_ms = 1000
//! checkpoint_interval_ms = 1000
//! commit_delay_us = 5000
//! [merge]
//! enabled = true
//! interval_secs = 5
//! idle_secs = 30
//! [elasticsearch]
//! version = "8.17.0"                    # what GET / reports to shippers
//! [pipelines.app]                       # log pipelines (strata_pipeline::spec)
//! dissect = "%{ts} %{level} %{message}"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use strata_pipeline::{PipelineSpec, Pipelines};

use crate::error::ServerError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// PostgreSQL users; with none, the PostgreSQL listener trusts every connection and binds
    /// only loopback.
    #[serde(default)]
    pub users: Vec<User>,
    /// HTTP bearer tokens; with none, HTTP needs no token and binds only loopback.
    #[serde(default)]
    pub tokens: Vec<String>,
    /// TLS for both protocols (PostgreSQL clients negotiate it with `sslmode`).
    #[serde(default)]
    pub tls: Option<Tls>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub wal: WalPolicy,
    #[serde(default)]
    pub merge: MergePolicy,
    /// Log pipelines by name (`[pipelines.NAME]`, `strata_pipeline::spec`), for
    /// `POST /v1/ingest/{table}?pipeline=NAME` and `strata ingest --pipeline NAME`.
    #[serde(default)]
    pub pipelines: BTreeMap<String, PipelineSpec>,
    #[serde(default)]
    pub elasticsearch: ElasticPolicy,
    /// Options of a data directory on object storage (`--data-dir s3://…`): `object_store`'s
    /// S3 keys (`endpoint`, `region`, `access_key_id`, `secret_access_key`, `allow_http`, …);
    /// the `AWS_*` environment variables override them.
    #[serde(default)]
    pub storage: BTreeMap<String, String>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// PEM files: the certificate chain and its private key (PKCS#8, PKCS#1 or SEC1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body `/v1/ingest` and `/v1/query` accept (decompressed bytes are not
    /// limited: they stream into parts).
    pub max_body_bytes: u64,
    /// A longer NDJSON line is rejected (and not held in memory whole); the rest loads.
    pub max_line_bytes: usize,
    /// Open connections per protocol; more are refused (HTTP 503, PostgreSQL SQLSTATE 53300).
    pub max_connections: usize,
    /// Statements running at once over both protocols; more wait for a slot. A `COMMIT`
    /// gives its slot back while it waits for its group commit.
    pub max_concurrent_queries: usize,
    /// A statement running longer is cancelled (SQLSTATE 57014).
    pub query_timeout_secs: f64,
    /// A PostgreSQL-protocol transaction block idle (no statement running) longer is rolled back
    /// and its connection closed at its next statement (SQLSTATE 25P03), so that it stops
    /// holding its snapshot's files; 0 (the default, as PostgreSQL's
    /// `idle_in_transaction_session_timeout`) never.
    pub idle_in_transaction_timeout_secs: f64,
    /// Memory all running statements together may hold before aggregations and sorts spill to
    /// disk; what cannot spill fails with SQLSTATE 53200 and the server goes on.
    pub query_memory_bytes: usize,
    /// Nice value (0–19) of the threads that parse, write and merge ingested documents, so that
    /// queries get the CPU first under heavy ingest; 0 runs them like queries.
    pub background_nice: i32,
    /// Threads that serve PostgreSQL connections, each connection on one of them for its
    /// whole life (ADR 0028); 0 (the default) is one per CPU.
    pub connection_threads: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 << 30,
            max_line_bytes: 64 << 20,
            max_connections: 256,
            max_concurrent_queries: 16,
            query_timeout_secs: 300.0,
            idle_in_transaction_timeout_secs: 0.0,
            query_memory_bytes: strata_query::DEFAULT_MEMORY_LIMIT,
            background_nice: 10,
            connection_threads: 0,
        }
    }
}

/// Which ingest requests go through the write-ahead log, and when it is written into parts
/// (ADR 0014).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WalPolicy {
    /// With `false` every request is written straight into parts, as `strata ingest` does.
    pub enabled: bool,
    /// Request bodies up to this size (as sent, compressed or not) go through the WAL; larger
    /// ones, and requests that create a table with a sort key, are written straight into parts.
    pub max_request_bytes: usize,
    /// Requests that do not wait to be visible (`?wait=durable`) are written into parts after
    /// at most this long, or sooner when a table has `flush_bytes` waiting.
    pub flush_interval_ms: u64,
    /// ... or once no request has come for this long (a stream that stopped is visible soon
    /// after its last request; one that goes on still makes parts of `flush_bytes`).
    pub flush_quiet_ms: u64,
    /// Memory of parsed documents (about three times their JSON text) that makes a table's
    /// queue due, and the most one flush writes into parts; a single request whose documents
    /// take more is written into parts directly.
    pub flush_bytes: usize,
    /// Memory of parsed documents acknowledged but not yet in parts; a request that would
    /// exceed it waits up to `admission_wait_ms` for flushes to make room, then gets 503 and
    /// `Retry-After`.
    pub max_pending_bytes: usize,
    /// How long a request waits for room under `max_pending_bytes` before it is refused: a
    /// flush usually frees room sooner than a client told to retry comes back (at least a
    /// second later: `Retry-After` counts whole seconds).
    pub admission_wait_ms: u64,
    /// Size at which a new WAL segment file is started.
    pub segment_bytes: u64,
    /// Threads writing queued requests into parts: while one writes and commits a flush, the
    /// next shreds its documents (commits stay in sequence order per table).
    pub flush_threads: usize,
    /// How often transactions committed through the WAL are made durable in their tables'
    /// files and manifests (ADR 0017, "live manifests"); until then other processes reading
    /// the data directory do not see them, and a restart applies them from the WAL.
    pub checkpoint_interval_ms: u64,
    /// How long a group commit's leader waits for transactions that have changes buffered to
    /// commit with it (0: not at all; ADR 0017, "Group commit waits for open writers"). A
    /// commit waits this long at most, and not at all when no other transaction is writing.
    pub commit_delay_us: u64,
}

impl Default for WalPolicy {
    fn default() -> Self {
        WalPolicy {
            enabled: true,
            max_request_bytes: 8 << 20,
            flush_interval_ms: 1000,
            flush_quiet_ms: 100,
            flush_bytes: 192 << 20,
            max_pending_bytes: 512 << 20,
            admission_wait_ms: 1000,
            segment_bytes: strata_engine::wal::DEFAULT_SEGMENT_BYTES,
            flush_threads: 2,
            checkpoint_interval_ms: 1000,
            commit_delay_us: strata_engine::transaction::DEFAULT_COMMIT_DELAY.as_micros() as u64,
        }
    }
}

/// When the server merges parts by itself (the policy of `strata optimize`, ADR 0014).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MergePolicy {
    pub enabled: bool,
    /// How often tables are looked at.
    pub interval_secs: f64,
    /// A table without ingests for this long gets the full `optimize` merge; before that only
    /// its small parts are merged by size tier.
    pub idle_secs: f64,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            enabled: true,
            interval_secs: 5.0,
            idle_secs: 30.0,
        }
    }
}

/// The Elasticsearch-compatible endpoints (`crate::http::elastic`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElasticPolicy {
    /// The version `GET /` reports: shippers refuse a server older than themselves (Beats) or
    /// choose their protocol by it (Logstash), so it is set to what they expect.
    pub version: String,
}

impl Default for ElasticPolicy {
    fn default() -> Self {
        ElasticPolicy {
            version: DEFAULT_ELASTIC_VERSION.to_owned(),
        }
    }
}

/// What `GET /` reports unless the config file says otherwise.
pub const DEFAULT_ELASTIC_VERSION: &str = "8.17.0";

impl Config {
    pub fn load(path: &Path) -> Result<Config, ServerError> {
        let config_error = |message: String| ServerError::Config {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| config_error(e.to_string()))?;
        let config: Config = toml::from_str(&text).map_err(|e| config_error(e.to_string()))?;
        config.validate().map_err(config_error)?;
        Ok(config)
    }

    /// The built-in pipelines and the file's.
    pub fn pipelines(&self) -> Result<Pipelines, ServerError> {
        Pipelines::new(&self.pipelines).map_err(ServerError::Pipeline)
    }

    fn validate(&self) -> Result<(), String> {
        Pipelines::new(&self.pipelines).map_err(|e| e.to_string())?;
        if self.limits.max_connections == 0 || self.limits.max_concurrent_queries == 0 {
            return Err(
                "limits.max_connections and limits.max_concurrent_queries must be at least 1"
                    .into(),
            );
        }
        // Durations are made from these: NaN, infinite or negative seconds would panic there.
        let seconds = |value: f64, zero_allowed: bool| {
            value.is_finite() && (value > 0.0 || (zero_allowed && value == 0.0))
        };
        if !seconds(self.limits.query_timeout_secs, false) {
            return Err("limits.query_timeout_secs must be positive".into());
        }
        if !seconds(self.merge.interval_secs, false) || !seconds(self.merge.idle_secs, true) {
            return Err(
                "merge.interval_secs must be positive and merge.idle_secs not negative".into(),
            );
        }
        if !(0..=19).contains(&self.limits.background_nice) {
            return Err("limits.background_nice must be from 0 to 19".into());
        }
        if !(1..=16).contains(&self.wal.flush_threads) {
            return Err("wal.flush_threads must be from 1 to 16".into());
        }
        if self.wal.max_request_bytes > self.wal.max_pending_bytes
            || self.wal.max_request_bytes > strata_engine::wal::frame::MAX_FRAME_BYTES
        {
            return Err(
                "wal.max_request_bytes must be at most wal.max_pending_bytes and 1 GiB".into(),
            );
        }
        if let Some(user) = self
            .users
            .iter()
            .find(|u| u.name.is_empty() || u.password.is_empty())
        {
            return Err(format!(
                "user {:?}: a user needs a name and a password",
                user.name
            ));
        }
        if self.tokens.iter().any(String::is_empty) {
            return Err("tokens: a token must not be empty".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_means_every_default() {
        let config: Config = toml::from_str("").unwrap();
        assert!(config.users.is_empty() && config.tokens.is_empty());
        assert_eq!(config.limits.max_concurrent_queries, 16);
        assert!(config.merge.enabled);
    }

    #[test]
    fn a_misspelt_key_is_an_error() {
        let error = toml::from_str::<Config>("[limits]\nmax_conections = 3\n").unwrap_err();
        assert!(error.to_string().contains("max_conections"), "{error}");
    }

    #[test]
    fn limits_are_checked() {
        let config: Config = toml::from_str("[limits]\nmax_concurrent_queries = 0\n").unwrap();
        assert!(config.validate().is_err());
        let config: Config = toml::from_str("[[users]]\nname = \"a\"\npassword = \"\"\n").unwrap();
        assert!(config.validate().is_err());
        let config: Config = toml::from_str("[limits]\nquery_timeout_secs = nan\n").unwrap();
        assert!(config.validate().is_err());
        let config: Config = toml::from_str("[merge]\nidle_secs = 0\n").unwrap();
        assert!(config.validate().is_ok());
    }
}
