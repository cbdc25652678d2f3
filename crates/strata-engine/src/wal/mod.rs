//! The write-ahead log: requests are durable once their frame is fsynced, before they are
//! written into parts.
//!
//! Files: `DATA_DIR/.wal/<first seq, 20 digits>.wal`, each the 8-byte magic `STRAWAL1` followed by
//! frames ([`frame`]). One writer thread appends: it takes every request waiting at that moment
//! (up to [`GROUP_BYTES`]), writes them with one `write` and makes them durable with one
//! `fdatasync` (group commit), then tells each caller its sequence number, in sequence order.
//!
//! Invariants:
//! - sequence numbers increase in file order across segments and are never reused (a failed
//!   write burns its numbers);
//! - a caller is told `Ok(seq)` only after the `fdatasync` that covers its frame;
//! - a table's manifest records the highest sequence number applied to it (`wal_applied`), in
//!   the same atomic commit as the parts that hold those requests; recovery returns only frames
//!   above it, so a request is applied exactly once;
//! - the *floor* (`.wal/floor`) is a sequence number at or below which every frame is in
//!   parts; recovery skips those frames whatever their table's manifest says, so that a table
//!   dropped after its requests were written into parts does not come back from the WAL. The
//!   owner of the queue raises it ([`Wal::raise_floor`]) only to a number below every request
//!   it still holds;
//! - a segment is deleted only when it is not the one being written and every frame in it is
//!   at or below the floor or its table's applied mark ([`Wal::applied`]);
//! - damage at the end of the last segment is a torn, unacknowledged write and is cut off (and
//!   reported); damage anywhere else is an error, never skipped;
//! - with a [`WalReplica`] (the server on object storage), a group is acknowledged only after the
//!   replica stored it too, the floor is stored there before segments are deleted for it, and a
//!   segment is deleted there before it is deleted here.

pub mod frame;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

pub use frame::Frame;

use crate::EngineError;
use crate::input::Compression;

/// The WAL's directory inside a data directory (not a valid table name).
pub const WAL_DIR: &str = ".wal";
pub const MAGIC: &[u8; 8] = b"STRAWAL1";
/// A group commit writes at most about this much before its fsync.
pub const GROUP_BYTES: usize = 4 << 20;
/// The `table` of a frame holding a transaction commit (`crate::transaction::logged`): changes
/// to several tables, applied by their own marks (`wal_transactions`). Not a valid table name.
pub const TRANSACTIONS_FRAME: &str = "*transaction";
/// The floor's file in the WAL directory.
pub const FLOOR_FILE: &str = "floor";
/// Default size at which the writer starts a new segment.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// A copy of the log kept off this machine, so that an acknowledged request survives the loss
/// of the local disk (the server on object storage, ADR 0022). Each method returns once its
/// change is durable there.
pub trait WalReplica: Send + Sync {
    /// Stores `frames` (encoded, as appended to the segment file), the group whose first frame
    /// is `first_seq`, of the segment whose first sequence number is `segment`.
    fn write_group(&self, segment: u64, first_seq: u64, frames: &[u8]) -> Result<(), EngineError>;
    /// Stores the floor.
    fn write_floor(&self, floor: u64) -> Result<(), EngineError>;
    /// Deletes the segment whose first sequence number is `segment`.
    fn delete_segment(&self, segment: u64) -> Result<(), EngineError>;
}

/// What the writer tells a caller: the request's sequence number once it is durable.
pub type Done = Box<dyn FnOnce(Result<u64, EngineError>) + Send>;

struct Append {
    table: String,
    compression: Compression,
    body: Bytes,
    done: Done,
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    bytes: u64,
    /// For each table with frames in the segment, the highest sequence number there.
    tables: HashMap<String, u64>,
}

