//! Rows as both backends return them, and how each becomes the store's type.
//!
//! Each `…Row` is a `sqlx::FromRow` struct (generic over the backend's row: the same
//! struct reads a SQLite and a PostgreSQL row, column by name) holding the columns as
//! stored; its `TryFrom` parses what the database keeps as text (statuses, reasons, JSON)
//! and fails with [`StoreError::Corrupt`] on what does not parse, never with a default.
//! The `…_from_row` functions are what the SQL calls: one row in, one value out.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;

use leadgate_domain::outage::Health;
use leadgate_domain::OperationId;

use crate::ops::{CaseRow, Locked};
use crate::review::requests::RequestRow;
use crate::{
    AlertTurn, Ask, Connector, ContactKeys, DeliveryView, DiagnosisSummary, MatchedField,
    Operation, PendingAlert, Result, ReviewCase, RuleChange, SearchHit, SearchQuery, SourceRules,
    StoreError, StoredRules, TimelineEvent, UpdateClaim,
};

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// A text column parsed into `T`; `None` stays `None`.
fn parse_opt<T: std::str::FromStr>(v: Option<String>) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    v.map(|s| s.parse::<T>().map_err(corrupt)).transpose()
}

/// A JSON document kept as text; `None` stays `None`.
pub(crate) fn json_text(v: Option<String>) -> Result<Option<Value>> {
    v.map(|s| serde_json::from_str(&s).map_err(corrupt))
        .transpose()
}

/// `$name(row)`: one row read as `$stored` (its `FromRow`) and converted to `$value` (its
/// `TryFrom`), for either backend's row.
macro_rules! reader {
    ($name:ident: $stored:ty => $value:ty) => {
        pub(crate) fn $name<'r, R: sqlx::Row>(r: &'r R) -> Result<$value>
        where
            $stored: FromRow<'r, R>,
        {
            <$value>::try_from(<$stored>::from_row(r)?)
        }
    };
}

reader!(op_from_row: OperationRow => Operation);
reader!(case_from_row: ReviewCaseRow => ReviewCase);
reader!(event_from_row: EventRow => TimelineEvent);
reader!(rules_from_row: RulesRow => StoredRules);
reader!(diagnosis_from_row: DiagnosisRow => DiagnosisSummary);
reader!(request_from_row: HumanRequestRow => RequestRow);
reader!(delivery_from_row: DeliveryRow => DeliveryView);

/// `operations` as [`OP_COLUMNS`](crate::sql::OP_COLUMNS) selects it.
#[derive(FromRow)]
pub(crate) struct OperationRow {
    operation_id: String,
    source: String,
    status: String,
    payload_hash: String,
    payload: Option<String>,
    crm_id: Option<String>,
    crm_link: Option<String>,
    attempts: i32,
    last_error: Option<String>,
    last_error_class: Option<String>,
    review_reason: Option<String>,
    lease_owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    retry_grants: i32,
    verify_first: bool,
    contact_phone: Option<String>,
    contact_email: Option<String>,
    contact_name: Option<String>,
    event_time: Option<DateTime<Utc>>,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    purged_at: Option<DateTime<Utc>>,
}

impl TryFrom<OperationRow> for Operation {
    type Error = StoreError;

    fn try_from(r: OperationRow) -> Result<Self> {
        Ok(Operation {
            operation_id: OperationId::try_from(r.operation_id).map_err(corrupt)?,
            source: r.source,
            status: r.status.parse().map_err(corrupt)?,
            payload_hash: r.payload_hash,
            payload: json_text(r.payload)?,
            crm_id: r.crm_id,
            crm_link: r.crm_link,
            attempts: r.attempts,
            last_error: r.last_error,
            last_error_class: parse_opt(r.last_error_class)?,
            review_reason: parse_opt(r.review_reason)?,
            lease_owner: r.lease_owner,
            lease_expires_at: r.lease_expires_at,
            next_attempt_at: r.next_attempt_at,
            retry_grants: r.retry_grants,
            verify_first: r.verify_first,
            contact: ContactKeys {
                phone: r.contact_phone,
                email: r.contact_email,
                name: r.contact_name,
            },
            event_time: r.event_time,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            purged_at: r.purged_at,
        })
    }
}

