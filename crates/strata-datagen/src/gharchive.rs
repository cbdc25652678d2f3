//! GitHub Archive events as of 2015 (NDJSON), calibrated to the real 2015-01-01 sample
//! (`tests/data/gharchive_2015-01-01_sample.ndjson`, 1,000 events).
//!
//! Owns: the world of accounts (users and organisations) and repositories, which events touch
//! which repositories, and the payload shape of every event type.
//!
//! Invariants:
//! - Same options ⇒ byte-identical output; every line is one JSON object with the real key order
//!   (`id` as a string, `type`, `actor`, `repo`, `payload`, `public`, `created_at`, then `org`
//!   when the repository belongs to an organisation).
//! - Accounts and repositories are pure functions of their numeric key: the same repository always
//!   has the same id, name, owner and description, so per-repository and per-actor counts are
//!   meaningful. User and organisation logins are disjoint, ids unique.
//!
//! Calibration from the sample: the event-type mix of [`TYPES`]; actions (IssuesEvent 39 opened /
//! 18 closed, PullRequestEvent 16 opened / 10 closed); push sizes; 26% of events carrying `org`;
//! actors skewed so 1,000 events have ~680 distinct actors with the busiest at ~1% (bots); ~720
//! distinct repositories, most pushes going to the actor's own repositories and stars, forks,
//! issues and pull requests concentrating on popular ones; ~2.2 events per second of
//! `created_at` and ids growing ~3 per event.

use std::io::Write;

use crate::corpus;
use crate::json::{Escape, push_hex_bits, push_iso_seconds, push_str, push_u64};
use crate::names::{push_login, push_name, push_org_login};
use crate::rng::{Rng, Zipf, mix64, permute, unit_of};
use crate::{DatagenError, GenStats};