#[derive(Debug, Default)]
struct Segments {
    /// By first sequence number; the last one is being written.
    list: BTreeMap<u64, Segment>,
    /// Highest applied sequence number per table, as last reported.
    applied: HashMap<String, u64>,
    /// Every frame at or below it is in parts.
    floor: u64,
    /// Every request at or below it has been told its sequence number (so its owner holds it).
    told: u64,
    /// Transaction frames not yet applied ([`TRANSACTIONS_FRAME`]): the floor stays below them.
    transactions: std::collections::BTreeSet<u64>,
    replica: Option<Arc<dyn WalReplica>>,
}

impl std::fmt::Debug for dyn WalReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WalReplica")
    }
}

impl Segments {
    fn bytes(&self) -> u64 {
        self.list.values().map(|s| s.bytes).sum()
    }

    /// Deletes every segment but the last whose frames are all applied.
    fn delete_applied(&mut self) -> Result<Vec<PathBuf>, EngineError> {
        let Some(&last) = self.list.keys().next_back() else {
            return Ok(Vec::new());
        };
        let done: Vec<u64> = self
            .list
            .iter()
            .filter(|(first, segment)| {
                **first != last
                    && segment.tables.iter().all(|(table, max)| {
                        *max <= self.floor || self.applied.get(table).is_some_and(|a| a >= max)
                    })
            })
            .map(|(first, _)| *first)
            .collect();
        let mut deleted = Vec::new();
        for first in done {
            if let Some(replica) = &self.replica {
                replica.delete_segment(first)?;
            }
            if let Some(segment) = self.list.remove(&first) {
                fs::remove_file(&segment.path).map_err(|e| EngineError::io(&segment.path, e))?;
                deleted.push(segment.path);
            }
        }
        Ok(deleted)
    }
}

/// What [`Wal::open`] found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Frames not yet applied to their table, in sequence order.
    pub frames: Vec<Frame>,
    /// Frames found already applied (skipped).
    pub skipped: usize,
    /// A torn tail cut off the last segment: its file, the offset it was cut at, and why.
    pub truncated: Option<(PathBuf, u64, String)>,
}

/// The write-ahead log of one data directory. Dropping it stops the writer after the appends
/// already sent.
pub struct Wal {
    dir: PathBuf,
    sender: Option<mpsc::Sender<Append>>,
    writer: Option<std::thread::JoinHandle<()>>,
    segments: Arc<Mutex<Segments>>,
}

impl Wal {
    /// Opens (creating) the WAL of `data_dir`, reads back every segment, cuts a torn tail off
    /// the last one, and returns the frames above their table's applied mark
    /// (`applied(table)`: the manifest's `wal_applied`, 0 for a table that does not exist).
    pub fn open(
        data_dir: &Path,
        segment_bytes: u64,
        applied: &mut dyn FnMut(&str) -> Result<u64, EngineError>,
    ) -> Result<(Wal, Recovery), EngineError> {
        Wal::open_replicated(data_dir, segment_bytes, applied, None)
    }

    /// [`Wal::open`] with every group, floor and deletion also made durable on `replica`. The
    /// local segments must hold everything the replica holds (the caller restores them first).
    pub fn open_replicated(
        data_dir: &Path,
        segment_bytes: u64,
        applied: &mut dyn FnMut(&str) -> Result<u64, EngineError>,
        replica: Option<Arc<dyn WalReplica>>,
    ) -> Result<(Wal, Recovery), EngineError> {
        let dir = data_dir.join(WAL_DIR);
        fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| EngineError::io(&dir, e))? {
            let entry = entry.map_err(|e| EngineError::io(&dir, e))?;
            let path = entry.path();
            let Some(first) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".wal"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            files.push((first, path));
        }
        files.sort();
        let floor = read_floor(&dir)?;