/// An operation as a write locks it: its row and the lease bookkeeping beside it.
#[derive(FromRow)]
pub(crate) struct LockedRow {
    #[sqlx(flatten)]
    op: OperationRow,
    lease_token: Option<String>,
    finished_token: Option<String>,
    quiet_after: Option<DateTime<Utc>>,
}

impl TryFrom<LockedRow> for Locked {
    type Error = StoreError;

    fn try_from(r: LockedRow) -> Result<Self> {
        let op = Operation::try_from(r.op)?;
        Ok(Locked {
            read_version: op.version,
            lease_token: r.lease_token,
            finished_token: r.finished_token,
            quiet_after: r.quiet_after,
            op,
        })
    }
}

/// A review case as a write locks it (`review_cases` alone).
#[derive(FromRow)]
pub(crate) struct CaseLockRow {
    operation_id: String,
    reason: String,
    resolved_at: Option<DateTime<Utc>>,
    resolved_by: Option<String>,
    delivery_id: Option<i64>,
}

impl TryFrom<CaseLockRow> for CaseRow {
    type Error = StoreError;

    fn try_from(r: CaseLockRow) -> Result<Self> {
        Ok(CaseRow {
            operation_id: r.operation_id,
            reason: r.reason.parse().map_err(corrupt)?,
            resolved_at: r.resolved_at,
            resolved_by: r.resolved_by,
            delivery_id: r.delivery_id,
        })
    }
}

/// A connector's outage bookkeeping (`connectors`), which the domain decides on.
#[derive(FromRow)]
pub(crate) struct HealthRow {
    failures: i32,
    unreachable_since: Option<DateTime<Utc>>,
    probe_at: Option<DateTime<Utc>>,
    probes: i32,
}

impl From<HealthRow> for Health {
    fn from(r: HealthRow) -> Self {
        Health {
            failures: r.failures,
            unreachable_since: r.unreachable_since,
            probe_at: r.probe_at,
            probes: r.probes,
        }
    }
}

/// A connector as the dashboard shows it (`connectors`; paused is a state).
#[derive(FromRow)]
pub(crate) struct ConnectorRow {
    name: String,
    state: String,
    reason: Option<String>,
    since: DateTime<Utc>,
    changed_by: String,
    unreachable_since: Option<DateTime<Utc>>,
    by_hand: bool,
}

/// A connector with its tenant (`Dashboard::fleet_metrics`).
#[derive(sqlx::FromRow)]
pub(crate) struct TenantConnectorRow {
    pub tenant_id: i32,
    #[sqlx(flatten)]
    pub row: ConnectorRow,
}

impl From<ConnectorRow> for Connector {
    fn from(r: ConnectorRow) -> Self {
        Connector {
            paused: r.state == "paused",
            name: r.name,
            reason: r.reason,
            since: r.since,
            changed_by: r.changed_by,
            unreachable_since: r.unreachable_since,
            by_hand: r.state == "paused" && r.by_hand,
        }
    }
}

/// One `business_rule_history` row: the rules before and after, as JSON text.
#[derive(FromRow)]
pub(crate) struct RuleChangeRow {
    id: i64,
    source: String,
    version: i64,
    actor: String,
    changed_at: DateTime<Utc>,
    before: Option<String>,
    after: String,
}

impl TryFrom<RuleChangeRow> for RuleChange {
    type Error = StoreError;

    fn try_from(r: RuleChangeRow) -> Result<Self> {
        let rules = |t: &str| serde_json::from_str::<SourceRules>(t).map_err(corrupt);
        Ok(RuleChange {
            id: r.id,
            source: r.source,
            version: r.version,
            actor: r.actor,
            changed_at: r.changed_at,
            before: r.before.as_deref().map(rules).transpose()?,
            after: rules(&r.after)?,
        })
    }
}

/// A saved diagnosis with its report.
#[derive(FromRow)]
pub(crate) struct DiagnosisReportRow {
    #[sqlx(flatten)]
    summary: DiagnosisRow,
    report: String,
}

impl TryFrom<DiagnosisReportRow> for (DiagnosisSummary, Value) {
    type Error = StoreError;