/// (event type, events per 1,000 in the real sample).
pub const TYPES: [(&str, u64); 13] = [
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

const PUSH: usize = 0;
const ISSUE_COMMENT: usize = 1;
const CREATE: usize = 2;
const WATCH: usize = 3;
const ISSUES: usize = 4;
const PULL_REQUEST: usize = 5;
const FORK: usize = 6;
const REVIEW_COMMENT: usize = 7;
const GOLLUM: usize = 8;
const DELETE: usize = 9;
const COMMIT_COMMENT: usize = 10;
const RELEASE: usize = 11;

/// 2015-01-01T01:00:00Z, the sample's first event.
const START_SECS: u64 = 1_420_074_000;
const FIRST_EVENT_ID: u64 = 2_489_395_767;
const FIRST_PUSH_ID: u64 = 536_752_122;

/// Users are ranks `0..2^21`; a user's own repositories are keys `user * 8 + k`, popular
/// repositories keys `2^24 + rank`: all below 2^25, so [`permute`] over 25 bits turns keys into
/// unique repository ids in GitHub's 2015 range (up to ~33M).
const USERS: u64 = 1 << 21;
const ORGS: u64 = 200_000;
const POPULAR_REPOS: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct GhArchiveOptions {
    pub seed: u64,
    pub docs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Account {
    User(u64),
    Org(u64),
}

impl Account {
    fn id(self) -> u64 {
        // Users and organisations share GitHub's id space; disjoint keys keep ids unique.
        match self {
            Account::User(u) => permute(u, 25) + 1,
            Account::Org(o) => permute((1 << 24) + o, 25) + 1,
        }
    }

    fn push_login(self, out: &mut Vec<u8>) {
        match self {
            Account::User(u) => push_login(out, u),
            Account::Org(o) => push_org_login(out, o),
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Account::User(_) => "User",
            Account::Org(_) => "Organization",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Repo {
    key: u64,
    owner: Account,
    /// Forks keep the name of the repository they fork.
    name_key: u64,
}

impl Repo {
    fn id(self) -> u64 {
        permute(self.key, 25) + 1
    }

    fn push_name(self, out: &mut Vec<u8>) {
        let h = mix64(self.name_key ^ 0x4e41_4d45);
        let words = corpus::REPO_WORDS;
        let a = words[(h % words.len() as u64) as usize];
        let b = words[((h >> 16) % words.len() as u64) as usize];
        match (h >> 32) % 10 {
            0..4 => out.extend_from_slice(a.as_bytes()),
            4..6 => {
                out.extend_from_slice(a.as_bytes());
                out.push(b'-');
                out.extend_from_slice(b.as_bytes());
            }
            6 => {
                for word in [a, b] {
                    let start = out.len();
                    out.extend_from_slice(word.as_bytes());
                    out[start] = out[start].to_ascii_uppercase();
                }
            }
            7 => {
                out.extend_from_slice(a.as_bytes());
                out.extend_from_slice(
                    [".js", ".py", ".vim", ".github.io"][((h >> 40) % 4) as usize].as_bytes(),
                );
            }
            8 => {
                out.extend_from_slice(a.as_bytes());
                push_u64(out, (h >> 40) % 30);
            }
            _ => {
                out.extend_from_slice(a.as_bytes());
                out.push(b'_');
                push_name(out, (h >> 44) % 4096);
            }
        }
    }

    fn push_full_name(self, out: &mut Vec<u8>) {
        self.owner.push_login(out);
        out.push(b'/');
        self.push_name(out);
    }

    fn popularity(self) -> u64 {
        if self.key >= 1 << 24 {
            // Stars fall off with popularity rank.
            100_000 / ((self.key - (1 << 24)) / 4 + 40)
        } else {
            mix64(self.key) % 8
        }
    }
}

/// The fixed parts of the world: who exists and how popular they are.
#[derive(Debug, Clone)]
struct World {
    actors: Zipf,
    orgs: Zipf,
    popular: Zipf,
}

impl World {
    fn own_repo(&self, user: u64, k: u64) -> Repo {
        let key = user * 8 + k;
        let h = mix64(key ^ 0x0e9);
        // About a fifth of the repositories people push to belong to an organisation.
        let owner = if h % 100 < 21 {
            Account::Org(self.orgs.at(unit_of(key ^ 0x0a)))
        } else {
            Account::User(user)
        };
        Repo {
            key,
            owner,
            name_key: key,
        }
    }

    fn popular_repo(&self, rank: u64) -> Repo {
        let key = (1 << 24) + rank;
        let owner = if mix64(key ^ 0x0b1) % 100 < 40 {
            Account::Org(self.orgs.at(unit_of(key ^ 0x0b2)))
        } else {
            Account::User(self.actors.at(unit_of(key ^ 0x0b3)))
        };
        Repo {
            key,
            owner,
            name_key: key,
        }
    }
}

/// What every payload writer needs to know about its event.
struct Event {
    secs: u64,
    /// The acting user's rank.
    actor: u64,
    repo: Repo,
    /// `owner/name` of `repo`, built once per event.
    full_name: Vec<u8>,
}

/// Streams GH Archive-like events; [`write_gharchive`] drives it.
#[derive(Debug, Clone)]
pub struct GhArchiveGenerator {
    rng: Rng,
    world: World,
    docs: u64,
    index: u64,
    millis: u64,
    event_id: u64,
    push_id: u64,
    type_cdf: [u64; 13],
    push_sizes: Vec<(u64, u64)>,
}

/// Push sizes of the sample (size, pushes): mostly single commits, a long tail.
const PUSH_SIZES: [(u64, u64); 22] = [
    (0, 7),
    (1, 474),
    (2, 54),
    (3, 15),
    (4, 10),
    (5, 5),
    (6, 9),
    (7, 2),
    (9, 2),
    (10, 2),
    (12, 2),
    (14, 2),
    (16, 1),
    (22, 1),
    (24, 2),
    (30, 1),
    (33, 1),
    (42, 1),
    (53, 1),
    (56, 1),
    (125, 1),
    (126, 1),
];

impl GhArchiveGenerator {
    pub fn new(options: &GhArchiveOptions) -> Self {
        let mut type_cdf = [0u64; 13];
        let mut total = 0;
        for (slot, t) in type_cdf.iter_mut().zip(TYPES.iter()) {
            total += t.1;
            *slot = total;
        }
        let mut total = 0;
        let push_sizes = PUSH_SIZES
            .iter()
            .map(|&(size, n)| {
                total += n;
                (total, size)
            })
            .collect();
        GhArchiveGenerator {
            rng: Rng::new(options.seed),
            world: World {
                actors: Zipf::new(USERS, 1.21, 20.0),
                orgs: Zipf::new(ORGS, 1.0, 5.0),
                popular: Zipf::new(POPULAR_REPOS, 1.3, 8.0),
            },
            docs: options.docs,
            index: 0,
            millis: START_SECS * 1000,
            event_id: FIRST_EVENT_ID,
            push_id: FIRST_PUSH_ID,
            type_cdf,
            push_sizes,
        }
    }

    /// Appends the next event and a newline to `out`; false once `docs` were produced.
    pub fn next_document(&mut self, out: &mut Vec<u8>) -> bool {
        if self.index >= self.docs {
            return false;
        }
        if self.index > 0 {
            self.millis += self.rng.below(919);
            self.event_id += 1 + self.rng.below(5) + u64::from(self.rng.below(4) == 0);
        }
        self.index += 1;
        let x = self.rng.below(1000);
        let kind = self
            .type_cdf
            .partition_point(|&e| e <= x)
            .min(TYPES.len() - 1);
        let actor = self.world.actors.sample(&mut self.rng);
        let repo = self.pick_repo(kind, actor);
        let mut full_name = Vec::with_capacity(48);
        repo.push_full_name(&mut full_name);
        let event = Event {
            secs: self.millis / 1000,
            actor,
            repo,
            full_name,
        };

        out.extend_from_slice(b"{\"id\":\"");
        push_u64(out, self.event_id);
        out.extend_from_slice(b"\",\"type\":\"");
        out.extend_from_slice(TYPES[kind].0.as_bytes());
        out.extend_from_slice(b"\",\"actor\":");
        short_account(out, Account::User(event.actor), "users");
        out.extend_from_slice(b",\"repo\":{\"id\":");
        push_u64(out, repo.id());
        out.extend_from_slice(b",\"name\":\"");
        out.extend_from_slice(&event.full_name);
        out.extend_from_slice(b"\",\"url\":\"https://api.github.com/repos/");
        out.extend_from_slice(&event.full_name);
        out.extend_from_slice(b"\"},\"payload\":");
        self.payload(out, kind, &event);
        out.extend_from_slice(b",\"public\":true,\"created_at\":\"");
        push_iso_seconds(out, event.secs);
        out.push(b'"');
        if let Account::Org(_) = repo.owner {
            out.extend_from_slice(b",\"org\":");
            short_account(out, repo.owner, "orgs");
        }
        out.extend_from_slice(b"}\n");
        true
    }

    fn pick_repo(&mut self, kind: usize, actor: u64) -> Repo {
        // Percent of events of each type that touch a popular repository rather than one of the
        // actor's own: people push to their own code and star, fork and discuss popular code.
        let popular_percent = match kind {
            WATCH | FORK => 100,
            ISSUES | ISSUE_COMMENT | PULL_REQUEST | REVIEW_COMMENT | COMMIT_COMMENT => 70,
            _ => 12,
        };
        if self.rng.percent(popular_percent) {
            let rank = self.world.popular.sample(&mut self.rng);
            self.world.popular_repo(rank)
        } else {
            // Most people work on one or two repositories at a time (k = 7 is kept for forks).
            let k = match self.rng.below(100) {
                0..72 => 0,
                72..87 => 1,
                87..94 => 2,
                _ => 3 + self.rng.below(4),
            };
            self.world.own_repo(actor, k)
        }
    }

    fn payload(&mut self, out: &mut Vec<u8>, kind: usize, event: &Event) {
        let rng = &mut self.rng;
        match kind {
            PUSH => {
                let x = rng.below(596);
                let i = self.push_sizes.partition_point(|&(edge, _)| edge <= x);
                let size = self.push_sizes.get(i).map_or(1, |&(_, s)| s);
                self.push_id += 1 + rng.below(3);
                push_payload(out, rng, event, self.push_id, size);
            }
            ISSUE_COMMENT => {
                out.extend_from_slice(b"{\"action\":\"created\",\"issue\":");
                let state = if rng.percent(73) { "open" } else { "closed" };
                let comments = 1 + skewed_count(rng, 40);
                let number = issue_number(rng, event.repo);
                let with_pr = rng.percent(24);
                issue(out, rng, event, number, state, comments, with_pr);
                out.extend_from_slice(b",\"comment\":{\"url\":\"https://api.github.com/repos/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/issues/comments/");
                let id = 68_477_208 + self.index / 12 + rng.below(10);
                push_u64(out, id);
                out.extend_from_slice(b"\",\"html_url\":\"https://github.com/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/issues/");
                push_u64(out, number);
                out.extend_from_slice(b"#issuecomment-");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"issue_url\":\"https://api.github.com/repos/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/issues/");
                push_u64(out, number);
                out.extend_from_slice(b"\",\"id\":");
                push_u64(out, id);
                out.extend_from_slice(b",\"user\":");
                user_object(out, Account::User(event.actor));
                times(out, &["created_at", "updated_at"], event.secs);
                out.extend_from_slice(b",\"body\":");
                push_str(out, rng.pick(corpus::COMMENTS), Escape::Minimal);
                out.extend_from_slice(b"}}");
            }
            CREATE => {
                let (ref_type, reference) = match rng.below(81) {
                    0..41 => ("branch", Some(rng.pick(corpus::BRANCHES))),
                    41..72 => ("repository", None),
                    _ => (
                        "tag",
                        Some(rng.pick(&["v1.0.0", "v0.1", "0.2.3", "v2.1.0", "1.0"])),
                    ),
                };
                out.extend_from_slice(b"{\"ref\":");
                match reference {
                    Some(r) => push_str(out, r, Escape::Minimal),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"ref_type\":\"");
                out.extend_from_slice(ref_type.as_bytes());
                out.extend_from_slice(b"\",\"master_branch\":\"master\",\"description\":");
                let d = description(event.repo);
                if d.is_empty() {
                    out.extend_from_slice(b"null");
                } else {
                    push_str(out, d, Escape::Minimal);
                }
                out.extend_from_slice(b",\"pusher_type\":\"user\"}");
            }
            WATCH => out.extend_from_slice(b"{\"action\":\"started\"}"),
            ISSUES => {
                let (action, state) = match rng.below(100) {
                    0..68 => ("opened", "open"),
                    68..98 => ("closed", "closed"),
                    _ => ("reopened", "open"),
                };
                out.extend_from_slice(b"{\"action\":\"");
                out.extend_from_slice(action.as_bytes());
                out.extend_from_slice(b"\",\"issue\":");
                let comments = if action == "opened" {
                    0
                } else {
                    skewed_count(rng, 30)
                };
                let number = issue_number(rng, event.repo);
                issue(out, rng, event, number, state, comments, false);
                out.push(b'}');
            }
            PULL_REQUEST => {
                let action = match rng.below(100) {
                    0..60 => "opened",
                    60..98 => "closed",
                    _ => "reopened",
                };
                let number = issue_number(rng, event.repo);
                out.extend_from_slice(b"{\"action\":\"");
                out.extend_from_slice(action.as_bytes());
                out.extend_from_slice(b"\",\"number\":");
                push_u64(out, number);
                out.extend_from_slice(b",\"pull_request\":");
                let pr_id = 26_684_124 + self.index / 40 + rng.below(100);
                pull_request(out, rng, &self.world, event, number, pr_id, action, true);
                out.push(b'}');
            }
            FORK => {
                out.extend_from_slice(b"{\"forkee\":");
                let fork = Repo {
                    key: event.actor * 8 + 7,
                    owner: Account::User(event.actor),
                    name_key: event.repo.name_key,
                };
                repo_object(out, fork, event.secs, true);
                out.pop();
                out.extend_from_slice(b",\"public\":true}}");
            }
            REVIEW_COMMENT => {
                let number = issue_number(rng, event.repo);
                let id = 22_397_251 + self.index / 50 + rng.below(10);
                out.extend_from_slice(
                    b"{\"action\":\"created\",\"comment\":{\"url\":\"https://api.github.com/repos/",
                );
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pulls/comments/");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"id\":");
                push_u64(out, id);
                out.extend_from_slice(b",\"diff_hunk\":");
                push_str(out, rng.pick(corpus::DIFF_HUNKS), Escape::Minimal);
                out.extend_from_slice(b",\"path\":");
                push_str(out, rng.pick(corpus::FILE_PATHS), Escape::Minimal);
                let position = 1 + rng.below(60);
                out.extend_from_slice(b",\"position\":");
                push_u64(out, position);
                out.extend_from_slice(b",\"original_position\":");
                push_u64(out, position);
                out.extend_from_slice(b",\"commit_id\":\"");
                let commit = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
                push_hex_bits(out, &commit, 40);
                out.extend_from_slice(b"\",\"original_commit_id\":\"");
                push_hex_bits(out, &commit, 40);
                out.extend_from_slice(b"\",\"user\":");
                user_object(out, Account::User(event.actor));
                out.extend_from_slice(b",\"body\":");
                push_str(out, rng.pick(corpus::COMMENTS), Escape::Minimal);
                times(out, &["created_at", "updated_at"], event.secs);
                out.extend_from_slice(b",\"html_url\":\"https://github.com/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pull/");
                push_u64(out, number);
                out.extend_from_slice(b"#discussion_r");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"pull_request_url\":\"https://api.github.com/repos/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pulls/");
                push_u64(out, number);
                out.extend_from_slice(
                    b"\",\"_links\":{\"self\":{\"href\":\"https://api.github.com/repos/",
                );
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pulls/comments/");
                push_u64(out, id);
                out.extend_from_slice(b"\"},\"html\":{\"href\":\"https://github.com/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pull/");
                push_u64(out, number);
                out.extend_from_slice(b"#discussion_r");
                push_u64(out, id);
                out.extend_from_slice(
                    b"\"},\"pull_request\":{\"href\":\"https://api.github.com/repos/",
                );
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/pulls/");
                push_u64(out, number);
                out.extend_from_slice(b"\"}}},\"pull_request\":");
                let pr_id = 26_684_124 - rng.below(2_000_000);
                pull_request(out, rng, &self.world, event, number, pr_id, "opened", false);
                out.push(b'}');
            }
            GOLLUM => {
                out.extend_from_slice(b"{\"pages\":[");
                for i in 0..1 + u64::from(rng.percent(15)) {
                    if i > 0 {
                        out.push(b',');
                    }
                    let page = rng.pick(corpus::WIKI_PAGES);
                    out.extend_from_slice(b"{\"page_name\":\"");
                    out.extend_from_slice(page.as_bytes());
                    out.extend_from_slice(b"\",\"title\":\"");
                    out.extend_from_slice(page.replace('-', " ").as_bytes());
                    out.extend_from_slice(b"\",\"summary\":null,\"action\":\"");
                    out.extend_from_slice(if rng.percent(70) {
                        b"edited"
                    } else {
                        b"created"
                    });
                    out.extend_from_slice(b"\",\"sha\":\"");
                    push_hex_bits(out, &[rng.next_u64(), rng.next_u64(), rng.next_u64()], 40);
                    out.extend_from_slice(b"\",\"html_url\":\"https://github.com/");
                    out.extend_from_slice(&event.full_name);
                    out.extend_from_slice(b"/wiki/");
                    out.extend_from_slice(page.as_bytes());
                    out.extend_from_slice(b"\"}");
                }
                out.extend_from_slice(b"]}");
            }
            DELETE => {
                out.extend_from_slice(b"{\"ref\":");
                let (ref_type, reference) = if rng.below(8) == 0 {
                    ("tag", "v0.9")
                } else {
                    ("branch", rng.pick(corpus::BRANCHES))
                };
                push_str(out, reference, Escape::Minimal);
                out.extend_from_slice(b",\"ref_type\":\"");
                out.extend_from_slice(ref_type.as_bytes());
                out.extend_from_slice(b"\",\"pusher_type\":\"user\"}");
            }
            COMMIT_COMMENT => {
                let id = 9_131_359 + self.index / 200 + rng.below(10);
                let commit = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
                out.extend_from_slice(b"{\"comment\":{\"url\":\"https://api.github.com/repos/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/comments/");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"html_url\":\"https://github.com/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/commit/");
                push_hex_bits(out, &commit, 40);
                out.extend_from_slice(b"#commitcomment-");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"id\":");
                push_u64(out, id);
                out.extend_from_slice(b",\"user\":");
                user_object(out, Account::User(event.actor));
                out.extend_from_slice(
                    b",\"position\":null,\"line\":null,\"path\":null,\"commit_id\":\"",
                );
                push_hex_bits(out, &commit, 40);
                out.push(b'"');
                times(out, &["created_at", "updated_at"], event.secs);
                out.extend_from_slice(b",\"body\":");
                push_str(out, rng.pick(corpus::COMMENTS), Escape::Minimal);
                out.extend_from_slice(b"}}");
            }
            RELEASE => {
                let id = 818_219 + self.index / 300 + rng.below(10);
                let tag = format!("v{}.{}.{}", rng.below(4), rng.below(20), rng.below(10));
                let base = [
                    b"https://api.github.com/repos/".as_slice(),
                    &event.full_name,
                ]
                .concat();
                out.extend_from_slice(b"{\"action\":\"published\",\"release\":{\"url\":\"");
                out.extend_from_slice(&base);
                out.extend_from_slice(b"/releases/");
                push_u64(out, id);
                out.extend_from_slice(b"\",\"assets_url\":\"");
                out.extend_from_slice(&base);
                out.extend_from_slice(b"/releases/");
                push_u64(out, id);
                out.extend_from_slice(
                    b"/assets\",\"upload_url\":\"https://uploads.github.com/repos/",
                );
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/releases/");
                push_u64(out, id);
                out.extend_from_slice(b"/assets{?name}\",\"html_url\":\"https://github.com/");
                out.extend_from_slice(&event.full_name);
                out.extend_from_slice(b"/releases/tag/");
                out.extend_from_slice(tag.as_bytes());
                out.extend_from_slice(b"\",\"id\":");
                push_u64(out, id);
                out.extend_from_slice(b",\"tag_name\":\"");
                out.extend_from_slice(tag.as_bytes());
                out.extend_from_slice(b"\",\"target_commitish\":\"master\",\"name\":\"");
                out.extend_from_slice(tag.as_bytes());
                out.extend_from_slice(b"\",\"draft\":false,\"author\":");
                user_object(out, Account::User(event.actor));
                out.extend_from_slice(b",\"prerelease\":");
                out.extend_from_slice(if rng.percent(10) { b"true" } else { b"false" });
                out.extend_from_slice(b",\"created_at\":\"");
                push_iso_seconds(out, event.secs - rng.below(86_400));
                out.extend_from_slice(b"\",\"published_at\":\"");
                push_iso_seconds(out, event.secs);
                out.extend_from_slice(b"\",\"assets\":[],\"tarball_url\":\"");
                out.extend_from_slice(&base);
                out.extend_from_slice(b"/tarball/");
                out.extend_from_slice(tag.as_bytes());
                out.extend_from_slice(b"\",\"zipball_url\":\"");
                out.extend_from_slice(&base);
                out.extend_from_slice(b"/zipball/");
                out.extend_from_slice(tag.as_bytes());
                out.extend_from_slice(b"\",\"body\":");
                push_str(out, rng.pick(corpus::COMMIT_MESSAGES), Escape::Minimal);
                out.extend_from_slice(b"}}");
            }
            _ => {
                out.extend_from_slice(b"{\"member\":");
                let member = self.world.actors.sample(rng);
                user_object(out, Account::User(member));
                out.extend_from_slice(b",\"action\":\"added\"}");
            }
        }
    }
}

