//! GitHub Archive events as of 2015, calibrated to the real 2015-01-01 sample
//! (`tests/data/gharchive_2015-01-01_sample.ndjson`): the event-type mix of its 1,000 events,
//! actors and repositories drawn with a power-law skew (a few bots and popular repositories
//! produce much of the stream), ~26% of events carrying an `org`, and per-type payloads with the
//! fields the GH Archive queries use (`payload.action`, `payload.issue.comments`, push commits).

use std::io::Write;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::text::{
    cumulative, iso_seconds, key, pick, push_json_string, push_u64, random_base32, skewed,
};
use crate::{DatagenError, GenStats};

/// (event type, events per 1,000 in the real sample).
const TYPES: [(&str, u64); 13] = [
    ("PushEvent", 596),
    ("IssueCommentEvent", 86),
    ("CreateEvent", 81),
    ("WatchEvent", 74),
    ("IssuesEvent", 57),
    ("PullRequestEvent", 26),
    ("ForkEvent", 25),
    ("PullRequestReviewCommentEvent", 20),
    ("GollumEvent", 18),
    ("DeleteEvent", 8),
    ("CommitCommentEvent", 5),
    ("ReleaseEvent", 3),
    ("MemberEvent", 1),
];
const START_SECS: u64 = 1_420_070_400; // 2015-01-01T00:00:00Z
const ACTORS: u64 = 3_000_000;
const REPOS: u64 = 5_000_000;
const WORDS: [&str; 16] = [
    "fix", "add", "update", "readme", "bug", "docs", "test", "refactor", "build", "release",
    "merge", "branch", "typo", "feature", "api", "config",
];

fn login(id: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"user");
    push_u64(out, id);
}

fn repo_name(id: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"org");
    push_u64(out, id % 400_000);
    out.extend_from_slice(b"/repo");
    push_u64(out, id);
}

