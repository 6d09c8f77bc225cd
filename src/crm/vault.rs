//! Encryption of CRM credentials at rest: the amoCRM OAuth tokens in `crm_tokens` are
//! sealed with ChaCha20-Poly1305 under a 32-byte key that never enters the database,
//! given as `LEADGATE_TOKEN_KEY` (64 hex digits) or in a key file (`token_key_file`, the
//! same hex text). Each value gets a random nonce and is bound to its connector and
//! column (associated data), so a sealed value cannot be moved to another column.
//!
//! A stored value without the `enc:v1:` prefix is a plain-text row written before
//! encryption existed: it is read as it is and sealed at the next save.
//!
//! Credentials that rotate live in the shared database, not in each process: amoCRM
//! answers every refresh with a new refresh token and voids the old one, so every process
//! reads the current pair from `crm_tokens` and saves a refreshed one with
//! compare-and-set on its version, and several machines never invalidate each other's
//! token (migration 0003). Sealing means that reading the database is not enough to use
//! the CRM account.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const PREFIX: &str = "enc:v1:";
const NONCE_LEN: usize = 12;
/// The environment variable holding the key (64 hex digits).
pub const KEY_ENV: &str = "LEADGATE_TOKEN_KEY";

#[derive(Clone)]
pub struct Vault {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(***)")
    }
}

/// A sealed value could not be opened: another key, or a damaged row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a stored credential cannot be decrypted with this key ({0})")]
pub struct OpenError(&'static str);

impl Vault {
    pub fn new(key: [u8; 32]) -> Vault {
        Vault {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// The key from `LEADGATE_TOKEN_KEY`, else from `key_file`; `missing` says what needs
    /// it when neither is given. Errors name what is missing or malformed, never the key.
    pub fn from_env_or_file(
        key_file: Option<&std::path::Path>,
        missing: &str,
    ) -> Result<Vault, String> {
        let (text, from) = match (std::env::var(KEY_ENV).ok(), key_file) {
            (Some(k), _) => (k, KEY_ENV.to_owned()),
            (None, Some(path)) => (
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read token_key_file {}: {e}", path.display()))?,
                path.display().to_string(),
            ),
            (None, None) => return Err(missing.to_owned()),
        };
        let bytes = hex::decode(text.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| format!("{from}: the token key must be 64 hex digits (32 bytes)"))?;
        Ok(Vault::new(bytes))
    }

    /// Seals `plain` for `context` (connector and column).
    pub fn seal(&self, context: &str, plain: &str) -> String {
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plain.as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .expect("ChaCha20-Poly1305 encrypts any length a token has");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", hex::encode(out))
    }

    /// Opens a value sealed for `context`; a value without the prefix is legacy plain
    /// text and comes back unchanged.
    pub fn open(&self, context: &str, stored: &str) -> Result<String, OpenError> {
        let Some(hex_text) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let raw = hex::decode(hex_text).map_err(|_| OpenError("not hex"))?;
        if raw.len() < NONCE_LEN {
            return Err(OpenError("too short"));
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| OpenError("wrong key, or damaged"))?;
        String::from_utf8(plain).map_err(|_| OpenError("not text"))
    }

    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_the_key_and_context() {
        let v = Vault::new([7; 32]);
        let sealed = v.seal("amocrm/refresh_token", "def50200-secret");
        assert!(Vault::is_sealed(&sealed));
        assert!(!sealed.contains("def50200"), "{sealed}");
        // A fresh nonce each time.
        assert_ne!(sealed, v.seal("amocrm/refresh_token", "def50200-secret"));
        assert_eq!(
            v.open("amocrm/refresh_token", &sealed).unwrap(),
            "def50200-secret"
        );
        assert!(
            v.open("amocrm/access_token", &sealed).is_err(),
            "bound to its column"
        );
        assert!(Vault::new([8; 32])
            .open("amocrm/refresh_token", &sealed)
            .is_err());
        let mut damaged = sealed.clone();
        let last = damaged.pop().unwrap();
        damaged.push(if last == '0' { '1' } else { '0' });
        assert!(v.open("amocrm/refresh_token", &damaged).is_err());
        assert!(v.open("x", "enc:v1:zz").is_err());
        assert!(v.open("x", "enc:v1:00").is_err());
        // Legacy plain text is read as it is.
        assert_eq!(v.open("x", "plain-old").unwrap(), "plain-old");
    }

    #[test]
    fn keys_are_64_hex_digits_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token.key");
        std::fs::write(&file, format!("{}\n", "ab".repeat(32))).unwrap();
        if std::env::var(KEY_ENV).is_err() {
            let v = Vault::from_env_or_file(Some(&file), "").unwrap();
            assert_eq!(
                v.open("c", &Vault::new([0xab; 32]).seal("c", "t")).unwrap(),
                "t"
            );
            std::fs::write(&file, "abcd").unwrap();
            let err = Vault::from_env_or_file(Some(&file), "").unwrap_err();
            assert!(
                err.contains("64 hex digits") && !err.contains("abcd"),
                "{err}"
            );
            let err = Vault::from_env_or_file(None, crate::crm::AMOCRM_KEY_MISSING).unwrap_err();
            assert!(err.contains(KEY_ENV), "{err}");
        }
    }
}
