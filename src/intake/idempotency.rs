//! The `Idempotency-Key` request header as draft-ietf-httpapi-idempotency-key-header-06
//! defines it (§2.1): an RFC 8941 Item whose value is a String, so the key is the
//! string without its quotes (`Idempotency-Key: "lead-1"` is the key `lead-1`, escapes
//! undone, parameters ignored as RFC 8941 §2 lets a field's definition). Parsed by the
//! `sfv` crate, never by hand.
//!
//! An extension, for the integrations written before the draft settled on a string: a
//! value that does not begin with a double quote is the key as it is sent (trimmed) — a
//! bare token such as `lead-1`, but also a UUID or a number, which are not tokens. It is
//! never reinterpreted: `a;b` is the key `a;b`, not `a` with a parameter.
//!
//! Used by the claim API (`POST /v1/operations`) and by every source whose `key` is
//! `header:Idempotency-Key` (the `generic-json` preset), so both read a key alike.

use axum::http::HeaderMap;

use crate::domain::OperationId;

/// The field's name.
pub const HEADER: &str = "idempotency-key";

/// Why a present `Idempotency-Key` names no key (`invalid_key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("send one Idempotency-Key field, not {0}")]
    Several(usize),
    #[error("the Idempotency-Key is not an RFC 8941 string (draft-ietf-httpapi-idempotency-key-header-06 §2.1): {0}")]
    NotAString(String),
    #[error("the Idempotency-Key is not printable ASCII; an RFC 8941 string is")]
    NotAscii,
}

/// Whether a source's `header:` key names this field (field names are case-insensitive).
pub fn is_idempotency_key(header_name: &str) -> bool {
    header_name.eq_ignore_ascii_case(HEADER)
}

/// The key a request's `Idempotency-Key` carries: `None` when there is no such field or it
/// is blank (or the empty string `""`), which the draft calls a missing key.
pub fn key(headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    let mut fields = headers.get_all(HEADER).iter();
    let Some(first) = fields.next() else {
        return Ok(None);
    };
    // RFC 8941 §4.2 joins several field lines with commas, which no Item survives: two
    // keys are one too many, whatever they say.
    let more = fields.count();
    if more > 0 {
        return Err(KeyError::Several(more + 1));
    }
    parse(first.as_bytes())
}

/// One field value (see the module's rules).
pub fn parse(value: &[u8]) -> Result<Option<String>, KeyError> {
    let value = value.trim_ascii();
    if value.is_empty() {
        return Ok(None);
    }
    if value.first() == Some(&b'"') {
        let item = sfv::Parser::new(value)
            .parse::<sfv::Item>()
            .map_err(|e| KeyError::NotAString(e.to_string()))?;
        let Some(s) = item.bare_item.as_string() else {
            // A value that begins with a quote parses as a string or not at all.
            return Err(KeyError::NotAString("not a string".into()));
        };
        let key = s.as_str();
        return Ok((!key.is_empty()).then(|| key.to_owned()));
    }
    // The bare extension: the value as sent.
    if !value.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err(KeyError::NotAscii);
    }
    let key = std::str::from_utf8(value).map_err(|_| KeyError::NotAscii)?;
    Ok(Some(key.to_owned()))
}

/// Whether `key`, sent bare, is read back as itself.
pub fn reads_back_bare(key: &str) -> bool {
    parse(key.as_bytes()).is_ok_and(|k| k.as_deref() == Some(key))
}

/// The field value that carries `key` to a gateway: the key as it is, the form
/// integrations have always passed on, when a gateway reads it back as this operation —
/// a bare key reads back as itself, and a key stored before the draft's parsing
/// (`before_the_draft`, [`earlier_operation`]) is found by its value as sent, by old and
/// new gateways alike. Else an RFC 8941 string: a key made since from a string that
/// begins with a quote or a space. `None` for a key no field can carry (not printable
/// ASCII; never one this module read).
pub fn field_value(key: &str, before_the_draft: bool) -> Option<String> {
    if before_the_draft || reads_back_bare(key) {
        return Some(key.to_owned());
    }
    let s = sfv::StringRef::from_str(key).ok()?;
    Some(sfv::ItemSerializer::new().bare_item(s).finish())
}

/// The operation a request's `Idempotency-Key` claimed before Leadgate read the field as
/// the draft defines it. Until then the field's text was the key, so
/// `Idempotency-Key: "lead-1"` was the operation `api:"lead-1"`; the same request retried
/// after the upgrade must find it, not claim `api:lead-1` and make a second lead in the
/// CRM. Only operations that existed at the upgrade are found this way (migration 0033):
/// one made since under a key that begins with a quote (the string `"\"x\""` is the key
/// `"x"`) is never taken for another request's `"x"`. Asked before the field is parsed,
/// so a value the draft refuses (`"lead-1`) still claims what it claimed before. Only a
/// single field that begins with a quote costs a lookup.
pub async fn earlier_operation(
    store: &dyn crate::store::Store,
    source: &str,
    headers: &HeaderMap,
) -> Result<Option<OperationId>, crate::store::StoreError> {
    let mut fields = headers.get_all(HEADER).iter();
    let (Some(field), None) = (fields.next(), fields.next()) else {
        return Ok(None);
    };
    let value = field.as_bytes().trim_ascii();
    if value.first() != Some(&b'"') {
        return Ok(None);
    }
    let Some(id) = std::str::from_utf8(value)
        .ok()
        .and_then(|v| OperationId::try_from(format!("{source}:{v}")).ok())
    else {
        return Ok(None);
    };
    Ok(store.quoted_before_the_draft(&id).await?.then_some(id))
}

