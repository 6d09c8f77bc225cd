//! "Did my lead arrive?" — support's lookup (issue 37): a phone in any format, a key or a
//! crm_id in; each matching lead's status, when it was received, its crm_id and whether it
//! is in the CRM out. Nothing a lead said (no name, contact or payload): on PostgreSQL the
//! database's `leadgate_lookup` answers these columns alone, to every role.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use leadgate_store::SearchQuery;

use crate::{ts, ApiResult, Console, ConsoleError};

/// How many leads one lookup lists (a shared phone can match many).
pub const LOOKUP_SHOWN: i64 = 20;

/// One lead a lookup found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct LookupRow {
    pub operation_id: String,
    pub source: String,
    pub status: String,
    pub received_at: String,
    pub crm_id: Option<String>,
    /// The CRM has it: the lead was created there or linked to an entity it holds.
    pub in_crm: bool,
}

/// What a lookup matched, and the leads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct LookupResult {
    /// The phone as it was looked for (normalized), when the query reads as one.
    pub phone: Option<String>,
    pub rows: Vec<LookupRow>,
}

impl Console {
    pub async fn lookup(&self, query: &str) -> ApiResult<LookupResult> {
        let text = query.trim();
        if text.is_empty() {
            return Err(ConsoleError::Invalid {
                message: "type a phone, a lead's key or its CRM id".into(),
            });
        }
        let phone = match SearchQuery::parse(text, self.phone_region) {
            Ok(SearchQuery::Phone(p)) => Some(p),
            _ => None,
        };
        let hits = self
            .store
            .lookup(phone.as_deref(), Some(text), LOOKUP_SHOWN)
            .await?;
        Ok(LookupResult {
            phone,
            rows: hits
                .into_iter()
                .map(|h| LookupRow {
                    in_crm: h.crm_id.is_some(),
                    operation_id: h.operation_id,
                    source: h.source,
                    status: h.status.as_str().into(),
                    received_at: ts(h.received_at),
                    crm_id: h.crm_id,
                })
                .collect(),
        })
    }
}
