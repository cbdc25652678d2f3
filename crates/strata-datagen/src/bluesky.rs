//! Bluesky Jetstream events (NDJSON, one event per line), calibrated to JSONBench's first
//! 1,000,000-document file (2024-11-21).
//!
//! Owns: the event model (which kind, collection, operation and user each event gets), the record
//! shapes of every collection, the clock, and the rare malformed lines of `quirks`.
//!
//! Invariants:
//! - Same options ⇒ byte-identical output. Quirks use their own random stream, so turning them on
//!   changes only the few quirky lines and nothing else.
//! - Without quirks every line is one JSON object, valid UTF-8, keys in Jetstream's order
//!   (`did`, `time_us`, `kind`, then `commit` | `identity` | `account`; record keys sorted).
//! - `time_us` of document 0 is [`START_TIME_US`] and never decreases.
//!
//! Calibration (per 1M documents, real file): 994,672 commits, the rest identity/account events;
//! per collection the events, creates and distinct users among creates of [`COLLECTIONS`]. Each
//! collection draws its users from a power law P(rank k) ∝ (k + 20)^-s over its own population
//! (ranks are shared user ids, so a heavy liker is also a heavy poster). Population and exponent
//! were fitted numerically (expected distinct count of n draws) so that distinct users match at 1M
//! and, for likes and posts, the real growth at 10M (694,849 and 327,190 distinct creators).
//! Profile creates are new accounts (every one a new user, as in the real file).

use std::io::Write;

use crate::corpus;
use crate::json::{
    BASE32, Escape, push_base32_bits, push_iso_micros, push_iso_millis, push_iso_offset, push_str,
    push_str_body, push_u64,
};
use crate::names::{display_name, push_did, push_handle};
use crate::rng::{Rng, Zipf, mix64, unit_of};
use crate::{DatagenError, GenStats};

/// 2024-11-21 16:25:49.000167 UTC, the first event of the real file.
pub const START_TIME_US: u64 = 1_732_206_349_000_167;

/// Mean µs between events: the real first million spans ~34 minutes, all of it inside hour 16
/// (16:25:49 to ~16:59:50); 10M documents end inside hour 18 (9M × 760 µs ≈ 114 minutes more, up
/// to ~18:54).
const FIRST_MILLION_GAP_US: u64 = 2_040;
const LATER_GAP_US: u64 = 760;

const COMMITS_PER_MILLION: u64 = 994_672;

/// Offset of every user power law: flattens the head so the top user makes ~1% of a collection's
/// events (a busy bot) rather than several percent.
const USER_OFFSET: f64 = 20.0;

/// Ids of accounts created during the stream start here, above every population.
const NEW_ACCOUNT_BASE: u64 = 40_000_000;

const SEQ_BASE: u64 = 4_370_000_000;

/// What a non-create operation on a collection is.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Records that can only be created or deleted (likes, follows, posts...).
    Delete,
    /// Profiles are edited in place.
    Update,
    /// Lists, feeds, starter packs: edited more often than deleted (percent updates).
    Mixed(u64),
}

/// (collection, events per 1M, creates per 1M, distinct users among creates per 1M — the real
/// file's figures — then the fitted user population and power-law exponent).
pub const COLLECTIONS: [(&str, u64, u64, u64, u64, f64); 14] = [
    (
        "app.bsky.feed.like",
        448_944,
        444_523,
        117_617,
        13_277_087,
        1.1552,
    ),
    (
        "app.bsky.graph.follow",
        360_374,
        337_978,
        63_957,
        13_000_000,
        1.2459,
    ),
    (
        "app.bsky.feed.post",
        90_816,
        86_812,
        50_464,
        2_644_698,
        0.9665,
    ),
    (
        "app.bsky.feed.repost",
        58_540,
        56_993,
        26_581,
        5_000_000,
        1.0887,
    ),
    (
        "app.bsky.graph.block",
        14_040,
        13_838,
        5_785,
        8_000_000,
        1.2173,
    ),
    // Profile creates are new accounts; the population/exponent apply to profile updates.
    (
        "app.bsky.actor.profile",
        11_762,
        5_337,
        5_337,
        13_000_000,
        0.9,
    ),
    (
        "app.bsky.graph.listitem",
        8_103,
        7_568,
        1_078,
        2_000_000,
        1.7218,
    ),
    ("app.bsky.graph.listblock", 895, 860, 449, 5_000_000, 1.4115),
    (
        "app.bsky.graph.starterpack",
        405,
        104,
        101,
        5_000_000,
        1.0668,
    ),
    ("app.bsky.graph.list", 356, 259, 218, 5_000_000, 1.2177),
    ("app.bsky.feed.threadgate", 255, 228, 196, 3_000_000, 1.207),
    ("app.bsky.feed.postgate", 104, 101, 82, 3_000_000, 1.4507),
    ("app.bsky.feed.generator", 74, 10, 9, 3_000_000, 2.3553),
    ("app.bsky.labeler.service", 4, 0, 0, 2_000, 1.0),
];

