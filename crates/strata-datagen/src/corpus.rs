//! Text fragments the generators assemble into post texts, profile descriptions, commit messages
//! and issue bodies. Hand-written in the style of the real samples (several scripts, emoji,
//! markdown, code), so parsers and string functions meet realistic byte patterns.

/// (language tag, weight per 100 posts, sentences). Weights follow Bluesky's late-2024 mix:
/// mostly English, then Japanese and Portuguese.
pub const POST_LANGUAGES: [(&str, u64, &[&str]); 10] = [
    ("en", 57, EN),
    ("ja", 14, JA),
    ("pt", 11, PT),
    ("de", 4, DE),
    ("es", 4, ES),
    ("fr", 3, FR),
    ("ko", 2, KO),
    ("ru", 2, RU),
    ("tr", 2, TR),
    ("zh", 1, ZH),
];

const EN: &[&str] = &[
    "Good morning everyone!",
    "This is the best thing I've seen all week.",
    "Can't believe it's almost December already.",
    "Just finished a new painting, took me three weekends.",
    "Hot take: coffee tastes better after 3pm.",
    "Does anyone know a good tutorial for watercolor skies?",
    "The sunset tonight was unreal.",
    "I love how chill this place is compared to the other site.",
    "Finally moved over here, hi everyone 👋",
    "Reading the new issue of the newsletter and it's so good.",
    "My cat knocked my phone off the table again.",
    "Working on a thread about the history of public libraries.",
    "We need more people talking about local elections.",
    "New episode is up! Link below.",
    "Honestly the best part of this app is the custom feeds.",
    "It's raining again and I'm not mad about it.",
    "Please boost if you can, every share helps.",
    "Can confirm, the soup was worth the wait.",
    "Currently listening to the new album on repeat.",
    "That's a wrap on the first draft of chapter 12!",
    "Someone explain to me why this is still a debate in 2024.",
    "If you're new here, the starter packs are a great way to find people.",
    "Three more days until the holidays, hang in there.",
    "This thread is a masterpiece, read all of it.",
    "lol",
    "same",
    "Wow. Just wow.",
    "I made bread for the first time and it actually rose!",
    "Big news coming next week, stay tuned.",
    "Took the long way home today and found this little bookshop.",
    "Tiny reminder to drink some water and stretch.",
    "The game last night was absolutely wild.",
    "Why does every printer hate me specifically",
    "Open commissions! DM for details, prices in the pinned post.",
    "Spent the whole afternoon debugging a missing semicolon.",
    "The \"quick fix\" took four hours, as usual.",
    "Posting my sketchbook pages from this month.",
    "Happy Thursday! What are you all reading right now?",
    "I'm so tired of doomscrolling, here's a picture of my dog instead.",
    "This is your sign to call your friends back.",
];

const JA: &[&str] = &[
    "おはようございます！今日もよろしくお願いします。",
    "今日は寒いですね。",
    "新しい絵を描きました！",
    "やっとこっちに引っ越してきました。",
    "猫がかわいすぎる問題",
    "ラーメン食べたい。",
    "明日は仕事休みなのでゆっくりします。",
    "この曲ずっと聴いてる🎧",
    "ありがとうございました！",
    "フォローありがとうございます！",
    "今日の空がきれいだった📷",
    "締め切りが近いのに全然進んでない……",
    "週末は展示に行ってきます。",
    "おつかれさまでした〜",
];

const PT: &[&str] = &[
    "Bom dia, gente!",
    "Alguém mais acordado a essa hora?",
    "Que dia lindo hoje em São Paulo.",
    "Finalmente cheguei aqui, oi pessoal!",
    "Não aguento mais esse calor.",
    "Muito obrigado a todos pelo carinho ❤️",
    "Esse jogo de ontem foi inacreditável.",
    "Preciso de recomendações de livros, me ajudem.",
    "O café de hoje ficou perfeito.",
    "Tô ouvindo esse álbum sem parar.",
    "Vamos que vamos, sextou!",
    "Gente, que saudade do Twitter antigo.",
    "Alguém sabe se vai chover amanhã?",
];