/// What a resource publishes of its keys (§2.3, §2.5): the OpenAPI document's words for
/// the claim API's `Idempotency-Key`, also in README's "Claim API".
pub const SPECIFICATION: &str = "The lead's key (e.g. the form's submission id), as \
draft-ietf-httpapi-idempotency-key-header-06 defines the field: an RFC 8941 string, \
`Idempotency-Key: \"lead-1\"` (the key is `lead-1`; `\\\"` and `\\\\` escape a quote and a \
backslash; parameters are ignored). Extension: a value that does not begin with a quote is \
the key as sent (`Idempotency-Key: lead-1`), never reinterpreted. Printable ASCII; no control, \
zero-width or bidirectional character. Uniqueness (§2.2): the operation is \
`<[claim_api] source>:<key>`, so a key is unique per claim-API source, and a key names one \
payload: its fingerprint is the SHA-256 of the body as RFC 8785 canonical JSON (§2.4: key \
order and whitespace do not count, every value does). Expiry (§2.3): a key does not expire. \
Leadgate keeps every key it has seen for as long as the operations database holds it: \
retention (`[retention] full`, 30 days by default) removes a finished operation's payload \
and contact data but keeps its tombstone (key, fingerprint, status, CRM id), so a repeat \
years later still gets the first result, and another payload under the key still gets \
`422`. Reusing a key for another lead is never possible.";

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(values: &[&str]) -> Result<Option<String>, KeyError> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, v.parse().unwrap());
        }
        key(&h)
    }

    #[test]
    fn a_quoted_key_is_the_string_without_its_quotes() {
        let k = |v: &str| key_of(&[v]);
        assert_eq!(k("\"lead-1\""), Ok(Some("lead-1".into())));
        assert_eq!(
            k("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
            Ok(Some("8e03978e-40d5-43e8-bc93-6894a57f9324".into()))
        );
        assert_eq!(k(r#""a \"b\" \\c""#), Ok(Some(r#"a "b" \c"#.into())));
        assert_eq!(k("\"with space\""), Ok(Some("with space".into())));
        assert_eq!(k("\"lead-1\";v=1"), Ok(Some("lead-1".into())));
        assert_eq!(k("\"\""), Ok(None));
        assert!(matches!(k("\"open"), Err(KeyError::NotAString(_))));
        assert!(matches!(k("\"a\" trailing"), Err(KeyError::NotAString(_))));
        assert!(matches!(k(r#""bad \x""#), Err(KeyError::NotAString(_))));
    }

    #[test]
    fn a_bare_value_is_the_key_as_sent() {
        let k = |v: &str| key_of(&[v]);
        assert_eq!(k("lead-1"), Ok(Some("lead-1".into())));
        assert_eq!(k("  lead-1 "), Ok(Some("lead-1".into())));
        assert_eq!(
            k("8e03978e-40d5-43e8-bc93-6894a57f9324"),
            Ok(Some("8e03978e-40d5-43e8-bc93-6894a57f9324".into()))
        );
        assert_eq!(k("1.50"), Ok(Some("1.50".into())));
        assert_eq!(k("a;b"), Ok(Some("a;b".into())));
        assert_eq!(k("   "), Ok(None));
        assert_eq!(key(&HeaderMap::new()), Ok(None));
        assert_eq!(parse("ключ".as_bytes()), Err(KeyError::NotAscii));
    }

    #[test]
    fn a_field_value_reads_back_as_its_key() {
        for k in [
            "lead-1",
            "a;b",
            "\"lead-1\"",
            "\"open",
            "say \"hi\" \\ there",
            " padded ",
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
        ] {
            let v = field_value(k, false).unwrap();
            assert_eq!(parse(v.as_bytes()), Ok(Some(k.to_owned())), "{k} as {v}");
        }
        // The bare form stays bare; only what it cannot carry is quoted.
        assert_eq!(field_value("lead-1", false).as_deref(), Some("lead-1"));
        assert_eq!(field_value("\"x", false).as_deref(), Some(r#""\"x""#));
        assert_eq!(field_value("ключ", false), None);
        // A key stored before the draft's parsing goes as it is: every gateway finds it.
        assert_eq!(
            field_value("\"lead-1\"", true).as_deref(),
            Some("\"lead-1\"")
        );
        assert_eq!(field_value("\"x", true).as_deref(), Some("\"x"));
    }

    #[test]
    fn two_fields_are_refused() {
        assert_eq!(key_of(&["\"a\"", "\"a\""]), Err(KeyError::Several(2)));
    }
}
