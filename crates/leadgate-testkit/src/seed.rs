//! A database holding one review case of each kind the console acts on, made through the
//! real store calls the gateway and worker make (nothing is written behind the store's
//! back). Used by the console's tests, its end-to-end test and screenshots; [`lead`] and
//! [`delivery`] make the deliveries the store tests record.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};

use leadgate::domain::EventKind;
use leadgate::domain::{fingerprint, ErrorClass, OperationId, ReviewReason};
use leadgate::store::{
    self, AttemptOutcome, ContactKeys, Failure, NewDelivery, NewEvent, Result, Store,
};

pub const CONNECTOR: &str = "bitrix24";

/// The operation keys of the seeded cases.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// `uncertain_outcome`: the create timed out; the operator confirms the CRM result.
    pub uncertain: OperationId,
    /// `cross_channel_match`: a call after a form; linked to the form's entity.
    pub cross_channel: OperationId,
    /// The completed operation the cross-channel case links to.
    pub linked_target: OperationId,
    pub linked_crm_id: String,
    /// `retries_exhausted`: the operator authorizes one more attempt.
    pub exhausted: OperationId,
    /// `payload_conflict`: same key, changed data; the original is kept.
    pub conflict: OperationId,
    /// `failed_terminal` (validation).
    pub failed: OperationId,
    /// `in_progress` with a lease that ran out.
    pub stale: OperationId,
}

/// A JSON lead of `source` under `key`, as the gateway would record it.
pub fn lead(source: &str, key: &str, payload: Value, at: DateTime<Utc>) -> NewDelivery {
    let name = payload
        .get("name")
        .and_then(Value::as_str)
        .and_then(leadgate::domain::search::display_name);
    NewDelivery {
        operation_id: OperationId::new(source, key).expect("valid key"),
        source: source.into(),
        content_type: Some("application/json".into()),
        raw_body: payload.to_string().into_bytes(),
        payload_hash: fingerprint(&payload, &[]).expect("fingerprint"),
        payload,
        transform_version: 1,
        // The gateway reads the name through the source's field map (here the default:
        // a top-level `name`).
        contact: ContactKeys {
            name,
            ..ContactKeys::default()
        },
        event_time: None,
        received_at: at,
        review: None,
        matching: None,
    }
}

/// A JSON lead of the `site` source under `key`, received now.
pub fn delivery(key: &str, payload: Value) -> NewDelivery {
    lead("site", key, payload, store::local_now())
}

fn form(n: u32, name: &str, phone: &str) -> Value {
    json!({
        "submission_id": format!("{n}"),
        "name": name,
        "phone": phone,
        "email": format!("{}@example.com", name.to_lowercase()),
        "form": "Trial request",
        "utm": {"source": "yandex", "campaign": "winter"},
    })
}

async fn attempt(
    store: &dyn Store,
    at: DateTime<Utc>,
    outcome: impl FnOnce(String) -> (AttemptOutcome, Vec<NewEvent>),
) -> Result<OperationId> {
    let claim = store
        .claim_due(CONNECTOR, "worker:seed", Duration::from_secs(30), at)
        .await?
        .expect("a due operation");
    let id = claim.operation.operation_id.clone();
    let started = NewEvent::new(
        EventKind::AttemptStarted,
        json!({"connector": CONNECTOR, "attempt": claim.operation.attempts}),
    );
    store
        .start_attempt(
            &claim.lease,
            std::time::Duration::from_secs(30),
            std::time::Duration::from_secs(75),
            vec![started],
            at,
        )
        .await?;
    let (outcome, events) = outcome(id.to_string());
    let done = at + TimeDelta::milliseconds(420);
    store
        .finish_attempt(&claim.lease, outcome, events, done)
        .await?;
    Ok(id)
}

fn exchange(id: &str, answer: Value, class: Option<ErrorClass>) -> Vec<NewEvent> {
    let mut response = NewEvent::new(EventKind::CrmResponse, answer);
    response.error_class = class;
    vec![
        NewEvent::new(
            EventKind::CrmRequest,
            json!({"method": "crm.lead.add", "ORIGINATOR_ID": "leadgate", "ORIGIN_ID": id}),
        ),
        response,
    ]
}