impl Iterator for GhArchiveGenerator {
    /// One event without its newline.
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut line = Vec::with_capacity(4096);
        if !self.next_document(&mut line) {
            return None;
        }
        line.pop();
        Some(String::from_utf8_lossy(&line).into_owned())
    }
}

/// A count with a long tail: usually small, sometimes up to `max`.
fn skewed_count(rng: &mut Rng, max: u64) -> u64 {
    (rng.unit().powi(3) * max as f64) as u64
}

/// Issue and pull request numbers: popular repositories have thousands, small ones a handful.
fn issue_number(rng: &mut Rng, repo: Repo) -> u64 {
    let top = 5 + repo.popularity() / 4;
    1 + skewed_count(rng, top.min(20_000))
}

fn description(repo: Repo) -> &'static str {
    let d = corpus::REPO_DESCRIPTIONS;
    d[(mix64(repo.name_key ^ 0xde5c) % d.len() as u64) as usize]
}

/// `,"created_at":"…","updated_at":"…"` with every listed key set to `secs`.
fn times(out: &mut Vec<u8>, keys: &[&str], secs: u64) {
    for key in keys {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":\"");
        push_iso_seconds(out, secs);
        out.push(b'"');
    }
}

/// The short account object of `actor` and `org`.
fn short_account(out: &mut Vec<u8>, account: Account, kind: &str) {
    out.extend_from_slice(b"{\"id\":");
    let id = account.id();
    push_u64(out, id);
    out.extend_from_slice(b",\"login\":\"");
    account.push_login(out);
    out.extend_from_slice(b"\",\"gravatar_id\":\"\",\"url\":\"https://api.github.com/");
    out.extend_from_slice(kind.as_bytes());
    out.push(b'/');
    account.push_login(out);
    out.extend_from_slice(b"\",\"avatar_url\":\"https://avatars.githubusercontent.com/u/");
    push_u64(out, id);
    out.extend_from_slice(b"?\"}");
}

