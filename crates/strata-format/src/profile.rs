//! Column profiles: per part and string column, how many values it holds, how many compressed
//! bytes they take without a whole-chunk dictionary, and a HyperLogLog sketch of how many of them
//! are distinct. A merge unions its inputs' profiles to decide, before writing a row, which output
//! columns repeat enough for a dictionary per row group to pay (ADR 0007).
//!
//! Invariants: a sketch has exactly [`REGISTERS`] registers and is a pure function of the set of
//! values inserted (XXH64 with seed 0 over the UTF-8 bytes), so sketches of different parts, or
//! written by different builds, union into the sketch of the union. Profiles are stored in the
//! part's Parquet footer under [`PROFILES_KEY`] (docs/format.md); a part without them (or without
//! a column's) is valid and simply gives no evidence.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash64;

/// Footer key-value entry holding a part's column profiles as a JSON object.
pub const PROFILES_KEY: &str = "strata.column_profiles";

/// Bits of the hash that choose a register: 2^10 registers, a standard error of about 3 %.
const INDEX_BITS: u32 = 10;
/// Registers per sketch (one byte each when stored).
pub const REGISTERS: usize = 1 << INDEX_BITS;

/// A HyperLogLog sketch of the distinct values of a column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistinctSketch {
    registers: Vec<u8>,
}

impl Default for DistinctSketch {
    fn default() -> Self {
        DistinctSketch {
            registers: vec![0; REGISTERS],
        }
    }
}

impl DistinctSketch {
    pub fn insert(&mut self, value: &[u8]) {
        let hash = XxHash64::oneshot(0, value);
        let index = (hash >> (64 - INDEX_BITS)) as usize;
        // The remaining 54 bits; the guard bit bounds the rank at 55 when they are all zero.
        let rest = (hash << INDEX_BITS) | (1 << (INDEX_BITS - 1));
        let rank = rest.leading_zeros() as u8 + 1;
        if let Some(register) = self.registers.get_mut(index) {
            *register = (*register).max(rank);
        }
    }

    /// Makes this the sketch of both value sets.
    pub fn union(&mut self, other: &DistinctSketch) {
        for (mine, theirs) in self.registers.iter_mut().zip(&other.registers) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Estimated number of distinct values (HyperLogLog with linear counting for small sets).
    pub fn estimate(&self) -> f64 {
        let m = REGISTERS as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let harmonic: f64 = self
            .registers
            .iter()
            .map(|&r| 2f64.powi(-i32::from(r)))
            .sum();
        let raw = alpha * m * m / harmonic;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count();
        if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        }
    }

    fn from_bytes(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() == REGISTERS && bytes.iter().all(|&r| r <= 64 - INDEX_BITS as u8 + 1))
            .then_some(DistinctSketch { registers: bytes })
    }
}

/// What a part records about one string column (see the module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ColumnProfile {
    /// Non-null values in the column.
    pub values: u64,
    /// Compressed bytes of the column chunks as written without a whole-chunk dictionary (when a
    /// dictionary was used, the inputs' figure carried over).
    pub plain_bytes: u64,
    pub distinct: DistinctSketch,
}

/// Row-group dictionaries pay when they make a column at least this much smaller.
const DICTIONARY_MIN_GAIN: f64 = 0.1;

impl ColumnProfile {
    /// Adds another part's values of the same column.
    pub fn absorb(&mut self, other: &ColumnProfile) {
        self.values += other.values;
        self.plain_bytes += other.plain_bytes;
        self.distinct.union(&other.distinct);
    }

