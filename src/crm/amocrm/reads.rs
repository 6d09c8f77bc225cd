//! Read-only calls for `leadgate diagnose`: the leads created in a period (with their
//! contacts), contacts by id, and the contact search by phone or e-mail that finds
//! older leads of the same person. Nothing here writes to the account: the only
//! requests this module can send are in [`READS`], and every request goes through the
//! adapter's `call` — the same shared pace, token handling and classification as its
//! creates.

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Map, Value};

use super::{id_of, AmoCrm, CONNECTOR, SEARCH_LIMIT};
use crate::crm::CrmError;
use crate::domain::ErrorClass;

/// The requests a diagnosis may send. Anything else is refused before it is sent.
pub const READS: &[&str] = &["GET /api/v4/leads", "GET /api/v4/contacts"];

/// At most this many pages of one list are read in one run (2,500,000 leads).
pub const MAX_PAGES: usize = 10_000;

/// Ids per `filter[id][]` request.
const IDS_PER_REQUEST: usize = 50;

/// How often one read is sent again after a 429 (the adapter's limiter holds every
/// call of the process first).
const RATE_LIMITED_RETRIES: u32 = 5;

/// How far a read has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub pages: usize,
    pub rows: usize,
}

/// A contact the search found, and the leads it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundContact {
    pub contact: Value,
    pub lead_ids: Vec<String>,
}

impl AmoCrm {
    /// The custom text field that holds the operation_id (Leadgate's key on a lead).
    pub fn operation_field_id(&self) -> u64 {
        self.field_id
    }