/// The full user object GitHub's API embeds (issue authors, pull request heads, members...).
fn user_object(out: &mut Vec<u8>, account: Account) {
    let mut login = Vec::with_capacity(24);
    account.push_login(&mut login);
    let id = account.id();
    out.extend_from_slice(b"{\"login\":\"");
    out.extend_from_slice(&login);
    out.extend_from_slice(b"\",\"id\":");
    push_u64(out, id);
    out.extend_from_slice(b",\"avatar_url\":\"https://avatars.githubusercontent.com/u/");
    push_u64(out, id);
    out.extend_from_slice(b"?v=3\",\"gravatar_id\":\"\",\"url\":\"https://api.github.com/users/");
    out.extend_from_slice(&login);
    out.extend_from_slice(b"\",\"html_url\":\"https://github.com/");
    out.extend_from_slice(&login);
    out.push(b'"');
    const URLS: [(&str, &str); 9] = [
        ("followers_url", "/followers"),
        ("following_url", "/following{/other_user}"),
        ("gists_url", "/gists{/gist_id}"),
        ("starred_url", "/starred{/owner}{/repo}"),
        ("subscriptions_url", "/subscriptions"),
        ("organizations_url", "/orgs"),
        ("repos_url", "/repos"),
        ("events_url", "/events{/privacy}"),
        ("received_events_url", "/received_events"),
    ];
    for (key, suffix) in URLS {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":\"https://api.github.com/users/");
        out.extend_from_slice(&login);
        out.extend_from_slice(suffix.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(account.kind().as_bytes());
    out.extend_from_slice(b"\",\"site_admin\":false}");
}

/// The full repository object (pull request heads and bases, forks).
fn repo_object(out: &mut Vec<u8>, repo: Repo, now: u64, is_fork: bool) {
    let mut full = Vec::with_capacity(48);
    repo.push_full_name(&mut full);
    let h = mix64(repo.key ^ 0x4e90);
    let stars = repo.popularity();
    out.extend_from_slice(b"{\"id\":");
    push_u64(out, repo.id());
    out.extend_from_slice(b",\"name\":\"");
    repo.push_name(out);
    out.extend_from_slice(b"\",\"full_name\":\"");
    out.extend_from_slice(&full);
    out.extend_from_slice(b"\",\"owner\":");
    user_object(out, repo.owner);
    out.extend_from_slice(b",\"private\":false,\"html_url\":\"https://github.com/");
    out.extend_from_slice(&full);
    out.extend_from_slice(b"\",\"description\":");
    push_str(out, description(repo), Escape::Minimal);
    out.extend_from_slice(if is_fork {
        b",\"fork\":true"
    } else {
        b",\"fork\":false"
    });
    out.extend_from_slice(b",\"url\":\"https://api.github.com/repos/");
    out.extend_from_slice(&full);
    out.push(b'"');
    const URLS: [(&str, &str); 35] = [
        ("forks_url", "/forks"),
        ("keys_url", "/keys{/key_id}"),
        ("collaborators_url", "/collaborators{/collaborator}"),
        ("teams_url", "/teams"),
        ("hooks_url", "/hooks"),
        ("issue_events_url", "/issues/events{/number}"),
        ("events_url", "/events"),
        ("assignees_url", "/assignees{/user}"),
        ("branches_url", "/branches{/branch}"),
        ("tags_url", "/tags"),
        ("blobs_url", "/git/blobs{/sha}"),
        ("git_tags_url", "/git/tags{/sha}"),
        ("git_refs_url", "/git/refs{/sha}"),
        ("trees_url", "/git/trees{/sha}"),
        ("statuses_url", "/statuses/{sha}"),
        ("languages_url", "/languages"),
        ("stargazers_url", "/stargazers"),
        ("contributors_url", "/contributors"),
        ("subscribers_url", "/subscribers"),
        ("subscription_url", "/subscription"),
        ("commits_url", "/commits{/sha}"),
        ("git_commits_url", "/git/commits{/sha}"),
        ("comments_url", "/comments{/number}"),
        ("issue_comment_url", "/issues/comments/{number}"),
        ("contents_url", "/contents/{+path}"),
        ("compare_url", "/compare/{base}...{head}"),
        ("merges_url", "/merges"),
        ("archive_url", "/{archive_format}{/ref}"),
        ("downloads_url", "/downloads"),
        ("issues_url", "/issues{/number}"),
        ("pulls_url", "/pulls{/number}"),
        ("milestones_url", "/milestones{/number}"),
        (
            "notifications_url",
            "/notifications{?since,all,participating}",
        ),
        ("labels_url", "/labels{/name}"),
        ("releases_url", "/releases{/id}"),
    ];
    for (key, suffix) in URLS {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":\"https://api.github.com/repos/");
        out.extend_from_slice(&full);
        out.extend_from_slice(suffix.as_bytes());
        out.push(b'"');
    }
    let created = if is_fork {
        now
    } else {
        // Repositories of 2008 to late 2014.
        1_210_000_000 + h % 205_000_000
    };
    out.extend_from_slice(b",\"created_at\":\"");
    push_iso_seconds(out, created);
    out.extend_from_slice(b"\",\"updated_at\":\"");
    push_iso_seconds(out, now - (h >> 20) % 86_400);
    out.extend_from_slice(b"\",\"pushed_at\":\"");
    push_iso_seconds(out, now - (h >> 30) % 3_600);
    out.extend_from_slice(b"\",\"git_url\":\"git://github.com/");
    out.extend_from_slice(&full);
    out.extend_from_slice(b".git\",\"ssh_url\":\"git@github.com:");
    out.extend_from_slice(&full);
    out.extend_from_slice(b".git\",\"clone_url\":\"https://github.com/");
    out.extend_from_slice(&full);
    out.extend_from_slice(b".git\",\"svn_url\":\"https://github.com/");
    out.extend_from_slice(&full);
    out.extend_from_slice(b"\",\"homepage\":null,\"size\":");
    push_u64(out, (h >> 8) % 100_000);
    for key in ["stargazers_count", "watchers_count"] {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        push_u64(out, stars);
    }
    out.extend_from_slice(b",\"language\":");
    if (h >> 40).is_multiple_of(10) {
        out.extend_from_slice(b"null");
    } else {
        let languages = corpus::LANGUAGES;
        push_str(
            out,
            languages[((h >> 44) % languages.len() as u64) as usize],
            Escape::Minimal,
        );
    }
    out.extend_from_slice(b",\"has_issues\":true,\"has_downloads\":true,\"has_wiki\":true,\"has_pages\":false,\"forks_count\":");
    let forks = stars / 4;
    push_u64(out, forks);
    out.extend_from_slice(b",\"mirror_url\":null,\"open_issues_count\":");
    let open = stars / 20;
    push_u64(out, open);
    out.extend_from_slice(b",\"forks\":");
    push_u64(out, forks);
    out.extend_from_slice(b",\"open_issues\":");
    push_u64(out, open);
    out.extend_from_slice(b",\"watchers\":");
    push_u64(out, stars);
    out.extend_from_slice(b",\"default_branch\":\"master\"}");
}

