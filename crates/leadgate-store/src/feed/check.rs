//! What a subscriber is made of, checked the same way wherever it comes from (`leadgate
//! feed subscribe`, a console's *Add subscriber*, a person's `feed_subscribe` request),
//! and its secret made: the Standard Webhooks secret `whsec_<base64>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use leadgate_domain::Secret;

use super::FEED_EVENT_TYPES;

pub const FEED_SECRET_PREFIX: &str = "whsec_";
/// A generated key's length in bytes (the specification asks for 24 to 64).
pub const FEED_KEY_BYTES: usize = 32;
/// A subscriber's URL is at most this long (bytes).
pub const FEED_URL_MAX: usize = 2000;

/// A new random secret, `whsec_<base64 of 32 bytes>`.
pub fn new_feed_secret() -> Secret {
    let key: [u8; FEED_KEY_BYTES] = rand::random();
    Secret::new(format!("{FEED_SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The key of a secret: `whsec_` then base64 of 24 to 64 bytes. The error never repeats it.
pub fn feed_secret_key(secret: &Secret) -> Result<Vec<u8>, String> {
    let encoded = secret
        .expose()
        .strip_prefix(FEED_SECRET_PREFIX)
        .ok_or_else(|| {
            format!(
                "a feed secret starts with `{FEED_SECRET_PREFIX}` (then base64 of 24 to 64 bytes)"
            )
        })?;
    let key = STANDARD
        .decode(encoded)
        .map_err(|_| "a feed secret is `whsec_` then base64 (the part after it is not)")?;
    if !(24..=64).contains(&key.len()) {
        return Err(format!(
            "a feed secret's key is 24 to 64 bytes (this one is {})",
            key.len()
        ));
    }
    Ok(key)
}

/// Event types from a comma-separated list (`all` or empty: every type), or what is wrong.
pub fn feed_event_types(list: &str) -> Result<Vec<String>, String> {
    let wanted: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if wanted.is_empty() || wanted == ["all"] {
        return Ok(FEED_EVENT_TYPES.map(String::from).to_vec());
    }
    let mut out = Vec::new();
    for t in wanted {
        if !FEED_EVENT_TYPES.contains(&t) {
            return Err(format!(
                "`{}` is not an event type of the feed (they are: {})",
                leadgate_domain::text::escape_controls(t),
                FEED_EVENT_TYPES.join(", ")
            ));
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
    }
    Ok(out)
}

/// A subscriber's URL, checked: http or https, at most 2,000 characters, no spaces or
/// control characters.
pub fn check_feed_url(url: &str) -> Result<(), String> {
    let ok_scheme = url.starts_with("https://") || url.starts_with("http://");
    if !ok_scheme
        || url.len() > FEED_URL_MAX
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(
            "a subscriber's URL is an http:// or https:// URL of at most 2,000 characters".into(),
        );
    }
    Ok(())
}

/// A subscriber's URL as shown: without its query, fragment and user info (a token rides
/// there often enough).
pub fn feed_display_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..cut];
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(host_end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_query_and_user_info() {
        assert_eq!(
            feed_display_url("https://u:p@hooks.example.com:8443/in/x?token=abc#f"),
            "https://hooks.example.com:8443/in/x"
        );
        assert_eq!(feed_display_url("http://h/a@b"), "http://h/a@b");
        assert_eq!(feed_display_url("http://h?x"), "http://h");
    }
}