        let mut recovery = Recovery::default();
        let mut segments = Segments::default();
        let mut marks: HashMap<String, u64> = HashMap::new();
        let mut next_seq = 1u64;
        let count = files.len();
        for (index, (first, path)) in files.into_iter().enumerate() {
            let last = index + 1 == count;
            let mut bytes = Vec::new();
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(|e| EngineError::io(&path, e))?;
            let mut tables = HashMap::new();
            let mut offset = if bytes.starts_with(MAGIC) {
                MAGIC.len()
            } else if last && bytes.len() < MAGIC.len() && MAGIC.starts_with(&bytes) {
                // Created, killed before its magic was durable.
                0
            } else {
                return Err(wal_damage(&path, 0, "it does not start with STRAWAL1"));
            };
            while offset < bytes.len() {
                match frame::decode(&bytes[offset..]) {
                    Ok((frame, used)) => {
                        if frame.seq < next_seq {
                            return Err(wal_damage(
                                &path,
                                offset as u64,
                                &format!(
                                    "frame {} comes after frame {} (sequence numbers must increase)",
                                    frame.seq,
                                    next_seq - 1
                                ),
                            ));
                        }
                        next_seq = frame.seq + 1;
                        tables.insert(frame.table.clone(), frame.seq);
                        if frame.seq <= floor {
                            recovery.skipped += 1;
                            offset += used;
                            continue;
                        }
                        let mark = match marks.get(&frame.table) {
                            Some(mark) => *mark,
                            None => {
                                let mark = applied(&frame.table)?;
                                marks.insert(frame.table.clone(), mark);
                                mark
                            }
                        };
                        if frame.seq > mark {
                            if frame.table == TRANSACTIONS_FRAME {
                                segments.transactions.insert(frame.seq);
                            }
                            recovery.frames.push(frame);
                        } else {
                            recovery.skipped += 1;
                        }
                        offset += used;
                    }
                    Err(damage) if last => {
                        // Never acknowledged: its fdatasync did not return.
                        let file = OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .map_err(|e| EngineError::io(&path, e))?;
                        file.set_len(offset as u64)
                            .and_then(|()| file.sync_all())
                            .map_err(|e| EngineError::io(&path, e))?;
                        recovery.truncated =
                            Some((path.clone(), offset as u64, damage.to_string()));
                        bytes.truncate(offset);
                        break;
                    }
                    Err(damage) => {
                        return Err(wal_damage(&path, offset as u64, &damage.to_string()));
                    }
                }
            }
            segments.list.insert(
                first,
                Segment {
                    path,
                    bytes: bytes.len() as u64,
                    tables,
                },
            );
        }
        segments.applied = marks;
        segments.floor = floor;
        segments.replica = replica.clone();
        segments.told = next_seq - 1;
        // A new run writes a segment of its own: the last one may have been cut.
        let (file, segment) = new_segment(&dir, next_seq)?;
        segments.list.insert(next_seq, segment);
        segments.delete_applied()?;

