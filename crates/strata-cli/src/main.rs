//! The `strata` binary: an embedded database on a local data directory.
//!
//! Subcommand names and flags are a contract for scripts (see README): add, never rename.
//! Exit status: 0 success (an ingest committed); 1 error (nothing changed; an ingest committed
//! nothing); 2 invalid command line (clap). The README lists them.
//! Everything runs on a thread with a deep stack so that documents nested up to
//! `strata_json::MAX_NESTING_DEPTH` levels can be parsed, shredded and written back.

mod commands;
mod progress;
mod remote;
mod shell;
mod statements;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What every command returns: success, or an error printed by `main` (exit status 1).
pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser, Debug)]
#[command(
    name = "strata",
    version,
    about = "A database for JSON events and logs"
)]
pub struct Cli {
    /// Data directory holding the tables: a local directory, or object storage as
    /// s3://bucket/prefix (credentials, region and endpoint from the AWS_* environment
    /// variables) or file:///path (the object layout on a local directory).
    #[arg(
        long,
        global = true,
        env = "STRATA_DATA_DIR",
        default_value = "./strata-data"
    )]
    pub data_dir: PathBuf,
    /// Config file (TOML, see the README): [pipelines.NAME] for `ingest --pipeline`; users,
    /// tokens, limits and merge policy for `serve`; [storage] options of an s3:// data directory.
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Local cache of a data directory on object storage (`--data-dir s3://…`): footers and small
    /// files of parts, and pages read. Default: ~/.cache/strata/<data directory>.
    #[arg(long, global = true, env = "STRATA_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bytes of part pages the cache keeps at most (suffixes K, M, G: 512M, 4G).
    #[arg(long, global = true, env = "STRATA_CACHE_SIZE", default_value = "4G", value_parser = parse_size)]
    pub cache_size: u64,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load NDJSON documents into a table (created on first use).
    Ingest {
        table: String,
        /// Files to load: .ndjson/.json, .gz, .zst, or - for standard input.
        #[arg(required = true)]
        files: Vec<String>,
        /// Sort key as comma-separated dotted JSON paths; fixed when the table is created.
        #[arg(long, value_delimiter = ',')]
        sort_key: Option<Vec<String>>,
        /// Typed columns per part for a new table (other paths go to the remainder).
        #[arg(long)]
        max_columns: Option<usize>,
        /// Primary key of a new table: a dotted JSON path, optionally with its type
        /// (`id`, `user.id:integer`; string by default). A document whose key is present
        /// already replaces it (see --on-conflict); documents without a key are rejected.
        #[arg(long, value_name = "PATH[:string|integer]")]
        key: Option<String>,
        /// For a table with a key: what a document whose key is present already does.
        #[arg(long, value_name = "replace|ignore|error", default_value = "replace")]
        on_conflict: String,
        /// Do not merge small parts after the ingest.
        #[arg(long)]
        no_merge: bool,
        /// Parse raw log lines into documents: combined (alias nginx, apache), common, json,
        /// text (the line as `message` with its time), or a pipeline of the --config file.
        /// A line the pipeline cannot parse is kept whole as `message` and counted.
        #[arg(long, value_name = "NAME")]
        pipeline: Option<String>,
        /// The time column of a new table, a dotted JSON path (its sort key unless one is
        /// given). With --pipeline, the pipeline's time field by default.
        #[arg(long, value_name = "PATH")]
        time_column: Option<String>,
        /// Paths of a new table whose string values get a text index, for `matches(…)`
        /// (comma-separated dotted paths; `message` by default with --pipeline text).
        #[arg(long, value_delimiter = ',', value_name = "PATH,...")]
        text_index: Option<Vec<String>>,
        /// Keep every token's rows in a new table's text index: searches of terms and prefixes
        /// are counted without reading the text, at about as many bytes again on disk as the
        /// text's share. Later: ALTER TABLE … SET (text_postings = true).
        #[arg(long)]
        text_postings: bool,
        /// Paths of a new table whose whole values (strings or integers) get keyword postings:
        /// equality filters on them read only matching rows, and counts of them read no
        /// page (comma-separated dotted paths). Later: ALTER TABLE … SET (keyword_index = …).
        #[arg(long, value_delimiter = ',', value_name = "PATH,...")]
        keyword_index: Option<Vec<String>>,
        /// Retention of a new table on its time column (30d, 12h, 90m, 2w, none); expired parts
        /// are dropped by `strata optimize` and the server. Later: ALTER TABLE … SET (ttl = …).
        #[arg(long, value_name = "PERIOD")]
        ttl: Option<String>,
        /// Publish a new table as an Iceberg table in TABLE/metadata, kept in step on every
        /// commit (Spark, Trino, DuckDB, PyIceberg read it). Later: ALTER TABLE … SET (iceberg = …).
        #[arg(long)]
        iceberg: bool,
    },
    /// Write every document of a table to standard output as NDJSON.
    Export { table: String },
    /// List tables with documents, parts and bytes on disk (a damaged table is listed with the
    /// reason, and the exit status is 1).
    Tables,
    /// Verify every byte of a table (or of all tables): manifest, part files, checksums, row
    /// counts. Prints what is fine and what is damaged; exit status 1 when anything is damaged.
    Check { table: Option<String> },
    /// Merge a table's parts into large sorted parts now (streaming; parts over 1 GiB stay).
    Optimize { table: String },
    /// Delete a table and all its files (waits for a running ingest or optimize of it).
    Drop {
        table: String,
        /// Succeed when the table does not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// Generate a deterministic benchmark dataset as NDJSON.
    Generate {
        /// bluesky, gharchive (NDJSON documents) or nginx (access-log lines)
        dataset: String,
        #[arg(long, default_value_t = 1_000_000)]
        docs: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Add rare real-world quirks (\u0000 in strings, deep nesting, a broken line).
        #[arg(long)]
        quirks: bool,
        /// Output file (.ndjson, .gz, .zst); standard output when absent.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Run SQL statements (separated by ';') and print their results.
    Query {
        sql: String,
        #[arg(long, default_value = "table")]
        format: strata_query::output::Format,
        /// Print `Time: N ms` to stderr after each statement.
        #[arg(long)]
        timing: bool,
    },
    /// Interactive SQL shell.
    Sql,
    /// Serve the data directory over HTTP and the PostgreSQL protocol until SIGTERM/Ctrl-C,
    /// merging parts in the background. Without --http/--pg both listen on loopback
    /// (127.0.0.1:8080 and 127.0.0.1:5432); give one to serve only that protocol.
    Serve {
        /// HTTP address (ingest, SQL, tables, health, metrics).
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
        /// PostgreSQL protocol address.
        #[arg(long)]
        pg: Option<std::net::SocketAddr>,
    },
}

/// A byte count with an optional binary suffix: `1048576`, `512M`, `4G`.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        t if t.ends_with('K') => (&text[..t.len() - 1], 10),
        t if t.ends_with('M') => (&text[..t.len() - 1], 20),
        t if t.ends_with('G') => (&text[..t.len() - 1], 30),
        t if t.ends_with('T') => (&text[..t.len() - 1], 40),
        t => (&text[..t.len()], 0),
    };
    let value: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 1048576, 512M, 4G)"))?;
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn main() -> ExitCode {
    // Before anything allocates much or starts a thread (ADR 0013). A refusal only costs speed.
    strata_malloc::tune();
    let cli = Cli::parse();
    strata_json::run_with_deep_stack(move || match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    })
}
