//! Checks of the ingest of a stream (a server's request body), shared by the stable property
//! test (`tests/engine/stream_input.rs`) and the `ingest_request` fuzz target: any bytes, plain or
//! claimed to be gzip/zstd, are either committed with every line accounted for, or rejected
//! whole; never a panic, never a document lost or invented.

use std::io::Cursor;
use std::path::Path;

use crate::input::{Compression, Input, StreamInput};
use crate::{DataDir, EngineError, IngestOptions, export_table, ingest};

/// Ingests `body` as a request body compressed as `compression` into table `t` of `dir` (an
/// empty directory), then exports it. Returns what is wrong, if anything.
pub fn check_stream_ingest(
    dir: &Path,
    body: &[u8],
    compression: Compression,
) -> Result<(), String> {
    let data_dir = DataDir::new(dir);
    let input = Input::Stream(StreamInput::new(
        "body",
        compression,
        Box::new(Cursor::new(body.to_vec())),
    ));
    let mut rejects = 0u64;
    let result = ingest(
        &data_dir,
        "t",
        &[input],
        &IngestOptions::default(),
        &mut |_| {},
        &mut |_| rejects += 1,
    );
    match result {
        Ok(summary) => {
            let progress = &summary.progress;
            if progress.read != progress.loaded + progress.rejected || progress.rejected != rejects
            {
                return Err(format!(
                    "lines not accounted for: {progress:?}, {rejects} rejects reported"
                ));
            }
            let mut exported = Vec::new();
            let documents =
                export_table(&data_dir, "t", &mut exported).map_err(|e| e.to_string())?;
            let lines = exported
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as u64;
            if documents != progress.loaded || lines != progress.loaded {
                return Err(format!(
                    "{} documents loaded, {documents} exported in {lines} lines",
                    progress.loaded
                ));
            }
            Ok(())
        }
        Err(EngineError::AllRejected { .. }) => {
            if data_dir.table_exists("t").map_err(|e| e.to_string())? {
                return Err("an ingest that rejected every line left a table".into());
            }
            Ok(())
        }
        Err(e) => Err(format!("an in-memory body failed the ingest: {e}")),
    }
}
