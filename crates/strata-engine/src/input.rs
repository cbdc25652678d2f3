//! Input sources for ingest: files (plain, `.gz`, `.zst`), standard input, or a stream handed
//! over by a caller (a server's request body, with its compression named), read as lines.
//!
//! Errors of the source itself (the file or standard input) are marked as such: they abort the
//! ingest. Any other read error comes from the decompressor (damaged or truncated `.gz`/`.zst`):
//! the ingest keeps what was decoded and rejects the rest of that input (see [`is_source_error`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::EngineError;

/// Where documents come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    File(PathBuf),
    /// Bytes from a caller (an HTTP request body), decompressed as its [`Compression`] says.
    Stream(StreamInput),
}

/// How a [`Input::Stream`]'s bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// A one-shot reader with a name for reject reports. Opening it takes the reader: an ingest
/// reads it once. Clones share the reader; two inputs are equal when they share it.
#[derive(Clone)]
pub struct StreamInput {
    name: String,
    compression: Compression,
    reader: Arc<Mutex<Option<Box<dyn Read + Send>>>>,
}

impl StreamInput {
    pub fn new(
        name: impl Into<String>,
        compression: Compression,
        reader: Box<dyn Read + Send>,
    ) -> Self {
        StreamInput {
            name: name.into(),
            compression,
            reader: Arc::new(Mutex::new(Some(reader))),
        }
    }

    fn take(&self) -> Option<Box<dyn Read + Send>> {
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl std::fmt::Debug for StreamInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamInput")
            .field("name", &self.name)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl PartialEq for StreamInput {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.reader, &other.reader)
    }
}

impl Eq for StreamInput {}

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
            Input::Stream(stream) => stream.name.clone(),
        }
    }

    /// Compressed size on disk, when known (for progress).
    pub fn size_on_disk(&self) -> Option<u64> {
        match self {
            Input::Stdin | Input::Stream(_) => None,
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

    /// Opens the input, decompressing by file extension (or a stream's named compression).
    pub fn open(&self) -> Result<Box<dyn BufRead + Send>, EngineError> {
        const BUFFER: usize = 1 << 20;
        let (source, compression): (Box<dyn Read + Send>, Compression) = match self {
            Input::Stdin => (Box::new(SourceReader(io::stdin())), Compression::None),
            Input::File(path) => {
                let file = File::open(path).map_err(|source| EngineError::Input {
                    path: path.clone(),
                    source,
                })?;
                let compression = match extension(path).as_deref() {
                    Some("gz") => Compression::Gzip,
                    Some("zst") | Some("zstd") => Compression::Zstd,
                    _ => Compression::None,
                };
                (Box::new(SourceReader(file)), compression)
            }
            Input::Stream(stream) => {
                let reader = stream.take().ok_or_else(|| EngineError::Input {
                    path: stream.name.clone().into(),
                    source: io::Error::other("this stream was already read by an ingest"),
                })?;
                (Box::new(SourceReader(reader)), stream.compression)
            }
        };
        let reader: Box<dyn Read + Send> = match compression {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(source)),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::new(source)
                    .map_err(|e| EngineError::io(self.display_name(), e))?,
            ),
            Compression::None => source,
        };
        Ok(Box::new(BufReader::with_capacity(BUFFER, reader)))
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
