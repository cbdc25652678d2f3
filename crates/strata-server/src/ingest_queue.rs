//! Ingest requests acknowledged through the write-ahead log, and the flushers that write them
//! into parts.
//!
//! A request is parsed once, by the HTTP handler, which answers with what the parse counted and
//! rejected. Its body goes into the WAL ([`strata_engine::wal`]); once its group's fsync returns,
//! the request is durable and its parsed documents are queued here under its table. Flusher
//! threads (`wal.flush_threads`) write each table's queued requests into parts — every request
//! an input of its own, so rejects keep their request and line — with one manifest commit per
//! flush that also records the highest sequence number written (`wal_applied`). A flush shreds
//! its documents without the table's lock (`strata_engine::PreparedIngest`) and commits in the
//! order the flushes took their requests, so one flush shreds while the one before it writes.
//!
//! Invariants:
//! - requests are queued by the WAL writer's callback, which runs in sequence order, so a
//!   table's queue is always in sequence order and a flush takes a prefix of it; flushes of a
//!   table commit in the order they took their requests, and when one fails the ones after it
//!   give their requests back: everything at or below the recorded `wal_applied` is in parts,
//!   nothing above it is;
//! - a table is flushed as soon as a request waits to see its documents (`wait=visible`, the
//!   default), after `wal.flush_interval_ms` otherwise (or `wal.flush_quiet_ms` after the last
//!   request came), or when `wal.flush_bytes` are waiting;
//!   one flush takes at most `wal.flush_bytes` (but at least one request), which bounds the
//!   memory a flush adds to the queue's;
//! - a failed flush leaves the requests queued (they are durable) and is retried; a waiting
//!   client is told it failed;
//! - the parsed documents held here (their heap bytes) are bounded by `wal.max_pending_bytes`;
//!   a request that does not fit waits up to `wal.admission_wait_ms` for a flush to make room
//!   and is then refused before it reaches the WAL (one request is always admitted into an
//!   empty queue);
//! - after each flush the WAL's floor is raised to just below the lowest request still queued
//!   or in a flush, so that a table dropped later does not come back from frames that were
//!   already applied;
//! - on start, the requests the WAL holds above their table's mark are parsed and written into
//!   parts (in flushes of at most `wal.flush_bytes`) before the server listens, and on shutdown
//!   every queued request is;
//! - the same WAL carries the server's transaction commits (`strata_engine::transaction::logged`,
//!   ADR 0017 "live manifests"): their frames are applied first on start, the queue registers
//!   the WAL for them once its replay is done, and its checkpoint thread makes them durable in
//!   their tables every `wal.checkpoint_interval_ms` and on shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_engine::input::{Compression, Input, StreamInput};
use strata_engine::wal::{Recovery, TRANSACTIONS_FRAME, Wal};
use strata_engine::{
    DataDir, EngineError, IngestOptions, IngestSummary, ParsedInput, PreparedIngest,
};
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
    /// When the last request was queued: a table whose requests stopped coming is flushed
    /// after `wal.flush_quiet_ms` rather than the whole `wal.flush_interval_ms`.
    last_arrival: Option<Instant>,
    retry_at: Option<Instant>,
    /// Flushes of this table are numbered as they take their requests ...
    next_ticket: u64,
    /// ... and commit in that order: this one commits next.
    turn: u64,
    /// Flushes numbered below this give their requests back instead of committing: one before
    /// them failed, and committing later requests would raise the table's mark past its.
    abort_below: u64,
}

impl TableQueue {
    fn due(&self, now: Instant, timing: &FlushTiming, stopping: bool) -> bool {
        if self.requests.is_empty() || self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        stopping
            || self.bytes >= timing.flush_bytes
            || self.requests.iter().any(|q| q.visible.is_some())
            || self.due_at(timing).is_some_and(|at| now >= at)
    }

    /// When the queued requests fall due by time alone.
    fn due_at(&self, timing: &FlushTiming) -> Option<Instant> {
        if self.requests.is_empty() {
            return None;
        }
        if let Some(at) = self.retry_at {
            return Some(at);
        }
        let by_age = self.since.map(|since| since + timing.interval);
        let by_quiet = self.last_arrival.map(|last| last + timing.quiet);
        by_age.into_iter().chain(by_quiet).min()
    }
}