const DE: &[&str] = &[
    "Guten Morgen zusammen!",
    "Endlich Wochenende.",
    "Heute ist es wirklich ungemütlich draußen.",
    "Danke für die vielen Follows!",
    "Schönen Abend euch allen.",
    "Kann mir jemand ein gutes Buch empfehlen?",
    "Die Bahn ist mal wieder zu spät. Überraschung.",
    "Ich habe heute zum ersten Mal Brot gebacken.",
];

const ES: &[&str] = &[
    "¡Buenos días a todos!",
    "Qué día tan bonito hace hoy.",
    "Por fin llegué a esta red, ¡hola!",
    "¿Alguien más viendo el partido?",
    "Gracias por los follows, de verdad.",
    "Necesito vacaciones urgentemente.",
    "Esta canción me tiene obsesionada.",
    "Mañana empiezo el gimnasio. Otra vez.",
];

const FR: &[&str] = &[
    "Bonjour tout le monde !",
    "Enfin arrivé ici, salut à tous.",
    "Il fait un temps magnifique à Paris aujourd'hui.",
    "Quelqu'un a des recommandations de séries ?",
    "Merci pour tous vos messages ❤️",
    "Le café de ce matin était parfait.",
];

const KO: &[&str] = &[
    "좋은 아침입니다!",
    "오늘 날씨 너무 좋다",
    "드디어 여기로 이사 왔어요",
    "팔로우 감사합니다!",
    "이 노래 계속 듣고 있어요",
    "주말에 뭐 하세요?",
];

const RU: &[&str] = &[
    "Доброе утро всем!",
    "Сегодня такой красивый закат.",
    "Наконец-то перебрался сюда, всем привет.",
    "Спасибо за подписку!",
    "Кто-нибудь может посоветовать хорошую книгу?",
];

const TR: &[&str] = &[
    "Günaydın herkese!",
    "Bugün hava çok güzel.",
    "Sonunda buraya geldim, merhaba!",
    "Takip için teşekkürler.",
    "Bu şarkıyı dinlemeden geçmeyin.",
];

const ZH: &[&str] = &[
    "大家早上好！",
    "今天天气真好。",
    "终于搬到这里来了。",
    "谢谢大家的关注！",
];

pub const EMOJI: &[&str] = &[
    "😂", "❤️", "🦋", "✨", "🔥", "😭", "🥺", "🙏", "👀", "💀", "🎉", "😍", "💙", "🌸", "☕", "🐈",
    "📚", "🎨", "🤣", "😊",
];

pub const HASHTAGS: &[&str] = &[
    "art",
    "photography",
    "bookstodon",
    "nature",
    "mastoart",
    "writing",
    "music",
    "NFL",
    "politics",
    "gamedev",
    "cats",
    "dogsofbluesky",
    "ttrpg",
    "booksky",
    "science",
    "AcademicSky",
    "IndieDev",
    "furryart",
    "OC",
    "news",
];

/// (display host, full URL prefix) pairs for links in posts and external embeds.
pub const LINK_SITES: &[(&str, &str)] = &[
    ("www.youtube.com", "https://www.youtube.com/watch?v="),
    ("youtu.be", "https://youtu.be/"),
    ("www.nytimes.com", "https://www.nytimes.com/2024/11/21/us/"),
    (
        "www.theguardian.com",
        "https://www.theguardian.com/world/2024/nov/21/",
    ),
    ("open.spotify.com", "https://open.spotify.com/track/"),
    ("github.com", "https://github.com/"),
    (
        "www.washingtonpost.com",
        "https://www.washingtonpost.com/politics/2024/11/21/",
    ),
    ("bsky.app", "https://bsky.app/profile/"),
    ("substack.com", "https://substack.com/home/post/p-"),
    ("www.bbc.co.uk", "https://www.bbc.co.uk/news/articles/"),
    ("media.tenor.com", "https://media.tenor.com/"),
];

pub const EXTERNAL_TITLES: &[&str] = &[
    "What the election results mean for the next four years",
    "The 50 best albums of 2024",
    "How to make the perfect sourdough at home",
    "Scientists discover a new species of deep-sea octopus",
    "Live updates: the latest news from around the world",
    "Why everyone is leaving X for Bluesky",
    "A beginner's guide to watercolor painting",
    "The quiet revolution in public transport",
    "Official Music Video",
    "Thread by @someone on the history of the internet",
];

