//! Stable-toolchain fuzzing of the ingest path: the edge-case corpus, mutated byte by byte and
//! token by token, must never panic and every accepted document must round-trip exactly.
//! The coverage-guided targets in `fuzz/` drive the same check for longer runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use proptest::prelude::*;
use strata_json::run_with_deep_stack;
use strata_json::selfcheck::{check_ingest_round_trip, check_merge_round_trip};

const CORPUS: &[u8] = include_bytes!("../../../tests/data/edge_cases.ndjson");

/// Fragments that tend to push a parser into its corners.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "\\",
    "\\u0000",
    "\\ud83d",
    "1e400",
    "-0",
    "1.10",
    "18446744073709551616",
    "null",
    "true",
    "\n",
    "\r\n",
    " ",
    "\u{feff}",
    "é",
    "\u{10ffff}",
    "{\"a\":",
    "[[[[",
    "]]]]",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Delete { at: usize, len: usize },
    InsertToken { at: usize, token: usize },
    Duplicate { at: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 0..TOKENS.len())
            .prop_map(|(at, token)| Mutation::InsertToken { at, token }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
    ]
}

fn apply(input: &mut Vec<u8>, mutation: &Mutation) {
    let len = input.len().max(1);
    match *mutation {
        Mutation::Flip { at, bit } => {
            if let Some(b) = input.get_mut(at % len) {
                *b ^= 1 << bit;
            }
        }
        Mutation::Delete { at, len: n } => {
            let start = at % len;
            let end = (start + n).min(input.len());
            if start < end {
                input.drain(start..end);
            }
        }
        Mutation::InsertToken { at, token } => {
            let at = (at % len).min(input.len());
            input.splice(at..at, TOKENS[token].bytes());
        }
        Mutation::Duplicate { at, len: n } => {
            let start = (at % len).min(input.len());
            let end = (start + n).min(input.len());
            let copy = input[start..end].to_vec();
            input.splice(end..end, copy);
        }
    }
}

fn corpus_lines() -> Vec<&'static [u8]> {
    CORPUS.split(|b| *b == b'\n').collect()
}

#[test]
fn unmutated_corpus_loads_and_rejects_as_documented() {
    let outcome = run_with_deep_stack(|| check_ingest_round_trip(CORPUS, 1024, &["kind"]));
    let outcome = outcome.unwrap();
    assert_eq!(outcome.accepted, 17);
    assert_eq!(outcome.rejected.len(), 8, "{:?}", outcome.rejected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_corpus_never_panics_and_round_trips(
        first in 0usize..64,
        count in 1usize..6,
        mutations in prop::collection::vec(mutation(), 1..10),
        max_columns in prop_oneof![Just(1usize), Just(3), Just(1024)],
    ) {
        let lines = corpus_lines();
        let mut input = Vec::new();
        for i in 0..count {
            input.extend_from_slice(lines[(first + i) % lines.len()]);
            input.push(b'\n');
        }
        for m in &mutations {
            apply(&mut input, m);
        }
        let result = run_with_deep_stack(move || {
            check_ingest_round_trip(&input, max_columns, &["kind", "a.b"])?;
            check_merge_round_trip(&input, max_columns, &["kind", "a.b"])
        });
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
