//! The threads PostgreSQL connections are served on (ADR 0028).
//!
//! A connection's messages are read, answered and written on one *connection thread*, which
//! runs a current-thread tokio runtime of its own with the sockets of its connections; the
//! statements' heavier work runs on the server's shared runtime (its workers). On the shared
//! runtime alone, a statement's round trip bounced between CPUs: whichever worker polled the
//! sockets woke another to run the connection's task, and the client's thread, woken by the
//! answer, ran on yet another CPU. Waking a thread on another CPU is the dearest thing a round
//! trip of a point read does, dearer still in a virtual machine (about 40 µs here, against a
//! whole round trip of 16 µs when client and server share a CPU). A connection that stays on
//! one thread, which alone polls its socket, is woken on that thread, and the scheduler keeps
//! a client's thread beside it.
//!
//! Invariants:
//! - a connection stays on the thread it was given (its socket is registered with that
//!   thread's runtime); a new connection goes to the thread serving the fewest;
//! - what a statement spawns (DataFusion's partitions, blocking file reads, a commit batch's
//!   leader) runs on the shared runtime ([`OnWorkers`]), and so do a query's rows that
//!   DataFusion produces ([`rows_on_workers`]): a connection's long query holds up the other
//!   connections of its thread for no longer than its planning;
//! - nothing on a connection thread blocks for long: a statement that may wait (a writer lock
//!   held by a merge) waits on a blocking thread of the shared runtime;
//! - the threads end when the server shuts down, dropping their connections (PostgreSQL's fast
//!   shutdown).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::StreamExt;
use pgwire::api::results::Response;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::error::ServerError;

/// Rows a query's producing task may be ahead of the connection sending them.
const ROWS_IN_FLIGHT: usize = 256;

/// The connection threads of one listener.
pub(crate) struct ConnectionThreads {
    threads: Vec<ConnectionThread>,
}

struct ConnectionThread {
    runtime: Handle,
    /// Connections it serves now.
    connections: Arc<AtomicUsize>,
    joined: Option<std::thread::JoinHandle<()>>,
}

/// A connection counted on its thread until dropped.
pub(super) struct Served(Arc<AtomicUsize>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// Starts `count` threads (0: one per CPU), each running until `shutdown`.
    pub(crate) fn start(
        count: usize,
        shutdown: &CancellationToken,
    ) -> Result<ConnectionThreads, ServerError> {
        let count = match count {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            count => count,
        };
        let threads = (0..count)
            .map(|index| ConnectionThread::start(index, shutdown.clone()))
            .collect::<Result<_, _>>()?;
        Ok(ConnectionThreads { threads })
    }

    /// The runtime of the thread serving the fewest connections, and the count of the
    /// connection given to it (None only without threads, which `start` never leaves).
    pub(super) fn least_loaded(&self) -> Option<(Handle, Served)> {
        let thread = self
            .threads
            .iter()
            .min_by_key(|thread| thread.connections.load(Ordering::Relaxed))?;
        thread.connections.fetch_add(1, Ordering::Relaxed);
        Some((thread.runtime.clone(), Served(thread.connections.clone())))
    }

    /// Waits for the threads to end (they end once the shutdown token is cancelled).
    pub(super) fn join(mut self) {
        for thread in &mut self.threads {
            if let Some(joined) = thread.joined.take() {
                let _ = joined.join();
            }
        }
    }
}

impl ConnectionThread {
    fn start(index: usize, shutdown: CancellationToken) -> Result<ConnectionThread, ServerError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let handle = runtime.handle().clone();
        // Statements run parts of their work on this thread (recognising a point read, a
        // commit's documents): as deep a stack as the shared runtime's workers.
        let joined = std::thread::Builder::new()
            .name(format!("strata-pg-{index}"))
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .spawn(move || {
                strata_json::mark_deep_stack();
                runtime.block_on(shutdown.cancelled());
            })
            .map_err(ServerError::Runtime)?;
        Ok(ConnectionThread {
            runtime: handle,
            connections: Arc::new(AtomicUsize::new(0)),
            joined: Some(joined),
        })
    }
}

/// A future polled inside the shared runtime's context: what it spawns (tasks, blocking work)
/// runs on the shared runtime, wherever the future itself is polled.
pub(super) struct OnWorkers<F> {
    workers: Handle,
    inner: Pin<Box<F>>,
}

impl<F> OnWorkers<F> {
    pub(super) fn new(workers: &Handle, inner: F) -> OnWorkers<F> {
        OnWorkers {
            workers: workers.clone(),
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future> Future for OnWorkers<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _context = this.workers.enter();
        this.inner.as_mut().poll(cx)
    }
}

/// The response with its rows produced by a task on the shared runtime and handed to the
/// connection as they come: DataFusion runs the parts of a plan it does not spawn (a final
/// aggregation, a merge of sorted partitions) inside the row stream's own polls, which must not
/// hold up a connection thread. Dropping the rows (the client went, the statement was
/// cancelled) stops the task and with it the plan.
pub(super) fn rows_on_workers(response: Response, workers: &Handle) -> Response {
    let Response::Query(mut query) = response else {
        return response;
    };
    let mut rows = std::mem::replace(query.data_rows(), Box::pin(futures::stream::empty()));
    let (sender, receiver) = tokio::sync::mpsc::channel(ROWS_IN_FLIGHT);
    workers.spawn(async move {
        loop {
            let row = tokio::select! {
                _ = sender.closed() => break,
                row = rows.next() => row,
            };
            let Some(row) = row else { break };
            if sender.send(row).await.is_err() {
                break;
            }
        }
    });
    *query.data_rows() = Box::pin(crate::received(receiver));
    Response::Query(query)
}
