//! The [`Reads`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod sql;

/// Reads for the console, the CLI, the HTTP reads and the metrics: nothing here writes.
///
/// Lists, searches and lookups are the store's tenant's (`Clock::tenant`; a console shows
/// one tenant at a time, `Tenants::for_tenant`); a read by key or id is not filtered.
#[async_trait::async_trait]
pub trait Reads: Clock {
    async fn operation(&self, id: &OperationId) -> Result<Option<Operation>>;

    /// This store's tenant's operations in key order, after `after` (from the first when
    /// none), `limit` at most: `leadgate tenant export`.
    async fn tenant_operations(&self, after: Option<&str>, limit: i64) -> Result<Vec<Operation>>;

    /// The saved reports, the newest first, at most `limit`.
    async fn diagnoses(&self, limit: i64) -> Result<Vec<DiagnosisSummary>>;

    /// One saved report and its body.
    async fn diagnosis(&self, id: i64) -> Result<Option<(DiagnosisSummary, Value)>>;

    /// The operations of `ids` that exist, in no particular order (one query per 500).
    async fn operations(&self, ids: &[OperationId]) -> Result<Vec<Operation>>;

    /// The whole timeline, oldest first: for the gateway's own reads. What a person or an
    /// API client reads is [`Reads::timeline_page`].
    async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>>;

    /// At most `limit` events of one timeline, the newest before event id `before` (all
    /// of them when `None`), oldest first, and how many older ones there are: however
    /// long a timeline grew, one read is a page.
    async fn timeline_page(
        &self,
        id: &OperationId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<TimelinePage>;

    /// The newest `limit` events of one kind of one timeline, oldest first (the
    /// console's CRM entities: `crm_step`).
    async fn timeline_of_kind(
        &self,
        id: &OperationId,
        kind: &str,
        limit: i64,
    ) -> Result<Vec<TimelineEvent>>;

    async fn cases_of(&self, id: &OperationId) -> Result<Vec<ReviewCase>>;

    async fn case(&self, case_id: i64) -> Result<Option<ReviewCase>>;

    async fn review_cases(&self, filter: &CaseFilter, page: Page) -> Result<Vec<ReviewCase>>;

    /// Operations in one status by `updated_at`, keyset-paged (the console's
    /// `failed_terminal` tab).
    async fn operations_with_status(
        &self,
        status: Status,
        page: OperationPage,
    ) -> Result<Vec<Operation>>;

    /// Other operations sharing the normalized phone or e-mail of `id`, newest first.
    async fn link_candidates(&self, id: &OperationId, limit: i64) -> Result<Vec<Operation>>;

    /// One journaled delivery (e.g. the conflicting side of a payload conflict).
    async fn delivery(&self, delivery_id: i64) -> Result<Option<DeliveryView>>;

    /// The newest migration applied to this database (`None`: no schema yet). Reads only.
    async fn schema_version(&self) -> Result<Option<i64>>;

    // Search

    /// Operations of any status matching `query` (`domain::search`), newest first (by
    /// `created_at`, then `operation_id`), `limit` (1–200) at a time after `after`.
    /// `plan` chooses how the rows are found; every plan finds the same rows.
    async fn search(
        &self,
        query: &SearchQuery,
        after: Option<&SearchCursor>,
        limit: i64,
        plan: SearchPlan,
    ) -> Result<SearchPage>;

    /// "Did my lead arrive?": operations whose phone is `phone` (normalized) or whose key
    /// or crm_id is `text`, exact matches only, newest first, at most `limit` (1–50). What
    /// a lookup answers is all it reads (no name, contact or payload): on PostgreSQL the
    /// `leadgate_lookup` function (migrations 0028, 0041), which every role may run.
    async fn lookup(
        &self,
        phone: Option<&str>,
        text: Option<&str>,
        limit: i64,
    ) -> Result<Vec<LookupHit>>;

    /// Where each of `ids` stands now (status and how its CRM id came), those that exist:
    /// what a bulk retry's outcomes are counted from.
    async fn states_of(&self, ids: &[String]) -> Result<Vec<OperationState>>;
}

/// Where an operation stands, as [`Reads::states_of`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationState {
    pub operation_id: String,
    pub status: Status,
    /// `created`, `recovered`, `confirmed` or `linked` once it has a CRM id.
    pub crm_link: Option<String>,
}

/// One operation found by [`Reads::lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupHit {
    pub operation_id: String,
    pub source: String,
    pub status: Status,
    pub received_at: DateTime<Utc>,
    pub crm_id: Option<String>,
}

/// How [`Reads::search`] finds its rows. The results are the same; only the cost differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchPlan {
    /// Counts the key range and each name word's range in their indexes (up to
    /// [`SEARCH_WALK_AFTER`] rows, no further). When neither the key range nor the rarest
    /// word reaches it: `Ranges`, the rarest word's range leading (the others tested on
    /// the row). Otherwise `Window(SEARCH_WINDOW)`, and when the window holds no full
    /// page, the name's two rarest words as one pair (`Pairs`), or for one word `Ranges`.
    #[default]
    Auto,
    /// Each index (key prefix, crm_id, name words, phone, e-mail) gives its newest rows
    /// and the union is sorted; several name words intersect their ranges. The cost grows
    /// with the number of rows in the ranges.
    Ranges,
    /// Operations newest first (`operations_created`), each row tested: the cost grows
    /// with the number of operations newer than the last match of the page.
    Walk,
    /// `Walk` over the newest `n` operations only; when they do not hold a full page,
    /// `Ranges`. Cheap when the query matches many recent operations.
    Window(i64),
    /// `Ranges`, the name's first two words read as one pair (`operation_name_pairs`,
    /// migration 0045): one index range for two words however common each is alone.
    Pairs,
}

/// Which rows of the name's index [`Reads::search`]'s ranges read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NameRows {
    /// Every query word's range, intersected.
    Intersect,
    /// The range of this word; the others tested on the operation's row.
    Lead(usize),
    /// The range of the first word paired with the second (`operation_name_pairs`, one
    /// index range for both), the others tested on the row.
    Pair(usize, usize),
}

impl NameRows {
    /// `Pair(a, b)` when the query has two words or more, else `Intersect`.
    pub(crate) fn pair_or_intersect(words: usize, a: usize, b: usize) -> NameRows {
        if words >= 2 {
            NameRows::Pair(a, b)
        } else {
            NameRows::Intersect
        }
    }
}

/// A key prefix or name word matching this many rows makes `SearchPlan::Auto` walk.
pub const SEARCH_WALK_AFTER: i64 = 5000;

/// How many of the newest operations `SearchPlan::Auto` walks before it ranges instead.
pub const SEARCH_WINDOW: i64 = 20_000;

/// One operation found by [`Reads::search`]: what a results list shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    pub operation_id: String,
    pub source: String,
    pub status: Status,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub crm_id: Option<String>,
    pub review_reason: Option<ReviewReason>,
    /// The newest open review case of the operation, if any.
    pub open_case_id: Option<i64>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    /// Which field the query matched (the first of key, crm_id, name for text).
    pub matched: MatchedField,
}

/// A page of search results; `next` continues after its last row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPage {
    pub hits: Vec<SearchHit>,
    pub next: Option<SearchCursor>,
}
