//! Read-only calls for `leadgate diagnose`: the leads of a period and the duplicate
//! search by phone or e-mail. Nothing here writes to the portal: the only methods this
//! module can send are in [`READ_METHODS`], and every request goes through the same
//! pace as the adapter's creates (`post_envelope`).

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use super::{id_of, Bitrix24, CONNECTOR, MAX_BATCH};
use crate::crm::rate::RateLimiter;
use crate::crm::CrmError;
use crate::domain::ErrorClass;

/// The methods a diagnosis may call. Anything else is refused before it is sent.
pub const READ_METHODS: &[&str] = &["crm.lead.list", "crm.deal.list", "crm.duplicate.findbycomm"];

/// The fields a diagnosis reads of each lead.
pub const LEAD_FIELDS: &[&str] = &[
    "ID",
    "TITLE",
    "NAME",
    "LAST_NAME",
    "DATE_CREATE",
    "SOURCE_ID",
    "SOURCE_DESCRIPTION",
    "ORIGINATOR_ID",
    "ORIGIN_ID",
    "PHONE",
    "EMAIL",
    "COMMENTS",
    "UTM_SOURCE",
    "UTM_MEDIUM",
    "UTM_CAMPAIGN",
];

/// At most this many pages are read in one run (500,000 leads): a bound, not a limit
/// anyone should meet.
pub const MAX_PAGES: usize = 10_000;

/// How far a read has come: rows so far and the total the portal announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub pages: usize,
    pub rows: usize,
    pub total: Option<u64>,
}

impl Bitrix24 {
    /// Paces this process's requests at `per_second` with `burst` at once when no
    /// operations database is at hand to share the pace with ([`Bitrix24::paced_in`]).
    pub fn paced_here(mut self, per_second: f64, burst: u32) -> Self {
        self.limiter = Some(Arc::new(RateLimiter::with_burst(per_second, burst)));
        self
    }

    /// One read-only call; any method outside [`READ_METHODS`] is refused unsent.
    async fn read(&self, method: &str, body: &Value) -> Result<Value, CrmError> {
        if !READ_METHODS.contains(&method) {
            return Err(CrmError::new(
                ErrorClass::Validation,
                format!("{CONNECTOR} {method}: not a read-only method; a diagnosis never writes"),
            ));
        }
        let mut summary = serde_json::Map::new();
        self.post_envelope(method, body, "diagnose", &[], &mut summary)
            .await
    }

    /// Every lead created in `[from, to)`, oldest first, page by page (`start`, 50 rows
    /// a page as the portal pages them). `progress` is told after each page.
    pub async fn leads_created(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Vec<Value>, CrmError> {
        let method = "crm.lead.list";
        let mut rows = Vec::new();
        let mut start = 0u64;
        let mut pages = 0;
        loop {
            let body = json!({
                "filter": {
                    ">=DATE_CREATE": from.to_rfc3339_opts(SecondsFormat::Secs, false),
                    "<DATE_CREATE": to.to_rfc3339_opts(SecondsFormat::Secs, false),
                },
                "select": LEAD_FIELDS,
                "order": {"ID": "ASC"},
                "start": start,
            });
            let page = self.read(method, &body).await?;
            let batch = page
                .get("result")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {method}: the answer is not a list"),
                    )
                })?;
            rows.extend(batch.iter().cloned());
            pages += 1;
            progress(Progress {
                pages,
                rows: rows.len(),
                total: page.get("total").and_then(Value::as_u64),
            });
            match page.get("next").and_then(Value::as_u64) {
                Some(next) if next > start && pages < MAX_PAGES => start = next,
                Some(_) => {
                    return Err(CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {method}: stopped after {pages} pages"),
                    ))
                }
                None => break,
            }
        }
        Ok(rows)
    }

    /// The leads Bitrix24's own duplicate search finds for these phones (`PHONE`) or
    /// e-mails (`EMAIL`), 20 values a call as the portal allows.
    pub async fn lead_duplicates(
        &self,
        kind: &str,
        values: &[String],
    ) -> Result<Vec<String>, CrmError> {
        let method = "crm.duplicate.findbycomm";
        let mut ids = Vec::new();
        for chunk in values.chunks(20.min(MAX_BATCH)) {
            let body = json!({"type": kind, "values": chunk, "entity_type": "LEAD"});
            let answer = self.read(method, &body).await?;
            // No match is `[]`, a match `{"LEAD": [ids]}`.
            if let Some(found) = answer
                .get("result")
                .and_then(|r| r.get("LEAD"))
                .and_then(Value::as_array)
            {
                ids.extend(found.iter().filter_map(id_of));
            }
        }
        ids.sort_by_key(|id| id.parse::<u64>().unwrap_or(u64::MAX));
        ids.dedup();
        Ok(ids)
    }
}

impl Bitrix24 {
    /// The leads of `ids` (those found by [`Bitrix24::lead_duplicates`] outside the
    /// period), 50 a page.
    pub async fn leads_by_id(&self, ids: &[String]) -> Result<Vec<Value>, CrmError> {
        let mut rows = Vec::new();
        for chunk in ids.chunks(MAX_BATCH) {
            let body = json!({
                "filter": {"@ID": chunk},
                "select": LEAD_FIELDS,
                "order": {"ID": "ASC"},
                "start": -1,
            });
            let page = self.read("crm.lead.list", &body).await?;
            if let Some(found) = page.get("result").and_then(Value::as_array) {
                rows.extend(found.iter().cloned());
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_method_that_is_not_a_read_is_refused_unsent() {
        // Nothing listens on the discard port: a call that went out would fail as a
        // transport error, not be refused.
        let crm = Bitrix24::new(
            "http://127.0.0.1:9/rest/1/secret/",
            super::super::Entity::Lead,
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        for method in [
            "crm.lead.add",
            "crm.lead.update",
            "crm.entity.mergeBatch",
            "batch",
        ] {
            let e = crm.read(method, &json!({})).await.unwrap_err();
            assert_eq!(e.class, ErrorClass::Validation, "{method}");
            assert!(e.message.contains("never writes"), "{method}: {e}");
        }
        let e = crm.read("crm.lead.list", &json!({})).await.unwrap_err();
        assert_ne!(e.class, ErrorClass::Validation, "a read goes out: {e}");
    }
}
