//! The statement loop behind `strata query` and the shell `strata sql`: SQL text is split into
//! statements, each runs on one tokio runtime and its result is written to the output batch by
//! batch as it is computed, so the first rows appear before the last are known.

use std::io::{BufWriter, Write};
use std::time::Instant;

use strata_engine::DataDir;
use strata_query::Session;

use crate::CliResult;
use crate::remote::RemoteReads;
use strata_query::output::{Format, write_stream};

/// The tokio runtime that DataFusion runs on, one worker per core.
pub fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(strata_json::DEEP_STACK_BYTES)
        .on_thread_start(strata_json::mark_deep_stack)
        .enable_all()
        .build()
}

/// Runs one statement and writes its result to `out` as it streams.
pub async fn run_statement<W: Write + Send>(
    session: &Session,
    statement: &str,
    format: Format,
    out: W,
) -> CliResult {
    let result = session.stream(statement).await?;
    write_stream(out, format, &result.schema, result.batches).await?;
    Ok(())
}

/// Runs every statement of `sql` in order, printing each result to stdout (`strata query`); the
/// first failing statement ends the run. With `timing`, each statement's time goes to stderr.
/// On object storage (`remote`), part pages are read through its store, and `timing` also
/// prints the requests and bytes each statement fetched from it.
pub fn run_script(
    data_dir: &DataDir,
    sql: &str,
    format: Format,
    timing: bool,
    remote: Option<&RemoteReads>,
) -> CliResult {
    let runtime = runtime()?;
    let session = match remote {
        Some(remote) => Session::open_with_store(data_dir.root(), remote.store.clone())?,
        None => Session::open(data_dir.root())?,
    };
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout());
    runtime.block_on(async {
        for statement in strata_query::split_statements(sql) {
            let started = Instant::now();
            let fetched_before = remote.map(|r| r.stats.snapshot());
            run_statement(&session, &statement, format, &mut out).await?;
            if timing {
                eprintln!("Time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
                if let (Some(remote), Some((gets, bytes))) = (remote, fetched_before) {
                    let (gets_after, bytes_after) = remote.stats.snapshot();
                    eprintln!(
                        "Fetched: {} requests, {} bytes",
                        gets_after - gets,
                        bytes_after - bytes
                    );
                }
            }
        }
        Ok(())
    })
}
