//! Input sources for ingest: files (plain, `.gz`, `.zst`) or standard input, read as lines.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::EngineError;

/// Where documents come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    File(PathBuf),
}

impl Input {
    /// `-` means standard input; anything else is a file path.
    pub fn parse(arg: &str) -> Self {
        if arg == "-" {
            Input::Stdin
        } else {
            Input::File(PathBuf::from(arg))
        }
    }

    /// The name used in reject reports.
    pub fn display_name(&self) -> String {
        match self {
            Input::Stdin => "<stdin>".into(),
            Input::File(p) => p.display().to_string(),
        }
    }

    /// Compressed size on disk, when known (for progress).
    pub fn size_on_disk(&self) -> Option<u64> {
        match self {
            Input::Stdin => None,
            Input::File(p) => std::fs::metadata(p).ok().map(|m| m.len()),
        }
    }

    /// Opens the input, decompressing by file extension.
    pub fn open(&self) -> Result<Box<dyn BufRead + Send>, EngineError> {
        const BUFFER: usize = 1 << 20;
        match self {
            Input::Stdin => Ok(Box::new(BufReader::with_capacity(BUFFER, io::stdin()))),
            Input::File(path) => {
                let file = File::open(path).map_err(|e| EngineError::io(path, e))?;
                let reader: Box<dyn Read + Send> = match extension(path).as_deref() {
                    Some("gz") => Box::new(flate2::read::MultiGzDecoder::new(file)),
                    Some("zst") | Some("zstd") => Box::new(
                        zstd::stream::read::Decoder::new(file)
                            .map_err(|e| EngineError::io(path, e))?,
                    ),
                    _ => Box::new(file),
                };
                Ok(Box::new(BufReader::with_capacity(BUFFER, reader)))
            }
        }
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
}
