//! `strata serve`: one process that many clients use at once over the same data directory —
//! HTTP (ingest, SQL, tables, health, metrics), the PostgreSQL wire protocol, and background
//! merges.
//!
//! Invariants:
//! - an HTTP ingest is answered `200` only once its documents are durable: in the write-ahead
//!   log after its group's fsync (bodies up to `wal.max_request_bytes`, `ingest_queue`), or
//!   in parts after one atomic, fsynced manifest commit (larger ones, as `strata ingest`), so
//!   an acknowledged ingest survives `kill -9`; a request that fails or is cut off stores
//!   nothing (ADR 0014);
//! - every statement reads one manifest snapshot per table under a read lease, so merges never
//!   change what a running statement sees;
//! - without users (PostgreSQL) or tokens (HTTP) in the config file, a listener binds only a
//!   loopback address;
//! - a bad request is answered with an error and never stops the server.

pub mod config;
pub mod error;
mod http;
mod ingest_queue;
mod merger;
pub mod metrics;
mod pg;
pub mod sqlstate;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strata_engine::DataDir;
use strata_query::Session;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use error::ServerError;

use crate::metrics::Metrics;

/// What `strata serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    pub http: Option<SocketAddr>,
    pub pg: Option<SocketAddr>,
    pub config: Config,
    /// On object storage (ADR 0022): `data_dir` is the working directory mirroring it, part
    /// pages are read through this store, and the write-ahead log is replicated there.
    pub remote: Option<RemoteServe>,
}

/// How the server reaches a data directory on object storage.
#[derive(Clone)]
pub struct RemoteServe {
    /// The store rooted at the data directory that queries read part pages through.
    pub read_store: Arc<dyn datafusion::object_store::ObjectStore>,
    pub wal_replica: Arc<dyn strata_engine::wal::WalReplica>,
}

impl std::fmt::Debug for RemoteServe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteServe")
    }
}

/// State shared by every request of both protocols.
pub(crate) struct Shared {
    pub data_dir: DataDir,
    pub session: Session,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// One permit per statement allowed to run at once (`limits.max_concurrent_queries`).
    pub query_slots: Arc<Semaphore>,
    pub merger: merger::MergerHandle,
    /// The write-ahead log's queue (absent with `wal.enabled = false`).
    pub ingest_queue: Option<Arc<ingest_queue::IngestQueue>>,
    /// The built-in pipelines and the config file's (`?pipeline=` of HTTP ingest).
    pub pipelines: strata_pipeline::Pipelines,
    pub shutdown: CancellationToken,
    /// The runtime whose worker threads run statements' work (PostgreSQL connections are
    /// served on threads of their own, `pg::connection_threads`, ADR 0028).
    pub workers: tokio::runtime::Handle,
}

impl Shared {
    pub fn query_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.config.limits.query_timeout_secs)
    }
}