    fn try_from(r: DiagnosisReportRow) -> Result<Self> {
        Ok((
            r.summary.try_into()?,
            serde_json::from_str(&r.report).map_err(corrupt)?,
        ))
    }
}

/// A CRM update as a claim reads it: the update, its operation's lead and the later
/// delivery's.
#[derive(FromRow)]
pub(crate) struct UpdateRow {
    id: i64,
    operation_id: String,
    source: String,
    crm_id: String,
    case_id: i64,
    delivery_id: i64,
    attempts: i32,
    original: Option<String>,
    later: Option<String>,
}

impl UpdateRow {
    /// The claim of this update under the lease `token` of `owner`.
    pub(crate) fn claim(
        self,
        owner: &str,
        token: String,
        expires_at: DateTime<Utc>,
    ) -> Result<UpdateClaim> {
        Ok(UpdateClaim {
            id: self.id,
            operation_id: OperationId::try_from(self.operation_id).map_err(corrupt)?,
            source: self.source,
            crm_id: self.crm_id,
            case_id: self.case_id,
            delivery_id: self.delivery_id,
            original: json_text(self.original)?,
            later: json_text(self.later)?,
            attempts: self.attempts,
            owner: owner.to_owned(),
            token,
            expires_at,
        })
    }
}

/// An alert channel's state ([`CHANNEL_COLUMNS`]): what it sent in the last minute and
/// the message it has yet to deliver, as JSON text.
#[derive(FromRow)]
pub(crate) struct ChannelRow {
    case_cursor: i64,
    last_group_at: Option<DateTime<Utc>>,
    recent_sends: String,
    pending: Option<String>,
    /// The case cursor the pending message advances to.
    pub(crate) pending_cursor: Option<i64>,
    pending_conditions: Option<String>,
    failures: i32,
    next_try_at: Option<DateTime<Utc>>,
    lease_token: Option<String>,
    lease_until: Option<DateTime<Utc>>,
}

/// The columns of a [`ChannelRow`].
pub(crate) const CHANNEL_COLUMNS: &str = "case_cursor, last_group_at, recent_sends, pending, \
    pending_cursor, pending_conditions, failures, next_try_at, lease_token, lease_until";

impl ChannelRow {
    /// Another owner holds the channel's lease at `now`.
    pub(crate) fn leased_at(&self, now: DateTime<Utc>) -> bool {
        self.lease_token.is_some() && self.lease_until.is_some_and(|u| u > now)
    }

    /// When the channel accepted messages lately, as epoch milliseconds.
    pub(crate) fn recent_sends(&self) -> Result<Vec<i64>> {
        serde_json::from_str(&self.recent_sends).map_err(corrupt)
    }

    /// The message the channel has yet to deliver.
    pub(crate) fn pending(&self) -> Result<Option<PendingAlert>> {
        let Some(body) = &self.pending else {
            return Ok(None);
        };
        Ok(Some(PendingAlert {
            body: body.clone(),
            cursor: self.pending_cursor,
            conditions: serde_json::from_str(self.pending_conditions.as_deref().unwrap_or("[]"))
                .map_err(corrupt)?,
        }))
    }

    /// The turn of the lease `token` until `lease_until`, with the conditions as last
    /// announced.
    pub(crate) fn turn(
        self,
        token: String,
        lease_until: DateTime<Utc>,
        conditions: Vec<crate::AlertCondition>,
    ) -> Result<AlertTurn> {
        Ok(AlertTurn {
            recent_sends: self
                .recent_sends()?
                .into_iter()
                .filter_map(DateTime::<Utc>::from_timestamp_millis)
                .collect(),
            pending: self.pending()?,
            token,
            lease_until,
            case_cursor: self.case_cursor,
            last_group_at: self.last_group_at,
            failures: self.failures,
            next_try_at: self.next_try_at,
            conditions,
        })
    }
}