        let segments = Arc::new(Mutex::new(segments));
        let (sender, receiver) = mpsc::channel();
        let writer = Writer {
            dir: dir.clone(),
            file,
            next_seq,
            segment_bytes,
            segments: segments.clone(),
            broken: None,
            replica,
        };
        let writer = std::thread::Builder::new()
            .name("strata-wal".into())
            .spawn(move || writer.run(receiver))
            .map_err(|e| EngineError::io(&dir, e))?;
        Ok((
            Wal {
                dir,
                sender: Some(sender),
                writer: Some(writer),
                segments,
            },
            recovery,
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues a request's body; `done` is called on the writer thread, in sequence order, with
    /// the request's sequence number once it is durable, or with the error that kept it from
    /// being written (then it is not in the WAL).
    pub fn append(&self, table: &str, compression: Compression, body: Bytes, done: Done) {
        let append = Append {
            table: table.to_owned(),
            compression,
            body,
            done,
        };
        let Some(sender) = &self.sender else {
            return;
        };
        if let Err(mpsc::SendError(append)) = sender.send(append) {
            (append.done)(Err(EngineError::Invalid(
                "the write-ahead log's writer has stopped".into(),
            )));
        }
    }

    /// Records that every frame of `table` up to `seq` is in its parts (for
    /// [`TRANSACTIONS_FRAME`]: every transaction frame up to `seq` is in all its tables), and
    /// deletes the segments that no longer hold anything unapplied; returns the deleted files.
    pub fn applied(&self, table: &str, seq: u64) -> Result<Vec<PathBuf>, EngineError> {
        let mut segments = self.segments.lock().unwrap_or_else(PoisonError::into_inner);
        let mark = segments.applied.entry(table.to_owned()).or_insert(0);
        *mark = (*mark).max(seq);
        if table == TRANSACTIONS_FRAME {
            segments.transactions.retain(|pending| *pending > seq);
        }
        segments.delete_applied()
    }

    /// The highest sequence number whose request has been told it is durable: every request
    /// at or below it is the caller's (queued or written into parts), none above it yet.
    pub fn told(&self) -> u64 {
        self.segments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .told
    }

    /// Records that every frame at or below `floor` is in parts (durably, in `.wal/floor`),
    /// and deletes the segments that hold nothing else. A lower floor than the current one is
    /// ignored.
    pub fn raise_floor(&self, floor: u64) -> Result<Vec<PathBuf>, EngineError> {
        let mut segments = self.segments.lock().unwrap_or_else(PoisonError::into_inner);
        // A transaction frame is applied by the checkpoint that writes its tables, not by
        // whoever raises the floor.
        let floor = match segments.transactions.first() {
            Some(pending) => floor.min(pending - 1),
            None => floor,
        };
        if floor <= segments.floor {
            return Ok(Vec::new());
        }
        let path = self.dir.join(FLOOR_FILE);
        let temporary = self.dir.join(format!("{FLOOR_FILE}.tmp"));
        File::create(&temporary)
            .and_then(|mut f| {
                f.write_all(format!("{floor}\n").as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| fs::rename(&temporary, &path))
            .map_err(|e| EngineError::io(&path, e))?;
        if let Some(replica) = &segments.replica {
            replica.write_floor(floor)?;
        }
        segments.floor = floor;
        segments.delete_applied()
    }

    /// Bytes in the WAL's segment files.
    pub fn bytes(&self) -> u64 {
        self.segments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn wal_damage(path: &Path, offset: u64, reason: &str) -> EngineError {
    EngineError::Invalid(format!(
        "write-ahead log {} is damaged at byte {offset}: {reason}; it is not the torn end of \
         the last segment, so it is not cut off (move the file away to start without it, \
         losing what it holds)",
        path.display()
    ))
}

/// The floor as last written; 0 when there is none.
fn read_floor(dir: &Path) -> Result<u64, EngineError> {
    let path = dir.join(FLOOR_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            EngineError::Invalid(format!(
                "{} holds {:?}, not a sequence number",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(EngineError::io(&path, e)),
    }
}

fn new_segment(dir: &Path, first_seq: u64) -> Result<(File, Segment), EngineError> {
    let path = dir.join(format!("{first_seq:020}.wal"));
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|e| EngineError::io(&path, e))?;
    file.write_all(MAGIC)
        .and_then(|()| file.sync_all())
        .map_err(|e| EngineError::io(&path, e))?;
    strata_format::manifest::sync_dir(dir)?;
    Ok((
        file,
        Segment {
            path,
            bytes: MAGIC.len() as u64,
            tables: HashMap::new(),
        },
    ))
}

struct Writer {
    dir: PathBuf,
    file: File,
    next_seq: u64,
    segment_bytes: u64,
    segments: Arc<Mutex<Segments>>,
    /// Set when a write could not be undone: nothing more is appended.
    broken: Option<String>,
    replica: Option<Arc<dyn WalReplica>>,
}

impl Writer {
    fn run(mut self, receiver: mpsc::Receiver<Append>) {
        let mut buffer = Vec::with_capacity(GROUP_BYTES + 4096);
        while let Ok(first) = receiver.recv() {
            let mut group = vec![first];
            let mut bytes = group[0].body.len();
            while bytes < GROUP_BYTES {
                match receiver.try_recv() {
                    Ok(next) => {
                        bytes += next.body.len();
                        group.push(next);
                    }
                    Err(_) => break,
                }
            }
            match self.write_group(&group, &mut buffer) {
                Ok(first_seq) => {
                    let last = first_seq + group.len() as u64 - 1;
                    for (i, append) in group.into_iter().enumerate() {
                        (append.done)(Ok(first_seq + i as u64));
                    }
                    // Only now: a floor computed from `told` must see these requests queued.
                    self.segments
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .told = last;
                }
                Err(e) => {
                    let message = e.to_string();
                    for append in group {
                        (append.done)(Err(EngineError::Invalid(format!(
                            "the write-ahead log could not make the request durable: {message}"
                        ))));
                    }
                }
            }
        }
    }

    /// Writes and fsyncs the group's frames; the first one's sequence number.
    fn write_group(&mut self, group: &[Append], buffer: &mut Vec<u8>) -> Result<u64, EngineError> {
        if let Some(why) = &self.broken {
            return Err(EngineError::Invalid(why.clone()));
        }
        let first_seq = self.next_seq;
        self.next_seq += group.len() as u64;
        buffer.clear();
        let mut tables: Vec<(&str, u64)> = Vec::with_capacity(group.len());
        for (i, append) in group.iter().enumerate() {
            let seq = first_seq + i as u64;
            frame::encode(seq, &append.table, append.compression, &append.body, buffer);
            tables.push((&append.table, seq));
        }
        // The lock is not held across the write and its fsync: `Wal::bytes` and `Wal::applied`
        // must not wait for the disk.
        let (current, last) = {
            let segments = self.segments.lock().unwrap_or_else(PoisonError::into_inner);
            let last = segments.list.iter().next_back();
            (
                last.map_or(0, |(_, s)| s.bytes),
                last.map(|(first, s)| (*first, s.path.clone())),
            )
        };
        let (start, segment_first, path) =
            if current > MAGIC.len() as u64 && current + buffer.len() as u64 > self.segment_bytes {
                let (file, segment) = new_segment(&self.dir, first_seq)?;
                self.file = file;
                let path = segment.path.clone();
                let mut segments = self.segments.lock().unwrap_or_else(PoisonError::into_inner);
                segments.list.insert(first_seq, segment);
                (MAGIC.len() as u64, first_seq, path)
            } else {
                let Some((segment_first, path)) = last else {
                    return Err(EngineError::Invalid(
                        "the write-ahead log has no segment".into(),
                    ));
                };
                (current, segment_first, path)
            };
        let written = self
            .file
            .write_all(buffer)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| EngineError::io(&path, e))
            .and_then(|()| match &self.replica {
                Some(replica) => replica.write_group(segment_first, first_seq, buffer),
                None => Ok(()),
            });
        if let Err(e) = written {
            // Take the partial frames back, or a later frame would follow garbage.
            if let Err(undo) = self.file.set_len(start).and_then(|()| {
                use std::io::Seek;
                self.file.seek(std::io::SeekFrom::Start(start)).map(|_| ())
            }) {
                self.broken = Some(format!(
                    "an earlier write to {} failed ({e}) and could not be undone ({undo})",
                    path.display()
                ));
            }
            return Err(e);
        }
        let mut segments = self.segments.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(segment) = segments.list.values_mut().next_back() {
            segment.bytes += buffer.len() as u64;
            for (table, seq) in &tables {
                segment.tables.insert((*table).to_owned(), *seq);
            }
        }
        segments.transactions.extend(
            tables
                .iter()
                .filter(|(table, _)| *table == TRANSACTIONS_FRAME)
                .map(|(_, seq)| *seq),
        );
        Ok(first_seq)
    }
}

#[cfg(test)]
mod tests;
