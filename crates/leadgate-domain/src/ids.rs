use std::fmt;

use crate::tenant::TenantSlug;

/// The stable key of one business operation: `<source>:<event key>`, and in a tenant
/// other than the default one `<tenant>/<source>:<event key>`.
///
/// It comes from the event (a form submission id, a message id), never from
/// contact data or the receive time, so every technical repeat of one event maps
/// to the same key. Namespacing by source keeps keys of different sources apart, and by
/// tenant keys of different portals. The default tenant's keys carry no tenant, so they
/// are byte for byte the keys of a deployment from before fleet mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct OperationId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperationIdError {
    #[error("the operation key is empty")]
    Empty,
    #[error("the operation key is {0} bytes long; at most {max} are allowed", max = OperationId::MAX_LEN)]
    TooLong(usize),
    #[error("the operation key contains a control character")]
    ControlCharacter,
    #[error(
        "the operation key contains an invisible character (zero-width or a bidirectional control), \
         which would make it look like another key"
    )]
    InvisibleCharacter,
    #[error("the source name `{0}` is not valid: use letters, digits, `-` and `_`")]
    BadSource(String),
    #[error("the operation key has no `<source>:` prefix")]
    NotNamespaced,
    #[error(transparent)]
    BadTenant(#[from] crate::tenant::BadTenantSlug),
    /// One key, one spelling: the default tenant's keys are never qualified.
    #[error("the default tenant's keys carry no tenant: write `<source>:<key>`")]
    QualifiedDefault,
    #[error("keys ending in `{mark}<number>` are reserved for leads a person accepted as new", mark = OperationId::ACCEPTED_MARK)]
    Reserved,
}

impl OperationId {
    /// The most bytes of `<source>:<key>` (the part a CRM is given); a tenant's prefix
    /// comes on top.
    pub const MAX_LEN: usize = 255;

    /// What ends a key made by "accept as new" (`<original>#accepted-<delivery id>`).
    pub const ACCEPTED_MARK: &'static str = "#accepted-";

    /// Builds the key of an event `key` received from `source`. Keys ending like an
    /// accepted-as-new key are refused, so a source can never claim one.
    pub fn new(source: &str, key: &str) -> Result<Self, OperationIdError> {
        Self::new_in(&TenantSlug::default_tenant(), source, key)
    }

    /// Builds the key of an event `key` received from `source` of `tenant`:
    /// `<tenant>/<source>:<key>`, or `<source>:<key>` in the default tenant.
    pub fn new_in(tenant: &TenantSlug, source: &str, key: &str) -> Result<Self, OperationIdError> {
        if !is_valid_source_name(source) {
            return Err(OperationIdError::BadSource(source.to_owned()));
        }
        if key.trim().is_empty() {
            return Err(OperationIdError::Empty);
        }
        if Self::is_accepted_key(key) {
            return Err(OperationIdError::Reserved);
        }
        if key.chars().any(is_invisible) {
            return Err(OperationIdError::InvisibleCharacter);
        }
        let local = format!("{source}:{key}");
        if tenant.is_default() {
            Self::validated(local)
        } else {
            Self::validated(format!("{tenant}/{local}"))
        }
    }

    /// The key of the operation made from the conflicting delivery `delivery_id` of
    /// `original` when a person accepts it as new: `<original>#accepted-<delivery id>`,
    /// the original part cut (at a character boundary) to keep the whole within
    /// [`Self::MAX_LEN`]. Never the key of a real event ([`Self::new`] refuses the
    /// ending) and never another derived key (delivery ids are unique and the number
    /// after the last mark is the delivery id).
    pub fn accepted_as_new(original: &OperationId, delivery_id: i64) -> OperationId {
        let suffix = format!("{}{delivery_id}", Self::ACCEPTED_MARK);
        let prefix = original.0.len() - original.local_part().len();
        let mut cut = original.0.len().min(prefix + Self::MAX_LEN - suffix.len());
        while !original.0.is_char_boundary(cut) {
            cut -= 1;
        }
        OperationId(format!("{}{suffix}", &original.0[..cut]))
    }

    /// Whether `key` (the part after `<source>:`) ends like an accepted-as-new key.
    pub fn is_accepted_key(key: &str) -> bool {
        key.rsplit_once(Self::ACCEPTED_MARK)
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }

    fn validated(s: String) -> Result<Self, OperationIdError> {
        let local = local_part(&s);
        if local.len() > Self::MAX_LEN {
            return Err(OperationIdError::TooLong(local.len()));
        }
        if s.chars().any(char::is_control) {
            return Err(OperationIdError::ControlCharacter);
        }
        Ok(OperationId(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The source part of the key (before the first `:`, after the tenant).
    pub fn source(&self) -> &str {
        let local = self.local_part();
        local.split_once(':').map(|(s, _)| s).unwrap_or(local)
    }

    /// `<source>:<key>`, without the tenant: what the CRM is given, so a portal's keys
    /// are the same whether its tenant is the default one or one of a fleet.
    pub fn local_part(&self) -> &str {
        local_part(&self.0)
    }

    /// The tenant the key names, `None` for the default tenant.
    pub fn tenant_slug(&self) -> Option<&str> {
        let head = self.0.split_once(':').map_or(self.0.as_str(), |(h, _)| h);
        head.split_once('/').map(|(tenant, _)| tenant)
    }
}

/// The key without its `<tenant>/` prefix: a tenant and a source never contain `/` or
/// `:`, so a `/` before the first `:` ends the tenant.
fn local_part(s: &str) -> &str {
    let head = s.split_once(':').map_or(s, |(h, _)| h);
    match head.split_once('/') {
        Some((tenant, _)) => &s[tenant.len() + 1..],
        None => s,
    }
}

/// Characters that change how text looks without being seen: zero-width ones, the
/// bidirectional controls (which can show `12345` for `54321`), the soft hyphen, the
/// byte-order mark and tag characters. A new key carrying one is refused: two keys that
/// look alike to a person must be the same key. (Stored keys are still read.)
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// Source names appear in URLs, metrics labels and keys: keep them plain.
pub fn is_valid_source_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl TryFrom<String> for OperationId {
    type Error = OperationIdError;
    /// Parses a stored or user-supplied key; it must carry its `<source>:` namespace
    /// (and may carry a `<tenant>/` before it).
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let Some((head, key)) = s.split_once(':') else {
            return Err(OperationIdError::NotNamespaced);
        };
        let source = match head.split_once('/') {
            Some((tenant, source)) => {
                let tenant = TenantSlug::new(tenant)?;
                if tenant.is_default() {
                    return Err(OperationIdError::QualifiedDefault);
                }
                source
            }
            None => head,
        };
        if !is_valid_source_name(source) {
            return Err(OperationIdError::BadSource(source.to_owned()));
        }
        if key.is_empty() {
            return Err(OperationIdError::Empty);
        }
        Self::validated(s)
    }
}

impl std::str::FromStr for OperationId {
    type Err = OperationIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_owned())
    }
}

