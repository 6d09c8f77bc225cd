//! Per-source rules: where the event key is, which fields are volatile, whether
//! deliveries are signed. Also turns a raw body into the JSON payload that is
//! fingerprinted and stored.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::config::{Reply, Secret, SourceConfig};
use crate::crm::FieldMap;
use crate::domain::MatchRule;

/// Bumped whenever the way a body becomes a payload changes, so the journal tells which
/// rules produced a stored payload.
pub const TRANSFORM_VERSION: i32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpec {
    /// A JSON pointer into the payload (for form bodies: `/field`).
    Json(String),
    /// A request header, e.g. `Idempotency-Key`.
    Header(String),
    /// Form fields: alternatives (`a|b`, the first present wins) of composites (`a+b`,
    /// values joined with `:`), e.g. Tilda's `tranid`.
    Form(Vec<Vec<String>>),
}

impl KeySpec {
    pub fn parse(spec: &str) -> Option<KeySpec> {
        let (kind, rest) = spec.split_once(':')?;
        if rest.is_empty() {
            return None;
        }
        match kind {
            "json" if rest.starts_with('/') => Some(KeySpec::Json(rest.to_owned())),
            "header" => Some(KeySpec::Header(rest.to_owned())),
            "form" => {
                let alternatives: Vec<Vec<String>> = rest
                    .split('|')
                    .map(|alt| alt.split('+').map(str::to_owned).collect())
                    .collect();
                let blank = alternatives.iter().flatten().any(|f| f.is_empty());
                (!blank).then_some(KeySpec::Form(alternatives))
            }
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            KeySpec::Json(p) => format!("the JSON field {p}"),
            KeySpec::Header(h) => format!("the {h} header"),
            KeySpec::Form(alts) => {
                let alts: Vec<String> = alts.iter().map(|a| a.join("+")).collect();
                format!("the form field `{}`", alts.join("` or `"))
            }
        }
    }
}

/// A configured source, ready for intake.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub key: KeySpec,
    pub event_time: Option<KeySpec>,
    pub ignore: Vec<String>,
    pub secret: Option<Secret>,
    pub fields: FieldMap,
    pub reply: Reply,
    pub application_token: Option<Secret>,
    pub on_contact_match: MatchRule,
}

impl Source {
    pub fn from_config(c: &SourceConfig) -> Result<Source, String> {
        let key = KeySpec::parse(&c.key)
            .ok_or_else(|| format!("source `{}`: cannot read key `{}`", c.name, c.key))?;
        let event_time =
            match &c.event_time {
                Some(spec) => Some(KeySpec::parse(spec).ok_or_else(|| {
                    format!("source `{}`: cannot read event_time `{spec}`", c.name)
                })?),
                None => None,
            };
        Ok(Source {
            name: c.name.clone(),
            key,
            event_time,
            ignore: c.ignore.clone(),
            secret: c.secret.clone(),
            fields: c.fields.clone(),
            reply: c.reply.unwrap_or_default(),
            application_token: c.application_token.clone(),
            on_contact_match: c.on_contact_match,
        })
    }

    /// Checks `X-Leadgate-Signature: sha256=<hex HMAC-SHA256 of the raw body>` in
    /// constant time. Sources without a secret accept every delivery.
    pub fn signature_ok(&self, header: Option<&str>, body: &[u8]) -> bool {
        let Some(secret) = &self.secret else {
            return true;
        };
        let Some(sig) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
            return false;
        };
        let Ok(sig) = hex::decode(sig) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(body);
        mac.verify_slice(&sig).is_ok()
    }

    /// The event key of a delivery, if present and not blank.
    pub fn key(&self, payload: &Value, headers: &axum::http::HeaderMap) -> Option<String> {
        let value = match &self.key {
            KeySpec::Json(p) => scalar(payload.pointer(p)?)?,
            KeySpec::Form(alternatives) => form_key(payload, alternatives)?,
            KeySpec::Header(h) => headers.get(h.as_str())?.to_str().ok()?.to_owned(),
        };
        let value = value.trim().to_owned();
        (!value.is_empty()).then_some(value)
    }

    /// Bitrix24 events carry the application's token; without a configured token every
    /// delivery passes.
    pub fn application_token_ok(&self, payload: &Value) -> bool {
        let Some(expected) = &self.application_token else {
            return true;
        };
        let got = payload
            .get("auth[application_token]")
            .and_then(Value::as_str)
            .unwrap_or("");
        use subtle::ConstantTimeEq;
        got.as_bytes().ct_eq(expected.expose().as_bytes()).into()
    }
}

impl Source {
    /// The source's own event time, when configured and readable: RFC 3339 text or
    /// Unix seconds (number or digits).
    pub fn event_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        let raw = match self.event_time.as_ref()? {
            KeySpec::Json(p) => scalar(payload.pointer(p)?)?,
            KeySpec::Form(alternatives) => form_key(payload, alternatives)?,
            KeySpec::Header(_) => return None,
        };
        let raw = raw.trim();
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(raw) {
            return Some(t.with_timezone(&chrono::Utc));
        }
        raw.parse::<i64>()
            .ok()
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
    }
}

