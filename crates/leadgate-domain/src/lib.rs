//! The pure domain: operation keys, states and their transitions, error classes and
//! payload fingerprints. Nothing in here does I/O or knows about storage, HTTP or CRMs;
//! everything above imports from here, never the other way round.
//!
//! It is a crate of its own so that Cargo, not a text scan, keeps I/O out: its
//! dependencies are data and text crates only (`tests/it/boundaries.rs` holds them to a
//! list and its source free of `std`'s I/O). Refusals are [`Refusal`]s, a code each,
//! never free text. Where things are:
//!
//! - `rules`: the decisions (a person's action, intake's new/duplicate/conflict/late,
//!   the claim API's steps, matching, late reports), tested as tables;
//! - `attempt`: an attempt's outcomes and the retry policy; `status`: the transitions;
//!   `error_class`; `update`: what follows a failed update of a CRM entity;
//! - `review`: reasons, resolutions, human actions; `roles`: who may ask for what;
//! - `ids`: operation keys; `tenant`: a tenant's id and slug; `fingerprint`;
//!   `contact`: normalization; `lead`: lead mapping; `search`: what a query is and how
//!   names become words;
//! - `fairness`: the worker's lanes shared among tenants (deficit round robin in lane-time);
//! - `text`: a CRM id's bounds, masking, escaping; `secret`; `event_kind`;
//! - `business`: the business rules' values and what a channel changes; `outage`: the
//!   connector's health; `pacing`: the leaky bucket (GCRA); `report`: a saved
//!   diagnosis's shape.

mod attempt;
pub mod business;
pub mod contact;
mod error_class;
mod event_kind;
pub mod fairness;
mod fingerprint;
mod ids;
mod lead;
#[cfg(feature = "openapi")]
mod openapi;
pub mod outage;
pub mod pacing;
pub mod report;
mod review;
pub mod roles;
pub mod rules;
pub mod search;
mod secret;
mod status;
mod tenant;
pub mod text;
pub mod update;

pub use attempt::{AttemptOutcome, Failure, RetryConfig};
pub use error_class::{ErrorClass, RetryDecision};
pub use event_kind::EventKind;
pub use fingerprint::{fingerprint, Fingerprint, FingerprintError};
pub use ids::{is_valid_source_name, OperationId, OperationIdError};
pub use lead::{FieldMap, Lead, LeadChanges};
pub use review::{HumanAction, MatchRule, Resolution, ReviewReason, SHARED_CONTACT_AFTER};
pub use rules::Refusal;
pub use secret::Secret;
pub use status::{Status, TransitionError};
pub use tenant::{BadTenantSlug, TenantId, TenantSlug};

/// A string did not name a known value of a domain enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
}

/// `now - d`, saturating.
pub fn before(
    now: chrono::DateTime<chrono::Utc>,
    d: std::time::Duration,
) -> chrono::DateTime<chrono::Utc> {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}

/// `now + d`, saturating instead of panicking on absurd durations.
pub fn after(
    now: chrono::DateTime<chrono::Utc>,
    d: std::time::Duration,
) -> chrono::DateTime<chrono::Utc> {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// Implements `as_str`, `Display`, `FromStr` and `ALL` for a fieldless enum whose
/// variants map one-to-one to stable snake_case names (the names stored in the
/// database, shown in the API and matched by the console).
macro_rules! named_enum {
    ($ty:ident, $kind:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    _ => Err($crate::UnknownValue { kind: $kind, value: s.to_owned() }),
                }
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_enum_round_trips_through_its_name() {
        fn check<T: Copy + std::fmt::Display + std::str::FromStr + PartialEq + std::fmt::Debug>(
            all: &[T],
        ) where
            T::Err: std::fmt::Debug,
        {
            for v in all {
                assert_eq!(v.to_string().parse::<T>().unwrap(), *v);
                let json = serde_json::to_string(&v.to_string()).unwrap();
                assert!(json.starts_with('"'));
            }
        }
        check(Status::ALL);
        check(ReviewReason::ALL);
        check(ErrorClass::ALL);
        check(Resolution::ALL);
        check(MatchRule::ALL);
        assert!("bogus".parse::<Status>().is_err());
        assert_eq!(
            serde_json::from_str::<ErrorClass>("\"rate_limited\"").unwrap(),
            ErrorClass::RateLimited
        );
        assert!(serde_json::from_str::<ErrorClass>("\"nope\"").is_err());
    }
}