pub const EXTERNAL_DESCRIPTIONS: &[&str] = &[
    "YouTube video by a small creator",
    "Read the full story on our website.",
    "Listen to this track on Spotify.",
    "The latest breaking news, analysis and opinion.",
    "Contribute to the project by creating an account on GitHub.",
    "",
    "ALT: a cat sitting on a keyboard",
    "An in-depth look at what changed this year & what comes next.",
];

pub const ALT_TEXTS: &[&str] = &[
    "",
    "",
    "",
    "A photo of a sunset over the sea",
    "Screenshot of a news article",
    "A drawing of a cat wearing a tiny hat",
    "A cup of coffee on a wooden table",
    "Digital painting of a forest at night, with glowing mushrooms",
    "A meme with two panels",
    "My dog sleeping on the couch",
];

pub const PROFILE_DESCRIPTIONS: &[&str] = &[
    "Artist. Coffee addict. She/her.",
    "Just here for the vibes 🦋",
    "Writer, reader, occasional gardener.\nViews my own.",
    "Software engineer. Opinions are mine.",
    "Photographer based in Lisbon 📷",
    "イラスト描いてます。無断転載禁止",
    "Jornalista. Apaixonado por futebol e café.",
    "PhD student in marine biology 🐙",
    "Commissions open! Links below ⬇️",
    "Streamer & gamer. Schedule in pinned post.",
    "",
    "He/him • 30s • music, books, bad puns",
];

pub const LIST_NAMES: &[&str] = &[
    "Artists",
    "News",
    "Science folks",
    "Mutuals",
    "Spam accounts",
    "Tech people",
    "Writers",
    "Book people",
    "Game devs",
    "Bots",
];

// ---------------------------------------------------------------------------------------------
// GitHub

pub const COMMIT_MESSAGES: &[&str] = &[
    "Update README.md",
    "Initial commit",
    "Fix typo",
    "Merge pull request #12 from feature/login",
    "Merge branch 'master' of https://github.com/",
    "Add tests for the parser",
    "fix bug in date handling",
    "Bump version to 0.3.1",
    "Refactor the config loader\n\nThe old loader read the file twice.",
    "WIP",
    "...",
    "Update index.html",
    "Remove unused imports",
    "Add .gitignore",
    "Happy new year!",
    "Fix #42: crash when the list is empty",
    "Auto-generated commit by the build server",
    "Update dependencies",
    "first version of the API",
    "Improve error messages",
    "Added Spanish translation",
    "Minor cleanup",
];

pub const ISSUE_TITLES: &[&str] = &[
    "Crash on startup",
    "Add support for Windows",
    "Documentation is out of date",
    "any reason this isn't 1.0?",
    "Build fails with latest version of node",
    "Feature request: dark mode",
    "Memory leak when processing large files",
    "Question about the license",
    "Tests fail on Travis CI",
    "Unicode characters are not displayed correctly",
    "Error: Cannot find module 'express'",
    "Wrong output for negative numbers",
    "Support for Python 3",
];

pub const ISSUE_BODIES: &[&str] = &[
    "",
    ":P",
    "Steps to reproduce:\r\n\r\n1. Install the package\r\n2. Run `npm start`\r\n3. See the error\r\n\r\nExpected: the server starts.\r\nActual: it crashes with `TypeError: undefined is not a function`.",
    "I'm getting this error when I try to build:\n\n```\nerror: linking with `cc` failed: exit code: 1\nnote: ld: library not found for -lssl\n```\n\nAny ideas?",
    "It would be great if this supported \"dark mode\" like the other editors. Thanks for the great work!",
    "When I pass a file larger than 2 GB the process runs out of memory. Tested on Ubuntu 14.04, version 0.9.2.",
    "See the discussion in #123. I think we should just drop support for the old API.",
    "Hi,\r\n\r\nthe example in the README uses `foo.bar()` but that method was removed in 2.0.\r\n\r\nThanks",
    "```python\nimport foo\nfoo.run(path='C:\\\\Users\\\\me')\n```\nraises `UnicodeDecodeError` on Windows.",
    "### Description\r\n\r\nWhen the configuration file contains a key with a dot in its name (for example `server.port`), the loader silently ignores it and falls back to the default value. This took me a while to figure out because there is no warning in the log.\r\n\r\n### Steps to reproduce\r\n\r\n1. Create `config.yml` with `server.port: 8080`\r\n2. Start the service with `--config config.yml`\r\n3. The service listens on port 3000 instead\r\n\r\n### Environment\r\n\r\n- OS: Ubuntu 14.10\r\n- Version: 1.4.2 (installed from npm)\r\n- Node: v0.10.33\r\n\r\nI'd be happy to send a pull request if you can point me to the right place in the code.",
    "This PR adds support for reading gzip-compressed input files.\n\n* detects the magic bytes instead of relying on the extension\n* streams the data, so memory use stays flat for large files\n* adds tests for empty, truncated and concatenated gzip members\n\nBenchmarks on a 2 GB log file:\n\n| | before | after |\n|---|---|---|\n| time | 41 s | 44 s |\n| memory | 2.1 GB | 12 MB |\n\nFixes #311, #318. cc @maintainers",
];