fn push_payload(out: &mut Vec<u8>, rng: &mut Rng, event: &Event, push_id: u64, size: u64) {
    let distinct = if rng.percent(90) {
        size
    } else {
        rng.below(size + 1)
    };
    out.extend_from_slice(b"{\"push_id\":");
    push_u64(out, push_id);
    out.extend_from_slice(b",\"size\":");
    push_u64(out, size);
    out.extend_from_slice(b",\"distinct_size\":");
    push_u64(out, distinct);
    out.extend_from_slice(b",\"ref\":\"refs/heads/");
    let branch = match rng.below(100) {
        0..76 => "master",
        76..81 => "gh-pages",
        _ => rng.pick(corpus::BRANCHES),
    };
    out.extend_from_slice(branch.as_bytes());
    // GH Archive lists at most 20 commits; the head is the last one.
    let listed = size.min(20);
    let shas: Vec<[u64; 3]> = (0..listed.max(1))
        .map(|_| [rng.next_u64(), rng.next_u64(), rng.next_u64()])
        .collect();
    out.extend_from_slice(b"\",\"head\":\"");
    push_hex_bits(out, &shas[shas.len() - 1], 40);
    out.extend_from_slice(b"\",\"before\":\"");
    push_hex_bits(out, &[rng.next_u64(), rng.next_u64(), rng.next_u64()], 40);
    out.extend_from_slice(b"\",\"commits\":[");
    let actor = event.actor;
    for (i, sha) in shas.iter().take(listed as usize).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"sha\":\"");
        push_hex_bits(out, sha, 40);
        // GH Archive replaces author e-mails by a hash of the local part.
        out.extend_from_slice(b"\",\"author\":{\"email\":\"");
        push_hex_bits(
            out,
            &[
                mix64(actor ^ 0xe1),
                mix64(actor ^ 0xe2),
                mix64(actor ^ 0xe3),
            ],
            40,
        );
        out.extend_from_slice(b"@gmail.com\",\"name\":\"");
        let start = out.len();
        push_name(out, actor);
        out[start] = out[start].to_ascii_uppercase();
        out.extend_from_slice(b"\"},\"message\":");
        push_str(out, rng.pick(corpus::COMMIT_MESSAGES), Escape::Minimal);
        out.extend_from_slice(if (i as u64) < size - distinct {
            b",\"distinct\":false"
        } else {
            b",\"distinct\":true"
        });
        out.extend_from_slice(b",\"url\":\"https://api.github.com/repos/");
        out.extend_from_slice(&event.full_name);
        out.extend_from_slice(b"/commits/");
        push_hex_bits(out, sha, 40);
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b"]}");
}

