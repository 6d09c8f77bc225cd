//! Contact keys: phone numbers and e-mail addresses normalized so that the same person
//! written differently (`8 (999) 123-45-67`, `+7 999 1234567`) matches. They are search
//! attributes for cross-channel matching, never operation keys.

use std::str::FromStr;

/// A region for numbers written without a country code (`RU`, `KZ`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region(phonenumber::country::Id);

impl FromStr for Region {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        phonenumber::country::Id::from_str(&s.trim().to_ascii_uppercase())
            .map(Region)
            .map_err(|_| format!("`{s}` is not an ISO 3166 region code (e.g. RU)"))
    }
}

impl Default for Region {
    fn default() -> Self {
        Region(phonenumber::country::Id::RU)
    }
}

/// The phone number in E.164 (`+79991234567`), or `None` if it is not a valid number.
/// Russian trunk-prefix forms (`8 999 …`) are understood through the default region.
pub fn normalize_phone(raw: &str, region: Region) -> Option<String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    let number = phonenumber::parse(Some(region.0), raw).ok()?;
    phonenumber::is_valid(&number)
        .then(|| number.format().mode(phonenumber::Mode::E164).to_string())
}

/// The longest e-mail address there is: RFC 5321's 256-octet path less its angle
/// brackets. Longer text a visitor typed is not an address (and would not fit an index
/// row on PostgreSQL).
pub const MAX_EMAIL_LEN: usize = 254;

/// The e-mail address trimmed and lower-cased, or `None` if it does not look like one.
pub fn normalize_email(raw: &str) -> Option<String> {
    let e = raw.trim().to_lowercase();
    let (local, domain) = e.split_once('@')?;
    let plausible = e.len() <= MAX_EMAIL_LEN
        && !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !e.chars().any(char::is_whitespace)
        && !domain.contains('@');
    plausible.then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_longer_than_any_email_is_none() {
        let local = "a".repeat(MAX_EMAIL_LEN - "@example.com".len());
        let longest = format!("{local}@example.com");
        assert_eq!(normalize_email(&longest).as_deref(), Some(longest.as_str()));
        assert_eq!(normalize_email(&format!("a{longest}")), None);
    }

    #[test]
    fn russian_phone_formats_become_e164() {
        let ru = Region::default();
        for raw in [
            "8 (999) 123-45-67",
            "+7 999 1234567",
            "89991234567",
            "+7 (999) 123 45 67",
            " 7-999-123-45-67 ",
        ] {
            assert_eq!(
                normalize_phone(raw, ru).as_deref(),
                Some("+79991234567"),
                "{raw}"
            );
        }
        // A Moscow landline.
        assert_eq!(
            normalize_phone("8 (495) 123-45-67", ru).as_deref(),
            Some("+74951234567")
        );
    }

    #[test]
    fn invalid_numbers_are_not_contact_keys() {
        let ru = Region::default();
        for raw in ["", "123", "not a phone", "+7 999 12", "8 (000) 000-00-00"] {
            assert_eq!(normalize_phone(raw, ru), None, "{raw}");
        }
    }

    #[test]
    fn the_region_applies_only_without_a_country_code() {
        let kz: Region = "kz".parse().unwrap();
        assert_eq!(
            normalize_phone("+49 30 901820", kz).as_deref(),
            Some("+4930901820")
        );
        assert!("XX".parse::<Region>().is_err());
    }

    #[test]
    fn emails_are_trimmed_and_lower_cased() {
        assert_eq!(
            normalize_email("  Ivan.Petrov@Example.RU ").as_deref(),
            Some("ivan.petrov@example.ru")
        );
        for raw in ["", "ivan", "ivan@", "@x.ru", "a b@x.ru", "a@x", "a@.ru"] {
            assert_eq!(normalize_email(raw), None, "{raw}");
        }
    }
}
