//! Search across all operations: what a query string is looking for, and how names are
//! cut into the words a search can find.
//!
//! One query string, classified without a database: a phone number (normalized as
//! intake normalizes it, so any way of writing it finds the same lead), an e-mail
//! address (normalized as intake does), or anything else, which is tried as an
//! operation key (exact and prefix), a `crm_id` (exact) and a name (each query word the
//! prefix of a word of the name, case-insensitively).

use super::contact::{self, Region};

/// At most this many words of a name are kept for search (a name is a few words; a
/// payload's "name" field can be anything, and each word is a row).
pub const MAX_NAME_WORDS: usize = 8;
/// A name word is cut to this many characters.
pub const MAX_WORD_CHARS: usize = 32;
/// A name is stored for display cut to this many characters.
pub const MAX_NAME_CHARS: usize = 200;
/// A query longer than this (in characters) is refused.
pub const MAX_QUERY_CHARS: usize = 255;

/// What one query string looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchQuery {
    /// A phone number, in E.164 as intake stores it.
    Phone(String),
    /// An e-mail address, trimmed and lower-cased as intake stores it.
    Email(String),
    /// Anything else: an operation key (exact or prefix), a `crm_id` (exact), and the
    /// name words (each a prefix of a word of the name; none when the text has no
    /// letters or digits). `key` is the key prefix searched: the text, or in a tenant's
    /// console the text under the tenant's prefix ([`SearchQuery::in_tenant`]).
    Text {
        text: String,
        words: Vec<String>,
        key: String,
    },
}

/// Why a query string cannot be searched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("the search query is empty")]
    Empty,
    #[error("the search query is longer than {MAX_QUERY_CHARS} characters")]
    TooLong,
    #[error("the search query contains a control character")]
    Control,
    #[error("`{0}` contains @ but is not an e-mail address")]
    NotAnEmail(String),
}

/// Which field of an operation a search result matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchedField {
    OperationId,
    CrmId,
    Name,
    Phone,
    Email,
}

super::named_enum!(MatchedField, "matched field", {
    OperationId => "operation_id",
    CrmId => "crm_id",
    Name => "name",
    Phone => "phone",
    Email => "email",
});

impl SearchQuery {
    /// Classifies `raw`: a phone if it is written with phone characters only (digits,
    /// `+`, spaces, `-`, `.`, brackets), has at least 7 digits and is a valid number in
    /// `region` (intake's `[matching] default_region`); an e-mail if it contains `@`;
    /// text otherwise.
    pub fn parse(raw: &str, region: Region) -> Result<SearchQuery, QueryError> {
        let q = raw.trim();
        if q.is_empty() {
            return Err(QueryError::Empty);
        }
        if q.chars().count() > MAX_QUERY_CHARS {
            return Err(QueryError::TooLong);
        }
        if q.chars().any(char::is_control) {
            return Err(QueryError::Control);
        }
        let phone_chars = q
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '+' | ' ' | '-' | '.' | '(' | ')'));
        let digits = q.chars().filter(char::is_ascii_digit).count();
        if phone_chars && digits >= 7 {
            if let Some(e164) = contact::normalize_phone(q, region) {
                return Ok(SearchQuery::Phone(e164));
            }
        }
        if q.contains('@') {
            return contact::normalize_email(q)
                .map(SearchQuery::Email)
                .ok_or_else(|| QueryError::NotAnEmail(q.to_owned()));
        }
        Ok(SearchQuery::Text {
            text: q.to_owned(),
            words: words(q),
            key: q.to_owned(),
        })
    }

    /// The query as tenant `slug`'s console searches: its keys are `<slug>/<source>:<key>`,
    /// so a key typed as the tenant's integration knows it (`site:order-9`) is looked for
    /// as `<slug>/site:order-9`; a key typed with the tenant's prefix is kept as it is.
    /// The default tenant's keys have no prefix.
    pub fn in_tenant(self, slug: &str) -> SearchQuery {
        match self {
            SearchQuery::Text { text, words, key }
                if slug != super::TenantSlug::DEFAULT && !key.starts_with(&format!("{slug}/")) =>
            {
                SearchQuery::Text {
                    key: format!("{slug}/{key}"),
                    text,
                    words,
                }
            }
            q => q,
        }
    }
}

