use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::*;

fn open(dir: &Path, segment_bytes: u64, marks: &[(&str, u64)]) -> (Wal, Recovery) {
    let marks: HashMap<String, u64> = marks.iter().map(|(t, m)| (t.to_string(), *m)).collect();
    Wal::open(dir, segment_bytes, &mut |table| {
        Ok(marks.get(table).copied().unwrap_or(0))
    })
    .unwrap()
}

/// Appends and waits for durability; the sequence number.
fn append(wal: &Wal, table: &str, body: &str) -> u64 {
    let (tx, rx) = mpsc::channel();
    wal.append(
        table,
        Compression::None,
        Bytes::from(body.to_owned()),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    rx.recv().unwrap().unwrap()
}

fn bodies(recovery: &Recovery) -> Vec<(u64, String, String)> {
    recovery
        .frames
        .iter()
        .map(|f| {
            (
                f.seq,
                f.table.clone(),
                String::from_utf8(f.body.to_vec()).unwrap(),
            )
        })
        .collect()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir.join(WAL_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// A WAL with two acknowledged frames of table `t` ("one", "two"), then `tail` appended to its
/// last segment: the directory, that segment, and its length before the tail.
fn two_frames_then(tail: &[u8]) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    append(&wal, "t", "one\n");
    append(&wal, "t", "two\n");
    drop(wal);
    let last = segment_files(dir.path()).pop().unwrap();
    let good = fs::metadata(&last).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(tail)
        .unwrap();
    (dir, last, good)
}

#[test]
fn acknowledged_frames_come_back_above_their_tables_mark() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, recovery) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    assert!(recovery.frames.is_empty());
    assert_eq!(append(&wal, "a", "{\"x\":1}\n"), 1);
    assert_eq!(append(&wal, "b", "{\"x\":2}\n"), 2);
    assert_eq!(append(&wal, "a", "{\"x\":3}\n"), 3);
    drop(wal);

    let (wal, recovery) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[("a", 1)]);
    assert_eq!(
        bodies(&recovery),
        vec![
            (2, "b".into(), "{\"x\":2}\n".into()),
            (3, "a".into(), "{\"x\":3}\n".into())
        ]
    );
    assert_eq!(recovery.skipped, 1);
    assert!(recovery.truncated.is_none());
    // Numbers go on after the highest one found.
    assert_eq!(append(&wal, "a", "{}\n"), 4);
}

#[test]
fn a_torn_tail_is_cut_off_and_reported() {
    // Half of a third frame, as a kill during its write leaves it.
    let mut torn = Vec::new();
    frame::encode(3, "t", Compression::None, b"three\n", &mut torn);
    let (dir, last, good) = two_frames_then(&torn[..torn.len() / 2]);

    let (_wal, recovery) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    assert_eq!(recovery.frames.len(), 2);
    let (path, offset, _) = recovery.truncated.unwrap();
    assert_eq!((path, offset), (last.clone(), good));
    assert_eq!(fs::metadata(&last).unwrap().len(), good);
}

#[test]
fn damage_before_the_last_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // Tiny segments: every group starts a new one.
    let (wal, _) = open(dir.path(), 16, &[]);
    append(&wal, "a", "one\n");
    append(&wal, "a", "two\n");
    append(&wal, "a", "three\n");
    drop(wal);
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    let mut bytes = fs::read(&files[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    fs::write(&files[0], bytes).unwrap();

    let error = Wal::open(dir.path(), 16, &mut |_| Ok(0)).err().unwrap();
    let message = error.to_string();
    assert!(message.contains("is damaged at byte 8"), "{message}");
    assert!(message.contains("CRC-32"), "{message}");
}

#[test]
fn applied_segments_are_deleted_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), 16, &[]);
    let a1 = append(&wal, "a", "a1\n");
    let b1 = append(&wal, "b", "b1\n");
    let a2 = append(&wal, "a", "a2\n");
    let before = segment_files(dir.path()).len();
    // Applying `a` up to a1 frees only the segment holding a1 alone.
    assert_eq!(wal.applied("a", a1).unwrap().len(), 1);
    assert_eq!(segment_files(dir.path()).len(), before - 1);
    wal.applied("b", b1).unwrap();
    wal.applied("a", a2).unwrap();
    // The segment being written stays, whatever it holds.
    assert_eq!(segment_files(dir.path()).len(), 1);
    drop(wal);
    let (_wal, recovery) = open(dir.path(), 16, &[("a", a2), ("b", b1)]);
    assert!(recovery.frames.is_empty());
}

#[test]
fn concurrent_appends_get_distinct_numbers_told_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    let wal = Arc::new(wal);
    let told = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let wal = wal.clone();
            let told = told.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let (tx, rx) = mpsc::channel();
                    let told = told.clone();
                    wal.append(
                        "t",
                        Compression::None,
                        Bytes::from(format!("{t} {i}\n")),
                        Box::new(move |r| {
                            let seq = r.unwrap();
                            told.lock().unwrap().push(seq);
                            tx.send(seq).unwrap();
                        }),
                    );
                    rx.recv().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let told = told.lock().unwrap().clone();
    assert_eq!(told, (1..=200).collect::<Vec<u64>>());
    drop(Arc::try_unwrap(wal).ok().unwrap());
    let (_wal, recovery) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    assert_eq!(recovery.frames.len(), 200);
}

