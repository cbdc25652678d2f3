//! Timestamps in log lines: reading them in a declared format and zone, and writing them in the
//! one form Strata stores, RFC 3339 in UTC at a fixed precision per pipeline
//! (`2015-05-17T10:05:03Z`, `2015-05-17T10:05:03.120Z`).
//!
//! Invariant: every timestamp one pipeline writes has the same precision, so that the stored
//! strings sort as their instants do (`…03.5Z` would sort before `…03Z`); digits beyond the
//! precision are truncated, never rounded up into the next second.

use std::sync::{Arc, LazyLock};

mod fixed_width;

use chrono::format::{Item, ParseResult, Parsed, StrftimeItems, parse};
use chrono::{DateTime, FixedOffset, NaiveDateTime, Offset, SecondsFormat, TimeZone, Utc};

/// How a timestamp's text is read.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeFormat {
    /// ISO 8601 / RFC 3339: `2024-08-01T14:22:47Z`, `2024-08-01 14:22:47.123+08:00`,
    /// `2024-08-01T14:22:47,123+0800`; without an offset the pipeline's zone applies.
    Iso8601,
    /// Seconds (or milliseconds, …) since 1970-01-01 UTC, optionally with a fraction.
    Epoch(Precision),
    /// A chrono `strftime` pattern (`%d/%b/%Y:%H:%M:%S %z` for access logs); without an
    /// offset (`%z`) in the pattern the pipeline's zone applies, without a time midnight.
    Pattern {
        pattern: String,
        has_offset: bool,
        /// The pattern's items, parsed once (chrono's `parse_from_str` parses the pattern again
        /// for every value: a sixth of a structured ingest's time); None when the pattern is
        /// invalid, so each value reports chrono's error as it always did.
        items: Option<Arc<[Item<'static>]>>,
    },
}

impl TimeFormat {
    /// `iso8601` (or `rfc3339`), `epoch_s`, `epoch_ms`, `epoch_us`, `epoch_ns`, `clf` (the
    /// access-log format), or a `strftime` pattern.
    pub fn parse_name(name: &str) -> TimeFormat {
        match name {
            "iso8601" | "rfc3339" => TimeFormat::Iso8601,
            "epoch_s" => TimeFormat::Epoch(Precision::Seconds),
            "epoch_ms" => TimeFormat::Epoch(Precision::Millis),
            "epoch_us" => TimeFormat::Epoch(Precision::Micros),
            "epoch_ns" => TimeFormat::Epoch(Precision::Nanos),
            "clf" => TimeFormat::pattern(CLF_PATTERN),
            pattern => TimeFormat::pattern(pattern),
        }
    }

    fn pattern(pattern: &str) -> TimeFormat {
        TimeFormat::Pattern {
            pattern: pattern.to_owned(),
            has_offset: ["%z", "%:z", "%::z", "%#z", "%Z"]
                .iter()
                .any(|spec| pattern.contains(spec)),
            items: StrftimeItems::new(pattern)
                .parse_to_owned()
                .ok()
                .map(Arc::from),
        }
    }

    /// The precision this format's values carry: what a pipeline stores when it does not say.
    pub fn natural_precision(&self) -> Precision {
        match self {
            TimeFormat::Iso8601 => Precision::Millis,
            TimeFormat::Epoch(precision) => *precision,
            TimeFormat::Pattern { pattern, .. } => {
                if pattern.contains("%f") || pattern.contains("%.f") || has_sized_fraction(pattern)
                {
                    Precision::Millis
                } else {
                    Precision::Seconds
                }
            }
        }
    }
}

/// `%3f`, `%.6f`, …: a fraction of a second of a given width.
fn has_sized_fraction(pattern: &str) -> bool {
    ["%3f", "%6f", "%9f", "%.3f", "%.6f", "%.9f"]
        .iter()
        .any(|spec| pattern.contains(spec))
}

/// The timestamp format of Apache's and nginx's access logs: `17/May/2015:10:05:03 +0000`.
pub const CLF_PATTERN: &str = "%d/%b/%Y:%H:%M:%S %z";

/// The zone of timestamps written without an offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Zone {
    Fixed(FixedOffset),
    Named(chrono_tz::Tz),
}