/// The first alternative whose fields are all present, values joined with `:`; with
/// several alternatives the field that matched is named first, so different events
/// about one entity (`leads[add]`, `leads[status]`) stay different keys.
fn form_key(payload: &Value, alternatives: &[Vec<String>]) -> Option<String> {
    alternatives.iter().find_map(|fields| {
        let values: Option<Vec<String>> = fields
            .iter()
            .map(|f| scalar(payload.get(f)?).filter(|v| !v.trim().is_empty()))
            .collect();
        let joined = values?.join(":");
        Some(if alternatives.len() > 1 {
            format!("{}:{joined}", fields.join("+"))
        } else {
            joined
        })
    })
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub fn sources(configs: &[SourceConfig]) -> Result<HashMap<String, Source>, String> {
    configs
        .iter()
        .map(|c| Source::from_config(c).map(|s| (s.name.clone(), s)))
        .collect()
}

/// How a body was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Json,
    Form,
}

impl BodyKind {
    /// From the content type; a missing one is sniffed (JSON starts with `{` or `[`).
    pub fn detect(content_type: Option<&str>, body: &[u8]) -> Option<BodyKind> {
        let mime = content_type.map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        match mime.as_deref() {
            Some("application/json") => Some(BodyKind::Json),
            Some(m) if m.ends_with("+json") => Some(BodyKind::Json),
            Some("application/x-www-form-urlencoded") => Some(BodyKind::Form),
            Some("") | None => {
                let first = body.iter().find(|b| !b.is_ascii_whitespace());
                Some(if matches!(first, Some(b'{') | Some(b'[')) {
                    BodyKind::Json
                } else {
                    BodyKind::Form
                })
            }
            Some(_) => None,
        }
    }
}

/// Parses a body into the payload. Form fields become a JSON object of strings; a field
/// repeated becomes an array of its values in order.
pub fn parse_body(kind: BodyKind, body: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(body)
        .map_err(|e| format!("the body is not valid UTF-8 (at byte {})", e.valid_up_to()))?;
    match kind {
        BodyKind::Json => {
            serde_json::from_str(text).map_err(|e| format!("the body is not valid JSON: {e}"))
        }
        BodyKind::Form => {
            let pairs: Vec<(String, String)> = serde_urlencoded::from_str(text)
                .map_err(|e| format!("the body is not a valid form: {e}"))?;
            let mut map = Map::new();
            for (k, v) in pairs {
                match map.get_mut(&k) {
                    None => {
                        map.insert(k, Value::String(v));
                    }
                    Some(Value::Array(a)) => a.push(Value::String(v)),
                    Some(prev) => {
                        let first = prev.take();
                        *prev = Value::Array(vec![first, Value::String(v)]);
                    }
                }
            }
            Ok(Value::Object(map))
        }
    }
}

