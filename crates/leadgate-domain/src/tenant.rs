//! Tenants: in fleet mode one Leadgate serves many CRM portals, each a tenant with its
//! own connector, sources, rules and alert routes. A deployment without tenants is the
//! default tenant (id 0, slug `default`), so nothing about it changes.

use std::fmt;

/// A tenant's number in the operations database. Tenant 0 is the default tenant: the
/// `[crm]` and `[[source]]`s of `leadgate.toml`, and every row written before fleet mode.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TenantId(pub i32);

impl TenantId {
    pub const DEFAULT: TenantId = TenantId(0);

    pub fn is_default(self) -> bool {
        self == Self::DEFAULT
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A tenant's name in URLs (`/v1/intake/{tenant}/{source}`), in its operations' keys
/// (`<tenant>/<source>:<key>`) and in metrics labels: lower-case letters, digits and
/// `-`, starting with a letter or digit, at most 32 bytes. It never changes once a
/// tenant exists, since its keys carry it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct TenantSlug(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the tenant name `{0}` is not valid: use 1 to {max} lower-case letters, digits and `-`, \
     starting with a letter or digit",
    max = TenantSlug::MAX_LEN
)]
pub struct BadTenantSlug(pub String);

impl TenantSlug {
    pub const MAX_LEN: usize = 32;

    /// The default tenant's slug: the deployment's own `[crm]` and sources.
    pub const DEFAULT: &'static str = "default";

    pub fn new(s: &str) -> Result<Self, BadTenantSlug> {
        if is_valid_slug(s) {
            Ok(TenantSlug(s.to_owned()))
        } else {
            Err(BadTenantSlug(s.to_owned()))
        }
    }

    pub fn default_tenant() -> Self {
        TenantSlug(Self::DEFAULT.to_owned())
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub(crate) fn is_valid_slug(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= TenantSlug::MAX_LEN
        && b[0] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

impl fmt::Display for TenantSlug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TenantSlug {
    type Err = BadTenantSlug;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl<'de> serde::Deserialize<'de> for TenantSlug {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_plain_lower_case_names() {
        for good in ["acme", "a", "branch-2", "0day", &"x".repeat(32)] {
            assert_eq!(TenantSlug::new(good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            "-acme",
            "Acme",
            "acme/x",
            "acme:x",
            "acme x",
            "acme_x",
            "ачме",
            &"x".repeat(33),
        ] {
            assert_eq!(TenantSlug::new(bad), Err(BadTenantSlug(bad.to_owned())));
        }
        assert!(TenantSlug::default_tenant().is_default());
        assert!(!TenantSlug::new("acme").unwrap().is_default());
        assert!(serde_json::from_str::<TenantSlug>("\"Bad\"").is_err());
        assert_eq!(
            serde_json::from_str::<TenantSlug>("\"acme\"").unwrap(),
            TenantSlug::new("acme").unwrap()
        );
    }

    #[test]
    fn tenant_zero_is_the_default() {
        assert!(TenantId::DEFAULT.is_default());
        assert!(!TenantId(7).is_default());
        assert_eq!(serde_json::to_string(&TenantId(7)).unwrap(), "7");
    }
}