impl Zone {
    pub fn utc() -> Zone {
        Zone::Fixed(Utc.fix())
    }

    /// `UTC`, an offset (`+08:00`, `-0530`) or an IANA zone name (`Europe/Berlin`).
    pub fn parse(text: &str) -> Result<Zone, String> {
        if text.eq_ignore_ascii_case("utc") || text == "Z" {
            return Ok(Zone::utc());
        }
        if let Some(offset) = parse_offset(text) {
            return Ok(Zone::Fixed(offset));
        }
        text.parse::<chrono_tz::Tz>().map(Zone::Named).map_err(|_| {
            format!("unknown time zone '{text}' (write UTC, an offset such as +08:00, or an IANA name such as Europe/Berlin)")
        })
    }

    fn resolve(&self, local: NaiveDateTime) -> Result<DateTime<Utc>, String> {
        let resolved = match self {
            Zone::Fixed(offset) => offset
                .from_local_datetime(&local)
                .earliest()
                .map(|t| t.with_timezone(&Utc)),
            // In a fall-back hour the earlier instant is taken (as PostgreSQL does).
            Zone::Named(zone) => zone
                .from_local_datetime(&local)
                .earliest()
                .map(|t| t.with_timezone(&Utc)),
        };
        resolved.ok_or_else(|| format!("{local} does not exist in the time zone (a clock change)"))
    }
}

/// `+08:00`, `+0800`, `-05`.
fn parse_offset(text: &str) -> Option<FixedOffset> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !matches!(digits.len(), 2 | 4) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = if digits.len() == 4 {
        digits[2..].parse().ok()?
    } else {
        0
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

/// How many digits of a second a pipeline stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl Precision {
    /// `s`, `ms`, `us` or `ns`.
    pub fn parse(text: &str) -> Result<Precision, String> {
        match text {
            "s" => Ok(Precision::Seconds),
            "ms" => Ok(Precision::Millis),
            "us" => Ok(Precision::Micros),
            "ns" => Ok(Precision::Nanos),
            other => Err(format!(
                "unknown precision '{other}' (write s, ms, us or ns)"
            )),
        }
    }

    fn digits(self) -> u32 {
        match self {
            Precision::Seconds => 0,
            Precision::Millis => 3,
            Precision::Micros => 6,
            Precision::Nanos => 9,
        }
    }
}

/// A declared timestamp: its format, the zone of values without an offset, and the precision
/// stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSpec {
    pub format: TimeFormat,
    pub zone: Zone,
    pub precision: Precision,
}

impl TimeSpec {
    /// Reads `text` as an instant; the error says why it is not one.
    pub fn read(&self, text: &str) -> Result<DateTime<Utc>, String> {
        let text = text.trim();
        match &self.format {
            TimeFormat::Iso8601 => read_iso8601(text, self.zone),
            TimeFormat::Epoch(unit) => read_epoch(text, *unit),
            TimeFormat::Pattern {
                pattern,
                has_offset,
                items,
            } => {
                if pattern == CLF_PATTERN
                    && let Some(instant) = fixed_width::clf(text)
                {
                    return Ok(instant.with_timezone(&Utc));
                }
                let mismatch =
                    |e| format!("'{text}' does not match the time format '{pattern}': {e}");
                // What chrono's `parse_from_str` does, with the pattern parsed once.
                let parsed = match items {
                    Some(items) => parsed_with(text, items),
                    None => parsed_with(text, &StrftimeItems::new(pattern).collect::<Vec<_>>()),
                }
                .map_err(mismatch)?;
                if *has_offset {
                    return parsed
                        .to_datetime()
                        .map(|t| t.with_timezone(&Utc))
                        .map_err(mismatch);
                }
                // A pattern without a time of day reads a date, at midnight.
                let local = parsed
                    .to_naive_datetime_with_offset(0)
                    .or_else(|e| {
                        parsed
                            .to_naive_date()
                            .map(|date| date.and_time(chrono::NaiveTime::MIN))
                            .map_err(|_| e)
                    })
                    .map_err(mismatch)?;
                self.zone.resolve(local)
            }
        }
    }

    /// The stored text of `instant`.
    pub fn write(&self, instant: DateTime<Utc>) -> String {
        write_time(instant, self.precision)
    }
}

