//! Any bytes as the last segment of a server's write-ahead log, after its magic. Recovery must
//! not panic; it either recovers frames (cutting a damaged tail off, which is then gone from
//! the file) or refuses with an error naming the file. A second recovery must find exactly what
//! the first kept (what was cut stays cut, nothing new appears).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_engine::wal::{MAGIC, WAL_DIR, Wal};

fuzz_target!(|bytes: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let wal_dir = dir.path().join(WAL_DIR);
    if std::fs::create_dir_all(&wal_dir).is_err() {
        return;
    }
    let mut segment = MAGIC.to_vec();
    segment.extend_from_slice(bytes);
    let path = wal_dir.join(format!("{:020}.wal", 1));
    if std::fs::write(&path, &segment).is_err() {
        return;
    }
    let first = match Wal::open(dir.path(), 1 << 20, &mut |_| Ok(0)) {
        Ok((wal, recovery)) => {
            drop(wal);
            recovery
        }
        Err(e) => {
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
            return;
        }
    };
    let (_wal, second) = match Wal::open(dir.path(), 1 << 20, &mut |_| Ok(0)) {
        Ok(opened) => opened,
        Err(e) => panic!("recovered once, refused the second time: {e}"),
    };
    assert_eq!(first.frames, second.frames);
    assert!(second.truncated.is_none(), "{:?}", second.truncated);
});