/// Fills `store` (freshly migrated) with a day of history and one case of each kind.
pub async fn seed(store: &dyn Store) -> Result<Seeded> {
    let now = store::local_now();
    let t = |minutes_ago: i64| now - TimeDelta::minutes(minutes_ago);

    // A day of ordinary traffic: created leads, technical duplicates, a rate-limit retry.
    for i in 0..36u32 {
        let at = t(1440 - i as i64 * 40);
        let source = if i % 3 == 0 { "tilda" } else { "site" };
        let d = lead(
            source,
            &format!("{}", 9000 + i),
            form(9000 + i, "Client", "+79990000000"),
            at,
        );
        store.record_delivery(d.clone()).await?;
        if i % 4 == 0 {
            let mut dup = d.clone();
            dup.received_at = at + TimeDelta::seconds(5);
            store.record_delivery(dup).await?;
        }
        let claim_at = at + TimeDelta::seconds(1);
        if i % 7 == 0 {
            attempt(store, claim_at, |id| {
                (
                    AttemptOutcome::Retry {
                        failure: Some(Failure {
                            class: ErrorClass::RateLimited,
                            message: "QUERY_LIMIT_EXCEEDED".into(),
                        }),
                        at: claim_at + TimeDelta::seconds(2),
                    },
                    exchange(
                        &id,
                        json!({"error": "QUERY_LIMIT_EXCEEDED"}),
                        Some(ErrorClass::RateLimited),
                    ),
                )
            })
            .await?;
        }
        let crm_id = format!("{}", 5000 + i);
        attempt(store, claim_at + TimeDelta::seconds(3), |id| {
            (
                AttemptOutcome::Created {
                    crm_id: crm_id.clone(),
                },
                exchange(&id, json!({"result": crm_id}), None),
            )
        })
        .await?;
    }

    // The form a caller filled in before calling: completed, entity 7001.
    let mut target = lead("site", "1001", form(1001, "Anna", "+79161234567"), t(95));
    target.contact = ContactKeys {
        phone: Some("+79161234567".into()),
        email: Some("anna@example.com".into()),
        name: None,
    };
    let linked_target = target.operation_id.clone();
    store.record_delivery(target).await?;
    let linked_crm_id = "7001".to_string();
    attempt(store, t(95), |id| {
        (
            AttemptOutcome::Created {
                crm_id: linked_crm_id.clone(),
            },
            exchange(&id, json!({"result": 7001}), None),
        )
    })
    .await?;

    // uncertain_outcome: the create timed out, the lookup could not tell.
    let d = lead("site", "1002", form(1002, "Boris", "+79035550101"), t(80));
    let uncertain = d.operation_id.clone();
    store.record_delivery(d).await?;
    attempt(store, t(80), |id| {
        let mut events = exchange(&id, json!({"timeout_ms": 10000}), Some(ErrorClass::Uncertain));
        events.push(NewEvent::new(EventKind::Reconciliation,
            json!({"verdict": "cannot_tell", "authoritative": false}),
        ));
        (
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure: Some(Failure {
                    class: ErrorClass::Uncertain,
                    message: "timeout after the request was sent (10 s)".into(),
                }),
                detail: json!({"message": "create timed out; lookup by ORIGIN_ID was not authoritative"}),
            },
            events,
        )
    })
    .await?;

    // cross_channel_match: a call from Anna's phone, an hour after her form.
    let mut call = lead(
        "calls",
        "call-7788",
        json!({"call_id": "call-7788", "phone": "+7 916 123-45-67", "duration_s": 94, "line": "sales"}),
        t(35),
    );
    call.contact = ContactKeys {
        phone: Some("+79161234567".into()),
        email: None,
        name: None,
    };
    call.review = Some(ReviewReason::CrossChannelMatch);
    let cross_channel = call.operation_id.clone();
    store.record_delivery(call).await?;

    // retries_exhausted: every attempt failed with a retryable error.
    let d = lead("tilda", "1003", form(1003, "Vera", "+79267770000"), t(60));
    let exhausted = d.operation_id.clone();
    store.record_delivery(d).await?;
    for k in 0..2 {
        let at = t(60 - k * 5);
        attempt(store, at, |id| {
            (
                AttemptOutcome::Retry {
                    failure: Some(Failure {
                        class: ErrorClass::NotSent,
                        message: "connection refused".into(),
                    }),
                    at: at + TimeDelta::minutes(1),
                },
                exchange(
                    &id,
                    json!({"error": "connection refused"}),
                    Some(ErrorClass::NotSent),
                ),
            )
        })
        .await?;
    }
    attempt(store, t(45), |id| {
        (
            AttemptOutcome::Review {
                reason: ReviewReason::RetriesExhausted,
                failure: Some(Failure {
                    class: ErrorClass::NotSent,
                    message: "connection refused".into(),
                }),
                detail: json!({"message": "3 of 3 attempts failed: connection refused"}),
            },
            exchange(
                &id,
                json!({"error": "connection refused"}),
                Some(ErrorClass::NotSent),
            ),
        )
    })
    .await?;

    // payload_conflict: the same submission id redelivered with changed data.
    let original = form(1004, "Gleb", "+79031112233");
    let d = lead("site", "1004", original.clone(), t(30));
    let conflict = d.operation_id.clone();
    store.record_delivery(d).await?;
    attempt(store, t(30), |id| {
        (
            AttemptOutcome::Retry {
                failure: Some(Failure {
                    class: ErrorClass::RateLimited,
                    message: "HTTP 429".into(),
                }),
                at: t(20),
            },
            exchange(&id, json!({"status": 429}), Some(ErrorClass::RateLimited)),
        )
    })
    .await?;
    let mut changed = original;
    changed["name"] = json!("Gleb Petrov");
    changed["phone"] = json!("+79031112234");
    changed["comment"] = json!("please call after 18:00");
    changed["utm"]["campaign"] = json!("spring");
    store
        .record_delivery(lead("site", "1004", changed, t(25)))
        .await?;

    // failed_terminal: the CRM refused the data.
    let d = lead(
        "site",
        "1005",
        json!({"submission_id": "1005", "name": ""}),
        t(20),
    );
    let failed = d.operation_id.clone();
    store.record_delivery(d).await?;
    attempt(store, t(20), |id| {
        (
            AttemptOutcome::Terminal {
                failure: Failure {
                    class: ErrorClass::Validation,
                    message: "TITLE is required".into(),
                },
            },
            exchange(
                &id,
                json!({"error": "TITLE is required"}),
                Some(ErrorClass::Validation),
            ),
        )
    })
    .await?;

    // A worker that died mid-call: in_progress, lease long gone.
    let d = lead("tilda", "1006", form(1006, "Dmitry", "+79995554433"), t(15));
    let stale = d.operation_id.clone();
    store.record_delivery(d).await?;
    store
        .claim_due(CONNECTOR, "worker:died", Duration::from_secs(30), t(15))
        .await?
        .expect("the stale operation is due");

    // The token lost its rights: the connector is paused.
    store
        .pause_connector(CONNECTOR, "auth: expired_token", "worker:1", t(5))
        .await?;

    Ok(Seeded {
        uncertain,
        cross_channel,
        linked_target,
        linked_crm_id: "7001".into(),
        exhausted,
        conflict,
        failed,
        stale,
    })
}

