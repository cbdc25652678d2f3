//! Exact comparison of numbers written as decimal text.
//!
//! JSON numbers keep their text in Strata (`9007199254740993`, `1.10`, `1e400`,
//! `18446744073709551616`), and a comparison with a SQL number must not round either side to a
//! double (ADR 0003). Both sides are read as exact decimals — sign, significant digits and a
//! decimal exponent — and compared digit by digit, so any two numbers that JSON can write are
//! ordered exactly, whatever their size or precision.

use std::cmp::Ordering;

/// A decimal number `±0.d₁d₂…dₙ × 10^exponent` with no leading or trailing zero digits;
/// zero has no digits.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

/// Exponents are clamped here: no number text of a sane size reaches it, and clamping keeps the
/// order of the absurd ones that do.
const EXPONENT_LIMIT: i64 = 1 << 60;

impl Decimal {
    /// Parses `-?digits[.digits][(e|E)[+-]digits]`; None for anything else (NaN, inf, text).
    fn parse(text: &str) -> Option<Decimal> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let negative = bytes.first() == Some(&b'-');
        if negative || bytes.first() == Some(&b'+') {
            i += 1;
        }
        let mut digits = Vec::with_capacity(bytes.len());
        // Digits before the decimal point raise the exponent; leading zeros do not count.
        let mut exponent: i64 = 0;
        let mut any_digit = false;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            any_digit = true;
            if !(digits.is_empty() && bytes[i] == b'0') {
                digits.push(bytes[i] - b'0');
                exponent += 1;
            }
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                any_digit = true;
                if digits.is_empty() && bytes[i] == b'0' {
                    exponent -= 1;
                } else {
                    digits.push(bytes[i] - b'0');
                }
                i += 1;
            }
        }
        if !any_digit {
            return None;
        }
        if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
            i += 1;
            let exponent_negative = bytes.get(i) == Some(&b'-');
            if exponent_negative || bytes.get(i) == Some(&b'+') {
                i += 1;
            }
            let start = i;
            let mut written: i64 = 0;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                written = (written * 10 + i64::from(bytes[i] - b'0')).min(EXPONENT_LIMIT);
                i += 1;
            }
            if i == start {
                return None;
            }
            exponent = if exponent_negative {
                (exponent - written).max(-EXPONENT_LIMIT)
            } else {
                (exponent + written).min(EXPONENT_LIMIT)
            };
        }
        if i != bytes.len() {
            return None;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            // -0 and 0 are the same number.
            return Some(Decimal {
                negative: false,
                digits,
                exponent: 0,
            });
        }
        Some(Decimal {
            negative,
            digits,
            exponent,
        })
    }

    fn cmp_magnitude(&self, other: &Decimal) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            // Without trailing zeros, a digit string that is a prefix of another is smaller.
            (false, false) => self
                .exponent
                .cmp(&other.exponent)
                .then_with(|| self.digits.cmp(&other.digits)),
        }
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A parsed number to compare many values against.
#[derive(Debug, Clone)]
pub struct ExactNumber(Decimal);

impl ExactNumber {
    /// None when `text` is not a finite decimal number.
    pub fn parse(text: &str) -> Option<ExactNumber> {
        Decimal::parse(text).map(ExactNumber)
    }

    /// The exact order of the number written as `text` relative to this one; None when `text`
    /// is not a number.
    pub fn order_of(&self, text: &str) -> Option<Ordering> {
        Decimal::parse(text).map(|value| value.cmp(&self.0))
    }
}

/// Text of a SQL number literal that compares exactly: integers as written, doubles as their
/// shortest round-trip text (what the literal denotes once DataFusion has parsed it).
pub fn float_text(value: f64) -> Option<String> {
    value.is_finite().then(|| format!("{value:e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn order(a: &str, b: &str) -> Option<Ordering> {
        ExactNumber::parse(b)?.order_of(a)
    }

    #[test]
    fn integers_beyond_doubles_stay_apart() {
        assert_eq!(
            order("9007199254740993", "9007199254740992"),
            Some(Ordering::Greater)
        );
        assert_eq!(
            order("18446744073709551615", "18446744073709551616"),
            Some(Ordering::Less)
        );
    }

    #[test]
    fn spellings_of_one_value_are_equal() {
        for (a, b) in [
            ("1.10", "1.1"),
            ("1e3", "1000"),
            ("1E+3", "1000.000"),
            ("-0", "0"),
            ("0.0e10", "0"),
            ("0.001", "1e-3"),
            ("00012", "12"),
        ] {
            assert_eq!(order(a, b), Some(Ordering::Equal), "{a} vs {b}");
        }
    }

    #[test]
    fn signs_and_magnitudes_order() {
        assert_eq!(order("-5", "3"), Some(Ordering::Less));
        assert_eq!(order("-5", "-3"), Some(Ordering::Less));
        assert_eq!(order("0.5", "0"), Some(Ordering::Greater));
        assert_eq!(order("-0.5", "0"), Some(Ordering::Less));
        assert_eq!(order("1e400", "1e399"), Some(Ordering::Greater));
        assert_eq!(order("1e-400", "0"), Some(Ordering::Greater));
        assert_eq!(order("12", "123"), Some(Ordering::Less));
    }

    #[test]
    fn non_numbers_have_no_order() {
        for text in ["", "-", "abc", "1e", "1.2.3", "NaN", "inf", "1 ", "e5", "."] {
            assert_eq!(order(text, "1"), None, "{text:?}");
        }
        assert!(float_text(f64::NAN).is_none());
    }

    proptest! {
        #[test]
        fn agrees_with_integers(a: i64, b: i64) {
            prop_assert_eq!(order(&a.to_string(), &b.to_string()), Some(a.cmp(&b)));
        }

        #[test]
        fn agrees_with_doubles(a in -1e30f64..1e30, b in -1e30f64..1e30) {
            let (ta, tb) = (float_text(a).unwrap_or_default(), float_text(b).unwrap_or_default());
            prop_assert_eq!(order(&ta, &tb), a.partial_cmp(&b));
            prop_assert_eq!(order(&a.to_string(), &b.to_string()), a.partial_cmp(&b));
        }
    }
}
