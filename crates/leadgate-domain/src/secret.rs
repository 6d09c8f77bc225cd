//! A configured secret (a token, a webhook URL): never printed.

use serde::Deserialize;

/// A value that must never reach a log: `Debug` prints `***`.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A configured secret as used: `env:NAME` is read through `env` (trimmed), anything
    /// else is the value as written. The error names the variable, never a value.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<Secret, String> {
        match self.0.strip_prefix("env:") {
            None => Ok(self.clone()),
            Some(var) => match env(var.trim()) {
                Some(v) if !v.trim().is_empty() => Ok(Secret::new(v.trim())),
                Some(_) => Err(format!(
                    "the environment variable `{}` is empty",
                    var.trim()
                )),
                None => Err(format!(
                    "the environment variable `{}` is not set",
                    var.trim()
                )),
            },
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}