    /// One read-only request (`what` is `GET /api/v4/...`); anything outside
    /// [`READS`] is refused unsent. `None` is amoCRM's empty answer (204, no body).
    /// `redact` are values (a phone, an e-mail) that must not reach a message.
    async fn read(
        &self,
        what: &str,
        params: &[(String, String)],
        redact: &[&str],
    ) -> Result<Option<Value>, CrmError> {
        let path = match what.split_once(' ') {
            Some(("GET", path)) if READS.contains(&what) => path,
            _ => {
                return Err(CrmError::new(
                    ErrorClass::Validation,
                    format!(
                        "{CONNECTOR} {what}: not a read-only request; a diagnosis never writes"
                    ),
                ))
            }
        };
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.base), params)
            .map_err(|e| {
                CrmError::new(
                    ErrorClass::Auth,
                    format!("{CONNECTOR} {what}: invalid base URL: {e}"),
                )
            })?;
        let mut tries = 0;
        let (status, bytes) = loop {
            let mut summary = Map::new();
            match self
                .call(what, self.client.get(url.clone()), redact, &mut summary)
                .await
            {
                Err(e) if e.class == ErrorClass::RateLimited && tries < RATE_LIMITED_RETRIES => {
                    tries += 1;
                }
                other => break other?,
            }
        };
        if status == StatusCode::NO_CONTENT || bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(&bytes).map(Some).map_err(|_| {
            CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR} {what}: the answer is not JSON"),
            )
        })
    }

    /// Every row of `_embedded.{key}` of a paged list, page by page while the answer
    /// links a next page (`_links.next`); an empty page is 204.
    async fn pages(
        &self,
        what: &str,
        key: &str,
        params: &[(String, String)],
        redact: &[&str],
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Vec<Value>, CrmError> {
        let mut rows = Vec::new();
        let mut page = 1usize;
        loop {
            let mut p = params.to_vec();
            p.push(("limit".into(), SEARCH_LIMIT.to_string()));
            p.push(("page".into(), page.to_string()));
            let Some(answer) = self.read(what, &p, redact).await? else {
                break;
            };
            let batch = answer
                .pointer(&format!("/_embedded/{key}"))
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {what}: the answer has no {key} list"),
                    )
                })?;
            rows.extend(batch.iter().cloned());
            progress(Progress {
                pages: page,
                rows: rows.len(),
            });
            if answer.pointer("/_links/next/href").is_none() || batch.is_empty() {
                break;
            }
            if page >= MAX_PAGES {
                return Err(CrmError::new(
                    ErrorClass::Uncertain,
                    format!("{CONNECTOR} {what}: stopped after {page} pages"),
                ));
            }
            page += 1;
        }
        Ok(rows)
    }

    /// Every lead created in `[from, to)` with its contacts' ids (`with=contacts`),
    /// oldest first as the account lists them.
    pub async fn leads_created(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Vec<Value>, CrmError> {
        // amoCRM's range is inclusive at both ends, in whole seconds.
        let params = [
            ("filter[created_at][from]", from.timestamp().to_string()),
            ("filter[created_at][to]", (to.timestamp() - 1).to_string()),
            ("with", "contacts".into()),
            ("order[created_at]", "asc".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        self.pages("GET /api/v4/leads", "leads", &params, &[], progress)
            .await
    }

    /// The leads of `ids` with their contacts' ids.
    pub async fn leads_by_id(&self, ids: &[String]) -> Result<Vec<Value>, CrmError> {
        self.by_id("GET /api/v4/leads", "leads", ids, &[("with", "contacts")])
            .await
    }

    /// The contacts of `ids` (their names, phones and e-mails).
    pub async fn contacts_by_id(&self, ids: &[String]) -> Result<Vec<Value>, CrmError> {
        self.by_id("GET /api/v4/contacts", "contacts", ids, &[])
            .await
    }

    async fn by_id(
        &self,
        what: &str,
        key: &str,
        ids: &[String],
        extra: &[(&str, &str)],
    ) -> Result<Vec<Value>, CrmError> {
        let mut rows = Vec::new();
        for chunk in ids.chunks(IDS_PER_REQUEST) {
            let mut params: Vec<(String, String)> = chunk
                .iter()
                .map(|id| ("filter[id][]".to_owned(), id.clone()))
                .collect();
            params.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            rows.extend(self.pages(what, key, &params, &[], &mut |_| {}).await?);
        }
        Ok(rows)
    }

    /// The contacts amoCRM's search finds for `query` (a phone's digits or an
    /// e-mail), with the ids of their leads (`with=leads`). The search matches loosely
    /// (substrings of any field): the caller confirms a match on normalized values.
    pub async fn contacts_matching(&self, query: &str) -> Result<Vec<FoundContact>, CrmError> {
        let params =
            [("query", query), ("with", "leads")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        let rows = self
            .pages(
                "GET /api/v4/contacts",
                "contacts",
                &params,
                &[query],
                &mut |_| {},
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|contact| {
                let lead_ids = contact
                    .pointer("/_embedded/leads")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|l| l.get("id").and_then(id_of))
                    .collect();
                FoundContact { contact, lead_ids }
            })
            .collect())
    }
}

/// The ids of a lead's contacts (`_embedded.contacts`), the main one first.
pub fn contact_ids(lead: &Value) -> Vec<String> {
    let mut contacts: Vec<&Value> = lead
        .pointer("/_embedded/contacts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    contacts.sort_by_key(|c| !c.get("is_main").and_then(Value::as_bool).unwrap_or(false));
    contacts
        .iter()
        .filter_map(|c| c.get("id").and_then(id_of))
        .collect()
}

/// An entity's id as the adapter reads ids (an integer, or a digit string).
pub fn entity_id(v: &Value) -> Option<String> {
    id_of(v)
}

/// The values of a contact's multifield `code` (`PHONE`, `EMAIL`).
pub fn contact_values(contact: &Value, code: &str) -> Vec<String> {
    super::values_of_code(contact, code)
}

#[cfg(test)]
mod tests {
    use super::super::{Auth, Settings};
    use super::*;

    #[tokio::test]
    async fn a_request_that_is_not_a_read_is_refused_unsent() {
        // Nothing listens on the discard port: a request that went out would fail as a
        // transport error, not be refused.
        let crm = AmoCrm::new(Settings {
            base_url: "http://127.0.0.1:9".into(),
            auth: Auth::Token("t".into()),
            operation_field_id: 1,
            pipeline_id: None,
            rate_limit: 100.0,
            timeout: std::time::Duration::from_secs(1),
        })
        .unwrap();
        for what in [
            "POST /api/v4/leads/complex",
            "PATCH /api/v4/leads",
            "POST /api/v4/contacts",
            "DELETE /api/v4/contacts",
            "GET /api/v4/leads/unsorted/accept",
            "GET /api/v4/contacts/merge",
            "POST /oauth2/access_token",
        ] {
            let e = crm.read(what, &[], &[]).await.unwrap_err();
            assert_eq!(e.class, ErrorClass::Validation, "{what}");
            assert!(e.message.contains("never writes"), "{what}: {e}");
        }
        let e = crm.read("GET /api/v4/leads", &[], &[]).await.unwrap_err();
        assert_ne!(e.class, ErrorClass::Validation, "a read goes out: {e}");
    }

    #[tokio::test]
    async fn a_429_is_waited_out_and_the_read_sent_again() {
        use leadgate_fakes::amocrm::{FakeAmoCrm, Fault, FIELD_ID, SEARCH};
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let now = Utc::now();
        let contact = fake.seed_contact(serde_json::json!({"name": "A"}));
        fake.seed_lead(
            serde_json::json!({"created_at": now.timestamp() - 60}),
            &[contact],
        );
        fake.push_fault(
            SEARCH,
            Fault::RateLimit {
                retry_after_secs: None,
            },
            2,
        );
        let crm = AmoCrm::new(Settings {
            base_url: fake.base_url(),
            auth: Auth::Token(fake.token().into()),
            operation_field_id: FIELD_ID,
            pipeline_id: None,
            rate_limit: 50.0,
            timeout: std::time::Duration::from_secs(5),
        })
        .unwrap();
        let hour = chrono::TimeDelta::hours(1);
        let leads = crm
            .leads_created(now - hour, now + hour, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(leads.len(), 1);
        assert_eq!(
            contact_ids(&leads[0]),
            [contact.to_string()],
            "with=contacts"
        );
        assert_eq!(fake.calls(SEARCH), 3, "two 429s, then the answer");
        assert_eq!(fake.writes(), 0);
    }
}
