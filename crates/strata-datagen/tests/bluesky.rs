//! Calibration of the Bluesky generator against the real statistics of JSONBench's first
//! 1,000,000-document file, and the shape guarantees the rest of Strata relies on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use strata_datagen::bluesky::{
    BlueskyGenerator, BlueskyOptions, COLLECTIONS, START_TIME_US, write_bluesky,
};

fn generate(docs: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let stats = write_bluesky(
        &BlueskyOptions {
            seed,
            docs,
            quirks: false,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(stats.documents, docs);
    assert_eq!(stats.bytes, out.len() as u64);
    out
}

/// |observed - expected| within 5 binomial standard deviations (plus one count of slack for
/// tiny expectations).
fn assert_share(what: &str, observed: u64, expected_per_million: u64, docs: u64) {
    let p = expected_per_million as f64 / 1e6;
    let expected = p * docs as f64;
    let sigma = (docs as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (observed as f64 - expected).abs() <= 5.0 * sigma + 1.0,
        "{what}: {observed} observed, {expected:.0} expected"
    );
}

#[test]
fn hundred_thousand_documents_match_the_real_mix() {
    let docs = 100_000u64;
    let bytes = generate(docs, 1);
    let avg = bytes.len() as f64 / docs as f64;
    println!("bytes/doc at 100k: {avg:.1} (real: ~482)");
    assert!((400.0..=560.0).contains(&avg), "{avg} bytes/doc");

    let mut kinds: HashMap<String, u64> = HashMap::new();
    let mut operations: HashMap<String, u64> = HashMap::new();
    let mut all: HashMap<String, u64> = HashMap::new();
    let mut creates: HashMap<String, u64> = HashMap::new();
    let mut creators: HashMap<String, HashSet<String>> = HashMap::new();
    let mut previous_time = 0;
    let mut checked_facets = 0;
    for (i, line) in bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let text = std::str::from_utf8(line).unwrap();
        // Jetstream's key order (serde_json's map would not keep it).
        assert!(text.starts_with("{\"did\":\"did:plc:"), "{text}");
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(v.is_object());
        let did = v["did"].as_str().unwrap();
        assert_eq!(did.len(), 32);
        let time = v["time_us"].as_u64().unwrap();
        if i == 0 {
            assert_eq!(time, START_TIME_US);
        }
        assert!(time >= previous_time);
        previous_time = time;
        let kind = v["kind"].as_str().unwrap();
        assert!(text.contains(&format!(",\"kind\":\"{kind}\",\"{kind}\":{{")));
        *kinds.entry(kind.to_owned()).or_default() += 1;
        if kind != "commit" {
            assert_eq!(v[kind]["did"].as_str(), Some(did));
            assert!(v[kind]["seq"].is_u64() && v[kind]["time"].is_string());
            continue;
        }
        let commit = &v["commit"];
        let collection = commit["collection"].as_str().unwrap();
        let operation = commit["operation"].as_str().unwrap();
        assert_eq!(commit["rev"].as_str().unwrap().len(), 13);
        *operations.entry(operation.to_owned()).or_default() += 1;
        *all.entry(collection.to_owned()).or_default() += 1;
        if operation == "delete" {
            assert!(commit.get("record").is_none() && commit.get("cid").is_none());
            continue;
        }
        let record = &commit["record"];
        assert_eq!(record["$type"].as_str(), Some(collection));
        assert!(
            record["createdAt"]
                .as_str()
                .unwrap()
                .starts_with("2024-11-")
        );
        assert!(commit["cid"].as_str().unwrap().starts_with("bafyrei"));
        if operation == "create" {
            *creates.entry(collection.to_owned()).or_default() += 1;
            creators
                .entry(collection.to_owned())
                .or_default()
                .insert(did.to_owned());
        }
        match collection {
            "app.bsky.feed.like" | "app.bsky.feed.repost" => {
                let subject = &record["subject"];
                assert!(subject.is_object(), "{text}");
                assert!(subject["cid"].is_string());
                assert!(
                    subject["uri"]
                        .as_str()
                        .unwrap()
                        .contains("/app.bsky.feed.post/")
                );
            }
            "app.bsky.graph.follow" | "app.bsky.graph.block" => {
                assert!(
                    record["subject"].as_str().unwrap().starts_with("did:plc:"),
                    "{text}"
                );
            }
            "app.bsky.feed.post" => {
                let body = record["text"].as_str().unwrap();
                for facet in record["facets"].as_array().into_iter().flatten() {
                    let start = facet["index"]["byteStart"].as_u64().unwrap() as usize;
                    let end = facet["index"]["byteEnd"].as_u64().unwrap() as usize;
                    let covered = body.get(start..end).expect("facet on char boundaries");
                    let feature = &facet["features"][0];
                    match feature["$type"].as_str().unwrap() {
                        "app.bsky.richtext.facet#tag" => {
                            assert_eq!(covered, format!("#{}", feature["tag"].as_str().unwrap()))
                        }
                        "app.bsky.richtext.facet#mention" => assert!(covered.starts_with('@')),
                        "app.bsky.richtext.facet#link" => assert!(covered.ends_with("...")),
                        other => panic!("unexpected facet {other}"),
                    }
                    checked_facets += 1;
                }
            }
            "app.bsky.actor.profile" => assert!(record["displayName"].is_string()),
            "app.bsky.graph.listitem" => {
                assert!(record["subject"].as_str().unwrap().starts_with("did:plc:"));
                assert!(
                    record["list"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("at://{did}/"))
                );
            }
            _ => {}
        }
    }
    assert!(checked_facets > 100, "{checked_facets}");
    // 1M documents span ~34 minutes; 100k about a tenth of that.
    let span_s = (previous_time - START_TIME_US) as f64 / 1e6;
    assert!((190.0..220.0).contains(&span_s), "{span_s} s");

    println!("kinds at 100k: {kinds:?}");
    println!("operations at 100k: {operations:?}");
    assert_share("commit", kinds["commit"], 994_672, docs);
    assert_share("identity", kinds["identity"], 5_328 / 2, docs);
    assert_share("account", kinds["account"], 5_328 / 2, docs);
    assert_share("create", operations["create"], 954_611, docs);
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "collection", "all", "creates", "creators"
    );
    for (name, all_per_m, creates_per_m, ..) in COLLECTIONS {
        let a = all.get(name).copied().unwrap_or(0);
        let c = creates.get(name).copied().unwrap_or(0);
        let u = creators.get(name).map_or(0, HashSet::len);
        println!("{name:<28} {a:>9} {c:>9} {u:>9}");
        assert_share(name, a, all_per_m, docs);
        assert_share(&format!("{name} creates"), c, creates_per_m, docs);
    }
    // Profiles are mostly updates, likes and follows never are.
    assert!(operations["update"] > 500);
    assert_eq!(
        creates["app.bsky.actor.profile"],
        creators["app.bsky.actor.profile"].len() as u64
    );
}

