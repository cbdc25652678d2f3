//! One WAL frame: an acknowledged request's body, with the sequence number it was given and the
//! table it goes to, checksummed so that a torn or damaged frame is recognised (docs/format.md,
//! "Write-ahead log").
//!
//! Layout, little-endian: `u32 length | u32 crc32 | u64 seq | u8 compression | u16 table length |
//! table (UTF-8) | body`, where `length` counts the bytes after the CRC and the CRC-32 (IEEE)
//! covers exactly them.

use bytes::Bytes;

use crate::input::Compression;

/// Bytes before a frame's checksummed content: its length and its CRC.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Fixed bytes of the checksummed content before the table name.
const FIXED_BYTES: usize = 8 + 1 + 2;
/// No frame is larger (a request body above this never goes through the WAL); a length field
/// above it is damage, not a frame.
pub const MAX_FRAME_BYTES: usize = 1 << 30;

/// A request as the WAL holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Given by the WAL writer, increasing in file order, never reused.
    pub seq: u64,
    pub table: String,
    /// How `body` is compressed (as the client sent it).
    pub compression: Compression,
    pub body: Bytes,
}

/// Why bytes at some offset are not a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The file ends inside the frame.
    Short,
    /// The checksum does not match.
    Checksum,
    /// The checksum matches but the content is not a frame (a bug or a foreign writer).
    Malformed(String),
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Short => f.write_str("the file ends inside the frame"),
            Damage::Checksum => f.write_str("its CRC-32 does not match its bytes"),
            Damage::Malformed(why) => write!(f, "it is not a frame: {why}"),
        }
    }
}

fn compression_code(compression: Compression) -> u8 {
    match compression {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Zstd => 2,
    }
}

fn compression_of(code: u8) -> Option<Compression> {
    match code {
        0 => Some(Compression::None),
        1 => Some(Compression::Gzip),
        2 => Some(Compression::Zstd),
        _ => None,
    }
}

/// Appends the frame's bytes to `out`. The table name is at most 128 bytes (table names are
/// validated before a request reaches the WAL) and the body at most [`MAX_FRAME_BYTES`].
pub fn encode(seq: u64, table: &str, compression: Compression, body: &[u8], out: &mut Vec<u8>) {
    let content = FIXED_BYTES + table.len() + body.len();
    let start = out.len();
    out.extend_from_slice(&(content as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.push(compression_code(compression));
    out.extend_from_slice(&(table.len() as u16).to_le_bytes());
    out.extend_from_slice(table.as_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[start + FRAME_HEADER_BYTES..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the frame at the start of `bytes`: the frame and its total length.
pub fn decode(bytes: &[u8]) -> Result<(Frame, usize), Damage> {
    if bytes.len() < FRAME_HEADER_BYTES {
        return Err(Damage::Short);
    }
    let content = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if !(FIXED_BYTES..=MAX_FRAME_BYTES + FIXED_BYTES + 128).contains(&content) {
        // A length no writer produces: the header itself is damaged.
        return Err(Damage::Checksum);
    }
    let total = FRAME_HEADER_BYTES + content;
    let Some(content_bytes) = bytes.get(FRAME_HEADER_BYTES..total) else {
        return Err(Damage::Short);
    };
    if crc32fast::hash(content_bytes) != crc {
        return Err(Damage::Checksum);
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&content_bytes[..8]);
    let seq = u64::from_le_bytes(seq);
    let compression = compression_of(content_bytes[8]).ok_or_else(|| {
        Damage::Malformed(format!("unknown compression code {}", content_bytes[8]))
    })?;
    let table_len = u16::from_le_bytes([content_bytes[9], content_bytes[10]]) as usize;
    let Some(table) = content_bytes.get(FIXED_BYTES..FIXED_BYTES + table_len) else {
        return Err(Damage::Malformed(format!(
            "a table name of {table_len} bytes does not fit in {content} bytes"
        )));
    };
    let table = std::str::from_utf8(table)
        .map_err(|_| Damage::Malformed("the table name is not UTF-8".into()))?
        .to_owned();
    let body = Bytes::copy_from_slice(&content_bytes[FIXED_BYTES + table_len..]);
    Ok((
        Frame {
            seq,
            table,
            compression,
            body,
        },
        total,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn compression() -> impl Strategy<Value = Compression> {
        prop_oneof![
            Just(Compression::None),
            Just(Compression::Gzip),
            Just(Compression::Zstd)
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip(
            seq in any::<u64>(),
            table in "[a-z_][a-z0-9_-]{0,20}",
            compression in compression(),
            body in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut out = Vec::new();
            encode(seq, &table, compression, &body, &mut out);
            let (frame, used) = decode(&out).map_err(|d| TestCaseError::fail(d.to_string()))?;
            prop_assert_eq!(used, out.len());
            prop_assert_eq!(frame, Frame { seq, table, compression, body: Bytes::from(body) });
        }

        /// Any single flipped bit and any cut is detected, never decoded as another frame.
        #[test]
        fn damage_is_detected(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            flip in any::<proptest::sample::Index>(),
            bit in 0u8..8,
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut out = Vec::new();
            encode(7, "events", Compression::None, &body, &mut out);
            let mut flipped = out.clone();
            let i = flip.index(flipped.len());
            flipped[i] ^= 1 << bit;
            prop_assert!(decode(&flipped).is_err());
            let cut = cut.index(out.len());
            prop_assert_eq!(decode(&out[..cut]), Err(Damage::Short));
        }
    }
}
