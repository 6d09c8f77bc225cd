//! Standard Webhooks signing (<https://www.standardwebhooks.com/>), pure: the secret
//! `whsec_<base64>`, the signed content `{webhook-id}.{webhook-timestamp}.{body}`, and the
//! `webhook-signature` `v1,<base64(HMAC-SHA256(key, content))>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A secret is made and read by the store's code (a console's *Add subscriber* makes one
/// too): `whsec_` then base64 of 24 to 64 bytes.
pub use crate::store::{
    feed_secret_key as key, new_feed_secret as new_secret, FEED_KEY_BYTES as KEY_BYTES,
    FEED_SECRET_PREFIX as SECRET_PREFIX,
};

/// The `webhook-signature` of one message.
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Secret;

    #[test]
    fn the_reference_libraries_example_signs_to_its_published_signature() {
        // The test vector of the Standard Webhooks (Svix) reference libraries.
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_eq!(
            signature(
                &key(&secret).unwrap(),
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_made_and_checked_without_being_repeated() {
        let s = new_secret();
        assert_eq!(key(&s).unwrap().len(), KEY_BYTES);
        assert_ne!(s.expose(), new_secret().expose());
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_***",
            "whsec_c2hvcnQ=",
        ] {
            let e = key(&Secret::new(bad)).unwrap_err();
            assert!(!e.contains(bad), "{e}");
        }
    }
}