/// When a table's queue is flushed (`[wal]` in the config).
struct FlushTiming {
    interval: Duration,
    quiet: Duration,
    flush_bytes: usize,
}

#[derive(Default)]
struct State {
    tables: BTreeMap<String, TableQueue>,
    /// Bodies submitted and not yet written into parts (queued or on their way to the WAL).
    bytes: usize,
    /// The lowest sequence number of each flush running now.
    in_flight: BTreeSet<u64>,
    stopping: bool,
}

pub struct IngestQueue {
    wal: Arc<Wal>,
    state: Mutex<State>,
    /// A request was queued, or the server is stopping.
    wake: Condvar,
    /// A flush committed or gave up: the next one of its table may commit.
    turns: Condvar,
    /// The server is stopping (the checkpoint thread ends).
    wake_checkpoint: Condvar,
    /// Pending bytes went down (or the server is stopping): requests waiting for room look again.
    room: tokio::sync::Notify,
    data_dir: DataDir,
    config: Config,
    metrics: Arc<Metrics>,
    merger: MergerHandle,
}

/// The flusher threads; [`Flusher::stop`] writes what is queued and ends them.
pub struct Flusher {
    queue: Arc<IngestQueue>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl IngestQueue {
    /// Opens the WAL, writes what it holds beyond each table's mark into parts (logged), and
    /// starts the flusher.
    pub fn start(
        data_dir: DataDir,
        config: Config,
        metrics: Arc<Metrics>,
        merger: MergerHandle,
        replica: Option<Arc<dyn strata_engine::wal::WalReplica>>,
    ) -> Result<(Arc<IngestQueue>, Flusher), EngineError> {
        let (wal, recovery) = Wal::open_replicated(
            data_dir.root(),
            config.wal.segment_bytes,
            &mut |table| applied_mark(&data_dir, table),
            replica,
        )?;
        let wal = Arc::new(wal);
        let queue = Arc::new(IngestQueue {
            wal: wal.clone(),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            turns: Condvar::new(),
            wake_checkpoint: Condvar::new(),
            room: tokio::sync::Notify::new(),
            data_dir,
            config,
            metrics,
            merger,
        });
        queue.replay(recovery)?;
        // Transactions commit through the WAL from now on (their frames were replayed above).
        strata_engine::transaction::logged::register(&queue.data_dir, wal);
        let checkpoints = {
            let checkpointing = queue.clone();
            std::thread::Builder::new()
                .name("strata-checkpoint".into())
                .stack_size(strata_json::DEEP_STACK_BYTES)
                .spawn(move || checkpointing.checkpoints())
                .map_err(|e| EngineError::io(queue.wal.dir(), e))?
        };
        let mut threads = vec![checkpoints];
        for i in 0..queue.config.wal.flush_threads {
            let flusher = queue.clone();
            let thread = std::thread::Builder::new()
                .name(format!("strata-flush-{i}"))
                .stack_size(strata_json::DEEP_STACK_BYTES)
                .spawn(move || flusher.run())
                .map_err(|e| EngineError::io(queue.wal.dir(), e))?;
            threads.push(thread);
        }
        Ok((queue.clone(), Flusher { queue, threads }))
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
        let limit = self.config.wal.max_pending_bytes;
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.wal.admission_wait_ms);
        loop {
            // Created before the check, so a flush that makes room after it still wakes us.
            let room = self.room.notified();
            {
                let mut state = self.lock();
                if state.stopping {
                    return Err(QueueError::Stopping);
                }
                if state.bytes == 0 || state.bytes + size <= limit {
                    state.bytes += size;
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(QueueError::Busy {
                        pending: state.bytes,
                        limit,
                    });
                }
            }
            let _ = tokio::time::timeout_at(deadline, room).await;
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
                    Err(_) => {
                        queue.lock().bytes -= size;
                        queue.room.notify_waiters();
                    }
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
        let now = Instant::now();
        queue.since.get_or_insert(now);
        queue.last_arrival = Some(now);
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
        // Transaction commits first: they go to tables that ingest frames do not (keyed ones) or
        // append, which commutes with the ingest frames' appends.
        let (transactions, ingests): (Vec<_>, Vec<_>) = recovery
            .frames
            .into_iter()
            .partition(|frame| frame.table == TRANSACTIONS_FRAME);
        if let Some(last) = transactions.last() {
            let bodies: Vec<(u64, &[u8])> =
                transactions.iter().map(|f| (f.seq, &f.body[..])).collect();
            let replayed = strata_engine::transaction::logged::replay(&self.data_dir, &bodies)?;
            eprintln!(
                "strata: replayed {} committed transactions from the write-ahead log ({} table \
                 changes applied, {} already on disk)",
                transactions.len(),
                replayed.applied,
                replayed.skipped
            );
            self.wal.applied(TRANSACTIONS_FRAME, last.seq)?;
        }
        let mut by_table: BTreeMap<String, Vec<(u64, Compression, Bytes)>> = BTreeMap::new();
        for frame in ingests {
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
                if let Some(parsed) = ParsedInput::parse(&input, max_line_bytes, usize::MAX, None)?
                {
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
        let written =
            strata_engine::ingest_parsed(&self.data_dir, table, inputs, &self.ingest_options(last));
        self.committed(table, last, written)
    }

    /// How a flush whose last request is `last` is written.
    fn ingest_options(&self, last: u64) -> IngestOptions {
        IngestOptions {
            auto_merge: false,
            max_line_bytes: Some(self.config.limits.max_line_bytes),
            wal_applied: Some(last),
            ..IngestOptions::default()
        }
    }

    /// Records a flush's commit (up to `last`) with the WAL, the merger and the metrics;
    /// returns the documents loaded.
    fn committed(
        &self,
        table: &str,
        last: u64,
        written: Result<IngestSummary, EngineError>,
    ) -> Result<u64, EngineError> {
        let loaded = match written {
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
        crate::lower_priority(self.config.limits.background_nice);
        let timing = FlushTiming {
            interval: Duration::from_millis(self.config.wal.flush_interval_ms),
            quiet: Duration::from_millis(self.config.wal.flush_quiet_ms),
            flush_bytes: self.config.wal.flush_bytes,
        };
        let flush_bytes = timing.flush_bytes;
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let due = state
                .tables
                .iter()
                .find(|(_, q)| q.due(now, &timing, state.stopping))
                .map(|(table, _)| table.clone());
            let Some(table) = due else {
                if state.stopping && state.tables.values().all(|q| q.requests.is_empty()) {
                    return;
                }
                // Sleep until the next table falls due by time (or a request wakes us).
                let next = state
                    .tables
                    .values()
                    .filter_map(|q| q.due_at(&timing))
                    .min();
                let wait = next.map_or(timing.interval, |at| at.saturating_duration_since(now));
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
            let ticket = queue.next_ticket;
            queue.next_ticket += 1;
            let first = requests.first().map_or(0, |q| q.seq);
            state.in_flight.insert(first);
            drop(state);

            // Shredding needs no lock, so it runs while the flush before this one writes.
            let inputs: Vec<&ParsedInput> = requests.iter().map(|q| &q.input).collect();
            let last = requests.last().map_or(0, |q| q.seq);
            let prepared =
                PreparedIngest::shred(&self.data_dir, &table, &inputs, &self.ingest_options(last));

            state = self.lock();
            while state.tables.get(&table).is_some_and(|q| q.turn != ticket) {
                state = self
                    .turns
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            let aborted = state
                .tables
                .get(&table)
                .is_some_and(|q| ticket < q.abort_below);
            drop(state);
            let result = if aborted {
                None
            } else {
                Some(self.committed(
                    &table,
                    last,
                    prepared.and_then(|prepared| prepared.commit(&self.data_dir)),
                ))
            };
            drop(inputs);
            // Read before the queue: every request told its number by then is in the queue, in
            // flight, or was just written.
            let told = self.wal.told();

            state = self.lock();
            state.in_flight.remove(&first);
            let queue = state.tables.entry(table.clone()).or_default();
            queue.turn = ticket + 1;
            self.turns.notify_all();
            match result {
                Some(Ok(_)) => {
                    state.bytes -= bytes;
                    self.room.notify_waiters();
                    if let Some(queue) = state.tables.get_mut(&table) {
                        queue.retry_at = None;
                    }
                    let lowest_queued = state
                        .tables
                        .values()
                        .filter_map(|q| q.requests.first().map(|r| r.seq))
                        .chain(state.in_flight.iter().copied())
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
                failed => {
                    let reason = match failed {
                        Some(Err(e)) => {
                            eprintln!(
                                "strata: writing {} acknowledged requests into table {table} \
                                 failed (they stay in the write-ahead log; retrying): {e}",
                                requests.len()
                            );
                            self.metrics
                                .wal_flush_failures
                                .fetch_add(1, Ordering::Relaxed);
                            Some(e.to_string())
                        }
                        // A flush before this one failed: these requests wait for its retry.
                        _ => None,
                    };
                    let queue = state.tables.entry(table).or_default();
                    if reason.is_some() {
                        // Flushes numbered already took later requests: they must not commit
                        // before these.
                        queue.abort_below = queue.next_ticket;
                    }
                    let kept = requests.into_iter().map(|mut request| {
                        if let Some(reason) = &reason
                            && let Some(visible) = request.visible.take()
                        {
                            let _ = visible.send(Err(reason.clone()));
                        }
                        request
                    });
                    // Back in sequence order: the queue stays a sequence-ordered list.
                    queue.requests.extend(kept);
                    queue.requests.sort_by_key(|request| request.seq);
                    queue.bytes += bytes;
                    queue.since.get_or_insert_with(Instant::now);
                    queue.retry_at = Some(Instant::now() + RETRY_AFTER_FAILURE);
                    if state.stopping && reason.is_some() {
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
    /// Refuses new requests, writes every queued one into parts, ends the flushers, and makes
    /// the transactions committed through the WAL durable in their tables.
    pub fn stop(self) {
        self.queue.lock().stopping = true;
        self.queue.room.notify_waiters();
        self.queue.wake.notify_all();
        self.queue.wake_checkpoint.notify_all();
        for thread in self.threads {
            let _ = thread.join();
        }
        if let Err(e) = strata_engine::transaction::logged::unregister(&self.queue.data_dir) {
            eprintln!(
                "strata: the last checkpoint failed (the write-ahead log keeps the transactions; \
                 the next start applies them): {e}"
            );
        }
    }
}

impl IngestQueue {
    /// The checkpoint thread: makes transactions committed through the WAL durable in their
    /// tables every `wal.checkpoint_interval_ms`, until the server stops.
    fn checkpoints(&self) {
        let interval = Duration::from_millis(self.config.wal.checkpoint_interval_ms);
        let mut state = self.lock();
        while !state.stopping {
            state = self
                .wake_checkpoint
                .wait_timeout(state, interval)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if state.stopping {
                break;
            }
            drop(state);
            match strata_engine::transaction::logged::checkpoint(&self.data_dir) {
                // Their small parts are on disk now: the merger's to merge.
                Ok(committed) => committed
                    .iter()
                    .for_each(|table| self.merger.ingested(table)),
                Err(e) => eprintln!("strata: checkpoint failed (retrying): {e}"),
            }
            state = self.lock();
        }
    }
}

/// How a request is named in its table's `rejects.ndjson`.
fn request_name(seq: u64, table: &str) -> String {
    format!("request {seq} ({table})")
}

/// The table's `wal_applied` mark (0 when the table does not exist or has none; transaction
/// frames are all returned, and skipped per table by `logged::replay`).
fn applied_mark(data_dir: &DataDir, table: &str) -> Result<u64, EngineError> {
    if table == TRANSACTIONS_FRAME || !data_dir.table_exists(table)? {
        return Ok(0);
    }
    Ok(data_dir.manifest_shared(table)?.wal_applied.unwrap_or(0))
}
