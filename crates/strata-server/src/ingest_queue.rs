//! Ingest requests acknowledged through the write-ahead log, and the flusher that writes them
//! into parts.
//!
//! A request is parsed once, by the HTTP handler, which answers with what the parse counted and
//! rejected. Its body goes into the WAL ([`strata_engine::wal`]); once its group's fsync returns,
//! the request is durable and its parsed documents are queued here under its table. One flusher
//! thread writes each table's queued requests into parts with one
//! `strata_engine::ingest_parsed` call — every request an input of its own, so rejects keep
//! their request and line — and one manifest commit that also records the highest sequence
//! number written (`wal_applied`).
//!
//! Invariants:
//! - requests are queued by the WAL writer's callback, which runs in sequence order, so a
//!   table's queue is always in sequence order and a flush takes a prefix of it: everything at
//!   or below the recorded `wal_applied` is in parts, nothing above it is;
//! - a table is flushed as soon as a request waits to see its documents (`wait=visible`, the
//!   default), after `wal.flush_interval_ms` otherwise, or when `wal.flush_bytes` are waiting;
//!   one flush takes at most `wal.flush_bytes` (but at least one request), which bounds the
//!   memory a flush adds to the queue's;
//! - a failed flush leaves the requests queued (they are durable) and is retried; a waiting
//!   client is told it failed;
//! - the parsed documents held here (their heap bytes) are bounded by `wal.max_pending_bytes`;
//!   beyond it requests are refused before they reach the WAL (one request is always admitted
//!   into an empty queue);
//! - after each flush the WAL's floor is raised to just below the lowest request still queued,
//!   so that a table dropped later does not come back from frames that were already applied;
//! - on start, the requests the WAL holds above their table's mark are parsed and written into
//!   parts (in flushes of at most `wal.flush_bytes`) before the server listens, and on shutdown
//!   every queued request is.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_engine::input::{Compression, Input, StreamInput};
use strata_engine::wal::{Recovery, Wal};
use strata_engine::{DataDir, EngineError, IngestOptions, ParsedInput};
use tokio::sync::oneshot;

use crate::config::Config;
use crate::merger::MergerHandle;
use crate::metrics::Metrics;

/// Rejects kept per request for its answer (all of them go to the table's `rejects.ndjson`).
pub const MAX_LISTED_REJECTS: usize = 1000;

/// How long a table whose flush failed waits before the next try.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Why a request did not get the answer it waited for.
#[derive(Debug)]
pub enum QueueError {
    /// `wal.max_pending_bytes` are waiting to be written into parts: try again later.
    Busy { pending: usize, limit: usize },
    /// The WAL could not make the request durable: nothing of it is stored.
    NotDurable(String),
    /// Durable, but writing it into parts failed; it stays queued and is retried.
    NotVisible { seq: u64, reason: String },
    /// The server is shutting down.
    Stopping,
}

impl std::fmt::Display for QueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueError::Busy { pending, limit } => write!(
                f,
                "{pending} bytes of acknowledged requests are waiting to be written into parts \
                 (wal.max_pending_bytes = {limit}); retry later"
            ),
            QueueError::NotDurable(reason) => {
                write!(f, "the request was not stored: {reason}")
            }
            QueueError::NotVisible { seq, reason } => write!(
                f,
                "the request is durable (write-ahead log sequence {seq}) but writing it into \
                 parts failed; it will be retried: {reason}"
            ),
            QueueError::Stopping => f.write_str("the server is shutting down"),
        }
    }
}

type Visible = oneshot::Sender<Result<(), String>>;

struct Queued {
    seq: u64,
    input: ParsedInput,
    /// Told when the request's documents are visible to queries (or that writing them failed).
    visible: Option<Visible>,
}

#[derive(Default)]
struct TableQueue {
    requests: Vec<Queued>,
    bytes: usize,
    since: Option<Instant>,
    retry_at: Option<Instant>,
}

