use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the payload's RFC 8785 canonical JSON, hex-encoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps a stored fingerprint.
    pub fn from_stored(hex: String) -> Self {
        Fingerprint(hex)
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    #[error("`{0}` is not a JSON pointer (it must start with `/`)")]
    BadPointer(String),
    #[error("the payload cannot be canonicalised: {0}")]
    Canonical(#[from] serde_json::Error),
    #[error(
        "a number in the payload is too large to be compared exactly (an integer beyond 2^53 \
         written in exponent form, or beyond 64 bits); send it as a string"
    )]
    InexactNumber,
}

/// Integers above this (2^53) are not exact as IEEE doubles, which RFC 8785 writes numbers as.
const EXACT_LIMIT: u64 = 1 << 53;

/// The name of the object an integer beyond 2^53 is hashed as (see [`exact_numbers`]).
/// It holds a NUL character, which no stored payload can (intake refuses them), so the
/// stand-in never collides with real data.
const BIG_INTEGER: &str = "\u{0}leadgate:integer";

/// RFC 8785 writes every number as an IEEE double, so 9007199254740993 and
/// 9007199254740992 would hash alike and a real change could pass as a duplicate.
/// Integers beyond 2^53 that serde_json read exactly (64-bit) are hashed by their
/// decimal digits instead; a number serde_json could only read as an inexact double
/// beyond 2^53 is refused. Payloads without such numbers hash as before.
fn exact_numbers(v: &mut Value) -> Result<(), FingerprintError> {
    match v {
        Value::Number(n) => {
            let digits = if let Some(u) = n.as_u64() {
                (u > EXACT_LIMIT).then(|| u.to_string())
            } else if let Some(i) = n.as_i64() {
                (i.unsigned_abs() > EXACT_LIMIT).then(|| i.to_string())
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() >= EXACT_LIMIT as f64 {
                    return Err(FingerprintError::InexactNumber);
                }
                None
            };
            if let Some(digits) = digits {
                let mut stand_in = serde_json::Map::new();
                stand_in.insert(BIG_INTEGER.to_owned(), Value::String(digits));
                *v = Value::Object(stand_in);
            }
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(exact_numbers),
        Value::Object(map) => map.values_mut().try_for_each(exact_numbers),
        _ => Ok(()),
    }
}

/// Fingerprints the business data of a payload: the fields at the `ignore`d JSON
/// pointers (delivery timestamps, retry counters, signatures) are removed, the rest is
/// written as RFC 8785 canonical JSON (sorted keys, fixed number format) and hashed.
/// So the same data in another key order, or with other volatile fields, gets the same
/// fingerprint, and any change to the business data changes it.
pub fn fingerprint(payload: &Value, ignore: &[String]) -> Result<Fingerprint, FingerprintError> {
    let mut data = payload.clone();
    for pointer in ignore {
        remove_pointer(&mut data, pointer)?;
    }
    exact_numbers(&mut data)?;
    let canonical = serde_json_canonicalizer::to_vec(&data)?;
    Ok(Fingerprint(hex::encode(Sha256::digest(&canonical))))
}

/// Removes the value at `pointer` (RFC 6901). A missing target is not an error: the
/// volatile field is simply absent from this delivery. Array elements are replaced by
/// `null` rather than removed, so the positions of the others do not shift.
fn remove_pointer(data: &mut Value, pointer: &str) -> Result<(), FingerprintError> {
    if pointer.is_empty() {
        *data = Value::Null;
        return Ok(());
    }
    if !pointer.starts_with('/') {
        return Err(FingerprintError::BadPointer(pointer.to_owned()));
    }
    let (parent, last) = pointer.rsplit_once('/').expect("starts with /");
    let last = last.replace("~1", "/").replace("~0", "~");
    match data.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Some(item) = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *item = Value::Null;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(v: Value, ignore: &[&str]) -> Fingerprint {
        let ignore: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        fingerprint(&v, &ignore).unwrap()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"name":"Ivan","phone":"+79990001122","n":{"b":1,"a":2}}"#)
                .unwrap();
        let b: Value = serde_json::from_str(
            r#"{ "n" : {"a":2, "b":1}, "phone":"+79990001122",   "name":"Ivan" }"#,
        )
        .unwrap();
        assert_eq!(fp(a, &[]), fp(b, &[]));
    }

    #[test]
    fn ignored_fields_do_not_matter_but_business_data_does() {
        let base = json!({"submission_id": "s1", "name": "Ivan", "sent_at": "2026-01-01T10:00:00Z", "meta": {"try": 1}});
        let redelivered = json!({"submission_id": "s1", "name": "Ivan", "sent_at": "2026-01-01T10:05:00Z", "meta": {"try": 2}});
        let without = json!({"submission_id": "s1", "name": "Ivan", "meta": {}});
        let ignore = ["/sent_at", "/meta/try"];
        assert_eq!(fp(base.clone(), &ignore), fp(redelivered.clone(), &ignore));
        assert_eq!(fp(base.clone(), &ignore), fp(without, &ignore));
        // Without the ignore list the volatile fields count.
        assert_ne!(fp(base.clone(), &[]), fp(redelivered, &[]));
        // A changed business field always counts.
        let changed = json!({"submission_id": "s1", "name": "Petr", "sent_at": "2026-01-01T10:00:00Z", "meta": {"try": 1}});
        assert_ne!(fp(base, &ignore), fp(changed, &ignore));
    }

    #[test]
    fn numbers_are_canonical() {
        // RFC 8785 writes numbers as ECMAScript does: 1.0 and 1 are the same number.
        assert_eq!(fp(json!({"price": 1.0}), &[]), fp(json!({"price": 1}), &[]));
        assert_ne!(fp(json!({"price": 1}), &[]), fp(json!({"price": "1"}), &[]));
    }

    #[test]
    fn integers_beyond_2_pow_53_are_compared_exactly() {
        let parse = |t: &str| -> Value { serde_json::from_str(t).unwrap() };
        // Found in review: both were the same double, so a real change was a duplicate.
        assert_ne!(
            fp(parse(r#"{"order": 9007199254740993}"#), &[]),
            fp(parse(r#"{"order": 9007199254740992}"#), &[])
        );
        assert_ne!(
            fp(parse(r#"{"order": -9007199254740993}"#), &[]),
            fp(parse(r#"{"order": -9007199254740992}"#), &[])
        );
        assert_ne!(
            fp(parse(r#"{"a": [18446744073709551615]}"#), &[]),
            fp(parse(r#"{"a": [18446744073709551614]}"#), &[])
        );
        // Not the same as the digits sent as a string.
        assert_ne!(
            fp(parse(r#"{"order": 9007199254740993}"#), &[]),
            fp(parse(r#"{"order": "9007199254740993"}"#), &[])
        );
        // Up to 2^53 nothing changes: existing fingerprints stay valid.
        let small = r#"{"n": 9007199254740992, "m": -5, "f": 1.5}"#;
        assert_eq!(
            fp(parse(small), &[]).as_str(),
            hex::encode(Sha256::digest(
                serde_json_canonicalizer::to_vec(&parse(small)).unwrap()
            ))
        );
        // Beyond 64 bits serde_json reads a double: refused, not rounded.
        for inexact in [r#"{"n": 100000000000000000000001}"#, r#"{"n": 1e20}"#] {
            let err = fingerprint(&parse(inexact), &[]).unwrap_err();
            assert!(matches!(err, FingerprintError::InexactNumber), "{inexact}");
        }
        assert!(fingerprint(&parse(r#"{"n": 1e15, "x": 0.1}"#), &[]).is_ok());
    }

    #[test]
    fn pointers_are_unescaped_and_arrays_keep_positions() {
        let a = json!({"a/b": 1, "x~y": 2, "list": [1, 2, 3], "keep": true});
        let b = json!({"a/b": 9, "x~y": 8, "list": [7, 2, 3], "keep": true});
        assert_eq!(
            fp(a, &["/a~1b", "/x~0y", "/list/0"]),
            fp(b, &["/a~1b", "/x~0y", "/list/0"])
        );
        let err = fingerprint(&json!({}), &["nope".to_string()]).unwrap_err();
        assert!(err.to_string().contains("JSON pointer"));
    }

    #[test]
    fn fingerprint_is_hex_sha256() {
        let f = fp(json!({}), &[]);
        assert_eq!(f.as_str().len(), 64);
        // sha256("{}")
        assert_eq!(
            f.as_str(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
