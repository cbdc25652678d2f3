//! Calibration of the GH Archive generator against the real 2015-01-01 sample, and the shapes the
//! GH Archive queries rely on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use strata_datagen::gharchive::{GhArchiveOptions, TYPES, write_gharchive};

fn generate(docs: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_gharchive(&GhArchiveOptions { seed, docs }, &mut out).unwrap();
    out
}

fn parse(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

#[test]
fn mix_and_shapes_follow_the_real_sample() {
    let docs = 20_000u64;
    let bytes = generate(docs, 1);
    println!(
        "bytes/doc: {:.0} (real sample: 2,370)",
        bytes.len() as f64 / docs as f64
    );
    let events = parse(&bytes);
    assert_eq!(events.len() as u64, docs);
    let mut types: HashMap<String, u64> = HashMap::new();
    let mut opened_per_repo: HashMap<String, u64> = HashMap::new();
    let mut actions: HashMap<(String, String), u64> = HashMap::new();
    let mut with_org = 0;
    let mut previous_id = 0u64;
    for (line, v) in bytes.split(|b| *b == b'\n').zip(&events) {
        let text = std::str::from_utf8(line).unwrap();
        assert!(text.starts_with("{\"id\":\""), "{text}");
        let id: u64 = v["id"].as_str().unwrap().parse().unwrap();
        assert!(id > previous_id);
        previous_id = id;
        let kind = v["type"].as_str().unwrap();
        *types.entry(kind.to_owned()).or_default() += 1;
        for key in ["id", "login", "gravatar_id", "url", "avatar_url"] {
            assert!(!v["actor"][key].is_null(), "actor.{key}");
        }
        assert!(v["actor"]["id"].is_u64());
        assert!(v["repo"]["id"].is_u64() && v["repo"]["name"].as_str().unwrap().contains('/'));
        assert_eq!(v["public"], Value::Bool(true));
        assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
        if let Some(org) = v.get("org") {
            with_org += 1;
            let owner = v["repo"]["name"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap();
            assert_eq!(org["login"].as_str(), Some(owner));
        }
        let payload = &v["payload"];
        if let Some(action) = payload["action"].as_str() {
            *actions
                .entry((kind.to_owned(), action.to_owned()))
                .or_default() += 1;
        }
        match kind {
            "PushEvent" => {
                assert!(payload["issue"]["comments"].is_null());
                let size = payload["size"].as_u64().unwrap();
                let commits = payload["commits"].as_array().unwrap();
                assert_eq!(commits.len() as u64, size.min(20));
                if let Some(last) = commits.last() {
                    assert_eq!(last["sha"], payload["head"]);
                }
            }
            "IssuesEvent" => {
                assert!(payload["issue"]["comments"].is_u64());
                assert!(payload["issue"]["user"]["login"].is_string());
                if payload["action"] == "opened" {
                    assert_eq!(payload["issue"]["state"], "open");
                    *opened_per_repo
                        .entry(v["repo"]["name"].as_str().unwrap().to_owned())
                        .or_default() += 1;
                }
            }
            "IssueCommentEvent" => {
                assert!(payload["issue"]["comments"].is_u64());
                assert!(payload["comment"]["body"].is_string());
            }
            "PullRequestEvent" => {
                let pr = &payload["pull_request"];
                assert_eq!(pr["number"], payload["number"]);
                assert_eq!(pr["base"]["repo"]["full_name"], v["repo"]["name"]);
                assert!(pr["head"]["repo"]["owner"]["login"].is_string());
                assert!(pr["merged"].is_boolean());
            }
            "ForkEvent" => assert_eq!(payload["forkee"]["fork"], Value::Bool(true)),
            "CreateEvent" => assert!(payload["ref_type"].is_string()),
            "WatchEvent" => assert_eq!(payload["action"], "started"),
            _ => {}
        }
    }
    println!("types: {types:?}");
    println!("actions: {actions:?}");
    for (name, per_thousand) in TYPES {
        let p = per_thousand as f64 / 1000.0;
        let expected = p * docs as f64;
        let sigma = (docs as f64 * p * (1.0 - p)).sqrt();
        let observed = types.get(name).copied().unwrap_or(0) as f64;
        assert!(
            (observed - expected).abs() <= 5.0 * sigma + 1.0,
            "{name}: {observed} vs {expected}"
        );
    }
    // 39 of 57 IssuesEvents in the sample are "opened".
    let opened = actions[&("IssuesEvent".to_owned(), "opened".to_owned())] as f64;
    assert!((opened / types["IssuesEvent"] as f64 - 39.0 / 57.0).abs() < 0.06);
    let org_share = f64::from(with_org) / docs as f64;
    println!("org share: {org_share:.3} (real sample: 0.26)");
    assert!((0.20..0.32).contains(&org_share), "{org_share}");
    // The workload's "IssuesEvent opened per repo" has a skewed answer with a clear top.
    let top = opened_per_repo.values().max().copied().unwrap_or(0);
    assert!(top >= 3, "{top}");
}

#[test]
fn actors_and_repositories_are_skewed_like_the_sample() {
    // The real 1,000 events have 678 distinct actors and 717 distinct repositories, the busiest
    // actor and repository with 10 events each.
    let mut actor_counts = Vec::new();
    let mut repo_counts = Vec::new();
    for seed in 0..10 {
        let events = parse(&generate(1000, seed));
        let actors: HashSet<_> = events.iter().map(|v| v["actor"]["login"].clone()).collect();
        let repos: HashSet<_> = events.iter().map(|v| v["repo"]["id"].clone()).collect();
        actor_counts.push(actors.len());
        repo_counts.push(repos.len());
    }
    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
    println!(
        "distinct per 1,000 events: actors {:.0} (real 678), repos {:.0} (real 717)",
        mean(&actor_counts),
        mean(&repo_counts)
    );
    assert!((0.85..1.15).contains(&(mean(&actor_counts) / 678.0)));
    assert!((0.85..1.15).contains(&(mean(&repo_counts) / 717.0)));

    let events = parse(&generate(50_000, 3));
    let mut per_actor: HashMap<String, u64> = HashMap::new();
    let mut names_per_repo_id: HashMap<u64, HashSet<String>> = HashMap::new();
    for v in &events {
        *per_actor
            .entry(v["actor"]["login"].as_str().unwrap().to_owned())
            .or_default() += 1;
        names_per_repo_id
            .entry(v["repo"]["id"].as_u64().unwrap())
            .or_default()
            .insert(v["repo"]["name"].as_str().unwrap().to_owned());
    }
    let mut top: Vec<u64> = per_actor.values().copied().collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    println!("top 10 actors of 50k events: {:?}", &top[..10]);
    assert!(top[0] > 100 && top[0] < 2_500, "{}", top[0]);
    // A repository id always carries the same name.
    assert!(names_per_repo_id.values().all(|names| names.len() == 1));
}

#[test]
fn deterministic_per_seed() {
    let a = generate(5_000, 4);
    assert_eq!(a, generate(5_000, 4));
    assert_ne!(a, generate(5_000, 5));
}
