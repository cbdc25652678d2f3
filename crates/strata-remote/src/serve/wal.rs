//! The server's write-ahead log on the store: one object per group commit, the floor, and the
//! restore of a working directory's `.wal/` from them.

use bytes::Bytes;
use object_store::PutMode;
use object_store::path::Path as StorePath;
use strata_engine::EngineError;
use strata_engine::wal::{MAGIC, WAL_DIR, WalReplica};

use super::{ServeMirror, get, put};
use crate::error::RemoteError;
use crate::location::{delete_if_exists, list_all};

const FLOOR_FILE: &str = "floor";

/// The write-ahead log on the store.
impl WalReplica for ServeMirror {
    fn write_group(&self, segment: u64, first_seq: u64, frames: &[u8]) -> Result<(), EngineError> {
        let location = group_location(segment, first_seq);
        let result = self.check_lease().and_then(|()| {
            self.block_on(put(
                self.remote.store().as_ref(),
                &location,
                Bytes::copy_from_slice(frames),
                PutMode::Create,
            ))
        });
        result.map_err(|e| wal_error(&location, e))
    }

    fn write_floor(&self, floor: u64) -> Result<(), EngineError> {
        let location = StorePath::from_iter([WAL_DIR, FLOOR_FILE]);
        let result = self.check_lease().and_then(|()| {
            self.block_on(put(
                self.remote.store().as_ref(),
                &location,
                Bytes::from(format!("{floor}\n")),
                PutMode::Overwrite,
            ))
        });
        result.map_err(|e| wal_error(&location, e))
    }

    fn delete_segment(&self, segment: u64) -> Result<(), EngineError> {
        let prefix = StorePath::from_iter([WAL_DIR, &format!("{segment:020}")]);
        let result = self.check_lease().and_then(|()| {
            self.block_on(async {
                let store = self.remote.store().as_ref();
                for object in list_all(store, &prefix).await? {
                    delete_if_exists(store, &object.location).await?;
                }
                Ok(())
            })
        });
        result.map_err(|e| wal_error(&prefix, e))
    }
}

impl ServeMirror {
    /// Writes the log's segments and floor as stored into the working directory's `.wal/`.
    pub(super) async fn restore_wal(&self) -> Result<(), RemoteError> {
        let store = self.remote.store().as_ref();
        let dir = self.root.join(WAL_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| RemoteError::io(&dir, e))?;
        let mut objects = list_all(store, &StorePath::from(WAL_DIR)).await?;
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let mut segments: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        for object in objects {
            let parts: Vec<String> = object
                .location
                .parts()
                .map(|p| p.as_ref().to_owned())
                .collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            match parts[..] {
                [_, FLOOR_FILE] => {
                    let bytes = get(store, &object.location).await?;
                    let path = dir.join(FLOOR_FILE);
                    std::fs::write(&path, &bytes).map_err(|e| RemoteError::io(&path, e))?;
                }
                [_, segment, group] if group.ends_with(".frames") => {
                    let Ok(segment) = segment.parse::<u64>() else {
                        continue;
                    };
                    let bytes = get(store, &object.location).await?;
                    segments
                        .entry(segment)
                        .or_insert_with(|| MAGIC.to_vec())
                        .extend_from_slice(&bytes);
                }
                _ => {}
            }
        }
        for (first, bytes) in segments {
            let path = dir.join(format!("{first:020}.wal"));
            std::fs::write(&path, &bytes).map_err(|e| RemoteError::io(&path, e))?;
        }
        Ok(())
    }
}

fn group_location(segment: u64, first_seq: u64) -> StorePath {
    StorePath::from_iter([
        WAL_DIR,
        &format!("{segment:020}"),
        &format!("{first_seq:020}.frames"),
    ])
}

fn wal_error(location: &StorePath, e: RemoteError) -> EngineError {
    EngineError::Invalid(format!(
        "the write-ahead log on object storage ({location}): {e}"
    ))
}