/// RFC 3339 in UTC with exactly `precision`'s digits (truncated).
pub fn write_time(instant: DateTime<Utc>, precision: Precision) -> String {
    let digits = precision.digits();
    let nanos = instant.timestamp_subsec_nanos();
    let kept = nanos - nanos % 10u32.pow(9 - digits);
    if let Some(text) = fixed_width::write(instant, kept, digits) {
        return text;
    }
    write_time_with_chrono(instant, precision, kept)
}

/// [`write_time`] for every instant, through chrono's formatting.
fn write_time_with_chrono(instant: DateTime<Utc>, precision: Precision, kept: u32) -> String {
    let truncated = instant.with_nanosecond_truncated(kept);
    truncated.to_rfc3339_opts(
        match precision {
            Precision::Seconds => SecondsFormat::Secs,
            Precision::Millis => SecondsFormat::Millis,
            Precision::Micros => SecondsFormat::Micros,
            Precision::Nanos => SecondsFormat::Nanos,
        },
        true,
    )
}

trait TruncateNanos {
    fn with_nanosecond_truncated(self, nanos: u32) -> Self;
}

impl TruncateNanos for DateTime<Utc> {
    fn with_nanosecond_truncated(self, nanos: u32) -> Self {
        use chrono::Timelike;
        // A leap second (nanos ≥ 1e9) keeps its value: truncation never crosses a second.
        self.with_nanosecond(nanos).unwrap_or(self)
    }
}

fn read_iso8601(text: &str, zone: Zone) -> Result<DateTime<Utc>, String> {
    let invalid = |why: &str| format!("'{text}' is not an ISO 8601 timestamp: {why}");
    if let Some((naive, offset)) = fixed_width::iso8601(text) {
        return in_zone(naive, offset, zone).ok_or_else(|| invalid("out of range"))?;
    }
    read_iso8601_with_chrono(text, zone)
}

/// [`read_iso8601`] for every form: chrono's format items over the text normalized.
fn read_iso8601_with_chrono(text: &str, zone: Zone) -> Result<DateTime<Utc>, String> {
    let invalid = |why: &str| format!("'{text}' is not an ISO 8601 timestamp: {why}");
    // Split off the offset: `Z`, or a sign after the time (a date's own '-'s come first).
    let (local, offset) = if let Some(local) = text.strip_suffix(['Z', 'z']) {
        (local, Some(Utc.fix()))
    } else {
        match text.rfind(['+', '-']).filter(|&i| i > 10) {
            Some(i) => (
                &text[..i],
                Some(parse_offset(&text[i..]).ok_or_else(|| invalid("bad offset"))?),
            ),
            None => (text, None),
        }
    };
    let normalized: String = local
        .chars()
        .enumerate()
        .map(|(i, c)| match (i, c) {
            (10, ' ') => 'T',
            (_, ',') => '.',
            (_, c) => c,
        })
        .collect();
    static SECONDS: LazyLock<Vec<Item<'static>>> = LazyLock::new(|| items("%Y-%m-%dT%H:%M:%S%.f"));
    static MINUTES: LazyLock<Vec<Item<'static>>> = LazyLock::new(|| items("%Y-%m-%dT%H:%M"));
    static DATE: LazyLock<Vec<Item<'static>>> = LazyLock::new(|| items("%Y-%m-%d"));
    let naive = parsed_with(&normalized, &SECONDS)
        .and_then(|p| p.to_naive_datetime_with_offset(0))
        .or_else(|_| {
            parsed_with(&normalized, &MINUTES).and_then(|p| p.to_naive_datetime_with_offset(0))
        })
        .or_else(|_| {
            parsed_with(&normalized, &DATE)
                .and_then(|p| p.to_naive_date())
                .map(|date| date.and_time(chrono::NaiveTime::MIN))
        })
        .map_err(|e| invalid(&e.to_string()))?;
    in_zone(naive, offset, zone).ok_or_else(|| invalid("out of range"))?
}

/// A local time at its offset, or in `zone` without one; None when the offset puts it out of
/// range (the zone's own error is inside).
fn in_zone(
    naive: NaiveDateTime,
    offset: Option<FixedOffset>,
    zone: Zone,
) -> Option<Result<DateTime<Utc>, String>> {
    match offset {
        Some(offset) => offset
            .from_local_datetime(&naive)
            .single()
            .map(|t| Ok(t.with_timezone(&Utc))),
        None => Some(zone.resolve(naive)),
    }
}