impl TableQueue {
    fn due(&self, now: Instant, interval: Duration, flush_bytes: usize, stopping: bool) -> bool {
        if self.requests.is_empty() || self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        stopping
            || self.bytes >= flush_bytes
            || self.requests.iter().any(|q| q.visible.is_some())
            || self.since.is_some_and(|since| now >= since + interval)
    }
}

#[derive(Default)]
struct State {
    tables: BTreeMap<String, TableQueue>,
    /// Bodies submitted and not yet written into parts (queued or on their way to the WAL).
    bytes: usize,
    stopping: bool,
}

pub struct IngestQueue {
    wal: Wal,
    state: Mutex<State>,
    wake: Condvar,
    data_dir: DataDir,
    config: Config,
    metrics: Arc<Metrics>,
    merger: MergerHandle,
}

/// The flusher thread; [`Flusher::stop`] writes what is queued and ends it.
pub struct Flusher {
    queue: Arc<IngestQueue>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IngestQueue {
    /// Opens the WAL, writes what it holds beyond each table's mark into parts (logged), and
    /// starts the flusher.
    pub fn start(
        data_dir: DataDir,
        config: Config,
        metrics: Arc<Metrics>,
        merger: MergerHandle,
    ) -> Result<(Arc<IngestQueue>, Flusher), EngineError> {
        let (wal, recovery) = Wal::open(data_dir.root(), config.wal.segment_bytes, &mut |table| {
            applied_mark(&data_dir, table)
        })?;
        let queue = Arc::new(IngestQueue {
            wal,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            data_dir,
            config,
            metrics,
            merger,
        });
        queue.replay(recovery)?;
        let flusher = queue.clone();
        let thread = std::thread::Builder::new()
            .name("strata-flush".into())
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .spawn(move || flusher.run())
            .map_err(|e| EngineError::io(queue.wal.dir(), e))?;
        Ok((
            queue.clone(),
            Flusher {
                queue,
                thread: Some(thread),
            },
        ))
    }

    /// Bytes in the WAL's files, and bytes of bodies not yet written into parts.
    pub fn sizes(&self) -> (u64, usize) {
        (self.wal.bytes(), self.lock().bytes)
    }

    /// Stores a request's body in the WAL and queues its parsed documents; answers with its
    /// sequence number once it is durable and, with `wait_visible`, once queries see its
    /// documents.
    pub async fn submit(
        self: &Arc<Self>,
        table: &str,
        compression: Compression,
        body: Bytes,
        input: ParsedInput,
        wait_visible: bool,
    ) -> Result<u64, QueueError> {
        let size = input.heap_bytes();
        {
            let mut state = self.lock();
            if state.stopping {
                return Err(QueueError::Stopping);
            }
            let limit = self.config.wal.max_pending_bytes;
            if state.bytes > 0 && state.bytes + size > limit {
                return Err(QueueError::Busy {
                    pending: state.bytes,
                    limit,
                });
            }
            state.bytes += size;
        }
        let (durable_tx, durable_rx) = oneshot::channel();
        let (visible_tx, visible_rx) = if wait_visible {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let queue = self.clone();
        let name = table.to_owned();
        self.wal.append(
            table,
            compression,
            body,
            Box::new(move |result| {
                match &result {
                    Ok(seq) => queue.enqueue(name, *seq, input, visible_tx),
                    Err(_) => queue.lock().bytes -= size,
                }
                let _ = durable_tx.send(result.map_err(|e| e.to_string()));
            }),
        );
        let seq = match durable_rx.await {
            Ok(Ok(seq)) => seq,
            Ok(Err(reason)) => return Err(QueueError::NotDurable(reason)),
            Err(_) => return Err(QueueError::NotDurable("the WAL writer stopped".into())),
        };
        let Some(visible) = visible_rx else {
            return Ok(seq);
        };
        match visible.await {
            Ok(Ok(())) => Ok(seq),
            Ok(Err(reason)) => Err(QueueError::NotVisible { seq, reason }),
            // The flusher ended (shutdown): it writes every queued request first, so the
            // request is either in parts or durable in the WAL for the next start.
            Err(_) => Err(QueueError::Stopping),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enqueue(&self, table: String, seq: u64, mut input: ParsedInput, visible: Option<Visible>) {
        input.rename(&request_name(seq, &table));
        let mut state = self.lock();
        let queue = state.tables.entry(table).or_default();
        queue.bytes += input.heap_bytes();
        queue.since.get_or_insert_with(Instant::now);
        queue.requests.push(Queued {
            seq,
            input,
            visible,
        });
        drop(state);
        self.wake.notify_one();
    }

    /// Writes the recovered requests into parts before anything else runs.
    fn replay(&self, recovery: Recovery) -> Result<(), EngineError> {
        if let Some((path, offset, reason)) = &recovery.truncated {
            eprintln!(
                "strata: write-ahead log {}: cut at byte {offset}, a write that was never \
                 acknowledged ({reason})",
                path.display()
            );
        }
        let mut by_table: BTreeMap<String, Vec<(u64, Compression, Bytes)>> = BTreeMap::new();
        for frame in recovery.frames {
            by_table.entry(frame.table).or_default().push((
                frame.seq,
                frame.compression,
                frame.body,
            ));
        }
        let flush_bytes = self.config.wal.flush_bytes;
        for (table, frames) in by_table {
            let count = frames.len();
            let bytes: usize = frames.iter().map(|(_, _, body)| body.len()).sum();
            let mut documents = 0;
            let mut batch: Vec<ParsedInput> = Vec::new();
            let mut batch_bytes = 0;
            let mut frames = frames.into_iter().peekable();
            while let Some((seq, compression, body)) = frames.next() {
                let input = Input::Stream(StreamInput::new(
                    request_name(seq, &table),
                    compression,
                    Box::new(Cursor::new(body)),
                ));
                let max_line_bytes = Some(self.config.limits.max_line_bytes);
                // Each request was admitted whole before; it is parsed whole again.
                if let Some(parsed) = ParsedInput::parse(&input, max_line_bytes, usize::MAX)? {
                    batch_bytes += parsed.heap_bytes();
                    batch.push(parsed);
                }
                if batch_bytes >= flush_bytes || frames.peek().is_none() {
                    let inputs: Vec<&ParsedInput> = batch.iter().collect();
                    documents += self.write_into_parts(&table, &inputs, seq)?;
                    batch.clear();
                    batch_bytes = 0;
                }
            }
            eprintln!(
                "strata: replayed {count} acknowledged requests ({bytes} bytes, {documents} \
                 documents) from the write-ahead log into table {table}"
            );
        }
        // Everything the WAL held is in parts now.
        self.wal.raise_floor(self.wal.told())?;
        Ok(())
    }

    /// One manifest commit for `inputs` (a prefix of the table's queue, whose last sequence
    /// number is `last`); returns the documents loaded.
    fn write_into_parts(
        &self,
        table: &str,
        inputs: &[&ParsedInput],
        last: u64,
    ) -> Result<u64, EngineError> {
        let options = IngestOptions {
            auto_merge: false,
            max_line_bytes: Some(self.config.limits.max_line_bytes),
            wal_applied: Some(last),
            ..IngestOptions::default()
        };
        let loaded = match strata_engine::ingest_parsed(&self.data_dir, table, inputs, &options) {
            Ok(summary) => summary.progress.loaded,
            // Every line of every request was rejected: nothing to commit, and nothing left
            // to apply (the floor passes these requests).
            Err(EngineError::AllRejected { .. }) => 0,
            Err(e) => return Err(e),
        };
        self.wal.applied(table, last)?;
        self.merger.ingested(table);
        self.metrics.wal_flushes.fetch_add(1, Ordering::Relaxed);
        Ok(loaded)
    }

    fn run(&self) {
        let interval = Duration::from_millis(self.config.wal.flush_interval_ms);
        let flush_bytes = self.config.wal.flush_bytes;
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let due = state
                .tables
                .iter()
                .find(|(_, q)| q.due(now, interval, flush_bytes, state.stopping))
                .map(|(table, _)| table.clone());
            let Some(table) = due else {
                if state.stopping && state.tables.values().all(|q| q.requests.is_empty()) {
                    return;
                }
                // Sleep until the next table falls due by time (or a request wakes us).
                let next = state
                    .tables
                    .values()
                    .filter(|q| !q.requests.is_empty())
                    .filter_map(|q| match q.retry_at {
                        Some(at) => Some(at),
                        None => q.since.map(|since| since + interval),
                    })
                    .min();
                let wait = next.map_or(interval, |at| at.saturating_duration_since(now));
                state = self
                    .wake
                    .wait_timeout(state, wait.max(Duration::from_millis(1)))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            };
            let Some(queue) = state.tables.get_mut(&table) else {
                continue;
            };
            let mut taken = 0;
            let mut bytes = 0;
            while taken < queue.requests.len() && (taken == 0 || bytes < flush_bytes) {
                bytes += queue.requests[taken].input.heap_bytes();
                taken += 1;
            }
            let requests: Vec<Queued> = queue.requests.drain(..taken).collect();
            queue.bytes -= bytes;
            if queue.requests.is_empty() {
                queue.since = None;
            }
            drop(state);

            let inputs: Vec<&ParsedInput> = requests.iter().map(|q| &q.input).collect();
            let last = requests.last().map_or(0, |q| q.seq);
            let result = self.write_into_parts(&table, &inputs, last);
            // Read before the queue: every request told its number by then is in the queue or
            // was just written.
            let told = self.wal.told();

            state = self.lock();
            match result {
                Ok(_) => {
                    state.bytes -= bytes;
                    if let Some(queue) = state.tables.get_mut(&table) {
                        queue.retry_at = None;
                    }
                    let lowest_queued = state
                        .tables
                        .values()
                        .filter_map(|q| q.requests.first().map(|r| r.seq))
                        .min();
                    let floor = lowest_queued.map_or(told, |seq| told.min(seq - 1));
                    drop(state);
                    if let Err(e) = self.wal.raise_floor(floor) {
                        eprintln!("strata: the write-ahead log's floor could not be raised: {e}");
                    }
                    for request in requests {
                        if let Some(visible) = request.visible {
                            let _ = visible.send(Ok(()));
                        }
                    }
                    state = self.lock();
                }
                Err(e) => {
                    eprintln!(
                        "strata: writing {} acknowledged requests into table {table} failed \
                         (they stay in the write-ahead log; retrying): {e}",
                        requests.len()
                    );
                    self.metrics
                        .wal_flush_failures
                        .fetch_add(1, Ordering::Relaxed);
                    let reason = e.to_string();
                    let queue = state.tables.entry(table).or_default();
                    // Back in front, in order: the queue stays a sequence-ordered list.
                    let mut kept: Vec<Queued> = requests
                        .into_iter()
                        .map(|mut request| {
                            if let Some(visible) = request.visible.take() {
                                let _ = visible.send(Err(reason.clone()));
                            }
                            request
                        })
                        .collect();
                    kept.append(&mut queue.requests);
                    queue.requests = kept;
                    queue.bytes += bytes;
                    queue.since.get_or_insert_with(Instant::now);
                    queue.retry_at = Some(Instant::now() + RETRY_AFTER_FAILURE);
                    if state.stopping {
                        // Shutting down on a failing disk: what is queued is durable in the
                        // WAL and is replayed on the next start.
                        return;
                    }
                }
            }
        }
    }
}

impl Flusher {
    /// Refuses new requests, writes every queued one into parts, and ends the flusher.
    pub fn stop(mut self) {
        self.queue.lock().stopping = true;
        self.queue.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How a request is named in its table's `rejects.ndjson`.
fn request_name(seq: u64, table: &str) -> String {
    format!("request {seq} ({table})")
}

/// The table's `wal_applied` mark (0 when the table does not exist or has none).
fn applied_mark(data_dir: &DataDir, table: &str) -> Result<u64, EngineError> {
    if !data_dir.table_exists(table)? {
        return Ok(0);
    }
    Ok(data_dir.manifest(table)?.wal_applied.unwrap_or(0))
}
