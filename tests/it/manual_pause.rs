//! A connector paused by hand (issue 38, point 4): a real gateway with its worker against
//! the fake Bitrix24 and a Slack-compatible webhook over real HTTP. Leads queue and
//! nothing reaches the CRM while it is paused, an attempt already on the wire finishes,
//! no attempt is used, `/metrics` and the alerts say who paused it and why, and resuming
//! sends each lead once. The command line's and the console's parts are in
//! `process.rs`, `console.rs` and the browser tests; who may ask for it on PostgreSQL is
//! `roles.rs`.

use std::time::{Duration, Instant};

use leadgate::store::{Answer, Ask, StoreError};
use leadgate_domain::Refusal;
use leadgate_fakes::bitrix24::Fault;
use leadgate_fakes::webhook::FakeWebhook;
use leadgate_testkit::gateway::*;
use leadgate_testkit::{each_backend, wait_until};
use reqwest::StatusCode;

const REASON: &str = "the portal moves to a new plan until 22:00";

async fn metric(gw: &Gateway, line: &str) -> bool {
    let text = gw
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().any(|l| l == line)
}

each_backend!(
    a_connector_paused_by_hand_queues_leads_and_sends_nothing_until_resumed,
    |db| async move {
        let hook = FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let alerts = format!(
            "[alerts]\ninterval = \"1s\"\npoll_interval = \"50ms\"\nsettle = \"100ms\"\n\
             min_spacing = \"50ms\"\ntimeout = \"1s\"\nretry_delay = \"200ms\"\n\
             max_retry_delay = \"1s\"\n\
             [[alerts.channel]]\nkind = \"webhook\"\nname = \"team\"\nurl = \"{}\"\n",
            hook.url()
        );
        let gw = Gateway::start_extended(&db, &alerts).await;
        let store = gw.store();
        let texts = || -> Vec<String> {
            hook.bodies()
                .into_iter()
                .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        };

        // One lead on the wire to a slow portal (under the 500 ms timeout) when the pause
        // lands: it finishes.
        gw.fake.push_fault(CREATE, Fault::LatencyMs { ms: 400 }, 1);
        let (status, _, _) = gw.post_json("site", &lead("p0")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        gw.wait_status("site:p0", "in_progress").await;
        let ask = |reason: &str| Ask::PauseConnector {
            name: "bitrix24".into(),
            reason: reason.into(),
        };
        // Said, or refused with a sentence and nothing changed.
        for blank in ["", "  \n "] {
            let e = store.perform("olga", ask(blank), store.now()).await;
            assert!(
                matches!(e, Err(StoreError::Refused(Refusal::PauseReasonRequired))),
                "{e:?}"
            );
        }
        assert!(!store
            .connector("bitrix24")
            .await
            .unwrap()
            .is_some_and(|c| c.paused));
        let answer = store
            .perform("olga", ask(&format!("  {REASON} ")), store.now())
            .await
            .unwrap();
        assert_eq!(answer, Answer::Paused { paused: true });
        let c = store.connector("bitrix24").await.unwrap().unwrap();
        assert!(c.paused && c.by_hand, "{c:?}");
        assert_eq!(
            (c.reason.as_deref(), c.changed_by.as_str()),
            (Some(REASON), "olga")
        );
        // A second pause changes nothing, not even who or why.
        let again = store
            .perform("ivan", ask("another reason"), store.now())
            .await
            .unwrap();
        assert_eq!(again, Answer::Paused { paused: false });
        let same = store.connector("bitrix24").await.unwrap().unwrap();
        assert_eq!((same.changed_by, same.since), (c.changed_by, c.since));

        let first = gw.wait_status("site:p0", "completed").await;
        assert_eq!(gw.fake.entities().len(), 1, "{first}");

        // While paused: every lead is accepted and journaled, none is sent.
        let keys: Vec<String> = (1..=5).map(|i| format!("p{i}")).collect();
        for k in &keys {
            let (status, answer, _) = gw.post_json("site", &lead(k)).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        }
        // The worker polls every 20 ms: a second is fifty rounds in which it sends nothing.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "nothing sent while paused");
        for k in &keys {
            let op = store
                .operation(&format!("site:{k}").parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((op.status.as_str(), op.attempts), ("received", 0), "{k}");
        }
        // Shown like an automatic pause, with who and why.
        assert!(metric(&gw, "leadgate_connector_paused{connector=\"bitrix24\"} 1").await);
        assert!(
            metric(
                &gw,
                "leadgate_connector_paused_by_hand{connector=\"bitrix24\"} 1"
            )
            .await
        );
        let m = store
            .metrics(store.now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(m.paused_connectors, vec!["bitrix24".to_owned()]);
        wait_until("the pause alert", async || {
            texts().iter().any(|t| t.contains("paused by hand"))
        })
        .await;
        let alert = texts()
            .into_iter()
            .find(|t| t.contains("paused by hand"))
            .unwrap();
        assert!(
            alert.starts_with("Leadgate: connector bitrix24 is paused by hand\n"),
            "{alert}"
        );
        assert!(alert.contains(&format!("by olga: {REASON}")), "{alert}");

        // Resumed: each lead goes once, on its first attempt.
        let resumed = store
            .perform(
                "olga",
                Ask::ResumeConnector {
                    name: "bitrix24".into(),
                },
                store.now(),
            )
            .await
            .unwrap();
        assert_eq!(resumed, Answer::Resumed { resumed: true });
        for k in &keys {
            gw.wait_status(&format!("site:{k}"), "completed").await;
            let op = store
                .operation(&format!("site:{k}").parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(op.attempts, 1, "{k}");
        }
        assert_eq!(
            gw.fake.entities().len(),
            1 + keys.len(),
            "one entity per lead"
        );
        assert_eq!(gw.fake.calls(CREATE), 1 + keys.len() as u64);
        assert!(!store.connector("bitrix24").await.unwrap().unwrap().by_hand);
        assert!(
            metric(
                &gw,
                "leadgate_connector_paused_by_hand{connector=\"bitrix24\"} 0"
            )
            .await
        );
        wait_until("the resume alert", async || {
            texts()
                .iter()
                .any(|t| t.starts_with("Leadgate: connector bitrix24 resumed"))
        })
        .await;
        gw.stop().await;
    }
);

/// A CRM whose connector a person pauses while the worker waits for its pace: the claim
/// passed its gate before the pause, the call comes after. Counts what reaches it.
struct PausedWhilePacing {
    store: std::sync::Arc<dyn leadgate::store::Store>,
    pause_once: std::sync::atomic::AtomicBool,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl leadgate::crm::Crm for PausedWhilePacing {
    fn connector(&self) -> &str {
        "bitrix24"
    }
    fn lookup_is_authoritative(&self) -> bool {
        true
    }
    async fn pace(&self) -> Result<(), leadgate::crm::CrmError> {
        if self
            .pause_once
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            let ask = Ask::PauseConnector {
                name: "bitrix24".into(),
                reason: REASON.into(),
            };
            self.store
                .perform("olga", ask, self.store.now())
                .await
                .unwrap();
        }
        Ok(())
    }
    async fn create(
        &self,
        _: &leadgate::crm::Lead,
    ) -> (
        Result<String, leadgate::crm::CrmError>,
        leadgate::crm::Exchange,
    ) {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let exchange = leadgate::crm::Exchange {
            request: serde_json::json!({"call": "create"}),
            response: serde_json::json!({"id": n + 1}),
        };
        (Ok((n + 1).to_string()), exchange)
    }
    async fn find(
        &self,
        _: &str,
    ) -> (
        Result<leadgate::crm::Lookup, leadgate::crm::CrmError>,
        leadgate::crm::Exchange,
    ) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let exchange = leadgate::crm::Exchange {
            request: serde_json::json!({"call": "find"}),
            response: serde_json::json!({"result": []}),
        };
        (Ok(leadgate::crm::Lookup::NotFound), exchange)
    }
}

/// Olga resumes the connector.
async fn resume(store: &dyn leadgate::store::Store) {
    let ask = Ask::ResumeConnector {
        name: "bitrix24".into(),
    };
    let answer = store.perform("olga", ask, store.now()).await.unwrap();
    assert_eq!(answer, Answer::Resumed { resumed: true });
}

/// A worker whose CRM is paused by a person while the worker waits for its pace.
fn paused_while_pacing(
    db: &leadgate_testkit::TestDb,
    store: std::sync::Arc<dyn leadgate::store::Store>,
) -> (leadgate::worker::Worker, std::sync::Arc<PausedWhilePacing>) {
    let crm = std::sync::Arc::new(PausedWhilePacing {
        store: store.clone(),
        pause_once: true.into(),
        calls: 0.into(),
    });
    let config =
        leadgate::config::Config::parse(&config_toml(&db.url, "http://127.0.0.1:9/")).unwrap();
    let worker = leadgate::worker::Worker {
        store,
        crm: crm.clone(),
        settings: std::sync::Arc::new(leadgate::worker::WorkerSettings {
            poll_interval: Duration::from_millis(20),
            lease: Duration::from_secs(5),
            call_timeout: Duration::from_secs(2),
            settle: Duration::from_millis(300),
            retry: config.retry.clone(),
            outage: config.outage.clone(),
            concurrency: 1,
            fields: Default::default(),
            look_up_first: false,
        }),
        owner: "worker:test".into(),
        turns: None,
    };
    (worker, crm)
}

each_backend!(
    // Review of the manual pause: the worker asked the connector's row only whether the
    // CRM was reachable, so a lead claimed just before a person paused the connector was
    // still sent after the pause. Nothing goes once it is paused: the lead waits, its
    // attempt not used, and goes once when it is resumed.
    a_lead_claimed_before_the_pause_is_not_sent_after_it,
    |db| async move {
        use std::sync::atomic::Ordering::SeqCst;
        let store = db.store().await;
        store
            .record_delivery(leadgate_testkit::seed::delivery("held", lead("held")))
            .await
            .unwrap();
        let (worker, crm) = paused_while_pacing(&db, store.clone());
        assert!(worker.step().await.unwrap(), "the lead was not claimed");
        assert_eq!(crm.calls.load(SeqCst), 0, "a call left after the pause");
        let id: leadgate::domain::OperationId = "site:held".parse().unwrap();
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(
            (op.status, op.attempts),
            (leadgate::domain::Status::Received, 0),
            "{op:?}"
        );
        let timeline = store.timeline(&id).await.unwrap();
        assert!(
            timeline.iter().any(|e| e.kind == "not_sent"
                && e.detail.to_string().contains("the connector is paused")),
            "{timeline:?}"
        );
        // While paused, the worker takes nothing.
        assert!(!worker.step().await.unwrap());
        assert_eq!(crm.calls.load(SeqCst), 0);
        resume(store.as_ref()).await;
        assert!(worker.step().await.unwrap());
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(
            (op.status, op.attempts, crm.calls.load(SeqCst)),
            (leadgate::domain::Status::Completed, 1, 1),
            "{op:?}"
        );
    }
);

each_backend!(
    // Review of the manual pause: a person's grant ("retry once") that a pause held back
    // was spent with nothing sent, so after the resume the lead went back to the person
    // instead of its one authorized attempt. The grant is given back with the attempt.
    a_persons_grant_held_back_by_a_pause_is_still_there_after_it,
    |db| async move {
        use std::sync::atomic::Ordering::SeqCst;
        let store = db.store().await;
        store
            .record_delivery(leadgate_testkit::seed::delivery("granted", lead("granted")))
            .await
            .unwrap();
        let id: leadgate::domain::OperationId = "site:granted".parse().unwrap();
        let case_id = store
            .open_review(
                &id,
                leadgate::domain::ReviewReason::RetriesExhausted,
                "worker:test",
                serde_json::json!({}),
                store.now(),
            )
            .await
            .unwrap();
        let case = store.cases_of(&id).await.unwrap().remove(0);
        assert_eq!(case.id, case_id);
        store
            .resolve(leadgate::store::Resolve {
                case_id,
                expected_version: case.version,
                actor: "anna".into(),
                comment: None,
                action: leadgate::store::HumanAction::AuthorizeRetry,
                now: store.now(),
                bulk: None,
            })
            .await
            .unwrap();
        let granted = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(granted.retry_grants, 1, "{granted:?}");
        let (worker, crm) = paused_while_pacing(&db, store.clone());
        // The grant's claim may wait for the end of a quiet period: however slow.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !worker.step().await.unwrap() {
            assert!(
                Instant::now() < deadline,
                "the granted lead was never claimed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(crm.calls.load(SeqCst), 0, "a call left after the pause");
        let held = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(
            (held.status, held.retry_grants),
            (leadgate::domain::Status::Received, 1),
            "{held:?}"
        );
        resume(store.as_ref()).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            worker.step().await.unwrap();
            let op = store.operation(&id).await.unwrap().unwrap();
            if op.status == leadgate::domain::Status::Completed {
                assert_eq!(op.retry_grants, 0, "{op:?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "never sent after the resume: {op:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            crm.calls.load(SeqCst),
            1,
            "the one authorized attempt, nothing more"
        );
    }
);
