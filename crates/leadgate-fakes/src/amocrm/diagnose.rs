//! What the fake account needs for `leadgate diagnose`: the list filters amoCRM
//! documents for leads and contacts (`filter[id][]`, `filter[created_at][from|to]`,
//! `with=contacts` / `with=leads`, `order[created_at|id]`), paged HAL answers with
//! `_links.next`, leads and contacts seeded as an account in use holds them (their own
//! creation time, custom fields, contacts), and a count of the calls that would have
//! changed something.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{
    lock, FakeAmoCrm, Shared, StoredLead, CONTACT_ADD, CONTACT_UPDATE, CREATE, DEFAULT_PIPELINE,
    MAX_LIMIT, UPDATE,
};

/// The calls that change the account.
const WRITES: &[&str] = &[CREATE, UPDATE, CONTACT_ADD, CONTACT_UPDATE];

/// A list request's parameters, as amoCRM reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct List {
    pub query: Option<String>,
    /// `filter[id][]=1&filter[id][]=2`, `filter[id][0]=1`, or `filter[id]=1`.
    pub ids: Option<BTreeSet<u64>>,
    /// `filter[created_at][from]` / `[to]`: unix seconds, both ends included.
    pub created_from: Option<i64>,
    pub created_to: Option<i64>,
    /// `with=contacts,leads`.
    pub with: Vec<String>,
    /// `order[created_at]=desc` → `("created_at", false)`.
    pub order: Option<(String, bool)>,
    pub limit: usize,
    pub page: usize,
    /// Everything but `page`, for the `_links`.
    pub rest: Vec<(String, String)>,
}

impl List {
    pub fn with(&self, what: &str) -> bool {
        self.with.iter().any(|w| w == what)
    }

    /// Whether an entity with `id` created at `created_at` passes the filters.
    pub fn admits(&self, id: u64, created_at: Option<i64>) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(&id))
            && self
                .created_from
                .is_none_or(|f| created_at.is_some_and(|c| c >= f))
            && self
                .created_to
                .is_none_or(|t| created_at.is_some_and(|c| c <= t))
    }
}

/// Reads the parameters; an unknown filter or a value that is not a number where one
/// is wanted is an error (amoCRM answers those with 400).
pub(super) fn list(params: &[(String, String)]) -> Result<List, String> {
    let mut l = List {
        limit: 50,
        page: 1,
        ..List::default()
    };
    let number = |k: &str, v: &str| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| format!("{k} must be a number"))
    };
    for (k, v) in params {
        if k != "page" {
            l.rest.push((k.clone(), v.clone()));
        }
        match k.as_str() {
            "query" => l.query = Some(v.trim().to_owned()).filter(|q| !q.is_empty()),
            "limit" => {
                l.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or(format!("limit must be from 1 to {MAX_LIMIT}"))?
            }
            "page" => l.page = v.parse::<usize>().ok().filter(|p| *p >= 1).unwrap_or(1),
            "with" => l.with.extend(v.split(',').map(|w| w.trim().to_owned())),
            "filter[created_at][from]" => l.created_from = Some(number(k, v)?),
            "filter[created_at][to]" => l.created_to = Some(number(k, v)?),
            k if k == "filter[id]" || k.starts_with("filter[id][") => {
                let id = number(k, v)?;
                l.ids.get_or_insert_with(BTreeSet::new).insert(id as u64);
            }
            k if k.starts_with("order[") && k.ends_with(']') => {
                let field = &k[6..k.len() - 1];
                if !matches!(field, "created_at" | "updated_at" | "id") {
                    return Err(format!("{k}: cannot order by {field}"));
                }
                let asc = match v.as_str() {
                    "asc" => true,
                    "desc" => false,
                    _ => return Err(format!("{k} must be asc or desc")),
                };
                l.order = Some((field.to_owned(), asc));
            }
            k if k.starts_with("filter[") => {
                return Err(format!("the filter {k} is not supported"))
            }
            _ => {}
        }
    }
    Ok(l)
}

/// One page of `rows` as amoCRM answers a list: `None` when the page is empty (204),
/// else `_page`, `_links.self/next/prev` and `_embedded.{key}`.
pub(super) fn page(
    base_url: &str,
    path: &str,
    key: &str,
    l: &List,
    mut rows: Vec<Value>,
) -> Option<Value> {
    if let Some((field, asc)) = &l.order {
        rows.sort_by_key(|r| r.get(field).and_then(Value::as_i64).unwrap_or(0));
        if !asc {
            rows.reverse();
        }
    }
    let total = rows.len();
    let rows: Vec<Value> = rows
        .into_iter()
        .skip((l.page - 1) * l.limit)
        .take(l.limit)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let href = |p: usize| {
        let mut url = reqwest::Url::parse(&format!("{base_url}{path}")).expect("base URL");
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in &l.rest {
                q.append_pair(k, v);
            }
            q.append_pair("page", &p.to_string());
        }
        url.to_string()
    };
    let mut links = json!({"self": {"href": href(l.page)}});
    if l.page * l.limit < total {
        links["next"] = json!({"href": href(l.page + 1)});
    }
    if l.page > 1 {
        links["prev"] = json!({"href": href(l.page - 1)});
    }
    Some(json!({"_page": l.page, "_links": links, "_embedded": {key: rows}}))
}