/// Tilda checks a new webhook with a form holding `test=test` and expects a 200.
pub fn is_connection_check(kind: BodyKind, payload: &Value) -> bool {
    kind == BodyKind::Form
        && payload.get("test").and_then(Value::as_str) == Some("test")
        && payload.as_object().is_some_and(|m| m.len() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(key: &str, secret: Option<&str>) -> Source {
        Source {
            name: "s".into(),
            key: KeySpec::parse(key).unwrap(),
            event_time: KeySpec::parse("json:/created_at"),
            ignore: vec![],
            secret: secret.map(Secret::new),
            fields: FieldMap::default(),
            reply: Reply::Json,
            application_token: None,
            on_contact_match: MatchRule::Create,
        }
    }

    #[test]
    fn key_specs() {
        assert_eq!(
            KeySpec::parse("json:/a/b"),
            Some(KeySpec::Json("/a/b".into()))
        );
        assert_eq!(
            KeySpec::parse("header:Idempotency-Key"),
            Some(KeySpec::Header("Idempotency-Key".into()))
        );
        assert_eq!(
            KeySpec::parse("form:tranid"),
            Some(KeySpec::Form(vec![vec!["tranid".into()]]))
        );
        assert_eq!(
            KeySpec::parse("form:a+b|c"),
            Some(KeySpec::Form(vec![
                vec!["a".into(), "b".into()],
                vec!["c".into()]
            ]))
        );
        assert_eq!(KeySpec::parse("form:a||b"), None);
        assert_eq!(KeySpec::parse("json:a"), None);
        assert_eq!(KeySpec::parse("form:"), None);
        assert_eq!(KeySpec::parse("query:x"), None);
    }

    #[test]
    fn keys_are_read_from_json_forms_and_headers() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("idempotency-key", " abc ".parse().unwrap());
        let p = json!({"submission_id": 42, "nested": {"id": "x"}, "blank": "  ", "tranid": "t1"});
        assert_eq!(
            source("json:/submission_id", None).key(&p, &headers),
            Some("42".into())
        );
        assert_eq!(
            source("json:/nested/id", None).key(&p, &headers),
            Some("x".into())
        );
        assert_eq!(source("json:/blank", None).key(&p, &headers), None);
        assert_eq!(source("json:/nested", None).key(&p, &headers), None);
        assert_eq!(source("json:/missing", None).key(&p, &headers), None);
        assert_eq!(
            source("header:Idempotency-Key", None).key(&p, &headers),
            Some("abc".into())
        );
        assert_eq!(
            source("form:tranid", None).key(&p, &headers),
            Some("t1".into())
        );
    }

    #[test]
    fn event_times_are_read_as_rfc3339_or_unix_seconds() {
        let s = source("json:/id", None);
        let t = s
            .event_time(&json!({"created_at": "2025-01-02T03:04:05+03:00"}))
            .unwrap();
        assert_eq!(t.to_rfc3339(), "2025-01-02T00:04:05+00:00");
        let t = s.event_time(&json!({"created_at": 1700000000})).unwrap();
        assert_eq!(t.timestamp(), 1_700_000_000);
        assert_eq!(s.event_time(&json!({"created_at": "yesterday"})), None);
        assert_eq!(s.event_time(&json!({})), None);
    }

    #[test]
    fn composite_and_alternative_form_keys() {
        let h = axum::http::HeaderMap::new();
        let b24 = json!({"event": "ONCRMLEADADD", "data[FIELDS][ID]": "42", "ts": "1700000000"});
        assert_eq!(
            source("form:event+data[FIELDS][ID]+ts", None).key(&b24, &h),
            Some("ONCRMLEADADD:42:1700000000".into())
        );
        let amo = json!({"leads[status][0][id]": "9774766", "account[id]": "1"});
        let s = source("form:leads[add][0][id]|leads[status][0][id]", None);
        assert_eq!(s.key(&amo, &h), Some("leads[status][0][id]:9774766".into()));
        assert_eq!(s.key(&json!({"account[id]": "1"}), &h), None);
        assert_eq!(
            source("form:a+b", None).key(&json!({"a": "1", "b": " "}), &h),
            None
        );
    }

    #[test]
    fn application_tokens_are_checked() {
        let mut s = source("form:x", None);
        assert!(s.application_token_ok(&json!({})));
        s.application_token = Some(Secret::new("tok"));
        assert!(s.application_token_ok(&json!({"auth[application_token]": "tok"})));
        assert!(!s.application_token_ok(&json!({"auth[application_token]": "bad"})));
        assert!(!s.application_token_ok(&json!({})));
    }

    #[test]
    fn signatures_are_checked() {
        let s = source("json:/id", Some("k"));
        let body = br#"{"id":1}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(body);
        let good = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert!(s.signature_ok(Some(&good), body));
        assert!(!s.signature_ok(Some(&good), b"{\"id\":2}"));
        assert!(!s.signature_ok(None, body));
        assert!(!s.signature_ok(Some("sha256=zz"), body));
        assert!(!s.signature_ok(Some("md5=00"), body));
        assert!(source("json:/id", None).signature_ok(None, body));
    }

    #[test]
    fn bodies_are_parsed_by_kind() {
        assert_eq!(
            BodyKind::detect(Some("application/json; charset=utf-8"), b""),
            Some(BodyKind::Json)
        );
        assert_eq!(
            BodyKind::detect(Some("application/x-www-form-urlencoded"), b""),
            Some(BodyKind::Form)
        );
        assert_eq!(BodyKind::detect(None, b"  {\"a\":1}"), Some(BodyKind::Json));
        assert_eq!(BodyKind::detect(None, b"a=1"), Some(BodyKind::Form));
        assert_eq!(BodyKind::detect(Some("text/xml"), b"<a/>"), None);
        let form = parse_body(
            BodyKind::Form,
            b"Name=%D0%98%D0%B2%D0%B0%D0%BD&tranid=1&tag=a&tag=b",
        )
        .unwrap();
        assert_eq!(
            form,
            json!({"Name": "Иван", "tranid": "1", "tag": ["a", "b"]})
        );
        assert!(parse_body(BodyKind::Json, b"{nope")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(parse_body(BodyKind::Json, &[0xff, 0xfe])
            .unwrap_err()
            .contains("UTF-8"));
        assert!(is_connection_check(
            BodyKind::Form,
            &json!({"test": "test"})
        ));
        assert!(!is_connection_check(
            BodyKind::Form,
            &json!({"test": "test", "tranid": "1"})
        ));
        assert!(!is_connection_check(
            BodyKind::Json,
            &json!({"test": "test"})
        ));
    }
}