#[test]
fn frames_at_or_below_the_floor_are_skipped_whatever_the_marks_say() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    append(&wal, "dropped", "a\n");
    append(&wal, "dropped", "b\n");
    append(&wal, "kept", "c\n");
    // `told` moves once the writer has told the whole group, just after each caller heard.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while wal.told() < 3 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(wal.told(), 3);
    wal.raise_floor(2).unwrap();
    // A lower floor changes nothing.
    wal.raise_floor(1).unwrap();
    drop(wal);
    // `dropped` no longer exists (mark 0): its frames are below the floor all the same.
    let (wal, recovery) = open(dir.path(), DEFAULT_SEGMENT_BYTES, &[]);
    assert_eq!(bodies(&recovery), vec![(3, "kept".into(), "c\n".into())]);
    assert_eq!(recovery.skipped, 2);
    // With everything below the floor, the old segment goes.
    let before = segment_files(dir.path()).len();
    wal.raise_floor(3).unwrap();
    assert_eq!(segment_files(dir.path()).len(), before - 1);
}

proptest::proptest! {
    /// Whatever bytes follow the acknowledged frames of the last segment (a torn write, or
    /// garbage), recovery keeps exactly the acknowledged frames and cuts the rest off, or keeps
    /// more frames only if the bytes are whole frames; it never panics.
    #[test]
    fn any_tail_after_acknowledged_frames_is_cut_or_read_whole(
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
    ) {
        let (dir, last, good) = two_frames_then(&tail);
        match Wal::open(dir.path(), DEFAULT_SEGMENT_BYTES, &mut |_| Ok(0)) {
            Ok((_wal, recovery)) => {
                proptest::prop_assert!(recovery.frames.len() >= 2);
                proptest::prop_assert_eq!(&bodies(&recovery)[..2], &[
                    (1, "t".to_string(), "one\n".to_string()),
                    (2, "t".to_string(), "two\n".to_string()),
                ]);
                let kept = fs::metadata(&last).unwrap().len();
                proptest::prop_assert!(kept >= good);
                proptest::prop_assert_eq!(recovery.truncated.is_some(), kept < good + tail.len() as u64);
            }
            // Only a whole frame with a good checksum and an old sequence number is refused.
            Err(e) => proptest::prop_assert!(e.to_string().contains("sequence numbers must increase"), "{}", e),
        }
    }
}

/// A replica in memory: groups by segment, the floor, and whether it fails.
#[derive(Default)]
struct MemoryReplica {
    segments: Mutex<BTreeMap<u64, Vec<u8>>>,
    floor: Mutex<u64>,
    failing: std::sync::atomic::AtomicBool,
}

impl WalReplica for MemoryReplica {
    fn write_group(&self, segment: u64, _first_seq: u64, frames: &[u8]) -> Result<(), EngineError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EngineError::Invalid("the replica is down".into()));
        }
        let mut segments = self.segments.lock().unwrap();
        segments
            .entry(segment)
            .or_insert_with(|| MAGIC.to_vec())
            .extend_from_slice(frames);
        Ok(())
    }

    fn write_floor(&self, floor: u64) -> Result<(), EngineError> {
        *self.floor.lock().unwrap() = floor;
        Ok(())
    }

    fn delete_segment(&self, segment: u64) -> Result<(), EngineError> {
        self.segments.lock().unwrap().remove(&segment);
        Ok(())
    }
}

#[test]
fn a_replicated_log_is_acknowledged_only_once_the_replica_has_it_and_restores_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let replica = Arc::new(MemoryReplica::default());
    let open_replicated = |dir: &Path, replica: &Arc<MemoryReplica>| {
        Wal::open_replicated(
            dir,
            64,
            &mut |_| Ok(0),
            Some(replica.clone() as Arc<dyn WalReplica>),
        )
        .unwrap()
    };
    let (wal, _) = open_replicated(dir.path(), &replica);
    assert_eq!(append(&wal, "t", "one\n"), 1);
    // The replica refuses: the caller is told, and the frame is taken back locally too.
    replica
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (tx, rx) = mpsc::channel();
    wal.append(
        "t",
        Compression::None,
        Bytes::from_static(b"lost\n"),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    let err = rx.recv().unwrap().unwrap_err();
    assert!(err.to_string().contains("the replica is down"), "{err}");
    replica
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // 64-byte segments: each frame starts a segment of its own.
    assert_eq!(append(&wal, "u", "three\n"), 3);
    drop(wal);

    // Another machine: the local directory is gone; the replica's segments are written back.
    let elsewhere = tempfile::tempdir().unwrap();
    let wal_dir = elsewhere.path().join(WAL_DIR);
    fs::create_dir_all(&wal_dir).unwrap();
    for (first, bytes) in replica.segments.lock().unwrap().iter() {
        fs::write(wal_dir.join(format!("{first:020}.wal")), bytes).unwrap();
    }
    let (wal, recovery) = open_replicated(elsewhere.path(), &replica);
    assert_eq!(
        bodies(&recovery),
        vec![
            (1, "t".to_owned(), "one\n".to_owned()),
            (3, "u".to_owned(), "three\n".to_owned())
        ]
    );
    // Applied: the segments that hold nothing else go here and on the replica.
    let first_segments: Vec<u64> = replica.segments.lock().unwrap().keys().copied().collect();
    wal.applied("t", 1).unwrap();
    wal.applied("u", 3).unwrap();
    let left: Vec<u64> = replica.segments.lock().unwrap().keys().copied().collect();
    assert!(
        first_segments.iter().all(|s| !left.contains(s)),
        "{first_segments:?} {left:?}"
    );
    wal.raise_floor(3).unwrap();
    assert_eq!(*replica.floor.lock().unwrap(), 3);
}