/// A review case joined with its operation ([`CASE_COLUMNS`](crate::sql::CASE_COLUMNS)).
#[derive(FromRow)]
pub(crate) struct ReviewCaseRow {
    id: i64,
    operation_id: String,
    source: String,
    reason: String,
    status: String,
    opened_at: DateTime<Utc>,
    resolved_at: Option<DateTime<Utc>>,
    resolution: Option<String>,
    resolved_by: Option<String>,
    comment: Option<String>,
    delivery_id: Option<i64>,
    detail: Option<String>,
    version: i64,
}

impl TryFrom<ReviewCaseRow> for ReviewCase {
    type Error = StoreError;

    fn try_from(r: ReviewCaseRow) -> Result<Self> {
        Ok(ReviewCase {
            id: r.id,
            operation_id: r.operation_id,
            source: r.source,
            reason: r.reason.parse().map_err(corrupt)?,
            status: r.status.parse().map_err(corrupt)?,
            opened_at: r.opened_at,
            resolved_at: r.resolved_at,
            resolution: r.resolution,
            resolved_by: r.resolved_by,
            comment: r.comment,
            delivery_id: r.delivery_id,
            detail: json_text(r.detail)?.unwrap_or(Value::Null),
            version: r.version,
        })
    }
}

/// One `events` row.
#[derive(FromRow)]
pub(crate) struct EventRow {
    id: i64,
    at: DateTime<Utc>,
    kind: String,
    actor: String,
    error_class: Option<String>,
    detail: Option<String>,
}

impl TryFrom<EventRow> for TimelineEvent {
    type Error = StoreError;

    fn try_from(r: EventRow) -> Result<Self> {
        Ok(TimelineEvent {
            id: r.id,
            at: r.at,
            kind: r.kind,
            actor: r.actor,
            error_class: r.error_class,
            detail: json_text(r.detail)?.unwrap_or(Value::Null),
        })
    }
}

/// A source's `business_rules` ([`RULES_COLUMNS`](crate::sql::RULES_COLUMNS)).
#[derive(FromRow)]
pub(crate) struct RulesRow {
    source: String,
    rule: String,
    window_secs: i64,
    channel: String,
    version: i64,
    changed_at: DateTime<Utc>,
    changed_by: String,
}

impl TryFrom<RulesRow> for StoredRules {
    type Error = StoreError;

    fn try_from(r: RulesRow) -> Result<Self> {
        Ok(StoredRules {
            rules: SourceRules {
                source: r.source,
                rule: r.rule.parse().map_err(corrupt)?,
                window_secs: r.window_secs,
                channel: r.channel,
            },
            version: r.version,
            changed_at: r.changed_at,
            changed_by: r.changed_by,
        })
    }
}

/// A saved diagnosis's summary (`diagnosis_reports` without the report).
#[derive(FromRow)]
pub(crate) struct DiagnosisRow {
    id: i64,
    generated_at: DateTime<Utc>,
    input: String,
    period_from: Option<DateTime<Utc>>,
    period_to: Option<DateTime<Utc>>,
    group_count: i64,
    pair_count: i64,
    totals: String,
}

impl TryFrom<DiagnosisRow> for DiagnosisSummary {
    type Error = StoreError;

    fn try_from(r: DiagnosisRow) -> Result<Self> {
        let totals: BTreeMap<String, i64> = serde_json::from_str(&r.totals).map_err(corrupt)?;
        Ok(DiagnosisSummary {
            id: r.id,
            generated_at: r.generated_at,
            input: r.input,
            period_from: r.period_from,
            period_to: r.period_to,
            groups: r.group_count,
            pairs: r.pair_count,
            totals,
        })
    }
}

/// A person's request ([`REQUEST_COLUMNS`](crate::sql::REQUEST_COLUMNS)).
#[derive(FromRow)]
pub(crate) struct HumanRequestRow {
    id: i64,
    actor: String,
    kind: String,
    case_id: Option<i64>,
    operation_id: Option<String>,
    connector: Option<String>,
    expected_version: Option<i64>,
    body: String,
    tenant_id: i32,
}

impl TryFrom<HumanRequestRow> for RequestRow {
    type Error = StoreError;

