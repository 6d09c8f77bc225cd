//! Fleet mode (issue 35) at work, on both backends: the journal keeps each tenant's
//! deliveries, keys, contact matches, content windows and signatures apart (`journal`);
//! a gateway serves its tenants beside the default one, each lead in its own tenant's
//! operations and its own CRM, the CRM given the key without the tenant, each tenant's
//! figures its own (`serving`); a tenant leaves with its data and is erased, a portal
//! moves in without a second create (`lifecycle`).

mod alerting;
mod console;
mod journal;
mod lifecycle;
mod pulled;
mod serving;
mod sharing;
mod spooled;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::json;

use leadgate::crm::vault::Vault;
use leadgate::domain::contact::{normalize_phone, Region};
use leadgate::domain::{MatchRule, OperationId, Status, TenantId, TenantSlug};
use leadgate::store::{DeliveryOutcome, Matching, NewDelivery, Store, TenantState};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use leadgate_testkit::seed;

/// A fake Bitrix24 portal on a port of its own.
async fn portal() -> FakeBitrix24 {
    FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// Posts `key`'s lead to `tenant`'s `source` with `token`.
async fn post_to(
    gw: &Gateway,
    tenant: &str,
    source: &str,
    token: &str,
    key: &str,
) -> (StatusCode, serde_json::Value, bool) {
    let url = format!("{}/v1/intake/{tenant}/{source}?token={token}", gw.base);
    answer(gw.http.post(url).json(&lead(key)).send().await.unwrap()).await
}

/// The token key `[fleet] token_key_file` names, as the gateway reads it.
const KEY: [u8; 32] = [9; 32];

/// A tenants file: each (slug, its fake Bitrix24, its `site` source's token).
fn tenants_file(tenants: &[(&str, &FakeBitrix24, &str)]) -> String {
    let mut toml = String::new();
    for (slug, crm, token) in tenants {
        toml += &format!(
            r#"
[[tenant]]
slug = "{slug}"
name = "{slug} portal"
[tenant.crm]
kind = "bitrix24"
webhook_url = "{}"
timeout = "500ms"
settle = "300ms"
[[tenant.source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
token = "{token}"
[tenant.api]
integration_token = "{slug}-integration"
read_token = "{slug}-read"
"#,
            crm.webhook_url()
        );
    }
    toml
}

/// Applies `file` (a tenants file) to the test database, as `leadgate tenant apply` does.
async fn apply(db: &leadgate_testkit::TestDb, file: &str) {
    let wanted = leadgate::config::tenants::parse_toml(file, None).unwrap();
    let store = db.store().await;
    leadgate::tenants::apply(
        &*store,
        &Vault::new(KEY),
        &wanted,
        false,
        false,
        None,
        "test",
    )
    .await
    .unwrap();
}

/// A tenant `acme` on its own fake Bitrix24, applied to the test database; the file
/// holding the token key, and the configuration that names it (and reads the registry
/// every 100 ms).
async fn acme_on(db: &leadgate_testkit::TestDb, crm: &FakeBitrix24) -> (tempfile::TempDir, String) {
    apply(db, &tenants_file(&[("acme", crm, "acme-site-token")])).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token.key");
    std::fs::write(&file, hex::encode(KEY)).unwrap();
    let extra = format!(
        "[fleet]\ntoken_key_file = {:?}\nreload_every = \"100ms\"\n",
        file.display().to_string()
    );
    (dir, extra)
}

/// Polls `id` in `store` until it is `want` (10 s at most).
async fn wait_op(store: &dyn Store, id: &str, want: Status) -> leadgate::store::Operation {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let op = store.operation(&id.parse().unwrap()).await.unwrap();
        if let Some(op) = op.filter(|op| op.status == want) {
            return op;
        }
        assert!(Instant::now() < deadline, "{id} never became {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `url` read with `token`: its status and body.
async fn scrape(gw: &Gateway, path: &str, token: &str) -> (StatusCode, String) {
    let res = gw
        .http
        .get(format!("{}{path}", gw.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

/// Creates a lead in `crm` as an earlier deployment of Leadgate would have: under the
/// key's local part. Its id.
async fn created_elsewhere(crm: &FakeBitrix24, origin: &str) -> String {
    let res = reqwest::Client::new()
        .post(format!("{}crm.lead.add.json", crm.webhook_url()))
        .json(
            &json!({"fields": {"TITLE": "before the move", "ORIGINATOR_ID": "leadgate",
                                 "ORIGIN_ID": origin}}),
        )
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = res.json().await.unwrap();
    body["result"].as_u64().unwrap().to_string()
}

/// The store's view of tenant `slug`'s rows.
async fn tenant_store(store: &Arc<dyn Store>, slug: &str) -> Arc<dyn Store> {
    let tenants = store.tenants().await.unwrap();
    let t = tenants.iter().find(|t| t.slug == slug).unwrap();
    store.for_tenant(TenantId(t.id))
}
