//! Input sources for ingest: files (plain, `.gz`, `.zst`) or standard input, read as lines.
//!
//! Errors of the source itself (the file or standard input) are marked as such: they abort the
//! ingest. Any other read error comes from the decompressor (damaged or truncated `.gz`/`.zst`):
//! the ingest keeps what was decoded and rejects the rest of that input (see [`is_source_error`]).

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

    /// Checks that a file input can be opened and is not a directory (before any work starts).
    pub fn check(&self) -> Result<(), EngineError> {
        let Input::File(path) = self else {
            return Ok(());
        };
        let input_error = |source| EngineError::Input {
            path: path.clone(),
            source,
        };
        let file = File::open(path).map_err(input_error)?;
        let metadata = file.metadata().map_err(input_error)?;
        if metadata.is_dir() {
            return Err(input_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a directory",
            )));
        }
        Ok(())
    }

    /// Opens the input, decompressing by file extension.
    pub fn open(&self) -> Result<Box<dyn BufRead + Send>, EngineError> {
        const BUFFER: usize = 1 << 20;
        match self {
            Input::Stdin => Ok(Box::new(BufReader::with_capacity(
                BUFFER,
                SourceReader(io::stdin()),
            ))),
            Input::File(path) => {
                let file = File::open(path).map_err(|source| EngineError::Input {
                    path: path.clone(),
                    source,
                })?;
                let file = SourceReader(file);
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

/// Reads the source and marks its errors (see [`is_source_error`]).
struct SourceReader<R>(R);

#[derive(Debug)]
struct SourceError(io::Error);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl<R: Read> Read for SourceReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::Interrupted {
                e
            } else {
                io::Error::new(e.kind(), SourceError(e))
            }
        })
    }
}

/// True when a read error came from the file or standard input itself rather than from
/// decompressing it.
pub fn is_source_error(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<SourceError>())
}