/// The leads whose `_embedded.contacts` name `contact`, as a contact's
/// `_embedded.leads` lists them.
pub(super) fn leads_of(
    base_url: &str,
    leads: &BTreeMap<u64, StoredLead>,
    contact: u64,
) -> Vec<Value> {
    leads
        .iter()
        .filter(|(_, l)| {
            l.lead
                .get("_embedded")
                .and_then(|e| e.get("contacts"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c.get("id").and_then(Value::as_u64) == Some(contact))
        })
        .map(|(id, _)| {
            json!({"id": id, "_links": {"self": {"href": format!("{base_url}/api/v4/leads/{id}")}}})
        })
        .collect()
}

/// Long enough ago that no search lag hides a seeded entity.
fn long_ago() -> Instant {
    Instant::now()
        .checked_sub(Duration::from_secs(3600))
        .unwrap_or_else(Instant::now)
}

fn add_contact(shared: &Shared, contact: Value) -> u64 {
    let mut store = lock(&shared.store);
    store.last_contact += 1;
    let id = store.last_contact;
    let mut c = contact.as_object().cloned().unwrap_or_default();
    c.insert("id".into(), json!(id));
    store.contacts.insert(id, c);
    store.contact_created.insert(id, long_ago());
    id
}

impl FakeAmoCrm {
    /// Adds a contact as an account in use holds it (`name`, `first_name`,
    /// `custom_fields_values` with `PHONE`/`EMAIL` by `field_code`). Returns its id.
    pub fn seed_contact(&self, contact: Value) -> u64 {
        add_contact(&self.shared, contact)
    }

    /// Adds a lead as an account in use holds it: `lead`'s `name`, `created_at` (unix
    /// seconds), `custom_fields_values`… as given, tied to `contacts` (the first is the
    /// main one). Returns its id.
    pub fn seed_lead(&self, lead: Value, contacts: &[u64]) -> u64 {
        let base_url = lock(&self.shared.base_url).clone();
        let mut store = lock(&self.shared.store);
        store.last_lead += 1;
        let id = store.last_lead;
        let now = chrono::Utc::now().timestamp();
        let mut l: Map<String, Value> = json!({
            "id": id, "name": format!("Сделка #{id}"), "price": 0, "responsible_user_id": 0,
            "group_id": 0, "status_id": 1, "pipeline_id": DEFAULT_PIPELINE, "created_by": 0,
            "updated_by": 0, "created_at": now, "updated_at": now, "closed_at": null,
            "is_deleted": false, "custom_fields_values": null, "account_id": 1,
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        for (k, v) in lead.as_object().cloned().unwrap_or_default() {
            l.insert(k, v);
        }
        l.insert("id".into(), json!(id));
        l.insert(
            "_links".into(),
            json!({"self": {"href": format!("{base_url}/api/v4/leads/{id}")}}),
        );
        let contacts: Vec<Value> = contacts
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"id": c, "is_main": i == 0}))
            .collect();
        l.insert(
            "_embedded".into(),
            json!({"tags": [], "companies": [], "contacts": contacts}),
        );
        store.leads.insert(
            id,
            StoredLead {
                lead: l,
                created: long_ago(),
            },
        );
        id
    }

    /// Calls of every request that changes the account (creates, updates, contact
    /// adds and updates).
    pub fn writes(&self) -> u64 {
        WRITES.iter().map(|m| self.shared.calls.get(m)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn list_parameters_as_amocrm_reads_them() {
        let l = list(&p(&[
            ("filter[id][]", "3"),
            ("filter[id][]", "5"),
            ("filter[created_at][from]", "100"),
            ("filter[created_at][to]", "200"),
            ("with", "contacts,leads"),
            ("order[created_at]", "asc"),
            ("limit", "250"),
            ("page", "2"),
        ]))
        .unwrap();
        assert_eq!(l.ids, Some([3, 5].into_iter().collect()));
        assert!(l.with("contacts") && l.with("leads"));
        assert_eq!((l.limit, l.page), (250, 2));
        assert!(
            l.admits(3, Some(100)) && l.admits(5, Some(200)),
            "both ends included"
        );
        assert!(!l.admits(3, Some(201)) && !l.admits(4, Some(150)) && !l.admits(3, None));
        assert!(!l.rest.iter().any(|(k, _)| k == "page"));
        assert!(list(&p(&[("filter[created_at][from]", "yesterday")])).is_err());
        assert!(
            list(&p(&[("filter[price]", "1")])).is_err(),
            "an unknown filter"
        );
        assert!(list(&p(&[("limit", "251")])).is_err());
        assert!(list(&p(&[("order[name]", "asc")])).is_err());
    }
}