/// The items of a constant pattern, parsed once (an invalid one's `Item::Error` fails every
/// value, as chrono's `parse_from_str` would).
fn items(pattern: &'static str) -> Vec<Item<'static>> {
    StrftimeItems::new(pattern).collect()
}

/// `text` read by a pattern's items: chrono's `parse_from_str` without parsing the pattern
/// again for every value.
fn parsed_with(text: &str, items: &[Item<'_>]) -> ParseResult<Parsed> {
    let mut parsed = Parsed::new();
    parse(&mut parsed, text, items.iter())?;
    Ok(parsed)
}

/// An access log's timestamp in its usual fixed width (`17/May/2015:10:05:03 +0000`), or None
/// (then [`read_clf`] may still read it).
pub fn read_fixed_width_clf(text: &str) -> Option<DateTime<FixedOffset>> {
    fixed_width::clf(text)
}

/// An access log's timestamp (`17/May/2015:10:05:03 +0000`, [`CLF_PATTERN`]) as
/// `DateTime::parse_from_str` reads it.
pub fn read_clf(text: &str) -> ParseResult<DateTime<FixedOffset>> {
    if let Some(instant) = fixed_width::clf(text) {
        return Ok(instant);
    }
    static CLF: LazyLock<Vec<Item<'static>>> = LazyLock::new(|| items(CLF_PATTERN));
    parsed_with(text, &CLF).and_then(|p| p.to_datetime())
}

fn read_epoch(text: &str, unit: Precision) -> Result<DateTime<Utc>, String> {
    let invalid = || format!("'{text}' is not a number of {unit:?} since 1970");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.bytes().any(|b| !b.is_ascii_digit()) {
        return Err(invalid());
    }
    let whole: i64 = whole.parse().map_err(|_| invalid())?;
    let per_second = 10i64.pow(unit.digits());
    let mut nanos_text = fraction.to_owned();
    nanos_text.truncate(9 - unit.digits() as usize);
    while nanos_text.len() < 9 - unit.digits() as usize {
        nanos_text.push('0');
    }
    let below_unit: i64 = if nanos_text.is_empty() {
        0
    } else {
        nanos_text.parse().map_err(|_| invalid())?
    };
    let seconds = whole.div_euclid(per_second);
    let unit_nanos = whole.rem_euclid(per_second) * 10i64.pow(9 - unit.digits());
    let nanos = if whole < 0 {
        unit_nanos - below_unit
    } else {
        unit_nanos + below_unit
    };
    let (seconds, nanos) = (
        seconds + nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000),
    );
    DateTime::from_timestamp(seconds, nanos as u32).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(format: &str, zone: &str) -> TimeSpec {
        let format = TimeFormat::parse_name(format);
        TimeSpec {
            precision: format.natural_precision(),
            format,
            zone: Zone::parse(zone).unwrap(),
        }
    }

    fn read(format: &str, zone: &str, text: &str) -> String {
        let spec = spec(format, zone);
        spec.write(spec.read(text).unwrap())
    }

    /// A pattern's items are parsed once; each value must read exactly as chrono's
    /// `parse_from_str` (which parses the pattern every time) reads it, errors included.
    #[test]
    fn patterns_parsed_once_read_as_chrono_reads_them() {
        use chrono::NaiveDate;
        let zone = Zone::parse("Europe/Berlin").unwrap();
        let reference = |pattern: &str, has_offset: bool, text: &str| {
            let text = text.trim();
            let mismatch = |e| format!("'{text}' does not match the time format '{pattern}': {e}");
            if has_offset {
                return DateTime::parse_from_str(text, pattern)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(mismatch);
            }
            let local = NaiveDateTime::parse_from_str(text, pattern)
                .or_else(|e| {
                    NaiveDate::parse_from_str(text, pattern)
                        .map(|date| date.and_time(chrono::NaiveTime::MIN))
                        .map_err(|_| e)
                })
                .map_err(mismatch)?;
            zone.resolve(local)
        };
        let values = [
            "17/May/2015:10:05:03 +0000",
            " 01/Aug/2024:14:22:47 +0800 ",
            "31/Feb/2024:14:22:47 +0800",
            "17/May/2015:10:05:03",
            "2024/01/15 08:00:00",
            "2024/03/31 02:30:00",
            "20240115",
            "2024-01-15",
            "",
            "garbage",
        ];
        let patterns = [
            CLF_PATTERN,
            "%Y/%m/%d %H:%M:%S",
            "%Y%m%d",
            "%Y-%m-%d",
            "%d/%b/%Y:%H:%M:%S",
            "%Y %Q",
        ];
        for value in values {
            assert_eq!(
                read_clf(value),
                DateTime::parse_from_str(value, CLF_PATTERN),
                "{value:?}"
            );
        }
        for pattern in patterns {
            let format = TimeFormat::parse_name(pattern);
            let TimeFormat::Pattern {
                has_offset, items, ..
            } = &format
            else {
                panic!("{pattern} is not a pattern");
            };
            // An invalid pattern is kept unparsed and fails per value, as before.
            assert_eq!(items.is_none(), pattern == "%Y %Q", "{pattern}");
            let spec = TimeSpec {
                precision: format.natural_precision(),
                format: format.clone(),
                zone,
            };
            for value in values {
                assert_eq!(
                    spec.read(value),
                    reference(pattern, *has_offset, value),
                    "{pattern} reading {value:?}"
                );
            }
        }
    }

    fn two_digits() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u32..62).prop_map(|n| format!("{n:02}")),
            Just("7".to_owned()),
            Just("x1".to_owned())
        ]
    }

    fn offset_text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("Z".to_owned()),
            Just("z".to_owned()),
            (
                prop::sample::select(vec!['+', '-']),
                0u32..26,
                0u32..62,
                any::<bool>()
            )
                .prop_map(|(sign, h, m, colon)| format!(
                    "{sign}{h:02}{}{m:02}",
                    if colon { ":" } else { "" }
                )),
            Just("+08".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Where the fixed-width reader answers, it answers what chrono's format items do.
        #[test]
        fn fixed_width_times_read_as_chrono_reads_them(
            year in prop_oneof![1900u32..2101, Just(0u32), Just(9999u32)],
            month in 0usize..14,
            (day, hour, minute, second) in (two_digits(), two_digits(), two_digits(), two_digits()),
            separator in prop::sample::select(vec!['T', ' ', 't']),
            fraction in prop_oneof![
                Just(String::new()),
                (prop::sample::select(vec!['.', ',']), 0usize..12)
                    .prop_map(|(mark, n)| format!("{mark}{}", "123456789012".get(..n).unwrap_or(""))),
            ],
            offset in offset_text(),
            zone in prop::sample::select(vec!["UTC", "+05:30", "Europe/Berlin"]),
        ) {
            let zone = Zone::parse(zone).unwrap();
            let iso = format!(
                "{year:04}-{:02}-{day}{separator}{hour}:{minute}:{second}{fraction}{offset}",
                month
            );
            if fixed_width::iso8601(&iso).is_some() {
                prop_assert_eq!(read_iso8601(&iso, zone), read_iso8601_with_chrono(&iso, zone), "{}", iso);
            }
            let name = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                        "Dec", "may", "Foo"][month.min(13)];
            let clf = format!("{day}/{name}/{year:04}:{hour}:{minute}:{second} {}", offset.replace(':', ""));
            if let Some(fast) = fixed_width::clf(&clf) {
                prop_assert_eq!(Ok(fast), DateTime::parse_from_str(&clf, CLF_PATTERN), "{}", clf);
            }
        }
    }

    /// The fixed-width reader answers for the forms logs have (else the test above tests little).
    #[test]
    fn fixed_width_reads_the_usual_forms() {
        for text in [
            "2024-08-01T14:22:47Z",
            "2024-08-01 14:22:47,123",
            "2024-08-01T14:22:47.123456789+08:00",
            "2024-08-01T14:22:47-0530",
        ] {
            assert!(fixed_width::iso8601(text).is_some(), "{text}");
            let zone = Zone::parse("Europe/Berlin").unwrap();
            assert_eq!(
                read_iso8601(text, zone),
                read_iso8601_with_chrono(text, zone),
                "{text}"
            );
        }
        let clf = "17/May/2015:10:05:03 -0130";
        assert_eq!(
            fixed_width::clf(clf),
            DateTime::parse_from_str(clf, CLF_PATTERN).ok()
        );
        assert!(fixed_width::clf("17/May/2015:10:05:60 +0000").is_none());
    }

    #[test]
    fn access_log_times_become_utc() {
        assert_eq!(
            read("clf", "UTC", "17/May/2015:10:05:03 +0000"),
            "2015-05-17T10:05:03Z"
        );
        assert_eq!(
            read("clf", "UTC", "01/Aug/2024:14:22:47 +0800"),
            "2024-08-01T06:22:47Z"
        );
        assert!(
            spec("clf", "UTC")
                .read("17/Mai/2015:10:05:03 +0000")
                .is_err()
        );
    }

    #[test]
    fn iso8601_forms() {
        for (text, expected) in [
            ("2024-08-01T14:22:47Z", "2024-08-01T14:22:47.000Z"),
            ("2024-08-01 14:22:47.123+08:00", "2024-08-01T06:22:47.123Z"),
            ("2024-08-01T14:22:47,5+0800", "2024-08-01T06:22:47.500Z"),
            (
                "2024-08-01T14:22:47.123456789-05:00",
                "2024-08-01T19:22:47.123Z",
            ),
            ("2024-08-01T14:22", "2024-08-01T14:22:00.000Z"),
            ("2024-08-01", "2024-08-01T00:00:00.000Z"),
        ] {
            assert_eq!(read("iso8601", "UTC", text), expected, "{text}");
        }
        // Without an offset, the zone applies (CEST in August).
        assert_eq!(
            read("iso8601", "Europe/Berlin", "2024-08-01 14:22:47"),
            "2024-08-01T12:22:47.000Z"
        );
        assert_eq!(
            read("iso8601", "-0530", "2024-08-01 14:22:47"),
            "2024-08-01T19:52:47.000Z"
        );
        assert!(spec("iso8601", "UTC").read("yesterday").is_err());
    }

    #[test]
    fn epochs_keep_their_fraction_exactly() {
        assert_eq!(read("epoch_s", "UTC", "1431856103"), "2015-05-17T09:48:23Z");
        assert_eq!(
            read("epoch_ms", "UTC", "1431856103123"),
            "2015-05-17T09:48:23.123Z"
        );
        let micros = spec("epoch_s", "UTC");
        let t = micros.read("1431856103.000123").unwrap();
        assert_eq!(
            write_time(t, Precision::Micros),
            "2015-05-17T09:48:23.000123Z"
        );
        assert_eq!(write_time(t, Precision::Seconds), "2015-05-17T09:48:23Z");
        let before = micros.read("-1.5").unwrap();
        assert_eq!(
            write_time(before, Precision::Millis),
            "1969-12-31T23:59:58.500Z"
        );
        assert!(micros.read("12a").is_err());
    }

    #[test]
    fn patterns_without_offset_use_the_zone() {
        assert_eq!(
            read(
                "%Y/%m/%d %H:%M:%S",
                "America/New_York",
                "2024/01/15 08:00:00"
            ),
            "2024-01-15T13:00:00Z"
        );
        assert_eq!(read("%Y%m%d", "UTC", "20240115"), "2024-01-15T00:00:00Z");
        // A time that a clock change skips is an error, not a guess.
        assert!(
            spec("%Y-%m-%d %H:%M", "Europe/Berlin")
                .read("2024-03-31 02:30")
                .is_err()
        );
    }

    #[test]
    fn truncation_never_rounds_up() {
        let t = spec("iso8601", "UTC")
            .read("2024-08-01T14:22:47.999999Z")
            .unwrap();
        assert_eq!(write_time(t, Precision::Seconds), "2024-08-01T14:22:47Z");
        assert_eq!(write_time(t, Precision::Millis), "2024-08-01T14:22:47.999Z");
    }

    #[test]
    fn zones_and_precisions_are_named_in_errors() {
        assert!(
            Zone::parse("Mars/Olympus")
                .unwrap_err()
                .contains("Mars/Olympus")
        );
        assert!(Precision::parse("minutes").unwrap_err().contains("minutes"));
    }
}