const fn change_of(index: usize) -> Change {
    match index {
        5 => Change::Update,
        8 | 9 | 12 | 13 => Change::Mixed(70),
        10 | 11 => Change::Mixed(50),
        _ => Change::Delete,
    }
}

const LIKE: usize = 0;
const FOLLOW: usize = 1;
const POST: usize = 2;
const REPOST: usize = 3;
const BLOCK: usize = 4;
const PROFILE: usize = 5;
const LISTITEM: usize = 6;
const LISTBLOCK: usize = 7;
const STARTERPACK: usize = 8;
const LIST: usize = 9;
const THREADGATE: usize = 10;
const POSTGATE: usize = 11;
const GENERATOR: usize = 12;

#[derive(Debug, Clone)]
pub struct BlueskyOptions {
    pub seed: u64,
    pub docs: u64,
    /// Rare real-world oddities, each about once per 100,000 documents: a post text containing
    /// `\u0000`, a record nested 200 levels deep, a line cut in half (invalid JSON).
    pub quirks: bool,
}

/// One facet of a post text: a byte range and what it links to.
#[derive(Debug, Clone, Copy)]
enum Feature {
    Mention(u64),
    Link(usize, u64),
    Tag(usize),
}

#[derive(Debug, Clone, Copy)]
struct Facet {
    start: usize,
    end: usize,
    feature: Feature,
}

/// Quirk positions inside the current block of [`QUIRK_BLOCK`] documents.
const QUIRK_BLOCK: u64 = 100_000;

#[derive(Debug, Clone, Default)]
struct Quirks {
    nul_at: u64,
    deep_at: u64,
    broken_at: u64,
    pending_nul: bool,
    pending_deep: bool,
}

/// Streams Jetstream-like events; [`write_bluesky`] drives it, tests and tools can pull lines.
#[derive(Debug, Clone)]
pub struct BlueskyGenerator {
    rng: Rng,
    quirk_rng: Option<Rng>,
    quirks: Quirks,
    docs: u64,
    index: u64,
    time_us: u64,
    next_new_account: u64,
    collection_cdf: [u64; 14],
    users: [Zipf; 14],
    lang_cdf: [u64; 10],
    /// Posts that get liked, reposted, replied to and quoted: a few go viral.
    subject_posts: Zipf,
    /// Who wrote a subject post (a pure function of the post id, via this law).
    post_authors: Zipf,
    /// Accounts that get followed and blocked.
    followed: Zipf,
    /// Moderation lists people subscribe to.
    mod_lists: Zipf,
    text: String,
    facets: Vec<Facet>,
}

impl BlueskyGenerator {
    pub fn new(options: &BlueskyOptions) -> Self {
        let mut collection_cdf = [0u64; 14];
        let mut total = 0;
        for (slot, c) in collection_cdf.iter_mut().zip(COLLECTIONS.iter()) {
            total += c.1;
            *slot = total;
        }
        let mut lang_cdf = [0u64; 10];
        let mut total = 0;
        for (slot, l) in lang_cdf.iter_mut().zip(corpus::POST_LANGUAGES.iter()) {
            total += l.1;
            *slot = total;
        }
        let mut generator = BlueskyGenerator {
            rng: Rng::new(options.seed),
            quirk_rng: options
                .quirks
                .then(|| Rng::new(options.seed ^ 0x7175_6972_6b73_2121)),
            quirks: Quirks::default(),
            docs: options.docs,
            index: 0,
            time_us: START_TIME_US,
            next_new_account: NEW_ACCOUNT_BASE,
            collection_cdf,
            users: COLLECTIONS.map(|c| Zipf::new(c.4, c.5, USER_OFFSET)),
            lang_cdf,
            subject_posts: Zipf::new(30_000_000, 0.95, 10.0),
            post_authors: Zipf::new(2_644_698, 0.9665, USER_OFFSET),
            followed: Zipf::new(13_000_000, 0.95, 10.0),
            mod_lists: Zipf::new(20_000, 1.1, 2.0),
            text: String::with_capacity(1024),
            facets: Vec::with_capacity(8),
        };
        generator.schedule_quirks();
        generator
    }

    fn schedule_quirks(&mut self) {
        if let Some(q) = self.quirk_rng.as_mut() {
            let base = self.index;
            // The content quirks wait for a suitable record, so they are placed early enough in
            // the block to find one before it ends.
            self.quirks.nul_at = base + q.below(QUIRK_BLOCK - 1_000);
            self.quirks.deep_at = base + q.below(QUIRK_BLOCK - 1_000);
            self.quirks.broken_at = base + q.below(QUIRK_BLOCK);
        }
    }

