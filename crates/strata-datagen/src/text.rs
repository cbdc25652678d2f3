//! Small helpers to write JSON text and realistic identifiers quickly.

use rand::Rng;
use rand::rngs::SmallRng;

/// Appends `s` as a JSON string literal (quotes and escapes included).
pub fn push_json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// Appends `"key":` to an object under construction.
pub fn key(out: &mut Vec<u8>, k: &str) {
    push_json_string(out, k);
    out.push(b':');
}

pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa_buf(v);
    out.append(&mut buf);
}

fn itoa_buf(v: u64) -> Vec<u8> {
    v.to_string().into_bytes()
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Deterministic base32 text of `len` characters derived from `id` (stable across runs).
pub fn base32_from(id: u64, salt: u64, len: usize, out: &mut Vec<u8>) {
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03);
    for i in 0..len {
        if i % 12 == 0 {
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 32;
        }
        out.push(BASE32[(x & 31) as usize]);
        x >>= 5;
    }
}

/// Random base32 text.
pub fn random_base32(rng: &mut SmallRng, len: usize, out: &mut Vec<u8>) {
    for _ in 0..len {
        out.push(BASE32[rng.random_range(0..32)]);
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for microseconds since the epoch.
pub fn iso_millis(micros: u64, out: &mut Vec<u8>) {
    let secs = micros / 1_000_000;
    let millis = (micros / 1000) % 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    out.extend_from_slice(
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        )
        .as_bytes(),
    );
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch.
pub fn iso_seconds(secs: u64, out: &mut Vec<u8>) {
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    out.extend_from_slice(
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        )
        .as_bytes(),
    );
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Picks an index by cumulative weights.
pub fn pick(rng: &mut SmallRng, cumulative: &[u64]) -> usize {
    let total = cumulative.last().copied().unwrap_or(1).max(1);
    let x = rng.random_range(0..total);
    cumulative.partition_point(|&c| c <= x)
}

pub fn cumulative(weights: &[u64]) -> Vec<u64> {
    weights
        .iter()
        .scan(0u64, |acc, w| {
            *acc += w;
            Some(*acc)
        })
        .collect()
}

/// A power-law draw over `0..population`: most draws hit a small set of heavy users, as in real
/// event streams. Larger `exponent` = more skew.
pub fn skewed(rng: &mut SmallRng, population: u64, exponent: f64) -> u64 {
    let u: f64 = rng.random();
    ((population as f64) * u.powf(exponent)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        let mut out = Vec::new();
        iso_millis(1_732_206_349_000_167, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "2024-11-21T16:25:49.000Z");
        let mut out = Vec::new();
        iso_seconds(1_420_074_000, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "2015-01-01T01:00:00Z");
    }

    #[test]
    fn escapes() {
        let mut out = Vec::new();
        push_json_string(&mut out, "a\"b\\c\n\u{0}é");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\\"b\\\\c\\n\\u0000é\""
        );
    }
}