/// `n` leads of one CRM outage (the `outage` source, keys `outage-1`…): each went to the
/// CRM once, found it refusing connections and ended in `retries_exhausted` — the cases a
/// person clears with one bulk retry. Call it before the connector is paused (or on a
/// store without [`seed`]).
pub async fn outage(store: &dyn Store, n: u32) -> Result<Vec<OperationId>> {
    let start = store::local_now() - TimeDelta::minutes(20);
    let mut ids = Vec::with_capacity(n as usize);
    for i in 1..=n {
        let at = start + TimeDelta::seconds(i as i64);
        let name = if i % 2 == 0 { "Ольга" } else { "Olga" };
        let phone = format!("+7916{:07}", i);
        let mut d = lead(
            "outage",
            &format!("outage-{i}"),
            form(20000 + i, name, &phone),
            at,
        );
        // The contact keys intake derives from the form (normalized phone, e-mail, name).
        d.contact = ContactKeys {
            phone: Some(phone),
            email: Some(format!("{}@example.com", name.to_lowercase())),
            name: Some(name.to_owned()),
        };
        store.record_delivery(d).await?;
        ids.push(
            attempt(store, at, |id| {
                (
                    AttemptOutcome::Review {
                        reason: ReviewReason::RetriesExhausted,
                        failure: Some(Failure {
                            class: ErrorClass::NotSent,
                            message: "connection refused".into(),
                        }),
                        detail: json!({"message": "5 of 5 attempts failed: connection refused"}),
                    },
                    exchange(
                        &id,
                        json!({"error": "connection refused"}),
                        Some(ErrorClass::NotSent),
                    ),
                )
            })
            .await?,
        );
    }
    Ok(ids)
}

/// Adds the tenant `slug` to the registry as `leadgate tenant apply` does (its CRM is
/// never called: tests of the console), with one lead of its `site` source and an open
/// `uncertain_outcome` case on it; answers the lead's operation.
pub async fn tenant_with_a_case(store: &std::sync::Arc<dyn Store>, slug: &str) -> OperationId {
    let file = format!(
        r#"
[[tenant]]
slug = "{slug}"
name = "{slug} portal"
[tenant.crm]
kind = "bitrix24"
webhook_url = "http://127.0.0.1:9/rest/1/never-called/"
[[tenant.source]]
name = "site"
key = "json:/submission_id"
token = "{slug}-site-token"
"#
    );
    let wanted = leadgate::config::tenants::parse_toml(&file, None).expect("a tenants file");
    let vault = leadgate::crm::vault::Vault::new([3; 32]);
    leadgate::tenants::apply(&**store, &vault, &wanted, false, false, None, "test")
        .await
        .expect("applied");
    let tenants = store.tenants().await.expect("the registry");
    let id = tenants.iter().find(|t| t.slug == slug).expect("applied").id;
    let tenant = store.for_tenant(leadgate::domain::TenantId(id));
    let key = format!("{slug}-1");
    let mut d = delivery(&key, json!({"submission_id": key, "name": "Tenant Lead"}));
    let tenant_slug = leadgate::domain::TenantSlug::new(slug).expect("a slug");
    d.operation_id = OperationId::new_in(&tenant_slug, "site", &key).expect("a key");
    let op = d.operation_id.clone();
    tenant.record_delivery(d).await.expect("recorded");
    tenant
        .open_review(
            &op,
            ReviewReason::UncertainOutcome,
            "test",
            json!({}),
            tenant.now(),
        )
        .await
        .expect("a case");
    op
}