fn issue(
    out: &mut Vec<u8>,
    rng: &mut Rng,
    event: &Event,
    number: u64,
    state: &str,
    comments: u64,
    with_pr: bool,
) {
    let base = [
        b"https://api.github.com/repos/".as_slice(),
        &event.full_name,
    ]
    .concat();
    out.extend_from_slice(b"{\"url\":\"");
    out.extend_from_slice(&base);
    out.extend_from_slice(b"/issues/");
    push_u64(out, number);
    for (key, suffix) in [
        ("labels_url", "/labels{/name}"),
        ("comments_url", "/comments"),
        ("events_url", "/events"),
    ] {
        out.extend_from_slice(b"\",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":\"");
        out.extend_from_slice(&base);
        out.extend_from_slice(b"/issues/");
        push_u64(out, number);
        out.extend_from_slice(suffix.as_bytes());
    }
    out.extend_from_slice(b"\",\"html_url\":\"https://github.com/");
    out.extend_from_slice(&event.full_name);
    out.extend_from_slice(b"/issues/");
    push_u64(out, number);
    out.extend_from_slice(b"\",\"id\":");
    push_u64(out, 53_200_509 - rng.below(15_000_000));
    out.extend_from_slice(b",\"number\":");
    push_u64(out, number);
    out.extend_from_slice(b",\"title\":");
    push_str(out, rng.pick(corpus::ISSUE_TITLES), Escape::Minimal);
    out.extend_from_slice(b",\"user\":");
    // The author is often the actor (opening their own issue), otherwise someone else.
    let author = if rng.percent(50) {
        Account::User(event.actor)
    } else {
        Account::User(rng.below(USERS))
    };
    user_object(out, author);
    out.extend_from_slice(b",\"labels\":[");
    if rng.percent(22) {
        let (name, color) = rng.pick(&[
            ("bug", "fc2929"),
            ("enhancement", "84b6eb"),
            ("question", "cc317c"),
            ("duplicate", "cccccc"),
            ("help wanted", "159818"),
        ]);
        out.extend_from_slice(b"{\"url\":\"");
        out.extend_from_slice(&base);
        out.extend_from_slice(b"/labels/");
        out.extend_from_slice(name.replace(' ', "+").as_bytes());
        out.extend_from_slice(b"\",\"name\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"color\":\"");
        out.extend_from_slice(color.as_bytes());
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b"],\"state\":\"");
    out.extend_from_slice(state.as_bytes());
    out.extend_from_slice(
        b"\",\"locked\":false,\"assignee\":null,\"milestone\":null,\"comments\":",
    );
    push_u64(out, comments);
    let created = if comments == 0 && state == "open" {
        event.secs
    } else {
        event.secs - rng.below(90 * 86_400)
    };
    out.extend_from_slice(b",\"created_at\":\"");
    push_iso_seconds(out, created);
    out.extend_from_slice(b"\",\"updated_at\":\"");
    push_iso_seconds(out, event.secs);
    out.extend_from_slice(b"\",\"closed_at\":");
    if state == "closed" {
        out.push(b'"');
        push_iso_seconds(out, event.secs);
        out.push(b'"');
    } else {
        out.extend_from_slice(b"null");
    }
    if with_pr {
        out.extend_from_slice(b",\"pull_request\":{\"url\":\"");
        out.extend_from_slice(&base);
        out.extend_from_slice(b"/pulls/");
        push_u64(out, number);
        for (key, suffix) in [
            ("html_url", ""),
            ("diff_url", ".diff"),
            ("patch_url", ".patch"),
        ] {
            out.extend_from_slice(b"\",\"");
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":\"https://github.com/");
            out.extend_from_slice(&event.full_name);
            out.extend_from_slice(b"/pull/");
            push_u64(out, number);
            out.extend_from_slice(suffix.as_bytes());
        }
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b",\"body\":");
    push_str(out, rng.pick(corpus::ISSUE_BODIES), Escape::Minimal);
    out.push(b'}');
}