impl<'de> serde::Deserialize<'de> for OperationId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .try_into()
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for OperationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_namespaced_by_source() {
        let id = OperationId::new("tilda", "1234567:8901").unwrap();
        assert_eq!(id.as_str(), "tilda:1234567:8901");
        assert_eq!(id.source(), "tilda");
        assert_ne!(id, OperationId::new("site", "1234567:8901").unwrap());
    }

    #[test]
    fn rejects_empty_long_and_control_keys() {
        assert_eq!(OperationId::new("site", ""), Err(OperationIdError::Empty));
        assert_eq!(
            OperationId::new("site", "   "),
            Err(OperationIdError::Empty)
        );
        let long = "x".repeat(251);
        assert_eq!(
            OperationId::new("site", &long),
            Err(OperationIdError::TooLong(256))
        );
        assert!(OperationId::new("site", &"x".repeat(250)).is_ok());
        assert_eq!(
            OperationId::new("site", "a\nb"),
            Err(OperationIdError::ControlCharacter)
        );
        assert_eq!(
            OperationId::new("site", "a\u{7f}b"),
            Err(OperationIdError::ControlCharacter)
        );
        assert!(matches!(
            OperationId::new("bad source", "1"),
            Err(OperationIdError::BadSource(_))
        ));
        assert!(matches!(
            OperationId::new("", "1"),
            Err(OperationIdError::BadSource(_))
        ));
    }

    #[test]
    fn accepted_as_new_keys_are_bounded_and_reserved() {
        let short = OperationId::new("site", "n").unwrap();
        let derived = OperationId::accepted_as_new(&short, 42);
        assert_eq!(derived.as_str(), "site:n#accepted-42");
        assert_eq!(derived.as_str().parse::<OperationId>(), Ok(derived.clone()));
        // A source cannot send it, nor anything ending like it.
        assert_eq!(
            OperationId::new("site", "n#accepted-42"),
            Err(OperationIdError::Reserved)
        );
        assert!(OperationId::new("site", "n#accepted-").is_ok());
        assert!(OperationId::new("site", "n#accepted-4x").is_ok());
        // Near the limit, with multi-byte characters: cut at a boundary, within 255.
        let long = OperationId::new("site", &"я".repeat(125)).unwrap();
        let derived = OperationId::accepted_as_new(&long, i64::MAX);
        assert!(derived.as_str().len() <= OperationId::MAX_LEN);
        assert!(derived
            .as_str()
            .ends_with(&format!("#accepted-{}", i64::MAX)));
        assert!(derived.as_str().parse::<OperationId>().is_ok());
        // Accepting from a derived operation again stays unique.
        let again = OperationId::accepted_as_new(&OperationId::accepted_as_new(&short, 1), 2);
        assert_eq!(again.as_str(), "site:n#accepted-1#accepted-2");
    }

    #[test]
    fn rejects_invisible_and_bidi_characters() {
        for key in [
            "12345\u{200b}",  // zero-width space
            "12\u{200d}345",  // zero-width joiner
            "\u{202e}54321",  // right-to-left override
            "123\u{2066}45",  // left-to-right isolate
            "\u{feff}12345",  // byte-order mark
            "12\u{00ad}345",  // soft hyphen
            "12345\u{e0041}", // tag character
        ] {
            assert_eq!(
                OperationId::new("site", key),
                Err(OperationIdError::InvisibleCharacter),
                "{key:?}"
            );
        }
        // Visible non-ASCII stays allowed.
        assert!(OperationId::new("site", "заявка №5 — ok").is_ok());
    }

    #[test]
    fn unicode_keys_are_allowed_and_counted_in_bytes() {
        let id = OperationId::new("site", "заявка-1").unwrap();
        assert_eq!(id.as_str(), "site:заявка-1");
        // 126 two-byte characters + "site:" = 257 bytes.
        assert!(matches!(
            OperationId::new("site", &"я".repeat(126)),
            Err(OperationIdError::TooLong(257))
        ));
    }

    #[test]
    fn parsing_requires_the_namespace() {
        assert_eq!(
            "tilda:42".parse::<OperationId>().unwrap(),
            OperationId::new("tilda", "42").unwrap()
        );
        assert_eq!(
            "no-namespace".parse::<OperationId>(),
            Err(OperationIdError::NotNamespaced)
        );
        assert_eq!("site:".parse::<OperationId>(), Err(OperationIdError::Empty));
        assert!(serde_json::from_str::<OperationId>("\"x\"").is_err());
        let id: OperationId = serde_json::from_str("\"site:1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"site:1\"");
    }

    #[test]
    fn a_tenants_keys_carry_its_slug_and_the_default_tenants_do_not() {
        let acme = TenantSlug::new("acme").unwrap();
        let default = TenantSlug::default_tenant();
        let table = [
            // (tenant, source, key) -> stored key, local part, tenant
            (&default, "site", "42", "site:42", "site:42", None),
            (&default, "site", "a/b:c", "site:a/b:c", "site:a/b:c", None),
            (&acme, "site", "42", "acme/site:42", "site:42", Some("acme")),
            (
                &acme,
                "tilda",
                "7:8/9",
                "acme/tilda:7:8/9",
                "tilda:7:8/9",
                Some("acme"),
            ),
        ];
        for (tenant, source, key, stored, local, slug) in table {
            let id = OperationId::new_in(tenant, source, key).unwrap();
            assert_eq!(id.as_str(), stored);
            assert_eq!(id.local_part(), local);
            assert_eq!(id.tenant_slug(), slug);
            assert_eq!(id.source(), source);
            assert_eq!(stored.parse::<OperationId>(), Ok(id.clone()), "{stored}");
        }
        // Tenant 0's keys are exactly the keys of a deployment without tenants.
        assert_eq!(
            OperationId::new_in(&default, "site", "42").unwrap(),
            OperationId::new("site", "42").unwrap()
        );
        assert_ne!(
            OperationId::new_in(&acme, "site", "42").unwrap(),
            OperationId::new("site", "42").unwrap()
        );
    }

    #[test]
    fn a_qualified_key_is_parsed_strictly() {
        assert_eq!(
            "default/site:1".parse::<OperationId>(),
            Err(OperationIdError::QualifiedDefault)
        );
        assert!(matches!(
            "Acme/site:1".parse::<OperationId>(),
            Err(OperationIdError::BadTenant(_))
        ));
        assert!(matches!(
            "acme/si/te:1".parse::<OperationId>(),
            Err(OperationIdError::BadSource(_))
        ));
        assert_eq!(
            "acme/site:".parse::<OperationId>(),
            Err(OperationIdError::Empty)
        );
        assert_eq!(
            "acme/site".parse::<OperationId>(),
            Err(OperationIdError::NotNamespaced)
        );
    }

    #[test]
    fn the_length_limit_is_the_local_parts() {
        let acme = TenantSlug::new(&"a".repeat(TenantSlug::MAX_LEN)).unwrap();
        let longest = "x".repeat(OperationId::MAX_LEN - "site:".len());
        let id = OperationId::new_in(&acme, "site", &longest).unwrap();
        assert_eq!(id.local_part().len(), OperationId::MAX_LEN);
        assert_eq!(id.as_str().parse::<OperationId>(), Ok(id.clone()));
        assert_eq!(
            OperationId::new_in(&acme, "site", &format!("{longest}x")),
            Err(OperationIdError::TooLong(OperationId::MAX_LEN + 1))
        );
        // Accepting a qualified key as new keeps its tenant and stays within the limit.
        let derived = OperationId::accepted_as_new(&id, i64::MAX);
        assert_eq!(derived.tenant_slug(), Some(acme.as_str()));
        assert!(derived.local_part().len() <= OperationId::MAX_LEN);
        assert!(derived.as_str().parse::<OperationId>().is_ok());
        let short = OperationId::new_in(&acme, "site", "n").unwrap();
        assert_eq!(
            OperationId::accepted_as_new(&short, 3).as_str(),
            format!("{acme}/site:n#accepted-3")
        );
    }
}
