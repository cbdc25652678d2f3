//! Stable, realistic-looking names derived from numeric ids: `did:plc` identifiers, Bluesky
//! handles and display names, GitHub logins.
//!
//! Invariant: each function is a pure function of its id (no random stream), and distinct ids give
//! distinct DIDs, handles and logins, so counting distinct names counts distinct entities.

use crate::json::{BASE32, push_u64};
use crate::rng::{mix64, permute};

/// Consonant-vowel syllables: every name is a whole number of two-letter syllables, so a name
/// splits back into its syllables in exactly one way (this is what makes names injective).
const CONSONANTS: &[u8; 16] = b"bdfghjklmnprstvz";
const VOWELS: &[u8; 4] = b"aeio";

/// Appends a pronounceable lower-case name that is unique for `n`.
pub fn push_name(out: &mut Vec<u8>, n: u64) {
    // Ids below 2^18 (the busy head of every population) get exactly three syllables, scrambled
    // so that neighbouring ids do not look alike; larger ids are written with all their base-64
    // digits, which always takes four syllables or more. The two classes differ in length and each
    // is injective, so names are unique.
    let (mut v, min_syllables) = if n < 1 << 18 {
        (permute(n, 18), 3)
    } else {
        (n, 4)
    };
    let mut syllables = 0;
    while v > 0 || syllables < min_syllables {
        let s = (v & 63) as usize;
        out.push(CONSONANTS[s >> 2]);
        out.push(VOWELS[s & 3]);
        v >>= 6;
        syllables += 1;
    }
}

/// `did:plc:` followed by 24 base32 characters (120 bits derived from `user`), without quotes.
pub fn push_did(out: &mut Vec<u8>, user: u64) {
    out.extend_from_slice(b"did:plc:");
    // 120 bits from two independent mixes of the id; the first 60 already identify a user among
    // the tens of millions generated with negligible collision probability.
    let a = mix64(user ^ 0x5bd1_e995);
    let b = mix64(user.wrapping_add(0x2545_f491_4f6c_dd1d));
    for i in 0..24 {
        let word = if i < 12 { a } else { b };
        out.push(BASE32[((word >> ((i % 12) * 5)) & 31) as usize]);
    }
}

const CUSTOM_DOMAINS: [&str; 8] = [
    ".com", ".net", ".dev", ".art", ".xyz", ".social", ".io", ".me",
];

/// A Bluesky handle: mostly `name.bsky.social`, some with digits, some on their own domain.
pub fn push_handle(out: &mut Vec<u8>, user: u64) {
    let h = mix64(user ^ 0x68a4_d1e5);
    push_name(out, user);
    if h.is_multiple_of(4) {
        push_u64(out, (h >> 8) % 100);
    }
    if (h >> 16) % 100 < 12 {
        out.extend_from_slice(CUSTOM_DOMAINS[((h >> 24) % 8) as usize].as_bytes());
    } else {
        out.extend_from_slice(b".bsky.social");
    }
}

/// A display name: the capitalised name, sometimes with a second word or an emoji.
pub fn display_name(user: u64) -> String {
    const EXTRAS: [&str; 10] = [
        "",
        "",
        "",
        " 🦋",
        " ✨",
        " 🏳️\u{200d}🌈",
        " (she/her)",
        " (he/him)",
        " 🌸",
        " 🎨",
    ];
    let h = mix64(user ^ 0x0d15_91a7);
    let mut raw = Vec::new();
    push_name(&mut raw, user);
    let mut name = String::with_capacity(raw.len() + 16);
    for (i, &c) in raw.iter().enumerate() {
        name.push(if i == 0 {
            char::from(c.to_ascii_uppercase())
        } else {
            char::from(c)
        });
    }
    name.push_str(EXTRAS[(h % EXTRAS.len() as u64) as usize]);
    name
}

/// A GitHub login: the name, sometimes capitalised, sometimes with digits. Logins of users never
/// contain `-`; organisation logins always do, which keeps the two sets disjoint.
pub fn push_login(out: &mut Vec<u8>, user: u64) {
    let h = mix64(user ^ 0x1091_7e5a);
    let start = out.len();
    push_name(out, user);
    if h.is_multiple_of(5) {
        out[start] = out[start].to_ascii_uppercase();
    }
    if (h >> 8).is_multiple_of(4) {
        push_u64(out, (h >> 16) % 1000);
    }
}

const ORG_SUFFIXES: [&str; 10] = [
    "-labs",
    "-io",
    "-team",
    "-dev",
    "-org",
    "-project",
    "-hq",
    "-inc",
    "-js",
    "-community",
];

pub fn push_org_login(out: &mut Vec<u8>, org: u64) {
    push_name(out, org);
    out.extend_from_slice(ORG_SUFFIXES[(mix64(org ^ 0x0b9) % 10) as usize].as_bytes());
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn names_are_unique() {
        let mut dids = HashSet::new();
        let mut handles = HashSet::new();
        let mut logins = HashSet::new();
        for id in (0..200_000u64).chain((1u64 << 30)..(1u64 << 30) + 1000) {
            assert!(dids.insert(text(|o| push_did(o, id))));
            assert!(handles.insert(text(|o| push_handle(o, id))));
            assert!(logins.insert(text(|o| push_login(o, id)).to_lowercase()));
        }
        let did = text(|o| push_did(o, 5));
        assert_eq!(did.len(), 32);
        assert!(
            did[8..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
        );
    }
}