/// Runs the server until SIGTERM or SIGINT, then stops accepting, lets requests in flight
/// finish, waits for a running merge, and returns. `on_listening` gets each protocol's name and
/// bound address (port 0 is resolved) once every listener is up.
pub fn serve(
    options: ServeOptions,
    on_listening: impl FnOnce(&[(&'static str, SocketAddr)]),
) -> Result<(), ServerError> {
    for (protocol, addr, configured, needed) in [
        (
            "HTTP",
            options.http,
            !options.config.tokens.is_empty(),
            "tokens",
        ),
        (
            "PostgreSQL",
            options.pg,
            !options.config.users.is_empty(),
            "users",
        ),
    ] {
        if let Some(addr) = addr
            && !configured
            && !addr.ip().is_loopback()
        {
            return Err(ServerError::Unauthenticated {
                protocol,
                addr,
                needed,
            });
        }
    }
    let tls = options.config.tls.as_ref().map(tls::acceptor).transpose()?;
    strata_engine::transaction::set_commit_delay(Duration::from_micros(
        options.config.wal.commit_delay_us,
    ));
    std::fs::create_dir_all(&options.data_dir).map_err(|source| {
        ServerError::Engine(strata_engine::EngineError::io(&options.data_dir, source))
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(strata_json::DEEP_STACK_BYTES)
        .on_thread_start(strata_json::mark_deep_stack)
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    runtime.block_on(run(options, tls, on_listening))
}

async fn run(
    options: ServeOptions,
    tls: Option<tokio_rustls::TlsAcceptor>,
    on_listening: impl FnOnce(&[(&'static str, SocketAddr)]),
) -> Result<(), ServerError> {
    let data_dir = DataDir::new(&options.data_dir);
    let session = Session::open_with(
        &options.data_dir,
        options.remote.as_ref().map(|r| r.read_store.clone()),
        Some(options.config.limits.query_memory_bytes),
    )?;
    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::default());
    let background_nice = options.config.limits.background_nice;
    strata_engine::priority::set_parse_threads_nice(background_nice);
    let merger = merger::start(
        data_dir.clone(),
        options.config.merge.clone(),
        background_nice,
        metrics.clone(),
    );
    // Replays what the WAL holds before anything is served.
    let (ingest_queue, flusher) = if options.config.wal.enabled {
        let (data_dir, config, metrics, handle) = (
            data_dir.clone(),
            options.config.clone(),
            metrics.clone(),
            merger.handle(),
        );
        let replica = options.remote.as_ref().map(|r| r.wal_replica.clone());
        let (queue, flusher) = tokio::task::spawn_blocking(move || {
            ingest_queue::IngestQueue::start(data_dir, config, metrics, handle, replica)
        })
        .await
        .map_err(|e| ServerError::Engine(strata_engine::EngineError::Invalid(e.to_string())))??;
        (Some(queue), Some(flusher))
    } else {
        (None, None)
    };
    // Documents changed by SQL are merged as ingested ones are: after each commit, or with a
    // WAL after each checkpoint (`IngestQueue::checkpoints`), since until then a table's new
    // parts are held in memory and left to the checkpoint to fold (ADR 0017, "held files").
    let session = match ingest_queue {
        Some(_) => session,
        None => {
            let merger_handle = merger.handle();
            session.with_commit_observer(Arc::new(move |table: &str| {
                merger_handle.ingested(table);
            }))
        }
    };
    let shared = Arc::new(Shared {
        pipelines: options.config.pipelines()?,
        data_dir,
        ingest_queue,
        session,
        query_slots: Arc::new(Semaphore::new(options.config.limits.max_concurrent_queries)),
        config: options.config.clone(),
        metrics,
        merger: merger.handle(),
        shutdown: shutdown.clone(),
        workers: tokio::runtime::Handle::current(),
    });

    let mut listening = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = options.http {
        let listener = bind("HTTP", addr).await?;
        listening.push(("HTTP", local_addr("HTTP", addr, &listener)?));
        tasks.spawn(http::serve(listener, shared.clone(), tls.clone()));
    }
    if let Some(addr) = options.pg {
        let listener = bind("PostgreSQL", addr).await?;
        listening.push(("PostgreSQL", local_addr("PostgreSQL", addr, &listener)?));
        let handlers = pg::Handlers::new(shared.clone())?;
        let threads =
            pg::ConnectionThreads::start(options.config.limits.connection_threads, &shutdown)?;
        tasks.spawn(pg::serve(
            listener,
            handlers,
            threads,
            shared.clone(),
            tls.clone(),
        ));
    }
    on_listening(&listening);

    wait_for_signal().await;
    eprintln!("strata: shutting down: no new connections; finishing requests in flight");
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    if let Some(flusher) = flusher {
        // Requests acknowledged through the WAL are written into parts before the exit.
        let _ = tokio::task::spawn_blocking(move || flusher.stop()).await;
    }
    // Let the running merge commit or give up (blocking: off the runtime).
    let _ = tokio::task::spawn_blocking(move || merger.stop()).await;
    eprintln!("strata: stopped");
    Ok(())
}

async fn bind(
    protocol: &'static str,
    addr: SocketAddr,
) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            protocol,
            addr,
            source,
        })
}

fn local_addr(
    protocol: &'static str,
    addr: SocketAddr,
    listener: &tokio::net::TcpListener,
) -> Result<SocketAddr, ServerError> {
    listener.local_addr().map_err(|source| ServerError::Bind {
        protocol,
        addr,
        source,
    })
}

/// SIGTERM (service managers, `kill`) or SIGINT (Ctrl-C).
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers the process still ends on SIGTERM, just not gracefully.
            std::future::pending::<()>().await;
        }
    }
}

/// Lowers the calling background thread's priority; one that keeps it only works sooner.
pub(crate) fn lower_priority(nice: i32) {
    if let Err(e) = strata_engine::priority::lower_current_thread(nice) {
        eprintln!("strata: a background thread keeps its CPU priority: {e}");
    }
}

/// The items sent into `receiver`, as a stream that ends when every sender is gone: how a task
/// producing a response (a query's rows, an HTTP body's chunks) hands it to the connection.
pub(crate) fn received<T: Send + 'static>(
    receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}