pub const COMMENTS: &[&str] = &[
    "LGTM 👍",
    "Thanks! Merged.",
    "done. the English alphabet is officially stable.",
    "Can you add a test for this?",
    "I can reproduce this on OS X 10.10 as well.",
    "Closing as duplicate of #87.",
    ":+1:",
    "This looks like it might be workable for the fix. I wasn't sure how best to handle that.",
    "Any update on this?",
    "Fixed in master, will be in the next release.",
    "Could you rebase on top of the latest master? There are conflicts now.",
    "@bors r+",
    "Happy new year everyone! 🎉",
];

pub const REPO_WORDS: &[&str] = &[
    "dotfiles",
    "blog",
    "website",
    "api",
    "server",
    "client",
    "core",
    "utils",
    "tools",
    "app",
    "game",
    "bot",
    "docs",
    "demo",
    "lib",
    "cli",
    "engine",
    "parser",
    "plugin",
    "theme",
    "templates",
    "notes",
    "scripts",
    "config",
    "homework",
    "project",
    "detection",
    "tracker",
    "heartbeat",
    "swift",
    "android",
    "ios",
    "react",
    "node",
    "rails",
    "django",
    "vim",
    "emacs",
    "awesome",
    "learning",
    "data",
    "ml",
    "kit",
    "framework",
    "sdk",
    "ui",
    "web",
    "mobile",
];

pub const REPO_DESCRIPTIONS: &[&str] = &[
    "",
    "My personal dotfiles",
    "A fast, small library for parsing things",
    "Solutions to problems found at https://oj.leetcode.com/problems/",
    "Mirror of Apache Spark",
    "Source code for my blog",
    "A simple command line tool",
    "Face detection using OpenCV",
    "Coursera assignments",
    "An open source game engine written in C++",
];

pub const LANGUAGES: &[&str] = &[
    "JavaScript",
    "Python",
    "Java",
    "Ruby",
    "PHP",
    "C++",
    "C",
    "Go",
    "CSS",
    "Shell",
    "Objective-C",
    "C#",
    "Scala",
    "Rust",
    "HTML",
];

pub const BRANCHES: &[&str] = &[
    "develop",
    "gh-pages",
    "feature/login",
    "fix-typo",
    "patch-1",
    "dev",
    "release-2.0",
    "issue-42",
    "refactor",
    "wip",
];

pub const FILE_PATHS: &[&str] = &[
    "src/main.rs",
    "src/effect.cpp",
    "lib/index.js",
    "README.md",
    "app/models/user.rb",
    "setup.py",
    "src/main/java/com/example/App.java",
    "test/test_parser.py",
];

pub const DIFF_HUNKS: &[&str] = &[
    "@@ -1,5 +1,6 @@\n # Project\n+\n This is a simple project.\n-It does things.\n+It does several things.",
    "@@ -469,14 +469,23 @@ std::string effect::disp_desc(bool reduced) const\n     std::vector<desc_freq> values;\n-    values.push_back(desc_freq(get_percentage(\"PAIN\", reduced)));\n+    int val = 0;\n+    val = get_avg_mod(\"PAIN\", reduced);",
    "@@ -10,7 +10,7 @@ function parse(input) {\n-  var result = [];\n+  const result = [];\n   for (var i = 0; i < input.length; i++) {",
    "@@ -3,6 +3,8 @@ import os\n import sys\n+import json\n+\n def main():",
];

pub const WIKI_PAGES: &[&str] = &[
    "Home",
    "Installation",
    "FAQ",
    "Getting-Started",
    "Configuration",
    "API-Reference",
];
