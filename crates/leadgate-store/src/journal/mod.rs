//! The [`Journal`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod ops;
pub(crate) mod sql;

/// Intake's: journal a delivery and claim its operation, journal a refusal, remember a
/// signature's one use and a content key's window.
#[async_trait::async_trait]
pub trait Journal: Clock {
    /// Journals a delivery and claims its operation if the key is new (insert-if-absent
    /// on the unique key), all in one transaction. A repeat with the same fingerprint is
    /// a duplicate; with another fingerprint a conflict (a review case is opened and the
    /// operation, unless already completed, is blocked in `needs_review`).
    async fn record_delivery(&self, delivery: NewDelivery) -> Result<DeliveryRecord>;

    /// Journals a delivery that was refused (bad body, missing key, bad signature).
    async fn record_rejected(&self, delivery: RejectedDelivery) -> Result<i64>;

    /// Remembers that `source`'s signature `signature_sha256` was used for `operation_id`
    /// until `expires_at` (its replay window's end), unless it was already: the operation
    /// it was first used for. Signatures whose window ended an hour before `now` are forgotten
    /// on the way.
    async fn use_signature(
        &self,
        source: &str,
        signature_sha256: &str,
        operation_id: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<String>;

    /// Whether `id` is an operation stored before Leadgate parsed `Idempotency-Key` as
    /// the draft defines it, under a key that begins with a quote (migration 0033): the
    /// field's text, quotes and all.
    async fn quoted_before_the_draft(&self, id: &OperationId) -> Result<bool>;

    /// A content key (migration 0030): remembers that `source`'s content
    /// `content_sha256` keys `operation_id` until `expires_at` (its window's end), unless a
    /// window of that content is still open at `now` (the delivery's arrival): the operation
    /// that window keys. Contents whose window ended an hour before `now` are forgotten on
    /// the way, so a slow delivery still finds its window.
    async fn use_content_key(
        &self,
        source: &str,
        content_sha256: &str,
        operation_id: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<String>;
}