/// Counts, per collection, creates and distinct creating users, scanning the text (parsing a
/// million documents with serde_json would dominate the test's time).
fn distinct_creators(docs: u64) -> HashMap<&'static str, (u64, usize)> {
    let mut sets: HashMap<&str, (u64, HashSet<Vec<u8>>)> = HashMap::new();
    let mut generator = BlueskyGenerator::new(&BlueskyOptions {
        seed: 1,
        docs,
        quirks: false,
    });
    let mut line = Vec::with_capacity(4096);
    let marker = b"\"operation\":\"create\",\"collection\":\"";
    while {
        line.clear();
        generator.next_document(&mut line)
    } {
        let Some(at) = line.windows(marker.len()).position(|w| w == marker) else {
            continue;
        };
        let rest = &line[at + marker.len()..];
        let end = rest.iter().position(|b| *b == b'"').unwrap();
        let collection = COLLECTIONS
            .iter()
            .find(|c| c.0.as_bytes() == &rest[..end])
            .unwrap()
            .0;
        let did = line[8..40].to_vec();
        let entry = sets.entry(collection).or_default();
        entry.0 += 1;
        entry.1.insert(did);
    }
    sets.into_iter()
        .map(|(k, (n, users))| (k, (n, users.len())))
        .collect()
}

#[test]
fn distinct_users_at_one_million_match_the_real_file() {
    let measured = distinct_creators(1_000_000);
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "collection", "creates", "creators", "real"
    );
    for (name, _, _, real, ..) in COLLECTIONS {
        let (creates, users) = measured.get(name).copied().unwrap_or((0, 0));
        println!("{name:<28} {creates:>9} {users:>9} {real:>9}");
        // Within 15% for the collections large enough for that to be meaningful.
        if real >= 1_000 {
            let ratio = users as f64 / real as f64;
            assert!((0.85..=1.15).contains(&ratio), "{name}: {users} vs {real}");
        }
    }
}

/// Takes ~1 minute: `cargo test -p strata-datagen --release -- --ignored --nocapture`.
#[test]
#[ignore]
fn distinct_users_grow_like_the_real_ones_at_ten_million() {
    let measured = distinct_creators(10_000_000);
    for (name, real) in [
        ("app.bsky.feed.like", 694_849usize),
        ("app.bsky.feed.post", 327_190),
    ] {
        let users = measured[name].1;
        println!("{name}: {users} distinct creators at 10M (real {real})");
        let ratio = users as f64 / real as f64;
        assert!((0.85..=1.15).contains(&ratio), "{name}: {users} vs {real}");
    }
}

#[test]
fn deterministic_per_seed() {
    let a = generate(20_000, 9);
    assert_eq!(a, generate(20_000, 9));
    assert_ne!(a, generate(20_000, 10));
    // A prefix of a longer run is the shorter run.
    let longer = generate(30_000, 9);
    assert_eq!(&longer[..a.len()], &a[..]);
}

/// Takes ~1 minute in release: run with `--ignored`.
#[test]
#[ignore]
fn ten_million_documents_end_in_hour_eighteen() {
    let mut generator = BlueskyGenerator::new(&BlueskyOptions {
        seed: 1,
        docs: 10_000_000,
        quirks: false,
    });
    let mut line = Vec::new();
    let mut last = Vec::new();
    let mut n = 0u64;
    while {
        line.clear();
        generator.next_document(&mut line)
    } {
        n += 1;
        if n == 1_000_000 || n == 10_000_000 {
            last.push(
                serde_json::from_slice::<Value>(&line).unwrap()["time_us"]
                    .as_u64()
                    .unwrap(),
            );
        }
    }
    let hour = |t: u64| (t / 1_000_000 / 3600) % 24;
    let minutes_first_million = (last[0] - START_TIME_US) as f64 / 60e6;
    println!(
        "1M docs: {minutes_first_million:.1} min; 10M docs end at hour {}",
        hour(last[1])
    );
    assert!((33.0..34.2).contains(&minutes_first_million));
    assert_eq!(hour(last[0]), 16);
    assert_eq!(hour(last[1]), 18);
}