    /// Appends the next document and a newline to `out`; false once `docs` were produced.
    pub fn next_document(&mut self, out: &mut Vec<u8>) -> bool {
        if self.index >= self.docs {
            return false;
        }
        if self.index > 0 {
            if self.index.is_multiple_of(QUIRK_BLOCK) {
                self.schedule_quirks();
            }
            let mean = if self.index < 1_000_000 {
                FIRST_MILLION_GAP_US
            } else {
                LATER_GAP_US
            };
            self.time_us += self.rng.below(2 * mean + 1);
        }
        let mut broken = false;
        if self.quirk_rng.is_some() {
            self.quirks.pending_nul |= self.index == self.quirks.nul_at;
            self.quirks.pending_deep |= self.index == self.quirks.deep_at;
            broken = self.index == self.quirks.broken_at;
        }
        let start = out.len();
        self.document(out);
        if broken {
            // A line cut short, as a crashed writer leaves it; cut on a character boundary so the
            // file stays valid UTF-8 and only the JSON is broken.
            let mut cut = start + (out.len() - start) / 2;
            while cut > start && (out[cut] & 0xC0) == 0x80 {
                cut -= 1;
            }
            out.truncate(cut);
        }
        out.push(b'\n');
        self.index += 1;
        true
    }

    fn document(&mut self, out: &mut Vec<u8>) {
        if self.rng.per_million(COMMITS_PER_MILLION) {
            self.commit(out);
        } else {
            self.identity_or_account(out);
        }
    }

    fn head(&self, out: &mut Vec<u8>, user: u64, kind: &str) {
        out.extend_from_slice(b"{\"did\":\"");
        push_did(out, user);
        out.extend_from_slice(b"\",\"time_us\":");
        push_u64(out, self.time_us);
        out.extend_from_slice(b",\"kind\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\":{");
    }

    fn identity_or_account(&mut self, out: &mut Vec<u8>) {
        // Half concern accounts that just signed up, the rest anyone.
        let user = if self.rng.percent(50) {
            self.next_new_account + self.rng.below(20)
        } else {
            self.rng.below(13_000_000)
        };
        let seq = SEQ_BASE + 2 * self.index + self.rng.below(2);
        let time = self.time_us.saturating_sub(self.rng.below(1_000_000));
        if self.rng.percent(50) {
            self.head(out, user, "identity");
            out.extend_from_slice(b"\"did\":\"");
            push_did(out, user);
            out.extend_from_slice(b"\",\"handle\":\"");
            push_handle(out, user);
            out.extend_from_slice(b"\",\"seq\":");
        } else {
            self.head(out, user, "account");
            let status = if self.rng.percent(10) {
                Some(self.rng.pick(&["deactivated", "takendown", "deleted"]))
            } else {
                None
            };
            out.extend_from_slice(if status.is_some() {
                b"\"active\":false,\"did\":\""
            } else {
                b"\"active\":true,\"did\":\""
            });
            push_did(out, user);
            out.extend_from_slice(b"\",\"seq\":");
            push_u64(out, seq);
            if let Some(status) = status {
                out.extend_from_slice(b",\"status\":\"");
                out.extend_from_slice(status.as_bytes());
                out.push(b'"');
            }
            out.extend_from_slice(b",\"time\":\"");
            push_iso_millis(out, time);
            out.extend_from_slice(b"\"}}");
            return;
        }
        push_u64(out, seq);
        out.extend_from_slice(b",\"time\":\"");
        push_iso_millis(out, time);
        out.extend_from_slice(b"\"}}");
    }

    fn commit(&mut self, out: &mut Vec<u8>) {
        let x = self.rng.below(COMMITS_PER_MILLION);
        let c = self.collection_cdf.partition_point(|&edge| edge <= x);
        let (collection, all, creates, ..) = COLLECTIONS[c];
        let create = self.rng.below(all) < creates;
        let operation = if create {
            "create"
        } else {
            match change_of(c) {
                Change::Delete => "delete",
                Change::Update => "update",
                Change::Mixed(p) => {
                    if self.rng.percent(p) {
                        "update"
                    } else {
                        "delete"
                    }
                }
            }
        };
        let user = if c == PROFILE && create {
            self.next_new_account += 1;
            self.next_new_account
        } else {
            self.users[c].sample(&mut self.rng)
        };
        let clock = mix64(user) & 1023;
        self.head(out, user, "commit");
        out.extend_from_slice(b"\"rev\":\"");
        push_tid(out, self.time_us - self.rng.below(400_000), clock);
        out.extend_from_slice(b"\",\"operation\":\"");
        out.extend_from_slice(operation.as_bytes());
        out.extend_from_slice(b"\",\"collection\":\"");
        out.extend_from_slice(collection.as_bytes());
        out.extend_from_slice(b"\",\"rkey\":\"");
        // Clients stamp records a moment before the relay sees them; a few backfill old ones.
        let created_us = if self.rng.percent(1) {
            self.time_us - self.rng.below(86_400_000_000)
        } else {
            self.time_us - 100_000 - self.rng.below(3_000_000)
        };
        let rkey_us = if create {
            created_us
        } else {
            // Deleting or editing something made days to months ago.
            self.time_us - 60_000_000 - self.rng.below(120 * 86_400_000_000)
        };
        if matches!(c, PROFILE | 13) {
            out.extend_from_slice(b"self");
        } else {
            push_tid(out, rkey_us, clock);
        }
        out.push(b'"');
        if operation != "delete" {
            out.extend_from_slice(b",\"record\":");
            let record_start = out.len();
            self.record(out, c, user, created_us, rkey_us, clock);
            if self.quirks.pending_deep {
                self.quirks.pending_deep = false;
                out.truncate(record_start);
                deep_record(out, collection, created_us);
            }
            out.extend_from_slice(b",\"cid\":\"");
            self.random_cid(out, b"bafyrei");
            out.push(b'"');
        }
        out.extend_from_slice(b"}}");
    }