    fn try_from(r: HumanRequestRow) -> Result<Self> {
        Ok(RequestRow {
            id: r.id,
            actor: r.actor,
            tenant: leadgate_domain::TenantId(r.tenant_id),
            // A body that does not read back is the request's answer, not the read's error.
            ask: Ask::from_row(
                &r.kind,
                r.case_id,
                r.operation_id,
                r.connector,
                r.expected_version,
                &r.body,
            ),
        })
    }
}

/// A journaled delivery as a person reads it.
#[derive(FromRow)]
pub(crate) struct DeliveryRow {
    id: i64,
    source: String,
    operation_id: Option<String>,
    received_at: DateTime<Utc>,
    outcome: String,
    payload: Option<String>,
    payload_hash: Option<String>,
}

impl TryFrom<DeliveryRow> for DeliveryView {
    type Error = StoreError;

    fn try_from(r: DeliveryRow) -> Result<Self> {
        Ok(DeliveryView {
            id: r.id,
            source: r.source,
            operation_id: r.operation_id,
            received_at: r.received_at,
            outcome: r.outcome,
            payload: json_text(r.payload)?,
            payload_hash: r.payload_hash,
        })
    }
}

/// One search hit's columns; which field it matched is the query's to say
/// ([`SearchRow::hit`]).
#[derive(FromRow)]
pub(crate) struct SearchRow {
    operation_id: String,
    source: String,
    status: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    crm_id: Option<String>,
    review_reason: Option<String>,
    open_case_id: Option<i64>,
    contact_name: Option<String>,
    contact_phone: Option<String>,
    contact_email: Option<String>,
}

impl SearchRow {
    pub(crate) fn read<'r, R: sqlx::Row>(r: &'r R) -> Result<Self>
    where
        Self: FromRow<'r, R>,
    {
        Ok(Self::from_row(r)?)
    }

    /// The hit, matched on `matched` (which [`SearchRow::matched_by`] tells).
    pub(crate) fn hit(self, matched: MatchedField) -> Result<SearchHit> {
        Ok(SearchHit {
            operation_id: self.operation_id,
            source: self.source,
            status: self.status.parse().map_err(corrupt)?,
            created_at: self.created_at,
            updated_at: self.updated_at,
            crm_id: self.crm_id,
            review_reason: parse_opt(self.review_reason)?,
            open_case_id: self.open_case_id,
            name: self.contact_name,
            phone: self.contact_phone,
            email: self.contact_email,
            matched,
        })
    }

    /// Which field `query` matched in this row: the first of key, `crm_id`, name for text.
    pub(crate) fn matched_by(&self, query: &SearchQuery) -> MatchedField {
        match query {
            SearchQuery::Phone(_) => MatchedField::Phone,
            SearchQuery::Email(_) => MatchedField::Email,
            SearchQuery::Text { key, .. } if self.operation_id.starts_with(key.as_str()) => {
                MatchedField::OperationId
            }
            SearchQuery::Text { text, .. } if self.crm_id.as_deref() == Some(text.as_str()) => {
                MatchedField::CrmId
            }
            SearchQuery::Text { .. } => MatchedField::Name,
        }
    }
}

/// An operation as [`Reads::lookup`](crate::Reads::lookup) finds it.
#[derive(FromRow)]
pub(crate) struct LookupRow {
    operation_id: String,
    source: String,
    status: String,
    received_at: DateTime<Utc>,
    crm_id: Option<String>,
}

impl TryFrom<LookupRow> for crate::LookupHit {
    type Error = StoreError;

    fn try_from(r: LookupRow) -> Result<Self> {
        Ok(crate::LookupHit {
            operation_id: r.operation_id,
            source: r.source,
            status: r.status.parse().map_err(corrupt)?,
            received_at: r.received_at,
            crm_id: r.crm_id,
        })
    }
}

/// An operation's state ([`Reads::states_of`](crate::Reads::states_of)).
#[derive(FromRow)]
pub(crate) struct StateRow {
    operation_id: String,
    status: String,
    crm_link: Option<String>,
}

impl TryFrom<StateRow> for crate::OperationState {
    type Error = StoreError;

    fn try_from(r: StateRow) -> Result<Self> {
        Ok(crate::OperationState {
            operation_id: r.operation_id,
            status: r.status.parse().map_err(corrupt)?,
            crm_link: r.crm_link,
        })
    }
}