    /// Whether a dictionary over each row group of `rows_per_group` rows (of `rows` in all)
    /// would store this column in at most 90 % of its plain bytes.
    ///
    /// Model: each distinct value costs what a value costs now (they are stored once, in the
    /// dictionary page), and every value adds a bit-packed index of log2(distinct) bits. Values
    /// that compress well already (timestamps, sorted identifiers) keep their encoding; repeated
    /// incompressible ones (content hashes, URIs of popular posts) take the dictionary.
    pub fn pays_for_dictionary(&self, rows: u64, rows_per_group: u64) -> bool {
        if self.values == 0 || self.plain_bytes == 0 {
            return false;
        }
        let values = self.values as f64;
        let distinct_share = (self.distinct.estimate() / values).min(1.0);
        let group_share = (rows_per_group as f64 / rows.max(1) as f64).min(1.0);
        let distinct_per_group = (distinct_share * values * group_share).max(2.0);
        let per_value = self.plain_bytes as f64 / values;
        let with_dictionary = distinct_share * per_value + distinct_per_group.log2().ceil() / 8.0;
        with_dictionary <= (1.0 - DICTIONARY_MIN_GAIN) * per_value
    }
}

#[derive(Serialize, Deserialize)]
struct StoredProfile {
    values: u64,
    plain_bytes: u64,
    /// The registers, one byte each, base64 (standard alphabet, padded).
    hll: String,
}

/// The JSON stored under [`PROFILES_KEY`].
pub fn encode_profiles(profiles: &BTreeMap<String, ColumnProfile>) -> String {
    let stored: BTreeMap<&str, StoredProfile> = profiles
        .iter()
        .map(|(name, p)| {
            let stored = StoredProfile {
                values: p.values,
                plain_bytes: p.plain_bytes,
                hll: BASE64.encode(&p.distinct.registers),
            };
            (name.as_str(), stored)
        })
        .collect();
    // A map of plain structs always serializes.
    serde_json::to_string(&stored).unwrap_or_default()
}