/// The words of `text` as search keeps them: split at everything that is not a letter
/// or a digit, lower-cased (every script: `Иван` → `иван`), `ё` read as `е` (Russian
/// writes both for the same name), each cut to [`MAX_WORD_CHARS`], without repeats, at
/// most [`MAX_NAME_WORDS`], in order.
pub fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for w in text.split(|c: char| !c.is_alphanumeric()) {
        if w.is_empty() {
            continue;
        }
        let w: String = w
            .chars()
            .flat_map(char::to_lowercase)
            .map(|c| if c == 'ё' { 'е' } else { c })
            .take(MAX_WORD_CHARS)
            .collect();
        if !out.contains(&w) {
            out.push(w);
            if out.len() == MAX_NAME_WORDS {
                break;
            }
        }
    }
    out
}

/// The name as kept for display: trimmed, whitespace runs made one space, control
/// characters dropped, cut to [`MAX_NAME_CHARS`]. `None` when nothing is left.
pub fn display_name(raw: &str) -> Option<String> {
    let cleaned: Vec<&str> = raw
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let name: String = cleaned.join(" ").chars().take(MAX_NAME_CHARS).collect();
    (!name.is_empty()).then_some(name)
}

/// The stored form of a name's words for filtering a row (`" иван петров "`): each word
/// preceded and followed by a space, so "a word starting with `w`" is the substring
/// `" w"`. `None` for a name without words.
pub fn words_text(words: &[String]) -> Option<String> {
    (!words.is_empty()).then(|| format!(" {} ", words.join(" ")))
}

/// The smallest string greater than every string starting with `prefix` (in code-point
/// order, which is byte order in UTF-8): `prefix <= s < prefix_end(prefix)` is "s starts
/// with prefix", an index range on both backends. `None` when there is no such string
/// (the prefix is empty or all `char::MAX`): no upper bound.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000; // surrogates are not chars
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Where a page of results ended: the next page starts after this operation (results
/// are newest first: by `created_at`, then `operation_id`, both descending). Its text
/// form (`<microseconds since the epoch>:<operation_id>`) is what the CLI and the
/// console hand back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchCursor {
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub operation_id: String,
}

impl std::fmt::Display for SearchCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}",
            self.created_at.timestamp_micros(),
            self.operation_id
        )
    }
}

