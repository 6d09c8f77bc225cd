//! The domain's types as OpenAPI schemas (feature `openapi`): the named enums as string
//! enums of their stable names (`ALL`), so the HTTP API's document lists exactly the
//! values the code writes. Schema description only: no I/O.

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;

use crate::{ErrorClass, OperationId, ReviewReason, Status};

/// A string schema whose values are exactly `names`.
fn names_schema(names: impl IntoIterator<Item = &'static str>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
        .description(Some(description))
        .into()
}

/// The domain's named enums as string enums of their stable names (`ALL`), so the
/// document lists exactly the values the code writes.
macro_rules! named_schema {
    ($ty:ty, $name:literal, $description:literal) => {
        impl utoipa::PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                names_schema(<$ty>::ALL.iter().map(|v| v.as_str()), $description)
            }
        }
        impl utoipa::ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

named_schema!(
    Status,
    "Status",
    "The operation's state (docs/SPEC.md, States)"
);
named_schema!(
    ErrorClass,
    "ErrorClass",
    "What kind of failure a CRM call had; it decides what happens next (docs/SPEC.md, Error classes)"
);
named_schema!(
    ReviewReason,
    "ReviewReason",
    "Why an operation waits for a person"
);

impl utoipa::PartialSchema for OperationId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(OperationId::MAX_LEN))
            .description(Some("`<source>:<key>`"))
            .examples(["web:lead-1"])
            .into()
    }
}

impl utoipa::ToSchema for OperationId {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("OperationId")
    }
}