    fn random_cid(&mut self, out: &mut Vec<u8>, prefix: &[u8]) {
        let words = [
            self.rng.next_u64(),
            self.rng.next_u64(),
            self.rng.next_u64(),
            self.rng.next_u64(),
            self.rng.next_u64(),
        ];
        push_cid(out, prefix, &words);
    }

    fn created_at(&mut self, out: &mut Vec<u8>, created_us: u64) {
        out.extend_from_slice(b"\"createdAt\":\"");
        // Most clients write milliseconds; a few write microseconds or a +00:00 offset.
        match self.rng.below(1000) {
            0..5 => push_iso_offset(out, created_us),
            5..15 => push_iso_micros(out, created_us),
            _ => push_iso_millis(out, created_us),
        }
        out.push(b'"');
    }

    fn record(
        &mut self,
        out: &mut Vec<u8>,
        c: usize,
        user: u64,
        created_us: u64,
        rkey_us: u64,
        clock: u64,
    ) {
        let collection = COLLECTIONS[c].0;
        out.extend_from_slice(b"{\"$type\":\"");
        out.extend_from_slice(collection.as_bytes());
        out.extend_from_slice(b"\",");
        match c {
            LIKE | REPOST => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"subject\":");
                let post = self.subject_posts.sample(&mut self.rng);
                self.post_ref(out, post);
                // Likes and reposts of a repost name it in `via` (a newer client feature).
                if self.rng.percent(3) {
                    out.extend_from_slice(b",\"via\":{\"cid\":\"");
                    self.random_cid(out, b"bafyrei");
                    out.extend_from_slice(b"\",\"uri\":\"at://");
                    let reposter = self.users[REPOST].sample(&mut self.rng);
                    push_did(out, reposter);
                    out.extend_from_slice(b"/app.bsky.feed.repost/");
                    push_tid(out, created_us - self.rng.below(3_600_000_000), clock);
                    out.extend_from_slice(b"\"}");
                }
            }
            FOLLOW | BLOCK => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"subject\":\"");
                let target = self.followed.sample(&mut self.rng);
                push_did(out, target);
                out.push(b'"');
            }
            POST => self.post(out, created_us),
            PROFILE => self.profile(out, user, created_us),
            LISTITEM => {
                self.created_at(out, created_us);
                // Items go into one of the author's own lists.
                out.extend_from_slice(b",\"list\":\"at://");
                push_did(out, user);
                out.extend_from_slice(b"/app.bsky.graph.list/");
                let list = self.rng.below(3);
                push_tid(out, own_record_us(user, list), clock);
                out.extend_from_slice(b"\",\"subject\":\"");
                let member = self.followed.sample(&mut self.rng);
                push_did(out, member);
                out.push(b'"');
            }
            LISTBLOCK => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"subject\":\"at://");
                let list = self.mod_lists.sample(&mut self.rng);
                let owner = mix64(list ^ 0x11) % 2_000_000;
                push_did(out, owner);
                out.extend_from_slice(b"/app.bsky.graph.list/");
                push_tid(out, own_record_us(owner, list), mix64(owner) & 1023);
                out.extend_from_slice(b"\"");
            }
            STARTERPACK => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"description\":");
                let d = self.rng.pick(corpus::PROFILE_DESCRIPTIONS);
                push_str(out, d, Escape::Go);
                out.extend_from_slice(b",\"feeds\":[],\"list\":\"at://");
                push_did(out, user);
                out.extend_from_slice(b"/app.bsky.graph.list/");
                push_tid(out, rkey_us, clock);
                out.extend_from_slice(b"\",\"name\":");
                let name = self.rng.pick(corpus::LIST_NAMES);
                push_str(out, name, Escape::Go);
                if self.rng.percent(50) {
                    out.extend_from_slice(b",\"updatedAt\":\"");
                    push_iso_millis(out, self.time_us - 200_000);
                    out.push(b'"');
                }
            }
            LIST => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"description\":");
                let d = self.rng.pick(corpus::PROFILE_DESCRIPTIONS);
                push_str(out, d, Escape::Go);
                out.extend_from_slice(b",\"name\":");
                let name = self.rng.pick(corpus::LIST_NAMES);
                push_str(out, name, Escape::Go);
                out.extend_from_slice(if self.rng.percent(40) {
                    b",\"purpose\":\"app.bsky.graph.defs#modlist\""
                } else {
                    b",\"purpose\":\"app.bsky.graph.defs#curatelist\""
                });
            }
            THREADGATE => {
                out.extend_from_slice(
                    b"\"allow\":[{\"$type\":\"app.bsky.feed.threadgate#followingRule\"}",
                );
                if self.rng.percent(50) {
                    out.extend_from_slice(b",{\"$type\":\"app.bsky.feed.threadgate#mentionRule\"}");
                }
                out.extend_from_slice(b"],");
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"hiddenReplies\":[],\"post\":\"at://");
                // A threadgate shares its post's record key.
                push_did(out, user);
                out.extend_from_slice(b"/app.bsky.feed.post/");
                push_tid(out, rkey_us, clock);
                out.push(b'"');
            }
            POSTGATE => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"detachedEmbeddingUris\":[],\"embeddingRules\":[{\"$type\":\"app.bsky.feed.postgate#disableRule\"}],\"post\":\"at://");
                push_did(out, user);
                out.extend_from_slice(b"/app.bsky.feed.post/");
                push_tid(out, rkey_us, clock);
                out.push(b'"');
            }
            GENERATOR => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"description\":");
                let d = self.rng.pick(corpus::PROFILE_DESCRIPTIONS);
                push_str(out, d, Escape::Go);
                out.extend_from_slice(b",\"did\":\"did:web:");
                crate::names::push_name(out, user);
                out.extend_from_slice(b".feeds.example.com\",\"displayName\":");
                let name = self.rng.pick(corpus::LIST_NAMES);
                push_str(out, name, Escape::Go);
            }
            _ => {
                self.created_at(out, created_us);
                out.extend_from_slice(b",\"policies\":{\"labelValueDefinitions\":[{\"adultOnly\":false,\"blurs\":\"content\",\"defaultSetting\":\"warn\",\"identifier\":\"spoiler\",\"locales\":[{\"description\":\"Spoilers for a show, film or book\",\"lang\":\"en\",\"name\":\"Spoiler\"}],\"severity\":\"inform\"}],\"labelValues\":[\"spoiler\",\"spam\"]}");
            }
        }
        out.push(b'}');
    }

    /// `{"cid":…,"uri":…}` of the post `post`: author, record key and CID are functions of the
    /// post id, so every like of a popular post names it identically.
    fn post_ref(&self, out: &mut Vec<u8>, post: u64) {
        out.extend_from_slice(b"{\"cid\":\"");
        let words = [
            mix64(post ^ 0xc1d0),
            mix64(post ^ 0xc1d1),
            mix64(post ^ 0xc1d2),
            mix64(post ^ 0xc1d3),
            mix64(post ^ 0xc1d4),
        ];
        push_cid(out, b"bafyrei", &words);
        out.extend_from_slice(b"\",\"uri\":\"at://");
        let author = self.post_authors.at(unit_of(post ^ 0xa07));
        push_did(out, author);
        out.extend_from_slice(b"/app.bsky.feed.post/");
        // Most interactions are with posts from the last hours, a long tail with older ones.
        let age = (unit_of(post ^ 0xa9e).powi(3) * 14.0 * 86_400_000_000.0) as u64;
        push_tid(out, START_TIME_US - 1_000_000 - age, mix64(author) & 1023);
        out.extend_from_slice(b"\"}");
    }

    fn blob(&mut self, out: &mut Vec<u8>, mime: &str, size: u64) {
        out.extend_from_slice(b"{\"$type\":\"blob\",\"ref\":{\"$link\":\"");
        self.random_cid(out, b"bafkrei");
        out.extend_from_slice(b"\"},\"mimeType\":\"");
        out.extend_from_slice(mime.as_bytes());
        out.extend_from_slice(b"\",\"size\":");
        push_u64(out, size);
        out.push(b'}');
    }

    fn images(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"$type\":\"app.bsky.embed.images\",\"images\":[");
        let n = match self.rng.below(100) {
            0..70 => 1,
            70..82 => 2,
            82..90 => 3,
            _ => 4,
        };
        for i in 0..n {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"alt\":");
            let alt = self.rng.pick(corpus::ALT_TEXTS);
            push_str(out, alt, Escape::Go);
            out.extend_from_slice(b",\"aspectRatio\":{\"height\":");
            let (h, w) = (self.rng.range(400, 4000), self.rng.range(400, 4000));
            push_u64(out, h);
            out.extend_from_slice(b",\"width\":");
            push_u64(out, w);
            out.extend_from_slice(b"},\"image\":");
            let size = self.rng.range(30_000, 1_000_000);
            self.blob(out, "image/jpeg", size);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }

    fn post(&mut self, out: &mut Vec<u8>, created_us: u64) {
        self.created_at(out, created_us);
        let x = self.rng.below(100);
        let lang = self.lang_cdf.partition_point(|&e| e <= x);
        let lang = lang.min(corpus::POST_LANGUAGES.len() - 1);
        let embed = self.rng.below(100);
        self.compose_text(lang, embed < 31);
        // Embeds (keys are in sorted order: embed, facets, langs, reply, text).
        match embed {
            0..16 => {
                out.extend_from_slice(b",\"embed\":");
                self.images(out);
            }
            16..23 => {
                out.extend_from_slice(b",\"embed\":{\"$type\":\"app.bsky.embed.external\",\"external\":{\"description\":");
                let d = self.rng.pick(corpus::EXTERNAL_DESCRIPTIONS);
                push_str(out, d, Escape::Go);
                if self.rng.percent(80) {
                    out.extend_from_slice(b",\"thumb\":");
                    let size = self.rng.range(20_000, 400_000);
                    self.blob(out, "image/jpeg", size);
                }
                out.extend_from_slice(b",\"title\":");
                let t = self.rng.pick(corpus::EXTERNAL_TITLES);
                push_str(out, t, Escape::Go);
                out.extend_from_slice(b",\"uri\":\"");
                let site = self.rng.index(corpus::LINK_SITES.len());
                let slug = self.rng.next_u64();
                push_link(out, site, slug);
                out.extend_from_slice(b"\"}}");
            }
            23..28 => {
                out.extend_from_slice(
                    b",\"embed\":{\"$type\":\"app.bsky.embed.record\",\"record\":",
                );
                let quoted = self.subject_posts.sample(&mut self.rng);
                self.post_ref(out, quoted);
                out.push(b'}');
            }
            28..29 => {
                out.extend_from_slice(
                    b",\"embed\":{\"$type\":\"app.bsky.embed.recordWithMedia\",\"media\":",
                );
                self.images(out);
                out.extend_from_slice(
                    b",\"record\":{\"$type\":\"app.bsky.embed.record\",\"record\":",
                );
                let quoted = self.subject_posts.sample(&mut self.rng);
                self.post_ref(out, quoted);
                out.extend_from_slice(b"}}");
            }
            29..31 => {
                out.extend_from_slice(b",\"embed\":{\"$type\":\"app.bsky.embed.video\",\"aspectRatio\":{\"height\":1920,\"width\":1080},\"video\":");
                let size = self.rng.range(500_000, 50_000_000);
                self.blob(out, "video/mp4", size);
                out.push(b'}');
            }
            _ => {}
        }
        if !self.facets.is_empty() {
            out.extend_from_slice(b",\"facets\":[");
            for (i, facet) in self.facets.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"features\":[{\"$type\":\"app.bsky.richtext.facet#");
                match facet.feature {
                    Feature::Mention(user) => {
                        out.extend_from_slice(b"mention\",\"did\":\"");
                        push_did(out, user);
                    }
                    Feature::Link(site, slug) => {
                        out.extend_from_slice(b"link\",\"uri\":\"");
                        push_link(out, site, slug);
                    }
                    Feature::Tag(tag) => {
                        out.extend_from_slice(b"tag\",\"tag\":\"");
                        out.extend_from_slice(corpus::HASHTAGS[tag].as_bytes());
                    }
                }
                out.extend_from_slice(b"\"}],\"index\":{\"byteEnd\":");
                push_u64(out, facet.end as u64);
                out.extend_from_slice(b",\"byteStart\":");
                push_u64(out, facet.start as u64);
                out.extend_from_slice(b"}}");
            }
            out.push(b']');
        }
        match self.rng.below(100) {
            // Some clients send no langs, some two.
            0..3 => {}
            3..7 => {
                out.extend_from_slice(b",\"langs\":[\"");
                out.extend_from_slice(corpus::POST_LANGUAGES[lang].0.as_bytes());
                out.extend_from_slice(if lang == 0 {
                    b"\",\"ja\"]"
                } else {
                    b"\",\"en\"]"
                });
            }
            _ => {
                out.extend_from_slice(b",\"langs\":[\"");
                out.extend_from_slice(corpus::POST_LANGUAGES[lang].0.as_bytes());
                out.extend_from_slice(b"\"]");
            }
        }
        if self.rng.percent(40) {
            let parent = self.subject_posts.sample(&mut self.rng);
            out.extend_from_slice(b",\"reply\":{\"parent\":");
            self.post_ref(out, parent);
            out.extend_from_slice(b",\"root\":");
            // Half the replies answer the thread's first post directly.
            let root = if self.rng.percent(50) {
                parent
            } else {
                self.subject_posts.sample(&mut self.rng)
            };
            self.post_ref(out, root);
            out.push(b'}');
        }
        out.extend_from_slice(b",\"text\":\"");
        push_str_body(out, &self.text, Escape::Go);
        out.push(b'"');
    }

    /// Builds the post text in `self.text` and its facets (UTF-8 byte ranges) in `self.facets`.
    fn compose_text(&mut self, lang: usize, has_embed: bool) {
        self.text.clear();
        self.facets.clear();
        let sentences = corpus::POST_LANGUAGES[lang].2;
        if self.rng.percent(5) {
            let user = self.followed.sample(&mut self.rng);
            let start = self.text.len();
            let mut handle = Vec::with_capacity(32);
            push_handle(&mut handle, user);
            self.text.push('@');
            self.text.push_str(&String::from_utf8_lossy(&handle));
            self.facets.push(Facet {
                start,
                end: self.text.len(),
                feature: Feature::Mention(user),
            });
            self.text.push(' ');
        }
        let n = match self.rng.below(100) {
            // Only posts with an image or a link are sometimes just that, without text.
            0..10 if has_embed => 0,
            0..3 => 1,
            3..50 => 1,
            50..80 => 2,
            80..93 => 3,
            _ => 5,
        };
        for i in 0..n {
            if i > 0 {
                self.text
                    .push_str(if self.rng.percent(15) { "\n\n" } else { " " });
            }
            self.text.push_str(self.rng.pick(sentences));
        }
        if self.quirks.pending_nul && n > 0 {
            self.quirks.pending_nul = false;
            self.text.push('\u{0}');
        }
        if self.rng.percent(8) {
            let site = self.rng.index(corpus::LINK_SITES.len());
            let slug = self.rng.next_u64();
            if !self.text.is_empty() {
                self.text.push_str("\n\n");
            }
            let start = self.text.len();
            // The app shows a shortened link; the facet carries the full URI.
            self.text.push_str(corpus::LINK_SITES[site].0);
            self.text.push('/');
            let mut shown = Vec::with_capacity(16);
            push_base32_bits(&mut shown, &[slug], 8);
            self.text.push_str(&String::from_utf8_lossy(&shown));
            self.text.push_str("...");
            self.facets.push(Facet {
                start,
                end: self.text.len(),
                feature: Feature::Link(site, slug),
            });
        }
        if self.rng.percent(8) {
            let mut tag = self.rng.index(corpus::HASHTAGS.len());
            for _ in 0..1 + self.rng.below(3) {
                // Consecutive tags differ.
                tag =
                    (tag + 1 + self.rng.index(corpus::HASHTAGS.len() - 1)) % corpus::HASHTAGS.len();
                self.text.push(' ');
                let start = self.text.len();
                self.text.push('#');
                self.text.push_str(corpus::HASHTAGS[tag]);
                self.facets.push(Facet {
                    start,
                    end: self.text.len(),
                    feature: Feature::Tag(tag),
                });
            }
        }
        if self.rng.percent(20) {
            self.text.push(' ');
            self.text.push_str(self.rng.pick(corpus::EMOJI));
        }
    }

    fn profile(&mut self, out: &mut Vec<u8>, user: u64, created_us: u64) {
        out.extend_from_slice(b"\"avatar\":");
        let size = self.rng.range(20_000, 900_000);
        self.blob(out, "image/jpeg", size);
        if self.rng.percent(50) {
            out.extend_from_slice(b",\"banner\":");
            let size = self.rng.range(50_000, 1_500_000);
            self.blob(out, "image/jpeg", size);
        }
        out.push(b',');
        self.created_at(out, created_us);
        out.extend_from_slice(b",\"description\":");
        let d = self.rng.pick(corpus::PROFILE_DESCRIPTIONS);
        push_str(out, d, Escape::Go);
        out.extend_from_slice(b",\"displayName\":");
        push_str(out, &display_name(user), Escape::Go);
        if self.rng.percent(20) {
            out.extend_from_slice(b",\"pinnedPost\":");
            let post = self.subject_posts.sample(&mut self.rng);
            self.post_ref(out, post);
        }
    }
}

