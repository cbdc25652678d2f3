//! The tokenizer. A token is a maximal run of letters and digits (Unicode), lowercased; every
//! other character separates tokens, except that each CJK character (Han, Hiragana, Katakana,
//! Hangul) is a token by itself, since those scripts do not separate words with spaces.
//!
//! So: `GET /api/v2/users?id=42` → `get api v2 users id 42`; `10.0.0.1` → `10 0 0 1` (a phrase
//! finds the address); `3f2a-…` UUIDs → their hex groups; `pipeline_error` → `pipeline error`;
//! `東京タワー` → `東 京 タ ワ ー`... (`ー` is a letter in Unicode, so it is a token too).
//! Predictable rather than linguistic: no stemming, no stop words.

/// Calls `on_token` with each token of `text`, in order, lowercased.
pub fn for_each_token(text: &str, mut on_token: impl FnMut(&str)) {
    if text.is_ascii() {
        return for_each_ascii_token(text, on_token);
    }
    let mut token = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !token.is_empty() {
                on_token(&token);
                token.clear();
            }
            token.push(c);
            on_token(&token);
            token.clear();
        } else if c.is_alphanumeric() {
            if c.is_ascii() {
                token.push(c.to_ascii_lowercase());
            } else {
                token.extend(c.to_lowercase());
            }
        } else if !token.is_empty() {
            on_token(&token);
            token.clear();
        }
    }
    if !token.is_empty() {
        on_token(&token);
    }
}

/// [`for_each_token`] for ASCII text, where a token is a run of ASCII letters and digits: found
/// by bytes and lowercased a token at a time, not pushed character by character (most log
/// lines are ASCII; tokenizing is most of building a text index).
fn for_each_ascii_token(text: &str, mut on_token: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut lower = String::new();
    let mut start = 0;
    while start < bytes.len() {
        let Some(first) = bytes[start..].iter().position(u8::is_ascii_alphanumeric) else {
            return;
        };
        let from = start + first;
        let length = bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_alphanumeric())
            .unwrap_or(bytes.len() - from);
        let token = &text[from..from + length];
        if token.bytes().any(|b| b.is_ascii_uppercase()) {
            lower.clear();
            lower.push_str(token);
            lower.make_ascii_lowercase();
            on_token(&lower);
        } else {
            on_token(token);
        }
        start = from + length;
    }
}

/// Writes `text` into `lower`, lowercased character by character as tokens are (so every token is a substring of
/// it; `str::to_lowercase` differs for a final Greek sigma).
pub(crate) fn lowercase_into(text: &str, lower: &mut String) {
    lower.clear();
    if text.is_ascii() {
        lower.push_str(text);
        lower.make_ascii_lowercase();
        return;
    }
    for c in text.chars() {
        lower.extend(c.to_lowercase());
    }
}

/// The tokens of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |token| out.push(token.to_owned()));
    out
}

/// Scripts written without spaces between words: each character is a token.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F  // CJK Extensions B–F, Compatibility Supplement
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictable_tokens() {
        assert_eq!(
            tokens("GET /api/v2/users?id=42 HTTP/1.1"),
            ["get", "api", "v2", "users", "id", "42", "http", "1", "1"]
        );
        assert_eq!(
            tokens("from 10.0.0.1:8080"),
            ["from", "10", "0", "0", "1", "8080"]
        );
        assert_eq!(
            tokens("id 3F2A9C1E-0b7d-4c4e-9a51-5d2c3e4f6a7b"),
            ["id", "3f2a9c1e", "0b7d", "4c4e", "9a51", "5d2c3e4f6a7b"]
        );
        assert_eq!(
            tokens("pipeline_error: ÉCHEC Straße"),
            ["pipeline", "error", "échec", "straße"]
        );
        assert_eq!(
            tokens("エラー東京error"),
            ["エ", "ラ", "ー", "東", "京", "error"]
        );
        assert_eq!(tokens("서울 접속"), ["서", "울", "접", "속"]);
        assert!(tokens("  -- !! ").is_empty());
    }

    proptest::proptest! {
        /// ASCII text is tokenized as the character-by-character tokenizer does it.
        #[test]
        fn ascii_tokens_are_the_general_tokens(text in "[ -~\t]{0,40}") {
            let mut general = Vec::new();
            let mut token = String::new();
            for c in text.chars() {
                if c.is_alphanumeric() {
                    token.push(c.to_ascii_lowercase());
                } else if !token.is_empty() {
                    general.push(std::mem::take(&mut token));
                }
            }
            if !token.is_empty() {
                general.push(token);
            }
            proptest::prop_assert_eq!(tokens(&text), general);
        }
    }
}
