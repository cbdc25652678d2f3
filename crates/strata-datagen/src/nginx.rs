//! Nginx access-log lines like those of the log study (benchmarks.md §3), in the common format:
//! `129.37.245.88 - meln1ks [01/Aug/2024:14:22:47 +0800] "PATCH /observability/metrics/production HTTP/1.0" 501 33085`.
//!
//! Clients and users are skewed (a few are most of the traffic), most requests are anonymous
//! (`-`), paths come from a few hundred endpoints with ids, methods, protocols and statuses follow
//! typical web traffic, sizes are heavy-tailed, and the clock starts at 2024-08-01 00:00:00 +0800
//! and advances about 200 lines per second (10M lines span about 14 hours), never backwards.

use std::io::Write;

use crate::names::push_name;
use crate::rng::{Rng, Zipf, mix64};
use crate::{DatagenError, GenStats, drive};

pub struct NginxOptions {
    pub seed: u64,
    pub lines: u64,
}

/// 2024-08-01T00:00:00+08:00 in seconds since 1970 (local clock time is this plus 8 hours).
const START_UTC: i64 = 1_722_441_600;
const OFFSET_SECONDS: i64 = 8 * 3600;
/// Mean lines per second.
const RATE: u64 = 200;

const METHODS: [(&str, u64); 6] = [
    ("GET", 80),
    ("POST", 10),
    ("PUT", 4),
    ("DELETE", 3),
    ("PATCH", 2),
    ("HEAD", 1),
];
const PROTOCOLS: [(&str, u64); 3] = [("HTTP/1.1", 85), ("HTTP/2.0", 10), ("HTTP/1.0", 5)];
/// Per thousand.
const STATUSES: [(u16, u64); 11] = [
    (200, 780),
    (304, 60),
    (404, 50),
    (301, 30),
    (201, 20),
    (500, 20),
    (400, 15),
    (401, 10),
    (403, 10),
    (502, 3),
    (503, 2),
];
const AREAS: [&str; 12] = [
    "api",
    "observability",
    "static",
    "admin",
    "auth",
    "search",
    "shop",
    "blog",
    "docs",
    "metrics",
    "assets",
    "account",
];
const RESOURCES: [&str; 16] = [
    "users",
    "orders",
    "metrics",
    "production",
    "staging",
    "items",
    "cart",
    "login",
    "logout",
    "images",
    "reports",
    "settings",
    "health",
    "sessions",
    "comments",
    "payments",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

pub fn write_nginx(options: &NginxOptions, out: &mut dyn Write) -> Result<GenStats, DatagenError> {
    let mut rng = Rng::new(options.seed ^ 0x006e_6769_6e78);
    let clients = Zipf::new(200_000, 1.1, 20.0);
    let users = Zipf::new(20_000, 1.05, 10.0);
    let endpoints = Zipf::new(400, 1.2, 2.0);
    let mut clock = START_UTC;
    let mut fraction = 0u64;
    let mut written = 0u64;
    drive(
        |line| {
            if written == options.lines {
                return false;
            }
            written += 1;
            // Uniform gaps of 0..2/RATE seconds, kept in millionths so the clock never drifts.
            fraction += rng.below(2_000_000 / RATE + 1);
            clock += (fraction / 1_000_000) as i64;
            fraction %= 1_000_000;
            push_ip(line, clients.sample(&mut rng));
            line.extend_from_slice(b" - ");
            if rng.percent(35) {
                push_name(line, users.sample(&mut rng));
            } else {
                line.push(b'-');
            }
            line.extend_from_slice(b" [");
            push_clf_time(line, clock + OFFSET_SECONDS);
            line.extend_from_slice(b" +0800] \"");
            line.extend_from_slice(weighted(&mut rng, &METHODS, 100).as_bytes());
            line.push(b' ');
            push_path(line, endpoints.sample(&mut rng), &mut rng);
            line.push(b' ');
            line.extend_from_slice(weighted(&mut rng, &PROTOCOLS, 100).as_bytes());
            line.extend_from_slice(b"\" ");
            let status = weighted(&mut rng, &STATUSES, 1000);
            line.extend_from_slice(status.to_string().as_bytes());
            line.push(b' ');
            let bytes = match status {
                304 | 301 => 0,
                _ => heavy_tailed_size(&mut rng),
            };
            line.extend_from_slice(bytes.to_string().as_bytes());
            line.push(b'\n');
            true
        },
        out,
        "writing nginx log lines",
    )
}

fn weighted<T: Copy>(rng: &mut Rng, items: &[(T, u64)], total: u64) -> T {
    let mut draw = rng.below(total);
    for &(item, weight) in items {
        if draw < weight {
            return item;
        }
        draw -= weight;
    }
    items[0].0
}

fn push_ip(out: &mut Vec<u8>, client: u64) {
    let h = mix64(client ^ 0x1bad_f00d);
    let octets = [
        1 + (h % 223) as u8,
        (h >> 8) as u8,
        (h >> 16) as u8,
        1 + ((h >> 24) % 254) as u8,
    ];
    for (i, octet) in octets.iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        out.extend_from_slice(octet.to_string().as_bytes());
    }
}

/// One of a few hundred endpoints; some carry an id.
fn push_path(out: &mut Vec<u8>, endpoint: u64, rng: &mut Rng) {
    let h = mix64(endpoint ^ 0x9a7);
    out.push(b'/');
    out.extend_from_slice(AREAS[(h % AREAS.len() as u64) as usize].as_bytes());
    out.push(b'/');
    out.extend_from_slice(RESOURCES[((h >> 8) % RESOURCES.len() as u64) as usize].as_bytes());
    match (h >> 16) % 4 {
        0 => {
            out.push(b'/');
            out.extend_from_slice(rng.below(100_000).to_string().as_bytes());
        }
        1 => {
            out.push(b'/');
            out.extend_from_slice(
                RESOURCES[((h >> 24) % RESOURCES.len() as u64) as usize].as_bytes(),
            );
        }
        _ => {}
    }
}

/// Mostly a few kilobytes, sometimes megabytes.
fn heavy_tailed_size(rng: &mut Rng) -> u64 {
    let exponent = rng.unit() * rng.unit() * 14.0 + 7.0;
    2f64.powf(exponent) as u64
}

/// `01/Aug/2024:14:22:47` of a local time in seconds since 1970.
fn push_clf_time(out: &mut Vec<u8>, local: i64) {
    let days = local.div_euclid(86_400);
    let seconds = local.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let two = |out: &mut Vec<u8>, n: i64| {
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(out, day);
    out.push(b'/');
    out.extend_from_slice(MONTHS[(month - 1) as usize].as_bytes());
    out.push(b'/');
    out.extend_from_slice(year.to_string().as_bytes());
    out.push(b':');
    two(out, seconds / 3600);
    out.push(b':');
    two(out, seconds / 60 % 60);
    out.push(b':');
    two(out, seconds % 60);
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: u64, seed: u64) -> String {
        let mut out = Vec::new();
        write_nginx(&NginxOptions { seed, lines: n }, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_look_like_the_studys_and_repeat() {
        let text = lines(1000, 1);
        assert_eq!(text, lines(1000, 1));
        assert_ne!(text, lines(1000, 2));
        let first = text.lines().next().unwrap();
        assert!(first.contains("[01/Aug/2024:00:00:0"), "{first}");
        assert!(first.contains(" +0800] \""), "{first}");
        assert_eq!(text.lines().count(), 1000);
        assert!(text.lines().any(|l| l.contains(" - - [")));
        assert!(text.lines().any(|l| !l.contains(" - - [")));
    }

    #[test]
    fn calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_936), (2024, 8, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