fn words(rng: &mut SmallRng, range: std::ops::Range<usize>) -> String {
    let n = rng.random_range(range);
    (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

fn sha(rng: &mut SmallRng, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for _ in 0..40 {
        out.push(HEX[rng.random_range(0..16)]);
    }
    out.push(b'"');
}

fn issue(rng: &mut SmallRng, repo: u64, out: &mut Vec<u8>) {
    let number = rng.random_range(1..5_000u64);
    out.extend_from_slice(b"{\"url\":\"https://api.github.com/repos/");
    repo_name(repo, out);
    out.extend_from_slice(b"/issues/");
    push_u64(out, number);
    out.extend_from_slice(b"\",\"id\":");
    push_u64(out, rng.random_range(40_000_000..53_000_000u64));
    out.extend_from_slice(b",\"number\":");
    push_u64(out, number);
    out.extend_from_slice(b",\"title\":");
    let title = words(rng, 2..8);
    push_json_string(out, &title);
    out.extend_from_slice(b",\"user\":{\"login\":\"");
    login(skewed(rng, ACTORS, 3.0), out);
    out.extend_from_slice(b"\"},\"labels\":[],\"state\":\"open\",\"locked\":false,\"assignee\":null,\"milestone\":null,\"comments\":");
    push_u64(out, skewed(rng, 60, 3.0));
    out.extend_from_slice(b",\"created_at\":\"2014-12-31T20:00:00Z\",\"closed_at\":null,\"body\":");
    let body = words(rng, 5..40);
    push_json_string(out, &body);
    out.push(b'}');
}

fn payload(rng: &mut SmallRng, event: &str, repo: u64, out: &mut Vec<u8>) {
    match event {
        "PushEvent" => {
            let size = 1 + skewed(rng, 6, 2.0);
            out.extend_from_slice(b"{\"push_id\":");
            push_u64(out, rng.random_range(536_000_000..537_000_000u64));
            out.extend_from_slice(b",\"size\":");
            push_u64(out, size);
            out.extend_from_slice(b",\"distinct_size\":");
            push_u64(out, size);
            out.extend_from_slice(b",\"ref\":\"refs/heads/master\",\"head\":");
            sha(rng, out);
            out.extend_from_slice(b",\"before\":");
            sha(rng, out);
            out.extend_from_slice(b",\"commits\":[");
            for i in 0..size {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"sha\":");
                sha(rng, out);
                out.extend_from_slice(
                    b",\"author\":{\"email\":\"dev@example.com\",\"name\":\"Dev\"},\"message\":",
                );
                let msg = words(rng, 2..10);
                push_json_string(out, &msg);
                out.extend_from_slice(b",\"distinct\":true}");
            }
            out.extend_from_slice(b"]}");
        }
        "IssuesEvent" => {
            let action = if rng.random_range(0..57) < 39 {
                "opened"
            } else {
                "closed"
            };
            out.extend_from_slice(b"{\"action\":");
            push_json_string(out, action);
            out.extend_from_slice(b",\"issue\":");
            issue(rng, repo, out);
            out.push(b'}');
        }
        "IssueCommentEvent" => {
            out.extend_from_slice(b"{\"action\":\"created\",\"issue\":");
            issue(rng, repo, out);
            out.extend_from_slice(b",\"comment\":{\"id\":");
            push_u64(out, rng.random_range(68_000_000..69_000_000u64));
            out.extend_from_slice(b",\"body\":");
            let body = words(rng, 3..30);
            push_json_string(out, &body);
            out.extend_from_slice(b"}}");
        }
        "CreateEvent" | "DeleteEvent" => {
            let ref_type = ["branch", "tag", "repository"][rng.random_range(0..3)];
            out.extend_from_slice(b"{\"ref\":\"");
            random_base32(rng, 8, out);
            out.extend_from_slice(b"\",\"ref_type\":");
            push_json_string(out, ref_type);
            if event == "CreateEvent" {
                out.extend_from_slice(b",\"master_branch\":\"master\",\"description\":");
                let d = words(rng, 6..7);
                push_json_string(out, &d);
            }
            out.extend_from_slice(b",\"pusher_type\":\"user\"}");
        }
        "WatchEvent" => out.extend_from_slice(b"{\"action\":\"started\"}"),
        "PullRequestEvent" | "PullRequestReviewCommentEvent" => {
            let action = if event == "PullRequestEvent" {
                ["opened", "closed", "reopened"][rng.random_range(0..3)]
            } else {
                "created"
            };
            out.extend_from_slice(b"{\"action\":");
            push_json_string(out, action);
            out.extend_from_slice(b",\"number\":");
            push_u64(out, rng.random_range(1..4_000u64));
            out.extend_from_slice(b",\"pull_request\":{\"id\":");
            push_u64(out, rng.random_range(26_000_000..27_000_000u64));
            out.extend_from_slice(b",\"state\":\"open\",\"title\":");
            let t = words(rng, 5..6);
            push_json_string(out, &t);
            out.extend_from_slice(b",\"commits\":");
            push_u64(out, 1 + skewed(rng, 20, 3.0));
            out.extend_from_slice(b",\"additions\":");
            push_u64(out, skewed(rng, 2_000, 3.0));
            out.extend_from_slice(b",\"deletions\":");
            push_u64(out, skewed(rng, 1_000, 3.0));
            out.extend_from_slice(b",\"merged\":false}}");
        }
        "ForkEvent" => {
            out.extend_from_slice(b"{\"forkee\":{\"id\":");
            push_u64(out, rng.random_range(28_000_000..29_000_000u64));
            out.extend_from_slice(
                b",\"name\":\"fork\",\"private\":false,\"fork\":true,\"stargazers_count\":0}}",
            );
        }
        "GollumEvent" => {
            out.extend_from_slice(b"{\"pages\":[{\"page_name\":\"Home\",\"title\":\"Home\",\"action\":\"edited\",\"sha\":");
            sha(rng, out);
            out.extend_from_slice(b"}]}");
        }
        "CommitCommentEvent" => {
            out.extend_from_slice(b"{\"comment\":{\"commit_id\":");
            sha(rng, out);
            out.extend_from_slice(b",\"body\":");
            let b = words(rng, 8..9);
            push_json_string(out, &b);
            out.extend_from_slice(b"}}");
        }
        "ReleaseEvent" => {
            out.extend_from_slice(b"{\"action\":\"published\",\"release\":{\"tag_name\":\"v1.");
            push_u64(out, rng.random_range(0..30u64));
            out.extend_from_slice(b"\",\"draft\":false,\"prerelease\":false}}");
        }
        _ => {
            out.extend_from_slice(b"{\"member\":{\"login\":\"");
            login(skewed(rng, ACTORS, 2.0), out);
            out.extend_from_slice(b"\"},\"action\":\"added\"}");
        }
    }
}

/// Writes `docs` GH Archive-like events as NDJSON.
pub fn write_gharchive(
    seed: u64,
    docs: u64,
    out: &mut dyn Write,
) -> Result<GenStats, DatagenError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let weights = cumulative(&TYPES.map(|t| t.1));
    let mut buffer = Vec::with_capacity(1 << 20);
    let mut stats = GenStats::default();
    let mut id = 2_489_395_767u64;
    for i in 0..docs {
        let event = TYPES[pick(&mut rng, &weights)].0;
        let actor = skewed(&mut rng, ACTORS, 4.0);
        let repo = skewed(&mut rng, REPOS, 4.0);
        id += 1 + rng.random_range(0..3u64);
        buffer.extend_from_slice(b"{\"id\":\"");
        push_u64(&mut buffer, id);
        buffer.extend_from_slice(b"\",");
        key(&mut buffer, "type");
        push_json_string(&mut buffer, event);
        buffer.extend_from_slice(b",\"actor\":{\"id\":");
        push_u64(&mut buffer, actor);
        buffer.extend_from_slice(b",\"login\":\"");
        login(actor, &mut buffer);
        buffer
            .extend_from_slice(b"\",\"gravatar_id\":\"\",\"url\":\"https://api.github.com/users/");
        login(actor, &mut buffer);
        buffer.extend_from_slice(b"\",\"avatar_url\":\"https://avatars.githubusercontent.com/u/");
        push_u64(&mut buffer, actor);
        buffer.extend_from_slice(b"?\"},\"repo\":{\"id\":");
        push_u64(&mut buffer, repo);
        buffer.extend_from_slice(b",\"name\":\"");
        repo_name(repo, &mut buffer);
        buffer.extend_from_slice(b"\",\"url\":\"https://api.github.com/repos/");
        repo_name(repo, &mut buffer);
        buffer.extend_from_slice(b"\"},\"payload\":");
        payload(&mut rng, event, repo, &mut buffer);
        buffer.extend_from_slice(b",\"public\":true,\"created_at\":\"");
        // The sample covers one hour; spread documents at ~30 events per second.
        iso_seconds(START_SECS + 3600 + i / 30, &mut buffer);
        buffer.push(b'"');
        if rng.random_range(0..100) < 26 {
            buffer.extend_from_slice(b",\"org\":{\"id\":");
            push_u64(&mut buffer, repo % 400_000);
            buffer.extend_from_slice(b",\"login\":\"org");
            push_u64(&mut buffer, repo % 400_000);
            buffer.extend_from_slice(b"\"}");
        }
        buffer.extend_from_slice(b"}\n");
        stats.documents += 1;
        if buffer.len() >= 1 << 20 {
            out.write_all(&buffer)?;
            stats.bytes += buffer.len() as u64;
            buffer.clear();
        }
    }
    out.write_all(&buffer)?;
    stats.bytes += buffer.len() as u64;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::Value;

    use super::*;

    #[test]
    fn mix_and_shapes_follow_the_real_sample() {
        let mut out = Vec::new();
        write_gharchive(1, 20_000, &mut out).unwrap();
        let mut types: HashMap<String, u64> = HashMap::new();
        let mut opened = 0;
        for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).unwrap();
            *types
                .entry(v["type"].as_str().unwrap().to_owned())
                .or_default() += 1;
            assert!(v["actor"]["login"].is_string() && v["repo"]["name"].is_string());
            if v["type"] == "IssuesEvent" && v["payload"]["action"] == "opened" {
                opened += 1;
                assert!(v["payload"]["issue"]["comments"].is_u64());
            }
        }
        let share = |t: &str| types[t] as f64 / 20_000.0;
        assert!((share("PushEvent") - 0.596).abs() < 0.02);
        assert!((share("IssueCommentEvent") - 0.086).abs() < 0.01);
        assert!(opened > 0);
        let mut again = Vec::new();
        write_gharchive(1, 20_000, &mut again).unwrap();
        assert_eq!(out, again);
    }
}