impl Iterator for BlueskyGenerator {
    /// One document without its newline.
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut line = Vec::with_capacity(1024);
        if !self.next_document(&mut line) {
            return None;
        }
        line.pop();
        Some(String::from_utf8_lossy(&line).into_owned())
    }
}

/// A stable creation time for the `k`-th list (or other long-lived record) of `owner`.
fn own_record_us(owner: u64, k: u64) -> u64 {
    let days = (unit_of(owner ^ (k << 40)) * 300.0 * 86_400_000_000.0) as u64;
    START_TIME_US - 86_400_000_000 - days
}

/// A CIDv1 (dag-cbor `bafyrei…` or raw `bafkrei…`, sha2-256) from 300 random bits. The
/// character after the prefix and the last one carry only 3 hash bits each in real CIDs (the rest
/// is multihash header and padding), so only 8 values appear there.
fn push_cid(out: &mut Vec<u8>, prefix: &[u8], words: &[u64; 5]) {
    out.extend_from_slice(prefix);
    let start = out.len();
    push_base32_bits(out, words, 52);
    out[start] = BASE32[(words[4] >> 61) as usize];
    out[start + 51] = BASE32[((words[4] >> 58 & 7) << 2) as usize];
}

fn push_link(out: &mut Vec<u8>, site: usize, slug: u64) {
    out.extend_from_slice(corpus::LINK_SITES[site].1.as_bytes());
    push_base32_bits(out, &[slug, mix64(slug)], 11 + (slug % 12) as usize);
}

