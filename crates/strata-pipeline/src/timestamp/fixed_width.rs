//! Timestamps of a fixed width read digit by digit, without chrono's format parser: the
//! access-log form `17/May/2015:10:05:03 +0000` and ISO 8601's `2024-08-01T14:22:47.123Z`, the
//! forms log lines nearly always have (reading them through chrono's format items was a tenth of a
//! log ingest's time).
//!
//! Invariant: each function answers None for a text not exactly in its form or out of range,
//! and the caller then reads the text as it always did; where a function answers, it answers
//! what that reading gives (tested against it in `super::tests`).

use chrono::{
    DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Timelike, Utc,
};

/// `dd/Mon/yyyy:HH:MM:SS +hhmm`, the month's name capitalised as the logs write it.
pub(super) fn clf(text: &str) -> Option<DateTime<FixedOffset>> {
    let b = text.as_bytes();
    if b.len() != 26
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || b[14] != b':'
        || b[17] != b':'
        || b[20] != b' '
    {
        return None;
    }
    let month = MONTHS.iter().position(|name| name.as_bytes() == &b[3..6])?;
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(&b[7..11])?).ok()?,
        u32::try_from(month + 1).ok()?,
        number(&b[0..2])?,
    )?;
    let time = time_of_day(&b[12..14], &b[15..17], &b[18..20], 0)?;
    let offset = offset(b[21], &b[22..24], &b[24..26])?;
    offset
        .from_local_datetime(&NaiveDateTime::new(date, time))
        .single()
}

/// `YYYY-MM-DD` `T` or a space, `HH:MM:SS`, optionally `.` or `,` and one to nine digits of a
/// second, then `Z`, `+HH:MM`, `+HHMM` or nothing (the pipeline's zone then applies): the
/// local time and its offset.
pub(super) fn iso8601(text: &str) -> Option<(NaiveDateTime, Option<FixedOffset>)> {
    let b = text.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(&b[0..4])?).ok()?,
        number(&b[5..7])?,
        number(&b[8..10])?,
    )?;
    let mut rest = &b[19..];
    let mut nanos = 0;
    if let [b'.' | b',', fraction @ ..] = rest {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        nanos = number(&fraction[..digits])? * 10u32.pow(9 - u32::try_from(digits).ok()?);
        rest = &fraction[digits..];
    }
    let time = time_of_day(&b[11..13], &b[14..16], &b[17..19], nanos)?;
    let offset = match rest {
        [] => None,
        [b'Z' | b'z'] => Some(FixedOffset::east_opt(0)?),
        [sign, h1, h2, b':', m1, m2] | [sign, h1, h2, m1, m2] => {
            Some(offset(*sign, &[*h1, *h2], &[*m1, *m2])?)
        }
        _ => return None,
    };
    Some((NaiveDateTime::new(date, time), offset))
}

/// `instant` as `YYYY-MM-DDTHH:MM:SS`, then `kept` nanoseconds in `digits` digits (none for
/// 0), then `Z`: what chrono's `to_rfc3339_opts` writes in UTC, for years 0 to 9999 and no leap
/// second (None otherwise).
pub(super) fn write(instant: DateTime<Utc>, kept: u32, digits: u32) -> Option<String> {
    let year = instant.year();
    if !(0..=9999).contains(&year) || kept >= 1_000_000_000 || digits > 9 {
        return None;
    }
    let mut text = String::with_capacity(31);
    push_digits(&mut text, u32::try_from(year).ok()?, 4);
    for (separator, value) in [
        ('-', instant.month()),
        ('-', instant.day()),
        ('T', instant.hour()),
        (':', instant.minute()),
        (':', instant.second()),
    ] {
        text.push(separator);
        push_digits(&mut text, value, 2);
    }
    if digits > 0 {
        text.push('.');
        push_digits(&mut text, kept / 10u32.pow(9 - digits), digits);
    }
    text.push('Z');
    Some(text)
}

/// The last `width` decimal digits of `value`, zero-padded.
fn push_digits(text: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        let digit = (value / 10u32.pow(place)) % 10;
        text.push(char::from(b'0' + digit as u8));
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The number written by `digits`, all ASCII digits (at most nine), or None.
fn number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
    })
}

/// A time of day; a leap second (`:60`) is left to chrono.
fn time_of_day(hour: &[u8], minute: &[u8], second: &[u8], nanos: u32) -> Option<NaiveTime> {
    let (hour, minute, second) = (number(hour)?, number(minute)?, number(second)?);
    if second > 59 {
        return None;
    }
    NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)
}

/// `+` or `-`, hours (at most 23) and minutes (at most 59).
fn offset(sign: u8, hours: &[u8], minutes: &[u8]) -> Option<FixedOffset> {
    let sign = match sign {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = (number(hours)?, number(minutes)?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * i32::try_from(hours * 3600 + minutes * 60).ok()?)
}
