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
