//! Writing JSON text straight into a byte buffer: escaped strings, integers, timestamps and the
//! identifier alphabets (base32, hex) the datasets use.
//!
//! Invariant: every function appends complete, valid JSON tokens (a string literal with its quotes,
//! a number); callers only add the structural bytes (`{`, `"key":`, `,`). Strings are escaped
//! exactly as the real producers do: Bluesky's Jetstream is written by Go's `encoding/json`, which
//! also escapes `<`, `>`, `&`, U+2028 and U+2029 ([`Escape::Go`]); GH Archive escapes only what JSON
//! requires ([`Escape::Minimal`]).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    Minimal,
    Go,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal.
pub fn push_str(out: &mut Vec<u8>, s: &str, escape: Escape) {
    out.push(b'"');
    push_str_body(out, s, escape);
    out.push(b'"');
}

/// Appends the escaped contents of `s` without quotes (for strings assembled from pieces).
pub fn push_str_body(out: &mut Vec<u8>, s: &str, escape: Escape) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let replacement: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            b'<' if escape == Escape::Go => Some(b"\\u003c"),
            b'>' if escape == Escape::Go => Some(b"\\u003e"),
            b'&' if escape == Escape::Go => Some(b"\\u0026"),
            // U+2028 / U+2029 are E2 80 A8 / E2 80 A9.
            0xE2 if escape == Escape::Go
                && bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(if bytes[i + 2] == 0xA8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        match replacement {
            Some(r) => out.extend_from_slice(r),
            None => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
}

pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `v` zero-padded to `width` digits (`v < 10^width`).
fn push_padded(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut x = v;
    for slot in buf[..width].iter_mut().rev() {
        *slot = b'0' + (x % 10) as u8;
        x /= 10;
    }
    out.extend_from_slice(&buf[..width]);
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

fn push_date_time(out: &mut Vec<u8>, secs: u64) {
    let (y, m, d) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    push_padded(out, y, 4);
    out.push(b'-');
    push_padded(out, m, 2);
    out.push(b'-');
    push_padded(out, d, 2);
    out.push(b'T');
    push_padded(out, rem / 3600, 2);
    out.push(b':');
    push_padded(out, (rem / 60) % 60, 2);
    out.push(b':');
    push_padded(out, rem % 60, 2);
}

/// `YYYY-MM-DDTHH:MM:SSZ` (no quotes).
pub fn push_iso_seconds(out: &mut Vec<u8>, secs: u64) {
    push_date_time(out, secs);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for microseconds since the epoch (no quotes).
pub fn push_iso_millis(out: &mut Vec<u8>, micros: u64) {
    push_date_time(out, micros / 1_000_000);
    out.push(b'.');
    push_padded(out, (micros / 1000) % 1000, 3);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (no quotes): some clients write microseconds.
pub fn push_iso_micros(out: &mut Vec<u8>, micros: u64) {
    push_date_time(out, micros / 1_000_000);
    out.push(b'.');
    push_padded(out, micros % 1_000_000, 6);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS+00:00` (no quotes): the offset form a few clients write.
pub fn push_iso_offset(out: &mut Vec<u8>, micros: u64) {
    push_date_time(out, micros / 1_000_000);
    out.extend_from_slice(b"+00:00");
}

/// RFC 4648 lower-case base32, the alphabet of `did:plc` identifiers and CIDs.
pub const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Appends `len` base32 characters taken from the bits of `words` (5 bits each, 12 per word).
pub fn push_base32_bits(out: &mut Vec<u8>, words: &[u64], len: usize) {
    for i in 0..len {
        let word = words[(i / 12) % words.len()];
        out.push(BASE32[((word >> ((i % 12) * 5)) & 31) as usize]);
    }
}

/// Appends `len` lower-case hex digits from the bits of `words` (16 per word).
pub fn push_hex_bits(out: &mut Vec<u8>, words: &[u64], len: usize) {
    for i in 0..len {
        let word = words[(i / 16) % words.len()];
        out.push(HEX[((word >> ((i % 16) * 4)) & 15) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn dates() {
        assert_eq!(
            text(|o| push_iso_millis(o, 1_732_206_349_000_167)),
            "2024-11-21T16:25:49.000Z"
        );
        assert_eq!(
            text(|o| push_iso_micros(o, 1_732_206_349_000_167)),
            "2024-11-21T16:25:49.000167Z"
        );
        assert_eq!(
            text(|o| push_iso_offset(o, 1_732_206_349_000_167)),
            "2024-11-21T16:25:49+00:00"
        );
        assert_eq!(
            text(|o| push_iso_seconds(o, 1_420_074_000)),
            "2015-01-01T01:00:00Z"
        );
        assert_eq!(
            text(|o| push_iso_seconds(o, 951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(text(|o| push_iso_seconds(o, 0)), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn escapes_parse_back() {
        let tricky = "a\"b\\c\n\r\t\u{0}\u{1f} é 🦋 <a href=\"x\">&</a> \u{2028}\u{2029}";
        for escape in [Escape::Minimal, Escape::Go] {
            let json = text(|o| push_str(o, tricky, escape));
            let back: String = serde_json::from_str(&json).unwrap();
            assert_eq!(back, tricky);
        }
        assert_eq!(
            text(|o| push_str(o, "<&>\u{0}", Escape::Go)),
            "\"\\u003c\\u0026\\u003e\\u0000\""
        );
        assert_eq!(
            text(|o| push_str(o, "<&>\u{0}", Escape::Minimal)),
            "\"<&>\\u0000\""
        );
    }

    #[test]
    fn integers() {
        assert_eq!(text(|o| push_u64(o, 0)), "0");
        assert_eq!(text(|o| push_u64(o, u64::MAX)), u64::MAX.to_string());
    }
}
