//! Search across all operations and a selection's rows (a tab with its filters, or a
//! search): what the queue, the bulk actions and the export read.

use super::*;

/// One operation found by [`Console::search`] (any status, not only open cases).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SearchRow {
    pub operation_id: String,
    pub source: String,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub crm_id: Option<String>,
    pub review_reason: Option<String>,
    /// The newest open review case, to open it in the case view.
    #[ts(type = "number | null")]
    pub open_case_id: Option<i64>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    /// Which field the query matched.
    #[ts(type = "\"operation_id\" | \"crm_id\" | \"name\" | \"phone\" | \"email\"")]
    pub matched: String,
}

/// A page of search results, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SearchResults {
    /// How the query was read: a phone (`normalized` is its E.164 form), an e-mail
    /// (normalized), or text (key, crm_id and name).
    #[ts(type = "\"phone\" | \"email\" | \"text\"")]
    pub kind: String,
    pub normalized: String,
    pub rows: Vec<SearchRow>,
    /// The cursor of the next page; none on the last.
    pub next: Option<String>,
}

/// What a bulk action or an export covers: a queue tab with its filters, or a search
/// (then the tab and its filters are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Selection {
    pub tab: Tab,
    pub query: QueueQuery,
    #[serde(default)]
    pub search: Option<String>,
}

impl Console {
    /// Every row `selection` covers, in the queue's order (a search: newest first, as
    /// queue rows whose case is the open one), at most `max`; and whether more matched.
    pub async fn rows_of(
        &self,
        selection: &Selection,
        max: usize,
    ) -> ApiResult<(Vec<QueueRow>, bool)> {
        let mut rows: Vec<QueueRow> = vec![];
        match selection
            .search
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
        {
            Some(q) => {
                let mut cursor = None;
                loop {
                    let page = self.search(q, cursor, Some(200)).await?;
                    rows.extend(page.rows.into_iter().map(|r| QueueRow {
                        case_id: r.open_case_id,
                        operation_id: Some(r.operation_id),
                        source: r.source,
                        status: r.status,
                        reason: r.review_reason,
                        since: r.updated_at,
                        attempts: 0,
                        crm_id: r.crm_id,
                        note: None,
                        lead: LeadSummary {
                            name: r.name,
                            phone: r.phone,
                            email: r.email,
                            form: None,
                        },
                    }));
                    match page.next {
                        Some(next) if rows.len() <= max => cursor = Some(next),
                        _ => break,
                    }
                }
                rows = self.with_leads(rows).await?;
            }
            None => {
                let mut query = selection.query.clone();
                query.limit = Some(500);
                query.cursor = None;
                loop {
                    let page = self.queue(selection.tab, query.clone()).await?;
                    rows.extend(page.rows);
                    match page.next {
                        Some(next) if rows.len() <= max => query.cursor = Some(next),
                        _ => break,
                    }
                }
            }
        }
        let more = rows.len() > max;
        rows.truncate(max);
        Ok((rows, more))
    }

    /// Operations of any status matching `query` — a key (exact or prefix), a phone in
    /// any format, an e-mail, a crm_id or the prefix of a word of the name — newest
    /// first, `limit` (default 50, at most 200) after `cursor` (the `next` of the page
    /// before). Phones without a country code are read in [`Console::phone_region`].
    pub async fn search(
        &self,
        query: &str,
        cursor: Option<String>,
        limit: Option<i64>,
    ) -> ApiResult<SearchResults> {
        use leadgate_store::{SearchCursor, SearchPlan, SearchQuery};
        let q = SearchQuery::parse(query, self.phone_region)
            .map_err(|e| ConsoleError::Invalid {
                message: e.to_string(),
            })?
            .in_tenant(&self.connection.tenant);
        let after = cursor
            .filter(|c| !c.is_empty())
            .map(|c| c.parse::<SearchCursor>().map_err(|_| cursor_err()))
            .transpose()?;
        let page = self
            .store
            .search(&q, after.as_ref(), limit.unwrap_or(50), SearchPlan::Auto)
            .await?;
        let (kind, normalized) = match &q {
            SearchQuery::Phone(p) => ("phone", p.clone()),
            SearchQuery::Email(e) => ("email", e.clone()),
            SearchQuery::Text { text, .. } => ("text", text.clone()),
        };
        Ok(SearchResults {
            kind: kind.into(),
            normalized,
            rows: page
                .hits
                .into_iter()
                .map(|h| SearchRow {
                    operation_id: h.operation_id,
                    source: h.source,
                    status: h.status.as_str().into(),
                    created_at: ts(h.created_at),
                    updated_at: ts(h.updated_at),
                    crm_id: h.crm_id,
                    review_reason: h.review_reason.map(|r| r.as_str().into()),
                    open_case_id: h.open_case_id,
                    name: h.name,
                    phone: h.phone,
                    email: h.email,
                    matched: h.matched.as_str().into(),
                })
                .collect(),
            next: page.next.map(|c| c.to_string()),
        })
    }
}