#[allow(clippy::too_many_arguments)]
fn pull_request(
    out: &mut Vec<u8>,
    rng: &mut Rng,
    world: &World,
    event: &Event,
    number: u64,
    id: u64,
    action: &str,
    with_stats: bool,
) {
    let api = [
        b"https://api.github.com/repos/".as_slice(),
        &event.full_name,
    ]
    .concat();
    let html = [b"https://github.com/".as_slice(), &event.full_name].concat();
    let head_sha = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
    let closed = action == "closed";
    let merged = closed && rng.percent(60);
    out.extend_from_slice(b"{\"url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/pulls/");
    push_u64(out, number);
    out.extend_from_slice(b"\",\"id\":");
    push_u64(out, id);
    for (key, suffix) in [
        ("html_url", ""),
        ("diff_url", ".diff"),
        ("patch_url", ".patch"),
    ] {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":\"");
        out.extend_from_slice(&html);
        out.extend_from_slice(b"/pull/");
        push_u64(out, number);
        out.extend_from_slice(suffix.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"issue_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/issues/");
    push_u64(out, number);
    out.extend_from_slice(b"\",\"number\":");
    push_u64(out, number);
    out.extend_from_slice(if closed {
        b",\"state\":\"closed\""
    } else {
        b",\"state\":\"open\""
    });
    out.extend_from_slice(b",\"locked\":false,\"title\":");
    push_str(out, rng.pick(corpus::ISSUE_TITLES), Escape::Minimal);
    out.extend_from_slice(b",\"user\":");
    user_object(out, Account::User(event.actor));
    out.extend_from_slice(b",\"body\":");
    push_str(out, rng.pick(corpus::ISSUE_BODIES), Escape::Minimal);
    out.extend_from_slice(b",\"created_at\":\"");
    let created = if action == "opened" {
        event.secs
    } else {
        event.secs - rng.below(30 * 86_400)
    };
    push_iso_seconds(out, created);
    out.extend_from_slice(b"\",\"updated_at\":\"");
    push_iso_seconds(out, event.secs);
    out.push(b'"');
    for (key, set) in [("closed_at", closed), ("merged_at", merged)] {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        if set {
            out.extend_from_slice(b"\":\"");
            push_iso_seconds(out, event.secs);
            out.push(b'"');
        } else {
            out.extend_from_slice(b"\":null");
        }
    }
    out.extend_from_slice(b",\"merge_commit_sha\":\"");
    push_hex_bits(out, &[rng.next_u64(), rng.next_u64(), rng.next_u64()], 40);
    out.extend_from_slice(b"\",\"assignee\":null,\"milestone\":null,\"commits_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/pulls/");
    push_u64(out, number);
    out.extend_from_slice(b"/commits\",\"review_comments_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/pulls/");
    push_u64(out, number);
    out.extend_from_slice(b"/comments\",\"review_comment_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/pulls/comments/{number}\",\"comments_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/issues/");
    push_u64(out, number);
    out.extend_from_slice(b"/comments\",\"statuses_url\":\"");
    out.extend_from_slice(&api);
    out.extend_from_slice(b"/statuses/");
    push_hex_bits(out, &head_sha, 40);
    out.push(b'"');
    // The head is the actor's fork (same name), the base the event's repository.
    let fork = Repo {
        key: event.actor * 8 + 7,
        owner: Account::User(event.actor),
        name_key: event.repo.name_key,
    };
    let branch = rng.pick(corpus::BRANCHES);
    for (key, repo, reference, sha) in [
        ("head", fork, branch, head_sha),
        (
            "base",
            event.repo,
            "master",
            [rng.next_u64(), rng.next_u64(), rng.next_u64()],
        ),
    ] {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":{\"label\":\"");
        repo.owner.push_login(out);
        out.push(b':');
        out.extend_from_slice(reference.as_bytes());
        out.extend_from_slice(b"\",\"ref\":\"");
        out.extend_from_slice(reference.as_bytes());
        out.extend_from_slice(b"\",\"sha\":\"");
        push_hex_bits(out, &sha, 40);
        out.extend_from_slice(b"\",\"user\":");
        user_object(out, repo.owner);
        out.extend_from_slice(b",\"repo\":");
        repo_object(out, repo, event.secs, key == "head");
        out.push(b'}');
    }
    out.extend_from_slice(b",\"_links\":{");
    let links: [(&str, &[u8], &str); 8] = [
        ("self", &api, "/pulls/#"),
        ("html", &html, "/pull/#"),
        ("issue", &api, "/issues/#"),
        ("comments", &api, "/issues/#/comments"),
        ("review_comments", &api, "/pulls/#/comments"),
        ("review_comment", &api, "/pulls/comments/{number}"),
        ("commits", &api, "/pulls/#/commits"),
        ("statuses", &api, "/statuses/"),
    ];
    for (i, (key, base, pattern)) in links.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":{\"href\":\"");
        out.extend_from_slice(base);
        for (j, part) in pattern.split('#').enumerate() {
            if j > 0 {
                push_u64(out, number);
            }
            out.extend_from_slice(part.as_bytes());
        }
        if *key == "statuses" {
            push_hex_bits(out, &head_sha, 40);
        }
        out.extend_from_slice(b"\"}");
    }
    out.push(b'}');
    if with_stats {
        out.extend_from_slice(if merged {
            b",\"merged\":true,\"mergeable\":null,\"mergeable_state\":\"unknown\",\"merged_by\":"
                .as_slice()
        } else {
            b",\"merged\":false,\"mergeable\":null,\"mergeable_state\":\"unknown\",\"merged_by\":null"
                .as_slice()
        });
        if merged {
            let merger = Account::User(world.actors.sample(rng));
            user_object(out, merger);
        }
        for key in [
            "comments",
            "review_comments",
            "commits",
            "additions",
            "deletions",
            "changed_files",
        ] {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            let value = match key {
                "commits" | "changed_files" => 1 + skewed_count(rng, 30),
                "additions" | "deletions" => skewed_count(rng, 2_000),
                _ => skewed_count(rng, 20),
            };
            push_u64(out, value);
        }
    }
    out.push(b'}');
}

/// Writes `options.docs` GH Archive-like events as NDJSON.
pub fn write_gharchive<W: Write + ?Sized>(
    options: &GhArchiveOptions,
    out: &mut W,
) -> Result<GenStats, DatagenError> {
    let mut generator = GhArchiveGenerator::new(options);
    crate::drive(
        |buffer| generator.next_document(buffer),
        out,
        "writing GH Archive documents",
    )
}