/// The quirk record: with the event and commit objects around it the line is 200 levels deep.
fn deep_record(out: &mut Vec<u8>, collection: &str, created_us: u64) {
    out.extend_from_slice(b"{\"$type\":\"");
    out.extend_from_slice(collection.as_bytes());
    out.extend_from_slice(b"\",\"createdAt\":\"");
    push_iso_millis(out, created_us);
    out.extend_from_slice(b"\",\"nested\":");
    for _ in 0..197 {
        out.extend_from_slice(b"{\"nested\":");
    }
    out.extend_from_slice(b"null");
    for _ in 0..198 {
        out.push(b'}');
    }
}

const TID_ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";

/// The 13-character sortable base32 TID of (microseconds, clock id), as AT Protocol record keys
/// and revisions are written, so keys sort by time like the real ones.
fn push_tid(out: &mut Vec<u8>, micros: u64, clock: u64) {
    let value = ((micros & ((1 << 53) - 1)) << 10) | (clock & 1023);
    for i in (0..13).rev() {
        out.push(TID_ALPHABET[((value >> (i * 5)) & 31) as usize]);
    }
}

/// Writes `options.docs` Jetstream-like events as NDJSON.
pub fn write_bluesky<W: Write + ?Sized>(
    options: &BlueskyOptions,
    out: &mut W,
) -> Result<GenStats, DatagenError> {
    let mut generator = BlueskyGenerator::new(options);
    crate::drive(
        |buffer| generator.next_document(buffer),
        out,
        "writing Bluesky documents",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generate(docs: u64, seed: u64, quirks: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_bluesky(&BlueskyOptions { seed, docs, quirks }, &mut out).unwrap();
        out
    }

    #[test]
    fn tids_sort_by_time() {
        let mut a = Vec::new();
        push_tid(&mut a, START_TIME_US, 5);
        let mut b = Vec::new();
        push_tid(&mut b, START_TIME_US + 1, 0);
        assert!(a < b);
        assert_eq!(a.len(), 13);
        // Real TIDs of late 2024 start with "3lb".
        assert!(a.starts_with(b"3lb"), "{}", String::from_utf8_lossy(&a));
    }

    #[test]
    fn first_document_and_iterator() {
        let mut generator = BlueskyGenerator::new(&BlueskyOptions {
            seed: 1,
            docs: 3,
            quirks: false,
        });
        let lines: Vec<String> = generator.by_ref().collect();
        assert_eq!(lines.len(), 3);
        let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["time_us"].as_u64(), Some(START_TIME_US));
        let joined: String = lines.iter().map(|l| format!("{l}\n")).collect();
        assert_eq!(joined.as_bytes(), generate(3, 1, false));
    }

    #[test]
    fn quirks_change_only_quirky_lines() {
        let plain = generate(100_000, 5, false);
        let quirky = generate(100_000, 5, true);
        let plain: Vec<&[u8]> = plain.split(|b| *b == b'\n').collect();
        let quirky: Vec<&[u8]> = quirky.split(|b| *b == b'\n').collect();
        assert_eq!(plain.len(), quirky.len());
        let differing: Vec<usize> = (0..plain.len())
            .filter(|&i| plain[i] != quirky[i])
            .collect();
        assert_eq!(differing.len(), 3, "{differing:?}");
        let text = |i: usize| String::from_utf8(quirky[i].to_vec()).unwrap();
        assert!(differing.iter().any(|&i| text(i).contains("\\u0000")));
        let deep = differing
            .iter()
            .find(|&&i| text(i).contains("\"nested\""))
            .copied()
            .unwrap();
        let depth = text(deep)
            .bytes()
            .scan(0i32, |d, b| {
                *d += i32::from(b == b'{') - i32::from(b == b'}');
                Some(*d)
            })
            .max()
            .unwrap();
        assert_eq!(depth, 200);
        let parses = |line: &[u8]| {
            let mut deserializer = serde_json::Deserializer::from_slice(line);
            deserializer.disable_recursion_limit();
            matches!(
                deserializer.into_iter::<serde_json::Value>().next(),
                Some(Ok(serde_json::Value::Object(_)))
            )
        };
        assert!(parses(quirky[deep]));
        let broken = differing.iter().filter(|&&i| !parses(quirky[i])).count();
        assert_eq!(broken, 1);
    }
}