impl std::str::FromStr for SearchCursor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a search cursor (it comes from a previous page)");
        let (micros, id) = s.split_once(':').ok_or_else(bad)?;
        let micros: i64 = micros.parse().map_err(|_| bad())?;
        let created_at = chrono::DateTime::from_timestamp_micros(micros).ok_or_else(bad)?;
        if id.is_empty() {
            return Err(bad());
        }
        Ok(SearchCursor {
            created_at,
            operation_id: id.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str, w: &[&str]) -> SearchQuery {
        SearchQuery::Text {
            text: t.into(),
            words: w.iter().map(|s| s.to_string()).collect(),
            key: t.into(),
        }
    }

    #[test]
    fn a_tenants_console_looks_for_keys_under_its_prefix() {
        let q = |raw: &str| SearchQuery::parse(raw, Region::default()).unwrap();
        let key = |q: SearchQuery| match q {
            SearchQuery::Text { key, .. } => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            key(q("site:order-9").in_tenant("acme")),
            "acme/site:order-9"
        );
        assert_eq!(key(q("acme/site:o").in_tenant("acme")), "acme/site:o");
        assert_eq!(key(q("site:order-9").in_tenant("default")), "site:order-9");
        // The text itself (a crm_id, a name) is unchanged; phones are not keys.
        let SearchQuery::Text { text, words, .. } = q("Иван 42").in_tenant("acme") else {
            panic!()
        };
        assert_eq!(
            (text.as_str(), words),
            ("Иван 42", vec!["иван".to_string(), "42".into()])
        );
        assert_eq!(
            q("+7 999 123-45-67").in_tenant("acme"),
            q("+7 999 123-45-67")
        );
    }

    #[test]
    fn queries_are_classified() {
        let ru = Region::default();
        let phone = || SearchQuery::Phone("+79991234567".into());
        let table: &[(&str, Result<SearchQuery, QueryError>)] = &[
            // every way intake would read the same phone
            ("8 (999) 123-45-67", Ok(phone())),
            ("+7 999 123 45 67", Ok(phone())),
            ("79991234567", Ok(phone())),
            ("89991234567", Ok(phone())),
            ("  +7-999-123-45-67 ", Ok(phone())),
            ("(999) 123.45.67", Ok(phone())),
            // digits that are no valid phone: a crm_id, a key
            ("100123", Ok(text("100123", &["100123"]))),
            (
                "8 (000) 000-00-00",
                Ok(text("8 (000) 000-00-00", &["8", "000", "00"])),
            ),
            // e-mail, normalized as intake does
            (
                " Ivan.Petrov@Example.RU ",
                Ok(SearchQuery::Email("ivan.petrov@example.ru".into())),
            ),
            ("ivan@", Err(QueryError::NotAnEmail("ivan@".into()))),
            // keys, crm ids and names
            ("site:b12", Ok(text("site:b12", &["site", "b12"]))),
            ("Иван", Ok(text("Иван", &["иван"]))),
            ("иван пЕтр", Ok(text("иван пЕтр", &["иван", "петр"]))),
            ("Пётр", Ok(text("Пётр", &["петр"]))),
            // SQL-special characters are text like any other
            ("50%_off", Ok(text("50%_off", &["50", "off"]))),
            ("%", Ok(text("%", &[]))),
            ("o'neil\\x", Ok(text("o'neil\\x", &["o", "neil", "x"]))),
            // refused
            ("", Err(QueryError::Empty)),
            ("   ", Err(QueryError::Empty)),
            ("a\u{0}b", Err(QueryError::Control)),
            (&"x".repeat(256), Err(QueryError::TooLong)),
        ];
        for (raw, want) in table {
            assert_eq!(&SearchQuery::parse(raw, ru), want, "{raw:?}");
        }
        // The region is intake's: a number without a country code is read in it.
        let kz: Region = "KZ".parse().unwrap();
        assert_eq!(
            SearchQuery::parse("8 (701) 123-45-67", kz),
            Ok(SearchQuery::Phone("+77011234567".into()))
        );
    }

    #[test]
    fn names_become_lower_case_words() {
        let table: &[(&str, &[&str])] = &[
            ("Иван Петров", &["иван", "петров"]),
            ("  ANNA-Maria  o'Neil ", &["anna", "maria", "o", "neil"]),
            (
                "Семён Семёнович Семёнов",
                &["семен", "семенович", "семенов"],
            ),
            ("Анна анна АННА", &["анна"]),
            ("?!", &[]),
            (
                "a b c d e f g h i j",
                &["a", "b", "c", "d", "e", "f", "g", "h"],
            ),
        ];
        for (name, want) in table {
            assert_eq!(words(name), *want, "{name}");
        }
        assert_eq!(words(&"щ".repeat(100))[0].chars().count(), MAX_WORD_CHARS);
        assert_eq!(
            words_text(&words("Иван Петров")).as_deref(),
            Some(" иван петров ")
        );
        assert_eq!(words_text(&[]), None);
        assert_eq!(
            display_name(" Иван \t Петров\n").as_deref(),
            Some("Иван Петров")
        );
        assert_eq!(display_name(" \u{7} "), None);
        assert_eq!(
            display_name(&"я".repeat(500)).unwrap().chars().count(),
            MAX_NAME_CHARS
        );
    }

    #[test]
    fn a_prefix_range_ends_after_every_string_it_starts() {
        let table: &[(&str, Option<&str>)] = &[
            ("иван", Some("ивао")),
            ("site:b1", Some("site:b2")),
            ("a%", Some("a&")),
            ("\u{D7FF}", Some("\u{E000}")),
            ("a\u{10FFFF}", Some("b")),
            ("\u{10FFFF}", None),
            ("", None),
        ];
        for (p, want) in table {
            let end = prefix_end(p);
            assert_eq!(end.as_deref(), *want, "{p:?}");
            if let Some(end) = end {
                let longer = format!("{p}\u{10FFFF}\u{10FFFF}");
                assert!(*p < end.as_str() && longer.as_str() < end.as_str());
            }
        }
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        let c = SearchCursor {
            created_at: chrono::DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap(),
            operation_id: "site:a:b".into(),
        };
        assert_eq!(c.to_string(), "1764000000123456:site:a:b");
        assert_eq!(c.to_string().parse::<SearchCursor>(), Ok(c));
        for bad in ["", "x:site:1", "12", "12:", "99999999999999999999:a"] {
            assert!(bad.parse::<SearchCursor>().is_err(), "{bad}");
        }
    }
}
