//! The SQLite operator's password: an Argon2id hash in PHC form (`$argon2id$v=19$…`),
//! made by `leadgate console password` and checked at sign-in. The password itself is
//! never stored or logged.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// The Argon2id hash of `password` with a fresh random salt (the crate's default
/// parameters: OWASP's minimum of 19 MiB, 2 passes).
pub fn hash(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("hashing the password failed: {e}"))
}

/// A new password: at a terminal typed twice without echo, from a pipe its first line.
/// Refuses an empty one or one shorter than 12 characters.
pub fn read_new() -> anyhow::Result<String> {
    use std::io::IsTerminal;
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("New console password: ")?;
        let again = rpassword::prompt_password("The same again: ")?;
        anyhow::ensure!(first == again, "the two passwords differ: nothing printed");
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    };
    anyhow::ensure!(
        password.chars().count() >= 12,
        "a console password has at least 12 characters"
    );
    Ok(password)
}

/// Refuses a configured hash that is not an Argon2id PHC string.
pub fn check_hash(hash: &str) -> Result<(), String> {
    let parsed = PasswordHash::new(hash).map_err(|e| {
        format!("[console] operator_password_hash is not a password hash ({e}): `leadgate console password` prints one")
    })?;
    if parsed.algorithm.as_str() != "argon2id" {
        return Err(format!(
            "[console] operator_password_hash is {}, not argon2id: `leadgate console password` prints one",
            parsed.algorithm
        ));
    }
    Ok(())
}

/// Whether `password` is the one `hash` was made from.
pub fn verify(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(check_hash(&h).is_ok());
        assert!(verify("correct horse", &h));
        assert!(!verify("correct horse ", &h));
        assert!(!verify("", &h));
        assert_ne!(h, hash("correct horse").unwrap(), "a fresh salt each time");
    }

    #[test]
    fn what_is_not_an_argon2id_hash_is_refused() {
        assert!(check_hash("hunter2").is_err());
        assert!(check_hash("$2b$12$abcdefghijklmnopqrstuv").is_err());
        assert!(!verify("x", "not a hash"));
    }
}