/// Parses what [`encode_profiles`] wrote; the message names what is wrong.
pub fn decode_profiles(text: &str) -> Result<BTreeMap<String, ColumnProfile>, String> {
    let stored: BTreeMap<String, StoredProfile> =
        serde_json::from_str(text).map_err(|e| format!("column profiles: {e}"))?;
    stored
        .into_iter()
        .map(|(name, p)| {
            let registers = BASE64
                .decode(&p.hll)
                .ok()
                .and_then(DistinctSketch::from_bytes)
                .ok_or_else(|| format!("column profile of {name:?}: invalid sketch"))?;
            let profile = ColumnProfile {
                values: p.values,
                plain_bytes: p.plain_bytes,
                distinct: registers,
            };
            Ok((name, profile))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests fail loudly by design
mod tests {
    use super::*;

    fn sketch_of(values: impl Iterator<Item = String>) -> DistinctSketch {
        let mut sketch = DistinctSketch::default();
        for v in values {
            sketch.insert(v.as_bytes());
        }
        sketch
    }

    #[test]
    fn estimates_within_a_few_percent() {
        for n in [0usize, 1, 10, 1_000, 30_000, 500_000] {
            let estimate = sketch_of((0..n).map(|i| format!("value-{i}"))).estimate();
            let error = (estimate - n as f64).abs() / (n as f64).max(1.0);
            assert!(error < 0.08, "{n} distinct estimated as {estimate}");
        }
    }

    #[test]
    fn repeats_do_not_count_and_union_is_the_sketch_of_the_union() {
        let a = sketch_of((0..20_000).map(|i| format!("v{i}")));
        let repeated = sketch_of((0..60_000).map(|i| format!("v{}", i % 20_000)));
        assert_eq!(a, repeated);
        let mut left = sketch_of((0..15_000).map(|i| format!("v{i}")));
        left.union(&sketch_of((10_000..20_000).map(|i| format!("v{i}"))));
        assert_eq!(left, a);
    }

    #[test]
    fn profiles_round_trip_and_bad_ones_are_named() {
        let profile = ColumnProfile {
            values: 7,
            plain_bytes: 300,
            distinct: sketch_of((0..5).map(|i| i.to_string())),
        };
        let profiles = BTreeMap::from([("a.b".to_owned(), profile)]);
        assert_eq!(decode_profiles(&encode_profiles(&profiles)), Ok(profiles));
        let bad = r#"{"x":{"values":1,"plain_bytes":1,"hll":"AAAA"}}"#;
        assert_eq!(
            decode_profiles(bad),
            Err("column profile of \"x\": invalid sketch".to_owned())
        );
        assert!(decode_profiles("[1]").is_err());
    }

    /// Sketches are persisted and united across builds: the registers of a fixed value set are
    /// pinned (STRATA_UPDATE_GOLDEN=1 rewrites the file after an intended, documented change).
    #[test]
    fn sketch_registers_match_the_golden_file() {
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/golden/v1/distinct_sketch.json");
        let sketch = sketch_of((0..5_000).map(|i| format!("did:plc:{i:024}")));
        let profile = ColumnProfile {
            values: 5_000,
            plain_bytes: 0,
            distinct: sketch,
        };
        let text = encode_profiles(&BTreeMap::from([("did".to_owned(), profile)]));
        if std::env::var_os("STRATA_UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, format!("{text}\n")).unwrap();
        }
        let expected = std::fs::read_to_string(&golden).unwrap();
        assert_eq!(text, expected.trim_end());
    }

    proptest::proptest! {
        #[test]
        fn union_is_the_sketch_of_the_union(
            a in proptest::collection::vec(".{0,12}", 0..200),
            b in proptest::collection::vec(".{0,12}", 0..200),
        ) {
            let mut ab = sketch_of(a.iter().cloned());
            ab.union(&sketch_of(b.iter().cloned()));
            let mut ba = sketch_of(b.iter().cloned());
            ba.union(&sketch_of(a.iter().cloned()));
            proptest::prop_assert_eq!(&ab, &ba);
            proptest::prop_assert_eq!(&ab, &sketch_of(a.iter().chain(&b).cloned()));
        }

        #[test]
        fn stored_profiles_round_trip(
            columns in proptest::collection::btree_map(
                ".{0,8}",
                (proptest::num::u64::ANY, proptest::num::u64::ANY,
                 proptest::collection::vec(".{0,12}", 0..50)),
                0..4,
            ),
        ) {
            let profiles: BTreeMap<String, ColumnProfile> = columns
                .into_iter()
                .map(|(name, (values, plain_bytes, strings))| {
                    let distinct = sketch_of(strings.into_iter());
                    (name, ColumnProfile { values, plain_bytes, distinct })
                })
                .collect();
            proptest::prop_assert_eq!(decode_profiles(&encode_profiles(&profiles)), Ok(profiles));
        }

        /// Footers are input: any text decodes to profiles or to a message, never a panic.
        #[test]
        fn decoding_any_text_does_not_panic(text in ".{0,64}") {
            let _ = decode_profiles(&text);
            let wrapped = format!(r#"{{"c":{{"values":1,"plain_bytes":2,"hll":"{text}"}}}}"#);
            let _ = decode_profiles(&wrapped);
        }
    }

    #[test]
    fn dictionaries_pay_for_repeated_incompressible_values_only() {
        let profile = |values: u64, distinct: usize, bytes_per_value: u64| ColumnProfile {
            values,
            plain_bytes: values * bytes_per_value,
            distinct: sketch_of((0..distinct).map(|i| format!("{i}"))),
        };
        // Content hashes of liked posts: 57 % distinct, 27 compressed bytes each.
        assert!(profile(500_000, 285_000, 27).pays_for_dictionary(1_000_000, 524_288));
        // Every value distinct.
        assert!(!profile(500_000, 500_000, 27).pays_for_dictionary(1_000_000, 524_288));
        // Timestamps: 73 % distinct but 5 bytes each under delta encoding.
        assert!(!profile(960_000, 700_000, 5).pays_for_dictionary(1_000_000, 524_288));
        // A handful of languages.
        assert!(profile(80_000, 30, 1).pays_for_dictionary(1_000_000, 524_288));
        assert!(!ColumnProfile::default().pays_for_dictionary(10, 10));
    }
}
